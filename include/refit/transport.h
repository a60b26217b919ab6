/*
 * refit: transports and the pipelined chunk transfer (DESIGN.md section 9).
 *
 * A transport moves chunk messages between world ranks; an implementation is a static const
 * rf_transport_ops_t chosen by name (rf_transport_create). "mpi": host buffers, tagged
 * point-to-point on a duplicate of world (MPI_Isend / MPI_Irecv, tag =
 * ((update mod 8) << 12) | stage, never a collective). Completion is an MPI_Request so that
 * every wait goes through the control channel's wait loop (ABORT + deadline). "ipc"
 * (colocated topologies, see "the ipc transport" below) moves no payload over MPI: only small
 * sequence / ack messages travel through the same MPI message ops, the bytes are read from
 * shared arenas.
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
 * Creates the transport named `name` ("mpi") on world (borrowed). Collective. ("ipc" is not a
 * message transport of its own: rf_xfer_create runs its messages over "mpi".) Returns RF_OK
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
 * every chunk message carries an 8-byte trailer after its payload (sealed and checked by the
 * chunk codec, include/refit/chunk.h, for every transport),
 *
 *     [16-byte header][payload, payload_bytes][u64 XXH3-64 of header + payload, little endian]
 *
 * so a message is 16 + payload_bytes + 8 bytes. The chunk plan must then be built for
 * chunk_bytes - RF_CHUNK_TRAILER_BYTES (rf_xfer_plan_bytes) so that the largest message still
 * fits the chunk_bytes buffers. The receiver recomputes the hash over the received header and
 * payload and compares it with the trailer BEFORE unpacking anything: a mismatch fails the
 * update with RF_ERR_INTEGRITY naming the chunk seq, its sender and the tensors it carries.
 */
/* chunk_bytes a chunk plan must use for buffers of chunk_bytes (integrity: room for the
 * trailer). Local. */
static inline uint64_t rf_xfer_plan_bytes(uint64_t chunk_bytes, int integrity)
{
    return integrity ? chunk_bytes - RF_CHUNK_TRAILER_BYTES : chunk_bytes;
}

/* ---- the ipc transport (colocated; DESIGN.md section 9) ---------------------------------- */

/*
 * Arenas. A trainer rank places its shard buffers in one weights arena and, when it is a
 * stage sender whose stage has chunks to stage, `buffers` staging slots in a staging arena.
 * The exporter describes an arena by a handle (fixed size, sent over MPI as bytes); the
 * paired rollout rank imports the weights arena of its pair and every stage sender's staging
 * arena once, at setup, and keeps them mapped for the whole job. Backends are an ops table:
 * "host" = POSIX shared memory (shm_open / mmap by name; the importer maps read-only);
 * "cuda" (transport/transport_ipc_cuda.cu, compiled only with CUDA) = one cudaMalloc per
 * arena on the calling thread's current device + cudaIpcGetMemHandle, the device UUID in the
 * handle; the importer checks the UUID against its own current device and calls
 * cudaIpcOpenMemHandle once (cached for the job by the xfer). Device arenas are read and
 * written through to_host / from_host (the scheduler packs staged chunks on the host and
 * copies them in; integrity hashes a host copy). Teardown order on cuda: importers close
 * their mappings (rf_xfer_ipc_close_imports), a barrier, then exporters free (destroy).
 *
 * Cleanup (host): names are "/refit-<job id>-<rank>-<w|s>"; the exporter unlinks its names
 * as soon as every importer mapped them (rf_xfer_ipc_unlink, after a setup barrier), so a
 * process that dies later leaves nothing in /dev/shm; an error during setup unlinks at once
 * (rf_xfer_destroy). Only a process killed between shm_open and that barrier can leave an
 * object behind: `rm /dev/shm/refit-*` when no refit job runs.
 */
#define RF_IPC_NAME_MAX 64

typedef enum { RF_IPC_WEIGHTS = 0, RF_IPC_STAGING = 1, RF_IPC_KINDS = 2 } rf_ipc_kind_t;

typedef struct rf_ipc_handle {
    char backend[8];            /* "host" | "cuda" */
    char name[RF_IPC_NAME_MAX]; /* host: shm object name; "" = no arena */
    uint64_t bytes;             /* 0 = no arena */
    char device[64];            /* "host" or the exporter's GPU UUID */
    unsigned char opaque[64];   /* cuda: the cudaIpcMemHandle_t */
} rf_ipc_handle_t;

typedef struct rf_ipc_arena {
    void *base;     /* mapping (exporter: read-write; importer: read-only) */
    uint64_t bytes;
    int exported;   /* 1: created here (release unlinks if still linked) */
    int linked;     /* host: the name still exists */
    int readonly;   /* exporter: currently write-protected */
    rf_ipc_handle_t handle;
} rf_ipc_arena_t;

/* An arena backend. Every function is local; errors name the arena and the system's reason. */
typedef struct rf_ipc_arena_ops {
    const char *name;
    /* Creates an arena of `bytes` named `name` (borrowed), mapped read-write; fills a->handle. */
    rf_status_t (*export_arena)(const char *name, uint64_t bytes, rf_ipc_arena_t *a,
                                rf_err_t *err);
    /* Maps the arena of handle h (borrowed) read-only (opened once, cached by the caller). */
    rf_status_t (*import_arena)(const rf_ipc_handle_t *h, rf_ipc_arena_t *a, rf_err_t *err);
    /* Exporter: removes the name (mappings stay valid). No-op when already unlinked. */
    rf_status_t (*unlink_arena)(rf_ipc_arena_t *a, rf_err_t *err);
    /* Exporter: write-protects (readonly 1) or re-enables writes (0). Host: mprotect. */
    rf_status_t (*protect)(rf_ipc_arena_t *a, int readonly, rf_err_t *err);
    /* Unmaps (importer) or unmaps + unlinks (exporter). Never fails; NULL base is fine.
     * cuda: cudaIpcCloseMemHandle (importer) / cudaFree (exporter). */
    void (*release)(rf_ipc_arena_t *a);
    /* 1: base pointers are device memory (the CPU must not dereference them). */
    int device;
    /* Copies bytes between arena memory and ordinary host memory, synchronously (host:
     * memcpy; cuda: cudaMemcpy). */
    rf_status_t (*to_host)(void *dst, const void *arena_src, uint64_t bytes, rf_err_t *err);
    rf_status_t (*from_host)(void *arena_dst, const void *src, uint64_t bytes, rf_err_t *err);
} rf_ipc_arena_ops_t;

/* The POSIX shared memory backend (CI's backend for the ipc protocol). */
const rf_ipc_arena_ops_t *rf_ipc_host_ops(void);
/* Tests only: the host backend flagged device = 1, so the CPU suite runs the device branches
 * of the scheduler and the job (REFIT_TEST_DEVICE_ACCEL=host-device). */
const rf_ipc_arena_ops_t *rf_ipc_host_device_ops(void);
/* The CUDA IPC backend; NULL when refit was built without CUDA (transport/transport_ipc.c). */
const rf_ipc_arena_ops_t *rf_ipc_cuda_ops(void);
/* Backend by name ("host", "host-device", "cuda"); NULL when unknown or not compiled in. */
const rf_ipc_arena_ops_t *rf_ipc_arena_lookup(const char *name);

/*
 * Where a rollout rank reads one chunk piece (per plan piece; computed by the job from the
 * topology, the same way on every rank). staged 0: in place from the pair's weights arena,
 * rows [row_lo, row_hi) of the piece (full width, contiguous) start at arena_offset; the
 * piece's other rows are not read by this rank's loaders (row_lo == row_hi: none is).
 * staged 1: the full piece from the stage sender's staging slot at the piece's offset.
 */
typedef struct rf_ipc_piece {
    int staged;
    uint64_t row_lo, row_hi;
    uint64_t arena_offset;
} rf_ipc_piece_t;

/* One row range of a piece handed to the consumer. src holds rows [row_begin, row_end) full
 * width when backed; when !backed the consumer's loaders read none of these rows (src is a
 * valid but unrelated pointer). */
typedef struct rf_xfer_segment {
    const rf_chunk_piece_t *piece;
    uint64_t row_begin, row_end;
    const void *src;
    int backed;
} rf_xfer_segment_t;

/* Consumes one chunk as segments (ipc receivers). src bytes valid only during the call. */
typedef rf_status_t (*rf_xfer_apply_fn)(void *ctx, const rf_chunk_t *chunk,
                                        const rf_xfer_segment_t *segs, size_t nsegs,
                                        rf_err_t *err);

/* Waits until everything apply enqueued for `chunk` has completed (its source bytes were
 * read): a device receiver's stream event. */
typedef rf_status_t (*rf_xfer_complete_fn)(void *ctx, const rf_chunk_t *chunk, rf_err_t *err);

/* The ipc part of an update's config (NULL on mpi). Borrowed. */
typedef struct rf_xfer_ipc_config {
    const uint8_t *staged;        /* [plan->n_chunks] 1: the stage sender stages the chunk */
    const rf_ipc_piece_t *pieces; /* receiver: [plan->n_pieces] */
    int pair;                     /* receiver: world rank of its pair (READY comes from it) */
    rf_xfer_apply_fn apply;       /* receiver */
    void *apply_ctx;
    /* receiver, optional. NULL: apply returns with the chunk's copies complete and the ACK
     * follows at once. Set: apply only enqueues; the ACK of chunk k is sent after chunk k + 1
     * was applied (enqueued) and complete(k) returned, so the device copies of k + 1 queue
     * behind those of k while the host waits (one chunk of lookahead, never more). */
    rf_xfer_complete_fn complete;
} rf_xfer_ipc_config_t;

/*
 * The ipc protocol of one update (rf_xfer_send / rf_xfer_recv when x is on ipc; the chunk
 * plan, its global sequence and the stage senders are the mpi transport's):
 *   every trainer rank : produce its shards in its weights arena, write-protect it, send
 *                        READY{update} to its pair;
 *   stage sender       : for its j-th chunk, slot b = j mod buffers: wait until every
 *                        receiver acked the chunk that last used slot b; if the chunk is
 *                        staged, pack it (gathering other copies of record) into staging slot
 *                        b; post the receivers' ACK receives; send each receiver
 *                        SEQ{update, seq, payload bytes, slot, staged} (drop / duplicate
 *                        faults apply to SEQ);
 *   rollout rank       : wait for READY from its pair, then per chunk in sequence order:
 *                        receive SEQ from the stage sender, check update / seq / size / staged
 *                        flag (and the checksum in integrity mode), apply each piece from the
 *                        pair's arena in place or from the staging slot, then ACK{update, seq}
 *                        (host: the copies are done; cuda: after the stream synchronized).
 *   after the last chunk the receiver probes its senders once (an extra SEQ fails).
 * Every message is counted per peer (READY and ACK like chunks) so the gate's expectation and
 * rf_xfer_drain cover them.
 */

/* Size of the ipc sequence message: header + {u32 slot, u32 flags, u64 staged bytes}
 * (+ the 8-byte trailer in integrity mode: XXH3 over the message and the staged payload). */
#define RF_IPC_SEQ_BYTES 32
/* Acks and READY are a bare 16-byte chunk header. */
#define RF_IPC_ACK_BYTES 16
/* Tags of READY (trainer -> its pair, once per update) and ACK (rollout -> stage sender). */
#define RF_IPC_TAG_READY(update) RF_XFER_TAG(update, 0xffe)
#define RF_IPC_TAG_ACK(update) RF_XFER_TAG(update, 0xfff)
/* The seq field of READY. */
#define RF_IPC_READY_SEQ 0xffffffffu

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
    const rf_chunk_item_t *items; /* optional: the plan's items, to name tensors in errors
                                     (required on ipc: row bytes) */
    const rf_xfer_ipc_config_t *ipc; /* ipc transport only */
    int pack_device;              /* nccl only, integrity 0: the pack callback gets the DEVICE
                                     chunk buffer's payload (sources resident on the GPU) and
                                     returns with its writes complete; only the header goes
                                     h2d (bench/nccl-bw.c). 0: pack into pinned host memory */
} rf_xfer_config_t;

/* Counters of the current update (reset by rf_xfer_begin). */
typedef struct rf_xfer_stats {
    uint32_t update;
    int nranks;
    rf_peer_counts_t *peers; /* [nranks], owned by the xfer; ready for rf_gate_record_t */
    uint64_t chunks_sent;    /* chunk messages posted, all destinations */
    uint64_t chunks_received;/* chunks checked and unpacked */
    int max_inflight_chunks; /* most chunks posted and not yet known complete / unpacked */
    uint64_t ipc_bytes_in_place; /* ipc receiver: bytes its loaders read from the pair's arena */
    uint64_t ipc_bytes_staged;   /* ipc receiver: bytes of pieces read from staging slots */
    double pack_s;
    double wire_s;           /* time waiting on the wire (send slot reuse, receive arrival) */
    double unpack_s;
} rf_xfer_stats_t;

typedef struct rf_xfer rf_xfer_t;

/*
 * Creates a transfer engine on the control channel ctl (borrowed, must outlive it) with the
 * transport `transport` ("mpi" or "ipc") and `buffers` slots (0 = 2) of chunk_bytes each
 * (allocated here with rf_chunk_buffer_alloc, reused by every update; on ipc the slots are
 * message-sized and the payload slots are the staging arena, see rf_xfer_ipc_export).
 * Collective. Returns RF_OK and
 * *x_p (free with rf_xfer_destroy); RF_ERR_INVALID, RF_ERR_NOMEM, RF_ERR_MPI,
 * RF_ERR_UNSUPPORTED.
 */
rf_status_t rf_xfer_create(rf_ctl_t *ctl, const char *transport, uint64_t chunk_bytes,
                           int buffers, rf_xfer_t **x_p, rf_err_t *err);
/* Collective. Sends still outstanding are waited for briefly, then released. */
void rf_xfer_destroy(rf_xfer_t *x);

/*
 * ipc arenas of this rank (the xfer owns them; released by rf_xfer_destroy). Export: creates
 * the arena `kind` named `name` of `bytes` (> 0), returns its read-write base (borrowed from
 * x) and handle. Import: maps `owner`'s arena of `kind` from its handle (bytes 0: nothing).
 * Unlink: removes this rank's names once every importer mapped them (call after a barrier).
 * Protect: write-protects this rank's weights arena (1) or re-enables writes (0): the
 * trainer's weights are read-only from the end of production until the next update's
 * production, verdict included. All local; RF_ERR_UNSUPPORTED when x is not on ipc,
 * RF_ERR_IO naming the arena and errno's text.
 */
rf_status_t rf_xfer_ipc_export(rf_xfer_t *x, rf_ipc_kind_t kind, const char *name,
                               uint64_t bytes, void **base_p, rf_ipc_handle_t *h_p,
                               rf_err_t *err);
rf_status_t rf_xfer_ipc_import(rf_xfer_t *x, int owner, rf_ipc_kind_t kind,
                               const rf_ipc_handle_t *h, rf_err_t *err);
rf_status_t rf_xfer_ipc_unlink(rf_xfer_t *x, rf_err_t *err);
rf_status_t rf_xfer_ipc_protect(rf_xfer_t *x, int readonly, rf_err_t *err);
/* Base of this rank's mapping of `owner`'s arena (imported, or its own), NULL if none. */
const void *rf_xfer_ipc_base(const rf_xfer_t *x, int owner, rf_ipc_kind_t kind);
/* Chooses the arena backend by name (rf_ipc_arena_lookup) before any export or import
 * ("host" by default). RF_ERR_UNSUPPORTED when unknown / not compiled in, RF_ERR_STATE after
 * an arena exists. Local. */
rf_status_t rf_xfer_ipc_set_backend(rf_xfer_t *x, const char *name, rf_err_t *err);
/* The arena backend in use (NULL when x is not on ipc). */
const rf_ipc_arena_ops_t *rf_xfer_ipc_backend(const rf_xfer_t *x);
/* Closes every imported arena now (cuda: cudaIpcCloseMemHandle). Call on every rank, then a
 * barrier, then rf_xfer_destroy: no exporter frees memory another process still maps. Local. */
void rf_xfer_ipc_close_imports(rf_xfer_t *x);

/*
 * Trainer, after producing its shards: READY{update} to its pair (world rank `pair`), which
 * reads its weights arena in place only after it. Counted like a chunk message. Local.
 */
rf_status_t rf_xfer_ipc_ready(rf_xfer_t *x, uint32_t update, int pair, rf_err_t *err);

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
