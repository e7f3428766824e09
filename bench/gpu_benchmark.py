#!/usr/bin/env python3
"""The GPU benchmark: paci's CUDA worker against PyTorch eager on the same GPU.

Needs a machine with an NVIDIA GPU, the CUDA toolkit, NCCL, and PyTorch with
its LibTorch (run it with the python3 that has torch). In one run it

  1. builds paci with -DPACI_CUDA=ON against PyTorch's LibTorch (unless
     --no-build: then --build-dir must hold such a build), into build-cuda/;
  2. measures the GPU's bf16 matmul rate (8192^3, recorded beside --peak-tflops);
  3. trains a GPT of a few hundred million parameters in PyTorch eager (the
     baseline: the same architecture, batch and precision; attention with
     scaled_dot_product_attention as paci's on LibTorch 2.x; torch.optim.AdamW
     with weight decay on matrices only as paci's, fused (fused=True) where
     paci's is, i.e. on PyTorch 2.x, else multi-tensor: --eager-optimizer),
     once per precision: bf16-autocast (float32 weights, bfloat16 matmuls) and
     bf16-weights (bfloat16 weights and activations, float32 master weights
     and moments as paci keeps them), and once per accumulation (a
     micro-batches, each its own forward and backward, then one optimizer
     step, as paci);
  4. trains the same model with `pacictl train`, one stage on the GPU (P = 1),
     at each accumulation of --accumulation,
  5. and as a P = 2 pipeline with both stages on the one GPU (PACI, a = 2 or
     the first of --accumulation if larger; the two stages exchange tensors
     through the host, as NCCL refuses two ranks on one GPU), in both
     precisions;

and prints, against the eager baseline of the same precision:
  - tokens/s in the steady state (after --warmup steps; paci's from the loss
    points of its last stage, which carry their time) and the ratio to eager;
  - per-stage step time (busy seconds per optimizer step) and the stage's
    compute against eager's for the same share of the model and tokens
    ("stage vs eager", >= 1 means at least as fast);
  - achieved TFLOP/s of the model's matmuls and the fraction of --peak-tflops
    (790: the bf16 dense matmul rate measured on an H200): FLOPs per token =
    6 * (matmul parameters) + 6 * layers * seq_len * d_model (attention's two
    batched matmuls over the causal half, which is all a causal kernel needs).

Results go to bench/results/gpu.json, rewritten after every run, so a run cut
short by a time limit keeps what it measured.

    python3 bench/gpu_benchmark.py [--no-build --build-dir DIR] [--deps-prefix DIR]
        [--steps 30 --warmup 10] [--layers 8 --d-model 2048 --heads 16]
        [--seq-len 1024 --micro-batch 8] [--accumulation 1[,4...]]
        [--eager-optimizer auto|fused|foreach]

--deps-prefix: a folder where Debian's packages of the libraries the build
needs were unpacked with `dpkg -x`; added to LD_LIBRARY_PATH of the paci
processes. On a machine that lacks them, scripts/gpu-check.sh unpacks them,
builds and runs this script.
"""
import argparse
import json
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


def matmul_flops_per_token(layers, d, vocab, seq):
    """Training FLOPs of the model's matmuls per token (forward + backward = 3x forward)."""
    matmul_params = layers * 12 * d * d + d * vocab  # qkv, attention proj, fc, proj; the head
    attention = 6 * layers * seq * d  # q @ k^T and att @ v over the causal half, x3
    return 6 * matmul_params + attention


def matmul_rate(n=8192, iterations=30):
    """The GPU's bf16 matmul rate on random n x n x n products, in TFLOP/s."""
    import torch
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        a @ b
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    del a, b
    torch.cuda.empty_cache()
    return 2 * n ** 3 * iterations / seconds / 1e12


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


def eager_optimizer_kind(args):
    """fused or foreach: `auto` is fused where paci's AdamW is (PyTorch 2.x on CUDA)."""
    import torch
    if args.eager_optimizer != "auto":
        return args.eager_optimizer
    return "fused" if int(torch.__version__.split(".")[0]) >= 2 else "foreach"


def eager_baseline(args, precision, accumulation):
    """Trains the same GPT in PyTorch eager; returns steady-state step seconds and tokens/s.

    Over 80 lines on purpose: the baseline is one self-contained PyTorch
    program (model, optimizer, timed loop) that must match paci's GPT line
    for line; split up, the comparison would be harder to check. It runs only
    where a GPU and PyTorch are, so it is kept exactly as it ran there.
    """
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

        def attention(self, x):  # as paci's: qkv viewed [B, T, 3, H, D/H]
            B, T, C = x.shape
            qkv = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
            return self.attn_proj(y.transpose(1, 2).reshape(B, T, C))

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
            self.ln_f, self.head = nn.LayerNorm(args.d_model), nn.Linear(args.d_model, args.vocab, bias=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    torch.manual_seed(1)
    device = torch.device("cuda:0")
    torch.cuda.reset_peak_memory_stats(device)
    model = GPT().to(device)
    autocast = precision == "bf16-autocast"
    if precision == "bf16-weights":
        model = model.to(torch.bfloat16)
    params = list(model.parameters())
    masters = params
    if precision == "bf16-weights":
        # As paci: AdamW on float32 master weights and moments, the bfloat16
        # weights then take the rounded master values.
        masters = [p.detach().float().requires_grad_() for p in params]
        for m in masters:
            m.grad = torch.zeros_like(m)
    # As paci: weight decay on matrices only; the fused kernel where paci runs
    # at::_fused_adamw_ (PyTorch 2.x), else multi-tensor (foreach) kernels.
    groups = [{"params": [m for m in masters if m.dim() >= 2], "weight_decay": 0.1},
              {"params": [m for m in masters if m.dim() < 2], "weight_decay": 0.0}]
    kind = eager_optimizer_kind(args)
    optimizer = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                                  **({"fused": True} if kind == "fused" else {"foreach": True}))

    def copy_all(dst, src):
        if hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_(dst, src)
        else:
            for d, s in zip(dst, src):
                d.copy_(s)

    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    B, T = args.micro_batch, args.seq_len

    events = []  # (before the optimizer, after it) per timed step

    def step(timed):
        # `accumulation` micro-batches of B sequences, gradients summed, then
        # one optimizer step: as paci with accumulation a.
        total = 0.0
        for _ in range(accumulation):
            starts = torch.randint(len(ids) - T - 1, (B,))
            batch = torch.stack([ids[s:s + T + 1] for s in starts]).to(device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = model(batch[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, args.vocab),
                                       batch[:, 1:].reshape(-1))
            (loss / accumulation).backward()
            total = total + loss.detach() / accumulation
        if timed:
            events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
            events[-1][0].record()
        with torch.no_grad():
            if masters is not params:
                copy_all([m.grad for m in masters], [p.grad for p in params])
            optimizer.step()
            if masters is not params:
                copy_all(params, masters)
        model.zero_grad(set_to_none=True)
        if timed:
            events[-1][1].record()
        return total

    for _ in range(args.warmup):
        step(False)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step(True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    optimizer_seconds = sum(a.elapsed_time(b) for a, b in events) / 1e3 / args.steps
    result = {"precision": precision, "accumulation": accumulation, "optimizer": kind,
              "tokens_per_step": accumulation * B * T,
              "step_seconds": seconds / args.steps,
              "optimizer_seconds": optimizer_seconds,
              "tokens_per_second": args.steps * accumulation * B * T / seconds,
              "final_loss": float(loss.detach()),
              "peak_memory_bytes": torch.cuda.max_memory_allocated()}
    del model, optimizer, params, masters
    torch.cuda.empty_cache()
    return result


def steady_state(points, warmup, tokens_per_step):
    """Tokens/s and step seconds between the loss point at step `warmup` and the last one."""
    points = sorted(points, key=lambda p: p["step"])
    after = [p for p in points if p["step"] >= warmup] or points
    if len(after) < 2:
        return None, None
    first, last = after[0], after[-1]
    steps, seconds = last["step"] - first["step"], last["seconds"] - first["seconds"]
    if steps <= 0 or seconds <= 0:
        return None, None
    return steps * tokens_per_step / seconds, seconds / steps


def paci_run(args, env, stages, precision, accumulation, workdir):
    """Trains the same model with pacictl; returns its throughput and per-stage times."""
    name = "gpu-p%d-a%d-%s" % (stages, accumulation, precision)
    spec = os.path.join(workdir, name + ".yaml")
    steps = args.steps + args.warmup
    with open(spec, "w") as f:
        f.write("\n".join([
            "name: %s" % name,
            "model: {vocab_size: %d, num_layers: %d, d_model: %d, num_heads: %d, seq_len: %d}" % (
                args.vocab, args.layers, args.d_model, args.heads, args.seq_len),
            "pipeline: {num_stages: %d, schedule: paci, accumulation: %d, micro_batch_size: %d, drift_correction: none, warmup_steps: 0}" % (
                stages, accumulation, args.micro_batch),
            "optimizer: {lr: %g}" % args.lr,
            "training: {steps: %d, eval_interval: %d}" % (steps, steps),
            "data: {corpus_path: %s}" % CORPUS,
            "runtime: {device: cuda:0, precision: %s, threads_per_stage: %d}" % (
                precision, args.threads),
        ]) + "\n")
    summary = os.path.join(workdir, name + ".summary.json")
    pacictl = os.path.join(args.build_dir, "tools", "pacictl")
    started = time.perf_counter()
    subprocess.run([pacictl, "train", spec, "--summary=" + summary], check=True, env=env,
                   timeout=args.run_timeout)
    with open(summary) as f:
        s = json.load(f)
    tokens_per_step = accumulation * args.micro_batch * args.seq_len
    steady_tps, steady_step = steady_state(s.get("train_loss", []), args.warmup, tokens_per_step)
    per_stage = []
    for i, st in enumerate(s.get("stages", [])):
        optimizer_steps = st.get("optimizer_steps") or steps
        busy, idle = st.get("busy_seconds", 0.0), st.get("idle_seconds", 0.0)
        per_stage.append({"stage": st.get("stage", i), "busy_seconds": busy, "idle_seconds": idle,
                          "optimizer_steps": optimizer_steps,
                          "busy_seconds_per_step": busy / optimizer_steps,
                          "step_seconds": (busy + idle) / optimizer_steps})
    return {
        "stages": stages, "precision": precision, "accumulation": accumulation,
        "succeeded": s.get("succeeded"), "error": s.get("error", ""),
        "tokens_per_step": tokens_per_step,
        "steady_tokens_per_second": steady_tps, "steady_step_seconds": steady_step,
        "run_tokens_per_second": s.get("tokens_per_second"),
        "wall_seconds": s.get("wall_seconds"), "process_seconds": time.perf_counter() - started,
        "final_loss": s.get("final_train_loss"), "per_stage": per_stage,
    }


def main():
    # Over 80 lines on purpose: the GPU run's whole sequence (build, matmul
    # rate, eager and paci runs per precision, the saved record) reads top to
    # bottom beside what it prints, and it can run only on a lent GPU, so it
    # is kept exactly as it ran there.
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build-cuda"))
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--skip-tests", action="store_true",
                        help="do not run worker_model_test and worker_nccl_link_test first")
    parser.add_argument("--deps-prefix", default="")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=96)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--accumulation", default="1",
                        help="micro-batches per optimizer step, a list: P = 1 and eager run at "
                             "each, P > 1 at the first (at least 2)")
    parser.add_argument("--eager-optimizer", choices=("auto", "fused", "foreach"), default="auto",
                        help="eager's torch.optim.AdamW: auto is fused (fused=True) on PyTorch "
                             "2.x, where paci runs at::_fused_adamw_, else foreach")
    parser.add_argument("--steps", type=int, default=30, help="timed steps, after the warm-up")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--threads", type=int, default=4, help="runtime.threads_per_stage")
    parser.add_argument("--stages", default="1,2")
    parser.add_argument("--precisions", default="bf16-autocast,bf16-weights")
    parser.add_argument("--peak-tflops", type=float, default=790.0,
                        help="the GPU's bf16 dense matmul rate (H200: 790 measured)")
    parser.add_argument("--run-timeout", type=float, default=150.0, help="seconds per paci run")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gpu.json"))
    args = parser.parse_args()

    import torch
    env = dict(os.environ)
    if args.deps_prefix:
        libs = [os.path.join(args.deps_prefix, "usr", "lib", "x86_64-linux-gnu"),
                os.path.join(args.deps_prefix, "usr", "lib")]
        env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")])
    if not args.no_build:
        build(args, env)
    if not args.skip_tests:
        for test in ("worker/model/worker_model_test", "worker/transport/worker_nccl_link_test"):
            subprocess.run([os.path.join(args.build_dir, test)], env=env)

    params = gpt_parameters(args.layers, args.d_model, args.vocab, args.seq_len)
    flops = matmul_flops_per_token(args.layers, args.d_model, args.vocab, args.seq_len)
    precisions = [p for p in args.precisions.split(",") if p]
    stage_counts = [int(p) for p in args.stages.split(",") if p]
    accumulations = [int(a) for a in str(args.accumulation).split(",") if a] or [1]
    # (stages, accumulation) of the paci runs; eager at every accumulation of P = 1.
    paci_runs = [(stages, a) for stages in stage_counts
                 for a in (accumulations if stages == 1 else [max(2, accumulations[0])])]
    eager_accumulations = sorted({a for stages, a in paci_runs if stages == 1}
                                 or {accumulations[0]})

    def eager_key(precision, accumulation):
        return precision if accumulation == 1 else "%s a=%d" % (precision, accumulation)
    print("GPT: %d layers, d_model %d, %.0f M parameters, micro-batch %d x %d tokens; "
          "%.2f GFLOP per token in matmuls" % (args.layers, args.d_model, params / 1e6,
                                               args.micro_batch, args.seq_len, flops / 1e9))
    # The file is committed: paths inside the checkout are recorded relative to
    # it, others by their last name only.
    def recorded(path):
        if not path:
            return path
        if os.path.abspath(path).startswith(ROOT + os.sep):
            return os.path.relpath(path, ROOT)
        return "<outside the checkout>/" + os.path.basename(os.path.normpath(path))

    config = {k: recorded(v) if k in ("build_dir", "out", "deps_prefix") else v
              for k, v in vars(args).items()}
    results = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "cuda": torch.version.cuda, "parameters": params, "flops_per_token": flops,
               "flops_note": "6 x matmul parameters + 6 x layers x seq x d_model (causal attention)",
               "peak_tflops": args.peak_tflops, "config": config,
               "eager_optimizer": "torch.optim.AdamW(%s)" % (
                   "fused=True" if eager_optimizer_kind(args) == "fused" else "foreach=True"),
               "eager": {}, "paci": [], "errors": []}
    print("eager optimizer: %s (paci on this PyTorch: %s)" % (
        results["eager_optimizer"],
        "at::_fused_adamw_" if int(torch.__version__.split(".")[0]) >= 2 else "at::_foreach_*"),
        flush=True)
    try:
        results["measured_matmul_tflops"] = matmul_rate()
        print("bf16 matmul 8192^3: %.0f TFLOP/s (--peak-tflops %.0f)" % (
            results["measured_matmul_tflops"], args.peak_tflops), flush=True)
    except Exception as e:
        results["errors"].append("matmul rate: %r" % e)

    def mfu(tokens_per_second):
        if not tokens_per_second:
            return None, None
        tflops = tokens_per_second * flops / 1e12
        return tflops, tflops / args.peak_tflops

    def save():
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)

    for accumulation in eager_accumulations:
        for precision in precisions:
            key = eager_key(precision, accumulation)
            try:
                eager = eager_baseline(args, precision, accumulation)
                eager["tflops"], eager["peak_fraction"] = mfu(eager["tokens_per_second"])
                results["eager"][key] = eager
                print("eager a=%d %s: %.4f s per step (optimizer %.4f s), %.0f tokens/s, "
                      "%.0f TFLOP/s (%.0f%% of peak), %.1f GiB" % (
                          accumulation, precision, eager["step_seconds"],
                          eager["optimizer_seconds"], eager["tokens_per_second"],
                          eager["tflops"], 100 * eager["peak_fraction"],
                          eager["peak_memory_bytes"] / 2**30), flush=True)
            except Exception as e:  # e.g. out of memory: the paci runs still go
                results["errors"].append("eager a=%d %s: %r" % (accumulation, precision, e))
                print("eager a=%d %s failed: %r" % (accumulation, precision, e), flush=True)
            save()

    with tempfile.TemporaryDirectory(prefix="paci-gpu-") as workdir:
        for stages, accumulation in paci_runs:
            for precision in precisions:
                try:
                    run = paci_run(args, env, stages, precision, accumulation, workdir)
                except Exception as e:
                    results["errors"].append("paci P=%d a=%d %s: %r" % (
                        stages, accumulation, precision, e))
                    print("paci P=%d a=%d %s failed: %r" % (stages, accumulation, precision, e),
                          flush=True)
                    save()
                    continue
                run["tflops"], run["peak_fraction"] = mfu(run["steady_tokens_per_second"])
                # Against eager at the same accumulation (P = 1), else eager's first.
                eager = results["eager"].get(eager_key(precision, accumulation)) or \
                    results["eager"].get(eager_key(precision, eager_accumulations[0]))
                if eager:
                    run["eager_baseline"] = eager_key(precision, eager["accumulation"])
                if eager and run["steady_tokens_per_second"]:
                    run["vs_eager"] = run["steady_tokens_per_second"] / eager["tokens_per_second"]
                    # Eager's time for this stage's share: its seconds per token, times the
                    # tokens of a paci step, over the P stages.
                    share = eager["step_seconds"] / eager["tokens_per_step"] * run["tokens_per_step"] / stages
                    for stage in run["per_stage"]:
                        stage["eager_share_seconds"] = share
                        stage["vs_eager"] = share / stage["busy_seconds_per_step"] \
                            if stage["busy_seconds_per_step"] else None
                results["paci"].append(run)
                save()

    print("\n%-30s %10s %12s %9s %9s %8s" % ("run", "step s", "tokens/s", "vs eager",
                                            "TFLOP/s", "of peak"))
    for key, eager in results["eager"].items():
        print("%-30s %10.4f %12.0f %9s %9.0f %7.0f%%" % (
            "PyTorch eager a=%d %s" % (eager["accumulation"], eager["precision"]),
            eager["step_seconds"], eager["tokens_per_second"],
            "1.00x", eager["tflops"], 100 * eager["peak_fraction"]))
    for run in results["paci"]:
        label = "paci P=%d a=%d %s" % (run["stages"], run["accumulation"], run["precision"])
        tps = run["steady_tokens_per_second"]
        print("%-30s %10s %12s %9s %9s %8s" % (
            label, "%.4f" % run["steady_step_seconds"] if run["steady_step_seconds"] else "-",
            "%.0f" % tps if tps else "-",
            "%.2fx" % run["vs_eager"] if run.get("vs_eager") else "-",
            "%.0f" % run["tflops"] if run["tflops"] else "-",
            "%.0f%%" % (100 * run["peak_fraction"]) if run["peak_fraction"] else "-"))
        for stage in run["per_stage"]:
            print("    stage %d: busy %.4f s per step, idle %.1f s in all%s" % (
                stage["stage"], stage["busy_seconds_per_step"], stage["idle_seconds"],
                ", %.2fx eager's share" % stage["vs_eager"] if stage.get("vs_eager") else ""))
    for error in results["errors"]:
        print("error:", error)
    print("\nwrote", args.out)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
