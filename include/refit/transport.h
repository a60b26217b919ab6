/*
 * refit: transports and the pipelined chunk transfer (DESIGN.md section 9).
 *
 * Two layers. A message transport (rf_transport_ops_t, "mpi") moves one message at a time
 * between world ranks: host buffers, tagged point-to-point on a duplicate of world
 * (MPI_Isend / MPI_Irecv, tag = ((update mod 8) << 12) | stage, never a collective);
 * completion is an MPI_Request so that every wait goes through the control channel's wait
 * loop (ABORT + deadline). A chunk transport carries an update's chunks from the stage senders
 * to the receivers; rf_xfer_t is one, created by name ("mpi", "ipc", "nccl") and driven only
 * through the generic calls below, so its caller names no transport. Every chunk transport
 * implements the same table (transport/xfer_int.h, rf_xfer_ops_t: open, setup, begin, sources,
 * send, recv, drain, fail, close) and says what it can do in capability bits (rf_xfer_caps):
 *   mpi  : each chunk one message of the mpi message transport (transport_mpi_chunks.c);
 *   ipc  : colocated pairs: the bytes are read from shared arenas, in place or from staging
 *          slots, only small sequence / ack messages go over mpi (transport_ipc.c; below);
 *   nccl : device chunk buffers over NCCL communicators (transport_nccl.c,
 *          include/refit/transport_nccl.h).
 * Every transport seals and checks chunks with the chunk codec (include/refit/chunk.h) and
 * hands a received chunk to its consumer the same way: as segments (rf_xfer_segment_t) to one
 * receive callback (rf_xfer_recv_fn).
 *
 * The scheduler runs one update in broadcast mode: each stage has one sender (a world rank)
 * that sends every chunk of its stage to every receiver (root-to-each). Chunks go in the
 * plan's global stage-major sequence. Both sides use `buffers` slots (default 2): the sender
 * packs chunk k+1 while chunk k is on the wire (a slot is reused only when all of its sends
 * completed); the receiver keeps `buffers` receives posted ahead in the sequence and hands
 * chunks over in sequence order. Receive memory is buffers x chunk_bytes per rank in total.
 *
 * A job, driven by the caller:
 *   rf_xfer_create; rf_xfer_setup (once, collective); per update:
 *   [sender: rf_xfer_sources WRITABLE, produce, FINAL]; rf_ctl_begin; rf_xfer_begin;
 *   rf_ctl_agree (GO); [sender: rf_xfer_sources READY]; rf_xfer_send (stage senders) and/or
 *   rf_xfer_recv (receivers); rf_gate_record_set_result + rf_xfer_stats -> rf_gate_run;
 *   on FAILED: rf_xfer_drain with the verdict's posted_from, then rf_xfer_fail, on every rank.
 */
#ifndef REFIT_TRANSPORT_H
#define REFIT_TRANSPORT_H

#include <mpi.h>
#include <stdbool.h>
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
 * offsets. chunk, pieces[0..chunk->piece_count) borrowed. sum: NULL, or (an mpi sender sealing
 * refit-sum64, cfg->integrity 2) where the pack may give the payload's word sum it made while
 * writing it (rf_chunk_sum_t, include/refit/chunk.h; have is 0 on entry): the seal then reads
 * only the header (rf_chunk_seal_sum), else the whole message. Returns RF_OK or an error (err
 * set).
 */
typedef rf_status_t (*rf_xfer_pack_fn)(void *ctx, const rf_chunk_t *chunk,
                                       const rf_chunk_piece_t *pieces, void *payload,
                                       rf_chunk_sum_t *sum, rf_err_t *err);

/* Capability bits of a chunk transport (rf_xfer_caps). */
#define RF_XFER_CAP_DEVICE_PAYLOAD 0x1u /* the receive callback may get device memory */
#define RF_XFER_CAP_IN_PLACE       0x2u /* receivers read pieces in place in the senders' memory */
#define RF_XFER_CAP_GATHER         0x4u /* the stage gather runs on the transport's own wire */
#define RF_XFER_CAP_ANY_ORDER      0x8u /* receivers honour rf_xfer_config_t.any_order: a p2p
                                           sender may serve its receivers in any order */

/*
 * p2p with RF_XFER_CAP_ANY_ORDER: the receiver index (0 .. n_receivers - 1) sender `sender`
 * (0 .. n_senders - 1) serves first; it then takes the others in index order, wrapping. The
 * senders' first receivers are spread evenly over the receivers, so they do not all start on
 * receiver 0 and share its link while the others wait (docs/simulate.md: the anchors reach
 * 1.02-1.09x the wire floor with it, 3.7-10x without). Without the capability every sender
 * starts at 0: receivers that take their senders in order then never wait in a cycle. Pure.
 */
int rf_xfer_p2p_first_receiver(int sender, int n_senders, int n_receivers);

/*
 * p2p sender's order of its pairs, the one rule the transport (rf_xfer_send_p2p's caller,
 * runtime/session.c) and the scale model (runtime/simulate.c) share: given this sender's
 * receivers' world ranks ascending (dst[0..n)), the position its sends start at: the first at
 * or after world rank first_rank (n_senders + rf_xfer_p2p_first_receiver(...) with the
 * capability; n_senders without), or 0 when none is; it then takes them in that order,
 * wrapping. Pure.
 */
size_t rf_xfer_p2p_start(const int *dst, size_t n, int first_rank);

/* Receivers a p2p sender keeps chunks in flight to at once by default (topology
 * transfer.p2p_inflight 0), so also its chunk buffers (at most 8 x chunk_bytes: 512 MiB at
 * 64 MiB).
 * The scale model's choice (docs/simulate.md, "the anchors"): the 256-GPU anchors are 1.12x
 * and 1.04x the wire floor with it, 2.66x and 2.34x with 1, 1.22x and 1.07x with 4; 16 gains
 * under 0.1x more for twice the memory. */
#define RF_XFER_P2P_INFLIGHT_DEFAULT 8

/* Where a segment's bytes are. */
typedef enum {
    RF_XFER_MEM_HOST = 0,   /* ordinary host memory (the CPU may read it) */
    RF_XFER_MEM_DEVICE = 1, /* device memory of the receiver's accelerator, or mapped into it
                               (a CUDA IPC arena); the CPU must not dereference it */
} rf_xfer_mem_t;

/* One row range of a piece handed to the consumer. src holds rows [row_begin, row_end) full
 * width when backed; when !backed the consumer's loaders read none of these rows (src is a
 * valid but unrelated pointer). mem: where src points. */
typedef struct rf_xfer_segment {
    const rf_chunk_piece_t *piece;
    uint64_t row_begin, row_end;
    const void *src;
    int backed;
    rf_xfer_mem_t mem;
} rf_xfer_segment_t;

/*
 * The one receive callback, for every transport: consumes a received, checked chunk as
 * segments in piece order (mpi: each piece whole in the host payload; nccl: each piece whole
 * in the device chunk buffer; ipc: a piece's rows read in place from the pair's arena, or the
 * piece from a staging slot). payload: the whole payload when the chunk sits in one buffer
 * (mpi: host, nccl: device; segs[k].src == payload + piece offset), NULL when its segments
 * are scattered (ipc). Every byte is valid only during the call; device segments may be read
 * by copies the callback only enqueues on the accelerator's default stream (the transport
 * waits for them, by an event recorded after the call, before the memory is reused).
 */
typedef rf_status_t (*rf_xfer_recv_fn)(void *ctx, const rf_chunk_t *chunk,
                                       const rf_xfer_segment_t *segs, size_t nsegs,
                                       const void *payload, rf_err_t *err);

/*
 * Optional, receiver: chunk's enqueued copies are complete (the transport saw the event
 * recorded after the receive callback), so the consumer may check what they brought. A
 * transport that releases the sender's sources per chunk calls it first (ipc on device arenas:
 * before the chunk's ACK); one that receives into its own buffers (mpi, nccl) does not call
 * it. Gets the receive callback's ctx.
 */
typedef rf_status_t (*rf_xfer_complete_fn)(void *ctx, const rf_chunk_t *chunk, rf_err_t *err);

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
 *     [16-byte header, byte 15 = algorithm][payload, payload_bytes][u64 digest, little endian]
 *
 * cfg->integrity is the algorithm (rf_chunk_trailer_t: 1 XXH3-64, 2 refit-sum64 v1), the same
 * on every rank; an mpi receiver with pinned buffers checks refit-sum64 on its device chunk
 * buffer (transport/xfer_int.h, "the mpi receiver's integrity check on the device").
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
 * Arenas. A trainer rank's shard buffers are its weights: refit-run places them in one weights
 * arena (allocation 0); the session API's trainer shares the n allocations its registered
 * CUDA tensors live in (rf_xfer_ipc_share, below). A stage sender whose stage has chunks to
 * stage also exports `buffers` staging slots in a staging arena.
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
    int borrowed;   /* exporter: the caller's memory, shared (share_arena): release and
                       protect leave it alone (refit never frees, unmaps or protects it) */
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
    /* Exporter: shares memory the caller owns, the whole allocation [base, base + bytes)
     * (base: its start, as rf_accel_pointer_info reports it; name: for messages), as
     * torch's reduce_tensor shares a caching-allocator segment. cuda: cudaIpcGetMemHandle of
     * base (a cudaMalloc allocation; VMM and pool memory were refused before); host: the POSIX
     * shared memory segment the tests declared at base (rf_accel_host_device_declare). The
     * importer opens it with import_arena. Sets a->borrowed. */
    rf_status_t (*share_arena)(const char *name, void *base, uint64_t bytes, rf_ipc_arena_t *a,
                               rf_err_t *err);
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
    uint64_t arena_offset; /* from the start of the pair's weights allocation `arena` */
    uint32_t arena;        /* which of the pair's weights allocations (rf_xfer_ipc_share); 0:
                              refit-run's one arena (rf_xfer_ipc_export) */
} rf_ipc_piece_t;

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
    int integrity;                /* 0: none; else the trailer algorithm of every chunk
                                     (rf_chunk_trailer_t: 1 XXH3-64, 2 refit-sum64 v1; plan
                                     built with rf_xfer_plan_bytes); same on every rank */
    const rf_chunk_item_t *items; /* optional: the plan's items, to name tensors in errors
                                     (required on ipc: row bytes) */
    int pack_device;              /* nccl only, integrity 0: the pack callback gets the DEVICE
                                     chunk buffer's payload (sources resident on the GPU) and
                                     returns with its writes complete; only the header goes
                                     h2d (bench/nccl-bw.c). 0: pack into pinned host memory */
    rf_xfer_complete_fn complete; /* receiver, optional (rf_xfer_complete_fn) */
    int any_order;                /* receiver, mpi transport only (ipc, nccl ignore it): 1 =
                                     take each chunk from whichever stage sender's message
                                     arrives first (receives posted from any source, the
                                     sender named by the message and checked against the
                                     plan; each sender's chunks still in its own seq order).
                                     p2p sets it: one sender at a time in plan order makes a
                                     wavefront across the pairs (docs/simulate.md). 0: the
                                     plan's sequence order */
    int pack_thread;              /* sender, mpi transport only (ipc, nccl ignore it): 1 = the
                                     pack callback calls no MPI and touches nothing the
                                     calling thread uses during rf_xfer_send, so it may run on
                                     a helper thread while the calling thread keeps the chunks
                                     already posted moving (where the sender spins, see
                                     rf_xfer_setup: chunk k + 1 is packed, a checkpoint read
                                     included, while chunk k is on the wire; a message through
                                     shared memory without single-copy moves only inside MPI
                                     calls). 0: packed on the calling thread */
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
    uint64_t h2d_chunks, h2d_bytes; /* mpi receiver checking on its device (refit-sum64
                                       trailers, device storage): chunk payloads it copied h2d
                                       into its device chunk buffers */
    uint64_t seals_fused;    /* mpi sender: chunks sealed from the pack's own payload sum
                                (rf_chunk_seal_sum), not by reading the message again */
    uint64_t pin_waits;      /* mpi receiver on device storage: receives into a pinned buffer
                                that waited for the h2d copies still reading it */
    double pin_wait_s;       /* ... their wait, seconds (outside wire_s) */
    double pack_s;
    double wire_s;           /* time waiting on the wire (send slot reuse, receive arrival) */
    double unpack_s;
} rf_xfer_stats_t;

typedef struct rf_xfer rf_xfer_t;

/*
 * Creates a transfer engine on the control channel ctl (borrowed, must outlive it) with the
 * chunk transport `transport` ("mpi", "ipc" or "nccl") and `buffers` slots (0 = 2) of
 * chunk_bytes each (allocated here with rf_chunk_buffer_alloc, reused by every update; on ipc
 * the slots are message-sized and the payload slots are the staging arena, see
 * rf_xfer_ipc_export).
 * Collective. Returns RF_OK and
 * *x_p (free with rf_xfer_destroy); RF_ERR_INVALID, RF_ERR_NOMEM, RF_ERR_MPI,
 * RF_ERR_UNSUPPORTED.
 */
rf_status_t rf_xfer_create(rf_ctl_t *ctl, const char *transport, uint64_t chunk_bytes,
                           int buffers, rf_xfer_t **x_p, rf_err_t *err);
/* Collective. Sends still outstanding are waited for briefly, then released. */
void rf_xfer_destroy(rf_xfer_t *x);

/* What a transport needs once, before the first update (rf_xfer_setup). Each transport reads
 * its part and ignores the rest; all pointers borrowed for the call (ipc keeps staged and
 * pieces: they must outlive x). */
typedef struct rf_xfer_setup {
    int device;                          /* this rank's CUDA device, -1: none */
    struct rf_accel *accel;              /* the accelerator the receive callback enqueues
                                            device copies on (its default stream); NULL */
    const struct rf_nccl_layout *layout; /* nccl: the communicators (rf_nccl_layout_build) */
    const char *arena_backend;           /* ipc: "host", "host-device", "cuda" (NULL: host) */
    int pair;                            /* ipc: world rank of this rank's pair */
    const uint8_t *staged;               /* ipc: [plan->n_chunks] the stage sender stages it */
    const rf_ipc_piece_t *pieces;        /* ipc, receiver: [plan->n_pieces] where it reads */
    int pageable_recv;                   /* mpi receiver with a device accel: 1 keeps pageable
                                            receive buffers (the path before issue 18's
                                            pinned ones; benchmarks' A/B) */
    int send_spin;                       /* mpi sender: whether its waits spin while an
                                            update's chunks stream (RF_CTL_WAIT_SPIN) and its
                                            pack may run on a helper thread (pack_thread):
                                            -1 (what rf_xfer_send_spin_default gives), 0 no,
                                            1 yes */
} rf_xfer_setup_t;

/*
 * The mpi sender's default for rf_xfer_setup_t.send_spin: 1 when the node has two cores per
 * local rank (a spinning main thread plus its pack thread), so a spin never takes a core a
 * peer needs; 0 on an oversubscribed node (CI's jobs run 2 to 6 ranks on 2 cores: there a
 * 0.25 s spin per wait would slow every peer, and no measurement says it helps). Local ranks:
 * OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI), else MPI_LOCALNRANKS (MPICH), else world_size;
 * cores: the process's CPU affinity mask. The environment's REFIT_MPI_SEND_SPIN=0 or 1
 * overrides (benchmarks' A/B, the tests of the spinning path); any other non-empty value is
 * refused (RF_ERR_INVALID naming it, rf_env_flag). *spin_p is set only on success. Local, pure
 * but for the environment.
 */
rf_status_t rf_xfer_send_spin_default(int world_size, bool *spin_p, rf_err_t *err);

/*
 * Whether an mpi sender seals refit-sum64 trailers from the pack's own payload sum
 * (rf_xfer_pack_fn's sum; the fused seal): REFIT_MPI_SEAL_FUSED, 1 (the default) or 0 (the
 * seal reads the message, benchmarks' A/B); any other non-empty value is refused
 * (RF_ERR_INVALID naming it, rf_env_flag). The mpi transport's setup and the session's choice
 * of checkpoint read threads both read it here. *on_p is set only on success. Local.
 */
rf_status_t rf_xfer_seal_fused(bool *on_p, rf_err_t *err);

/*
 * Once, after rf_xfer_create, on every rank (collective over x's world): the transport's
 * setup (nccl: communicator layout, device, streams; ipc: arena backend, pair, piece
 * placement; mpi: a rank whose accel has device memory (mem_type RF_MEM_CUDA) receives into
 * `buffers` pinned buffers from the accel's alloc_host, unless pageable_recv; its receive
 * callback may then leave h2d copies reading the segments enqueued on that accel's default
 * stream: the transport records an event there after each callback and waits for it before
 * the buffer takes another message (its next receive, the drain after a FAILED update, the
 * destroy), so a buffer is never overwritten while a copy still reads it); an mpi sender
 * with send_spin 1 spins in its waits once an update's chunks stream (RF_CTL_WAIT_SPIN, as a
 * pinned receiver does) and runs a pack_thread pack on a helper thread beside the wire. May
 * add capability bits (ipc on a device backend: RF_XFER_CAP_DEVICE_PAYLOAD).
 * RF_OK for a transport with nothing to set up (mpi); else the transport's errors.
 */
rf_status_t rf_xfer_setup(rf_xfer_t *x, const rf_xfer_setup_t *setup, rf_err_t *err);

/* The transport's capability bits (RF_XFER_CAP_*), as set up. Local. */
unsigned rf_xfer_caps(const rf_xfer_t *x);

/* The sender side's sources (what pack and in-place receivers read) for an update. */
typedef enum {
    RF_XFER_SOURCES_WRITABLE = 0, /* the producer writes them (ipc: write protection off) */
    RF_XFER_SOURCES_FINAL = 1,    /* produced: read-only until the next WRITABLE, verdict
                                     included (ipc: the weights arena write-protected) */
    RF_XFER_SOURCES_READY = 2,    /* after the begin agreement: receivers may read them (ipc:
                                     READY{update} to the pair, counted like a chunk) */
} rf_xfer_sources_t;

/* Trainer ranks: the state of this rank's sources for `update`. Local. RF_OK on a transport
 * whose receivers read no sender memory (mpi, nccl); else the transport's errors. */
rf_status_t rf_xfer_sources(rf_xfer_t *x, uint32_t update, rf_xfer_sources_t state,
                            rf_err_t *err);

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
/* Base of this rank's mapping of `owner`'s arena (imported, or its own), NULL if none
 * (weights: allocation 0). */
const void *rf_xfer_ipc_base(const rf_xfer_t *x, int owner, rf_ipc_kind_t kind);

/*
 * A trainer's weights may be n allocations rather than one arena: refit-run's is its one
 * exported arena (allocation 0, rf_xfer_ipc_export RF_IPC_WEIGHTS); the session API's trainer
 * shares the allocations its registered tensors live in (PyTorch's caching allocator: many
 * tensors in few segments), each once, and the pair reads every piece at (allocation,
 * offset). Share: exports the allocation [base, base + bytes) the caller owns (the backend's
 * share_arena); the same base again returns the index it already has (no second export);
 * *index_p its index, *h_p its handle. Import weights: maps allocation `index` of `owner`'s
 * weights from its handle, opening each distinct exported allocation (same backend, device,
 * name, size and handle bytes) once per process: a second index naming the same allocation
 * reuses the mapping. Imports of one owner only (a rollout rank reads its pair's). Closed by
 * rf_xfer_ipc_close_imports / rf_xfer_destroy, never earlier. Local; RF_ERR_UNSUPPORTED when x
 * is not on ipc, the backend's errors naming the allocation.
 */
rf_status_t rf_xfer_ipc_share(rf_xfer_t *x, const char *name, void *base, uint64_t bytes,
                              uint32_t *index_p, rf_ipc_handle_t *h_p, rf_err_t *err);
rf_status_t rf_xfer_ipc_import_weights(rf_xfer_t *x, int owner, uint32_t index,
                                       const rf_ipc_handle_t *h, rf_err_t *err);
/* Base of this rank's mapping of `owner`'s weights allocation `index` (own or imported);
 * NULL if none. */
const void *rf_xfer_ipc_weights_base(const rf_xfer_t *x, int owner, uint32_t index);
/* Tests: how many allocations this rank's backend exported or shared (*exports_p) and how
 * many it opened from another process's handle (*opens_p), staging arenas included. */
void rf_xfer_ipc_counts(const rf_xfer_t *x, uint64_t *exports_p, uint64_t *opens_p);
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
 * (rf_xfer_sources READY sends it to the pair of rf_xfer_setup.)
 */
rf_status_t rf_xfer_ipc_ready(rf_xfer_t *x, uint32_t update, int pair, rf_err_t *err);

/*
 * Start of update `update` (after rf_ctl_begin, before the begin agreement): resets the
 * counters, then the transport's begin under deadline (absolute) and ABORT (nccl: creates
 * the communicators when missing: the first update, or after rf_xfer_fail; else checks their
 * asynchronous errors). Collective over the transport's members (every rank calls it). On a
 * failure the transport posts ABORT (unless RF_ERR_PEER) and the next call tries again.
 * RF_OK (mpi, ipc: counters only), RF_ERR_TIMEOUT, RF_ERR_PEER, RF_ERR_NCCL, RF_ERR_MPI.
 */
rf_status_t rf_xfer_begin(rf_xfer_t *x, uint32_t update, double deadline, rf_err_t *err);
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

/* One pair of a p2p sender (rf_xfer_send_p2p): the pair's config (its receiver's plan, one
 * receiver) and the pack callback's ctx for it. Borrowed for the call. */
typedef struct rf_xfer_pair {
    const rf_xfer_config_t *cfg;
    void *ctx;
} rf_xfer_pair_t;

/*
 * p2p sender side: sends every pair's chunks (each pairs[i].cfg as rf_xfer_send would, with
 * the same update, deadline, integrity and fault), keeping chunks to up to `inflight`
 * receivers in flight at once. Pairs join in array order: the first `inflight` at once, the
 * next when one's last chunk completed. Each pair's chunks go in their seq order; across
 * the pairs in flight the sender takes them round-robin, one chunk per pair per turn,
 * skipping a pair whose previous chunks are still on the wire (at most max(1, S / inflight)
 * each), so a slow receiver holds only its own share of the slots and never stalls the
 * others. inflight is at most n (a wider window has no pair to fill it). S = max(buffers,
 * inflight) chunk buffers: a sender's send memory is bounded by S x chunk_bytes (grown from
 * `buffers` on the first such call and kept). Where the transport
 * has no such path (ipc, nccl: their receivers take senders in plan order) the pairs go one
 * after another, rf_xfer_send each, and inflight is 1. inflight 1 is the one-receiver-at-a-
 * time order. Requires the receivers to take chunks in any order (RF_XFER_CAP_ANY_ORDER,
 * cfg.any_order on their side) for inflight > 1, or two senders could each wait on a receiver
 * that waits on the other. Local; errors as rf_xfer_send, naming the chunk, stage and
 * receiver; RF_ERR_INVALID for a pair whose config is not one receiver's; RF_ERR_NOMEM for
 * the buffers. The transport logs (REFIT_LOG_LEVEL=info) the order in which the pairs' first
 * chunks went and the most receivers that had chunks posted at once (tests read it).
 */
rf_status_t rf_xfer_send_p2p(rf_xfer_t *x, const rf_xfer_pair_t *pairs, size_t n, int inflight,
                             rf_xfer_pack_fn pack, rf_err_t *err);

/*
 * Receiver side: receives every chunk of the plan, in sequence order (cfg->any_order on mpi:
 * in each stage's own order, the stages interleaved as their messages arrive), from its
 * stage's sender, checks header update / seq (RF_ERR_SEQUENCE on a repeat or gap, naming the chunk)
 * and payload size (RF_ERR_MISMATCH), in integrity mode the checksum trailer
 * (RF_ERR_INTEGRITY naming the chunk and its tensors, before unpacking), and hands the chunk
 * to recv(ctx, ...) as segments (cfg->complete, when set: see rf_xfer_complete_fn). After the
 * last chunk probes each source once and fails on an extra message (RF_ERR_SEQUENCE). Local.
 * Errors as for rf_xfer_send (ABORT posted unless RF_ERR_PEER); posted receives are cancelled
 * on error.
 */
rf_status_t rf_xfer_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
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

/*
 * After a FAILED verdict, on every rank, after rf_xfer_drain: the transport's failure step
 * (nccl: ncclCommAbort on every communicator not aborted yet; the next rf_xfer_begin
 * re-creates them). Local. Never fails (problems are logged); nothing on mpi and ipc.
 */
void rf_xfer_fail(rf_xfer_t *x);

/* ---- the stage gather (broadcast mode; DESIGN.md section 6) ------------------------------ */

/*
 * A broadcast stage sender packs whole tensors, so it gathers the parts its stage's other
 * copies of record hold: per chunk, each contributor sends it one message (its parts of the
 * chunk's pieces, back to back) and the sender receives the chunk's messages into one buffer.
 * The gather belongs to the transport: one with its own (nccl: the stage's trainer-only
 * gather communicator, the rf_xfer_ops_t gather entries) carries it; every other (mpi, ipc,
 * nccl on a stage without a gather communicator) gets the MPI gather (transport/gather_mpi.c):
 * point-to-point on the trainer-only communicator, tag RF_XFER_GATHER_TAG(update, seq), each
 * message counted (received per peer on the sender, posted on a contributor) so that
 * rf_xfer_gather_drain leaves the communicator clean after a FAILED update. A transport's own
 * gather counts nothing: its failure path resets it (nccl aborts and re-creates its
 * communicators); the drain's count exchange runs all the same (zero counts).
 *
 * One rf_xfer_gather_t per trainer rank, for the whole job:
 *   rf_xfer_gather_create                       after rf_xfer_create (the transport decides);
 *   rf_xfer_gather_begin                        every update, before rf_ctl_agree;
 *   sender:      rf_xfer_gather_recv (posts one chunk's receives), then, its own parts
 *                copied meanwhile, rf_xfer_gather_wait;
 *   contributor: rf_xfer_gather_send per chunk (at most `window` in flight), then
 *                rf_xfer_gather_settle to complete them;
 *   on FAILED:   rf_xfer_gather_drain on the stage's copies of record.
 * Every wait runs through x's control channel (ABORT + deadline; the drain does not poll
 * ABORT).
 */
/* Tag of a gather message of chunk `seq` (MPI gather). */
#define RF_XFER_GATHER_TAG(update, seq) ((int)((((update) & 7u) << 20) | ((seq) & 0xfffffu)))
/* Tag of the drain's count message (above every gather tag). */
#define RF_XFER_GATHER_COUNT_TAG(update) ((int)((1u << 23) | ((update) & 7u)))
/* Most messages one chunk's gather receives, and most contributor sends in flight. */
#define RF_XFER_GATHER_MAX_PEERS 256
#define RF_XFER_GATHER_MAX_SENDS 16

typedef struct rf_xfer_gather rf_xfer_gather_t;

/*
 * The stage gather of this trainer rank (world rank `rank`, stage `stage`) on x's transport;
 * comm: the trainer-only communicator of world ranks [0, nranks) (borrowed, as x; both must
 * outlive the gather, which is destroyed before them). Local. RF_ERR_INVALID, RF_ERR_NOMEM.
 */
rf_status_t rf_xfer_gather_create(rf_xfer_t *x, MPI_Comm comm, int rank, int stage, int nranks,
                                  rf_xfer_gather_t **g_p, rf_err_t *err);
/* Local. Sends still in flight are released (their buffers leaked: a peer may still read
 * them). NULL is fine. */
void rf_xfer_gather_destroy(rf_xfer_gather_t *g);
/* Starts an update's counting. Local. */
void rf_xfer_gather_begin(rf_xfer_gather_t *g);

/*
 * Sender: posts the receives of chunk `seq`'s gather: n messages (n <= RF_XFER_GATHER_MAX_PEERS),
 * bytes[q] from world rank peers[q], back to back into host dst (borrowed until
 * rf_xfer_gather_wait returns; peers and bytes are copied). A transport's own gather receives
 * in rf_xfer_gather_wait. Local. RF_ERR_INVALID (too many peers).
 */
rf_status_t rf_xfer_gather_recv(rf_xfer_gather_t *g, uint32_t update, uint32_t seq,
                                const int *peers, const uint64_t *bytes, int n, void *dst,
                                rf_err_t *err);
/* Sender: waits until the posted messages are in dst. On an error the receives still posted
 * are cancelled (one that matched counts as received for the drain) and the wait's status is
 * returned with its message (RF_ERR_TIMEOUT, RF_ERR_PEER, the transport's). */
rf_status_t rf_xfer_gather_wait(rf_xfer_gather_t *g, double deadline, rf_err_t *err);

/*
 * Contributor: sends msg[0..bytes) (malloc'd; the gather frees it) as its part of chunk `seq`
 * to world rank `sender`. MPI gather: first completes the oldest sends while `window` (1 to
 * RF_XFER_GATHER_MAX_SENDS) are in flight (an error: "sending gather parts of stage S to rank
 * D: <the wait's>"), then posts it (counted); a transport's own gather returns once the
 * message is on its way, or its error.
 */
rf_status_t rf_xfer_gather_send(rf_xfer_gather_t *g, uint32_t update, uint32_t seq, int sender,
                                void *msg, uint64_t bytes, int window, double deadline,
                                rf_err_t *err);
/* Contributor: waits until at most `keep` sends are in flight (the oldest first; keep 0:
 * all of them). On an error the sends stay in flight for rf_xfer_gather_drain. */
rf_status_t rf_xfer_gather_settle(rf_xfer_gather_t *g, int keep, double deadline,
                                  rf_err_t *err);

/*
 * After a FAILED verdict: leaves the trainer-only communicator clean for the next update.
 * A contributor (contributors NULL) tells `sender` how many gather messages it posted this
 * update (tag RF_XFER_GATHER_COUNT_TAG) and completes its sends; the sender receives the
 * count of each of contributors[0..n) and then (into scratch) the messages it posted beyond
 * those received, adding them to *drained_p. Every wait ends at `deadline` (absolute; ABORT
 * is not polled). Pairs with the peers' drains. Returns RF_OK, RF_ERR_TIMEOUT naming the rank
 * and how many messages were missing, RF_ERR_MPI, RF_ERR_NOMEM.
 */
rf_status_t rf_xfer_gather_drain(rf_xfer_gather_t *g, uint32_t update, int sender,
                                 const int *contributors, int n, uint64_t *drained_p,
                                 double deadline, rf_err_t *err);

/*
 * Tests only (REFIT_TEST_GATHER_WIRE=mpi): this rank's gather runs as a transport's own one
 * does (a chunk's receives and each send complete in one call, nothing counted for the drain)
 * but over MPI on comm with one tag, so that path runs in CI without GPUs. Ignored when the
 * transport has its own. Local.
 */
void rf_xfer_gather_use_test_wire(rf_xfer_gather_t *g);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_TRANSPORT_H */
