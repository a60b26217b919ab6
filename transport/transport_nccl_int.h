/*
 * refit: the nccl transport's private header (transport/transport_nccl*.c only; compiled only
 * with CUDA and NCCL): the per-xfer state both files share.
 *
 *   transport_nccl.c         the communicators: setup, creation at begin, abort, fail,
 *                            teardown, the counters, the transport table
 *   transport_nccl_chunks.c  one update's chunk pipeline (rf_xfer_nccl_run) and the stage
 *                            gather over the trainer-only communicator
 */
#ifndef REFIT_TRANSPORT_NCCL_INT_H
#define REFIT_TRANSPORT_NCCL_INT_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "refit/transport_nccl.h"
#include "xfer_int.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "refit's nccl transport needs NCCL 2.14 or newer (non-blocking communicators)"
#endif

typedef struct nccl_comm {
    MPI_Comm mpi;    /* the members, MPI rank == communicator rank; MPI_COMM_NULL elsewhere */
    ncclComm_t comm; /* NULL: not created, or aborted */
    int rank;        /* this rank's communicator rank, -1 when not a member */
    int size;
    int stage;
    int gather;      /* the stage's trainer-only gather communicator */
    int *ranks;      /* [size] world ranks, owned */
} nccl_comm_t;

typedef struct rf_nccl_state rf_nccl_state_t;

struct rf_nccl_state {
    int p2p;
    int ncomms;
    nccl_comm_t *comms; /* [ncomms] every layout entry (members or not), owned */
    int nmine;          /* entries this rank is a member of */
    int device;
    rf_accel_t *accel;  /* borrowed; NULL: unpacks complete when the callback returns */
    int B;
    size_t slot_bytes;
    cudaStream_t comm_stream, copy_stream;
    void **dsend, **drecv; /* [B] device chunk buffers (allocated on first use) */
    void **hsend, **hrecv; /* [B] pinned host slots */
    cudaEvent_t *h2d_ev, *comm_ev;   /* [B] */
    rf_accel_event_t **unpack_ev;    /* [B] on accel's default stream */
    int *unpack_busy;                /* [B] an unpack event is recorded and not yet seen done */
    void *dgather;                   /* stage gather: device staging (slot_bytes, on first use) */
    cudaEvent_t gather_ev;           /* stage gather: its last d2h / send completed */
    int ready;                       /* communicators initialized and not aborted */
    int wedged;                      /* the streams did not drain after an abort */
    char why[RF_ERR_MSG_MAX];        /* why the communicators are not ready */
    rf_xfer_nccl_counters_t counters;
};

/* x's nccl state (rf_xfer_nccl_setup); NULL when x is not on nccl or not set up. */
static inline rf_nccl_state_t *nccl_of(const rf_xfer_t *x)
{
    return x != NULL && x->ops == rf_xfer_nccl_ops() ? x->priv : NULL;
}

/* ncclCommAbort on every communicator of this rank still alive, then a bounded wait until
 * the streams drained (an aborted kernel returns). Marks the set for re-creation
 * (transport_nccl.c). */
void nccl_abort_all(rf_xfer_t *x, const char *why);

#endif
