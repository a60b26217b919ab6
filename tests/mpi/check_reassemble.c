/* MPI test: reassembly of checkpoint tensors from one engine's rollout slots (DESIGN.md
 * section 12, --reference). The world communicator is the engine (tp x dp ranks, rank
 * l = dp_rank tp + tp_rank). Each rank fills its model-layout slots from the reference locator
 * and the generator; every reassembled tensor must equal the generator's full tensor, and
 * corrupted replicas or padding must fail on every rank, naming the tensor. Run on 2 and 4
 * ranks with CK_FORK=no. */
#include <check.h>
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
    ck_assert_msg(rf_model_config_parse(json, strlen(json), "test.json", &cfg, &err) == RF_OK,
                  "%s", err.msg);
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
    ck_assert_int_eq(rf_gen_fill(tt, en->step, 0, rows, 0, tt->numel / rows, want,
                                 tt->nbytes / rows),
                     RF_OK);
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
    rf_status_t st = rf_reassemble(&en.inv, &en.rc, MPI_COMM_WORLD, slot_bytes, tensor_done, &en,
                                   &err);
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
    rf_status_t st = rf_reassemble(&en.inv, &en.rc, MPI_COMM_WORLD, slot_bytes, tensor_done, &en,
                                   &err);
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
    ck_assert_int_eq(rf_reassemble(&en.inv, &rc, MPI_COMM_WORLD, slot_bytes, tensor_done, &en,
                                   &err),
                     RF_ERR_TOPOLOGY);
    engine_free(&en);
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
