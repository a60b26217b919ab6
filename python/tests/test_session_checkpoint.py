"""Python session test under mpiexec (SPMD, /usr/bin/python3 with Debian's torch and h5py):
Session.register_checkpoint. The trainer ranks (all but the last) register the tests/data
llama-tiny checkpoint instead of tensors, once as its safetensors directory and once as its
HDF5 copy (refit-convert writes it at test time); the last rank is an engine holding the
fused vLLM-layout tensors (TP 1: qkv_proj = q, k, v stacked; gate_up_proj = gate, up; the
vocabulary padded with zero rows), filled with garbage. After every update the engine's
bytes equal the checkpoint's (read independently here, with h5py from the HDF5 copy). An
HDF5 checkpoint replaced at the same path between two updates (a new file renamed over the
old one) is what the second update sends. A bad path and another model's checkpoint raise
refit.Error naming the path on the trainer ranks, register_checkpoint on the engine raises,
and the plan after them raises on every rank with the trainer's text, the engine untouched.
begin() / finish() commit as update() does, and an engine tensor re-allocated between them
fails that update on every rank (RF_ERR_MOVED, naming it) without writing into the engine.

    mpiexec -np N /usr/bin/python3 python/tests/test_session_checkpoint.py TOPOLOGY \\
        CKPT_DIR CKPT_H5 OTHER_MODEL_DIR SCRATCH_DIR
"""
import os
import shutil
import sys

from mpi4py import MPI
import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refit  # noqa: E402
from ckpt_ref import expect, reference  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
topo_path, st_dir, h5_path, other_dir, scratch = sys.argv[1:6]
ENGINE = size - 1
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d: FAIL: %s" % (rank, what), flush=True)


def engine_tensors(s):
    return {n: torch.full(shape, 7.5, dtype=torch.bfloat16) for n, _, shape in s.expected()}


def engine_matches(eng, t, what):
    bad = [n for n, x in eng.items()
           if not np.array_equal(x.view(torch.int16).numpy().view(np.uint16),
                                 expect(t, n, tuple(x.shape)))]
    check(not bad, "%s: engine tensors differ from the checkpoint: %s" % (what, bad[:3]))


def bits(eng):
    return {n: x.view(torch.int16).clone() for n, x in eng.items()}


def same_everywhere(text, needle, what):
    texts = comm.allgather(text)
    check(len(set(texts)) == 1, "%s: the ranks' texts differ: %s" % (what, texts))
    check(needle in text, "%s: %r does not name %r" % (what, text, needle))


def updates_from(path, ref_h5, what, replace=None):
    s = refit.Session(comm, topo_path)
    eng = None
    if s.role == "trainer":
        s.register_checkpoint(path)
    else:
        eng = engine_tensors(s)
        s.register(eng)
    plan = s.plan()
    check(plan.counts["DIRECT"] > 0, "%s: plan %s" % (what, plan.counts))
    ptrs = {n: x.data_ptr() for n, x in (eng or {}).items()}
    ref = reference(ref_h5) if rank == ENGINE else None
    for v in (1, 2):
        if v == 2 and replace is not None:
            ref = replace()
        r = s.update()
        check(r.committed and r.version == v, "%s: update %d: %r" % (what, v, r))
        if rank == ENGINE:
            engine_matches(eng, ref, "%s, update %d" % (what, v))
            check(ptrs == {n: x.data_ptr() for n, x in eng.items()}, "%s: data_ptr moved" % what)
    s.close()


def refused(bad, what):
    s = refit.Session(comm, topo_path)
    eng = None
    try:
        if s.role == "trainer":
            s.register_checkpoint(bad)
        else:
            eng = engine_tensors(s)
            s.register(eng)
            s.register_checkpoint(st_dir)  # an engine has no checkpoint to register
        check(False, "%s: register_checkpoint did not raise on rank %d" % (what, rank))
    except refit.Error as e:
        check((bad if s.role == "trainer" else st_dir) in str(e),
              "%s: %r does not name the path" % (what, str(e)))
    before = bits(eng) if eng is not None else None
    try:
        s.plan()
        check(False, "%s: plan did not raise" % what)
    except refit.Error as e:
        same_everywhere(str(e), bad, what)
    if eng is not None:
        check(all(torch.equal(before[n], x.view(torch.int16)) for n, x in eng.items()),
              "%s: the engine's tensors were written" % what)
    if s.role == "trainer":  # the session stays usable
        s.register_checkpoint(st_dir)
    s.plan()
    r = s.update()
    check(r.committed, "%s: the update after a right registration: %r" % (what, r))
    if rank == ENGINE:
        engine_matches(eng, reference(h5_path), what + ", then the right checkpoint")
    s.close()


# the checkpoint's own bytes, two formats
updates_from(st_dir, h5_path, "safetensors")
updates_from(h5_path, h5_path, "hdf5")

# a checkpoint replaced at the same path between updates: the second update sends the new one
mine = os.path.join(scratch, "ckpt-replaced.h5")
if rank == 0:
    os.makedirs(scratch, exist_ok=True)
    shutil.copyfile(h5_path, mine)
comm.Barrier()


def replace():
    new = mine + ".new"
    if rank == 0:
        shutil.copyfile(h5_path, new)
        with h5py.File(new, "r+") as f:
            d = f["tensors"]["model.norm.weight"]
            d[...] = d[()] ^ np.uint16(0x8000)  # every element negated (bf16 sign bit)
        os.replace(new, mine)
    comm.Barrier()
    return reference(mine) if rank == ENGINE else None


updates_from(mine, mine, "hdf5 replaced between updates", replace=replace)

def split_moved():
    """begin() / finish() commit as update() does; an engine tensor re-allocated between them
    (finish() registers its new data_ptr) fails that update on every rank with RF_ERR_MOVED
    naming it, both the old and the new memory untouched; the next update fills the new one."""
    s = refit.Session(comm, topo_path)
    eng, victim = None, "model.norm.weight"
    if s.role == "trainer":
        s.register_checkpoint(st_dir)
    else:
        eng = engine_tensors(s)
        s.register(eng)
    s.plan()
    ref = reference(h5_path) if rank == ENGINE else None
    s.begin()
    r = s.finish()
    check(r.committed and r.version == 1, "begin/finish: %r" % r)
    if rank == ENGINE:
        engine_matches(eng, ref, "begin/finish")
    s.begin()
    if rank == ENGINE:  # the engine re-allocates a parameter while paused
        before, old = bits(eng), eng[victim]
        eng[victim] = torch.full_like(old, 3.0)
        s._tensors[victim] = eng[victim]
    r = s.finish()
    check(not r.committed and r.status == "RF_ERR_MOVED" and r.failed_rank == ENGINE,
          "moved between begin and finish: %r (%s, rank %d)" % (r, r.status, r.failed_rank))
    same_everywhere(r.reason, victim, "moved between begin and finish")
    if rank == ENGINE:
        check(torch.equal(old.view(torch.int16), before[victim]) and
              bool((eng[victim] == 3.0).all()), "moved: the engine's tensors were written")
    r = s.update()
    check(r.committed and r.version == 2, "the update after the move: %r" % r)
    if rank == ENGINE:
        engine_matches(eng, ref, "after the move")
    s.close()


split_moved()

# refusals: a bad path, another model's checkpoint
refused("/nonexistent/refit-ckpt", "bad path")
refused(other_dir, "another model")

all_failures = comm.allreduce(len(failures))
if rank == 0:
    print("test_session_checkpoint: %s (%d rank(s), %d failure(s))"
          % ("OK" if all_failures == 0 else "FAILED", size, all_failures), flush=True)
sys.exit(0 if all_failures == 0 else 1)
