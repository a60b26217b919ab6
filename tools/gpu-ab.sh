#!/usr/bin/env bash
# tools/gpu-ab.sh: on the GPU host, builds refit-run of an earlier commit (A: a source tree, or
# a tar of one as `git archive` writes it) and of this tree (B), then runs the interleaved
# colocated benchmark A/B (bench/colocated-ab.sh). Logs and JSON under ${OUT:-ab-out}/.
#
#   git archive -o .ab/before.tar 1d648bc      # here; ship .ab/ and .device-deps/ along
#   OUT=ab-out bash tools/gpu-ab.sh .ab/before.tar
#
# Env: OUT, ROUNDS, STEPS, SHAPES, SHAPE_TIMEOUT (bench/colocated-ab.sh), AB_BUILD_ONLY=1 (build
# both and stop).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -eq 1 ] || { echo "usage: OUT=dir $0 A_TREE|A.tar" >&2; exit 2; }
out=${OUT:-ab-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# shellcheck disable=SC1091
source "$root/tools/gpu-env.sh" "$root"
a=$1
if [ -f "$a" ]; then
    mkdir -p "$root/build-ab/src-a"
    tar -xf "$a" -C "$root/build-ab/src-a" || exit 1
    a=$root/build-ab/src-a
fi
a=$(cd "$a" && pwd)
build_tree() { # SRC BUILD LOG
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREFIT_CUDA=ON \
        -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc > "$3" 2>&1 &&
        cmake --build "$2" -j "$(nproc)" --target refit-run >> "$3" 2>&1
}
build_tree "$a" "$root/build-ab/a" "$out/build-a.log" || { tail -30 "$out/build-a.log"; exit 1; }
build_tree "$root" "$root/build-ab/b" "$out/build-b.log" || { tail -30 "$out/build-b.log"; exit 1; }
echo "A: $(cat "$a/.ab-commit" 2>/dev/null || echo "$a") B: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "$root")" | tee "$out/ab-trees.txt"
[ "${AB_BUILD_ONLY:-0}" = 1 ] && exit 0
OUT=$out bash "$root/bench/colocated-ab.sh" "$a" "$root/build-ab/a" "$root" "$root/build-ab/b"
