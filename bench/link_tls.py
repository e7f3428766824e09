#!/usr/bin/python3
"""What mutual TLS on the stage links costs: one GPT at PACI P = 2 through `pacictl
train` (two worker processes, one thread each), its links in plaintext (the
baseline) and over mutual TLS (the workers' --tls_cert, --tls_key and --tls_ca:
each end of a link checks the other's certificate). The certificates are made
here with openssl: a CA and one certificate for 127.0.0.1 that both workers use.

The runs alternate (plaintext, mutual, plaintext, ...) --repeats times so that a
drift of the machine's speed spreads over both; the table gives each mode's
median tokens/s and its ratio to plaintext's, and the activation bytes per link
message (micro_batch x seq_len x d_model x 4).

Writes --out/link_tls.{md,json}.
  /usr/bin/python3 bench/link_tls.py [--steps 80] [--repeats 3] [--d_model 256]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_results import write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = """
name: link-{tag}
model: {{vocab_size: 80, num_layers: 4, d_model: {d_model}, num_heads: 4, seq_len: {seq_len}}}
pipeline: {{num_stages: 2, schedule: paci, accumulation: 4, micro_batch_size: {mbs}, drift_correction: none, warmup_steps: 0}}
optimizer: {{lr: 1e-3}}
training: {{steps: {steps}, eval_interval: {steps}, eval_micro_batches: 2}}
data: {{corpus_path: {corpus}}}
runtime: {{threads_per_stage: 1}}
"""

MODES = ("plaintext", "mutual-tls")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--d_model", type=int, default=256)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--micro_batch", type=int, default=8)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    return parser.parse_args()


def make_certificates(directory):
    """A CA and a certificate it signs for 127.0.0.1 (server and client use): paths."""
    path = {n: os.path.join(directory, n) for n in ("ca.crt", "ca.key", "link.crt", "link.key", "link.csr",
                                                   "link.ext")}

    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=bench CA",
            "-keyout", path["ca.key"], "-out", path["ca.crt"])
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", path["link.key"],
            "-out", path["link.csr"])
    with open(path["link.ext"], "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
    openssl("x509", "-req", "-in", path["link.csr"], "-CA", path["ca.crt"], "-CAkey", path["ca.key"],
            "-CAcreateserial", "-days", "1", "-extfile", path["link.ext"], "-out", path["link.crt"])
    return path


def worker_flags(mode, pki):
    if mode == "plaintext":
        return ""
    return "--tls_cert=%s --tls_key=%s --tls_ca=%s" % (pki["link.crt"], pki["link.key"], pki["ca.crt"])


def train(args, work, mode, run, pki):
    tag = "%s-%d" % (mode, run)
    spec = os.path.join(work, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(SPEC.format(tag=tag, steps=args.steps, d_model=args.d_model, seq_len=args.seq_len,
                            mbs=args.micro_batch, corpus=os.path.join(ROOT, "tests", "data", "kjv-genesis.txt")))
    summary_path = spec + ".summary.json"
    command = [os.path.join(args.build, "tools", "pacictl"), "train", spec, "--summary=" + summary_path]
    flags = worker_flags(mode, pki)
    if flags:
        command.append("--worker_flags=" + flags)
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("train %s failed:\n%s" % (tag, proc.stdout[-3000:]))
    with open(summary_path) as f:
        summary = json.load(f)
    print("%-14s %8.0f tokens/s  val loss %.3f" % (tag, summary["tokens_per_second"],
                                                   summary.get("final_validation_loss", 0.0)), flush=True)
    return summary["tokens_per_second"]


def main():
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="paci-link-tls-") as work:
        pki = make_certificates(work)
        runs = {mode: [] for mode in MODES}
        for run in range(args.repeats):
            for mode in MODES:
                runs[mode].append(train(args, work, mode, run, pki))
    median = {mode: statistics.median(values) for mode, values in runs.items()}
    message_bytes = args.micro_batch * args.seq_len * args.d_model * 4
    lines = [
        "Stage links at PACI P = 2 (2 processes, 1 thread each, %d cores): %d steps, a = 4, "
        "micro-batches of %d x %d tokens, d_model %d: %.1f MiB per activation or gradient message; "
        "median of %d runs per mode, run alternately" % (
            os.cpu_count(), args.steps, args.micro_batch, args.seq_len, args.d_model,
            message_bytes / 2**20, args.repeats),
        "",
        "| links | tokens/s (median) | vs plaintext | runs (tokens/s) |",
        "|---|---|---|---|",
    ]
    for mode in MODES:
        lines.append("| %s | %.0f | %.3fx | %s |" % (
            mode, median[mode], median[mode] / median["plaintext"],
            ", ".join("%.0f" % v for v in runs[mode])))
    table = "\n".join(lines)
    print(table)
    write_result(args.out, "link_tls", {
        "cores": os.cpu_count(), "steps": args.steps, "d_model": args.d_model, "seq_len": args.seq_len,
        "micro_batch": args.micro_batch, "message_bytes": message_bytes, "runs": runs, "median": median,
        "ratio_to_plaintext": {m: median[m] / median["plaintext"] for m in MODES}}, table)


if __name__ == "__main__":
    main()
