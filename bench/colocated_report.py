#!/usr/bin/env python3
"""bench/colocated_report.py: the table of bench/colocated.sh (docs/benchmarks.md).

Reads OUT/refit-<shape>.json (refit-run --bench-json: the update times, the cudaMemcpyAsync and
refit-kernel ceilings), OUT/torch-floor.json (bench/colocated_baselines.py --floor-bytes: torch's
dst.copy_(src) of the same buffer size) and OUT/baselines.json (the two PyTorch baselines of the
same run), prints a Markdown table and writes OUT/summary.json. Each shape is measured against
the fastest of its three ceilings (issue #18 item 2).

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


def ceilings(r, floors):
    """The three ceilings of one refit run (seconds for the ceiling's bytes, or None) and the
    fastest as a payload time: (memcpy, kernel, torch, best name, best payload seconds)."""
    c, k = r.get("copy_ceiling") or {}, r.get("kernel_ceiling") or {}
    nbytes = c.get("bytes")
    t = floors.get(nbytes) if nbytes else None
    got = [(n, x) for n, x in (("cudaMemcpyAsync", c.get("best_s")),
                               ("refit kernel", k.get("best_s")),
                               ("torch copy_", t)) if x]
    if not got:
        return c.get("best_s"), k.get("best_s"), t, None, None
    name, best = min(got, key=lambda nx: nx[1])
    return c.get("best_s"), k.get("best_s"), t, name, best * r["payload_bytes"] / nbytes


def ms(x):
    return "%.3f" % (x * 1e3) if x else "-"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench-out"
    base = load(os.path.join(out, "baselines.json")) or {}
    tf = load(os.path.join(out, "torch-floor.json")) or {}
    floors = {f["bytes"]: f["best_s"] for f in tf.get("floors", [])}
    bshapes = {s.get("shape"): s for s in base.get("shapes", [])}
    rows, summary = [], {"refit": {}, "baselines": bshapes, "torch_floor": tf, "targets": {}}
    print("| shape | format | tensors | payload GB | refit best ms | median ms | GB/s | "
          "ceiling: cudaMemcpyAsync ms | refit kernel ms | torch copy_ ms | % of the fastest | "
          "(a) per-tensor IPC ms | (b) 2 x 1 GiB ms | refit vs (b) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, bname, fmt in SHAPES:
        r = load(os.path.join(out, "refit-%s.json" % name))
        if r is None or "best_s" not in r:
            print("| %s | %s | - | - | (no result) | | | | | | | | | |" % (name, fmt))
            continue
        summary["refit"][name] = r
        cm, ck, ct, bname_c, best = ceilings(r, floors)
        # the baselines are bf16 shapes; the same run's, or "not run"
        b = bshapes.get(bname, {}) if fmt == "bf16" else {}
        a_ms = b.get("a", {}).get("best_s")
        b_ms = b.get("b", {}).get("best_s")
        nb = "-" if fmt != "bf16" else "not run"
        frac = best / r["best_s"] if best else None
        r["best_ceiling"] = {"name": bname_c, "payload_s": best, "fraction": frac}
        print("| %s | %s | %d | %.2f | %.3f | %.3f | %.0f | %s | %s | %s | %s | %s | %s | %s |" % (
            name, fmt, r["tensors"], r["payload_bytes"] / 1e9, r["best_s"] * 1e3,
            r["median_s"] * 1e3, r["payload_GBps_best"], ms(cm), ms(ck), ms(ct),
            "%.1f%% (%s)" % (100 * frac, bname_c) if frac else "-",
            "%.1f" % (a_ms * 1e3) if a_ms else nb,
            "%.1f" % (b_ms * 1e3) if b_ms else nb,
            "%.1fx" % (b_ms / r["best_s"]) if b_ms else "-"))
        rows.append((name, fmt, r))
    refit = summary["refit"]
    t = summary["targets"]
    # issue #18 item 2: bf16 at 95% or more of the fastest same-run ceiling, fp8-block at 90%,
    # wna16 at most 1.2x bf16 per byte
    for name, goal in (("llama-3.1-8b", 0.95), ("qwen3-30b-a3b-24l-bf16", 0.95),
                       ("qwen3-30b-a3b-24l-fp8", 0.90)):
        f = refit.get(name, {}).get("best_ceiling", {}).get("fraction")
        if f:
            t["%s >= %d%% of the fastest ceiling" % (name, round(goal * 100))] = {
                "value": f, "met": f >= goal}
    bf, wn = refit.get("qwen3-30b-a3b-24l-bf16"), refit.get("qwen3-30b-a3b-24l-wna16")
    if bf and wn:
        per_b = (wn["best_s"] / wn["payload_bytes"]) / (bf["best_s"] / bf["payload_bytes"])
        t["wna16 time per byte / bf16 time per byte <= 1.2"] = {"value": per_b,
                                                                "met": per_b <= 1.2}
    if t:
        print()
        for k, v in t.items():
            print("- %s: %.3f (%s)" % (k, v["value"], "met" if v["met"] else "NOT met"))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
