/*
 * refit: the pipelined chunk transfer, broadcast mode (include/refit/transport.h).
 *
 * Sender: slot b = j mod buffers for its j-th chunk; before packing into a slot it waits until
 * every send from that slot completed, so chunk k+1 is packed while chunk k is on the wire.
 * Receiver: `buffers` receives posted ahead in the global sequence, consumed in order; each
 * header is checked against the next expected (update, seq) before the payload is unpacked.
 * Every wait goes through the control channel (ABORT + deadline). On error the rank posts
 * ABORT (unless it is reacting to one), cancels its posted receives, and leaves its sends
 * outstanding for rf_xfer_drain.
 *
 * That is the message path (each chunk one message of the message transport x->tp, "mpi").
 * An xfer on a chunk transport (ipc, nccl) runs send, receive, drain and its own state through
 * x->ops, the table transport/transport_registry.c found for its name (transport/xfer_int.h):
 * this file names no transport. The helpers every chunk path shares are in xfer_common.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/control.h"
#include "refit/log.h"
#include "refit/transport.h"
#include "xfer_int.h"

rf_status_t rf_xfer_create(rf_ctl_t *ctl, const char *transport, uint64_t chunk_bytes,
                           int buffers, rf_xfer_t **x_p, rf_err_t *err)
{
    if (ctl == NULL || x_p == NULL || chunk_bytes <= RF_CHUNK_HEADER_BYTES ||
        chunk_bytes > INT32_MAX || buffers < 0 || buffers > 64)
        return rf_err_set(err, RF_ERR_INVALID,
                          "xfer: bad arguments (chunk_bytes %" PRIu64 ", buffers %d)",
                          chunk_bytes, buffers);
    rf_xfer_t *x = calloc(1, sizeof(*x));
    if (x == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "xfer: out of memory");
    x->ctl = ctl;
    x->chunk_bytes = chunk_bytes;
    x->buffers = buffers ? buffers : 2;
    x->rank = rf_ctl_rank(ctl);
    x->nranks = rf_ctl_size(ctl);
    /* a chunk transport (ipc, nccl) or NULL: chunks are messages of `transport` (mpi) */
    x->ops = rf_xfer_ops_lookup(transport);
    x->buf_bytes = x->ops != NULL && x->ops->buf_bytes != NULL ? x->ops->buf_bytes(chunk_bytes)
                                                               : chunk_bytes;
    rf_status_t st = rf_transport_create(x->ops != NULL ? x->ops->wire : transport,
                                         rf_ctl_comm(ctl), &x->tp, err);
    if (st != RF_OK) {
        free(x);
        return st;
    }
    size_t nsreq = (size_t)x->buffers * 2 * (size_t)x->nranks + 1;
    x->bufs = calloc((size_t)x->buffers, sizeof(void *));
    x->sreqs = malloc(nsreq * sizeof(MPI_Request));
    x->rreqs = malloc(((size_t)x->buffers + 1) * sizeof(MPI_Request));
    x->slot_busy = calloc((size_t)x->buffers, sizeof(int));
    x->stats.peers = calloc((size_t)x->nranks, sizeof(rf_peer_counts_t));
    x->stats.nranks = x->nranks;
    if (x->bufs == NULL || x->sreqs == NULL || x->rreqs == NULL || x->slot_busy == NULL ||
        x->stats.peers == NULL)
        goto err_nomem;
    for (size_t i = 0; i < nsreq; i++)
        x->sreqs[i] = MPI_REQUEST_NULL;
    for (int b = 0; b <= x->buffers; b++)
        x->rreqs[b] = MPI_REQUEST_NULL;
    for (int b = 0; b < x->buffers; b++) {
        x->bufs[b] = rf_chunk_buffer_alloc(x->buf_bytes);
        if (x->bufs[b] == NULL)
            goto err_nomem;
    }
    if (x->ops != NULL && x->ops->open != NULL && (st = x->ops->open(x, err)) != RF_OK) {
        rf_xfer_destroy(x);
        return st;
    }
    *x_p = x;
    return RF_OK;

err_nomem:
    rf_xfer_destroy(x);
    return rf_err_set(err, RF_ERR_NOMEM, "xfer: out of memory for %d buffers of %" PRIu64
                      " bytes", buffers, chunk_bytes);
}

void rf_xfer_destroy(rf_xfer_t *x)
{
    if (x == NULL)
        return;
    if (x->sreqs != NULL) {
        /* sends nobody will receive any more: give them 5 s, then release them */
        double until = rf_time_now() + 5.0;
        int flag = 0;
        while (!flag && rf_time_now() < until)
            MPI_Testall(rf_xfer_sreq_count(x), x->sreqs, &flag, MPI_STATUSES_IGNORE);
        for (int i = 0; i < rf_xfer_sreq_count(x); i++)
            if (x->sreqs[i] != MPI_REQUEST_NULL)
                MPI_Request_free(&x->sreqs[i]);
    }
    if (x->rreqs != NULL)
        rf_ctl_cancel_recvs(x->rreqs, x->buffers + 1);
    if (x->ops != NULL && x->ops->close != NULL)
        x->ops->close(x);
    rf_transport_destroy(x->tp);
    if (x->bufs != NULL)
        for (int b = 0; b < x->buffers; b++)
            rf_chunk_buffer_free(x->bufs[b]);
    free(x->bufs);
    free(x->sreqs);
    free(x->rreqs);
    free(x->slot_busy);
    free(x->stats.peers);
    free(x);
}

void rf_xfer_begin(rf_xfer_t *x, uint32_t update)
{
    rf_peer_counts_t *peers = x->stats.peers;
    memset(peers, 0, (size_t)x->nranks * sizeof(*peers));
    memset(&x->stats, 0, sizeof(x->stats));
    x->stats.peers = peers;
    x->stats.nranks = x->nranks;
    x->stats.update = update;
}

const rf_xfer_stats_t *rf_xfer_stats(const rf_xfer_t *x)
{
    return &x->stats;
}

static rf_status_t check_config(const rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_err_t *err)
{
    if (cfg == NULL || cfg->plan == NULL || cfg->stage_senders == NULL ||
        (cfg->receivers == NULL && cfg->n_receivers > 0) || cfg->n_receivers < 0)
        return rf_err_set(err, RF_ERR_INVALID, "xfer: incomplete config");
    if (cfg->plan->chunk_bytes != rf_xfer_plan_bytes(x->chunk_bytes, cfg->integrity))
        return rf_err_set(err, RF_ERR_INVALID,
                          "xfer: plan chunk_bytes %" PRIu64 " does not fit buffers of %" PRIu64
                          "%s",
                          cfg->plan->chunk_bytes, x->chunk_bytes,
                          cfg->integrity ? " with the integrity trailer" : "");
    if (cfg->update != x->stats.update)
        return rf_err_set(err, RF_ERR_STATE, "xfer: update %u not begun (rf_xfer_begin)",
                          cfg->update);
    for (int s = 0; s < cfg->plan->n_stages; s++)
        if (cfg->stage_senders[s] < 0 || cfg->stage_senders[s] >= x->nranks)
            return rf_err_set(err, RF_ERR_INVALID, "xfer: stage %d sender rank %d out of range",
                              s, cfg->stage_senders[s]);
    for (int i = 0; i < cfg->n_receivers; i++)
        if (cfg->receivers[i] < 0 || cfg->receivers[i] >= x->nranks)
            return rf_err_set(err, RF_ERR_INVALID, "xfer: receiver rank %d out of range",
                              cfg->receivers[i]);
    return RF_OK;
}

/* Waits (ABORT + deadline) until every send from slot b completed. */
static rf_status_t wait_slot(rf_xfer_t *x, int b, double deadline, rf_err_t *err)
{
    double t0 = rf_time_now();
    int per = 2 * x->nranks;
    rf_status_t st = rf_ctl_wait(x->ctl, &x->sreqs[b * per], per, deadline, err);
    x->stats.wire_s += rf_time_now() - t0;
    if (st == RF_OK)
        x->slot_busy[b] = 0;
    return st;
}

rf_status_t rf_xfer_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                         void *ctx, rf_err_t *err)
{
    RF_CHECK(check_config(x, cfg, err));
    if (x->ops != NULL)
        return x->ops->send(x, cfg, pack, ctx, err);
    const rf_chunk_plan_t *plan = cfg->plan;
    const int per = 2 * x->nranks;
    const rf_xfer_fault_t *f = &cfg->fault;
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = RF_OK;
    uint32_t seq = 0;
    int stage = -1, peer = -1;

    /* sends of an earlier update never drained: complete them first */
    for (int b = 0; b < x->buffers; b++)
        RF_CHECK_GOTO(wait_slot(x, b, cfg->deadline, &e), st, fail);

    int j = 0;
    for (size_t k = 0; k < plan->n_chunks; k++) {
        const rf_chunk_t *c = &plan->chunks[k];
        if (cfg->stage_senders[c->stage] != x->rank)
            continue;
        seq = c->seq;
        stage = c->stage;
        peer = -1;
        const int b = j++ % x->buffers;
        RF_CHECK_GOTO(rf_ctl_poll(x->ctl, &e), st, fail); /* eager sends never wait */
        RF_CHECK_GOTO(wait_slot(x, b, cfg->deadline, &e), st, fail);
        unsigned char *buf = x->bufs[b];
        rf_chunk_header_write(buf, cfg->update, c->seq, c->payload_bytes);
        double t0 = rf_time_now();
        st = pack(ctx, c, &plan->pieces[c->piece_begin], buf + RF_CHUNK_HEADER_BYTES, &e);
        x->stats.pack_s += rf_time_now() - t0;
        if (st != RF_OK)
            goto fail;
        size_t bytes = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
        if (cfg->integrity) {
            RF_CHECK_GOTO(rf_chunk_seal(buf + bytes, buf, bytes, NULL, 0, &e), st, fail);
            bytes += RF_CHUNK_TRAILER_BYTES;
        }
        if (f->corrupt_seq == (int64_t)c->seq && c->payload_bytes > 0) {
            buf[RF_CHUNK_HEADER_BYTES + c->payload_bytes / 2] ^= 0x10; /* after the checksum */
            rf_warn("fault: rank %d flipped a payload byte of chunk %u (update %u)", x->rank,
                    c->seq, cfg->update);
        }
        const int tag = RF_XFER_TAG(cfg->update, c->stage);
        int nreq = 0;
        for (int i = 0; i < cfg->n_receivers; i++) {
            peer = cfg->receivers[i];
            if (peer == x->rank)
                continue;
            int hit = f->dest < 0 || f->dest == peer;
            int copies = 1;
            if (hit && f->drop_seq == (int64_t)c->seq)
                copies = 0;
            if (hit && f->dup_seq == (int64_t)c->seq)
                copies = 2;
            for (int n = 0; n < copies; n++) {
                RF_CHECK_GOTO(x->tp->ops->isend(x->tp, buf, bytes, peer, tag,
                                                &x->sreqs[b * per + nreq], &e),
                              st, fail);
                nreq++;
                x->stats.peers[peer].chunks_sent++;
                x->stats.peers[peer].bytes_sent += bytes;
                x->stats.chunks_sent++;
            }
        }
        x->slot_busy[b] = 1;
        int inflight = 0;
        for (int i = 0; i < x->buffers; i++)
            inflight += x->slot_busy[i];
        rf_xfer_update_inflight(x, inflight);
    }
    peer = -1;
    for (int b = 0; b < x->buffers; b++)
        RF_CHECK_GOTO(wait_slot(x, b, cfg->deadline, &e), st, fail);
    return RF_OK;

fail:
    {
        char where[160];
        if (peer >= 0)
            snprintf(where, sizeof(where), "update %u: sending chunk seq %u (stage %d) to rank %d",
                     cfg->update, seq, stage, peer);
        else if (stage >= 0)
            snprintf(where, sizeof(where), "update %u: sending chunk seq %u (stage %d)",
                     cfg->update, seq, stage);
        else
            snprintf(where, sizeof(where), "update %u: sending", cfg->update);
        rf_xfer_wrap(err, st, &e, where);
    }
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
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

rf_status_t rf_xfer_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_unpack_fn unpack,
                         void *ctx, rf_err_t *err)
{
    RF_CHECK(check_config(x, cfg, err));
    if (x->ops != NULL)
        return x->ops->recv(x, cfg, unpack, ctx, err);
    const rf_chunk_plan_t *plan = cfg->plan;
    const size_t n = plan->n_chunks;
    const int B = x->buffers;
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = RF_OK;
    size_t posted = 0, next = 0;
    uint32_t seq = 0;
    int stage = -1, src = -1;

    for (; posted < n && posted < (size_t)B; posted++) {
        const rf_chunk_t *c = &plan->chunks[posted];
        int from = cfg->stage_senders[c->stage];
        RF_CHECK_GOTO(x->tp->ops->irecv(x->tp, x->bufs[posted % B], x->chunk_bytes, from,
                                        RF_XFER_TAG(cfg->update, c->stage),
                                        &x->rreqs[posted % B], &e),
                      st, fail);
    }
    for (; next < n; next++) {
        const rf_chunk_t *c = &plan->chunks[next];
        const int b = (int)(next % B);
        seq = c->seq;
        stage = c->stage;
        src = cfg->stage_senders[c->stage];
        rf_xfer_update_inflight(x, (int)(posted - next));
        recv_done_t d = {.done = 0};
        double t0 = rf_time_now();
        while (!d.done && st == RF_OK)
            st = rf_ctl_wait_some(x->ctl, &x->rreqs[b], 1, cfg->deadline, 0, on_recv, &d, &e);
        x->stats.wire_s += rf_time_now() - t0;
        if (st != RF_OK) {
            if (st == RF_ERR_TIMEOUT)
                rf_err_reset(&e, st, "deadline expired");
            goto fail;
        }
        size_t got = 0;
        RF_CHECK_GOTO(x->tp->ops->recv_bytes(x->tp, &d.status, &got, &e), st, fail);
        x->stats.peers[src].chunks_recv++;
        x->stats.peers[src].bytes_recv += got;
        const unsigned char *buf = x->bufs[b];
        rf_chunk_header_t h;
        if (got < RF_CHUNK_HEADER_BYTES) {
            st = rf_err_set(&e, RF_ERR_MISMATCH, "message of %zu bytes has no header", got);
            goto fail;
        }
        rf_chunk_header_read(buf, &h);
        if (h.update != cfg->update) {
            st = rf_err_set(&e, RF_ERR_SEQUENCE, "header carries update %u", h.update);
            goto fail;
        }
        if (h.seq != c->seq) {
            st = rf_err_set(&e, RF_ERR_SEQUENCE, "%s: header carries seq %u, expected %u",
                            h.seq < c->seq ? "repeated chunk" : "gap in the sequence", h.seq,
                            c->seq);
            goto fail;
        }
        const size_t trailer = cfg->integrity ? RF_CHUNK_TRAILER_BYTES : 0;
        if (h.payload_bytes != c->payload_bytes ||
            got != RF_CHUNK_HEADER_BYTES + c->payload_bytes + trailer) {
            st = rf_err_set(&e, RF_ERR_MISMATCH,
                            "payload of %" PRIu64 " bytes (message %zu), expected %" PRIu64
                            "%s",
                            h.payload_bytes, got, c->payload_bytes,
                            trailer ? " plus an 8-byte checksum trailer" : "");
            goto fail;
        }
        if (cfg->integrity) {
            const size_t covered = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
            RF_CHECK_GOTO(rf_chunk_check(buf + covered, buf, covered, NULL, 0, plan, cfg->items,
                                         c, &e),
                          st, fail);
        }
        t0 = rf_time_now();
        st = unpack(ctx, c, &plan->pieces[c->piece_begin], buf + RF_CHUNK_HEADER_BYTES, &e);
        x->stats.unpack_s += rf_time_now() - t0;
        if (st != RF_OK)
            goto fail;
        x->stats.chunks_received++;
        if (posted < n) {
            const rf_chunk_t *pc = &plan->chunks[posted];
            RF_CHECK_GOTO(x->tp->ops->irecv(x->tp, x->bufs[b], x->chunk_bytes,
                                            cfg->stage_senders[pc->stage],
                                            RF_XFER_TAG(cfg->update, pc->stage), &x->rreqs[b],
                                            &e),
                          st, fail);
            posted++;
        }
    }
    int extra = 0;
    st = rf_xfer_probe_extra(x, cfg, n, &extra, &e, err);
    if (extra)
        return st;
    if (st != RF_OK)
        goto fail_end;
    return RF_OK;

fail_end:
    rf_err_set(err, st, "update %u: probing for extra chunks: %s", cfg->update, e.msg);
    rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
fail:
    rf_xfer_cancel_posted(x);
    {
        char where[160];
        if (stage >= 0)
            snprintf(where, sizeof(where), "update %u: chunk seq %u (stage %d) from rank %d",
                     cfg->update, seq, stage, src);
        else
            snprintf(where, sizeof(where), "update %u: receiving", cfg->update);
        rf_xfer_wrap(err, st, &e, where);
    }
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
}

rf_status_t rf_xfer_drain(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                          rf_err_t *err)
{
    rf_xfer_cancel_posted(x); /* normally none: rf_xfer_recv cancels on error */
    if (x->ops != NULL && x->ops->drain != NULL)
        return x->ops->drain(x, posted_from, deadline, err);
    return rf_xfer_drain_messages(x, posted_from, deadline, err);
}
