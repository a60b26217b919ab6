/*
 * refit: the p2p schedule (include/refit/p2p.h).
 */
#include <stdlib.h>
#include <string.h>

#include "refit/loader.h"
#include "refit/p2p.h"

bool rf_p2p_need(const rf_inventory_t *inv, const rf_rollout_coords_t *rc, int tensor,
                 int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1)
{
    const rf_tensor_t *t = &inv->tensors[tensor];
    if (t->param != RF_PARAM_WEIGHT_SHAPE)
        return rf_load_need(inv, rc, tensor, r0, r1, c0, c1);
    /* wna16 weight_shape: never stored; the planner checks it whole where the rank loads its
     * linear (a local expert's, or a dense one's) */
    if (t->expert >= 0 && rf_moe_local_index(inv->cfg.num_experts, rc, t->expert) < 0)
        return false;
    *r0 = 0;
    *r1 = (int64_t)rf_tensor_rows(t);
    *c0 = 0;
    *c1 = *r1 ? (int64_t)(t->numel / (uint64_t)*r1) : 1;
    return *r1 > 0;
}

int rf_p2p_rects(const rf_topology_t *topo, const rf_inventory_t *inv, int receiver, int tensor,
                 rf_owner_t out[RF_MAX_OWNERS])
{
    rf_rank_info_t ri;
    const rf_tensor_t *t = &inv->tensors[tensor];
    int64_t r0, r1, c0, c1;
    if (rf_topology_rank_info(topo, receiver, &ri) != RF_OK || ri.role != RF_ROLE_ROLLOUT)
        return 0;
    if (!rf_p2p_need(inv, &ri.rc, tensor, &r0, &r1, &c0, &c1))
        return 0;
    int T = rf_topology_trainer_size(topo);
    int edp = T / (topo->t_etp * topo->t_ep * topo->t_pp);
    int replica = t->expert >= 0 ? ri.engine % (edp > 0 ? edp : 1)
                                 : ri.engine % (topo->t_dp > 0 ? topo->t_dp : 1);
    rf_owner_t own[RF_MAX_OWNERS];
    int n = rf_trainer_owners_replica(topo, inv, t, replica, own), k = 0;
    for (int i = 0; i < n; i++) {
        rf_region_t g = own[i].reg;
        g.r0 = g.r0 > r0 ? g.r0 : r0;
        g.r1 = g.r1 < r1 ? g.r1 : r1;
        g.c0 = g.c0 > c0 ? g.c0 : c0;
        g.c1 = g.c1 < c1 ? g.c1 : c1;
        if (g.r1 > g.r0 && g.c1 > g.c0)
            out[k++] = (rf_owner_t){own[i].rank, g};
    }
    return k;
}

void rf_p2p_schedule_free(rf_p2p_schedule_t *s)
{
    for (int j = 0; s->recv != NULL && j < s->R; j++) {
        free(s->recv[j].rects);
        free(s->recv[j].items);
        rf_chunk_plan_destroy(s->recv[j].plan);
    }
    free(s->recv);
    free(s->senders);
    memset(s, 0, sizeof(*s));
}

static int rect_cmp(const void *a, const void *b)
{
    const rf_p2p_rect_t *x = a, *y = b;
    if (x->sender != y->sender)
        return x->sender < y->sender ? -1 : 1;
    return x->entry < y->entry ? -1 : (x->entry > y->entry);
}

rf_status_t rf_p2p_schedule_build(const rf_topology_t *topo, const rf_inventory_t *inv,
                                  const rf_manifest_t *man, uint64_t chunk_bytes,
                                  rf_p2p_schedule_t *s, rf_err_t *err)
{
    memset(s, 0, sizeof(*s));
    s->T = rf_topology_trainer_size(topo);
    s->R = rf_topology_rollout_size(topo);
    s->senders = calloc((size_t)s->T + 1, sizeof(int));
    s->recv = calloc((size_t)s->R + 1, sizeof(rf_p2p_recv_t));
    if (s->senders == NULL || s->recv == NULL) {
        rf_p2p_schedule_free(s);
        return rf_err_set(err, RF_ERR_NOMEM, "p2p: out of memory");
    }
    for (int i = 0; i < s->T; i++)
        s->senders[i] = i;
    for (int j = 0; j < s->R; j++) {
        rf_p2p_recv_t *r = &s->recv[j];
        size_t cap = 16;
        r->rank = s->T + j;
        r->rects = malloc(cap * sizeof(*r->rects));
        if (r->rects == NULL)
            goto nomem;
        for (int e = 0; e < man->n; e++) {
            rf_owner_t own[RF_MAX_OWNERS];
            int n = rf_p2p_rects(topo, inv, r->rank, man->entries[e].tensor, own);
            for (int k = 0; k < n; k++) {
                if (r->n == cap) {
                    rf_p2p_rect_t *g = realloc(r->rects, 2 * cap * sizeof(*g));
                    if (g == NULL)
                        goto nomem;
                    r->rects = g;
                    cap *= 2;
                }
                r->rects[r->n++] = (rf_p2p_rect_t){e, man->entries[e].tensor, own[k].rank,
                                                   own[k].reg};
            }
        }
        qsort(r->rects, r->n, sizeof(*r->rects), rect_cmp);
        r->items = calloc(r->n + 1, sizeof(*r->items));
        if (r->items == NULL)
            goto nomem;
        for (size_t k = 0; k < r->n; k++) {
            const rf_p2p_rect_t *q = &r->rects[k];
            const rf_tensor_t *t = &inv->tensors[q->tensor];
            uint64_t es = rf_dtype_size(man->entries[q->entry].dtype);
            r->items[k].stage = q->sender;
            r->items[k].rows = (uint64_t)(q->reg.r1 - q->reg.r0);
            r->items[k].row_bytes = (uint64_t)(q->reg.c1 - q->reg.c0) * es;
            r->items[k].bytes = r->items[k].rows * r->items[k].row_bytes;
            r->items[k].name = t->name;
        }
        rf_status_t st = rf_chunk_plan_create(r->items, r->n, chunk_bytes, &r->plan, err);
        if (st != RF_OK) {
            rf_p2p_schedule_free(s);
            return st;
        }
    }
    return RF_OK;
nomem:
    rf_p2p_schedule_free(s);
    return rf_err_set(err, RF_ERR_NOMEM, "p2p: out of memory");
}
