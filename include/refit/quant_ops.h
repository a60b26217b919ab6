/*
 * refit: the format kernels on an accelerator's memory (DESIGN.md sections 7 and 16; STYLE.md:
 * ops tables, CUDA in its own module, a host implementation as the reference).
 *
 * The quantizers, the fnuz rewrite and the wna16 tile repack are the formats' work, so they
 * are a table of their own beside the accelerator's (rf_accel_ops_t: memory, streams, copies),
 * looked up by the accelerator they run on. Two instances: "host" (formats/quant_host.c: the
 * rules of formats/quant.c and formats/format_wna16.c themselves, for the "host" and
 * "host-device" accelerators) and "cuda" (formats/quant_cuda.cu: kernels bit-exact with the
 * host, enqueued on the cuda accelerator's streams). Arguments and errors as rf_accel_ops_t
 * (include/refit/accel.h): device pointers, stream NULL for the accelerator's own stream.
 */
#ifndef REFIT_QUANT_OPS_H
#define REFIT_QUANT_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/dtype.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why a quantize call was bad (quant check's *why, a bit set). */
#define RF_QUANT_BAD_INPUT 1u /* a non-finite input element (the call's outputs are unspecified) */
#define RF_QUANT_BAD_SCALE 2u /* a stored scale that is not finite and positive (f16 overflow) */

typedef struct rf_quant_ops {
    const char *name; /* "host", "cuda" */
    /* fp8-block on rocm-fnuz, in place: every byte 0x80 of w[0, nw) becomes 0x00 (w may be
     * NULL when nw is 0) and every f32 of scale[0, nscale) is multiplied by 2 (exact). */
    rf_status_t (*fp8_to_fnuz)(rf_accel_t *accel, uint8_t *w, size_t nw, float *scale,
                               size_t nscale, rf_accel_stream_t *stream);
    /* rf_wna16_repack on device: batch R x C matrices of esize-byte elements (1, 2, 4, 8),
     * inverse = false: model -> runtime. dst and src must not overlap. */
    rf_status_t (*wna16_repack)(rf_accel_t *accel, void *dst, const void *src, int64_t batch,
                                int64_t R, int64_t C, size_t esize, bool inverse,
                                rf_accel_stream_t *stream);
    /* rf_fp8_quantize with the PLAIN rule, same arguments; bit-exact with formats/quant.c.
     * The three quantizers (this, wna16_quantize, fp8_quantize_rows) return RF_ERR_INVALID
     * at once for bad arguments. Bad DATA: the host table refuses non-finite input at once
     * (RF_ERR_INVALID); the cuda table enqueues without synchronizing and reports it at the
     * next `check` on the same stream (one synchronization per batch of calls, not per call:
     * issue 18, a wna16 MoE update is ~10^4 calls). */
    rf_status_t (*fp8_quantize)(rf_accel_t *accel, const void *w, rf_dtype_t w_dtype,
                                int64_t rows, int64_t cols, int64_t w_pitch_elems, uint8_t *q,
                                int64_t q_pitch, void *scale, rf_dtype_t scale_dtype,
                                int64_t scale_pitch_elems, rf_accel_stream_t *stream);
    /* rf_wna16_quantize, same arguments; bit-exact with formats/quant.c. Bad data as
     * fp8_quantize; the cuda table also notes a stored f16 scale that overflowed
     * (RF_QUANT_BAD_SCALE; the host table stores it and leaves it to the caller's scale
     * check, rf_scale_first_bad). */
    rf_status_t (*wna16_quantize)(rf_accel_t *accel, const void *w, rf_dtype_t w_dtype,
                                  int64_t rows, int64_t K, int64_t w_pitch_elems, int64_t G,
                                  uint32_t *packed, int64_t packed_pitch, void *scale,
                                  rf_dtype_t scale_dtype, int64_t scale_pitch_elems,
                                  rf_accel_stream_t *stream);
    /* fp8-tensor / fp8-channel: rf_fp8_scales into `scale` (device f32: 1 or rows values),
     * then rf_fp8_quantize_scaled of the sub-region rows [q_r0, q_r0 + q_rows), columns
     * [q_c0, q_c0 + q_cols) of the same w with those scales into q (pitch q_pitch); both
     * bit-exact with formats/quant.c. Bad data as fp8_quantize. */
    rf_status_t (*fp8_quantize_rows)(rf_accel_t *accel, const void *w, rf_dtype_t w_dtype,
                                     int64_t rows, int64_t cols, int64_t w_pitch_elems,
                                     bool per_row, float *scale, int64_t q_r0, int64_t q_rows,
                                     int64_t q_c0, int64_t q_cols, uint8_t *q, int64_t q_pitch,
                                     rf_accel_stream_t *stream);
    /* fp8-tensor requantize_with_max_scale, in place: w[i] = rf_fp8_requant_byte(w[i], s_from,
     * s_to) for n bytes (host floats; enqueued, not synchronized). */
    rf_status_t (*fp8_requant)(rf_accel_t *accel, uint8_t *w, size_t n, float s_from, float s_to,
                               rf_accel_stream_t *stream);
    /* fp8-block dequantization (MLA's absorbed matrices from an fp8 kv_b_proj, as vLLM's
     * get_and_maybe_dequant_weights): for r < rows, c < cols, out[r out_pitch + c] =
     * cvt(x y) with x = rf_e4m3_to_f32(w[r w_pitch + c]), y = scale[(r / 128) scale_pitch +
     * c / 128], the product in f32 (one RNE rounding), cvt to out_dtype (BF16 / F16 RNE, or
     * F32 as it is). NaN rule, the same on every table: a NaN byte (0x7f, 0xff) gives
     * 0x7fc00000 before cvt, a finite byte times a NaN scale gives the scale's bits with the
     * quiet bit set (pitches in elements; enqueued, not synchronized; RF_ERR_INVALID for bad
     * arguments or an out_dtype other than those three). */
    rf_status_t (*fp8_block_dequant)(rf_accel_t *accel, const uint8_t *w, int64_t rows,
                                     int64_t cols, int64_t w_pitch, const float *scale,
                                     int64_t scale_pitch, void *out, rf_dtype_t out_dtype,
                                     int64_t out_pitch, rf_accel_stream_t *stream);
    /* The verdict on the quantize calls enqueued on `stream` since its last check:
     * synchronizes the stream once; *first_bad = the 0-based index, in enqueue order, of the
     * first call that met bad data (*why: RF_QUANT_BAD_* bits) or -1 (*why 0) when none; then
     * starts the next batch. The host table's quantizers refuse bad input when called, so its
     * check reports -1. RF_ERR_INVALID for NULL outputs; RF_ERR_CUDA when the stream failed. */
    rf_status_t (*check)(rf_accel_t *accel, rf_accel_stream_t *stream, int64_t *first_bad,
                         unsigned *why);
} rf_quant_ops_t;

extern const rf_quant_ops_t rf_quant_host_ops;

/* The format kernels for accelerator accel: the host table for "host" and "host-device", the
 * CUDA one for "cuda" (refit built with CUDA); NULL for anything else (RF_ERR_UNSUPPORTED to
 * the caller). */
const rf_quant_ops_t *rf_quant_ops_for(const rf_accel_t *accel);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_QUANT_OPS_H */
