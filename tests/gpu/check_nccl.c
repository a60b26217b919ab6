/*
 * check_nccl: the nccl transport on ONE GPU (include/refit/transport_nccl.h), through the chunk
 * scheduler: one-rank communicators (world = this one rank, run under mpiexec -np 1), a chunk
 * plan of several tensors split over many chunks, pack on the host, NCCL on device chunk
 * buffers, unpack from the device buffer (copied back d2h here), byte for byte against the
 * pattern the pack wrote.
 *
 *   p2p_self          non-blocking init completes; grouped ncclSend + ncclRecv to rank 0
 *                     itself lands every byte; again with the integrity trailer
 *   broadcast_self    ncclBroadcast on a one-rank communicator (root = the receiver)
 *   init_deadline     an init polled under an already expired deadline: RF_ERR_TIMEOUT,
 *                     ncclCommAbort, then re-init and a byte-identical transfer
 *   duplicate         a repeated header (the duplicate fault on a collective) fails the update
 *                     with RF_ERR_SEQUENCE, aborts the communicator; re-init + transfer after
 *   unmatched_recv    a receive that is never matched (the send dropped): the deadline (or
 *                     NCCL's own error) ends it, ncclCommAbort, re-init + transfer after
 *
 * Exits 77 (ctest SKIP_RETURN_CODE) when refit was built without CUDA / NCCL or no device is
 * usable. CK_FORK=no (fork breaks CUDA and MPI); CK_RUN_CASE picks one case.
 * The multi-rank data path (two or more GPUs) is the multi-GPU issue's.
 */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/transport.h"
#include "refit/transport_nccl.h"

#define CHUNK_BYTES (256u << 10)
#define NITEMS 6

static rf_accel_t *ax;
static uint32_t next_update = 1;

static const rf_chunk_item_t items[NITEMS] = {
    {0, 300, 1024, 300 * 1024, "a"},         /* 300 KiB: split over two chunks */
    {0, 50, 100, 5000, "b"},
    {0, 640, 4096, 640 * 4096, "c"},         /* 2.5 MiB: rows split over ~11 chunks */
    {0, 1, 1, 1, "d"},
    {0, 64, 1024, 64 * 1024, "e"},
    {0, 1000, 200, 200000, "f"},
};

static unsigned char pattern(uint32_t update, size_t item, uint64_t g)
{
    return (unsigned char)((g * 131u + item * 7u + update * 13u) ^ (g >> 8) ^ (g >> 16));
}

typedef struct test_ctx {
    uint32_t update;
    unsigned char *dst[NITEMS]; /* what arrived, per item */
    uint64_t unpacked_bytes;
} test_ctx_t;

static rf_status_t pack(void *vctx, const rf_chunk_t *chunk, const rf_chunk_piece_t *pieces,
                        void *payload, rf_chunk_sum_t *sum, rf_err_t *err)
{
    (void)sum; /* nccl asks for no payload sum */
    test_ctx_t *c = vctx;
    (void)err;
    for (size_t k = 0; k < chunk->piece_count; k++) {
        const rf_chunk_piece_t *pc = &pieces[k];
        uint64_t g0 = pc->row_begin * items[pc->item].row_bytes;
        unsigned char *p = (unsigned char *)payload + pc->offset;
        for (uint64_t i = 0; i < pc->bytes; i++)
            p[i] = pattern(c->update, pc->item, g0 + i);
    }
    return RF_OK;
}

/* payload is the DEVICE chunk buffer: read every piece back d2h */
static rf_status_t unpack(void *vctx, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                          size_t nsegs, const void *payload, rf_err_t *err)
{
    test_ctx_t *c = vctx;
    ck_assert_uint_eq(nsegs, chunk->piece_count);
    for (size_t k = 0; k < chunk->piece_count; k++) {
        const rf_chunk_piece_t *pc = segs[k].piece;
        uint64_t g0 = pc->row_begin * items[pc->item].row_bytes;
        rf_status_t st = ax->ops->copy(ax, c->dst[pc->item] + g0,
                                       (const char *)payload + pc->offset, (size_t)pc->bytes,
                                       RF_COPY_D2H, NULL);
        if (st == RF_OK)
            st = rf_accel_sync(ax);
        if (st != RF_OK)
            return rf_err_set(err, st, "d2h of chunk %u failed", chunk->seq);
        c->unpacked_bytes += pc->bytes;
    }
    return RF_OK;
}

typedef struct fixture {
    rf_ctl_t *ctl;
    rf_xfer_t *x;
    rf_chunk_plan_t *plan;
    rf_chunk_plan_t *plan_integrity;
    rf_nccl_layout_t layout;
    int zero;
} fixture_t;

static void fixture_up(fixture_t *f, int p2p)
{
    rf_err_t err;
    rf_err_clear(&err);
    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(rf_ctl_create(MPI_COMM_WORLD, &f->ctl, &err), RF_OK);
    ck_assert_int_eq(rf_xfer_create(f->ctl, "nccl", CHUNK_BYTES, 2, &f->x, &err), RF_OK);
    ck_assert_int_eq(rf_chunk_plan_create(items, NITEMS, CHUNK_BYTES, &f->plan, &err), RF_OK);
    ck_assert_int_eq(rf_chunk_plan_create(items, NITEMS,
                                          rf_xfer_plan_bytes(CHUNK_BYTES, 1),
                                          &f->plan_integrity, &err),
                     RF_OK);
    ck_assert_uint_gt(f->plan->n_chunks, 8);
    /* one one-rank communicator: world rank 0 */
    f->layout.p2p = p2p;
    f->layout.n = 1;
    f->layout.comms = calloc(1, sizeof(rf_nccl_comm_layout_t));
    f->layout.comms[0].n = 1;
    f->layout.comms[0].ranks = calloc(1, sizeof(int));
    ck_assert_int_eq(rf_xfer_nccl_setup(f->x, &f->layout, 0, ax, &err), RF_OK);
}

static void fixture_down(fixture_t *f)
{
    rf_xfer_destroy(f->x);
    rf_ctl_destroy(f->ctl);
    rf_chunk_plan_destroy(f->plan);
    rf_chunk_plan_destroy(f->plan_integrity);
    rf_nccl_layout_free(&f->layout);
}

/* Begins update v (ctl, xfer, nccl) with the deadline `secs` from now. */
static rf_status_t begin(fixture_t *f, uint32_t v, double secs, rf_err_t *err)
{
    ck_assert_int_eq(rf_ctl_begin(f->ctl, v, err), RF_OK);
    return rf_xfer_begin(f->x, v, rf_time_now() + secs, err);
}

/* One transfer to self; returns its status. fault: RF_XFER_FAULT_NONE or one fault. */
static rf_status_t transfer(fixture_t *f, uint32_t v, int integrity, rf_xfer_fault_t fault,
                            double secs, test_ctx_t *tc, rf_err_t *err)
{
    static const int zero = 0;
    const rf_chunk_plan_t *plan = integrity ? f->plan_integrity : f->plan;
    rf_xfer_config_t cfg = {v, plan, &zero, &zero, 1, rf_time_now() + secs, fault,
                            integrity, items, 0, NULL, 0, 0};
    memset(tc, 0, sizeof(*tc));
    tc->update = v;
    for (int i = 0; i < NITEMS; i++) {
        tc->dst[i] = calloc(1, items[i].bytes);
        ck_assert_ptr_nonnull(tc->dst[i]);
    }
    return rf_xfer_nccl_run(f->x, &cfg, pack, tc, unpack, tc, err);
}

static void expect_landed(const test_ctx_t *tc)
{
    uint64_t total = 0;
    for (int i = 0; i < NITEMS; i++) {
        for (uint64_t g = 0; g < items[i].bytes; g++)
            if (tc->dst[i][g] != pattern(tc->update, (size_t)i, g))
                ck_abort_msg("item %s byte %llu: got %u, want %u", items[i].name,
                             (unsigned long long)g, tc->dst[i][g],
                             pattern(tc->update, (size_t)i, g));
        total += items[i].bytes;
    }
    ck_assert_uint_eq(tc->unpacked_bytes, total);
}

static void ctx_free(test_ctx_t *tc)
{
    for (int i = 0; i < NITEMS; i++)
        free(tc->dst[i]);
}

/* A clean update v: begin (creating the communicator if needed), transfer, all bytes. */
static void clean_update(fixture_t *f, uint32_t v, int integrity)
{
    rf_err_t err;
    test_ctx_t tc;
    rf_err_clear(&err);
    rf_status_t st = begin(f, v, 120.0, &err);
    ck_assert_msg(st == RF_OK, "begin of update %u: %s", v, err.msg);
    st = transfer(f, v, integrity, RF_XFER_FAULT_NONE, 120.0, &tc, &err);
    ck_assert_msg(st == RF_OK, "transfer of update %u: %s", v, err.msg);
    expect_landed(&tc);
    const rf_xfer_stats_t *xs = rf_xfer_stats(f->x);
    const rf_chunk_plan_t *plan = integrity ? f->plan_integrity : f->plan;
    ck_assert_uint_eq(xs->chunks_received, plan->n_chunks);
    ck_assert_int_le(xs->max_inflight_chunks, 2);
    ck_assert_int_ge(xs->max_inflight_chunks, 2); /* the pipeline really ran two deep */
    ctx_free(&tc);
}

START_TEST(test_p2p_self)
{
    fixture_t f;
    rf_xfer_nccl_counters_t c;
    fixture_up(&f, 1);
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_int_eq(c.comms, 1);
    ck_assert_int_eq(c.ready, 0);
    double t0 = rf_time_now();
    clean_update(&f, next_update++, 0);
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_int_eq(c.ready, 1);
    ck_assert_uint_eq(c.inits, 1);
    ck_assert_uint_eq(c.aborts, 0);
    printf("nccl bench: p2p self: init %.3f s, first update %.3f s, %zu chunks\n", c.init_s,
           rf_time_now() - t0, f.plan->n_chunks);
    clean_update(&f, next_update++, 1); /* integrity trailer, same communicator */
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_uint_eq(c.inits, 1);
    fixture_down(&f);
}
END_TEST

START_TEST(test_broadcast_self)
{
    fixture_t f;
    rf_xfer_nccl_counters_t c;
    fixture_up(&f, 0);
    clean_update(&f, next_update++, 0);
    clean_update(&f, next_update++, 1);
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_uint_eq(c.inits, 1);
    ck_assert_uint_eq(c.aborts, 0);
    fixture_down(&f);
}
END_TEST

START_TEST(test_init_deadline)
{
    fixture_t f;
    rf_err_t err;
    rf_xfer_nccl_counters_t c;
    fixture_up(&f, 1);
    rf_err_clear(&err);
    /* the deadline has passed before the first poll of the non-blocking init */
    rf_status_t st = begin(&f, next_update++, -1.0, &err);
    ck_assert_msg(st == RF_ERR_TIMEOUT, "expected RF_ERR_TIMEOUT, got %s: %s",
                  rf_status_string(st), err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, "did not complete by the deadline"));
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_int_eq(c.ready, 0);
    ck_assert_uint_ge(c.aborts, 1);
    ck_assert_uint_eq(c.inits, 0);
    /* a transfer without communicators fails at once */
    test_ctx_t tc;
    rf_err_clear(&err);
    st = transfer(&f, next_update - 1, 0, RF_XFER_FAULT_NONE, 5.0, &tc, &err);
    ck_assert_int_eq(st, RF_ERR_NCCL);
    ck_assert_ptr_nonnull(strstr(err.msg, "communicators not initialized"));
    ctx_free(&tc);
    /* the next update re-creates it and lands every byte */
    clean_update(&f, next_update++, 0);
    rf_xfer_nccl_counters(f.x, &c);
    ck_assert_uint_eq(c.inits, 1);
    ck_assert_int_eq(c.ready, 1);
    fixture_down(&f);
}
END_TEST

/* A failed update, then recovery: the FAILED-verdict step (rf_xfer_nccl_fail) and a clean
 * update on a re-created communicator. */
static void fail_then_recover(fixture_t *f, rf_xfer_fault_t fault, double secs,
                              rf_status_t want1, rf_status_t want2, const char *msg)
{
    rf_err_t err;
    test_ctx_t tc;
    rf_xfer_nccl_counters_t c0, c;
    rf_err_clear(&err);
    uint32_t v = next_update++;
    ck_assert_int_eq(begin(f, v, 120.0, &err), RF_OK);
    rf_xfer_nccl_counters(f->x, &c0);
    double t0 = rf_time_now();
    rf_status_t st = transfer(f, v, 0, fault, secs, &tc, &err);
    double took = rf_time_now() - t0;
    ck_assert_msg(st == want1 || st == want2, "expected %s or %s, got %s: %s",
                  rf_status_string(want1), rf_status_string(want2), rf_status_string(st),
                  err.msg);
    if (msg != NULL)
        ck_assert_msg(strstr(err.msg, msg) != NULL, "message lacks '%s': %s", msg, err.msg);
    printf("nccl bench: fault ended after %.3f s: %s: %s\n", took, rf_status_string(st), err.msg);
    rf_xfer_nccl_counters(f->x, &c);
    ck_assert_int_eq(c.ready, 0);
    ck_assert_uint_gt(c.aborts, c0.aborts); /* ncclCommAbort ran before the error returned */
    ctx_free(&tc);
    rf_xfer_nccl_fail(f->x); /* what the job does after the FAILED verdict: nothing left */
    clean_update(f, next_update++, 0);
    rf_xfer_nccl_counters(f->x, &c);
    ck_assert_uint_eq(c.inits, c0.inits + 1);
}

START_TEST(test_duplicate)
{
    fixture_t f;
    fixture_up(&f, 1);
    clean_update(&f, next_update++, 0);
    rf_xfer_fault_t fault = RF_XFER_FAULT_NONE;
    fault.dup_seq = 2;
    fail_then_recover(&f, fault, 60.0, RF_ERR_SEQUENCE, RF_ERR_SEQUENCE,
                      "repeated chunk: header carries seq 2, expected 3");
    fixture_down(&f);
}
END_TEST

START_TEST(test_unmatched_recv)
{
    fixture_t f;
    fixture_up(&f, 1);
    clean_update(&f, next_update++, 0);
    rf_xfer_fault_t fault = RF_XFER_FAULT_NONE;
    fault.drop_seq = 3; /* chunk 3's ncclRecv is posted, its ncclSend never is */
    fail_then_recover(&f, fault, 3.0, RF_ERR_TIMEOUT, RF_ERR_NCCL, NULL);
    fixture_down(&f);
}
END_TEST

static Suite *nccl_suite(void)
{
    Suite *s = suite_create("nccl");
    struct {
        const char *name;
        const TTest *fn;
    } cases[] = {{"p2p_self", test_p2p_self},
                 {"broadcast_self", test_broadcast_self},
                 {"init_deadline", test_init_deadline},
                 {"duplicate", test_duplicate},
                 {"unmatched_recv", test_unmatched_recv}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, cases[i].fn);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!rf_xfer_nccl_built() || !rf_accel_cuda_available()) {
        fprintf(stderr, "check_nccl: refit built without NCCL or no CUDA device: skipped\n");
        MPI_Finalize();
        return 77;
    }
    if (size != 1) {
        fprintf(stderr, "check_nccl: one rank only (one-rank communicators on one GPU)\n");
        MPI_Finalize();
        return 1;
    }
    if (rf_accel_open("cuda", 0, &ax) != RF_OK) {
        fprintf(stderr, "check_nccl: cannot open CUDA device 0\n");
        MPI_Finalize();
        return 1;
    }
    SRunner *sr = srunner_create(nccl_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rf_accel_close(ax);
    MPI_Finalize();
    return failed == 0 ? 0 : 1;
}
