#!/usr/bin/env bash
# Runs one refit-run command twice, with REFIT_TEST_GATHER_WIRE=mpi (the stage gather through
# the trainer's gather wire, the hooks the nccl transport fills) and without (MPI
# point-to-point), and requires: both commit every update, run A says it gathered over the
# test wire, and both print the same storage digest per update.
#   wire_same_bytes.sh -- LAUNCHER refit-run ARGS...
set -u
[ "${1:-}" = "--" ] && shift
outa=$(env REFIT_TEST_GATHER_WIRE=mpi "$@" --storage-digest 2>&1); rca=$?
outb=$(env -u REFIT_TEST_GATHER_WIRE "$@" --storage-digest 2>&1); rcb=$?
da=$(printf '%s\n' "$outa" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
db=$(printf '%s\n' "$outb" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
printf '%s\n' "$outa" | grep -E 'trainer +produced|^refit: ' | tail -n 6
echo "== with the test wire"; printf '%s\n' "$da"
echo "== without"; printf '%s\n' "$db"
if [ $rca -ne 0 ] || [ $rcb -ne 0 ]; then
    printf '%s\n' "$outa" | tail -n 20
    echo "wire_same_bytes.sh: exit $rca / $rcb"
    exit 1
fi
if ! printf '%s\n' "$outa" | grep -qE 'gathered [1-9][0-9.]* [KMG]?B over the test wire'; then
    echo "wire_same_bytes.sh: run A gathered nothing over the test wire"
    exit 1
fi
if [ -z "$da" ] || [ "$da" != "$db" ]; then echo "wire_same_bytes.sh: storage digests differ"; exit 1; fi
echo "wire_same_bytes.sh: $(printf '%s\n' "$da" | wc -l) update(s), the same bytes over the gather wire"
