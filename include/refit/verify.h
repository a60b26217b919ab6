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
 * `inv` borrowed and must outlive the locator). Slot order per module (DESIGN.md 7): the
 * weight-side slots of the module's quantization, then bias when the checkpoint has one:
 * unquantized `weight`; fp8-block `weight`, `weight_scale_inv`; wna16 `weight_packed`,
 * `weight_scale`. MoE experts: the w13_ slots, then the w2_ slots in the same order. The
 * module's quantization is found by checkpoint tensor names (`<P>.weight_scale_inv` /
 * `<P>.weight_packed`). `weight_shape` tensors have no slot. The slot shape is derived here
 * from DESIGN.md sections 5 and 7 and must agree with rf_module_slots() (name, dtype, shape and
 * kfirst; RF_ERR_MISMATCH naming module, slot and both shapes otherwise).
 * Rules (T_r = rc->tp, r = rc->tp_rank), in the rows of the tensor's own units (128-row blocks
 * for weight_scale_inv, where every row count and offset below must be a whole number of
 * blocks, RF_ERR_TOPOLOGY otherwise) and columns of the tensor's own width W (K, packed words
 * K/8, group scales K/G, fp8 scale blocks cdiv(K, 128)):
 *   QKV (vLLM QKVParallelLinear): [q_r; k_r; v_r], nh_p = nh/T_r, rep = max(1, T_r/nkv),
 *     nkv_p = max(1, nkv/T_r); q src rows [r nh_p d, +nh_p d), k/v src rows
 *     [(r/rep) nkv_p d, +nkv_p d); all W columns; bias like the weight rows.
 *   merged gate_up (MergedColumnParallelLinear): [gate_r; up_r], src rows [r I/T_r, +I/T_r).
 *   row parallel (RowParallelLinear): all rows, src cols [r W/T_r, +W/T_r); bias full copy;
 *     fp8 scales at T_r > 1 need K a multiple of 128 T_r.
 *   vocab (VocabParallelEmbedding / ParallelLMHead): Vp = round_up(V, 64), local row i is
 *     global row r Vp/T_r + i; global rows >= V are padding. A tied lm_head is the embedding
 *     module itself (one slot).
 *   replicated (norms, q_norm / k_norm, router): full copy.
 *   MoE (FusedMoE): w13 (E_l, 2 I_p, W), w2 (E_l, H rows, W/T_m); local expert i is global
 *     expert rf_moe_local_expert(E, rc, i); gate rows [0, I_p) and up rows [I_p, 2 I_p) from
 *     src rows [r_m I_p, +I_p); w2 src cols [r_m W/T_m, +W/T_m). EP off: T_m = tp dp,
 *     r_m = dp_rank tp + tp_rank, I_p = I / T_m; EP on: T_m = 1, r_m = 0. FP8 scales:
 *     (E_l, 2 I_p/128, cdiv(H,128)) and (E_l, cdiv(H,128), I_p/128). WNA16 experts are
 *     K-first (vLLM's wna16 FusedMoE layout): each expert block is the transpose of the
 *     checkpoint orientation, w13_weight_packed (E_l, H/8, 2 I_p), w2_weight_packed
 *     (E_l, I_p/8, H), w13_weight_scale (E_l, H/G, 2 I_p), w2_weight_scale (E_l, I_p/G, H):
 *     element (e, k, n) of the slot is checkpoint (row n, column k) of the expert's tensor.
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
 * (a superset: the whole slot, one local expert's block for MoE, every local expert's for a
 * fused [E, N, K] expert tensor). Empty (begin == end)
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
 * Returns the FULL checkpoint tensor `tensor_index` (checkpoint layout, row-major, numel
 * elements) in its inventory dtype, or in the dtype the options' tensor_dtype callback names
 * for it; NULL if it cannot be produced. The bytes are borrowed and must stay valid until the
 * next call or the end of the verification. Called once per run of consecutive slot elements
 * from the same tensor (so possibly more than once per tensor).
 */
typedef const void *(*rf_tensor_bytes_fn)(void *ctx, int tensor_index);

/* A per-tensor dtype: verification, the dtype of the bytes rf_tensor_bytes_fn returns (a
 * checkpoint header's, e.g. BF16 FP8 block scales), asked right after those bytes were
 * fetched (so a callback that learns the dtype while fetching answers right); reassembly, the
 * dtype tensor_done must receive. RF_DTYPE_INVALID: the inventory's dtype. */
typedef rf_dtype_t (*rf_tensor_dtype_fn)(void *ctx, int tensor_index);

/* rocm-fnuz (DESIGN.md 7, 12): the owner's inverse of an e4m3fnuz runtime gives model layout
 * where e4m3fn byte 0x80 (-0.0) became 0x00 (+0.0): not injective. With this flag the byte
 * comparison of an F8_E4M3 slot maps EXPECTED 0x80 to 0x00 before comparing (the actual byte
 * 0x80 is then wrong, since the transform never yields it). Dequantized comparisons need no
 * flag: -0.0 equals +0.0 there. */
#define RF_VERIFY_FP8_FNUZ_ZERO 0x1u
/* fp8-tensor (docs/formats.md): the owner's inverse of a fused module (qkv_proj, gate_up_proj)
 * gives its bytes requantized to the largest shard scale s_max and s_max as every shard's
 * scale (vLLM's requantize_with_max_scale): not injective. With this flag the EXPECTED bytes of
 * such a module's weight slot are requantized the same way (rf_fp8_requant_byte, each shard
 * from its checkpoint scale to the max of the module's checkpoint scales), its scale slot is
 * expected to hold that max everywhere, and the dequantization oracle compares with the
 * requantized checkpoint values. Modules with one shard are compared as stored. */
#define RF_VERIFY_FP8_REQUANT_MAX 0x2u

typedef struct rf_verify_opts {
    unsigned flags;                  /* RF_VERIFY_* */
    rf_tensor_dtype_fn tensor_dtype; /* may be NULL; called with the verification's ctx */
} rf_verify_opts_t;

/*
 * Compares every element of one rollout slot (`slot_bytes`, borrowed, model layout,
 * `slot_nbytes` bytes = numel x element size) with the checkpoint tensors: exact bits of the
 * slot's dtype; padding elements must be all-zero bytes. Expected bytes come in the tensor's
 * dtype (inventory, or opts->tensor_dtype); when that differs from the slot's dtype the only
 * conversion done is the exact BF16 / F16 -> F32 one of FP8 block scales a checkpoint stores
 * in bf16 / fp16 (the loader's rule, DESIGN.md 7); any other pair is RF_ERR_UNSUPPORTED.
 * *mismatches_p (may be NULL) is set to the number of wrong elements whenever the comparison
 * ran (RF_OK or RF_ERR_VERIFY). Errors: RF_ERR_VERIFY naming the module, slot, rank, the first
 * wrong element (slot index, tensor name and global index, or "padding"), expected and actual
 * bits, and the count; RF_ERR_INVALID if slot_nbytes is wrong; RF_ERR_MISSING if tensor_bytes
 * returns NULL; the locator's errors. `opts` may be NULL (no flags, inventory dtypes). Not
 * collective.
 */
rf_status_t rf_verify_slot_ex(const rf_inventory_t *inv, int module, int slot,
                              const rf_rollout_coords_t *rc, const void *slot_bytes,
                              size_t slot_nbytes, rf_tensor_bytes_fn tensor_bytes, void *ctx,
                              const rf_verify_opts_t *opts, uint64_t *mismatches_p, rf_err_t *err);

/* rf_verify_slot_ex with opts NULL. */
rf_status_t rf_verify_slot(const rf_inventory_t *inv, int module, int slot,
                           const rf_rollout_coords_t *rc, const void *slot_bytes,
                           size_t slot_nbytes, rf_tensor_bytes_fn tensor_bytes, void *ctx,
                           uint64_t *mismatches_p, rf_err_t *err);

/*
 * As rf_verify_slot, with the source being the generator at `step` (DESIGN.md section 12):
 * each expected element is rf_gen_value_bits(hash(name), index, step, dtype), computed per
 * element (no tensor is materialized; the name hash is cached per tensor). Quantized slots
 * (F8_E4M3, I32, and FP8 scales) are RF_ERR_UNSUPPORTED here: the generator gives bf16 and the
 * quantizer is not part of the oracle. Not collective.
 */
rf_status_t rf_verify_slot_generator(const rf_inventory_t *inv, int module, int slot,
                                     const rf_rollout_coords_t *rc, const void *slot_bytes,
                                     size_t slot_nbytes, uint64_t step, uint64_t *mismatches_p,
                                     rf_err_t *err);

/* This rank's model-layout bytes of (module, slot), sized as the slot's shape; borrowed until
 * the next call. NULL if the rank does not have it (an error). */
typedef const void *(*rf_slot_bytes_fn)(void *ctx, int module, int slot);

/* The oracle's own scalar dequantizers (DESIGN.md 7), table-free. */
/* e4m3fn: bias 7, no infinities, 0x7F / 0xFF NaN, subnormals m 2^-9. */
float rf_ref_e4m3fn_to_f32(uint8_t b);
/* Signed int4 element k of a row of little-endian int32 words: q = ((word[k/8] >> 4 (k mod 8))
 * & 0xF) - 8. */
int rf_ref_int4_at(const int32_t *words, int64_t k);
/* The oracle's own fp8-tensor requantization (docs/formats.md): the e4m3fn byte nearest to
 * f32(f32(e4m3(q)) s_from) / s_to (fp32), ties to the even byte, saturating at +-448; found by
 * bisection over the 127 finite magnitudes, not by formats/quant.c's bit arithmetic.
 * s_from == s_to returns q; a NaN byte gives 0x00. */
uint8_t rf_ref_fp8_requant(uint8_t q, float s_from, float s_to);

/*
 * The dequantization oracle (DESIGN.md 12: dequantize(runtime) == dequantize(checkpoint)) for
 * one module on one rollout rank. For every quantized weight slot of the module (fp8-block:
 * weight / w13_weight / w2_weight with their *_weight_scale_inv slot; wna16: *weight_packed with
 * *weight_scale), every logical weight element of the rank's local weight is dequantized twice:
 *   rank side: from the rank's model-layout bytes (slot_bytes(ctx, module, slot)), its block or
 *     group scale found by the rank's LOCAL geometry (fp8: local block (n/128, k/128) of the
 *     local scale slot; wna16: local word k/8 and local group k/G, K-first blocks for experts);
 *   checkpoint side: from the expected tensors (tensor_bytes; q from `<P>.weight` /
 *     `<P>.weight_packed` at the element the reference locator names, the scale from
 *     `<P>.weight_scale_inv` block (n/128, k/128) / `<P>.weight_scale` group (n, k/G) by the
 *     GLOBAL coordinates);
 * with fp8 value = e4m3fn(q) x scale, wna16 value = q x scale (scales converted exactly to f32;
 * checkpoint bytes in their inventory dtype or opts->tensor_dtype; opts->flags ignored). Values
 * compare equal when == (so -0.0 equals +0.0) or both NaN. A module without quantized weights
 * checks nothing and returns RF_OK with 0 mismatches. *mismatches_p (may be NULL) counts the
 * unequal elements. Errors: RF_ERR_VERIFY naming module, rank, the first unequal element
 * (checkpoint tensor, flat element index of the logical (N, K) weight, both values) and the
 * count; RF_ERR_MISSING (a callback returned NULL); the locator's errors; RF_ERR_NOMEM. Not
 * collective.
 */
rf_status_t rf_verify_dequant_module(const rf_inventory_t *inv, int module,
                                     const rf_rollout_coords_t *rc, rf_slot_bytes_fn slot_bytes,
                                     rf_tensor_bytes_fn tensor_bytes, void *ctx,
                                     const rf_verify_opts_t *opts, uint64_t *mismatches_p,
                                     rf_err_t *err);

/*
 * The oracle of DeepSeek's absorbed MLA matrices (vLLM MLACommonImpl, formats/format_mla.c
 * computes them in the deferred stage; this is an independent recomputation): derived slot
 * `slot_name` ("W_UK_T" (nh_p, P, Lkv) or "W_UV" (nh_p, Lkv, Dv), in the model dtype) of the
 * kv_b_proj module `module` must equal, element for element, what the rank's LOADED kv_b_proj
 * weight `w` (rows x Lkv row-major in wdt: the model dtype, or F8_E4M3 with its fp32
 * weight_scale_inv `scale` [cdiv(rows, 128), cdiv(Lkv, 128)]) gives: W_UK_T[h][p][l] =
 * W[h (P + Dv) + p][l], W_UV[h][l][j] = W[h (P + Dv) + P + j][l], fp8 dequantized as
 * f32(e4m3(q)) x scale rounded to the model dtype. `got` holds nbytes of the slot. Errors:
 * RF_ERR_VERIFY naming module, slot, the first unequal element and the count; RF_ERR_INVALID
 * for a slot name or size that is not one of these. Not collective.
 */
rf_status_t rf_verify_mla_derived(const rf_inventory_t *inv, int module, const char *slot_name,
                                  const void *w, rf_dtype_t wdt, int64_t rows, const float *scale,
                                  const void *got, uint64_t nbytes, rf_err_t *err);

/* ---- reassembly for --reference ------------------------------------------------------- */

/* Called on engine rank 0 with one reassembled checkpoint tensor (borrowed for the call). */
typedef void (*rf_tensor_done_fn)(void *ctx, int tensor_index, const void *bytes, size_t nbytes);

/*
 * Reassembles every checkpoint tensor of `inv`, in inventory order, from the model-layout
 * slots of the tp x dp rollout ranks of ONE engine (DESIGN.md section 12, --reference).
 * Collective over `engine_comm` (borrowed): every rank of the engine calls it, with rank
 * l = dp_rank tp + tp_rank in engine_comm and its own coordinates `rc`. Each rank contributes
 * the elements its slots hold (found with the reference locator: fp8 weights and block scales,
 * wna16 packed words and group scales, K-first expert slots transposed back); engine rank 0
 * assembles the tensor in checkpoint layout, checks that every element arrived, that replicated
 * copies (k/v heads when tp > nkv, replicated tensors, row-parallel biases, dp replicas) are
 * byte-equal, and that vocab padding rows are zero, then calls tensor_done(ctx, t, bytes,
 * nbytes) on rank 0 only. wna16 `<P>.weight_shape` tensors (no slot) are regenerated on rank 0
 * from the inventory: [N, K] with N, K from `<P>.weight_packed` (N, K/8). Memory: one tensor
 * (plus one rank's contribution) at a time.
 * Errors, the same status on every rank: RF_ERR_VERIFY naming the tensor (replicas differ,
 * missing element, non-zero padding, a target dtype the values do not convert to exactly),
 * RF_ERR_TOPOLOGY (communicator size / rank order does not match tp x dp), RF_ERR_MISSING
 * (slot_bytes returned NULL), RF_ERR_UNSUPPORTED (a target dtype conversion not listed below),
 * RF_ERR_MPI, RF_ERR_NOMEM, the locator's errors. On ranks other than the one that decided, the
 * message says which rank.
 */
rf_status_t rf_reassemble(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                          MPI_Comm engine_comm, rf_slot_bytes_fn slot_bytes,
                          rf_tensor_done_fn tensor_done, void *ctx, rf_err_t *err);

typedef struct rf_reassemble_opts {
    /* Called on engine rank 0 with the reassemble ctx: the dtype tensor_done must receive
     * tensor t in (the checkpoint file's, from its header), or RF_DTYPE_INVALID for the
     * inventory's. Conversions: none when equal; F32 -> BF16 or F16 (FP8 block scales a file
     * stores in bf16 / fp16: the runtime holds them as f32 converted exactly from the file, so
     * the way back is exact too; a value that does not round-trip bit for bit is RF_ERR_VERIFY
     * naming tensor and element); I64 -> I32 (weight_shape stored as int32; out of range is
     * RF_ERR_VERIFY). Any other pair is RF_ERR_UNSUPPORTED. May be NULL. */
    rf_tensor_dtype_fn target_dtype;
} rf_reassemble_opts_t;

/* rf_reassemble with options (`opts` borrowed, may be NULL). Collective over engine_comm. */
rf_status_t rf_reassemble_ex(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                             MPI_Comm engine_comm, rf_slot_bytes_fn slot_bytes,
                             rf_tensor_done_fn tensor_done, void *ctx,
                             const rf_reassemble_opts_t *opts, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_VERIFY_H */
