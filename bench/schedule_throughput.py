#!/usr/bin/python3
"""Throughput of the pipeline schedules against baselines measured in the same run.

Trains the same GPT on the same corpus, batch, seed and number of optimizer
steps as: one process (P = 1, the unsplit model), and P = 2 worker processes
under paci, async-1f1b, 1f1b-flush and gpipe (one stage per core, one thread
each). Prints tokens/s, the ratio to the single process and to 1f1b-flush, the
measured idle fraction per stage beside the (P-1)/(m+P-1) a flush predicts,
and final losses. Writes bench/results/schedule_throughput.{json,md}.

  /usr/bin/python3 bench/schedule_throughput.py [--steps 200] [--build build]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """
name: bench-{tag}
model: {{vocab_size: 96, num_layers: 4, d_model: {d_model}, num_heads: 4, seq_len: {seq_len}}}
pipeline: {{num_stages: {P}, schedule: {schedule}, accumulation: {a}, micro_batch_size: 8}}
optimizer: {{lr: 3e-3}}
training: {{steps: {steps}, eval_interval: {steps}, eval_micro_batches: 4}}
data: {{corpus_path: {corpus}}}
"""


def run(pacictl, workdir, **kw):
    tag = "%s-p%d-a%d" % (kw["schedule"], kw["P"], kw["a"])
    spec = os.path.join(workdir, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, **kw))
    summary = spec + ".json"
    proc = subprocess.run([pacictl, "train", spec, "--summary=" + summary],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("run %s failed:\n%s" % (tag, proc.stdout[-3000:]))
    with open(summary) as f:
        s = json.load(f)
    s["tag"] = tag
    return s


def idle_fraction(stage):
    busy, idle = float(stage["busy_seconds"]), float(stage["idle_seconds"])
    return idle / (busy + idle) if busy + idle > 0 else 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--a", type=int, default=2, help="accumulation (m for the flushes)")
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--seq_len", type=int, default=64)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "kjv.txt"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    pacictl = os.path.join(args.build, "tools", "pacictl")
    common = dict(steps=args.steps, d_model=args.d_model, seq_len=args.seq_len,
                  corpus=os.path.abspath(args.corpus))
    P, a = 2, args.a
    configs = [
        dict(P=1, schedule="1f1b-flush", a=a),  # the single-process baseline
        dict(P=P, schedule="paci", a=a),
        dict(P=P, schedule="async-1f1b", a=1),
        dict(P=P, schedule="1f1b-flush", a=a),
        dict(P=P, schedule="gpipe", a=a),
    ]
    with tempfile.TemporaryDirectory() as workdir:
        results = []
        for config in configs:
            print("running %s P=%d a=%d ..." % (config["schedule"], config["P"], config["a"]),
                  file=sys.stderr, flush=True)
            results.append(run(pacictl, workdir, **config, **common))
    single = float(results[0]["tokens_per_second"])
    flush = float(results[3]["tokens_per_second"])
    rows = []
    for s in results:
        tps = float(s["tokens_per_second"])
        P_ = int(s["num_stages"])
        m = int(s["accumulation"])
        predicted = (P_ - 1) / (m + P_ - 1) if s["schedule"] in ("1f1b-flush", "gpipe") else 0.0
        rows.append(dict(
            run=s["tag"], schedule=s["schedule"], P=P_, a=m, steps=int(s["steps"]),
            tokens_per_second=round(tps, 1),
            vs_single_process=round(tps / single, 3),
            vs_1f1b_flush=round(tps / flush, 3),
            idle_fraction_measured=[round(idle_fraction(st), 3) for st in s["stages"]],
            idle_fraction_flush_model=round(predicted, 3),
            drift_max=[int(st["drift_max"]) for st in s["stages"]],
            drift_bound=[int(st["drift_bound"]) for st in s["stages"]],
            final_train_loss=round(float(s["final_train_loss"]), 4),
            final_validation_loss=round(float(s["final_validation_loss"]), 4),
            wall_seconds=round(float(s["wall_seconds"]), 1),
            peak_rss_mib=[round(int(st["peak_rss_bytes"]) / 2**20, 1) for st in s["stages"]],
        ))
    header = ("| run | tokens/s | vs 1 process | vs 1f1b-flush | idle (measured) | "
              "idle (flush model) | drift max / bound | train loss | val loss | peak RSS MiB |")
    lines = [header, "|" + "---|" * 10]
    for r in rows:
        lines.append("| %s | %.0f | %.2fx | %.2fx | %s | %.3f | %s / %s | %.3f | %.3f | %s |" % (
            r["run"], r["tokens_per_second"], r["vs_single_process"], r["vs_1f1b_flush"],
            r["idle_fraction_measured"], r["idle_fraction_flush_model"], r["drift_max"],
            r["drift_bound"], r["final_train_loss"], r["final_validation_loss"], r["peak_rss_mib"]))
    table = "\n".join(lines)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "schedule_throughput.json"), "w") as f:
        json.dump(dict(config=common, rows=rows), f, indent=2)
    with open(os.path.join(args.out, "schedule_throughput.md"), "w") as f:
        f.write("Same model, corpus, batch, seed and %d optimizer steps; d_model %d, seq_len %d, "
                "micro-batch 8, a = %d.\n\n%s\n" % (args.steps, args.d_model, args.seq_len, a, table))
    print("wrote %s/schedule_throughput.{json,md}" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
