/* Unit tests: the rollout loader arithmetic (DESIGN.md section 5), rf_load_piece and
 * rf_load_vocab_pad, against destination arrays written out by hand.
 *
 * Every source tensor is filled with base + element index (uint16), so each destination
 * element names exactly which source element landed there. Expected arrays below are
 * literal; R8(x) is only shorthand for the eight consecutive literals x, x+1, ..., x+7 of one
 * full source row of width 8 (the start value x was worked out by hand). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/loader.h"
#include "refit/model.h"

#define R8(x) (x), (x) + 1, (x) + 2, (x) + 3, (x) + 4, (x) + 5, (x) + 6, (x) + 7
#define SENT 0xEEEE
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* H 8, nh 4, nkv 2, d 2, I 8, V 10, L 1 */
static const char *LLAMA =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":8,"
    "\"num_hidden_layers\":1,\"vocab_size\":10,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":2,\"intermediate_size\":8,"
    "\"torch_dtype\":\"bfloat16\",\"tie_word_embeddings\":false}";
/* same, with o_proj / gate / up / down biases */
static const char *LLAMA_BIAS =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":8,"
    "\"num_hidden_layers\":1,\"vocab_size\":10,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":2,\"intermediate_size\":8,"
    "\"attention_bias\":true,\"mlp_bias\":true,"
    "\"torch_dtype\":\"bfloat16\",\"tie_word_embeddings\":false}";
static const char *LLAMA_V70 =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":8,"
    "\"num_hidden_layers\":1,\"vocab_size\":70,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":2,\"intermediate_size\":8,"
    "\"torch_dtype\":\"bfloat16\",\"tie_word_embeddings\":false}";
static const char *QWEN2 =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"hidden_size\":8,"
    "\"num_hidden_layers\":1,\"vocab_size\":10,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":2,\"intermediate_size\":8,"
    "\"torch_dtype\":\"bfloat16\",\"tie_word_embeddings\":true}";
/* E 5, Im 4 */
static const char *MOE =
    "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\",\"hidden_size\":8,"
    "\"num_hidden_layers\":1,\"vocab_size\":10,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":2,\"intermediate_size\":8,\"num_experts\":5,"
    "\"moe_intermediate_size\":4,\"num_experts_per_tok\":2,\"decoder_sparse_step\":1,"
    "\"torch_dtype\":\"bfloat16\",\"tie_word_embeddings\":false}";

/* GPT-NeoX: H 8, nh 4, d 2, I 8, V 10, L 1; query_key_value (24, 8) stored per head:
 * head h's q rows [6h, 6h+2), k [6h+2, 6h+4), v [6h+4, 6h+6) */
static const char *NEOX =
    "{\"architectures\":[\"GPTNeoXForCausalLM\"],\"model_type\":\"gpt_neox\",\"hidden_size\":8,"
    "\"num_hidden_layers\":1,\"vocab_size\":10,\"num_attention_heads\":4,"
    "\"intermediate_size\":8,\"rotary_pct\":0.25,\"torch_dtype\":\"bfloat16\"}";
/* OPT: H 8, nh 4, ffn_dim 8, V 10, word_embed_proj_dim 4 (project_in / project_out) */
static const char *OPT_PROJ =
    "{\"architectures\":[\"OPTForCausalLM\"],\"model_type\":\"opt\",\"hidden_size\":8,"
    "\"num_hidden_layers\":1,\"vocab_size\":10,\"num_attention_heads\":4,\"ffn_dim\":8,"
    "\"word_embed_proj_dim\":4,\"max_position_embeddings\":6,\"do_layer_norm_before\":false,"
    "\"torch_dtype\":\"bfloat16\"}";

static void build(const char *json, rf_inventory_t *inv)
{
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_model_config_parse(json, strlen(json), "test.json", &cfg, &err) == RF_OK,
                  "%s", err.msg);
    ck_assert_msg(rf_inventory_build(&cfg, RF_QUANT_NONE, 0, inv, &err) == RF_OK, "%s", err.msg);
    rf_model_config_free(&cfg);
}

static int tidx(const rf_inventory_t *inv, const char *name)
{
    int t = rf_inventory_find(inv, name);
    ck_assert_msg(t >= 0, "no tensor %s", name);
    return t;
}

static rf_rollout_coords_t tp(int T, int r)
{
    rf_rollout_coords_t rc = {.tp = T, .tp_rank = r, .dp = 1, .dp_rank = 0, .ep = 1, .ep_rank = 0};
    return rc;
}

/* A destination buffer for slot `slot` of the module receiving `tensor`, sentinel-filled. */
typedef struct {
    rf_slot_shape_t shape;
    uint16_t *buf;
    size_t n;
    rf_dst_t dst;
} dbuf_t;

static dbuf_t dst_for(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor)
{
    rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
    int n;
    rf_err_t err;
    dbuf_t d;
    rf_err_clear(&err);
    const rf_tensor_t *t = &inv->tensors[tensor];
    ck_assert_msg(rf_module_slots(inv, t->module, rc, s, &n, &err) == RF_OK, "%s", err.msg);
    ck_assert_int_lt(t->slot, n);
    d.shape = s[t->slot];
    ck_assert_uint_eq(rf_dtype_size(d.shape.dtype), 2); /* bf16 */
    d.n = 1;
    for (int i = 0; i < d.shape.ndim; i++)
        d.n *= (size_t)d.shape.shape[i];
    d.buf = malloc(d.n * 2 + 2);
    for (size_t i = 0; i < d.n; i++)
        d.buf[i] = SENT;
    d.dst = rf_dst_contiguous(d.buf, &d.shape);
    return d;
}

static uint16_t *src_for(const rf_inventory_t *inv, int tensor, unsigned base)
{
    const rf_tensor_t *t = &inv->tensors[tensor];
    uint16_t *s = malloc(t->numel * 2 + 2);
    for (uint64_t i = 0; i < t->numel; i++)
        s[i] = (uint16_t)(base + i);
    return s;
}

/* Loads rows [rb, re) of tensor `name` (filled base + index) into d. */
static uint64_t load(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, const char *name,
                     int64_t local_expert, dbuf_t *d, unsigned base, uint64_t rb, uint64_t re)
{
    int t = tidx(inv, name);
    uint16_t *s = src_for(inv, t, base);
    uint64_t w = inv->tensors[t].numel / rf_tensor_rows(&inv->tensors[t]);
    uint64_t n = rf_load_piece(inv, rc, t, local_expert, &d->dst, s + rb * w, inv->tensors[t].dtype, rb, re);
    free(s);
    return n;
}

static uint64_t load_all(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                         const char *name, int64_t le, dbuf_t *d, unsigned base)
{
    int t = tidx(inv, name);
    return load(inv, rc, name, le, d, base, 0, rf_tensor_rows(&inv->tensors[t]));
}

static void expect(const dbuf_t *d, const uint16_t *want, size_t n, const char *what)
{
    ck_assert_msg(d->n == n, "%s: destination has %zu elements, expected %zu", what, d->n, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(d->buf[i] == want[i], "%s: element %zu is %u, expected %u", what, i,
                      d->buf[i], want[i]);
}

#define Q "model.layers.0.self_attn.q_proj.weight"
#define K "model.layers.0.self_attn.k_proj.weight"
#define V "model.layers.0.self_attn.v_proj.weight"

/* q (8, 8) = 101.., k (4, 8) = 301.., v (4, 8) = 501.. ; row j of q starts at 101 + 8 j */
static void load_qkv(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, dbuf_t *d)
{
    load_all(inv, rc, Q, 0, d, 101);
    load_all(inv, rc, K, 0, d, 301);
    load_all(inv, rc, V, 0, d, 501);
}

START_TEST(test_qkv_tp1)
{
    rf_inventory_t inv;
    build(LLAMA, &inv);
    rf_rollout_coords_t rc = tp(1, 0);
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, Q));
    ck_assert_int_eq(d.shape.shape[0], 16);
    ck_assert_int_eq(d.shape.shape[1], 8);
    load_qkv(&inv, &rc, &d);
    const uint16_t want[] = {R8(101), R8(109), R8(117), R8(125), R8(133), R8(141),
                             R8(149), R8(157), R8(301), R8(309), R8(317), R8(325),
                             R8(501), R8(509), R8(517), R8(525)};
    expect(&d, want, NELEM(want), "qkv tp1");
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_qkv_tp2)
{
    rf_inventory_t inv;
    build(LLAMA, &inv);
    /* nh_p 2, nkv_p 1: [q 4 rows; k 2 rows; v 2 rows] */
    const uint16_t want[2][64] = {
        {R8(101), R8(109), R8(117), R8(125), R8(301), R8(309), R8(501), R8(509)},
        {R8(133), R8(141), R8(149), R8(157), R8(317), R8(325), R8(517), R8(525)},
    };
    for (int r = 0; r < 2; r++) {
        rf_rollout_coords_t rc = tp(2, r);
        dbuf_t d = dst_for(&inv, &rc, tidx(&inv, Q));
        ck_assert_int_eq(d.shape.shape[0], 8);
        ck_assert_uint_eq(load_all(&inv, &rc, Q, 0, &d, 101), 32);
        ck_assert_uint_eq(load_all(&inv, &rc, K, 0, &d, 301), 16);
        ck_assert_uint_eq(load_all(&inv, &rc, V, 0, &d, 501), 16);
        expect(&d, want[r], 64, r == 0 ? "qkv tp2 r0" : "qkv tp2 r1");
        free(d.buf);
    }
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_qkv_tp4_kv_replicated)
{
    rf_inventory_t inv;
    build(LLAMA, &inv);
    /* TP 4 > nkv 2: nh_p 1, nkv_p 1, rep 2; rank r takes kv head r / 2 */
    const uint16_t want[4][48] = {
        {R8(101), R8(109), R8(301), R8(309), R8(501), R8(509)},
        {R8(117), R8(125), R8(301), R8(309), R8(501), R8(509)},
        {R8(133), R8(141), R8(317), R8(325), R8(517), R8(525)},
        {R8(149), R8(157), R8(317), R8(325), R8(517), R8(525)},
    };
    for (int r = 0; r < 4; r++) {
        rf_rollout_coords_t rc = tp(4, r);
        dbuf_t d = dst_for(&inv, &rc, tidx(&inv, Q));
        ck_assert_int_eq(d.shape.shape[0], 6);
        load_qkv(&inv, &rc, &d);
        char what[32];
        snprintf(what, sizeof(what), "qkv tp4 r%d", r);
        expect(&d, want[r], 48, what);
        free(d.buf);
    }
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_qkv_bias_qwen2)
{
    rf_inventory_t inv;
    build(QWEN2, &inv);
    const char *qb = "model.layers.0.self_attn.q_proj.bias",
               *kb = "model.layers.0.self_attn.k_proj.bias",
               *vb = "model.layers.0.self_attn.v_proj.bias";
    /* q bias 11..18, k bias 21..24, v bias 31..34 */
    struct {
        int T, r;
        size_t n;
        uint16_t want[16];
    } cases[] = {
        {1, 0, 16, {11, 12, 13, 14, 15, 16, 17, 18, 21, 22, 23, 24, 31, 32, 33, 34}},
        {2, 0, 8, {11, 12, 13, 14, 21, 22, 31, 32}},
        {2, 1, 8, {15, 16, 17, 18, 23, 24, 33, 34}},
        {4, 0, 6, {11, 12, 21, 22, 31, 32}},
        {4, 1, 6, {13, 14, 21, 22, 31, 32}},
        {4, 2, 6, {15, 16, 23, 24, 33, 34}},
        {4, 3, 6, {17, 18, 23, 24, 33, 34}},
    };
    for (size_t c = 0; c < NELEM(cases); c++) {
        rf_rollout_coords_t rc = tp(cases[c].T, cases[c].r);
        dbuf_t d = dst_for(&inv, &rc, tidx(&inv, qb));
        ck_assert_int_eq(d.shape.ndim, 1);
        load_all(&inv, &rc, qb, 0, &d, 11);
        load_all(&inv, &rc, kb, 0, &d, 21);
        load_all(&inv, &rc, vb, 0, &d, 31);
        char what[32];
        snprintf(what, sizeof(what), "qkv bias tp%d r%d", cases[c].T, cases[c].r);
        expect(&d, cases[c].want, cases[c].n, what);
        free(d.buf);
    }
    /* the weight of a Qwen2 lands like Llama's */
    rf_rollout_coords_t rc = tp(2, 1);
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, Q));
    load_qkv(&inv, &rc, &d);
    const uint16_t want[] = {R8(133), R8(141), R8(149), R8(157),
                             R8(317), R8(325), R8(517), R8(525)};
    expect(&d, want, NELEM(want), "qwen2 qkv weight tp2 r1");
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

#define GATE "model.layers.0.mlp.gate_proj.weight"
#define UP "model.layers.0.mlp.up_proj.weight"

START_TEST(test_gate_up_merged)
{
    rf_inventory_t inv;
    build(LLAMA, &inv);
    /* gate (8, 8) = 101.., up (8, 8) = 301..; TP 2: [gate_r 4 rows; up_r 4 rows] */
    const uint16_t want[2][64] = {
        {R8(101), R8(109), R8(117), R8(125), R8(301), R8(309), R8(317), R8(325)},
        {R8(133), R8(141), R8(149), R8(157), R8(333), R8(341), R8(349), R8(357)},
    };
    for (int r = 0; r < 2; r++) {
        rf_rollout_coords_t rc = tp(2, r);
        dbuf_t d = dst_for(&inv, &rc, tidx(&inv, GATE));
        ck_assert_int_eq(d.shape.shape[0], 8);
        /* up alone: gate's rows (0..3) keep the sentinel */
        ck_assert_uint_eq(load_all(&inv, &rc, UP, 0, &d, 301), 32);
        for (int i = 0; i < 32; i++)
            ck_assert_uint_eq(d.buf[i], SENT);
        for (int i = 32; i < 64; i++)
            ck_assert_uint_eq(d.buf[i], want[r][i]);
        /* gate alone into a fresh sentinel buffer: up's rows (4..7) untouched */
        for (size_t i = 0; i < d.n; i++)
            d.buf[i] = SENT;
        ck_assert_uint_eq(load_all(&inv, &rc, GATE, 0, &d, 101), 32);
        for (int i = 0; i < 32; i++)
            ck_assert_uint_eq(d.buf[i], want[r][i]);
        for (int i = 32; i < 64; i++)
            ck_assert_uint_eq(d.buf[i], SENT);
        load_all(&inv, &rc, UP, 0, &d, 301);
        expect(&d, want[r], 64, "gate_up tp2");
        free(d.buf);
    }
    /* TP 4 rank 2: I_p 2: [gate rows 4, 5; up rows 4, 5] */
    rf_rollout_coords_t rc = tp(4, 2);
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, GATE));
    load_all(&inv, &rc, GATE, 0, &d, 101);
    load_all(&inv, &rc, UP, 0, &d, 301);
    const uint16_t w4[] = {R8(133), R8(141), R8(333), R8(341)};
    expect(&d, w4, NELEM(w4), "gate_up tp4 r2");
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_merged_and_row_bias)
{
    rf_inventory_t inv;
    build(LLAMA_BIAS, &inv);
    rf_rollout_coords_t rc = tp(2, 1);
    /* gate bias 51..58, up bias 61..68 */
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, "model.layers.0.mlp.gate_proj.bias"));
    load_all(&inv, &rc, "model.layers.0.mlp.up_proj.bias", 0, &d, 61);
    const uint16_t up_only[] = {SENT, SENT, SENT, SENT, 65, 66, 67, 68};
    expect(&d, up_only, 8, "merged bias, up only");
    load_all(&inv, &rc, "model.layers.0.mlp.gate_proj.bias", 0, &d, 51);
    const uint16_t both[] = {55, 56, 57, 58, 65, 66, 67, 68};
    expect(&d, both, 8, "merged bias");
    free(d.buf);
    /* row-parallel biases: full copy on every rank */
    for (int r = 0; r < 4; r++) {
        rf_rollout_coords_t rc4 = tp(4, r);
        dbuf_t o = dst_for(&inv, &rc4, tidx(&inv, "model.layers.0.self_attn.o_proj.bias"));
        ck_assert_uint_eq(load_all(&inv, &rc4, "model.layers.0.self_attn.o_proj.bias", 0, &o, 41),
                          8);
        const uint16_t ob[] = {41, 42, 43, 44, 45, 46, 47, 48};
        expect(&o, ob, 8, "o_proj bias");
        free(o.buf);
        dbuf_t dn = dst_for(&inv, &rc4, tidx(&inv, "model.layers.0.mlp.down_proj.bias"));
        load_all(&inv, &rc4, "model.layers.0.mlp.down_proj.bias", 0, &dn, 71);
        const uint16_t db[] = {71, 72, 73, 74, 75, 76, 77, 78};
        expect(&dn, db, 8, "down_proj bias");
        free(dn.buf);
    }
    rf_inventory_free(&inv);
}
END_TEST

#define O "model.layers.0.self_attn.o_proj.weight"

START_TEST(test_row_parallel)
{
    rf_inventory_t inv;
    build(LLAMA, &inv);
    /* o_proj (8, 8) = 101..; TP 2 rank 1: columns 4..7 of every row */
    rf_rollout_coords_t rc = tp(2, 1);
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, O));
    ck_assert_int_eq(d.shape.shape[0], 8);
    ck_assert_int_eq(d.shape.shape[1], 4);
    ck_assert_uint_eq(load_all(&inv, &rc, O, 0, &d, 101), 32);
    const uint16_t w2[] = {105, 106, 107, 108, 113, 114, 115, 116, 121, 122, 123,
                           124, 129, 130, 131, 132, 137, 138, 139, 140, 145, 146,
                           147, 148, 153, 154, 155, 156, 161, 162, 163, 164};
    expect(&d, w2, NELEM(w2), "o_proj tp2 r1");
    free(d.buf);
    /* TP 2 rank 0: columns 0..3 */
    rc = tp(2, 0);
    d = dst_for(&inv, &rc, tidx(&inv, O));
    load_all(&inv, &rc, O, 0, &d, 101);
    const uint16_t w20[] = {101, 102, 103, 104, 109, 110, 111, 112, 117, 118, 119,
                            120, 125, 126, 127, 128, 133, 134, 135, 136, 141, 142,
                            143, 144, 149, 150, 151, 152, 157, 158, 159, 160};
    expect(&d, w20, NELEM(w20), "o_proj tp2 r0");
    free(d.buf);
    /* TP 4 rank 3: columns 6, 7 */
    rc = tp(4, 3);
    d = dst_for(&inv, &rc, tidx(&inv, O));
    load_all(&inv, &rc, O, 0, &d, 101);
    const uint16_t w4[] = {107, 108, 115, 116, 123, 124, 131, 132,
                           139, 140, 147, 148, 155, 156, 163, 164};
    expect(&d, w4, NELEM(w4), "o_proj tp4 r3");
    free(d.buf);
    /* down_proj (H 8, I 8) TP 4 rank 1: columns 2, 3 */
    rc = tp(4, 1);
    d = dst_for(&inv, &rc, tidx(&inv, "model.layers.0.mlp.down_proj.weight"));
    load_all(&inv, &rc, "model.layers.0.mlp.down_proj.weight", 0, &d, 1);
    const uint16_t dn[] = {3, 4, 11, 12, 19, 20, 27, 28, 35, 36, 43, 44, 51, 52, 59, 60};
    expect(&d, dn, NELEM(dn), "down_proj tp4 r1");
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_vocab_tp2)
{
    rf_inventory_t inv;
    build(LLAMA, &inv);
    const char *names[] = {"model.embed_tokens.weight", "lm_head.weight"};
    for (int n = 0; n < 2; n++) {
        int t = tidx(&inv, names[n]);
        int m = inv.tensors[t].module;
        /* V 10 -> Vp 64, 32 rows per rank */
        rf_rollout_coords_t rc = tp(2, 0);
        dbuf_t d = dst_for(&inv, &rc, t);
        ck_assert_int_eq(d.shape.shape[0], 32);
        ck_assert_int_eq(d.shape.shape[1], 8);
        ck_assert_uint_eq(load_all(&inv, &rc, names[n], 0, &d, 101), 80);
        const uint16_t rows[] = {R8(101), R8(109), R8(117), R8(125), R8(133),
                                 R8(141), R8(149), R8(157), R8(165), R8(173)};
        for (int i = 0; i < 80; i++)
            ck_assert_uint_eq(d.buf[i], rows[i]);
        for (int i = 80; i < 256; i++) /* the loader leaves padding alone */
            ck_assert_uint_eq(d.buf[i], SENT);
        ck_assert_uint_eq(rf_load_vocab_pad(&inv, &rc, m, &d.dst), 22);
        for (int i = 0; i < 80; i++)
            ck_assert_uint_eq(d.buf[i], rows[i]);
        for (int i = 80; i < 256; i++)
            ck_assert_uint_eq(d.buf[i], 0);
        free(d.buf);

        /* rank 1 receives no rows: the loader writes nothing, padding fills all 32 */
        rc = tp(2, 1);
        d = dst_for(&inv, &rc, t);
        ck_assert_uint_eq(load_all(&inv, &rc, names[n], 0, &d, 101), 0);
        for (int i = 0; i < 256; i++)
            ck_assert_uint_eq(d.buf[i], SENT);
        ck_assert_uint_eq(rf_load_vocab_pad(&inv, &rc, m, &d.dst), 32);
        for (int i = 0; i < 256; i++)
            ck_assert_uint_eq(d.buf[i], 0);
        free(d.buf);

        /* TP 1: rows 0..9 then 54 padding rows */
        rc = tp(1, 0);
        d = dst_for(&inv, &rc, t);
        ck_assert_int_eq(d.shape.shape[0], 64);
        load_all(&inv, &rc, names[n], 0, &d, 101);
        ck_assert_uint_eq(rf_load_vocab_pad(&inv, &rc, m, &d.dst), 54);
        for (int i = 0; i < 80; i++)
            ck_assert_uint_eq(d.buf[i], rows[i]);
        for (int i = 80; i < 512; i++)
            ck_assert_uint_eq(d.buf[i], 0);
        free(d.buf);
    }
    /* a non-vocab module has no padding */
    rf_rollout_coords_t rc = tp(2, 1);
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, O));
    ck_assert_uint_eq(rf_load_vocab_pad(&inv, &rc, inv.tensors[tidx(&inv, O)].module, &d.dst), 0);
    ck_assert_uint_eq(d.buf[0], SENT);
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_vocab_v70_tp2)
{
    rf_inventory_t inv;
    build(LLAMA_V70, &inv);
    /* V 70 -> Vp 128, 64 per rank: rank 1 gets source rows 64..69 as local rows 0..5 */
    int t = tidx(&inv, "model.embed_tokens.weight");
    rf_rollout_coords_t rc = tp(2, 1);
    dbuf_t d = dst_for(&inv, &rc, t);
    ck_assert_int_eq(d.shape.shape[0], 64);
    ck_assert_uint_eq(load_all(&inv, &rc, "model.embed_tokens.weight", 0, &d, 1), 48);
    /* source row 64 starts at 1 + 64 * 8 = 513 */
    const uint16_t rows[] = {R8(513), R8(521), R8(529), R8(537), R8(545), R8(553)};
    for (int i = 0; i < 48; i++)
        ck_assert_uint_eq(d.buf[i], rows[i]);
    ck_assert_uint_eq(d.buf[48], SENT);
    ck_assert_uint_eq(rf_load_vocab_pad(&inv, &rc, inv.tensors[t].module, &d.dst), 58);
    for (int i = 0; i < 48; i++)
        ck_assert_uint_eq(d.buf[i], rows[i]);
    for (int i = 48; i < 512; i++)
        ck_assert_uint_eq(d.buf[i], 0);
    free(d.buf);
    /* rank 0: rows 0..63 all real, no padding */
    rc = tp(2, 0);
    d = dst_for(&inv, &rc, t);
    ck_assert_uint_eq(load_all(&inv, &rc, "model.embed_tokens.weight", 0, &d, 1), 512);
    ck_assert_uint_eq(rf_load_vocab_pad(&inv, &rc, inv.tensors[t].module, &d.dst), 0);
    ck_assert_uint_eq(d.buf[0], 1);
    ck_assert_uint_eq(d.buf[511], 512);
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_replicated_norms)
{
    rf_inventory_t inv;
    build(MOE, &inv);
    const uint16_t norm[] = {11, 12, 13, 14, 15, 16, 17, 18};
    const uint16_t qn[] = {21, 22};
    for (int r = 0; r < 4; r++) {
        rf_rollout_coords_t rc = tp(4, r);
        dbuf_t d = dst_for(&inv, &rc, tidx(&inv, "model.layers.0.input_layernorm.weight"));
        ck_assert_uint_eq(
            load_all(&inv, &rc, "model.layers.0.input_layernorm.weight", 0, &d, 11), 8);
        expect(&d, norm, 8, "input_layernorm");
        free(d.buf);
        d = dst_for(&inv, &rc, tidx(&inv, "model.norm.weight"));
        load_all(&inv, &rc, "model.norm.weight", 0, &d, 11);
        expect(&d, norm, 8, "final norm");
        free(d.buf);
        d = dst_for(&inv, &rc, tidx(&inv, "model.layers.0.self_attn.q_norm.weight"));
        load_all(&inv, &rc, "model.layers.0.self_attn.q_norm.weight", 0, &d, 21);
        expect(&d, qn, 2, "q_norm");
        free(d.buf);
        /* router (E 5, H 8): full copy */
        d = dst_for(&inv, &rc, tidx(&inv, "model.layers.0.mlp.gate.weight"));
        load_all(&inv, &rc, "model.layers.0.mlp.gate.weight", 0, &d, 101);
        const uint16_t g[] = {R8(101), R8(109), R8(117), R8(125), R8(133)};
        expect(&d, g, NELEM(g), "router");
        free(d.buf);
    }
    rf_inventory_free(&inv);
}
END_TEST

/* expert e: gate (4, 8) = 1000 e + 101.., up (4, 8) = 1000 e + 501.., down (8, 4) = 1000 e +
 * 801.. */
static void moe_names(int e, char *g, char *u, char *dn)
{
    snprintf(g, 96, "model.layers.0.mlp.experts.%d.gate_proj.weight", e);
    snprintf(u, 96, "model.layers.0.mlp.experts.%d.up_proj.weight", e);
    snprintf(dn, 96, "model.layers.0.mlp.experts.%d.down_proj.weight", e);
}

START_TEST(test_moe_ep_off)
{
    rf_inventory_t inv;
    build(MOE, &inv);
    char g[96], u[96], dn[96];
    /* tp 2, ep 1: T_m 2, I_p 2; every rank holds all 5 experts */
    for (int r = 0; r < 2; r++) {
        rf_rollout_coords_t rc = tp(2, r);
        moe_names(3, g, u, dn);
        dbuf_t w13 = dst_for(&inv, &rc, tidx(&inv, g));
        dbuf_t w2 = dst_for(&inv, &rc, tidx(&inv, dn));
        ck_assert_int_eq(w13.shape.shape[0], 5);
        ck_assert_int_eq(w13.shape.shape[1], 4);
        ck_assert_int_eq(w13.shape.shape[2], 8);
        ck_assert_int_eq(w2.shape.shape[0], 5);
        ck_assert_int_eq(w2.shape.shape[1], 8);
        ck_assert_int_eq(w2.shape.shape[2], 2);
        ck_assert_uint_eq(load_all(&inv, &rc, g, 3, &w13, 3101), 16);
        ck_assert_uint_eq(load_all(&inv, &rc, u, 3, &w13, 3501), 16);
        ck_assert_uint_eq(load_all(&inv, &rc, dn, 3, &w2, 3801), 16);
        const uint16_t w13_r[2][32] = {
            {R8(3101), R8(3109), R8(3501), R8(3509)},
            {R8(3117), R8(3125), R8(3517), R8(3525)},
        };
        const uint16_t w2_r[2][16] = {
            {3801, 3802, 3805, 3806, 3809, 3810, 3813, 3814, 3817, 3818, 3821, 3822, 3825, 3826,
             3829, 3830},
            {3803, 3804, 3807, 3808, 3811, 3812, 3815, 3816, 3819, 3820, 3823, 3824, 3827, 3828,
             3831, 3832},
        };
        /* expert 3 occupies w13 elements [3 * 32, 4 * 32) and w2 [3 * 16, 4 * 16) */
        for (size_t i = 0; i < w13.n; i++)
            ck_assert_uint_eq(w13.buf[i], i / 32 == 3 ? w13_r[r][i % 32] : SENT);
        for (size_t i = 0; i < w2.n; i++)
            ck_assert_uint_eq(w2.buf[i], i / 16 == 3 ? w2_r[r][i % 16] : SENT);
        free(w13.buf);
        free(w2.buf);
    }
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_moe_ep_on)
{
    rf_inventory_t inv;
    build(MOE, &inv);
    char g[96], u[96], dn[96];
    /* ep 2 = tp 2 x dp 1: T_m 1, I_p 4. linear: rank 0 experts 0,1,2; rank 1 experts 3,4.
     * round_robin: rank 0 experts 0,2,4; rank 1 experts 1,3. */
    struct {
        rf_expert_placement_t pl;
        int q;
        int64_t El;
        int locals[3];
        int declined[3];
    } cases[] = {
        {RF_PLACE_LINEAR, 0, 3, {0, 1, 2}, {3, 4, -1}},
        {RF_PLACE_LINEAR, 1, 2, {3, 4, -1}, {0, 1, 2}},
        {RF_PLACE_ROUND_ROBIN, 0, 3, {0, 2, 4}, {1, 3, -1}},
        {RF_PLACE_ROUND_ROBIN, 1, 2, {1, 3, -1}, {0, 2, 4}},
    };
    for (size_t c = 0; c < NELEM(cases); c++) {
        rf_rollout_coords_t rc = {.tp = 2, .tp_rank = cases[c].q, .dp = 1, .dp_rank = 0,
                                  .ep = 2, .ep_rank = cases[c].q, .placement = cases[c].pl};
        ck_assert_int_eq(rf_moe_local_count(5, &rc), cases[c].El);
        for (int i = 0; i < 3; i++) {
            if (cases[c].locals[i] >= 0)
                ck_assert_int_eq(rf_moe_local_index(5, &rc, cases[c].locals[i]), i);
            if (cases[c].declined[i] >= 0)
                ck_assert_int_eq(rf_moe_local_index(5, &rc, cases[c].declined[i]), -1);
        }
        moe_names(0, g, u, dn);
        dbuf_t w13 = dst_for(&inv, &rc, tidx(&inv, g));
        dbuf_t w2 = dst_for(&inv, &rc, tidx(&inv, dn));
        ck_assert_int_eq(w13.shape.shape[0], cases[c].El);
        ck_assert_int_eq(w13.shape.shape[1], 8);
        ck_assert_int_eq(w2.shape.shape[0], cases[c].El);
        ck_assert_int_eq(w2.shape.shape[2], 4);
        for (int i = 0; i < cases[c].El; i++) {
            int e = cases[c].locals[i];
            moe_names(e, g, u, dn);
            ck_assert_uint_eq(load_all(&inv, &rc, g, i, &w13, 1000 * e + 101), 32);
            ck_assert_uint_eq(load_all(&inv, &rc, u, i, &w13, 1000 * e + 501), 32);
            ck_assert_uint_eq(load_all(&inv, &rc, dn, i, &w2, 1000 * e + 801), 32);
        }
        /* whole expert, both halves; w2 the full (8, 4) down */
        for (int i = 0; i < cases[c].El; i++) {
            unsigned e = (unsigned)cases[c].locals[i];
            const uint16_t w13e[] = {R8(101), R8(109), R8(117), R8(125),
                                     R8(501), R8(509), R8(517), R8(525)};
            for (int k = 0; k < 64; k++)
                ck_assert_uint_eq(w13.buf[i * 64 + k], 1000 * e + w13e[k]);
            for (int k = 0; k < 32; k++)
                ck_assert_uint_eq(w2.buf[i * 32 + k], 1000 * e + 801 + k);
        }
        free(w13.buf);
        free(w2.buf);
    }
    /* a literal spot check: linear rank 1, expert 4 is local 1 */
    rf_rollout_coords_t rc = {.tp = 2, .tp_rank = 1, .dp = 1, .ep = 2, .ep_rank = 1,
                              .placement = RF_PLACE_LINEAR};
    moe_names(4, g, u, dn);
    dbuf_t w13 = dst_for(&inv, &rc, tidx(&inv, g));
    load_all(&inv, &rc, u, 1, &w13, 4501);
    ck_assert_uint_eq(w13.buf[64 + 32], 4501);
    ck_assert_uint_eq(w13.buf[64 + 63], 4532);
    ck_assert_uint_eq(w13.buf[64], SENT); /* gate half of expert 4 untouched */
    ck_assert_uint_eq(w13.buf[32], SENT); /* expert 3's up half untouched */
    free(w13.buf);
    rf_inventory_free(&inv);
}
END_TEST

/* The same tensor as row pieces [0,3), [3,5), [5,8) and as one piece: identical bytes. */
static void pieces_equal(const char *json, const rf_rollout_coords_t *rc, const char *name,
                         int64_t le, unsigned base, const uint64_t *cuts, int ncuts,
                         const uint64_t *want_n)
{
    rf_inventory_t inv;
    build(json, &inv);
    int t = tidx(&inv, name);
    dbuf_t one = dst_for(&inv, rc, t), many = dst_for(&inv, rc, t);
    uint64_t total = load_all(&inv, rc, name, le, &one, base), sum = 0;
    for (int i = 0; i + 1 < ncuts; i++) {
        uint64_t n = load(&inv, rc, name, le, &many, base, cuts[i], cuts[i + 1]);
        ck_assert_msg(n == want_n[i], "%s piece [%llu, %llu): %llu elements, expected %llu",
                      name, (unsigned long long)cuts[i], (unsigned long long)cuts[i + 1],
                      (unsigned long long)n, (unsigned long long)want_n[i]);
        sum += n;
    }
    ck_assert_uint_eq(sum, total);
    ck_assert_int_eq(memcmp(one.buf, many.buf, one.n * 2), 0);
    free(one.buf);
    free(many.buf);
    rf_inventory_free(&inv);
}

/* vLLM's GPT-NeoX load: view (nh, 3, d, K), transpose to (3, nh, d, K): [q; k; v] of the
 * rank's heads. TP 1: q = src rows 0,1 6,7 12,13 18,19; k = 2,3 8,9 ...; v = 4,5 10,11 ... */
START_TEST(test_neox_qkv_heads_tp1)
{
    rf_inventory_t inv;
    build(NEOX, &inv);
    rf_rollout_coords_t rc = tp(1, 0);
    const char *w = "gpt_neox.layers.0.attention.query_key_value.weight";
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, w));
    ck_assert_int_eq(d.shape.shape[0], 24);
    ck_assert_uint_eq(load_all(&inv, &rc, w, 0, &d, 1), 24 * 8);
    const uint16_t want[] = {
        R8(1),   R8(9),   R8(49),  R8(57),  R8(97),  R8(105), R8(145), R8(153), /* q */
        R8(17),  R8(25),  R8(65),  R8(73),  R8(113), R8(121), R8(161), R8(169), /* k */
        R8(33),  R8(41),  R8(81),  R8(89),  R8(129), R8(137), R8(177), R8(185), /* v */
    };
    expect(&d, want, NELEM(want), "query_key_value tp1");
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

/* TP 2, rank 1 holds heads 2 and 3 (src rows 12..23), loaded in pieces that cut q / k / v
 * blocks apart: [q2 q3; k2 k3; v2 v3] = rows 12,13 18,19; 14,15 20,21; 16,17 22,23. */
START_TEST(test_neox_qkv_heads_tp2_pieces)
{
    rf_inventory_t inv;
    build(NEOX, &inv);
    rf_rollout_coords_t rc = tp(2, 1);
    const char *w = "gpt_neox.layers.0.attention.query_key_value.weight";
    int t = tidx(&inv, w);
    dbuf_t d = dst_for(&inv, &rc, t);
    ck_assert_int_eq(d.shape.shape[0], 12);
    const uint64_t cuts[] = {0, 5, 13, 14, 15, 23, 24};
    uint64_t total = 0;
    for (size_t i = 0; i + 1 < NELEM(cuts); i++)
        total += load(&inv, &rc, w, 0, &d, 1, cuts[i], cuts[i + 1]);
    ck_assert_uint_eq(total, 12 * 8);
    const uint16_t want[] = {R8(97),  R8(105), R8(145), R8(153), R8(113), R8(121),
                             R8(161), R8(169), R8(129), R8(137), R8(177), R8(185)};
    expect(&d, want, NELEM(want), "query_key_value tp2 rank 1");
    /* a piece of whole blocks of both heads: one strided copy per shard; with a partial block
     * at each end at most five */
    uint16_t *src = src_for(&inv, t, 1);
    rf_accel_rows_t runs[RF_LOAD_MAX_RUNS];
    ck_assert_int_eq(rf_load_piece_runs(&inv, &rc, t, 0, &d.dst, src + 12 * 8, RF_DTYPE_BF16, 12,
                                        24, runs),
                     3);
    ck_assert_int_eq(runs[0].rows, 2);
    ck_assert_int_eq(runs[0].src_pitch, 3 * 2 * 8);
    ck_assert_int_eq(rf_load_piece_runs(&inv, &rc, t, 0, &d.dst, src + 13 * 8, RF_DTYPE_BF16, 13,
                                        23, runs),
                     5);
    ck_assert_int_eq(rf_load_piece_runs(&inv, &rc, t, 0, &d.dst, src, RF_DTYPE_BF16, 0, 12, runs),
                     0);
    free(src);
    free(d.buf);
    /* the bias the same way: rank 0 = elements 0,1 6,7 | 2,3 8,9 | 4,5 10,11 */
    const char *b = "gpt_neox.layers.0.attention.query_key_value.bias";
    rc = tp(2, 0);
    d = dst_for(&inv, &rc, tidx(&inv, b));
    ck_assert_uint_eq(load(&inv, &rc, b, 0, &d, 1, 0, 7) + load(&inv, &rc, b, 0, &d, 1, 7, 24),
                      12);
    const uint16_t wb[] = {1, 2, 7, 8, 3, 4, 9, 10, 5, 6, 11, 12};
    expect(&d, wb, NELEM(wb), "query_key_value bias tp2 rank 0");
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

/* ColumnParallelLinear dense_h_to_4h (8, 8) + bias at TP 2; LayerNorm weight and bias are
 * two replicated slots; embed_out is vocab parallel */
START_TEST(test_neox_column_and_layernorm)
{
    rf_inventory_t inv;
    build(NEOX, &inv);
    rf_rollout_coords_t rc = tp(2, 1);
    const char *w = "gpt_neox.layers.0.mlp.dense_h_to_4h.weight";
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, w));
    ck_assert_uint_eq(load(&inv, &rc, w, 0, &d, 1, 0, 3) + load(&inv, &rc, w, 0, &d, 1, 3, 8),
                      32);
    const uint16_t want[] = {R8(33), R8(41), R8(49), R8(57)};
    expect(&d, want, NELEM(want), "dense_h_to_4h tp2 rank 1");
    free(d.buf);
    const char *bias = "gpt_neox.layers.0.mlp.dense_h_to_4h.bias";
    d = dst_for(&inv, &rc, tidx(&inv, bias));
    load_all(&inv, &rc, bias, 0, &d, 1);
    const uint16_t wb[] = {5, 6, 7, 8};
    expect(&d, wb, NELEM(wb), "dense_h_to_4h bias tp2 rank 1");
    free(d.buf);
    /* dense_4h_to_h is row parallel: its bias a full copy */
    const char *rb = "gpt_neox.layers.0.mlp.dense_4h_to_h.bias";
    d = dst_for(&inv, &rc, tidx(&inv, rb));
    load_all(&inv, &rc, rb, 0, &d, 1);
    const uint16_t wr[] = {1, 2, 3, 4, 5, 6, 7, 8};
    expect(&d, wr, NELEM(wr), "dense_4h_to_h bias");
    free(d.buf);
    int ln = tidx(&inv, "gpt_neox.layers.0.input_layernorm.bias");
    rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
    int n = 0;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_module_slots(&inv, inv.tensors[ln].module, &rc, s, &n, &err), RF_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_str_eq(s[inv.tensors[ln].slot].name, "bias");
    ck_assert_int_eq(s[inv.tensors[ln].slot].shape[0], 8);
    d = dst_for(&inv, &rc, ln);
    load_all(&inv, &rc, "gpt_neox.layers.0.input_layernorm.bias", 0, &d, 1);
    expect(&d, wr, NELEM(wr), "input_layernorm bias");
    free(d.buf);
    int head = tidx(&inv, "embed_out.weight");
    ck_assert_int_eq(inv.modules[inv.tensors[head].module].kind, RF_MOD_VOCAB);
    rf_inventory_free(&inv);
}
END_TEST

/* OPT with word_embed_proj_dim 4 != H 8: the vocab slots are Wd wide, project_in (8, 4) and
 * project_out (4, 8) replicated; learned positions have max_position_embeddings + 2 rows */
START_TEST(test_opt_embed_width_and_positions)
{
    rf_inventory_t inv;
    build(OPT_PROJ, &inv);
    rf_rollout_coords_t rc = tp(2, 1);
    const char *e = "model.decoder.embed_tokens.weight";
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, e));
    ck_assert_int_eq(d.shape.shape[0], 32); /* Vp 64 / 2 */
    ck_assert_int_eq(d.shape.shape[1], 4);
    free(d.buf);
    const char *pi = "model.decoder.project_in.weight";
    d = dst_for(&inv, &rc, tidx(&inv, pi));
    ck_assert_int_eq(d.shape.shape[0], 8);
    ck_assert_int_eq(d.shape.shape[1], 4);
    ck_assert_uint_eq(load_all(&inv, &rc, pi, 0, &d, 1), 32);
    free(d.buf);
    const char *pos = "model.decoder.embed_positions.weight";
    d = dst_for(&inv, &rc, tidx(&inv, pos));
    ck_assert_int_eq(d.shape.shape[0], 8);
    ck_assert_uint_eq(load_all(&inv, &rc, pos, 0, &d, 1), 64);
    free(d.buf);
    /* fc1 is column parallel: rank 1 rows 4..7 */
    const char *f = "model.decoder.layers.0.fc1.weight";
    d = dst_for(&inv, &rc, tidx(&inv, f));
    load_all(&inv, &rc, f, 0, &d, 1);
    const uint16_t want[] = {R8(33), R8(41), R8(49), R8(57)};
    expect(&d, want, NELEM(want), "fc1 tp2 rank 1");
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

START_TEST(test_pieces)
{
    const uint64_t cuts[] = {0, 3, 5, 8};
    /* q (8 rows) at TP 2 rank 1 takes rows 4..7: [0,3) empty, [3,5) row 4, [5,8) rows 5..7 */
    rf_rollout_coords_t rc = tp(2, 1);
    pieces_equal(LLAMA, &rc, Q, 0, 101, cuts, 4, (const uint64_t[]){0, 8, 24});
    /* rank 0 takes rows 0..3: [0,3) 3 rows, [3,5) row 3, [5,8) empty */
    rc = tp(2, 0);
    pieces_equal(LLAMA, &rc, Q, 0, 101, cuts, 4, (const uint64_t[]){24, 8, 0});
    /* gate at TP 4 rank 2 (rows 4, 5): [3,5) row 4, [5,8) row 5 */
    rc = tp(4, 2);
    pieces_equal(LLAMA, &rc, GATE, 0, 101, cuts, 4, (const uint64_t[]){0, 8, 8});
    /* row parallel: every piece intersects (2 columns per row at TP 4) */
    rc = tp(4, 3);
    pieces_equal(LLAMA, &rc, O, 0, 101, cuts, 4, (const uint64_t[]){6, 4, 6});
    /* MoE w2 (8, 4) at EP off tp 2: 2 columns per row */
    rc = tp(2, 1);
    pieces_equal(MOE, &rc, "model.layers.0.mlp.experts.2.down_proj.weight", 2, 2801, cuts, 4,
                 (const uint64_t[]){6, 4, 6});
    /* vocab at TP 2 rank 1: every piece is outside the rank's (empty) slice */
    const uint64_t vc[] = {0, 3, 5, 10};
    pieces_equal(LLAMA, &rc, "model.embed_tokens.weight", 0, 1, vc, 4,
                 (const uint64_t[]){0, 0, 0});
    /* k at TP 4 rank 3 (kv head 1: rows 2, 3), pieces [0,2) empty, [2,3), [3,4) */
    rc = tp(4, 3);
    const uint64_t kc[] = {0, 2, 3, 4};
    pieces_equal(LLAMA, &rc, K, 0, 301, kc, 4, (const uint64_t[]){0, 8, 8});
}
END_TEST

START_TEST(test_empty_piece_writes_nothing)
{
    rf_inventory_t inv;
    build(LLAMA, &inv);
    rf_rollout_coords_t rc = tp(2, 1);
    dbuf_t d = dst_for(&inv, &rc, tidx(&inv, Q));
    /* rows [0, 4) of q belong to rank 0 */
    ck_assert_uint_eq(load(&inv, &rc, Q, 0, &d, 101, 0, 4), 0);
    for (size_t i = 0; i < d.n; i++)
        ck_assert_uint_eq(d.buf[i], SENT);
    /* an empty range */
    ck_assert_uint_eq(load(&inv, &rc, Q, 0, &d, 101, 5, 5), 0);
    for (size_t i = 0; i < d.n; i++)
        ck_assert_uint_eq(d.buf[i], SENT);
    free(d.buf);
    rf_inventory_free(&inv);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("loader");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_qkv_tp1);
    tcase_add_test(tc, test_qkv_tp2);
    tcase_add_test(tc, test_qkv_tp4_kv_replicated);
    tcase_add_test(tc, test_qkv_bias_qwen2);
    tcase_add_test(tc, test_gate_up_merged);
    tcase_add_test(tc, test_merged_and_row_bias);
    tcase_add_test(tc, test_row_parallel);
    tcase_add_test(tc, test_vocab_tp2);
    tcase_add_test(tc, test_vocab_v70_tp2);
    tcase_add_test(tc, test_replicated_norms);
    tcase_add_test(tc, test_moe_ep_off);
    tcase_add_test(tc, test_moe_ep_on);
    tcase_add_test(tc, test_neox_qkv_heads_tp1);
    tcase_add_test(tc, test_neox_qkv_heads_tp2_pieces);
    tcase_add_test(tc, test_neox_column_and_layernorm);
    tcase_add_test(tc, test_opt_embed_width_and_positions);
    tcase_add_test(tc, test_pieces);
    tcase_add_test(tc, test_empty_piece_writes_nothing);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
