/*
 * refit: collective device placement (DESIGN.md section 3). The collective loading of a
 * topology file with its model config is model/'s (rf_model_load_topology() in
 * model/model_load.c).
 *
 * rf_topology_place(): node-local ranks from MPI_Comm_split_type(SHARED), split by role,
 * give each rank its index among its role on its node and so its device; the all-gathered
 * records are checked by rf_placement_resolve(), a pure function every rank runs alike.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/checks.h"
#include "refit/topology.h"

/* ---- placement ------------------------------------------------------------------------- */

static const char *role_name(rf_role_t r)
{
    return r == RF_ROLE_TRAINER ? "trainer" : "rollout";
}

rf_status_t rf_placement_resolve(const rf_topology_t *topo, const rf_rank_record_t *recs, int n,
                                 int rank, rf_placement_t *out_p, rf_err_t *err)
{
    const rf_topology_t *t = topo;
    int T = rf_topology_trainer_size(t), R = rf_topology_rollout_size(t);
    rf_placement_t pl;
    if (n != T + R)
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "%s: world size %d != trainer %d + rollout %d ranks (mpirun -np %d)",
                          t->file, n, T, R, T + R);
    if (rank < 0 || rank >= n)
        return rf_err_set(err, RF_ERR_INVALID, "placement: rank %d outside [0, %d)", rank, n);

    /* nccl: NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU
     * detected"); say which communicator before any CUDA or NCCL call */
    rf_nccl_layout_t nl;
    memset(&nl, 0, sizeof(nl));
    if (t->transport == RF_TRANSPORT_NCCL && rf_nccl_layout_build(t, &nl, err) != RF_OK)
        return RF_ERR_NOMEM;
    for (int w = 0; w < n; w++) {
        const rf_rank_record_t *a = &recs[w];
        for (int v = 0; v < w && nl.n > 0; v++) {
            const rf_rank_record_t *b = &recs[v];
            int k;
            if (b->node_leader != a->node_leader || a->device < 0 || b->device != a->device ||
                (k = rf_nccl_layout_find(&nl, v, w)) < 0)
                continue;
            char what[160];
            rf_nccl_layout_describe(&nl, k, what, sizeof(what));
            rf_nccl_layout_free(&nl);
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "%s: transport nccl: ranks %d (%s) and %d (%s) would both use GPU %d "
                              "on host %s in the %s; NCCL refuses two ranks of one communicator "
                              "on one GPU: give every rank its own GPU (colocated pairs sharing a "
                              "GPU need transport ipc)",
                              t->file, v, role_name(b->info.role), w, role_name(a->info.role),
                              a->device, a->host, what);
        }
    }
    rf_nccl_layout_free(&nl);

    for (int w = 0; w < n; w++) {
        const rf_rank_record_t *a = &recs[w];
        rf_rank_info_t expect;
        rf_topology_rank_info(t, w, &expect);
        if (memcmp(&expect, &a->info, sizeof(expect)) != 0)
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "%s: rank %d on host %s: coordinates disagree with the topology "
                              "(different topology files?)",
                              t->file, w, a->host);
        const char *role = role_name(a->info.role);
        int ngpus = a->info.role == RF_ROLE_TRAINER ? t->t_ngpus : t->r_ngpus;
        if (ngpus > 0 && (a->local_index >= ngpus || a->device < 0))
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "%s: rank %d on host %s is %s number %d on its node but %s.gpus "
                              "lists %d gpus",
                              t->file, w, a->host, role, a->local_index + 1, role, ngpus);
        for (int v = 0; v < w; v++) {
            const rf_rank_record_t *b = &recs[v];
            if (b->node_leader != a->node_leader || a->device < 0 || b->device != a->device)
                continue;
            bool pair =
                t->colocated && t->transport == RF_TRANSPORT_IPC && a->info.role != b->info.role &&
                a->local_index == b->local_index;
            if (!pair)
                return rf_err_set(
                    err, RF_ERR_TOPOLOGY,
                    "%s: ranks %d (%s) and %d (%s) share %s on host %s but the "
                    "topology %s",
                    t->file, v, role_name(b->info.role), w, role, a->device_id, a->host,
                    !t->colocated ? "is not colocated"
                    : t->transport != RF_TRANSPORT_IPC
                        ? "shares a GPU only between a colocated ipc pair (transport is not ipc)"
                        : "pairs only trainer i with rollout i");
        }
    }

    memset(&pl, 0, sizeof(pl));
    const rf_rank_record_t *me = &recs[rank];
    pl.info = me->info;
    pl.rank = rank;
    pl.local_index = me->local_index;
    pl.device = me->device;
    snprintf(pl.device_id, sizeof(pl.device_id), "%s", me->device_id);
    snprintf(pl.host, sizeof(pl.host), "%s", me->host);
    pl.pair_rank = -1;
    /* nodes numbered by their lowest rank */
    for (int w = 0; w < n; w++)
        if (recs[w].node_leader == w) {
            if (w < me->node_leader)
                pl.node++;
            pl.nnodes++;
        }
    if (t->colocated) {
        for (int w = 0; w < n; w++) {
            const rf_rank_record_t *a = &recs[w];
            int found = -1;
            for (int v = 0; v < n && found < 0; v++)
                if (recs[v].node_leader == a->node_leader && recs[v].info.role != a->info.role &&
                    recs[v].local_index == a->local_index)
                    found = v;
            if (found < 0)
                return rf_err_set(err, RF_ERR_TOPOLOGY,
                                  "%s: colocated: rank %d (%s %d on host %s) has no %s rank with "
                                  "the same index on its node",
                                  t->file, w, role_name(a->info.role), a->local_index, a->host,
                                  a->info.role == RF_ROLE_TRAINER ? "rollout" : "trainer");
            if (w == rank)
                pl.pair_rank = found;
        }
    }
    *out_p = pl;
    return RF_OK;
}

rf_status_t rf_topology_place(const rf_topology_t *topo, MPI_Comm comm, rf_placement_t *out_p,
                              rf_err_t *err)
{
    int rank, size, nrank, leader, lrank, hlen = 0;
    MPI_Comm node, role;
    rf_rank_record_t mine, *all;
    rf_status_t st;
    RF_MPI_CHECK(MPI_Comm_rank(comm, &rank), err);
    RF_MPI_CHECK(MPI_Comm_size(comm, &size), err);
    memset(&mine, 0, sizeof(mine));
    /* a rank outside the grid still takes part so that the resolve step names the count */
    if (rf_topology_rank_info(topo, rank, &mine.info) != RF_OK) {
        mine.info.role = RF_ROLE_ROLLOUT;
        mine.info.world_rank = rank;
    }
    RF_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), err);
    RF_MPI_CHECK(MPI_Comm_rank(node, &nrank), err);
    RF_MPI_CHECK(MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, node), err);
    RF_MPI_CHECK(MPI_Comm_split(node, (int)mine.info.role, rank, &role), err);
    RF_MPI_CHECK(MPI_Comm_rank(role, &lrank), err);
    MPI_Comm_free(&role);
    MPI_Comm_free(&node);
    (void)nrank;

    char host[MPI_MAX_PROCESSOR_NAME];
    RF_MPI_CHECK(MPI_Get_processor_name(host, &hlen), err);
    snprintf(mine.host, sizeof(mine.host), "%s", host);
    mine.node_leader = leader;
    mine.local_index = lrank;
    const int *gpus = mine.info.role == RF_ROLE_TRAINER ? topo->t_gpus : topo->r_gpus;
    int ngpus = mine.info.role == RF_ROLE_TRAINER ? topo->t_ngpus : topo->r_ngpus;
    mine.device = ngpus > 0 && lrank < ngpus ? gpus[lrank] : -1;
    if (mine.device >= 0)
        snprintf(mine.device_id, sizeof(mine.device_id), "gpu%d", mine.device);
    else
        snprintf(mine.device_id, sizeof(mine.device_id), "host");

    all = calloc((size_t)size, sizeof(*all));
    int ok = all != NULL, all_ok;
    RF_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm), err);
    if (!all_ok) {
        free(all);
        return rf_err_set(err, RF_ERR_NOMEM, "placement: out of memory on some rank");
    }
    int rc =
        MPI_Allgather(&mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE, comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return rf_err_set(err, RF_ERR_MPI, "placement: MPI_Allgather failed (%d)", rc);
    }
    st = rf_placement_resolve(topo, all, size, rank, out_p, err);
    free(all);
    return st;
}
