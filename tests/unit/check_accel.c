/* Unit tests: the host accelerator (core/accel_host.c) and the registry, against scalar
 * expectations written out here: strided row copies (row-major, K-first, expert offsets,
 * bf16 / f16 -> f32 conversion), vocab zero fill, fnuz, the tile repack against
 * rf_wna16_repack_index, the quantizers on hand-worked blocks, and the checksum definition
 * ("refit-sum64 v1", include/refit/accel.h) recomputed byte by byte. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "refit/accel.h"
#include "refit/formats.h"
#include "refit/quant.h"
#include "refit/quant_ops.h"

/* refit-sum64 v1 of "refit" and "0123456789abcdef", computed once from the definition with an
 * independent script (Python, arbitrary-precision integers masked to 64 bits). */
#define REFIT_SUM_REFIT 0x7e20f3ccb35baee3ull
#define REFIT_SUM_HEX16 0xfe5b72e708d4c462ull

static rf_accel_t *open_host(void)
{
    rf_accel_t *a = NULL;
    ck_assert_int_eq(rf_accel_open("host", 0, &a), RF_OK);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_eq(a->ops, &rf_accel_host_ops);
    return a;
}

START_TEST(test_registry)
{
    ck_assert_ptr_eq(rf_accel_lookup("host"), &rf_accel_host_ops);
    ck_assert_ptr_nonnull(rf_accel_lookup("cuda"));
    ck_assert_str_eq(rf_accel_lookup("cuda")->name, "cuda");
    ck_assert_ptr_null(rf_accel_lookup("rocm"));
    rf_accel_t *a = NULL;
    ck_assert_int_eq(rf_accel_open("rocm", 0, &a), RF_ERR_INVALID);
    ck_assert_int_eq(rf_accel_open("host", 1, &a), RF_ERR_INVALID);
    ck_assert_int_eq(rf_accel_open(NULL, 0, &a), RF_OK);
    ck_assert_str_eq(a->ops->name, rf_accel_cuda_available() ? "cuda" : "host");
    rf_accel_close(a);
    if (!rf_accel_cuda_available()) {
        a = NULL;
        ck_assert_int_eq(rf_accel_open("cuda", 0, &a), RF_ERR_UNSUPPORTED);
        ck_assert_ptr_null(a);
    }
}
END_TEST

/* host-device: an h2d copy from its pinned (alloc_host) memory completes at an event or a stream
 * synchronize, and a source that changed before then fails that call (a GPU could have read
 * the new bytes); one waited for first, and pageable sources, never do. */
START_TEST(test_host_device_pinned_copies)
{
    rf_accel_t *a = NULL;
    ck_assert_int_eq(rf_accel_open("host-device", 0, &a), RF_OK);
    const rf_accel_ops_t *o = a->ops;
    unsigned char *pin = NULL, *dev = NULL, pageable[64];
    rf_accel_event_t *e = NULL;
    rf_accel_stream_t *s = NULL;
    ck_assert_int_eq(o->alloc_host(a, 4096, (void **)&pin), RF_OK);
    ck_assert_int_eq(o->alloc(a, 4096, (void **)&dev), RF_OK);
    ck_assert_int_eq(o->event_create(a, &e), RF_OK);
    ck_assert_int_eq(o->stream_create(a, &s), RF_OK);
    memset(pin, 0x11, 4096);
    /* waited for, then reused: fine */
    ck_assert_int_eq(o->copy(a, dev, pin + 100, 1000, RF_COPY_H2D, NULL), RF_OK);
    ck_assert_uint_eq(dev[999], 0x11);
    ck_assert_int_eq(o->event_record(e, NULL), RF_OK);
    ck_assert_int_eq(o->event_sync(e), RF_OK);
    pin[500] = 0x22;
    ck_assert_int_eq(o->event_sync(e), RF_OK);
    ck_assert_uint_eq(rf_accel_host_device_changed(a, NULL), 0);
    /* reused before the event was waited for: the wait fails, once */
    ck_assert_int_eq(o->copy(a, dev, pin, 1000, RF_COPY_H2D, NULL), RF_OK);
    ck_assert_int_eq(o->event_record(e, NULL), RF_OK);
    pin[10] ^= 0xff;
    ck_assert_int_eq(o->event_sync(e), RF_ERR_CUDA);
    ck_assert_uint_eq(rf_accel_host_device_changed(a, NULL), 1);
    ck_assert_int_eq(o->event_sync(e), RF_OK);
    /* an event recorded before the copy does not complete it; a stream synchronize does */
    ck_assert_int_eq(o->event_record(e, NULL), RF_OK);
    ck_assert_int_eq(o->copy(a, dev, pin + 2048, 16, RF_COPY_H2D, NULL), RF_OK);
    ck_assert_int_eq(o->event_sync(e), RF_OK);
    pin[2050] ^= 1;
    ck_assert_int_eq(o->stream_sync(s), RF_ERR_CUDA);
    ck_assert_uint_eq(rf_accel_host_device_changed(a, NULL), 2);
    /* event_query reports done and completes the copies before it */
    ck_assert_int_eq(o->copy(a, dev, pin, 64, RF_COPY_H2D, NULL), RF_OK);
    ck_assert_int_eq(o->event_record(e, NULL), RF_OK);
    bool done = false;
    ck_assert_int_eq(o->event_query(e, &done), RF_OK);
    ck_assert(done);
    pin[0] ^= 1;
    ck_assert_int_eq(o->stream_sync(s), RF_OK);
    /* pageable sources are consumed by the copy itself */
    memset(pageable, 0x33, sizeof(pageable));
    ck_assert_int_eq(o->copy(a, dev, pageable, sizeof(pageable), RF_COPY_H2D, NULL), RF_OK);
    ck_assert_int_eq(o->event_record(e, NULL), RF_OK);
    pageable[3] = 0;
    ck_assert_int_eq(o->event_sync(e), RF_OK);
    ck_assert_uint_eq(rf_accel_host_device_changed(a, NULL), 2);
    o->stream_destroy(s);
    o->event_destroy(e);
    o->free(a, dev);
    o->free_host(a, pin);
    rf_accel_close(a);
}
END_TEST

START_TEST(test_memory_streams)
{
    rf_accel_t *a = open_host();
    const rf_accel_ops_t *o = a->ops;
    void *p = NULL, *q = NULL;
    ck_assert_int_eq(o->alloc(a, 1000, &p), RF_OK);
    ck_assert_uint_eq((uintptr_t)p % 256, 0);
    ck_assert_int_eq(o->alloc_host(a, 1000, &q), RF_OK);
    ck_assert_int_eq(o->memset(a, p, 0xAB, 1000, NULL), RF_OK);
    ck_assert_int_eq(o->copy(a, q, p, 1000, RF_COPY_D2H, NULL), RF_OK);
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_eq(((unsigned char *)q)[i], 0xAB);
    /* 2-D: 3 rows of 4 bytes, source pitch 10, destination pitch 5 */
    unsigned char src[30], dst[15];
    for (int i = 0; i < 30; i++)
        src[i] = (unsigned char)i;
    memset(dst, 0xEE, sizeof(dst));
    ck_assert_int_eq(o->copy_2d(a, dst, 5, src, 10, 4, 3, RF_COPY_H2H, NULL), RF_OK);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++)
            ck_assert_uint_eq(dst[r * 5 + c], c < 4 ? r * 10 + c : 0xEE);
    ck_assert_int_eq(o->copy_2d(a, dst, 3, src, 10, 4, 3, RF_COPY_H2H, NULL), RF_ERR_INVALID);
    rf_accel_stream_t *s = NULL;
    rf_accel_event_t *e0 = NULL, *e1 = NULL;
    bool done = false;
    float ms = -1;
    ck_assert_int_eq(o->stream_create(a, &s), RF_OK);
    ck_assert_int_eq(o->event_create(a, &e0), RF_OK);
    ck_assert_int_eq(o->event_create(a, &e1), RF_OK);
    ck_assert_ptr_eq(s->ops, o);
    ck_assert_ptr_eq(e0->ops, o);
    ck_assert_int_eq(o->event_elapsed_ms(e0, e1, &ms), RF_ERR_INVALID); /* never recorded */
    ck_assert_int_eq(o->event_record(e0, s), RF_OK);
    struct timespec nap = {0, 3000000}; /* 3 ms */
    nanosleep(&nap, NULL);
    ck_assert_int_eq(o->event_record(e1, s), RF_OK);
    ck_assert_int_eq(o->event_query(e1, &done), RF_OK);
    ck_assert(done);
    ck_assert_int_eq(o->event_sync(e1), RF_OK);
    ck_assert_int_eq(o->stream_sync(s), RF_OK);
    ck_assert_int_eq(o->event_elapsed_ms(e0, e1, &ms), RF_OK);
    ck_assert_msg(ms >= 2.9f && ms < 10000.0f, "host events 3 ms apart: %f ms", (double)ms);
    o->event_destroy(e0);
    o->event_destroy(e1);
    o->stream_destroy(s);
    o->free_host(a, q);
    o->free(a, p);
    rf_accel_close(a);
}
END_TEST

/* Row-major destination (E 2, 6 rows, 8 cols, uint16): source 3 x 4 (pitch 5) lands at expert
 * 1, rows 2..4, cols 3..6; everything else keeps its sentinel. */
START_TEST(test_copy_rows_row_major)
{
    rf_accel_t *a = open_host();
    uint16_t d[2 * 6 * 8], s[3 * 5];
    for (int i = 0; i < 15; i++)
        s[i] = (uint16_t)(100 + i);
    for (int i = 0; i < 96; i++)
        d[i] = 0xEEEE;
    rf_accel_rows_t r = {
        .dst = {d, 2, RF_DTYPE_BF16, 8, 1, 48},
        .expert = 1, .dst_row = 2, .dst_col = 3,
        .src = s, .src_dtype = RF_DTYPE_BF16, .src_pitch = 5, .rows = 3, .cols = 4,
    };
    ck_assert_int_eq(a->ops->copy_rows(a, &r, NULL), RF_OK);
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 6; i++)
            for (int c = 0; c < 8; c++) {
                uint16_t want = 0xEEEE;
                if (e == 1 && i >= 2 && i < 5 && c >= 3 && c < 7)
                    want = (uint16_t)(100 + (i - 2) * 5 + (c - 3));
                ck_assert_uint_eq(d[e * 48 + i * 8 + c], want);
            }
    r.src_pitch = 3; /* < cols */
    ck_assert_int_eq(a->ops->copy_rows(a, &r, NULL), RF_ERR_INVALID);
    r.src_pitch = 5;
    r.src_dtype = RF_DTYPE_F32; /* 4-byte source into a 2-byte slot */
    ck_assert_int_eq(a->ops->copy_rows(a, &r, NULL), RF_ERR_INVALID);
    rf_accel_close(a);
}
END_TEST

/* K-first int32 destination (model (K'=5, N=6) holding checkpoint (N, K') transposed):
 * checkpoint rows 1..3 (n), all 5 columns (k) land at model [k][n]. */
START_TEST(test_copy_rows_kfirst)
{
    rf_accel_t *a = open_host();
    int32_t d[5 * 6], s[3 * 5];
    for (int i = 0; i < 15; i++)
        s[i] = 1000 + i;
    for (int i = 0; i < 30; i++)
        d[i] = -1;
    rf_accel_rows_t r = {
        .dst = {d, 4, RF_DTYPE_I32, 1, 6, 0},
        .dst_row = 1,
        .src = s, .src_dtype = RF_DTYPE_I32, .src_pitch = 5, .rows = 3, .cols = 5,
    };
    ck_assert_int_eq(a->ops->copy_rows(a, &r, NULL), RF_OK);
    for (int k = 0; k < 5; k++)
        for (int n = 0; n < 6; n++)
            ck_assert_int_eq(d[k * 6 + n], n >= 1 && n < 4 ? 1000 + (n - 1) * 5 + k : -1);
    rf_accel_close(a);
}
END_TEST

/* bf16 and f16 block scales into an f32 slot: exact values. */
START_TEST(test_copy_rows_convert)
{
    rf_accel_t *a = open_host();
    uint16_t bf[4] = {0x3F80, 0xC040, 0x0001, 0x7F80}; /* 1, -3, 2^-133 (subnormal), +inf */
    uint16_t hf[4] = {0x3C00, 0xC200, 0x0001, 0x7BFF}; /* 1, -3, 2^-24, 65504 */
    float want_bf[4] = {1.0f, -3.0f, 0x1p-133f, __builtin_inff()};
    float want_hf[4] = {1.0f, -3.0f, 0x1p-24f, 65504.0f};
    float d[2 * 3];
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < 6; i++)
            d[i] = -7.0f;
        rf_accel_rows_t r = {
            .dst = {d, 4, RF_DTYPE_F32, 3, 1, 0},
            .dst_col = 1,
            .src = t ? hf : bf, .src_dtype = t ? RF_DTYPE_F16 : RF_DTYPE_BF16, .src_pitch = 2,
            .rows = 2, .cols = 2,
        };
        ck_assert_int_eq(a->ops->copy_rows(a, &r, NULL), RF_OK);
        const float *w = t ? want_hf : want_bf;
        ck_assert(d[0] == -7.0f && d[3] == -7.0f);
        ck_assert(memcmp(&d[1], &w[0], 4) == 0 && memcmp(&d[2], &w[1], 4) == 0);
        ck_assert(memcmp(&d[4], &w[2], 4) == 0 && memcmp(&d[5], &w[3], 4) == 0);
    }
    rf_accel_close(a);
}
END_TEST

START_TEST(test_zero_rows)
{
    rf_accel_t *a = open_host();
    uint16_t d[5 * 4];
    for (int i = 0; i < 20; i++)
        d[i] = 0x1234;
    rf_accel_dst_t dst = {d, 2, RF_DTYPE_BF16, 4, 1, 0};
    ck_assert_int_eq(a->ops->zero_rows(a, &dst, 3, 2, 4, NULL), RF_OK);
    for (int i = 0; i < 20; i++)
        ck_assert_uint_eq(d[i], i >= 12 ? 0 : 0x1234);
    /* K-first: rows are the unit stride */
    for (int i = 0; i < 20; i++)
        d[i] = 0x1234;
    rf_accel_dst_t kf = {d, 2, RF_DTYPE_BF16, 1, 5, 0};
    ck_assert_int_eq(a->ops->zero_rows(a, &kf, 1, 2, 4, NULL), RF_OK);
    for (int i = 0; i < 20; i++)
        ck_assert_uint_eq(d[i], (i % 5 == 1 || i % 5 == 2) ? 0 : 0x1234);
    rf_accel_close(a);
}
END_TEST

START_TEST(test_fnuz)
{
    rf_accel_t *a = open_host();
    uint8_t w[6] = {0x80, 0x00, 0x7E, 0xFE, 0x81, 0x80};
    float s[3] = {1.5f, 0x1p-126f, 3e38f};
    ck_assert_int_eq(rf_quant_ops_for(a)->fp8_to_fnuz(a, w, 6, s, 3, NULL), RF_OK);
    uint8_t ww[6] = {0x00, 0x00, 0x7E, 0xFE, 0x81, 0x00};
    ck_assert(memcmp(w, ww, 6) == 0);
    ck_assert(s[0] == 3.0f && s[1] == 0x1p-125f && s[2] == __builtin_inff());
    rf_accel_close(a);
}
END_TEST

/* fp8-block dequantization: values known by hand (e4m3 0x38 = 1.0, 0x40 = 2.0, 0x01 = 2^-9,
 * 0xB8 = -1.0), the 128-block scale index, pitches, each output dtype, and the NaN rule
 * (a NaN byte 0x7fc00000 whatever its sign; a NaN scale keeps its payload, quieted). */
START_TEST(test_fp8_block_dequant)
{
    rf_accel_t *a = open_host();
    const rf_quant_ops_t *q = rf_quant_ops_for(a);
    enum { R = 130, C = 129, WP = 131, OP = 133, SP = 3 };
    static uint8_t w[R * WP];
    static float sc[2 * SP], out[R * OP];
    static uint16_t o16[R * OP];
    for (int i = 0; i < R * WP; i++)
        w[i] = 0x38; /* 1.0 */
    w[0] = 0x40;                 /* 2.0 */
    w[1] = 0x01;                 /* 2^-9 */
    w[2] = 0xB8;                 /* -1.0 */
    w[3] = 0x7F;                 /* NaN */
    w[4] = 0xFF;                 /* NaN, negative sign */
    w[129 * WP + 128] = 0x40;    /* the last block row and column */
    sc[0] = 0.5f;
    sc[1] = 3.0f;
    sc[SP] = 0.25f;
    sc[SP + 1] = 1.5f;
    sc[2] = sc[SP + 2] = -7.0f; /* beyond the 2 block columns: never read */
    ck_assert_int_eq(q->fp8_block_dequant(a, w, R, C, WP, sc, SP, out, RF_DTYPE_F32, OP, NULL),
                     RF_OK);
    ck_assert(out[0] == 1.0f && out[1] == 0x1p-10f && out[2] == -0.5f);
    uint32_t u3, u4;
    memcpy(&u3, &out[3], 4);
    memcpy(&u4, &out[4], 4);
    ck_assert_uint_eq(u3, 0x7fc00000u);
    ck_assert_uint_eq(u4, 0x7fc00000u);
    ck_assert(out[127] == 0.5f && out[128] == 3.0f);         /* row 0: block columns 0, 1 */
    ck_assert(out[128 * OP + 5] == 0.25f);                   /* block row 1 */
    ck_assert(out[129 * OP + 128] == 3.0f);                  /* 2.0 x 1.5 */
    ck_assert_int_eq(q->fp8_block_dequant(a, w, R, C, WP, sc, SP, o16, RF_DTYPE_BF16, OP, NULL),
                     RF_OK);
    ck_assert_uint_eq(o16[0], 0x3f80u); /* 1.0 */
    ck_assert_uint_eq(o16[2], 0xbf00u); /* -0.5 */
    ck_assert_uint_eq(o16[3], 0x7fc0u);
    ck_assert_int_eq(q->fp8_block_dequant(a, w, R, C, WP, sc, SP, o16, RF_DTYPE_F16, OP, NULL),
                     RF_OK);
    ck_assert_uint_eq(o16[0], 0x3c00u); /* 1.0 */
    ck_assert_uint_eq(o16[1], 0x1400u); /* 2^-10 */
    ck_assert_uint_eq(o16[4], 0x7e00u);
    /* a NaN scale: its payload, quieted (0x7f800001 -> 0x7fc00001) */
    uint32_t sn = 0x7f800001u, got;
    memcpy(&sc[0], &sn, 4);
    ck_assert_int_eq(q->fp8_block_dequant(a, w, R, C, WP, sc, SP, out, RF_DTYPE_F32, OP, NULL),
                     RF_OK);
    memcpy(&got, &out[5], 4);
    ck_assert_uint_eq(got, 0x7fc00001u);
    /* bad arguments */
    ck_assert_int_eq(q->fp8_block_dequant(a, w, R, C, WP, sc, SP, out, RF_DTYPE_I32, OP, NULL),
                     RF_ERR_INVALID);
    ck_assert_int_eq(q->fp8_block_dequant(a, w, R, C, C - 1, sc, SP, out, RF_DTYPE_F32, OP, NULL),
                     RF_ERR_INVALID);
    ck_assert_int_eq(q->fp8_block_dequant(a, w, R, C, WP, sc, 1, out, RF_DTYPE_F32, OP, NULL),
                     RF_ERR_INVALID);
    rf_accel_close(a);
}
END_TEST

START_TEST(test_repack)
{
    rf_accel_t *a = open_host();
    const int64_t B = 2, R = 37, C = 70; /* partial row tile (37 = 2 x 16 + 5), partial col tile */
    int64_t n = B * R * C;
    uint32_t *m = malloc((size_t)n * 4), *rt = malloc((size_t)n * 4), *back = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        m[i] = (uint32_t)i * 2654435761u;
    ck_assert_int_eq(rf_quant_ops_for(a)->wna16_repack(a, rt, m, B, R, C, 4, false, NULL), RF_OK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                ck_assert_uint_eq(rt[b * R * C + rf_wna16_repack_index(R, C, r, c)],
                                  m[b * R * C + r * C + c]);
    ck_assert_int_eq(rf_quant_ops_for(a)->wna16_repack(a, back, rt, B, R, C, 4, true, NULL), RF_OK);
    ck_assert(memcmp(back, m, (size_t)n * 4) == 0);
    ck_assert_int_eq(rf_quant_ops_for(a)->wna16_repack(a, back, rt, B, R, C, 3, true, NULL), RF_ERR_INVALID);
    free(m);
    free(rt);
    free(back);
    rf_accel_close(a);
}
END_TEST

/* fp8: a 2 x 3 block whose amax is 448 -> s = 1, bytes are the e4m3 encodings; a zero block
 * -> s = 1e-12 / 448; non-finite input is refused. */
START_TEST(test_fp8_quantize)
{
    rf_accel_t *a = open_host();
    float w[6] = {448.0f, -1.0f, 0.5f, 0.0f, -448.0f, 1.125f};
    uint8_t q[6];
    float s;
    ck_assert_int_eq(rf_quant_ops_for(a)->fp8_quantize(a, w, RF_DTYPE_F32, 2, 3, 3, q, 3, &s, RF_DTYPE_F32, 1,
                                          NULL), RF_OK);
    uint8_t want[6] = {0x7E, 0xB8, 0x30, 0x00, 0xFE, 0x39};
    ck_assert(s == 1.0f);
    ck_assert(memcmp(q, want, 6) == 0);
    float z[2] = {0.0f, -0.0f};
    ck_assert_int_eq(rf_quant_ops_for(a)->fp8_quantize(a, z, RF_DTYPE_F32, 1, 2, 2, q, 2, &s, RF_DTYPE_F32, 1,
                                          NULL), RF_OK);
    ck_assert(s == 1e-12f / 448.0f);
    ck_assert(q[0] == 0x00 && q[1] == 0x80);
    z[1] = __builtin_nanf("");
    ck_assert_int_eq(rf_quant_ops_for(a)->fp8_quantize(a, z, RF_DTYPE_F32, 1, 2, 2, q, 2, &s, RF_DTYPE_F32, 1,
                                          NULL), RF_ERR_INVALID);
    rf_accel_close(a);
}
END_TEST

/* wna16: one row, K 8, G 8, amax 7.5 -> s = 1 (bf16 exact); q = rne(w): 2.5 -> 2 (ties to even),
 * -7.5 -> -8, 3.5 -> 4, 7.5 -> 8 -> 7 (clamped); stored q + 8 in nibble k. */
START_TEST(test_wna16_quantize)
{
    rf_accel_t *a = open_host();
    float w[8] = {2.5f, -7.5f, 0.0f, 7.5f, 3.5f, -0.5f, 1.0f, -2.0f};
    uint32_t p;
    uint16_t s;
    ck_assert_int_eq(rf_quant_ops_for(a)->wna16_quantize(a, w, RF_DTYPE_F32, 1, 8, 8, 8, &p, 1, &s,
                                            RF_DTYPE_BF16, 1, NULL), RF_OK);
    ck_assert_uint_eq(s, 0x3F80);
    int qv[8] = {2, -8, 0, 7, 4, 0, 1, -2};
    uint32_t want = 0;
    for (int k = 0; k < 8; k++)
        want |= (uint32_t)(qv[k] + 8) << (4 * k);
    ck_assert_uint_eq(p, want);
    float z[8] = {0};
    ck_assert_int_eq(rf_quant_ops_for(a)->wna16_quantize(a, z, RF_DTYPE_F32, 1, 8, 8, 8, &p, 1, &s,
                                            RF_DTYPE_F16, 1, NULL), RF_OK);
    ck_assert_uint_eq(s, 0x1400); /* f16 2^-10 */
    ck_assert_uint_eq(p, 0x88888888u);
    /* the host refuses bad input at the call, so its check has nothing pending */
    float bad[8] = {0, 0, 0, __builtin_nanf(""), 0, 0, 0, 0};
    ck_assert_int_eq(rf_quant_ops_for(a)->wna16_quantize(a, bad, RF_DTYPE_F32, 1, 8, 8, 8, &p, 1,
                                                         &s, RF_DTYPE_F16, 1, NULL),
                     RF_ERR_INVALID);
    int64_t first = -2;
    unsigned why = 9;
    ck_assert_int_eq(rf_quant_ops_for(a)->check(a, NULL, &first, &why), RF_OK);
    ck_assert_int_eq(first, -1);
    ck_assert_uint_eq(why, 0);
    ck_assert_int_eq(rf_quant_ops_for(a)->check(a, NULL, NULL, &why), RF_ERR_INVALID);
    rf_accel_close(a);
}
END_TEST

/* The checksum definition, recomputed here from bytes with no shared helper. */
static uint64_t fmix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t ref_sum(const unsigned char *p, size_t n)
{
    uint64_t S = 0;
    for (size_t i = 0; i * 8 < n; i++) {
        uint64_t w = 0;
        for (size_t b = 0; b < 8; b++)
            if (8 * i + b < n)
                w |= (uint64_t)p[8 * i + b] << (8 * b);
        S += fmix(w ^ ((uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull));
    }
    return fmix(S ^ ((uint64_t)n * 0xC2B2AE3D27D4EB4Full));
}

START_TEST(test_checksum)
{
    rf_accel_t *a = open_host();
    unsigned char buf[1031];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t n = 0; n < 40; n++)
        for (size_t off = 0; off < 8; off++)
            ck_assert_uint_eq(rf_accel_checksum(buf + off, n), ref_sum(buf + off, n));
    ck_assert_uint_eq(rf_accel_checksum(buf, sizeof(buf)), ref_sum(buf, sizeof(buf)));
    uint64_t v;
    ck_assert_int_eq(a->ops->checksum(a, buf + 3, 1000, &v, NULL), RF_OK);
    ck_assert_uint_eq(v, ref_sum(buf + 3, 1000));
    /* known values, pinned so the definition cannot drift */
    ck_assert_uint_eq(rf_accel_checksum("", 0), 0);
    ck_assert_uint_eq(rf_accel_checksum("refit", 5), ref_sum((const unsigned char *)"refit", 5));
    ck_assert_uint_eq(rf_accel_checksum("refit", 5), REFIT_SUM_REFIT);
    ck_assert_uint_eq(rf_accel_checksum("0123456789abcdef", 16), REFIT_SUM_HEX16);
    /* length and position count: a trailing zero byte, swapped words */
    unsigned char z[9] = {0};
    ck_assert_uint_ne(rf_accel_checksum(z, 8), rf_accel_checksum(z, 9));
    unsigned char s1[16] = "AAAAAAAABBBBBBBB", s2[16] = "BBBBBBBBAAAAAAAA";
    ck_assert_uint_ne(rf_accel_checksum(s1, 16), rf_accel_checksum(s2, 16));
    rf_accel_close(a);
}
END_TEST

/* The copy-engine split (set_engine_min) is accepted and changes nothing on the host and the
 * host-device emulation: a batch of contiguous and strided pieces gives the same bytes under
 * every setting. The two ceilings time a real copy (positive, best <= median) and refuse a
 * zero size. */
START_TEST(test_engine_min_and_ceilings)
{
    const char *names[2] = {"host", "host-device"};
    for (int k = 0; k < 2; k++) {
        rf_accel_t *a = NULL;
        ck_assert_int_eq(rf_accel_open(names[k], 0, &a), RF_OK);
        ck_assert_ptr_nonnull(a->ops->set_engine_min);
        ck_assert_int_eq(a->ops->set_engine_min(NULL, 0), RF_ERR_INVALID);
        uint16_t src[64 * 40], dst[3][64 * 48];
        for (size_t i = 0; i < sizeof(src) / 2; i++)
            src[i] = (uint16_t)(i * 2654435761u >> 7);
        static const size_t em[3] = {0, 1, SIZE_MAX};
        for (int m = 0; m < 3; m++) {
            ck_assert_int_eq(a->ops->set_engine_min(a, em[m]), RF_OK);
            memset(dst[m], 0xcd, sizeof(dst[m]));
            rf_accel_rows_t r[2] = {
                /* contiguous: 16 rows of 64 into rows 0..15 */
                {.dst = {dst[m], 2, RF_DTYPE_BF16, 64, 1, 0}, .src = src,
                 .src_dtype = RF_DTYPE_BF16, .src_pitch = 64, .rows = 16, .cols = 64},
                /* strided: 20 rows of 30 of a pitch-64 source into rows 20.., column 5 */
                {.dst = {dst[m], 2, RF_DTYPE_BF16, 64, 1, 0}, .dst_row = 20, .dst_col = 5,
                 .src = src + 16 * 64, .src_dtype = RF_DTYPE_BF16, .src_pitch = 64, .rows = 20,
                 .cols = 30},
            };
            ck_assert_int_eq(a->ops->copy_rows_batch(a, r, 2, NULL), RF_OK);
            ck_assert_int_eq(memcmp(dst[m], src, 16 * 64 * 2), 0);
            for (int i = 0; i < 20; i++)
                ck_assert_int_eq(memcmp(&dst[m][(20 + i) * 64 + 5], &src[(16 + i) * 64], 60), 0);
            ck_assert_uint_eq(dst[m][16 * 64], 0xcdcd); /* row 16 untouched */
            ck_assert_uint_eq(dst[m][20 * 64 + 4], 0xcdcd);
            ck_assert_uint_eq(dst[m][20 * 64 + 35], 0xcdcd);
        }
        ck_assert_int_eq(memcmp(dst[0], dst[1], sizeof(dst[0])), 0);
        ck_assert_int_eq(memcmp(dst[0], dst[2], sizeof(dst[0])), 0);
        ck_assert_int_eq(a->ops->set_engine_min(a, 0), RF_OK);
        double b = -1, med = -1;
        ck_assert_int_eq(rf_accel_rows_ceiling(a, (size_t)8 << 20, 3, &b, &med), RF_OK);
        ck_assert(b > 0 && b <= med);
        b = med = -1;
        ck_assert_int_eq(rf_accel_copy_ceiling(a, (size_t)8 << 20, 3, &b, &med), RF_OK);
        ck_assert(b > 0 && b <= med);
        ck_assert_int_eq(rf_accel_rows_ceiling(a, 0, 3, &b, &med), RF_ERR_INVALID);
        ck_assert_int_eq(rf_accel_rows_ceiling(NULL, 64, 3, &b, &med), RF_ERR_INVALID);
        rf_accel_close(a);
    }
}
END_TEST

static Suite *accel_suite(void)
{
    Suite *s = suite_create("accel");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_registry);
    tcase_add_test(tc, test_memory_streams);
    tcase_add_test(tc, test_host_device_pinned_copies);
    tcase_add_test(tc, test_copy_rows_row_major);
    tcase_add_test(tc, test_copy_rows_kfirst);
    tcase_add_test(tc, test_copy_rows_convert);
    tcase_add_test(tc, test_zero_rows);
    tcase_add_test(tc, test_fnuz);
    tcase_add_test(tc, test_repack);
    tcase_add_test(tc, test_fp8_block_dequant);
    tcase_add_test(tc, test_fp8_quantize);
    tcase_add_test(tc, test_wna16_quantize);
    tcase_add_test(tc, test_checksum);
    tcase_add_test(tc, test_engine_min_and_ceilings);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(accel_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
