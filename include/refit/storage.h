/*
 * refit: rollout runtime storage (DESIGN.md section 8, "Runtime storage").
 *
 * Runtime parameters live in a few arenas (one per layer, like a caching allocator's block);
 * slots are carved 256-byte aligned, so storage offsets are real and a slot's data pointer
 * differs from its storage base. The slot registry holds each slot's full signature: shape,
 * stride (elements), dtype, device, data pointer, storage base pointer, storage offset
 * (elements of the slot's dtype), storage size (bytes). In library mode an engine registers
 * its live tensors by pointer and signature instead (rf_storage_register).
 */
#ifndef REFIT_STORAGE_H
#define REFIT_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/model.h"
#include "refit/slot.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_arena {
    void *base;
    uint64_t bytes;
    bool noreserve;   /* reserved with MAP_NORESERVE (refit-plan): never touched */
    int module;
    rf_accel_t *accel; /* NULL: host mmap; else accel->ops->alloc (device memory) */
} rf_arena_t;

/* Registry of a rollout rank's runtime slots. Owns its arenas. */
typedef struct rf_storage {
    rf_slot_t *slots;
    int nslots;
    int cap;
    rf_arena_t *arenas;
    int narenas;
    int *module_first; /* per module: first slot index (slots of a module are contiguous) */
    int *module_count;
    int nmodules;
    void *index;       /* name -> slot */
    uint64_t bytes;    /* arena bytes in total */
    void **moved;      /* buffers made by rf_storage_move_slot (owned) */
    int nmoved;
    rf_accel_t *accel; /* borrowed: where the arenas live (NULL: host memory); set by the
                          first rf_storage_alloc_module, every arena on the same one */
} rf_storage_t;

/* Empty registry for an inventory of `nmodules` modules. */
rf_status_t rf_storage_init(rf_storage_t *st, int nmodules, rf_err_t *err);
void rf_storage_free(rf_storage_t *st);

/*
 * Allocates one arena for module m holding `n` slots of the given shapes (row-major
 * contiguous), each 256-byte aligned, with a `lead` gap before the first slot so that at
 * least one slot has a non-zero storage offset. noreserve: mmap with MAP_NORESERVE and never
 * touch (refit-plan). Slots are zero-filled otherwise. accel: NULL (or a "host" accelerator)
 * keeps the host mmap arena; a device accelerator allocates the arena with accel->ops->alloc
 * (cudaMalloc) and the signatures carry device = accel->device. Device arenas cannot be
 * noreserve (refit-plan is host only). Not collective.
 */
rf_status_t rf_storage_alloc_module(rf_storage_t *st, int m, const char *module_name,
                                    const rf_slot_shape_t *shapes, const bool *derived, int n,
                                    bool noreserve, rf_accel_t *accel, rf_err_t *err);

/* True when slot memory is device memory (st->accel is a non-host accelerator). */
bool rf_storage_on_device(const rf_storage_t *st);

/* Copies `bytes` bytes of slot memory at `data` (a slot's data pointer or inside its arena)
 * into host memory `dst` (memcpy on the host, a synchronous d2h copy on a device). */
rf_status_t rf_storage_read(const rf_storage_t *st, void *dst, const void *data, size_t bytes,
                            rf_err_t *err);

/* Registers a caller-owned tensor (library mode): the slot BORROWS sig's memory, which
 * rf_storage_free never frees. The memory stays the caller's. */
rf_status_t rf_storage_register(rf_storage_t *st, int m, const char *name, bool derived,
                                const rf_signature_t *sig, rf_err_t *err);

/*
 * Library mode: checks a caller's tensor `got` against the slot shape `want` it is to be
 * (`name` names it in the message): the same dtype (RF_ERR_MISMATCH), rank and shape
 * (RF_ERR_MISMATCH, both shapes named), row-major contiguous strides (RF_ERR_INVALID; a dim of
 * size 1 may have any stride), and data not NULL when it holds bytes (RF_ERR_INVALID). The
 * device is the caller's business. Pure.
 */
rf_status_t rf_signature_check(const rf_signature_t *got, const rf_slot_shape_t *want,
                               const char *name, rf_err_t *err);

/*
 * Library mode: slot `name`, registered with rf_storage_register, now lives at `sig` (the
 * engine re-allocated the tensor): the same dtype and shape (RF_ERR_MISMATCH otherwise), new
 * pointers. The memory stays the caller's (never freed here); a plan built on the old
 * signature rebuilds at its next rf_plan_begin. RF_ERR_INVALID when no slot has the name.
 */
rf_status_t rf_storage_rebind(rf_storage_t *st, const char *name, const rf_signature_t *sig,
                              rf_err_t *err);

/* Slot lookup by full name, or NULL. */
rf_slot_t *rf_storage_find(rf_storage_t *st, const char *name);
/* i-th slot of module m, or NULL. */
rf_slot_t *rf_storage_module_slot(rf_storage_t *st, int m, int i);
int rf_storage_module_nslots(const rf_storage_t *st, int m);

/*
 * Test and fault-injection support: moves slot `name` to a freshly allocated buffer (a new
 * storage base), copying its bytes, as an engine that re-allocated a parameter would.
 * The old memory stays valid (it belongs to the arena). On a device the new buffer is
 * accel->ops->alloc memory and the copy is device to device.
 */
rf_status_t rf_storage_move_slot(rf_storage_t *st, const char *name, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_STORAGE_H */
