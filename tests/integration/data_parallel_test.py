#!/usr/bin/python3
"""Data-parallel replicas of a pipeline (pipeline.data_parallel) on real worker
processes under a real coordinator, on 127.0.0.1, driven through the Python
client generated from proto/. Four or five workers share the machine's cores:
these tests check what the replicas compute, not how fast.

Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import glob
import os
import signal
import tempfile
import unittest

import grpc
from paci.v1 import coordinator_pb2 as cpb
from paci.v1 import stage_pb2

from harness.coordinator import Cluster, phase, spec


def replicated(name, R, P=2, schedule="paci", a=2, **kw):
    s = spec(name, P=P, a=a, **kw)
    s.pipeline.schedule = schedule
    s.pipeline.data_parallel = R
    return s


def by_stage(job):
    """stage -> [its StageStatus of each replica, by replica]."""
    stages = {}
    for st in sorted(job.status.stages, key=lambda st: (st.stage, st.replica)):
        stages.setdefault(st.stage, []).append(st)
    return stages


class DataParallelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.cluster = Cluster(cls.tmp.name, workers=5)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        cls.tmp.cleanup()

    def finished(self, name, timeout=600):
        job = self.cluster.wait(name, lambda j: phase(j) in ("SUCCEEDED", "FAILED"), timeout)
        self.assertEqual(phase(job), "SUCCEEDED",
                         job.status.message + "".join(self.cluster.logs[-40:]))
        return job

    def test_flush_replicas_train_as_one_pipeline_with_the_same_global_batch(self):
        # R = 2 replicas of a = 2 micro-batches each against R = 1 with a = 4:
        # the same 4 samples per step, so the same losses step for step.
        losses = {}
        for architecture in ("gpt2", "llama"):
            with self.subTest(architecture=architecture):
                losses[architecture] = self.flush_replicas_match(architecture)
        # Two models indeed (llama's RMSNorm, RoPE, SwiGLU and shared key heads), not one twice.
        self.assertNotEqual(losses["gpt2"], losses["llama"])

    def flush_replicas_match(self, architecture):
        c = self.cluster

        def job(name, R, a, partition="balanced"):
            s = replicated("%s-%s" % (name, architecture), R=R, schedule="1f1b-flush", a=a, steps=8)
            s.model.architecture = architecture
            s.pipeline.partition = partition
            # float32 whatever the CPU: replicas' averaged gradients equal one batch's to
            # float32's rounding; under bf16 autocast to bfloat16's (about 1e-5 of the loss).
            s.runtime.precision = "fp32"
            if architecture == "llama":
                s.model.num_kv_heads = 2  # grouped-query attention: two query heads a key head
            return s
        c.submit(job("flush-r1", R=1, a=4))
        one = self.finished("flush-r1-" + architecture)
        c.submit(job("flush-r2", R=2, a=2))
        two = self.finished("flush-r2-" + architecture)
        # And with the head split by vocabulary: each replica's stage 0 computes the head's
        # first 40 rows, and the replicas average those rows' gradients with the rest of it.
        c.submit(job("flush-r2-split", R=2, a=2, partition="5/40"))
        split = self.finished("flush-r2-split-" + architecture)
        self.assertEqual(sorted(st.partition_units for st in split.status.stages if st.stage == 0),
                         ["[0,5) emb..h1.mlp head rows [0,40)"] * 2)
        self.assertEqual(len(two.status.stages), 4)
        for other in (two, split):
            for history in ("train_loss_history", "validation_loss_history"):
                a, b = getattr(one.status, history), getattr(other.status, history)
                self.assertEqual([p.step for p in a], [p.step for p in b], history)
                self.assertGreater(len(a), 0, history)
                for p, q in zip(a, b):
                    self.assertLess(abs(p.loss - q.loss) / abs(p.loss), 1e-5,
                                    "%s %s at step %d: %r vs %r"
                                    % (other.name, history, p.step, p.loss, q.loss))
        # Each replica read its own half of every step's samples.
        for st in two.status.stages:
            self.assertEqual(st.forward_micro_batches, 16, st)
        self.assertEqual(one.status.stages[0].forward_micro_batches, 32)
        return [p.loss for p in one.status.train_loss_history]

    def test_paci_replicas_stay_identical_through_a_killed_worker_and_resume_on_one(self):
        c = self.cluster
        ckpt = os.path.join(self.tmp.name, "paci-ckpt")
        job_spec = replicated("paci-r2", R=2, a=1, steps=300, checkpoint=ckpt,
                              checkpoint_interval=20)
        job_spec.runtime.trace_max_spans = 100000
        c.submit(job_spec)
        running = c.wait("paci-r2", lambda j: j.status.checkpoint_step >= 20 and
                         phase(j) == "RUNNING")
        victim = [st for st in running.status.stages if st.stage == 1 and st.replica == 1][0]
        c.workers[victim.worker_id].send_signal(signal.SIGKILL)
        restarted = c.wait("paci-r2", lambda j: j.status.restarts == 1)
        # The coordinator saw the worker's stream close, a peer's all-reduce fail naming it, or
        # its replica's stage 0 lose its link (whichever came first failed the attempt): each
        # says replica 1.
        # The coordinator logs it before it publishes the restart, but its log reaches this
        # process through a pipe and a reader thread, so wait for the line.
        self.assertTrue(c.wait_for_log(r"job paci-r2 attempt 1: .*replica 1"),
                        "".join(c.logs[-60:]))
        done = self.finished("paci-r2")
        self.assertEqual(done.status.attempt, 2)
        self.assertNotIn(victim.worker_id, [st.worker_id for st in done.status.stages])
        # The whole gang came back: every stage of every replica, on 4 workers.
        self.assertEqual(sorted((st.stage, st.replica) for st in done.status.stages),
                         [(0, 0), (0, 1), (1, 0), (1, 1)])
        for stage, replicas in by_stage(done).items():
            steps = {st.optimizer_steps for st in replicas}
            self.assertEqual(steps, {300}, stage)
            hashes = {st.weights_hash for st in replicas}
            self.assertEqual(len(hashes), 1, "stage %d replicas differ: %s" % (stage, replicas))
            self.assertNotEqual(hashes, {0})
            for st in replicas:  # the drift bound does not change with replicas
                self.assertEqual(st.drift_bound, 1 if stage == 0 else 0)
                self.assertLessEqual(st.drift_max, st.drift_bound)
        self.assertGreater(done.status.tokens_per_second, 0)
        # One copy of each stage's shard per checkpoint: replica 0 writes it.
        for step_dir in glob.glob(os.path.join(ckpt, "step-*")):
            self.assertEqual(len(os.listdir(step_dir)), 2, os.listdir(step_dir))
        # The timeline has an all-reduce per optimizer step of each replica.
        trace = c.stub.GetJobTrace(cpb.GetJobRequest(name="paci-r2"))
        self.assertEqual(sorted((t.stage, t.replica) for t in trace.stages),
                         [(0, 0), (0, 1), (1, 0), (1, 1)])
        for t in trace.stages:
            reduces = [s for s in t.spans if s.kind == stage_pb2.Span.ALL_REDUCE]
            steps = [s for s in t.spans if s.kind == stage_pb2.Span.OPTIMIZER_STEP]
            self.assertEqual(len(reduces), len(steps), (t.stage, t.replica))
            self.assertGreater(len(reduces), 0)
        # Resume on R' = 1: the replicas were equal, so any one copy serves.
        more = replicated("paci-r1", R=1, a=1, steps=320, checkpoint=ckpt,
                          checkpoint_interval=20)
        more.checkpoint.resume = True
        c.submit(more)
        resumed = self.finished("paci-r1")
        self.assertEqual(resumed.status.train_loss_history[0].step, 301)
        self.assertEqual(resumed.status.step, 320)

    def test_bad_replica_counts_are_refused_or_wait_for_workers(self):
        c = self.cluster
        with self.assertRaises(grpc.RpcError) as err:
            c.submit(replicated("zero", R=0))
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("pipeline.data_parallel", err.exception.details())
        # 2 x 3 = 6 workers, more than the 5 there are: it waits, and says why.
        c.submit(replicated("too-wide", R=3, steps=5))
        waiting = c.wait("too-wide", lambda j: any(
            cond.type == "Unschedulable" and cond.status for cond in j.status.conditions))
        self.assertEqual(phase(waiting), "QUEUED")
        self.assertTrue(any("fewer than 6" in cond.message for cond in waiting.status.conditions))
        c.stub.CancelJob(cpb.CancelJobRequest(name="too-wide"))


if __name__ == "__main__":
    unittest.main()
