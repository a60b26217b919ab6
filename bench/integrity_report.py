#!/usr/bin/python3
"""The tables of bench/integrity.sh (docs/benchmarks.md, "Integrity on the device").

    python3 bench/integrity_report.py OUT

Reads OUT/prof-{off,dev,dev1,host}/profile-rank{0,1}.jsonl (RUNS names others) (refit-run --profile-dir), OUT/run-*.log
(the storage digests) and OUT/ipc-integrity.json (bench/ipc-integrity.cu). The timed updates
are the committed ones after the first; each figure is their median: the update (rank 0's
verdict_s), the trainer's production (produce_s) and the rest (update - production: pack, wire,
h2d, check, unpack). dev1 is dev with the sender's seal on one thread (REFIT_MPI_SEAL_THREADS=1)
against dev's pool; devr is dev with the seal reading the chunk (REFIT_MPI_SEAL_FUSED=0) where
dev seals from the read threads' sums (a checkpoint source; `fused`: chunks sealed so, median of
the timed updates; `pack ms`: the sender's pack + seal wait; `readers`: its checkpoint read
threads, a run named NAME-tN sets N; `r wire ms` / `r pin ms`: the rollout's waits for the wire
and, apart from them, for a pinned buffer's h2d copies). Overheads are against `off` of the same run; target: dev at most 3% of
the update time. Prints the tables and writes OUT/integrity.json. Exits 1 when a run is missing
or the storage digests differ.
"""
import json
import os
import re
import statistics
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()]


def run(out, r):
    prof = os.path.join(out, "prof-" + r)
    try:
        trn = {u["update"]: u for u in lines(os.path.join(prof, "profile-rank0.jsonl"))}
        roll = {u["update"]: u for u in lines(os.path.join(prof, "profile-rank1.jsonl"))}
    except OSError:
        return None
    timed = [k for k, u in sorted(trn.items()) if k > 1 and u.get("status") == "RF_OK"]
    if not timed:
        return None
    med = statistics.median
    upd = med([trn[k]["verdict_s"] for k in timed])
    prod = med([trn[k]["trainer"]["produce_s"] for k in timed])
    rest = med([trn[k]["verdict_s"] - trn[k]["trainer"]["produce_s"] for k in timed])
    pack = med([trn[k]["trainer"].get("pack_s", 0.0) for k in timed])
    fused = med([trn[k]["trainer"].get("seals_fused", 0) for k in timed])
    rthreads = max(trn[k]["trainer"].get("read_threads", 0) for k in timed)
    pin = med([roll[k]["receiver"].get("pin_wait_s", 0.0) for k in timed if k in roll])
    rwire = med([roll[k]["receiver"].get("wire_s", 0.0) for k in timed if k in roll])
    nbytes = roll[timed[0]]["counters"]["bytes_received"]
    digests = re.findall(r"update (\d+) storage digest ([0-9a-f]+)",
                         open(os.path.join(out, "run-%s.log" % r)).read())
    return {"updates": timed, "bytes": nbytes, "update_s": upd, "produce_s": prod,
            "rest_s": rest, "pack_s": pack, "seals_fused": fused, "read_threads": rthreads,
            "rollout_pin_wait_s": pin, "rollout_wire_s": rwire, "update_GBps": nbytes / upd / 1e9, "rest_GBps": nbytes / rest / 1e9,
            "trailer": trn[timed[0]].get("trailer"), "digests": dict(digests),
            "all_updates_s": [trn[k]["verdict_s"] for k in timed]}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "integrity-out"
    res, ok = {"mpi_to_gpu": {}}, True
    print("mpi to GPU: median of the timed updates")
    print("%-8s %-15s %10s %8s %10s %10s %8s %9s %9s %8s %6s %7s %9s %8s" %
          ("run", "trailer", "update ms", "GB/s", "produce ms", "rest ms", "GB/s", "upd +%",
           "rest +%", "pack ms", "fused", "readers", "r wire ms", "r pin ms"))
    runs = {}
    names = os.environ.get("RUNS", "").split() or ["off", "dev", "dev1", "host"]
    for r in names:
        x = run(out, r)
        if x is None and r == "dev1" and not os.environ.get("RUNS"):
            continue  # an output of before dev1 existed
        if x is None:
            print("%-8s no timed update" % r)
            ok = False
            continue
        runs[r] = x
    # each run against the last off* run before it in RUNS (RUNS="off dev offb devb": dev
    # against off, devb against offb), else against off
    base, bases = runs.get("off"), {}
    for r in runs:
        if r.startswith("off"):
            base = runs[r]
        bases[r] = base
    for r, x in runs.items():
        base = bases[r]
        if base is not None:
            x["update_overhead"] = x["update_s"] / base["update_s"] - 1
            x["rest_overhead"] = x["rest_s"] / base["rest_s"] - 1
        print("%-8s %-15s %10.1f %8.2f %10.1f %10.1f %8.2f %9s %9s %8.1f %6d %7d %9.1f %8.1f" %
              (r, x["trailer"] or "none", x["update_s"] * 1e3, x["update_GBps"],
               x["produce_s"] * 1e3, x["rest_s"] * 1e3, x["rest_GBps"],
               "%+.1f" % (100 * x["update_overhead"]) if base else "-",
               "%+.1f" % (100 * x["rest_overhead"]) if base else "-", x["pack_s"] * 1e3,
               x["seals_fused"], x["read_threads"], x["rollout_wire_s"] * 1e3,
               x["rollout_pin_wait_s"] * 1e3))
        res["mpi_to_gpu"][r] = x
    # repeated pairs (RUNS="offa deva offb devb ..."): per kind (the name without its letter
    # suffix: dev, devr, ...; -tN kept) the median of its pairs' overheads, and the pooled
    # overhead: the median of all its runs' timed updates against all the off runs' of the same
    # read threads (more updates per estimate than one pair; the spread between runs of one
    # call is several percent)
    groups = {}
    for r, x in runs.items():
        m = re.match(r"^(off|dev1|devr|dev|host)[a-z0-9]*?(-t\d+)?$", r)
        if m is None:
            continue
        groups.setdefault((m.group(1), m.group(2) or ""), []).append(r)
    res["pooled"] = {}
    pooled_rows = []
    for (kind, t), names_k in sorted(groups.items()):
        if kind == "off":
            continue
        offs = groups.get(("off", t), [])
        if not offs:
            continue
        on_all = [v for r in names_k for v in runs[r]["all_updates_s"]]
        off_all = [v for r in offs for v in runs[r]["all_updates_s"]]
        pairs = [runs[r]["update_overhead"] for r in names_k if "update_overhead" in runs[r]]
        row = {"kind": kind + t, "runs": len(names_k), "off_runs": len(offs),
               "updates": len(on_all), "off_updates": len(off_all),
               "median_s": statistics.median(on_all), "off_median_s": statistics.median(off_all),
               "pooled_overhead": statistics.median(on_all) / statistics.median(off_all) - 1,
               "pair_overheads": pairs,
               "median_pair_overhead": statistics.median(pairs) if pairs else None}
        res["pooled"][kind + t] = row
        pooled_rows.append(row)
    if any(r["runs"] > 1 for r in pooled_rows):
        print("\npooled over repeated runs (median of every timed update; pairs: each run "
              "against the off before it)")
        print("%-10s %5s %8s %10s %10s %9s %10s  %s" % ("kind", "runs", "updates", "ms", "off ms",
                                                      "pooled +%", "pairs med", "pairs +%"))
        for r in pooled_rows:
            print("%-10s %5d %8d %10.1f %10.1f %9s %10s  %s" %
                  (r["kind"], r["runs"], r["updates"], r["median_s"] * 1e3,
                   r["off_median_s"] * 1e3, "%+.1f" % (100 * r["pooled_overhead"]),
                   "%+.1f" % (100 * r["median_pair_overhead"])
                   if r["median_pair_overhead"] is not None else "-",
                   " ".join("%+.1f" % (100 * v) for v in r["pair_overheads"])))
    ds = [x["digests"] for x in runs.values()]
    same = len(ds) > 1 and all(d and d == ds[0] for d in ds)
    res["digests_equal"] = same
    print("storage digests equal across runs: %s" % same)
    ok = ok and same
    dr = os.path.join(out, "digest-rate.json")
    if os.path.exists(dr):
        j = json.load(open(dr))
        res["host_digest_rate"] = j
        print("\nhost digest rates over %d MiB (bench/digest-rate.c, one thread):" %
              (j["bytes"] >> 20))
        for n, v in j["algorithms"].items():
            print("  %-16s %8.3f ms %7.2f GB/s" % (n, v["ms"], v["GBps"]))
    ipc = os.path.join(out, "ipc-integrity.json")
    if os.path.exists(ipc):
        j = json.load(open(ipc))
        res["ipc"] = j
        print("\ncolocated CUDA IPC (bench/ipc-integrity.cu, %s, best of %d)" %
              (j["device"], j["reps"]))
        print("%7s %-10s %10s %9s %9s %10s" % ("GiB", "variant", "ms", "GB/s", "vs copy",
                                              "vs memcpy"))
        for s in j["sizes"]:
            for n, v in s["variants"].items():
                print("%7.2f %-10s %10.3f %9.1f %8.3fx %9.3fx" %
                      (s["GiB"], n, v["ms"], v["GBps"], v["vs_copy"], v["vs_memcpy"]))
        print("source sum == destination sum: %s" % j["sums_equal"])
        ok = ok and j["sums_equal"]
    with open(os.path.join(out, "integrity.json"), "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
