#!/usr/bin/python3
"""The coordinator with real worker processes on 127.0.0.1, driven from Python
through stubs generated from proto/ (a client no one wrote in C++).

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import hashlib
import os
import re
import signal
import sqlite3
import subprocess
import tempfile
import unittest

import grpc
from google.protobuf import json_format
from paci.v1 import coordinator_pb2 as cpb
from paci.v1 import coordinator_pb2_grpc as cgrpc
from paci.v1 import stage_pb2_grpc as spb_grpc

from harness.coordinator import Cluster, phase, spec
from harness.pki import make_pki
from harness.paths import BUILD, COORDINATOR, PACICTL, WORKER


class CoordinatorTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.cluster = None

    def tearDown(self):
        if self.cluster:
            self.cluster.stop()
        self.tmp.cleanup()

    def start(self, **kw):
        self.cluster = Cluster(self.tmp.name, **kw)
        return self.cluster

    def test_a_python_client_trains_a_job_to_success_and_watches_it(self):
        c = self.start(workers=2)
        job = c.submit(spec("py", steps=20))
        self.assertEqual(phase(job), "QUEUED")
        updates = c.watch("py")
        phases = [phase(j) for j in updates]
        self.assertEqual(phases[-1], "SUCCEEDED", "".join(c.logs[-40:]))
        self.assertIn("RUNNING", phases)
        final = updates[-1].status
        self.assertEqual(final.step, 20)
        self.assertEqual([p.step for p in final.train_loss_history], list(range(1, 21)))
        self.assertLess(final.train_loss_history[-1].loss, final.train_loss_history[0].loss)
        self.assertGreater(final.validation_loss, 0)
        self.assertEqual(len(final.stages), 2)
        self.assertEqual([s.drift_bound for s in final.stages], [1, 0])
        self.assertTrue(all(s.drift_max <= s.drift_bound for s in final.stages))
        self.assertTrue(any(cond.type == "Succeeded" and cond.status for cond in final.conditions))
        # Pollers can leave the histories out.
        brief = c.stub.GetJob(cpb.GetJobRequest(name="py", omit_loss_history=True))
        self.assertEqual(brief.status.step, 20)
        self.assertEqual(len(brief.status.train_loss_history), 0)
        self.assertEqual(len(brief.status.validation_loss_history), 0)
        # Idempotent submission of the same spec returns the same job.
        self.assertEqual(phase(c.submit(spec("py", steps=20))), "SUCCEEDED")
        with self.assertRaises(grpc.RpcError) as err:
            c.submit(spec("py", steps=21))
        self.assertEqual(err.exception.code(), grpc.StatusCode.ALREADY_EXISTS)

    def test_a_second_job_waits_in_the_queue_until_workers_free_up(self):
        c = self.start(workers=2)
        c.submit(spec("first", steps=30))
        c.wait("first", lambda j: phase(j) == "RUNNING")
        c.submit(spec("second", steps=10))
        self.assertEqual(phase(c.get("second")), "QUEUED")
        listed = c.stub.ListJobs(cpb.ListJobsRequest(phase=cpb.QUEUED))
        self.assertEqual([j.name for j in listed.jobs], ["second"])
        first = c.wait("first", lambda j: phase(j) == "SUCCEEDED")
        second = c.wait("second", lambda j: phase(j) == "SUCCEEDED")
        self.assertLess(first.status.start_time.ToDatetime(), second.status.start_time.ToDatetime())
        self.assertGreaterEqual(second.status.start_time.ToDatetime(),
                                first.status.completion_time.ToDatetime())

    def test_two_jobs_run_at_once_when_the_pool_allows(self):
        c = self.start(workers=4)
        c.submit(spec("a", steps=15))
        c.submit(spec("b", steps=15))
        c.wait("a", lambda j: phase(j) == "RUNNING")
        c.wait("b", lambda j: phase(j) == "RUNNING")
        for name in ("a", "b"):
            c.wait(name, lambda j: phase(j) == "SUCCEEDED")

    def test_cancel_stops_the_stages_and_frees_the_workers(self):
        c = self.start(workers=2)
        c.submit(spec("long", steps=100000))
        c.wait("long", lambda j: j.status.step >= 2)
        job = c.stub.CancelJob(cpb.CancelJobRequest(name="long"))
        self.assertEqual(phase(job), "CANCELLED")
        c.submit(spec("after", steps=5))
        c.wait("after", lambda j: phase(j) == "SUCCEEDED")

    def test_a_killed_worker_restarts_the_job_from_its_checkpoint(self):
        c = self.start(workers=3)
        ckpt = os.path.join(self.tmp.name, "ckpt")
        c.submit(spec("resilient", steps=1500, checkpoint=ckpt, checkpoint_interval=50))
        running = c.wait("resilient", lambda j: j.status.checkpoint_step >= 100)
        victim = running.status.stages[1].worker_id
        checkpoint = running.status.checkpoint_step
        c.workers[victim].send_signal(signal.SIGKILL)
        restarted = c.wait("resilient", lambda j: j.status.restarts == 1)
        self.assertIn(phase(restarted), ("RESTARTING", "RUNNING"))
        done = c.wait("resilient", lambda j: phase(j) == "SUCCEEDED")
        self.assertEqual(done.status.restarts, 1)
        self.assertEqual(done.status.attempt, 2)
        self.assertNotIn(victim, [s.worker_id for s in done.status.stages])
        steps = [p.step for p in done.status.train_loss_history]
        # One point per step in increasing order: the steps the second
        # attempt trained again replaced the first attempt's points.
        self.assertEqual(steps, sorted(set(steps)))
        # It resumed from the latest complete checkpoint on disk, at or after
        # the one reported before the kill: where the steps jump (past steps
        # trained but not yet reported when the worker died), they land past
        # that checkpoint.
        jumps = [(a, b) for a, b in zip(steps, steps[1:]) if b != a + 1]
        self.assertLessEqual(len(jumps), 1, jumps)
        for a, b in jumps:
            self.assertGreater(b, checkpoint, jumps)
        self.assertEqual(steps[-1], 1500)
        self.assertGreaterEqual(done.status.checkpoint_step, checkpoint)

    def test_an_elastic_job_shrinks_when_a_worker_is_lost_and_grows_back_when_one_returns(self):
        # pipeline.elastic: 3 stages on 3 workers; one is killed and none takes its place
        # within the grace, so the job goes on at 2 stages from its checkpoint (re-cut); a
        # worker registers, and the job grows back to 3 at its next checkpoint.
        c = self.start(workers=3)
        ckpt = os.path.join(self.tmp.name, "elastic")
        s = spec("elastic", P=3, steps=900, checkpoint=ckpt, checkpoint_interval=50)
        s.pipeline.elastic.min_stages, s.pipeline.elastic.max_stages = 2, 3
        s.pipeline.elastic.grace_seconds, s.pipeline.elastic.min_resize_interval_seconds = 1, 0
        c.submit(s)
        running = c.wait("elastic", lambda j: j.status.checkpoint_step >= 100)
        victim = running.status.stages[1].worker_id
        c.workers[victim].send_signal(signal.SIGKILL)
        shrunk = c.wait("elastic", lambda j: j.status.resizes == 1 and phase(j) == "RUNNING")
        self.assertEqual(shrunk.spec.pipeline.num_stages, 2)
        self.assertEqual(shrunk.spec.pipeline.accumulation, 2)  # the same global batch
        self.assertEqual(len(shrunk.status.stages), 2)
        self.assertNotIn(victim, [st.worker_id for st in shrunk.status.stages])
        resizing = {cond.type: cond for cond in shrunk.status.conditions}["Resizing"]
        self.assertFalse(resizing.status)
        self.assertEqual(resizing.reason, "Resized")
        self.assertIn("running at 2 stages x 1 replica", resizing.message)
        at_shrink = shrunk.status.checkpoint_step
        c.add_worker("w-back")
        grown = c.wait("elastic", lambda j: j.status.resizes == 2 and phase(j) == "RUNNING")
        self.assertEqual(grown.spec.pipeline.num_stages, 3)
        self.assertGreater(grown.status.checkpoint_step, at_shrink)
        done = c.wait("elastic", lambda j: phase(j) == "SUCCEEDED")
        self.assertEqual(done.status.restarts, 1)  # the loss; the resizes are none
        self.assertEqual((done.status.resizes, done.status.attempt), (2, 3))
        self.assertGreater(done.status.resize_seconds, 0)
        steps = [p.step for p in done.status.train_loss_history]
        self.assertEqual(steps, sorted(set(steps)))
        self.assertEqual(steps[-1], 900)
        losses = [p.loss for p in done.status.train_loss_history]
        self.assertLess(sum(losses[-20:]) / 20, sum(losses[:20]) / 20 - 0.5)

    def test_a_killed_coordinator_comes_back_with_every_job(self):
        c = self.start(workers=2)
        c.submit(spec("survivor", steps=400))
        c.submit(spec("queued", steps=5))
        c.wait("survivor", lambda j: j.status.step >= 3)
        c.coordinator.send_signal(signal.SIGKILL)
        c.coordinator.wait()
        c.start_coordinator(port=c.port)
        names = [j.name for j in c.stub.ListJobs(cpb.ListJobsRequest()).jobs]
        self.assertEqual(names, ["survivor", "queued"])
        done = c.wait("survivor", lambda j: phase(j) == "SUCCEEDED")
        self.assertEqual(done.status.restarts, 0, "the workers were reconciled, not restarted")
        c.wait("queued", lambda j: phase(j) == "SUCCEEDED")

    def assert_trained_once(self, c, name, steps):
        """After the coordinator's restart the job ends Succeeded as its first attempt, each
        stage assigned once: the restarted coordinator learned how it ended."""
        done = c.wait(name, lambda j: phase(j) == "SUCCEEDED")
        self.assertEqual(done.status.restarts, 0, "".join(c.logs[-40:]))
        self.assertEqual((done.status.attempt, done.status.step), (1, steps))
        self.assertTrue(all(s.finished for s in done.status.stages))
        self.assertEqual(sum("assigned job=%s " % name in line for line in c.logs), 2, "trained once")

    def test_a_job_whose_end_the_killed_coordinator_had_not_stored_succeeds_without_a_restart(self):
        """The coordinator dies after its workers' final reports reached it but before it stored
        them: another process holds the database's write lock, as a slow disk would hold the
        write. Each worker sends its last stage's final report again when it registers with the
        new coordinator, which ends the job instead of waiting for the workers and training
        it again."""
        c = self.start(workers=2)
        c.submit(spec("unstored", steps=400))
        c.wait("unstored", lambda j: j.status.step >= 3)
        lock = sqlite3.connect(c.db, isolation_level=None)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            self.assertFalse(c.wait_for_log(r"job unstored SUCCEEDED", 0), "ended before the lock")
            self.assertTrue(c.wait_for_log(r"job unstored SUCCEEDED", 120), "".join(c.logs[-40:]))
            c.coordinator.send_signal(signal.SIGKILL)
            c.coordinator.wait()
        finally:
            lock.close()
        c.start_coordinator(port=c.port)
        self.assert_trained_once(c, "unstored", 400)

    def test_a_job_that_ends_while_the_coordinator_is_down_succeeds_without_a_restart(self):
        """The stages train on through their own links and end while no coordinator listens;
        each worker names its last stage and sends that stage's final report again when it
        registers with the new coordinator, which ends the job instead of training it again."""
        c = self.start(workers=2)
        c.submit(spec("ended", steps=200))
        c.wait("ended", lambda j: j.status.step >= 3)
        c.coordinator.send_signal(signal.SIGKILL)
        c.coordinator.wait()
        for stage in (0, 1):
            self.assertTrue(c.wait_for_log(r"job=ended attempt=1 stage=%d ended: OK" % stage, 120),
                            "".join(c.logs[-40:]))
        c.start_coordinator(port=c.port)
        self.assert_trained_once(c, "ended", 200)

    def test_every_binary_answers_help_with_what_it_is_and_its_own_flags(self):
        for binary, flag in ((COORDINATOR, "--admin_identities"), (WORKER, "--link_tls_server_name"),
                             (PACICTL, "--coordinator"),
                             (os.path.join(BUILD, "operator", "paci_operator"), "--worker_allowed_secrets"),
                             (os.path.join(BUILD, "tools", "paci_simulate"), "--warmup_steps")):
            out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
            text = out.stdout + out.stderr
            name = os.path.basename(binary)
            self.assertTrue(text.startswith(name + ": "), text[:200])
            self.assertIn(flag + " (", text, name)
            self.assertNotIn("No flags matched", text, name)

    def test_hostile_and_malformed_requests_get_the_right_code_and_change_nothing(self):
        c = self.start(workers=0, token="s3cret")
        md = c.metadata()
        c.submit(spec("kept", steps=5))

        def code(call, *args, **kw):
            with self.assertRaises(grpc.RpcError) as err:
                call(*args, **kw)
            return err.exception.code(), err.exception.details()

        self.assertEqual(code(c.stub.ListJobs, cpb.ListJobsRequest())[0],
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(code(c.stub.ListJobs, cpb.ListJobsRequest(),
                              metadata=(("authorization", "Bearer wrong"),))[0],
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(code(c.stub.SubmitJob, cpb.SubmitJobRequest(), metadata=md),
                         (grpc.StatusCode.INVALID_ARGUMENT, "spec: required"))
        bad = spec("bad")
        bad.pipeline.num_stages = 0
        status, details = code(c.stub.SubmitJob, cpb.SubmitJobRequest(spec=bad), metadata=md)
        self.assertEqual(status, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("pipeline.num_stages", details)
        huge = spec("huge")
        huge.data.corpus_path = "x" * (5 << 20)
        self.assertEqual(code(c.stub.SubmitJob, cpb.SubmitJobRequest(spec=huge), metadata=md)[0],
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(code(c.stub.GetJob, cpb.GetJobRequest(name="nope"), metadata=md)[0],
                         grpc.StatusCode.NOT_FOUND)
        self.assertEqual(code(c.stub.GetJob, cpb.GetJobRequest(name="n" * 5000), metadata=md)[0],
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code(c.stub.CancelJob, cpb.CancelJobRequest(name=""), metadata=md)[0],
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code(c.stub.ListJobs, cpb.ListJobsRequest(phase=77), metadata=md)[0],
                         grpc.StatusCode.INVALID_ARGUMENT)
        # A worker stream that does not register first is refused.
        gateway = cgrpc.WorkerGatewayStub(c.channel)
        stream = gateway.Connect(iter([cpb.WorkerMessage(heartbeat=cpb.Heartbeat(sequence=1))]),
                                 metadata=md)
        self.assertEqual(code(list, stream)[0], grpc.StatusCode.INVALID_ARGUMENT)
        jobs = c.stub.ListJobs(cpb.ListJobsRequest(), metadata=md).jobs
        self.assertEqual([(j.name, phase(j)) for j in jobs], [("kept", "QUEUED")])

    def test_pacictl_submits_lists_gets_watches_and_cancels(self):
        c = self.start(workers=2)
        pacictl = os.path.join(BUILD, "tools", "pacictl")
        spec_path = os.path.join(self.tmp.name, "job.yaml")
        with open(spec_path, "w") as f:
            f.write(json_format.MessageToJson(spec("cli", steps=15)))

        def run(*args):
            return subprocess.run([pacictl, *args, "--coordinator=" + c.address],
                                  capture_output=True, text=True, timeout=300)

        submitted = run("submit", spec_path)
        self.assertEqual(submitted.returncode, 0, submitted.stderr)
        self.assertIn("job cli", submitted.stdout)
        watched = run("watch", "cli")
        self.assertEqual(watched.returncode, 0, watched.stderr)
        self.assertIn("job cli SUCCEEDED", watched.stderr)
        self.assertIn("step 15/15", watched.stderr)
        listed = run("list")
        self.assertRegex(listed.stdout, r"cli\s+SUCCEEDED\s+15/15")
        got = run("get", "cli")
        self.assertIn("phase:      SUCCEEDED", got.stdout)
        self.assertRegex(got.stdout, r"Succeeded\s+True\s+Completed")
        self.assertEqual(run("get", "missing").returncode, 1)
        bad = os.path.join(self.tmp.name, "bad.yaml")
        with open(bad, "w") as f:
            bad_spec = spec("bad")
            bad_spec.pipeline.num_stages = 0
            f.write(json_format.MessageToJson(bad_spec))
        refused = run("submit", bad)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("pipeline.num_stages", refused.stderr)
        c.submit(spec("to-cancel", steps=100000))
        c.wait("to-cancel", lambda j: phase(j) == "RUNNING")
        cancelled = run("cancel", "to-cancel")
        self.assertEqual(cancelled.returncode, 0, cancelled.stderr)
        self.assertIn("CANCELLED", cancelled.stdout)
        # The coordinator's /metrics count what happened.
        url = re.search(r"metrics=(http://\S+)", "".join(c.logs)).group(1)
        import urllib.request
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        self.assertRegex(text, r'paci_coordinator_jobs\{phase="Succeeded"\} 1')
        self.assertRegex(text, r'paci_coordinator_jobs\{phase="Cancelled"\} 1')
        self.assertRegex(text, r"paci_coordinator_submissions_total 2")
        self.assertRegex(text, r'paci_job_step\{training_job="cli"\} 15')
        self.assertIn("paci_coordinator_scheduling_latency_seconds_count 2", text)

    def test_list_pages_filters_and_pacictl_follows_the_pages(self):
        c = self.start(workers=0, extra=["--finished_jobs_to_keep=3"])
        for i in range(7):
            team = "red" if i % 2 == 0 else "blue"
            c.stub.SubmitJob(cpb.SubmitJobRequest(spec=spec("job-%d" % i), labels={"team": team}))
        names = []
        request = cpb.ListJobsRequest(page_size=3)
        while True:
            page = c.stub.ListJobs(request)
            self.assertLessEqual(len(page.jobs), 3)
            names += [j.name for j in page.jobs]
            if not page.next_page_token:
                break
            request.page_token = page.next_page_token
        self.assertEqual(names, ["job-%d" % i for i in range(7)])
        red = c.stub.ListJobs(cpb.ListJobsRequest(label_selector={"team": "red"}))
        self.assertEqual([j.name for j in red.jobs], ["job-0", "job-2", "job-4", "job-6"])
        with self.assertRaises(grpc.RpcError) as bad:
            c.stub.ListJobs(cpb.ListJobsRequest(page_token="not-a-token"))
        self.assertEqual(bad.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("page_token", bad.exception.details())

        pacictl = os.path.join(BUILD, "tools", "pacictl")

        def run(*args):
            return subprocess.run([pacictl, *args, "--coordinator=" + c.address],
                                  capture_output=True, text=True, timeout=60)

        listed = run("list", "--page_size=2")  # four requests, one table
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual(re.findall(r"^job-\d", listed.stdout, re.M), names)
        limited = run("list", "--limit=3", "--selector=team=blue")
        self.assertEqual(re.findall(r"^job-\d", limited.stdout, re.M), ["job-1", "job-3", "job-5"])
        prefixed = run("list", "--name_prefix=job-6")
        self.assertEqual(re.findall(r"^job-\d", prefixed.stdout, re.M), ["job-6"])
        first = run("list", "--limit=2")
        token = re.search(r"--page_token=(\S+)", first.stderr).group(1)
        rest = run("list", "--page_token=" + token)
        self.assertEqual(re.findall(r"^job-\d", rest.stdout, re.M), names[2:])

        # Retention: past three finished jobs, the oldest are removed, logged and counted.
        for i in range(5):
            c.stub.CancelJob(cpb.CancelJobRequest(name="job-%d" % i))
        self.assertTrue(c.wait_for_log(re.escape("job job-1 removed from the store by retention (count)")))
        with self.assertRaises(grpc.RpcError) as gone:
            c.get("job-0")
        self.assertEqual(gone.exception.code(), grpc.StatusCode.NOT_FOUND)
        cancelled = c.stub.ListJobs(cpb.ListJobsRequest(phase=cpb.CANCELLED))
        self.assertEqual([j.name for j in cancelled.jobs], ["job-2", "job-3", "job-4"])
        url = re.search(r"metrics=(http://\S+)", "".join(c.logs)).group(1)
        import urllib.request
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        self.assertIn('paci_coordinator_jobs_removed_total{reason="count"} 2', text)

    def certificate(self):
        """A self-signed certificate for 127.0.0.1 and localhost: (cert, key) paths."""
        cert = os.path.join(self.tmp.name, "cert.pem")
        key = os.path.join(self.tmp.name, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        return cert, key

    def test_every_endpoint_speaks_tls_when_given_certificates(self):
        cert, key = self.certificate()
        with open(cert, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        tls = ["--tls_cert=" + cert, "--tls_key=" + key]
        # The workers trust the one certificate for the coordinator and for each other's links.
        c = self.start(workers=2, extra=tls,
                       worker_extra=tls + ["--tls_ca=" + cert, "--coordinator_tls_ca=" + cert],
                       credentials=credentials)
        c.submit(spec("secure", steps=10))
        done = c.wait("secure", lambda j: phase(j) in ("SUCCEEDED", "FAILED"))
        self.assertEqual(phase(done), "SUCCEEDED", done.status.message)
        # The stage links refuse plaintext, and (mutual TLS) a sender without a certificate.
        link = done.status.stages[1].link_address
        with open(cert, "rb") as f:
            trusting = grpc.ssl_channel_credentials(root_certificates=f.read())
        for channel in (grpc.insecure_channel(link),
                        grpc.secure_channel(link, trusting, options=(("grpc.ssl_target_name_override", "localhost"),))):
            with self.assertRaises(grpc.FutureTimeoutError):
                grpc.channel_ready_future(channel).result(timeout=2)
            channel.close()

    def test_stage_links_check_a_shared_worker_certificate_for_its_name(self):
        """As on Kubernetes: the workers of a namespace share one certificate, which names
        paci-worker.<namespace> and not their addresses (tests/harness/pki.py makes it as the
        chart does). With --link_tls_server_name each end of a stage link checks the other's
        certificate for that name, and the job trains over mutual TLS."""
        pki = make_pki(os.path.join(self.tmp.name, "pki-links"), worker_namespace="team-a")
        links = ["--tls_cert=" + pki["worker.crt"], "--tls_key=" + pki["worker.key"], "--tls_ca=" + pki["ca.crt"],
                 "--link_tls_server_name=paci-worker.team-a"]
        c = self.start(workers=2, worker_extra=links)
        c.submit(spec("named", steps=10))
        done = c.wait("named", lambda j: phase(j) in ("SUCCEEDED", "FAILED"))
        self.assertEqual(phase(done), "SUCCEEDED", done.status.message)
        self.assertTrue(c.wait_for_log(r"links=mutual TLS \(peers named paci-worker.team-a\)"),
                        "".join(c.logs[-20:]))
        # The receiving end checks the name too: a certificate of the same CA made for someone
        # else (here the operator's) is refused before anything else, naming what it lacks.
        read = lambda name: open(pki[name], "rb").read()  # noqa: E731
        channel = grpc.secure_channel(
            done.status.stages[1].link_address,
            grpc.ssl_channel_credentials(root_certificates=read("ca.crt"), private_key=read("operator.key"),
                                         certificate_chain=read("operator.crt")),
            options=(("grpc.ssl_target_name_override", "paci-worker.team-a"),))
        try:
            with self.assertRaises(grpc.RpcError) as err:
                spb_grpc.StageLinkStub(channel).Push(iter([]), timeout=20)
            self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED, err.exception.details())
            self.assertIn("the sender's certificate does not name paci-worker.team-a", err.exception.details())
        finally:
            channel.close()

    def ca_and_certificates(self, clients=(("client", "paci-operator"),)):
        """A CA and the certificates it signs: the coordinator's (localhost, 127.0.0.1) and one
        per (who, common name) of `clients`. Returns {"ca", "server.crt", "server.key",
        "<who>.crt", "<who>.key"...} paths."""
        d = os.path.join(self.tmp.name, "pki")
        os.makedirs(d, exist_ok=True)
        path = {name: os.path.join(d, name) for name in ("ca", "ca.key", "server.crt", "server.key", "ext")}
        for who, _ in clients:
            path[who + ".crt"], path[who + ".key"] = os.path.join(d, who + ".crt"), os.path.join(d, who + ".key")

        def openssl(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True)
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=paci test CA",
                "-keyout", path["ca.key"], "-out", path["ca"])
        for who, cn, san in (("server", "localhost", "DNS:localhost,IP:127.0.0.1"),) + tuple(
                (who, cn, "DNS:" + who) for who, cn in clients):
            csr = os.path.join(d, who + ".csr")
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + cn,
                    "-keyout", path[who + ".key"], "-out", csr)
            with open(path["ext"], "w") as f:
                f.write("subjectAltName=%s\nextendedKeyUsage=%s\n"
                        % (san, "serverAuth" if who == "server" else "clientAuth"))
            openssl("x509", "-req", "-in", csr, "-CA", path["ca"], "-CAkey", path["ca.key"],
                    "-CAcreateserial", "-days", "1", "-extfile", path["ext"], "-out", path[who + ".crt"])
        return path

    def test_with_a_ca_the_coordinator_requires_client_certificates(self):
        pki = self.ca_and_certificates()
        read = lambda name: open(pki[name], "rb").read()  # noqa: E731
        with_cert = grpc.ssl_channel_credentials(root_certificates=read("ca"), private_key=read("client.key"),
                                                 certificate_chain=read("client.crt"))
        # Workers present the client certificate too (--coordinator_tls_cert/_key with
        # --coordinator_tls_ca); their stage links stay plaintext (no --tls_cert).
        # Its common name (paci-operator) is none of paci's: an administrator's, as named.
        c = self.start(workers=2, credentials=with_cert,
                       extra=["--tls_cert=" + pki["server.crt"], "--tls_key=" + pki["server.key"],
                              "--tls_ca=" + pki["ca"], "--admin_identities=paci-operator"],
                       worker_extra=["--coordinator_tls_ca=" + pki["ca"],
                                     "--coordinator_tls_cert=" + pki["client.crt"],
                                     "--coordinator_tls_key=" + pki["client.key"]])
        c.submit(spec("mutual", steps=8))
        done = c.wait("mutual", lambda j: phase(j) in ("SUCCEEDED", "FAILED"))
        self.assertEqual(phase(done), "SUCCEEDED", done.status.message)
        # A client that trusts the server but has no certificate is refused in the handshake.
        anonymous = grpc.secure_channel(c.address, grpc.ssl_channel_credentials(root_certificates=read("ca")))
        with self.assertRaises(grpc.RpcError) as err:
            cgrpc.CoordinatorStub(anonymous).ListJobs(cpb.ListJobsRequest(), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE)
        anonymous.close()
        # pacictl presents one with --coordinator_tls_cert/_key, and is refused without.
        base = [PACICTL, "--coordinator=" + c.address, "--coordinator_tls_ca=" + pki["ca"]]
        ok = subprocess.run(base + ["--coordinator_tls_cert=" + pki["client.crt"],
                                    "--coordinator_tls_key=" + pki["client.key"],
                                    "get", "mutual"], capture_output=True, text=True, timeout=60)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("SUCCEEDED", ok.stdout)
        refused = subprocess.run(base + ["get", "mutual"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(refused.returncode, 0)
        # A worker without a client certificate never gets past the handshake.
        lone = subprocess.Popen([WORKER, "--coordinator=" + c.address, "--worker_id=lone",
                                 "--coordinator_tls_ca=" + pki["ca"]],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.assertTrue(c.wait_for_log("peer did not return a certificate"),
                            "the coordinator never refused the worker")
        finally:
            lone.kill()
            lone.wait()

    def test_a_coordinator_others_can_reach_must_authenticate_its_clients_or_be_told_insecure(self):
        cert, key = self.certificate()
        db = os.path.join(self.tmp.name, "jobs.db")
        base = [COORDINATOR, "--listen=0.0.0.0:0", "--db=" + db, "--metrics_address=127.0.0.1:0"]
        for extra, said in (([], "refusing to serve on 0.0.0.0 in plaintext (--tls_cert and --tls_key"),
                            (["--tls_cert=" + cert, "--tls_key=" + key],
                             "refusing to serve on 0.0.0.0 without client authentication (--tls_ca")):
            r = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn(said, r.stderr)
            self.assertIn("could submit, list and cancel every job and register as a worker", r.stderr)
            self.assertIn("--insecure", r.stderr)
            self.assertFalse(os.path.exists(db), "refused before its store was created")
        # Told so, it serves, and says what that means.
        proc = subprocess.Popen(base + ["--insecure"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if "INSECURE" in line:
                    break
            self.assertIn("takes calls from anyone who reaches it, without TLS", "".join(lines))
        finally:
            proc.terminate()
            proc.communicate(timeout=30)

    def test_a_workers_certificate_binds_it_to_its_namespace_and_opens_no_client_calls(self):
        pki = self.ca_and_certificates(clients=(("operator", "system:paci:operator"),
                                                ("worker", "system:paci:worker:team-a")))
        read = lambda name: open(pki[name], "rb").read()  # noqa: E731
        c = self.start(workers=0, credentials=grpc.ssl_channel_credentials(
            root_certificates=read("ca"), private_key=read("operator.key"), certificate_chain=read("operator.crt")),
            extra=["--tls_cert=" + pki["server.crt"], "--tls_key=" + pki["server.key"], "--tls_ca=" + pki["ca"],
                   "--max_workers_per_namespace=2"],
            worker_extra=["--coordinator_tls_ca=" + pki["ca"], "--coordinator_tls_cert=" + pki["worker.crt"],
                          "--coordinator_tls_key=" + pki["worker.key"]])
        # Team a's workers, under team a's names, are taken; one claiming team b's job or id is not.
        for worker_id, labels, refused in (
                ("team-a.w1", "paci.dev/job=team-a.kjv", None),
                ("team-a.w2", "paci.dev/job=team-b.kjv", 'register.labels\\[paci.dev/job\\]: "team-b.kjv"'),
                ("team-b.w3", "paci.dev/job=team-b.kjv", 'register.worker_id: "team-b.w3" is not in namespace team-a'),
                ("team-a.w4", None, r"register.labels\[paci.dev/job\]: missing")):
            c.worker_extra = [a for a in c.worker_extra if not a.startswith("--labels=")]
            if labels:
                c.worker_extra.append("--labels=" + labels)
            proc = c.add_worker(worker_id)
            if refused:
                self.assertTrue(c.wait_for_log(r"worker %s refused: PERMISSION_DENIED: .*%s" % (
                    re.escape(worker_id), refused)), "".join(c.logs[-20:]))
                self.assertFalse(any("worker %s connected" % worker_id in line for line in c.logs))
                proc.kill()
                proc.wait()
            else:
                self.assertTrue(c.wait_for_log(r"worker %s connected" % re.escape(worker_id)), "".join(c.logs[-20:]))
        # The operator's certificate is a client's; a worker's is not.
        self.assertEqual(list(c.stub.ListJobs(cpb.ListJobsRequest(), timeout=20).jobs), [])
        as_worker = grpc.secure_channel(c.address, grpc.ssl_channel_credentials(
            root_certificates=read("ca"), private_key=read("worker.key"), certificate_chain=read("worker.crt")))
        with self.assertRaises(grpc.RpcError) as err:
            cgrpc.CoordinatorStub(as_worker).SubmitJob(cpb.SubmitJobRequest(spec=spec("stolen")), timeout=20)
        as_worker.close()
        self.assertEqual(err.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn('the certificate "system:paci:worker:team-a" is a worker\'s', err.exception.details())
        with self.assertRaises(grpc.RpcError):
            c.get("stolen")  # nothing was stored
        # Team a's worker runs team a's jobs only, whatever their selector: team b's (the
        # operator labels each job with its namespace) waits for team b's workers.
        def one_stage(name):
            job = spec(name, P=1, steps=4)
            job.pipeline.schedule = "1f1b-flush"
            return job
        c.stub.SubmitJob(cpb.SubmitJobRequest(spec=one_stage("theirs"), labels={"paci.dev/namespace": "team-b"}),
                         timeout=20)
        c.stub.SubmitJob(cpb.SubmitJobRequest(spec=one_stage("ours"), labels={"paci.dev/namespace": "team-a"}),
                         timeout=20)
        done = c.wait("ours", lambda j: phase(j) in ("SUCCEEDED", "FAILED"))
        self.assertEqual(phase(done), "SUCCEEDED", done.status.message)
        self.assertEqual([s.worker_id for s in done.status.stages], ["team-a.w1"])
        theirs = c.get("theirs")
        self.assertEqual(phase(theirs), "QUEUED")
        self.assertIn("among the workers of its namespace, team-b",
                      " ".join(cond.message for cond in theirs.status.conditions if cond.type == "Unschedulable"))
        # One namespace's certificate holds at most --max_workers_per_namespace streams (2 here; the
        # refused workers above gave theirs back): a third team-a worker is refused while two are on.
        c.worker_extra = [a for a in c.worker_extra if not a.startswith("--labels=")] + [
            "--labels=paci.dev/job=team-a.kjv"]
        c.add_worker("team-a.w5")
        self.assertTrue(c.wait_for_log(r"worker team-a.w5 connected"), "".join(c.logs[-20:]))
        third = c.add_worker("team-a.w6")
        self.assertTrue(c.wait_for_log(r"worker stream refused: RESOURCE_EXHAUSTED: namespace team-a has 2 worker "
                                       r"streams open, its limit \(--max_workers_per_namespace\)"),
                        "".join(c.logs[-20:]))
        self.assertFalse(any("worker team-a.w6 connected" in line for line in c.logs))
        third.kill()
        third.wait()

    def test_only_the_common_names_it_is_told_are_administrators(self):
        """Under mutual TLS a certificate of the CA whose common name is none of paci's is an
        administrator's only when --admin_identities lists it; any other, and a name under
        system:paci: that is none of paci's (a worker's without a namespace), is refused
        every call and registration. paci's own names cannot be listed."""
        pki = self.ca_and_certificates(clients=(("ada", "ada"), ("mallory", "mallory"),
                                                ("nameless", "system:paci:worker:")))
        read = lambda name: open(pki[name], "rb").read()  # noqa: E731

        def credentials(who):
            return grpc.ssl_channel_credentials(root_certificates=read("ca"), private_key=read(who + ".key"),
                                                certificate_chain=read(who + ".crt"))
        tls = ["--tls_cert=" + pki["server.crt"], "--tls_key=" + pki["server.key"], "--tls_ca=" + pki["ca"]]
        db = os.path.join(self.tmp.name, "refused.db")
        refused = subprocess.run([COORDINATOR, "--listen=127.0.0.1:0", "--db=" + db, "--metrics_address=127.0.0.1:0",
                                  "--admin_identities=ada,system:paci:operator"] + tls,
                                 capture_output=True, text=True, timeout=60)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn('--admin_identities: "system:paci:operator" is under system:paci:', refused.stderr)
        self.assertFalse(os.path.exists(db), "refused before its store was created")

        c = self.start(workers=0, credentials=credentials("ada"), extra=tls + ["--admin_identities=ada"],
                       worker_extra=["--coordinator_tls_ca=" + pki["ca"], "--coordinator_tls_cert=" + pki["ada.crt"],
                                     "--coordinator_tls_key=" + pki["ada.key"]])
        c.submit(spec("admins", steps=10))
        self.assertEqual([j.name for j in c.stub.ListJobs(cpb.ListJobsRequest(), timeout=20).jobs], ["admins"])
        for who, said in (("mallory", 'the certificate "mallory" is not an administrator\'s'),
                          ("nameless", 'the certificate "system:paci:worker:" names no identity of paci')):
            channel = grpc.secure_channel(c.address, credentials(who))
            try:
                for call in (lambda: cgrpc.CoordinatorStub(channel).ListJobs(cpb.ListJobsRequest(), timeout=20),
                             lambda: cgrpc.CoordinatorStub(channel).SubmitJob(
                                 cpb.SubmitJobRequest(spec=spec("by-" + who)), timeout=20)):
                    with self.assertRaises(grpc.RpcError) as err:
                        call()
                    self.assertEqual(err.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
                    self.assertIn(said, err.exception.details())
                self.assertIn("--admin_identities" if who == "mallory" else "system:paci:worker:<namespace>",
                              err.exception.details())
            finally:
                channel.close()
            with self.assertRaises(grpc.RpcError):
                c.get("by-" + who)  # nothing was stored
            # Nor does it register a worker.
            c.worker_extra = ["--coordinator_tls_ca=" + pki["ca"], "--coordinator_tls_cert=" + pki[who + ".crt"],
                              "--coordinator_tls_key=" + pki[who + ".key"]]
            proc = c.add_worker(who + ".w0")
            self.assertTrue(c.wait_for_log(r"worker %s refused: PERMISSION_DENIED: .*%s" % (
                re.escape(who + ".w0"), re.escape(said))), "".join(c.logs[-20:]))
            proc.kill()
            proc.wait()
        # The administrator's workers run its job.
        c.worker_extra = ["--coordinator_tls_ca=" + pki["ca"], "--coordinator_tls_cert=" + pki["ada.crt"],
                          "--coordinator_tls_key=" + pki["ada.key"]]
        c.add_worker("w0")
        c.add_worker("w1")
        done = c.wait("admins", lambda j: phase(j) in ("SUCCEEDED", "FAILED"))
        self.assertEqual(phase(done), "SUCCEEDED", done.status.message)

    def test_a_tenants_certificate_opens_only_the_jobs_of_its_namespace(self):
        """A client certificate named system:paci:tenant:<namespace> (the chart's paci-client
        Secret of that namespace) submits into its namespace only, and sees, watches, changes
        and cancels nothing of another's; the operator (which labels each job with its
        TrainingJob's namespace) and the administrator see everything."""
        pki = self.ca_and_certificates(clients=(("operator", "system:paci:operator"),
                                                ("tenant-a", "system:paci:tenant:team-a")))
        read = lambda name: open(pki[name], "rb").read()  # noqa: E731

        def credentials(who):
            return grpc.ssl_channel_credentials(root_certificates=read("ca"), private_key=read(who + ".key"),
                                                certificate_chain=read(who + ".crt"))
        c = self.start(workers=0, credentials=credentials("operator"),
                       extra=["--tls_cert=" + pki["server.crt"], "--tls_key=" + pki["server.key"],
                              "--tls_ca=" + pki["ca"]])
        ns = "paci.dev/namespace"
        c.stub.SubmitJob(cpb.SubmitJobRequest(spec=spec("b-job", steps=10), labels={ns: "team-b"}), timeout=20)
        c.stub.SubmitJob(cpb.SubmitJobRequest(spec=spec("admin-job", steps=10)), timeout=20)
        channel = grpc.secure_channel(c.address, credentials("tenant-a"))
        self.addCleanup(channel.close)
        tenant = cgrpc.CoordinatorStub(channel)

        def refused(call, code, text):
            with self.assertRaises(grpc.RpcError) as err:
                call()
            self.assertEqual(err.exception.code(), code, err.exception.details())
            self.assertIn(text, err.exception.details())

        # Its own job carries its namespace; it may not name another's, nor take a name in use there.
        mine = tenant.SubmitJob(cpb.SubmitJobRequest(spec=spec("a-job", steps=10), labels={"team": "x"}), timeout=20)
        self.assertEqual(dict(mine.labels), {ns: "team-a", "team": "x"})
        refused(lambda: tenant.SubmitJob(cpb.SubmitJobRequest(spec=spec("a-2"), labels={ns: "team-b"}), timeout=20),
                grpc.StatusCode.PERMISSION_DENIED, 'labels[paci.dev/namespace]: "team-b" is not your namespace')
        refused(lambda: tenant.SubmitJob(cpb.SubmitJobRequest(spec=spec("b-job", steps=10)), timeout=20),
                grpc.StatusCode.ALREADY_EXISTS, '"b-job" is taken by a job of another namespace')
        # Its jobs run on its namespace's workers only: a selector naming another namespace's
        # job is refused; so is a priority above --tenant_max_priority (0 by default), on
        # submit and on a change of the run policy.
        stray = spec("a-stray", steps=10)
        stray.run_policy.worker_selector["paci.dev/job"] = "team-b.x"
        refused(lambda: tenant.SubmitJob(cpb.SubmitJobRequest(spec=stray), timeout=20),
                grpc.StatusCode.PERMISSION_DENIED,
                "run_policy.worker_selector: paci.dev/job=team-b.x names namespace team-b; "
                "a job of namespace team-a runs on its own namespace's workers only")
        refused(lambda: tenant.SubmitJob(cpb.SubmitJobRequest(spec=spec("a-urgent", steps=10, priority=1000)),
                                         timeout=20),
                grpc.StatusCode.PERMISSION_DENIED, "run_policy.priority: 1000 is above 0")
        # A name of the form the operator gives TrainingJobs' jobs is the operator's to take: a
        # tenant who read it on /metrics cannot claim a TrainingJob's next attempt.
        refused(lambda: tenant.SubmitJob(cpb.SubmitJobRequest(spec=spec("kjv-0123abcd-g2", steps=10)), timeout=20),
                grpc.StatusCode.PERMISSION_DENIED, 'name: "kjv-0123abcd-g2" has the form of the names the operator')
        c.stub.SubmitJob(cpb.SubmitJobRequest(spec=spec("kjv-0123abcd-g2", steps=10), labels={ns: "team-b"}),
                         timeout=20)
        urgent = type(mine.spec.run_policy)()
        urgent.CopyFrom(mine.spec.run_policy)
        urgent.priority = 1000
        refused(lambda: tenant.UpdateRunPolicy(cpb.UpdateRunPolicyRequest(name="a-job", run_policy=urgent),
                                               timeout=20),
                grpc.StatusCode.PERMISSION_DENIED, "--tenant_max_priority")
        self.assertEqual(tenant.GetJob(cpb.GetJobRequest(name="a-job"), timeout=20).spec.run_policy.priority, 0)
        # It lists its own, and may not select another namespace's.
        self.assertEqual([j.name for j in tenant.ListJobs(cpb.ListJobsRequest(), timeout=20).jobs], ["a-job"])
        refused(lambda: tenant.ListJobs(cpb.ListJobsRequest(label_selector={ns: "team-b"}), timeout=20),
                grpc.StatusCode.PERMISSION_DENIED, 'label_selector: labels[paci.dev/namespace]: "team-b"')
        # Another namespace's job, and the administrator's, are as absent as a job that never was.
        for name in ("b-job", "admin-job", "never"):
            for call in (lambda: tenant.GetJob(cpb.GetJobRequest(name=name), timeout=20),
                         lambda: tenant.GetJobTrace(cpb.GetJobRequest(name=name), timeout=20),
                         lambda: tenant.CancelJob(cpb.CancelJobRequest(name=name), timeout=20),
                         lambda: tenant.UpdateRunPolicy(cpb.UpdateRunPolicyRequest(name=name), timeout=20),
                         lambda: next(tenant.WatchJob(cpb.WatchJobRequest(name=name), timeout=20))):
                refused(call, grpc.StatusCode.NOT_FOUND, 'no job "%s"' % name)
        self.assertEqual(phase(tenant.GetJob(cpb.GetJobRequest(name="a-job"), timeout=20)), "QUEUED")
        self.assertEqual(phase(tenant.CancelJob(cpb.CancelJobRequest(name="a-job"), timeout=20)), "CANCELLED")
        # Nothing of the others changed; the operator sees every job.
        self.assertEqual(phase(c.get("b-job")), "QUEUED")
        self.assertEqual(phase(c.get("admin-job")), "QUEUED")
        self.assertEqual(sorted(j.name for j in c.stub.ListJobs(cpb.ListJobsRequest(), timeout=20).jobs),
                         ["a-job", "admin-job", "b-job", "kjv-0123abcd-g2"])
        # pacictl with the tenant's certificate: its namespace's jobs only.
        listed = subprocess.run(
            [PACICTL, "list", "--coordinator=" + c.address, "--coordinator_tls_ca=" + pki["ca"],
             "--coordinator_tls_cert=" + pki["tenant-a.crt"], "--coordinator_tls_key=" + pki["tenant-a.key"]],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("a-job", listed.stdout)
        self.assertNotIn("b-job", listed.stdout)
        self.assertNotIn("admin-job", listed.stdout)
        # A tenant's certificate registers no worker.
        c.worker_extra = ["--coordinator_tls_ca=" + pki["ca"], "--coordinator_tls_cert=" + pki["tenant-a.crt"],
                          "--coordinator_tls_key=" + pki["tenant-a.key"], "--labels=paci.dev/job=team-a.a-job"]
        proc = c.add_worker("team-a.w0")
        self.assertTrue(c.wait_for_log(r"worker team-a.w0 refused: PERMISSION_DENIED: .*a tenant's of namespace "
                                       r"team-a: it registers no worker"), "".join(c.logs[-20:]))
        proc.kill()
        proc.wait()

    def test_a_job_token_places_on_the_job_only_the_workers_that_hold_it(self):
        """A job whose worker selector asks for a token digest (as the operator's jobs do) is
        not given a worker that claims the digest as its own label, nor one with another token;
        two workers presenting the token run it."""
        c = self.start(workers=0)
        token, digest_label = "the-job-token-0123456789abcdef", "paci.dev/job-token-sha256"
        digest = hashlib.sha256(token.encode()).hexdigest()
        job = spec("tokened", steps=10)
        job.run_policy.worker_selector[digest_label] = digest
        c.submit(job)

        def worker_with(worker_id, token_text=None, label=None):
            c.worker_extra = []
            if token_text is not None:
                path = os.path.join(self.tmp.name, worker_id + ".token")
                with open(path, "w") as f:
                    f.write(token_text + "\n")
                c.worker_extra.append("--job_token_file=" + path)
            if label is not None:
                c.worker_extra.append("--labels=%s=%s" % (digest_label, label))
            c.add_worker(worker_id)
            self.assertTrue(c.wait_for_log(r"worker %s connected" % re.escape(worker_id)), "".join(c.logs[-20:]))
        # Two workers that would make the job's gang, were the label theirs to claim or the token right.
        worker_with("claims-the-digest", label=digest)
        worker_with("holds-another-token", token_text="another-token")
        self.assertEqual(phase(c.get("tokened")), "QUEUED")
        # Two more idle workers change nothing for it either until they hold the token.
        worker_with("holds-it-1", token_text=token)
        self.assertEqual(phase(c.get("tokened")), "QUEUED")
        worker_with("holds-it-2", token_text=token)
        done = c.wait("tokened", lambda j: phase(j) == "SUCCEEDED")
        self.assertEqual(sorted(s.worker_id for s in done.status.stages), ["holds-it-1", "holds-it-2"])

    def test_a_worker_leaves_a_coordinator_that_stops_answering_and_comes_back(self):
        c = self.start(workers=1)
        self.assertTrue(c.wait_for_log(r"worker w0 connected"))
        # Frozen, its connections stay open: only the keepalive pings, unanswered, tell.
        c.coordinator.send_signal(signal.SIGSTOP)
        try:
            self.assertTrue(c.wait_for_log(r"\[w0\].*lost the coordinator at", timeout=60),
                            "the worker never noticed: " + "".join(c.logs[-10:]))
        finally:
            c.coordinator.send_signal(signal.SIGCONT)
        # Back, it takes the worker again.
        with c.logged:
            self.assertTrue(c.logged.wait_for(lambda: sum("worker w0 connected" in line for line in c.logs) >= 2,
                                              timeout=60), "".join(c.logs[-10:]))

    def test_tls_and_a_token_protect_the_coordinator(self):
        cert, key = self.certificate()
        c = self.start(workers=0, token="t0k3n",
                       extra=["--tls_cert=" + cert, "--tls_key=" + key])
        with open(cert, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        secure = grpc.secure_channel(c.address, credentials,
                                     options=(("grpc.ssl_target_name_override", "localhost"),))
        stub = cgrpc.CoordinatorStub(secure)
        jobs = stub.ListJobs(cpb.ListJobsRequest(), metadata=c.metadata(), timeout=10)
        self.assertEqual(len(jobs.jobs), 0)
        with self.assertRaises(grpc.RpcError) as err:
            stub.ListJobs(cpb.ListJobsRequest(), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        with self.assertRaises(grpc.RpcError) as err:  # plaintext to a TLS port
            c.stub.ListJobs(cpb.ListJobsRequest(), metadata=c.metadata(), timeout=5)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNAVAILABLE)
        secure.close()

    def test_health_and_reflection_answer_standard_tools(self):
        c = self.start(workers=0)
        check = c.channel.unary_unary("/grpc.health.v1.Health/Check",
                                      request_serializer=lambda x: x,
                                      response_deserializer=lambda x: x)
        self.assertEqual(check(b""), b"\x08\x01")  # status: SERVING
        reflect = c.channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda x: x, response_deserializer=lambda x: x)
        answer = b"".join(reflect(iter([b"\x3a\x00"])))  # list_services: ""
        self.assertIn(b"paci.v1.Coordinator", answer)
        self.assertIn(b"paci.v1.WorkerGateway", answer)


if __name__ == "__main__":
    unittest.main(verbosity=2)
