#!/usr/bin/env python3
"""paci beside PyTorch 2's own pipeline parallelism, on the same GPT, in one run.

The peers, written as their users write them: torch.distributed.pipelining's
PipelineStage and schedules, one process per stage (torchrun, Gloo, the CPU,
one thread each), P = 2, under every schedule the library offers that runs
here: ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B and
ScheduleLoopedBFS (2 chunks per stage), ScheduleInterleavedZeroBubble (2
chunks), ScheduleZBVZeroBubble and ScheduleDualPipeV (2 chunks in a V); and
PyTorch eager, the model unsplit in one process, as the P = 1 peer. Then
paci's PACI and 1f1b-flush at P = 2 (pacictl train).

All train the same GPT (paci's: pre-LN, GELU, learned positions, untied head,
GPT-2 initialisation), on the same corpus with the same character vocabulary
(the corpus's code points, sorted; the embedding has --vocab rows), the same
micro-batch (--micro_batch sequences of --seq_len), global batch (a = --a
micro-batches per optimizer step: the schedules' n_microbatches), optimizer
(AdamW, betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on matrices, linear
warm-up over 5 % of the steps then cosine to 0.1 of --lr) and number of steps.
Both splits cut whole blocks evenly, the head on the last stage (paci's
`partition: even`). The peers draw their training windows uniformly over the
first 95 % of the tokens (paci's split) from a seeded generator; every run's
validation loss is computed the same way at the end, by paci for its runs and
here for the peers: the peers' trained stages are put back together in one
process and evaluated on --eval_sequences windows spread evenly over the last
5 %.

Reports tokens/s (training tokens over the training loop's wall time after its
first step, which holds process start-up, the pipeline's fill and first-touch
page faults for every kind of run alike: paci's from its last stage's step
times, the peers' and eager's from their loops' clocks), the
ratio to paci PACI, the final train loss (the last step's mean) and validation
loss, and the peak resident memory (ru_maxrss) of each process. The idle
fraction is paci's own measure (its stages' traces); the library exposes none.
A schedule that fails to run is reported with its error, not hidden.

Writes --out/peer_pipelining.md and peer_pipelining.json (default bench/results/);
with several --seeds (each seed sets the models' initialisation and the sample
order of every run), peer_pipelining_seeds.md and .json: each run once per
seed, its median tokens/s, each seed's validation loss, and PACI's mean
validation loss against each synchronous run's seed-to-seed spread.

  build/python-env/bin/python bench/peer_pipelining.py [--steps 150] [--seeds 1,2,3]
      [--only paci,gpipe] [--build build]

Needs a built tree (scripts/build.sh: its Python environment has the torch
whose LibTorch paci links) and data/kjv.txt (scripts/kjv-corpus.sh).
"""
import argparse
import functools
import json
import math
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import traceback

from bench_results import write_result
from peer_report import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (key, label, class name, chunks per stage, stage placement)
PEERS = [
    ("gpipe", "torch GPipe", "ScheduleGPipe", 1, "loop"),
    ("1f1b", "torch 1F1B", "Schedule1F1B", 1, "loop"),
    ("interleaved-1f1b", "torch Interleaved1F1B, 2 chunks", "ScheduleInterleaved1F1B", 2, "loop"),
    ("looped-bfs", "torch LoopedBFS, 2 chunks", "ScheduleLoopedBFS", 2, "loop"),
    ("interleaved-zb", "torch InterleavedZeroBubble, 2 chunks", "ScheduleInterleavedZeroBubble", 2,
     "loop"),
    ("zbv", "torch ZBVZeroBubble (V, 2 chunks)", "ScheduleZBVZeroBubble", 2, "v"),
    ("dualpipev", "torch DualPipeV (V, 2 chunks)", "ScheduleDualPipeV", 2, "v"),
]

PACI_SPEC = """
name: peer-{tag}
model: {{vocab_size: {vocab}, num_layers: {layers}, d_model: {d_model}, num_heads: {heads},
        seq_len: {seq_len}, init_seed: {init_seed}}}
pipeline: {{num_stages: {stages}, schedule: {schedule}, accumulation: {a}, micro_batch_size: {mbs},
            partition: "{partition}"{method}}}
optimizer: {{lr: {lr}, warmup_fraction: 0.05}}
training: {{steps: {steps}, eval_interval: {steps}, eval_micro_batches: {eval_mb}}}
data: {{corpus_path: {corpus}, seed: {seed}}}
runtime: {{threads_per_stage: 1, precision: {precision}}}
"""


def autocast(cfg):
    """bf16 autocast on the CPU for --precision bf16-autocast (paci's runtime.precision of
    the same name); a context that does nothing for fp32."""
    import torch
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.get("precision") == "bf16-autocast")


def log(message):
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the model

def build_model_classes():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d_model, heads):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d_model)
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.attn_proj = nn.Linear(d_model, d_model)
            self.ln2 = nn.LayerNorm(d_model)
            self.fc = nn.Linear(d_model, 4 * d_model)
            self.proj = nn.Linear(4 * d_model, d_model)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).permute(
                2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, D))
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class Chunk(nn.Module):
        """Blocks [first, end) of the GPT, with the embeddings and/or the head where it
        holds them. Parameter names are the whole model's, so chunks merge back."""

        def __init__(self, cfg, first, end):
            super().__init__()
            self.has_embedding, self.has_head = first == 0, end == cfg["layers"]
            if self.has_embedding:
                self.wte = nn.Embedding(cfg["vocab"], cfg["d_model"])
                self.wpe = nn.Embedding(cfg["seq_len"], cfg["d_model"])
            self.h = nn.ModuleDict({str(b): Block(cfg["d_model"], cfg["heads"])
                                    for b in range(first, end)})
            if self.has_head:
                self.ln_f = nn.LayerNorm(cfg["d_model"])
                self.head = nn.Linear(cfg["d_model"], cfg["vocab"], bias=False)

        def forward(self, x):
            if self.has_embedding:
                x = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
            for block in self.h.values():
                x = block(x)
            if self.has_head:
                x = self.head(self.ln_f(x))
            return x

    def init_gpt2(module, layers, seed):
        """GPT-2's scheme, as paci's: N(0, 0.02), residual projections scaled by
        1/sqrt(2 * layers), zero biases, unit LayerNorm gains."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in module.named_parameters():
                if ".ln" in name or name.startswith("ln"):
                    p.fill_(1.0 if name.endswith("weight") else 0.0)
                elif name.endswith("bias"):
                    p.zero_()
                else:
                    std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                    p.copy_(torch.randn(p.shape, generator=gen) * std)

    return Chunk, init_gpt2


def cuts(layers, pieces):
    """Whole blocks, evenly: [(first, end)] for each of `pieces` chunks."""
    bounds = [round(i * layers / pieces) for i in range(pieces + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def make_optimizer(modules, cfg):
    import torch
    decay, rest = [], []
    for m in modules:
        for p in m.parameters():
            (decay if p.dim() >= 2 else rest).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(0.9, 0.95), eps=1e-8)
    steps, warmup = cfg["steps"], math.ceil(0.05 * cfg["steps"])

    def factor(step):  # paci's LrAt: linear warm-up, cosine to min_lr_ratio 0.1
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, steps - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


# ---------------------------------------------------------------- the data

def load_tokens(corpus, vocab):
    import torch
    with open(corpus, encoding="utf-8") as f:
        text = f.read()
    import numpy as np
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    chars = np.unique(codes)  # sorted code points: paci's character vocabulary
    if len(chars) > vocab:
        sys.exit("the corpus has %d distinct characters, more than --vocab %d" % (len(chars), vocab))
    tokens = torch.from_numpy(np.searchsorted(chars, codes).astype(np.int64))
    split = int(len(tokens) * 0.95)
    return tokens[:split], tokens[split:]


def sample_batch(train, n, seq_len, gen):
    import torch
    starts = torch.randint(0, len(train) - seq_len - 1, (n,), generator=gen)
    x = torch.stack([train[s:s + seq_len] for s in starts])
    y = torch.stack([train[s + 1:s + seq_len + 1] for s in starts])
    return x, y


def validation_loss(modules_state, cfg, validation):
    """The whole model from the chunks' state dicts, on windows spread over the tail."""
    import torch
    import torch.nn.functional as F
    Chunk, _ = build_model_classes()
    model = Chunk(cfg, 0, cfg["layers"])
    model.load_state_dict(modules_state)
    model.eval()
    n, T = cfg["eval_sequences"], cfg["seq_len"]
    stride = (len(validation) - T - 1) // n
    losses = []
    with torch.no_grad():
        for start in range(0, n, cfg["micro_batch"]):
            rows = range(start, min(n, start + cfg["micro_batch"]))
            x = torch.stack([validation[r * stride:r * stride + T] for r in rows])
            y = torch.stack([validation[r * stride + 1:r * stride + T + 1] for r in rows])
            logits = model(x)
            losses.append(F.cross_entropy(logits.reshape(-1, cfg["vocab"]), y.reshape(-1)).item())
    return sum(losses) / len(losses)


# ---------------------------------------------------------------- one peer run

def worker_main(args):
    """One rank of a torchrun job: its stage(s) of the schedule, trained for --steps."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed import pipelining

    torch.set_num_threads(1)
    cfg = json.loads(args.config)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    Chunk, init_gpt2 = build_model_classes()
    peer = next(p for p in PEERS if p[0] == args.worker)
    _, _, cls_name, chunks_per_stage, placement = peer
    pieces = world * chunks_per_stage
    if placement == "loop":
        mine = [rank + i * world for i in range(chunks_per_stage)]
    else:  # V: rank r holds chunk r and chunk 2P-1-r
        mine = [rank, pieces - 1 - rank]
    bounds = cuts(cfg["layers"], pieces)
    modules = []
    stages = []
    for index in mine:
        first, end = bounds[index]
        module = Chunk(cfg, first, end)
        init_gpt2(module, cfg["layers"], cfg["seed"] * 1000 + index)
        modules.append(module)
        stages.append(pipelining.PipelineStage(module, index, pieces, torch.device("cpu")))

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, cfg["vocab"]), target.reshape(-1))

    if placement == "v":
        # torch 2.11's first step warms every stage's links up with a send to the next stage
        # and a receive from the previous one, also where both stages are this rank (the
        # middle of a V); Gloo has no pair to itself and fails ("Pair is not connected").
        # Those self-sends only warm a link that needs none, so they are left out.
        from torch.distributed.pipelining import stage as stage_module
        base = stage_module._PipelineStageBase
        warm_up = base._get_init_p2p_neighbors_ops
        base._get_init_p2p_neighbors_ops = lambda self: [
            op for op in warm_up(self) if op.peer != dist.get_rank()]
    schedule_cls = getattr(pipelining, cls_name)
    a = cfg["a"]
    if chunks_per_stage == 1:
        schedule = schedule_cls(stages[0], n_microbatches=a, loss_fn=loss_fn)
    else:
        schedule = schedule_cls(stages, n_microbatches=a, loss_fn=loss_fn)
    optimizer, lr = make_optimizer(modules, cfg)
    holds_first = 0 in mine
    holds_last = pieces - 1 in mine
    train, _ = load_tokens(cfg["corpus"], cfg["vocab"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    losses_per_step = []
    dist.barrier()
    started = None
    for step in range(cfg["steps"]):
        if step == 1:  # the clock runs from the end of the first step (training_rate)
            dist.barrier()
            started = time.monotonic()
        # Every rank draws the batch (same generator), so the first and last
        # stages agree on it; the others ignore it.
        x, y = sample_batch(train, a * cfg["micro_batch"], cfg["seq_len"], gen)
        optimizer.zero_grad(set_to_none=True)
        losses = []
        kwargs = {}
        if holds_last:
            kwargs.update(target=y, losses=losses)
        with autocast(cfg):
            if holds_first:
                schedule.step(x, **kwargs)
            else:
                schedule.step(**kwargs)
        optimizer.step()
        lr.step()
        if holds_last:
            losses_per_step.append(sum(float(l) for l in losses) / len(losses))
    dist.barrier()
    wall = time.monotonic() - started
    state = {}
    for module in modules:
        state.update(module.state_dict())
    torch.save(state, os.path.join(args.workdir, "rank%d.pt" % rank))
    with open(os.path.join(args.workdir, "rank%d.json" % rank), "w") as f:
        json.dump(dict(rank=rank, chunks=mine, wall_seconds=wall,
                       peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                       train_losses=losses_per_step), f)
    dist.destroy_process_group()


def training_rate(cfg, steps, seconds):
    """Training tokens/s of `steps` steps in `seconds`: every run is timed from the end of its
    first step to the end of its last, so process start-up, the first step's page faults and a
    pipeline's fill weigh on none of them (they would weigh most on the fastest runs)."""
    return steps * cfg["a"] * cfg["micro_batch"] * cfg["seq_len"] / seconds


def paci_training_rate(cfg, summary):
    """training_rate of a paci run, from its summary's train-loss points (the last stage's
    seconds since its start at the end of each step): the first point to the last."""
    points = summary["train_loss"]
    if len(points) < 2:
        raise ValueError("paci reported fewer than two steps: no rate after the first")
    first, last = points[0], points[-1]
    replicas = max(1, int(summary.get("data_parallel", 1)))
    return replicas * training_rate(cfg, last["step"] - first["step"], last["seconds"] - first["seconds"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_peer(args, cfg, key, workdir):
    import torch
    run_dir = os.path.join(workdir, key)
    os.makedirs(run_dir, exist_ok=True)  # again in another round (bench/cpu_limits.py --rounds)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--master_addr=127.0.0.1", "--master_port=%d" % free_port(), os.path.abspath(__file__),
           "--worker=" + key, "--workdir=" + run_dir, "--config=" + json.dumps(cfg)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=torch_environment(args))
    if proc.returncode != 0:  # the first rank's exception, as torchrun prints it
        errors = re.findall(r"^\[rank\d+\]: (\w+(?:Error|Exception): .*)$", proc.stdout, re.M)
        return dict(error=(errors[0] if errors else proc.stdout[-300:]).strip()[:300])
    ranks = []
    state = {}
    for r in range(2):
        with open(os.path.join(run_dir, "rank%d.json" % r)) as f:
            ranks.append(json.load(f))
        state.update(torch.load(os.path.join(run_dir, "rank%d.pt" % r)))
    _, validation = load_tokens(cfg["corpus"], cfg["vocab"])
    train_losses = next(r["train_losses"] for r in ranks if r["train_losses"])
    wall = max(r["wall_seconds"] for r in ranks)
    return dict(tokens_per_second=training_rate(cfg, cfg["steps"] - 1, wall),
                final_train_loss=train_losses[-1], final_validation_loss=validation_loss(
                    state, cfg, validation),
                peak_rss_mb=[round(r["peak_rss_mb"], 1) for r in ranks], wall_seconds=wall)


def torch_environment(args):
    """The environment torch's processes run in: one thread each, and the allocator paci's worker
    links (tcmalloc, worker/CMakeLists.txt) preloaded, so that both sides allocate alike and the
    ratios compare the engines. With glibc's malloc torch eager ran 28 % slower at vocabulary
    32,768 (docs/benchmarks.md, "The allocator")."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    allocator = worker_allocator(args.build)
    if allocator:
        env["LD_PRELOAD"] = allocator
    return env


@functools.lru_cache(maxsize=None)
def worker_allocator(build):
    """The path of the tcmalloc library paci's worker loads (ldd), or None when it has none."""
    out = subprocess.run(["ldd", os.path.join(build, "worker", "paci_worker")],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    found = re.search(r"libtcmalloc\S* => (\S+)", out)
    return found.group(1) if found else None


def allocator_label(build):
    """The reports' words for the allocator both sides ran with."""
    allocator = worker_allocator(build)
    return ("tcmalloc (%s) for paci's workers and torch's processes alike" % os.path.basename(allocator)
            if allocator else "glibc's malloc")


def run_eager(args, cfg):
    """The unsplit model, one process (torch_environment), one thread: a micro-batches
    accumulated per step."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker=eager", "--config=" + json.dumps(cfg)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=torch_environment(args))
    if proc.returncode != 0:
        return dict(error=proc.stderr.strip()[-300:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def eager_main(cfg):
    """run_eager's process: trains, then prints its result as one line of JSON."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    Chunk, init_gpt2 = build_model_classes()
    model = Chunk(cfg, 0, cfg["layers"])
    init_gpt2(model, cfg["layers"], cfg["seed"] * 1000)
    optimizer, lr = make_optimizer([model], cfg)
    train, validation = load_tokens(cfg["corpus"], cfg["vocab"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    started = None
    for step in range(cfg["steps"]):
        if step == 1:  # the clock runs from the end of the first step (training_rate)
            started = time.monotonic()
        x, y = sample_batch(train, cfg["a"] * cfg["micro_batch"], cfg["seq_len"], gen)
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for xm, ym in zip(x.chunk(cfg["a"]), y.chunk(cfg["a"])):
            with autocast(cfg):
                loss = F.cross_entropy(model(xm).float().reshape(-1, cfg["vocab"]), ym.reshape(-1))
            (loss / cfg["a"]).backward()
            total += loss.item()
        optimizer.step()
        lr.step()
    wall = time.monotonic() - started
    print(json.dumps(dict(
        tokens_per_second=training_rate(cfg, cfg["steps"] - 1, wall),
        final_train_loss=total / cfg["a"],
        final_validation_loss=validation_loss(model.state_dict(), cfg, validation),
        peak_rss_mb=[round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)],
        wall_seconds=wall)))


def run_paci(args, cfg, schedule, workdir, automatic=False, stages=2, tag=None, partition="even"):
    """pacictl train: plain (drift_correction none, no warm-up), or with the schedule's
    automatic default (both fields left out). `partition` is pipeline.partition: "even" (whole
    blocks, as the peers cut) or "balanced" (paci's default)."""
    tag = tag or schedule + ("-auto" if automatic else "")
    spec = os.path.join(workdir, "paci-%s.yaml" % tag)
    with open(spec, "w") as f:
        f.write(PACI_SPEC.format(tag=tag, vocab=cfg["vocab"], layers=cfg["layers"],
                                 d_model=cfg["d_model"], heads=cfg["heads"], seq_len=cfg["seq_len"],
                                 schedule=schedule, a=cfg["a"], mbs=cfg["micro_batch"], stages=stages,
                                 partition=partition,
                                 precision=cfg.get("precision", "fp32"),
                                 method="" if automatic else ", drift_correction: none, warmup_steps: 0",
                                 lr=cfg["lr"], steps=cfg["steps"],
                                 eval_mb=cfg["eval_sequences"] // cfg["micro_batch"],
                                 corpus=cfg["corpus"], seed=cfg["seed"],
                                 init_seed=1233 + cfg["seed"]))  # seed 1: paci's default 1234
    summary_path = spec + ".summary.json"
    proc = subprocess.Popen([os.path.join(args.build, "tools", "pacictl"), "train", spec,
                             "--summary=" + summary_path],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.communicate()[0]
    if proc.returncode != 0:
        return dict(error=output[-300:])
    with open(summary_path) as f:
        s = json.load(f)
    idle = [st.get("idle_fraction") for st in s.get("stages", [])]
    return dict(tokens_per_second=paci_training_rate(cfg, s), run_tokens_per_second=s["tokens_per_second"],
                final_train_loss=s["final_train_loss"],
                final_validation_loss=s["final_validation_loss"],
                peak_rss_mb=[round(int(st.get("peak_rss_bytes", 0)) / 2**20, 1)
                             for st in s.get("stages", [])], idle_fraction=idle,
                cut=s.get("partition_boundaries", []),
                head_split=int(s.get("partition_head_split", 0)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d_model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--micro_batch", type=int, default=4)
    parser.add_argument("--a", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval_sequences", type=int, default=64)
    parser.add_argument("--seeds", default="1",
                        help="comma-separated seeds (model initialisation and sample order); "
                             "each run once per seed, the table gives the spread")
    parser.add_argument("--only", default="", help="comma-separated run keys (default: all)")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--corpus", default=os.path.join(ROOT, "data", "kjv.txt"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    parser.add_argument("--name", default="", help="the results' file name (default "
                        "peer_pipelining, or peer_pipelining_seeds with several seeds)")
    args = parser.parse_args()
    if args.worker == "eager":
        return eager_main(json.loads(args.config))
    if args.worker:
        return worker_main(args)
    if args.steps < 2:
        parser.error("--steps must be at least 2: every run is timed after its first step")

    import torch
    seeds = [int(x) for x in args.seeds.split(",")]
    base_cfg = dict(steps=args.steps, vocab=args.vocab, layers=args.layers, d_model=args.d_model,
                    heads=args.heads, seq_len=args.seq_len, micro_batch=args.micro_batch, a=args.a,
                    lr=args.lr, eval_sequences=args.eval_sequences,
                    corpus=os.path.abspath(args.corpus))
    only = set(filter(None, args.only.split(",")))
    runs = [("paci", "paci PACI"), ("paci-auto", "paci PACI, automatic default"),
            ("paci-1f1b-flush", "paci 1f1b-flush"),
            ("eager", "torch eager, unsplit (P = 1)")] + [(k, l) for k, l, *_ in PEERS]
    runs = [(k, l) for k, l in runs if not only or k in only]
    results = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as workdir:
        for seed in seeds:  # seed by seed, so a slow spell of the machine hits every run alike
            cfg = dict(base_cfg, seed=seed)
            seed_dir = os.path.join(workdir, "seed%d" % seed)
            os.makedirs(seed_dir)
            for key, label in runs:
                log("%-40s seed %d ..." % (label, seed))
                try:
                    if key in ("paci", "paci-auto"):
                        r = run_paci(args, cfg, "paci", seed_dir, automatic=key == "paci-auto")
                    elif key == "paci-1f1b-flush":
                        r = run_paci(args, cfg, "1f1b-flush", seed_dir)
                    elif key == "eager":
                        r = run_eager(args, cfg)
                    else:
                        r = run_peer(args, cfg, key, seed_dir)
                except Exception:  # a peer that cannot run is a result, not a crash
                    r = dict(error=traceback.format_exc().strip().splitlines()[-1][:300])
                r.update(key=key, label=label, seed=seed)
                log("  " + (r["error"] if "error" in r else
                            "%.0f tokens/s, train %.3f, validation %.3f" % (
                                r["tokens_per_second"], r["final_train_loss"],
                                r["final_validation_loss"])))
                results.append(r)

    synchronous = {"paci-1f1b-flush", "eager"} | {k for k, *_ in PEERS}
    text = report(args, seeds, runs, results, synchronous, torch.__version__,
                  allocator_label(args.build), time.monotonic() - began)
    print(text)
    write_result(args.out, args.name or ("peer_pipelining" if len(seeds) == 1 else
                                         "peer_pipelining_seeds"),
                 dict(config=dict(base_cfg, seeds=seeds,
                                  corpus=os.path.relpath(base_cfg["corpus"], ROOT)),
                      runs=results), text.rstrip("\n"))


if __name__ == "__main__":
    main()
