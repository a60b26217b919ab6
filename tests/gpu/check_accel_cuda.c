/* GPU tests: every CUDA accelerator kernel against the host accelerator (the reference) byte
 * for byte, on seeded random data of several shapes (odd sizes, K-first strides, bf16 / f16 ->
 * f32 conversion, sizes that need many blocks); then a device-to-device copy of a 4 GiB
 * buffer, best of 5, printed in GB/s (a measurement, never a pass/fail condition).
 *
 * Exits 77 (ctest SKIP_RETURN_CODE) when refit was built without CUDA or no device is
 * present. Run with CK_FORK=no (fork breaks CUDA). REFIT_ACCEL_BENCH_MIB overrides the copy
 * size (the sanitizer run uses a small one). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/generator.h"
#include "refit/quant.h"
#include "refit/quant_ops.h"

static rf_accel_t *H, *G, *GT; /* host reference, cuda, cuda with REFIT_CUDA_TRANSPOSE=1 */
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill_random(void *p, size_t n)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(rnd() >> 56);
}

/* A finite weight: sign x 2^U(-14, 0) x a random mantissa, some exact zeros. */
static float rnd_weight(void)
{
    uint64_t r = rnd();
    if ((r & 63) == 0)
        return 0.0f;
    int e = -(int)((r >> 8) % 15);
    float m = 1.0f + (float)((r >> 16) & 0xffffff) / 16777216.0f;
    float v = m;
    for (int i = 0; i < -e; i++)
        v *= 0.5f;
    return (r & 128) ? -v : v;
}

/* n elements of dtype dt (BF16, F16, F32) of random weights; zero_groups: every 7th run of g
 * elements is all zero (wna16 epsilon scales). */
static void *make_weights(rf_dtype_t dt, size_t n, int64_t g)
{
    size_t es = rf_dtype_size(dt);
    char *p = malloc(n * es);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < n; i++) {
        float v = (g > 0 && (i / (size_t)g) % 7 == 3) ? 0.0f : rnd_weight();
        if (dt == RF_DTYPE_F32) {
            memcpy(p + 4 * i, &v, 4);
        } else {
            uint16_t h = dt == RF_DTYPE_BF16 ? rf_f32_to_bf16(v) : rf_f32_to_f16(v);
            memcpy(p + 2 * i, &h, 2);
        }
    }
    return p;
}

static void *dev_upload(const void *h, size_t bytes)
{
    void *d = NULL;
    ck_assert_int_eq(G->ops->alloc(G, bytes ? bytes : 1, &d), RF_OK);
    if (bytes)
        ck_assert_int_eq(G->ops->copy(G, d, h, bytes, RF_COPY_H2D, NULL), RF_OK);
    return d;
}

/* Downloads `bytes` of d and compares them with the host reference. */
/* The device quantizers' verdict since the last check (rf_quant_ops_t check). */
static void expect_check(int64_t first_bad, unsigned why)
{
    int64_t got = -2;
    unsigned gw = 99;
    ck_assert_int_eq(rf_quant_ops_for(G)->check(G, NULL, &got, &gw), RF_OK);
    ck_assert_int_eq(got, first_bad);
    ck_assert_uint_eq(gw, why);
}

static void expect_same(const void *ref, const void *d, size_t bytes, const char *what)
{
    unsigned char *got = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(G->ops->copy(G, got, d, bytes, RF_COPY_D2H, NULL), RF_OK);
    rf_accel_event_t *e;
    ck_assert_int_eq(G->ops->event_create(G, &e), RF_OK);
    ck_assert_int_eq(G->ops->event_record(e, NULL), RF_OK);
    ck_assert_int_eq(G->ops->event_sync(e), RF_OK);
    G->ops->event_destroy(e);
    const unsigned char *r = ref;
    for (size_t i = 0; i < bytes; i++)
        if (got[i] != r[i])
            ck_abort_msg("%s: byte %zu of %zu differs: cuda 0x%02x, host 0x%02x", what, i, bytes,
                         got[i], r[i]);
    free(got);
}

/* ---- copy_rows ------------------------------------------------------------------------------ */

struct rows_case {
    const char *name;
    size_t esize;
    rf_dtype_t ddt, sdt;
    int64_t row_stride, col_stride, expert_stride, experts;
    int64_t expert, dst_row, dst_col, rows, cols, src_pitch;
};

static void run_rows(const struct rows_case *k)
{
    /* destination extent: the largest element index + 1 */
    int64_t ext = (k->experts - 1) * k->expert_stride +
                  (k->dst_row + k->rows - 1) * k->row_stride +
                  (k->dst_col + k->cols - 1) * k->col_stride + 1;
    if (k->experts * k->expert_stride > ext)
        ext = k->experts * k->expert_stride;
    size_t dbytes = (size_t)ext * k->esize, ses = rf_dtype_size(k->sdt);
    size_t sbytes = (size_t)((k->rows - 1) * k->src_pitch + k->cols) * ses;
    char *hd = malloc(dbytes), *hs = malloc(sbytes);
    fill_random(hd, dbytes);
    fill_random(hs, sbytes);
    void *dd = dev_upload(hd, dbytes), *ds = dev_upload(hs, sbytes);
    rf_accel_rows_t r = {
        .dst = {hd, k->esize, k->ddt, k->row_stride, k->col_stride, k->expert_stride},
        .expert = k->expert, .dst_row = k->dst_row, .dst_col = k->dst_col,
        .src = hs, .src_dtype = k->sdt, .src_pitch = k->src_pitch, .rows = k->rows,
        .cols = k->cols,
    };
    ck_assert_int_eq(H->ops->copy_rows(H, &r, NULL), RF_OK);
    r.dst.data = dd;
    r.src = ds;
    ck_assert_int_eq(G->ops->copy_rows(G, &r, NULL), RF_OK);
    expect_same(hd, dd, dbytes, k->name);
    G->ops->free(G, dd);
    G->ops->free(G, ds);
    free(hd);
    free(hs);
}

static const struct rows_case rows_cases[] = {
    /* name, es, ddt, sdt, rs, cs, xs, E, e, row, col, rows, cols, pitch */
    {"row-major bf16 TP slice (2-D copy)", 2, RF_DTYPE_BF16, RF_DTYPE_BF16, 4099, 1, 0, 1, 0,
     3, 17, 1001, 2047, 4093},
    {"moe w13 up shard, expert 2", 2, RF_DTYPE_BF16, RF_DTYPE_BF16, 768, 1, 768 * 512, 4, 2,
     256, 0, 256, 768, 768},
    {"k-first int32 wna16 rows", 4, RF_DTYPE_I32, RF_DTYPE_I32, 1, 1536, 1536 * 96, 3, 1,
     768, 0, 768, 96, 96},
    {"k-first odd", 4, RF_DTYPE_I32, RF_DTYPE_I32, 1, 1001, 0, 1, 0, 5, 3, 997, 33, 40},
    {"bf16 -> f32 scales", 4, RF_DTYPE_F32, RF_DTYPE_BF16, 37, 1, 0, 1, 0, 2, 1, 301, 35, 36},
    {"f16 -> f32 scales, k-first", 4, RF_DTYPE_F32, RF_DTYPE_F16, 1, 513, 0, 1, 0, 7, 0, 500,
     1000, 1003},
    {"u8 col stride 3", 1, RF_DTYPE_U8, RF_DTYPE_U8, 3001, 3, 0, 1, 0, 1, 2, 333, 999, 1000},
    {"u64 strided", 8, RF_DTYPE_U64, RF_DTYPE_U64, 70, 2, 0, 1, 0, 1, 1, 129, 33, 35},
    {"vocab rows, many blocks", 2, RF_DTYPE_BF16, RF_DTYPE_BF16, 4096, 1, 0, 1, 0, 0, 0, 8000,
     4096, 4096},
    /* K-first destinations (row stride 1): in a batch, the transposing tiles (64 x 64, 32 x 32
     * for 8 bytes); full and edge tiles, offsets, a source pitch wider than the row */
    {"k-first int32 wna16 w13, expert 1 of 2", 4, RF_DTYPE_I32, RF_DTYPE_I32, 1, 1536,
     1536 * 256, 2, 1, 0, 0, 768, 256, 256},
    {"k-first bf16 wna16 scales, expert 3", 2, RF_DTYPE_BF16, RF_DTYPE_BF16, 1, 1536, 1536 * 16,
     4, 3, 768, 0, 768, 16, 16},
    {"k-first u8 edge tiles", 1, RF_DTYPE_U8, RF_DTYPE_U8, 1, 200, 0, 1, 0, 3, 2, 130, 67, 70},
    {"k-first u64 edge tiles", 8, RF_DTYPE_U64, RF_DTYPE_U64, 1, 100, 0, 1, 0, 2, 1, 95, 70,
     71},
    {"k-first 16 x 2 (the smallest tiled)", 4, RF_DTYPE_I32, RF_DTYPE_I32, 1, 16, 0, 1, 0, 0, 0,
     16, 2, 2},
    {"k-first 15 rows (element walk)", 4, RF_DTYPE_I32, RF_DTYPE_I32, 1, 20, 0, 1, 0, 1, 0, 15,
     5, 5},
};

START_TEST(test_copy_rows)
{
    for (size_t i = 0; i < sizeof(rows_cases) / sizeof(rows_cases[0]); i++)
        run_rows(&rows_cases[i]);
}
END_TEST

/* copy_rows_batch: every case above plus unaligned and long contiguous byte copies in ONE
 * batch (each into its own buffer), against the host's one-by-one copies, with the device's
 * split between copy engines and kernel set to engine_min (set_engine_min). */
static void batch_run(size_t engine_min)
{
    ck_assert_int_eq(G->ops->set_engine_min(G, engine_min), RF_OK);
    enum { NC = sizeof(rows_cases) / sizeof(rows_cases[0]), NX = 10, N = NC + NX };
    rf_accel_rows_t hr[N], gr[N];
    char *hd[N], *hs[N];
    void *dd[N], *ds[N];
    size_t dbytes[N];
    for (int i = 0; i < N; i++) {
        struct rows_case k;
        if (i < NC) {
            k = rows_cases[i];
        } else { /* bytes: odd offsets (1-byte path), 4-aligned, 16-aligned long rows, 1-D */
            static const struct rows_case x[NX] = {
                {"u8 unaligned rows", 1, RF_DTYPE_U8, RF_DTYPE_U8, 70001, 1, 0, 1, 0, 3, 5, 7,
                 69001, 69003},
                {"u32 rows", 4, RF_DTYPE_U32, RF_DTYPE_U32, 9000, 1, 0, 1, 0, 1, 1, 33, 8191,
                 8192},
                {"bf16 long rows", 2, RF_DTYPE_BF16, RF_DTYPE_BF16, 65536, 1, 0, 1, 0, 0, 0, 64,
                 65536, 65536},
                {"bf16 contiguous 48 MiB", 2, RF_DTYPE_BF16, RF_DTYPE_BF16, 4096, 1, 0, 1, 0, 0,
                 0, 6144, 4096, 4096},
                /* at most 16 contiguous bytes: no tile, one thread each (wna16 weight_shape) */
                {"i32 [2] weight_shape, tiny", 4, RF_DTYPE_I32, RF_DTYPE_I32, 1, 1, 0, 1, 0, 0, 0, 2,
                 1, 1},
                {"i64 [2] at row 2 (16-byte store), tiny", 8, RF_DTYPE_I64, RF_DTYPE_I64, 1, 1, 0,
                 1, 0, 2, 0, 2, 1, 1},
                {"u8 12 bytes at offset 4 (4-byte stores), tiny", 1, RF_DTYPE_U8, RF_DTYPE_U8, 100,
                 1, 0, 1, 0, 0, 4, 1, 12, 12},
                {"u8 15 bytes at odd offsets, tiny", 1, RF_DTYPE_U8, RF_DTYPE_U8, 100, 1, 0, 1, 0, 1,
                 7, 1, 15, 15},
                {"u8 17 bytes, one tile", 1, RF_DTYPE_U8, RF_DTYPE_U8, 100, 1, 0, 1, 0, 0, 3, 1, 17,
                 17},
                {"bf16 2 strided rows of 8 bytes, tiled", 2, RF_DTYPE_BF16, RF_DTYPE_BF16, 10, 1, 0,
                 1, 0, 0, 0, 2, 4, 6},
            };
            k = x[i - NC];
        }
        int64_t ext = (k.experts - 1) * k.expert_stride + (k.dst_row + k.rows - 1) * k.row_stride +
                      (k.dst_col + k.cols - 1) * k.col_stride + 1;
        if (k.experts * k.expert_stride > ext)
            ext = k.experts * k.expert_stride;
        size_t ses = rf_dtype_size(k.sdt);
        size_t sbytes = (size_t)((k.rows - 1) * k.src_pitch + k.cols) * ses;
        dbytes[i] = (size_t)ext * k.esize;
        hd[i] = malloc(dbytes[i]);
        hs[i] = malloc(sbytes);
        fill_random(hd[i], dbytes[i]);
        fill_random(hs[i], sbytes);
        dd[i] = dev_upload(hd[i], dbytes[i]);
        ds[i] = dev_upload(hs[i], sbytes);
        rf_accel_rows_t r = {
            .dst = {hd[i], k.esize, k.ddt, k.row_stride, k.col_stride, k.expert_stride},
            .expert = k.expert, .dst_row = k.dst_row, .dst_col = k.dst_col,
            .src = hs[i], .src_dtype = k.sdt, .src_pitch = k.src_pitch, .rows = k.rows,
            .cols = k.cols,
        };
        hr[i] = r;
        r.dst.data = dd[i];
        r.src = ds[i];
        gr[i] = r;
    }
    ck_assert_int_eq(H->ops->copy_rows_batch(H, hr, N, NULL), RF_OK);
    ck_assert_int_eq(G->ops->copy_rows_batch(G, gr, N, NULL), RF_OK);
    /* the ring reuses its descriptor buffers: a second batch on the same buffers, repeated
     * more often than the ring is long, must give the same bytes again */
    for (int rep = 0; rep < 10; rep++)
        ck_assert_int_eq(G->ops->copy_rows_batch(G, gr, N, NULL), RF_OK);
    char what[96];
    for (int i = 0; i < N; i++) {
        snprintf(what, sizeof(what), "%s (engine_min %zu)",
                 i < NC ? rows_cases[i].name : "batch extra", engine_min);
        expect_same(hd[i], dd[i], dbytes[i], what);
        G->ops->free(G, dd[i]);
        G->ops->free(G, ds[i]);
        free(hd[i]);
        free(hs[i]);
    }
    ck_assert_int_eq(G->ops->set_engine_min(G, 0), RF_OK);
}

/* the default (the kernel for every piece), a split at 8 MiB (the 48 MiB row through the copy
 * engines, the rest through the kernel), every contiguous piece through the copy engines (1:
 * the 17-byte and the tiny ones too), and the kernel only (SIZE_MAX): the same bytes each time */
START_TEST(test_copy_rows_batch)
{
    batch_run(0);
    batch_run((size_t)8 << 20);
    batch_run(1);
    batch_run(SIZE_MAX);
}
END_TEST

/* The same batches through an accelerator opened with REFIT_CUDA_TRANSPOSE=1 (GT): the K-first
 * cases go through the transposing tiles (k_copy_trans) instead of the element walk. */
START_TEST(test_copy_rows_batch_transpose)
{
    rf_accel_t *g0 = G;
    G = GT;
    batch_run(0);
    batch_run(SIZE_MAX);
    G = g0;
}
END_TEST

/* Many contiguous pieces in one batch, as a colocated chunk brings them: 3 MiB experts, 24 MiB
 * linears and 8 KiB norms interleaved, out of one source arena into one destination arena in
 * reverse order with gaps; equal to the source byte for byte, gaps untouched, with the split at
 * 8 MiB (the linears through the copy engines), the kernel only, and the default after the
 * kernel's own ceiling (rf_accel_rows_ceiling) ran between two batches. */
START_TEST(test_copy_rows_batch_arena)
{
    enum { NP = 96 };
    static const size_t len[3] = {3u << 20, 24u << 20, 8192};
    size_t off[NP], doff[NP], total = 0, dtotal = 0;
    for (int i = 0; i < NP; i++) {
        off[i] = total;
        total += (len[i % 3] + 255) & ~(size_t)255;
    }
    for (int i = NP - 1; i >= 0; i--) { /* the destination: reverse order, 512-byte gaps */
        doff[i] = dtotal;
        dtotal += ((len[i % 3] + 255) & ~(size_t)255) + 512;
    }
    char *hs = malloc(total), *back = malloc(dtotal + 4096);
    ck_assert_ptr_nonnull(hs);
    ck_assert_ptr_nonnull(back);
    fill_random(hs, total);
    void *ds = dev_upload(hs, total), *dd = NULL;
    ck_assert_int_eq(G->ops->alloc(G, dtotal + 4096, &dd), RF_OK);
    rf_accel_rows_t r[NP];
    for (int pass = 0; pass < 3; pass++) {
        size_t em = pass == 0 ? (size_t)8 << 20 : pass == 1 ? SIZE_MAX : 0;
        ck_assert_int_eq(G->ops->set_engine_min(G, em), RF_OK);
        ck_assert_int_eq(G->ops->memset(G, dd, 0xee, dtotal + 4096, NULL), RF_OK);
        for (int i = 0; i < NP; i++) { /* piece i -> its destination at 4096 + doff[i] */
            size_t n = len[i % 3] / 2;
            rf_accel_rows_t x = {
                .dst = {(char *)dd + 4096 + doff[i], 2, RF_DTYPE_BF16, (int64_t)n, 1, 0},
                .src = (char *)ds + off[i], .src_dtype = RF_DTYPE_BF16, .src_pitch = (int64_t)n,
                .rows = 1, .cols = (int64_t)n,
            };
            r[i] = x;
        }
        ck_assert_int_eq(G->ops->copy_rows_batch(G, r, NP, NULL), RF_OK);
        ck_assert_int_eq(G->ops->copy(G, back, dd, dtotal + 4096, RF_COPY_D2H, NULL), RF_OK);
        ck_assert_int_eq(rf_accel_sync(G), RF_OK);
        for (int i = 0; i < NP; i++) {
            const char *got = back + 4096 + doff[i];
            if (memcmp(got, hs + off[i], len[i % 3]) == 0)
                continue;
            size_t b = 0;
            while (got[b] == hs[off[i] + b])
                b++;
            ck_abort_msg("pass %d: piece %d (%zu bytes), byte %zu differs", pass, i, len[i % 3],
                         b);
        }
        for (int i = 0; i < NP; i++) /* nothing written into the gaps, nor before the first */
            for (size_t b = 0; b < 512; b++)
                ck_assert_int_eq((unsigned char)back[4096 + doff[i] - 512 + b], 0xee);
        ck_assert_int_eq(G->ops->set_engine_min(G, 0), RF_OK);
        if (pass == 1) { /* the kernel's ceiling between two batches */
            double best = -1, med = -1;
            ck_assert_int_eq(rf_accel_rows_ceiling(G, (size_t)64 << 20, 3, &best, &med), RF_OK);
            ck_assert(best > 0 && best <= med);
        }
    }
    G->ops->free(G, dd);
    G->ops->free(G, ds);
    free(hs);
    free(back);
}
END_TEST

/* gen_fill: the device generator against the host one, bf16 / f16 / f32, offset blocks. */
START_TEST(test_gen_fill)
{
    static const struct {
        rf_dtype_t dt;
        uint64_t ncols, r0, r1, c0, c1, pitch_pad;
    } cases[] = {
        {RF_DTYPE_BF16, 4096, 0, 300, 0, 4096, 0},
        {RF_DTYPE_BF16, 1001, 17, 99, 3, 700, 6},
        {RF_DTYPE_F16, 333, 5, 400, 100, 333, 2},
        {RF_DTYPE_F32, 1, 0, 10000, 0, 1, 0},
        {RF_DTYPE_F32, 2048, 1000, 1100, 1024, 2048, 4},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t es = rf_dtype_size(cases[i].dt), cols = cases[i].c1 - cases[i].c0;
        size_t rows = cases[i].r1 - cases[i].r0, pitch = cols * es + cases[i].pitch_pad;
        size_t bytes = rows * pitch;
        char *h = calloc(1, bytes);
        void *d = NULL;
        ck_assert_int_eq(G->ops->alloc(G, bytes, &d), RF_OK);
        ck_assert_int_eq(G->ops->memset(G, d, 0, bytes, NULL), RF_OK);
        uint64_t nh = rf_gen_name_hash("model.layers.7.mlp.experts.3.up_proj.weight");
        ck_assert_int_eq(rf_gen_fill_block(nh, 5 + i, cases[i].dt, cases[i].ncols, cases[i].r0,
                                           cases[i].r1, cases[i].c0, cases[i].c1, h, pitch),
                         RF_OK);
        rf_accel_gen_t g = {nh, 5 + i, cases[i].dt, cases[i].ncols, cases[i].r0, cases[i].r1,
                            cases[i].c0, cases[i].c1, d, pitch};
        ck_assert_int_eq(rf_gen_ops_for(G)->fill(G, &g, NULL), RF_OK);
        expect_same(h, d, bytes, "gen_fill");
        G->ops->free(G, d);
        free(h);
    }
}
END_TEST

START_TEST(test_zero_rows)
{
    /* rs, cs, row_begin, nrows, cols, esize */
    static const int64_t cases[][6] = {
        {4096, 1, 100, 37, 4096, 2}, {1, 777, 5, 700, 777, 4}, {33, 3, 1, 20, 11, 1},
        {9, 1, 0, 3, 9, 8}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int64_t *k = cases[i];
        int64_t rows = k[2] + k[3] + 1;
        size_t bytes = (size_t)((rows - 1) * k[0] + (k[4] - 1) * k[1] + 1) * (size_t)k[5];
        char *h = malloc(bytes);
        fill_random(h, bytes);
        void *d = dev_upload(h, bytes);
        rf_accel_dst_t dst = {h, (size_t)k[5], RF_DTYPE_U8, k[0], k[1], 0};
        ck_assert_int_eq(H->ops->zero_rows(H, &dst, k[2], k[3], k[4], NULL), RF_OK);
        dst.data = d;
        ck_assert_int_eq(G->ops->zero_rows(G, &dst, k[2], k[3], k[4], NULL), RF_OK);
        expect_same(h, d, bytes, "zero_rows");
        G->ops->free(G, d);
        free(h);
    }
}
END_TEST

START_TEST(test_fnuz)
{
    size_t sizes[][2] = {{1, 1}, {1000003, 1001}, {(size_t)64 << 20, 12345}, {0, 7}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t nw = sizes[i][0], ns = sizes[i][1];
        uint8_t *w = malloc(nw ? nw : 1);
        float *s = malloc(ns * 4);
        fill_random(w, nw);
        for (size_t j = 0; j < nw; j += 3)
            w[j] = 0x80;
        for (size_t j = 0; j < ns; j++)
            s[j] = rnd_weight() * 1e-3f;
        uint8_t *dw = dev_upload(w, nw);
        float *dsc = dev_upload(s, ns * 4);
        ck_assert_int_eq(rf_quant_ops_for(H)->fp8_to_fnuz(H, w, nw, s, ns, NULL), RF_OK);
        ck_assert_int_eq(rf_quant_ops_for(G)->fp8_to_fnuz(G, nw ? dw : NULL, nw, dsc, ns, NULL), RF_OK);
        expect_same(w, dw, nw, "fnuz bytes");
        expect_same(s, dsc, ns * 4, "fnuz scales");
        G->ops->free(G, dw);
        G->ops->free(G, dsc);
        free(w);
        free(s);
    }
}
END_TEST

START_TEST(test_repack)
{
    /* batch, R, C, esize */
    static const int64_t cases[][4] = {
        {3, 37, 70, 4}, {1, 16, 64, 4}, {2, 4096, 96, 4}, {5, 515, 33, 2}, {1, 1, 1, 1},
        {1, 1537, 2050, 4}, {2, 17, 65, 8},
        /* Qwen3-30B-A3B attention: qkv_proj / o_proj words and scales (G = 128); full-height
         * tiles of every width, and one full-height tile row above a short one */
        {1, 5120, 256, 4}, {1, 2048, 512, 4}, {1, 5120, 16, 2}, {1, 2048, 32, 2},
        {2, 48, 130, 1}, {1, 40, 64, 2}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t B = cases[i][0], R = cases[i][1], C = cases[i][2];
        size_t es = (size_t)cases[i][3], bytes = (size_t)(B * R * C) * es;
        char *m = malloc(bytes), *rt = malloc(bytes), *back = malloc(bytes);
        fill_random(m, bytes);
        void *dm = dev_upload(m, bytes), *drt = dev_upload(m, bytes), *dback = dev_upload(m, bytes);
        ck_assert_int_eq(rf_quant_ops_for(H)->wna16_repack(H, rt, m, B, R, C, es, false, NULL), RF_OK);
        ck_assert_int_eq(rf_quant_ops_for(G)->wna16_repack(G, drt, dm, B, R, C, es, false, NULL), RF_OK);
        expect_same(rt, drt, bytes, "repack");
        ck_assert_int_eq(rf_quant_ops_for(H)->wna16_repack(H, back, rt, B, R, C, es, true, NULL), RF_OK);
        ck_assert_int_eq(rf_quant_ops_for(G)->wna16_repack(G, dback, drt, B, R, C, es, true, NULL), RF_OK);
        expect_same(back, dback, bytes, "repack inverse");
        expect_same(m, dback, bytes, "repack round trip");
        G->ops->free(G, dm);
        G->ops->free(G, drt);
        G->ops->free(G, dback);
        free(m);
        free(rt);
        free(back);
    }
}
END_TEST

START_TEST(test_fp8_quantize)
{
    /* rows, cols, w pitch extra, w dtype, scale dtype */
    static const int64_t cases[][5] = {
        {128, 128, 0, RF_DTYPE_BF16, RF_DTYPE_F32},  {300, 517, 3, RF_DTYPE_BF16, RF_DTYPE_F32},
        {1024, 2048, 0, RF_DTYPE_F32, RF_DTYPE_BF16}, {1, 1, 0, RF_DTYPE_F16, RF_DTYPE_F32},
        {257, 129, 1, RF_DTYPE_F16, RF_DTYPE_BF16},  {2048, 768, 0, RF_DTYPE_BF16, RF_DTYPE_F32}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t rows = cases[i][0], cols = cases[i][1], wp = cols + cases[i][2];
        rf_dtype_t wdt = (rf_dtype_t)cases[i][3], sdt = (rf_dtype_t)cases[i][4];
        int64_t qp = cols + 5, sr = (rows + 127) / 128, sc = (cols + 127) / 128, sp = sc + 1;
        size_t wbytes = (size_t)(rows * wp) * rf_dtype_size(wdt);
        size_t qbytes = (size_t)(rows * qp), sbytes = (size_t)(sr * sp) * rf_dtype_size(sdt);
        void *w = make_weights(wdt, (size_t)(rows * wp), 0);
        uint8_t *q = malloc(qbytes);
        void *s = malloc(sbytes);
        fill_random(q, qbytes);
        fill_random(s, sbytes);
        void *dw = dev_upload(w, wbytes), *dq = dev_upload(q, qbytes), *ds = dev_upload(s, sbytes);
        ck_assert_int_eq(rf_quant_ops_for(H)->fp8_quantize(H, w, wdt, rows, cols, wp, q, qp, s, sdt, sp, NULL),
                         RF_OK);
        ck_assert_int_eq(rf_quant_ops_for(G)->fp8_quantize(G, dw, wdt, rows, cols, wp, dq, qp, ds, sdt, sp,
                                              NULL), RF_OK);
        expect_check(-1, 0);
        expect_same(q, dq, qbytes, "fp8 q");
        expect_same(s, ds, sbytes, "fp8 scales");
        /* a NaN anywhere is refused by both: the host at once, the device at its check */
        if (wdt == RF_DTYPE_F32 && rows * cols > 1000) {
            float nan = __builtin_nanf("");
            ck_assert_int_eq(G->ops->copy(G, (float *)dw + 777, &nan, 4, RF_COPY_H2D, NULL), RF_OK);
            ((float *)w)[777] = nan;
            ck_assert_int_eq(rf_quant_ops_for(H)->fp8_quantize(H, w, wdt, rows, cols, wp, q, qp, s, sdt, sp,
                                                  NULL), RF_ERR_INVALID);
            ck_assert_int_eq(rf_quant_ops_for(G)->fp8_quantize(G, dw, wdt, rows, cols, wp, dq, qp, ds, sdt, sp,
                                                  NULL), RF_OK);
            expect_check(0, RF_QUANT_BAD_INPUT);
        }
        G->ops->free(G, dw);
        G->ops->free(G, dq);
        G->ops->free(G, ds);
        free(w);
        free(q);
        free(s);
    }
}
END_TEST


/* fp8-tensor / fp8-channel: scales over the region, q of a sub-region (a trainer slice), and
 * the in-place requantization to a larger scale, all byte for byte with the host rule. */
START_TEST(test_fp8_quantize_rows)
{
    /* rows, cols, w pitch extra, w dtype, per_row, q_r0, q_rows, q_c0, q_cols */
    static const int64_t cases[][9] = {
        {1, 1, 0, RF_DTYPE_F32, 0, 0, 1, 0, 1},
        {96, 96, 0, RF_DTYPE_BF16, 0, 48, 48, 0, 96},
        {160, 96, 3, RF_DTYPE_BF16, 1, 0, 160, 0, 96},
        {4096, 1024, 0, RF_DTYPE_BF16, 0, 0, 4096, 512, 512},
        {3072, 4096, 0, RF_DTYPE_F16, 1, 1024, 2048, 0, 4096},
        {100003, 7, 1, RF_DTYPE_F32, 1, 3, 99999, 2, 5}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t rows = cases[i][0], cols = cases[i][1], wp = cols + cases[i][2];
        rf_dtype_t wdt = (rf_dtype_t)cases[i][3];
        bool per_row = cases[i][4] != 0;
        int64_t r0 = cases[i][5], nr = cases[i][6], c0 = cases[i][7], nc = cases[i][8], qp = nc + 3;
        size_t wbytes = (size_t)(rows * wp) * rf_dtype_size(wdt), qbytes = (size_t)(nr * qp);
        size_t sbytes = (size_t)(per_row ? rows : 1) * 4;
        void *w = make_weights(wdt, (size_t)(rows * wp), 0);
        uint8_t *q = malloc(qbytes);
        float *s = malloc(sbytes);
        fill_random(q, qbytes);
        fill_random(s, sbytes);
        void *dw = dev_upload(w, wbytes), *dq = dev_upload(q, qbytes), *ds = dev_upload(s, sbytes);
        const rf_quant_ops_t *hq = rf_quant_ops_for(H), *gq = rf_quant_ops_for(G);
        ck_assert_int_eq(hq->fp8_quantize_rows(H, w, wdt, rows, cols, wp, per_row, s, r0, nr, c0,
                                               nc, q, qp, NULL),
                         RF_OK);
        ck_assert_int_eq(gq->fp8_quantize_rows(G, dw, wdt, rows, cols, wp, per_row, ds, r0, nr, c0,
                                               nc, dq, qp, NULL),
                         RF_OK);
        expect_check(-1, 0);
        expect_same(s, ds, sbytes, "fp8 rows scales");
        expect_same(q, dq, qbytes, "fp8 rows q");
        /* the shard requantization of the fused per-tensor modules, in place */
        float from = s[0], to = s[0] * 1.7f;
        ck_assert_int_eq(hq->fp8_requant(H, q, qbytes, from, to, NULL), RF_OK);
        ck_assert_int_eq(gq->fp8_requant(G, dq, qbytes, from, to, NULL), RF_OK);
        ck_assert_int_eq(rf_accel_sync(G), RF_OK);
        expect_same(q, dq, qbytes, "fp8 requant");
        if (wdt == RF_DTYPE_F32 && rows * cols > 1000) { /* a NaN is refused by both */
            float nan = __builtin_nanf("");
            ck_assert_int_eq(G->ops->copy(G, (float *)dw + 777, &nan, 4, RF_COPY_H2D, NULL), RF_OK);
            ((float *)w)[777] = nan;
            ck_assert_int_eq(hq->fp8_quantize_rows(H, w, wdt, rows, cols, wp, per_row, s, r0, nr,
                                                   c0, nc, q, qp, NULL),
                             RF_ERR_INVALID);
            ck_assert_int_eq(gq->fp8_quantize_rows(G, dw, wdt, rows, cols, wp, per_row, ds, r0, nr,
                                                   c0, nc, dq, qp, NULL),
                             RF_OK);
            expect_check(0, RF_QUANT_BAD_INPUT);
        }
        G->ops->free(G, dw);
        G->ops->free(G, dq);
        G->ops->free(G, ds);
        free(w);
        free(q);
        free(s);
    }
}
END_TEST

/* fp8-block dequantization, cuda == host byte for byte: random bytes (NaN bytes 0x7f / 0xff
 * among them), random positive scales with one NaN scale, odd sizes, pitches, each dtype. */
START_TEST(test_fp8_block_dequant)
{
    static const int64_t cases[][3] = {{1, 1, 0}, {130, 257, 3}, {4096, 512, 0}, {16384, 512, 1}};
    static const rf_dtype_t dts[] = {RF_DTYPE_BF16, RF_DTYPE_F16, RF_DTYPE_F32};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t rows = cases[i][0], cols = cases[i][1], wp = cols + cases[i][2], op = cols + 1;
        int64_t sr = (rows + 127) / 128, sp = (cols + 127) / 128 + 1;
        size_t wbytes = (size_t)(rows * wp), sbytes = (size_t)(sr * sp) * 4;
        uint8_t *w = malloc(wbytes);
        float *s = malloc(sbytes);
        fill_random(w, wbytes);
        for (int64_t k = 0; k < sr * sp; k++)
            s[k] = 0x1p-12f * (float)(1 + (rnd() >> 44));
        if (sr * sp > 2) {
            uint32_t nan = 0x7f800123u;
            memcpy(&s[1], &nan, 4);
        }
        void *dw = dev_upload(w, wbytes), *ds = dev_upload(s, sbytes);
        for (size_t d = 0; d < 3; d++) {
            size_t obytes = (size_t)(rows * op) * rf_dtype_size(dts[d]);
            void *o = malloc(obytes);
            memset(o, 0, obytes);
            void *dout = dev_upload(o, obytes);
            ck_assert_int_eq(rf_quant_ops_for(H)->fp8_block_dequant(H, w, rows, cols, wp, s, sp, o,
                                                                    dts[d], op, NULL),
                             RF_OK);
            ck_assert_int_eq(rf_quant_ops_for(G)->fp8_block_dequant(G, dw, rows, cols, wp, ds, sp,
                                                                    dout, dts[d], op, NULL),
                             RF_OK);
            ck_assert_int_eq(rf_accel_sync(G), RF_OK);
            expect_same(o, dout, obytes, "fp8 block dequant");
            G->ops->free(G, dout);
            free(o);
        }
        G->ops->free(G, dw);
        G->ops->free(G, ds);
        free(w);
        free(s);
    }
}
END_TEST

START_TEST(test_wna16_quantize)
{
    /* rows, K, G, w pitch extra, w dtype, scale dtype */
    static const int64_t cases[][6] = {
        {1, 8, 8, 0, RF_DTYPE_F32, RF_DTYPE_BF16},       {513, 1024, 128, 0, RF_DTYPE_BF16, RF_DTYPE_BF16},
        {77, 256, 32, 5, RF_DTYPE_F16, RF_DTYPE_F16},    {4096, 768, 128, 0, RF_DTYPE_BF16, RF_DTYPE_BF16},
        {31, 96, 4, 1, RF_DTYPE_F32, RF_DTYPE_F16},      {100, 2048, 2048, 0, RF_DTYPE_F32, RF_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t rows = cases[i][0], K = cases[i][1], Gs = cases[i][2], wp = K + cases[i][3];
        rf_dtype_t wdt = (rf_dtype_t)cases[i][4], sdt = (rf_dtype_t)cases[i][5];
        int64_t pp = K / 8 + 2, sp = K / Gs + 1;
        size_t wbytes = (size_t)(rows * wp) * rf_dtype_size(wdt);
        size_t pbytes = (size_t)(rows * pp) * 4, sbytes = (size_t)(rows * sp) * 2;
        void *w = make_weights(wdt, (size_t)(rows * wp), Gs);
        uint32_t *p = malloc(pbytes);
        void *s = malloc(sbytes);
        fill_random(p, pbytes);
        fill_random(s, sbytes);
        void *dw = dev_upload(w, wbytes), *dp = dev_upload(p, pbytes), *ds = dev_upload(s, sbytes);
        ck_assert_int_eq(rf_quant_ops_for(H)->wna16_quantize(H, w, wdt, rows, K, wp, Gs, p, pp, s, sdt, sp,
                                                NULL), RF_OK);
        ck_assert_int_eq(rf_quant_ops_for(G)->wna16_quantize(G, dw, wdt, rows, K, wp, Gs, dp, pp, ds, sdt, sp,
                                                NULL), RF_OK);
        expect_check(-1, 0);
        expect_same(p, dp, pbytes, "wna16 packed");
        expect_same(s, ds, sbytes, "wna16 scales");
        G->ops->free(G, dw);
        G->ops->free(G, dp);
        G->ops->free(G, ds);
        free(w);
        free(p);
        free(s);
    }
}
END_TEST

/* One check for a batch of device quantize calls (issue 18: no synchronization per call): it
 * names the first bad call in enqueue order and why, whatever comes after, and starts afresh. */
START_TEST(test_quant_check_batch)
{
    const rf_quant_ops_t *gq = rf_quant_ops_for(G);
    enum { R = 4, K = 256, GS = 128 };
    float w[R * K];
    for (int i = 0; i < R * K; i++)
        w[i] = (float)((i * 37) % 23 - 11) / 8.0f;
    float big[R * K], nanw[R * K];
    memcpy(big, w, sizeof(w));
    memcpy(nanw, w, sizeof(w));
    big[5] = 1e6f; /* amax / 7.5 past f16's 65504: the stored f16 scale overflows */
    nanw[K + 3] = __builtin_nanf("");
    float *dw = dev_upload(w, sizeof(w)), *dbig = dev_upload(big, sizeof(big));
    float *dnan = dev_upload(nanw, sizeof(nanw));
    uint32_t *dp;
    uint16_t *ds;
    ck_assert_int_eq(G->ops->alloc(G, R * K / 2, (void **)&dp), RF_OK);
    ck_assert_int_eq(G->ops->alloc(G, R * (K / GS) * 2, (void **)&ds), RF_OK);
    /* calls: good, good, big (bad scale), nan (bad input), good -> the first bad is call 2 */
    const float *order[] = {dw, dw, dbig, dnan, dw};
    for (int c = 0; c < 5; c++)
        ck_assert_int_eq(gq->wna16_quantize(G, order[c], RF_DTYPE_F32, R, K, K, GS, dp, K / 8, ds,
                                            RF_DTYPE_F16, K / GS, NULL),
                         RF_OK);
    expect_check(2, RF_QUANT_BAD_SCALE);
    /* afresh: good, nan, big -> call 1, bad input */
    const float *order2[] = {dw, dnan, dbig};
    for (int c = 0; c < 3; c++)
        ck_assert_int_eq(gq->wna16_quantize(G, order2[c], RF_DTYPE_F32, R, K, K, GS, dp, K / 8, ds,
                                            RF_DTYPE_F16, K / GS, NULL),
                         RF_OK);
    expect_check(1, RF_QUANT_BAD_INPUT);
    /* bf16 scales do not overflow: the same big input is fine, and mixed with fp8 calls */
    ck_assert_int_eq(gq->wna16_quantize(G, dbig, RF_DTYPE_F32, R, K, K, GS, dp, K / 8, ds,
                                        RF_DTYPE_BF16, K / GS, NULL),
                     RF_OK);
    float *dsc;
    uint8_t *dq;
    ck_assert_int_eq(G->ops->alloc(G, R * 4, (void **)&dsc), RF_OK);
    ck_assert_int_eq(G->ops->alloc(G, R * K, (void **)&dq), RF_OK);
    ck_assert_int_eq(gq->fp8_quantize_rows(G, dw, RF_DTYPE_F32, R, K, K, true, dsc, 0, R, 0, K, dq,
                                           K, NULL),
                     RF_OK);
    ck_assert_int_eq(gq->fp8_quantize_rows(G, dnan, RF_DTYPE_F32, R, K, K, false, dsc, 0, R, 0, K,
                                           dq, K, NULL),
                     RF_OK);
    expect_check(2, RF_QUANT_BAD_INPUT);
    expect_check(-1, 0); /* nothing since */
    G->ops->free(G, dw);
    G->ops->free(G, dbig);
    G->ops->free(G, dnan);
    G->ops->free(G, dp);
    G->ops->free(G, ds);
    G->ops->free(G, dsc);
    G->ops->free(G, dq);
}
END_TEST

START_TEST(test_checksum)
{
    size_t sizes[] = {0, 1, 7, 8, 9, 255, 1000003, ((size_t)64 << 20) + 5};
    size_t maxn = ((size_t)64 << 20) + 16;
    unsigned char *h = malloc(maxn);
    fill_random(h, maxn);
    unsigned char *d = dev_upload(h, maxn);
    rf_accel_stream_t *st;
    ck_assert_int_eq(G->ops->stream_create(G, &st), RF_OK);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t off = 0; off < 8; off += (sizes[i] > 100000 ? 3 : 1)) {
            uint64_t a = 0, b = 1;
            ck_assert_int_eq(H->ops->checksum(H, h + off, sizes[i], &a, NULL), RF_OK);
            ck_assert_int_eq(G->ops->checksum(G, d + off, sizes[i], &b, st), RF_OK);
            ck_assert_msg(a == b, "checksum of %zu bytes at offset %zu: host %016llx cuda %016llx",
                          sizes[i], off, (unsigned long long)a, (unsigned long long)b);
        }
    G->ops->stream_destroy(st);
    G->ops->free(G, d);
    free(h);
}
END_TEST

/* checksum_async (the mpi receiver's device check): the word sum from word0 on the GPU, with
 * nothing synchronizing until the event, equals the host's; two sums in flight on one stream
 * into two accumulators do not disturb each other. */
START_TEST(test_checksum_async)
{
    size_t sizes[] = {0, 5, 8, 4093, ((size_t)32 << 20) + 3};
    size_t maxn = sizes[4] + 16; /* the sums read sizes[i] bytes from h + 16 and d + 16 */
    unsigned char *h = malloc(maxn);
    fill_random(h, maxn);
    unsigned char *d = dev_upload(h, maxn);
    void *acc = NULL;
    uint64_t *out = NULL;
    ck_assert_int_eq(G->ops->alloc(G, 16, &acc), RF_OK);
    ck_assert_int_eq(G->ops->alloc_host(G, 16, (void **)&out), RF_OK);
    rf_accel_event_t *ev = NULL;
    ck_assert_int_eq(G->ops->event_create(G, &ev), RF_OK);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (uint64_t w0 = 0; w0 < 3; w0++) {
            size_t n2 = sizes[i] / 2;
            out[0] = out[1] = 1;
            ck_assert_int_eq(G->ops->checksum_async(G, d + 16, sizes[i], w0, acc, &out[0], NULL),
                             RF_OK);
            ck_assert_int_eq(
                G->ops->checksum_async(G, d + 3, n2, w0 + 7, (char *)acc + 8, &out[1], NULL),
                RF_OK);
            ck_assert_int_eq(G->ops->event_record(ev, NULL), RF_OK);
            ck_assert_int_eq(G->ops->event_sync(ev), RF_OK);
            uint64_t want0 = rf_accel_sum_words(h + 16, sizes[i], w0);
            uint64_t want1 = rf_accel_sum_words(h + 3, n2, w0 + 7);
            ck_assert_msg(out[0] == want0 && out[1] == want1,
                          "%zu bytes from word %llu: cuda %016llx host %016llx; %zu bytes at "
                          "offset 3: cuda %016llx host %016llx",
                          sizes[i], (unsigned long long)w0, (unsigned long long)out[0],
                          (unsigned long long)want0, n2, (unsigned long long)out[1],
                          (unsigned long long)want1);
        }
    G->ops->event_destroy(ev);
    G->ops->free_host(G, out);
    G->ops->free(G, acc);
    G->ops->free(G, d);
    free(h);
}
END_TEST

START_TEST(test_copies_events)
{
    size_t n = 3000017;
    unsigned char *h, *back;
    ck_assert_int_eq(G->ops->alloc_host(G, n, (void **)&h), RF_OK);
    ck_assert_int_eq(G->ops->alloc_host(G, n, (void **)&back), RF_OK);
    fill_random(h, n);
    void *d1, *d2;
    ck_assert_int_eq(G->ops->alloc(G, n, &d1), RF_OK);
    ck_assert_int_eq(G->ops->alloc(G, n, &d2), RF_OK);
    rf_accel_stream_t *s;
    rf_accel_event_t *e;
    ck_assert_int_eq(G->ops->stream_create(G, &s), RF_OK);
    ck_assert_int_eq(G->ops->event_create(G, &e), RF_OK);
    ck_assert_int_eq(G->ops->copy(G, d1, h, n, RF_COPY_H2D, s), RF_OK);
    ck_assert_int_eq(G->ops->memset(G, d2, 0x5A, n, s), RF_OK);
    /* 2-D: 1000 rows of 2999 bytes, pitch 3000 */
    ck_assert_int_eq(G->ops->copy_2d(G, d2, 3000, d1, 3000, 2999, 1000, RF_COPY_D2D, s), RF_OK);
    ck_assert_int_eq(G->ops->copy(G, back, d2, n, RF_COPY_D2H, s), RF_OK);
    ck_assert_int_eq(G->ops->event_record(e, s), RF_OK);
    ck_assert_int_eq(G->ops->event_sync(e), RF_OK);
    bool done = false;
    ck_assert_int_eq(G->ops->event_query(e, &done), RF_OK);
    ck_assert(done);
    for (size_t i = 0; i < n; i++) {
        unsigned char want = (i < 3000000 && i % 3000 != 2999) ? h[i] : 0x5A;
        if (back[i] != want)
            ck_abort_msg("copy_2d: byte %zu: 0x%02x, want 0x%02x", i, back[i], want);
    }
    G->ops->event_destroy(e);
    G->ops->stream_destroy(s);
    G->ops->free(G, d1);
    G->ops->free(G, d2);
    G->ops->free_host(G, h);
    G->ops->free_host(G, back);
}
END_TEST

/* Not a test: the device-to-device copy bandwidth, best of 5. */
static void bench_d2d(void)
{
    const char *env = getenv("REFIT_ACCEL_BENCH_MIB");
    size_t mib = env ? (size_t)strtoull(env, NULL, 10) : 4096;
    size_t bytes = mib << 20;
    void *a = NULL, *b = NULL;
    if (!bytes || G->ops->alloc(G, bytes, &a) != RF_OK || G->ops->alloc(G, bytes, &b) != RF_OK) {
        printf("bench: d2d copy of %zu MiB skipped (allocation)\n", mib);
        G->ops->free(G, a);
        return;
    }
    G->ops->memset(G, a, 1, bytes, NULL);
    rf_accel_event_t *e0, *e1;
    G->ops->event_create(G, &e0);
    G->ops->event_create(G, &e1);
    float best = 0.0f;
    for (int it = 0; it < 6; it++) { /* the first is a warm-up */
        float ms = 0.0f;
        G->ops->event_record(e0, NULL);
        G->ops->copy(G, b, a, bytes, RF_COPY_D2D, NULL);
        G->ops->event_record(e1, NULL);
        G->ops->event_sync(e1);
        G->ops->event_elapsed_ms(e0, e1, &ms);
        if (it > 0 && (best == 0.0f || ms < best))
            best = ms;
    }
    double gbs = (double)bytes / (best * 1e-3) / 1e9;
    printf("bench: d2d copy %zu MiB, best of 5: %.3f ms, %.1f GB/s payload, %.1f GB/s "
           "memory traffic (read + write)\n", mib, best, gbs, 2.0 * gbs);
    double kb = 0, km = 0;
    G->ops->free(G, b);
    b = NULL;
    G->ops->free(G, a);
    a = NULL;
    if (rf_accel_rows_ceiling(G, bytes, 5, &kb, &km) == RF_OK)
        printf("bench: the batch kernel's copy of %zu MiB (copy engines off), best of 5: %.3f ms, "
               "%.1f GB/s payload (%.1f%% of the copy above)\n", mib, kb * 1e3,
               (double)bytes / kb / 1e9, 100.0 * best * 1e-3 / kb);
    fflush(stdout);
    G->ops->event_destroy(e0);
    G->ops->event_destroy(e1);
    G->ops->free(G, a);
    G->ops->free(G, b);
}

static Suite *cuda_suite(void)
{
    Suite *s = suite_create("accel_cuda");
    TCase *tc = tcase_create("cuda_vs_host");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_copies_events);
    tcase_add_test(tc, test_copy_rows);
    tcase_add_test(tc, test_copy_rows_batch);
    tcase_add_test(tc, test_copy_rows_batch_transpose);
    tcase_add_test(tc, test_copy_rows_batch_arena);
    tcase_add_test(tc, test_gen_fill);
    tcase_add_test(tc, test_zero_rows);
    tcase_add_test(tc, test_fnuz);
    tcase_add_test(tc, test_repack);
    tcase_add_test(tc, test_fp8_quantize);
    tcase_add_test(tc, test_fp8_quantize_rows);
    tcase_add_test(tc, test_wna16_quantize);
    tcase_add_test(tc, test_fp8_block_dequant);
    tcase_add_test(tc, test_quant_check_batch);
    tcase_add_test(tc, test_checksum);
    tcase_add_test(tc, test_checksum_async);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!rf_accel_cuda_available()) {
        printf("skipped: no CUDA device (or refit built without CUDA)\n");
        return 77;
    }
    if (rf_accel_open("host", 0, &H) != RF_OK || rf_accel_open("cuda", 0, &G) != RF_OK) {
        fprintf(stderr, "cannot open the host and cuda accelerators\n");
        return EXIT_FAILURE;
    }
    setenv("REFIT_CUDA_TRANSPOSE", "1", 1); /* read by create: GT transposes, G does not */
    rf_status_t gts = rf_accel_open("cuda", 0, &GT);
    unsetenv("REFIT_CUDA_TRANSPOSE");
    if (gts != RF_OK) {
        fprintf(stderr, "cannot open the cuda accelerator with REFIT_CUDA_TRANSPOSE=1\n");
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(cuda_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_VERBOSE);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (!failed)
        bench_d2d();
    rf_accel_close(GT);
    rf_accel_close(G);
    rf_accel_close(H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
