#!/usr/bin/python3
"""The scale model against a real run (issue 19 item 5, docs/simulate.md).

    sim_pairs.py REFIT_PLAN TOPOLOGY PROFILE_DIR -- LAUNCHER refit-run ARGS...

Runs refit-run (the command after --, which gets --topology TOPOLOGY --profile-dir PROFILE_DIR
--steps 2) and refit-plan --simulate --json on the same topology, then requires, for the
topology's transfer mode: every (sender, receiver) pair's bytes in the simulation equal the
bytes that sender's transport sent that receiver in every update (profile line "sent_to"),
no pair missing or extra on either side; and, in broadcast, each trainer rank's
bytes_gathered equal the simulation's gather bytes into it. Prints the pairs it compared.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile


def main():
    if "--" not in sys.argv or sys.argv.index("--") != 4:
        print(__doc__)
        return 2
    plan, topo, pdir = sys.argv[1:4]
    run = sys.argv[5:] + ["--topology", topo, "--profile-dir", pdir, "--steps", "2"]
    r = subprocess.run(run, capture_output=True, text=True)
    sys.stdout.write(r.stdout[-3000:])
    if r.returncode != 0 or "refit: COMMITTED 2 update(s)" not in r.stdout:
        print(r.stderr[-3000:])
        print("sim_pairs.py: refit-run did not commit 2 updates (exit %d)" % r.returncode)
        return 1
    with tempfile.TemporaryDirectory() as td:
        js = os.path.join(td, "sim.json")
        s = subprocess.run([plan, "--topology", topo, "--simulate", "--json", js],
                           capture_output=True, text=True)
        sys.stdout.write(s.stdout)
        if s.returncode != 0:
            print(s.stderr)
            print("sim_pairs.py: refit-plan --simulate failed")
            return 1
        sim = json.load(open(js))
    mode = sim["transfer_mode"]  # the topology's transfer.mode, which refit-run ran
    m = [x for x in sim["modes"] if x["mode"] == mode][0]
    want = {(p["src"], p["dst"]): p["bytes"] for p in m["pairs"]}
    wgather = {}
    for g in m["gather"]:
        wgather[g["dst"]] = wgather.get(g["dst"], 0) + g["bytes"]
    bad = 0
    files = sorted(glob.glob(os.path.join(pdir, "profile-rank*.jsonl")))
    if not files:
        print("sim_pairs.py: no profile lines in %s" % pdir)
        return 1
    for update in (1, 2):
        have, hgather = {}, {}
        for f in files:
            for line in open(f):
                u = json.loads(line)
                if u["update"] != update:
                    continue
                for dst, b in u["sent_to"].items():
                    have[(u["rank"], int(dst))] = b
                if u["counters"]["bytes_gathered"]:
                    hgather[u["rank"]] = u["counters"]["bytes_gathered"]
        for k in sorted(set(want) | set(have)):
            ok = want.get(k) == have.get(k)
            bad += not ok
            if update == 1 or not ok:
                print("update %d  %s  pair %d -> %d: simulated %s, sent %s" %
                      (update, "ok  " if ok else "DIFF", k[0], k[1], want.get(k), have.get(k)))
        if mode == "broadcast" and hgather != wgather:
            bad += 1
            print("update %d  DIFF gather: simulated %s, bytes_gathered %s" %
                  (update, wgather, hgather))
        elif mode == "broadcast":
            print("update %d  ok   gather into %s" % (update, wgather))
    print("sim_pairs.py: mode %s, %d pairs, %s" % (mode, len(want),
          "every pair equal" if bad == 0 else "%d difference(s)" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
