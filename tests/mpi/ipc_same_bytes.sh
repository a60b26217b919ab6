#!/usr/bin/env bash
# Runs one refit-run command on two topologies and requires both to commit every update with
# the same storage digest per update (--storage-digest: XXH3 over every rollout slot):
#   ipc_same_bytes.sh TOPOLOGY_A TOPOLOGY_B -- LAUNCHER refit-run ARGS...
set -u
a=$1 b=$2
shift 3
outa=$("$@" --storage-digest --topology "$a" 2>&1); rca=$?
outb=$("$@" --storage-digest --topology "$b" 2>&1); rcb=$?
da=$(printf '%s\n' "$outa" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
db=$(printf '%s\n' "$outb" | grep -E '^refit: update [0-9]+ storage digest' | sed 's/ (.*//')
printf '%s\n' "$outa" | tail -n 12
printf '%s\n' "$outb" | tail -n 12
echo "== $a"; printf '%s\n' "$da"
echo "== $b"; printf '%s\n' "$db"
if [ $rca -ne 0 ] || [ $rcb -ne 0 ]; then echo "ipc_same_bytes.sh: exit $rca / $rcb"; exit 1; fi
if [ -z "$da" ]; then echo "ipc_same_bytes.sh: no storage digest printed"; exit 1; fi
if [ "$da" != "$db" ]; then echo "ipc_same_bytes.sh: storage digests differ"; exit 1; fi
echo "ipc_same_bytes.sh: same storage bytes on both topologies"
