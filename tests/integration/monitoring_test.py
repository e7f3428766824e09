#!/usr/bin/python3
"""The deployment and monitoring configuration, checked with the real tools:
kubectl's kustomize renders deploy/, promtool checks the Prometheus config and
the alert rules and runs their unit tests, and a real Prometheus, configured
with the cluster scrape config (Kubernetes discovery replaced by file discovery
that carries the same labels), scrapes a real coordinator and two real workers
training a job, after which every panel of the Grafana dashboards (but the
operator's, which need a running operator) must return data.

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

from harness import monitoring
from harness.control_plane import kube_bin
from harness.coordinator import Cluster, phase, spec
from harness.paths import BUILD, SOURCE

DEPLOY = os.path.join(SOURCE, "deploy")
PROMETHEUS_DIR = os.path.join(DEPLOY, "prometheus")
DASHBOARDS = sorted(glob.glob(os.path.join(DEPLOY, "grafana", "dashboards", "*.json")))
TRAINING_DASHBOARD = os.path.join(DEPLOY, "grafana", "dashboards", "paci-training.json")
HEALTH_DASHBOARD = os.path.join(DEPLOY, "grafana", "dashboards", "paci-health.json")

# Every metric the binaries export (worker/runtime/stage_metrics.cc,
# server/coordinator_metrics.cc, operator/operator_metrics.cc), without
# histogram suffixes, and the labels of each besides the target's: each
# figure once, by its owner, and no label named like a target label but the
# operator's namespace (the TrainingJob's, as kube-state-metrics has it).
WORKER_METRICS = {
    "paci_weight_drift_steps": {"training_job", "stage", "replica"},
    "paci_weight_drift_bound_steps": {"training_job", "stage", "replica"},
    "paci_weight_drift_limit_steps": {"training_job", "stage", "replica"},
    "paci_optimizer_steps_total": {"training_job", "stage", "replica"},
    "paci_microbatches_total": {"training_job", "stage", "replica", "pass"},
    "paci_stage_busy_seconds_total": {"training_job", "stage", "replica"},
    "paci_stage_idle_seconds_total": {"training_job", "stage", "replica"},
    "paci_activation_bytes_sent_total": {"training_job", "stage", "replica", "direction"},
    "paci_tokens_total": {"training_job", "stage", "replica"},
    "paci_checkpoints_written_total": {"training_job", "stage", "replica"},
    "paci_gradient_norm": {"training_job", "stage", "replica"},
    "paci_nonfinite_steps_skipped_total": {"training_job", "stage", "replica"},
    "paci_allreduce_seconds": {"training_job", "stage", "replica"}}
COORDINATOR_METRICS = {
    "paci_coordinator_jobs": {"phase"},
    "paci_coordinator_workers": {"state"},
    "paci_coordinator_submissions_total": set(),
    "paci_coordinator_scheduling_latency_seconds": set(),
    "paci_coordinator_jobs_removed_total": {"reason"},
    "paci_coordinator_store_errors_total": set(),
    "paci_job_restarts_total": {"training_job"},
    "paci_job_step": {"training_job"},
    "paci_job_train_loss": {"training_job"},
    "paci_job_validation_loss": {"training_job"},
    "paci_job_stages": {"training_job"},
    "paci_job_replicas": {"training_job"},
    "paci_job_resizes_total": {"training_job"},
    "paci_job_resize_seconds_total": {"training_job"}}
OPERATOR_METRICS = {
    "paci_operator_reconciles_total": {"result"},
    "paci_operator_reconcile_duration_seconds": set(),
    "paci_operator_is_leader": set(),
    "paci_operator_kube_requests_total": {"verb", "code"},
    "paci_operator_watch_restarts_total": {"resource", "reason"},
    "paci_operator_workqueue_depth": set(),
    "paci_operator_trainingjob_info": {"namespace", "trainingjob", "training_job"},
    "paci_operator_trainingjob_status_phase": {"namespace", "trainingjob", "phase"}}
KNOWN_METRICS = set(WORKER_METRICS) | set(COORDINATOR_METRICS) | set(OPERATOR_METRICS) | {"up"}
# The labels the shipped scrape configuration gives every target.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "app_kubernetes_io_component",
                 "trainingjob"}
# What the training dashboard selects by: every target uses one of these.
SELECTION = ("$training_job", "$trainingjob")
RUNBOOKS = os.path.join(SOURCE, "docs", "runbooks.md")


def metric_names(expr):
    """The metric names an expression selects (identifiers followed by { or [ or
    standing alone), histogram suffixes stripped."""
    names = set()
    for name in re.findall(r"\b(paci_\w+|up)\b", expr):
        names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def uses_operator_metrics(panel):
    """Whether a panel's queries read the operator's series (which need a running operator)."""
    return any(n in OPERATOR_METRICS for t in panel["targets"] for n in metric_names(t["expr"]))


def markdown_anchors(path):
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    with open(path) as f:
        headings = re.findall(r"^#+\s+(.*?)\s*$", f.read(), re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


def render_kustomize():
    kubectl = os.path.join(kube_bin(BUILD), "kubectl")  # scripts/kube-toolchain.sh builds it
    r = subprocess.run([kubectl, "kustomize", DEPLOY], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise AssertionError("kubectl kustomize deploy/ failed:\n" + r.stderr)
    return [d for d in yaml.safe_load_all(r.stdout) if d]


class DeployConfigTest(unittest.TestCase):
    def test_kustomize_renders_every_object_with_least_privilege(self):
        docs = render_kustomize()
        by_kind = {}
        for d in docs:
            by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
        self.assertEqual(set(by_kind["ServiceAccount"]),
                         {"paci-operator", "paci-coordinator", "paci-worker"})
        self.assertEqual(set(by_kind["Deployment"]), {"paci-coordinator", "paci-operator"})
        self.assertEqual(set(by_kind["Service"]), {"paci-coordinator", "paci-operator-metrics"})
        self.assertIn("trainingjobs.paci.dev", by_kind["CustomResourceDefinition"])
        self.assertIn("paci-coordinator-db", by_kind["PersistentVolumeClaim"])
        self.assertIn("paci-system", by_kind["Namespace"])
        for d in docs:
            if d["kind"] not in ("Namespace", "CustomResourceDefinition", "ClusterRole",
                                 "ClusterRoleBinding"):
                self.assertEqual(d["metadata"].get("namespace"), "paci-system", d["metadata"])

        # RBAC: exactly the verbs the operator needs, leases only in its namespace.
        rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"])
                 for r in by_kind["ClusterRole"]["paci-operator"]["rules"]}
        self.assertEqual(rules[(("paci.dev",), ("trainingjobs",))],
                         {"get", "list", "watch", "update", "patch"})
        self.assertEqual(rules[(("paci.dev",), ("trainingjobs/status",))],
                         {"get", "update", "patch"})
        self.assertEqual(rules[(("paci.dev",), ("trainingjobs/finalizers",))], {"update"})
        self.assertEqual(rules[(("",), ("pods", "services"))],
                         {"get", "list", "watch", "create", "delete"})
        self.assertEqual(rules[(("",), ("events",))], {"create", "patch"})
        self.assertEqual(rules[(("networking.k8s.io",), ("networkpolicies",))], {"get", "list", "watch", "create"})
        for (_, resources), verbs in rules.items():
            self.assertNotIn("*", verbs)
            self.assertNotIn("leases", resources)
        lease_role = by_kind["Role"]["paci-operator-leader-election"]
        self.assertEqual(lease_role["rules"], [{"apiGroups": ["coordination.k8s.io"],
                                                "resources": ["leases"],
                                                "verbs": ["get", "create", "update"]}])
        self.assertFalse(by_kind["ServiceAccount"]["paci-worker"]["automountServiceAccountToken"])
        self.assertFalse(by_kind["ServiceAccount"]["paci-coordinator"]["automountServiceAccountToken"])

        # Pods: non-root, no capabilities, seccomp, read-only root.
        for name, deployment in by_kind["Deployment"].items():
            pod = deployment["spec"]["template"]["spec"]
            self.assertTrue(pod["securityContext"]["runAsNonRoot"], name)
            self.assertEqual(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault")
            for c in pod["containers"]:
                self.assertEqual(c["securityContext"]["capabilities"]["drop"], ["ALL"], name)
                self.assertTrue(c["securityContext"]["readOnlyRootFilesystem"], name)
                self.assertFalse(c["securityContext"]["allowPrivilegeEscalation"], name)
        coordinator = by_kind["Deployment"]["paci-coordinator"]["spec"]
        self.assertEqual(coordinator["replicas"], 1)
        container = coordinator["template"]["spec"]["containers"][0]
        # Mutual TLS from the Secrets scripts/deploy-tls.sh makes; no --insecure.
        self.assertEqual(container["args"], ["--listen=0.0.0.0:7070",
                                             "--metrics_address=0.0.0.0:9090",
                                             "--db=/var/lib/paci/coordinator.db",
                                             "--tls_cert=/etc/paci/tls/tls.crt",
                                             "--tls_key=/etc/paci/tls/tls.key",
                                             "--tls_ca=/etc/paci/tls/ca.crt"])
        volumes = {v["name"]: v for v in coordinator["template"]["spec"]["volumes"]}
        self.assertEqual(volumes["tls"]["secret"]["secretName"], "paci-coordinator-tls")
        self.assertEqual(container["readinessProbe"]["tcpSocket"]["port"], "grpc")  # gRPC probes are plaintext
        operator = by_kind["Deployment"]["paci-operator"]["spec"]
        self.assertEqual(operator["replicas"], 2)
        container = operator["template"]["spec"]["containers"][0]
        self.assertIn("--leader_election=true", container["args"])
        self.assertIn("--leader_election_namespace=$(POD_NAMESPACE)", container["args"])
        for arg in ("--coordinator_tls_ca=/etc/paci/tls/ca.crt", "--coordinator_tls_cert=/etc/paci/client/tls.crt",
                    "--worker_secret=paci-worker-tls", "--network_policies=true"):
            self.assertIn(arg, container["args"])
        volumes = {v["name"]: v for v in operator["template"]["spec"]["volumes"]}
        self.assertEqual(volumes["tls"]["secret"]["items"], [{"key": "ca.crt", "path": "ca.crt"}])
        self.assertEqual(volumes["client-tls"]["secret"]["secretName"], "paci-operator-client-tls")
        policy = by_kind["NetworkPolicy"]["paci-coordinator"]["spec"]
        pod_labels = coordinator["template"]["metadata"]["labels"]
        self.assertEqual({k: pod_labels.get(k) for k in policy["podSelector"]["matchLabels"]},
                         policy["podSelector"]["matchLabels"])
        self.assertEqual([r["ports"] for r in policy["ingress"]], [[{"port": "grpc"}], [{"port": "metrics"}]])
        self.assertEqual(container["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(container["readinessProbe"]["httpGet"]["path"], "/readyz")

        # Monitoring ConfigMaps carry the files this repository tests.
        configmaps = by_kind["ConfigMap"]
        self.assertEqual(configmaps["paci-grafana-dashboards"]["metadata"]["labels"]
                         ["grafana_dashboard"], "1")
        self.assertEqual(set(configmaps["paci-grafana-dashboards"]["data"]),
                         {os.path.basename(p) for p in DASHBOARDS})
        self.assertEqual(set(configmaps["paci-prometheus"]["data"]), {"prometheus.yml", "alerts.yml"})

    def test_alert_rules_pass_promtool_check_and_their_unit_tests(self):
        out = monitoring.rules_check([os.path.join(PROMETHEUS_DIR, "alerts.yml"),
                                      os.path.join(PROMETHEUS_DIR, "alerts_test.yml")])
        self.assertIn("SUCCESS", out)
        with open(os.path.join(PROMETHEUS_DIR, "alerts.yml")) as f:
            alerts = {r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]}
        with open(os.path.join(PROMETHEUS_DIR, "alerts_test.yml")) as f:
            tests = yaml.safe_load(f)["tests"]
        fired = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
        quiet = {c["alertname"] for t in tests for c in t["alert_rule_test"] if not c["exp_alerts"]}
        self.assertEqual(fired, alerts, "every alert needs a unit test where it fires")
        self.assertEqual(quiet, alerts, "every alert needs a unit test where it does not fire")

    def test_docs_list_every_metric_once_with_its_labels(self):
        with open(os.path.join(SOURCE, "docs", "kubernetes.md")) as f:
            rows = re.findall(r"^\| `(paci_\w+)` \|[^|]*\|([^|]*)\|", f.read(), re.M)
        names = [name for name, _ in rows]
        self.assertEqual(sorted(names), sorted(set(names)), "a metric listed twice")
        documented = {name: set(re.findall(r"`(\w+)`", labels)) for name, labels in rows}
        exported = dict(WORKER_METRICS, **COORDINATOR_METRICS, **OPERATOR_METRICS)
        self.assertEqual(documented, exported)

    def test_alerts_have_runbooks_and_select_no_scrape_job(self):
        anchors = markdown_anchors(RUNBOOKS)
        with open(os.path.join(PROMETHEUS_DIR, "alerts.yml")) as f:
            rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
        for rule in rules:
            url = rule["annotations"].get("runbook_url", "")
            self.assertEqual(url, "docs/runbooks.md#" + rule["alert"].lower(), rule["alert"])
            self.assertIn(rule["alert"].lower(), anchors, "docs/runbooks.md has no section " + rule["alert"])
            # The scrape job's name differs between the shipped configuration and a
            # ServiceMonitor; the training job is training_job; phases as in the status.
            self.assertNotRegex(rule["expr"], r"\bjob\s*[=!~]|\(job\b|[ ,(]job\s*[,)]", rule["alert"])
            self.assertNotRegex(rule["expr"], r'phase\s*=~?\s*"[A-Z]+"', rule["alert"])

    def test_cluster_prometheus_config_passes_promtool(self):
        # Debian's prometheus is built without kubernetes_sd: check the same
        # config with file discovery in its place (relabelling, rule files,
        # everything else unchanged).
        with tempfile.TemporaryDirectory() as tmp:
            config = monitoring.kubernetes_config_on_file_sd(
                os.path.join(PROMETHEUS_DIR, "prometheus.yml"), tmp, {})
            self.assertIn("SUCCESS", monitoring.config_check(config))
        with open(os.path.join(PROMETHEUS_DIR, "prometheus.yml")) as f:
            jobs = yaml.safe_load(f)["scrape_configs"]
        self.assertFalse(any(j.get("honor_labels") for j in jobs),
                         "no honor_labels: it lets a target overwrite job and instance")

    def test_dashboards_are_grafana_json_over_known_metrics(self):
        self.assertEqual([os.path.basename(p) for p in DASHBOARDS],
                         ["paci-health.json", "paci-training.json"])
        for path in DASHBOARDS:
            with open(path) as f:
                dashboard = json.load(f)
            self.assertGreaterEqual(dashboard["schemaVersion"], 36)
            self.assertTrue(dashboard["uid"])
            variables = {v["name"] for v in dashboard["templating"]["list"]}
            self.assertIn("datasource", variables)
            panels = list(monitoring.dashboard_panels(path))
            ids = [p["id"] for p in panels]
            self.assertEqual(len(ids), len(set(ids)), path)
            for panel in panels:
                self.assertEqual(panel["datasource"]["uid"], "${datasource}", panel["title"])
                self.assertTrue(panel["targets"], panel["title"])
                for target in panel["targets"]:
                    names = metric_names(target["expr"])
                    self.assertTrue(names, target["expr"])
                    self.assertLessEqual(names, KNOWN_METRICS, panel["title"])
                    for var in re.findall(r"\$(\w+)", target["expr"]):
                        self.assertTrue(var.startswith("__") or var in variables,
                                        "%s: unknown variable $%s" % (panel["title"], var))
                    if path == TRAINING_DASHBOARD:  # every panel honours the selection
                        self.assertTrue(any(v in target["expr"] for v in SELECTION),
                                        "%s ignores the selection" % panel["title"])
                        self.assertNotIn("{{job}}", target.get("legendFormat", ""))
        with open(os.path.join(PROMETHEUS_DIR, "alerts.yml")) as f:
            for group in yaml.safe_load(f)["groups"]:
                for rule in group["rules"]:
                    self.assertLessEqual(metric_names(rule["expr"]), KNOWN_METRICS, rule["alert"])
        operator_panels = [p["title"] for p in monitoring.dashboard_panels(HEALTH_DASHBOARD)
                           if uses_operator_metrics(p)]
        self.assertTrue(operator_panels)
        self.assertTrue(all(t.startswith("Operator") for t in operator_panels), operator_panels)
        # The training board selects by namespace and TrainingJob, which the
        # operator's info series maps to the coordinator jobs the series carry.
        with open(TRAINING_DASHBOARD) as f:
            variables = {v["name"]: v for v in json.load(f)["templating"]["list"]}
        self.assertEqual(list(variables), ["datasource", "namespace", "trainingjob", "training_job"])
        self.assertIn("paci_operator_trainingjob_info", variables["namespace"]["query"]["query"])
        self.assertIn('namespace=~"$namespace"', variables["trainingjob"]["query"]["query"])
        self.assertIn('trainingjob=~"$trainingjob"', variables["training_job"]["query"]["query"])
        self.assertNotIn("allValue", variables["training_job"],
                         "All must mean the selected TrainingJobs' coordinator jobs, not every job")


class MonitoredCluster(Cluster):
    """harness.coordinator's Cluster with each process's /metrics on a known port."""

    def __init__(self, workdir, workers=2):
        self.metrics = {}
        self.metrics["coordinator"] = "127.0.0.1:%d" % monitoring.free_port()
        super().__init__(workdir, workers=workers,
                         extra=["--metrics_address=" + self.metrics["coordinator"]])

    def add_worker(self, worker_id):
        self.metrics[worker_id] = "127.0.0.1:%d" % monitoring.free_port()
        saved = self.worker_extra
        self.worker_extra = saved + ["--metrics_address=" + self.metrics[worker_id]]
        try:
            return super().add_worker(worker_id)
        finally:
            self.worker_extra = saved


def discovered(cluster):
    """Target groups as Kubernetes discovery would report the coordinator's
    Service endpoints and the worker pods, plus some that must be dropped."""
    coordinator_host, coordinator_port = cluster.metrics["coordinator"].rsplit(":", 1)
    endpoint = {"__meta_kubernetes_namespace": "paci-system",
                "__meta_kubernetes_pod_name": "paci-coordinator-0",
                "__meta_kubernetes_service_name": "paci-coordinator",
                "__meta_kubernetes_service_label_app_kubernetes_io_component": "coordinator"}
    pods = []
    for i, worker in enumerate(w for w in cluster.metrics if w != "coordinator"):
        host, port = cluster.metrics[worker].rsplit(":", 1)
        pods.append({"targets": [host], "labels": {  # a pod without ports: the annotation adds it
            "__meta_kubernetes_namespace": "research",
            "__meta_kubernetes_pod_name": "mon-worker-%d" % i,
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_label_paci_dev_trainingjob": "mon",
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": "paci-worker",
            "__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
            "__meta_kubernetes_pod_annotation_prometheus_io_port": port}})
    # Not to be scraped: a pod that did not opt in, and the coordinator's gRPC port.
    pods.append({"targets": ["127.0.0.1:1"], "labels": {
        "__meta_kubernetes_namespace": "research", "__meta_kubernetes_pod_name": "other",
        "__meta_kubernetes_pod_phase": "Running"}})
    return {
        "paci-coordinator": [
            {"targets": [cluster.metrics["coordinator"]],
             "labels": dict(endpoint, __meta_kubernetes_endpoint_port_name="metrics")},
            {"targets": ["%s:%d" % (coordinator_host, cluster.port)],
             "labels": dict(endpoint, __meta_kubernetes_endpoint_port_name="grpc")}],
        "paci-operator": [],
        "paci-pods": pods,
    }


class RealRunTest(unittest.TestCase):
    STEPS = 1500

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.cluster = None
        self.prom = None

    def tearDown(self):
        if self.prom:
            self.prom.stop()
        if self.cluster:
            self.cluster.stop()
        self.tmp.cleanup()

    def test_every_dashboard_panel_returns_data_from_a_real_training_run(self):
        begin = time.monotonic()
        c = self.cluster = MonitoredCluster(os.path.join(self.tmp.name))
        config = monitoring.kubernetes_config_on_file_sd(
            os.path.join(PROMETHEUS_DIR, "prometheus.yml"), os.path.join(self.tmp.name, "prom"),
            discovered(c))
        prom = self.prom = monitoring.start_prometheus_with_config(
            os.path.join(self.tmp.name, "prom"), config)
        targets = prom.wait_for_targets_up(3, timeout=60)
        self.assertEqual(sorted((t["labels"]["job"], t["labels"].get("pod", ""))
                                for t in targets if t["health"] == "up"),
                         [("paci-coordinator", "paci-coordinator-0"),
                          ("paci-pods", "mon-worker-0"), ("paci-pods", "mon-worker-1")])
        self.assertEqual(len(targets), 3, "unannotated pods and the gRPC port are dropped")

        job_spec = spec("mon", steps=self.STEPS, checkpoint=os.path.join(self.tmp.name, "ckpt"),
                        checkpoint_interval=500)
        # Big enough to train for ~15 s on 2 cores: Prometheus scrapes it many times.
        job_spec.model.d_model, job_spec.model.seq_len = 64, 64
        job_spec.training.eval_interval = 30
        c.submit(job_spec)
        c.wait("mon", lambda j: phase(j) == "RUNNING", timeout=60)
        c.wait("mon", lambda j: phase(j) == "SUCCEEDED", timeout=240)
        trained = time.monotonic()
        # The final values have been scraped.
        prom.wait_for('paci_job_step{training_job="mon"} == %d' % self.STEPS, timeout=30)
        prom.wait_for('paci_optimizer_steps_total{training_job="mon",stage="1"} == %d' % self.STEPS,
                      timeout=30)
        prom.wait_for('paci_coordinator_jobs{phase="Succeeded"} == 1', timeout=30)

        # No honor_labels, and nothing to rename: job and instance are the
        # targets', the training job is training_job.
        for label in ("exported_job", "exported_instance", "exported_namespace"):
            self.assertEqual(prom.query('count({%s!=""})' % label), [], label)
        self.assertEqual(prom.query('count(paci_optimizer_steps_total{job="paci-pods",'
                                    'training_job="mon"})')[0]["value"][1], "2")
        self.assertEqual(prom.query("paci_coordinator_submissions_total")[0]["metric"]["job"],
                         "paci-coordinator")
        self.assertEqual(prom.query('up{app_kubernetes_io_component="coordinator"}')[0]["value"][1],
                         "1")
        self.assertEqual({r["metric"]["trainingjob"] for r in
                          prom.query("paci_tokens_total{namespace=\"research\"}")}, {"mon"})
        # Each series has the labels docs/kubernetes.md lists, and the target's.
        for name, labels in list(WORKER_METRICS.items()) + list(COORDINATOR_METRICS.items()):
            found = prom.query('{__name__=~"%s(_bucket|_count|_sum)?"}' % name)
            self.assertTrue(found, name)
            for series in found:
                own = set(series["metric"]) - TARGET_LABELS - {"__name__", "le"}
                self.assertEqual(own, labels, "%s: %s" % (name, series["metric"]))
        scrapes = float(prom.query('count_over_time(paci_tokens_total{training_job="mon",stage="0"}'
                                   '[10m])')[0]["value"][1])
        self.assertGreaterEqual(scrapes, 8)

        # The training board as Grafana resolves it: without an operator its
        # Coordinator job variable lists the coordinator's jobs.
        selected = monitoring.resolve_variables(prom, TRAINING_DASHBOARD)
        self.assertEqual(selected["training_job"], "mon")
        not_operator = lambda panel: not uses_operator_metrics(panel)  # noqa: E731
        missing = monitoring.panels_without_data(prom, [TRAINING_DASHBOARD, HEALTH_DASHBOARD],
                                                 selected, select=not_operator)
        self.assertEqual(missing, [], "panels without data")
        checked = [t for t, _ in monitoring.dashboard_queries(HEALTH_DASHBOARD, select=not_operator)]
        self.assertGreaterEqual(len(checked), 4)
        # Every panel of the training board honours the selection: another job selected, none has data.
        everything = list(monitoring.dashboard_queries(TRAINING_DASHBOARD))
        other = {"namespace": "elsewhere", "trainingjob": "other", "training_job": "other"}
        self.assertEqual(len(monitoring.panels_without_data(prom, [TRAINING_DASHBOARD], other)),
                         len(everything))
        # The check is not vacuous: with no operator running, its panels have no data.
        operator = monitoring.panels_without_data(prom, [TRAINING_DASHBOARD, HEALTH_DASHBOARD],
                                                  selected, select=uses_operator_metrics)
        self.assertEqual(len(operator), sum(
            len(list(monitoring.dashboard_queries(p, select=uses_operator_metrics)))
            for p in (TRAINING_DASHBOARD, HEALTH_DASHBOARD)))
        self.assertGreaterEqual(len(operator), 2)

        # A healthy run fires none of the training or coordinator alerts.
        rules = prom._get("/api/v1/rules", {})["groups"]
        self.assertEqual(len(rules), 3)
        self.assertEqual(prom.query('ALERTS{alertname!~"PaciOperator.*"}'), [])
        print("\nmonitoring: %d scrapes of each worker; trained in %.0f s; %.0f s in all" % (
            scrapes, trained - begin, time.monotonic() - begin), file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
