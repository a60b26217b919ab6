#!/usr/bin/env bash
# tools/gpu-multi-run.sh: issue #6 on a multi-GPU host (not run yet: no multi-GPU host has
# been available). Builds like tools/gpu-run.sh (run that first, or set REFIT_GPU_BUILD to an
# existing CUDA + NCCL build), then runs refit-run over the nccl transport on the topologies
# that fit the host's GPU count, modes broadcast and p2p, every update verified by the oracle,
# logs under ${OUT:-gpu-multi-out}/ (summary.txt). Exit 0 only if every run committed.
#
#   bash tools/gpu-multi-run.sh            # from the repository root, .device-deps/ alongside
#
# 2+ GPUs: jobs/topologies/gpu/nccl-llama-tiny-{broadcast,p2p}.yaml (trainer GPU 0 -> rollout
# GPU 1). 8 GPUs: jobs/topologies/gpu/multi/h200x8-*.yaml (Qwen3-30B-A3B wna16 TP1 PP4 ->
# 2 x TP2; fp8-block PP6 -> TP2 EP2), broadcast only: p2p of quantized models runs on the mpi transport only so far.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-gpu-multi-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${REFIT_GPU_BUILD:-$root/build-gpu}
summary=$out/summary.txt
: > "$summary"
status=0
if [ ! -x "$build/refit-run" ]; then
    REFIT_GPU_TESTS=0 REFIT_GPU_MEMCHECK=0 OUT="$out/build" bash "$root/tools/gpu-run.sh" \
        > "$out/build.log" 2>&1 || { echo "build failed (see $out/build.log)" | tee -a "$summary"; exit 1; }
fi
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "GPUs: $ngpu" | tee -a "$summary"
run() { # run NAME NP TOPOLOGY ARGS...
    local name=$1 np=$2 topo=$3
    shift 3
    (cd "$root" && timeout 900 mpirun --allow-run-as-root --oversubscribe --bind-to none \
        -np "$np" "$build/refit-run" --topology "$topo" --profile-dir "$out/profile-$name" "$@") \
        > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name: $(grep -E '^refit: (COMMITTED|FAILED)' "$out/$name.log" | tail -1) (exit $rc)" |
        tee -a "$summary"
    [ $rc -eq 0 ] || status=1
}
if [ "$ngpu" -ge 2 ]; then
    for m in broadcast p2p; do
        run "nccl-llama-tiny-$m" 2 jobs/topologies/gpu/nccl-llama-tiny-$m.yaml \
            --checkpoint tests/data/llama-tiny --reference tests/data/llama-tiny/tensors.reference.json \
            --steps 3 --cold-check --storage-digest
    done
fi
if [ "$ngpu" -ge 8 ]; then
    for t in jobs/topologies/gpu/multi/h200x8-*.yaml; do
        run "$(basename "$t" .yaml)" 8 "$t" --steps 3 --verify last --bench-json \
            "$out/$(basename "$t" .yaml).json"
    done
fi
cat "$summary"
exit $status
