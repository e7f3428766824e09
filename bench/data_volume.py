#!/usr/bin/python3
"""Data volume: `pacictl prepare-data` and training from memory-mapped token
shards on a corpus of over 100 MB, against training from the text in memory.

1. Corpora: Debian's KJV and fortune cookies (data/kjv.txt, data/fortunes.txt)
   concatenated and repeated to --big_mb MB (Debian packages no single English
   text that large), and the first --small_mb MB of it.
2. prepare-data on both (character tokenizer, so that the shards hold exactly
   the tokens the in-memory path makes), and a SentencePiece BPE vocabulary
   trained and applied on the big one: wall seconds, MB/s, tokens/s.
3. The same small job, P = 2, trained four ways: the small text in memory
   (corpus_path: the baseline), the small corpus' shards, the big corpus'
   shards, and the big text in memory. Tokens/s and each stage's peak
   resident memory: from shards it must not grow with the corpus; in memory
   it does (the text and its int32 token ids).

Writes --out/data_volume.{md,json}.
  /usr/bin/python3 bench/data_volume.py [--big_mb 110] [--steps 150]
Needs a built tree, data/kjv.txt (scripts/kjv-corpus.sh) and data/fortunes.txt
(scripts/fortunes-corpus.sh).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

from bench_results import write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1 << 20

SPEC = """
name: volume-{tag}
model: {{vocab_size: {vocab}, num_layers: 2, d_model: 64, num_heads: 4, seq_len: 64}}
pipeline: {{num_stages: 2, schedule: paci, accumulation: 2, micro_batch_size: 8, drift_correction: none, warmup_steps: 0}}
optimizer: {{lr: 1e-3}}
training: {{steps: {steps}, eval_interval: {steps}, eval_micro_batches: 2}}
data: {{{source}, validation_fraction: 0.01}}
"""


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--big_mb", type=int, default=110)
    parser.add_argument("--small_mb", type=int, default=10)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--bpe_vocab", type=int, default=4000)
    parser.add_argument("--work", default=os.path.join(ROOT, "runs", "data-volume"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    args.pacictl = os.path.join(args.build, "tools", "pacictl")
    return args


def make_corpora(args):
    """The big corpus (KJV + fortunes, repeated) and its head: their paths."""
    os.makedirs(args.work, exist_ok=True)
    sources = [os.path.join(ROOT, "data", name) for name in ("kjv.txt", "fortunes.txt")]
    for path in sources:
        if not os.path.exists(path):
            sys.exit("missing %s: run scripts/kjv-corpus.sh and scripts/fortunes-corpus.sh" % path)
    unit = b"".join(open(path, "rb").read() for path in sources)
    paths = {}
    for name, size in (("big", args.big_mb * MB), ("small", args.small_mb * MB)):
        path = os.path.join(args.work, "%s-%dmb.txt" % (name, size // MB))
        if not os.path.exists(path) or abs(os.path.getsize(path) - size) > 1000:
            with open(path + ".tmp", "wb") as f:
                written = 0
                while written < size - 1000:
                    piece = unit[:size - written]
                    if len(piece) < len(unit):  # the last piece ends at a line
                        piece = piece[:piece.rfind(b"\n") + 1]
                    f.write(piece)
                    written += len(piece)
            os.rename(path + ".tmp", path)
        paths[name] = path
    return paths


def prepare(args, corpus, tokenizer, extra=()):
    """prepare-data into a fresh folder: its figures."""
    out = os.path.join(args.work, "%s-%s" % (os.path.basename(corpus).split(".")[0], tokenizer))
    subprocess.run(["rm", "-rf", out], check=True)
    started = time.monotonic()
    proc = subprocess.run([args.pacictl, "prepare-data", corpus, "--out=" + out,
                           "--tokenizer=" + tokenizer] + list(extra),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit("prepare-data failed:\n" + proc.stdout[-3000:])
    # "wrote DIR: N shards, T tokens, M MB in S s (R MB/s, K tokens/s), vocabulary V (kind)"
    last = proc.stdout.strip().splitlines()[-1]
    found = re.search(r"([\d,]+) tokens, .*vocabulary ([\d,]+)", last)
    if not found:
        sys.exit("prepare-data said: " + last)
    tokens, vocab = (int(group.replace(",", "")) for group in found.groups())
    size = os.path.getsize(corpus)
    print("prepare-data %s %s: %.1f s, %.1f MB/s, %.0f tokens/s" % (
        os.path.basename(corpus), tokenizer, seconds, size / MB / seconds, tokens / seconds))
    return dict(dataset=out, tokenizer=tokenizer, corpus_mb=size / MB, seconds=seconds,
                mb_per_second=size / MB / seconds, tokens=tokens,
                tokens_per_second=tokens / seconds, vocab=vocab, last_line=last)


def train(args, tag, source, vocab):
    """One pacictl train run: tokens/s and the peak RSS of each stage in MB."""
    spec = os.path.join(args.work, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, vocab=vocab, steps=args.steps, source=source))
    summary_path = spec + ".summary.json"
    proc = subprocess.run([args.pacictl, "train", spec, "--summary=" + summary_path],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("train %s failed:\n%s" % (tag, proc.stdout[-3000:]))
    with open(summary_path) as f:
        summary = json.load(f)
    rss = [s["peak_rss_bytes"] / MB for s in summary["stages"]]
    print("train %-22s %8.0f tokens/s  peak RSS %s MB  val loss %.3f" % (
        tag, summary["tokens_per_second"], " / ".join("%.0f" % r for r in rss),
        summary["final_validation_loss"]))
    return dict(tag=tag, tokens_per_second=summary["tokens_per_second"], peak_rss_mb=rss,
                final_validation_loss=summary["final_validation_loss"])


def table(args, prepared, runs):
    lines = ["Data volume: corpora of %d MB and %d MB (KJV + fortunes, repeated); P = 2, "
             "%d steps, 2 cores." % (args.small_mb, args.big_mb, args.steps), "",
             "| prepare-data | corpus MB | s | MB/s | tokens | tokens/s | vocab |",
             "|---|---|---|---|---|---|---|"]
    for p in prepared:
        lines.append("| %s | %.0f | %.1f | %.1f | %s | %s | %s |" % (
            p["tokenizer"], p["corpus_mb"], p["seconds"], p["mb_per_second"],
            format(p["tokens"], ","), format(int(p["tokens_per_second"]), ","), p["vocab"] or ""))
    base = runs[0]
    lines += ["", "| training from | tokens/s | vs text in memory (%d MB) | peak RSS stage 0 / 1, MB |"
              % args.small_mb, "|---|---|---|---|"]
    for r in runs:
        lines.append("| %s | %s | %.2fx | %s |" % (
            r["tag"], format(int(r["tokens_per_second"]), ","),
            r["tokens_per_second"] / base["tokens_per_second"],
            " / ".join("%.0f" % m for m in r["peak_rss_mb"])))
    return "\n".join(lines)


def main():
    args = parse_args()
    corpora = make_corpora(args)
    small = prepare(args, corpora["small"], "char")
    big = prepare(args, corpora["big"], "char")
    bpe = prepare(args, corpora["big"], "bpe", ["--vocab_size=%d" % args.bpe_vocab])
    vocab = big["vocab"]  # the characters of the corpus, either way
    runs = [
        train(args, "text-%dmb-in-memory" % args.small_mb,
              "corpus_path: " + corpora["small"], vocab),
        train(args, "shards-%dmb" % args.small_mb, "dataset: " + small["dataset"], vocab),
        train(args, "shards-%dmb" % args.big_mb, "dataset: " + big["dataset"], vocab),
        train(args, "text-%dmb-in-memory" % args.big_mb, "corpus_path: " + corpora["big"], vocab),
    ]
    result = dict(big_mb=args.big_mb, small_mb=args.small_mb, steps=args.steps,
                  prepare=[small, big, bpe], runs=runs,
                  shards_vs_memory=runs[1]["tokens_per_second"] / runs[0]["tokens_per_second"],
                  rss_growth_shards_mb=[b - s for b, s in zip(runs[2]["peak_rss_mb"],
                                                              runs[1]["peak_rss_mb"])])
    text = table(args, [small, big, bpe], runs)
    print("\n" + text)
    write_result(args.out, "data_volume", result, text)


if __name__ == "__main__":
    main()
