#!/usr/bin/env bash
# Runs one refit-run command twice: A reads every checkpoint update whole before its first
# send, on the sender's calling thread (REFIT_CKPT_STREAM=0 REFIT_MPI_SEND_SPIN=0: the path
# before issue 18 item 3); B reads each chunk's pieces from the checkpoint as it packs them, on
# the sender's pack thread beside the wire (REFIT_MPI_SEND_SPIN=1 forces the spinning sender
# on this oversubscribed machine), on one read thread; C as B with 3 read threads
# (REFIT_CKPT_READ_THREADS=3: each chunk's rows cut in 3 ranges read at once; 1 on HDF5).
# Requires: all commit every update, B's trainer profile says the checkpoint updates were read
# in the pack and A's that none was, C's that they were read by 3 threads (1 for HDF5), and
# all print the same storage digest per update.
#   stream_same_bytes.sh PROFILE_DIR -- LAUNCHER refit-run ARGS...
set -u
prof=$1
shift
[ "${1:-}" = "--" ] && shift
rm -rf "$prof"
outa=$(env REFIT_CKPT_STREAM=0 REFIT_MPI_SEND_SPIN=0 "$@" --storage-digest --profile-dir "$prof/A" 2>&1); rca=$?
outb=$(env -u REFIT_CKPT_STREAM REFIT_MPI_SEND_SPIN=1 REFIT_CKPT_READ_THREADS=1 "$@" --storage-digest --profile-dir "$prof/B" 2>&1); rcb=$?
outc=$(env -u REFIT_CKPT_STREAM REFIT_MPI_SEND_SPIN=1 REFIT_CKPT_READ_THREADS=3 "$@" --storage-digest --profile-dir "$prof/C" 2>&1); rcc=$?
da=$(printf '%s\n' "$outa" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
db=$(printf '%s\n' "$outb" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
dc=$(printf '%s\n' "$outc" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
ina=$(grep -Ec '"reads_in_pack": *true' "$prof/A/profile-rank0.jsonl" 2>/dev/null)
inb=$(grep -Ec '"reads_in_pack": *true' "$prof/B/profile-rank0.jsonl" 2>/dev/null)
ckb=$(grep -Ec '"source": *"checkpoint"' "$prof/B/profile-rank0.jsonl" 2>/dev/null)
# C: the streamed chunks read by 3 threads (safetensors), by 1 (HDF5: serial HDF5 is not
# thread safe), as its trainer profile says
want=3
case "$*" in *.h5*) want=1 ;; esac
thc=$(grep -Ec "\"read_threads\": *$want[,}]" "$prof/C/profile-rank0.jsonl" 2>/dev/null)
printf '%s\n' "$outb" | grep -E '^refit: ' | tail -n 4
echo "== A, read whole first"; printf '%s\n' "$da"
echo "== B, read in the pack, beside the wire"; printf '%s\n' "$db"
echo "== C, read in the pack by $want thread(s)"; printf '%s\n' "$dc"
echo "updates read in the pack: A ${ina:-?}, B ${inb:-?} of ${ckb:-?} checkpoint updates; C by $want thread(s): ${thc:-?}"
if [ $rca -ne 0 ] || [ $rcb -ne 0 ] || [ $rcc -ne 0 ]; then
    printf '%s\n' "$outa" | tail -n 10
    printf '%s\n' "$outb" | tail -n 10
    printf '%s\n' "$outc" | tail -n 10
    echo "stream_same_bytes.sh: exit $rca / $rcb / $rcc"
    exit 1
fi
if [ "${thc:-x}" != "$ckb" ]; then
    echo "stream_same_bytes.sh: C read ${thc:-?} of ${ckb:-?} checkpoint updates with $want thread(s)"
    exit 1
fi
if [ "${ina:-x}" != 0 ] || [ -z "${ckb:-}" ] || [ "${ckb}" -lt 1 ] || [ "${inb:-x}" != "$ckb" ]; then
    echo "stream_same_bytes.sh: B read ${inb:-?} of ${ckb:-?} checkpoint updates in the pack, A ${ina:-?} (want all / none)"
    exit 1
fi
if [ -z "$da" ] || [ "$da" != "$db" ] || [ "$da" != "$dc" ]; then echo "stream_same_bytes.sh: storage digests differ"; exit 1; fi
echo "stream_same_bytes.sh: $(printf '%s\n' "$da" | wc -l) update(s), the same bytes read in the pack"
