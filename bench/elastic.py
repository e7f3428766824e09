#!/usr/bin/python3
"""Elastic pipelines, what they cost: a coordinator and worker processes on
127.0.0.1 (tests/harness/coordinator.py), P = 4 stages of a small GPT on the
Shakespeare-size corpus the tests use, checkpoints every --interval steps.

For each seed it trains, one job after the other:
  fixed    the job at 4 stages, never changing shape;
  elastic  the same job with pipeline.elastic {minStages: 2, maxStages: 4}: two
           of its four workers are killed at --kill_step and none takes their
           place, so after graceSeconds it goes on at 2 stages from its last
           checkpoint (re-cut); at --return_step two workers register again and
           it grows back to 4 stages at its next checkpoint.
Then, once, today's behaviour without pipeline.elastic: the same kill, two
replacements register at once, and the job restarts at its 4 stages; its time
to training again is that restart, measured, plus --replacement_seconds, the
time a replacement takes to come (a pod rescheduled and started), modelled: no
process waits on it, so the bench does not either.

It reports, in one run: each job's final validation loss, and the elastic
runs' mean against the fixed runs' mean with the fixed runs' seed spread
(max - min); the time from the kill to training again (the first step
reported past the checkpoint it resumed from) for the elastic job and for
today's; the steps trained again (the step reached at the kill less the
checkpoint resumed from); the resize seconds the coordinator counts. Writes
bench/results/elastic.{json,md}. On 2 cores the 4 stages share them: the
times are this machine's, the losses any machine's.

  build/python-env/bin/python bench/elastic.py [--build build] [--seeds 1,2,3]
"""
import argparse
import os
import signal
import statistics
import tempfile
import time

from _paths import ROOT, use_build
from bench_results import write_result


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--interval", type=int, default=25, help="steps between checkpoints")
    parser.add_argument("--kill_step", type=int, default=200)
    parser.add_argument("--return_step", type=int, default=350)
    parser.add_argument("--grace_seconds", type=int, default=5)
    parser.add_argument("--replacement_seconds", type=float, default=30,
                        help="today's behaviour: how long the replacement workers take")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    return parser.parse_args()


def job_spec(args, name, seed, elastic):
    from harness.coordinator import spec
    s = spec(name, P=4, steps=args.steps, a=2, checkpoint=os.path.join(args.dir, name),
             checkpoint_interval=args.interval)
    s.model.num_layers, s.model.d_model, s.model.init_seed = 8, 64, seed
    s.data.seed = seed
    s.training.eval_interval = 50
    s.run_policy.backoff_limit = 10
    if elastic:
        s.pipeline.elastic.min_stages, s.pipeline.elastic.max_stages = 2, 4
        s.pipeline.elastic.grace_seconds = args.grace_seconds
        s.pipeline.elastic.min_resize_interval_seconds = 0
    return s


def final_validation(job):
    return job.status.validation_loss_history[-1].loss


def run_fixed(args, cluster, seed):
    name = "fixed-s%d" % seed
    cluster.submit(job_spec(args, name, seed, elastic=False))
    done = succeeded(cluster, name)
    return {"seed": seed, "validation_loss": final_validation(done)}


def submit_and_kill_two(args, cluster, name, seed, elastic):
    """Submits the job and, at --kill_step, kills the workers of its stages 1 and 2; returns
    (their ids, the job then, when, the step it had reached)."""
    cluster.submit(job_spec(args, name, seed, elastic))
    at_kill = cluster.wait(name, lambda j: j.status.step >= args.kill_step, timeout=1800)
    killed_at = time.monotonic()
    victims = [at_kill.status.stages[s].worker_id for s in (1, 2)]
    for victim in victims:
        cluster.workers[victim].send_signal(signal.SIGKILL)
    return victims, at_kill, killed_at, at_kill.status.step


def succeeded(cluster, name):
    from harness.coordinator import phase
    done = cluster.wait(name, lambda j: phase(j) in ("SUCCEEDED", "FAILED"), timeout=1800)
    assert phase(done) == "SUCCEEDED", done.status.message
    return done


def training_again(cluster, name, attempt, timeout=1800):
    """Waits until an attempt after `attempt` reports a step past the checkpoint it resumed
    from; returns (the job then, when)."""
    resumed_from = {}

    def moved(j):
        if j.status.attempt <= attempt:
            return False
        resumed_from.setdefault(j.status.attempt, j.status.checkpoint_step)
        return j.status.step > resumed_from[j.status.attempt]

    job = cluster.wait(name, moved, timeout=timeout)
    return job, time.monotonic(), resumed_from[job.status.attempt]


def run_elastic(args, cluster, seed):
    from harness.coordinator import phase
    name = "elastic-s%d" % seed
    victims, at_kill, killed_at, step_at_kill = submit_and_kill_two(args, cluster, name, seed, True)
    shrunk, again_at, resumed = training_again(cluster, name, at_kill.status.attempt)
    assert shrunk.spec.pipeline.num_stages == 2, shrunk.spec.pipeline
    cluster.wait(name, lambda j: j.status.step >= args.return_step, timeout=1800)
    for victim in victims:
        cluster.add_worker(victim + "-back-s%d" % seed)
    grown = cluster.wait(name, lambda j: j.status.resizes >= 2 and phase(j) == "RUNNING",
                         timeout=1800)
    assert grown.spec.pipeline.num_stages == 4, grown.spec.pipeline
    done = succeeded(cluster, name)
    return {"seed": seed, "validation_loss": final_validation(done),
            "seconds_to_training_again": round(again_at - killed_at, 2),
            "steps_retrained": step_at_kill - resumed, "resumed_from": resumed,
            "resizes": done.status.resizes, "resize_seconds": round(done.status.resize_seconds, 2),
            "restarts": done.status.restarts}


def run_today(args, cluster, seed):
    name = "today-s%d" % seed
    victims, at_kill, killed_at, step_at_kill = submit_and_kill_two(args, cluster, name, seed, False)
    for victim in victims:
        cluster.add_worker(victim + "-replacement")
    _, again_at, resumed = training_again(cluster, name, at_kill.status.attempt)
    restart = again_at - killed_at
    done = succeeded(cluster, name)
    return {"seed": seed, "validation_loss": final_validation(done),
            "restart_seconds_measured": round(restart, 2),
            "seconds_to_training_again": round(args.replacement_seconds + restart, 2),
            "steps_retrained": step_at_kill - resumed}


def main():
    args = parse_args()
    use_build(args.build)
    os.environ.setdefault("PACI_BUILD_DIR", os.path.abspath(args.build))
    from harness.coordinator import Cluster
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        args.dir = tmp
        cluster = Cluster(tmp, workers=4)
        try:
            fixed = [run_fixed(args, cluster, seed) for seed in seeds]
            elastic = [run_elastic(args, cluster, seed) for seed in seeds]
            today = run_today(args, cluster, seeds[0])
        finally:
            cluster.stop()
    fixed_losses = [r["validation_loss"] for r in fixed]
    elastic_losses = [r["validation_loss"] for r in elastic]
    spread = max(fixed_losses) - min(fixed_losses)
    gap = statistics.mean(elastic_losses) - statistics.mean(fixed_losses)
    result = {"config": {k: v for k, v in vars(args).items() if k not in ("dir", "build", "out")},
              "fixed": fixed, "elastic": elastic, "today": today,
              "mean_validation_fixed": statistics.mean(fixed_losses),
              "mean_validation_elastic": statistics.mean(elastic_losses),
              "gap": gap, "fixed_seed_spread": spread, "within_seed_spread": abs(gap) <= spread,
              "seconds_to_training_again": {
                  "elastic_mean": statistics.mean(r["seconds_to_training_again"] for r in elastic),
                  "today": today["seconds_to_training_again"]}}
    lines = ["| run | seed | final validation loss | seconds to training again | steps retrained |",
             "|---|---|---|---|---|"]
    for r in fixed:
        lines.append("| fixed 4 stages | %d | %.4f | | |" % (r["seed"], r["validation_loss"]))
    for r in elastic:
        lines.append("| elastic 4 -> 2 -> 4 | %d | %.4f | %.1f | %d |" % (
            r["seed"], r["validation_loss"], r["seconds_to_training_again"], r["steps_retrained"]))
    lines.append("| today: the replacements after %.0f s (modelled), restart at 4 (%.1f s measured) "
                 "| %d | %.4f | %.1f | %d |" % (
                     args.replacement_seconds, today["restart_seconds_measured"], today["seed"],
                     today["validation_loss"], today["seconds_to_training_again"],
                     today["steps_retrained"]))
    lines.append("")
    lines.append("elastic - fixed mean validation loss: %+.4f; the fixed runs' seed spread %.4f "
                 "(%s)" % (gap, spread, "within" if abs(gap) <= spread else "outside"))
    table = "\n".join(lines)
    print(table)
    write_result(args.out, "elastic", result, table)


if __name__ == "__main__":
    main()
