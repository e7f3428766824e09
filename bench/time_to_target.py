#!/usr/bin/python3
"""Time to a target loss across two bench/method.py results: the targets are the final
validation losses of the flush in TARGETS (per seed, e.g. a 600-step run), the curves those of
every configuration in RUNS (e.g. the same runs trained for 720 steps, the flush among them).
So a method that trains longer is compared with the flush that trains as long, to the same
target: the speed-up is the flush's seconds to the target over the run's, seed by seed.

  /usr/bin/python3 bench/time_to_target.py bench/results/method_p2_kjv_600.json \\
      bench/results/method_p2_kjv_720.json [--out bench/results/time_to_target_p2_kjv.md]
"""
import argparse
import json
import statistics

from method import seconds_to


def name(row):
    if row["schedule"] in ("1f1b-flush", "gpipe"):
        return row["schedule"]
    if row["correction"] == "auto":
        return "%s, automatic default" % row["schedule"]
    extra = [row["correction"]] if row["correction"] != "none" else []
    if row["warmup_steps"]:
        extra.append("warmup_steps %d" % row["warmup_steps"])
    return ", ".join([row["schedule"]] + extra)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets")
    parser.add_argument("runs")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    with open(args.targets) as f:
        targets = json.load(f)
    with open(args.runs) as f:
        runs = json.load(f)
    flush_targets = next(r for r in targets["rows"] if r["schedule"] == "1f1b-flush")
    target = {int(seed): curve[-1]["loss"] for seed, curve in flush_targets["validation_loss"].items()}
    flush_runs = next(r for r in runs["rows"] if r["schedule"] == "1f1b-flush")
    lines = ["| run (%d steps) | seconds to the target, per seed | vs the flush of as many steps | mean |"
             % runs["args"]["steps"], "|---|---|---|---:|"]
    for row in runs["rows"]:
        seconds, speedups = [], []
        for seed, curve in sorted(row["validation_loss"].items(), key=lambda kv: int(kv[0])):
            mine = seconds_to(curve, target[int(seed)])
            theirs = seconds_to(flush_runs["validation_loss"][seed], target[int(seed)])
            seconds.append(mine)
            speedups.append(theirs / mine if mine and theirs else None)
        reached = all(s is not None for s in speedups)
        lines.append("| %s | %s | %s | %s |" % (
            name(row), ", ".join("not reached" if s is None else "%.1f" % s for s in seconds),
            ", ".join("not reached" if s is None else "%.2fx" % s for s in speedups),
            "%.2fx" % statistics.mean(speedups) if reached else "not reached"))
    lines.append("")
    lines.append("Targets: the final validation loss of each seed's flush in %s (%s); curves from %s."
                 % (args.targets.split("/")[-1], ", ".join("%.4f" % target[s] for s in sorted(target)),
                    args.runs.split("/")[-1]))
    text = "\n".join(lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
