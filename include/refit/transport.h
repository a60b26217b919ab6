/*
 * refit: transports and the pipelined chunk transfer (DESIGN.md section 9).
 *
 * A transport moves chunk messages between world ranks; an implementation is a static const
 * rf_transport_ops_t chosen by name (rf_transport_create). Only "mpi" exists: host buffers,
 * tagged point-to-point on a duplicate of world (MPI_Isend / MPI_Irecv, tag =
 * ((update mod 8) << 12) | stage, never a collective). Completion is an MPI_Request so that
 * every wait goes through the control channel's wait loop (ABORT + deadline); a future nccl
 * or ipc transport will hand back requests of its own kind through the same table.
 *
 * The scheduler (rf_xfer_t) runs one update in broadcast mode: each stage has one sender (a
 * world rank) that sends every chunk of its stage to every receiver (root-to-each). Chunks go
 * in the plan's global stage-major sequence. Both sides use `buffers` slots (default 2): the
 * sender packs chunk k+1 while chunk k is on the wire (a slot is reused only when all of its
 * sends completed); the receiver keeps `buffers` receives posted ahead in the sequence and
 * unpacks in sequence order. Receive memory is buffers x chunk_bytes per rank in total.
 *
 * One update, driven by the caller:
 *   rf_ctl_begin; rf_ctl_agree (GO); rf_xfer_begin; rf_xfer_send (stage senders) and/or
 *   rf_xfer_recv (receivers); rf_gate_record_set_result + rf_xfer_stats -> rf_gate_run;
 *   on FAILED: rf_xfer_drain with the verdict's posted_from, on every rank.
 */
#ifndef REFIT_TRANSPORT_H
#define REFIT_TRANSPORT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Data tag of a chunk of `stage` in update `update` (stage < 4096). */
#define RF_XFER_TAG(update, stage) ((int)((((update) & 7u) << 12) | ((unsigned)(stage) & 0xfffu)))

typedef struct rf_transport rf_transport_t;

typedef struct rf_transport_ops {
    const char *name;
    /* Collective over world (borrowed). */
    rf_status_t (*create)(MPI_Comm world, rf_transport_t **t_p, rf_err_t *err);
    /* Collective. */
    void (*destroy)(rf_transport_t *t);
    /* Posts a send of buf[0..bytes) (borrowed until completion) to world rank dest. Local. */
    rf_status_t (*isend)(rf_transport_t *t, const void *buf, size_t bytes, int dest, int tag,
                         MPI_Request *req_p, rf_err_t *err);
    /* Posts a receive of at most bytes into buf (borrowed until completion). Local. */
    rf_status_t (*irecv)(rf_transport_t *t, void *buf, size_t bytes, int src, int tag,
                         MPI_Request *req_p, rf_err_t *err);
    /* Number of bytes a completed receive got. Local. */
    rf_status_t (*recv_bytes)(rf_transport_t *t, const MPI_Status *status, size_t *bytes_p,
                              rf_err_t *err);
    /* Checks once whether a message from src (any tag) is waiting: *found_p, *tag_p. Local. */
    rf_status_t (*probe)(rf_transport_t *t, int src, int *found_p, int *tag_p, rf_err_t *err);
    /* If a message from src (any tag) is waiting, receives it into scratch (at most bytes)
     * and sets *found_p = 1, else 0. Local, never blocks. */
    rf_status_t (*drain_one)(rf_transport_t *t, int src, void *scratch, size_t bytes,
                             int *found_p, rf_err_t *err);
} rf_transport_ops_t;

/* Every transport object starts with its ops table. */
struct rf_transport {
    const rf_transport_ops_t *ops;
};

/* The MPI transport's table. */
const rf_transport_ops_t *rf_transport_mpi_ops(void);

/*
 * Creates the transport named `name` ("mpi") on world (borrowed). Collective. Returns RF_OK
 * and *t_p (free with rf_transport_destroy), RF_ERR_UNSUPPORTED for an unknown name,
 * RF_ERR_MPI, RF_ERR_NOMEM.
 */
rf_status_t rf_transport_create(const char *name, MPI_Comm world, rf_transport_t **t_p,
                                rf_err_t *err);
/* Collective. NULL is fine. */
void rf_transport_destroy(rf_transport_t *t);

/* ---- the pipelined transfer ------------------------------------------------------------- */

/*
 * Fills payload (capacity plan chunk_bytes - 16, 256-aligned) with the chunk's pieces at their
 * offsets. chunk, pieces[0..chunk->piece_count) borrowed. Returns RF_OK or an error (err set).
 */
typedef rf_status_t (*rf_xfer_pack_fn)(void *ctx, const rf_chunk_t *chunk,
                                       const rf_chunk_piece_t *pieces, void *payload,
                                       rf_err_t *err);
/* Consumes a received, checked chunk; payload valid only during the call. */
typedef rf_status_t (*rf_xfer_unpack_fn)(void *ctx, const rf_chunk_t *chunk,
                                         const rf_chunk_piece_t *pieces, const void *payload,
                                         rf_err_t *err);

/* Fault hooks for tests (sender side). -1 disables. */
typedef struct rf_xfer_fault {
    int64_t drop_seq;    /* do not send the chunk with this seq */
    int64_t dup_seq;     /* send the chunk with this seq twice */
    int dest;            /* world rank the fault applies to, -1 for every receiver */
    int64_t corrupt_seq; /* flip one payload byte of this chunk after its checksum was
                            computed (every receiver's copy: one buffer feeds all sends) */
} rf_xfer_fault_t;

#define RF_XFER_FAULT_NONE                                                                     \
    ((rf_xfer_fault_t){.drop_seq = -1, .dup_seq = -1, .dest = -1, .corrupt_seq = -1})

/*
 * Integrity mode (DESIGN.md section 9, topology transfer.integrity or refit-run --integrity):
 * every chunk message carries an 8-byte trailer after its payload,
 *
 *     [16-byte header][payload, payload_bytes][u64 XXH3-64 of header + payload, little endian]
 *
 * so a message is 16 + payload_bytes + 8 bytes. The chunk plan must then be built for
 * chunk_bytes - RF_CHUNK_TRAILER_BYTES (rf_xfer_plan_bytes) so that the largest message still
 * fits the chunk_bytes buffers. The receiver recomputes the hash over the received header and
 * payload and compares it with the trailer BEFORE unpacking anything: a mismatch fails the
 * update with RF_ERR_INTEGRITY naming the chunk seq, its sender and the tensors it carries.
 */
#define RF_CHUNK_TRAILER_BYTES 8

/* chunk_bytes a chunk plan must use for buffers of chunk_bytes (integrity: room for the
 * trailer). Local. */
static inline uint64_t rf_xfer_plan_bytes(uint64_t chunk_bytes, int integrity)
{
    return integrity ? chunk_bytes - RF_CHUNK_TRAILER_BYTES : chunk_bytes;
}

/* One update's transfer, the same on every rank. All pointers borrowed for the call. */
typedef struct rf_xfer_config {
    uint32_t update;
    const rf_chunk_plan_t *plan;  /* chunk_bytes: rf_xfer_plan_bytes(xfer's, integrity) */
    const int *stage_senders;     /* [plan->n_stages] world rank sending each stage */
    const int *receivers;         /* [n_receivers] world ranks receiving every chunk */
    int n_receivers;
    double deadline;              /* absolute (rf_deadline_for_update) */
    rf_xfer_fault_t fault;        /* sender only; RF_XFER_FAULT_NONE normally */
    int integrity;                /* 1: checksum trailer per chunk (plan built with
                                     rf_xfer_plan_bytes); same on every rank */
    const rf_chunk_item_t *items; /* optional: the plan's items, to name tensors in errors */
} rf_xfer_config_t;

/* Counters of the current update (reset by rf_xfer_begin). */
typedef struct rf_xfer_stats {
    uint32_t update;
    int nranks;
    rf_peer_counts_t *peers; /* [nranks], owned by the xfer; ready for rf_gate_record_t */
    uint64_t chunks_sent;    /* chunk messages posted, all destinations */
    uint64_t chunks_received;/* chunks checked and unpacked */
    int max_inflight_chunks; /* most chunks posted and not yet known complete / unpacked */
    double pack_s;
    double wire_s;           /* time waiting on the wire (send slot reuse, receive arrival) */
    double unpack_s;
} rf_xfer_stats_t;

typedef struct rf_xfer rf_xfer_t;

/*
 * Creates a transfer engine on the control channel ctl (borrowed, must outlive it) with the
 * transport `transport` ("mpi") and `buffers` slots (0 = 2) of chunk_bytes each (allocated
 * here with rf_chunk_buffer_alloc, reused by every update). Collective. Returns RF_OK and
 * *x_p (free with rf_xfer_destroy); RF_ERR_INVALID, RF_ERR_NOMEM, RF_ERR_MPI,
 * RF_ERR_UNSUPPORTED.
 */
rf_status_t rf_xfer_create(rf_ctl_t *ctl, const char *transport, uint64_t chunk_bytes,
                           int buffers, rf_xfer_t **x_p, rf_err_t *err);
/* Collective. Sends still outstanding are waited for briefly, then released. */
void rf_xfer_destroy(rf_xfer_t *x);

/* Resets the counters for update `update`. Local. */
void rf_xfer_begin(rf_xfer_t *x, uint32_t update);
/* The counters (borrowed from x, valid until the next rf_xfer_begin / destroy). Local. */
const rf_xfer_stats_t *rf_xfer_stats(const rf_xfer_t *x);

/*
 * Sender side: sends every chunk of every stage whose sender is this rank to every receiver,
 * in sequence order, calling pack(ctx, ...) to fill each payload. Local (pairs with the
 * receivers' rf_xfer_recv). Waits through the control channel (ABORT + cfg->deadline).
 * Returns RF_OK when every send completed; on error posts ABORT (unless the error is an ABORT
 * received: RF_ERR_PEER) and returns the status: RF_ERR_TIMEOUT / RF_ERR_PEER / RF_ERR_MPI /
 * the pack's error, err naming the chunk seq, stage and rank. Sends still outstanding after
 * an error are completed by rf_xfer_drain.
 */
rf_status_t rf_xfer_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                         void *ctx, rf_err_t *err);

/*
 * Receiver side: receives every chunk of the plan, in sequence order, from its stage's
 * sender, checks header update / seq (RF_ERR_SEQUENCE on a repeat or gap, naming the chunk)
 * and payload size (RF_ERR_MISMATCH), in integrity mode the checksum trailer
 * (RF_ERR_INTEGRITY naming the chunk and its tensors, before unpacking), and calls
 * unpack(ctx, ...). After the last chunk probes
 * each source once and fails on an extra message (RF_ERR_SEQUENCE). Local. Errors as for
 * rf_xfer_send (ABORT posted unless RF_ERR_PEER); posted receives are cancelled on error.
 */
rf_status_t rf_xfer_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_unpack_fn unpack,
                         void *ctx, rf_err_t *err);

/*
 * After a FAILED verdict, on every rank: completes this rank's outstanding sends and receives
 * (into scratch) posted_from[s] - received[s] chunk messages from each source s
 * (posted_from: the verdict's, borrowed; RF_GATE_UNKNOWN sources are skipped), under
 * deadline (absolute; does not poll ABORT). Local, but pairs with the peers' drains. Returns
 * RF_OK when this rank is clean for the next update, RF_ERR_TIMEOUT naming the source and
 * how many messages were still missing, RF_ERR_MPI.
 */
rf_status_t rf_xfer_drain(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                          rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_TRANSPORT_H */
