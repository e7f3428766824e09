#!/usr/bin/python3
"""The test Kubernetes API server (tests/kube/apiserver.py) and the test kubelet
(tests/kube/kubelet.py), driven by the real kubectl and by plain HTTP: the
TrainingJob CRD and the examples, schema validation, the semantics the operator
relies on (409, 410, status subresource, generation, watch, finalizers, owner
cascade), and pods run as local processes.

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

SOURCE = os.path.abspath(os.environ.get("PACI_SOURCE_DIR", "."))
BUILD = os.path.abspath(os.environ.get("PACI_BUILD_DIR", "build"))
KUBE = os.path.join(SOURCE, "tests", "kube")
CRD = os.path.join(SOURCE, "deploy", "crd", "paci.dev_trainingjobs.yaml")
EXAMPLE = os.path.join(SOURCE, "examples", "trainingjob.yaml")
EXAMPLE_KJV = os.path.join(SOURCE, "examples", "trainingjob-kjv.yaml")
PYTHON = "/usr/bin/python3"
sys.path.insert(0, KUBE)

import yaml  # noqa: E402
from apiserver_process import ApiServerProcess  # noqa: E402
from local_cluster import container_env, images  # noqa: E402

TJ_PATH = "/apis/paci.dev/v1alpha1/namespaces/default/trainingjobs"
POD_PATH = "/api/v1/namespaces/default/pods"

# A pod's program: binds its pod IP on a fixed port (two pods at once must both
# manage), prints what it was given, exits 3.
SAY = """#!/usr/bin/python3
import os, socket, sys
s = socket.socket()
s.bind((os.environ["POD_IP"], 7000))
print("say: args=%s ip=%s msg=%s bound" % (" ".join(sys.argv[1:]), os.environ["POD_IP"], os.environ["MSG"]),
      flush=True)
sys.exit(3)
"""


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out after %gs waiting for %s" % (timeout, what))


def example():
    with open(EXAMPLE) as f:
        return yaml.safe_load(f)


def job(name, **spec_changes):
    obj = example()
    obj["metadata"] = {"name": name, "namespace": "default"}
    obj["spec"].update(spec_changes)
    return obj


class KubeApiServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kube-apiserver-test-")
        cls.api = ApiServerProcess(cls.dir, history=1000)
        cls.port, cls.url, cls.kubeconfig, cls.env = cls.api.port, cls.api.url, cls.api.kubeconfig, cls.api.env
        out = cls.kubectl_run("apply", "-f", CRD)
        assert out.returncode == 0, out.stderr

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # -- helpers -------------------------------------------------------------

    @classmethod
    def kubectl_run(cls, *args, stdin=None):
        return cls.api.kubectl(*args, stdin=stdin)

    def kubectl(self, *args, stdin=None):
        out = self.kubectl_run(*args, stdin=stdin)
        self.assertEqual(out.returncode, 0, "kubectl %s: %s" % (" ".join(args), out.stderr))
        return out.stdout

    def kubectl_fails(self, *args, stdin=None):
        out = self.kubectl_run(*args, stdin=stdin)
        self.assertNotEqual(out.returncode, 0, "kubectl %s succeeded: %s" % (" ".join(args), out.stdout))
        return out.stderr

    def http(self, method, path, body=None, content_type="application/json", accept="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def ok(self, method, path, body=None, content_type="application/json"):
        code, obj = self.http(method, path, body, content_type)
        self.assertIn(code, (200, 201), "%s %s: %s" % (method, path, obj))
        return obj

    def open_watch(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        conn.request("GET", path)
        resp = conn.getresponse()
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.getheader("Transfer-Encoding"), "chunked")
        return conn, resp

    def read_events(self, resp, count):
        events = []
        while len(events) < count:
            line = resp.readline()
            self.assertTrue(line, "watch ended after %d of %d events: %s" % (len(events), count, events))
            events.append(json.loads(line))
        return events

    def read_to_end(self, resp):
        events = []
        while True:
            line = resp.readline()
            if not line:
                return events
            events.append(json.loads(line))

    # -- kubectl -------------------------------------------------------------

    def test_kubectl_applies_lists_and_deletes_trainingjobs(self):
        resources = self.kubectl("api-resources", "--api-group", "paci.dev")
        self.assertRegex(resources, r"trainingjobs\s+ptj\s+paci.dev/v1alpha1\s+true\s+TrainingJob")
        self.assertIn("trainingjob.paci.dev/kjv-small created (server dry run)",
                      self.kubectl("apply", "--dry-run=server", "-f", EXAMPLE_KJV))
        self.assertEqual(self.http("GET", TJ_PATH + "/kjv-small")[0], 404)
        self.assertIn("trainingjob.paci.dev/kjv-tiny created", self.kubectl("apply", "-f", EXAMPLE))
        self.assertIn("trainingjob.paci.dev/kjv-small created", self.kubectl("apply", "-f", EXAMPLE_KJV))
        self.assertIn("unchanged", self.kubectl("apply", "-f", EXAMPLE))

        # Printer columns, with what the operator would write into .status (rounded:
        # loss to 4 decimals, whole tokens/s). The secondary columns have priority 1:
        # kubectl shows them with -o wide only.
        current = self.ok("GET", TJ_PATH + "/kjv-tiny")
        current["status"] = {"phase": "Running", "step": 42, "trainLoss": 2.8258, "maxDrift": 1, "driftLimit": 1,
                             "tokensPerSecond": 71891}
        self.ok("PUT", TJ_PATH + "/kjv-tiny/status", current)
        table = self.kubectl("get", "trainingjobs")
        lines = table.splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "PHASE", "STEP", "LOSS", "AGE"])
        row = next(line for line in lines if line.startswith("kjv-tiny"))
        self.assertRegex(row, r"^kjv-tiny\s+Running\s+42\s+2\.8258\s+\d+s$")
        self.assertIn("kjv-small", table)
        wide = self.kubectl("get", "trainingjobs", "-o", "wide").splitlines()
        self.assertEqual(wide[0].split(), ["NAME", "PHASE", "STEP", "LOSS", "MAX-DRIFT", "DRIFT-LIMIT", "TOKENS/S", "AGE"])
        row = next(line for line in wide if line.startswith("kjv-tiny"))
        self.assertRegex(row, r"^kjv-tiny\s+Running\s+42\s+2\.8258\s+1\s+1\s+71891\s+\d+s$")
        self.assertIn("kjv-tiny", self.kubectl("get", "ptj", "-A"))

        tiny = json.loads(self.kubectl("get", "trainingjob", "kjv-tiny", "-o", "json"))
        self.assertEqual(tiny["spec"]["pipeline"]["schedule"], "paci")
        self.assertEqual(tiny["spec"]["runPolicy"], {"backoffLimit": 2, "suspend": False})
        small = json.loads(self.kubectl("get", "trainingjob", "kjv-small", "-o", "json"))
        self.assertEqual(small["spec"]["runPolicy"], {"backoffLimit": 3, "suspend": False})
        self.assertEqual(small["spec"]["worker"]["resources"]["requests"], {"cpu": "2", "memory": "2Gi"})
        self.assertIn("Run Policy:", self.kubectl("describe", "trainingjob", "kjv-tiny"))

        # A defaulted field the user did not set: kubectl's three-way merge keeps it.
        changed = example()
        changed["spec"]["training"]["steps"] = 80
        self.assertIn("configured", self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(changed)))
        tiny = self.ok("GET", TJ_PATH + "/kjv-tiny")
        self.assertEqual((tiny["spec"]["training"]["steps"], tiny["metadata"]["generation"]), (80, 2))
        self.assertEqual(tiny["status"]["step"], 42)

        self.assertIn('"kjv-tiny" deleted', self.kubectl("delete", "trainingjob", "kjv-tiny", "--timeout=20s"))
        self.assertIn("NotFound", self.kubectl_fails("get", "trainingjob", "kjv-tiny"))
        self.kubectl("delete", "-f", EXAMPLE_KJV, "--timeout=20s")

    def test_kubectl_reports_malformed_trainingjobs_by_field(self):
        def with_change(name, change):
            obj = job(name)
            change(obj["spec"])
            return yaml.safe_dump(obj)

        cases = [
            ("zero-stages", lambda s: s["pipeline"].update(numStages=0),
             "spec.pipeline.numStages: Invalid value: 0: spec.pipeline.numStages in body should be "
             "greater than or equal to 1"),
            ("too-many-stages", lambda s: s["pipeline"].update(numStages=65),
             "spec.pipeline.numStages in body should be less than or equal to 64"),
            ("zero-accumulation", lambda s: s["pipeline"].update(accumulation=0),
             "spec.pipeline.accumulation: Invalid value: 0"),
            ("zigzag", lambda s: s["pipeline"].update(schedule="zigzag"),
             'spec.pipeline.schedule: Unsupported value: "zigzag": supported values: "paci", "1f1b-flush", '
             '"gpipe", "async-1f1b"'),
            ("no-training", lambda s: s.pop("training"), "spec.training: Required value"),
            ("zero-lr", lambda s: s["optimizer"].update(lr=0),
             "spec.optimizer.lr: Invalid value: 0: spec.optimizer.lr in body should be greater than 0"),
            ("string-layers", lambda s: s["model"].update(numLayers="four"),
             'spec.model.numLayers: Invalid value: "string": spec.model.numLayers in body must be of type '
             'integer: "string"'),
            ("pull-sometimes", lambda s: s["worker"].update(imagePullPolicy="Sometimes"),
             'spec.worker.imagePullPolicy: Unsupported value: "Sometimes"'),
            ("empty-corpus", lambda s: s["data"].update(corpusPath=""),
             "spec.data.corpusPath in body should be at least 1 chars long"),
            ("unknown-field", lambda s: s["pipeline"].update(zigzag=True),
             'strict decoding error: unknown field "spec.pipeline.zigzag"'),
            # The worker's pod template.
            ("mount-without-path", lambda s: s["worker"].update(
                volumes=[{"name": "data", "emptyDir": {}}], volumeMounts=[{"name": "data"}]),
             "spec.worker.volumeMounts[0].mountPath: Required value"),
            ("nameless-volume", lambda s: s["worker"].update(volumes=[{"emptyDir": {}}]),
             "spec.worker.volumes[0].name: Required value"),
            ("seccomp-sometimes", lambda s: s["worker"].update(
                podSecurityContext={"seccompProfile": {"type": "Sometimes"}}),
             'spec.worker.podSecurityContext.seccompProfile.type: Unsupported value: "Sometimes"'),
            ("negative-uid", lambda s: s["worker"].update(securityContext={"runAsUser": -1}),
             "spec.worker.securityContext.runAsUser in body should be greater than or equal to 0"),
            ("two-sources", lambda s: s["worker"].update(env=[{"name": "A", "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.name"}, "secretKeyRef": {"name": "s", "key": "k"}}}]),
             "spec.worker.env[0].valueFrom: Too many: 2: must have at most 1 items"),
        ]
        for name, change, message in cases:
            with self.subTest(name):
                stderr = self.kubectl_fails("apply", "-f", "-", stdin=with_change(name, change))
                self.assertIn(message, stderr)
                self.assertEqual(self.http("GET", TJ_PATH + "/" + name)[0], 404)

        # Several errors at once, as the real server lists them; and the Status shape.
        bad = job("several")
        bad["spec"]["pipeline"]["numStages"] = 0
        del bad["spec"]["model"]["dModel"]
        code, status = self.http("POST", TJ_PATH, bad)
        self.assertEqual(code, 422)
        self.assertEqual((status["kind"], status["status"], status["reason"], status["code"]),
                         ("Status", "Failure", "Invalid", 422))
        self.assertTrue(status["message"].startswith('TrainingJob.paci.dev "several" is invalid: ['),
                        status["message"])
        self.assertEqual(status["details"]["kind"], "TrainingJob")
        self.assertEqual({c["field"] for c in status["details"]["causes"]},
                         {"spec.pipeline.numStages", "spec.model.dModel"})

        # Without strict validation an unknown field is pruned, with a warning.
        out = self.kubectl_run("apply", "--validate=warn", "-f", "-",
                               stdin=with_change("pruned", lambda s: s["pipeline"].update(zigzag=True)))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('unknown field "spec.pipeline.zigzag"', out.stderr)
        self.assertNotIn("zigzag", self.ok("GET", TJ_PATH + "/pruned")["spec"]["pipeline"])
        self.ok("DELETE", TJ_PATH + "/pruned")

    # -- HTTP semantics ------------------------------------------------------

    def test_updates_conflict_on_stale_resource_version_and_status_is_separate(self):
        created = self.ok("POST", TJ_PATH, job("conflicts"))
        self.assertEqual(created["metadata"]["generation"], 1)
        self.assertRegex(created["metadata"]["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(self.http("POST", TJ_PATH, job("conflicts"))[1]["reason"], "AlreadyExists")

        # A spec change bumps generation; a stale write gets 409 with the real wording.
        changed = json.loads(json.dumps(created))
        changed["spec"]["training"]["steps"] = 100
        updated = self.ok("PUT", TJ_PATH + "/conflicts", changed)
        self.assertEqual(updated["metadata"]["generation"], 2)
        self.assertGreater(int(updated["metadata"]["resourceVersion"]), int(created["metadata"]["resourceVersion"]))
        code, status = self.http("PUT", TJ_PATH + "/conflicts", changed)
        self.assertEqual((code, status["reason"]), (409, "Conflict"))
        self.assertEqual(status["message"], 'Operation cannot be fulfilled on trainingjobs.paci.dev "conflicts": '
                         "the object has been modified; please apply your changes to the latest version "
                         "and try again")

        # Status writes: only through /status, never bumping generation, 409 when stale.
        with_status = json.loads(json.dumps(updated))
        with_status["status"] = {"phase": "Running", "step": 5}
        ignored = self.ok("PUT", TJ_PATH + "/conflicts", with_status)
        self.assertNotIn("status", ignored)
        self.assertEqual(ignored["metadata"]["resourceVersion"], updated["metadata"]["resourceVersion"],
                         "a no-op write must not bump resourceVersion")
        written = self.ok("PUT", TJ_PATH + "/conflicts/status", with_status)
        self.assertEqual(written["status"], {"phase": "Running", "step": 5})
        self.assertEqual(written["metadata"]["generation"], 2)
        code, status = self.http("PUT", TJ_PATH + "/conflicts/status", with_status)
        self.assertEqual((code, status["reason"]), (409, "Conflict"))
        bad_status = json.loads(json.dumps(written))
        bad_status["status"]["phase"] = "Sleeping"
        code, status = self.http("PUT", TJ_PATH + "/conflicts/status", bad_status)
        self.assertEqual(code, 422, status)
        self.assertIn('status.phase: Unsupported value: "Sleeping"', status["message"])

        # Spec changes through /status are ignored; merge and JSON patches work on both.
        sneaky = json.loads(json.dumps(written))
        sneaky["spec"]["training"]["steps"] = 1
        after = self.ok("PUT", TJ_PATH + "/conflicts/status", sneaky)
        self.assertEqual(after["spec"]["training"]["steps"], 100)
        patched = self.ok("PATCH", TJ_PATH + "/conflicts/status", {"status": {"step": 6}},
                          "application/merge-patch+json")
        self.assertEqual(patched["status"], {"phase": "Running", "step": 6})
        patched = self.ok("PATCH", TJ_PATH + "/conflicts", [{"op": "replace", "path": "/spec/training/steps",
                                                             "value": 120}], "application/json-patch+json")
        self.assertEqual((patched["spec"]["training"]["steps"], patched["metadata"]["generation"]), (120, 3))
        code, status = self.http("PATCH", TJ_PATH + "/conflicts",
                                 {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                                  "spec": {"training": {"steps": 7}}}, "application/merge-patch+json")
        self.assertEqual(code, 409)
        code, status = self.http("PATCH", TJ_PATH + "/conflicts", {"spec": {"pipeline": {"numStages": 0}}},
                                 "application/merge-patch+json")
        self.assertEqual((code, status["reason"]), (422, "Invalid"))
        self.ok("DELETE", TJ_PATH + "/conflicts")
        self.assertEqual(self.http("GET", TJ_PATH + "/conflicts")[1]["reason"], "NotFound")

    def test_watch_replays_from_resource_version_and_expires_after_compaction(self):
        labelled = job("watched")
        labelled["metadata"]["labels"] = {"paci.dev/trainingjob": "watched", "tier": "test"}
        created = self.ok("POST", TJ_PATH, labelled)
        since = created["metadata"]["resourceVersion"]
        self.ok("PATCH", TJ_PATH + "/watched/status", {"status": {"step": 1}}, "application/merge-patch+json")
        self.ok("PATCH", TJ_PATH + "/watched/status", {"status": {"step": 2}}, "application/merge-patch+json")

        # Replay from a resourceVersion, selected by label, then a clean end at timeoutSeconds.
        conn, resp = self.open_watch(TJ_PATH + "?watch=true&resourceVersion=%s&timeoutSeconds=1"
                                     "&labelSelector=tier+in+(test,prod),paci.dev/trainingjob" % since)
        events = self.read_to_end(resp)
        conn.close()
        self.assertEqual([(e["type"], e["object"]["status"]["step"]) for e in events],
                         [("MODIFIED", 1), ("MODIFIED", 2)])
        self.assertEqual(events[-1]["object"]["metadata"]["resourceVersion"],
                         self.ok("GET", TJ_PATH + "/watched")["metadata"]["resourceVersion"])

        # Without a resourceVersion: ADDED for what exists, then live events.
        conn, resp = self.open_watch(TJ_PATH + "?watch=1&fieldSelector=metadata.name%3Dwatched")
        self.assertEqual([e["type"] for e in self.read_events(resp, 1)], ["ADDED"])
        self.ok("DELETE", TJ_PATH + "/watched")
        deleted = self.read_events(resp, 1)[0]
        self.assertEqual((deleted["type"], deleted["object"]["metadata"]["name"]), ("DELETED", "watched"))
        conn.close()

        # After compaction the old resourceVersion is answered with one 410 ERROR event.
        compacted = self.ok("POST", "/testing/compact")
        self.assertGreaterEqual(int(compacted["compactedResourceVersion"]), int(since))
        conn, resp = self.open_watch(TJ_PATH + "?watch=true&resourceVersion=%s" % since)
        events = self.read_to_end(resp)
        conn.close()
        self.assertEqual(len(events), 1, events)
        self.assertEqual(events[0]["type"], "ERROR")
        status = events[0]["object"]
        self.assertEqual((status["kind"], status["code"], status["reason"]), ("Status", 410, "Expired"))
        self.assertRegex(status["message"], r"^too old resource version: %s \(\d+\)$" % since)
        code, status = self.http("GET", TJ_PATH + "?resourceVersion=%s&resourceVersionMatch=Exact" % since)
        self.assertEqual(code, 410)

    def test_dropped_watches_end_abruptly(self):
        # On the wire: a cut stream lacks the terminating zero-length chunk.
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.sendall(b"GET %s?watch=true HTTP/1.1\r\nHost: test\r\n\r\n" % POD_PATH.encode())
        received = []

        def reader():
            while True:
                data = sock.recv(65536)
                if not data:
                    return
                received.append(data)

        thread = threading.Thread(target=reader)
        thread.start()
        wait_until(lambda: self.ok("GET", "/testing/watches")["byResource"].get("pods"), what="the pod watch")
        self.assertGreaterEqual(self.ok("POST", "/testing/drop-watches")["dropped"], 1)
        thread.join(timeout=5)
        self.assertFalse(thread.is_alive(), "the dropped watch did not end")
        sock.close()
        data = b"".join(received)
        self.assertIn(b"Transfer-Encoding: chunked", data)
        self.assertFalse(data.endswith(b"0\r\n\r\n"), "the stream ended cleanly instead of being cut")
        self.assertEqual(self.ok("GET", "/testing/watches")["open"], 0)

        # A clean end (timeoutSeconds) does send the terminating chunk.
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.sendall(b"GET %s?watch=true&timeoutSeconds=1 HTTP/1.1\r\nHost: test\r\n\r\n" % POD_PATH.encode())
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            self.assertTrue(chunk, "the watch was cut instead of ending cleanly: %r" % data)
            data += chunk
        sock.close()

    def test_finalizers_hold_deletion_until_removed(self):
        obj = job("finalized")
        obj["metadata"]["finalizers"] = ["paci.dev/finalizer"]
        created = self.ok("POST", TJ_PATH, obj)
        conn, resp = self.open_watch(TJ_PATH + "?watch=true&resourceVersion=%s"
                                     % created["metadata"]["resourceVersion"])
        deleting = self.ok("DELETE", TJ_PATH + "/finalized", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                               "propagationPolicy": "Background"})
        self.assertIn("deletionTimestamp", deleting["metadata"])
        self.assertEqual(deleting["metadata"]["deletionGracePeriodSeconds"], 0)
        current = self.ok("GET", TJ_PATH + "/finalized")
        self.assertEqual(current["metadata"]["finalizers"], ["paci.dev/finalizer"])
        # No new finalizers while deleting; status may still change.
        more = json.loads(json.dumps(current))
        more["metadata"]["finalizers"].append("paci.dev/another")
        code, status = self.http("PUT", TJ_PATH + "/finalized", more)
        self.assertEqual(code, 422, status)
        self.assertIn("metadata.finalizers: Forbidden", status["message"])
        current = self.ok("PATCH", TJ_PATH + "/finalized/status", {"status": {"phase": "Cancelled"}},
                          "application/merge-patch+json")
        current["metadata"]["finalizers"] = []
        self.ok("PUT", TJ_PATH + "/finalized", current)
        self.assertEqual(self.http("GET", TJ_PATH + "/finalized")[0], 404)
        events = self.read_events(resp, 3)
        conn.close()
        self.assertEqual([e["type"] for e in events], ["MODIFIED", "MODIFIED", "DELETED"])
        self.assertIn("deletionTimestamp", events[0]["object"]["metadata"])

    def test_deleting_an_owner_deletes_its_dependents(self):
        owner = self.ok("POST", TJ_PATH, job("owner"))
        ref = {"apiVersion": "paci.dev/v1alpha1", "kind": "TrainingJob", "name": "owner",
               "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}

        def pod(name, finalizers=()):
            # spec.nodeName names no kubelet: these pods are never run.
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "ownerReferences": [ref],
                                                                   "finalizers": list(finalizers),
                                                                   "labels": {"paci.dev/trainingjob": "owner"}},
                    "spec": {"nodeName": "elsewhere", "containers": [{"name": "main", "image": "x"}]}}

        self.ok("POST", POD_PATH, pod("owned-0"))
        self.ok("POST", POD_PATH, pod("owned-1", ["paci.dev/keep"]))
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "owner", "ownerReferences": [ref]},
                   "spec": {"clusterIP": "None", "selector": {"paci.dev/trainingjob": "owner"}}}
        self.ok("POST", "/api/v1/namespaces/default/services", service)
        listed = self.ok("GET", POD_PATH + "?labelSelector=paci.dev%2Ftrainingjob%3Downer")
        self.assertEqual(sorted(p["metadata"]["name"] for p in listed["items"]), ["owned-0", "owned-1"])

        self.kubectl("delete", "trainingjob", "owner", "--timeout=20s")
        self.assertEqual(self.http("GET", POD_PATH + "/owned-0")[0], 404)
        self.assertEqual(self.http("GET", "/api/v1/namespaces/default/services/owner")[0], 404)
        held = self.ok("GET", POD_PATH + "/owned-1")
        self.assertIn("deletionTimestamp", held["metadata"])
        self.ok("PATCH", POD_PATH + "/owned-1", {"metadata": {"finalizers": None}}, "application/merge-patch+json")
        self.assertEqual(self.http("GET", POD_PATH + "/owned-1")[0], 404)

        # Orphan: the dependent stays, without the reference.
        owner = self.ok("POST", TJ_PATH, job("owner"))
        ref["uid"] = owner["metadata"]["uid"]
        self.ok("POST", POD_PATH, pod("orphan"))
        self.ok("DELETE", TJ_PATH + "/owner?propagationPolicy=Orphan")
        self.assertNotIn("ownerReferences", self.ok("GET", POD_PATH + "/orphan")["metadata"])
        self.ok("DELETE", POD_PATH + "/orphan")

    def test_table_output_and_discovery(self):
        code, table = self.http("GET", TJ_PATH, accept="application/json;as=Table;v=v1;g=meta.k8s.io")
        self.assertEqual((code, table["kind"]), (200, "Table"))
        self.assertEqual([(c["name"], c["priority"]) for c in table["columnDefinitions"]],
                         [("Name", 0), ("Phase", 0), ("Step", 0), ("Loss", 0), ("Max-Drift", 1),
                          ("Drift-Limit", 1), ("Tokens/s", 1), ("Age", 0)])
        groups = self.ok("GET", "/apis")["groups"]
        self.assertIn("paci.dev", [g["name"] for g in groups])
        resources = self.ok("GET", "/apis/paci.dev/v1alpha1")["resources"]
        self.assertEqual({r["name"] for r in resources}, {"trainingjobs", "trainingjobs/status"})
        crd = self.ok("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainingjobs.paci.dev")
        self.assertEqual({c["type"]: c["status"] for c in crd["status"]["conditions"]},
                         {"Established": "True", "NamesAccepted": "True"})
        self.assertIn("leases", [r["name"] for r in self.ok("GET", "/apis/coordination.k8s.io/v1")["resources"]])
        counts = self.ok("GET", "/testing/requests")
        self.assertGreater(counts["byVerb"]["get"], 0)

    # -- the kubelet ---------------------------------------------------------

    def test_kubelet_runs_pods_as_processes(self):
        bin_dir = os.path.join(self.dir, "bin")
        work_dir = os.path.join(self.dir, "pods")
        os.makedirs(bin_dir, exist_ok=True)
        with open(os.path.join(bin_dir, "say"), "w") as f:
            f.write(SAY)
        os.chmod(os.path.join(bin_dir, "say"), 0o755)
        # The process runtime: what this checks (command lookup in --bin-dir, the process group
        # killed on delete, PR_SET_PDEATHSIG) is that runtime's own; containers are checked below.
        self.run_kubelet("kubelet", ["--runtime", "process", "--bin-dir", "/nonexistent:" + bin_dir,
                                     "--work-dir", work_dir, "--pod-cwd", SOURCE, "--max-grace", "5"],
                         lambda: self.check_kubelet(work_dir))
        # Nothing it started outlives it.
        pid = int(_read(os.path.join(self.dir, "left.pid")))
        wait_until(lambda: not _alive(pid), timeout=5, what="the pod left running to be killed")

    def run_kubelet(self, name, args, check, env=None):
        """Runs a test kubelet against this server while check() runs; a failure carries its log.
        Stops it, checks it logged no traceback, and returns its pid."""
        log_file = open(os.path.join(self.dir, name + ".log"), "w+")
        kubelet = subprocess.Popen([PYTHON, os.path.join(KUBE, "kubelet.py"), "--server", self.url] + args,
                                   stdout=log_file, stderr=subprocess.STDOUT, env=env)
        try:
            check()
        except AssertionError as error:
            log_file.seek(0)
            raise AssertionError("%s\n--- kubelet:\n%s" % (error, log_file.read()[-6000:])) from None
        finally:
            kubelet.send_signal(signal.SIGTERM)
            kubelet.wait(timeout=60)
            log_file.seek(0)
            log = log_file.read()
            log_file.close()
        self.assertNotIn("Traceback", log)
        return kubelet.pid

    def test_kubelet_runs_pods_as_containers_with_volumes_and_security(self):
        image = images(BUILD)["worker"]
        work_dir = os.path.join(self.dir, "container-pods")
        pid = self.run_kubelet("container-kubelet", ["--work-dir", work_dir, "--max-grace", "3",
                                                     "--node-name", "box"],
                               lambda: self.check_container_kubelet(image, work_dir), env=container_env())
        # Nothing it started outlives it.
        left = subprocess.run(["podman", "ps", "--filter", "label=io.paci.test-kubelet=%d" % pid,
                               "--format", "{{.Names}}"], capture_output=True, text=True, env=container_env())
        self.assertEqual(left.stdout.strip(), "", "containers left running")

    def check_container_kubelet(self, image, work_dir):
        ns = "box"
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
             "stringData": {"token": "s3cret"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tuning", "namespace": ns},
             "data": {"LR": "0.003", "note.txt": "from a configMap"}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "shared", "namespace": ns},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}]))

        def pod(name, script, claim="shared", fs_group=65532, run_as=65532, extra_spec=None, **container):
            spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": run_as, "runAsGroup": run_as,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [{"name": "scratch", "emptyDir": {}},
                                {"name": "shared", "persistentVolumeClaim": {"claimName": claim}},
                                {"name": "creds", "secret": {"secretName": "creds"}},
                                {"name": "tuning", "configMap": {"name": "tuning",
                                                                 "items": [{"key": "note.txt", "path": "n/note"}]}}],
                    "containers": [dict({
                        "name": "main", "image": image, "command": ["/bin/sh", "-c"], "args": [script],
                        "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                                {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "envFrom": [{"configMapRef": {"name": "tuning"}, "prefix": "T_"}],
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                                         {"name": "shared", "mountPath": "/shared"},
                                         {"name": "creds", "mountPath": "/etc/creds"},
                                         {"name": "tuning", "mountPath": "/etc/tuning"}]}, **container)]}
            if fs_group is not None:
                spec["securityContext"]["fsGroup"] = fs_group
            spec.update(extra_spec or {})
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}

        def get(name):
            code, obj = self.http("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))
            return obj if code == 200 else None

        def ended(name):
            p = get(name)
            return p if p and p.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

        def log(name):
            return _read(os.path.join(work_dir, "%s_%s.log" % (ns, name)))

        host_secret = os.path.join(self.dir, "host-only")
        with open(host_secret, "w") as f:
            f.write("the host's\n")
        # The writer: non-root with fsGroup, a read-only root file system, every volume kind.
        writer = ("set -e; echo uid=$(id -u) gid=$(id -g) groups=$(id -G); "
                  "echo \"$ME:$TOKEN:$T_LR\" > /shared/from-writer; echo scratch > /scratch/x; "
                  "cat /etc/creds/token; echo; cat /etc/tuning/n/note; echo; "
                  "if touch /root-file 2>/dev/null; then echo rootfs-writable; else echo rootfs-read-only; fi; "
                  "if [ -e %s ]; then echo host-visible; else echo host-hidden; fi; "
                  "test -r /usr/share/paci/kjv.txt && echo corpus-in-image" % host_secret)
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod("writer", writer)))
        p = wait_until(lambda: ended("writer"), timeout=60, what="the writer pod to end")
        self.assertEqual(p["status"]["phase"], "Succeeded", log("writer"))
        out = log("writer")
        self.assertIn("uid=65532 gid=65532", out)
        self.assertRegex(out, r"groups=.*\b65532\b")
        self.assertIn("s3cret", out)
        self.assertIn("from a configMap", out)
        self.assertIn("rootfs-read-only", out)
        self.assertIn("host-hidden", out, "a container must not see the host's files")
        self.assertIn("corpus-in-image", out)
        self.assertTrue(p["status"]["containerStatuses"][0]["containerID"].startswith("podman://"))
        code, claim = self.http("GET", "/api/v1/namespaces/%s/persistentvolumeclaims/shared" % ns)
        self.assertEqual(claim["status"]["phase"], "Bound")

        # A hostPath volume shows that host folder, and only it.
        host_dir = os.path.join(self.dir, "host-dir")
        os.makedirs(host_dir, exist_ok=True)
        with open(os.path.join(host_dir, "greeting"), "w") as f:
            f.write("from the host\n")
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod(
            "host-path", "cat /host/greeting", extra_spec={
                "volumes": [{"name": "host", "hostPath": {"path": host_dir, "type": "Directory"}}]},
            volumeMounts=[{"name": "host", "mountPath": "/host", "readOnly": True}])))
        p = wait_until(lambda: ended("host-path"), timeout=60, what="the hostPath pod to end")
        self.assertEqual(p["status"]["phase"], "Succeeded", log("host-path"))
        self.assertIn("from the host", log("host-path"))

        # Another pod on the same claim sees the file (ReadWriteMany); its container file system is fresh.
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod(
            "reader", "cat /shared/from-writer; ls /scratch; test ! -e /root-file && echo fresh")))
        p = wait_until(lambda: ended("reader"), timeout=60, what="the reader pod to end")
        self.assertEqual(p["status"]["phase"], "Succeeded", log("reader"))
        self.assertIn("writer:s3cret:0.003", log("reader"))
        self.assertNotIn("x", log("reader").split("\n")[1:2], "emptyDir is per pod")
        self.assertIn("fresh", log("reader"))

        # Without fsGroup a fresh claim is root's: a non-root pod cannot write there, as on a cluster.
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "bare", "namespace": ns},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
            pod("no-fsgroup", "touch /shared/f", claim="bare", fs_group=None)]))
        p = wait_until(lambda: ended("no-fsgroup"), timeout=60, what="the pod without fsGroup to end")
        self.assertEqual(p["status"]["phase"], "Failed")
        self.assertIn("Permission denied", log("no-fsgroup"))

        # A claim that does not exist keeps the pod Pending with the scheduler's message, until it does.
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod("late", "echo ran", claim="later")))
        p = wait_until(lambda: (get("late") or {}).get("status", {}).get("conditions"), timeout=30,
                       what="the pod waiting for its claim")
        self.assertEqual(get("late")["status"]["phase"], "Pending")
        scheduled = {c["type"]: c for c in get("late")["status"]["conditions"]}["PodScheduled"]
        self.assertEqual((scheduled["status"], scheduled["reason"]), ("False", "Unschedulable"))
        self.assertEqual(scheduled["message"], 'persistentvolumeclaim "later" not found')
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "later", "namespace": ns},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}))
        p = wait_until(lambda: ended("late"), timeout=60, what="the pod to run once its claim exists")
        self.assertEqual(p["status"]["phase"], "Succeeded")

        # runAsNonRoot with uid 0, and an image that is not there: the kubelet's refusals.
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
            pod("as-root", "true", run_as=0), pod("no-image", "true", image="example.invalid/none:1",
                                                   imagePullPolicy="Never")]))

        def waiting(name):
            statuses = (get(name) or {}).get("status", {}).get("containerStatuses") or [{}]
            return statuses[0].get("state", {}).get("waiting")
        state = wait_until(lambda: waiting("as-root"), timeout=30, what="as-root to be refused")
        self.assertEqual(state["reason"], "CreateContainerConfigError")
        self.assertIn("container's runAsUser breaks non-root policy", state["message"])
        state = wait_until(lambda: waiting("no-image"), timeout=30, what="no-image to wait")
        self.assertEqual(state["reason"], "ErrImageNeverPull")
        self.assertIn('"example.invalid/none:1" is not present', state["message"])

        # Deleting a running pod stops its container within the grace period (capped at 3 s here).
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod("sleeper", "sleep 600")))
        wait_until(lambda: (get("sleeper") or {}).get("status", {}).get("phase") == "Running", timeout=60,
                   what="the sleeper to run")
        started = time.monotonic()
        self.kubectl("delete", "pod", "sleeper", "-n", ns, "--timeout=30s")

        def container_gone():
            out = subprocess.run(["podman", "ps", "-a", "--filter", "label=io.kubernetes.pod.name=sleeper",
                                  "--format", "{{.Names}}"], capture_output=True, text=True, env=container_env())
            return out.returncode == 0 and out.stdout.strip() == ""
        wait_until(container_gone, timeout=30, what="the deleted pod's container to go")
        self.assertLess(time.monotonic() - started, 30)

    def check_kubelet(self, work_dir):
        def say_pod(name):
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "test", "command": ["say"],
                        "args": ["$(MSG)", "$$(MSG)", "$(UNDEFINED)", "$(NAME).$(NS)"],
                        "env": [{"name": "MSG", "value": "hello"},
                                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}

        def sleeper(name, pid_file):
            # $$$$ is the kubelet's escape for the shell's $$.
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "containers": [{
                        "name": "main", "image": "test", "command": ["/bin/sh", "-c"],
                        "args": ["echo $$$$ > %s; sleep 600 & wait" % pid_file]}]}}

        manifest = "---\n".join(yaml.safe_dump(p) for p in (
            say_pod("say-a"), say_pod("say-b"), sleeper("sleeper", os.path.join(self.dir, "sleeper.pid"))))
        self.kubectl("apply", "-f", "-", stdin=manifest)

        def phase(name, wanted):
            code, pod = self.http("GET", POD_PATH + "/" + name)
            return pod if code == 200 and pod.get("status", {}).get("phase") == wanted else None

        ips = set()
        for name in ("say-a", "say-b"):
            pod = wait_until(lambda: phase(name, "Failed"), what="%s to fail" % name)
            ip = pod["status"]["podIP"]
            self.assertRegex(ip, r"^127\.\d+\.\d+\.\d+$")
            self.assertEqual(pod["status"]["podIPs"], [{"ip": ip}])
            ips.add(ip)
            terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
            self.assertEqual((terminated["exitCode"], terminated["reason"]), (3, "Error"))
            with open(os.path.join(work_dir, "default_%s.log" % name)) as f:
                self.assertEqual(f.read().strip(), "say: args=hello $(MSG) $(UNDEFINED) %s.default ip=%s "
                                 "msg=hello bound" % (name, ip))
        self.assertEqual(len(ips), 2, "pods must get IPs of their own")

        pod = wait_until(lambda: phase("sleeper", "Running"), what="the sleeper to run")
        self.assertEqual({c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"], "True")
        self.assertTrue(pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
        pid_file = os.path.join(self.dir, "sleeper.pid")
        pid = int(wait_until(lambda: os.path.exists(pid_file) and _read(pid_file).strip(),
                             what="the sleeper's pid"))
        self.assertTrue(_alive(pid))
        self.assertRegex(self.kubectl("get", "pods", "-o", "wide"), r"sleeper\s+1/1\s+Running\s+0\s+\S+\s+127\.")
        started = time.monotonic()
        self.kubectl("delete", "pod", "sleeper", "--timeout=20s")
        wait_until(lambda: not _alive(pid), timeout=8, what="the deleted pod's process to end")
        self.assertLess(time.monotonic() - started, 8)
        self.assertIn("NotFound", self.kubectl_fails("get", "pod", "sleeper"))

        # A pod still running when the kubelet stops (checked by the caller).
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(sleeper("left", os.path.join(self.dir, "left.pid"))))
        wait_until(lambda: phase("left", "Running"), what="the last pod to run")
        wait_until(lambda: os.path.exists(os.path.join(self.dir, "left.pid")), what="the last pod's pid")
        for name in ("say-a", "say-b"):
            self.kubectl("delete", "pod", name)


def _read(path):
    with open(path) as f:
        return f.read()


def _alive(pid):
    """True while `pid` runs (a zombie counts as ended)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


if __name__ == "__main__":
    unittest.main(verbosity=2)
