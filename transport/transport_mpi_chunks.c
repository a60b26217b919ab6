/*
 * refit: the mpi chunk transport (include/refit/transport.h; its table below is one
 * rf_xfer_ops_t, transport/xfer_int.h): every chunk is one message of the mpi message
 * transport (transport_mpi.c) on x->tp, from x->bufs.
 *
 * Sender: slot b = j mod buffers for its j-th chunk; before packing into a slot it waits until
 * every send from that slot completed, so chunk k+1 is packed while chunk k is on the wire;
 * the chunk codec seals the message in integrity mode. Receiver: `buffers` receives posted
 * ahead in the global sequence, consumed in order; each header is checked against the next
 * expected (update, seq), and the trailer by the codec, before the chunk's pieces go to the
 * receive callback as host segments of the payload. Every wait goes through the control
 * channel (ABORT + deadline). On error the rank posts ABORT (unless it is reacting to one),
 * cancels its posted receives, and leaves its sends outstanding for the drain
 * (rf_xfer_drain_messages, xfer_common.c). Host memory only: no capability bit.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "refit/control.h"
#include "refit/log.h"
#include "refit/transport.h"
#include "xfer_int.h"

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

static rf_status_t mpi_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                            void *ctx, rf_err_t *err)
{
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
            RF_CHECK_GOTO(rf_xfer_send_copies(x, f, c->seq, buf, bytes, peer, tag,
                                              &x->sreqs[b * per], &nreq, &e),
                          st, fail);
        }
        rf_xfer_slot_sent(x, b);
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

static rf_status_t mpi_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                            void *ctx, rf_err_t *err)
{
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
        MPI_Status status;
        RF_CHECK_GOTO(rf_xfer_wait_one(x, &x->rreqs[b], cfg->deadline, &status, &e), st, fail);
        size_t got = 0;
        RF_CHECK_GOTO(rf_xfer_recv_counted(x, &status, src, &got, &e), st, fail);
        const unsigned char *buf = x->bufs[b];
        rf_chunk_header_t h;
        if (got < RF_CHUNK_HEADER_BYTES) {
            st = rf_err_set(&e, RF_ERR_MISMATCH, "message of %zu bytes has no header", got);
            goto fail;
        }
        RF_CHECK_GOTO(rf_xfer_header_check(buf, cfg, c, &h, &e), st, fail);
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
        double t0 = rf_time_now();
        st = rf_xfer_piece_segments(x, plan, c, buf + RF_CHUNK_HEADER_BYTES, RF_XFER_MEM_HOST,
                                    &e);
        if (st == RF_OK)
            st = recv(ctx, c, x->segs, c->piece_count, buf + RF_CHUNK_HEADER_BYTES, &e);
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

static const rf_xfer_ops_t mpi_xfer_ops = {
    .name = "mpi",
    .caps = 0,
    .wire = "mpi",
    .send = mpi_send,
    .recv = mpi_recv,
    .drain = rf_xfer_drain_messages,
};

const rf_xfer_ops_t *rf_xfer_mpi_ops(void)
{
    return &mpi_xfer_ops;
}
