/*
 * MPI test: lock-step collective reads of an HDF5 checkpoint (rf_ckpt_collective_begin /
 * rf_ckpt_read_all / rf_ckpt_collective_end; formats/hdf5.c rf_h5_read_all). Rank 0 writes a
 * small checkpoint (rows, columns, a 3-d tensor, a scalar, an empty and a 1-d tensor, one
 * only rank 0 reads) with rf_h5_writer; every rank then reads its own share of every dataset
 * in name order, some with nothing, and must get exactly the bytes written and count only
 * its own bytes in bytes_read. Where libhdf5 is parallel the reads must be collective MPI-IO
 * (no dataset broken down to independent I/O); where it is serial, begin turns nothing on and
 * the same calls read independently. A rank whose range is refused still takes part (its
 * peers finish the read: a hang here is a failure by ctest's timeout), a pitch of no whole
 * elements still makes one call, and a file replaced since it was opened is refused on every
 * rank. Run on 2 and 3 ranks with CK_FORK=no.
 */
#include <check.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refit/checkpoint.h"
#include "refit/hdf5.h"
#include "refit/safetensors.h"

typedef struct spec {
    const char *name;
    rf_dtype_t dtype;
    int ndim;
    uint64_t shape[RF_ST_MAX_RANK];
} spec_t;

static const spec_t SPECS[] = {
    {"a.rows", RF_DTYPE_BF16, 2, {37, 24}},  {"b.cols", RF_DTYPE_F32, 2, {8, 30}},
    {"c.cube", RF_DTYPE_U16, 3, {5, 6, 4}},  {"d.scalar", RF_DTYPE_F32, 0, {0}},
    {"e.empty", RF_DTYPE_BF16, 2, {0, 16}},  {"f.vec", RF_DTYPE_I8, 1, {101}},
    {"g.rank0", RF_DTYPE_U8, 2, {64, 64}},
};
#define NSPECS (sizeof(SPECS) / sizeof(SPECS[0]))

static char g_path[256];
static int g_rank, g_size;

static uint8_t pattern(size_t t, uint64_t k)
{
    return (uint8_t)((k * 31u + t * 7u + (k >> 8)) & 0xffu);
}

static uint64_t spec_bytes(const spec_t *s)
{
    uint64_t n = rf_dtype_size(s->dtype);
    for (int k = 0; k < s->ndim; k++)
        n *= s->shape[k];
    return n;
}

/* Rank 0 writes specs[0, n) to path; everyone waits. */
static void write_file(const char *path, size_t n)
{
    if (g_rank == 0) {
        rf_err_t err;
        rf_err_clear(&err);
        rf_h5_writer_t *w = NULL;
        ck_assert_msg(rf_h5_writer_create(path, NULL, true, &w, &err) == RF_OK, "%s", err.msg);
        for (size_t t = 0; t < n; t++) {
            const spec_t *s = &SPECS[t];
            uint64_t nb = spec_bytes(s), rows = s->ndim == 0 ? 1 : s->shape[0];
            uint8_t *b = malloc(nb + 1);
            for (uint64_t k = 0; k < nb; k++)
                b[k] = pattern(t, k);
            ck_assert_msg(rf_h5_writer_begin(w, s->name, s->dtype, s->ndim, s->shape, &err) ==
                              RF_OK, "%s", err.msg);
            ck_assert_msg(rf_h5_writer_rows(w, 0, rows, b, &err) == RF_OK, "%s", err.msg);
            free(b);
        }
        ck_assert_msg(rf_h5_writer_finish(w, &err) == RF_OK, "%s", err.msg);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* This rank's share of dataset t: rows [r0, r1) x row bytes [c0, c1). Columns for b.cols,
 * dim-1 slices for c.cube, rank 0 alone for d.scalar and g.rank0, rows otherwise. */
static void share(size_t t, uint64_t *r0, uint64_t *r1, uint64_t *c0, uint64_t *c1)
{
    const spec_t *s = &SPECS[t];
    uint64_t rows = s->ndim == 0 ? 1 : s->shape[0];
    uint64_t rb = rows ? spec_bytes(s) / rows : 0, N = (uint64_t)g_size, r = (uint64_t)g_rank;
    *r0 = 0;
    *r1 = rows;
    *c0 = 0;
    *c1 = rb;
    if (strcmp(s->name, "b.cols") == 0) {
        *c0 = s->shape[1] * r / N * 4;
        *c1 = s->shape[1] * (r + 1) / N * 4;
    } else if (strcmp(s->name, "c.cube") == 0) {
        uint64_t slice = rb / s->shape[1];
        *c0 = s->shape[1] * r / N * slice;
        *c1 = s->shape[1] * (r + 1) / N * slice;
    } else if (s->ndim == 0 || strcmp(s->name, "g.rank0") == 0) {
        if (g_rank != 0)
            *r1 = 0;
    } else {
        *r0 = rows * r / N;
        *r1 = rows * (r + 1) / N;
    }
}

/* Checks dst (pitch bytes apart) against the written bytes of rows [r0, r1) x [c0, c1). */
static void check_bytes(size_t t, const uint8_t *dst, size_t pitch, uint64_t r0, uint64_t r1,
                        uint64_t c0, uint64_t c1)
{
    const spec_t *s = &SPECS[t];
    uint64_t rows = s->ndim == 0 ? 1 : s->shape[0], rb = spec_bytes(s) / (rows ? rows : 1);
    for (uint64_t r = r0; r < r1; r++)
        for (uint64_t c = c0; c < c1; c++)
            ck_assert_msg(dst[(r - r0) * pitch + (c - c0)] == pattern(t, r * rb + c),
                          "rank %d: %s byte (row %llu, %llu) differs", g_rank, s->name,
                          (unsigned long long)r, (unsigned long long)c);
}

static rf_ckpt_t *open_ck(void)
{
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    ck_assert_msg(rf_ckpt_open(g_path, &ck, &err) == RF_OK, "%s", err.msg);
    ck_assert_int_eq(rf_ckpt_count(ck), NSPECS);
    return ck;
}

static void begin(rf_ckpt_t *ck)
{
    rf_err_t err;
    rf_err_clear(&err);
    bool on = !rf_h5_is_parallel();
    ck_assert_msg(rf_ckpt_collective_begin(ck, MPI_COMM_WORLD, &on, &err) == RF_OK, "%s",
                  err.msg);
    ck_assert_msg(on == rf_h5_is_parallel(), "collective reads %s with HDF5 %s",
                  on ? "on" : "off", rf_h5_version());
}

static void end(rf_ckpt_t *ck)
{
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_ckpt_collective_end(ck, &err) == RF_OK, "%s", err.msg);
}

START_TEST(test_write)
{
    write_file(g_path, NSPECS);
}
END_TEST

START_TEST(test_shards)
{
    rf_ckpt_t *ck = open_ck();
    rf_err_t err;
    rf_err_clear(&err);
    begin(ck);
    uint64_t mine = 0, calls = 0;
    for (size_t t = 0; t < NSPECS; t++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, t);
        ck_assert_str_eq(e->name, SPECS[t].name);
        uint64_t r0, r1, c0, c1;
        share(t, &r0, &r1, &c0, &c1);
        size_t w = (size_t)(c1 - c0);
        uint8_t *dst = malloc((size_t)((r1 - r0) * w) + 1);
        ck_assert_msg(rf_ckpt_read_all(ck, e, r0, r1, c0, c1, r1 > r0 && w ? dst : NULL, w,
                                       &err) == RF_OK, "rank %d: %s", g_rank, err.msg);
        check_bytes(t, dst, w, r0, r1, c0, c1);
        mine += (r1 - r0) * w;
        calls += spec_bytes(&SPECS[t]) > 0; /* a dataset of no bytes: nobody reads it */
        free(dst);
    }
    ck_assert_uint_eq(rf_ckpt_bytes_read(ck), mine);
    uint64_t coll = 0, indep = 0;
    rf_ckpt_collective_counts(ck, &coll, &indep);
    end(ck);
    if (rf_h5_is_parallel()) {
        ck_assert_msg(coll == calls && indep == 0,
                      "rank %d: %llu collective and %llu independent transfers, %llu calls",
                      g_rank, (unsigned long long)coll, (unsigned long long)indep,
                      (unsigned long long)calls);
    } else {
        ck_assert_uint_eq(coll + indep, 0);
    }
    rf_ckpt_close(ck);
}
END_TEST

/* rank 0's range is outside the tensor: refused there, its peers' read completes, and the
 * next read of every rank is still in step */
START_TEST(test_refused_range_takes_part)
{
    rf_ckpt_t *ck = open_ck();
    rf_err_t err;
    rf_err_clear(&err);
    begin(ck);
    uint64_t r0, r1, c0, c1;
    share(0, &r0, &r1, &c0, &c1);
    if (g_rank == 0)
        r1 = SPECS[0].shape[0] + 1;
    uint8_t *dst = malloc((size_t)((r1 - r0) * c1) + 1);
    rf_status_t st = rf_ckpt_read_all(ck, rf_ckpt_entry(ck, 0), r0, r1, c0, c1, dst,
                                      (size_t)c1, &err);
    if (g_rank == 0) {
        ck_assert_int_eq(st, RF_ERR_INVALID);
        ck_assert_msg(strstr(err.msg, "a.rows") != NULL, "%s", err.msg);
    } else {
        ck_assert_msg(st == RF_OK, "rank %d: %s", g_rank, err.msg);
        check_bytes(0, dst, (size_t)c1, r0, r1, c0, c1);
    }
    free(dst);
    share(5, &r0, &r1, &c0, &c1);
    dst = malloc((size_t)(r1 - r0) + 1);
    rf_err_clear(&err);
    ck_assert_msg(rf_ckpt_read_all(ck, rf_ckpt_entry(ck, 5), r0, r1, c0, c1, dst, 1, &err) ==
                      RF_OK, "rank %d: %s", g_rank, err.msg);
    check_bytes(5, dst, 1, r0, r1, c0, c1);
    free(dst);
    end(ck);
    rf_ckpt_close(ck);
}
END_TEST

/* destination pitches: whole elements wider than the row (a 2-d memory space), and one of
 * no whole elements (through a packed buffer): still one call per rank, same bytes */
START_TEST(test_pitches)
{
    rf_ckpt_t *ck = open_ck();
    rf_err_t err;
    rf_err_clear(&err);
    begin(ck);
    uint64_t r0, r1, c0, c1;
    share(0, &r0, &r1, &c0, &c1);
    for (size_t extra = 2; extra <= 3; extra++) {
        size_t pitch = (size_t)c1 + extra;
        uint8_t *dst = calloc((size_t)(r1 - r0 + 1) * pitch, 1);
        ck_assert_msg(rf_ckpt_read_all(ck, rf_ckpt_entry(ck, 0), r0, r1, c0, c1, dst, pitch,
                                       &err) == RF_OK, "rank %d: %s", g_rank, err.msg);
        check_bytes(0, dst, pitch, r0, r1, c0, c1);
        free(dst);
    }
    end(ck);
    rf_ckpt_close(ck);
}
END_TEST

/* the file replaced (another dataset count) between open and begin: refused on every rank */
START_TEST(test_replaced_file)
{
    rf_ckpt_t *ck = open_ck();
    rf_err_t err;
    rf_err_clear(&err);
    char other[300];
    snprintf(other, sizeof(other), "%s.new", g_path);
    write_file(other, NSPECS - 1);
    if (g_rank == 0)
        ck_assert_int_eq(rename(other, g_path), 0);
    MPI_Barrier(MPI_COMM_WORLD);
    bool on = true;
    rf_status_t st = rf_ckpt_collective_begin(ck, MPI_COMM_WORLD, &on, &err);
    if (rf_h5_is_parallel()) {
        ck_assert_int_eq(st, RF_ERR_MISMATCH);
        ck_assert_msg(strstr(err.msg, "changed since it was opened") != NULL, "%s", err.msg);
    } else {
        ck_assert_int_eq(st, RF_OK);
    }
    ck_assert(!on);
    end(ck); /* nothing open: nothing to do */
    rf_ckpt_close(ck);
    write_file(g_path, NSPECS); /* the next test's file */
}
END_TEST

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (g_rank == 0) {
        char dir[] = "/tmp/refit-h5coll-XXXXXX";
        if (mkdtemp(dir) == NULL)
            MPI_Abort(MPI_COMM_WORLD, 2);
        snprintf(g_path, sizeof(g_path), "%s/ck.h5", dir);
    }
    MPI_Bcast(g_path, sizeof(g_path), MPI_CHAR, 0, MPI_COMM_WORLD);
    Suite *s = suite_create("h5_collective");
    TCase *tc = tcase_create("h5_collective");
    tcase_add_test(tc, test_write);
    tcase_add_test(tc, test_shards);
    tcase_add_test(tc, test_refused_range_takes_part);
    tcase_add_test(tc, test_pitches);
    tcase_add_test(tc, test_replaced_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* fork breaks MPI */
    srunner_run_all(sr, g_rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) {
        unlink(g_path);
        char *slash = strrchr(g_path, '/');
        *slash = '\0';
        rmdir(g_path);
    }
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
