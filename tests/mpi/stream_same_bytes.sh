#!/usr/bin/env bash
# Runs one refit-run command twice: A reads every checkpoint update whole before its first
# send, on the sender's calling thread (REFIT_CKPT_STREAM=0 REFIT_MPI_SEND_SPIN=0: the path
# before issue 18 item 3); B reads each chunk's pieces from the checkpoint as it packs them, on
# the sender's pack thread beside the wire (REFIT_MPI_SEND_SPIN=1 forces the spinning sender
# on this oversubscribed machine). Requires: both commit every update, B's trainer profile
# says the checkpoint updates were read in the pack and A's that none was, and both print the
# same storage digest per update.
#   stream_same_bytes.sh PROFILE_DIR -- LAUNCHER refit-run ARGS...
set -u
prof=$1
shift
[ "${1:-}" = "--" ] && shift
rm -rf "$prof"
outa=$(env REFIT_CKPT_STREAM=0 REFIT_MPI_SEND_SPIN=0 "$@" --storage-digest --profile-dir "$prof/A" 2>&1); rca=$?
outb=$(env -u REFIT_CKPT_STREAM REFIT_MPI_SEND_SPIN=1 "$@" --storage-digest --profile-dir "$prof/B" 2>&1); rcb=$?
da=$(printf '%s\n' "$outa" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
db=$(printf '%s\n' "$outb" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
ina=$(grep -Ec '"reads_in_pack": *true' "$prof/A/profile-rank0.jsonl" 2>/dev/null)
inb=$(grep -Ec '"reads_in_pack": *true' "$prof/B/profile-rank0.jsonl" 2>/dev/null)
ckb=$(grep -Ec '"source": *"checkpoint"' "$prof/B/profile-rank0.jsonl" 2>/dev/null)
printf '%s\n' "$outb" | grep -E '^refit: ' | tail -n 4
echo "== A, read whole first"; printf '%s\n' "$da"
echo "== B, read in the pack, beside the wire"; printf '%s\n' "$db"
echo "updates read in the pack: A ${ina:-?}, B ${inb:-?} of ${ckb:-?} checkpoint updates"
if [ $rca -ne 0 ] || [ $rcb -ne 0 ]; then
    printf '%s\n' "$outa" | tail -n 10
    printf '%s\n' "$outb" | tail -n 10
    echo "stream_same_bytes.sh: exit $rca / $rcb"
    exit 1
fi
if [ "${ina:-x}" != 0 ] || [ -z "${ckb:-}" ] || [ "${ckb}" -lt 1 ] || [ "${inb:-x}" != "$ckb" ]; then
    echo "stream_same_bytes.sh: B read ${inb:-?} of ${ckb:-?} checkpoint updates in the pack, A ${ina:-?} (want all / none)"
    exit 1
fi
if [ -z "$da" ] || [ "$da" != "$db" ]; then echo "stream_same_bytes.sh: storage digests differ"; exit 1; fi
echo "stream_same_bytes.sh: $(printf '%s\n' "$da" | wc -l) update(s), the same bytes read in the pack"
