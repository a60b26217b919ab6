"""Python session test under mpiexec (SPMD, /usr/bin/python3 with Debian's torch): the
trainer ranks (all but the last) train a tiny llama (plain torch, Hugging Face parameter
names, the tests/data llama-tiny config) and register their shards of its parameters; the
last rank is an engine holding the fused vLLM-layout tensors refit expects (qkv_proj,
gate_up_proj, padded vocab), initialised differently. After every update the engine's
tensors, split back per projection, equal the trainer's bit for bit, its logits computed
from those views equal the trainer's exactly, and no registered data_ptr changed; an AdamW
step between updates changes them; a bad tensor raises refit.Error naming it, and a plan
after it raises on every rank; an aborted update leaves the engine's tensors unchanged and
committed False on every rank.

  --fsdp     the topology's trainer.layout is fsdp: trainer rank d registers FSDP2's Shard(0)
             of each parameter, p.chunk(T, 0)[d] (a view: AdamW's in-place steps show through)
  --masters  the trainers train in float32 and register float32 masters: the engine's bf16
             equals master.to(torch.bfloat16) bit for bit, and so do infinities, subnormals
             and ties put into a master for a last update (NaN stays NaN)

Every trainer rank trains the same replicated model (same seed, same tokens: checked equal
after each step); trainer rank 0 sends the reference to the engine.

    mpiexec -np N /usr/bin/python3 python/tests/test_session_llama.py TOPOLOGY CONFIG_JSON
        [--fsdp] [--masters]
"""
import json
import math
import os
import sys

from mpi4py import MPI
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import refit  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
topo_path, cfg_path = sys.argv[1], sys.argv[2]
FSDP, MASTERS = "--fsdp" in sys.argv[3:], "--masters" in sys.argv[3:]
T = size - 1  # trainer ranks; the last rank is the engine
ENGINE = size - 1
cfg = json.load(open(cfg_path))
H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
NH, NKV, D, I = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                 cfg["intermediate_size"])
EPS, THETA = cfg["rms_norm_eps"], cfg["rope_parameters"]["rope_theta"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d: FAIL: %s" % (rank, what), flush=True)


class RMSNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(H))


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(H, NH * D, bias=False)
        self.k_proj = torch.nn.Linear(H, NKV * D, bias=False)
        self.v_proj = torch.nn.Linear(H, NKV * D, bias=False)
        self.o_proj = torch.nn.Linear(NH * D, H, bias=False)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = torch.nn.Linear(H, I, bias=False)
        self.up_proj = torch.nn.Linear(H, I, bias=False)
        self.down_proj = torch.nn.Linear(I, H, bias=False)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn, self.mlp = Attn(), MLP()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(V, H)
        self.layers = torch.nn.ModuleList([Layer() for _ in range(L)])
        self.norm = RMSNorm()


class TinyLlama(torch.nn.Module):
    """LlamaForCausalLM's parameter names and maths, in plain torch."""

    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.lm_head = torch.nn.Linear(H, V, bias=False)


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rope(x, pos):
    inv = 1.0 / (THETA ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = torch.outer(pos.float(), inv)
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def forward(p, tokens):
    """Logits from a dict of HF-named weights (the trainer's parameters or the engine's views)."""
    T = tokens.shape[-1]
    pos = torch.arange(T)
    x = torch.nn.functional.embedding(tokens, p["model.embed_tokens.weight"])
    mask = torch.full((T, T), float("-inf")).triu(1).to(x.dtype)
    for i in range(L):
        pre = "model.layers.%d." % i
        h = rms(x, p[pre + "input_layernorm.weight"])
        q = (h @ p[pre + "self_attn.q_proj.weight"].t()).view(-1, T, NH, D).transpose(1, 2)
        k = (h @ p[pre + "self_attn.k_proj.weight"].t()).view(-1, T, NKV, D).transpose(1, 2)
        v = (h @ p[pre + "self_attn.v_proj.weight"].t()).view(-1, T, NKV, D).transpose(1, 2)
        q, k = rope(q, pos), rope(k, pos)
        k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
        a = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(D) + mask, -1) @ v
        x = x + a.transpose(1, 2).reshape(-1, T, NH * D) @ p[pre + "self_attn.o_proj.weight"].t()
        h = rms(x, p[pre + "post_attention_layernorm.weight"])
        g = h @ p[pre + "mlp.gate_proj.weight"].t()
        u = h @ p[pre + "mlp.up_proj.weight"].t()
        x = x + (torch.nn.functional.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].t()
    return rms(x, p["model.norm.weight"]) @ p["lm_head.weight"].t()


def engine_views(t):
    """The engine's fused vLLM tensors split back per projection (views, no copies)."""
    p = {"model.embed_tokens.weight": t["model.embed_tokens.weight"][:V],
         "lm_head.weight": t["lm_head.weight"][:V],
         "model.norm.weight": t["model.norm.weight"]}
    for i in range(L):
        pre = "model.layers.%d." % i
        qkv, gu = t[pre + "self_attn.qkv_proj.weight"], t[pre + "mlp.gate_up_proj.weight"]
        p[pre + "self_attn.q_proj.weight"] = qkv[: NH * D]
        p[pre + "self_attn.k_proj.weight"] = qkv[NH * D: NH * D + NKV * D]
        p[pre + "self_attn.v_proj.weight"] = qkv[NH * D + NKV * D:]
        p[pre + "self_attn.o_proj.weight"] = t[pre + "self_attn.o_proj.weight"]
        p[pre + "mlp.gate_proj.weight"] = gu[:I]
        p[pre + "mlp.up_proj.weight"] = gu[I:]
        p[pre + "mlp.down_proj.weight"] = t[pre + "mlp.down_proj.weight"]
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            p[pre + n] = t[pre + n]
    return p


def bits(x):
    return x.contiguous().view(torch.int16)


def raw(x):
    """The tensor's bytes (bf16 or f32), for equality across ranks."""
    x = x.detach().contiguous()
    return x.view(torch.int16 if x.element_size() == 2 else torch.int32).numpy().tobytes()


def shard(p):
    """This trainer rank's shard of a full parameter: all of it (trainer TP 1, megatron) or,
    fsdp, FSDP2's Shard(0) = torch.chunk along dim 0 (the last ranks of a small tensor get
    fewer rows or none: an empty view, which refit accepts and ignores)."""
    if not FSDP:
        return p
    c = p.chunk(T, 0)
    return c[rank] if rank < len(c) else p[p.shape[0]:]


TOKENS = torch.arange(16).remainder(V).view(1, 16) * 37 % V

s = refit.Session(comm, topo_path)
check(s.role == ("trainer" if rank < ENGINE else "rollout"), "role %s" % s.role)

if s.role == "trainer":
    torch.manual_seed(0)
    model = TinyLlama()  # float32: the masters; or the bf16 model itself
    if not MASTERS:
        model = model.to(torch.bfloat16)
    full = {n: p.data for n, p in model.named_parameters()}
    params = {n: shard(t) for n, t in full.items()}  # what this rank registers
    want = {n: tuple(shape) for n, dt, shape in s.expected()}
    mine = {n: tuple(t.shape) for n, t in params.items() if t.numel() > 0}
    check(mine == want, "rank %d: shards %r, refit expects %r" % (rank, mine, want))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
else:
    torch.manual_seed(1234)  # a differently initialised engine
    engine = {n: torch.randn(shape).to(torch.bfloat16) for n, dt, shape in s.expected()}
    ptrs = {n: t.data_ptr() for n, t in engine.items()}
    params = engine

# a bad tensor raises naming it, locally; the plan after it raises on every rank
bad = "model.layers.0.self_attn.q_proj.weight" if s.role == "trainer" else \
    "model.layers.0.self_attn.qkv_proj.weight"
try:
    s.register({bad: torch.zeros(3, 3, dtype=torch.bfloat16)})
    check(False, "a wrong shape registered")
except refit.Error as e:
    check(bad in str(e) and e.status == "RF_ERR_MISMATCH", "register error: %s" % e)
try:
    s.plan()
    check(False, "the plan after a refused registration succeeded")
except refit.Error as e:
    msg = comm.allgather(str(e))
    check(all(m == msg[0] for m in msg) and "rank 0" in msg[0], "plan errors differ: %r" % msg)

s.register(params)
plan = s.plan()
hashes = comm.allgather((plan.hash, plan.counts, plan.narrowed))
check(all(h == hashes[0] for h in hashes), "plans differ %r" % hashes)
check(plan.counts["DIRECT"] == 6 * L + 3 and plan.counts["LAYERWISE"] == 0,
      "counts %r" % plan.counts)
check(plan.narrowed == (plan.tensors if MASTERS else 0),
      "narrowed %d of %d tensors" % (plan.narrowed, plan.tensors))


def reference():
    """What the engine must hold: the model's bf16 parameters (masters rounded by torch)."""
    return {n: t.to(torch.bfloat16) for n, t in full.items()}


def compare(version, r):
    """The engine's tensors equal the trainer's parameters (bit for bit), and its logits."""
    check(r.committed and r.version == version, "update %d: %r" % (version, r))
    if s.role == "trainer":
        if rank == 0:
            with torch.no_grad():
                ref = reference()
                comm.send(({n: t.clone() for n, t in ref.items()}, forward(ref, TOKENS)),
                          dest=ENGINE)
        return None
    want, logits = comm.recv(source=0)
    views = engine_views(engine)
    for n, w in want.items():
        check(torch.equal(bits(views[n]), bits(w)), "update %d: %s differs" % (version, n))
    for n in ("model.embed_tokens.weight", "lm_head.weight"):
        check(bool((engine[n][V:] == 0).all()), "%s: padding rows not zero" % n)
    with torch.no_grad():
        check(torch.equal(bits(forward(views, TOKENS)), bits(logits)),
              "update %d: logits differ" % version)
    check(all(engine[n].data_ptr() == ptrs[n] for n in engine), "a data_ptr changed")
    return {n: t.clone() for n, t in engine.items()}


r = s.update()
snap1 = compare(1, r)

# a training step on random tokens, then the next update carries it
if s.role == "trainer":
    before = {n: t.clone() for n, t in full.items()}
    g = torch.Generator().manual_seed(5)
    tok = torch.randint(0, V, (2, 12), generator=g)
    logits = forward(dict(model.named_parameters()), tok[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), tok[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    changed = sum(int(not torch.equal(before[n], full[n])) for n in full)
    check(changed == len(full), "AdamW changed %d of %d tensors" % (changed, len(full)))
    check(all(params[n].data_ptr() == shard(full[n]).data_ptr() for n in full),
          "a shard moved")
digests = comm.allgather(b"".join(raw(full[n]) for n in sorted(full))
                         if s.role == "trainer" else None)
check(all(d == digests[0] for d in digests[:T]), "the trainer ranks' models diverged")
r = s.update(version=2)
snap2 = compare(2, r)
if s.role == "rollout":
    diff = sum(int(not torch.equal(snap1[n], snap2[n])) for n in snap1)
    check(diff == len(snap1), "update 2 changed %d of %d engine tensors" % (diff, len(snap1)))

# an injected failure: the trainer aborts; nothing moves, committed False everywhere
if s.role == "trainer":
    with torch.no_grad():
        for t in full.values():
            t.add_(1.0)
    if rank == 0:
        s.abort("injected by the test")
r = s.update()
outcome = comm.allgather((r.committed, r.reason))
check(all(o == outcome[0] for o in outcome) and not r.committed
      and "injected by the test" in r.reason, "aborted update: %r" % outcome)
if s.role == "rollout":
    check(all(torch.equal(bits(engine[n]), bits(snap2[n])) for n in engine),
          "the aborted update changed the engine's tensors")
r = s.update()
compare(3, r)

def step_weights():
    """A change of every trainer weight (shards see it through their views)."""
    if s.role == "trainer":
        with torch.no_grad():
            for t in full.values():
                t.add_(0.25)


def same_everywhere(what, value):
    got = comm.allgather(value)
    check(all(g == got[0] for g in got), "%s differs across ranks: %r" % (what, got))


# a tensor moved between updates (p.data = ...: a new data_ptr): the binding's check, on its
# helper thread while the update runs, fails that attempt on every rank; update() registers it
# again and runs the update once more: committed, r.stats["retries"] 1 on every rank
victim = "model.norm.weight"
step_weights()
if s.role == "rollout":
    engine[victim].data = torch.full_like(engine[victim], 3.0)
    ptrs[victim] = engine[victim].data_ptr()
v = s.version + 1
r = s.update()
compare(v, r)
same_everywhere("retries", r.stats["retries"])
check(r.stats["retries"] == 1 and r.stats["moved"] == ([victim] if s.role == "rollout" else []),
      "moved between updates: stats %r" % r.stats)
if s.role == "rollout":
    check(s._held[victim].data_ptr() == refit._storage(engine[victim]).data_ptr(),
          "the binding still holds the old storage of %s" % victim)

# ... moved while the update runs (the engine re-allocates it as the check starts): that
# attempt FAILS on every rank with RF_ERR_MOVED naming it, the new memory untouched
step_weights()
if s.role == "rollout":
    plain = s._moved_now

    def moving():
        s._moved_now = plain
        engine[victim].data = torch.full_like(engine[victim], 7.0)
        return plain()
    s._moved_now = moving
v = s.version + 1
raw_r, moved = s._checked_update(s._s, None)
res = refit.Result(raw_r)
same_everywhere("the verdict", (res.committed, res.status, res.failed_rank, res.reason))
check(not res.committed and res.status == "RF_ERR_MOVED" and res.failed_rank == ENGINE and
      victim in res.reason and s.version == v - 1, "moved during the update: %r (%s, rank %d)"
      % (res, res.status, res.failed_rank))
if s.role == "rollout":
    check(moved == [victim] and bool((engine[victim] == 7.0).all()),
          "moved during the update: %r; the new memory written" % moved)
    ptrs[victim] = engine[victim].data_ptr()
s._reregister(moved)
r = s.update()
compare(v, r)
check(r.stats["retries"] == 0, "the update after the move retried: %r" % r.stats)

# a trainer shard moved between updates (trainer rank 0): the same retry, committed
step_weights()
tvictim = "model.layers.0.input_layernorm.weight"  # its values change no more below
if rank == 0:
    params[tvictim].data = params[tvictim].clone()
v = s.version + 1
r = s.update()
compare(v, r)
same_everywhere("retries", r.stats["retries"])
check(r.stats["retries"] == 1 and r.stats["moved"] == ([tvictim] if rank == 0 else []),
      "a trainer shard moved between updates: stats %r" % r.stats)

if MASTERS:
    # values torch rounds in every way, spread over the fsdp shards of two tensors: the
    # engine's bf16 equals master.to(torch.bfloat16) bit for bit, a NaN stays NaN
    special = torch.tensor([0x7F800000, 0xFF800000 - (1 << 32), 0x00000001, 0x007FFFFF,
                            0x00018000, 0x3F808000, 0x3F818000, 0xBF818000 - (1 << 32),
                            0x3F808001, 0x7F7FFFFF, 0x7FC00000, 0x80000001 - (1 << 32)],
                           dtype=torch.int64).to(torch.int32).view(torch.float32)
    if s.role == "trainer":
        with torch.no_grad():
            for n in ("model.norm.weight", "model.embed_tokens.weight"):
                flat = full[n].view(-1)
                k = len(special)
                for at in (0, flat.numel() // 2, flat.numel() - k):
                    flat[at:at + k] = special
    v = s.version + 1
    r = s.update()
    check(r.committed and r.version == v, "update %d: %r" % (v, r))
    if s.role == "trainer":
        if rank == 0:
            comm.send({n: t.clone() for n, t in reference().items()}, dest=ENGINE)
    else:
        want = comm.recv(source=0)
        views = engine_views(engine)
        for n, w in want.items():
            got = views[n]
            nan = torch.isnan(w)
            check(torch.equal(torch.isnan(got), nan), "update %d: %s: NaNs differ" % (v, n))
            check(torch.equal(bits(got)[~nan], bits(w)[~nan]), "update %d: %s differs" % (v, n))
        inf = torch.isinf(views["model.norm.weight"].float()).sum().item()
        check(inf >= 9, "update %d: %d infinities in model.norm.weight" % (v, inf))

s.close()

nfail = comm.allreduce(len(failures), op=MPI.SUM)
if rank == 0:
    print("test_session_llama: %s (%d failures)" % ("ok" if nfail == 0 else "FAILED", nfail))
sys.exit(0 if nfail == 0 else 1)
