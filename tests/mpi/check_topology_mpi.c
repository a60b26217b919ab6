/*
 * MPI test (4 ranks): rf_model_load_topology() and rf_topology_place(). A good file loads on every
 * rank with one hash; an unreadable file and a wrong world size give every rank the same
 * error (no hang); the compiled-in default loads from the source root; placement on one
 * CPU node gives each role local indices 0, 1 and the "host" device. Check with CK_FORK=no.
 */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/model.h"
#include "refit/topology.h"

#define TOPO_DIR REFIT_JOBS_DIR "/topologies"

static int g_rank, g_size;

/* every rank holds the same string */
static void assert_same_everywhere(const char *s)
{
    char root[RF_ERR_MSG_MAX];
    snprintf(root, sizeof(root), "%s", s);
    MPI_Bcast(root, sizeof(root), MPI_CHAR, 0, MPI_COMM_WORLD);
    ck_assert_str_eq(root, s);
}

START_TEST(test_load_ok)
{
    rf_topology_t t;
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(g_size, 4);
    rf_status_t st =
        rf_model_load_topology(TOPO_DIR "/llama-tiny-tp2-to-2xtp1.yaml", MPI_COMM_WORLD, &t, &cfg, &err);
    ck_assert_msg(st == RF_OK, "rank %d: %s", g_rank, err.msg);
    ck_assert_str_eq(t.name, "llama-tiny-tp2-to-2xtp1");
    ck_assert_int_eq(cfg.num_hidden_layers, 3);
    ck_assert_int_eq(cfg.num_attention_heads, 6);
    ck_assert_int_eq(t.model_layers, 3);
    unsigned long long h = rf_topology_hash(&t), hmax;
    MPI_Allreduce(&h, &hmax, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_uint_eq(h, hmax);

    rf_placement_t pl;
    rf_err_clear(&err);
    st = rf_topology_place(&t, MPI_COMM_WORLD, &pl, &err);
    ck_assert_msg(st == RF_OK, "rank %d: %s", g_rank, err.msg);
    ck_assert_int_eq(pl.rank, g_rank);
    ck_assert_int_eq(pl.info.role, g_rank < 2 ? RF_ROLE_TRAINER : RF_ROLE_ROLLOUT);
    ck_assert_int_eq(pl.node, 0);
    ck_assert_int_eq(pl.nnodes, 1);
    ck_assert_int_eq(pl.local_index, g_rank % 2);
    ck_assert_int_eq(pl.device, -1);
    ck_assert_str_eq(pl.device_id, "host");
    ck_assert_int_eq(pl.pair_rank, -1);
    if (g_rank >= 2)
        ck_assert_int_eq(pl.info.engine, g_rank - 2);
    rf_model_config_free(&cfg);
}
END_TEST

START_TEST(test_load_default)
{
    rf_topology_t t;
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    rf_status_t st = rf_model_load_topology(NULL, MPI_COMM_WORLD, &t, &cfg, &err);
    ck_assert_msg(st == RF_OK, "rank %d: %s", g_rank, err.msg);
    ck_assert_str_eq(t.name, "default");
    ck_assert_int_eq(cfg.num_hidden_layers, 28);
    ck_assert_int_eq(t.pp_layers[1], 14);
    rf_model_config_free(&cfg);
}
END_TEST

START_TEST(test_load_missing_file)
{
    rf_topology_t t;
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    rf_status_t st =
        rf_model_load_topology(TOPO_DIR "/no-such-file.yaml", MPI_COMM_WORLD, &t, &cfg, &err);
    ck_assert_int_eq(st, RF_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "no-such-file.yaml: cannot open topology file"));
    assert_same_everywhere(err.msg);
}
END_TEST

START_TEST(test_load_wrong_world)
{
    rf_topology_t t;
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    rf_status_t st =
        rf_model_load_topology(TOPO_DIR "/llama-tiny-tp1-to-tp1.yaml", MPI_COMM_WORLD, &t, &cfg, &err);
    ck_assert_int_eq(st, RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(strstr(err.msg, "world size 4 != trainer 1 + rollout 1 ranks (mpirun "
                                          "-np 2)"));
    ck_assert_ptr_nonnull(strstr(err.msg, "llama-tiny-tp1-to-tp1.yaml"));
}
END_TEST

START_TEST(test_place_colocated_cpu)
{
    /* colocated over mpi on CPU: T == R == 2; trainer i pairs with rollout i on the node */
    rf_topology_t t;
    rf_err_t err;
    rf_placement_t pl;
    const char *y = "model: { config: ../models/llama-tiny.config.json }\n"
                    "trainer: { tp: 2 }\nrollout: { tp: 2 }\ncolocated: true\n";
    rf_err_clear(&err);
    ck_assert_int_eq(rf_topology_parse(y, strlen(y), TOPO_DIR "/x.yaml", &t, &err), RF_OK);
    ck_assert_int_eq(rf_topology_place(&t, MPI_COMM_WORLD, &pl, &err), RF_OK);
    ck_assert_int_eq(pl.pair_rank, (g_rank + 2) % 4);
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    Suite *s = suite_create("topology_mpi");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_load_ok);
    tcase_add_test(tc, test_load_default);
    tcase_add_test(tc, test_load_missing_file);
    tcase_add_test(tc, test_load_wrong_world);
    tcase_add_test(tc, test_place_colocated_cpu);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, g_rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed)
        fprintf(stderr, "rank %d: %d failed\n", g_rank, failed);
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
