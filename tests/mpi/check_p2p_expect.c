/*
 * MPI test (4 ranks): the gate's p2p expectation agreed from each rank's own part of the
 * schedule (rf_p2p_schedule_build_rank + rf_p2p_expect_agree, issue 19). llama-tiny, trainer
 * TP 2 -> 2 engines of TP 1, p2p: every trainer sends to both receivers. Agreed parts give rank
 * 0 exactly the expectation the whole world's schedule implies; a rank whose part was built
 * with another chunk size, or from another topology, fails the agreement on rank 0 with
 * RF_ERR_MISMATCH naming the pair (fail-closed: no rank derives the others' pairs any more, so
 * this cross-check is what catches it). Check with CK_FORK=no.
 */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/p2p.h"
#include "refit/topology.h"

static int g_rank, g_size;

typedef struct world {
    rf_topology_t topo;
    rf_model_config_t raw, cfg;
    rf_inventory_t inv;
    rf_manifest_t man;
} world_t;

static void world_load(world_t *w, const char *trainer)
{
    char yaml[512], path[1024];
    rf_err_t err;
    rf_err_clear(&err);
    snprintf(yaml, sizeof(yaml),
             "name: p2p-expect\nmodel: { config: ../models/llama-tiny.config.json }\n"
             "trainer: { %s }\nrollout: { engines: 2, tp: 1 }\ntransfer: { mode: p2p }\n",
             trainer);
    snprintf(path, sizeof(path), "%s/topologies/p2p-expect.yaml", REFIT_JOBS_DIR);
    ck_assert_msg(rf_topology_parse(yaml, strlen(yaml), path, &w->topo, &err) == RF_OK, "%s",
                  err.msg);
    ck_assert_int_eq(rf_model_config_load(w->topo.model_config_path, &w->raw, &err), RF_OK);
    ck_assert_msg(rf_model_check_topology(&w->topo, &w->raw, 4, &w->cfg, &err) == RF_OK, "%s",
                  err.msg);
    ck_assert_int_eq(rf_model_bind_topology(&w->topo, &w->cfg, &err), RF_OK);
    ck_assert_int_eq(
        rf_inventory_build(&w->cfg, w->topo.quantization, w->topo.group_size, &w->inv, &err),
        RF_OK);
    ck_assert_int_eq(rf_manifest_build(&w->inv, &w->topo, NULL, NULL, &w->man, &err), RF_OK);
}

static void world_free(world_t *w)
{
    rf_manifest_free(&w->man);
    rf_inventory_free(&w->inv);
    rf_model_config_free(&w->cfg);
    rf_model_config_free(&w->raw);
}

/* This rank's part built from `trainer` with chunk_bytes, agreed; returns rank 0's status
 * (RF_OK elsewhere) and its message in msg. */
static rf_status_t agree(const char *trainer, uint64_t chunk_bytes, rf_gate_expect_t *ex,
                         char *msg, size_t cap)
{
    world_t w;
    rf_p2p_schedule_t s;
    rf_err_t err;
    rf_err_clear(&err);
    world_load(&w, trainer);
    ck_assert_msg(rf_p2p_schedule_build_rank(&w.topo, &w.inv, &w.man, chunk_bytes, g_rank, &s,
                                             &err) == RF_OK,
                  "rank %d: %s", g_rank, err.msg);
    ck_assert_int_eq(s.rank, g_rank);
    ck_assert_uint_eq(s.nrecv, g_rank < 2 ? 2 : 1); /* trainers: both receivers */
    rf_status_t st = rf_p2p_expect_agree(&s, g_rank, 24, MPI_COMM_WORLD, ex, &err);
    snprintf(msg, cap, "%s", err.msg);
    rf_p2p_schedule_free(&s);
    world_free(&w);
    return st;
}

START_TEST(test_expect_agreed)
{
    rf_gate_expect_t ex, want;
    rf_err_t err;
    char msg[RF_ERR_MSG_MAX];
    rf_err_clear(&err);
    ck_assert_int_eq(g_size, 4);
    ck_assert_int_eq(rf_gate_expect_init(&ex, g_size, &err), RF_OK);
    rf_status_t st = agree("tp: 2", 1 << 14, &ex, msg, sizeof(msg));
    ck_assert_msg(st == RF_OK, "rank %d: %s", g_rank, msg);
    if (g_rank == 0) { /* the whole world's schedule, derived on one rank, says the same */
        world_t w;
        rf_p2p_schedule_t s;
        world_load(&w, "tp: 2");
        ck_assert_int_eq(rf_gate_expect_init(&want, g_size, &err), RF_OK);
        ck_assert_int_eq(rf_p2p_schedule_build(&w.topo, &w.inv, &w.man, 1 << 14, &s, &err),
                         RF_OK);
        for (size_t j = 0; j < s.nrecv; j++)
            for (int k = 0; k < s.recv[j].nsenders; k++) {
                const rf_chunk_stage_range_t *sr = &s.recv[j].plan->stages[k];
                size_t i = (size_t)s.recv[j].senders[k] * (size_t)g_size + (size_t)s.recv[j].rank;
                want.chunks[i] += sr->chunk_count;
                want.bytes[i] += sr->payload_bytes + 24 * (uint64_t)sr->chunk_count;
            }
        uint64_t pairs = 0;
        for (int i = 0; i < g_size * g_size; i++) {
            ck_assert_uint_eq(ex.chunks[i], want.chunks[i]);
            ck_assert_uint_eq(ex.bytes[i], want.bytes[i]);
            pairs += want.chunks[i] > 0;
        }
        ck_assert_uint_eq(pairs, 4); /* 2 trainers x 2 receivers */
        rf_p2p_schedule_free(&s);
        rf_gate_expect_fini(&want);
        world_free(&w);
    }
    rf_gate_expect_fini(&ex);
}
END_TEST

/* rank 3 planned with another chunk size: its pairs' chunks differ from its senders' */
START_TEST(test_expect_chunk_size_differs)
{
    rf_gate_expect_t ex;
    rf_err_t err;
    char msg[RF_ERR_MSG_MAX];
    rf_err_clear(&err);
    ck_assert_int_eq(rf_gate_expect_init(&ex, g_size, &err), RF_OK);
    rf_status_t st = agree("tp: 2", g_rank == 3 ? 1 << 12 : 1 << 14, &ex, msg, sizeof(msg));
    if (g_rank == 0) {
        ck_assert_int_eq(st, RF_ERR_MISMATCH);
        ck_assert_msg(strstr(msg, "-> rank 3") != NULL && strstr(msg, "different schedules"),
                      "%s", msg);
    } else {
        ck_assert_int_eq(st, RF_OK);
    }
    rf_gate_expect_fini(&ex);
}
END_TEST

/* rank 2 read another topology (trainer dp 2 instead of tp 2): it expects other senders */
START_TEST(test_expect_topology_differs)
{
    rf_gate_expect_t ex;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_gate_expect_init(&ex, g_size, &err), RF_OK);
    world_t w;
    rf_p2p_schedule_t s;
    world_load(&w, g_rank == 2 ? "tp: 1, dp: 2" : "tp: 2");
    ck_assert_int_eq(rf_p2p_schedule_build_rank(&w.topo, &w.inv, &w.man, 1 << 14, g_rank, &s,
                                                &err),
                     RF_OK);
    rf_status_t st = rf_p2p_expect_agree(&s, g_rank, 24, MPI_COMM_WORLD, &ex, &err);
    if (g_rank == 0) {
        ck_assert_int_eq(st, RF_ERR_MISMATCH);
        ck_assert_msg(strstr(err.msg, "p2p schedule") != NULL, "%s", err.msg);
    } else {
        ck_assert_int_eq(st, RF_OK);
    }
    rf_p2p_schedule_free(&s);
    world_free(&w);
    rf_gate_expect_fini(&ex);
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    Suite *su = suite_create("p2p_expect");
    TCase *tc = tcase_create("mpi");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_expect_agreed);
    tcase_add_test(tc, test_expect_chunk_size_differs);
    tcase_add_test(tc, test_expect_topology_differs);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
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
