/*
 * refit formats: trainer-side quantizers (fp8-block, wna16) and the scalar dequantizers the
 * verification oracle uses (see include/refit/quant.h and DESIGN.md section 7).
 *
 * The e4m3 conversion works on the f32 bit pattern with integer round-to-nearest-even, so it
 * does not depend on the FPU rounding mode; divisions are plain fp32 divisions (never a
 * reciprocal multiply), as the rules require.
 */
#include <math.h>
#include <string.h>

#include "refit/quant.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* m / 2^sh rounded to nearest, ties to even (sh in [1, 31]). */
static uint32_t rne_shift(uint32_t m, unsigned sh)
{
    uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

uint8_t rf_f32_to_e4m3(float f)
{
    uint32_t u = f32_bits(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: never produce a NaN byte */
        return 0x00;
    if (a >= f32_bits(RF_E4M3_MAX)) /* satfinite: everything from 448 up, inf included */
        return (uint8_t)(sign | 0x7e);
    int e = (int)(a >> 23) - 127;
    if ((a >> 23) == 0) /* f32 subnormal: far below e4m3's 2^-10 half-ulp */
        return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u; /* value = m 2^(e - 23) */
    if (e >= -6) { /* e4m3 normal: 3 mantissa bits */
        uint32_t q = rne_shift(m, 20); /* in [8, 16]; 16 carries into the exponent */
        return (uint8_t)(sign | (uint32_t)(((e + 7) << 3) + (int)q - 8));
    }
    /* e4m3 subnormal: value / 2^-9 = m 2^(e + 9 - 23) */
    unsigned sh = (unsigned)(14 - e);
    if (sh > 25) /* < 2^-11: rounds to zero */
        return sign;
    return (uint8_t)(sign | rne_shift(m, sh)); /* in [0, 8]; 8 is the smallest normal */
}

float rf_e4m3_to_f32(uint8_t b)
{
    int e = (b >> 3) & 0xf, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        return bits_f32(0x7fc00000u);
    if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), e - 10);
    return (b & 0x80) ? -v : v;
}

float rf_fp8_block_dequant_elem(uint8_t b, float scale)
{
    if ((b & 0x7f) == 0x7f)
        return bits_f32(0x7fc00000u);
    if (isnan(scale))
        return bits_f32(f32_bits(scale) | 0x00400000u);
    return rf_e4m3_to_f32(b) * scale;
}

float rf_e4m3fnuz_to_f32(uint8_t b)
{
    if (b == 0x80)
        return bits_f32(0x7fc00000u);
    int e = (b >> 3) & 0xf, m = b & 7; /* fnuz: bias 8, no inf, 0x7f / 0xff are finite */
    float v = e == 0 ? ldexpf((float)m, -10) : ldexpf((float)(8 + m), e - 11);
    return (b & 0x80) ? -v : v;
}

uint16_t rf_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(s | 0x7e00u);
    if (a >= 0x477ff000u) /* >= 65520 rounds to inf */
        return (uint16_t)(s | 0x7c00u);
    int e = (int)(a >> 23) - 127;
    if ((a >> 23) == 0)
        return s;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    if (e >= -14)
        return (uint16_t)(s | (uint32_t)(((e + 15) << 10) + (int)rne_shift(m, 13) - 0x400));
    unsigned sh = (unsigned)(-1 - e); /* value / 2^-24 = m 2^(e + 24 - 23) */
    if (sh > 25)
        return s;
    return (uint16_t)(s | rne_shift(m, sh));
}

float rf_load_f32(const void *p, rf_dtype_t dt, int64_t i)
{
    switch (dt) {
    case RF_DTYPE_BF16:
        return rf_bf16_to_f32(((const uint16_t *)p)[i]);
    case RF_DTYPE_F16:
        return rf_f16_to_f32(((const uint16_t *)p)[i]);
    case RF_DTYPE_F32:
        return ((const float *)p)[i];
    default:
        return bits_f32(0x7fc00000u);
    }
}

static bool float_src(rf_dtype_t dt)
{
    return dt == RF_DTYPE_BF16 || dt == RF_DTYPE_F16 || dt == RF_DTYPE_F32;
}

static void store_scale(void *p, rf_dtype_t dt, int64_t i, float s)
{
    if (dt == RF_DTYPE_F32)
        ((float *)p)[i] = s;
    else if (dt == RF_DTYPE_BF16)
        ((uint16_t *)p)[i] = rf_f32_to_bf16(s);
    else
        ((uint16_t *)p)[i] = rf_f32_to_f16(s);
}

static int64_t first_bad(const void *p, rf_dtype_t dt, uint64_t n, bool scale, float *bad_p)
{
    if (!float_src(dt)) {
        if (bad_p != NULL)
            *bad_p = bits_f32(0x7fc00000u);
        return 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        float v = rf_load_f32(p, dt, (int64_t)i);
        /* !(v > 0) also catches NaN and both zeros */
        if (!isfinite(v) || (scale && !(v > 0.0f))) {
            if (bad_p != NULL)
                *bad_p = v;
            return (int64_t)i;
        }
    }
    return -1;
}

int64_t rf_scale_first_bad(const void *p, rf_dtype_t dt, uint64_t n, float *bad_p)
{
    return first_bad(p, dt, n, true, bad_p);
}

int64_t rf_first_nonfinite(const void *p, rf_dtype_t dt, uint64_t n, float *bad_p)
{
    return first_bad(p, dt, n, false, bad_p);
}

/* ---- fp8-block --------------------------------------------------------------------------- */

/* The value the rule sees: w itself, or (TRANSFORMERS) w cast to e4m3 without scaling. */
static inline float fp8_src(const void *w, rf_dtype_t dt, int64_t i, int variant)
{
    float v = rf_load_f32(w, dt, i);
    return variant == RF_FP8_TRANSFORMERS ? rf_e4m3_to_f32(rf_f32_to_e4m3(v)) : v;
}

rf_status_t rf_fp8_quantize(const void *w, rf_dtype_t w_dtype, int64_t rows, int64_t cols,
                            int64_t w_pitch_elems, uint8_t *q, int64_t q_pitch, void *scale,
                            rf_dtype_t scale_dtype, int64_t scale_pitch_elems, int variant)
{
    const int64_t B = RF_FP8_BLOCK;
    if (!float_src(w_dtype) || (scale_dtype != RF_DTYPE_F32 && scale_dtype != RF_DTYPE_BF16) ||
        (variant != RF_FP8_PLAIN && variant != RF_FP8_TRANSFORMERS) || rows < 0 || cols < 0 ||
        w_pitch_elems < cols || q_pitch < cols || scale_pitch_elems < (cols + B - 1) / B)
        return RF_ERR_INVALID;
    for (int64_t r0 = 0; r0 < rows; r0 += B) {
        int64_t r1 = r0 + B < rows ? r0 + B : rows;
        for (int64_t c0 = 0; c0 < cols; c0 += B) {
            int64_t c1 = c0 + B < cols ? c0 + B : cols;
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    float v = fp8_src(w, w_dtype, r * w_pitch_elems + c, variant);
                    if (!isfinite(v))
                        return RF_ERR_INVALID;
                    v = fabsf(v);
                    amax = v > amax ? v : amax;
                }
            float s = (amax > RF_FP8_AMAX_FLOOR ? amax : RF_FP8_AMAX_FLOOR) / RF_E4M3_MAX;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    float v = fp8_src(w, w_dtype, r * w_pitch_elems + c, variant);
                    q[r * q_pitch + c] = rf_f32_to_e4m3(v / s);
                }
            store_scale(scale, scale_dtype, (r0 / B) * scale_pitch_elems + c0 / B, s);
        }
    }
    return RF_OK;
}

float rf_fp8_dequant_elem(uint8_t q, float scale) { return rf_e4m3_to_f32(q) * scale; }

rf_status_t rf_fp8_dequant_block(const uint8_t *q, int64_t rows, int64_t cols, int64_t q_pitch,
                                 const void *scale, rf_dtype_t scale_dtype,
                                 int64_t scale_pitch_elems, float *out, int64_t out_pitch_elems)
{
    const int64_t B = RF_FP8_BLOCK;
    if (!float_src(scale_dtype) || rows < 0 || cols < 0 || q_pitch < cols ||
        out_pitch_elems < cols)
        return RF_ERR_INVALID;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float s = rf_load_f32(scale, scale_dtype, (r / B) * scale_pitch_elems + c / B);
            out[r * out_pitch_elems + c] = rf_fp8_dequant_elem(q[r * q_pitch + c], s);
        }
    return RF_OK;
}

/* ---- fp8-tensor / fp8-channel -------------------------------------------------------------- */

rf_status_t rf_fp8_scales(const void *w, rf_dtype_t w_dtype, int64_t rows, int64_t cols,
                          int64_t w_pitch_elems, bool per_row, float *scale)
{
    if (!float_src(w_dtype) || rows < 0 || cols < 0 || w_pitch_elems < cols || scale == NULL)
        return RF_ERR_INVALID;
    float amax = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        if (per_row)
            amax = 0.0f;
        for (int64_t c = 0; c < cols; c++) {
            float v = rf_load_f32(w, w_dtype, r * w_pitch_elems + c);
            if (!isfinite(v))
                return RF_ERR_INVALID;
            v = fabsf(v);
            amax = v > amax ? v : amax;
        }
        if (per_row)
            scale[r] = (amax > RF_FP8_AMAX_FLOOR ? amax : RF_FP8_AMAX_FLOOR) / RF_E4M3_MAX;
    }
    if (!per_row)
        scale[0] = (amax > RF_FP8_AMAX_FLOOR ? amax : RF_FP8_AMAX_FLOOR) / RF_E4M3_MAX;
    return RF_OK;
}

rf_status_t rf_fp8_quantize_scaled(const void *w, rf_dtype_t w_dtype, int64_t rows,
                                   int64_t cols, int64_t w_pitch_elems, const float *scale,
                                   bool per_row, uint8_t *q, int64_t q_pitch)
{
    if (!float_src(w_dtype) || rows < 0 || cols < 0 || w_pitch_elems < cols || q_pitch < cols ||
        scale == NULL)
        return RF_ERR_INVALID;
    for (int64_t r = 0; r < rows; r++) {
        float s = scale[per_row ? r : 0];
        if (!isfinite(s) || !(s > 0.0f))
            return RF_ERR_INVALID;
        for (int64_t c = 0; c < cols; c++) {
            float v = rf_load_f32(w, w_dtype, r * w_pitch_elems + c);
            if (!isfinite(v))
                return RF_ERR_INVALID;
            q[r * q_pitch + c] = rf_f32_to_e4m3(v / s);
        }
    }
    return RF_OK;
}

rf_status_t rf_fp8_quantize_rows(const void *w, rf_dtype_t w_dtype, int64_t rows, int64_t cols,
                                 int64_t w_pitch_elems, bool per_row, uint8_t *q,
                                 int64_t q_pitch, float *scale)
{
    rf_status_t st = rf_fp8_scales(w, w_dtype, rows, cols, w_pitch_elems, per_row, scale);
    if (st != RF_OK)
        return st;
    return rf_fp8_quantize_scaled(w, w_dtype, rows, cols, w_pitch_elems, scale, per_row, q,
                                  q_pitch);
}

uint8_t rf_fp8_requant_byte(uint8_t q, float s_from, float s_to)
{
    if ((q & 0x7fu) == 0x7fu)
        return 0x00;
    if (s_from == s_to)
        return q;
    return rf_f32_to_e4m3(rf_e4m3_to_f32(q) * s_from / s_to);
}

/* ---- wna16 ------------------------------------------------------------------------------- */

float rf_wna16_group_scale(float amax, rf_dtype_t scale_dtype)
{
    float s = amax / RF_WNA16_QMAX_DIV;
    if (scale_dtype == RF_DTYPE_BF16)
        s = rf_bf16_to_f32(rf_f32_to_bf16(s));
    else
        s = rf_f16_to_f32(rf_f32_to_f16(s));
    if (s == 0.0f)
        s = scale_dtype == RF_DTYPE_BF16 ? RF_BF16_EPS : RF_F16_EPS;
    return s;
}

rf_status_t rf_wna16_quantize(const void *w, rf_dtype_t w_dtype, int64_t rows, int64_t K,
                              int64_t w_pitch_elems, int64_t G, uint32_t *packed,
                              int64_t packed_pitch, void *scale, rf_dtype_t scale_dtype,
                              int64_t scale_pitch_elems)
{
    if (!float_src(w_dtype) || (scale_dtype != RF_DTYPE_BF16 && scale_dtype != RF_DTYPE_F16) ||
        rows < 0 || K < 0 || G <= 0 || K % 8 != 0 || K % G != 0 || w_pitch_elems < K ||
        packed_pitch < K / 8 || scale_pitch_elems < K / G)
        return RF_ERR_INVALID;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t wr = r * w_pitch_elems;
        uint32_t *pr = packed + r * packed_pitch;
        memset(pr, 0, (size_t)(K / 8) * sizeof(uint32_t));
        for (int64_t g = 0; g < K / G; g++) {
            float amax = 0.0f;
            for (int64_t k = g * G; k < (g + 1) * G; k++) {
                float v = rf_load_f32(w, w_dtype, wr + k);
                if (!isfinite(v))
                    return RF_ERR_INVALID;
                amax = fabsf(v) > amax ? fabsf(v) : amax;
            }
            float s = rf_wna16_group_scale(amax, scale_dtype);
            store_scale(scale, scale_dtype, r * scale_pitch_elems + g, s);
            for (int64_t k = g * G; k < (g + 1) * G; k++) {
                float x = nearbyintf(rf_load_f32(w, w_dtype, wr + k) / s);
                int qv = x < -8.0f ? -8 : (x > 7.0f ? 7 : (int)x);
                pr[k / 8] |= (uint32_t)(qv + 8) << (4 * (unsigned)(k % 8));
            }
        }
    }
    return RF_OK;
}

float rf_wna16_dequant_elem(uint32_t word, int64_t k, float scale)
{
    return (float)rf_wna16_unpack(word, k) * scale;
}

rf_status_t rf_wna16_dequant_row(const uint32_t *packed, int64_t K, int64_t G, const void *scale,
                                 rf_dtype_t scale_dtype, float *out)
{
    if (!float_src(scale_dtype) || G <= 0 || K % 8 != 0 || K % G != 0)
        return RF_ERR_INVALID;
    for (int64_t k = 0; k < K; k++)
        out[k] = rf_wna16_dequant_elem(packed[k / 8], k, rf_load_f32(scale, scale_dtype, k / G));
    return RF_OK;
}
