/* MPI test: reassembly of checkpoint tensors from one engine's rollout slots (DESIGN.md
 * section 12, --reference). The world communicator is the engine (tp x dp ranks, rank
 * l = dp_rank tp + tp_rank). Each rank fills its model-layout slots from the reference locator
 * and the generator; every reassembled tensor must equal the generator's full tensor, and
 * corrupted replicas or padding must fail on every rank, naming the tensor. Run on 2 and 4
 * ranks with CK_FORK=no. */
#include <check.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/generator.h"
#include "refit/model.h"
#include "refit/verify.h"

static const char *LLAMA_JSON =
    "{\"model_type\": \"llama\", \"torch_dtype\": \"bfloat16\", \"hidden_size\": 8,"
    " \"num_hidden_layers\": 2, \"vocab_size\": 10, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"head_dim\": 2, \"intermediate_size\": 8,"
    " \"attention_bias\": true, \"mlp_bias\": true, \"tie_word_embeddings\": false}";
static const char *TIED_JSON =
    "{\"model_type\": \"qwen3\", \"torch_dtype\": \"bfloat16\", \"hidden_size\": 8,"
    " \"num_hidden_layers\": 1, \"vocab_size\": 70, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 1, \"head_dim\": 2, \"intermediate_size\": 8,"
    " \"tie_word_embeddings\": true}";
static const char *MOE_JSON =
    "{\"model_type\": \"qwen3_moe\", \"torch_dtype\": \"bfloat16\", \"hidden_size\": 8,"
    " \"num_hidden_layers\": 2, \"vocab_size\": 10, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"head_dim\": 2, \"intermediate_size\": 8,"
    " \"num_experts\": 5, \"moe_intermediate_size\": 4, \"mlp_only_layers\": [1],"
    " \"tie_word_embeddings\": false}";

typedef struct engine {
    rf_inventory_t inv;
    rf_rollout_coords_t rc;
    uint64_t step;
    void **slots; /* nmodules x RF_MODULE_MAX_SLOTS */
    size_t *nbytes;
    int ndone;
    int nbad;
    char first_bad[RF_NAME_MAX];
} engine_t;

static void engine_init(engine_t *en, const char *json, int tp, int dp, int ep,
                        rf_expert_placement_t pl, uint64_t step)
{
    int rank;
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    memset(en, 0, sizeof(*en));
    ck_assert_msg(rf_model_config_parse(json, strlen(json), "test.json", &cfg, &err) == RF_OK, "%s",
                  err.msg);
    ck_assert_msg(rf_inventory_build(&cfg, RF_QUANT_NONE, 0, &en->inv, &err) == RF_OK, "%s",
                  err.msg);
    rf_model_config_free(&cfg);
    en->rc = (rf_rollout_coords_t){tp, rank % tp, dp, rank / tp, ep, ep > 1 ? rank : 0, pl};
    en->step = step;
    en->slots = calloc((size_t)en->inv.nmodules * RF_MODULE_MAX_SLOTS, sizeof(void *));
    en->nbytes = calloc((size_t)en->inv.nmodules * RF_MODULE_MAX_SLOTS, sizeof(size_t));
    for (int m = 0; m < en->inv.nmodules; m++) {
        rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
        int n;
        ck_assert_msg(rf_module_slots(&en->inv, m, &en->rc, s, &n, &err) == RF_OK, "%s", err.msg);
        for (int k = 0; k < n; k++) {
            rf_ref_locator_t *l;
            ck_assert_msg(rf_ref_locator_create(&en->inv, m, k, &en->rc, &l, &err) == RF_OK, "%s",
                          err.msg);
            uint64_t numel = rf_ref_locator_numel(l);
            uint16_t *b = calloc(numel ? numel : 1, 2);
            for (uint64_t e = 0; e < numel; e++) {
                rf_ref_elem_t x;
                rf_ref_locator_at(l, e, &x);
                if (x.kind == RF_REF_TENSOR)
                    b[e] = (uint16_t)rf_gen_value_bits(
                        rf_gen_name_hash(en->inv.tensors[x.tensor].name), x.index, step,
                        RF_DTYPE_BF16);
            }
            en->slots[m * RF_MODULE_MAX_SLOTS + k] = b;
            en->nbytes[m * RF_MODULE_MAX_SLOTS + k] = numel * 2;
            rf_ref_locator_destroy(l);
        }
    }
}

static void engine_free(engine_t *en)
{
    for (int i = 0; i < en->inv.nmodules * RF_MODULE_MAX_SLOTS; i++)
        free(en->slots[i]);
    free(en->slots);
    free(en->nbytes);
    rf_inventory_free(&en->inv);
}

static const void *slot_bytes(void *ctx, int m, int s)
{
    engine_t *en = ctx;
    return en->slots[m * RF_MODULE_MAX_SLOTS + s];
}

static void tensor_done(void *ctx, int t, const void *bytes, size_t nbytes)
{
    engine_t *en = ctx;
    const rf_tensor_t *tt = &en->inv.tensors[t];
    ck_assert_int_eq(t, en->ndone); /* inventory order */
    en->ndone++;
    ck_assert_uint_eq(nbytes, tt->nbytes);
    uint64_t rows = (uint64_t)tt->shape[0];
    void *want = malloc(tt->nbytes);
    ck_assert_int_eq(
        rf_gen_fill(tt, en->step, 0, rows, 0, tt->numel / rows, want, tt->nbytes / rows), RF_OK);
    if (memcmp(want, bytes, nbytes) != 0 && en->nbad++ == 0)
        snprintf(en->first_bad, sizeof(en->first_bad), "%s", tt->name);
    free(want);
}

static void run_ok(const char *json, int tp, int dp, int ep, rf_expert_placement_t pl)
{
    int rank, size;
    engine_t en;
    rf_err_t err;
    rf_err_clear(&err);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ck_assert_int_eq(size, tp * dp);
    engine_init(&en, json, tp, dp, ep, pl, 7);
    rf_status_t st =
        rf_reassemble(&en.inv, &en.rc, MPI_COMM_WORLD, slot_bytes, tensor_done, &en, &err);
    ck_assert_msg(st == RF_OK, "tp %d dp %d ep %d: %s", tp, dp, ep, err.msg);
    if (rank == 0) {
        ck_assert_int_eq(en.ndone, en.inv.ntensors);
        ck_assert_msg(en.nbad == 0, "tp %d dp %d ep %d: %d tensors differ, first %s", tp, dp, ep,
                      en.nbad, en.first_bad);
    } else {
        ck_assert_int_eq(en.ndone, 0); /* tensor_done is called on engine rank 0 only */
    }
    engine_free(&en);
}

static int world_size(void)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return size;
}

START_TEST(test_dense)
{
    int n = world_size();
    run_ok(LLAMA_JSON, n, 1, 1, RF_PLACE_LINEAR); /* n 4: k/v heads replicated */
    run_ok(LLAMA_JSON, 1, n, 1, RF_PLACE_LINEAR); /* dp replicas */
    run_ok(LLAMA_JSON, 2, n / 2, 1, RF_PLACE_LINEAR);
    run_ok(TIED_JSON, n, 1, 1, RF_PLACE_LINEAR); /* nkv 1: replicated on every rank */
}
END_TEST

START_TEST(test_moe)
{
    int n = world_size();
    run_ok(MOE_JSON, n, 1, n, RF_PLACE_LINEAR);
    run_ok(MOE_JSON, n, 1, n, RF_PLACE_ROUND_ROBIN);
    run_ok(MOE_JSON, 2, n / 2, n, RF_PLACE_ROUND_ROBIN);
    run_ok(MOE_JSON, n, 1, 1, RF_PLACE_LINEAR); /* EP off: I sliced over tp dp */
    run_ok(MOE_JSON, 1, n, 1, RF_PLACE_LINEAR);
}
END_TEST

/* A corruption on the last rank fails every rank, naming the tensor. */
static void run_bad(const char *module, int slot, uint64_t elem, const char *expect)
{
    int rank, size;
    engine_t en;
    rf_err_t err;
    rf_err_clear(&err);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    engine_init(&en, LLAMA_JSON, size, 1, 1, RF_PLACE_LINEAR, 3);
    int m = -1;
    for (int i = 0; i < en.inv.nmodules; i++)
        if (strcmp(en.inv.modules[i].name, module) == 0)
            m = i;
    ck_assert_int_ge(m, 0);
    if (rank == size - 1)
        ((uint16_t *)en.slots[m * RF_MODULE_MAX_SLOTS + slot])[elem] ^= 0x0100;
    rf_status_t st =
        rf_reassemble(&en.inv, &en.rc, MPI_COMM_WORLD, slot_bytes, tensor_done, &en, &err);
    ck_assert_int_eq(st, RF_ERR_VERIFY);
    ck_assert_msg(strstr(err.msg, expect) != NULL, "rank %d: %s", rank, err.msg);
    engine_free(&en);
}

START_TEST(test_corrupt_replica_and_padding)
{
    run_bad("model.layers.1.post_attention_layernorm", 0, 3, "post_attention_layernorm.weight");
    run_bad("model.layers.0.self_attn.o_proj", 1, 2, "o_proj.bias: replicas differ at element 2");
    /* the last rank's vocab rows are all padding (V 10, Vp 64) */
    run_bad("lm_head", 0, 5, "lm_head.weight: engine rank");
    run_bad("model.embed_tokens", 0, 8 * 8 - 1, "non-zero vocab padding");
}
END_TEST

START_TEST(test_bad_communicator)
{
    engine_t en;
    rf_err_t err;
    rf_err_clear(&err);
    engine_init(&en, LLAMA_JSON, world_size(), 1, 1, RF_PLACE_LINEAR, 1);
    rf_rollout_coords_t rc = en.rc;
    rc.tp_rank = (rc.tp_rank + 1) % rc.tp; /* rank order does not match */
    ck_assert_int_eq(
        rf_reassemble(&en.inv, &rc, MPI_COMM_WORLD, slot_bytes, tensor_done, &en, &err),
        RF_ERR_TOPOLOGY);
    engine_free(&en);
}
END_TEST

/* ---- quantized models (DESIGN.md 7 and 12) -------------------------------------------- */

/* fp8-block: d 128, nkv 2, I 512: every shard on 2 and 4 ranks is whole 128-row blocks. */
static const char *FP8_JSON =
    "{\"model_type\": \"llama\", \"torch_dtype\": \"bfloat16\", \"hidden_size\": 256,"
    " \"num_hidden_layers\": 1, \"vocab_size\": 128, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"head_dim\": 128, \"intermediate_size\": 512,"
    " \"tie_word_embeddings\": false}";
/* wna16 G 16: every K per rank (64 / 4 = 16) a multiple of 16 and 8; layer 0 dense. */
static const char *WNA16_JSON =
    "{\"model_type\": \"qwen3_moe\", \"torch_dtype\": \"bfloat16\", \"hidden_size\": 64,"
    " \"num_hidden_layers\": 2, \"vocab_size\": 64, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"head_dim\": 16, \"intermediate_size\": 64,"
    " \"num_experts\": 5, \"moe_intermediate_size\": 64, \"num_experts_per_tok\": 2,"
    " \"mlp_only_layers\": [0], \"tie_word_embeddings\": false}";

typedef struct qengine {
    rf_inventory_t inv;
    rf_rollout_coords_t rc;
    unsigned char **ck; /* synthetic checkpoint, every tensor */
    void **slots;       /* nmodules x RF_MODULE_MAX_SLOTS */
    int scale_bf16;     /* the "file" stores FP8 scales in bf16 */
    int shape_i32;      /* the "file" stores weight_shape in int32 */
    int ndone, nbad, nscale, nshape;
    char first_bad[RF_NAME_MAX];
} qengine_t;

static uint64_t xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Deterministic per tensor (the same on every rank): fp8 bytes without NaN, bf16-exact
 * positive f32 scales, bf16 group scales, int32 words, weight_shape [N, K]. */
static unsigned char *synth_tensor(const rf_inventory_t *inv, int i)
{
    const rf_tensor_t *tt = &inv->tensors[i];
    unsigned char *b = calloc(tt->nbytes + 1, 1);
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)(i + 1) * 0x100000001b3ull;
    for (uint64_t k = 0; k < tt->numel; k++) {
        uint64_t r = xs(&s);
        if (tt->param == RF_PARAM_WEIGHT_SHAPE) {
            const rf_tensor_t *p = &inv->tensors[i - 2]; /* <P>.weight_packed sorts 2 before */
            int64_t v = k == 0 ? p->shape[0] : p->shape[1] * 8;
            memcpy(b + k * 8, &v, 8);
        } else if (tt->dtype == RF_DTYPE_F8_E4M3) {
            b[k] = (uint8_t)((r & 0x7f) == 0x7f ? r ^ 1 : r);
        } else if (tt->dtype == RF_DTYPE_F32) {
            float f = rf_bf16_to_f32((uint16_t)(0x3c00 + (r & 0x3ff)));
            memcpy(b + k * 4, &f, 4);
        } else {
            size_t es = rf_dtype_size(tt->dtype);
            for (size_t j = 0; j < es; j++)
                b[k * es + j] = (uint8_t)(r >> (8 * j));
            if (es == 2 && (b[k * 2 + 1] & 0x7f) == 0x7f)
                b[k * 2 + 1] ^= 1;
        }
    }
    return b;
}

static void qengine_init(qengine_t *en, const char *json, rf_quant_t q, int64_t G, int tp, int dp,
                         int ep, rf_expert_placement_t pl)
{
    int rank;
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    memset(en, 0, sizeof(*en));
    ck_assert_msg(rf_model_config_parse(json, strlen(json), "test.json", &cfg, &err) == RF_OK, "%s",
                  err.msg);
    ck_assert_msg(rf_inventory_build(&cfg, q, G, &en->inv, &err) == RF_OK, "%s", err.msg);
    rf_model_config_free(&cfg);
    en->rc = (rf_rollout_coords_t){tp, rank % tp, dp, rank / tp, ep, ep > 1 ? rank : 0, pl};
    en->ck = calloc((size_t)en->inv.ntensors, sizeof(*en->ck));
    for (int i = 0; i < en->inv.ntensors; i++)
        en->ck[i] = synth_tensor(&en->inv, i);
    en->slots = calloc((size_t)en->inv.nmodules * RF_MODULE_MAX_SLOTS, sizeof(void *));
    for (int m = 0; m < en->inv.nmodules; m++) {
        rf_slot_shape_t s[RF_MODULE_MAX_SLOTS];
        int n;
        ck_assert_msg(rf_module_slots(&en->inv, m, &en->rc, s, &n, &err) == RF_OK, "%s", err.msg);
        for (int k = 0; k < n; k++) {
            rf_ref_locator_t *l;
            ck_assert_msg(rf_ref_locator_create(&en->inv, m, k, &en->rc, &l, &err) == RF_OK, "%s",
                          err.msg);
            size_t es = rf_dtype_size(rf_ref_locator_shape(l)->dtype);
            uint64_t numel = rf_ref_locator_numel(l);
            unsigned char *b = calloc(numel * es + 1, 1);
            for (uint64_t e = 0; e < numel; e++) {
                rf_ref_elem_t x;
                rf_ref_locator_at(l, e, &x);
                if (x.kind == RF_REF_TENSOR)
                    memcpy(b + e * es, en->ck[x.tensor] + x.index * es, es);
            }
            en->slots[m * RF_MODULE_MAX_SLOTS + k] = b;
            rf_ref_locator_destroy(l);
        }
    }
}

static void qengine_free(qengine_t *en)
{
    for (int i = 0; i < en->inv.nmodules * RF_MODULE_MAX_SLOTS; i++)
        free(en->slots[i]);
    for (int i = 0; i < en->inv.ntensors; i++)
        free(en->ck[i]);
    free(en->slots);
    free(en->ck);
    rf_inventory_free(&en->inv);
}

static const void *q_slot_bytes(void *ctx, int m, int s)
{
    qengine_t *en = ctx;
    return en->slots[m * RF_MODULE_MAX_SLOTS + s];
}

static rf_dtype_t q_target(void *ctx, int t)
{
    qengine_t *en = ctx;
    const rf_tensor_t *tt = &en->inv.tensors[t];
    if (en->scale_bf16 && tt->param == RF_PARAM_WEIGHT_SCALE_INV)
        return RF_DTYPE_BF16;
    if (en->shape_i32 && tt->param == RF_PARAM_WEIGHT_SHAPE)
        return RF_DTYPE_I32;
    return RF_DTYPE_INVALID;
}

/* The bytes the "file" holds: the checkpoint tensor in its file dtype. */
static void q_done(void *ctx, int t, const void *bytes, size_t nbytes)
{
    qengine_t *en = ctx;
    const rf_tensor_t *tt = &en->inv.tensors[t];
    ck_assert_int_eq(t, en->ndone);
    en->ndone++;
    size_t want_n = tt->nbytes;
    unsigned char *want = malloc(tt->nbytes + 1);
    memcpy(want, en->ck[t], tt->nbytes);
    if (en->scale_bf16 && tt->param == RF_PARAM_WEIGHT_SCALE_INV) {
        want_n = tt->numel * 2;
        for (uint64_t k = 0; k < tt->numel; k++) {
            float f;
            memcpy(&f, en->ck[t] + k * 4, 4);
            uint16_t h = rf_f32_to_bf16(f);
            memcpy(want + k * 2, &h, 2);
        }
    }
    if (en->shape_i32 && tt->param == RF_PARAM_WEIGHT_SHAPE) {
        int32_t v[2] = {(int32_t)tt->shape[0], 0};
        int64_t w[2];
        memcpy(w, en->ck[t], 16);
        v[0] = (int32_t)w[0];
        v[1] = (int32_t)w[1];
        want_n = 8;
        memcpy(want, v, 8);
    }
    if (tt->param == RF_PARAM_WEIGHT_SCALE_INV)
        en->nscale++;
    if (tt->param == RF_PARAM_WEIGHT_SHAPE) {
        int64_t w[2];
        memcpy(w, en->ck[t], 16);
        ck_assert_int_gt(w[0], 0); /* [N, K] as the synthetic file holds it */
        ck_assert_int_eq(w[1] % 8, 0);
        en->nshape++;
    }
    if ((nbytes != want_n || memcmp(want, bytes, want_n) != 0) && en->nbad++ == 0)
        snprintf(en->first_bad, sizeof(en->first_bad), "%s", tt->name);
    free(want);
}

static void run_q(const char *json, rf_quant_t q, int64_t G, int tp, int dp, int ep,
                  rf_expert_placement_t pl, int scale_bf16, int shape_i32)
{
    int rank;
    qengine_t en;
    rf_err_t err;
    rf_err_clear(&err);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    qengine_init(&en, json, q, G, tp, dp, ep, pl);
    en.scale_bf16 = scale_bf16;
    en.shape_i32 = shape_i32;
    rf_reassemble_opts_t o = {q_target};
    rf_status_t st =
        rf_reassemble_ex(&en.inv, &en.rc, MPI_COMM_WORLD, q_slot_bytes, q_done, &en, &o, &err);
    ck_assert_msg(st == RF_OK, "%s tp %d dp %d ep %d: %s", rf_quant_name(q), tp, dp, ep, err.msg);
    if (rank == 0) {
        ck_assert_int_eq(en.ndone, en.inv.ntensors);
        ck_assert_msg(en.nbad == 0, "%s tp %d dp %d ep %d: %d tensors differ, first %s",
                      rf_quant_name(q), tp, dp, ep, en.nbad, en.first_bad);
        if (q == RF_QUANT_FP8_BLOCK)
            ck_assert_int_eq(en.nscale, 7); /* q k v o gate up down */
        else
            ck_assert_int_eq(en.nshape, 7 + 4 + 5 * 3); /* dense layer 0, attention + 5 experts */
    } else {
        ck_assert_int_eq(en.ndone, 0);
    }
    qengine_free(&en);
}

START_TEST(test_fp8_roundtrip)
{
    int n = world_size();
    run_q(FP8_JSON, RF_QUANT_FP8_BLOCK, 0, n, 1, 1, RF_PLACE_LINEAR, 0, 0);
    run_q(FP8_JSON, RF_QUANT_FP8_BLOCK, 0, n, 1, 1, RF_PLACE_LINEAR, 1, 0); /* bf16 scales */
    run_q(FP8_JSON, RF_QUANT_FP8_BLOCK, 0, 2, n / 2, 1, RF_PLACE_LINEAR, 1, 0);
    run_q(FP8_JSON, RF_QUANT_FP8_BLOCK, 0, 1, n, 1, RF_PLACE_LINEAR, 1, 0);
}
END_TEST

START_TEST(test_wna16_roundtrip)
{
    int n = world_size();
    run_q(WNA16_JSON, RF_QUANT_WNA16, 16, n, 1, 1, RF_PLACE_LINEAR, 0, 0); /* EP off, I_p 64/n */
    run_q(WNA16_JSON, RF_QUANT_WNA16, 16, n, 1, 1, RF_PLACE_LINEAR, 0, 1); /* int32 shapes */
    run_q(WNA16_JSON, RF_QUANT_WNA16, 16, n, 1, n, RF_PLACE_LINEAR, 0, 0); /* EP on */
    run_q(WNA16_JSON, RF_QUANT_WNA16, 16, 2, n / 2, n, RF_PLACE_ROUND_ROBIN, 0, 1);
    run_q(WNA16_JSON, RF_QUANT_WNA16, 16, 2, n / 2, 1, RF_PLACE_LINEAR, 0, 0);
}
END_TEST

/* A runtime scale that is not a bf16 value cannot go back to a bf16 file: refused on every
 * rank, naming tensor and element; a corrupted replicated fp8 k block scale is caught. */
START_TEST(test_quant_bad)
{
    int rank, n = world_size();
    qengine_t en;
    rf_err_t err;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rf_reassemble_opts_t o = {q_target};
    qengine_init(&en, FP8_JSON, RF_QUANT_FP8_BLOCK, 0, n, 1, 1, RF_PLACE_LINEAR);
    en.scale_bf16 = 1;
    int m = -1;
    for (int i = 0; i < en.inv.nmodules; i++)
        if (strcmp(en.inv.modules[i].name, "model.layers.0.mlp.down_proj") == 0)
            m = i;
    ck_assert_int_ge(m, 0);
    float *sc = en.slots[m * RF_MODULE_MAX_SLOTS + 1]; /* (2, 4 / n) block scales */
    if (rank == 0)
        sc[1] += ldexpf(sc[1], -12); /* no longer a bf16 value */
    rf_err_clear(&err);
    ck_assert_int_eq(
        rf_reassemble_ex(&en.inv, &en.rc, MPI_COMM_WORLD, q_slot_bytes, q_done, &en, &o, &err),
        RF_ERR_VERIFY);
    /* slot (2, 4/n): element 1 is block (0, 1) of the tensor at n 2, block (1, 0) at n 4 */
    char want[96];
    snprintf(want, sizeof(want), "down_proj.weight_scale_inv element %d = ", n == 2 ? 1 : 4);
    ck_assert_msg(strstr(err.msg, want) != NULL &&
                      strstr(err.msg, "not exactly a BF16 value") != NULL,
                  "rank %d: %s", rank, err.msg);
    qengine_free(&en);
    if (n < 4)
        return;
    /* tp 4: k/v blocks replicated on ranks 2 and 3 */
    qengine_init(&en, FP8_JSON, RF_QUANT_FP8_BLOCK, 0, n, 1, 1, RF_PLACE_LINEAR);
    for (int i = 0; i < en.inv.nmodules; i++)
        if (strcmp(en.inv.modules[i].name, "model.layers.0.self_attn.qkv_proj") == 0)
            m = i;
    sc = en.slots[m * RF_MODULE_MAX_SLOTS + 1]; /* (3, 2): q, k, v block rows */
    if (rank == 3)
        sc[2 * 2 + 1] *= 2.0f; /* v block (1, 1) = v_proj.weight_scale_inv[3] */
    rf_err_clear(&err);
    ck_assert_int_eq(
        rf_reassemble_ex(&en.inv, &en.rc, MPI_COMM_WORLD, q_slot_bytes, q_done, &en, &o, &err),
        RF_ERR_VERIFY);
    ck_assert_msg(strstr(err.msg, "v_proj.weight_scale_inv: replicas differ at element 3") != NULL,
                  "rank %d: %s", rank, err.msg);
    qengine_free(&en);
}
END_TEST

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    Suite *s = suite_create("reassemble");
    TCase *tc = tcase_create("reassemble");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dense);
    tcase_add_test(tc, test_moe);
    tcase_add_test(tc, test_corrupt_replica_and_padding);
    tcase_add_test(tc, test_bad_communicator);
    tcase_add_test(tc, test_fp8_roundtrip);
    tcase_add_test(tc, test_wna16_roundtrip);
    tcase_add_test(tc, test_quant_bad);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* fork breaks MPI */
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
