/*
 * refit: the deterministic weight generator (DESIGN.md section 12).
 *
 * One splitmix64 finalizer per element: a per-(name, step) key is mixed once, then element
 * `index` is mix64(key + (index + 1) * golden), which is the splitmix64 stream seeded by the
 * key. The 64 bits become an fp32 value with random sign and a magnitude uniform in
 * [2^-14, 1) (so f16 stays normal too), which is then rounded to the tensor's dtype.
 */
#include <string.h>
#include <xxhash.h>

#include "refit/generator.h"

#define GEN_GOLDEN 0x9e3779b97f4a7c15ull
#define GEN_STEP_SALT 0x632be59bd9b4e019ull

static inline uint64_t gen_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t gen_key(uint64_t name_hash, uint64_t step)
{
    return gen_mix64(name_hash ^ gen_mix64(step * GEN_GOLDEN + GEN_STEP_SALT));
}

static inline uint32_t gen_f32_bits(uint64_t key, uint64_t index)
{
    uint64_t z = gen_mix64(key + (index + 1) * GEN_GOLDEN);
    union {
        float f;
        uint32_t u;
    } v;
    /* magnitude uniform in [0, 1) on a 2^-24 grid (exact in fp32), raised to at least 2^-14 so
     * that no value is zero or subnormal (in f16 either); uniform rather than log-uniform so
     * that quantized formats see values spread over their whole range (int4 nibbles, fp8) */
    v.f = (float)(uint32_t)((z >> 8) & 0xffffffu) * 0x1p-24f;
    if (v.f < 0x1p-14f)
        v.f = 0x1p-14f;
    return (uint32_t)(z >> 63) << 31 | v.u;
}

/* fp32 (normal, |v| in [2^-14, 1)) -> bf16 RNE, clamped below 1. */
static inline uint16_t gen_to_bf16(uint32_t f)
{
    union {
        uint32_t u;
        float f;
    } v = {f};
    uint16_t h = rf_f32_to_bf16(v.f);
    if ((h & 0x7fffu) == 0x3f80u) /* rounded up to 1.0 */
        h = (uint16_t)((h & 0x8000u) | 0x3f7fu);
    return h;
}

/* fp32 (normal, |v| in [2^-14, 1)) -> f16 RNE, clamped below 1; f16 stays normal here. */
static inline uint16_t gen_to_f16(uint32_t f)
{
    uint32_t sign = (f >> 16) & 0x8000u;
    uint32_t exp = ((f >> 23) & 0xffu) - 127u + 15u; /* 1 .. 14 */
    uint32_t mant = f & 0x7fffffu;
    uint32_t h = exp << 10 | mant >> 13;
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a mantissa carry moves into the exponent, as it should */
    if (h >= 0x3c00u)
        h = 0x3bffu;
    return (uint16_t)(sign | h);
}

uint64_t rf_gen_name_hash(const char *name)
{
    return XXH3_64bits(name, strlen(name));
}

int rf_gen_dtype_supported(rf_dtype_t dt)
{
    return dt == RF_DTYPE_BF16 || dt == RF_DTYPE_F16 || dt == RF_DTYPE_F32;
}

uint32_t rf_gen_value_bits(uint64_t name_hash, uint64_t index, uint64_t step, rf_dtype_t dt)
{
    uint32_t f = gen_f32_bits(gen_key(name_hash, step), index);
    switch (dt) {
    case RF_DTYPE_BF16:
        return gen_to_bf16(f);
    case RF_DTYPE_F16:
        return gen_to_f16(f);
    case RF_DTYPE_F32:
        return f;
    default:
        return 0;
    }
}

rf_status_t rf_gen_fill(const rf_tensor_t *t, uint64_t step, uint64_t row_begin,
                        uint64_t row_end, uint64_t col_begin, uint64_t col_end, void *dst,
                        size_t dst_pitch_bytes)
{
    if (t == NULL || dst == NULL || !rf_gen_dtype_supported(t->dtype) || t->ndim < 1 ||
        t->shape[0] <= 0)
        return RF_ERR_INVALID;
    uint64_t nrows = (uint64_t)t->shape[0], ncols = t->numel / nrows;
    size_t es = rf_dtype_size(t->dtype);
    if (row_begin >= row_end || row_end > nrows || col_begin >= col_end || col_end > ncols ||
        dst_pitch_bytes < (col_end - col_begin) * es)
        return RF_ERR_INVALID;
    uint64_t key = gen_key(rf_gen_name_hash(t->name), step);
    for (uint64_t i = row_begin; i < row_end; i++) {
        unsigned char *row = (unsigned char *)dst + (i - row_begin) * dst_pitch_bytes;
        uint64_t base = i * ncols;
        if (t->dtype == RF_DTYPE_F32) {
            uint32_t *o = (uint32_t *)(void *)row;
            for (uint64_t j = col_begin; j < col_end; j++) {
                uint32_t v = gen_f32_bits(key, base + j);
                memcpy(&o[j - col_begin], &v, 4);
            }
        } else {
            bool bf = t->dtype == RF_DTYPE_BF16;
            for (uint64_t j = col_begin; j < col_end; j++) {
                uint32_t f = gen_f32_bits(key, base + j);
                uint16_t v = bf ? gen_to_bf16(f) : gen_to_f16(f);
                memcpy(row + (j - col_begin) * 2, &v, 2);
            }
        }
    }
    return RF_OK;
}
