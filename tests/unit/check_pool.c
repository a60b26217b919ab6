/*
 * refit: unit tests of the fork-join pool (include/refit/pool.h): every worker runs once per
 * run with its own index and the run's size, the run returns only after all returned, runs
 * repeat on the same helpers, a NULL or one-thread pool runs on the caller alone, and bad
 * sizes are refused.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "refit/pool.h"

typedef struct {
    atomic_int calls[RF_POOL_MAX];
    atomic_int finished;
    int n_seen[RF_POOL_MAX];
    pthread_t who_thread[RF_POOL_MAX];
} job_t;

static void work(void *ctx, int who, int n)
{
    job_t *j = ctx;
    if (who % 2 == 1) { /* the slower half: the run must still wait for them */
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    j->n_seen[who] = n;
    j->who_thread[who] = pthread_self();
    atomic_fetch_add(&j->calls[who], 1);
    atomic_fetch_add(&j->finished, 1);
}

START_TEST(test_runs)
{
    rf_err_t err;
    rf_err_clear(&err);
    const int sizes[] = {1, 2, 3, 8};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        int t = sizes[k];
        rf_pool_t *p = NULL;
        ck_assert_int_eq(rf_pool_create(t, &p, &err), RF_OK);
        ck_assert_int_eq(rf_pool_threads(p), t);
        for (int run = 0; run < 50; run++) {
            job_t j;
            for (int w = 0; w < RF_POOL_MAX; w++)
                atomic_init(&j.calls[w], 0);
            atomic_init(&j.finished, 0);
            rf_pool_run(p, work, &j);
            /* all returned before rf_pool_run did, once each */
            ck_assert_int_eq(atomic_load(&j.finished), t);
            for (int w = 0; w < t; w++) {
                ck_assert_int_eq(atomic_load(&j.calls[w]), 1);
                ck_assert_int_eq(j.n_seen[w], t);
            }
            ck_assert(pthread_equal(j.who_thread[0], pthread_self())); /* the caller is 0 */
            for (int w = 1; w < t; w++)
                ck_assert(!pthread_equal(j.who_thread[w], pthread_self()));
        }
        rf_pool_destroy(p);
    }
}
END_TEST

START_TEST(test_null_and_refused)
{
    rf_err_t err;
    rf_err_clear(&err);
    job_t j;
    for (int w = 0; w < RF_POOL_MAX; w++)
        atomic_init(&j.calls[w], 0);
    atomic_init(&j.finished, 0);
    ck_assert_int_eq(rf_pool_threads(NULL), 1);
    rf_pool_run(NULL, work, &j);
    ck_assert_int_eq(atomic_load(&j.finished), 1);
    ck_assert_int_eq(j.n_seen[0], 1);
    rf_pool_destroy(NULL);
    rf_pool_t *p = (rf_pool_t *)&j;
    ck_assert_int_eq(rf_pool_create(0, &p, &err), RF_ERR_INVALID);
    ck_assert_int_eq(rf_pool_create(RF_POOL_MAX + 1, &p, &err), RF_ERR_INVALID);
    ck_assert_int_eq(rf_pool_create(2, NULL, &err), RF_ERR_INVALID);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_runs);
    tcase_add_test(tc, test_null_and_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
