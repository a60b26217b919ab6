/*
 * refit: the scalar reference locator and slot verification (DESIGN.md sections 5 and 12).
 *
 * This file is the independent oracle: it shares no code with the fast loaders. It finds
 * checkpoint tensors by their Hugging Face names (derived from the engine module's name), derives
 * each slot's shape from DESIGN.md section 5 itself and cross-checks it against
 * rf_module_slots(), and maps slot elements to checkpoint elements one at a time with plain
 * index arithmetic: slow, and meant to be obviously right.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/generator.h"
#include "refit/quant.h" /* rf_f32_to_f16 (RNE), for an f16 model's MLA oracle */
#include "refit/verify.h"

/* Slot rows [dst0, dst0 + n) come from source rows [src0, src0 + n) (rows in the tensor's own
 * units: 128-row blocks for FP8 block scales). */
typedef struct ref_seg {
    int64_t dst0, n, src0;
} ref_seg_t;

/*
 * Every slot is described the same way, in CHECKPOINT orientation: nblk blocks (local experts,
 * or 1) of R rows x C columns; row n of a block lies in one of nseg segments (q / k / v, gate /
 * up, or the whole slot) whose source rows are given; column k is source column c0 + k of a
 * source tensor W elements wide. A K-first slot stores each block transposed (C, R).
 */
struct rf_ref_locator {
    const rf_inventory_t *inv;
    int module, slot;
    rf_module_kind_t kind;
    rf_quant_t quant; /* of the module, found by checkpoint tensor names */
    char param[24];   /* checkpoint suffix: "weight", "weight_scale_inv", "weight_packed",
                         "weight_scale", "bias" */
    rf_slot_shape_t shape;
    uint64_t numel;
    int64_t nblk, R, C, W, c0;
    int kfirst;
    int nseg;
    ref_seg_t seg[3];
    int64_t V;    /* source rows >= V are vocab padding (INT64_MAX: none) */
    int *bt;      /* owned: nblk x nseg tensor indices */
    int64_t T, r; /* rollout tp size and rank */
    int tdt;      /* a tensor of the slot's kind (its dtype; MoE: expert 0, also when the
                     rank holds no expert) */
    int64_t hd;   /* > 0: GPT-NeoX's query_key_value, one tensor stored per head as
                     [q_h; k_h; v_h] of hd rows: row j of segment s (local head j / hd) is
                     source row ((h0 + j / hd) 3 + s) hd + j % hd */
    int64_t h0;   /* its first head on this rank */
    int64_t fx;   /* > 0: every expert in one [E, N, K] tensor (GraniteMoE): block b's rows
                     are source rows ge[b] fx + row, fx = N rows per expert */
    int64_t *ge;  /* owned when fx > 0: global expert of each block */
};

static const char *slot_label(const rf_ref_locator_t *l)
{
    return l->shape.name;
}

/* The tensor named prefix + suffix, or an error naming it. */
static rf_status_t find_tensor(const rf_inventory_t *inv, const char *prefix, const char *suffix,
                               int *t_p, rf_err_t *err)
{
    char name[RF_NAME_MAX * 2];
    snprintf(name, sizeof(name), "%s%s", prefix, suffix);
    int t = rf_inventory_find(inv, name);
    if (t < 0)
        return rf_err_set(err, RF_ERR_MISSING,
                          "reference: checkpoint tensor %s is not in the "
                          "inventory",
                          name);
    *t_p = t;
    return RF_OK;
}

static int has_tensor(const rf_inventory_t *inv, const char *prefix, const char *suffix)
{
    char name[RF_NAME_MAX * 2];
    snprintf(name, sizeof(name), "%s%s", prefix, suffix);
    return rf_inventory_find(inv, name) >= 0;
}

static rf_status_t need_div(const rf_module_t *m, const char *what, int64_t a, int64_t b,
                            rf_err_t *err)
{
    if (b <= 0 || a % b != 0)
        return rf_err_set(err, RF_ERR_TOPOLOGY, "reference: %s: %s %lld is not divisible by %lld",
                          m->name, what, (long long)a, (long long)b);
    return RF_OK;
}

/* Base of a fused module's name: "x.self_attn.qkv_proj" -> "x.self_attn." */
static rf_status_t strip_suffix(const rf_module_t *m, const char *sfx, char *out, size_t n,
                                rf_err_t *err)
{
    size_t len = strlen(m->name), sl = strlen(sfx);
    if (len < sl || strcmp(m->name + len - sl, sfx) != 0 || len - sl >= n)
        return rf_err_set(err, RF_ERR_INVALID, "reference: module %s does not end in %s", m->name,
                          sfx);
    memcpy(out, m->name, len - sl);
    out[len - sl] = '\0';
    return RF_OK;
}

/* Quantization of the linear `prefix`, from the names of its checkpoint tensors (DESIGN.md 7;
 * docs/formats.md): weight_scale_inv fp8-block; weight_packed wna16; weight_scale next to an
 * e4m3 weight fp8-tensor ([1]) or fp8-channel ([N, 1]). */
static rf_quant_t linear_quant(const rf_inventory_t *inv, const char *prefix)
{
    char name[RF_NAME_MAX * 2];
    if (has_tensor(inv, prefix, ".weight_scale_inv"))
        return RF_QUANT_FP8_BLOCK;
    if (has_tensor(inv, prefix, ".weight_packed"))
        return RF_QUANT_WNA16;
    snprintf(name, sizeof(name), "%s.weight_scale", prefix);
    int t = rf_inventory_find(inv, name);
    if (t >= 0)
        return inv->tensors[t].ndim == 2 ? RF_QUANT_FP8_CHANNEL : RF_QUANT_FP8_TENSOR;
    return RF_QUANT_NONE;
}

static bool fp8_rows_quant(rf_quant_t q)
{
    return q == RF_QUANT_FP8_TENSOR || q == RF_QUANT_FP8_CHANNEL;
}

/* An fp8-tensor weight_scale slot: one value per shard (vLLM's PerTensorScaleParameter). */
static bool tensor_scale_slot(const rf_ref_locator_t *l)
{
    return l->quant == RF_QUANT_FP8_TENSOR && strcmp(l->param, "weight_scale") == 0;
}

/* The weight-side slots of a linear, in slot order (DESIGN.md 7). */
static int quant_params(rf_quant_t q, const char *out[2])
{
    switch (q) {
    case RF_QUANT_FP8_BLOCK:
        out[0] = "weight";
        out[1] = "weight_scale_inv";
        return 2;
    case RF_QUANT_WNA16:
        out[0] = "weight_packed";
        out[1] = "weight_scale";
        return 2;
    case RF_QUANT_FP8_TENSOR:
    case RF_QUANT_FP8_CHANNEL:
        out[0] = "weight";
        out[1] = "weight_scale";
        return 2;
    case RF_QUANT_NONE:
        break;
    }
    out[0] = "weight";
    return 1;
}

/* Picks the param of slot `slot` of a dense linear module (weight-side params, then bias). */
static rf_status_t dense_param(rf_ref_locator_t *l, const rf_module_t *m, const char *first,
                               rf_err_t *err)
{
    const char *p[2];
    int np;
    l->quant = linear_quant(l->inv, first);
    np = quant_params(l->quant, p);
    if (l->slot < np)
        snprintf(l->param, sizeof(l->param), "%s", p[l->slot]);
    else if (l->slot == np && has_tensor(l->inv, first, ".bias"))
        snprintf(l->param, sizeof(l->param), "bias");
    else
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    return RF_OK;
}

static int64_t row_unit(const char *param)
{
    return strcmp(param, "weight_scale_inv") == 0 ? 128 : 1;
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Source width of a tensor: elements per row (1 for a 1-D tensor). */
static int64_t tensor_width(const rf_tensor_t *t)
{
    return t->ndim >= 2 ? t->shape[1] : 1;
}

static rf_status_t check_rows(const rf_tensor_t *t, int64_t rows, int64_t width, rf_err_t *err)
{
    if (t->shape[0] != rows || tensor_width(t) != width || t->ndim > 2)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "reference: %s has %d dims [%lld, %lld], expected [%lld, %lld]", t->name,
                          t->ndim, (long long)t->shape[0], (long long)tensor_width(t),
                          (long long)rows, (long long)width);
    return RF_OK;
}

static rf_status_t alloc_bt(rf_ref_locator_t *l, rf_err_t *err)
{
    size_t n = (size_t)(l->nblk > 0 ? l->nblk : 1) * (size_t)(l->nseg > 0 ? l->nseg : 1);
    l->bt = malloc(n * sizeof(int));
    if (l->bt == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "reference: out of memory");
    for (size_t i = 0; i < n; i++)
        l->bt[i] = -1;
    return RF_OK;
}

/* Rows divided into u-row blocks, exactly (FP8 block scales: a shard boundary inside a block
 * cannot be sharded, DESIGN.md 5). */
static rf_status_t in_units(const rf_module_t *m, const char *what, int64_t rows, int64_t u,
                            int64_t *out, rf_err_t *err)
{
    if (rows % u != 0)
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "reference: %s: %s %lld is not a multiple of the %lld-row fp8 block",
                          m->name, what, (long long)rows, (long long)u);
    *out = rows / u;
    return RF_OK;
}

/* Local experts, from DESIGN.md section 5 (EP on: linear or round robin). */
static int64_t ref_local_count(int64_t E, const rf_rollout_coords_t *rc)
{
    if (rc->ep <= 1)
        return E;
    return E / rc->ep + (rc->ep_rank < E % rc->ep ? 1 : 0);
}

static int64_t ref_local_expert(int64_t E, const rf_rollout_coords_t *rc, int64_t i)
{
    int64_t ep = rc->ep, q = rc->ep_rank;
    if (ep <= 1)
        return i;
    if (rc->placement == RF_PLACE_ROUND_ROBIN)
        return q + i * ep;
    return q * (E / ep) + (q < E % ep ? q : E % ep) + i;
}

/* fp8-tensor weight_scale of a module with shards names[0..n): element s of the slot is the
 * one value of shard s's [1] tensor, on every rank (no tp slicing). */
static rf_status_t loc_tensor_scale(rf_ref_locator_t *l, const char *base,
                                    const char *const *names, int n, rf_err_t *err)
{
    char sfx[64];
    l->nblk = 1;
    l->nseg = n;
    RF_CHECK(alloc_bt(l, err));
    for (int s = 0; s < n; s++) {
        snprintf(sfx, sizeof(sfx), "%s.weight_scale", names[s]);
        RF_CHECK(find_tensor(l->inv, base, sfx, &l->bt[s], err));
        RF_CHECK(check_rows(&l->inv->tensors[l->bt[s]], 1, 1, err));
        l->seg[s] = (ref_seg_t){s, 1, 0};
    }
    l->R = n;
    l->C = l->W = 1;
    return RF_OK;
}

static rf_status_t loc_qkv(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    const rf_model_config_t *c = &l->inv->cfg;
    char base[RF_NAME_MAX], first[RF_NAME_MAX + 16], sfx[64];
    static const char *names[3] = {"q_proj", "k_proj", "v_proj"};
    int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, d = c->head_dim;
    /* vLLM Qwen3NextAttention: QKVParallelLinear over nh (1 + attn_output_gate) q heads, each
     * head's query followed by its gate in q_proj */
    int64_t qm = c->family == RF_FAMILY_QWEN3_NEXT ? 2 : 1;
    RF_CHECK(strip_suffix(m, "qkv_proj", base, sizeof(base), err));
    snprintf(first, sizeof(first), "%sq_proj", base);
    RF_CHECK(dense_param(l, m, first, err));
    RF_CHECK(need_div(m, "num_attention_heads", nh, l->T, err));
    if (l->T <= nkv)
        RF_CHECK(need_div(m, "num_key_value_heads", nkv, l->T, err));
    else
        RF_CHECK(need_div(m, "tp (kv heads replicated)", l->T, nkv, err));
    if (tensor_scale_slot(l))
        return loc_tensor_scale(l, base, names, 3, err);
    int64_t u = row_unit(l->param);
    int64_t nh_p = qm * nh / l->T, rep = l->T / nkv > 1 ? l->T / nkv : 1;
    int64_t nkv_p = nkv / l->T > 1 ? nkv / l->T : 1;
    int64_t qr = 0, kvr = 0, q0 = 0, kv0 = 0;
    RF_CHECK(in_units(m, "q rows per rank", nh_p * d, u, &qr, err));
    RF_CHECK(in_units(m, "k/v rows per rank", nkv_p * d, u, &kvr, err));
    RF_CHECK(in_units(m, "q row offset", l->r * nh_p * d, u, &q0, err));
    RF_CHECK(in_units(m, "k/v row offset", (l->r / rep) * nkv_p * d, u, &kv0, err));
    l->nblk = 1;
    l->nseg = 3;
    RF_CHECK(alloc_bt(l, err));
    for (int s = 0; s < 3; s++) {
        snprintf(sfx, sizeof(sfx), "%s.%s", names[s], l->param);
        RF_CHECK(find_tensor(l->inv, base, sfx, &l->bt[s], err));
    }
    int64_t W = tensor_width(&l->inv->tensors[l->bt[0]]);
    for (int s = 0; s < 3; s++)
        RF_CHECK(check_rows(&l->inv->tensors[l->bt[s]], cdiv((s == 0 ? qm * nh : nkv) * d, u), W,
                            err));
    l->seg[0] = (ref_seg_t){0, qr, q0};
    l->seg[1] = (ref_seg_t){qr, kvr, kv0};
    l->seg[2] = (ref_seg_t){qr + kvr, kvr, kv0};
    l->R = qr + 2 * kvr;
    l->C = l->W = W;
    return RF_OK;
}

/* GPT-NeoX query_key_value (vLLM's load_weights: view (nh, 3, d, K), then [q; k; v] of the
 * rank's heads): one checkpoint tensor, three segments of nh_p d rows. */
static rf_status_t loc_qkv_heads(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    const rf_model_config_t *c = &l->inv->cfg;
    char sfx[64];
    int64_t nh = c->num_attention_heads, d = c->head_dim;
    RF_CHECK(dense_param(l, m, m->name, err));
    RF_CHECK(need_div(m, "num_attention_heads", nh, l->T, err));
    int64_t nh_p = nh / l->T;
    l->nblk = 1;
    l->nseg = 3;
    RF_CHECK(alloc_bt(l, err));
    snprintf(sfx, sizeof(sfx), ".%s", l->param);
    RF_CHECK(find_tensor(l->inv, m->name, sfx, &l->bt[0], err));
    l->bt[1] = l->bt[2] = l->bt[0];
    int64_t W = tensor_width(&l->inv->tensors[l->bt[0]]);
    RF_CHECK(check_rows(&l->inv->tensors[l->bt[0]], 3 * nh * d, W, err));
    for (int s = 0; s < 3; s++)
        l->seg[s] = (ref_seg_t){s * nh_p * d, nh_p * d, 0};
    l->hd = d;
    l->h0 = l->r * nh_p;
    l->R = 3 * nh_p * d;
    l->C = l->W = W;
    return RF_OK;
}

/* ColumnParallelLinear (OPT fc1, GPT-NeoX dense_h_to_4h): rows [r N/T_r, +N/T_r); quantized
 * under rollout.layout hf (each linear apart): fp8-block scale rows in whole 128-row blocks of
 * the rank's weight rows, fp8-channel scales like the rows, an fp8-tensor scale whole. */
static rf_status_t loc_column(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    char sfx[64];
    RF_CHECK(dense_param(l, m, m->name, err));
    l->nblk = 1;
    l->nseg = 1;
    RF_CHECK(alloc_bt(l, err));
    snprintf(sfx, sizeof(sfx), ".%s", l->param);
    RF_CHECK(find_tensor(l->inv, m->name, sfx, &l->bt[0], err));
    const rf_tensor_t *t = &l->inv->tensors[l->bt[0]];
    if (m->heads > 0) /* DeepSeek's MLA projections: whole heads per rank */
        RF_CHECK(need_div(m, "num_attention_heads", l->inv->cfg.num_attention_heads, l->T, err));
    if (tensor_scale_slot(l)) { /* one value, on every rank */
        RF_CHECK(check_rows(t, 1, 1, err));
        l->R = 1;
        l->seg[0] = (ref_seg_t){0, 1, 0};
        l->C = l->W = 1;
        return RF_OK;
    }
    /* rows in the weight's units; a block scale's rows are 128 of them */
    int64_t u = row_unit(l->param), N = t->shape[0], R = 0, r0 = 0;
    if (u > 1) {
        int tw = 0;
        RF_CHECK(find_tensor(l->inv, m->name, ".weight", &tw, err));
        N = l->inv->tensors[tw].shape[0];
        RF_CHECK(check_rows(t, cdiv(N, u), tensor_width(t), err));
    }
    if (m->col_heads > 0) {
        /* rollout.layout hf's q / k / v (and GPT-NeoX's query_key_value as stored): rank r
         * holds heads [(r / rep) h_p, +h_p); a head is replicated when T_r > heads */
        int64_t h = m->col_heads, hp = 0, rep = 1;
        RF_CHECK(need_div(m, "output rows (whole heads)", N, h, err));
        if (l->T <= h) {
            RF_CHECK(need_div(m, "heads", h, l->T, err));
            hp = h / l->T;
        } else {
            RF_CHECK(need_div(m, "tensor parallel size (heads replicated)", l->T, h, err));
            hp = 1;
            rep = l->T / h;
        }
        R = hp * (N / h);
        r0 = (l->r / rep) * R;
    } else {
        RF_CHECK(need_div(m, "output rows", N, l->T, err));
        R = N / l->T;
        r0 = l->r * R;
    }
    if (u > 1 && l->T > 1) {
        RF_CHECK(in_units(m, "output rows per rank", R, u, &R, err));
        RF_CHECK(in_units(m, "output row offset", r0, u, &r0, err));
    } else if (u > 1) {
        R = cdiv(N, u);
    }
    l->R = R;
    l->seg[0] = (ref_seg_t){0, l->R, r0};
    l->C = l->W = tensor_width(t);
    return RF_OK;
}

/*
 * Qwen3-Next's Gated DeltaNet tensors (vLLM Qwen3NextGatedDeltaNet), from the config alone:
 * in_proj_qkvz [2 nk dk + 2 nv dv, H] and in_proj_ba [2 nv, H] stored per key-head group and
 * split in contiguous rows (whole groups: nk / T per rank); conv1d [2 nk dk + nv dv, 1, K]
 * split per section q, k, v (mamba_v2_sharded_weight_loader); A_log, dt_bias [nv] split in
 * value heads. The slot keeps the tensor's shape with dim 0 cut; row j of segment s is source
 * row src0_s + j.
 */
static rf_status_t loc_sections(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    const rf_model_config_t *c = &l->inv->cfg;
    int64_t nk = c->linear_num_key_heads, nv = c->linear_num_value_heads;
    int64_t kd = nk * c->linear_key_head_dim, vd = nv * c->linear_value_head_dim;
    int64_t sec[3] = {0, 0, 0};
    int ns = 1;
    size_t ml = strlen(m->name);
#define ENDS(x) (ml >= strlen(x) && strcmp(m->name + ml - strlen(x), x) == 0)
    if (c->family != RF_FAMILY_QWEN3_NEXT || l->slot != 0)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s: no sectioned slot %d", m->name,
                          l->slot);
    if (ENDS(".in_proj_qkvz")) {
        RF_CHECK(need_div(m, "linear_num_key_heads", nk, l->T, err));
        sec[0] = 2 * kd + 2 * vd;
    } else if (ENDS(".in_proj_ba")) {
        RF_CHECK(need_div(m, "linear_num_key_heads", nk, l->T, err));
        sec[0] = 2 * nv;
    } else if (ENDS(".conv1d")) {
        RF_CHECK(need_div(m, "linear_num_key_heads", nk, l->T, err));
        RF_CHECK(need_div(m, "linear_num_value_heads", nv, l->T, err));
        sec[0] = sec[1] = kd;
        sec[2] = vd;
        ns = 3;
    } else if (ENDS(".A_log") || ENDS(".dt_bias")) {
        RF_CHECK(need_div(m, "linear_num_value_heads", nv, l->T, err));
        sec[0] = nv;
    } else {
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s is not a Gated DeltaNet tensor",
                          m->name);
    }
    bool bare = ENDS(".A_log") || ENDS(".dt_bias");
#undef ENDS
    snprintf(l->param, sizeof(l->param), "weight");
    l->nblk = 1;
    l->nseg = ns;
    RF_CHECK(alloc_bt(l, err));
    RF_CHECK(find_tensor(l->inv, m->name, bare ? "" : ".weight", &l->bt[0], err));
    const rf_tensor_t *t = &l->inv->tensors[l->bt[0]];
    int64_t start = 0, off = 0;
    for (int s = 0; s < ns; s++) {
        int64_t per = sec[s] / l->T;
        l->bt[s] = l->bt[0];
        l->seg[s] = (ref_seg_t){off, per, start + l->r * per};
        start += sec[s];
        off += per;
    }
    if (t->shape[0] != start)
        return rf_err_set(err, RF_ERR_MISMATCH, "reference: %s has %lld rows, expected %lld",
                          t->name, (long long)t->shape[0], (long long)start);
    l->R = off;
    l->C = l->W = (int64_t)(t->numel / (uint64_t)t->shape[0]);
    return RF_OK;
}

static rf_status_t loc_merged(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    char base[RF_NAME_MAX], first[RF_NAME_MAX + 16], sfx[64];
    int64_t I = m->n / 2; /* intermediate_size; DeepSeek's shared_experts: Im x n_shared */
    size_t ml = strlen(m->name), sl = strlen("shared_expert.gate_up_proj");
    /* Qwen3-Next's shared expert: a dense MLP of shared_expert_intermediate_size */
    if (ml >= sl && strcmp(m->name + ml - sl, "shared_expert.gate_up_proj") == 0)
        I = l->inv->cfg.shared_expert_intermediate_size;
    RF_CHECK(strip_suffix(m, "gate_up_proj", base, sizeof(base), err));
    snprintf(first, sizeof(first), "%sgate_proj", base);
    RF_CHECK(dense_param(l, m, first, err));
    RF_CHECK(need_div(m, "intermediate_size", I, l->T, err));
    if (tensor_scale_slot(l)) {
        static const char *const gu[2] = {"gate_proj", "up_proj"};
        return loc_tensor_scale(l, base, gu, 2, err);
    }
    int64_t u = row_unit(l->param), half = 0, h0 = 0;
    RF_CHECK(in_units(m, "intermediate rows per rank", I / l->T, u, &half, err));
    RF_CHECK(in_units(m, "intermediate row offset", l->r * (I / l->T), u, &h0, err));
    l->nblk = 1;
    l->nseg = 2;
    RF_CHECK(alloc_bt(l, err));
    snprintf(sfx, sizeof(sfx), "gate_proj.%s", l->param);
    RF_CHECK(find_tensor(l->inv, base, sfx, &l->bt[0], err));
    snprintf(sfx, sizeof(sfx), "up_proj.%s", l->param);
    RF_CHECK(find_tensor(l->inv, base, sfx, &l->bt[1], err));
    int64_t W = tensor_width(&l->inv->tensors[l->bt[0]]);
    for (int s = 0; s < 2; s++)
        RF_CHECK(check_rows(&l->inv->tensors[l->bt[s]], cdiv(I, u), W, err));
    l->seg[0] = (ref_seg_t){0, half, h0};
    l->seg[1] = (ref_seg_t){half, half, h0};
    l->R = 2 * half;
    l->C = l->W = W;
    return RF_OK;
}

static rf_status_t loc_row(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    char sfx[64];
    RF_CHECK(dense_param(l, m, m->name, err));
    l->nblk = 1;
    l->nseg = 1;
    RF_CHECK(alloc_bt(l, err));
    snprintf(sfx, sizeof(sfx), ".%s", l->param);
    RF_CHECK(find_tensor(l->inv, m->name, sfx, &l->bt[0], err));
    const rf_tensor_t *t = &l->inv->tensors[l->bt[0]];
    if (m->heads > 0) /* DeepSeek's o_proj: whole heads per rank */
        RF_CHECK(need_div(m, "num_attention_heads", l->inv->cfg.num_attention_heads, l->T, err));
    l->R = t->shape[0];
    l->seg[0] = (ref_seg_t){0, l->R, 0};
    /* full copy on every rank: the bias, and fp8-tensor / fp8-channel scales (one per output
     * row or one in all: a row-parallel linear keeps its rows) */
    if (strcmp(l->param, "bias") == 0 ||
        (fp8_rows_quant(l->quant) && strcmp(l->param, "weight_scale") == 0)) {
        RF_CHECK(check_rows(t, t->shape[0], 1, err));
        l->C = l->W = 1;
        return RF_OK;
    }
    l->W = tensor_width(t);
    /* columns [r W/T, (r+1) W/T) of the tensor's own width: packed words K/8, group scales
     * K/G, fp8 scale blocks K/128 */
    RF_CHECK(need_div(m, "input columns", l->W, l->T, err));
    if (strcmp(l->param, "weight_scale_inv") == 0 && l->T > 1) {
        int tw = 0;
        RF_CHECK(find_tensor(l->inv, m->name, ".weight", &tw, err));
        RF_CHECK(need_div(m, "input size (whole 128-column fp8 blocks per rank)",
                          tensor_width(&l->inv->tensors[tw]), 128 * l->T, err));
    }
    l->C = l->W / l->T;
    l->c0 = l->r * l->C;
    return RF_OK;
}

static rf_status_t loc_vocab(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    if (l->slot != 0)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    snprintf(l->param, sizeof(l->param), "weight");
    l->nblk = 1;
    l->nseg = 1;
    RF_CHECK(alloc_bt(l, err));
    RF_CHECK(find_tensor(l->inv, m->name, ".weight", &l->bt[0], err));
    const rf_tensor_t *t = &l->inv->tensors[l->bt[0]];
    RF_CHECK(check_rows(t, t->shape[0], tensor_width(t), err));
    l->V = t->shape[0];
    if (l->inv->layout == RF_ROLLOUT_LAYOUT_HF) {
        /* hf: ceil(V / T) rows per rank, the last rank's rows past V zero */
        l->R = (l->V + l->T - 1) / l->T;
        l->seg[0] = (ref_seg_t){0, l->R, l->r * l->R};
        l->C = l->W = tensor_width(t);
        return RF_OK;
    }
    int64_t Vp = (l->V + 63) / 64 * 64;
    RF_CHECK(need_div(m, "padded vocab", Vp, l->T, err));
    l->R = Vp / l->T;
    l->seg[0] = (ref_seg_t){0, l->R, l->r * l->R};
    l->C = l->W = tensor_width(t);
    return RF_OK;
}

static rf_status_t loc_replicated(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    /* slot 1: a LayerNorm's bias (GPT-NeoX, OPT) or DeepSeek's router e_score_correction_bias */
    static const char *const second[] = {"bias", "e_score_correction_bias"};
    char sfx[40];
    const char *param = l->slot == 0 ? "weight" : NULL;
    for (int i = 0; l->slot == 1 && param == NULL && i < 2; i++) {
        snprintf(sfx, sizeof(sfx), ".%s", second[i]);
        if (has_tensor(l->inv, m->name, sfx))
            param = second[i];
    }
    if (param == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    snprintf(l->param, sizeof(l->param), "%s", param);
    snprintf(sfx, sizeof(sfx), ".%s", param);
    l->nblk = 1;
    l->nseg = 1;
    RF_CHECK(alloc_bt(l, err));
    char rbase[RF_NAME_MAX];
    rf_err_t no; /* a module not named so is no error here */
    rf_err_clear(&no);
    if (strip_suffix(m, "block_sparse_moe.gate", rbase, sizeof(rbase), &no) == RF_OK &&
        has_tensor(l->inv, rbase, "block_sparse_moe.router.layer.weight")) {
        /* GraniteMoE's router: vLLM's load_weights renames block_sparse_moe.router.layer to
         * its ReplicatedLinear block_sparse_moe.gate */
        RF_CHECK(find_tensor(l->inv, rbase, "block_sparse_moe.router.layer.weight", &l->bt[0],
                             err));
    } else {
        RF_CHECK(find_tensor(l->inv, m->name, sfx, &l->bt[0], err));
    }
    l->R = (int64_t)l->inv->tensors[l->bt[0]].numel; /* full copy, element = element */
    l->seg[0] = (ref_seg_t){0, l->R, 0};
    l->C = l->W = 1;
    return RF_OK;
}

/*
 * DeepSeek's ReplicatedLinear / fused_qkv_a_proj (MergedColumnParallelLinear, disable_tp):
 * every rank holds all rows; with q_lora_rank set the shards are q_a_proj then
 * kv_a_proj_with_mqa (vLLM's stacked_params_mapping), each at the rows of those before it.
 */
static rf_status_t loc_replicated_linear(rf_ref_locator_t *l, const rf_module_t *m,
                                         rf_err_t *err)
{
    char base[RF_NAME_MAX], first[RF_NAME_MAX + 16], sfx[64];
    static const char *const names[2] = {"q_a_proj", "kv_a_proj_with_mqa"};
    size_t ln = strlen(m->name), ls = strlen("fused_qkv_a_proj");
    bool fused = ln > ls && strcmp(m->name + ln - ls, "fused_qkv_a_proj") == 0;
    if (fused)
        RF_CHECK(strip_suffix(m, "fused_qkv_a_proj", base, sizeof(base), err));
    int n = fused ? 2 : 1;
    if (fused)
        snprintf(first, sizeof(first), "%sq_a_proj", base);
    else
        snprintf(first, sizeof(first), "%s", m->name);
    RF_CHECK(dense_param(l, m, first, err));
    int64_t u = row_unit(l->param), at = 0;
    l->nblk = 1;
    l->nseg = n;
    RF_CHECK(alloc_bt(l, err));
    for (int s = 0; s < n; s++) {
        if (fused)
            snprintf(sfx, sizeof(sfx), "%s.%s", names[s], l->param);
        else
            snprintf(sfx, sizeof(sfx), ".%s", l->param);
        RF_CHECK(find_tensor(l->inv, fused ? base : m->name, sfx, &l->bt[s], err));
        const rf_tensor_t *t = &l->inv->tensors[l->bt[s]];
        if (s + 1 < n && u > 1) { /* the next shard starts on a whole block */
            int tw = 0;
            snprintf(sfx, sizeof(sfx), "%s.weight", names[s]);
            RF_CHECK(find_tensor(l->inv, base, sfx, &tw, err));
            int64_t q = 0;
            RF_CHECK(in_units(m, "rows of its first fused linear", l->inv->tensors[tw].shape[0], u,
                              &q, err));
        }
        l->seg[s] = (ref_seg_t){at, t->shape[0], 0};
        at += t->shape[0];
        l->W = tensor_width(t);
    }
    l->R = at;
    l->C = l->W;
    return RF_OK;
}

/*
 * FusedMoE fed by two [E, N, K] tensors per layer, GraniteMoE's block_sparse_moe.input_linear
 * [E, 2I, H] (w13: vLLM's load_weights chunks p[e] in two, w1 the first I rows, w3 the next)
 * and output_linear [E, H, I] (w2 = p[e]); FusedMoE shards both along I over T_m ranks.
 */
static rf_status_t loc_moe_fused(rf_ref_locator_t *l, const rf_module_t *m, const char *base,
                                 const rf_rollout_coords_t *rc, rf_err_t *err)
{
    const rf_model_config_t *c = &l->inv->cfg;
    int64_t E = c->num_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    if (l->slot > 1)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    int w13 = l->slot == 0;
    snprintf(l->param, sizeof(l->param), "weight");
    l->quant = RF_QUANT_NONE;
    int64_t Tm = rc->ep > 1 ? 1 : (int64_t)rc->tp * rc->dp;
    int64_t rm = rc->ep > 1 ? 0 : (int64_t)rc->dp_rank * rc->tp + rc->tp_rank;
    RF_CHECK(need_div(m, "intermediate_size (each fused expert)", I, Tm, err));
    int64_t Ip = I / Tm;
    l->nblk = ref_local_count(E, rc);
    l->nseg = w13 ? 2 : 1;
    RF_CHECK(alloc_bt(l, err));
    l->ge = malloc((size_t)(l->nblk > 0 ? l->nblk : 1) * sizeof(int64_t));
    if (l->ge == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "reference: out of memory");
    int ti = 0;
    RF_CHECK(find_tensor(l->inv, base, w13 ? "input_linear.weight" : "output_linear.weight", &ti,
                         err));
    const rf_tensor_t *t = &l->inv->tensors[ti];
    int64_t want1 = w13 ? 2 * I : H, want2 = w13 ? H : I;
    if (t->ndim != 3 || t->shape[0] != E || t->shape[1] != want1 || t->shape[2] != want2)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "reference: %s has %d dims [%lld, %lld, %lld], expected [%lld, %lld, "
                          "%lld]",
                          t->name, t->ndim, (long long)t->shape[0], (long long)t->shape[1],
                          (long long)t->shape[2], (long long)E, (long long)want1,
                          (long long)want2);
    for (int64_t i = 0; i < l->nblk * l->nseg; i++)
        l->bt[i] = ti;
    for (int64_t i = 0; i < l->nblk; i++)
        l->ge[i] = ref_local_expert(E, rc, i);
    l->fx = want1;
    l->W = want2;
    l->tdt = ti;
    if (w13) {
        l->seg[0] = (ref_seg_t){0, Ip, rm * Ip};
        l->seg[1] = (ref_seg_t){Ip, Ip, I + rm * Ip};
        l->R = 2 * Ip;
        l->C = l->W;
    } else {
        l->R = H;
        l->seg[0] = (ref_seg_t){0, H, 0};
        l->C = Ip;
        l->c0 = rm * Ip;
    }
    return RF_OK;
}

static rf_status_t loc_moe(rf_ref_locator_t *l, const rf_module_t *m, const rf_rollout_coords_t *rc,
                           rf_err_t *err)
{
    char fbase[RF_NAME_MAX];
    rf_err_t no; /* a module not named so is no error here */
    rf_err_clear(&no);
    if (strip_suffix(m, "experts", fbase, sizeof(fbase), &no) == RF_OK &&
        has_tensor(l->inv, fbase, "input_linear.weight"))
        return loc_moe_fused(l, m, fbase, rc, err);
    /* rollout.layout hf: GraniteMoE's parameters live on block_sparse_moe itself */
    size_t ml = strlen(m->name);
    if (l->inv->layout == RF_ROLLOUT_LAYOUT_HF && ml + 2 <= sizeof(fbase)) {
        memcpy(fbase, m->name, ml);
        fbase[ml] = '.';
        fbase[ml + 1] = '\0';
        if (has_tensor(l->inv, fbase, "input_linear.weight"))
            return loc_moe_fused(l, m, fbase, rc, err);
    }
    char sfx[96], first[RF_NAME_MAX + 16];
    const char *p[2];
    int64_t E = l->inv->cfg.num_experts, I = l->inv->cfg.moe_intermediate_size;
    if (E <= 0)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s: no experts", m->name);
    snprintf(first, sizeof(first), "%s.0.gate_proj", m->name);
    l->quant = linear_quant(l->inv, first);
    int np = quant_params(l->quant, p);
    if (l->slot >= 2 * np)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    int w13 = l->slot < np;
    snprintf(l->param, sizeof(l->param), "%s", p[l->slot % np]);
    int64_t Tm = rc->ep > 1 ? 1 : (int64_t)rc->tp * rc->dp;
    int64_t rm = rc->ep > 1 ? 0 : (int64_t)rc->dp_rank * rc->tp + rc->tp_rank;
    RF_CHECK(need_div(m, "moe_intermediate_size", I, Tm, err));
    int64_t Ip = I / Tm, u = row_unit(l->param);
    l->kfirst = l->quant == RF_QUANT_WNA16; /* vLLM's wna16 FusedMoE layout (DESIGN.md 7) */
    l->nblk = ref_local_count(E, rc);
    l->nseg = w13 ? 2 : 1;
    RF_CHECK(alloc_bt(l, err));
    static const char *names[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int64_t i = 0; i < l->nblk; i++) {
        int64_t ge = ref_local_expert(E, rc, i);
        for (int s = 0; s < l->nseg; s++) {
            snprintf(sfx, sizeof(sfx), ".%lld.%s.%s", (long long)ge, names[w13 ? s : 2], l->param);
            RF_CHECK(find_tensor(l->inv, m->name, sfx, &l->bt[i * l->nseg + s], err));
        }
    }
    int64_t H = l->inv->cfg.hidden_size;
    /* source widths from the first expert's tensors; every expert has the same shapes */
    int t0 = 0;
    snprintf(sfx, sizeof(sfx), ".0.%s.%s", w13 ? "gate_proj" : "down_proj", l->param);
    RF_CHECK(find_tensor(l->inv, m->name, sfx, &t0, err));
    l->W = tensor_width(&l->inv->tensors[t0]);
    l->tdt = t0;
    if (w13) {
        int64_t ipu = 0, i0 = 0;
        RF_CHECK(in_units(m, "moe intermediate rows per rank (I_p)", Ip, u, &ipu, err));
        RF_CHECK(in_units(m, "moe intermediate row offset", rm * Ip, u, &i0, err));
        l->seg[0] = (ref_seg_t){0, ipu, i0};
        l->seg[1] = (ref_seg_t){ipu, ipu, i0};
        l->R = 2 * ipu;
        l->C = l->W;
        for (int64_t i = 0; i < l->nblk * 2; i++)
            RF_CHECK(check_rows(&l->inv->tensors[l->bt[i]], cdiv(I, u), l->W, err));
    } else {
        if (u > 1)
            RF_CHECK(
                need_div(m, "moe intermediate size per rank (I_p, whole fp8 blocks)", Ip, u, err));
        RF_CHECK(need_div(m, "w2 input columns", l->W, Tm, err));
        l->R = cdiv(H, u);
        l->seg[0] = (ref_seg_t){0, l->R, 0};
        l->C = l->W / Tm;
        l->c0 = rm * l->C;
        for (int64_t i = 0; i < l->nblk; i++)
            RF_CHECK(check_rows(&l->inv->tensors[l->bt[i]], l->R, l->W, err));
    }
    return RF_OK;
}

/* The slot's name, dtype and shape, from the description (DESIGN.md 5 and 7). */
static void set_shape(rf_ref_locator_t *l)
{
    const rf_tensor_t *t = &l->inv->tensors[l->kind == RF_MOD_MOE ? l->tdt : l->bt[0]];
    rf_slot_shape_t *s = &l->shape;
    memset(s, 0, sizeof(*s));
    if (l->kind == RF_MOD_MOE && l->inv->layout == RF_ROLLOUT_LAYOUT_HF && l->fx > 0)
        /* GraniteMoeParallelExperts: the checkpoint's own names */
        snprintf(s->name, sizeof(s->name), "%s",
                 l->nseg == 2 ? "input_linear.weight" : "output_linear.weight");
    else if (l->kind == RF_MOD_MOE && l->inv->layout == RF_ROLLOUT_LAYOUT_HF)
        /* transformers 5's fused experts (Qwen3MoeExperts; FP8Experts adds
         * gate_up_proj_scale_inv / down_proj_scale_inv) */
        snprintf(s->name, sizeof(s->name), "%s%s", l->nseg == 2 ? "gate_up_proj" : "down_proj",
                 l->param + strlen("weight"));
    else if (l->kind == RF_MOD_MOE)
        snprintf(s->name, sizeof(s->name), "%s%s", l->nseg == 2 ? "w13_" : "w2_", l->param);
    else
        snprintf(s->name, sizeof(s->name), "%s", l->param);
    /* runtime fp8 block / tensor / channel scales are fp32 whatever the file stores
     * (DESIGN.md 7, docs/formats.md) */
    s->dtype = strcmp(l->param, "weight_scale_inv") == 0 ||
                       (fp8_rows_quant(l->quant) && strcmp(l->param, "weight_scale") == 0)
                   ? RF_DTYPE_F32
                   : t->dtype;
    s->kfirst = l->kfirst != 0;
    if (tensor_scale_slot(l)) {
        s->ndim = 1;
        s->shape[0] = l->R;
    } else if (l->kind == RF_MOD_REPLICATED || l->kind == RF_MOD_SECTIONS) {
        s->ndim = t->ndim;
        for (int i = 0; i < t->ndim; i++)
            s->shape[i] = t->shape[i];
        if (l->kind == RF_MOD_SECTIONS) /* dim 0 cut to the rank's sections */
            s->shape[0] = l->R;
    } else if (strcmp(l->param, "bias") == 0) {
        s->ndim = 1;
        s->shape[0] = l->R;
    } else if (l->kind == RF_MOD_MOE) {
        s->ndim = 3;
        s->shape[0] = l->nblk;
        s->shape[1] = l->kfirst ? l->C : l->R;
        s->shape[2] = l->kfirst ? l->R : l->C;
    } else {
        s->ndim = 2;
        s->shape[0] = l->R;
        s->shape[1] = l->C;
    }
    l->numel = (uint64_t)l->nblk * (uint64_t)l->R * (uint64_t)l->C;
}

rf_status_t rf_ref_locator_create(const rf_inventory_t *inv, int module, int slot,
                                  const rf_rollout_coords_t *rc, rf_ref_locator_t **loc_p,
                                  rf_err_t *err)
{
    rf_status_t st;
    rf_slot_shape_t shapes[RF_MODULE_MAX_SLOTS];
    int nslots = 0;
    if (inv == NULL || rc == NULL || loc_p == NULL || module < 0 || module >= inv->nmodules ||
        slot < 0 || rc->tp < 1 || rc->tp_rank < 0 || rc->tp_rank >= rc->tp || rc->dp < 1 ||
        rc->dp_rank < 0 || rc->dp_rank >= rc->dp || rc->ep < 1 || rc->ep_rank < 0 ||
        rc->ep_rank >= rc->ep)
        return rf_err_set(err, RF_ERR_INVALID, "reference: bad module %d, slot %d or coordinates",
                          module, slot);
    const rf_module_t *m = &inv->modules[module];
    rf_ref_locator_t *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "reference: out of memory");
    l->inv = inv;
    l->module = module;
    l->slot = slot;
    l->kind = m->kind;
    l->T = rc->tp;
    l->r = rc->tp_rank;
    l->V = INT64_MAX;
    switch (m->kind) {
    case RF_MOD_QKV:
        st = loc_qkv(l, m, err);
        break;
    case RF_MOD_MERGED:
        st = loc_merged(l, m, err);
        break;
    case RF_MOD_ROW:
        st = loc_row(l, m, err);
        break;
    case RF_MOD_VOCAB:
        st = loc_vocab(l, m, err);
        break;
    case RF_MOD_REPLICATED:
        st = loc_replicated(l, m, err);
        break;
    case RF_MOD_MOE:
        st = loc_moe(l, m, rc, err);
        break;
    case RF_MOD_COLUMN:
        st = loc_column(l, m, err);
        break;
    case RF_MOD_QKV_HEADS:
        st = loc_qkv_heads(l, m, err);
        break;
    case RF_MOD_SECTIONS:
        st = loc_sections(l, m, err);
        break;
    case RF_MOD_REPLICATED_LINEAR:
        st = loc_replicated_linear(l, m, err);
        break;
    default:
        st = rf_err_set(err, RF_ERR_UNSUPPORTED, "reference: %s: module kind %d", m->name,
                        (int)m->kind);
    }
    if (st != RF_OK)
        goto fail;
    set_shape(l);
    /* the slot as the model contract shapes it must be the slot derived here */
    RF_CHECK_GOTO(rf_module_slots(inv, module, rc, shapes, &nslots, err), st, fail);
    if (slot >= nslots) {
        st = rf_err_set(err, RF_ERR_MISMATCH,
                        "reference: %s: rf_module_slots gives %d slots, "
                        "the reference expects slot %d (%s)",
                        m->name, nslots, slot, l->shape.name);
        goto fail;
    }
    const rf_slot_shape_t *s = &shapes[slot];
    int same = s->ndim == l->shape.ndim && s->dtype == l->shape.dtype &&
               strcmp(s->name, l->shape.name) == 0 && s->kfirst == l->shape.kfirst;
    for (int i = 0; same && i < s->ndim; i++)
        same = s->shape[i] == l->shape.shape[i];
    if (!same) {
        st = rf_err_set(err, RF_ERR_MISMATCH,
                        "reference: %s slot %d: rf_module_slots gives %s %s [%lld, %lld, %lld] "
                        "(%d dims%s), the reference derives %s %s [%lld, %lld, %lld] (%d dims%s)",
                        m->name, slot, s->name, rf_dtype_name(s->dtype), (long long)s->shape[0],
                        (long long)s->shape[1], (long long)s->shape[2], s->ndim,
                        s->kfirst ? ", K-first" : "", l->shape.name, rf_dtype_name(l->shape.dtype),
                        (long long)l->shape.shape[0], (long long)l->shape.shape[1],
                        (long long)l->shape.shape[2], l->shape.ndim,
                        l->shape.kfirst ? ", K-first" : "");
        goto fail;
    }
    *loc_p = l;
    return RF_OK;
fail:
    rf_ref_locator_destroy(l);
    return st;
}

void rf_ref_locator_destroy(rf_ref_locator_t *loc)
{
    if (loc == NULL)
        return;
    free(loc->bt);
    free(loc->ge);
    free(loc);
}

const rf_slot_shape_t *rf_ref_locator_shape(const rf_ref_locator_t *loc)
{
    return &loc->shape;
}

uint64_t rf_ref_locator_numel(const rf_ref_locator_t *loc)
{
    return loc->numel;
}

void rf_ref_locator_at(const rf_ref_locator_t *l, uint64_t e, rf_ref_elem_t *out)
{
    uint64_t per = (uint64_t)l->R * (uint64_t)l->C;
    int64_t b = (int64_t)(e / per), rem = (int64_t)(e % per), n, k;
    if (l->kfirst) { /* block stored (C, R): element (k, n) */
        k = rem / l->R;
        n = rem % l->R;
    } else {
        n = rem / l->C;
        k = rem % l->C;
    }
    int s = 0;
    while (s + 1 < l->nseg && n >= l->seg[s + 1].dst0)
        s++;
    int64_t row = l->seg[s].src0 + (n - l->seg[s].dst0);
    if (l->fx > 0)
        row += l->ge[b] * l->fx;
    if (l->hd > 0) {
        int64_t j = n - l->seg[s].dst0;
        row = ((l->h0 + j / l->hd) * 3 + s) * l->hd + j % l->hd;
    }
    if (row >= l->V) {
        out->kind = RF_REF_PAD;
        out->tensor = -1;
        out->index = 0;
        return;
    }
    out->kind = RF_REF_TENSOR;
    out->tensor = l->bt[b * l->nseg + s];
    out->index = (uint64_t)(row * l->W + l->c0 + k);
}

void rf_ref_locator_range(const rf_ref_locator_t *l, int tensor, uint64_t *begin_p, uint64_t *end_p)
{
    uint64_t per = (uint64_t)l->R * (uint64_t)l->C;
    *begin_p = *end_p = 0;
    if (tensor < 0)
        return;
    /* the blocks that read the tensor: one (an expert's or the slot's own), or every local
     * expert of a fused [E, N, K] tensor */
    for (int64_t b = 0; b < l->nblk; b++)
        for (int s = 0; s < l->nseg; s++)
            if (l->bt[b * l->nseg + s] == tensor) {
                if (*begin_p == *end_p)
                    *begin_p = (uint64_t)b * per;
                *end_p = (uint64_t)(b + 1) * per;
                break;
            }
}

rf_status_t rf_ref_locate(const rf_inventory_t *inv, int module, int slot,
                          const rf_rollout_coords_t *rc, uint64_t elem, rf_ref_elem_t *out_p,
                          rf_err_t *err)
{
    rf_ref_locator_t *l;
    RF_CHECK(rf_ref_locator_create(inv, module, slot, rc, &l, err));
    if (elem >= l->numel) {
        rf_status_t st = rf_err_set(err, RF_ERR_INVALID,
                                    "reference: element %llu is outside slot %s of %s (%llu)",
                                    (unsigned long long)elem, slot_label(l),
                                    inv->modules[module].name, (unsigned long long)l->numel);
        rf_ref_locator_destroy(l);
        return st;
    }
    rf_ref_locator_at(l, elem, out_p);
    rf_ref_locator_destroy(l);
    return RF_OK;
}

/* ---- slot verification ---------------------------------------------------------------- */

static uint32_t load_bits(const unsigned char *p, size_t es)
{
    uint32_t v = 0;
    if (es == 1)
        v = p[0];
    else if (es == 2) {
        uint16_t h;
        memcpy(&h, p, 2);
        v = h;
    } else if (es == 4)
        memcpy(&v, p, 4);
    return v;
}

/* IEEE binary16 -> f32, exact (every f16 is an f32). */
static float ref_f16_to_f32(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m + 1024), e - 25);
    return sign ? -v : v;
}

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Element `i` of a scale / float tensor in dtype dt, as f32 (exact for BF16, F16, F32). */
static float load_f32(const unsigned char *p, rf_dtype_t dt, uint64_t i)
{
    uint16_t h;
    switch (dt) {
    case RF_DTYPE_BF16:
        memcpy(&h, p + i * 2, 2);
        return rf_bf16_to_f32(h);
    case RF_DTYPE_F16:
        memcpy(&h, p + i * 2, 2);
        return ref_f16_to_f32(h);
    case RF_DTYPE_F32:
        return f32_of_bits(load_bits(p + i * 4, 4));
    default:
        return NAN;
    }
}

float rf_ref_e4m3fn_to_f32(uint8_t b)
{
    int sign = b >> 7, e = (b >> 3) & 0xf, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        return NAN;
    if (e == 0)
        v = ldexpf((float)m, -9); /* subnormal: m/8 2^-6 */
    else
        v = ldexpf((float)(8 + m), e - 10); /* (1 + m/8) 2^(e-7) */
    return sign ? -v : v;
}

uint8_t rf_ref_fp8_requant(uint8_t q, float s_from, float s_to)
{
    if ((q & 0x7f) == 0x7f)
        return 0x00;
    if (s_from == s_to)
        return q;
    float x = rf_ref_e4m3fn_to_f32(q) * s_from / s_to, a = fabsf(x);
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    /* magnitudes of bytes 0x00..0x7e rise with the byte: bisect for lo <= a < lo + 1 */
    int lo = 0, hi = 0x7e;
    if (a >= rf_ref_e4m3fn_to_f32(0x7e))
        return (uint8_t)(sign | 0x7e);
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (rf_ref_e4m3fn_to_f32((uint8_t)mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    /* neighbours within a factor of 2 (or 0): both differences are exact in fp32 */
    float dl = a - rf_ref_e4m3fn_to_f32((uint8_t)lo), dh = rf_ref_e4m3fn_to_f32((uint8_t)hi) - a;
    int b = dl < dh ? lo : dh < dl ? hi : ((lo & 1) == 0 ? lo : hi);
    return (uint8_t)(sign | b);
}

int rf_ref_int4_at(const int32_t *words, int64_t k)
{
    uint32_t w = (uint32_t)words[k / 8];
    return (int)((w >> (4 * (k % 8))) & 0xfu) - 8;
}

static rf_dtype_t src_dtype(const rf_inventory_t *inv, const rf_verify_opts_t *opts, void *ctx,
                            int t)
{
    rf_dtype_t dt = RF_DTYPE_INVALID;
    if (opts != NULL && opts->tensor_dtype != NULL)
        dt = opts->tensor_dtype(ctx, t);
    return dt == RF_DTYPE_INVALID ? inv->tensors[t].dtype : dt;
}

/* RF_VERIFY_FP8_REQUANT_MAX applies to slot l: a weight or weight_scale slot of a fused
 * fp8-tensor module (one segment per shard). */
static bool requant_slot(const rf_ref_locator_t *l, const rf_verify_opts_t *opts)
{
    return opts != NULL && (opts->flags & RF_VERIFY_FP8_REQUANT_MAX) &&
           l->quant == RF_QUANT_FP8_TENSOR && l->nseg > 1 && l->nblk == 1 &&
           (strcmp(l->param, "weight") == 0 || strcmp(l->param, "weight_scale") == 0);
}

/* The checkpoint scale of each shard of requant slot l (shard order) and their max. */
static rf_status_t requant_scales(const rf_inventory_t *inv, const rf_ref_locator_t *l,
                                  rf_tensor_bytes_fn tensor_bytes, void *ctx,
                                  const rf_verify_opts_t *opts, float *s, float *smax_p,
                                  rf_err_t *err)
{
    char name[RF_NAME_MAX + 16];
    *smax_p = 0.0f;
    for (int k = 0; k < l->nseg; k++) {
        const char *wn = inv->tensors[l->bt[k]].name;
        int ts = l->bt[k];
        if (strcmp(l->param, "weight") == 0) { /* "<P>.weight" -> "<P>.weight_scale" */
            snprintf(name, sizeof(name), "%s_scale", wn);
            ts = rf_inventory_find(inv, name);
        }
        const void *b = ts >= 0 ? tensor_bytes(ctx, ts) : NULL;
        if (b == NULL)
            return rf_err_set(err, RF_ERR_MISSING, "verify: no checkpoint scale for %s", wn);
        s[k] = load_f32(b, src_dtype(inv, opts, ctx, ts), 0);
        *smax_p = s[k] > *smax_p ? s[k] : *smax_p;
    }
    return RF_OK;
}

static rf_status_t verify_common(const rf_inventory_t *inv, int module, int slot,
                                 const rf_rollout_coords_t *rc, const void *slot_bytes,
                                 size_t slot_nbytes, rf_tensor_bytes_fn tensor_bytes, void *ctx,
                                 const rf_verify_opts_t *opts, int use_gen, uint64_t step,
                                 uint64_t *mismatches_p, rf_err_t *err)
{
    rf_ref_locator_t *l;
    rf_status_t st = RF_OK;
    RF_CHECK(rf_ref_locator_create(inv, module, slot, rc, &l, err));
    const char *mname = inv->modules[module].name;
    rf_dtype_t dt = l->shape.dtype;
    size_t es = rf_dtype_size(dt);
    int fnuz = opts != NULL && (opts->flags & RF_VERIFY_FP8_FNUZ_ZERO) && dt == RF_DTYPE_F8_E4M3;
    if (es > 4 || (use_gen && !rf_gen_dtype_supported(dt))) {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED, "verify: %s slot %s: dtype %s", mname,
                        slot_label(l), rf_dtype_name(dt));
        goto out;
    }
    if (slot_bytes == NULL || slot_nbytes != l->numel * es) {
        st = rf_err_set(err, RF_ERR_INVALID,
                        "verify: %s slot %s: %zu bytes given, the slot has %llu", mname,
                        slot_label(l), slot_nbytes, (unsigned long long)(l->numel * es));
        goto out;
    }
    const unsigned char *act = slot_bytes;
    const unsigned char *src = NULL;
    float rq_s[3] = {0, 0, 0}, rq_max = 0.0f;
    int rq = !use_gen && requant_slot(l, opts), rq_seg = 0;
    if (rq && (st = requant_scales(inv, l, tensor_bytes, ctx, opts, rq_s, &rq_max, err)) != RF_OK)
        goto out;
    int cur = -1;
    rf_dtype_t sdt = dt;
    uint64_t hash = 0, bad = 0;
    rf_ref_elem_t first = {RF_REF_PAD, -1, 0};
    uint64_t first_e = 0;
    uint32_t first_exp = 0, first_act = 0;
    for (uint64_t e = 0; e < l->numel; e++) {
        rf_ref_elem_t x;
        uint32_t exp, a = load_bits(act + e * es, es);
        rf_ref_locator_at(l, e, &x);
        if (x.kind == RF_REF_PAD) {
            exp = 0;
        } else {
            if (x.tensor != cur) {
                cur = x.tensor;
                for (int k = 0; rq && k < l->nseg; k++)
                    if (l->bt[k] == cur)
                        rq_seg = k;
                if (use_gen) {
                    hash = rf_gen_name_hash(inv->tensors[cur].name);
                } else {
                    /* the bytes first: a dtype callback may only know them once fetched */
                    src = tensor_bytes(ctx, cur);
                    if (src == NULL) {
                        st = rf_err_set(err, RF_ERR_MISSING, "verify: no source bytes for %s",
                                        inv->tensors[cur].name);
                        goto out;
                    }
                    sdt = src_dtype(inv, opts, ctx, cur);
                    if (sdt != dt &&
                        !(dt == RF_DTYPE_F32 && (sdt == RF_DTYPE_BF16 || sdt == RF_DTYPE_F16))) {
                        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                                        "verify: %s slot %s is %s but %s comes as %s", mname,
                                        slot_label(l), rf_dtype_name(dt), inv->tensors[cur].name,
                                        rf_dtype_name(sdt));
                        goto out;
                    }
                }
            }
            if (use_gen)
                exp = rf_gen_value_bits(hash, x.index, step, dt);
            else if (sdt != dt) /* bf16 / f16 file scale -> f32 slot, exactly */
                exp = bits_of_f32(load_f32(src, sdt, x.index));
            else
                exp = load_bits(src + x.index * es, es);
            if (fnuz && exp == 0x80)
                exp = 0x00;
            if (rq && dt == RF_DTYPE_F8_E4M3)
                exp = rf_ref_fp8_requant((uint8_t)exp, rq_s[rq_seg], rq_max);
            else if (rq)
                exp = bits_of_f32(rq_max);
        }
        if (exp != a) {
            if (bad++ == 0) {
                first = x;
                first_e = e;
                first_exp = exp;
                first_act = a;
            }
        }
    }
    if (mismatches_p != NULL)
        *mismatches_p = bad;
    if (bad > 0)
        st = rf_err_set(err, RF_ERR_VERIFY,
                        "verify: %s slot %s on tp rank %d/%d dp rank %d ep rank %d: element %llu "
                        "= %s[%llu] expected 0x%0*x got 0x%0*x; %llu of %llu elements wrong",
                        mname, slot_label(l), rc->tp_rank, rc->tp, rc->dp_rank, rc->ep_rank,
                        (unsigned long long)first_e,
                        first.kind == RF_REF_PAD ? "padding" : inv->tensors[first.tensor].name,
                        (unsigned long long)first.index, (int)(2 * es), first_exp, (int)(2 * es),
                        first_act, (unsigned long long)bad, (unsigned long long)l->numel);
out:
    rf_ref_locator_destroy(l);
    return st;
}

rf_status_t rf_verify_slot_ex(const rf_inventory_t *inv, int module, int slot,
                              const rf_rollout_coords_t *rc, const void *slot_bytes,
                              size_t slot_nbytes, rf_tensor_bytes_fn tensor_bytes, void *ctx,
                              const rf_verify_opts_t *opts, uint64_t *mismatches_p, rf_err_t *err)
{
    if (tensor_bytes == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "verify: no tensor source");
    return verify_common(inv, module, slot, rc, slot_bytes, slot_nbytes, tensor_bytes, ctx, opts, 0,
                         0, mismatches_p, err);
}

rf_status_t rf_verify_slot(const rf_inventory_t *inv, int module, int slot,
                           const rf_rollout_coords_t *rc, const void *slot_bytes,
                           size_t slot_nbytes, rf_tensor_bytes_fn tensor_bytes, void *ctx,
                           uint64_t *mismatches_p, rf_err_t *err)
{
    return rf_verify_slot_ex(inv, module, slot, rc, slot_bytes, slot_nbytes, tensor_bytes, ctx,
                             NULL, mismatches_p, err);
}

rf_status_t rf_verify_slot_generator(const rf_inventory_t *inv, int module, int slot,
                                     const rf_rollout_coords_t *rc, const void *slot_bytes,
                                     size_t slot_nbytes, uint64_t step, uint64_t *mismatches_p,
                                     rf_err_t *err)
{
    return verify_common(inv, module, slot, rc, slot_bytes, slot_nbytes, NULL, NULL, NULL, 1, step,
                         mismatches_p, err);
}

/* ---- the dequantization oracle --------------------------------------------------------- */

/* A whole float copy of a scale source (the callbacks lend bytes only until their next call). */
static rf_status_t copy_scales(const void *bytes, rf_dtype_t dt, uint64_t n, float **out_p,
                               const char *what, rf_err_t *err)
{
    if (bytes == NULL)
        return rf_err_set(err, RF_ERR_MISSING, "dequant: no bytes for %s", what);
    if (dt != RF_DTYPE_F32 && dt != RF_DTYPE_BF16 && dt != RF_DTYPE_F16)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "dequant: %s scales are %s", what,
                          rf_dtype_name(dt));
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (f == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "dequant: out of memory");
    for (uint64_t i = 0; i < n; i++)
        f[i] = load_f32(bytes, dt, i);
    free(*out_p);
    *out_p = f;
    return RF_OK;
}

static int same_value(float a, float b)
{
    return a == b || (isnan(a) && isnan(b));
}

/* Checkpoint tensor name of the scale that belongs to weight tensor `wname`. */
static rf_status_t scale_tensor_of(const rf_inventory_t *inv, const char *wname, rf_quant_t q,
                                   int *t_p, rf_err_t *err)
{
    char prefix[RF_NAME_MAX];
    const char *sfx = q == RF_QUANT_WNA16 ? ".weight_packed" : ".weight";
    size_t n = strlen(wname), sl = strlen(sfx);
    if (n <= sl || strcmp(wname + n - sl, sfx) != 0)
        return rf_err_set(err, RF_ERR_INTERNAL, "dequant: %s does not end in %s", wname, sfx);
    memcpy(prefix, wname, n - sl);
    prefix[n - sl] = '\0';
    return find_tensor(inv, prefix, q == RF_QUANT_FP8_BLOCK ? ".weight_scale_inv" : ".weight_scale",
                       t_p, err);
}

typedef struct dq_first {
    uint64_t count;
    int tensor;
    uint64_t index;
    float rank_v, ckpt_v;
} dq_first_t;

/* One weight slot (lw) with its scale slot (ls). */
static rf_status_t dequant_pair(const rf_inventory_t *inv, const rf_ref_locator_t *lw,
                                const rf_ref_locator_t *ls, rf_slot_bytes_fn slot_bytes,
                                rf_tensor_bytes_fn tensor_bytes, void *ctx,
                                const rf_verify_opts_t *opts, dq_first_t *f, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    int fp8 = lw->quant == RF_QUANT_FP8_BLOCK, rowq = fp8_rows_quant(lw->quant);
    int chan = lw->quant == RF_QUANT_FP8_CHANNEL;
    int module = lw->module;
    float *rscale = NULL, *cscale = NULL;
    /* fp8-tensor fused modules under RF_VERIFY_FP8_REQUANT_MAX: the checkpoint side is the
     * checkpoint requantized to the max shard scale (the bytes first: they are lent) */
    float rq_s[3] = {0, 0, 0}, rq_max = 0.0f, rq_cur = 0.0f;
    int rq = requant_slot(lw, opts);
    if (rq)
        RF_CHECK(requant_scales(inv, lw, tensor_bytes, ctx, opts, rq_s, &rq_max, err));
    /* rank side: the scale slot first (copied), then the weight slot (borrowed) */
    const void *sb = slot_bytes(ctx, module, ls->slot);
    RF_CHECK(copy_scales(sb, ls->shape.dtype, ls->numel, &rscale, ls->shape.name, err));
    const unsigned char *wb = slot_bytes(ctx, module, lw->slot);
    if (wb == NULL) {
        free(rscale);
        return rf_err_set(err, RF_ERR_MISSING, "dequant: no bytes for slot %s of %s",
                          lw->shape.name, inv->modules[module].name);
    }
    /* local logical geometry per block: R rows (n) x Kl columns (k) */
    int64_t R = lw->R, Kl = fp8 || rowq ? lw->C : lw->C * 8;
    int64_t G = fp8 ? 128 : (ls->C > 0 ? Kl / ls->C : 1);
    int cur = -1, cur_s = -1;
    const unsigned char *cw = NULL;
    int64_t cK = 0, cKs = 0;
    for (int64_t b = 0; b < lw->nblk && st == RF_OK; b++)
        for (int64_t n = 0; n < R && st == RF_OK; n++)
            for (int64_t k = 0; k < Kl; k++) {
                float rv, cv;
                /* where the weight element (or its packed word) sits in the weight slot */
                int64_t wc = fp8 || rowq ? k : k / 8;
                uint64_t we = (uint64_t)(b * R * lw->C) +
                              (uint64_t)(lw->kfirst ? wc * R + n : n * lw->C + wc);
                int64_t sc = k / G;
                uint64_t se = (uint64_t)(b * ls->R * ls->C) +
                              (uint64_t)(ls->kfirst ? sc * ls->R + (fp8 ? n / 128 : n)
                                                    : (fp8 ? n / 128 : n) * ls->C + sc);
                if (rowq) {
                    /* per channel: the row's scale; per tensor: the row's shard's */
                    int sg = 0;
                    while (!chan && sg + 1 < lw->nseg && n >= lw->seg[sg + 1].dst0)
                        sg++;
                    se = chan ? (uint64_t)n : (uint64_t)sg;
                    rv = rf_ref_e4m3fn_to_f32(wb[we]) * rscale[se];
                } else if (fp8) {
                    rv = rf_ref_e4m3fn_to_f32(wb[we]) * rscale[se];
                } else {
                    int32_t word;
                    memcpy(&word, wb + we * 4, 4);
                    rv = (float)rf_ref_int4_at(&word, k % 8) * rscale[se];
                }
                /* checkpoint side, by global coordinates */
                rf_ref_elem_t x;
                rf_ref_locator_at(lw, we, &x);
                if (x.tensor != cur) {
                    int ts = 0;
                    cur = x.tensor;
                    st = scale_tensor_of(inv, inv->tensors[cur].name, lw->quant, &ts, err);
                    for (int k2 = 0; rq && k2 < lw->nseg; k2++)
                        if (lw->bt[k2] == cur)
                            rq_cur = rq_s[k2];
                    if (st != RF_OK)
                        break;
                    if (ts != cur_s) {
                        cur_s = ts;
                        /* bytes before dtype (argument order is unspecified in C) */
                        const void *sbytes = tensor_bytes(ctx, ts);
                        st = copy_scales(sbytes, src_dtype(inv, opts, ctx, ts),
                                         inv->tensors[ts].numel, &cscale, inv->tensors[ts].name,
                                         err);
                        if (st != RF_OK)
                            break;
                        cKs = tensor_width(&inv->tensors[ts]);
                    }
                    cw = tensor_bytes(ctx, cur);
                    if (cw == NULL) {
                        st = rf_err_set(err, RF_ERR_MISSING, "dequant: no bytes for %s",
                                        inv->tensors[cur].name);
                        break;
                    }
                    if (src_dtype(inv, opts, ctx, cur) != inv->tensors[cur].dtype) {
                        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                                        "dequant: %s comes as %s, the oracle compares %s",
                                        inv->tensors[cur].name,
                                        rf_dtype_name(src_dtype(inv, opts, ctx, cur)),
                                        rf_dtype_name(inv->tensors[cur].dtype));
                        break;
                    }
                    cK = tensor_width(&inv->tensors[cur]) * (fp8 || rowq ? 1 : 8);
                }
                int64_t gn, gk;
                if (rowq) {
                    gn = (int64_t)x.index / cK;
                    gk = (int64_t)x.index % cK;
                    uint8_t cq = cw[x.index];
                    float cs = cscale[chan ? gn : 0];
                    if (rq) /* rq_cur == cs: the shard's own checkpoint scale */
                        cv = rf_ref_e4m3fn_to_f32(rf_ref_fp8_requant(cq, rq_cur, rq_max)) * rq_max;
                    else
                        cv = rf_ref_e4m3fn_to_f32(cq) * cs;
                } else if (fp8) {
                    gn = (int64_t)x.index / cK;
                    gk = (int64_t)x.index % cK;
                    cv = rf_ref_e4m3fn_to_f32(cw[x.index]) * cscale[(gn / 128) * cKs + gk / 128];
                } else {
                    int32_t word;
                    gn = (int64_t)x.index / (cK / 8);
                    gk = ((int64_t)x.index % (cK / 8)) * 8 + k % 8;
                    memcpy(&word, cw + x.index * 4, 4);
                    cv = (float)rf_ref_int4_at(&word, k % 8) * cscale[gn * cKs + gk / G];
                }
                if (!same_value(rv, cv) && f->count++ == 0) {
                    f->tensor = cur;
                    f->index = (uint64_t)(gn * cK + gk);
                    f->rank_v = rv;
                    f->ckpt_v = cv;
                }
            }
    free(rscale);
    free(cscale);
    return st;
}

rf_status_t rf_verify_dequant_module(const rf_inventory_t *inv, int module,
                                     const rf_rollout_coords_t *rc, rf_slot_bytes_fn slot_bytes,
                                     rf_tensor_bytes_fn tensor_bytes, void *ctx,
                                     const rf_verify_opts_t *opts, uint64_t *mismatches_p,
                                     rf_err_t *err)
{
    rf_slot_shape_t shapes[RF_MODULE_MAX_SLOTS];
    rf_ref_locator_t *loc[RF_MODULE_MAX_SLOTS] = {0};
    int n = 0;
    rf_status_t st;
    dq_first_t f = {0, -1, 0, 0, 0};
    if (inv == NULL || slot_bytes == NULL || tensor_bytes == NULL || module < 0 ||
        module >= inv->nmodules)
        return rf_err_set(err, RF_ERR_INVALID, "dequant: bad arguments");
    RF_CHECK(rf_module_slots(inv, module, rc, shapes, &n, err));
    for (int s = 0; s < n; s++)
        RF_CHECK_GOTO(rf_ref_locator_create(inv, module, s, rc, &loc[s], err), st, out);
    st = RF_OK;
    /* pairs: a weight-side slot followed by its scale slot (slot order of DESIGN.md 7) */
    for (int s = 0; s + 1 < n && st == RF_OK; s++) {
        const char *p = loc[s]->param;
        if (loc[s]->quant == RF_QUANT_NONE || loc[s]->nblk == 0)
            continue;
        if ((strcmp(p, "weight") == 0 && strcmp(loc[s + 1]->param, "weight_scale_inv") == 0) ||
            (strcmp(p, "weight") == 0 && fp8_rows_quant(loc[s]->quant) &&
             strcmp(loc[s + 1]->param, "weight_scale") == 0) ||
            (strcmp(p, "weight_packed") == 0 && strcmp(loc[s + 1]->param, "weight_scale") == 0))
            st =
                dequant_pair(inv, loc[s], loc[s + 1], slot_bytes, tensor_bytes, ctx, opts, &f, err);
    }
    if (st == RF_OK) {
        if (mismatches_p != NULL)
            *mismatches_p = f.count;
        if (f.count > 0)
            st = rf_err_set(err, RF_ERR_VERIFY,
                            "dequant: %s on tp rank %d/%d dp rank %d ep rank %d: %s element %llu "
                            "dequantizes to %.9g on the rank and %.9g in the checkpoint; %llu "
                            "elements differ",
                            inv->modules[module].name, rc->tp_rank, rc->tp, rc->dp_rank,
                            rc->ep_rank, inv->tensors[f.tensor].name, (unsigned long long)f.index,
                            (double)f.rank_v, (double)f.ckpt_v, (unsigned long long)f.count);
    }
out:
    for (int s = 0; s < n; s++)
        rf_ref_locator_destroy(loc[s]);
    return st;
}

/* ---- DeepSeek's absorbed MLA matrices ---------------------------------------------------- */

/* The bits of value v in dtype dt (bf16 / f16 round to nearest even), as a 32-bit pattern. */
static uint32_t mla_bits(float v, rf_dtype_t dt)
{
    if (dt == RF_DTYPE_BF16)
        return rf_f32_to_bf16(v);
    if (dt == RF_DTYPE_F16)
        return rf_f32_to_f16(v);
    return bits_of_f32(v);
}

rf_status_t rf_verify_mla_derived(const rf_inventory_t *inv, int module, const char *slot_name,
                                  const void *w, rf_dtype_t wdt, int64_t rows, const float *scale,
                                  const void *got, uint64_t nbytes, rf_err_t *err)
{
    const rf_model_config_t *c = &inv->cfg;
    const char *mn = inv->modules[module].name;
    int64_t P = c->qk_nope_head_dim, Dv = c->v_head_dim, Lkv = c->kv_lora_rank, hw = P + Dv;
    bool uk = strcmp(slot_name, "W_UK_T") == 0;
    rf_dtype_t dt = c->dtype;
    size_t es = rf_dtype_size(dt);
    if ((!uk && strcmp(slot_name, "W_UV") != 0) || hw <= 0 || rows % hw != 0 ||
        (wdt == RF_DTYPE_F8_E4M3) != (scale != NULL) || (wdt != RF_DTYPE_F8_E4M3 && wdt != dt))
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s: %s is not an MLA derived slot of "
                          "a %s [%lld, %lld] kv_b_proj",
                          mn, slot_name, rf_dtype_name(wdt), (long long)rows, (long long)Lkv);
    uint64_t n = (uint64_t)(rows / hw) * (uint64_t)(uk ? P : Dv) * (uint64_t)Lkv;
    if (n * es != nbytes)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s.%s holds %llu bytes, not %llu",
                          mn, slot_name, (unsigned long long)nbytes,
                          (unsigned long long)(n * es));
    int64_t scols = (Lkv + 127) / 128;
    uint64_t bad = 0, first = 0;
    uint32_t want_first = 0, got_first = 0;
    for (uint64_t x = 0; x < n; x++) {
        /* the slot's flat index -> (head, row within the head's block, latent column) */
        int64_t h, row, l;
        if (uk) {
            h = (int64_t)(x / (uint64_t)(P * Lkv));
            row = (int64_t)(x / (uint64_t)Lkv) % P;
            l = (int64_t)(x % (uint64_t)Lkv);
        } else {
            h = (int64_t)(x / (uint64_t)(Lkv * Dv));
            l = (int64_t)(x / (uint64_t)Dv) % Lkv;
            row = P + (int64_t)(x % (uint64_t)Dv);
        }
        int64_t src = h * hw + row;
        uint32_t want, have = load_bits((const unsigned char *)got + x * es, es);
        if (scale == NULL) {
            want = load_bits((const unsigned char *)w + (uint64_t)(src * Lkv + l) * es, es);
        } else {
            float q = rf_ref_e4m3fn_to_f32(((const uint8_t *)w)[src * Lkv + l]);
            want = mla_bits(q * scale[(src / 128) * scols + l / 128], dt);
        }
        if (want != have && bad++ == 0) {
            first = x;
            want_first = want;
            got_first = have;
        }
    }
    if (bad)
        return rf_err_set(err, RF_ERR_VERIFY,
                          "reference: %s.%s: element %llu is 0x%x, a recomputation from the "
                          "loaded kv_b_proj gives 0x%x (%llu of %llu elements differ)",
                          mn, slot_name, (unsigned long long)first, got_first, want_first,
                          (unsigned long long)bad, (unsigned long long)n);
    return RF_OK;
}
