#!/usr/bin/env bash
# python_then.sh MPIEXEC ARGS... -- SCRIPT ARGS...: runs a Python test under mpiexec with the
# python3 found on PATH, its absolute path, and a PYTHONPATH that finds the mpi4py, torch and
# transformers that python3 imports (mpiexec's ranks do not inherit a shell's site setup).
py=$(command -v python3) || { echo "python3 not found"; exit 1; }
site=$("$py" -c 'import os, mpi4py, torch, transformers
print(":".join(sorted({os.path.dirname(os.path.dirname(m.__file__)) for m in (mpi4py, torch, transformers)})))') ||
    { echo "$py lacks mpi4py, torch or transformers"; exit 1; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
mpi=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do mpi+=("$1"); shift; done
shift
exec "${mpi[@]}" -x PYTHONPATH -x PATH "$py" "$@"
