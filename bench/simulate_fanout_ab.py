#!/usr/bin/python3
"""refit-run p2p with one receiver at a time per sender against the default window, in one
script run, each beside the scale model's prediction for it (docs/simulate.md).

    /usr/bin/python3 bench/simulate_fanout_ab.py [BUILD_DIR] [RUNS] [OUT_DIR]

Measures this host's MPI rates as bench/simulate_check.py does (bench/mpi_rate.py) and writes
the same machine file. For Qwen3-0.6B cut to 4 layers and a 32768 vocabulary (193 MB, 8 MiB
chunks, integrity on) in p2p at 4, 6 and 8 ranks, writes each topology twice, with
transfer.p2p_inflight 1 (one receiver after another: the order before rf_xfer_send_p2p's
window) and without it (the default window), runs refit-run --steps 3 --verify none RUNS
times each (default 3), the two interleaved, and runs refit-plan --simulate on each. Prints
one table: the model's ordered_s and predicted_s, the measured update (median of the timed
updates, --bench-json; median over runs) and the slowest trainer's send phase (profile, median
update; median over runs). Not a test: on a shared 2-core host the runs are CPU-bound and vary.
"""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = [os.path.join(ROOT, "tools", "mpirun.sh")]
CFG = os.path.join(ROOT, "jobs", "models", "qwen3-0.6b.config.json")
SHAPES = [("tp2-to-2xtp1", "{ tp: 2 }", "{ engines: 2, tp: 1 }", 4),
          ("tp2pp2-to-tp2", "{ tp: 2, pp: 2 }", "{ engines: 1, tp: 2 }", 6),
          ("tp2pp2-to-tp4", "{ tp: 2, pp: 2 }", "{ engines: 1, tp: 4 }", 8)]
WINDOWS = (("one", "p2p_inflight: 1, "), ("window", ""))


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit("simulate_fanout_ab.py: failed: %s" % " ".join(cmd))
    return r.stdout


def run(build, topo, np_, out, tag):
    bj = os.path.join(out, "bench-%s.json" % tag)
    pdir = os.path.join(out, "profile-%s" % tag)
    sh(MPIRUN + ["-np", str(np_), os.path.join(build, "refit-run"), "--topology", topo,
                 "--steps", "3", "--verify", "none", "--bench-json", bj, "--profile-dir", pdir])
    send = {}
    for p in glob.glob(os.path.join(pdir, "profile-rank*.jsonl")):
        for line in open(p):
            u = json.loads(line)
            if u["update"] > 1 and "trainer" in u:
                send[u["update"]] = max(send.get(u["update"], 0), u["trainer"]["send_s"])
    s = sorted(send.values())
    return json.load(open(bj))["median_s"], s[len(s) // 2] if s else 0.0


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    out = sys.argv[3] if len(sys.argv) > 3 else os.path.join(build, "simulate-fanout-ab")
    os.makedirs(out, exist_ok=True)
    rate = [json.loads(sh(MPIRUN + ["-np", str(n), "/usr/bin/python3",
                                    os.path.join(ROOT, "bench", "mpi_rate.py"), "8", "16"])
                       .strip().splitlines()[-1]) for n in (2, 4)]
    machine = os.path.join(out, "machine-this-host.yaml")
    with open(machine, "w") as f:
        f.write("# written by bench/simulate_fanout_ab.py from bench/mpi_rate.py on this host\n"
                "machine:\n  name: this-host-mpi\n  gpus_per_node: 8\n  nodes: 1\n"
                "  nvlink_bandwidth: %.0fB/s\n  nic_bandwidth: %.0fB/s\n"
                "  node_bandwidth: %.0fB/s\n  chunk_latency_us: %.3f\n" %
                (rate[0]["pair_Bps"], rate[0]["pair_Bps"], rate[1]["aggregate_Bps"],
                 rate[0]["latency_s"] * 1e6))
    res, sim = {}, {}
    for name, tr, ro, np_ in SHAPES:
        for which, knob in WINDOWS:
            topo = os.path.join(out, "qwen3-0.6b-4l-%s-p2p-%s.yaml" % (name, which))
            with open(topo, "w") as f:
                f.write("# written by bench/simulate_fanout_ab.py\nname: %s-p2p-%s\n"
                        "model: { config: %s, overrides: { num_hidden_layers: 4, "
                        "vocab_size: 32768 } }\ntrainer: %s\nrollout: %s\n"
                        "transfer: { mode: p2p, %schunk_bytes: 8MiB, timeout_s: 600, "
                        "slack_s: 600 }\n" % (name, which, CFG, tr, ro, knob))
            sj = os.path.join(out, "sim-%s-%s.json" % (name, which))
            sh([os.path.join(build, "refit-plan"), "--topology", topo, "--simulate", "--machine",
                machine, "--mode", "p2p", "--json", sj])
            sim[(name, which)] = (topo, json.load(open(sj))["modes"][0])
        for i in range(runs):
            for which, _ in WINDOWS:
                t = run(build, sim[(name, which)][0], np_, out, "%s-%s-%d" % (name, which, i))
                res.setdefault((name, np_, which), []).append(t)
                print("%s %d ranks %s run %d: update %.3f s, trainer send %.3f s" %
                      (name, np_, which, i, t[0], t[1]), flush=True)
    med = lambda v: sorted(v)[len(v) // 2]
    lines = ["machine: %s" % open(machine).read().replace("\n", " "), "",
             "| shape | ranks | sender order | window | predicted s | ordered s | update s (runs) "
             "| update s (median) | trainer send s (median) | send / ordered |",
             "|" + "---|" * 10]
    rows = []
    for (name, np_, which), v in res.items():
        m = sim[(name, which)][1]
        u, sd = med([x[0] for x in v]), med([x[1] for x in v])
        lines.append("| %s | %d | %s | %d | %.3f | %.3f | %s | %.3f | %.3f | %.1f |" % (
            name, np_, "one receiver at a time" if which == "one" else "window",
            m["p2p_inflight"], m["predicted_s"], m["ordered_s"],
            ", ".join("%.2f" % x[0] for x in v), u, sd, sd / m["ordered_s"]))
        rows.append({"shape": name, "ranks": np_, "order": which,
                     "p2p_inflight": m["p2p_inflight"], "predicted_s": m["predicted_s"],
                     "ordered_s": m["ordered_s"], "runs": v})
    text = "\n".join(lines) + "\n"
    print(text)
    open(os.path.join(out, "table.md"), "w").write(text)
    json.dump({"rate": rate, "rows": rows}, open(os.path.join(out, "summary.json"), "w"),
              indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
