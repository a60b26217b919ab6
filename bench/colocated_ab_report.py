#!/usr/bin/env python3
"""bench/colocated_ab_report.py: the table of bench/colocated-ab.sh.

Reads OUT/{A,B}-r<round>/refit-<shape>.json (refit-run --bench-json) for every round, takes
per shape and side the best and the median update time over all rounds' timed updates (each
run's best_s and median_s: the best of the bests, the median of the medians), prints a
Markdown table of B against A and writes OUT/ab.json.

    python3 bench/colocated_ab_report.py OUT ROUNDS SHAPE...
"""
import json
import os
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    out, rounds, shapes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    result = {"rounds": rounds, "shapes": {}}
    print("| shape | A best ms | B best ms | B/A best | A median ms | B median ms | B/A median |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for s in shapes:
        row = {}
        for side in ("A", "B"):
            runs = [load(os.path.join(out, "%s-r%d" % (side, r), "refit-%s.json" % s))
                    for r in range(1, rounds + 1)]
            runs = [x for x in runs if x and "best_s" in x]
            if runs:
                row[side] = {"best_s": min(x["best_s"] for x in runs),
                             "median_s": statistics.median(x["median_s"] for x in runs),
                             "runs": len(runs)}
        result["shapes"][s] = row
        if "A" not in row or "B" not in row:
            print("| %s | %s | %s | (missing) | | | |" % (
                s, "%.3f" % (row["A"]["best_s"] * 1e3) if "A" in row else "-",
                "%.3f" % (row["B"]["best_s"] * 1e3) if "B" in row else "-"))
            continue
        a, b = row["A"], row["B"]
        rb, rm = b["best_s"] / a["best_s"], b["median_s"] / a["median_s"]
        row["ratio_best"], row["ratio_median"] = rb, rm
        worst = max(worst, rb, rm)
        print("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            s, a["best_s"] * 1e3, b["best_s"] * 1e3, rb, a["median_s"] * 1e3,
            b["median_s"] * 1e3, rm))
    result["worst_ratio"] = worst
    print("\nworst B/A ratio: %.3f (target: at most 1.03)" % worst)
    with open(os.path.join(out, "ab.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
