/*
 * refit: what the chunk paths of an xfer share (transport/xfer_int.h): the scheduler
 * (transport/xfer.c), the mpi transport (transport/transport_mpi_chunks.c), the ipc transport
 * (transport/transport_ipc.c) and the nccl transport (transport/transport_nccl_chunks.c) all
 * use these, so none of them calls into another.
 *
 * The error wrapper, the in-flight counter, cancelling posted receives, the probe
 * for extra chunk messages after the last expected one, and the message drain after a FAILED
 * verdict (chunk messages over the message transport x->tp: mpi, and ipc's SEQ / READY / ACK);
 * the sender's message to one receiver under the drop / dup faults and its slot marked busy,
 * the receiver's wait on one message, its counted receive and the header check against the
 * next expected (update, seq).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/control.h"
#include "refit/log.h"
#include "refit/transport.h"
#include "xfer_int.h"

/* err = "<where>: <inner message>" (the first error is kept). */
rf_status_t rf_xfer_wrap(rf_err_t *err, rf_status_t st, const rf_err_t *inner, const char *where)
{
    return rf_err_set(err, st, "%s: %s", where, inner->msg[0] ? inner->msg : rf_status_string(st));
}

void rf_xfer_update_inflight(rf_xfer_t *x, int inflight)
{
    if (inflight > x->stats.max_inflight_chunks)
        x->stats.max_inflight_chunks = inflight;
}

/* Cancels this rank's posted receives; a receive that had matched counts as received. */
void rf_xfer_cancel_posted(rf_xfer_t *x)
{
    for (int b = 0; b <= x->buffers; b++) {
        if (x->rreqs[b] == MPI_REQUEST_NULL)
            continue;
        MPI_Status s;
        int cancelled = 0;
        MPI_Cancel(&x->rreqs[b]);
        MPI_Wait(&x->rreqs[b], &s); /* completes locally: cancelled or already matched */
        MPI_Test_cancelled(&s, &cancelled);
        if (!cancelled && s.MPI_SOURCE >= 0 && s.MPI_SOURCE < x->nranks) {
            size_t got = 0;
            x->tp->ops->recv_bytes(x->tp, &s, &got, NULL);
            x->stats.peers[s.MPI_SOURCE].chunks_recv++;
            x->stats.peers[s.MPI_SOURCE].bytes_recv += got;
        }
    }
}

/* After a receiver's last expected chunk: one probe per distinct stage sender (see xfer_int.h). */
rf_status_t rf_xfer_probe_extra(rf_xfer_t *x, const rf_xfer_config_t *cfg, size_t n, int *extra_p,
                                rf_err_t *probe_err, rf_err_t *err)
{
    const rf_chunk_plan_t *plan = cfg->plan;
    *extra_p = 0;
    /* one probe per source: anything left is an extra chunk message */
    for (int s = 0; s < plan->n_stages; s++) {
        int from = cfg->stage_senders[s], found = 0, tag = 0, seen = 0;
        for (int t = 0; t < s; t++)
            seen |= cfg->stage_senders[t] == from;
        if (seen || plan->stages[s].chunk_count == 0)
            continue;
        RF_CHECK(x->tp->ops->probe(x->tp, from, &found, &tag, probe_err));
        if (found) {
            rf_status_t st = rf_err_set(err, RF_ERR_SEQUENCE,
                                        "update %u: extra chunk message from rank %d (stage %d) "
                                        "after the last expected chunk seq %zu",
                                        cfg->update, from, tag & 0xfff, n ? n - 1 : 0);
            rf_ctl_abort(x->ctl, st, err ? err->msg : "extra chunk message");
            *extra_p = 1;
            return st;
        }
    }
    return RF_OK;
}

typedef struct drain_ctx {
    rf_xfer_t *x;
    int src;
} drain_ctx_t;

static int drain_test(void *vctx, rf_err_t *err)
{
    drain_ctx_t *d = vctx;
    int found = 0;
    rf_status_t st = d->x->tp->ops->drain_one(d->x->tp, d->src, d->x->bufs[0],
                                              d->x->buf_bytes, &found, err);
    if (st != RF_OK)
        return st;
    return found;
}

typedef struct sends_ctx {
    rf_xfer_t *x;
} sends_ctx_t;

static int sends_test(void *vctx, rf_err_t *err)
{
    sends_ctx_t *d = vctx;
    int flag = 0;
    if (MPI_Testall(rf_xfer_sreq_count(d->x), d->x->sreqs, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        return rf_err_set(err, RF_ERR_MPI, "MPI_Testall failed on outstanding sends");
    return flag;
}

rf_status_t rf_xfer_drain_messages(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                                   rf_err_t *err)
{
    rf_err_t e;
    rf_err_clear(&e);
    uint64_t drained = 0;
    /* Receive first, then complete our sends: a rank that both sends and receives must not
     * wait on its sends while its own incoming messages block a peer. Both loops poll. */
    for (int s = 0; posted_from != NULL && s < x->nranks; s++) {
        if (s == x->rank || posted_from[s] == RF_GATE_UNKNOWN)
            continue;
        uint64_t got = x->stats.peers[s].chunks_recv;
        while (got < posted_from[s]) {
            drain_ctx_t d = {x, s};
            rf_status_t st = rf_ctl_wait_fn(x->ctl, drain_test, &d, deadline,
                                            RF_CTL_WAIT_NO_ABORT, &e);
            if (st != RF_OK) {
                if (st == RF_ERR_TIMEOUT)
                    return rf_err_set(err, st,
                                      "drain: %" PRIu64 " of %" PRIu64 " chunk messages from "
                                      "rank %d still missing at the deadline",
                                      posted_from[s] - got, posted_from[s], s);
                return rf_err_set(err, st, "drain from rank %d: %s", s, e.msg);
            }
            got++;
            drained++;
            x->stats.peers[s].chunks_recv++;
        }
    }
    for (int b = 0; b < x->slots; b++)
        x->slot_busy[b] = 0;
    sends_ctx_t sc = {x};
    rf_status_t st = rf_ctl_wait_fn(x->ctl, sends_test, &sc, deadline, RF_CTL_WAIT_NO_ABORT, &e);
    if (st == RF_ERR_TIMEOUT)
        return rf_err_set(err, st, "drain: rank %d: sends still outstanding at the deadline",
                          x->rank);
    if (st != RF_OK)
        return rf_err_set(err, st, "drain: %s", e.msg);
    if (drained)
        rf_debug("rank %d: drained %" PRIu64 " chunk messages", x->rank, drained);
    return RF_OK;
}

rf_status_t rf_xfer_segments(rf_xfer_t *x, size_t n, rf_err_t *err)
{
    if (n <= x->segcap && x->segs != NULL)
        return RF_OK;
    rf_xfer_segment_t *g = realloc(x->segs, (n ? n : 1) * sizeof(*g));
    if (g == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    x->segs = g;
    x->segcap = n ? n : 1;
    return RF_OK;
}

rf_status_t rf_xfer_piece_segments(rf_xfer_t *x, const rf_chunk_plan_t *plan, const rf_chunk_t *c,
                                   const void *payload, rf_xfer_mem_t mem, rf_err_t *err)
{
    RF_CHECK(rf_xfer_segments(x, c->piece_count, err));
    for (size_t k = 0; k < c->piece_count; k++) {
        const rf_chunk_piece_t *pc = &plan->pieces[c->piece_begin + k];
        x->segs[k] = (rf_xfer_segment_t){pc, pc->row_begin, pc->row_end,
                                         (const unsigned char *)payload + pc->offset, 1, mem};
    }
    return RF_OK;
}

rf_status_t rf_xfer_send_copies(rf_xfer_t *x, const rf_xfer_fault_t *f, uint32_t seq,
                                const void *buf, size_t bytes, int peer, int tag,
                                MPI_Request *reqs, int *nreq, rf_err_t *err)
{
    int hit = f->dest < 0 || f->dest == peer;
    int copies = 1;
    if (hit && f->drop_seq == (int64_t)seq)
        copies = 0;
    if (hit && f->dup_seq == (int64_t)seq)
        copies = 2;
    for (int n = 0; n < copies; n++) {
        RF_CHECK(x->tp->ops->isend(x->tp, buf, bytes, peer, tag, &reqs[*nreq], err));
        (*nreq)++;
        x->stats.peers[peer].chunks_sent++;
        x->stats.peers[peer].bytes_sent += bytes;
        x->stats.chunks_sent++;
    }
    return RF_OK;
}

rf_status_t rf_xfer_grow_slots(rf_xfer_t *x, int n, rf_err_t *err)
{
    if (n <= x->slots)
        return RF_OK;
    const size_t per = 2 * (size_t)x->nranks;
    const size_t old_req = (size_t)rf_xfer_sreq_count(x), new_req = (size_t)n * per + 1;
    void **bufs = realloc(x->bufs, (size_t)n * sizeof(void *));
    if (bufs != NULL)
        x->bufs = bufs;
    int *busy = bufs != NULL ? realloc(x->slot_busy, (size_t)n * sizeof(int)) : NULL;
    if (busy != NULL)
        x->slot_busy = busy;
    MPI_Request *reqs = busy != NULL ? realloc(x->sreqs, new_req * sizeof(MPI_Request)) : NULL;
    if (reqs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "xfer: rank %d: out of memory for %d send slots",
                          x->rank, n);
    x->sreqs = reqs;
    /* the transport's own request was the last one: it moves to the new end (the arrays are
     * larger now; slots grows only once every buffer is there) */
    reqs[new_req - 1] = reqs[old_req - 1];
    for (size_t i = old_req - 1; i < new_req - 1; i++)
        reqs[i] = MPI_REQUEST_NULL;
    for (int b = x->slots; b < n; b++) {
        x->bufs[b] = rf_chunk_buffer_alloc(x->buf_bytes);
        x->slot_busy[b] = 0;
        if (x->bufs[b] == NULL) {
            for (int q = x->slots; q < b; q++)
                rf_chunk_buffer_free(x->bufs[q]);
            reqs[old_req - 1] = reqs[new_req - 1];
            return rf_err_set(err, RF_ERR_NOMEM,
                              "xfer: rank %d: out of memory for send slot %d of %" PRIu64
                              " bytes (%d slots)",
                              x->rank, b, x->buf_bytes, n);
        }
    }
    x->slots = n;
    return RF_OK;
}

void rf_xfer_slot_sent(rf_xfer_t *x, int b)
{
    x->slot_busy[b] = 1;
    int inflight = 0;
    for (int i = 0; i < x->slots; i++)
        inflight += x->slot_busy[i];
    rf_xfer_update_inflight(x, inflight);
}

typedef struct recv_done {
    MPI_Status status;
    int done;
} recv_done_t;

static rf_status_t on_recv(void *ctx, int index, const MPI_Status *status, rf_err_t *err)
{
    (void)index;
    (void)err;
    recv_done_t *d = ctx;
    d->status = *status;
    d->done = 1;
    return RF_OK;
}

rf_status_t rf_xfer_wait_one(rf_xfer_t *x, MPI_Request *req, double deadline, MPI_Status *status,
                             rf_err_t *err)
{
    rf_status_t st = RF_OK;
    recv_done_t d = {.done = 0};
    double t0 = rf_time_now();
    while (!d.done && st == RF_OK)
        st = rf_ctl_wait_some(x->ctl, req, 1, deadline, x->wait_flags, on_recv, &d, err);
    x->stats.wire_s += rf_time_now() - t0;
    if (st == RF_ERR_TIMEOUT)
        rf_err_reset(err, st, "deadline expired");
    if (d.done)
        *status = d.status;
    return st;
}

rf_status_t rf_xfer_recv_counted(rf_xfer_t *x, const MPI_Status *status, int src, size_t *got,
                                 rf_err_t *err)
{
    RF_CHECK(x->tp->ops->recv_bytes(x->tp, status, got, err));
    x->stats.peers[src].chunks_recv++;
    x->stats.peers[src].bytes_recv += *got;
    return RF_OK;
}

rf_status_t rf_xfer_header_check(const unsigned char *msg, const rf_xfer_config_t *cfg,
                                 const rf_chunk_t *c, rf_chunk_header_t *h, rf_err_t *err)
{
    rf_chunk_header_read(msg, h);
    if (h->update != cfg->update)
        return rf_err_set(err, RF_ERR_SEQUENCE, "header carries update %u", h->update);
    if (h->seq != c->seq)
        return rf_err_set(err, RF_ERR_SEQUENCE, "%s: header carries seq %u, expected %u",
                          h->seq < c->seq ? "repeated chunk" : "gap in the sequence", h->seq,
                          c->seq);
    return RF_OK;
}

/* ---- pinned receive buffers (xfer_int.h) ----------------------------------------------- */

/* bufs[b] sits RF_CHUNK_ALIGN - RF_CHUNK_HEADER_BYTES into its allocation, as
 * rf_chunk_buffer_alloc's do, so the payload (after the header) is RF_CHUNK_ALIGN-aligned. */
static size_t pin_total(uint64_t buf_bytes)
{
    uint64_t pay = buf_bytes - RF_CHUNK_HEADER_BYTES;
    return (size_t)((pay + RF_CHUNK_ALIGN - 1) & ~(uint64_t)(RF_CHUNK_ALIGN - 1)) + RF_CHUNK_ALIGN;
}

rf_status_t rf_xfer_pin_setup(rf_xfer_t *x, rf_accel_t *accel, rf_err_t *err)
{
    if (x->pin_ax != NULL || accel == NULL)
        return RF_OK;
    const int B = x->buffers;
    const size_t total = pin_total(x->buf_bytes);
    x->pin_base = calloc((size_t)B, sizeof(void *));
    x->pin_ev = calloc((size_t)B, sizeof(rf_accel_event_t *));
    x->pin_pending = calloc((size_t)B, 1);
    if (x->pin_base == NULL || x->pin_ev == NULL || x->pin_pending == NULL) {
        free(x->pin_base);
        free(x->pin_ev);
        free(x->pin_pending);
        x->pin_base = NULL;
        x->pin_ev = NULL;
        x->pin_pending = NULL;
        return rf_err_set(err, RF_ERR_NOMEM, "xfer: rank %d: out of memory", x->rank);
    }
    rf_status_t st = RF_OK;
    int b = 0;
    for (; b < B && st == RF_OK; b++) {
        st = accel->ops->alloc_host(accel, total, &x->pin_base[b]);
        if (st == RF_OK && (st = accel->ops->event_create(accel, &x->pin_ev[b])) != RF_OK) {
            accel->ops->free_host(accel, x->pin_base[b]);
            x->pin_base[b] = NULL;
        }
    }
    if (st != RF_OK) {
        for (int q = 0; q < b; q++) {
            if (x->pin_ev[q] != NULL)
                accel->ops->event_destroy(x->pin_ev[q]);
            if (x->pin_base[q] != NULL)
                accel->ops->free_host(accel, x->pin_base[q]);
        }
        free(x->pin_base);
        free(x->pin_ev);
        free(x->pin_pending);
        x->pin_base = NULL;
        x->pin_ev = NULL;
        x->pin_pending = NULL;
        return rf_err_set(err, st, "xfer: rank %d: no %d pinned receive buffers of %zu bytes on "
                          "%s device %d", x->rank, B, total, accel->ops->name, accel->device);
    }
    for (b = 0; b < B; b++) {
        rf_chunk_buffer_free(x->bufs[b]);
        x->bufs[b] = (unsigned char *)x->pin_base[b] + RF_CHUNK_ALIGN - RF_CHUNK_HEADER_BYTES;
    }
    x->pin_ax = accel;
    return RF_OK;
}

rf_status_t rf_xfer_pin_after(rf_xfer_t *x, int b, rf_err_t *err)
{
    if (x->pin_ax == NULL)
        return RF_OK;
    rf_status_t st = x->pin_ax->ops->event_record(x->pin_ev[b], NULL);
    if (st != RF_OK)
        return rf_err_set(err, st, "rank %d: recording the h2d copies of receive buffer %d on %s "
                          "device %d failed", x->rank, b, x->pin_ax->ops->name, x->pin_ax->device);
    x->pin_pending[b] = 1;
    return RF_OK;
}

bool rf_xfer_pin_ready(rf_xfer_t *x, int b)
{
    if (x->pin_ax == NULL || !x->pin_pending[b])
        return true;
    bool done = false;
    return x->pin_ax->ops->event_query(x->pin_ev[b], &done) == RF_OK && done;
}

rf_status_t rf_xfer_pin_gate(rf_xfer_t *x, int b, rf_err_t *err)
{
    if (x->pin_ax == NULL)
        return RF_OK;
    if (b < 0) {
        rf_status_t first = RF_OK;
        for (int q = 0; q < x->buffers; q++) {
            rf_status_t st = rf_xfer_pin_gate(x, q, err);
            if (first == RF_OK)
                first = st;
        }
        return first;
    }
    if (!x->pin_pending[b])
        return RF_OK;
    /* the copies reading buffer b must have completed before a message may land in it */
    double t0 = rf_time_now();
    bool done = false;
    rf_status_t st = x->pin_ax->ops->event_query(x->pin_ev[b], &done);
    if (st == RF_OK && !done) {
        st = x->pin_ax->ops->event_sync(x->pin_ev[b]);
        x->stats.pin_waits++;
        x->stats.pin_wait_s += rf_time_now() - t0;
    }
    x->pin_pending[b] = 0;
    if (st != RF_OK)
        return rf_err_set(err, st, "rank %d: the h2d copies from receive buffer %d failed on %s "
                          "device %d", x->rank, b, x->pin_ax->ops->name, x->pin_ax->device);
    return RF_OK;
}

void rf_xfer_pin_release(rf_xfer_t *x)
{
    rf_accel_t *a = x->pin_ax;
    if (a == NULL)
        return;
    (void)rf_xfer_pin_gate(x, -1, NULL);
    for (int b = 0; b < x->buffers; b++) {
        a->ops->event_destroy(x->pin_ev[b]);
        a->ops->free_host(a, x->pin_base[b]);
        x->bufs[b] = NULL;
    }
    free(x->pin_base);
    free(x->pin_ev);
    free(x->pin_pending);
    x->pin_ax = NULL;
}
