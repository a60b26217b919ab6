#!/usr/bin/env bash
# bench/mpi-pinned.sh: a safetensors checkpoint in the page cache into GPU storage over the mpi
# transport (issue 18 item 3), held against each stage's own rate measured in the same run
# (bench/mpi-stages.c: page-cache read with one thread and with READ_THREADS, MPI
# point-to-point at the chunk size, h2d from pinned and from pageable memory). Runs, all on
# pinned receive buffers:
#   A  the sender of before: its waits back off into sleeps, the checkpoint read whole before
#      the first send (REFIT_MPI_SEND_SPIN=0 REFIT_CKPT_STREAM=0);
#   B  the spinning sender, still read then send (REFIT_MPI_SEND_SPIN=1 REFIT_CKPT_STREAM=0);
#   C1 spinning sender, each chunk's pieces read from the checkpoint as it is packed, on the
#      sender's pack thread while the previous chunk is on the wire, by one thread
#      (REFIT_CKPT_READ_THREADS=1: the default of session 7);
#   C  today's default: C1 with the chunk's rows read by the read threads (READ_THREADS,
#      default 4: what refit picks from 16 cores and 2 ranks; REFIT_CKPT_READ_THREADS);
#   P  (only when RUNS names it) pageable receive buffers, REFIT_MPI_RECV_PAGEABLE=1, with C's
#      sender.
# On the GPU host (source tools/gpu-env.sh first, as tools/gpu-run.sh does), from the repository
# root:
#
#   OUT=out bash bench/mpi-pinned.sh [BUILD_DIR]        # build-gpu/ by default (configured here)
#
# Steps: configure + build refit-run, refit-convert and mpi-stages (CUDA on); refit-convert
# --generate writes the topology's checkpoint (jobs/topologies/gpu/bench/mpi-llama-3.1-8b-4l.yaml,
# about 3.9 GB) to CKDIR (default /tmp/refit-mpi-pinned-ckpt, the host's local disk), read once
# to warm the page cache; mpi-stages; refit-run once per run in RUNS (default "B C1 C"; STEPS
# updates, default 3, every one carrying the checkpoint, --checkpoint-updates all: no
# generator production between them; the first is the warm-up), each with --storage-digest
# (every run's must be equal), --verify last on the runs of VERIFY (default C; the others
# --verify none); bench/mpi_pinned_report.py
# prints the table and writes $OUT/mpi-pinned.json. Logs under $OUT.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
out=${OUT:-mpi-pinned-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=${STEPS:-3}
topo=${TOPO:-jobs/topologies/gpu/bench/mpi-llama-3.1-8b-4l.yaml}
ck=${CKDIR:-/tmp/refit-mpi-pinned-ckpt}
chunk=${CHUNK:-$((32 << 20))} # the topology's chunk_bytes
rt=${READ_THREADS:-4}         # run C's read threads, and mpi-stages' read_mt
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/steps.log"; }

cd "$root" || exit 1
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREFIT_CUDA=ON \
        -DREFIT_TESTS=OFF -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc > "$out/configure.log" 2>&1 ||
        { say "configure failed"; tail -20 "$out/configure.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target refit-run refit-convert mpi-stages > "$out/build.log" 2>&1 ||
    { say "build failed"; grep -E "error" "$out/build.log" | head -20; exit 1; }
say "built"
if [ ! -f "$ck/model.safetensors" ]; then
    "$build/refit-convert" --generate "$topo" --force "$ck" > "$out/generate.log" 2>&1 ||
        { say "generate failed"; tail -5 "$out/generate.log"; exit 1; }
fi
cat "$ck"/*.safetensors > /dev/null # into the page cache
say "checkpoint $(du -sh "$ck" | cut -f1) in $ck, warm"
"${mpirun[@]}" -np 2 "$build/mpi-stages" "$ck/model.safetensors" "$chunk" 0 "$out/stages.json" "$rt" \
    > "$out/stages.log" 2>&1 || { say "mpi-stages failed"; tail -5 "$out/stages.log"; }
cat "$out/stages.log"
say "stages measured"
runs=${RUNS:-B C1 C}
for ab in $runs; do
    case $ab in
    A) env=(-x REFIT_MPI_SEND_SPIN=0 -x REFIT_CKPT_STREAM=0) ;;
    B) env=(-x REFIT_MPI_SEND_SPIN=1 -x REFIT_CKPT_STREAM=0) ;;
    C1) env=(-x REFIT_CKPT_READ_THREADS=1) ;;
    C) env=(-x REFIT_CKPT_READ_THREADS="$rt") ;; # send_spin from the cores (rf_xfer_send_spin_default)
    P) env=(-x REFIT_MPI_SEND_SPIN=1 -x REFIT_MPI_RECV_PAGEABLE=1 -x REFIT_CKPT_READ_THREADS="$rt") ;;
    *) say "unknown run $ab (RUNS: A B C1 C P)"; continue ;;
    esac
    rm -rf "$out/prof-$ab"
    verify=none # the host oracle of the 3.85 GB is slow: on the runs of VERIFY only
    case " ${VERIFY:-C} " in *" $ab "*) verify=last ;; esac
    "${mpirun[@]}" -x REFIT_LOG_LEVEL=info "${env[@]}" -np 2 "$build/refit-run" --topology "$topo" --checkpoint "$ck" \
        --steps "$steps" --checkpoint-updates all --verify "$verify" --storage-digest \
        --bench-json "$out/$ab.json" \
        --profile-dir "$out/prof-$ab" > "$out/run-$ab.log" 2>&1
    rc=$?
    say "run $ab rc $rc: $(grep -E '^refit: (COMMITTED|FAILED)' "$out/run-$ab.log" | tail -1)"
done
RUNS="$runs" python3 "$root/bench/mpi_pinned_report.py" "$out" | tee "$out/report.txt"
