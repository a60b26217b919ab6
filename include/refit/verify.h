/*
 * refit: the independent reference (DESIGN.md sections 5 and 12).
 *
 * A slow scalar reference loader that shares no code with the fast loaders: for any element
 * of any rollout slot (model layout, row-major contiguous, as rf_module_slots shapes it) it
 * says which checkpoint tensor and which flat element of it must be there, or that the element
 * is vocab padding (must be zero). It is plain per-element index arithmetic written straight
 * from the table of DESIGN.md section 5, with checkpoint tensors found by their Hugging Face
 * names (not by the inventory's shard / slot fields). On top of it: slot verification against
 * full source tensors or the generator, and the collective reassembly behind --reference.
 */
#ifndef REFIT_VERIFY_H
#define REFIT_VERIFY_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/model.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the scalar reference locator ----------------------------------------------------- */

typedef enum {
    RF_REF_TENSOR = 0, /* element `index` of inventory tensor `tensor` */
    RF_REF_PAD,        /* vocab padding row (global row >= V): must be zero */
} rf_ref_kind_t;

typedef struct rf_ref_elem {
    rf_ref_kind_t kind;
    int tensor;     /* inventory tensor index; -1 for padding */
    uint64_t index; /* flat row-major element index in the unsharded checkpoint tensor */
} rf_ref_elem_t;

/* A locator for one (module, slot, rank): precomputed sizes and tensor indices. Opaque. */
typedef struct rf_ref_locator rf_ref_locator_t;

/*
 * Builds the locator of slot `slot` of module `module` on the rollout rank `rc` (borrowed;
 * `inv` borrowed and must outlive the locator). Slot order per module: weight, then bias when
 * the checkpoint has one; MoE experts: w13_weight, w2_weight. The slot shape is derived here
 * from DESIGN.md section 5 and must agree with rf_module_slots() (RF_ERR_MISMATCH naming
 * module, slot and both shapes otherwise). Rules (T_r = rc->tp, r = rc->tp_rank):
 *   QKV (vLLM QKVParallelLinear): [q_r; k_r; v_r], nh_p = nh/T_r, rep = max(1, T_r/nkv),
 *     nkv_p = max(1, nkv/T_r); q src rows [r nh_p d, +nh_p d), k/v src rows
 *     [(r/rep) nkv_p d, +nkv_p d); bias like the weight rows.
 *   merged gate_up (MergedColumnParallelLinear): [gate_r; up_r], src rows [r I/T_r, +I/T_r).
 *   row parallel (RowParallelLinear): src cols [r K/T_r, +K/T_r); bias full copy.
 *   vocab (VocabParallelEmbedding / ParallelLMHead): Vp = round_up(V, 64), local row i is
 *     global row r Vp/T_r + i; global rows >= V are padding. A tied lm_head is the embedding
 *     module itself (one slot).
 *   replicated (norms, q_norm / k_norm, router): full copy.
 *   MoE (FusedMoE): w13 (E_l, 2 I_p, H), w2 (E_l, H, I_p); local expert i is global expert
 *     rf_moe_local_expert(E, rc, i); gate rows [0, I_p) and up rows [I_p, 2 I_p) from src rows
 *     [r_m I_p, +I_p); w2 src cols [r_m I_p, +I_p). EP off: T_m = tp dp,
 *     r_m = dp_rank tp + tp_rank, I_p = I / T_m; EP on: T_m = 1, r_m = 0.
 * Errors: RF_ERR_INVALID (bad module / slot), RF_ERR_MISSING (a checkpoint tensor the rule
 * needs is not in the inventory), RF_ERR_TOPOLOGY (sizes do not divide), RF_ERR_MISMATCH,
 * RF_ERR_NOMEM. *loc_p is set only on success; free with rf_ref_locator_destroy. Not
 * collective.
 */
rf_status_t rf_ref_locator_create(const rf_inventory_t *inv, int module, int slot,
                                  const rf_rollout_coords_t *rc, rf_ref_locator_t **loc_p,
                                  rf_err_t *err);
void rf_ref_locator_destroy(rf_ref_locator_t *loc);
/* The slot's shape and dtype as the locator derived it (borrowed, lives with loc). */
const rf_slot_shape_t *rf_ref_locator_shape(const rf_ref_locator_t *loc);
/* Elements in the slot. */
uint64_t rf_ref_locator_numel(const rf_ref_locator_t *loc);
/* Element `elem` (< numel; flat, row-major, model layout) of the slot. Pure. */
void rf_ref_locator_at(const rf_ref_locator_t *loc, uint64_t elem, rf_ref_elem_t *out);
/*
 * A range [*begin_p, *end_p) of slot elements outside which no element maps to `tensor`
 * (a superset: the whole slot, or one local expert's block for MoE). Empty (begin == end)
 * when the rank holds none of it (a declined expert, a tensor of another module).
 */
void rf_ref_locator_range(const rf_ref_locator_t *loc, int tensor, uint64_t *begin_p,
                          uint64_t *end_p);

/* One-shot form of the above: builds a locator, locates one element, frees it. Slow. */
rf_status_t rf_ref_locate(const rf_inventory_t *inv, int module, int slot,
                          const rf_rollout_coords_t *rc, uint64_t elem, rf_ref_elem_t *out_p,
                          rf_err_t *err);

/* ---- slot verification ---------------------------------------------------------------- */

/*
 * Returns the FULL checkpoint tensor `tensor_index` (checkpoint layout, row-major, its
 * inventory dtype, numel elements), or NULL if it cannot be produced. The bytes are borrowed
 * and must stay valid until the next call or the end of the verification. Called once per
 * run of consecutive slot elements from the same tensor (so possibly more than once per
 * tensor).
 */
typedef const void *(*rf_tensor_bytes_fn)(void *ctx, int tensor_index);

/*
 * Compares every element of one rollout slot (`slot_bytes`, borrowed, model layout,
 * `slot_nbytes` bytes = numel x element size) with the checkpoint tensors: exact bytes of the
 * slot's dtype; padding elements must be all-zero bytes. *mismatches_p (may be NULL) is set to
 * the number of wrong elements whenever the comparison ran (RF_OK or RF_ERR_VERIFY).
 * Errors: RF_ERR_VERIFY naming the module, slot, rank, the first wrong element (slot index,
 * tensor name and global index, or "padding"), expected and actual bits, and the count;
 * RF_ERR_INVALID if slot_nbytes is wrong; RF_ERR_MISSING if tensor_bytes returns NULL; the
 * locator's errors. Not collective.
 */
rf_status_t rf_verify_slot(const rf_inventory_t *inv, int module, int slot,
                           const rf_rollout_coords_t *rc, const void *slot_bytes,
                           size_t slot_nbytes, rf_tensor_bytes_fn tensor_bytes, void *ctx,
                           uint64_t *mismatches_p, rf_err_t *err);

/*
 * As rf_verify_slot, with the source being the generator at `step` (DESIGN.md section 12):
 * each expected element is rf_gen_value_bits(hash(name), index, step, dtype), computed per
 * element (no tensor is materialized; the name hash is cached per tensor). Not collective.
 */
rf_status_t rf_verify_slot_generator(const rf_inventory_t *inv, int module, int slot,
                                     const rf_rollout_coords_t *rc, const void *slot_bytes,
                                     size_t slot_nbytes, uint64_t step, uint64_t *mismatches_p,
                                     rf_err_t *err);

/* ---- reassembly for --reference ------------------------------------------------------- */

/* This rank's model-layout bytes of (module, slot), sized as the slot's shape; borrowed until
 * the next call. NULL if the rank does not have it (an error). */
typedef const void *(*rf_slot_bytes_fn)(void *ctx, int module, int slot);
/* Called on engine rank 0 with one reassembled checkpoint tensor (borrowed for the call). */
typedef void (*rf_tensor_done_fn)(void *ctx, int tensor_index, const void *bytes,
                                  size_t nbytes);

/*
 * Reassembles every checkpoint tensor of `inv`, in inventory order, from the model-layout
 * slots of the tp x dp rollout ranks of ONE engine (DESIGN.md section 12, --reference).
 * Collective over `engine_comm` (borrowed): every rank of the engine calls it, with rank
 * l = dp_rank tp + tp_rank in engine_comm and its own coordinates `rc`. Each rank contributes
 * the elements its slots hold (found with the reference locator); engine rank 0 assembles the
 * tensor in checkpoint layout, checks that every element arrived, that replicated copies
 * (k/v heads when tp > nkv, replicated tensors, row-parallel biases, dp replicas) are
 * byte-equal, and that vocab padding rows are zero, then calls tensor_done(ctx, t, bytes,
 * nbytes) on rank 0 only. Memory: one tensor (plus one rank's contribution) at a time.
 * Errors, the same status on every rank: RF_ERR_VERIFY naming the tensor (replicas differ,
 * missing element, non-zero padding), RF_ERR_TOPOLOGY (communicator size / rank order does not
 * match tp x dp), RF_ERR_MISSING (slot_bytes returned NULL), RF_ERR_MPI, RF_ERR_NOMEM, the
 * locator's errors. On ranks other than the one that decided, the message says which rank.
 */
rf_status_t rf_reassemble(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                          MPI_Comm engine_comm, rf_slot_bytes_fn slot_bytes,
                          rf_tensor_done_fn tensor_done, void *ctx, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_VERIFY_H */
