/*
 * Unit tests of the Qwen3-Next family (issue 17): the config rules of its layer kinds
 * (layer_types and full_attention_interval, agreeing when both are given), the inventory of
 * the transformers-written fixture (tests/data/qwen3-next-tiny: Gated DeltaNet, gated full
 * attention, MoE with a shared expert and its gate), the rollout slot shapes and refusals,
 * and the loader arithmetic of the sectioned Gated DeltaNet tensors against an index
 * computation written out here (vLLM Qwen3NextGatedDeltaNet: conv1d per q / k / v section,
 * in_proj_qkvz per key-head group) and of the gated q of qkv_proj.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/loader.h"
#include "refit/model.h"

/* qwen3-next-tiny's sizes, with the layer-kind keys left to the caller */
#define NEXT_KEYS                                                                              \
    "{\"model_type\":\"qwen3_next\",\"hidden_size\":64,\"num_hidden_layers\":4,"              \
    "\"vocab_size\":512,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16," \
    "\"intermediate_size\":128,\"num_experts\":8,\"moe_intermediate_size\":32,"              \
    "\"shared_expert_intermediate_size\":32,\"num_experts_per_tok\":2,"                      \
    "\"linear_num_key_heads\":2,\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,"      \
    "\"linear_value_head_dim\":16,\"linear_conv_kernel_dim\":4%s}"

static rf_status_t parse_next(const char *extra, rf_model_config_t *cfg, rf_err_t *err)
{
    char json[1024];
    snprintf(json, sizeof(json), NEXT_KEYS, extra);
    rf_err_clear(err);
    return rf_model_config_parse(json, strlen(json), "next.json", cfg, err);
}

static int full_mask(const rf_model_config_t *c)
{
    int m = 0;
    for (int i = 0; i < c->num_hidden_layers; i++)
        m |= rf_model_layer_is_full_attention(c, i) << i;
    return m;
}

/* neither key: full_attention_interval 4 (layer 3); the interval alone; layer_types alone
 * (any pattern); both agreeing; both disagreeing (refused naming both); bad entries */
START_TEST(test_layer_kinds)
{
    rf_model_config_t c;
    rf_err_t err;
    ck_assert_int_eq(parse_next("", &c, &err), RF_OK);
    ck_assert_int_eq(c.family, RF_FAMILY_QWEN3_NEXT);
    ck_assert_int_eq(full_mask(&c), 0x8);
    ck_assert(!c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.tie_word_embeddings);
    rf_model_config_free(&c);
    ck_assert_int_eq(parse_next(",\"full_attention_interval\":2", &c, &err), RF_OK);
    ck_assert_int_eq(full_mask(&c), 0xa);
    rf_model_config_free(&c);
    ck_assert_int_eq(parse_next(",\"layer_types\":[\"full_attention\",\"linear_attention\","
                                "\"linear_attention\",\"full_attention\"]",
                                &c, &err),
                     RF_OK);
    ck_assert_int_eq(full_mask(&c), 0x9);
    rf_model_config_free(&c);
    ck_assert_int_eq(parse_next(",\"full_attention_interval\":4,\"layer_types\":["
                                "\"linear_attention\",\"linear_attention\","
                                "\"linear_attention\",\"full_attention\"]",
                                &c, &err),
                     RF_OK);
    ck_assert_int_eq(full_mask(&c), 0x8);
    rf_model_config_free(&c);
    ck_assert_int_eq(parse_next(",\"full_attention_interval\":2,\"layer_types\":["
                                "\"linear_attention\",\"linear_attention\","
                                "\"linear_attention\",\"full_attention\"]",
                                &c, &err),
                     RF_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "layer_types[1] \"linear_attention\" disagrees with "
                                  "full_attention_interval 2") != NULL,
                  "%s", err.msg);
    ck_assert_int_eq(parse_next(",\"layer_types\":[\"linear_attention\",\"full_attention\"]",
                                &c, &err),
                     RF_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "layer_types must be a list of num_hidden_layers (4)") != NULL,
                  "%s", err.msg);
    ck_assert_int_eq(parse_next(",\"layer_types\":[\"linear_attention\",\"sliding_attention\","
                                "\"linear_attention\",\"full_attention\"]",
                                &c, &err),
                     RF_ERR_CONFIG);
    ck_assert_msg(strstr(err.msg, "layer_types[1] must be") != NULL, "%s", err.msg);
    {
        char json[1024];
        snprintf(json, sizeof(json), NEXT_KEYS, "");
        memcpy(strstr(json, "\"linear_num_value_heads\":4") + 25, "3", 1);
        rf_err_clear(&err);
        ck_assert_int_eq(rf_model_config_parse(json, strlen(json), "next.json", &c, &err),
                         RF_ERR_CONFIG);
    }
    ck_assert_msg(strstr(err.msg, "linear_num_value_heads 3 is not a multiple of "
                                  "linear_num_key_heads 2") != NULL,
                  "%s", err.msg);
    /* a copy keeps the layer kinds */
    rf_model_config_t d;
    ck_assert_int_eq(parse_next(",\"full_attention_interval\":2", &c, &err), RF_OK);
    ck_assert_int_eq(rf_model_config_copy(&d, &c), RF_OK);
    rf_model_config_free(&c);
    ck_assert_int_eq(full_mask(&d), 0xa);
    rf_model_config_free(&d);
}
END_TEST

/* a checkpoint's config.json against the topology's: the same layer kinds in either spelling
 * agree; other kinds, or another linear_num_key_heads, are refused naming the key */
START_TEST(test_config_compare)
{
    rf_model_config_t a, b;
    rf_err_t err;
    ck_assert_int_eq(parse_next("", &a, &err), RF_OK);
    ck_assert_int_eq(parse_next(",\"layer_types\":[\"linear_attention\",\"linear_attention\","
                                "\"linear_attention\",\"full_attention\"]",
                                &b, &err),
                     RF_OK);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_model_config_compare(&b, &a, RF_QUANT_NONE, 0, "ck", &err), RF_OK);
    rf_model_config_free(&b);
    ck_assert_int_eq(parse_next(",\"full_attention_interval\":2", &b, &err), RF_OK);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_model_config_compare(&b, &a, RF_QUANT_NONE, 0, "ck", &err),
                     RF_ERR_MISMATCH);
    ck_assert_msg(strstr(err.msg, "config.json says layer_types[1] (full_attention_interval) "
                                  "full_attention, the topology's model config says "
                                  "linear_attention") != NULL,
                  "%s", err.msg);
    rf_model_config_free(&b);
    {
        char json[1024];
        snprintf(json, sizeof(json), NEXT_KEYS, "");
        memcpy(strstr(json, "\"linear_num_key_heads\":2") + 23, "4", 1);
        rf_err_clear(&err);
        ck_assert_int_eq(rf_model_config_parse(json, strlen(json), "next.json", &b, &err), RF_OK);
    }
    rf_err_clear(&err);
    ck_assert_int_eq(rf_model_config_compare(&b, &a, RF_QUANT_NONE, 0, "ck", &err),
                     RF_ERR_MISMATCH);
    ck_assert_msg(strstr(err.msg, "linear_num_key_heads 4") != NULL, "%s", err.msg);
    rf_model_config_free(&b);
    rf_model_config_free(&a);
}
END_TEST

static void load_fixture(rf_inventory_t *inv)
{
    rf_model_config_t c;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_model_config_load(REFIT_TEST_DATA "/qwen3-next-tiny/config.json", &c, &err) ==
                      RF_OK,
                  "%s", err.msg);
    ck_assert_msg(rf_inventory_build(&c, RF_QUANT_NONE, 0, inv, &err) == RF_OK, "%s", err.msg);
    rf_model_config_free(&c);
}

static int tidx(const rf_inventory_t *inv, const char *name)
{
    int t = rf_inventory_find(inv, name);
    ck_assert_msg(t >= 0, "%s", name);
    return t;
}

static rf_rollout_coords_t tp(int T, int r)
{
    rf_rollout_coords_t rc = {.tp = T, .tp_rank = r, .dp = 1, .dp_rank = 0, .ep = 1, .ep_rank = 0};
    return rc;
}

/* the fixture's 154 tensors (its safetensors file holds exactly these), by hand: per layer 2
 * norms; a linear-attention layer 7 Gated DeltaNet tensors, the full-attention layer 6; every
 * layer's MoE block: router, 8 x 3 experts, 3 shared-expert linears, the shared gate = 29;
 * 3 (2 + 7 + 29) + (2 + 6 + 29) + embed, final norm, lm_head = 114 + 37 + 3 = 154 */
START_TEST(test_fixture_inventory)
{
    rf_inventory_t inv;
    load_fixture(&inv);
    ck_assert_int_eq(inv.ntensors, 154);
    /* modules: linear 2 + 7 + 5, full 2 + 4 + 5, plus embed, norm, lm_head */
    ck_assert_int_eq(inv.nmodules, 3 * 14 + 11 + 3);
    const rf_tensor_t *t = &inv.tensors[tidx(&inv, "model.layers.0.linear_attn.conv1d.weight")];
    ck_assert_int_eq(t->ndim, 3);
    ck_assert_int_eq(t->shape[0], 128);
    ck_assert_int_eq(t->shape[2], 4);
    ck_assert_int_eq(inv.modules[t->module].kind, RF_MOD_SECTIONS);
    ck_assert_int_eq(inv.modules[t->module].nsec, 3);
    t = &inv.tensors[tidx(&inv, "model.layers.3.self_attn.q_proj.weight")];
    ck_assert_int_eq(t->shape[0], 128); /* 2 nh d: query and gate per head */
    ck_assert_int_eq(inv.modules[t->module].n, (2 * 4 + 2 * 2) * 16);
    tidx(&inv, "model.layers.1.linear_attn.A_log");
    tidx(&inv, "model.layers.2.mlp.shared_expert_gate.weight");
    tidx(&inv, "model.layers.3.mlp.shared_expert.down_proj.weight");
    ck_assert_int_eq(rf_inventory_find(&inv, "model.layers.3.linear_attn.A_log"), -1);
    ck_assert_int_eq(rf_inventory_find(&inv, "model.layers.0.self_attn.q_proj.weight"), -1);
    ck_assert_int_eq(rf_inventory_classify_unknown(&inv, "mtp.fc.weight"), RF_UNKNOWN_SKIP);
    rf_inventory_free(&inv);
}
END_TEST

static void slot_of(const rf_inventory_t *inv, const char *tensor, const rf_rollout_coords_t *rc,
                    rf_slot_shape_t *out)
{
    rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
    int n = 0;
    rf_err_t err;
    rf_err_clear(&err);
    const rf_tensor_t *t = &inv->tensors[tidx(inv, tensor)];
    ck_assert_msg(rf_module_slots(inv, t->module, rc, s, &n, &err) == RF_OK, "%s", err.msg);
    *out = s[t->slot];
}

/* vLLM's shapes at TP 2: conv1d (conv_dim / 2, 1, K), in_proj_qkvz (rows / 2, H), A_log (nv / 2),
 * qkv_proj ((2 nh + 2 nkv) d / 2, H); TP 4 refused naming in_proj_qkvz's key heads */
START_TEST(test_slots_and_refusals)
{
    rf_inventory_t inv;
    rf_slot_shape_t s;
    rf_err_t err;
    load_fixture(&inv);
    rf_rollout_coords_t rc = tp(2, 1);
    slot_of(&inv, "model.layers.0.linear_attn.conv1d.weight", &rc, &s);
    ck_assert_int_eq(s.ndim, 3);
    ck_assert(s.shape[0] == 64 && s.shape[1] == 1 && s.shape[2] == 4);
    slot_of(&inv, "model.layers.0.linear_attn.in_proj_qkvz.weight", &rc, &s);
    ck_assert(s.ndim == 2 && s.shape[0] == 96 && s.shape[1] == 64);
    slot_of(&inv, "model.layers.0.linear_attn.in_proj_ba.weight", &rc, &s);
    ck_assert(s.ndim == 2 && s.shape[0] == 4);
    slot_of(&inv, "model.layers.0.linear_attn.A_log", &rc, &s);
    ck_assert(s.ndim == 1 && s.shape[0] == 2);
    slot_of(&inv, "model.layers.0.linear_attn.out_proj.weight", &rc, &s);
    ck_assert(s.shape[0] == 64 && s.shape[1] == 32);
    slot_of(&inv, "model.layers.3.self_attn.q_proj.weight", &rc, &s);
    ck_assert(s.shape[0] == (4 + 2) * 16 && s.shape[1] == 64);
    slot_of(&inv, "model.layers.3.mlp.shared_expert.gate_proj.weight", &rc, &s);
    ck_assert(s.shape[0] == 32);
    rf_rollout_coords_t r4 = tp(4, 0);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_inventory_check_rollout(&inv, &r4, &err), RF_ERR_TOPOLOGY);
    ck_assert_msg(strstr(err.msg, "model.layers.0.linear_attn.in_proj_qkvz: linear_num_key_heads "
                                  "2 is not divisible by 4") != NULL,
                  "%s", err.msg);
    rf_inventory_free(&inv);
}
END_TEST

/* Loads the whole tensor (value = source row index, every column) into rank (T, r)'s slot and
 * returns the slot's rows' source indices. */
static void load_rows(const rf_inventory_t *inv, const char *tensor, int T, int r, int64_t *rows,
                      int64_t *nrows_p)
{
    rf_rollout_coords_t rc = tp(T, r);
    rf_slot_shape_t s;
    slot_of(inv, tensor, &rc, &s);
    int t = tidx(inv, tensor);
    const rf_tensor_t *tt = &inv->tensors[t];
    int64_t R = tt->shape[0], W = (int64_t)(tt->numel / (uint64_t)R), slot_rows = s.shape[0];
    uint16_t *src = malloc((size_t)(R * W) * 2), *dst = calloc((size_t)(slot_rows * W), 2);
    for (int64_t i = 0; i < R * W; i++)
        src[i] = (uint16_t)(i / W);
    rf_dst_t d = rf_dst_contiguous(dst, &s);
    /* in two pieces, cut mid-section, as chunks deliver them */
    uint64_t cut = (uint64_t)R / 3 + 1;
    rf_load_piece(inv, &rc, t, 0, &d, src, RF_DTYPE_BF16, 0, cut);
    rf_load_piece(inv, &rc, t, 0, &d, src + cut * (uint64_t)W, RF_DTYPE_BF16, cut, (uint64_t)R);
    for (int64_t j = 0; j < slot_rows; j++) {
        rows[j] = dst[j * W];
        for (int64_t k = 1; k < W; k++)
            ck_assert_int_eq(dst[j * W + k], dst[j * W]);
    }
    *nrows_p = slot_rows;
    free(src);
    free(dst);
}

/* conv1d at TP 2 rank 1: [q_1; k_1; v_1] = source rows [16, 32), [48, 64), [96, 128) (q, k of
 * key_dim 32, v of value_dim 64); in_proj_qkvz rank 1: rows [96, 192) (key-head group 1) */
START_TEST(test_sections_loader)
{
    rf_inventory_t inv;
    int64_t rows[256], n = 0;
    load_fixture(&inv);
    load_rows(&inv, "model.layers.0.linear_attn.conv1d.weight", 2, 1, rows, &n);
    ck_assert_int_eq(n, 64);
    for (int64_t j = 0; j < n; j++) {
        int64_t want = j < 16 ? 16 + j : (j < 32 ? 48 + (j - 16) : 96 + (j - 32));
        ck_assert_int_eq(rows[j], want);
    }
    load_rows(&inv, "model.layers.0.linear_attn.conv1d.weight", 2, 0, rows, &n);
    for (int64_t j = 0; j < n; j++) {
        int64_t want = j < 16 ? j : (j < 32 ? 32 + (j - 16) : 64 + (j - 32));
        ck_assert_int_eq(rows[j], want);
    }
    load_rows(&inv, "model.layers.0.linear_attn.in_proj_qkvz.weight", 2, 1, rows, &n);
    ck_assert_int_eq(n, 96);
    for (int64_t j = 0; j < n; j++)
        ck_assert_int_eq(rows[j], 96 + j);
    load_rows(&inv, "model.layers.2.linear_attn.dt_bias", 2, 1, rows, &n);
    ck_assert(n == 2 && rows[0] == 2 && rows[1] == 3);
    rf_inventory_free(&inv);
}
END_TEST

/* the gated q at TP 2 rank 1: heads 2, 3 with their gates = q_proj rows [64, 128) */
START_TEST(test_gated_q_loader)
{
    rf_inventory_t inv;
    rf_rollout_coords_t rc = tp(2, 1);
    rf_slot_shape_t s;
    load_fixture(&inv);
    slot_of(&inv, "model.layers.3.self_attn.q_proj.weight", &rc, &s);
    int t = tidx(&inv, "model.layers.3.self_attn.q_proj.weight");
    uint16_t *src = malloc(128 * 64 * 2), *dst = calloc((size_t)(s.shape[0] * 64), 2);
    for (int i = 0; i < 128 * 64; i++)
        src[i] = (uint16_t)(i / 64);
    rf_dst_t d = rf_dst_contiguous(dst, &s);
    ck_assert_int_eq(rf_load_piece(&inv, &rc, t, 0, &d, src, RF_DTYPE_BF16, 0, 128), 64 * 64);
    for (int j = 0; j < 64; j++)
        ck_assert_int_eq(dst[j * 64], 64 + j);
    for (int j = 64; j < s.shape[0]; j++)
        ck_assert_int_eq(dst[j * 64], 0); /* k / v rows untouched by q */
    free(src);
    free(dst);
    rf_inventory_free(&inv);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("qwen3_next");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_layer_kinds);
    tcase_add_test(tc, test_config_compare);
    tcase_add_test(tc, test_fixture_inventory);
    tcase_add_test(tc, test_slots_and_refusals);
    tcase_add_test(tc, test_sections_loader);
    tcase_add_test(tc, test_gated_q_loader);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
