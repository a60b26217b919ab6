#!/usr/bin/python3
"""Predicted update time against the number of nodes (refit-plan --simulate; docs/simulate.md).

    /usr/bin/python3 bench/simulate_plot.py --topology FILE [--machine FILE] [--build DIR]
        [--engines 1,2,4,8,16] [--modes broadcast,p2p] [--png OUT.png] [--json OUT.json]

Keeps the topology's trainer and scales its rollout side: one copy of the file per engine
count (rollout.engines rewritten, in the build tree), each simulated on the machine; the nodes
are the simulation's (trainer GPUs + rollout GPUs over gpus_per_node). Plots, per mode, the
predicted time and the wire floor against the nodes (log-log), and prints the points.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", required=True)
    ap.add_argument("--machine", default=os.path.join(ROOT, "jobs", "topologies", "scale",
                                                      "machine-h100-400g.yaml"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--engines", default="1,2,4,8,16")
    ap.add_argument("--modes", default="broadcast,p2p")
    ap.add_argument("--png", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    text = open(a.topology).read()
    if not re.search(r"engines:\s*\d+", text):
        raise SystemExit("simulate_plot.py: %s has no rollout engines: N to scale" % a.topology)
    pts = {m: [] for m in a.modes.split(",")}
    folder = os.path.dirname(os.path.abspath(a.topology))
    for e in [int(x) for x in a.engines.split(",")]:
        # the copy sits beside the original so that model.config resolves the same way
        fd, topo = tempfile.mkstemp(suffix=".yaml", prefix=".simplot-", dir=folder)
        with os.fdopen(fd, "w") as f:
            f.write(re.sub(r"engines:\s*\d+", "engines: %d" % e, text, count=1))
        js = topo + ".json"
        try:
            for m in pts:
                r = subprocess.run([os.path.join(a.build, "refit-plan"), "--topology", topo,
                                    "--simulate", "--machine", a.machine, "--mode", m,
                                    "--json", js], capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit("simulate_plot.py: engines %d: %s" % (e, r.stderr.strip()))
                s = json.load(open(js))["modes"][0]
                pts[m].append({"engines": e, "nodes": s["nodes"], "predicted_s": s["predicted_s"],
                               "floor_s": s["floor_s"], "bound_s": s["bound_s"],
                               "busiest_link": s["busiest_link"]})
                print("%-9s engines %3d nodes %4d predicted %9.3f s floor %9.3f s bound %9.3f s"
                      " (%s)" % (m, e, s["nodes"], s["predicted_s"], s["floor_s"],
                                 s["bound_s"], s["busiest_link"]))
        finally:
            os.unlink(topo)
            if os.path.exists(js):
                os.unlink(js)
    if a.json:
        json.dump(pts, open(a.json, "w"), indent=1)
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for m, p in pts.items():
            x = [q["nodes"] for q in p]
            ax.plot(x, [q["predicted_s"] for q in p], marker="o", label="%s predicted" % m)
            ax.plot(x, [q["floor_s"] for q in p], linestyle="--", label="%s wire floor" % m)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes (trainer + rollout)")
        ax.set_ylabel("update time, s")
        ax.set_title(os.path.basename(a.topology).replace(".yaml", ""), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)
        print("simulate_plot.py: wrote %s" % a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
