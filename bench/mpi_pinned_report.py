#!/usr/bin/python3
"""The table of bench/mpi-pinned.sh (docs/benchmarks.md, "Checkpoint into GPU storage over mpi").

    RUNS="B C1 C" python3 bench/mpi_pinned_report.py OUT

Reads OUT/stages.json (bench/mpi-stages.c), OUT/prof-RUN/profile-rank{0,1}.jsonl (refit-run
--profile-dir) and OUT/run-RUN.log (the storage digests) for each run of RUNS (default the
runs found): A the sleeping sender, read then send; B the spinning sender, read then send; C1
the spinning sender, the checkpoint read in the pack beside the wire by one thread; C the
defaults, C1 with the pack's read threads (REFIT_CKPT_READ_THREADS); P pageable receive
buffers. The timed updates are those that carry the checkpoint after the first
(bench/mpi-pinned.sh runs --checkpoint-updates all); each figure is their median. Per run:
the update (the rollout rank's verdict_s, from its update begin), the trainer's read before
its sends (produce_s: about 0 where
the reads moved into the pack), the rest of the update (update - read: the sends, and in C
the reads beside them), the trainer's pack and wire-wait time, and the ratio of the update's
rate to the run's slowest stage, min(read, mpi, h2d) of its receive buffer kind, the read
with the threads the run read with (read_mt when they are mpi-stages' THREADS; target 0.80).
Prints the table and writes OUT/mpi-pinned.json. Exits 1 when a run is missing or the runs'
storage digests differ.
"""
import json
import os
import re
import statistics
import sys

KIND = {"A": "pinned", "B": "pinned", "C1": "pinned", "C": "pinned", "P": "pageable"}
WHAT = {"A": "A: sleeping sender, read then send",
        "B": "B: spinning sender, read then send",
        "C1": "C1: read in the pack, 1 thread",
        "C": "C: read in the pack, the read threads",
        "P": "P: C, pageable receive buffers"}


def lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def run(out, ab):
    prof = os.path.join(out, "prof-" + ab)
    try:
        roll = {u["update"]: u for u in lines(os.path.join(prof, "profile-rank1.jsonl"))}
        trn = {u["update"]: u for u in lines(os.path.join(prof, "profile-rank0.jsonl"))}
    except OSError:
        return None
    timed = [k for k, u in sorted(roll.items())
             if k > 1 and u.get("source") == "checkpoint" and u.get("status") == "RF_OK"]
    if not timed:
        return None
    med = statistics.median
    t = lambda k, f: trn[k]["trainer"].get(f, 0.0)
    # the rollout's verdict_s: from its update begin; rank 0's also holds its wait at the begin
    # agreement for a rollout still taking the oracle's diff-rule snapshot (--verify last
    # with odd checkpoint updates: about 2.5 s of the 3.85 GB on the H200 host)
    upd = med([roll[k]["verdict_s"] for k in timed])
    rd = med([t(k, "produce_s") for k in timed])
    rest = med([roll[k]["verdict_s"] - t(k, "produce_s") for k in timed])
    nbytes = roll[timed[0]]["counters"]["bytes_received"]
    log = open(os.path.join(out, "run-%s.log" % ab)).read()
    digests = re.findall(r"update (\d+) storage digest ([0-9a-f]+)", log)
    return {"updates": timed, "bytes": nbytes, "update_s": upd, "read_s": rd, "rest_s": rest,
            "pack_s": med([t(k, "pack_s") for k in timed]),
            "send_wire_s": med([t(k, "send_wire_s") for k in timed]),
            "reads_in_pack": all(t(k, "reads_in_pack") for k in timed),
            "read_threads": max(t(k, "read_threads") for k in timed),
            "sender_spins": "as a sender, spins while its chunks stream" in log,
            "update_GBps": nbytes / upd / 1e9, "rest_GBps": nbytes / rest / 1e9,
            "digests": dict(digests)}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "mpi-pinned-out"
    runs = os.environ.get("RUNS", "").split() or \
        [r for r in ("A", "B", "C1", "C", "P") if os.path.isdir(os.path.join(out, "prof-" + r))]
    st = json.load(open(os.path.join(out, "stages.json")))
    g = {k: v["GBps"] for k, v in st["stages"].items()}
    print("stage rates (mpi-stages, best of %d, %.2f GB file, %d MiB chunks, %s):" %
          (st["passes"], st["file_bytes"] / 1e9, st["chunk_bytes"] >> 20, st["accelerator"]))
    mt = st.get("read_threads", 0)
    for k in ("read", "read_mt", "mpi_pageable", "mpi_pinned", "h2d_pageable", "h2d_pinned"):
        if k in g:
            print("  %-13s %7.2f GB/s%s" % (k, g[k], " (%d threads)" % mt if k == "read_mt" else ""))
    res, ok = {"stages": st, "runs": {}}, True
    print("\n%-38s %9s %6s %8s %9s %8s %8s %6s %6s %7s %8s" %
          ("run", "update ms", "GB/s", "read ms", "rest ms", "pack ms", "wire ms", "spins",
           "in pk", "readers", "upd/slow"))
    for ab in runs:
        r = run(out, ab)
        if r is None:
            print("%s: no timed update" % ab)
            ok = False
            continue
        kind = KIND.get(ab, "pinned")
        # the read stage with the run's own threads: read_mt when they match, else the
        # one-thread read (a run that read whole first, or in the pack with one thread)
        many = r["read_threads"] > 1
        rd = g["read_mt"] if many and r["read_threads"] == mt and "read_mt" in g else g["read"]
        if many and r["read_threads"] != mt:
            print("%s: read with %d threads, mpi-stages measured %d: the 1-thread read is "
                  "its read stage" % (ab, r["read_threads"], mt))
        slow = min(rd, g["mpi_" + kind], g["h2d_" + kind])
        r["read_stage_GBps"] = rd
        r["buffers"] = kind
        r["slowest_stage_GBps"] = slow
        r["update_vs_slowest"] = r["update_GBps"] / slow
        res["runs"][ab] = r
        print("%-38s %9.1f %6.2f %8.1f %9.1f %8.1f %8.1f %6s %6s %7d %8.2f" %
              (WHAT.get(ab, ab), r["update_s"] * 1e3, r["update_GBps"], r["read_s"] * 1e3,
               r["rest_s"] * 1e3, r["pack_s"] * 1e3, r["send_wire_s"] * 1e3,
               "yes" if r["sender_spins"] else "no", "yes" if r["reads_in_pack"] else "no",
               r["read_threads"], r["update_vs_slowest"]))
    got = list(res["runs"].values())
    if got:
        ds = [x["digests"] for x in got]
        same = bool(ds[0]) and all(d == ds[0] for d in ds)
        res["digests_equal"] = same
        print("\nstorage digests equal across %s: %s (%s)" % (" ".join(res["runs"]), same,
              ", ".join("update %s %s" % (k, v) for k, v in sorted(ds[0].items()))))
        ok = ok and same
        # against the sender of before (A) and, for C, against its one read thread (C1)
        for b0, of in (("A", ("B", "C1", "C", "P")), ("C1", ("C",))):
            base = res["runs"].get(b0)
            for ab, x in res["runs"].items():
                if base is not None and ab in of:
                    x["speedup_over_" + b0] = base["update_s"] / x["update_s"]
                    print("%s: %.2fx %s's update rate" % (ab, x["speedup_over_" + b0], b0))
    with open(os.path.join(out, "mpi-pinned.json"), "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
