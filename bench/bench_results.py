"""Where a benchmark's figures go: OUT/NAME.json (the record) and OUT/NAME.md (its table);
and what the figures read from a run summary."""
import json
import os


def percentile(values, p):
    """The p-th percentile of `values` (nearest rank)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def write_result(out, name, result, table):
    """out/name.json (the result) and out/name.md (the table)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(out, name + ".md"), "w") as f:
        f.write(table + "\n")


def peak_rss_mb(summary):
    """Each stage's peak resident memory, as its worker reported it (RunSummary)."""
    return [round(int(st.get("peak_rss_bytes", 0)) / 2**20, 1) for st in summary.get("stages", [])]
