/*
 * refit formats: the wna16 (int4 symmetric, group G) format owners (DESIGN.md section 7,
 * docs/formats.md).
 *
 * wna16 (triton):
 *   - fused-MoE experts: runtime `w13_weight_packed` uint8 (E_l, 2 I_p, H/2), `w2_weight_packed`
 *     uint8 (E_l, H, I_p/2), `w13_weight_scale` (E_l, 2 I_p, H/G), `w2_weight_scale`
 *     (E_l, H, I_p/G), contiguous, N-first. The model layout is K-first (E_l, K/8, N) int32 /
 *     (E_l, K/G, N); runtime_mapping gives it as a view: the uint8 slot reinterpreted as int32
 *     (E_l, N, K/8) with the last two dims swapped, strides (N K/8, 1, K/8); scales likewise.
 *     RUNTIME_VIEW. (process_after_loading, used only if the planner falls back, does the same
 *     transpose as a copy.)
 *   - dense linears: LAYERWISE with refit's tile repack (below), as on marlin.
 * wna16-marlin (marlin): every quantized module LAYERWISE with refit's own deterministic tile
 *   repack; runtime shape == model shape (MoE slots stay K-first int32).
 * Unquantized modules (embeddings, norms, router, modules_to_not_convert) are DIRECT on both.
 * rollout.layout hf (a transformers model, compressed-tensors' CompressedLinear): the runtime is
 * the model layout, every module DIRECT (wna16_identity).
 *
 * The tile repack (not kernel-compatible with any engine; its only purpose is that no strided
 * view can express it): over the last two dims (R, C) of a weight_packed (int32 words) or
 * weight_scale param in model layout, leading dims batched, tiles of 16 rows x 64 columns in
 * row-major tile order; tile (ti, tj) has r0 = 16 ti, c0 = 64 tj, th = min(16, R - r0); model
 * element (r0 + i, c0 + j) goes to flat runtime index
 *     r0 C + c0 th + j th + ((i + j) mod th)
 * (column-major inside the tile, column j rotated down by j). Scales are permuted with the
 * same formula over their own (R, C).
 */
#include <string.h>

#include "refit/format.h"
#include "refit/formats.h"
#include "refit/quant_ops.h"

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* A param the repack / transpose touches: weight_packed or weight_scale of a wna16 module
 * (none under rollout.layout hf: the engine keeps them as stored, so both ways copy). */
static bool wq_param(const rf_inventory_t *inv, int m, const rf_slot_shape_t *s)
{
    return inv->layout != RF_ROLLOUT_LAYOUT_HF && inv->modules[m].quant == RF_QUANT_WNA16 &&
           s->ndim >= 2 &&
           (ends_with(s->name, "weight_packed") || ends_with(s->name, "weight_scale"));
}

static bool is_moe_wq(const rf_inventory_t *inv, int m)
{
    return inv->modules[m].kind == RF_MOD_MOE && inv->modules[m].quant == RF_QUANT_WNA16;
}

/* Last-two-dims transpose of (batch, R, C) into (batch, C, R), element by element. */
static void transpose_last2(void *dst, const void *src, int64_t batch, int64_t R, int64_t C,
                            size_t es)
{
    const char *s = src;
    char *d = dst;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                memcpy(d + (size_t)((b * C + c) * R + r) * es,
                       s + (size_t)((b * R + r) * C + c) * es, es);
}

static int64_t batch_of(const rf_slot_shape_t *s)
{
    int64_t b = 1;
    for (int d = 0; d < s->ndim - 2; d++)
        b *= s->shape[d];
    return b;
}

/* ---- runtime slots -------------------------------------------------------------------- */

static rf_status_t marlin_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                        const rf_slot_shape_t *model, int nmodel,
                                        rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                        rf_err_t *err)
{
    (void)f, (void)inv, (void)m, (void)err;
    for (int i = 0; i < nmodel; i++) {
        rt[i] = model[i];
        derived[i] = false;
    }
    *nrt_p = nmodel;
    return RF_OK;
}

/* Triton MoE: K-first (E_l, A, N) model -> N-first (E_l, N, A') runtime, A' = 4 A bytes for
 * the packed int32 words (uint8 slot), A for scales. */
static rf_status_t triton_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                        const rf_slot_shape_t *model, int nmodel,
                                        rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                        rf_err_t *err)
{
    RF_CHECK(marlin_runtime_slots(f, inv, m, model, nmodel, rt, derived, nrt_p, err));
    if (!is_moe_wq(inv, m))
        return RF_OK;
    for (int i = 0; i < nmodel; i++) {
        const rf_slot_shape_t *s = &model[i];
        if (!s->kfirst || s->ndim != 3)
            return rf_err_set(err, RF_ERR_INTERNAL,
                              "wna16: %s.%s: expected a K-first 3-D model layout",
                              inv->modules[m].name, s->name);
        bool packed = ends_with(s->name, "weight_packed");
        rt[i].kfirst = false;
        rt[i].dtype = packed ? RF_DTYPE_U8 : s->dtype;
        rt[i].shape[1] = s->shape[2];
        rt[i].shape[2] = packed ? s->shape[1] * 4 : s->shape[1];
    }
    return RF_OK;
}

/* rollout.layout hf: the engine is a transformers model whose compressed-tensors linears keep
 * weight_packed / weight_scale as stored (no kernel repack), so every module is the identity;
 * its experts are refused by rf_inventory_apply_layout and marlin by the topology check. */
static bool wna16_identity(const rf_format_t *f, const rf_inventory_t *inv, int m)
{
    (void)f;
    return inv->layout == RF_ROLLOUT_LAYOUT_HF || inv->modules[m].quant != RF_QUANT_WNA16;
}

/* ---- RUNTIME_VIEW (triton experts) ------------------------------------------------------ */

static bool triton_mapping(const rf_format_t *f, const rf_inventory_t *inv, int m,
                           const rf_slot_shape_t *model, int nmodel, rf_slot_t *const *rt,
                           int nrt, rf_view_t *views)
{
    (void)f;
    if (!is_moe_wq(inv, m))
        return false;
    for (int i = 0; i < nmodel; i++) {
        const rf_slot_shape_t *s = &model[i];
        int j = -1;
        for (int k = 0; k < nrt && j < 0; k++) {
            const char *dot = strrchr(rt[k]->name, '.');
            if (!rt[k]->derived && dot != NULL && strcmp(dot + 1, s->name) == 0)
                j = k;
        }
        if (j < 0 || !s->kfirst || s->ndim != 3)
            return false;
        const rf_signature_t *g = &rt[j]->sig;
        bool packed = ends_with(s->name, "weight_packed");
        int64_t E = s->shape[0], A = s->shape[1], N = s->shape[2];
        /* the slot must be what triton_runtime_slots made: contiguous (E, N, A') */
        if (g->data == NULL || g->ndim != 3 || !rf_signature_contiguous(g) ||
            g->dtype != (packed ? RF_DTYPE_U8 : s->dtype) || g->shape[0] != E ||
            g->shape[1] != N || g->shape[2] != (packed ? 4 * A : A))
            return false;
        rf_view_t *v = &views[i];
        memset(v, 0, sizeof(*v));
        v->data = g->data;
        v->dtype = s->dtype; /* I32 for the packed words, the model dtype for scales */
        v->ndim = 3;
        v->shape[0] = E;
        v->shape[1] = A;
        v->shape[2] = N;
        v->stride[0] = N * A;
        v->stride[1] = 1;
        v->stride[2] = A;
        v->runtime_slot = j;
    }
    return true;
}

/* ---- LAYERWISE --------------------------------------------------------------------------- */

/* One param on device storage: to_runtime works device to device (scratch -> slot) with
 * copy / copy_rows (transpose) / wna16_repack; to the model it works into device scratch and
 * copies device to host (model buffers are host memory). */
static rf_status_t wna16_move_dev(rf_accel_t *dev, const rf_inventory_t *inv, int m,
                                  const rf_slot_shape_t *s, void *buf, rf_slot_t *slot, bool triton,
                                  bool to_runtime, rf_err_t *err)
{
    uint64_t b = rf_slot_shape_bytes(s);
    size_t es = rf_dtype_size(s->dtype);
    if (!wq_param(inv, m, s))
        return rf_format_dev_copy(dev, to_runtime ? slot->sig.data : buf,
                                  to_runtime ? buf : slot->sig.data, b,
                                  to_runtime ? RF_COPY_D2D : RF_COPY_D2H, slot->name, err);
    void *tmp = NULL;
    if (!to_runtime) {
        rf_status_t as = dev->ops->alloc(dev, (size_t)b, &tmp);
        if (as != RF_OK)
            return rf_err_set(err, as, "wna16: %s: no device scratch of %llu bytes on device %d",
                              slot->name, (unsigned long long)b, dev->device);
    }
    void *dst = to_runtime ? slot->sig.data : tmp;
    const void *src = to_runtime ? buf : slot->sig.data;
    int64_t R = s->shape[s->ndim - 2], C = s->shape[s->ndim - 1], B = batch_of(s);
    rf_status_t st;
    if (triton && is_moe_wq(inv, m)) /* model (B, R, C) <-> runtime (B, C, R) */
        st = rf_format_dev_transpose(dev, dst, src, B, to_runtime ? R : C, to_runtime ? C : R,
                                     s->dtype, slot->name, err);
    else if ((st = rf_quant_ops_for(dev) ? rf_quant_ops_for(dev)->wna16_repack(
                       dev, dst, src, B, R, C, es, !to_runtime, NULL)
                                         : RF_ERR_UNSUPPORTED) != RF_OK)
        rf_err_set(err, st, "wna16: %s: repack on device %d failed", slot->name, dev->device);
    if (st == RF_OK && !to_runtime)
        st = rf_format_dev_copy(dev, buf, tmp, b, RF_COPY_D2H, slot->name, err);
    if (tmp != NULL)
        dev->ops->free(dev, tmp);
    return st;
}

static rf_status_t wna16_move(rf_accel_t *dev, const rf_inventory_t *inv, int m,
                              const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                              rf_slot_t *const *rt, int nrt, bool triton, bool to_runtime,
                              rf_err_t *err)
{
    if (nrt < nmodel)
        return rf_err_set(err, RF_ERR_INTERNAL, "wna16: %d runtime slots for %d params", nrt,
                          nmodel);
    for (int i = 0; i < nmodel; i++) {
        const rf_slot_shape_t *s = &model[i];
        uint64_t b = rf_slot_shape_bytes(s);
        size_t es = rf_dtype_size(s->dtype);
        if (b != rf_signature_bytes(&rt[i]->sig) || rt[i]->sig.data == NULL)
            return rf_err_set(err, RF_ERR_MISMATCH, "wna16: %s holds %llu bytes, model %llu",
                              rt[i]->name, (unsigned long long)rf_signature_bytes(&rt[i]->sig),
                              (unsigned long long)b);
        if (dev != NULL) {
            RF_CHECK(wna16_move_dev(dev, inv, m, s, bufs[i], rt[i], triton, to_runtime, err));
            continue;
        }
        void *dst = to_runtime ? rt[i]->sig.data : bufs[i];
        const void *src = to_runtime ? bufs[i] : rt[i]->sig.data;
        if (!wq_param(inv, m, s)) {
            memcpy(dst, src, b);
            continue;
        }
        int64_t R = s->shape[s->ndim - 2], C = s->shape[s->ndim - 1], B = batch_of(s);
        if (triton && is_moe_wq(inv, m)) /* model (B, R, C) <-> runtime (B, C, R) */
            transpose_last2(dst, src, B, to_runtime ? R : C, to_runtime ? C : R, es);
        else
            rf_wna16_repack(dst, src, B, R, C, es, !to_runtime);
    }
    return RF_OK;
}

static rf_status_t triton_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                  const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                  rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    return wna16_move(rf_format_device(f), inv, m, model, bufs, nmodel, rt, nrt, true, true, err);
}

static rf_status_t triton_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                   const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                   rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    return wna16_move(rf_format_device(f), inv, m, model, bufs, nmodel, rt, nrt, true, false, err);
}

static rf_status_t marlin_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                  const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                  rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    return wna16_move(rf_format_device(f), inv, m, model, bufs, nmodel, rt, nrt, false, true, err);
}

static rf_status_t marlin_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                   const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                   rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    return wna16_move(rf_format_device(f), inv, m, model, bufs, nmodel, rt, nrt, false, false, err);
}

const rf_format_ops_t rf_format_wna16_ops = {
    .name = "wna16",
    .runtime_slots = triton_runtime_slots,
    .identity = wna16_identity,
    .runtime_mapping = triton_mapping,
    .process_after_loading = triton_process,
    .runtime_to_model = triton_to_model,
    .compute_derived = NULL,
};

const rf_format_ops_t rf_format_wna16_marlin_ops = {
    .name = "wna16-marlin",
    .runtime_slots = marlin_runtime_slots,
    .identity = wna16_identity,
    .runtime_mapping = NULL,
    .process_after_loading = marlin_process,
    .runtime_to_model = marlin_to_model,
    .compute_derived = NULL,
};

/* ---- (quantization, backend) -> owner ------------------------------------------------- */

const rf_format_ops_t *rf_format_for(rf_quant_t quant, int backend)
{
    if (backend < RF_BACKEND_TRITON || backend > RF_BACKEND_MARLIN)
        return NULL;
    switch (quant) {
    case RF_QUANT_NONE:
        return rf_format_lookup("none");
    case RF_QUANT_FP8_BLOCK:
        if (backend == RF_BACKEND_TRITON || backend == RF_BACKEND_CUTLASS)
            return &rf_format_fp8_block_ops;
        if (backend == RF_BACKEND_ROCM_FNUZ)
            return &rf_format_fp8_block_fnuz_ops;
        return NULL;
    case RF_QUANT_WNA16:
        if (backend == RF_BACKEND_TRITON)
            return &rf_format_wna16_ops;
        if (backend == RF_BACKEND_MARLIN)
            return &rf_format_wna16_marlin_ops;
        return NULL;
    case RF_QUANT_FP8_TENSOR:
    case RF_QUANT_FP8_CHANNEL:
        if (backend != RF_BACKEND_TRITON && backend != RF_BACKEND_CUTLASS)
            return NULL;
        return quant == RF_QUANT_FP8_TENSOR ? &rf_format_fp8_tensor_ops
                                            : &rf_format_fp8_channel_ops;
    }
    return NULL;
}
