#!/usr/bin/env bash
# tests/bench_python_colocated.sh: bench/python-colocated.sh end to end on the CPU (DEVICE=cpu,
# the host topologies of tests/data/bench/python-colocated: llama-tiny and qwen3-moe-tiny into
# the vllm layout, qwen3-moe-tiny into hf, over the mpi transport, 3 updates): refit-run and
# bench/python_colocated.py run on each, every engine byte is verified against the trainer's,
# the table and pc-summary.json carry both sides' times and their ratios, and a shape the
# session refuses (a quantized MoE model) is listed as not run with the library's text. Then
# the check's self-test: one engine element changed after the last update (--tamper) fails the
# run, naming the tensor and the one element.
#   tests/bench_python_colocated.sh SOURCE_DIR BUILD_DIR OUT_DIR MPIEXEC
set -uo pipefail
src=$1
build=$2
out=$3
mpiexec=$4
rm -rf "$out"
mkdir -p "$out"
d=tests/data/bench/python-colocated
shapes="llama-tiny qwen3-moe-tiny qwen3-moe-tiny-hf"
cd "$src" || exit 1
OUT=$out DEVICE=cpu PYTHON=/usr/bin/python3 STEPS=3 TOPO_DIR=$d SHAPES="$shapes" \
    REFUSED=qwen3-moe-tiny-fp8 SHAPE_TIMEOUT=240 bash bench/python-colocated.sh "$build" \
    > "$out/driver.log" 2>&1
rc=$?
cat "$out/driver.log"
[ $rc -eq 0 ] || { echo "bench_python_colocated: the driver exited $rc"; exit 1; }
SHAPES="$shapes" /usr/bin/python3 - "$out/pc-summary.json" <<'PY' || exit 1
import json, os, sys
s = json.load(open(sys.argv[1]))
bad = []
for name in os.environ["SHAPES"].split():
    r = s["shapes"].get(name)
    if r is None or "error" in r:
        bad.append("%s: %s" % (name, r))
        continue
    if not r["verified"]:
        bad.append("%s: not verified" % name)
    for k in ("refit_run_best_s", "python_lib_best_s", "python_wall_best_s"):
        if not (isinstance(r[k], float) and r[k] > 0):
            bad.append("%s: %s = %r" % (name, k, r[k]))
    # the ratios are of these numbers; the wall time holds the library's
    want = r["python_wall_best_s"] / r["refit_run_best_s"]
    if abs(r["ratio_wall_best"] - want) > 1e-9 * want:
        bad.append("%s: ratio_wall_best %r, times say %r" % (name, r["ratio_wall_best"], want))
    if r["python_wall_best_s"] < r["python_lib_best_s"]:
        bad.append("%s: wall %r < library %r" % (name, r["python_wall_best_s"],
                                                  r["python_lib_best_s"]))
    ups = r["python_updates"]
    if len(ups) != 3 or not all(u["committed"] for u in ups) or ups[0]["timed"]:
        bad.append("%s: updates %r" % (name, ups))
    if r["payload_bytes"] <= 0 or r["trainer_tensors"] <= 0 or r["engine_tensors"] <= 0:
        bad.append("%s: payload %r, tensors %r / %r" % (name, r["payload_bytes"],
                                                         r["trainer_tensors"],
                                                         r["engine_tensors"]))
why = s["not_run"].get("qwen3-moe-tiny-fp8", "")
if "fp8-block" not in why:
    bad.append("refused shape: %r" % why)
if bad:
    print("bench_python_colocated: " + "\n  ".join(bad))
    sys.exit(1)
print("bench_python_colocated: summary ok")
PY
grep -q "| llama-tiny | 30 / 21 |" "$out/pc-table.md" ||
    { echo "bench_python_colocated: the table lacks llama-tiny's row"; exit 1; }
# the self-test: a changed engine element fails the check, naming it
py=$(command -v /usr/bin/python3)
victim=model.layers.0.self_attn.qkv_proj.weight
REFIT_LIB=$build/librefit.so timeout 240 "$mpiexec" --oversubscribe --allow-run-as-root \
    --bind-to none -x REFIT_LIB -np 2 "$py" bench/python_colocated.py \
    --topology $d/colocated-llama-tiny.yaml --updates 2 --device cpu --tamper $victim \
    > "$out/tamper.log" 2>&1
rc=$?
cat "$out/tamper.log"
[ $rc -ne 0 ] || { echo "bench_python_colocated: a tampered engine tensor passed the check"; exit 1; }
grep -q "NOT verified: engine tensor $victim: 1 of [0-9]* elements differ" "$out/tamper.log" ||
    { echo "bench_python_colocated: the failure does not name $victim and one element"; exit 1; }
echo "bench_python_colocated: ok"
