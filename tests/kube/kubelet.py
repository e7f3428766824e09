#!/usr/bin/python3
"""A test kubelet: runs the pods of a (test) Kubernetes API server as local processes.

It lists and watches pods in every namespace (re-listing after 410 Expired or a
dropped stream). Each pod whose spec.nodeName is empty or this node's name, still
Pending and not being deleted, is started once:

* it gets a pod IP of its own on loopback: a random 127.A.B.0/24 chosen at start,
  handing out .2, .3, ... (Linux routes all of 127/8 to lo), so pods may listen
  on the same fixed ports;
* the first container's command + args run as a real process in its own process
  group. command[0] without a slash is looked up in --bin-dir (then PATH); with no
  command, an --image PREFIX=COMMAND mapping whose prefix starts the image name
  supplies one. $(VAR) in command and args expands from the container's env
  (value, valueFrom.fieldRef for metadata.name/namespace/uid, status.podIP,
  status.hostIP, spec.nodeName, spec.serviceAccountName, metadata.labels['k'],
  metadata.annotations['k']; configMapKeyRef and secretKeyRef are read from the
  server); $$ escapes. Those variables, plus this process's environment, are the
  process' environment. stdout+stderr go to WORK_DIR/NAMESPACE_POD.log; the
  working directory is --pod-cwd (default: this process's);
* status goes through the pods/status subresource: Running (podIP, podIPs, hostIP,
  startTime, conditions, containerStatuses running), then Succeeded (exit 0) or
  Failed with the container terminated (exitCode, reason Completed or Error).
  Pods are never restarted, whatever their restartPolicy.

A pod that is deleted (or gets a deletionTimestamp) gets SIGTERM on its process
group, then SIGKILL after min(terminationGracePeriodSeconds, --max-grace) seconds.
On SIGTERM or SIGINT the kubelet kills every process it started and exits. Its
children also get SIGKILL should the kubelet itself die (PR_SET_PDEATHSIG).

Run: /usr/bin/python3 tests/kube/kubelet.py --server http://127.0.0.1:PORT \\
         --bin-dir DIR[:DIR...] --work-dir DIR [--node-name test-node] [--pod-cwd DIR]
"""

import argparse
import base64
import ctypes
import datetime
import http.client
import json
import os
import random
import shutil
import signal
import socket
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


class PodRun:
    """One started pod: its process and what its status reports."""

    def __init__(self, pod, ip, log_path):
        m = pod["metadata"]
        self.uid, self.namespace, self.name = m["uid"], m["namespace"], m["name"]
        self.container = pod["spec"]["containers"][0]
        self.ip, self.log_path = ip, log_path
        self.grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        self.proc = None
        self.started_at = None
        self.killing = False
        self.monitor = None


class Kubelet:
    """Owns the watch loop, the pods' processes and the threads that wait on them.
    run() blocks until stop(); stop() may be called from any thread or a signal handler."""

    def __init__(self, server, bin_dirs, work_dir, node_name="test-node", pod_cwd=None, max_grace=5.0,
                 images=None, log=sys.stderr):
        self.server = server.rstrip("/")
        self.bin_dirs = [d for d in bin_dirs if d]
        self.work_dir = work_dir
        self.node_name = node_name
        self.pod_cwd = pod_cwd or os.getcwd()
        self.max_grace = max_grace
        self.images = images or {}
        self._log = log
        self.net = "127.%d.%d" % (random.randint(1, 254), random.randint(0, 255))
        self.next_host = 2
        self.host_ip = "127.0.0.1"
        self.lock = threading.Lock()
        self.pods = {}  # uid -> PodRun
        self.threads = []
        self.stopping = threading.Event()
        self.conn = None
        os.makedirs(work_dir, exist_ok=True)

    def log(self, text):
        self._log.write("kubelet: %s\n" % text)
        self._log.flush()

    # -- API access ----------------------------------------------------------

    def request(self, method, path, body=None, content_type="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

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

    # -- the loop ------------------------------------------------------------

    def run(self):
        rv = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    pods = self.request("GET", "/api/v1/pods")
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
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=None)
        self.conn = conn
        try:
            conn.request("GET", "/api/v1/pods?watch=true&allowWatchBookmarks=true&timeoutSeconds=300"
                         "&resourceVersion=%s" % rv, headers={"Accept": "application/json"})
            resp = conn.getresponse()
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

    def handle(self, etype, pod):
        m, spec = pod.get("metadata", {}), pod.get("spec", {})
        if spec.get("nodeName") not in (None, "", self.node_name):
            return
        with self.lock:
            run = self.pods.get(m.get("uid"))
        if etype == "DELETED" or m.get("deletionTimestamp"):
            if run is not None:
                self.kill(run)
            return
        if run is None and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
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
        variables = {}
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
        containers = pod["spec"].get("containers") or [{}]
        run = PodRun(pod, self.allocate_ip(), os.path.join(self.work_dir, "%s_%s.log" % (m["namespace"],
                                                                                          m["name"])))
        with self.lock:
            if m["uid"] in self.pods:
                return
            self.pods[m["uid"]] = run
        container = containers[0]
        run.started_at = now_rfc3339()
        try:
            variables = self.environment(pod, container, run.ip)
            command = list(container.get("command") or [])
            if not command:
                image = container.get("image", "")
                prefix = next((p for p in self.images if image.startswith(p)), None)
                if prefix is None:
                    raise ValueError("container %s has no command and no --image mapping matches %s"
                                     % (container.get("name"), image))
                command = [self.images[prefix]]
            argv = [expand(a, variables) for a in command + list(container.get("args") or [])]
            argv[0] = self.resolve(argv[0])
            env = dict(os.environ)
            env.update(variables)
            with open(run.log_path, "ab") as out:
                run.proc = subprocess.Popen(argv, env=env, cwd=self.pod_cwd, stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                            preexec_fn=_die_with_parent)
        except (OSError, ValueError, urllib.error.HTTPError) as error:
            self.log("pod %s/%s cannot start: %s" % (run.namespace, run.name, error))
            with open(run.log_path, "a") as out:
                out.write("kubelet: cannot start: %s\n" % error)
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

    def conditions(self, ready, when):
        value = "True" if ready else "False"
        return [{"type": t, "status": s, "lastProbeTime": None, "lastTransitionTime": when}
                for t, s in (("PodReadyToStartContainers", "True"), ("Initialized", "True"),
                             ("Ready", value), ("ContainersReady", value), ("PodScheduled", "True"))]

    def container_status(self, run, ready, state):
        return {"name": run.container.get("name", "main"), "image": run.container.get("image", ""),
                "imageID": "", "containerID": "paci-test://%s" % (run.proc.pid if run.proc else "none"),
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
            self.patch_status(run, self.final_status(run, exit_code, "Completed" if exit_code == 0 else "Error"))

    def kill(self, run):
        with self.lock:
            if run.killing or run.proc is None or run.proc.poll() is not None:
                return
            run.killing = True
        grace = max(0.0, min(run.grace, self.max_grace))
        self.log("pod %s/%s deleted: SIGTERM, SIGKILL after %gs" % (run.namespace, run.name, grace))
        thread = threading.Thread(target=self.terminate, args=(run, grace), daemon=True,
                                  name="kill-%s" % run.name)
        with self.lock:
            self.threads.append(thread)
        thread.start()

    def terminate(self, run, grace):
        _kill_group(run.proc.pid, signal.SIGTERM)
        try:
            run.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(run.proc.pid, signal.SIGKILL)
        run.proc.wait()

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
        """Kills every process this kubelet started and joins its threads."""
        with self.lock:
            runs = list(self.pods.values())
        for run in runs:
            if run.proc is not None and run.proc.poll() is None:
                run.killing = True
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


def _kill_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_PR_SET_PDEATHSIG = 1
# Loaded before any fork: the child only calls into it.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    """Runs in the child before exec: SIGKILL it if the kubelet's thread that forked it dies."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="the API server, http://127.0.0.1:PORT")
    parser.add_argument("--bin-dir", default="", help="colon-separated directories for command[0]")
    parser.add_argument("--work-dir", required=True, help="where the pods' logs go")
    parser.add_argument("--node-name", default="test-node")
    parser.add_argument("--pod-cwd", help="the pods' working directory (default: the kubelet's)")
    parser.add_argument("--max-grace", type=float, default=5.0,
                        help="cap on terminationGracePeriodSeconds, in seconds")
    parser.add_argument("--image", action="append", default=[], metavar="PREFIX=COMMAND",
                        help="command for containers without one whose image starts with PREFIX")
    args = parser.parse_args()
    images = dict(item.split("=", 1) for item in args.image)
    kubelet = Kubelet(args.server, args.bin_dir.split(":"), args.work_dir, args.node_name, args.pod_cwd,
                      args.max_grace, images)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: kubelet.stop())
    kubelet.log("node %s, pod IPs %s.0/24, api %s" % (args.node_name, kubelet.net, args.server))
    loop = threading.Thread(target=kubelet.run, name="kubelet")
    loop.start()
    while loop.is_alive():
        loop.join(timeout=0.5)


if __name__ == "__main__":
    main()
