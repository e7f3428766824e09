#!/usr/bin/python3
"""The node agent of the tests' cluster: a stand-in for the kubelet, a client of
the real kube-apiserver (tests/harness/control_plane.py) with a node's credentials.

Why a stand-in: the suite's end-to-end tests were written against it (pods on
loopback addresses of the host's network, containers podman can kill), and a real
node costs minutes more of building. A real kubelet with containerd does run here
(tests/harness/kubelet_node.py, tests/integration/full_node_e2e.py; docs/kubernetes.md
says what it needed); moving the suite onto it is the next step. This agent does
a kubelet's job towards the API server as the real one does, and runs containers
with podman:

* registers its Node (system:node:NAME through the Node authorizer and
  NodeRestriction), Ready with the capacity it advertises, and renews its Lease
  in kube-node-lease every few seconds, so the node lifecycle controller keeps
  it Ready and the real kube-scheduler binds pods to it;
* lists and watches the pods bound to it (fieldSelector spec.nodeName), re-listing
  after 410 Expired or a dropped stream, and starts each one once:
  - it gets a pod IP of its own on loopback: a random 127.A.B.0/24 chosen at start,
    handing out .2, .3, ... (Linux routes all of 127/8 to lo), so pods may listen
    on the same fixed ports; containers share the host's network (podman
    --network host), as hostNetwork pods would, and bind their pod IP;
  - --runtime container (the default): the first container runs as a real
    container of its image (podman with runc), with a fresh root filesystem from
    the image; command replaces the image's ENTRYPOINT and args its CMD, as on a
    cluster; workingDir, env (value; valueFrom fieldRef for metadata.name/
    namespace/uid, status.podIP, status.hostIP, spec.nodeName,
    spec.serviceAccountName, metadata.labels['k'], metadata.annotations['k'];
    configMapKeyRef and secretKeyRef read from the server; envFrom configMapRef and
    secretRef with prefix) and securityContext (pod level, overridden per key by the
    container's: runAsUser, runAsGroup, runAsNonRoot checked against the image's
    USER with the kubelet's own wording, supplementalGroups, fsGroup,
    readOnlyRootFilesystem, allowPrivilegeEscalation, privileged, capabilities,
    seccompProfile Unconfined). The image must already be in local storage (no
    registry is reachable): else the pod waits with ErrImageNeverPull.
    Volumes are bind mounts (volumeMounts with readOnly and subPath): emptyDir (a
    fresh 0777 folder per pod), hostPath (with its type), secret and configMap
    (files written per pod, items and defaultMode honoured, mounted read-only),
    projected (serviceAccountToken through the TokenRequest API bound to the pod,
    configMap, secret, downwardAPI: the kube-api-access volume the real
    ServiceAccount admission adds) and persistentVolumeClaim: the claim's
    PersistentVolume (hostPath, made by the provisioner below and bound by the
    controller manager) is mounted, one host folder per claim that every pod using
    it sees. fsGroup makes emptyDir and claim folders group-owned and
    group-writable, as the kubelet's volume ownership management does. No pod sees
    the host's filesystem except through a volume; the API server is reached
    through KUBERNETES_SERVICE_HOST/PORT, set to its address (no Service virtual IPs
    here);
  - --runtime process: command + args run as a plain process in its own process
    group (command[0] without a slash is looked up in --bin-dir, then PATH; with no
    command, an --image PREFIX=COMMAND mapping supplies one), in --pod-cwd, with
    this process's environment plus the container's. No volumes or security
    context: for tests of the pod lifecycle that run no image.
  - $(VAR) in command and args expands from the container's env; $$ escapes.
    stdout+stderr go to WORK_DIR/NAMESPACE_POD.log;
  - status goes through the pods/status subresource: Running (podIP, podIPs, hostIP,
    startTime, conditions, containerStatuses running), then Succeeded (exit 0) or
    Failed with the container terminated (exitCode, reason Completed or Error, and
    the termination message: in a container, what it wrote to its
    terminationMessagePath (default /dev/termination-log, a file mounted there, its
    first 4096 bytes); with terminationMessagePolicy FallbackToLogsOnError and no
    message, a failed container's last 80 lines of output (at most 2048 bytes), as
    the kubelet does).
    Pods are never restarted, whatever their restartPolicy;
* serves the pods' output to the API server's pods/log (`kubectl logs`, tailLines,
  limitBytes and follow) at the kubelet endpoint its Node reports (serve_logs);
* a pod given a deletionTimestamp gets SIGTERM, then SIGKILL after
  min(terminationGracePeriodSeconds, --max-grace) seconds, and is then removed
  with a zero grace period, as the kubelet ends a graceful deletion;
* with --provisioner-token-file, a local volume provisioner as well (the role
  system:persistent-volume-provisioner): each Pending PersistentVolumeClaim gets a
  hostPath PersistentVolume under --claims-dir pre-bound to it.

On SIGTERM or SIGINT the agent kills every pod it started and exits. Process pods
also get SIGKILL should the agent itself die (PR_SET_PDEATHSIG); containers left by
an agent that died are removed by the next one to start.

What it does not model: image pulls, resource limits (cgroups), probes,
restarts, init and sidecar containers, pod DNS and Services' virtual IPs.

Run: /usr/bin/python3 tests/harness/node_agent.py --server https://127.0.0.1:PORT \\
         --ca-file CA --token-file TOKEN --work-dir DIR [--runtime container|process] \\
         [--claims-dir DIR] [--provisioner-token-file TOKEN] [--bin-dir DIR[:DIR...]] \\
         [--node-name paci-node] [--pod-cwd DIR]
"""

import argparse
import base64
import ctypes
import datetime
import http.client
import http.server
import json
import math
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(text, mapping):
    """Kubernetes' $(VAR) expansion: defined variables are replaced, undefined
    references are kept as written, and $$ is a literal $."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append(text[i:])
                break
            name = text[i + 2:close]
            out.append(mapping[name] if name in mapping else text[i:close + 1])
            i = close + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class Expired(Exception):
    """The watch's resourceVersion is older than the server's history: re-list."""


class Waiting(Exception):
    """The pod cannot start yet; it stays Pending with this reason and message.
    retry: the kubelet tries it again (a claim or image may appear)."""

    def __init__(self, reason, message, retry=True, scheduling=False):
        super().__init__(message)
        self.reason, self.message, self.retry, self.scheduling = reason, message, retry, scheduling


class PodRun:
    """One started pod: its process and what its status reports."""

    def __init__(self, pod, ip, log_path):
        m = pod["metadata"]
        self.uid, self.namespace, self.name = m["uid"], m["namespace"], m["name"]
        self.container = pod["spec"]["containers"][0]
        self.ip, self.log_path = ip, log_path
        self.grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        # k8s_<container>_<pod>_<namespace>_<uid>_<attempt>, as the kubelet names them.
        self.container_name = "k8s_%s_%s_%s_%s_0" % (self.container.get("name", "main"), self.name,
                                                     self.namespace, self.uid)
        self.container_id = ""
        self.termination_log = None  # the host file mounted at terminationMessagePath
        self.proc = None
        self.started_at = None
        self.killing = False
        self.monitor = None


class NodeAgent:
    """Owns the Node and its Lease, the watch loop, the pods' processes and the threads
    that wait on them. run() blocks until stop(); stop() may be called from any thread
    or a signal handler."""

    LEASE_SECONDS = 40
    RENEW_SECONDS = 5

    def __init__(self, server, ca_file, token, bin_dirs, work_dir, node_name="paci-node", pod_cwd=None,
                 max_grace=5.0, images=None, log=sys.stderr, runtime="container", claims_dir=None,
                 podman="podman", provisioner_token=None, capacity=None):
        self.server = server.rstrip("/")
        self.context = ssl.create_default_context(cafile=ca_file)
        self.token = token
        self.provisioner_token = provisioner_token
        self.capacity = capacity or {"cpu": "16", "memory": "64Gi", "pods": "110",
                                     "ephemeral-storage": "100Gi"}
        self.bin_dirs = [d for d in bin_dirs if d]
        self.work_dir = work_dir
        self.node_name = node_name
        self.pod_cwd = pod_cwd or os.getcwd()
        self.max_grace = max_grace
        self.images = images or {}
        self.runtime = runtime
        self.claims_dir = claims_dir or os.path.join(work_dir, "claims")
        self.podman = podman
        self._log = log
        self.waiting = {}  # uid -> the last pod object of a pod that could not start yet
        self.net = "127.%d.%d" % (random.randint(1, 254), random.randint(0, 255))
        self.next_host = 2
        self.host_ip = "127.0.0.1"
        self.lock = threading.Lock()
        self.pods = {}  # uid -> PodRun
        self.starting = set()  # uids start() is at work on
        self.threads = []
        self.stopping = threading.Event()
        self.conn = None
        self.kubelet_port = 0  # serve_logs()
        os.makedirs(work_dir, exist_ok=True)

    def log(self, text):
        self._log.write("node agent: %s\n" % text)
        self._log.flush()

    # -- API access ----------------------------------------------------------

    def request(self, method, path, body=None, content_type="application/json", token=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        req.add_header("Authorization", "Bearer " + (token or self.token))
        with urllib.request.urlopen(req, timeout=30, context=self.context) as resp:
            return json.loads(resp.read() or b"null")

    # -- the node --------------------------------------------------------------

    def register(self):
        """Creates the Node (or takes the one of the same name) and reports it Ready."""
        labels = {"kubernetes.io/hostname": self.node_name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64"}
        try:
            self.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": self.node_name, "labels": labels}})
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise
        self.report_node()

    def report_node(self):
        when = now_rfc3339()
        conditions = [{"type": t, "status": "False", "reason": "KubeletHas" + r, "message": m,
                       "lastHeartbeatTime": when}
                      for t, r, m in (("MemoryPressure", "SufficientMemory", "no memory pressure"),
                                      ("DiskPressure", "NoDiskPressure", "no disk pressure"),
                                      ("PIDPressure", "SufficientPID", "enough PIDs"))]
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                           "message": "the paci test node agent is posting ready status",
                           "lastHeartbeatTime": when})
        self.request("PATCH", "/api/v1/nodes/%s/status" % self.node_name, {"status": {
            "conditions": conditions, "capacity": self.capacity, "allocatable": self.capacity,
            "addresses": [{"type": "InternalIP", "address": self.host_ip},
                          {"type": "Hostname", "address": self.node_name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                         "containerRuntimeVersion": "podman://", "kubeletVersion": "",
                         "kubeProxyVersion": "", "osImage": "", "kernelVersion": os.uname().release,
                         "machineID": "", "systemUUID": "", "bootID": ""}}},
            "application/strategic-merge-patch+json")

    def renew_lease(self):
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + self.node_name
        renew = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": self.node_name, "leaseDurationSeconds": self.LEASE_SECONDS,
                "renewTime": renew}
        try:
            self.request("PATCH", path, {"spec": spec}, "application/merge-patch+json")
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise
            self.request("POST", path.rsplit("/", 1)[0], {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.node_name, "namespace": "kube-node-lease"}, "spec": spec})

    def heartbeat(self):
        """Renews the Lease every RENEW_SECONDS and the Node's status every minute."""
        last_status = time.monotonic()
        while not self.stopping.is_set():
            try:
                self.renew_lease()
                if time.monotonic() - last_status > 60:
                    self.report_node()
                    last_status = time.monotonic()
            except (OSError, ValueError, http.client.HTTPException) as error:
                self.log("heartbeat: %s" % error)
            self.stopping.wait(self.RENEW_SECONDS)

    # -- the provisioner -------------------------------------------------------

    def provision(self):
        """Gives each Pending claim a hostPath PersistentVolume pre-bound to it, every half second."""
        while not self.stopping.wait(0.5):
            try:
                claims = self.request("GET", "/api/v1/persistentvolumeclaims", token=self.provisioner_token)
                for claim in claims["items"]:
                    if (claim.get("status") or {}).get("phase") == "Pending" and \
                            not claim["spec"].get("volumeName"):
                        self.make_volume(claim)
            except (OSError, ValueError, KeyError, http.client.HTTPException) as error:
                self.log("provisioner: %s" % error)

    def make_volume(self, claim):
        m, spec = claim["metadata"], claim["spec"]
        path = os.path.join(self.claims_dir, m["namespace"], m["name"])
        if not os.path.isdir(path):
            os.makedirs(path)
            os.chmod(path, 0o755)  # root-owned, as a fresh file system is: fsGroup opens it up
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        volume = {"apiVersion": "v1", "kind": "PersistentVolume",
                  "metadata": {"name": "pvc-" + m["uid"], "labels": {"paci.dev/provisioned-by": "node-agent"}},
                  "spec": {"capacity": {"storage": storage},
                           "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                           "persistentVolumeReclaimPolicy": "Retain",
                           "storageClassName": spec.get("storageClassName") or "",
                           "volumeMode": spec.get("volumeMode", "Filesystem"),
                           "hostPath": {"path": path, "type": "Directory"},
                           "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                        "namespace": m["namespace"], "name": m["name"], "uid": m["uid"]}}}
        try:
            self.request("POST", "/api/v1/persistentvolumes", volume, token=self.provisioner_token)
            self.log("claim %s/%s: volume %s at %s" % (m["namespace"], m["name"], volume["metadata"]["name"],
                                                        path))
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise

    def patch_status(self, run, status):
        path = "/api/v1/namespaces/%s/pods/%s/status" % (run.namespace, run.name)
        try:
            self.request("PATCH", path, {"metadata": {"uid": run.uid}, "status": status},
                         "application/merge-patch+json")
        except urllib.error.HTTPError as error:
            if error.code not in (404, 409):  # gone, or a new pod of the same name
                self.log("status of %s/%s: HTTP %d" % (run.namespace, run.name, error.code))
        except OSError as error:
            self.log("status of %s/%s: %s" % (run.namespace, run.name, error))

    # -- the kubelet's log endpoint -------------------------------------------

    def serve_logs(self):
        """Serves GET /containerLogs/NAMESPACE/POD/CONTAINER (tailLines, limitBytes, follow)
        over TLS on a free port of the host's address, which the Node reports as its kubelet
        endpoint: the API server's pods/log (`kubectl logs`) reads a pod's output there, as
        from the kubelet's port 10250. The certificate is self-signed: an API server started
        without --kubelet-certificate-authority does not verify it."""
        cert, key = os.path.join(self.work_dir, "kubelet.crt"), os.path.join(self.work_dir, "kubelet.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "7", "-subj", "/CN=" + self.node_name,
                        "-addext", "subjectAltName=IP:" + self.host_ip, "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        agent = self

        class Logs(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlparse(self.path)
                parts = url.path.split("/")
                path = os.path.join(agent.work_dir, "%s_%s.log" % tuple(parts[2:4])) if len(parts) == 5 \
                    and parts[1] == "containerLogs" else None
                if not path or not os.path.exists(path):
                    self.answer(404, b"no such container log\n")
                    return
                query = urllib.parse.parse_qs(url.query)
                with open(path, "rb") as f:
                    data = f.read()
                    if "tailLines" in query:
                        data = b"".join(data.splitlines(keepends=True)[-int(query["tailLines"][0]):])
                    if "limitBytes" in query:
                        data = data[:int(query["limitBytes"][0])]
                    if query.get("follow") != ["true"]:
                        self.answer(200, data)
                        return
                    # Followed: what is there, then what comes, until the pod's process ends
                    # (the body ends with the connection).
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                    while True:
                        run = agent.running(*parts[2:4])  # before the read: nothing comes after
                        more = f.read()
                        if more:
                            self.wfile.write(more)
                            self.wfile.flush()
                        if run is None:
                            break
                        if not more:
                            try:  # until it writes more or ends, whichever comes first
                                run.proc.wait(timeout=0.2)
                            except subprocess.TimeoutExpired:
                                pass

            def answer(self, code, body):
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer((self.host_ip, 0), Logs)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self.kubelet_port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True, name="kubelet-logs").start()

    def running(self, namespace, name):
        """The PodRun of NAMESPACE/NAME whose process still runs, or None."""
        with self.lock:
            runs = [r for r in self.pods.values() if (r.namespace, r.name) == (namespace, name)]
        return next((r for r in runs if r.proc is not None and r.proc.poll() is None), None)

    # -- the loop ------------------------------------------------------------

    def run(self):
        if self.runtime == "container":
            self.remove_orphans()
        self.serve_logs()
        self.register()
        helpers = [threading.Thread(target=self.retry_waiting, daemon=True, name="retry"),
                   threading.Thread(target=self.heartbeat, daemon=True, name="heartbeat")]
        if self.provisioner_token:
            helpers.append(threading.Thread(target=self.provision, daemon=True, name="provisioner"))
        for thread in helpers:
            thread.start()
        rv = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    pods = self.request("GET", "/api/v1/pods?" + self.selector)
                    rv = pods["metadata"]["resourceVersion"]
                    self.sync(pods["items"])
                rv = self.watch(rv)
            except Expired:
                self.log("watch expired; re-listing")
                rv = None
            except (OSError, http.client.HTTPException, ValueError) as error:
                if self.stopping.is_set():
                    break
                self.log("watch: %s; resuming" % error)
                self.stopping.wait(0.5)
        self.shutdown()

    def sync(self, items):
        seen = set()
        for pod in items:
            seen.add(pod["metadata"]["uid"])
            self.handle("MODIFIED", pod)
        with self.lock:
            gone = [run for uid, run in self.pods.items() if uid not in seen]
        for run in gone:
            self.kill(run)

    def watch(self, rv):
        """Streams events from `rv`; returns the last resourceVersion seen when the stream ends."""
        url = urllib.parse.urlsplit(self.server)
        conn = http.client.HTTPSConnection(url.hostname, url.port, timeout=None, context=self.context)
        self.conn = conn
        try:
            conn.request("GET", "/api/v1/pods?%s&watch=true&allowWatchBookmarks=true&timeoutSeconds=300"
                         "&resourceVersion=%s" % (self.selector, rv),
                         headers={"Accept": "application/json", "Authorization": "Bearer " + self.token})
            resp = conn.getresponse()
            if resp.status == 410:
                raise Expired()
            if resp.status != 200:
                raise OSError("watch answered HTTP %d" % resp.status)
            while not self.stopping.is_set():
                line = resp.readline()
                if not line:
                    return rv
                event = json.loads(line)
                obj = event.get("object") or {}
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired()
                    raise OSError("watch error: %s" % obj.get("message"))
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if event["type"] != "BOOKMARK":
                    self.handle(event["type"], obj)
            return rv
        except http.client.IncompleteRead:
            return rv
        finally:
            self.conn = None
            conn.close()

    @property
    def selector(self):
        return "fieldSelector=" + urllib.parse.quote("spec.nodeName=" + self.node_name)

    def handle(self, etype, pod):
        m, spec = pod.get("metadata", {}), pod.get("spec", {})
        if spec.get("nodeName") != self.node_name:
            return
        with self.lock:
            run = self.pods.get(m.get("uid"))
        if etype == "DELETED" or m.get("deletionTimestamp"):
            with self.lock:
                self.waiting.pop(m.get("uid"), None)
            if etype == "DELETED":
                if run is not None:
                    self.kill(run)
            elif run is not None and run.proc is not None and run.proc.poll() is None:
                self.kill(run, finalize=True)
            else:
                self.finalize(m["namespace"], m["name"], m["uid"])
            return
        if run is None and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            self.start(pod)

    def retry_waiting(self):
        """Tries the pods that could not start yet again, every second."""
        while not self.stopping.wait(1.0):
            with self.lock:
                pods = [w["pod"] for w in self.waiting.values() if w["retry"]]
            for pod in pods:
                if self.stopping.is_set():
                    return
                self.start(pod)

    # -- pods ----------------------------------------------------------------

    def allocate_ip(self):
        with self.lock:
            if self.next_host > 254:
                self.net = "127.%d.%d" % (random.randint(1, 254), random.randint(0, 255))
                self.next_host = 2
            ip = "%s.%d" % (self.net, self.next_host)
            self.next_host += 1
            return ip

    def field_ref(self, pod, ip, path):
        m = pod["metadata"]
        simple = {"metadata.name": m.get("name"), "metadata.namespace": m.get("namespace"),
                  "metadata.uid": m.get("uid"), "status.podIP": ip, "status.hostIP": self.host_ip,
                  "spec.nodeName": pod["spec"].get("nodeName") or self.node_name,
                  "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default")}
        if path in simple:
            return simple[path]
        for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
            if path.startswith(prefix + "['") and path.endswith("']"):
                return (m.get(source) or {}).get(path[len(prefix) + 2:-2], "")
        raise ValueError("unsupported fieldRef %s" % path)

    def key_ref(self, namespace, kind, ref):
        obj = self.request("GET", "/api/v1/namespaces/%s/%s/%s" % (namespace, kind, ref["name"]))
        data = obj.get("data") or {}
        if ref["key"] not in data:
            raise ValueError("couldn't find key %s in %s %s" % (ref["key"], kind, ref["name"]))
        value = data[ref["key"]]
        return base64.b64decode(value).decode() if kind == "secrets" else value

    def environment(self, pod, container, ip):
        url = urllib.parse.urlsplit(self.server)
        # The kubelet sets these from the kubernetes Service; there are no Service IPs here.
        variables = {"KUBERNETES_SERVICE_HOST": url.hostname, "KUBERNETES_SERVICE_PORT": str(url.port),
                     "KUBERNETES_PORT": "tcp://%s:%d" % (url.hostname, url.port)}
        for item in container.get("env") or []:
            name = item["name"]
            source = item.get("valueFrom")
            if source is None:
                variables[name] = expand(item.get("value", ""), variables)
            elif "fieldRef" in source:
                variables[name] = self.field_ref(pod, ip, source["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in source:
                variables[name] = self.key_ref(pod["metadata"]["namespace"], "configmaps",
                                               source["configMapKeyRef"])
            elif "secretKeyRef" in source:
                variables[name] = self.key_ref(pod["metadata"]["namespace"], "secrets", source["secretKeyRef"])
            else:
                raise ValueError("unsupported valueFrom for %s" % name)
        for source in container.get("envFrom") or []:
            kind, ref = ("configmaps", source["configMapRef"]) if "configMapRef" in source else \
                ("secrets", source["secretRef"])
            try:
                obj = self.request("GET", "/api/v1/namespaces/%s/%s/%s" % (pod["metadata"]["namespace"], kind,
                                                                            ref["name"]))
            except urllib.error.HTTPError as error:
                if error.code == 404 and ref.get("optional"):
                    continue
                if error.code == 404:
                    raise ValueError('%s "%s" not found' % (kind[:-1], ref["name"]))
                raise
            for key, value in (obj.get("data") or {}).items():
                name = source.get("prefix", "") + key
                if name not in variables:  # env wins over envFrom
                    variables[name] = base64.b64decode(value).decode() if kind == "secrets" else value
        return variables

    def resolve(self, program):
        if "/" in program:
            return program
        for directory in self.bin_dirs:
            candidate = os.path.join(directory, program)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
        found = shutil.which(program)
        if found is None:
            raise ValueError('exec: "%s": executable file not found in --bin-dir or $PATH' % program)
        return found

    def start(self, pod):
        m = pod["metadata"]
        uid = m["uid"]
        with self.lock:
            if uid in self.pods or uid in self.starting:
                return  # started, or being started by another thread
            self.starting.add(uid)
            waiting = self.waiting.get(uid)
        try:
            self._start(pod, uid, waiting)
        finally:
            with self.lock:
                self.starting.discard(uid)

    def _start(self, pod, uid, waiting):
        m = pod["metadata"]
        with self.lock:
            ip = waiting["ip"] if waiting else None
        ip = ip or self.allocate_ip()
        container = (pod["spec"].get("containers") or [{}])[0]
        run = PodRun(pod, ip, os.path.join(self.work_dir, "%s_%s.log" % (m["namespace"], m["name"])))
        try:
            variables = self.environment(pod, container, run.ip)
            if self.runtime == "container":
                argv, env, cwd = self.container_command(pod, container, run, variables)
            else:
                argv, env, cwd = self.process_command(pod, container, variables)
        except Waiting as error:
            self.wait(pod, run, error)
            return
        except (OSError, ValueError, urllib.error.HTTPError) as error:
            # A reference that cannot be resolved (a missing Secret key, say): the real
            # kubelet reports CreateContainerConfigError and tries again.
            self.wait(pod, run, Waiting("CreateContainerConfigError", str(error)))
            return
        with self.lock:
            duplicate = uid in self.pods or self.stopping.is_set()
            if not duplicate:
                self.waiting.pop(uid, None)
                self.pods[uid] = run
        if duplicate:  # another thread started it meanwhile: drop what this one created
            if run.container_id:
                self.podman_run("rm", "--force", run.container_id)
            return
        run.started_at = now_rfc3339()
        try:
            with open(run.log_path, "ab") as out:
                run.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                            preexec_fn=_die_with_parent)
        except OSError as error:
            self.log("pod %s/%s cannot start: %s" % (run.namespace, run.name, error))
            with open(run.log_path, "a") as out:
                out.write("node agent: cannot start: %s\n" % error)
            self.patch_status(run, self.final_status(run, 128, "StartError", str(error)))
            return
        self.log("pod %s/%s started: pid %d ip %s: %s" % (run.namespace, run.name, run.proc.pid, run.ip,
                                                          " ".join(argv)))
        self.patch_status(run, {
            "phase": "Running", "podIP": run.ip, "podIPs": [{"ip": run.ip}], "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}], "startTime": run.started_at,
            "conditions": self.conditions(True, run.started_at),
            "containerStatuses": [self.container_status(run, True, {"running": {"startedAt": run.started_at}})],
        })
        run.monitor = threading.Thread(target=self.wait_for_exit, args=(run,), daemon=True,
                                       name="pod-%s" % run.name)
        with self.lock:
            self.threads.append(run.monitor)
        run.monitor.start()

    def wait(self, pod, run, waiting):
        """Keeps a pod that cannot start Pending, saying why once (status and log)."""
        uid = pod["metadata"]["uid"]
        with self.lock:
            before = self.waiting.get(uid)
            self.waiting[uid] = {"pod": pod, "ip": run.ip, "retry": waiting.retry,
                                 "said": (waiting.reason, waiting.message)}
        if before and before["said"] == (waiting.reason, waiting.message):
            return
        self.log("pod %s/%s waits: %s: %s" % (run.namespace, run.name, waiting.reason, waiting.message))
        when = now_rfc3339()
        if waiting.scheduling:
            status = {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": waiting.message, "lastProbeTime": None, "lastTransitionTime": when}]}
        else:
            status = {"phase": "Pending", "hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}],
                      "conditions": self.conditions(False, when),
                      "containerStatuses": [self.container_status(run, False, {"waiting": {
                          "reason": waiting.reason, "message": waiting.message}})]}
        self.patch_status(run, status)

    def process_command(self, pod, container, variables):
        if any("projected" not in v for v in pod["spec"].get("volumes") or []):
            raise Waiting("CreateContainerConfigError", "volumes need --runtime container", retry=False)
        command = list(container.get("command") or [])
        if not command:
            image = container.get("image", "")
            prefix = next((p for p in self.images if image.startswith(p)), None)
            if prefix is None:
                raise Waiting("CreateContainerConfigError",
                              "container %s has no command and no --image mapping matches %s"
                              % (container.get("name"), image), retry=False)
            command = [self.images[prefix]]
        argv = [expand(a, variables) for a in command + list(container.get("args") or [])]
        argv[0] = self.resolve(argv[0])
        env = dict(os.environ)
        env.update(variables)
        return argv, env, self.pod_cwd

    # -- containers ----------------------------------------------------------

    def podman_run(self, *args, timeout=60):
        return subprocess.run([self.podman, *args], capture_output=True, text=True, timeout=timeout)

    def image_user(self, image, pull_policy):
        """The image's USER, or Waiting when the image is not in local storage."""
        out = self.podman_run("image", "inspect", "--format", "{{.Config.User}}", image)
        if out.returncode != 0:
            if pull_policy == "Never":
                raise Waiting("ErrImageNeverPull", 'Container image "%s" is not present with pull policy '
                              'of Never' % image)
            raise Waiting("ErrImagePull", 'failed to pull image "%s": no image registry is reachable from '
                          'this test cluster; build it locally (scripts/build-images.sh)' % image)
        return out.stdout.strip()

    def volume_dir(self, pod, name):
        path = os.path.join(self.work_dir, "volumes", pod["metadata"]["uid"], name)
        os.makedirs(path, exist_ok=True)
        return path

    def claim_dir(self, pod, claim_name):
        """The host folder bound to a PersistentVolumeClaim; Waiting while the claim does not exist."""
        namespace = pod["metadata"]["namespace"]
        try:
            claim = self.request("GET", "/api/v1/namespaces/%s/persistentvolumeclaims/%s" % (namespace,
                                                                                            claim_name))
        except urllib.error.HTTPError as error:
            if error.code == 404:
                raise Waiting("Unschedulable", 'persistentvolumeclaim "%s" not found' % claim_name,
                              scheduling=True)
            raise
        volume_name = (claim.get("spec") or {}).get("volumeName")
        if (claim.get("status") or {}).get("phase") != "Bound" or not volume_name:
            raise Waiting("ContainerCreating", 'persistentvolumeclaim "%s" is not bound' % claim_name)
        volume = self.request("GET", "/api/v1/persistentvolumes/" + volume_name)
        path = ((volume.get("spec") or {}).get("hostPath") or {}).get("path")
        if not path or not os.path.isdir(path):
            raise Waiting("ContainerCreating", 'volume "%s" of claim "%s" has no hostPath folder on this node'
                          % (volume_name, claim_name))
        return path

    def projected_files(self, pod, volume, name):
        """The files of a projected volume: {relative path: (bytes, mode)}."""
        source = volume["projected"]
        mode = source.get("defaultMode", 0o644)
        files = {}
        for item in source.get("sources") or []:
            if "serviceAccountToken" in item:
                token = item["serviceAccountToken"]
                m = pod["metadata"]
                request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
                    "expirationSeconds": token.get("expirationSeconds", 3607),
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": m["name"], "uid": m["uid"]}}}
                if token.get("audience"):
                    request["spec"]["audiences"] = [token["audience"]]
                answer = self.request("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (
                    m["namespace"], pod["spec"].get("serviceAccountName") or "default"), request)
                files[token["path"]] = (answer["status"]["token"].encode(), mode)
            elif "configMap" in item or "secret" in item:
                kind = "secrets" if "secret" in item else "configmaps"
                inner = dict(item.get("secret") or item.get("configMap"))
                inner.setdefault("defaultMode", mode)
                if kind == "secrets":
                    inner["secretName"] = inner.get("name")
                files.update(self.key_files(pod, kind, inner, name))
            elif "downwardAPI" in item:
                for entry in item["downwardAPI"].get("items") or []:
                    if "fieldRef" not in entry:
                        raise Waiting("ContainerCreating", 'volume "%s": only fieldRef items of downwardAPI are '
                                      "modelled" % name, retry=False)
                    value = self.field_ref(pod, "", entry["fieldRef"]["fieldPath"])
                    files[entry["path"]] = (value.encode(), entry.get("mode", mode))
        return files

    def key_files(self, pod, kind, source, name):
        """The files of a secret or configMap volume: {relative path: (bytes, mode)}."""
        ref = source.get("secretName") if kind == "secrets" else source.get("name")
        try:
            obj = self.request("GET", "/api/v1/namespaces/%s/%s/%s" % (pod["metadata"]["namespace"], kind, ref))
        except urllib.error.HTTPError as error:
            if error.code == 404 and not source.get("optional"):
                raise Waiting("ContainerCreating", 'MountVolume.SetUp failed for volume "%s" : %s "%s" not '
                              "found" % (name, kind[:-1], ref))
            if error.code != 404:
                raise
            obj = {}
        data = dict(obj.get("data") or {})
        decode = (lambda v: base64.b64decode(v)) if kind == "secrets" else (lambda v: v.encode())
        mode = source.get("defaultMode", 0o644)
        items = source.get("items")
        if not items:
            return {key: (decode(value), mode) for key, value in data.items()}
        files = {}
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise Waiting("ContainerCreating", 'MountVolume.SetUp failed for volume "%s" : configmap '
                              'references non-existent config key: %s' % (name, item["key"]))
            files[item["path"]] = (decode(data[item["key"]]), item.get("mode", mode))
        return files

    def volumes(self, pod, fs_group):
        """Makes each volume of the pod on the host: {name: (host path, read-only)}."""
        made = {}
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "emptyDir" in volume:
                path = self.volume_dir(pod, name)
                os.chmod(path, 0o777)
                owned = True
                read_only = False
            elif "hostPath" in volume:
                path, kind = volume["hostPath"]["path"], volume["hostPath"].get("type", "")
                if kind == "DirectoryOrCreate":
                    os.makedirs(path, mode=0o755, exist_ok=True)
                elif kind == "FileOrCreate" and not os.path.exists(path):
                    open(path, "a").close()
                if kind in ("Directory", "DirectoryOrCreate") and not os.path.isdir(path) or \
                        kind in ("File", "FileOrCreate") and not os.path.isfile(path) or \
                        kind and not os.path.exists(path):
                    raise Waiting("ContainerCreating", 'MountVolume.SetUp failed for volume "%s" : hostPath '
                                  'type check failed: %s is not a %s' % (name, path, kind or "path"))
                owned, read_only = False, False
            elif "persistentVolumeClaim" in volume:
                source = volume["persistentVolumeClaim"]
                path = self.claim_dir(pod, source["claimName"])
                owned, read_only = True, bool(source.get("readOnly"))
            elif "secret" in volume or "configMap" in volume or "projected" in volume:
                if "projected" in volume:
                    files = self.projected_files(pod, volume, name)
                else:
                    kind = "secrets" if "secret" in volume else "configmaps"
                    files = self.key_files(pod, kind, volume.get("secret") or volume.get("configMap"), name)
                path = self.volume_dir(pod, name)
                for relative, (content, mode) in files.items():
                    target = os.path.join(path, relative)
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with open(target, "wb") as f:
                        f.write(content)
                    os.chmod(target, mode)
                    if fs_group is not None:
                        os.chown(target, -1, fs_group)
                owned, read_only = False, True
            else:
                raise Waiting("ContainerCreating", 'volume "%s": only emptyDir, hostPath, secret, configMap, '
                              "projected and persistentVolumeClaim volumes are modelled" % name, retry=False)
            if owned and fs_group is not None:
                _own_by_group(path, fs_group)
            made[name] = (path, read_only)
        return made

    def container_command(self, pod, container, run, variables):
        spec = pod["spec"]
        pod_sc = spec.get("securityContext") or {}
        sc = dict(pod_sc)
        sc.update(container.get("securityContext") or {})
        pod_ref = "%s_%s(%s)" % (run.name, run.namespace, run.uid)
        image = container.get("image", "")
        image_user = self.image_user(image, container.get("imagePullPolicy", "IfNotPresent"))
        user, group = sc.get("runAsUser"), sc.get("runAsGroup")
        if sc.get("runAsNonRoot"):
            if user is not None:
                if user == 0:
                    raise Waiting("CreateContainerConfigError", "container's runAsUser breaks non-root policy "
                                  '(pod: "%s", container: %s)' % (pod_ref, container.get("name")))
            else:
                name = image_user.split(":")[0]
                if name in ("", "root", "0"):
                    raise Waiting("CreateContainerConfigError", 'container has runAsNonRoot and image will run '
                                  'as root (pod: "%s", container: %s)' % (pod_ref, container.get("name")))
                if not name.isdigit():
                    raise Waiting("CreateContainerConfigError", "container has runAsNonRoot and image has "
                                  "non-numeric user (%s), cannot verify user is non-root (pod: \"%s\", "
                                  "container: %s)" % (name, pod_ref, container.get("name")))
        fs_group = pod_sc.get("fsGroup")
        volumes = self.volumes(pod, fs_group)
        argv = ["create", "--rm", "--name", run.container_name, "--pull", "never",
                "--network", "host", "--label", "io.paci.test-kubelet=%d" % os.getpid(),
                "--label", "io.kubernetes.pod.name=%s" % run.name,
                "--label", "io.kubernetes.pod.namespace=%s" % run.namespace]
        for name, value in variables.items():
            argv += ["--env", "%s=%s" % (name, value)]
        if container.get("workingDir"):
            argv += ["--workdir", container["workingDir"]]
        if user is not None:
            argv += ["--user", "%d:%d" % (user, group) if group is not None else str(user)]
        elif group is not None:
            base = image_user.split(":")[0] or "0"
            argv += ["--user", "%s:%d" % (base, group)]
        for extra in ([fs_group] if fs_group is not None else []) + list(pod_sc.get("supplementalGroups") or []):
            argv += ["--group-add", str(extra)]
        if sc.get("readOnlyRootFilesystem"):
            argv += ["--read-only", "--read-only-tmpfs=false"]
        if sc.get("privileged"):
            argv += ["--privileged"]
        if sc.get("allowPrivilegeEscalation") is False:
            argv += ["--security-opt", "no-new-privileges"]
        capabilities = sc.get("capabilities") or {}
        for cap in capabilities.get("drop") or []:
            argv += ["--cap-drop", cap]
        for cap in capabilities.get("add") or []:
            argv += ["--cap-add", cap]
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            argv += ["--security-opt", "seccomp=unconfined"]
        for mount in container.get("volumeMounts") or []:
            if mount["name"] not in volumes:
                raise Waiting("CreateContainerConfigError", 'cannot find volume "%s" to mount into container '
                              '"%s"' % (mount["name"], container.get("name")), retry=False)
            source, read_only = volumes[mount["name"]]
            if mount.get("subPath"):
                source = os.path.join(source, mount["subPath"])
                os.makedirs(source, exist_ok=True)
            flags = "ro" if read_only or mount.get("readOnly") else "rw"
            argv += ["--volume", "%s:%s:%s" % (source, mount["mountPath"], flags)]
        # The termination message: a file of its own, which the container's user may write.
        run.termination_log = run.log_path[:-len(".log")] + ".termination-log"
        with open(run.termination_log, "w"):
            pass
        os.chmod(run.termination_log, 0o666)
        argv += ["--volume", "%s:%s:rw" % (run.termination_log,
                                           container.get("terminationMessagePath") or "/dev/termination-log")]
        command = [expand(a, variables) for a in container.get("command") or []]
        if command:
            argv += ["--entrypoint", json.dumps(command)]
        argv.append(image)
        argv += [expand(a, variables) for a in container.get("args") or []]
        # Created here, so its id is known before it runs; started (attached) by start().
        created = self.podman_run(*argv)
        if created.returncode != 0:
            raise Waiting("CreateContainerError", created.stderr.strip() or "podman create failed",
                          retry=False)
        run.container_id = created.stdout.strip()
        return [self.podman, "start", "--attach", run.container_id], dict(os.environ), self.work_dir

    def remove_orphans(self):
        """Removes the containers of node agents that are no longer running."""
        out = self.podman_run("ps", "-a", "--filter", "label=io.paci.test-kubelet", "--format",
                              '{{.Names}} {{index .Labels "io.paci.test-kubelet"}}')
        stale = [line.split()[0] for line in out.stdout.splitlines()
                 if len(line.split()) == 2 and not _pid_alive(int(line.split()[1]))]
        if stale:
            self.log("removing %d containers of a node agent that died: %s" % (len(stale), " ".join(stale)))
            self.podman_run("rm", "--force", "--time", "0", *stale, timeout=120)

    def conditions(self, ready, when):
        value = "True" if ready else "False"
        return [{"type": t, "status": s, "lastProbeTime": None, "lastTransitionTime": when}
                for t, s in (("PodReadyToStartContainers", "True"), ("Initialized", "True"),
                             ("Ready", value), ("ContainersReady", value), ("PodScheduled", "True"))]

    def container_status(self, run, ready, state):
        if self.runtime == "container":
            container_id = "podman://%s" % run.container_id if run.container_id else ""
        else:
            container_id = "paci-test://%s" % (run.proc.pid if run.proc else "none")
        return {"name": run.container.get("name", "main"), "image": run.container.get("image", ""),
                "imageID": "", "containerID": container_id,
                "ready": ready, "started": ready, "restartCount": 0, "state": state}

    def final_status(self, run, code, reason, message=None):
        finished = now_rfc3339()
        terminated = {"exitCode": code, "reason": reason, "startedAt": run.started_at, "finishedAt": finished}
        if message:
            terminated["message"] = message
        return {"phase": "Succeeded" if code == 0 else "Failed", "podIP": run.ip, "podIPs": [{"ip": run.ip}],
                "hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}], "startTime": run.started_at,
                "conditions": self.conditions(False, finished),
                "containerStatuses": [self.container_status(run, False, {"terminated": terminated})]}

    def wait_for_exit(self, run):
        code = run.proc.wait()
        _kill_group(run.proc.pid, signal.SIGKILL)  # what the container left behind
        exit_code = code if code >= 0 else 128 - code
        self.log("pod %s/%s exited with %d" % (run.namespace, run.name, exit_code))
        if not run.killing:
            self.patch_status(run, self.final_status(run, exit_code, "Completed" if exit_code == 0 else "Error",
                                                     self.termination_message(run, exit_code)))

    def termination_message(self, run, exit_code):
        """What the kubelet reports as the container's termination message."""
        message = ""
        if run.termination_log and os.path.exists(run.termination_log):
            with open(run.termination_log, "rb") as f:
                message = f.read(4096).decode("utf-8", "replace")
        if not message and exit_code != 0 and \
                run.container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            with open(run.log_path, "rb") as f:
                tail = b"".join(f.readlines()[-80:])[-2048:]
            message = tail.decode("utf-8", "replace")
        return message or None

    def finalize(self, namespace, name, uid):
        """Ends a graceful deletion once the pod's containers are gone (the kubelet's last step)."""
        try:
            self.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (namespace, name),
                         {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                          "preconditions": {"uid": uid}})
        except urllib.error.HTTPError as error:
            if error.code not in (404, 409):
                self.log("removing %s/%s: HTTP %d" % (namespace, name, error.code))
        except OSError as error:
            self.log("removing %s/%s: %s" % (namespace, name, error))

    def kill(self, run, finalize=False):
        with self.lock:
            if run.killing or run.proc is None or run.proc.poll() is not None:
                return
            run.killing = True
        grace = max(0.0, min(run.grace, self.max_grace))
        self.log("pod %s/%s deleted: SIGTERM, SIGKILL after %gs" % (run.namespace, run.name, grace))
        thread = threading.Thread(target=self.terminate, args=(run, grace, finalize), daemon=True,
                                  name="kill-%s" % run.name)
        with self.lock:
            self.threads.append(thread)
        thread.start()

    def terminate(self, run, grace, finalize):
        if self.runtime == "container":
            # podman stop: the image's stop signal (SIGTERM), SIGKILL after the grace period.
            self.podman_run("stop", "--time", str(int(math.ceil(grace))), run.container_name,
                            timeout=grace + 60)
            try:
                run.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _kill_group(run.proc.pid, signal.SIGKILL)
        else:
            _kill_group(run.proc.pid, signal.SIGTERM)
            try:
                run.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(run.proc.pid, signal.SIGKILL)
        run.proc.wait()
        if finalize:
            self.finalize(run.namespace, run.name, run.uid)

    # -- shutdown ------------------------------------------------------------

    def stop(self):
        self.stopping.set()
        conn = self.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def shutdown(self):
        """Kills every process this agent started and joins its threads."""
        with self.lock:
            runs = list(self.pods.values())
        live = [run for run in runs if run.proc is not None and run.proc.poll() is None]
        for run in live:
            run.killing = True
        if self.runtime == "container" and live:
            self.podman_run("rm", "--force", "--time", str(int(min(2.0, self.max_grace))),
                            *[run.container_name for run in live], timeout=120)
        for run in live:
            _kill_group(run.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + min(2.0, self.max_grace)
        for run in runs:
            if run.proc is not None:
                try:
                    run.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
                _kill_group(run.proc.pid, signal.SIGKILL)
                run.proc.wait()
        with self.lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(timeout=5)
        self.log("stopped; %d pods were started" % len(runs))


def _own_by_group(path, gid):
    """fsGroup ownership management: group gid, group read-write, setgid folders."""
    for root, dirs, files in os.walk(path):
        for name in [root] + [os.path.join(root, f) for f in files]:
            try:
                os.chown(name, -1, gid)
                mode = os.lstat(name).st_mode
                extra = 0o2070 if name == root else 0o060
                os.chmod(name, (mode & 0o7777) | extra)
            except OSError:
                pass


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_PR_SET_PDEATHSIG = 1
# Loaded before any fork: the child only calls into it.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    """Runs in the child before exec: SIGKILL it if the agent's thread that forked it dies."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="the API server, https://127.0.0.1:PORT")
    parser.add_argument("--ca-file", required=True, help="the CA that signed the API server's certificate")
    parser.add_argument("--token-file", required=True, help="the node's bearer token (system:node:NAME)")
    parser.add_argument("--provisioner-token-file", help="a token with system:persistent-volume-provisioner: "
                                                         "provision claims too")
    parser.add_argument("--bin-dir", default="", help="colon-separated directories for command[0]")
    parser.add_argument("--work-dir", required=True, help="where the pods' logs go")
    parser.add_argument("--node-name", default="paci-node")
    parser.add_argument("--pod-cwd", help="the pods' working directory (default: the agent's)")
    parser.add_argument("--max-grace", type=float, default=5.0,
                        help="cap on terminationGracePeriodSeconds, in seconds")
    parser.add_argument("--image", action="append", default=[], metavar="PREFIX=COMMAND",
                        help="process runtime: command for containers without one whose image starts with "
                             "PREFIX")
    parser.add_argument("--runtime", choices=("container", "process"), default="container",
                        help="run pods as containers of their images (podman), or as plain processes")
    parser.add_argument("--claims-dir", help="host folders of provisioned volumes (default WORK_DIR/claims)")
    parser.add_argument("--podman", default="podman", help="the podman command")
    args = parser.parse_args()
    images = dict(item.split("=", 1) for item in args.image)

    def read(path):
        with open(path) as f:
            return f.read().strip()
    agent = NodeAgent(args.server, args.ca_file, read(args.token_file), args.bin_dir.split(":"), args.work_dir,
                      args.node_name, args.pod_cwd, args.max_grace, images, runtime=args.runtime,
                      claims_dir=args.claims_dir, podman=args.podman,
                      provisioner_token=read(args.provisioner_token_file) if args.provisioner_token_file else None)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: agent.stop())
    agent.log("node %s, %s runtime, pod IPs %s.0/24, api %s" % (args.node_name, args.runtime, agent.net,
                                                                 args.server))
    loop = threading.Thread(target=agent.run, name="node-agent")
    loop.start()
    while loop.is_alive():
        loop.join(timeout=0.5)


if __name__ == "__main__":
    main()
