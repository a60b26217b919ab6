#!/usr/bin/env bash
# bench/copy-env.sh: why a copy inside refit-run runs slower than in a lone process (docs/
# benchmarks.md, "Copy rate"). On the GPU host, from the repository root, with a CUDA build in
# BUILD_DIR (default build-gpu): bench/copy-variants.cu (CV_LITE: one cudaMemcpyAsync, the
# copies per piece over 2 streams, refit's batch kernel) alone, next to a second process holding
# 32 GiB idle, next to one polling an event, and under mpirun -np 1; then refit-run on the
# Llama-3.1-8B bench topology with REFIT_DEVICE_TIMELINE=1 (the GPU time of the row copies and
# the idle gaps per update) and its two in-process ceilings. Everything lands in OUT (default
# copy-env-out): env-checks.txt, the JSON and the refit log.
#   OUT=copy-env-out bash bench/copy-env.sh [BUILD_DIR]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
o=${OUT:-copy-env-out}
mkdir -p "$o"
o=$(cd "$o" && pwd)
cd "$root" || exit 1
mpr=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
cv=$o/copy-variants
nvcc -O3 -arch=sm_90 -o "$cv" bench/copy-variants.cu > "$o/cv-build.log" 2>&1 ||
    { cat "$o/cv-build.log"; exit 1; }
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s] $*"; }
pick() { grep -E "==|memcpy|k0"; }
{
    el "X1 alone"
    CV_LITE=1 "$cv" "$o/x1.json" | pick
    el "X2 next to a process holding 32 GiB, idle"
    "$cv" --hold 32 20 & h=$!
    sleep 4
    CV_LITE=1 "$cv" "$o/x2.json" | pick
    kill "$h"; wait "$h"
    el "X3 next to a process holding 32 GiB, polling an event"
    "$cv" --hold 32 20 poll & h=$!
    sleep 4
    CV_LITE=1 "$cv" "$o/x3.json" | pick
    kill "$h"; wait "$h"
    el "X4 under mpirun -np 1"
    timeout 60 "${mpr[@]}" -np 1 -x CV_LITE=1 "$cv" "$o/x4.json" | pick
    el "X5 refit-run, Llama-3.1-8B, REFIT_DEVICE_TIMELINE=1"
    REFIT_DEVICE_TIMELINE=1 timeout 120 "${mpr[@]}" -np 2 "$build/refit-run" \
        --topology jobs/topologies/gpu/bench/colocated-llama-3.1-8b.yaml --steps 4 \
        --verify none --bench-json "$o/x5-llama.json" > "$o/x5-llama.log" 2>&1
    echo "refit-run rc $?"
    grep -E "timeline|^refit: bench" "$o/x5-llama.log" | tail -4
} 2>&1 | tee "$o/env-checks.txt"
