/*
 * refit: rollout loader arithmetic (DESIGN.md section 5), the fast path.
 *
 * Each module kind reduces to "source rows [lo, lo + n) of the checkpoint tensor, columns
 * [c0, c0 + nc), go to destination rows starting at dst_off": copy_rows() intersects that with
 * the arriving piece and copies whole-row runs.
 */
#include <stdbool.h>
#include <string.h>

#include "refit/loader.h"

rf_dst_t rf_dst_contiguous(void *data, const rf_slot_shape_t *s)
{
    rf_dst_t d;
    memset(&d, 0, sizeof(d));
    d.data = data;
    d.esize = rf_dtype_size(s->dtype);
    d.dtype = s->dtype;
    d.col_stride = 1;
    if (s->kfirst && s->ndim >= 2) {
        /* (.., K', N): checkpoint row n is model column n, checkpoint column k model row k */
        d.row_stride = 1;
        d.col_stride = s->shape[s->ndim - 1];
        if (s->ndim >= 3)
            d.expert_stride = s->shape[s->ndim - 2] * s->shape[s->ndim - 1];
    } else if (s->ndim <= 1) {
        d.row_stride = 1;
    } else if (s->ndim == 2) {
        d.row_stride = s->shape[1];
    } else {
        d.row_stride = s->shape[s->ndim - 1];
        d.expert_stride = s->shape[s->ndim - 2] * s->shape[s->ndim - 1];
    }
    return d;
}

/*
 * Source rows [src_lo, src_lo + nrows) (checkpoint indices), columns [c0, c0 + nc) of rows
 * that are src_row_elems wide, land at destination rows dst_off + (g - src_lo). The piece
 * holds rows [rb, re).
 */
static float half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    union {
        uint32_t u;
        float f;
    } v;
    if (exp == 0) {
        float f = (float)man / 16777216.0f; /* 2^-24 */
        return sign ? -f : f;
    }
    v.u = sign | (exp == 31 ? 0x7f800000u | (man << 13) : ((exp + 112u) << 23) | (man << 13));
    return v.f;
}

/* One element, converted exactly from src_dtype to the destination's dtype. */
static void convert_elem(char *d, rf_dtype_t ddt, const char *s, rf_dtype_t sdt)
{
    float f;
    uint16_t h;
    memcpy(&h, s, 2);
    f = sdt == RF_DTYPE_BF16 ? rf_bf16_to_f32(h) : half_to_f32(h);
    if (ddt == RF_DTYPE_F32)
        memcpy(d, &f, 4);
}

/*
 * Source rows [src_lo, src_lo + nrows) (checkpoint indices), columns [c0, c0 + nc) of rows
 * that are src_row_elems wide, land at destination rows dst_off + (g - src_lo). The piece
 * holds rows [rb, re) in sdt.
 */
static uint64_t copy_rows(const rf_dst_t *dst, char *base, const char *src, rf_dtype_t sdt,
                          uint64_t rb, uint64_t re, int64_t src_lo, int64_t nrows,
                          int64_t dst_off, int64_t c0, int64_t nc, int64_t src_row_elems)
{
    int64_t lo = (int64_t)rb > src_lo ? (int64_t)rb : src_lo;
    int64_t hi = (int64_t)re < src_lo + nrows ? (int64_t)re : src_lo + nrows;
    size_t es = dst->esize, ses = rf_dtype_size(sdt);
    /* only FP8 block scales convert (2-byte bf16 / f16 into 4-byte f32 slots) */
    bool same = ses == es || dst->dtype != RF_DTYPE_F32;
    if (hi <= lo || nc <= 0)
        return 0;
    if (same)
        ses = es;
    const char *s = src + ((size_t)(lo - (int64_t)rb) * src_row_elems + c0) * ses;
    char *d = base + (size_t)(dst_off + (lo - src_lo)) * dst->row_stride * es;
    int64_t n = hi - lo;
    if (same && dst->col_stride == 1) {
        if (nc == src_row_elems && dst->row_stride == nc) {
            memcpy(d, s, (size_t)n * nc * es);
        } else {
            for (int64_t i = 0; i < n; i++)
                memcpy(d + (size_t)i * dst->row_stride * es, s + (size_t)i * src_row_elems * es,
                       (size_t)nc * es);
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            for (int64_t c = 0; c < nc; c++) {
                char *de = d + ((size_t)i * dst->row_stride + (size_t)c * dst->col_stride) * es;
                const char *se = s + ((size_t)i * src_row_elems + c) * ses;
                if (same)
                    memcpy(de, se, es);
                else
                    convert_elem(de, dst->dtype, se, sdt);
            }
    }
    return (uint64_t)(n * nc);
}

/* Logical rows [lo, lo + n) at dst_off, in the tensor's own row units (128 for FP8 scales). */
static void to_units(int64_t u, int64_t *lo, int64_t *n, int64_t *off)
{
    if (u == 1)
        return;
    int64_t end = (*lo + *n + u - 1) / u;
    *lo /= u;
    *off /= u;
    *n = end - *lo;
}

uint64_t rf_load_piece(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t local_expert, const rf_dst_t *dst, const void *src,
                       rf_dtype_t sdt, uint64_t row_begin, uint64_t row_end)
{
    const rf_model_config_t *c = &inv->cfg;
    const rf_tensor_t *t = &inv->tensors[tensor];
    const rf_module_t *m = &inv->modules[t->module];
    int64_t T = rc->tp, r = rc->tp_rank, u = rf_tensor_row_unit(t);
    int64_t rows = (int64_t)rf_tensor_rows(t);
    int64_t width = t->ndim >= 2 ? (int64_t)(t->numel / (uint64_t)rows) : 1;
    bool is_bias = t->ndim == 1;
    int64_t lo = 0, n = rows, off = 0;

    if (t->slot < 0)
        return 0; /* wna16 weight_shape: checked by the planner, never stored */
    switch (m->kind) {
    case RF_MOD_REPLICATED:
        break;
    case RF_MOD_VOCAB: {
        int64_t per = rf_vocab_padded(c->vocab_size) / T;
        lo = r * per < c->vocab_size ? r * per : c->vocab_size;
        int64_t hi = (r + 1) * per < c->vocab_size ? (r + 1) * per : c->vocab_size;
        n = hi - lo;
        break;
    }
    case RF_MOD_QKV: {
        int64_t d = c->head_dim, nh = c->num_attention_heads, nkv = c->num_key_value_heads;
        int64_t nh_p = nh / T, rep = T > nkv ? T / nkv : 1, nkv_p = nkv >= T ? nkv / T : 1;
        if (t->shard == 0) {
            lo = r * nh_p * d;
            n = nh_p * d;
            off = 0;
        } else {
            lo = (r / rep) * nkv_p * d;
            n = nkv_p * d;
            off = t->shard == 1 ? nh_p * d : (nh_p + nkv_p) * d;
        }
        to_units(u, &lo, &n, &off);
        break;
    }
    case RF_MOD_MERGED: {
        int64_t Ip = (m->n / 2) / T;
        lo = r * Ip;
        n = Ip;
        off = t->shard * Ip;
        to_units(u, &lo, &n, &off);
        break;
    }
    case RF_MOD_ROW:
        if (is_bias)
            return copy_rows(dst, dst->data, src, sdt, row_begin, row_end, 0, rows, 0, 0, 1, 1);
        return copy_rows(dst, dst->data, src, sdt, row_begin, row_end, 0, rows, 0,
                         r * (width / T), width / T, width);
    case RF_MOD_MOE: {
        int64_t Tm = rc->ep > 1 ? 1 : (int64_t)rc->tp * rc->dp;
        int64_t rm = rc->ep > 1 ? 0 : (int64_t)rc->dp_rank * rc->tp + rc->tp_rank;
        int64_t Ip = m->n / Tm;
        char *base = dst->data + (size_t)local_expert * dst->expert_stride * dst->esize;
        if (t->split == RF_SPLIT_ROWS) { /* w13: gate rows [0, Ip), up rows [Ip, 2 Ip) */
            lo = rm * Ip;
            n = Ip;
            off = t->shard * Ip;
            to_units(u, &lo, &n, &off);
            return copy_rows(dst, base, src, sdt, row_begin, row_end, lo, n, off, 0, width,
                             width);
        }
        /* w2: columns [r_m I_p, (r_m + 1) I_p) in the tensor's own column units */
        return copy_rows(dst, base, src, sdt, row_begin, row_end, 0, rows, 0, rm * (width / Tm),
                         width / Tm, width);
    }
    }
    return copy_rows(dst, dst->data, src, sdt, row_begin, row_end, lo, n, off, 0, width, width);
}

uint64_t rf_load_vocab_pad(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int module,
                           const rf_dst_t *dst)
{
    const rf_module_t *m = &inv->modules[module];
    int64_t V = inv->cfg.vocab_size, per = rf_vocab_padded(V) / rc->tp;
    int64_t first = V - rc->tp_rank * per;
    if (m->kind != RF_MOD_VOCAB)
        return 0;
    first = first < 0 ? 0 : (first > per ? per : first);
    for (int64_t row = first; row < per; row++) {
        char *d = dst->data + (size_t)row * dst->row_stride * dst->esize;
        if (dst->col_stride == 1)
            memset(d, 0, (size_t)m->k * dst->esize);
        else
            for (int64_t c = 0; c < m->k; c++)
                memset(d + (size_t)c * dst->col_stride * dst->esize, 0, dst->esize);
    }
    return (uint64_t)(per - first);
}
