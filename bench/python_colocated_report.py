#!/usr/bin/env python3
"""bench/python_colocated_report.py: the table of bench/python-colocated.sh (docs/benchmarks.md):
the Python path against refit-run on the same shapes, from the same run.

Reads OUT/pc-refit-<shape>.json (refit-run --bench-json) and OUT/pc-python-<shape>.json
(bench/python_colocated.py --json) for the shapes in $SHAPES, and OUT/pc-python-<shape>.json
of the shapes in $REFUSED (session create only); prints a Markdown table and writes
OUT/pc-summary.json. Both sides time updates 2.. (the first is the warm-up), the slowest rank's
time per update; ratio = Python / refit-run, best against best and median against median, for
the library's own time (r.stats["seconds"]) and the wall time around s.update() in Python.
Target (issue #15 item 7): the wall ratio of the bests <= 1.05.

Exit status 1 when a shape in $SHAPES lacks either result or its bytes were not verified.

    SHAPES="llama-3.1-8b qwen3-30b-a3b-24l-bf16" python3 bench/python_colocated_report.py OUT
"""
import json
import os
import sys

TARGET = 1.05


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ms(x):
    return "%.3f" % (x * 1e3) if x else "-"


def ratio(a, b):
    return a / b if a and b else None


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench-out"
    shapes = os.environ.get("SHAPES", "llama-3.1-8b qwen3-30b-a3b-24l-bf16").split()
    refused = os.environ.get("REFUSED", "qwen3-30b-a3b-24l-wna16 qwen3-30b-a3b-24l-fp8").split()
    summary, rc = {"target_wall_ratio_best": TARGET, "shapes": {}, "not_run": {}}, 0
    print("| shape | trainer / engine tensors | payload GB | refit-run best ms (median) | "
          "Python library best ms (median) | Python wall best ms (median) | ratio library "
          "best (median) | ratio wall best (median) | <= %.2f | bytes |" % TARGET)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for s in shapes:
        r = load(os.path.join(out, "pc-refit-%s.json" % s))
        p = load(os.path.join(out, "pc-python-%s.json" % s))
        if r is None or p is None or "best_s" not in r or p.get("refused") or \
                not p.get("lib_best_s"):
            why = ("refit-run: no result" if r is None or "best_s" not in r else
                   "Python: refused: %s" % p.get("reason") if p and p.get("refused") else
                   "Python: no result")
            print("| %s | - | - | - | - | - | - | - | - | (%s) |" % (s, why))
            summary["shapes"][s] = {"error": why}
            rc = 1
            continue
        rl = (ratio(p["lib_best_s"], r["best_s"]), ratio(p["lib_median_s"], r["median_s"]))
        rw = (ratio(p["wall_best_s"], r["best_s"]), ratio(p["wall_median_s"], r["median_s"]))
        met = rw[0] is not None and rw[0] <= TARGET
        if p["payload_bytes"] != r["payload_bytes"]:
            print("(%s: payloads differ: Python %d bytes, refit-run %d)" %
                  (s, p["payload_bytes"], r["payload_bytes"]), file=sys.stderr)
            rc = 1
        if not p.get("verified"):
            rc = 1
        print("| %s | %d / %d | %.2f | %s (%s) | %s (%s) | %s (%s) | %.3f (%.3f) | %.3f (%.3f) | "
              "%s | %s |" % (
                  s, p["trainer_tensors"], p["engine_tensors"], p["payload_bytes"] / 1e9,
                  ms(r["best_s"]), ms(r["median_s"]), ms(p["lib_best_s"]),
                  ms(p["lib_median_s"]), ms(p["wall_best_s"]), ms(p["wall_median_s"]),
                  rl[0], rl[1], rw[0], rw[1], "met" if met else "NOT met",
                  "verified (%d tensors)" % p["verified_tensors"] if p.get("verified") else
                  "NOT verified: %s" % "; ".join(p.get("verify_problems", [])[:3])))
        summary["shapes"][s] = {
            "payload_bytes": p["payload_bytes"], "trainer_tensors": p["trainer_tensors"],
            "engine_tensors": p["engine_tensors"], "refit_run_best_s": r["best_s"],
            "refit_run_median_s": r["median_s"], "python_lib_best_s": p["lib_best_s"],
            "python_lib_median_s": p["lib_median_s"], "python_wall_best_s": p["wall_best_s"],
            "python_wall_median_s": p["wall_median_s"], "ratio_lib_best": rl[0],
            "ratio_lib_median": rl[1], "ratio_wall_best": rw[0], "ratio_wall_median": rw[1],
            "target_met": met, "verified": bool(p.get("verified")),
            "python_updates": p["updates"], "refit_run_updates": r.get("updates")}
    for s in refused:
        p = load(os.path.join(out, "pc-python-%s.json" % s))
        why = (p.get("reason") if p and p.get("refused") else
               "no result" if p is None else "not refused: run it as a bf16 shape")
        print("| %s | not run | | | | | | | | session: %s |" % (s, why))
        summary["not_run"][s] = why
    with open(os.path.join(out, "pc-summary.json"), "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
