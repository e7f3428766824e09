#!/usr/bin/python3
"""Schedule comparison: PACI against the flush and asynchronous baselines, in one command.

Trains the same GPT on the same corpus with the same global batch (sequences
per optimizer step), seed and number of optimizer steps under

  paci        a = P-1 and a = 2P
  async-1f1b  a = 1 (the unbounded-drift baseline)
  1f1b-flush  m = 2P (m = PACI's larger a)
  gpipe       m = 2P

at P = 2 (one stage per core, one thread each: the bubble is real on a 2-core
machine) and P = 4, plus the unsplit model in one process. The micro-batch is
global batch / a, so every run sees the same number of sequences per step.
Every run records its timeline (pacictl --trace); the per-stage forward,
backward, optimizer-step and transfer costs measured there drive the pipeline
simulator (paci_simulate, the workers' own StageScheduler in simulated time),
whose predicted throughput and idle fraction sit beside the measured ones. The
same measured costs then project deep pipelines (P up to 64) that this machine
cannot run.

Writes to --out (default bench/results/):
  schedule_comparison.md    the tables (throughput and bubble, training, deep pipelines)
  schedule_comparison.json  everything in the tables, per stage
  loss_vs_time.png, loss_vs_tokens.png   validation loss, one line per schedule
  timeline_p2.png           the first second of PACI beside 1F1B-flush at P = 2
  deep_pipelines.png        simulated utilization against P
  trace_p2_paci.json, trace_p2_1f1b_flush.json   the first 2 s of those two
                            traces (open in ui.perfetto.dev)

  /usr/bin/python3 bench/schedule_comparison.py [--steps 600] [--stages 2,4] [--build build]

Needs a built tree (scripts/build.sh), data/kjv.txt (scripts/kjv-corpus.sh)
and gnuplot (Debian's gnuplot-nox, in scripts/install-deps.sh).
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from cpu_load import children_cpu_seconds, cpu_busy_seconds
from schedule_report import plot_deep, plot_losses, plot_timeline_p2, render_markdown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))

SPEC = """
name: bench-{tag}
model: {{vocab_size: 96, num_layers: 4, d_model: {d_model}, num_heads: 4, seq_len: {seq_len}}}
pipeline: {{num_stages: {P}, schedule: {schedule}, accumulation: {a}, micro_batch_size: {mbs}, drift_correction: none, warmup_steps: 0}}
optimizer: {{lr: {lr}, warmup_fraction: {warmup}}}
training: {{steps: {steps}, eval_interval: {eval_interval}, eval_micro_batches: {eval_mb}}}
data: {{corpus_path: {corpus}, seed: {seed}}}
"""

FLUSHING = ("1f1b-flush", "gpipe")


def log(message):
    print(message, file=sys.stderr, flush=True)


def run_configs(stages, seed):
    """(P, schedule, a, data seed) of every run: the unsplit model first (with
    the flushes' micro-batch, and with one micro-batch per step as the a = 1
    runs have it), and 1f1b-flush of the first P once more with another data
    seed, which shows how far the losses move with the sample order alone."""
    runs = [(1, "1f1b-flush", 2 * stages[0], seed), (1, "1f1b-flush", 1, seed)]
    for P in stages:
        runs += [(P, "paci", P - 1, seed), (P, "paci", 2 * P, seed), (P, "async-1f1b", 1, seed),
                 (P, "1f1b-flush", 2 * P, seed), (P, "gpipe", 2 * P, seed)]
        if P == stages[0]:
            runs.append((P, "1f1b-flush", 2 * P, seed + 1))
    return runs


def label(P, schedule, a, seed, base_seed):
    name = "1 process m=%d" % a if P == 1 else "%s %s=%d" % (
        schedule, "m" if schedule in FLUSHING else "a", a)
    return name if seed == base_seed else "%s, data seed %d" % (name, seed)


def train(args, workdir, P, schedule, a, seed):
    """Trains one configuration; repeats it when other work took the cores meanwhile.
    With --reuse, a run already complete in --workdir is read back instead."""
    record = os.path.join(workdir, "%s-p%d-a%d-seed%d.run.json" % (schedule, P, a, seed))
    if args.reuse and os.path.exists(record):
        with open(record) as f:
            result = json.load(f)
        result["label"] = label(P, schedule, a, seed, args.seed)
        log("reusing %s" % result["label"])
        result["reused"] = True
        return result
    first_started = time.monotonic()
    for attempt in range(1, args.attempts + 1):
        busy, ours, started = cpu_busy_seconds(), children_cpu_seconds(), time.monotonic()
        result = train_once(args, workdir, P, schedule, a, seed)
        wall = time.monotonic() - started
        # CPU the machine spent on anything but this run, in cores.
        foreign = ((cpu_busy_seconds() - busy) - (children_cpu_seconds() - ours)) / wall
        result["other_load_cores"] = foreign
        result["attempts"] = attempt
        if foreign <= args.max_other_load:
            break
        log("  other work used %.2f cores during the run; %s" % (
            foreign, "running it again" if attempt < args.attempts else "keeping it, marked"))
    result["bench_seconds"] = time.monotonic() - first_started  # all attempts
    with open(record, "w") as f:
        json.dump(result, f)
    result["reused"] = False
    return result


def train_once(args, workdir, P, schedule, a, seed):
    mbs = args.global_batch // a
    tag = "%s-p%d-a%d-seed%d" % (schedule, P, a, seed)
    name = label(P, schedule, a, seed, args.seed)
    spec = os.path.join(workdir, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, d_model=args.d_model, seq_len=args.seq_len, P=P,
                            schedule=schedule, a=a, mbs=mbs, lr=args.lr, warmup=args.warmup_fraction,
                            steps=args.steps,
                            eval_interval=args.eval_interval,
                            eval_mb=args.eval_sequences // mbs,
                            corpus=os.path.abspath(args.corpus), seed=seed))
    summary_path = spec + ".summary.json"
    trace_path = spec + ".trace.json"
    log("running %-32s P=%d a=%d micro-batch %d ..." % (name, P, a, mbs))
    started = time.monotonic()
    proc = subprocess.run([args.pacictl, "train", spec, "--summary=" + summary_path,
                           "--trace=" + trace_path],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("run %s failed:\n%s" % (tag, proc.stdout[-4000:]))
    with open(summary_path) as f:
        summary = json.load(f)
    log("  %.0f s, %.0f tokens/s, validation loss %.3f" % (
        time.monotonic() - started, summary["tokens_per_second"],
        summary["final_validation_loss"]))
    return dict(tag=tag, label=name, P=P, schedule=schedule, a=a, seed=seed,
                micro_batch_size=mbs, summary=summary, trace_path=trace_path)


def analyse_trace(path, P):
    """Per-stage costs (seconds) and the link latency measured from a trace."""
    with open(path) as f:
        trace = json.load(f)
    by_tid = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_tid.setdefault(e["tid"], []).append(e)
    stages = []
    sends = {}  # (stage, kind, micro_batch) -> end of the send, us
    first, last = float("inf"), 0.0
    for s in range(P):
        events = sorted(by_tid.get(s, []), key=lambda e: e["ts"])
        forward, backward, optimizer, eval_total = [], [], [], 0.0
        send_forward, send_backward = 0.0, 0.0
        previous = None
        for e in events:
            first, last = min(first, e["ts"]), max(last, e["ts"] + e["dur"])
            name, seconds = e["name"], e["dur"] / 1e6
            if name == "forward":
                forward.append(seconds)
            elif name == "backward":
                backward.append(seconds)
            elif name == "optimizer_step":
                optimizer.append(seconds)
            elif name == "eval":
                eval_total += seconds
            elif name == "send":
                kind = "activation" if previous == "forward" else "gradient"
                if kind == "activation":
                    send_forward += seconds
                else:
                    send_backward += seconds
                sends[(s, kind, e["args"].get("micro_batch"))] = e["ts"] + e["dur"]
            previous = name
        stages.append(dict(
            forward=statistics.fmean(forward) + send_forward / max(len(forward), 1),
            backward=statistics.fmean(backward) + send_backward / max(len(backward), 1),
            optimizer_step=statistics.fmean(optimizer) if optimizer else 0.0,
            eval_total=eval_total, forwards=len(forward), events=events))
    # Latency: a stage that sat idle until a tensor came shows when it came.
    samples = []
    for s in range(P):
        events = stages[s]["events"]
        for before, e in zip(events, events[1:]):
            if before["name"] != "idle":
                continue
            mb = e["args"].get("micro_batch")
            if e["name"] == "forward" and s > 0:
                sent = sends.get((s - 1, "activation", mb))
            elif e["name"] == "backward" and s < P - 1:
                sent = sends.get((s + 1, "gradient", mb))
            else:
                continue
            if sent is not None and e["ts"] >= sent:
                samples.append((e["ts"] - sent) / 1e6)
    for st in stages:
        del st["events"]
    latency = statistics.median(samples) if samples else 0.0
    return dict(stages=stages, link_latency=latency, latency_samples=len(samples),
                window_seconds=(last - first) / 1e6)


def simulate(args, P, schedule, a, steps, costs, latency, eval_interval=0, eval_mb=0, mbs=0):
    ms = lambda key: ",".join("%.6f" % (c[key] * 1000) for c in costs)
    cmd = [args.simulator, "--schedule=" + schedule, "--stages=%d" % P, "--accumulation=%d" % a,
           "--steps=%d" % steps, "--eval_interval=%d" % eval_interval,
           "--eval_micro_batches=%d" % eval_mb, "--forward_ms=" + ms("forward"),
           "--backward_ms=" + ms("backward"), "--optimizer_ms=" + ms("optimizer_step"),
           "--eval_forward_ms=" + ms("eval_forward"), "--link_ms=%.6f" % (latency * 1000),
           "--tokens_per_micro_batch=%d" % (mbs * args.seq_len), "--format=json"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit("paci_simulate failed: %s\n%s" % (" ".join(cmd), proc.stderr))
    return json.loads(proc.stdout)


def time_to_target(points, target):
    for p in points:
        if p["loss"] <= target:
            return p["seconds"], p["step"]
    return None, None


def parse_args():
    """The command line; also the tool paths and the stage counts, checked against the batch."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--stages", default="2,4", help="pipeline depths to run, e.g. 2 or 2,4")
    parser.add_argument("--global_batch", type=int, default=24,
                        help="sequences per optimizer step; divisible by every a")
    parser.add_argument("--eval_interval", type=int, default=25)
    parser.add_argument("--eval_sequences", type=int, default=96,
                        help="validation sequences per evaluation (the same for every run)")
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--seq_len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup_fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target_fraction", type=float, default=0.75,
                        help="the first target is 1f1b-flush's validation loss after this "
                             "fraction of the steps; the second its final one")
    parser.add_argument("--deep_micro_batches", type=int, default=8192,
                        help="micro-batches per simulated deep run (steps = this / a)")
    parser.add_argument("--max_other_load", type=float, default=0.2,
                        help="cores other processes may use during a run before it is repeated")
    parser.add_argument("--attempts", type=int, default=3, help="tries per run")
    parser.add_argument("--workdir", default="",
                        help="keep the runs' specs, summaries and traces here (default: a "
                             "temporary folder)")
    parser.add_argument("--reuse", action="store_true",
                        help="read runs already complete in --workdir instead of training them "
                             "again (to redo the analysis)")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "kjv.txt"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    args.pacictl = os.path.join(args.build, "tools", "pacictl")
    args.simulator = os.path.join(args.build, "tools", "paci_simulate")
    stage_counts = [int(p) for p in args.stages.split(",")]
    for P in stage_counts:
        for a in (P - 1, 2 * P):
            if args.global_batch % a or args.eval_sequences % (args.global_batch // a):
                sys.exit("--global_batch %d must divide by a = %d, and --eval_sequences by the "
                         "micro-batch" % (args.global_batch, a))
    return args, stage_counts


def simulate_runs(args, runs):
    """The simulator, fed with each run's measured costs: sets r["costs"], r["simulated"]
    and r["measured_window_tokens_per_second"]."""
    for r in runs:
        analysis = analyse_trace(r["trace_path"], r["P"])
        s = r["summary"]
        evals = len(s["validation_loss"])
        eval_mb = args.eval_sequences // r["micro_batch_size"]
        for st in analysis["stages"]:
            st["eval_forward"] = st["eval_total"] / max(evals * eval_mb, 1)
        r["costs"] = analysis
        r["simulated"] = simulate(args, r["P"], r["schedule"], r["a"], args.steps,
                                  analysis["stages"], analysis["link_latency"],
                                  args.eval_interval, eval_mb, r["micro_batch_size"])
        tokens = args.steps * r["a"] * r["micro_batch_size"] * args.seq_len
        r["measured_window_tokens_per_second"] = tokens / analysis["window_seconds"]


def deep_pipelines(args, runs):
    """Deep pipelines: every stage as costly as a stage of the P = 2 PACI run with
    the same micro-batch as the flushes (a = 2P). Returns (rows, that run, its mean
    stage cost)."""
    base = next((r for r in runs if r["P"] == 2 and r["schedule"] == "paci" and r["a"] == 4
                 and r["seed"] == args.seed),
                next(r for r in runs if r["P"] > 1))
    mean_cost = {k: statistics.fmean(st[k] for st in base["costs"]["stages"])
                 for k in ("forward", "backward", "optimizer_step")}
    mean_cost["eval_forward"] = 0.0
    deep = []
    for P in (2, 4, 8, 16, 32, 64):
        for schedule, a in (("paci", max(P - 1, 1)), ("paci", 2 * P), ("async-1f1b", 1),
                            ("1f1b-flush", 2 * P), ("gpipe", 2 * P)):
            steps = max(args.deep_micro_batches // a, 1)
            sim = simulate(args, P, schedule, a, steps, [mean_cost] * P,
                           base["costs"]["link_latency"], mbs=base["micro_batch_size"])
            st = sim["stages"]
            deep.append(dict(
                P=P, schedule=schedule, a=a, steps=steps,
                label=("paci a=P-1" if schedule == "paci" and a == max(P - 1, 1) else
                       "paci a=2P" if schedule == "paci" else
                       "async-1f1b" if schedule == "async-1f1b" else schedule + " m=2P"),
                utilization=statistics.fmean(x["utilization"] for x in st),
                micro_batches_per_second=sim["micro_batches_per_second"],
                drift_max=[x["drift_max"] for x in st],
                drift_bound=[x["drift_bound"] for x in st],
                drift_mean_stage0=st[0]["drift_mean"],
                drift_histogram_stage0=st[0]["drift_histogram"],
                max_in_flight=[x["max_in_flight"] for x in st],
                mean_in_flight_stage0=st[0]["mean_in_flight"]))
    for row in deep:
        flush = next(d for d in deep if d["P"] == row["P"] and d["schedule"] == "1f1b-flush")
        row["vs_1f1b_flush"] = row["micro_batches_per_second"] / flush["micro_batches_per_second"]
    return deep, base, mean_cost


def loss_targets(args, runs, stage_counts):
    """Targets: what 1f1b-flush (m = 2P) reached after target_fraction of the
    steps, and at the end; the single process (P = 1) shares the first P's."""
    targets = {}
    for P in stage_counts:
        flush = next(r for r in runs if r["P"] == P and r["schedule"] == "1f1b-flush" and
                     r["seed"] == args.seed)
        points = flush["summary"]["validation_loss"]
        near = min(points, key=lambda p: abs(p["step"] - args.target_fraction * args.steps))
        targets[P] = dict(near=near["loss"], near_step=near["step"], final=points[-1]["loss"])
    targets[1] = targets[stage_counts[0]]
    return targets


def run_row(args, r, runs, targets, stage_counts):
    """One run's row of schedule_comparison.json (and of the tables)."""
    s = r["summary"]
    P, m = r["P"], r["a"]
    ref_P = P if P > 1 else stage_counts[0]  # the single process beside the first P
    flush = next(x for x in runs if x["P"] == ref_P and x["schedule"] == "1f1b-flush" and
                 x["seed"] == args.seed)
    reached = {}
    for key in ("near", "final"):
        seconds, step = time_to_target(s["validation_loss"], targets[P][key])
        flush_seconds, _ = time_to_target(flush["summary"]["validation_loss"], targets[P][key])
        reached[key] = dict(loss=targets[P][key], seconds=seconds, step=step,
                            vs_1f1b_flush=(flush_seconds / seconds if seconds and flush_seconds
                                           else None))
    return dict(
        run=r["label"], P=P, schedule=r["schedule"], a=m, seed=r["seed"],
        micro_batch_size=r["micro_batch_size"],
        steps=s["steps_completed"],
        tokens_per_second=s["tokens_per_second"],
        vs_1f1b_flush=s["tokens_per_second"] / flush["summary"]["tokens_per_second"],
        idle_measured=[st["idle_fraction"] for st in s["stages"]],
        idle_flush_model=((P - 1) / (m + P - 1) if r["schedule"] in FLUSHING else None),
        measured_window_tokens_per_second=r["measured_window_tokens_per_second"],
        simulated_tokens_per_second=r["simulated"]["tokens_per_second"],
        idle_simulated=[st["idle_fraction"] for st in r["simulated"]["stages"]],
        stage_costs_ms=[dict(forward=c["forward"] * 1e3, backward=c["backward"] * 1e3,
                             optimizer_step=c["optimizer_step"] * 1e3,
                             eval_forward=c["eval_forward"] * 1e3)
                        for c in r["costs"]["stages"]],
        link_latency_ms=r["costs"]["link_latency"] * 1e3,
        drift_max=[st["drift_max"] for st in s["stages"]],
        drift_bound=[st["drift_bound"] for st in s["stages"]],
        drift_mean=[st["drift_mean"] for st in s["stages"]],
        peak_rss_mib=[st["peak_rss_bytes"] / 2**20 for st in s["stages"]],
        final_train_loss=s["final_train_loss"],
        final_validation_loss=s["final_validation_loss"],
        wall_seconds=s["wall_seconds"],
        other_load_cores=r["other_load_cores"], attempts=r["attempts"],
        time_to_target=reached,
        validation_loss=s["validation_loss"])


def setup_line(args, command, elapsed):
    return ("GPT: 4 layers, d_model %d, 4 heads, seq_len %d, character vocabulary; "
            "King James Bible; %d optimizer steps of %d sequences (%s tokens) each; "
            "AdamW lr %g with %g%% linear warm-up and cosine decay; validation on the same %d held-out sequences every %d steps; "
            "data seed %d; one thread per stage on %d cores. Made by `%s` in %.0f s." % (
                args.d_model, args.seq_len, args.steps, args.global_batch,
                "{:,}".format(args.global_batch * args.seq_len), args.lr,
                100 * args.warmup_fraction, args.eval_sequences,
                args.eval_interval, args.seed, os.cpu_count(), command, elapsed))


def write_results(args, runs, stage_counts, deep, base, mean_cost, elapsed):
    """Writes schedule_comparison.{md,json} to --out and prints the markdown."""
    targets = loss_targets(args, runs, stage_counts)
    rows = [run_row(args, r, runs, targets, stage_counts) for r in runs]
    command = "/usr/bin/python3 bench/schedule_comparison.py --steps %d --stages %s" % (
        args.steps, args.stages)
    setup = setup_line(args, command, elapsed)
    markdown = render_markdown(args, setup, rows, targets, stage_counts, deep, base, mean_cost)
    with open(os.path.join(args.out, "schedule_comparison.md"), "w") as f:
        f.write(markdown)
    with open(os.path.join(args.out, "schedule_comparison.json"), "w") as f:
        json.dump(dict(setup=setup, command=command, stages=stage_counts,
                       global_batch=args.global_batch, steps=args.steps, targets=targets,
                       runs=rows, deep_pipelines=deep), f, indent=1)
    print(markdown)
    log("wrote %s/schedule_comparison.{md,json} and the PNGs in %.0f s" % (args.out, elapsed))


def main():
    args, stage_counts = parse_args()
    os.makedirs(args.out, exist_ok=True)
    began = time.monotonic()

    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
    with (contextlib.nullcontext(os.path.abspath(args.workdir)) if args.workdir
          else tempfile.TemporaryDirectory()) as workdir:
        runs = [train(args, workdir, P, schedule, a, seed)
                for P, schedule, a, seed in run_configs(stage_counts, args.seed)]
        training_seconds = time.monotonic() - began
        simulate_runs(args, runs)
        deep, base, mean_cost = deep_pipelines(args, runs)
        plot_timeline_p2(args, runs)
        with tempfile.TemporaryDirectory() as tmp:
            plot_losses(runs, stage_counts, args, tmp)
            plot_deep(deep, args, tmp)

    # The runs' own time (also when read back with --reuse) and this analysis.
    elapsed = (sum(r["bench_seconds"] for r in runs) + time.monotonic() - began -
               training_seconds)
    write_results(args, runs, stage_counts, deep, base, mean_cost, elapsed)


if __name__ == "__main__":
    main()
