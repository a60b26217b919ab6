#!/usr/bin/env bash
# Leak check under valgrind (DESIGN.md section 16): a short refit-run (3 updates of the tiny
# llama checkpoint, trainer TP2 -> 2 x TP1, 4 ranks, the checkpoint checked against its
# reference) with every rank under memcheck, Open MPI's own suppression file plus
# tests/valgrind.supp (Open MPI 4.1, PMIx, hwloc, libevent only), and
# --errors-for-leak-kinds=definite --error-exitcode=3: any memory error or definitely-lost
# block not suppressed fails the run. One log per rank in build/valgrind/; prints each rank's
# error and leak summary. Installs valgrind with apt-get when missing; builds ./build first.
#   tools/valgrind.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-3}
if ! command -v valgrind >/dev/null; then
  echo "refit valgrind: installing valgrind"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends valgrind
fi
[ -x build/refit-run ] || tools/setup.sh
supp=/usr/share/openmpi/openmpi-valgrind.supp
[ -f "$supp" ] || { echo "refit valgrind: $supp missing (openmpi-bin)"; exit 1; }
out=build/valgrind
rm -rf "$out"
mkdir -p "$out"
rc=0
tools/mpirun.sh -np 4 \
  valgrind --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
  --suppressions="$supp" --suppressions=tests/valgrind.supp --error-exitcode=3 --num-callers=30 --log-file="$out/vg.%q{OMPI_COMM_WORLD_RANK}.log" \
  build/refit-run --topology jobs/topologies/llama-tiny-tp2-to-2xtp1.yaml \
  --checkpoint tests/data/llama-tiny --reference tests/data/llama-tiny/tensors.reference.json \
  --steps "$steps" --profile-dir "$out/profile" --quiet || rc=$?
for log in "$out"/vg.*.log; do
  r=${log##*/vg.}
  r=${r%.log}
  errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | tail -1)
  def=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes in \([0-9,]*\) blocks.*/\1 bytes in \2 blocks/p' "$log" | tail -1)
  ind=$(sed -n 's/.*indirectly lost: \([0-9,]*\) bytes.*/\1 bytes/p' "$log" | tail -1)
  pos=$(sed -n 's/.*possibly lost: \([0-9,]*\) bytes.*/\1 bytes/p' "$log" | tail -1)
  sup=$(sed -n 's/.*suppressed: \([0-9,]*\) bytes in \([0-9,]*\) blocks.*/\1 bytes in \2 blocks/p' "$log" | tail -1)
  echo "rank $r: errors ${errs:-?}, definitely lost ${def:-0 bytes}, indirectly lost ${ind:-0 bytes}, possibly lost ${pos:-0 bytes}, suppressed ${sup:-0 bytes}"
done
if [ "$rc" -ne 0 ]; then
  echo "refit valgrind: FAILED (exit $rc); see $out/vg.<rank>.log"
  exit 1
fi
echo "refit valgrind: ok ($steps updates, 4 ranks, no definite leaks or memory errors)"
