#!/usr/bin/env bash
# tools/gpu-run.sh: the one script run on the GPU host (shared/device/README.md). It
# configures a CUDA build, builds the GPU test programs and refit-run, runs `ctest -L gpu`
# (with the one-GPU nccl transport tests, tests/gpu/check_nccl.c, label nccl too)
# (the accelerator kernels vs the host reference, refit-run end to end with rollout storage on
# GPU 0 on every jobs/topologies/gpu/ topology, colocated CUDA IPC pairs sharing GPU 0, GPU vs
# CPU storage digests) and
# compute-sanitizer memcheck on the GPU test program and on one tiny-fixture GPU refit-run
# (mpirun -np 2, every rank wrapped), and writes every log under ${OUT:-gpu-out}/
# (summary.txt says what passed). Exit status 0 only when every step passed
# and the GPU tests really ran (a skip on the GPU host is a failure).
#
#   bash tools/gpu-run.sh                  # from the repository root, .device-deps/ alongside
#
# Env: OUT (log folder), REFIT_GPU_BUILD (build folder, default build-gpu),
# REFIT_SANITIZER_BENCH_MIB (copy size for the sanitizer run, default 256), REFIT_GPU_MEMCHECK=0
# (skip compute-sanitizer), REFIT_GPU_EXCLUDE (a ctest -E regex of GPU tests to leave out, e.g.
# qwen3_0_6b for a short run), REFIT_GPU_BENCH=1 (then run bench/colocated.sh, logs in
# $OUT/bench; STEPS, SHAPES, BASELINES pass through), REFIT_GPU_TESTS=0 (skip ctest -L gpu).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-gpu-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${REFIT_GPU_BUILD:-$root/build-gpu}
summary=$out/summary.txt
: > "$summary"
status=0
step() { # step NAME RC
    echo "$1: $([ "$2" -eq 0 ] && echo ok || echo "FAILED (rc $2)")" | tee -a "$summary"
    [ "$2" -eq 0 ] || status=1
}

# staged Debian packages and nvcc (tools/gpu-env.sh)
# shellcheck disable=SC1091
source "$root/tools/gpu-env.sh" "$root"

{
    date -u
    nvidia-smi || true
    nvcc --version || true
    cmake --version || true
    echo "PKG_CONFIG=${PKG_CONFIG:-} CPATH=${CPATH:-}"
    echo "PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-} PKG_CONFIG_SYSROOT_DIR=${PKG_CONFIG_SYSROOT_DIR:-}"
} > "$out/env.log" 2>&1

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREFIT_CUDA=ON -DREFIT_TESTS=ON \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc > "$out/configure.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && ! grep -q 'refit: CUDA ON' "$out/configure.log"; then
    echo "configure: CUDA not found" >> "$out/configure.log"
    rc=2
elif [ $rc -eq 0 ] && ! grep -q 'refit: NCCL ON' "$out/configure.log"; then
    echo "configure: NCCL not found (the nccl tests would be skipped)" >> "$out/configure.log"
    rc=2
fi
step configure $rc
grep 'refit:' "$out/configure.log" >> "$summary"
[ $rc -eq 0 ] || { echo "see $out/configure.log"; exit 1; }

cmake --build "$build" -j "$(nproc)" --target check_accel_cuda check_accel refit-run refit_shared gpu_probe \
    make_nan_fp8 make_fp8_ckpt refit-plan check_nccl check_nccl_gather nccl-bw check_session_quant > "$out/build.log" 2>&1
rc=$?
step build $rc
[ $rc -eq 0 ] || { tail -40 "$out/build.log"; exit 1; }

# the host reference's own unit test, then the GPU tests
(cd "$build" && ctest -R '^check_accel$' --output-on-failure) > "$out/ctest-accel-unit.log" 2>&1
step "ctest check_accel (host reference)" $?

if [ "${REFIT_GPU_TESTS:-1}" != 0 ]; then
(cd "$build" && ctest -L gpu ${REFIT_GPU_EXCLUDE:+-E "$REFIT_GPU_EXCLUDE"} --output-on-failure -V) > "$out/ctest-gpu.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -qiE 'skipped|not run' "$out/ctest-gpu.log"; then
    echo "gpu tests were skipped on the GPU host" >> "$out/ctest-gpu.log"
    rc=3
fi
step "ctest -L gpu" $rc
grep '^.*bench:' "$out/ctest-gpu.log" | sed 's/^[0-9]*: //' >> "$summary"
grep -E '^[0-9]+/[0-9]+ Test' "$out/ctest-gpu.log" >> "$summary"
grep -E 'storage digest|digest_compare.sh:' "$out/ctest-gpu.log" | sed 's/^[0-9]*: //' \
    >> "$out/digests.txt"
fi

if [ "${REFIT_GPU_BENCH:-0}" = 1 ]; then
    OUT="$out/bench" timeout 1500 bash "$root/bench/colocated.sh" "$build" > "$out/bench.log" 2>&1
    step "bench/colocated.sh" $?
    cat "$out/bench/table.md" >> "$summary" 2>/dev/null
fi

gpu_test="$build/tests/gpu/check_accel_cuda"
if [ "${REFIT_GPU_MEMCHECK:-1}" = 0 ]; then
    echo "compute-sanitizer: skipped (REFIT_GPU_MEMCHECK=0)" | tee -a "$summary"
elif command -v compute-sanitizer >/dev/null 2>&1; then
    CK_FORK=no CK_DEFAULT_TIMEOUT=1200 REFIT_ACCEL_BENCH_MIB=${REFIT_SANITIZER_BENCH_MIB:-256} \
        timeout 420 compute-sanitizer --tool memcheck --error-exitcode 99 "$gpu_test" \
        > "$out/memcheck.log" 2>&1
    rc=$?
    step "compute-sanitizer memcheck" $rc
    grep -E 'ERROR SUMMARY' "$out/memcheck.log" >> "$summary"
    # the GPU data path under memcheck: llama-tiny, 2 updates, rollout storage on GPU 0 (the
    # trainer rank is wrapped too; it makes no CUDA calls, hence --require-cuda-init no)
    (cd "$root" && timeout 480 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
        compute-sanitizer --tool memcheck --error-exitcode 99 --require-cuda-init no \
        "$build/refit-run" --topology jobs/topologies/gpu/llama-tiny.yaml \
        --checkpoint tests/data/llama-tiny --reference tests/data/llama-tiny/tensors.reference.json \
        --steps 2 --cold-check --storage-digest --profile-dir "$build/memcheck-profile") \
        > "$out/memcheck-refit-run.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && ! grep -q 'refit: COMMITTED 2 update(s)' "$out/memcheck-refit-run.log"; then
        rc=5
    fi
    step "compute-sanitizer memcheck refit-run (gpu/llama-tiny)" $rc
    grep -E 'ERROR SUMMARY|^refit: ' "$out/memcheck-refit-run.log" >> "$summary"
    # colocated CUDA IPC under memcheck: both ranks on GPU 0, arenas exported / imported
    (cd "$root" && timeout 480 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
        compute-sanitizer --tool memcheck --error-exitcode 99 \
        "$build/refit-run" --topology jobs/topologies/gpu/colocated-llama-tiny.yaml \
        --checkpoint tests/data/llama-tiny --reference tests/data/llama-tiny/tensors.reference.json \
        --steps 2 --cold-check --storage-digest --profile-dir "$build/memcheck-ipc-profile") \
        > "$out/memcheck-refit-run-ipc.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && ! grep -q 'refit: COMMITTED 2 update(s)' "$out/memcheck-refit-run-ipc.log"; then
        rc=5
    fi
    step "compute-sanitizer memcheck refit-run (gpu/colocated-llama-tiny, CUDA IPC)" $rc
    grep -E 'ERROR SUMMARY|^refit: ' "$out/memcheck-refit-run-ipc.log" >> "$summary"
else
    echo "compute-sanitizer not found" > "$out/memcheck.log"
    step "compute-sanitizer memcheck" 4
fi

echo "logs in $out"
cat "$summary"
exit $status
