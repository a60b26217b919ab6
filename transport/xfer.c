/*
 * refit: the transfer engine's core (include/refit/transport.h): what every chunk transport
 * shares, and dispatch to it.
 *
 * rf_xfer_create asks the registry (transport_registry.c) for the table of the name it was
 * given, creates the message transport that table runs on (its wire), the slots, requests and
 * counters, then the transport's open. Every other public call checks its arguments (the
 * update's config against the buffers and ranks), keeps the counters and calls the table's
 * entry (transport/xfer_int.h); an entry left NULL means the transport has nothing to do
 * there. This file names no transport. The helpers the chunk paths share are in
 * xfer_common.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/pool.h"
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
    x->slots = x->buffers;
    x->rank = rf_ctl_rank(ctl);
    x->nranks = rf_ctl_size(ctl);
    /* the chunk transport's table; an unknown name is the message transports' refusal */
    x->ops = rf_xfer_ops_lookup(transport);
    x->caps = x->ops != NULL ? x->ops->caps : 0;
    x->buf_bytes = x->ops != NULL && x->ops->buf_bytes != NULL ? x->ops->buf_bytes(chunk_bytes)
                                                               : chunk_bytes;
    rf_status_t st = rf_transport_create(x->ops != NULL ? x->ops->wire : transport,
                                         rf_ctl_comm(ctl), &x->tp, err);
    if (st == RF_OK && x->ops == NULL) {
        rf_transport_destroy(x->tp);
        st = rf_err_set(err, RF_ERR_UNSUPPORTED, "transport %s: not built", transport);
    }
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
    if (x->ops->open != NULL && (st = x->ops->open(x, err)) != RF_OK) {
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
    rf_xfer_devck_release(x); /* the device check's buffers, before the accel's pinned ones */
    rf_pool_destroy(x->seal_pool);
    rf_xfer_pin_release(x); /* after the receives: nothing lands in them any more */
    if (x->ops != NULL && x->ops->close != NULL)
        x->ops->close(x);
    rf_transport_destroy(x->tp);
    if (x->bufs != NULL)
        for (int b = 0; b < x->slots; b++)
            rf_chunk_buffer_free(x->bufs[b]);
    free(x->bufs);
    free(x->sreqs);
    free(x->rreqs);
    free(x->slot_busy);
    free(x->segs);
    free(x->stats.peers);
    free(x);
}

rf_status_t rf_xfer_setup(rf_xfer_t *x, const rf_xfer_setup_t *setup, rf_err_t *err)
{
    if (x == NULL || setup == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "xfer: setup without a transfer or its setup");
    return x->ops->setup != NULL ? x->ops->setup(x, setup, err) : RF_OK;
}

unsigned rf_xfer_caps(const rf_xfer_t *x)
{
    return x != NULL ? x->caps : 0;
}

rf_status_t rf_xfer_sources(rf_xfer_t *x, uint32_t update, rf_xfer_sources_t state,
                            rf_err_t *err)
{
    return x->ops->sources != NULL ? x->ops->sources(x, update, state, err) : RF_OK;
}

void rf_xfer_fail(rf_xfer_t *x)
{
    if (x != NULL && x->ops->fail != NULL)
        x->ops->fail(x);
}

rf_status_t rf_xfer_begin(rf_xfer_t *x, uint32_t update, double deadline, rf_err_t *err)
{
    rf_peer_counts_t *peers = x->stats.peers;
    memset(peers, 0, (size_t)x->nranks * sizeof(*peers));
    memset(&x->stats, 0, sizeof(x->stats));
    x->stats.peers = peers;
    x->stats.nranks = x->nranks;
    x->stats.update = update;
    return x->ops->begin != NULL ? x->ops->begin(x, update, deadline, err) : RF_OK;
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
    if (cfg->integrity != 0 && cfg->integrity != RF_CHUNK_TRAILER_XXH3 &&
        cfg->integrity != RF_CHUNK_TRAILER_SUM64)
        return rf_err_set(err, RF_ERR_INVALID, "xfer: integrity %d is no trailer algorithm",
                          cfg->integrity);
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

rf_status_t rf_xfer_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                         void *ctx, rf_err_t *err)
{
    RF_CHECK(check_config(x, cfg, err));
    return x->ops->send(x, cfg, pack, ctx, err);
}

rf_status_t rf_xfer_send_p2p(rf_xfer_t *x, const rf_xfer_pair_t *pairs, size_t n, int inflight,
                             rf_xfer_pack_fn pack, rf_err_t *err)
{
    if (n > 0 && pairs == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "xfer: %zu p2p pairs without their array", n);
    for (size_t i = 0; i < n; i++) {
        RF_CHECK(check_config(x, pairs[i].cfg, err));
        if (pairs[i].cfg->n_receivers != 1 || pairs[i].cfg->update != pairs[0].cfg->update)
            return rf_err_set(err, RF_ERR_INVALID,
                              "xfer: p2p pair %zu of rank %d: %d receivers in its config (one "
                              "per pair) or another update",
                              i, x->rank, pairs[i].cfg->n_receivers);
    }
    if (inflight < 1)
        inflight = 1;
    /* never a window (nor buffers for it) wider than this sender's pairs */
    if ((size_t)inflight > n)
        inflight = n > 0 ? (int)n : 1;
    /* without a path of its own (ipc, nccl) or at one receiver at a time: pair after pair,
     * which is exactly what send does for one */
    if (x->ops->send_p2p == NULL || inflight == 1 || n <= 1) {
        if (x->ops->send_p2p != NULL && n > 0)
            return x->ops->send_p2p(x, pairs, n, 1, pack, err);
        for (size_t i = 0; i < n; i++)
            RF_CHECK(x->ops->send(x, pairs[i].cfg, pack, pairs[i].ctx, err));
        return RF_OK;
    }
    return x->ops->send_p2p(x, pairs, n, inflight, pack, err);
}

size_t rf_xfer_p2p_start(const int *dst, size_t n, int first_rank)
{
    size_t k = 0;
    while (k < n && dst[k] < first_rank)
        k++;
    return k < n ? k : 0;
}

rf_status_t rf_xfer_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                         void *ctx, rf_err_t *err)
{
    RF_CHECK(check_config(x, cfg, err));
    return x->ops->recv(x, cfg, recv, ctx, err);
}

rf_status_t rf_xfer_drain(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                          rf_err_t *err)
{
    rf_xfer_cancel_posted(x); /* normally none: rf_xfer_recv cancels on error */
    /* the drain receives into bufs[0]: the failed update's h2d copies must be done with them */
    rf_err_t ge;
    rf_err_clear(&ge);
    if (rf_xfer_pin_gate(x, -1, &ge) != RF_OK)
        rf_warn("xfer: %s", ge.msg);
    return x->ops->drain != NULL ? x->ops->drain(x, posted_from, deadline, err) : RF_OK;
}

int rf_xfer_p2p_first_receiver(int sender, int n_senders, int n_receivers)
{
    if (n_senders <= 0 || n_receivers <= 0 || sender < 0)
        return 0;
    return (int)(((int64_t)sender * n_receivers / n_senders) % n_receivers);
}
