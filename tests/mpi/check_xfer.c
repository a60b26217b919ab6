/*
 * refit: MPI tests of the control channel, the pipelined transfer and the completion gate,
 * under mpiexec -np 4: ranks 0 and 1 send stages 0 and 1, ranks 2 and 3 receive everything.
 * Payload bytes encode (item, row, byte, update) so receivers verify every byte and every row.
 * Cases: clean update (>= 3 chunks per stage, max_inflight_chunks == 2), ABORT from one rank,
 * a sender that never sends (timeout at a 2 s deadline), a dropped and a duplicated chunk
 * (then drain and a committed update on the same ranks), a gate count mismatch, and the
 * sender's pack on its helper thread (send_spin 1, pack_thread): clean, a pack error, ABORT.
 * The tcases run in order in one process per rank (CK_FORK=no) and share one update counter.
 */
#include <check.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/transport.h"

#define NRANKS 4
#define CHUNK_BYTES (65536 + RF_CHUNK_HEADER_BYTES)
#define ROW 1000
#define NITEMS 8

static const int senders[2] = {0, 1};
static const int receivers[2] = {2, 3};

/* the test fixture, shared by the tcases (test code, not library code) */
static struct {
    int rank;
    rf_ctl_t *ctl;
    rf_xfer_t *x;
    rf_chunk_plan_t *plan;
    rf_chunk_item_t items[NITEMS];
    char names[NITEMS][32];
    uint32_t update;
    rf_gate_expect_t expect;
    pthread_t main_thread;
} T;

static unsigned char pattern(size_t item, uint64_t row, uint64_t byte, uint32_t update)
{
    return (unsigned char)(item * 131u + row * 31u + byte * 7u + update * 13u + (row >> 8));
}

typedef struct payload_ctx {
    uint32_t update;
    uint64_t rows_seen[NITEMS];
    uint64_t bad_bytes;
    int64_t fail_seq;      /* the pack fails on this chunk (-1: never) */
    uint64_t packs_beside; /* packs that ran on another thread than the test's */
} payload_ctx_t;

static rf_status_t pack(void *vctx, const rf_chunk_t *chunk, const rf_chunk_piece_t *pieces,
                        void *payload, rf_chunk_sum_t *sum, rf_err_t *err)
{
    (void)sum; /* no integrity here: the seal from a pack's sum is tested through refit-run */
    payload_ctx_t *c = vctx;
    unsigned char *p = payload;
    c->packs_beside += !pthread_equal(pthread_self(), T.main_thread);
    if ((int64_t)chunk->seq == c->fail_seq)
        return rf_err_set(err, RF_ERR_IO, "test pack: chunk seq %u cannot be read", chunk->seq);
    for (size_t j = 0; j < chunk->piece_count; j++) {
        const rf_chunk_piece_t *pc = &pieces[j];
        for (uint64_t r = pc->row_begin; r < pc->row_end; r++)
            for (uint64_t b = 0; b < ROW; b++)
                p[pc->offset + (r - pc->row_begin) * ROW + b] = pattern(pc->item, r, b, c->update);
    }
    return RF_OK;
}

static rf_status_t unpack(void *vctx, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                          size_t nsegs, const void *payload, rf_err_t *err)
{
    payload_ctx_t *c = vctx;
    const unsigned char *p = payload;
    ck_assert_uint_eq(nsegs, chunk->piece_count);
    for (size_t j = 0; j < chunk->piece_count; j++) {
        const rf_chunk_piece_t *pc = segs[j].piece;
        for (uint64_t r = pc->row_begin; r < pc->row_end; r++)
            for (uint64_t b = 0; b < ROW; b++)
                if (p[pc->offset + (r - pc->row_begin) * ROW + b] !=
                    pattern(pc->item, r, b, c->update))
                    c->bad_bytes++;
        c->rows_seen[pc->item] += pc->row_end - pc->row_begin;
    }
    if (c->bad_bytes)
        return rf_err_set(err, RF_ERR_VERIFY, "chunk seq %u: %llu bad bytes", chunk->seq,
                          (unsigned long long)c->bad_bytes);
    return RF_OK;
}

typedef enum { ACT_NORMAL, ACT_ABORT, ACT_SILENT } action_t;

typedef struct run_opts {
    double timeout_s;
    rf_xfer_fault_t fault[NRANKS]; /* per sender rank */
    action_t act[NRANKS];
    int lie_rank;                  /* rank that reports one chunk fewer from rank 0, or -1 */
    int pack_thread;               /* rf_xfer_config_t.pack_thread */
    int64_t pack_fail_seq;         /* the senders' pack fails on this chunk, or -1 */
} run_opts_t;

typedef struct run_result {
    rf_status_t st;       /* this rank's transfer status */
    rf_err_t err;
    double elapsed;
    rf_status_t gate_st;
    int committed;
    int verdict_rank;
    rf_status_t verdict_code;
    char verdict_reason[RF_ERR_MSG_MAX];
    rf_status_t drain_st;
    payload_ctx_t pc;
    int max_inflight;
    /* gathered over ranks */
    int all_st[NRANKS];
    int all_committed[NRANKS];
    int all_vrank[NRANKS];
    int all_drain[NRANKS];
} run_result_t;

static void opts_init(run_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_s = 60;
    for (int r = 0; r < NRANKS; r++)
        o->fault[r] = RF_XFER_FAULT_NONE;
    o->lie_rank = -1;
    o->pack_fail_seq = -1;
}

/* One full update on every rank: begin, agree, transfer, gate, drain on FAILED. Collective. */
static void run_update(const run_opts_t *o, run_result_t *res)
{
    memset(res, 0, sizeof(*res));
    const uint32_t v = ++T.update;
    rf_err_t err;
    rf_err_clear(&err);
    rf_err_clear(&res->err);
    res->pc.fail_seq = o->pack_fail_seq;
    ck_assert_int_eq(rf_ctl_begin(T.ctl, v, &err), RF_OK);
    double deadline = rf_deadline_for_update(o->timeout_s, 1.0, T.plan->payload_bytes, 0);
    ck_assert_int_eq(rf_ctl_agree(T.ctl, v, RF_OK, NULL, deadline, &err), RF_OK);
    ck_assert_int_eq(rf_xfer_begin(T.x, v, deadline, &err), RF_OK);
    rf_xfer_config_t cfg = {v, T.plan, senders, receivers, 2, deadline,      o->fault[T.rank],
                            0, NULL,   0,       NULL,      0, o->pack_thread};
    res->pc.update = v;
    double t0 = rf_time_now();
    switch (o->act[T.rank]) {
    case ACT_ABORT:
        rf_err_set(&res->err, RF_ERR_VERIFY, "rank %d: test abort", T.rank);
        res->st = RF_ERR_VERIFY;
        rf_ctl_abort(T.ctl, res->st, res->err.msg);
        break;
    case ACT_SILENT:
        res->st = RF_OK;
        break;
    case ACT_NORMAL:
        if (T.rank < 2)
            res->st = rf_xfer_send(T.x, &cfg, pack, &res->pc, &res->err);
        else
            res->st = rf_xfer_recv(T.x, &cfg, unpack, &res->pc, &res->err);
        break;
    }
    res->elapsed = rf_time_now() - t0;
    const rf_xfer_stats_t *xs = rf_xfer_stats(T.x);
    res->max_inflight = xs->max_inflight_chunks;

    rf_peer_counts_t peers[NRANKS];
    memcpy(peers, xs->peers, sizeof(peers));
    if (T.rank == o->lie_rank)
        peers[0].chunks_recv--;
    rf_gate_record_t rec;
    memset(&rec, 0, sizeof(rec));
    rf_gate_record_set_result(&rec, T.ctl, res->st, &res->err);
    rec.nranks = NRANKS;
    rec.peers = peers;
    rec.manifest_digest = 0x1234abcdull;
    rec.mode_layers[RF_GATE_DIRECT] = rec.plan_mode_layers[RF_GATE_DIRECT] = T.rank >= 2 ? 5 : 0;
    rf_gate_verdict_t verdict;
    rf_err_t gerr;
    rf_err_clear(&gerr);
    res->gate_st = rf_gate_run(T.ctl, v, &rec, T.rank == 0 ? &T.expect : NULL, deadline,
                               &verdict, &gerr);
    res->committed = verdict.committed;
    res->verdict_rank = verdict.rank;
    res->verdict_code = verdict.code;
    snprintf(res->verdict_reason, sizeof(res->verdict_reason), "%s", verdict.reason);
    res->drain_st = RF_OK;
    if (!verdict.committed) {
        rf_err_t derr;
        rf_err_clear(&derr);
        res->drain_st = rf_xfer_drain(T.x, verdict.posted_from, rf_time_now() + 30, &derr);
        if (res->drain_st != RF_OK)
            fprintf(stderr, "rank %d: drain: %s\n", T.rank, derr.msg);
    }
    rf_gate_verdict_fini(&verdict);
    int mine[4] = {res->st, res->committed, res->verdict_rank, res->drain_st};
    int all[4 * NRANKS];
    MPI_Allgather(mine, 4, MPI_INT, all, 4, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < NRANKS; r++) {
        res->all_st[r] = all[4 * r];
        res->all_committed[r] = all[4 * r + 1];
        res->all_vrank[r] = all[4 * r + 2];
        res->all_drain[r] = all[4 * r + 3];
    }
    if (res->st != RF_OK || !res->committed)
        fprintf(stderr, "rank %d update %u: status %s (%s); verdict %s rank %d: %s\n", T.rank,
                v, rf_status_name(res->st), res->err.msg, res->committed ? "COMMITTED" : "FAILED",
                res->verdict_rank, res->verdict_reason);
}

static void assert_clean(const run_result_t *res)
{
    for (int r = 0; r < NRANKS; r++) {
        ck_assert_int_eq(res->all_st[r], RF_OK);
        ck_assert_int_eq(res->all_committed[r], 1);
        ck_assert_int_eq(res->all_vrank[r], -1);
    }
    ck_assert_int_eq(res->gate_st, RF_OK);
    ck_assert_int_eq(res->max_inflight, 2);
    const rf_xfer_stats_t *xs = rf_xfer_stats(T.x);
    if (T.rank >= 2) {
        ck_assert_uint_eq(res->pc.bad_bytes, 0);
        for (int i = 0; i < NITEMS; i++)
            ck_assert_uint_eq(res->pc.rows_seen[i], T.items[i].rows);
        ck_assert_uint_eq(xs->chunks_received, T.plan->n_chunks);
        ck_assert_uint_eq(xs->peers[0].chunks_recv, T.plan->stages[0].chunk_count);
        ck_assert_uint_eq(xs->peers[1].chunks_recv, T.plan->stages[1].chunk_count);
    } else {
        ck_assert_uint_eq(xs->chunks_sent, 2 * T.plan->stages[T.rank].chunk_count);
    }
}

static void assert_failed_everywhere(const run_result_t *res, int lo, int hi)
{
    for (int r = 0; r < NRANKS; r++) {
        ck_assert_int_eq(res->all_committed[r], 0);
        ck_assert_int_eq(res->all_vrank[r], res->all_vrank[0]);
        ck_assert_int_eq(res->all_drain[r], RF_OK);
    }
    ck_assert_int_ge(res->all_vrank[0], lo);
    ck_assert_int_le(res->all_vrank[0], hi);
    ck_assert_int_ne(res->gate_st, RF_OK);
}

START_TEST(test_clean)
{
    ck_assert_uint_ge(T.plan->stages[0].chunk_count, 3);
    ck_assert_uint_ge(T.plan->stages[1].chunk_count, 3);
    run_opts_t o;
    opts_init(&o);
    run_result_t res;
    run_update(&o, &res);
    assert_clean(&res);
    /* and again on the same ranks and buffers */
    run_update(&o, &res);
    assert_clean(&res);
}
END_TEST

START_TEST(test_abort)
{
    run_opts_t o;
    opts_init(&o);
    o.act[3] = ACT_ABORT;
    run_result_t res;
    run_update(&o, &res);
    if (T.rank != 3) {
        ck_assert_int_eq(res.st, RF_ERR_PEER);
        ck_assert_msg(strstr(res.err.msg, "rank 3 aborted") != NULL, "message: %s", res.err.msg);
        ck_assert_msg(strstr(res.err.msg, "test abort") != NULL, "message: %s", res.err.msg);
        ck_assert_double_lt(res.elapsed, 10.0); /* the deadline is 60 s away */
    }
    assert_failed_everywhere(&res, 3, 3);
    ck_assert_int_eq(res.verdict_code, RF_ERR_VERIFY);
    ck_assert_ptr_nonnull(strstr(res.verdict_reason, "test abort"));
    /* the next update commits */
    opts_init(&o);
    run_update(&o, &res);
    assert_clean(&res);
}
END_TEST

START_TEST(test_timeout)
{
    run_opts_t o;
    opts_init(&o);
    o.timeout_s = 2.0;
    o.act[1] = ACT_SILENT; /* the stage 1 sender never sends */
    run_result_t res;
    double t0 = rf_time_now();
    run_update(&o, &res);
    double total = rf_time_now() - t0;
    if (T.rank >= 2) {
        ck_assert_msg(res.st == RF_ERR_TIMEOUT || res.st == RF_ERR_PEER, "status %s",
                      rf_status_name(res.st));
        ck_assert_msg(strstr(res.err.msg, res.st == RF_ERR_TIMEOUT ? "stage 1" : "deadline") !=
                          NULL,
                      "message: %s", res.err.msg);
        ck_assert_double_ge(res.elapsed, 1.5);
        ck_assert_double_lt(res.elapsed, 6.0);
    }
    ck_assert_double_lt(total, 2.0 + RF_GATE_GRACE_S + 6.0);
    assert_failed_everywhere(&res, 2, 3);
    ck_assert_int_eq(res.verdict_code, RF_ERR_TIMEOUT);
    ck_assert_ptr_nonnull(strstr(res.verdict_reason, "from rank 1"));
    opts_init(&o);
    run_update(&o, &res);
    assert_clean(&res);
}
END_TEST

START_TEST(test_drop)
{
    run_opts_t o;
    opts_init(&o);
    o.fault[0].drop_seq = 1;
    o.fault[0].dest = 3;
    run_result_t res;
    run_update(&o, &res);
    if (T.rank == 3) {
        ck_assert_int_eq(res.st, RF_ERR_SEQUENCE);
        ck_assert_msg(strstr(res.err.msg, "chunk seq 1 (stage 0) from rank 0") != NULL &&
                          strstr(res.err.msg, "gap") != NULL,
                      "message: %s", res.err.msg);
    }
    assert_failed_everywhere(&res, 3, 3);
    ck_assert_int_eq(res.verdict_code, RF_ERR_SEQUENCE);
    ck_assert_ptr_nonnull(strstr(res.verdict_reason, "chunk seq 1"));
    /* after drain the next update on the same ranks commits */
    opts_init(&o);
    run_update(&o, &res);
    assert_clean(&res);
}
END_TEST

START_TEST(test_duplicate)
{
    uint32_t dup = T.plan->stages[1].chunk_begin + 1;
    run_opts_t o;
    opts_init(&o);
    o.fault[1].dup_seq = dup;
    run_result_t res;
    run_update(&o, &res);
    if (T.rank >= 2 && res.st != RF_ERR_PEER) {
        ck_assert_int_eq(res.st, RF_ERR_SEQUENCE);
        char want[64];
        snprintf(want, sizeof(want), "chunk seq %u (stage 1)", dup + 1);
        ck_assert_msg(strstr(res.err.msg, want) != NULL && strstr(res.err.msg, "repeated"),
                      "message: %s", res.err.msg);
    }
    assert_failed_everywhere(&res, 2, 3);
    ck_assert_int_eq(res.verdict_code, RF_ERR_SEQUENCE);
    ck_assert_ptr_nonnull(strstr(res.verdict_reason, "repeated"));
    opts_init(&o);
    run_update(&o, &res);
    assert_clean(&res);
}
END_TEST

START_TEST(test_gate_count_mismatch)
{
    run_opts_t o;
    opts_init(&o);
    o.lie_rank = 3;
    run_result_t res;
    run_update(&o, &res);
    for (int r = 0; r < NRANKS; r++)
        ck_assert_int_eq(res.all_st[r], RF_OK); /* the transfer itself was fine */
    assert_failed_everywhere(&res, 3, 3);
    ck_assert_int_eq(res.verdict_code, RF_ERR_MISMATCH);
    char want[96];
    snprintf(want, sizeof(want), "rank 3 received %u chunks", T.plan->stages[0].chunk_count - 1);
    ck_assert_msg(strstr(res.verdict_reason, want) != NULL, "reason: %s", res.verdict_reason);
    opts_init(&o);
    run_update(&o, &res);
    assert_clean(&res);
}
END_TEST

/* send_spin on this rank's transfer (rf_xfer_setup; collective) */
static void set_send_spin(int on)
{
    rf_err_t err;
    rf_err_clear(&err);
    rf_xfer_setup_t xs = {.device = -1, .pair = -1, .send_spin = on};
    ck_assert_int_eq(rf_xfer_setup(T.x, &xs, &err), RF_OK);
}

START_TEST(test_pack_thread)
{
    set_send_spin(1);
    run_opts_t o;
    opts_init(&o);
    o.pack_thread = 1;
    run_result_t res;
    run_update(&o, &res);
    assert_clean(&res);
    if (T.rank < 2) /* every chunk packed on the helper thread */
        ck_assert_uint_eq(res.pc.packs_beside, T.plan->stages[T.rank].chunk_count);
    /* a pack that fails (a checkpoint read, say) fails the update with its text, everywhere */
    o.pack_fail_seq = T.plan->stages[1].chunk_begin + 2;
    run_update(&o, &res);
    if (T.rank == 1) {
        ck_assert_int_eq(res.st, RF_ERR_IO);
        ck_assert_msg(strstr(res.err.msg, "cannot be read") != NULL &&
                          strstr(res.err.msg, "stage 1") != NULL,
                      "message: %s", res.err.msg);
    }
    assert_failed_everywhere(&res, 1, 1);
    ck_assert_int_eq(res.verdict_code, RF_ERR_IO);
    /* a receiver's ABORT while the senders pack beside the wire */
    opts_init(&o);
    o.pack_thread = 1;
    o.act[3] = ACT_ABORT;
    run_update(&o, &res);
    if (T.rank < 2 && res.st != RF_OK)
        ck_assert_int_eq(res.st, RF_ERR_PEER);
    assert_failed_everywhere(&res, 3, 3);
    /* after the drains the same ranks commit, the thread's bytes checked by the receivers */
    opts_init(&o);
    o.pack_thread = 1;
    run_update(&o, &res);
    assert_clean(&res);
    set_send_spin(0);
    /* without send_spin the pack stays on the calling thread */
    run_update(&o, &res);
    assert_clean(&res);
    ck_assert_uint_eq(res.pc.packs_beside, 0);
}
END_TEST

static void setup_fixture(void)
{
    rf_err_t err;
    rf_err_clear(&err);
    MPI_Comm_rank(MPI_COMM_WORLD, &T.rank);
    T.main_thread = pthread_self();
    /* per stage: a 100-row tensor split in two, then 30 + 20 rows together, then 40 rows */
    static const uint64_t rows[4] = {100, 30, 20, 40};
    for (int i = 0; i < NITEMS; i++) {
        snprintf(T.names[i], sizeof(T.names[i]), "stage%d.t%d", i / 4, i % 4);
        T.items[i] = (rf_chunk_item_t){i / 4, rows[i % 4], ROW, rows[i % 4] * ROW, T.names[i]};
    }
    if (rf_chunk_plan_create(T.items, NITEMS, CHUNK_BYTES, &T.plan, &err) != RF_OK ||
        rf_ctl_create(MPI_COMM_WORLD, &T.ctl, &err) != RF_OK ||
        rf_xfer_create(T.ctl, "mpi", CHUNK_BYTES, 2, &T.x, &err) != RF_OK ||
        rf_gate_expect_init(&T.expect, NRANKS, &err) != RF_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t k = 0; k < T.plan->n_chunks; k++) {
        const rf_chunk_t *c = &T.plan->chunks[k];
        for (int i = 0; i < 2; i++) {
            size_t idx = (size_t)senders[c->stage] * NRANKS + (size_t)receivers[i];
            T.expect.chunks[idx]++;
            T.expect.bytes[idx] += RF_CHUNK_HEADER_BYTES + c->payload_bytes;
        }
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != NRANKS) {
        fprintf(stderr, "check_xfer needs %d ranks, got %d\n", NRANKS, size);
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    setup_fixture();

    Suite *s = suite_create("xfer");
#define ADD_CASE(name, fn)                                                                 \
    do {                                                                                   \
        TCase *tc = tcase_create(name);                                                    \
        tcase_set_timeout(tc, 120);                                                        \
        tcase_add_test(tc, fn);                                                            \
        suite_add_tcase(s, tc);                                                            \
    } while (0)
    ADD_CASE("clean", test_clean);
    ADD_CASE("abort", test_abort);
    ADD_CASE("timeout", test_timeout);
    ADD_CASE("drop", test_drop);
    ADD_CASE("duplicate", test_duplicate);
    ADD_CASE("gate", test_gate_count_mismatch);
    ADD_CASE("pack_thread", test_pack_thread);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);

    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rf_gate_expect_fini(&T.expect);
    rf_xfer_destroy(T.x);
    rf_ctl_destroy(T.ctl);
    rf_chunk_plan_destroy(T.plan);
    MPI_Finalize();
    return any ? EXIT_FAILURE : EXIT_SUCCESS;
}
