#!/usr/bin/python3
"""The method at depth: PACI against 1F1B-flush at P = 4 and 8, on two corpora,
with the drift corrections of pipeline.drift_correction, in one command.

For each corpus and each P it trains, as real processes (P processes on this
machine's cores: oversubscribed beyond 2, which slows them but does not change
the loss per step, a function of the schedule and the data only):
  1f1b-flush  m = a                              (the synchronous baseline)
  paci        a = ceil((P-1)/D), D = --max_drift  (plain, and with each correction)
all with the same global batch (a x micro-batch), seed, schedule of learning
rate and number of optimizer steps, and records the validation loss every
--eval_interval steps and the drift histogram.

Time per step at that depth is not measurable here (the processes share 2
cores), so it comes from the pipeline simulator (paci_simulate, the workers'
own StageScheduler in simulated time) driven by the per-stage forward,
backward and optimizer costs measured in the flush run's own trace. Steps to a
target times simulated seconds per step gives the projected time to target;
targets are the flush's validation loss at 75% and at 100% of its steps.

Writes --out/drift_depth_d<D>.{md,json} (_seed<S> added for another --seed).
  /usr/bin/python3 bench/drift_depth.py [--steps 400] [--stages 4,8] [--corpora data/kjv.txt,data/fortunes.txt]
Needs a built tree, data/kjv.txt (scripts/kjv-corpus.sh) and data/fortunes.txt
(scripts/fortunes-corpus.sh).
"""
import argparse
import json
import math
import os
import sys
import tempfile
import types

from bench_results import write_result
import schedule_comparison as sc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """
name: depth-{tag}
model: {{vocab_size: {vocab}, num_layers: {layers}, d_model: {d_model}, num_heads: 4, seq_len: {seq_len}}}
pipeline: {{num_stages: {P}, schedule: {schedule}, accumulation: {a}, micro_batch_size: {mbs}, drift_correction: {correction}, warmup_steps: 0}}
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
    parser.add_argument("--corrections", default="none,staleness,stage-lr")
    parser.add_argument("--d_model", type=int, default=64)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--global_batch", type=int, default=24, help="sequences per optimizer step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval_interval", type=int, default=25)
    parser.add_argument("--seed", type=int, default=1, help="data.seed: which sample each micro-batch gets")
    parser.add_argument("--paci_steps_factor", type=float, default=1.5,
                        help="the paci runs train this many times the flush's steps (their own "
                             "cosine schedule), so that they can reach the flush's final loss")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    args.pacictl = os.path.join(args.build, "tools", "pacictl")
    args.simulator = os.path.join(args.build, "tools", "paci_simulate")
    return args


def train(args, workdir, corpus, P, schedule, a, correction):
    """One run through pacictl train: its summary and trace path."""
    mbs = max(1, args.global_batch // a)
    steps = args.steps if schedule != "paci" else int(round(args.steps * args.paci_steps_factor))
    tag = "%s-p%d-%s-a%d-%s" % (os.path.basename(corpus).split(".")[0], P, schedule, a, correction)
    spec = os.path.join(workdir, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, vocab=256, layers=P, d_model=args.d_model, seq_len=args.seq_len,
                            P=P, schedule=schedule, a=a, mbs=mbs,
                            correction=correction if schedule == "paci" else "none",
                            lr=args.lr, steps=steps, eval_interval=args.eval_interval,
                            eval_mb=max(1, 16 // mbs), corpus=os.path.abspath(corpus),
                            spans=20000 if schedule != "paci" or correction == "none" else 0,
                            seed=args.seed))
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
    return dict(tag=tag, corpus=corpus, P=P, schedule=schedule, a=a, correction=correction,
                micro_batch_size=mbs, summary=summary, trace=trace_path)


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


def analyse(args, runs):
    """Per corpus and P: targets from the flush, then each run's steps and projected time."""
    rows = []
    for corpus in args.corpora.split(","):
        for P in [int(p) for p in args.stages.split(",")]:
            group = [r for r in runs if r["corpus"] == corpus and r["P"] == P]
            flush = next(r for r in group if r["schedule"] == "1f1b-flush")
            costs = sc.analyse_trace(flush["trace"], P)
            points = flush["summary"]["validation_loss"]
            at = {75: next(p["loss"] for p in points if p["step"] >= 0.75 * args.steps),
                  100: points[-1]["loss"]}
            for r in group:
                r_points = r["summary"]["validation_loss"]
                step_s = seconds_per_step(args, r, costs)
                row = dict(corpus=os.path.basename(corpus), P=P, schedule=r["schedule"], a=r["a"],
                           correction=r["correction"], final_loss=r_points[-1]["loss"],
                           gap_pct=100 * (r_points[-1]["loss"] / at[100] - 1),
                           drift_max=max(s["drift_max"] for s in r["summary"]["stages"]),
                           simulated_step_s=step_s)
                for pct, target in at.items():
                    steps = steps_to(r_points, target)
                    row["steps_to_%d" % pct] = steps
                    row["time_to_%d" % pct] = steps * step_s if steps else None
                rows.append(row)
            for row in rows[-len(group):]:
                base = rows[-len(group)]  # the flush, trained first
                for pct in (75, 100):
                    t, b = row["time_to_%d" % pct], base["time_to_%d" % pct]
                    row["speedup_%d" % pct] = b / t if t and b else None
    return rows


def cell(value, fmt):
    return "not reached" if value is None else fmt % value


def table(args, rows):
    lines = ["| corpus | P | schedule | a | correction | final val loss | vs flush | max drift | "
             "steps to 75% target | projected time | speed-up | steps to 100% target | "
             "projected time | speed-up |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %s | %d | %s | %.4f | %+.2f%% | %d | %s | %s | %s | %s | %s | %s |" % (
            r["corpus"], r["P"], r["schedule"], r["a"], r["correction"], r["final_loss"], r["gap_pct"],
            r["drift_max"], cell(r["steps_to_75"], "%d"), cell(r["time_to_75"], "%.1f s"),
            cell(r["speedup_75"], "%.2fx"), cell(r["steps_to_100"], "%d"),
            cell(r["time_to_100"], "%.1f s"), cell(r["speedup_100"], "%.2fx")))
    lines.append("")
    lines.append("The flush trains %d steps, paci %d (its own warm-up and cosine over them, so that it "
                 "can reach the flush's final loss); global batch %d sequences of %d tokens, d_model %d, "
                 "P layers, lr %g; paci with max_drift %d (a = ceil((P-1)/D)), the flush with m = a. "
                 "\"final val loss\" and \"vs flush\" compare each run's last evaluation. Losses measured (real "
                 "processes, oversubscribed); times projected by the simulator from the flush run's "
                 "measured per-stage costs (they include the oversubscription, so the absolute "
                 "seconds are this machine's, the ratios the schedules')." % (
                     args.steps, int(round(args.steps * args.paci_steps_factor)), args.global_batch,
                     args.seq_len, args.d_model, args.lr, args.max_drift))
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
                runs.append(train(args, workdir, corpus, P, "1f1b-flush", a, "none"))
                for correction in args.corrections.split(","):
                    runs.append(train(args, workdir, corpus, P, "paci", a, correction))
        rows = analyse(args, runs)
    text = table(args, rows)
    name = "drift_depth_d%d" % args.max_drift + ("" if args.seed == 1 else "_seed%d" % args.seed)
    write_result(args.out, name, dict(rows=rows, steps=args.steps, max_drift=args.max_drift,
                                      seed=args.seed), text)
    print(text)


if __name__ == "__main__":
    main()
