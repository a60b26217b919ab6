/*
 * refit: the nccl transport (include/refit/transport_nccl.h; DESIGN.md sections 9 and 10).
 * Compiled only when CUDA and NCCL are found (CMake: REFIT_HAVE_NCCL); otherwise
 * transport/transport_nccl_none.c stands in.
 *
 * State per xfer: one NCCL communicator per layout entry this rank is in (each with the MPI
 * communicator of its members, split off world at setup, for the unique id), a communication
 * stream, a copy stream, B device chunk buffers per direction and B pinned host slots per
 * direction, and per slot an h2d event, a communication event and an unpack event (the latter
 * on the accelerator's default stream). One update is one pipeline over this rank's chunks in
 * plan order (post up to B ahead, complete in order); every wait is rf_ctl_wait_fn over
 * cudaEventQuery / ncclCommGetAsyncError, so ABORT and the deadline end it. Any error aborts
 * every communicator of this rank at once (ncclCommAbort); re-creation happens at the next
 * rf_xfer_nccl_begin, on every member, after the FAILED verdict made every rank call
 * rf_xfer_nccl_fail.
 *
 * NCCL API used: ncclGetUniqueId, ncclCommInitRankConfig (config.blocking = 0),
 * ncclCommGetAsyncError, ncclGetLastError, ncclGetErrorString, ncclCommAbort,
 * ncclCommFinalize, ncclCommDestroy, ncclGroupStart / End, ncclBroadcast, ncclSend, ncclRecv:
 * all in NCCL 2.28.3 (the GPU host's) and much older.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "control_int.h"
#include "refit/checks.h"
#include "refit/log.h"
#include "refit/transport_nccl.h"
#include "xfer_int.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "refit's nccl transport needs NCCL 2.14 or newer (non-blocking communicators)"
#endif

/* Seconds the streams get to drain after ncclCommAbort, and teardown's finalize budget. */
#define RF_NCCL_DRAIN_S 10.0
#define RF_NCCL_FINALIZE_S 5.0

typedef struct nccl_comm {
    MPI_Comm mpi;    /* the members, MPI rank == communicator rank; MPI_COMM_NULL elsewhere */
    ncclComm_t comm; /* NULL: not created, or aborted */
    int rank;        /* this rank's communicator rank, -1 when not a member */
    int size;
    int stage;
    int gather;      /* the stage's trainer-only gather communicator */
    int *ranks;      /* [size] world ranks, owned */
} nccl_comm_t;

typedef struct rf_nccl_state rf_nccl_state_t;

struct rf_nccl_state {
    int p2p;
    int ncomms;
    nccl_comm_t *comms; /* [ncomms] every layout entry (members or not), owned */
    int nmine;          /* entries this rank is a member of */
    int device;
    rf_accel_t *accel;  /* borrowed; NULL: unpacks complete when the callback returns */
    int B;
    size_t slot_bytes;
    cudaStream_t comm_stream, copy_stream;
    void **dsend, **drecv; /* [B] device chunk buffers (allocated on first use) */
    void **hsend, **hrecv; /* [B] pinned host slots */
    cudaEvent_t *h2d_ev, *comm_ev;   /* [B] */
    rf_accel_event_t **unpack_ev;    /* [B] on accel's default stream */
    int *unpack_busy;                /* [B] an unpack event is recorded and not yet seen done */
    void *dgather;                   /* stage gather: device staging (slot_bytes, on first use) */
    cudaEvent_t gather_ev;           /* stage gather: its last d2h / send completed */
    int ready;                       /* communicators initialized and not aborted */
    int wedged;                      /* the streams did not drain after an abort */
    char why[RF_ERR_MSG_MAX];        /* why the communicators are not ready */
    rf_xfer_nccl_counters_t counters;
};

bool rf_xfer_nccl_built(void)
{
    return true;
}

/* x's nccl state (rf_xfer_nccl_setup); NULL when x is not on nccl or not set up. */
static rf_nccl_state_t *nccl_of(const rf_xfer_t *x)
{
    return x != NULL && x->ops == rf_xfer_nccl_ops() ? x->priv : NULL;
}

/* ---- teardown and abort ------------------------------------------------------------------ */

typedef struct drain_ctx {
    rf_nccl_state_t *s;
} drain_ctx_t;

static int streams_idle(void *vctx, rf_err_t *err)
{
    drain_ctx_t *d = vctx;
    cudaStream_t ss[2] = {d->s->comm_stream, d->s->copy_stream};
    for (int i = 0; i < 2; i++) {
        if (ss[i] == NULL)
            continue;
        cudaError_t rc = cudaStreamQuery(ss[i]);
        if (rc == cudaErrorNotReady)
            return 0;
        if (rc != cudaSuccess)
            return (int)rf_cuda_error(rc, "cudaStreamQuery", __FILE__, __LINE__, err);
    }
    return 1;
}

/* ncclCommAbort on every communicator of this rank still alive, then a bounded wait until
 * the streams drained (an aborted kernel returns). Marks the set for re-creation. */
static void abort_all(rf_xfer_t *x, const char *why)
{
    rf_nccl_state_t *s = nccl_of(x);
    int n = 0;
    if (s->device >= 0)
        cudaSetDevice(s->device);
    for (int k = 0; k < s->ncomms; k++) {
        nccl_comm_t *c = &s->comms[k];
        if (c->comm == NULL)
            continue;
        ncclResult_t rc = ncclCommAbort(c->comm);
        if (rc != ncclSuccess && rc != ncclInProgress)
            rf_warn("rank %d: ncclCommAbort (stage %d communicator): %s", x->rank, c->stage,
                    ncclGetErrorString(rc));
        c->comm = NULL;
        s->counters.aborts++;
        n++;
    }
    s->ready = 0;
    s->counters.ready = 0;
    if (why != NULL && why[0])
        snprintf(s->why, sizeof(s->why), "%s", why);
    if (n > 0)
        rf_info("rank %d: ncclCommAbort on %d communicator(s): %s", x->rank, n,
                why ? why : "");
    drain_ctx_t d = {s};
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = rf_ctl_wait_fn(x->ctl, streams_idle, &d, rf_time_now() + RF_NCCL_DRAIN_S,
                                    RF_CTL_WAIT_NO_ABORT, &e);
    if (st != RF_OK) {
        s->wedged = 1;
        rf_error("rank %d: nccl: the streams did not drain within %.0f s after ncclCommAbort%s%s",
                 x->rank, RF_NCCL_DRAIN_S, e.msg[0] ? ": " : "", e.msg);
    }
}

typedef struct fin_ctx {
    rf_nccl_state_t *s;
} fin_ctx_t;

static int finalized(void *vctx, rf_err_t *err)
{
    fin_ctx_t *f = vctx;
    for (int k = 0; k < f->s->ncomms; k++) {
        nccl_comm_t *c = &f->s->comms[k];
        ncclResult_t a = ncclSuccess;
        if (c->comm == NULL)
            continue;
        ncclResult_t rc = ncclCommGetAsyncError(c->comm, &a);
        if (rc != ncclSuccess)
            return (int)rf_nccl_error(rc, c->comm, "ncclCommGetAsyncError", __FILE__, __LINE__,
                                      err);
        if (a == ncclInProgress)
            return 0;
        if (a != ncclSuccess)
            return (int)rf_nccl_error(a, c->comm, "ncclCommFinalize", __FILE__, __LINE__, err);
    }
    return 1;
}

static void nccl_state_destroy(rf_xfer_t *x)
{
    rf_nccl_state_t *s = nccl_of(x);
    if (s == NULL)
        return;
    if (s->device >= 0)
        cudaSetDevice(s->device);
    /* a clean end: finalize (non-blocking, polled, bounded) then destroy; else abort */
    int live = 0;
    for (int k = 0; k < s->ncomms; k++)
        if (s->comms[k].comm != NULL) {
            live++;
            if (s->ready)
                ncclCommFinalize(s->comms[k].comm); /* ncclInProgress: polled below */
        }
    if (live > 0 && s->ready) {
        fin_ctx_t f = {s};
        rf_err_t e;
        rf_err_clear(&e);
        if (rf_ctl_wait_fn(x->ctl, finalized, &f, rf_time_now() + RF_NCCL_FINALIZE_S,
                           RF_CTL_WAIT_NO_ABORT, &e) == RF_OK) {
            for (int k = 0; k < s->ncomms; k++)
                if (s->comms[k].comm != NULL) {
                    ncclCommDestroy(s->comms[k].comm);
                    s->comms[k].comm = NULL;
                }
        }
    }
    if (live > 0)
        abort_all(x, NULL); /* whatever is left */
    if (s->dgather)
        cudaFree(s->dgather);
    if (s->gather_ev)
        cudaEventDestroy(s->gather_ev);
    for (int b = 0; b < s->B; b++) {
        if (s->dsend && s->dsend[b])
            cudaFree(s->dsend[b]);
        if (s->drecv && s->drecv[b])
            cudaFree(s->drecv[b]);
        if (s->hsend && s->hsend[b])
            cudaFreeHost(s->hsend[b]);
        if (s->hrecv && s->hrecv[b])
            cudaFreeHost(s->hrecv[b]);
        if (s->h2d_ev && s->h2d_ev[b])
            cudaEventDestroy(s->h2d_ev[b]);
        if (s->comm_ev && s->comm_ev[b])
            cudaEventDestroy(s->comm_ev[b]);
        if (s->unpack_ev && s->unpack_ev[b])
            s->accel->ops->event_destroy(s->unpack_ev[b]);
    }
    if (s->comm_stream)
        cudaStreamDestroy(s->comm_stream);
    if (s->copy_stream)
        cudaStreamDestroy(s->copy_stream);
    for (int k = 0; s->comms != NULL && k < s->ncomms; k++) {
        if (s->comms[k].mpi != MPI_COMM_NULL)
            MPI_Comm_free(&s->comms[k].mpi);
        free(s->comms[k].ranks);
    }
    free(s->comms);
    free(s->dsend);
    free(s->drecv);
    free(s->hsend);
    free(s->hrecv);
    free(s->h2d_ev);
    free(s->comm_ev);
    free(s->unpack_ev);
    free(s->unpack_busy);
    free(s);
    x->priv = NULL;
}

/* ---- setup ------------------------------------------------------------------------------- */

rf_status_t rf_xfer_nccl_setup(rf_xfer_t *x, const rf_nccl_layout_t *layout, int device,
                               rf_accel_t *accel, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    if (x == NULL || layout == NULL || layout->n <= 0)
        return rf_err_set(err, RF_ERR_INVALID, "transport nccl: no communicator layout");
    if (x->ops != rf_xfer_nccl_ops() || x->priv != NULL)
        return rf_err_set(err, RF_ERR_STATE, "transport nccl: xfer is not on nccl or already "
                          "set up");
    rf_nccl_state_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "transport nccl: out of memory");
    x->priv = s;
    s->p2p = layout->p2p;
    s->device = device;
    s->accel = accel;
    s->B = x->buffers;
    s->slot_bytes = (size_t)x->chunk_bytes;
    snprintf(s->why, sizeof(s->why), "not created yet");
    s->comms = calloc((size_t)layout->n, sizeof(*s->comms));
    s->dsend = calloc((size_t)s->B, sizeof(void *));
    s->drecv = calloc((size_t)s->B, sizeof(void *));
    s->hsend = calloc((size_t)s->B, sizeof(void *));
    s->hrecv = calloc((size_t)s->B, sizeof(void *));
    s->h2d_ev = calloc((size_t)s->B, sizeof(cudaEvent_t));
    s->comm_ev = calloc((size_t)s->B, sizeof(cudaEvent_t));
    s->unpack_ev = calloc((size_t)s->B, sizeof(rf_accel_event_t *));
    s->unpack_busy = calloc((size_t)s->B, sizeof(int));
    if (!s->comms || !s->dsend || !s->drecv || !s->hsend || !s->hrecv || !s->h2d_ev ||
        !s->comm_ev || !s->unpack_ev || !s->unpack_busy)
        st = rf_err_set(err, RF_ERR_NOMEM, "transport nccl: out of memory");
    if (s->comms != NULL) {
        s->ncomms = layout->n;
        for (int k = 0; k < layout->n; k++)
            s->comms[k].mpi = MPI_COMM_NULL; /* calloc's zero is not MPI_COMM_NULL */
    }
    /* the splits are collective over world: every rank runs all of them, failed or not */
    for (int k = 0; k < layout->n; k++) {
        const rf_nccl_comm_layout_t *lc = &layout->comms[k];
        int me = rf_nccl_comm_rank(lc, x->rank);
        MPI_Comm m = MPI_COMM_NULL;
        int rc = MPI_Comm_split(x->ctl->comm, me >= 0 ? 0 : MPI_UNDEFINED, me >= 0 ? me : 0,
                                &m);
        if (rc != MPI_SUCCESS && st == RF_OK)
            st = rf_err_set(err, RF_ERR_MPI, "transport nccl: MPI_Comm_split for the stage %d "
                            "communicator failed", lc->stage);
        if (s->comms == NULL) {
            if (m != MPI_COMM_NULL)
                MPI_Comm_free(&m);
            continue;
        }
        nccl_comm_t *c = &s->comms[k];
        c->mpi = rc == MPI_SUCCESS ? m : MPI_COMM_NULL;
        c->stage = lc->stage;
        c->gather = lc->gather;
        c->size = lc->n;
        c->rank = me;
        c->ranks = malloc(((size_t)lc->n + 1) * sizeof(int));
        if (c->ranks == NULL && st == RF_OK)
            st = rf_err_set(err, RF_ERR_NOMEM, "transport nccl: out of memory");
        else if (c->ranks != NULL)
            memcpy(c->ranks, lc->ranks, (size_t)lc->n * sizeof(int));
        if (c->rank >= 0)
            s->nmine++;
    }
    s->counters.comms = s->nmine;
    if (st != RF_OK || s->nmine == 0)
        goto out;
    if (device < 0) {
        st = rf_err_set(err, RF_ERR_INVALID, "transport nccl: rank %d is in %d NCCL "
                        "communicator(s) but has no GPU", x->rank, s->nmine);
        goto out;
    }
    RF_CUDA_CHECK_ERR_GOTO(cudaSetDevice(device), err, st, out);
    RF_CUDA_CHECK_ERR_GOTO(cudaStreamCreateWithFlags(&s->comm_stream, cudaStreamNonBlocking), err,
                           st, out);
    RF_CUDA_CHECK_ERR_GOTO(cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking), err,
                           st, out);
    for (int b = 0; b < s->B; b++) {
        RF_CUDA_CHECK_ERR_GOTO(cudaEventCreateWithFlags(&s->h2d_ev[b], cudaEventDisableTiming), err,
                               st, out);
        RF_CUDA_CHECK_ERR_GOTO(cudaEventCreateWithFlags(&s->comm_ev[b], cudaEventDisableTiming),
                               err, st, out);
        if (b == 0)
            RF_CUDA_CHECK_ERR_GOTO(cudaEventCreateWithFlags(&s->gather_ev, cudaEventDisableTiming),
                                   err, st, out);
        if (accel != NULL && (st = accel->ops->event_create(accel, &s->unpack_ev[b])) != RF_OK) {
            rf_err_set(err, st, "transport nccl: no unpack event on %s device %d",
                       accel->ops->name, accel->device);
            goto out;
        }
    }
out:
    if (st != RF_OK)
        nccl_state_destroy(x);
    return st;
}

/* ---- communicator creation -------------------------------------------------------------- */

typedef struct init_ctx {
    rf_nccl_state_t *s;
} init_ctx_t;

static int inits_done(void *vctx, rf_err_t *err)
{
    init_ctx_t *ic = vctx;
    for (int k = 0; k < ic->s->ncomms; k++) {
        nccl_comm_t *c = &ic->s->comms[k];
        ncclResult_t a = ncclSuccess;
        if (c->rank < 0)
            continue;
        ncclResult_t rc = ncclCommGetAsyncError(c->comm, &a);
        if (rc != ncclSuccess)
            return (int)rf_nccl_error(rc, c->comm, "ncclCommGetAsyncError", __FILE__, __LINE__,
                                      err);
        if (a == ncclInProgress)
            return 0;
        if (a != ncclSuccess)
            return (int)rf_nccl_error(a, c->comm, "ncclCommInitRankConfig", __FILE__, __LINE__,
                                      err);
    }
    return 1;
}

rf_status_t rf_xfer_nccl_begin(rf_xfer_t *x, double deadline, rf_err_t *err)
{
    rf_nccl_state_t *s = nccl_of(x);
    rf_status_t st = RF_OK;
    rf_err_t e;
    rf_err_clear(&e);
    if (s == NULL)
        return rf_err_set(err, RF_ERR_STATE, "transport nccl: not set up (rf_xfer_nccl_setup)");
    if (s->nmine == 0)
        return RF_OK;
    if (s->wedged)
        return rf_err_set(err, RF_ERR_CUDA, "rank %d: nccl: the streams of GPU %d never drained "
                          "after an earlier ncclCommAbort; restart the job", x->rank, s->device);
    if (s->ready) {
        /* alive: one look at the asynchronous error state */
        for (int k = 0; k < s->ncomms && st == RF_OK; k++) {
            nccl_comm_t *c = &s->comms[k];
            ncclResult_t a = ncclSuccess;
            if (c->rank < 0)
                continue;
            ncclResult_t rc = ncclCommGetAsyncError(c->comm, &a);
            if (rc != ncclSuccess || (a != ncclSuccess && a != ncclInProgress))
                st = rf_nccl_error(rc != ncclSuccess ? rc : a, c->comm, "ncclCommGetAsyncError",
                                   __FILE__, __LINE__, &e);
        }
        if (st == RF_OK)
            return RF_OK;
        goto fail;
    }
    abort_all(x, NULL); /* anything half-made by an earlier try */
    double t0 = rf_time_now();
    cudaError_t drc = cudaSetDevice(s->device);
    if (drc != cudaSuccess)
        st = rf_cuda_error(drc, "cudaSetDevice", __FILE__, __LINE__, &e);
    /* every member takes part in every MPI_Bcast of its communicators, in layout order,
     * failed or not, so no member waits in a broadcast nobody else reaches */
    for (int k = 0; k < s->ncomms; k++) {
        nccl_comm_t *c = &s->comms[k];
        struct {
            int ok;
            ncclUniqueId id;
        } msg;
        if (c->rank < 0)
            continue;
        memset(&msg, 0, sizeof(msg));
        if (c->rank == 0) {
            ncclResult_t rc = ncclGetUniqueId(&msg.id);
            msg.ok = rc == ncclSuccess && st == RF_OK;
            if (rc != ncclSuccess && st == RF_OK)
                st = rf_nccl_error(rc, NULL, "ncclGetUniqueId", __FILE__, __LINE__, &e);
        }
        int mrc = MPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, 0, c->mpi);
        if (mrc != MPI_SUCCESS && st == RF_OK)
            st = rf_err_set(&e, RF_ERR_MPI, "MPI_Bcast of the stage %d communicator's unique id "
                            "failed", c->stage);
        if (st == RF_OK && !msg.ok)
            st = rf_err_set(&e, RF_ERR_NCCL, "the stage %d communicator's rank 0 (world rank %d) "
                            "could not make a unique id", c->stage, c->ranks[0]);
        if (st != RF_OK)
            continue;
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        RF_NCCL_CHECK_GOTO(ncclCommInitRankConfig(&c->comm, c->size, msg.id, c->rank, &config),
                           c->comm, &e, st, next);
    next:;
    }
    if (st != RF_OK)
        goto fail;
    init_ctx_t ic = {s};
    st = rf_ctl_wait_fn(x->ctl, inits_done, &ic, deadline, 0, &e);
    if (st == RF_ERR_TIMEOUT)
        rf_err_reset(&e, st, "ncclCommInitRankConfig of %d communicator(s) did not complete by the "
                     "deadline", s->nmine);
    if (st != RF_OK)
        goto fail;
    s->ready = 1;
    s->counters.ready = 1;
    s->counters.inits++;
    s->counters.init_s = rf_time_now() - t0;
    s->why[0] = '\0';
    rf_info("rank %d: %d NCCL communicator(s) ready on GPU %d in %.3f s (creation %" PRIu64 ")",
            x->rank, s->nmine, s->device, s->counters.init_s, s->counters.inits);
    return RF_OK;

fail:
    rf_err_set(err, st, "rank %d: nccl communicators (update %u): %s", x->rank,
               rf_ctl_update(x->ctl), e.msg[0] ? e.msg : rf_status_string(st));
    abort_all(x, err ? err->msg : e.msg);
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
}

void rf_xfer_nccl_fail(rf_xfer_t *x)
{
    if (nccl_of(x) == NULL || nccl_of(x)->nmine == 0)
        return;
    abort_all(x, "the update failed (re-created at the next update)");
}

void rf_xfer_nccl_counters(const rf_xfer_t *x, rf_xfer_nccl_counters_t *c)
{
    if (nccl_of(x) == NULL) {
        memset(c, 0, sizeof(*c));
        return;
    }
    *c = nccl_of(x)->counters;
}

/* ---- one update ------------------------------------------------------------------------ */

typedef struct nccl_op {
    size_t chunk;
    int snd, rcv;
    int comm;      /* index into s->comms */
    int root;      /* broadcast: communicator rank of the sender */
    int to, from;  /* p2p: communicator ranks of the receiver (snd) and the sender (rcv) */
    int sender;    /* world rank of the chunk's sender */
    size_t bytes;  /* message: header + payload (+ trailer) */
    int send_skip; /* drop fault: the send part is not posted */
    int idle;      /* nothing posted (a dropped send-only op) */
} nccl_op_t;

typedef struct wait_ctx {
    cudaEvent_t ev;              /* when set: cudaEventQuery */
    rf_accel_event_t *aev;       /* when set: the accelerator's event_query */
    ncclComm_t comm;             /* when set: ncclCommGetAsyncError (InProgress = not done
                                    when ev and aev are unset) */
} wait_ctx_t;

static int wait_test(void *vctx, rf_err_t *err)
{
    wait_ctx_t *w = vctx;
    if (w->comm != NULL) {
        ncclResult_t a = ncclSuccess;
        ncclResult_t rc = ncclCommGetAsyncError(w->comm, &a);
        if (rc != ncclSuccess)
            return (int)rf_nccl_error(rc, w->comm, "ncclCommGetAsyncError", __FILE__, __LINE__,
                                      err);
        if (a != ncclSuccess && a != ncclInProgress)
            return (int)rf_nccl_error(a, w->comm, "asynchronous NCCL error", __FILE__, __LINE__,
                                      err);
        if (w->ev == NULL && w->aev == NULL)
            return a == ncclSuccess;
    }
    if (w->ev != NULL) {
        cudaError_t rc = cudaEventQuery(w->ev);
        if (rc == cudaErrorNotReady)
            return 0;
        if (rc != cudaSuccess)
            return (int)rf_cuda_error(rc, "cudaEventQuery", __FILE__, __LINE__, err);
        return 1;
    }
    if (w->aev != NULL) {
        bool done = false;
        rf_status_t st = w->aev->ops->event_query(w->aev, &done);
        if (st != RF_OK)
            return (int)rf_err_set(err, st, "unpack event query failed");
        return done;
    }
    return 1;
}

static rf_status_t wait_on(rf_xfer_t *x, wait_ctx_t *w, double deadline, const char *what,
                           rf_err_t *err)
{
    rf_status_t st = rf_ctl_wait_fn(x->ctl, wait_test, w, deadline, 0, err);
    if (st == RF_ERR_TIMEOUT)
        rf_err_reset(err, st, "deadline expired waiting for %s", what);
    return st;
}

static bool is_receiver(const rf_xfer_config_t *cfg, int rank)
{
    for (int i = 0; i < cfg->n_receivers; i++)
        if (cfg->receivers[i] == rank)
            return true;
    return false;
}

/* Allocates this rank's device / pinned slots of one direction on first use. */
static rf_status_t slots_ready(rf_nccl_state_t *s, int send, rf_err_t *err)
{
    void **d = send ? s->dsend : s->drecv, **h = send ? s->hsend : s->hrecv;
    for (int b = 0; b < s->B; b++) {
        if (d[b] == NULL)
            RF_CUDA_CHECK_ERR(cudaMalloc(&d[b], s->slot_bytes), err);
        if (h[b] == NULL)
            RF_CUDA_CHECK_ERR(cudaMallocHost(&h[b], s->slot_bytes), err);
    }
    return RF_OK;
}

/* Builds this rank's ops for cfg. *ops_p owned by the caller. */
static rf_status_t build_ops(rf_xfer_t *x, const rf_xfer_config_t *cfg, bool packs, bool unpacks,
                             nccl_op_t **ops_p, size_t *n_p, rf_err_t *err)
{
    rf_nccl_state_t *s = nccl_of(x);
    const rf_chunk_plan_t *plan = cfg->plan;
    const size_t trailer = cfg->integrity ? RF_CHUNK_TRAILER_BYTES : 0;
    const bool recv_me = unpacks && is_receiver(cfg, x->rank);
    nccl_op_t *ops = calloc(plan->n_chunks + 1, sizeof(*ops));
    size_t n = 0;
    if (ops == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "transport nccl: out of memory");
    for (size_t k = 0; k < plan->n_chunks; k++) {
        const rf_chunk_t *c = &plan->chunks[k];
        int sender = cfg->stage_senders[c->stage];
        nccl_op_t o = {.chunk = k, .sender = sender, .root = -1, .to = -1, .from = -1};
        o.snd = packs && sender == x->rank && cfg->n_receivers > 0;
        o.rcv = recv_me;
        if (!o.snd && !o.rcv)
            continue;
        if (s->p2p && o.snd && cfg->n_receivers != 1) {
            free(ops);
            return rf_err_set(err, RF_ERR_INVALID, "transport nccl p2p: one receiver per call "
                              "(got %d)", cfg->n_receivers);
        }
        int other = o.rcv ? sender : cfg->receivers[0];
        int ci = -1;
        for (int q = 0; q < s->ncomms && ci < 0; q++) {
            const nccl_comm_t *nc = &s->comms[q];
            if (nc->rank < 0 || nc->gather)
                continue;
            for (int i = 0; i < nc->size; i++)
                if (nc->ranks[i] == other)
                    ci = q;
        }
        if (ci < 0) {
            free(ops);
            return rf_err_set(err, RF_ERR_TOPOLOGY, "transport nccl: no communicator holds "
                              "ranks %d and %d (chunk seq %u, stage %d)", x->rank, other, c->seq,
                              c->stage);
        }
        const nccl_comm_t *nc = &s->comms[ci];
        int sr = -1, rr = -1;
        for (int i = 0; i < nc->size; i++) {
            if (nc->ranks[i] == sender)
                sr = i;
            if (o.snd && nc->ranks[i] == cfg->receivers[0])
                rr = i;
        }
        if (!s->p2p && sr != 0) {
            free(ops);
            return rf_err_set(err, RF_ERR_TOPOLOGY, "transport nccl: stage %d sender rank %d is "
                              "not rank 0 of the stage %d communicator", c->stage, sender,
                              nc->stage);
        }
        for (int i = 0; !s->p2p && o.snd && i < cfg->n_receivers; i++) {
            bool in = false;
            for (int m = 0; m < nc->size; m++)
                in |= nc->ranks[m] == cfg->receivers[i];
            if (!in) {
                free(ops);
                return rf_err_set(err, RF_ERR_TOPOLOGY, "transport nccl: receiver rank %d is not "
                                  "in the stage %d broadcast communicator", cfg->receivers[i],
                                  nc->stage);
            }
        }
        o.comm = ci;
        o.root = sr;
        o.from = sr;
        o.to = rr;
        o.bytes = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes + trailer;
        if (o.bytes > s->slot_bytes) {
            free(ops);
            return rf_err_set(err, RF_ERR_INVALID, "transport nccl: chunk seq %u of %zu bytes "
                              "exceeds the %zu-byte buffers", c->seq, o.bytes, s->slot_bytes);
        }
        ops[n++] = o;
    }
    *ops_p = ops;
    *n_p = n;
    return RF_OK;
}

rf_status_t rf_xfer_nccl_run(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                             void *pack_ctx, rf_xfer_recv_fn recv, void *recv_ctx,
                             rf_err_t *err)
{
    rf_nccl_state_t *s = nccl_of(x);
    const rf_chunk_plan_t *plan = cfg->plan;
    const rf_xfer_fault_t *f = &cfg->fault;
    const int B = s != NULL ? s->B : 1;
    nccl_op_t *ops = NULL;
    size_t nops = 0, posted = 0, done = 0;
    rf_status_t st = RF_OK;
    rf_err_t e;
    rf_err_clear(&e);
    const nccl_op_t *cur = NULL; /* the op an error names */
    bool dropped = false, dup_pending = false;
    unsigned char dup_header[RF_CHUNK_HEADER_BYTES] = {0};

    if (s == NULL) {
        st = rf_err_set(&e, RF_ERR_STATE, "not set up (rf_xfer_nccl_setup)");
        goto fail;
    }
    if (!s->ready) {
        st = rf_err_set(&e, RF_ERR_NCCL, "communicators not initialized (%s)", s->why);
        goto fail;
    }
    if (cfg->pack_device && cfg->integrity) {
        st = rf_err_set(&e, RF_ERR_INVALID, "pack_device has no integrity trailer (the payload "
                        "is not on the host to hash)");
        goto fail;
    }
    RF_CHECK_GOTO(build_ops(x, cfg, pack != NULL, recv != NULL, &ops, &nops, &e), st, fail);
    RF_CUDA_CHECK_ERR_GOTO(cudaSetDevice(s->device), &e, st, fail);
    for (size_t i = 0; i < nops; i++) {
        if (ops[i].snd)
            RF_CHECK_GOTO(slots_ready(s, 1, &e), st, fail);
        if (ops[i].rcv)
            RF_CHECK_GOTO(slots_ready(s, 0, &e), st, fail);
    }

    while (done < nops) {
        /* post up to B ahead of the oldest incomplete op */
        while (posted < nops && posted < done + (size_t)B) {
            nccl_op_t *o = &ops[posted];
            const rf_chunk_t *c = &plan->chunks[o->chunk];
            const int b = (int)(posted % (size_t)B);
            nccl_comm_t *nc = &s->comms[o->comm];
            cur = o;
            RF_CHECK_GOTO(rf_ctl_poll(x->ctl, &e), st, fail);
            if (o->rcv && s->unpack_busy[b]) {
                /* the slot's previous chunk must be unpacked before NCCL overwrites it */
                wait_ctx_t w = {.aev = s->unpack_ev[b]};
                double t0 = rf_time_now();
                st = wait_on(x, &w, cfg->deadline, "an unpack to finish", &e);
                x->stats.unpack_s += rf_time_now() - t0;
                if (st != RF_OK)
                    goto fail;
                s->unpack_busy[b] = 0;
            }
            if (o->snd) {
                int hit = f->dest < 0 || is_receiver(cfg, f->dest);
                if (hit && f->drop_seq == (int64_t)c->seq) {
                    dropped = true; /* a lost chunk: nothing more is sent to anyone */
                    rf_warn("fault: rank %d drops chunk %u and everything after it (update %u, "
                            "nccl)", x->rank, c->seq, cfg->update);
                }
                if (dropped && (o->rcv && s->p2p))
                    o->send_skip = 1; /* self: the receive is posted, never matched */
                else if (dropped)
                    o->idle = !o->rcv;
            }
            if (o->idle) {
                posted++;
                continue;
            }
            if (o->snd && !o->send_skip) {
                unsigned char *h = s->hsend[b];
                rf_chunk_header_write(h, cfg->update, c->seq, c->payload_bytes);
                double t0 = rf_time_now();
                st = pack(pack_ctx, c, &plan->pieces[c->piece_begin],
                          cfg->pack_device ? (unsigned char *)s->dsend[b] + RF_CHUNK_HEADER_BYTES
                                           : h + RF_CHUNK_HEADER_BYTES,
                          &e);
                x->stats.pack_s += rf_time_now() - t0;
                if (st != RF_OK)
                    goto fail;
                size_t covered = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
                if (cfg->integrity)
                    RF_CHECK_GOTO(rf_chunk_seal(h + covered, h, covered, NULL, 0, &e), st, fail);
                if (f->corrupt_seq == (int64_t)c->seq && c->payload_bytes > 0) {
                    h[RF_CHUNK_HEADER_BYTES + c->payload_bytes / 2] ^= 0x10;
                    rf_warn("fault: rank %d flipped a payload byte of chunk %u (update %u)",
                            x->rank, c->seq, cfg->update);
                }
                if (dup_pending) {
                    /* a duplicate on a collective: this message repeats the previous header */
                    memcpy(h, dup_header, sizeof(dup_header));
                    dup_pending = false;
                }
                if (f->dup_seq == (int64_t)c->seq && (f->dest < 0 || is_receiver(cfg, f->dest))) {
                    memcpy(dup_header, h, sizeof(dup_header));
                    dup_pending = true;
                    rf_warn("fault: rank %d repeats chunk %u's header in the next message "
                            "(update %u, nccl)", x->rank, c->seq, cfg->update);
                }
                /* pack_device: the payload was written in place on the device; only the
                 * header travels h2d */
                RF_CUDA_CHECK_ERR_GOTO(
                    cudaMemcpyAsync(s->dsend[b], h,
                                    cfg->pack_device ? RF_CHUNK_HEADER_BYTES : o->bytes,
                                    cudaMemcpyHostToDevice, s->copy_stream),
                    &e, st, fail);
                RF_CUDA_CHECK_ERR_GOTO(cudaEventRecord(s->h2d_ev[b], s->copy_stream), &e, st, fail);
                RF_CUDA_CHECK_ERR_GOTO(cudaStreamWaitEvent(s->comm_stream, s->h2d_ev[b], 0), &e, st,
                                       fail);
            }
            /* one group per chunk: the broadcast, or this rank's send and / or receive */
            RF_NCCL_CHECK_GOTO(ncclGroupStart(), nc->comm, &e, st, fail);
            if (!s->p2p) {
                void *sb = o->snd ? s->dsend[b] : s->drecv[b];
                void *rb = o->rcv ? s->drecv[b] : s->dsend[b];
                RF_NCCL_CHECK_GOTO(
                    ncclBroadcast(sb, rb, o->bytes, ncclUint8, o->root, nc->comm, s->comm_stream),
                    nc->comm, &e, st, group_fail);
            } else {
                if (o->snd && !o->send_skip)
                    RF_NCCL_CHECK_GOTO(
                        ncclSend(s->dsend[b], o->bytes, ncclUint8, o->to, nc->comm, s->comm_stream),
                        nc->comm, &e, st, group_fail);
                if (o->rcv)
                    RF_NCCL_CHECK_GOTO(ncclRecv(s->drecv[b], o->bytes, ncclUint8, o->from, nc->comm,
                                                s->comm_stream),
                                       nc->comm, &e, st, group_fail);
            }
            RF_NCCL_CHECK_GOTO(ncclGroupEnd(), nc->comm, &e, st, fail);
            {
                /* non-blocking communicator: the group is enqueued once the state leaves
                 * ncclInProgress; no other call on the stream before that */
                wait_ctx_t w = {.comm = nc->comm};
                double t0 = rf_time_now();
                st = wait_on(x, &w, cfg->deadline, "ncclGroupEnd to complete", &e);
                x->stats.wire_s += rf_time_now() - t0;
                if (st != RF_OK)
                    goto fail;
            }
            if (o->rcv)
                RF_CUDA_CHECK_ERR_GOTO(
                    cudaMemcpyAsync(s->hrecv[b], s->drecv[b],
                                    cfg->integrity ? o->bytes : RF_CHUNK_HEADER_BYTES,
                                    cudaMemcpyDeviceToHost, s->comm_stream),
                    &e, st, fail);
            RF_CUDA_CHECK_ERR_GOTO(cudaEventRecord(s->comm_ev[b], s->comm_stream), &e, st, fail);
            if (o->snd && !o->send_skip) {
                for (int i = 0; i < cfg->n_receivers; i++) {
                    int peer = cfg->receivers[i];
                    if (peer == x->rank)
                        continue;
                    x->stats.peers[peer].chunks_sent++;
                    x->stats.peers[peer].bytes_sent += o->bytes;
                    x->stats.chunks_sent++;
                }
            }
            posted++;
            rf_xfer_update_inflight(x, (int)(posted - done));
            continue;
        group_fail:
            ncclGroupEnd();
            goto fail;
        }

        /* complete the oldest op */
        nccl_op_t *o = &ops[done];
        const rf_chunk_t *c = &plan->chunks[o->chunk];
        const int b = (int)(done % (size_t)B);
        cur = o;
        if (o->idle) {
            done++;
            continue;
        }
        {
            wait_ctx_t w = {.ev = s->comm_ev[b], .comm = s->comms[o->comm].comm};
            double t0 = rf_time_now();
            st = wait_on(x, &w, cfg->deadline, o->rcv ? "the chunk to arrive" : "the chunk's send",
                         &e);
            x->stats.wire_s += rf_time_now() - t0;
            if (st != RF_OK)
                goto fail;
        }
        if (o->rcv) {
            const unsigned char *h = s->hrecv[b];
            rf_chunk_header_t hd;
            x->stats.peers[o->sender].chunks_recv++;
            x->stats.peers[o->sender].bytes_recv += o->bytes;
            rf_chunk_header_read(h, &hd);
            if (hd.update != cfg->update) {
                st = rf_err_set(&e, RF_ERR_SEQUENCE, "header carries update %u", hd.update);
                goto fail;
            }
            if (hd.seq != c->seq) {
                st = rf_err_set(&e, RF_ERR_SEQUENCE, "%s: header carries seq %u, expected %u",
                                hd.seq < c->seq ? "repeated chunk" : "gap in the sequence",
                                hd.seq, c->seq);
                goto fail;
            }
            if (hd.payload_bytes != c->payload_bytes) {
                st = rf_err_set(&e, RF_ERR_MISMATCH,
                                "payload of %" PRIu64 " bytes, expected %" PRIu64,
                                hd.payload_bytes, c->payload_bytes);
                goto fail;
            }
            if (cfg->integrity) {
                const size_t covered = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
                RF_CHECK_GOTO(rf_chunk_check(h + covered, h, covered, NULL, 0, plan, cfg->items,
                                             c, &e),
                              st, fail);
            }
            double t0 = rf_time_now();
            const unsigned char *payload =
                (const unsigned char *)s->drecv[b] + RF_CHUNK_HEADER_BYTES;
            st = rf_xfer_piece_segments(x, plan, c, payload, RF_XFER_MEM_DEVICE, &e);
            if (st == RF_OK)
                st = recv(recv_ctx, c, x->segs, c->piece_count, payload, &e);
            if (st == RF_OK && s->accel != NULL) {
                st = s->accel->ops->event_record(s->unpack_ev[b], NULL);
                if (st != RF_OK)
                    rf_err_set(&e, st, "recording the unpack event failed");
                else
                    s->unpack_busy[b] = 1;
            }
            x->stats.unpack_s += rf_time_now() - t0;
            if (st != RF_OK)
                goto fail;
            x->stats.chunks_received++;
        }
        done++;
    }
    cur = NULL;
    for (int b = 0; b < B; b++) {
        if (!s->unpack_busy[b])
            continue;
        wait_ctx_t w = {.aev = s->unpack_ev[b]};
        RF_CHECK_GOTO(wait_on(x, &w, cfg->deadline, "the last unpacks", &e), st, fail);
        s->unpack_busy[b] = 0;
    }
    free(ops);
    return RF_OK;

fail:
    {
        char where[200];
        if (cur != NULL) {
            const rf_chunk_t *c = &plan->chunks[cur->chunk];
            if (cur->rcv)
                snprintf(where, sizeof(where),
                         "update %u: chunk seq %u (stage %d) from rank %d (nccl)", cfg->update,
                         c->seq, c->stage, cur->sender);
            else
                snprintf(where, sizeof(where), "update %u: sending chunk seq %u (stage %d) (nccl)",
                         cfg->update, c->seq, c->stage);
        } else {
            snprintf(where, sizeof(where), "update %u: nccl transfer", cfg->update);
        }
        rf_xfer_wrap(err, st, &e, where);
    }
    free(ops);
    if (s != NULL) {
        abort_all(x, err ? err->msg : e.msg);
        for (int b = 0; b < s->B; b++) {
            /* copies on the accelerator's stream always finish: let them, before the slot
             * can be received into again */
            if (s->unpack_busy[b] && s->accel->ops->event_sync(s->unpack_ev[b]) != RF_OK)
                rf_warn("rank %d: nccl: unpack event of slot %d failed", x->rank, b);
            s->unpack_busy[b] = 0;
        }
    }
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
}

/* ---- the stage gather over the trainer-only communicator -------------------------------- */

/* Index of this rank's gather communicator of `stage`, -1 when it is in none. */
static int gather_comm(const rf_nccl_state_t *s, int stage)
{
    for (int k = 0; s != NULL && k < s->ncomms; k++)
        if (s->comms[k].gather && s->comms[k].stage == stage && s->comms[k].rank >= 0)
            return k;
    return -1;
}

bool rf_xfer_nccl_has_gather(const rf_xfer_t *x, int stage)
{
    return nccl_of(x) != NULL && gather_comm(nccl_of(x), stage) >= 0;
}

/* Communicator rank of world rank w in c, -1 when not a member. */
static int comm_rank_of(const nccl_comm_t *c, int w)
{
    for (int i = 0; i < c->size; i++)
        if (c->ranks[i] == w)
            return i;
    return -1;
}

/*
 * One gather step on `stage`'s gather communicator: send (src, bytes[0] to world rank peers[0])
 * or receive (n messages from peers[q] of bytes[q], back to back into dst). Host bytes are staged
 * through s->dgather on the copy stream; every wait polled (ABORT, deadline). On error the
 * caller's failure path aborts the communicators (rf_xfer_nccl_run's, or rf_xfer_nccl_fail
 * after the verdict).
 */
static rf_status_t gather_step(rf_xfer_t *x, int stage, int send, const int *peers,
                               const uint64_t *bytes, int n, const void *src, void *dst,
                               double deadline, rf_err_t *err)
{
    rf_nccl_state_t *s = nccl_of(x);
    int k = gather_comm(s, stage);
    uint64_t total = 0;
    if (k < 0 || !s->ready)
        return rf_err_set(err, RF_ERR_STATE, "transport nccl: rank %d has no ready stage %d "
                          "gather communicator", x->rank, stage);
    nccl_comm_t *nc = &s->comms[k];
    for (int q = 0; q < n; q++) {
        if (comm_rank_of(nc, peers[q]) < 0)
            return rf_err_set(err, RF_ERR_TOPOLOGY, "transport nccl: rank %d is not in the stage "
                              "%d gather communicator", peers[q], stage);
        total += bytes[q];
    }
    if (total > s->slot_bytes)
        return rf_err_set(err, RF_ERR_INVALID, "transport nccl: a stage %d gather of %" PRIu64
                          " bytes exceeds the %zu-byte buffer", stage, total, s->slot_bytes);
    if (total == 0)
        return RF_OK;
    if (s->dgather == NULL)
        RF_CUDA_CHECK_ERR(cudaMalloc(&s->dgather, s->slot_bytes), err);
    if (send)
        RF_CUDA_CHECK_ERR(
            cudaMemcpyAsync(s->dgather, src, (size_t)total, cudaMemcpyHostToDevice, s->copy_stream),
            err);
    rf_status_t st = RF_OK;
    RF_NCCL_CHECK_GOTO(ncclGroupStart(), nc->comm, err, st, out);
    {
        uint64_t off = 0;
        for (int q = 0; q < n; q++) {
            int cr = comm_rank_of(nc, peers[q]);
            char *d = (char *)s->dgather + off;
            if (send)
                RF_NCCL_CHECK_GOTO(
                    ncclSend(d, (size_t)bytes[q], ncclUint8, cr, nc->comm, s->copy_stream),
                    nc->comm, err, st, group_out);
            else
                RF_NCCL_CHECK_GOTO(
                    ncclRecv(d, (size_t)bytes[q], ncclUint8, cr, nc->comm, s->copy_stream),
                    nc->comm, err, st, group_out);
            off += bytes[q];
        }
    }
group_out:
    {
        ncclResult_t rc = ncclGroupEnd();
        if (st == RF_OK && rc != ncclSuccess && rc != ncclInProgress)
            st = rf_nccl_error(rc, nc->comm, "ncclGroupEnd", __FILE__, __LINE__, err);
    }
    if (st != RF_OK)
        goto out;
    {
        wait_ctx_t w = {.comm = nc->comm};
        RF_CHECK_GOTO(wait_on(x, &w, deadline, "the stage gather's ncclGroupEnd", err), st, out);
    }
    if (!send)
        RF_CUDA_CHECK_ERR_GOTO(
            cudaMemcpyAsync(dst, s->dgather, (size_t)total, cudaMemcpyDeviceToHost, s->copy_stream),
            err, st, out);
    RF_CUDA_CHECK_ERR_GOTO(cudaEventRecord(s->gather_ev, s->copy_stream), err, st, out);
    {
        wait_ctx_t w = {.ev = s->gather_ev, .comm = nc->comm};
        st = wait_on(x, &w, deadline, send ? "the stage gather's send" : "the stage gather's "
                     "receives", err);
    }
out:
    return st;
}

rf_status_t rf_xfer_nccl_gather_recv(rf_xfer_t *x, int stage, const int *peers,
                                     const uint64_t *bytes, int n, void *dst, double deadline,
                                     rf_err_t *err)
{
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = gather_step(x, stage, 0, peers, bytes, n, NULL, dst, deadline, &e);
    if (st != RF_OK)
        rf_err_set(err, st, "receiving the stage %d gather from %d rank(s) (nccl): %s", stage, n,
                   e.msg);
    return st;
}

rf_status_t rf_xfer_nccl_gather_send(rf_xfer_t *x, int stage, int sender, const void *src,
                                     uint64_t bytes, double deadline, rf_err_t *err)
{
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = gather_step(x, stage, 1, &sender, &bytes, 1, src, NULL, deadline, &e);
    if (st != RF_OK)
        rf_err_set(err, st, "sending the stage %d gather part to rank %d (nccl): %s", stage,
                   sender, e.msg);
    return st;
}

/* ---- the chunk transport table (transport/xfer_int.h; found by transport_registry.c) ----- */

/* Chunks travel through NCCL on device buffers; x->bufs holds a header (+ trailer) only. */
static uint64_t nccl_buf_bytes(uint64_t chunk_bytes)
{
    (void)chunk_bytes;
    return RF_CHUNK_HEADER_BYTES + RF_CHUNK_TRAILER_BYTES;
}

static rf_status_t nccl_setup(rf_xfer_t *x, const rf_xfer_setup_t *setup, rf_err_t *err)
{
    return rf_xfer_nccl_setup(x, setup->layout, setup->device, setup->accel, err);
}

static rf_status_t nccl_begin(rf_xfer_t *x, uint32_t update, double deadline, rf_err_t *err)
{
    (void)update;
    return rf_xfer_nccl_begin(x, deadline, err);
}

static rf_status_t nccl_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                             void *ctx, rf_err_t *err)
{
    return rf_xfer_nccl_run(x, cfg, pack, ctx, NULL, NULL, err);
}

static rf_status_t nccl_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                             void *ctx, rf_err_t *err)
{
    return rf_xfer_nccl_run(x, cfg, NULL, NULL, recv, ctx, err);
}

/* The stage gather on the stage's trainer-only gather communicator, where this rank has one. */
static int nccl_gather_has(const rf_xfer_t *x, int stage)
{
    return rf_xfer_nccl_has_gather(x, stage);
}

/* No drain: no chunk message travels over MPI; the communicators are aborted (fail) and
 * re-created by the next begin instead. */
static const rf_xfer_ops_t nccl_xfer_ops = {
    .name = "nccl",
    .caps = RF_XFER_CAP_DEVICE_PAYLOAD | RF_XFER_CAP_GATHER,
    .wire = "mpi",
    .buf_bytes = nccl_buf_bytes,
    .setup = nccl_setup,
    .begin = nccl_begin,
    .send = nccl_send,
    .recv = nccl_recv,
    .fail = rf_xfer_nccl_fail,
    .close = nccl_state_destroy,
    .gather_has = nccl_gather_has,
    .gather_recv = rf_xfer_nccl_gather_recv,
    .gather_send = rf_xfer_nccl_gather_send,
};

const rf_xfer_ops_t *rf_xfer_nccl_ops(void)
{
    return &nccl_xfer_ops;
}
