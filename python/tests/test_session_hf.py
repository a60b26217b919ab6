"""Python session test under rollout.layout hf (mpiexec, /usr/bin/python3 with Debian's torch):
the engine is a plain torch model with Hugging Face parameter names that registers its
model.named_parameters() as they are (no fused tensors to split: q, k, v apart, gate and up
apart, the vocabulary's V rows; Qwen3-MoE experts as transformers 5 keeps them, fused 3-D
mlp.experts.gate_up_proj (E, 2 I, H), gate rows first, and mlp.experts.down_proj (E, H, I)).
The trainer ranks (all but the last) train the checkpoint-layout model (Qwen3-MoE: one linear
per expert, as the checkpoint names them) with AdamW on random tokens between updates and
register their parameters once (trainer TP 1: all of each; --fsdp: FSDP2's Shard(0)). After
every update the engine's parameters equal the trainer's bit for bit, its logits equal the
trainer's exactly, and no registered data_ptr changed; a wrong hf shape raises refit.Error
naming the tensor (so does a numpy array: not a torch.Tensor), and so does a session over an
hf topology with an fp8 model (every rank); an aborted update leaves the engine unchanged and
committed False on every rank.

    mpiexec -np N /usr/bin/python3 python/tests/test_session_hf.py TOPOLOGY CONFIG_JSON [--fsdp]
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
FSDP = "--fsdp" in sys.argv[3:]
T = size - 1
ENGINE = size - 1
cfg = json.load(open(cfg_path))
MOE = cfg["model_type"] == "qwen3_moe"
QK_NORM = cfg["model_type"] in ("qwen3", "qwen3_moe")
H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
NH, NKV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
I = cfg["intermediate_size"]
E = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
IM, TOPK = cfg.get("moe_intermediate_size", 0), cfg.get("num_experts_per_tok", 0)
EPS, THETA = cfg["rms_norm_eps"], cfg["rope_parameters"]["rope_theta"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d: FAIL: %s" % (rank, what), flush=True)


class RMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n) + 0.01 * torch.randn(n))


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(H, NH * D, bias=False)
        self.k_proj = torch.nn.Linear(H, NKV * D, bias=False)
        self.v_proj = torch.nn.Linear(H, NKV * D, bias=False)
        self.o_proj = torch.nn.Linear(NH * D, H, bias=False)
        if QK_NORM:
            self.q_norm, self.k_norm = RMSNorm(D), RMSNorm(D)


class MLP(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.gate_proj = torch.nn.Linear(H, n, bias=False)
        self.up_proj = torch.nn.Linear(H, n, bias=False)
        self.down_proj = torch.nn.Linear(n, H, bias=False)


class FusedExperts(torch.nn.Module):
    """transformers 5's Qwen3MoeExperts parameters: gate_up_proj (E, 2 Im, H), down_proj
    (E, H, Im), (out, in) as nn.Linear stores them."""

    def __init__(self):
        super().__init__()
        self.gate_up_proj = torch.nn.Parameter(torch.randn(E, 2 * IM, H) * 0.05)
        self.down_proj = torch.nn.Parameter(torch.randn(E, H, IM) * 0.05)


class SparseMoe(torch.nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.gate = torch.nn.Linear(H, E, bias=False)
        self.experts = FusedExperts() if fused else torch.nn.ModuleList(
            [MLP(IM) for _ in range(E)])


class Layer(torch.nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.self_attn = Attn()
        self.mlp = SparseMoe(fused) if MOE else MLP(I)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(H), RMSNorm(H)


class Inner(torch.nn.Module):
    def __init__(self, fused):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(V, H)
        self.layers = torch.nn.ModuleList([Layer(fused) for _ in range(L)])
        self.norm = RMSNorm(H)


class Model(torch.nn.Module):
    """A *ForCausalLM's parameter names in plain torch: fused=True is the transformers 5
    module layout the engine holds, fused=False the checkpoint's (the trainer's)."""

    def __init__(self, fused):
        super().__init__()
        self.model = Inner(fused)
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


def expert_weights(p, pre, e):
    """Expert e's (gate, up, down) of layer prefix pre: the checkpoint's per-expert linears,
    or views of transformers 5's fused tensors (gate rows before up)."""
    fused = p.get(pre + "mlp.experts.gate_up_proj")
    if fused is None:
        x = pre + "mlp.experts.%d." % e
        return p[x + "gate_proj.weight"], p[x + "up_proj.weight"], p[x + "down_proj.weight"]
    return fused[e, :IM], fused[e, IM:], p[pre + "mlp.experts.down_proj"][e]


def forward(p, tokens):
    """Logits from a dict of HF-named weights (the trainer's or the engine's parameters)."""
    n = tokens.shape[-1]
    pos = torch.arange(n)
    x = torch.nn.functional.embedding(tokens, p["model.embed_tokens.weight"])
    mask = torch.full((n, n), float("-inf")).triu(1).to(x.dtype)
    for i in range(L):
        pre = "model.layers.%d." % i
        h = rms(x, p[pre + "input_layernorm.weight"])
        q = (h @ p[pre + "self_attn.q_proj.weight"].t()).view(-1, n, NH, D)
        k = (h @ p[pre + "self_attn.k_proj.weight"].t()).view(-1, n, NKV, D)
        v = (h @ p[pre + "self_attn.v_proj.weight"].t()).view(-1, n, NKV, D).transpose(1, 2)
        if QK_NORM:
            q, k = rms(q, p[pre + "self_attn.q_norm.weight"]), rms(k, p[pre + "self_attn.k_norm.weight"])
        q, k = rope(q.transpose(1, 2), pos), rope(k.transpose(1, 2), pos)
        k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
        a = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(D) + mask, -1) @ v
        x = x + a.transpose(1, 2).reshape(-1, n, NH * D) @ p[pre + "self_attn.o_proj.weight"].t()
        h = rms(x, p[pre + "post_attention_layernorm.weight"])
        if not MOE:
            g = h @ p[pre + "mlp.gate_proj.weight"].t()
            u = h @ p[pre + "mlp.up_proj.weight"].t()
            x = x + (torch.nn.functional.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].t()
            continue
        # top-k routing (norm_topk_prob false), every expert applied to its tokens
        prob = torch.softmax((h @ p[pre + "mlp.gate.weight"].t()).float(), -1)
        w, idx = prob.topk(TOPK, -1)
        out = torch.zeros_like(h)
        for e in range(E):
            g, u, dn = expert_weights(p, pre, e)
            ye = (torch.nn.functional.silu(h @ g.t()) * (h @ u.t())) @ dn.t()
            we = (w * (idx == e)).sum(-1, keepdim=True).to(h.dtype)
            out = out + we * ye
        x = x + out
    return rms(x, p["model.norm.weight"]) @ p["lm_head.weight"].t()


def bits(x):
    return x.detach().contiguous().view(torch.int16)


def shard(t):
    """This trainer rank's part: all of it, or (--fsdp) FSDP2's Shard(0) = chunk along dim 0."""
    if not FSDP:
        return t
    c = t.chunk(T, 0)
    return c[rank] if rank < len(c) else t[t.shape[0]:]


def to_engine(ckpt):
    """The checkpoint-named tensors as the engine's parameters (experts stacked and fused)."""
    out = {}
    for i in range(L):
        pre = "model.layers.%d.mlp.experts." % i
        if MOE:
            out[pre + "gate_up_proj"] = torch.stack(
                [torch.cat([ckpt[pre + "%d.gate_proj.weight" % e], ckpt[pre + "%d.up_proj.weight" % e]])
                 for e in range(E)])
            out[pre + "down_proj"] = torch.stack([ckpt[pre + "%d.down_proj.weight" % e]
                                                  for e in range(E)])
    for n, t in ckpt.items():
        if ".mlp.experts." not in n:
            out[n] = t
    return out


TOKENS = torch.arange(16).remainder(V).view(1, 16) * 37 % V

# hf with an fp8 block split by the rank boundary: create raises on every rank, naming the
# module and the sizes
try:
    refit.Session(comm, os.path.join(os.path.dirname(topo_path), "qwen3-fp8-tiny-hf-tp1-to-tp2.yaml"))
    check(False, "hf with k_proj's fp8 block split in two created a session")
except refit.Error as e:
    msg = comm.allgather(str(e))
    check(all(m == msg[0] for m in msg) and "model.layers.0.self_attn.k_proj: output rows per "
          "rank 64 is not a multiple of the 128-row fp8 block" in msg[0],
          "create errors: %r" % msg)

s = refit.Session(comm, topo_path)
check(s.role == ("trainer" if rank < ENGINE else "rollout"), "role %s" % s.role)
want = {n: tuple(shape) for n, dt, shape in s.expected()}
if s.role == "trainer":
    torch.manual_seed(0)
    model = Model(fused=False).to(torch.bfloat16)
    full = {n: p.data for n, p in model.named_parameters()}
    params = {n: shard(t) for n, t in full.items()}
    mine = {n: tuple(t.shape) for n, t in params.items() if t.numel() > 0}
    check(mine == want, "rank %d: shards %r, refit expects %r" % (rank, mine, want))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
else:
    torch.manual_seed(1234)  # a differently initialised engine, transformers 5's modules
    engine = Model(fused=True).to(torch.bfloat16)
    params = dict(engine.named_parameters())
    mine = {n: tuple(t.shape) for n, t in params.items()}
    check(mine == want, "the engine's named_parameters() %r, refit expects %r" % (mine, want))
    ptrs = {n: t.data_ptr() for n, t in params.items()}

# a numpy array (no torch tensor interface) raises refit.Error naming the tensor and what is
# accepted (not AttributeError), locally, and leaves nothing for the plan to carry
import numpy  # noqa: E402
for v in (numpy.zeros((3, 3), dtype=numpy.uint16), (numpy.zeros(3), "BF16")):
    try:
        s.register({"model.norm.weight": v})
        check(False, "a numpy array registered")
    except refit.Error as e:
        check(e.status == "RF_ERR_INVALID" and "model.norm.weight: a numpy.ndarray, not a "
              "torch.Tensor: register accepts torch tensors" in str(e), "numpy error: %s" % e)
    except Exception as e:
        check(False, "numpy register raised %s: %s" % (type(e).__name__, e))

# a wrong hf shape raises naming the tensor, locally; the plan after it raises on every rank
bad = "model.layers.1.self_attn.k_proj.weight"
if MOE and s.role == "rollout":
    bad = "model.layers.1.mlp.experts.gate_up_proj"
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
    check(all(m == msg[0] for m in msg), "plan errors differ: %r" % msg)

# all or nothing: a dict with one bad tensor between two good ones raises naming it and
# registers none of them, so the whole corrected dict registers next (no "registered twice")
names = sorted(params)
first, last = names[0], names[-1]
try:
    s.register({first: params[first], bad: torch.zeros(3, 3, dtype=torch.bfloat16),
                last: params[last]})
    check(False, "a dict with a wrong shape registered")
except refit.Error as e:
    check(bad in str(e) and e.status == "RF_ERR_MISMATCH", "dict register error: %s" % e)
s.register(params)
plan = s.plan()
hashes = comm.allgather((plan.hash, plan.counts))
check(all(h == hashes[0] for h in hashes), "plans differ %r" % hashes)
# one DIRECT layer per engine module: every hf slot is an exact slice of one tensor
check(plan.counts["LAYERWISE"] == 0 and plan.counts["RUNTIME_VIEW"] == 0, "counts %r" % plan.counts)
# (a MoE layer's gate_up_proj and down_proj are one plan layer: the experts module)
nparams = comm.bcast(len(params) if s.role == "rollout" else None, root=ENGINE)
check(plan.counts["DIRECT"] == nparams - (L if MOE else 0),
      "DIRECT %d, engine parameters %d" % (plan.counts["DIRECT"], nparams))


def compare(version, r):
    check(r.committed and r.version == version, "update %d: %r" % (version, r))
    if s.role == "trainer":
        if rank == 0:
            with torch.no_grad():
                comm.send(({n: t.clone() for n, t in to_engine(full).items()},
                           forward(full, TOKENS)), dest=ENGINE)
        return None
    ref, logits = comm.recv(source=0)
    for n, w in ref.items():
        check(torch.equal(bits(params[n]), bits(w)), "update %d: %s differs" % (version, n))
    with torch.no_grad():
        got = forward(dict(engine.named_parameters()), TOKENS)
    check(torch.equal(bits(got), bits(logits)), "update %d: logits differ" % version)
    check(all(params[n].data_ptr() == ptrs[n] for n in params), "a data_ptr changed")
    return {n: t.detach().clone() for n, t in params.items()}


snap1 = compare(1, s.update())
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
    check(changed > len(full) // 2, "AdamW changed %d of %d tensors" % (changed, len(full)))
snap2 = compare(2, s.update(version=2))
if s.role == "rollout":
    diff = sum(int(not torch.equal(snap1[n], snap2[n])) for n in snap1)
    check(diff > len(snap1) // 2, "update 2 changed %d of %d engine tensors" % (diff, len(snap1)))

# an injected failure: nothing moves, committed False everywhere
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
    check(all(torch.equal(bits(params[n]), bits(snap2[n])) for n in params),
          "the aborted update changed the engine's tensors")
compare(3, s.update())
s.close()

nfail = comm.allreduce(len(failures), op=MPI.SUM)
if rank == 0:
    print("test_session_hf: %s (%d failures)" % ("ok" if nfail == 0 else "FAILED", nfail))
sys.exit(0 if nfail == 0 else 1)
