/*
 * refit: unit tests of the environment switches' parsers (include/refit/env.h): a 0/1 switch
 * and a positive count take their default when unset or empty, their value when it is one the
 * switch knows, and refuse anything else with RF_ERR_INVALID naming the variable, the value
 * and what is accepted, leaving the output untouched.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/env.h"

#define VAR "REFIT_TEST_ENV_SWITCH"

static void teardown(void)
{
    unsetenv(VAR);
}

/* rf_env_flag with VAR set to v (NULL: unset); *on_p starts as `start` */
static rf_status_t flag(const char *v, bool dflt, bool start, bool *on_p, rf_err_t *err)
{
    if (v != NULL)
        setenv(VAR, v, 1);
    else
        unsetenv(VAR);
    rf_err_clear(err);
    *on_p = start;
    return rf_env_flag(VAR, dflt, on_p, err);
}

START_TEST(test_flag_values)
{
    rf_err_t err;
    bool on;
    ck_assert_int_eq(flag(NULL, true, false, &on, &err), RF_OK);
    ck_assert(on);
    ck_assert_int_eq(flag(NULL, false, true, &on, &err), RF_OK);
    ck_assert(!on);
    ck_assert_int_eq(flag("", true, false, &on, &err), RF_OK);
    ck_assert(on);
    ck_assert_int_eq(flag("1", false, false, &on, &err), RF_OK);
    ck_assert(on);
    ck_assert_int_eq(flag("0", true, true, &on, &err), RF_OK);
    ck_assert(!on);
    ck_assert_int_eq(err.status, RF_OK);
}
END_TEST

START_TEST(test_flag_refused)
{
    static const char *bad[] = {"maybe", "yes", "true", "on", "2", "01", "1 ", " 1", "-1", "10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rf_err_t err;
        bool on;
        ck_assert_int_eq(flag(bad[i], true, false, &on, &err), RF_ERR_INVALID);
        ck_assert_int_eq(err.status, RF_ERR_INVALID);
        ck_assert_msg(!on, "%s: output set on failure", bad[i]);
        char want[128];
        snprintf(want, sizeof(want), VAR "=%s: expected 0 (off) or 1 (on)", bad[i]);
        ck_assert_str_eq(err.msg, want);
    }
}
END_TEST

static rf_status_t count(const char *v, size_t dflt, size_t *out_p, rf_err_t *err)
{
    if (v != NULL)
        setenv(VAR, v, 1);
    else
        unsetenv(VAR);
    rf_err_clear(err);
    *out_p = 777;
    return rf_env_count(VAR, "bytes", dflt, out_p, err);
}

START_TEST(test_count_values)
{
    rf_err_t err;
    size_t n;
    ck_assert_int_eq(count(NULL, 42, &n, &err), RF_OK);
    ck_assert_uint_eq(n, 42);
    ck_assert_int_eq(count("", SIZE_MAX, &n, &err), RF_OK);
    ck_assert_uint_eq(n, SIZE_MAX);
    ck_assert_int_eq(count("1", 42, &n, &err), RF_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(count("1048576", 42, &n, &err), RF_OK);
    ck_assert_uint_eq(n, 1048576);
    ck_assert_int_eq(count("007", 42, &n, &err), RF_OK);
    ck_assert_uint_eq(n, 7);
    char max[32];
    snprintf(max, sizeof(max), "%zu", (size_t)SIZE_MAX);
    ck_assert_int_eq(count(max, 42, &n, &err), RF_OK);
    ck_assert_uint_eq(n, SIZE_MAX);
}
END_TEST

START_TEST(test_count_refused)
{
    static const char *bad[] = {"abc", "-1", "+5", " 5", "5 ", "0x10", "1e6", "12k", "1.5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rf_err_t err;
        size_t n;
        ck_assert_int_eq(count(bad[i], 42, &n, &err), RF_ERR_INVALID);
        ck_assert_uint_eq(n, 777);
        char want[128];
        snprintf(want, sizeof(want), VAR "=%s: expected a positive decimal integer (bytes)",
                 bad[i]);
        ck_assert_str_eq(err.msg, want);
    }
    rf_err_t err;
    size_t n;
    ck_assert_int_eq(count("0", 42, &n, &err), RF_ERR_INVALID);
    ck_assert_str_eq(err.msg, VAR "=0: expected a positive decimal integer (bytes), not 0");
    ck_assert_uint_eq(n, 777);
    /* one past SIZE_MAX (64-bit): refused, not wrapped or clamped */
    ck_assert_int_eq(count("18446744073709551616", 42, &n, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, VAR "=18446744073709551616: expected a positive "
                                              "decimal integer (bytes) of at most"));
    ck_assert_uint_eq(n, 777);
}
END_TEST

START_TEST(test_null_refused)
{
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_env_flag(VAR, true, NULL, &err), RF_ERR_INVALID);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_env_count(NULL, "bytes", 1, &(size_t){0}, &err), RF_ERR_INVALID);
}
END_TEST

/* rf_env_check: every library switch, the first bad one named; unset or valid: RF_OK */
START_TEST(test_check_all)
{
    static const char *const bad[][2] = {
        {"REFIT_CKPT_STREAM", "maybe"},    {"REFIT_HDF5_COLLECTIVE", "on"},
        {"REFIT_MPI_SEND_SPIN", "2"},      {"REFIT_MPI_RECV_PAGEABLE", "yes"},
        {"REFIT_DEVICE_TIMELINE", "true"}, {"REFIT_CUDA_ENGINE_MIN", "-1"},
        {"REFIT_CKPT_READ_THREADS", "0"},  {"REFIT_MPI_SEAL_THREADS", "four"},
        {"REFIT_CUDA_TRANSPOSE", "on"}};
    rf_err_t err;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        unsetenv(bad[i][0]);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_env_check(&err), RF_OK);
    setenv("REFIT_CKPT_STREAM", "0", 1);
    setenv("REFIT_CUDA_ENGINE_MIN", "4096", 1);
    ck_assert_int_eq(rf_env_check(&err), RF_OK);
    unsetenv("REFIT_CKPT_STREAM");
    unsetenv("REFIT_CUDA_ENGINE_MIN");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char want[96];
        snprintf(want, sizeof(want), "%s=%s: expected ", bad[i][0], bad[i][1]);
        setenv(bad[i][0], bad[i][1], 1);
        rf_err_clear(&err);
        ck_assert_int_eq(rf_env_check(&err), RF_ERR_INVALID);
        ck_assert_msg(strstr(err.msg, want) != NULL, "%s", err.msg);
        unsetenv(bad[i][0]);
    }
    /* a bounded count that is no count: the range named (here a value past SIZE_MAX) */
    setenv("REFIT_CKPT_READ_THREADS", "99999999999999999999", 1);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_env_check(&err), RF_ERR_INVALID);
    ck_assert_str_eq(err.msg, "REFIT_CKPT_READ_THREADS=99999999999999999999: expected a decimal "
                              "count from 1 to 64 (threads)");
    /* a count above its bound: named with the bound; the bound itself is accepted */
    setenv("REFIT_CKPT_READ_THREADS", "65", 1);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_env_check(&err), RF_ERR_INVALID);
    ck_assert_str_eq(err.msg, "REFIT_CKPT_READ_THREADS=65: at most 64 threads");
    setenv("REFIT_CKPT_READ_THREADS", "64", 1);
    ck_assert_int_eq(rf_env_check(&err), RF_OK);
    unsetenv("REFIT_CKPT_READ_THREADS");
}
END_TEST

/* rf_env_node_share: the launcher's local size, else the world size; at least one core */
START_TEST(test_node_share)
{
    long cores = 0, local = 0;
    unsetenv("MPI_LOCALNRANKS");
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "3", 1);
    rf_env_node_share(8, &cores, &local);
    ck_assert_int_eq(local, 3);
    ck_assert_int_ge(cores, 1);
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    setenv("MPI_LOCALNRANKS", "5", 1);
    rf_env_node_share(8, &cores, &local);
    ck_assert_int_eq(local, 5);
    unsetenv("MPI_LOCALNRANKS");
    rf_env_node_share(8, &cores, &local);
    ck_assert_int_eq(local, 8);
    rf_env_node_share(0, &cores, &local);
    ck_assert_int_eq(local, 1);
    /* spare threads: cores / local - 2 in [1, 4]; more local ranks than cores: 1 */
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "100000", 1);
    ck_assert_int_eq(rf_env_spare_threads(8), 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
    rf_env_node_share(1, &cores, &local);
    long want = cores - 2 < 1 ? 1 : cores - 2 > 4 ? 4 : cores - 2;
    ck_assert_int_eq(rf_env_spare_threads(1), want);
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("env");
    TCase *tc = tcase_create("switches");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_flag_values);
    tcase_add_test(tc, test_flag_refused);
    tcase_add_test(tc, test_count_values);
    tcase_add_test(tc, test_count_refused);
    tcase_add_test(tc, test_null_refused);
    tcase_add_test(tc, test_node_share);
    tcase_add_test(tc, test_check_all);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
