"""The report of bench/schedule_comparison.py: its markdown tables (throughput
and bubble, training, deep pipelines) and its pictures (validation loss
against time and tokens, the simulated deep pipelines, PACI's timeline beside
1F1B-flush at P = 2 with the first seconds of both traces; gnuplot, Debian's
gnuplot-nox, draws them)."""
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def plot_losses(runs, stage_counts, args, tmp):
    """loss_vs_time.png and loss_vs_tokens.png: one panel per P, one line per run."""
    tokens_per_step = args.global_batch * args.seq_len
    files = {}
    for r in runs:
        path = os.path.join(tmp, r["tag"] + ".dat")
        with open(path, "w") as f:
            for p in r["summary"]["validation_loss"]:
                f.write("%.4f %d %.5f\n" % (p["seconds"], p["step"] * tokens_per_step, p["loss"]))
        files[r["tag"]] = path
    for name, column, xlabel in (("loss_vs_time", 1, "wall seconds since training began"),
                                 ("loss_vs_tokens", 2, "training tokens")):
        panels = []
        for P in stage_counts:
            group = [r for r in runs if r["P"] == P or (P == stage_counts[0] and r["P"] == 1)]
            plots = ", \\\n  ".join(
                "'%s' using %d:3 with linespoints pt 7 ps 0.5 lw 2 title '%s'" % (
                    files[r["tag"]], column, r["label"]) for r in group)
            panels.append("set title 'P = %d%s'\nplot %s\n" % (
                P, " (4 processes on %d cores)" % os.cpu_count() if P > os.cpu_count() else "",
                plots))
        gnuplot("""
set terminal pngcairo size %d,560 font ",11"
set output '%s'
set multiplot layout 1,%d
set xlabel '%s'
set ylabel 'validation loss'
set grid
set key top right
%s
unset multiplot
""" % (760 * len(panels), os.path.join(args.out, name + ".png"), len(panels), xlabel,
       "".join(panels)))


def plot_deep(deep, args, tmp):
    """deep_pipelines.png: simulated utilization and throughput against P."""
    schedules = []
    for row in deep:
        if row["label"] not in schedules:
            schedules.append(row["label"])
    files = []
    for i, name in enumerate(schedules):
        path = os.path.join(tmp, "deep-%d.dat" % i)
        with open(path, "w") as f:
            for row in deep:
                if row["label"] == name:
                    f.write("%d %.5f %.5f\n" % (row["P"], row["utilization"], row["vs_1f1b_flush"]))
        files.append((path, name))
    plot = lambda column: ", \\\n  ".join(
        "'%s' using 1:%d with linespoints pt 7 lw 2 title '%s'" % (path, column, name)
        for path, name in files)
    gnuplot("""
set terminal pngcairo size 1400,560 font ",11"
set output '%s'
set multiplot layout 1,2 title 'Simulated pipelines, every stage as costly as a measured P = 2 stage'
set logscale x 2
set xlabel 'pipeline stages P'
set grid
set key bottom left
set title 'mean stage utilization (busy / wall)'
set yrange [0:1.05]
plot %s
set title 'throughput relative to 1f1b-flush m=2P'
set yrange [0:*]
plot %s
unset multiplot
""" % (os.path.join(args.out, "deep_pipelines.png"), plot(2), plot(3)))


def trim_trace(src, dst, seconds):
    with open(src) as f:
        trace = json.load(f)
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if e["ph"] != "X" or e["ts"] < seconds * 1e6]
    with open(dst, "w") as f:
        json.dump(trace, f, separators=(",", ":"))


def plot_timeline_p2(args, runs):
    """Timeline of PACI beside 1F1B-flush at P = 2, and their first seconds as traces."""
    timeline_runs = [next((r for r in runs if r["P"] == 2 and r["schedule"] == s and
                           r["a"] == 4 and r["seed"] == args.seed), None)
                     for s in ("paci", "1f1b-flush")]
    if not all(timeline_runs):
        return
    subprocess.run(["/usr/bin/python3", os.path.join(HERE, "plot_timeline.py"),
                    "--out", os.path.join(args.out, "timeline_p2.png"), "--seconds", "1",
                    "--skip", "1",
                    "--title", "P = 2, the same 4 micro-batches per step: PACI beside "
                               "1F1B-flush, one second after the first",
                    ] + ["%s=%s" % (r["label"], r["trace_path"]) for r in timeline_runs],
                   check=True)
    for r, name in zip(timeline_runs, ("paci", "1f1b_flush")):
        trim_trace(r["trace_path"], os.path.join(args.out, "trace_p2_%s.json" % name), 2.0)


def fmt_histogram(counts):
    """[1, 1, 1, 8189] as "[1 ×3, 8189]": runs of equal counts folded."""
    parts, i = [], 0
    while i < len(counts):
        j = i
        while j + 1 < len(counts) and counts[j + 1] == counts[i]:
            j += 1
        parts.append("%d ×%d" % (counts[i], j - i + 1) if j > i else "%d" % counts[i])
        i = j + 1
    return "[" + ", ".join(parts) + "]"


def fmt_list(values, digits=2):
    return "[" + " ".join(("%." + str(digits) + "f") % v for v in values) + "]"


def throughput_table(rows):
    """The "Throughput and bubble" table, as lines."""
    lines = [
        "| run | P | micro-batch | tokens/s | vs 1f1b-flush | idle measured | idle (P-1)/(m+P-1) "
        "| simulated idle | tokens/s, trace window | simulated tokens/s | other load |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| %s | %d | %d | %s | %.2fx | %s | %s | %s | %s | %s (%+.0f%%) | %.2f |" % (
            row["run"], row["P"], row["micro_batch_size"], "{:,.0f}".format(row["tokens_per_second"]),
            row["vs_1f1b_flush"], fmt_list(row["idle_measured"]),
            "%.3f" % row["idle_flush_model"] if row["idle_flush_model"] is not None else "",
            fmt_list(row["idle_simulated"]),
            "{:,.0f}".format(row["measured_window_tokens_per_second"]),
            "{:,.0f}".format(row["simulated_tokens_per_second"]),
            100 * (row["simulated_tokens_per_second"] / row["measured_window_tokens_per_second"] - 1),
            row["other_load_cores"]))
    return lines


def reached_cell(t):
    if t["seconds"] is None:
        return "not reached"
    return "%.1f s (step %d)%s" % (t["seconds"], t["step"], ", %.2fx" % t["vs_1f1b_flush"]
                                   if t["vs_1f1b_flush"] else "")


def training_table(rows, target_fraction):
    """The "Training" table, as lines."""
    lines = [
        "| run | P | drift max / bound | mean drift | peak RSS MiB | final train | final val "
        "| to flush's loss at %d%% of the steps | to flush's final loss |" % (
            round(100 * target_fraction)),
        "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append("| %s | %d | %s / %s | %s | %s | %.3f | %.3f | %s | %s |" % (
            row["run"], row["P"], row["drift_max"], row["drift_bound"], fmt_list(row["drift_mean"]),
            fmt_list(row["peak_rss_mib"], 0), row["final_train_loss"], row["final_validation_loss"],
            reached_cell(row["time_to_target"]["near"]),
            reached_cell(row["time_to_target"]["final"])))
    return lines


def target_lines(targets, stage_counts):
    return ["- P = %d: %.3f (1f1b-flush m=%d at step %d) and %.3f (its final)" % (
        P, targets[P]["near"], 2 * P, targets[P]["near_step"], targets[P]["final"])
        for P in stage_counts]


def deep_table(deep):
    """The "Deep pipelines (simulated)" table, as lines."""
    lines = [
        "| P | schedule | utilization | vs 1f1b-flush | drift max / bound (stage 0) "
        "| stage 0 drift histogram | activations in flight, stage 0 max (mean) |",
        "|---|---|---|---|---|---|---|"]
    for d in deep:
        lines.append("| %d | %s (a=%d) | %.3f | %.2fx | %d / %d | %s | %d (%.1f) |" % (
            d["P"], d["label"], d["a"], d["utilization"], d["vs_1f1b_flush"], d["drift_max"][0],
            d["drift_bound"][0], fmt_histogram(d["drift_histogram_stage0"]), d["max_in_flight"][0],
            d["mean_in_flight_stage0"]))
    return lines


def render_markdown(args, setup, rows, targets, stage_counts, deep, base, mean_cost):
    """schedule_comparison.md: the setup, the three tables and the plots."""
    return "\n".join([
        "# Schedule comparison", "", setup, "",
        "## Throughput and bubble", "",
        "Idle fractions are per stage. The flush model is (P-1)/(m+P-1). The simulated columns "
        "replay each run's schedule in `paci_simulate` with the per-stage costs measured in its "
        "own trace; the trace window is the run from its first to its last span (the tokens/s "
        "column counts from the moment all stages joined). Other load is the CPU (in cores) the "
        "machine spent on anything but the run while it ran; a run with more than %.2f is "
        "repeated (up to %d tries)." % (args.max_other_load, args.attempts), ""]
        + throughput_table(rows) + [
        "", "## Training", "",
        "Drift, mean drift and peak resident memory are per stage. Time to a target validation "
        "loss is in wall seconds since training began, to the first evaluation at or below it, "
        "with the ratio of 1f1b-flush's time to it (above 1: sooner than 1f1b-flush). The "
        "targets are what 1f1b-flush m=2P reached (the 1-process run is timed against the "
        "first P's):", ""] + target_lines(targets, stage_counts) + [""]
        + training_table(rows, args.target_fraction) + [
        "", "## Deep pipelines (simulated)", "",
        "`paci_simulate` with every stage as costly as the mean stage of the P = 2 `paci a=4` run "
        "(forward %.1f ms, backward %.1f ms, optimizer step %.1f ms for a micro-batch of %d), "
        "link latency %.2f ms as measured there, %s micro-batches per run (steps = that / a); "
        "no evaluation. The drift histogram counts stage 0's backwards by the optimizer steps "
        "they crossed (0, 1, ...; \"1 ×3\" is three entries of 1); activations in flight are stage 0's micro-batches between "
        "forward and backward, i.e. its activation memory in micro-batches." % (
            mean_cost["forward"] * 1e3, mean_cost["backward"] * 1e3,
            mean_cost["optimizer_step"] * 1e3, base["micro_batch_size"],
            base["costs"]["link_latency"] * 1e3, "{:,}".format(args.deep_micro_batches)), ""]
        + deep_table(deep) + [
        "", "![validation loss against wall time](loss_vs_time.png)", "",
        "![validation loss against tokens](loss_vs_tokens.png)", "",
        "![timeline](timeline_p2.png)", "",
        "![simulated utilization](deep_pipelines.png)", ""])
