/*
 * refit: the generator's device fill on the cuda accelerator (rf_gen_cuda_ops, looked up by
 * rf_gen_ops_for in runtime/generator.c). Compiled only with CUDA. The kernel computes every
 * element with include/refit/generator_bits.h, as the host generator does, so the bytes are the
 * host's bit for bit; it is enqueued on the accelerator's stream (refit/accel_cuda.h).
 */
#include <cuda_runtime.h>

#include "refit/accel.h"
#include "refit/accel_cuda.h"
#include "refit/checks.h"
#include "refit/generator.h"
#include "refit/generator_bits.h"
#include "refit/log.h"

static cudaStream_t cs(rf_accel_t *a, rf_accel_stream_t *s)
{
    return rf_accel_cuda_stream(a, s)->s;
}

/* ---- the generator (gen_fill) ---------------------------------------------------------- */

__global__ void k_gen_fill(uint64_t key, int dt, uint64_t ncols, uint64_t r0, uint64_t c0,
                           uint64_t rows, uint64_t cols, char *dst, size_t pitch)
{
    uint64_t n = rows * cols;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n;
         t += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t i = t / cols, j = t % cols;
        uint32_t f = rf_gen_f32_bits(key, (r0 + i) * ncols + c0 + j);
        char *row = dst + i * pitch;
        if (dt == RF_DTYPE_F32)
            reinterpret_cast<uint32_t *>(row)[j] = f;
        else
            reinterpret_cast<uint16_t *>(row)[j] =
                dt == RF_DTYPE_BF16 ? rf_gen_to_bf16(f) : rf_gen_to_f16(f);
    }
}

static rf_status_t cu_gen_fill(rf_accel_t *a, const rf_accel_gen_t *g, rf_accel_stream_t *s)
{
    if (!a || !g || !g->dst ||
        (g->dtype != RF_DTYPE_BF16 && g->dtype != RF_DTYPE_F16 && g->dtype != RF_DTYPE_F32) ||
        g->row_begin >= g->row_end || g->col_begin >= g->col_end || g->col_end > g->ncols ||
        g->dst_pitch < (g->col_end - g->col_begin) * rf_dtype_size(g->dtype))
        return RF_ERR_INVALID;
    uint64_t rows = g->row_end - g->row_begin, cols = g->col_end - g->col_begin;
    k_gen_fill<<<rf_cuda_grid_for(rows * cols), RF_CUDA_THREADS, 0, cs(a, s)>>>(
        rf_gen_key(g->name_hash, g->step), (int)g->dtype, g->ncols, g->row_begin, g->col_begin,
        rows, cols, (char *)g->dst, g->dst_pitch);
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}

extern "C" const rf_gen_ops_t rf_gen_cuda_ops = {
    /* .name = */ "cuda",
    /* .fill = */ cu_gen_fill,
};
