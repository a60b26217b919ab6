/* Unit tests: config.json parsing and the model inventory (DESIGN.md section 4), against the
 * counts in shared/models/SOURCES.md and the real tiny checkpoints' reference lists. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/model.h"

static rf_model_config_t load_cfg(const char *path)
{
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    rf_status_t st = rf_model_config_load(path, &cfg, &err);
    ck_assert_msg(st == RF_OK, "%s: %s", path, err.msg);
    return cfg;
}

static void check_counts(const char *file, int ntensors, uint64_t nparams)
{
    char path[512];
    rf_inventory_t inv;
    rf_err_t err;
    rf_err_clear(&err);
    snprintf(path, sizeof(path), "%s/models/%s", REFIT_JOBS_DIR, file);
    rf_model_config_t cfg = load_cfg(path);
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(inv.ntensors, ntensors);
    ck_assert_uint_eq(inv.nparams, nparams);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
}

START_TEST(test_counts_qwen3_0_6b) { check_counts("qwen3-0.6b.config.json", 310, 596049920ULL); }
END_TEST
START_TEST(test_counts_qwen3_4b) { check_counts("qwen3-4b.config.json", 398, 4022468096ULL); }
END_TEST
START_TEST(test_counts_qwen2_5_0_5b) { check_counts("qwen2.5-0.5b.config.json", 290, 494032768ULL); }
END_TEST
START_TEST(test_counts_llama_3_1_8b) { check_counts("llama-3.1-8b.config.json", 291, 8030261248ULL); }
END_TEST
START_TEST(test_counts_qwen3_30b_a3b) { check_counts("qwen3-30b-a3b.config.json", 18867, 30532122624ULL); }
END_TEST

/* model.mtp (cfg.mtp, set by rf_model_check_topology): DeepSeek-V3's model.layers.{61}.* and
 * Qwen3-Next's mtp.* as engine modules with layer L + 1, vLLM's draft sharding (eh_proj a bf16
 * full copy also under fp8-block, shared_head.head and embed_tokens vocab parallel, mtp.fc column
 * parallel), names under them the inventory lacks refused instead of skipped; and fp8-block
 * Qwen3-Next with the FP8 release's modules_to_not_convert */
START_TEST(test_mtp_and_fp8_qwen3_next)
{
    char path[512];
    rf_inventory_t inv;
    rf_err_t err;
    rf_err_clear(&err);
    snprintf(path, sizeof(path), "%s/models/deepseek-v3.config.json", REFIT_JOBS_DIR);
    rf_model_config_t c = load_cfg(path);
    c.orig_num_hidden_layers = 61;
    c.num_hidden_layers = 4; /* model.overrides: the MTP layer keeps its name, layer 5 */
    c.mtp = true;
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_FP8_BLOCK, 0, &inv, &err), RF_OK);
    int eh = rf_inventory_find(&inv, "model.layers.61.eh_proj.weight");
    int head = rf_inventory_find(&inv, "model.layers.61.shared_head.head.weight");
    int emb = rf_inventory_find(&inv, "model.layers.61.embed_tokens.weight");
    int qa = rf_inventory_find(&inv, "model.layers.61.self_attn.q_a_proj.weight");
    ck_assert(eh >= 0 && head >= 0 && emb >= 0 && qa >= 0);
    ck_assert(inv.tensors[eh].dtype == RF_DTYPE_BF16 && inv.tensors[eh].layer == 5);
    ck_assert_int_eq(inv.modules[inv.tensors[eh].module].kind, RF_MOD_REPLICATED);
    ck_assert_int_eq(inv.modules[inv.tensors[head].module].kind, RF_MOD_VOCAB);
    ck_assert_int_eq(inv.modules[inv.tensors[emb].module].kind, RF_MOD_VOCAB);
    ck_assert(inv.tensors[qa].dtype == RF_DTYPE_F8_E4M3);
    ck_assert_int_ge(rf_inventory_find(&inv, "model.layers.61.mlp.experts.255.down_proj.weight"),
                     0);
    ck_assert_int_eq(inv.tensors[inv.ntensors - 1].layer, 5); /* after model.norm / lm_head */
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "model.layers.61.extra.weight"),
                     RF_UNKNOWN_ERROR);
    rf_inventory_free(&inv);
    rf_model_config_free(&c);

    snprintf(path, sizeof(path), "%s/models/qwen3-next-tiny.config.json", REFIT_JOBS_DIR);
    c = load_cfg(path);
    ck_assert_int_eq(c.num_nextn_predict_layers, 1); /* vLLM's getattr default */
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "mtp.layers.1.input_layernorm.weight"),
                     RF_UNKNOWN_SKIP);
    rf_inventory_free(&inv);
    c.mtp = true;
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(inv.ntensors, 154 + 41); /* fc, 3 norms, a full-attention MoE layer */
    int fc = rf_inventory_find(&inv, "mtp.fc.weight");
    ck_assert_int_ge(fc, 0);
    const rf_module_t *m = &inv.modules[inv.tensors[fc].module];
    ck_assert(m->kind == RF_MOD_COLUMN && m->n == 64 && m->k == 128);
    rf_rollout_coords_t rc = {.tp = 2, .tp_rank = 1, .dp = 1, .ep = 1};
    rf_slot_shape_t sl[RF_MODULE_MAX_SLOTS];
    int ns = 0;
    ck_assert_int_eq(rf_module_slots(&inv, inv.tensors[fc].module, &rc, sl, &ns, &err), RF_OK);
    ck_assert(ns == 1 && sl[0].shape[0] == 32 && sl[0].shape[1] == 128);
    ck_assert_int_ge(rf_inventory_find(&inv, "mtp.layers.0.self_attn.q_proj.weight"), 0);
    ck_assert_int_ge(rf_inventory_find(&inv, "mtp.layers.0.mlp.shared_expert_gate.weight"), 0);
    ck_assert_int_lt(rf_inventory_find(&inv, "mtp.layers.0.linear_attn.in_proj_ba.weight"), 0);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "mtp.layers.1.input_layernorm.weight"),
                     RF_UNKNOWN_ERROR);
    rf_inventory_free(&inv);
    rf_model_config_free(&c);

    /* fp8-block: in_proj_ba and the gates bf16 as modules_to_not_convert says, in_proj_qkvz a
     * column module by key-head groups (its refusal names linear_num_key_heads) */
    snprintf(path, sizeof(path), "%s/models/qwen3-next-80b-a3b-instruct-fp8.config.json",
             REFIT_JOBS_DIR);
    c = load_cfg(path);
    ck_assert_int_eq(c.n_not_convert, 407);
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_FP8_BLOCK, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(inv.ntensors, 148383);
    ck_assert_uint_eq(inv.nparams, 79679212800ULL);
    int ba = rf_inventory_find(&inv, "model.layers.0.linear_attn.in_proj_ba.weight");
    int qkvz = rf_inventory_find(&inv, "model.layers.0.linear_attn.in_proj_qkvz.weight");
    ck_assert(ba >= 0 && qkvz >= 0);
    ck_assert(inv.tensors[ba].dtype == RF_DTYPE_BF16 &&
              inv.modules[inv.tensors[ba].module].kind == RF_MOD_SECTIONS);
    ck_assert(inv.tensors[qkvz].dtype == RF_DTYPE_F8_E4M3 &&
              inv.modules[inv.tensors[qkvz].module].kind == RF_MOD_COLUMN);
    ck_assert_int_ge(
        rf_inventory_find(&inv, "model.layers.0.linear_attn.in_proj_qkvz.weight_scale_inv"), 0);
    ck_assert_int_lt(
        rf_inventory_find(&inv, "model.layers.0.mlp.shared_expert_gate.weight_scale_inv"), 0);
    rc.tp = 32;
    rc.tp_rank = 0;
    ck_assert_int_ne(rf_module_slots(&inv, inv.tensors[qkvz].module, &rc, sl, &ns, &err), RF_OK);
    ck_assert_ptr_nonnull(strstr(err.msg, "linear_num_key_heads 16 is not divisible by 32"));
    rf_inventory_free(&inv);
    rf_model_config_free(&c);
}
END_TEST

/* rollout.layout hf (model/layout_hf.c): on every family, each dense checkpoint tensor is a
 * slot of its own whose full name is the tensor's name, experts fuse into gate_up_proj /
 * down_proj; Qwen2's biased q / k / v at TP 2 and 4 (kv heads replicated past nkv) and the
 * unpadded vocab rows */
START_TEST(test_layout_hf)
{
    static const char *const files[] = {"qwen2.5-0.5b.config.json", "llama-3.1-8b.config.json",
                                        "qwen3-30b-a3b.config.json", "pythia-14m.config.json",
                                        "opt-125m.config.json"};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        char path[512], full[2 * RF_NAME_MAX];
        rf_inventory_t inv;
        rf_err_t err;
        rf_err_clear(&err);
        snprintf(path, sizeof(path), "%s/models/%s", REFIT_JOBS_DIR, files[f]);
        rf_model_config_t cfg = load_cfg(path);
        ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
        int nvllm = inv.nmodules;
        ck_assert_int_eq(rf_inventory_apply_layout(&inv, RF_ROLLOUT_LAYOUT_HF, &err), RF_OK);
        ck_assert_int_eq(inv.layout, RF_ROLLOUT_LAYOUT_HF);
        ck_assert_int_ge(inv.nmodules, nvllm);
        int nt = 0;
        for (int m = 0; m < inv.nmodules; m++) {
            const rf_module_t *mod = &inv.modules[m];
            ck_assert(mod->kind != RF_MOD_QKV && mod->kind != RF_MOD_MERGED &&
                      mod->kind != RF_MOD_QKV_HEADS);
            for (int i = 0; i < mod->ntensors; i++) {
                const rf_tensor_t *t = &inv.tensors[mod->tensors[i]];
                ck_assert_int_eq(t->module, m);
                nt++;
                snprintf(full, sizeof(full), "%s.%s", mod->name, mod->slot_names[t->slot]);
                if (t->expert < 0)
                    ck_assert_str_eq(full, t->name);
                else
                    ck_assert_str_eq(mod->slot_names[t->slot],
                                     t->split == RF_SPLIT_ROWS ? "gate_up_proj" : "down_proj");
            }
        }
        ck_assert_int_eq(nt, inv.ntensors);
        if (f == 0) { /* qwen2.5-0.5b: nh 14, nkv 2, d 64, H 896, V 151936, q/k/v biases */
            rf_slot_shape_t sh[RF_MODULE_MAX_SLOTS];
            int ns = 0;
            int k = inv.tensors[rf_inventory_find(&inv, "model.layers.0.self_attn.k_proj.bias")].module;
            int q = inv.tensors[rf_inventory_find(&inv, "model.layers.0.self_attn.q_proj.weight")].module;
            int e = inv.tensors[rf_inventory_find(&inv, "model.embed_tokens.weight")].module;
            rf_rollout_coords_t rc = {.tp = 2, .tp_rank = 1, .dp = 1, .ep = 1};
            ck_assert_int_eq(rf_module_slots(&inv, q, &rc, sh, &ns, &err), RF_OK);
            ck_assert_int_eq(ns, 2);
            ck_assert_str_eq(sh[0].name, "weight");
            ck_assert_int_eq(sh[0].shape[0], 7 * 64);
            ck_assert_int_eq(sh[0].shape[1], 896);
            ck_assert_str_eq(sh[1].name, "bias");
            ck_assert_int_eq(sh[1].shape[0], 7 * 64);
            ck_assert_int_eq(rf_module_slots(&inv, k, &rc, sh, &ns, &err), RF_OK);
            ck_assert_int_eq(sh[0].shape[0], 64);
            ck_assert_int_eq(sh[1].shape[0], 64);
            rc.tp = 14; /* 7 ranks per kv head */
            rc.tp_rank = 13;
            ck_assert_int_eq(rf_module_slots(&inv, k, &rc, sh, &ns, &err), RF_OK);
            ck_assert_int_eq(sh[0].shape[0], 64);
            rc.tp = 2;
            ck_assert_int_eq(rf_module_slots(&inv, e, &rc, sh, &ns, &err), RF_OK);
            ck_assert_int_eq(sh[0].shape[0], 151936 / 2);
            rc.tp = 7; /* 151936 = 7 x 21705 + 1: ceil, no 64-row padding */
            ck_assert_int_eq(rf_module_slots(&inv, e, &rc, sh, &ns, &err), RF_OK);
            ck_assert_int_eq(sh[0].shape[0], 21706);
        }
        rf_inventory_free(&inv);
        rf_model_config_free(&cfg);
    }
}
END_TEST

/* rollout.layout hf beyond per-expert families (model/layout_hf.c): GraniteMoE's fused 3-D
 * experts and router under their checkpoint names, DeepSeek's fused_qkv_a_proj apart, and the
 * quantized formats: every stored checkpoint tensor a slot whose full name is its name (fp8
 * experts: FP8Experts' gate_up_proj(_scale_inv) / down_proj(_scale_inv)), wna16 experts and
 * GPT-NeoX's quantized query_key_value refused naming the format and module */
static void hf_names_match(const char *file, rf_quant_t q, int64_t G)
{
    char path[512], full[2 * RF_NAME_MAX];
    rf_inventory_t inv;
    rf_err_t err;
    rf_err_clear(&err);
    snprintf(path, sizeof(path), "%s/models/%s", REFIT_JOBS_DIR, file);
    rf_model_config_t cfg = load_cfg(path);
    ck_assert_msg(rf_inventory_build(&cfg, q, G, &inv, &err) == RF_OK, "%s: %s", file, err.msg);
    ck_assert_msg(rf_inventory_apply_layout(&inv, RF_ROLLOUT_LAYOUT_HF, &err) == RF_OK, "%s: %s",
                  file, err.msg);
    for (int m = 0; m < inv.nmodules; m++) {
        const rf_module_t *mod = &inv.modules[m];
        ck_assert(mod->kind != RF_MOD_QKV && mod->kind != RF_MOD_MERGED);
        ck_assert(mod->kind != RF_MOD_REPLICATED_LINEAR || mod->nlinears == 1);
        for (int i = 0; i < mod->ntensors; i++) {
            const rf_tensor_t *t = &inv.tensors[mod->tensors[i]];
            if (t->slot < 0) { /* wna16 weight_shape: checked, not stored */
                ck_assert_int_eq(t->param, RF_PARAM_WEIGHT_SHAPE);
                continue;
            }
            snprintf(full, sizeof(full), "%s.%s", mod->name, mod->slot_names[t->slot]);
            if (t->expert >= 0) {
                const char *w = t->split == RF_SPLIT_ROWS ? "gate_up_proj" : "down_proj";
                snprintf(full, sizeof(full), "%s%s", w,
                         t->param == RF_PARAM_WEIGHT_SCALE_INV ? "_scale_inv" : "");
                ck_assert_str_eq(mod->slot_names[t->slot], full);
            } else {
                ck_assert_msg(strcmp(full, t->name) == 0, "%s: slot %s for tensor %s", file, full,
                              t->name);
            }
        }
    }
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
}

START_TEST(test_layout_hf_granite_quant)
{
    hf_names_match("granitemoe-tiny.config.json", RF_QUANT_NONE, 0);
    hf_names_match("powermoe-3b.config.json", RF_QUANT_NONE, 0);
    hf_names_match("deepseek-v3-tiny-b.config.json", RF_QUANT_NONE, 0);
    hf_names_match("deepseek-v3-tiny-fp8.config.json", RF_QUANT_FP8_BLOCK, 0);
    static const rf_quant_t qs[] = {RF_QUANT_FP8_BLOCK, RF_QUANT_WNA16, RF_QUANT_FP8_TENSOR,
                                    RF_QUANT_FP8_CHANNEL};
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++)
        hf_names_match("llama-3.1-8b.config.json", qs[i], qs[i] == RF_QUANT_WNA16 ? 128 : 0);
    hf_names_match("qwen3-30b-a3b.config.json", RF_QUANT_FP8_BLOCK, 0);

    /* the slices: q_proj's scale rows in whole blocks at TP 2; refused at TP 8 (1024 / 8 q
     * rows), naming the module and the sizes */
    char path[512];
    rf_inventory_t inv;
    rf_err_t err;
    rf_slot_shape_t sh[RF_MODULE_MAX_SLOTS];
    int ns = 0;
    rf_err_clear(&err);
    snprintf(path, sizeof(path), "%s/models/llama-3.1-8b.config.json", REFIT_JOBS_DIR);
    rf_model_config_t cfg = load_cfg(path);
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_FP8_BLOCK, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(rf_inventory_apply_layout(&inv, RF_ROLLOUT_LAYOUT_HF, &err), RF_OK);
    int k = inv.tensors[rf_inventory_find(&inv, "model.layers.0.self_attn.k_proj.weight_scale_inv")]
                .module;
    rf_rollout_coords_t rc = {.tp = 2, .tp_rank = 1, .dp = 1, .ep = 1};
    ck_assert_int_eq(rf_module_slots(&inv, k, &rc, sh, &ns, &err), RF_OK);
    ck_assert_int_eq(ns, 2); /* nkv 8, d 128: 4 heads = 512 rows, 4 blocks, 4096 / 128 = 32 */
    ck_assert_str_eq(sh[1].name, "weight_scale_inv");
    ck_assert_int_eq(sh[1].shape[0], 4);
    ck_assert_int_eq(sh[1].shape[1], 32);
    rc.tp = 16; /* k / v: 128 rows per rank, one block; q: 4096 / 16 = 256; o_proj K 256 */
    rc.tp_rank = 0;
    ck_assert_int_eq(rf_inventory_check_rollout(&inv, &rc, &err), RF_OK);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    /* qwen3-fp8-tiny (nkv 2, d 64): k_proj's 128 rows split in 64 at TP 2, half a block */
    snprintf(path, sizeof(path), "%s/models/qwen3-fp8-tiny.config.json", REFIT_JOBS_DIR);
    cfg = load_cfg(path);
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_FP8_BLOCK, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(rf_inventory_apply_layout(&inv, RF_ROLLOUT_LAYOUT_HF, &err), RF_OK);
    rc.tp = 2;
    ck_assert_int_eq(rf_inventory_check_rollout(&inv, &rc, &err), RF_ERR_TOPOLOGY);
    ck_assert_msg(strstr(err.msg, "model.layers.0.self_attn.k_proj: output rows per rank 64 is "
                                  "not a multiple of the 128-row fp8 block") != NULL,
                  "%s", err.msg);
    rf_inventory_free(&inv);

    rf_err_clear(&err);
    rf_model_config_free(&cfg);
    snprintf(path, sizeof(path), "%s/models/qwen3-30b-a3b.config.json", REFIT_JOBS_DIR);
    cfg = load_cfg(path);
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_WNA16, 128, &inv, &err), RF_OK);
    ck_assert_int_eq(rf_inventory_apply_layout(&inv, RF_ROLLOUT_LAYOUT_HF, &err),
                     RF_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "rollout.layout hf with model.quantization wna16 is not "
                                  "supported for MoE experts (model.layers.0.mlp.experts.0.") !=
                      NULL,
                  "%s", err.msg);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
}
END_TEST

START_TEST(test_qwen2_biases_and_modules)
{
    char path[512];
    rf_inventory_t inv;
    rf_err_t err;
    rf_err_clear(&err);
    snprintf(path, sizeof(path), "%s/models/qwen2.5-0.5b.config.json", REFIT_JOBS_DIR);
    rf_model_config_t cfg = load_cfg(path);
    ck_assert(cfg.qkv_bias);
    ck_assert(!cfg.o_bias);
    ck_assert(cfg.tie_word_embeddings);
    ck_assert_int_eq(cfg.head_dim, 64);
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    int k = rf_inventory_find(&inv, "model.layers.3.self_attn.k_proj.bias");
    ck_assert_int_ge(k, 0);
    ck_assert_int_eq(inv.tensors[k].shape[0], 128);
    ck_assert_int_eq(inv.tensors[k].shard, 1);
    ck_assert_str_eq(inv.modules[inv.tensors[k].module].name, "model.layers.3.self_attn.qkv_proj");
    ck_assert_str_eq(inv.modules[inv.tensors[k].module].slot_names[inv.tensors[k].slot], "bias");
    ck_assert_int_eq(rf_inventory_find(&inv, "lm_head.weight"), -1);
    /* a stored head of a tied model is compared with the embedding, not skipped unseen */
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "lm_head.weight"), RF_UNKNOWN_TIED);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "model.layers.0.self_attn.rotary_emb.inv_freq"), RF_UNKNOWN_SKIP);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "model.layers.0.self_attn.foo.weight"), RF_UNKNOWN_ERROR);
    /* 1 embed + 24 x (2 norms + qkv + o + gate_up + down) + final norm = 146 modules */
    ck_assert_int_eq(inv.nmodules, 1 + 24 * 6 + 1);
    /* embed first, final norm last; tensors in manifest order */
    ck_assert_str_eq(inv.tensors[0].name, "model.embed_tokens.weight");
    ck_assert_str_eq(inv.tensors[inv.ntensors - 1].name, "model.norm.weight");
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
}
END_TEST

START_TEST(test_slots_qkv_replication)
{
    char path[512];
    rf_inventory_t inv;
    rf_err_t err;
    rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
    int n;
    rf_err_clear(&err);
    snprintf(path, sizeof(path), "%s/llama-tiny/config.json", REFIT_TEST_DATA);
    rf_model_config_t cfg = load_cfg(path);
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(inv.ntensors, 3 * 9 + 3);
    int qkv = inv.tensors[rf_inventory_find(&inv, "model.layers.0.self_attn.q_proj.weight")].module;
    rf_rollout_coords_t rc = {.tp = 3, .tp_rank = 2, .dp = 1, .ep = 1};
    /* llama-tiny: nh 6, nkv 2, d 16; TP 3 > nkv: rep = ... only when T mod nkv == 0 */
    ck_assert_int_eq(rf_module_slots(&inv, qkv, &rc, s, &n, &err), RF_ERR_TOPOLOGY);
    rf_err_clear(&err);
    rc.tp = 2;
    ck_assert_int_eq(rf_module_slots(&inv, qkv, &rc, s, &n, &err), RF_OK);
    ck_assert_int_eq(s[0].shape[0], (3 + 2 * 1) * 16);
    ck_assert_int_eq(s[0].shape[1], 96);
    rc.tp = 6; /* heads 1 per rank, kv replicated 3x */
    ck_assert_int_eq(rf_module_slots(&inv, qkv, &rc, s, &n, &err), RF_OK);
    ck_assert_int_eq(s[0].shape[0], (1 + 2) * 16);
    rc.tp = 4; /* 6 heads not divisible by 4 */
    ck_assert_int_eq(rf_inventory_check_rollout(&inv, &rc, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(strstr(err.msg, "num_attention_heads"));
    /* vocab 1003 -> Vp 1024 */
    int emb = inv.tensors[rf_inventory_find(&inv, "model.embed_tokens.weight")].module;
    rc.tp = 2;
    ck_assert_int_eq(rf_module_slots(&inv, emb, &rc, s, &n, &err), RF_OK);
    ck_assert_int_eq(s[0].shape[0], 512);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
}
END_TEST

START_TEST(test_config_errors)
{
    rf_model_config_t cfg;
    rf_err_t err;
    const char *bad[][2] = {
        {"{\"model_type\": \"llama\", \"hidden_size\": 64}", "num_hidden_layers"},
        {"{\"model_type\": \"gpt2\"}", "gpt2"},
        {"[1,2]", "not a JSON object"},
        {"{\"model_type\": \"llama\", \"hidden_size\": \"64\"}", "hidden_size"},
        {"{\"model_type\": \"llama\", \"torch_dtype\": \"float16\", \"dtype\": \"bfloat16\"}", "disagree"},
        {"{\"model_type\": \"llama\", \"model_type\": \"qwen2\"}", "duplicate"},
        {"{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"vocab_size\": 8, "
         "\"num_attention_heads\": 4, \"num_experts\": 8, \"num_local_experts\": 4, \"moe_intermediate_size\": 8}", "disagrees"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rf_err_clear(&err);
        ck_assert_int_ne(rf_model_config_parse(bad[i][0], strlen(bad[i][0]), "x.json", &cfg, &err), RF_OK);
        ck_assert_msg(strstr(err.msg, bad[i][1]) != NULL, "case %zu: '%s' lacks '%s'", i, err.msg, bad[i][1]);
    }
}
END_TEST

/* (led to by tests/fuzz/fuzz_model_config) absurd layer / expert counts fail cleanly instead of
 * allocating hundreds of millions of tensors */
START_TEST(test_inventory_too_many_tensors)
{
    const char *json[] = {
        "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 50000000, "
        "\"vocab_size\": 8, \"num_attention_heads\": 4, \"intermediate_size\": 16}",
        "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, \"num_hidden_layers\": 100, "
        "\"vocab_size\": 8, \"num_attention_heads\": 4, \"num_experts\": 100000, "
        "\"moe_intermediate_size\": 8}",
    };
    for (size_t i = 0; i < sizeof(json) / sizeof(json[0]); i++) {
        rf_model_config_t cfg;
        rf_inventory_t inv;
        rf_err_t err;
        rf_err_clear(&err);
        ck_assert_msg(rf_model_config_parse(json[i], strlen(json[i]), "x.json", &cfg, &err) == RF_OK,
                      "%s", err.msg);
        ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_NONE, 0, &inv, &err), RF_ERR_CONFIG);
        ck_assert_msg(strstr(err.msg, "tensors") != NULL, "%s", err.msg);
        rf_model_config_free(&cfg);
    }
}
END_TEST

START_TEST(test_config_aliases)
{
    /* transformers 5 spelling: num_local_experts, rope_parameters, dtype */
    char path[512];
    snprintf(path, sizeof(path), "%s/qwen3-moe-tiny/config.json", REFIT_TEST_DATA);
    rf_model_config_t cfg = load_cfg(path);
    ck_assert_int_eq(cfg.num_experts, 8);
    ck_assert_int_eq(cfg.dtype, RF_DTYPE_BF16);
    ck_assert(cfg.rope_theta == 10000.0);
    ck_assert_int_eq(cfg.family, RF_FAMILY_QWEN3_MOE);
    rf_model_config_free(&cfg);
    snprintf(path, sizeof(path), "%s/models/qwen3-30b-a3b.config.json", REFIT_JOBS_DIR);
    cfg = load_cfg(path);
    ck_assert_int_eq(cfg.num_experts, 128);
    ck_assert(cfg.rope_theta == 1000000.0);
    rf_model_config_free(&cfg);
}
END_TEST

START_TEST(test_moe_placement)
{
    rf_rollout_coords_t rc = {.tp = 2, .dp = 2, .ep = 4, .placement = RF_PLACE_LINEAR};
    /* E = 10 over EP 4: 3, 3, 2, 2 */
    int64_t expect_first[] = {0, 3, 6, 8}, expect_cnt[] = {3, 3, 2, 2};
    for (int q = 0; q < 4; q++) {
        rc.ep_rank = q;
        ck_assert_int_eq(rf_moe_local_count(10, &rc), expect_cnt[q]);
        ck_assert_int_eq(rf_moe_local_expert(10, &rc, 0), expect_first[q]);
        ck_assert_int_eq(rf_moe_local_index(10, &rc, expect_first[q] + 1), 1);
    }
    rc.placement = RF_PLACE_ROUND_ROBIN;
    rc.ep_rank = 1;
    ck_assert_int_eq(rf_moe_local_expert(10, &rc, 2), 9);
    ck_assert_int_eq(rf_moe_local_index(10, &rc, 5), 1);
    ck_assert_int_eq(rf_moe_local_index(10, &rc, 6), -1);
}
END_TEST


/* A tiny Qwen3 with a quantization_config block (fields appended by each test). */
static rf_status_t quant_inv(const char *qcfg, rf_quant_t quant, rf_inventory_t *inv,
                             rf_err_t *err)
{
    char json[2048];
    rf_model_config_t cfg;
    snprintf(json, sizeof(json),
             "{\"model_type\": \"qwen3\", \"hidden_size\": 256, \"num_hidden_layers\": 2, "
             "\"vocab_size\": 64, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
             "\"head_dim\": 128, \"intermediate_size\": 256, \"quantization_config\": %s}",
             qcfg);
    rf_err_clear(err);
    rf_status_t st = rf_model_config_parse(json, strlen(json), "q.json", &cfg, err);
    if (st == RF_OK) {
        st = rf_inventory_build(&cfg, quant, 128, inv, err);
        rf_model_config_free(&cfg);
    }
    return st;
}

START_TEST(test_quant_not_convert_and_refusals)
{
    rf_inventory_t inv;
    rf_err_t err;
    /* modules_to_not_convert keeps layer 1's o_proj unquantized; the rest is fp8 */
    ck_assert_int_eq(quant_inv("{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                               "\"modules_to_not_convert\": [\"lm_head\", "
                               "\"model.layers.1.self_attn.o_proj\"]}",
                               RF_QUANT_FP8_BLOCK, &inv, &err),
                     RF_OK);
    int o0 = rf_inventory_find(&inv, "model.layers.0.self_attn.o_proj.weight");
    int o1 = rf_inventory_find(&inv, "model.layers.1.self_attn.o_proj.weight");
    ck_assert_int_eq(inv.tensors[o0].dtype, RF_DTYPE_F8_E4M3);
    ck_assert_int_eq(inv.tensors[o1].dtype, RF_DTYPE_BF16);
    ck_assert_int_ge(rf_inventory_find(&inv, "model.layers.0.self_attn.o_proj.weight_scale_inv"), 0);
    ck_assert_int_eq(rf_inventory_find(&inv, "model.layers.1.self_attn.o_proj.weight_scale_inv"), -1);
    ck_assert_int_eq(inv.modules[inv.tensors[o1].module].quant, RF_QUANT_NONE);
    rf_inventory_free(&inv);
    /* a fused module cannot be half converted */
    ck_assert_int_eq(quant_inv("{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                               "\"modules_to_not_convert\": [\"model.layers.0.self_attn.k_proj\"]}",
                               RF_QUANT_FP8_BLOCK, &inv, &err),
                     RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "qkv_proj"));
    /* compressed-tensors ignore with a regex */
    ck_assert_int_eq(
        quant_inv("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"group_0\": "
                  "{\"weights\": {\"num_bits\": 4, \"strategy\": \"group\", \"group_size\": 128, "
                  "\"symmetric\": true}}}, \"ignore\": [\"lm_head\", \"re:.*mlp.down_proj$\"]}",
                  RF_QUANT_WNA16, &inv, &err),
        RF_OK);
    ck_assert_int_ge(rf_inventory_find(&inv, "model.layers.0.mlp.down_proj.weight"), 0);
    ck_assert_int_ge(rf_inventory_find(&inv, "model.layers.0.mlp.gate_proj.weight_packed"), 0);
    ck_assert_int_ge(rf_inventory_find(&inv, "model.layers.0.mlp.gate_proj.weight_shape"), 0);
    rf_inventory_free(&inv);
    /* refusals: ue8m0 scales, static activation scales, act-order */
    ck_assert_int_eq(quant_inv("{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                               "\"scale_fmt\": \"ue8m0\"}",
                               RF_QUANT_FP8_BLOCK, &inv, &err),
                     RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "ue8m0"));
    ck_assert_int_eq(quant_inv("{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                               "\"activation_scheme\": \"static\"}",
                               RF_QUANT_FP8_BLOCK, &inv, &err),
                     RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "static"));
    ck_assert_int_eq(
        quant_inv("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"group_0\": "
                  "{\"weights\": {\"num_bits\": 4, \"strategy\": \"group\", \"group_size\": 128, "
                  "\"symmetric\": true, \"actorder\": \"group\"}}}}",
                  RF_QUANT_WNA16, &inv, &err),
        RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "act-order"));
    ck_assert_int_eq(quant_inv("{\"quant_method\": \"fp8\", \"weight_block_size\": [64, 64]}",
                               RF_QUANT_FP8_BLOCK, &inv, &err),
                     RF_ERR_UNSUPPORTED);
}
END_TEST


/* compressed-tensors "float-quantized" FP8_DYNAMIC weights block, strategy %s */
#define FP8_GROUP(strategy, extra)                                                              \
    "{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", "               \
    "\"ignore\": [\"lm_head\"], \"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], "   \
    "\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"" strategy "\", "       \
    "\"symmetric\": true, \"dynamic\": false}" extra "}}}"

/*
 * fp8-tensor / fp8-channel (docs/formats.md): how a config names them, the tensors of one
 * linear, the per-rank slot shapes, and the refusals (static input scales, MoE experts, mixed
 * schemes). Llama-3.1-8B: 291 tensors unquantized + one weight_scale per projection (7 x 32)
 * = 515; parameters 8,030,261,248 + 224 (per tensor) or + 32 x (4096 + 1024 + 1024 + 4096 +
 * 14336 + 14336 + 4096) = 1,376,256 (per channel).
 */
START_TEST(test_fp8_rows_config_and_inventory)
{
    rf_inventory_t inv;
    rf_err_t err;
    rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
    int n;
    /* per channel with dynamic per-token activations (FP8 dynamic) */
    ck_assert_msg(quant_inv(FP8_GROUP("channel", ", \"input_activations\": {\"num_bits\": 8, "
                                                 "\"type\": \"float\", \"strategy\": \"token\", "
                                                 "\"dynamic\": true}"),
                            RF_QUANT_FP8_CHANNEL, &inv, &err) == RF_OK,
                  "%s", err.msg);
    ck_assert_int_eq(inv.cfg.quant, RF_QUANT_FP8_CHANNEL);
    int w = rf_inventory_find(&inv, "model.layers.1.self_attn.k_proj.weight");
    int sc = rf_inventory_find(&inv, "model.layers.1.self_attn.k_proj.weight_scale");
    int os = rf_inventory_find(&inv, "model.layers.1.self_attn.o_proj.weight_scale");
    ck_assert(w >= 0 && sc >= 0 && os >= 0);
    ck_assert_int_eq(inv.tensors[w].dtype, RF_DTYPE_F8_E4M3);
    ck_assert_int_eq(inv.tensors[sc].dtype, RF_DTYPE_F32);
    ck_assert_int_eq(inv.tensors[sc].param, RF_PARAM_CHANNEL_SCALE);
    ck_assert_int_eq(inv.tensors[sc].ndim, 2);
    ck_assert_int_eq(inv.tensors[sc].shape[0], 128);
    ck_assert_int_eq(inv.tensors[sc].shape[1], 1);
    ck_assert_int_eq(inv.tensors[sc].split, RF_SPLIT_ROWS);       /* like the weight rows */
    ck_assert_int_eq(inv.tensors[os].split, RF_SPLIT_REPLICATED); /* o_proj keeps its rows */
    ck_assert_int_eq(rf_inventory_find(&inv, "lm_head.weight_scale"), -1);
    rf_rollout_coords_t rc = {.tp = 2, .tp_rank = 1, .dp = 1, .ep = 1};
    ck_assert_int_eq(rf_module_slots(&inv, inv.tensors[w].module, &rc, s, &n, &err), RF_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(s[1].name, "weight_scale");
    /* (N_local, 1) like the weight rows: q 256 / 2, k and v 128 each (nkv 1 < tp 2: replicated) */
    ck_assert_int_eq(s[1].ndim, 2);
    ck_assert_int_eq(s[1].shape[0], 128 + 128 + 128);
    ck_assert_int_eq(s[1].shape[1], 1);
    rf_inventory_free(&inv);
    /* per tensor: one [1] scale per linear, a (S,) slot per module */
    ck_assert_msg(quant_inv(FP8_GROUP("tensor", ""), RF_QUANT_FP8_TENSOR, &inv, &err) == RF_OK,
                  "%s", err.msg);
    ck_assert_int_eq(inv.cfg.quant, RF_QUANT_FP8_TENSOR);
    sc = rf_inventory_find(&inv, "model.layers.0.mlp.up_proj.weight_scale");
    ck_assert_int_ge(sc, 0);
    ck_assert_int_eq(inv.tensors[sc].param, RF_PARAM_TENSOR_SCALE);
    ck_assert_int_eq(inv.tensors[sc].ndim, 1);
    ck_assert_int_eq(inv.tensors[sc].shape[0], 1);
    ck_assert_int_eq(inv.tensors[sc].split, RF_SPLIT_REPLICATED);
    ck_assert_int_eq(inv.tensors[sc].shard, 1);
    ck_assert_int_eq(rf_module_slots(&inv, inv.tensors[sc].module, &rc, s, &n, &err), RF_OK);
    ck_assert_int_eq(s[1].ndim, 1);
    ck_assert_int_eq(s[1].shape[0], 2); /* gate, up */
    rf_inventory_free(&inv);
    /* vLLM's Fp8Config without weight_block_size is per tensor */
    ck_assert_int_eq(quant_inv("{\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\"}",
                               RF_QUANT_FP8_TENSOR, &inv, &err),
                     RF_OK);
    ck_assert_int_eq(inv.cfg.quant, RF_QUANT_FP8_TENSOR);
    rf_inventory_free(&inv);
    /* refused: static input scales, two schemes in one model, 8-bit int weights */
    ck_assert_int_eq(quant_inv(FP8_GROUP("tensor", ", \"input_activations\": {\"num_bits\": 8, "
                                                   "\"type\": \"float\", \"strategy\": \"tensor\", "
                                                   "\"dynamic\": false}"),
                               RF_QUANT_FP8_TENSOR, &inv, &err),
                     RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "static"));
    ck_assert_int_eq(
        quant_inv("{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"a\": "
                  "{\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
                  "\"tensor\"}}, \"b\": {\"weights\": {\"num_bits\": 8, \"type\": \"float\", "
                  "\"strategy\": \"channel\"}}}}",
                  RF_QUANT_FP8_TENSOR, &inv, &err),
        RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "one scheme per model"));
    ck_assert_int_eq(quant_inv("{\"quant_method\": \"compressed-tensors\", \"config_groups\": "
                               "{\"a\": {\"weights\": {\"num_bits\": 8, \"type\": \"int\", "
                               "\"strategy\": \"channel\"}}}}",
                               RF_QUANT_FP8_CHANNEL, &inv, &err),
                     RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "fp8-tensor, fp8-channel"));
    /* MoE experts are not supported under these formats */
    char path[512];
    snprintf(path, sizeof(path), "%s/qwen3-moe-tiny/config.json", REFIT_TEST_DATA);
    rf_model_config_t cfg = load_cfg(path);
    rf_err_clear(&err); /* the first error is kept */
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_FP8_CHANNEL, 0, &inv, &err),
                     RF_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "MoE experts are not supported") != NULL, "%s", err.msg);
    rf_model_config_free(&cfg);
    /* Llama-3.1-8B: counts by hand (above) */
    snprintf(path, sizeof(path), "%s/models/llama-3.1-8b.config.json", REFIT_JOBS_DIR);
    cfg = load_cfg(path);
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_FP8_TENSOR, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(inv.ntensors, 515);
    ck_assert_uint_eq(inv.nparams, 8030261248ULL + 224);
    rf_inventory_free(&inv);
    ck_assert_int_eq(rf_inventory_build(&cfg, RF_QUANT_FP8_CHANNEL, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(inv.ntensors, 515);
    ck_assert_uint_eq(inv.nparams, 8030261248ULL + 1376256);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
}
END_TEST

static rf_model_config_t parse_cfg(const char *json)
{
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_model_config_parse(json, strlen(json), "t.json", &cfg, &err) == RF_OK, "%s",
                  err.msg);
    return cfg;
}

/* tests/data/SOURCES.md: pythia-14m 6 x 12 + 4 = 76 tensors, 14,067,712 values (the model
 * card's 1,189,888 non-embedding + 2 x 50304 x 128); opt-125m 12 x 16 + 4 = 196 tensors,
 * 125,239,296 values; the fixtures 28 and 36 tensors as their reference lists */
START_TEST(test_counts_dense_layernorm_families)
{
    check_counts("pythia-14m.config.json", 76, 14067712ULL);
    check_counts("opt-125m.config.json", 196, 125239296ULL);
    check_counts("gpt-neox-tiny-b.config.json", 28, 2 * 512 * 96 + 2 * 96 +
                                                       2 * (4 * 96 + 288 * 96 + 288 + 96 * 96 +
                                                            96 + 192 * 96 + 192 + 96 * 192 + 96));
    check_counts("opt-tiny.config.json", 36, 512 * 64 + 130 * 64 + 2 * 64 +
                                                 2 * (4 * 64 + 4 * (64 * 64 + 64) + 128 * 64 +
                                                      128 + 64 * 128 + 64));
}
END_TEST

static const char *NEOX_KEYS =
    "{\"model_type\":\"gpt_neox\",\"hidden_size\":8,\"num_hidden_layers\":1,\"vocab_size\":10,"
    "\"num_attention_heads\":2,\"intermediate_size\":16%s}";

static rf_status_t parse_neox(const char *extra, rf_model_config_t *cfg, rf_err_t *err)
{
    char json[512];
    snprintf(json, sizeof(json), NEOX_KEYS, extra);
    rf_err_clear(err);
    return rf_model_config_parse(json, strlen(json), "neox.json", cfg, err);
}

/* rotary_pct (4.x) or rope_parameters.partial_rotary_factor (transformers 5), agreeing when
 * both; rotary_emb_base as rope theta; defaults of GPTNeoXConfig; untied; biases */
START_TEST(test_gpt_neox_config_keys)
{
    rf_model_config_t c;
    rf_err_t err;
    ck_assert_int_eq(parse_neox("", &c, &err), RF_OK);
    ck_assert(c.rotary_pct == 0.25 && c.use_parallel_residual && !c.tie_word_embeddings);
    ck_assert(c.qkv_bias && c.o_bias && c.mlp_bias);
    ck_assert_int_eq(c.family, RF_FAMILY_GPT_NEOX);
    rf_model_config_free(&c);
    ck_assert_int_eq(parse_neox(",\"rotary_pct\":0.5,\"rotary_emb_base\":5000,"
                                "\"use_parallel_residual\":false,\"attention_bias\":false",
                                &c, &err),
                     RF_OK);
    ck_assert(c.rotary_pct == 0.5 && c.rope_theta == 5000.0 && !c.use_parallel_residual);
    ck_assert(!c.qkv_bias && !c.o_bias && c.mlp_bias);
    rf_model_config_free(&c);
    ck_assert_int_eq(
        parse_neox(",\"rope_parameters\":{\"partial_rotary_factor\":0.5,\"rope_theta\":7.0}", &c,
                   &err),
        RF_OK);
    ck_assert(c.rotary_pct == 0.5 && c.rope_theta == 7.0);
    rf_model_config_free(&c);
    ck_assert_int_eq(
        parse_neox(",\"rotary_pct\":0.25,\"rope_parameters\":{\"partial_rotary_factor\":0.5}",
                   &c, &err),
        RF_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "rotary_pct 0.25 and rope_parameters.partial_rotary_factor 0.5 "
                                  "disagree") != NULL,
                  "%s", err.msg);
    ck_assert_int_eq(parse_neox(",\"rotary_pct\":0", &c, &err), RF_ERR_CONFIG);
    ck_assert_int_eq(parse_neox(",\"num_key_value_heads\":1", &c, &err), RF_ERR_CONFIG);
}
END_TEST

/* the skip list: old causal-mask buffers and inv_freq skipped, anything else unknown an
 * error; a cut layer is CUT under the family's own layer prefix */
START_TEST(test_gpt_neox_skip_list)
{
    rf_model_config_t c;
    rf_inventory_t inv;
    rf_err_t err;
    ck_assert_int_eq(parse_neox("", &c, &err), RF_OK);
    c.orig_num_hidden_layers = 3; /* model.overrides cut 3 layers to 1 */
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_ge(rf_inventory_find(&inv, "gpt_neox.layers.0.attention.dense.bias"), 0);
    ck_assert_int_ge(rf_inventory_find(&inv, "embed_out.weight"), 0);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "gpt_neox.layers.0.attention.bias"),
                     RF_UNKNOWN_SKIP);
    ck_assert_int_eq(
        rf_inventory_classify_unknown(&inv, "gpt_neox.layers.12.attention.masked_bias"),
        RF_UNKNOWN_SKIP);
    ck_assert_int_eq(
        rf_inventory_classify_unknown(&inv, "gpt_neox.layers.0.attention.rotary_emb.inv_freq"),
        RF_UNKNOWN_SKIP);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "gpt_neox.layers.0.attention.biasx"),
                     RF_UNKNOWN_ERROR);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "gpt_neox.attention.bias"),
                     RF_UNKNOWN_ERROR);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "gpt_neox.layers.2.mlp.dense_h_to_4h.bias"),
                     RF_UNKNOWN_CUT);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "lm_head.weight"), RF_UNKNOWN_ERROR);
    rf_inventory_free(&inv);
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_FP8_BLOCK, 0, &inv, &err), RF_ERR_UNSUPPORTED);
    rf_model_config_free(&c);
    /* tied: embed_out is the head name that may be stored anyway */
    ck_assert_int_eq(parse_neox(",\"tie_word_embeddings\":true", &c, &err), RF_OK);
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(rf_inventory_find(&inv, "embed_out.weight"), -1);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "embed_out.weight"), RF_UNKNOWN_TIED);
    rf_inventory_free(&inv);
    rf_model_config_free(&c);
}
END_TEST

/* DeepSeek-V3 / Moonlight (tests/data/SOURCES.md): the full-size counts; the fixture's 91
 * tensors and modules (fused_qkv_a_proj with q_lora_rank, q_proj without); first_k_dense
 * and moe_layer_freq; the correction bias fp32; the MTP layer on the skip list (L as written,
 * also after an override cut layers); per-rank slots split by heads, and refusals naming the
 * module */
START_TEST(test_deepseek_v3_inventory)
{
    char path[512];
    rf_inventory_t inv;
    rf_err_t err;
    rf_err_clear(&err);
    check_counts("moonlight-16b-a3b-instruct.config.json", 5317, 15960110208ULL);
    check_counts("deepseek-v3-tiny-b.config.json", 91, 257728ULL);
    snprintf(path, sizeof(path), "%s/models/deepseek-v3.config.json", REFIT_JOBS_DIR);
    rf_model_config_t c = load_cfg(path);
    ck_assert_int_eq(c.family, RF_FAMILY_DEEPSEEK_V3);
    ck_assert(c.q_lora_rank == 1536 && c.kv_lora_rank == 512 && c.qk_nope_head_dim == 128 &&
              c.qk_rope_head_dim == 64 && c.v_head_dim == 128 && c.first_k_dense_replace == 3 &&
              c.n_shared_experts == 1 && c.num_nextn_predict_layers == 1 && c.score_correction);
    ck_assert(!rf_model_layer_is_moe(&c, 2) && rf_model_layer_is_moe(&c, 3));
    /* 61 layers x (14 + 3 dense x 2 | 2 + 256 x 3 x 2 + 3 x 2) + 3, scales included */
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_FP8_BLOCK, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(inv.ntensors, 90427);
    ck_assert_uint_eq(inv.nparams, 671067257432ULL);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "model.layers.61.eh_proj.weight"),
                     RF_UNKNOWN_SKIP);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "model.layers.62.enorm.weight"),
                     RF_UNKNOWN_ERROR);
    rf_inventory_free(&inv);
    c.num_hidden_layers = 4; /* model.overrides: 61 -> 4; layer 61 is still the MTP layer */
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "model.layers.5.mlp.gate.weight"),
                     RF_UNKNOWN_CUT);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "model.layers.61.hnorm.weight"),
                     RF_UNKNOWN_SKIP);
    int t = rf_inventory_find(&inv, "model.layers.3.mlp.gate.e_score_correction_bias");
    ck_assert_int_ge(t, 0);
    ck_assert(inv.tensors[t].dtype == RF_DTYPE_F32 && inv.tensors[t].param == RF_PARAM_F32_BUFFER);
    ck_assert_int_lt(rf_inventory_find(&inv, "model.layers.2.mlp.gate.weight"), 0);
    ck_assert_int_ge(rf_inventory_find(&inv, "model.layers.3.mlp.shared_experts.up_proj.weight"),
                     0);
    rf_inventory_free(&inv);
    rf_model_config_free(&c);

    /* the fixture: fused_qkv_a_proj = [q_a_proj 48; kv_a_proj_with_mqa 40], q_b_proj by heads */
    snprintf(path, sizeof(path), "%s/models/deepseek-v3-tiny-b.config.json", REFIT_JOBS_DIR);
    c = load_cfg(path);
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    int fused = -1, qb = -1, o = -1;
    for (int m = 0; m < inv.nmodules; m++) {
        if (strcmp(inv.modules[m].name, "model.layers.0.self_attn.fused_qkv_a_proj") == 0)
            fused = m;
        if (strcmp(inv.modules[m].name, "model.layers.0.self_attn.q_b_proj") == 0)
            qb = m;
        if (strcmp(inv.modules[m].name, "model.layers.0.self_attn.o_proj") == 0)
            o = m;
    }
    ck_assert(fused >= 0 && qb >= 0 && o >= 0);
    ck_assert_int_eq(inv.modules[fused].kind, RF_MOD_REPLICATED_LINEAR);
    ck_assert_int_eq(inv.modules[fused].ntensors, 2);
    rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
    int n;
    rf_rollout_coords_t rc = {.tp = 2, .tp_rank = 1, .dp = 1, .ep = 1};
    ck_assert_int_eq(rf_module_slots(&inv, fused, &rc, s, &n, &err), RF_OK);
    ck_assert(n == 1 && s[0].shape[0] == 88 && s[0].shape[1] == 64);
    ck_assert_int_eq(rf_module_slots(&inv, qb, &rc, s, &n, &err), RF_OK);
    ck_assert(n == 1 && s[0].shape[0] == 48 && s[0].shape[1] == 48);
    ck_assert_int_eq(rf_module_slots(&inv, o, &rc, s, &n, &err), RF_OK);
    ck_assert(n == 1 && s[0].shape[0] == 64 && s[0].shape[1] == 32);
    rc.tp = 8; /* 96 q_b rows divide by 8, 4 heads do not */
    rc.tp_rank = 0;
    ck_assert_int_eq(rf_module_slots(&inv, qb, &rc, s, &n, &err), RF_ERR_TOPOLOGY);
    ck_assert_msg(strstr(err.msg, "q_b_proj: num_attention_heads 4 is not divisible by 8"), "%s",
                  err.msg);
    rf_inventory_free(&inv);
    /* fp8-block: kv_a_proj_with_mqa would start at row 48 of the fused scale, inside a block */
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_FP8_BLOCK, 0, &inv, &err), RF_OK);
    rc.tp = 1;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_module_slots(&inv, fused, &rc, s, &n, &err), RF_ERR_TOPOLOGY);
    ck_assert_msg(strstr(err.msg, "fused_qkv_a_proj: rows of its first fused linear 48 is not a "
                                  "multiple of the 128-row fp8 block"),
                  "%s", err.msg);
    rf_inventory_free(&inv);
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_WNA16, 32, &inv, &err), RF_ERR_UNSUPPORTED);
    rf_model_config_free(&c);

    /* q_lora_rank null: q_proj (nh (P + R), H) and a replicated kv_a_proj_with_mqa; absent:
     * DeepseekV3Config's 1536 */
    snprintf(path, sizeof(path), "%s/models/deepseek-v3-tiny-noq.config.json", REFIT_JOBS_DIR);
    c = load_cfg(path);
    ck_assert_int_eq(c.q_lora_rank, 0);
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_eq(inv.ntensors, 91 - 3 * 3 + 3);
    t = rf_inventory_find(&inv, "model.layers.2.self_attn.q_proj.weight");
    ck_assert(t >= 0 && inv.tensors[t].shape[0] == 96 && inv.tensors[t].shape[1] == 64);
    t = rf_inventory_find(&inv, "model.layers.2.self_attn.kv_a_proj_with_mqa.weight");
    ck_assert(t >= 0 && inv.modules[inv.tensors[t].module].kind == RF_MOD_REPLICATED_LINEAR);
    ck_assert_int_lt(rf_inventory_find(&inv, "model.layers.2.self_attn.q_a_proj.weight"), 0);
    rf_inventory_free(&inv);
    rf_model_config_free(&c);
    const char *j = "{\"model_type\":\"deepseek_v3\",\"hidden_size\":8,\"num_hidden_layers\":1,"
                    "\"vocab_size\":10,\"num_attention_heads\":2,\"intermediate_size\":16}";
    ck_assert_int_eq(rf_model_config_parse(j, strlen(j), "ds.json", &c, &err), RF_OK);
    ck_assert(c.q_lora_rank == 1536 && c.first_k_dense_replace == 3 && c.score_correction);
    rf_model_config_free(&c);
}
END_TEST

/* OPT: tied by default, ffn_dim, OPT-350m's shape (word_embed_proj_dim 512 != H 1024,
 * do_layer_norm_before false: project_in / project_out, no final_layer_norm), learned
 * positions with 2 extra rows, the decoder.* alias */
START_TEST(test_opt_inventory)
{
    const char *j350 =
        "{\"model_type\":\"opt\",\"hidden_size\":1024,\"num_hidden_layers\":24,"
        "\"vocab_size\":50272,\"num_attention_heads\":16,\"ffn_dim\":4096,"
        "\"word_embed_proj_dim\":512,\"do_layer_norm_before\":false,"
        "\"max_position_embeddings\":2048,\"torch_dtype\":\"float16\"}";
    rf_model_config_t c = parse_cfg(j350);
    rf_inventory_t inv;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert(c.tie_word_embeddings && !c.final_layer_norm);
    ck_assert_int_eq(c.intermediate_size, 4096);
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    /* 24 x 16 + embed_tokens + embed_positions + project_in + project_out */
    ck_assert_int_eq(inv.ntensors, 24 * 16 + 4);
    int e = rf_inventory_find(&inv, "model.decoder.embed_tokens.weight");
    ck_assert_int_ge(e, 0);
    ck_assert_int_eq(inv.tensors[e].shape[1], 512);
    int pi = rf_inventory_find(&inv, "model.decoder.project_in.weight");
    int po = rf_inventory_find(&inv, "model.decoder.project_out.weight");
    ck_assert_int_ge(pi, 0);
    ck_assert_int_ge(po, 0);
    ck_assert_int_eq(inv.tensors[pi].shape[0], 1024);
    ck_assert_int_eq(inv.tensors[pi].shape[1], 512);
    ck_assert_int_eq(inv.tensors[po].layer, 24);
    ck_assert_int_eq(rf_inventory_find(&inv, "model.decoder.final_layer_norm.weight"), -1);
    int pos = rf_inventory_find(&inv, "model.decoder.embed_positions.weight");
    ck_assert_int_eq(inv.tensors[pos].shape[0], 2050);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "lm_head.weight"), RF_UNKNOWN_TIED);
    const char *from[2], *to[2];
    ck_assert_int_eq(rf_family_aliases(c.family, from, to, 2), 1);
    ck_assert_str_eq(from[0], "decoder.");
    ck_assert_str_eq(to[0], "model.decoder.");
    ck_assert_int_eq(rf_family_aliases(RF_FAMILY_LLAMA, from, to, 2), 0);
    rf_inventory_free(&inv);
    rf_model_config_free(&c);
    c = parse_cfg("{\"model_type\":\"opt\",\"hidden_size\":8,\"num_hidden_layers\":1,"
                  "\"vocab_size\":10,\"num_attention_heads\":2,\"ffn_dim\":16,"
                  "\"tie_word_embeddings\":false,\"enable_bias\":false}");
    ck_assert_int_eq(rf_inventory_build(&c, RF_QUANT_NONE, 0, &inv, &err), RF_OK);
    ck_assert_int_ge(rf_inventory_find(&inv, "lm_head.weight"), 0);
    ck_assert_int_ge(rf_inventory_find(&inv, "model.decoder.final_layer_norm.bias"), 0);
    ck_assert_int_eq(rf_inventory_find(&inv, "model.decoder.layers.0.fc1.bias"), -1);
    ck_assert_int_eq(inv.tensors[rf_inventory_find(&inv, "model.decoder.embed_positions.weight")]
                         .shape[0],
                     2050); /* OPTConfig's max_position_embeddings 2048 */
    rf_inventory_free(&inv);
    rf_model_config_free(&c);
    const char *bad = "{\"model_type\":\"opt\",\"hidden_size\":8,\"num_hidden_layers\":1,"
                      "\"vocab_size\":10,\"num_attention_heads\":2,\"ffn_dim\":16,"
                      "\"layer_norm_elementwise_affine\":false}";
    ck_assert_int_eq(rf_model_config_parse(bad, strlen(bad), "t.json", &c, &err),
                     RF_ERR_UNSUPPORTED);
    const char *noffn = "{\"model_type\":\"opt\",\"hidden_size\":8,\"num_hidden_layers\":1,"
                        "\"vocab_size\":10,\"num_attention_heads\":2,\"intermediate_size\":16}";
    rf_err_clear(&err); /* the first error is kept */
    ck_assert_int_eq(rf_model_config_parse(noffn, strlen(noffn), "t.json", &c, &err),
                     RF_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "ffn_dim") != NULL, "%s", err.msg);
}
END_TEST

static rf_status_t cmp_cfg(const rf_model_config_t *ck, const rf_model_config_t *topo,
                           rf_quant_t q, int64_t g, rf_err_t *err)
{
    rf_err_clear(err); /* the first error is kept: each call reports its own */
    return rf_model_config_compare(ck, topo, q, g, "d", err);
}

static rf_status_t check_dir(const char *dir, const rf_model_config_t *topo, rf_quant_t q,
                             int64_t g, rf_err_t *err)
{
    rf_err_clear(err);
    return rf_model_config_check_checkpoint(dir, topo, q, g, err);
}

/* A checkpoint's config.json against the topology's: the keys that decide the inventory,
 * after the parser's spelling normalization, the topology's sizes as written (overrides cut
 * deliberately), quantization only when the checkpoint has a quantization_config. */
START_TEST(test_config_compare_checkpoint)
{
    char path[512];
    rf_err_t err;
    rf_err_clear(&err);
    snprintf(path, sizeof(path), "%s/llama-tiny/config.json", REFIT_TEST_DATA);
    rf_model_config_t ck = load_cfg(path), topo = load_cfg(path);
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err), RF_OK);
    /* model.overrides cut layers, experts, vocab: compared as written (orig_*) */
    topo.num_hidden_layers = 2;
    topo.vocab_size = 512;
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err), RF_OK);
    topo.orig_num_hidden_layers = 4;
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err),
                     RF_ERR_MISMATCH);
    ck_assert_str_eq(err.msg, "checkpoint d: config.json says num_hidden_layers 3, the topology's "
                              "model config says 4");
    topo.orig_num_hidden_layers = 3;
    topo.tie_word_embeddings = true;
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err),
                     RF_ERR_MISMATCH);
    ck_assert_str_eq(err.msg, "checkpoint d: config.json says tie_word_embeddings false, the "
                              "topology's model config says true");
    topo.tie_word_embeddings = false;
    topo.num_key_value_heads = 6;
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err),
                     RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "num_key_value_heads 2, the topology's model config says 6"));
    rf_model_config_free(&topo);
    snprintf(path, sizeof(path), "%s/qwen3-tiny-tied/config.json", REFIT_TEST_DATA);
    topo = load_cfg(path);
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err),
                     RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "model_type llama, the topology's model config says qwen3"));
    rf_model_config_free(&topo);
    rf_model_config_free(&ck);

    /* both spellings of a key (DESIGN.md section 4) are one key; head_dim null = H / nh */
    const char *moe = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, "
                      "\"num_hidden_layers\": 2, \"vocab_size\": 100, \"num_attention_heads\": 4, "
                      "\"moe_intermediate_size\": 32, \"tie_word_embeddings\": false, ";
    char a[1024], b[1024];
    snprintf(a, sizeof(a), "%s\"num_experts\": 8, \"torch_dtype\": \"bfloat16\", "
                           "\"head_dim\": 16}", moe);
    snprintf(b, sizeof(b), "%s\"num_local_experts\": 8, \"dtype\": \"bfloat16\", "
                           "\"head_dim\": null}", moe);
    ck = parse_cfg(a);
    topo = parse_cfg(b);
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err), RF_OK);
    topo.orig_num_experts = 6; /* a topology file whose config says 6 experts */
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err),
                     RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "num_experts 8, the topology's model config says 6"));
    topo.orig_num_experts = 8;
    rf_model_config_free(&ck);

    /* quantization: a checkpoint without quantization_config is a bf16 source (the trainer
     * quantizes); with one, method and block / group size must be the topology's */
    ck = parse_cfg(b);
    ck_assert_int_eq(cmp_cfg(&ck, &ck, RF_QUANT_FP8_BLOCK, 128, &err), RF_OK);
    rf_model_config_free(&ck);
    snprintf(a, sizeof(a), "%s\"num_experts\": 8, \"quantization_config\": {\"quant_method\": "
                           "\"fp8\", \"weight_block_size\": [128, 128]}}", moe);
    ck = parse_cfg(a);
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_FP8_BLOCK, 128, &err), RF_OK);
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_NONE, 128, &err),
                     RF_ERR_MISMATCH);
    ck_assert_str_eq(err.msg, "checkpoint d: config.json says quantization_config.quant_method "
                              "fp8-block, the topology says none");
    rf_model_config_free(&ck);
    snprintf(a, sizeof(a), "%s\"num_experts\": 8, \"quantization_config\": {\"quant_method\": "
                           "\"compressed-tensors\", \"config_groups\": {\"g\": {\"weights\": "
                           "{\"num_bits\": 4, \"strategy\": \"group\", \"group_size\": 32, "
                           "\"symmetric\": true}}}}}", moe);
    ck = parse_cfg(a);
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_WNA16, 32, &err), RF_OK);
    ck_assert_int_eq(cmp_cfg(&ck, &topo, RF_QUANT_WNA16, 128, &err),
                     RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "group_size 32, the topology says 128"));
    rf_model_config_free(&ck);
    rf_model_config_free(&topo);

    /* a checkpoint directory without config.json has nothing to disagree with */
    snprintf(path, sizeof(path), "%s/llama-tiny/config.json", REFIT_TEST_DATA);
    topo = load_cfg(path);
    ck_assert_int_eq(check_dir("/nonexistent-dir", &topo, RF_QUANT_NONE,
                                                      128, &err),
                     RF_OK);
    snprintf(path, sizeof(path), "%s/llama-tiny", REFIT_TEST_DATA);
    ck_assert_int_eq(check_dir(path, &topo, RF_QUANT_NONE, 128, &err),
                     RF_OK);
    topo.tie_word_embeddings = true;
    ck_assert_int_eq(check_dir(path, &topo, RF_QUANT_NONE, 128, &err),
                     RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "llama-tiny: config.json says tie_word_embeddings false"));
    rf_model_config_free(&topo);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("inventory");
    TCase *tc = tcase_create("inventory");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_counts_qwen3_0_6b);
    tcase_add_test(tc, test_counts_qwen3_4b);
    tcase_add_test(tc, test_counts_qwen2_5_0_5b);
    tcase_add_test(tc, test_counts_llama_3_1_8b);
    tcase_add_test(tc, test_counts_qwen3_30b_a3b);
    tcase_add_test(tc, test_qwen2_biases_and_modules);
    tcase_add_test(tc, test_slots_qkv_replication);
    tcase_add_test(tc, test_config_errors);
    tcase_add_test(tc, test_inventory_too_many_tensors);
    tcase_add_test(tc, test_config_aliases);
    tcase_add_test(tc, test_moe_placement);
    tcase_add_test(tc, test_quant_not_convert_and_refusals);
    tcase_add_test(tc, test_fp8_rows_config_and_inventory);
    tcase_add_test(tc, test_config_compare_checkpoint);
    tcase_add_test(tc, test_counts_dense_layernorm_families);
    tcase_add_test(tc, test_gpt_neox_config_keys);
    tcase_add_test(tc, test_gpt_neox_skip_list);
    tcase_add_test(tc, test_opt_inventory);
    tcase_add_test(tc, test_deepseek_v3_inventory);
    tcase_add_test(tc, test_layout_hf);
    tcase_add_test(tc, test_mtp_and_fp8_qwen3_next);
    tcase_add_test(tc, test_layout_hf_granite_quant);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
