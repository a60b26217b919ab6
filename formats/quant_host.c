/*
 * refit: the host format kernels (rf_quant_host_ops), the reference every device instance is
 * compared with byte for byte, and the lookup of a table by accelerator (rf_quant_ops_for).
 * They call formats/quant.c and the wna16 tile repack (rf_wna16_repack, defined here for
 * formats/format_wna16.c) themselves: those are the rules, so the host table cannot drift.
 * This file knows whether CUDA was compiled in (REFIT_HAVE_CUDA, set by CMake on this file as
 * on the accelerator registry).
 */
#include <string.h>

#include "refit/accel.h"
#include "refit/formats.h"
#include "refit/quant.h"
#include "refit/quant_ops.h"

#ifdef REFIT_HAVE_CUDA
extern const rf_quant_ops_t rf_quant_cuda_ops; /* formats/quant_cuda.cu */
#endif

/* The wna16 tile repack (include/refit/formats.h): tiles of 16 rows x 64 columns. */
#define TILE_R 16
#define TILE_C 64

int64_t rf_wna16_repack_index(int64_t R, int64_t C, int64_t r, int64_t c)
{
    int64_t r0 = r / TILE_R * TILE_R, c0 = c / TILE_C * TILE_C;
    int64_t i = r - r0, j = c - c0;
    int64_t th = R - r0 < TILE_R ? R - r0 : TILE_R;
    return r0 * C + c0 * th + j * th + (i + j) % th;
}

void rf_wna16_repack(void *dst, const void *src, int64_t batch, int64_t R, int64_t C,
                     size_t esize, bool inverse)
{
    const char *s = src;
    char *d = dst;
    for (int64_t b = 0; b < batch; b++) {
        size_t base = (size_t)(b * R * C);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) {
                size_t model = base + (size_t)(r * C + c);
                size_t rt = base + (size_t)rf_wna16_repack_index(R, C, r, c);
                if (inverse)
                    memcpy(d + model * esize, s + rt * esize, esize);
                else
                    memcpy(d + rt * esize, s + model * esize, esize);
            }
    }
}

static rf_status_t host_fp8_to_fnuz(rf_accel_t *accel, uint8_t *w, size_t nw, float *scale,
                                    size_t nscale, rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if ((nw && !w) || (nscale && !scale))
        return RF_ERR_INVALID;
    for (size_t i = 0; i < nw; i++)
        w[i] = rf_e4m3_to_fnuz(w[i]);
    for (size_t i = 0; i < nscale; i++)
        scale[i] *= 2.0f;
    return RF_OK;
}

static rf_status_t host_wna16_repack(rf_accel_t *accel, void *dst, const void *src,
                                     int64_t batch, int64_t R, int64_t C, size_t esize,
                                     bool inverse, rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if (batch < 0 || R < 0 || C < 0 || (esize != 1 && esize != 2 && esize != 4 && esize != 8))
        return RF_ERR_INVALID;
    if (batch == 0 || R == 0 || C == 0)
        return RF_OK;
    if (!dst || !src)
        return RF_ERR_INVALID;
    rf_wna16_repack(dst, src, batch, R, C, esize, inverse);
    return RF_OK;
}

static rf_status_t host_fp8_quantize(rf_accel_t *accel, const void *w, rf_dtype_t w_dtype,
                                     int64_t rows, int64_t cols, int64_t w_pitch_elems,
                                     uint8_t *q, int64_t q_pitch, void *scale,
                                     rf_dtype_t scale_dtype, int64_t scale_pitch_elems,
                                     rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    return rf_fp8_quantize(w, w_dtype, rows, cols, w_pitch_elems, q, q_pitch, scale, scale_dtype,
                           scale_pitch_elems, RF_FP8_PLAIN);
}

static rf_status_t host_wna16_quantize(rf_accel_t *accel, const void *w, rf_dtype_t w_dtype,
                                       int64_t rows, int64_t K, int64_t w_pitch_elems, int64_t G,
                                       uint32_t *packed, int64_t packed_pitch, void *scale,
                                       rf_dtype_t scale_dtype, int64_t scale_pitch_elems,
                                       rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    return rf_wna16_quantize(w, w_dtype, rows, K, w_pitch_elems, G, packed, packed_pitch, scale,
                             scale_dtype, scale_pitch_elems);
}

static rf_status_t host_fp8_quantize_rows(rf_accel_t *accel, const void *w, rf_dtype_t w_dtype,
                                          int64_t rows, int64_t cols, int64_t w_pitch_elems,
                                          bool per_row, float *scale, int64_t q_r0, int64_t q_rows,
                                          int64_t q_c0, int64_t q_cols, uint8_t *q, int64_t q_pitch,
                                          rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if (q_r0 < 0 || q_rows < 0 || q_c0 < 0 || q_cols < 0 || q_r0 + q_rows > rows ||
        q_c0 + q_cols > cols)
        return RF_ERR_INVALID;
    rf_status_t st = rf_fp8_scales(w, w_dtype, rows, cols, w_pitch_elems, per_row, scale);
    if (st != RF_OK)
        return st;
    size_t es = rf_dtype_size(w_dtype);
    return rf_fp8_quantize_scaled((const char *)w + (size_t)(q_r0 * w_pitch_elems + q_c0) * es,
                                  w_dtype, q_rows, q_cols, w_pitch_elems,
                                  per_row ? scale + q_r0 : scale, per_row, q, q_pitch);
}

static rf_status_t host_fp8_requant(rf_accel_t *accel, uint8_t *w, size_t n, float s_from,
                                    float s_to, rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if (n && !w)
        return RF_ERR_INVALID;
    for (size_t i = 0; i < n; i++)
        w[i] = rf_fp8_requant_byte(w[i], s_from, s_to);
    return RF_OK;
}

static rf_status_t host_fp8_block_dequant(rf_accel_t *accel, const uint8_t *w, int64_t rows,
                                          int64_t cols, int64_t w_pitch, const float *scale,
                                          int64_t scale_pitch, void *out, rf_dtype_t out_dtype,
                                          int64_t out_pitch, rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if (rows < 0 || cols < 0 || w_pitch < cols || out_pitch < cols ||
        scale_pitch < (cols + 127) / 128 || (rows && cols && (!w || !scale || !out)) ||
        (out_dtype != RF_DTYPE_BF16 && out_dtype != RF_DTYPE_F16 && out_dtype != RF_DTYPE_F32))
        return RF_ERR_INVALID;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = rf_fp8_block_dequant_elem(w[r * w_pitch + c],
                                                scale[(r / 128) * scale_pitch + c / 128]);
            int64_t o = r * out_pitch + c;
            if (out_dtype == RF_DTYPE_F32)
                ((float *)out)[o] = v;
            else
                ((uint16_t *)out)[o] =
                    out_dtype == RF_DTYPE_BF16 ? rf_f32_to_bf16(v) : rf_f32_to_f16(v);
        }
    return RF_OK;
}

/* The host quantizers refuse bad input when called: nothing is ever pending. */
static rf_status_t host_quant_check(rf_accel_t *accel, rf_accel_stream_t *stream,
                                    int64_t *first_bad, unsigned *why)
{
    (void)accel;
    (void)stream;
    if (!first_bad || !why)
        return RF_ERR_INVALID;
    *first_bad = -1;
    *why = 0;
    return RF_OK;
}

const rf_quant_ops_t rf_quant_host_ops = {
    .name = "host",
    .fp8_to_fnuz = host_fp8_to_fnuz,
    .wna16_repack = host_wna16_repack,
    .fp8_quantize = host_fp8_quantize,
    .wna16_quantize = host_wna16_quantize,
    .fp8_quantize_rows = host_fp8_quantize_rows,
    .fp8_requant = host_fp8_requant,
    .fp8_block_dequant = host_fp8_block_dequant,
    .check = host_quant_check,
};

const rf_quant_ops_t *rf_quant_ops_for(const rf_accel_t *accel)
{
    if (!accel)
        return NULL;
    if (accel->ops == &rf_accel_host_ops || accel->ops == &rf_accel_host_device_ops)
        return &rf_quant_host_ops;
#ifdef REFIT_HAVE_CUDA
    if (strcmp(accel->ops->name, "cuda") == 0)
        return &rf_quant_cuda_ops;
#endif
    return NULL;
}
