"""Certificates for a coordinator under mutual TLS, made with openssl, and the flags and
worker Secret that use them, as the chart's generated ones are used:

    pki = make_pki(directory)
    coordinator_args, operator_args = mutual_tls_args(pki, "paci-worker-credentials")
    kubectl apply of worker_secret(pki, "paci-worker-credentials", "default")

A CA; the coordinator's certificate (localhost, 127.0.0.1); the operator's client
certificate (system:paci:operator) and the workers' of one namespace
(system:paci:worker:<namespace>), the identities the coordinator knows them by; and a
bearer token.
"""
import os
import subprocess


def make_pki(directory, worker_namespace="default"):
    """{"ca.crt", "ca.key", "server.crt", "server.key", "operator.crt", "operator.key",
    "worker.crt", "worker.key", "token"}: paths in `directory`."""
    path = {n: os.path.join(directory, n) for n in ("ca.crt", "ca.key", "server.crt", "server.key", "operator.crt",
                                                    "operator.key", "worker.crt", "worker.key", "token")}
    os.makedirs(directory, exist_ok=True)

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=paci test CA",
            "-keyout", path["ca.key"], "-out", path["ca.crt"])
    for who, cn, san, usage in (
            ("server", "paci-coordinator", "DNS:localhost,IP:127.0.0.1,IP:10.88.0.1", "serverAuth"),
            ("operator", "system:paci:operator", "DNS:paci-operator", "clientAuth"),
            # paci-worker.<namespace>: the name workers check each other for on the stage links.
            ("worker", "system:paci:worker:" + worker_namespace, "DNS:paci-worker." + worker_namespace,
             "serverAuth,clientAuth")):
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


def mutual_tls_args(pki, worker_secret):
    """(coordinator_args, operator_args) for LocalCluster: the coordinator requires client
    certificates of the CA and the token; the operator presents its own, mounts
    `worker_secret` into every worker pod, and makes the stage links mutual TLS with it."""
    coordinator = ["--tls_cert=" + pki["server.crt"], "--tls_key=" + pki["server.key"],
                   "--tls_ca=" + pki["ca.crt"], "--auth_token_file=" + pki["token"]]
    operator = ["--coordinator_tls_ca=" + pki["ca.crt"], "--coordinator_tls_cert=" + pki["operator.crt"],
                "--coordinator_tls_key=" + pki["operator.key"], "--coordinator_auth_token_file=" + pki["token"],
                "--worker_secret=" + worker_secret, "--worker_link_tls"]
    return coordinator, operator


def worker_secret(pki, name, namespace):
    """The worker Secret (ca.crt, tls.crt, tls.key, token) as a manifest."""
    def read(key):
        with open(pki[key]) as f:
            return f.read()
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "stringData": {"ca.crt": read("ca.crt"), "tls.crt": read("worker.crt"), "tls.key": read("worker.key"),
                           "token": read("token")}}
