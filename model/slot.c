/*
 * refit: slot signatures (see include/refit/slot.h): equality, bytes, contiguity. Pure.
 */
#include "refit/slot.h"

bool rf_signature_equal(const rf_signature_t *a, const rf_signature_t *b)
{
    if (a->ndim != b->ndim || a->dtype != b->dtype || a->device != b->device ||
        a->data != b->data || a->storage_base != b->storage_base ||
        a->storage_offset != b->storage_offset || a->storage_bytes != b->storage_bytes)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || a->stride[i] != b->stride[i])
            return false;
    return true;
}

uint64_t rf_signature_bytes(const rf_signature_t *s)
{
    uint64_t n = 1;
    for (int i = 0; i < s->ndim; i++)
        n *= (uint64_t)s->shape[i];
    return n * rf_dtype_size(s->dtype);
}

bool rf_signature_contiguous(const rf_signature_t *s)
{
    int64_t expect = 1;
    for (int i = s->ndim - 1; i >= 0; i--) {
        if (s->shape[i] != 1 && s->stride[i] != expect)
            return false;
        expect *= s->shape[i];
    }
    return true;
}
