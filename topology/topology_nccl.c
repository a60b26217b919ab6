/*
 * refit: the NCCL communicators a topology needs (DESIGN.md section 9, transport "nccl").
 *
 * Pure arithmetic on the topology, the same on every rank: the placement check uses it to
 * refuse two ranks of one communicator on one GPU before any CUDA or NCCL call
 * (topology/topology_mpi.c), the job hands it to the nccl transport (runtime/job.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/topology.h"

void rf_nccl_layout_free(rf_nccl_layout_t *l)
{
    if (l == NULL)
        return;
    for (int k = 0; l->comms != NULL && k < l->n; k++)
        free(l->comms[k].ranks);
    free(l->comms);
    memset(l, 0, sizeof(*l));
}

rf_status_t rf_nccl_layout_build(const rf_topology_t *topo, rf_nccl_layout_t *l, rf_err_t *err)
{
    int T = rf_topology_trainer_size(topo), R = rf_topology_rollout_size(topo);
    int P = topo->t_pp > 0 ? topo->t_pp : 1;
    /* broadcast: a trainer-only gather communicator per stage with more than one trainer */
    int G = topo->mode == RF_MODE_P2P || T / P < 2 ? 0 : P;
    memset(l, 0, sizeof(*l));
    l->p2p = topo->mode == RF_MODE_P2P;
    l->comms = calloc((size_t)(P + G), sizeof(*l->comms));
    if (l->comms == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "nccl layout: out of memory");
    l->n = P + G;
    for (int k = 0; k < P + G; k++) {
        rf_nccl_comm_layout_t *c = &l->comms[k];
        int p = k % P;
        c->stage = p;
        c->gather = k >= P;
        c->ranks = malloc(((size_t)T + (size_t)R + 1) * sizeof(int));
        if (c->ranks == NULL) {
            rf_nccl_layout_free(l);
            return rf_err_set(err, RF_ERR_NOMEM, "nccl layout: out of memory");
        }
        int sender = rf_topology_trainer_rank(topo, 0, 0, 0, p);
        if (!l->p2p)
            c->ranks[c->n++] = sender;
        for (int w = 0; w < T && (l->p2p || c->gather); w++) {
            rf_rank_info_t ri;
            if (rf_topology_rank_info(topo, w, &ri) == RF_OK && ri.p == p &&
                (l->p2p || w != sender))
                c->ranks[c->n++] = w;
        }
        for (int r = 0; r < R && !c->gather; r++)
            c->ranks[c->n++] = T + r;
    }
    return RF_OK;
}

int rf_nccl_comm_rank(const rf_nccl_comm_layout_t *c, int w)
{
    for (int i = 0; i < c->n; i++)
        if (c->ranks[i] == w)
            return i;
    return -1;
}

int rf_nccl_layout_find(const rf_nccl_layout_t *l, int a, int b)
{
    for (int k = 0; l != NULL && k < l->n; k++)
        if (rf_nccl_comm_rank(&l->comms[k], a) >= 0 && rf_nccl_comm_rank(&l->comms[k], b) >= 0)
            return k;
    return -1;
}

void rf_nccl_layout_describe(const rf_nccl_layout_t *l, int k, char *out, size_t cap)
{
    const rf_nccl_comm_layout_t *c = &l->comms[k];
    size_t len = 0;
    int w = snprintf(out, cap, "stage %d %s communicator (world ranks ", c->stage,
                     c->gather ? "gather" : l->p2p ? "p2p" : "broadcast");
    len = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < c->n && len + 8 < cap; i++) {
        if (i == 8 && c->n > 10) {
            w = snprintf(out + len, cap - len, ", ... %d more", c->n - 8);
            len += w > 0 ? (size_t)w : 0;
            break;
        }
        w = snprintf(out + len, cap - len, "%s%d", i ? ", " : "", c->ranks[i]);
        len += w > 0 ? (size_t)w : 0;
    }
    if (len + 2 < cap)
        snprintf(out + len, cap - len, ")");
}
