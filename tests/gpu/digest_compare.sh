#!/usr/bin/env bash
# digest_compare.sh PROBE ENV TOPO_A TOPO_B -- CMD...
# Runs CMD --topology TOPO_A --storage-digest with ENV set (ENV "-": none) and
# CMD --topology TOPO_B --storage-digest without it, and requires the same non-empty sequence
# of "storage digest <hex>" lines (rollout storage byte for byte equal after every update),
# with chunk payloads staged h2d in run A (its rollout storage is on a device), or, for
# colocated ipc, run A's pieces read device to device from CUDA IPC arenas.
#   PROBE: a program that exits 77 without a CUDA device (that skips), or "none".
#   TOPO_B "twin": TOPO_A with ", gpus: [0]" removed (a CPU run of the same topology).
set -u
probe=$1 envA=$2 topoA=$3 topoB=$4
shift 4
[ "${1:-}" = "--" ] && shift
if [ "$probe" != none ]; then "$probe" || exit 77; fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$topoB" = twin ]; then
  topoB=$tmp/$(basename "$topoA")
  sed -e 's/, gpus: \[0\]//' -e "s#config: \.\./\.\./models/#config: $root/jobs/models/#" \
      "$topoA" > "$topoB"
fi
if [ "$envA" = "-" ]; then
  outA=$("$@" --topology "$topoA" --storage-digest 2>&1); rcA=$?
else
  outA=$(env "$envA" "$@" --topology "$topoA" --storage-digest 2>&1); rcA=$?
fi
outB=$(env -u REFIT_TEST_DEVICE_ACCEL "$@" --topology "$topoB" --storage-digest 2>&1); rcB=$?
dA=$(printf '%s\n' "$outA" | grep -o 'storage digest [0-9a-f]*')
dB=$(printf '%s\n' "$outB" | grep -o 'storage digest [0-9a-f]*')
printf 'run A (%s, device):\n%s\n' "$topoA" "$(printf '%s\n' "$outA" | grep -E 'storage digest|^refit:' )"
printf 'run B (%s, host):\n%s\n' "$topoB" "$(printf '%s\n' "$outB" | grep -E 'storage digest|^refit:')"
if [ $rcA -ne 0 ] || [ $rcB -ne 0 ]; then
  printf '%s\n' "$outA" | tail -n 20
  printf '%s\n' "$outB" | tail -n 20
  echo "digest_compare.sh: exit $rcA / $rcB"
  exit 1
fi
if [ -z "$dA" ] || [ "$dA" != "$dB" ]; then echo "digest_compare.sh: digests differ"; exit 1; fi
# colocated ipc on a device stages nothing h2d: its pieces go device to device instead
if printf '%s\n' "$outA" | grep -q ' 0 chunk payloads staged h2d)'; then
  echo "digest_compare.sh: run A staged no chunk payload (not on a device?)"
  exit 1
fi
echo "digest_compare.sh: $(printf '%s\n' "$dA" | wc -l) update(s), device == host byte for byte"
