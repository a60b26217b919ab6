/* MPI test: no session call waits forever past its join (docs/api.md "Waits"). On the
 * tests/data llama-tiny fixture (argv[1]: its config.json), trainer TP size-1 -> one rollout
 * engine TP 1, under topologies this test writes with the transfer.join_timeout_s each case
 * needs:
 *   the race: a tiny join_timeout_s (0.1 ms .. 8 ms) and every rank calling plan, then update
 *     (begin and finish), at nearly the same moment, 25 times: ranks give up at a join or at a
 *     later collective just as others pass it. Every run must end (the ctest TIMEOUT is the
 *     backstop for a hang), and with the same verdict on every rank (committed everywhere, or
 *     failed everywhere with RF_ERR_PEER / RF_ERR_TIMEOUT);
 *   a rank that leaves right after the plan's join (REFIT_TEST_SESSION_AFTER_JOIN=leave, a
 *     test build's hook) fails every other rank's plan with RF_ERR_PEER naming it, within
 *     milliseconds (well inside join_timeout_s 6 s);
 *   a rank that stalls there (stall:3) fails the others' plan with RF_ERR_TIMEOUT naming the
 *     plan and transfer.join_timeout_s (1 s) after about 1 s, and itself with RF_ERR_PEER when
 *     it comes back;
 *   3 ranks or more (trainer TP >= 2): trainer rank 1 leaving or stalling where the plan sets
 *     up the trainers (REFIT_TEST_SESSION_AT_TRAINER: where the trainers split their stage
 *     communicator with a plain MPI_Comm_split, in which trainer rank 0 waited for good, until
 *     the split moved to rf_session_create) fails trainer rank 0 and the rollout ranks the same
 *     way: RF_ERR_PEER naming rank 1 within milliseconds, RF_ERR_TIMEOUT after about 1 s.
 * CK_FORK=no. */
#include <check.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refit/dtype.h"
#include "refit/refit.h"

static char config_path[4096];
static int rank, size;
static char topo_file[256];

/* Rank 0 writes the topology with join_timeout_s jt (transfer.timeout_s 3 s bounds an update
 * a rank gave up on); every rank then uses topo_file. Collective. */
static void write_topology(double jt)
{
    if (rank == 0) {
        FILE *f = fopen(topo_file, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "name: session-join-test\nmodel:\n  config: %s\ntrainer: { tp: %d }\n"
                   "rollout: { engines: 1, tp: 1 }\n"
                   "transfer: { chunk_bytes: 64KiB, timeout_s: 3, join_timeout_s: %g }\n",
                config_path, size - 1, jt);
        ck_assert_int_eq(fclose(f), 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

typedef struct sess {
    rf_session_t *s;
    int n;
    void **buf;
} sess_t;

/* Create and register every expected tensor (zeros; this test checks verdicts, not bytes:
 * tests/mpi/check_session.c checks those). Collective. */
static void sess_open(sess_t *x)
{
    memset(x, 0, sizeof(*x));
    rf_status_t st = rf_session_create(MPI_COMM_WORLD, topo_file, NULL, &x->s);
    ck_assert_msg(st == RF_OK, "rf_session_create: %s", rf_session_last_error(NULL));
    x->n = rf_session_expected_count(x->s);
    ck_assert_int_gt(x->n, 0);
    x->buf = calloc((size_t)x->n, sizeof(void *));
    rf_tensor_desc_t *d = calloc((size_t)x->n, sizeof(*d));
    ck_assert(x->buf != NULL && d != NULL);
    for (int i = 0; i < x->n; i++) {
        d[i].name = rf_session_expected(x->s, i, &d[i].dtype, &d[i].ndim, d[i].shape);
        ck_assert_ptr_nonnull(d[i].name);
        uint64_t numel = 1;
        for (int k = d[i].ndim - 1; k >= 0; k--) {
            d[i].strides[k] = (int64_t)numel;
            numel *= (uint64_t)d[i].shape[k];
        }
        x->buf[i] = calloc(numel * rf_dtype_size(rf_dtype_parse(d[i].dtype)) + 1, 1);
        d[i].data = x->buf[i];
        d[i].device = -1;
    }
    ck_assert_msg(rf_session_register(x->s, d, x->n) == RF_OK, "rank %d: register: %s", rank,
                  rf_session_last_error(x->s));
    free(d);
}

static void sess_close(sess_t *x)
{
    rf_session_destroy(x->s);
    for (int i = 0; i < x->n; i++)
        free(x->buf[i]);
    free(x->buf);
}

/* A failed call's status and text are a join's or a later wait's: a rank left (PEER) or did
 * not come in time (TIMEOUT), or the session was lost already (STATE). Local: what is wrong
 * goes into bad (first only), for a check every rank makes together. */
static void check_failure(rf_status_t st, const char *msg, const char *call, int run, char *bad,
                          size_t cap)
{
    bool ok = (st == RF_ERR_PEER || st == RF_ERR_TIMEOUT || st == RF_ERR_STATE) &&
              (strstr(msg, "left the session") != NULL ||
               strstr(msg, "transfer.join_timeout_s") != NULL ||
               strstr(msg, "the session is lost") != NULL ||
               /* a rank gave up at finish's join, the others ran into the transfer: the
                * update's own deadline (transfer.timeout_s) fails it */
               strstr(msg, "deadline") != NULL);
    if (!ok && bad[0] == '\0')
        snprintf(bad, cap, "rank %d run %d: %s: %s: %s", rank, run, call,
                 rf_session_status_name(st), msg);
}

START_TEST(test_join_race)
{
    const int runs = 25;
    int committed_runs = 0, failed_runs = 0;
    unsigned seed = 0x9e3779b9u * (unsigned)(rank + 1);
    for (int k = 0; k < runs; k++) {
        double jt = 1e-4;
        for (int e = 0; e < k % 5; e++)
            jt *= 3.0; /* 0.1, 0.3, 0.9, 2.7, 8.1 ms */
        write_topology(jt);
        sess_t x;
        sess_open(&x);
        MPI_Barrier(MPI_COMM_WORLD);
        /* arrive within about two join timeouts of each other */
        seed = seed * 1103515245u + 12345u;
        usleep((useconds_t)((double)((seed >> 8) % 1000) / 1000.0 * 2.0 * jt * 1e6));
        double t0 = MPI_Wtime();
        rf_session_result_t r;
        memset(&r, 0, sizeof(r));
        int ok = 0;
        char bad[RF_ERR_MSG_MAX + 200] = "";
        rf_status_t st = rf_session_plan(x.s, NULL);
        if (st != RF_OK) {
            check_failure(st, rf_session_last_error(x.s), "rf_session_plan", k, bad,
                          sizeof(bad));
        } else {
            st = rf_session_update(x.s, 0, &r);
            if (st != RF_OK)
                check_failure(st, rf_session_last_error(x.s), "rf_session_update", k, bad,
                              sizeof(bad));
            else if (!r.committed)
                check_failure((rf_status_t)r.status, r.reason, "rf_session_update's result",
                              k, bad, sizeof(bad));
            ok = st == RF_OK && r.committed;
        }
        double took = MPI_Wtime() - t0;
        /* plan and update: a few join timeouts, or one update deadline (3 s) when a rank gave
         * up at finish's join and the others ran into the transfer */
        if (took >= 30.0 && bad[0] == '\0')
            snprintf(bad, sizeof(bad), "rank %d run %d: plan and update took %.1f s", rank, k,
                     took);
        sess_close(&x);
        /* every rank checks together: a failed check on one rank must not leave the others
         * waiting in the next collective */
        int good = bad[0] == '\0', all_good = 0;
        MPI_Allreduce(&good, &all_good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        ck_assert_msg(all_good, "%s", good ? "a check failed on another rank" : bad);
        int lo, hi;
        MPI_Allreduce(&ok, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&ok, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        ck_assert_msg(lo == hi, "rank %d run %d (join_timeout_s %g): committed on some ranks, "
                      "failed on others (mine: %s)", rank, k, jt,
                      ok ? "committed" : rf_session_status_name(st));
        committed_runs += lo;
        failed_runs += !lo;
    }
    if (rank == 0)
        printf("check_session_join: race: %d runs committed, %d failed on every rank\n",
               committed_runs, failed_runs);
    ck_assert_int_eq(committed_runs + failed_runs, runs);
}
END_TEST

/* The last rank (a rollout rank) leaves right after the plan's join. */
START_TEST(test_leave_after_join)
{
    const int leaver = size - 1;
    write_topology(6.0);
    sess_t x;
    sess_open(&x);
    if (rank == leaver)
        setenv("REFIT_TEST_SESSION_AFTER_JOIN", "leave", 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    rf_status_t st = rf_session_plan(x.s, NULL);
    double took = MPI_Wtime() - t0;
    unsetenv("REFIT_TEST_SESSION_AFTER_JOIN");
    const char *msg = rf_session_last_error(x.s);
    if (rank == leaver) {
        ck_assert_msg(st == RF_ERR_STATE && strstr(msg, "left after the join") != NULL,
                      "leaver: %s: %s", rf_session_status_name(st), msg);
    } else {
        char want[64];
        snprintf(want, sizeof(want), "rank %d left the session (it gave up:", leaver);
        ck_assert_msg(st == RF_ERR_PEER && strstr(msg, want) != NULL &&
                          strstr(msg, "REFIT_TEST_SESSION_AFTER_JOIN=leave") != NULL,
                      "rank %d: %s: %s", rank, rf_session_status_name(st), msg);
        ck_assert_msg(strstr(msg, "rf_session_plan: ") != NULL, "rank %d: %s", rank, msg);
        /* the notice, not the 6 s timeout */
        ck_assert_msg(took < 4.0, "rank %d: the plan failed after %.2f s", rank, took);
    }
    rf_session_result_t r;
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "the session is lost"));
    sess_close(&x); /* local on every rank: the session is lost everywhere */
}
END_TEST

/* The last rank stalls 3 s right after the plan's join (join_timeout_s 1 s). */
START_TEST(test_stall_after_join)
{
    const int staller = size - 1;
    write_topology(1.0);
    sess_t x;
    sess_open(&x);
    if (rank == staller)
        setenv("REFIT_TEST_SESSION_AFTER_JOIN", "stall:3", 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    rf_status_t st = rf_session_plan(x.s, NULL);
    double took = MPI_Wtime() - t0;
    unsetenv("REFIT_TEST_SESSION_AFTER_JOIN");
    const char *msg = rf_session_last_error(x.s);
    if (rank == staller) {
        /* back after 3 s: the others gave up and said so */
        ck_assert_msg(st == RF_ERR_PEER && strstr(msg, "left the session (it gave up:") &&
                          strstr(msg, "transfer.join_timeout_s 1 s") != NULL,
                      "staller: %s: %s", rf_session_status_name(st), msg);
        ck_assert_msg(took >= 2.9 && took < 10.0, "staller: %.2f s", took);
    } else {
        /* its own timeout, or (3 ranks) another waiting rank's, heard first: that rank's
         * notice carries the same reason */
        ck_assert_msg((st == RF_ERR_TIMEOUT || (st == RF_ERR_PEER && strstr(msg, "gave up"))) &&
                          strstr(msg, "rf_session_plan: ") != NULL &&
                          strstr(msg, "not every rank came within transfer.join_timeout_s 1 s"),
                      "rank %d: %s: %s", rank, rf_session_status_name(st), msg);
        ck_assert_msg(took >= 0.9 && took < 2.9, "rank %d: the plan failed after %.2f s", rank,
                      took);
    }
    sess_close(&x);
}
END_TEST

/* Trainer rank 1 stops where the plan sets up the trainers: "leave" or "stall:3"; the
 * others' plan fails bounded (RF_ERR_PEER naming it, or RF_ERR_TIMEOUT), none hangs. */
static void stop_at_trainer(const char *how)
{
    const int stopper = 1; /* a trainer rank of trainer rank 0's stage (trainer TP size - 1) */
    const bool leave = strcmp(how, "leave") == 0;
    write_topology(leave ? 6.0 : 1.0);
    sess_t x;
    sess_open(&x);
    ck_assert_int_eq(rf_session_role(x.s), rank < size - 1 ? RF_SESSION_TRAINER
                                                          : RF_SESSION_ROLLOUT);
    if (rank == stopper)
        setenv("REFIT_TEST_SESSION_AT_TRAINER", how, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    rf_status_t st = rf_session_plan(x.s, NULL);
    double took = MPI_Wtime() - t0;
    unsetenv("REFIT_TEST_SESSION_AT_TRAINER");
    const char *msg = rf_session_last_error(x.s);
    if (rank == stopper && leave) {
        ck_assert_msg(st == RF_ERR_STATE && strstr(msg, "left before setting up the trainer"),
                      "leaver: %s: %s", rf_session_status_name(st), msg);
    } else if (rank == stopper) {
        ck_assert_msg(st == RF_ERR_PEER && strstr(msg, "left the session (it gave up:") &&
                          strstr(msg, "transfer.join_timeout_s 1 s") != NULL,
                      "staller: %s: %s", rf_session_status_name(st), msg);
        ck_assert_msg(took >= 2.9 && took < 10.0, "staller: %.2f s", took);
    } else if (leave) {
        char want[64];
        snprintf(want, sizeof(want), "rank %d left the session (it gave up:", stopper);
        ck_assert_msg(st == RF_ERR_PEER && strstr(msg, want) != NULL &&
                          strstr(msg, "REFIT_TEST_SESSION_AT_TRAINER=leave") != NULL &&
                          strstr(msg, "rf_session_plan: ") != NULL,
                      "rank %d: %s: %s", rank, rf_session_status_name(st), msg);
        ck_assert_msg(took < 4.0, "rank %d: the plan failed after %.2f s", rank, took);
    } else {
        ck_assert_msg((st == RF_ERR_TIMEOUT || (st == RF_ERR_PEER && strstr(msg, "gave up"))) &&
                          strstr(msg, "rf_session_plan: ") != NULL &&
                          strstr(msg, "not every rank came within transfer.join_timeout_s 1 s"),
                      "rank %d: %s: %s", rank, rf_session_status_name(st), msg);
        /* not the staller's 3 s: nothing waited for it outside a bounded wait */
        ck_assert_msg(took >= 0.9 && took < 2.9, "rank %d: the plan failed after %.2f s", rank,
                      took);
    }
    rf_session_result_t r;
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_ERR_STATE);
    sess_close(&x); /* local on every rank: the session is lost everywhere */
}

START_TEST(test_trainer_leaves_at_setup)
{
    stop_at_trainer("leave");
}
END_TEST

START_TEST(test_trainer_stalls_at_setup)
{
    stop_at_trainer("stall:3");
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2 || size < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiexec -np N (N >= 2) check_session_join CONFIG.json\n");
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    if (realpath(argv[1], config_path) == NULL) { /* the topology is in another directory */
        fprintf(stderr, "rank %d: %s: not found\n", rank, argv[1]);
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    /* one file for every rank: rank 0's name */
    if (rank == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(topo_file, sizeof(topo_file), "%s/refit-join-%d.yaml", tmp ? tmp : "/tmp",
                 (int)getpid());
    }
    MPI_Bcast(topo_file, (int)sizeof(topo_file), MPI_CHAR, 0, MPI_COMM_WORLD);
    Suite *s = suite_create("session_join");
    TCase *tc = tcase_create("session_join");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_leave_after_join);
    tcase_add_test(tc, test_stall_after_join);
    if (size >= 3) { /* two trainer ranks in a stage */
        tcase_add_test(tc, test_trainer_leaves_at_setup);
        tcase_add_test(tc, test_trainer_stalls_at_setup);
    }
    tcase_add_test(tc, test_join_race);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* fork breaks MPI */
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        unlink(topo_file);
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
