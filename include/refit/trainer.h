/*
 * refit: trainer shards (DESIGN.md section 6).
 *
 * Every trainer rank produces only its own shard of each tensor of its stage (generator or
 * checkpoint reader, reading only its bytes), in checkpoint layout. The broadcast sender of
 * stage p (t = 0, c = 0, d = 0) gathers the rest of its stage from the other copies of record
 * over a trainer-only communicator, chunk by chunk, and packs full tensors into chunks.
 *
 * Shard regions (rows along dim 0; columns = elements within a row):
 *   replicated: everything (copy of record on t = 0);
 *   column-type (q/k/v/gate/up and their biases): rows [t N/TP, (t+1) N/TP);
 *   row-type (o_proj, down_proj): columns [t K/TP, (t+1) K/TP), biases replicated;
 *   vocab (embedding, lm_head): rows [min(t ceil(V/TP), V), min((t+1) ceil(V/TP), V));
 *   experts: EP rank q holds experts [q E/EP, (q+1) E/EP), split inside by expert TP rank u.
 * Copies of record: dense tensors on c = 0, d = 0; expert tensors on x = 0.
 */
#ifndef REFIT_TRAINER_H
#define REFIT_TRAINER_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/safetensors.h"
#include "refit/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_MAX_OWNERS 64

/* A rectangle of a checkpoint tensor: rows [r0, r1), columns [c0, c1) (elements of a row). */
typedef struct rf_region {
    int64_t r0, r1, c0, c1;
} rf_region_t;

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
    double produce_s, gather_s, pack_s;
} rf_trainer_stats_t;

typedef struct rf_trainer {
    const rf_topology_t *topo;   /* borrowed */
    const rf_inventory_t *inv;   /* borrowed */
    const rf_manifest_t *man;    /* borrowed */
    const rf_chunk_plan_t *plan; /* borrowed */
    rf_rank_info_t me;
    MPI_Comm comm;               /* trainer-only communicator (world ranks [0, T)) */
    bool sender;                 /* broadcast sender of its stage */
    int stage;
    rf_region_t *reg;            /* per manifest entry */
    bool *has;
    char **buf;                  /* own shard bytes per manifest entry (owned) */
    char *gather_buf;            /* sender: per-chunk staging for peers' parts (owned) */
    uint64_t gather_cap;
    rf_trainer_stats_t stats;
    /* gather bookkeeping of the current update, for rf_trainer_drain */
    uint64_t *gather_recv;       /* sender: [T] gather messages matched per trainer rank */
    uint64_t gather_posted;      /* contributor: gather messages posted to the sender */
    MPI_Request out_reqs[16];    /* contributor: sends in flight (MPI_REQUEST_NULL when done) */
    char *out_bufs[16];          /* their buffers (owned) */
    int n_out;
    int64_t fault_skip_seq;      /* test hook: contributor skips its part of this chunk (-1) */
    bool buf_borrowed;           /* buf[] points into an arena (rf_trainer_use_arena) */
    const uint8_t *gathered;     /* optional [plan->n_pieces]: 0 = nobody reads this piece
                                    from the packed chunk (ipc: read in place), so it is not
                                    gathered nor packed; borrowed */
    /* Optional gather wire (nccl transport: the stage's trainer-only NCCL communicator,
     * rf_xfer_nccl_gather_recv / _send); NULL: MPI point-to-point on comm. recv: the n
     * messages of one chunk, bytes[q] from world rank peers[q], back to back into dst; send:
     * one message to the stage sender. Both return once the bytes are in place. The MPI drain
     * has nothing to do for them (the nccl transport aborts and re-creates its communicators
     * after a FAILED update). */
    rf_status_t (*wire_recv)(void *ctx, const int *peers, const uint64_t *bytes, int n,
                               void *dst, double deadline, rf_err_t *err);
    rf_status_t (*wire_send)(void *ctx, int sender, const void *src, uint64_t bytes,
                               double deadline, rf_err_t *err);
    void *wire_ctx;
} rf_trainer_t;

/*
 * Moves this rank's shard buffers into an arena (ipc transport): buf[i] = base + offs[i] for
 * every entry it holds (offs from rf_trainer_arena_layout; base borrowed, must outlive tr and
 * hold the layout's bytes). The malloc'd buffers are freed; contents are not kept (call
 * before the first production). Local.
 */
void rf_trainer_use_arena(rf_trainer_t *tr, char *base, const uint64_t *offs);

/*
 * The arena layout of trainer rank `me`'s shards: offs[i] (256-aligned) for every manifest
 * entry it holds, UINT64_MAX for the others; returns the total bytes. Pure: the paired
 * rollout rank computes its pair's layout with it. offs: [man->n], caller-owned.
 */
uint64_t rf_trainer_arena_layout(const rf_topology_t *topo, const rf_inventory_t *inv,
                                 const rf_manifest_t *man, const rf_rank_info_t *me,
                                 uint64_t *offs);

/* Collective over the trainer ranks (comm = trainer-only communicator). */
rf_status_t rf_trainer_init(rf_trainer_t *tr, const rf_topology_t *topo,
                            const rf_inventory_t *inv, const rf_manifest_t *man,
                            const rf_chunk_plan_t *plan, const rf_rank_info_t *me, MPI_Comm comm,
                            rf_err_t *err);
void rf_trainer_free(rf_trainer_t *tr);

/* Checks this rank's source against the manifest at update begin (names, dtypes, shapes;
 * bf16 sources of quantized tensors by their logical shape). Not collective. */
rf_status_t rf_trainer_check_source(rf_trainer_t *tr, rf_ckpt_t *ck, rf_err_t *err);

/* Produces this rank's shards: generator values for `step` (ck NULL) or the checkpoint's
 * bytes (pread of its rows / columns only). Not collective. */
rf_status_t rf_trainer_produce(rf_trainer_t *tr, uint64_t step, rf_ckpt_t *ck, rf_err_t *err);

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

/* Stage sender: packs chunk `c` into payload, gathering other copies of record's parts
 * (waits under the deadline, polling ABORT through ctl). With tr->gathered, only the pieces
 * it marks (the other pieces' bytes in payload are left as they were). */
rf_status_t rf_trainer_pack(rf_trainer_t *tr, rf_ctl_t *ctl, uint32_t update,
                            const rf_chunk_t *c, void *payload, double deadline, rf_err_t *err);

/* Non-sender copies of record: send this rank's parts of every chunk of its stage to the
 * stage sender (at most `buffers` messages in flight). */
rf_status_t rf_trainer_contribute(rf_trainer_t *tr, rf_ctl_t *ctl, uint32_t update, int buffers,
                                  double deadline, rf_err_t *err);

/* p2p: copies rectangle `rect` of manifest entry `entry` (inside this rank's own shard) to dst,
 * rows packed contiguously ((c1 - c0) elements each). RF_ERR_INVALID when it is not inside the
 * shard. Local. */
rf_status_t rf_trainer_copy_rect(const rf_trainer_t *tr, int entry, const rf_region_t *rect,
                                 void *dst, rf_err_t *err);

/*
 * Device-resident shards (buf[] given to rf_trainer_use_arena are device memory): the copies
 * that pack onto a device payload, as byte rows for the accelerator's copy_rows_batch (the
 * caller launches them and waits before the payload is sent).
 *   rf_trainer_rect_rows: rectangle `rect` of entry (inside this rank's shard, else
 *     RF_ERR_INVALID) to dst, rows packed contiguously, as rf_trainer_copy_rect does on the host.
 *   rf_trainer_pack_rows: every piece of chunk c (broadcast) at its payload offset, out[k] for
 *     piece k (c->piece_count entries, caller-owned); each piece's rows must be whole rows of
 *     this rank's own shard (a stage that needs a gather packs on the host): RF_ERR_INTERNAL
 *     naming the tensor otherwise.
 * Pure (no device access). */
rf_status_t rf_trainer_rect_rows(const rf_trainer_t *tr, int entry, const rf_region_t *rect,
                                 void *dst, rf_accel_rows_t *out, rf_err_t *err);
rf_status_t rf_trainer_pack_rows(const rf_trainer_t *tr, const rf_chunk_t *c, void *payload,
                                 rf_accel_rows_t *out, rf_err_t *err);

/* Starts an update's gather bookkeeping (every trainer rank, before rf_ctl_agree). Local. */
void rf_trainer_begin(rf_trainer_t *tr);

/*
 * After a FAILED verdict, on every trainer rank: leaves the trainer-only communicator clean
 * for the next update. Each contributor tells its stage sender how many gather messages it
 * posted this update (tag RF_TRAINER_COUNT_TAG) and completes its sends; the sender cancels
 * what it still had posted, then receives (into scratch) posted - matched messages from each
 * contributor. Every wait ends at `deadline` (absolute; ABORT is not polled: the failure is
 * already known). Collective over each stage's copies of record. Returns RF_OK, or
 * RF_ERR_TIMEOUT naming the rank and how many messages were missing; RF_ERR_MPI, RF_ERR_NOMEM.
 */
rf_status_t rf_trainer_drain(rf_trainer_t *tr, rf_ctl_t *ctl, uint32_t update, double deadline,
                             rf_err_t *err);

/* Tag of the drain's count message (above every gather tag, (update mod 8) << 20 | seq). */
#define RF_TRAINER_COUNT_TAG(update) ((int)((1u << 23) | ((update) & 7u)))

#ifdef __cplusplus
}
#endif
#endif /* REFIT_TRAINER_H */
