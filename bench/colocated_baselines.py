#!/usr/bin/env python3
"""PyTorch baselines for a colocated weight update on one GPU (issue #4, item 5).

This is the reference for issue #4's baselines: what peer RL frameworks do when the trainer
process and the inference-engine process share one GPU. Rank 0 is the trainer, rank 1 the
engine, both on cuda:0; control messages are pickled Python objects over MPI (mpi4py).

  copy floor  best of 5 device-to-device copies (dst.copy_(src), uint8, CUDA events) of one
              buffer of the payload's size (payload = bytes of all trainer tensors).
  (a)         one CUDA IPC handle per tensor: per update the trainer calls reduce_tensor() on
              every tensor and sends the handles; the engine rebuilds each tensor (opening the
              IPC handle), copy_()s it into its slice of the fused parameter (q/k/v -> qkv,
              gate/up -> gate_up, expert gate/up -> w13[e], expert down -> w2[e], the rest
              1:1), drops the rebuilt tensors, synchronizes and answers "done".
  (b)         two reused 1 GiB IPC buffers, opened once: per update the trainer packs tensors
              in order into buffer 0, 1, 0, ... (256-byte aligned, a tensor larger than a
              buffer split by rows), synchronizes and sends each fill's (name, row0, rows,
              offset) list; the engine slices views out of the buffer, copy_()s them into the
              fused parameters, synchronizes and acks; the trainer fills the other buffer
              meanwhile. The last ack ends the update.
An update's time runs from the trainer starting it (its tensors hold the values, after a
torch.cuda.synchronize) to the engine's final answer arriving at the trainer (perf_counter).
After each baseline every engine slice is compared with its trainer tensor (torch.equal,
through per-tensor IPC, untimed); the engine's parameters are zeroed before each baseline.

--floor-bytes N[,N...] --json F (one process, no MPI peer): only the copy floor of each size,
the torch ceiling bench/colocated.sh measures for every refit shape in the same script run.

Run (from the repository root, on the GPU host):
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
      python3 bench/colocated_baselines.py --tiny                        # smoke test
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
      python3 bench/colocated_baselines.py --json colocated_baselines.json   # both shapes
"""
import argparse, gc, json, math, os, statistics, sys, time

import torch
from mpi4py import MPI
from torch.multiprocessing.reductions import reduce_tensor

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
DT = torch.bfloat16
ALIGN = 256
HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "jobs", "models")


def spec_for(shape, args):
    """Model dimensions for a shape name, from the job's HF config (or the --tiny scale)."""
    if shape == "llama8b":
        c = json.load(open(os.path.join(MODELS, "llama-3.1-8b.config.json")))
        s = dict(moe=False, L=c["num_hidden_layers"], I=c["intermediate_size"])
    elif shape == "qwen3moe24":
        c = json.load(open(os.path.join(MODELS, "qwen3-30b-a3b.config.json")))
        s = dict(moe=True, L=24, E=c["num_experts"], Im=c["moe_intermediate_size"])
    else:
        raise SystemExit(f"unknown shape {shape}")
    assert not c.get("tie_word_embeddings", False)
    s.update(H=c["hidden_size"], nq=c["num_attention_heads"], nkv=c["num_key_value_heads"],
             V=c["vocab_size"], hd=c.get("head_dim", c["hidden_size"] // c["num_attention_heads"]))
    if args.tiny:  # way down, same structure
        s.update(L=2, H=256, nq=4, nkv=2, hd=64, V=1024, I=512, E=8, Im=128)
    if s["moe"] and args.layers:
        s["L"] = args.layers
    return s


def layout(s):
    """HF tensors [(name, shape)], the engine's fused params {key: shape} and, per HF name,
    where it goes: (fused key, expert index or None, first row)."""
    H, hd, nq, nkv, V = s["H"], s["hd"], s["nq"], s["nkv"], s["V"]
    tensors, fused, dest = [], {}, {}

    def one(name, shape):  # 1:1
        tensors.append((name, shape)); fused[name] = shape; dest[name] = (name, None, 0)

    def part(name, shape, key, fshape, row0, expert=None):  # rows of a fused param
        tensors.append((name, shape)); fused.setdefault(key, fshape)
        dest[name] = (key, expert, row0)

    one("model.embed_tokens.weight", (V, H))
    for i in range(s["L"]):
        p = f"model.layers.{i}."
        qkv, fq = p + "self_attn.qkv_proj.weight", ((nq + 2 * nkv) * hd, H)
        part(p + "self_attn.q_proj.weight", (nq * hd, H), qkv, fq, 0)
        part(p + "self_attn.k_proj.weight", (nkv * hd, H), qkv, fq, nq * hd)
        part(p + "self_attn.v_proj.weight", (nkv * hd, H), qkv, fq, (nq + nkv) * hd)
        one(p + "self_attn.o_proj.weight", (H, nq * hd))
        if s["moe"]:
            E, Im = s["E"], s["Im"]
            one(p + "self_attn.q_norm.weight", (hd,))
            one(p + "self_attn.k_norm.weight", (hd,))
            one(p + "mlp.gate.weight", (E, H))  # router
            w13, w2 = p + "mlp.experts.w13_weight", p + "mlp.experts.w2_weight"
            for e in range(E):
                q = f"{p}mlp.experts.{e}."
                part(q + "gate_proj.weight", (Im, H), w13, (E, 2 * Im, H), 0, e)
                part(q + "up_proj.weight", (Im, H), w13, (E, 2 * Im, H), Im, e)
                part(q + "down_proj.weight", (H, Im), w2, (E, H, Im), 0, e)
        else:
            I, gu = s["I"], p + "mlp.gate_up_proj.weight"
            part(p + "mlp.gate_proj.weight", (I, H), gu, (2 * I, H), 0)
            part(p + "mlp.up_proj.weight", (I, H), gu, (2 * I, H), I)
            one(p + "mlp.down_proj.weight", (H, I))
        one(p + "input_layernorm.weight", (H,))
        one(p + "post_attention_layernorm.weight", (H,))
    one("model.norm.weight", (H,))
    one("lm_head.weight", (V, H))
    return tensors, fused, dest


def row_bytes(shape):
    return math.prod(shape[1:]) * 2  # bf16; a 1-D tensor's "row" is one element


def plan_fills(tensors, buf_bytes):
    """Pack tensors in order into buffer fills: [[(name, row0, rows, offset), ...], ...]. A
    tensor that fits a buffer but not the rest of this one starts the next fill; one larger
    than a buffer is split by rows."""
    fills, cur, off = [], [], 0
    for name, shape in tensors:
        rb, n, r = row_bytes(shape), shape[0], 0
        if cur and n * rb <= buf_bytes and off + n * rb > buf_bytes:
            fills.append(cur); cur, off = [], 0
        while r < n:
            k = min(n - r, (buf_bytes - off) // rb)
            if k <= 0:
                if not cur:
                    raise SystemExit(f"one row of {name} is larger than the buffer")
                fills.append(cur); cur, off = [], 0
                continue
            cur.append((name, r, k, off))
            off = (off + k * rb + ALIGN - 1) // ALIGN * ALIGN
            r += k
            if off >= buf_bytes:
                fills.append(cur); cur, off = [], 0
    if cur:
        fills.append(cur)
    return fills


def bf16_view(buf, off, shape):  # a view of a flat uint8 buffer as a bf16 tensor
    return buf[off:off + math.prod(shape) * 2].view(DT).view(shape)


# ----------------------------------------------------------------------------- engine (rank 1)
def engine():
    dev = torch.device("cuda", 0)
    fused, dst, bufs = None, None, None
    while True:
        msg = comm.recv(source=0)
        kind = msg[0]
        if kind == "setup":  # allocate fused params and a view per HF tensor
            tensors, fshapes, dest = layout(msg[1])
            fused = {k: torch.zeros(v, dtype=DT, device=dev) for k, v in fshapes.items()}
            dst = {}
            for name, shape in tensors:
                key, e, r0 = dest[name]
                v = fused[key] if e is None else fused[key][e]
                dst[name] = v.narrow(0, r0, shape[0])
                assert tuple(dst[name].shape) == shape, name
            torch.cuda.synchronize()
            comm.send("ok", dest=0)
        elif kind == "zero":
            for p in fused.values():
                p.zero_()
            torch.cuda.synchronize()
            comm.send("ok", dest=0)
        elif kind == "a":  # (a): rebuild every tensor from its handle, copy into its slice
            got = [(name, fn(*args)) for name, (fn, args) in msg[1]]
            for name, t in got:
                dst[name].copy_(t)
            del got, msg  # closes the IPC mappings (torch syncs the stream per storage)
            torch.cuda.synchronize()
            comm.send("done", dest=0)
        elif kind == "bopen":  # (b): open the two buffers once
            bufs = [fn(*args) for fn, args in msg[1]]
            comm.send("ok", dest=0)
        elif kind == "bfill":  # (b): unpack one fill of buffer i
            _, i, items = msg
            buf = bufs[i]
            for name, r0, n, off in items:
                d = dst[name].narrow(0, r0, n)
                d.copy_(bf16_view(buf, off, d.shape))
            torch.cuda.synchronize()
            comm.send("ack", dest=0)
        elif kind == "bclose":
            bufs = None
            gc.collect()
            comm.send("ok", dest=0)
        elif kind == "verify":  # untimed: every slice against its trainer tensor
            bad = 0
            for name, (fn, args) in msg[1]:
                t = fn(*args)
                if not torch.equal(dst[name], t):
                    bad += 1
            t = None
            comm.send(bad, dest=0)
        elif kind == "free":
            fused = dst = bufs = None
            msg = None
            gc.collect()
            torch.cuda.empty_cache()
            comm.send("ok", dest=0)
        elif kind == "quit":
            return


# ---------------------------------------------------------------------------- trainer (rank 0)
def ask(*msg):
    comm.send(msg, dest=1)
    return comm.recv(source=1)


def copy_floor(nbytes, dev, reps=5):
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); dst.copy_(src); b.record(); b.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return best


def update_a(tens):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    # Per-tensor handles, made anew every update as peers do. The caching allocator may place
    # several small tensors in one cudaMalloc segment; torch then opens that segment's IPC
    # handle once per update in the engine. That is what peers get too.
    handles = [(name, reduce_tensor(t)) for name, t in tens.items()]
    assert ask("a", handles) == "done"
    return time.perf_counter() - t0


def update_b(tens, bufs, fills):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    reqs = []
    for k, items in enumerate(fills):
        i = k % 2
        if k >= 2:
            assert comm.recv(source=1) == "ack"  # fill k-2 unpacked: buffer i is free again
        buf = bufs[i]
        for name, r0, n, off in items:
            t = tens[name]
            bf16_view(buf, off, (n,) + tuple(t.shape[1:])).copy_(t.narrow(0, r0, n))
        torch.cuda.synchronize()
        reqs.append(comm.isend(("bfill", i, items), dest=1))
    for _ in range(min(2, len(fills))):
        assert comm.recv(source=1) == "ack"
    for r in reqs:
        r.wait()
    return time.perf_counter() - t0


def verify(tens):
    bad = ask("verify", [(name, reduce_tensor(t)) for name, t in tens.items()])
    return "yes" if bad == 0 else f"no ({bad} of {len(tens)} tensors differ)"


def run_shape(shape, args, dev):
    s = spec_for(shape, args)
    tensors, _, _ = layout(s)
    payload = sum(math.prod(sh) * 2 for _, sh in tensors)
    res = dict(shape=shape, layers=s["L"], tiny=args.tiny, tensors=len(tensors),
               payload_bytes=payload)
    print(f"== {shape}: {len(tensors)} tensors, {payload / 1e9:.3f} GB payload, "
          f"{s['L']} layers", flush=True)
    # The floor first, while nothing else is allocated (2 x payload), then freed.
    res["copy_floor_s"] = fl = copy_floor(payload, dev)
    print(f"  {'copy floor':20s} {fl * 1e3:10.2f} ms {'':19s}{payload / fl / 1e9:8.1f} GB/s",
          flush=True)

    tens = {name: torch.randn(sh, dtype=DT, device=dev) for name, sh in tensors}  # separate
    torch.cuda.synchronize()                                                    # allocations
    assert ask("setup", s) == "ok"
    for bl in args.baselines:
        assert ask("zero") == "ok"
        if bl == "a":
            run = lambda: update_a(tens)
            label = "(a) IPC/tensor"
        else:
            bufs = [torch.empty(args.buffer_bytes, dtype=torch.uint8, device=dev) for _ in range(2)]
            torch.cuda.synchronize()
            assert ask("bopen", [reduce_tensor(b) for b in bufs]) == "ok"
            fills = plan_fills(tensors, args.buffer_bytes)
            run = lambda: update_b(tens, bufs, fills)
            b = args.buffer_bytes
            label = f"(b) 2x{b >> 20}MiB bufs" if b % 2**20 == 0 else f"(b) 2x{b >> 10}KiB bufs"
        run()  # warm-up
        times = [run() for _ in range(args.updates)]
        best, med = min(times), statistics.median(times)
        ok = verify(tens)
        r = dict(best_s=best, median_s=med, updates=times, verified=ok)
        if bl == "b":
            r.update(buffer_bytes=args.buffer_bytes, fills=len(fills))
            assert ask("bclose") == "ok"
            del bufs, run
            gc.collect()
            torch.cuda.empty_cache()
        res[bl] = r
        print(f"  {label:20s} {best * 1e3:10.2f} ms (median {med * 1e3:9.2f} ms)"
              f"{payload / best / 1e9:8.1f} GB/s {best / fl:6.1f}x floor  verified: {ok}"
              + (f"  ({len(fills)} fills)" if bl == "b" else ""), flush=True)
    assert ask("free") == "ok"  # the engine lets go first, then the trainer frees
    del tens
    gc.collect()
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", action="append", help="llama8b|qwen3moe24 (repeatable or a,b)")
    ap.add_argument("--updates", type=int, default=5, help="timed updates after 1 warm-up")
    ap.add_argument("--baselines", default="a,b")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--layers", type=int, help="MoE layer count (default 24)")
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 256, 8 experts")
    ap.add_argument("--buffer-bytes", type=int, help="(b) buffer size (1 GiB; 64 KiB --tiny)")
    ap.add_argument("--floor-bytes", help="only the copy floor of these sizes (a,b,...); one rank")
    args = ap.parse_args()
    if args.floor_bytes:
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        floors = []
        for n in [int(x) for x in args.floor_bytes.split(",") if x]:
            best = copy_floor(n, dev)
            floors.append(dict(bytes=n, best_s=best, GBps=n / best / 1e9, reps=5,
                               method="dst.copy_(src), uint8, CUDA events"))
            print(f"torch copy floor {n / 1e9:8.3f} GB: {best * 1e3:9.3f} ms "
                  f"{n / best / 1e9:8.1f} GB/s", flush=True)
        out = dict(torch=torch.__version__, device=torch.cuda.get_device_name(0), floors=floors)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        return
    args.shapes = [x for a in (args.shape or ["llama8b,qwen3moe24"]) for x in a.split(",") if x]
    args.baselines = [x for x in args.baselines.split(",") if x]
    assert set(args.baselines) <= {"a", "b"}, args.baselines
    if args.buffer_bytes is None:
        args.buffer_bytes = 64 << 10 if args.tiny else 1 << 30
    assert args.buffer_bytes % ALIGN == 0
    if comm.Get_size() != 2:
        raise SystemExit("run with 2 MPI ranks: rank 0 trainer, rank 1 engine")
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    if rank == 1:
        engine()
        return
    out = dict(shapes=[], torch=torch.__version__, device=torch.cuda.get_device_name(0),
               updates=args.updates, argv=sys.argv[1:])
    for shape in args.shapes:
        out["shapes"].append(run_shape(shape, args, dev))
    comm.send(("quit",), dest=1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:
        if isinstance(e, SystemExit) and not e.code:
            raise
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
