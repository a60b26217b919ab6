/*
 * refit: element types.
 *
 * The dtypes a checkpoint or a runtime slot can hold: the safetensors set (DESIGN.md
 * section 11), spelled as safetensors spells them ("BF16") and as PyTorch prints them
 * ("torch.bfloat16"), plus bf16 <-> fp32 conversions used by the generator and quantizers.
 */
#ifndef REFIT_DTYPE_H
#define REFIT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(enum, safetensors name, torch name, element bytes) */
#define RF_DTYPE_LIST(X)                                                                   \
    X(RF_DTYPE_BOOL, "BOOL", "torch.bool", 1)                                              \
    X(RF_DTYPE_U8, "U8", "torch.uint8", 1)                                                 \
    X(RF_DTYPE_I8, "I8", "torch.int8", 1)                                                  \
    X(RF_DTYPE_I16, "I16", "torch.int16", 2)                                               \
    X(RF_DTYPE_U16, "U16", "torch.uint16", 2)                                              \
    X(RF_DTYPE_F16, "F16", "torch.float16", 2)                                             \
    X(RF_DTYPE_BF16, "BF16", "torch.bfloat16", 2)                                          \
    X(RF_DTYPE_I32, "I32", "torch.int32", 4)                                               \
    X(RF_DTYPE_U32, "U32", "torch.uint32", 4)                                              \
    X(RF_DTYPE_F32, "F32", "torch.float32", 4)                                             \
    X(RF_DTYPE_F64, "F64", "torch.float64", 8)                                             \
    X(RF_DTYPE_I64, "I64", "torch.int64", 8)                                               \
    X(RF_DTYPE_U64, "U64", "torch.uint64", 8)                                              \
    X(RF_DTYPE_F8_E4M3, "F8_E4M3", "torch.float8_e4m3fn", 1)                               \
    X(RF_DTYPE_F8_E5M2, "F8_E5M2", "torch.float8_e5m2", 1)

typedef enum {
    RF_DTYPE_INVALID = -1,
#define RF_DTYPE_ENUM_(e, st, torch, size) e,
    RF_DTYPE_LIST(RF_DTYPE_ENUM_)
#undef RF_DTYPE_ENUM_
        RF_DTYPE_COUNT
} rf_dtype_t;

/* Element size in bytes; 0 for RF_DTYPE_INVALID. */
size_t rf_dtype_size(rf_dtype_t dt);
/* "BF16" (safetensors spelling); "?" if invalid. */
const char *rf_dtype_name(rf_dtype_t dt);
/* "torch.bfloat16"; "?" if invalid. */
const char *rf_dtype_torch_name(rf_dtype_t dt);
/* Parses either spelling ("BF16", "torch.bfloat16") and the config.json spelling
 * ("bfloat16", "float16", "float32"). RF_DTYPE_INVALID if unknown. */
rf_dtype_t rf_dtype_parse(const char *s);

/* IEEE fp32 <-> bf16 (bit patterns). RNE; NaN stays NaN (quiet). */
static inline uint16_t rf_f32_to_bf16(float f)
{
    union {
        float f;
        uint32_t u;
    } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v.u >> 16) | 0x40u);
    uint32_t lsb = (v.u >> 16) & 1u;
    v.u += 0x7fffu + lsb;
    return (uint16_t)(v.u >> 16);
}

static inline float rf_bf16_to_f32(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

/* IEEE binary16 -> f32 (exact, bit patterns); the other way, rf_f32_to_f16, is in
 * refit/quant.h. */
float rf_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_DTYPE_H */
