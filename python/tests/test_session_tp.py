"""Python session test with trainer TP > 1 (trainer.layout megatron) under mpiexec (SPMD,
/usr/bin/python3 with Debian's torch): the trainer ranks (all but the last) hold a tiny
Hugging Face-named model (llama dense or qwen3-moe, plain torch) as Megatron shards
(python/tests/megatron.py: q / k / v split by heads, gate / up split, row-parallel columns,
vocab rows; experts over EP, split inside by expert TP), train it with AdamW on random tokens
between updates and register their own shards once. The last rank is the engine: the fused
vLLM tensors (rollout.layout vllm: qkv_proj, gate_up_proj, experts w13 / w2, padded vocab)
or transformers 5's module layout (hf: q / k / v apart, experts fused 3-D), initialised
differently. After every update the engine's tensors (vllm: split back per projection, as
views) equal the trainer's bit for bit, its logits computed from them equal the trainer's
exactly, and no registered data_ptr changed; an aborted update leaves the engine unchanged
and committed False on every rank.

  --tp N --ep N --etp N   the topology's trainer grid (etp defaults to tp)
  --masters               the trainers hold float32 masters: the engine's bf16 is
                          master.to(torch.bfloat16), infinities, subnormals and ties included

    mpiexec -np N /usr/bin/python3 python/tests/test_session_tp.py TOPOLOGY CONFIG_JSON
        --tp N [--ep N] [--etp N] [--masters]
"""
import json
import math
import os
import sys

from mpi4py import MPI
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import refit  # noqa: E402
import megatron  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
topo_path, cfg_path = sys.argv[1], sys.argv[2]
args = sys.argv[3:]


def flag(name, default):
    return int(args[args.index(name) + 1]) if name in args else default


MASTERS = "--masters" in args
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
TP = flag("--tp", 1)
GRID = megatron.Grid(T, TP, ep=flag("--ep", 1), etp=flag("--etp", TP), experts=E if MOE else 0)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d: FAIL: %s" % (rank, what), flush=True)


def checkpoint_tensors(seed):
    """The model's tensors, checkpoint names and layout (one linear per expert), float32."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=0.05):
        return torch.randn(*shape, generator=g) * scale

    def norm(n):
        return torch.ones(n) + 0.01 * torch.randn(n, generator=g)

    t = {"model.embed_tokens.weight": rnd(V, H, scale=1.0)}
    for i in range(L):
        pre = "model.layers.%d." % i
        t[pre + "input_layernorm.weight"] = norm(H)
        t[pre + "self_attn.q_proj.weight"] = rnd(NH * D, H)
        t[pre + "self_attn.k_proj.weight"] = rnd(NKV * D, H)
        t[pre + "self_attn.v_proj.weight"] = rnd(NKV * D, H)
        t[pre + "self_attn.o_proj.weight"] = rnd(H, NH * D)
        if QK_NORM:
            t[pre + "self_attn.q_norm.weight"] = norm(D)
            t[pre + "self_attn.k_norm.weight"] = norm(D)
        t[pre + "post_attention_layernorm.weight"] = norm(H)
        if MOE:
            t[pre + "mlp.gate.weight"] = rnd(E, H)
            for e in range(E):
                x = pre + "mlp.experts.%d." % e
                t[x + "gate_proj.weight"] = rnd(IM, H)
                t[x + "up_proj.weight"] = rnd(IM, H)
                t[x + "down_proj.weight"] = rnd(H, IM)
        else:
            t[pre + "mlp.gate_proj.weight"] = rnd(I, H)
            t[pre + "mlp.up_proj.weight"] = rnd(I, H)
            t[pre + "mlp.down_proj.weight"] = rnd(H, I)
    t["model.norm.weight"] = norm(H)
    t["lm_head.weight"] = rnd(V, H)
    return t


def rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rope(x, pos):
    inv = 1.0 / (THETA ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = torch.outer(pos.float(), inv)
    cos = torch.cat([ang.cos()] * 2, -1).to(x.dtype)
    sin = torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def expert_weights(p, pre, e):
    """Expert e's (gate, up, down): the checkpoint's per-expert linears, or views of the fused
    3-D tensors (transformers 5's gate_up_proj / down_proj, vLLM's w13 / w2: gate rows first)."""
    fused = p.get(pre + "mlp.experts.gate_up_proj")
    if fused is None:
        x = pre + "mlp.experts.%d." % e
        return p[x + "gate_proj.weight"], p[x + "up_proj.weight"], p[x + "down_proj.weight"]
    return fused[e, :IM], fused[e, IM:], p[pre + "mlp.experts.down_proj"][e]


def forward(p, tokens):
    """Logits from a dict of HF-named weights (the trainer's or the engine's)."""
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
            q = rms(q, p[pre + "self_attn.q_norm.weight"])
            k = rms(k, p[pre + "self_attn.k_norm.weight"])
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
        prob = torch.softmax((h @ p[pre + "mlp.gate.weight"].t()).float(), -1)
        w, idx = prob.topk(TOPK, -1)  # norm_topk_prob false
        out = torch.zeros_like(h)
        for e in range(E):
            g, u, dn = expert_weights(p, pre, e)
            ye = (torch.nn.functional.silu(h @ g.t()) * (h @ u.t())) @ dn.t()
            out = out + (w * (idx == e)).sum(-1, keepdim=True).to(h.dtype) * ye
        x = x + out
    return rms(x, p["model.norm.weight"]) @ p["lm_head.weight"].t()


def fuse_experts(ckpt):
    """Checkpoint-named tensors with each MoE layer's experts stacked into the fused 3-D
    mlp.experts.gate_up_proj (E, 2 Im, H) / down_proj (E, H, Im); the rest as they are."""
    out = {n: t for n, t in ckpt.items() if ".mlp.experts." not in n}
    for i in range(L if MOE else 0):
        pre = "model.layers.%d.mlp.experts." % i
        out[pre + "gate_up_proj"] = torch.stack(
            [torch.cat([ckpt[pre + "%d.gate_proj.weight" % e], ckpt[pre + "%d.up_proj.weight" % e]])
             for e in range(E)])
        out[pre + "down_proj"] = torch.stack([ckpt[pre + "%d.down_proj.weight" % e]
                                              for e in range(E)])
    return out


def vllm_views(t):
    """The engine's fused vLLM tensors as HF-named views (no copies): qkv and gate_up split
    back, the vocab's padding rows cut, experts' w13 / w2 under the fused hf names."""
    p = {}
    for n, x in t.items():
        if n in ("model.embed_tokens.weight", "lm_head.weight"):
            p[n] = x[:V]
        elif n.endswith("self_attn.qkv_proj.weight"):
            pre = n[: -len("qkv_proj.weight")]
            p[pre + "q_proj.weight"] = x[: NH * D]
            p[pre + "k_proj.weight"] = x[NH * D: NH * D + NKV * D]
            p[pre + "v_proj.weight"] = x[NH * D + NKV * D:]
        elif n.endswith("mlp.gate_up_proj.weight"):
            pre = n[: -len("gate_up_proj.weight")]
            p[pre + "gate_proj.weight"], p[pre + "up_proj.weight"] = x[:I], x[I:]
        elif n.endswith("mlp.experts.w13_weight"):
            p[n[: -len("w13_weight")] + "gate_up_proj"] = x
        elif n.endswith("mlp.experts.w2_weight"):
            p[n[: -len("w2_weight")] + "down_proj"] = x
        else:
            p[n] = x
    return p


def bits(x):
    return x.detach().contiguous().view(torch.int16)


def raw(x):
    x = x.detach().contiguous()
    return x.view(torch.int16 if x.element_size() == 2 else torch.int32).numpy().tobytes()


TOKENS = torch.arange(16).remainder(V).view(1, 16) * 37 % V

s = refit.Session(comm, topo_path)
check(s.role == ("trainer" if rank < ENGINE else "rollout"), "role %s" % s.role)
want = {n: tuple(shape) for n, dt, shape in s.expected()}
if s.role == "trainer":
    model = megatron.Sharded(checkpoint_tensors(0), GRID,
                             torch.float32 if MASTERS else torch.bfloat16)
    params = model.mine(rank)  # this rank's Megatron shards: leaves, registered once
    mine = {n: tuple(t.shape) for n, t in params.items()}
    check(mine == want, "rank %d: shards %r, refit expects %r" % (rank, mine, want))
    ptrs = {n: t.data_ptr() for n, t in params.items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    VLLM = None
else:
    torch.manual_seed(1234)  # a differently initialised engine
    VLLM = any(n.endswith("qkv_proj.weight") for n in want)
    if VLLM:
        engine = {n: torch.randn(shape).to(torch.bfloat16) for n, shape in want.items()}
    else:
        engine = {n: t.to(torch.bfloat16) for n, t in fuse_experts(checkpoint_tensors(1)).items()}
    mine = {n: tuple(t.shape) for n, t in engine.items()}
    check(mine == want, "the engine's tensors %r, refit expects %r" % (mine, want))
    params = engine
    ptrs = {n: t.data_ptr() for n, t in params.items()}

s.register(params)
plan = s.plan()
hashes = comm.allgather((plan.hash, plan.counts, plan.narrowed))
check(all(h == hashes[0] for h in hashes), "plans differ %r" % hashes)
check(plan.counts["LAYERWISE"] == 0, "counts %r" % plan.counts)
check(plan.narrowed == (plan.tensors if MASTERS else 0),
      "narrowed %d of %d tensors" % (plan.narrowed, plan.tensors))


def reference():
    """What the engine must hold, HF names, experts fused: the full tensors in bf16."""
    with torch.no_grad():
        return {n: t.detach().to(torch.bfloat16).clone() for n, t in
                fuse_experts(model.full()).items()}


def engine_view():
    return vllm_views(engine) if VLLM else engine


def compare(version, r):
    """The engine's tensors equal the trainer's (bit for bit), and so do its logits."""
    check(r.committed and r.version == version, "update %d: %r" % (version, r))
    check(all(params[n].data_ptr() == ptrs[n] for n in params), "rank %d: a data_ptr changed"
          % rank)
    if s.role == "trainer":
        if rank == 0:
            ref = reference()
            with torch.no_grad():
                comm.send((ref, forward(ref, TOKENS)), dest=ENGINE)
        return None
    ref, logits = comm.recv(source=0)
    views = engine_view()
    check(set(ref) == set(views), "the engine's names %r" % (set(ref) ^ set(views)))
    for n, w in ref.items():
        check(torch.equal(bits(views[n]), bits(w)), "update %d: %s differs" % (version, n))
    if VLLM:
        for n in ("model.embed_tokens.weight", "lm_head.weight"):
            check(bool((engine[n][V:] == 0).all()), "%s: padding rows not zero" % n)
    with torch.no_grad():
        check(torch.equal(bits(forward(views, TOKENS)), bits(logits)),
              "update %d: logits differ" % version)
    return {n: t.clone() for n, t in engine.items()}


snap1 = compare(1, s.update())

# AdamW on random tokens through the sharded leaves (the full tensors are their torch.cat)
if s.role == "trainer":
    before = {n: t.detach().clone() for n, t in params.items()}
    g = torch.Generator().manual_seed(5)
    tok = torch.randint(0, V, (2, 12), generator=g)
    logits = forward(model.full(), tok[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, V), tok[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    changed = sum(int(not torch.equal(before[n], params[n])) for n in params)
    check(changed > len(params) // 2, "AdamW changed %d of %d shards" % (changed, len(params)))
digests = comm.allgather(b"".join(raw(p) for p in model.parameters())
                         if s.role == "trainer" else None)
check(all(d == digests[0] for d in digests[:T]), "the trainer ranks' models diverged")
snap2 = compare(2, s.update(version=2))
if s.role == "rollout":
    diff = sum(int(not torch.equal(snap1[n], snap2[n])) for n in snap1)
    check(diff > len(snap1) // 2, "update 2 changed %d of %d engine tensors" % (diff, len(snap1)))

# an injected failure: the trainer aborts; nothing moves, committed False everywhere
if s.role == "trainer":
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    if rank == T - 1:
        s.abort("injected by the test")
r = s.update()
outcome = comm.allgather((r.committed, r.reason))
check(all(o == outcome[0] for o in outcome) and not r.committed
      and "injected by the test" in r.reason and ("rank %d" % (T - 1)) in r.reason,
      "aborted update: %r" % outcome)
if s.role == "rollout":
    check(all(torch.equal(bits(engine[n]), bits(snap2[n])) for n in engine),
          "the aborted update changed the engine's tensors")
compare(3, s.update())

if MASTERS:
    # values torch rounds every way, in every shard of a replicated and a vocab-split tensor
    special = torch.tensor([0x7F800000, 0xFF800000 - (1 << 32), 0x00000001, 0x007FFFFF,
                            0x00018000, 0x3F808000, 0x3F818000, 0xBF818000 - (1 << 32),
                            0x3F808001, 0x7F7FFFFF, 0x7FC00000, 0x80000001 - (1 << 32)],
                           dtype=torch.int64).to(torch.int32).view(torch.float32)
    if s.role == "trainer":
        with torch.no_grad():
            for n in ("model.norm.weight", "model.embed_tokens.weight"):
                for leaf in model.leaves[n].values():
                    flat, k = leaf.view(-1), len(special)
                    for at in (0, flat.numel() // 2, flat.numel() - k):
                        flat[at:at + k] = special
    r = s.update()
    check(r.committed and r.version == 4, "update 4: %r" % r)
    if s.role == "trainer":
        if rank == 0:
            comm.send(reference(), dest=ENGINE)
    else:
        ref, views = comm.recv(source=0), engine_view()
        for n, w in ref.items():
            nan = torch.isnan(w)
            check(torch.equal(torch.isnan(views[n]), nan), "update 4: %s: NaNs differ" % n)
            check(torch.equal(bits(views[n])[~nan], bits(w)[~nan]), "update 4: %s differs" % n)
        inf = torch.isinf(views["model.norm.weight"].float()).sum().item()
        check(inf >= 9, "update 4: %d infinities in model.norm.weight" % inf)
s.close()

nfail = comm.allreduce(len(failures), op=MPI.SUM)
if rank == 0:
    print("test_session_tp: %s (%d failures)" % ("ok" if nfail == 0 else "FAILED", nfail))
sys.exit(0 if nfail == 0 else 1)
