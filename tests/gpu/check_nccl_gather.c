/*
 * check_nccl_gather: the stage gather on a trainer-only NCCL communicator
 * (rf_xfer_nccl_gather_recv / rf_xfer_nccl_gather_send, include/refit/transport_nccl.h) between
 * two ranks on two GPUs (mpiexec -np 2; rank r on CUDA device r). World rank 0 plays the stage
 * sender, world rank 1 a contributor, in a layout holding only the stage 0 gather communicator.
 *
 *   gather            non-blocking init; 5 messages of 1 B .. the whole 4 MiB buffer, each
 *                     landing byte for byte in the sender's host buffer; the same again on the
 *                     same communicator (no re-init)
 *   gather_deadline   a receive the contributor never sends ends at the deadline
 *                     (RF_ERR_TIMEOUT or NCCL's own error); after rf_xfer_nccl_fail on both
 *                     ranks the next update re-creates the communicator and lands every byte
 *   gather_oversized  a message larger than the buffer is refused before any NCCL call
 *
 * Exits 77 (ctest SKIP_RETURN_CODE) when refit was built without CUDA / NCCL or fewer than two
 * devices are visible; that is every CI machine and the one-GPU host: it runs on the two-GPU
 * host (tools/gpu-multi-run.sh). CK_FORK=no.
 */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/control.h"
#include "refit/transport.h"
#include "refit/transport_nccl.h"

#define BUF_BYTES (4u << 20)
#define NMSG 5

static const uint64_t k_sizes[NMSG] = {1, 4096, (1u << 20) + 3, 777, BUF_BYTES};
static int rank;
static rf_accel_t *ax;
static uint32_t next_update = 1;

static unsigned char pattern(uint32_t update, int msg, uint64_t i)
{
    return (unsigned char)((i * 151u + (uint64_t)msg * 29u + update * 7u) ^ (i >> 9));
}

typedef struct fixture {
    rf_ctl_t *ctl;
    rf_xfer_t *x;
    rf_nccl_layout_t layout;
} fixture_t;

static void fixture_up(fixture_t *f)
{
    rf_err_t err;
    rf_err_clear(&err);
    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(rf_ctl_create(MPI_COMM_WORLD, &f->ctl, &err), RF_OK);
    ck_assert_int_eq(rf_xfer_create(f->ctl, "nccl", BUF_BYTES, 2, &f->x, &err), RF_OK);
    f->layout.n = 1;
    f->layout.comms = calloc(1, sizeof(rf_nccl_comm_layout_t));
    f->layout.comms[0].gather = 1;
    f->layout.comms[0].n = 2;
    f->layout.comms[0].ranks = calloc(2, sizeof(int));
    f->layout.comms[0].ranks[1] = 1;
    ck_assert_int_eq(rf_xfer_nccl_setup(f->x, &f->layout, rank, ax, &err), RF_OK);
    ck_assert(rf_xfer_nccl_has_gather(f->x, 0));
    ck_assert(!rf_xfer_nccl_has_gather(f->x, 1));
}

static void fixture_down(fixture_t *f)
{
    rf_xfer_destroy(f->x);
    rf_ctl_destroy(f->ctl);
    rf_nccl_layout_free(&f->layout);
}

static rf_status_t begin(fixture_t *f, uint32_t v, rf_err_t *err)
{
    ck_assert_int_eq(rf_ctl_begin(f->ctl, v, err), RF_OK);
    return rf_xfer_begin(f->x, v, rf_time_now() + 120.0, err);
}

/* Every message of update v, rank 1 -> rank 0, checked on rank 0. */
static void gather_all(fixture_t *f, uint32_t v)
{
    rf_err_t err;
    unsigned char *buf = malloc(BUF_BYTES);
    ck_assert_ptr_nonnull(buf);
    for (int m = 0; m < NMSG; m++) {
        const int peer = 1 - rank;
        rf_status_t st;
        rf_err_clear(&err);
        if (rank == 1) {
            for (uint64_t i = 0; i < k_sizes[m]; i++)
                buf[i] = pattern(v, m, i);
            st = rf_xfer_nccl_gather_send(f->x, 0, peer, buf, k_sizes[m], rf_time_now() + 60.0,
                                          &err);
        } else {
            memset(buf, 0xEE, BUF_BYTES);
            st = rf_xfer_nccl_gather_recv(f->x, 0, &peer, &k_sizes[m], 1, buf,
                                          rf_time_now() + 60.0, &err);
        }
        ck_assert_msg(st == RF_OK, "rank %d, update %u, message %d: %s", rank, v, m, err.msg);
        for (uint64_t i = 0; rank == 0 && i < k_sizes[m]; i++)
            if (buf[i] != pattern(v, m, i))
                ck_abort_msg("update %u message %d byte %llu: got %u, want %u", v, m,
                             (unsigned long long)i, buf[i], pattern(v, m, i));
        if (rank == 0 && k_sizes[m] < BUF_BYTES)
            ck_assert_uint_eq(buf[k_sizes[m]], 0xEE); /* nothing past the message */
    }
    free(buf);
}

START_TEST(test_gather)
{
    fixture_t f;
    rf_err_t err;
    rf_xfer_nccl_counters_t c;
    fixture_up(&f);
    for (int round = 0; round < 2; round++) {
        uint32_t v = next_update++;
        rf_err_clear(&err);
        ck_assert_msg(begin(&f, v, &err) == RF_OK, "begin: %s", err.msg);
        gather_all(&f, v);
    }
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_uint_eq(c.inits, 1);
    ck_assert_uint_eq(c.aborts, 0);
    ck_assert_int_eq(c.comms, 1);
    printf("nccl gather: rank %d: init %.3f s, 2 x %d messages\n", rank, c.init_s, NMSG);
    MPI_Barrier(MPI_COMM_WORLD);
    fixture_down(&f);
}
END_TEST

START_TEST(test_gather_deadline)
{
    fixture_t f;
    rf_err_t err;
    rf_xfer_nccl_counters_t c;
    fixture_up(&f);
    uint32_t v = next_update++;
    rf_err_clear(&err);
    ck_assert_msg(begin(&f, v, &err) == RF_OK, "begin: %s", err.msg);
    if (rank == 0) {
        /* the contributor never sends this one */
        const int peer = 1;
        const uint64_t b = 4096;
        char *buf = malloc(b);
        double t0 = rf_time_now();
        rf_status_t st = rf_xfer_nccl_gather_recv(f.x, 0, &peer, &b, 1, buf,
                                                  rf_time_now() + 2.0, &err);
        ck_assert_msg(st == RF_ERR_TIMEOUT || st == RF_ERR_NCCL, "got %s: %s",
                      rf_status_string(st), err.msg);
        ck_assert_ptr_nonnull(strstr(err.msg, "receiving the stage 0 gather from 1 rank(s)"));
        printf("nccl gather: unmatched receive ended after %.3f s: %s\n", rf_time_now() - t0,
               err.msg);
        free(buf);
    }
    /* what the job does after the FAILED verdict, on every rank */
    rf_xfer_nccl_fail(f.x);
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_int_eq(c.ready, 0);
    ck_assert_uint_ge(c.aborts, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    v = next_update++;
    rf_err_clear(&err);
    ck_assert_msg(begin(&f, v, &err) == RF_OK, "re-init: %s", err.msg);
    gather_all(&f, v);
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_uint_eq(c.inits, 2);
    MPI_Barrier(MPI_COMM_WORLD);
    fixture_down(&f);
}
END_TEST

START_TEST(test_gather_oversized)
{
    fixture_t f;
    rf_err_t err;
    fixture_up(&f);
    uint32_t v = next_update++;
    rf_err_clear(&err);
    ck_assert_msg(begin(&f, v, &err) == RF_OK, "begin: %s", err.msg);
    const int peer = 1 - rank;
    const uint64_t b = (uint64_t)BUF_BYTES + 1;
    rf_status_t st = rank == 1 ? rf_xfer_nccl_gather_send(f.x, 0, peer, "", b,
                                                          rf_time_now() + 5.0, &err)
                               : rf_xfer_nccl_gather_recv(f.x, 0, &peer, &b, 1, NULL,
                                                          rf_time_now() + 5.0, &err);
    ck_assert_int_eq(st, RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "exceeds the 4194304-byte buffer"));
    /* a peer outside the communicator */
    const int stranger = 5;
    const uint64_t one = 1;
    char c1 = 0;
    st = rf_xfer_nccl_gather_recv(f.x, 0, &stranger, &one, 1, &c1, rf_time_now() + 5.0, &err);
    ck_assert_int_eq(st, RF_ERR_TOPOLOGY);
    /* the communicator is still good */
    gather_all(&f, v);
    MPI_Barrier(MPI_COMM_WORLD);
    fixture_down(&f);
}
END_TEST

static Suite *gather_suite(void)
{
    Suite *s = suite_create("nccl_gather");
    TCase *tc = tcase_create("gather");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_gather);
    tcase_add_test(tc, test_gather_deadline);
    tcase_add_test(tc, test_gather_oversized);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size = 0, ndev = 0;
    const rf_accel_ops_t *cuda = rf_accel_lookup("cuda");
    if (!rf_accel_cuda_available() || cuda == NULL || cuda->device_count(&ndev) != RF_OK)
        ndev = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!rf_xfer_nccl_built() || ndev < 2) {
        if (rank == 0)
            fprintf(stderr, "check_nccl_gather: needs NCCL and two GPUs (%d visible): "
                            "skipped\n", ndev);
        MPI_Finalize();
        return 77;
    }
    if (size != 2) {
        fprintf(stderr, "check_nccl_gather: two ranks only (mpiexec -np 2)\n");
        MPI_Finalize();
        return 1;
    }
    if (rf_accel_open("cuda", rank, &ax) != RF_OK) {
        fprintf(stderr, "check_nccl_gather: cannot open CUDA device %d\n", rank);
        MPI_Finalize();
        return 1;
    }
    SRunner *sr = srunner_create(gather_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rf_accel_close(ax);
    MPI_Finalize();
    return failed == 0 ? 0 : 1;
}
