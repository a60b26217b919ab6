#!/usr/bin/python3
"""MPI point-to-point rate on this host, for the scale model's machine description.

    mpirun -np 2K /usr/bin/python3 bench/mpi_rate.py [MiB] [reps]

Ranks pair up (2i sends to 2i+1); every pair streams `reps` messages of `MiB` MiB at once, as
refit's chunks travel (one message per chunk, two in flight). Rank 0 prints one JSON line:
the slowest pair's rate (bytes/s; the per-link rate when K = 1), the aggregate rate of all
pairs (what the host's shared fabric carries at once) and the one-way latency of a 16-byte
message (the per-chunk cost floor). Best of 3 rounds.
"""
import json
import sys

import numpy as np
from mpi4py import MPI


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    n = mib << 20
    buf = [np.ones(n, dtype=np.uint8), np.ones(n, dtype=np.uint8)]
    peer = rank ^ 1
    best = None
    for _ in range(3):
        comm.Barrier()
        t0 = MPI.Wtime()
        if rank % 2 == 0:
            reqs = []
            for i in range(reps):
                if len(reqs) == 2:
                    reqs.pop(0).Wait()
                reqs.append(comm.Isend(buf[i % 2], dest=peer, tag=7))
            MPI.Request.Waitall(reqs)
            comm.Recv(buf[0][:1], source=peer, tag=8)
        else:
            for i in range(reps):
                comm.Recv(buf[i % 2], source=peer, tag=7)
            comm.Send(buf[0][:1], dest=peer, tag=8)
        dt = MPI.Wtime() - t0
        worst = comm.allreduce(dt, op=MPI.MAX)
        best = worst if best is None or worst < best else best
    # latency: 16-byte ping-pong between ranks 0 and 1
    small = np.zeros(16, dtype=np.uint8)
    lat = None
    for _ in range(3):
        comm.Barrier()
        t0 = MPI.Wtime()
        for _ in range(200):
            if rank == 0:
                comm.Send(small, dest=1, tag=9)
                comm.Recv(small, source=1, tag=9)
            elif rank == 1:
                comm.Recv(small, source=0, tag=9)
                comm.Send(small, dest=0, tag=9)
        dt = (MPI.Wtime() - t0) / 400
        lat = dt if lat is None or dt < lat else lat
    if rank == 0:
        pairs = size // 2
        print(json.dumps({"pairs": pairs, "message_bytes": n, "reps": reps,
                          "pair_Bps": n * reps / best, "aggregate_Bps": pairs * n * reps / best,
                          "latency_s": lat}))


if __name__ == "__main__":
    main()
