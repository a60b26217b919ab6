/*
 * refit: the deterministic weight generator (DESIGN.md section 12).
 *
 * The per-element arithmetic is in include/refit/generator_bits.h, shared with the device
 * generator (runtime/generator_cuda.cu). This file also holds the host device-fill table and
 * the lookup by accelerator; it knows whether CUDA was compiled in (REFIT_HAVE_CUDA, set by
 * CMake on this file as on the accelerator registry).
 */
#include <string.h>
#include <xxhash.h>

#include "refit/generator.h"
#include "refit/generator_bits.h"

#ifdef REFIT_HAVE_CUDA
extern const rf_gen_ops_t rf_gen_cuda_ops; /* runtime/generator_cuda.cu */
#endif

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
    uint32_t f = rf_gen_f32_bits(rf_gen_key(name_hash, step), index);
    switch (dt) {
    case RF_DTYPE_BF16:
        return rf_gen_to_bf16(f);
    case RF_DTYPE_F16:
        return rf_gen_to_f16(f);
    case RF_DTYPE_F32:
        return f;
    default:
        return 0;
    }
}

rf_status_t rf_gen_fill_block(uint64_t name_hash, uint64_t step, rf_dtype_t dt, uint64_t ncols,
                              uint64_t row_begin, uint64_t row_end, uint64_t col_begin,
                              uint64_t col_end, void *dst, size_t dst_pitch_bytes)
{
    if (dst == NULL || !rf_gen_dtype_supported(dt) || row_begin >= row_end ||
        col_begin >= col_end || col_end > ncols ||
        dst_pitch_bytes < (col_end - col_begin) * rf_dtype_size(dt))
        return RF_ERR_INVALID;
    uint64_t key = rf_gen_key(name_hash, step);
    for (uint64_t i = row_begin; i < row_end; i++) {
        unsigned char *row = (unsigned char *)dst + (i - row_begin) * dst_pitch_bytes;
        uint64_t base = i * ncols;
        if (dt == RF_DTYPE_F32) {
            uint32_t *o = (uint32_t *)(void *)row;
            for (uint64_t j = col_begin; j < col_end; j++) {
                uint32_t v = rf_gen_f32_bits(key, base + j);
                memcpy(&o[j - col_begin], &v, 4);
            }
        } else {
            bool bf = dt == RF_DTYPE_BF16;
            for (uint64_t j = col_begin; j < col_end; j++) {
                uint32_t f = rf_gen_f32_bits(key, base + j);
                uint16_t v = bf ? rf_gen_to_bf16(f) : rf_gen_to_f16(f);
                memcpy(row + (j - col_begin) * 2, &v, 2);
            }
        }
    }
    return RF_OK;
}

rf_status_t rf_gen_fill(const rf_tensor_t *t, uint64_t step, uint64_t row_begin,
                        uint64_t row_end, uint64_t col_begin, uint64_t col_end, void *dst,
                        size_t dst_pitch_bytes)
{
    if (t == NULL || dst == NULL || !rf_gen_dtype_supported(t->dtype) || t->ndim < 1 ||
        t->shape[0] <= 0)
        return RF_ERR_INVALID;
    uint64_t nrows = rf_tensor_rows(t), ncols = t->numel / nrows; /* 3-D: E N rows */
    if (row_end > nrows)
        return RF_ERR_INVALID;
    return rf_gen_fill_block(rf_gen_name_hash(t->name), step, t->dtype, ncols, row_begin, row_end,
                             col_begin, col_end, dst, dst_pitch_bytes);
}

static rf_status_t host_gen_fill(rf_accel_t *accel, const rf_accel_gen_t *g,
                                 rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if (!g)
        return RF_ERR_INVALID;
    return rf_gen_fill_block(g->name_hash, g->step, g->dtype, g->ncols, g->row_begin, g->row_end,
                             g->col_begin, g->col_end, g->dst, g->dst_pitch);
}

const rf_gen_ops_t rf_gen_host_ops = {
    .name = "host",
    .fill = host_gen_fill,
};

const rf_gen_ops_t *rf_gen_ops_for(const rf_accel_t *accel)
{
    if (!accel)
        return NULL;
    if (accel->ops == &rf_accel_host_ops || accel->ops == &rf_accel_host_device_ops)
        return &rf_gen_host_ops;
#ifdef REFIT_HAVE_CUDA
    if (strcmp(accel->ops->name, "cuda") == 0)
        return &rf_gen_cuda_ops;
#endif
    return NULL;
}
