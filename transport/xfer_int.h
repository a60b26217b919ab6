/*
 * refit: the transfer engine's private state, shared by the mpi scheduler (transport/xfer.c),
 * the helpers every chunk path uses (transport/xfer_common.c) and the ipc and nccl transports.
 */
#ifndef REFIT_XFER_INT_H
#define REFIT_XFER_INT_H

#include "refit/transport.h"

typedef struct rf_ipc_state rf_ipc_state_t;
typedef struct rf_nccl_state rf_nccl_state_t;

struct rf_xfer {
    rf_ctl_t *ctl; /* borrowed */
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
    int on_nccl;         /* created with transport "nccl" (transport_nccl.c) */
    rf_nccl_state_t *nccl; /* set by rf_xfer_nccl_setup */
};

static inline int rf_xfer_sreq_count(const rf_xfer_t *x)
{
    return x->buffers * 2 * x->nranks + 1;
}

/* ---- shared by the chunk paths (xfer_common.c) ----------------------------------------- */

/* err = "<where>: <inner message>". */
rf_status_t rf_xfer_wrap(rf_err_t *err, rf_status_t st, const rf_err_t *inner, const char *where);
/* "a rows 0-63, ..." : the tensors chunk c carries (for error messages). */
void rf_xfer_chunk_tensors(const rf_xfer_config_t *cfg, const rf_chunk_t *c, char *out, size_t cap);
void rf_xfer_update_inflight(rf_xfer_t *x, int inflight);
/* Cancels this rank's posted receives (rreqs); a matched one counts as received. */
void rf_xfer_cancel_posted(rf_xfer_t *x);
/* After a receiver's last expected chunk: probes each distinct stage sender once; a message
 * still there is an extra chunk: sets err, posts ABORT, sets *extra_p and returns
 * RF_ERR_SEQUENCE. A failing probe returns its status with probe_err filled. */
rf_status_t rf_xfer_probe_extra(rf_xfer_t *x, const rf_xfer_config_t *cfg, size_t n, int *extra_p,
                                rf_err_t *probe_err, rf_err_t *err);
void rf_xfer_write_u64le(unsigned char *p, uint64_t v);
uint64_t rf_xfer_read_u64le(const unsigned char *p);
/* rf_xfer_drain's message part (its contract): receives the chunk messages still owed by
 * each source from x->tp, then completes this rank's outstanding sends. */
rf_status_t rf_xfer_drain_messages(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                                   rf_err_t *err);

/* ipc (transport_ipc.c) */
rf_status_t rf_ipc_state_create(rf_xfer_t *x, rf_err_t *err);
void rf_ipc_state_destroy(rf_xfer_t *x);
/* Sender: cancels ACK receives still posted (a matched one counts as received). */
void rf_ipc_cancel_acks(rf_xfer_t *x);
rf_status_t rf_ipc_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack, void *ctx,
                        rf_err_t *err);
rf_status_t rf_ipc_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_err_t *err);

/* nccl (transport_nccl.c, or the stub transport_nccl_none.c) */
void rf_nccl_state_destroy(rf_xfer_t *x);

#endif /* REFIT_XFER_INT_H */
