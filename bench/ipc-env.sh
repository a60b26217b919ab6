#!/usr/bin/env bash
# bench/ipc-env.sh: which ingredient of refit-run's colocated job makes reads of a CUDA-IPC
# imported buffer slow (bench/ipc-env.cu; docs/benchmarks.md, "Where the copy rate goes"). On
# the GPU host, from anywhere: builds bench/ipc-env.cu into OUT (default ipc-env-out), snapshots
# the GPU (nvidia-smi), runs every variant (or those named: VARIANTS="V0 V2"), each as a fresh
# exporter / importer pair on device 0, and tees the log. Under 90 s on an H200. Everything lands
# in OUT: ipc-env (the binary), build.log, gpu.txt, ipc-env.json, ipc-env.log.
#   OUT=/tmp/ie bash bench/ipc-env.sh
#   OUT=/tmp/ie VARIANTS="V0 V8" IPCENV_GIB=8 bash bench/ipc-env.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
o=${OUT:-ipc-env-out}
mkdir -p "$o"
o=$(cd "$o" && pwd)
nvcc=nvcc
command -v nvcc > /dev/null || nvcc=/usr/local/cuda/bin/nvcc
"$nvcc" -O3 -arch=sm_90 -Werror all-warnings -o "$o/ipc-env" "$root/bench/ipc-env.cu" \
    > "$o/build.log" 2>&1 || { cat "$o/build.log"; exit 1; }
{
    nvidia-smi --query-gpu=name,driver_version,compute_mode,mig.mode.current,clocks.sm,clocks.mem,memory.used,memory.total,power.draw,clocks_throttle_reasons.active --format=csv 2>&1
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1
} > "$o/gpu.txt"
cat "$o/gpu.txt"
t0=$(date +%s)
# shellcheck disable=SC2086 # VARIANTS is a list
timeout 150 "$o/ipc-env" "$o/ipc-env.json" ${VARIANTS:-} 2>&1 | tee "$o/ipc-env.log"
rc=${PIPESTATUS[0]}
echo "ipc-env rc $rc, $(($(date +%s) - t0)) s; log and JSON in $o" | tee -a "$o/ipc-env.log"
exit "$rc"
