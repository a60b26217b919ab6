#!/usr/bin/python3
"""h5py against refit's HDF5 container (tests/mpi/hdf5.cmake): two implementations agreeing.

  h5py_check.py sha PATH REF.json         tensors of PATH (an .h5 read with h5py, or a
                                          safetensors directory read by hand) against the
                                          sha256 / dtype / shape of a tensors.reference.json
  h5py_check.py write SRC_DIR OUT.h5      SRC_DIR's safetensors written by h5py in the
                                          documented layout (variable-length strings, int64
                                          version, native f16, bool as h5py's enum)
  h5py_check.py alltypes OUT.h5 REF.json  one small tensor of every dtype (and a scalar, a
                                          3-d and an empty one) written by h5py, with the
                                          reference of their bytes
Exits 1 naming the first tensor that differs.
"""
import hashlib
import json
import os
import struct
import sys

import h5py
import numpy as np

TORCH = {"BOOL": "torch.bool", "U8": "torch.uint8", "I8": "torch.int8", "I16": "torch.int16",
         "U16": "torch.uint16", "F16": "torch.float16", "BF16": "torch.bfloat16",
         "I32": "torch.int32", "U32": "torch.uint32", "F32": "torch.float32",
         "F64": "torch.float64", "I64": "torch.int64", "U64": "torch.uint64",
         "F8_E4M3": "torch.float8_e4m3fn", "F8_E5M2": "torch.float8_e5m2"}
# numpy types h5py writes for each dtype: native where HDF5 has one, else unsigned of the width
NP = {"BOOL": np.bool_, "U8": "<u1", "I8": "<i1", "I16": "<i2", "U16": "<u2", "F16": "<f2",
      "BF16": "<u2", "I32": "<i4", "U32": "<u4", "F32": "<f4", "F64": "<f8", "I64": "<i8",
      "U64": "<u8", "F8_E4M3": "<u1", "F8_E5M2": "<u1"}


def read_st_dir(d):
    """name -> (dtype, shape, bytes) of every top-level *.safetensors of d."""
    out = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(d, fn), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
            base = 8 + n
            for k, v in hdr.items():
                if k == "__metadata__":
                    continue
                b, e = v["data_offsets"]
                f.seek(base + b)
                out[k] = (v["dtype"], v["shape"], f.read(e - b))
    return out


def read_h5(path):
    out = {}
    with h5py.File(path, "r") as f:
        fmt = f.attrs["format"]
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        assert fmt == "refit-checkpoint", fmt
        assert int(f.attrs["format_version"]) == 1
        for k, ds in f["tensors"].items():
            dt = ds.attrs["dtype"]
            dt = dt.decode() if isinstance(dt, bytes) else dt
            ok = [np.dtype(NP[dt])] + ([np.dtype("<u1")] if dt == "BOOL" else [])
            if ds.dtype not in ok:  # the documented HDF5 type of each dtype (BOOL: u8 or enum)
                raise SystemExit("%s: %s stored as %s, the container says %s"
                                 % (k, dt, ds.dtype, np.dtype(NP[dt])))
            a = ds[()]
            out[k] = (dt, list(ds.shape), np.ascontiguousarray(a).tobytes())
    return out


def cmd_sha(path, ref_path):
    ref = json.load(open(ref_path))
    got = read_h5(path) if os.path.isfile(path) else read_st_dir(path)
    if sorted(got) != sorted(ref):
        print("tensor names differ: only in file %s, only in reference %s"
              % (sorted(set(got) - set(ref))[:5], sorted(set(ref) - set(got))[:5]))
        return 1
    for k in sorted(ref):
        dt, shape, b = got[k]
        r = ref[k]
        if TORCH[dt] != r["dtype"] or list(shape) != list(r["shape"]):
            print("%s: %s %s, reference %s %s" % (k, dt, shape, r["dtype"], r["shape"]))
            return 1
        if hashlib.sha256(b).hexdigest() != r["sha256"]:
            print("%s: sha256 differs" % k)
            return 1
    print("h5py_check: %s: %d tensors, sha256 equal to %s" % (path, len(ref), ref_path))
    return 0


def write_h5(out, tensors, config=None):
    with h5py.File(out, "w") as f:
        f.attrs["format"] = "refit-checkpoint"      # variable-length UTF-8
        f.attrs["format_version"] = np.int64(1)
        if config is not None:
            f.attrs["config"] = config
        g = f.create_group("tensors")
        for k, (dt, shape, b) in tensors.items():
            a = np.frombuffer(b, dtype=NP[dt]).reshape(shape)
            ds = g.create_dataset(k, data=a)
            ds.attrs["dtype"] = dt


def cmd_write(src, out):
    cfg = os.path.join(src, "config.json")
    write_h5(out, read_st_dir(src), open(cfg).read() if os.path.exists(cfg) else None)
    print("h5py_check: wrote %s" % out)
    return 0


def cmd_alltypes(out, ref_out):
    rng = np.random.default_rng(16)
    tensors = {}
    for i, dt in enumerate(sorted(NP)):
        shape = [3, 5]
        n = 15 * np.dtype(NP[dt]).itemsize
        raw = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        if dt == "BOOL":
            raw = bytes(x & 1 for x in raw)
        tensors["t.%02d.%s" % (i, dt)] = (dt, shape, raw)
    tensors["x.scalar.F32"] = ("F32", [], struct.pack("<f", 1.5))
    tensors["x.cube.BF16"] = ("BF16", [2, 3, 4], rng.integers(0, 256, 48, dtype=np.uint8).tobytes())
    tensors["x.empty.F16"] = ("F16", [0, 4], b"")
    write_h5(out, tensors)
    ref = {k: {"dtype": TORCH[dt], "shape": shape, "sha256": hashlib.sha256(b).hexdigest()}
           for k, (dt, shape, b) in tensors.items()}
    json.dump(ref, open(ref_out, "w"), indent=1, sort_keys=True)
    print("h5py_check: wrote %s (%d tensors) and %s" % (out, len(tensors), ref_out))
    return 0


if __name__ == "__main__":
    cmds = {"sha": cmd_sha, "write": cmd_write, "alltypes": cmd_alltypes}
    if len(sys.argv) != 4 or sys.argv[1] not in cmds:
        print(__doc__)
        sys.exit(2)
    sys.exit(cmds[sys.argv[1]](sys.argv[2], sys.argv[3]))
