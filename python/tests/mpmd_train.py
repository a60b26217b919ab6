"""MPMD trainer program (python/tests/mpmd_engine.py is the engine's): one MPI world launched
as `mpiexec -np T python3 mpmd_train.py TOPOLOGY CKPT : -np R python3 mpmd_engine.py TOPOLOGY
CKPT_H5`. Each trainer rank registers the checkpoint CKPT (its shard is read by refit at every
update) and takes part in two updates; both programs call the same collectives in the same
order (create, plan, update, update, the failure count, close)."""
import os
import sys

from mpi4py import MPI

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import refit  # noqa: E402

comm = MPI.COMM_WORLD
topo_path, ckpt = sys.argv[1:3]
failures = 0
s = refit.Session(comm, topo_path)
if s.role != "trainer":
    print("mpmd_train: rank %d is a %s rank of the topology" % (comm.rank, s.role), flush=True)
    failures += 1
else:
    s.register_checkpoint(ckpt)
s.plan()
for v in (1, 2):
    r = s.update()
    if not (r.committed and r.version == v):
        print("mpmd_train: rank %d: update %d: %r" % (comm.rank, v, r), flush=True)
        failures += 1
total = comm.allreduce(failures)
s.close()
sys.exit(0 if total == 0 else 1)
