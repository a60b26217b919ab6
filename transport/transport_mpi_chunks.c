/*
 * refit: the mpi chunk transport (include/refit/transport.h; its table below is one
 * rf_xfer_ops_t, transport/xfer_int.h): every chunk is one message of the mpi message
 * transport (transport_mpi.c) on x->tp, from x->bufs.
 *
 * Sender: slot b = j mod buffers for its j-th chunk; before packing into a slot it waits until
 * every send from that slot completed, so chunk k+1 is packed while chunk k is on the wire;
 * where setup allowed it (x->send_spin) its waits spin while the chunks stream and a
 * cfg->pack_thread pack runs on a helper thread while this one tests the posted sends (a
 * shared-memory message without single-copy moves only inside MPI calls: packer_t below);
 * the chunk codec seals the message in integrity mode. A p2p sender (mpi_send_p2p) keeps
 * chunks to several receivers in flight instead: a window of pairs served round-robin, each
 * chunk into whichever slot is free, so one slow receiver does not hold up the others (the
 * receivers take any sender's chunk, mpi_recv_any). Receiver: `buffers` receives posted
 * ahead in the global sequence, consumed in order; or, with cfg->any_order (p2p), posted from
 * any sender and taken as the senders' messages arrive (mpi_recv_any). Each header is checked
 * against the next expected (update, seq) of its stage, and the trailer by the codec, before
 * the chunk's pieces go to the receive callback as host segments of the payload. Every wait goes
 * through the control channel (ABORT + deadline). A receiver on device storage receives into
 * pinned buffers (mpi_setup): the callback's h2d copies from a buffer run while the next
 * message arrives, and an event per buffer gates its next receive (post_held, post_recv). On error
 * the rank posts ABORT (unless it is reacting to one), cancels its posted receives, and leaves its
 * sends outstanding for the drain (rf_xfer_drain_messages, xfer_common.c). Host memory only;
 * RF_XFER_CAP_ANY_ORDER.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/control.h"
#include "refit/env.h"
#include "refit/pool.h"
#include "refit/log.h"
#include "refit/transport.h"
#include "xfer_int.h"

/* A sender's failure: the error wrapped with where it happened (the chunk and its receiver
 * when known), then ABORT to every rank unless a peer is already gone. Returns st. */
static rf_status_t send_failed(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_status_t st,
                               rf_err_t *e, uint32_t seq, int stage, int peer, rf_err_t *err)
{
    char where[160];
    if (peer >= 0)
        snprintf(where, sizeof(where), "update %u: sending chunk seq %u (stage %d) to rank %d",
                 cfg->update, seq, stage, peer);
    else if (stage >= 0)
        snprintf(where, sizeof(where), "update %u: sending chunk seq %u (stage %d)", cfg->update,
                 seq, stage);
    else
        snprintf(where, sizeof(where), "update %u: sending", cfg->update);
    rf_xfer_wrap(err, st, e, where);
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e->msg);
    return st;
}

/* RF_CTL_WAIT_SPIN while an update's chunks stream, only on a rank whose receive buffers are
 * pinned for a device (x->pin_ax): the H200 run that asked for it (docs/benchmarks.md,
 * "Checkpoint into GPU storage over mpi") had a GPU receiver; on host-only ranks, oversubscribed
 * as CI runs them, 0.25 s spins per wait would take the cores the peers need, and no
 * measurement says they help there. */
static unsigned stream_spin(const rf_xfer_t *x)
{
    return x->pin_ax != NULL ? RF_CTL_WAIT_SPIN : 0u;
}

/* The sender's: RF_CTL_WAIT_SPIN while its chunks stream where setup allowed it (send_spin:
 * cores to spare on the node, rf_xfer_send_spin_default); the pinned receiver's rule too. */
static unsigned send_spin(const rf_xfer_t *x)
{
    return x->send_spin ? RF_CTL_WAIT_SPIN : stream_spin(x);
}

rf_status_t rf_xfer_send_spin_default(int world_size, bool *spin_p, rf_err_t *err)
{
    const char *o = getenv("REFIT_MPI_SEND_SPIN");
    if (o != NULL && o[0] != '\0') /* 0 or 1; anything else refused naming it */
        return rf_env_flag("REFIT_MPI_SEND_SPIN", false, spin_p, err);
    long cores, local;
    rf_env_node_share(world_size, &cores, &local);
    *spin_p = 2 * local <= cores;
    return RF_OK;
}

rf_status_t rf_xfer_seal_fused(bool *on_p, rf_err_t *err)
{
    return rf_env_flag("REFIT_MPI_SEAL_FUSED", true, on_p, err);
}

/* The seal's workers for trailer alg: started at the first refit-sum64 send of a spinning
 * sender (x->seal_threads), kept for the job; NULL (the calling thread) otherwise. */
static rf_status_t seal_pool(rf_xfer_t *x, int alg, rf_err_t *err)
{
    if (alg != RF_CHUNK_TRAILER_SUM64 || x->seal_threads < 2 || x->seal_pool != NULL)
        return RF_OK;
    RF_CHECK(rf_pool_create(x->seal_threads, &x->seal_pool, err));
    RF_LOG(RF_LOG_INFO, "rank %d: seals refit-sum64 chunks with %d thread(s)", x->rank,
           rf_pool_threads(x->seal_pool));
    return RF_OK;
}

/* Waits (ABORT + deadline) until every send from slot b completed; spin: without sleeps (the
 * update's chunks are streaming, RF_CTL_WAIT_SPIN, where send_spin allows it). */
static rf_status_t wait_slot(rf_xfer_t *x, int b, double deadline, bool spin, rf_err_t *err)
{
    double t0 = rf_time_now();
    int per = 2 * x->nranks;
    rf_status_t st =
        rf_ctl_wait_flags(x->ctl, &x->sreqs[b * per], per, deadline, spin ? send_spin(x) : 0u, err);
    x->stats.wire_s += rf_time_now() - t0;
    if (st == RF_OK)
        x->slot_busy[b] = 0;
    return st;
}

/* Packs chunk c into msg's payload and, for trailer alg (0: none), seals msg: refit-sum64 from
 * the pack's own payload sum where it gave one (rf_chunk_seal_sum: the header read, not the
 * payload; x->seal_fused), else the message read over the seal pool (rf_chunk_seal_pool).
 * Thread safe for one caller per x (the pack thread or the calling thread). */
static rf_status_t pack_and_seal(rf_xfer_t *x, rf_xfer_pack_fn pack, void *ctx,
                                 const rf_chunk_t *c, const rf_chunk_piece_t *pieces, int alg,
                                 unsigned char *msg, rf_err_t *err)
{
    rf_chunk_sum_t sum = {0, 0};
    bool want = alg == RF_CHUNK_TRAILER_SUM64 && x->seal_fused;
    RF_CHECK(pack(ctx, c, pieces, msg + RF_CHUNK_HEADER_BYTES, want ? &sum : NULL, err));
    if (alg == 0)
        return RF_OK;
    size_t covered = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
    if (want && sum.have) {
        x->stats.seals_fused++; /* one packer at a time: its done flag orders this */
        return rf_chunk_seal_sum(msg, covered, sum.S, err);
    }
    return rf_chunk_seal_pool(alg, msg, covered, x->seal_pool, err);
}

/*
 * The sender's pack thread (cfg->pack_thread where x->send_spin): one helper thread per
 * rf_xfer_send call packs each chunk into its slot while the calling thread tests the
 * requests of the chunks already posted, so MPI keeps moving them (a large shared-memory
 * message without single-copy progresses only inside MPI calls): chunk k + 1 is packed, a
 * checkpoint read included (rf_trainer_produce's streamed reads), while chunk k is on the
 * wire; the chunk's seal too, in integrity mode (rf_chunk_seal_pool over x->seal_pool: with
 * one thread a refit-sum64 seal of 32 MiB took about as long as the chunk's wire, and the
 * calling thread did not drive MPI meanwhile). The calling thread hands over one chunk at a
 * time and waits for it before posting it;
 * on an ABORT or the deadline it still waits for the pack in progress (a bounded read or
 * copy) before returning, so nothing writes a slot after rf_xfer_send returned.
 */
typedef struct packer {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int job;         /* under mu: 1 a chunk to pack, -1 stop, 0 none */
    atomic_int done; /* 1: the handed chunk's pack returned, st and e set (release) */
    rf_xfer_pack_fn pack;
    void *ctx;
    const rf_chunk_t *c;
    const rf_chunk_piece_t *pieces;
    rf_xfer_t *x;
    int alg;           /* integrity: seal msg after the pack (pack_and_seal); 0: none */
    unsigned char *msg; /* the chunk message: header, then the payload the pack fills */
    rf_status_t st;
    rf_err_t e;
} packer_t;

static void *packer_main(void *arg)
{
    packer_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->job == 0)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->job < 0)
            break;
        p->job = 0;
        pthread_mutex_unlock(&p->mu);
        rf_err_clear(&p->e);
        p->st = pack_and_seal(p->x, p->pack, p->ctx, p->c, p->pieces, p->alg, p->msg, &p->e);
        atomic_store_explicit(&p->done, 1, memory_order_release);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static rf_status_t packer_start(packer_t *p, rf_xfer_pack_fn pack, void *ctx, rf_err_t *err)
{
    memset(p, 0, sizeof(*p));
    p->pack = pack;
    p->ctx = ctx;
    atomic_init(&p->done, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return rf_err_set(err, RF_ERR_INTERNAL, "the sender's pack thread: no mutex");
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        return rf_err_set(err, RF_ERR_INTERNAL, "the sender's pack thread: no condition");
    }
    if (pthread_create(&p->th, NULL, packer_main, p) != 0) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        return rf_err_set(err, RF_ERR_INTERNAL, "the sender's pack thread could not start");
    }
    return RF_OK;
}

static void packer_post(packer_t *p, rf_xfer_t *x, const rf_chunk_t *c,
                        const rf_chunk_piece_t *pieces, int alg, unsigned char *msg)
{
    p->c = c;
    p->pieces = pieces;
    p->x = x;
    p->alg = alg;
    p->msg = msg;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    p->job = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void packer_stop(packer_t *p)
{
    pthread_mutex_lock(&p->mu);
    p->job = -1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
}

/* The calling thread's wait for the pack of the chunk into slot b: done, else one test of
 * the other slots' send requests (a completed one becomes MPI_REQUEST_NULL: its slot's
 * wait_slot then returns at once). */
typedef struct pack_wait {
    rf_xfer_t *x;
    packer_t *p;
    int b;
} pack_wait_t;

static int pack_wait_test(void *vctx, rf_err_t *err)
{
    pack_wait_t *w = vctx;
    if (atomic_load_explicit(&w->p->done, memory_order_acquire))
        return 1;
    const int per = 2 * w->x->nranks;
    for (int o = 0; o < w->x->buffers; o++) {
        int flag = 0;
        if (o == w->b || !w->x->slot_busy[o])
            continue;
        if (MPI_Testall(per, &w->x->sreqs[o * per], &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return rf_err_set(err, RF_ERR_MPI, "MPI_Testall failed on chunk sends");
    }
    return 0;
}

/* Hands chunk c to the pack thread (its pack into slot b's message msg and, in integrity mode,
 * the seal) and waits for it (ABORT + deadline), the other slots' sends progressing
 * meanwhile; after a failed wait, still until the pack returned. */
static rf_status_t packer_run(rf_xfer_t *x, packer_t *p, const rf_xfer_config_t *cfg,
                              const rf_chunk_t *c, const rf_chunk_piece_t *pieces, int b,
                              unsigned char *msg, rf_err_t *err)
{
    packer_post(p, x, c, pieces, cfg->integrity, msg);
    pack_wait_t w = {x, p, b};
    rf_status_t st = rf_ctl_wait_fn(x->ctl, pack_wait_test, &w, cfg->deadline, send_spin(x), err);
    while (!atomic_load_explicit(&p->done, memory_order_acquire))
        sched_yield();
    if (st == RF_OK && p->st != RF_OK) {
        st = p->st;
        rf_err_set(err, st, "%s", p->e.msg);
    }
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

    packer_t pk;
    bool threaded = false;
    memset(&pk, 0, sizeof(pk));
    /* sends of an earlier update never drained: complete them first */
    for (int b = 0; b < x->buffers; b++)
        RF_CHECK_GOTO(wait_slot(x, b, cfg->deadline, false, &e), st, fail);
    RF_CHECK_GOTO(seal_pool(x, cfg->integrity, &e), st, fail);
    if (cfg->pack_thread && x->send_spin) {
        RF_CHECK_GOTO(packer_start(&pk, pack, ctx, &e), st, fail);
        threaded = true;
    }

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
        /* once this update's chunks are on the wire, the waits keep MPI progressing */
        RF_CHECK_GOTO(wait_slot(x, b, cfg->deadline, j > 1, &e), st, fail);
        unsigned char *buf = x->bufs[b];
        rf_chunk_header_write(buf, cfg->update, c->seq, c->payload_bytes);
        double t0 = rf_time_now();
        st = threaded /* the pack thread seals too */
                 ? packer_run(x, &pk, cfg, c, &plan->pieces[c->piece_begin], b, buf, &e)
                 : pack_and_seal(x, pack, ctx, c, &plan->pieces[c->piece_begin], cfg->integrity,
                                 buf, &e);
        x->stats.pack_s += rf_time_now() - t0;
        if (st != RF_OK)
            goto fail;
        size_t bytes = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
        if (cfg->integrity)
            bytes += RF_CHUNK_TRAILER_BYTES;
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
    if (threaded)
        packer_stop(&pk);
    threaded = false;
    peer = -1;
    for (int b = 0; b < x->buffers; b++)
        RF_CHECK_GOTO(wait_slot(x, b, cfg->deadline, j > 0, &e), st, fail);
    return RF_OK;

fail:
    if (threaded)
        packer_stop(&pk);
    return send_failed(x, cfg, st, &e, seq, stage, peer, err);
}

/*
 * The p2p sender over several pairs (rf_xfer_send_p2p's contract): a window of up to
 * `inflight` pairs, chunks taken round-robin across it, at most `cap` posted and not complete
 * per pair, S slots in all. Each pair is one receiver's plan (cfg->receivers[0]); its chunks
 * are those of the stages this rank sends, in seq order, as mpi_send takes them.
 */
typedef struct p2p_send {
    rf_xfer_t *x;
    const rf_xfer_pair_t *pairs;
    size_t *next;  /* [n] pair's next chunk index in its plan (plan->n_chunks: none left) */
    int *out;      /* [n] its chunks posted and not yet complete */
    int *owner;    /* [S] pair whose chunk slot b holds */
    int *pending;  /* [S] slot b's requests not yet complete */
    int busy_pairs, max_busy_pairs;
} p2p_send_t;

/* Pair i's first chunk at or after k that this rank sends. */
static size_t p2p_own_chunk(const p2p_send_t *ps, size_t i, size_t k)
{
    const rf_xfer_config_t *cfg = ps->pairs[i].cfg;
    while (k < cfg->plan->n_chunks && cfg->stage_senders[cfg->plan->chunks[k].stage] != ps->x->rank)
        k++;
    return k;
}

/* A send request completed: its slot is free once all of the slot's are. */
static rf_status_t p2p_sent(void *ctx, int index, const MPI_Status *status, rf_err_t *err)
{
    (void)status;
    (void)err;
    p2p_send_t *ps = ctx;
    const int b = index / (2 * ps->x->nranks);
    if (--ps->pending[b] == 0) {
        ps->x->slot_busy[b] = 0;
        if (--ps->out[ps->owner[b]] == 0)
            ps->busy_pairs--;
    }
    return RF_OK;
}

static rf_status_t mpi_send_p2p(rf_xfer_t *x, const rf_xfer_pair_t *pairs, size_t n,
                                int inflight, rf_xfer_pack_fn pack, rf_err_t *err)
{
    const int per = 2 * x->nranks;
    const int S = x->buffers > inflight ? x->buffers : inflight;
    const int cap = S / inflight > 1 ? S / inflight : 1;
    const rf_xfer_config_t *cfg = pairs[0].cfg; /* update, deadline: the same in every pair */
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = RF_OK;
    uint32_t seq = 0;
    int stage = -1, peer = -1, nact = 0, rr = 0, switches = 0, last_peer = -1;
    size_t joined = 0, started = 0;
    char order[256];
    size_t olen = 0;
    order[0] = '\0';
    p2p_send_t ps = {.x = x, .pairs = pairs};
    ps.next = calloc(n, sizeof(size_t));
    ps.out = calloc(n, sizeof(int));
    ps.owner = calloc((size_t)S, sizeof(int));
    ps.pending = calloc((size_t)S, sizeof(int));
    size_t *active = calloc((size_t)inflight, sizeof(size_t)); /* the window, in join order */
    if (ps.next == NULL || ps.out == NULL || ps.owner == NULL || ps.pending == NULL ||
        active == NULL) {
        st = rf_err_set(&e, RF_ERR_NOMEM, "out of memory for %zu p2p pairs", n);
        goto fail;
    }
    RF_CHECK_GOTO(rf_xfer_grow_slots(x, S, &e), st, fail);
    /* sends of an earlier update never drained: complete them first */
    for (int b = 0; b < x->slots; b++)
        RF_CHECK_GOTO(wait_slot(x, b, cfg->deadline, false, &e), st, fail);
    RF_CHECK_GOTO(seal_pool(x, cfg->integrity, &e), st, fail);

    for (size_t i = 0; i < n; i++)
        ps.next[i] = p2p_own_chunk(&ps, i, 0);
    for (;;) {
        /* a pair leaves the window when its last chunk completed (so the window bounds the
         * receivers with chunks in flight, as the scale model has it) */
        int q = 0;
        for (int t = 0; t < nact; t++) {
            const size_t a = active[t];
            if (ps.next[a] >= pairs[a].cfg->plan->n_chunks && ps.out[a] == 0) {
                rr -= t < rr;
                continue;
            }
            active[q++] = a;
        }
        nact = q;
        if (rr >= nact)
            rr = 0;
        /* fill the window in the pairs' order (pairs with nothing for this rank never join) */
        while (nact < inflight && joined < n) {
            if (ps.next[joined] < pairs[joined].cfg->plan->n_chunks) {
                active[nact++] = joined;
                /* the order the pairs joined in (tests read it) */
                started++;
                if (olen < sizeof(order) - 16)
                    olen += (size_t)snprintf(order + olen, sizeof(order) - olen, "%s%d",
                                             olen ? "," : "", pairs[joined].cfg->receivers[0]);
            }
            joined++;
        }
        if (nact == 0)
            break;
        int b = -1, p = -1;
        for (int k = 0; k < S && b < 0; k++)
            if (!x->slot_busy[k])
                b = k;
        for (int t = 0; t < nact && p < 0; t++) {
            const size_t a = active[(rr + t) % nact];
            if (ps.next[a] < pairs[a].cfg->plan->n_chunks && ps.out[a] < cap)
                p = (rr + t) % nact;
        }
        if (b < 0 || p < 0) {
            /* every slot, or every pair in the window with chunks left, waits on the wire: the
             * first to complete */
            double t0 = rf_time_now();
            peer = -1;
            /* chunks are on the wire: spin where setup allows it, as mpi_send */
            st = rf_ctl_wait_some(x->ctl, x->sreqs, S * per, cfg->deadline, send_spin(x), p2p_sent,
                                  &ps, &e);
            x->stats.wire_s += rf_time_now() - t0;
            if (st != RF_OK)
                goto fail;
            continue;
        }
        const size_t a = active[p];
        const rf_xfer_config_t *pc = pairs[a].cfg;
        const rf_chunk_plan_t *plan = pc->plan;
        const rf_chunk_t *c = &plan->chunks[ps.next[a]];
        const rf_xfer_fault_t *f = &pc->fault;
        seq = c->seq;
        stage = c->stage;
        peer = pc->receivers[0];
        RF_CHECK_GOTO(rf_ctl_poll(x->ctl, &e), st, fail); /* eager sends never wait */
        unsigned char *buf = x->bufs[b];
        rf_chunk_header_write(buf, pc->update, c->seq, c->payload_bytes);
        double t0 = rf_time_now();
        st = pack_and_seal(x, pack, pairs[a].ctx, c, &plan->pieces[c->piece_begin],
                           pc->integrity, buf, &e);
        x->stats.pack_s += rf_time_now() - t0;
        if (st != RF_OK)
            goto fail;
        size_t bytes = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
        if (pc->integrity)
            bytes += RF_CHUNK_TRAILER_BYTES;
        if (f->corrupt_seq == (int64_t)c->seq && c->payload_bytes > 0) {
            buf[RF_CHUNK_HEADER_BYTES + c->payload_bytes / 2] ^= 0x10; /* after the checksum */
            rf_warn("fault: rank %d flipped a payload byte of chunk %u to rank %d (update %u)",
                    x->rank, c->seq, peer, pc->update);
        }
        int nreq = 0;
        if (peer != x->rank)
            RF_CHECK_GOTO(rf_xfer_send_copies(x, f, c->seq, buf, bytes, peer,
                                              RF_XFER_TAG(pc->update, c->stage),
                                              &x->sreqs[b * per], &nreq, &e),
                          st, fail);
        if (nreq > 0) {
            ps.pending[b] = nreq;
            ps.owner[b] = (int)a;
            if (ps.out[a]++ == 0 && ++ps.busy_pairs > ps.max_busy_pairs)
                ps.max_busy_pairs = ps.busy_pairs;
            rf_xfer_slot_sent(x, b);
        }
        switches += last_peer >= 0 && peer != last_peer;
        last_peer = peer;
        ps.next[a] = p2p_own_chunk(&ps, a, ps.next[a] + 1);
        rr = (p + 1) % nact;
    }
    peer = -1;
    for (int b = 0; b < S; b++)
        RF_CHECK_GOTO(wait_slot(x, b, cfg->deadline, false, &e), st, fail);
    /* the sender's order: which receiver came first, how many at once, how often the
     * receiver changed between consecutive chunks (one pair at a time: pairs - 1) */
    RF_LOG(RF_LOG_INFO, "update %u: rank %d sent %zu pairs, up to %d receivers in flight at "
           "once (window %d, %d slots, %d a pair); the receiver changed %d times between "
           "consecutive chunks; pairs joined in the order of ranks %s%s", cfg->update, x->rank, started,
           ps.max_busy_pairs, inflight, S, cap, switches, order,
           olen >= sizeof(order) - 16 ? ",..." : "");
    free(ps.next);
    free(ps.out);
    free(ps.owner);
    free(ps.pending);
    free(active);
    return RF_OK;

fail:
    free(ps.next);
    free(ps.out);
    free(ps.owner);
    free(ps.pending);
    free(active);
    return send_failed(x, cfg, st, &e, seq, stage, peer, err);
}

/* Receiver: chunk c arrived in buf (got bytes): checks its header (update, seq, payload size)
 * and, in integrity mode, its trailer, then hands its pieces to the receive callback. */
static rf_status_t take_chunk(rf_xfer_t *x, const rf_xfer_config_t *cfg, const rf_chunk_t *c, int b,
                              size_t got, int src, rf_xfer_recv_fn recv, void *ctx, rf_err_t *e)
{
    const unsigned char *buf = x->bufs[b];
    const rf_chunk_plan_t *plan = cfg->plan;
    rf_chunk_header_t h;
    if (got < RF_CHUNK_HEADER_BYTES)
        return rf_err_set(e, RF_ERR_MISMATCH, "message of %zu bytes has no header", got);
    RF_CHECK(rf_xfer_header_check(buf, cfg, c, &h, e));
    const size_t trailer = cfg->integrity ? RF_CHUNK_TRAILER_BYTES : 0;
    if (h.payload_bytes != c->payload_bytes ||
        got != RF_CHUNK_HEADER_BYTES + c->payload_bytes + trailer)
        return rf_err_set(e, RF_ERR_MISMATCH,
                          "payload of %" PRIu64 " bytes (message %zu), expected %" PRIu64 "%s",
                          h.payload_bytes, got, c->payload_bytes,
                          trailer ? " plus an 8-byte checksum trailer" : "");
    /* device storage with refit-sum64 trailers: checked on the device chunk buffer, handed on
     * when the next chunk arrived (xfer_devck.c) */
    if (rf_xfer_devck_on(x, cfg))
        return rf_xfer_devck_take(x, cfg, c, b, src, recv, ctx, e);
    if (cfg->integrity) {
        const size_t covered = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
        RF_CHECK(rf_chunk_check(cfg->integrity, buf + covered, buf, covered, NULL, 0, plan,
                                cfg->items, c, e));
    }
    double t0 = rf_time_now();
    rf_status_t st = rf_xfer_piece_segments(x, plan, c, buf + RF_CHUNK_HEADER_BYTES,
                                            RF_XFER_MEM_HOST, e);
    if (st == RF_OK)
        st = recv(ctx, c, x->segs, c->piece_count, buf + RF_CHUNK_HEADER_BYTES, e);
    /* pinned buffers: the copies the callback enqueued from this buffer, even a failed one's,
     * are behind this event; the buffer's next receive (or the drain) waits for it */
    rf_status_t ps = rf_xfer_pin_after(x, b, e);
    if (st == RF_OK)
        st = ps;
    x->stats.unpack_s += rf_time_now() - t0;
    if (st == RF_OK)
        x->stats.chunks_received++;
    return st;
}

/* Receiver: posts buffer b's receive of plan chunk k (any_order: from any sender, any tag),
 * after the gate: pinned buffers take a message only once the copies reading them completed. */
static rf_status_t post_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, int b, size_t k,
                             rf_err_t *e)
{
    RF_CHECK(rf_xfer_pin_gate(x, b, e));
    if (cfg->any_order)
        return x->tp->ops->irecv(x->tp, x->bufs[b], x->chunk_bytes, MPI_ANY_SOURCE, MPI_ANY_TAG,
                                 &x->rreqs[b], e);
    const rf_chunk_t *c = &cfg->plan->chunks[k];
    return x->tp->ops->irecv(x->tp, x->bufs[b], x->chunk_bytes, cfg->stage_senders[c->stage],
                             RF_XFER_TAG(cfg->update, c->stage), &x->rreqs[b], e);
}

/*
 * Pinned buffers: the buffer just consumed is held (*hold) instead of re-posted at once, so
 * its h2d copies run while the next message arrives; it is re-posted (after its gate) before
 * the next wait when its copies are done already or it is the one waited on (one buffer),
 * during that wait as soon as they are (wait_recv), else right after it (before_wait false). Pageable buffers never hold: their copies
 * completed inside the callback.
 */
static rf_status_t post_held(rf_xfer_t *x, const rf_xfer_config_t *cfg, int *hold, int wait_b,
                             bool before_wait, size_t *posted, rf_err_t *e)
{
    if (*hold < 0 || (before_wait && *hold != wait_b && !rf_xfer_pin_ready(x, *hold)))
        return RF_OK;
    RF_CHECK(post_recv(x, cfg, *hold, *posted, e));
    (*posted)++;
    *hold = -1;
    return RF_OK;
}

/* The wait for one receive (rf_xfer_wait_one's, counted as wire time), re-posting the held
 * buffer (post_held) as soon as its copies are done, so the next message can start while this
 * one arrives. */
typedef struct recv_wait {
    rf_xfer_t *x;
    const rf_xfer_config_t *cfg;
    MPI_Request *req;
    MPI_Status status;
    int *hold;
    size_t *posted;
} recv_wait_t;

static int recv_wait_test(void *vctx, rf_err_t *err)
{
    recv_wait_t *w = vctx;
    if (*w->hold >= 0 && rf_xfer_pin_ready(w->x, *w->hold)) {
        rf_status_t st = post_recv(w->x, w->cfg, *w->hold, *w->posted, err);
        if (st != RF_OK)
            return st;
        (*w->posted)++;
        *w->hold = -1;
    }
    int flag = 0;
    if (MPI_Test(w->req, &flag, &w->status) != MPI_SUCCESS)
        return rf_err_set(err, RF_ERR_MPI, "MPI_Test failed on a chunk receive");
    return flag;
}

static rf_status_t wait_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, int b, int *hold,
                             size_t *posted, MPI_Status *status, rf_err_t *err)
{
    recv_wait_t w = {x, cfg, &x->rreqs[b], {0}, hold, posted};
    double t0 = rf_time_now();
    rf_status_t st = rf_ctl_wait_fn(x->ctl, recv_wait_test, &w, cfg->deadline, x->wait_flags, err);
    x->stats.wire_s += rf_time_now() - t0;
    if (st == RF_ERR_TIMEOUT)
        rf_err_reset(err, st, "deadline expired");
    if (st == RF_OK)
        *status = w.status;
    return st;
}

/*
 * The receiver in any order (cfg->any_order; p2p): `buffers` receives posted from any source
 * and any tag on the transport's own communicator (it carries chunk messages only), completed
 * in posting order. MPI matches them in the order the messages arrive, so the receiver takes
 * whichever sender is ready, and keeps each sender's chunks in their seq order (MPI does not
 * let messages of one source and tag overtake each other). Every message names its sender
 * (status) and stage (tag): one this rank does not expect from that rank, or expects no more
 * of, is refused naming both ranks, before its header is read; its header is then checked
 * against that stage's next chunk.
 */
static rf_status_t mpi_recv_any(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                                void *ctx, rf_err_t *err)
{
    const rf_chunk_plan_t *plan = cfg->plan;
    const size_t n = plan->n_chunks;
    const int B = x->buffers;
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = RF_OK;
    size_t posted = 0, done = 0, ahead = 0;
    uint32_t seq = 0;
    int stage = -1, src = -1, first_src = -1;
    uint32_t *next = calloc((size_t)plan->n_stages + 1, sizeof(*next));
    if (next == NULL) {
        st = rf_err_set(&e, RF_ERR_NOMEM, "out of memory for %d stages", plan->n_stages);
        goto fail;
    }
    for (int s = 0; s < plan->n_stages; s++)
        next[s] = plan->stages[s].chunk_begin;

    int hold = -1;
    for (; posted < n && posted < (size_t)B; posted++)
        RF_CHECK_GOTO(post_recv(x, cfg, (int)(posted % B), posted, &e), st, fail);
    for (; done < n; done++) {
        const int b = (int)(done % B);
        stage = -1;
        src = -1;
        RF_CHECK_GOTO(post_held(x, cfg, &hold, b, true, &posted, &e), st, fail);
        rf_xfer_update_inflight(x, (int)(posted - done));
        MPI_Status status;
        RF_CHECK_GOTO(wait_recv(x, cfg, b, &hold, &posted, &status, &e), st, fail);
        RF_CHECK_GOTO(post_held(x, cfg, &hold, b, false, &posted, &e), st, fail);
        src = status.MPI_SOURCE;
        size_t got = 0;
        RF_CHECK_GOTO(rf_xfer_recv_counted(x, &status, src, &got, &e), st, fail);
        const int tag_stage = status.MPI_TAG & 0xfff;
        if (status.MPI_TAG != RF_XFER_TAG(cfg->update, tag_stage) ||
            tag_stage >= plan->n_stages || cfg->stage_senders[tag_stage] != src ||
            next[tag_stage] >= plan->stages[tag_stage].chunk_begin +
                                   plan->stages[tag_stage].chunk_count) {
            const char *why = status.MPI_TAG != RF_XFER_TAG(cfg->update, tag_stage)
                                  ? "of another update"
                              : tag_stage >= plan->n_stages ||
                                      cfg->stage_senders[tag_stage] != src
                                  ? "of a stage it does not send to this rank"
                                  : "after its stage's last expected chunk";
            st = rf_err_set(&e, RF_ERR_SEQUENCE,
                            "rank %d refuses a chunk message from rank %d (tag 0x%x, stage %d) "
                            "%s",
                            x->rank, src, (unsigned)status.MPI_TAG, tag_stage, why);
            goto fail;
        }
        stage = tag_stage;
        const rf_chunk_t *c = &plan->chunks[next[stage]];
        seq = c->seq;
        if (first_src < 0)
            first_src = src;
        ahead += (size_t)c->seq != done; /* taken out of the plan's sequence order */
        x->wait_flags = stream_spin(x); /* the senders stream: no sleeps between tests */
        RF_CHECK_GOTO(take_chunk(x, cfg, c, b, got, src, recv, ctx, &e), st, fail);
        next[stage]++;
        if (posted < n && x->pin_ax != NULL) {
            hold = b;
        } else if (posted < n) {
            RF_CHECK_GOTO(post_recv(x, cfg, b, posted, &e), st, fail);
            posted++;
        }
    }
    free(next);
    next = NULL;
    RF_CHECK_GOTO(rf_xfer_devck_flush(x, cfg, recv, ctx, &e), st, fail); /* the last chunk */
    /* which sender came first, and how many chunks left the plan's order: the receive order
     * is the senders' readiness, not the plan's (tests read this line) */
    RF_LOG(RF_LOG_INFO, "update %u: rank %d took %zu chunks in arrival order, %zu of them out "
           "of the plan's order; first from rank %d", cfg->update, x->rank, n, ahead, first_src);
    int extra = 0;
    st = rf_xfer_probe_extra(x, cfg, n, &extra, &e, err);
    if (extra)
        return st;
    if (st != RF_OK) {
        rf_err_set(err, st, "update %u: probing for extra chunks: %s", cfg->update, e.msg);
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    }
    return st;

fail:
    free(next);
    rf_xfer_cancel_posted(x);
    (void)rf_xfer_devck_failed(x, &seq, &stage, &src); /* its chunk: one behind the one taken */
    {
        char where[160];
        if (stage >= 0)
            snprintf(where, sizeof(where), "update %u: chunk seq %u (stage %d) from rank %d",
                     cfg->update, seq, stage, src);
        else if (src >= 0)
            snprintf(where, sizeof(where), "update %u: message from rank %d", cfg->update, src);
        else
            snprintf(where, sizeof(where), "update %u: receiving", cfg->update);
        rf_xfer_wrap(err, st, &e, where);
    }
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
}

static rf_status_t mpi_recv_seq(rf_xfer_t *x, const rf_xfer_config_t *cfg,
                                rf_xfer_recv_fn recv, void *ctx, rf_err_t *err)
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

    int hold = -1;
    for (; posted < n && posted < (size_t)B; posted++)
        RF_CHECK_GOTO(post_recv(x, cfg, (int)(posted % B), posted, &e), st, fail);
    for (; next < n; next++) {
        const rf_chunk_t *c = &plan->chunks[next];
        const int b = (int)(next % B);
        seq = c->seq;
        stage = c->stage;
        src = cfg->stage_senders[c->stage];
        RF_CHECK_GOTO(post_held(x, cfg, &hold, b, true, &posted, &e), st, fail);
        rf_xfer_update_inflight(x, (int)(posted - next));
        MPI_Status status;
        RF_CHECK_GOTO(wait_recv(x, cfg, b, &hold, &posted, &status, &e), st, fail);
        RF_CHECK_GOTO(post_held(x, cfg, &hold, b, false, &posted, &e), st, fail);
        size_t got = 0;
        RF_CHECK_GOTO(rf_xfer_recv_counted(x, &status, src, &got, &e), st, fail);
        x->wait_flags = stream_spin(x); /* the sender streams: no sleeps between tests */
        RF_CHECK_GOTO(take_chunk(x, cfg, c, b, got, src, recv, ctx, &e), st, fail);
        if (posted < n && x->pin_ax != NULL) {
            hold = b; /* re-posted by post_held, after its gate */
        } else if (posted < n) {
            RF_CHECK_GOTO(post_recv(x, cfg, b, posted, &e), st, fail);
            posted++;
        }
    }
    RF_CHECK_GOTO(rf_xfer_devck_flush(x, cfg, recv, ctx, &e), st, fail); /* the last chunk */
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
    (void)rf_xfer_devck_failed(x, &seq, &stage, &src); /* its chunk: one behind the one taken */
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

/* A receiver on device storage gets pinned receive buffers (rf_xfer_setup's contract). */
static rf_status_t mpi_setup(rf_xfer_t *x, const rf_xfer_setup_t *setup, rf_err_t *err)
{
    bool spin = setup->send_spin != 0;
    if (setup->send_spin < 0)
        RF_CHECK(rf_xfer_send_spin_default(x->nranks, &spin, err));
    x->send_spin = spin;
    if (x->send_spin) {
        /* the seal's workers: the spare cores beside the main and pack threads, or
         * REFIT_MPI_SEAL_THREADS (rf_env_check bounded it) */
        size_t n = (size_t)rf_env_spare_threads(x->nranks);
        RF_CHECK(rf_env_count("REFIT_MPI_SEAL_THREADS", "threads", n, &n, err));
        x->seal_threads = n > RF_POOL_MAX ? RF_POOL_MAX : (int)n;
        RF_LOG(RF_LOG_INFO,
               "rank %d: as a sender, spins while its chunks stream and packs and seals "
               "beside the wire where the pack allows it",
               x->rank);
    }
    /* a refit-sum64 seal from the pack's own payload sum (the streamed checkpoint's readers
     * sum what they read); 0: the seal reads the message, for A/B runs */
    bool fused = true;
    RF_CHECK(rf_xfer_seal_fused(&fused, err));
    x->seal_fused = fused;
    rf_accel_t *a = setup->accel;
    if (a == NULL || a->ops->mem_type != RF_MEM_CUDA || setup->pageable_recv)
        return RF_OK;
    RF_CHECK(rf_xfer_pin_setup(x, a, err));
    RF_LOG(RF_LOG_INFO, "rank %d: %d pinned receive buffers of %" PRIu64 " bytes (%s device %d)",
           x->rank, x->buffers, x->buf_bytes, a->ops->name, a->device);
    return RF_OK;
}

/* The first chunk's wait backs off into sleeps (the trainer may still be producing for
 * seconds); the later ones spin (RF_CTL_WAIT_SPIN, set by the loops). */
static rf_status_t mpi_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                            void *ctx, rf_err_t *err)
{
    x->wait_flags = 0;
    rf_xfer_devck_reset(x);
    rf_status_t st = cfg->any_order ? mpi_recv_any(x, cfg, recv, ctx, err)
                                    : mpi_recv_seq(x, cfg, recv, ctx, err);
    x->wait_flags = 0;
    return st;
}

static const rf_xfer_ops_t mpi_xfer_ops = {
    .name = "mpi",
    .caps = RF_XFER_CAP_ANY_ORDER,
    .wire = "mpi",
    .setup = mpi_setup,
    .send = mpi_send,
    .recv = mpi_recv,
    .send_p2p = mpi_send_p2p,
    .drain = rf_xfer_drain_messages,
};

const rf_xfer_ops_t *rf_xfer_mpi_ops(void)
{
    return &mpi_xfer_ops;
}
