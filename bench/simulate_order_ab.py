#!/usr/bin/python3
"""refit-run p2p before and after the any-order receive (docs/simulate.md), same script run.

    /usr/bin/python3 bench/simulate_order_ab.py BEFORE_BUILD AFTER_BUILD [RUNS] [OUT_DIR]

BEFORE_BUILD: a build of the tree before receivers took any ready sender (for example
`git archive ccb7f5e | tar -x -C /tmp/before` built there); AFTER_BUILD: this tree's. For
Qwen3-0.6B cut to 4 layers and a 32768 vocabulary (193 MB, 8 MiB chunks) in p2p at 6 ranks
(TP2 PP2 -> TP2) and 8 ranks (TP2 PP2 -> TP4), runs refit-run --steps 3 --verify none RUNS
times per build (default 3), the builds interleaved, and prints the median of the timed
updates (--bench-json) per run, the median over runs, and the slowest trainer's send phase
(profile, median update). Not a test: on a shared 2-core host the runs are CPU-bound and vary.
"""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPIRUN = [os.path.join(ROOT, "tools", "mpirun.sh")]
CFG = os.path.join(ROOT, "jobs", "models", "qwen3-0.6b.config.json")
SHAPES = [("tp2pp2-to-tp2", "{ tp: 2, pp: 2 }", "{ engines: 1, tp: 2 }", 6),
          ("tp2pp2-to-tp4", "{ tp: 2, pp: 2 }", "{ engines: 1, tp: 4 }", 8)]


def run(build, topo, np_, out, tag):
    bj = os.path.join(out, "bench-%s.json" % tag)
    pdir = os.path.join(out, "profile-%s" % tag)
    r = subprocess.run(MPIRUN + ["-np", str(np_), os.path.join(build, "refit-run"), "--topology",
                                 topo, "--steps", "3", "--verify", "none", "--bench-json", bj,
                                 "--profile-dir", pdir], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        raise SystemExit("simulate_order_ab.py: refit-run failed (%s)" % tag)
    send = {}
    for p in glob.glob(os.path.join(pdir, "profile-rank*.jsonl")):
        for line in open(p):
            u = json.loads(line)
            if u["update"] > 1 and "trainer" in u:
                send[u["update"]] = max(send.get(u["update"], 0), u["trainer"]["send_s"])
    s = sorted(send.values())
    return json.load(open(bj))["median_s"], s[len(s) // 2] if s else 0.0


def main():
    before, after = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    out = sys.argv[4] if len(sys.argv) > 4 else os.path.join(after, "simulate-order-ab")
    os.makedirs(out, exist_ok=True)
    res = {}
    for name, tr, ro, np_ in SHAPES:
        topo = os.path.join(out, "qwen3-0.6b-4l-%s-p2p.yaml" % name)
        with open(topo, "w") as f:
            f.write("# written by bench/simulate_order_ab.py\nname: %s-p2p\n"
                    "model: { config: %s, overrides: { num_hidden_layers: 4, "
                    "vocab_size: 32768 } }\ntrainer: %s\nrollout: %s\n"
                    "transfer: { mode: p2p, chunk_bytes: 8MiB, timeout_s: 600, "
                    "slack_s: 600 }\n" % (name, CFG, tr, ro))
        for i in range(runs):
            for which, build in (("before", before), ("after", after)):
                t = run(build, topo, np_, out, "%s-%s-%d" % (name, which, i))
                res.setdefault((name, np_, which), []).append(t)
                print("%s %d ranks %s run %d: update %.3f s, trainer send %.3f s" %
                      (name, np_, which, i, t[0], t[1]), flush=True)
    med = lambda v: sorted(v)[len(v) // 2]
    print("\n| shape | ranks | order | update s (runs) | update s (median) | trainer send s (median) |")
    print("|---|---|---|---|---|---|")
    rows = []
    for (name, np_, which), v in res.items():
        print("| %s | %d | %s | %s | %.3f | %.3f |" % (
            name, np_, which, ", ".join("%.2f" % x[0] for x in v), med([x[0] for x in v]),
            med([x[1] for x in v])))
        rows.append({"shape": name, "ranks": np_, "order": which, "runs": v})
    json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
