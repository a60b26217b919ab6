"""MPMD engine program (python/tests/mpmd_train.py is the trainers'): the rollout rank holds
the vLLM-layout tensors (TP 1) as torch bf16 tensors, garbage at first; after each update they
equal the checkpoint's bytes as h5py reads them from CKPT_H5 (ckpt_ref.py)."""
import os
import sys

from mpi4py import MPI
import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, here)
import refit  # noqa: E402
from ckpt_ref import expect, reference  # noqa: E402

comm = MPI.COMM_WORLD
topo_path, h5_path = sys.argv[1:3]
failures = 0
s = refit.Session(comm, topo_path)
eng = {}
if s.role != "rollout":
    print("mpmd_engine: rank %d is a %s rank of the topology" % (comm.rank, s.role), flush=True)
    failures += 1
else:
    eng = {n: torch.full(shape, 7.5, dtype=torch.bfloat16) for n, _, shape in s.expected()}
    s.register(eng)
s.plan()
ref = reference(h5_path)
for v in (1, 2):
    r = s.update()
    bad = [n for n, x in eng.items()
           if not np.array_equal(x.view(torch.int16).numpy().view(np.uint16),
                                 expect(ref, n, tuple(x.shape)))]
    if not (r.committed and r.version == v) or bad:
        print("mpmd_engine: rank %d: update %d: %r, differing: %s" % (comm.rank, v, r, bad[:3]),
              flush=True)
        failures += 1
total = comm.allreduce(failures)
s.close()
if comm.rank == comm.size - 1:
    print("mpmd: %s (%d rank(s), %d failure(s))" % ("OK" if total == 0 else "FAILED",
                                                  comm.size, total), flush=True)
sys.exit(0 if total == 0 else 1)
