#!/usr/bin/env bash
# bench/colocated.sh: the colocated refit benchmark of issue #4 on one GPU (docs/benchmarks.md).
#
# For each shape (Llama-3.1-8B bf16; Qwen3-30B-A3B with 24 of 48 layers in bf16, wna16 and
# fp8-block), runs refit-run on its jobs/topologies/gpu/bench/ topology: trainer and rollout
# ranks share GPU 0 through CUDA IPC, the trainer's weights are resident on the GPU, STEPS
# updates (the first is the warm-up), the oracle on the last one (--verify last), and two copy
# ceilings measured after the updates in the same process (best of 5 device-to-device copies of
# one buffer of max(payload, 4 GiB): cudaMemcpyAsync, and refit's batch kernel with the copy
# engines off). Then the third ceiling, torch's dst.copy_(src) of a buffer of the same size
# (bench/colocated_baselines.py --floor-bytes, one Python process: torch-floor.json); the
# report measures refit against the fastest of the three. Then, one after another so memory
# suffices, the two PyTorch baselines
# (bench/colocated_baselines.py: (a) one CUDA IPC handle per tensor, (b) two reused 1 GiB IPC
# buffers) on the same shapes, and a combined table (bench/colocated_report.py).
#
#   OUT=bench-out bash bench/colocated.sh [BUILD_DIR]     # BUILD_DIR default build-gpu
#
# Env: OUT (folder for logs and JSON, default bench-out), STEPS (default 6), SHAPES (refit
# topologies to run, default all four), BASELINES=0 skips the PyTorch baselines, VERIFY (bf16
# shapes: last, the default, or none), VERIFY_QUANT (quantized shapes: none, the default, or
# last), SHAPE_TIMEOUT (seconds per refit run, default 300).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
out=${OUT:-bench-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=${STEPS:-6}
shapes=${SHAPES:-"llama-3.1-8b qwen3-30b-a3b-24l-bf16 qwen3-30b-a3b-24l-wna16 qwen3-30b-a3b-24l-fp8"}
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
status=0
cd "$root" || exit 1
for s in $shapes; do
    topo=jobs/topologies/gpu/bench/colocated-$s.yaml
    # bf16: the host oracle checks the last update; quantized shapes: the host oracle re-runs
    # the reference quantizer over ~15 G elements (minutes), so it is skipped here; the GPU
    # tests compare every device kernel and the colocated CUDA IPC runs with the host reference
    verify=${VERIFY:-last}
    case $s in *wna16* | *fp8*) verify=${VERIFY_QUANT:-none} ;; esac
    echo "== refit $s ($topo, $steps updates, --verify $verify)"
    timeout "${SHAPE_TIMEOUT:-300}" "${mpirun[@]}" "$build/refit-run" --topology "$topo" \
        --steps "$steps" --verify "$verify" --bench-json "$out/refit-$s.json" \
        --profile-dir "${TMPDIR:-/tmp}/refit-bench-profile-$s" > "$out/refit-$s.log" 2>&1
    rc=$?
    grep -E '^refit: (bench|COMMITTED|FAILED)|^refit: [0-9]+ of' "$out/refit-$s.log"
    # the last update's table: where the time went
    awk '/^refit update/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$out/refit-$s.log" |
        grep -E '^refit update|^  (payload|layers|time|device|gate) '
    [ $rc -eq 0 ] || { echo "refit $s: exit $rc (see $out/refit-$s.log)"; status=1; }
done
# the torch ceiling: one buffer of each shape's ceiling size (the refit JSON's copy_ceiling.bytes)
sizes=$(python3 - "$out" $shapes <<'EOF'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
sizes = []
for s in names:
    try:
        sizes.append(str(json.load(open(os.path.join(out, "refit-%s.json" % s)))
                         ["copy_ceiling"]["bytes"]))
    except (OSError, ValueError, KeyError):
        pass
print(",".join(sizes))
EOF
)
echo "== torch copy ceiling (dst.copy_(src), sizes $sizes)"
if [ -n "$sizes" ] && python3 -c 'import torch, mpi4py' 2>/dev/null; then
    timeout 300 python3 bench/colocated_baselines.py --floor-bytes "$sizes" \
        --json "$out/torch-floor.json" > "$out/torch-floor.log" 2>&1
    rc=$?
    cat "$out/torch-floor.log"
    [ $rc -eq 0 ] || { echo "torch floor: exit $rc (see $out/torch-floor.log)"; status=1; }
else
    echo "torch floor: no refit JSON, or python3 with torch and mpi4py not found; skipped" |
        tee "$out/torch-floor.log"
    status=1
fi
if [ "${BASELINES:-1}" != 0 ]; then
    echo "== PyTorch baselines"
    if python3 -c 'import torch, mpi4py' 2>/dev/null; then
        timeout 1200 "${mpirun[@]}" python3 bench/colocated_baselines.py \
            --shape llama8b,qwen3moe24 --updates 5 --json "$out/baselines.json" \
            > "$out/baselines.log" 2>&1
        rc=$?
        tail -20 "$out/baselines.log"
        [ $rc -eq 0 ] || { echo "baselines: exit $rc (see $out/baselines.log)"; status=1; }
    else
        echo "baselines: python3 with torch and mpi4py not found; skipped" | tee "$out/baselines.log"
        status=1
    fi
fi
python3 bench/colocated_report.py "$out" | tee "$out/table.md"
exit $status
