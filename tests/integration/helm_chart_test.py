#!/usr/bin/python3
"""The Helm chart (helm/paci), rendered by the real helm (scripts/kube-toolchain.sh
builds it from its Go module) and installed on the real control plane
(tests/harness/control_plane.py):

* `helm lint` passes; the chart's copies of deploy/ files (CRD, dashboards, alert
  rules) are real files, byte for byte the originals, and its monitoring objects
  scrape as deploy/prometheus/prometheus.yml does;
* `helm template` with default values renders valid objects, every name derived
  from the release, with the app.kubernetes.io labels and stable selectors; two
  releases in one namespace share no name, cluster-scoped objects included;
* optional maps left empty render valid YAML; values.schema.json refuses a wrong
  type with the key named; NOTES.txt renders;
* the TLS values produce the flags and mounts of mutual TLS end to end
  (coordinator, operator, worker pods through the operator's --worker_secret),
  every flag one that the binaries define;
* on the real kube-apiserver: two releases install side by side (every object
  created, none shared), one upgrades and rolls back while the other is
  untouched, and uninstall leaves nothing but the CRD; the operator's
  ServiceAccount may do what the operator does and no more (`kubectl auth can-i`
  as that account); the documented CRD upgrade step works.

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import base64
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import yaml

import grpc
from harness.control_plane import ControlPlane, kube_bin
from harness.coordinator import Cluster
from harness.paths import BUILD, SOURCE
from paci.v1 import coordinator_pb2 as cpb
from paci.v1 import coordinator_pb2_grpc as cgrpc

CHART = os.path.join(SOURCE, "helm", "paci")
HELM = os.path.join(kube_bin(BUILD), "helm")

# The chart's copies of files kept in deploy/ (the one source: edit there, then copy).
COPIES = {
    "crds/paci.dev_trainingjobs.yaml": "deploy/crd/paci.dev_trainingjobs.yaml",
    "files/alerts.yml": "deploy/prometheus/alerts.yml",
}
for _path in sorted(glob.glob(os.path.join(SOURCE, "deploy", "grafana", "dashboards", "*.json"))):
    COPIES["dashboards/" + os.path.basename(_path)] = os.path.relpath(_path, SOURCE)

COMPONENTS = {"coordinator", "operator", "worker"}
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Namespace"}
TLS_MUTUAL = ["--set", "tls.enabled=true", "--set", "tls.requireClientCerts=true"]
PLAINTEXT = ["--set", "tls.enabled=false", "--set", "insecure=true"]
# The release's own, in its namespace, and those of each namespace TrainingJobs run in.
RELEASE_SECRETS = ("ca", "coordinator-tls", "operator-client-tls")
NAMESPACE_SECRETS = ("worker-tls", "client-tls")
GENERATED_SECRETS = RELEASE_SECRETS + NAMESPACE_SECRETS


def run_renderer(args, release="paci", namespace="paci-system"):
    """`helm template RELEASE CHART --namespace NAMESPACE ARGS...` with the real helm."""
    return subprocess.run([HELM, "template", release, CHART, "--namespace", namespace] + list(args),
                          capture_output=True, text=True, timeout=60)


def render_text(*args, release="paci", namespace="paci-system"):
    r = run_renderer(args, release, namespace)
    if r.returncode != 0:
        raise AssertionError("rendering %s failed:\n%s" % (" ".join(args), r.stderr))
    return r.stdout


def render(*args, release="paci", namespace="paci-system"):
    return [d for d in yaml.safe_load_all(render_text(*args, release=release, namespace=namespace)) if d]


def render_error(*args):
    r = run_renderer(args)
    if r.returncode == 0:
        raise AssertionError("rendering %s succeeded" % " ".join(args))
    return r.stderr


def by_kind(docs):
    out = {}
    for d in docs:
        out.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    return out


def identity(d):
    return (d["kind"], None if d["kind"] in CLUSTER_SCOPED else d["metadata"].get("namespace"),
            d["metadata"]["name"])


def pod_template(deployment):
    return deployment["spec"]["template"]


def container(deployment):
    return pod_template(deployment)["spec"]["containers"][0]


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def defined_flags(*sources):
    """The ABSL_FLAG names a binary's sources define."""
    names = set()
    for source in sources:
        with open(os.path.join(SOURCE, source)) as f:
            names |= set(re.findall(r"ABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)", f.read()))
    return names


COORDINATOR_FLAGS = defined_flags("server/coordinator_main.cc")
# The clients' --coordinator_* flags are defined once, beside the one client.
OPERATOR_FLAGS = defined_flags("operator/operator_main.cc", "common/coordinator_client.cc")
WORKER_FLAGS = defined_flags("worker/worker_main.cc", "common/coordinator_client.cc")


def flags(args):
    """{name: value} of --name=value arguments."""
    out = {}
    for arg in args:
        m = re.match(r"--(\w+)(?:=(.*))?$", arg)
        assert m, arg
        out[m.group(1)] = m.group(2)
    return out


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def mounted_secret_file(deployment, path):
    """(secret name, key) that a file path inside the pod comes from; None if none."""
    spec = pod_template(deployment)["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in container(deployment).get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            secret = volumes[mount["name"]].get("secret")
            if secret is None:
                return None
            key = path[len(prefix):]
            items = secret.get("items")
            if items is not None:
                found = [i["key"] for i in items if i["path"] == key]
                return (secret["secretName"], found[0]) if found else None
            return (secret["secretName"], key)
    return None


class ChartFilesTest(unittest.TestCase):
    def test_copies_of_deploy_files_are_real_files_identical_to_their_originals(self):
        links = [os.path.relpath(os.path.join(d, f), SOURCE) for d, dirs, files in os.walk(CHART)
                 for f in files + dirs if os.path.islink(os.path.join(d, f))]
        self.assertEqual(links, [], "the chart must hold real files (a copied chart directory "
                                    "would dangle): replace the links with copies")
        chart_dashboards = {os.path.basename(p) for p in glob.glob(os.path.join(CHART, "dashboards", "*"))}
        self.assertEqual(chart_dashboards, {os.path.basename(k) for k in COPIES if k.startswith("dashboards/")},
                         "the chart's dashboards/ must be the dashboards of deploy/grafana/dashboards")
        stale = []
        for copy, original in sorted(COPIES.items()):
            with open(os.path.join(SOURCE, original), "rb") as f:
                want = f.read()
            try:
                with open(os.path.join(CHART, copy), "rb") as f:
                    have = f.read()
            except FileNotFoundError:
                have = None
            if have != want:
                stale.append("cp %s helm/paci/%s" % (original, copy))
        self.assertEqual(stale, [], "the chart's copies differ from deploy/, their one source; from the "
                                    "repository root run:\n  " + "\n  ".join(stale))

    def test_every_value_a_template_uses_is_in_values_yaml(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.assertEqual((chart["apiVersion"], chart["name"]), ("v2", "paci"))
        with open(os.path.join(CHART, "values.yaml")) as f:
            values = yaml.safe_load(f)
        used = set()
        for path in glob.glob(os.path.join(CHART, "templates", "*")):
            with open(path) as f:
                used |= set(re.findall(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)", f.read()))
        missing = []
        # A key starting with "_" is a template's memo of the render (paci.generatedTls), no value.
        for ref in sorted(r for r in used if not r.startswith("._")):
            node = values
            for key in ref.strip(".").split("."):
                if not isinstance(node, dict) or key not in node:
                    missing.append(".Values" + ref)
                    break
                node = node[key]
        self.assertEqual(missing, [], "templates use values that values.yaml does not define")
        with open(os.path.join(CHART, "values.schema.json")) as f:
            schema = json.load(f)

        def undocumented(values, schema, prefix):
            out = []
            for key, value in values.items():
                sub = schema.get("properties", {}).get(key)
                if sub is None:
                    out.append(prefix + key)
                elif isinstance(value, dict) and sub.get("properties"):
                    out += undocumented(value, sub, prefix + key + ".")
            return out

        self.assertEqual(undocumented(values, schema, ""), [], "values the schema does not describe")

    def test_docs_tell_how_to_upgrade_the_crd(self):
        with open(os.path.join(SOURCE, "docs", "kubernetes.md")) as f:
            docs = f.read()
        self.assertTrue("kubectl apply --server-side --force-conflicts -f helm/paci/crds/" in docs,
                        "docs/kubernetes.md must give the CRD upgrade step")
        self.assertTrue(re.search(r"never\s+upgrades", docs), "docs/kubernetes.md must say Helm never upgrades crds/")


class RenderTest(unittest.TestCase):
    def test_helm_lint_passes(self):
        r = subprocess.run([HELM, "lint", "--strict", CHART], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("1 chart(s) linted, 0 chart(s) failed", r.stdout)

    def test_default_values_name_every_object_after_the_release_with_standard_labels(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        docs = render(release="prod", namespace="ml")
        kinds = by_kind(docs)
        self.assertEqual(set(kinds), {"ServiceAccount", "ConfigMap", "PersistentVolumeClaim", "ClusterRole",
                                      "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
                                      "PodDisruptionBudget", "Secret", "NetworkPolicy"})
        for d in docs:
            m = d["metadata"]
            self.assertTrue(m["name"].startswith("prod-paci-"), identity(d))
            self.assertLessEqual(len(m["name"]), 63, identity(d))
            if d["kind"] not in CLUSTER_SCOPED:
                self.assertEqual(m["namespace"], "ml", identity(d))
            labels = m["labels"]
            self.assertEqual(labels["app.kubernetes.io/name"], "paci", identity(d))
            self.assertEqual(labels["app.kubernetes.io/instance"], "prod", identity(d))
            self.assertEqual(labels["app.kubernetes.io/version"], chart["appVersion"], identity(d))
            self.assertEqual(labels["app.kubernetes.io/managed-by"], "Helm", identity(d))
            self.assertEqual(labels["helm.sh/chart"], "paci-%s" % chart["version"], identity(d))
            if d["kind"] != "ConfigMap":
                self.assertIn(labels["app.kubernetes.io/component"], COMPONENTS, identity(d))
        self.assertEqual(set(kinds["Deployment"]), {"prod-paci-coordinator", "prod-paci-operator"})
        self.assertEqual(set(kinds["Service"]), {"prod-paci-coordinator", "prod-paci-operator-metrics"})
        # No namespace for TrainingJobs named yet (tls.workerNamespaces): no worker account.
        self.assertEqual(set(kinds["ServiceAccount"]), {"prod-paci-coordinator", "prod-paci-operator"})
        self.assertEqual(set(kinds["ClusterRole"]), {"prod-paci-operator", "prod-paci-operator-capacity"})

        # Selectors: name, instance and component, nothing that changes on upgrade.
        templates = {}
        for name, deployment in kinds["Deployment"].items():
            selector = deployment["spec"]["selector"]["matchLabels"]
            component = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
            self.assertEqual(selector, {"app.kubernetes.io/name": "paci", "app.kubernetes.io/instance": "prod",
                                        "app.kubernetes.io/component": component}, name)
            self.assertTrue(selects(selector, pod_template(deployment)["metadata"]["labels"]), name)
            templates[name] = pod_template(deployment)["metadata"]["labels"]
        for name, service in kinds["Service"].items():
            chosen = [d for d, labels in templates.items() if selects(service["spec"]["selector"], labels)]
            self.assertEqual(len(chosen), 1, "Service %s selects %s" % (name, chosen))
        pdb = kinds["PodDisruptionBudget"]["prod-paci-operator"]
        self.assertEqual(pdb["spec"]["minAvailable"], 1)
        self.assertEqual([d for d, labels in templates.items()
                          if selects(pdb["spec"]["selector"]["matchLabels"], labels)], ["prod-paci-operator"])

        # RBAC: the binding grants the release's role to the release's account.
        binding = kinds["ClusterRoleBinding"]["prod-paci-operator"]
        self.assertEqual(binding["roleRef"]["name"], "prod-paci-operator")
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": "prod-paci-operator",
                                                "namespace": "ml"}])
        lease_binding = kinds["RoleBinding"]["prod-paci-operator-leader-election"]
        self.assertIn(lease_binding["roleRef"]["name"], kinds["Role"])
        for deployment in kinds["Deployment"].values():
            self.assertIn(pod_template(deployment)["spec"]["serviceAccountName"], kinds["ServiceAccount"])

        # The operator reaches this release's coordinator, holds this release's lease.
        operator = flags(container(kinds["Deployment"]["prod-paci-operator"])["args"])
        self.assertEqual(operator["coordinator"], "prod-paci-coordinator.ml.svc:7070")
        self.assertEqual(operator["lease_name"], "prod-paci-operator")
        self.assertEqual(operator["worker_image"], "paci-worker:%s" % chart["appVersion"])
        self.assertEqual(operator["worker_cuda_image"], "paci-worker-cuda:%s" % chart["appVersion"])
        self.assertEqual(kinds["Deployment"]["prod-paci-operator"]["spec"]["replicas"], 2)
        claim = pod_template(kinds["Deployment"]["prod-paci-coordinator"])["spec"]["volumes"][0]
        self.assertEqual(claim["persistentVolumeClaim"]["claimName"], "prod-paci-coordinator-db")
        self.assertIn("prod-paci-coordinator-db", kinds["PersistentVolumeClaim"])

        # Restricted pods.
        for name, deployment in kinds["Deployment"].items():
            pod = pod_template(deployment)["spec"]
            self.assertTrue(pod["securityContext"]["runAsNonRoot"], name)
            self.assertEqual(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault", name)
            c = container(deployment)["securityContext"]
            self.assertEqual((c["capabilities"]["drop"], c["readOnlyRootFilesystem"],
                              c["allowPrivilegeEscalation"]), (["ALL"], True, False), name)

    def test_a_release_named_paci_keeps_the_short_names_and_overrides_apply(self):
        names = {identity(d) for d in render(release="paci")}
        self.assertIn(("Deployment", "paci-system", "paci-operator"), names)
        self.assertIn(("ClusterRole", None, "paci-operator"), names)
        names = {identity(d)[2] for d in render("--set", "fullnameOverride=ml", release="x")}
        self.assertIn("ml-coordinator", names)
        docs = render("--set", "nameOverride=trainer", release="x")
        self.assertIn("x-trainer-operator", {d["metadata"]["name"] for d in docs})
        self.assertTrue(all(d["metadata"]["labels"]["app.kubernetes.io/name"] == "trainer" for d in docs))

    def test_two_releases_in_one_namespace_share_no_name_and_select_only_their_own_pods(self):
        alpha = render(release="alpha", namespace="shared")
        beta = render(release="beta", namespace="shared")
        self.assertEqual({identity(d) for d in alpha} & {identity(d) for d in beta}, set())
        for mine, other in ((alpha, beta), (beta, alpha)):
            mine_kinds, other_kinds = by_kind(mine), by_kind(other)
            other_pods = [pod_template(d)["metadata"]["labels"] for d in other_kinds["Deployment"].values()]
            selectors = [d["spec"]["selector"] for d in mine_kinds["Service"].values()]
            selectors += [d["spec"]["selector"]["matchLabels"] for d in mine_kinds["Deployment"].values()]
            selectors += [d["spec"]["selector"]["matchLabels"]
                          for d in mine_kinds["PodDisruptionBudget"].values()]
            for selector in selectors:
                self.assertFalse(any(selects(selector, labels) for labels in other_pods), selector)
            lease = flags(container(mine_kinds["Deployment"][mine[0]["metadata"]["labels"]
                                                             ["app.kubernetes.io/instance"] + "-paci-operator"])
                          ["args"])["lease_name"]
            self.assertNotIn(lease, {flags(container(d)["args"]).get("lease_name")
                                     for d in other_kinds["Deployment"].values()})

    def test_watch_namespace_scopes_the_role_and_the_worker_account(self):
        kinds = by_kind(render("--set", "operator.watchNamespace=team-a",
                               "--set", "metrics.serviceMonitor.enabled=true", release="alpha"))
        # Cluster-wide only the gang gate's read of the nodes and what pods ask of them.
        self.assertEqual(list(kinds["ClusterRole"]), ["alpha-paci-operator-capacity"])
        self.assertEqual(kinds["ClusterRole"]["alpha-paci-operator-capacity"]["rules"],
                         [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "watch"]}])
        self.assertEqual(kinds["Role"]["alpha-paci-operator"]["metadata"]["namespace"], "team-a")
        self.assertEqual(kinds["RoleBinding"]["alpha-paci-operator"]["metadata"]["namespace"], "team-a")
        self.assertEqual(kinds["ServiceAccount"]["alpha-paci-worker"]["metadata"]["namespace"], "team-a")
        self.assertEqual(flags(container(kinds["Deployment"]["alpha-paci-operator"])["args"])["watch_namespace"],
                         "team-a")
        self.assertEqual(kinds["PodMonitor"]["alpha-paci-workers"]["spec"]["namespaceSelector"],
                         {"matchNames": ["team-a"]})

    def test_trainingjobs_run_only_where_the_release_keeps_no_keys(self):
        docs = render("--set", "tls.workerNamespaces={team-a,team-b}", "--set", "worker.allowedSecrets={hf-token}",
                      release="alpha", namespace="ml")
        kinds = by_kind(docs)
        operator_d = kinds["Deployment"]["alpha-paci-operator"]
        operator = flags(container(operator_d)["args"])
        # The operator refuses TrainingJobs in its own namespace, and any Secret but those allowed.
        self.assertEqual(operator["reserved_namespaces"], "$(POD_NAMESPACE)")
        env = {e["name"]: e for e in container(operator_d)["env"]}
        self.assertEqual(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace")
        self.assertEqual(operator["worker_allowed_secrets"], "hf-token")
        # A TrainingJob asks for no priority above operator.maxPriority (0): the coordinator runs the
        # operator's jobs at any.
        self.assertEqual(operator["max_priority"], "0")
        self.assertNotIn("worker_allowed_secrets", flags(container(by_kind(render())["Deployment"]["paci-operator"])
                                                         ["args"]))
        # What the operator makes, it makes only in the namespaces TrainingJobs run in; cluster-wide it reads.
        roles = sorted((d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Role")
        self.assertEqual(roles, [("ml", "alpha-paci-operator-leader-election"), ("team-a", "alpha-paci-operator"),
                                 ("team-b", "alpha-paci-operator")])
        for d in docs:
            if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "alpha-paci-operator":
                self.assertEqual(d["subjects"], [{"kind": "ServiceAccount", "name": "alpha-paci-operator",
                                                  "namespace": "ml"}])
        for rule in kinds["ClusterRole"]["alpha-paci-operator"]["rules"]:
            allowed = {"get", "list", "watch"} | ({"update", "patch"} if rule["apiGroups"] == ["paci.dev"] else set())
            self.assertLessEqual(set(rule["verbs"]), allowed, rule)
        accounts = sorted((d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs
                          if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "alpha-paci-worker")
        self.assertEqual(accounts, [("team-a", "alpha-paci-worker"), ("team-b", "alpha-paci-worker")])
        # The release's own namespace is never one TrainingJobs run in.
        for args in (["--set", "tls.workerNamespaces={team-a,paci-system}"], ["--set", "operator.watchNamespace=paci-system"]):
            self.assertIn('must not name the release\'s namespace "paci-system"', render_error(*args), args)

    def test_kueue_enabled_passes_the_flag_and_grants_workloads_and_no_more(self):
        plain = by_kind(render("--set", "operator.watchNamespace=team-a", release="alpha"))
        self.assertEqual(flags(container(plain["Deployment"]["alpha-paci-operator"])["args"])["kueue"], "false")
        self.assertNotIn("kueue.x-k8s.io", json.dumps(plain["Role"]) + json.dumps(plain["ClusterRole"]))
        kinds = by_kind(render("--set", "operator.watchNamespace=team-a", "--set", "kueue.enabled=true",
                               release="alpha"))
        self.assertEqual(flags(container(kinds["Deployment"]["alpha-paci-operator"])["args"])["kueue"], "true")
        self.assertEqual(flags(container(kinds["Deployment"]["alpha-paci-operator"])["args"])[
            "kueue_workload_slices"], "false")
        sliced = by_kind(render("--set", "operator.watchNamespace=team-a", "--set", "kueue.enabled=true",
                                "--set", "kueue.workloadSlices=true", release="alpha"))
        self.assertEqual(flags(container(sliced["Deployment"]["alpha-paci-operator"])["args"])[
            "kueue_workload_slices"], "true")
        role = [r for r in kinds["Role"]["alpha-paci-operator"]["rules"] if "kueue.x-k8s.io" in r["apiGroups"]]
        self.assertEqual(role, [
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["create", "delete"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get", "update"]}])
        self.assertEqual(kinds["ClusterRole"]["alpha-paci-operator-capacity"]["rules"], [
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list", "watch"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloadpriorityclasses"], "verbs": ["get"]}])

    def test_one_operator_replica_has_no_disruption_budget(self):
        for args in (["--set", "operator.leaderElection.enabled=false"],
                     ["--set", "operator.leaderElection.replicas=1"],
                     ["--set", "operator.podDisruptionBudget.enabled=false"]):
            kinds = by_kind(render(*args))
            self.assertNotIn("PodDisruptionBudget", kinds, args)
        kinds = by_kind(render("--set", "operator.leaderElection.enabled=false"))
        self.assertEqual(kinds["Deployment"]["paci-operator"]["spec"]["replicas"], 1)
        self.assertNotIn("lease_name", flags(container(kinds["Deployment"]["paci-operator"])["args"]))

    def test_optional_maps_left_empty_render_valid_yaml(self):
        empty = {
            "dashboards": {"labels": None, "annotations": {}},
            "metrics": {"serviceMonitor": {"enabled": True, "labels": {}},
                        "prometheusRule": {"enabled": True, "labels": None}},
            "coordinator": {"resources": None, "nodeSelector": {}, "tolerations": [], "extraArgs": []},
            "operator": {"resources": None, "nodeSelector": None, "tolerations": None, "extraArgs": None},
            "imagePullSecrets": None,
        }
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump(empty, f)
            f.flush()
            kinds = by_kind(render("-f", f.name))
        dashboards = kinds["ConfigMap"]["paci-grafana-dashboards"]
        self.assertNotIn("grafana_dashboard", dashboards["metadata"]["labels"])
        self.assertEqual(set(dashboards["data"]), {os.path.basename(k) for k in COPIES
                                                   if k.startswith("dashboards/")})
        for d in kinds["Deployment"].values():
            self.assertNotIn("resources", container(d))
            self.assertNotIn("nodeSelector", pod_template(d)["spec"])
        self.assertIn("paci-coordinator", kinds["ServiceMonitor"])
        # And filled in: extra labels and annotations where Grafana's sidecar looks.
        kinds = by_kind(render("--set", "dashboards.labels.team=ml", "--set", "dashboards.namespace=grafana",
                               "--set", "dashboards.annotations.grafana_folder=paci"))
        dashboards = kinds["ConfigMap"]["paci-grafana-dashboards"]
        self.assertEqual(dashboards["metadata"]["namespace"], "grafana")
        self.assertEqual(dashboards["metadata"]["labels"]["team"], "ml")
        self.assertEqual(dashboards["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(dashboards["metadata"]["annotations"], {"grafana_folder": "paci"})

    def test_the_schema_refuses_a_wrong_type_naming_the_key(self):
        cases = [
            (["--set", "operator.leaderElection.replicas=two"],
             "at '/operator/leaderElection/replicas': got string, want integer"),
            (["--set", "tls.enabled=yes"], "at '/tls/enabled': got string, want boolean"),
            (["--set", "dashboards.labels.grafana_dashboard=1"],
             "at '/dashboards/labels/grafana_dashboard': got number, want string"),
            (["--set", "imagePullSecrets=regcred"], "at '/imagePullSecrets': got string, want array"),
            (["--set", "coordinator.image.pullPolicy=Sometimes"],
             "at '/coordinator/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"),
            (["--set", "tls.requireClientCert=true"],
             "at '/tls': additional properties 'requireClientCert' not allowed"),
            (["--set", "worker.image.pullPolicy=Always"],
             "at '/worker/image': additional properties 'pullPolicy' not allowed"),
            (["--set", "operator.watchNamespace=Team_A"], "at '/operator/watchNamespace'"),
            (["--set", "tls.renewBeforeDays=0"], "at '/tls/renewBeforeDays': minimum: got 0, want 1"),
        ]
        for args, message in cases:
            error = render_error(*args)
            self.assertIn("values don't meet the specifications of the schema(s)", error, args)
            self.assertIn(message, error, args)
        # The right types pass.
        render("--set", "operator.leaderElection.replicas=3", "--set-string", "dashboards.labels.grafana_dashboard=1",
               "--set", "imagePullSecrets[0].name=regcred", "--set", "operator.watchNamespace=team-a")

    def test_image_pull_secrets_reach_every_pod_the_chart_makes_and_the_worker_account(self):
        kinds = by_kind(render("--set", "imagePullSecrets[0].name=regcred", "--set", "tls.workerNamespaces={team-a}",
                               "--set", "operator.image.pullPolicy=Always",
                               "--set", "worker.image.repository=registry.example/paci-worker",
                               "--set", "worker.image.tag=1.2",
                               "--set", "worker.cudaImage.repository=registry.example/paci-worker-cuda"))
        for d in kinds["Deployment"].values():
            self.assertEqual(pod_template(d)["spec"]["imagePullSecrets"], [{"name": "regcred"}])
        self.assertEqual(kinds["ServiceAccount"]["paci-worker"]["imagePullSecrets"], [{"name": "regcred"}])
        operator = container(kinds["Deployment"]["paci-operator"])
        self.assertEqual(operator["imagePullPolicy"], "Always")
        self.assertEqual(flags(operator["args"])["worker_image"], "registry.example/paci-worker:1.2")
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            app_version = yaml.safe_load(f)["appVersion"]
        self.assertEqual(flags(operator["args"])["worker_cuda_image"],
                         "registry.example/paci-worker-cuda:%s" % app_version)

    def test_every_flag_the_chart_passes_is_defined_by_its_binary(self):
        for args in ([], TLS_MUTUAL, PLAINTEXT, ["--set", "tls.requireClientCerts=false", "--set", "insecure=true"],
                     ["--set", "operator.watchNamespace=a"], ["--set", "networkPolicy.enabled=false"]):
            kinds = by_kind(render(*args))
            self.assertLessEqual(set(flags(container(kinds["Deployment"]["paci-coordinator"])["args"])),
                                 COORDINATOR_FLAGS, args)
            operator = flags(container(kinds["Deployment"]["paci-operator"])["args"])
            self.assertLessEqual(set(operator), OPERATOR_FLAGS, args)
            for item in filter(None, (operator.get("worker_secret_flags") or "").split(",")):
                self.assertIn(item.split("=", 1)[1], WORKER_FLAGS, args)

    def test_tls_values_configure_mutual_tls_end_to_end(self):
        kinds = by_kind(render(*TLS_MUTUAL, release="alpha", namespace="ml"))
        coordinator_d = kinds["Deployment"]["alpha-paci-coordinator"]
        operator_d = kinds["Deployment"]["alpha-paci-operator"]
        coordinator = flags(container(coordinator_d)["args"])
        operator = flags(container(operator_d)["args"])

        # The coordinator serves TLS and requires client certificates of the CA.
        self.assertEqual({k: coordinator[k] for k in ("tls_cert", "tls_key", "tls_ca")},
                         {"tls_cert": "/etc/paci/tls/tls.crt", "tls_key": "/etc/paci/tls/tls.key",
                          "tls_ca": "/etc/paci/tls/ca.crt"})
        for flag, key in (("tls_cert", "tls.crt"), ("tls_key", "tls.key"), ("tls_ca", "ca.crt")):
            self.assertEqual(mounted_secret_file(coordinator_d, coordinator[flag]),
                             ("alpha-paci-coordinator-tls", key), flag)
        self.assertIn("tcpSocket", container(coordinator_d)["readinessProbe"])  # gRPC probes are plaintext

        # No administrator unless named: a certificate of the CA with another name is refused.
        self.assertNotIn("admin_identities", coordinator)
        named = by_kind(render(*TLS_MUTUAL, "--set", "coordinator.adminIdentities={alice,ops-bot}"))
        self.assertEqual(flags(container(named["Deployment"]["paci-coordinator"])["args"])["admin_identities"],
                         "alice,ops-bot")

        # The operator trusts that CA and presents its own certificate.
        self.assertEqual(mounted_secret_file(operator_d, operator["coordinator_tls_ca"]),
                         ("alpha-paci-coordinator-tls", "ca.crt"))
        self.assertEqual(mounted_secret_file(operator_d, operator["coordinator_tls_cert"]),
                         ("alpha-paci-operator-client-tls", "tls.crt"))
        self.assertEqual(mounted_secret_file(operator_d, operator["coordinator_tls_key"]),
                         ("alpha-paci-operator-client-tls", "tls.key"))
        volumes = {v["name"]: v for v in pod_template(operator_d)["spec"]["volumes"]}
        self.assertEqual(volumes["tls"]["secret"]["items"], [{"key": "ca.crt", "path": "ca.crt"}],
                         "the operator must not mount the coordinator's private key")
        for mount in container(operator_d)["volumeMounts"] + container(coordinator_d)["volumeMounts"]:
            if mount["name"] in ("tls", "client-tls"):
                self.assertTrue(mount["readOnly"], mount)

        # Worker pods: the operator mounts the worker Secret and passes each key as a flag.
        self.assertEqual(operator["worker_secret"], "alpha-paci-worker-tls")
        self.assertEqual(operator["worker_secret_flags"],
                         "ca.crt=coordinator_tls_ca,tls.crt=coordinator_tls_cert,tls.key=coordinator_tls_key")
        # ... and their stage links are mutual TLS with that Secret's certificate.
        self.assertEqual(operator["worker_link_tls"], "true")

        # TLS without client certificates: the server asks for none, nobody presents one.
        kinds = by_kind(render("--set", "tls.requireClientCerts=false", "--set", "insecure=true",
                               "--set", "tls.secretName=my-tls", "--set", "tls.workerSecretName=my-workers"))
        coordinator = flags(container(kinds["Deployment"]["paci-coordinator"])["args"])
        operator = flags(container(kinds["Deployment"]["paci-operator"])["args"])
        self.assertIn("tls_cert", coordinator)
        self.assertNotIn("tls_ca", coordinator)
        self.assertNotIn("coordinator_tls_cert", operator)
        self.assertNotIn("worker_link_tls", operator)  # the workers hold no certificate of their own
        self.assertEqual(mounted_secret_file(kinds["Deployment"]["paci-operator"], operator["coordinator_tls_ca"]),
                         ("my-tls", "ca.crt"))
        self.assertEqual((operator["worker_secret"], operator["worker_secret_flags"]), ("my-workers", "ca.crt=coordinator_tls_ca"))

        self.assertIn("insecure", coordinator)

        # No TLS: plaintext everywhere, gRPC probes, the coordinator told it is insecure.
        kinds = by_kind(render(*PLAINTEXT))
        self.assertEqual(set(kinds["Secret"]), {"paci-operator-worker-token-key"})  # no certificates
        coordinator = flags(container(kinds["Deployment"]["paci-coordinator"])["args"])
        self.assertFalse({"tls_cert", "tls_ca"} & set(coordinator))
        self.assertIn("insecure", coordinator)
        self.assertFalse({"coordinator_tls_ca", "worker_secret"}
                         & set(flags(container(kinds["Deployment"]["paci-operator"])["args"])))
        self.assertIn("grpc", container(kinds["Deployment"]["paci-coordinator"])["readinessProbe"])

    def test_without_mutual_tls_the_chart_refuses_unless_told_insecure(self):
        for args in (["--set", "tls.enabled=false"], ["--set", "tls.requireClientCerts=false"]):
            error = render_error(*args)
            self.assertIn("tls.enabled and tls.requireClientCerts must stay true", error, args)
            self.assertIn("Set insecure=true", error, args)
        self.assertNotIn("insecure", flags(container(by_kind(render())["Deployment"]["paci-coordinator"])["args"]))

    def test_the_generated_certificates_serve_mutual_tls_to_the_operator_and_workers_only(self):
        secrets = {}  # by namespace and name: the worker Secret's name is the same in each namespace
        for d in render("--set", "tls.workerNamespaces={team-a,team-b}", release="alpha", namespace="ml"):
            if d["kind"] == "Secret":
                secrets[(d["metadata"]["namespace"], d["metadata"]["name"])] = d
        self.assertEqual(set(secrets), {("ml", "alpha-paci-" + n) for n in RELEASE_SECRETS}
                         | {(ns, "alpha-paci-" + s) for ns in ("team-a", "team-b") for s in NAMESPACE_SECRETS}
                         | {("ml", "alpha-paci-operator-worker-token-key")})
        del secrets[("ml", "alpha-paci-operator-worker-token-key")]
        with tempfile.TemporaryDirectory() as d:
            def write(secret, key, namespace="ml"):
                path = os.path.join(d, "%s-%s-%s" % (namespace, secret, key))
                with open(path, "wb") as f:
                    f.write(base64.b64decode(secrets[(namespace, "alpha-paci-" + secret)]["data"][key]))
                return path
            ca = write("ca", "tls.crt")
            for secret in GENERATED_SECRETS[1:]:
                namespace = "team-a" if secret in NAMESPACE_SECRETS else "ml"
                self.assertEqual(read_bytes(write(secret, "ca.crt", namespace)), read_bytes(ca), secret)
                verified = subprocess.run(["openssl", "verify", "-CAfile", ca, write(secret, "tls.crt", namespace)],
                                          capture_output=True, text=True)
                self.assertEqual(verified.returncode, 0, verified.stdout + verified.stderr)
            # The clients' common names are their identities; a worker's binds it to its namespace.
            for secret, namespace, name in (("operator-client-tls", "ml", "system:paci:operator"),
                                            ("worker-tls", "team-a", "system:paci:worker:team-a"),
                                            ("worker-tls", "team-b", "system:paci:worker:team-b"),
                                            ("client-tls", "team-a", "system:paci:tenant:team-a")):
                subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in",
                                          write(secret, "tls.crt", namespace)], capture_output=True, text=True).stdout
                self.assertIn("CN = " + name, subject, (secret, namespace))
                if secret == "worker-tls":  # the name stage links check, as a server's and a client's
                    ext = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName,extendedKeyUsage",
                                          "-in", write(secret, "tls.crt", namespace)], capture_output=True,
                                         text=True).stdout
                    self.assertIn("DNS:paci-worker." + namespace, ext)
                    self.assertIn("TLS Web Server Authentication, TLS Web Client Authentication", ext)
            names = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                                    write("coordinator-tls", "tls.crt")], capture_output=True, text=True).stdout
            self.assertIn("DNS:alpha-paci-coordinator.ml.svc,", names)
            # The coordinator pod's own Secret has its key; the operator mounts only ca.crt of it.
            self.assertEqual(sorted(secrets[("ml", "alpha-paci-coordinator-tls")]["data"]),
                             ["ca.crt", "tls.crt", "tls.key"])

            # The real coordinator serves with them: the operator's and a worker's certificate
            # get in, a client with none or with another release's is refused in the handshake.
            other = {d["metadata"]["name"]: d for d in render("--set", "tls.workerNamespaces={team-a}", release="beta",
                                                              namespace="ml") if d["kind"] == "Secret"}
            stranger = {}
            for key in ("tls.crt", "tls.key"):
                stranger[key] = base64.b64decode(other["beta-paci-worker-tls"]["data"][key])
            cluster = Cluster(d, workers=0, extra=["--tls_cert=" + write("coordinator-tls", "tls.crt"),
                                                   "--tls_key=" + write("coordinator-tls", "tls.key"),
                                                   "--tls_ca=" + write("coordinator-tls", "ca.crt")],
                              credentials=grpc.ssl_channel_credentials(
                                  root_certificates=read_bytes(ca),
                                  private_key=read_bytes(write("operator-client-tls", "tls.key")),
                                  certificate_chain=read_bytes(write("operator-client-tls", "tls.crt"))),
                              target_name="alpha-paci-coordinator.ml.svc")
            try:
                self.assertEqual(list(cluster.stub.ListJobs(cpb.ListJobsRequest(), timeout=20).jobs), [])
                self.assertTrue(cluster.wait_for_log(r"\(mutual TLS, "), "".join(cluster.logs))

                def list_jobs(key=None, crt=None):
                    channel = grpc.secure_channel(cluster.address, grpc.ssl_channel_credentials(
                        root_certificates=read_bytes(ca), private_key=key, certificate_chain=crt),
                        options=(("grpc.ssl_target_name_override", "alpha-paci-coordinator.ml.svc"),))
                    try:
                        return cgrpc.CoordinatorStub(channel).ListJobs(cpb.ListJobsRequest(), timeout=20)
                    finally:
                        channel.close()
                # A worker's certificate gets through the handshake, and is no client's.
                worker = lambda key: read_bytes(write("worker-tls", key, "team-b"))  # noqa: E731
                with self.assertRaises(grpc.RpcError) as err:
                    list_jobs(worker("tls.key"), worker("tls.crt"))
                self.assertEqual(err.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
                self.assertIn('"system:paci:worker:team-b" is a worker\'s', err.exception.details())
                # A namespace's client certificate lists that namespace's jobs only: none yet.
                tenant = lambda key: read_bytes(write("client-tls", key, "team-a"))  # noqa: E731
                self.assertEqual(list(list_jobs(tenant("tls.key"), tenant("tls.crt")).jobs), [])
                for key, crt in ((None, None), (stranger["tls.key"], stranger["tls.crt"])):
                    with self.assertRaises(grpc.RpcError) as err:
                        list_jobs(key, crt)
                    self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE)
            finally:
                cluster.stop()

    def test_network_policies_open_the_coordinator_to_the_operator_and_workers_only(self):
        kinds = by_kind(render("--set-json", 'networkPolicy.coordinatorClients=[{"namespaceSelector":'
                               '{"matchLabels":{"team":"ml"}}}]',
                               "--set-json", 'networkPolicy.metricsClients=[{"namespaceSelector":'
                               '{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]',
                               release="alpha", namespace="ml"))
        policy = kinds["NetworkPolicy"]["alpha-paci-coordinator"]["spec"]
        coordinator = kinds["Deployment"]["alpha-paci-coordinator"]
        operator = kinds["Deployment"]["alpha-paci-operator"]
        self.assertTrue(selects(policy["podSelector"]["matchLabels"], pod_template(coordinator)["metadata"]["labels"]))
        self.assertFalse(selects(policy["podSelector"]["matchLabels"], pod_template(operator)["metadata"]["labels"]))
        self.assertEqual(policy["policyTypes"], ["Ingress"])
        grpc_rule, metrics_rule = policy["ingress"]
        self.assertEqual(grpc_rule["ports"], [{"port": "grpc"}])
        # /metrics names every namespace's jobs: the release's namespace and the peers named only.
        self.assertEqual(metrics_rule, {"ports": [{"port": "metrics"}], "from": [
            {"podSelector": {}},
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]})
        peers = grpc_rule["from"]
        self.assertTrue(selects(peers[0]["podSelector"]["matchLabels"], pod_template(operator)["metadata"]["labels"]))
        self.assertNotIn("namespaceSelector", peers[0])  # the release's own operator only
        self.assertEqual(peers[1], {"namespaceSelector": {}, "podSelector": {"matchLabels": {
            "app.kubernetes.io/name": "paci-worker"}}})
        self.assertEqual(peers[2], {"namespaceSelector": {"matchLabels": {"team": "ml"}}})
        self.assertEqual(flags(container(operator)["args"])["network_policies"], "true")
        kinds = by_kind(render("--set", "networkPolicy.enabled=false"))
        self.assertNotIn("NetworkPolicy", kinds)
        self.assertEqual(flags(container(kinds["Deployment"]["paci-operator"])["args"])["network_policies"], "false")

    def test_monitoring_objects_scrape_as_the_shipped_prometheus_config(self):
        with open(os.path.join(SOURCE, "deploy", "prometheus", "prometheus.yml")) as f:
            jobs = {j["job_name"]: j for j in yaml.safe_load(f)["scrape_configs"]}
        with open(os.path.join(SOURCE, "deploy", "prometheus", "alerts.yml")) as f:
            alerts = yaml.safe_load(f)
        kinds = by_kind(render("--set", "metrics.serviceMonitor.enabled=true",
                               "--set", "metrics.prometheusRule.enabled=true", release="alpha"))
        self.assertEqual(kinds["PrometheusRule"]["alpha-paci"]["spec"], alerts)
        endpoints = {}
        for kind, key in (("ServiceMonitor", "endpoints"), ("PodMonitor", "podMetricsEndpoints")):
            for monitor in kinds[kind].values():
                for endpoint in monitor["spec"][key]:
                    job = [r["replacement"] for r in endpoint.get("relabelings", [])
                           if r.get("targetLabel") == "job"]
                    self.assertEqual(len(job), 1, monitor["metadata"]["name"])
                    endpoints[job[0]] = (monitor, endpoint)
        self.assertEqual(set(endpoints), set(jobs), "one monitor endpoint per job of prometheus.yml")

        def camel(rule):
            names = {"source_labels": "sourceLabels", "target_label": "targetLabel"}
            return {names.get(k, k): v for k, v in rule.items()}

        problems = []
        for name, job in sorted(jobs.items()):
            monitor, endpoint = endpoints[name]
            where = "%s (%s)" % (name, monitor["metadata"]["name"])
            if bool(job.get("honor_labels")) != bool(endpoint.get("honorLabels")):
                problems.append("%s: honor_labels %s, honorLabels %s"
                                % (where, job.get("honor_labels"), endpoint.get("honorLabels")))
            # Target labels prometheus.yml adds, which the Prometheus Operator does not by itself.
            copied = monitor["spec"].get("targetLabels", []) + monitor["spec"].get("podTargetLabels", [])
            made = {re.sub(r"[^a-zA-Z0-9_]", "_", label) for label in copied}
            made |= {r["targetLabel"] for r in endpoint.get("relabelings", []) if "targetLabel" in r}
            for rule in job.get("relabel_configs", []):
                label = rule.get("target_label")
                if label and not label.startswith("__") and label not in ("namespace", "pod") \
                        and label not in made:
                    problems.append("%s: no target label %s" % (where, label))
            want = [camel(r) for r in job.get("metric_relabel_configs", [])]
            if want != endpoint.get("metricRelabelings", []):
                problems.append("%s: metric_relabel_configs %s, metricRelabelings %s"
                                % (where, want, endpoint.get("metricRelabelings")))
        self.assertEqual(problems, [], "helm/paci/templates/monitoring.yaml must scrape as "
                                       "deploy/prometheus/prometheus.yml does")
        # The worker PodMonitor finds pods by the label the operator gives every worker pod.
        podmonitor = kinds["PodMonitor"]["alpha-paci-workers"]
        with open(os.path.join(SOURCE, "operator", "reconcile", "job_objects.cc")) as f:
            self.assertIn('labels["paci.dev/trainingjob"] = name;', f.read())
        self.assertEqual(podmonitor["spec"]["selector"],
                         {"matchExpressions": [{"key": "paci.dev/trainingjob", "operator": "Exists"}]})


class ClusterTest(unittest.TestCase):
    """The chart installed with the real helm on the real control plane. No Node runs here:
    the chart's pods stay Pending (operator_e2e_test.py runs pods on real kubelets, the chart's
    coordinator Deployment among them)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="helm-chart-test-")
        cls.plane = ControlPlane(cls.dir, BUILD).start()
        try:
            cls.install_prerequisites()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def install_prerequisites(cls):
        # The Prometheus Operator's kinds, as far as installing the chart needs them (their
        # schemas are not checked here: any object of these kinds is accepted).
        for plural, kind in (("servicemonitors", "ServiceMonitor"), ("podmonitors", "PodMonitor"),
                             ("prometheusrules", "PrometheusRule")):
            crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": "%s.monitoring.coreos.com" % plural},
                   "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                            "names": {"plural": plural, "singular": kind.lower(), "kind": kind,
                                      "listKind": kind + "List"},
                            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                                "openAPIV3Schema": {"type": "object",
                                                    "x-kubernetes-preserve-unknown-fields": True}}}]}}
            cls.kubectl_ok("apply", "-f", "-", stdin=json.dumps(crd))
        for namespace in ("ml", "team-a", "team-b"):
            cls.kubectl_ok("create", "namespace", namespace)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.plane.stop()
        finally:
            shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def kubectl(cls, *args, stdin=None):
        return cls.plane.kubectl(*args, stdin=stdin, check=False)

    @classmethod
    def kubectl_ok(cls, *args, stdin=None):
        r = cls.kubectl(*args, stdin=stdin)
        assert r.returncode == 0, "kubectl %s: %s" % (" ".join(args), r.stderr)
        return r.stdout

    def helm(self, *args):
        r = self.plane.helm(*args, check=False)
        self.assertEqual(r.returncode, 0, "helm %s: %s%s" % (" ".join(args), r.stdout, r.stderr))
        return r.stdout

    def release_objects(self, release):
        """(kind, namespace, name) of every object labelled with the release, and its CRD."""
        listed = json.loads(self.kubectl_ok(
            "get", "deployments,services,serviceaccounts,configmaps,persistentvolumeclaims,roles,rolebindings,"
            "poddisruptionbudgets,servicemonitors,podmonitors,prometheusrules,clusterroles,"
            "clusterrolebindings,secrets,networkpolicies", "-A", "-l", "app.kubernetes.io/instance=" + release, "-o", "json"))
        return sorted(identity(d) for d in listed["items"])

    def test_two_releases_side_by_side_upgrade_rollback_and_uninstall(self):
        monitoring = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true"]
        self.helm("install", "alpha", CHART, "--namespace", "ml", *monitoring)
        self.helm("install", "beta", CHART, "--namespace", "ml", *monitoring, *TLS_MUTUAL)
        # The CRD is the one object releases share (Helm installs crds/ once, never upgrades them).
        self.assertIn("trainingjobs.paci.dev", self.kubectl_ok("get", "crd", "-o", "name"))
        for release, extra in (("alpha", []), ("beta", TLS_MUTUAL)):
            docs = render(*monitoring, *extra, release=release, namespace="ml")
            self.assertEqual(self.release_objects(release), sorted(identity(d) for d in docs), release)
        self.assertFalse(set(self.release_objects("alpha")) & set(self.release_objects("beta")))
        listed = self.helm("list", "--namespace", "ml", "-o", "json")
        self.assertEqual(sorted((r["name"], r["status"], r["revision"]) for r in json.loads(listed)
                                if r["name"] in ("alpha", "beta")),
                         [("alpha", "deployed", "1"), ("beta", "deployed", "1")])

        # An upgrade of one release (replicas, an image tag): its objects change, the other's do not.
        def snapshot(release):
            out = json.loads(self.kubectl_ok("get", "deployments", "-n", "ml", "-l",
                                             "app.kubernetes.io/instance=" + release, "-o", "json"))
            return {d["metadata"]["name"]: (d["spec"]["replicas"], d["spec"]["template"]["spec"]["containers"][0]
                                            ["image"], d["metadata"]["generation"]) for d in out["items"]}
        alpha_before, beta_before = snapshot("alpha"), snapshot("beta")
        self.helm("upgrade", "alpha", CHART, "--namespace", "ml", *monitoring,
                  "--set", "operator.leaderElection.replicas=3", "--set", "coordinator.image.tag=0.2.0")
        alpha_after = snapshot("alpha")
        self.assertEqual(alpha_after["alpha-paci-operator"][0], 3)
        self.assertEqual(alpha_after["alpha-paci-coordinator"][1], "paci-coordinator:0.2.0")
        self.assertEqual(snapshot("beta"), beta_before)
        # Rollback to revision 1 restores it (a third revision).
        self.helm("rollback", "alpha", "1", "--namespace", "ml")
        restored = snapshot("alpha")
        self.assertEqual({k: v[:2] for k, v in restored.items()}, {k: v[:2] for k, v in alpha_before.items()})
        history = json.loads(self.helm("history", "alpha", "--namespace", "ml", "-o", "json"))
        self.assertEqual([(h["revision"], h["status"]) for h in history],
                         [(1, "superseded"), (2, "superseded"), (3, "deployed")])

        # Uninstall leaves nothing of the release but the CRD (and the claim-less namespace).
        for release in ("alpha", "beta"):
            self.helm("uninstall", release, "--namespace", "ml", "--wait", "--timeout", "120s")
            self.assertEqual(self.release_objects(release), [], release)
        self.assertIn("trainingjobs.paci.dev", self.kubectl_ok("get", "crd", "-o", "name"))
        self.assertFalse({"alpha", "beta"} & set(self.helm("list", "--namespace", "ml", "-q").split()))

    def test_generated_certificates_stay_on_upgrade_and_are_renewed_before_they_end(self):
        self.helm("install", "gamma", CHART, "--namespace", "ml", "--set", "operator.watchNamespace=team-a")

        def certificates():
            out = {}
            for namespace in ("ml", "team-a"):
                listed = json.loads(self.kubectl_ok("get", "secrets", "-n", namespace, "-l",
                                                    "app.kubernetes.io/instance=gamma", "-o", "json"))
                for d in listed["items"]:
                    if d["metadata"]["name"] == "gamma-paci-operator-worker-token-key":
                        worker_token_keys.append(d["data"]["key"])
                        continue
                    out[d["metadata"]["name"][len("gamma-paci-"):]] = (
                        base64.b64decode(d["data"]["tls.crt"]), int(d["metadata"]["annotations"]["paci.dev/not-after"]))
            return out
        worker_token_keys = []  # the key each job's worker token is derived from, at each look

        def checksum(component):
            d = json.loads(self.kubectl_ok("get", "deployment", "-n", "ml", "gamma-paci-" + component, "-o", "json"))
            return pod_template(d)["metadata"]["annotations"]["paci.dev/tls-checksum"]

        first = certificates()
        self.assertEqual(set(first), set(GENERATED_SECRETS))  # the worker Secret in team-a
        # The namespace TrainingJobs run in holds its workers' and its users' certificates and nothing
        # of the release's: the CA's key, the operator's certificate and the worker-token key stay in ml.
        in_team_a = json.loads(self.kubectl_ok("get", "secrets", "-n", "team-a", "-o", "json"))["items"]
        self.assertEqual(sorted(d["metadata"]["name"] for d in in_team_a),
                         ["gamma-paci-client-tls", "gamma-paci-worker-tls"])
        ca_key = json.loads(self.kubectl_ok("get", "secret", "-n", "ml", "gamma-paci-ca", "-o", "json"))
        for d in in_team_a:
            self.assertNotEqual(d["data"]["tls.key"], ca_key["data"]["tls.key"], d["metadata"]["name"])
        year = 365 * 86400
        self.assertAlmostEqual(first["coordinator-tls"][1] - time.time(), year, delta=3600)
        self.assertAlmostEqual(first["ca"][1] - time.time(), 10 * year, delta=3600)
        sums = (checksum("coordinator"), checksum("operator"))
        # An upgrade keeps every certificate, and so the pods.
        self.helm("upgrade", "gamma", CHART, "--namespace", "ml", "--set", "operator.watchNamespace=team-a",
                  "--set", "operator.leaderElection.replicas=3")
        self.assertEqual(certificates(), first)
        self.assertEqual((checksum("coordinator"), checksum("operator")), sums)
        # One that finds less than renewBeforeDays left renews the certificates from the same CA,
        # and the pods that mount them roll.
        self.helm("upgrade", "gamma", CHART, "--namespace", "ml", "--set", "operator.watchNamespace=team-a",
                  "--set", "tls.renewBeforeDays=400")
        renewed = certificates()
        self.assertEqual(renewed["ca"], first["ca"])
        for name in GENERATED_SECRETS[1:]:
            self.assertNotEqual(renewed[name][0], first[name][0], name)
        self.assertNotEqual(checksum("coordinator"), sums[0])
        self.assertNotEqual(checksum("operator"), sums[1])
        with tempfile.TemporaryDirectory() as d:
            for name in ("ca", "coordinator-tls"):
                with open(os.path.join(d, name), "wb") as f:
                    f.write(renewed[name][0])
            verified = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(d, "ca"),
                                       os.path.join(d, "coordinator-tls")], capture_output=True, text=True)
            self.assertEqual(verified.returncode, 0, verified.stdout + verified.stderr)
        # A CA near its end is made anew, with every certificate.
        self.helm("upgrade", "gamma", CHART, "--namespace", "ml", "--set", "operator.watchNamespace=team-a",
                  "--set", "tls.renewBeforeDays=3650")
        again = certificates()
        for name in GENERATED_SECRETS:
            self.assertNotEqual(again[name][0], renewed[name][0], name)
        # The worker token key was made once and kept through every upgrade.
        self.assertEqual(len(worker_token_keys), 4)
        self.assertEqual(len(set(worker_token_keys)), 1, worker_token_keys)
        self.assertEqual(len(base64.b64decode(worker_token_keys[0])), 64)
        self.helm("uninstall", "gamma", "--namespace", "ml", "--wait", "--timeout", "120s")
        self.assertEqual(certificates(), {})

    def test_notes_name_the_release_its_secrets_and_the_crd_upgrade_step(self):
        notes = self.helm("install", "alpha", CHART, "--namespace", "ml", "--dry-run=server")
        notes = notes[notes.index("NOTES:"):]
        self.assertIn('release "alpha" in namespace "ml"', notes)
        self.assertIn("alpha-paci-coordinator.ml.svc", notes)
        self.assertIn("kubectl apply --server-side --force-conflicts", notes)
        self.assertIn("every namespace", notes)
        self.assertNotIn("<no value>", notes)
        # By default the chart made the certificates: the NOTES name them and where they are.
        self.assertIn("No namespace is set up for TrainingJobs yet", notes)
        with_team_b = self.notes("--set", "tls.workerNamespaces={team-b}")
        for secret in ("alpha-paci-ca in ml", "alpha-paci-coordinator-tls in ml", "alpha-paci-worker-tls in team-b",
                       "TrainingJobs run in team-b", "Never in \"ml\": it holds the release's CA",
                       "alpha-paci-operator-client-tls in ml", "DNS:alpha-paci-coordinator.ml.svc"):
            self.assertIn(secret, with_team_b)
        self.assertNotIn("INSECURE", notes)
        # With Secrets of your own, the names the NOTES ask for are the names mounted.
        notes = self.notes("--set", "tls.generate=false")
        self.assertIn("Create these Secrets", notes)
        for secret in ("alpha-paci-coordinator-tls", "alpha-paci-operator-client-tls", "alpha-paci-worker-tls",
                       "DNS:alpha-paci-coordinator.ml.svc"):
            self.assertIn(secret, notes)
        self.assertIn("INSECURE: the coordinator runs without TLS", self.notes(*PLAINTEXT))

    def notes(self, *args):
        notes = self.helm("install", "alpha", CHART, "--namespace", "ml", "--dry-run=server", *args)
        notes = notes[notes.index("NOTES:"):]
        self.assertNotIn("<no value>", notes)
        return notes

    def test_the_operator_account_may_do_what_the_operator_does_and_no_more(self):
        # One release watching team-a only: a Role there, not a ClusterRole.
        self.helm("install", "scoped", CHART, "--namespace", "ml", "--set", "operator.watchNamespace=team-a")
        account = "system:serviceaccount:ml:scoped-paci-operator"

        def can(*args):
            r = self.kubectl("auth", "can-i", "--as=" + account, *args)
            self.assertIn(r.stdout.strip(), ("yes", "no"), r.stderr)
            return r.stdout.strip() == "yes"

        # What the operator does, in the namespace it serves.
        for verb, resource in (("watch", "trainingjobs.paci.dev"), ("patch", "trainingjobs.paci.dev/status"),
                               ("update", "trainingjobs.paci.dev/finalizers"), ("create", "pods"),
                               ("delete", "pods"), ("list", "pods"), ("patch", "pods"), ("create", "services"),
                               ("create", "events"), ("watch", "networkpolicies.networking.k8s.io"),
                               ("create", "networkpolicies.networking.k8s.io"),
                               # Each job's worker token Secret, made and never read back.
                               ("create", "secrets")):
            self.assertTrue(can(verb, resource, "-n", "team-a"), "%s %s in team-a" % (verb, resource))
        # The dataset initializer's progress: the last line of its pod's log.
        self.assertTrue(can("get", "pods", "-n", "team-a", "--subresource=log"))
        self.assertTrue(can("update", "leases.coordination.k8s.io", "-n", "ml"))
        # The gang gate's room check: nodes, and every namespace's pods, read only.
        self.assertTrue(can("list", "nodes"))
        self.assertTrue(can("watch", "pods", "-n", "team-b"))
        # Nothing else: no Secret read anywhere, no pods outside the namespace it serves, no RBAC.
        for verb, resource, namespace, *more in (("get", "secrets", "team-a"), ("list", "secrets", "ml"),
                                          ("watch", "secrets", "team-a"), ("create", "secrets", "team-b"),
                                          ("create", "pods", "team-b"), ("create", "pods", "ml"),
                                          ("patch", "pods", "team-b"), ("patch", "nodes", "team-a"),
                                          ("list", "trainingjobs.paci.dev", "team-b"),
                                          ("create", "trainingjobs.paci.dev", "team-a"),
                                          ("create", "rolebindings", "team-a"), ("update", "leases", "team-a"),
                                          ("get", "pods", "team-a", "--subresource=exec"),
                                          ("get", "pods", "team-b", "--subresource=log")):
            self.assertFalse(can(verb, resource, "-n", namespace, *more),
                             "%s %s in %s %s" % (verb, resource, namespace, " ".join(more)))
        # A token the server issued for that account is refused the same way, by the real server.
        kubeconfig = self.plane.service_account_kubeconfig("ml", "scoped-paci-operator")
        r = self.plane.kubectl("get", "secrets", "-n", "team-a", kubeconfig=kubeconfig, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('secrets is forbidden: User "system:serviceaccount:ml:scoped-paci-operator" cannot list '
                      'resource "secrets" in API group "" in the namespace "team-a"', r.stderr)
        r = self.plane.kubectl("get", "trainingjobs", "-n", "team-a", kubeconfig=kubeconfig, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        # Watching every namespace: a ClusterRole to read TrainingJobs and what they own, and the
        # rights to make pods only in the namespaces TrainingJobs run in: never kube-system, never
        # the release's own namespace, no Secret read anywhere.
        self.helm("install", "wide", CHART, "--namespace", "team-b", "--set", "tls.workerNamespaces={team-a}")
        account = "system:serviceaccount:team-b:wide-paci-operator"
        for verb, resource, namespace, *more in (("create", "pods", "team-a"), ("delete", "pods", "team-a"),
                                                 ("patch", "pods", "team-a"), ("create", "secrets", "team-a"),
                                                 ("get", "pods", "team-a", "--subresource=log"),
                                                 ("watch", "trainingjobs.paci.dev", "kube-system"),
                                                 ("list", "pods", "kube-system")):  # the gang gate
            self.assertTrue(can(verb, resource, "-n", namespace, *more),
                            "%s %s in %s %s" % (verb, resource, namespace, " ".join(more)))
        for verb, resource, namespace, *more in (("create", "pods", "kube-system"), ("delete", "pods", "kube-system"),
                                                 ("patch", "pods", "kube-system"), ("create", "pods", "team-b"),
                                                 ("create", "pods", "default"), ("create", "secrets", "kube-system"),
                                                 ("create", "secrets", "team-b"), ("get", "secrets", "team-b"),
                                                 ("get", "secrets", "team-a"), ("create", "services", "kube-system"),
                                                 ("create", "networkpolicies.networking.k8s.io", "kube-system"),
                                                 ("get", "pods", "kube-system", "--subresource=log"),
                                                 ("get", "pods", "kube-system", "--subresource=exec")):
            self.assertFalse(can(verb, resource, "-n", namespace, *more),
                             "%s %s in %s %s" % (verb, resource, namespace, " ".join(more)))
        # A release in a namespace TrainingJobs run in is refused: the CA's key would be there.
        r = self.plane.helm("install", "bad", CHART, "--namespace", "team-b", "--set",
                            "tls.workerNamespaces={team-b}", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("must not name the release's namespace \"team-b\"", r.stderr)
        for release, namespace in (("scoped", "ml"), ("wide", "team-b")):
            self.helm("uninstall", release, "--namespace", namespace)

    def test_the_server_refuses_a_deployment_whose_selector_misses_its_pods(self):
        docs = render(release="gamma", namespace="ml")
        deployment = by_kind(docs)["Deployment"]["gamma-paci-operator"]
        deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "coordinator"
        r = self.kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("`selector` does not match template `labels`", r.stderr)

    def test_the_documented_crd_upgrade_step(self):
        crds = os.path.join(CHART, "crds")
        self.kubectl_ok("apply", "-f", crds)
        out = self.kubectl_ok("apply", "--server-side", "--force-conflicts", "-f", crds + "/")
        self.assertIn("customresourcedefinition.apiextensions.k8s.io/trainingjobs.paci.dev serverside-applied", out)
        self.assertIn("trainingjobs", self.kubectl_ok("api-resources", "--api-group", "paci.dev"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
