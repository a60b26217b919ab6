/*
 * refit: the transfer engine's private state and the chunk transport table, shared by the
 * scheduler (transport/xfer.c), the helpers every chunk path uses (transport/xfer_common.c),
 * the registry (transport/transport_registry.c) and the transports (transport_ipc.c,
 * transport_nccl.c).
 *
 * How the scheduler reaches a transport: rf_xfer_create asks the registry for the name it was
 * given. A message transport ("mpi", rf_transport_ops_t) gets x->ops == NULL: the scheduler's
 * own send / receive / drain move each chunk as one message through x->tp. A chunk transport
 * ("ipc", "nccl") is an rf_xfer_ops_t: it carries the chunks its own way, its small messages
 * over the message transport it names (wire), and the scheduler calls it only through x->ops,
 * so xfer.c names no transport.
 */
#ifndef REFIT_XFER_INT_H
#define REFIT_XFER_INT_H

#include "refit/transport.h"

typedef struct rf_ipc_state rf_ipc_state_t;
typedef struct rf_nccl_state rf_nccl_state_t;

typedef struct rf_xfer_ops rf_xfer_ops_t;

struct rf_xfer {
    rf_ctl_t *ctl; /* borrowed */
    const rf_xfer_ops_t *ops; /* the chunk transport; NULL: chunks are messages of tp */
    rf_transport_t *tp;
    uint64_t chunk_bytes;
    uint64_t buf_bytes; /* bytes of each bufs[] entry: chunk_bytes (mpi), a message (ipc) */
    int buffers;
    int rank;
    int nranks;
    void **bufs;        /* [buffers] chunk (mpi) or message (ipc) buffers, owned */
    MPI_Request *sreqs; /* [buffers * 2 * nranks + 1] sends per slot (2: duplicate fault);
                           the last one: ipc READY */
    MPI_Request *rreqs; /* [buffers + 1] receives (ipc: the last one is READY) */
    int *slot_busy;     /* [buffers] sender: posted, completion not yet seen */
    rf_xfer_stats_t stats;
    rf_ipc_state_t *ipc; /* NULL on mpi */
    int on_nccl;         /* created with transport "nccl" (set by its table's open) */
    rf_nccl_state_t *nccl; /* set by rf_xfer_nccl_setup */
};

static inline int rf_xfer_sreq_count(const rf_xfer_t *x)
{
    return x->buffers * 2 * x->nranks + 1;
}

/*
 * A chunk transport. send and recv are required; every other entry may be NULL. Called by
 * transport/xfer.c only, on the calls named; x is set up as for the message path (ctl, tp on
 * `wire`, buffers of buf_bytes, requests) before open.
 */
struct rf_xfer_ops {
    const char *name; /* as rf_xfer_create takes it */
    const char *wire; /* the message transport under it (rf_transport_create) */
    /* Bytes of each x->bufs[] entry for chunks of chunk_bytes. NULL: chunk_bytes. */
    uint64_t (*buf_bytes)(uint64_t chunk_bytes);
    /* rf_xfer_create, last: the transport's state on x. Collective as rf_xfer_create; on an
     * error rf_xfer_create destroys x (close included) and returns the status. */
    rf_status_t (*open)(rf_xfer_t *x, rf_err_t *err);
    /* rf_xfer_destroy, after the message requests: releases the transport's state on x. */
    void (*close)(rf_xfer_t *x);
    /* rf_xfer_send / rf_xfer_recv after the config check, with their contract. */
    rf_status_t (*send)(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                        void *ctx, rf_err_t *err);
    rf_status_t (*recv)(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_unpack_fn unpack,
                        void *ctx, rf_err_t *err);
    /* rf_xfer_drain, after the posted chunk receives were cancelled. NULL: the message drain
     * (rf_xfer_drain_messages). */
    rf_status_t (*drain)(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                         rf_err_t *err);
};

/* ---- the registry (transport_registry.c) ---------------------------------------------- */

/* The chunk transport named `name` ("ipc", "nccl"); NULL for a message transport's name (or
 * NULL, or an unknown one: rf_transport_create decides). */
const rf_xfer_ops_t *rf_xfer_ops_lookup(const char *name);
/* ipc's table (transport_ipc.c). */
const rf_xfer_ops_t *rf_xfer_ipc_ops(void);

/* ---- shared by the chunk paths (xfer_common.c) ----------------------------------------- */

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
/* rf_xfer_drain's message part (its contract): receives the chunk messages still owed by
 * each source from x->tp, then completes this rank's outstanding sends. */
rf_status_t rf_xfer_drain_messages(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                                   rf_err_t *err);

/* nccl (transport_nccl.c, or the stub transport_nccl_none.c) */
void rf_nccl_state_destroy(rf_xfer_t *x);

#endif /* REFIT_XFER_INT_H */
