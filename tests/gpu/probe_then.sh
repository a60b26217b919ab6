#!/usr/bin/env bash
# probe_then.sh PROBE CMD...: exit 77 (skipped) when PROBE says there is no CUDA device, else
# run CMD (tests/mpi/expect.sh ...) and return its status.
# PROBE may carry one option ("PROBE --absent": run only without a device).
probe=$1
shift
if [ "${1:-}" = "--absent" ]; then
  shift
  "$probe" --absent || exit 77
else
  "$probe" || exit 77
fi
exec "$@"
