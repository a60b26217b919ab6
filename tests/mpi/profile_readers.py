#!/usr/bin/python3
"""tests/mpi/integrity.cmake, integrity_seal_fused_readers: the checkpoint read threads of the
first update of two trainer profiles (refit-run --profile-dir), the fused seal's and the pooled
seal's, and whether the first is twice the second (at most 64).

    profile_readers.py FUSED/profile-rank0.jsonl POOLED/profile-rank0.jsonl
"""
import json
import sys


def readers(path):
    with open(path) as f:
        return json.loads(f.readline())["trainer"]["read_threads"]


fused, pooled = readers(sys.argv[1]), readers(sys.argv[2])
print("readers fused %d pooled %d twice %s" % (fused, pooled, pooled >= 1 and fused == min(64, 2 * pooled)))
