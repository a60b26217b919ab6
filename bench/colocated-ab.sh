#!/usr/bin/env bash
# bench/colocated-ab.sh: the colocated benchmark (bench/colocated.sh) of two source trees, A
# and B, interleaved on one GPU so that both see the same machine state: for each round and
# each shape, A then B (B then A on even rounds), each run its own tree's bench/colocated.sh
# with its own build. Then bench/colocated_ab_report.py prints a table of best and median
# update times per shape, B against A, and writes ab.json. Used for issue #14's "within 3% of
# the times before the change" (docs/benchmarks.md).
#
#   OUT=ab-out bash bench/colocated-ab.sh A_ROOT A_BUILD B_ROOT B_BUILD
#
# Env: OUT (default ab-out), ROUNDS (default 2), STEPS (default 6), SHAPES (as colocated.sh),
# SHAPE_TIMEOUT. Baselines are not run here (BASELINES=0): run bench/colocated.sh once for them.
set -uo pipefail
[ $# -eq 4 ] || { echo "usage: OUT=dir $0 A_ROOT A_BUILD B_ROOT B_BUILD" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-ab-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rounds=${ROUNDS:-2}
shapes=${SHAPES:-"llama-3.1-8b qwen3-30b-a3b-24l-bf16 qwen3-30b-a3b-24l-wna16 qwen3-30b-a3b-24l-fp8"}
declare -A root=([A]=$1 [B]=$3) build=([A]=$2 [B]=$4)
status=0
for r in $(seq 1 "$rounds"); do
    order="A B"
    [ $((r % 2)) -eq 0 ] && order="B A"
    for s in $shapes; do
        for side in $order; do
            echo "== round $r, $s, $side (${root[$side]})"
            OUT=$out/$side-r$r SHAPES=$s BASELINES=0 bash "${root[$side]}/bench/colocated.sh" \
                "${build[$side]}" > "$out/$side-r$r-$s.log" 2>&1 || status=1
            grep -E '^refit: (bench|FAILED)' "$out/$side-r$r-$s.log"
        done
    done
done
python3 "$here/colocated_ab_report.py" "$out" "$rounds" $shapes | tee "$out/ab.md"
exit $status
