#!/usr/bin/env bash
# Runs a refit-run command on an ipc topology with REFIT_IPC_TAG=TAG and checks that it ended
# as expected, that it did create shared-memory arenas (the debug log names them), and that
# no /dev/shm/refit-TAG-* object is left behind:
#   ipc_no_leftover.sh ok|fail TAG -- LAUNCHER refit-run ARGS...
set -u
want=$1 tag=$2
shift 3
rm -f /dev/shm/refit-"$tag"-* 2>/dev/null
out=$(REFIT_IPC_TAG=$tag REFIT_LOG_LEVEL=debug "$@" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v ' DEBUG ' | tail -n 20
if [ "$want" = ok ] && [ $rc -ne 0 ]; then echo "ipc_no_leftover.sh: exit $rc, expected 0"; exit 1; fi
if [ "$want" = fail ] && [ $rc -eq 0 ]; then echo "ipc_no_leftover.sh: exit 0, expected a failure"; exit 1; fi
if ! printf '%s\n' "$out" | grep -q "mapped /refit-$tag-"; then
  echo "ipc_no_leftover.sh: no arena /refit-$tag-* was mapped"; exit 1
fi
left=$(ls /dev/shm 2>/dev/null | grep "^refit-$tag-" || true)
if [ -n "$left" ]; then echo "ipc_no_leftover.sh: left behind in /dev/shm: $left"; exit 1; fi
echo "ipc_no_leftover.sh: $want as expected (exit $rc), nothing left in /dev/shm"
