#!/usr/bin/env python3
"""The GPU benchmark: paci's CUDA worker against PyTorch eager on the same GPU.

Needs a machine with an NVIDIA GPU, the CUDA toolkit, NCCL, and PyTorch with
its LibTorch (run it with the python3 that has torch). In one run it

  1. builds paci with -DPACI_CUDA=ON against PyTorch's LibTorch (unless
     --build-dir points at such a build already), into build-cuda/;
  2. trains a GPT of a few hundred million parameters in PyTorch eager (the
     baseline: the same architecture, batch and precision, torch.optim.AdamW);
  3. trains the same model with `pacictl train`, one stage on the GPU (P = 1);
  4. and as a P = 2 pipeline with both stages on the one GPU (PACI, a = 2; the
     two stages exchange tensors through the host, as NCCL refuses two ranks
     on one GPU);

and prints per-stage step time and tokens/s of each, as ratios against the
eager baseline, and writes them to bench/results/gpu.json.

    python3 bench/gpu_benchmark.py [--deps-prefix DIR] [--steps 40] [--layers 24 --d-model 1024]

--deps-prefix: a folder with the libraries the build needs that the machine
lacks (gRPC, protobuf, Abseil, prometheus-cpp, glog, yaml-cpp, cpp-httplib,
SQLite, GoogleTest; Debian's packages unpacked with `dpkg -x`), added to
CMAKE_PREFIX_PATH and LD_LIBRARY_PATH.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "data", "kjv-genesis.txt")


def gpt_parameters(layers, d, vocab, seq):
    per_block = 12 * d * d + 13 * d  # qkv, proj, fc, proj with biases, two LayerNorms
    return layers * per_block + vocab * d + seq * d + 2 * d + d * vocab + vocab


def build(args, env):
    import torch
    torch_dir = os.path.join(torch.utils.cmake_prefix_path, "Torch")
    cmd = ["cmake", "-S", ROOT, "-B", args.build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
           "-DPACI_CUDA=ON", "-DTorch_DIR=" + torch_dir]
    if args.deps_prefix:
        cmd.append("-DCMAKE_PREFIX_PATH=" + os.path.join(args.deps_prefix, "usr"))
    subprocess.run(cmd, check=True, env=env)
    subprocess.run(["cmake", "--build", args.build_dir, "--target", "paci_worker",
                    "paci_coordinator", "pacictl", "worker_model_test",
                    "worker_nccl_link_test"], check=True, env=env)


def eager_baseline(args):
    """Trains the same GPT in PyTorch eager; returns step seconds and tokens/s."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d, heads, seq):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1))

        def attention(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
            att = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1)
            return self.attn_proj((att @ v).transpose(1, 2).reshape(B, T, C))

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(args.vocab, args.d_model)
            self.wpe = nn.Embedding(args.seq_len, args.d_model)
            self.blocks = nn.ModuleList(Block(args.d_model, args.heads, args.seq_len)
                                        for _ in range(args.layers))
            self.ln_f, self.head = nn.LayerNorm(args.d_model), nn.Linear(args.d_model, args.vocab)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    torch.manual_seed(1)
    device = torch.device("cuda:0")
    model = GPT().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    B, T = args.micro_batch * args.accumulation, args.seq_len

    def step():
        starts = torch.randint(len(ids) - T - 1, (B,))
        batch = torch.stack([ids[s:s + T + 1] for s in starts]).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"step_seconds": seconds / args.steps, "tokens_per_second": args.steps * B * T / seconds,
            "final_loss": float(loss), "peak_memory_bytes": torch.cuda.max_memory_allocated()}


def paci_run(args, env, stages, workdir):
    """Trains the same model with pacictl; returns its step seconds, tokens/s and stages."""
    name = "gpu-p%d" % stages
    spec = os.path.join(workdir, name + ".yaml")
    accumulation = args.accumulation if stages == 1 else max(2, args.accumulation)
    with open(spec, "w") as f:
        f.write("\n".join([
            "name: %s" % name,
            "model: {vocab_size: %d, num_layers: %d, d_model: %d, num_heads: %d, seq_len: %d}" % (
                args.vocab, args.layers, args.d_model, args.heads, args.seq_len),
            "pipeline: {num_stages: %d, schedule: paci, accumulation: %d, micro_batch_size: %d}" % (
                stages, accumulation, args.micro_batch),
            "optimizer: {lr: %g}" % args.lr,
            "training: {steps: %d, eval_interval: %d}" % (args.steps + args.warmup,
                                                          args.steps + args.warmup),
            "data: {corpus_path: %s}" % CORPUS,
            "runtime: {device: cuda:0, precision: bf16-autocast}",
        ]) + "\n")
    summary = os.path.join(workdir, name + ".summary.json")
    pacictl = os.path.join(args.build_dir, "tools", "pacictl")
    subprocess.run([pacictl, "train", spec, "--summary=" + summary], check=True, env=env)
    with open(summary) as f:
        s = json.load(f)
    steps = args.steps + args.warmup
    tokens = steps * accumulation * args.micro_batch * args.seq_len
    return {
        "stages": stages, "accumulation": accumulation,
        "step_seconds": s["wall_seconds"] / steps,
        "tokens_per_second": s.get("tokens_per_second", tokens / s["wall_seconds"]),
        "final_loss": s.get("final_train_loss"),
        "per_stage": [{"stage": st.get("stage", i), "busy_seconds": st.get("busy_seconds"),
                       "idle_seconds": st.get("idle_seconds", 0.0),
                       "step_seconds": (st.get("busy_seconds", 0.0) + st.get("idle_seconds", 0.0))
                       / steps} for i, st in enumerate(s["stages"])],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build-cuda"))
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--deps-prefix", default="")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=96)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gpu.json"))
    args = parser.parse_args()

    env = dict(os.environ)
    if args.deps_prefix:
        libs = [os.path.join(args.deps_prefix, "usr", "lib", "x86_64-linux-gnu"),
                os.path.join(args.deps_prefix, "usr", "lib")]
        env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")])
    if not args.no_build:
        build(args, env)
    for test in ("worker/model/worker_model_test", "worker/transport/worker_nccl_link_test"):
        subprocess.run([os.path.join(args.build_dir, test)], env=env)

    params = gpt_parameters(args.layers, args.d_model, args.vocab, args.seq_len)
    print("GPT: %d layers, d_model %d, %.0f M parameters, micro-batch %d x %d tokens, bf16 autocast"
          % (args.layers, args.d_model, params / 1e6, args.micro_batch, args.seq_len))
    eager = eager_baseline(args)
    with tempfile.TemporaryDirectory(prefix="paci-gpu-") as workdir:
        runs = [paci_run(args, env, 1, workdir), paci_run(args, env, 2, workdir)]
    print("\n%-28s %12s %12s %10s" % ("run", "step s", "tokens/s", "vs eager"))
    print("%-28s %12.4f %12.0f %10s" % ("PyTorch eager (baseline)", eager["step_seconds"],
                                        eager["tokens_per_second"], "1.00x"))
    for run in runs:
        label = "paci P=%d a=%d (one GPU)" % (run["stages"], run["accumulation"])
        print("%-28s %12.4f %12.0f %9.2fx" % (label, run["step_seconds"], run["tokens_per_second"],
                                              run["tokens_per_second"] / eager["tokens_per_second"]))
        for stage in run["per_stage"]:
            print("    stage %d: %.4f s per step (busy %.1f s, idle %.1f s)" % (
                stage["stage"], stage["step_seconds"], stage["busy_seconds"] or 0,
                stage["idle_seconds"] or 0))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"parameters": params, "config": vars(args), "eager": eager, "paci": runs}, f,
                  indent=2)
    print("\nwrote", args.out)


if __name__ == "__main__":
    sys.exit(main())
