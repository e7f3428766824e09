#!/usr/bin/python3
"""TLS on Kubernetes, end to end: a coordinator that requires client certificates
(mutual TLS) and a bearer token; the operator presents its own certificate
(system:paci:operator) and token, and mounts a Secret with the CA, the workers'
certificate (system:paci:worker:default, which binds them to the namespace) and
the token into every worker pod (--worker_secret), whose workers present them,
and whose stage links are mutual TLS with that certificate (--worker_link_tls).
Certificates are made by the test (tests/harness/pki.py). The worker pods are containers of the built worker image in a
namespace enforcing restricted Pod Security.

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import json
import os
import tempfile
import unittest

import yaml

from harness.local_cluster import LocalCluster, wait_until
from harness.paths import BUILD, SOURCE
from harness.pki import make_pki, mutual_tls_args, worker_secret

SECRET = "paci-worker-credentials"
MOUNT = "/etc/paci/coordinator"
STEPS = 3000


class OperatorTlsEndToEnd(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="paci-operator-tls-")
        self.pki = make_pki(self.tmp.name)
        coordinator_args, operator_args = mutual_tls_args(self.pki, SECRET)
        self.cluster = LocalCluster(self.tmp.name, BUILD, SOURCE, replicas=("operator",),
                                    coordinator_args=coordinator_args, operator_args=operator_args)
        self.cluster.start()

    def tearDown(self):
        self.cluster.stop()
        self.tmp.cleanup()

    def log(self, name):
        with open(os.path.join(self.tmp.name, name + ".log")) as f:
            return f.read()

    def test_workers_reach_a_mutual_tls_coordinator_through_the_mounted_secret(self):
        try:
            self.check_mutual_tls_job()
        except AssertionError as error:
            raise AssertionError("%s\n%s" % (error, self.cluster.logs())) from None

    def check_mutual_tls_job(self):
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}},
            worker_secret(self.pki, SECRET, "default")]))
        with open(os.path.join(SOURCE, "examples", "trainingjob.yaml")) as f:
            job = yaml.safe_load(f)
        job["spec"]["training"]["steps"] = STEPS  # long enough to read its pods' logs while they run
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job))
        pods = wait_until("worker pods", lambda: json.loads(self.cluster.kubectl(
            "get", "pods", "-l", "paci.dev/job-name=kjv-tiny", "-o", "json").stdout)["items"], timeout=60)
        container = pods[0]["spec"]["containers"][0]
        self.assertIn("--coordinator_tls_ca=%s/ca.crt" % MOUNT, container["args"])
        self.assertIn("--coordinator_tls_cert=%s/tls.crt" % MOUNT, container["args"])
        self.assertIn("--coordinator_auth_token_file=%s/token" % MOUNT, container["args"])
        self.assertIn({"name": "paci-coordinator", "mountPath": MOUNT, "readOnly": True},
                      container["volumeMounts"])
        # The stage links: mutual TLS with the same certificate, checked for the namespace's name.
        for flag in ("--tls_ca=%s/ca.crt" % MOUNT, "--tls_cert=%s/tls.crt" % MOUNT, "--tls_key=%s/tls.key" % MOUNT,
                     "--link_tls_server_name=paci-worker.default"):
            self.assertIn(flag, container["args"])
        # Their output, as the kubelet keeps it while the pods exist (they go when the job ends);
        # the image's worker allocates through tcmalloc (its library is in the image).
        def started(pod):
            out = self.cluster.kubectl("logs", pod, check=False).stdout
            return "links=mutual TLS (peers named paci-worker.default)" in out and out
        for pod in ("kjv-tiny-worker-0", "kjv-tiny-worker-1"):
            log = wait_until(pod + "'s log", lambda: started(pod), timeout=120)
            self.assertRegex(log, r"allocator=tcmalloc-\d+\.\d+")
        job = wait_until("kjv-tiny finished", lambda: (lambda j: j.get("status", {}).get("phase") in (
            "Succeeded", "Failed") and j)(self.cluster.get("trainingjob", "kjv-tiny")), timeout=300, interval=0.5)
        self.assertEqual(job["status"]["phase"], "Succeeded", job["status"])
        self.assertEqual(job["status"]["step"], STEPS)
        self.assertIn("mutual TLS", self.log("coordinator"))
        self.assertNotIn("peer did not return a certificate", self.log("coordinator"))
        self.assertNotIn("refused: PERMISSION_DENIED", self.log("coordinator"))  # bound, and in its namespace


if __name__ == "__main__":
    unittest.main(verbosity=2)
