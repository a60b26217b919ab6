"""Python session test under mpiexec (SPMD, 2 ranks, /usr/bin/python3 with Debian's torch):
rank 0 trains a tiny llama (plain torch, Hugging Face parameter names, the tests/data
llama-tiny config) and registers its bf16 parameters; rank 1 is an engine holding the fused
vLLM-layout tensors refit expects (qkv_proj, gate_up_proj, padded vocab), initialised
differently. After every update the engine's tensors, split back per projection, equal the
trainer's bit for bit, its logits computed from those views equal the trainer's exactly, and
no registered data_ptr changed; an AdamW step between updates changes them; a bad tensor raises
refit.Error naming it, and a plan after it raises on every rank; an aborted update leaves the
engine's tensors unchanged and committed False on both ranks.

    mpiexec -np 2 /usr/bin/python3 python/tests/test_session_llama.py TOPOLOGY CONFIG_JSON
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
rank = comm.Get_rank()
topo_path, cfg_path = sys.argv[1], sys.argv[2]
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


TOKENS = torch.arange(16).remainder(V).view(1, 16) * 37 % V

s = refit.Session(comm, topo_path)
check(s.role == ("trainer" if rank == 0 else "rollout"), "role %s" % s.role)

if s.role == "trainer":
    torch.manual_seed(0)
    model = TinyLlama().to(torch.bfloat16)
    params = {n: p.data for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
else:
    torch.manual_seed(1234)  # a differently initialised engine
    engine = {n: torch.randn(shape).to(torch.bfloat16) for n, dt, shape in s.expected()}
    ptrs = {n: t.data_ptr() for n, t in engine.items()}
    params = engine

# a bad tensor raises naming it, locally; the plan after it raises on every rank
bad = "model.layers.0.self_attn.q_proj.weight" if rank == 0 else \
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
    check(msg[0] == msg[1] and "rank 0" in msg[0], "plan errors differ: %r" % msg)

s.register(params)
plan = s.plan()
hashes = comm.allgather((plan.hash, plan.counts))
check(hashes[0] == hashes[1], "plans differ %r" % hashes)
check(plan.counts["DIRECT"] == 6 * L + 3 and plan.counts["LAYERWISE"] == 0,
      "counts %r" % plan.counts)


def compare(version, r):
    """The engine's tensors equal the trainer's parameters (bit for bit), and its logits."""
    check(r.committed and r.version == version, "update %d: %r" % (version, r))
    if s.role == "trainer":
        with torch.no_grad():
            comm.send(({n: t.clone() for n, t in params.items()}, forward(params, TOKENS)), dest=1)
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
    before = {n: t.clone() for n, t in params.items()}
    g = torch.Generator().manual_seed(5)
    tok = torch.randint(0, V, (2, 12), generator=g)
    logits = forward(dict(model.named_parameters()), tok[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), tok[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    changed = sum(int(not torch.equal(before[n], params[n])) for n in params)
    check(changed == len(params), "AdamW changed %d of %d tensors" % (changed, len(params)))
r = s.update(version=2)
snap2 = compare(2, r)
if s.role == "rollout":
    diff = sum(int(not torch.equal(snap1[n], snap2[n])) for n in snap1)
    check(diff == len(snap1), "update 2 changed %d of %d engine tensors" % (diff, len(snap1)))

# an injected failure: the trainer aborts; nothing moves, committed False everywhere
if s.role == "trainer":
    with torch.no_grad():
        for t in params.values():
            t.add_(1.0)
    s.abort("injected by the test")
r = s.update()
outcome = comm.allgather((r.committed, r.reason))
check(outcome[0] == outcome[1] and not r.committed and "injected by the test" in r.reason,
      "aborted update: %r" % outcome)
if s.role == "rollout":
    check(all(torch.equal(bits(engine[n]), bits(snap2[n])) for n in engine),
          "the aborted update changed the engine's tensors")
r = s.update()
compare(3, r)
s.close()

nfail = comm.allreduce(len(failures), op=MPI.SUM)
if rank == 0:
    print("test_session_llama: %s (%d failures)" % ("ok" if nfail == 0 else "FAILED", nfail))
sys.exit(0 if nfail == 0 else 1)
