/*
 * refit: what the library's own CUDA files see of the cuda accelerator (CUDA only: include it
 * from .cu files, never from C). The cuda accelerator (core/accel_cuda.cu) keeps, per
 * stream, the CUDA stream and 16 bytes of device scratch with a pinned host mirror; the
 * format kernels (formats/quant_cuda.cu) and the generator's device fill
 * (runtime/generator_cuda.cu) enqueue on the accelerator's streams through this accessor,
 * so the accelerator table carries no format's or generator's work. The launch shape and the
 * device bf16 / f16 -> f32 conversions below are the one copy those files share.
 */
#ifndef REFIT_ACCEL_CUDA_H
#define REFIT_ACCEL_CUDA_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "refit/accel.h"

/* Per stream of the cuda accelerator: the CUDA stream and its scratch (checksum accumulator,
 * quantizer non-finite flag). */
typedef struct rf_accel_cuda_stream {
    cudaStream_t s;
    /* [0] sum, [1] flags (one call's: zeroed by the call that uses them); [2] the format
     * kernels' sticky word: (index << 2 | why) of the first quantize call since the last
     * quant check that saw bad input, ~0 when none (formats/quant_cuda.cu) */
    unsigned long long *d_scratch;
    unsigned long long *h_scratch;  /* pinned, as many words */
    unsigned long long quant_calls; /* quantize calls enqueued since the last quant check */
} rf_accel_cuda_stream_t;

/* The CUDA side of stream s of the cuda accelerator a (s NULL: a's default stream). a must
 * be an accelerator of rf_accel_cuda_ops. Borrowed: valid while the stream lives. */
extern "C" rf_accel_cuda_stream_t *rf_accel_cuda_stream(rf_accel_t *a, rf_accel_stream_t *s);

/* The library's kernels: threads per block, and the most blocks of a grid-stride launch. */
#define RF_CUDA_THREADS 256
#define RF_CUDA_MAX_BLOCKS (65535u * 8u)

/* Blocks for n elements, one thread each: ceil(n / RF_CUDA_THREADS), at least 1 and at most
 * RF_CUDA_MAX_BLOCKS (the kernels stride over the rest). */
static inline unsigned rf_cuda_grid_for(uint64_t n)
{
    uint64_t b = (n + RF_CUDA_THREADS - 1) / RF_CUDA_THREADS;
    if (b == 0)
        b = 1;
    return b > RF_CUDA_MAX_BLOCKS ? RF_CUDA_MAX_BLOCKS : (unsigned)b;
}

/* bf16 / f16 bits -> f32 on the device, the same integer code as the host's (core/dtype.c,
 * formats/quant.c) bit for bit: never build a file using them with --use_fast_math. */
__device__ static inline float rf_cuda_bf16_to_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ static inline float rf_cuda_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        /* m 2^-24 is exact in f32; ldexpf((float)m, -24) on the host */
        float v = __fmul_rn((float)m, 5.9604644775390625e-8f);
        return s ? -v : v;
    }
    if (e == 31)
        return __uint_as_float(s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
}

#endif /* REFIT_ACCEL_CUDA_H */
