/*
 * refit: the nccl transport (include/refit/transport_nccl.h; DESIGN.md sections 9 and 10).
 * Compiled only when CUDA and NCCL are found (CMake: REFIT_HAVE_NCCL); otherwise
 * transport/transport_nccl_none.c stands in. This file: the communicators (setup, creation at
 * begin, abort, teardown) and the transport table; one update's chunk pipeline and the stage
 * gather are transport_nccl_chunks.c, the state both share transport_nccl_int.h.
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
#include "transport_nccl_int.h"

/* Seconds the streams get to drain after ncclCommAbort, and teardown's finalize budget. */
#define RF_NCCL_DRAIN_S 10.0
#define RF_NCCL_FINALIZE_S 5.0

bool rf_xfer_nccl_built(void)
{
    return true;
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
void nccl_abort_all(rf_xfer_t *x, const char *why)
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
        nccl_abort_all(x, NULL); /* whatever is left */
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
    nccl_abort_all(x, NULL); /* anything half-made by an earlier try */
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
    nccl_abort_all(x, err ? err->msg : e.msg);
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
}

void rf_xfer_nccl_fail(rf_xfer_t *x)
{
    if (nccl_of(x) == NULL || nccl_of(x)->nmine == 0)
        return;
    nccl_abort_all(x, "the update failed (re-created at the next update)");
}

void rf_xfer_nccl_counters(const rf_xfer_t *x, rf_xfer_nccl_counters_t *c)
{
    if (nccl_of(x) == NULL) {
        memset(c, 0, sizeof(*c));
        return;
    }
    *c = nccl_of(x)->counters;
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
