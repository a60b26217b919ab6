/*
 * refit: the nccl transport's chunk path (include/refit/transport_nccl.h; DESIGN.md sections 9
 * and 10): one update is one pipeline over this rank's chunks in plan order (post up to B
 * ahead, complete in order) on the communicators transport_nccl.c made; every wait is
 * rf_ctl_wait_fn over cudaEventQuery / ncclCommGetAsyncError, so ABORT and the deadline end it,
 * and any error aborts every communicator of this rank at once (nccl_abort_all). Also the stage
 * gather over the stage's trainer-only communicator. Compiled only with CUDA and NCCL.
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
                          NULL, &e);
                x->stats.pack_s += rf_time_now() - t0;
                if (st != RF_OK)
                    goto fail;
                size_t covered = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
                if (cfg->integrity)
                    RF_CHECK_GOTO(
                        rf_chunk_seal(cfg->integrity, h + covered, h, covered, NULL, 0, &e), st,
                        fail);
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
            RF_CHECK_GOTO(rf_xfer_header_check(h, cfg, c, &hd, &e), st, fail);
            if (hd.payload_bytes != c->payload_bytes) {
                st = rf_err_set(&e, RF_ERR_MISMATCH,
                                "payload of %" PRIu64 " bytes, expected %" PRIu64,
                                hd.payload_bytes, c->payload_bytes);
                goto fail;
            }
            if (cfg->integrity) {
                const size_t covered = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
                RF_CHECK_GOTO(rf_chunk_check(cfg->integrity, h + covered, h, covered, NULL, 0, plan,
                                             cfg->items, c, &e),
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
        nccl_abort_all(x, err ? err->msg : e.msg);
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
