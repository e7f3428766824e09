#!/usr/bin/python3
"""TLS on Kubernetes, end to end: a coordinator that requires client certificates
(mutual TLS) and a bearer token; the operator presents its own certificate and
token, and mounts a Secret with the CA, a client certificate and the token into
every worker pod (--worker_secret), whose workers present them. Certificates are
made by the test. The worker pods are containers of the built worker image in a
namespace enforcing restricted Pod Security.

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import json
import os
import subprocess
import tempfile
import unittest

import yaml

from harness.local_cluster import LocalCluster, wait_until
from harness.paths import BUILD, SOURCE

SECRET = "paci-worker-credentials"
MOUNT = "/etc/paci/coordinator"


def make_pki(directory):
    """A CA, the coordinator's certificate (localhost, 127.0.0.1) and a client certificate."""
    path = {n: os.path.join(directory, n) for n in ("ca.crt", "ca.key", "server.crt", "server.key",
                                                    "client.crt", "client.key", "token")}

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=paci test CA",
            "-keyout", path["ca.key"], "-out", path["ca.crt"])
    for who, cn, san, usage in (("server", "paci-coordinator", "DNS:localhost,IP:127.0.0.1", "serverAuth"),
                                ("client", "paci-worker", "DNS:paci-worker", "clientAuth")):
        csr, ext = os.path.join(directory, who + ".csr"), os.path.join(directory, who + ".ext")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + cn, "-keyout", path[who + ".key"],
                "-out", csr)
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\nextendedKeyUsage=%s\n" % (san, usage))
        openssl("x509", "-req", "-in", csr, "-CA", path["ca.crt"], "-CAkey", path["ca.key"], "-CAcreateserial",
                "-days", "1", "-extfile", ext, "-out", path[who + ".crt"])
    with open(path["token"], "w") as f:
        f.write("t0k3n-for-workers\n")
    return path


class OperatorTlsEndToEnd(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="paci-operator-tls-")
        self.pki = make_pki(self.tmp.name)
        p = self.pki
        self.cluster = LocalCluster(
            self.tmp.name, BUILD, SOURCE, replicas=("operator",),
            coordinator_args=["--tls_cert=" + p["server.crt"], "--tls_key=" + p["server.key"],
                              "--tls_ca=" + p["ca.crt"], "--auth_token_file=" + p["token"]],
            operator_args=["--coordinator_tls_ca=" + p["ca.crt"], "--coordinator_tls_cert=" + p["client.crt"],
                           "--coordinator_tls_key=" + p["client.key"],
                           "--coordinator_auth_token_file=" + p["token"], "--worker_secret=" + SECRET])
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
        def read(name):
            with open(self.pki[name]) as f:
                return f.read()
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": "default"},
             "stringData": {"ca.crt": read("ca.crt"), "tls.crt": read("client.crt"),
                            "tls.key": read("client.key"), "token": read("token")}}]))
        self.cluster.kubectl("apply", "-f", os.path.join(SOURCE, "examples", "trainingjob.yaml"))
        pods = wait_until("worker pods", lambda: json.loads(self.cluster.kubectl(
            "get", "pods", "-l", "paci.dev/job-name=kjv-tiny", "-o", "json").stdout)["items"], timeout=60)
        container = pods[0]["spec"]["containers"][0]
        self.assertIn("--coordinator_tls_ca=%s/ca.crt" % MOUNT, container["args"])
        self.assertIn("--coordinator_tls_cert=%s/tls.crt" % MOUNT, container["args"])
        self.assertIn("--coordinator_auth_token_file=%s/token" % MOUNT, container["args"])
        self.assertIn({"name": "paci-coordinator", "mountPath": MOUNT, "readOnly": True},
                      container["volumeMounts"])
        job = wait_until("kjv-tiny finished", lambda: (lambda j: j.get("status", {}).get("phase") in (
            "Succeeded", "Failed") and j)(self.cluster.get("trainingjob", "kjv-tiny")), timeout=120, interval=0.5)
        self.assertEqual(job["status"]["phase"], "Succeeded", job["status"])
        self.assertEqual(job["status"]["step"], 60)
        self.assertIn("mutual TLS", self.log("coordinator"))
        self.assertNotIn("peer did not return a certificate", self.log("coordinator"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
