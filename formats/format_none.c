/*
 * refit: the unquantized format owner ("none") and the test-only owners.
 *
 * none: runtime layout == model layout, post-processing is the identity: DIRECT; a DeepSeek
 *   kv_b_proj also holds the absorbed MLA matrices, recomputed in the deferred stage
 *   (formats/format_mla.c).
 * test-transpose: every 2-D weight of a qkv / gate_up / o / down module is stored transposed
 *   in runtime storage, so no layout-preserving reload is possible: LAYERWISE, with
 *   process_after_loading doing the transpose into the original storage.
 * test-derived: like none, plus one derived fp32 buffer per attention (qkv) layer holding the
 *   sum of the weight's elements, recomputed once per update in the deferred stage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/format.h"
#include "refit/formats.h"

rf_status_t rf_format_dev_transpose(rf_accel_t *accel, void *dst, const void *src, int64_t batch,
                                    int64_t R, int64_t C, rf_dtype_t dt, const char *what,
                                    rf_err_t *err)
{
    size_t es = rf_dtype_size(dt);
    for (int64_t b = 0; b < batch; b++) {
        /* source (r, c) at src + (b R C + r C + c) es -> dst + (b C R + c R + r) es */
        rf_accel_rows_t r;
        memset(&r, 0, sizeof(r));
        r.dst.data = dst;
        r.dst.esize = es;
        r.dst.dtype = dt;
        r.dst.row_stride = 1;
        r.dst.col_stride = R;
        r.dst.expert_stride = R * C;
        r.expert = b;
        r.src = (const char *)src + (size_t)(b * R * C) * es;
        r.src_dtype = dt;
        r.src_pitch = C;
        r.rows = R;
        r.cols = C;
        rf_status_t s = accel->ops->copy_rows(accel, &r, NULL);
        if (s != RF_OK)
            return rf_err_set(err, s, "format: %s: transpose on %s device %d failed", what,
                              accel->ops->name, accel->device);
    }
    return RF_OK;
}

static rf_status_t none_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
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

/* none's runtime slots: the model layout, plus the absorbed MLA matrices of a DeepSeek
 * kv_b_proj (formats/format_mla.c) */
static rf_status_t none_mla_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                          const rf_slot_shape_t *model, int nmodel,
                                          rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                          rf_err_t *err)
{
    RF_CHECK(none_runtime_slots(f, inv, m, model, nmodel, rt, derived, nrt_p, err));
    return rf_mla_derived_slots(inv, m, model, nmodel, rt, derived, nrt_p, err);
}

static bool none_identity(const rf_format_t *f, const rf_inventory_t *inv, int m)
{
    (void)f, (void)inv, (void)m;
    return true;
}

static rf_status_t copy_model_runtime(rf_accel_t *dev, const rf_slot_shape_t *model,
                                      void *const *bufs, int nmodel, rf_slot_t *const *rt, int nrt,
                                      bool to_runtime, rf_err_t *err)
{
    if (nrt < nmodel)
        return rf_err_set(err, RF_ERR_INTERNAL, "format: %d runtime slots for %d params", nrt,
                          nmodel);
    for (int i = 0; i < nmodel; i++) {
        uint64_t b = rf_slot_shape_bytes(&model[i]);
        if (b != rf_signature_bytes(&rt[i]->sig))
            return rf_err_set(err, RF_ERR_MISMATCH, "format: %s holds %llu bytes, model %llu",
                              rt[i]->name, (unsigned long long)rf_signature_bytes(&rt[i]->sig),
                              (unsigned long long)b);
        if (dev != NULL)
            RF_CHECK(rf_format_dev_copy(dev, to_runtime ? rt[i]->sig.data : bufs[i],
                                        to_runtime ? bufs[i] : rt[i]->sig.data, b,
                                        to_runtime ? RF_COPY_D2D : RF_COPY_D2H, rt[i]->name, err));
        else if (to_runtime)
            memcpy(rt[i]->sig.data, bufs[i], b);
        else
            memcpy(bufs[i], rt[i]->sig.data, b);
    }
    return RF_OK;
}

static rf_status_t none_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)inv, (void)m;
    return copy_model_runtime(rf_format_device(f), model, bufs, nmodel, rt, nrt, true, err);
}

static rf_status_t none_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                 const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                                 rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)inv, (void)m;
    return copy_model_runtime(rf_format_device(f), model, bufs, nmodel, rt, nrt, false, err);
}

static const rf_format_ops_t rf_format_none_ops = {
    .name = "none",
    .runtime_slots = none_mla_runtime_slots,
    .identity = none_identity,
    .runtime_mapping = NULL,
    .process_after_loading = none_process,
    .runtime_to_model = none_to_model,
    .compute_derived = rf_mla_compute_derived,
};

/* ---- test-transpose ------------------------------------------------------------------ */

static bool transposed(const rf_inventory_t *inv, int m, const rf_slot_shape_t *s)
{
    rf_module_kind_t k = inv->modules[m].kind;
    return s->ndim == 2 && (k == RF_MOD_QKV || k == RF_MOD_MERGED || k == RF_MOD_ROW);
}

static rf_status_t tr_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                    const rf_slot_shape_t *model, int nmodel,
                                    rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                    rf_err_t *err)
{
    RF_CHECK(none_runtime_slots(f, inv, m, model, nmodel, rt, derived, nrt_p, err));
    for (int i = 0; i < nmodel; i++)
        if (transposed(inv, m, &model[i])) {
            rt[i].shape[0] = model[i].shape[1];
            rt[i].shape[1] = model[i].shape[0];
        }
    return RF_OK;
}

static bool tr_identity(const rf_format_t *f, const rf_inventory_t *inv, int m)
{
    (void)f;
    rf_module_kind_t k = inv->modules[m].kind;
    return !(k == RF_MOD_QKV || k == RF_MOD_MERGED || k == RF_MOD_ROW);
}

static void transpose_bytes(void *dst, const void *src, int64_t rows, int64_t cols, size_t es)
{
    const char *s = src;
    char *d = dst;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            memcpy(d + ((size_t)c * rows + r) * es, s + ((size_t)r * cols + c) * es, es);
}

static rf_status_t tr_move(const rf_inventory_t *inv, int m, const rf_slot_shape_t *model,
                           void *const *bufs, int nmodel, rf_slot_t *const *rt, int nrt,
                           bool to_runtime, rf_err_t *err)
{
    if (nrt < nmodel)
        return rf_err_set(err, RF_ERR_INTERNAL, "format: %d runtime slots for %d params", nrt,
                          nmodel);
    for (int i = 0; i < nmodel; i++) {
        uint64_t b = rf_slot_shape_bytes(&model[i]);
        size_t es = rf_dtype_size(model[i].dtype);
        if (b != rf_signature_bytes(&rt[i]->sig))
            return rf_err_set(err, RF_ERR_MISMATCH, "format: %s size differs from the model's",
                              rt[i]->name);
        if (!transposed(inv, m, &model[i]))
            memcpy(to_runtime ? rt[i]->sig.data : bufs[i],
                   to_runtime ? bufs[i] : rt[i]->sig.data, b);
        else if (to_runtime)
            transpose_bytes(rt[i]->sig.data, bufs[i], model[i].shape[0], model[i].shape[1], es);
        else
            transpose_bytes(bufs[i], rt[i]->sig.data, model[i].shape[1], model[i].shape[0], es);
    }
    return RF_OK;
}

static rf_status_t tr_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                              const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                              rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)f;
    return tr_move(inv, m, model, bufs, nmodel, rt, nrt, true, err);
}

static rf_status_t tr_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                               const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                               rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)f;
    return tr_move(inv, m, model, bufs, nmodel, rt, nrt, false, err);
}

static const rf_format_ops_t rf_format_test_transpose_ops = {
    .name = "test-transpose",
    .runtime_slots = tr_runtime_slots,
    .identity = tr_identity,
    .runtime_mapping = NULL,
    .process_after_loading = tr_process,
    .runtime_to_model = tr_to_model,
    .compute_derived = NULL,
    .host_only = true, /* a test owner: the GPU path is covered by the real owners */
};

/* ---- test-derived -------------------------------------------------------------------- */

static rf_status_t dv_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                    const rf_slot_shape_t *model, int nmodel,
                                    rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                    rf_err_t *err)
{
    RF_CHECK(none_runtime_slots(f, inv, m, model, nmodel, rt, derived, nrt_p, err));
    if (inv->modules[m].kind == RF_MOD_QKV && nmodel < RF_MODULE_MAX_SLOTS) {
        rf_slot_shape_t *d = &rt[nmodel];
        memset(d, 0, sizeof(*d));
        snprintf(d->name, sizeof(d->name), "derived_sum");
        d->dtype = RF_DTYPE_F32;
        d->ndim = 1;
        d->shape[0] = 1;
        derived[nmodel] = true;
        *nrt_p = nmodel + 1;
    }
    return RF_OK;
}

static rf_status_t dv_compute(rf_format_t *f, const rf_inventory_t *inv, int m,
                              rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    float sum = 0.0f;
    rf_slot_t *w = NULL, *d = NULL;
    (void)inv;
    for (int i = 0; i < nrt; i++) {
        if (rt[i]->derived)
            d = rt[i];
        else if (w == NULL)
            w = rt[i];
    }
    if (d == NULL || w == NULL)
        return rf_err_set(err, RF_ERR_INTERNAL, "test-derived: module %d lacks its slots", m);
    rf_accel_t *dev = rf_format_device(f);
    const uint16_t *x = w->sig.data;
    uint16_t *host = NULL;
    uint64_t n = rf_signature_bytes(&w->sig) / 2;
    if (dev != NULL) { /* the weight to the host, the sum back to the device */
        host = malloc((size_t)n * 2 + 2);
        if (host == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "test-derived: out of memory");
        rf_status_t s = rf_format_dev_copy(dev, host, x, n * 2, RF_COPY_D2H, w->name, err);
        if (s != RF_OK) {
            free(host);
            return s;
        }
        x = host;
    }
    for (uint64_t i = 0; i < n; i++)
        sum += rf_bf16_to_f32(x[i]);
    free(host);
    if (dev != NULL) {
        rf_status_t s = dev->ops->copy(dev, d->sig.data, &sum, sizeof(sum), RF_COPY_H2D, NULL);
        if (s == RF_OK)
            s = rf_accel_sync(dev);
        if (s != RF_OK)
            return rf_err_set(err, s, "test-derived: writing %s on device %d failed", d->name,
                              dev->device);
    } else {
        *(float *)d->sig.data = sum;
    }
    f->derived_runs++;
    return RF_OK;
}

static const rf_format_ops_t rf_format_test_derived_ops = {
    .name = "test-derived",
    .runtime_slots = dv_runtime_slots,
    .identity = none_identity,
    .runtime_mapping = NULL,
    .process_after_loading = none_process,
    .runtime_to_model = none_to_model,
    .compute_derived = dv_compute,
};

const rf_format_ops_t *rf_format_lookup(const char *name)
{
    static const rf_format_ops_t *all[] = {&rf_format_none_ops, &rf_format_test_transpose_ops,
                                           &rf_format_test_derived_ops, &rf_format_fp8_block_ops,
                                           &rf_format_fp8_block_fnuz_ops, &rf_format_wna16_ops,
                                           &rf_format_wna16_marlin_ops, &rf_format_fp8_tensor_ops,
                                           &rf_format_fp8_channel_ops};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(all[i]->name, name) == 0)
            return all[i];
    return NULL;
}

const char *rf_format_names(void)
{
    return "none, test-transpose, test-derived, fp8-block, fp8-block-fnuz, wna16, wna16-marlin, "
           "fp8-tensor, fp8-channel";
}
