"""refit: move freshly trained weights from trainer ranks into an engine's live tensors.

A ctypes binding of librefit's session API (include/refit/session.h; docs/api.md):

    import refit
    s = refit.Session(comm, "topology.yaml")   # mpi4py communicator; collective
    s.role                                      # "trainer" or "rollout"
    s.register({name: tensor, ...})             # torch tensors, kept by pointer; local
    s.register_checkpoint(path)                 # or, trainer ranks: shards read from a checkpoint
    plan = s.plan()                             # plan.counts, plan.hash, plan.narrowed
    r = s.update(version=None)                  # r.committed, r.reason, r.version, r.stats
    s.begin(); ...; r = s.finish()              # the same update in two halves (engine paused)
    s.close()                                   # collective (local after an uncaught
                                                # exception: the other ranks fail naming it)

librefit.so is found through $REFIT_LIB (a file), else beside this package, else the build
tree (<repo>/build). Its ABI version is checked at import. Errors raise refit.Error carrying
the library's message; register raises on the calling rank only, plan on every rank or none;
update returns a FAILED result (committed False, reason) for an update that ran to a verdict
and raises only without one: before plan() (RF_ERR_STATE) and on a lost session (a failed
join: RF_ERR_TIMEOUT, RF_ERR_PEER; every later call then raises RF_ERR_STATE). A version
given to update() need not increase (committed as given; None: the last + 1).
A runnable trainer + engine pair: python/examples/quickstart.py.

A rank that raises between calls would leave the others waiting in their next collective
call, so close() at exit after an uncaught exception (and Session.__exit__ with one) is local
(rf_session_destroy_local), and the others' next call raises refit.Error within milliseconds,
"rank R left the session (...: the exception)"; no call waits longer than the topology's
transfer.join_timeout_s for the other ranks to come. Launching with `python -m mpi4py script.py`
makes an uncaught exception abort the whole MPI job instead (mpi4py's MPI_Abort).
"""
import atexit
import ctypes
import gc
import glob
import operator
import os
import queue
import sys
import threading
import weakref

ABI_VERSION = 2  # RF_SESSION_ABI_VERSION this binding speaks
MAX_DIMS = 8
_MSG_MAX = 512
_MODES = ("DIRECT", "RUNTIME_VIEW", "LAYERWISE")


class Error(Exception):
    """A librefit error: .status (its name, "RF_ERR_MISMATCH") and the message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def _find_library():
    env = os.environ.get("REFIT_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.join(here, "..", "..", "build")):
        for name in ("librefit.so.%d" % ABI_VERSION, "librefit.so"):
            p = os.path.join(d, name)
            if os.path.exists(p):
                return p
    raise ImportError("refit: librefit.so not found: set REFIT_LIB, put it beside %s or build "
                      "the tree (cmake -S . -B build && cmake --build build)" % here)


_path = _find_library()
try:
    _lib = ctypes.CDLL(_path, mode=ctypes.RTLD_GLOBAL)
except OSError as e:
    raise ImportError("refit: cannot load %s%s: %s" % (
        _path, " (from $REFIT_LIB)" if os.environ.get("REFIT_LIB") else "", e)) from None
_lib.rf_session_abi_version.restype = ctypes.c_int
if _lib.rf_session_abi_version() != ABI_VERSION:
    raise ImportError("refit: %s has ABI version %d, this binding speaks %d"
                      % (_lib._name, _lib.rf_session_abi_version(), ABI_VERSION))


class _Desc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("strides", ctypes.c_int64 * MAX_DIMS),
                ("data", ctypes.c_void_p), ("device", ctypes.c_int)]


class _Options(ctypes.Structure):
    _fields_ = [("layerwise", ctypes.c_int), ("integrity", ctypes.c_int)]


class _PlanInfo(ctypes.Structure):
    _fields_ = [("layers", ctypes.c_uint64 * 3), ("hash", ctypes.c_uint64),
                ("manifest_digest", ctypes.c_uint64), ("tensors", ctypes.c_int),
                ("payload_bytes", ctypes.c_uint64), ("narrowed", ctypes.c_int)]


class _Result(ctypes.Structure):
    _fields_ = [("committed", ctypes.c_int), ("version", ctypes.c_uint64),
                ("status", ctypes.c_int), ("failed_rank", ctypes.c_int),
                ("reason", ctypes.c_char * _MSG_MAX), ("seconds", ctypes.c_double),
                ("bytes_sent", ctypes.c_uint64), ("bytes_received", ctypes.c_uint64),
                ("chunks_sent", ctypes.c_uint64), ("chunks_received", ctypes.c_uint64),
                ("rebuilds", ctypes.c_uint64)]


def _comm_type():
    from mpi4py import MPI
    # Open MPI: MPI_Comm is a pointer; MPICH: an int
    return ctypes.c_int if MPI._sizeof(MPI.Comm) == ctypes.sizeof(ctypes.c_int) \
        else ctypes.c_void_p


_P = ctypes.c_void_p
_lib.rf_session_create.argtypes = [_comm_type(), ctypes.c_char_p, ctypes.POINTER(_Options),
                                   ctypes.POINTER(_P)]
_lib.rf_session_create.restype = ctypes.c_int
_lib.rf_session_destroy.argtypes = [_P]
_lib.rf_session_destroy.restype = None
_lib.rf_session_destroy_local.argtypes = [_P, ctypes.c_char_p]
_lib.rf_session_destroy_local.restype = None
_lib.rf_session_role.argtypes = [_P]
_lib.rf_session_role.restype = ctypes.c_int
_lib.rf_session_version.argtypes = [_P]
_lib.rf_session_version.restype = ctypes.c_uint64
_lib.rf_session_expected_count.argtypes = [_P]
_lib.rf_session_expected_count.restype = ctypes.c_int
_lib.rf_session_expected.argtypes = [_P, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                     ctypes.POINTER(ctypes.c_int), ctypes.c_int64 * MAX_DIMS]
_lib.rf_session_expected.restype = ctypes.c_char_p
_lib.rf_session_register.argtypes = [_P, ctypes.POINTER(_Desc), ctypes.c_int]
_lib.rf_session_register.restype = ctypes.c_int
_lib.rf_session_register_checkpoint.argtypes = [_P, ctypes.c_char_p]
_lib.rf_session_register_checkpoint.restype = ctypes.c_int
_lib.rf_session_plan.argtypes = [_P, ctypes.POINTER(_PlanInfo)]
_lib.rf_session_plan.restype = ctypes.c_int
_lib.rf_session_update.argtypes = [_P, ctypes.c_uint64, ctypes.POINTER(_Result)]
_lib.rf_session_update.restype = ctypes.c_int
_lib.rf_session_begin.argtypes = [_P, ctypes.c_uint64]
_lib.rf_session_begin.restype = ctypes.c_int
_lib.rf_session_finish.argtypes = [_P, ctypes.POINTER(_Result)]
_lib.rf_session_finish.restype = ctypes.c_int
_lib.rf_session_abort.argtypes = [_P, ctypes.c_char_p]
_lib.rf_session_abort.restype = ctypes.c_int
for _fn in ("rf_session_check_arm", "rf_session_check_post"):
    if not hasattr(_lib, _fn):
        raise ImportError("refit: %s has no %s (a librefit older than this binding)"
                          % (_lib._name, _fn))
_lib.rf_session_check_arm.argtypes = [_P, ctypes.c_double, ctypes.POINTER(ctypes.c_uint64)]
_lib.rf_session_check_arm.restype = ctypes.c_int
_lib.rf_session_check_post.argtypes = [_P, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
_lib.rf_session_check_post.restype = ctypes.c_int
_lib.rf_session_last_error.argtypes = [_P]
_lib.rf_session_last_error.restype = ctypes.c_char_p
_lib.rf_session_status_name.argtypes = [ctypes.c_int]
_lib.rf_session_status_name.restype = ctypes.c_char_p


def status_name(status):
    return _lib.rf_session_status_name(status).decode()


_RF_ERR_MOVED, _RF_ERR_INTERNAL = -13, -21  # refit/status.h
assert status_name(_RF_ERR_MOVED) == "RF_ERR_MOVED" and \
    status_name(_RF_ERR_INTERNAL) == "RF_ERR_INTERNAL"
# the bound on update()'s wait for the moved check (rf_session_check_arm): the check of 9,435
# tensors takes ~7 ms, of a million about a second; past it the update fails on every rank
_CHECK_TIMEOUT_S = 120.0


class Plan:
    """What rf_session_plan agreed, the same on every rank."""

    def __init__(self, info):
        self.counts = {m: int(info.layers[i]) for i, m in enumerate(_MODES)}
        self.hash = int(info.hash)
        self.manifest_digest = int(info.manifest_digest)
        self.tensors = int(info.tensors)
        self.payload_bytes = int(info.payload_bytes)
        # tensors a trainer registered as float32 masters, rounded to nearest even when packed
        self.narrowed = int(info.narrowed)

    def __repr__(self):
        return "Plan(counts=%r, hash=%016x, narrowed=%d)" % (self.counts, self.hash,
                                                             self.narrowed)


class Result:
    """One update's verdict (the same committed / reason / version on every rank)."""

    def __init__(self, r, retries=0, moved=(), seconds=None):
        self.committed = bool(r.committed)
        self.version = int(r.version)
        self.status = status_name(r.status)
        self.failed_rank = int(r.failed_rank)
        self.reason = r.reason.decode(errors="replace")
        # seconds: the library's time over every attempt; retries: 1 when update() ran the
        # update again because a registered tensor had moved (moved: this rank's names)
        self.stats = {"seconds": r.seconds if seconds is None else seconds,
                      "retries": retries, "moved": list(moved),
                      "bytes_sent": int(r.bytes_sent),
                      "bytes_received": int(r.bytes_received),
                      "chunks_sent": int(r.chunks_sent),
                      "chunks_received": int(r.chunks_received),
                      "rebuilds": int(r.rebuilds)}

    def __repr__(self):
        return "Result(committed=%r, version=%d, reason=%r)" % (self.committed, self.version,
                                                                self.reason)


# refit's dtype names (refit/dtype.h) a (tensor, dtype) registration may give, by element size
_DTYPE_BYTES = {"F8_E4M3": 1, "F8_E5M2": 1, "U8": 1, "I8": 1, "BOOL": 1, "BF16": 2, "F16": 2,
                "I16": 2, "F32": 4, "I32": 4, "F64": 8, "I64": 8}


# refit's names of torch's floating dtypes (by their str(): no torch import here)
_FLOAT_NAMES = {"torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32",
                "torch.float64": "F64"}


def _storage(t):
    """The storage object holding t's bytes (torch >= 2.0: untyped_storage; 1.13: storage)."""
    f = getattr(t, "untyped_storage", None)
    return f() if f is not None else t.storage()


def _sig(t):
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype), str(t.device))


_SHAPE, _DTYPE = operator.attrgetter("shape"), operator.attrgetter("dtype")


def _meta(objs):
    """The per-update check's view of the registered tensors, in one pass per attribute of C
    calls (torch.Tensor's own accessors; torch is loaded, since these are its tensors):
    data_ptr, strides, shape and dtype. On the H200 host (torch 2.11) _sig per tensor cost
    20 ms an update for the 9,435 tensors of a 24-layer Qwen3-30B-A3B trainer, as long as the
    transfer itself; this pass ~7 ms (bench/python-colocated.sh, docs/benchmarks.md). The device is left to data_ptr: under
    CUDA's unified virtual addressing host and device allocations never share an address, so a
    tensor that changed device has another data_ptr (an empty one has no bytes to read)."""
    if not objs:
        return ()
    T = sys.modules["torch"].Tensor
    # two new tuples per tensor (strides, shape) would start Python's cyclic collector dozens
    # of times, now and then a full collection of the whole heap (here, with a large heap: up
    # to 210 ms for this pass instead of 7; the H200 run had one 107 ms update among 25 ms
    # ones); these tuples are freed by reference counting anyway
    was = gc.isenabled()
    gc.disable()
    try:
        return (list(map(T.data_ptr, objs)), list(map(T.stride, objs)),
                list(map(_SHAPE, objs)), list(map(_DTYPE, objs)))
    finally:
        if was:
            gc.enable()


_live = weakref.WeakSet()


class _CheckJob:
    """One update's moved check, run on a session's checker thread: moved (the names whose
    signature changed since registration), then the verdict posted to the library."""

    def __init__(self, sess, ticket):
        self.sess, self.ticket = sess, ticket
        self.moved = []
        self.done = threading.Event()

    def run(self):
        st, why = 0, None
        try:
            self.moved = self.sess._moved_now()
            if self.moved:
                st = _RF_ERR_MOVED
                why = ("%s moved since it was registered (%d tensor%s of this rank: a new "
                       "data_ptr, shape, stride, dtype or device): the update fails on every "
                       "rank and update() registers %s again and runs it again"
                       % (self.moved[0], len(self.moved), "" if len(self.moved) == 1 else "s",
                          "it" if len(self.moved) == 1 else "them"))
        except BaseException as e:  # a verdict always comes: never a hang to the timeout
            st, why = _RF_ERR_INTERNAL, "the binding's moved check raised %s: %s" % (
                type(e).__name__, e)
        finally:
            _lib.rf_session_check_post(self.sess._s, self.ticket, st,
                                       why.encode(errors="replace") if why else None)
            self.done.set()


class _Checker(threading.Thread):
    """A session's persistent helper thread: the moved check of each update() while the C
    update runs on the calling thread (ctypes releases the GIL). It makes no MPI call: MPI
    stays on the thread that calls the session's collectives, so the MPI thread level the
    session already requires (include/refit/session.h: FUNNELED from the main thread) is all
    it needs."""

    def __init__(self):
        super().__init__(name="refit-check", daemon=True)
        self.jobs = queue.SimpleQueue()

    def run(self):
        while True:
            job = self.jobs.get()
            if job is None:
                return
            job.run()


def _uncaught():
    """The exception that ends the program, when an uncaught one does (Python sets
    sys.last_value, and in 3.12 sys.last_exc, before the atexit handlers run; sys.exit does
    not), else None."""
    e = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return None if e is None or isinstance(e, SystemExit) else e


@atexit.register
def _close_all():
    # before mpi4py finalizes MPI (atexit runs in reverse order: refit was imported after
    # mpi4py), so that no session calls MPI after MPI_Finalize. After an uncaught exception
    # the other ranks are not coming to a collective destroy: leave locally, telling them
    e = _uncaught()
    for s in list(_live):
        s.close(_failure=None if e is None else "%s: %s" % (type(e).__name__, e))


class Session:
    """A refit session over an mpi4py communicator (collective: every rank creates one)."""

    def __init__(self, comm, topology=None, layerwise=False, integrity=None):
        from mpi4py import MPI
        self._MPI = MPI
        opts = _Options(1 if layerwise else 0,
                        0 if integrity is None else (1 if integrity else -1))
        ptr = _P()
        handle = MPI._handleof(comm)
        st = _lib.rf_session_create(handle, topology.encode() if topology else None,
                                    ctypes.byref(opts), ctypes.byref(ptr))
        if st != 0:
            raise Error(status_name(st), _lib.rf_session_last_error(None).decode())
        self._s = ptr
        self._rank = comm.Get_rank()
        self._tensors = {}  # name -> tensor: refit holds the pointers, we hold the tensors
        self._as = {}  # name -> the refit dtype given with its tensor, (t, "F8_E4M3")
        self._sigs = {}  # name -> _sig at registration
        self._fast = None  # _meta of self._tensors' values when they matched self._sigs
        # name -> the storage refit points into: held so that memory a registered tensor
        # moved away from stays allocated (an update reading or writing it before its check
        # fails touches memory only this binding holds) until the name is registered again
        self._held = {}
        self._checker = None  # _Checker, started at the first update()
        self._planned = False
        _live.add(self)

    def _check(self, st):
        if st != 0:
            raise Error(status_name(st), _lib.rf_session_last_error(self._s).decode())

    def _handle(self):
        if self._s is None:
            raise Error("RF_ERR_STATE", "refit: the session is closed")
        return self._s

    @property
    def role(self):
        return "rollout" if _lib.rf_session_role(self._handle()) == 1 else "trainer"

    @property
    def version(self):
        return int(_lib.rf_session_version(self._handle()))

    def expected(self):
        """[(name, dtype, shape)] of the tensors this rank must register."""
        s, out = self._handle(), []
        for i in range(_lib.rf_session_expected_count(s)):
            dt, nd, shape = ctypes.c_char_p(), ctypes.c_int(), (ctypes.c_int64 * MAX_DIMS)()
            name = _lib.rf_session_expected(s, i, ctypes.byref(dt), ctypes.byref(nd), shape)
            out.append((name.decode(), dt.value.decode(), tuple(shape[:nd.value])))
        return out

    def register(self, tensors):
        """Registers {name: tensor} on this rank (local); refit keeps each tensor's pointer.
        Trainer ranks: their shards under the topology's trainer.layout (fsdp: rank d's
        tensor.chunk(dp, 0)[d]; an empty one may be passed and is ignored), in the model's
        dtype or as float32 masters of bfloat16 / float16 tensors (rounded to nearest even
        when packed); of a quantized model, the unquantized weight of every quantized linear
        (refit quantizes it at each update; an F32 master is rounded first). A value may be
        (tensor, "REFIT_DTYPE"): the tensor's bytes under refit's dtype of the same element
        size, for dtypes torch lacks (torch 1.13 has no float8: an engine's F8_E4M3 weight
        registered as a torch.uint8 tensor, s.register({name: (t, "F8_E4M3")})). On colocated
        ipc (trainer.gpus == rollout.gpus) trainer ranks register CUDA tensors of their GPU
        (the model's dtype or float32 masters), which the engine on that GPU reads in place
        through CUDA IPC where it can (other pieces are staged by refit): keep
        them alive where they are until close(), finish their writes before update()
        (torch.cuda.synchronize()); expandable_segments and cudaMallocAsync memory is refused.
        On the mpi transport with trainer.gpus, trainer ranks register CUDA tensors of their
        GPU (the model's dtype or float32 masters), which refit copies to the host when it
        packs them: finish their writes before update() as well.
        All or nothing: every tensor is checked first (here and by librefit, in one
        rf_session_register call); a bad one raises refit.Error naming it and registers none
        of the dict, so the corrected dict can be registered whole. A value that is not a
        torch.Tensor (a numpy array: torch.from_numpy(a)) is refused the same way."""
        s = self._handle()
        items = []
        for name, v in tensors.items():
            t, dtype = v if isinstance(v, tuple) and len(v) == 2 else (v, None)
            torch = sys.modules.get("torch")  # loaded by whoever made a tensor
            if torch is None or not isinstance(t, torch.Tensor) or \
                    not (dtype is None or isinstance(dtype, str)):
                bad = t if dtype is None or isinstance(dtype, str) else v
                raise Error("RF_ERR_INVALID", "rank %d (%s): %s: a %s.%s, not a torch.Tensor: "
                            "register accepts torch tensors (contiguous; CPU, or CUDA where "
                            "the topology puts this rank on a GPU) or (tensor, \"REFIT_DTYPE\") "
                            "pairs (torch.from_numpy(a) wraps a numpy array's memory)"
                            % (self._rank, self.role, name, type(bad).__module__,
                               type(bad).__qualname__))
            if t.dim() > MAX_DIMS:
                raise Error("RF_ERR_INVALID", "rank %d (%s): %s: %d dims (at most %d)" %
                            (self._rank, self.role, name, t.dim(), MAX_DIMS))
            if dtype is not None and _DTYPE_BYTES.get(dtype) != t.element_size():
                raise Error("RF_ERR_MISMATCH", "rank %d (%s): %s: dtype %s for a %s tensor "
                            "(%d-byte elements; %s)" % (self._rank, self.role, name, dtype, t.dtype, t.element_size(),
                                               "unknown dtype" if dtype not in _DTYPE_BYTES
                                               else "%d-byte" % _DTYPE_BYTES[dtype]))
            if dtype is not None and t.is_floating_point() and _FLOAT_NAMES.get(str(t.dtype)) != dtype:
                # the override gives bytes torch has no dtype for (an F8_E4M3 weight held in a
                # uint8 tensor); a floating tensor is what its dtype says: never reinterpreted
                raise Error("RF_ERR_MISMATCH", "rank %d (%s): %s: dtype %s for a %s tensor: a "
                            "dtype is given only for bytes torch has no dtype for, held in an "
                            "integer tensor (e.g. F8_E4M3 in torch.uint8); register %s as it "
                            "is" % (self._rank, self.role, name, dtype, t.dtype, name))
            items.append((name, t, dtype))
        if not items:
            return
        descs = (_Desc * len(items))()
        for d, (name, t, dtype) in zip(descs, items):
            d.name, d.ndim = name.encode(), t.dim()
            d.dtype = (dtype if dtype is not None else str(t.dtype)).encode()
            for k in range(t.dim()):
                d.shape[k], d.strides[k] = t.shape[k], t.stride(k)
            d.data = t.data_ptr() or None
            d.device = t.device.index if t.device.type == "cuda" else -1
        self._fast = None
        self._check(_lib.rf_session_register(s, descs, len(items)))
        for name, t, dtype in items:
            self._tensors[name] = t
            self._held[name] = _storage(t)
            if dtype is not None:
                self._as[name] = dtype
            else:
                self._as.pop(name, None)
            self._sigs[name] = _sig(t)

    def register_checkpoint(self, path):
        """Trainer ranks, before plan(), instead of register() (local): this rank's shards
        come from the checkpoint at path (a safetensors directory, or a refit HDF5 file /
        a directory holding model.h5), opened and checked again and read by refit at every
        update, so a new checkpoint written to the same path between updates is the one
        sent. Every trainer rank registers one or none does. Raises refit.Error naming the
        path (a bad path, another model's checkpoint, a rollout rank); plan() then fails on
        every rank with the same text, and a right checkpoint may be registered again."""
        self._check(_lib.rf_session_register_checkpoint(self._handle(), os.fsencode(path)))

    def plan(self):
        """Collective: checks the registered set everywhere and builds the plans."""
        info = _PlanInfo()
        self._check(_lib.rf_session_plan(self._handle(), ctypes.byref(info)))
        self._planned = True
        return Plan(info)

    def update(self, version=None):
        """Collective: one update; returns a Result (committed or not, on every rank alike).
        version: trainer rank 0's is the update's (None or 0: the last committed + 1; not
        required to increase: committed as given, s.version then reads it). Raises
        refit.Error before plan() (RF_ERR_STATE) and on a lost session (a failed join,
        RF_ERR_TIMEOUT / RF_ERR_PEER; every later call then raises RF_ERR_STATE).
        Tensors that moved since they were registered (a new data_ptr, e.g. p.data = ...) are
        found by a check that runs on a helper thread while the update runs (it costs no time
        before the C call): a move fails that attempt on every rank (RF_ERR_MOVED; nothing
        committed; the moved tensor's new memory untouched, its old memory held by this
        binding), then every rank registers its moved tensors again and runs the update once
        more, so refit reads or writes where they are now; r.stats["retries"] is then 1 and
        r.stats["moved"] this rank's names."""
        s = self._handle()
        if not self._planned:
            r = _Result()  # the library refuses it (RF_ERR_STATE), on every rank alike
            self._check(_lib.rf_session_update(s, 0 if version is None else int(version),
                                               ctypes.byref(r)))
            return Result(r)
        r, moved = self._checked_update(s, version)
        if r.committed or r.status != _RF_ERR_MOVED:
            return Result(r)
        # the same verdict on every rank: every rank retries (its own moved tensors, if any)
        seconds = r.seconds
        self._reregister(moved)
        r, again = self._checked_update(s, version)
        return Result(r, retries=1, moved=moved + [n for n in again if n not in moved],
                      seconds=seconds + r.seconds)

    def _checked_update(self, s, version):
        ticket = ctypes.c_uint64()
        self._check(_lib.rf_session_check_arm(s, _CHECK_TIMEOUT_S, ctypes.byref(ticket)))
        if self._checker is None:
            self._checker = _Checker()
            self._checker.start()
        job = _CheckJob(self, ticket.value)
        self._checker.jobs.put(job)
        r = _Result()
        try:
            st = _lib.rf_session_update(s, 0 if version is None else int(version),
                                        ctypes.byref(r))
        finally:
            job.done.wait()  # the check is done with this session's state
        self._check(st)
        return r, job.moved

    def _moved_now(self):
        """The names whose signature changed since they were registered: the C accessors
        over all tensors at once (_meta), the full signature per tensor only when something
        differs from the last clean check."""
        now = _meta(list(self._tensors.values()))
        if self._fast is not None and now == self._fast:
            return []
        moved = [n for n, t in self._tensors.items() if _sig(t) != self._sigs[n]]
        if not moved:
            self._fast = now
        return moved

    def _reregister(self, moved):
        if not moved:
            return
        self._fast = None
        try:
            self.register({n: (self._tensors[n], self._as[n]) if n in self._as
                           else self._tensors[n] for n in moved})
        except Error:
            # refused: refit fails the next update on every rank with the reason (and keeps
            # pointing where the tensor was: its storage stays held); the next update checks
            # (and tries) again
            pass

    def _reregister_moved(self):
        # begin() / finish(): the check before the call, on the calling thread
        self._reregister(self._moved_now())

    def begin(self, version=None):
        """Collective: the first half of update() (the begin agreement); the engine may
        pause generation until finish() returns. Tensors moved since they were registered
        are registered again first."""
        if self._planned:
            self._reregister_moved()
        self._check(_lib.rf_session_begin(self._handle(),
                                          0 if version is None else int(version)))

    def finish(self):
        """Collective: the rest of the update begun by begin(); returns a Result. A tensor
        moved (a new data_ptr) or registered again since begin() fails this update on every
        rank (status RF_ERR_MOVED, the reason naming it; the engine's tensors untouched); the
        next update uses the new memory."""
        self._reregister_moved()
        r = _Result()
        self._check(_lib.rf_session_finish(self._handle(), ctypes.byref(r)))
        return Result(r)

    def abort(self, reason=None):
        """Local: this rank's next update fails (on every rank) with the reason."""
        self._check(_lib.rf_session_abort(self._handle(), reason.encode() if reason else None))

    def close(self, _failure=None):
        """Collective: frees the session (the tensors stay yours). Idempotent. At exit after
        an uncaught exception, and from __exit__ with one, it is local instead
        (rf_session_destroy_local: the other ranks' next call raises refit.Error naming this
        rank and the exception)."""
        if getattr(self, "_s", None) is None:
            return
        s, self._s = self._s, None
        _live.discard(self)
        if self._checker is not None:  # idle: update() waits for its job before returning
            self._checker.jobs.put(None)
            self._checker.join()
            self._checker = None
        if self._MPI.Is_finalized():
            return  # no MPI call after MPI_Finalize: the memory goes with the process
        if _failure is not None:
            _lib.rf_session_destroy_local(s, ("python: %s" % _failure).encode(errors="replace"))
        else:
            _lib.rf_session_destroy(s)
        self._tensors.clear()
        self._as.clear()
        self._held.clear()
        self._fast = None

    def __enter__(self):
        return self

    def __exit__(self, typ, val, tb):
        self.close(_failure=None if typ is None or issubclass(typ, SystemExit)
                   else "%s: %s" % (typ.__name__, val))
