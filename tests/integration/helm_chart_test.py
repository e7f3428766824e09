#!/usr/bin/python3
"""The Helm chart (helm/paci), rendered as Helm renders it and applied.

No helm binary is packaged for Debian, so tests/helm/render.go, a small
`helm template` built on the libraries Helm's engine is built on (Go's
text/template, sprig, sigs.k8s.io/yaml, gojsonschema for values.schema.json),
renders the chart; the test builds it with Debian's Go (GOPATH mode, no
network) into the build directory. Then:

* the chart's copies of deploy/ files (CRD, dashboards, alert rules) are real
  files, byte for byte the originals, and its monitoring objects scrape as
  deploy/prometheus/prometheus.yml does;
* default values render valid objects, every name derived from the release,
  with the app.kubernetes.io labels and stable selectors; two releases in one
  namespace share no name, cluster-scoped objects included;
* optional maps left empty render valid YAML; values.schema.json refuses a wrong
  type with the key named; NOTES.txt renders;
* the TLS values produce the flags and mounts of mutual TLS end to end
  (coordinator, operator, worker pods through the operator's --worker_secret),
  every flag one that the binaries define;
* `kubectl apply --dry-run=client` accepts the output, and the test API server
  (tests/kube/apiserver.py) takes two releases side by side, every object
  created, none shared; the documented CRD upgrade step works.

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

SOURCE = os.path.abspath(os.environ.get("PACI_SOURCE_DIR", "."))
BUILD = os.path.abspath(os.environ.get("PACI_BUILD_DIR", "build"))
CHART = os.path.join(SOURCE, "helm", "paci")
KUBE = os.path.join(SOURCE, "tests", "kube")
RENDER_DIR = os.path.join(BUILD, "helm-render")
RENDERER = os.path.join(RENDER_DIR, "paci-helm-render")
PYTHON = "/usr/bin/python3"
sys.path.insert(0, KUBE)

from apiserver_process import ApiServerProcess  # noqa: E402

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


def build_renderer():
    """Builds tests/helm into build/helm-render (Go's cache there too); seconds when cached."""
    go = shutil.which("go")
    if not go:
        raise AssertionError("go is not installed: scripts/install-deps.sh installs golang-go and the "
                             "Go libraries the renderer needs")
    os.makedirs(RENDER_DIR, exist_ok=True)
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode", GOFLAGS="",
               GOCACHE=os.path.join(RENDER_DIR, "go-cache"), CGO_ENABLED="0")
    r = subprocess.run([go, "build", "-o", RENDERER, "."], cwd=os.path.join(SOURCE, "tests", "helm"),
                       env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError("building the chart renderer failed:\n" + r.stderr)
    return RENDERER


def run_renderer(args, release="paci", namespace="paci-system"):
    return subprocess.run([RENDERER, "--name", release, "--namespace", namespace] + list(args) + [CHART],
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
OPERATOR_FLAGS = defined_flags("operator/operator_main.cc")
WORKER_FLAGS = defined_flags("worker/worker_main.cc")


def flags(args):
    """{name: value} of --name=value arguments."""
    out = {}
    for arg in args:
        m = re.match(r"--(\w+)(?:=(.*))?$", arg)
        assert m, arg
        out[m.group(1)] = m.group(2)
    return out


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
        for ref in sorted(used):
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
    @classmethod
    def setUpClass(cls):
        build_renderer()

    def test_default_values_name_every_object_after_the_release_with_standard_labels(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        docs = render(release="prod", namespace="ml")
        kinds = by_kind(docs)
        self.assertEqual(set(kinds), {"ServiceAccount", "ConfigMap", "PersistentVolumeClaim", "ClusterRole",
                                      "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
                                      "PodDisruptionBudget"})
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
        self.assertEqual(set(kinds["ServiceAccount"]),
                         {"prod-paci-coordinator", "prod-paci-operator", "prod-paci-worker"})
        self.assertEqual(set(kinds["ClusterRole"]), {"prod-paci-operator"})

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
        self.assertNotIn("ClusterRole", kinds)
        self.assertEqual(kinds["Role"]["alpha-paci-operator"]["metadata"]["namespace"], "team-a")
        self.assertEqual(kinds["RoleBinding"]["alpha-paci-operator"]["metadata"]["namespace"], "team-a")
        self.assertEqual(kinds["ServiceAccount"]["alpha-paci-worker"]["metadata"]["namespace"], "team-a")
        self.assertEqual(flags(container(kinds["Deployment"]["alpha-paci-operator"])["args"])["watch_namespace"],
                         "team-a")
        self.assertEqual(kinds["PodMonitor"]["alpha-paci-workers"]["spec"]["namespaceSelector"],
                         {"matchNames": ["team-a"]})

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
             "operator.leaderElection.replicas: Invalid type. Expected: integer, given: string"),
            (["--set", "tls.enabled=yes"], "tls.enabled: Invalid type. Expected: boolean, given: string"),
            (["--set", "dashboards.labels.grafana_dashboard=1"],
             "dashboards.labels.grafana_dashboard: Invalid type. Expected: string, given: integer"),
            (["--set", "imagePullSecrets=regcred"], "imagePullSecrets: Invalid type. Expected: array"),
            (["--set", "coordinator.image.pullPolicy=Sometimes"], "coordinator.image.pullPolicy"),
            (["--set", "tls.requireClientCert=true"],
             "tls: Additional property requireClientCert is not allowed"),
            (["--set", "worker.image.pullPolicy=Always"],
             "worker.image: Additional property pullPolicy is not allowed"),
            (["--set", "operator.watchNamespace=Team_A"], "operator.watchNamespace"),
        ]
        for args, message in cases:
            error = render_error(*args)
            self.assertIn("values don't meet the specifications of the schema(s)", error, args)
            self.assertIn(message, error, args)
        # The right types pass.
        render("--set", "operator.leaderElection.replicas=3", "--set-string", "dashboards.labels.grafana_dashboard=1",
               "--set", "imagePullSecrets[0].name=regcred", "--set", "operator.watchNamespace=team-a")

    def test_image_pull_secrets_reach_every_pod_the_chart_makes_and_the_worker_account(self):
        kinds = by_kind(render("--set", "imagePullSecrets[0].name=regcred",
                               "--set", "operator.image.pullPolicy=Always",
                               "--set", "worker.image.repository=registry.example/paci-worker",
                               "--set", "worker.image.tag=1.2"))
        for d in kinds["Deployment"].values():
            self.assertEqual(pod_template(d)["spec"]["imagePullSecrets"], [{"name": "regcred"}])
        self.assertEqual(kinds["ServiceAccount"]["paci-worker"]["imagePullSecrets"], [{"name": "regcred"}])
        operator = container(kinds["Deployment"]["paci-operator"])
        self.assertEqual(operator["imagePullPolicy"], "Always")
        self.assertEqual(flags(operator["args"])["worker_image"], "registry.example/paci-worker:1.2")

    def test_every_flag_the_chart_passes_is_defined_by_its_binary(self):
        for args in ([], TLS_MUTUAL, ["--set", "tls.enabled=true"], ["--set", "operator.watchNamespace=a"]):
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
                         "ca.crt=tls_ca,tls.crt=coordinator_tls_cert,tls.key=coordinator_tls_key")

        # The names the NOTES ask for are the names mounted.
        notes = render_text("--notes", *TLS_MUTUAL, release="alpha", namespace="ml")
        for secret in ("alpha-paci-coordinator-tls", "alpha-paci-operator-client-tls", "alpha-paci-worker-tls",
                       "DNS:alpha-paci-coordinator.ml.svc"):
            self.assertIn(secret, notes)

        # TLS without client certificates: the server asks for none, nobody presents one.
        kinds = by_kind(render("--set", "tls.enabled=true", "--set", "tls.secretName=my-tls",
                               "--set", "tls.workerSecretName=my-workers"))
        coordinator = flags(container(kinds["Deployment"]["paci-coordinator"])["args"])
        operator = flags(container(kinds["Deployment"]["paci-operator"])["args"])
        self.assertIn("tls_cert", coordinator)
        self.assertNotIn("tls_ca", coordinator)
        self.assertNotIn("coordinator_tls_cert", operator)
        self.assertEqual(mounted_secret_file(kinds["Deployment"]["paci-operator"], operator["coordinator_tls_ca"]),
                         ("my-tls", "ca.crt"))
        self.assertEqual((operator["worker_secret"], operator["worker_secret_flags"]), ("my-workers", "ca.crt=tls_ca"))

        # No TLS: plaintext everywhere, gRPC probes.
        kinds = by_kind(render())
        self.assertFalse({"tls_cert", "tls_ca"} & set(flags(container(kinds["Deployment"]["paci-coordinator"])["args"])))
        self.assertFalse({"coordinator_tls_ca", "worker_secret"}
                         & set(flags(container(kinds["Deployment"]["paci-operator"])["args"])))
        self.assertIn("grpc", container(kinds["Deployment"]["paci-coordinator"])["readinessProbe"])

    def test_notes_render_with_the_release_names_and_the_crd_upgrade_step(self):
        notes = render_text("--notes", release="alpha", namespace="ml")
        self.assertIn('release "alpha" in namespace "ml"', notes)
        self.assertIn("alpha-paci-coordinator.ml.svc", notes)
        self.assertIn("kubectl apply --server-side --force-conflicts", notes)
        self.assertIn("every namespace", notes)
        self.assertNotIn("<no value>", notes)

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

    def test_renderer_fails_as_helm_does_on_invalid_yaml_and_required_values(self):
        with tempfile.TemporaryDirectory() as tmp:
            chart = os.path.join(tmp, "bad")
            os.makedirs(os.path.join(chart, "templates"))
            with open(os.path.join(chart, "Chart.yaml"), "w") as f:
                f.write("apiVersion: v2\nname: bad\nversion: 0.1.0\n")
            with open(os.path.join(chart, "values.yaml"), "w") as f:
                f.write("labels: {}\nname: \"\"\n")
            with open(os.path.join(chart, "templates", "cm.yaml"), "w") as f:
                f.write("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels:\n"
                        "    a: b\n    {{- toYaml .Values.labels | nindent 4 }}\n")
            with open(os.path.join(chart, "templates", "req.yaml"), "w") as f:
                f.write("{{- if .Values.check }}\nname: {{ required \"name is required\" .Values.name }}\n"
                        "{{- end }}\n")
            r = subprocess.run([RENDERER, chart], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("YAML parse error on bad/templates/cm.yaml", r.stderr)
            r = subprocess.run([RENDERER, "--set", "check=true", "--set", "labels=null", chart],
                               capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertRegex(r.stderr, r"execution error at \(bad/templates/req.yaml:2:\d+\): name is required")


class ClusterTest(unittest.TestCase):
    """The rendered objects against kubectl and the test API server."""

    @classmethod
    def setUpClass(cls):
        if not shutil.which("kubectl"):
            raise unittest.SkipTest("kubectl not installed")
        build_renderer()
        cls.dir = tempfile.mkdtemp(prefix="helm-chart-test-")
        cls.api = ApiServerProcess(cls.dir)
        cls.url, cls.kubeconfig, cls.env = cls.api.url, cls.api.kubeconfig, cls.api.env
        # The Prometheus Operator's kinds, as far as applying the chart needs them.
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
        for namespace in ("ml", "team-a"):
            cls.kubectl_ok("apply", "-f", "-", stdin=json.dumps(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}))

    @classmethod
    def tearDownClass(cls):
        try:
            cls.api.stop()
        finally:
            shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def kubectl(cls, *args, stdin=None):
        return subprocess.run(["kubectl", "--kubeconfig", cls.kubeconfig, "--cache-dir",
                               os.path.join(cls.dir, "cache"), "--request-timeout", "20s"] + list(args),
                              input=stdin, capture_output=True, text=True, env=cls.env, timeout=120)

    @classmethod
    def kubectl_ok(cls, *args, stdin=None):
        r = cls.kubectl(*args, stdin=stdin)
        assert r.returncode == 0, "kubectl %s: %s" % (" ".join(args), r.stderr)
        return r.stdout

    def apply(self, manifest, *args):
        """kubectl apply of the manifest; {"kind/name": verb} from kubectl's lines."""
        out = self.kubectl_ok("apply", "-f", "-", *args, stdin=manifest)
        result = {}
        for line in out.splitlines():
            m = re.match(r"^(\S+) (created|configured|unchanged|serverside-applied)", line)
            self.assertTrue(m, line)
            result[m.group(1)] = m.group(2)
        return result

    def test_two_releases_side_by_side_in_one_namespace(self):
        monitoring = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true"]
        alpha = render_text("--include-crds", *monitoring, release="alpha", namespace="ml")
        beta = render_text("--include-crds", *monitoring, *TLS_MUTUAL, release="beta", namespace="ml")

        # The CRD is the one object releases share (Helm installs crds/ once).
        crd = "customresourcedefinition.apiextensions.k8s.io/trainingjobs.paci.dev"

        # kubectl's client-side dry run takes every object of both.
        for manifest in (alpha, beta):
            dry = self.apply(manifest, "--dry-run=client")
            dry.pop(crd)
            self.assertEqual(set(dry.values()), {"created"}, dry)

        # For real: every object of each release is created; none of beta's existed.
        first = self.apply(alpha)
        self.assertIn(first.pop(crd), ("created", "configured", "unchanged"))
        self.assertEqual(set(first.values()), {"created"}, first)
        second = self.apply(beta)
        self.assertEqual(second.pop(crd), "unchanged")
        self.assertEqual(set(second.values()), {"created"}, second)
        self.assertEqual(len(first), len(second))
        for release, manifest in (("alpha", alpha), ("beta", beta)):
            docs = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] != "CustomResourceDefinition"]
            listed = json.loads(self.kubectl_ok(
                "get", "deployments,services,serviceaccounts,configmaps,persistentvolumeclaims,roles,rolebindings,"
                "poddisruptionbudgets,servicemonitors,podmonitors,prometheusrules,clusterroles,"
                "clusterrolebindings", "-A", "-l", "app.kubernetes.io/instance=" + release, "-o", "json"))
            self.assertEqual(sorted(identity(d) for d in listed["items"]), sorted(identity(d) for d in docs))

        # An upgrade of one release (new replicas, image tag): its objects change, the
        # immutable selectors and role references stay, the other release is untouched.
        upgraded = render_text(*monitoring, "--set", "operator.leaderElection.replicas=3",
                               "--set", "coordinator.image.tag=0.2.0", release="alpha", namespace="ml")
        changed = self.apply(upgraded)
        self.assertEqual(changed["deployment.apps/alpha-paci-operator"], "configured")
        self.assertEqual(changed["deployment.apps/alpha-paci-coordinator"], "configured")
        untouched = self.apply(beta)
        # kubectl always patches a PodDisruptionBudget's selector (its patch strategy is
        # "replace"), so it says "configured" for an unchanged one, on a real server too.
        self.assertEqual(untouched.pop("poddisruptionbudget.policy/beta-paci-operator"), "configured")
        self.assertEqual(set(untouched.values()), {"unchanged"}, untouched)
        self.assertEqual(len(untouched), len(second))

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
