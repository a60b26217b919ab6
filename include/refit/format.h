/*
 * refit: format owners (DESIGN.md section 7).
 *
 * A format owner knows one quantization scheme on one backend: the runtime tensors a module
 * holds, whether post-processing is the identity (DIRECT opt-in), a non-mutating
 * model-layout -> runtime-view mapping (RUNTIME_VIEW) or a process_after_loading step
 * (LAYERWISE), its inverse for verification, and the deferred stage for weight-derived
 * buffers. Every format object starts with its ops table (libfabric / Open MPI MCA shape).
 *
 * Owners: "none" (unquantized, DIRECT). Test-only owners: "test-transpose" stores every 2-D
 * linear weight transposed (runtime layout differs, so LAYERWISE), "test-derived" adds a
 * weight-derived buffer to every attention (qkv) layer, recomputed once per update in the
 * deferred stage. They exist so the LAYERWISE path and the deferred stage are exercised
 * before the quantized formats land.
 */
#ifndef REFIT_FORMAT_H
#define REFIT_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/model.h"
#include "refit/slot.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A strided view (elements) over runtime storage, in model layout. */
typedef struct rf_view {
    void *data;
    rf_dtype_t dtype;
    int ndim;
    int64_t shape[RF_MAX_DIMS];
    int64_t stride[RF_MAX_DIMS];
    int runtime_slot; /* index of the runtime slot it covers (within the module) */
} rf_view_t;

typedef struct rf_format rf_format_t;

typedef struct rf_format_ops {
    const char *name;
    /* Runtime slots of module m from its model-layout slots; may add derived slots
     * (derived[i] true). Not collective. */
    rf_status_t (*runtime_slots)(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                 const rf_slot_shape_t *model, int nmodel, rf_slot_shape_t *rt,
                                 bool *derived, int *nrt_p, rf_err_t *err);
    /* DIRECT opt-in: post-processing of module m is the identity on this backend. */
    bool (*identity)(const rf_format_t *f, const rf_inventory_t *inv, int m);
    /* RUNTIME_VIEW: fill views[i] for every model-layout param i over the runtime slots
     * (non-mutating). Returns false to decline. NULL = always decline. */
    bool (*runtime_mapping)(const rf_format_t *f, const rf_inventory_t *inv, int m,
                            const rf_slot_shape_t *model, int nmodel, rf_slot_t *const *rt,
                            int nrt, rf_view_t *views);
    /* LAYERWISE: model-layout buffers (contiguous) -> runtime slots, written in place. */
    rf_status_t (*process_after_loading)(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                         const rf_slot_shape_t *model, void *const *model_bufs,
                                         int nmodel, rf_slot_t *const *rt, int nrt,
                                         rf_err_t *err);
    /* Verification: runtime slots -> model-layout buffers (the inverse of the above). */
    rf_status_t (*runtime_to_model)(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                    const rf_slot_shape_t *model, void *const *model_bufs,
                                    int nmodel, rf_slot_t *const *rt, int nrt, rf_err_t *err);
    /* Deferred stage: recompute derived slots of module m. NULL = none. */
    rf_status_t (*compute_derived)(rf_format_t *f, const rf_inventory_t *inv, int m,
                                   rf_slot_t *const *rt, int nrt, rf_err_t *err);
    /* True for an owner that only works on host storage (test-transpose): the planner refuses
     * it on device storage. */
    bool host_only;
} rf_format_ops_t;

/*
 * Memory (the GPU data path): accel NULL (or a host accelerator) means runtime slots and
 * LAYERWISE scratch are host memory, as always. A device accelerator means runtime slots
 * (rf_slot_t.sig.data) and the model_bufs process_after_loading receives (the planner's
 * scratch) are that accelerator's device memory, and the owner does its work with accel's
 * ops (copy, copy_rows) and its format kernels (rf_quant_ops_for(accel): fp8_to_fnuz,
 * wna16_repack, include/refit/quant_ops.h) on the accelerator's default stream;
 * runtime_to_model's model_bufs are HOST memory (verification reads on the host): the owner
 * copies device to host and returns after synchronizing. The host results are byte-identical
 * either way.
 */
struct rf_format {
    const rf_format_ops_t *ops; /* first, always */
    rf_quant_t quant;
    int backend;                /* rf_backend_t */
    uint64_t derived_runs;      /* deferred-stage calls (test-derived) */
    rf_accel_t *accel;          /* borrowed: where runtime storage lives (NULL: host) */
};

/* The format's device accelerator, or NULL when its storage is host memory. */
static inline rf_accel_t *rf_format_device(const rf_format_t *f)
{
    return f != NULL && f->accel != NULL && f->accel->ops->mem_type != RF_MEM_HOST ? f->accel
                                                                                   : NULL;
}

/* Owner helpers for device storage (formats/format_none.c), all on accel's default stream:
 * d2d copy of b bytes (model scratch -> runtime slot); d2h copy of b bytes followed by a
 * synchronization (runtime slot -> host model buffer). */
rf_status_t rf_format_dev_copy(rf_accel_t *accel, void *dst, const void *src, uint64_t b,
                               rf_copy_kind_t kind, const char *what, rf_err_t *err);
/* Last-two-dims transpose (batch, R, C) -> (batch, C, R) of es-byte elements of dtype dt on
 * device, through copy_rows (one strided row copy per batch matrix). */
rf_status_t rf_format_dev_transpose(rf_accel_t *accel, void *dst, const void *src, int64_t batch,
                                    int64_t R, int64_t C, rf_dtype_t dt, const char *what,
                                    rf_err_t *err);

/* DeepSeek's absorbed MLA matrices (formats/format_mla.c; vLLM MLACommonImpl
 * process_weights_after_loading), the derived slots the owners "none" and "fp8-block" add to
 * the kv_b_proj module of a deepseek_v3 model: W_UK_T (nh_p, P, Lkv) and W_UV (nh_p, Lkv, Dv)
 * in the model dtype, P = qk_nope_head_dim, Dv = v_head_dim, Lkv = kv_lora_rank, nh_p the
 * rank's heads. rf_mla_derived_slots appends both to rt (after the model-layout slots, derived
 * true; nothing for any other module). rf_mla_compute_derived recomputes them from the
 * module's loaded weight (fp8: dequantized with its weight_scale_inv) and counts
 * f->derived_runs; RF_OK doing nothing for other modules. Not collective. */
bool rf_mla_is_kv_b(const rf_inventory_t *inv, int m);
rf_status_t rf_mla_derived_slots(const rf_inventory_t *inv, int m, const rf_slot_shape_t *model,
                                 int nmodel, rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                 rf_err_t *err);
rf_status_t rf_mla_compute_derived(rf_format_t *f, const rf_inventory_t *inv, int m,
                                   rf_slot_t *const *rt, int nrt, rf_err_t *err);

/* Format owner by name ("none", "test-transpose", "test-derived"); NULL if unknown. */
const rf_format_ops_t *rf_format_lookup(const char *name);
/* Comma-separated list of known owner names, for --help. */
const char *rf_format_names(void);

/* Shared helper: contiguous row-major byte copy of a slot's model-layout bytes. */
uint64_t rf_slot_shape_bytes(const rf_slot_shape_t *s);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_FORMAT_H */
