/*
 * refit: what the library's own CUDA files see of the cuda accelerator (CUDA only: include it
 * from .cu files, never from C). The cuda accelerator (core/accel_cuda.cu) keeps, per
 * stream, the CUDA stream and 16 bytes of device scratch with a pinned host mirror; the
 * format kernels (formats/quant_cuda.cu) and the generator's device fill
 * (runtime/generator_cuda.cu) enqueue on the accelerator's streams through this accessor,
 * so the accelerator table carries no format's or generator's work.
 */
#ifndef REFIT_ACCEL_CUDA_H
#define REFIT_ACCEL_CUDA_H

#include <cuda_runtime.h>

#include "refit/accel.h"

/* Per stream of the cuda accelerator: the CUDA stream and its scratch (checksum accumulator,
 * quantizer non-finite flag). */
typedef struct rf_accel_cuda_stream {
    cudaStream_t s;
    unsigned long long *d_scratch; /* [0] sum, [1] flags */
    unsigned long long *h_scratch;
} rf_accel_cuda_stream_t;

/* The CUDA side of stream s of the cuda accelerator a (s NULL: a's default stream). a must
 * be an accelerator of rf_accel_cuda_ops. Borrowed: valid while the stream lives. */
extern "C" rf_accel_cuda_stream_t *rf_accel_cuda_stream(rf_accel_t *a, rf_accel_stream_t *s);

#endif /* REFIT_ACCEL_CUDA_H */
