"""Megatron trainer shards for the Python session tests (trainer.layout megatron).

The arithmetic of DESIGN.md section 6 and include/refit/trainer.h, from the checkpoint name
and shape of a tensor (Hugging Face names, checkpoint layout):

  column-type  q/k/v/gate/up weights and biases (Megatron ColumnParallelLinear; q, k and v
               each split by heads, gate and up each split apart): rows [t N/TP, (t+1) N/TP)
  row-type     o_proj, down_proj weights (RowParallelLinear): columns [t K/TP, (t+1) K/TP)
  vocab        embed_tokens, lm_head (VocabParallelEmbedding, no padding on the trainer):
               rows [min(t ceil(V/TP), V), min((t+1) ceil(V/TP), V))
  replicated   norms, the MoE router (mlp.gate), row-type biases: all of it on every rank
  experts      mlp.experts.<e>.*: EP rank q holds experts [q E/EP, (q+1) E/EP), split inside
               by expert TP rank u as above (gate/up rows, down columns)

Trainer world rank w (docs/topology.md, order tp-cp-ep-dp-pp, cp = pp = 1 here):
t = w mod TP, u = w mod ETP, q = (w / ETP) mod EP.

Sharded holds a replicated model as Megatron stores it: one leaf tensor (a torch Parameter)
per distinct shard of every tensor, so that trainer rank w's shards are real parameters
(contiguous, updated in place by the optimizer, registered with refit once), and the full
tensors (for the forward and the reference) are torch.cat of the leaves, autograd included.
Every trainer rank holds every leaf (the same seed, the same steps): the training maths is
local, what refit sees is rank w's leaves only.
"""
import torch

_ROWS = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
         "up_proj.weight", "q_proj.bias", "k_proj.bias", "v_proj.bias", "gate_proj.bias",
         "up_proj.bias")
_COLS = ("o_proj.weight", "down_proj.weight")
_VOCAB = ("model.embed_tokens.weight", "lm_head.weight")


def split_of(name):
    """'rows', 'cols', 'vocab' or 'replicated' (DESIGN.md section 6)."""
    if name in _VOCAB:
        return "vocab"
    if name.endswith(_ROWS):
        return "rows"
    if name.endswith(_COLS):
        return "cols"
    return "replicated"


def expert_of(name):
    """The expert index of a checkpoint expert tensor (mlp.experts.<e>.), else None."""
    key = ".mlp.experts."
    at = name.find(key)
    if at < 0:
        return None
    head = name[at + len(key):].split(".", 1)[0]
    return int(head) if head.isdigit() else None


class Grid:
    """The trainer grid: T ranks, tp, ep, etp (default tp), E experts (0: dense)."""

    def __init__(self, T, tp, ep=1, etp=None, experts=0):
        self.T, self.tp, self.ep = T, tp, ep
        self.etp = tp if etp is None else etp
        self.experts = experts
        if T % tp or T % (self.etp * ep) or (experts and experts % ep):
            raise ValueError("megatron: T %d, tp %d, etp %d, ep %d, experts %d do not fit"
                             % (T, tp, self.etp, ep, experts))

    def coords(self, w):
        """(t, u, q) of trainer world rank w."""
        return w % self.tp, w % self.etp, (w // self.etp) % self.ep


def _split(kind, rows, cols, k, n):
    if kind == "rows":
        return k * (rows // n), (k + 1) * (rows // n), 0, cols
    if kind == "cols":
        return 0, rows, k * (cols // n), (k + 1) * (cols // n)
    if kind == "vocab":
        per = -(-rows // n)
        return min(k * per, rows), min((k + 1) * per, rows), 0, cols
    return 0, rows, 0, cols


def region(name, shape, grid, w):
    """Trainer rank w's rectangle (r0, r1, c0, c1) of a checkpoint tensor (a 1-D tensor has
    one column), or None when it holds none of it (another EP rank's expert, an empty vocab
    slice)."""
    rows, cols = shape[0], (shape[1] if len(shape) > 1 else 1)
    t, u, q = grid.coords(w)
    e = expert_of(name)
    if e is not None:
        if e // (grid.experts // grid.ep) != q:
            return None
        r = _split(split_of(name), rows, cols, u, grid.etp)
    else:
        r = _split(split_of(name), rows, cols, t, grid.tp)
    return r if r[0] < r[1] and r[2] < r[3] else None


def _cut(x, r):
    return x[r[0]:r[1]] if x.dim() == 1 else x[r[0]:r[1], r[2]:r[3]]


class Sharded:
    """A model's tensors ({name: full tensor}) as Megatron shard leaves over a Grid."""

    def __init__(self, full, grid, dtype):
        self.grid = grid
        self.shapes = {n: tuple(x.shape) for n, x in full.items()}
        self.leaves = {}  # name -> {region: Parameter}
        for n, x in full.items():
            regs = {region(n, x.shape, grid, w) for w in range(grid.T)} - {None}
            self.leaves[n] = {r: torch.nn.Parameter(_cut(x.detach(), r).to(dtype).clone())
                              for r in sorted(regs)}

    def parameters(self):
        return [p for regs in self.leaves.values() for p in regs.values()]

    def mine(self, w):
        """{name: leaf} that trainer rank w registers."""
        out = {}
        for n, regs in self.leaves.items():
            r = region(n, self.shapes[n], self.grid, w)
            if r is not None:
                out[n] = regs[r]
        return out

    def full(self):
        """{name: full tensor}: the leaves put together (torch.cat, so gradients reach them)."""
        out = {}
        for n, regs in self.leaves.items():
            bands = {}
            for r, p in regs.items():
                bands.setdefault((r[0], r[1]), []).append((r[2], p))
            rows = [torch.cat([p for _, p in sorted(b, key=lambda a: a[0])], 1)
                    if len(b) > 1 else b[0][1] for _, b in sorted(bands.items())]
            out[n] = torch.cat(rows, 0) if len(rows) > 1 else rows[0]
        return out
