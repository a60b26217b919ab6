/*
 * refit: the session API (include/refit/session.h, docs/api.md): refit as a library that a
 * training job and an inference engine call with their own tensors; and the one update that
 * every client runs (rf_session_run, runtime/session_int.h), refit-run's job included.
 *
 * The setup is runtime/session_setup.c's (rf_session_open, rf_session_build): the public API
 * passes the registered tensors (BORROWED: the trainer's tr.buf[] points at them, as
 * rf_trainer_use_arena borrows an arena; the rollout's runtime storage is rf_storage_register
 * slots over the engine's tensors) where refit-run lets refit allocate. This step's public
 * subset: host memory, and on rollout ranks with rollout.gpus the engine's CUDA tensors
 * (check_device; rf_session_device_storage: the storage's device branches, chunks through
 * host memory), on trainer ranks with trainer.gpus over mpi the trainer's CUDA tensors
 * (rf_session_mpi_device_trainer: packed through device-to-host copies into the host chunks,
 * rf_trainer_use_device), the mpi transport (broadcast and p2p), colocated ipc with the
 * trainer's CUDA tensors (rf_session_ipc_trainer; check_ipc_export refuses what legacy CUDA
 * IPC cannot export; session_setup.c shares each allocation once), quantization none, trainer
 * layout megatron or fsdp (the shards rf_trainer_shard gives either way; F32 masters narrowed
 * by the trainer's pack), rollout layout vllm.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "refit/hashes.h"
#include "refit/log.h"
#include "refit/time.h"
#include "session_int.h"

static _Thread_local char create_err[RF_ERR_MSG_MAX];

int rf_session_abi_version(void) { return RF_SESSION_ABI_VERSION; }

const char *rf_session_status_name(int status) { return rf_status_name((rf_status_t)status); }
const char *rf_session_status_string(int status) { return rf_status_string((rf_status_t)status); }

static bool is_rollout(const rf_session_t *s) { return rf_session_is_rollout(s); }

/* ---- joining: every rank reaches a call, or the call fails naming why ------------------- */

/* A call refused because an earlier join failed (local). */
static rf_status_t check_lost(rf_session_t *s, const char *call)
{
    if (!s->lost)
        return RF_OK;
    return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: %s: the session is lost (%s); only "
                      "rf_session_destroy (local now) may follow", s->rank, call,
                      s->lost_err.msg);
}

/* One uint64 allreduce (op) that opens a call, waited for by rf_session_wait: *v in, the result
 * out. The buffers are the heap's, and parked when the join fails: the collective stays posted
 * (it cannot be cancelled) and MPI writes them when a late rank completes it. On failure err
 * is reset to the join's error. */
static rf_status_t join_allreduce(rf_session_t *s, uint64_t *v, MPI_Op op, const char *what,
                                  rf_err_t *err)
{
    uint64_t *buf = malloc(2 * sizeof(uint64_t));
    if (buf == NULL) /* this rank cannot join: lost, and the others told */
        return rf_session_lose(s, rf_err_reset(err, RF_ERR_NOMEM, "rank %d: %s: out of memory",
                                               s->rank, what), err);
    buf[0] = *v;
    MPI_Request req;
    if (MPI_Iallreduce(&buf[0], &buf[1], 1, MPI_UINT64_T, op, s->comm, &req) != MPI_SUCCESS) {
        free(buf);
        return rf_session_lose(s, rf_err_reset(err, RF_ERR_MPI, "rank %d: %s: MPI_Iallreduce "
                                               "failed", s->rank, what), err);
    }
    rf_err_t jerr;
    rf_err_clear(&jerr);
    s->bounded = true; /* from the first join on, every wait on s->comm is bounded */
    if (rf_session_wait(s, &req, what, &jerr) != RF_OK) {
        rf_session_park(buf); /* MPI writes it when a late rank completes the collective */
        return rf_err_reset(err, jerr.status, "%s", jerr.msg);
    }
    *v = buf[1];
    free(buf);
    return RF_OK;
}

/* rf_session_agree for the first agreement of a call: every rank joined first. */
static rf_status_t agree_joined(rf_session_t *s, rf_status_t st, const char *what, rf_err_t *err)
{
    uint64_t first = (uint64_t)(st == RF_OK ? s->size : s->rank);
    RF_CHECK(join_allreduce(s, &first, MPI_MIN, what, err));
    /* everyone is here: the plain agreement carries the failing rank's text */
    return first == (uint64_t)s->size ? RF_OK : rf_session_agree(s, st, err);
}

/* ---- create ------------------------------------------------------------------------------- */

/* MPI is initialized and not finalized. Local. */
static rf_status_t check_mpi_up(rf_err_t *err)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return rf_err_set(err, RF_ERR_STATE, "rf_session_create: MPI is %s",
                          fin ? "finalized" : "not initialized (MPI_Init first)");
    return RF_OK;
}

rf_status_t rf_session_create(MPI_Comm comm, const char *topology,
                              const rf_session_options_t *options, rf_session_t **s_p)
{
    rf_err_t err;
    rf_err_clear(&err);
    create_err[0] = '\0';
    if (s_p == NULL || comm == MPI_COMM_NULL) {
        snprintf(create_err, sizeof(create_err), "rf_session_create: %s",
                 s_p == NULL ? "NULL s_p" : "comm is MPI_COMM_NULL");
        return RF_ERR_INVALID;
    }
    *s_p = NULL;
    rf_status_t st = check_mpi_up(&err);
    if (st != RF_OK) { /* no MPI to agree over: every rank sees the same */
        snprintf(create_err, sizeof(create_err), "%s", err.msg);
        return st;
    }
    rf_session_setup_t so;
    memset(&so, 0, sizeof(so));
    if (options != NULL)
        so.opt = *options;
    rf_session_t *s = NULL;
    st = rf_session_open(comm, topology, &so, &s, &err);
    if (st != RF_OK) {
        snprintf(create_err, sizeof(create_err), "%s", err.msg);
        return st;
    }
    *s_p = s;
    return RF_OK;
}

/* ---- accessors ---------------------------------------------------------------------------- */

uint64_t rf_session_version(const rf_session_t *s) { return s ? s->version : 0; }

int rf_session_expected_count(const rf_session_t *s) { return s ? s->nex : 0; }

const char *rf_session_expected(const rf_session_t *s, int i, const char **dtype_p, int *ndim_p,
                                int64_t *shape_p)
{
    if (s == NULL || i < 0 || i >= s->nex)
        return NULL;
    const sess_tensor_t *e = &s->ex[i];
    if (dtype_p)
        *dtype_p = rf_dtype_name(e->want.dtype);
    if (ndim_p)
        *ndim_p = e->want.ndim;
    if (shape_p)
        for (int d = 0; d < RF_SESSION_MAX_DIMS; d++)
            shape_p[d] = d < e->want.ndim ? e->want.shape[d] : 0;
    return e->name;
}

const char *rf_session_last_error(const rf_session_t *s)
{
    return s == NULL ? create_err : s->last.msg;
}

/* ---- register ----------------------------------------------------------------------------- */

static const char *hold_hint(const rf_session_t *s)
{
    if (is_rollout(s))
        return "rollout.layout vllm: this rank's engine parameters";
    return s->topo.t_layout == RF_TRAINER_LAYOUT_FSDP
               ? "trainer.layout fsdp: this rank's rows of its stage's checkpoint tensors, "
                 "torch.chunk(tensor, trainer.dp, 0)"
               : "trainer.layout megatron: this rank's shards of its stage's checkpoint "
                 "tensors";
}

/* A trainer tensor of this rank's stage whose shard here is empty (fsdp's last ranks on a
 * small tensor, as torch.chunk leaves them) registered with 0 rows and the tensor's other
 * dims: accepted and ignored, so a caller may hand over every local shard. */
static bool empty_shard(const rf_session_t *s, const rf_tensor_desc_t *d)
{
    if (is_rollout(s) || d->ndim < 1 || d->shape[0] != 0)
        return false;
    int ti = rf_inventory_find(&s->inv, d->name);
    if (ti < 0 || s->ex_of_tensor[ti] >= 0)
        return false;
    const rf_tensor_t *t = &s->inv.tensors[ti];
    rf_region_t reg = {0, 0, 0, 0}; /* stays so when another EP rank holds the expert */
    int stage = rf_topology_layer_stage(&s->topo, t->layer, s->inv.cfg.num_hidden_layers);
    if (stage != s->me.p || rf_trainer_shard(&s->topo, &s->inv, t, &s->me, &reg) ||
        d->ndim != t->ndim || reg.c0 != 0 || (uint64_t)reg.c1 != t->numel / rf_tensor_rows(t))
        return false;
    for (int k = 1; k < d->ndim; k++)
        if (d->shape[k] != t->shape[k])
            return false;
    return true;
}

/* Where this rank's registered tensors live: the GPU of a rollout rank with rollout.gpus
 * (its runtime storage, DESIGN.md 9), of a trainer rank with trainer.gpus (mpi or colocated
 * ipc; the tests' host-device accelerator: its device 0), else the host (RF_DEVICE_HOST). */
static int registered_device(const rf_session_t *s)
{
    return rf_session_device_storage(s) || rf_session_ipc_trainer(s) ||
                   rf_session_mpi_device_trainer(s)
               ? s->accel->device
               : RF_DEVICE_HOST;
}

/*
 * A trainer tensor on colocated ipc: its pair opens the allocation holding it through legacy
 * CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, as torch's reduce_tensor shares a
 * caching-allocator segment). Refused, naming the tensor and the allocator setting that made
 * it: pool memory (cudaMallocAsync; PyTorch's backend:cudaMallocAsync) and memory that is not
 * legacy-IPC capable (cuMemCreate / VMM; PyTorch's expandable_segments:True); a pointer whose
 * allocation the driver does not report, or the tensor running past its end. Local.
 */
static rf_status_t check_ipc_export(const rf_session_t *s, const rf_tensor_desc_t *d,
                                    const rf_accel_ptr_info_t *pi, uint64_t bytes,
                                    rf_err_t *err)
{
    const char *p = d->data;
    if (pi->mempool)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "rank %d (trainer): %s: its memory comes from "
                          "a CUDA memory pool (cudaMallocAsync; PyTorch: PYTORCH_CUDA_ALLOC_CONF="
                          "backend:cudaMallocAsync), which colocated ipc cannot export with "
                          "cudaIpcGetMemHandle: run the trainer with PyTorch's native caching "
                          "allocator (backend:native)", s->rank, d->name);
    if (!pi->legacy_ipc)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "rank %d (trainer): %s: its allocation is not "
                          "legacy-IPC capable (cuMemCreate / VMM memory; PyTorch: "
                          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), which colocated "
                          "ipc cannot export with cudaIpcGetMemHandle: run the trainer with "
                          "expandable_segments:False", s->rank, d->name);
    if (pi->base == NULL || pi->bytes == 0 || p < (const char *)pi->base ||
        (uint64_t)(p - (const char *)pi->base) + bytes > pi->bytes)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "rank %d (trainer): %s: the allocation holding "
                          "its %" PRIu64 " bytes at %p is unknown or too short (base %p, %" PRIu64
                          " bytes; CU_POINTER_ATTRIBUTE_RANGE_START_ADDR / RANGE_SIZE): colocated "
                          "ipc cannot export it", s->rank, d->name, bytes, d->data, pi->base,
                          pi->bytes);
    return RF_OK;
}

/* Descriptor d's device: the one this rank's tensors live on (registered_device); a CUDA
 * tensor's pointer, as cudaPointerGetAttributes sees it, device memory of that ordinal (not
 * host, pinned or managed memory). Local. */
static rf_status_t check_device(const rf_session_t *s, const rf_tensor_desc_t *d, rf_err_t *err)
{
    const char *role = rf_session_role_name(s);
    int want = registered_device(s);
    if (want == RF_DEVICE_HOST && d->device != RF_DEVICE_HOST)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "rank %d (%s): %s: device %d: this rank's "
                          "tensors are host memory (device -1; %s)", s->rank, role, d->name,
                          d->device,
                          is_rollout(s) ? "CUDA tensors need rollout.gpus, the GPU this rank's "
                                          "runtime storage lives on"
                                        : "CUDA trainer tensors need trainer.gpus, the GPU "
                                          "this rank's tensors live on (the mpi transport, or "
                                          "colocated ipc with trainer.gpus == rollout.gpus)");
    if (d->device != want)
        return rf_err_set(err, RF_ERR_MISMATCH, "rank %d (%s): %s: device %d, expected CUDA "
                          "device %d (%s.gpus puts this rank's %s there)",
                          s->rank, role, d->name, d->device, want, role,
                          is_rollout(s) ? "runtime storage" : "tensors");
    if (want == RF_DEVICE_HOST || d->data == NULL)
        return RF_OK; /* NULL data: rf_signature_check refuses it where it holds bytes */
    rf_accel_ptr_info_t pi;
    rf_status_t st = rf_accel_pointer_info(s->accel, d->data, &pi);
    if (st != RF_OK)
        return rf_err_set(err, st, "rank %d (%s): %s: cannot query its pointer %p "
                          "(cudaPointerGetAttributes)", s->rank, role, d->name, d->data);
    if (pi.kind != RF_PTR_DEVICE || pi.device != d->device)
        return rf_err_set(err, RF_ERR_MISMATCH, "rank %d (%s): %s: descriptor says CUDA device "
                          "%d, but its pointer %p is %s%.0d (cudaPointerGetAttributes)",
                          s->rank, role, d->name, d->device, d->data,
                          pi.kind == RF_PTR_HOST      ? "host memory"
                          : pi.kind == RF_PTR_MANAGED ? "managed memory, not device memory"
                                                      : "device memory of CUDA device ",
                          pi.kind == RF_PTR_DEVICE ? pi.device : 0);
    if (rf_session_ipc_trainer(s)) {
        uint64_t bytes = 0, el = d->dtype ? rf_dtype_size(rf_dtype_parse(d->dtype)) : 0;
        for (int x = 0; x < d->ndim && x < RF_SESSION_MAX_DIMS; x++)
            bytes = x == 0 ? (uint64_t)(d->shape[0] > 0 ? d->shape[0] : 0)
                           : bytes * (uint64_t)(d->shape[x] > 0 ? d->shape[x] : 0);
        return check_ipc_export(s, d, &pi, d->ndim > 0 ? bytes * el : el, err);
    }
    return RF_OK;
}

/* Descriptor k of a register call checked against what this rank holds, nothing changed:
 * *i_p its expected tensor (-1: an empty shard, accepted and ignored) and *sig_p its
 * signature. mark: the call's tensors so far (a name twice in one call is refused). Local. */
static rf_status_t check_one(rf_session_t *s, const rf_tensor_desc_t *d, int k,
                             const unsigned char *mark, int *i_p, rf_signature_t *sig_p,
                             rf_err_t *err)
{
    const char *role = rf_session_role_name(s);
    *i_p = -1;
    if (d->name == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "rank %d (%s): descriptor %d has no name",
                          s->rank, role, k);
    uint64_t v;
    int i = -1;
    if (rf_map_get(&s->exmap, rf_map_strkey(d->name), &v) && strcmp(s->ex[v].name, d->name) == 0)
        i = (int)v;
    rf_dtype_t dt = d->dtype ? rf_dtype_parse(d->dtype) : RF_DTYPE_INVALID;
    if (i < 0 && dt != RF_DTYPE_INVALID && empty_shard(s, d))
        return RF_OK;
    if (i < 0)
        return rf_err_set(err, RF_ERR_EXTRA, "rank %d (%s): %s is not a tensor this rank holds "
                          "(%s)", s->rank, role, d->name, hold_hint(s));
    const sess_tensor_t *e = &s->ex[i];
    if (mark[i])
        return rf_err_set(err, RF_ERR_INVALID, "rank %d (%s): %s given twice in one "
                          "rf_session_register call", s->rank, role, d->name);
    if (dt == RF_DTYPE_INVALID)
        return rf_err_set(err, RF_ERR_INVALID, "rank %d (%s): %s: unknown dtype %s", s->rank,
                          role, d->name, d->dtype ? d->dtype : "(NULL)");
    rf_slot_shape_t want = e->want;
    if (!is_rollout(s) && dt != want.dtype) {
        /* an fp32 master of a bf16 / f16 tensor: rounded to nearest even when packed */
        if (!rf_trainer_source_dtype_ok(dt, want.dtype))
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "rank %d (%s): %s: dtype %s, expected %s "
                              "(or an F32 master of a BF16 / F16 tensor)",
                              s->rank, role, d->name, rf_dtype_name(dt), rf_dtype_name(want.dtype));
        want.dtype = dt;
    }
    if (s->planned && dt != e->sig.dtype)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "rank %d (%s): %s: dtype %s, registered as %s "
                          "(the plan rounds what was registered; a dtype may not change)",
                          s->rank, role, d->name, rf_dtype_name(dt), rf_dtype_name(e->sig.dtype));
    if (d->ndim < 0 || d->ndim > RF_SESSION_MAX_DIMS || d->ndim > RF_MAX_DIMS)
        return rf_err_set(err, RF_ERR_INVALID, "rank %d (%s): %s: ndim %d out of [0, %d]",
                          s->rank, role, d->name, d->ndim, RF_SESSION_MAX_DIMS);
    RF_CHECK(check_device(s, d, err));
    rf_signature_t sig;
    memset(&sig, 0, sizeof(sig));
    sig.ndim = d->ndim;
    sig.dtype = dt;
    sig.device = d->device;
    for (int x = 0; x < d->ndim; x++) {
        sig.shape[x] = d->shape[x];
        sig.stride[x] = d->strides[x];
        if (d->shape[x] < 0)
            return rf_err_set(err, RF_ERR_INVALID, "rank %d (%s): %s: negative size in dim %d",
                              s->rank, role, d->name, x);
    }
    sig.data = d->data;
    sig.storage_base = d->data;
    sig.storage_offset = 0;
    sig.storage_bytes = rf_signature_bytes(&sig);
    rf_err_t e2;
    rf_err_clear(&e2);
    rf_status_t st = rf_signature_check(&sig, &want, d->name, &e2);
    if (st != RF_OK)
        return rf_err_set(err, st, "rank %d (%s): %s", s->rank, role, e2.msg);
    if (!s->planned && e->registered)
        return rf_err_set(err, RF_ERR_INVALID, "rank %d (%s): %s registered twice", s->rank,
                          role, d->name);
    /* colocated ipc: the plan shared the allocation the tensor was in, and the pair reads it
     * at that offset */
    if (s->planned && !is_rollout(s) && s->ipc && d->data != e->sig.data)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "rank %d (%s): %s moved after the plan (%p, "
                          "planned at %p): on colocated ipc the pair reads each trainer tensor "
                          "where it was at rf_session_plan; keep its memory for the session",
                          s->rank, role, d->name, d->data, e->sig.data);
    *i_p = i;
    *sig_p = sig;
    return RF_OK;
}

/* Expected tensor i takes the checked signature sig (check_one). */
static rf_status_t apply_one(rf_session_t *s, int i, const rf_signature_t *sig, rf_err_t *err)
{
    const char *role = rf_session_role_name(s);
    sess_tensor_t *e = &s->ex[i];
    if (!s->planned) {
        e->registered = true;
        e->sig = *sig;
        s->nreg++;
        return RF_OK;
    }
    /* after the plan: the caller re-allocated the tensor; refit uses the new memory from the
     * next update on (rollout: the plan sees the new signature and rebuilds at its begin) */
    if (is_rollout(s)) {
        rf_err_t e2;
        rf_err_clear(&e2);
        /* cannot fail past check_one (the same dtype and shape): kept as a guard */
        rf_status_t st = rf_storage_rebind(&s->st, e->name, sig, &e2);
        if (st != RF_OK)
            return rf_err_set(err, st, "rank %d (%s): %s", s->rank, role, e2.msg);
    } else if (!e->logical) { /* a quantized linear's weight: read at the next production */
        s->tr.buf[e->entry] = sig->data;
    }
    e->sig = *sig;
    if (s->in_update && s->moved_err.status == RF_OK) /* the update in flight fails */
        rf_err_set(&s->moved_err, RF_ERR_MOVED, "rank %d (%s): %s registered again during "
                   "update %u (between rf_session_begin and rf_session_finish): that update "
                   "fails, the next one uses the new memory", s->rank, role, e->name, s->seq);
    return RF_OK;
}

/* All or nothing: every descriptor checked first; the first bad one refuses the whole call
 * (nothing registered or re-bound), else every one is applied. */
static rf_status_t register_all(rf_session_t *s, const rf_tensor_desc_t *descs, int n,
                                rf_err_t *err)
{
    if (n == 0)
        return RF_OK;
    unsigned char *mark = calloc((size_t)s->nex + 1, 1);
    int *idx = malloc((size_t)n * sizeof(int));
    rf_signature_t *sigs = malloc((size_t)n * sizeof(rf_signature_t));
    rf_status_t st = RF_OK;
    if (mark == NULL || idx == NULL || sigs == NULL)
        st = rf_err_set(err, RF_ERR_NOMEM, "rank %d (%s): rf_session_register: out of memory",
                        s->rank, rf_session_role_name(s));
    for (int k = 0; k < n && st == RF_OK; k++) {
        st = check_one(s, &descs[k], k, mark, &idx[k], &sigs[k], err);
        if (st == RF_OK && idx[k] >= 0)
            mark[idx[k]] = 1;
    }
    for (int k = 0; k < n && st == RF_OK; k++)
        if (idx[k] >= 0)
            st = apply_one(s, idx[k], &sigs[k], err);
    free(mark);
    free(idx);
    free(sigs);
    return st;
}

rf_status_t rf_session_register(rf_session_t *s, const rf_tensor_desc_t *descs, int n)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    rf_err_clear(&s->last);
    rf_status_t st = RF_OK;
    if (s->broken)
        return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: the session's plan failed past the "
                          "registration check: destroy it", s->rank);
    if (n < 0 || (n > 0 && descs == NULL))
        st = rf_err_set(&s->last, RF_ERR_INVALID, "rank %d (%s): rf_session_register: %s",
                        s->rank, rf_session_role_name(s), n < 0 ? "n < 0" : "NULL descs");
    if (st == RF_OK)
        st = register_all(s, descs, n, &s->last);
    if (st != RF_OK && s->reg_err.status == RF_OK) {
        rf_err_set(&s->reg_err, st, "%s", s->last.msg); /* the next collective carries it */
        s->reg_err_call = !s->planned;
    } else if (st == RF_OK && s->reg_err_call && !s->planned) {
        /* a refused call before the plan left nothing registered; the caller registered
         * again: forgotten (a tensor still missing fails the plan, named) */
        rf_err_clear(&s->reg_err);
        s->reg_err_call = false;
    }
    return st;
}

/* ---- plan --------------------------------------------------------------------------------- */

/* Tests only: REFIT_TEST_SESSION_AFTER_JOIN stops the plan right after its join, where the
 * other ranks go on into the plan's next collective (rf_session_test_stop). Local. */
static rf_status_t test_after_join(rf_session_t *s, rf_err_t *err)
{
    return rf_session_test_stop(s, "REFIT_TEST_SESSION_AFTER_JOIN", "after the join", err);
}

/* Every rank's registration complete and clean (local). */
static rf_status_t check_registered(rf_session_t *s, rf_err_t *err)
{
    if (s->reg_err.status != RF_OK)
        return rf_err_set(err, s->reg_err.status, "%s", s->reg_err.msg);
    if (s->nreg == s->nex)
        return RF_OK;
    for (int i = 0; i < s->nex; i++)
        if (!s->ex[i].registered)
            return rf_err_set(err, RF_ERR_MISSING, "rank %d (%s): %s not registered (%d of %d "
                              "tensors missing; %s)", s->rank, rf_session_role_name(s),
                              s->ex[i].name, s->nex - s->nreg, s->nex, hold_hint(s));
    return rf_err_set(err, RF_ERR_INTERNAL, "rank %d: registration count", s->rank);
}

/* Every rank's counts and the plan hash (collective). */
static rf_status_t plan_info(rf_session_t *s, rf_session_plan_info_t *info, rf_err_t *err)
{
    uint64_t mine[RF_PLAN_MODES] = {0, 0, 0}, sum[RF_PLAN_MODES], h = 0;
    if (is_rollout(s)) {
        memcpy(mine, s->plan_layers, sizeof(mine));
        if (rf_session_decisions_hash(&s->plan, &h) != RF_OK)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    }
    uint64_t *all = calloc((size_t)s->size, sizeof(uint64_t));
    /* per manifest entry: 1 when some trainer rank packs it from a wider master */
    uint8_t *nar = calloc((size_t)s->man.n + 1, 1), *any = calloc((size_t)s->man.n + 1, 1);
    if (all == NULL || nar == NULL || any == NULL) {
        free(all);
        free(nar);
        free(any);
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    }
    for (int i = 0; !is_rollout(s) && i < s->man.n; i++)
        nar[i] = s->tr.has[i] && s->tr.src_dtype[i] != s->man.entries[i].dtype;
    int narrowed = 0;
    rf_status_t st = rf_session_allreduce(s, mine, sum, RF_PLAN_MODES, MPI_UINT64_T, MPI_SUM,
                                          "the plan's layer counts", err);
    if (st == RF_OK)
        st = rf_session_allgather(s, &h, 1, MPI_UINT64_T, all, "the plan hashes", err);
    if (st == RF_OK)
        st = rf_session_allreduce(s, nar, any, s->man.n, MPI_UINT8_T, MPI_MAX,
                                  "the narrowed masters", err);
    if (st != RF_OK) {
        free(all);
        free(nar);
        free(any);
        return st;
    }
    for (int i = 0; i < s->man.n; i++)
        narrowed += any[i];
    uint64_t hash = 0;
    if (rf_session_plan_hash(rf_topology_hash(&s->topo), s->man.digest, any, s->man.n, all,
                             s->size, &hash) != RF_OK) {
        free(all);
        free(nar);
        free(any);
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    }
    if (info != NULL) {
        memset(info, 0, sizeof(*info));
        memcpy(info->layers, sum, sizeof(info->layers));
        info->hash = hash;
        info->manifest_digest = s->man.digest;
        info->tensors = s->man.n;
        info->payload_bytes = s->man.payload_bytes;
        info->narrowed = narrowed;
    }
    free(all);
    free(nar);
    free(any);
    return RF_OK;
}

rf_status_t rf_session_plan(rf_session_t *s, rf_session_plan_info_t *info)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    rf_err_t *err = &s->last;
    rf_err_clear(err);
    if (s->planned || s->broken)
        return rf_err_set(err, RF_ERR_STATE, "rank %d: rf_session_plan: %s", s->rank,
                          s->planned ? "the session is planned already (once per session)"
                                     : "an earlier plan failed past the registration check");
    RF_CHECK(check_lost(s, "rf_session_plan"));
    rf_status_t st = check_registered(s, err);
    rf_err_clear(&s->reg_err); /* reported now, on every rank */
    s->call = "rf_session_plan";
    RF_CHECK(agree_joined(s, st, "rf_session_plan", err));
    RF_CHECK(test_after_join(s, err));
    RF_CHECK(rf_session_ckpt_agree(s, err));
    /* past this point a failure is the topology's or the library's: not recoverable */
    s->broken = true;
    RF_CHECK(rf_session_build(s, err));
    RF_CHECK(rf_session_agree(s, plan_info(s, info, err), err));
    s->broken = false;
    s->planned = true;
    return RF_OK;
}

/* ---- update ------------------------------------------------------------------------------- */

/* This rank's reasons to refuse the update at its begin (local): the public caller's abort
 * and refused registration, a trainer's version that is not trainer rank 0's. */
static rf_status_t begin_local(rf_session_t *s, uint64_t version, uint64_t agreed, rf_err_t *err)
{
    if (s->abort_err.status != RF_OK)
        return rf_err_set(err, s->abort_err.status, "%s", s->abort_err.msg);
    if (s->reg_err.status != RF_OK)
        return rf_err_set(err, s->reg_err.status, "%s", s->reg_err.msg);
    if (!is_rollout(s) && version != 0 && version != agreed)
        return rf_err_set(err, RF_ERR_MISMATCH, "trainer rank %d: version %" PRIu64 ", trainer "
                          "rank 0's %" PRIu64, s->rank, version, agreed);
    return RF_OK;
}

/* One p2p pair's pack: the trainer's source with that receiver's rectangles (one source for
 * every pair: the sender packs one chunk at a time). */
typedef struct p2p_pack {
    rf_trainer_source_t *src;
    const rf_p2p_rect_t *rects;
} p2p_pack_t;

static rf_status_t p2p_pack_fn(void *ctx, const rf_chunk_t *chunk, const rf_chunk_piece_t *pieces,
                               void *payload, rf_chunk_sum_t *sum, rf_err_t *err)
{
    p2p_pack_t *pp = ctx;
    pp->src->rects = pp->rects;
    return rf_trainer_source_pack(pp->src, chunk, pieces, payload, sum, err);
}

/*
 * The p2p sender: one pair per receiver this rank sends to, in the order rf_xfer_p2p_start
 * gives (the scale model takes the same order, runtime/simulate.c). Where receivers take any
 * ready sender (mpi), each sender starts at its own first receiver and keeps chunks to
 * transfer.p2p_inflight receivers in flight (rf_xfer_send_p2p); else receivers in world-rank
 * order, one at a time, on every sender, and senders in order on every receiver (the plan's
 * stages): no cycle of waits.
 */
static rf_status_t send_p2p(rf_session_t *s, const rf_xfer_config_t *base, rf_err_t *err)
{
    const size_t nr = s->p2p_s.nrecv;
    const int any = (rf_xfer_caps(s->xfer) & RF_XFER_CAP_ANY_ORDER) != 0;
    rf_xfer_config_t *cfgs = calloc(nr + 1, sizeof(*cfgs));
    p2p_pack_t *packs = calloc(nr + 1, sizeof(*packs));
    rf_xfer_pair_t *pairs = calloc(nr + 1, sizeof(*pairs));
    int *dst = calloc(nr + 1, sizeof(int));
    size_t *idx = calloc(nr + 1, sizeof(size_t));
    rf_status_t st = RF_OK;
    if (cfgs == NULL || packs == NULL || pairs == NULL || dst == NULL || idx == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "p2p sender rank %d: out of memory for %zu pairs",
                        s->rank, nr);
        rf_ctl_abort(s->ctl, st, err->msg);
        goto out;
    }
    /* this rank's pairs: the receivers it has chunks for, world order */
    size_t n = 0;
    for (size_t r = 0; r < nr; r++) {
        const rf_p2p_recv_t *rv = &s->p2p_s.recv[r];
        int k = rf_p2p_recv_stage(rv, s->rank);
        if (k < 0 || rv->plan->stages[k].chunk_count == 0)
            continue;
        dst[n] = rv->rank;
        idx[n++] = r;
    }
    const size_t q0 = rf_xfer_p2p_start(
        dst, n, s->T + (any ? rf_xfer_p2p_first_receiver(s->rank, s->T, s->R) : 0));
    for (size_t q = 0; q < n; q++) {
        const rf_p2p_recv_t *rv = &s->p2p_s.recv[idx[(q0 + q) % n]];
        cfgs[q] = *base;
        cfgs[q].stage_senders = rv->senders;
        cfgs[q].plan = rv->plan;
        cfgs[q].items = rv->items;
        cfgs[q].receivers = &rv->rank;
        cfgs[q].n_receivers = 1;
        packs[q] = (p2p_pack_t){.src = &s->src, .rects = rv->rects};
        pairs[q] = (rf_xfer_pair_t){.cfg = &cfgs[q], .ctx = &packs[q]};
    }
    int inflight = !any                   ? 1
                   : s->topo.p2p_inflight ? s->topo.p2p_inflight
                                          : RF_XFER_P2P_INFLIGHT_DEFAULT;
    st = rf_xfer_send_p2p(s->xfer, pairs, n, inflight, p2p_pack_fn, err);
out:
    free(cfgs);
    free(packs);
    free(pairs);
    free(dst);
    free(idx);
    return st;
}

/* The transfer of one update on this rank: the trainer's source and the rollout's sink take
 * each chunk straight from the transport; the client's hooks only where it has them. */
static rf_status_t transfer(rf_session_t *s, const rf_session_hooks_t *h, rf_session_times_t *tm,
                            rf_err_t *err)
{
    rf_status_t st = RF_OK;
    uint32_t v = s->seq;
    rf_xfer_config_t cfg = {.update = v,
                            .plan = s->cplan,
                            .stage_senders = s->senders,
                            .receivers = s->receivers,
                            .n_receivers = s->R,
                            .deadline = s->deadline,
                            .fault = h->fault,
                            .integrity = s->integrity ? s->trailer : 0,
                            .items = s->items,
                            .pack_device = s->nccl_resident,
                            .complete = rf_sink_complete};
    if (!is_rollout(s))
        s->tr.fault_skip_seq = h->gather_skip_seq;
    rf_sink_t sink = {.plan = &s->plan,
                      .item_tensor = s->item_tensor,
                      .after = h->after_chunk,
                      .after_ctx = h->ctx};
    s->src.tr = &s->tr;
    s->src.update = v;
    s->src.deadline = s->deadline;
    s->src.rects = NULL;
    s->src.before = h->before_pack;
    s->src.before_ctx = h->ctx;
    double t = rf_time_now();
    if (s->p2p) {
        /* p2p: this rank's own plan (rollout) or one plan per receiver (trainer) */
        if (is_rollout(s)) {
            const rf_p2p_recv_t *me = rf_p2p_schedule_find(&s->p2p_s, s->rank);
            cfg.stage_senders = me->senders;
            cfg.plan = me->plan;
            cfg.items = me->items;
            cfg.receivers = &me->rank;
            cfg.n_receivers = 1;
            sink.rects = me->rects;
            cfg.any_order = 1; /* whichever sender is ready (docs/simulate.md) */
        }
    }
    if (is_rollout(s)) {
        st = rf_xfer_recv(s->xfer, &cfg, rf_sink_receive, &sink, err);
        tm->receive_s = rf_time_now() - t;
        if (st == RF_OK) {
            t = rf_time_now();
            st = rf_plan_finalize(&s->plan, err);
            tm->finalize_s = rf_time_now() - t;
            if (st != RF_OK)
                rf_ctl_abort(s->ctl, st, err->msg);
        }
    } else if (s->p2p) {
        /* the pairs' order and window: send_p2p */
        if (h->point != NULL)
            h->point(h->ctx, "p2p sender, before its first send");
        st = send_p2p(s, &cfg, err);
    } else if (s->tr.sender) {
        /* chunks read in place are never packed, so the pack hooks may not fire */
        if ((rf_xfer_caps(s->xfer) & RF_XFER_CAP_IN_PLACE) && h->point != NULL)
            h->point(h->ctx, "stage sender, before its first chunk");
        /* a pack that needs no MPI (no stage gather, host shards) may run beside the wire;
         * the tests' pack hooks (faults that exit or stall the rank) stay on this thread */
        cfg.pack_thread =
            h->before_pack == NULL && !s->nccl_resident && rf_trainer_pack_local(&s->tr);
        st = rf_xfer_send(s->xfer, &cfg, rf_trainer_source_pack, &s->src, err);
    } else {
        if (h->point != NULL)
            h->point(h->ctx, "trainer, before contributing to the stage gather");
        st = rf_trainer_contribute(&s->tr, v, s->topo.buffers, s->deadline, err);
        if (st != RF_OK && st != RF_ERR_PEER)
            rf_ctl_abort(s->ctl, st, err->msg);
    }
    if (!is_rollout(s))
        tm->send_s = rf_time_now() - t;
    return st;
}

static const rf_session_hooks_t no_hooks = {.fault = RF_XFER_FAULT_NONE,
                                             .gather_skip_seq = -1};

/* The first half of an update (rf_session_run, rf_session_begin): numbered, the transport's
 * and the plan's begin, the begin agreement. This rank's status after it, the same verdict
 * to come on every rank. */
static rf_status_t run_begin(rf_session_t *s, uint64_t version, uint64_t agreed,
                             const rf_session_hooks_t *h, rf_session_times_t *tm, rf_err_t *err)
{
    rf_err_t e2;
    rf_err_clear(&e2);
    memset(tm, 0, sizeof(*tm));
    uint32_t v = ++s->seq;
    double t_begin = rf_time_now(); /* update begin, for the time to the verdict */
    rf_ctl_begin(s->ctl, v, &e2);
    s->deadline = rf_deadline_for_update(s->topo.timeout_s, s->topo.slack_s,
                                         s->man.payload_bytes, s->topo.min_bandwidth);
    /* the transport's begin (nccl: (re)create the communicators when missing, the first update
     * or after a FAILED one) under this update's deadline and ABORT; a failure fails the begin
     * agreement */
    rf_err_t xerr;
    rf_err_clear(&xerr);
    rf_status_t xst = rf_xfer_begin(s->xfer, v, s->deadline, &xerr);
    if (!is_rollout(s))
        rf_trainer_begin(&s->tr);
    double t = rf_time_now();
    rf_status_t st = begin_local(s, version, agreed, err);
    rf_err_clear(&s->abort_err);
    rf_err_clear(&s->reg_err);
    if (st == RF_OK && is_rollout(s)) {
        uint64_t rebuilds = s->plan.stats.rebuilds;
        st = rf_plan_begin(&s->plan, v, err); /* rebuilds on a rebound tensor, naming it */
        tm->rebuilds = s->plan.stats.rebuilds - rebuilds;
        int moved = s->plan.stats.moved_slot;
        if (moved >= 0 && moved < s->st.nslots)
            tm->moved = s->st.slots[moved].name;
    }
    if (h->begin != NULL) {
        rf_status_t hs = h->begin(h->ctx, err);
        st = st != RF_OK ? st : hs;
    }
    if (st == RF_OK && xst != RF_OK)
        st = rf_err_set(err, xst, "%s", xerr.msg);
    rf_err_clear(&e2);
    rf_status_t ag = rf_ctl_agree(s->ctl, v, st, err->msg, s->deadline, &e2);
    if (st == RF_OK && ag != RF_OK) {
        st = ag;
        rf_err_set(err, ag, "%s", e2.msg);
    }
    tm->begin_s = rf_time_now() - t;
    s->run_t0 = t_begin;
    return st;
}

/* The second half (rf_session_run, rf_session_finish): production (and its agreement where
 * it can fail), transfer, finalize, the completion gate, the drain on FAILED. st: this rank's
 * status going in. */
static rf_status_t run_finish(rf_session_t *s, rf_status_t st, const rf_session_hooks_t *h,
                              rf_gate_verdict_t *verdict, rf_session_times_t *tm, rf_err_t *err)
{
    rf_err_t e2;
    rf_err_clear(&e2);
    memset(verdict, 0, sizeof(*verdict));
    uint32_t v = s->seq;
    double t, t_begin = s->run_t0;
    if (st == RF_OK && !is_rollout(s)) {
        /* tests: REFIT_TEST_SESSION_BEFORE_PRODUCE=stall:S on one trainer rank holds its
         * production back, so without the agreement below the other trainers' chunks would
         * reach the engine first (check_session_quant) */
        if (h->produce != NULL)
            st = rf_session_test_stop(s, "REFIT_TEST_SESSION_BEFORE_PRODUCE",
                                      "before production", err);
        if (st == RF_OK && h->produce != NULL)
            st = h->produce(h->ctx, err);
        if (st != RF_OK && !s->agree_produce)
            rf_ctl_abort(s->ctl, st, err->msg);
    }
    /* Where production can fail (s->agree_produce: a quantized model, a checkpoint source),
     * every rank, trainers and rollouts alike, agrees on it before the first chunk moves: an
     * ABORT alone came too late, another trainer having produced fine and sent its chunks
     * (p2p, trainer TP > 1), which the engine applied before the ABORT arrived. So a NaN
     * weight, a bad scale or an unreadable checkpoint fails the update on every rank with no
     * chunk sent and the engine's tensors unchanged (issue 15). One small agreement per
     * update, under the update's deadline; this rank's failure so far goes in, so every rank
     * takes part whatever it knows. */
    if (s->agree_produce) {
        rf_err_clear(&e2);
        rf_status_t ag = rf_ctl_agree_produced(s->ctl, v, st, err->msg, s->deadline, &e2);
        if (st == RF_OK && ag != RF_OK) {
            st = ag;
            rf_err_set(err, ag, "%s", e2.msg);
        }
    }
    /* the receivers may read this trainer's sources now (ipc: READY to its pair), only once
     * production is agreed */
    if (st == RF_OK && !is_rollout(s)) {
        st = rf_xfer_sources(s->xfer, v, RF_XFER_SOURCES_READY, err);
        if (st != RF_OK)
            rf_ctl_abort(s->ctl, st, err->msg);
    }
    if (st == RF_OK)
        st = transfer(s, h, tm, err);
    /* the caller's local check (rf_session_check_arm), computed by another thread while this
     * update ran: a failed or missing one fails the update here, before the gate, so the gate
     * carries it to every rank */
    if (st == RF_OK) {
        st = rf_session_check_wait(s, st, err);
        if (st != RF_OK)
            rf_ctl_abort(s->ctl, st, err->msg);
    }

    /* the completion gate */
    rf_gate_record_t rec;
    const rf_xfer_stats_t *xs = rf_xfer_stats(s->xfer);
    memset(&rec, 0, sizeof(rec));
    rf_gate_record_set_result(&rec, s->ctl, st, err);
    rec.nranks = s->size;
    rec.peers = xs->peers;
    if (is_rollout(s)) {
        memcpy(rec.mode_layers, s->plan.stats.layers, sizeof(rec.mode_layers));
        memcpy(rec.plan_mode_layers, s->plan_layers, sizeof(rec.plan_mode_layers));
    }
    rec.manifest_digest = s->man.digest;
    t = rf_time_now();
    rf_err_clear(&e2);
    rf_gate_run(s->ctl, v, &rec, s->rank == 0 ? &s->expect : NULL, s->deadline, verdict, &e2);
    tm->gate_s = rf_time_now() - t;
    tm->verdict_s = rf_time_now() - t_begin;
    if (!verdict->committed) {
        /* leave both communicators clean for the next update (bounded: after the verdict) */
        rf_err_t de;
        double drain_deadline = rf_time_now() + 30.0;
        rf_err_clear(&de);
        if (verdict->posted_from != NULL &&
            rf_xfer_drain(s->xfer, verdict->posted_from, drain_deadline, &de) != RF_OK)
            rf_warn("rank %d: update %u: %s", s->rank, v, de.msg);
        rf_err_clear(&de);
        if (!is_rollout(s) && rf_trainer_drain(&s->tr, v, drain_deadline, &de) != RF_OK)
            rf_warn("rank %d: update %u: %s", s->rank, v, de.msg);
        if (is_rollout(s) && s->plan.in_update)
            rf_plan_abort(&s->plan);
        /* the transport's failure step (nccl: ncclCommAbort on every rank; re-created at the
         * next update's begin) */
        rf_xfer_fail(s->xfer);
        if (e2.msg[0] != '\0') /* the gate's own error first: this rank got no verdict */
            rf_err_reset(err, e2.status != RF_OK ? e2.status : RF_ERR_INTERNAL, "%s", e2.msg);
    }
    return st;
}

rf_status_t rf_session_run(rf_session_t *s, uint64_t version, uint64_t agreed,
                           const rf_session_hooks_t *hooks, rf_gate_verdict_t *verdict,
                           rf_session_times_t *tm, rf_err_t *err)
{
    const rf_session_hooks_t *h = hooks != NULL ? hooks : &no_hooks;
    rf_status_t st = run_begin(s, version, agreed, h, tm, err);
    return run_finish(s, st, h, verdict, tm, err);
}

rf_status_t rf_session_begin(rf_session_t *s, uint64_t version)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    rf_err_clear(&s->last);
    RF_CHECK(check_lost(s, "rf_session_begin"));
    if (!s->planned)
        return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: rf_session_begin before a "
                          "successful rf_session_plan", s->rank);
    if (s->in_update)
        return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: rf_session_begin: update %u began "
                          "already (rf_session_finish first)", s->rank, s->seq);
    s->pub_t0 = rf_time_now();
    s->call = "rf_session_begin";
    /* the version: trainer rank 0's (world rank 0 is always a trainer; its value is >= 1, the
     * others give 0), agreed as every rank joins the update (an allreduce completes on no rank
     * before all came; a broadcast would let rank 0 run ahead into the begin agreement) */
    uint64_t agreed = s->rank == 0 ? (version != 0 ? version : s->version + 1) : 0;
    char what[64];
    snprintf(what, sizeof(what), "rf_session_begin of update %u", s->seq + 1);
    RF_CHECK(join_allreduce(s, &agreed, MPI_MAX, what, &s->last));
    s->pub_agreed = agreed;
    s->pub_hooked = rf_session_ckpt_hooks(s, &s->pub_hooks) != NULL ||
                    rf_session_quant_hooks(s, &s->pub_hooks) != NULL;
    rf_err_clear(&s->pub_err);
    rf_err_clear(&s->moved_err);
    s->pub_st = run_begin(s, version, agreed, s->pub_hooked ? &s->pub_hooks : &no_hooks,
                          &s->pub_tm, &s->pub_err);
    s->in_update = true;
    return RF_OK;
}

/* Finish, before anything moves (collective): a tensor registered again on any rank since
 * the begin fails the update everywhere, RF_ERR_MOVED on the lowest such rank (its text),
 * RF_ERR_PEER naming it on the others, so the gate names that rank. */
static rf_status_t finish_moved(rf_session_t *s, rf_status_t st, rf_err_t *err)
{
    uint64_t v = (uint64_t)(s->moved_err.status != RF_OK ? s->rank : s->size);
    char what[64];
    snprintf(what, sizeof(what), "rf_session_finish of update %u", s->seq);
    RF_CHECK(join_allreduce(s, &v, MPI_MIN, what, err));
    int first = (int)v;
    if (first == s->size || st != RF_OK)
        return st;
    if (first == s->rank)
        return rf_err_set(err, RF_ERR_MOVED, "%s", s->moved_err.msg);
    return rf_err_set(err, RF_ERR_PEER, "rank %d: update %u: rank %d registered a tensor "
                      "again between rf_session_begin and rf_session_finish", s->rank, s->seq,
                      first);
}

static rf_status_t finish_update(rf_session_t *s, rf_session_result_t *result)
{
    rf_err_clear(&s->last);
    if (result == NULL)
        return rf_err_set(&s->last, RF_ERR_INVALID, "rank %d: rf_session_finish: NULL result",
                          s->rank);
    memset(result, 0, sizeof(*result));
    result->failed_rank = -1;
    RF_CHECK(check_lost(s, "rf_session_finish"));
    if (!s->in_update)
        return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: rf_session_finish without "
                          "rf_session_begin", s->rank);
    rf_err_t *err = &s->pub_err;
    s->call = "rf_session_finish";
    rf_status_t st = finish_moved(s, s->pub_st, err);
    rf_err_clear(&s->moved_err);
    if (s->lost) { /* a rank is gone: no verdict can come; nothing moved */
        s->in_update = false;
        return rf_err_set(&s->last, s->lost_err.status, "%s", s->lost_err.msg);
    }
    /* the transfer's deadline from now: the engine may have paused for a while */
    s->deadline = rf_deadline_for_update(s->topo.timeout_s, s->topo.slack_s,
                                         s->man.payload_bytes, s->topo.min_bandwidth);
    rf_gate_verdict_t verdict;
    run_finish(s, st, s->pub_hooked ? &s->pub_hooks : &no_hooks, &verdict, &s->pub_tm, err);
    s->in_update = false;
    uint64_t agreed = s->pub_agreed;
    if (verdict.committed)
        s->version = agreed;
    result->rebuilds = s->pub_tm.rebuilds;
    result->committed = verdict.committed != 0;
    result->version = agreed;
    result->status = verdict.committed ? RF_OK
                                       : (int)(verdict.code ? verdict.code : RF_ERR_INTERNAL);
    result->failed_rank = verdict.committed ? -1 : verdict.rank;
    if (!verdict.committed)
        snprintf(result->reason, sizeof(result->reason), "%s",
                 verdict.reason[0] ? verdict.reason : err->msg);
    const rf_xfer_stats_t *xs = rf_xfer_stats(s->xfer);
    result->chunks_sent = xs->chunks_sent;
    result->chunks_received = xs->chunks_received;
    for (int r = 0; r < s->size; r++) {
        result->bytes_sent += xs->peers[r].bytes_sent;
        result->bytes_received += xs->peers[r].bytes_recv;
    }
    result->seconds = rf_time_now() - s->pub_t0;
    rf_gate_verdict_fini(&verdict);
    return RF_OK;
}

/* An armed local check is consumed by the update's gate (rf_session_check_wait), else by the
 * end of the rf_session_finish / rf_session_update call that did not reach it. */
rf_status_t rf_session_finish(rf_session_t *s, rf_session_result_t *result)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    rf_status_t st = finish_update(s, result);
    rf_session_check_drop(s);
    return st;
}

static rf_status_t update(rf_session_t *s, uint64_t version, rf_session_result_t *result)
{
    rf_err_clear(&s->last);
    if (result == NULL)
        return rf_err_set(&s->last, RF_ERR_INVALID, "rank %d: rf_session_update: NULL result",
                          s->rank);
    memset(result, 0, sizeof(*result));
    result->failed_rank = -1;
    RF_CHECK(check_lost(s, "rf_session_update"));
    if (!s->planned) {
        return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: rf_session_update before a "
                          "successful rf_session_plan", s->rank);
    }
    RF_CHECK(rf_session_begin(s, version));
    return finish_update(s, result);
}

rf_status_t rf_session_update(rf_session_t *s, uint64_t version, rf_session_result_t *result)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    rf_status_t st = update(s, version, result);
    rf_session_check_drop(s);
    return st;
}

rf_status_t rf_session_abort(rf_session_t *s, const char *reason)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    if (s->abort_err.status == RF_OK)
        rf_err_set(&s->abort_err, RF_ERR_STATE, "rank %d (%s): aborted by the caller: %s",
                   s->rank, rf_session_role_name(s), reason ? reason : "(no reason given)");
    return RF_OK;
}

/* ---- destroy ------------------------------------------------------------------------------ */

void rf_session_destroy(rf_session_t *s)
{
    if (s == NULL)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    /* a lost session's communicators are out of step: their collective teardown could wait
     * for a rank that left */
    rf_session_release(s, !fin && !s->lost);
}

void rf_session_destroy_local(rf_session_t *s, const char *reason)
{
    if (s == NULL)
        return;
    /* every other rank's next wait on s->comm (rf_session_wait) sees it: they fail within
     * milliseconds naming this rank instead of waiting out join_timeout_s */
    char why[RF_ERR_MSG_MAX];
    snprintf(why, sizeof(why), "rf_session_destroy_local: %s",
             reason && *reason ? reason : "(no reason given)");
    rf_session_notify_gone(s, why);
    /* memory only: refit's communicators and transport state stay with MPI until
     * MPI_Finalize (freeing them is collective) */
    rf_session_release(s, false);
}
