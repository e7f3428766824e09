"""A real Kubernetes control plane on 127.0.0.1 for tests and benchmarks: etcd,
kube-apiserver, kube-controller-manager and kube-scheduler, the binaries that
scripts/kube-toolchain.sh built from their Go modules (BUILD_DIR/kube-bin).

    plane = ControlPlane(workdir, build_dir).start()
    plane.kubectl("get", "nodes")               # as cluster-admin
    plane.kubeconfig_for("paci-node")           # a kubeconfig of another identity (a Node's)
    plane.stop()

The API server serves TLS with a certificate of a CA made for the run, has RBAC
and Node authorization, its default admission plugins (PodSecurity,
ServiceAccount, ...) plus NodeRestriction, and issues service-account tokens.
Identities (static bearer tokens, one per component, as a cluster's bootstrap
would give them):
    admin        user "paci-test:admin" in system:masters
    controller   system:kube-controller-manager (its bootstrap role)
    scheduler    system:kube-scheduler
    NODE         system:node:NODE in system:nodes, for each of NODE_NAMES (a kubelet)
The API server reaches a kubelet (logs, exec) with a client certificate of the
CA in system:masters, which the kubelet authenticates and authorizes by asking
the API server (webhook), as a kubeadm cluster's do.
The controller manager uses a service account per controller
(--use-service-account-credentials), so garbage collection, namespace deletion,
tokens and the root CA ConfigMap run as on a cluster.

Every process logs to WORKDIR/<name>.log. Uses the standard library and openssl.
"""
import ctypes
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

NODE_NAMES = ("paci-node", "paci-node-2")  # the Nodes tests/harness/kubelet_node.py may run


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: the child only calls into it


def _die_with_parent():
    """In the child before exec: SIGKILL it when the thread that started it ends, so that a
    test killed before it could stop the control plane leaves none of it running."""
    _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stop_process(proc, timeout=20):
    """SIGTERM, then SIGKILL if it has not ended within `timeout` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_until(what, predicate, timeout=120, interval=0.2, explain=None):
    """Polls predicate() until it returns something truthy; returns that. On a timeout the
    error carries what explain() returns, if given (say, the pods' description and events)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except (subprocess.CalledProcessError, OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(interval)  # polling interval
    message = "timed out waiting for %s (last: %r)" % (what, last)
    if explain is not None:
        try:
            message += "\n" + explain()
        except (subprocess.CalledProcessError, OSError) as e:
            message += "\n(no explanation: %s)" % e
    raise AssertionError(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kube_bin(build_dir):
    """BUILD_DIR/kube-bin (or $PACI_KUBE_BIN); AssertionError naming the script when it is not there."""
    path = os.environ.get("PACI_KUBE_BIN") or os.path.join(os.path.abspath(build_dir), "kube-bin")
    if not os.path.exists(os.path.join(path, "kube-apiserver")):
        raise AssertionError("%s is missing: build it first (scripts/kube-toolchain.sh)" % path)
    return path


def write_kubeconfig(path, server, ca_file, token, namespace="default", name="paci-test"):
    """A standard kubeconfig (JSON is YAML) for `server` trusting `ca_file`, with a bearer token."""
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
    }
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(config, f, indent=1)
    os.replace(tmp, path)
    return path


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(folder):
    """A CA, the API server's certificate (127.0.0.1, localhost and the kubernetes
    Service's names), its client certificate for kubelets and the service-account
    signing key pair, in `folder`."""
    os.makedirs(folder, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "3", "-subj", "/CN=paci-test-ca", cwd=folder)
    with open(os.path.join(folder, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
                "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
                "DNS:kubernetes.default.svc.cluster.local\n"
                "extendedKeyUsage=serverAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out",
             "apiserver.csr", "-subj", "/CN=kube-apiserver", cwd=folder)
    _openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "apiserver.crt", "-days", "3", "-extfile", "san.cnf", cwd=folder)
    with open(os.path.join(folder, "client.cnf"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "kubelet-client.key", "-out",
             "kubelet-client.csr", "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client", cwd=folder)
    _openssl("x509", "-req", "-in", "kubelet-client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "kubelet-client.crt", "-days", "3", "-extfile", "client.cnf", cwd=folder)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)


class ControlPlane:
    IDENTITIES = {
        # name: (user, groups)
        "admin": ("paci-test:admin", ["system:masters"]),
        "controller": ("system:kube-controller-manager", []),
        "scheduler": ("system:kube-scheduler", []),
    }
    IDENTITIES.update({node: ("system:node:" + node, ["system:nodes"]) for node in NODE_NAMES})

    def __init__(self, workdir, build_dir, log=sys.stderr, controllers=True, apiserver_args=()):
        """controllers=False: etcd and kube-apiserver only (no controller manager, scheduler)."""
        self.dir = workdir
        self.bin = kube_bin(build_dir)
        self.controllers = controllers
        self.apiserver_args = list(apiserver_args)
        self.pki = os.path.join(workdir, "pki")
        self.ca_file = os.path.join(self.pki, "ca.crt")
        self.procs = {}
        self.tokens = {}
        self.kubeconfigs = {}
        self._log = log

    # -- processes -------------------------------------------------------------

    def spawn(self, name, args):
        with open(os.path.join(self.dir, name + ".log"), "w") as log:
            self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True, preexec_fn=_die_with_parent)
        return self.procs[name]

    def _check_alive(self, name):
        proc = self.procs[name]
        if proc.poll() is not None:
            with open(os.path.join(self.dir, name + ".log"), errors="replace") as f:
                tail = "".join(f.readlines()[-20:])
            raise AssertionError("%s exited with %s:\n%s" % (name, proc.returncode, tail))

    def _wait(self, what, name, predicate, timeout=120):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            self._check_alive(name)
            try:
                if predicate():
                    return
            except (OSError, ValueError) as e:
                last = e
            time.sleep(0.2)  # polling interval
        raise AssertionError("timed out waiting for %s (last: %r)" % (what, last))

    def start(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self):
        make_pki(self.pki)
        with open(os.path.join(self.pki, "tokens.csv"), "w") as f:
            for name, (user, groups) in self.IDENTITIES.items():
                token = os.urandom(16).hex()
                self.tokens[name] = token
                f.write('%s,%s,%s,"%s"\n' % (token, user, user, ",".join(groups)))
        etcd_port, peer_port = free_port(), free_port()
        self.spawn("etcd", [
            os.path.join(self.bin, "etcd"), "--name=paci-test",
            "--data-dir=" + os.path.join(self.dir, "etcd"),
            "--listen-client-urls=http://127.0.0.1:%d" % etcd_port,
            "--advertise-client-urls=http://127.0.0.1:%d" % etcd_port,
            "--listen-peer-urls=http://127.0.0.1:%d" % peer_port,
            "--initial-advertise-peer-urls=http://127.0.0.1:%d" % peer_port,
            "--initial-cluster=paci-test=http://127.0.0.1:%d" % peer_port,
            "--unsafe-no-fsync", "--log-level=warn"])
        self.etcd_url = "http://127.0.0.1:%d" % etcd_port
        self._wait("etcd", "etcd", lambda: urllib.request.urlopen(self.etcd_url + "/health", timeout=2)
                   .status == 200, timeout=60)

        port = free_port()
        self.url = "https://127.0.0.1:%d" % port
        pki = lambda name: os.path.join(self.pki, name)  # noqa: E731
        self.spawn("kube-apiserver", [
            os.path.join(self.bin, "kube-apiserver"),
            "--etcd-servers=" + self.etcd_url,
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=%d" % port,
            "--cert-dir=" + pki("serving"),
            "--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
            "--client-ca-file=" + pki("ca.crt"),
            "--token-auth-file=" + pki("tokens.csv"),
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",  # so that Pod Security admission, not validation, judges them
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file=" + pki("sa.pub"),
            "--service-account-signing-key-file=" + pki("sa.key"),
            "--service-cluster-ip-range=10.96.0.0/16",
            # pods/log reaches a node at its address (a test Node's name resolves nowhere).
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--kubelet-client-certificate=" + pki("kubelet-client.crt"),
            "--kubelet-client-key=" + pki("kubelet-client.key"),
            "--profiling=false", "--v=1"] + self.apiserver_args)
        self.kubeconfig = self.kubeconfig_for("admin")
        self._wait("kube-apiserver /readyz", "kube-apiserver", lambda: self.request("GET", "/readyz"),
                   timeout=180)
        if not self.controllers:
            # What the controller manager would make, so that pods can be created.
            self.kubectl("create", "serviceaccount", "default", "-n", "default")
            return

        self.spawn("kube-controller-manager", [
            os.path.join(self.bin, "kube-controller-manager"),
            "--kubeconfig=" + self.kubeconfig_for("controller"),
            "--authentication-kubeconfig=" + self.kubeconfig_for("controller"),
            "--authorization-kubeconfig=" + self.kubeconfig_for("controller"),
            "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
            "--use-service-account-credentials=true",
            "--service-account-private-key-file=" + pki("sa.key"), "--root-ca-file=" + pki("ca.crt"),
            "--cluster-signing-cert-file=" + pki("ca.crt"), "--cluster-signing-key-file=" + pki("ca.key"),
            "--concurrent-gc-syncs=5", "--v=1"])
        self.spawn("kube-scheduler", [
            os.path.join(self.bin, "kube-scheduler"),
            "--kubeconfig=" + self.kubeconfig_for("scheduler"),
            "--authentication-kubeconfig=" + self.kubeconfig_for("scheduler"),
            "--authorization-kubeconfig=" + self.kubeconfig_for("scheduler"),
            "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false", "--v=1"])
        # The controller manager made the default namespace's ServiceAccount: pods can be created.
        self._wait("the default ServiceAccount", "kube-controller-manager",
                   lambda: self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default"))

    def kubeconfig_for(self, identity, token=None, namespace="default"):
        """A kubeconfig for one of IDENTITIES (or for `token`, under the name `identity`)."""
        if identity not in self.kubeconfigs or token is not None:
            path = os.path.join(self.dir, "%s.kubeconfig" % identity.replace(":", "-").replace("/", "-"))
            self.kubeconfigs[identity] = write_kubeconfig(
                path, self.url, self.ca_file, token or self.tokens[identity], namespace=namespace)
        return self.kubeconfigs[identity]

    def ssl_context(self):
        return ssl.create_default_context(cafile=self.ca_file)

    def request(self, method, path, body=None, identity="admin", content_type="application/json"):
        """One call of the API as `identity`; the decoded JSON answer (urllib's HTTPError on refusal)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.tokens[identity])
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, timeout=30, context=self.ssl_context()) as resp:
            text = resp.read()
        try:
            return json.loads(text or b"null")
        except ValueError:
            return text.decode()

    def wait_crd_established(self, name, timeout=60):
        """Until the CustomResourceDefinition `name` is served (its Established condition True),
        watching it: the watch's first event is the object as it is, then each change.
        Not `kubectl wait --for=condition=Established`: on a CRD that has no status.conditions
        yet, a moment after it is created, that fails at once ("accessor error: <nil>")."""
        path = ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions?watch=1&fieldSelector="
                + urllib.parse.quote("metadata.name=" + name) + "&timeoutSeconds=%d" % timeout)
        req = urllib.request.Request(self.url + path)
        req.add_header("Authorization", "Bearer " + self.tokens["admin"])
        conditions = []
        with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context()) as stream:
            for line in stream:
                conditions = (json.loads(line)["object"].get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                    return
        raise TimeoutError("CRD %s not Established within %ss: %s" % (name, timeout, conditions))

    def kubectl(self, *args, stdin=None, check=True, timeout=120, kubeconfig=None):
        return subprocess.run([os.path.join(self.bin, "kubectl"), "--kubeconfig",
                               kubeconfig or self.kubeconfig, *args], input=stdin, capture_output=True,
                              text=True, check=check, timeout=timeout)

    def helm(self, *args, check=True, timeout=300):
        env = dict(os.environ, HELM_CACHE_HOME=os.path.join(self.dir, "helm", "cache"),
                   HELM_CONFIG_HOME=os.path.join(self.dir, "helm", "config"),
                   HELM_DATA_HOME=os.path.join(self.dir, "helm", "data"))
        return subprocess.run([os.path.join(self.bin, "helm"), "--kubeconfig", self.kubeconfig, *args],
                              capture_output=True, text=True, check=check, timeout=timeout, env=env)

    def service_account_kubeconfig(self, namespace, name, duration="24h"):
        """A kubeconfig holding a token the real server issued for a ServiceAccount."""
        token = self.kubectl("create", "token", name, "-n", namespace, "--duration=" + duration).stdout.strip()
        return self.kubeconfig_for("sa-%s-%s" % (namespace, name), token=token, namespace=namespace)

    def stop(self):
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            stop_process(self.procs.get(name))


def main():
    """Serves a control plane until SIGTERM, for tests in other languages: writes
    {"url", "token", "server", "ca_file", "etcd"} as JSON to --ready-file once it serves
    (url: a fault proxy in front of the API server, tests/harness/fault_proxy.py)."""
    import argparse
    import threading
    if __package__:  # python3 -m harness.control_plane
        from .fault_proxy import FaultProxy
    else:  # run by path (kube/test_api_server.h): this folder is first on the module path
        from fault_proxy import FaultProxy
    parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--controllers", action="store_true", help="run the controller manager and scheduler")
    parser.add_argument("--apiserver-arg", action="append", default=[])
    args = parser.parse_args()
    plane = ControlPlane(args.workdir, args.build_dir, controllers=args.controllers,
                         apiserver_args=args.apiserver_arg)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    plane.start()
    try:
        proxy = FaultProxy(plane.url, plane.ca_file, plane.etcd_url)
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"url": proxy.url, "token": plane.tokens["admin"], "server": plane.url,
                       "ca_file": plane.ca_file, "etcd": plane.etcd_url}, f)
        os.replace(tmp, args.ready_file)
        while not done.wait(0.5):
            if any(p.poll() is not None for p in plane.procs.values()):
                sys.exit("a control-plane process exited; see %s" % args.workdir)
        proxy.stop()
    finally:
        plane.stop()


if __name__ == "__main__":
    main()
