#!/usr/bin/python3
"""The table of bench/mpi-pinned.sh (docs/benchmarks.md, "Checkpoint into GPU storage over mpi").

    python3 bench/mpi_pinned_report.py OUT

Reads OUT/stages.json (bench/mpi-stages.c), OUT/prof-{A,B}/profile-rank{0,1}.jsonl (refit-run
--profile-dir: A pageable receive buffers, B pinned) and OUT/run-{A,B}.log (the storage
digests). The timed updates are those that carry the checkpoint after the first (refit-run:
odd updates carry it); each figure is their median. Per run: the update (rank 0's verdict_s,
as --bench-json: the trainer's read of the checkpoint, then the chunks over MPI and h2d), the read
alone (the trainer's produce_s), the rest of the update (update - read: MPI and h2d, which
overlap with pinned buffers) and the ratios to the run's slowest stage: the update against
min(read, mpi, h2d) and the rest against min(mpi, h2d), stages of the run's buffer kind. Prints
the table and writes OUT/mpi-pinned.json. Exits 1 when a run is missing or A's and B's storage
digests differ.
"""
import json
import os
import re
import statistics
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def run(out, ab):
    prof = os.path.join(out, "prof-" + ab)
    roll = {u["update"]: u for u in lines(os.path.join(prof, "profile-rank1.jsonl"))}
    trn = {u["update"]: u for u in lines(os.path.join(prof, "profile-rank0.jsonl"))}
    timed = [k for k, u in sorted(roll.items())
             if k > 1 and u.get("source") == "checkpoint" and u.get("status") == "RF_OK"]
    if not timed:
        return None
    med = lambda xs: statistics.median(xs)
    upd = med([trn[k]["verdict_s"] for k in timed])
    rd = med([trn[k]["trainer"]["produce_s"] for k in timed])
    rest = med([trn[k]["verdict_s"] - trn[k]["trainer"]["produce_s"] for k in timed])
    nbytes = roll[timed[0]]["counters"]["bytes_received"]
    digests = re.findall(r"update (\d+) storage digest ([0-9a-f]+)",
                         open(os.path.join(out, "run-%s.log" % ab)).read())
    return {"updates": timed, "bytes": nbytes, "update_s": upd, "read_s": rd, "rest_s": rest,
            "update_GBps": nbytes / upd / 1e9, "read_GBps": nbytes / rd / 1e9,
            "rest_GBps": nbytes / rest / 1e9, "digests": dict(digests)}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "mpi-pinned-out"
    st = json.load(open(os.path.join(out, "stages.json")))
    g = {k: v["GBps"] for k, v in st["stages"].items()}
    print("stage rates (mpi-stages, best of %d, %.2f GB file, %d MiB chunks, %s):" %
          (st["passes"], st["file_bytes"] / 1e9, st["chunk_bytes"] >> 20, st["accelerator"]))
    for k in ("read", "mpi_pageable", "mpi_pinned", "h2d_pageable", "h2d_pinned"):
        print("  %-13s %7.2f GB/s" % (k, g[k]))
    res, ok = {"stages": st, "runs": {}}, True
    print("\n%-22s %9s %7s %9s %7s %9s %7s %8s %8s" %
          ("run", "update ms", "GB/s", "read ms", "GB/s", "rest ms", "GB/s", "upd/slow",
           "rest/slow"))
    for ab, kind in (("A", "pageable"), ("B", "pinned")):
        r = run(out, ab)
        if r is None:
            print("%s: no timed update" % ab)
            ok = False
            continue
        slow = min(g["read"], g["mpi_" + kind], g["h2d_" + kind])
        slow_x = min(g["mpi_" + kind], g["h2d_" + kind])
        r["slowest_stage_GBps"], r["slowest_transfer_stage_GBps"] = slow, slow_x
        r["update_vs_slowest"] = r["update_GBps"] / slow
        r["rest_vs_slowest"] = r["rest_GBps"] / slow_x
        res["runs"][ab + "_" + kind] = r
        print("%-22s %9.1f %7.2f %9.1f %7.2f %9.1f %7.2f %8.2f %8.2f" %
              ("%s (%s buffers)" % (ab, kind), r["update_s"] * 1e3, r["update_GBps"],
               r["read_s"] * 1e3, r["read_GBps"], r["rest_s"] * 1e3, r["rest_GBps"],
               r["update_vs_slowest"], r["rest_vs_slowest"]))
    runs = list(res["runs"].values())
    if len(runs) == 2:
        da, db = runs[0]["digests"], runs[1]["digests"]
        same = bool(da) and da == db
        res["digests_equal"] = same
        print("\nstorage digests A == B: %s (%s)" % (same, ", ".join(
            "update %s %s" % (k, v) for k, v in sorted(db.items()))))
        ok = ok and same
        sp = runs[0]["rest_s"] / runs[1]["rest_s"]
        res["rest_speedup_B_over_A"] = sp
        print("MPI + h2d part: B %.2fx A's rate" % sp)
    with open(os.path.join(out, "mpi-pinned.json"), "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
