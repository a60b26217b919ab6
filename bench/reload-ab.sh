#!/usr/bin/env bash
# bench/reload-ab.sh: the A/B reload table of issue #17 item 4 (docs/benchmarks.md, "A/B reload
# table"). For every family and format refit supports (the ROWS list below: one line per row),
# refit-run runs the same topology twice, 3 updates each: A with --reload-policy layerwise
# (every layer LAYERWISE: the reference PR's slow path) and B with --reload-policy auto (the
# planner maps what it can: DIRECT / RUNTIME_VIEW). Each run writes --bench-json (the steady
# time: median of the updates after the first) and prints its storage digest after each
# committed update (--storage-digest); bench/reload_ab_report.py then prints the table (A steady,
# B steady, delta, B's mapped / layerwise layer counts, whether A's and B's last storage
# digests are equal: a row whose digests differ FAILS), writes reload-ab.json and the PNG chart.
#
#   OUT=ab-out bash bench/reload-ab.sh [BUILD_DIR]           # CPU: every row, build/ by default
#   OUT=ab-gpu bash bench/reload-ab.sh --gpu [BUILD_DIR]     # GPU host: the rows with a GPU size
#
# CPU (the default): trainer TP1 -> one rollout engine TP1 over mpi on 2 ranks, weights from the
# generator, each row at its real config size where the payload stays small enough for a
# shared 24 GiB / 2-core machine, with fewer layers / experts / vocabulary rows
# (model.overrides) otherwise; the whole CPU run takes a few minutes. --gpu: the colocated shape
# of bench/colocated.sh (trainer and rollout share GPU 0 through CUDA IPC, weights resident on
# the GPU), each row's GPU size (real size where one H200 holds it twice), build-gpu/ by default;
# source tools/gpu-env.sh first as tools/gpu-run.sh does.
#
# Env: OUT (default reload-ab-out), STEPS (default 3), ROWS_ONLY (names of rows to run, space
# separated; default all), VERIFY (refit-run --verify: none, the default, last or all),
# RUN_TIMEOUT (seconds per refit run, default 600), PLOT=0 skips the PNG, PYTHON (default
# /usr/bin/python3: Debian's, with matplotlib).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
gpu=0
if [ "${1:-}" = --gpu ]; then
    gpu=1
    shift
fi
build=${1:-$root/$([ $gpu = 1 ] && echo build-gpu || echo build)}
out=${OUT:-reload-ab-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps=${STEPS:-3}
# Debian's python3 has matplotlib (another python3 may come first on PATH)
py=${PYTHON:-$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}

# The rows, one per family and format (add the families landing in parallel here):
#   name | jobs/models config | quantization | CPU overrides | GPU overrides
# overrides: a model.overrides map body ("num_hidden_layers: 2, vocab_size: 16384"), "-" for
# the real size, "skip" to leave the row out of that mode.
ROWS=(
    "llama-3.1-8b|llama-3.1-8b.config.json|none|num_hidden_layers: 1, vocab_size: 16384|-"
    "qwen2.5-0.5b|qwen2.5-0.5b.config.json|none|num_hidden_layers: 12|-"
    "qwen3-0.6b|qwen3-0.6b.config.json|none|num_hidden_layers: 14|-"
    "qwen3-30b-a3b|qwen3-30b-a3b.config.json|none|num_hidden_layers: 1, num_experts: 32, vocab_size: 16384|num_hidden_layers: 24"
    "pythia-14m|pythia-14m.config.json|none|-|-"
    "opt-125m|opt-125m.config.json|none|-|-"
    "powermoe-3b|powermoe-3b.config.json|none|num_hidden_layers: 1, vocab_size: 16384|-"
    "qwen3-0.6b-wna16|qwen3-0.6b.config.json|wna16|num_hidden_layers: 14|-"
    "qwen3-30b-a3b-wna16|qwen3-30b-a3b.config.json|wna16|num_hidden_layers: 1, num_experts: 32, vocab_size: 16384|num_hidden_layers: 24"
    "qwen3-30b-a3b-fp8|qwen3-30b-a3b.config.json|fp8-block|num_hidden_layers: 1, num_experts: 32, vocab_size: 16384|num_hidden_layers: 24"
    "llama-3.1-8b-fp8-tensor|llama-3.1-8b.config.json|fp8-tensor|num_hidden_layers: 1, vocab_size: 16384|-"
    "llama-3.1-8b-fp8-channel|llama-3.1-8b.config.json|fp8-channel|num_hidden_layers: 1, vocab_size: 16384|-"
    "moonlight-16b-a3b|moonlight-16b-a3b-instruct.config.json|none|num_hidden_layers: 2, vocab_size: 16384|num_hidden_layers: 12"
    "qwen3-next-80b-a3b|qwen3-next-80b-a3b-instruct.config.json|none|num_hidden_layers: 4, num_experts: 32, vocab_size: 16384|num_hidden_layers: 8"
    "moonlight-16b-a3b-fp8|moonlight-16b-a3b-instruct.config.json|fp8-block|num_hidden_layers: 2, vocab_size: 16384|num_hidden_layers: 12"
    "qwen3-next-80b-a3b-fp8|qwen3-next-80b-a3b-instruct-fp8.config.json|fp8-block|num_hidden_layers: 4, num_experts: 32, vocab_size: 16384|num_hidden_layers: 8"
)

# Writes the row's topology to stdout. $1 name, $2 config, $3 quantization, $4 overrides.
topology() {
    local model="config: $root/jobs/models/$2"
    [ "$3" != none ] && model="$model, quantization: $3"
    [ "$3" = wna16 ] && model="$model, group_size: 128"
    [ "$4" != - ] && model="$model, overrides: { $4 }"
    echo "# bench/reload-ab.sh row $1 ($([ $gpu = 1 ] && echo GPU || echo CPU))"
    echo "name: reload-ab-$1"
    echo "model: { $model }"
    if [ $gpu = 1 ]; then
        echo "trainer: { tp: 1, gpus: [0] }"
        echo "rollout: { engines: 1, tp: 1, ep: 1, backend: triton, gpus: [0] }"
        echo "colocated: true"
        echo "transfer: { transport: ipc, mode: broadcast, chunk_bytes: 1GiB, buffers: 4, timeout_s: 300 }"
    else
        echo "trainer: { tp: 1 }"
        echo "rollout: { engines: 1, tp: 1, backend: triton }"
        # a deadline far enough out for a loaded CPU machine (slack + payload / 1 MB/s)
        echo "transfer: { transport: mpi, mode: broadcast, timeout_s: 600, min_bandwidth: 1MB/s }"
    fi
}

mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
status=0
names=()
cd "$root" || exit 1
t0=$(date +%s)
for row in "${ROWS[@]}"; do
    IFS='|' read -r name cfg quant cpu_ov gpu_ov <<< "$row"
    ov=$cpu_ov
    [ $gpu = 1 ] && ov=$gpu_ov
    [ "$ov" = skip ] && continue
    if [ -n "${ROWS_ONLY:-}" ] && ! [[ " $ROWS_ONLY " == *" $name "* ]]; then
        continue
    fi
    names+=("$name")
    topology "$name" "$cfg" "$quant" "$ov" > "$out/$name.yaml"
    for side in A B; do
        pol=layerwise
        [ $side = B ] && pol=auto
        echo "== $name $side (--reload-policy $pol, $steps updates)"
        timeout "${RUN_TIMEOUT:-600}" "${mpirun[@]}" "$build/refit-run" --topology "$out/$name.yaml" \
            --steps "$steps" --reload-policy "$pol" --verify "${VERIFY:-none}" --storage-digest \
            --bench-json "$out/$name-$side.json" \
            --profile-dir "${TMPDIR:-/tmp}/refit-reload-ab-$name-$side" > "$out/$name-$side.log" 2>&1
        rc=$?
        grep -E '^refit: (COMMITTED|FAILED)|^refit: [0-9]+ of' "$out/$name-$side.log"
        [ $rc -eq 0 ] || { echo "$name $side: exit $rc (see $out/$name-$side.log)"; status=1; }
    done
done
echo "== $(( $(date +%s) - t0 )) s for ${#names[@]} rows"
"$py" "$root/bench/reload_ab_report.py" "$out" "${names[@]}" | tee "$out/reload-ab.md"
rc=${PIPESTATUS[0]}
[ $rc -eq 0 ] || status=1
if [ "${PLOT:-1}" != 0 ] && ! "$py" -c 'import matplotlib' 2>/dev/null; then
    # e.g. the GPU host's Python: the JSON is written; plot it where matplotlib is
    echo "reload-ab: $py has no matplotlib: no PNG (bench/plots.py --reload-ab $out/reload-ab.json elsewhere)"
elif [ "${PLOT:-1}" != 0 ]; then
    "$py" "$root/bench/plots.py" --reload-ab "$out/reload-ab.json" --out "$out" || status=1
fi
exit $status
