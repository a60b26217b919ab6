#!/usr/bin/env bash
# bench/python-colocated.sh: the Python path against refit-run on the colocated bench shapes,
# in the same run (issue #15 item 7; docs/benchmarks.md).
#
# For each bf16 shape (Llama-3.1-8B; Qwen3-30B-A3B with 24 of 48 layers), on its
# jobs/topologies/gpu/bench/colocated-<shape>.yaml (trainer and engine on GPU 0 through CUDA
# IPC, the trainer's weights resident on the GPU): refit-run (--steps STEPS, generator weights,
# --verify none: the bytes are checked by the Python run), then bench/python_colocated.py
# (torch CUDA tensors registered through python/refit, the same STEPS updates, every engine
# byte checked against the trainer's after the last one), then the table
# (bench/python_colocated_report.py). The quantized shapes (wna16, fp8-block) only create a
# session, which refuses them today; the table lists them as not run with the library's text.
#
#   OUT=bench-out bash bench/python-colocated.sh [BUILD_DIR]     # BUILD_DIR default build-gpu
#
# Env: OUT (logs and JSON, default bench-out), STEPS (default 6, the first the warm-up),
# SHAPES (bf16 shapes, default both), REFUSED (shapes only probed, default the two quantized),
# TOPO_DIR (default jobs/topologies/gpu/bench; the topologies are TOPO_DIR/colocated-<shape>.yaml),
# DEVICE (cuda, the default, or cpu for a host topology on the mpi transport), PYTHON
# (default python3), SHAPE_TIMEOUT (seconds per run, default 300). REFIT_LIB defaults to
# BUILD_DIR/librefit.so. Exit status 0 when every run exited 0 and every bf16 shape's bytes
# were verified (the speed target is in the table, not in the status).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
build=$(cd "$build" && pwd) || exit 1
out=${OUT:-bench-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=${STEPS:-6}
shapes=${SHAPES:-"llama-3.1-8b qwen3-30b-a3b-24l-bf16"}
refused=${REFUSED-"qwen3-30b-a3b-24l-wna16 qwen3-30b-a3b-24l-fp8"}
topo_dir=${TOPO_DIR:-jobs/topologies/gpu/bench}
device=${DEVICE:-cuda}
py=$(command -v "${PYTHON:-python3}") || { echo "python3 not found"; exit 1; }
export REFIT_LIB=${REFIT_LIB:-$build/librefit.so}
# mpirun's ranks do not inherit a shell's site setup: the python3 found here, with its own
# site directories (as tests/gpu/python_then.sh)
site=$("$py" -c 'import os, mpi4py, torch
print(":".join(sorted({os.path.dirname(os.path.dirname(m.__file__)) for m in (mpi4py, torch)})))') ||
    { echo "$py lacks mpi4py or torch"; exit 1; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x REFIT_LIB -x PYTHONPATH
        -x PATH -np 2)
to=${SHAPE_TIMEOUT:-300}
status=0
cd "$root" || exit 1
rm -f "$out"/pc-python-*.json "$out"/pc-refit-*.json
for s in $shapes; do
    topo=$topo_dir/colocated-$s.yaml
    echo "== refit-run $s ($topo, $steps updates)"
    timeout "$to" "${mpirun[@]}" "$build/refit-run" --topology "$topo" --steps "$steps" \
        --verify none --bench-json "$out/pc-refit-$s.json" > "$out/pc-refit-$s.log" 2>&1
    rc=$?
    grep -E '^refit: (bench|COMMITTED|FAILED)|^refit: [0-9]+ of' "$out/pc-refit-$s.log"
    [ $rc -eq 0 ] || { echo "refit-run $s: exit $rc (see $out/pc-refit-$s.log)"; status=1; }
    echo "== python $s"
    timeout "$to" "${mpirun[@]}" "$py" bench/python_colocated.py --topology "$topo" \
        --updates "$steps" --device "$device" --json "$out/pc-python-$s.json" \
        > "$out/pc-python-$s.log" 2>&1
    rc=$?
    grep -E '^python_colocated:' "$out/pc-python-$s.log"
    [ $rc -eq 0 ] || { echo "python $s: exit $rc (see $out/pc-python-$s.log)"; status=1; }
done
for s in $refused; do
    topo=$topo_dir/colocated-$s.yaml
    echo "== python $s (create only)"
    timeout "$to" "${mpirun[@]}" "$py" bench/python_colocated.py --topology "$topo" \
        --updates "$steps" --device "$device" --json "$out/pc-python-$s.json" \
        > "$out/pc-python-$s.log" 2>&1
    rc=$?
    grep -E '^python_colocated:' "$out/pc-python-$s.log"
    [ $rc -eq 0 ] || { echo "python $s: exit $rc (see $out/pc-python-$s.log)"; status=1; }
done
SHAPES="$shapes" REFUSED="$refused" "$py" bench/python_colocated_report.py "$out" |
    tee "$out/pc-table.md"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
