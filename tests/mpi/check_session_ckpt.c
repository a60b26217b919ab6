/* MPI test: rf_session_register_checkpoint (include/refit/session.h) on the tests/data
 * llama-tiny fixture, under the topology argv[1]. argv[2]: the fixture's safetensors directory,
 * argv[3]: the same checkpoint as HDF5 (refit-convert writes it at test time), argv[4]: another
 * model's checkpoint directory. Trainer ranks register a checkpoint, rollout ranks their engine
 * tensors (a sentinel); after each COMMITTED update every engine element must be what the
 * oracle's verification (rf_verify_slot, runtime/verify.c) says the loaders make of the
 * checkpoint's bytes. A bad path, another model's checkpoint and a rollout rank's call are
 * refused naming the path on the calling rank, and the plan carries the text to every rank
 * with the engine untouched; the session stays usable. CK_FORK=no. */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/checkpoint.h"
#include "refit/hashes.h"
#include "refit/model.h"
#include "refit/refit.h"
#include "refit/topology.h"
#include "refit/verify.h"

#define SENTINEL 0xa5

static const char *topo_path, *st_dir, *h5_path, *other_dir;
static int rank, size;
static rf_topology_t topo;
static rf_model_config_t cfg;
static rf_inventory_t inv;
static rf_rank_info_t me;

typedef struct eng {
    rf_session_t *s;
    int n;
    void **buf;
    size_t *bytes;
    rf_tensor_desc_t *descs;
} eng_t;

/* A session; on rollout ranks the engine's tensors, filled with the sentinel. */
static void eng_open(eng_t *x)
{
    memset(x, 0, sizeof(*x));
    ck_assert_msg(rf_session_create(MPI_COMM_WORLD, topo_path, NULL, &x->s) == RF_OK, "%s",
                  rf_session_last_error(NULL));
    if (me.role != RF_ROLE_ROLLOUT)
        return;
    x->n = rf_session_expected_count(x->s);
    x->buf = calloc((size_t)x->n, sizeof(void *));
    x->bytes = calloc((size_t)x->n, sizeof(size_t));
    x->descs = calloc((size_t)x->n, sizeof(rf_tensor_desc_t));
    for (int i = 0; i < x->n; i++) {
        rf_tensor_desc_t *d = &x->descs[i];
        d->name = rf_session_expected(x->s, i, &d->dtype, &d->ndim, d->shape);
        uint64_t numel = 1;
        for (int k = d->ndim - 1; k >= 0; k--) {
            d->strides[k] = (int64_t)numel;
            numel *= (uint64_t)d->shape[k];
        }
        x->bytes[i] = numel * rf_dtype_size(rf_dtype_parse(d->dtype));
        x->buf[i] = malloc(x->bytes[i] + 1);
        memset(x->buf[i], SENTINEL, x->bytes[i]);
        d->data = x->buf[i];
        d->device = -1;
    }
    ck_assert_msg(rf_session_register(x->s, x->descs, x->n) == RF_OK, "%s",
                  rf_session_last_error(x->s));
}

static void eng_close(eng_t *x)
{
    rf_session_destroy(x->s);
    for (int i = 0; i < x->n; i++)
        free(x->buf[i]);
    free(x->buf);
    free(x->bytes);
    free(x->descs);
}

/* The checkpoint's whole tensors, read on demand for rf_verify_slot. */
typedef struct ck_bytes {
    rf_ckpt_t *ck;
    char **t;
} ck_bytes_t;

static const void *ck_tensor(void *ctx, int ti)
{
    ck_bytes_t *c = ctx;
    if (c->t[ti] == NULL) {
        rf_err_t err;
        rf_err_clear(&err);
        const rf_st_entry_t *e = rf_ckpt_find(c->ck, inv.tensors[ti].name);
        ck_assert_ptr_nonnull(e);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        c->t[ti] = malloc(e->nbytes + 1);
        ck_assert_msg(rf_ckpt_read(c->ck, e, 0, rows, 0, rb, c->t[ti], rb, &err) == RF_OK, "%s",
                      err.msg);
    }
    return c->t[ti];
}

/* Rollout: engine elements that differ from the loaders' result for the checkpoint at path. */
static uint64_t rollout_mismatches(const eng_t *x, const char *path)
{
    rf_err_t err;
    ck_bytes_t c = {NULL, calloc((size_t)inv.ntensors, sizeof(char *))};
    rf_err_clear(&err);
    ck_assert_msg(rf_ckpt_open(path, &c.ck, &err) == RF_OK, "%s", err.msg);
    uint64_t nbad = 0;
    int i = 0;
    for (int m = 0; m < inv.nmodules; m++) {
        rf_slot_shape_t sh[RF_MODULE_MAX_SLOTS];
        int ns;
        ck_assert_msg(rf_module_slots(&inv, m, &me.rc, sh, &ns, &err) == RF_OK, "%s", err.msg);
        for (int k = 0; k < ns; k++, i++) {
            uint64_t mism = 0;
            ck_assert_int_lt(i, x->n);
            /* counted, not asserted here: every rank asserts on the agreed count */
            if (rf_verify_slot(&inv, m, k, &me.rc, x->buf[i], x->bytes[i], ck_tensor, &c, &mism,
                               &err) != RF_OK) {
                fprintf(stderr, "rank %d: %s: %s\n", rank, x->descs[i].name, err.msg);
                mism += mism == 0;
            }
            rf_err_clear(&err);
            nbad += mism;
        }
    }
    ck_assert_int_eq(i, x->n);
    for (int t = 0; t < inv.ntensors; t++)
        free(c.t[t]);
    free(c.t);
    rf_ckpt_close(c.ck);
    return nbad;
}

/* The largest of every rank's v: an assertion on it fails on every rank alike (a failure on
 * one rank alone would leave the others in the next collective). */
static uint64_t max_everywhere(uint64_t v)
{
    uint64_t m = 0;
    MPI_Allreduce(&v, &m, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static uint64_t rollout_hash(const eng_t *x)
{
    uint64_t h = 0;
    for (int i = 0; i < x->n; i++)
        h ^= rf_hash64(x->buf[i], x->bytes[i]) + (uint64_t)i * 0x9e3779b97f4a7c15ull;
    return h;
}

/* Every rank holds the same text and it contains `needle`. */
static void same_text_everywhere(const char *text, const char *needle)
{
    uint64_t h = rf_hash64_str(text), lo, hi;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(lo == hi, "rank %d: the ranks' texts differ; mine: %s", rank, text);
    ck_assert_msg(strstr(text, needle) != NULL, "'%s' does not name '%s'", text, needle);
}

/* Two updates from the checkpoint at path: the engine holds its bytes after each. */
static void updates_from(const char *path)
{
    eng_t x;
    rf_session_result_t r;
    eng_open(&x);
    if (me.role == RF_ROLE_TRAINER) {
        ck_assert_msg(rf_session_register_checkpoint(x.s, path) == RF_OK, "%s",
                      rf_session_last_error(x.s));
        /* once per rank: a second registration is refused naming the path */
        ck_assert_int_eq(rf_session_register_checkpoint(x.s, path), RF_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), path));
    }
    rf_session_plan_info_t pi;
    /* the refused second registration is remembered: the plan fails on every rank, once */
    ck_assert_int_eq(rf_session_plan(x.s, &pi), RF_ERR_INVALID);
    same_text_everywhere(rf_session_last_error(x.s), "registered on this rank already");
    ck_assert_msg(rf_session_plan(x.s, &pi) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(pi.tensors, inv.ntensors);
    for (uint64_t v = 1; v <= 2; v++) {
        ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
        ck_assert_msg(r.committed, "rank %d: update %llu FAILED: %s", rank,
                      (unsigned long long)v, r.reason);
        ck_assert_uint_eq(r.version, v);
        uint64_t nbad =
            max_everywhere(me.role == RF_ROLE_ROLLOUT ? rollout_mismatches(&x, path) : 0);
        ck_assert_msg(nbad == 0, "rank %d: %llu engine elements differ from %s", rank,
                      (unsigned long long)nbad, path);
    }
    eng_close(&x);
}

START_TEST(test_safetensors)
{
    updates_from(st_dir);
}
END_TEST

START_TEST(test_hdf5)
{
    updates_from(h5_path);
}
END_TEST

/* A bad path, another model's checkpoint, a rollout rank's call: refused naming the path on
 * the rank; the plan fails on every rank with that text and writes nothing; then the right
 * checkpoint plans and commits. */
START_TEST(test_refused)
{
    const char *bad[2] = {"/nonexistent/refit-ckpt", other_dir};
    for (int b = 0; b < 2; b++) {
        eng_t x;
        rf_session_plan_info_t pi;
        rf_session_result_t r;
        eng_open(&x);
        uint64_t h0 = rollout_hash(&x);
        if (me.role == RF_ROLE_TRAINER) {
            ck_assert_int_ne(rf_session_register_checkpoint(x.s, bad[b]), RF_OK);
            const char *m = rf_session_last_error(x.s), *at = strstr(m, bad[b]);
            ck_assert_msg(at != NULL, "%s", m);
            if (b == 0) /* named once */
                ck_assert_msg(strstr(at + strlen(bad[b]), bad[b]) == NULL, "%s", m);
        } else {
            ck_assert_int_eq(rf_session_register_checkpoint(x.s, st_dir), RF_ERR_STATE);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), st_dir));
        }
        ck_assert_int_ne(rf_session_plan(x.s, &pi), RF_OK);
        /* the lowest failing rank's text: trainer rank 0's, naming the bad checkpoint */
        same_text_everywhere(rf_session_last_error(x.s), bad[b]);
        ck_assert_uint_eq(max_everywhere(rollout_hash(&x) != h0), 0);
        if (me.role == RF_ROLE_TRAINER)
            ck_assert_msg(rf_session_register_checkpoint(x.s, st_dir) == RF_OK, "%s",
                          rf_session_last_error(x.s));
        ck_assert_msg(rf_session_plan(x.s, &pi) == RF_OK, "%s", rf_session_last_error(x.s));
        ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
        ck_assert_msg(r.committed, "rank %d: %s", rank, r.reason);
        ck_assert_uint_eq(
            max_everywhere(me.role == RF_ROLE_ROLLOUT ? rollout_mismatches(&x, st_dir) : 0), 0);
        eng_close(&x);
    }
}
END_TEST

int main(int argc, char **argv)
{
    rf_err_t err;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5) {
        if (rank == 0)
            fprintf(stderr, "usage: check_session_ckpt TOPOLOGY.yaml CKPT_DIR CKPT.h5 "
                            "OTHER_MODEL_DIR\n");
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    topo_path = argv[1];
    st_dir = argv[2];
    h5_path = argv[3];
    other_dir = argv[4];
    rf_err_clear(&err);
    if (rf_model_load_topology(topo_path, MPI_COMM_WORLD, &topo, &cfg, &err) != RF_OK ||
        rf_inventory_build(&cfg, topo.quantization, topo.group_size, &inv, &err) != RF_OK ||
        rf_topology_rank_info(&topo, rank, &me) != RF_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("session_ckpt");
    TCase *tc = tcase_create("session_ckpt");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_safetensors);
    tcase_add_test(tc, test_hdf5);
    tcase_add_test(tc, test_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* fork breaks MPI */
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
