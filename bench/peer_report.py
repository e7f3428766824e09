"""The tables of bench/peer_pipelining.py: a run a row, over one seed or several."""
import os


def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def report(args, seeds, runs, results, synchronous, torch_version, allocator, seconds):
    """The table: one row a run, its tokens/s the median over the seeds, its
    losses each seed's (and their mean); then PACI's validation loss against
    the seed-to-seed spread of each run in `synchronous` (the keys of the runs
    whose weights see every gradient of the step they are in: no drift)."""
    lines = ["# paci beside torch.distributed.pipelining (bench/peer_pipelining.py)", "",
             "GPT %d layers, d_model %d, %d heads, seq_len %d, vocabulary %d; micro-batch %d, "
             "%d micro-batches per optimizer step, %d steps, seed%s %s; P = 2, one process per "
             "stage, one thread each, on %d CPUs; torch %s; allocator: %s; %.0f s in all." % (
                 args.layers, args.d_model, args.heads, args.seq_len, args.vocab, args.micro_batch,
                 args.a, args.steps, "s" if len(seeds) > 1 else "",
                 ", ".join(map(str, seeds)), os.cpu_count(), torch_version, allocator, seconds), "",
             "| run | tokens/s%s | / paci PACI | idle (paci's trace) | final train loss%s "
             "| final validation loss%s | peak RSS per process MB |" % (
                 (" (median)", " (mean)", " (each seed; mean)") if len(seeds) > 1 else ("",) * 3),
             "|---|---:|---:|---|---:|---:|---|"]
    ok = {}
    for key, label in runs:
        mine = [r for r in results if r["key"] == key]
        good = [r for r in mine if "error" not in r]
        if not good:
            error = mine[0]["error"] if mine else "not run"
            lines.append("| %s | did not run: %s | | | | | |" % (label, error.replace("|", "/")))
            continue
        ok[key] = good
    base = median([r["tokens_per_second"] for r in ok["paci"]]) if "paci" in ok else None
    for key, label in runs:
        if key not in ok:
            continue
        good = ok[key]
        tps = median([r["tokens_per_second"] for r in good])
        val = [r["final_validation_loss"] for r in good]
        idle = " / ".join("%.0f%%" % (100 * i) for i in good[0].get("idle_fraction", [])
                          if i is not None)
        val_text = "%.3f" % val[0] if len(val) == 1 else "%s; **%.3f**" % (
            ", ".join("%.3f" % v for v in val), sum(val) / len(val))
        lines.append("| %s | %.0f | %s | %s | %.3f | %s | %s |" % (
            label, tps, "%.2f" % (tps / base) if base else "-", idle or "-",
            sum(r["final_train_loss"] for r in good) / len(good), val_text,
            " / ".join("%.0f" % v for v in good[0]["peak_rss_mb"])))
    if len(seeds) > 1 and "paci" in ok:
        paci = [r["final_validation_loss"] for r in ok["paci"]]
        paci_mean = sum(paci) / len(paci)
        lines += ["", "Validation loss against the seed-to-seed spread (max - min over the "
                      "seeds of one run):", ""]
        for key, label in runs:
            if key not in ok or key not in synchronous:
                continue
            val = [r["final_validation_loss"] for r in ok[key]]
            mean, spread = sum(val) / len(val), max(val) - min(val)
            gap = paci_mean - mean
            lines.append("- %s: mean %.3f, spread %.3f; paci PACI's mean is %+.3f from it: %s" % (
                label, mean, spread, gap,
                "within the spread" if abs(gap) <= spread else "outside the spread"))
    return "\n".join(lines) + "\n"
