/*
 * refit: the reload planner's per-piece path (see include/refit/plan.h and DESIGN.md section
 * 8): rf_plan_apply, the one entry for every piece source (host or device memory, full-width
 * rows or a p2p column window), is one hash lookup, a cursor check and a loader call, with no
 * scan over other layers and no log line; around it the chunk staging (rf_plan_stage), the
 * batched device row copies (rf_plan_flush), the deferred weight_shape checks
 * (rf_plan_check), finalize with its deferred stage, abort, the device scratch pool, the
 * device timeline and rf_plan_free. The decisions and rebuilds are runtime/plan_build.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_int.h"
#include "refit/hashmap.h"
#include "refit/log.h"
#include "refit/plan.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The accelerator writes go through (the host ops for host storage). */
static rf_accel_t *plan_ax(rf_plan_t *p)
{
    return p->dev ? p->st->accel : &p->host_ax;
}

/* Device LAYERWISE scratch comes from a pool kept for the plan's life: cudaMalloc / cudaFree in
 * the update path would cost an allocation and a device-wide synchronization (cudaFree) per
 * LAYERWISE layer. A buffer handed back is reused by a later layer; the reuse is ordered after
 * its previous readers because every scratch write and read is on the accelerator's stream. */
static void scratch_free(rf_plan_t *p, void *buf)
{
    if (buf == NULL)
        return;
    if (!p->dev) {
        free(buf);
        return;
    }
    for (size_t i = 0; i < p->npool; i++)
        if (p->pool[i].ptr == buf) {
            p->pool[i].busy = false;
            return;
        }
    p->st->accel->ops->free(p->st->accel, buf); /* not from the pool */
}

/* A device scratch buffer of at least b bytes: the smallest free pooled one, else a new one. */
static rf_status_t scratch_get(rf_plan_t *p, size_t b, void **out, bool *fresh)
{
    *fresh = false;
    rf_accel_t *ax = p->st->accel;
    size_t best = p->npool;
    for (size_t i = 0; i < p->npool; i++)
        if (!p->pool[i].busy && p->pool[i].bytes >= b &&
            (best == p->npool || p->pool[i].bytes < p->pool[best].bytes))
            best = i;
    if (best == p->npool) {
        if (p->npool == p->pool_cap) {
            size_t cap = p->pool_cap ? 2 * p->pool_cap : 16;
            rf_scratch_buf_t *g = realloc(p->pool, cap * sizeof(*g));
            if (g == NULL)
                return RF_ERR_NOMEM;
            p->pool = g;
            p->pool_cap = cap;
        }
        void *ptr = NULL;
        RF_CHECK(ax->ops->alloc(ax, b, &ptr));
        p->pool[p->npool++] = (rf_scratch_buf_t){ptr, b, false};
        *fresh = true;
    }
    p->pool[best].busy = true;
    *out = p->pool[best].ptr;
    return RF_OK;
}

/* Frees every pooled buffer (plan free; the caller synchronized the stream). */
static void scratch_pool_free(rf_plan_t *p)
{
    for (size_t i = 0; i < p->npool; i++)
        p->st->accel->ops->free(p->st->accel, p->pool[i].ptr);
    free(p->pool);
    p->pool = NULL;
    p->npool = p->pool_cap = 0;
}

static void plan_free_scratch(rf_plan_t *p)
{
    for (int m = 0; m < p->nlayers; m++)
        for (int i = 0; i < RF_MODULE_MAX_SLOTS; i++) {
            scratch_free(p, p->layers[m].scratch[i]);
            p->layers[m].scratch[i] = NULL;
        }
}

static void tl_free(rf_plan_t *p);

static void stage_free(rf_plan_t *p)
{
    for (int k = 0; k < 2; k++) {
        if (p->stage_ev[k])
            p->st->accel->ops->event_destroy(p->stage_ev[k]);
        if (p->stage_buf[k])
            p->st->accel->ops->free(p->st->accel, p->stage_buf[k]);
        p->stage_ev[k] = NULL;
        p->stage_buf[k] = NULL;
        p->stage_cap[k] = 0;
        p->stage_used[k] = false;
    }
    p->stage_host = NULL;
    p->stage_bytes = 0;
}

void rf_plan_free(rf_plan_t *p)
{
    if (p == NULL)
        return;
    if (p->layers)
        plan_free_scratch(p);
    if (p->dev) {
        (void)rf_accel_sync(p->st->accel);
        scratch_pool_free(p);
        stage_free(p);
        tl_free(p);
    }
    free(p->layers);
    free(p->apps);
    free(p->app_of_tensor);
    free(p->tensor_apps);
    free(p->sigs);
    free(p->batch);
    free(p->lw_q);
    free(p->shape_q);
    if (p->shape_host)
        p->st->accel->ops->free_host(p->st->accel, p->shape_host);
    if (p->app_index) {
        rf_map_free(p->app_index);
        free(p->app_index);
    }
    memset(p, 0, sizeof(*p));
}

/* ---- device timeline (REFIT_DEVICE_TIMELINE=1) ------------------------------------------ */

/* Records the start of a span of kind on the accelerator's stream; returns its index, or -1
 * (timeline off, or no event: the timeline is a diagnostic and never fails an update). */
static long tl_begin(rf_plan_t *p, int kind)
{
    rf_plan_timeline_t *t = &p->tl;
    if (!t->on)
        return -1;
    rf_accel_t *ax = p->st->accel;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 128;
        rf_plan_span_t *g = realloc(t->span, cap * sizeof(*g));
        if (g == NULL)
            return -1;
        memset(g + t->cap, 0, (cap - t->cap) * sizeof(*g));
        t->span = g;
        t->cap = cap;
    }
    rf_plan_span_t *g = &t->span[t->n];
    for (int k = 0; k < 2; k++)
        if (g->ev[k] == NULL && ax->ops->event_create(ax, &g->ev[k]) != RF_OK)
            return -1;
    if (ax->ops->event_record(g->ev[0], NULL) != RF_OK)
        return -1;
    if (t->n == 0)
        t->t_first = cpu_now();
    g->kind = kind;
    g->bytes = 0;
    return (long)t->n++;
}

static void tl_end(rf_plan_t *p, long i, uint64_t bytes)
{
    if (i < 0)
        return;
    rf_plan_timeline_t *t = &p->tl;
    t->span[i].bytes = bytes;
    if (p->st->accel->ops->event_record(t->span[i].ev[1], NULL) != RF_OK)
        t->n = (size_t)i; /* drop it */
}

/* Timeline mark k: 0 at rf_plan_begin (host time; the first span's launch ends the lead), 1
 * at rf_plan_finalize's entry, an event on the stream: the stream is then synchronized, which
 * submits it at once, so on an idle device it completes when the host got there (tail). */
void rf_plan_tl_mark(rf_plan_t *p, int k)
{
    rf_plan_timeline_t *t = &p->tl;
    if (!t->on)
        return;
    if (k == 0) {
        t->t_begin = cpu_now();
        t->t_first = 0;
        return;
    }
    rf_accel_t *ax = p->st->accel;
    t->marked = (t->mark != NULL || ax->ops->event_create(ax, &t->mark) == RF_OK) &&
                ax->ops->event_record(t->mark, NULL) == RF_OK;
}

/* Sums the spans of the update (the stream has drained). */
static void tl_sum(rf_plan_t *p)
{
    rf_plan_timeline_t *t = &p->tl;
    rf_plan_dev_stats_t *s = &p->stats.dev;
    const rf_accel_ops_t *o = p->st->accel->ops;
    memset(s, 0, sizeof(*s));
    s->timeline = t->on;
    s->spans = t->n;
    for (size_t i = 0; i < t->n; i++) {
        const rf_plan_span_t *g = &t->span[i];
        float ms = 0, gap = 0;
        if (o->event_elapsed_ms(g->ev[0], g->ev[1], &ms) != RF_OK)
            continue;
        if (g->kind == 0) {
            s->copy_ms += ms;
            s->copy_bytes += g->bytes;
        } else if (g->kind == 1) {
            s->layerwise_ms += ms;
        } else {
            s->other_ms += ms;
        }
        if (i > 0 && o->event_elapsed_ms(t->span[i - 1].ev[1], g->ev[0], &gap) == RF_OK &&
            gap > 0)
            s->idle_ms += gap;
    }
    float span = 0, tail = 0;
    if (t->n > 0 &&
        o->event_elapsed_ms(t->span[0].ev[0], t->span[t->n - 1].ev[1], &span) == RF_OK)
        s->span_ms = span;
    if (t->n > 0 && t->t_first > t->t_begin && t->t_begin > 0)
        s->lead_ms = (t->t_first - t->t_begin) * 1e3;
    if (t->n > 0 && t->marked &&
        o->event_elapsed_ms(t->span[t->n - 1].ev[1], t->mark, &tail) == RF_OK && tail > 0)
        s->tail_ms = tail;
    t->n = 0;
    t->marked = false;
}

static void tl_free(rf_plan_t *p)
{
    rf_plan_timeline_t *t = &p->tl;
    for (size_t i = 0; i < t->cap; i++)
        for (int k = 0; k < 2; k++)
            if (t->span[i].ev[k] != NULL)
                p->st->accel->ops->event_destroy(t->span[i].ev[k]);
    if (t->mark != NULL)
        p->st->accel->ops->event_destroy(t->mark);
    free(t->span);
    memset(t, 0, sizeof(*t));
}

static rf_status_t layer_process(rf_plan_t *p, rf_layer_t *L, rf_err_t *err);

rf_status_t rf_plan_flush(rf_plan_t *p, rf_err_t *err)
{
    if (p->nbatch == 0)
        return RF_OK;
    rf_accel_t *ax = plan_ax(p);
    size_t n = p->nbatch;
    p->nbatch = 0;
    long ti = tl_begin(p, 0);
    rf_status_t st = ax->ops->copy_rows_batch(ax, p->batch, n, NULL);
    if (ti >= 0) {
        uint64_t b = 0;
        for (size_t i = 0; i < n; i++)
            b += (uint64_t)(p->batch[i].rows * p->batch[i].cols) * p->batch[i].dst.esize;
        tl_end(p, ti, b);
    }
    if (st != RF_OK)
        return rf_err_set(err, st, "plan: update %u: launching %zu device row copies on %s "
                          "device %d failed", p->update, n, ax->ops->name, ax->device);
    p->batch_launches++;
    p->batch_rows += n;
    /* the LAYERWISE layers completed by these copies, in completion order */
    size_t nlw = p->nlw;
    p->nlw = 0;
    for (size_t i = 0; i < nlw; i++)
        RF_CHECK(layer_process(p, &p->layers[p->lw_q[i]], err));
    return RF_OK;
}

/* Collects one device-to-device row copy for rf_plan_flush. */
static rf_status_t batch_add(rf_plan_t *p, const rf_accel_rows_t *rows, rf_err_t *err)
{
    if (p->nbatch == p->batch_cap) {
        size_t cap = p->batch_cap ? 2 * p->batch_cap : 256;
        rf_accel_rows_t *b = realloc(p->batch, cap * sizeof(*b));
        if (b == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
        p->batch = b;
        p->batch_cap = cap;
    }
    p->batch[p->nbatch++] = *rows;
    return RF_OK;
}

/* process_after_loading of a LAYERWISE layer whose model-layout scratch is complete (every
 * copy into it enqueued ahead on the stream), then its scratch back to the pool. */
static rf_status_t layer_process(rf_plan_t *p, rf_layer_t *L, rf_err_t *err)
{
    rf_slot_t *rt[RF_MODULE_MAX_SLOTS];
    double t0 = cpu_now();
    int nrt = plan_layer_runtime(p, L->module, rt);
    long ti = p->dev ? tl_begin(p, 1) : -1;
    rf_status_t st = p->fmt->ops->process_after_loading(p->fmt, p->inv, L->module, L->model,
                                                        L->scratch, L->nmodel, rt, nrt, err);
    tl_end(p, ti, 0);
    for (int i = 0; i < L->nmodel; i++) {
        scratch_free(p, L->scratch[i]);
        L->scratch[i] = NULL;
    }
    p->stats.layerwise_runs++;
    p->stats.layerwise_s += cpu_now() - t0;
    return st;
}

static rf_status_t layer_complete(rf_plan_t *p, rf_layer_t *L, rf_err_t *err)
{
    const rf_module_t *mod = &p->inv->modules[L->module];
    L->complete = true;
    if (mod->kind == RF_MOD_VOCAB) {
        int64_t first, cols;
        uint64_t n = rf_load_vocab_pad_rows(p->inv, &p->rc, L->module, &first, &cols);
        rf_accel_t *ax = plan_ax(p);
        rf_accel_dst_t d = rf_accel_dst_from(&L->dst[0]);
        long ti = n ? tl_begin(p, 2) : -1;
        rf_status_t zs = n ? ax->ops->zero_rows(ax, &d, first, (int64_t)n, cols, NULL) : RF_OK;
        tl_end(p, ti, 0);
        if (zs != RF_OK)
            return rf_err_set(err, zs, "plan: vocab padding of %s on %s device %d failed",
                              mod->name, ax->ops->name, ax->device);
    }
    if (L->mode != RF_PLAN_LAYERWISE)
        return RF_OK;
    if (p->nbatch == 0) /* its copies are enqueued already (or ran: host storage, staging) */
        return layer_process(p, L, err);
    /* processing reads what the batched copies write: it runs after the chunk's launch */
    if (p->lw_q == NULL && (p->lw_q = malloc((size_t)p->nlayers * sizeof(int))) == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
    p->lw_q[p->nlw++] = (int)(L - p->layers);
    return RF_OK;
}

static rf_status_t layer_scratch(rf_plan_t *p, rf_layer_t *L, rf_err_t *err)
{
    for (int i = 0; i < L->nmodel; i++) {
        if (L->scratch[i] != NULL)
            continue;
        size_t b = rf_slot_shape_bytes(&L->model[i]) + 1;
        if (p->dev) { /* model-layout scratch on the device, from the pool */
            rf_accel_t *ax = p->st->accel;
            /* A new buffer is zeroed once, as calloc would. A pooled one is not: the layer's
             * applications cover its model layout (every row of every slot, or the layer never
             * completes), which the device-emu digest tests checked with reused scratch filled
             * with 0xAB instead. */
            bool fresh = false;
            rf_status_t as = scratch_get(p, b, &L->scratch[i], &fresh);
            long ti = as == RF_OK && fresh ? tl_begin(p, 2) : -1;
            if (as == RF_OK && fresh && (as = ax->ops->memset(ax, L->scratch[i], 0, b, NULL)) != RF_OK) {
                scratch_free(p, L->scratch[i]);
                L->scratch[i] = NULL;
            }
            tl_end(p, ti, 0);
            if (as != RF_OK)
                return rf_err_set(err, as == RF_ERR_NOMEM ? RF_ERR_NOMEM : as,
                                  "plan: no device scratch for %s on device %d",
                                  p->inv->modules[L->module].name, ax->device);
        } else {
            L->scratch[i] = calloc(1, b);
        }
        if (L->scratch[i] == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "plan: no scratch for %s",
                              p->inv->modules[L->module].name);
        L->dst[i] = rf_dst_contiguous(L->scratch[i], &L->model[i]);
    }
    return RF_OK;
}

rf_status_t rf_plan_stage(rf_plan_t *p, const void *payload, size_t bytes, rf_err_t *err)
{
    if (!p->dev)
        return RF_OK;
    rf_accel_t *ax = p->st->accel;
    const rf_accel_ops_t *o = ax->ops;
    rf_status_t s = RF_OK;
    int cur = p->stage_cur, k = cur ^ 1;
    /* the current buffer's readers (the previous chunk's piece copies) are all enqueued */
    if (p->stage_buf[cur] != NULL) {
        if (p->stage_ev[cur] == NULL)
            s = o->event_create(ax, &p->stage_ev[cur]);
        if (s == RF_OK)
            s = o->event_record(p->stage_ev[cur], NULL);
        if (s == RF_OK)
            p->stage_used[cur] = true;
    }
    /* the other buffer is free once its last readers completed */
    if (s == RF_OK && p->stage_used[k]) {
        s = o->event_sync(p->stage_ev[k]);
        p->stage_used[k] = false;
    }
    if (s == RF_OK && bytes > p->stage_cap[k]) {
        size_t cap = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
        if (p->stage_buf[k] != NULL)
            o->free(ax, p->stage_buf[k]);
        p->stage_buf[k] = NULL;
        p->stage_cap[k] = 0;
        s = o->alloc(ax, cap, &p->stage_buf[k]);
        if (s == RF_OK)
            p->stage_cap[k] = cap;
    }
    /* one h2d copy per chunk, on the accelerator's stream (ordered before the piece copies) */
    if (s == RF_OK && bytes > 0)
        s = o->copy(ax, p->stage_buf[k], payload, bytes, RF_COPY_H2D, NULL);
    if (s != RF_OK) {
        p->stage_host = NULL;
        p->stage_bytes = 0;
        return rf_err_set(err, s, "plan: staging a %zu-byte chunk payload on %s device %d failed",
                          bytes, ax->ops->name, ax->device);
    }
    p->stage_cur = k;
    p->stage_host = payload;
    p->stage_bytes = bytes;
    p->stage_h2d++;
    p->stage_h2d_bytes += bytes;
    return RF_OK;
}

/* Device storage: points rows->src at the staged device copy of the piece (staging the piece
 * alone when the caller did not stage its chunk). */
static rf_status_t stage_rebase(rf_plan_t *p, const rf_app_t *a, uint64_t row_begin,
                                uint64_t row_end, const void *src, rf_accel_rows_t *rows,
                                uint32_t chunk, rf_err_t *err)
{
    const rf_tensor_t *t = &p->inv->tensors[a->tensor];
    uint64_t width = a->sender >= 0 ? (uint64_t)(a->col1 - a->col0) /* p2p: packed rectangle */
                                     : (a->rows ? t->numel / a->rows : 0);
    size_t piece = (size_t)((row_end - row_begin) * width * rf_dtype_size(a->src_dtype));
    const char *s = src, *h = p->stage_host;
    if (h == NULL || s < h || s + piece > h + p->stage_bytes) {
        (void)chunk;
        RF_CHECK(rf_plan_stage(p, src, piece, err));
        h = p->stage_host;
    }
    rows->src = (const char *)p->stage_buf[p->stage_cur] + ((const char *)rows->src - h);
    return RF_OK;
}

/* wna16 weight_shape bytes (rows [0, 2) as I32 or I64) against the inventory's [N, K]. */
static rf_status_t shape_check(rf_plan_t *p, const rf_app_t *a, const void *src, uint32_t chunk,
                               rf_err_t *err)
{
    int64_t v[2];
    for (int i = 0; i < 2; i++) {
        if (a->src_dtype == RF_DTYPE_I32) {
            int32_t x;
            memcpy(&x, (const char *)src + (size_t)i * 4, 4);
            v[i] = x;
        } else {
            memcpy(&v[i], (const char *)src + (size_t)i * 8, 8);
        }
    }
    if (v[0] != a->shape_nk[0] || v[1] != a->shape_nk[1])
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "chunk %u: %s carries [%lld, %lld], the model says [%lld, %lld]", chunk,
                          p->inv->tensors[a->tensor].name, (long long)v[0], (long long)v[1],
                          (long long)a->shape_nk[0], (long long)a->shape_nk[1]);
    p->stats.shapes_checked++;
    return RF_OK;
}

/* A device-resident weight_shape: a 16-byte copy into the pinned check area joins the batch;
 * the check itself waits for rf_plan_check. */
static rf_status_t shape_defer(rf_plan_t *p, uint64_t app, const void *src, size_t nb,
                               uint32_t chunk, rf_err_t *err)
{
    rf_accel_t *ax = p->st->accel;
    if (p->shape_n == p->shape_cap) {
        /* grows only between chunks: the first use sizes it for every weight_shape of the plan */
        if (p->shape_n != p->shape_head)
            RF_CHECK(rf_plan_flush(p, err));
        if (p->shape_n != p->shape_head && rf_accel_sync(ax) != RF_OK)
            return rf_err_set(err, RF_ERR_CUDA, "plan: synchronizing before growing the "
                              "weight_shape area failed");
        size_t cap = 0;
        for (int i = 0; i < p->napps; i++)
            cap += p->apps[i].slot < 0;
        cap = cap > 2 * p->shape_cap ? cap : 2 * p->shape_cap + 16;
        unsigned char *h = NULL;
        shape_pending_t *q = malloc(cap * sizeof(*q));
        rf_status_t as = q ? ax->ops->alloc_host(ax, cap * 16, (void **)&h) : RF_ERR_NOMEM;
        if (as != RF_OK) {
            free(q);
            return rf_err_set(err, as, "plan: no pinned memory for %zu weight_shape checks", cap);
        }
        size_t live = p->shape_n - p->shape_head;
        for (size_t i = 0; i < live; i++) {
            q[i] = p->shape_q[p->shape_head + i];
            memcpy(h + i * 16, p->shape_host + (p->shape_head + i) * 16, 16);
        }
        if (p->shape_host)
            ax->ops->free_host(ax, p->shape_host);
        free(p->shape_q);
        p->shape_host = h;
        p->shape_q = q;
        p->shape_cap = cap;
        p->shape_head = 0;
        p->shape_n = live;
    }
    size_t k = p->shape_n++;
    p->shape_q[k] = (shape_pending_t){app, chunk};
    rf_accel_rows_t r;
    memset(&r, 0, sizeof(r));
    r.dst.data = p->shape_host + k * 16; /* the kernel stores it straight into pinned memory */
    r.dst.esize = 1;
    r.dst.dtype = RF_DTYPE_U8;
    r.dst.row_stride = (int64_t)nb;
    r.dst.col_stride = 1;
    r.src = src;
    r.src_dtype = RF_DTYPE_U8;
    r.src_pitch = (int64_t)nb;
    r.rows = 1;
    r.cols = (int64_t)nb;
    return batch_add(p, &r, err);
}

rf_status_t rf_plan_check(rf_plan_t *p, uint32_t chunk, rf_err_t *err)
{
    while (p->shape_head < p->shape_n && p->shape_q[p->shape_head].chunk == chunk) {
        size_t k = p->shape_head++;
        RF_CHECK(shape_check(p, &p->apps[p->shape_q[k].app], p->shape_host + k * 16, chunk, err));
    }
    if (p->shape_head == p->shape_n)
        p->shape_head = p->shape_n = 0;
    return RF_OK;
}

rf_status_t rf_plan_apply(rf_plan_t *p, const rf_piece_src_t *ps, rf_err_t *err)
{
    int tensor = ps->tensor, sender = ps->sender;
    uint64_t row_begin = ps->row_begin, row_end = ps->row_end;
    int64_t col_begin = ps->col_begin, col_end = ps->col_end;
    const void *src = ps->src;
    uint32_t chunk = ps->chunk;
    bool rect = col_end != 0; /* a column window: a p2p rectangle */
    bool src_dev = ps->mem != RF_PIECE_HOST;
    if (src_dev && ps->mem != RF_PIECE_DEVICE)
        return rf_err_set(err, RF_ERR_INVALID, "chunk %u: unknown piece memory %d", chunk,
                          (int)ps->mem);
    if (src_dev && !p->dev)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "chunk %u: a device-memory source needs runtime storage on a device",
                          chunk);
    uint64_t idx = 0;
    rf_map_t *map = p->app_index;
    bool found;
    if (sender == -1 && tensor >= 0 && tensor < p->inv->ntensors) {
        /* broadcast: one app per tensor, a direct index (counted as one probe) */
        int32_t k = p->app_of_tensor[tensor];
        found = k >= 0;
        idx = (uint64_t)(found ? k : 0);
        p->direct_probes++;
    } else {
        found = rf_map_get(map, plan_app_key(tensor, sender), &idx);
    }
    const char *tname = (tensor >= 0 && tensor < p->inv->ntensors)
                            ? p->inv->tensors[tensor].name
                            : "(unknown tensor)";
    p->stats.bookkeeping_probes = map->probes - p->probes_base + p->direct_probes;
    if (!p->in_update)
        return rf_err_set(err, RF_ERR_STATE, "chunk %u: %s arrived outside an update", chunk,
                          tname);
    if (!found || p->apps[idx].tensor != tensor || p->apps[idx].sender != sender)
        return rf_err_set(err, RF_ERR_EXTRA,
                          "chunk %u: unexpected application of %s from sender %d", chunk, tname,
                          sender);
    rf_app_t *a = &p->apps[idx];
    rf_layer_t *L = &p->layers[a->layer];
    if (L->complete)
        return rf_err_set(err, RF_ERR_EXTRA,
                          "chunk %u: rows [%llu, %llu) of %s arrived after layer %s completed",
                          chunk, (unsigned long long)row_begin, (unsigned long long)row_end,
                          tname, p->inv->modules[L->module].name);
    if (rect && (col_begin != a->col0 || col_end != a->col1))
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "chunk %u: %s from sender %d: columns [%lld, %lld), expected "
                          "[%lld, %lld)",
                          chunk, tname, sender, (long long)col_begin, (long long)col_end,
                          (long long)a->col0, (long long)a->col1);
    if (rect) { /* the cursor runs over the rectangle's rows */
        if (row_begin < (uint64_t)a->row0)
            return rf_err_set(err, RF_ERR_SEQUENCE,
                              "chunk %u: rows [%llu, %llu) of %s from sender %d: before its "
                              "rectangle (row %lld)",
                              chunk, (unsigned long long)row_begin, (unsigned long long)row_end,
                              tname, sender, (long long)a->row0);
        row_begin -= (uint64_t)a->row0;
        row_end -= (uint64_t)a->row0;
    }
    if (row_begin != a->cursor || row_end <= row_begin || row_end > a->rows)
        return rf_err_set(err, RF_ERR_SEQUENCE,
                          "chunk %u: rows [%llu, %llu) of %s: %s (expected row %llu of %llu)",
                          chunk, (unsigned long long)row_begin, (unsigned long long)row_end,
                          tname,
                          row_begin < a->cursor ? "repeated rows"
                                                : (row_begin > a->cursor ? "gap" : "bad range"),
                          (unsigned long long)a->cursor, (unsigned long long)a->rows);
    if (a->slot < 0) {
        /* wna16 weight_shape: checked against the inventory's [N, K], counted, not stored */
        size_t nb = (size_t)(row_end - row_begin) * (a->src_dtype == RF_DTYPE_I32 ? 4 : 8);
        if (row_begin != 0 || row_end != 2)
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "chunk %u: %s arrives as rows [%llu, %llu), expected [0, 2)", chunk,
                              tname, (unsigned long long)row_begin, (unsigned long long)row_end);
        if (src_dev) {
            /* collected with the chunk's row copies into pinned host memory (the device writes
             * it directly) and checked once the chunk's copies completed (rf_plan_check) */
            RF_CHECK(shape_defer(p, idx, src, nb, chunk, err));
        } else {
            RF_CHECK(shape_check(p, a, src, chunk, err));
        }
    } else if (!a->declined) {
        double t0 = cpu_now();
        rf_accel_rows_t runs[RF_LOAD_MAX_RUNS];
        int nruns;
        if (L->mode == RF_PLAN_LAYERWISE && L->scratch[0] == NULL)
            RF_CHECK(layer_scratch(p, L, err));
        if (src_dev && !rect && a->tmpl_epoch == p->epoch && a->tmpl_rb == row_begin &&
            a->tmpl_re == row_end && a->tmpl_dst == L->dst[a->slot].data) {
            nruns = a->tmpl_any ? 1 : 0; /* the same piece into the same destination as before */
            runs[0] = a->tmpl;
            runs[0].src = (const char *)src + a->tmpl_src_off;
        } else {
            /* one copy per piece, except GPT-NeoX's per-head interleaved query_key_value
             * (up to five: runtime/loader.c) */
            nruns = rect ? rf_load_rect_runs(p->inv, &p->rc, tensor, a->local_expert,
                                             &L->dst[a->slot], src, a->src_dtype,
                                             row_begin + (uint64_t)a->row0,
                                             row_end + (uint64_t)a->row0, col_begin, col_end,
                                             ps->src_pitch, runs)
                         : rf_load_piece_runs(p->inv, &p->rc, tensor, a->local_expert,
                                              &L->dst[a->slot], src, a->src_dtype, row_begin,
                                              row_end, runs);
            if (nruns < 0)
                return rf_err_set(err, RF_ERR_UNSUPPORTED,
                                  "chunk %u: rows [%llu, %llu) x columns [%lld, %lld) of %s "
                                  "need more than %d copies",
                                  chunk, (unsigned long long)row_begin,
                                  (unsigned long long)row_end, (long long)col_begin,
                                  (long long)col_end, tname, RF_LOAD_MAX_RUNS);
            if (src_dev && !rect && nruns <= 1) { /* a template is one copy */
                a->tmpl_epoch = p->epoch;
                a->tmpl_rb = row_begin;
                a->tmpl_re = row_end;
                a->tmpl_dst = L->dst[a->slot].data;
                a->tmpl_any = nruns == 1;
                a->tmpl = runs[0];
                a->tmpl_src_off = nruns == 1 ? (const char *)runs[0].src - (const char *)src : 0;
            }
        }
        for (int ri = 0; ri < nruns; ri++) {
            rf_accel_rows_t *rows = &runs[ri];
            rf_accel_t *ax = plan_ax(p);
            if (p->dev && !src_dev) /* a device source is copied device to device as it is */
                RF_CHECK(stage_rebase(p, a, row_begin, row_end, src, rows, chunk, err));
            rf_status_t ws =
                src_dev ? batch_add(p, rows, err) : ax->ops->copy_rows(ax, rows, NULL);
            if (ws != RF_OK)
                return rf_err_set(err, ws,
                                  "chunk %u: writing rows [%llu, %llu) of %s on %s "
                                  "device %d failed",
                                  chunk, (unsigned long long)row_begin, (unsigned long long)row_end,
                                  tname, ax->ops->name, ax->device);
            p->stats.elements_written += (uint64_t)(rows->rows * rows->cols);
        }
        p->stats.loader_calls++;
        p->stats.loader_s += cpu_now() - t0;
    }
    a->cursor = row_end;
    if (a->cursor == a->rows) {
        if (a->declined)
            p->stats.declined++;
        else
            p->stats.applications++;
        if (--L->pending == 0)
            RF_CHECK(layer_complete(p, L, err));
    }
    return RF_OK;
}

rf_status_t rf_plan_finalize(rf_plan_t *p, rf_err_t *err)
{
    if (!p->in_update)
        return rf_err_set(err, RF_ERR_STATE, "plan: finalize without an update");
    rf_status_t fs = rf_plan_flush(p, err);
    if (fs == RF_OK && p->shape_head < p->shape_n) { /* checks of chunks not completed yet */
        fs = rf_accel_sync(p->st->accel);
        if (fs != RF_OK)
            rf_err_set(err, fs, "plan: update %u: synchronizing before the weight_shape checks "
                       "failed", p->update);
        while (fs == RF_OK && p->shape_head < p->shape_n)
            fs = rf_plan_check(p, p->shape_q[p->shape_head].chunk, err);
    }
    if (fs != RF_OK) {
        rf_plan_abort(p);
        return fs;
    }
    for (int m = 0; m < p->nlayers; m++) {
        rf_layer_t *L = &p->layers[m];
        if (L->pending == 0)
            continue;
        for (int i = L->app_first; i < L->app_first + L->napps; i++) {
            rf_app_t *a = &p->apps[i];
            if (a->cursor != a->rows) {
                rf_err_set(err, RF_ERR_MISSING,
                           "update %u: %s missing (%llu of %llu rows arrived) for layer %s",
                           p->update, p->inv->tensors[a->tensor].name,
                           (unsigned long long)a->cursor, (unsigned long long)a->rows,
                           p->inv->modules[m].name);
                rf_plan_abort(p);
                return RF_ERR_MISSING;
            }
        }
    }
    /* signatures must not change between update begin and finalize; checked before the
     * deferred stage, which would otherwise read a moved slot the loaders never wrote */
    int changed = plan_changed_slot(p);
    if (changed >= 0) {
        rf_err_set(err, RF_ERR_MOVED,
                   "update %u: slot %s changed its signature during the update (storage moved)",
                   p->update, changed < p->st->nslots ? p->st->slots[changed].name : "?");
        rf_plan_abort(p);
        return RF_ERR_MOVED;
    }
    /* device: every piece copy, zero fill and LAYERWISE kernel of this update has completed
     * (errors surface here, and the staging payload is no longer referenced) */
    if (p->dev) {
        rf_plan_tl_mark(p, 1);
        rf_status_t ds = rf_accel_sync(p->st->accel);
        p->stage_host = NULL;
        p->stage_bytes = 0;
        if (ds == RF_OK)
            tl_sum(p);
        if (ds != RF_OK) {
            rf_err_set(err, ds, "update %u: device %d failed while writing runtime storage",
                       p->update, p->st->accel->device);
            rf_plan_abort(p);
            return ds;
        }
    }
    /* deferred stage: once per layer with weight-derived state */
    double t0 = cpu_now();
    for (int m = 0; m < p->nlayers; m++) {
        rf_layer_t *L = &p->layers[m];
        if (!L->has_derived || p->fmt->ops->compute_derived == NULL)
            continue;
        rf_slot_t *rt[RF_MODULE_MAX_SLOTS];
        int nrt = plan_layer_runtime(p, m, rt);
        rf_status_t st = p->fmt->ops->compute_derived(p->fmt, p->inv, m, rt, nrt, err);
        if (st != RF_OK) {
            rf_plan_abort(p);
            return st;
        }
        p->stats.derived_runs++;
    }
    p->stats.deferred_s = cpu_now() - t0;
    p->stats.bookkeeping_probes =
        ((rf_map_t *)p->app_index)->probes - p->probes_base + p->direct_probes;
    p->in_update = false;
    return RF_OK;
}

void rf_plan_abort(rf_plan_t *p)
{
    p->nbatch = 0; /* collected copies of a failed update are never launched */
    p->nlw = 0;    /* nor the LAYERWISE processing that waited for them */
    p->shape_head = p->shape_n = 0;
    if (p->dev) { /* nothing may still read scratch or staging */
        (void)rf_accel_sync(p->st->accel);
        p->stage_host = NULL;
        p->stage_bytes = 0;
    }
    plan_free_scratch(p);
    for (int m = 0; m < p->nlayers; m++)
        if (p->layers[m].mode == RF_PLAN_LAYERWISE)
            for (int i = 0; i < p->layers[m].nmodel; i++)
                memset(&p->layers[m].dst[i], 0, sizeof(rf_dst_t));
    p->in_update = false;
}
