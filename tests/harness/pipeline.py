"""One `pacictl train` run of a tiny GPT on the Genesis slice, its worker
processes on 127.0.0.1, its output and JSON summary kept, every stage's /metrics
scraped while it runs if asked:

    run = Run(workdir, spec_text(P=2, steps=20), scrape=True)
    run.returncode, run.output, run.summary(), run.metrics
"""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

from .paths import CORPUS, PACICTL

TINY = """
name: {name}
model: {{vocab_size: 80, num_layers: 4, d_model: {d_model}, num_heads: 4, seq_len: 32{model_extra}}}
pipeline: {{num_stages: {P}, schedule: {schedule}, accumulation: {a}, micro_batch_size: 4,
            partition: "{partition}"}}
optimizer: {{lr: 3e-3, warmup_fraction: 0.1}}
training: {{steps: {steps}, eval_interval: {eval_interval}, eval_micro_batches: 2}}
data: {{corpus_path: {corpus}}}
"""


def spec_text(**kw):
    values = dict(name="tiny", d_model=32, P=2, schedule="paci", a=2, steps=30, partition="balanced",
                  eval_interval=10, corpus=CORPUS, model_extra="")
    values.update(kw)
    text = TINY.format(**values)
    if "checkpoint" in kw:
        text += "checkpoint: %s\n" % kw["checkpoint"]
    if "precision" in kw:  # runtime.precision; left out: auto
        text += "runtime: {precision: %s}\n" % kw["precision"]
    return text.replace("checkpoint: {checkpoint}", "")


def pacictl(*args):
    """Runs pacictl; (exit code, stdout, stderr)."""
    proc = subprocess.run([PACICTL] + list(args), capture_output=True, text=True,
                          errors="replace", timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


class Run:
    """One `pacictl train` process; scrapes every stage's /metrics while it runs."""

    def __init__(self, workdir, spec, extra=(), scrape=False, kill_stage=None):
        self.spec_path = os.path.join(workdir, "spec-%d.yaml" % time.monotonic_ns())
        with open(self.spec_path, "w") as f:
            f.write(spec)
        self.summary_path = self.spec_path + ".summary.json"
        args = [PACICTL, "train", self.spec_path, "--summary=" + self.summary_path]
        if scrape:
            args.append("--linger_seconds=2")
        args += list(extra)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.lines = []
        self.metrics = {}  # stage -> last scraped text
        self.pids = {}
        self.kill_stage = kill_stage
        self.killed = None
        self._scrape = scrape
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        self.returncode = self.proc.wait(timeout=600)
        reader.join(timeout=10)
        self.proc.stdout.close()
        self.output = "".join(self.lines)

    def _read(self):
        pattern = re.compile(r"stage (\d+): worker \S+ pid (\d+) metrics=(http://\S+)")
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.append(line)
            m = pattern.search(line)
            if not m:
                continue
            stage, pid, url = int(m.group(1)), int(m.group(2)), m.group(3)
            self.pids[stage] = pid
            if self._scrape:
                threading.Thread(target=self._scrape_loop, args=(stage, url), daemon=True).start()
            if self.kill_stage == stage:
                threading.Thread(target=self._kill_when_training, args=(pid, url),
                                 daemon=True).start()

    def _kill_when_training(self, pid, url):
        if wait_for_training(url, self.proc):
            os.kill(pid, signal.SIGKILL)
            self.killed = pid

    def _scrape_loop(self, stage, url):
        while self.proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    self.metrics[stage] = response.read().decode()
            except OSError:
                pass
            if exited_within(self.proc, 0.2):  # the scrape interval, cut short by the end
                return

    def summary(self):
        """The JSON summary, with proto3-JSON's int64 strings made ints."""
        def fix(value):
            if isinstance(value, dict):
                return {k: fix(v) for k, v in value.items()}
            if isinstance(value, list):
                return [fix(v) for v in value]
            if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
                return int(value)
            return value
        with open(self.summary_path) as f:
            return fix(json.load(f))


def wait_for_training(url, proc, timeout=120):
    """Polls a worker's /metrics until it has run a backward; False if it never does."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                values = metric_values(response.read().decode(), "paci_microbatches_total")
                if any(v > 0 for k, v in values.items() if 'pass="backward"' in k):
                    return True
        except OSError:
            pass
        exited_within(proc, 0.1)  # the next look, or at once when the run ends
    return False


def exited_within(proc, seconds):
    """Waits up to `seconds` for `proc` to exit; whether it has."""
    try:
        proc.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def metric_values(text, name):
    """{labels: value} of one metric name in Prometheus text format."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out
