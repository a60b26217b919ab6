/*
 * refit: manifest build, serialization, validation and agreement (DESIGN.md section 9).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "refit/log.h"
#include "refit/manifest.h"

static int entry_stage(const rf_topology_t *topo, const rf_inventory_t *inv, const rf_tensor_t *t)
{
    return rf_topology_layer_stage(topo, t->layer, inv->cfg.num_hidden_layers);
}

static int entry_order(const rf_manifest_entry_t *a, const rf_manifest_entry_t *b)
{
    if (a->stage != b->stage)
        return a->stage < b->stage ? -1 : 1;
    if (a->layer != b->layer)
        return a->layer < b->layer ? -1 : 1;
    if (a->expert != b->expert)
        return a->expert < b->expert ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int entry_cmp(const void *a, const void *b) { return entry_order(a, b); }

static size_t entry_line(const rf_manifest_entry_t *e, char *p);

/* XXH3-64 of the serialized manifest (rf_manifest_serialize's text), streamed line by line: no
 * copy of the text is made (on a parsed manifest it is the re-serialization that proves the
 * parse lost nothing). A failed state allocation leaves digest 0, which no real manifest's
 * agreement accepts against a rank that computed one. */
static void manifest_digest(rf_manifest_t *man)
{
    XXH3_state_t *h = XXH3_createState();
    man->payload_bytes = 0;
    for (int i = 0; i < man->n; i++)
        man->payload_bytes += man->entries[i].nbytes;
    man->digest = 0;
    if (h == NULL)
        return;
    XXH3_64bits_reset(h);
    for (int i = 0; i < man->n; i++) {
        char line[RF_NAME_MAX + 256];
        XXH3_64bits_update(h, line, entry_line(&man->entries[i], line));
    }
    man->digest = XXH3_64bits_digest(h);
    XXH3_freeState(h);
}

/* The quantized linear (or expert projection) tensor t belongs to: its prefix "<P>" and its
 * primary inventory tensor (fp8 "<P>.weight", wna16 "<P>.weight_packed"), which decides where
 * the whole linear comes from. false for tensors of no quantized linear (and biases). */
static bool quant_linear(const rf_inventory_t *inv, const rf_tensor_t *t, char *prefix,
                         size_t cap, const rf_tensor_t **primary_p)
{
    const char *dot = strrchr(t->name, '.');
    rf_quant_t q = inv->modules[t->module].quant;
    char name[RF_NAME_MAX + 16];
    if (q == RF_QUANT_NONE || dot == NULL || t->param == RF_PARAM_BIAS)
        return false;
    snprintf(prefix, cap, "%.*s", (int)(dot - t->name), t->name);
    snprintf(name, sizeof(name), "%s.%s", prefix, q == RF_QUANT_WNA16 ? "weight_packed" : "weight");
    int pi = rf_inventory_find(inv, name);
    if (pi < 0)
        return false;
    *primary_p = &inv->tensors[pi];
    return true;
}

rf_qsource_t rf_manifest_quant_source(const rf_inventory_t *inv, const rf_tensor_t *t,
                                      const rf_ckpt_t *ck, rf_err_t *why)
{
    char p[RF_NAME_MAX], lname[RF_NAME_MAX + 16];
    const rf_tensor_t *pt;
    if (!quant_linear(inv, t, p, sizeof(p), &pt))
        return RF_QSOURCE_NONE;
    if (ck == NULL)
        return RF_QSOURCE_TRAINER; /* generator: the reference quantizer on its bf16 */
    bool wna16 = inv->modules[t->module].quant == RF_QUANT_WNA16;
    snprintf(lname, sizeof(lname), "%s.weight", p);
    const rf_st_entry_t *q = rf_ckpt_find(ck, pt->name);       /* the primary as stored */
    const rf_st_entry_t *w = wna16 ? rf_ckpt_find(ck, lname) : q; /* the logical weight */
    /* logical shape: fp8 weight (N, K); wna16 packed (N, K/8) -> (N, K) */
    int64_t n = pt->shape[0], k = pt->shape[1] * (wna16 ? 8 : 1);
    bool logical = w != NULL && w->dtype == inv->cfg.dtype && w->ndim == 2 &&
                   (int64_t)w->shape[0] == n && (int64_t)w->shape[1] == k;
    if (wna16 && q != NULL && w != NULL) {
        rf_err_set(why, RF_ERR_MISMATCH,
                   "quantized linear %s stores both %s (%s) and %s (%s): one source per module, "
                   "either the quantized tensors as stored or the unquantized weight that the "
                   "trainer quantizes",
                   p, pt->name, rf_dtype_name(q->dtype), lname, rf_dtype_name(w->dtype));
        return RF_QSOURCE_INVALID;
    }
    if (q != NULL && q->dtype == pt->dtype)
        return RF_QSOURCE_STORED;
    if (logical)
        return RF_QSOURCE_TRAINER;
    if (w == NULL && q == NULL)
        rf_err_set(why, RF_ERR_MISSING,
                   "quantized linear %s: tensor %s is missing (neither the %s %s nor the "
                   "unquantized %s in the model dtype %s is stored)",
                   p, pt->name, rf_dtype_name(pt->dtype), pt->name, lname,
                   rf_dtype_name(inv->cfg.dtype));
    else
        rf_err_set(why, RF_ERR_MISMATCH,
                   "quantized linear %s: %s is %s of rank %d, neither the %s %s nor the "
                   "unquantized weight in the model dtype %s with shape [%lld, %lld]",
                   p, q != NULL ? pt->name : lname, rf_dtype_name(q != NULL ? q->dtype : w->dtype),
                   q != NULL ? q->ndim : w->ndim, rf_dtype_name(pt->dtype), pt->name,
                   rf_dtype_name(inv->cfg.dtype), (long long)n, (long long)k);
    return RF_QSOURCE_INVALID;
}

bool rf_manifest_is_bf16_source(const rf_inventory_t *inv, const char *name)
{
    size_t n = strlen(name);
    char sib[RF_NAME_MAX];
    if (n < 7 || strcmp(name + n - 7, ".weight") != 0)
        return false;
    snprintf(sib, sizeof(sib), "%.*s.weight_packed", (int)(n - 7), name);
    int i = rf_inventory_find(inv, sib);
    return i >= 0 && inv->modules[inv->tensors[i].module].quant == RF_QUANT_WNA16;
}

bool rf_manifest_trainer_quantizes(const rf_inventory_t *inv, const rf_tensor_t *t,
                                   const rf_ckpt_t *ck)
{
    return rf_manifest_quant_source(inv, t, ck, NULL) == RF_QSOURCE_TRAINER;
}

bool rf_manifest_scale_widens(const rf_tensor_t *t, rf_dtype_t stored)
{
    return rf_param_widens(t->param) && t->dtype == RF_DTYPE_F32 &&
           (stored == RF_DTYPE_BF16 || stored == RF_DTYPE_F16);
}

bool rf_manifest_shape_matches(const rf_tensor_t *t, int ndim, const uint64_t *shape)
{
    if (ndim == 0 && t->param == RF_PARAM_TENSOR_SCALE && t->ndim == 1 && t->shape[0] == 1)
        return true;
    bool same = ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = (int64_t)shape[d] == t->shape[d];
    return same;
}

/* One inventory tensor against the checkpoint headers, under its quantized linear's one
 * source (rf_manifest_quant_source). The entry keeps the inventory's (runtime) dtype: a bf16 /
 * f16 fp8 block scale is widened exactly to fp32 by the trainer that reads it, so a
 * trainer-quantized update can never be narrowed to the file's dtype (DESIGN.md section 7). */
static rf_status_t manifest_check_ckpt(const rf_inventory_t *inv, const rf_tensor_t *t,
                                       const rf_ckpt_t *ck, const char *ck_dir,
                                       rf_manifest_entry_t *e, rf_err_t *err)
{
    const rf_st_entry_t *se = rf_ckpt_find(ck, t->name);
    rf_err_t why;
    rf_err_clear(&why);
    rf_qsource_t src = rf_manifest_quant_source(inv, t, ck, &why);
    if (src == RF_QSOURCE_INVALID)
        return rf_err_set(err, why.status, "checkpoint %s: %s", ck_dir, why.msg);
    if (src == RF_QSOURCE_TRAINER)
        return RF_OK; /* quantized on the trainer: inventory dtypes, stored scales ignored */
    if (se == NULL && src == RF_QSOURCE_STORED) {
        const char *dot = strrchr(t->name, '.');
        return rf_err_set(err, RF_ERR_MISSING,
                          "checkpoint %s: quantized linear %.*s stores its weight quantized but "
                          "tensor %s is missing: a stored quantized weight is carried with its "
                          "stored scale(s), never with scales from another source",
                          ck_dir, (int)(dot - t->name), t->name, t->name);
    }
    if (se == NULL && t->layer > inv->cfg.num_hidden_layers) /* only model.mtp's layers */
        return rf_err_set(err, RF_ERR_MISSING,
                          "checkpoint %s: tensor %s is missing (an MTP layer's: the topology's "
                          "model.mtp asks for them)",
                          ck_dir, t->name);
    if (se == NULL)
        return rf_err_set(err, RF_ERR_MISSING, "checkpoint %s: tensor %s is missing", ck_dir,
                          t->name);
    if (!rf_manifest_shape_matches(t, se->ndim, se->shape))
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "checkpoint %s: tensor %s has a different shape than the model config "
                          "implies",
                          ck_dir, t->name);
    if (se->dtype == t->dtype || rf_manifest_scale_widens(t, se->dtype))
        return RF_OK;
    if (t->param == RF_PARAM_WEIGHT_SHAPE && se->dtype == RF_DTYPE_I32) {
        e->dtype = se->dtype;
        e->nbytes = t->numel * 4;
        return RF_OK;
    }
    if (t->param == RF_PARAM_WEIGHT_SCALE)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "checkpoint %s: %s is %s: wna16 runtime scales are in the model dtype "
                          "%s",
                          ck_dir, t->name, rf_dtype_name(se->dtype), rf_dtype_name(t->dtype));
    return rf_err_set(err, RF_ERR_MISMATCH, "checkpoint %s: tensor %s is %s, the model expects %s",
                      ck_dir, t->name, rf_dtype_name(se->dtype), rf_dtype_name(t->dtype));
}

/* A tied model's stored lm_head.weight against the embedding the engine serves in its place
 * (DESIGN.md section 4): skipping it is only right when it holds the same bytes. */
static rf_status_t manifest_check_tied(const rf_inventory_t *inv, rf_ckpt_t *ck,
                                       const char *ck_dir, const rf_st_entry_t *head,
                                       rf_err_t *err)
{
    /* the family's embedding: model.embed_tokens, OPT model.decoder.embed_tokens, ... */
    const char *emb_name = inv->embed_name ? inv->embed_name : "model.embed_tokens.weight";
    const rf_st_entry_t *emb = rf_ckpt_find(ck, emb_name);
    int64_t row = -1;
    bool same = emb != NULL && emb->dtype == head->dtype && emb->ndim == head->ndim;
    for (int d = 0; same && d < head->ndim; d++)
        same = emb->shape[d] == head->shape[d];
    if (!same)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "checkpoint %s: %s (%s) and %s (%s) differ in dtype or shape, but the "
                          "model config says tie_word_embeddings true (the engine would serve "
                          "the embedding as the head)",
                          ck_dir, head->name, rf_dtype_name(head->dtype), emb_name,
                          emb ? rf_dtype_name(emb->dtype) : "missing");
    RF_CHECK(rf_ckpt_compare(ck, head, emb, 0, &row, err));
    if (row >= 0)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "checkpoint %s: %s differs from %s (first at row %lld), but the model "
                          "config says tie_word_embeddings true (the engine would serve the "
                          "embedding as the head)",
                          ck_dir, head->name, emb_name, (long long)row);
    rf_info("checkpoint %s: %s equals %s byte for byte (tie_word_embeddings): checked and "
            "skipped",
            ck_dir, head->name, emb_name);
    return RF_OK;
}

/* A trainer-quantized linear whose checkpoint still stores scale tensors (a stale
 * weight_scale_inv / weight_scale / weight_shape next to the unquantized weight): they are
 * ignored; counted so the build says so once. Called for the primary tensor only. */
static bool stale_scales(const rf_inventory_t *inv, const rf_tensor_t *t, const rf_ckpt_t *ck)
{
    static const char *const fp8[] = {"weight_scale_inv", NULL};
    static const char *const fp8_scale[] = {"weight_scale", NULL};
    static const char *const wna16[] = {"weight_scale", "weight_shape", NULL};
    const char *dot = strrchr(t->name, '.');
    rf_quant_t q = inv->modules[t->module].quant;
    const char *const *sfx = q == RF_QUANT_WNA16       ? wna16
                             : q == RF_QUANT_FP8_BLOCK ? fp8
                                                       : fp8_scale;
    char name[RF_NAME_MAX + 32];
    for (int i = 0; sfx[i] != NULL; i++) {
        snprintf(name, sizeof(name), "%.*s.%s", (int)(dot - t->name), t->name, sfx[i]);
        if (rf_ckpt_find(ck, name) != NULL)
            return true;
    }
    return false;
}

rf_status_t rf_manifest_build(const rf_inventory_t *inv, const rf_topology_t *topo,
                              rf_ckpt_t *ck, const char *ck_dir, rf_manifest_t *man_p,
                              rf_err_t *err)
{
    rf_manifest_t man;
    memset(&man, 0, sizeof(man));
    const char *first_stale = NULL;
    int stale = 0;
    man.entries = calloc((size_t)inv->ntensors + 1, sizeof(rf_manifest_entry_t));
    if (man.entries == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "manifest: out of memory");
    for (int i = 0; i < inv->ntensors; i++) {
        const rf_tensor_t *t = &inv->tensors[i];
        rf_manifest_entry_t *e = &man.entries[man.n++];
        snprintf(e->name, sizeof(e->name), "%s", t->name);
        e->dtype = t->dtype;
        e->ndim = t->ndim;
        memcpy(e->shape, t->shape, sizeof(e->shape));
        e->nbytes = t->nbytes;
        e->stage = entry_stage(topo, inv, t);
        e->layer = t->layer;
        e->expert = t->expert;
        e->tensor = i;
        if (ck != NULL) {
            rf_status_t st = manifest_check_ckpt(inv, t, ck, ck_dir, e, err);
            if (st != RF_OK) {
                rf_manifest_free(&man);
                return st;
            }
            if ((t->param == RF_PARAM_WEIGHT || t->param == RF_PARAM_WEIGHT_PACKED) &&
                rf_manifest_trainer_quantizes(inv, t, ck) && stale_scales(inv, t, ck) &&
                stale++ == 0)
                first_stale = t->name;
        }
    }
    if (stale > 0) {
        const char *dot = strrchr(first_stale, '.');
        rf_info("checkpoint %s: %d quantized linear(s) stored unquantized are quantized on the "
                "trainer, their stored scales ignored (first: %.*s)",
                ck_dir, stale, (int)(dot - first_stale), first_stale);
    }
    if (ck != NULL) {
        const char *first_skip = NULL, *first_cut = NULL;
        for (size_t i = 0; i < rf_ckpt_count(ck); i++) {
            const rf_st_entry_t *se = rf_ckpt_entry(ck, i);
            if (rf_inventory_find(inv, se->name) >= 0 || rf_manifest_is_bf16_source(inv, se->name))
                continue;
            switch (rf_inventory_classify_unknown(inv, se->name)) {
            case RF_UNKNOWN_SKIP:
                if (man.skipped++ == 0)
                    first_skip = se->name;
                break;
            case RF_UNKNOWN_CUT:
                if (man.cut++ == 0)
                    first_cut = se->name;
                break;
            case RF_UNKNOWN_TIED: {
                rf_status_t st = manifest_check_tied(inv, ck, ck_dir, se, err);
                if (st != RF_OK) {
                    rf_manifest_free(&man);
                    return st;
                }
                man.tied_checked = true;
                break;
            }
            case RF_UNKNOWN_ERROR:
                rf_manifest_free(&man);
                return rf_err_set(err, RF_ERR_EXTRA,
                                  "checkpoint %s: tensor %s is not part of the %s model", ck_dir,
                                  se->name, inv->cfg.model_type);
            }
        }
        if (man.skipped)
            rf_info("checkpoint %s: skipped %d tensor(s) on the skip list (first: %s)", ck_dir,
                    man.skipped, first_skip);
        /* on the documented skip list (DESIGN.md section 4): expected, INFO; anything else
         * skipped on purpose is a checkpoint's weights left behind: WARN */
        if (man.cut)
            rf_warn("checkpoint %s: skipped %d tensor(s) not on the skip list: cut away by "
                    "model.overrides (first: %s)",
                    ck_dir, man.cut, first_cut);
    }
    qsort(man.entries, man.n, sizeof(rf_manifest_entry_t), entry_cmp);
    manifest_digest(&man);
    *man_p = man;
    return RF_OK;
}

void rf_manifest_free(rf_manifest_t *man)
{
    if (man == NULL)
        return;
    free(man->entries);
    memset(man, 0, sizeof(*man));
}

/* Decimal digits of v at p (no terminator); returns the count. */
static size_t put_i64(char *p, int64_t v)
{
    char tmp[24];
    size_t n = 0, k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        p[k++] = '-';
    while (n > 0)
        p[k++] = tmp[--n];
    return k;
}

/* One entry's line "name dtype ndim:d0xd1.. stage layer expert\n" at p (room for
 * RF_NAME_MAX + 256 bytes); returns its length. Written by hand, not snprintf: the agreement
 * serializes (root) and re-serializes (every rank, for the digest) a line per tensor, and
 * printf's formatting was most of a 56k-tensor manifest's cost (issue 18 item 4). */
static size_t entry_line(const rf_manifest_entry_t *e, char *p)
{
    size_t n = strnlen(e->name, RF_NAME_MAX - 1), k;
    const char *dt = rf_dtype_name(e->dtype);
    size_t dl = strlen(dt);
    memcpy(p, e->name, n);
    k = n;
    p[k++] = ' ';
    memcpy(p + k, dt, dl);
    k += dl;
    p[k++] = ' ';
    k += put_i64(p + k, e->ndim);
    p[k++] = ':';
    for (int d = 0; d < e->ndim && d < RF_MAX_DIMS; d++) {
        if (d)
            p[k++] = 'x';
        k += put_i64(p + k, e->shape[d]);
    }
    p[k++] = ' ';
    k += put_i64(p + k, e->stage);
    p[k++] = ' ';
    k += put_i64(p + k, e->layer);
    p[k++] = ' ';
    k += put_i64(p + k, e->expert);
    p[k++] = '\n';
    return k;
}

size_t rf_manifest_serialize(const rf_manifest_t *man, char *buf, size_t cap)
{
    size_t len = 0;
    for (int i = 0; i < man->n; i++) {
        char line[RF_NAME_MAX + 256];
        size_t n = entry_line(&man->entries[i], line);
        if (buf != NULL && len + n < cap)
            memcpy(buf + len, line, n);
        len += n;
    }
    if (buf != NULL && cap > 0)
        buf[len < cap ? len : cap - 1] = '\0';
    return len;
}

/* The space-terminated token at *p within [*p, end): its start and length; *p moves past the
 * one space. false when no space follows (the line's last field is read by int_field). */
static bool token(const char **p, const char *end, const char **tok, size_t *len)
{
    const char *sp = memchr(*p, ' ', (size_t)(end - *p));
    if (sp == NULL)
        return false;
    *tok = *p;
    *len = (size_t)(sp - *p);
    *p = sp + 1;
    return true;
}

/* A decimal integer of [p, end) exactly (optional '-'); false for anything else. */
static bool int_of(const char *p, const char *end, int64_t *v)
{
    bool neg = p < end && *p == '-';
    uint64_t u = 0;
    p += neg;
    if (p == end || end - p > 18)
        return false;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        u = u * 10 + (uint64_t)(*p - '0');
    }
    *v = neg ? -(int64_t)u : (int64_t)u;
    return true;
}

static bool int32_of(const char *p, const char *end, int *v)
{
    int64_t x;
    if (!int_of(p, end, &x) || x < INT32_MIN || x > INT32_MAX)
        return false;
    *v = (int)x;
    return true;
}

/* One line [p, end) into e (the format entry_line writes, field for field). */
static bool entry_parse(const char *p, const char *end, rf_manifest_entry_t *e)
{
    const char *tok, *colon;
    size_t tl;
    char dt[32];
    if (!token(&p, end, &tok, &tl) || tl == 0 || tl >= sizeof(e->name))
        return false;
    memcpy(e->name, tok, tl);
    e->name[tl] = '\0';
    if (!token(&p, end, &tok, &tl) || tl == 0 || tl >= sizeof(dt))
        return false;
    memcpy(dt, tok, tl);
    dt[tl] = '\0';
    e->dtype = rf_dtype_parse(dt);
    if (!token(&p, end, &tok, &tl) || (colon = memchr(tok, ':', tl)) == NULL ||
        !int32_of(tok, colon, &e->ndim) || e->dtype == RF_DTYPE_INVALID || e->ndim < 0 ||
        e->ndim > RF_MAX_DIMS)
        return false;
    const char *q = colon + 1, *dend = tok + tl;
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        const char *x = memchr(q, 'x', (size_t)(dend - q));
        const char *de = d + 1 < e->ndim ? x : dend;
        if (de == NULL || !int_of(q, de, &e->shape[d]) || e->shape[d] < 0)
            return false;
        numel *= (uint64_t)e->shape[d];
        q = de + (d + 1 < e->ndim);
    }
    if (q != dend) /* nothing after the last dim (a 0-D tensor: an empty field) */
        return false;
    e->nbytes = numel * rf_dtype_size(e->dtype);
    if (!token(&p, end, &tok, &tl) || !int32_of(tok, tok + tl, &e->stage) ||
        !token(&p, end, &tok, &tl) || !int32_of(tok, tok + tl, &e->layer) ||
        !int32_of(p, end, &e->expert))
        return false;
    return true;
}

rf_status_t rf_manifest_parse(const char *buf, size_t len, rf_manifest_t *man_p, rf_err_t *err)
{
    rf_manifest_t man;
    int lines = 0;
    memset(&man, 0, sizeof(man));
    for (const char *q = buf; (q = memchr(q, '\n', (size_t)(buf + len - q))) != NULL; q++)
        lines++;
    man.entries = calloc((size_t)lines + 2, sizeof(rf_manifest_entry_t));
    if (man.entries == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "manifest: out of memory");
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        rf_manifest_entry_t *e = &man.entries[man.n];
        if ((size_t)(le - p) >= RF_NAME_MAX + 256 || !entry_parse(p, le, e))
            goto bad;
        e->tensor = -1;
        man.n++;
        p = nl ? nl + 1 : end;
    }
    manifest_digest(&man);
    *man_p = man;
    return RF_OK;
bad:
    rf_manifest_free(&man);
    return rf_err_set(err, RF_ERR_PARSE, "manifest: malformed entry %d", man.n);
}

rf_status_t rf_manifest_validate(rf_manifest_t *man, const rf_inventory_t *inv,
                                 const rf_topology_t *topo, rf_err_t *err)
{
    if (man->n != inv->ntensors)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "manifest carries %d tensors, this rank's inventory has %d", man->n,
                          inv->ntensors);
    for (int i = 0; i < man->n; i++) {
        rf_manifest_entry_t *e = &man->entries[i];
        int ti = rf_inventory_find(inv, e->name);
        if (ti < 0)
            return rf_err_set(err, RF_ERR_EXTRA, "manifest: tensor %s is not in the inventory",
                              e->name);
        const rf_tensor_t *t = &inv->tensors[ti];
        /* scales travel in the runtime dtype (a narrowed fp8 scale is never agreed) */
        bool dt_ok = t->dtype == e->dtype ||
                     (t->param == RF_PARAM_WEIGHT_SHAPE && e->dtype == RF_DTYPE_I32);
        bool same = t->ndim == e->ndim && t->numel * rf_dtype_size(e->dtype) == e->nbytes && dt_ok;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == e->shape[d];
        if (!same)
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "manifest: tensor %s differs from the inventory in dtype, shape or "
                              "bytes",
                              e->name);
        if (e->stage != entry_stage(topo, inv, t) || e->layer != t->layer ||
            e->expert != t->expert)
            return rf_err_set(err, RF_ERR_MISMATCH, "manifest: tensor %s has the wrong stage",
                              e->name);
        if (i > 0 && entry_order(&man->entries[i - 1], e) >= 0)
            return rf_err_set(err, RF_ERR_MISMATCH, "manifest: tensor %s is out of order",
                              e->name);
        e->tensor = ti;
    }
    return RF_OK;
}

rf_status_t rf_manifest_agree(rf_manifest_t *man, int root, const rf_inventory_t *inv,
                              const rf_topology_t *topo, MPI_Comm comm, rf_err_t *err)
{
    int rank, size;
    uint64_t len = 0;
    char *buf = NULL;
    rf_status_t st = RF_OK;
    struct {
        int status;
        char msg[RF_ERR_MSG_MAX];
    } rep;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    /* root's build status first, so a failed build fails everyone with its message */
    if (rank == root)
        len = rf_manifest_serialize(man, NULL, 0);
    MPI_Bcast(&len, 1, MPI_UINT64_T, root, comm);
    buf = malloc(len + 1);
    if (buf == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "manifest: out of memory");
    if (rank == root)
        rf_manifest_serialize(man, buf, len + 1);
    MPI_Bcast(buf, (int)len, MPI_CHAR, root, comm);
    rf_err_t local;
    rf_err_clear(&local);
    if (rank != root)
        st = rf_manifest_parse(buf, len, man, &local);
    free(buf);
    if (st == RF_OK)
        st = rf_manifest_validate(man, inv, topo, &local);
    /* every rank learns the first failing rank's message */
    int code = st == RF_OK ? size : rank, first;
    MPI_Allreduce(&code, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first < size) {
        rep.status = (int)local.status;
        snprintf(rep.msg, sizeof(rep.msg), "%s", local.msg);
        MPI_Bcast(&rep, (int)sizeof(rep), MPI_BYTE, first, comm);
        return rf_err_set(err, (rf_status_t)rep.status, "rank %d: %s", first, rep.msg);
    }
    uint64_t mn, mx;
    MPI_Allreduce(&man->digest, &mn, 1, MPI_UINT64_T, MPI_MIN, comm);
    MPI_Allreduce(&man->digest, &mx, 1, MPI_UINT64_T, MPI_MAX, comm);
    if (mn != mx)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "manifest digests disagree across ranks (%016" PRIx64 " vs %016" PRIx64
                          ")",
                          mn, mx);
    return RF_OK;
}
