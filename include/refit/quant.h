/*
 * refit: trainer-side quantizers and scalar dequantizers (DESIGN.md section 7).
 *
 * fp8-block: per 128 x 128 block, s = f32(max(amax_f32|w|, 1e-12) / 448), q =
 * e4m3_rne_satfinite(f32(w) / s) with the division in fp32, never 0x7F / 0xFF, always with the
 * unrounded f32 s; `weight_scale_inv` = s in the target scale dtype (a dequant multiplier,
 * W = q s). The TRANSFORMERS variant first casts w to e4m3 without scaling and applies the
 * rule to that value: the transformers-written fixture qwen3-fp8-tiny reproduces that way.
 *
 * fp8-tensor / fp8-channel (compressed-tensors float-quantized, strategy tensor / channel):
 * the same rule with the block replaced by the whole tensor / one output row: s =
 * f32(max(amax, 1e-12) / 448), q = e4m3_rne_satfinite(f32(w) / s), weight_scale = s (fp32).
 * Requantizing a shard of a fused per-tensor module to the module's max scale (vLLM's
 * requantize_with_max_scale, docs/formats.md): q' = e4m3_rne_satfinite(f32(e4m3(q) s) / smax).
 *
 * wna16 (int4 symmetric, group G along K, compressed-tensors pack-quantized): s =
 * round_to_scale_dtype(f32(amax) / 7.5f), replaced by the scale dtype's machine epsilon
 * (bf16 2^-7, fp16 2^-10) if 0; q = clamp(rne(f32(w) / f32(s)), -8, 7), stored as q + 8 in
 * bits [4 (k mod 8), +4) of int32 word floor(k / 8), built in uint32_t. Little-endian: byte b
 * of a word holds elements 2b (low nibble) and 2b + 1 (high nibble).
 *
 * The dequantizers are separate scalar implementations for the verification oracle. Nothing
 * here allocates, logs or is collective; all functions are thread safe.
 */
#ifndef REFIT_QUANT_H
#define REFIT_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_FP8_BLOCK 128
#define RF_E4M3_MAX 448.0f
#define RF_FP8_AMAX_FLOOR 1e-12f
#define RF_WNA16_QMAX_DIV 7.5f
#define RF_BF16_EPS (1.0f / 128.0f)   /* 2^-7 */
#define RF_F16_EPS (1.0f / 1024.0f)   /* 2^-10 */

/* fp8 quantizer variants */
enum {
    RF_FP8_PLAIN = 0,        /* DESIGN.md 7: the rule */
    RF_FP8_TRANSFORMERS = 1, /* cast w to e4m3 (unscaled, RNE, satfinite) first, then the rule */
};

/* ---- scalar conversions ---------------------------------------------------------------- */

/* f32 -> e4m3fn byte: round to nearest even, saturating to +-448 (never 0x7F / 0xFF); -0.0
 * gives 0x80; +-inf saturates; NaN gives 0x00 (rf_fp8_quantize refuses non-finite input). */
uint8_t rf_f32_to_e4m3(float f);
/* e4m3fn byte -> f32 (exact); 0x7F / 0xFF are NaN. */
float rf_e4m3_to_f32(uint8_t b);
/* One fp8-block weight dequantized: rf_e4m3_to_f32(b) x scale in f32 (one RNE rounding), with
 * the NaN rule of rf_quant_ops_t.fp8_block_dequant spelled out (no reliance on the CPU's NaN
 * propagation): a NaN byte gives 0x7fc00000, a NaN scale its own bits, quieted. */
float rf_fp8_block_dequant_elem(uint8_t b, float scale);
/* e4m3fn byte -> e4m3fnuz byte encoding the same value with a scale x 2 (value_fnuz(b) =
 * value_fn(b) / 2): identical except 0x80 (-0.0, NaN in fnuz) -> 0x00. Not injective. */
static inline uint8_t rf_e4m3_to_fnuz(uint8_t b) { return b == 0x80 ? 0x00 : b; }
/* e4m3fnuz byte -> f32 (exact): value_fn(b) / 2; 0x80 is NaN. */
float rf_e4m3fnuz_to_f32(uint8_t b);

/* IEEE f32 -> binary16 (bit patterns): RNE, NaN stays NaN. The exact way back,
 * rf_f16_to_f32, is in refit/dtype.h. */
uint16_t rf_f32_to_f16(float f);

/* Element i of a bf16 / f16 / f32 array as f32 (other dtypes: NaN). */
float rf_load_f32(const void *p, rf_dtype_t dt, int64_t i);

/*
 * Scale and weight value checks (DESIGN.md section 7): the index of the first of n elements
 * (dtype BF16, F16 or F32, contiguous) that is not a usable quantization scale (NaN, +-inf,
 * zero of either sign, negative) / not finite (NaN, +-inf), or -1 when there is none; *bad_p
 * (may be NULL) gets that element as f32. Any other dtype: 0 (nothing can be checked, so
 * nothing passes). Pure.
 */
int64_t rf_scale_first_bad(const void *p, rf_dtype_t dt, uint64_t n, float *bad_p);
int64_t rf_first_nonfinite(const void *p, rf_dtype_t dt, uint64_t n, float *bad_p);

/* ---- fp8-block --------------------------------------------------------------------------- */

/*
 * Quantizes a rows x cols region of w (element pitch w_pitch_elems; dtype BF16, F16 or F32)
 * that starts on a 128 x 128 block boundary of its tensor (rows / cols need not be multiples
 * of 128: the last blocks are partial). q: e4m3fn bytes, pitch q_pitch bytes. scale:
 * cdiv(rows, 128) x cdiv(cols, 128) values in scale_dtype (F32 or BF16), pitch
 * scale_pitch_elems, rounded from the unrounded f32 s. variant: RF_FP8_PLAIN or
 * RF_FP8_TRANSFORMERS. Errors: RF_ERR_INVALID (dtype, variant, sizes, non-finite input).
 */
rf_status_t rf_fp8_quantize(const void *w, rf_dtype_t w_dtype, int64_t rows, int64_t cols,
                            int64_t w_pitch_elems, uint8_t *q, int64_t q_pitch, void *scale,
                            rf_dtype_t scale_dtype, int64_t scale_pitch_elems, int variant);

/* Oracle: one dequantized element, e4m3fn(q) x scale. */
float rf_fp8_dequant_elem(uint8_t q, float scale);
/*
 * Oracle: dequantizes a rows x cols region (block-aligned start) into out (f32, pitch
 * out_pitch_elems), scale as rf_fp8_quantize writes it. Errors: RF_ERR_INVALID.
 */
rf_status_t rf_fp8_dequant_block(const uint8_t *q, int64_t rows, int64_t cols, int64_t q_pitch,
                                 const void *scale, rf_dtype_t scale_dtype,
                                 int64_t scale_pitch_elems, float *out, int64_t out_pitch_elems);

/* ---- fp8-tensor / fp8-channel -------------------------------------------------------------- */

/*
 * Scales of a rows x cols region of w (dtype BF16, F16 or F32, element pitch w_pitch_elems):
 * per_row false: scale[0] over the whole region (fp8-tensor); true: scale[r] per row
 * (fp8-channel). s = f32(max(amax, 1e-12) / 448), fp32 division. The region is the whole
 * tensor (per tensor) or whole rows (per channel): a slice would give another scale.
 * Errors: RF_ERR_INVALID (dtype, sizes, non-finite input).
 */
rf_status_t rf_fp8_scales(const void *w, rf_dtype_t w_dtype, int64_t rows, int64_t cols,
                          int64_t w_pitch_elems, bool per_row, float *scale);
/*
 * q[r][c] = e4m3_rne_satfinite(f32(w[r][c]) / s), s = scale[per_row ? r : 0] (fp32 division),
 * for a rows x cols region (any sub-rectangle of the region the scales were taken over: the
 * bytes do not depend on where the region starts). q: pitch q_pitch bytes.
 * Errors: RF_ERR_INVALID (dtype, sizes, non-finite input, a scale not finite and positive).
 */
rf_status_t rf_fp8_quantize_scaled(const void *w, rf_dtype_t w_dtype, int64_t rows,
                                   int64_t cols, int64_t w_pitch_elems, const float *scale,
                                   bool per_row, uint8_t *q, int64_t q_pitch);
/* Both, over the whole region: rf_fp8_scales then rf_fp8_quantize_scaled. */
rf_status_t rf_fp8_quantize_rows(const void *w, rf_dtype_t w_dtype, int64_t rows, int64_t cols,
                                 int64_t w_pitch_elems, bool per_row, uint8_t *q,
                                 int64_t q_pitch, float *scale);
/*
 * One byte of a shard quantized with scale s_from, requantized to s_to >= s_from (vLLM's
 * requantize_with_max_scale for a fused per-tensor module): e4m3_rne_satfinite(f32(e4m3(q) x
 * s_from) / s_to), fp32 multiply then fp32 division; s_from == s_to returns q unchanged (the
 * exact identity; vLLM recomputes it in fp16). NaN bytes give 0x00.
 */
uint8_t rf_fp8_requant_byte(uint8_t q, float s_from, float s_to);

/* ---- wna16 ------------------------------------------------------------------------------- */

/* s = round_to_scale_dtype(amax / 7.5f), epsilon if 0, as f32 (scale_dtype BF16 or F16). */
float rf_wna16_group_scale(float amax, rf_dtype_t scale_dtype);

/*
 * Quantizes rows x K of w (dtype BF16, F16 or F32, element pitch w_pitch_elems), K a
 * multiple of 8 and of G, into packed (int32 words as uint32_t, rows x K/8, pitch
 * packed_pitch words) and scale (rows x K/G in scale_dtype BF16 or F16, pitch
 * scale_pitch_elems). Errors: RF_ERR_INVALID (dtypes, sizes, non-finite input).
 */
rf_status_t rf_wna16_quantize(const void *w, rf_dtype_t w_dtype, int64_t rows, int64_t K,
                              int64_t w_pitch_elems, int64_t G, uint32_t *packed,
                              int64_t packed_pitch, void *scale, rf_dtype_t scale_dtype,
                              int64_t scale_pitch_elems);

/* The signed int4 value of element k (of the row) held in `word` = word floor(k / 8). */
static inline int rf_wna16_unpack(uint32_t word, int64_t k)
{
    return (int)((word >> (4 * (unsigned)(k & 7))) & 0xFu) - 8;
}
/* Oracle: one dequantized element: q x scale. */
float rf_wna16_dequant_elem(uint32_t word, int64_t k, float scale);
/* Oracle: one row of K elements from its K/8 words and K/G scales (scale_dtype BF16 / F16 /
 * F32) into out (f32). Errors: RF_ERR_INVALID. */
rf_status_t rf_wna16_dequant_row(const uint32_t *packed, int64_t K, int64_t G, const void *scale,
                                 rf_dtype_t scale_dtype, float *out);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_QUANT_H */
