#!/usr/bin/env python3
"""bench/colocated_report.py: the table of bench/colocated.sh (docs/benchmarks.md).

Reads OUT/refit-<shape>.json (refit-run --bench-json) and OUT/baselines.json
(bench/colocated_baselines.py --json), prints a Markdown table and writes OUT/summary.json.

    python3 bench/colocated_report.py OUT
"""
import json
import os
import sys

# refit topology suffix -> (baseline shape, format)
SHAPES = [
    ("llama-3.1-8b", "llama8b", "bf16"),
    ("qwen3-30b-a3b-24l-bf16", "qwen3moe24", "bf16"),
    ("qwen3-30b-a3b-24l-wna16", "qwen3moe24", "wna16"),
    ("qwen3-30b-a3b-24l-fp8", "qwen3moe24", "fp8-block"),
]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench-out"
    base = load(os.path.join(out, "baselines.json")) or {}
    bshapes = {s.get("shape"): s for s in base.get("shapes", [])}
    rows, summary = [], {"refit": {}, "baselines": bshapes, "targets": {}}
    print("| shape | format | tensors | payload GB | refit best ms | median ms | GB/s | "
          "copy ceiling ms (GB/s) | % of ceiling | (a) per-tensor IPC ms | (b) 2 x 1 GiB ms | "
          "refit vs (b) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, bname, fmt in SHAPES:
        r = load(os.path.join(out, "refit-%s.json" % name))
        if r is None or "best_s" not in r:
            print("| %s | %s | - | - | (no result) | | | | | | | |" % (name, fmt))
            continue
        summary["refit"][name] = r
        c = r.get("copy_ceiling", {})
        b = bshapes.get(bname, {}) if fmt == "bf16" else {}
        a_ms = b.get("a", {}).get("best_s")
        b_ms = b.get("b", {}).get("best_s")
        frac = r.get("fraction_of_ceiling")
        print("| %s | %s | %d | %.2f | %.3f | %.3f | %.0f | %s | %s | %s | %s | %s |" % (
            name, fmt, r["tensors"], r["payload_bytes"] / 1e9, r["best_s"] * 1e3,
            r["median_s"] * 1e3, r["payload_GBps_best"],
            "%.3f (%.0f)" % (c["best_s"] * 1e3, c["GBps"]) if c else "-",
            "%.1f%%" % (100 * frac) if frac else "-",
            "%.1f" % (a_ms * 1e3) if a_ms else "-",
            "%.1f" % (b_ms * 1e3) if b_ms else "-",
            "%.1fx" % (b_ms / r["best_s"]) if b_ms else "-"))
        rows.append((name, fmt, r))
    refit = summary["refit"]
    t = summary["targets"]
    for name in ("llama-3.1-8b", "qwen3-30b-a3b-24l-bf16"):
        if name in refit and refit[name].get("fraction_of_ceiling"):
            f = refit[name]["fraction_of_ceiling"]
            t["%s >= 80%% of copy ceiling" % name] = {"value": f, "met": f >= 0.8}
    bf, wn = refit.get("qwen3-30b-a3b-24l-bf16"), refit.get("qwen3-30b-a3b-24l-wna16")
    if bf and wn:
        per_b = (wn["best_s"] / wn["payload_bytes"]) / (bf["best_s"] / bf["payload_bytes"])
        t["wna16 time per byte / bf16 time per byte <= 1.5"] = {"value": per_b,
                                                                "met": per_b <= 1.5}
    if t:
        print()
        for k, v in t.items():
            print("- %s: %.3f (%s)" % (k, v["value"], "met" if v["met"] else "NOT met"))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
