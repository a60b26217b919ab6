#!/usr/bin/python3
"""What-ifs for the p2p senders, on refit-plan --simulate --json's pairs (docs/simulate.md).

    /usr/bin/python3 bench/simulate_fanout.py SIM.json [K,K,...]

Written before refit's senders kept several receivers in flight; refit now does
(rf_xfer_send_p2p, transfer.p2p_inflight, default 8) and runtime/simulate.c models it
(ordered_s), with max-min fair link shares where this script takes the smaller plain share.
The receivers take any ready sender, as refit's mpi path does. Each sender keeps chunks
to K of its receivers in flight at once, taking them in the order refit uses:
its own first receiver (rf_xfer_p2p_first_receiver: index sender x R / T), then index order,
wrapping. The model is fluid, as runtime/simulate.c's ordered_s: every active pair moves at its
link's bandwidth (NVLink in a node, NIC between nodes) times min(1 / active pairs on the
sender's link, 1 / active pairs on the receiver's link). It has no latency, fill or node
fabric. Also prints K = 1 with a pseudo-random receiver order per sender. It prints the time
and its ratio to the wire floor per variant. An exploration tool, not used by refit.
"""
import collections
import json
import random
import sys


def main():
    d = json.load(open(sys.argv[1]))
    ks = [int(k) for k in (sys.argv[2] if len(sys.argv) > 2 else "1,2,1000").split(",")]
    m = [x for x in d["modes"] if x["mode"] == "p2p"][0]
    gpn, nic, nv = (d["machine"][k] for k in ("gpus_per_node", "nic_Bps", "nvlink_Bps"))
    T, R = m["trainer_ranks"], m["rollout_ranks"]
    intra = lambda s, r: s // gpn == r // gpn
    work = {(p["src"], p["dst"]): p["bytes"] / (nv if intra(p["src"], p["dst"]) else nic)
            for p in m["pairs"]}
    pairs = collections.defaultdict(list)
    for s, r in sorted(work):
        pairs[s].append(r)

    def first(s):
        v = pairs[s]
        k = next((j for j, r in enumerate(v) if r - T >= s * R // T), 0)
        return v[k:] + v[:k]

    def sim(orders, K):
        left, t = dict(work), 0.0
        orders = {s: list(v) for s, v in orders.items()}
        while True:
            act = [(s, r) for s, v in orders.items() for r in v[:K]]
            if not act:
                return t
            kin = collections.Counter((r, intra(s, r)) for s, r in act)
            kout = collections.Counter((s, intra(s, r)) for s, r in act)
            rate = {(s, r): min(1 / kin[(r, intra(s, r))], 1 / kout[(s, intra(s, r))])
                    for s, r in act}
            dt = min(left[a] / rate[a] for a in act)
            t += dt
            for a in act:
                left[a] -= rate[a] * dt
                if left[a] <= 1e-12:
                    orders[a[0]].remove(a[1])

    floor = m["floor_s"]
    rows = [("K=%d, own first receiver" % k, sim({s: first(s) for s in pairs}, k)) for k in ks]
    shuffled = {}
    for s in pairs:
        v = list(pairs[s])
        random.Random(s).shuffle(v)
        shuffled[s] = v
    rows.append(("K=1, random order per sender", sim(shuffled, 1)))
    print("%s: %d pairs, wire floor %.3f s" % (d["topology"], len(work), floor))
    for name, t in rows:
        print("  %-32s %8.3f s  %5.2fx the floor" % (name, t, t / floor if floor else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
