"""refit quickstart: a trainer (world rank 0) and an engine (world rank 1) in one SPMD script.

The trainer holds a tiny Llama (plain torch, Hugging Face parameter names, bf16) and registers
its parameters; the engine holds the same module layout, initialised differently
(rollout.layout hf: it registers its named_parameters() as they are). Each step the trainer
runs an AdamW step in place, update() writes the trainer's bytes into the engine's tensors,
and the engine checks them against a copy the trainer sends over mpi4py. From the checkout
root, after building (cmake -S . -B build && cmake --build build):

    PYTHONPATH=python tools/mpirun.sh -np 2 /usr/bin/python3 python/examples/quickstart.py

(tools/mpirun.sh adds --oversubscribe --bind-to none, and --allow-run-as-root as root, which
Open MPI needs there.) librefit.so is found through $REFIT_LIB, else <checkout>/build.
"""
import json
import os
import sys

import torch
from mpi4py import MPI

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))  # the package, without PYTHONPATH too
import refit  # noqa: E402

TOPOLOGY = os.path.join(ROOT, "jobs/topologies/llama-tiny-hf-tp1-to-tp1.yaml")
cfg = json.load(open(os.path.join(ROOT, "jobs/models/llama-tiny.config.json")))
H, L, V, I = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"], cfg["intermediate_size"]
NH, NKV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]


def lin(i, o):
    return torch.nn.Linear(i, o, bias=False)


def norm(n):
    m = torch.nn.Module()
    m.weight = torch.nn.Parameter(torch.ones(n) + 0.01 * torch.randn(n))
    return m


def llama():
    """A LlamaForCausalLM's parameters under their Hugging Face names (no forward needed)."""
    def layer():
        m = torch.nn.Module()
        m.self_attn = torch.nn.Module()
        a = m.self_attn
        a.q_proj, a.k_proj, a.v_proj, a.o_proj = lin(H, NH * D), lin(H, NKV * D), lin(H, NKV * D), lin(NH * D, H)
        m.mlp = torch.nn.Module()
        m.mlp.gate_proj, m.mlp.up_proj, m.mlp.down_proj = lin(H, I), lin(H, I), lin(I, H)
        m.input_layernorm, m.post_attention_layernorm = norm(H), norm(H)
        return m
    top = torch.nn.Module()
    top.model = torch.nn.Module()
    top.model.embed_tokens = torch.nn.Embedding(V, H)
    top.model.layers = torch.nn.ModuleList([layer() for _ in range(L)])
    top.model.norm = norm(H)
    top.lm_head = lin(H, V)
    return top.to(torch.bfloat16)


comm = MPI.COMM_WORLD
s = refit.Session(comm, TOPOLOGY)                      # collective
torch.manual_seed(0 if s.role == "trainer" else 1)     # the engine starts from other weights
model = llama()
params = dict(model.named_parameters())                # refit keeps their pointers
s.register(params)                                     # local; raises refit.Error naming a bad tensor
plan = s.plan()                                        # collective
if s.role == "rollout":
    print("plan: %d tensors, %r, hash %016x" % (plan.tensors, plan.counts, plan.hash), flush=True)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False) if s.role == "trainer" else None
ok = True
for step in range(1, 4):
    if s.role == "trainer":                            # a fake training step, in place
        sum(p.float().pow(2).mean() for p in params.values()).backward()
        opt.step()
        opt.zero_grad()
    r = s.update()                                     # collective: r.committed alike everywhere
    want = comm.bcast({n: p.detach().clone() for n, p in params.items()} if s.role == "trainer"
                      else None, root=0)               # the trainer's bytes, for the check only
    if s.role == "rollout":
        same = [n for n, p in params.items() if torch.equal(p.detach().view(torch.int16), want[n].view(torch.int16))]
        ok = ok and r.committed and len(same) == len(params)
        print("update %d: %s (version %d, %d bytes): %d of %d engine tensors equal the "
              "trainer's%s" % (step, "COMMITTED" if r.committed else "FAILED: " + r.reason,
                               r.version, r.stats["bytes_received"], len(same), len(params),
                               "" if len(same) == len(params) else " MISMATCH"), flush=True)
s.close()                                              # collective
ok = comm.allreduce(ok, op=MPI.LAND)
if comm.Get_rank() == 1:
    print("quickstart: %s" % ("ok" if ok else "FAILED"), flush=True)
sys.exit(0 if ok else 1)
