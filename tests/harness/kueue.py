"""Kueue (sigs.k8s.io/kueue) on the test control plane: the CRDs of the release
scripts/kube-toolchain.sh built (BUILD_DIR/kube-bin/kueue-crds), applied
server-side as Kueue's install does, and its manager as a process of the host.

    kueue = Kueue(plane, workdir).start()     # plane: a started ControlPlane
    kueue.apply(CLUSTER_QUEUE, ...)           # kueue.x-k8s.io/v1beta2 objects
    kueue.stop()

The manager runs as in its Deployment, less what only a pod has: no leader
election (one replica), its certificates made here instead of by its internal
certificate manager (which waits for a Secret and CRD conversion stanzas a
manifest install makes), the on-demand visibility API server off (it wants
certificates at a fixed path and an APIService). It serves its webhooks on
127.0.0.1, but none is registered with the API server: the CRDs' own schema
and CEL rules validate Kueue's objects, and the operator makes Workloads
directly, so no pod or job webhook is needed. Kueue reads a metrics
certificate from the fixed path /etc/kueue/metrics/certs whenever its internal
certificate manager is off, so it runs in a private mount namespace with this
run's certificate bound there (root, as the tests run; only the empty folder
is left on the host). Uses the standard library, openssl and unshare.
"""
import json
import os
import urllib.request

from .control_plane import _openssl, free_port, stop_process

NAMESPACE = "kueue-system"
METRICS_CERT_PATH = "/etc/kueue/metrics/certs"  # cmd/kueue/main.go's, not configurable


def crds_dir(plane):
    path = os.path.join(plane.bin, "kueue-crds")
    if not os.path.isdir(path):
        raise AssertionError("%s is missing: build it first (scripts/kube-toolchain.sh)" % path)
    return path


def _self_signed(folder, name):
    os.makedirs(folder, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.crt",
             "-days", "3", "-subj", "/CN=" + name, "-addext", "subjectAltName=IP:127.0.0.1",
             cwd=folder)
    return folder


class Kueue:
    def __init__(self, plane, workdir):
        self.plane = plane
        self.dir = os.path.join(workdir, "kueue")
        self.proc = None

    def start(self, timeout=120):
        os.makedirs(self.dir, exist_ok=True)
        plane = self.plane
        plane.kubectl("apply", "--server-side", "-f", crds_dir(plane))
        crds = ["crd/%s.kueue.x-k8s.io" % kind for kind in (
            "workloads", "clusterqueues", "localqueues", "resourceflavors", "workloadpriorityclasses",
            "admissionchecks", "cohorts", "topologies")]
        # kubectl wait fails on a CRD whose status the API server has not written yet.
        plane._wait("Kueue's CRDs Established", "kube-apiserver", lambda: plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=10s", *crds, check=False).returncode == 0,
            timeout=60)
        plane.kubectl("create", "namespace", NAMESPACE)
        webhook_certs = _self_signed(os.path.join(self.dir, "webhook-certs"), "kueue-webhook")
        metrics_certs = _self_signed(os.path.join(self.dir, "metrics-certs"), "kueue-metrics")
        self.health_port = free_port()
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "leaderElection": {"leaderElect": False},
            "health": {"healthProbeBindAddress": "127.0.0.1:%d" % self.health_port},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": webhook_certs},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job"]},
            # ElasticJobsViaWorkloadSlices: an elastic TrainingJob grows with a workload slice.
            "featureGates": {"VisibilityOnDemand": False, "ElasticJobsViaWorkloadSlices": True},
        }
        config_path = os.path.join(self.dir, "config.yaml")
        with open(config_path, "w") as f:
            json.dump(config, f, indent=1)  # JSON is YAML
        command = [os.path.join(plane.bin, "kueue"), "--config=" + config_path,
                   "--kubeconfig=" + plane.kubeconfig, "--zap-log-level=2"]
        bind = 'mkdir -p "$0" && mount --bind "$1" "$0" && shift && exec "$@"'
        self.proc = plane.spawn("kueue", ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                          bind, METRICS_CERT_PATH, metrics_certs] + command)
        plane._wait("Kueue's /readyz", "kueue", lambda: self._ready(), timeout=timeout)
        return self

    def _ready(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % self.health_port, timeout=2) as r:
            return r.status == 200

    def apply(self, *objects):
        """kubectl apply of Kueue objects (or any), as cluster-admin."""
        return self.plane.kubectl("apply", "-f", "-", stdin=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": list(objects)}))

    def stop(self):
        stop_process(self.proc)
