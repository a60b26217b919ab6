/*
 * refit: quantized models through the session API (include/refit/session.h, docs/api.md;
 * issue 15).
 *
 * A trainer holds its weights unquantized, as refit-run's trainer does (DESIGN.md section 7):
 * for every quantized linear it registers its shard of the linear's unquantized weight
 * (`<prefix>.weight` in the model dtype, or an F32 master of it), never the quantized tensors,
 * which refit makes: at each update, after GO, the trainer-side quantizer (runtime/trainer.c,
 * rf_trainer_produce_given: the host quantizers of formats/quant_host.c) writes this rank's
 * slices of the fp8 weight and its scales (or wna16's weight_packed, weight_scale and
 * weight_shape) into buffers refit owns, from which the pack reads them like any shard. An F32
 * master is first rounded to nearest even into the model dtype, then quantized: the engine's
 * bytes are quantize(checkpoint tensor) exactly, what refit-run sends for that checkpoint. The
 * linear's other tensors (a bias) and every unquantized tensor are read in place as before.
 *
 * A trainer with CUDA tensors (trainer.gpus over mpi, colocated ipc) registers CUDA shards:
 * the buffers refit owns are then device memory of its GPU and the quantizers the format
 * kernels there (rf_trainer_produce_given_device, formats/quant_cuda.cu: bit-exact with the
 * host ones), so the weights never leave the GPU to be quantized; the packs read them as they
 * read the registered tensors (device-to-host copies over mpi). On colocated ipc the pieces of
 * the quantized tensors are staged (ipc_share_table leaves them out: refit's buffers are not
 * among the caller's shared allocations), the stage sender packing them into the staging
 * slots its pair reads on the GPU; the unquantized ones are read in place as before.
 *
 * Rollout ranks register the format owner's runtime tensors (fmt.ops->runtime_slots under
 * rollout.layout vllm), as for an unquantized model: nothing here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/formats.h"
#include "session_int.h"

bool rf_session_quant_refit_owns(const rf_session_t *s, const rf_tensor_t *t)
{
    return s->topo.quantization != RF_QUANT_NONE &&
           rf_manifest_trainer_quantizes(&s->inv, t, NULL);
}

rf_status_t rf_session_quant_expect(const rf_session_t *s, const rf_tensor_t *t,
                                    const rf_region_t *reg, char *name, size_t cap,
                                    rf_slot_shape_t *w, rf_err_t *err)
{
    rf_quant_t q = s->inv.modules[t->module].quant;
    bool wna16 = q == RF_QUANT_WNA16;
    const char *dot = strrchr(t->name, '.');
    int plen = dot != NULL ? (int)(dot - t->name) : (int)strlen(t->name);
    snprintf(name, cap, "%.*s.weight", plen, t->name);
    memset(w, 0, sizeof(*w));
    w->dtype = s->inv.cfg.dtype;
    w->ndim = 2;
    w->shape[0] = reg->r1 - reg->r0;
    w->shape[1] = (reg->c1 - reg->c0) * (wna16 ? 8 : 1);
    if (t->ndim != 2)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "trainer rank %d: %s: a %d-D quantized "
                          "weight (the session API quantizes 2-D linears)", s->rank, t->name,
                          t->ndim);
    /* fp8-tensor / fp8-channel scales read the whole tensor / whole rows: a shard without
     * them would need the other ranks' amax, which this version does not exchange */
    bool per_row = q == RF_QUANT_FP8_CHANNEL;
    if ((q == RF_QUANT_FP8_TENSOR || per_row) &&
        (reg->c0 != 0 || reg->c1 != t->shape[1] ||
         (!per_row && (reg->r0 != 0 || reg->r1 != t->shape[0]))))
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "trainer rank %d: %s: quantization %s: this rank's shard (rows [%lld, "
                          "%lld), columns [%lld, %lld) of [%lld, %lld]) lacks the %s its scale "
                          "is computed over; the session API quantizes from one rank's shard "
                          "only in this version (trainer.tp 1)",
                          s->rank, name, rf_quant_name(q), (long long)reg->r0,
                          (long long)reg->r1, (long long)reg->c0, (long long)reg->c1,
                          (long long)t->shape[0], (long long)t->shape[1],
                          per_row ? "whole rows" : "whole tensor");
    return RF_OK;
}

rf_status_t rf_session_quant_borrow(rf_session_t *s, rf_err_t *err)
{
    uint64_t total = 0, *off = malloc(((size_t)s->man.n + 1) * sizeof(uint64_t));
    if (off == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory", s->rank);
    for (int i = 0; i < s->man.n; i++) {
        const rf_tensor_t *t = &s->inv.tensors[s->man.entries[i].tensor];
        off[i] = UINT64_MAX;
        if (!s->tr.has[i] || !rf_session_quant_refit_owns(s, t))
            continue;
        const rf_region_t *r = &s->tr.reg[i];
        off[i] = total;
        total += ((uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0) *
                      rf_dtype_size(s->man.entries[i].dtype) +
                  255) &
                 ~(uint64_t)255;
    }
    /* CUDA trainer tensors (trainer.gpus over mpi, colocated ipc): the quantizers run on the
     * trainer's GPU, into device buffers the packs read like the registered tensors */
    bool dev = (rf_session_mpi_device_trainer(s) || rf_session_ipc_trainer(s)) &&
               s->ck_path == NULL; /* a registered checkpoint is read into host buffers */
    if (total > 0 && dev) {
        void *p = NULL;
        rf_status_t as = s->accel->ops->alloc(s->accel, (size_t)total, &p);
        if (as != RF_OK) {
            free(off);
            return rf_err_set(err, as, "trainer rank %d: no %llu bytes on %s device %d for its "
                              "quantized shards", s->rank, (unsigned long long)total,
                              s->accel->ops->name, s->accel->device);
        }
        s->q_arena = p;
        s->q_dev = true;
    } else if (total > 0) {
        s->q_arena = calloc(1, (size_t)total);
        if (s->q_arena == NULL) {
            free(off);
            return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: no memory for its %llu "
                              "bytes of quantized shards", s->rank, (unsigned long long)total);
        }
    }
    for (int i = 0; i < s->man.n; i++)
        if (off[i] != UINT64_MAX)
            s->tr.buf[i] = s->q_arena + off[i];
    free(off);
    return RF_OK;
}

/* After GO: this rank's quantized slices from the registered unquantized shards, wherever
 * they are now (a tensor registered again between updates is read at its new address). */
static rf_status_t quant_produce(void *ctx, rf_err_t *err)
{
    rf_session_t *s = ctx;
    const void **logical = calloc((size_t)s->man.n + 1, sizeof(void *));
    rf_dtype_t *dt = calloc((size_t)s->man.n + 1, sizeof(rf_dtype_t));
    rf_status_t st = RF_OK;
    if (logical == NULL || dt == NULL)
        st = rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory", s->rank);
    for (int k = 0; k < s->nex && st == RF_OK; k++) {
        const sess_tensor_t *e = &s->ex[k];
        if (!e->logical)
            continue;
        logical[e->entry] = e->sig.data;
        dt[e->entry] = e->sig.dtype;
    }
    if (st == RF_OK && s->q_dev) /* CUDA shards: the device quantizers */
        st = rf_trainer_produce_given_device(&s->tr, logical, dt, s->accel, err);
    else if (st == RF_OK)
        st = rf_trainer_produce_given(&s->tr, logical, dt, err);
    free(logical);
    free(dt);
    return st;
}

const rf_session_hooks_t *rf_session_quant_hooks(rf_session_t *s, rf_session_hooks_t *h)
{
    if (rf_session_is_rollout(s) || s->topo.quantization == RF_QUANT_NONE || s->ck_path != NULL)
        return NULL;
    memset(h, 0, sizeof(*h));
    h->ctx = s;
    h->produce = quant_produce;
    h->fault = RF_XFER_FAULT_NONE;
    h->gather_skip_seq = -1;
    return h;
}

void rf_session_quant_free(rf_session_t *s)
{
    if (s->q_dev && s->q_arena != NULL)
        s->accel->ops->free(s->accel, s->q_arena);
    else
        free(s->q_arena);
    s->q_arena = NULL;
    s->q_dev = false;
}
