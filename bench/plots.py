#!/usr/bin/env python3
"""bench/plots.py: PNG plots of the benchmarks' JSON for docs/benchmarks.md (issue #18 item 6).

    python3 bench/plots.py [--colocated DIR] [--integrity ON.json OFF.json]
                           [--reload-ab reload-ab.json] --out DIR

--colocated DIR: bench/colocated.sh's output (DIR/refit-<shape>.json from refit-run
  --bench-json, DIR/baselines.json from bench/colocated_baselines.py --json, either may be
  missing): colocated-gbps.png, GB/s per shape of refit (best update) against the same run's
  copy ceiling, the PyTorch copy floor and the two PyTorch baselines; update-vs-payload.png,
  refit's best update time against its payload, with the ceiling's time for the same bytes.
--integrity ON.json OFF.json: two refit-run --bench-json files of one shape, integrity on and
  off (transfer.integrity): integrity.png, best and median update time of each and the cost.
--reload-ab FILE: bench/reload_ab_report.py's reload-ab.json: reload-ab.png, A (layerwise)
  against B (auto) steady time per row, B's mapped / layerwise layer counts on the bars.

Prints the path of every PNG written. matplotlib (Debian's python3-matplotlib), Agg backend.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# bench/colocated.sh's shapes: refit topology suffix -> (label, baseline shape, format)
COLOCATED = [
    ("llama-3.1-8b", "Llama-3.1-8B bf16", "llama8b", "bf16"),
    ("qwen3-30b-a3b-24l-bf16", "Qwen3-30B-A3B 24L bf16", "qwen3moe24", "bf16"),
    ("qwen3-30b-a3b-24l-wna16", "Qwen3-30B-A3B 24L wna16", "qwen3moe24", "wna16"),
    ("qwen3-30b-a3b-24l-fp8", "Qwen3-30B-A3B 24L fp8-block", "qwen3moe24", "fp8-block"),
]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(path)
    return path


def plot_colocated(d, out):
    base = load(os.path.join(d, "baselines.json")) or {}
    bsh = {s.get("shape"): s for s in base.get("shapes", [])}
    rows = []
    for name, label, bname, fmt in COLOCATED:
        r = load(os.path.join(d, "refit-%s.json" % name))
        if r is None or "best_s" not in r:
            continue
        b = bsh.get(bname, {}) if fmt == "bf16" else {}
        rows.append((label, r, b))
    if not rows:
        print("plots: %s: no refit-<shape>.json with timed updates" % d, file=sys.stderr)
        return False
    # GB/s per shape against the ceiling and the baselines (the same payload's bytes)
    series = [("refit (best update)", lambda r, b: r["payload_bytes"] / r["best_s"]),
              ("copy ceiling (same run)",
               lambda r, b: r["copy_ceiling"]["bytes"] / r["copy_ceiling"]["best_s"]
               if r.get("copy_ceiling") else None),
              ("PyTorch copy floor", lambda r, b: r["payload_bytes"] / b["copy_floor_s"]
               if b.get("copy_floor_s") else None),
              ("(a) per-tensor IPC", lambda r, b: r["payload_bytes"] / b["a"]["best_s"]
               if b.get("a", {}).get("best_s") else None),
              ("(b) 2 x 1 GiB IPC", lambda r, b: r["payload_bytes"] / b["b"]["best_s"]
               if b.get("b", {}).get("best_s") else None)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    w = 0.8 / len(series)
    for k, (lab, fn) in enumerate(series):
        xs, ys = [], []
        for i, (_, r, b) in enumerate(rows):
            v = fn(r, b)
            if v:
                xs.append(i + (k - (len(series) - 1) / 2) * w)
                ys.append(v / 1e9)
        if ys:
            bars = ax.bar(xs, ys, w, label=lab)
            if k == 0:
                for x, y in zip(xs, ys):
                    ax.annotate("%.0f" % y, (x, y), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([lab for lab, _, _ in rows], fontsize=8)
    ax.set_ylabel("GB/s (payload bytes / time)")
    ax.set_title("Colocated refit on one GPU: rate per shape")
    ax.legend(fontsize=7)
    save(fig, out, "colocated-gbps.png")
    # update time against payload
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for lab, r, b in rows:
        gb, ms = r["payload_bytes"] / 1e9, r["best_s"] * 1e3
        ax.scatter([gb], [ms], s=30)
        ax.annotate(lab, (gb, ms), fontsize=7, xytext=(4, 2), textcoords="offset points")
    c = [r.get("copy_ceiling") for _, r, _ in rows if r.get("copy_ceiling")]
    if c:
        rate = max(x["bytes"] / x["best_s"] for x in c)
        top = max(r["payload_bytes"] for _, r, _ in rows)
        ax.plot([0, top / 1e9], [0, top / rate * 1e3], "--", color="gray",
                label="copy ceiling %.0f GB/s" % (rate / 1e9))
        ax.legend(fontsize=7)
    ax.set_xlabel("payload GB")
    ax.set_ylabel("best update ms")
    ax.set_title("Update time against payload")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    save(fig, out, "update-vs-payload.png")
    return True


def plot_integrity(on_path, off_path, out):
    on, off = load(on_path), load(off_path)
    if not on or not off or "best_s" not in on or "best_s" not in off:
        print("plots: --integrity: %s / %s lack timed updates" % (on_path, off_path),
              file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(5.5, 4))
    labels = ["best", "median"]
    for k, (lab, r) in enumerate((("integrity off", off), ("integrity on", on))):
        ys = [r["best_s"] * 1e3, r["median_s"] * 1e3]
        ax.bar([x + (k - 0.5) * 0.38 for x in range(2)], ys, 0.38, label=lab)
    cost = on["median_s"] / off["median_s"] - 1.0
    ax.set_xticks(range(2))
    ax.set_xticklabels(labels)
    ax.set_ylabel("update ms")
    ax.set_title("%s: integrity on costs %+.1f%% (median)" % (on.get("topology", "?"), cost * 100),
                 fontsize=9)
    ax.legend(fontsize=8)
    save(fig, out, "integrity.png")
    return True


def plot_reload_ab(path, out):
    j = load(path)
    rows = [r for r in (j or {}).get("rows", []) if r["A"].get("steady_s") and
            r["B"].get("steady_s")]
    if not rows:
        print("plots: --reload-ab: %s has no row with both steady times" % path, file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(max(7, 0.75 * len(rows) + 2), 4.8))
    xs = range(len(rows))
    a = [r["A"]["steady_s"] * 1e3 for r in rows]
    b = [r["B"]["steady_s"] * 1e3 for r in rows]
    ax.bar([x - 0.2 for x in xs], a, 0.4, label="A: --reload-policy layerwise")
    ax.bar([x + 0.2 for x in xs], b, 0.4, label="B: --reload-policy auto")
    for x, r, y in zip(xs, rows, b):
        lb = r["B"].get("layers") or {}
        if lb:
            ax.annotate("%d/%d" % (lb["direct"] + lb["runtime_view"], lb["layerwise"]),
                        (x + 0.2, y), ha="center", va="bottom", fontsize=6)
        if not r.get("digests_equal"):
            ax.annotate("digest!", (x, max(a[x], y)), ha="center", va="bottom", color="red",
                        fontsize=7)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["name"] for r in rows], rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("steady update ms (median after the first)")
    ax.set_yscale("log")
    ax.set_title("A/B reload: layerwise vs auto (labels: B's mapped / layerwise layers)",
                 fontsize=9)
    ax.legend(fontsize=7)
    save(fig, out, "reload-ab.png")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--colocated", metavar="DIR")
    ap.add_argument("--integrity", nargs=2, metavar=("ON_JSON", "OFF_JSON"))
    ap.add_argument("--reload-ab", metavar="JSON")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not (args.colocated or args.integrity or args.reload_ab):
        ap.error("nothing to plot: give --colocated, --integrity or --reload-ab")
    os.makedirs(args.out, exist_ok=True)
    ok = True
    if args.colocated:
        ok &= plot_colocated(args.colocated, args.out)
    if args.integrity:
        ok &= plot_integrity(args.integrity[0], args.integrity[1], args.out)
    if args.reload_ab:
        ok &= plot_reload_ab(args.reload_ab, args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
