/*
 * refit: a trainer's shards read from a checkpoint (rf_session_register_checkpoint,
 * include/refit/session.h; issue 16 item 2).
 *
 * The registration stands in for rf_session_register on a trainer rank: refit allocates one
 * buffer per tensor this rank would register (the expected set, runtime/session_setup.c) and
 * registers them itself, so the plan, the trainer's borrowed buffers and the update are the
 * public API's unchanged. What differs is the update's hooks: at its begin the checkpoint is
 * opened again and checked (local: a failure fails the begin agreement, nothing moves), after
 * GO rf_trainer_produce reads this rank's shard of every tensor into the buffers, as
 * refit-run's checkpoint producer does (collective reads per stage where HDF5 is parallel,
 * runtime/trainer.c). Reopening is what makes "each update re-reads it" hold for a trainer
 * that writes a new file to the same path between updates (a rename leaves an old handle on
 * the old inode).
 *
 * A quantized model's checkpoint is read as refit-run reads it: each quantized linear from its
 * quantized tensors as stored (an fp8 checkpoint) or from its unquantized weight in the model
 * dtype, quantized on the trainer (a bf16 checkpoint), the choice made per linear by the
 * checkpoint's headers (rf_manifest_quant_source); the manifest is then built from those
 * headers (trainer rank 0, rf_session_build), so its dtypes are the stored ones (a bf16 block
 * scale widened to fp32, an I32 weight_shape), and the buffers of the quantized linears are
 * refit's (runtime/session_quant.c), filled by rf_trainer_produce from the file.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/formats.h"
#include "refit/log.h"
#include "session_int.h"

/* A checkpoint error (e2, from the checkpoint's code) as this rank's: the path named once
 * (the checkpoint's own texts name the file or directory at fault, mostly). Local. */
static rf_status_t ckpt_err(const rf_session_t *s, rf_status_t st, const char *path,
                            const rf_err_t *e2, rf_err_t *err)
{
    if (strstr(e2->msg, path) != NULL)
        return rf_err_set(err, st, "trainer rank %d: %s", s->rank, e2->msg);
    return rf_err_set(err, st, "trainer rank %d: checkpoint %s: %s", s->rank, path, e2->msg);
}

/* The checkpoint at path opened, its aliases applied and checked against what this trainer
 * rank holds (its config, and every expected tensor's presence, dtype and shape). Local. */
static rf_status_t ckpt_open_checked(rf_session_t *s, const char *path, rf_ckpt_t **ck_p,
                                     rf_err_t *err)
{
    rf_ckpt_t *ck = NULL;
    rf_err_t e2;
    rf_err_clear(&e2);
    *ck_p = NULL;
    rf_status_t st = rf_ckpt_open(path, &ck, &e2);
    if (st != RF_OK) /* rf_ckpt_open's text names the file or directory at fault */
        return ckpt_err(s, st, path, &e2, err);
    /* OPT's published decoder.* names (DESIGN.md 4), as the job's setup renames them */
    const char *from[4], *to[4];
    int na = rf_family_aliases(s->inv.cfg.family, from, to, 4);
    for (int a = 0; a < na && st == RF_OK; a++)
        st = rf_ckpt_rename_prefix(ck, from[a], to[a], NULL, &e2);
    if (st == RF_OK)
        st = rf_ckpt_check_config(ck, path, &s->cfg, s->topo.quantization, s->topo.group_size,
                                  &e2);
    if (st != RF_OK) {
        rf_ckpt_close(ck);
        return ckpt_err(s, st, path, &e2, err);
    }
    for (int i = 0; i < s->nex; i++) {
        const rf_tensor_t *t = &s->inv.tensors[s->ex[i].index];
        const rf_st_entry_t *se = rf_ckpt_find(ck, t->name);
        if (s->ex[i].logical) {
            /* a quantized linear: its quantized tensors as stored, or the unquantized weight
             * in the model dtype that the trainer quantizes (runtime/manifest.c's rule) */
            rf_err_t why;
            rf_err_clear(&why);
            if (rf_manifest_quant_source(&s->inv, t, ck, &why) == RF_QSOURCE_INVALID) {
                rf_ckpt_close(ck);
                return rf_err_set(err, why.status, "trainer rank %d: checkpoint %s: %s",
                                  s->rank, path, why.msg);
            }
            continue;
        }
        if (se == NULL)
            st = rf_err_set(err, RF_ERR_MISSING, "trainer rank %d: checkpoint %s (%s) has no "
                            "tensor %s of the topology's model (%s, %s)", s->rank, path,
                            rf_ckpt_format(ck), t->name, s->cfg.model_type,
                            s->cfg.architecture);
        else if (se->dtype != t->dtype || !rf_manifest_shape_matches(t, se->ndim, se->shape))
            st = rf_err_set(err, RF_ERR_MISMATCH, "trainer rank %d: checkpoint %s: tensor %s is "
                            "%s %s, the topology's model (%s) has %s of %d dims", s->rank,
                            path, t->name, rf_dtype_name(se->dtype),
                            se->dtype != t->dtype ? "(another dtype)" : "of another shape",
                            s->cfg.model_type, rf_dtype_name(t->dtype), t->ndim);
        if (st != RF_OK) {
            rf_ckpt_close(ck);
            return st;
        }
    }
    *ck_p = ck;
    return RF_OK;
}

/* The buffers refit registers for this rank's shards: one arena, 256-byte aligned slots. */
static rf_status_t ckpt_register_buffers(rf_session_t *s, rf_err_t *err)
{
    uint64_t total = 0, *off = malloc(((size_t)s->nex + 1) * sizeof(uint64_t));
    if (off == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory", s->rank);
    for (int i = 0; i < s->nex; i++) {
        off[i] = total;
        total += (rf_slot_shape_bytes(&s->ex[i].want) + 255) & ~(uint64_t)255;
    }
    s->ck_arena = calloc(1, (size_t)total + 256);
    if (s->ck_arena == NULL) {
        free(off);
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory for the %" PRIu64
                          "-byte shard buffers of checkpoint %s", s->rank, total, s->ck_path);
    }
    for (int i = 0; i < s->nex; i++) {
        sess_tensor_t *e = &s->ex[i];
        rf_signature_t *g = &e->sig;
        memset(g, 0, sizeof(*g));
        g->ndim = e->want.ndim;
        g->dtype = e->want.dtype;
        g->device = RF_DEVICE_HOST;
        int64_t stride = 1;
        for (int d = e->want.ndim - 1; d >= 0; d--) {
            g->shape[d] = e->want.shape[d];
            g->stride[d] = stride;
            stride *= e->want.shape[d];
        }
        g->data = s->ck_arena + off[i];
        g->storage_base = g->data;
        g->storage_bytes = rf_signature_bytes(g);
        e->registered = true;
    }
    s->nreg = s->nex;
    free(off);
    return RF_OK;
}

static rf_status_t register_checkpoint(rf_session_t *s, const char *path, rf_err_t *err)
{
    if (path == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "rank %d (%s): rf_session_register_checkpoint: "
                          "NULL path", s->rank, rf_session_role_name(s));
    if (rf_session_is_rollout(s))
        return rf_err_set(err, RF_ERR_STATE, "rank %d (rollout): rf_session_register_checkpoint"
                          "(%s): a checkpoint is a trainer rank's source (rollout ranks register "
                          "the engine's tensors)", s->rank, path);
    if (s->planned)
        return rf_err_set(err, RF_ERR_STATE, "trainer rank %d: rf_session_register_checkpoint"
                          "(%s) after rf_session_plan (the checkpoint is registered before the "
                          "plan, and read again at every update)", s->rank, path);
    if (rf_session_mpi_device_trainer(s))
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "trainer rank %d: rf_session_register_"
                          "checkpoint(%s): trainer.gpus puts this rank's tensors on CUDA device "
                          "%d, and refit reads a registered checkpoint into host buffers: "
                          "register the CUDA tensors, or run the trainer without trainer.gpus",
                          s->rank, path, s->accel->device);
    if (s->ck_path != NULL || s->nreg > 0)
        return rf_err_set(err, RF_ERR_INVALID, "trainer rank %d: rf_session_register_checkpoint"
                          "(%s): %s registered on this rank already", s->rank, path,
                          s->ck_path != NULL ? "a checkpoint is" : "tensors are");
    rf_ckpt_t *ck;
    RF_CHECK(ckpt_open_checked(s, path, &ck, err));
    s->ck_path = strdup(path);
    if (s->ck_path == NULL) {
        rf_ckpt_close(ck);
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory", s->rank);
    }
    s->src_ck = ck;
    rf_status_t st = ckpt_register_buffers(s, err);
    if (st != RF_OK)
        rf_session_ckpt_free(s);
    return st;
}

rf_status_t rf_session_register_checkpoint(rf_session_t *s, const char *path)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    rf_err_clear(&s->last);
    if (s->broken)
        return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: the session's plan failed past the "
                          "registration check: destroy it", s->rank);
    rf_status_t st = register_checkpoint(s, path, &s->last);
    if (st != RF_OK && s->reg_err.status == RF_OK) {
        rf_err_set(&s->reg_err, st, "%s", s->last.msg); /* the next collective carries it */
        s->reg_err_call = false;                        /* until then */
    }
    return st;
}

rf_status_t rf_session_ckpt_agree(rf_session_t *s, rf_err_t *err)
{
    int mine = !rf_session_is_rollout(s) && s->ck_path != NULL, n = 0;
    RF_CHECK(rf_session_allreduce(s, &mine, &n, 1, MPI_INT, MPI_SUM, "the trainers' sources",
                                  err));
    s->ck_trainers = n > 0 && n == s->T;
    if (n == 0 || n == s->T)
        return RF_OK;
    /* the same numbers everywhere: the same text on every rank */
    return rf_err_set(err, RF_ERR_INVALID, "%d of %d trainer rank(s) registered a checkpoint "
                      "(rf_session_register_checkpoint), the others tensors: every trainer rank "
                      "registers a checkpoint or none does (a stage's ranks read it together)",
                      n, s->T);
}

/* Update begin (local): the checkpoint opened again and checked, then the trainer's own
 * source check against the manifest (what refit-run's begin hook runs). */
static rf_status_t ckpt_begin(void *ctx, rf_err_t *err)
{
    rf_session_t *s = ctx;
    rf_ckpt_t *ck;
    RF_CHECK(ckpt_open_checked(s, s->ck_path, &ck, err));
    rf_ckpt_close(s->src_ck);
    s->src_ck = ck;
    return rf_trainer_check_source(&s->tr, s->src_ck, err);
}

/* After GO: this rank's shards read into the registered buffers (collective over the
 * stage's trainer ranks where its reads are). */
static rf_status_t ckpt_produce(void *ctx, rf_err_t *err)
{
    rf_session_t *s = ctx;
    return rf_trainer_produce(&s->tr, s->seq, s->src_ck, err);
}

const rf_session_hooks_t *rf_session_ckpt_hooks(rf_session_t *s, rf_session_hooks_t *h)
{
    if (rf_session_is_rollout(s) || s->ck_path == NULL)
        return NULL;
    memset(h, 0, sizeof(*h));
    h->ctx = s;
    h->begin = ckpt_begin;
    h->produce = ckpt_produce;
    h->fault = RF_XFER_FAULT_NONE;
    h->gather_skip_seq = -1;
    return h;
}

void rf_session_ckpt_free(rf_session_t *s)
{
    if (s->src_ck != NULL)
        rf_ckpt_close(s->src_ck);
    s->src_ck = NULL;
    free(s->ck_arena);
    s->ck_arena = NULL;
    free(s->ck_path);
    s->ck_path = NULL;
}
