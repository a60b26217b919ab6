/*
 * refit formats: the absorbed MLA matrices, DeepSeek-V3 / Moonlight's weight-derived state
 * (DESIGN.md section 8.6, the deferred stage).
 *
 * vLLM's MLA attention (MLACommonImpl.process_weights_after_loading) takes kv_b_proj's
 * weight, dequantized to the activation dtype when it is quantized, as (Lkv, nh_p, P + Dv)
 * after a transpose, splits it into W_UK (P columns per head) and W_UV (Dv), and keeps
 *   W_UK_T = W_UK.permute(1, 2, 0): (nh_p, P, Lkv), element [h][p][l] = W[h (P + Dv) + p][l]
 *   W_UV   = W_UV.transpose(0, 1):  (nh_p, Lkv, Dv), element [h][l][j] = W[h (P + Dv) + P + j][l]
 * where W is the rank's kv_b_proj slice (nh_p (P + Dv), Lkv) in checkpoint orientation. Both
 * are derived slots of the kv_b_proj module, written only by the deferred stage, once per
 * update after every tensor of the layer arrived, whatever the layer's reload mode.
 *
 * An unquantized kv_b_proj gives its own elements (a permutation, bit exact; on a device, row
 * copies there). An fp8-block one gives bf16 / f16 / f32(e4m3(w) x weight_scale_inv[row /
 * 128][col / 128]) rounded to nearest even, in the model's dtype (vLLM's
 * get_and_maybe_dequant_weights): dequantized where the slots live (rf_quant_ops_t
 * fp8_block_dequant, one kernel on a device; issue 18: it was a host round trip per layer),
 * then the same permutation. The owners "none" and
 * "fp8-block" add the slots and run the stage; the planner calls nothing MLA-specific.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/format.h"
#include "refit/quant.h"
#include "refit/quant_ops.h"

bool rf_mla_is_kv_b(const rf_inventory_t *inv, int m)
{
    const char *sfx = ".self_attn.kv_b_proj";
    const char *n = inv->modules[m].name;
    size_t ln = strlen(n), ls = strlen(sfx);
    return inv->cfg.family == RF_FAMILY_DEEPSEEK_V3 && inv->modules[m].kind == RF_MOD_COLUMN &&
           ln > ls && strcmp(n + ln - ls, sfx) == 0;
}

rf_status_t rf_mla_derived_slots(const rf_inventory_t *inv, int m, const rf_slot_shape_t *model,
                                 int nmodel, rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                 rf_err_t *err)
{
    const rf_model_config_t *c = &inv->cfg;
    int64_t P = c->qk_nope_head_dim, Dv = c->v_head_dim, Lkv = c->kv_lora_rank;
    if (!rf_mla_is_kv_b(inv, m))
        return RF_OK;
    if (*nrt_p + 2 > RF_MODULE_MAX_SLOTS || nmodel < 1 || model[0].ndim != 2)
        return rf_err_set(err, RF_ERR_INTERNAL, "mla: %s: no room for its derived slots",
                          inv->modules[m].name);
    int64_t rows = model[0].shape[0];
    if (rows % (P + Dv) != 0 || model[0].shape[1] != Lkv)
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "mla: %s: local weight [%lld, %lld] is not whole heads of %lld rows x "
                          "kv_lora_rank %lld",
                          inv->modules[m].name, (long long)rows, (long long)model[0].shape[1],
                          (long long)(P + Dv), (long long)Lkv);
    int64_t nh_p = rows / (P + Dv);
    rf_dtype_t dt = c->dtype;
    for (int s = 0; s < 2; s++) {
        rf_slot_shape_t *d = &rt[*nrt_p];
        memset(d, 0, sizeof(*d));
        snprintf(d->name, sizeof(d->name), "%s", s == 0 ? "W_UK_T" : "W_UV");
        d->dtype = dt;
        d->ndim = 3;
        d->shape[0] = nh_p;
        d->shape[1] = s == 0 ? P : Lkv;
        d->shape[2] = s == 0 ? Lkv : Dv;
        derived[*nrt_p] = true;
        (*nrt_p)++;
    }
    return RF_OK;
}

/* One element of W (row n, column l), es bytes: the model dtype's bits as they are. */
static void mla_elem(const unsigned char *w, int64_t Lkv, size_t es, int64_t n, int64_t l,
                     unsigned char *out)
{
    memcpy(out, w + (size_t)(n * Lkv + l) * es, es);
}

/* The fp8 kv_b_proj weight w (rows x Lkv e4m3, its 128 x 128 block scales sc in f32) as the
 * model dtype: rf_quant_ops_t.fp8_block_dequant on the accelerator the slots live on (its
 * rule: formats/quant.c rf_fp8_block_dequant_elem). *out_p: a buffer of that accelerator's
 * memory (device: its alloc, the caller frees; host: malloc). Synchronized before returning. */
static rf_status_t mla_dequant_on(rf_accel_t *a, const rf_inventory_t *inv, int m,
                                  const rf_slot_t *w, const rf_slot_t *sc, void *out,
                                  rf_err_t *err)
{
    const rf_quant_ops_t *q = rf_quant_ops_for(a);
    int64_t rows = w->sig.shape[0], Lkv = w->sig.shape[1];
    if (sc->sig.ndim != 2 || sc->sig.dtype != RF_DTYPE_F32 ||
        sc->sig.shape[0] != (rows + 127) / 128 || sc->sig.shape[1] != (Lkv + 127) / 128)
        return rf_err_set(err, RF_ERR_MISMATCH, "mla: %s: weight_scale_inv is not the f32 "
                          "[%lld, %lld] of its %lld x %lld weight's 128 x 128 blocks",
                          inv->modules[m].name, (long long)((rows + 127) / 128),
                          (long long)((Lkv + 127) / 128), (long long)rows, (long long)Lkv);
    if (q == NULL || q->fp8_block_dequant == NULL)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "mla: %s: no fp8-block dequantization on "
                          "the %s accelerator", inv->modules[m].name, a->ops->name);
    rf_status_t st = q->fp8_block_dequant(a, w->sig.data, rows, Lkv, Lkv, sc->sig.data,
                                          sc->sig.shape[1], out, inv->cfg.dtype, Lkv, NULL);
    if (st == RF_OK)
        st = rf_accel_sync(a);
    if (st != RF_OK)
        return rf_err_set(err, st, "mla: dequantizing %s on %s device %d failed",
                          inv->modules[m].name, a->ops->name, a->device);
    return RF_OK;
}

static rf_status_t mla_device_dequant(rf_accel_t *dev, const rf_inventory_t *inv, int m,
                                      const rf_slot_t *w, const rf_slot_t *sc, void **out_p,
                                      rf_err_t *err)
{
    size_t b = (size_t)(w->sig.shape[0] * w->sig.shape[1]) * rf_dtype_size(inv->cfg.dtype);
    if (dev->ops->alloc(dev, b ? b : 1, out_p) != RF_OK) {
        *out_p = NULL;
        return rf_err_set(err, RF_ERR_NOMEM, "mla: %s: %zu bytes of %s device %d memory for "
                          "the dequantized kv_b_proj", inv->modules[m].name, b, dev->ops->name,
                          dev->device);
    }
    return mla_dequant_on(dev, inv, m, w, sc, *out_p, err);
}

static rf_status_t mla_host_dequant(const rf_inventory_t *inv, int m, const rf_slot_t *w,
                                    const rf_slot_t *sc, unsigned char **out_p, rf_err_t *err)
{
    rf_accel_t *host = NULL;
    size_t b = (size_t)(w->sig.shape[0] * w->sig.shape[1]) * rf_dtype_size(inv->cfg.dtype);
    *out_p = malloc(b + 1);
    if (*out_p == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "mla: out of memory");
    rf_status_t st = rf_accel_open("host", 0, &host);
    if (st != RF_OK)
        return rf_err_set(err, st, "mla: %s: the host accelerator did not open",
                          inv->modules[m].name);
    st = mla_dequant_on(host, inv, m, w, sc, *out_p, err);
    rf_accel_close(host);
    return st;
}

/*
 * An unquantized kv_b_proj on a device: both derived slots are permutations of its elements,
 * so they are written as 2 nh_p strided row copies in one copy_rows_batch on the device (no
 * host round trip): per head h, W_UK_T[h] = rows h (P + Dv) .. + P of W as they are (P x Lkv),
 * and W_UV[h] = the next Dv rows transposed (source (j, l) to destination element l Dv + j).
 * Synchronized before returning, as the host path's copies are.
 */
static rf_status_t mla_device_permute(rf_accel_t *dev, const rf_inventory_t *inv, int m,
                                      const void *wdata, rf_slot_t *uk, rf_slot_t *uv,
                                      int64_t nh_p, rf_err_t *err)
{
    const rf_model_config_t *c = &inv->cfg;
    int64_t P = c->qk_nope_head_dim, Dv = c->v_head_dim, Lkv = c->kv_lora_rank;
    size_t es = rf_dtype_size(c->dtype);
    uint64_t nuk = (uint64_t)nh_p * P * Lkv, nuv = (uint64_t)nh_p * Lkv * Dv;
    if (rf_signature_bytes(&uk->sig) != nuk * es || rf_signature_bytes(&uv->sig) != nuv * es)
        return rf_err_set(err, RF_ERR_MISMATCH, "mla: %s: derived slots are not %llu + %llu "
                          "elements", inv->modules[m].name, (unsigned long long)nuk,
                          (unsigned long long)nuv);
    rf_accel_rows_t *r = calloc((size_t)(2 * nh_p) + 1, sizeof(*r));
    if (r == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "mla: out of memory");
    for (int64_t h = 0; h < nh_p; h++) {
        const char *head = (const char *)wdata + (size_t)(h * (P + Dv) * Lkv) * es;
        rf_accel_rows_t *k = &r[2 * h], *v = &r[2 * h + 1];
        k->dst.data = uk->sig.data; /* [h][p][l] */
        k->dst.esize = es;
        k->dst.dtype = c->dtype;
        k->dst.row_stride = Lkv;
        k->dst.col_stride = 1;
        k->dst.expert_stride = P * Lkv;
        k->expert = h;
        k->src = head;
        k->src_dtype = c->dtype;
        k->src_pitch = Lkv;
        k->rows = P;
        k->cols = Lkv;
        v->dst.data = uv->sig.data; /* [h][l][j] <- W[h (P + Dv) + P + j][l] */
        v->dst.esize = es;
        v->dst.dtype = c->dtype;
        v->dst.row_stride = 1;
        v->dst.col_stride = Dv;
        v->dst.expert_stride = Lkv * Dv;
        v->expert = h;
        v->src = head + (size_t)(P * Lkv) * es;
        v->src_dtype = c->dtype;
        v->src_pitch = Lkv;
        v->rows = Dv;
        v->cols = Lkv;
    }
    rf_status_t st = dev->ops->copy_rows_batch(dev, r, (size_t)(2 * nh_p), NULL);
    if (st == RF_OK)
        st = rf_accel_sync(dev);
    free(r);
    if (st != RF_OK)
        return rf_err_set(err, st, "mla: deriving W_UK_T / W_UV of %s on %s device %d failed",
                          inv->modules[m].name, dev->ops->name, dev->device);
    return RF_OK;
}

rf_status_t rf_mla_compute_derived(rf_format_t *f, const rf_inventory_t *inv, int m,
                                   rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    const rf_model_config_t *c = &inv->cfg;
    int64_t P = c->qk_nope_head_dim, Dv = c->v_head_dim, Lkv = c->kv_lora_rank;
    rf_slot_t *w = NULL, *sc = NULL, *uk = NULL, *uv = NULL;
    if (!rf_mla_is_kv_b(inv, m))
        return RF_OK;
    for (int i = 0; i < nrt; i++) {
        const char *dot = strrchr(rt[i]->name, '.');
        const char *nm = dot ? dot + 1 : rt[i]->name;
        if (rt[i]->derived && strcmp(nm, "W_UK_T") == 0)
            uk = rt[i];
        else if (rt[i]->derived && strcmp(nm, "W_UV") == 0)
            uv = rt[i];
        else if (!rt[i]->derived && strcmp(nm, "weight") == 0)
            w = rt[i];
        else if (!rt[i]->derived && strcmp(nm, "weight_scale_inv") == 0)
            sc = rt[i];
    }
    if (w == NULL || uk == NULL || uv == NULL || w->sig.ndim != 2)
        return rf_err_set(err, RF_ERR_INTERNAL, "mla: %s lacks its weight or derived slots",
                          inv->modules[m].name);
    bool fp8 = w->sig.dtype == RF_DTYPE_F8_E4M3;
    if (fp8 && (sc == NULL || (c->dtype != RF_DTYPE_BF16 && c->dtype != RF_DTYPE_F16 &&
                               c->dtype != RF_DTYPE_F32)))
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "mla: %s: an fp8 kv_b_proj needs its weight_scale_inv and a bf16, f16 "
                          "or f32 model dtype",
                          inv->modules[m].name);
    int64_t rows = w->sig.shape[0], nh_p = rows / (P + Dv);
    size_t es = rf_dtype_size(c->dtype);
    if (!fp8 && w->sig.dtype != c->dtype)
        return rf_err_set(err, RF_ERR_MISMATCH, "mla: %s is %s, the model dtype %s", w->name,
                          rf_dtype_name(w->sig.dtype), rf_dtype_name(c->dtype));
    rf_accel_t *dev = rf_format_device(f);
    if (dev != NULL) { /* on the device: fp8 dequantized there first, then the permutation */
        void *deq = NULL;
        rf_status_t ds = fp8 ? mla_device_dequant(dev, inv, m, w, sc, &deq, err) : RF_OK;
        if (ds == RF_OK)
            ds = mla_device_permute(dev, inv, m, fp8 ? deq : w->sig.data, uk, uv, nh_p, err);
        if (deq != NULL)
            dev->ops->free(dev, deq);
        if (ds == RF_OK)
            f->derived_runs++;
        return ds;
    }
    unsigned char *wb = w->sig.data, *wown = NULL;
    rf_status_t st = fp8 ? mla_host_dequant(inv, m, w, sc, &wown, err) : RF_OK;
    if (wown != NULL)
        wb = wown;
    uint64_t nuk = (uint64_t)nh_p * P * Lkv, nuv = (uint64_t)nh_p * Lkv * Dv;
    unsigned char *out = st == RF_OK ? malloc((size_t)(nuk + nuv) * es + 1) : NULL;
    if (st == RF_OK && out == NULL)
        st = rf_err_set(err, RF_ERR_NOMEM, "mla: out of memory");
    if (st == RF_OK) {
        unsigned char *o = out;
        for (int64_t h = 0; h < nh_p; h++) /* W_UK_T [h][p][l] */
            for (int64_t p = 0; p < P; p++)
                for (int64_t l = 0; l < Lkv; l++, o += es)
                    mla_elem(wb, Lkv, es, h * (P + Dv) + p, l, o);
        for (int64_t h = 0; h < nh_p; h++) /* W_UV [h][l][j] */
            for (int64_t l = 0; l < Lkv; l++)
                for (int64_t j = 0; j < Dv; j++, o += es)
                    mla_elem(wb, Lkv, es, h * (P + Dv) + P + j, l, o);
        if (rf_signature_bytes(&uk->sig) != nuk * es || rf_signature_bytes(&uv->sig) != nuv * es)
            st = rf_err_set(err, RF_ERR_MISMATCH,
                            "mla: %s: derived slots are not %llu + %llu "
                            "elements",
                            inv->modules[m].name, (unsigned long long)nuk, (unsigned long long)nuv);
    }
    if (st == RF_OK) {
        memcpy(uk->sig.data, out, (size_t)(nuk * es));
        memcpy(uv->sig.data, out + nuk * es, (size_t)(nuv * es));
    }
    free(out);
    free(wown);
    if (st == RF_OK)
        f->derived_runs++;
    return st;
}
