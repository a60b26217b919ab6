/*
 * refit: the mpi receiver's integrity check on the device (transport/xfer_int.h, "the mpi
 * receiver's integrity check on the device"; issue #18 item 1). A chunk's payload goes h2d from
 * its pinned receive buffer into one of two device chunk buffers, its refit-sum64 word sum is
 * enqueued behind the copy, and the chunk is checked and handed on one chunk later, when the
 * next message has arrived: the copy and the sum overlap the wire, and a corrupted chunk is
 * refused before any of its bytes are unpacked. Two slots: the chunk pending (copied, summed,
 * not yet checked) and the one being taken.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/chunk.h"
#include "xfer_int.h"

typedef struct rf_xfer_devck {
    rf_accel_t *ax;          /* x->pin_ax when created (borrowed) */
    void *buf[2];            /* device chunk buffers: payload at offset 0 (alloc: 256-aligned) */
    size_t cap;              /* bytes of each */
    void *acc;               /* device: two 8-byte accumulators */
    uint64_t *out;           /* alloc_host: the two sums */
    rf_accel_event_t *ev[2]; /* behind slot d's copy and sum */
    int pending;             /* slot of the chunk copied and summed, not yet checked; -1: none */
    int next;                /* slot the next chunk goes to */
    const rf_chunk_t *c[2];
    unsigned char hdr[2][RF_CHUNK_HEADER_BYTES]; /* its header as received */
    uint64_t want[2];                            /* its trailer */
    int src[2];                                  /* its sender */
    bool failed; /* the last failure was the check of fseq/fstage/fsrc */
    uint32_t fseq;
    int fstage, fsrc;
} rf_xfer_devck_t;

bool rf_xfer_devck_on(const rf_xfer_t *x, const rf_xfer_config_t *cfg)
{
    return x->pin_ax != NULL && cfg->integrity == RF_CHUNK_TRAILER_SUM64;
}

void rf_xfer_devck_reset(rf_xfer_t *x)
{
    if (x->dck != NULL) {
        x->dck->pending = -1;
        x->dck->failed = false;
    }
}

/* The state and its device memory, once per xfer (chunk_bytes buffers: any chunk fits). */
static rf_status_t devck_get(rf_xfer_t *x, rf_xfer_devck_t **d_p, rf_err_t *err)
{
    if (x->dck != NULL) {
        *d_p = x->dck;
        return RF_OK;
    }
    rf_accel_t *ax = x->pin_ax;
    const rf_accel_ops_t *o = ax->ops;
    rf_xfer_devck_t *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "xfer: rank %d: out of memory", x->rank);
    d->ax = ax;
    d->pending = -1;
    d->cap = (size_t)x->chunk_bytes;
    rf_status_t st = RF_OK;
    for (int i = 0; i < 2 && st == RF_OK; i++)
        st = o->alloc(ax, d->cap, &d->buf[i]);
    if (st == RF_OK)
        st = o->alloc(ax, 2 * sizeof(uint64_t), &d->acc);
    if (st == RF_OK)
        st = o->alloc_host(ax, 2 * sizeof(uint64_t), (void **)&d->out);
    for (int i = 0; i < 2 && st == RF_OK; i++)
        st = o->event_create(ax, &d->ev[i]);
    x->dck = d; /* released by rf_xfer_devck_release, even half made */
    if (st != RF_OK)
        return rf_err_set(err, st,
                          "xfer: rank %d: no two %zu-byte device chunk buffers for the "
                          "integrity check on %s device %d",
                          x->rank, d->cap, o->name, ax->device);
    *d_p = d;
    return RF_OK;
}

rf_status_t rf_xfer_devck_flush(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                                void *ctx, rf_err_t *err)
{
    rf_xfer_devck_t *d = x->dck;
    if (d == NULL || d->pending < 0)
        return RF_OK;
    const int s = d->pending;
    const rf_chunk_t *c = d->c[s];
    d->pending = -1;
    d->failed = true; /* an error from here on is this chunk's */
    d->fseq = c->seq;
    d->fstage = c->stage;
    d->fsrc = d->src[s];
    double t0 = rf_time_now();
    rf_status_t st = d->ax->ops->event_sync(d->ev[s]);
    if (st != RF_OK)
        return rf_err_set(err, st, "the h2d copy or the checksum on %s device %d failed",
                          d->ax->ops->name, d->ax->device);
    RF_CHECK(rf_chunk_check_sum(d->hdr[s], d->out[s], c->payload_bytes, d->want[s], cfg->plan,
                                cfg->items, c, err));
    st = rf_xfer_piece_segments(x, cfg->plan, c, d->buf[s], RF_XFER_MEM_DEVICE, err);
    if (st == RF_OK)
        st = recv(ctx, c, x->segs, c->piece_count, d->buf[s], err);
    x->stats.unpack_s += rf_time_now() - t0;
    if (st == RF_OK) {
        x->stats.chunks_received++;
        d->failed = false;
    }
    return st;
}

rf_status_t rf_xfer_devck_take(rf_xfer_t *x, const rf_xfer_config_t *cfg, const rf_chunk_t *c,
                               int b, int src, rf_xfer_recv_fn recv, void *ctx, rf_err_t *err)
{
    rf_xfer_devck_t *d = NULL;
    RF_CHECK(devck_get(x, &d, err));
    const rf_accel_ops_t *o = d->ax->ops;
    const unsigned char *msg = x->bufs[b];
    const size_t pay = (size_t)c->payload_bytes;
    if (pay > d->cap)
        return rf_err_set(err, RF_ERR_INVALID,
                          "chunk seq %u: payload of %zu bytes exceeds the "
                          "%zu-byte device chunk buffer",
                          c->seq, pay, d->cap);
    const int s = d->next;
    d->next ^= 1;
    /* slot s's previous readers (two chunks back) were enqueued on this stream before this */
    rf_status_t st =
        pay > 0 ? o->copy(d->ax, d->buf[s], msg + RF_CHUNK_HEADER_BYTES, pay, RF_COPY_H2D, NULL)
                : RF_OK;
    if (st == RF_OK)
        st = o->checksum_async(d->ax, d->buf[s], pay, RF_CHUNK_HEADER_BYTES / 8,
                               (uint64_t *)d->acc + s, &d->out[s], NULL);
    if (st == RF_OK)
        st = o->event_record(d->ev[s], NULL);
    if (st != RF_OK)
        return rf_err_set(err, st,
                          "chunk seq %u: enqueuing its h2d copy and checksum on %s "
                          "device %d failed",
                          c->seq, o->name, d->ax->device);
    x->stats.h2d_chunks++;
    x->stats.h2d_bytes += pay;
    memcpy(d->hdr[s], msg, RF_CHUNK_HEADER_BYTES);
    d->want[s] = rf_chunk_u64le_read(msg + RF_CHUNK_HEADER_BYTES + pay);
    d->c[s] = c;
    d->src[s] = src;
    /* the receive buffer is free for the next message once the copy out of it completed */
    RF_CHECK(rf_xfer_pin_after(x, b, err));
    st = rf_xfer_devck_flush(x, cfg, recv, ctx, err); /* the chunk before, checked and unpacked */
    if (st == RF_OK)
        d->pending = s;
    return st;
}

bool rf_xfer_devck_failed(const rf_xfer_t *x, uint32_t *seq, int *stage, int *src)
{
    if (x->dck == NULL || !x->dck->failed)
        return false;
    *seq = x->dck->fseq;
    *stage = x->dck->fstage;
    *src = x->dck->fsrc;
    return true;
}

void rf_xfer_devck_release(rf_xfer_t *x)
{
    rf_xfer_devck_t *d = x->dck;
    if (d == NULL)
        return;
    const rf_accel_ops_t *o = d->ax->ops;
    (void)rf_accel_sync(d->ax);
    for (int i = 0; i < 2; i++) {
        if (d->ev[i] != NULL)
            o->event_destroy(d->ev[i]);
        if (d->buf[i] != NULL)
            o->free(d->ax, d->buf[i]);
    }
    if (d->acc != NULL)
        o->free(d->ax, d->acc);
    if (d->out != NULL)
        o->free_host(d->ax, d->out);
    free(d);
    x->dck = NULL;
}
