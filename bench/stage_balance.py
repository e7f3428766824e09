#!/usr/bin/python3
"""Stage balance: how close a P = 2 pipeline comes to two processes, per partition.

Trains a GPT of 4 layers (d_model 256, 4 heads, seq_len 128, micro-batches of
4 sequences, a = 4, one thread per stage) at two vocabulary sizes, 256 and
8,192 (where the LM head outweighs two blocks), as

  limit        two independent P = 1 runs at once: what two cores can do
  paci even    PACI, P = 2, whole blocks spread evenly (the old cut)
  paci bal     PACI, P = 2, pipeline.partition: balanced
  flush bal    1f1b-flush, P = 2, balanced (m = a = 4: (m+P-1)/m = 1.25 bound)
  paci P=4     PACI, P = 4, balanced (four stages on the two cores)

and prints tokens/s, the ratios (PACI / limit, balanced / even, PACI /
1f1b-flush), each stage's cut, measured busy and idle time against the cost
model's predicted busy time, and the CPU (in cores) that other processes used
during each run. A run during which other processes took more than
--max_other_load cores is repeated (up to --attempts tries), as
bench/schedule_comparison.py does; the load of the kept try is reported.

Writes --out/stage_balance.md and stage_balance.json (default bench/results/).

  /usr/bin/python3 bench/stage_balance.py [--steps 60] [--build build]

Needs a built tree (scripts/build.sh) and data/kjv.txt (scripts/kjv-corpus.sh).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from cpu_load import children_cpu_seconds, cpu_busy_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """
name: balance-{tag}
model: {{vocab_size: {vocab}, num_layers: 4, d_model: 256, num_heads: 4, seq_len: 128}}
pipeline: {{num_stages: {P}, schedule: {schedule}, accumulation: 4, micro_batch_size: 4,
            partition: {partition}, drift_correction: none, warmup_steps: 0}}
optimizer: {{lr: 1e-3, warmup_fraction: 0.05}}
training: {{steps: {steps}, eval_interval: {steps}, eval_micro_batches: 1}}
data: {{corpus_path: {corpus}, seed: 1}}
runtime: {{threads_per_stage: 1, precision: fp32}}
"""

# (key, label, P, schedule, partition); "limit" runs two P = 1 processes at once.
RUNS = [
    ("limit", "2 x P=1 at once (limit)", 1, "paci", "even"),
    ("paci-even", "PACI P=2 even", 2, "paci", "even"),
    ("paci-balanced", "PACI P=2 balanced", 2, "paci", "balanced"),
    ("flush-balanced", "1f1b-flush P=2 balanced", 2, "1f1b-flush", "balanced"),
    ("paci-p4-balanced", "PACI P=4 balanced", 4, "paci", "balanced"),
]


def log(message):
    print(message, file=sys.stderr, flush=True)


def start(args, workdir, tag, vocab, P, schedule, partition):
    spec = os.path.join(workdir, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, vocab=vocab, P=P, schedule=schedule, partition=partition,
                            steps=args.steps, corpus=os.path.abspath(args.corpus)))
    summary = spec + ".summary.json"
    proc = subprocess.Popen([args.pacictl, "train", spec, "--summary=" + summary],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, summary


def finish(proc, summary_path, tag):
    output = proc.communicate()[0]
    if proc.returncode != 0:
        sys.exit("run %s failed:\n%s" % (tag, output[-4000:]))
    with open(summary_path) as f:
        return json.load(f)


def train_once(args, workdir, vocab, key, P, schedule, partition):
    tag = "v%d-%s" % (vocab, key)
    if key == "limit":
        started = [start(args, workdir, "%s-%d" % (tag, i), vocab, P, schedule, partition)
                   for i in range(2)]
        summaries = [finish(p, s, tag) for p, s in started]
        return dict(tokens_per_second=sum(s["tokens_per_second"] for s in summaries),
                    summaries=summaries)
    proc, summary_path = start(args, workdir, tag, vocab, P, schedule, partition)
    summary = finish(proc, summary_path, tag)
    return dict(tokens_per_second=summary["tokens_per_second"], summaries=[summary])


def train(args, workdir, vocab, key, label, P, schedule, partition):
    for attempt in range(1, args.attempts + 1):
        busy, ours, started = cpu_busy_seconds(), children_cpu_seconds(), time.monotonic()
        log("v=%d %-26s try %d ..." % (vocab, label, attempt))
        result = train_once(args, workdir, vocab, key, P, schedule, partition)
        wall = time.monotonic() - started
        # CPU the machine spent on anything but this run, in cores.
        foreign = ((cpu_busy_seconds() - busy) - (children_cpu_seconds() - ours)) / wall
        result.update(other_load_cores=foreign, attempts=attempt, wall_seconds=wall, key=key,
                      label=label, P=P, schedule=schedule, partition=partition, vocab=vocab)
        log("  %.0f s, %.0f tokens/s, other load %.2f cores" % (
            wall, result["tokens_per_second"], foreign))
        if foreign <= args.max_other_load:
            break
        log("  other work used %.2f cores; %s" % (
            foreign, "running it again" if attempt < args.attempts else "keeping it, marked"))
    return result


def stage_rows(result):
    """'cut [0,8,10]; s0 emb..h3.attn busy 40.1 s (pred 39.0) idle 3%; ...'"""
    if result["key"] == "limit":
        return "-"
    s = result["summaries"][0]
    parts = []
    for st in s["stages"]:
        busy = st.get("busy_seconds", 0)
        parts.append("s%d %s: busy %.1f s (pred %.1f), idle %.0f%%" % (
            st.get("stage", 0), st.get("units", "?"), busy, st.get("predicted_busy_seconds", 0),
            100 * st.get("idle_fraction", 0)))
    return "cut [%s]; %s" % (",".join(str(b) for b in s.get("partition_boundaries", [])),
                             "; ".join(parts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument("--vocabs", default="256,8192")
    parser.add_argument("--max_other_load", type=float, default=0.2,
                        help="cores other processes may use during a run before it is repeated")
    parser.add_argument("--attempts", type=int, default=2, help="tries per run")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "kjv.txt"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    args.pacictl = os.path.join(args.build, "tools", "pacictl")
    os.makedirs(args.out, exist_ok=True)
    began = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for vocab in [int(v) for v in args.vocabs.split(",")]:
            for key, label, P, schedule, partition in RUNS:
                results.append(train(args, workdir, vocab, key, label, P, schedule, partition))

    lines = ["# Stage balance (bench/stage_balance.py)", "",
             "GPT 4 layers, d_model 256, 4 heads, seq_len 128, micro-batch 4, a = 4, one thread "
             "per stage, %d steps per run, on %d CPUs; %.0f s in all." % (
                 args.steps, os.cpu_count(), time.monotonic() - began), ""]
    for vocab in sorted({r["vocab"] for r in results}):
        by = {r["key"]: r for r in results if r["vocab"] == vocab}
        limit = by["limit"]["tokens_per_second"]
        lines += ["## vocab_size %d" % vocab, "",
                  "| run | tokens/s | / limit | other load (cores) | tries | stages |",
                  "|---|---:|---:|---:|---:|---|"]
        for key, label, _, _, _ in RUNS:
            r = by[key]
            lines.append("| %s | %.0f | %.2f | %.2f%s | %d | %s |" % (
                label, r["tokens_per_second"], r["tokens_per_second"] / limit,
                r["other_load_cores"], " (busy)" if r["other_load_cores"] > args.max_other_load
                else "", r["attempts"], stage_rows(r)))
        tps = {k: r["tokens_per_second"] for k, r in by.items()}
        lines += ["", "- PACI P=2 balanced / even: %.2f" % (tps["paci-balanced"] / tps["paci-even"]),
                  "- PACI P=2 balanced / 1f1b-flush balanced: %.2f (bound (m+P-1)/m = 1.25)" % (
                      tps["paci-balanced"] / tps["flush-balanced"]),
                  "- PACI P=2 balanced / limit: %.2f; P=4 balanced / limit: %.2f" % (
                      tps["paci-balanced"] / limit, tps["paci-p4-balanced"] / limit), ""]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, "stage_balance.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "stage_balance.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
