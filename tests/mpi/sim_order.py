#!/usr/bin/python3
"""The p2p senders' order: the transport against the scale model (docs/simulate.md).

    sim_order.py REFIT_PLAN TOPOLOGY -- LAUNCHER refit-run ARGS...

Runs refit-run (the command after --, which gets --topology TOPOLOGY --steps 2, with
REFIT_LOG_LEVEL=info) and refit-plan --simulate --json on the same p2p topology. Each p2p
sender logs, per update (rf_xfer_send_p2p on mpi, transport_mpi_chunks.c):

    update U: rank S sent N pairs, up to M receivers in flight at once (window K, ...); the
    receiver changed C times between consecutive chunks; pairs joined in the order of ranks
    a,b,...

and the simulation gives each pair its place in its sender's order ("order") and the window
("p2p_inflight"). Requires, in every update, for every sender: its pairs joined its window in
the simulation's order (the model takes the transport's order); and the window the model
assumed: with p2p_inflight 1, one receiver at a time (M == 1 and C == N - 1); with more, at
least min(2, N) receivers in flight (the window is min(p2p_inflight, N)) and, where the pairs have more chunks than there are
pairs, a receiver change more often than once per pair (C >= N), which no sender that serves
its receivers one after another shows.
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

LINE = re.compile(r"update (\d+): rank (\d+) sent (\d+) pairs, up to (\d+) receivers in flight "
                  r"at once \(window (\d+),.*?the receiver changed (\d+) times between "
                  r"consecutive chunks; pairs joined in the order of ranks ([0-9,]*)")


def main():
    if "--" not in sys.argv or sys.argv.index("--") != 3:
        print(__doc__)
        return 2
    plan, topo = sys.argv[1:3]
    run = sys.argv[4:] + ["--topology", topo, "--steps", "2"]
    env = dict(os.environ, REFIT_LOG_LEVEL="info")
    r = subprocess.run(run, capture_output=True, text=True, env=env)
    out = r.stdout + r.stderr
    if r.returncode != 0 or "refit: COMMITTED 2 update(s)" not in r.stdout:
        print(out[-4000:])
        print("sim_order.py: refit-run did not commit 2 updates (exit %d)" % r.returncode)
        return 1
    with tempfile.TemporaryDirectory() as td:
        js = os.path.join(td, "sim.json")
        s = subprocess.run([plan, "--topology", topo, "--simulate", "--mode", "p2p", "--json",
                            js], capture_output=True, text=True)
        if s.returncode != 0:
            print(s.stdout + s.stderr)
            print("sim_order.py: refit-plan --simulate failed")
            return 1
        m = json.load(open(js))["modes"][0]
    K = m["p2p_inflight"]
    want = collections.defaultdict(list)
    for p in m["pairs"]:
        want[p["src"]].append((p["order"], p["dst"], p["chunks"]))
    for v in want.values():
        v.sort()
    seen, bad = set(), 0
    for g in LINE.finditer(out):
        u, rank, n, busy, window, changes = (int(x) for x in g.groups()[:6])
        first = [int(x) for x in g.group(7).split(",") if x]
        seen.add((u, rank))
        w = want.get(rank, [])
        order = [d for _, d, _ in w]
        chunks = sum(c for _, _, c in w)
        why = []
        if first != order:
            why.append("pairs joined in the order %s, the simulation's %s" % (first, order))
        if window != min(K, len(w)):  # never wider than the sender's pairs
            why.append("window %d, the simulation's %d" % (window, min(K, len(w))))
        if K == 1 and (busy != 1 or changes != n - 1):
            why.append("window 1 but %d receivers in flight, %d changes" % (busy, changes))
        if K > 1 and busy < min(2, n):
            why.append("at most %d receiver(s) in flight of %d pairs" % (busy, n))
        if K > 1 and n >= 2 and chunks > n and changes < n:
            why.append("the receiver changed %d times over %d pairs of %d chunks: one receiver "
                       "after another" % (changes, n, chunks))
        print("update %d rank %d: pairs %d, in flight %d, changes %d, joined %s%s" %
              (u, rank, n, busy, changes, first, ": " + "; ".join(why) if why else ""))
        bad += bool(why)
    for u in (1, 2):
        for rank in want:
            if (u, rank) not in seen:
                print("update %d rank %d: no sender line" % (u, rank))
                bad += 1
    if bad:
        print("sim_order.py: %d sender line(s) disagree with the simulation" % bad)
        return 1
    print("sim_order.py: every sender's order is the simulation's (window %d)" % K)
    return 0


if __name__ == "__main__":
    sys.exit(main())
