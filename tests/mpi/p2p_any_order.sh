#!/usr/bin/env bash
# p2p receivers take whichever sender is ready (transport_mpi_chunks.c mpi_recv_any):
#   p2p_any_order.sh SENDER -- MPIRUN... REFIT-RUN ARGS...
# Runs the job twice, plainly and with --inject-fault delay-send:SENDER (that sender starts
# update 2 one second late). Both must commit, with the same storage digest at every update,
# and in update 2 no receiver may take SENDER's chunk first while at least one takes chunks
# out of the plan's (sender-major) order: the receive order is the senders' readiness.
set -u
sender=$1
shift
[ "$1" = "--" ] && shift
plain=$(REFIT_LOG_LEVEL=info "$@" --steps 2 --storage-digest 2>&1)
rc1=$?
late=$(REFIT_LOG_LEVEL=info "$@" --steps 2 --storage-digest --inject-fault "delay-send:$sender" 2>&1)
rc2=$?
printf '%s\n' "$late" | tail -n 30
fail() { echo "p2p_any_order.sh: $*"; exit 1; }
[ $rc1 -eq 0 ] || { printf '%s\n' "$plain" | tail -n 20; fail "plain run exited $rc1"; }
[ $rc2 -eq 0 ] || fail "run with delay-send:$sender exited $rc2"
for out in "$plain" "$late"; do
  printf '%s\n' "$out" | grep -Eq '^refit: COMMITTED 2 update\(s\)' || fail "a run did not commit"
done
printf '%s\n' "$late" | grep -Eq "fault: rank $sender delays its sends" || fail "no delay fired"
d1=$(printf '%s\n' "$plain" | grep -Eo 'update [0-9]+ storage digest [0-9a-f]+')
d2=$(printf '%s\n' "$late" | grep -Eo 'update [0-9]+ storage digest [0-9a-f]+')
[ -n "$d1" ] && [ "$d1" = "$d2" ] || fail "storage digests differ: '$d1' vs '$d2'"
took=$(printf '%s\n' "$late" | grep -E 'update 2: rank [0-9]+ took [0-9]+ chunks in arrival order')
[ -n "$took" ] || fail "no receiver reported its receive order for update 2"
if printf '%s\n' "$took" | grep -Eq "first from rank $sender( |$)"; then
  fail "a receiver took the delayed sender $sender's chunk first"
fi
printf '%s\n' "$took" | grep -Eq ' [1-9][0-9]* of them out of the plan' ||
  fail "no receiver took a chunk out of the plan's order"
echo "p2p_any_order.sh: ok ($(printf '%s\n' "$took" | wc -l) receivers, same digests)"
