#!/usr/bin/python3
"""Data parallelism x pipeline parallelism (pipeline.data_parallel).

Three runs of one small GPT on the Genesis slice, each with the same global
batch per optimizer step (R x a x micro_batch_size sequences) and the same
number of steps, through `pacictl train` (real workers, Gloo all-reduce):

  1. R = 1 x P = 1, a = 2A      the baseline: one process
  2. R = 2 x P = 1, a = A       two replicas of one stage
  3. R = 2 x P = 2, a = A       two replicas of a two-stage PACI pipeline:
                                4 processes on this machine's cores

For each: tokens per second (the coordinator's, over every replica), its ratio
to the baseline, the final losses, and the all-reduce time per optimizer
step from the timeline (the all_reduce spans of the Chrome trace). With
fewer cores than processes the runs are oversubscribed: the table says so.

Writes --out/data_parallel.{md,json}.
  /usr/bin/python3 bench/data_parallel.py [--steps 150] [--accumulation 2]
"""
import argparse
import json
import os
import subprocess
import sys

from bench_results import write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """
name: dp-{tag}
model: {{vocab_size: 80, num_layers: 4, d_model: {d_model}, num_heads: 4, seq_len: 64}}
pipeline: {{num_stages: {P}, schedule: paci, accumulation: {a}, micro_batch_size: 8,
            data_parallel: {R}, drift_correction: none, warmup_steps: 0}}
optimizer: {{lr: 1e-3}}
training: {{steps: {steps}, eval_interval: {steps}, eval_micro_batches: 4}}
data: {{corpus_path: {corpus}}}
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--accumulation", type=int, default=2, help="A: a of each replica")
    parser.add_argument("--d_model", type=int, default=128)
    parser.add_argument("--work", default=os.path.join(ROOT, "runs", "data-parallel"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    args.pacictl = os.path.join(args.build, "tools", "pacictl")
    return args


def all_reduce_ms_per_step(trace_path):
    """Mean all_reduce span per optimizer step, over every stage of every replica (ms)."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    reduces = [e["dur"] for e in events if e.get("ph") == "X" and e["name"] == "all_reduce"]
    return sum(reduces) / len(reduces) / 1000 if reduces else 0.0


def train(args, tag, R, P, a):
    os.makedirs(args.work, exist_ok=True)
    spec = os.path.join(args.work, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, R=R, P=P, a=a, steps=args.steps, d_model=args.d_model,
                            corpus=os.path.join(ROOT, "tests", "data", "kjv-genesis.txt")))
    summary_path = spec + ".summary.json"
    trace_path = spec + ".trace.json"
    proc = subprocess.run([args.pacictl, "train", spec, "--summary=" + summary_path,
                           "--trace=" + trace_path],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("train %s failed:\n%s" % (tag, proc.stdout[-3000:]))
    with open(summary_path) as f:
        summary = json.load(f)
    row = {
        "run": tag, "replicas": R, "stages": P, "accumulation": a, "processes": R * P,
        "global_batch": R * a * 8, "tokens_per_second": summary["tokens_per_second"],
        "wall_seconds": summary["wall_seconds"],
        "final_train_loss": summary.get("final_train_loss", 0.0),
        "final_validation_loss": summary.get("final_validation_loss", 0.0),
        "all_reduce_ms_per_step": all_reduce_ms_per_step(trace_path),
    }
    print("%-10s %2d processes  %8.0f tokens/s  all-reduce %.2f ms/step  val loss %.3f" % (
        tag, R * P, row["tokens_per_second"], row["all_reduce_ms_per_step"],
        row["final_validation_loss"]), flush=True)
    return row


def main():
    args = parse_args()
    A = args.accumulation
    cores = os.cpu_count()
    rows = [train(args, "r1-p1", 1, 1, 2 * A), train(args, "r2-p1", 2, 1, A),
            train(args, "r2-p2", 2, 2, A)]
    base = rows[0]["tokens_per_second"]
    for row in rows:
        row["speedup_vs_r1_p1"] = row["tokens_per_second"] / base if base else 0.0
        row["oversubscribed"] = row["processes"] > cores
    lines = [
        "Data parallelism: %d steps, global batch %d sequences of 64 tokens per step, "
        "d_model %d, %d cores" % (args.steps, rows[0]["global_batch"], args.d_model, cores),
        "",
        "| run | processes | tokens/s | vs R=1 x P=1 | all-reduce ms/step | final train loss "
        "| final val loss | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append("| %s | %d | %.0f | %.2fx | %.2f | %.4f | %.4f | %s |" % (
            row["run"], row["processes"], row["tokens_per_second"], row["speedup_vs_r1_p1"],
            row["all_reduce_ms_per_step"], row["final_train_loss"],
            row["final_validation_loss"],
            "oversubscribed: %d processes on %d cores" % (row["processes"], cores)
            if row["oversubscribed"] else ""))
    table = "\n".join(lines)
    print(table)
    write_result(args.out, "data_parallel", {"cores": cores, "steps": args.steps, "runs": rows},
                 table)


if __name__ == "__main__":
    main()
