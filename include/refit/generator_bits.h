/*
 * refit: the generator's per-element arithmetic (DESIGN.md section 12), shared by the host
 * generator (runtime/generator.c) and the device one (runtime/generator_cuda.cu), so the
 * two produce the same bits by construction. Internal: include/refit/generator.h is the API.
 *
 * One splitmix64 finalizer per element: a per-(name, step) key is mixed once, then element
 * `index` is mix64(key + (index + 1) * golden), which is the splitmix64 stream seeded by the
 * key. The 64 bits become an fp32 value with random sign and a magnitude uniform in
 * [2^-14, 1) (so f16 stays normal too), which is then rounded to the tensor's dtype.
 */
#ifndef REFIT_GENERATOR_BITS_H
#define REFIT_GENERATOR_BITS_H

#include <stdint.h>

#if defined(__CUDACC__)
#define RF_GEN_HD __host__ __device__ static inline
#else
#define RF_GEN_HD static inline
#endif

#define RF_GEN_GOLDEN 0x9e3779b97f4a7c15ull
#define RF_GEN_STEP_SALT 0x632be59bd9b4e019ull

RF_GEN_HD uint64_t rf_gen_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The per-(tensor, step) key. */
RF_GEN_HD uint64_t rf_gen_key(uint64_t name_hash, uint64_t step)
{
    return rf_gen_mix64(name_hash ^ rf_gen_mix64(step * RF_GEN_GOLDEN + RF_GEN_STEP_SALT));
}

/* fp32 bits of element `index`: magnitude uniform in [0, 1) on a 2^-24 grid (exact in fp32),
 * raised to at least 2^-14 so that no value is zero or subnormal (in f16 either); uniform
 * rather than log-uniform so that quantized formats see values spread over their whole range
 * (int4 nibbles, fp8). Integer arithmetic only: 2^-24 * m for m < 2^24 is exact, and the
 * exponent / mantissa are built directly. */
RF_GEN_HD uint32_t rf_gen_f32_bits(uint64_t key, uint64_t index)
{
    uint64_t z = rf_gen_mix64(key + (index + 1) * RF_GEN_GOLDEN);
    uint32_t m = (uint32_t)((z >> 8) & 0xffffffu);
    uint32_t bits;
    if (m < (1u << 10)) { /* below 2^-14: raised to 2^-14 */
        bits = (uint32_t)(127 - 14) << 23;
    } else { /* m * 2^-24, m in [2^10, 2^24): normalize (exact) */
        int lz = 0;
        while (!(m & 0x800000u)) {
            m <<= 1;
            lz++;
        }
        bits = (uint32_t)(127 - 1 - lz) << 23 | (m & 0x7fffffu);
    }
    return (uint32_t)(z >> 63) << 31 | bits;
}

/* fp32 (normal, |v| in [2^-14, 1)) -> bf16 round to nearest even, clamped below 1. */
RF_GEN_HD uint16_t rf_gen_to_bf16(uint32_t f)
{
    uint32_t u = f + 0x7fffu + ((f >> 16) & 1u);
    uint16_t h = (uint16_t)(u >> 16);
    if ((h & 0x7fffu) == 0x3f80u) /* rounded up to 1.0 */
        h = (uint16_t)((h & 0x8000u) | 0x3f7fu);
    return h;
}

/* fp32 (normal, |v| in [2^-14, 1)) -> f16 round to nearest even, clamped below 1; f16 stays
 * normal here. */
RF_GEN_HD uint16_t rf_gen_to_f16(uint32_t f)
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

#endif /* REFIT_GENERATOR_BITS_H */
