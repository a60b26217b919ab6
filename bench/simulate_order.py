#!/usr/bin/python3
"""What-ifs for the p2p send order, on refit-plan --simulate --json's pairs (docs/simulate.md).

    /usr/bin/python3 bench/simulate_order.py SIM.json [NIC_Bps]

Written before the any-order receive: then refit's mpi p2p path served pairs one at a time on
both sides (every sender took its receivers in world-rank order, every receiver its senders in
world-rank order, the chunk plan's stage-major sequence). The simulation now calls that order
ordered_rank_s; its ordered_s is the order refit has now (senders from their own first
receiver, receivers taking any ready sender; docs/simulate.md). This script replays the same pairs (each pair moves its bytes at the NIC bandwidth,
one pair at a time per sender and per receiver) under other orders:

  ascending   the old order (must equal the simulation's ordered_rank_s, minus latency and fill)
  greedy      receivers in world-rank order, each sender picks which ready receiver to serve
              (a static order a sender could follow: needs only a job.c loop change)
  rotated     receiver r starts at its (r mod k)-th sender, senders greedy (needs the
              receiver to take stages out of world-rank order: a transport change)
  free        either side takes any ready partner (receives posted from every sender)
An exploration tool, not used by refit: it says which change would bring ordered_s to the
wire floor.
"""
import collections
import heapq
import json
import sys


def main():
    d = json.load(open(sys.argv[1]))
    m = [x for x in d["modes"] if x["mode"] == "p2p"][0]
    bw = float(sys.argv[2]) if len(sys.argv) > 2 else d["machine"]["nic_Bps"]
    dur = {(p["src"], p["dst"]): p["bytes"] / bw for p in m["pairs"]}
    senders = collections.defaultdict(list)
    recv = collections.defaultdict(list)
    for (s, r) in sorted(dur):
        senders[s].append(r)
        recv[r].append(s)

    def fixed(order_s, order_r):
        """Both sides in fixed orders: longest path (Kahn)."""
        ns = {s: 0 for s in order_s}
        nr = {r: 0 for r in order_r}
        fs, fr = collections.defaultdict(float), collections.defaultdict(float)

        def ready(s, r):
            return (ns[s] < len(order_s[s]) and order_s[s][ns[s]] == r and
                    order_r[r][nr[r]] == s)
        q = [(s, order_s[s][0]) for s in order_s if ready(s, order_s[s][0])]
        t_end, n = 0.0, 0
        while q:
            s, r = q.pop()
            t = max(fs[s], fr[r]) + dur[(s, r)]
            fs[s] = fr[r] = t
            t_end, n = max(t_end, t), n + 1
            ns[s] += 1
            nr[r] += 1
            if ns[s] < len(order_s[s]) and ready(s, order_s[s][ns[s]]):
                q.append((s, order_s[s][ns[s]]))
            if nr[r] < len(order_r[r]) and ready(order_r[r][nr[r]], r):
                q.append((order_r[r][nr[r]], r))
        return t_end if n == len(dur) else float("inf")

    def greedy(order_r):
        """Receivers in fixed orders, senders serve whichever receiver is ready first."""
        nr = {r: 0 for r in order_r}
        fs, fr = collections.defaultdict(float), collections.defaultdict(float)
        rem = {r: sum(dur[(s, r)] for s in order_r[r]) for r in order_r}
        h = [(0.0, -rem[r], r) for r in order_r]
        heapq.heapify(h)
        t_end = 0.0
        while h:
            t, _, r = heapq.heappop(h)
            s = order_r[r][nr[r]]
            start = max(fs[s], fr[r])
            if start > t + 1e-12:
                heapq.heappush(h, (start, -rem[r], r))
                continue
            fs[s] = fr[r] = start + dur[(s, r)]
            t_end = max(t_end, fs[s])
            rem[r] -= dur[(s, r)]
            nr[r] += 1
            if nr[r] < len(order_r[r]):
                s2 = order_r[r][nr[r]]
                heapq.heappush(h, (max(fs[s2], fr[r]), -rem[r], r))
        return t_end

    def free():
        """Any idle sender with any idle receiver it owes: longest remaining receiver first."""
        left = {r: set(recv[r]) for r in recv}
        rem = {r: sum(dur[(s, r)] for s in recv[r]) for r in recv}
        busy_s, busy_r = set(), set()
        ev, t, t_end = [], 0.0, 0.0
        pending = len(dur)
        while pending:
            for r in sorted(left, key=lambda x: -rem[x]):
                if r in busy_r or not left[r]:
                    continue
                cand = [s for s in left[r] if s not in busy_s]
                if cand:
                    s = max(cand, key=lambda x: sum(dur[(x, q)] for q in senders[x]))
                    busy_s.add(s)
                    busy_r.add(r)
                    left[r].discard(s)
                    heapq.heappush(ev, (t + dur[(s, r)], s, r))
            t, s, r = heapq.heappop(ev)
            busy_s.discard(s)
            busy_r.discard(r)
            rem[r] -= dur[(s, r)]
            pending -= 1
            t_end = max(t_end, t)
        return t_end

    floor = m["floor_s"]
    asc_r = {r: sorted(v) for r, v in recv.items()}
    rows = [("ascending (the old order)", fixed({s: sorted(v) for s, v in senders.items()},
                                              asc_r)),
            ("greedy senders", greedy(asc_r))]
    rot = {}
    for i, r in enumerate(sorted(recv)):
        v = sorted(recv[r])
        k = i % len(v)
        rot[r] = v[k:] + v[:k]
    rows.append(("rotated receivers, greedy senders", greedy(rot)))
    if len(dur) <= 20000:
        rows.append(("free (any ready partner)", free()))
    print("%s: %d pairs, wire floor %.3f s (simulation: ordered_rank_s %.3f s, ordered_s %.3f s)"
          % (d["topology"], len(dur), floor, m.get("ordered_rank_s", 0), m["ordered_s"]))
    for name, t in rows:
        print("  %-36s %8.3f s  %5.2fx the floor" % (name, t, t / floor if floor else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
