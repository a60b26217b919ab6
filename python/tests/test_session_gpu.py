"""GPU session test (label gpu; the GPU host: PyTorch with CUDA, transformers 5, mpi4py): a
transformers.AutoModelForCausalLM.from_config model on the host is the trainer (world rank 0,
float32, AdamW on random tokens between updates; it registers its parameters once under the
checkpoint's names, float32 masters of the bfloat16 model; Qwen3-MoE experts as views of
transformers 5's fused gate_up_proj / down_proj, gate rows first), and a differently
initialised bfloat16 model of the same class on cuda:0 is the engine (world rank 1,
rollout.layout hf with rollout.gpus [0]: it registers its own CUDA parameters, refit writes
into them through the cuda accelerator, chunks over MPI through host memory).

After every update the engine's parameters equal the trainer's rounded to bfloat16 bit for
bit, its logits equal those of the trainer's weights on the same GPU exactly
(torch.use_deterministic_algorithms(True), eager attention), and no registered data_ptr
changed. Refused at register, naming the tensor: a CPU tensor on the engine (its storage is
the GPU's), a CUDA tensor on the trainer (host tensors on the mpi transport); plan() then
fails on both ranks carrying rank 0's text, and a clean registration plans.

Mode ipc (a colocated ipc topology: trainer.gpus == rollout.gpus == [0]): the trainer is the
bfloat16 model on cuda:0 (AdamW in bfloat16) and registers its CUDA parameters, which PyTorch's
caching allocator carved out of a few segments; refit shares each segment once through CUDA
IPC and the engine on the same GPU reads every piece in place; the same checks after every
update (a CPU tensor refused on both ranks). Mode ipc-expandable: the same run with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate memory, which legacy CUDA IPC
cannot export): the trainer's register() raises naming the tensor and the setting, plan() fails
on both ranks carrying that text.

Mode trainer-gpu (trainer.gpus [0] on the mpi transport, the engine on the host): the trainer
is the float32 model on cuda:0 (AdamW in float32) and registers its CUDA parameters, float32
masters of the bfloat16 model, which refit copies device to host part by part and rounds to
bfloat16 in its pack; the engine is the bfloat16 model on the CPU; the same checks after every
update, logits compared on the CPU (a CPU tensor refused on the trainer, a CUDA one on the
engine).

    mpiexec -np 2 python3 python/tests/test_session_gpu.py TOPOLOGY CONFIG_DIR [ipc|ipc-expandable|trainer-gpu]
"""
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
MODE = sys.argv[3] if len(sys.argv) > 3 else "mpi"
if MODE == "ipc-expandable":  # read by PyTorch's caching allocator when CUDA initializes
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
try:
    # before torch: pyarrow (which transformers' model code imports) loaded after torch crashes
    # in libstdc++'s locale teardown on the GPU host ("free(): invalid pointer")
    import pyarrow  # noqa: F401
except ImportError:
    pass

from mpi4py import MPI  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import refit  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
topo_path, cfg_dir = sys.argv[1], sys.argv[2]
UPDATES = 3
failures = []
# warn_only: an op without a deterministic kernel warns; the exact comparisons below catch
# any result that is not reproducible
torch.use_deterministic_algorithms(True, warn_only=True)


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d: FAIL: %s" % (rank, what), flush=True)


def bits(x):
    return x.detach().contiguous().view(torch.int16)


def build(seed, dtype, device):
    cfg = transformers.AutoConfig.from_pretrained(cfg_dir)
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    return m.to(dtype=dtype, device=device).eval()


def expert_view(params, name):
    """A checkpoint name of one expert's linear as a view of the fused 3-D parameter."""
    pre, rest = name.split(".mlp.experts.")
    e, proj = rest.split(".")[0:2]
    e = int(e)
    if proj == "down_proj":
        return params[pre + ".mlp.experts.down_proj"][e]
    gu = params[pre + ".mlp.experts.gate_up_proj"]
    half = gu.shape[1] // 2
    return gu[e, :half] if proj == "gate_proj" else gu[e, half:]


def tensors_for(s, params):
    out = {}
    for name, _, shape in s.expected():
        t = params.get(name)
        if t is None and ".mlp.experts." in name:
            t = expert_view(params, name)
        check(t is not None, "no parameter for %s" % name)
        if t is not None:
            check(tuple(t.shape) == tuple(shape), "%s: shape %s, expected %s" %
                  (name, tuple(t.shape), tuple(shape)))
            out[name] = t.detach()
    return out


def expandable_refused(s, trainer, reg, first):
    """ipc-expandable: the trainer's VMM memory is refused naming the tensor and the setting;
    plan() fails on both ranks carrying that text."""
    setting = "expandable_segments:True"
    if trainer:
        try:
            s.register(reg)
            check(False, "expandable_segments memory registered for colocated ipc")
        except refit.Error as e:
            check(first in str(e) and setting in str(e),
                  "refusal does not name %s and %s: %s" % (first, setting, e))
    else:
        s.register(reg)
    try:
        s.plan()
        check(False, "plan after the trainer's refused registration succeeded")
    except refit.Error as e:
        check(setting in str(e), "plan's error does not carry the trainer's text: %s" % e)
    s.close()


def main():
    trainer = rank == 0
    ipc = MODE.startswith("ipc")
    tgpu = MODE == "trainer-gpu"
    eng_dev = "cpu" if tgpu else "cuda:0"  # where the engine (and the reference) run
    if ipc:  # colocated on one GPU: the trainer's own CUDA parameters are the source
        model = build(1 if trainer else 2, torch.bfloat16, "cuda:0")
    elif tgpu:  # float32 masters on cuda:0, read by refit over mpi; the engine on the host
        model = build(1, torch.float32, "cuda:0") if trainer else build(2, torch.bfloat16, "cpu")
    else:
        model = build(1, torch.float32, "cpu") if trainer else build(2, torch.bfloat16, "cuda:0")
    params = dict(model.named_parameters(remove_duplicate=False))
    s = refit.Session(comm, topo_path)
    check(s.role == ("trainer" if trainer else "rollout"), "role %s" % s.role)
    reg = tensors_for(s, params)
    first = next(iter(reg))
    if MODE == "ipc-expandable":
        expandable_refused(s, trainer, reg, first)
        return finish()
    # refused, naming the tensor: the wrong kind of memory for this rank
    bad = reg[first].cpu() if (not trainer and not tgpu) or (trainer and (ipc or tgpu)) \
        else reg[first].to("cuda:0")
    try:
        s.register({first: bad})
        check(False, "%s on %s registered" % (first, bad.device))
    except refit.Error as e:
        check(first in str(e), "refusal does not name %s: %s" % (first, e))
    # the refused call registered nothing; the accepted ones after it forget it (include/
    # refit/session.h rf_session_register): the plan goes on
    s.register(reg)
    plan = s.plan()
    check(sum(plan.counts.values()) > 0, "plan counts %s" % plan.counts)
    ptrs = {n: t.data_ptr() for n, t in reg.items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2) if trainer else None
    gen = torch.Generator().manual_seed(7)
    ref = build(3, torch.bfloat16, eng_dev) if trainer else None
    for v in range(1, UPDATES + 1):
        if trainer and v > 1:
            tok = torch.randint(0, model.config.vocab_size, (2, 12), generator=gen)
            tok = tok.to(next(model.parameters()).device)  # cuda:0: ipc, trainer-gpu
            loss = model(input_ids=tok, labels=tok).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        if (ipc or tgpu) and trainer:  # its device writes complete before refit reads them
            torch.cuda.synchronize()
        r = s.update(v)
        check(r.committed, "update %d: %s" % (v, r.reason))
        check(r.version == v, "update %d: version %d" % (v, r.version))
        tokens = comm.bcast(torch.randint(0, model.config.vocab_size, (2, 16), generator=gen)
                            if trainer else None, root=0)
        if trainer:
            with torch.no_grad():
                sd = {n: p.detach().to(torch.bfloat16).cpu() for n, p in params.items()}
                ref.load_state_dict(sd, strict=False)
                logits = ref(input_ids=tokens.to(eng_dev)).logits.cpu()
            comm.send((sd, logits), dest=1, tag=v)
        else:
            sd, logits = comm.recv(source=0, tag=v)
            for n, p in params.items():
                check(n in sd and torch.equal(bits(p.cpu()), bits(sd[n])),
                      "update %d: %s differs from the trainer's" % (v, n))
            with torch.no_grad():
                mine = model(input_ids=tokens.to(eng_dev)).logits.cpu()
            check(torch.equal(mine, logits), "update %d: logits differ (max %g)" %
                  (v, (mine.float() - logits.float()).abs().max().item()))
        for n, t in reg.items():
            check(t.data_ptr() == ptrs[n], "%s moved" % n)
    s.close()
    return finish()


def finish():
    nfail = comm.allreduce(len(failures), op=MPI.SUM)
    if rank == 0:
        print("test_session_gpu %s %s: %s (%d updates)" % (os.path.basename(topo_path), MODE,
                                                           "ok" if nfail == 0 else "FAILED",
                                                           UPDATES), flush=True)
    return 0 if nfail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
