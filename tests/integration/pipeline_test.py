#!/usr/bin/python3
"""End-to-end tests of the pipeline engine: real worker processes on 127.0.0.1
started by `pacictl train`, training a tiny GPT on the Genesis slice of the
King James Bible. Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR set.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness.paths import BUILD, PACICTL
from harness.pipeline import Run, metric_values, pacictl, spec_text, wait_for_training


def cpu_has_bf16():
    """Whether this CPU has bfloat16 instructions (worker/model/precision.h's CpuHasBf16):
    runtime.precision auto picks bf16-autocast with them, and without them bf16 runs emulated."""
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f
                      if line.startswith(("flags", "Features"))), [])
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(flags))


def assert_gone(test, pids, timeout=30):
    """Every pid has exited (and been reaped), within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if os.path.exists("/proc/%d" % pid)]
        time.sleep(0.05)  # polling interval
    test.assertEqual(alive, [], "workers outlived the job")


class PipelineTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def train(self, **kw):
        extra = kw.pop("extra", ())
        scrape = kw.pop("scrape", False)
        run = Run(self.dir, spec_text(**kw), extra=extra, scrape=scrape)
        return run

    def assert_trained(self, run, P, steps, validation_falls_to_the_end=True):
        self.assertEqual(run.returncode, 0, run.output)
        s = run.summary()
        self.assertTrue(s["succeeded"])
        self.assertEqual(s["num_stages"], P)
        self.assertEqual(len(s["stages"]), P)
        train = s["train_loss"]
        self.assertEqual([p["step"] for p in train], list(range(1, steps + 1)))
        first = sum(p["loss"] for p in train[:3]) / 3
        last = sum(p["loss"] for p in train[-3:]) / 3
        self.assertLess(last, first - 0.5, "training loss must fall: %s" % train)
        val = s["validation_loss"]
        self.assertGreaterEqual(len(val), 2)
        if validation_falls_to_the_end:
            self.assertLess(val[-1]["loss"], val[0]["loss"], val)
        else:
            self.assertLess(min(v["loss"] for v in val[1:]), val[0]["loss"], val)
        self.assertAlmostEqual(s["final_validation_loss"], val[-1]["loss"], places=5)
        self.assertGreater(s["tokens_per_second"], 0)
        self.assertGreater(s["wall_seconds"], 0)
        for st in s["stages"]:
            self.assertEqual(st["optimizer_steps"], steps)
            self.assertLessEqual(st["drift_max"], st["drift_bound"])
            self.assertGreater(st["busy_seconds"], 0)
            self.assertGreater(st["peak_rss_bytes"], 10 << 20)
        return s

    def test_paci_two_stages_trains_within_the_drift_bound_and_serves_metrics(self):
        run = self.train(P=2, a=2, steps=40, scrape=True)
        s = self.assert_trained(run, 2, 40)
        self.assertEqual([st["drift_bound"] for st in s["stages"]], [1, 0])
        self.assertIn("step 40/40", run.output)
        # /metrics of each stage: the drift histogram, its bound and the counters
        # (the loss is the coordinator's series, paci_job_train_loss).
        self.assertEqual(sorted(run.metrics), [0, 1], run.output)
        m0, m1 = run.metrics[0], run.metrics[1]
        counts = metric_values(m0, "paci_weight_drift_steps_count")
        self.assertEqual(list(counts.values()), [80.0])
        self.assertIn('paci_weight_drift_steps_bucket{replica="0",stage="0",training_job="tiny",le="1"}', m0)
        self.assertEqual(list(metric_values(m0, "paci_weight_drift_bound_steps").values()), [1.0])
        self.assertEqual(list(metric_values(m1, "paci_weight_drift_limit_steps").values()), [1.0])
        self.assertNotIn("paci_train_loss", m1)
        self.assertGreater(sum(metric_values(m1, "paci_tokens_total").values()), 0)
        self.assertEqual(list(metric_values(m1, "paci_optimizer_steps_total").values()), [40.0])
        self.assertGreater(sum(metric_values(m0, "paci_activation_bytes_sent_total").values()), 0)
        self.assertTrue(metric_values(m0, "paci_stage_idle_seconds_total"))

    def test_paci_four_stages_trains_within_the_drift_bound(self):
        s = self.assert_trained(self.train(P=4, a=3, steps=30), 4, 30)
        self.assertEqual([st["drift_bound"] for st in s["stages"]], [1, 1, 1, 0])

    def test_async_1f1b_drift_stays_within_p_minus_1_minus_s(self):
        # Asynchronous 1F1B steps after every micro-batch, and whether a
        # gradient has arrived when a stage chooses its next action depends on
        # timing: each run's staleness differs, and on a loaded machine its
        # validation loss can rise again late in training (PACI's accumulation
        # is what damps that). So it must improve on its first validation, not
        # end at its best.
        s = self.assert_trained(self.train(P=4, schedule="async-1f1b", a=1, steps=40), 4, 40,
                                validation_falls_to_the_end=False)
        self.assertEqual([st["drift_bound"] for st in s["stages"]], [3, 2, 1, 0])
        # With a full pipe the first stage meets micro-batches 3 steps stale.
        self.assertGreaterEqual(s["stages"][0]["drift_max"], 1)

    def test_1f1b_flush_over_processes_matches_single_process_step_for_step(self):
        single = self.train(P=1, schedule="1f1b-flush", a=4, steps=8, eval_interval=4)
        self.assertEqual(single.returncode, 0, single.output)
        reference = single.summary()
        # The balanced cut (the default), cuts inside blocks (units: 0 the
        # embedding, 2b+1 and 2b+2 block b's attention and MLP halves, 9 the head),
        # and the head split by vocabulary ("/R": the stage before the last
        # computes the head's first R rows, over the stage links).
        for P, partition in ((2, "balanced"), (4, "balanced"), (2, "4"), (4, "2,5,8"),
                             (2, "4/40"), (4, "2,5,8/37")):
            run = self.train(P=P, schedule="1f1b-flush", a=4, steps=8, eval_interval=4,
                             partition=partition)
            self.assertEqual(run.returncode, 0, run.output)
            s = run.summary()
            self.assertEqual(str(s["partition"]), partition)  # (summary() makes "4" 4)
            cut = s["partition_boundaries"]
            self.assertEqual((len(cut), cut[0], cut[-1]), (P + 1, 0, 10))
            if partition != "balanced":
                bounds, _, rows = partition.partition("/")
                self.assertEqual(cut[1:-1], [int(b) for b in bounds.split(",")])
                self.assertEqual(int(s.get("partition_head_split", 0)), int(rows or 0))
                if rows:
                    self.assertIn("head rows [0,%s)" % rows, s["stages"][P - 2]["units"])
            self.assertEqual([(st.get("first_unit", 0), st["end_unit"]) for st in s["stages"]],
                             list(zip(cut[:-1], cut[1:])))
            self.assertAlmostEqual(sum(st["predicted_cost_share"] for st in s["stages"]), 1.0)
            self.assertIn(s["stages"][0]["units"] + ", predicted share", run.output)  # the log
            for ref, got in zip(reference["train_loss"], s["train_loss"]):
                self.assertEqual(ref["step"], got["step"])
                self.assertAlmostEqual(ref["loss"], got["loss"], delta=1e-4 * ref["loss"],
                                       msg="P=%d %s step %d" % (P, partition, ref["step"]))
            self.assertEqual(len(s["train_loss"]), 8)
            for ref, got in zip(reference["validation_loss"], s["validation_loss"]):
                self.assertAlmostEqual(ref["loss"], got["loss"], delta=1e-4 * ref["loss"])
            self.assertEqual([st["drift_max"] for st in s["stages"]], [0] * P)

    def test_bf16_precisions_train_over_processes(self):
        """bf16 autocast and bf16 weights, whose activations and gradients both
        cross the links as bf16: half the bytes of float32. On a CPU without bfloat16
        instructions they run emulated, and the log and the summary warn; auto
        (the default) is bf16-autocast exactly where the CPU has them."""
        native = cpu_has_bf16()
        sent = {}
        for precision in ("fp32", "bf16-autocast", "bf16-weights", "auto"):
            run = Run(self.dir, spec_text(P=2, a=2, steps=30, name="tiny-" + precision,
                                          **({} if precision == "auto" else {"precision": precision})))
            s = self.assert_trained(run, 2, 30)
            sent[precision] = s["stages"][0]["bytes_sent"]
            resolved = {"auto": "bf16-autocast" if native else "fp32"}.get(precision, precision)
            self.assertEqual([st["precision"] for st in s["stages"]], [resolved] * 2)
            notes = [st.get("precision_note", "") for st in s["stages"]]
            if precision == "auto":
                self.assertEqual(notes, ["automatic: this CPU has %sbfloat16 instructions%s" % (
                    "" if native else "no ", "" if native else " (avx512_bf16, amx_bf16 or Arm's bf16)")] * 2)
            elif precision.startswith("bf16") and not native:
                for note in notes:
                    self.assertTrue(note.startswith("warning: %s on a CPU without bfloat16" % precision), note)
                self.assertIn("precision %s (warning: %s on a CPU without" % (precision, precision), run.output)
            else:
                self.assertEqual(notes, ["", ""])
            self.assertIn("precision          %s" % resolved, run.output)  # the summary table
        self.assertAlmostEqual(sent["bf16-autocast"] / sent["fp32"], 0.5, places=2)
        self.assertAlmostEqual(sent["bf16-weights"] / sent["fp32"], 0.5, places=2)

    def test_gpipe_trains_without_drift(self):
        s = self.assert_trained(self.train(P=2, schedule="gpipe", a=2, steps=30), 2, 30)
        self.assertEqual([st["drift_max"] for st in s["stages"]], [0, 0])

    def test_a_checkpoint_resumes_at_another_number_of_stages(self):
        # A job's shape may change between runs (elastic pipelines): a step written by 2 stages
        # resumes on 1, re-cut with its AdamW moments, step count and data position, and the
        # step that one writes resumes on 2 again. Under the flush, whose updates do not depend
        # on the number of stages, each re-cut run trains exactly as the run that kept its shape.
        kept, cut = os.path.join(self.dir, "kept"), os.path.join(self.dir, "cut")

        # float32 whatever the CPU: a split head's parts sum to the whole head's loss to
        # float32's rounding; under bf16 autocast to bfloat16's (about 1e-5 of the loss).
        def train(P, steps, directory, resume=True, partition="balanced"):
            run = self.train(P=P, schedule="1f1b-flush", steps=steps, partition=partition,
                             precision="fp32",
                             checkpoint="{directory: %s, interval: 10, resume: %s}"
                             % (directory, "true" if resume else "false"))
            self.assertEqual(run.returncode, 0, run.output)
            self.assertEqual(run.summary()["num_stages"], P)
            if partition != "balanced":  # the same P cut otherwise: re-cut as well
                self.assertIn("stages cut otherwise: re-cut", run.output)
            return run.summary()

        train(2, 10, kept, resume=False)
        shutil.copytree(kept, cut)
        # Last, the same 2 stages cut otherwise, the head split by vocabulary.
        for (P_kept, P_cut, steps, partition) in ((2, 1, 20, "balanced"), (2, 2, 30, "balanced"),
                                                  (2, 2, 40, "4/40")):
            a, b = train(P_kept, steps, kept), train(P_cut, steps, cut, partition=partition)
            self.assertEqual([p["step"] for p in b["train_loss"]],
                             list(range(steps - 9, steps + 1)))
            for key in ("train_loss", "validation_loss"):
                for x, y in zip(a[key], b[key]):
                    self.assertAlmostEqual(x["loss"], y["loss"], places=5, msg=(key, a[key], b[key]))
        self.assertTrue(os.path.exists(os.path.join(cut, "step-%08d" % 20, "stage-0-of-1.pt")))
        self.assertTrue(os.path.exists(os.path.join(cut, "step-%08d" % 30, "stage-1-of-2.pt")))

    def test_checkpoint_then_resume_continues_and_bad_checkpoints_are_refused(self):
        ckpt = os.path.join(self.dir, "ckpt")
        first = self.train(steps=10, checkpoint="{directory: %s, interval: 5}" % ckpt)
        self.assertEqual(first.returncode, 0, first.output)
        for step in (5, 10):
            for stage in (0, 1):
                self.assertTrue(os.path.exists(
                    os.path.join(ckpt, "step-%08d" % step, "stage-%d-of-2.pt" % stage)))
        resumed = self.train(steps=20, checkpoint="{directory: %s, interval: 5, resume: true}" % ckpt)
        self.assertEqual(resumed.returncode, 0, resumed.output)
        steps = [p["step"] for p in resumed.summary()["train_loss"]]
        self.assertEqual(steps, list(range(11, 21)))
        # It continued from step 10's weights: its first loss is near the end
        # of the first run, not the ~4.4 of a fresh model.
        self.assertLess(resumed.summary()["train_loss"][0]["loss"],
                        first.summary()["train_loss"][0]["loss"] - 0.3)

        def snapshot():
            out = {}
            for root, _, files in os.walk(ckpt):
                for name in files:
                    with open(os.path.join(root, name), "rb") as f:
                        out[os.path.join(root, name)] = hashlib.sha256(f.read()).hexdigest()
            return out

        # Run again as it is, it has nothing left to train: it says so, with the validation loss
        # of the weights it resumed and how to train again, and saves nothing.
        before = snapshot()
        again = self.train(steps=20, checkpoint="{directory: %s, interval: 5, resume: true}" % ckpt)
        self.assertEqual(again.returncode, 0, again.output)
        self.assertIn("is already complete: its checkpoint in %s is at step 20 of 20" % ckpt,
                      again.output)
        self.assertIn("To train again from the start, remove %s" % ckpt, again.output)
        self.assertNotIn("tokens/s", again.output.split("already complete")[1])
        summary = again.summary()
        self.assertEqual(summary.get("train_loss", []), [])
        self.assertEqual([p["step"] for p in summary["validation_loss"]], [20])
        self.assertAlmostEqual(summary["validation_loss"][0]["loss"],
                               resumed.summary()["validation_loss"][-1]["loss"], places=4)
        self.assertEqual(snapshot(), before)

        # A fresh run into a directory with checkpoints is refused.
        clobber = self.train(steps=20, checkpoint="{directory: %s}" % ckpt)
        self.assertNotEqual(clobber.returncode, 0)
        self.assertIn("already holds checkpoints", clobber.output)
        self.assertEqual(snapshot(), before)

        # A shard of another model is refused and nothing is overwritten.
        mismatch = self.train(steps=30, d_model=64,
                              checkpoint="{directory: %s, interval: 5, resume: true}" % ckpt)
        self.assertNotEqual(mismatch.returncode, 0)
        self.assertIn("different model slice", mismatch.output)
        self.assertEqual(snapshot(), before)

        # A torn newest step (step 20's stage 1 shard) is reported and passed over: every stage
        # resumes from step 15, the newest whose shards all verify, and checkpoint.keep's
        # default 3 leaves the three newest steps.
        shard = os.path.join(ckpt, "step-%08d" % 20, "stage-1-of-2.pt")
        with open(shard, "r+b") as f:
            f.seek(2000)
            f.write(b"\x00" * 64)
        torn = self.train(steps=30, checkpoint="{directory: %s, interval: 5, resume: true}" % ckpt)
        self.assertEqual(torn.returncode, 0, torn.output)
        self.assertRegex(torn.output, r"checkpoint step 20: checkpoint \S+stage-1-of-2.pt is corrupt"
                                      r".*; resuming from step 15 instead")
        self.assertEqual([p["step"] for p in torn.summary()["train_loss"]], list(range(16, 31)))
        self.assertEqual(sorted(os.listdir(ckpt)), ["step-%08d" % s for s in (20, 25, 30)])

        # With no sound step left the run is refused naming each, and nothing is overwritten.
        for step in (20, 25, 30):
            with open(os.path.join(ckpt, "step-%08d" % step, "stage-1-of-2.pt"), "r+b") as f:
                f.seek(2000)
                f.write(b"\x00" * 64)
        before = snapshot()
        corrupt = self.train(steps=40, checkpoint="{directory: %s, interval: 5, resume: true}" % ckpt)
        self.assertNotEqual(corrupt.returncode, 0)
        self.assertRegex(corrupt.output, r"holds no step whose shards are all whole: step 30: "
                                         r"checkpoint \S+stage-1-of-2.pt is corrupt")
        self.assertEqual(snapshot(), before)

    def test_trace_is_chrome_trace_json_with_well_formed_non_overlapping_spans(self):
        trace_path = os.path.join(self.dir, "trace", "t.json")
        run = self.train(P=2, schedule="1f1b-flush", a=2, steps=10, eval_interval=5,
                         extra=["--trace=" + trace_path])
        self.assertEqual(run.returncode, 0, run.output)
        self.assertIn("spans written to " + trace_path, run.output)
        # Worker output comes through pacictl, a line at a time, with its origin.
        self.assertRegex(run.output, r"\[(stage|worker) \d\] .*step=10 validation_loss=\d")
        with open(trace_path) as f:
            trace = json.load(f)
        self.assertIsInstance(trace["traceEvents"], list)
        threads = {}
        spans = {}  # tid -> [(ts, dur, name, args)]
        for event in trace["traceEvents"]:
            self.assertIsInstance(event["name"], str)
            self.assertIn(event["ph"], ("X", "M"))
            self.assertEqual(event["pid"], 1)
            self.assertIsInstance(event["tid"], int)
            if event["ph"] == "M":
                if event["name"] == "thread_name":
                    threads[event["tid"]] = event["args"]["name"]
                continue
            self.assertIsInstance(event["ts"], (int, float))
            self.assertIsInstance(event["dur"], (int, float))
            self.assertGreaterEqual(event["ts"], 0)
            self.assertGreaterEqual(event["dur"], 0)
            self.assertIsInstance(event["args"], dict)
            spans.setdefault(event["tid"], []).append(
                (event["ts"], event["dur"], event["name"], event["args"]))
        self.assertEqual(threads, {0: "stage 0", 1: "stage 1"})
        self.assertEqual(sorted(spans), [0, 1])
        for tid, events in spans.items():
            events.sort()
            for before, after in zip(events, events[1:]):
                self.assertLessEqual(before[0] + before[1], after[0],
                                     "stage %d: %s overlaps %s" % (tid, before, after))
            count = lambda name: sum(1 for e in events if e[2] == name)
            # 10 steps of a = 2 micro-batches: every forward and backward, one
            # send per micro-batch (activation out of stage 0, gradient out of
            # stage 1), one optimizer step per step.
            self.assertEqual(count("forward"), 20, tid)
            self.assertEqual(count("backward"), 20, tid)
            self.assertEqual(count("send"), 20, tid)
            self.assertEqual(count("optimizer_step"), 10, tid)
            self.assertGreater(count("idle"), 0, tid)  # the flush's bubble
            self.assertGreater(count("eval"), 0, tid)
            ids = [e[3]["micro_batch"] for e in events if e[2] == "backward"]
            self.assertEqual(ids, list(range(20)))

    def test_bad_specs_are_refused_naming_the_field(self):
        cases = [
            (dict(P=0), "pipeline.num_stages"),
            (dict(a=0), "pipeline.accumulation"),
            (dict(P=5), "pipeline.num_stages"),
            (dict(corpus="/nonexistent/corpus.txt"), "data.corpus_path"),
        ]
        for kw, field in cases:
            run = self.train(**kw)
            self.assertEqual(run.returncode, 2, run.output)
            self.assertIn(field, run.output)
        # The vocabulary check needs the corpus: the worker refuses it.
        small_vocab = spec_text().replace("vocab_size: 80", "vocab_size: 20")
        run = Run(self.dir, small_vocab)
        self.assertEqual(run.returncode, 1, run.output)
        self.assertRegex(run.output, r"training failed: stage \d on worker \S+: model.vocab_size: the tokenizer of \S+ has \d+ tokens, more than model.vocab_size 20")

    def test_parity_trains_the_job_and_its_flush_twin_and_reports_the_gap_and_a_plot(self):
        spec = os.path.join(self.dir, "parity.yaml")
        with open(spec, "w") as f:
            f.write(spec_text(name="par", steps=30).replace(
                "partition:", "drift_correction: predict, warmup_steps: 2, partition:"))
        out = os.path.join(self.dir, "parity-out")
        code, stdout, stderr = pacictl("parity", spec, "--seeds=3,5", "--steps=8", "--out=" + out)
        self.assertEqual(code, 0, stderr)
        with open(os.path.join(out, "parity.json")) as f:
            report = json.load(f)
        self.assertEqual([s["seed"] for s in report["seeds"]], [3, 5])
        self.assertEqual(report["steps"], 8)
        for seed in report["seeds"]:
            with open(os.path.join(out, "par-job-s%d.summary.json" % seed["seed"])) as f:
                job = json.load(f)
            with open(os.path.join(out, "par-flush-s%d.summary.json" % seed["seed"])) as f:
                flush = json.load(f)
            # The twin: the flush, the same batch and steps; the job as the spec says.
            self.assertEqual((job["schedule"], flush["schedule"]), ("paci", "1f1b-flush"))
            for key in ("accumulation", "micro_batch_size", "steps", "steps_completed"):
                self.assertEqual(job[key], flush[key], key)
            self.assertEqual(flush["drift_limit"], 0)
            # The figures are the runs' own: the gap from their final validation losses.
            self.assertAlmostEqual(seed["validation_loss"], job["final_validation_loss"], places=6)
            self.assertAlmostEqual(seed["flush_validation_loss"], flush["final_validation_loss"],
                                   places=6)
            self.assertAlmostEqual(seed["gap_pct"], 100 * (job["final_validation_loss"] /
                                                           flush["final_validation_loss"] - 1), places=6)
            with open(os.path.join(out, "par-job-s%d.json" % seed["seed"])) as f:
                run_spec = json.load(f)
            self.assertEqual(int(run_spec["model"]["init_seed"]), seed["seed"])
            self.assertEqual(int(run_spec["data"]["seed"]), seed["seed"])
            self.assertEqual(run_spec["pipeline"]["drift_correction"], "predict")
        gaps = [s["gap_pct"] for s in report["seeds"]]
        self.assertAlmostEqual(report["mean_gap_pct"], sum(gaps) / len(gaps), places=6)
        self.assertIn("| mean |", stderr)
        # The plot: a PNG of both curves (gnuplot is among the test dependencies).
        with open(os.path.join(out, "parity.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # The flush has no twin; a bad seed list is a usage error.
        flush_spec = os.path.join(self.dir, "flush.yaml")
        with open(flush_spec, "w") as f:
            f.write(spec_text(name="fl", schedule="1f1b-flush"))
        code, _, stderr = pacictl("parity", flush_spec, "--out=" + out)
        self.assertEqual(code, 2)
        self.assertIn("pipeline.schedule: 1f1b-flush is the flush already", stderr)
        code, _, stderr = pacictl("parity", spec, "--seeds=1,x", "--out=" + out)
        self.assertEqual(code, 2)
        self.assertIn("--seeds", stderr)

    def test_a_killed_worker_stops_the_job_and_leaves_no_orphan(self):
        run = Run(self.dir, spec_text(P=4, a=3, steps=100000), kill_stage=2)
        self.assertNotEqual(run.returncode, 0)
        self.assertIsNotNone(run.killed, run.output)
        self.assertEqual(len(run.pids), 4)
        assert_gone(self, run.pids.values())
        self.assertRegex(run.output, r"stage 2: worker \S+ killed by signal 9")

    def test_workers_started_by_hand_train_together(self):
        import socket
        ports = []
        for _ in range(2):  # free ports, as an operator would pick them
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                ports.append(sock.getsockname()[1])
        peers = ",".join("127.0.0.1:%d" % p for p in ports)
        spec = os.path.join(self.dir, "hand.yaml")
        with open(spec, "w") as f:
            f.write(spec_text(steps=20))
        worker = os.path.join(BUILD, "worker", "paci_worker")
        procs = [subprocess.Popen([worker, "--spec=" + spec, "--stage=%d" % s, "--peers=" + peers],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for s in (1, 0)]
        outputs = [p.communicate(timeout=300)[0] for p in procs]
        self.assertEqual([p.returncode for p in procs], [0, 0], outputs)
        self.assertRegex(outputs[0], r"step=20 validation_loss=\d")
        # A worker whose link server takes smaller messages than the job's frames says so.
        small = subprocess.run([worker, "--spec=" + spec, "--stage=0", "--peers=" + peers,
                                "--max_link_message_bytes=4096"], capture_output=True, text=True, timeout=120)
        self.assertNotEqual(small.returncode, 0)
        self.assertRegex(small.stdout + small.stderr, r"the job's stage link frames take up to \d+ bytes .*more than "
                                                      r"this worker's --max_link_message_bytes 4096")

    def test_ctrl_c_stops_every_worker(self):
        spec = os.path.join(self.dir, "long.yaml")
        with open(spec, "w") as f:
            f.write(spec_text(steps=100000))
        proc = subprocess.Popen([PACICTL, "train", spec], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        pids, urls = [], []
        for line in iter(proc.stdout.readline, ""):
            m = re.search(r"stage \d+: worker \S+ pid (\d+) metrics=(http://\S+)", line)
            if m:
                pids.append(int(m.group(1)))
                urls.append(m.group(2))
            if len(pids) == 2:
                break
        self.assertTrue(wait_for_training(urls[0], proc))
        proc.send_signal(signal.SIGINT)
        output = proc.stdout.read()
        proc.stdout.close()
        self.assertEqual(proc.wait(timeout=60), 130, output)
        assert_gone(self, pids)


if __name__ == "__main__":
    unittest.main(verbosity=2)
