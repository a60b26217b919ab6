/* MPI test: the offline plan (include/refit/session.h, rf_session_offline_*: refit-plan's
 * source) equals what a real session agrees. argv[1]: a topology; argv[2] (optional):
 * "layerwise" (both with rf_session_options_t.layerwise = 1) or "auto"; argv[3] (optional):
 * the JSON that `refit-plan --topology argv[1] --json` wrote (its plan hash, totals and rows
 * must be the session's too).
 *
 * Every rank creates a session over MPI_COMM_WORLD (np = the topology's trainer + rollout
 * ranks), registers every tensor rf_session_expected lists (zeros, contiguous, host; no F32
 * masters) and plans: rf_session_plan_info_t. Every rank then plans the topology offline, in
 * its own process, and checks that layers[3], hash, manifest_digest, tensors, payload_bytes
 * and narrowed are the session's; that the offline rows (one per rollout rank) sum to the
 * session's totals; that the other policy gives another hash where it changes a decision; and the offline
 * API's refusals (a trainer rank or a rank past the last, NULL arguments, an unreadable
 * topology, an unknown format owner) with their texts. CK_FORK=no. */
#include <check.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/dtype.h"
#include "refit/refit.h"

static const char *topo_path, *json_path;
static int layerwise;
static int rank, size;

/* Create, register zeros for every expected tensor, plan. Collective. *bufs_p: to free. */
static rf_session_t *session_plan(rf_session_plan_info_t *info, void ***bufs_p, int *n_p)
{
    rf_session_options_t opt = {.layerwise = layerwise};
    rf_session_t *s = NULL;
    rf_status_t st = rf_session_create(MPI_COMM_WORLD, topo_path, &opt, &s);
    ck_assert_msg(st == RF_OK, "rank %d: rf_session_create: %s", rank,
                  rf_session_last_error(NULL));
    int n = rf_session_expected_count(s);
    void **bufs = calloc((size_t)n + 1, sizeof(void *));
    rf_tensor_desc_t *d = calloc((size_t)n + 1, sizeof(*d));
    ck_assert(bufs != NULL && d != NULL);
    for (int i = 0; i < n; i++) {
        d[i].name = rf_session_expected(s, i, &d[i].dtype, &d[i].ndim, d[i].shape);
        ck_assert_ptr_nonnull(d[i].name);
        uint64_t numel = 1;
        for (int k = d[i].ndim - 1; k >= 0; k--) {
            d[i].strides[k] = (int64_t)numel;
            numel *= (uint64_t)d[i].shape[k];
        }
        bufs[i] = calloc(numel * rf_dtype_size(rf_dtype_parse(d[i].dtype)) + 1, 1);
        ck_assert_ptr_nonnull(bufs[i]);
        d[i].data = bufs[i];
        d[i].device = -1;
    }
    st = rf_session_register(s, d, n);
    ck_assert_msg(st == RF_OK, "rank %d: register: %s", rank, rf_session_last_error(s));
    free(d);
    memset(info, 0, sizeof(*info));
    st = rf_session_plan(s, info);
    ck_assert_msg(st == RF_OK, "rank %d: rf_session_plan: %s", rank, rf_session_last_error(s));
    *bufs_p = bufs;
    *n_p = n;
    return s;
}

/* The value of "key": "<16 hex digits>" in text, or 0 and *found false. */
static uint64_t json_hex(const char *text, const char *key, bool *found)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\": \"", key);
    const char *p = strstr(text, pat);
    *found = p != NULL;
    return p != NULL ? strtoull(p + strlen(pat), NULL, 16) : 0;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: cannot open", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    char *buf = calloc((size_t)n + 1, 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return buf;
}

START_TEST(test_offline_equals_session)
{
    rf_session_plan_info_t real;
    void **bufs;
    int nbufs;
    rf_session_t *s = session_plan(&real, &bufs, &nbufs);
    /* the rest is local: a failed check on one rank leaves no other waiting */
    rf_session_destroy(s);
    for (int i = 0; i < nbufs; i++)
        free(bufs[i]);
    free(bufs);
    rf_session_options_t opt = {.layerwise = layerwise};
    rf_session_offline_t *o = NULL;
    rf_status_t st = rf_session_offline_open(topo_path, &opt, NULL, &o);
    ck_assert_msg(st == RF_OK, "rank %d: offline open: %s", rank,
                  rf_session_offline_last_error(NULL));
    const rf_session_offline_desc_t *d = rf_session_offline_describe(o);
    ck_assert_int_eq(d->trainer_ranks + d->rollout_ranks, size);
    rf_session_plan_info_t off;
    memset(&off, 0xa5, sizeof(off));
    st = rf_session_offline_plan(o, &off);
    ck_assert_msg(st == RF_OK, "rank %d: offline plan: %s", rank, rf_session_offline_last_error(o));
    for (int k = 0; k < 3; k++)
        ck_assert_msg(off.layers[k] == real.layers[k], "rank %d: layers[%d]: offline %llu, "
                      "session %llu", rank, k, (unsigned long long)off.layers[k],
                      (unsigned long long)real.layers[k]);
    ck_assert_msg(off.hash == real.hash, "rank %d: plan hash: offline %016llx, session %016llx",
                  rank, (unsigned long long)off.hash, (unsigned long long)real.hash);
    ck_assert_msg(off.manifest_digest == real.manifest_digest, "rank %d: manifest digest", rank);
    ck_assert_int_eq(off.tensors, real.tensors);
    ck_assert_uint_eq(off.payload_bytes, real.payload_bytes);
    ck_assert_int_eq(off.narrowed, 0);
    ck_assert_int_eq(real.narrowed, 0);
    ck_assert_uint_gt(real.layers[0] + real.layers[1] + real.layers[2], 0);
    /* per rank: the rows sum to the totals; each row's layers is its modes' sum */
    uint64_t sum[3] = {0, 0, 0};
    for (int r = d->trainer_ranks; r < size; r++) {
        rf_session_rank_plan_t p;
        ck_assert_int_eq(rf_session_offline_plan_rank(o, r, &p), RF_OK);
        ck_assert_int_eq(p.rank, r);
        ck_assert_uint_eq(p.layers[0] + p.layers[1] + p.layers[2], (uint64_t)p.nlayers);
        ck_assert_uint_gt(p.storage_bytes, 0);
        for (int k = 0; k < 3; k++)
            sum[k] += p.layers[k];
    }
    for (int k = 0; k < 3; k++)
        ck_assert_uint_eq(sum[k], real.layers[k]);
    /* the other policy: another hash wherever it changes a decision */
    rf_session_options_t other = {.layerwise = !layerwise};
    rf_session_offline_t *o2 = NULL;
    ck_assert_int_eq(rf_session_offline_open(topo_path, &other, NULL, &o2), RF_OK);
    rf_session_plan_info_t off2;
    ck_assert_int_eq(rf_session_offline_plan(o2, &off2), RF_OK);
    bool changed = memcmp(off2.layers, off.layers, sizeof(off.layers)) != 0;
    if (changed)
        ck_assert_msg(off2.hash != off.hash, "rank %d: the %s plan has the same hash", rank,
                      layerwise ? "auto" : "layerwise");
    if (!layerwise) /* layerwise: every layer LAYERWISE */
        ck_assert_uint_eq(off2.layers[2], off.layers[0] + off.layers[1] + off.layers[2]);
    ck_assert_uint_eq(off2.manifest_digest, off.manifest_digest);
    rf_session_offline_close(o2);
    /* refit-plan's JSON: the same hash and totals */
    if (json_path != NULL && rank == 0) {
        char *text = read_all(json_path);
        bool found;
        uint64_t h = json_hex(text, "hash", &found);
        ck_assert_msg(found, "%s: no \"hash\"", json_path);
        ck_assert_msg(h == real.hash, "refit-plan's hash %016llx, the session's %016llx",
                      (unsigned long long)h, (unsigned long long)real.hash);
        uint64_t md = json_hex(text, "manifest_digest", &found);
        ck_assert(found);
        ck_assert_uint_eq(md, real.manifest_digest);
        char want[128];
        snprintf(want, sizeof(want), "\"direct\": %llu,\n  \"runtime_view\": %llu,\n  "
                 "\"layerwise\": %llu", (unsigned long long)real.layers[0],
                 (unsigned long long)real.layers[1], (unsigned long long)real.layers[2]);
        ck_assert_msg(strstr(text, want) != NULL, "%s lacks the session's totals: %s",
                      json_path, want);
        free(text);
    }
    /* refusals */
    rf_session_rank_plan_t p;
    ck_assert_int_eq(rf_session_offline_plan_rank(o, 0, &p), RF_ERR_INVALID); /* a trainer */
    ck_assert_ptr_nonnull(strstr(rf_session_offline_last_error(o), "not a rollout rank"));
    ck_assert_int_eq(rf_session_offline_plan_rank(o, size, &p), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_offline_plan_rank(o, d->trainer_ranks, NULL), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_offline_plan(o, NULL), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_offline_plan(NULL, &off), RF_ERR_INVALID);
    ck_assert_ptr_null(rf_session_offline_describe(NULL));
    rf_session_offline_close(o);
    rf_session_offline_close(NULL);
    ck_assert_int_eq(rf_session_offline_open(topo_path, NULL, NULL, NULL), RF_ERR_INVALID);
    st = rf_session_offline_open("/nonexistent/refit-offline.yaml", NULL, NULL, &o);
    ck_assert_int_eq(st, RF_ERR_IO);
    ck_assert_ptr_null(o);
    ck_assert_ptr_nonnull(strstr(rf_session_offline_last_error(NULL),
                                 "/nonexistent/refit-offline.yaml"));
    st = rf_session_offline_open(topo_path, NULL, "no-such-owner", &o);
    ck_assert_int_eq(st, RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(rf_session_offline_last_error(NULL), "no-such-owner"));
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiexec -np N check_session_offline TOPOLOGY "
                            "[auto|layerwise] [REFIT_PLAN_JSON]\n");
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    topo_path = argv[1];
    layerwise = argc > 2 && strcmp(argv[2], "layerwise") == 0;
    json_path = argc > 3 ? argv[3] : NULL;
    Suite *s = suite_create("session_offline");
    TCase *tc = tcase_create("session_offline");
    tcase_add_test(tc, test_offline_equals_session);
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
