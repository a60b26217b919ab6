/*
 * refit: the job's oracle (DESIGN.md sections 2 and 12), run on rollout ranks after the gate
 * committed an update; it shares no code with the fast path. The scalar reference loader
 * checks every slot against the expected checkpoint tensors (the generator's values, the
 * reference quantizer, or the checkpoint as stored) and every quantized module dequantized;
 * with --reference, checkpoint updates are reassembled from the engine's storage and hashed,
 * and rank 0 accounts for every reference entry (job_ref_account); the diff rule requires 99% of
 * the elements written to change (90% of quantized ones); --cold-check replays the update's
 * chunks into fresh storage. Also the XXH3 storage digest (--storage-digest, and "storage
 * unchanged" after a failed update).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "refit/generator.h"
#include "refit/hashes.h"
#include "refit/loader.h"
#include "refit/quant.h"
#include "refit/verify.h"
#include "job_int.h"

/* XXH3 over every slot's bytes (rollout): proves a failed update wrote nothing. */
uint64_t job_storage_hash(const job_t *j)
{
    XXH3_state_t *h = XXH3_createState();
    bool dev = rf_storage_on_device(&j->s->st);
    char *buf = NULL;
    size_t cap = 0;
    uint64_t v = 0;
    if (h == NULL)
        return 0;
    XXH3_64bits_reset(h);
    for (int s = 0; s < j->s->st.nslots; s++) {
        const rf_slot_t *sl = &j->s->st.slots[s];
        size_t b = (size_t)rf_signature_bytes(&sl->sig);
        const void *bytes = sl->sig.data;
        if (dev) { /* device slots: hash a host copy (d2h) */
            if (b > cap) {
                char *g = realloc(buf, b);
                if (g == NULL)
                    break;
                buf = g;
                cap = b;
            }
            if (rf_storage_read(&j->s->st, buf, sl->sig.data, b, NULL) != RF_OK)
                break;
            bytes = buf;
        }
        XXH3_64bits_update(h, bytes, b);
    }
    v = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    free(buf);
    return v;
}

/* Every slot's bytes before the update, outside the timed path, for the diff rule. */
void job_snapshot(job_t *j)
{
    for (int s = 0; s < j->s->st.nslots; s++) {
        rf_slot_t *sl = &j->s->st.slots[s];
        uint64_t b = rf_signature_bytes(&sl->sig);
        if (sl->derived)
            continue;
        if (j->snap[s] == NULL)
            j->snap[s] = malloc(b + 1);
        if (j->snap[s] != NULL &&
            rf_storage_read(&j->s->st, j->snap[s], sl->sig.data, (size_t)b, NULL) != RF_OK) {
            free(j->snap[s]); /* no snapshot: the diff rule skips the slot */
            j->snap[s] = NULL;
        }
    }
}

/* DESIGN.md section 2: elements written that differ from the previous update (whole values of
 * the slot's dtype; vocab padding rows excluded; padding is zero both times). */
static void diff_rule(job_t *j)
{
    uint64_t total[2] = {0, 0}, changed[2] = {0, 0};
    for (int s = 0; s < j->s->st.nslots; s++) {
        rf_slot_t *sl = &j->s->st.slots[s];
        if (sl->derived || j->snap[s] == NULL)
            continue;
        rf_quant_t q = j->s->inv.modules[sl->module].quant;
        int cls = q != RF_QUANT_NONE; /* quantized tensors: 90% (DESIGN.md section 2) */
        /* packed int4 compares per byte */
        size_t es = q == RF_QUANT_WNA16 && sl->sig.dtype == RF_DTYPE_I32
                        ? 1
                        : rf_dtype_size(sl->sig.dtype);
        uint64_t n = rf_signature_bytes(&sl->sig) / es, pad = 0;
        const char *a = sl->sig.data, *b = j->snap[s];
        char *host = NULL;
        if (rf_storage_on_device(&j->s->st)) { /* compare a host copy of the device slot */
            size_t nb = (size_t)rf_signature_bytes(&sl->sig);
            host = malloc(nb + 1);
            if (host == NULL || rf_storage_read(&j->s->st, host, sl->sig.data, nb, NULL) != RF_OK) {
                free(host);
                continue;
            }
            a = host;
        }
        if (j->s->inv.modules[sl->module].kind == RF_MOD_VOCAB) {
            /* the padding rows of either layout (vllm: Vp / T, hf: ceil(V / T) per rank) */
            int64_t first, cols;
            /* rows x the module's width (OPT's word_embed_proj_dim may differ from hidden) */
            pad = rf_load_vocab_pad_rows(&j->s->inv, &j->s->me.rc, sl->module, &first, &cols);
            pad *= (uint64_t)cols;
        }
        uint64_t same = 0;
        for (uint64_t i = 0; i < n; i++)
            same += memcmp(a + i * es, b + i * es, es) == 0;
        free(host);
        total[cls] += n - pad;
        changed[cls] += n - same;
    }
    j->js.diff_elems = total[0];
    j->js.diff_changed = changed[0];
    j->js.qdiff_elems = total[1];
    j->js.qdiff_changed = changed[1];
}

/*
 * Expected checkpoint tensors for the oracle, per module, computed without the fast path:
 * the generator's values (unquantized), the reference quantizer applied to the generator's or
 * a bf16 checkpoint's logical weights (DESIGN.md section 12), or the checkpoint's bytes as
 * stored (in the header's dtype).
 */
typedef struct expect_ctx {
    job_t *j;
    uint64_t step;
    bool from_ckpt;
    char **buf;        /* per inventory tensor (owned; cleared per module) */
    rf_dtype_t *dt;    /* the dtype of buf[t] */
    int *used;         /* tensors with a buffer, to clear */
    int nused;
    void **slots;      /* the current module's model-layout slot bytes (borrowed) */
    rf_err_t *err;
} expect_ctx_t;

static void expect_keep(expect_ctx_t *c, int t, char *b, rf_dtype_t dt)
{
    c->buf[t] = b;
    c->dt[t] = dt;
    c->used[c->nused++] = t;
}

static void expect_clear(expect_ctx_t *c)
{
    for (int i = 0; i < c->nused; i++) {
        free(c->buf[c->used[i]]);
        c->buf[c->used[i]] = NULL;
    }
    c->nused = 0;
}

/* The reference quantizer on the logical weight of the linear holding quantized tensor t. */
static bool expect_quantized(expect_ctx_t *c, const rf_tensor_t *t)
{
    job_t *j = c->j;
    const rf_module_t *mod = &j->s->inv.modules[t->module];
    bool wna16 = mod->quant == RF_QUANT_WNA16;
    bool rowq = mod->quant == RF_QUANT_FP8_TENSOR || mod->quant == RF_QUANT_FP8_CHANNEL;
    char prefix[RF_NAME_MAX - 32], name[RF_NAME_MAX];
    const char *dot = strrchr(t->name, '.');
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(dot - t->name), t->name);
    snprintf(name, sizeof(name), "%s.%s", prefix, wna16 ? "weight_packed" : "weight");
    int qi = rf_inventory_find(&j->s->inv, name);
    snprintf(name, sizeof(name), "%s.%s", prefix,
             wna16 || rowq ? "weight_scale" : "weight_scale_inv");
    int si = rf_inventory_find(&j->s->inv, name);
    if (qi < 0 || si < 0)
        return false;
    const rf_tensor_t *qt = &j->s->inv.tensors[qi], *sc = &j->s->inv.tensors[si];
    int64_t N = qt->shape[0], K = qt->shape[1] * (wna16 ? 8 : 1);
    rf_dtype_t dt = j->s->inv.cfg.dtype;
    size_t es = rf_dtype_size(dt);
    char *logical = malloc((size_t)N * (size_t)K * es + 1);
    char *q = malloc(qt->nbytes + 1), *scale = malloc(sc->nbytes + 1);
    rf_status_t st = (logical && q && scale) ? RF_OK : RF_ERR_NOMEM;
    snprintf(name, sizeof(name), "%s.weight", prefix);
    if (st == RF_OK && !c->from_ckpt) {
        rf_tensor_t lt = *qt;
        snprintf(lt.name, sizeof(lt.name), "%s", name);
        lt.dtype = dt;
        lt.shape[1] = K;
        lt.numel = (uint64_t)N * (uint64_t)K;
        lt.nbytes = lt.numel * es;
        st = rf_gen_fill(&lt, c->step, 0, (uint64_t)N, 0, (uint64_t)K, logical, (size_t)K * es);
    } else if (st == RF_OK) {
        const rf_st_entry_t *e = rf_ckpt_find(j->s->ck, name);
        st = e == NULL ? RF_ERR_MISSING
                       : rf_ckpt_read(j->s->ck, e, 0, (uint64_t)N, 0, (uint64_t)K * es, logical,
                                      (size_t)K * es, c->err);
    }
    if (st == RF_OK && rowq) /* the whole tensor at once: what every trainer slice matches */
        st = rf_fp8_quantize_rows(logical, dt, N, K, K, mod->quant == RF_QUANT_FP8_CHANNEL,
                                  (uint8_t *)q, K, (float *)(void *)scale);
    else if (st == RF_OK)
        st = wna16 ? rf_wna16_quantize(logical, dt, N, K, K, j->s->inv.group_size, (uint32_t *)q,
                                       K / 8, scale, sc->dtype, K / j->s->inv.group_size)
                   : rf_fp8_quantize(logical, dt, N, K, K, (uint8_t *)q, K, scale, sc->dtype,
                                     sc->shape[1], RF_FP8_PLAIN);
    free(logical);
    if (st != RF_OK) {
        free(q);
        free(scale);
        return false;
    }
    expect_keep(c, qi, q, qt->dtype);
    expect_keep(c, si, scale, sc->dtype);
    return true;
}

static const void *expect_bytes(void *ctx, int tensor)
{
    expect_ctx_t *c = ctx;
    job_t *j = c->j;
    const rf_tensor_t *t = &j->s->inv.tensors[tensor];
    if (c->buf[tensor] != NULL)
        return c->buf[tensor];
    if (t->param == RF_PARAM_WEIGHT_SHAPE)
        return NULL; /* never stored, never verified through a slot */
    if (j->s->inv.modules[t->module].quant != RF_QUANT_NONE && t->param != RF_PARAM_BIAS &&
        (!c->from_ckpt || rf_manifest_trainer_quantizes(&j->s->inv, t, j->s->ck)))
        return expect_quantized(c, t) ? c->buf[tensor] : NULL;
    if (!c->from_ckpt) {
        char *b = malloc(t->nbytes + 1);
        uint64_t rows = rf_tensor_rows(t);
        if (b == NULL || rf_gen_fill(t, c->step, 0, rows, 0, rows ? t->numel / rows : 0, b,
                                     rf_tensor_row_bytes(t)) != RF_OK) {
            free(b);
            return NULL;
        }
        expect_keep(c, tensor, b, t->dtype);
        return b;
    }
    const rf_st_entry_t *e = rf_ckpt_find(j->s->ck, t->name);
    if (e == NULL)
        return NULL;
    char *b = malloc(e->nbytes + 1);
    uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
    if (b == NULL || rf_ckpt_read(j->s->ck, e, 0, rows, 0, rb, b, rb, c->err) != RF_OK) {
        free(b);
        return NULL;
    }
    expect_keep(c, tensor, b, e->dtype);
    return b;
}

/* The dtype expect_bytes hands tensor out in, whether or not it has been fetched yet (the
 * oracle may ask first): the header's for tensors compared as stored, else the inventory's. */
static rf_dtype_t expect_dtype(void *ctx, int tensor)
{
    expect_ctx_t *c = ctx;
    job_t *j = c->j;
    const rf_tensor_t *t = &j->s->inv.tensors[tensor];
    if (c->buf[tensor] != NULL)
        return c->dt[tensor];
    if (!c->from_ckpt || t->param == RF_PARAM_WEIGHT_SHAPE ||
        rf_manifest_trainer_quantizes(&j->s->inv, t, j->s->ck))
        return RF_DTYPE_INVALID;
    const rf_st_entry_t *e = rf_ckpt_find(j->s->ck, t->name);
    return e != NULL ? e->dtype : RF_DTYPE_INVALID;
}

static const void *expect_slot_bytes(void *ctx, int module, int slot)
{
    (void)module;
    return ((expect_ctx_t *)ctx)->slots[slot];
}

/* Scalar reference loader over every slot of this rank, plus the dequantization oracle for
 * every quantized module (dequant(runtime) == dequant(checkpoint), -0.0 == +0.0). */
static rf_status_t verify_scalar(job_t *j, uint64_t step, bool from_ckpt, rf_err_t *err)
{
    expect_ctx_t c = {.j = j, .step = step, .from_ckpt = from_ckpt, .err = err};
    rf_verify_opts_t vo = {0, expect_dtype};
    rf_status_t st = RF_OK;
    c.buf = calloc((size_t)j->s->inv.ntensors + 1, sizeof(char *));
    c.dt = calloc((size_t)j->s->inv.ntensors + 1, sizeof(rf_dtype_t));
    c.used = calloc((size_t)j->s->inv.ntensors + 1, sizeof(int));
    if (!c.buf || !c.dt || !c.used) {
        free(c.buf);
        free(c.dt);
        free(c.used);
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    }
    if (strcmp(j->s->fmt.ops->name, "fp8-block-fnuz") == 0)
        vo.flags |= RF_VERIFY_FP8_FNUZ_ZERO;
    if (strcmp(j->s->fmt.ops->name, "fp8-tensor") == 0)
        vo.flags |= RF_VERIFY_FP8_REQUANT_MAX;
    for (int m = 0; m < j->s->plan.nlayers && st == RF_OK; m++) {
        rf_layer_t *L = &j->s->plan.layers[m];
        bool quant = j->s->inv.modules[m].quant != RF_QUANT_NONE;
        void *bufs[RF_MODULE_MAX_SLOTS] = {0};
        for (int s = 0; s < L->nmodel; s++)
            bufs[s] = malloc(rf_slot_shape_bytes(&L->model[s]) + 1);
        c.slots = bufs;
        st = rf_plan_read_model(&j->s->plan, m, bufs, err);
        for (int s = 0; s < L->nmodel && st == RF_OK; s++) {
            uint64_t mism = 0;
            size_t nb = rf_slot_shape_bytes(&L->model[s]);
            if (from_ckpt || quant)
                st = rf_verify_slot_ex(&j->s->inv, m, s, &j->s->me.rc, bufs[s], nb, expect_bytes,
                                       &c, &vo, &mism, err);
            else
                st = rf_verify_slot_generator(&j->s->inv, m, s, &j->s->me.rc, bufs[s], nb, step,
                                              &mism, err);
            j->js.verify_elems += nb / rf_dtype_size(L->model[s].dtype);
            j->js.verify_mismatch += mism;
            if (st == RF_OK && mism > 0)
                st = rf_err_set(err, RF_ERR_VERIFY, "rank %d: %" PRIu64 " mismatches in %s.%s",
                                j->rank, mism, j->s->inv.modules[m].name, L->model[s].name);
            for (int k = 0; k < j->s->inv.modules[m].ntensors; k++) {
                const rf_tensor_t *t = &j->s->inv.tensors[j->s->inv.modules[m].tensors[k]];
                if ((t->slot == s || t->slot < 0) &&
                    (t->expert < 0 || rf_moe_local_index(j->s->inv.cfg.num_experts, &j->s->me.rc,
                                                         t->expert) >= 0))
                    j->verified[j->s->inv.modules[m].tensors[k]] = 1;
            }
        }
        if (st == RF_OK && quant) {
            uint64_t mism = 0;
            st = rf_verify_dequant_module(&j->s->inv, m, &j->s->me.rc, expect_slot_bytes,
                                          expect_bytes, &c, &vo, &mism, err);
            j->js.dequant_checked++;
            j->js.verify_mismatch += mism;
        }
        expect_clear(&c);
        for (int s = 0; s < L->nmodel; s++)
            free(bufs[s]);
    }
    free(c.buf);
    free(c.dt);
    free(c.used);
    return st;
}

typedef struct reasm_ctx {
    job_t *j;
    void **bufs; /* per storage slot: model-layout bytes */
    rf_status_t st;
    rf_err_t *err;
    uint64_t checked;
    uint64_t fnuz; /* tensors compared under the fnuz transform */
    uint64_t requant; /* tensors compared under the fp8-tensor requantization */
} reasm_ctx_t;

static const void *reasm_slot_bytes(void *ctx, int module, int slot)
{
    reasm_ctx_t *c = ctx;
    int first = c->j->s->st.module_first[module];
    return c->bufs[first + slot];
}

/* The checkpoint header's dtype of tensor t (reassembly gives the file's bytes back: fp32
 * runtime scales narrow exactly to the bf16 / f16 they were widened from). A linear the
 * trainer quantized has no file bytes to give back: its runtime dtype (reasm_done says so). */
static rf_dtype_t reasm_target(void *ctx, int tensor)
{
    reasm_ctx_t *c = ctx;
    const rf_tensor_t *t = &c->j->s->inv.tensors[tensor];
    if (rf_manifest_trainer_quantizes(&c->j->s->inv, t, c->j->s->ck))
        return RF_DTYPE_INVALID;
    const rf_st_entry_t *e = rf_ckpt_find(c->j->s->ck, t->name);
    return e != NULL ? e->dtype : RF_DTYPE_INVALID;
}

/* A tensor the fp8-tensor owner requantizes (docs/formats.md): the e4m3 weight or the scale of
 * a shard of a fused module (qkv_proj, gate_up_proj). */
static bool reasm_requantized(const job_t *j, const rf_tensor_t *t)
{
    const rf_module_t *m = &j->s->inv.modules[t->module];
    return strcmp(j->s->fmt.ops->name, "fp8-tensor") == 0 && m->quant == RF_QUANT_FP8_TENSOR &&
           m->nlinears > 1 &&
           (t->param == RF_PARAM_TENSOR_SCALE ||
            (t->param == RF_PARAM_WEIGHT && t->dtype == RF_DTYPE_F8_E4M3));
}

/* The whole checkpoint tensor `name` as stored (owned; *se_p its header entry), or NULL. */
static char *reasm_read_file(job_t *j, const char *name, const rf_st_entry_t **se_p,
                             rf_err_t *err)
{
    const rf_st_entry_t *se = rf_ckpt_find(j->s->ck, name);
    char *f = se ? malloc(se->nbytes + 1) : NULL;
    uint64_t rows = se ? rf_st_entry_rows(se) : 0, rb = se ? rf_st_entry_row_bytes(se) : 0;
    if (f == NULL || rf_ckpt_read(j->s->ck, se, 0, rows, 0, rb, f, rb, err) != RF_OK) {
        free(f);
        return NULL;
    }
    *se_p = se;
    return f;
}

/*
 * The file's bytes of requantized tensor t checked against the reference, then turned into
 * what the fp8-tensor owner holds for them: each shard's weight requantized from its own scale
 * to the module's max scale (rf_ref_fp8_requant, the oracle's own rule), each scale replaced by
 * that max in the file's dtype (exact: the max is one of the file's values). Owned, or NULL.
 */
static char *reasm_requant_expect(job_t *j, const rf_tensor_t *t, const rf_ref_entry_t *e,
                                  size_t *n_p, rf_err_t *err)
{
    const rf_module_t *m = &j->s->inv.modules[t->module];
    const rf_st_entry_t *se;
    float smax = 0.0f, own = 0.0f;
    uint8_t d[32];
    char *f = reasm_read_file(j, t->name, &se, err);
    if (f == NULL)
        return NULL;
    rf_sha256(f, se->nbytes, d);
    if (memcmp(d, e->sha256, 32) != 0) {
        free(f);
        return NULL;
    }
    size_t pl = strlen(t->name) - (t->param == RF_PARAM_WEIGHT ? strlen(".weight")
                                                               : strlen(".weight_scale"));
    for (int k = 0; k < m->ntensors; k++) {
        const rf_tensor_t *st = &j->s->inv.tensors[m->tensors[k]];
        const rf_st_entry_t *ss;
        if (st->param != RF_PARAM_TENSOR_SCALE)
            continue;
        char *sb = reasm_read_file(j, st->name, &ss, err);
        if (sb == NULL) {
            free(f);
            return NULL;
        }
        float v = rf_load_f32(sb, ss->dtype, 0);
        free(sb);
        smax = v > smax ? v : smax;
        if (strncmp(st->name, t->name, pl) == 0 && strcmp(st->name + pl, ".weight_scale") == 0)
            own = v;
    }
    if (t->param == RF_PARAM_WEIGHT) {
        for (uint64_t i = 0; i < se->nbytes; i++)
            f[i] = (char)rf_ref_fp8_requant((uint8_t)f[i], own, smax);
    } else if (se->dtype == RF_DTYPE_F32) {
        memcpy(f, &smax, sizeof(smax));
    } else {
        uint16_t h = se->dtype == RF_DTYPE_BF16 ? rf_f32_to_bf16(smax) : rf_f32_to_f16(smax);
        memcpy(f, &h, sizeof(h));
    }
    *n_p = se->nbytes;
    return f;
}

static void reasm_done(void *ctx, int tensor, const void *bytes, size_t nbytes)
{
    reasm_ctx_t *c = ctx;
    job_t *j = c->j;
    const rf_tensor_t *t = &j->s->inv.tensors[tensor];
    const rf_ref_entry_t *e = rf_ref_find(j->ref, t->name);
    uint8_t d[32];
    char hex[65];
    if (c->st != RF_OK)
        return;
    /* what was reassembled, for the messages: the file's bytes, or a linear the trainer
     * quantized from the checkpoint's unquantized weight (no file bytes to compare) */
    char what[RF_NAME_MAX + 96];
    rf_dtype_t got = reasm_target(c, tensor);
    got = got == RF_DTYPE_INVALID ? t->dtype : got;
    if (rf_manifest_trainer_quantizes(&j->s->inv, t, j->s->ck)) {
        const char *dot = strrchr(t->name, '.');
        snprintf(what, sizeof(what),
                 "%s quantized by the trainer from the checkpoint's %s %.*s.weight",
                 rf_dtype_name(got), rf_dtype_name(j->s->inv.cfg.dtype), (int)(dot - t->name),
                 t->name);
    } else {
        snprintf(what, sizeof(what), "%s as stored", rf_dtype_name(got));
    }
    if (e == NULL) {
        c->st = rf_err_set(c->err, RF_ERR_VERIFY, "%s: no reference entry for %s (reassembled %s)",
                           j->o->reference, t->name, what);
        return;
    }
    if (e->dtype != got) {
        c->st = rf_err_set(c->err, RF_ERR_VERIFY,
                           "%s: %s is %s in the reference, the rollout holds it %s: nothing to "
                           "compare (the reference describes a checkpoint's bytes as stored)",
                           j->o->reference, t->name, rf_dtype_name(e->dtype), what);
        return;
    }
    if (reasm_requantized(j, t) && !rf_manifest_trainer_quantizes(&j->s->inv, t, j->s->ck)) {
        /* requantize_with_max_scale is not injective either: the file against the reference,
         * then the rollout's bytes against the file under the owner's requantization */
        size_t n = 0;
        char *f = reasm_requant_expect(j, t, e, &n, c->err);
        bool same = f != NULL && n == nbytes && memcmp(f, bytes, nbytes) == 0;
        free(f);
        if (!same) {
            c->st = rf_err_set(c->err, RF_ERR_VERIFY,
                               "%s: reassembled %s differs from the file's bytes requantized to "
                               "the max scale of its fused module (or the file differs from the "
                               "reference)",
                               j->o->reference, t->name);
            return;
        }
        c->requant++;
    } else if (t->dtype == RF_DTYPE_F8_E4M3 && strcmp(j->s->fmt.ops->name, "fp8-block-fnuz") == 0) {
        /* e4m3fnuz maps 0x80 (-0.0) and 0x00 to 0x00: not injective. Check the file against the
         * reference, then compare with the file's bytes under the same transform. */
        const rf_st_entry_t *se = rf_ckpt_find(j->s->ck, t->name);
        char *f = se ? malloc(se->nbytes + 1) : NULL;
        uint64_t rows = se ? rf_st_entry_rows(se) : 0, rb = se ? rf_st_entry_row_bytes(se) : 0;
        rf_status_t rs = f ? rf_ckpt_read(j->s->ck, se, 0, rows, 0, rb, f, rb, c->err) : RF_ERR_IO;
        if (rs == RF_OK) {
            rf_sha256(f, se->nbytes, d);
            if (memcmp(d, e->sha256, 32) != 0)
                rs = RF_ERR_VERIFY;
            for (uint64_t i = 0; i < se->nbytes; i++)
                f[i] = (uint8_t)f[i] == 0x80 ? 0x00 : f[i];
            if (rs == RF_OK && (se->nbytes != nbytes || memcmp(f, bytes, nbytes) != 0))
                rs = RF_ERR_VERIFY;
        }
        free(f);
        if (rs != RF_OK) {
            c->st = rf_err_set(c->err, RF_ERR_VERIFY,
                               "%s: reassembled %s differs from the file's bytes under the fnuz "
                               "transform (0x80 -> 0x00)",
                               j->o->reference, t->name);
            return;
        }
        c->fnuz++;
    } else {
        rf_sha256(bytes, nbytes, d);
        if (memcmp(d, e->sha256, 32) != 0) {
            rf_sha256_hex(d, hex);
            c->st = rf_err_set(c->err, RF_ERR_VERIFY,
                               "%s: reassembled %s (%s) has sha256 %s, the reference says %s",
                               j->o->reference, t->name, what, hex, e->sha256_hex);
            return;
        }
    }
    j->verified[tensor] = 1;
    c->checked++;
}

rf_status_t job_ref_check_quantized(job_t *j, rf_err_t *err)
{
    const rf_inventory_t *inv = &j->s->inv;
    if (j->ref == NULL || j->s->ck == NULL || j->s->topo.quantization == RF_QUANT_NONE)
        return RF_OK;
    /* reasm_done's own rule for a tensor the trainer quantized: the reference's entry must be
     * there and of the dtype the engine holds it in (the tensor's) */
    const rf_tensor_t *first = NULL;
    const rf_ref_entry_t *fe = NULL;
    int n = 0;
    for (int i = 0; i < inv->ntensors; i++) {
        const rf_tensor_t *t = &inv->tensors[i];
        if (!rf_manifest_trainer_quantizes(inv, t, j->s->ck))
            continue;
        const rf_ref_entry_t *e = rf_ref_find(j->ref, t->name);
        if (e != NULL && e->dtype == t->dtype)
            continue;
        if (first == NULL) {
            first = t;
            fe = e;
        }
        n++;
    }
    if (first == NULL)
        return RF_OK;
    char how[160];
    if (fe != NULL)
        snprintf(how, sizeof(how), "%s in the reference, %s on the engine",
                 rf_dtype_name(fe->dtype), rf_dtype_name(first->dtype));
    else
        snprintf(how, sizeof(how), "not in the reference, %s on the engine",
                 rf_dtype_name(first->dtype));
    return rf_err_set(err, RF_ERR_MISMATCH,
                      "%s: under the topology's quantization %s the trainer quantizes %d "
                      "tensor(s) from the checkpoint's %s weights, which this reference (a "
                      "checkpoint's bytes as stored) does not hold quantized (first: %s, %s): "
                      "nothing to compare; give the reference of a %s checkpoint, or leave "
                      "--reference out (the scalar oracle checks every update)",
                      j->o->reference, rf_quant_name(j->s->topo.quantization), n,
                      rf_dtype_name(inv->cfg.dtype), first->name, how,
                      rf_quant_name(j->s->topo.quantization));
}

/* Reassembly from the engine's storage + sha256 against --reference (collective per engine). */
static rf_status_t verify_reference(job_t *j, rf_err_t *err)
{
    reasm_ctx_t c = {.j = j, .err = err};
    rf_status_t st = RF_OK;
    c.bufs = calloc((size_t)j->s->st.nslots + 1, sizeof(void *));
    if (c.bufs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    for (int m = 0; m < j->s->plan.nlayers && st == RF_OK; m++) {
        rf_layer_t *L = &j->s->plan.layers[m];
        int first = j->s->st.module_first[m];
        for (int s = 0; s < L->nmodel; s++)
            c.bufs[first + s] = malloc(rf_slot_shape_bytes(&L->model[s]) + 1);
        st = rf_plan_read_model(&j->s->plan, m, &c.bufs[first], err);
    }
    int ok = st == RF_OK, all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, j->engine_comm);
    if (all) {
        rf_reassemble_opts_t ro = {reasm_target};
        st = rf_reassemble_ex(&j->s->inv, &j->s->me.rc, j->engine_comm, reasm_slot_bytes,
                              reasm_done, &c, &ro, err);
        j->js.fnuz_tensors = c.fnuz;
        j->js.requant_tensors = c.requant;
        if (st == RF_OK)
            st = c.st;
    } else if (st == RF_OK) {
        st = rf_err_set(err, RF_ERR_VERIFY, "rank %d: an engine peer could not read its storage",
                        j->rank);
    }
    for (int s = 0; s < j->s->st.nslots; s++)
        free(c.bufs[s]);
    free(c.bufs);
    /* only the engine leader checked hashes; the others verified by contributing */
    if (st == RF_OK && j->s->me.rc.tp_rank + j->s->me.rc.dp_rank * j->s->me.rc.tp != 0)
        memset(j->verified, 0, (size_t)j->s->inv.ntensors);
    return st;
}

/* ---- --cold-check --------------------------------------------------------------------- */

/* Keeps a copy of a chunk's payload for --cold-check (copy: owned, passed on). */
rf_status_t job_cold_keep(job_t *j, const rf_chunk_t *chunk, char *copy, rf_err_t *err)
{
    if (j->ncold == j->capcold) {
        size_t cap = j->capcold ? 2 * j->capcold : 16;
        cold_chunk_t *g = realloc(j->cold, cap * sizeof(*g));
        if (g == NULL) {
            free(copy);
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
        }
        j->cold = g;
        j->capcold = cap;
    }
    j->cold[j->ncold++] = (cold_chunk_t){chunk, copy};
    return RF_OK;
}

void job_cold_free(job_t *j)
{
    for (size_t i = 0; i < j->ncold; i++)
        free(j->cold[i].payload);
    j->ncold = 0;
}

/*
 * The cold-load oracle (DESIGN.md section 12): replays this update's chunks into freshly
 * allocated runtime storage with a fresh plan (same format owner and policy) and requires every
 * slot to be byte-identical to the live storage, which went through the previous updates.
 */
static rf_status_t cold_compare(job_t *j, uint32_t v, rf_err_t *err)
{
    rf_storage_t cst;
    rf_plan_t cp;
    rf_status_t st;
    rf_format_t fmt = j->s->fmt;
    RF_CHECK(rf_storage_init(&cst, j->s->inv.nmodules, err));
    st = rf_plan_alloc_storage(&j->s->inv, &j->s->me.rc, &fmt, &cst, false, err);
    if (st == RF_OK)
        st = rf_session_plan_build(j->s, &cp, &cst, &fmt, err);
    if (st != RF_OK) {
        rf_storage_free(&cst);
        return st;
    }
    for (int i = 0; i < j->s->man.n && st == RF_OK; i++)
        st = rf_plan_set_source_dtype(&cp, j->s->man.entries[i].tensor, j->s->man.entries[i].dtype,
                                      err);
    if (st == RF_OK)
        st = rf_plan_begin(&cp, v, err);
    for (size_t c = 0; c < j->ncold && st == RF_OK; c++) {
        const rf_chunk_t *ch = j->cold[c].chunk;
        const rf_chunk_plan_t *pl =
            j->s->p2p ? rf_p2p_schedule_find(&j->s->p2p_s, j->rank)->plan : j->s->cplan;
        st = rf_plan_stage(&cp, j->cold[c].payload, ch->payload_bytes, err);
        if (st == RF_OK)
            st = rf_session_apply_pieces(j->s, &cp, ch, &pl->pieces[ch->piece_begin],
                                         j->cold[c].payload, false, err);
    }
    if (st == RF_OK)
        st = rf_plan_finalize(&cp, err);
    for (int s = 0; s < j->s->st.nslots && st == RF_OK; s++) {
        uint64_t b = rf_signature_bytes(&j->s->st.slots[s].sig);
        const void *live = j->s->st.slots[s].sig.data, *cold = cst.slots[s].sig.data;
        char *hl = NULL, *hc = NULL;
        if (b == rf_signature_bytes(&cst.slots[s].sig) && rf_storage_on_device(&j->s->st)) {
            /* both storages on the device: compare host copies */
            hl = malloc(b + 1);
            hc = malloc(b + 1);
            if (hl == NULL || hc == NULL)
                st = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
            if (st == RF_OK)
                st = rf_storage_read(&j->s->st, hl, live, (size_t)b, err);
            if (st == RF_OK)
                st = rf_storage_read(&cst, hc, cold, (size_t)b, err);
            live = hl;
            cold = hc;
        }
        bool differ = st == RF_OK &&
                      (b != rf_signature_bytes(&cst.slots[s].sig) || memcmp(live, cold, b) != 0);
        free(hl);
        free(hc);
        if (differ)
            st = rf_err_set(err, RF_ERR_VERIFY,
                            "rank %d: update %u: slot %s differs between a cold load and the "
                            "refit of the live storage",
                            j->rank, v, j->s->st.slots[s].name);
    }
    if (st == RF_OK)
        j->js.cold_slots = (uint64_t)j->s->st.nslots;
    rf_plan_free(&cp);
    rf_storage_free(&cst);
    return st;
}

/* A host copy of a slot's bytes (device storage) or the slot itself; *own to free. */
static const void *derived_host(job_t *j, const rf_slot_t *sl, char **own, rf_err_t *err)
{
    size_t b = (size_t)rf_signature_bytes(&sl->sig);
    *own = NULL;
    if (!rf_storage_on_device(&j->s->st))
        return sl->sig.data;
    *own = malloc(b + 1);
    if (*own == NULL) {
        rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
        return NULL;
    }
    if (rf_storage_read(&j->s->st, *own, sl->sig.data, b, err) != RF_OK) {
        free(*own);
        *own = NULL;
        return NULL;
    }
    return *own;
}

/*
 * Weight-derived state (DESIGN.md 8.6): the deferred stage ran exactly once for every layer
 * with derived slots this update, and every absorbed MLA slot (DeepSeek's W_UK_T / W_UV of
 * kv_b_proj) equals the oracle's own recomputation from the kv_b_proj bytes as loaded
 * (rf_verify_mla_derived, runtime/verify.c).
 */
static rf_status_t verify_derived(job_t *j, uint32_t v, rf_err_t *err)
{
    uint64_t layers = 0, checked = 0;
    rf_status_t st = RF_OK;
    for (int m = 0; m < j->s->inv.nmodules && st == RF_OK; m++) {
        int n = rf_storage_module_nslots(&j->s->st, m);
        rf_slot_t *w = NULL, *sc = NULL;
        bool has = false;
        for (int i = 0; i < n; i++) {
            rf_slot_t *sl = rf_storage_module_slot(&j->s->st, m, i);
            const char *dot = strrchr(sl->name, '.');
            has = has || sl->derived;
            if (!sl->derived && dot != NULL && strcmp(dot + 1, "weight") == 0)
                w = sl;
            if (!sl->derived && dot != NULL && strcmp(dot + 1, "weight_scale_inv") == 0)
                sc = sl;
        }
        layers += has;
        if (!has || j->s->inv.cfg.family != RF_FAMILY_DEEPSEEK_V3)
            continue;
        for (int i = 0; i < n && st == RF_OK; i++) {
            rf_slot_t *sl = rf_storage_module_slot(&j->s->st, m, i);
            const char *dot = strrchr(sl->name, '.');
            if (!sl->derived || dot == NULL)
                continue;
            if (w == NULL || w->sig.ndim != 2)
                return rf_err_set(err, RF_ERR_VERIFY, "rank %d: %s has derived slots but no "
                                  "2-D weight", j->rank, j->s->inv.modules[m].name);
            char *ow = NULL, *os = NULL, *od = NULL;
            const void *wb = derived_host(j, w, &ow, err);
            const void *sb = sc != NULL && wb != NULL ? derived_host(j, sc, &os, err) : NULL;
            const void *db = wb != NULL ? derived_host(j, sl, &od, err) : NULL;
            if (wb == NULL || db == NULL || (sc != NULL && sb == NULL))
                st = RF_ERR_NOMEM;
            else
                st = rf_verify_mla_derived(&j->s->inv, m, dot + 1, wb, w->sig.dtype,
                                           w->sig.shape[0], (const float *)sb, db,
                                           rf_signature_bytes(&sl->sig), err);
            free(ow);
            free(os);
            free(od);
            if (st != RF_OK)
                return rf_err_set(err, st, "rank %d: update %u: %s", j->rank, v, err->msg);
            checked++;
        }
    }
    if (j->js.derived_runs != layers)
        return rf_err_set(err, RF_ERR_VERIFY,
                          "rank %d: update %u: the deferred stage ran %llu times for %llu "
                          "layers with weight-derived state (once each expected)",
                          j->rank, v, (unsigned long long)j->js.derived_runs,
                          (unsigned long long)layers);
    j->js.derived_layers = layers;
    j->js.derived_checked = checked;
    return RF_OK;
}

/* ---- one update's verdict ------------------------------------------------------------- */

/*
 * The oracle of a committed update v on a rollout rank (after the gate; it shares no code with
 * the fast path): reassembly + sha256 against --reference for checkpoint updates with one, else
 * the scalar reference loader; then the diff rule against the snapshot (diff: the previous
 * update committed) and, with --cold-check, the cold load. Fills j->js.verify_*.
 */
void job_verify_update(job_t *j, uint32_t v, bool from_ckpt, bool diff)
{
    rf_err_t ve;
    rf_status_t vs;
    rf_err_clear(&ve);
    double t = rf_time_now();
    memset(j->verified, 0, (size_t)j->s->inv.ntensors);
    if (j->ref != NULL && from_ckpt)
        vs = verify_reference(j, &ve);
    else
        vs = verify_scalar(j, v, from_ckpt, &ve);
    if (vs == RF_OK)
        vs = verify_derived(j, v, &ve);
    if (vs == RF_OK && diff) {
        diff_rule(j);
        double frac = j->js.diff_elems ? (double)j->js.diff_changed / j->js.diff_elems : 1.0;
        double qfrac = j->js.qdiff_elems ? (double)j->js.qdiff_changed / j->js.qdiff_elems : 1.0;
        if (frac < 0.99)
            vs = rf_err_set(&ve, RF_ERR_VERIFY,
                            "rank %d: only %.2f%% of the elements written changed since the "
                            "previous update (at least 99%% required)",
                            j->rank, 100.0 * frac);
        else if (qfrac < 0.90)
            vs = rf_err_set(&ve, RF_ERR_VERIFY,
                            "rank %d: only %.2f%% of the quantized elements written changed "
                            "since the previous update (at least 90%% required)",
                            j->rank, 100.0 * qfrac);
    }
    if (vs == RF_OK && j->o->cold_check)
        vs = cold_compare(j, v, &ve);
    j->js.verify_s = rf_time_now() - t;
    j->js.verify_status = (int)vs;
    snprintf(j->js.verify_msg, sizeof(j->js.verify_msg), "%s", ve.msg);
}

/*
 * Rank 0, after a committed update checked against --reference: every reference entry must
 * have been verified or be skipped on purpose (layers / experts cut by model.overrides, a
 * tied lm_head.weight found equal to the embedding at startup); any other entry fails the
 * update naming it, so a reference is never "verified" with a tensor nobody looked at.
 */
int job_ref_account(job_t *j, uint32_t v, const uint8_t *vsum, uint64_t *verified_p, char *fail,
                    size_t cap)
{
    size_t n = rf_ref_count(j->ref);
    uint64_t k = 0;
    int cut = 0, tied = 0, listed = 0, unchecked = 0;
    const char *first_cut = NULL, *first_listed = NULL, *first_bad = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = rf_ref_entry(j->ref, i)->name;
        int ti = rf_inventory_find(&j->s->inv, name);
        if (ti >= 0 && vsum[ti]) {
            k++;
            continue;
        }
        if (ti < 0) {
            rf_unknown_t u = rf_inventory_classify_unknown(&j->s->inv, name);
            if (u == RF_UNKNOWN_CUT) {
                if (cut++ == 0)
                    first_cut = name;
                continue;
            }
            if (u == RF_UNKNOWN_TIED && j->s->man.tied_checked) {
                tied++;
                continue;
            }
            if (u == RF_UNKNOWN_SKIP) { /* the documented skip list (inv_freq, mtp.*) */
                if (listed++ == 0)
                    first_listed = name;
                continue;
            }
        }
        if (unchecked++ == 0)
            first_bad = name;
    }
    *verified_p = k;
    j->ref_total = n;
    j->ref_skipped = cut + tied + listed;
    j->ref_note[0] = '\0';
    /* listed, so a deliberate skip reads as one and nothing is skipped silently */
    if (j->ref_skipped > 0) {
        /* one kind: "9 skipped: cut by ..."; several: each with its own count */
        bool several = (cut > 0) + (tied > 0) + (listed > 0) > 1;
        char part[3][160];
        int np = 0;
        if (cut)
            snprintf(part[np++], sizeof(part[0]), "%.0d%scut by model.overrides (first %.96s)",
                     several ? cut : 0, several ? " " : "", first_cut);
        if (tied)
            snprintf(part[np++], sizeof(part[0]),
                     "lm_head.weight, the tied copy checked equal to model.embed_tokens.weight "
                     "at startup");
        if (listed)
            snprintf(part[np++], sizeof(part[0]), "%.0d%son the skip list (first %.96s)",
                     several ? listed : 0, several ? " " : "", first_listed);
        snprintf(j->ref_note, sizeof(j->ref_note), "%d skipped: ", j->ref_skipped);
        for (int i = 0; i < np; i++) { /* appended, cut at the note's size */
            size_t o = strlen(j->ref_note), room = sizeof(j->ref_note) - 1 - o;
            const char *add[2] = {i > 0 ? "; " : "", part[i]};
            for (int a = 0; a < 2; a++) {
                size_t l = strlen(add[a]) < room ? strlen(add[a]) : room;
                memcpy(j->ref_note + o, add[a], l);
                o += l;
                room -= l;
            }
            j->ref_note[o] = '\0';
        }
    }
    if (unchecked == 0)
        return 0;
    char more[32] = "";
    if (unchecked > 1)
        snprintf(more, sizeof(more), " (and %d more)", unchecked - 1);
    snprintf(fail, cap,
             "update %u: verification: %s: verified %" PRIu64 " of %zu tensors: %s was not "
             "checked%s",
             v, j->o->reference, k, n, first_bad, more);
    return 1;
}
