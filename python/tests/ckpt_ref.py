"""The engine's expected bytes for a refit HDF5 checkpoint, read with h5py (independent of
refit's reader): the vLLM layout at rollout TP 1 (qkv_proj = q, k, v stacked; gate_up_proj =
gate, up; the vocabulary padded with zero rows). Shared by the checkpoint session tests."""
import h5py
import numpy as np


def reference(path):
    """The engine's expected bits per engine name (TP 1, vLLM layout) from HDF5 file path."""
    with h5py.File(path, "r") as f:
        t = {n: np.asarray(f["tensors"][n][()]) for n in f["tensors"]}
    return t


def expect(t, name, shape):
    pre = name.rsplit(".", 2)[0] + "."
    if name.endswith("qkv_proj.weight"):
        w = np.concatenate([t[pre + p + ".weight"] for p in ("q_proj", "k_proj", "v_proj")])
    elif name.endswith("gate_up_proj.weight"):
        w = np.concatenate([t[pre + p + ".weight"] for p in ("gate_proj", "up_proj")])
    else:
        w = t[name]
    if w.shape[0] < shape[0]:  # the padded vocabulary: zero rows after the checkpoint's
        w = np.concatenate([w, np.zeros((shape[0] - w.shape[0],) + w.shape[1:], w.dtype)])
    return w.view(np.uint16)
