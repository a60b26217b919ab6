#!/usr/bin/python3
"""The scale model's prediction beside refit's measured time on this host (issue 19 item 3).

    /usr/bin/python3 bench/simulate_check.py [BUILD_DIR] [OUT_DIR]

1. Measures the MPI point-to-point rate here (bench/mpi_rate.py: one pair, then 2 pairs at
   once) and writes a machine description of this host: one node, 8 "GPUs" (ranks), the
   per-pair rate as the intra-node link (nvlink_bandwidth), the aggregate rate of the 2 pairs
   as the node's shared fabric (node_bandwidth: every rank's copies share the same cores and
   memory) and the small-message latency as the per-chunk cost.
2. For each shape (a Qwen3-0.6B cut to 4 layers and a 32768 vocabulary, 8 MiB chunks, at 4
   and 8 ranks, broadcast and p2p) runs refit-run --steps 3 --verify none and takes the median
   of the timed updates (--bench-json), and runs refit-plan --simulate on the same topology.
3. Prints one table (and OUT_DIR/table.md, OUT_DIR/summary.json; OUT_DIR defaults to
   BUILD_DIR/simulate-check): predicted seconds, the measured update (median of the timed
   ones), and from the profile the trainers' production and send phase (slowest trainer,
   median update), each against the prediction.
Not a test: timings on a shared 2-core host vary by 2x from run to run.
"""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = [os.path.join(ROOT, "tools", "mpirun.sh")]
CFG = os.path.join(ROOT, "jobs", "models", "qwen3-0.6b.config.json")
# name, trainer, rollout, ranks
SHAPES = [("tp1pp2-to-tp2", "{ tp: 1, pp: 2 }", "{ engines: 1, tp: 2 }", 4),
          ("tp2-to-2xtp1", "{ tp: 2 }", "{ engines: 2, tp: 1 }", 4),
          ("tp2pp2-to-tp4", "{ tp: 2, pp: 2 }", "{ engines: 1, tp: 4 }", 8)]


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit("simulate_check.py: failed: %s" % " ".join(cmd))
    return r.stdout


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(build, "simulate-check")
    os.makedirs(out, exist_ok=True)
    rate = [json.loads(sh(MPIRUN + ["-np", str(n), "/usr/bin/python3",
                                    os.path.join(ROOT, "bench", "mpi_rate.py"), "8", "16"])
                       .strip().splitlines()[-1]) for n in (2, 4)]
    machine = os.path.join(out, "machine-this-host.yaml")
    with open(machine, "w") as f:
        f.write("# written by bench/simulate_check.py from bench/mpi_rate.py on this host\n"
                "machine:\n  name: this-host-mpi\n  gpus_per_node: 8\n  nodes: 1\n"
                "  nvlink_bandwidth: %.0fB/s\n  nic_bandwidth: %.0fB/s\n"
                "  node_bandwidth: %.0fB/s\n  chunk_latency_us: %.3f\n" %
                (rate[0]["pair_Bps"], rate[0]["pair_Bps"], rate[1]["aggregate_Bps"],
                 rate[0]["latency_s"] * 1e6))
    rows = []
    for name, tr, ro, np_ in SHAPES:
        for mode in ("broadcast", "p2p"):
            topo = os.path.join(out, "qwen3-0.6b-4l-%s-%s.yaml" % (name, mode))
            with open(topo, "w") as f:
                f.write("# written by bench/simulate_check.py\nname: %s-%s\n"
                        "model: { config: %s, overrides: { num_hidden_layers: 4, "
                        "vocab_size: 32768 } }\ntrainer: %s\nrollout: %s\n"
                        "transfer: { mode: %s, chunk_bytes: 8MiB, timeout_s: 600, "
                        "slack_s: 600 }\n" % (name, mode, CFG, tr, ro, mode))
            sj = os.path.join(out, "sim-%s-%s.json" % (name, mode))
            sh([os.path.join(build, "refit-plan"), "--topology", topo, "--simulate", "--machine",
                machine, "--mode", mode, "--json", sj])
            sim = json.load(open(sj))["modes"][0]
            bj = os.path.join(out, "bench-%s-%s.json" % (name, mode))
            pdir = os.path.join(out, "profile-%s-%s" % (name, mode))
            sh(MPIRUN + ["-np", str(np_), os.path.join(build, "refit-run"), "--topology", topo,
                         "--steps", "3", "--verify", "none", "--bench-json", bj,
                         "--profile-dir", pdir])
            b = json.load(open(bj))
            wire, prod, send = [], {}, {}
            for p in glob.glob(os.path.join(pdir, "profile-rank*.jsonl")):
                for line in open(p):
                    u = json.loads(line)
                    if u["update"] > 1 and u["counters"]["bytes_received"] > 0:
                        wire.append(u["receiver"]["wire_s"])
                    if u["update"] > 1 and "trainer" in u:
                        k = u["update"]
                        prod[k] = max(prod.get(k, 0), u["trainer"]["produce_s"])
                        send[k] = max(send.get(k, 0), u["trainer"]["send_s"])
            med = lambda d: sorted(d.values())[len(d) // 2] if d else None
            rows.append({"shape": name, "mode": mode, "ranks": np_,
                         "wire_bytes": sim["wire_bytes"], "gather_bytes": sim["gather_bytes"],
                         "busiest_link": sim["busiest_link"], "predicted_s": sim["predicted_s"],
                         "ordered_s": sim["ordered_s"],
                         "measured_s": b["median_s"], "best_s": b["best_s"],
                         "ratio": b["median_s"] / sim["predicted_s"],
                         "receiver_wire_s": max(wire) if wire else None,
                         "produce_s": med(prod), "send_s": med(send),
                         "send_ratio": med(send) / sim["predicted_s"] if send else None})
    hdr = ("| shape | mode | ranks | wire MB | gather MB | busiest link | predicted s | ordered s | "
           "update s (median) | update / predicted | trainer produce s | trainer send s | "
           "send / predicted |")
    lines = ["machine: %s" % open(machine).read().replace("\n", " "), "", hdr,
             "|" + "---|" * 13]
    for r in rows:
        lines.append("| %s | %s | %d | %.1f | %.1f | %s | %.3f | %.3f | %.3f | %.1f | %.3f | %.3f | "
                     "%.1f |" % (
            r["shape"], r["mode"], r["ranks"], r["wire_bytes"] / 1e6, r["gather_bytes"] / 1e6,
            r["busiest_link"], r["predicted_s"], r["ordered_s"], r["measured_s"], r["ratio"],
            r["produce_s"],
            r["send_s"], r["send_ratio"]))
    text = "\n".join(lines) + "\n"
    print(text)
    open(os.path.join(out, "table.md"), "w").write(text)
    json.dump({"rate": rate, "rows": rows}, open(os.path.join(out, "summary.json"), "w"),
              indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
