/*
 * refit: the transfer engine's private state and the ONE chunk transport interface
 * (rf_xfer_ops_t), shared by the core (transport/xfer.c), the helpers every chunk path uses
 * (transport/xfer_common.c), the registry (transport/transport_registry.c) and the
 * transports: mpi (transport_mpi_chunks.c), ipc (transport_ipc.c), nccl (transport_nccl.c, or
 * the stub transport_nccl_none.c).
 *
 * As NCCL's ncclTransport and UCX's uct_iface_ops: every transport fills one static const
 * table; rf_xfer_create asks the registry for the table of the name it was given and the core
 * calls it only through x->ops, so xfer.c names no transport. A transport keeps its state in
 * x->priv (its own struct, which only its file knows) and runs its small messages, if any, over
 * the message transport x->tp it named as `wire`.
 */
#ifndef REFIT_XFER_INT_H
#define REFIT_XFER_INT_H

#include <stdbool.h>

#include "refit/transport.h"

typedef struct rf_xfer_ops rf_xfer_ops_t;

struct rf_xfer {
    rf_ctl_t *ctl; /* borrowed */
    const rf_xfer_ops_t *ops; /* the chunk transport */
    void *priv;         /* the transport's state (open / setup), owned by it; NULL: none */
    unsigned caps;      /* RF_XFER_CAP_*: ops->caps, plus what setup added */
    rf_transport_t *tp; /* the message transport ops->wire */
    uint64_t chunk_bytes;
    uint64_t buf_bytes; /* bytes of each bufs[] entry (ops->buf_bytes; chunk_bytes) */
    int buffers;
    int slots;          /* sender slots: bufs, slot_busy, sreqs' groups (>= buffers; a p2p
                           sender grows them for its window, rf_xfer_grow_slots) */
    int rank;
    int nranks;
    void **bufs;        /* [slots] chunk (mpi) or message (ipc, nccl) buffers, owned; the
                           receivers use the first `buffers` */
    MPI_Request *sreqs; /* [slots * 2 * nranks + 1] sends per slot (2: duplicate fault);
                           the last one: a transport's own (ipc READY) */
    MPI_Request *rreqs; /* [buffers + 1] receives (the last one: a transport's own, ipc READY) */
    int *slot_busy;     /* [slots] sender: posted, completion not yet seen */
    rf_xfer_segment_t *segs; /* receiver: one chunk's segments (rf_xfer_segments), owned */
    size_t segcap;
    rf_xfer_stats_t stats;
    /* mpi receiver on device storage (rf_xfer_pin_setup): bufs[0, buffers) are pin_ax's
     * alloc_host memory (pinned on cuda), so the receive callback's h2d copies from them run
     * asynchronously; pin_ev[b], recorded on pin_ax's default stream after the callback that
     * read buffer b, gates b's next use (a receive posted into it, the drain, the free).
     * pin_ax NULL: pageable rf_chunk_buffer_alloc buffers, copied synchronously. */
    struct rf_accel *pin_ax;    /* borrowed: must outlive x */
    void **pin_base;            /* [buffers] what alloc_host returned for bufs[b] */
    struct rf_accel_event **pin_ev; /* [buffers] */
    unsigned char *pin_pending; /* [buffers] pin_ev[b] recorded and not yet waited for */
    bool send_spin;      /* mpi sender: spin while chunks stream, pack_thread packs on a
                            helper thread (rf_xfer_setup_t.send_spin, resolved) */
    int seal_threads;          /* spinning mpi sender: the workers of its refit-sum64 seal
                                  (rf_env_spare_threads or REFIT_MPI_SEAL_THREADS; 1: the
                                  calling thread alone) */
    struct rf_pool *seal_pool; /* ... started at its first refit-sum64 send (NULL: one) */
    bool seal_fused;           /* mpi sender: asks the pack for its payload's refit-sum64 word
                                  sum (rf_xfer_pack_fn's sum; REFIT_MPI_SEAL_FUSED, default 1) */
    unsigned wait_flags; /* rf_ctl_wait_fn flags of rf_xfer_wait_one (mpi: RF_CTL_WAIT_SPIN once
                            an update's first chunk arrived; 0 otherwise) */
    struct rf_xfer_devck *dck; /* mpi receiver checking on the device (xfer_devck.c); NULL */
};

static inline int rf_xfer_sreq_count(const rf_xfer_t *x)
{
    return x->slots * 2 * x->nranks + 1;
}

/*
 * A chunk transport. Called by transport/xfer.c only, from the public call named with each
 * entry (include/refit/transport.h has the caller's contract); x is set up (ctl, tp on `wire`,
 * buffers of buf_bytes, requests, counters) before open. send and recv are required; every
 * other entry may be NULL where the transport has nothing to do. Collectiveness is the public
 * call's: open, setup, begin, close are collective over x's world (every rank calls them in
 * the same order); sources, send, recv, drain, fail are local (send and recv pair with the
 * peers', drain with the peers' drains).
 */
struct rf_xfer_ops {
    const char *name; /* as rf_xfer_create takes it */
    unsigned caps;    /* RF_XFER_CAP_* always true of it; setup may add to x->caps */
    const char *wire; /* the message transport under it (rf_transport_create) */
    /* Bytes of each x->bufs[] entry for chunks of chunk_bytes. NULL: chunk_bytes. */
    uint64_t (*buf_bytes)(uint64_t chunk_bytes);
    /* rf_xfer_create, last: the transport's state on x (x->priv). On an error rf_xfer_create
     * destroys x (close included) and returns the status. */
    rf_status_t (*open)(rf_xfer_t *x, rf_err_t *err);
    /* rf_xfer_setup: once, before the first update; reads its part of *setup. */
    rf_status_t (*setup)(rf_xfer_t *x, const rf_xfer_setup_t *setup, rf_err_t *err);
    /* rf_xfer_begin, after the counters were reset: ready for `update` by deadline (nccl:
     * communicators). Posts ABORT on failure (unless RF_ERR_PEER). */
    rf_status_t (*begin)(rf_xfer_t *x, uint32_t update, double deadline, rf_err_t *err);
    /* rf_xfer_sources: the sender's sources changed state (ipc: protect, READY). */
    rf_status_t (*sources)(rf_xfer_t *x, uint32_t update, rf_xfer_sources_t state,
                           rf_err_t *err);
    /* rf_xfer_send / rf_xfer_recv after the config check, with their contract. */
    rf_status_t (*send)(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                        void *ctx, rf_err_t *err);
    rf_status_t (*recv)(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                        void *ctx, rf_err_t *err);
    /* rf_xfer_send_p2p after the configs' check, with its contract (inflight >= 1). NULL:
     * the core sends the pairs one after another through send. */
    rf_status_t (*send_p2p)(rf_xfer_t *x, const rf_xfer_pair_t *pairs, size_t n, int inflight,
                            rf_xfer_pack_fn pack, rf_err_t *err);
    /* rf_xfer_drain, after the posted receives were cancelled: what the peers still owe this
     * rank, then this rank's outstanding sends. NULL: nothing travels that could be owed. */
    rf_status_t (*drain)(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                         rf_err_t *err);
    /* rf_xfer_fail, after the drain of a FAILED update (nccl: ncclCommAbort). */
    void (*fail)(rf_xfer_t *x);
    /* rf_xfer_destroy, after the message requests: releases x->priv. */
    void (*close)(rf_xfer_t *x);
    /* ---- the stage gather (optional) ---- */
    /* A transport's own stage gather (include/refit/transport.h, "the stage gather"). Set
     * gather_recv and gather_send both, or neither: NULL is the MPI gather on the trainer-only
     * communicator (gather_mpi.c). Called by gather_mpi.c only.
     *   gather_has: whether this rank takes part in `stage`'s own gather (NULL: always); when
     *     not, its gather is the MPI one.
     *   gather_recv (stage sender): n messages of one chunk, bytes[q] from world rank
     *     peers[q], back to back into host dst; returns once they are in place.
     *   gather_send (contributor): one message from host src to world rank `sender`; returns
     *     once src is reusable.
     * Every wait polls ABORT and the deadline. What the drain after a FAILED update needs of
     * them: nothing. Their messages are not counted, and the transport's own failure path
     * resets what is left in flight (nccl: rf_xfer_nccl_fail aborts the communicators, the
     * next begin re-creates them); the MPI count exchange of rf_xfer_gather_drain runs all
     * the same, with zero counts. */
    int (*gather_has)(const rf_xfer_t *x, int stage);
    rf_status_t (*gather_recv)(rf_xfer_t *x, int stage, const int *peers, const uint64_t *bytes,
                               int n, void *dst, double deadline, rf_err_t *err);
    rf_status_t (*gather_send)(rf_xfer_t *x, int stage, int sender, const void *src,
                               uint64_t bytes, double deadline, rf_err_t *err);
};

/* ---- the registry (transport_registry.c) ---------------------------------------------- */

/* The chunk transport named `name` ("mpi", NULL = "mpi", "ipc", "nccl"); NULL when unknown. */
const rf_xfer_ops_t *rf_xfer_ops_lookup(const char *name);
/* The tables, each in its transport's file. */
const rf_xfer_ops_t *rf_xfer_mpi_ops(void);  /* transport_mpi_chunks.c */
const rf_xfer_ops_t *rf_xfer_ipc_ops(void);  /* transport_ipc.c */
const rf_xfer_ops_t *rf_xfer_nccl_ops(void); /* transport_nccl.c / transport_nccl_none.c */

/* ---- shared by the chunk paths (xfer_common.c) ----------------------------------------- */

/* Pinned receive buffers (the fields above): replaces bufs[0, buffers) with accel's alloc_host
 * memory and creates their events. Between updates only. RF_ERR_NOMEM / the accelerator's
 * status naming the bytes. */
rf_status_t rf_xfer_pin_setup(rf_xfer_t *x, struct rf_accel *accel, rf_err_t *err);
/* After the receive callback consumed buffer b (whatever it returned): an event on pin_ax's
 * default stream behind the copies it enqueued. No-op without pinned buffers. */
rf_status_t rf_xfer_pin_after(rf_xfer_t *x, int b, rf_err_t *err);
/* Before buffer b takes another message: waits for its event (b < 0: every buffer's). No-op
 * without pinned buffers or with nothing recorded. */
rf_status_t rf_xfer_pin_gate(rf_xfer_t *x, int b, rf_err_t *err);
/* Whether buffer b's event has completed (a gate would not wait); true without one. */
bool rf_xfer_pin_ready(rf_xfer_t *x, int b);
/* rf_xfer_destroy: the gate on every buffer, then the pinned buffers and events freed. */
void rf_xfer_pin_release(rf_xfer_t *x);

/*
 * The mpi receiver's integrity check on the device (issue #18 item 1; transport/xfer_devck.c).
 * On with pinned buffers (x->pin_ax, device storage) and refit-sum64 trailers
 * (cfg->integrity == RF_CHUNK_TRAILER_SUM64): a chunk whose header and size checked is not
 * hashed on the host; its payload is copied h2d into one of two device chunk buffers and its
 * word sum enqueued behind the copy (rf_accel_ops_t.checksum_async), both on pin_ax's default
 * stream, and the receive buffer is released to the next message after them. The chunk is
 * checked (rf_chunk_check_sum) and handed to the receive callback as device segments only when
 * the next chunk has arrived (or at the end of the update, rf_xfer_devck_flush), so the copy
 * and the sum run while the next message is on the wire, and nothing of a chunk is unpacked
 * before its check. The callback's copies are enqueued on the same stream, so a device buffer's
 * next copy in follows its readers.
 */
bool rf_xfer_devck_on(const rf_xfer_t *x, const rf_xfer_config_t *cfg);
/* The start of a receive: forgets a chunk left pending by a failed update. */
void rf_xfer_devck_reset(rf_xfer_t *x);
/* Chunk c (its header and size checked) in receive buffer b, from rank src: the h2d copy and
 * the sum enqueued, b's gate recorded (rf_xfer_pin_after); then the chunk before it, if one is
 * pending, checked and handed on (rf_xfer_devck_flush). */
rf_status_t rf_xfer_devck_take(rf_xfer_t *x, const rf_xfer_config_t *cfg, const rf_chunk_t *c,
                               int b, int src, rf_xfer_recv_fn recv, void *ctx, rf_err_t *err);
/* The pending chunk, if any, checked (waiting for its sum) and handed to recv as device
 * segments; RF_ERR_INTEGRITY naming it on a mismatch (nothing of it unpacked). */
rf_status_t rf_xfer_devck_flush(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                                void *ctx, rf_err_t *err);
/* After a failure: the chunk the device check failed on (its seq, stage, sender), for the
 * receive loop's message; false when the failure was not the device check's. */
bool rf_xfer_devck_failed(const rf_xfer_t *x, uint32_t *seq, int *stage, int *src);
/* rf_xfer_destroy, before rf_xfer_pin_release: waits for the device work, frees it. */
void rf_xfer_devck_release(rf_xfer_t *x);

/* err = "<where>: <inner message>". */
rf_status_t rf_xfer_wrap(rf_err_t *err, rf_status_t st, const rf_err_t *inner, const char *where);
void rf_xfer_update_inflight(rf_xfer_t *x, int inflight);
/* Cancels this rank's posted receives (rreqs); a matched one counts as received. */
void rf_xfer_cancel_posted(rf_xfer_t *x);
/* After a receiver's last expected chunk: probes each distinct stage sender once; a message
 * still there is an extra chunk: sets err, posts ABORT, sets *extra_p and returns
 * RF_ERR_SEQUENCE. A failing probe returns its status with probe_err filled. */
rf_status_t rf_xfer_probe_extra(rf_xfer_t *x, const rf_xfer_config_t *cfg, size_t n, int *extra_p,
                                rf_err_t *probe_err, rf_err_t *err);
/* The receiver's segment array for n segments (x->segs, grown as needed). RF_ERR_NOMEM. */
rf_status_t rf_xfer_segments(rf_xfer_t *x, size_t n, rf_err_t *err);
/* Chunk c's pieces as whole segments of one contiguous payload (mpi: host, nccl: device):
 * x->segs[0..c->piece_count). */
rf_status_t rf_xfer_piece_segments(rf_xfer_t *x, const rf_chunk_plan_t *plan, const rf_chunk_t *c,
                                   const void *payload, rf_xfer_mem_t mem, rf_err_t *err);
/* rf_xfer_drain's message part (its contract): receives the chunk messages still owed by
 * each source from x->tp, then completes this rank's outstanding sends. */
rf_status_t rf_xfer_drain_messages(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                                   rf_err_t *err);
/* The sender's chunk message buf[0, bytes) to receiver peer: none under a drop fault, two
 * under a dup fault (f; seq is the chunk's), else one isend on reqs[*nreq] (*nreq counts them),
 * each counted in x->stats. */
rf_status_t rf_xfer_send_copies(rf_xfer_t *x, const rf_xfer_fault_t *f, uint32_t seq,
                                const void *buf, size_t bytes, int peer, int tag,
                                MPI_Request *reqs, int *nreq, rf_err_t *err);
/* Sender: at least n slots (buffers, busy flags, send requests), the new ones idle; a
 * transport calls it between updates' sends, never with sends of the old arrays' slots
 * pending on another thread (there is none). RF_ERR_NOMEM naming the bytes. */
rf_status_t rf_xfer_grow_slots(rf_xfer_t *x, int n, rf_err_t *err);
/* Sender: slot b's sends are posted; marks it busy and updates the in-flight maximum. */
void rf_xfer_slot_sent(rf_xfer_t *x, int b);
/* Receiver: waits (ABORT + deadline, counted as wire time) for the one request *req; its status
 * in *status. RF_ERR_TIMEOUT with "deadline expired". */
rf_status_t rf_xfer_wait_one(rf_xfer_t *x, MPI_Request *req, double deadline, MPI_Status *status,
                             rf_err_t *err);
/* Receiver: the received message's size in *got, counted for stage sender src. */
rf_status_t rf_xfer_recv_counted(rf_xfer_t *x, const MPI_Status *status, int src, size_t *got,
                                 rf_err_t *err);
/* Receiver: reads msg's chunk header into *h and checks it carries cfg's update and c's seq
 * (RF_ERR_SEQUENCE: a repeated chunk or a gap). */
rf_status_t rf_xfer_header_check(const unsigned char *msg, const rf_xfer_config_t *cfg,
                                 const rf_chunk_t *c, rf_chunk_header_t *h, rf_err_t *err);

#endif /* REFIT_XFER_INT_H */
