#!/usr/bin/python3
"""The method at depth: PACI against 1F1B-flush at P = 4 and 8, on two corpora,
over several seeds, with the drift corrections and warm-ups of pipeline.*, in one command.

For each corpus, each P and each seed (model.init_seed and data.seed both) it trains, as real
processes (P processes on this machine's cores: oversubscribed beyond 2, which slows them but does
not change the loss per step, a function of the schedule and the data only):
  1f1b-flush  m = a                              (the synchronous baseline)
  paci        a = ceil((P-1)/D), D = --max_drift, once per entry of --runs:
              CORRECTION:WARMUP, WARMUP a fraction of the steps run at drift 0 first,
              or "auto" (both fields left out: the schedule's automatic default)
all with the same global batch (a x micro-batch), schedule of learning rate and number of
optimizer steps, and records the validation loss every --eval_interval steps.

Time per step at that depth is not measurable here (the processes share 2 cores), so it comes
from the pipeline simulator (paci_simulate, the workers' own StageScheduler in simulated time)
driven by the per-stage forward, backward and optimizer costs measured in the flush run's own
trace; a warm-up's steps take the flush's simulated time. Projected time to a target is the
simulated time of the steps to it; targets are the flush's validation loss at 75% and at 100% of
its steps, per seed (paired).

Writes --out/<--name>.{md,json} (default drift_depth_d<D>):
  /usr/bin/python3 bench/drift_depth.py [--steps 600] [--stages 4,8] [--seeds 1,2,3] \\
      [--runs none:0,predict:0,auto] [--corpora data/kjv.txt,data/fortunes.txt]
Needs a built tree, data/kjv.txt (scripts/kjv-corpus.sh) and data/fortunes.txt
(scripts/fortunes-corpus.sh).
"""
import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import types

from bench_results import write_result
import schedule_comparison as sc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """
name: depth-{tag}
model: {{vocab_size: {vocab}, num_layers: {layers}, d_model: {d_model}, num_heads: 4, seq_len: {seq_len}, init_seed: {seed}}}
pipeline: {{num_stages: {P}, schedule: {schedule}, accumulation: {a}, micro_batch_size: {mbs}{method}}}
optimizer: {{lr: {lr}, warmup_fraction: 0.05}}
training: {{steps: {steps}, eval_interval: {eval_interval}, eval_micro_batches: {eval_mb}}}
data: {{corpus_path: {corpus}, seed: {seed}}}
runtime: {{trace_max_spans: {spans}}}
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--stages", default="4,8")
    parser.add_argument("--max_drift", type=int, default=2, help="D of the paci runs")
    parser.add_argument("--corpora", default="data/kjv.txt,data/fortunes.txt")
    parser.add_argument("--runs", default="none:0,staleness:0,stage-lr:0",
                        help="CORRECTION:WARMUP_FRACTION (or auto) of each paci run")
    parser.add_argument("--seeds", default="1", help="model.init_seed and data.seed of each repeat")
    parser.add_argument("--name", default="", help="the results' file name (default drift_depth_d<D>)")
    parser.add_argument("--d_model", type=int, default=64)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--global_batch", type=int, default=24, help="sequences per optimizer step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval_interval", type=int, default=25)
    parser.add_argument("--paci_steps_factor", type=float, default=1.5,
                        help="the paci runs train this many times the flush's steps (their own "
                             "cosine schedule), so that they can reach the flush's final loss; 1 "
                             "compares at equal steps")
    parser.add_argument("--targets", default="",
                        help="a results file of this script: the final loss of each of its flush "
                             "runs (per corpus, P and seed) becomes the target instead of this "
                             "run's flush's, so that runs with a longer schedule are timed to "
                             "the shorter flush's loss")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    args.pacictl = os.path.join(args.build, "tools", "pacictl")
    args.simulator = os.path.join(args.build, "tools", "paci_simulate")
    args.name = args.name or "drift_depth_d%d" % args.max_drift
    return args


def paci_runs(args):
    """(correction, warm-up fraction) of every paci run; (None, None) for "auto"."""
    runs = []
    for run in args.runs.split(","):
        if run == "auto":
            runs.append((None, None))
        else:
            correction, warmup = run.split(":")
            runs.append((correction, float(warmup)))
    return runs


def run_label(schedule, correction, warmup):
    if schedule != "paci":
        return schedule
    if correction is None:
        return "paci, automatic default"
    return "paci, %s%s" % (correction, ", warm-up %g" % warmup if warmup else "")


def train(args, workdir, corpus, P, schedule, a, correction, warmup, seed):
    """One run through pacictl train: its summary and trace path."""
    mbs = max(1, args.global_batch // a)
    steps = args.steps if schedule != "paci" else int(round(args.steps * args.paci_steps_factor))
    if schedule != "paci":
        method, warmup_steps = ", drift_correction: none, warmup_steps: 0", 0
    elif correction is None:
        method, warmup_steps = "", None  # the summary says what the default chose
    else:
        warmup_steps = int(round(warmup * steps))
        method = ", drift_correction: %s, warmup_steps: %d" % (correction, warmup_steps)
    tag = "%s-p%d-%s-a%d-%s-w%s-s%d" % (os.path.basename(corpus).split(".")[0], P, schedule, a,
                                        correction or "auto", "auto" if warmup_steps is None
                                        else warmup_steps, seed)
    spec = os.path.join(workdir, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, vocab=256, layers=P, d_model=args.d_model, seq_len=args.seq_len,
                            P=P, schedule=schedule, a=a, mbs=mbs, method=method, lr=args.lr,
                            steps=steps, eval_interval=args.eval_interval,
                            eval_mb=max(1, 16 // mbs), corpus=os.path.abspath(corpus),
                            spans=10000 if schedule != "paci" else 0, seed=seed))
    sc.log("running %s ..." % tag)
    summary_path, trace_path = spec + ".summary.json", spec + ".trace.json"
    proc = sc.subprocess.run([args.pacictl, "train", spec, "--summary=" + summary_path,
                              "--trace=" + trace_path],
                             stdout=sc.subprocess.PIPE, stderr=sc.subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("run %s failed:\n%s" % (tag, proc.stdout[-4000:]))
    with open(summary_path) as f:
        summary = json.load(f)
    sc.log("  validation loss %.4f" % summary["final_validation_loss"])
    return dict(corpus=corpus, P=P, schedule=schedule, a=a, seed=seed, micro_batch_size=mbs,
                label=run_label(schedule, correction, warmup), summary=summary, trace=trace_path,
                warmup_steps=int(summary.get("warmup_steps", warmup_steps or 0)),
                correction=summary.get("drift_correction", correction or "none"))


def seconds_per_step(args, run, costs):
    """Simulated seconds per optimizer step of `run`'s schedule with the measured costs."""
    sim_args = types.SimpleNamespace(simulator=args.simulator, seq_len=args.seq_len)
    stages = [dict(c, eval_forward=0.0) for c in costs["stages"]]  # training steps only
    steps = 100
    result = sc.simulate(sim_args, run["P"], run["schedule"], run["a"], steps, stages,
                         costs["link_latency"], mbs=run["micro_batch_size"])
    return result["seconds"] / steps


def steps_to(points, target):
    """The first evaluated step whose validation loss is at most target, or None."""
    return next((p["step"] for p in points if p["loss"] <= target), None)


def mean(values):
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def final_targets(path):
    """{(corpus, P, seed): the final validation loss of that flush} from a results file."""
    with open(path) as f:
        rows = json.load(f)["rows"]
    targets = {}
    for row in rows:
        if row["label"] == "1f1b-flush":
            seeds = [int(s) for s in str(row["seeds"]).split(",")]
            for seed, result in zip(seeds, row["per_seed"]):
                targets[(row["corpus"], row["P"], seed)] = result["loss"]
    return targets


def analyse(args, runs):
    """Per corpus, P and configuration: each seed's loss, its gap to the flush of the same seed,
    and its projected speed-up to that flush's targets; then their mean and spread."""
    given = final_targets(args.targets) if args.targets else {}
    rows = []
    for corpus in args.corpora.split(","):
        for P in [int(p) for p in args.stages.split(",")]:
            per_seed = {}  # label -> list of per-seed results
            for seed in [int(s) for s in args.seeds.split(",")]:
                group = [r for r in runs if r["corpus"] == corpus and r["P"] == P and r["seed"] == seed]
                flush = next(r for r in group if r["schedule"] == "1f1b-flush")
                costs = sc.analyse_trace(flush["trace"], P)
                flush_step_s = seconds_per_step(args, flush, costs)
                points = flush["summary"]["validation_loss"]
                targets = {75: next(p["loss"] for p in points if p["step"] >= 0.75 * args.steps),
                           100: given.get((os.path.basename(corpus), P, seed), points[-1]["loss"])}
                for r in group:
                    step_s = seconds_per_step(args, r, costs)
                    r_points = r["summary"]["validation_loss"]

                    def seconds(steps):  # the warm-up's steps at the flush's pace
                        warm = min(steps, r["warmup_steps"])
                        return warm * flush_step_s + (steps - warm) * step_s
                    result = dict(loss=r_points[-1]["loss"],
                                  gap_pct=100 * (r_points[-1]["loss"] / points[-1]["loss"] - 1),
                                  step_s=step_s, warmup_steps=r["warmup_steps"],
                                  correction=r["correction"],
                                  drift_max=max(s["drift_max"] for s in r["summary"]["stages"]),
                                  curve=r_points)
                    for pct, target in targets.items():
                        steps, flush_steps = steps_to(r_points, target), steps_to(points, target)
                        result["steps_to_%d" % pct] = steps
                        result["speedup_%d" % pct] = (flush_steps * flush_step_s / seconds(steps)
                                                      if steps and flush_steps else None)
                    per_seed.setdefault(r["label"], []).append(result)
            for label, results in per_seed.items():
                losses = [x["loss"] for x in results]
                row = dict(corpus=os.path.basename(corpus), P=P, label=label,
                           a=next(r["a"] for r in runs if r["P"] == P),
                           seeds=args.seeds, per_seed=results, mean_loss=mean(losses),
                           spread=max(losses) - min(losses),
                           mean_gap_pct=mean([x["gap_pct"] for x in results]),
                           throughput_vs_flush=per_seed["1f1b-flush"][0]["step_s"] / results[0]["step_s"])
                for pct in (75, 100):
                    speedups = [x["speedup_%d" % pct] for x in results]
                    row["speedup_%d" % pct] = speedups
                    row["reached_%d" % pct] = sum(s is not None for s in speedups)
                    row["mean_speedup_%d" % pct] = mean(speedups)
                rows.append(row)
    return rows


def speedups(row, pct):
    cells = ["%.2fx" % s if s else "not reached" for s in row["speedup_%d" % pct]]
    reached = row["reached_%d" % pct]
    summary = ("%.2fx" % row["mean_speedup_%d" % pct] +
               ("" if reached == len(cells) else " (%d of %d)" % (reached, len(cells)))
               if reached else "not reached")
    return ", ".join(cells), summary


def table(args, rows):
    lines = ["| corpus | P | a | run | final validation loss per seed | mean | spread | vs the flush "
             "of each seed | mean | warm-up steps | simulated steps/s vs flush | to the flush's 75%% "
             "loss, projected | mean | to %s, projected | mean |" % (
                 "the target" if args.targets else "the flush's final loss"),
             "|---|---|---|---|---|---:|---:|---|---:|---:|---:|---|---:|---|---:|"]
    for r in rows:
        s75, m75 = speedups(r, 75)
        s100, m100 = speedups(r, 100)
        lines.append("| %s | %d | %d | %s | %s | %.4f | %.4f | %s | %+.2f%% | %d | %.2fx | %s | %s | %s | %s |" % (
            r["corpus"], r["P"], r["a"], r["label"],
            ", ".join("%.4f" % x["loss"] for x in r["per_seed"]), r["mean_loss"], r["spread"],
            ", ".join("%+.2f%%" % x["gap_pct"] for x in r["per_seed"]), r["mean_gap_pct"],
            r["per_seed"][0]["warmup_steps"], r["throughput_vs_flush"], s75, m75, s100, m100))
    lines.append("")
    lines.append("Seeds %s (each sets model.init_seed and data.seed; gaps and speed-ups paired by "
                 "seed). The flush trains %d steps, paci %d; global batch %d sequences of %d tokens, "
                 "d_model %d, P layers, lr %g (0.05 of the steps warming it up, then cosine); paci "
                 "with max_drift %d (a = ceil((P-1)/D)), the flush with m = a; a warm-up fraction is "
                 "of paci's steps. Losses measured (real processes, oversubscribed); times projected "
                 "by the simulator from the flush run's measured per-stage costs, a warm-up's steps at "
                 "the flush's pace (the weight prediction's own cost is not in the simulator: 0.5%% "
                 "of tokens/s at P = 2, measured)." % (
                     args.seeds, args.steps, int(round(args.steps * args.paci_steps_factor)),
                     args.global_batch, args.seq_len, args.d_model, args.lr, args.max_drift))
    if args.targets:
        lines.append("")
        lines.append("Targets: the final validation loss of each seed's flush in %s (a shorter "
                     "schedule's); the speed-up is the time this run's flush takes to it over the "
                     "run's." % os.path.basename(args.targets))
    return "\n".join(lines)


def main():
    args = parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="paci-depth-") as workdir:
        for corpus in args.corpora.split(","):
            if not os.path.exists(corpus):
                sys.exit("%s is missing: scripts/kjv-corpus.sh and scripts/fortunes-corpus.sh make "
                         "the corpora" % corpus)
            for P in [int(p) for p in args.stages.split(",")]:
                a = int(math.ceil((P - 1) / args.max_drift))
                for seed in [int(s) for s in args.seeds.split(",")]:
                    runs.append(train(args, workdir, corpus, P, "1f1b-flush", a, "none", 0, seed))
                    for correction, warmup in paci_runs(args):
                        runs.append(train(args, workdir, corpus, P, "paci", a, correction, warmup,
                                          seed))
        rows = analyse(args, runs)
    text = table(args, rows)
    # The settings, without where this machine keeps its binaries and results.
    settings = {k: v for k, v in vars(args).items() if k not in ("build", "out", "pacictl", "simulator")}
    settings["targets"] = os.path.basename(args.targets)
    write_result(args.out, args.name, dict(rows=rows, args=settings), text)
    print(text)


if __name__ == "__main__":
    main()
