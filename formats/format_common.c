/*
 * refit: what every format owner uses (include/refit/format.h): a slot's byte count and the
 * device copy with its error naming the slot. Here, below the owners, so that an owner calling
 * another owner's helper (format_mla.c for DeepSeek's derived slots) makes no circle between
 * them.
 */
#include <stdio.h>

#include "refit/format.h"

uint64_t rf_slot_shape_bytes(const rf_slot_shape_t *s)
{
    uint64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= (uint64_t)s->shape[i];
    return n * rf_dtype_size(s->dtype);
}

rf_status_t rf_format_dev_copy(rf_accel_t *accel, void *dst, const void *src, uint64_t b,
                               rf_copy_kind_t kind, const char *what, rf_err_t *err)
{
    rf_status_t s = accel->ops->copy(accel, dst, src, (size_t)b, kind, NULL);
    if (s == RF_OK && kind == RF_COPY_D2H)
        s = rf_accel_sync(accel);
    if (s != RF_OK)
        return rf_err_set(err, s, "format: %s: %s copy of %llu bytes on %s device %d failed", what,
                          kind == RF_COPY_D2H ? "device-to-host" : "device-to-device",
                          (unsigned long long)b, accel->ops->name, accel->device);
    return RF_OK;
}
