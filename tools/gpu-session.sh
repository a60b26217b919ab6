#!/usr/bin/env bash
# tools/gpu-session.sh: the session API's GPU tests alone on the GPU host (a shorter run than
# tools/gpu-run.sh): configures a CUDA build, builds librefit.so and the probe, runs
# `ctest -R gpu_python_session` (python/tests/test_session_gpu.py: transformers models as
# trainer and as an engine whose CUDA parameters are the runtime storage) and writes the logs
# under ${OUT:-gpu-out}/session (summary.txt says what passed). Exit status 0 only when every
# test passed and really ran (a skip on the GPU host is a failure).
#   bash tools/gpu-session.sh          # from the repository root, .device-deps/ alongside
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-gpu-out}/session
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${REFIT_GPU_BUILD:-$root/build-gpu}
# shellcheck disable=SC1091
source "$root/tools/gpu-env.sh" "$root"
{ nvidia-smi || true; python3 -c 'import torch, transformers, mpi4py; print(torch.__version__, transformers.__version__, mpi4py.__version__, torch.cuda.is_available())'; } > "$out/env.log" 2>&1
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREFIT_CUDA=ON \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc > "$out/configure.log" 2>&1 &&
    cmake --build "$build" -j16 --target refit_shared gpu_probe > "$out/build.log" 2>&1
rc=$?
echo "build: rc $rc" | tee "$out/summary.txt"
[ $rc -eq 0 ] || { tail -40 "$out/build.log" "$out/configure.log"; exit 1; }
ctest --test-dir "$build" -R "${REFIT_GPU_SESSION_TESTS:-gpu_python_session}" --output-on-failure \
    > "$out/ctest.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -qE "Skipped|Not Run" "$out/ctest.log"; then rc=3; fi
echo "ctest: rc $rc" | tee -a "$out/summary.txt"
grep -E "tests passed|Passed|Failed|Skipped" "$out/ctest.log" | tee -a "$out/summary.txt"
exit $rc
