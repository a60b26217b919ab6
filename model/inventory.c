/*
 * refit: model inventory (DESIGN.md sections 4 and 5).
 *
 * Derives every checkpoint tensor and every engine module from a parsed config. Tensors are
 * kept in manifest order within the model: (layer with embed = -1 and final = L, expert id or
 * -1, name by strcmp). Each tensor names the module, slot and fused shard that receive it, and
 * how the trainer splits it. Per-rank slot shapes follow vLLM's parallel linear classes.
 */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/hashmap.h"
#include "refit/log.h"
#include "refit/model.h"

const char *rf_module_kind_name(rf_module_kind_t k)
{
    switch (k) {
    case RF_MOD_VOCAB:
        return "vocab";
    case RF_MOD_QKV:
        return "qkv";
    case RF_MOD_MERGED:
        return "merged";
    case RF_MOD_ROW:
        return "row";
    case RF_MOD_REPLICATED:
        return "replicated";
    case RF_MOD_MOE:
        return "moe";
    case RF_MOD_COLUMN:
        return "column";
    case RF_MOD_QKV_HEADS:
        return "qkv_heads";
    case RF_MOD_REPLICATED_LINEAR:
        return "replicated_linear";
    case RF_MOD_SECTIONS:
        return "sections";
    }
    return "?";
}

const char *rf_family_layer_prefix(rf_family_t f)
{
    switch (f) {
    case RF_FAMILY_GPT_NEOX:
        return "gpt_neox.layers.";
    case RF_FAMILY_OPT:
        return "model.decoder.layers.";
    default:
        return "model.layers.";
    }
}

int rf_family_aliases(rf_family_t f, const char *stored[], const char *canonical[], int max)
{
    /* the published OPT checkpoints (facebook/opt-*) name their tensors decoder.*, what
     * transformers writes (and vLLM's modules) model.decoder.* */
    if (f != RF_FAMILY_OPT)
        return 0;
    if (max > 0) {
        stored[0] = "decoder.";
        canonical[0] = "model.decoder.";
    }
    return 1;
}

typedef struct inv_builder {
    rf_inventory_t *inv;
    int tcap, mcap;
    rf_err_t *err;
} inv_builder_t;

static int inv_add_module(inv_builder_t *b, const char *name, rf_module_kind_t kind, int layer,
                          int64_t n, int64_t k)
{
    rf_inventory_t *inv = b->inv;
    if (inv->nmodules == b->mcap) {
        int cap = b->mcap ? b->mcap * 2 : 64;
        rf_module_t *m = realloc(inv->modules, cap * sizeof(*m));
        if (m == NULL)
            return -1;
        inv->modules = m;
        b->mcap = cap;
    }
    rf_module_t *m = &inv->modules[inv->nmodules];
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    m->kind = kind;
    m->layer = layer;
    m->n = n;
    m->k = k;
    return inv->nmodules++;
}

static int inv_module_slot(rf_module_t *m, const char *slot)
{
    for (int i = 0; i < m->nslots; i++)
        if (strcmp(m->slot_names[i], slot) == 0)
            return i;
    snprintf(m->slot_names[m->nslots], sizeof(m->slot_names[0]), "%s", slot);
    return m->nslots++;
}

static rf_status_t inv_add_tensor(inv_builder_t *b, const char *name, rf_dtype_t dt, int ndim,
                                  const int64_t *shape, int layer, int expert, rf_param_t param,
                                  rf_split_t split, int module, const char *slot, int shard)
{
    rf_inventory_t *inv = b->inv;
    if (inv->ntensors == b->tcap) {
        int cap = b->tcap ? b->tcap * 2 : 256;
        rf_tensor_t *t = realloc(inv->tensors, cap * sizeof(*t));
        if (t == NULL)
            return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
        inv->tensors = t;
        b->tcap = cap;
    }
    rf_tensor_t *t = &inv->tensors[inv->ntensors++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dt;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= (uint64_t)shape[i];
    }
    t->nbytes = t->numel * rf_dtype_size(dt);
    t->layer = layer;
    t->expert = expert;
    t->param = param;
    t->split = split;
    t->module = module;
    t->slot = slot ? inv_module_slot(&inv->modules[module], slot) : -1;
    t->shard = shard;
    return RF_OK;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static rf_status_t inv_heads_linear(inv_builder_t *b, const char *prefix, rf_module_kind_t kind,
                                    int layer, int64_t n, int64_t k, int64_t heads);

/* True when the linear `prefix` is left unquantized by modules_to_not_convert / ignore:
 * an exact name, a dotted suffix ("lm_head", "mlp.gate"), or "re:<regex>" (compressed-tensors). */
static bool inv_not_converted(const rf_model_config_t *c, const char *prefix)
{
    size_t pl = strlen(prefix);
    for (int i = 0; i < c->n_not_convert; i++) {
        const char *e = c->not_convert[i];
        size_t el = strlen(e);
        if (strncmp(e, "re:", 3) == 0) {
            regex_t re;
            if (regcomp(&re, e + 3, REG_EXTENDED | REG_NOSUB) == 0) {
                bool hit = regexec(&re, prefix, 0, NULL, 0) == 0;
                regfree(&re);
                if (hit)
                    return true;
            }
            continue;
        }
        if (strcmp(prefix, e) == 0)
            return true;
        if (pl > el && prefix[pl - el - 1] == '.' && strcmp(prefix + pl - el, e) == 0)
            return true;
    }
    return false;
}

/*
 * One linear's checkpoint tensors into module m (DESIGN.md section 7): unquantized `weight`
 * (N, K); fp8-block `weight` e4m3 + `weight_scale_inv` fp32 (cdiv(N,128), cdiv(K,128));
 * wna16 `weight_packed` int32 (N, K/8) + `weight_scale` (N, K/G) + `weight_shape` int64 [2];
 * fp8-tensor `weight` e4m3 + `weight_scale` fp32 [1]; fp8-channel `weight` e4m3 +
 * `weight_scale` fp32 [N, 1] (compressed-tensors float-quantized, docs/formats.md).
 * Slot names get `sp` as prefix ("w13_" for fused experts). Biases stay unquantized.
 */
static rf_status_t inv_linear_q(inv_builder_t *b, const char *prefix, int layer, int expert,
                                int64_t n, int64_t k, bool bias, rf_split_t wsplit, int m,
                                int shard, const char *sp)
{
    char name[RF_NAME_MAX], slot[32];
    rf_inventory_t *inv = b->inv;
    rf_dtype_t dt = inv->cfg.dtype;
    rf_module_t *mod = &inv->modules[m];
    /* a row-parallel bias is replicated on the trainer; a column-type bias splits like rows */
    rf_split_t bsplit = wsplit == RF_SPLIT_COLS ? RF_SPLIT_REPLICATED : wsplit;
    rf_quant_t q = inv->quant;
    if (q != RF_QUANT_NONE && inv_not_converted(&inv->cfg, prefix))
        q = RF_QUANT_NONE;
    if (mod->nlinears++ == 0)
        mod->quant = q;
    else if (mod->quant != q)
        return rf_err_set(b->err, RF_ERR_UNSUPPORTED,
                          "inventory: %s is %s but other parts of %s are %s (modules_to_not_convert "
                          "must cover a fused module whole)",
                          prefix, rf_quant_name(q), mod->name, rf_quant_name(mod->quant));
    switch (q) {
    case RF_QUANT_NONE:
        snprintf(name, sizeof(name), "%s.weight", prefix);
        snprintf(slot, sizeof(slot), "%sweight", sp);
        RF_CHECK(inv_add_tensor(b, name, dt, 2, SHAPE(n, k), layer, expert, RF_PARAM_WEIGHT,
                                wsplit, m, slot, shard));
        break;
    case RF_QUANT_FP8_BLOCK:
        snprintf(name, sizeof(name), "%s.weight", prefix);
        snprintf(slot, sizeof(slot), "%sweight", sp);
        RF_CHECK(inv_add_tensor(b, name, RF_DTYPE_F8_E4M3, 2, SHAPE(n, k), layer, expert,
                                RF_PARAM_WEIGHT, wsplit, m, slot, shard));
        snprintf(name, sizeof(name), "%s.weight_scale_inv", prefix);
        snprintf(slot, sizeof(slot), "%sweight_scale_inv", sp);
        RF_CHECK(inv_add_tensor(b, name, RF_DTYPE_F32, 2, SHAPE((n + 127) / 128, (k + 127) / 128),
                                layer, expert, RF_PARAM_WEIGHT_SCALE_INV, wsplit, m, slot, shard));
        break;
    case RF_QUANT_FP8_TENSOR:
    case RF_QUANT_FP8_CHANNEL: {
        bool per_row = q == RF_QUANT_FP8_CHANNEL;
        if (expert >= 0)
            return rf_err_set(b->err, RF_ERR_UNSUPPORTED,
                              "inventory: %s: %s MoE experts are not supported (dense linears "
                              "only; vLLM's per-tensor FusedMoE requantizes w13 per expert)",
                              prefix, rf_quant_name(q));
        snprintf(name, sizeof(name), "%s.weight", prefix);
        RF_CHECK(inv_add_tensor(b, name, RF_DTYPE_F8_E4M3, 2, SHAPE(n, k), layer, expert,
                                RF_PARAM_WEIGHT, wsplit, m, "weight", shard));
        /* per tensor: one value, on every trainer rank; per channel: a row-parallel linear's
         * rows are whole on every rank (its K is split), so its scale is replicated like its
         * bias; a column-parallel one splits like its weight rows */
        snprintf(name, sizeof(name), "%s.weight_scale", prefix);
        if (per_row)
            RF_CHECK(inv_add_tensor(b, name, RF_DTYPE_F32, 2, SHAPE(n, 1), layer, expert,
                                    RF_PARAM_CHANNEL_SCALE, bsplit, m, "weight_scale", shard));
        else
            RF_CHECK(inv_add_tensor(b, name, RF_DTYPE_F32, 1, SHAPE(1), layer, expert,
                                    RF_PARAM_TENSOR_SCALE, RF_SPLIT_REPLICATED, m,
                                    "weight_scale", shard));
        break;
    }
    case RF_QUANT_WNA16: {
        int64_t G = inv->group_size;
        if (G <= 0 || k % G != 0 || k % 8 != 0)
            return rf_err_set(b->err, RF_ERR_TOPOLOGY,
                              "inventory: %s: K %lld must be a multiple of the group size %lld "
                              "and of 8 (wna16)",
                              prefix, (long long)k, (long long)G);
        snprintf(name, sizeof(name), "%s.weight_packed", prefix);
        snprintf(slot, sizeof(slot), "%sweight_packed", sp);
        RF_CHECK(inv_add_tensor(b, name, RF_DTYPE_I32, 2, SHAPE(n, k / 8), layer, expert,
                                RF_PARAM_WEIGHT_PACKED, wsplit, m, slot, shard));
        snprintf(name, sizeof(name), "%s.weight_scale", prefix);
        snprintf(slot, sizeof(slot), "%sweight_scale", sp);
        RF_CHECK(inv_add_tensor(b, name, dt, 2, SHAPE(n, k / G), layer, expert,
                                RF_PARAM_WEIGHT_SCALE, wsplit, m, slot, shard));
        snprintf(name, sizeof(name), "%s.weight_shape", prefix);
        RF_CHECK(inv_add_tensor(b, name, RF_DTYPE_I64, 1, SHAPE(2), layer, expert,
                                RF_PARAM_WEIGHT_SHAPE, RF_SPLIT_REPLICATED, m, NULL, shard));
        break;
    }
    }
    if (bias) {
        snprintf(name, sizeof(name), "%s.bias", prefix);
        RF_CHECK(inv_add_tensor(b, name, dt, 1, SHAPE(n), layer, expert, RF_PARAM_BIAS, bsplit, m,
                                "bias", shard));
    }
    return RF_OK;
}

static rf_status_t inv_linear(inv_builder_t *b, const char *prefix, int layer, int expert,
                              int64_t n, int64_t k, bool bias, rf_split_t wsplit, int m, int shard)
{
    return inv_linear_q(b, prefix, layer, expert, n, k, bias, wsplit, m, shard, "");
}

static rf_status_t inv_norm(inv_builder_t *b, const char *name_w, const char *module, int layer,
                            int64_t n)
{
    int m = inv_add_module(b, module, RF_MOD_REPLICATED, layer, n, 1);
    if (m < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    return inv_add_tensor(b, name_w, b->inv->cfg.dtype, 1, SHAPE(n), layer, -1, RF_PARAM_WEIGHT,
                          RF_SPLIT_REPLICATED, m, "weight", 0);
}

/* A LayerNorm `module` (weight and bias, both [n]; replicated, DESIGN.md section 5). */
static rf_status_t inv_layernorm(inv_builder_t *b, const char *module, int layer, int64_t n)
{
    char w[RF_NAME_MAX];
    rf_dtype_t dt = b->inv->cfg.dtype;
    int m = inv_add_module(b, module, RF_MOD_REPLICATED, layer, n, 1);
    if (m < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    snprintf(w, sizeof(w), "%s.weight", module);
    RF_CHECK(inv_add_tensor(b, w, dt, 1, SHAPE(n), layer, -1, RF_PARAM_WEIGHT, RF_SPLIT_REPLICATED,
                            m, "weight", 0));
    snprintf(w, sizeof(w), "%s.bias", module);
    return inv_add_tensor(b, w, dt, 1, SHAPE(n), layer, -1, RF_PARAM_BIAS, RF_SPLIT_REPLICATED, m,
                          "bias", 0);
}

/* One linear that is its own engine module (module name = checkpoint prefix). */
static rf_status_t inv_own_linear(inv_builder_t *b, const char *prefix, rf_module_kind_t kind,
                                  int layer, int64_t n, int64_t k, bool bias, rf_split_t split)
{
    int m = inv_add_module(b, prefix, kind, layer, n, k);
    if (m < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    if (kind == RF_MOD_REPLICATED) { /* ReplicatedLinear (bias=False): a full copy */
        char w[RF_NAME_MAX];
        snprintf(w, sizeof(w), "%s.weight", prefix);
        return inv_add_tensor(b, w, b->inv->cfg.dtype, 2, SHAPE(n, k), layer, -1, RF_PARAM_WEIGHT,
                              RF_SPLIT_REPLICATED, m, "weight", 0);
    }
    return inv_linear(b, prefix, layer, -1, n, k, bias, split, m, 0);
}

/*
 * GPT-NeoX (vLLM GPTNeoXLayer): LayerNorms with biases, the fused query_key_value stored
 * interleaved per head ([q_h; k_h; v_h] for every head h: a column-type tensor whose rows
 * [t 3H/TP, (t+1) 3H/TP) are heads [t nh/TP, ...), as Megatron shards it), dense (row
 * parallel), dense_h_to_4h (column parallel) and dense_4h_to_h (row parallel), biases on all.
 */
static rf_status_t inv_layer_gpt_neox(inv_builder_t *b, int i)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size, d = c->head_dim, nh = c->num_attention_heads,
            I = c->intermediate_size;
    char p[48], mn[RF_NAME_MAX];
    snprintf(p, sizeof(p), "gpt_neox.layers.%d", i);
    snprintf(mn, sizeof(mn), "%s.input_layernorm", p);
    RF_CHECK(inv_layernorm(b, mn, i, H));
    snprintf(mn, sizeof(mn), "%s.post_attention_layernorm", p);
    RF_CHECK(inv_layernorm(b, mn, i, H));
    snprintf(mn, sizeof(mn), "%s.attention.query_key_value", p);
    RF_CHECK(inv_own_linear(b, mn, RF_MOD_QKV_HEADS, i, 3 * nh * d, H, c->qkv_bias,
                            RF_SPLIT_ROWS));
    snprintf(mn, sizeof(mn), "%s.attention.dense", p);
    RF_CHECK(inv_own_linear(b, mn, RF_MOD_ROW, i, H, nh * d, c->o_bias, RF_SPLIT_COLS));
    if (I <= 0)
        return rf_err_set(b->err, RF_ERR_CONFIG, "inventory: gpt_neox needs intermediate_size");
    snprintf(mn, sizeof(mn), "%s.mlp.dense_h_to_4h", p);
    RF_CHECK(inv_own_linear(b, mn, RF_MOD_COLUMN, i, I, H, c->mlp_bias, RF_SPLIT_ROWS));
    snprintf(mn, sizeof(mn), "%s.mlp.dense_4h_to_h", p);
    return inv_own_linear(b, mn, RF_MOD_ROW, i, H, I, c->mlp_bias, RF_SPLIT_COLS);
}

/*
 * OPT (vLLM OPTDecoderLayer): self_attn_layer_norm and final_layer_norm (LayerNorms with
 * biases), q / k / v into qkv_proj (QKVParallelLinear, nkv = nh), out_proj (row parallel),
 * fc1 (column parallel), fc2 (row parallel); biases when enable_bias.
 */
static rf_status_t inv_layer_opt(inv_builder_t *b, int i)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size, d = c->head_dim, nh = c->num_attention_heads,
            I = c->intermediate_size;
    char p[48], mn[RF_NAME_MAX], w[RF_NAME_MAX];
    int m;
    snprintf(p, sizeof(p), "model.decoder.layers.%d", i);
    snprintf(mn, sizeof(mn), "%s.self_attn_layer_norm", p);
    RF_CHECK(inv_layernorm(b, mn, i, H));
    snprintf(mn, sizeof(mn), "%s.final_layer_norm", p);
    RF_CHECK(inv_layernorm(b, mn, i, H));
    snprintf(mn, sizeof(mn), "%s.self_attn.qkv_proj", p);
    if ((m = inv_add_module(b, mn, RF_MOD_QKV, i, 3 * nh * d, H)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    static const char *qkv[] = {"q_proj", "k_proj", "v_proj"};
    for (int s = 0; s < 3; s++) {
        snprintf(w, sizeof(w), "%s.self_attn.%s", p, qkv[s]);
        RF_CHECK(inv_linear(b, w, i, -1, nh * d, H, c->qkv_bias, RF_SPLIT_ROWS, m, s));
    }
    snprintf(mn, sizeof(mn), "%s.self_attn.out_proj", p);
    RF_CHECK(inv_own_linear(b, mn, RF_MOD_ROW, i, H, nh * d, c->o_bias, RF_SPLIT_COLS));
    if (I <= 0)
        return rf_err_set(b->err, RF_ERR_CONFIG, "inventory: opt needs ffn_dim");
    snprintf(mn, sizeof(mn), "%s.fc1", p);
    RF_CHECK(inv_own_linear(b, mn, RF_MOD_COLUMN, i, I, H, c->mlp_bias, RF_SPLIT_ROWS));
    snprintf(mn, sizeof(mn), "%s.fc2", p);
    return inv_own_linear(b, mn, RF_MOD_ROW, i, H, I, c->mlp_bias, RF_SPLIT_COLS);
}

/*
 * A module of one tensor split by sections (RF_MOD_SECTIONS): `name` is the module's and,
 * with `sfx` appended, the tensor's name; dim 0 is the nsec sections rows[i] (heads[i] heads,
 * counted by config key keys[i]). The trainer splits it by contiguous rows (RF_SPLIT_ROWS).
 */
static rf_status_t inv_sections(inv_builder_t *b, const char *name, const char *sfx, int layer,
                                int ndim, const int64_t *shape, int nsec, const int64_t *rows,
                                const int64_t *heads, const char *const *keys)
{
    char w[RF_NAME_MAX];
    int m = inv_add_module(b, name, RF_MOD_SECTIONS, layer, shape[0], ndim >= 2 ? shape[ndim - 1] : 1);
    if (m < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    rf_module_t *mod = &b->inv->modules[m];
    mod->nsec = nsec;
    for (int i = 0; i < nsec; i++) {
        mod->sec_rows[i] = rows[i];
        mod->sec_heads[i] = heads[i];
        mod->sec_key[i] = keys[i];
    }
    snprintf(w, sizeof(w), "%s%s", name, sfx);
    return inv_add_tensor(b, w, b->inv->cfg.dtype, ndim, shape, layer, -1, RF_PARAM_WEIGHT,
                          RF_SPLIT_ROWS, m, "weight", 0);
}

/*
 * One of Qwen3-Next's Gated DeltaNet input projections (in_proj_qkvz, in_proj_ba: n rows of
 * whole key-head groups, contiguous per rank). Unquantized, or left so by
 * quantization_config.modules_to_not_convert / ignore (Qwen3-Next-80B-A3B-Instruct-FP8 lists
 * every in_proj_ba): a sectioned module of one section. fp8-block: vLLM's block-quantized
 * column-parallel linear, e4m3 weight + weight_scale_inv, a column module split by key-head
 * groups; refused unless its rows are whole 128 x 128 blocks (in_proj_ba's 2 nv rows are 64 at
 * full size). `what` says how the rows are counted, for that error.
 */
static rf_status_t inv_gdn_in_proj(inv_builder_t *b, const char *mn, int i, int64_t n,
                                   const char *what)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size, nk = c->linear_num_key_heads;
    static const char *const kk[1] = {"linear_num_key_heads"};
    rf_quant_t q = b->inv->quant;
    if (q != RF_QUANT_NONE && inv_not_converted(c, mn))
        q = RF_QUANT_NONE;
    if (q == RF_QUANT_NONE)
        return inv_sections(b, mn, ".weight", i, 2, SHAPE(n, H), 1, SHAPE(n), SHAPE(nk), kk);
    if (q != RF_QUANT_FP8_BLOCK || n % 128 != 0)
        return rf_err_set(b->err, RF_ERR_UNSUPPORTED,
                          "inventory: %s is %s but its %lld rows (%s) are not whole 128 x 128 "
                          "fp8 blocks: list it in quantization_config.modules_to_not_convert, as "
                          "Qwen3-Next-80B-A3B-Instruct-FP8 does for in_proj_ba",
                          mn, rf_quant_name(q), (long long)n, what);
    RF_CHECK(inv_heads_linear(b, mn, RF_MOD_COLUMN, i, n, H, nk));
    b->inv->modules[b->inv->nmodules - 1].sec_key[0] = kk[0];
    return RF_OK;
}

/*
 * Qwen3-Next's Gated DeltaNet (vLLM Qwen3NextGatedDeltaNet; transformers
 * Qwen3NextGatedDeltaNet). in_proj_qkvz [2 nk dk + 2 nv dv, H] is stored per key-head group
 * ([q_g; k_g; v_g; z_g], g = 0..nk-1, with nv / nk value heads per group) and in_proj_ba
 * [2 nv, H] likewise ([b_g; a_g]): both ColumnParallelLinear, so rank r's contiguous rows are
 * key-head groups [r nk / T, ...) and nk must divide by T. conv1d [2 nk dk + nv dv, 1, K] is
 * [q; k; v] over all heads, loaded by mamba_v2_sharded_weight_loader: each of q, k, v split by
 * T on its own, the slot (conv_dim / T, 1, K) = [q_r; k_r; v_r]. A_log and dt_bias [nv]:
 * sharded_weight_loader(0). norm (RMSNormGated over dv): replicated. out_proj: row parallel.
 */
static rf_status_t inv_gdn_qwen3_next(inv_builder_t *b, const char *p, int i)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size, nk = c->linear_num_key_heads, nv = c->linear_num_value_heads;
    int64_t kd = nk * c->linear_key_head_dim, vd = nv * c->linear_value_head_dim;
    int64_t Kc = c->linear_conv_kernel_dim;
    static const char *const kk[3] = {"linear_num_key_heads", "linear_num_key_heads",
                                      "linear_num_value_heads"};
    static const char *const kv[1] = {"linear_num_value_heads"};
    char mn[RF_NAME_MAX], w[RF_NAME_MAX];
    snprintf(mn, sizeof(mn), "%s.linear_attn.in_proj_qkvz", p);
    RF_CHECK(inv_gdn_in_proj(b, mn, i, 2 * kd + 2 * vd,
                             "2 nk dk + 2 nv dv of the linear_* head keys"));
    snprintf(mn, sizeof(mn), "%s.linear_attn.in_proj_ba", p);
    RF_CHECK(inv_gdn_in_proj(b, mn, i, 2 * nv, "2 x linear_num_value_heads"));
    snprintf(mn, sizeof(mn), "%s.linear_attn.conv1d", p);
    RF_CHECK(inv_sections(b, mn, ".weight", i, 3, SHAPE(2 * kd + vd, 1, Kc), 3,
                          SHAPE(kd, kd, vd), SHAPE(nk, nk, nv), kk));
    snprintf(mn, sizeof(mn), "%s.linear_attn.A_log", p);
    RF_CHECK(inv_sections(b, mn, "", i, 1, SHAPE(nv), 1, SHAPE(nv), SHAPE(nv), kv));
    snprintf(mn, sizeof(mn), "%s.linear_attn.dt_bias", p);
    RF_CHECK(inv_sections(b, mn, "", i, 1, SHAPE(nv), 1, SHAPE(nv), SHAPE(nv), kv));
    snprintf(w, sizeof(w), "%s.linear_attn.norm.weight", p);
    snprintf(mn, sizeof(mn), "%s.linear_attn.norm", p);
    RF_CHECK(inv_norm(b, w, mn, i, c->linear_value_head_dim));
    snprintf(mn, sizeof(mn), "%s.linear_attn.out_proj", p);
    return inv_own_linear(b, mn, RF_MOD_ROW, i, H, vd, false, RF_SPLIT_COLS);
}

/*
 * Qwen3-Next (vLLM Qwen3NextDecoderLayer): Gated DeltaNet (linear_attn) or gated full
 * attention (self_attn: q_proj [2 nh d, H] holds each head's query followed by its output
 * gate, so vLLM's QKVParallelLinear takes 2 nh heads of d rows for q: a rank's q rows are
 * whole (query, gate) pairs; q_norm / k_norm [d]) per layer_types; then the MoE block (router
 * mlp.gate, experts, shared_expert as a dense MLP of shared_expert_intermediate_size split by
 * TP, shared_expert_gate [1, H] replicated) or, off the MoE layers, a dense MLP. `p` is the
 * layer's checkpoint prefix, `i` the index the MoE rule reads (vLLM's layer_idx, taken from
 * the prefix: 0 for mtp.layers.0), `full` its attention kind.
 */
static rf_status_t inv_layer_qwen3_next_at(inv_builder_t *b, const char *p, int i, bool full)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size, d = c->head_dim, nh = c->num_attention_heads,
            nkv = c->num_key_value_heads;
    char mn[RF_NAME_MAX], w[RF_NAME_MAX];
    int m;
    snprintf(w, sizeof(w), "%s.input_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.input_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, H));
    snprintf(w, sizeof(w), "%s.post_attention_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.post_attention_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, H));
    if (!full) {
        RF_CHECK(inv_gdn_qwen3_next(b, p, i));
    } else {
        static const char *qkv[] = {"q_proj", "k_proj", "v_proj"};
        snprintf(mn, sizeof(mn), "%s.self_attn.qkv_proj", p);
        if ((m = inv_add_module(b, mn, RF_MOD_QKV, i, (2 * nh + 2 * nkv) * d, H)) < 0)
            return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
        for (int s = 0; s < 3; s++) {
            snprintf(w, sizeof(w), "%s.self_attn.%s", p, qkv[s]);
            RF_CHECK(inv_linear(b, w, i, -1, (s == 0 ? 2 * nh : nkv) * d, H, c->qkv_bias,
                                RF_SPLIT_ROWS, m, s));
        }
        snprintf(mn, sizeof(mn), "%s.self_attn.o_proj", p);
        RF_CHECK(inv_own_linear(b, mn, RF_MOD_ROW, i, H, nh * d, false, RF_SPLIT_COLS));
        snprintf(w, sizeof(w), "%s.self_attn.q_norm.weight", p);
        snprintf(mn, sizeof(mn), "%s.self_attn.q_norm", p);
        RF_CHECK(inv_norm(b, w, mn, i, d));
        snprintf(w, sizeof(w), "%s.self_attn.k_norm.weight", p);
        snprintf(mn, sizeof(mn), "%s.self_attn.k_norm", p);
        RF_CHECK(inv_norm(b, w, mn, i, d));
    }
    /* the MLP: gate_up_proj + down_proj of width I under `base` ("mlp" or the shared expert) */
    const char *base = "mlp";
    int64_t I = c->intermediate_size;
    if (rf_model_layer_is_moe(c, i)) {
        int64_t E = c->num_experts, Im = c->moe_intermediate_size;
        snprintf(mn, sizeof(mn), "%s.mlp.gate", p);
        RF_CHECK(inv_own_linear(b, mn, RF_MOD_REPLICATED, i, E, H, false, RF_SPLIT_REPLICATED));
        snprintf(mn, sizeof(mn), "%s.mlp.experts", p);
        if ((m = inv_add_module(b, mn, RF_MOD_MOE, i, Im, H)) < 0)
            return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
        for (int e = 0; e < E; e++) {
            snprintf(w, sizeof(w), "%s.mlp.experts.%d.gate_proj", p, e);
            RF_CHECK(inv_linear_q(b, w, i, e, Im, H, false, RF_SPLIT_ROWS, m, 0, "w13_"));
            snprintf(w, sizeof(w), "%s.mlp.experts.%d.up_proj", p, e);
            RF_CHECK(inv_linear_q(b, w, i, e, Im, H, false, RF_SPLIT_ROWS, m, 1, "w13_"));
            snprintf(w, sizeof(w), "%s.mlp.experts.%d.down_proj", p, e);
            RF_CHECK(inv_linear_q(b, w, i, e, H, Im, false, RF_SPLIT_COLS, m, 0, "w2_"));
        }
        if (c->shared_expert_intermediate_size <= 0)
            return RF_OK;
        snprintf(mn, sizeof(mn), "%s.mlp.shared_expert_gate", p);
        RF_CHECK(inv_own_linear(b, mn, RF_MOD_REPLICATED, i, 1, H, false, RF_SPLIT_REPLICATED));
        base = "mlp.shared_expert";
        I = c->shared_expert_intermediate_size;
    }
    if (I <= 0)
        return rf_err_set(b->err, RF_ERR_CONFIG,
                          "inventory: layer %d has a dense MLP but intermediate_size is 0", i);
    snprintf(mn, sizeof(mn), "%s.%s.gate_up_proj", p, base);
    if ((m = inv_add_module(b, mn, RF_MOD_MERGED, i, 2 * I, H)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    snprintf(w, sizeof(w), "%s.%s.gate_proj", p, base);
    RF_CHECK(inv_linear(b, w, i, -1, I, H, false, RF_SPLIT_ROWS, m, 0));
    snprintf(w, sizeof(w), "%s.%s.up_proj", p, base);
    RF_CHECK(inv_linear(b, w, i, -1, I, H, false, RF_SPLIT_ROWS, m, 1));
    snprintf(mn, sizeof(mn), "%s.%s.down_proj", p, base);
    return inv_own_linear(b, mn, RF_MOD_ROW, i, H, I, false, RF_SPLIT_COLS);
}

static rf_status_t inv_layer_qwen3_next(inv_builder_t *b, int i)
{
    char p[48];
    snprintf(p, sizeof(p), "model.layers.%d", i);
    return inv_layer_qwen3_next_at(b, p, i, rf_model_layer_is_full_attention(&b->inv->cfg, i));
}

/* A column- or row-parallel linear split by whole attention heads (its own module). */
static rf_status_t inv_heads_linear(inv_builder_t *b, const char *prefix, rf_module_kind_t kind,
                                    int layer, int64_t n, int64_t k, int64_t heads)
{
    int m = inv_add_module(b, prefix, kind, layer, n, k);
    if (m < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    b->inv->modules[m].heads = heads;
    return inv_linear(b, prefix, layer, -1, n, k, false,
                      kind == RF_MOD_ROW ? RF_SPLIT_COLS : RF_SPLIT_ROWS, m, 0);
}

/* A dense SiLU MLP as vLLM builds it (gate_up_proj merged, down_proj row parallel) under the
 * checkpoint prefix `p` ("model.layers.3.mlp", "....mlp.shared_experts"), width I. */
static rf_status_t inv_mlp(inv_builder_t *b, const char *p, int i, int64_t I)
{
    int64_t H = b->inv->cfg.hidden_size;
    char mn[RF_NAME_MAX], w[RF_NAME_MAX];
    int m;
    snprintf(mn, sizeof(mn), "%s.gate_up_proj", p);
    if ((m = inv_add_module(b, mn, RF_MOD_MERGED, i, 2 * I, H)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    snprintf(w, sizeof(w), "%s.gate_proj", p);
    RF_CHECK(inv_linear(b, w, i, -1, I, H, false, RF_SPLIT_ROWS, m, 0));
    snprintf(w, sizeof(w), "%s.up_proj", p);
    RF_CHECK(inv_linear(b, w, i, -1, I, H, false, RF_SPLIT_ROWS, m, 1));
    snprintf(mn, sizeof(mn), "%s.down_proj", p);
    if ((m = inv_add_module(b, mn, RF_MOD_ROW, i, H, I)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    return inv_linear(b, mn, i, -1, H, I, false, RF_SPLIT_COLS, m, 0);
}

/*
 * DeepSeek-V3 / Moonlight (vLLM DeepseekV2DecoderLayer with DeepseekV2MLAAttention; names as
 * transformers' DeepseekV3 writes them). Attention, nh heads of P + R query rows and P + Dv
 * key / value rows:
 *   q_lora_rank set: fused_qkv_a_proj = [q_a_proj (Lq, H); kv_a_proj_with_mqa (Lkv + R, H)]
 *     (MergedColumnParallelLinear, disable_tp: replicated), q_a_layernorm (Lq), q_b_proj
 *     (nh (P + R), Lq) column parallel by heads;
 *   q_lora_rank null: q_proj (nh (P + R), H) column parallel by heads, kv_a_proj_with_mqa
 *     (Lkv + R, H) replicated;
 *   kv_a_layernorm (Lkv), kv_b_proj (nh (P + Dv), Lkv) column parallel by heads (the format
 *   owners add the absorbed W_UK_T / W_UV it derives, formats/format_mla.c), o_proj
 *   (H, nh Dv) row parallel by heads.
 * MLP: dense (intermediate_size) below first_k_dense_replace; otherwise the router mlp.gate
 * (E, H) with e_score_correction_bias (E) fp32 (noaux_tc), routed experts (FusedMoE) and
 * shared_experts (a dense MLP of width Im x n_shared_experts, tensor parallel).
 */
static rf_status_t inv_layer_deepseek(inv_builder_t *b, int i)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size, nh = c->num_attention_heads, P = c->qk_nope_head_dim,
            R = c->qk_rope_head_dim, Dv = c->v_head_dim, Lq = c->q_lora_rank,
            Lkv = c->kv_lora_rank;
    char p[48], mn[RF_NAME_MAX], w[RF_NAME_MAX];
    int m;
    snprintf(p, sizeof(p), "model.layers.%d", i);
    snprintf(w, sizeof(w), "%s.input_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.input_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, H));
    snprintf(w, sizeof(w), "%s.post_attention_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.post_attention_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, H));

    if (Lq > 0) {
        snprintf(mn, sizeof(mn), "%s.self_attn.fused_qkv_a_proj", p);
        if ((m = inv_add_module(b, mn, RF_MOD_REPLICATED_LINEAR, i, Lq + Lkv + R, H)) < 0)
            return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
        snprintf(w, sizeof(w), "%s.self_attn.q_a_proj", p);
        RF_CHECK(inv_linear(b, w, i, -1, Lq, H, false, RF_SPLIT_REPLICATED, m, 0));
        snprintf(w, sizeof(w), "%s.self_attn.kv_a_proj_with_mqa", p);
        RF_CHECK(inv_linear(b, w, i, -1, Lkv + R, H, false, RF_SPLIT_REPLICATED, m, 1));
        snprintf(w, sizeof(w), "%s.self_attn.q_a_layernorm.weight", p);
        snprintf(mn, sizeof(mn), "%s.self_attn.q_a_layernorm", p);
        RF_CHECK(inv_norm(b, w, mn, i, Lq));
        snprintf(mn, sizeof(mn), "%s.self_attn.q_b_proj", p);
        RF_CHECK(inv_heads_linear(b, mn, RF_MOD_COLUMN, i, nh * (P + R), Lq, nh));
    } else {
        snprintf(mn, sizeof(mn), "%s.self_attn.q_proj", p);
        RF_CHECK(inv_heads_linear(b, mn, RF_MOD_COLUMN, i, nh * (P + R), H, nh));
        snprintf(mn, sizeof(mn), "%s.self_attn.kv_a_proj_with_mqa", p);
        if ((m = inv_add_module(b, mn, RF_MOD_REPLICATED_LINEAR, i, Lkv + R, H)) < 0)
            return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
        RF_CHECK(inv_linear(b, mn, i, -1, Lkv + R, H, false, RF_SPLIT_REPLICATED, m, 0));
    }
    snprintf(w, sizeof(w), "%s.self_attn.kv_a_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.self_attn.kv_a_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, Lkv));
    snprintf(mn, sizeof(mn), "%s.self_attn.kv_b_proj", p);
    RF_CHECK(inv_heads_linear(b, mn, RF_MOD_COLUMN, i, nh * (P + Dv), Lkv, nh));
    snprintf(mn, sizeof(mn), "%s.self_attn.o_proj", p);
    RF_CHECK(inv_heads_linear(b, mn, RF_MOD_ROW, i, H, nh * Dv, nh));

    snprintf(mn, sizeof(mn), "%s.mlp", p);
    if (!rf_model_layer_is_moe(c, i)) {
        if (c->intermediate_size <= 0)
            return rf_err_set(b->err, RF_ERR_CONFIG,
                              "inventory: layer %d has a dense MLP but intermediate_size is 0", i);
        return inv_mlp(b, mn, i, c->intermediate_size);
    }
    int64_t E = c->num_experts, Im = c->moe_intermediate_size;
    snprintf(mn, sizeof(mn), "%s.mlp.gate", p);
    if ((m = inv_add_module(b, mn, RF_MOD_REPLICATED, i, E, H)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    snprintf(w, sizeof(w), "%s.mlp.gate.weight", p);
    RF_CHECK(inv_add_tensor(b, w, c->dtype, 2, SHAPE(E, H), i, -1, RF_PARAM_WEIGHT,
                            RF_SPLIT_REPLICATED, m, "weight", 0));
    if (c->score_correction) {
        /* vLLM: nn.Parameter(torch.empty(n_routed_experts, dtype=torch.float32)); sent every
         * update (aux-loss-free balancing moves it each step) */
        snprintf(w, sizeof(w), "%s.mlp.gate.e_score_correction_bias", p);
        RF_CHECK(inv_add_tensor(b, w, RF_DTYPE_F32, 1, SHAPE(E), i, -1, RF_PARAM_F32_BUFFER,
                                RF_SPLIT_REPLICATED, m, "e_score_correction_bias", 0));
    }
    snprintf(mn, sizeof(mn), "%s.mlp.experts", p);
    if ((m = inv_add_module(b, mn, RF_MOD_MOE, i, Im, H)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    for (int e = 0; e < E; e++) {
        snprintf(w, sizeof(w), "%s.mlp.experts.%d.gate_proj", p, e);
        RF_CHECK(inv_linear_q(b, w, i, e, Im, H, false, RF_SPLIT_ROWS, m, 0, "w13_"));
        snprintf(w, sizeof(w), "%s.mlp.experts.%d.up_proj", p, e);
        RF_CHECK(inv_linear_q(b, w, i, e, Im, H, false, RF_SPLIT_ROWS, m, 1, "w13_"));
        snprintf(w, sizeof(w), "%s.mlp.experts.%d.down_proj", p, e);
        RF_CHECK(inv_linear_q(b, w, i, e, H, Im, false, RF_SPLIT_COLS, m, 0, "w2_"));
    }
    if (c->n_shared_experts > 0) {
        snprintf(mn, sizeof(mn), "%s.mlp.shared_experts", p);
        RF_CHECK(inv_mlp(b, mn, i, Im * c->n_shared_experts));
    }
    return RF_OK;
}

/*
 * GraniteMoE (vLLM GraniteMoeDecoderLayer): RMSNorms, q / k / v into qkv_proj and o_proj as
 * Llama (no biases), and block_sparse_moe with the router block_sparse_moe.router.layer
 * (vLLM's ReplicatedLinear block_sparse_moe.gate, [E, H]) and the experts stored fused as
 * two 3-D tensors: input_linear.weight [E, 2I, H] (expert e's [gate_e; up_e], vLLM's
 * load_weights chunks p[e] in two along dim 0 into w1 / w3) and output_linear.weight
 * [E, H, I] (w2). Both go to FusedMoE block_sparse_moe.experts, w13 (E_l, 2 I_p, H) and w2
 * (E_l, H, I_p); rows count as E 2I and E H (rf_tensor_rows), and the trainer holds whole
 * experts (rows split: [t E/TP, (t+1) E/TP) when TP divides E).
 */
static rf_status_t inv_layer_granitemoe(inv_builder_t *b, int i)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size, d = c->head_dim, nh = c->num_attention_heads,
            nkv = c->num_key_value_heads, E = c->num_experts, I = c->moe_intermediate_size;
    char p[48], mn[RF_NAME_MAX], w[RF_NAME_MAX];
    int m;
    snprintf(p, sizeof(p), "model.layers.%d", i);
    snprintf(w, sizeof(w), "%s.input_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.input_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, H));
    snprintf(mn, sizeof(mn), "%s.self_attn.qkv_proj", p);
    if ((m = inv_add_module(b, mn, RF_MOD_QKV, i, (nh + 2 * nkv) * d, H)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    static const char *qkv[] = {"q_proj", "k_proj", "v_proj"};
    for (int s = 0; s < 3; s++) {
        snprintf(w, sizeof(w), "%s.self_attn.%s", p, qkv[s]);
        RF_CHECK(inv_linear(b, w, i, -1, (s == 0 ? nh : nkv) * d, H, c->qkv_bias, RF_SPLIT_ROWS,
                            m, s));
    }
    snprintf(mn, sizeof(mn), "%s.self_attn.o_proj", p);
    RF_CHECK(inv_own_linear(b, mn, RF_MOD_ROW, i, H, nh * d, c->o_bias, RF_SPLIT_COLS));
    snprintf(w, sizeof(w), "%s.post_attention_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.post_attention_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, H));
    snprintf(mn, sizeof(mn), "%s.block_sparse_moe.gate", p);
    if ((m = inv_add_module(b, mn, RF_MOD_REPLICATED, i, E, H)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    snprintf(w, sizeof(w), "%s.block_sparse_moe.router.layer.weight", p);
    RF_CHECK(inv_add_tensor(b, w, c->dtype, 2, SHAPE(E, H), i, -1, RF_PARAM_WEIGHT,
                            RF_SPLIT_REPLICATED, m, "weight", 0));
    snprintf(mn, sizeof(mn), "%s.block_sparse_moe.experts", p);
    if ((m = inv_add_module(b, mn, RF_MOD_MOE, i, I, H)) < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    snprintf(w, sizeof(w), "%s.block_sparse_moe.input_linear.weight", p);
    RF_CHECK(inv_add_tensor(b, w, c->dtype, 3, SHAPE(E, 2 * I, H), i, -1, RF_PARAM_WEIGHT,
                            RF_SPLIT_ROWS, m, "w13_weight", 0));
    b->inv->tensors[b->inv->ntensors - 1].all_experts = true;
    snprintf(w, sizeof(w), "%s.block_sparse_moe.output_linear.weight", p);
    RF_CHECK(inv_add_tensor(b, w, c->dtype, 3, SHAPE(E, H, I), i, -1, RF_PARAM_WEIGHT,
                            RF_SPLIT_ROWS, m, "w2_weight", 0));
    b->inv->tensors[b->inv->ntensors - 1].all_experts = true;
    return RF_OK;
}

/* A vocab-parallel module of one [V, H] tensor (VocabParallelEmbedding / ParallelLMHead). */
static rf_status_t inv_vocab(inv_builder_t *b, const char *module, int layer)
{
    const rf_model_config_t *c = &b->inv->cfg;
    char w[RF_NAME_MAX];
    int m = inv_add_module(b, module, RF_MOD_VOCAB, layer, c->vocab_size, c->hidden_size);
    if (m < 0)
        return rf_err_set(b->err, RF_ERR_NOMEM, "inventory: out of memory");
    snprintf(w, sizeof(w), "%s.weight", module);
    return inv_add_tensor(b, w, c->dtype, 2, SHAPE(c->vocab_size, c->hidden_size), layer, -1,
                          RF_PARAM_WEIGHT, RF_SPLIT_VOCAB, m, "weight", 0);
}

/*
 * MTP layer k of DeepSeek-V3 (model.mtp; vLLM DeepSeekMultiTokenPredictorLayer, the draft
 * model DeepSeekMTP), stored as model.layers.{L + k}.* with L the config's num_hidden_layers as
 * written (model.overrides do not move it): embed_tokens (vLLM's draft VocabParallelEmbedding,
 * loaded from this copy: vocab parallel), enorm and hnorm (RMSNorm [H]), eh_proj [H, 2H] (an
 * nn.Linear without quant_config in vLLM: a full bf16 copy on every rank, never quantized),
 * shared_head.norm [H] and shared_head.head (ParallelLMHead [V, H]: vocab parallel), and a
 * whole DeepseekV2DecoderLayer (mtp_block) with the prefix's layer index for the MoE rule.
 */
static rf_status_t inv_mtp_deepseek(inv_builder_t *b, int k)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size;
    int li = (int)c->orig_num_hidden_layers + k;
    char p[48], mn[96], w[RF_NAME_MAX];
    snprintf(p, sizeof(p), "model.layers.%d", li);
    snprintf(mn, sizeof(mn), "%s.embed_tokens", p);
    RF_CHECK(inv_vocab(b, mn, li));
    static const char *const norms[3] = {"enorm", "hnorm", "shared_head.norm"};
    for (int n = 0; n < 3; n++) {
        snprintf(mn, sizeof(mn), "%s.%s", p, norms[n]);
        snprintf(w, sizeof(w), "%s.weight", mn);
        RF_CHECK(inv_norm(b, w, mn, li, H));
    }
    snprintf(mn, sizeof(mn), "%s.eh_proj", p);
    RF_CHECK(inv_own_linear(b, mn, RF_MOD_REPLICATED, li, H, 2 * H, false, RF_SPLIT_REPLICATED));
    snprintf(mn, sizeof(mn), "%s.shared_head.head", p);
    RF_CHECK(inv_vocab(b, mn, li));
    return inv_layer_deepseek(b, li);
}

/*
 * MTP layer k of Qwen3-Next (model.mtp; vLLM Qwen3NextMultiTokenPredictor, the draft model
 * Qwen3NextMTP, which maps the checkpoint's mtp.* onto it): mtp.fc [H, 2H]
 * (ColumnParallelLinear with gather_output: H / T rows per rank, quantized like the other
 * linears), mtp.pre_fc_norm_hidden, mtp.pre_fc_norm_embedding and mtp.norm (RMSNorm [H]),
 * and mtp.layers.{k} a Qwen3NextDecoderLayer built with layer_type "full_attention" (layer_idx
 * k for the MoE rule). embed_tokens and lm_head are the main model's (shared, not stored
 * under mtp.*). The fc and norms are built with layer k = 0 only.
 */
static rf_status_t inv_mtp_qwen3_next(inv_builder_t *b, int k)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size;
    char p[48], w[RF_NAME_MAX];
    if (k == 0) {
        RF_CHECK(inv_own_linear(b, "mtp.fc", RF_MOD_COLUMN, 0, H, 2 * H, false, RF_SPLIT_ROWS));
        static const char *const norms[3] = {"mtp.pre_fc_norm_hidden",
                                             "mtp.pre_fc_norm_embedding", "mtp.norm"};
        for (int n = 0; n < 3; n++) {
            snprintf(w, sizeof(w), "%s.weight", norms[n]);
            RF_CHECK(inv_norm(b, w, norms[n], 0, H));
        }
    }
    snprintf(p, sizeof(p), "mtp.layers.%d", k);
    return inv_layer_qwen3_next_at(b, p, k, true);
}

/* The MTP layers asked by model.mtp, after the decoder: each one's tensors and modules get
 * layer L + 1 + k (after the final norm and head at L: the manifest's order, and the last
 * pipeline stage, where Megatron keeps its MTP block). */
static rf_status_t inv_mtp_layers(inv_builder_t *b)
{
    rf_inventory_t *inv = b->inv;
    const rf_model_config_t *c = &inv->cfg;
    for (int k = 0; c->mtp && k < c->num_nextn_predict_layers; k++) {
        int t0 = inv->ntensors, m0 = inv->nmodules;
        if (c->family == RF_FAMILY_DEEPSEEK_V3)
            RF_CHECK(inv_mtp_deepseek(b, k));
        else if (c->family == RF_FAMILY_QWEN3_NEXT)
            RF_CHECK(inv_mtp_qwen3_next(b, k));
        else
            return rf_err_set(b->err, RF_ERR_UNSUPPORTED,
                              "inventory: model.mtp: model_type %s has no multi-token-prediction "
                              "layers",
                              c->model_type);
        int layer = (int)c->num_hidden_layers + 1 + k;
        for (int t = t0; t < inv->ntensors; t++)
            inv->tensors[t].layer = layer;
        for (int m = m0; m < inv->nmodules; m++)
            inv->modules[m].layer = layer;
    }
    return RF_OK;
}

static rf_status_t inv_layer(inv_builder_t *b, int i)
{
    const rf_model_config_t *c = &b->inv->cfg;
    int64_t H = c->hidden_size, d = c->head_dim, nh = c->num_attention_heads,
            nkv = c->num_key_value_heads;
    char p[48], mn[RF_NAME_MAX], w[RF_NAME_MAX];
    int m;
    snprintf(p, sizeof(p), "model.layers.%d", i);

    snprintf(w, sizeof(w), "%s.input_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.input_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, H));

    /* attention: QKVParallelLinear [q; k; v] */
    snprintf(mn, sizeof(mn), "%s.self_attn.qkv_proj", p);
    if ((m = inv_add_module(b, mn, RF_MOD_QKV, i, (nh + 2 * nkv) * d, H)) < 0)
        return RF_ERR_NOMEM;
    static const char *qkv[] = {"q_proj", "k_proj", "v_proj"};
    for (int s = 0; s < 3; s++) {
        snprintf(w, sizeof(w), "%s.self_attn.%s", p, qkv[s]);
        RF_CHECK(inv_linear(b, w, i, -1, (s == 0 ? nh : nkv) * d, H, c->qkv_bias, RF_SPLIT_ROWS,
                            m, s));
    }
    snprintf(mn, sizeof(mn), "%s.self_attn.o_proj", p);
    if ((m = inv_add_module(b, mn, RF_MOD_ROW, i, H, nh * d)) < 0)
        return RF_ERR_NOMEM;
    snprintf(w, sizeof(w), "%s.self_attn.o_proj", p);
    RF_CHECK(inv_linear(b, w, i, -1, H, nh * d, c->o_bias, RF_SPLIT_COLS, m, 0));
    if (c->family == RF_FAMILY_QWEN3 || c->family == RF_FAMILY_QWEN3_MOE) {
        snprintf(w, sizeof(w), "%s.self_attn.q_norm.weight", p);
        snprintf(mn, sizeof(mn), "%s.self_attn.q_norm", p);
        RF_CHECK(inv_norm(b, w, mn, i, d));
        snprintf(w, sizeof(w), "%s.self_attn.k_norm.weight", p);
        snprintf(mn, sizeof(mn), "%s.self_attn.k_norm", p);
        RF_CHECK(inv_norm(b, w, mn, i, d));
    }
    snprintf(w, sizeof(w), "%s.post_attention_layernorm.weight", p);
    snprintf(mn, sizeof(mn), "%s.post_attention_layernorm", p);
    RF_CHECK(inv_norm(b, w, mn, i, H));

    if (rf_model_layer_is_moe(c, i)) {
        int64_t E = c->num_experts, Im = c->moe_intermediate_size;
        snprintf(mn, sizeof(mn), "%s.mlp.gate", p);
        if ((m = inv_add_module(b, mn, RF_MOD_REPLICATED, i, E, H)) < 0)
            return RF_ERR_NOMEM;
        snprintf(w, sizeof(w), "%s.mlp.gate.weight", p);
        RF_CHECK(inv_add_tensor(b, w, c->dtype, 2, SHAPE(E, H), i, -1, RF_PARAM_WEIGHT,
                                RF_SPLIT_REPLICATED, m, "weight", 0));
        snprintf(mn, sizeof(mn), "%s.mlp.experts", p);
        if ((m = inv_add_module(b, mn, RF_MOD_MOE, i, Im, H)) < 0)
            return RF_ERR_NOMEM;
        for (int e = 0; e < E; e++) {
            snprintf(w, sizeof(w), "%s.mlp.experts.%d.gate_proj", p, e);
            RF_CHECK(inv_linear_q(b, w, i, e, Im, H, false, RF_SPLIT_ROWS, m, 0, "w13_"));
            snprintf(w, sizeof(w), "%s.mlp.experts.%d.up_proj", p, e);
            RF_CHECK(inv_linear_q(b, w, i, e, Im, H, false, RF_SPLIT_ROWS, m, 1, "w13_"));
            snprintf(w, sizeof(w), "%s.mlp.experts.%d.down_proj", p, e);
            RF_CHECK(inv_linear_q(b, w, i, e, H, Im, false, RF_SPLIT_COLS, m, 0, "w2_"));
        }
    } else {
        int64_t I = c->intermediate_size;
        if (I <= 0)
            return rf_err_set(b->err, RF_ERR_CONFIG,
                              "inventory: layer %d has a dense MLP but intermediate_size is 0", i);
        snprintf(mn, sizeof(mn), "%s.mlp.gate_up_proj", p);
        if ((m = inv_add_module(b, mn, RF_MOD_MERGED, i, 2 * I, H)) < 0)
            return RF_ERR_NOMEM;
        snprintf(w, sizeof(w), "%s.mlp.gate_proj", p);
        RF_CHECK(inv_linear(b, w, i, -1, I, H, c->mlp_bias, RF_SPLIT_ROWS, m, 0));
        snprintf(w, sizeof(w), "%s.mlp.up_proj", p);
        RF_CHECK(inv_linear(b, w, i, -1, I, H, c->mlp_bias, RF_SPLIT_ROWS, m, 1));
        snprintf(mn, sizeof(mn), "%s.mlp.down_proj", p);
        if ((m = inv_add_module(b, mn, RF_MOD_ROW, i, H, I)) < 0)
            return RF_ERR_NOMEM;
        snprintf(w, sizeof(w), "%s.mlp.down_proj", p);
        RF_CHECK(inv_linear(b, w, i, -1, H, I, c->mlp_bias, RF_SPLIT_COLS, m, 0));
    }
    return RF_OK;
}

static int tensor_order(const void *a, const void *b)
{
    const rf_tensor_t *x = a, *y = b;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    if (x->expert != y->expert)
        return x->expert < y->expert ? -1 : 1;
    return strcmp(x->name, y->name);
}

rf_status_t rf_inventory_build(const rf_model_config_t *cfg, rf_quant_t quant,
                               int64_t group_size, rf_inventory_t *inv_p, rf_err_t *err)
{
    rf_inventory_t inv;
    inv_builder_t b = {&inv, 0, 0, err};
    rf_status_t st;
    int64_t H, V, L;
    memset(&inv, 0, sizeof(inv));
    inv.quant = quant;
    inv.group_size = group_size > 0 ? group_size : 128;
    /* refusals of DESIGN.md section 7 that the config alone decides */
    if (quant == RF_QUANT_FP8_BLOCK && cfg->scale_fmt[0] != '\0' &&
        strcmp(cfg->scale_fmt, "float") != 0)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "inventory: quantization_config.scale_fmt '%s' is not supported (fp8 "
                          "block scales must be plain floats, not e.g. ue8m0)",
                          cfg->scale_fmt);
    if ((quant == RF_QUANT_FP8_BLOCK || quant == RF_QUANT_FP8_TENSOR ||
         quant == RF_QUANT_FP8_CHANNEL) &&
        strcmp(cfg->activation_scheme, "static") == 0)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "inventory: quantization_config.activation_scheme 'static' is not "
                          "supported (static activation scales are not reloaded)");
    if (quant == RF_QUANT_WNA16 && cfg->act_order)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "inventory: quantization_config: act-order / g_idx is not supported "
                          "(no g_idx slots)");
    /* bounded before anything is allocated (at most 16 tensors per dense layer, 3 per expert
     * plus the router in a MoE layer, x3 when quantized); fuzz_model_config slowing on large
     * configs led to it; an MTP layer of model.mtp is a layer and 6 more) */
    int64_t nmtp = cfg->mtp ? cfg->num_nextn_predict_layers : 0;
    if (cfg->num_hidden_layers > RF_INVENTORY_MAX_TENSORS ||
        cfg->num_experts > RF_INVENTORY_MAX_TENSORS || nmtp > RF_INVENTORY_MAX_TENSORS ||
        ((uint64_t)cfg->num_hidden_layers * (17 + 3 * (uint64_t)cfg->num_experts) +
         (uint64_t)nmtp * (23 + 3 * (uint64_t)cfg->num_experts) + 4) *
                (quant == RF_QUANT_NONE ? 1 : 3) >
            RF_INVENTORY_MAX_TENSORS)
        return rf_err_set(err, RF_ERR_CONFIG,
                          "inventory: num_hidden_layers %lld with num_experts %lld gives more "
                          "than %d tensors",
                          (long long)cfg->num_hidden_layers, (long long)cfg->num_experts,
                          RF_INVENTORY_MAX_TENSORS);
    bool neox = cfg->family == RF_FAMILY_GPT_NEOX, opt = cfg->family == RF_FAMILY_OPT;
    if (cfg->family == RF_FAMILY_DEEPSEEK_V3 && quant != RF_QUANT_NONE &&
        quant != RF_QUANT_FP8_BLOCK)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "inventory: deepseek_v3 is reloaded unquantized or fp8-block only "
                          "(quantization %s asked)",
                          rf_quant_name(quant));
    bool next = cfg->family == RF_FAMILY_QWEN3_NEXT;
    bool granite = cfg->family == RF_FAMILY_GRANITEMOE;
    if ((neox || opt || granite) && quant != RF_QUANT_NONE)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "inventory: %s is reloaded unquantized only (quantization %s asked)",
                          cfg->model_type, rf_quant_name(quant));
    if (next && quant != RF_QUANT_NONE && quant != RF_QUANT_FP8_BLOCK)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "inventory: qwen3_next is reloaded unquantized or fp8-block only "
                          "(quantization %s asked)",
                          rf_quant_name(quant));
    st = rf_model_config_copy(&inv.cfg, cfg);
    if (st != RF_OK)
        return rf_err_set(err, st, "inventory: out of memory");
    H = cfg->hidden_size;
    V = cfg->vocab_size;
    L = cfg->num_hidden_layers;
    /* the embedding's width: OPT's word_embed_proj_dim (H for every other family) */
    int64_t Wd = opt ? cfg->word_embed_proj_dim : H;
    const char *emb = neox ? "gpt_neox.embed_in" : (opt ? "model.decoder.embed_tokens"
                                                        : "model.embed_tokens");
    const char *head = neox ? "embed_out" : "lm_head";
    char ename[RF_NAME_MAX];
    inv.embed_name = neox ? "gpt_neox.embed_in.weight"
                          : (opt ? "model.decoder.embed_tokens.weight" : "model.embed_tokens.weight");
    inv.head_name = neox ? "embed_out.weight" : "lm_head.weight";

    int m = inv_add_module(&b, emb, RF_MOD_VOCAB, -1, V, Wd);
    if (m < 0) {
        st = RF_ERR_NOMEM;
        goto fail;
    }
    inv.modules[m].tied = cfg->tie_word_embeddings;
    RF_CHECK_GOTO(inv_add_tensor(&b, inv.embed_name, cfg->dtype, 2, SHAPE(V, Wd), -1, -1,
                                 RF_PARAM_WEIGHT, RF_SPLIT_VOCAB, m, "weight", 0),
                  st, fail);
    if (opt) {
        /* learned positions, OPTLearnedPositionalEmbedding: max_position_embeddings + 2 rows
         * (its offset of 2), a full copy on every rank (nn.Embedding in vLLM) */
        RF_CHECK_GOTO(inv_own_linear(&b, "model.decoder.embed_positions", RF_MOD_REPLICATED, -1,
                                     cfg->max_position_embeddings + 2, H, false,
                                     RF_SPLIT_REPLICATED),
                      st, fail);
        if (Wd != H) { /* ReplicatedLinear, bias=False, in vLLM's OPTDecoder */
            RF_CHECK_GOTO(inv_own_linear(&b, "model.decoder.project_in", RF_MOD_REPLICATED, -1, H,
                                         Wd, false, RF_SPLIT_REPLICATED),
                          st, fail);
            RF_CHECK_GOTO(inv_own_linear(&b, "model.decoder.project_out", RF_MOD_REPLICATED,
                                         (int)L, Wd, H, false, RF_SPLIT_REPLICATED),
                          st, fail);
        }
    }
    for (int i = 0; i < L; i++)
        RF_CHECK_GOTO(cfg->family == RF_FAMILY_DEEPSEEK_V3 ? inv_layer_deepseek(&b, i)
                      : neox ? inv_layer_gpt_neox(&b, i)
                      : opt  ? inv_layer_opt(&b, i)
                      : next ? inv_layer_qwen3_next(&b, i)
                      : granite ? inv_layer_granitemoe(&b, i)
                             : inv_layer(&b, i),
                      st, fail);
    if (neox)
        RF_CHECK_GOTO(inv_layernorm(&b, "gpt_neox.final_layer_norm", (int)L, H), st, fail);
    else if (opt && cfg->final_layer_norm)
        RF_CHECK_GOTO(inv_layernorm(&b, "model.decoder.final_layer_norm", (int)L, H), st, fail);
    else if (!opt)
        RF_CHECK_GOTO(inv_norm(&b, "model.norm.weight", "model.norm", (int)L, H), st, fail);
    if (!cfg->tie_word_embeddings) {
        if ((m = inv_add_module(&b, head, RF_MOD_VOCAB, (int)L, V, Wd)) < 0) {
            st = RF_ERR_NOMEM;
            goto fail;
        }
        snprintf(ename, sizeof(ename), "%s.weight", head);
        RF_CHECK_GOTO(inv_add_tensor(&b, ename, cfg->dtype, 2, SHAPE(V, Wd), (int)L, -1,
                                     RF_PARAM_WEIGHT, RF_SPLIT_VOCAB, m, "weight", 0),
                      st, fail);
    }
    RF_CHECK_GOTO(inv_mtp_layers(&b), st, fail);
    qsort(inv.tensors, inv.ntensors, sizeof(rf_tensor_t), tensor_order);

    /* module -> tensor lists, name index, totals */
    for (int i = 0; i < inv.nmodules; i++) {
        inv.modules[i].tensors = calloc(1, sizeof(int));
        if (inv.modules[i].tensors == NULL) {
            st = RF_ERR_NOMEM;
            goto fail;
        }
    }
    for (int i = 0; i < inv.ntensors; i++) {
        rf_module_t *mod = &inv.modules[inv.tensors[i].module];
        int *grown = realloc(mod->tensors, (mod->ntensors + 1) * sizeof(int));
        if (grown == NULL) {
            st = RF_ERR_NOMEM;
            goto fail;
        }
        mod->tensors = grown;
        mod->tensors[mod->ntensors++] = i;
        inv.nparams += inv.tensors[i].numel;
    }
    rf_map_t *idx = malloc(sizeof(rf_map_t));
    if (idx == NULL || rf_map_init(idx, inv.ntensors) != RF_OK) {
        free(idx);
        st = RF_ERR_NOMEM;
        goto fail;
    }
    inv.index = idx;
    for (int i = 0; i < inv.ntensors; i++)
        if (rf_map_put(idx, rf_map_strkey(inv.tensors[i].name), (uint64_t)i) != RF_OK) {
            st = RF_ERR_NOMEM;
            goto fail;
        }
    *inv_p = inv;
    return RF_OK;
fail:
    rf_inventory_free(&inv);
    if (st == RF_ERR_NOMEM)
        rf_err_set(err, st, "inventory: out of memory");
    return st;
}

void rf_inventory_free(rf_inventory_t *inv)
{
    if (inv == NULL)
        return;
    for (int i = 0; i < inv->nmodules; i++)
        free(inv->modules[i].tensors);
    free(inv->modules);
    free(inv->tensors);
    if (inv->index != NULL) {
        rf_map_free(inv->index);
        free(inv->index);
    }
    rf_model_config_free(&inv->cfg);
    memset(inv, 0, sizeof(*inv));
}

int rf_inventory_find(const rf_inventory_t *inv, const char *name)
{
    uint64_t v;
    if (inv->index == NULL || !rf_map_get(inv->index, rf_map_strkey(name), &v))
        return -1;
    return strcmp(inv->tensors[v].name, name) == 0 ? (int)v : -1;
}

rf_unknown_t rf_inventory_classify_unknown(const rf_inventory_t *inv, const char *name)
{
    const rf_model_config_t *c = &inv->cfg;
    size_t n = strlen(name);
    const char *sfx = ".rotary_emb.inv_freq";
    int layer = -1, expert = -1, used = 0;
    /* a stored head of a tied model is the caller's to compare (the engine serves the
     * embedding in its place, so a different head must not be dropped unseen) */
    const char *lp = rf_family_layer_prefix(c->family);
    size_t lpn = strlen(lp);
    if (c->tie_word_embeddings && strcmp(name, inv->head_name ? inv->head_name : "lm_head.weight") == 0)
        return RF_UNKNOWN_TIED;
    if (n >= strlen(sfx) && strcmp(name + n - strlen(sfx), sfx) == 0)
        return RF_UNKNOWN_SKIP;
    /* model.mtp puts the MTP layers in the inventory: a name under them that it lacks is
     * not skipped but refused (nothing of a layer asked for is dropped unseen) */
    if (strncmp(name, "mtp.", 4) == 0)
        return c->mtp && c->family == RF_FAMILY_QWEN3_NEXT ? RF_UNKNOWN_ERROR : RF_UNKNOWN_SKIP;
    if (c->family == RF_FAMILY_GPT_NEOX && strncmp(name, lp, lpn) == 0) {
        /* the causal-mask buffers older GPT-NeoX checkpoints (Pythia) store: not weights */
        static const char *const buf[] = {".attention.bias", ".attention.masked_bias"};
        for (int i = 0; i < 2; i++) {
            size_t bl = strlen(buf[i]);
            if (sscanf(name + lpn, "%d%n", &layer, &used) == 1 && n == lpn + (size_t)used + bl &&
                strcmp(name + lpn + used, buf[i]) == 0)
                return RF_UNKNOWN_SKIP;
        }
        layer = -1;
        used = 0;
    }
    if (strncmp(name, lp, lpn) == 0 && sscanf(name + lpn, "%d.%n", &layer, &used) == 1 &&
        used > 0) {
        used += (int)lpn;
        /* DeepSeek's multi-token-prediction layers follow the decoder layers as written
         * (eh_proj, enorm, hnorm, shared_head.*, and a whole decoder layer): not served */
        if (c->family == RF_FAMILY_DEEPSEEK_V3 && layer >= c->orig_num_hidden_layers &&
            layer < c->orig_num_hidden_layers + c->num_nextn_predict_layers)
            return c->mtp ? RF_UNKNOWN_ERROR : RF_UNKNOWN_SKIP;
        if (layer >= c->num_hidden_layers && layer < c->orig_num_hidden_layers)
            return RF_UNKNOWN_CUT;
        if (sscanf(name + used, "mlp.experts.%d.", &expert) == 1 && expert >= c->num_experts &&
            expert < c->orig_num_experts)
            return RF_UNKNOWN_CUT;
    }
    return RF_UNKNOWN_ERROR;
}

/* ---- per-rank arithmetic ------------------------------------------------------------ */

int64_t rf_moe_local_count(int64_t e, const rf_rollout_coords_t *rc)
{
    int64_t ep = rc->ep;
    if (ep <= 1)
        return e;
    return e / ep + (rc->ep_rank < e % ep ? 1 : 0);
}

int64_t rf_moe_local_expert(int64_t e, const rf_rollout_coords_t *rc, int64_t i)
{
    int64_t ep = rc->ep, q = rc->ep_rank;
    if (ep <= 1)
        return i;
    if (rc->placement == RF_PLACE_ROUND_ROBIN)
        return q + i * ep;
    return q * (e / ep) + (q < e % ep ? q : e % ep) + i;
}

int64_t rf_moe_local_index(int64_t e, const rf_rollout_coords_t *rc, int64_t expert)
{
    int64_t ep = rc->ep, q = rc->ep_rank;
    if (expert < 0 || expert >= e)
        return -1;
    if (ep <= 1)
        return expert;
    if (rc->placement == RF_PLACE_ROUND_ROBIN)
        return expert % ep == q ? expert / ep : -1;
    int64_t first = rf_moe_local_expert(e, rc, 0);
    int64_t cnt = rf_moe_local_count(e, rc);
    return (expert >= first && expert < first + cnt) ? expert - first : -1;
}

static void slot_set(rf_slot_shape_t *s, const char *name, rf_dtype_t dt, int ndim,
                     const int64_t *shape)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->dtype = dt;
    s->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        s->shape[i] = shape[i];
}

static rf_status_t need_div(const rf_module_t *m, const char *what, int64_t a, int64_t b,
                            rf_err_t *err)
{
    if (b <= 0 || a % b != 0)
        return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: %s %lld is not divisible by %lld", m->name,
                          what, (long long)a, (long long)b);
    return RF_OK;
}

/* Shape of one model-layout slot named `name` of module m on a rank whose local logical
 * weight is rows x K (dense) or, for experts, El x (2 Ip | H) x (H | Ip). */
static rf_status_t quant_slot(const rf_inventory_t *inv, const rf_module_t *m, const char *name,
                              int64_t rows, int64_t K, rf_slot_shape_t *out, rf_err_t *err)
{
    rf_dtype_t dt = inv->cfg.dtype;
    int64_t G = inv->group_size;
    if (strcmp(name, "bias") == 0) {
        slot_set(out, name, dt, 1, SHAPE(m->kind == RF_MOD_ROW ? m->n : rows));
        return RF_OK;
    }
    switch (m->quant) {
    case RF_QUANT_NONE:
        slot_set(out, name, dt, 2, SHAPE(rows, K));
        return RF_OK;
    case RF_QUANT_FP8_BLOCK:
        if (strcmp(name, "weight") == 0)
            slot_set(out, name, RF_DTYPE_F8_E4M3, 2, SHAPE(rows, K));
        else
            slot_set(out, name, RF_DTYPE_F32, 2, SHAPE((rows + 127) / 128, (K + 127) / 128));
        return RF_OK;
    case RF_QUANT_FP8_TENSOR:
    case RF_QUANT_FP8_CHANNEL:
        /* vLLM's PerTensorScaleParameter holds one fp32 per fused shard (logical width);
         * ChannelQuantScaleParameter (N_local, 1), like the weight rows */
        if (strcmp(name, "weight") == 0)
            slot_set(out, name, RF_DTYPE_F8_E4M3, 2, SHAPE(rows, K));
        else if (m->quant == RF_QUANT_FP8_TENSOR)
            slot_set(out, name, RF_DTYPE_F32, 1, SHAPE(m->nlinears));
        else
            slot_set(out, name, RF_DTYPE_F32, 2, SHAPE(rows, 1));
        return RF_OK;
    case RF_QUANT_WNA16:
        if (K % G != 0 || K % 8 != 0)
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "%s: input size %lld per rank is not a multiple of the wna16 group "
                              "size %lld and of 8",
                              m->name, (long long)K, (long long)G);
        if (strcmp(name, "weight_packed") == 0)
            slot_set(out, name, RF_DTYPE_I32, 2, SHAPE(rows, K / 8));
        else
            slot_set(out, name, dt, 2, SHAPE(rows, K / G));
        return RF_OK;
    }
    return RF_OK;
}

static rf_status_t need_block(const rf_module_t *m, const char *what, int64_t a, rf_err_t *err)
{
    if (a % 128 != 0)
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "%s: %s %lld is not a multiple of the 128-row fp8 block: a shard "
                          "boundary would split a block",
                          m->name, what, (long long)a);
    return RF_OK;
}

static rf_status_t moe_slot(const rf_inventory_t *inv, const rf_module_t *m, const char *name,
                            int64_t El, int64_t Ip, rf_slot_shape_t *out, rf_err_t *err)
{
    int64_t H = inv->cfg.hidden_size, G = inv->group_size;
    /* rollout.layout hf names them as transformers 5 does: gate_up_proj, down_proj (fp8-block:
     * gate_up_proj_scale_inv, down_proj_scale_inv), GraniteMoE input_linear.weight /
     * output_linear.weight; the param is what follows "w13_" / "w2_" in vLLM's name */
    char hp[32];
    bool w13 = strncmp(name, "w13_", 4) == 0;
    const char *p = name + (w13 ? 4 : 3);
    if (strncmp(name, "gate_up_proj", 12) == 0 || strncmp(name, "down_proj", 9) == 0) {
        w13 = name[0] == 'g';
        snprintf(hp, sizeof(hp), "weight%s", name + (w13 ? 12 : 9));
        p = hp;
    } else if (strncmp(name, "input_linear.", 13) == 0 || strncmp(name, "output_linear.", 14) == 0) {
        w13 = name[0] == 'i';
        p = strchr(name, '.') + 1;
    }
    rf_dtype_t dt = inv->cfg.dtype;
    switch (m->quant) {
    case RF_QUANT_NONE:
        slot_set(out, name, dt, 3, w13 ? SHAPE(El, 2 * Ip, H) : SHAPE(El, H, Ip));
        return RF_OK;
    case RF_QUANT_FP8_BLOCK:
        RF_CHECK(need_block(m, "moe intermediate size per rank (I_p)", Ip, err));
        if (strcmp(p, "weight") == 0)
            slot_set(out, name, RF_DTYPE_F8_E4M3, 3, w13 ? SHAPE(El, 2 * Ip, H) : SHAPE(El, H, Ip));
        else if (w13)
            slot_set(out, name, RF_DTYPE_F32, 3, SHAPE(El, 2 * Ip / 128, (H + 127) / 128));
        else
            slot_set(out, name, RF_DTYPE_F32, 3, SHAPE(El, (H + 127) / 128, Ip / 128));
        return RF_OK;
    case RF_QUANT_WNA16: {
        int64_t K = w13 ? H : Ip, N = w13 ? 2 * Ip : H;
        if (K % G != 0 || K % 8 != 0)
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "%s: %s input size %lld per rank is not a multiple of the wna16 "
                              "group size %lld and of 8",
                              m->name, w13 ? "w13" : "w2", (long long)K, (long long)G);
        /* vLLM's wna16 FusedMoE model layout is K-first: (E_l, K/8, N) and (E_l, K/G, N) */
        if (strcmp(p, "weight_packed") == 0)
            slot_set(out, name, RF_DTYPE_I32, 3, SHAPE(El, K / 8, N));
        else
            slot_set(out, name, dt, 3, SHAPE(El, K / G, N));
        out->kfirst = true;
        return RF_OK;
    }
    case RF_QUANT_FP8_TENSOR:
    case RF_QUANT_FP8_CHANNEL: /* refused by the inventory build (inv_linear_q) */
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "%s: %s experts are not supported", m->name,
                          rf_quant_name(m->quant));
    }
    return RF_OK;
}

rf_status_t rf_module_slots(const rf_inventory_t *inv, int mi, const rf_rollout_coords_t *rc,
                            rf_slot_shape_t out[RF_MODULE_MAX_SLOTS], int *nslots_p,
                            rf_err_t *err)
{
    const rf_model_config_t *c = &inv->cfg;
    const rf_module_t *m = &inv->modules[mi];
    int64_t T = rc->tp;
    int64_t rows = 0, K = m->k;
    bool fp8 = m->quant == RF_QUANT_FP8_BLOCK;
    switch (m->kind) {
    case RF_MOD_VOCAB: {
        if (inv->layout == RF_ROLLOUT_LAYOUT_HF) {
            /* hf: ceil(V / T) rows per rank, no 64-row padding (nn.Embedding's V at TP 1) */
            slot_set(&out[0], "weight", c->dtype, 2, SHAPE(rf_vocab_rows_hf(c->vocab_size, T), m->k));
            *nslots_p = 1;
            return RF_OK;
        }
        int64_t Vp = rf_vocab_padded(c->vocab_size);
        RF_CHECK(need_div(m, "padded vocab", Vp, T, err));
        /* the row width is the module's K: H, or OPT's word_embed_proj_dim */
        slot_set(&out[0], "weight", c->dtype, 2, SHAPE(Vp / T, m->k));
        *nslots_p = 1;
        return RF_OK;
    }
    case RF_MOD_REPLICATED: {
        /* a full copy of every tensor: weight, and a LayerNorm's bias */
        for (int i = 0; i < m->ntensors; i++) {
            const rf_tensor_t *t = &inv->tensors[m->tensors[i]];
            if (t->slot >= 0 && t->slot < m->nslots)
                slot_set(&out[t->slot], m->slot_names[t->slot], t->dtype, t->ndim, t->shape);
        }
        *nslots_p = m->nslots;
        return RF_OK;
    }
    case RF_MOD_COLUMN:
        if (m->heads > 0) /* whole heads per rank (vLLM's MLA projections, GDN key-head groups) */
            RF_CHECK(need_div(m, m->sec_key[0] ? m->sec_key[0] : "num_attention_heads", m->heads,
                              T, err));
        if (m->col_heads > 0) {
            /* whole heads per rank, replicated over T / heads ranks when T > heads */
            int64_t h = m->col_heads;
            RF_CHECK(need_div(m, "output rows (whole heads)", m->n, h, err));
            if (T <= h)
                RF_CHECK(need_div(m, "heads", h, T, err));
            else
                RF_CHECK(need_div(m, "tensor parallel size (heads replicated)", T, h, err));
            rows = (m->n / h) * (h >= T ? h / T : 1);
            if (fp8) /* rollout.layout hf's q_proj / k_proj / v_proj: whole scale blocks */
                RF_CHECK(need_block(m, "output rows per rank", rows, err));
            break;
        }
        RF_CHECK(need_div(m, "output size", m->n, T, err));
        rows = m->n / T;
        if (fp8)
            RF_CHECK(need_block(m, "output rows per rank", rows, err));
        break;
    case RF_MOD_QKV_HEADS:
        /* whole heads per rank, as vLLM's QKVParallelLinear (nkv = nh: no replication) */
        RF_CHECK(need_div(m, "num_attention_heads", c->num_attention_heads, T, err));
        rows = 3 * (c->num_attention_heads / T) * c->head_dim;
        break;
    case RF_MOD_QKV: {
        int64_t nh = c->num_attention_heads, nkv = c->num_key_value_heads, d = c->head_dim;
        RF_CHECK(need_div(m, "num_attention_heads", nh, T, err));
        if (T <= nkv)
            RF_CHECK(need_div(m, "num_key_value_heads", nkv, T, err));
        else
            RF_CHECK(need_div(m, "tensor parallel size (kv heads replicated)", T, nkv, err));
        /* q rows in heads of d: nh, or 2 nh for qwen3_next's gated q (query + gate per head) */
        int64_t nh_p = (m->n / d - 2 * nkv) / T, nkv_p = nkv >= T ? nkv / T : 1;
        if (fp8) {
            RF_CHECK(need_block(m, "q rows per rank", nh_p * d, err));
            RF_CHECK(need_block(m, "k/v rows per rank", nkv_p * d, err));
        }
        rows = (nh_p + 2 * nkv_p) * d;
        break;
    }
    case RF_MOD_MERGED:
        RF_CHECK(need_div(m, "intermediate_size", m->n / 2, T, err));
        rows = m->n / T;
        if (fp8)
            RF_CHECK(need_block(m, "intermediate rows per rank", m->n / 2 / T, err));
        break;
    case RF_MOD_REPLICATED_LINEAR:
        /* a full copy; an fp8 block scale's shards start on a 128-row block (the merged
         * scale holds each shard's cdiv(N_s, 128) rows back to back) */
        rows = m->n;
        for (int i = 0; fp8 && m->nlinears > 1 && i < m->ntensors; i++) {
            const rf_tensor_t *t = &inv->tensors[m->tensors[i]];
            if (t->param == RF_PARAM_WEIGHT && t->shard == 0)
                RF_CHECK(need_block(m, "rows of its first fused linear", t->shape[0], err));
        }
        break;
    case RF_MOD_ROW:
        if (m->heads > 0)
            RF_CHECK(need_div(m, "num_attention_heads", m->heads, T, err));
        RF_CHECK(need_div(m, "input size", m->k, T, err));
        rows = m->n;
        K = m->k / T;
        if (fp8 && T > 1)
            RF_CHECK(need_block(m, "input columns per rank", K, err));
        break;
    case RF_MOD_SECTIONS: {
        /* the tensor's own shape with dim 0 cut to this rank's sections, whole heads each */
        const rf_tensor_t *t = &inv->tensors[m->tensors[0]];
        int64_t r = 0;
        if (m->ntensors != 1 || m->nsec < 1)
            return rf_err_set(err, RF_ERR_INVALID, "%s: a sectioned module holds one tensor",
                              m->name);
        for (int i = 0; i < m->nsec; i++) {
            RF_CHECK(need_div(m, m->sec_key[i], m->sec_heads[i], T, err));
            RF_CHECK(need_div(m, "section rows", m->sec_rows[i], T, err));
            r += m->sec_rows[i] / T;
        }
        slot_set(&out[0], m->slot_names[0], t->dtype, t->ndim, t->shape);
        out[0].shape[0] = r;
        *nslots_p = 1;
        return RF_OK;
    }
    case RF_MOD_MOE: {
        int64_t Tm = rc->ep > 1 ? 1 : (int64_t)rc->tp * rc->dp;
        int64_t El = rf_moe_local_count(c->num_experts, rc);
        RF_CHECK(need_div(m, "moe_intermediate_size", m->n, Tm, err));
        /* experts fused into one [E, N, K] tensor (GraniteMoE) reach a rank as one run of
         * consecutive experts: round robin would scatter them */
        if (rc->ep > 1 && rc->placement == RF_PLACE_ROUND_ROBIN && m->ntensors > 0 &&
            rf_tensor_all_experts(&inv->tensors[m->tensors[0]]))
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "%s: rollout.expert_placement round_robin is not supported for "
                              "experts stored fused in %s (%lld experts in one tensor; use "
                              "linear)",
                              m->name, inv->tensors[m->tensors[0]].name,
                              (long long)c->num_experts);
        for (int i = 0; i < m->nslots; i++)
            RF_CHECK(moe_slot(inv, m, m->slot_names[i], El, m->n / Tm, &out[i], err));
        *nslots_p = m->nslots;
        return RF_OK;
    }
    }
    for (int i = 0; i < m->nslots; i++)
        RF_CHECK(quant_slot(inv, m, m->slot_names[i], rows, K, &out[i], err));
    *nslots_p = m->nslots;
    return RF_OK;
}

rf_status_t rf_inventory_check_rollout(const rf_inventory_t *inv,
                                       const rf_rollout_coords_t *rc, rf_err_t *err)
{
    rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
    int n;
    if (rc->ep != 1 && rc->ep != rc->tp * rc->dp)
        return rf_err_set(err, RF_ERR_TOPOLOGY, "rollout.ep %d must be 1 or tp x dp = %d", rc->ep,
                          rc->tp * rc->dp);
    for (int i = 0; i < inv->nmodules; i++)
        RF_CHECK(rf_module_slots(inv, i, rc, s, &n, err));
    return RF_OK;
}
