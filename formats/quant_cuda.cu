/*
 * refit: the format kernels on the cuda accelerator (rf_quant_cuda_ops, looked up by
 * rf_quant_ops_for in formats/quant_host.c): the fnuz rewrite, the wna16 tile repack and the
 * fp8-block / wna16 quantizers. Compiled only with CUDA; the kernels are enqueued on the
 * accelerator's streams and use their scratch through refit/accel_cuda.h.
 *
 * Kernels reproduce formats/quant_host.c (and through it formats/quant.c and
 * formats/format_wna16.c) bit for bit: the e4m3 / bf16 / f16 conversions are the same integer
 * round-to-nearest-even code, divisions are IEEE fp32 divisions (-prec-div=true; never build
 * this file with --use_fast_math) and no multiply-add is contracted (-fmad=false; __fdiv_rn /
 * __fmul_rn spell it out). Every CUDA call goes through RF_CUDA_CHECK (refit/checks.h).
 */
#include <cuda_runtime.h>

#include "refit/accel.h"
#include "refit/accel_cuda.h"
#include "refit/checks.h"
#include "refit/log.h"
#include "refit/quant_ops.h"

typedef rf_accel_cuda_stream_t cuda_stream_t;

static cuda_stream_t *stream_impl(rf_accel_t *a, rf_accel_stream_t *s)
{
    return rf_accel_cuda_stream(a, s);
}

static cudaStream_t cs(rf_accel_t *a, rf_accel_stream_t *s)
{
    return stream_impl(a, s)->s;
}

/* ---- device conversions (same integer code as formats/quant.c; bf16 / f16 -> f32 are
 * refit/accel_cuda.h's) ------------------------------------------------------------------- */

__device__ static inline uint32_t d_rne_shift(uint32_t m, unsigned sh)
{
    uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return q;
}

__device__ static inline uint8_t d_f32_to_e4m3(float f)
{
    uint32_t u = __float_as_uint(f);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return 0x00;
    if (a >= 0x43e00000u) /* 448.0f */
        return (uint8_t)(sign | 0x7e);
    int e = (int)(a >> 23) - 127;
    if ((a >> 23) == 0)
        return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    if (e >= -6) {
        uint32_t q = d_rne_shift(m, 20);
        return (uint8_t)(sign | (uint32_t)(((e + 7) << 3) + (int)q - 8));
    }
    unsigned sh = (unsigned)(14 - e);
    if (sh > 25)
        return sign;
    return (uint8_t)(sign | d_rne_shift(m, sh));
}

__device__ static inline uint16_t d_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ static inline uint16_t d_f32_to_f16(float f)
{
    uint32_t u = __float_as_uint(f);
    uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(s | 0x7e00u);
    if (a >= 0x477ff000u)
        return (uint16_t)(s | 0x7c00u);
    int e = (int)(a >> 23) - 127;
    if ((a >> 23) == 0)
        return s;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    if (e >= -14)
        return (uint16_t)(s | (uint32_t)(((e + 15) << 10) + (int)d_rne_shift(m, 13) - 0x400));
    unsigned sh = (unsigned)(-1 - e);
    if (sh > 25)
        return s;
    return (uint16_t)(s | d_rne_shift(m, sh));
}

/* Element i of a BF16 / F16 / F32 array as f32 (dt: the rf_dtype_t value). */
__device__ static inline float d_load_f32(const void *p, int dt, int64_t i)
{
    if (dt == RF_DTYPE_BF16)
        return rf_cuda_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == RF_DTYPE_F16)
        return rf_cuda_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

__device__ static inline bool d_finite(float v)
{
    return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u;
}

/* ---- fnuz ---------------------------------------------------------------------------------- */

__global__ void k_fnuz(uint8_t *w, uint64_t nw, float *scale, uint64_t ns)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < nw; t += stride)
        if (w[t] == 0x80)
            w[t] = 0x00;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < ns; t += stride)
        scale[t] = __fmul_rn(scale[t], 2.0f);
}

static rf_status_t cu_fp8_to_fnuz(rf_accel_t *a, uint8_t *w, size_t nw, float *scale,
                                  size_t nscale, rf_accel_stream_t *s)
{
    if (!a || (nw && !w) || (nscale && !scale))
        return RF_ERR_INVALID;
    if (!nw && !nscale)
        return RF_OK;
    k_fnuz<<<rf_cuda_grid_for(nw > nscale ? nw : nscale), RF_CUDA_THREADS, 0, cs(a, s)>>>(
        w, nw, scale, nscale);
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}

/* ---- wna16 tile repack (rf_wna16_repack_index: tiles of 16 rows x 64 columns) -------------- */

/*
 * One block per tile of 16 rows x 64 columns (th x tw at the edges). The tile's runtime bytes
 * are contiguous: rf_wna16_repack_index puts element (r0 + i, c0 + j) at
 * r0 C + c0 th + q, q = j th + (i + j) % th. The block reads the tile's rows (coalesced) into
 * shared memory and writes its q range (coalesced), or the reverse for the inverse. The
 * shared pitch of 65 keeps the column-wise reads free of bank conflicts.
 *
 * Tiles of the full height (th = 16: all but the last tile row when 16 does not divide R) take
 * a path without integer division: the model side is walked as a 16 x 64 grid (columns past
 * tw idle) and q splits as j = q / 16, i = (q % 16 - j) mod 16 with shifts and masks, each
 * thread's four elements unrolled so that their loads are in flight together. The last tile
 * row keeps the general walk (divisions by th and tw).
 */
#define RF_REPACK_TH 16u
#define RF_REPACK_TW 64u
#define RF_REPACK_PER (RF_REPACK_TH * RF_REPACK_TW / RF_CUDA_THREADS) /* elements per thread */

template <typename T>
__device__ static inline void repack_tile16(T *D, const T *S, uint64_t C, uint64_t r0,
                                            uint64_t c0, unsigned tw, bool inverse, T *sm)
{
    const unsigned n = RF_REPACK_TH * tw;
    const uint64_t base = r0 * C + c0 * RF_REPACK_TH;
    if (!inverse) {
#pragma unroll
        for (unsigned k = 0; k < RF_REPACK_PER; k++) {
            unsigned e = threadIdx.x + k * RF_CUDA_THREADS, i = e / RF_REPACK_TW,
                     j = e % RF_REPACK_TW;
            if (j < tw)
                sm[i * 65 + j] = S[(r0 + i) * C + c0 + j];
        }
        __syncthreads();
#pragma unroll
        for (unsigned k = 0; k < RF_REPACK_PER; k++) {
            unsigned q = threadIdx.x + k * RF_CUDA_THREADS, j = q / RF_REPACK_TH,
                     i = (q - j) % RF_REPACK_TH;
            if (q < n)
                D[base + q] = sm[i * 65 + j];
        }
    } else {
#pragma unroll
        for (unsigned k = 0; k < RF_REPACK_PER; k++) {
            unsigned q = threadIdx.x + k * RF_CUDA_THREADS, j = q / RF_REPACK_TH,
                     i = (q - j) % RF_REPACK_TH;
            if (q < n)
                sm[i * 65 + j] = S[base + q];
        }
        __syncthreads();
#pragma unroll
        for (unsigned k = 0; k < RF_REPACK_PER; k++) {
            unsigned e = threadIdx.x + k * RF_CUDA_THREADS, i = e / RF_REPACK_TW,
                     j = e % RF_REPACK_TW;
            if (j < tw)
                D[(r0 + i) * C + c0 + j] = sm[i * 65 + j];
        }
    }
}

template <typename T>
__global__ void k_repack(T *dst, const T *src, uint64_t batch, uint64_t R, uint64_t C,
                         bool inverse)
{
    __shared__ T sm[RF_REPACK_TH * 65];
    const uint64_t tr = (R + 15) / 16, tc = (C + 63) / 64, per = tr * tc, ntile = batch * per;
    for (uint64_t tile = blockIdx.x; tile < ntile; tile += gridDim.x) {
        uint64_t b, rem, r0, c0;
        if (ntile <= UINT32_MAX) { /* 32-bit divisions: the usual case */
            unsigned t = (unsigned)tile, p32 = (unsigned)per, tc32 = (unsigned)tc;
            b = t / p32;
            rem = t - (unsigned)b * p32;
            r0 = (uint64_t)((unsigned)rem / tc32) * 16;
            c0 = (uint64_t)((unsigned)rem % tc32) * 64;
        } else {
            b = tile / per;
            rem = tile % per;
            r0 = rem / tc * 16;
            c0 = rem % tc * 64;
        }
        unsigned th = (unsigned)(R - r0 < 16 ? R - r0 : 16);
        unsigned tw = (unsigned)(C - c0 < 64 ? C - c0 : 64), n = th * tw;
        const T *S = src + b * R * C;
        T *D = dst + b * R * C;
        if (th == RF_REPACK_TH) {
            repack_tile16(D, S, C, r0, c0, tw, inverse, sm);
            __syncthreads(); /* sm is reused by the next tile */
            continue;
        }
        uint64_t base = r0 * C + c0 * th; /* the tile's runtime range */
        if (!inverse) {
            for (unsigned e = threadIdx.x; e < n; e += blockDim.x) {
                unsigned i = e / tw, j = e % tw;
                sm[i * 65 + j] = S[(r0 + i) * C + c0 + j];
            }
            __syncthreads();
            for (unsigned q = threadIdx.x; q < n; q += blockDim.x) {
                unsigned j = q / th, k = q % th, i = (k + th - j % th) % th;
                D[base + q] = sm[i * 65 + j];
            }
        } else {
            for (unsigned q = threadIdx.x; q < n; q += blockDim.x) {
                unsigned j = q / th, k = q % th, i = (k + th - j % th) % th;
                sm[i * 65 + j] = S[base + q];
            }
            __syncthreads();
            for (unsigned e = threadIdx.x; e < n; e += blockDim.x) {
                unsigned i = e / tw, j = e % tw;
                D[(r0 + i) * C + c0 + j] = sm[i * 65 + j];
            }
        }
        __syncthreads(); /* sm is reused by the next tile */
    }
}

template <typename T>
static void launch_repack(void *dst, const void *src, int64_t batch, int64_t R, int64_t C,
                          bool inverse, cudaStream_t st)
{
    uint64_t tiles = (uint64_t)batch * (uint64_t)((R + 15) / 16) * (uint64_t)((C + 63) / 64);
    unsigned g = tiles > RF_CUDA_MAX_BLOCKS ? RF_CUDA_MAX_BLOCKS : (unsigned)tiles;
    k_repack<T><<<g, RF_CUDA_THREADS, 0, st>>>((T *)dst, (const T *)src, (uint64_t)batch,
                                               (uint64_t)R, (uint64_t)C, inverse);
}

static rf_status_t cu_wna16_repack(rf_accel_t *a, void *dst, const void *src, int64_t batch,
                                   int64_t R, int64_t C, size_t esize, bool inverse,
                                   rf_accel_stream_t *s)
{
    if (!a || batch < 0 || R < 0 || C < 0 ||
        (esize != 1 && esize != 2 && esize != 4 && esize != 8))
        return RF_ERR_INVALID;
    if (batch == 0 || R == 0 || C == 0)
        return RF_OK;
    if (!dst || !src)
        return RF_ERR_INVALID;
    cudaStream_t st = cs(a, s);
    if (esize == 1)
        launch_repack<uint8_t>(dst, src, batch, R, C, inverse, st);
    else if (esize == 2)
        launch_repack<uint16_t>(dst, src, batch, R, C, inverse, st);
    else if (esize == 4)
        launch_repack<uint32_t>(dst, src, batch, R, C, inverse, st);
    else
        launch_repack<uint64_t>(dst, src, batch, R, C, inverse, st);
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}

/* ---- quantizers ---------------------------------------------------------------------------- */

/* Bad input or a bad stored scale in the quantize call tagged `tag_why` (next_tag | why): the
 * sticky word d_scratch[2] keeps the smallest, i.e. the first bad call's (quant check). */
__device__ static inline void d_note_bad(unsigned long long *flag, unsigned long long tag_why)
{
    atomicMin(&flag[2], tag_why);
}

static bool float_dt(rf_dtype_t dt)
{
    return dt == RF_DTYPE_BF16 || dt == RF_DTYPE_F16 || dt == RF_DTYPE_F32;
}

/* One block per 128 x 128 block of the region: amax (max is exact in any order), then q. */
static_assert(RF_CUDA_THREADS % 128 == 0, "k_fp8_quant maps threads onto 128 columns");
__global__ void k_fp8_quant(const void *w, int wdt, int64_t rows, int64_t cols, int64_t wp,
                            uint8_t *q, int64_t qp, void *scale, int sdt, int64_t sp,
                            unsigned long long *flag, unsigned long long tag)
{
    __shared__ float red[RF_CUDA_THREADS];
    int64_t r0 = (int64_t)blockIdx.y * 128, c0 = (int64_t)blockIdx.x * 128;
    int64_t nr = rows - r0 < 128 ? rows - r0 : 128, nc = cols - c0 < 128 ? cols - c0 : 128;
    float amax = 0.0f;
    bool bad = false;
    /* 32-bit tile coordinates (no 64-bit division per element, issue 18): thread x reads column
     * x % 128 of rows x / 128, x / 128 + rstep, ...: a warp reads 32 adjacent elements */
    const int tc = (int)(threadIdx.x % 128u), rstep = (int)(blockDim.x / 128u);
    for (int rr = (int)(threadIdx.x / 128u); tc < nc && rr < nr; rr += rstep) {
        float v = d_load_f32(w, wdt, (r0 + rr) * wp + c0 + tc);
        if (!d_finite(v))
            bad = true;
        v = fabsf(v);
        amax = v > amax ? v : amax;
    }
    if (bad)
        d_note_bad(flag, tag | RF_QUANT_BAD_INPUT);
    red[threadIdx.x] = amax;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h && red[threadIdx.x + h] > red[threadIdx.x])
            red[threadIdx.x] = red[threadIdx.x + h];
        __syncthreads();
    }
    amax = red[0];
    float s = __fdiv_rn(amax > 1e-12f ? amax : 1e-12f, 448.0f);
    for (int rr = (int)(threadIdx.x / 128u); tc < nc && rr < nr; rr += rstep) {
        int64_t r = r0 + rr, c = c0 + tc;
        float v = d_load_f32(w, wdt, r * wp + c);
        q[r * qp + c] = d_f32_to_e4m3(__fdiv_rn(v, s));
    }
    if (threadIdx.x == 0) {
        int64_t si = (int64_t)blockIdx.y * sp + blockIdx.x;
        if (sdt == RF_DTYPE_F32)
            ((float *)scale)[si] = s;
        else
            ((uint16_t *)scale)[si] = d_f32_to_bf16(s);
    }
}

/* The tag of the next quantize call on stream c: its index since the last quant check, shifted
 * past the RF_QUANT_BAD_* bits (d_note_bad keeps the smallest, so the first bad call's). */
static unsigned long long next_tag(cuda_stream_t *c)
{
    return c->quant_calls++ << 2;
}

/* quant check: one synchronization for every quantize call enqueued since the last one. */
static rf_status_t cu_quant_check(rf_accel_t *a, rf_accel_stream_t *s, int64_t *first_bad,
                                  unsigned *why)
{
    if (!a || !first_bad || !why)
        return RF_ERR_INVALID;
    cuda_stream_t *c = stream_impl(a, s);
    RF_CUDA_CHECK(cudaMemcpyAsync(&c->h_scratch[2], &c->d_scratch[2], sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, c->s));
    RF_CUDA_CHECK(cudaMemsetAsync(&c->d_scratch[2], 0xff, sizeof(unsigned long long), c->s));
    RF_CUDA_CHECK(cudaStreamSynchronize(c->s));
    unsigned long long v = c->h_scratch[2];
    c->quant_calls = 0;
    *first_bad = v == ~0ull ? -1 : (int64_t)(v >> 2);
    *why = v == ~0ull ? 0u : (unsigned)(v & 3u);
    return RF_OK;
}

static rf_status_t cu_fp8_quantize(rf_accel_t *a, const void *w, rf_dtype_t w_dtype, int64_t rows,
                                   int64_t cols, int64_t w_pitch, uint8_t *q, int64_t q_pitch,
                                   void *scale, rf_dtype_t scale_dtype, int64_t scale_pitch,
                                   rf_accel_stream_t *s)
{
    const int64_t B = 128;
    if (!a || !float_dt(w_dtype) || (scale_dtype != RF_DTYPE_F32 && scale_dtype != RF_DTYPE_BF16) ||
        rows < 0 || cols < 0 || w_pitch < cols || q_pitch < cols || scale_pitch < (cols + B - 1) / B)
        return RF_ERR_INVALID;
    if (rows == 0 || cols == 0)
        return RF_OK;
    int64_t gx = (cols + B - 1) / B, gy = (rows + B - 1) / B;
    if (gx > 0x7fffffff || gy > 65535)
        return RF_ERR_INVALID;
    cuda_stream_t *c = stream_impl(a, s);
    k_fp8_quant<<<dim3((unsigned)gx, (unsigned)gy), RF_CUDA_THREADS, 0, c->s>>>(
        w, (int)w_dtype, rows, cols, w_pitch, q, q_pitch, scale, (int)scale_dtype, scale_pitch,
        c->d_scratch, next_tag(c));
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}

/* Pass 1: one thread per (row, group): the rounded scale. */
__global__ void k_wna16_scale(const void *w, int wdt, int64_t rows, int64_t K, int64_t wp,
                              int64_t G, void *scale, int sdt, int64_t sp,
                              unsigned long long *flag, unsigned long long tag)
{
    int64_t ng = K / G;
    uint64_t n = (uint64_t)rows * (uint64_t)ng;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n;
         t += (uint64_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)(t / (uint64_t)ng), g = (int64_t)(t % (uint64_t)ng);
        float amax = 0.0f;
        bool bad = false;
        for (int64_t k = g * G; k < (g + 1) * G; k++) {
            float v = d_load_f32(w, wdt, r * wp + k);
            if (!d_finite(v))
                bad = true;
            amax = fabsf(v) > amax ? fabsf(v) : amax;
        }
        if (bad)
            d_note_bad(flag, tag | RF_QUANT_BAD_INPUT);
        float sv = __fdiv_rn(amax, 7.5f);
        uint16_t h = sdt == RF_DTYPE_BF16 ? d_f32_to_bf16(sv) : d_f32_to_f16(sv);
        float back = sdt == RF_DTYPE_BF16 ? rf_cuda_bf16_to_f32(h) : rf_cuda_f16_to_f32(h);
        if (back == 0.0f)
            h = sdt == RF_DTYPE_BF16 ? d_f32_to_bf16(1.0f / 128.0f) : d_f32_to_f16(1.0f / 1024.0f);
        else if (!d_finite(back)) /* amax / 7.5 past f16's range: the stored scale is inf */
            d_note_bad(flag, tag | RF_QUANT_BAD_SCALE);
        ((uint16_t *)scale)[r * sp + g] = h;
    }
}

/* Pass 2: one thread per packed word: 8 elements with their group's (exact) scale. */
__global__ void k_wna16_pack(const void *w, int wdt, int64_t rows, int64_t K, int64_t wp,
                             int64_t G, uint32_t *packed, int64_t pp, const void *scale, int sdt,
                             int64_t sp)
{
    int64_t nw = K / 8;
    uint64_t n = (uint64_t)rows * (uint64_t)nw;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n;
         t += (uint64_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)(t / (uint64_t)nw), j = (int64_t)(t % (uint64_t)nw);
        uint32_t word = 0;
        for (int e = 0; e < 8; e++) {
            int64_t k = 8 * j + e;
            uint16_t h = ((const uint16_t *)scale)[r * sp + k / G];
            float s = sdt == RF_DTYPE_BF16 ? rf_cuda_bf16_to_f32(h) : rf_cuda_f16_to_f32(h);
            float x = rintf(__fdiv_rn(d_load_f32(w, wdt, r * wp + k), s));
            int qv = x < -8.0f ? -8 : (x > 7.0f ? 7 : (int)x);
            word |= (uint32_t)(qv + 8) << (4 * e);
        }
        packed[r * pp + j] = word;
    }
}

/* G % 8 == 0 (every packed word inside one group): one warp per (row, group), reading the
 * group coalesced, its amax by shuffles (max is exact in any order), the scale by the same
 * arithmetic as k_wna16_scale and the group's G / 8 words as k_wna16_pack: the same bits as the
 * two passes in one launch (issue 18: pass 1 read with a G-element stride between threads). */
__global__ void k_wna16_fused(const void *w, int wdt, int64_t rows, int64_t K, int64_t wp,
                              int64_t G, uint32_t *packed, int64_t pp, void *scale, int sdt,
                              int64_t sp, unsigned long long *flag, unsigned long long tag)
{
    const int lane = threadIdx.x & 31;
    const int64_t ng = K / G;
    const uint64_t n = (uint64_t)rows * (uint64_t)ng, wpb = blockDim.x / 32;
    const uint64_t stride = (uint64_t)gridDim.x * wpb;
    for (uint64_t t = blockIdx.x * wpb + threadIdx.x / 32; t < n; t += stride) { /* warp-uniform */
        int64_t r = (int64_t)(t / (uint64_t)ng), g = (int64_t)(t % (uint64_t)ng);
        const int64_t base = r * wp + g * G;
        float amax = 0.0f;
        bool bad = false;
        for (int64_t k = lane; k < G; k += 32) {
            float v = d_load_f32(w, wdt, base + k);
            if (!d_finite(v))
                bad = true;
            amax = fabsf(v) > amax ? fabsf(v) : amax;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float x = __shfl_xor_sync(0xffffffffu, amax, o);
            amax = x > amax ? x : amax;
        }
        bad = __any_sync(0xffffffffu, bad);
        float sv = __fdiv_rn(amax, 7.5f);
        uint16_t h = sdt == RF_DTYPE_BF16 ? d_f32_to_bf16(sv) : d_f32_to_f16(sv);
        float back = sdt == RF_DTYPE_BF16 ? rf_cuda_bf16_to_f32(h) : rf_cuda_f16_to_f32(h);
        bool bad_scale = false;
        if (back == 0.0f)
            h = sdt == RF_DTYPE_BF16 ? d_f32_to_bf16(1.0f / 128.0f) : d_f32_to_f16(1.0f / 1024.0f);
        else if (!d_finite(back))
            bad_scale = true;
        if (lane == 0) {
            ((uint16_t *)scale)[r * sp + g] = h;
            if (bad)
                d_note_bad(flag, tag | RF_QUANT_BAD_INPUT);
            if (bad_scale)
                d_note_bad(flag, tag | RF_QUANT_BAD_SCALE);
        }
        float s = sdt == RF_DTYPE_BF16 ? rf_cuda_bf16_to_f32(h) : rf_cuda_f16_to_f32(h);
        for (int64_t j = lane; j < G / 8; j += 32) {
            uint32_t word = 0;
            for (int e = 0; e < 8; e++) {
                float x = rintf(__fdiv_rn(d_load_f32(w, wdt, base + 8 * j + e), s));
                int qv = x < -8.0f ? -8 : (x > 7.0f ? 7 : (int)x);
                word |= (uint32_t)(qv + 8) << (4 * e);
            }
            packed[r * pp + (g * G) / 8 + j] = word;
        }
    }
}

static rf_status_t cu_wna16_quantize(rf_accel_t *a, const void *w, rf_dtype_t w_dtype,
                                     int64_t rows, int64_t K, int64_t w_pitch, int64_t G,
                                     uint32_t *packed, int64_t packed_pitch, void *scale,
                                     rf_dtype_t scale_dtype, int64_t scale_pitch,
                                     rf_accel_stream_t *s)
{
    if (!a || !float_dt(w_dtype) || (scale_dtype != RF_DTYPE_BF16 && scale_dtype != RF_DTYPE_F16) ||
        rows < 0 || K < 0 || G <= 0 || K % 8 != 0 || K % G != 0 || w_pitch < K ||
        packed_pitch < K / 8 || scale_pitch < K / G)
        return RF_ERR_INVALID;
    if (rows == 0 || K == 0)
        return RF_OK;
    cuda_stream_t *c = stream_impl(a, s);
    if (G % 8 == 0) {
        uint64_t groups = (uint64_t)rows * (uint64_t)(K / G), wpb = RF_CUDA_THREADS / 32;
        uint64_t nb = (groups + wpb - 1) / wpb;
        k_wna16_fused<<<nb > RF_CUDA_MAX_BLOCKS ? RF_CUDA_MAX_BLOCKS : (unsigned)nb,
                        RF_CUDA_THREADS, 0, c->s>>>(w, (int)w_dtype, rows, K, w_pitch, G,
                                                    packed, packed_pitch, scale,
                                                    (int)scale_dtype, scale_pitch, c->d_scratch,
                                                    next_tag(c));
        RF_CUDA_LAUNCH_CHECK();
        return RF_OK;
    }
    k_wna16_scale<<<rf_cuda_grid_for((uint64_t)rows * (uint64_t)(K / G)), RF_CUDA_THREADS, 0,
                    c->s>>>(w, (int)w_dtype, rows, K, w_pitch, G, scale, (int)scale_dtype,
                            scale_pitch, c->d_scratch, next_tag(c));
    RF_CUDA_LAUNCH_CHECK();
    k_wna16_pack<<<rf_cuda_grid_for((uint64_t)rows * (uint64_t)(K / 8)), RF_CUDA_THREADS, 0,
                   c->s>>>(w, (int)w_dtype, rows, K, w_pitch, G, packed, packed_pitch, scale,
                           (int)scale_dtype, scale_pitch);
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}
/* ---- fp8-tensor / fp8-channel -------------------------------------------------------------- */

__device__ static inline float d_e4m3_to_f32(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 7u;
    if (e == 0) /* m 2^-9, exact */
        return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)m, 1.0f / 512.0f)));
    return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20)); /* (1 + m/8) 2^(e-7) */
}

__device__ static inline float d_fp8_scale(float amax)
{
    return __fdiv_rn(amax > 1e-12f ? amax : 1e-12f, 448.0f);
}

/* Per channel: one block per row (grid-stride over rows), the row's amax, then its scale. */
__global__ void k_fp8_row_scale(const void *w, int wdt, int64_t rows, int64_t cols, int64_t wp,
                                float *scale, unsigned long long *flag,
                                unsigned long long tag)
{
    __shared__ float red[RF_CUDA_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float amax = 0.0f;
        bool bad = false;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = d_load_f32(w, wdt, r * wp + c);
            if (!d_finite(v))
                bad = true;
            v = fabsf(v);
            amax = v > amax ? v : amax;
        }
        if (bad)
            d_note_bad(flag, tag | RF_QUANT_BAD_INPUT);
        red[threadIdx.x] = amax;
        __syncthreads();
        for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
            if (threadIdx.x < h && red[threadIdx.x + h] > red[threadIdx.x])
                red[threadIdx.x] = red[threadIdx.x + h];
            __syncthreads();
        }
        if (threadIdx.x == 0)
            scale[r] = d_fp8_scale(red[0]);
        __syncthreads(); /* red is reused by the next row */
    }
}

/* Per tensor, pass 1: block maxima folded into flag[0] by atomicMax on the bits (the order of
 * non-negative floats is the order of their bit patterns; a non-finite input is noted by
 * d_note_bad). */
__global__ void k_fp8_tensor_amax(const void *w, int wdt, int64_t rows, int64_t cols, int64_t wp,
                                  unsigned long long *flag, unsigned long long tag)
{
    __shared__ float red[RF_CUDA_THREADS];
    uint64_t n = (uint64_t)rows * (uint64_t)cols, stride = (uint64_t)gridDim.x * blockDim.x;
    float amax = 0.0f;
    bool bad = false;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n; t += stride) {
        int64_t r = (int64_t)(t / (uint64_t)cols), c = (int64_t)(t % (uint64_t)cols);
        float v = d_load_f32(w, wdt, r * wp + c);
        if (!d_finite(v))
            bad = true;
        v = fabsf(v);
        amax = v > amax ? v : amax;
    }
    if (bad)
        d_note_bad(flag, tag | RF_QUANT_BAD_INPUT);
    red[threadIdx.x] = amax;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h && red[threadIdx.x + h] > red[threadIdx.x])
            red[threadIdx.x] = red[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicMax(&flag[0], (unsigned long long)__float_as_uint(red[0]));
}

/* Per tensor, pass 2: the one scale. */
__global__ void k_fp8_tensor_scale(float *scale, const unsigned long long *flag)
{
    scale[0] = d_fp8_scale(__uint_as_float((uint32_t)flag[0]));
}

/* q of the sub-region [r0, r0 + nr) x [c0, c0 + nc) with the scales above. */
__global__ void k_fp8_quant_scaled(const void *w, int wdt, int64_t wp, int per_row,
                                   const float *scale, int64_t r0, int64_t nr, int64_t c0,
                                   int64_t nc, uint8_t *q, int64_t qp)
{
    uint64_t n = (uint64_t)nr * (uint64_t)nc, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n; t += stride) {
        int64_t r = (int64_t)(t / (uint64_t)nc), c = (int64_t)(t % (uint64_t)nc);
        float v = d_load_f32(w, wdt, (r0 + r) * wp + c0 + c);
        q[r * qp + c] = d_f32_to_e4m3(__fdiv_rn(v, scale[per_row ? r0 + r : 0]));
    }
}

static rf_status_t cu_fp8_quantize_rows(rf_accel_t *a, const void *w, rf_dtype_t w_dtype,
                                        int64_t rows, int64_t cols, int64_t w_pitch,
                                        bool per_row, float *scale, int64_t q_r0, int64_t q_rows,
                                        int64_t q_c0, int64_t q_cols, uint8_t *q, int64_t q_pitch,
                                        rf_accel_stream_t *s)
{
    if (!a || !float_dt(w_dtype) || rows < 0 || cols < 0 || w_pitch < cols || !scale ||
        q_r0 < 0 || q_rows < 0 || q_c0 < 0 || q_cols < 0 || q_r0 + q_rows > rows ||
        q_c0 + q_cols > cols || q_pitch < q_cols)
        return RF_ERR_INVALID;
    cuda_stream_t *c = stream_impl(a, s);
    unsigned long long tag = next_tag(c);
    if (per_row && rows > 0) {
        unsigned g = rows > (int64_t)RF_CUDA_MAX_BLOCKS ? RF_CUDA_MAX_BLOCKS : (unsigned)rows;
        k_fp8_row_scale<<<g, RF_CUDA_THREADS, 0, c->s>>>(w, (int)w_dtype, rows, cols, w_pitch, scale,
                                                  c->d_scratch, tag);
        RF_CUDA_LAUNCH_CHECK();
    } else if (!per_row) {
        /* [0] is this call's amax (zeroed here, stream-ordered) */
        RF_CUDA_CHECK(cudaMemsetAsync(c->d_scratch, 0, sizeof(unsigned long long), c->s));
        k_fp8_tensor_amax<<<rf_cuda_grid_for((uint64_t)rows * (uint64_t)cols), RF_CUDA_THREADS, 0, c->s>>>(
            w, (int)w_dtype, rows, cols, w_pitch, c->d_scratch, tag);
        RF_CUDA_LAUNCH_CHECK();
        k_fp8_tensor_scale<<<1, 1, 0, c->s>>>(scale, c->d_scratch);
        RF_CUDA_LAUNCH_CHECK();
    }
    if (q_rows > 0 && q_cols > 0) {
        k_fp8_quant_scaled<<<rf_cuda_grid_for((uint64_t)q_rows * (uint64_t)q_cols), RF_CUDA_THREADS, 0, c->s>>>(
            w, (int)w_dtype, w_pitch, per_row ? 1 : 0, scale, q_r0, q_rows, q_c0, q_cols, q,
            q_pitch);
        RF_CUDA_LAUNCH_CHECK();
    }
    return RF_OK;
}

__global__ void k_fp8_requant(uint8_t *w, uint64_t n, float s_from, float s_to)
{
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n; t += stride) {
        uint8_t b = w[t];
        w[t] = (b & 0x7fu) == 0x7fu
                   ? (uint8_t)0
                   : d_f32_to_e4m3(__fdiv_rn(__fmul_rn(d_e4m3_to_f32(b), s_from), s_to));
    }
}

static rf_status_t cu_fp8_requant(rf_accel_t *a, uint8_t *w, size_t n, float s_from, float s_to,
                                  rf_accel_stream_t *s)
{
    if (!a || (n && !w))
        return RF_ERR_INVALID;
    if (n == 0 || s_from == s_to) /* the host rule: the same scale keeps the bytes */
        return RF_OK;
    k_fp8_requant<<<rf_cuda_grid_for(n), RF_CUDA_THREADS, 0, cs(a, s)>>>(w, n, s_from, s_to);
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}

/* fp8-block dequantization: one thread per output element (grid-stride), the NaN rule of
 * rf_fp8_block_dequant_elem (formats/quant.c) spelled out, so no NaN payload depends on the
 * hardware's propagation. */
__global__ void k_fp8_block_dequant(const uint8_t *w, int64_t rows, int64_t cols, int64_t wp,
                                    const float *scale, int64_t sp, void *out, int odt, int64_t op)
{
    uint64_t n = (uint64_t)rows * (uint64_t)cols, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n; t += stride) {
        int64_t r = (int64_t)(t / (uint64_t)cols), c = (int64_t)(t % (uint64_t)cols);
        uint8_t b = w[r * wp + c];
        float y = scale[(r / 128) * sp + c / 128], v;
        if ((b & 0x7fu) == 0x7fu)
            v = __uint_as_float(0x7fc00000u);
        else if (isnan(y))
            v = __uint_as_float(__float_as_uint(y) | 0x00400000u);
        else
            v = __fmul_rn(d_e4m3_to_f32(b), y);
        int64_t o = r * op + c;
        if (odt == RF_DTYPE_F32)
            ((float *)out)[o] = v;
        else
            ((uint16_t *)out)[o] = odt == RF_DTYPE_BF16 ? d_f32_to_bf16(v) : d_f32_to_f16(v);
    }
}

static rf_status_t cu_fp8_block_dequant(rf_accel_t *a, const uint8_t *w, int64_t rows,
                                        int64_t cols, int64_t w_pitch, const float *scale,
                                        int64_t scale_pitch, void *out, rf_dtype_t out_dtype,
                                        int64_t out_pitch, rf_accel_stream_t *s)
{
    if (!a || rows < 0 || cols < 0 || w_pitch < cols || out_pitch < cols ||
        scale_pitch < (cols + 127) / 128 || (rows && cols && (!w || !scale || !out)) ||
        (out_dtype != RF_DTYPE_BF16 && out_dtype != RF_DTYPE_F16 && out_dtype != RF_DTYPE_F32))
        return RF_ERR_INVALID;
    uint64_t n = (uint64_t)rows * (uint64_t)cols;
    if (n == 0)
        return RF_OK;
    k_fp8_block_dequant<<<rf_cuda_grid_for(n), RF_CUDA_THREADS, 0, cs(a, s)>>>(
        w, rows, cols, w_pitch, scale, scale_pitch, out, (int)out_dtype, out_pitch);
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}

extern "C" const rf_quant_ops_t rf_quant_cuda_ops = {
    /* .name = */ "cuda",
    /* .fp8_to_fnuz = */ cu_fp8_to_fnuz,
    /* .wna16_repack = */ cu_wna16_repack,
    /* .fp8_quantize = */ cu_fp8_quantize,
    /* .wna16_quantize = */ cu_wna16_quantize,
    /* .fp8_quantize_rows = */ cu_fp8_quantize_rows,
    /* .fp8_requant = */ cu_fp8_requant,
    /* .fp8_block_dequant = */ cu_fp8_block_dequant,
    /* .check = */ cu_quant_check,
};
