"""A whole paci cluster on this host for tests and benchmarks: the real
Kubernetes control plane (etcd, kube-apiserver with TLS, RBAC and its admission
plugins, kube-controller-manager, kube-scheduler: tests/harness/control_plane.py),
one or two real Nodes (a kubelet with its own containerd each:
tests/harness/kubelet_node.py; the pods the scheduler binds there run as
containers of the images that scripts/build-images.sh built, on the Node's CNI
bridge), PersistentVolumes for claims (local volumes, pre-made as an admin
would), a real paci_coordinator and paci_operator replicas that elect a leader.
The TrainingJob CRD, the operator's ServiceAccount and its RBAC are the chart's,
rendered by the real helm (`helm template`, release "paci" in "paci-system",
TrainingJobs in "default") and applied with the real kubectl; the operators run
with a token the API server issued to that ServiceAccount, so they can do
exactly what the chart grants. The coordinator and the operators run as
processes of the host (tests kill and restart them;
tests/integration/helm_chart_test.py installs the whole chart as pods); the
worker pods reach the coordinator at the host's address on the first Node's
bridge.

    cluster = LocalCluster(workdir, build_dir, source_dir, nodes=2).start()
    cluster.kubectl("apply", "-f", "examples/trainingjob.yaml")
    ...
    cluster.stop()

Every process logs to <workdir>/<name>.log. Uses only the standard library.
"""
import json
import os
import re
import signal
import subprocess
import sys

from . import kubelet_node
from .kube_router import KubeRouter
from .control_plane import ControlPlane, free_port as _free_port, wait_until
from .kueue import Kueue

OPERATOR_ACCOUNT = "paci-operator"  # the chart's operator ServiceAccount for the release "paci"
# The release's own namespace (its operator's account and Lease): TrainingJobs run in "default",
# as the chart's tls.workerNamespaces says; never in the release's namespace.
RELEASE_NAMESPACE = "paci-system"
# The worker image as the examples name it (paci-worker:latest), as containerd has a short name:
# the Nodes have the image built from this tree under that name too.
EXAMPLE_WORKER_IMAGE = "docker.io/library/paci-worker:latest"


def images(build_dir):
    """The images scripts/build-images.sh built: {"worker": ref, "coordinator": ..., "operator": ...}
    from BUILD_DIR/images.env. AssertionError naming the script when they are not there."""
    path = os.path.join(build_dir, "images.env")
    if not os.path.exists(path):
        raise AssertionError("%s is missing: build the images first (scripts/build-images.sh)" % path)
    refs = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^PACI_([A-Z]+)_IMAGE=(\S+)$", line.strip())
            if m:
                refs[m.group(1).lower()] = m.group(2)
    return refs


def container_env():
    """The environment podman needs on these hosts (the repository's containers.conf)."""
    source = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return dict(os.environ, CONTAINERS_CONF=os.environ.get(
        "CONTAINERS_CONF", os.path.join(source, "deploy", "docker", "containers.conf")))


class LocalCluster:
    def __init__(self, workdir, build_dir, source_dir, replicas=("operator-a", "operator-b"),
                 operator_args=(), coordinator_args=(), nodes=1, kueue=False):
        """nodes: how many Nodes (1 or 2) run pods. kueue: Kueue runs on the control plane
        (tests/harness/kueue.py), the chart's RBAC is rendered with kueue.enabled and the
        operators run with --kueue and --kueue_workload_slices (Kueue runs with its elastic
        workloads)."""
        self.dir = workdir
        self.node_count = nodes
        self.nodes = []
        self.operator_args = list(operator_args)
        self.coordinator_args = list(coordinator_args)
        self.images = images(build_dir)
        self.worker_image = self.images["worker"]
        self.build = build_dir
        self.source = source_dir
        self.replicas = list(replicas)
        self.procs = {}
        self.operator_ports = {}
        self.plane = None
        self.kueue = None
        self.with_kueue = kueue
        if kueue:
            self.operator_args += ["--kueue", "--kueue_workload_slices"]

    def spawn(self, name, args, env=None, append=False):
        log = open(os.path.join(self.dir, name + ".log"), "a" if append else "w")
        self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, env=env)
        return self.procs[name]

    def read_port(self, name, timeout=30):
        path = os.path.join(self.dir, name + ".port")
        proc = self.procs[name]

        def ready():
            if proc.poll() is not None:
                raise AssertionError("%s exited with %s; see %s.log" % (name, proc.returncode, name))
            with open(path) as f:
                return int(f.read().strip() or 0)
        return wait_until("port file of " + name, lambda: os.path.exists(path) and ready(), timeout)

    def kubectl(self, *args, stdin=None, check=True, timeout=120, kubeconfig=None):
        """The real kubectl as cluster-admin (or with `kubeconfig`): a CompletedProcess."""
        return self.plane.kubectl(*args, stdin=stdin, check=check, timeout=timeout, kubeconfig=kubeconfig)

    def helm(self, *args, check=True, timeout=300):
        return self.plane.helm(*args, check=check, timeout=timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, kind, value, traceback):
        """Stops the cluster; after an error, prints the end of every log first."""
        if kind is not None:
            print(self.logs(lines=15), file=sys.stderr)
        self.stop()

    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self):
        self.plane = ControlPlane(self.dir, self.build).start()
        self.api_url = self.plane.url
        self.kubeconfig = self.plane.kubeconfig
        chart = os.path.join(self.source, "helm", "paci")
        self.kubectl("apply", "-f", os.path.join(chart, "crds"))
        if self.with_kueue:
            self.kueue = Kueue(self.plane, self.dir).start()
        self.kubectl("create", "namespace", RELEASE_NAMESPACE)
        rendered = self.helm("template", "paci", chart, "--namespace", RELEASE_NAMESPACE,
                             "--set", "kueue.enabled=%s" % str(self.with_kueue).lower(),
                             "--set", "tls.workerNamespaces={default}",
                             "--show-only", "templates/serviceaccounts.yaml",
                             "--show-only", "templates/rbac.yaml").stdout
        self.kubectl("apply", "-f", "-", stdin=rendered)
        self.plane.wait_crd_established("trainingjobs.paci.dev")
        self.operator_kubeconfig = self.plane.service_account_kubeconfig(RELEASE_NAMESPACE, OPERATOR_ACCOUNT)
        # The key the operators derive each job's worker token from (the chart's workerTokens).
        self.worker_token_key = os.path.join(self.dir, "worker-token-key")
        with open(os.open(self.worker_token_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(os.urandom(32).hex())
        self.coordinator_metrics_port = _free_port()
        self.spawn("coordinator", self.coordinator_command("0.0.0.0:0"))
        self.coordinator_port = self.read_port("coordinator")
        self.coordinator_address = "127.0.0.1:%d" % self.coordinator_port
        self.worker_coordinator = "%s:%d" % (kubelet_node.GATEWAY, self.coordinator_port)
        self.coordinator_metrics = re.search(
            r"metrics=http://([\d.:]+)/metrics",
            wait_until("coordinator metrics address", lambda: open(
                os.path.join(self.dir, "coordinator.log")).read(), timeout=10)).group(1)
        for index in range(self.node_count):
            self.nodes.append(kubelet_node.KubeletNode(
                self.dir, self.plane, index, [self.worker_image, self.images["coordinator"]], container_env(),
                aliases={EXAMPLE_WORKER_IMAGE: self.worker_image}).start())
        # kube-router's rules a killed run left would fence this run's pods (the Nodes' locks are
        # this run's now: tests/harness/kube_router.py).
        KubeRouter.clean()
        for node in self.nodes:
            self.wait_node_ready(node.name)
        kubelet_node.make_local_volumes(self.plane, os.path.join(self.dir, "volumes"),
                                        [node.name for node in self.nodes])
        for replica in self.replicas:
            self.start_operator(replica)

    def coordinator_command(self, listen):
        """On every address, so that pods on the Nodes' bridges reach it; plaintext there (no
        --tls_cert in coordinator_args) is refused without --insecure, which a test host with no
        other tenants may give."""
        tls = any(arg.startswith("--tls_cert") for arg in self.coordinator_args)
        return [os.path.join(self.build, "server", "paci_coordinator"), "--listen=" + listen,
                "--db=" + os.path.join(self.dir, "jobs.db"),
                "--port_file=" + os.path.join(self.dir, "coordinator.port"),
                "--metrics_address=127.0.0.1:%d" % self.coordinator_metrics_port,
                "--heartbeat_timeout_seconds=3"] + ([] if tls else ["--insecure"]) + self.coordinator_args

    def process(self, name):
        """A process of the cluster by name: the coordinator, an operator replica, or one of the
        control plane's (etcd, kube-apiserver, ...)."""
        return self.procs.get(name) or self.plane.procs[name]

    def kill(self, name):
        """SIGKILL of a process of the cluster (the coordinator, an operator replica) and its group."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def restart_coordinator(self):
        """Starts the coordinator again on its address and store, as a Deployment would after
        its pod died; its log goes on in coordinator.log. Returns once it serves."""
        os.remove(os.path.join(self.dir, "coordinator.port"))
        self.spawn("coordinator", self.coordinator_command("0.0.0.0:%d" % self.coordinator_port), append=True)
        self.read_port("coordinator")

    def start_operator(self, replica, append=False):
        port_file = os.path.join(self.dir, replica + ".port")
        if os.path.exists(port_file):
            os.remove(port_file)
        self.spawn(replica, [
            os.path.join(self.build, "operator", "paci_operator"),
            "--kubeconfig=" + self.operator_kubeconfig, "--coordinator=" + self.coordinator_address,
            "--worker_coordinator_address=" + self.worker_coordinator,
            "--metrics_address=127.0.0.1:0",
            "--metrics_port_file=" + os.path.join(self.dir, replica + ".port"),
            "--leader_election=true", "--leader_election_namespace=" + RELEASE_NAMESPACE,
            "--reserved_namespaces=" + RELEASE_NAMESPACE,
            "--pod_name=" + replica, "--lease_duration_seconds=3",
            "--renew_deadline_seconds=2", "--retry_period_seconds=0.5",
            "--poll_interval_seconds=1", "--worker_link_port=7000", "--worker_metrics_port=9100",
            "--worker_image=" + self.worker_image,
            "--worker_token_key_file=" + self.worker_token_key] + self.operator_args, append=append)
        self.operator_ports[replica] = self.read_port(replica)

    def logs(self, lines=30):
        """The last lines of every process' and Node's log, for a failing test's message."""
        out = []
        for folder in [self.dir] + [node.dir for node in self.nodes]:
            if not os.path.isdir(folder):
                continue
            for name in sorted(os.listdir(folder)):
                if name.endswith(".log"):
                    with open(os.path.join(folder, name), errors="replace") as f:
                        out.append("---- %s\n%s" % (name, "".join(f.readlines()[-lines:])))
        return "\n".join(out)

    def claim_path(self, namespace, claim):
        """The host folder of the volume bound to a PersistentVolumeClaim."""
        return kubelet_node.claim_path(self.plane, namespace, claim)

    def node(self, name):
        """The KubeletNode named `name` (a pod's spec.nodeName)."""
        return next(node for node in self.nodes if node.name == name)

    def kill_container(self, pod):
        """SIGKILL of a pod's (first) container through its Node's containerd."""
        self.node(pod["spec"]["nodeName"]).kill_container(pod["status"]["containerStatuses"][0]["containerID"])

    def lose_node(self, name):
        """A Node goes down and is taken out, as an admin does with a machine that died: its
        kubelet, containerd and every container of its pods stop; the Node is deleted and its
        pods with it (force: no kubelet is left to confirm)."""
        self.node(name).stop()
        self.kubectl("delete", "node", name, "--timeout=60s")
        pods = json.loads(self.kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName=" + name,
                                       "-o", "json").stdout)["items"]
        for pod in pods:
            self.kubectl("delete", "pod", pod["metadata"]["name"], "-n", pod["metadata"]["namespace"],
                         "--force", "--grace-period=0", check=False)

    def restore_node(self, name):
        """A lost Node's machine back: its kubelet registers the Node again; returns once it is Ready."""
        node = self.node(name).start()
        self.wait_node_ready(name)
        return node

    def wait_node_ready(self, name):
        wait_until("node %s Ready" % name, lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in self.get("node", name)["status"].get("conditions", [])), timeout=120)

    def get(self, kind, name):
        return json.loads(self.kubectl("get", kind, name, "-o", "json").stdout)

    def stop(self):
        # What spawn() started beside the cluster first, then the cluster.
        named = self.replicas + ["coordinator"]
        for name in [n for n in self.procs if n not in named] + named:
            proc = self.procs.get(name)
            if proc and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        for node in self.nodes:
            node.stop()
        if self.kueue is not None:
            self.kueue.stop()
        if self.plane is not None:
            self.plane.stop()
