/*
 * refit: a runtime slot and its signature (DESIGN.md section 8, "Runtime storage"): the
 * vocabulary the format owners (formats/, which decide a module's runtime slots) and the
 * rollout's storage (runtime/storage.c, which carves or borrows them) share.
 *
 * A signature is what a live tensor is to an engine: shape, strides (elements), dtype,
 * device, data pointer, and the storage it is carved from (base, offset in elements, bytes),
 * as torch's Tensor.untyped_storage() / storage_offset() report them. Two signatures are equal
 * iff every field is equal: a plan built against one is valid only while it holds.
 */
#ifndef REFIT_SLOT_H
#define REFIT_SLOT_H

#include <stdbool.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_SLOT_ALIGN 256
#define RF_DEVICE_HOST (-1)

/* A slot's signature. Two signatures are equal iff every field is equal. */
typedef struct rf_signature {
    int ndim;
    int64_t shape[RF_MAX_DIMS];
    int64_t stride[RF_MAX_DIMS]; /* elements */
    rf_dtype_t dtype;
    int device;                  /* RF_DEVICE_HOST or a GPU ordinal */
    void *data;                  /* first element */
    void *storage_base;          /* base of the storage (arena) holding it */
    int64_t storage_offset;      /* (data - storage_base) / element size */
    uint64_t storage_bytes;      /* size of that storage */
} rf_signature_t;

/* Every field equal (pure). */
bool rf_signature_equal(const rf_signature_t *a, const rf_signature_t *b);
/* numel x element size */
uint64_t rf_signature_bytes(const rf_signature_t *s);
/* True when row-major contiguous. */
bool rf_signature_contiguous(const rf_signature_t *s);

/* One runtime slot. */
typedef struct rf_slot {
    char name[RF_NAME_MAX + 32]; /* "model.layers.0.self_attn.qkv_proj.weight" */
    int module;                  /* inventory module (= plannable layer) */
    int index;                   /* slot index within the module's runtime slots */
    bool derived;                /* weight-derived buffer (deferred stage), not loaded */
    rf_signature_t sig;
} rf_slot_t;

#ifdef __cplusplus
}
#endif
#endif /* REFIT_SLOT_H */
