/*
 * refit formats: the fp8-block (128 x 128) format owners (DESIGN.md section 7).
 *
 * fp8-block (backends triton, cutlass): runtime slots are the model layout byte for byte
 *   (e4m3fn weight, fp32 weight_scale_inv); post-processing is the identity by explicit
 *   opt-in, so every layer plans DIRECT. runtime_to_model is a copy. A DeepSeek kv_b_proj
 *   also holds the absorbed MLA matrices, dequantized in the deferred stage (format_mla.c).
 * fp8-block-fnuz (rocm-fnuz): same shapes, but the runtime holds e4m3fnuz: the weight byte
 *   0x80 (-0.0 in fn, NaN in fnuz) becomes 0x00 and every scale is multiplied by 2 (a fnuz
 *   byte is worth half the fn byte). No view can express a value change: LAYERWISE, with
 *   process_after_loading doing the transform into the original storage. runtime_to_model
 *   divides the scales by 2 and copies the bytes; 0x00 stays 0x00, so a weight that held
 *   0x80 comes back as 0x00 (the transform is not injective): the oracle must apply
 *   rf_e4m3_to_fnuz() to its reference bytes before comparing, or compare dequantized values
 *   with -0.0 == +0.0. Unquantized modules (norms, embeddings, router) stay DIRECT.
 */
#include <string.h>

#include "refit/format.h"
#include "refit/quant.h"
#include "refit/quant_ops.h"

static rf_status_t fp8_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
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

/* fp8-block: the model layout, plus the absorbed MLA matrices of a DeepSeek kv_b_proj,
 * dequantized from its fp8 weight in the deferred stage (formats/format_mla.c) */
static rf_status_t fp8_mla_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                         const rf_slot_shape_t *model, int nmodel,
                                         rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                         rf_err_t *err)
{
    RF_CHECK(fp8_runtime_slots(f, inv, m, model, nmodel, rt, derived, nrt_p, err));
    return rf_mla_derived_slots(inv, m, model, nmodel, rt, derived, nrt_p, err);
}

static bool fp8_identity(const rf_format_t *f, const rf_inventory_t *inv, int m)
{
    (void)f, (void)inv, (void)m;
    return true;
}

static bool fnuz_identity(const rf_format_t *f, const rf_inventory_t *inv, int m)
{
    (void)f;
    return inv->modules[m].quant != RF_QUANT_FP8_BLOCK;
}

static bool is_scale(const rf_slot_shape_t *s)
{
    size_t n = strlen(s->name), k = strlen("weight_scale_inv");
    return n >= k && strcmp(s->name + n - k, "weight_scale_inv") == 0;
}

typedef enum { FP8_COPY_IN, FP8_COPY_OUT, FNUZ_IN, FNUZ_OUT } fp8_dir_t;

/* Device storage: scratch -> slot d2d and the fnuz transform in place with fp8_to_fnuz
 * (IN); slot -> host buffer d2h, then the same host arithmetic as fp8_move (OUT). */
static rf_status_t fp8_move_dev(rf_accel_t *dev, const rf_slot_shape_t *model, void *const *bufs,
                                int nmodel, rf_slot_t *const *rt, fp8_dir_t dir, rf_err_t *err)
{
    bool in = dir == FP8_COPY_IN || dir == FNUZ_IN;
    bool fnuz = dir == FNUZ_IN || dir == FNUZ_OUT;
    for (int i = 0; i < nmodel; i++) {
        uint64_t b = rf_slot_shape_bytes(&model[i]);
        bool w8 = fnuz && model[i].dtype == RF_DTYPE_F8_E4M3;
        bool sc = fnuz && is_scale(&model[i]) && model[i].dtype == RF_DTYPE_F32;
        if (fnuz && is_scale(&model[i]) && !sc)
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "fp8-block-fnuz: %s: runtime scale is %s, "
                              "expected F32",
                              rt[i]->name, rf_dtype_name(model[i].dtype));
        if (!in) {
            RF_CHECK(rf_format_dev_copy(dev, bufs[i], rt[i]->sig.data, b, RF_COPY_D2H, rt[i]->name,
                                        err));
            if (w8)
                for (uint64_t j = 0; j < b; j++)
                    ((uint8_t *)bufs[i])[j] = rf_e4m3_to_fnuz(((const uint8_t *)bufs[i])[j]);
            else if (sc)
                for (uint64_t j = 0; j < b / 4; j++)
                    ((float *)bufs[i])[j] *= 0.5f;
            continue;
        }
        RF_CHECK(
            rf_format_dev_copy(dev, rt[i]->sig.data, bufs[i], b, RF_COPY_D2D, rt[i]->name, err));
        if (w8 || sc) {
            const rf_quant_ops_t *qo = rf_quant_ops_for(dev);
            rf_status_t s =
                !qo ? RF_ERR_UNSUPPORTED
                    : qo->fp8_to_fnuz(dev, w8 ? rt[i]->sig.data : NULL, w8 ? (size_t)b : 0,
                                      sc ? rt[i]->sig.data : NULL, sc ? (size_t)(b / 4) : 0, NULL);
            if (s != RF_OK)
                return rf_err_set(err, s, "fp8-block-fnuz: %s: fp8_to_fnuz on device %d failed",
                                  rt[i]->name, dev->device);
        }
    }
    return RF_OK;
}

static rf_status_t fp8_move(rf_accel_t *dev, const rf_slot_shape_t *model, void *const *bufs,
                            int nmodel, rf_slot_t *const *rt, int nrt, fp8_dir_t dir, rf_err_t *err)
{
    if (nrt < nmodel)
        return rf_err_set(err, RF_ERR_INTERNAL, "fp8-block: %d runtime slots for %d params", nrt,
                          nmodel);
    for (int i = 0; i < nmodel; i++) {
        uint64_t b = rf_slot_shape_bytes(&model[i]);
        if (b != rf_signature_bytes(&rt[i]->sig) || rt[i]->sig.dtype != model[i].dtype)
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "fp8-block: %s holds %llu bytes of %s, model %llu of %s",
                              rt[i]->name, (unsigned long long)rf_signature_bytes(&rt[i]->sig),
                              rf_dtype_name(rt[i]->sig.dtype), (unsigned long long)b,
                              rf_dtype_name(model[i].dtype));
    }
    if (dev != NULL)
        return fp8_move_dev(dev, model, bufs, nmodel, rt, dir, err);
    for (int i = 0; i < nmodel; i++) {
        uint64_t b = rf_slot_shape_bytes(&model[i]);
        bool in = dir == FP8_COPY_IN || dir == FNUZ_IN;
        char *dst = in ? rt[i]->sig.data : bufs[i];
        const char *src = in ? bufs[i] : rt[i]->sig.data;
        bool fnuz = dir == FNUZ_IN || dir == FNUZ_OUT;
        if (fnuz && model[i].dtype == RF_DTYPE_F8_E4M3) {
            for (uint64_t j = 0; j < b; j++)
                ((uint8_t *)dst)[j] = rf_e4m3_to_fnuz(((const uint8_t *)src)[j]);
        } else if (fnuz && is_scale(&model[i]) && model[i].dtype == RF_DTYPE_F32) {
            /* x 2 and / 2 are exact in fp32 (short of overflow / subnormals, which a
             * dequant multiplier of e4m3 data never reaches) */
            const float *s = (const float *)src;
            float *d = (float *)dst;
            for (uint64_t j = 0; j < b / 4; j++)
                d[j] = dir == FNUZ_IN ? s[j] * 2.0f : s[j] * 0.5f;
        } else if (fnuz && is_scale(&model[i])) {
            return rf_err_set(err, RF_ERR_UNSUPPORTED, "fp8-block-fnuz: %s: runtime scale is %s, "
                              "expected F32", rt[i]->name, rf_dtype_name(model[i].dtype));
        } else {
            memcpy(dst, src, b);
        }
    }
    return RF_OK;
}

static rf_status_t fp8_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                               const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                               rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)inv, (void)m;
    return fp8_move(rf_format_device(f), model, bufs, nmodel, rt, nrt, FP8_COPY_IN, err);
}

static rf_status_t fp8_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)inv, (void)m;
    return fp8_move(rf_format_device(f), model, bufs, nmodel, rt, nrt, FP8_COPY_OUT, err);
}

static rf_status_t fnuz_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    bool q = inv->modules[m].quant == RF_QUANT_FP8_BLOCK;
    return fp8_move(rf_format_device(f), model, bufs, nmodel, rt, nrt, q ? FNUZ_IN : FP8_COPY_IN,
                    err);
}

static rf_status_t fnuz_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                 const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                 rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    bool q = inv->modules[m].quant == RF_QUANT_FP8_BLOCK;
    return fp8_move(rf_format_device(f), model, bufs, nmodel, rt, nrt, q ? FNUZ_OUT : FP8_COPY_OUT,
                    err);
}

const rf_format_ops_t rf_format_fp8_block_ops = {
    .name = "fp8-block",
    .runtime_slots = fp8_mla_runtime_slots,
    .identity = fp8_identity,
    .runtime_mapping = NULL,
    .process_after_loading = fp8_process,
    .runtime_to_model = fp8_to_model,
    .compute_derived = rf_mla_compute_derived,
};

const rf_format_ops_t rf_format_fp8_block_fnuz_ops = {
    .name = "fp8-block-fnuz",
    .runtime_slots = fp8_runtime_slots,
    .identity = fnuz_identity,
    .runtime_mapping = NULL,
    .process_after_loading = fnuz_process,
    .runtime_to_model = fnuz_to_model,
    .compute_derived = NULL,
};
