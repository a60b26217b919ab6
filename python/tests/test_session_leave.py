"""A rank that stops calling the session does not hang the others (mpiexec, SPMD, the Python
binding's failure paths; include/refit/session.h "Waits").

  raise R   after plan and one committed update, rank R raises an uncaught exception: its
            at-exit close() is local (rf_session_destroy_local) and tells the others, whose
            next update() raises refit.Error within seconds naming rank R and the exception;
            their session is lost (a second update() is refused saying so), close() is local
  sleep R   rank R sleeps past the topology's transfer.join_timeout_s (3 s) before its
            update(): every other rank's update() raises after 3 s naming join_timeout_s
            (RF_ERR_TIMEOUT, or RF_ERR_PEER from a waiting rank that gave up first), and rank R's raises at once, RF_ERR_PEER: they left, having given up

Every rank but a raising one exits 0 when what it saw is right (raise: the job still ends
non-zero, the raiser's exit status 1).

    mpiexec -np 3 /usr/bin/python3 python/tests/test_session_leave.py TOPOLOGY raise|sleep R
"""
import os
import sys
import time

from mpi4py import MPI
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import refit  # noqa: E402

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
topo_path, mode, who = sys.argv[1], sys.argv[2], int(sys.argv[3])
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d: FAIL: %s" % (rank, what), flush=True)


s = refit.Session(comm, topo_path)
tensors = {n: torch.zeros(shape, dtype=torch.bfloat16) for n, dt, shape in s.expected()}
s.register(tensors)
s.plan()
r = s.update()
check(r.committed, "update 1: %r" % r)

if mode == "raise" and rank == who:
    raise RuntimeError("injected between updates by rank %d" % rank)
if mode == "sleep" and rank == who:
    time.sleep(8)

t0 = time.time()
try:
    s.update()
    check(False, "update 2 returned with rank %d gone" % who)
except refit.Error as e:
    took = time.time() - t0
    print("rank %d: refit.Error %s after %.1f s: %s" % (rank, e.status, took, e), flush=True)
    if mode == "raise":
        check(e.status == "RF_ERR_PEER" and ("rank %d left the session" % who) in str(e)
              and "RuntimeError: injected between updates by rank %d" % who in str(e),
              "the error does not name rank %d and its exception: %s" % (who, e))
        check(took < 10, "it took %.1f s" % took)
    elif rank != who:
        # its own timeout, or another waiting rank's that gave up a moment earlier and told
        # the others (which of the two first is a race between the waiting ranks)
        gave_up = e.status == "RF_ERR_PEER" and "left the session (it gave up: " in str(e)
        check((e.status == "RF_ERR_TIMEOUT" or gave_up) and "transfer.join_timeout_s 3 s" in str(e),
              "the error does not name the join timeout: %s" % e)
        check(2.5 < took < 10, "it took %.1f s (join_timeout_s 3)" % took)
    else:  # the late rank: told at once by the ranks that gave up
        check(e.status == "RF_ERR_PEER" and "left the session (it gave up: " in str(e)
              and "not every rank came within transfer.join_timeout_s 3 s" in str(e),
              "the late rank's error: %s" % e)
        check(took < 2, "the late rank's took %.1f s" % took)
try:
    s.update()
    check(False, "a lost session updated")
except refit.Error as e:
    check(e.status == "RF_ERR_STATE" and "the session is lost" in str(e), "then: %s" % e)
    # named by the call the user made, not an internal one
    check("rf_session_update: the session is lost" in str(e) and "check_arm" not in str(e),
          "then, the call named: %s" % e)
s.close()  # local: the session is lost
print("rank %d: test_session_leave: %s" % (rank, "ok" if not failures else "FAILED"), flush=True)
sys.exit(1 if failures else 0)
