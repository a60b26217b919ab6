/*
 * refit: the session API (include/refit/session.h, docs/api.md): refit as a library that a
 * training job and an inference engine call with their own tensors.
 *
 * Built from the pieces refit-run's job uses (runtime/job*.c), without the job's weight
 * sources and oracle: the topology and model config (rf_model_load_topology), the placement,
 * the inventory, the manifest, the chunk plan, the gate's expectation, the trainer's shards
 * (BORROWED: tr.buf[] points at the registered tensors, as rf_trainer_use_arena borrows an
 * arena) and the rollout's runtime storage (BORROWED: rf_storage_register slots over the
 * engine's tensors), the reload plans, rf_ctl / rf_xfer / rf_gate. This step: host memory,
 * the mpi transport (broadcast and p2p), quantization none, trainer layout megatron or fsdp
 * (the shards rf_trainer_shard gives either way; F32 masters narrowed by the trainer's pack),
 * rollout layout vllm.
 *
 * Pieces copied from runtime/job_setup.c and runtime/job.c while those are being restructured
 * (to be shared once refit-run becomes a client of this API), each marked "copied from":
 * agree_status, p2p_senders, job_plan_build's dispatch, job_apply_pieces, the gate
 * expectation of broadcast and p2p mode, job_pack / p2p_pack (host paths), and run_update's
 * begin / transfer / gate / drain sequence.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/format.h"
#include "refit/formats.h"
#include "refit/hashes.h"
#include "refit/hashmap.h"
#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/p2p.h"
#include "refit/plan.h"
#include "refit/session.h"
#include "refit/sink.h"
#include "refit/storage.h"
#include "refit/time.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/transport.h"

/* One tensor this rank must register. */
typedef struct sess_tensor {
    char name[RF_NAME_MAX + 32];
    rf_slot_shape_t want; /* dtype, ndim, shape */
    int index;            /* trainer: inventory tensor; rollout: inventory module */
    bool derived;         /* rollout: a weight-derived slot (format owners with one) */
    int entry;            /* trainer, once planned: its manifest entry */
    bool registered;
    rf_signature_t sig;   /* the registered tensor (borrowed memory) */
} sess_tensor_t;

struct rf_session {
    MPI_Comm comm; /* refit's duplicate of the caller's */
    int rank, size, T, R;
    rf_session_options_t opt;
    rf_topology_t topo;
    rf_model_config_t cfg;
    bool cfg_ok;
    rf_rank_info_t me;
    rf_placement_t place;
    rf_inventory_t inv;
    bool inv_ok;
    MPI_Comm role_comm;
    rf_ctl_t *ctl;
    rf_xfer_t *xfer;
    bool p2p, integrity;
    /* what this rank registers */
    sess_tensor_t *ex;
    int nex, nreg;
    rf_map_t exmap;     /* name -> ex index */
    bool exmap_ok;
    int *ex_of_tensor;  /* trainer: [inv.ntensors] ex index or -1 */
    rf_err_t reg_err;   /* the first refused registration not yet reported */
    rf_err_t abort_err; /* rf_session_abort, for the next update */
    rf_err_t last;      /* the last failing call's text */
    /* plan */
    bool planned, broken;
    rf_manifest_t man;
    rf_chunk_item_t *items;
    rf_chunk_plan_t *cplan;
    int *senders, *receivers;
    rf_gate_expect_t expect;
    rf_p2p_schedule_t p2p_s;
    rf_trainer_t tr;
    bool tr_ready;
    rf_trainer_source_t src; /* the trainer as the transfer's source */
    int *item_tensor;        /* rollout, broadcast: [man.n] inventory tensor of each item */
    rf_format_t fmt;
    rf_storage_t st;
    bool st_ok;
    rf_plan_t plan;
    bool plan_ok;
    uint64_t plan_layers[RF_PLAN_MODES];
    /* updates */
    uint32_t seq;     /* the update counter of the control channel and the chunks */
    uint64_t version; /* of the last COMMITTED update */
};

static _Thread_local char create_err[RF_ERR_MSG_MAX];

int rf_session_abi_version(void) { return RF_SESSION_ABI_VERSION; }

const char *rf_session_status_name(int status) { return rf_status_name((rf_status_t)status); }
const char *rf_session_status_string(int status) { return rf_status_string((rf_status_t)status); }

static bool is_rollout(const rf_session_t *s) { return s->me.role == RF_ROLE_ROLLOUT; }

/* ---- copied from runtime/job_setup.c ------------------------------------------------------ */

/* Every rank learns the lowest failing rank's message (plain collective; setup and plan only).
 * Copied from job_setup.c:agree_status. */
static rf_status_t agree_status(MPI_Comm comm, rf_status_t st, rf_err_t *err)
{
    int size, rank, mine, first;
    struct {
        int status;
        char msg[RF_ERR_MSG_MAX];
    } rep;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    mine = st == RF_OK ? size : rank;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return rf_err_reset(err, RF_ERR_MPI, "rank %d: MPI_Allreduce failed agreeing a status",
                            rank);
    if (first == size)
        return RF_OK;
    rep.status = (int)(err->status != RF_OK ? err->status : st);
    snprintf(rep.msg, sizeof(rep.msg), "%s", err->msg);
    if (MPI_Bcast(&rep, (int)sizeof(rep), MPI_BYTE, first, comm) != MPI_SUCCESS)
        return rf_err_reset(err, RF_ERR_MPI, "rank %d: MPI_Bcast failed agreeing a status", rank);
    if (rank != first)
        rf_err_reset(err, (rf_status_t)rep.status, "%s", rep.msg);
    return (rf_status_t)rep.status;
}

/* p2p: what each trainer rank sends this rank of a tensor. Copied from job_setup.c:p2p_senders. */
static int p2p_senders(void *ctx, int tensor, int *snd, int64_t (*rect)[4], int max)
{
    rf_session_t *s = ctx;
    rf_owner_t own[RF_MAX_OWNERS];
    int n = rf_p2p_rects(&s->topo, &s->inv, s->rank, tensor, own);
    n = n < max ? n : max;
    for (int i = 0; i < n; i++) {
        snd[i] = own[i].rank;
        rect[i][0] = own[i].reg.r0;
        rect[i][1] = own[i].reg.r1;
        rect[i][2] = own[i].reg.c0;
        rect[i][3] = own[i].reg.c1;
    }
    return n;
}

/* ---- create ------------------------------------------------------------------------------- */

/* The shard of inventory tensor t that this trainer rank holds, as a slot shape: dim 0 its
 * rows, the rest its columns (DESIGN.md section 6). */
static rf_status_t trainer_want(const rf_session_t *s, const rf_tensor_t *t,
                                const rf_region_t *reg, rf_slot_shape_t *w, rf_err_t *err)
{
    memset(w, 0, sizeof(*w));
    w->dtype = t->dtype;
    w->ndim = t->ndim;
    if (t->ndim == 0)
        return RF_OK;
    uint64_t cols = rf_tensor_rows(t) ? t->numel / rf_tensor_rows(t) : 0;
    w->shape[0] = reg->r1 - reg->r0;
    for (int d = 1; d < t->ndim; d++)
        w->shape[d] = t->shape[d];
    if (t->ndim == 2)
        w->shape[1] = reg->c1 - reg->c0;
    else if (t->ndim > 2 && (reg->c0 != 0 || (uint64_t)reg->c1 != cols))
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "trainer rank %d: %s: a column split of a "
                          "%d-D tensor", s->rank, t->name, t->ndim);
    return RF_OK;
}

static rf_status_t ex_add(rf_session_t *s, const char *name, const rf_slot_shape_t *w, int index,
                          bool derived, int *cap, rf_err_t *err)
{
    if (s->nex == *cap) {
        int nc = *cap ? *cap * 2 : 256;
        sess_tensor_t *g = realloc(s->ex, (size_t)nc * sizeof(*g));
        if (g == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
        s->ex = g;
        *cap = nc;
    }
    sess_tensor_t *e = &s->ex[s->nex++];
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->want = *w;
    e->index = index;
    e->derived = derived;
    return RF_OK;
}

/* What this rank registers: a trainer rank its non-empty shard of every checkpoint tensor of its
 * stage (trainer.layout megatron or fsdp: rf_trainer_shard), a rollout rank every runtime slot of
 * every engine module (rollout.layout vllm), in module order (the storage registers a module's
 * slots together). */
static rf_status_t build_expected(rf_session_t *s, rf_err_t *err)
{
    int cap = 0;
    if (!is_rollout(s)) {
        s->ex_of_tensor = malloc(((size_t)s->inv.ntensors + 1) * sizeof(int));
        if (s->ex_of_tensor == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
        for (int i = 0; i < s->inv.ntensors; i++) {
            const rf_tensor_t *t = &s->inv.tensors[i];
            rf_region_t reg;
            rf_slot_shape_t w;
            s->ex_of_tensor[i] = -1;
            if (!rf_trainer_shard(&s->topo, &s->inv, t, &s->me, &reg))
                continue;
            RF_CHECK(trainer_want(s, t, &reg, &w, err));
            s->ex_of_tensor[i] = s->nex;
            RF_CHECK(ex_add(s, t->name, &w, i, false, &cap, err));
        }
    } else {
        RF_CHECK(rf_inventory_check_rollout(&s->inv, &s->me.rc, err));
        s->fmt.ops = rf_format_for(s->topo.quantization, (int)s->topo.r_backend);
        if (s->fmt.ops == NULL)
            return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: no format owner for quantization %s on "
                              "backend %s", s->topo.file, rf_quant_name(s->topo.quantization),
                              rf_backend_name(s->topo.r_backend));
        s->fmt.quant = s->topo.quantization;
        s->fmt.backend = (int)s->topo.r_backend;
        s->fmt.accel = NULL; /* host storage */
        for (int m = 0; m < s->inv.nmodules; m++) {
            rf_slot_shape_t model[RF_MODULE_MAX_SLOTS], rt[RF_MODULE_MAX_SLOTS];
            bool derived[RF_MODULE_MAX_SLOTS];
            int nmodel, nrt;
            RF_CHECK(rf_module_slots(&s->inv, m, &s->me.rc, model, &nmodel, err));
            RF_CHECK(s->fmt.ops->runtime_slots(&s->fmt, &s->inv, m, model, nmodel, rt, derived,
                                               &nrt, err));
            for (int i = 0; i < nrt; i++) {
                char name[RF_NAME_MAX + 32];
                snprintf(name, sizeof(name), "%.159s.%.31s", s->inv.modules[m].name, rt[i].name);
                RF_CHECK(ex_add(s, name, &rt[i], m, derived[i], &cap, err));
            }
        }
    }
    if (rf_map_init(&s->exmap, (size_t)s->nex + 1) != RF_OK)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    s->exmap_ok = true;
    for (int i = 0; i < s->nex; i++)
        if (rf_map_put(&s->exmap, rf_map_strkey(s->ex[i].name), (uint64_t)i) != RF_OK)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    return RF_OK;
}

/* What this step runs (the same topology everywhere: the same answer on every rank). */
static rf_status_t check_supported(const rf_session_t *s, rf_err_t *err)
{
    if (s->topo.transport != RF_TRANSPORT_MPI)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "%s: transfer.transport: %s: the session API "
                          "runs the mpi transport only in this version", s->topo.file,
                          rf_transport_name(s->topo.transport));
    if (s->topo.t_ngpus > 0 || s->topo.r_ngpus > 0)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "%s: %s.gpus: the session API takes host "
                          "tensors only in this version", s->topo.file,
                          s->topo.t_ngpus > 0 ? "trainer" : "rollout");
    if (s->topo.quantization != RF_QUANT_NONE)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "%s: quantization %s: the session API moves "
                          "unquantized models only in this version", s->topo.file,
                          rf_quant_name(s->topo.quantization));
    return RF_OK;
}

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

/* The thread level MPI gives this thread allows it to call MPI (session.h). Local. */
static rf_status_t check_mpi(rf_err_t *err)
{
    int level = MPI_THREAD_SINGLE, main_thread = 0;
    MPI_Query_thread(&level);
    MPI_Is_thread_main(&main_thread);
    if ((level == MPI_THREAD_SINGLE || level == MPI_THREAD_FUNNELED) && !main_thread)
        return rf_err_set(err, RF_ERR_STATE, "rf_session_create: called from a thread other "
                          "than MPI's main thread at thread level %s (refit calls MPI from "
                          "the calling thread: MPI_THREAD_SERIALIZED or MULTIPLE needed)",
                          level == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE"
                                                     : "MPI_THREAD_FUNNELED");
    return RF_OK;
}

static void session_free(rf_session_t *s, bool mpi);

static rf_status_t create(rf_session_t *s, MPI_Comm comm, const char *topology, rf_err_t *err)
{
    rf_status_t st;
    if (MPI_Comm_dup(comm, &s->comm) != MPI_SUCCESS) {
        s->comm = MPI_COMM_NULL;
        return rf_err_set(err, RF_ERR_MPI, "rf_session_create: MPI_Comm_dup failed");
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN); /* errors come back, never abort */
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    st = check_mpi(err);
    RF_CHECK(agree_status(s->comm, st, err));
    RF_CHECK(rf_model_load_topology(topology, s->comm, &s->topo, &s->cfg, err));
    s->cfg_ok = true;
    s->T = rf_topology_trainer_size(&s->topo);
    s->R = rf_topology_rollout_size(&s->topo);
    RF_CHECK(rf_topology_rank_info(&s->topo, s->rank, &s->me));
    RF_CHECK(rf_topology_place(&s->topo, s->comm, &s->place, err));
    RF_CHECK(agree_status(s->comm, check_supported(s, err), err));
    s->p2p = s->topo.mode == RF_MODE_P2P;
    s->integrity = s->opt.integrity > 0 || (s->opt.integrity == 0 && s->topo.integrity);
    if (MPI_Comm_split(s->comm, (int)s->me.role, s->rank, &s->role_comm) != MPI_SUCCESS) {
        s->role_comm = MPI_COMM_NULL;
        st = rf_err_set(err, RF_ERR_MPI, "rank %d: MPI_Comm_split failed", s->rank);
    }
    RF_CHECK(agree_status(s->comm, st, err));
    st = rf_inventory_build(&s->cfg, s->topo.quantization, s->topo.group_size, &s->inv, err);
    s->inv_ok = st == RF_OK;
    if (st == RF_OK) /* rollout.layout: the engine tensors' names and shapes */
        st = rf_inventory_apply_layout(&s->inv, s->topo.r_layout, err);
    if (st == RF_OK)
        st = build_expected(s, err);
    RF_CHECK(agree_status(s->comm, st, err));
    st = rf_ctl_create(s->comm, &s->ctl, err);
    RF_CHECK(agree_status(s->comm, st, err));
    st = rf_xfer_create(s->ctl, rf_transport_name(s->topo.transport), s->topo.chunk_bytes,
                        s->topo.buffers, &s->xfer, err);
    return agree_status(s->comm, st, err);
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
    rf_session_t *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        /* cannot tell the other ranks without a communicator of our own: no memory at all */
        snprintf(create_err, sizeof(create_err), "rf_session_create: out of memory");
        return RF_ERR_NOMEM;
    }
    s->comm = s->role_comm = MPI_COMM_NULL;
    if (options != NULL)
        s->opt = *options;
    st = create(s, comm, topology, &err);
    if (st != RF_OK) {
        snprintf(create_err, sizeof(create_err), "%s", err.msg);
        session_free(s, true);
        return st;
    }
    *s_p = s;
    return RF_OK;
}

/* ---- accessors ---------------------------------------------------------------------------- */

rf_session_role_t rf_session_role(const rf_session_t *s)
{
    return s != NULL && is_rollout(s) ? RF_SESSION_ROLLOUT : RF_SESSION_TRAINER;
}

const char *rf_session_role_name(const rf_session_t *s)
{
    return rf_session_role(s) == RF_SESSION_ROLLOUT ? "rollout" : "trainer";
}

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

static rf_status_t register_one(rf_session_t *s, const rf_tensor_desc_t *d, int k,
                                rf_err_t *err)
{
    const char *role = rf_session_role_name(s);
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
    sess_tensor_t *e = &s->ex[i];
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
    if (d->device != RF_DEVICE_HOST)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "rank %d (%s): %s: device %d: this version "
                          "takes host tensors only (device -1)", s->rank, role, d->name,
                          d->device);
    rf_signature_t sig;
    memset(&sig, 0, sizeof(sig));
    sig.ndim = d->ndim;
    sig.dtype = dt;
    sig.device = RF_DEVICE_HOST;
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
    if (!s->planned) {
        if (e->registered)
            return rf_err_set(err, RF_ERR_INVALID, "rank %d (%s): %s registered twice", s->rank,
                              role, d->name);
        e->registered = true;
        e->sig = sig;
        s->nreg++;
        return RF_OK;
    }
    /* after the plan: the caller re-allocated the tensor; refit uses the new memory from the
     * next update on (rollout: the plan sees the new signature and rebuilds at its begin) */
    if (is_rollout(s)) {
        st = rf_storage_rebind(&s->st, e->name, &sig, &e2);
        if (st != RF_OK)
            return rf_err_set(err, st, "rank %d (%s): %s", s->rank, role, e2.msg);
    } else {
        s->tr.buf[e->entry] = d->data;
    }
    e->sig = sig;
    return RF_OK;
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
    for (int k = 0; k < n && st == RF_OK; k++)
        st = register_one(s, &descs[k], k, &s->last);
    if (st != RF_OK && s->reg_err.status == RF_OK)
        rf_err_set(&s->reg_err, st, "%s", s->last.msg); /* the next collective carries it */
    return st;
}

/* ---- plan --------------------------------------------------------------------------------- */

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

/* The chunk plan, the senders and receivers and the gate's expectation, as job_setup builds
 * them for the mpi transport (copied from job_setup.c:job_setup, broadcast and p2p parts). */
static rf_status_t build_transfer(rf_session_t *s, rf_err_t *err)
{
    s->items = calloc((size_t)s->man.n + 1, sizeof(rf_chunk_item_t));
    s->item_tensor = calloc((size_t)s->man.n + 1, sizeof(int));
    s->senders = calloc((size_t)s->topo.t_pp + 1, sizeof(int));
    s->receivers = calloc((size_t)s->R + 1, sizeof(int));
    if (s->items == NULL || s->item_tensor == NULL || s->senders == NULL || s->receivers == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    for (int i = 0; i < s->man.n; i++) {
        const rf_tensor_t *t = &s->inv.tensors[s->man.entries[i].tensor];
        s->items[i].stage = s->man.entries[i].stage;
        s->items[i].rows = rf_tensor_rows(t);
        s->items[i].bytes = s->man.entries[i].nbytes;
        s->items[i].row_bytes = s->items[i].rows ? s->items[i].bytes / s->items[i].rows : 0;
        s->items[i].name = t->name;
        s->item_tensor[i] = s->man.entries[i].tensor;
    }
    uint64_t plan_bytes = rf_xfer_plan_bytes(s->topo.chunk_bytes, s->integrity);
    RF_CHECK(rf_chunk_plan_create(s->items, (size_t)s->man.n, plan_bytes, &s->cplan, err));
    for (int p = 0; p < s->topo.t_pp; p++)
        s->senders[p] = rf_topology_trainer_rank(&s->topo, 0, 0, 0, p);
    for (int r = 0; r < s->R; r++)
        s->receivers[r] = s->T + r;
    RF_CHECK(rf_gate_expect_init(&s->expect, s->size, err));
    uint64_t per = RF_CHUNK_HEADER_BYTES + (s->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
    if (s->p2p) {
        /* this rank's part of the schedule (the caller agrees rank 0's expectation from every
         * rank's part: rf_p2p_expect_agree, collective) */
        return rf_p2p_schedule_build_rank(&s->topo, &s->inv, &s->man, plan_bytes, s->rank,
                                          &s->p2p_s, err);
    }
    for (int p = 0; p < s->cplan->n_stages; p++) {
        const rf_chunk_stage_range_t *sr = &s->cplan->stages[p];
        uint64_t bytes = sr->payload_bytes + (uint64_t)sr->chunk_count * per;
        for (int r = 0; r < s->R; r++) {
            s->expect.chunks[(size_t)s->senders[p] * s->size + s->receivers[r]] += sr->chunk_count;
            s->expect.bytes[(size_t)s->senders[p] * s->size + s->receivers[r]] += bytes;
        }
    }
    return RF_OK;
}

/* Trainer: the shard buffers are the registered tensors (borrowed, read in place). */
static rf_status_t borrow_trainer(rf_session_t *s, rf_err_t *err)
{
    uint64_t *offs = malloc(((size_t)s->man.n + 1) * sizeof(uint64_t));
    char none = 0;
    if (offs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    for (int i = 0; i < s->man.n; i++)
        offs[i] = UINT64_MAX;
    rf_trainer_use_arena(&s->tr, &none, offs); /* frees its own buffers; buf[] all NULL */
    free(offs);
    for (int i = 0; i < s->man.n; i++) {
        int t = s->man.entries[i].tensor;
        int k = s->ex_of_tensor[t];
        if (s->tr.has[i] != (k >= 0))
            return rf_err_set(err, RF_ERR_INTERNAL, "trainer rank %d: %s: shard disagreement",
                              s->rank, s->man.entries[i].name);
        if (k < 0)
            continue;
        const rf_region_t *r = &s->tr.reg[i];
        RF_CHECK(rf_trainer_set_source_dtype(&s->tr, i, s->ex[k].sig.dtype, err));
        uint64_t bytes = (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0) *
                         rf_dtype_size(s->ex[k].sig.dtype);
        if (bytes != rf_signature_bytes(&s->ex[k].sig))
            return rf_err_set(err, RF_ERR_INTERNAL, "trainer rank %d: %s: %llu registered bytes "
                              "for a %llu-byte shard", s->rank, s->ex[k].name,
                              (unsigned long long)rf_signature_bytes(&s->ex[k].sig),
                              (unsigned long long)bytes);
        s->tr.buf[i] = s->ex[k].sig.data;
        s->ex[k].entry = i;
    }
    return RF_OK;
}

/* Rollout: the runtime storage is the registered tensors (borrowed slots), then the plan. */
static rf_status_t build_rollout(rf_session_t *s, rf_err_t *err)
{
    RF_CHECK(rf_storage_init(&s->st, s->inv.nmodules, err));
    s->st_ok = true;
    for (int i = 0; i < s->nex; i++)
        RF_CHECK(rf_storage_register(&s->st, s->ex[i].index, s->ex[i].name, s->ex[i].derived,
                                     &s->ex[i].sig, err));
    rf_reload_policy_t pol = s->opt.layerwise ? RF_POLICY_LAYERWISE : RF_POLICY_AUTO;
    /* copied from job_setup.c:job_plan_build */
    rf_status_t st = s->p2p ? rf_plan_build_p2p(&s->plan, &s->inv, &s->me.rc, &s->st, &s->fmt,
                                                pol, p2p_senders, s, err)
                            : rf_plan_build(&s->plan, &s->inv, &s->me.rc, &s->st, &s->fmt, pol,
                                            err);
    RF_CHECK(st);
    s->plan_ok = true;
    memcpy(s->plan_layers, s->plan.stats.layers, sizeof(s->plan_layers));
    for (int i = 0; i < s->man.n; i++)
        RF_CHECK(rf_plan_set_source_dtype(&s->plan, s->man.entries[i].tensor,
                                          s->man.entries[i].dtype, err));
    return RF_OK;
}

/* Every rank's counts and the plan hash (collective). */
static rf_status_t plan_info(rf_session_t *s, rf_session_plan_info_t *info, rf_err_t *err)
{
    uint64_t mine[RF_PLAN_MODES] = {0, 0, 0}, sum[RF_PLAN_MODES], h = 0;
    if (is_rollout(s)) {
        memcpy(mine, s->plan_layers, sizeof(mine));
        uint64_t *dec = calloc((size_t)s->plan.nlayers * 2 + 1, sizeof(uint64_t));
        if (dec == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
        for (int l = 0; l < s->plan.nlayers; l++) {
            dec[2 * l] = (uint64_t)s->plan.layers[l].module;
            dec[2 * l + 1] = (uint64_t)s->plan.layers[l].mode;
        }
        h = rf_hash64(dec, (size_t)s->plan.nlayers * 2 * sizeof(uint64_t));
        free(dec);
    }
    uint64_t *all = calloc((size_t)s->size + 3, sizeof(uint64_t));
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
    if (MPI_Allreduce(mine, sum, RF_PLAN_MODES, MPI_UINT64_T, MPI_SUM, s->comm) != MPI_SUCCESS ||
        MPI_Allgather(&h, 1, MPI_UINT64_T, all + 3, 1, MPI_UINT64_T, s->comm) != MPI_SUCCESS ||
        MPI_Allreduce(nar, any, s->man.n, MPI_UINT8_T, MPI_MAX, s->comm) != MPI_SUCCESS) {
        free(all);
        free(nar);
        free(any);
        return rf_err_set(err, RF_ERR_MPI, "rank %d: agreeing the plan counts failed", s->rank);
    }
    for (int i = 0; i < s->man.n; i++)
        narrowed += any[i];
    all[0] = rf_topology_hash(&s->topo);
    all[1] = s->man.digest;
    all[2] = rf_hash64(any, (size_t)s->man.n);
    if (info != NULL) {
        memset(info, 0, sizeof(*info));
        memcpy(info->layers, sum, sizeof(info->layers));
        info->hash = rf_hash64(all, ((size_t)s->size + 3) * sizeof(uint64_t));
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
    rf_status_t st = check_registered(s, err);
    rf_err_clear(&s->reg_err); /* reported now, on every rank */
    RF_CHECK(agree_status(s->comm, st, err));
    /* past this point a failure is the topology's or the library's: not recoverable */
    s->broken = true;
    st = RF_OK;
    if (s->rank == 0)
        st = rf_manifest_build(&s->inv, &s->topo, NULL, NULL, &s->man, err);
    RF_CHECK(agree_status(s->comm, st, err));
    RF_CHECK(rf_manifest_agree(&s->man, 0, &s->inv, &s->topo, s->comm, err));
    RF_CHECK(agree_status(s->comm, build_transfer(s, err), err));
    if (s->p2p) {
        uint64_t per = RF_CHUNK_HEADER_BYTES + (s->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
        RF_CHECK(agree_status(
            s->comm, rf_p2p_expect_agree(&s->p2p_s, s->rank, per, s->comm, &s->expect, err), err));
    }
    st = RF_OK;
    if (!is_rollout(s)) {
        st = rf_trainer_init(&s->tr, &s->topo, &s->inv, &s->man, s->cplan, &s->me, s->role_comm,
                             err);
        s->tr_ready = st == RF_OK;
        if (st == RF_OK) /* the stage gather on the session's transport */
            st = rf_trainer_attach(&s->tr, s->xfer, err);
        if (st == RF_OK)
            st = borrow_trainer(s, err);
    } else {
        st = build_rollout(s, err);
    }
    RF_CHECK(agree_status(s->comm, st, err));
    RF_CHECK(agree_status(s->comm, plan_info(s, info, err), err));
    s->broken = false;
    s->planned = true;
    return RF_OK;
}

/* ---- update ------------------------------------------------------------------------------- */

/* This rank's reasons to refuse the update at its begin (local). */
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

/* The transfer of one update on this rank: the trainer's source and the rollout's sink take
 * each chunk straight from the transport, as in refit-run's job (runtime/job.c run_update,
 * without production, fault hooks and the colocated / nccl paths). */
static rf_status_t transfer(rf_session_t *s, double deadline, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    rf_xfer_config_t cfg = {.update = s->seq,
                            .plan = s->cplan,
                            .stage_senders = s->senders,
                            .receivers = s->receivers,
                            .n_receivers = s->R,
                            .deadline = deadline,
                            .fault = RF_XFER_FAULT_NONE,
                            .integrity = s->integrity,
                            .items = s->items,
                            .complete = rf_sink_complete};
    s->src.tr = &s->tr;
    s->src.update = s->seq;
    s->src.deadline = deadline;
    s->src.rects = NULL;
    if (is_rollout(s)) {
        rf_sink_t sink = {.plan = &s->plan, .item_tensor = s->item_tensor};
        if (s->p2p) {
            const rf_p2p_recv_t *me = rf_p2p_schedule_find(&s->p2p_s, s->rank);
            cfg.stage_senders = me->senders;
            cfg.plan = me->plan;
            cfg.items = me->items;
            cfg.receivers = &me->rank;
            cfg.n_receivers = 1;
            sink.rects = me->rects;
            cfg.any_order = 1; /* whichever sender is ready (docs/simulate.md) */
        }
        st = rf_xfer_recv(s->xfer, &cfg, rf_sink_receive, &sink, err);
        if (st == RF_OK) {
            st = rf_plan_finalize(&s->plan, err);
            if (st != RF_OK)
                rf_ctl_abort(s->ctl, st, err->msg);
        }
    } else if (s->p2p) {
        /* receivers in world-rank order on every sender: no cycle of waits; from its own
         * first receiver where receivers take any ready sender (job.c) */
        size_t nr = s->p2p_s.nrecv, q0 = 0;
        if (rf_xfer_caps(s->xfer) & RF_XFER_CAP_ANY_ORDER) {
            int r0 = s->T + rf_xfer_p2p_first_receiver(s->rank, s->T, s->R);
            while (q0 < nr && s->p2p_s.recv[q0].rank < r0)
                q0++;
            if (q0 == nr)
                q0 = 0;
        }
        for (size_t q = 0; q < nr && st == RF_OK; q++) {
            const size_t r = (q0 + q) % nr;
            const rf_p2p_recv_t *rv = &s->p2p_s.recv[r];
            int k = rf_p2p_recv_stage(rv, s->rank);
            if (k < 0 || rv->plan->stages[k].chunk_count == 0)
                continue;
            cfg.stage_senders = rv->senders;
            cfg.plan = rv->plan;
            cfg.items = rv->items;
            cfg.receivers = &rv->rank;
            cfg.n_receivers = 1;
            s->src.rects = rv->rects;
            st = rf_xfer_send(s->xfer, &cfg, rf_trainer_source_pack, &s->src, err);
        }
    } else if (s->tr.sender) {
        st = rf_xfer_send(s->xfer, &cfg, rf_trainer_source_pack, &s->src, err);
    } else {
        st = rf_trainer_contribute(&s->tr, s->seq, s->topo.buffers, deadline, err);
        if (st != RF_OK && st != RF_ERR_PEER)
            rf_ctl_abort(s->ctl, st, err->msg);
    }
    return st;
}

rf_status_t rf_session_update(rf_session_t *s, uint64_t version, rf_session_result_t *result)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    rf_err_clear(&s->last);
    if (result == NULL)
        return rf_err_set(&s->last, RF_ERR_INVALID, "rank %d: rf_session_update: NULL result",
                          s->rank);
    memset(result, 0, sizeof(*result));
    result->failed_rank = -1;
    if (!s->planned)
        return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: rf_session_update before a "
                          "successful rf_session_plan", s->rank);
    double t0 = rf_time_now();
    rf_err_t err, e2;
    rf_err_clear(&err);
    rf_err_clear(&e2);
    /* the version: trainer rank 0's (world rank 0 is always a trainer) */
    uint64_t agreed = version != 0 ? version : s->version + 1;
    if (MPI_Bcast(&agreed, 1, MPI_UINT64_T, 0, s->comm) != MPI_SUCCESS)
        return rf_err_set(&s->last, RF_ERR_MPI, "rank %d: MPI_Bcast of the version failed",
                          s->rank);
    s->seq++;
    rf_ctl_begin(s->ctl, s->seq, &e2);
    double deadline = rf_deadline_for_update(s->topo.timeout_s, s->topo.slack_s,
                                             s->man.payload_bytes, s->topo.min_bandwidth);
    rf_err_t xerr;
    rf_err_clear(&xerr);
    rf_status_t xst = rf_xfer_begin(s->xfer, s->seq, deadline, &xerr);
    if (!is_rollout(s))
        rf_trainer_begin(&s->tr);
    rf_status_t st = begin_local(s, version, agreed, &err);
    if (st == RF_OK && xst != RF_OK)
        st = rf_err_set(&err, xst, "%s", xerr.msg);
    rf_err_clear(&s->abort_err);
    rf_err_clear(&s->reg_err);
    uint64_t rebuilds = is_rollout(s) ? s->plan.stats.rebuilds : 0;
    if (st == RF_OK && is_rollout(s))
        st = rf_plan_begin(&s->plan, s->seq, &err); /* rebuilds on a rebound tensor */
    if (is_rollout(s))
        result->rebuilds = s->plan.stats.rebuilds - rebuilds;
    rf_err_clear(&e2);
    rf_status_t ag = rf_ctl_agree(s->ctl, s->seq, st, err.msg, deadline, &e2);
    if (st == RF_OK && ag != RF_OK) {
        st = ag;
        rf_err_set(&err, ag, "%s", e2.msg);
    }
    if (st == RF_OK)
        st = transfer(s, deadline, &err);

    /* the completion gate (job.c:run_update) */
    rf_gate_record_t rec;
    rf_gate_verdict_t verdict;
    memset(&rec, 0, sizeof(rec));
    memset(&verdict, 0, sizeof(verdict));
    const rf_xfer_stats_t *xs = rf_xfer_stats(s->xfer);
    rf_gate_record_set_result(&rec, s->ctl, st, &err);
    rec.nranks = s->size;
    rec.peers = xs->peers;
    if (is_rollout(s)) {
        memcpy(rec.mode_layers, s->plan.stats.layers, sizeof(rec.mode_layers));
        memcpy(rec.plan_mode_layers, s->plan_layers, sizeof(rec.plan_mode_layers));
    }
    rec.manifest_digest = s->man.digest;
    rf_err_clear(&e2);
    rf_gate_run(s->ctl, s->seq, &rec, s->rank == 0 ? &s->expect : NULL, deadline, &verdict, &e2);
    if (!verdict.committed) {
        /* leave both communicators clean for the next update (bounded: after the verdict) */
        rf_err_t de;
        double drain_deadline = rf_time_now() + 30.0;
        rf_err_clear(&de);
        if (verdict.posted_from != NULL)
            rf_xfer_drain(s->xfer, verdict.posted_from, drain_deadline, &de);
        rf_err_clear(&de);
        if (!is_rollout(s))
            rf_trainer_drain(&s->tr, s->seq, drain_deadline, &de);
        if (is_rollout(s) && s->plan.in_update)
            rf_plan_abort(&s->plan);
    } else {
        s->version = agreed;
    }
    result->committed = verdict.committed != 0;
    result->version = agreed;
    result->status = verdict.committed ? RF_OK
                                       : (int)(verdict.code ? verdict.code : RF_ERR_INTERNAL);
    result->failed_rank = verdict.committed ? -1 : verdict.rank;
    if (!verdict.committed)
        snprintf(result->reason, sizeof(result->reason), "%s",
                 verdict.reason[0] ? verdict.reason : e2.msg[0] ? e2.msg : err.msg);
    result->chunks_sent = xs->chunks_sent;
    result->chunks_received = xs->chunks_received;
    for (int r = 0; r < s->size; r++) {
        result->bytes_sent += xs->peers[r].bytes_sent;
        result->bytes_received += xs->peers[r].bytes_recv;
    }
    result->seconds = rf_time_now() - t0;
    rf_gate_verdict_fini(&verdict);
    return RF_OK;
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

/* mpi: the collective teardown (false once MPI is finalized: memory only). */
static void session_free(rf_session_t *s, bool mpi)
{
    if (s->tr_ready) /* its stage gather first: it runs on the transfer engine */
        rf_trainer_free(&s->tr); /* borrowed buffers: not freed */
    rf_trainer_source_free(&s->src);
    if (mpi && s->xfer)
        rf_xfer_destroy(s->xfer);
    if (mpi && s->ctl)
        rf_ctl_destroy(s->ctl);
    if (s->plan_ok)
        rf_plan_free(&s->plan);
    if (s->st_ok)
        rf_storage_free(&s->st); /* registered slots: borrowed, not freed */
    rf_chunk_plan_destroy(s->cplan);
    rf_p2p_schedule_free(&s->p2p_s);
    rf_gate_expect_fini(&s->expect);
    free(s->items);
    free(s->item_tensor);
    free(s->senders);
    free(s->receivers);
    rf_manifest_free(&s->man);
    if (s->exmap_ok)
        rf_map_free(&s->exmap);
    free(s->ex);
    free(s->ex_of_tensor);
    if (s->inv_ok)
        rf_inventory_free(&s->inv);
    if (s->cfg_ok)
        rf_model_config_free(&s->cfg);
    if (mpi && s->role_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->role_comm);
    if (mpi && s->comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->comm);
    free(s);
}

void rf_session_destroy(rf_session_t *s)
{
    if (s == NULL)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    session_free(s, !fin);
}
