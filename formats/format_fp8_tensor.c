/*
 * refit formats: the fp8 per-tensor and per-channel format owners (docs/formats.md, "fp8-tensor
 * and fp8-channel"): compressed-tensors "float-quantized" checkpoints ("FP8 dynamic") served
 * by vLLM's CompressedTensorsW8A8Fp8 / Fp8LinearMethod on triton and cutlass.
 *
 * Model layout (what vLLM's create_weights makes, per rollout rank): `weight` e4m3fn
 * (N_local, K); fp8-tensor `weight_scale` fp32 (S,), one per fused shard (PerTensorScaleParameter,
 * S = 3 for qkv_proj, 2 for gate_up_proj, 1 otherwise); fp8-channel `weight_scale` fp32
 * (N_local, 1) (ChannelQuantScaleParameter).
 *
 * Runtime (process_weights_after_loading):
 *   fp8-channel: the weight becomes weight.t(), a (K, N) view of the same storage, and the
 *     scale is kept: no byte changes, so the runtime slots are the model layout and the owner
 *     opts in to DIRECT for every module (runtime_to_model is a copy).
 *   fp8-tensor: process_fp8_weight_tensor_strategy -> requantize_with_max_scale: the fused
 *     weight is requantized shard by shard to the largest of its S scales and the scale becomes
 *     that one value. A module with one shard (o_proj, down_proj) keeps its bytes: DIRECT. A
 *     fused module (qkv_proj, gate_up_proj) holds runtime `weight_scale` (1,) = s_max and shards
 *     whose scale was smaller hold requantized bytes: no view expresses that, LAYERWISE.
 *     The requantization is rf_fp8_requant_byte (fp32, docs/formats.md); runtime_to_model
 *     copies the bytes back and writes s_max for every shard: not injective (the oracles
 *     compare with the checkpoint under the same requantization, RF_VERIFY_FP8_REQUANT_MAX).
 * Unquantized modules (norms, embeddings, lm_head) are DIRECT under both.
 */
#include <string.h>

#include "refit/format.h"
#include "refit/quant.h"
#include "refit/quant_ops.h"

static bool is_scale(const rf_slot_shape_t *s)
{
    return strcmp(s->name, "weight_scale") == 0;
}

/* Shards of a fused per-tensor module that requantizes: S > 1 scales. */
static bool requantizes(const rf_inventory_t *inv, int m)
{
    return inv->modules[m].quant == RF_QUANT_FP8_TENSOR && inv->modules[m].nlinears > 1;
}

/*
 * Row counts of the fused shards of module m whose local weight has `rows` rows (vLLM's
 * logical_widths): gate_up [I_p, I_p]; qkv [nh_p d, nkv_p d, nkv_p d], where the rollout tp
 * size T is the one divisor of nh with (nh/T + 2 max(1, nkv/T)) d == rows (that sum falls
 * strictly with T, so at most one matches). Returns the shard count, -1 if none fits.
 */
static int shard_rows(const rf_inventory_t *inv, int m, int64_t rows, int64_t out[3])
{
    const rf_module_t *mod = &inv->modules[m];
    const rf_model_config_t *c = &inv->cfg;
    if (mod->kind == RF_MOD_MERGED) {
        out[0] = out[1] = rows / 2;
        return rows % 2 == 0 ? 2 : -1;
    }
    if (mod->kind == RF_MOD_QKV) {
        int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, d = c->head_dim;
        for (int64_t T = 1; T <= nh; T++) {
            int64_t kvp = nkv >= T ? nkv / T : 1;
            if (nh % T == 0 && (nh / T + 2 * kvp) * d == rows) {
                out[0] = nh / T * d;
                out[1] = out[2] = kvp * d;
                return 3;
            }
        }
        return -1;
    }
    out[0] = rows;
    return 1;
}

static rf_status_t tensor_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                        const rf_slot_shape_t *model, int nmodel,
                                        rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                        rf_err_t *err)
{
    (void)f, (void)err;
    for (int i = 0; i < nmodel; i++) {
        rt[i] = model[i];
        derived[i] = false;
        /* the one max scale the fused module runs with (a 0-d Parameter in vLLM, 4 bytes) */
        if (requantizes(inv, m) && is_scale(&model[i]))
            rt[i].shape[0] = 1;
    }
    *nrt_p = nmodel;
    return RF_OK;
}

static bool tensor_identity(const rf_format_t *f, const rf_inventory_t *inv, int m)
{
    (void)f;
    return !requantizes(inv, m);
}

static rf_status_t channel_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
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

static bool channel_identity(const rf_format_t *f, const rf_inventory_t *inv, int m)
{
    (void)f, (void)inv, (void)m;
    return true;
}

/* The weight and scale params of a module (-1 when absent). */
static void find_params(const rf_slot_shape_t *model, int nmodel, int *w_p, int *s_p)
{
    *w_p = *s_p = -1;
    for (int i = 0; i < nmodel; i++) {
        if (strcmp(model[i].name, "weight") == 0 && model[i].dtype == RF_DTYPE_F8_E4M3)
            *w_p = i;
        else if (is_scale(&model[i]))
            *s_p = i;
    }
}

static rf_status_t check_rt(const rf_format_t *f, const rf_slot_shape_t *model, int nmodel,
                            rf_slot_t *const *rt, int nrt, bool fused, rf_err_t *err)
{
    if (nrt < nmodel)
        return rf_err_set(err, RF_ERR_INTERNAL, "%s: %d runtime slots for %d params", f->ops->name,
                          nrt, nmodel);
    for (int i = 0; i < nmodel; i++) {
        uint64_t b = fused && is_scale(&model[i]) ? sizeof(float) : rf_slot_shape_bytes(&model[i]);
        if (b != rf_signature_bytes(&rt[i]->sig) || rt[i]->sig.dtype != model[i].dtype)
            return rf_err_set(
                err, RF_ERR_MISMATCH, "%s: %s holds %llu bytes of %s, the owner expects %llu of %s",
                f->ops->name, rt[i]->name, (unsigned long long)rf_signature_bytes(&rt[i]->sig),
                rf_dtype_name(rt[i]->sig.dtype), (unsigned long long)b,
                rf_dtype_name(model[i].dtype));
    }
    return RF_OK;
}

/* Model-layout buffers -> runtime slots as they are (or back), host or device memory. */
static rf_status_t copy_all(rf_accel_t *dev, const rf_slot_shape_t *model, void *const *bufs,
                            int nmodel, rf_slot_t *const *rt, bool in, int skip, rf_err_t *err)
{
    for (int i = 0; i < nmodel; i++) {
        uint64_t b = rf_slot_shape_bytes(&model[i]);
        if (i == skip)
            continue;
        if (dev != NULL)
            RF_CHECK(rf_format_dev_copy(dev, in ? rt[i]->sig.data : bufs[i],
                                        in ? bufs[i] : rt[i]->sig.data, b,
                                        in ? RF_COPY_D2D : RF_COPY_D2H, rt[i]->name, err));
        else if (in)
            memcpy(rt[i]->sig.data, bufs[i], b);
        else
            memcpy(bufs[i], rt[i]->sig.data, b);
    }
    return RF_OK;
}

static rf_status_t plain_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                 const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                 rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)inv, (void)m;
    RF_CHECK(check_rt(f, model, nmodel, rt, nrt, false, err));
    return copy_all(rf_format_device(f), model, bufs, nmodel, rt, true, -1, err);
}

static rf_status_t plain_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                  const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                  rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)inv, (void)m;
    RF_CHECK(check_rt(f, model, nmodel, rt, nrt, false, err));
    return copy_all(rf_format_device(f), model, bufs, nmodel, rt, false, -1, err);
}

/*
 * requantize_with_max_scale into the runtime slots: the weight goes over as it is, then every
 * shard whose scale is below s_max is requantized in place (rf_fp8_requant_byte; on a device,
 * the accelerator's fp8_requant), and the runtime scale becomes s_max.
 */
static rf_status_t tensor_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                  const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                  rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    rf_accel_t *dev = rf_format_device(f);
    int wi, si;
    int64_t sh[3];
    float s[3], smax = 0.0f;
    if (!requantizes(inv, m))
        return plain_process(f, inv, m, model, bufs, nmodel, rt, nrt, err);
    find_params(model, nmodel, &wi, &si);
    int ns = wi >= 0 && si >= 0 ? shard_rows(inv, m, model[wi].shape[0], sh) : -1;
    if (ns < 0 || ns != model[si].shape[0])
        return rf_err_set(err, RF_ERR_INTERNAL,
                          "fp8-tensor: %s: cannot split its weight rows into its %lld shard "
                          "scales",
                          inv->modules[m].name, si >= 0 ? (long long)model[si].shape[0] : 0LL);
    RF_CHECK(check_rt(f, model, nmodel, rt, nrt, true, err));
    RF_CHECK(copy_all(dev, model, bufs, nmodel, rt, true, si, err));
    if (dev != NULL)
        RF_CHECK(rf_format_dev_copy(dev, s, bufs[si], (uint64_t)ns * sizeof(float), RF_COPY_D2H,
                                    rt[si]->name, err));
    else
        memcpy(s, bufs[si], (size_t)ns * sizeof(float));
    for (int k = 0; k < ns; k++)
        smax = s[k] > smax ? s[k] : smax;
    const rf_quant_ops_t *qo = dev != NULL ? rf_quant_ops_for(dev) : NULL;
    uint8_t *w = rt[wi]->sig.data;
    int64_t K = model[wi].shape[1], row0 = 0;
    for (int k = 0; k < ns; row0 += sh[k], k++) {
        size_t n = (size_t)(sh[k] * K);
        uint8_t *p = w + (size_t)(row0 * K);
        if (s[k] == smax)
            continue; /* requantizing to the same scale is the identity */
        if (dev == NULL) {
            for (size_t j = 0; j < n; j++)
                p[j] = rf_fp8_requant_byte(p[j], s[k], smax);
            continue;
        }
        rf_status_t qs = qo ? qo->fp8_requant(dev, p, n, s[k], smax, NULL) : RF_ERR_UNSUPPORTED;
        if (qs != RF_OK)
            return rf_err_set(err, qs, "fp8-tensor: %s: fp8_requant on %s device %d failed",
                              rt[wi]->name, dev->ops->name, dev->device);
    }
    if (dev == NULL) {
        memcpy(rt[si]->sig.data, &smax, sizeof(smax));
        return RF_OK;
    }
    rf_status_t cs = dev->ops->copy(dev, rt[si]->sig.data, &smax, sizeof(smax), RF_COPY_H2D, NULL);
    if (cs == RF_OK) /* smax lives on this stack frame */
        cs = rf_accel_sync(dev);
    if (cs != RF_OK)
        return rf_err_set(err, cs, "fp8-tensor: %s: writing the max scale on %s device %d failed",
                          rt[si]->name, dev->ops->name, dev->device);
    return RF_OK;
}

/* The model layout a requantized module stands for: its bytes, s_max for every shard. */
static rf_status_t tensor_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                   const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                   rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    rf_accel_t *dev = rf_format_device(f);
    int wi, si;
    float smax;
    if (!requantizes(inv, m))
        return plain_to_model(f, inv, m, model, bufs, nmodel, rt, nrt, err);
    find_params(model, nmodel, &wi, &si);
    if (si < 0)
        return rf_err_set(err, RF_ERR_INTERNAL, "fp8-tensor: %s has no weight_scale",
                          inv->modules[m].name);
    RF_CHECK(check_rt(f, model, nmodel, rt, nrt, true, err));
    RF_CHECK(copy_all(dev, model, bufs, nmodel, rt, false, si, err));
    if (dev != NULL)
        RF_CHECK(rf_format_dev_copy(dev, &smax, rt[si]->sig.data, sizeof(smax), RF_COPY_D2H,
                                    rt[si]->name, err));
    else
        memcpy(&smax, rt[si]->sig.data, sizeof(smax));
    for (int64_t k = 0; k < model[si].shape[0]; k++)
        ((float *)bufs[si])[k] = smax;
    return RF_OK;
}

const rf_format_ops_t rf_format_fp8_tensor_ops = {
    .name = "fp8-tensor",
    .runtime_slots = tensor_runtime_slots,
    .identity = tensor_identity,
    .runtime_mapping = NULL,
    .process_after_loading = tensor_process,
    .runtime_to_model = tensor_to_model,
    .compute_derived = NULL,
};

const rf_format_ops_t rf_format_fp8_channel_ops = {
    .name = "fp8-channel",
    .runtime_slots = channel_runtime_slots,
    .identity = channel_identity,
    .runtime_mapping = NULL,
    .process_after_loading = plain_process,
    .runtime_to_model = plain_to_model,
    .compute_derived = NULL,
};
