#!/usr/bin/env python3
"""bench/python_colocated.py: the Python path (python/refit, ctypes over librefit.so) on one
colocated topology, for the comparison with refit-run of issue #15 item 7 (docs/benchmarks.md;
bench/python-colocated.sh runs both on the same shapes in one run and prints the table).

World rank 0 is the trainer, rank 1 the engine, as refit-run's colocated bench topologies put
them. The trainer allocates one torch tensor of every shape and dtype its s.expected() lists
(PyTorch's caching allocator carves them out of its segments, as it does a model's
parameters), fills each on the device from a torch.Generator seeded by the tensor's index,
and registers them; the engine registers zero tensors of its own expected set (the fused vLLM
parameters, or hf's). Then plan and --updates updates: before each one after the first the
trainer refills --mutate tensors from seeds of that update (the training step), both ranks
torch.cuda.synchronize() (the docs' rule: the trainer's writes done before update()) and meet
at an MPI barrier (refit-run's fence); then each times s.update(): the library's own number
(r.stats["seconds"]: rf_session_update, join to result) and the wall time around the call in
Python (perf_counter: the binding's per-update work included). An update's time is the
slowest rank's, as refit-run's --bench-json takes the slowest rank's time to the verdict. The
first update is the warm-up (it opens the IPC handles and maps the pieces); the others are
timed, best and median.

After the last update the engine checks every byte (untimed): it regenerates each trainer
tensor from the seed that last filled it (the same generator on the same device gives the same
bits), places it where the layout puts it (q/k/v rows of qkv_proj, gate/up rows of
gate_up_proj, expert e's gate/up/down in w13_weight[e] / w2_weight[e] or hf's fused
gate_up_proj / down_proj, the rest 1:1; rows no trainer tensor fills, the vocabulary padding,
stay zero) and compares the whole engine tensor with torch.equal on its device. A mismatch,
an engine tensor no trainer tensor lands in, or an uncommitted update fails the run (exit 1).

A topology the session refuses at create (the quantized MoE shapes today) is recorded as
refused, with the library's text, and the run exits 0 (--json says so).

    mpirun -np 2 python3 bench/python_colocated.py --topology T.yaml [--updates 6]
        [--mutate 4] [--device cuda|cpu] [--json OUT.json] [--tamper ENGINE_TENSOR]

--device cpu: host tensors, for a topology on the mpi transport (the CPU check of this
script's logic, ctest bench_python_colocated_cpu).
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

try:
    # before torch (as python/tests/test_session_gpu.py): pyarrow loaded after torch crashes in
    # libstdc++'s locale teardown on the GPU host
    import pyarrow  # noqa: F401
except ImportError:
    pass
from mpi4py import MPI  # noqa: E402
import torch  # noqa: E402

# REFIT_PYTHONPATH: another copy of the binding (an A/B of the binding itself)
sys.path.insert(0, os.environ.get("REFIT_PYTHONPATH") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import refit  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
TORCH = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32,
         "F64": torch.float64, "I32": torch.int32, "I64": torch.int64, "I16": torch.int16,
         "I8": torch.int8, "U8": torch.uint8}


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topology", required=True)
    ap.add_argument("--updates", type=int, default=6)
    ap.add_argument("--mutate", type=int, default=4,
                    help="trainer tensors refilled before each update after the first")
    ap.add_argument("--device", choices=("cuda", "cpu"),
                    default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", help="rank 0 writes the results here")
    ap.add_argument("--tamper", metavar="NAME",
                    help="the check's self-test: the engine changes one element of its tensor "
                    "NAME after the last update, before the check (which must then fail)")
    a = ap.parse_args()
    if a.updates < 2:
        ap.error("--updates: at least 2 (the first is the warm-up)")
    return a


def seed_of(i, update):
    """The generator seed of trainer tensor i filled at update (0: the initial fill)."""
    return 0x5EED + 1000003 * update + 7919 * i


def fill(t, seed, gen):
    gen.manual_seed(seed)
    if t.is_floating_point():
        t.normal_(generator=gen)
    else:
        t.random_(-64, 64, generator=gen)


def mutated(update, n, m):
    """Trainer tensor indices refilled before update (>= 2): m of them, spread by update."""
    return sorted({(update * 104729 + k * 7793) % n for k in range(min(m, n))})


def last_seeds(n, updates, m):
    """Per trainer tensor, the seed of its last fill after `updates` updates."""
    last = [seed_of(i, 0) for i in range(n)]
    for u in range(2, updates + 1):
        for i in mutated(u, n, m):
            last[i] = seed_of(i, u)
    return last


def destination(name, shapes, engine):
    """Where trainer tensor `name` lands in the engine (TP 1): (engine name, expert or None,
    first row), the first layout rule whose engine tensor exists; None when none does."""
    p, leaf = name.rsplit(".", 2)[0], ".".join(name.rsplit(".", 2)[1:])
    m = re.match(r"(.*\.mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight$", name)
    if m:
        pre, e, proj = m.group(1), int(m.group(2)), m.group(3)
        gate_rows = shapes[pre + "%d.gate_proj.weight" % e][0]
        cands = ([(pre + "w2_weight", e, 0), (pre + "down_proj", e, 0)] if proj == "down" else
                 [(pre + "w13_weight", e, 0 if proj == "gate" else gate_rows),
                  (pre + "gate_up_proj", e, 0 if proj == "gate" else gate_rows)])
    elif leaf in ("q_proj.weight", "k_proj.weight", "v_proj.weight") and p.endswith("self_attn"):
        q, k = shapes[p + ".q_proj.weight"][0], shapes[p + ".k_proj.weight"][0]
        row0 = {"q": 0, "k": q, "v": q + k}[leaf[0]]
        cands = [(p + ".qkv_proj.weight", None, row0)]
    elif leaf in ("gate_proj.weight", "up_proj.weight") and p.endswith(".mlp"):
        g = shapes[p + ".gate_proj.weight"][0]
        cands = [(p + ".gate_up_proj.weight", None, 0 if leaf[0] == "g" else g)]
    else:
        cands = []
    for c in cands + [(name, None, 0)]:
        if c[0] in engine:
            return c
    return None


def verify(engine, texp, seeds, dev, gen):
    """Engine side, after the last update: every engine tensor against the trainer's values
    placed by the layout, one engine tensor at a time (the reference is as large as it).
    Returns (engine tensors checked, [problems])."""
    shapes = {n: sh for n, _, sh in texp}
    pieces, problems = {}, []
    for i, (name, dt, shape) in enumerate(texp):
        d = destination(name, shapes, engine)
        if d is None:
            problems.append("trainer tensor %s lands in no engine tensor" % name)
        else:
            pieces.setdefault(d[0], []).append((i, dt, shape, d[1], d[2]))
    checked = 0
    for n, t in engine.items():
        if n not in pieces:
            problems.append("engine tensor %s: no trainer tensor lands in it" % n)
            continue
        ref = torch.zeros_like(t)
        for i, dt, shape, e, row0 in pieces[n]:
            src = torch.empty(shape, dtype=TORCH[dt], device=dev)
            fill(src, seeds[i], gen)
            (ref if e is None else ref[e]).narrow(0, row0, shape[0]).copy_(src)
        checked += 1
        if not torch.equal(t, ref):
            problems.append("engine tensor %s: %d of %d elements differ from the trainer's" %
                            (n, (t != ref).sum().item(), t.numel()))
    return checked, problems


def best_median(xs):
    return (min(xs), statistics.median(xs)) if xs else (None, None)


def main():
    a = parse()
    dev = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    out = {"topology": os.path.basename(a.topology), "updates_requested": a.updates,
           "mutate": a.mutate, "device": str(dev), "torch": torch.__version__,
           "binding": os.path.abspath(refit.__file__)}

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    try:
        s = refit.Session(comm, a.topology)
    except refit.Error as e:
        # the same refusal on every rank (create is collective)
        out.update(refused=True, status=e.status, reason=str(e))
        if rank == 0:
            print("python_colocated: %s refused at create: %s" % (a.topology, e), flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(out, f, indent=2, sort_keys=True)
        return 0
    trainer = s.role == "trainer"
    exp = s.expected()
    gen = torch.Generator(device=dev)
    t0 = time.perf_counter()
    tensors = {}
    for i, (name, dt, shape) in enumerate(exp):
        t = torch.empty(shape, dtype=TORCH[dt], device=dev)
        if trainer:
            fill(t, seed_of(i, 0), gen)
        else:
            t.zero_()
        tensors[name] = t
    sync()
    alloc_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    s.register(tensors)
    register_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = s.plan()
    plan_s = time.perf_counter() - t0
    # the trainer's expected set, for the engine's check (world rank 0 is the trainer)
    texp = comm.bcast(exp if rank == 0 else None, root=0)
    objs = list(tensors.values())
    lib, wall, ok = [], [], []
    for u in range(1, a.updates + 1):
        if trainer and u > 1:
            for i in mutated(u, len(objs), a.mutate):
                fill(objs[i], seed_of(i, u), gen)
        sync()
        comm.Barrier()
        t0 = time.perf_counter()
        r = s.update()
        w = time.perf_counter() - t0
        lib.append(r.stats["seconds"])
        wall.append(w)
        ok.append(r.committed)
        if not r.committed and rank == 0:
            print("python_colocated: update %d FAILED: %s" % (u, r.reason), flush=True)
    problems, checked = [], 0
    if not trainer and a.tamper:
        t = tensors[a.tamper].view(-1)
        t[t.numel() // 2] += 1
    if not trainer and all(ok):
        checked, problems = verify(tensors, texp, last_seeds(len(texp), a.updates, a.mutate),
                                   dev, gen)
    s.close()
    # rank 0 gathers every rank's times and the engine's check
    per = comm.gather({"role": "trainer" if trainer else "rollout", "lib": lib, "wall": wall,
                       "tensors": len(exp), "checked": checked, "problems": problems,
                       "alloc_s": alloc_s, "register_s": register_s, "plan_s": plan_s}, root=0)
    if rank != 0:
        return 0
    ups = []
    for k in range(a.updates):
        ups.append({"update": k + 1, "committed": ok[k], "timed": k > 0,
                    "lib_s": max(p["lib"][k] for p in per),
                    "wall_s": max(p["wall"][k] for p in per),
                    "lib_s_by_rank": [p["lib"][k] for p in per],
                    "wall_s_by_rank": [p["wall"][k] for p in per]})
    timed = [u for u in ups if u["timed"] and u["committed"]]
    lb, lm = best_median([u["lib_s"] for u in timed])
    wb, wm = best_median([u["wall_s"] for u in timed])
    eng = [p for p in per if p["role"] == "rollout"]
    probs = [x for p in eng for x in p["problems"]]
    out.update(refused=False, payload_bytes=plan.payload_bytes, plan_tensors=plan.tensors,
               trainer_tensors=sum(p["tensors"] for p in per if p["role"] == "trainer"),
               engine_tensors=sum(p["tensors"] for p in eng), updates=ups,
               lib_best_s=lb, lib_median_s=lm, wall_best_s=wb, wall_median_s=wm,
               verified_tensors=sum(p["checked"] for p in eng), verify_problems=probs,
               verified=all(ok) and not probs and sum(p["checked"] for p in eng) > 0,
               setup_s={r: {k: per[r][k] for k in ("alloc_s", "register_s", "plan_s")}
                        for r in range(len(per))})
    print("python_colocated: %s: %d trainer / %d engine tensors, payload %.2f GB; update "
          "best %s ms median %s ms (library), best %s ms median %s ms (wall, Python); "
          "%d updates committed of %d; bytes %s" % (
              out["topology"], out["trainer_tensors"], out["engine_tensors"],
              plan.payload_bytes / 1e9, "%.3f" % (lb * 1e3) if lb else "-",
              "%.3f" % (lm * 1e3) if lm else "-", "%.3f" % (wb * 1e3) if wb else "-",
              "%.3f" % (wm * 1e3) if wm else "-", sum(ok), a.updates,
              "verified (%d engine tensors equal the trainer's)" % out["verified_tensors"]
              if out["verified"] else "NOT verified: %s" % ("; ".join(probs[:5]) or
                                                            "an update failed")),
          flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2, sort_keys=True)
    return 0 if out["verified"] else 1


if __name__ == "__main__":
    rc = main()
    sys.exit(comm.allreduce(rc, op=MPI.MAX))
