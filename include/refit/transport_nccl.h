/*
 * refit: the nccl transport (DESIGN.md section 9, "nccl"; sections 10 for abort and re-init).
 *
 * Device buffers; the chunk plan, its global stage-major sequence, the in-band 16-byte header
 * (update, seq, payload bytes), the integrity trailer and the gate's per-peer counts are the
 * mpi transport's. An xfer created with transport "nccl" (rf_xfer_create) gets its
 * communicators from rf_xfer_setup (rf_xfer_nccl_setup: the layout of rf_nccl_layout_build);
 * rf_xfer_begin / rf_xfer_fail are rf_xfer_nccl_begin / rf_xfer_nccl_fail, and rf_xfer_send /
 * rf_xfer_recv run over NCCL (the transport's table in transport/transport_nccl.c; the
 * functions below are its entries, public for the tests and bench/nccl-bw.c):
 *
 *   broadcast: per chunk one ncclBroadcast on the stage's communicator, root = the stage
 *              sender (communicator rank 0), count = header + payload (+ trailer) bytes;
 *   p2p:       per chunk of a (sender, receiver) pair one ncclSend / ncclRecv inside
 *              ncclGroupStart / ncclGroupEnd on the stage's communicator (a rank that is both,
 *              as in the one-rank tests, posts both in one group).
 *
 * Pipelining over `buffers` slots B (rf_xfer_create): a sender packs chunk k+1 into pinned host
 * slot k+1 mod B and copies it h2d into the device chunk buffer on a copy stream while chunk k
 * is on the wire on the communication stream (an event orders the copy before the NCCL call);
 * a receiver keeps B NCCL receives posted ahead; the header (the whole message in integrity
 * mode) comes back d2h on the communication stream; the unpack callback gets the DEVICE
 * payload pointer (rollout: rf_plan_apply, RF_PIECE_DEVICE, enqueued on the accelerator's default
 * stream) and an event recorded there after it guards the slot's next receive. So chunk k+1
 * is packed while k is in flight and k-1 is unpacked.
 *
 * Every wait (communicator init, ncclGroupEnd completion, event completion) is polled through
 * rf_ctl_wait_fn: ncclCommGetAsyncError / cudaEventQuery, the control channel's ABORT and the
 * update deadline. On an error, an ABORT or the deadline the rank calls ncclCommAbort on every
 * communicator it is in at once and posts ABORT (unless it is reacting to one); after a FAILED
 * verdict every rank calls rf_xfer_nccl_fail (ncclCommAbort where not done yet) and the next
 * update's rf_xfer_nccl_begin re-creates the communicators (ncclGetUniqueId on communicator
 * rank 0, MPI_Bcast over the members' MPI communicator, ncclCommInitRankConfig with
 * blocking = 0, polled). APIs: NCCL 2.28.3 or older only.
 */
#ifndef REFIT_TRANSPORT_NCCL_H
#define REFIT_TRANSPORT_NCCL_H

#include <stdbool.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/topology.h"
#include "refit/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when refit was built with CUDA and NCCL (transport/transport_nccl.c, else the stub in
 * transport/transport_nccl_none.c). */
bool rf_xfer_nccl_built(void);

/*
 * Gives x (created with transport "nccl") its communicators: layout (borrowed, copied) as from
 * rf_nccl_layout_build; device: this rank's CUDA device (cudaSetDevice), -1 for a rank in no
 * communicator; accel (borrowed, may be NULL): the accelerator whose default stream the unpack
 * callback enqueues on (rollout ranks), so its slot is reused only after those copies ran.
 * Splits one MPI communicator per NCCL communicator off world and creates the streams and
 * events; the communicators themselves are created by the first rf_xfer_nccl_begin.
 * Collective over x's world. RF_ERR_UNSUPPORTED without NCCL, RF_ERR_CUDA, RF_ERR_MPI,
 * RF_ERR_NOMEM, RF_ERR_STATE when x is not on nccl.
 */
rf_status_t rf_xfer_nccl_setup(rf_xfer_t *x, const rf_nccl_layout_t *layout, int device,
                               rf_accel_t *accel, rf_err_t *err);

/*
 * Start of an update (after rf_ctl_begin): when the communicators are missing (first update,
 * or after rf_xfer_nccl_fail / a failed init), aborts what is left and creates every
 * communicator this rank is in: unique id from communicator rank 0 over MPI_Bcast on the
 * members, ncclCommInitRankConfig (blocking = 0) for all of them, then one polled wait for all
 * (ncclCommGetAsyncError, ABORT, deadline). Otherwise checks ncclCommGetAsyncError once.
 * Collective over every communicator's members (every rank of x's world calls it). On failure
 * the communicators are aborted, ABORT is posted (unless RF_ERR_PEER), and the next call tries
 * again. RF_OK, RF_ERR_TIMEOUT, RF_ERR_PEER, RF_ERR_NCCL, RF_ERR_MPI.
 */
rf_status_t rf_xfer_nccl_begin(rf_xfer_t *x, double deadline, rf_err_t *err);

/*
 * After a FAILED verdict, on every rank: ncclCommAbort on every communicator not aborted yet,
 * waits (bounded) until the streams drained, and marks the communicators for re-creation by
 * the next rf_xfer_nccl_begin. Local. Never fails (problems are logged).
 */
void rf_xfer_nccl_fail(rf_xfer_t *x);

/*
 * One rank's part of an update over NCCL: the chunks of cfg->plan whose stage sender is this
 * rank (when pack != NULL) are packed and sent, the chunks this rank receives (it is in
 * cfg->receivers, recv != NULL) are received, checked (header, size, integrity trailer) and
 * handed to recv as device segments of the chunk buffer, all in one pipeline in plan order.
 * rf_xfer_send / rf_xfer_recv call it with one of the two callbacks; the one-rank tests pass
 * both (send and receive to self). Errors as for rf_xfer_send / rf_xfer_recv (RF_ERR_NCCL /
 * RF_ERR_CUDA for the libraries' errors, with their error strings); the communicators are
 * aborted before it returns an error.
 */
rf_status_t rf_xfer_nccl_run(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                             void *pack_ctx, rf_xfer_recv_fn recv, void *recv_ctx,
                             rf_err_t *err);

/*
 * The stage gather (DESIGN.md section 9: "trainer-only ... communicators for gathers") on the
 * stage's trainer-only gather communicator (rf_nccl_layout_t entries with gather = 1; broadcast
 * mode, stages with more than one trainer rank). Trainers produce on the host, so host bytes
 * are staged through one device buffer of chunk_bytes on the copy stream:
 *   rf_xfer_nccl_gather_recv (the stage sender, from its pack callback): receives n messages,
 *     bytes[q] from world rank peers[q] (grouped ncclRecv), back to back into host dst;
 *   rf_xfer_nccl_gather_send (a contributor): one message of `bytes` from host src to the stage
 *     sender (ncclSend).
 * Both return when the bytes are in place (dst written / src reusable); each side posts its
 * messages in chunk order, so NCCL matches them pairwise in order. Every wait polls ABORT and
 * the deadline. Errors: RF_ERR_STATE (no ready gather communicator of that stage on this rank),
 * RF_ERR_TOPOLOGY (a peer outside it), RF_ERR_INVALID (more than chunk_bytes), RF_ERR_NCCL,
 * RF_ERR_CUDA, RF_ERR_TIMEOUT, RF_ERR_PEER; the communicators are left for the caller's failure
 * path (rf_xfer_nccl_run's abort, or rf_xfer_nccl_fail after the verdict). Not collective
 * beyond the matched pairs. rf_xfer_nccl_has_gather: whether this rank is in `stage`'s gather
 * communicator.
 */
bool rf_xfer_nccl_has_gather(const rf_xfer_t *x, int stage);
rf_status_t rf_xfer_nccl_gather_recv(rf_xfer_t *x, int stage, const int *peers,
                                     const uint64_t *bytes, int n, void *dst, double deadline,
                                     rf_err_t *err);
rf_status_t rf_xfer_nccl_gather_send(rf_xfer_t *x, int stage, int sender, const void *src,
                                     uint64_t bytes, double deadline, rf_err_t *err);

/* Counters of the communicators' lives (since setup). */
typedef struct rf_xfer_nccl_counters {
    uint64_t inits;    /* successful creations of this rank's communicator set */
    uint64_t aborts;   /* ncclCommAbort calls (per communicator) */
    double init_s;     /* seconds of the last successful creation */
    int ready;         /* 1: communicators initialized and not aborted */
    int comms;         /* communicators this rank is in */
} rf_xfer_nccl_counters_t;
void rf_xfer_nccl_counters(const rf_xfer_t *x, rf_xfer_nccl_counters_t *c);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_TRANSPORT_NCCL_H */
