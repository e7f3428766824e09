#!/usr/bin/python3
"""Architectures: GPT-2 against Llama at P = 2, and a ~100M-parameter model's way out to
Hugging Face and back in, beside transformers' own.

1. Trains the same-width, same-depth model (4 layers, d_model 256, 4 heads, seq_len
   128, vocabulary 256, micro-batches of 4 sequences, a = 4, PACI P = 2, one thread per
   stage, the same data, seed and steps) as

     gpt2    model.architecture: gpt2 (LayerNorm, learned positions, GELU MLP 4 x d_model)
     llama   model.architecture: llama, num_kv_heads = num_heads / 2, its default
             ffn_hidden_size (8/3 x d_model) and rope_theta (RMSNorm, rotary, SwiGLU, GQA)

   and prints tokens/s, the ratio llama / gpt2, each stage's peak resident memory (the
   run summary's), the final train and validation losses and the parameter count.

2. Makes a checkpoint of a Llama of d_model 768, 12 layers, 12 heads (6 key/value heads)
   and a vocabulary of 14,400 (99,994,368 parameters; the count is printed from the
   exported safetensors and from transformers) with a 1-step P = 1 job, then times

     export   `pacictl export --format=hf --checkpoint=DIR --out=FOLDER` (the whole command)
              against transformers' save_pretrained of the model it loaded from FOLDER
     import   a 1-step P = 2 job with checkpoint.init_from: FOLDER against the same job
              without it (the difference of their wall seconds is the import's cost), and
              per stage from its worker's log lines (from the assignment to "starts from
              the weights of", less the same span to the cut's line without init_from),
              against transformers' from_pretrained of FOLDER

   with build/python-env's transformers (the pinned one the tests use) in one process,
   its imports (torch, transformers, the model class's module) timed apart, and prints
   paci / transformers and the folders' sizes.

Every run's other load (the CPU, in cores, that other processes used meanwhile) is
measured as in bench/stage_balance.py; a run during which it exceeded --max_other_load is
repeated (up to --attempts tries) and the load of the kept try is reported.

Writes --out/architectures.md and architectures.json (default bench/results/).

  /usr/bin/python3 bench/architectures.py [--steps 80] [--build build]

Needs a built tree (scripts/build.sh) and build/python-env (scripts/python-env.sh build);
trains on data/kjv.txt (scripts/kjv-corpus.sh) when it is there, else on the Genesis slice
of tests/data.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from bench_results import peak_rss_mb, write_result
from cpu_load import children_cpu_seconds, cpu_busy_seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN_SPEC = """
name: arch-{tag}
model: {{architecture: {arch}, vocab_size: {vocab}, num_layers: {layers}, d_model: {d_model},
         num_heads: {heads}{kv}, seq_len: 128}}
pipeline: {{num_stages: 2, schedule: paci, accumulation: 4, micro_batch_size: 4, drift_correction: none, warmup_steps: 0}}
optimizer: {{lr: 1e-3, warmup_fraction: 0.05}}
training: {{steps: {steps}, eval_interval: {steps}, eval_micro_batches: 4}}
data: {{corpus_path: {corpus}, seed: 1}}
runtime: {{threads_per_stage: 1, precision: fp32}}
"""

# The ~100M-parameter Llama: one step of one micro-batch of 64 tokens, so that the job's
# time is mostly its start (and, with init_from, the import).
BIG_SPEC = """
name: arch-{tag}
model: {{architecture: llama, vocab_size: {vocab}, num_layers: {layers}, d_model: {d_model},
         num_heads: {heads}, num_kv_heads: {kv}, seq_len: 64}}
pipeline: {{num_stages: {P}, schedule: paci, accumulation: 1, micro_batch_size: 1, drift_correction: none, warmup_steps: 0}}
optimizer: {{lr: 1e-4}}
training: {{steps: 1, eval_interval: 1, eval_micro_batches: 1}}
data: {{corpus_path: {corpus}, seed: 1}}
runtime: {{threads_per_stage: 1, precision: fp32}}
{checkpoint}
"""

# transformers' side, in one process of build/python-env: argv folder, out.
HF_BASELINE = r"""
import json, sys, time
began = time.monotonic()
import torch, transformers
folder, out = sys.argv[1], sys.argv[2]
# transformers imports a model's module on first use: done here, outside the timing.
getattr(transformers, transformers.AutoConfig.from_pretrained(folder).architectures[0])
rss = lambda: [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")][0]
rss_before = rss()
imported = time.monotonic()
model, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
loaded = time.monotonic()
rss_loaded = rss()
# The safetensors are memory-mapped: a first read of every weight brings them in.
with torch.no_grad():
    sum(float(p.abs().sum()) for p in model.parameters())
touched = time.monotonic()
model.save_pretrained(out)
saved = time.monotonic()
del model
again = time.monotonic()
model = transformers.AutoModelForCausalLM.from_pretrained(folder)
print(json.dumps(dict(
    import_seconds=imported - began, from_pretrained_seconds=loaded - imported,
    read_weights_seconds=touched - loaded, save_pretrained_seconds=saved - touched,
    rss_before_from_pretrained_mb=rss_before / 1024, rss_after_from_pretrained_mb=rss_loaded / 1024,
    rss_after_reading_weights_mb=rss() / 1024,
    from_pretrained_again_seconds=time.monotonic() - again, parameters=model.num_parameters(),
    model_class=type(model).__name__, dtype=str(next(model.parameters()).dtype),
    missing_keys=len(info["missing_keys"]), unexpected_keys=len(info["unexpected_keys"]),
    torch_threads=torch.get_num_threads(), transformers=transformers.__version__,
    torch=torch.__version__)))
"""

# A relayed worker log line: "[worker 1] I0102 03:04:05.678901 ..." (glog; the year
# may lead the date).
LOG_LINE = re.compile(r"^\[\w+ (\d+)\] [IWEF](?:\d{4})?\d{4} (\d\d):(\d\d):(\d\d(?:\.\d+)?) ")


def log(message):
    print(message, file=sys.stderr, flush=True)


def parameter_count(arch, vocab, layers, d_model, heads, kv_heads, ffn, seq_len):
    """paci's parameters (worker/model/gpt.cc): untied head without a bias."""
    kv_width = d_model // heads * kv_heads
    if arch == "llama":
        block = (d_model * (d_model + 2 * kv_width) + d_model * d_model  # qkv, proj
                 + d_model * 2 * ffn + ffn * d_model + 2 * d_model)      # gate/up, down, 2 norms
        return 2 * vocab * d_model + layers * block + d_model
    block = (d_model * 3 * d_model + 3 * d_model + d_model * d_model + d_model
             + d_model * ffn + ffn + ffn * d_model + d_model + 4 * d_model)
    return vocab * d_model + seq_len * d_model + layers * block + 2 * d_model + vocab * d_model


def default_ffn(arch, d_model):
    """common/job_spec.cc's DefaultFfnHiddenSize."""
    if arch != "llama":
        return 4 * d_model
    return ((8 * d_model + 2) // 3 + 7) // 8 * 8


def measured(args, label, fn):
    """fn() as bench/stage_balance.py times a run: repeated while other load exceeds the limit."""
    for attempt in range(1, args.attempts + 1):
        busy, ours, started = cpu_busy_seconds(), children_cpu_seconds(), time.monotonic()
        log("%-34s try %d ..." % (label, attempt))
        result = fn()
        wall = time.monotonic() - started
        # CPU the machine spent on anything but this run, in cores.
        foreign = ((cpu_busy_seconds() - busy) - (children_cpu_seconds() - ours)) / wall
        result.update(other_load_cores=foreign, attempts=attempt, wall_seconds=wall, label=label)
        log("  %.1f s, other load %.2f cores" % (wall, foreign))
        if foreign <= args.max_other_load:
            break
        log("  other work used %.2f cores; %s" % (
            foreign, "running it again" if attempt < args.attempts else "keeping it, marked"))
    return result


def run_job(args, spec_text, tag):
    """pacictl train: (summary, its output lines)."""
    spec = os.path.join(args.workdir, tag + ".yaml")
    with open(spec, "w") as f:
        f.write(spec_text)
    summary_path = spec + ".summary.json"
    proc = subprocess.run([args.pacictl, "train", spec, "--summary=" + summary_path],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("run %s failed:\n%s" % (tag, proc.stdout[-4000:]))
    with open(summary_path) as f:
        return json.load(f), proc.stdout.splitlines()


def train_architecture(args, arch):
    kv = ", num_kv_heads: %d" % (args.heads // 2) if arch == "llama" else ""
    tag = "%s-%d" % (arch, int(time.monotonic() * 1000))
    summary, _ = run_job(args, TRAIN_SPEC.format(
        tag=tag, arch=arch, vocab=args.vocab, layers=args.layers, d_model=args.d_model,
        heads=args.heads, kv=kv, steps=args.steps, corpus=args.corpus), tag)
    ffn = default_ffn(arch, args.d_model)
    return dict(architecture=arch, tokens_per_second=summary["tokens_per_second"],
                final_train_loss=summary.get("final_train_loss"),
                final_validation_loss=summary.get("final_validation_loss"),
                peak_rss_mb=peak_rss_mb(summary), job_wall_seconds=summary.get("wall_seconds"),
                cut=summary.get("partition_boundaries", []),
                units=[st.get("units", "?") for st in summary.get("stages", [])],
                idle_fraction=[st.get("idle_fraction", 0) for st in summary.get("stages", [])],
                num_kv_heads=args.heads // 2 if arch == "llama" else args.heads,
                ffn_hidden_size=ffn,
                parameters=parameter_count(arch, args.vocab, args.layers, args.d_model, args.heads,
                                           args.heads // 2 if arch == "llama" else args.heads,
                                           ffn, 128))


def big_spec(args, tag, P, checkpoint=""):
    return BIG_SPEC.format(tag=tag, vocab=args.big_vocab, layers=args.big_layers,
                           d_model=args.big_d_model, heads=args.big_heads,
                           kv=args.big_heads // 2, P=P, corpus=args.corpus, checkpoint=checkpoint)


def glog_time(line):
    """The seconds since the epoch of a glog line "I20261203 13:24:40.946734 ..." (local time)."""
    m = re.match(r"^[IWEF](\d{8}) (\d\d:\d\d:\d\d)(\.\d+) ", line)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1) + " " + m.group(2), "%Y%m%d %H:%M:%S")) + float(
        m.group(3))


def log_seconds(lines, marker):
    """{stage: seconds of day} of the first relayed worker line holding `marker`."""
    found = {}
    for line in lines:
        m = LOG_LINE.match(line)
        if m and marker in line and int(m.group(1)) not in found:
            found[int(m.group(1))] = (int(m.group(2)) * 3600 + int(m.group(3)) * 60
                                      + float(m.group(4)))
    return found


def spans(lines, start_marker, end_marker):
    """{stage: seconds from its first `start_marker` line to its first `end_marker` line}."""
    start, end = log_seconds(lines, start_marker), log_seconds(lines, end_marker)
    return {s: (end[s] - start[s]) % 86400 for s in start if s in end}


def import_job(args, with_init, repeat):
    tag = "big-p2-%s-%d" % ("init" if with_init else "fresh", repeat)
    checkpoint = "checkpoint: {init_from: %s}" % args.hf_folder if with_init else ""
    summary, lines = run_job(args, big_spec(args, tag, 2, checkpoint), tag)
    marker = "starts from the weights of" if with_init else " partition="
    setup = spans(lines, "assigned job=", marker)
    return dict(with_init=with_init, job_wall_seconds=summary["wall_seconds"],
                peak_rss_mb=peak_rss_mb(summary),
                # seconds from the stage's assignment to its weights read (with init_from)
                # or to its cut (without: the corpus and the start alone)
                setup_seconds_per_stage=[setup.get(s) for s in sorted(setup)])


def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)
               if os.path.isfile(os.path.join(folder, n)))


def safetensors_parameters(folder):
    """Elements of every tensor in the folder's safetensors files (their headers)."""
    total = 0
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(folder, name), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for key, tensor in header.items():
            if key == "__metadata__":
                continue
            n = 1
            for d in tensor["shape"]:
                n *= d
            total += n
    return total


def big_model(args):
    """Checkpoint, export, import, and transformers beside them."""
    ckpt = os.path.join(args.workdir, "big-checkpoint")
    args.hf_folder = os.path.join(args.workdir, "big-hf")
    expected = parameter_count("llama", args.big_vocab, args.big_layers, args.big_d_model,
                               args.big_heads, args.big_heads // 2,
                               default_ffn("llama", args.big_d_model), 64)
    log("Llama d_model %d, %d layers, %d heads (%d kv), vocab %d: %d parameters" % (
        args.big_d_model, args.big_layers, args.big_heads, args.big_heads // 2, args.big_vocab,
        expected))

    def checkpoint():
        shutil.rmtree(ckpt, ignore_errors=True)  # a try again starts from nothing
        summary, _ = run_job(args, big_spec(args, "big-p1", 1, "checkpoint: {directory: %s}" % ckpt),
                             "big-p1")
        return dict(job_wall_seconds=summary["wall_seconds"])
    made = measured(args, "100M checkpoint (P=1, 1 step)", checkpoint)
    checkpoint_bytes = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(ckpt)
                           for n in names)

    def export():
        started, clock = time.monotonic(), time.time()
        proc = subprocess.run([args.pacictl, "export", "--format=hf", "--checkpoint=" + ckpt,
                               "--out=" + args.hf_folder],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit("export failed:\n%s" % proc.stdout[-4000:])
        # paci_model's two log lines: the checkpoint read, the folder written.
        stamps = [glog_time(line) for line in proc.stdout.splitlines()
                  if "model_main.cc" in line and glog_time(line) is not None]
        split = dict(seconds=seconds)
        if len(stamps) >= 2:
            split.update(read_checkpoint_seconds=stamps[0] - clock,
                         build_and_write_seconds=stamps[-1] - stamps[0])
        return split
    exported = measured(args, "pacictl export --format=hf", export)
    counted = safetensors_parameters(args.hf_folder)
    log("  folder %.0f MB, %d parameters in its safetensors" % (
        folder_bytes(args.hf_folder) / 2**20, counted))

    imports = []
    for repeat in range(args.import_repeats):
        for with_init in (True, False):
            imports.append(measured(args, "P=2 job, %s init_from (%d)" % (
                "with" if with_init else "without", repeat + 1),
                lambda: import_job(args, with_init, repeat)))

    hf_out = os.path.join(args.workdir, "big-transformers")

    def transformers_side():
        proc = subprocess.run([args.python, "-c", HF_BASELINE, args.hf_folder, hf_out],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.exit("transformers failed:\n%s" % proc.stderr[-4000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])
    hf = measured(args, "transformers from/save_pretrained", transformers_side)

    with_init = [r for r in imports if r["with_init"]]
    fresh = [r for r in imports if not r["with_init"]]
    wall_difference = (statistics.median(r["job_wall_seconds"] for r in with_init)
                       - statistics.median(r["job_wall_seconds"] for r in fresh))
    stages = len(with_init[0]["setup_seconds_per_stage"])
    per_stage = []
    for s in range(stages):
        read = [r["setup_seconds_per_stage"][s] for r in with_init
                if len(r["setup_seconds_per_stage"]) > s]
        base = [r["setup_seconds_per_stage"][s] for r in fresh
                if len(r["setup_seconds_per_stage"]) > s]
        if read and base and None not in read + base:
            per_stage.append(statistics.median(read) - statistics.median(base))
    return dict(
        model=dict(architecture="llama", d_model=args.big_d_model, num_layers=args.big_layers,
                   num_heads=args.big_heads, num_kv_heads=args.big_heads // 2,
                   ffn_hidden_size=default_ffn("llama", args.big_d_model),
                   vocab_size=args.big_vocab),
        parameters_expected=expected, parameters_in_safetensors=counted,
        parameters_transformers=hf["parameters"],
        checkpoint=made, checkpoint_mb=checkpoint_bytes / 2**20,
        export=exported, folder_mb=folder_bytes(args.hf_folder) / 2**20,
        transformers_folder_mb=folder_bytes(hf_out) / 2**20,
        folder_files=sorted(os.listdir(args.hf_folder)),
        import_runs=imports, import_wall_difference_seconds=wall_difference,
        import_read_seconds_per_stage=per_stage, transformers=hf)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per training run")
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d_model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--big_vocab", type=int, default=14400)
    parser.add_argument("--big_layers", type=int, default=12)
    parser.add_argument("--big_d_model", type=int, default=768)
    parser.add_argument("--big_heads", type=int, default=12)
    parser.add_argument("--import_repeats", type=int, default=2,
                        help="pairs of P=2 jobs with and without init_from")
    parser.add_argument("--max_other_load", type=float, default=0.2,
                        help="cores other processes may use during a run before it is repeated")
    parser.add_argument("--attempts", type=int, default=2, help="tries per run")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--corpus", default=None,
                        help="default: data/kjv.txt, else tests/data/kjv-genesis.txt")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    args.pacictl = os.path.join(args.build, "tools", "pacictl")
    args.python = os.path.join(args.build, "python-env", "bin", "python")
    if args.corpus is None:
        kjv = os.path.join(ROOT, "data", "kjv.txt")
        args.corpus = kjv if os.path.exists(kjv) else os.path.join(ROOT, "tests", "data",
                                                                    "kjv-genesis.txt")
    args.corpus = os.path.abspath(args.corpus)
    corpus_name = os.path.relpath(args.corpus, ROOT)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="paci-architectures-") as workdir:
        args.workdir = workdir
        trained = [measured(args, "%s P=2" % arch, lambda: train_architecture(args, arch))
                   for arch in ("gpt2", "llama")]
        big = big_model(args)
    seconds = time.monotonic() - began

    by = {r["architecture"]: r for r in trained}
    ratio = by["llama"]["tokens_per_second"] / by["gpt2"]["tokens_per_second"]
    busy = lambda r: " (busy)" if r["other_load_cores"] > args.max_other_load else ""
    lines = ["# Architectures: gpt2 and llama (bench/architectures.py)", "",
             "%d layers, d_model %d, %d heads, seq_len 128, vocabulary %d, micro-batch 4, a = 4, "
             "PACI P = 2, one thread per stage, %d steps per run on %s, on %d CPUs; %.0f s in all." % (
                 args.layers, args.d_model, args.heads, args.vocab, args.steps, corpus_name,
                 os.cpu_count(), seconds), "",
             "| architecture | parameters | tokens/s | / gpt2 | peak RSS per stage MB "
             "| final train loss | final val loss | other load (cores) | tries |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for arch in ("gpt2", "llama"):
        r = by[arch]
        lines.append("| %s%s | %s | %.0f | %.2f | %s | %.3f | %.3f | %.2f%s | %d |" % (
            arch, " (kv heads %d, ffn %d)" % (r["num_kv_heads"], r["ffn_hidden_size"])
            if arch == "llama" else " (ffn %d)" % r["ffn_hidden_size"],
            "{:,}".format(r["parameters"]), r["tokens_per_second"],
            r["tokens_per_second"] / by["gpt2"]["tokens_per_second"],
            " / ".join("%.0f" % v for v in r["peak_rss_mb"]), r["final_train_loss"] or 0,
            r["final_validation_loss"] or 0, r["other_load_cores"], busy(r), r["attempts"]))
    hf = big["transformers"]
    read = big["import_read_seconds_per_stage"]
    read_max = max(read) if read else float("nan")
    m = big["model"]
    lines += ["", "- llama / gpt2 tokens/s: %.2f" % ratio, "",
              "## A %s-parameter Llama to Hugging Face and back" % "{:,}".format(
                  big["parameters_in_safetensors"]), "",
              "d_model %d, %d layers, %d heads (%d key/value), ffn %d, vocabulary %d: %s parameters "
              "(safetensors), %s (transformers' num_parameters), %s (paci's shapes). Checkpoint "
              "(parameters and AdamW state) %.0f MB; the exported folder %.0f MB, transformers' "
              "save_pretrained of it %.0f MB. transformers %s, torch %s (%d threads), %s, "
              "missing keys %d, unexpected %d." % (
                  m["d_model"], m["num_layers"], m["num_heads"], m["num_kv_heads"],
                  m["ffn_hidden_size"], m["vocab_size"],
                  "{:,}".format(big["parameters_in_safetensors"]),
                  "{:,}".format(big["parameters_transformers"]),
                  "{:,}".format(big["parameters_expected"]), big["checkpoint_mb"],
                  big["folder_mb"], big["transformers_folder_mb"], hf["transformers"], hf["torch"],
                  hf["torch_threads"], hf["model_class"], hf["missing_keys"],
                  hf["unexpected_keys"]), "",
              "| measurement | paci s | transformers s | paci / transformers | other load (cores) |",
              "|---|---:|---:|---:|---|",
              "| export: `pacictl export --format=hf` (whole command, from the checkpoint) / "
              "save_pretrained (model in memory) | %.2f | %.2f | %.2f | %.2f%s / %.2f%s |" % (
                  big["export"]["seconds"], hf["save_pretrained_seconds"],
                  big["export"]["seconds"] / hf["save_pretrained_seconds"],
                  big["export"]["other_load_cores"], busy(big["export"]),
                  hf["other_load_cores"], busy(hf)),
              "| import, per stage from the worker logs (slowest of %d stages: %s) / "
              "from_pretrained | %.2f | %.2f | %.2f | %s / %.2f%s |" % (
                  len(read), ", ".join("%.2f" % v for v in read), read_max,
                  hf["from_pretrained_seconds"], read_max / hf["from_pretrained_seconds"],
                  ", ".join("%.2f%s" % (r["other_load_cores"], busy(r))
                            for r in big["import_runs"] if r["with_init"]),
                  hf["other_load_cores"], busy(hf)),
              "| import, P=2 job wall with init_from less without (median of %d each) / "
              "from_pretrained | %.2f | %.2f | %.2f | %s / %.2f%s |" % (
                  args.import_repeats, big["import_wall_difference_seconds"],
                  hf["from_pretrained_seconds"],
                  big["import_wall_difference_seconds"] / hf["from_pretrained_seconds"],
                  ", ".join("%.2f%s" % (r["other_load_cores"], busy(r))
                            for r in big["import_runs"]), hf["other_load_cores"], busy(hf)), "",
              "- export: %s" % (
                  "reading the checkpoint (process start included) %.2f s, building the model "
                  "and writing the folder %.2f s" % (big["export"]["read_checkpoint_seconds"],
                                                     big["export"]["build_and_write_seconds"])
                  if "read_checkpoint_seconds" in big["export"] else "no split (log lines not found)"),
              "- transformers' process resident %.0f MB before from_pretrained, %.0f MB after, "
              "%.0f MB after a first read of every weight (the safetensors are memory-mapped; "
              "the read %.2f s more: from_pretrained and the read %.2f s, paci / that %.2f by "
              "the worker logs)" % (
                  hf["rss_before_from_pretrained_mb"], hf["rss_after_from_pretrained_mb"],
                  hf["rss_after_reading_weights_mb"],
                  hf["read_weights_seconds"],
                  hf["from_pretrained_seconds"] + hf["read_weights_seconds"],
                  read_max / (hf["from_pretrained_seconds"] + hf["read_weights_seconds"])),
              "- P=2 job wall seconds with init_from: %s; without: %s" % (
                  ", ".join("%.2f" % r["job_wall_seconds"] for r in big["import_runs"]
                            if r["with_init"]),
                  ", ".join("%.2f" % r["job_wall_seconds"] for r in big["import_runs"]
                            if not r["with_init"])),
              "- peak RSS per stage MB, with init_from: %s; without: %s" % (
                  "; ".join(" / ".join("%.0f" % v for v in r["peak_rss_mb"])
                            for r in big["import_runs"] if r["with_init"]),
                  "; ".join(" / ".join("%.0f" % v for v in r["peak_rss_mb"])
                            for r in big["import_runs"] if not r["with_init"])),
              "- transformers' own imports (torch, transformers, the model class's module): %.2f s, "
              "not in the figures above; a second from_pretrained in the same process: %.2f s" % (
                  hf["import_seconds"], hf["from_pretrained_again_seconds"])]
    table = "\n".join(lines)
    print(table)
    write_result(args.out, "architectures", dict(
        cores=os.cpu_count(), steps=args.steps, corpus=corpus_name, seconds=seconds,
        max_other_load=args.max_other_load, trained=trained, llama_over_gpt2=ratio,
        big_model=big), table)


if __name__ == "__main__":
    main()
