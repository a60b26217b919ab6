/* refit: dtype names and sizes, from RF_DTYPE_LIST. */
#include "refit/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *st;
    const char *torch;
    size_t size;
} rf_dtype_table[RF_DTYPE_COUNT] = {
#define RF_DTYPE_ROW_(e, st, torch, size) [e] = {st, torch, size},
    RF_DTYPE_LIST(RF_DTYPE_ROW_)
#undef RF_DTYPE_ROW_
};

size_t rf_dtype_size(rf_dtype_t dt)
{
    return (dt >= 0 && dt < RF_DTYPE_COUNT) ? rf_dtype_table[dt].size : 0;
}

const char *rf_dtype_name(rf_dtype_t dt)
{
    return (dt >= 0 && dt < RF_DTYPE_COUNT) ? rf_dtype_table[dt].st : "?";
}

const char *rf_dtype_torch_name(rf_dtype_t dt)
{
    return (dt >= 0 && dt < RF_DTYPE_COUNT) ? rf_dtype_table[dt].torch : "?";
}

rf_dtype_t rf_dtype_parse(const char *s)
{
    if (s == NULL)
        return RF_DTYPE_INVALID;
    for (int i = 0; i < RF_DTYPE_COUNT; i++) {
        if (strcmp(s, rf_dtype_table[i].st) == 0 || strcmp(s, rf_dtype_table[i].torch) == 0)
            return (rf_dtype_t)i;
        /* config.json spelling: the torch name without "torch." */
        if (strcmp(s, rf_dtype_table[i].torch + 6) == 0)
            return (rf_dtype_t)i;
    }
    if (strcmp(s, "half") == 0)
        return RF_DTYPE_F16;
    if (strcmp(s, "float") == 0)
        return RF_DTYPE_F32;
    return RF_DTYPE_INVALID;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float rf_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return s ? -v : v;
    }
    if (e == 31)
        return bits_f32(s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    return bits_f32(s | ((e + 112) << 23) | (m << 13));
}
