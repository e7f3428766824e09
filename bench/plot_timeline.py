#!/usr/bin/python3
"""Draws the first seconds of one or more `pacictl train --trace` timelines as a PNG.

One row per stage (grouped per trace), one coloured box per span: forward,
backward, optimizer step, send, eval, checkpoint; idle is left blank, so the
bubble shows as white. Each trace's clock starts at its first forward, so the
traces line up. Uses gnuplot (Debian's gnuplot-nox).

  /usr/bin/python3 bench/plot_timeline.py --out timeline.png [--seconds 1] [--skip 0] \\
      "paci a=4=runs/paci.trace.json" "1f1b-flush m=4=runs/flush.trace.json"

Each trace is given as LABEL=PATH (the label is everything before the last '=').
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# name: (colour, legend); idle is not drawn.
KINDS = {
    "forward": (0x4C9F38, "forward"),
    "backward": (0x2A6EBB, "backward"),
    "optimizer_step": (0xE07B00, "optimizer step"),
    "send": (0xB0B0B0, "send"),
    "eval": (0x8E44AD, "eval"),
    "checkpoint": (0xC0392B, "checkpoint"),
}


def load(path):
    with open(path) as f:
        trace = json.load(f)
    spans = {}
    for event in trace["traceEvents"]:
        if event.get("ph") == "X":
            spans.setdefault(event["tid"], []).append(event)
    return spans


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+", help="LABEL=PATH of a Chrome trace from pacictl --trace")
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--seconds", type=float, default=1.0, help="how much of each run to draw")
    parser.add_argument("--skip", type=float, default=0.0,
                        help="seconds after the first forward at which the window starts")
    parser.add_argument("--title", default="Timeline of the first seconds of each stage")
    args = parser.parse_args()

    rows = []  # (label, [(start_s, end_s, kind)])
    for item in args.traces:
        label, _, path = item.rpartition("=")
        if not label:
            sys.exit("give each trace as LABEL=PATH, got %r" % item)
        spans = load(path)
        forwards = [e["ts"] for tid in spans for e in spans[tid] if e["name"] == "forward"]
        if not forwards:
            sys.exit("%s has no forward spans" % path)
        origin = min(forwards) + args.skip * 1e6
        for tid in sorted(spans):
            boxes = []
            for e in spans[tid]:
                start = (e["ts"] - origin) / 1e6
                end = start + e["dur"] / 1e6
                if e["name"] in KINDS and end > 0 and start < args.seconds:
                    boxes.append((max(start, 0.0), min(end, args.seconds), e["name"]))
            rows.append(("%s, stage %d" % (label, tid), boxes))

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "boxes.dat")
        with open(data, "w") as f:
            for y, (_, boxes) in enumerate(rows):
                for start, end, kind in boxes:
                    # x center, y, x half-width, y half-height, colour
                    f.write("%.7f %d %.7f 0.38 %d\n" % ((start + end) / 2, -y, (end - start) / 2,
                                                        KINDS[kind][0]))
        ytics = ", ".join('"%s" %d' % (label, -y) for y, (label, _) in enumerate(rows))
        keys = "\n".join(
            "keyentry with boxes fs solid noborder lc rgb '#%06X' title '%s', \\" % (colour, title)
            for colour, title in KINDS.values())
        script = """
set terminal pngcairo size 1600,%d font ",11"
set output '%s'
set title '%s (idle is white)'
set xlabel 'seconds since the first forward%s'
set xrange [0:%g]
set yrange [%g:0.7]
set ytics (%s)
set grid xtics
set key outside bottom center horizontal
plot \\
%s
  '%s' using 1:2:3:4:5 with boxxyerror fs solid noborder lc rgb variable notitle
""" % (140 + 42 * len(rows), args.out, args.title,
       " + %g s" % args.skip if args.skip else "", args.seconds, -len(rows) + 0.3, ytics, keys, data)
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print("wrote %s" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
