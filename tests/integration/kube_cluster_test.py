#!/usr/bin/python3
"""paci's Kubernetes objects on the real control plane (tests/harness/control_plane.py:
etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from their Go
modules by scripts/kube-toolchain.sh), driven by the real kubectl and by HTTPS: the
TrainingJob CRD and the examples, its schema and CEL validation as the server judges
them, printer columns, the status subresource, garbage collection of what a
TrainingJob owns, Pod Security admission of the deployment's namespace, RBAC of the
chart's operator account, and pods that the real scheduler binds to a real kubelet
with containerd (tests/harness/kubelet_node.py).

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import base64
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import yaml

from harness.control_plane import ControlPlane, kube_bin
from harness.kubelet_node import KubeletNode, make_local_volumes
from harness.local_cluster import container_env, images
from harness.paths import BUILD, SOURCE

CRD = os.path.join(SOURCE, "helm", "paci", "crds", "paci.dev_trainingjobs.yaml")
EXAMPLE = os.path.join(SOURCE, "examples", "trainingjob.yaml")
EXAMPLE_KJV = os.path.join(SOURCE, "examples", "trainingjob-kjv.yaml")
EXAMPLE_GPU = os.path.join(SOURCE, "examples", "trainingjob-gpu.yaml")
NAMESPACE_YAML = os.path.join(SOURCE, "deploy", "namespace.yaml")

TJ_PATH = "/apis/paci.dev/v1alpha1/namespaces/default/trainingjobs"
POD_PATH = "/api/v1/namespaces/default/pods"

# A pod's program: binds its pod IP on a fixed port (two pods at once must both
# manage), prints what it was given, exits 3.
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


class KubeClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kube-cluster-test-")
        cls.plane = ControlPlane(cls.dir, BUILD).start()
        try:
            cls.url = cls.plane.url
            out = cls.kubectl_run("apply", "-f", CRD)
            assert out.returncode == 0, out.stderr
            cls.plane.wait_crd_established("trainingjobs.paci.dev")
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.plane.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # -- helpers -------------------------------------------------------------

    @classmethod
    def kubectl_run(cls, *args, stdin=None, kubeconfig=None):
        return cls.plane.kubectl(*args, stdin=stdin, check=False, kubeconfig=kubeconfig)

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
        req.add_header("Authorization", "Bearer " + self.plane.tokens["admin"])
        try:
            with urllib.request.urlopen(req, timeout=20, context=self.plane.ssl_context()) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def ok(self, method, path, body=None, content_type="application/json"):
        code, obj = self.http(method, path, body, content_type)
        self.assertIn(code, (200, 201), "%s %s: %s" % (method, path, obj))
        return obj

    def open_watch(self, path):
        port = int(self.url.rsplit(":", 1)[1])
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=20, context=self.plane.ssl_context())
        conn.request("GET", path, headers={"Authorization": "Bearer " + self.plane.tokens["admin"]})
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
        self.assertIn("trainingjob.paci.dev/kjv-gpu created (server dry run)",
                      self.kubectl("apply", "--dry-run=server", "-f", EXAMPLE_GPU))
        self.assertEqual(self.http("GET", TJ_PATH + "/kjv-small")[0], 404)
        self.assertIn("trainingjob.paci.dev/kjv-tiny created", self.kubectl("apply", "-f", EXAMPLE))
        self.assertIn("trainingjob.paci.dev/kjv-small created", self.kubectl("apply", "-f", EXAMPLE_KJV))
        self.assertIn("unchanged", self.kubectl("apply", "-f", EXAMPLE))

        # Printer columns, with what the operator would write into .status (rounded:
        # loss to 4 decimals, whole tokens/s). The secondary columns have priority 1:
        # kubectl shows them with -o wide only.
        current = self.ok("GET", TJ_PATH + "/kjv-tiny")
        current["status"] = {"phase": "Running", "step": 42, "trainLoss": 2.8258, "maxDrift": 1, "driftLimit": 1,
                             "tokensPerSecond": 71891, "shape": "1 stage x 1 replica", "conditions": [
                                 {"type": "Resizing", "status": "True", "reason": "WorkersLost",
                                  "message": "from 2 stages x 1 replica to 1 stage x 1 replica at step 40",
                                  "lastTransitionTime": "2026-12-05T10:00:00Z"}]}
        self.ok("PUT", TJ_PATH + "/kjv-tiny/status", current)
        table = self.kubectl("get", "trainingjobs")
        lines = table.splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "PHASE", "STEP", "LOSS", "RESIZING", "AGE"])
        row = next(line for line in lines if line.startswith("kjv-tiny"))
        self.assertRegex(row, r"^kjv-tiny\s+Running\s+42\s+2\.8258\s+True\s+\d+s$")
        # A job with no status yet (and one that never resized) leaves those columns empty.
        self.assertRegex(next(line for line in lines if line.startswith("kjv-small")), r"^kjv-small\s+\d+s$")
        wide = self.kubectl("get", "trainingjobs", "-o", "wide").splitlines()
        self.assertEqual(wide[0].split(), ["NAME", "PHASE", "STEP", "LOSS", "RESIZING", "SHAPE", "MAX-DRIFT",
                                           "DRIFT-LIMIT", "TOKENS/S", "PARITY-GAP", "AGE"])
        row = next(line for line in wide if line.startswith("kjv-tiny"))
        self.assertRegex(row, r"^kjv-tiny\s+Running\s+42\s+2\.8258\s+True\s+1 stage x 1 replica\s+1\s+1\s+71891"
                              r"\s+\d+s$")
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
             "spec.worker.env[0].valueFrom: Too many: 2: must have at most 1 item"),
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
        # Both fields, and the server's note that the CEL rules wait for a valid object.
        causes = {c["field"] for c in status["details"]["causes"]}
        self.assertLessEqual({"spec.pipeline.numStages", "spec.model.dModel"}, causes)
        self.assertIn("some validation rules were not checked because the object was invalid",
                      status["message"])

        # Without strict validation an unknown field is pruned, with a warning.
        out = self.kubectl_run("apply", "--validate=warn", "-f", "-",
                               stdin=with_change("pruned", lambda s: s["pipeline"].update(zigzag=True)))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn('unknown field "spec.pipeline.zigzag"', out.stderr)
        self.assertNotIn("zigzag", self.ok("GET", TJ_PATH + "/pruned")["spec"]["pipeline"])
        self.ok("DELETE", TJ_PATH + "/pruned")

    def test_cross_field_rules_are_judged_by_the_server(self):
        """The CRD's CEL rules (x-kubernetes-validations): what job_spec_validation.cc refuses across fields,
        refused by kube-apiserver itself before anything is stored, naming the field."""
        def with_change(name, change):
            obj = job(name)
            change(obj["spec"])
            return yaml.safe_dump(obj)

        def unset_accumulation(spec):
            del spec["pipeline"]["accumulation"]

        cases = [
            ("two-sources", lambda s: s["data"].update(dataset="/data/kjv"),
             "spec.data.corpusPath: Invalid value: exactly one of spec.data.corpusPath (a UTF-8 "
             "text) and spec.data.dataset (a folder of token shards)"),
            ("no-source", lambda s: s["data"].pop("corpusPath"),
             "spec.data.corpusPath: Invalid value: exactly one of spec.data.corpusPath"),
            ("no-accumulation", unset_accumulation,
             "spec.pipeline.accumulation: Required value: required (or spec.pipeline.globalBatch, from "
             "which it is derived); maxDrift does not choose the batch"),
            ("drift-alone", lambda s: (unset_accumulation(s), s["pipeline"].update(maxDrift=2)),
             "spec.pipeline.accumulation: Required value: required (or spec.pipeline.globalBatch"),
            ("drift-too-small", lambda s: s["pipeline"].update(numStages=4, accumulation=1, maxDrift=1),
             "spec.pipeline.maxDrift: Invalid value: the accumulation lets a micro-batch cross "
             "ceil((numStages-1)/accumulation) optimizer steps at stage 0, more than maxDrift; use an "
             "accumulation of at least ceil((numStages-1)/maxDrift) (for the same global batch, a "
             "smaller microBatchSize)"),
            ("global-batch-too-small", lambda s: (unset_accumulation(s), s["pipeline"].update(
                numStages=4, maxDrift=1, globalBatch=s["pipeline"]["microBatchSize"])),
             "spec.pipeline.maxDrift: Invalid value: the accumulation globalBatch / (microBatchSize x "
             "dataParallel) lets a micro-batch cross more than maxDrift optimizer steps at stage 0"),
            ("global-batch-uneven", lambda s: s["pipeline"].update(
                globalBatch=s["pipeline"]["microBatchSize"] * s["pipeline"]["accumulation"] + 1),
             "spec.pipeline.globalBatch: Invalid value: must be a multiple of microBatchSize x dataParallel"),
            ("global-batch-too-large", lambda s: (unset_accumulation(s), s["pipeline"].update(
                globalBatch=4097 * s["pipeline"]["microBatchSize"])),
             "spec.pipeline.globalBatch: Invalid value: must be at most 4096 (the largest accumulation) x "
             "microBatchSize x dataParallel"),
            ("global-batch-async", lambda s: (unset_accumulation(s), s["pipeline"].update(
                schedule="async-1f1b", globalBatch=2 * s["pipeline"]["microBatchSize"])),
             "spec.pipeline.globalBatch: Invalid value: must be microBatchSize x dataParallel with schedule "
             "async-1f1b"),
            ("global-batch-disagrees", lambda s: s["pipeline"].update(
                globalBatch=s["pipeline"]["microBatchSize"] * (s["pipeline"]["accumulation"] + 1)),
             "spec.pipeline.globalBatch: Invalid value: must be accumulation x microBatchSize x "
             "dataParallel"),
            ("drift-zero", lambda s: s["pipeline"].update(maxDrift=0),
             "spec.pipeline.maxDrift: Invalid value: 0 with schedule paci needs a single stage"),
            ("async-accumulation", lambda s: s["pipeline"].update(schedule="async-1f1b", accumulation=2),
             "spec.pipeline.accumulation: Invalid value: must be 1 with schedule async-1f1b"),
            ("async-drift", lambda s: s["pipeline"].update(schedule="async-1f1b", numStages=3, accumulation=1,
                                                           maxDrift=1),
             "spec.pipeline.maxDrift: Invalid value: async-1f1b lets a micro-batch cross "
             "numStages-1 optimizer steps at stage 0, more than maxDrift; use schedule paci"),
            ("warmup-past-the-run", lambda s: s["pipeline"].update(warmupSteps=s["training"]["steps"] + 1),
             "spec.pipeline.warmupSteps: Invalid value: must be at most spec.training.steps: a warm-up "
             "longer than the run is the flush"),
            ("warmup-of-the-flush", lambda s: s["pipeline"].update(schedule="1f1b-flush", warmupSteps=5),
             "spec.pipeline.warmupSteps: Invalid value: must be 0 with schedule 1f1b-flush or gpipe, which "
             "drain the pipe at every step already"),
            ("parity-of-the-flush", lambda s: (s["pipeline"].update(schedule="gpipe"), s.update(parity={})),
             "spec.parity: Invalid value: compares an asynchronous schedule (paci, async-1f1b) "
             "with its flush twin: schedule 1f1b-flush or gpipe is the flush already"),
            ("parity-no-seeds", lambda s: s.update(parity={"seeds": []}),
             "spec.parity.seeds in body should have at least 1 items"),
        ]
        for name, change, message in cases:
            with self.subTest(name):
                stderr = self.kubectl_fails("apply", "-f", "-", stdin=with_change(name, change))
                self.assertIn(message, stderr)
                self.assertEqual(self.http("GET", TJ_PATH + "/" + name)[0], 404)
        # What the rules allow: a limit the accumulation keeps, a limit alone.
        self.kubectl("apply", "--dry-run=server", "-f", "-", stdin=with_change(
            "drift-kept", lambda s: s["pipeline"].update(numStages=4, accumulation=3, maxDrift=1)))
        self.kubectl("apply", "--dry-run=server", "-f", "-", stdin=with_change(
            "global-batch-alone", lambda s: (unset_accumulation(s), s["pipeline"].update(
                numStages=4, maxDrift=1, globalBatch=3 * s["pipeline"]["microBatchSize"]))))
        self.kubectl("apply", "--dry-run=server", "-f", "-", stdin=with_change(
            "warmup-within", lambda s: s["pipeline"].update(warmupSteps=s["training"]["steps"])))
        self.kubectl("apply", "--dry-run=server", "-f", "-", stdin=with_change(
            "parity-check", lambda s: s.update(parity={"seeds": [1, 2], "steps": 20})))

    def test_model_and_pipeline_change_only_while_suspended_or_finished(self):
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job("frozen")))

        def edit(change):
            obj = job("frozen")
            change(obj["spec"])
            return self.kubectl_run("apply", "-f", "-", stdin=yaml.safe_dump(obj))

        refused = edit(lambda s: s["model"].update(dModel=64))
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("spec.model: Forbidden: spec.model, spec.pipeline, spec.data and spec.parity (and with "
                      "spec.parity, spec.training, spec.optimizer and spec.runtime) cannot change while the "
                      "TrainingJob runs: suspend it (spec.runPolicy.suspend: true) first, or wait until it has "
                      "finished", refused.stderr)
        self.assertNotEqual(edit(lambda s: s["pipeline"].update(numStages=4)).returncode, 0)
        # The data too: a running job's tokens do not change under it.
        self.assertNotEqual(edit(lambda s: s["data"].update(validationFraction=0.2)).returncode, 0)
        # Nor a running job's parity check: asked for or not, its seeds, its steps.
        self.assertNotEqual(edit(lambda s: s.update(parity={"seeds": [1]})).returncode, 0)
        self.assertEqual(self.ok("GET", TJ_PATH + "/frozen")["spec"]["model"]["dModel"], 32)
        self.assertNotIn("parity", self.ok("GET", TJ_PATH + "/frozen")["spec"])
        # Other fields change as before.
        out = edit(lambda s: s["training"].update(steps=90))
        self.assertEqual(out.returncode, 0, out.stderr)
        # Suspended, then edited; finished, then edited.
        out = edit(lambda s: s["runPolicy"].update(suspend=True))
        self.assertEqual(out.returncode, 0, out.stderr)
        out = edit(lambda s: (s["runPolicy"].update(suspend=True), s["model"].update(dModel=64)))
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(self.ok("GET", TJ_PATH + "/frozen")["spec"]["model"]["dModel"], 64)
        self.ok("PATCH", TJ_PATH + "/frozen", {"spec": {"runPolicy": {"suspend": False}}},
                "application/merge-patch+json")
        self.ok("PATCH", TJ_PATH + "/frozen/status", {"status": {"phase": "Failed"}}, "application/merge-patch+json")
        self.ok("PATCH", TJ_PATH + "/frozen", {"spec": {"model": {"dModel": 48}}}, "application/merge-patch+json")
        self.ok("DELETE", TJ_PATH + "/frozen")
        # With a parity check, the pairs must train one spec: its training, optimizer and runtime
        # are frozen too while it runs.
        checked = job("frozen-parity")
        checked["spec"]["parity"] = {"seeds": [1]}
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(checked))
        for change in (lambda s: s["training"].update(steps=90), lambda s: s["optimizer"].update(lr=0.01),
                       lambda s: s.update(runtime={"threadsPerStage": 2})):
            obj = job("frozen-parity")
            obj["spec"]["parity"] = {"seeds": [1]}
            change(obj["spec"])
            self.assertNotEqual(self.kubectl_run("apply", "-f", "-", stdin=yaml.safe_dump(obj)).returncode, 0)
        self.ok("DELETE", TJ_PATH + "/frozen-parity")

    def test_the_deployment_namespace_enforces_restricted_pod_security(self):
        out = self.kubectl_run("apply", "-f", NAMESPACE_YAML)
        self.assertEqual(out.returncode, 0, out.stderr)
        ns = self.ok("GET", "/api/v1/namespaces/paci-system")
        self.assertEqual(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "restricted")
        wait_until(lambda: self.http("GET", "/api/v1/namespaces/paci-system/serviceaccounts/default")[0] == 200,
                   timeout=30, what="the namespace's default ServiceAccount")
        pods = "/api/v1/namespaces/paci-system/pods"

        def pod(name, **container):
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "paci-system"},
                    "spec": {"containers": [dict({"name": "worker", "image": "paci-worker:latest"}, **container)]}}
        code, status = self.http("POST", pods, pod("plain"))
        self.assertEqual((code, status["reason"]), (403, "Forbidden"), status)
        self.assertIn('pods "plain" is forbidden: violates PodSecurity "restricted:latest": '
                      'allowPrivilegeEscalation != false (container "worker" must set '
                      'securityContext.allowPrivilegeEscalation=false)', status["message"])
        code, status = self.http("POST", pods, pod("privileged", securityContext={"privileged": True}))
        self.assertEqual(code, 403, status)
        self.assertIn('privileged (container "worker" must not set securityContext.privileged=true)',
                      status["message"])
        # A pod that meets restricted is admitted (server-side dry run: nothing runs it).
        restricted = pod("restricted", securityContext={
            "allowPrivilegeEscalation": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}})
        code, status = self.http("POST", pods + "?dryRun=All", restricted)
        self.assertEqual(code, 201, status)

    def test_deploy_tls_makes_the_secrets_deploy_mounts_once_and_keeps_them(self):
        env = dict(os.environ, KUBECONFIG=self.plane.kubeconfig,
                   PATH=kube_bin(BUILD) + os.pathsep + os.environ.get("PATH", ""))
        script = [os.path.join(SOURCE, "scripts", "deploy-tls.sh"), "--namespace", "tls-system",
                  "--worker-namespace", "team-x", "--worker-namespace", "team-y"]

        def run():
            r = subprocess.run(script, env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            return r.stdout

        def secrets():
            out = {}
            for ns in ("tls-system", "team-x", "team-y"):
                for d in json.loads(self.kubectl("get", "secrets", "-n", ns, "-o", "json"))["items"]:
                    out[(ns, d["metadata"]["name"])] = {k: base64.b64decode(v) for k, v in d["data"].items()}
            return out
        self.assertIn("made tls-system/paci-ca", run())
        first = secrets()
        self.assertEqual(set(first), {("tls-system", "paci-ca"), ("tls-system", "paci-coordinator-tls"),
                                      ("tls-system", "paci-operator-client-tls"), ("team-x", "paci-worker-tls"),
                                      ("team-y", "paci-worker-tls"), ("team-x", "paci-client-tls"),
                                      ("team-y", "paci-client-tls"),
                                      ("tls-system", "paci-operator-worker-token-key")})
        token_key = first.pop(("tls-system", "paci-operator-worker-token-key"))["key"]
        self.assertRegex(token_key.decode(), r"^[0-9a-f]{64}$")
        ca = first[("tls-system", "paci-ca")]["tls.crt"]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "ca"), "wb") as f:
                f.write(ca)
            for key, data in first.items():
                if key[1] == "paci-ca":
                    continue
                self.assertEqual(data["ca.crt"], ca, key)
                with open(os.path.join(d, "crt"), "wb") as f:
                    f.write(data["tls.crt"])
                r = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(d, "ca"), os.path.join(d, "crt")],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, (key, r.stdout, r.stderr))
                subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in", os.path.join(d, "crt")],
                                         capture_output=True, text=True).stdout
                self.assertIn({"paci-coordinator-tls": "CN = paci-coordinator",
                               "paci-operator-client-tls": "CN = system:paci:operator",
                               "paci-worker-tls": "CN = system:paci:worker:" + key[0],
                               "paci-client-tls": "CN = system:paci:tenant:" + key[0]}[key[1]], subject, key)
                if key[1] == "paci-worker-tls":  # also a server's, on the stage links
                    ext = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName,extendedKeyUsage",
                                          "-in", os.path.join(d, "crt")], capture_output=True, text=True).stdout
                    self.assertIn("DNS:paci-worker.%s" % key[0], ext)
                    self.assertIn("TLS Web Server Authentication", ext)
                if key[1] == "paci-coordinator-tls":
                    names = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                                            os.path.join(d, "crt")], capture_output=True, text=True).stdout
                    self.assertIn("DNS:paci-coordinator.tls-system.svc,", names)
        # Again: everything kept. A deleted Secret is made anew from the same CA.
        self.assertIn("tls-system/paci-coordinator-tls exists: kept", run())
        kept = secrets()
        self.assertEqual(kept.pop(("tls-system", "paci-operator-worker-token-key"))["key"], token_key)
        self.assertEqual(kept, first)
        self.kubectl("delete", "secret", "-n", "team-y", "paci-worker-tls")
        self.assertIn("signing with it", run())
        again = secrets()
        again.pop(("tls-system", "paci-operator-worker-token-key"))
        self.assertNotEqual(again[("team-y", "paci-worker-tls")]["tls.crt"], first[("team-y", "paci-worker-tls")]["tls.crt"])
        self.assertEqual(again[("team-y", "paci-worker-tls")]["ca.crt"], ca)
        self.assertEqual({k: v for k, v in again.items() if k[0] != "team-y"},
                         {k: v for k, v in first.items() if k[0] != "team-y"})

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
            # A node selector no node has: these pods are never scheduled, nor run.
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "ownerReferences": [ref],
                                                                   "finalizers": list(finalizers),
                                                                   "labels": {"paci.dev/trainingjob": "owner"}},
                    "spec": {"nodeSelector": {"paci.dev/no-such-node": "true"},
                             "containers": [{"name": "main", "image": "x"}]}}

        def gone(path):
            return self.http("GET", path)[0] == 404

        self.ok("POST", POD_PATH, pod("owned-0"))
        self.ok("POST", POD_PATH, pod("owned-1", ["paci.dev/keep"]))
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "owner", "ownerReferences": [ref]},
                   "spec": {"clusterIP": "None", "selector": {"paci.dev/trainingjob": "owner"}}}
        self.ok("POST", "/api/v1/namespaces/default/services", service)
        listed = self.ok("GET", POD_PATH + "?labelSelector=paci.dev%2Ftrainingjob%3Downer")
        self.assertEqual(sorted(p["metadata"]["name"] for p in listed["items"]), ["owned-0", "owned-1"])

        # The controller manager's garbage collector deletes the dependents (in the background).
        self.kubectl("delete", "trainingjob", "owner", "--timeout=20s")
        wait_until(lambda: gone(POD_PATH + "/owned-0"), timeout=60, what="the garbage collector to delete owned-0")
        wait_until(lambda: gone("/api/v1/namespaces/default/services/owner"), timeout=60,
                   what="the garbage collector to delete the Service")
        held = wait_until(lambda: self.ok("GET", POD_PATH + "/owned-1")["metadata"].get("deletionTimestamp"),
                          timeout=60, what="owned-1 to be deleting")
        self.assertTrue(held)
        self.ok("PATCH", POD_PATH + "/owned-1", {"metadata": {"finalizers": None}}, "application/merge-patch+json")
        wait_until(lambda: gone(POD_PATH + "/owned-1"), timeout=20, what="owned-1 to go once its finalizer is")

        # Orphan: the dependent stays, without the reference.
        owner = self.ok("POST", TJ_PATH, job("owner"))
        ref["uid"] = owner["metadata"]["uid"]
        self.ok("POST", POD_PATH, pod("orphan"))
        # The collector orphans only the dependents its graph holds when it sees the owner's
        # deletion; a pod it sees later points at a deleted owner and is collected (Kubernetes'
        # own orphaning test waits for gc.GraphHasUID for this reason). Its graph builder takes
        # the pod watch's events one at a time, in order: once a pod created after the orphan,
        # whose owner does not exist, has been collected, the orphan is in the graph.
        canary = pod("canary")
        canary["metadata"]["ownerReferences"] = [dict(ref, name="no-such-owner",
                                                      uid="00000000-0000-0000-0000-000000000001")]
        self.ok("POST", POD_PATH, canary)
        wait_until(lambda: gone(POD_PATH + "/canary"), timeout=60,
                   what="the garbage collector to collect a pod created after the orphan")
        self.ok("DELETE", TJ_PATH + "/owner?propagationPolicy=Orphan")
        wait_until(lambda: "ownerReferences" not in self.ok("GET", POD_PATH + "/orphan")["metadata"], timeout=60,
                   what="the orphan to lose its owner reference")
        wait_until(lambda: gone(TJ_PATH + "/owner"), timeout=60, what="the orphaning deletion to end")
        self.ok("DELETE", POD_PATH + "/orphan")

    def test_table_output_and_discovery(self):
        code, table = self.http("GET", TJ_PATH, accept="application/json;as=Table;v=v1;g=meta.k8s.io")
        self.assertEqual((code, table["kind"]), (200, "Table"))
        self.assertEqual([(c["name"], c["priority"]) for c in table["columnDefinitions"]],
                         [("Name", 0), ("Phase", 0), ("Step", 0), ("Loss", 0), ("Resizing", 0), ("Shape", 1),
                          ("Max-Drift", 1),
                          ("Drift-Limit", 1), ("Tokens/s", 1), ("Parity-Gap", 1), ("Age", 0)])
        groups = self.ok("GET", "/apis")["groups"]
        self.assertIn("paci.dev", [g["name"] for g in groups])
        resources = self.ok("GET", "/apis/paci.dev/v1alpha1")["resources"]
        self.assertEqual({r["name"] for r in resources}, {"trainingjobs", "trainingjobs/status"})
        crd = self.ok("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/trainingjobs.paci.dev")
        self.assertEqual({c["type"]: c["status"] for c in crd["status"]["conditions"]},
                         {"Established": "True", "NamesAccepted": "True"})
        self.assertIn("leases", [r["name"] for r in self.ok("GET", "/apis/coordination.k8s.io/v1")["resources"]])

    # -- the kubelet ---------------------------------------------------------

    def test_a_real_kubelet_runs_pods_with_volumes_security_and_its_refusals(self):
        """Pods the real scheduler binds to a real kubelet (tests/harness/kubelet_node.py) on this
        plane: every volume kind the worker pods use, the restricted securityContext, logs through
        the API server, and the kubelet's own refusals and reasons."""
        node = KubeletNode(self.dir, self.plane, 0, [images(BUILD)["worker"]], container_env()).start()
        try:
            def ready():
                code, got = self.http("GET", "/api/v1/nodes/" + node.name)
                return code == 200 and any(c["type"] == "Ready" and c["status"] == "True"
                                           for c in got.get("status", {}).get("conditions", []))
            wait_until(ready, timeout=120, what="the Node Ready")
            make_local_volumes(self.plane, os.path.join(self.dir, "volumes"), [node.name])
            self.check_kubelet_pods(images(BUILD)["worker"], node)
        except AssertionError as error:
            with open(os.path.join(node.dir, "kubelet.log"), errors="replace") as f:
                raise AssertionError("%s\n--- kubelet:\n%s" % (error, f.read()[-6000:])) from None
        finally:
            node.stop()
        # Nothing it started outlives it.
        wait_until(lambda: subprocess.run(["pgrep", "-f", "containerd-shim-runc-v2 .* -address " + node.socket],
                                          capture_output=True).returncode == 1,
                   timeout=10, what="the Node's containers to end with it")

    def check_kubelet_pods(self, image, node):
        ns = "box"
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
             "stringData": {"token": "s3cret"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tuning", "namespace": ns},
             "data": {"LR": "0.003", "note.txt": "from a configMap"}},
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "shared", "namespace": ns},
             "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}]))
        wait_until(lambda: self.http("GET", "/api/v1/namespaces/%s/serviceaccounts/default" % ns)[0] == 200,
                   timeout=30, what="the namespace's default ServiceAccount")

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
            return self.kubectl("logs", "-n", ns, name)

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
        self.assertTrue(p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://"))
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
        self.assertIn('persistentvolumeclaim "later" not found', scheduled["message"])
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
            """The container's waiting state once the kubelet gives a reason past ContainerCreating."""
            statuses = (get(name) or {}).get("status", {}).get("containerStatuses") or [{}]
            state = statuses[0].get("state", {}).get("waiting") or {}
            return state if state.get("reason", "ContainerCreating") != "ContainerCreating" else None
        state = wait_until(lambda: waiting("as-root"), timeout=30, what="as-root to be refused")
        self.assertEqual(state["reason"], "CreateContainerConfigError")
        self.assertIn("container's runAsUser breaks non-root policy", state["message"])
        state = wait_until(lambda: waiting("no-image"), timeout=30, what="no-image to wait")
        self.assertEqual(state["reason"], "ErrImageNeverPull")
        self.assertIn('"example.invalid/none:1" is not present', state["message"])

        # A container that keeps failing under restartPolicy Always: the kubelet backs off.
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod(
            "crasher", "echo about to fail; exit 3", extra_spec={"restartPolicy": "Always"})))
        state = wait_until(lambda: (lambda w: w if w and w["reason"] == "CrashLoopBackOff" else None)(
            waiting("crasher")), timeout=60, what="crasher in CrashLoopBackOff")
        self.assertIn("back-off", state["message"])
        last = get("crasher")["status"]["containerStatuses"][0]["lastState"]["terminated"]
        self.assertEqual((last["reason"], last["exitCode"]), ("Error", 3))
        self.assertIn("about to fail", log("crasher"))

        # Past its memory limit, the kernel kills the container and the kubelet says so.
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod(
            "hog", "head -c 200m /dev/zero | tail > /dev/null",
            resources={"limits": {"memory": "32Mi"}, "requests": {"memory": "32Mi"}})))
        p = wait_until(lambda: ended("hog"), timeout=60, what="the hog to be killed")
        terminated = p["status"]["containerStatuses"][0]["state"]["terminated"]
        self.assertEqual((p["status"]["phase"], terminated["reason"], terminated["exitCode"]),
                         ("Failed", "OOMKilled", 137), terminated)

        # Deleting a running pod stops its container (SIGTERM, which `sh -c` as PID 1 ignores, then
        # SIGKILL after the grace period asked for, 3 s).
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod("sleeper", "sleep 600")))
        running = wait_until(lambda: (lambda p: p if p and p.get("status", {}).get("phase") == "Running" else None)(
            get("sleeper")), timeout=60, what="the sleeper to run")
        container = running["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        self.assertIn(container, node.ctr("tasks", "ls", "-q").stdout.split())
        self.kubectl("delete", "pod", "sleeper", "-n", ns, "--grace-period=3", "--timeout=30s")
        wait_until(lambda: container not in node.ctr("tasks", "ls", "-q").stdout.split(), timeout=30,
                   what="the deleted pod's container to stop")


if __name__ == "__main__":
    unittest.main(verbosity=2)
