/*
 * refit: the reload planner's decisions (see include/refit/plan.h and DESIGN.md section 8):
 * per layer DIRECT, RUNTIME_VIEW or LAYERWISE, the expected applications (broadcast: one per
 * tensor; p2p: one per tensor and sender), the rebuild before an update whose signatures or
 * owner mapping changed (rf_plan_begin), the source dtype a tensor arrives in, and the read
 * back of the model layout. The per-piece path is runtime/plan_apply.c; what both share is in
 * runtime/plan_int.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"
#include "refit/env.h"
#include "refit/hashmap.h"
#include "refit/log.h"
#include "refit/plan.h"
#include "refit/time.h"

const char *rf_plan_mode_name(rf_plan_mode_t m)
{
    switch (m) {
    case RF_PLAN_DIRECT:
        return "DIRECT";
    case RF_PLAN_RUNTIME_VIEW:
        return "RUNTIME_VIEW";
    case RF_PLAN_LAYERWISE:
        return "LAYERWISE";
    }
    return "?";
}

rf_status_t rf_plan_alloc_storage(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                                  const rf_format_t *fmt, rf_storage_t *st, bool noreserve,
                                  rf_err_t *err)
{
    for (int m = 0; m < inv->nmodules; m++) {
        rf_slot_shape_t model[RF_MODULE_MAX_SLOTS], rt[RF_MODULE_MAX_SLOTS];
        bool derived[RF_MODULE_MAX_SLOTS];
        int nmodel, nrt;
        RF_CHECK(rf_module_slots(inv, m, rc, model, &nmodel, err));
        RF_CHECK(fmt->ops->runtime_slots(fmt, inv, m, model, nmodel, rt, derived, &nrt, err));
        RF_CHECK(rf_storage_alloc_module(st, m, inv->modules[m].name, rt, derived, nrt, noreserve,
                                         fmt->accel, err));
    }
    return RF_OK;
}

/* DESIGN.md 8.3: the view is injective and dense: drop size-1 dims, sort by stride; accept
 * iff the smallest stride is 1 and each next stride equals the previous stride x size. */
static bool view_dense(const rf_view_t *v)
{
    int64_t st[RF_MAX_DIMS], sz[RF_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] != 1) {
            st[n] = v->stride[i];
            sz[n++] = v->shape[i];
        }
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
            int64_t a = st[j], b = sz[j];
            st[j] = st[j - 1];
            sz[j] = sz[j - 1];
            st[j - 1] = a;
            sz[j - 1] = b;
        }
    if (n == 0)
        return true;
    if (st[0] != 1)
        return false;
    for (int i = 1; i < n; i++)
        if (st[i] != st[i - 1] * sz[i - 1])
            return false;
    return true;
}

/* DESIGN.md 8.3: validate a complete mapping before anything is bound. */
static bool mapping_valid(const rf_layer_t *L, rf_slot_t *const *rt, int nrt,
                          const rf_view_t *views, const char **why)
{
    for (int i = 0; i < L->nmodel; i++) {
        const rf_view_t *v = &views[i];
        const rf_slot_shape_t *ms = &L->model[i];
        if (v->data == NULL || v->runtime_slot < 0 || v->runtime_slot >= nrt) {
            *why = "mapping misses a model-layout param";
            return false;
        }
        const rf_slot_t *s = rt[v->runtime_slot];
        if (s->derived) {
            *why = "buffer routed through a custom mapping";
            return false;
        }
        if (v->dtype != ms->dtype && rf_dtype_size(v->dtype) != rf_dtype_size(ms->dtype)) {
            *why = "view dtype differs";
            return false;
        }
        if (v->ndim != ms->ndim) {
            *why = "view rank differs from the model layout";
            return false;
        }
        uint64_t numel = 1;
        for (int d = 0; d < v->ndim; d++) {
            if (v->shape[d] != ms->shape[d]) {
                *why = "view shape differs from the model layout";
                return false;
            }
            numel *= (uint64_t)v->shape[d];
        }
        /* same storage: the view must lie at the slot's own byte offset in its storage */
        if ((char *)v->data != (char *)s->sig.data) {
            *why = "view byte offset differs from its runtime slot (detached copy or offset)";
            return false;
        }
        if (numel * rf_dtype_size(v->dtype) != rf_signature_bytes(&s->sig)) {
            *why = "view covers a different number of bytes than its runtime slot";
            return false;
        }
        if (!view_dense(v)) {
            *why = "view is not injective and dense";
            return false;
        }
    }
    return true;
}

static rf_dst_t view_dst(const rf_view_t *v, bool kfirst)
{
    rf_dst_t d;
    memset(&d, 0, sizeof(d));
    d.data = v->data;
    d.esize = rf_dtype_size(v->dtype);
    d.dtype = v->dtype;
    if (kfirst && v->ndim >= 2) {
        d.row_stride = v->stride[v->ndim - 1];
        d.col_stride = v->stride[v->ndim - 2];
        if (v->ndim >= 3)
            d.expert_stride = v->stride[v->ndim - 3];
    } else if (v->ndim <= 1) {
        d.row_stride = v->ndim == 1 ? v->stride[0] : 1;
        d.col_stride = 1;
    } else {
        d.row_stride = v->stride[v->ndim - 2];
        d.col_stride = v->stride[v->ndim - 1];
        if (v->ndim >= 3)
            d.expert_stride = v->stride[v->ndim - 3];
    }
    return d;
}

static rf_status_t plan_layer(rf_plan_t *p, int m, rf_err_t *err)
{
    rf_layer_t *L = &p->layers[m];
    rf_slot_t *rt[RF_MODULE_MAX_SLOTS];
    rf_view_t views[RF_MODULE_MAX_SLOTS];
    memset(L->scratch, 0, sizeof(L->scratch));
    L->module = m;
    RF_CHECK(rf_module_slots(p->inv, m, &p->rc, L->model, &L->nmodel, err));
    L->nrt = plan_layer_runtime(p, m, rt);
    L->has_derived = false;
    bool allocated = true;
    int nreload = 0;
    for (int i = 0; i < L->nrt; i++) {
        if (rt[i]->derived)
            L->has_derived = true;
        else
            nreload++;
        if (rt[i]->sig.data == NULL)
            allocated = false;
    }
    L->why = NULL;
    if (!allocated) {
        return rf_err_set(err, RF_ERR_STATE, "plan: %s has an unallocated runtime slot",
                          p->inv->modules[m].name);
    }
    if (p->policy == RF_POLICY_LAYERWISE) {
        L->mode = RF_PLAN_LAYERWISE;
        L->why = "--reload-policy layerwise";
        return RF_OK;
    }
    /* DIRECT: key sets equal, every tensor matches in shape, stride and dtype, identity */
    bool direct = nreload == L->nmodel && p->fmt->ops->identity(p->fmt, p->inv, m);
    for (int i = 0; direct && i < L->nmodel; i++) {
        const rf_slot_t *s = rt[i];
        /* the runtime slot is "<module>.<model slot name>"; a model slot name may hold a dot
         * itself (rollout.layout hf's GraniteMoE "input_linear.weight") */
        size_t sl = strlen(s->name), ml = strlen(L->model[i].name);
        if (s->derived || sl <= ml || s->name[sl - ml - 1] != '.' ||
            strcmp(s->name + sl - ml, L->model[i].name) != 0 ||
            s->sig.dtype != L->model[i].dtype || s->sig.ndim != L->model[i].ndim ||
            !rf_signature_contiguous(&s->sig))
            direct = false;
        for (int d = 0; direct && d < s->sig.ndim; d++)
            if (s->sig.shape[d] != L->model[i].shape[d])
                direct = false;
    }
    if (direct) {
        L->mode = RF_PLAN_DIRECT;
        for (int i = 0; i < L->nmodel; i++)
            L->dst[i] = rf_dst_contiguous(rt[i]->sig.data, &L->model[i]);
        return RF_OK;
    }
    /* RUNTIME_VIEW: the owner's complete mapping, validated as a whole before binding */
    memset(views, 0, sizeof(views));
    if (p->fmt->ops->runtime_mapping != NULL &&
        p->fmt->ops->runtime_mapping(p->fmt, p->inv, m, L->model, L->nmodel, rt, L->nrt,
                                     views)) {
        const char *why = NULL;
        if (mapping_valid(L, rt, L->nrt, views, &why)) {
            L->mode = RF_PLAN_RUNTIME_VIEW;
            for (int i = 0; i < L->nmodel; i++) {
                L->views[i] = views[i];
                L->dst[i] = view_dst(&views[i], L->model[i].kfirst);
            }
            return RF_OK;
        }
        L->why = why;
    } else {
        L->why = "format owner declined a runtime view";
    }
    L->mode = RF_PLAN_LAYERWISE;
    return RF_OK;
}

static rf_status_t plan_record_sigs(rf_plan_t *p, rf_err_t *err)
{
    free(p->sigs);
    p->nsigs = p->st->nslots;
    p->sigs = malloc((size_t)(p->nsigs + 1) * sizeof(rf_signature_t));
    if (p->sigs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
    for (int i = 0; i < p->nsigs; i++)
        p->sigs[i] = p->st->slots[i].sig;
    return RF_OK;
}

static rf_status_t plan_layers(rf_plan_t *p, rf_err_t *err)
{
    p->epoch++; /* every row-copy template made against the old layers is stale */
    memset(p->stats.layers, 0, sizeof(p->stats.layers));
    for (int m = 0; m < p->nlayers; m++) {
        RF_CHECK(plan_layer(p, m, err));
        p->stats.layers[p->layers[m].mode]++;
    }
    return plan_record_sigs(p, err);
}

rf_status_t rf_plan_build(rf_plan_t *p, const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                          rf_storage_t *st, rf_format_t *fmt, rf_reload_policy_t policy,
                          rf_err_t *err)
{
    return rf_plan_build_p2p(p, inv, rc, st, fmt, policy, NULL, NULL, err);
}

#define PLAN_MAX_SENDERS 64

rf_status_t rf_plan_build_p2p(rf_plan_t *p, const rf_inventory_t *inv,
                              const rf_rollout_coords_t *rc, rf_storage_t *st, rf_format_t *fmt,
                              rf_reload_policy_t policy, rf_plan_senders_fn senders_fn,
                              void *ctx, rf_err_t *err)
{
    size_t cap = (size_t)inv->ntensors + 1;
    memset(p, 0, sizeof(*p));
    p->inv = inv;
    p->rc = *rc;
    p->st = st;
    p->fmt = fmt;
    p->policy = policy;
    p->host_ax.ops = &rf_accel_host_ops;
    p->dev = rf_storage_on_device(st);
    bool tl_asked = false;
    RF_CHECK(rf_env_flag("REFIT_DEVICE_TIMELINE", false, &tl_asked, err));
    p->tl.on = p->dev && tl_asked;
    if (!p->dev && tl_asked)
        rf_warn("REFIT_DEVICE_TIMELINE=1: this rank's runtime storage is on the host; the "
                "device timeline covers device storage only");
    if (p->dev && rf_format_device(fmt) != st->accel)
        return rf_err_set(err, RF_ERR_INVALID,
                          "plan: runtime storage is on %s device %d but format owner %s is not "
                          "given that accelerator",
                          st->accel->ops->name, st->accel->device, fmt->ops->name);
    if (p->dev && fmt->ops->host_only)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "format owner %s works on host storage only; this rank's runtime "
                          "storage is on GPU %d (rollout.gpus): drop rollout.gpus or use another "
                          "owner",
                          fmt->ops->name, st->accel->device);
    p->nlayers = inv->nmodules;
    p->layers = calloc((size_t)p->nlayers + 1, sizeof(rf_layer_t));
    /* one application per tensor to begin with; p2p grows it where tensors have several
     * senders (an upfront ntensors x PLAN_MAX_SENDERS array and index cost more than the
     * rest of the plan) */
    p->apps = calloc(cap, sizeof(rf_app_t));
    p->app_index = malloc(sizeof(rf_map_t));
    if (!p->layers || !p->apps || !p->app_index || rf_map_init(p->app_index, cap) != RF_OK) {
        free(p->app_index);
        p->app_index = NULL;
        rf_plan_free(p);
        return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
    }
    /* expected applications, grouped by layer (broadcast: one sender, -1) */
    for (int m = 0; m < inv->nmodules; m++) {
        const rf_module_t *mod = &inv->modules[m];
        p->layers[m].app_first = p->napps;
        for (int j = 0; j < mod->ntensors; j++) {
          const rf_tensor_t *t = &inv->tensors[mod->tensors[j]];
          int snd[PLAN_MAX_SENDERS];
          int64_t rect[PLAN_MAX_SENDERS][4];
          int ns = 1;
          snd[0] = -1;
          rect[0][0] = 0;
          rect[0][1] = (int64_t)rf_tensor_rows(t);
          rect[0][2] = 0;
          rect[0][3] = rect[0][1] ? (int64_t)(t->numel / (uint64_t)rect[0][1]) : 1;
          if (senders_fn != NULL)
              ns = senders_fn(ctx, mod->tensors[j], snd, rect, PLAN_MAX_SENDERS);
          while ((size_t)(p->napps + ns) >= cap) {
              rf_app_t *g = realloc(p->apps, 2 * cap * sizeof(rf_app_t));
              if (g == NULL) {
                  rf_plan_free(p);
                  return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
              }
              memset(g + cap, 0, cap * sizeof(rf_app_t));
              p->apps = g;
              cap *= 2;
          }
          for (int q = 0; q < ns; q++) {
            rf_app_t *a = &p->apps[p->napps];
            a->tensor = mod->tensors[j];
            a->sender = snd[q];
            a->row0 = rect[q][0];
            a->col0 = rect[q][2];
            a->col1 = rect[q][3];
            a->layer = m;
            a->slot = t->slot;
            a->shard = t->shard;
            a->expert = t->expert;
            a->local_expert =
                t->expert >= 0 ? rf_moe_local_index(inv->cfg.num_experts, rc, t->expert) : 0;
            a->declined = t->expert >= 0 && a->local_expert < 0;
            a->rows = (uint64_t)(rect[q][1] - rect[q][0]);
            a->src_dtype = t->dtype;
            if (t->param == RF_PARAM_WEIGHT_SHAPE) {
                char sib[RF_NAME_MAX];
                size_t pl = strlen(t->name) - strlen("weight_shape");
                snprintf(sib, sizeof(sib), "%.*sweight_packed", (int)pl, t->name);
                int k = rf_inventory_find(inv, sib);
                if (k >= 0) {
                    a->shape_nk[0] = inv->tensors[k].shape[0];
                    a->shape_nk[1] = inv->tensors[k].shape[1] * 8;
                }
            }
            if (rf_map_put(p->app_index, plan_app_key(a->tensor, a->sender), (uint64_t)p->napps) !=
                RF_OK) {
                rf_plan_free(p);
                return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
            }
            p->napps++;
          }
        }
        p->layers[m].napps = p->napps - p->layers[m].app_first;
    }
    p->app_of_tensor = malloc(((size_t)inv->ntensors + 1) * sizeof(int32_t));
    if (p->app_of_tensor == NULL) {
        rf_plan_free(p);
        return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
    }
    p->tensor_apps = malloc(((size_t)inv->ntensors + 1) * sizeof(int32_t));
    if (p->tensor_apps == NULL) {
        rf_plan_free(p);
        return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
    }
    for (int i = 0; i < inv->ntensors; i++)
        p->app_of_tensor[i] = p->tensor_apps[i] = -1;
    for (int i = 0; i < p->napps; i++) {
        if (p->apps[i].sender == -1)
            p->app_of_tensor[p->apps[i].tensor] = i;
        if (p->tensor_apps[p->apps[i].tensor] < 0)
            p->tensor_apps[p->apps[i].tensor] = i;
    }
    rf_status_t s = plan_layers(p, err);
    if (s != RF_OK) {
        rf_plan_free(p);
        return s;
    }
    return RF_OK;
}

/* A RUNTIME_VIEW layer's mapping still stands: the owner still offers one, it still
 * validates, and it still binds exactly the views the plan holds. */
static bool view_confirmed(rf_plan_t *p, int m)
{
    rf_layer_t *L = &p->layers[m];
    rf_slot_t *rt[RF_MODULE_MAX_SLOTS];
    rf_view_t views[RF_MODULE_MAX_SLOTS];
    const char *why = NULL;
    int nrt = plan_layer_runtime(p, m, rt);
    memset(views, 0, sizeof(views));
    if (p->fmt->ops->runtime_mapping == NULL ||
        !p->fmt->ops->runtime_mapping(p->fmt, p->inv, m, L->model, L->nmodel, rt, nrt, views) ||
        !mapping_valid(L, rt, nrt, views, &why))
        return false;
    for (int i = 0; i < L->nmodel; i++) {
        rf_dst_t d = view_dst(&views[i], L->model[i].kfirst);
        if (d.data != L->dst[i].data || d.esize != L->dst[i].esize ||
            d.row_stride != L->dst[i].row_stride || d.col_stride != L->dst[i].col_stride ||
            d.expert_stride != L->dst[i].expert_stride)
            return false;
    }
    return true;
}

rf_status_t rf_plan_begin(rf_plan_t *p, uint32_t update, rf_err_t *err)
{
    double t0 = rf_time_now();
    int changed = plan_changed_slot(p);
    p->stats.moved_slot = changed;
    bool reconfirm = false;
    if (p->in_update)
        rf_plan_abort(p);
    /* DIRECT layers re-confirm the owner's identity, RUNTIME_VIEW layers its mapping, every
     * update (DESIGN.md 8.7) */
    for (int m = 0; m < p->nlayers && !reconfirm; m++)
        if ((p->layers[m].mode == RF_PLAN_DIRECT &&
             !p->fmt->ops->identity(p->fmt, p->inv, m)) ||
            (p->layers[m].mode == RF_PLAN_RUNTIME_VIEW && changed < 0 && !view_confirmed(p, m)))
            reconfirm = true;
    if (changed >= 0 || reconfirm) {
        rf_info("plan rebuilt before update %u: %s", update,
                changed >= 0 ? p->st->slots[changed].name : "format owner changed its mapping");
        RF_CHECK(plan_layers(p, err));
        p->stats.rebuilds++;
    }
    for (int m = 0; m < p->nlayers; m++) {
        p->layers[m].pending = p->layers[m].napps;
        p->layers[m].complete = false;
    }
    for (int i = 0; i < p->napps; i++)
        p->apps[i].cursor = 0;
    p->stats.applications = p->stats.declined = p->stats.loader_calls = 0;
    p->stats.elements_written = p->stats.layerwise_runs = p->stats.derived_runs = 0;
    p->stats.shapes_checked = 0;
    p->stage_h2d = p->stage_h2d_bytes = 0;
    p->stage_host = NULL;
    p->stage_bytes = 0;
    p->stats.loader_s = p->stats.layerwise_s = p->stats.deferred_s = 0;
    p->probes_base = ((rf_map_t *)p->app_index)->probes;
    p->direct_probes = 0;
    p->stats.bookkeeping_probes = 0;
    p->nbatch = 0;
    p->nlw = 0;
    p->shape_head = p->shape_n = 0;
    p->batch_launches = 0;
    p->batch_rows = 0;
    p->tl.n = 0;
    rf_plan_tl_mark(p, 0);
    p->update = update;
    p->in_update = true;
    p->stats.begin_s = rf_time_now() - t0;
    return RF_OK;
}

rf_status_t rf_plan_read_model(rf_plan_t *p, int layer, void *const *bufs, rf_err_t *err)
{
    rf_layer_t *L = &p->layers[layer];
    rf_slot_t *rt[RF_MODULE_MAX_SLOTS];
    int nrt = plan_layer_runtime(p, layer, rt);
    if (L->mode == RF_PLAN_RUNTIME_VIEW) {
        /* gather through the view, in model-layout order (device: from a host copy of the
         * view's runtime slot; the view starts at the slot's data and covers its bytes) */
        for (int i = 0; i < L->nmodel; i++) {
            const rf_view_t *v = &L->views[i];
            size_t es = rf_dtype_size(v->dtype);
            const char *vdata = v->data;
            char *host = NULL;
            if (p->dev) {
                const rf_slot_t *sl = rt[v->runtime_slot];
                size_t sb = (size_t)rf_signature_bytes(&sl->sig);
                host = malloc(sb + 1);
                if (host == NULL)
                    return rf_err_set(err, RF_ERR_NOMEM, "plan: out of memory");
                rf_status_t rs = rf_storage_read(p->st, host, sl->sig.data, sb, err);
                if (rs != RF_OK) {
                    free(host);
                    return rs;
                }
                vdata = host + ((const char *)v->data - (const char *)sl->sig.data);
            }
            uint64_t numel = 1;
            int64_t idx[RF_MAX_DIMS] = {0};
            char *out = bufs[i];
            for (int d = 0; d < v->ndim; d++)
                numel *= (uint64_t)v->shape[d];
            for (uint64_t e = 0; e < numel; e++, out += es) {
                int64_t off = 0;
                for (int d = 0; d < v->ndim; d++)
                    off += idx[d] * v->stride[d];
                memcpy(out, vdata + (size_t)off * es, es);
                for (int d = v->ndim - 1; d >= 0; d--) {
                    if (++idx[d] < v->shape[d])
                        break;
                    idx[d] = 0;
                }
            }
            free(host);
        }
        return RF_OK;
    }
    return p->fmt->ops->runtime_to_model(p->fmt, p->inv, layer, L->model, bufs, L->nmodel, rt,
                                         nrt, err);
}

rf_status_t rf_plan_set_source_dtype(rf_plan_t *p, int tensor, rf_dtype_t dtype, rf_err_t *err)
{
    /* a tensor's applications (one per sender) are contiguous from tensor_apps[tensor]: the
     * call costs its own applications, not the plan's (a manifest's worth of calls was
     * quadratic in the tensors) */
    int first = tensor >= 0 && tensor < p->inv->ntensors ? p->tensor_apps[tensor] : -1, end = first;
    while (first >= 0 && end < p->napps && p->apps[end].tensor == tensor)
        end++;
    if (first < 0)
        return RF_OK; /* not received here */
    const rf_tensor_t *t = &p->inv->tensors[tensor];
    if (dtype == t->dtype) {
        for (int i = first; i < end; i++)
            p->apps[i].src_dtype = dtype;
        return RF_OK;
    }
    bool ok = (rf_param_is_f32_scale(t->param) &&
               (dtype == RF_DTYPE_BF16 || dtype == RF_DTYPE_F16)) ||
              (t->param == RF_PARAM_WEIGHT_SHAPE && dtype == RF_DTYPE_I32);
    if (!ok)
        return rf_err_set(err, RF_ERR_MISMATCH, "%s arrives as %s, the runtime needs %s", t->name,
                          rf_dtype_name(dtype), rf_dtype_name(t->dtype));
    for (int i = first; i < end; i++)
        p->apps[i].src_dtype = dtype;
    return RF_OK;
}
