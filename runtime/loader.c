/*
 * refit: rollout loader arithmetic (DESIGN.md section 5), the fast path.
 *
 * Each module kind reduces to "source rows [lo, lo + n) of the checkpoint tensor, columns
 * [c0, c0 + nc), go to destination rows starting at dst_off": piece_rows() intersects that with
 * the arriving piece and describes the write as one rf_accel_rows_t; the write itself is the
 * accelerator's copy_rows (the host ops here: whole-row memcpy runs; the planner uses the
 * storage's accelerator, device to device on a GPU rank).
 */
#include <stdbool.h>
#include <string.h>

#include "refit/accel.h"
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

rf_accel_dst_t rf_accel_dst_from(const rf_dst_t *d)
{
    rf_accel_dst_t a;
    a.data = d->data;
    a.esize = d->esize;
    a.dtype = d->dtype;
    a.row_stride = d->row_stride;
    a.col_stride = d->col_stride;
    a.expert_stride = d->expert_stride;
    return a;
}

/*
 * Source rows [src_lo, src_lo + nrows) (checkpoint indices), columns [c0, c0 + nc) of rows
 * that are src_row_elems wide, land at destination rows dst_off + (g - src_lo) of expert
 * `expert`. The piece holds rows [rb, re) in sdt. Fills the row-copy descriptor (a
 * destination whose rows are one contiguous run becomes a single row) and returns whether
 * the intersection is non-empty.
 */
/* The piece holds columns [cb, ce) of its rows, src_pitch elements apart (full-width pieces:
 * cb = 0, ce = pitch = src_row_elems). */
static bool rect_rows(const rf_dst_t *dst, int64_t expert, const char *src, rf_dtype_t sdt,
                      uint64_t rb, uint64_t re, int64_t src_lo, int64_t nrows, int64_t dst_off,
                      int64_t c0, int64_t nc, int64_t src_row_elems, int64_t cb, int64_t ce,
                      int64_t src_pitch, rf_accel_rows_t *out);

static bool piece_rows(const rf_dst_t *dst, int64_t expert, const char *src, rf_dtype_t sdt,
                       uint64_t rb, uint64_t re, int64_t src_lo, int64_t nrows, int64_t dst_off,
                       int64_t c0, int64_t nc, int64_t src_row_elems, rf_accel_rows_t *out)
{
    return rect_rows(dst, expert, src, sdt, rb, re, src_lo, nrows, dst_off, c0, nc, src_row_elems,
                     0, src_row_elems, src_row_elems, out);
}

static bool rect_rows(const rf_dst_t *dst, int64_t expert, const char *src, rf_dtype_t sdt,
                      uint64_t rb, uint64_t re, int64_t src_lo, int64_t nrows, int64_t dst_off,
                      int64_t c0, int64_t nc, int64_t src_row_elems, int64_t cb, int64_t ce,
                      int64_t src_pitch, rf_accel_rows_t *out)
{
    int64_t lo = (int64_t)rb > src_lo ? (int64_t)rb : src_lo;
    int64_t hi = (int64_t)re < src_lo + nrows ? (int64_t)re : src_lo + nrows;
    size_t es = dst->esize, ses = rf_dtype_size(sdt);
    /* only FP8 block scales convert (2-byte bf16 / f16 into 4-byte f32 slots) */
    bool same = ses == es || dst->dtype != RF_DTYPE_F32;
    int64_t C0 = c0 > cb ? c0 : cb, C1 = c0 + nc < ce ? c0 + nc : ce;
    if (hi <= lo || nc <= 0 || C1 <= C0)
        return false;
    if (same)
        ses = es;
    memset(out, 0, sizeof(*out));
    out->dst = rf_accel_dst_from(dst);
    out->expert = expert;
    out->dst_row = dst_off + (lo - src_lo);
    out->dst_col = C0 - c0;
    out->src = src + ((size_t)(lo - (int64_t)rb) * src_pitch + (C0 - cb)) * ses;
    out->src_dtype = same ? dst->dtype : sdt;
    out->src_pitch = src_pitch;
    out->rows = hi - lo;
    out->cols = C1 - C0;
    if (same && dst->col_stride == 1 && nc == src_row_elems && dst->row_stride == nc &&
        cb == 0 && ce == nc && src_pitch == nc) {
        /* whole rows, contiguous on both sides: one run */
        out->cols = out->rows * nc;
        out->src_pitch = out->cols;
        out->dst_row = 0;
        out->dst_col = (dst_off + (lo - src_lo)) * nc;
        out->rows = 1;
    }
    return true;
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

/* Slot w13 of a FusedMoE module, fed by a fused [E, 2I, H] tensor (GraniteMoE input_linear;
 * rollout.layout hf keeps its checkpoint name, input_linear.weight). */
static bool fused_w13(const rf_module_t *m, const rf_tensor_t *t)
{
    return rf_tensor_all_experts(t) && t->slot >= 0 &&
           (strncmp(m->slot_names[t->slot], "w13_", 4) == 0 ||
            strncmp(m->slot_names[t->slot], "input_linear.", 13) == 0);
}

/* This rank's need of a tensor: source rows [lo, lo + n), columns [c0, c0 + nc) of rows
 * `width` elements wide, landing at destination row off. false: nothing stored. */
typedef struct need {
    int64_t lo, n, off, c0, nc, width;
} need_t;

static bool need_of(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                    need_t *o)
{
    const rf_model_config_t *c = &inv->cfg;
    const rf_tensor_t *t = &inv->tensors[tensor];
    const rf_module_t *m = &inv->modules[t->module];
    int64_t T = rc->tp, r = rc->tp_rank, u = rf_tensor_row_unit(t);
    int64_t rows = (int64_t)rf_tensor_rows(t);
    int64_t width = t->ndim >= 2 && rows ? (int64_t)(t->numel / (uint64_t)rows) : 1;
    bool is_bias = t->ndim == 1;
    int64_t lo = 0, n = rows, off = 0, c0 = 0, nc = width;

    if (t->slot < 0)
        return false; /* wna16 weight_shape: checked by the planner, never stored */
    if (t->param == RF_PARAM_TENSOR_SCALE) {
        /* one value per linear, the same on every rank, at element `shard` of the module's
         * (S,) slot (vLLM's PerTensorScaleParameter: one per logical width) */
        *o = (need_t){0, 1, t->shard, 0, 1, 1};
        return true;
    }
    if (t->param == RF_PARAM_CHANNEL_SCALE && m->kind == RF_MOD_ROW) {
        /* a row-parallel linear keeps every output row: a full copy, like its bias */
        *o = (need_t){0, rows, 0, 0, 1, 1};
        return true;
    }
    switch (m->kind) {
    case RF_MOD_REPLICATED:
        break;
    case RF_MOD_REPLICATED_LINEAR:
        /* a full copy; shard s lands after the rows (in this param's own units) of the
         * module's earlier shards of the same param: [q_a_proj; kv_a_proj_with_mqa] */
        for (int i = 0; i < m->ntensors; i++) {
            const rf_tensor_t *o = &inv->tensors[m->tensors[i]];
            if (o->param == t->param && o->shard < t->shard)
                off += (int64_t)rf_tensor_rows(o);
        }
        break;
    case RF_MOD_VOCAB: {
        int64_t per = inv->layout == RF_ROLLOUT_LAYOUT_HF ? rf_vocab_rows_hf(c->vocab_size, T)
                                                          : rf_vocab_padded(c->vocab_size) / T;
        lo = r * per < c->vocab_size ? r * per : c->vocab_size;
        int64_t hi = (r + 1) * per < c->vocab_size ? (r + 1) * per : c->vocab_size;
        n = hi - lo;
        break;
    }
    case RF_MOD_QKV: {
        /* q heads of d rows: nh, or 2 nh for qwen3_next's gated q (m->n = (2 nh + 2 nkv) d) */
        int64_t d = c->head_dim, nkv = c->num_key_value_heads, nh = m->n / d - 2 * nkv;
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
    case RF_MOD_COLUMN:
        if (m->col_heads > 0) { /* whole heads, replicated over rep ranks when T > heads */
            int64_t h = m->col_heads, hp = h >= T ? h / T : 1, rep = T > h ? T / h : 1;
            n = hp * (m->n / h);
            lo = (r / rep) * n;
        } else {
            lo = r * (m->n / T);
            n = m->n / T;
        }
        to_units(u, &lo, &n, &off);
        break;
    case RF_MOD_QKV_HEADS:
        /* heads [r nh_p, (r+1) nh_p): contiguous rows as stored; heads_runs() places them */
        lo = r * (m->n / T);
        n = m->n / T;
        break;
    case RF_MOD_SECTIONS:
        /* one section: its contiguous rows; several: every row (sections_runs() picks them) */
        if (m->nsec == 1) {
            lo = r * (rows / T);
            n = rows / T;
        }
        break;
    case RF_MOD_MERGED: {
        int64_t Ip = (m->n / 2) / T;
        lo = r * Ip;
        n = Ip;
        off = t->shard * Ip;
        to_units(u, &lo, &n, &off);
        break;
    }
    case RF_MOD_ROW:
        if (is_bias) {
            nc = 1;
            width = 1;
            break;
        }
        c0 = r * (width / T);
        nc = width / T;
        break;
    case RF_MOD_MOE: {
        int64_t Tm = rc->ep > 1 ? 1 : (int64_t)rc->tp * rc->dp;
        int64_t rm = rc->ep > 1 ? 0 : (int64_t)rc->dp_rank * rc->tp + rc->tp_rank;
        int64_t Ip = m->n / Tm;
        if (rf_tensor_all_experts(t)) {
            /* [E, N, K] as E N rows: the rank's experts [first, first + E_l) are rows
             * [first N, (first + E_l) N), landing from destination row 0 on (w13 (E_l, 2 I_p,
             * H) and w2 (E_l, H, I_p) are E_l N_p consecutive rows). w2: columns
             * [r_m I_p, +I_p) of each. w13 with T_m > 1 needs 2 E_l blocks of I_p rows of
             * those (fused_runs); its need is the whole experts' rows. */
            int64_t E = c->num_experts, N = t->shape[1];
            int64_t first = rf_moe_local_expert(E, rc, 0);
            lo = first * N;
            n = rf_moe_local_count(E, rc) * N;
            if (!fused_w13(m, t)) {
                c0 = rm * (width / Tm);
                nc = width / Tm;
            }
            break;
        }
        if (t->split == RF_SPLIT_ROWS) { /* w13: gate rows [0, Ip), up rows [Ip, 2 Ip) */
            lo = rm * Ip;
            n = Ip;
            off = t->shard * Ip;
            to_units(u, &lo, &n, &off);
            break;
        }
        /* w2: columns [r_m I_p, (r_m + 1) I_p) in the tensor's own column units */
        c0 = rm * (width / Tm);
        nc = width / Tm;
        break;
    }
    }
    *o = (need_t){lo, n, off, c0, nc, width};
    return true;
}

bool rf_load_need(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                  int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1)
{
    need_t nd;
    const rf_tensor_t *t = &inv->tensors[tensor];
    if (t->expert >= 0 && rf_moe_local_index(inv->cfg.num_experts, rc, t->expert) < 0)
        return false;
    if (!need_of(inv, rc, tensor, &nd) || nd.n <= 0 || nd.nc <= 0)
        return false;
    *r0 = nd.lo;
    *r1 = nd.lo + nd.n;
    *c0 = nd.c0;
    *c1 = nd.c0 + nd.nc;
    return true;
}

bool rf_load_need_rows(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t *r0, int64_t *r1)
{
    need_t nd;
    if (!need_of(inv, rc, tensor, &nd))
        return false;
    *r0 = nd.lo;
    *r1 = nd.lo + nd.n;
    return true;
}

/*
 * GPT-NeoX's query_key_value (RF_MOD_QKV_HEADS). The rank's source rows [base, base + n) hold
 * its nh_p heads as stored, [q_h; k_h; v_h] of d rows each: local block k = 3 h' + s (head h',
 * shard s) goes to destination rows [(s nh_p + h') d, +d), vLLM's [q_r; k_r; v_r]. A piece
 * becomes at most five copies: the partial block at each end, and per shard one strided copy
 * of its whole blocks (d rows of W elements as one row of d W, 3 d W apart in the source) when
 * the piece is full width into contiguous rows; otherwise one copy per block (-1 when that
 * needs more than RF_LOAD_MAX_RUNS).
 */
static int heads_runs(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, const need_t *nd,
                      const rf_dst_t *dst, const char *src, rf_dtype_t sdt, uint64_t rb,
                      uint64_t re, int64_t cb, int64_t ce, int64_t pitch, rf_accel_rows_t *out)
{
    int64_t d = inv->cfg.head_dim, nh_p = inv->cfg.num_attention_heads / rc->tp;
    int64_t base = nd->lo, W = nd->width;
    int64_t a = ((int64_t)rb > base ? (int64_t)rb : base) - base;
    int64_t e = ((int64_t)re < base + nd->n ? (int64_t)re : base + nd->n) - base;
    bool whole = cb == 0 && ce == W && pitch == W && dst->col_stride == 1 &&
                 dst->row_stride == W && rf_dtype_size(sdt) == dst->esize;
    int n = 0;
#define HEADS_DST(k) ((((k) % 3) * nh_p + (k) / 3) * d)
    if (d <= 0 || e <= a)
        return 0;
    if (a % d != 0) { /* the partial first block */
        int64_t k = a / d;
        n += rect_rows(dst, 0, src, sdt, rb, re, base + k * d, d, HEADS_DST(k), 0, W, W, cb, ce,
                       pitch, &out[n]);
        a = (k + 1) * d < e ? (k + 1) * d : e;
    }
    int64_t k0 = a / d, k1 = e / d; /* whole blocks [k0, k1) */
    if (a < e && k1 > k0 && whole) {
        for (int64_t sh = 0; sh < 3; sh++) {
            int64_t first = k0 + ((sh - k0 % 3) + 3) % 3;
            if (first >= k1)
                continue;
            rf_accel_rows_t *o = &out[n++];
            memset(o, 0, sizeof(*o));
            o->dst = rf_accel_dst_from(dst);
            o->dst.row_stride = d * W; /* one "row" is a whole block */
            o->dst_row = sh * nh_p + first / 3;
            o->src = src + (size_t)((base + first * d - (int64_t)rb) * W) * dst->esize;
            o->src_dtype = dst->dtype;
            o->src_pitch = 3 * d * W;
            o->rows = (k1 - 1 - first) / 3 + 1;
            o->cols = d * W;
        }
        a = k1 * d;
    } else if (a < e && k1 > k0) {
        if (k1 - k0 + n + 1 > RF_LOAD_MAX_RUNS)
            return -1;
        for (int64_t k = k0; k < k1; k++)
            n += rect_rows(dst, 0, src, sdt, rb, re, base + k * d, d, HEADS_DST(k), 0, W, W, cb,
                           ce, pitch, &out[n]);
        a = k1 * d;
    }
    if (a < e) { /* the partial last block */
        int64_t k = a / d;
        n += rect_rows(dst, 0, src, sdt, rb, re, base + k * d, d, HEADS_DST(k), 0, W, W, cb, ce,
                       pitch, &out[n]);
    }
#undef HEADS_DST
    return n;
}

/*
 * A sectioned tensor (RF_MOD_SECTIONS, e.g. Qwen3-Next's conv1d [q; k; v]): section i's rows
 * [start_i + r S_i / T, +S_i / T) land at destination rows [sum_{j<i} S_j / T, ...); one copy
 * per section the piece meets.
 */
static int sections_runs(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                         const need_t *nd, const rf_module_t *m, const rf_dst_t *dst,
                         const char *src, rf_dtype_t sdt, uint64_t rb, uint64_t re, int64_t cb,
                         int64_t ce, int64_t pitch, rf_accel_rows_t *out)
{
    int64_t T = rc->tp, r = rc->tp_rank, start = 0, off = 0;
    int n = 0;
    (void)inv;
    for (int i = 0; i < m->nsec; i++) {
        int64_t per = m->sec_rows[i] / T;
        n += rect_rows(dst, 0, src, sdt, rb, re, start + r * per, per, off, nd->c0, nd->nc,
                       nd->width, cb, ce, pitch, &out[n]);
        start += m->sec_rows[i];
        off += per;
    }
    return n;
}

/*
 * GraniteMoE's input_linear [E, 2I, H] into w13 at T_m = tp x dp > 1 (vLLM's load_weights:
 * p[e].chunk(2) into w1 / w3, each sharded by FusedMoE along its I rows). In E 2I rows of H,
 * block k = 2 e + s (expert e, half s: gate 0, up 1) starts at source row k I + r_m I_p and
 * goes to destination rows [k' I_p, +I_p) with k' = k - 2 first (w13 (E_l, 2 I_p, H) is
 * [gate_e; up_e] per local expert): one period of I source rows per I_p destination rows. A
 * piece becomes at most three copies: a partial block at each end and one strided copy of its
 * whole blocks (I_p H elements as one row, I H apart in the source) when the piece is full
 * width; otherwise one copy per block (-1 past RF_LOAD_MAX_RUNS).
 */
static int fused_runs(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                      const rf_tensor_t *t, const rf_dst_t *dst, const char *src, rf_dtype_t sdt,
                      uint64_t rb, uint64_t re, int64_t cb, int64_t ce, int64_t pitch,
                      rf_accel_rows_t *out)
{
    int64_t E = inv->cfg.num_experts, I = inv->cfg.moe_intermediate_size, W = t->shape[2];
    int64_t Tm = (int64_t)rc->tp * rc->dp, rm = (int64_t)rc->dp_rank * rc->tp + rc->tp_rank;
    int64_t Ip = I / Tm, b0 = rm * Ip;
    int64_t k0 = 2 * rf_moe_local_expert(E, rc, 0), k1 = k0 + 2 * rf_moe_local_count(E, rc);
    bool whole = cb == 0 && ce == W && pitch == W && dst->col_stride == 1 &&
                 dst->row_stride == W && rf_dtype_size(sdt) == dst->esize;
    int n = 0;
    if (Ip <= 0 || I <= 0 || re <= rb)
        return 0;
    /* blocks meeting [rb, re): start k I + b0 < re and end k I + b0 + Ip > rb */
    int64_t ka = (int64_t)rb - b0 - Ip < 0 ? 0 : ((int64_t)rb - b0 - Ip) / I + 1;
    int64_t kz = (int64_t)re - b0 <= 0 ? -1 : ((int64_t)re - b0 - 1) / I;
    ka = ka > k0 ? ka : k0;
    kz = kz < k1 - 1 ? kz : k1 - 1;
    if (kz < ka)
        return 0;
#define FUSED_START(k) ((k) * I + b0)
#define FUSED_PARTIAL(k) (FUSED_START(k) < (int64_t)rb || FUSED_START(k) + Ip > (int64_t)re)
    if (FUSED_PARTIAL(ka)) {
        n += rect_rows(dst, 0, src, sdt, rb, re, FUSED_START(ka), Ip, (ka - k0) * Ip, 0, W, W, cb,
                       ce, pitch, &out[n]);
        ka++;
    }
    bool last = kz >= ka && FUSED_PARTIAL(kz);
    int64_t mz = last ? kz - 1 : kz; /* whole blocks [ka, mz] */
    if (mz >= ka && whole) {
        rf_accel_rows_t *o = &out[n++];
        memset(o, 0, sizeof(*o));
        o->dst = rf_accel_dst_from(dst);
        o->dst.row_stride = Ip * W; /* one "row" is a whole block */
        o->dst_row = ka - k0;
        o->src = src + (size_t)((FUSED_START(ka) - (int64_t)rb) * W) * dst->esize;
        o->src_dtype = dst->dtype;
        o->src_pitch = I * W;
        o->rows = mz - ka + 1;
        o->cols = Ip * W;
    } else if (mz >= ka) {
        if (mz - ka + 1 + n + 1 > RF_LOAD_MAX_RUNS)
            return -1;
        for (int64_t k = ka; k <= mz; k++)
            n += rect_rows(dst, 0, src, sdt, rb, re, FUSED_START(k), Ip, (k - k0) * Ip, 0, W, W,
                           cb, ce, pitch, &out[n]);
    }
    if (last)
        n += rect_rows(dst, 0, src, sdt, rb, re, FUSED_START(kz), Ip, (kz - k0) * Ip, 0, W, W, cb,
                       ce, pitch, &out[n]);
#undef FUSED_PARTIAL
#undef FUSED_START
    return n;
}

/* Pieces of this tensor may become several copies (rf_load_piece_rows gives the first). */
static bool multi_run(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor)
{
    const rf_tensor_t *t = &inv->tensors[tensor];
    const rf_module_t *m = &inv->modules[t->module];
    return m->kind == RF_MOD_QKV_HEADS || m->kind == RF_MOD_SECTIONS ||
           (fused_w13(m, t) && rc->ep <= 1 && (int64_t)rc->tp * rc->dp > 1);
}

int rf_load_rect_runs(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                      int64_t local_expert, const rf_dst_t *dst, const void *src, rf_dtype_t sdt,
                      uint64_t row_begin, uint64_t row_end, int64_t col_begin, int64_t col_end,
                      int64_t src_pitch, rf_accel_rows_t out[RF_LOAD_MAX_RUNS])
{
    need_t nd;
    const rf_tensor_t *t = &inv->tensors[tensor];
    rf_module_kind_t k = inv->modules[t->module].kind;
    if (!need_of(inv, rc, tensor, &nd))
        return 0;
    if (k == RF_MOD_QKV_HEADS)
        return heads_runs(inv, rc, &nd, dst, src, sdt, row_begin, row_end, col_begin, col_end,
                          src_pitch, out);
    if (k == RF_MOD_SECTIONS)
        return sections_runs(inv, rc, &nd, &inv->modules[t->module], dst, src, sdt, row_begin,
                             row_end, col_begin, col_end, src_pitch, out);
    if (multi_run(inv, rc, tensor))
        return fused_runs(inv, rc, t, dst, src, sdt, row_begin, row_end, col_begin, col_end,
                          src_pitch, out);
    return rect_rows(dst, k == RF_MOD_MOE ? local_expert : 0, src, sdt, row_begin, row_end, nd.lo,
                     nd.n, nd.off, nd.c0, nd.nc, nd.width, col_begin, col_end, src_pitch, out)
               ? 1
               : 0;
}

int rf_load_piece_runs(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t local_expert, const rf_dst_t *dst, const void *src, rf_dtype_t sdt,
                       uint64_t row_begin, uint64_t row_end, rf_accel_rows_t out[RF_LOAD_MAX_RUNS])
{
    const rf_tensor_t *t = &inv->tensors[tensor];
    int64_t rows = (int64_t)rf_tensor_rows(t);
    int64_t w = t->ndim >= 2 && rows ? (int64_t)(t->numel / (uint64_t)rows) : 1;
    return rf_load_rect_runs(inv, rc, tensor, local_expert, dst, src, sdt, row_begin, row_end, 0,
                             w, w, out);
}

bool rf_load_rect_rows(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t local_expert, const rf_dst_t *dst, const void *src,
                       rf_dtype_t sdt, uint64_t row_begin, uint64_t row_end, int64_t col_begin,
                       int64_t col_end, int64_t src_pitch, rf_accel_rows_t *out)
{
    need_t nd;
    const rf_tensor_t *t = &inv->tensors[tensor];
    if (multi_run(inv, rc, tensor)) { /* its first run (see loader.h) */
        rf_accel_rows_t r[RF_LOAD_MAX_RUNS];
        if (rf_load_rect_runs(inv, rc, tensor, local_expert, dst, src, sdt, row_begin, row_end,
                              col_begin, col_end, src_pitch, r) < 1)
            return false;
        *out = r[0];
        return true;
    }
    if (!need_of(inv, rc, tensor, &nd))
        return false;
    return rect_rows(dst, inv->modules[t->module].kind == RF_MOD_MOE ? local_expert : 0, src, sdt, row_begin, row_end, nd.lo,
                     nd.n, nd.off, nd.c0, nd.nc, nd.width, col_begin, col_end, src_pitch, out);
}

bool rf_load_piece_rows(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                        int64_t local_expert, const rf_dst_t *dst, const void *src, rf_dtype_t sdt,
                        uint64_t row_begin, uint64_t row_end, rf_accel_rows_t *out)
{
    need_t nd;
    const rf_tensor_t *t = &inv->tensors[tensor];
    if (multi_run(inv, rc, tensor)) { /* its first run (see loader.h) */
        rf_accel_rows_t r[RF_LOAD_MAX_RUNS];
        if (rf_load_piece_runs(inv, rc, tensor, local_expert, dst, src, sdt, row_begin, row_end,
                               r) < 1)
            return false;
        *out = r[0];
        return true;
    }
    if (!need_of(inv, rc, tensor, &nd))
        return false;
    return piece_rows(dst, inv->modules[t->module].kind == RF_MOD_MOE ? local_expert : 0, src, sdt, row_begin, row_end, nd.lo,
                      nd.n, nd.off, nd.c0, nd.nc, nd.width, out);
}

uint64_t rf_load_piece(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                       int64_t local_expert, const rf_dst_t *dst, const void *src, rf_dtype_t sdt,
                       uint64_t row_begin, uint64_t row_end)
{
    rf_accel_rows_t r[RF_LOAD_MAX_RUNS];
    uint64_t written = 0;
    int n = rf_load_piece_runs(inv, rc, tensor, local_expert, dst, src, sdt, row_begin, row_end, r);
    for (int i = 0; i < n; i++) {
        if (rf_accel_host_ops.copy_rows(NULL, &r[i], NULL) != RF_OK)
            return 0;
        written += (uint64_t)(r[i].rows * r[i].cols);
    }
    return written;
}

uint64_t rf_load_vocab_pad_rows(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                                int module, int64_t *row_begin_p, int64_t *cols_p)
{
    const rf_module_t *m = &inv->modules[module];
    int64_t V = inv->cfg.vocab_size;
    int64_t per = inv->layout == RF_ROLLOUT_LAYOUT_HF ? rf_vocab_rows_hf(V, rc->tp)
                                                      : rf_vocab_padded(V) / rc->tp;
    int64_t first = V - rc->tp_rank * per;
    *row_begin_p = 0;
    *cols_p = 0;
    if (m->kind != RF_MOD_VOCAB)
        return 0;
    first = first < 0 ? 0 : (first > per ? per : first);
    *row_begin_p = first;
    *cols_p = m->k;
    return (uint64_t)(per - first);
}

uint64_t rf_load_vocab_pad(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int module,
                           const rf_dst_t *dst)
{
    int64_t first, cols;
    uint64_t n = rf_load_vocab_pad_rows(inv, rc, module, &first, &cols);
    rf_accel_dst_t d = rf_accel_dst_from(dst);
    if (n > 0 && rf_accel_host_ops.zero_rows(NULL, &d, first, (int64_t)n, cols, NULL) != RF_OK)
        return 0;
    return n;
}
