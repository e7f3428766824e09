#!/usr/bin/python3
"""LibTorch against LibTorch: the same GPT and runs on two builds of paci.

Trains a GPT of 4 layers (d_model 256, 4 heads, seq_len 128, micro-batches of 4
sequences, a = 4, one thread per stage) at vocabularies 256 and 8,192, as

  P=1        the unsplit model in one worker
  PACI P=2   two stages (balanced cut), one core each

once with the --baseline build and once with --build, and prints tokens/s, the
ratio build / baseline, and the peak resident memory of each stage's worker
process (as the run summary reports it). The two builds are given as folders of a built tree (their
tools/pacictl starts their own worker/paci_worker): by default --build is this
checkout's build/ (LibTorch of scripts/python-env.sh) and --baseline must be
named, e.g. a build of a commit before LibTorch 2 (Debian's LibTorch 1.13 with
OpenBLAS, libtorch-dev and libopenblas0-openmp installed). A run during which
other processes took more than --max_other_load cores is repeated once, as in
bench/stage_balance.py.

Writes --out/libtorch_versions.md and libtorch_versions.json (default bench/results/).

  /usr/bin/python3 bench/libtorch_versions.py --baseline DIR [--build build] [--steps 60]

Needs data/kjv.txt (scripts/kjv-corpus.sh).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from bench_results import peak_rss_mb
from cpu_load import children_cpu_seconds, cpu_busy_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """
name: libtorch-{tag}
model: {{vocab_size: {vocab}, num_layers: 4, d_model: 256, num_heads: 4, seq_len: 128}}
pipeline: {{num_stages: {P}, schedule: paci, accumulation: 4, micro_batch_size: 4,
            partition: balanced, drift_correction: none, warmup_steps: 0}}
optimizer: {{lr: 1e-3, warmup_fraction: 0.05}}
training: {{steps: {steps}, eval_interval: {steps}, eval_micro_batches: 1}}
data: {{corpus_path: {corpus}, seed: 1}}
runtime: {{threads_per_stage: 1, precision: fp32}}
"""


def log(message):
    print(message, file=sys.stderr, flush=True)


def libtorch_of(build):
    """'<path of libtorch_cpu.so> (<version>)' as the worker binary resolves it."""
    worker = os.path.join(build, "worker", "paci_worker")
    out = subprocess.run(["ldd", worker], stdout=subprocess.PIPE, text=True).stdout
    found = re.search(r"libtorch_cpu\.so\S* => (\S+)", out)
    path = os.path.realpath(found.group(1)) if found else "?"
    blas = re.search(r"lib(openblas|blas|mkl\w*)\S*\.so\S* => (\S+)", out)
    # Named by what they are, not where this machine keeps them.
    where = "the torch wheel" if "site-packages" in path else "the system's"
    return dict(libtorch_cpu="%s (%s)" % (os.path.basename(path), where),
                blas=("%s (%s)" % (os.path.basename(os.path.realpath(blas.group(2))),
                                   os.path.basename(os.path.dirname(os.path.realpath(blas.group(2)))))
                      if blas else "none linked (MKL inside libtorch_cpu)"))


def train_once(args, build, workdir, tag, vocab, P):
    spec = os.path.join(workdir, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, vocab=vocab, P=P, steps=args.steps,
                            corpus=os.path.abspath(args.corpus)))
    summary_path = spec + ".summary.json"
    proc = subprocess.Popen([os.path.join(build, "tools", "pacictl"), "train", spec,
                             "--summary=" + summary_path],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.communicate()[0]
    if proc.returncode != 0:
        sys.exit("run %s failed:\n%s" % (tag, output[-4000:]))
    with open(summary_path) as f:
        summary = json.load(f)
    return dict(tokens_per_second=summary["tokens_per_second"],
                final_train_loss=summary.get("final_train_loss"),
                peak_rss_mb=peak_rss_mb(summary), summary=summary)


def train(args, build_key, build, workdir, vocab, P):
    label = "P=1" if P == 1 else "PACI P=2"
    for attempt in range(1, args.attempts + 1):
        busy, ours, started = cpu_busy_seconds(), children_cpu_seconds(), time.monotonic()
        log("%s v=%d %s try %d ..." % (build_key, vocab, label, attempt))
        result = train_once(args, build, workdir, "%s-v%d-p%d" % (build_key, vocab, P), vocab, P)
        wall = time.monotonic() - started
        foreign = ((cpu_busy_seconds() - busy) - (children_cpu_seconds() - ours)) / wall
        result.update(other_load_cores=foreign, attempts=attempt, wall_seconds=wall,
                      build=build_key, vocab=vocab, P=P, label=label)
        log("  %.0f s, %.0f tokens/s, peak RSS %s MB, other load %.2f cores" % (
            wall, result["tokens_per_second"], result["peak_rss_mb"], foreign))
        if foreign <= args.max_other_load:
            break
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True,
                        help="a built tree to compare against (its tools/pacictl and worker/)")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--baseline_label", default="baseline", help="what --baseline is, for the table")
    parser.add_argument("--build_label", default="this checkout's build", help="what --build is")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument("--vocabs", default="256,8192")
    parser.add_argument("--max_other_load", type=float, default=0.2)
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "kjv.txt"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    builds = {"baseline": os.path.abspath(args.baseline), "build": os.path.abspath(args.build)}
    labels = {"baseline": args.baseline_label, "build": args.build_label}
    libs = {k: libtorch_of(v) for k, v in builds.items()}
    os.makedirs(args.out, exist_ok=True)
    began = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for vocab in [int(v) for v in args.vocabs.split(",")]:
            for P in (1, 2):
                for key, build in builds.items():
                    results.append(train(args, key, build, workdir, vocab, P))

    lines = ["# LibTorch against LibTorch (bench/libtorch_versions.py)", "",
             "GPT 4 layers, d_model 256, 4 heads, seq_len 128, micro-batch 4, a = 4, one thread "
             "per stage, %d steps per run, on %d CPUs; %.0f s in all." % (
                 args.steps, os.cpu_count(), time.monotonic() - began), ""]
    for key in builds:
        lines.append("- %s: %s; libtorch_cpu %s, BLAS %s" % (
            key, labels[key], libs[key]["libtorch_cpu"], libs[key]["blas"]))
    lines += ["", "| vocab | run | baseline tokens/s | build tokens/s | build / baseline "
              "| peak RSS per stage, baseline MB | peak RSS per stage, build MB | other load |",
              "|---:|---|---:|---:|---:|---|---|---|"]
    for vocab in sorted({r["vocab"] for r in results}):
        for P in (1, 2):
            by = {r["build"]: r for r in results if r["vocab"] == vocab and r["P"] == P}
            base, new = by["baseline"], by["build"]
            fmt = lambda peaks: " / ".join("%.0f" % v for v in peaks) or "?"
            lines.append("| %d | %s | %.0f | %.0f | %.2f | %s | %s | %.2f / %.2f |" % (
                vocab, new["label"], base["tokens_per_second"], new["tokens_per_second"],
                new["tokens_per_second"] / base["tokens_per_second"], fmt(base["peak_rss_mb"]),
                fmt(new["peak_rss_mb"]), base["other_load_cores"], new["other_load_cores"]))
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, "libtorch_versions.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "libtorch_versions.json"), "w") as f:
        json.dump(dict(builds=labels, libraries=libs, runs=results), f, indent=1)


if __name__ == "__main__":
    main()
