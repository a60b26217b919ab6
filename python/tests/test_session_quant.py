"""Python session test of a quantized model under mpiexec (np 2, SPMD, /usr/bin/python3 with
Debian's torch 1.13, which has no float8 dtype): rank 0 is a trainer holding a bf16 llama (the
tests/data llama-q128 config, Hugging Face names) and registering its parameters as they are;
rank 1 is an fp8-block engine (vLLM layout: fused qkv_proj / gate_up_proj, padded vocab)
registering its F8_E4M3 weights as torch.uint8 tensors with an explicit refit dtype,
s.register({name: (t, "F8_E4M3")}), and its float32 weight_scale_inv. After every update the
engine's bytes equal a pure-torch reference computed here from the trainer's bf16 tensors
(sent to the engine over MPI): per 128 x 128 block, scale = max(amax, 1e-12) / 448 in float32
and each weight / scale rounded to nearest even to e4m3fn (saturating at 448), the engine's
fused tensors the per-projection results stacked; unquantized tensors equal bit for bit. The
trainer changes its weights in place between updates. A bad quantized registration (a
uint8 tensor without the dtype, a dtype of another element size) raises refit.Error naming
it.

    mpiexec -np 2 /usr/bin/python3 python/tests/test_session_quant.py TOPOLOGY CONFIG_JSON
"""
import json
import os
import sys

from mpi4py import MPI
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import refit  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
topo_path, cfg_path = sys.argv[1], sys.argv[2]
cfg = json.load(open(cfg_path))
H, L, V, I = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], \
    cfg["intermediate_size"]
NH, NKV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
VP = (V + 63) // 64 * 64  # vLLM pads the vocabulary to a multiple of 64
B = 128
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d: FAIL: %s" % (rank, what), flush=True)


def e4m3_codes(x):
    """float32 -> e4m3fn byte codes (torch.uint8): round to nearest even, saturating at 448
    (0x7e / 0xfe), the sign kept on zeros; the OCP FP8 e4m3fn encoding (bias 7, 3 mantissa
    bits, subnormals of 2^-9)."""
    sign = torch.signbit(x).to(torch.int32) << 7
    a = x.abs()
    _, ex = torch.frexp(a)  # a = m 2^ex, m in [0.5, 1)
    e = ex.to(torch.int32) - 1  # a in [2^e, 2^(e + 1))
    normal = e >= -6
    step_exp = torch.where(normal, e - 3, torch.full_like(e, -9))
    q = torch.round(torch.ldexp(a, -step_exp.to(torch.float32))).to(torch.int32)  # RNE, exact
    code = torch.where(normal, ((e + 7) << 3) + q - 8, q)
    code = torch.where(a == 0, torch.zeros_like(code), code)
    code = torch.where(a >= 448.0, torch.full_like(code, 0x7e), code)
    return (code | sign).to(torch.uint8)


def fp8_block(w):
    """(codes uint8 (N, K), weight_scale_inv float32 (N/128, K/128)) of a bf16 weight."""
    n, k = w.shape
    x = w.to(torch.float32).reshape(n // B, B, k // B, B)
    amax = x.abs().amax(dim=(1, 3))
    s = torch.clamp(amax, min=1e-12) / 448.0
    q = e4m3_codes(x / s[:, None, :, None])
    return q.reshape(n, k), s


def hf_names():
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(L):
        p = "model.layers.%d." % i
        names += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        names += [p + "self_attn.%s_proj.weight" % x for x in "qkvo"]
        names += [p + "mlp.%s_proj.weight" % x for x in ("gate", "up", "down")]
    return names


def reference(tw):
    """The engine's tensors (vLLM layout, fp8-block) from the trainer's bf16 ones."""
    ref = {}
    for n in ("model.embed_tokens.weight", "lm_head.weight"):
        ref[n] = torch.cat([tw[n], torch.zeros(VP - V, H, dtype=torch.bfloat16)])
    ref["model.norm.weight"] = tw["model.norm.weight"]
    for i in range(L):
        p = "model.layers.%d." % i
        for n in ("input_layernorm", "post_attention_layernorm"):
            ref[p + n + ".weight"] = tw[p + n + ".weight"]
        for fused, parts in (("self_attn.qkv_proj", ["self_attn.%s_proj" % x for x in "qkv"]),
                             ("self_attn.o_proj", ["self_attn.o_proj"]),
                             ("mlp.gate_up_proj", ["mlp.gate_proj", "mlp.up_proj"]),
                             ("mlp.down_proj", ["mlp.down_proj"])):
            qs = [fp8_block(tw[p + x + ".weight"]) for x in parts]
            ref[p + fused + ".weight"] = torch.cat([q for q, _ in qs])
            ref[p + fused + ".weight_scale_inv"] = torch.cat([s for _, s in qs])
    return ref


def as_bytes(t):
    return t.contiguous().view(torch.uint8) if t.dtype != torch.uint8 else t


s = refit.Session(comm, topo_path)
check(s.role == ("trainer" if rank == 0 else "rollout"), "role %s" % s.role)
expected = {n: (dt, shape) for n, dt, shape in s.expected()}
gen = torch.Generator().manual_seed(15)
if s.role == "trainer":
    # the unquantized checkpoint tensors, Hugging Face names: no scale, no fused module
    check(sorted(expected) == sorted(hf_names()), "trainer's expected names %s"
          % sorted(expected)[:4])
    check(all(dt == "BF16" for dt, _ in expected.values()), "trainer's dtypes")
    tw = {n: (torch.randn(shape, generator=gen) * 0.05).to(torch.bfloat16)
          for n, (dt, shape) in sorted(expected.items())}
    try:  # the quantized tensor itself, where the unquantized weight is expected
        n = "model.layers.0.self_attn.q_proj.weight"
        s.register({n: (torch.zeros(tw[n].shape, dtype=torch.uint8), "F8_E4M3")})
        check(False, "an F8_E4M3 trainer tensor was accepted")
    except refit.Error as e:
        check(n in str(e) and "F8_E4M3" in str(e), "trainer refusal: %s" % e)
    try:  # a floating tensor is never reinterpreted under another dtype's name
        s.register({n: (tw[n].to(torch.float16), "BF16")})
        check(False, "a float16 tensor was accepted as BF16")
    except refit.Error as e:
        check(n in str(e) and "torch.float16" in str(e), "reinterpret refusal: %s" % e)
    s.register(tw)
    ptrs = {n: t.data_ptr() for n, t in tw.items()}
else:
    ew = {}
    for n, (dt, shape) in expected.items():
        torch_dt = {"F8_E4M3": torch.uint8, "F32": torch.float32, "BF16": torch.bfloat16}[dt]
        ew[n] = (torch.full(shape, 0x5a, dtype=torch.uint8) if torch_dt == torch.uint8
                 else torch.full(shape, 3.0, dtype=torch_dt))
    fp8 = sorted(n for n, (dt, _) in expected.items() if dt == "F8_E4M3")
    check(len(fp8) == 4 * L, "engine's F8_E4M3 tensors: %s" % fp8)
    n = fp8[0]
    for bad, why in (((ew[n],), "U8"),  # bytes without the refit dtype: U8, not F8_E4M3
                     ((ew[n].to(torch.int32), "F8_E4M3"), "element")):
        try:
            s.register({n: bad[0] if len(bad) == 1 else bad})
            check(False, "a bad registration of %s was accepted" % n)
        except refit.Error as e:
            check(n in str(e) and why in str(e) and ("rank %d (rollout)" % rank) in str(e),
                  "engine refusal: %s" % e)
    s.register({n: ((t, "F8_E4M3") if expected[n][0] == "F8_E4M3" else t) for n, t in ew.items()})
    ptrs = {n: t.data_ptr() for n, t in ew.items()}
# the refusals left nothing registered and the accepted registrations after them forget
# them (include/refit/session.h rf_session_register): the plan goes on
plan = s.plan()
check(sum(plan.counts.values()) > 0, "plan counts %s" % plan.counts)

for version in (1, 2, 3):
    if s.role == "trainer" and version > 1:
        for t in tw.values():  # a training step, in place
            t.add_((torch.randn(t.shape, generator=gen) * 0.01).to(torch.bfloat16))
    r = s.update(version)
    check(r.committed, "update %d: %s" % (version, r.reason))
    if s.role == "trainer":
        comm.send({n: t.clone() for n, t in tw.items()}, dest=1, tag=version)
        check(all(t.data_ptr() == ptrs[n] for n, t in tw.items()), "trainer data_ptr moved")
    else:
        ref = reference(comm.recv(source=0, tag=version))
        check(sorted(ref) == sorted(ew), "reference names %s" % sorted(set(ref) ^ set(ew)))
        for n, want in ref.items():
            got = ew[n]
            same = torch.equal(as_bytes(got), as_bytes(want.contiguous()))
            if not same:
                bad = (as_bytes(got) != as_bytes(want.contiguous())).sum().item()
                check(False, "update %d: %s: %d bytes differ from the torch reference"
                      % (version, n, bad))
        check(all(t.data_ptr() == ptrs[n] for n, t in ew.items()), "engine data_ptr moved")
s.close()

nfail = comm.allreduce(len(failures))
if rank == 0:
    print("test_session_quant: %s" % ("OK" if nfail == 0 else "%d failure(s)" % nfail),
          flush=True)
sys.exit(0 if nfail == 0 else 1)
