#!/usr/bin/env python3
"""paci against the machine's limit, per precision and vocabulary, in one run.

For each --precisions (fp32, bf16-autocast, bf16-weights) and each --vocabs
(default 256, 8192 and 32768), on the GPT of bench/peer_pipelining.py (4
layers, d_model 256, 4 heads, seq_len 128, micro-batches of 4, a = 4, one
thread per process), interleaved so that a slow spell of the machine hits every
row of a configuration alike:

  matmul rate      LibTorch's one-thread matmul at that precision, [512, 256]
                   by [256, 1024] (the blocks' shape) and by [256, vocab] (the
                   head's), GFLOP/s: the machine's limit per core
  paci P=1         the unsplit model in one worker
  2-core limit     two P = 1 runs at once: the sum of their tokens/s (what two
                   cores give with no pipeline at all)
  PACI P=2         two stages, one core each, at paci's default cut
                   (pipeline.partition: balanced, the cost model's); where
                   that splits the head by vocabulary ("9,10/R" in the cut
                   column: the first stage computes the head's first R rows),
                   also the same cut with the head whole on the last stage
  1f1b-flush P=2   the same under the flush
  torch eager      PyTorch's own unsplit model, one thread, the same precision
                   (bench/peer_pipelining.py's run_eager; bf16-weights: not run)
  torch <schedule> every torch.distributed.pipelining schedule at P = 2 (Gloo,
                   whole blocks cut evenly, as bench/peer_pipelining.py runs them),
                   ScheduleZBVZeroBubble and ScheduleDualPipeV included (with
                   --peers; bf16-weights: not run)

and prints tokens/s (training tokens from the end of each run's first step to
the end of its last: peer_pipelining.training_rate), each stage's peak resident
memory, PACI's ratio to the 2-core limit, and model FLOPs utilisation: the
model's FLOPs per token (6 per matmul weight, the attention's 12 L T d) times
tokens/s over the processes' cores at the measured block matmul rate.

With --rounds N every configuration's runs go N times, one round after the
other (run 1, 2, ..., then run 1, 2, ... again), so that a slow spell of this
shared machine hits each run alike; the table gives each run's median tokens/s
with the range, and each ratio to the limit as the median of the rounds' own
ratios (each round's run over the same round's limit). Peak memory is the
highest of the rounds.

torch's processes run with the allocator paci's worker links (tcmalloc,
preloaded: peer_pipelining.torch_environment), so the ratios compare engines.

Writes --out/cpu_limits.md and cpu_limits.json (default bench/results/).

  build/python-env/bin/python bench/cpu_limits.py [--steps 40] [--rounds 3]
      [--vocabs 256,8192,32768] [--precisions fp32,bf16-autocast] [--peers] [--build build]

Needs a built tree (scripts/build.sh) and data/kjv.txt (scripts/kjv-corpus.sh).
"""
import argparse
import concurrent.futures
import os
import platform
import statistics
import sys
import tempfile
import time

import peer_pipelining as peers
from bench_results import write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(message):
    print(message, file=sys.stderr, flush=True)


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        lines = f.read().splitlines()
    model = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")), "?")
    # x86 lists "flags", Arm "Features" (where bfloat16 is "bf16").
    flags = next((l.split(":", 1)[1].split() for l in lines if l.startswith(("flags", "Features"))), [])
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_vnni", "bf16")
    return model, [f for f in wanted if f in flags]


def matmul_rate(precision, rows, inner, cols):
    """One thread's GFLOP/s for [rows, inner] x [inner, cols], best of 3 timings, into one
    output tensor: a new [512, 32768] float32 output at each product (64 MB) would time glibc's
    mapping and the kernel's zeroing of its pages too (a third of the time at 32,768)."""
    import torch
    torch.set_num_threads(1)
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, cols, dtype=dtype)
    out = torch.empty(rows, cols, dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(10):
            torch.matmul(a, b, out=out)
        best = min(best, (time.perf_counter() - started) / 10)
    return 2.0 * rows * inner * cols / best / 1e9


def flops_per_token(cfg):
    """Training FLOPs per token: 6 per matmul weight (forward 2, backward 4) and the
    attention's scores and weighted sum (12 L T d)."""
    d, L, T, V = cfg["d_model"], cfg["layers"], cfg["seq_len"], cfg["vocab"]
    return 6 * (L * 12 * d * d + d * V) + 12 * L * T * d


def both_at_once(args, cfg, workdir):
    """Two P = 1 runs started together: the machine's 2-core limit."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda i: peers.run_paci(args, cfg, "paci", workdir, stages=1,
                                                      tag="limit-%d" % i), range(2)))
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        return dict(error=errors[0])
    return dict(tokens_per_second=sum(r["tokens_per_second"] for r in runs),
                final_train_loss=runs[0]["final_train_loss"],
                final_validation_loss=runs[0]["final_validation_loss"],
                peak_rss_mb=[m for r in runs for m in r["peak_rss_mb"]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--vocabs", default="256,8192,32768")
    parser.add_argument("--precisions", default="fp32,bf16-autocast,bf16-weights")
    parser.add_argument("--rounds", type=int, default=1,
                        help="each configuration's runs this many times, interleaved")
    parser.add_argument("--peers", action="store_true",
                        help="also every torch.distributed.pipelining schedule at P = 2")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "kjv.txt"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    parser.add_argument("--name", default="cpu_limits")
    args = parser.parse_args()
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be at least 2 (every run is timed after its first step) "
                     "and --rounds at least 1")
    import torch

    model, flags = cpu_flags()
    precisions = args.precisions.split(",")
    # Without these paci runs bf16 emulated, several times slower (CpuInfoHasBf16 in
    # worker/model/precision.h): nothing to measure against the machine's limit.
    has_bf16 = bool({"avx512_bf16", "amx_bf16", "bf16"} & set(flags))
    skipped = [p for p in precisions if p != "fp32" and not has_bf16]
    precisions = [p for p in precisions if p not in skipped]
    if skipped:
        log("not run: %s (this CPU has no bfloat16 instructions; bf16 runs emulated there)"
            % ", ".join(skipped))
    results = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        for precision in precisions:
            for vocab in [int(v) for v in args.vocabs.split(",")]:
                cfg = dict(steps=args.steps, vocab=vocab, layers=4, d_model=256, heads=4, seq_len=128,
                           micro_batch=4, a=4, lr=1e-3, eval_sequences=16, seed=1,
                           corpus=os.path.abspath(args.corpus), precision=precision)
                config_dir = os.path.join(workdir, "%s-%d" % (precision, vocab))
                os.makedirs(config_dir)
                block_rate = matmul_rate(precision, 512, 256, 1024)
                head_rate = matmul_rate(precision, 512, 256, vocab)
                runs = [("paci-p1", "paci P=1", lambda: peers.run_paci(args, cfg, "paci", config_dir,
                                                                        stages=1, tag="p1"), 1),
                        ("limit", "2-core limit (two P=1 at once)",
                         lambda: both_at_once(args, cfg, config_dir), 2),
                        ("paci", "paci PACI P=2",
                         lambda: peers.run_paci(args, cfg, "paci", config_dir, partition="balanced"), 2),
                        ("flush", "paci 1f1b-flush P=2",
                         lambda: peers.run_paci(args, cfg, "1f1b-flush", config_dir,
                                                partition="balanced"), 2)]
                if precision != "bf16-weights":
                    runs.append(("eager", "torch eager P=1", lambda: peers.run_eager(args, cfg), 1))
                    if args.peers:
                        for key, label, *_ in peers.PEERS:
                            runs.append((key, label + " P=2",
                                         lambda key=key: peers.run_peer(args, cfg, key, config_dir), 2))
                for round_number in range(1, args.rounds + 1):
                    next_run = 0
                    while next_run < len(runs):
                        key, label, run, cores = runs[next_run]
                        next_run += 1
                        log("%-14s vocab %-6d round %d  %-36s ..." % (precision, vocab, round_number,
                                                                    label))
                        try:
                            r = run()
                        except Exception as e:  # a run that cannot go is a result, not a crash
                            r = dict(error=str(e)[:300])
                        if "error" not in r:
                            r["mfu"] = (r["tokens_per_second"] * flops_per_token(cfg)
                                        / (cores * block_rate * 1e9))
                        r.update(key=key, label=label, precision=precision, vocab=vocab,
                                 round=round_number, block_gflops=block_rate, head_gflops=head_rate)
                        log("  " + (r["error"] if "error" in r else "%.0f tokens/s, MFU %.2f" % (
                            r["tokens_per_second"], r["mfu"])))
                        results.append(r)
                        if (key == "paci" and r.get("head_split")
                                and all(x[0] != "paci-whole" for x in runs)):
                            # The same cut with the head whole on the last stage, next in every round.
                            whole = ",".join(str(b) for b in r["cut"][1:-1])
                            runs.insert(next_run, ("paci-whole", "paci PACI P=2, head not split",
                                                   lambda whole=whole: peers.run_paci(
                                                       args, cfg, "paci", config_dir,
                                                       partition=whole, tag="whole"), 2))

    lines = ["# paci against the machine's limit, per precision and vocabulary", "",
             "CPU: %s (%s), LibTorch %s, %d steps per run, %d round%s, %.0f s in all. tokens/s "
             "from the end of each run's first step to the end of its last%s. Allocator: %s." % (
                 model, " ".join(flags), torch.__version__, args.steps, args.rounds,
                 "" if args.rounds == 1 else "s", time.monotonic() - began,
                 "; the median of the rounds (range), each ratio the median of the rounds' own"
                 if args.rounds > 1 else "", peers.allocator_label(args.build))
             + (" Not run: %s (no bfloat16 instructions on this CPU)." % ", ".join(skipped)
                if skipped else ""), "",
             "| precision | vocab | run | tokens/s | / 2-core limit | MFU | peak RSS MiB | "
             "train loss | cut | matmul GFLOP/s (blocks, head) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    rows = {}
    for r in results:  # in the order of the first round
        rows.setdefault((r["precision"], r["vocab"], r["key"]), []).append(r)
    for (precision, vocab, key), group in rows.items():
        ok = [r for r in group if "error" not in r]
        if not ok:
            lines.append("| %s | %d | %s | failed: %s | | | | | | |" % (
                precision, vocab, group[0]["label"],
                group[0]["error"].replace("|", "/").replace("\n", " ")))
            continue
        rates = [r["tokens_per_second"] for r in ok]
        limits = {x["round"]: x["tokens_per_second"] for x in rows.get((precision, vocab, "limit"), [])
                  if "error" not in x}
        ratios = [r["tokens_per_second"] / limits[r["round"]] for r in ok if r["round"] in limits]
        failed = len(group) - len(ok)
        rss = [max(m) for m in zip(*[r.get("peak_rss_mb", []) for r in ok])]
        first = ok[0]
        lines.append("| %s | %d | %s | %.0f%s | %s | %.2f | %s | %.3f | %s | %.0f, %.0f |" % (
            precision, vocab, first["label"], statistics.median(rates),
            (" (%.0f-%.0f)" % (min(rates), max(rates)) if len(rates) > 1 else "")
            + (" (%d failed)" % failed if failed else ""),
            "%.2f" % statistics.median(ratios) if ratios else "",
            statistics.median(r["mfu"] for r in ok), ", ".join("%.0f" % m for m in rss),
            first["final_train_loss"], ",".join(str(b) for b in first.get("cut", []))
            + ("/%d" % first["head_split"] if first.get("head_split") else ""),
            first["block_gflops"], first["head_gflops"]))
    text = "\n".join(lines)
    print(text)
    write_result(args.out, args.name, dict(cpu=model, flags=flags, torch=torch.__version__, skipped=skipped,
                                           machine=platform.machine(), steps=args.steps, rounds=args.rounds,
                                           runs=results),
                 text)


if __name__ == "__main__":
    main()
