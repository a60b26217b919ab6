/*
 * refit: unit tests of the ipc transport's host arena backend (include/refit/transport.h,
 * transport/transport_ipc.c): export / import by handle (the importer maps read-only and sees
 * the exporter's bytes), unlink (the name goes, the mappings stay), write protection (a write
 * to a protected weights arena kills the writer with SIGSEGV: the host backend's assertion
 * that trainer weights stay read-only from production to the verdict), refusals.
 * No MPI: the backend is plain POSIX.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "refit/transport.h"

static void name_for(char *buf, size_t cap, const char *what)
{
    snprintf(buf, cap, "/refit-unit-%d-%s", (int)getpid(), what);
}

static bool name_exists(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

START_TEST(test_export_import_unlink)
{
    const rf_ipc_arena_ops_t *ops = rf_ipc_host_ops();
    rf_ipc_arena_t ex, im;
    rf_err_t err;
    char name[RF_IPC_NAME_MAX];
    rf_err_clear(&err);
    name_for(name, sizeof(name), "a");
    ck_assert_int_eq(ops->export_arena(name, 8192, &ex, &err), RF_OK);
    ck_assert_str_eq(ex.handle.backend, "host");
    ck_assert_uint_eq(ex.handle.bytes, 8192);
    memset(ex.base, 0x5a, 8192);
    ck_assert_int_eq(ops->import_arena(&ex.handle, &im, &err), RF_OK);
    ck_assert_int_eq(((unsigned char *)im.base)[8191], 0x5a);
    /* a second export of the same name is refused (names are unique per job and rank) */
    rf_ipc_arena_t dup;
    ck_assert_int_eq(ops->export_arena(name, 4096, &dup, &err), RF_ERR_IO);
    /* unlink: the name is gone, both mappings still work and still share bytes */
    ck_assert(name_exists(name));
    ck_assert_int_eq(ops->unlink_arena(&ex, &err), RF_OK);
    ck_assert(!name_exists(name));
    ((unsigned char *)ex.base)[100] = 0x11;
    ck_assert_int_eq(((unsigned char *)im.base)[100], 0x11);
    ops->release(&im);
    ops->release(&ex);
    ck_assert_ptr_null(ex.base);
}
END_TEST

START_TEST(test_release_unlinks)
{
    const rf_ipc_arena_ops_t *ops = rf_ipc_host_ops();
    rf_ipc_arena_t ex;
    rf_err_t err;
    char name[RF_IPC_NAME_MAX];
    rf_err_clear(&err);
    name_for(name, sizeof(name), "b");
    ck_assert_int_eq(ops->export_arena(name, 4096, &ex, &err), RF_OK);
    ck_assert(name_exists(name));
    ops->release(&ex); /* an error path before the setup barrier: nothing left behind */
    ck_assert(!name_exists(name));
}
END_TEST

/* Writes one byte at p in a child; returns the signal that ended it (0: exited normally). */
static int child_write(void *p)
{
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* not a sanitizer's handler: die by the signal */
        ((volatile unsigned char *)p)[0] = 1;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

START_TEST(test_protect)
{
    const rf_ipc_arena_ops_t *ops = rf_ipc_host_ops();
    rf_ipc_arena_t ex, im;
    rf_err_t err;
    char name[RF_IPC_NAME_MAX];
    rf_err_clear(&err);
    name_for(name, sizeof(name), "c");
    ck_assert_int_eq(ops->export_arena(name, 4096, &ex, &err), RF_OK);
    ck_assert_int_eq(ops->import_arena(&ex.handle, &im, &err), RF_OK);
    ck_assert_int_eq(child_write(ex.base), 0);
    ck_assert_int_eq(ops->protect(&ex, 1, &err), RF_OK);
    ck_assert_int_eq(child_write(ex.base), SIGSEGV); /* trainer weights: read-only */
    ck_assert_int_eq(ops->protect(&ex, 0, &err), RF_OK);
    ck_assert_int_eq(child_write(ex.base), 0);
    ck_assert_int_eq(child_write(im.base), SIGSEGV); /* the importer maps read-only */
    ops->release(&im);
    ops->release(&ex);
}
END_TEST

START_TEST(test_refusals)
{
    const rf_ipc_arena_ops_t *ops = rf_ipc_host_ops();
    rf_ipc_arena_t a;
    rf_ipc_handle_t h;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(ops->export_arena("no-slash", 4096, &a, &err), RF_ERR_INVALID);
    ck_assert_int_eq(ops->export_arena("/refit-unit-zero", 0, &a, &err), RF_ERR_INVALID);
    memset(&h, 0, sizeof(h));
    snprintf(h.backend, sizeof(h.backend), "cuda");
    snprintf(h.device, sizeof(h.device), "GPU-0000");
    snprintf(h.name, sizeof(h.name), "/refit-unit-none");
    h.bytes = 4096;
    rf_err_clear(&err); /* the first error is kept: start afresh */
    ck_assert_int_eq(ops->import_arena(&h, &a, &err), RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "cuda"));
    snprintf(h.backend, sizeof(h.backend), "host");
    snprintf(h.device, sizeof(h.device), "host");
    ck_assert_int_eq(ops->import_arena(&h, &a, &err), RF_ERR_IO); /* no such object */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ipc_arena");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_export_import_unlink);
    tcase_add_test(tc, test_release_unlinks);
    tcase_add_test(tc, test_protect);
    tcase_add_test(tc, test_refusals);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
