#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz in ./build-fuzz (CC=clang, -DREFIT_FUZZ=ON) and
# runs each for SECONDS (default 30) from its seed corpus in tests/fuzz/corpus/<target>/.
# New inputs go to build-fuzz/corpus/<target>/ (the checked-in seeds are not touched), crash
# inputs to build-fuzz/artifacts/<target>/. Prints executions per target from libFuzzer's
# final stats; exits non-zero if any target crashed, leaked, timed out or ran out of memory.
# Installs clang, libclang-rt-14-dev and llvm (llvm-symbolizer) with apt-get when missing
# (root or sudo).
#   tools/fuzz.sh        # 30 s per target
#   tools/fuzz.sh 300    # 5 minutes per target
#   tools/fuzz.sh 300 fuzz_model_config   # one target
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
build=build-fuzz

pkgs=(clang libclang-rt-14-dev llvm)  # llvm: llvm-symbolizer for readable stacks
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "refit fuzz: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# the rest of refit's dependencies (MPI, libyaml, ...) and a gcc build come from setup.sh
[ -d build ] || tools/setup.sh

CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREFIT_FUZZ=ON -DREFIT_TESTS=OFF \
  -DCMAKE_C_COMPILER=clang >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in tests/fuzz/fuzz_*.c; do
    targets+=("$(basename "$src" .c)")
  done
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
fail=0
summary=()
for t in "${targets[@]}"; do
  work=$build/corpus/$t
  art=$build/artifacts/$t
  mkdir -p "$work" "$art"
  log=$build/$t.log
  echo "refit fuzz: $t for ${secs}s"
  rc=0
  "$build/tests/fuzz/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$art/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  corp=$(grep -o 'DONE .*corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1 | sed 's/.*corp: //')
  seeds=$(find "tests/fuzz/corpus/$t" -type f | wc -l)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | sed 's/cov: //')
  arts=$(find "$art" -type f | wc -l)
  status=ok
  if [ "$rc" -ne 0 ] || [ "$arts" -ne 0 ]; then
    status="FAILED (exit $rc, $arts artifact(s) in $art; log $log)"
    fail=1
    grep -m3 -E 'ERROR: |runtime error|SUMMARY' "$log" || true
  fi
  summary+=("$(printf '%-20s %12s %10s %6s %6s %12s %8s  %s' "$t" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "$seeds" "${corp:-?}" "${rss:-?}" "$status")")
done
printf '%-20s %12s %10s %6s %6s %12s %8s  %s\n' target executions exec/s cov seeds corpus peak_mb status
printf '%s\n' "${summary[@]}"
if [ "$fail" -ne 0 ]; then
  echo "refit fuzz: FAILED"
  exit 1
fi
echo "refit fuzz: ok (${secs}s per target)"
