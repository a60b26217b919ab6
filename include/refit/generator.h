/*
 * refit: the deterministic weight generator (DESIGN.md section 12).
 *
 * Every element of every checkpoint tensor is a pure function of (hash64(name), global
 * element index in the unsharded checkpoint tensor, step), so any rank can produce any shard
 * of any update without communication, and a verifier can recompute any single element.
 *
 * The value: a 64-bit splitmix64 mix of (name hash, step, index) gives a sign, an exponent in
 * [2^-14, 2^-1] and a 23-bit mantissa; that fp32 value is rounded to the tensor's dtype
 * (bf16 and f16 round to nearest even, f32 exact). Values that round up to 1.0 are clamped to
 * the largest value below 1. Every value is finite, non-zero, normal (in bf16, f16 and f32)
 * and in (-1, 1). With 2 x 14 x 128 distinct bf16 values, two steps agree on an element with
 * probability about 1/3584, so consecutive steps differ in about 99.97% of the elements.
 */
#ifndef REFIT_GENERATOR_H
#define REFIT_GENERATOR_H

#include <stddef.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/dtype.h"
#include "refit/model.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* hash64(name) = XXH3_64bits over strlen(name) bytes (no terminator). `name` borrowed. */
uint64_t rf_gen_name_hash(const char *name);

/* True for the dtypes the generator produces: BF16, F16, F32. */
int rf_gen_dtype_supported(rf_dtype_t dt);

/*
 * The bits of element `index` (flat, row-major, of the unsharded checkpoint tensor whose name
 * hashes to `name_hash`) at update `step`, in dtype `dt`: BF16 and F16 in the low 16 bits,
 * F32 in all 32. Returns 0 for an unsupported dtype (0 is never a generated value). Pure,
 * thread-safe, not collective.
 */
uint32_t rf_gen_value_bits(uint64_t name_hash, uint64_t index, uint64_t step, rf_dtype_t dt);

/*
 * Writes the sub-block rows [row_begin, row_end) x columns [col_begin, col_end) of tensor `t`
 * at `step` into `dst` (borrowed, caller-owned), row-major, each row starting
 * dst_pitch_bytes after the previous one. Rows are rf_tensor_rows' (shape[0] of a 1-D or
 * 2-D tensor, a row of a 1-D tensor being one element; every dim but the last of a 3-D one);
 * columns are the elements within a row (numel / rows of them; 1 for a 1-D tensor).
 * Element (i, j) is rf_gen_value_bits(hash(t->name), i * ncols + j,
 * step, t->dtype). Errors: RF_ERR_INVALID for an empty / out-of-range block, a pitch shorter
 * than a block row, or a dtype other than BF16 / F16 / F32. Not collective.
 */
rf_status_t rf_gen_fill(const rf_tensor_t *t, uint64_t step, uint64_t row_begin,
                        uint64_t row_end, uint64_t col_begin, uint64_t col_end, void *dst,
                        size_t dst_pitch_bytes);

/*
 * rf_gen_fill on a block given by the tensor's name hash, dtype and column count (ncols: the
 * elements per row of the unsharded tensor). The host twin of the device fill (rf_gen_ops_t).
 * Errors as rf_gen_fill (col_end > ncols is out of range).
 */
rf_status_t rf_gen_fill_block(uint64_t name_hash, uint64_t step, rf_dtype_t dt, uint64_t ncols,
                              uint64_t row_begin, uint64_t row_end, uint64_t col_begin,
                              uint64_t col_end, void *dst, size_t dst_pitch_bytes);

/*
 * A block of generator values on an accelerator (DESIGN.md section 12): element (i, j),
 * i in [row_begin, row_end), j in [col_begin, col_end), of the unsharded tensor whose name
 * hashes to name_hash, at update `step`, in dtype (BF16, F16, F32), goes to
 * dst + (i - row_begin) dst_pitch + (j - col_begin) esize. ncols: elements per row of the
 * whole tensor (the element's index is i ncols + j).
 */
typedef struct rf_accel_gen {
    uint64_t name_hash;
    uint64_t step;
    rf_dtype_t dtype;
    uint64_t ncols;
    uint64_t row_begin, row_end, col_begin, col_end;
    void *dst;        /* device memory */
    size_t dst_pitch; /* bytes */
} rf_accel_gen_t;


/*
 * The generator's values into an accelerator's memory, looked up by the accelerator: "host"
 * (runtime/generator.c: rf_gen_fill_block itself, for the "host" and "host-device"
 * accelerators) and "cuda" (runtime/generator_cuda.cu: a kernel bit-exact with the host, both
 * on include/refit/generator_bits.h, enqueued on the cuda accelerator's stream).
 */
typedef struct rf_gen_ops {
    const char *name; /* "host", "cuda" */
    /* The values of block g into device memory g->dst. RF_ERR_INVALID as rf_gen_fill_block. */
    rf_status_t (*fill)(rf_accel_t *accel, const rf_accel_gen_t *g, rf_accel_stream_t *stream);
} rf_gen_ops_t;

extern const rf_gen_ops_t rf_gen_host_ops;

/* The device fill for accelerator accel: the host table for "host" and "host-device", the CUDA
 * one for "cuda" (refit built with CUDA); NULL for anything else. */
const rf_gen_ops_t *rf_gen_ops_for(const rf_accel_t *accel);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_GENERATOR_H */
