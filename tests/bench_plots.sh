#!/usr/bin/env bash
# tests/bench_plots.sh: bench/plots.py on the small JSON under tests/data/bench/ (a colocated
# run's refit / baseline JSON, an integrity on / off pair, a reload-ab.json): every PNG it
# names is written, is a PNG, and is not trivial (more than 8 KB: axes, bars and labels).
#   tests/bench_plots.sh SOURCE_DIR OUT_DIR
set -euo pipefail
src=$1
out=$2
rm -rf "$out"
mkdir -p "$out"
d=$src/tests/data/bench
/usr/bin/python3 "$src/bench/plots.py" --colocated "$d/colocated-sample" \
    --integrity "$d/opt-125m-integrity-on.json" "$d/opt-125m-integrity-off.json" \
    --reload-ab "$d/reload-ab-sample.json" --out "$out" | tee "$out/written.txt"
for f in colocated-gbps.png update-vs-payload.png integrity.png reload-ab.png; do
    p=$out/$f
    grep -qx "$p" "$out/written.txt" || { echo "bench_plots: $f not reported"; exit 1; }
    [ -f "$p" ] || { echo "bench_plots: $p missing"; exit 1; }
    [ "$(head -c 8 "$p" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
        { echo "bench_plots: $p is not a PNG"; exit 1; }
    n=$(stat -c %s "$p")
    [ "$n" -gt 8192 ] || { echo "bench_plots: $p has $n bytes"; exit 1; }
    echo "bench_plots: $f $n bytes"
done
# nothing to plot is an error
if /usr/bin/python3 "$src/bench/plots.py" --out "$out" 2>/dev/null; then
    echo "bench_plots: no input accepted"
    exit 1
fi
echo "bench_plots: ok"
