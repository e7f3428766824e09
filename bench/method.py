#!/usr/bin/python3
"""PACI's ways of closing its loss gap to the flush (pipeline.drift_correction and
pipeline.warmup_steps), measured end to end over several seeds: which close it, and what do
they cost in time?

For every seed (model.init_seed and data.seed both), on one corpus, with the same model,
global batch (a x micro-batch), learning-rate schedule and number of optimizer steps, it trains
as real processes (one stage per core, one thread each):
  1f1b-flush  m = a                  (the synchronous baseline)
  each run of --runs, SCHEDULE:CORRECTION:WARMUP[:PRECISION] (default: paci plain, with the
  warm-ups 60, 150 and 300, with each correction; runtime.precision fp32 unless named, and the
  flush's --flush_precision, so a machine with bfloat16 measures what one without it does)
and reports, per configuration: the final validation loss of each seed, their mean and spread,
the gap to the flush of the same seed (paired), tokens/s, and the speed-up in wall seconds to
two targets of the flush of the same seed, its validation loss at 75% of its steps and at the
end (the flush's own time to it over this run's: above 1, sooner).

Writes --out/<--name>.{md,json} (default method_p<P>):
  /usr/bin/python3 bench/method.py [--steps 600] [--seeds 1,2,3] [--runs paci:none:0,paci:predict:0]
  bfloat16 against float32 at equal steps, both schedules:
  /usr/bin/python3 bench/method.py --name precision_p2 --runs paci:auto:auto:fp32,\
      paci:auto:auto:bf16-autocast,1f1b-flush:none:0:bf16-autocast
Needs a built tree (scripts/build.sh) and data/kjv.txt (scripts/kjv-corpus.sh).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_results import write_result
import schedule_comparison as sc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The comparison's model and data (plain PACI there), with this run's correction and warm-up and
# the initialisation seed.
PLAIN = ", drift_correction: none, warmup_steps: 0"
SPEC = sc.SPEC.replace("micro_batch_size: {mbs}%s}}" % PLAIN, "micro_batch_size: {mbs}{method}}}").replace(
    "num_heads: 4,", "num_heads: 4, init_seed: {seed},").replace(
    "vocab_size: 96", "vocab_size: {vocab}")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "kjv.txt"))
    parser.add_argument("--stages", type=int, default=2, help="P")
    parser.add_argument("--accumulation", type=int, default=4, help="a of every run (m of the flush)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--run_steps", type=int, default=0,
                        help="optimizer steps of the runs besides the flush (default --steps): time to "
                        "accuracy lets them train past the flush's steps to its final loss")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--runs", default="paci:none:0,paci:none:60,paci:none:150,paci:none:300,"
                        "paci:staleness:0,paci:stage-lr:0,paci:predict:0,paci:delay-comp:0",
                        help="SCHEDULE:CORRECTION:WARMUP_STEPS[:PRECISION] of each run besides the "
                        "flush (PRECISION: runtime.precision, default fp32)")
    parser.add_argument("--flush_precision", default="fp32", help="the baseline flush's runtime.precision")
    parser.add_argument("--name", default="", help="the results' file name (default method_p<P>)")
    parser.add_argument("--global_batch", type=int, default=24, help="sequences per optimizer step")
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--vocab_size", type=int, default=128, help="at least the corpus' characters")
    parser.add_argument("--seq_len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup_fraction", type=float, default=0.05, help="the learning rate's")
    parser.add_argument("--eval_interval", type=int, default=25)
    parser.add_argument("--eval_sequences", type=int, default=96)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    args.pacictl = os.path.join(args.build, "tools", "pacictl")
    return args


def configurations(args):
    """(schedule, correction, warmup, precision) of every run, the flush first. "auto" leaves
    the correction or the warm-up out of the spec: the schedule's automatic default."""
    runs = [("1f1b-flush", "none", 0, args.flush_precision)]
    for run in args.runs.split(","):
        schedule, correction, warmup, precision = (run.split(":") + ["fp32"])[:4]
        runs.append((schedule, correction, warmup if warmup == "auto" else int(warmup), precision))
    return runs


def method_fields(correction, warmup):
    """The pipeline fields of a run's correction and warm-up, "auto" ones left out."""
    fields = ""
    if correction != "auto":
        fields += ", drift_correction: %s" % correction
    if warmup != "auto":
        fields += ", warmup_steps: %d" % warmup
    return fields


def train(args, workdir, schedule, correction, warmup, precision, seed):
    """One run through pacictl train: its summary."""
    a, P = args.accumulation, args.stages
    mbs = args.global_batch // a
    steps = args.steps if schedule == "1f1b-flush" or not args.run_steps else args.run_steps
    tag = "%s-%s-w%s-%s-seed%d" % (schedule, correction, warmup, precision, seed)
    spec = os.path.join(workdir, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, d_model=args.d_model, seq_len=args.seq_len, P=P,
                            schedule=schedule, a=a, mbs=mbs, method=method_fields(correction, warmup),
                            lr=args.lr, vocab=args.vocab_size,
                            warmup=args.warmup_fraction, steps=steps,
                            eval_interval=args.eval_interval, eval_mb=max(1, args.eval_sequences // mbs),
                            corpus=os.path.abspath(args.corpus), seed=seed))
        f.write("runtime: {precision: %s}\n" % precision)
    summary_path = spec + ".summary.json"
    sc.log("running %s ..." % tag)
    proc = sc.subprocess.run([args.pacictl, "train", spec, "--summary=" + summary_path],
                             stdout=sc.subprocess.PIPE, stderr=sc.subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("run %s failed:\n%s" % (tag, proc.stdout[-4000:]))
    with open(summary_path) as f:
        summary = sc.json.load(f)
    sc.log("  validation loss %.4f, %.0f tokens/s" % (summary["final_validation_loss"],
                                                    summary["tokens_per_second"]))
    return dict(schedule=schedule, correction=correction, warmup=warmup, precision=precision,
                seed=seed, summary=summary)


def seconds_to(points, target):
    """Seconds since training began at the first evaluation at or below target, or None."""
    return next((p.get("seconds", 0.0) for p in points if p["loss"] <= target + 1e-12), None)


def analyse(args, runs):
    """One row per configuration, every figure paired with the flush of the same seed."""
    def configuration(r):
        return (r["schedule"], r["correction"], r["warmup"], r["precision"])
    flush = {r["seed"]: r for r in runs if configuration(r) == configurations(args)[0]}
    rows = []
    for schedule, correction, warmup, precision in configurations(args):
        group = [r for r in runs if configuration(r) == (schedule, correction, warmup, precision)]
        losses = [r["summary"]["final_validation_loss"] for r in group]
        gaps = [100 * (r["summary"]["final_validation_loss"] /
                       flush[r["seed"]]["summary"]["final_validation_loss"] - 1) for r in group]
        speedups = {75: [], 100: []}
        for r in group:
            base = flush[r["seed"]]["summary"]["validation_loss"]
            targets = {75: next(p["loss"] for p in base if p["step"] >= 0.75 * args.steps),
                       100: base[-1]["loss"]}
            for pct, target in targets.items():
                mine = seconds_to(r["summary"]["validation_loss"], target)
                theirs = seconds_to(base, target)
                speedups[pct].append(theirs / mine if mine and theirs else None)

        def mean_of(values):
            return statistics.mean(values) if all(v is not None for v in values) else None
        rows.append(dict(
            schedule=schedule, correction=correction, warmup_steps=warmup, precision=precision,
            seeds=[r["seed"] for r in group],
            final_losses=losses, mean_loss=statistics.mean(losses),
            spread=max(losses) - min(losses), gap_pct=gaps, mean_gap_pct=statistics.mean(gaps),
            tokens_per_second=statistics.median(r["summary"]["tokens_per_second"] for r in group),
            speedups_75=speedups[75], mean_speedup_75=mean_of(speedups[75]),
            speedups_100=speedups[100], mean_speedup_100=mean_of(speedups[100]),
            validation_loss={r["seed"]: r["summary"]["validation_loss"] for r in group},
            peak_rss_mib=max(s["peak_rss_bytes"] for r in group for s in r["summary"]["stages"]) / 2**20,
            drift_max=max(s["drift_max"] for r in group for s in r["summary"]["stages"])))
    return rows


def run_name(args, r):
    """A configuration's name in the table and the plot (its precision unless fp32)."""
    precision = "" if r.get("precision", "fp32") == "fp32" else ", " + r["precision"]
    if r["schedule"] in ("1f1b-flush", "gpipe"):
        return "%s m=%d%s" % (r["schedule"], args.accumulation, precision)
    if r["correction"] == "auto":
        return "%s a=%d, automatic default%s" % (r["schedule"], args.accumulation, precision)
    return ("%s a=%d" % (r["schedule"], args.accumulation) +
            (", %s" % r["correction"] if r["correction"] != "none" else "") +
            (", warmup_steps %d" % r["warmup_steps"] if r["warmup_steps"] else "") + precision)


def plot(args, rows, png):
    """Validation loss against wall time, seed by seed averaged: one curve per configuration
    (the mean over the seeds of the loss at each evaluation, at the mean of their times)."""
    if not shutil.which("gnuplot"):
        print("no gnuplot: skipping the plot", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "curves.dat")
        with open(data, "w") as f:
            for r in rows:
                curves = list(r["validation_loss"].values())
                f.write("# %s\n" % run_name(args, r))
                for points in zip(*curves):
                    f.write("%.3f %.5f\n" % (statistics.mean(p.get("seconds", 0.0) for p in points),
                                             statistics.mean(p["loss"] for p in points)))
                f.write("\n\n")
        plots = ", \\\n     ".join("'%s' index %d with linespoints pt 7 ps 0.4 lw 2 title '%s'" % (
            data, i, run_name(args, r)) for i, r in enumerate(rows))
        script = ("set terminal pngcairo size 1100,600 font ',11' noenhanced\nset output '%s'\n"
                  "set title 'P = %d, %d steps, mean of seeds %s: validation loss against wall time'\n"
                  "set xlabel 'seconds since training began'\nset ylabel 'validation loss'\n"
                  "set key top right\nset grid\nset yrange [:%.3f]\nplot %s\n" % (
                      png, args.stages, args.steps, args.seeds,
                      1.25 * max(r["mean_loss"] for r in rows), plots))
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


def table(args, rows):
    def number(value, fmt):
        return "not reached" if value is None else fmt % value
    lines = ["| run | final validation loss per seed | mean | spread | vs the flush of each seed | "
             "mean | tokens/s (median) | to the flush's loss at 75%, vs the flush | mean | "
             "to the flush's final loss | mean | peak RSS of a stage (MiB) |",
             "|---|---|---:|---:|---|---:|---:|---|---:|---|---:|---:|"]
    for r in rows:
        name = run_name(args, r)
        lines.append("| %s | %s | %.4f | %.4f | %s | %+.2f%% | %.0f | %s | %s | %s | %s | %.0f |" % (
            name, ", ".join("%.4f" % x for x in r["final_losses"]), r["mean_loss"], r["spread"],
            ", ".join("%+.2f%%" % g for g in r["gap_pct"]), r["mean_gap_pct"], r["tokens_per_second"],
            ", ".join(number(s, "%.2fx") for s in r["speedups_75"]), number(r["mean_speedup_75"], "%.2fx"),
            ", ".join(number(s, "%.2fx") for s in r["speedups_100"]),
            number(r["mean_speedup_100"], "%.2fx"), r["peak_rss_mib"]))
    lines.append("")
    lines.append("P = %d, seeds %s (each sets model.init_seed and data.seed), %d optimizer steps of %d "
                 "sequences of %d tokens (a = %d micro-batches), d_model %d, 4 layers, lr %g with %g of "
                 "the steps warming it up; validation every %d steps. Losses and times measured, one "
                 "stage per core." % (args.stages, args.seeds, args.steps, args.global_batch,
                                      args.seq_len, args.accumulation, args.d_model, args.lr,
                                      args.warmup_fraction, args.eval_interval))
    if args.run_steps and args.run_steps != args.steps:
        lines.append("")
        lines.append("The flush trains %d steps, every other run %d (each with its own learning-rate "
                     "schedule): time to accuracy, the flush's losses the targets; their final losses "
                     "are at their own last step." % (args.steps, args.run_steps))
    return "\n".join(lines)


def main():
    args = parse_args()
    if not os.path.exists(args.corpus):
        sys.exit("%s is missing: scripts/kjv-corpus.sh makes it" % args.corpus)
    runs = []
    with tempfile.TemporaryDirectory(prefix="paci-method-") as workdir:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for schedule, correction, warmup, precision in configurations(args):
                runs.append(train(args, workdir, schedule, correction, warmup, precision, seed))
    rows = analyse(args, runs)
    text = table(args, rows)
    write_result(args.out, args.name or "method_p%d" % args.stages,
                 dict(rows=rows, corpus=os.path.basename(args.corpus),
                      args={k: v for k, v in vars(args).items()
                            if k not in ("pacictl", "build", "corpus", "out")}), text)
    plot(args, rows, os.path.join(args.out, (args.name or "method_p%d" % args.stages) + ".png"))
    print(text)


if __name__ == "__main__":
    main()
