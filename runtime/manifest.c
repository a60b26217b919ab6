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

static void manifest_digest(rf_manifest_t *man)
{
    size_t len = rf_manifest_serialize(man, NULL, 0);
    char *buf = malloc(len + 1);
    man->payload_bytes = 0;
    for (int i = 0; i < man->n; i++)
        man->payload_bytes += man->entries[i].nbytes;
    if (buf == NULL) {
        man->digest = 0;
        return;
    }
    rf_manifest_serialize(man, buf, len + 1);
    man->digest = XXH3_64bits(buf, len);
    free(buf);
}

/* The logical (unquantized) weight "<P>.weight" of a quantized linear whose checkpoint tensor
 * t belongs to it: its name, and whether the checkpoint holds it in the model dtype with the
 * logical shape (a bf16 source the trainer quantizes). */
static bool logical_source(const rf_inventory_t *inv, const rf_tensor_t *t, const rf_ckpt_t *ck,
                           char *name, size_t cap)
{
    const char *dot = strrchr(t->name, '.');
    const rf_module_t *m = &inv->modules[t->module];
    if (m->quant == RF_QUANT_NONE || dot == NULL || t->param == RF_PARAM_BIAS)
        return false;
    snprintf(name, cap, "%.*s.weight", (int)(dot - t->name), t->name);
    const rf_st_entry_t *se = rf_ckpt_find(ck, name);
    if (se == NULL || se->dtype != inv->cfg.dtype || se->ndim != 2)
        return false;
    /* logical shape: fp8 weight (N, K); wna16 packed (N, K/8) -> (N, K) */
    int64_t n = t->shape[0], k = t->shape[1];
    int pi = t->param == RF_PARAM_WEIGHT ? rf_inventory_find(inv, t->name) : -1;
    if (pi < 0) {
        char sib[RF_NAME_MAX];
        snprintf(sib, sizeof(sib), "%.*s.%s", (int)(dot - t->name), t->name,
                 m->quant == RF_QUANT_FP8_BLOCK ? "weight" : "weight_packed");
        int si = rf_inventory_find(inv, sib);
        if (si < 0)
            return false;
        n = inv->tensors[si].shape[0];
        k = inv->tensors[si].shape[1] * (m->quant == RF_QUANT_WNA16 ? 8 : 1);
    }
    return (int64_t)se->shape[0] == n && (int64_t)se->shape[1] == k;
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
    char name[RF_NAME_MAX];
    const rf_st_entry_t *se;
    if (inv->modules[t->module].quant == RF_QUANT_NONE || t->param == RF_PARAM_BIAS)
        return false;
    if (ck == NULL)
        return true; /* generator: the reference quantizer on the generator's bf16 */
    se = rf_ckpt_find(ck, t->name);
    if (se != NULL && se->dtype != inv->cfg.dtype)
        return false; /* stored quantized */
    return logical_source(inv, t, ck, name, sizeof(name));
}

/* One inventory tensor against the checkpoint headers; sets the entry's dtype from the header
 * where the format allows a difference (DESIGN.md section 7). */
static rf_status_t manifest_check_ckpt(const rf_inventory_t *inv, const rf_tensor_t *t,
                                       const rf_ckpt_t *ck, const char *ck_dir,
                                       rf_manifest_entry_t *e, rf_err_t *err)
{
    const rf_st_entry_t *se = rf_ckpt_find(ck, t->name);
    if (rf_manifest_trainer_quantizes(inv, t, ck))
        return RF_OK; /* bf16 source quantized on the trainer: inventory dtypes */
    if (se == NULL)
        return rf_err_set(err, RF_ERR_MISSING, "checkpoint %s: tensor %s is missing", ck_dir,
                          t->name);
    bool same = se->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
        same = (int64_t)se->shape[d] == t->shape[d];
    if (!same)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "checkpoint %s: tensor %s has a different shape than the model config "
                          "implies",
                          ck_dir, t->name);
    if (se->dtype == t->dtype)
        return RF_OK;
    if (t->param == RF_PARAM_WEIGHT_SCALE_INV &&
        (se->dtype == RF_DTYPE_BF16 || se->dtype == RF_DTYPE_F16)) {
        e->dtype = se->dtype; /* converted exactly to the fp32 runtime scale by the loader */
        e->nbytes = t->numel * rf_dtype_size(se->dtype);
        return RF_OK;
    }
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

rf_status_t rf_manifest_build(const rf_inventory_t *inv, const rf_topology_t *topo,
                              const rf_ckpt_t *ck, const char *ck_dir, rf_manifest_t *man_p,
                              rf_err_t *err)
{
    rf_manifest_t man;
    memset(&man, 0, sizeof(man));
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
        }
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

size_t rf_manifest_serialize(const rf_manifest_t *man, char *buf, size_t cap)
{
    size_t len = 0;
    for (int i = 0; i < man->n; i++) {
        const rf_manifest_entry_t *e = &man->entries[i];
        char line[RF_NAME_MAX + 256], dims[160] = "";
        size_t dl = 0;
        for (int d = 0; d < e->ndim; d++)
            dl += (size_t)snprintf(dims + dl, sizeof(dims) - dl, "%s%" PRId64, d ? "x" : "",
                                   e->shape[d]);
        int n = snprintf(line, sizeof(line), "%s %s %d:%s %d %d %d\n", e->name,
                         rf_dtype_name(e->dtype), e->ndim, dims, e->stage, e->layer, e->expert);
        if (buf != NULL && len + (size_t)n < cap)
            memcpy(buf + len, line, (size_t)n);
        len += (size_t)n;
    }
    if (buf != NULL && cap > 0)
        buf[len < cap ? len : cap - 1] = '\0';
    return len;
}

rf_status_t rf_manifest_parse(const char *buf, size_t len, rf_manifest_t *man_p, rf_err_t *err)
{
    rf_manifest_t man;
    int lines = 0;
    memset(&man, 0, sizeof(man));
    for (size_t i = 0; i < len; i++)
        lines += buf[i] == '\n';
    man.entries = calloc((size_t)lines + 1, sizeof(rf_manifest_entry_t));
    if (man.entries == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "manifest: out of memory");
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        char line[RF_NAME_MAX + 256], dt[32], dims[160];
        size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
        rf_manifest_entry_t *e = &man.entries[man.n];
        if (ll >= sizeof(line))
            goto bad;
        memcpy(line, p, ll);
        line[ll] = '\0';
        dims[0] = '\0';
        if (sscanf(line, "%159s %31s %d:%159s %d %d %d", e->name, dt, &e->ndim, dims, &e->stage,
                   &e->layer, &e->expert) != 7) {
            /* a 0-D tensor has an empty dims field */
            if (sscanf(line, "%159s %31s %d: %d %d %d", e->name, dt, &e->ndim, &e->stage,
                       &e->layer, &e->expert) != 6 ||
                e->ndim != 0)
                goto bad;
        }
        e->dtype = rf_dtype_parse(dt);
        if (e->dtype == RF_DTYPE_INVALID || e->ndim < 0 || e->ndim > RF_MAX_DIMS)
            goto bad;
        uint64_t numel = 1;
        char *q = dims;
        for (int d = 0; d < e->ndim; d++) {
            e->shape[d] = strtoll(q, &q, 10);
            if (e->shape[d] < 0 || (d + 1 < e->ndim && *q++ != 'x'))
                goto bad;
            numel *= (uint64_t)e->shape[d];
        }
        e->nbytes = numel * rf_dtype_size(e->dtype);
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
        bool dt_ok = t->dtype == e->dtype ||
                     (t->param == RF_PARAM_WEIGHT_SCALE_INV &&
                      (e->dtype == RF_DTYPE_BF16 || e->dtype == RF_DTYPE_F16)) ||
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
