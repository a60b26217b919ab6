#!/usr/bin/env bash
# mpirun with the flags refit's CPU runs need on small machines: --oversubscribe (more ranks
# than cores), --bind-to none, and --allow-run-as-root when run as root (containers, CI).
#   tools/mpirun.sh -np 4 build/refit-run --steps 2
set -euo pipefail
extra=(--oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || extra+=(--allow-run-as-root)
exec mpirun "${extra[@]}" "$@"
