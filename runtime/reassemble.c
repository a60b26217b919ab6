/*
 * refit: reassembly of checkpoint tensors from one engine's rollout slots (DESIGN.md
 * section 12, --reference).
 *
 * For each checkpoint tensor in inventory order, every rank of the engine scans the slots of
 * the receiving module with the reference locator (runtime/verify.c), packs the elements it
 * holds as runs of consecutive checkpoint indices plus their bytes, and sends them to engine
 * rank 0 point to point. Rank 0 writes them into the tensor in checkpoint layout with a
 * per-element "seen" map: a second copy must be byte-equal (replicated k/v heads, replicated
 * tensors, row-parallel biases, dp replicas), every element must arrive, and vocab padding
 * must be zero. Rank 0 then broadcasts the verdict, so every rank returns the same status.
 * Quantized tensors travel the same way (their slots are located like any other); wna16
 * weight_shape tensors have no slot and are regenerated on rank 0 from the inventory; a target
 * dtype per tensor (the file's) converts f32 runtime FP8 scales back to bf16 / fp16 exactly.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/verify.h"

#define RA_TAG_HDR 7301
#define RA_TAG_RUNS 7302
#define RA_TAG_VALS 7303
#define RA_PIECE (1ull << 30) /* MPI counts are int: send big buffers in pieces */

typedef struct ra_hdr {
    int32_t status; /* this rank's local status (rf_status_t) */
    int32_t reserved;
    uint64_t nruns;
    uint64_t nvals;   /* elements */
    uint64_t pad_bad; /* non-zero padding elements seen */
    uint64_t pad_first;
    char msg[RF_ERR_MSG_MAX];
} ra_hdr_t;

typedef struct ra_run {
    uint64_t start, len;
} ra_run_t;

typedef struct ra_verdict {
    int32_t status;
    char msg[RF_ERR_MSG_MAX];
} ra_verdict_t;

/* This rank's contribution to one tensor (buffers reused across tensors). */
typedef struct ra_local {
    ra_hdr_t hdr;
    ra_run_t *runs;
    size_t runs_cap;
    unsigned char *vals;
    size_t vals_cap; /* bytes */
} ra_local_t;

/* Locators of the current module, one per slot. */
typedef struct ra_module_cache {
    int module;
    int nslots;
    rf_ref_locator_t *loc[RF_MODULE_MAX_SLOTS];
} ra_module_cache_t;

static void cache_clear(ra_module_cache_t *c)
{
    for (int s = 0; s < c->nslots; s++)
        rf_ref_locator_destroy(c->loc[s]);
    memset(c, 0, sizeof(*c));
    c->module = -1;
}

static rf_status_t cache_get(ra_module_cache_t *c, const rf_inventory_t *inv, int module,
                             const rf_rollout_coords_t *rc, rf_err_t *err)
{
    rf_slot_shape_t shapes[RF_MODULE_MAX_SLOTS];
    int n = 0;
    if (c->module == module)
        return RF_OK;
    cache_clear(c);
    RF_CHECK(rf_module_slots(inv, module, rc, shapes, &n, err));
    for (int s = 0; s < n; s++) {
        rf_status_t st = rf_ref_locator_create(inv, module, s, rc, &c->loc[s], err);
        if (st != RF_OK) {
            cache_clear(c);
            return st;
        }
        c->nslots = s + 1;
    }
    c->module = module;
    return RF_OK;
}

static int grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static void local_fail(ra_local_t *lc, rf_status_t st, const rf_err_t *e)
{
    lc->hdr.status = st;
    snprintf(lc->hdr.msg, sizeof(lc->hdr.msg), "%s", e->msg);
    lc->hdr.nruns = lc->hdr.nvals = 0;
}

/* Packs the elements of tensor t that this rank's slots hold. Errors go into lc->hdr. */
static void local_collect(const rf_inventory_t *inv, int t, const rf_rollout_coords_t *rc,
                          ra_module_cache_t *cache, rf_slot_bytes_fn slot_bytes, void *ctx,
                          ra_local_t *lc)
{
    const rf_tensor_t *tt = &inv->tensors[t];
    size_t es = rf_dtype_size(tt->dtype);
    rf_err_t e;
    rf_err_clear(&e);
    memset(&lc->hdr, 0, sizeof(lc->hdr));
    rf_status_t st = cache_get(cache, inv, tt->module, rc, &e);
    if (st != RF_OK) {
        local_fail(lc, st, &e);
        return;
    }
    for (int s = 0; s < cache->nslots; s++) {
        const rf_ref_locator_t *l = cache->loc[s];
        uint64_t b, end;
        rf_ref_locator_range(l, t, &b, &end);
        if (b == end)
            continue;
        if (rf_ref_locator_shape(l)->dtype != tt->dtype) {
            rf_err_set(&e, RF_ERR_MISMATCH, "reassemble: %s is %s but its slot is %s", tt->name,
                       rf_dtype_name(tt->dtype), rf_dtype_name(rf_ref_locator_shape(l)->dtype));
            local_fail(lc, RF_ERR_MISMATCH, &e);
            return;
        }
        const unsigned char *sb = slot_bytes(ctx, tt->module, s);
        if (sb == NULL) {
            rf_err_set(&e, RF_ERR_MISSING, "reassemble: no bytes for slot %d of %s", s,
                       inv->modules[tt->module].name);
            local_fail(lc, RF_ERR_MISSING, &e);
            return;
        }
        if (grow((void **)&lc->vals, &lc->vals_cap, (lc->hdr.nvals + (end - b)) * es) != 0) {
            rf_err_set(&e, RF_ERR_NOMEM, "reassemble: out of memory for %s", tt->name);
            local_fail(lc, RF_ERR_NOMEM, &e);
            return;
        }
        for (uint64_t x = b; x < end; x++) {
            rf_ref_elem_t r;
            rf_ref_locator_at(l, x, &r);
            if (r.kind == RF_REF_PAD) {
                for (size_t k = 0; k < es; k++)
                    if (sb[x * es + k] != 0) {
                        if (lc->hdr.pad_bad++ == 0)
                            lc->hdr.pad_first = x;
                        break;
                    }
                continue;
            }
            if (r.tensor != t)
                continue;
            ra_run_t *last = lc->hdr.nruns ? &lc->runs[lc->hdr.nruns - 1] : NULL;
            if (last != NULL && last->start + last->len == r.index) {
                last->len++;
            } else {
                size_t cap_bytes = lc->runs_cap * sizeof(ra_run_t);
                if (grow((void **)&lc->runs, &cap_bytes, (lc->hdr.nruns + 1) * sizeof(ra_run_t))) {
                    rf_err_set(&e, RF_ERR_NOMEM, "reassemble: out of memory for %s", tt->name);
                    local_fail(lc, RF_ERR_NOMEM, &e);
                    return;
                }
                lc->runs_cap = cap_bytes / sizeof(ra_run_t);
                lc->runs[lc->hdr.nruns++] = (ra_run_t){r.index, 1};
            }
            memcpy(lc->vals + lc->hdr.nvals * es, sb + x * es, es);
            lc->hdr.nvals++;
        }
    }
}

static int big_send(const void *buf, uint64_t n, int dst, int tag, MPI_Comm comm)
{
    const unsigned char *p = buf;
    while (n > 0) {
        int c = (int)(n < RA_PIECE ? n : RA_PIECE);
        if (MPI_Send(p, c, MPI_BYTE, dst, tag, comm) != MPI_SUCCESS)
            return -1;
        p += c;
        n -= (uint64_t)c;
    }
    return 0;
}

static int big_recv(void *buf, uint64_t n, int src, int tag, MPI_Comm comm)
{
    unsigned char *p = buf;
    while (n > 0) {
        int c = (int)(n < RA_PIECE ? n : RA_PIECE);
        if (MPI_Recv(p, c, MPI_BYTE, src, tag, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return -1;
        p += c;
        n -= (uint64_t)c;
    }
    return 0;
}

/* Root: applies one rank's contribution to the tensor under assembly. */
static rf_status_t root_apply(const rf_tensor_t *tt, const ra_hdr_t *h, const ra_run_t *runs,
                              const unsigned char *vals, int src, unsigned char *full,
                              unsigned char *seen, rf_err_t *err)
{
    size_t es = rf_dtype_size(tt->dtype);
    uint64_t v = 0;
    if (h->status != RF_OK)
        return rf_err_set(err, (rf_status_t)h->status, "engine rank %d: %s", src, h->msg);
    if (h->pad_bad > 0)
        return rf_err_set(err, RF_ERR_VERIFY,
                          "reassemble: %s: engine rank %d has %llu non-zero vocab padding "
                          "elements (first at slot element %llu)",
                          tt->name, src, (unsigned long long)h->pad_bad,
                          (unsigned long long)h->pad_first);
    for (uint64_t i = 0; i < h->nruns; i++) {
        if (runs[i].start + runs[i].len > tt->numel || runs[i].len > h->nvals - v)
            return rf_err_set(err, RF_ERR_INTERNAL,
                              "reassemble: %s: engine rank %d sent a run "
                              "outside the tensor",
                              tt->name, src);
        for (uint64_t k = 0; k < runs[i].len; k++, v++) {
            uint64_t idx = runs[i].start + k;
            const unsigned char *x = vals + v * es;
            if (seen[idx]) {
                if (memcmp(full + idx * es, x, es) != 0)
                    return rf_err_set(err, RF_ERR_VERIFY,
                                      "reassemble: %s: replicas differ at element %llu (engine "
                                      "rank %d disagrees with an earlier copy)",
                                      tt->name, (unsigned long long)idx, src);
            } else {
                memcpy(full + idx * es, x, es);
                seen[idx] = 1;
            }
        }
    }
    return RF_OK;
}

static int ends_with(const char *s, const char *sfx)
{
    size_t n = strlen(s), k = strlen(sfx);
    return n >= k && strcmp(s + n - k, sfx) == 0;
}

/* Root: a wna16 `<P>.weight_shape` from the inventory, [N, K] int64, N and K from
 * `<P>.weight_packed` (N, K/8). */
static rf_status_t regen_shape(const rf_inventory_t *inv, const rf_tensor_t *tt,
                               unsigned char *full, rf_err_t *err)
{
    char name[RF_NAME_MAX + 16];
    size_t n = strlen(tt->name) - strlen(".weight_shape");
    snprintf(name, sizeof(name), "%.*s.weight_packed", (int)n, tt->name);
    int p = rf_inventory_find(inv, name);
    if (p < 0 || inv->tensors[p].ndim != 2 || tt->dtype != RF_DTYPE_I64 || tt->numel != 2)
        return rf_err_set(err, RF_ERR_MISSING,
                          "reassemble: %s: no 2-D %s to take [N, K] from, or not int64 [2]",
                          tt->name, name);
    int64_t v[2] = {inv->tensors[p].shape[0], inv->tensors[p].shape[1] * 8};
    memcpy(full, v, sizeof(v));
    return RF_OK;
}

/* IEEE binary16 bits of f when f is exactly representable, else -1. */
static int f32_to_f16_exact(float f, uint16_t *out)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (isnan(f))
        return -1;
    if (isinf(f)) {
        *out = sign | 0x7c00u;
        return 0;
    }
    if (a == 0.0f) {
        *out = sign;
        return 0;
    }
    if (a < ldexpf(1.0f, -14)) { /* subnormal: m 2^-24, m < 1024 */
        float m = ldexpf(a, 24);
        if (m != floorf(m))
            return -1;
        *out = sign | (uint16_t)m;
        return 0;
    }
    int e = (int)((u >> 23) & 0xffu) - 127;
    if (e > 15 || (u & 0x1fffu) != 0)
        return -1;
    *out = sign | (uint16_t)((e + 15) << 10) | (uint16_t)((u >> 13) & 0x3ffu);
    return 0;
}

/* Root: tensor bytes in dtype `dt` from the assembled bytes in tt->dtype. */
static rf_status_t convert_to(const rf_tensor_t *tt, rf_dtype_t dt, const unsigned char *full,
                              unsigned char *out, rf_err_t *err)
{
    for (uint64_t i = 0; i < tt->numel; i++) {
        if (tt->dtype == RF_DTYPE_F32 && (dt == RF_DTYPE_BF16 || dt == RF_DTYPE_F16)) {
            float f;
            uint16_t h;
            memcpy(&f, full + i * 4, 4);
            int ok;
            if (dt == RF_DTYPE_BF16) {
                h = rf_f32_to_bf16(f);
                float back = rf_bf16_to_f32(h);
                ok = !isnan(f) && memcmp(&back, &f, 4) == 0;
            } else {
                ok = f32_to_f16_exact(f, &h) == 0;
            }
            if (!ok)
                return rf_err_set(err, RF_ERR_VERIFY,
                                  "reassemble: %s element %llu = %.9g is not exactly a %s value",
                                  tt->name, (unsigned long long)i, (double)f, rf_dtype_name(dt));
            memcpy(out + i * 2, &h, 2);
        } else if (tt->dtype == RF_DTYPE_I64 && dt == RF_DTYPE_I32) {
            int64_t v;
            memcpy(&v, full + i * 8, 8);
            if (v < INT32_MIN || v > INT32_MAX)
                return rf_err_set(err, RF_ERR_VERIFY,
                                  "reassemble: %s element %llu = %lld does not fit int32", tt->name,
                                  (unsigned long long)i, (long long)v);
            int32_t w = (int32_t)v;
            memcpy(out + i * 4, &w, 4);
        } else {
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "reassemble: %s: no conversion from %s to %s", tt->name,
                              rf_dtype_name(tt->dtype), rf_dtype_name(dt));
        }
    }
    return RF_OK;
}

rf_status_t rf_reassemble(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                          MPI_Comm engine_comm, rf_slot_bytes_fn slot_bytes,
                          rf_tensor_done_fn tensor_done, void *ctx, rf_err_t *err)
{
    return rf_reassemble_ex(inv, rc, engine_comm, slot_bytes, tensor_done, ctx, NULL, err);
}

rf_status_t rf_reassemble_ex(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                             MPI_Comm engine_comm, rf_slot_bytes_fn slot_bytes,
                             rf_tensor_done_fn tensor_done, void *ctx,
                             const rf_reassemble_opts_t *opts, rf_err_t *err)
{
    int rank, size, ok, all_ok;
    rf_status_t st = RF_OK;
    ra_local_t lc;
    ra_module_cache_t cache;
    ra_verdict_t verdict;
    unsigned char *full = NULL, *seen = NULL, *rvals = NULL, *conv = NULL;
    ra_run_t *rruns = NULL;
    size_t full_cap = 0, seen_cap = 0, rvals_cap = 0, rruns_cap = 0, conv_cap = 0;

    if (MPI_Comm_rank(engine_comm, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(engine_comm, &size) != MPI_SUCCESS)
        return rf_err_set(err, RF_ERR_MPI, "reassemble: bad engine communicator");
    ok = inv != NULL && rc != NULL && slot_bytes != NULL && size == rc->tp * rc->dp &&
         rank == rc->dp_rank * rc->tp + rc->tp_rank;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, engine_comm) != MPI_SUCCESS)
        return rf_err_set(err, RF_ERR_MPI, "reassemble: MPI_Allreduce failed");
    if (!all_ok)
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "reassemble: the engine communicator (%d ranks) must hold the tp x dp "
                          "ranks in order dp_rank tp + tp_rank (this is rank %d)",
                          size, rank);
    memset(&lc, 0, sizeof(lc));
    memset(&cache, 0, sizeof(cache));
    cache.module = -1;

    for (int t = 0; t < inv->ntensors && st == RF_OK; t++) {
        const rf_tensor_t *tt = &inv->tensors[t];
        size_t es = rf_dtype_size(tt->dtype);
        /* wna16 weight_shape: no slot holds it, rank 0 regenerates it (DESIGN.md 7) */
        int regen = ends_with(tt->name, ".weight_shape");
        rf_err_t e;
        rf_err_clear(&e);
        local_collect(inv, t, rc, &cache, slot_bytes, ctx, &lc);
        memset(&verdict, 0, sizeof(verdict));
        if (rank != 0) {
            if (MPI_Send(&lc.hdr, sizeof(lc.hdr), MPI_BYTE, 0, RA_TAG_HDR, engine_comm) !=
                    MPI_SUCCESS ||
                big_send(lc.runs, lc.hdr.nruns * sizeof(ra_run_t), 0, RA_TAG_RUNS, engine_comm) !=
                    0 ||
                big_send(lc.vals, lc.hdr.nvals * es, 0, RA_TAG_VALS, engine_comm) != 0)
                return rf_err_set(err, RF_ERR_MPI, "reassemble: send to engine rank 0 failed");
        } else {
            rf_status_t rs = RF_OK;
            if (grow((void **)&full, &full_cap, tt->nbytes) != 0 ||
                grow((void **)&seen, &seen_cap, tt->numel) != 0)
                rs = rf_err_set(&e, RF_ERR_NOMEM, "reassemble: out of memory for %s", tt->name);
            if (rs == RF_OK) {
                memset(seen, 0, tt->numel);
                rs = root_apply(tt, &lc.hdr, lc.runs, lc.vals, 0, full, seen, &e);
            }
            /* receive every rank's contribution even after an error, to keep the protocol */
            for (int src = 1; src < size; src++) {
                ra_hdr_t h;
                if (MPI_Recv(&h, sizeof(h), MPI_BYTE, src, RA_TAG_HDR, engine_comm,
                             MPI_STATUS_IGNORE) != MPI_SUCCESS)
                    return rf_err_set(err, RF_ERR_MPI, "reassemble: receive from %d failed", src);
                size_t rb = h.nruns * sizeof(ra_run_t);
                if (grow((void **)&rruns, &rruns_cap, rb) != 0 ||
                    grow((void **)&rvals, &rvals_cap, h.nvals * es) != 0)
                    return rf_err_set(err, RF_ERR_NOMEM, "reassemble: out of memory for %s",
                                      tt->name);
                if (big_recv(rruns, rb, src, RA_TAG_RUNS, engine_comm) != 0 ||
                    big_recv(rvals, h.nvals * es, src, RA_TAG_VALS, engine_comm) != 0)
                    return rf_err_set(err, RF_ERR_MPI, "reassemble: receive from %d failed", src);
                if (rs == RF_OK)
                    rs = root_apply(tt, &h, rruns, rvals, src, full, seen, &e);
            }
            if (rs == RF_OK && regen) {
                rs = regen_shape(inv, tt, full, &e);
            } else if (rs == RF_OK) {
                uint64_t missing = 0, first = 0;
                for (uint64_t i = 0; i < tt->numel; i++)
                    if (!seen[i] && missing++ == 0)
                        first = i;
                if (missing > 0)
                    rs = rf_err_set(&e, RF_ERR_VERIFY,
                                    "reassemble: %s: %llu of %llu elements held by no rank "
                                    "(first %llu)",
                                    tt->name, (unsigned long long)missing,
                                    (unsigned long long)tt->numel, (unsigned long long)first);
            }
            rf_dtype_t td = RF_DTYPE_INVALID;
            if (rs == RF_OK && opts != NULL && opts->target_dtype != NULL)
                td = opts->target_dtype(ctx, t);
            if (rs == RF_OK && td != RF_DTYPE_INVALID && td != tt->dtype) {
                size_t nb = tt->numel * rf_dtype_size(td);
                if (grow((void **)&conv, &conv_cap, nb ? nb : 1) != 0)
                    rs = rf_err_set(&e, RF_ERR_NOMEM, "reassemble: out of memory for %s", tt->name);
                else
                    rs = convert_to(tt, td, full, conv, &e);
                if (rs == RF_OK && tensor_done != NULL)
                    tensor_done(ctx, t, conv, nb);
            } else if (rs == RF_OK && tensor_done != NULL) {
                tensor_done(ctx, t, full, tt->nbytes);
            }
            verdict.status = rs;
            snprintf(verdict.msg, sizeof(verdict.msg), "%s", e.msg);
        }
        if (MPI_Bcast(&verdict, sizeof(verdict), MPI_BYTE, 0, engine_comm) != MPI_SUCCESS)
            return rf_err_set(err, RF_ERR_MPI, "reassemble: MPI_Bcast failed");
        if (verdict.status != RF_OK) {
            st = (rf_status_t)verdict.status;
            if (rank == 0)
                rf_err_set(err, st, "%s", verdict.msg);
            else
                rf_err_set(err, st, "%s (decided on engine rank 0)", verdict.msg);
        }
    }
    cache_clear(&cache);
    free(lc.runs);
    free(lc.vals);
    free(full);
    free(conv);
    free(seen);
    free(rruns);
    free(rvals);
    return st;
}
