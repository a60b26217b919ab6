#!/usr/bin/python3
"""The anchors of issue 19, predicted (refit-plan --simulate; docs/simulate.md#the-anchors).

    /usr/bin/python3 bench/simulate_anchors.py [BUILD_DIR] [--json OUT.json]

Simulates the four jobs/topologies/scale/ anchors in p2p and broadcast on
machine-h100-400g.yaml and prints one markdown table: refit's predicted p2p time, the wire
floor (the busiest NIC's bytes / 50 GB/s; the busiest NVLink's where no byte leaves the node),
predicted / floor (target: at most 1.3), the bound (no schedule of these receivers' bytes
beats it), the same bytes in refit's send order (ordered_s: the senders' window of
transfer.p2p_inflight receivers) and with one receiver at a time per sender (ordered_one_s,
the order before the window), broadcast's prediction, and the peers' published times for the same model size
(issue 19's text). Exits 1 if an anchor misses the 1.3x target. The two 256-GPU anchors take
15-25 s each here (the p2p schedule of 128 receivers over ~10^5 tensors, and the ordered model).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALE = os.path.join(ROOT, "jobs", "topologies", "scale")
ANCHORS = [
    ("Qwen3-30B-A3B, 8 GPUs (TP1 PP4 -> 2 x TP2)", "qwen3-30b-a3b-tp1pp4-to-2xtp2.yaml",
     "NeMo-RL shard-to-shard, 30B MoE: ~0.5 s"),
    ("Qwen3-235B-A22B, 64 GPUs (32 -> 4 x TP8)", "qwen3-235b-a22b-32-to-4xtp8.yaml",
     "NeMo-RL: ~3 s"),
    ("DeepSeek-V3 fp8, 256 -> 128 GPUs", "deepseek-v3-fp8-256-to-16xtp8.yaml",
     "none for 671B in the issue"),
    ("Kimi-K2 fp8, 256 -> 128 GPUs", "kimi-k2-fp8-256-to-16xtp8.yaml",
     "checkpoint-engine 16 s (256 H20); Awex 6 s; one-sided RDMA 1.3 s (all 1T)"),
]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build = args[0] if args else os.path.join(ROOT, "build")
    jout = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    machine = os.path.join(SCALE, "machine-h100-400g.yaml")
    rows, miss = [], 0
    for label, topo, peers in ANCHORS:
        with tempfile.TemporaryDirectory() as td:
            js = os.path.join(td, "s.json")
            t0 = time.time()
            r = subprocess.run([os.path.join(build, "refit-plan"), "--topology",
                                os.path.join(SCALE, topo), "--simulate", "--machine", machine,
                                "--json", js], capture_output=True, text=True)
            dt = time.time() - t0
            if r.returncode != 0:
                raise SystemExit("simulate_anchors.py: %s: %s" % (topo, r.stderr.strip()))
            d = json.load(open(js))
        m = {x["mode"]: x for x in d["modes"]}
        p, b = m["p2p"], m["broadcast"]
        ratio = p["predicted_s"] / p["floor_s"] if p["floor_s"] > 0 else 0
        miss += ratio > 1.3
        rows.append({"anchor": label, "topology": topo, "tensors": d["tensors"],
                     "payload_GB": p["payload_bytes"] / 1e9, "nodes": p["nodes"],
                     "p2p_predicted_s": p["predicted_s"], "p2p_floor_s": p["floor_s"],
                     "p2p_floor_link": p["floor_link"], "p2p_bound_s": p["bound_s"],
                     "p2p_busiest": p["busiest_link"], "ratio": ratio,
                     "p2p_ordered_s": p["ordered_s"],
                     "ordered_ratio": p["ordered_s"] / p["floor_s"] if p["floor_s"] > 0 else 0,
                     "p2p_ordered_rank_s": p["ordered_rank_s"],
                     "p2p_ordered_one_s": p["ordered_one_s"], "p2p_inflight": p["p2p_inflight"],
                     "p2p_ordered_asc_s": p["ordered_asc_s"],
                     "p2p_max_send_GB": p["max_send_bytes"] / 1e9,
                     "p2p_max_recv_GB": p["max_recv_bytes"] / 1e9,
                     "quant_in_GB": p["quant_in_bytes"] / 1e9,
                     "broadcast_predicted_s": b["predicted_s"],
                     "broadcast_gather_GB": b["gather_bytes"] / 1e9,
                     "peers": peers, "simulate_s": dt})
    print("| anchor | tensors | payload GB | nodes | p2p predicted s | wire floor s (link) | "
          "predicted / floor | bound s | p2p in refit's send order s (/ floor; window) | before: "
          "one receiver at a time per sender s (/ floor) | earlier: receivers "
          "in rank order s (/ floor) | busiest sender / "
          "receiver GB | trainer fp8 quantizer input GB (busiest rank) | broadcast predicted s | "
          "peers (published) | simulate s |")
    print("|" + "---|" * 16)
    for r in rows:
        print("| %s | %d | %.1f | %d | %.3f | %.3f (%s) | %.3f | %.3f | %.3f (%.2fx; %d) "
              "| %.3f (%.2fx) | %.3f (%.2fx) | %.1f / %.1f "
              "| %s | %.3g | %s | %.1f |" % (
                  r["anchor"], r["tensors"], r["payload_GB"], r["nodes"], r["p2p_predicted_s"],
                  r["p2p_floor_s"], r["p2p_floor_link"], r["ratio"], r["p2p_bound_s"],
                  r["p2p_ordered_s"], r["ordered_ratio"], r["p2p_inflight"],
                  r["p2p_ordered_one_s"], r["p2p_ordered_one_s"] / r["p2p_floor_s"],
                  r["p2p_ordered_rank_s"], r["p2p_ordered_rank_s"] / r["p2p_floor_s"],
                  r["p2p_max_send_GB"], r["p2p_max_recv_GB"],
                  "%.1f" % r["quant_in_GB"] if r["quant_in_GB"] else "-",
                  r["broadcast_predicted_s"], r["peers"], r["simulate_s"]))
    if jout:
        json.dump(rows, open(jout, "w"), indent=1)
    print("simulate_anchors.py: %s" % ("every anchor's p2p prediction within 1.3x of its floor"
                                       if miss == 0 else "%d anchor(s) above 1.3x" % miss))
    om = sum(r["ordered_ratio"] > 1.3 for r in rows)
    print("simulate_anchors.py: in refit's send order (ordered_s): %s" %
          ("every anchor within 1.3x" if om == 0 else
           "%d anchor(s) above 1.3x (docs/simulate.md says which link and why)"
           % om))
    return 1 if miss else 0


if __name__ == "__main__":
    sys.exit(main())
