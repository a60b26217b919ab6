#!/usr/bin/env python3
"""bench/reload_ab_report.py: the table of bench/reload-ab.sh (issue #17 item 4).

For each row NAME, reads OUT/NAME-A.json and OUT/NAME-B.json (refit-run --bench-json: A ran
--reload-policy layerwise, B --reload-policy auto) and the two logs OUT/NAME-{A,B}.log (the
last update's `layers  DIRECT d  RUNTIME_VIEW v  LAYERWISE l` line and the `refit: update U
storage digest HEX` lines of --storage-digest). Prints the reference PR's columns as Markdown:
A steady, B steady (median of the updates after the first, ms), delta (B - A, and B / A - 1),
B's mapped (DIRECT + RUNTIME_VIEW) / layerwise layer counts, payload, and whether A's and B's
storage digests are equal after every update both committed. Writes OUT/reload-ab.json. Exit 1
when a row is missing, did not commit, or its digests differ (the row's status says which).

    python3 bench/reload_ab_report.py OUT NAME...
"""
import json
import os
import re
import sys

LAYERS = re.compile(r"^  layers +DIRECT (\d+) +RUNTIME_VIEW (\d+) +LAYERWISE (\d+)")
DIGEST = re.compile(r"^refit: update (\d+) storage digest ([0-9a-f]+)")


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def parse_log(path):
    """The last layers line (DIRECT, RUNTIME_VIEW, LAYERWISE) and {update: digest}."""
    layers, digests = None, {}
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = LAYERS.match(line)
                if m:
                    layers = tuple(int(x) for x in m.groups())
                m = DIGEST.match(line)
                if m:
                    digests[int(m.group(1))] = m.group(2)
    except OSError:
        pass
    return layers, digests


def row_of(out, name):
    r = {"name": name, "status": "ok"}
    for side in ("A", "B"):
        j = load_json(os.path.join(out, "%s-%s.json" % (name, side)))
        layers, digests = parse_log(os.path.join(out, "%s-%s.log" % (name, side)))
        ups = (j or {}).get("updates", [])
        r[side] = {
            "steady_s": (j or {}).get("median_s"),
            "best_s": (j or {}).get("best_s"),
            "committed": sum(1 for u in ups if u.get("committed")),
            "updates": len(ups),
            "layers": dict(zip(("direct", "runtime_view", "layerwise"), layers)) if layers else None,
            "digests": digests,
        }
        if j is not None:
            r.setdefault("payload_bytes", j.get("payload_bytes"))
            r.setdefault("tensors", j.get("tensors"))
            r.setdefault("model_type", j.get("model_type"))
            r.setdefault("quantization", j.get("quantization"))
            r.setdefault("transport", j.get("transport"))
    a, b = r["A"], r["B"]
    if a["steady_s"] is None or b["steady_s"] is None:
        r["status"] = "FAIL: no timed update (see %s-{A,B}.log)" % name
    elif a["committed"] != a["updates"] or b["committed"] != b["updates"]:
        r["status"] = "FAIL: A committed %d of %d, B %d of %d" % (
            a["committed"], a["updates"], b["committed"], b["updates"])
    common = sorted(set(a["digests"]) & set(b["digests"]))
    r["digest_updates"] = common
    r["digests_equal"] = bool(common) and all(a["digests"][u] == b["digests"][u] for u in common)
    if r["status"] == "ok" and not r["digests_equal"]:
        r["status"] = ("FAIL: storage digests differ" if common else
                       "FAIL: no storage digest to compare (--storage-digest)")
    if a["steady_s"] and b["steady_s"]:
        r["delta_s"] = b["steady_s"] - a["steady_s"]
        r["delta_rel"] = b["steady_s"] / a["steady_s"] - 1.0
    return r


def fmt_ms(s):
    return "-" if s is None else "%.2f" % (s * 1e3)


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out, names = sys.argv[1], sys.argv[2:]
    rows = [row_of(out, n) for n in names]
    print("| row | model_type | format | payload MB | A steady ms (layerwise) | "
          "B steady ms (auto) | delta ms | B/A - 1 | B mapped | B layerwise | digests |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    bad = 0
    for r in rows:
        lb = r["B"]["layers"]
        mapped = "-" if lb is None else str(lb["direct"] + lb["runtime_view"])
        lw = "-" if lb is None else str(lb["layerwise"])
        dig = ("equal (%d updates)" % len(r["digest_updates"]) if r["digests_equal"] else
               r["status"] if r["status"] != "ok" else "DIFFER")
        if r["status"] != "ok":
            bad += 1
            dig = r["status"]
        pb = r.get("payload_bytes")
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"], r.get("model_type") or "-", r.get("quantization") or "-",
            "-" if pb is None else "%.1f" % (pb / 1e6), fmt_ms(r["A"]["steady_s"]),
            fmt_ms(r["B"]["steady_s"]),
            "-" if r.get("delta_s") is None else "%+.2f" % (r["delta_s"] * 1e3),
            "-" if r.get("delta_rel") is None else "%+.1f%%" % (r["delta_rel"] * 100),
            mapped, lw, dig))
    with open(os.path.join(out, "reload-ab.json"), "w") as f:
        json.dump({"rows": rows}, f, indent=2, sort_keys=True)
    if bad:
        print("\n%d of %d rows FAILED" % (bad, len(rows)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
