#!/usr/bin/env bash
# bench/integrity.sh: integrity on against off in one run (docs/benchmarks.md, "Integrity on the
# device"; issue #18 item 1). On the GPU host (source tools/gpu-env.sh first), from the
# repository root:
#
#   OUT=out bash bench/integrity.sh [BUILD_DIR]       # build-gpu/ by default (configured here)
#
# mpi to GPU: refit-run on jobs/topologies/gpu/bench/mpi-llama-3.1-8b-4l.yaml (the Llama-3.1-8B
# shape at 4 layers, 3.85 GB of bf16, 32 MiB chunks; trainer on the host, rollout storage on GPU
# 0), generator source, STEPS updates (default 3, the first a warm-up), four runs back to back:
#   off   --no-integrity (the topology's transfer.integrity: false)
#   dev   --integrity: refit-sum64 v1 trailers, checked on the receiver's device chunk buffer
#         (the default for device storage over mpi), the sender's seal summed by its pool
#   dev1  dev with the sender's seal on one thread (REFIT_MPI_SEAL_THREADS=1)
#   devr  dev with the seal reading the chunk again (REFIT_MPI_SEAL_FUSED=0): with CKDIR the
#         default dev seals from the read threads' sums (rf_chunk_seal_sum); the generator
#         source has no read threads, so there dev and devr are the same path
#   host  --integrity with REFIT_INTEGRITY_TRAILER=xxh3: XXH3-64 hashed on the receiver's
#         pinned host buffer (the path before this change)
#   NAME-tN  any of them with N checkpoint read threads (REFIT_CKPT_READ_THREADS=N)
# each with --storage-digest (all must agree) and --verify none: refit-run's default,
# --verify all, runs the host oracle over the 3.85 GB after every update (about 30 s each on the
# H200): that, not the updates, is what made the runs of 2026-12-02 and 2026-12-03 outlast
# their limits. CKDIR=DIR: the trainer reads the safetensors checkpoint in DIR on every update
# (--checkpoint DIR --checkpoint-updates all; bench/mpi-pinned.sh writes one to
# /tmp/refit-mpi-pinned-ckpt) instead of the generator. The
# colocated and host-rate programs below run first (seconds). Colocated CUDA IPC:
# build-gpu/ipc-integrity (bench/ipc-integrity.cu): a copy with a fused source checksum plus a
# read of the destination against the copy alone. build-gpu/digest-rate (bench/digest-rate.c):
# the host's XXH3-64 and refit-sum64 rates over one 32 MiB chunk (the sender's seal).
# bench/integrity_report.py prints the tables and writes $OUT/integrity.json.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
out=${OUT:-integrity-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=${STEPS:-3}
topo=${TOPO:-jobs/topologies/gpu/bench/mpi-llama-3.1-8b-4l.yaml}
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/steps.log"; }

cd "$root" || exit 1
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREFIT_CUDA=ON \
        -DREFIT_TESTS=OFF -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc > "$out/configure.log" 2>&1 ||
        { say "configure failed"; tail -20 "$out/configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target refit-run digest-rate > "$out/build.log" 2>&1 ||
    { say "build failed"; grep -E "error" "$out/build.log" | head -20; exit 1; }
nvcc -O3 -arch=sm_90 -o "$build/ipc-integrity" "$root/bench/ipc-integrity.cu" >> "$out/build.log" 2>&1 ||
    { say "ipc-integrity build failed"; tail -5 "$out/build.log"; }
say "built"
"$build/digest-rate" $((32 << 20)) "$out/digest-rate.json" > "$out/digest-rate.log" 2>&1
cat "$out/digest-rate.log"
if [ -x "$build/ipc-integrity" ]; then
    "$build/ipc-integrity" "$out/ipc-integrity.json" > "$out/ipc-integrity.log" 2>&1
    say "ipc-integrity rc $?"
fi
for r in ${RUNS:-off dev dev1 host}; do
    env=() args=(--integrity)
    case $r in # a run's kind is its name's start: RUNS="off dev offb devb" repeats the pair
    off*) args=(--no-integrity) ;;
    dev1*) env=(-x REFIT_MPI_SEAL_THREADS=1) ;; # the sender's seal on one thread
    devr*) env=(-x REFIT_MPI_SEAL_FUSED=0) ;;   # the seal reads the chunk (pooled)
    host*) env=(-x REFIT_INTEGRITY_TRAILER=xxh3) ;;
    esac
    # a name ending in -tN reads the checkpoint with N threads (REFIT_CKPT_READ_THREADS):
    # RUNS="off dev off-t8 dev-t8"
    [[ $r =~ -t([0-9]+)$ ]] && env+=(-x REFIT_CKPT_READ_THREADS="${BASH_REMATCH[1]}")
    rm -rf "$out/prof-$r"
    [ -n "${CKDIR:-}" ] && args+=(--checkpoint "$CKDIR" --checkpoint-updates all)
    "${mpirun[@]}" "${env[@]}" -np 2 "$build/refit-run" --topology "$topo" "${args[@]}" \
        --steps "$steps" --verify none --storage-digest --profile-dir "$out/prof-$r" \
        > "$out/run-$r.log" 2>&1
    say "run $r rc $?: $(grep -E '^refit: (COMMITTED|FAILED)' "$out/run-$r.log" | tail -1)"
done
python3 "$root/bench/integrity_report.py" "$out" | tee "$out/report.txt"
