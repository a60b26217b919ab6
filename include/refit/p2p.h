/*
 * refit: the p2p schedule (DESIGN.md section 9, mode p2p).
 *
 * Each trainer rank sends each rollout rank only the byte ranges of its own shard that rank
 * needs. A p2p piece is a rectangle of a checkpoint tensor, rows [r0, r1) x columns [c0, c1):
 * the intersection of one trainer copy's shard region (rf_trainer_shard) with the rectangle
 * the rollout rank's loaders read (rf_load_need). Copies: dense tensors from DP replica
 * d = engine mod DP (cp 0), expert tensors from expert-DP replica x = engine mod EDP, so
 * engines are fed from different replicas where there are several.
 *
 * Per rollout rank the rectangles form one chunk plan whose stages are the trainer world
 * ranks that send it (stage k = its k-th sender in world-rank order), each rectangle an item
 * of (r1 - r0) rows of (c1 - c0) elements packed contiguously; the chunk plan's rules
 * (chunk_bytes, header, 256-byte alignment, row splits, seq numbers) apply per (sender,
 * receiver) pair unchanged, and the receiver checks seq over its own plan. The schedule is
 * pure and transport-independent: every rank computes the same one from the topology,
 * inventory and manifest, and each rank builds only its own part of it
 * (rf_p2p_schedule_build_rank: the receivers it is or sends to), so its planning costs grow
 * with its own pieces, not with the world (issue 19).
 *
 * Quantized models (DESIGN.md section 9): every checkpoint tensor is its own rectangle space
 * in its own element units (fp8-block weight [N, K] e4m3 and weight_scale_inv [N/128, K/128];
 * wna16 weight_packed [N, K/8] int32, weight_scale [N, K/G], weight_shape [2]): the trainer
 * shard and the loaders' need are both in those units, so the intersection is too. A trainer
 * quantizes its own slice, which rf_trainer_init refuses unless it starts on a block (fp8) /
 * group (wna16) boundary; the aligned slices' scales are then exactly the scale rows /
 * columns of its shard. The wna16 weight_shape goes whole from one copy to every rank that
 * loads its linear (the planner checks it, nothing stores it).
 */
#ifndef REFIT_P2P_H
#define REFIT_P2P_H

#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/status.h"
#include "refit/topology.h"
#include "refit/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* rf_p2p_rect_t, one rectangle of one manifest entry from `sender` to the receiver, is the
 * trainer's (include/refit/trainer.h): what its pack reads. */

/*
 * One rollout rank's schedule. Its chunk plan's stages are its own senders, compact: stage k
 * is sent by world rank senders[k] (ascending), so the plan's size and the transport's stage
 * numbers (RF_XFER_TAG keeps 12 bits of them) depend on the receiver's senders, not on the
 * world. Pass `senders` as rf_xfer_config_t.stage_senders with this plan. The bytes of pair
 * (senders[k] -> rank): plan->stages[k].payload_bytes in plan->stages[k].chunk_count chunks.
 */
typedef struct rf_p2p_recv {
    int rank;               /* world rank */
    rf_p2p_rect_t *rects;   /* [n], sender-major, manifest order within a sender */
    rf_chunk_item_t *items; /* [n]: item k is rects[k] (stage = its sender's index in senders) */
    size_t n;
    int *senders;           /* [nsenders] world ranks, ascending: stage k is sent by senders[k] */
    int nsenders;
    rf_chunk_plan_t *plan;  /* stages = senders */
} rf_p2p_recv_t;

/*
 * A schedule: every receiver's (rf_p2p_schedule_build: recv[j] is world rank T + j, nrecv = R)
 * or one rank's part of it (rf_p2p_schedule_build_rank: the receivers that rank sends to or is,
 * ascending world rank).
 */
typedef struct rf_p2p_schedule {
    int T, R;
    int rank;              /* the rank whose part this is; -1: every receiver */
    size_t nrecv;
    rf_p2p_recv_t *recv;   /* [nrecv], ascending world rank */
} rf_p2p_schedule_t;

/*
 * What a rollout rank receives of inventory tensor `tensor`, in the tensor's own units:
 * rf_load_need, plus the whole wna16 weight_shape where the rank loads its linear. Pure.
 */
bool rf_p2p_need(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                 int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1);

/*
 * The rectangles rollout rank `receiver` (world rank) needs of inventory tensor `tensor`, one
 * per trainer copy that holds a non-empty part: out[i].rank = sender, out[i].reg = the
 * rectangle. Returns the count. Pure.
 */
int rf_p2p_rects(const rf_topology_t *topo, const rf_inventory_t *inv, int receiver, int tensor,
                 rf_owner_t out[RF_MAX_OWNERS]);

/* rf_p2p_rects in the reload planner's sender-callback form (rf_plan_build_p2p): at most max
 * senders of tensor to `receiver`, snd[i] the trainer world rank and rect[i] its rectangle
 * {r0, r1, c0, c1}. Returns the count. Pure. */
int rf_p2p_senders(const rf_topology_t *topo, const rf_inventory_t *inv, int receiver, int tensor,
                   int *snd, int64_t (*rect)[4], int max);

/* The manifest's chunk items in manifest order (stage, rows as rf_tensor_rows counts them, the
 * manifest's bytes, the tensor's name), the input of rf_chunk_plan_create: calloc'd, man->n + 1
 * entries, the caller frees; NULL when out of memory. Pure. */
rf_chunk_item_t *rf_chunk_items_of_manifest(const rf_inventory_t *inv, const rf_manifest_t *man);

/* Builds every rollout rank's schedule over the manifest's entries (man->entries[i].tensor set)
 * with chunk plans of chunk_bytes: the whole world's pairs, for tools that look at all of them
 * (refit-plan; tests). Time and memory grow with the world. Local. */
rf_status_t rf_p2p_schedule_build(const rf_topology_t *topo, const rf_inventory_t *inv,
                                  const rf_manifest_t *man, uint64_t chunk_bytes,
                                  rf_p2p_schedule_t *s, rf_err_t *err);

/*
 * The part of the schedule world rank `rank` takes part in (what a job builds; issue 19): a
 * rollout rank its own receiver, a trainer rank the receivers it sends to, each built whole
 * (seq numbers run over all of a receiver's senders) and byte for byte the full schedule's
 * (rf_p2p_schedule_build). Time and memory grow with the tensors and pieces of those receivers,
 * not with the world: a trainer looks only at engines its replica feeds (dense: engine mod DP
 * = its d, experts: engine mod EDP = its x; every engine under fsdp). Local, pure: every rank
 * derives its part from the agreed topology, inventory and manifest, and
 * rf_p2p_expect_agree checks the parts against each other.
 */
rf_status_t rf_p2p_schedule_build_rank(const rf_topology_t *topo, const rf_inventory_t *inv,
                                       const rf_manifest_t *man, uint64_t chunk_bytes, int rank,
                                       rf_p2p_schedule_t *s, rf_err_t *err);
void rf_p2p_schedule_free(rf_p2p_schedule_t *s);

/* The receiver `rank` of s, or NULL when s does not hold it. */
const rf_p2p_recv_t *rf_p2p_schedule_find(const rf_p2p_schedule_t *s, int rank);

/* rv's stage of `sender` (its index in rv->senders), or -1 when sender sends rv nothing. */
int rf_p2p_recv_stage(const rf_p2p_recv_t *rv, int sender);

/* XXH3-64 of pair (rv->senders[stage] -> rv->rank): its chunks' seq, payload bytes and pieces,
 * each piece's rectangle (tensor, rows, columns), row range and offset. The sender's and the
 * receiver's copies of a pair agree iff they move the same bytes to the same places. */
uint64_t rf_p2p_pair_digest(const rf_p2p_recv_t *rv, int stage);

/* Heap bytes the schedule holds (recv array, rectangles, items, senders, chunk plans): the
 * plan metadata of issue 19, asserted flat in the world size per rank by the tests. */
size_t rf_p2p_schedule_bytes(const rf_p2p_schedule_t *s);

/*
 * The gate's p2p expectation (DESIGN.md section 10), from every rank's own part: each rank
 * reports the pairs it sends (trainer) or receives (rollout) with their chunk and byte counts
 * (payload + per_chunk bytes of header and trailer per chunk) and rf_p2p_pair_digest; world
 * rank 0 gathers them, checks that both ends of every pair report it and agree on all three,
 * and fills expect (rank 0's only; left alone elsewhere). Collective over comm (every rank of
 * the world, world rank order). Fail-closed: ranks whose topology, model, manifest or chunk
 * size differ derive different pairs and fail here. Returns on rank 0 RF_ERR_MISMATCH naming
 * the pair and both ranks' counts, RF_ERR_NOMEM, RF_ERR_MPI; RF_OK elsewhere (callers agree
 * the status, as every setup step).
 */
rf_status_t rf_p2p_expect_agree(const rf_p2p_schedule_t *s, int rank, uint64_t per_chunk,
                                MPI_Comm comm, rf_gate_expect_t *expect, rf_err_t *err);
/* rf_p2p_expect_agree's two local halves, for a caller that gathers the records itself (the
 * session: bounded waits, runtime/session_setup.c): this rank's records (*recs_p owned by the
 * caller, *bytes_p bytes; RF_ERR_NOMEM: none) and, on the gathering rank, the check of every
 * rank's records concatenated (sorted in place) filling expect. Same results and texts. */
rf_status_t rf_p2p_expect_records(const rf_p2p_schedule_t *s, int rank, uint64_t per_chunk,
                                  void **recs_p, int *bytes_p, rf_err_t *err);
rf_status_t rf_p2p_expect_check(void *recs, size_t bytes, rf_gate_expect_t *expect,
                                rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_P2P_H */
