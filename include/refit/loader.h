/*
 * refit: rollout loaders (DESIGN.md section 5), the fast path.
 *
 * A loader takes one arriving piece of a checkpoint tensor, (tensor, row_begin, row_end)
 * with full-width rows in checkpoint layout, and writes its intersection with this rank's
 * slice into the model-layout destination: TP slices (column / row parallel), fused shards
 * (vLLM QKVParallelLinear with k/v heads replicated when TP > num_key_value_heads,
 * MergedColumnParallelLinear gate_up), vocab-parallel rows (VocabParallelEmbedding, padded to
 * a multiple of 64), replicated tensors and FusedMoE w13 / w2. Writing shard k of a fused
 * tensor touches only shard k's bytes. Copies are whole-row memcpy runs wherever the
 * destination's columns are contiguous.
 */
#ifndef REFIT_LOADER_H
#define REFIT_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a model-layout parameter lives: strides in elements, in checkpoint orientation
 * (rows = the checkpoint tensor's dim 0 direction after slicing). */
typedef struct rf_dst {
    char *data;            /* element 0 */
    size_t esize;          /* bytes per element */
    rf_dtype_t dtype;      /* element type (a source in another dtype is converted exactly:
                              bf16 / f16 -> f32 FP8 block scales) */
    int64_t row_stride;    /* between consecutive rows (1-D params: 1) */
    int64_t col_stride;    /* between consecutive columns (1 = rows are contiguous runs) */
    int64_t expert_stride; /* between local experts (3-D MoE params) */
} rf_dst_t;

/* The accel descriptor of a loader destination (data is taken as a device pointer). */
rf_accel_dst_t rf_accel_dst_from(const rf_dst_t *dst);

/* Contiguous row-major destination for a slot shape (model layout; a K-first shape gets the
 * transposed strides). */
rf_dst_t rf_dst_contiguous(void *data, const rf_slot_shape_t *shape);

/*
 * Writes the intersection of rows [row_begin, row_end) of checkpoint tensor `tensor` (src
 * holds exactly those rows, full width, contiguous, in src_dtype) with this rank's slice.
 * Quantized params follow the same rules in their own units: FP8 block scales in 128-row /
 * 128-column blocks, packed int4 words in K/8 columns, group scales in K/G columns. Returns the
 * number of elements written (0 is legal: an empty intersection). `local_expert` is the
 * expert's local index for MoE tensors (callers decline non-local experts before calling).
 * Not collective; no allocation; O(rows) work.
 */
uint64_t rf_load_piece(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t local_expert, const rf_dst_t *dst, const void *src,
                       rf_dtype_t src_dtype, uint64_t row_begin, uint64_t row_end);

/*
 * The intersection arithmetic of rf_load_piece, without the write: describes the piece's
 * intersection with this rank's slice as one strided row copy (*rows; rows->src points into
 * `src`, so a caller may rebase it onto a device copy of the same bytes). A destination whose
 * rows form one contiguous run is described as a single row. Returns false for an empty
 * intersection (nothing to write). Only for modules whose pieces land in one run (every
 * kind but RF_MOD_QKV_HEADS, RF_MOD_SECTIONS and a fused [E, 2I, H] expert tensor split along I,
 * whose first run alone it gives): rf_load_piece_runs covers all.
 * rf_load_piece == rf_load_piece_runs + rf_accel_host_ops.copy_rows of each.
 */
bool rf_load_piece_rows(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                        int64_t local_expert, const rf_dst_t *dst, const void *src,
                        rf_dtype_t src_dtype, uint64_t row_begin, uint64_t row_end,
                        rf_accel_rows_t *rows);

/* Most row copies one piece becomes (rf_load_piece_runs). */
#define RF_LOAD_MAX_RUNS 8

/*
 * rf_load_piece_rows for every module kind: the intersection as up to RF_LOAD_MAX_RUNS row
 * copies. Every kind but RF_MOD_QKV_HEADS and RF_MOD_SECTIONS gives at most one; GPT-NeoX's
 * per-head interleaved query_key_value lands in three places ([q_r; k_r; v_r]) and gives at
 * most five; a sectioned tensor (Qwen3-Next conv1d) one per section the piece meets (<= 3);
 * GraniteMoE's fused input_linear [E, 2I, H] at tp x dp > 1 without EP (every expert's gate and
 * up halves sharded along I) gives at most three (a strided copy of whole blocks, a partial one
 * at each end). Returns the
 * number filled (0: empty intersection; -1: a rectangle the arithmetic cannot describe in
 * RF_LOAD_MAX_RUNS copies). rf_load_rect_runs: the same for a rectangle (rf_load_rect_rows).
 */
int rf_load_piece_runs(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t local_expert, const rf_dst_t *dst, const void *src,
                       rf_dtype_t src_dtype, uint64_t row_begin, uint64_t row_end,
                       rf_accel_rows_t out[RF_LOAD_MAX_RUNS]);
int rf_load_rect_runs(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                      int64_t local_expert, const rf_dst_t *dst, const void *src,
                      rf_dtype_t src_dtype, uint64_t row_begin, uint64_t row_end,
                      int64_t col_begin, int64_t col_end, int64_t src_pitch,
                      rf_accel_rows_t out[RF_LOAD_MAX_RUNS]);

/*
 * p2p (DESIGN.md section 9): the rectangle of checkpoint tensor `tensor` this rank's loaders
 * read, rows [*r0, *r1) x columns [*c0, *c1) in the tensor's own units (a fused [E, 2I, H]
 * expert tensor split along I: its local experts' whole rows, a superset). false when the rank
 * stores nothing of it (non-local expert, wna16 weight_shape, empty slice). Pure.
 */
bool rf_load_need(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                  int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1);
/*
 * The rows of rf_load_need before its checks: source rows [*r0, *r1) of checkpoint tensor
 * `tensor` (its own row units) that this rank's loaders read, possibly empty or past the
 * tensor's rows, whether or not its expert is local. false only when the tensor is not stored
 * (wna16 weight_shape). Pure.
 */
bool rf_load_need_rows(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t *r0, int64_t *r1);

/*
 * rf_load_piece_rows for a rectangle: src holds rows [row_begin, row_end) x columns
 * [col_begin, col_end) of the tensor, src_pitch elements between rows (in src_dtype). Writes
 * the intersection with this rank's slice. false: empty intersection.
 */
bool rf_load_rect_rows(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t local_expert, const rf_dst_t *dst, const void *src,
                       rf_dtype_t src_dtype, uint64_t row_begin, uint64_t row_end,
                       int64_t col_begin, int64_t col_end, int64_t src_pitch,
                       rf_accel_rows_t *rows);

/* The vocab padding arithmetic of rf_load_vocab_pad: the local padding rows are
 * [*row_begin_p, *row_begin_p + return value), columns [0, *cols_p). 0 for other modules. */
uint64_t rf_load_vocab_pad_rows(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                                int module, int64_t *row_begin_p, int64_t *cols_p);

/* Zero-fills the local vocab padding rows of a vocab-parallel module (rows whose global index
 * is >= V): rows [clamp(V - r Vp/T, 0, Vp/T), Vp/T). Returns the rows filled. */
uint64_t rf_load_vocab_pad(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int module,
                           const rf_dst_t *dst);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_LOADER_H */
