#!/usr/bin/env bash
# tools/gpu-multi-run.sh: the multi-GPU runs (docs/nccl.md, docs/gpu.md). Builds like
# tools/gpu-run.sh when REFIT_GPU_BUILD (default build-gpu) holds no refit-run, then runs what
# fits the host's GPU count and writes every log under ${OUT:-gpu-multi-out}/ (summary.txt).
# Exit 0 only if every run did what it should.
#
#   bash tools/gpu-multi-run.sh            # from the repository root, .device-deps/ alongside
#
# 2+ GPUs, in groups (each skipped with REFIT_MULTI_<GROUP>=0):
#   BENCH   check_nccl_gather (the stage gather on a trainer-only NCCL communicator) and
#           bench/nccl-bw.c (chunked broadcast vs plain ncclBroadcast; BW_CHUNKS, BW_SIZES);
#   TINY    nccl trainer GPU 0 -> rollout GPU 1, broadcast and p2p, storage digests compared:
#           jobs/topologies/gpu/nccl-llama-tiny-*.yaml, multi/h200x2-nccl-*.yaml; colocated
#           CUDA IPC with a trainer + rollout pair per GPU: multi/h200x2-colocated-*.yaml;
#   FAULTS  drop / duplicate / corrupt / stall over nccl (update 2 FAILED, update 3 COMMITTED);
#   LARGE   the Qwen3-30B-A3B shape at 8 layers, wna16 and fp8-block, both modes, digests
#           compared, --bench-json (VERIFY: none by default, STEPS, LARGE_ONLY=wna16-p2p ...).
# 8 GPUs: multi/h200x8-*.yaml (Qwen3-30B-A3B wna16 TP1 PP4 -> 2 x TP2; fp8-block PP6 -> TP2 EP2),
# broadcast and p2p, digests compared. RUN_TIMEOUT bounds each refit-run (default 900 s).
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
            why=$(awk '/^refit update 2\/3/{p=1} /^refit update 3\/3/{p=0} p' "$out/$n.log" |
                grep -E 'verdict after|^  verdict ' | sed 's/^ *//' | tr '\n' ' ' | cut -c1-240)
            echo "$n: update 2 FAILED ($why), update 3 COMMITTED (exit $rc)" | tee -a "$summary"
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
            # the host oracle does not finish on 4-6 GB within the limit: VERIFY=last to try
            run "$n" 2 $m2/$n.yaml --steps "${STEPS:-3}" --verify "${VERIFY:-none}" \
                --storage-digest --bench-json "$out/$n.json"
        done
        same "h200x2-qwen3-30b-a3b-8l-$q-broadcast" "h200x2-qwen3-30b-a3b-8l-$q-p2p"
    done
fi
if [ "$ngpu" -ge 8 ]; then
    # broadcast as written, then p2p (the same file with mode p2p): the same storage digests
    for t in jobs/topologies/gpu/multi/h200x8-*.yaml; do
        b=$(basename "$t" .yaml)
        sed -e 's/mode: broadcast/mode: p2p/' -e "s#config: \.\./#config: $root/jobs/topologies/gpu/#" \
            "$t" > "$out/$b-p2p.yaml"
        run "$b" 8 "$t" --steps 3 --verify "${VERIFY:-none}" --storage-digest \
            --bench-json "$out/$b.json"
        run "$b-p2p" 8 "$out/$b-p2p.yaml" --steps 3 --verify "${VERIFY:-none}" --storage-digest \
            --bench-json "$out/$b-p2p.json"
        same "$b" "$b-p2p"
    done
fi
cat "$summary"
exit $status
