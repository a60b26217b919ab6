/*
 * refit: Hugging Face config.json parsing (DESIGN.md section 4).
 *
 * Accepts both spellings of the keys (transformers 4.x as published, transformers 5 as
 * printed): torch_dtype | dtype, num_experts | num_local_experts | n_routed_experts,
 * rope_theta | rope_parameters.rope_theta, head_dim or H / nh, and null lists as empty.
 * Qwen3-Next's layer kinds: layer_types (transformers 5) or full_attention_interval (older
 * configs, default 4), which must agree when both are given.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/log.h"
#include "refit/model.h"

/* Reads an optional integer key; a present key of another type is an error. */
static rf_status_t cfg_int(json_t *root, const char *key, const char *path, int64_t dflt,
                           bool required, int64_t *out, rf_err_t *err)
{
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        if (required)
            return rf_err_set(err, RF_ERR_CONFIG, "%s: missing required key '%s'", path, key);
        *out = dflt;
        return RF_OK;
    }
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) >= -0x1p62 && json_real_value(v) <= 0x1p62 &&
               json_real_value(v) == (double)(int64_t)json_real_value(v)) {
        /* a whole-number real ("2.0"); the range check first: converting a double outside
         * int64_t's range (or NaN) is undefined behaviour */
        *out = (int64_t)json_real_value(v);
    } else {
        return rf_err_set(err, RF_ERR_CONFIG, "%s: key '%s' must be an integer", path, key);
    }
    if (*out < 0)
        return rf_err_set(err, RF_ERR_CONFIG, "%s: key '%s' is negative (%lld)", path, key,
                          (long long)*out);
    return RF_OK;
}

static rf_status_t cfg_bool(json_t *root, const char *key, const char *path, bool dflt,
                            bool *out, rf_err_t *err)
{
    json_t *v = json_object_get(root, key);
    if (v == NULL || json_is_null(v)) {
        *out = dflt;
        return RF_OK;
    }
    if (!json_is_boolean(v))
        return rf_err_set(err, RF_ERR_CONFIG, "%s: key '%s' must be a boolean", path, key);
    *out = json_is_true(v);
    return RF_OK;
}

static rf_status_t cfg_str(json_t *root, const char *key, const char *path, char *out,
                           size_t cap, rf_err_t *err)
{
    json_t *v = json_object_get(root, key);
    out[0] = '\0';
    if (v == NULL || json_is_null(v))
        return RF_OK;
    if (!json_is_string(v))
        return rf_err_set(err, RF_ERR_CONFIG, "%s: key '%s' must be a string", path, key);
    if (strlen(json_string_value(v)) >= cap)
        return rf_err_set(err, RF_ERR_CONFIG, "%s: key '%s' is too long", path, key);
    snprintf(out, cap, "%s", json_string_value(v));
    return RF_OK;
}

static rf_status_t cfg_real(json_t *root, const char *key, double dflt, double *out)
{
    json_t *v = json_object_get(root, key);
    *out = dflt;
    if (v != NULL && json_is_number(v))
        *out = json_number_value(v);
    return RF_OK;
}

/* Appends the strings of a JSON list (null = empty) to cfg->not_convert. */
static rf_status_t cfg_add_names(rf_model_config_t *cfg, json_t *list, const char *path,
                                 const char *key, rf_err_t *err)
{
    if (list == NULL || json_is_null(list))
        return RF_OK;
    if (!json_is_array(list))
        return rf_err_set(err, RF_ERR_CONFIG, "%s: quantization_config.%s must be a list", path,
                          key);
    size_t n = json_array_size(list);
    char **grown = realloc(cfg->not_convert, (cfg->n_not_convert + n) * sizeof(char *) + 1);
    if (grown == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    cfg->not_convert = grown;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(list, i);
        if (!json_is_string(s))
            return rf_err_set(err, RF_ERR_CONFIG, "%s: quantization_config.%s[%zu] must be a string",
                              path, key, i);
        char *dup = strdup(json_string_value(s));
        if (dup == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
        cfg->not_convert[cfg->n_not_convert++] = dup;
    }
    return RF_OK;
}

static rf_status_t cfg_quant(rf_model_config_t *cfg, json_t *q, const char *path, rf_err_t *err)
{
    rf_status_t st;
    char method[64], fmt[32];
    if (!json_is_object(q))
        return rf_err_set(err, RF_ERR_CONFIG, "%s: quantization_config must be an object", path);
    cfg->has_quant_config = true;
    RF_CHECK(cfg_str(q, "quant_method", path, method, sizeof(method), err));
    RF_CHECK(cfg_str(q, "scale_fmt", path, cfg->scale_fmt, sizeof(cfg->scale_fmt), err));
    RF_CHECK(cfg_str(q, "activation_scheme", path, cfg->activation_scheme,
                     sizeof(cfg->activation_scheme), err));
    RF_CHECK(cfg_add_names(cfg, json_object_get(q, "modules_to_not_convert"), path,
                           "modules_to_not_convert", err));
    RF_CHECK(cfg_add_names(cfg, json_object_get(q, "ignore"), path, "ignore", err));
    if (strcmp(method, "fp8") == 0) {
        RF_CHECK(cfg_str(q, "fmt", path, fmt, sizeof(fmt), err));
        if (fmt[0] != '\0' && strcmp(fmt, "e4m3") != 0)
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "%s: quantization_config.fmt '%s' is not supported (e4m3 only)",
                              path, fmt);
        json_t *wb = json_object_get(q, "weight_block_size");
        if (wb == NULL || json_is_null(wb)) {
            /* vLLM's Fp8Config without weight_block_size: one weight_scale per linear */
            cfg->quant = RF_QUANT_FP8_TENSOR;
            return RF_OK;
        }
        cfg->quant = RF_QUANT_FP8_BLOCK;
        if (!json_is_array(wb) || json_array_size(wb) != 2 ||
            !json_is_integer(json_array_get(wb, 0)) || !json_is_integer(json_array_get(wb, 1)))
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "%s: quantization_config.weight_block_size must be [128, 128] or "
                              "absent (per-tensor fp8)",
                              path);
        cfg->weight_block[0] = json_integer_value(json_array_get(wb, 0));
        cfg->weight_block[1] = json_integer_value(json_array_get(wb, 1));
        if (cfg->weight_block[0] != 128 || cfg->weight_block[1] != 128)
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "%s: quantization_config.weight_block_size [%lld, %lld]: only "
                              "[128, 128] is supported",
                              path, (long long)cfg->weight_block[0],
                              (long long)cfg->weight_block[1]);
    } else if (strcmp(method, "compressed-tensors") == 0) {
        json_t *groups = json_object_get(q, "config_groups");
        const char *gk;
        json_t *g;
        bool have = false;
        if (!json_is_object(groups))
            return rf_err_set(err, RF_ERR_CONFIG,
                              "%s: quantization_config.config_groups missing", path);
        json_object_foreach(groups, gk, g)
        {
            json_t *w = json_object_get(g, "weights");
            int64_t bits = 0, gs = 0;
            bool sym = true, wdyn = false;
            char strategy[32], actorder[32], type[16];
            rf_quant_t gq;
            if (!json_is_object(w))
                continue;
            st = cfg_int(w, "num_bits", path, 0, false, &bits, err);
            if (st == RF_OK)
                st = cfg_int(w, "group_size", path, 0, false, &gs, err);
            if (st == RF_OK)
                st = cfg_bool(w, "symmetric", path, true, &sym, err);
            if (st == RF_OK)
                st = cfg_bool(w, "dynamic", path, false, &wdyn, err);
            if (st == RF_OK)
                st = cfg_str(w, "strategy", path, strategy, sizeof(strategy), err);
            if (st == RF_OK)
                st = cfg_str(w, "type", path, type, sizeof(type), err);
            if (st != RF_OK)
                return st;
            json_t *ao = json_object_get(w, "actorder");
            actorder[0] = '\0';
            if (json_is_string(ao))
                snprintf(actorder, sizeof(actorder), "%s", json_string_value(ao));
            if (json_is_true(ao) || (actorder[0] && strcmp(actorder, "static") != 0))
                cfg->act_order = true;
            /* compressed-tensors "float-quantized" (FP8 dynamic / static): 8-bit float
             * weights, symmetric, static weight scales per tensor or per output channel */
            bool fp8 = bits == 8 && strcmp(type, "float") == 0 && sym && !wdyn;
            if (bits == 4 && sym && strcmp(strategy, "group") == 0 && strcmp(type, "float") != 0)
                gq = RF_QUANT_WNA16;
            else if (fp8 && strcmp(strategy, "tensor") == 0)
                gq = RF_QUANT_FP8_TENSOR;
            else if (fp8 && strcmp(strategy, "channel") == 0)
                gq = RF_QUANT_FP8_CHANNEL;
            else
                return rf_err_set(err, RF_ERR_UNSUPPORTED,
                                  "%s: config_groups.%s: only int4 symmetric group quantization "
                                  "(wna16) and 8-bit float weights with strategy tensor or "
                                  "channel (fp8-tensor, fp8-channel) are supported",
                                  path, gk);
            if (have && gq != cfg->quant)
                return rf_err_set(err, RF_ERR_UNSUPPORTED,
                                  "%s: config_groups.%s is %s but an earlier group is %s: one "
                                  "scheme per model",
                                  path, gk, rf_quant_name(gq), rf_quant_name(cfg->quant));
            have = true;
            cfg->quant = gq;
            if (gq == RF_QUANT_WNA16) {
                cfg->group_size = gs;
                continue;
            }
            /* input_activations: null (weight only) or dynamic per token keep no input scale;
             * static ones carry an input_scale per linear */
            json_t *ia = json_object_get(g, "input_activations");
            bool adyn = true;
            if (ia != NULL && !json_is_null(ia)) {
                if (!json_is_object(ia))
                    return rf_err_set(err, RF_ERR_CONFIG,
                                      "%s: config_groups.%s.input_activations must be an object",
                                      path, gk);
                RF_CHECK(cfg_bool(ia, "dynamic", path, false, &adyn, err));
            }
            if (!adyn)
                snprintf(cfg->activation_scheme, sizeof(cfg->activation_scheme), "static");
        }
        if (!have)
            cfg->quant = RF_QUANT_WNA16;
    } else {
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: quantization_config.quant_method '%s' is not supported "
                          "(fp8 or compressed-tensors)",
                          path, method);
    }
    return RF_OK;
}

/*
 * The keys of the LayerNorm families that shape tensors or must be consistent (GPT-NeoX,
 * OPT). Defaults are transformers': GPTNeoXConfig rotary_pct 0.25, use_parallel_residual
 * true; OPTConfig word_embed_proj_dim = hidden_size, do_layer_norm_before true,
 * max_position_embeddings 2048. Other families: word_embed_proj_dim = H, nothing else used.
 */
static rf_status_t cfg_layernorm_family(json_t *root, const char *path, rf_model_config_t *c,
                                        rf_err_t *err)
{
    json_t *rp = json_object_get(root, "rope_parameters");
    c->word_embed_proj_dim = c->hidden_size;
    RF_CHECK(cfg_real(root, "layer_norm_eps", 1e-5, &c->layer_norm_eps));
    if (c->family == RF_FAMILY_GPT_NEOX) {
        /* transformers 5 writes rope_parameters.partial_rotary_factor, 4.x rotary_pct */
        json_t *a = json_object_get(root, "rotary_pct");
        json_t *b = json_is_object(rp) ? json_object_get(rp, "partial_rotary_factor") : NULL;
        if ((a != NULL && !json_is_null(a) && !json_is_number(a)) ||
            (b != NULL && !json_is_null(b) && !json_is_number(b)))
            return rf_err_set(err, RF_ERR_CONFIG,
                              "%s: rotary_pct / rope_parameters.partial_rotary_factor must be a "
                              "number",
                              path);
        c->rotary_pct = json_is_number(a) ? json_number_value(a)
                                          : (json_is_number(b) ? json_number_value(b) : 0.25);
        if (json_is_number(a) && json_is_number(b) && json_number_value(a) != json_number_value(b))
            return rf_err_set(err, RF_ERR_CONFIG,
                              "%s: rotary_pct %g and rope_parameters.partial_rotary_factor %g "
                              "disagree",
                              path, json_number_value(a), json_number_value(b));
        if (!(c->rotary_pct > 0.0 && c->rotary_pct <= 1.0))
            return rf_err_set(err, RF_ERR_CONFIG, "%s: rotary_pct %g is not in (0, 1]", path,
                              c->rotary_pct);
        RF_CHECK(cfg_bool(root, "use_parallel_residual", path, true, &c->use_parallel_residual,
                          err));
        if (c->num_key_value_heads != c->num_attention_heads)
            return rf_err_set(err, RF_ERR_CONFIG,
                              "%s: gpt_neox has no grouped KV heads (num_key_value_heads %lld, "
                              "num_attention_heads %lld)",
                              path, (long long)c->num_key_value_heads,
                              (long long)c->num_attention_heads);
    } else if (c->family == RF_FAMILY_OPT) {
        bool remove_final = false, affine = true;
        RF_CHECK(cfg_int(root, "word_embed_proj_dim", path, c->hidden_size, false,
                         &c->word_embed_proj_dim, err));
        RF_CHECK(cfg_int(root, "max_position_embeddings", path, 2048, false,
                         &c->max_position_embeddings, err));
        RF_CHECK(cfg_bool(root, "do_layer_norm_before", path, true, &c->do_layer_norm_before, err));
        RF_CHECK(cfg_bool(root, "_remove_final_layer_norm", path, false, &remove_final, err));
        RF_CHECK(cfg_bool(root, "layer_norm_elementwise_affine", path, true, &affine, err));
        /* OPTDecoder keeps final_layer_norm only for pre-norm models not told to drop it */
        c->final_layer_norm = c->do_layer_norm_before && !remove_final;
        if (c->word_embed_proj_dim == 0 || c->max_position_embeddings == 0)
            return rf_err_set(err, RF_ERR_CONFIG,
                              "%s: word_embed_proj_dim and max_position_embeddings must be "
                              "positive",
                              path);
        if (!affine)
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "%s: layer_norm_elementwise_affine false is not supported (its "
                              "LayerNorms have no weights to reload)",
                              path);
        if (c->num_key_value_heads != c->num_attention_heads)
            return rf_err_set(err, RF_ERR_CONFIG,
                              "%s: opt has no grouped KV heads (num_key_value_heads %lld, "
                              "num_attention_heads %lld)",
                              path, (long long)c->num_key_value_heads,
                              (long long)c->num_attention_heads);
    }
    return RF_OK;
}

/*
 * Qwen3-Next (transformers Qwen3NextConfig, vLLM qwen3_next.py): the Gated DeltaNet sizes,
 * the shared expert's width, and the layer kinds. layer_types (transformers 5) lists
 * "linear_attention" / "full_attention" per layer; older configs give full_attention_interval
 * (layer i is full attention when (i + 1) % interval == 0; Qwen3NextConfig's default 4). Both
 * present: they must say the same for every layer, else the two keys are named. Sizes that
 * shape tensors must be positive; nv must be a multiple of nk (value heads are grouped per
 * key head in in_proj_qkvz / in_proj_ba). The q / k / v biases follow vLLM's qkv_bias key
 * (default false); o_proj and the MLPs have none.
 */
static rf_status_t cfg_qwen3_next(json_t *root, const char *path, rf_model_config_t *c,
                                  rf_err_t *err)
{
    json_t *lt = json_object_get(root, "layer_types");
    bool have_interval = json_object_get(root, "full_attention_interval") != NULL &&
                         !json_is_null(json_object_get(root, "full_attention_interval"));
    int64_t L = c->num_hidden_layers;
    RF_CHECK(cfg_int(root, "linear_num_key_heads", path, 0, true, &c->linear_num_key_heads, err));
    RF_CHECK(cfg_int(root, "linear_num_value_heads", path, 0, true, &c->linear_num_value_heads,
                     err));
    RF_CHECK(cfg_int(root, "linear_key_head_dim", path, 0, true, &c->linear_key_head_dim, err));
    RF_CHECK(cfg_int(root, "linear_value_head_dim", path, 0, true, &c->linear_value_head_dim,
                     err));
    RF_CHECK(cfg_int(root, "linear_conv_kernel_dim", path, 4, false, &c->linear_conv_kernel_dim,
                     err));
    RF_CHECK(cfg_int(root, "shared_expert_intermediate_size", path, 0, false,
                     &c->shared_expert_intermediate_size, err));
    RF_CHECK(cfg_int(root, "full_attention_interval", path, 4, false, &c->full_attention_interval,
                     err));
    /* not in the published config.json; vLLM's Qwen3NextMTP reads it with getattr(..., 1) */
    RF_CHECK(cfg_int(root, "num_nextn_predict_layers", path, 1, false,
                     &c->num_nextn_predict_layers, err));
    RF_CHECK(cfg_bool(root, "qkv_bias", path, false, &c->qkv_bias, err));
    c->o_bias = c->mlp_bias = false;
    if (c->linear_num_key_heads == 0 || c->linear_num_value_heads == 0 ||
        c->linear_key_head_dim == 0 || c->linear_value_head_dim == 0 ||
        c->linear_conv_kernel_dim == 0 || c->full_attention_interval == 0)
        return rf_err_set(err, RF_ERR_CONFIG,
                          "%s: qwen3_next: linear_num_key_heads, linear_num_value_heads, "
                          "linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim "
                          "and full_attention_interval must be positive",
                          path);
    if (c->linear_num_value_heads % c->linear_num_key_heads != 0)
        return rf_err_set(err, RF_ERR_CONFIG,
                          "%s: qwen3_next: linear_num_value_heads %lld is not a multiple of "
                          "linear_num_key_heads %lld",
                          path, (long long)c->linear_num_value_heads,
                          (long long)c->linear_num_key_heads);
    if (c->num_experts > 0 && c->moe_intermediate_size == 0)
        return rf_err_set(err, RF_ERR_CONFIG,
                          "%s: qwen3_next: num_experts %lld needs moe_intermediate_size", path,
                          (long long)c->num_experts);
    if (L > (1 << 20))
        return rf_err_set(err, RF_ERR_CONFIG, "%s: num_hidden_layers %lld is too large", path,
                          (long long)L);
    c->full_attention = calloc((size_t)L + 1, 1);
    if (c->full_attention == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    c->n_full_attention = (int)L;
    for (int64_t i = 0; i < L; i++)
        c->full_attention[i] = (i + 1) % c->full_attention_interval == 0;
    if (lt == NULL || json_is_null(lt))
        return RF_OK;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != L)
        return rf_err_set(err, RF_ERR_CONFIG,
                          "%s: layer_types must be a list of num_hidden_layers (%lld) strings",
                          path, (long long)L);
    for (int64_t i = 0; i < L; i++) {
        json_t *x = json_array_get(lt, (size_t)i);
        const char *v = json_is_string(x) ? json_string_value(x) : "";
        unsigned char full;
        if (strcmp(v, "full_attention") == 0)
            full = 1;
        else if (strcmp(v, "linear_attention") == 0)
            full = 0;
        else
            return rf_err_set(err, RF_ERR_CONFIG,
                              "%s: layer_types[%lld] must be \"linear_attention\" or "
                              "\"full_attention\"",
                              path, (long long)i);
        if (have_interval && full != c->full_attention[i])
            return rf_err_set(err, RF_ERR_CONFIG,
                              "%s: layer_types[%lld] \"%s\" disagrees with "
                              "full_attention_interval %lld (layer %lld is %s attention by it)",
                              path, (long long)i, v, (long long)c->full_attention_interval,
                              (long long)i, c->full_attention[i] ? "full" : "linear");
        c->full_attention[i] = full;
    }
    return RF_OK;
}

/*
 * DeepSeek-V3 / Moonlight (transformers DeepseekV3Config; vLLM deepseek_v2.py): the MLA sizes,
 * where the MoE layers are, shared experts, the router's correction bias, MTP layers.
 * Defaults are DeepseekV3Config's: q_lora_rank 1536 (null: a plain q_proj), kv_lora_rank 512,
 * qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, first_k_dense_replace 3,
 * moe_layer_freq 1, n_shared_experts 1, topk_method "noaux_tc", num_nextn_predict_layers 1.
 */
static rf_status_t cfg_deepseek(json_t *root, const char *path, rf_model_config_t *c,
                                rf_err_t *err)
{
    char topk[32];
    json_t *q = json_object_get(root, "q_lora_rank");
    RF_CHECK(cfg_int(root, "q_lora_rank", path, 0, false, &c->q_lora_rank, err));
    if (q == NULL)
        c->q_lora_rank = 1536;
    RF_CHECK(cfg_int(root, "kv_lora_rank", path, 512, false, &c->kv_lora_rank, err));
    RF_CHECK(cfg_int(root, "qk_nope_head_dim", path, 128, false, &c->qk_nope_head_dim, err));
    RF_CHECK(cfg_int(root, "qk_rope_head_dim", path, 64, false, &c->qk_rope_head_dim, err));
    RF_CHECK(cfg_int(root, "v_head_dim", path, 128, false, &c->v_head_dim, err));
    RF_CHECK(cfg_int(root, "first_k_dense_replace", path, 3, false, &c->first_k_dense_replace,
                     err));
    RF_CHECK(cfg_int(root, "moe_layer_freq", path, 1, false, &c->moe_layer_freq, err));
    RF_CHECK(cfg_int(root, "n_shared_experts", path, 1, false, &c->n_shared_experts, err));
    RF_CHECK(cfg_int(root, "num_nextn_predict_layers", path, 1, false,
                     &c->num_nextn_predict_layers, err));
    RF_CHECK(cfg_str(root, "topk_method", path, topk, sizeof(topk), err));
    c->score_correction = topk[0] == '\0' || strcmp(topk, "noaux_tc") == 0;
    if (c->kv_lora_rank == 0 || c->qk_nope_head_dim == 0 || c->qk_rope_head_dim == 0 ||
        c->v_head_dim == 0 || c->moe_layer_freq == 0)
        return rf_err_set(err, RF_ERR_CONFIG,
                          "%s: deepseek_v3 needs positive kv_lora_rank, qk_nope_head_dim, "
                          "qk_rope_head_dim, v_head_dim and moe_layer_freq",
                          path);
    if (c->num_experts > 0 && c->moe_intermediate_size == 0)
        return rf_err_set(err, RF_ERR_CONFIG,
                          "%s: deepseek_v3 with n_routed_experts needs moe_intermediate_size",
                          path);
    return RF_OK;
}

rf_status_t rf_model_config_parse(const char *text, size_t len, const char *path,
                                  rf_model_config_t *cfg_p, rf_err_t *err)
{
    json_error_t jerr;
    rf_model_config_t cfg;
    rf_status_t st = RF_OK;
    char dt1[32], dt2[32];
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    path = path ? path : "config.json";
    memset(&cfg, 0, sizeof(cfg));
    if (root == NULL)
        return rf_err_set(err, RF_ERR_CONFIG, "%s: line %d: %s", path, jerr.line, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return rf_err_set(err, RF_ERR_CONFIG, "%s: not a JSON object", path);
    }
#define TRY(call)                                                                          \
    do {                                                                                   \
        st = (call);                                                                       \
        if (st != RF_OK)                                                                   \
            goto out;                                                                      \
    } while (0)
    TRY(cfg_str(root, "model_type", path, cfg.model_type, sizeof(cfg.model_type), err));
    json_t *arch = json_object_get(root, "architectures");
    if (json_is_array(arch) && json_is_string(json_array_get(arch, 0)))
        snprintf(cfg.architecture, sizeof(cfg.architecture), "%s",
                 json_string_value(json_array_get(arch, 0)));
    if (strcmp(cfg.model_type, "llama") == 0)
        cfg.family = RF_FAMILY_LLAMA;
    else if (strcmp(cfg.model_type, "qwen2") == 0)
        cfg.family = RF_FAMILY_QWEN2;
    else if (strcmp(cfg.model_type, "qwen3") == 0)
        cfg.family = RF_FAMILY_QWEN3;
    else if (strcmp(cfg.model_type, "qwen3_moe") == 0)
        cfg.family = RF_FAMILY_QWEN3_MOE;
    else if (strcmp(cfg.model_type, "gpt_neox") == 0)
        cfg.family = RF_FAMILY_GPT_NEOX;
    else if (strcmp(cfg.model_type, "opt") == 0)
        cfg.family = RF_FAMILY_OPT;
    else if (strcmp(cfg.model_type, "qwen3_next") == 0)
        cfg.family = RF_FAMILY_QWEN3_NEXT;
    else if (strcmp(cfg.model_type, "deepseek_v3") == 0)
        cfg.family = RF_FAMILY_DEEPSEEK_V3;
    else if (strcmp(cfg.model_type, "granitemoe") == 0)
        cfg.family = RF_FAMILY_GRANITEMOE;
    else {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: model_type '%s' is not supported (llama, qwen2, qwen3, qwen3_moe, "
                        "gpt_neox, opt, qwen3_next, deepseek_v3, granitemoe)",
                        path, cfg.model_type);
        goto out;
    }
    /* dtype: torch_dtype or dtype, error if both and different */
    TRY(cfg_str(root, "torch_dtype", path, dt1, sizeof(dt1), err));
    TRY(cfg_str(root, "dtype", path, dt2, sizeof(dt2), err));
    if (dt1[0] && dt2[0] && strcmp(dt1, dt2) != 0) {
        st = rf_err_set(err, RF_ERR_CONFIG, "%s: torch_dtype '%s' and dtype '%s' disagree", path,
                        dt1, dt2);
        goto out;
    }
    cfg.dtype = rf_dtype_parse(dt1[0] ? dt1 : (dt2[0] ? dt2 : "bfloat16"));
    if (cfg.dtype != RF_DTYPE_BF16 && cfg.dtype != RF_DTYPE_F16 && cfg.dtype != RF_DTYPE_F32) {
        st = rf_err_set(err, RF_ERR_CONFIG, "%s: dtype '%s' is not bfloat16, float16 or float32",
                        path, dt1[0] ? dt1 : dt2);
        goto out;
    }
    TRY(cfg_int(root, "hidden_size", path, 0, true, &cfg.hidden_size, err));
    TRY(cfg_int(root, "num_hidden_layers", path, 0, true, &cfg.num_hidden_layers, err));
    TRY(cfg_int(root, "vocab_size", path, 0, true, &cfg.vocab_size, err));
    TRY(cfg_int(root, "num_attention_heads", path, 0, true, &cfg.num_attention_heads, err));
    TRY(cfg_int(root, "num_key_value_heads", path, cfg.num_attention_heads, false,
                &cfg.num_key_value_heads, err));
    /* OPT names the MLP width ffn_dim */
    TRY(cfg_int(root, cfg.family == RF_FAMILY_OPT ? "ffn_dim" : "intermediate_size", path, 0,
                cfg.family != RF_FAMILY_QWEN3_MOE && cfg.family != RF_FAMILY_QWEN3_NEXT,
                &cfg.intermediate_size, err));
    if (cfg.hidden_size == 0 || cfg.num_hidden_layers == 0 || cfg.vocab_size == 0 ||
        cfg.num_attention_heads == 0 || cfg.num_key_value_heads == 0) {
        st = rf_err_set(err, RF_ERR_CONFIG,
                        "%s: hidden_size, num_hidden_layers, vocab_size, num_attention_heads and "
                        "num_key_value_heads must be positive",
                        path);
        goto out;
    }
    if (cfg.hidden_size % cfg.num_attention_heads != 0 && json_object_get(root, "head_dim") == NULL) {
        st = rf_err_set(err, RF_ERR_CONFIG,
                        "%s: hidden_size %lld is not divisible by num_attention_heads %lld and "
                        "head_dim is absent",
                        path, (long long)cfg.hidden_size, (long long)cfg.num_attention_heads);
        goto out;
    }
    TRY(cfg_int(root, "head_dim", path, cfg.hidden_size / cfg.num_attention_heads, false,
                &cfg.head_dim, err));
    if (cfg.head_dim == 0) {
        st = rf_err_set(err, RF_ERR_CONFIG, "%s: head_dim must be positive", path);
        goto out;
    }
    /* routed experts: three spellings; they must agree when several are present */
    {
        static const char *keys[] = {"num_experts", "num_local_experts", "n_routed_experts"};
        cfg.num_experts = 0;
        for (int i = 0; i < 3; i++) {
            int64_t e = 0;
            TRY(cfg_int(root, keys[i], path, 0, false, &e, err));
            if (e != 0 && cfg.num_experts != 0 && e != cfg.num_experts) {
                st = rf_err_set(err, RF_ERR_CONFIG, "%s: '%s' %lld disagrees with %lld", path,
                                keys[i], (long long)e, (long long)cfg.num_experts);
                goto out;
            }
            if (e != 0)
                cfg.num_experts = e;
        }
    }
    TRY(cfg_int(root, "moe_intermediate_size", path, 0, false, &cfg.moe_intermediate_size, err));
    TRY(cfg_int(root, "decoder_sparse_step", path, 1, false, &cfg.decoder_sparse_step, err));
    TRY(cfg_int(root, "num_experts_per_tok", path, 0, false, &cfg.num_experts_per_tok, err));
    if (cfg.family == RF_FAMILY_GRANITEMOE) {
        /* GraniteMoeConfig: every layer is sparse, each expert intermediate_size wide (vLLM's
         * GraniteMoeMoE passes config.intermediate_size to FusedMoE); there is no dense MLP.
         * embedding_multiplier, attention_multiplier, residual_multiplier and logits_scaling
         * scale activations and logits, never a weight: not read. */
        if (cfg.num_experts == 0 || cfg.intermediate_size == 0) {
            st = rf_err_set(err, RF_ERR_CONFIG,
                            "%s: granitemoe needs num_local_experts and intermediate_size", path);
            goto out;
        }
        if (cfg.moe_intermediate_size != 0 && cfg.moe_intermediate_size != cfg.intermediate_size) {
            st = rf_err_set(err, RF_ERR_CONFIG,
                            "%s: granitemoe: moe_intermediate_size %lld disagrees with "
                            "intermediate_size %lld (the experts' width)",
                            path, (long long)cfg.moe_intermediate_size,
                            (long long)cfg.intermediate_size);
            goto out;
        }
        cfg.moe_intermediate_size = cfg.intermediate_size;
        cfg.decoder_sparse_step = 1;
    }
    if (cfg.family == RF_FAMILY_QWEN3_MOE &&
        (cfg.num_experts == 0 || cfg.moe_intermediate_size == 0 || cfg.decoder_sparse_step == 0)) {
        st = rf_err_set(err, RF_ERR_CONFIG,
                        "%s: qwen3_moe needs num_experts, moe_intermediate_size and a positive "
                        "decoder_sparse_step",
                        path);
        goto out;
    }
    if (cfg.num_experts > 0 && cfg.decoder_sparse_step <= 0) { /* every MoE family: the
        * sparse-layer rule divides by it (rf_model_layer_is_moe; fuzz_model_config found a
        * qwen3_next config with 0) */
        st = rf_err_set(err, RF_ERR_CONFIG,
                        "%s: decoder_sparse_step %lld: a model with experts needs a positive "
                        "decoder_sparse_step (every layer whose index + 1 it divides is sparse)",
                        path, (long long)cfg.decoder_sparse_step);
        goto out;
    }
    {
        json_t *mol = json_object_get(root, "mlp_only_layers");
        if (mol != NULL && !json_is_null(mol)) {
            if (!json_is_array(mol)) {
                st = rf_err_set(err, RF_ERR_CONFIG, "%s: mlp_only_layers must be a list", path);
                goto out;
            }
            cfg.n_mlp_only_layers = (int)json_array_size(mol);
            cfg.mlp_only_layers = calloc(cfg.n_mlp_only_layers + 1, sizeof(int64_t));
            for (int i = 0; i < cfg.n_mlp_only_layers; i++) {
                json_t *x = json_array_get(mol, i);
                if (!json_is_integer(x)) {
                    st = rf_err_set(err, RF_ERR_CONFIG,
                                    "%s: mlp_only_layers[%d] must be an integer", path, i);
                    goto out;
                }
                cfg.mlp_only_layers[i] = json_integer_value(x);
            }
        }
    }
    /* OPTConfig ties the head by default; every other family's config unties it */
    TRY(cfg_bool(root, "tie_word_embeddings", path, cfg.family == RF_FAMILY_OPT,
                 &cfg.tie_word_embeddings, err));
    if (cfg.family == RF_FAMILY_GPT_NEOX) {
        /* GPTNeoXConfig.attention_bias (default true) covers query_key_value and dense; the
         * MLP always has biases */
        TRY(cfg_bool(root, "attention_bias", path, true, &cfg.qkv_bias, err));
        cfg.o_bias = cfg.qkv_bias;
        cfg.mlp_bias = true;
    } else if (cfg.family == RF_FAMILY_OPT) {
        TRY(cfg_bool(root, "enable_bias", path, true, &cfg.qkv_bias, err));
        cfg.o_bias = cfg.mlp_bias = cfg.qkv_bias;
    } else {
        bool attn_bias = false;
        TRY(cfg_bool(root, "attention_bias", path, false, &attn_bias, err));
        TRY(cfg_bool(root, "mlp_bias", path, false, &cfg.mlp_bias, err));
        /* Qwen2 always has q/k/v biases and no o_proj bias (vLLM Qwen2Attention). */
        cfg.qkv_bias = cfg.family == RF_FAMILY_QWEN2 ? true : attn_bias;
        cfg.o_bias = cfg.family == RF_FAMILY_QWEN2 ? false : attn_bias;
        if (cfg.family != RF_FAMILY_LLAMA)
            cfg.mlp_bias = false;
    }
    TRY(cfg_layernorm_family(root, path, &cfg, err));
    if (cfg.family == RF_FAMILY_QWEN3_NEXT)
        TRY(cfg_qwen3_next(root, path, &cfg, err));
    if (cfg.family == RF_FAMILY_DEEPSEEK_V3)
        TRY(cfg_deepseek(root, path, &cfg, err));
    {
        json_t *rp = json_object_get(root, "rope_parameters");
        /* old GPT-NeoX configs (Pythia) name it rotary_emb_base */
        TRY(cfg_real(root, "rotary_emb_base", 10000.0, &cfg.rope_theta));
        TRY(cfg_real(root, "rope_theta", cfg.rope_theta, &cfg.rope_theta));
        if (json_is_object(rp))
            TRY(cfg_real(rp, "rope_theta", cfg.rope_theta, &cfg.rope_theta));
    }
    TRY(cfg_real(root, "rms_norm_eps", 1e-6, &cfg.rms_norm_eps));
    {
        json_t *q = json_object_get(root, "quantization_config");
        if (q != NULL && !json_is_null(q))
            TRY(cfg_quant(&cfg, q, path, err));
    }
    cfg.orig_num_hidden_layers = cfg.num_hidden_layers;
    cfg.orig_num_experts = cfg.num_experts;
    cfg.orig_vocab_size = cfg.vocab_size;
#undef TRY
out:
    json_decref(root);
    if (st != RF_OK) {
        rf_model_config_free(&cfg);
        return st;
    }
    *cfg_p = cfg;
    return RF_OK;
}

rf_status_t rf_model_config_load(const char *path, rf_model_config_t *cfg_p, rf_err_t *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    rf_status_t st;
    if (f == NULL)
        return rf_err_set(err, RF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode)) { /* fopen opens a directory too */
        fclose(f);
        return rf_err_set(err, RF_ERR_IO, "%s: cannot read: %s (a config.json is a file)", path,
                          S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return rf_err_set(err, RF_ERR_IO, "%s: cannot read", path);
    }
    if (n > 16 * 1024 * 1024) {
        fclose(f);
        return rf_err_set(err, RF_ERR_CONFIG, "%s: %ld bytes is too large for a config.json",
                          path, n);
    }
    buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return rf_err_set(err, RF_ERR_IO, "%s: cannot read", path);
    }
    fclose(f);
    st = rf_model_config_parse(buf, (size_t)n, path, cfg_p, err);
    free(buf);
    return st;
}

void rf_model_config_free(rf_model_config_t *cfg)
{
    if (cfg == NULL)
        return;
    free(cfg->mlp_only_layers);
    free(cfg->full_attention);
    cfg->full_attention = NULL;
    cfg->n_full_attention = 0;
    for (int i = 0; i < cfg->n_not_convert; i++)
        free(cfg->not_convert[i]);
    free(cfg->not_convert);
    cfg->mlp_only_layers = NULL;
    cfg->not_convert = NULL;
    cfg->n_mlp_only_layers = 0;
    cfg->n_not_convert = 0;
}

rf_status_t rf_model_config_copy(rf_model_config_t *dst, const rf_model_config_t *src)
{
    *dst = *src;
    dst->mlp_only_layers = NULL;
    dst->not_convert = NULL;
    dst->full_attention = NULL;
    if (src->n_full_attention > 0) {
        dst->full_attention = malloc((size_t)src->n_full_attention);
        if (dst->full_attention == NULL)
            return RF_ERR_NOMEM;
        memcpy(dst->full_attention, src->full_attention, (size_t)src->n_full_attention);
    }
    if (src->n_mlp_only_layers > 0) {
        dst->mlp_only_layers = malloc(src->n_mlp_only_layers * sizeof(int64_t));
        if (dst->mlp_only_layers == NULL)
            return RF_ERR_NOMEM;
        memcpy(dst->mlp_only_layers, src->mlp_only_layers,
               src->n_mlp_only_layers * sizeof(int64_t));
    }
    if (src->n_not_convert > 0) {
        dst->not_convert = calloc(src->n_not_convert, sizeof(char *));
        if (dst->not_convert == NULL)
            return RF_ERR_NOMEM;
        for (int i = 0; i < src->n_not_convert; i++)
            dst->not_convert[i] = strdup(src->not_convert[i]);
    }
    return RF_OK;
}

/* "config.json says KEY A, the topology's model config says B" (the checkpoint named). */
static rf_status_t cfg_differs(const char *ck_dir, const char *key, const char *a, const char *b,
                               const char *whose, rf_err_t *err)
{
    return rf_err_set(err, RF_ERR_MISMATCH, "checkpoint %s: config.json says %s %s, %s says %s",
                      ck_dir, key, a, whose, b);
}

rf_status_t rf_model_config_compare(const rf_model_config_t *ck, const rf_model_config_t *topo,
                                    rf_quant_t q, int64_t group, const char *ck_dir,
                                    rf_err_t *err)
{
    static const char *model = "the topology's model config";
    /* the topology's side as written: overrides cut layers, experts and vocab deliberately */
    const struct {
        const char *key;
        int64_t a, b;
    } ints[] = {
        {"hidden_size", ck->hidden_size, topo->hidden_size},
        {"intermediate_size", ck->intermediate_size, topo->intermediate_size},
        {"moe_intermediate_size", ck->moe_intermediate_size, topo->moe_intermediate_size},
        {"num_hidden_layers", ck->num_hidden_layers, topo->orig_num_hidden_layers},
        {"num_attention_heads", ck->num_attention_heads, topo->num_attention_heads},
        {"num_key_value_heads", ck->num_key_value_heads, topo->num_key_value_heads},
        {"head_dim", ck->head_dim, topo->head_dim},
        {"vocab_size", ck->vocab_size, topo->orig_vocab_size},
        {"num_experts", ck->num_experts, topo->orig_num_experts},
        {"word_embed_proj_dim", ck->word_embed_proj_dim, topo->word_embed_proj_dim},
        {"max_position_embeddings", ck->max_position_embeddings, topo->max_position_embeddings},
        {"linear_num_key_heads", ck->linear_num_key_heads, topo->linear_num_key_heads},
        {"linear_num_value_heads", ck->linear_num_value_heads, topo->linear_num_value_heads},
        {"linear_key_head_dim", ck->linear_key_head_dim, topo->linear_key_head_dim},
        {"linear_value_head_dim", ck->linear_value_head_dim, topo->linear_value_head_dim},
        {"linear_conv_kernel_dim", ck->linear_conv_kernel_dim, topo->linear_conv_kernel_dim},
        {"shared_expert_intermediate_size", ck->shared_expert_intermediate_size,
         topo->shared_expert_intermediate_size},
        {"q_lora_rank", ck->q_lora_rank, topo->q_lora_rank},
        {"kv_lora_rank", ck->kv_lora_rank, topo->kv_lora_rank},
        {"qk_nope_head_dim", ck->qk_nope_head_dim, topo->qk_nope_head_dim},
        {"qk_rope_head_dim", ck->qk_rope_head_dim, topo->qk_rope_head_dim},
        {"v_head_dim", ck->v_head_dim, topo->v_head_dim},
        {"first_k_dense_replace", ck->first_k_dense_replace, topo->first_k_dense_replace},
        {"n_shared_experts", ck->n_shared_experts, topo->n_shared_experts},
    };
    char a[48], b[48];
    ck_dir = ck_dir ? ck_dir : "?";
    if (strcmp(ck->model_type, topo->model_type) != 0)
        return cfg_differs(ck_dir, "model_type", ck->model_type, topo->model_type, model, err);
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (ints[i].a == ints[i].b)
            continue;
        snprintf(a, sizeof(a), "%lld", (long long)ints[i].a);
        snprintf(b, sizeof(b), "%lld", (long long)ints[i].b);
        return cfg_differs(ck_dir, ints[i].key, a, b, model, err);
    }
    if (ck->tie_word_embeddings != topo->tie_word_embeddings)
        return cfg_differs(ck_dir, "tie_word_embeddings", ck->tie_word_embeddings ? "true" : "false",
                           topo->tie_word_embeddings ? "true" : "false", model, err);
    /* Qwen3-Next: the layer kinds decide which tensors a layer has (both sides as parsed:
     * layer_types or full_attention_interval) */
    for (int i = 0; i < ck->n_full_attention && i < topo->n_full_attention; i++) {
        char key[64];
        if (ck->full_attention[i] == topo->full_attention[i])
            continue;
        snprintf(key, sizeof(key), "layer_types[%d] (full_attention_interval)", i);
        return cfg_differs(ck_dir, key, ck->full_attention[i] ? "full_attention" : "linear_attention",
                           topo->full_attention[i] ? "full_attention" : "linear_attention", model,
                           err);
    }
    /* no quantization_config in the checkpoint: a bf16 source, which the trainer quantizes
     * when the topology asks for a format (its tensors are checked against the manifest) */
    if (!ck->has_quant_config)
        return RF_OK;
    /* the topology's quantization is model.quantization or else its config's */
    if (ck->quant != q)
        return cfg_differs(ck_dir, "quantization_config.quant_method", rf_quant_name(ck->quant),
                           rf_quant_name(q), "the topology", err);
    if (q == RF_QUANT_FP8_BLOCK) {
        int64_t tb0 = 128, tb1 = 128; /* model.quantization: fp8-block means 128 x 128 */
        if (topo->has_quant_config && topo->quant == RF_QUANT_FP8_BLOCK) {
            tb0 = topo->weight_block[0];
            tb1 = topo->weight_block[1];
        }
        if (ck->weight_block[0] != tb0 || ck->weight_block[1] != tb1) {
            snprintf(a, sizeof(a), "[%lld, %lld]", (long long)ck->weight_block[0],
                     (long long)ck->weight_block[1]);
            snprintf(b, sizeof(b), "[%lld, %lld]", (long long)tb0, (long long)tb1);
            return cfg_differs(ck_dir, "quantization_config.weight_block_size", a, b,
                               "the topology", err);
        }
    }
    if (q == RF_QUANT_WNA16) {
        int64_t g = ck->group_size > 0 ? ck->group_size : 128; /* the inventory's default */
        int64_t tg = group > 0 ? group : 128;
        if (g != tg) {
            snprintf(a, sizeof(a), "%lld", (long long)g);
            snprintf(b, sizeof(b), "%lld", (long long)tg);
            return cfg_differs(ck_dir, "quantization_config group_size", a, b, "the topology",
                               err);
        }
    }
    return RF_OK;
}

rf_status_t rf_model_config_check_checkpoint(const char *ck_dir, const rf_model_config_t *topo,
                                             rf_quant_t q, int64_t group, rf_err_t *err)
{
    char path[4096];
    struct stat sb;
    rf_model_config_t ck;
    rf_status_t st;
    if (ck_dir == NULL)
        return RF_OK;
    if ((size_t)snprintf(path, sizeof(path), "%s/config.json", ck_dir) >= sizeof(path))
        return rf_err_set(err, RF_ERR_INVALID, "checkpoint %s: path too long", ck_dir);
    /* optional: only a checkpoint that says what it is can disagree */
    if (stat(path, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return RF_OK;
    RF_CHECK(rf_model_config_load(path, &ck, err));
    st = rf_model_config_compare(&ck, topo, q, group, ck_dir, err);
    rf_model_config_free(&ck);
    return st;
}

bool rf_model_layer_is_moe(const rf_model_config_t *cfg, int64_t layer)
{
    if (cfg->num_experts <= 0)
        return false;
    if (cfg->family == RF_FAMILY_DEEPSEEK_V3) /* vLLM DeepseekV2DecoderLayer */
        return layer >= cfg->first_k_dense_replace && layer % cfg->moe_layer_freq == 0;
    for (int i = 0; i < cfg->n_mlp_only_layers; i++)
        if (cfg->mlp_only_layers[i] == layer)
            return false;
    return (layer + 1) % cfg->decoder_sparse_step == 0;
}

bool rf_model_layer_is_full_attention(const rf_model_config_t *cfg, int64_t layer)
{
    if (cfg->family != RF_FAMILY_QWEN3_NEXT || layer < 0 || layer >= cfg->n_full_attention)
        return false;
    return cfg->full_attention[layer] != 0;
}
