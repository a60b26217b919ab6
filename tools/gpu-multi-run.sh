#!/usr/bin/env bash
# tools/gpu-multi-run.sh: issue #6 on a multi-GPU host (not run yet: no multi-GPU host has
# been available). Builds like tools/gpu-run.sh (run that first, or set REFIT_GPU_BUILD to an
# existing CUDA + NCCL build), then runs refit-run over the nccl transport on the topologies
# that fit the host's GPU count, modes broadcast and p2p, every update verified by the oracle,
# logs under ${OUT:-gpu-multi-out}/ (summary.txt). Exit 0 only if every run committed.
#
#   bash tools/gpu-multi-run.sh            # from the repository root, .device-deps/ alongside
#
# 2+ GPUs: jobs/topologies/gpu/nccl-llama-tiny-{broadcast,p2p}.yaml and
# jobs/topologies/gpu/multi/h200x2-nccl-*.yaml (trainer GPU 0 -> rollout GPU 1, broadcast and p2p
# storage digests compared), h200x2-colocated-*.yaml (CUDA IPC, a pair per GPU) and the
# Qwen3-30B-A3B shape at 8 layers, wna16 and fp8-block, both modes (h200x2-qwen3-30b-a3b-8l-*;
# --bench-json per run; REFIT_MULTI_TINY=0 / REFIT_MULTI_LARGE=0 skip a group). 8 GPUs: jobs/topologies/gpu/multi/h200x8-*.yaml (Qwen3-30B-A3B wna16 TP1 PP4 ->
# 2 x TP2; fp8-block PP6 -> TP2 EP2), broadcast only: p2p of quantized models runs on the mpi transport only so far.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 # never NVLink multicast on the shared hosts
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-gpu-multi-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${REFIT_GPU_BUILD:-$root/build-gpu}
summary=$out/summary.txt
# the staged Debian packages' libraries (libyaml, jansson, Check) for the binaries
# shellcheck disable=SC1091
[ -f "$root/.device-deps/env.sh" ] && source "$root/.device-deps/env.sh"
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
    (cd "$root" && timeout "${RUN_TIMEOUT:-900}" mpirun --allow-run-as-root --oversubscribe --bind-to none \
        -np "$np" "$build/refit-run" --topology "$topo" --profile-dir "$out/profile-$name" "$@") \
        > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name: $(grep -E '^refit: (COMMITTED|FAILED)' "$out/$name.log" | tail -1) (exit $rc)" |
        tee -a "$summary"
    [ $rc -eq 0 ] || status=1
}
m2=jobs/topologies/gpu/multi
# digest of update K of a run's log, for broadcast == p2p comparisons
digests() { grep -o 'storage digest [0-9a-f]*' "$out/$1.log" | awk '{print $3}' | tr '\n' ' '; }
same() { # same NAME_A NAME_B: equal, non-empty storage digest sequences
    local a b
    a=$(digests "$1") b=$(digests "$2")
    if [ -n "$a" ] && [ "$a" = "$b" ]; then
        echo "digests $1 == $2: $a" | tee -a "$summary"
    else
        echo "digests $1 != $2: '$a' vs '$b'" | tee -a "$summary"
        status=1
    fi
}
if [ "$ngpu" -ge 2 ] && [ "${REFIT_MULTI_BENCH:-1}" = 1 ]; then
    # the stage gather on a trainer-only NCCL communicator, GPU 0 <- GPU 1
    (cd "$build" && ctest -R '^check_nccl_gather$' --output-on-failure -V) > "$out/gather.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && ! grep -q 'check_nccl_gather .*Passed' "$out/gather.log"; then
        rc=3 # skipped: two GPUs were expected
    fi
    echo "check_nccl_gather: $([ $rc -eq 0 ] && echo ok || echo "FAILED (rc $rc)")" | tee -a "$summary"
    [ $rc -eq 0 ] || status=1
    # chunked broadcast against a plain ncclBroadcast of the same bytes (table + JSON)
    for ch in ${BW_CHUNKS:-64MiB 256MiB}; do
        timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ngpu" \
            "$build/nccl-bw" --chunk "$ch" --sizes "${BW_SIZES:-64MiB,1GiB,4GiB}" \
            --json "$out/nccl-bw-$ch.json" > "$out/nccl-bw-$ch.txt" 2>&1
        rc=$?
        echo "nccl-bw --chunk $ch: exit $rc" | tee -a "$summary"
        cat "$out/nccl-bw-$ch.txt" >> "$summary"
        [ $rc -eq 0 ] || status=1
    done
fi
if [ "$ngpu" -ge 2 ] && [ "${REFIT_MULTI_TINY:-1}" = 1 ]; then
    # non-colocated nccl, trainer GPU 0 -> rollout GPU 1, both modes, the same bytes
    for m in broadcast p2p; do
        run "nccl-llama-tiny-$m" 2 jobs/topologies/gpu/nccl-llama-tiny-$m.yaml \
            --checkpoint tests/data/llama-tiny --reference tests/data/llama-tiny/tensors.reference.json \
            --steps 3 --cold-check --storage-digest
        for n in qwen3-moe-tiny-wna16 qwen3-fp8-tiny; do
            run "h200x2-nccl-$n-$m" 2 $m2/h200x2-nccl-$n-$m.yaml --steps 3 --cold-check --storage-digest
        done
    done
    same nccl-llama-tiny-broadcast nccl-llama-tiny-p2p
    same h200x2-nccl-qwen3-moe-tiny-wna16-broadcast h200x2-nccl-qwen3-moe-tiny-wna16-p2p
    same h200x2-nccl-qwen3-fp8-tiny-broadcast h200x2-nccl-qwen3-fp8-tiny-p2p
    # colocated CUDA IPC, one trainer and one rollout rank per GPU, same sharding
    run h200x2-colocated-llama-tiny-tp2 4 $m2/h200x2-colocated-llama-tiny-tp2.yaml \
        --checkpoint tests/data/llama-tiny --reference tests/data/llama-tiny/tensors.reference.json \
        --steps 3 --cold-check --storage-digest
    run h200x2-colocated-qwen3-moe-tiny-wna16-tp2ep2 4 \
        $m2/h200x2-colocated-qwen3-moe-tiny-wna16-tp2ep2.yaml --steps 3 --cold-check --storage-digest
fi
if [ "$ngpu" -ge 2 ] && [ "${REFIT_MULTI_FAULTS:-1}" = 1 ]; then
    # faults over nccl between two GPUs (docs/faults.md): update 2 FAILED naming the cause,
    # the communicators aborted and re-created, update 3 COMMITTED and verified. qwen3-fp8-tiny
    # at 64 KiB chunks: 27 chunks, so a stall or a duplicate has later chunks to hit
    for f in "broadcast drop-chunk" "broadcast duplicate-chunk" "broadcast corrupt-chunk" \
             "broadcast stall" "p2p drop-chunk" "p2p stall"; do
        set -- $f
        n="nccl-fault-$1-$2"
        (cd "$root" && timeout "${RUN_TIMEOUT:-900}" mpirun --allow-run-as-root --oversubscribe \
            --bind-to none -np 2 "$build/refit-run" --topology \
            $m2/h200x2-nccl-qwen3-fp8-tiny-$1.yaml --steps 3 --integrity \
            --inject-fault "$2" --profile-dir "$out/profile-$n") > "$out/$n.log" 2>&1
        rc=$?
        if grep -q '^refit update 2/3: FAILED' "$out/$n.log" &&
            grep -q '^refit update 3/3: COMMITTED' "$out/$n.log"; then
            echo "$n: update 2 FAILED ($(grep -m1 -o 'verdict.*' "$out/$n.log" | cut -c1-160)), update 3 COMMITTED (exit $rc)" | tee -a "$summary"
        else
            echo "$n: UNEXPECTED (exit $rc; see $n.log)" | tee -a "$summary"
            status=1
        fi
    done
fi
if [ "$ngpu" -ge 2 ] && [ "${REFIT_MULTI_LARGE:-1}" = 1 ]; then
    # the Qwen3-30B-A3B shape scaled to 8 layers, trainer GPU 0 -> rollout GPU 1
    for q in wna16 fp8; do
        for m in broadcast p2p; do
            [ -n "${LARGE_ONLY:-}" ] && [ "$q-$m" != "$LARGE_ONLY" ] && continue
            n=h200x2-qwen3-30b-a3b-8l-$q-$m
            run "$n" 2 $m2/$n.yaml --steps "${STEPS:-3}" --verify "${VERIFY:-last}" \
                --storage-digest --bench-json "$out/$n.json"
        done
        same "h200x2-qwen3-30b-a3b-8l-$q-broadcast" "h200x2-qwen3-30b-a3b-8l-$q-p2p"
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
