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
 * ranks (stage s = sender s), each rectangle an item of (r1 - r0) rows of (c1 - c0) elements
 * packed contiguously; the chunk plan's rules (chunk_bytes, header, 256-byte alignment, row
 * splits, seq numbers) apply per (sender, receiver) pair unchanged, and the receiver checks
 * seq over its own plan. The schedule is pure and transport-independent: every rank computes
 * the same one from the topology, inventory and manifest.
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

#include "refit/chunk.h"
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

/* One rollout rank's schedule. */
typedef struct rf_p2p_recv {
    int rank;               /* world rank */
    rf_p2p_rect_t *rects;   /* [n], sender-major, manifest order within a sender */
    rf_chunk_item_t *items; /* [n]: item k is rects[k] (stage = sender) */
    size_t n;
    rf_chunk_plan_t *plan;  /* stages = trainer world ranks */
} rf_p2p_recv_t;

typedef struct rf_p2p_schedule {
    int T, R;
    int *senders;          /* [T] identity: stage s is sent by world rank s */
    rf_p2p_recv_t *recv;   /* [R], receiver j = world rank T + j */
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

/* Builds every rollout rank's schedule over the manifest's entries (man->entries[i].tensor set)
 * with chunk plans of chunk_bytes. Local. */
rf_status_t rf_p2p_schedule_build(const rf_topology_t *topo, const rf_inventory_t *inv,
                                  const rf_manifest_t *man, uint64_t chunk_bytes,
                                  rf_p2p_schedule_t *s, rf_err_t *err);
void rf_p2p_schedule_free(rf_p2p_schedule_t *s);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_P2P_H */
