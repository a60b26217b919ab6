/*
 * refit: trainer shards (DESIGN.md section 6).
 *
 * Every trainer rank produces only its own shard of each tensor of its stage (generator or
 * checkpoint reader, reading only its bytes), in checkpoint layout. The broadcast sender of
 * stage p (t = 0, c = 0, d = 0) gathers the rest of its stage from the other copies of record
 * chunk by chunk, through the stage gather of the job's transport (rf_trainer_attach; the
 * MPI one on the trainer-only communicator unless the transport has its own), and packs full
 * tensors into chunks. One entry packs every chunk a trainer sends (rf_trainer_pack:
 * broadcast or p2p, host or device payload).
 *
 * Shard regions (rows along dim 0; columns = elements within a row), trainer.layout megatron:
 *   replicated: everything (copy of record on t = 0);
 *   column-type (q/k/v/gate/up and their biases): rows [t N/TP, (t+1) N/TP);
 *   row-type (o_proj, down_proj): columns [t K/TP, (t+1) K/TP), biases replicated;
 *   vocab (embedding, lm_head): rows [min(t ceil(V/TP), V), min((t+1) ceil(V/TP), V));
 *   experts: EP rank q holds experts [q E/EP, (q+1) E/EP), split inside by expert TP rank u.
 * Copies of record: dense tensors on c = 0, d = 0; expert tensors on x = 0.
 *
 * trainer.layout fsdp (torch FSDP2's Shard(0), docs/topology.md): the FSDP mesh is the data-
 * parallel ranks of a pipeline stage (every trainer rank when pp is 1; with pp > 1 each
 * stage's dp ranks, as fully_shard(stage, mesh["dp"]) over a (pp, dp) mesh; tp, cp, etp and
 * ep are 1). Every tensor of stage p, experts and norms included, is split along dim 0 as
 * torch.chunk(tensor, dp, 0) splits it: rank (d, p) holds rows [min(d ceil(N/DP), N),
 * min((d+1) ceil(N/DP), N)) and every column, so the last ranks' shards are short or empty
 * (an empty one is not held). There are no replicas: every rank is the copy of record of its
 * rows, the DP replica argument of rf_trainer_owners_replica is ignored, and p2p senders are
 * all dp ranks of the stage.
 */
#ifndef REFIT_TRAINER_H
#define REFIT_TRAINER_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/checkpoint.h"
#include "refit/chunk.h"
#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/topology.h"
#include "refit/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_MAX_OWNERS 64

/* A rectangle of a checkpoint tensor: rows [r0, r1), columns [c0, c1) (elements of a row). */
typedef struct rf_region {
    int64_t r0, r1, c0, c1;
} rf_region_t;

/* One rectangle of one manifest entry, from `sender` to one receiver: a p2p piece's source
 * (the p2p schedule, include/refit/p2p.h, lists them per receiver). */
typedef struct rf_p2p_rect {
    int entry;      /* manifest entry */
    int tensor;     /* inventory tensor */
    int sender;     /* trainer world rank */
    rf_region_t reg;
} rf_p2p_rect_t;

typedef struct rf_owner {
    int rank; /* world rank of a copy of record */
    rf_region_t reg;
} rf_owner_t;

/* This trainer rank's shard of tensor t; false when it holds none (other stage / expert). */
bool rf_trainer_shard(const rf_topology_t *topo, const rf_inventory_t *inv, const rf_tensor_t *t,
                      const rf_rank_info_t *me, rf_region_t *reg_p);
/* A trainer quantizes its own slice of a quantized linear (broadcast and p2p alike): the slice
 * `reg` of tensor t held by rank `me` must start on a 128 x 128 block (fp8-block weight) or a
 * group boundary (wna16 weight_packed); otherwise RF_ERR_TOPOLOGY naming the tensor
 * (gathering unquantized slices to quantize them is not implemented). Pure. */
rf_status_t rf_trainer_check_slice(const rf_topology_t *topo, const rf_inventory_t *inv,
                                   const rf_tensor_t *t, const rf_rank_info_t *me,
                                   const rf_region_t *reg, rf_err_t *err);
/* The copies of record that tile tensor t (empty regions dropped). Returns the count. */
int rf_trainer_owners(const rf_topology_t *topo, const rf_inventory_t *inv, const rf_tensor_t *t,
                      rf_owner_t out[RF_MAX_OWNERS]);
/* The same tiling from DP replica `replica` (dense: d = replica mod DP, cp 0; experts:
 * x = replica mod EDP). Replica 0 is the copies of record. */
int rf_trainer_owners_replica(const rf_topology_t *topo, const rf_inventory_t *inv,
                              const rf_tensor_t *t, int replica, rf_owner_t out[RF_MAX_OWNERS]);

typedef struct rf_trainer_stats {
    uint64_t bytes_produced;    /* bytes of this rank's shards produced this update */
    uint64_t bytes_read;        /* checkpoint tensor-data bytes read */
    uint64_t header_bytes_read; /* checkpoint header bytes read */
    uint64_t bytes_gathered;    /* bytes the stage sender received from other trainer ranks */
    uint64_t gather_msgs;
    uint64_t bytes_d2h;         /* device shards (rf_trainer_use_device): bytes copied to the
                                   host staging buffer this update (rf_trainer_begin zeroes) */
    uint64_t d2h_copies;        /* ... in this many copies */
    int read_threads;           /* threads that read this update's streamed chunks (0: not
                                   streamed; rf_trainer_produce zeroes) */
    double produce_s, gather_s, pack_s;
} rf_trainer_stats_t;

typedef struct rf_trainer {
    const rf_topology_t *topo;   /* borrowed */
    const rf_inventory_t *inv;   /* borrowed */
    const rf_manifest_t *man;    /* borrowed */
    const rf_chunk_plan_t *plan; /* borrowed */
    rf_rank_info_t me;
    MPI_Comm comm;               /* trainer-only communicator (world ranks [0, T)) */
    MPI_Comm stage_comm;         /* the trainer ranks of this stage (borrowed from the
                                    caller, MPI_COMM_NULL when it has none): lock-step
                                    checkpoint reads */
    bool sender;                 /* broadcast sender of its stage */
    int stage;
    rf_region_t *reg;            /* per manifest entry */
    bool *has;
    char **buf;                  /* own shard bytes per manifest entry (owned) */
    rf_dtype_t *src_dtype;       /* per manifest entry: the dtype buf[i] holds, the entry's
                                    unless rf_trainer_set_source_dtype says a wider master
                                    (owned) */
    char *gather_buf;            /* sender: per-chunk staging for peers' parts (owned) */
    uint64_t gather_cap;
    rf_trainer_stats_t stats;
    rf_xfer_gather_t *gather;    /* the stage gather on the job's transport (owned; NULL
                                    until rf_trainer_attach) */
    int64_t fault_skip_seq;      /* test hook: contributor skips its part of this chunk (-1) */
    bool buf_borrowed;           /* buf[] points into an arena (rf_trainer_use_arena) */
    const uint8_t *gathered;     /* optional [plan->n_pieces]: 0 = nobody reads this piece
                                    from the packed chunk (ipc: read in place), so it is not
                                    gathered nor packed; borrowed */
    struct rf_accel *dev;        /* non-NULL: buf[] is device memory of this accelerator
                                    (rf_trainer_use_device; borrowed, must outlive tr) */
    char *d2h_buf;               /* dev: host staging of one part's source rows (owned) */
    uint64_t d2h_cap;
    bool stream_reads;           /* the caller allows streamed checkpoint production
                                    (rf_trainer_produce): its transport packs every chunk on
                                    the host from this rank's pack, broadcast (the session:
                                    mpi, unless REFIT_CKPT_STREAM=0) */
    rf_ckpt_t *stream_ck;        /* this update's checkpoint, read by the pack (borrowed);
                                    NULL: the shard buffers hold the update */
    int read_threads;            /* threads reading one chunk's streamed parts (the pack's
                                    own and read_threads - 1 helpers; <= 1: the pack's
                                    alone; safetensors only; the session: spare cores, or
                                    REFIT_CKPT_READ_THREADS) */
    struct rf_pool *readers;     /* the helpers, started at the first streamed chunk
                                    (owned; runtime/trainer_stream.c) */
    uint64_t sum_block;          /* the fused seal's read block (rf_pack_req_t.sum), bytes;
                                    0: 256 KiB (tests set small ones) */
} rf_trainer_t;

/*
 * Moves this rank's shard buffers into an arena (ipc transport): buf[i] = base + offs[i] for
 * every entry it holds (offs from rf_trainer_arena_layout; base borrowed, must outlive tr and
 * hold the layout's bytes). The malloc'd buffers are freed; contents are not kept (call
 * before the first production). Local.
 */
void rf_trainer_use_arena(rf_trainer_t *tr, char *base, const uint64_t *offs);

/*
 * The shard buffers (borrowed: a session trainer's registered CUDA tensors on the mpi
 * transport, trainer.gpus) are device memory of accelerator ax (borrowed, must outlive tr).
 * The host packs (broadcast own parts, stage gather contributions, p2p rectangles) then read
 * each part's source rows with one device-to-host copy (copy or copy_2d, then rf_accel_sync)
 * into a host staging buffer grown to the largest part, and round / place from there exactly
 * as from host shards: the same bytes, F32 masters and integrity trailers included (the
 * trailer hashes the host payload). Counted in stats.bytes_d2h / d2h_copies. The device pack
 * (RF_PACK_DEVICE) is unchanged. Local.
 */
void rf_trainer_use_device(rf_trainer_t *tr, struct rf_accel *ax);

/*
 * The arena layout of trainer rank `me`'s shards: offs[i] (256-aligned) for every manifest
 * entry it holds, UINT64_MAX for the others; returns the total bytes. Pure: the paired
 * rollout rank computes its pair's layout with it. offs: [man->n], caller-owned.
 */
uint64_t rf_trainer_arena_layout(const rf_topology_t *topo, const rf_inventory_t *inv,
                                 const rf_manifest_t *man, const rf_rank_info_t *me,
                                 uint64_t *offs);

/*
 * fp32 masters: a trainer may hold a tensor wider than the checkpoint's dtype. Accepted pairs
 * (rf_trainer_source_dtype_ok): the same dtype, or F32 for a BF16 or F16 entry: widening
 * those is exact, so rounding back to nearest even is its inverse (what torch's
 * master.to(torch.bfloat16) / .half() gives, bit for bit on every non-NaN value, subnormals
 * and infinities included; a NaN stays a quiet NaN of its sign, its payload kept: torch's
 * own casts disagree there). Anything else (F64, F16 for BF16, F32 for an F8 / I32 entry, a
 * narrower source) is refused. Pure.
 */
bool rf_trainer_source_dtype_ok(rf_dtype_t src, rf_dtype_t dst);
/*
 * Manifest entry `entry`'s shard buffer holds `src` (rf_trainer_source_dtype_ok against the
 * entry's dtype, else RF_ERR_MISMATCH naming the tensor and both dtypes; RF_ERR_INVALID when
 * this rank holds no shard of it). Host packs (broadcast own parts, gather contributions, p2p
 * rectangles) then round it into the entry's dtype element by element; device packs refuse
 * it (RF_ERR_UNSUPPORTED naming the tensor) and rf_trainer_produce refuses to write it
 * (RF_ERR_STATE). The shard's byte size is its elements x rf_dtype_size(src). Local.
 */
rf_status_t rf_trainer_set_source_dtype(rf_trainer_t *tr, int entry, rf_dtype_t src, rf_err_t *err);

/*
 * Local (no MPI call). comm: the trainer-only communicator (world ranks [0, T)), which the
 * stage gather runs on; stage_comm: the trainer ranks of this rank's stage (rf_trainer_produce's
 * lock-step HDF5 reads), both borrowed and made by the caller (the session splits them in
 * rf_session_create, before any call's join: runtime/session_setup.c), MPI_COMM_NULL for none.
 */
rf_status_t rf_trainer_init(rf_trainer_t *tr, const rf_topology_t *topo,
                            const rf_inventory_t *inv, const rf_manifest_t *man,
                            const rf_chunk_plan_t *plan, const rf_rank_info_t *me, MPI_Comm comm,
                            MPI_Comm stage_comm, rf_err_t *err);
void rf_trainer_free(rf_trainer_t *tr);

/* The stage gather of this rank on x's transport (rf_xfer_gather_create on comm; x borrowed,
 * must outlive tr): call once, after rf_xfer_create, before the first update. Local. */
rf_status_t rf_trainer_attach(rf_trainer_t *tr, rf_xfer_t *x, rf_err_t *err);

/* Checks this rank's source against the manifest at update begin (names, dtypes, shapes;
 * bf16 sources of quantized tensors by their logical shape). Not collective. */
rf_status_t rf_trainer_check_source(rf_trainer_t *tr, rf_ckpt_t *ck, rf_err_t *err);

/* Produces this rank's shards: generator values for `step` (ck NULL) or the checkpoint's
 * bytes (its rows / columns only). Not collective, except from an HDF5 checkpoint where
 * libhdf5 is parallel: then collective over the stage's trainer ranks (stage_comm), which
 * read in lock step with the MPI-IO driver, one collective transfer per dataset in manifest
 * order, a rank without a shard of it taking part with nothing; a rank that fails keeps
 * taking part and returns its error at the end. */
rf_status_t rf_trainer_produce(rf_trainer_t *tr, uint64_t step, rf_ckpt_t *ck, rf_err_t *err);
/*
 * Streamed checkpoint production (issue 18 item 3): with tr->stream_reads set, ck non-NULL and
 * this rank alone on its stage (rf_trainer_pack_local) with every entry it sends read as
 * stored (the entry's dtype in the checkpoint, not quantized by the trainer, no scale, fp8 or
 * weight_shape entry, whose values production checks or writes before any chunk moves; no
 * wider master), rf_trainer_produce reads nothing: it sets tr->stream_ck = ck and leaves the
 * shard buffers as they are, and the pack reads each piece's rows from ck straight into the
 * chunk payload (the same rf_ckpt_read ranges production would read, so the same bytes; one
 * copy fewer). A read error then fails the chunk's pack, naming the tensor, its rows and the
 * file (the update FAILED, rollout ranks PAUSED, as for any failure after chunks moved).
 * ck must stay open until the update's send returned; rf_trainer_begin and the next
 * rf_trainer_produce clear stream_ck. Otherwise the shards are produced as above.
 */

/* Whether this rank packs every chunk of its stage from its own shards with no MPI (the
 * stage sender and the stage's only trainer rank, every tensor of the stage whole here, host
 * shards, every piece packed): its pack may run beside the wire (rf_xfer_config_t
 * pack_thread). Local, pure. */
bool rf_trainer_pack_local(const rf_trainer_t *tr);

/*
 * rf_trainer_produce for a caller's unquantized shards (the session API's trainer of a quantized
 * model, runtime/session_quant.c): for every entry of a quantized linear this rank holds, the
 * entry's bytes quantized on the host from logical[primary], this rank's slice of the linear's
 * unquantized weight (the fp8 weight's / the wna16 weight_packed's entry index; rows x columns
 * of the logical (N, K) weight as rf_trainer_shard cuts the primary, columns x 8 for wna16,
 * contiguous) in dtypes[primary]: the model dtype, or an F32 master, first rounded to nearest
 * even into the model dtype (the checkpoint tensor it stands for), then quantized, so the
 * engine gets quantize(checkpoint tensor) exactly, the bytes refit-run's trainer produces from
 * that tensor. Scales and wna16 weight_shape are written alongside; other entries are the
 * caller's and untouched. fp8-tensor / fp8-channel scales read the whole tensor / whole rows:
 * a shard without them is refused (RF_ERR_UNSUPPORTED naming the tensor). A non-finite weight
 * is refused naming its element (RF_ERR_INVALID). Not collective.
 */
rf_status_t rf_trainer_produce_given(rf_trainer_t *tr, const void *const *logical,
                                     const rf_dtype_t *dtypes, rf_err_t *err);

/*
 * rf_trainer_produce_given for a caller's CUDA shards (the session API's trainer of a quantized
 * model with trainer.gpus, over mpi or colocated ipc; runtime/session_quant.c): the same bytes,
 * with logical[primary] device memory of accelerator ax (rows x columns as there, contiguous)
 * and every quantized entry's buffer (tr->buf) device memory of ax too. The format kernels of ax
 * (rf_quant_ops_for: the "cuda" table on a GPU, the host one on the tests' "host-device")
 * quantize on the device, enqueued without a synchronization per call and checked once
 * (rf_quant_ops_t check); an F32 master is read back, rounded to nearest even on the host into
 * the model dtype and copied into device scratch first (bit-exact with the host path, slower).
 * wna16 weight_shape is copied host to device. Synchronizes ax before returning. Errors as
 * rf_trainer_produce_given (a non-finite weight named by its element, found in the shard read
 * back; fp8-tensor / fp8-channel beyond the shard RF_ERR_UNSUPPORTED), and the accelerator's,
 * naming the tensor. Not collective.
 */
struct rf_accel;
rf_status_t rf_trainer_produce_given_device(rf_trainer_t *tr, const void *const *logical,
                                            const rf_dtype_t *dtypes, struct rf_accel *ax,
                                            rf_err_t *err);

/*
 * rf_trainer_produce from the generator, on a device: the same bytes, written by the
 * generator's device fill (rf_gen_ops_for) and the format kernels' fp8 / wna16 quantizers
 * (rf_quant_ops_for) for quantized linears into device memory. The shard buffers given to
 * rf_trainer_use_arena start at host_base; each entry's bytes go to the same offset from
 * dev_base (the two may be equal: buffers that are device pointers). Synchronizes the
 * accelerator before returning. Errors: the accelerator's, with the tensor named. Not
 * collective.
 */
struct rf_accel;
rf_status_t rf_trainer_produce_device(rf_trainer_t *tr, uint64_t step, struct rf_accel *ax,
                                      void *dev_base, const void *host_base, rf_err_t *err);

/*
 * One pack: what the chunk transport's pack callback (rf_xfer_pack_fn) asks of a trainer.
 *   broadcast (rects NULL): the stage sender packs chunk `chunk` of tr->plan, every piece at
 *     its payload offset, gathering other copies of record's parts through the stage gather
 *     (waits under the deadline, polling ABORT). With tr->gathered, only the pieces it marks
 *     (the other pieces' bytes in payload are left as they were).
 *   p2p (rects: the receiver's rectangles, piece item k = rects[k]): each piece's rows of its
 *     rectangle, from this rank's own shard, packed contiguously ((c1 - c0) elements a row)
 *     at its payload offset; RF_ERR_INVALID naming the tensor when one is not inside it.
 *   mem RF_PACK_DEVICE (shards given to rf_trainer_use_arena are device memory, payload the
 *     device chunk buffer): nothing is copied; rows[k] gets piece k's copy as byte rows for
 *     the accelerator's copy_rows_batch (the caller launches them and waits before the
 *     payload is sent). Broadcast: each piece must be whole rows of this rank's own shard (a
 *     stage that needs a gather packs on the host): RF_ERR_INTERNAL naming the tensor.
 * Returns RF_OK or the error, err set.
 */
typedef enum rf_pack_mem { RF_PACK_HOST = 0, RF_PACK_DEVICE = 1 } rf_pack_mem_t;

typedef struct rf_pack_req {
    uint32_t update;
    const rf_chunk_t *chunk;
    const rf_chunk_piece_t *pieces; /* [chunk->piece_count] (p2p; broadcast reads tr->plan) */
    const rf_p2p_rect_t *rects;     /* p2p: the receiver's rectangles; NULL: broadcast */
    void *payload;
    rf_pack_mem_t mem;
    rf_accel_rows_t *rows;          /* RF_PACK_DEVICE: [chunk->piece_count], caller-owned */
    double deadline;                /* absolute: the stage gather's waits */
    rf_chunk_sum_t *sum;            /* NULL, or where a streamed checkpoint chunk whose every
                                       piece this rank reads whole gets the payload's
                                       refit-sum64 word sum, made by the read threads block by
                                       block as they read (have 1); else left as it was */
} rf_pack_req_t;

rf_status_t rf_trainer_pack(rf_trainer_t *tr, const rf_pack_req_t *req, rf_err_t *err);

/*
 * The trainer as the transfer's source: rf_trainer_source_pack is an rf_xfer_pack_fn (ctx: an
 * rf_trainer_source_t) handed straight to rf_xfer_send, so a chunk goes from the transport to
 * the trainer's pack without passing through the caller. One source per send call (update,
 * deadline, p2p rectangles). mem RF_PACK_DEVICE: the source launches the device copies on
 * accel (copy_rows_batch) and waits for them before returning, its row list grown as needed
 * (rows / rows_cap, owned by the source: free with rf_trainer_source_free). before (optional,
 * tests' fault hooks): called with the chunk first; an error is returned as the pack's.
 */
typedef struct rf_trainer_source {
    rf_trainer_t *tr;            /* borrowed */
    uint32_t update;
    double deadline;
    const rf_p2p_rect_t *rects;  /* p2p: the receiver's rectangles; NULL: broadcast */
    rf_pack_mem_t mem;
    struct rf_accel *accel;      /* RF_PACK_DEVICE: the accelerator of the device shards */
    int device;                  /* its GPU ordinal (errors) */
    rf_accel_rows_t *rows;       /* owned */
    size_t rows_cap;
    rf_status_t (*before)(void *ctx, const rf_chunk_t *chunk, rf_err_t *err);
    void *before_ctx;
} rf_trainer_source_t;

rf_status_t rf_trainer_source_pack(void *src, const rf_chunk_t *chunk,
                                   const rf_chunk_piece_t *pieces, void *payload,
                                   rf_chunk_sum_t *sum, rf_err_t *err);
/* Frees the row list (the source may be reused after). NULL is fine. */
void rf_trainer_source_free(rf_trainer_source_t *src);

/* Non-sender copies of record: send this rank's parts of every chunk of its stage to the
 * stage sender through the stage gather (at most `buffers` messages in flight). */
rf_status_t rf_trainer_contribute(rf_trainer_t *tr, uint32_t update, int buffers,
                                  double deadline, rf_err_t *err);

/* Starts an update's gather bookkeeping (every trainer rank, before rf_ctl_agree). Local. */
void rf_trainer_begin(rf_trainer_t *tr);

/*
 * After a FAILED verdict, on every trainer rank: leaves the trainer-only communicator clean
 * for the next update (rf_xfer_gather_drain). Each contributor tells its stage sender how
 * many gather messages it posted this update (tag RF_XFER_GATHER_COUNT_TAG) and completes its
 * sends; the sender, whose failed waits cancelled what it still had posted, receives (into
 * scratch) posted - matched messages from each contributor. Every wait ends at `deadline`
 * (absolute; ABORT is not polled: the failure is already known). Collective over each
 * stage's copies of record. Returns RF_OK, or RF_ERR_TIMEOUT naming the rank and how many
 * messages were missing; RF_ERR_MPI, RF_ERR_NOMEM.
 */
rf_status_t rf_trainer_drain(rf_trainer_t *tr, uint32_t update, double deadline, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_TRAINER_H */
