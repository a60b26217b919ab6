/*
 * refit: the scalar reference locator and slot verification (DESIGN.md sections 5 and 12).
 *
 * This file is the independent oracle: it shares no code with the fast loaders. It finds
 * checkpoint tensors by their Hugging Face names (derived from the engine module's name), derives
 * each slot's shape from DESIGN.md section 5 itself and cross-checks it against
 * rf_module_slots(), and maps slot elements to checkpoint elements one at a time with plain
 * index arithmetic: slow, and meant to be obviously right.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/generator.h"
#include "refit/verify.h"

struct rf_ref_locator {
    const rf_inventory_t *inv;
    int module, slot;
    rf_module_kind_t kind;
    int is_bias;       /* a 1-D bias slot */
    rf_slot_shape_t shape;
    uint64_t numel;
    int64_t cols;      /* elements per slot row (= per source row): K, or 1 for a bias */
    int t[3];          /* q, k, v / gate, up / the one tensor */
    int64_t T, r;
    /* QKV, in rows */
    int64_t q_rows, kv_rows, q_src0, kv_src0;
    /* merged gate_up */
    int64_t half, half_src0;
    /* row parallel */
    int64_t K, Kp, k0;
    /* vocab */
    int64_t V, vrow0;
    /* MoE */
    int64_t E, El, I, Ip, H, rm;
    int *moe_t;        /* owned: El x 3 tensor indices (gate, up, down) of local experts */
    int64_t *moe_ge;   /* owned: El global expert ids */
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
        return rf_err_set(err, RF_ERR_MISSING, "reference: checkpoint tensor %s is not in the "
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
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "reference: %s: %s %lld is not divisible by %lld", m->name, what,
                          (long long)a, (long long)b);
    return RF_OK;
}

/* Base of a fused module's name: "x.self_attn.qkv_proj" -> "x.self_attn." */
static rf_status_t strip_suffix(const rf_module_t *m, const char *sfx, char *out, size_t n,
                                rf_err_t *err)
{
    size_t len = strlen(m->name), sl = strlen(sfx);
    if (len < sl || strcmp(m->name + len - sl, sfx) != 0 || len - sl >= n)
        return rf_err_set(err, RF_ERR_INVALID, "reference: module %s does not end in %s",
                          m->name, sfx);
    memcpy(out, m->name, len - sl);
    out[len - sl] = '\0';
    return RF_OK;
}

static void set_shape(rf_ref_locator_t *l, const char *name, rf_dtype_t dt, int ndim,
                      const int64_t *shape)
{
    memset(&l->shape, 0, sizeof(l->shape));
    snprintf(l->shape.name, sizeof(l->shape.name), "%s", name);
    l->shape.dtype = dt;
    l->shape.ndim = ndim;
    l->numel = 1;
    for (int i = 0; i < ndim; i++) {
        l->shape.shape[i] = shape[i];
        l->numel *= (uint64_t)shape[i];
    }
}

static rf_status_t check_tensor_shape(const rf_tensor_t *t, int ndim, int64_t d0, int64_t d1,
                                      rf_err_t *err)
{
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim > 1 && t->shape[1] != d1))
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "reference: %s has %d dims [%lld, %lld], expected %d dims [%lld, %lld]",
                          t->name, t->ndim, (long long)t->shape[0],
                          (long long)(t->ndim > 1 ? t->shape[1] : 0), ndim, (long long)d0,
                          (long long)(ndim > 1 ? d1 : 0));
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

static rf_status_t loc_qkv(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    const rf_model_config_t *c = &l->inv->cfg;
    char base[RF_NAME_MAX];
    const char *sfx = l->slot == 0 ? ".weight" : ".bias";
    static const char *names[3] = {"q_proj", "k_proj", "v_proj"};
    int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, d = c->head_dim;
    RF_CHECK(strip_suffix(m, "qkv_proj", base, sizeof(base), err));
    if (l->slot > 1 || (l->slot == 1 && !has_tensor(l->inv, base, "q_proj.bias")))
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    for (int s = 0; s < 3; s++) {
        char suffix[64];
        snprintf(suffix, sizeof(suffix), "%s%s", names[s], sfx);
        RF_CHECK(find_tensor(l->inv, base, suffix, &l->t[s], err));
    }
    RF_CHECK(need_div(m, "num_attention_heads", nh, l->T, err));
    if (l->T <= nkv)
        RF_CHECK(need_div(m, "num_key_value_heads", nkv, l->T, err));
    else
        RF_CHECK(need_div(m, "tp (kv heads replicated)", l->T, nkv, err));
    int64_t K = l->inv->tensors[l->t[0]].shape[1];
    int64_t nh_p = nh / l->T, rep = l->T / nkv > 1 ? l->T / nkv : 1;
    int64_t nkv_p = nkv / l->T > 1 ? nkv / l->T : 1;
    for (int s = 0; s < 3; s++)
        RF_CHECK(check_tensor_shape(&l->inv->tensors[l->t[s]], l->slot == 0 ? 2 : 1,
                                    (s == 0 ? nh : nkv) * d, K, err));
    l->q_rows = nh_p * d;
    l->kv_rows = nkv_p * d;
    l->q_src0 = l->r * nh_p * d;
    l->kv_src0 = (l->r / rep) * nkv_p * d;
    int64_t rows = l->q_rows + 2 * l->kv_rows;
    l->cols = l->slot == 0 ? K : 1;
    rf_dtype_t dt = l->inv->tensors[l->t[0]].dtype;
    if (l->slot == 0)
        set_shape(l, "weight", dt, 2, (int64_t[]){rows, K});
    else
        set_shape(l, "bias", dt, 1, (int64_t[]){rows});
    return RF_OK;
}

static rf_status_t loc_merged(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    char base[RF_NAME_MAX];
    const char *sfx = l->slot == 0 ? ".weight" : ".bias";
    char suffix[64];
    RF_CHECK(strip_suffix(m, "gate_up_proj", base, sizeof(base), err));
    if (l->slot > 1 || (l->slot == 1 && !has_tensor(l->inv, base, "gate_proj.bias")))
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    snprintf(suffix, sizeof(suffix), "gate_proj%s", sfx);
    RF_CHECK(find_tensor(l->inv, base, suffix, &l->t[0], err));
    snprintf(suffix, sizeof(suffix), "up_proj%s", sfx);
    RF_CHECK(find_tensor(l->inv, base, suffix, &l->t[1], err));
    const rf_tensor_t *g = &l->inv->tensors[l->t[0]];
    int64_t I = g->shape[0], K = g->ndim > 1 ? g->shape[1] : 1;
    RF_CHECK(check_tensor_shape(&l->inv->tensors[l->t[1]], g->ndim, I, K, err));
    RF_CHECK(need_div(m, "intermediate_size", I, l->T, err));
    l->half = I / l->T;
    l->half_src0 = l->r * l->half;
    l->cols = l->slot == 0 ? K : 1;
    if (l->slot == 0)
        set_shape(l, "weight", g->dtype, 2, (int64_t[]){2 * l->half, K});
    else
        set_shape(l, "bias", g->dtype, 1, (int64_t[]){2 * l->half});
    return RF_OK;
}

static rf_status_t loc_row(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    if (l->slot > 1 || (l->slot == 1 && !has_tensor(l->inv, m->name, ".bias")))
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    RF_CHECK(find_tensor(l->inv, m->name, l->slot == 0 ? ".weight" : ".bias", &l->t[0], err));
    const rf_tensor_t *t = &l->inv->tensors[l->t[0]];
    if (l->slot == 1) {
        l->cols = 1;
        set_shape(l, "bias", t->dtype, 1, t->shape);
        return RF_OK;
    }
    RF_CHECK(check_tensor_shape(t, 2, t->shape[0], t->shape[1], err));
    l->K = t->shape[1];
    RF_CHECK(need_div(m, "input size", l->K, l->T, err));
    l->Kp = l->K / l->T;
    l->k0 = l->r * l->Kp;
    l->cols = l->Kp;
    set_shape(l, "weight", t->dtype, 2, (int64_t[]){t->shape[0], l->Kp});
    return RF_OK;
}

static rf_status_t loc_vocab(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    if (l->slot != 0)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    RF_CHECK(find_tensor(l->inv, m->name, ".weight", &l->t[0], err));
    const rf_tensor_t *t = &l->inv->tensors[l->t[0]];
    RF_CHECK(check_tensor_shape(t, 2, t->shape[0], t->shape[1], err));
    l->V = t->shape[0];
    int64_t Vp = (l->V + 63) / 64 * 64;
    RF_CHECK(need_div(m, "padded vocab", Vp, l->T, err));
    l->vrow0 = l->r * (Vp / l->T);
    l->cols = t->shape[1];
    set_shape(l, "weight", t->dtype, 2, (int64_t[]){Vp / l->T, t->shape[1]});
    return RF_OK;
}

static rf_status_t loc_replicated(rf_ref_locator_t *l, const rf_module_t *m, rf_err_t *err)
{
    if (l->slot != 0)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    RF_CHECK(find_tensor(l->inv, m->name, ".weight", &l->t[0], err));
    const rf_tensor_t *t = &l->inv->tensors[l->t[0]];
    l->cols = 1;
    set_shape(l, "weight", t->dtype, t->ndim, t->shape);
    return RF_OK;
}

static rf_status_t loc_moe(rf_ref_locator_t *l, const rf_module_t *m,
                           const rf_rollout_coords_t *rc, rf_err_t *err)
{
    char suffix[64];
    if (l->slot > 1)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s has no slot %d", m->name, l->slot);
    l->E = l->inv->cfg.num_experts;
    if (l->E <= 0)
        return rf_err_set(err, RF_ERR_INVALID, "reference: %s: no experts", m->name);
    int t0 = -1;
    RF_CHECK(find_tensor(l->inv, m->name, ".0.gate_proj.weight", &t0, err));
    const rf_tensor_t *g = &l->inv->tensors[t0];
    l->I = g->shape[0];
    l->H = g->shape[1];
    int64_t Tm = rc->ep > 1 ? 1 : (int64_t)rc->tp * rc->dp;
    l->rm = rc->ep > 1 ? 0 : (int64_t)rc->dp_rank * rc->tp + rc->tp_rank;
    RF_CHECK(need_div(m, "moe_intermediate_size", l->I, Tm, err));
    l->Ip = l->I / Tm;
    l->El = ref_local_count(l->E, rc);
    l->moe_t = malloc((size_t)(l->El > 0 ? l->El : 1) * 3 * sizeof(int));
    l->moe_ge = malloc((size_t)(l->El > 0 ? l->El : 1) * sizeof(int64_t));
    if (l->moe_t == NULL || l->moe_ge == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "reference: out of memory");
    static const char *names[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int64_t i = 0; i < l->El; i++) {
        l->moe_ge[i] = ref_local_expert(l->E, rc, i);
        for (int s = 0; s < 3; s++) {
            snprintf(suffix, sizeof(suffix), ".%lld.%s.weight", (long long)l->moe_ge[i],
                     names[s]);
            RF_CHECK(find_tensor(l->inv, m->name, suffix, &l->moe_t[i * 3 + s], err));
            RF_CHECK(check_tensor_shape(&l->inv->tensors[l->moe_t[i * 3 + s]], 2,
                                        s < 2 ? l->I : l->H, s < 2 ? l->H : l->I, err));
        }
    }
    if (l->slot == 0)
        set_shape(l, "w13_weight", g->dtype, 3, (int64_t[]){l->El, 2 * l->Ip, l->H});
    else
        set_shape(l, "w2_weight", g->dtype, 3, (int64_t[]){l->El, l->H, l->Ip});
    return RF_OK;
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
    l->t[0] = l->t[1] = l->t[2] = -1;
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
    default:
        st = rf_err_set(err, RF_ERR_UNSUPPORTED, "reference: %s: module kind %d", m->name,
                        (int)m->kind);
    }
    if (st != RF_OK)
        goto fail;
    l->is_bias = strcmp(l->shape.name, "bias") == 0;
    /* the slot as the model contract shapes it must be the slot derived here */
    RF_CHECK_GOTO(rf_module_slots(inv, module, rc, shapes, &nslots, err), st, fail);
    if (slot >= nslots) {
        st = rf_err_set(err, RF_ERR_MISMATCH, "reference: %s: rf_module_slots gives %d slots, "
                                              "the reference expects slot %d (%s)",
                        m->name, nslots, slot, l->shape.name);
        goto fail;
    }
    const rf_slot_shape_t *s = &shapes[slot];
    int same = s->ndim == l->shape.ndim && s->dtype == l->shape.dtype &&
               strcmp(s->name, l->shape.name) == 0;
    for (int i = 0; same && i < s->ndim; i++)
        same = s->shape[i] == l->shape.shape[i];
    if (!same) {
        st = rf_err_set(err, RF_ERR_MISMATCH,
                        "reference: %s slot %d: rf_module_slots gives %s %s [%lld, %lld, %lld] "
                        "(%d dims), the reference derives %s %s [%lld, %lld, %lld] (%d dims)",
                        m->name, slot, s->name, rf_dtype_name(s->dtype), (long long)s->shape[0],
                        (long long)s->shape[1], (long long)s->shape[2], s->ndim, l->shape.name,
                        rf_dtype_name(l->shape.dtype), (long long)l->shape.shape[0],
                        (long long)l->shape.shape[1], (long long)l->shape.shape[2],
                        l->shape.ndim);
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
    free(loc->moe_t);
    free(loc->moe_ge);
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
    int64_t i, j, row;
    out->kind = RF_REF_TENSOR;
    switch (l->kind) {
    case RF_MOD_REPLICATED:
        out->tensor = l->t[0];
        out->index = e;
        return;
    case RF_MOD_ROW:
        out->tensor = l->t[0];
        if (l->is_bias) {
            out->index = e; /* full copy on every rank */
            return;
        }
        i = (int64_t)(e / (uint64_t)l->Kp);
        j = (int64_t)(e % (uint64_t)l->Kp);
        out->index = (uint64_t)(i * l->K + l->k0 + j);
        return;
    case RF_MOD_VOCAB:
        i = (int64_t)(e / (uint64_t)l->cols);
        j = (int64_t)(e % (uint64_t)l->cols);
        row = l->vrow0 + i;
        if (row >= l->V) {
            out->kind = RF_REF_PAD;
            out->tensor = -1;
            out->index = 0;
            return;
        }
        out->tensor = l->t[0];
        out->index = (uint64_t)(row * l->cols + j);
        return;
    case RF_MOD_QKV:
        i = (int64_t)(e / (uint64_t)l->cols);
        j = (int64_t)(e % (uint64_t)l->cols);
        if (i < l->q_rows) {
            out->tensor = l->t[0];
            row = l->q_src0 + i;
        } else if (i < l->q_rows + l->kv_rows) {
            out->tensor = l->t[1];
            row = l->kv_src0 + (i - l->q_rows);
        } else {
            out->tensor = l->t[2];
            row = l->kv_src0 + (i - l->q_rows - l->kv_rows);
        }
        out->index = (uint64_t)(row * l->cols + j);
        return;
    case RF_MOD_MERGED:
        i = (int64_t)(e / (uint64_t)l->cols);
        j = (int64_t)(e % (uint64_t)l->cols);
        if (i < l->half) {
            out->tensor = l->t[0];
            row = l->half_src0 + i;
        } else {
            out->tensor = l->t[1];
            row = l->half_src0 + (i - l->half);
        }
        out->index = (uint64_t)(row * l->cols + j);
        return;
    case RF_MOD_MOE: {
        if (l->slot == 0) { /* w13 (E_l, 2 I_p, H) */
            uint64_t per = (uint64_t)(2 * l->Ip * l->H);
            int64_t li = (int64_t)(e / per), rem = (int64_t)(e % per);
            i = rem / l->H;
            j = rem % l->H;
            if (i < l->Ip) {
                out->tensor = l->moe_t[li * 3 + 0];
                row = l->rm * l->Ip + i;
            } else {
                out->tensor = l->moe_t[li * 3 + 1];
                row = l->rm * l->Ip + (i - l->Ip);
            }
            out->index = (uint64_t)(row * l->H + j);
        } else { /* w2 (E_l, H, I_p) */
            uint64_t per = (uint64_t)(l->H * l->Ip);
            int64_t li = (int64_t)(e / per), rem = (int64_t)(e % per);
            int64_t h = rem / l->Ip, c = rem % l->Ip;
            out->tensor = l->moe_t[li * 3 + 2];
            out->index = (uint64_t)(h * l->I + l->rm * l->Ip + c);
        }
        return;
    }
    }
    out->kind = RF_REF_PAD; /* unreachable: the create switch refused other kinds */
    out->tensor = -1;
    out->index = 0;
}

void rf_ref_locator_range(const rf_ref_locator_t *l, int tensor, uint64_t *begin_p,
                          uint64_t *end_p)
{
    *begin_p = *end_p = 0;
    if (l->kind == RF_MOD_MOE) {
        uint64_t per = l->slot == 0 ? (uint64_t)(2 * l->Ip * l->H) : (uint64_t)(l->H * l->Ip);
        for (int64_t li = 0; li < l->El; li++) {
            int hit = l->slot == 0 ? (l->moe_t[li * 3] == tensor || l->moe_t[li * 3 + 1] == tensor)
                                   : l->moe_t[li * 3 + 2] == tensor;
            if (hit) {
                *begin_p = (uint64_t)li * per;
                *end_p = (uint64_t)(li + 1) * per;
                return;
            }
        }
        return;
    }
    if (tensor >= 0 && (l->t[0] == tensor || l->t[1] == tensor || l->t[2] == tensor))
        *end_p = l->numel;
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

static rf_status_t verify_common(const rf_inventory_t *inv, int module, int slot,
                                 const rf_rollout_coords_t *rc, const void *slot_bytes,
                                 size_t slot_nbytes, rf_tensor_bytes_fn tensor_bytes, void *ctx,
                                 int use_gen, uint64_t step, uint64_t *mismatches_p,
                                 rf_err_t *err)
{
    rf_ref_locator_t *l;
    rf_status_t st = RF_OK;
    RF_CHECK(rf_ref_locator_create(inv, module, slot, rc, &l, err));
    const char *mname = inv->modules[module].name;
    rf_dtype_t dt = l->shape.dtype;
    size_t es = rf_dtype_size(dt);
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
    int cur = -1;
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
                if (use_gen) {
                    hash = rf_gen_name_hash(inv->tensors[cur].name);
                } else {
                    src = tensor_bytes(ctx, cur);
                    if (src == NULL) {
                        st = rf_err_set(err, RF_ERR_MISSING, "verify: no source bytes for %s",
                                        inv->tensors[cur].name);
                        goto out;
                    }
                }
            }
            exp = use_gen ? rf_gen_value_bits(hash, x.index, step, dt)
                          : load_bits(src + x.index * es, es);
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

rf_status_t rf_verify_slot(const rf_inventory_t *inv, int module, int slot,
                           const rf_rollout_coords_t *rc, const void *slot_bytes,
                           size_t slot_nbytes, rf_tensor_bytes_fn tensor_bytes, void *ctx,
                           uint64_t *mismatches_p, rf_err_t *err)
{
    if (tensor_bytes == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "verify: no tensor source");
    return verify_common(inv, module, slot, rc, slot_bytes, slot_nbytes, tensor_bytes, ctx, 0, 0,
                         mismatches_p, err);
}

rf_status_t rf_verify_slot_generator(const rf_inventory_t *inv, int module, int slot,
                                     const rf_rollout_coords_t *rc, const void *slot_bytes,
                                     size_t slot_nbytes, uint64_t step, uint64_t *mismatches_p,
                                     rf_err_t *err)
{
    return verify_common(inv, module, slot, rc, slot_bytes, slot_nbytes, NULL, NULL, 1, step,
                         mismatches_p, err);
}
