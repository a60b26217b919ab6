/*
 * refit: the p2p schedule (include/refit/p2p.h): the rectangles each receiver needs from each
 * sender, one receiver's chunk plan over its compact sender stages, the whole world's schedule
 * (tools) or one rank's part of it (jobs: planning that costs a rank its own pieces, issue 19),
 * and the gate's expectation agreed from the ranks' parts (both ends of every pair must agree
 * on its chunks, bytes and digest, so a rank that planned differently fails setup).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

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

/* The rectangles of `tensor` for a rollout rank whose coordinates are ri (rf_p2p_rects). */
static int rects_of(const rf_topology_t *topo, const rf_inventory_t *inv, const rf_rank_info_t *ri,
                    int tensor, rf_owner_t out[RF_MAX_OWNERS])
{
    const rf_tensor_t *t = &inv->tensors[tensor];
    int64_t r0, r1, c0, c1;
    if (!rf_p2p_need(inv, &ri->rc, tensor, &r0, &r1, &c0, &c1))
        return 0;
    int T = rf_topology_trainer_size(topo);
    int edp = T / (topo->t_etp * topo->t_ep * topo->t_pp);
    int replica = t->expert >= 0 ? ri->engine % (edp > 0 ? edp : 1)
                                 : ri->engine % (topo->t_dp > 0 ? topo->t_dp : 1);
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

int rf_p2p_rects(const rf_topology_t *topo, const rf_inventory_t *inv, int receiver, int tensor,
                 rf_owner_t out[RF_MAX_OWNERS])
{
    rf_rank_info_t ri;
    if (rf_topology_rank_info(topo, receiver, &ri) != RF_OK || ri.role != RF_ROLE_ROLLOUT)
        return 0;
    return rects_of(topo, inv, &ri, tensor, out);
}

static void recv_free(rf_p2p_recv_t *r)
{
    free(r->rects);
    free(r->items);
    free(r->senders);
    rf_chunk_plan_destroy(r->plan);
    memset(r, 0, sizeof(*r));
}

void rf_p2p_schedule_free(rf_p2p_schedule_t *s)
{
    for (size_t j = 0; s->recv != NULL && j < s->nrecv; j++)
        recv_free(&s->recv[j]);
    free(s->recv);
    memset(s, 0, sizeof(*s));
}

static int rect_cmp(const void *a, const void *b)
{
    const rf_p2p_rect_t *x = a, *y = b;
    if (x->sender != y->sender)
        return x->sender < y->sender ? -1 : 1;
    return x->entry < y->entry ? -1 : (x->entry > y->entry);
}

/* One receiver's rectangles, senders and chunk plan. The rectangles are collected in manifest
 * order per sender and sorted sender-major (stable in the entry). */
static rf_status_t recv_build(const rf_topology_t *topo, const rf_inventory_t *inv,
                              const rf_manifest_t *man, uint64_t chunk_bytes, int rank,
                              rf_p2p_recv_t *r, rf_err_t *err)
{
    rf_rank_info_t ri;
    size_t cap = 64;
    memset(r, 0, sizeof(*r));
    r->rank = rank;
    if (rf_topology_rank_info(topo, rank, &ri) != RF_OK || ri.role != RF_ROLE_ROLLOUT)
        return rf_err_set(err, RF_ERR_INVALID, "p2p: rank %d is not a rollout rank", rank);
    r->rects = malloc(cap * sizeof(*r->rects));
    if (r->rects == NULL)
        goto nomem;
    for (int e = 0; e < man->n; e++) {
        rf_owner_t own[RF_MAX_OWNERS];
        int n = rects_of(topo, inv, &ri, man->entries[e].tensor, own);
        for (int k = 0; k < n; k++) {
            if (r->n == cap) {
                rf_p2p_rect_t *g = realloc(r->rects, 2 * cap * sizeof(*g));
                if (g == NULL)
                    goto nomem;
                r->rects = g;
                cap *= 2;
            }
            r->rects[r->n++] =
                (rf_p2p_rect_t){e, man->entries[e].tensor, own[k].rank, own[k].reg};
        }
    }
    if (r->n > 0) { /* shrink to fit: a trainer holds several receivers */
        rf_p2p_rect_t *g = realloc(r->rects, r->n * sizeof(*g));
        r->rects = g != NULL ? g : r->rects;
    }
    qsort(r->rects, r->n, sizeof(*r->rects), rect_cmp);
    r->items = calloc(r->n + 1, sizeof(*r->items));
    r->senders = malloc((r->n + 1) * sizeof(int));
    if (r->items == NULL || r->senders == NULL)
        goto nomem;
    for (size_t k = 0; k < r->n; k++) {
        const rf_p2p_rect_t *q = &r->rects[k];
        const rf_tensor_t *t = &inv->tensors[q->tensor];
        uint64_t es = rf_dtype_size(man->entries[q->entry].dtype);
        if (r->nsenders == 0 || r->senders[r->nsenders - 1] != q->sender)
            r->senders[r->nsenders++] = q->sender;
        r->items[k].stage = r->nsenders - 1;
        r->items[k].rows = (uint64_t)(q->reg.r1 - q->reg.r0);
        r->items[k].row_bytes = (uint64_t)(q->reg.c1 - q->reg.c0) * es;
        r->items[k].bytes = r->items[k].rows * r->items[k].row_bytes;
        r->items[k].name = t->name;
    }
    int *g = realloc(r->senders, ((size_t)r->nsenders + 1) * sizeof(int));
    r->senders = g != NULL ? g : r->senders;
    rf_status_t st = rf_chunk_plan_create(r->items, r->n, chunk_bytes, &r->plan, err);
    if (st != RF_OK)
        recv_free(r);
    return st;
nomem:
    recv_free(r);
    return rf_err_set(err, RF_ERR_NOMEM, "p2p: out of memory (receiver rank %d)", rank);
}

int rf_p2p_senders(const rf_topology_t *topo, const rf_inventory_t *inv, int receiver, int tensor,
                   int *snd, int64_t (*rect)[4], int max)
{
    rf_owner_t own[RF_MAX_OWNERS];
    int n = rf_p2p_rects(topo, inv, receiver, tensor, own);
    n = n < max ? n : max;
    for (int i = 0; i < n; i++) {
        snd[i] = own[i].rank;
        rect[i][0] = own[i].reg.r0;
        rect[i][1] = own[i].reg.r1;
        rect[i][2] = own[i].reg.c0;
        rect[i][3] = own[i].reg.c1;
    }
    return n;
}

rf_chunk_item_t *rf_chunk_items_of_manifest(const rf_inventory_t *inv, const rf_manifest_t *man)
{
    rf_chunk_item_t *items = calloc((size_t)man->n + 1, sizeof(*items));
    for (int i = 0; items != NULL && i < man->n; i++) {
        const rf_tensor_t *t = &inv->tensors[man->entries[i].tensor];
        items[i].stage = man->entries[i].stage;
        items[i].rows = rf_tensor_rows(t);
        items[i].bytes = man->entries[i].nbytes; /* the manifest's dtype */
        items[i].row_bytes = items[i].rows ? items[i].bytes / items[i].rows : 0;
        items[i].name = t->name;
    }
    return items;
}

rf_status_t rf_p2p_schedule_build(const rf_topology_t *topo, const rf_inventory_t *inv,
                                  const rf_manifest_t *man, uint64_t chunk_bytes,
                                  rf_p2p_schedule_t *s, rf_err_t *err)
{
    memset(s, 0, sizeof(*s));
    s->T = rf_topology_trainer_size(topo);
    s->R = rf_topology_rollout_size(topo);
    s->rank = -1;
    s->recv = calloc((size_t)s->R + 1, sizeof(rf_p2p_recv_t));
    if (s->recv == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "p2p: out of memory");
    for (int j = 0; j < s->R; j++) {
        rf_status_t st = recv_build(topo, inv, man, chunk_bytes, s->T + j, &s->recv[j], err);
        if (st != RF_OK) {
            rf_p2p_schedule_free(s);
            return st;
        }
        s->nrecv++;
    }
    return RF_OK;
}

/* Whether trainer `me` can feed engine `engine`: it holds a dense copy of the engine's replica
 * (engine mod DP = its d, cp 0) or an expert copy of it (engine mod EDP = its x); fsdp ranks
 * are the one copy, so every engine. A superset: recv_build decides. */
static bool may_feed(const rf_topology_t *topo, const rf_rank_info_t *me, int engine)
{
    int T = rf_topology_trainer_size(topo);
    int edp = T / (topo->t_etp * topo->t_ep * topo->t_pp);
    if (topo->t_layout == RF_TRAINER_LAYOUT_FSDP)
        return true;
    bool dense = me->c == 0 && me->d == engine % (topo->t_dp > 0 ? topo->t_dp : 1);
    bool expert = me->x == engine % (edp > 0 ? edp : 1);
    return dense || expert;
}

rf_status_t rf_p2p_schedule_build_rank(const rf_topology_t *topo, const rf_inventory_t *inv,
                                       const rf_manifest_t *man, uint64_t chunk_bytes, int rank,
                                       rf_p2p_schedule_t *s, rf_err_t *err)
{
    rf_rank_info_t me;
    size_t cap = 1;
    memset(s, 0, sizeof(*s));
    s->T = rf_topology_trainer_size(topo);
    s->R = rf_topology_rollout_size(topo);
    s->rank = rank;
    if (rf_topology_rank_info(topo, rank, &me) != RF_OK)
        return rf_err_set(err, RF_ERR_INVALID, "p2p: rank %d is outside the world of %d", rank,
                          s->T + s->R);
    s->recv = calloc(cap, sizeof(rf_p2p_recv_t));
    if (s->recv == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "p2p: out of memory");
    if (me.role == RF_ROLE_ROLLOUT) {
        rf_status_t st = recv_build(topo, inv, man, chunk_bytes, rank, &s->recv[0], err);
        if (st != RF_OK) {
            rf_p2p_schedule_free(s);
            return st;
        }
        s->nrecv = 1;
        return RF_OK;
    }
    for (int j = 0; j < s->R; j++) {
        rf_rank_info_t ri;
        if (rf_topology_rank_info(topo, s->T + j, &ri) != RF_OK || !may_feed(topo, &me, ri.engine))
            continue;
        if (s->nrecv == cap) {
            rf_p2p_recv_t *g = realloc(s->recv, 2 * cap * sizeof(*g));
            if (g == NULL) {
                rf_p2p_schedule_free(s);
                return rf_err_set(err, RF_ERR_NOMEM, "p2p: out of memory");
            }
            s->recv = g;
            cap *= 2;
        }
        rf_status_t st = recv_build(topo, inv, man, chunk_bytes, s->T + j, &s->recv[s->nrecv], err);
        if (st != RF_OK) {
            rf_p2p_schedule_free(s);
            return st;
        }
        if (rf_p2p_recv_stage(&s->recv[s->nrecv], rank) < 0)
            recv_free(&s->recv[s->nrecv]); /* nothing from this rank */
        else
            s->nrecv++;
    }
    return RF_OK;
}

const rf_p2p_recv_t *rf_p2p_schedule_find(const rf_p2p_schedule_t *s, int rank)
{
    size_t lo = 0, hi = s->nrecv;
    while (lo < hi) { /* ascending world rank */
        size_t mid = lo + (hi - lo) / 2;
        if (s->recv[mid].rank == rank)
            return &s->recv[mid];
        if (s->recv[mid].rank < rank)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int rf_p2p_recv_stage(const rf_p2p_recv_t *rv, int sender)
{
    int lo = 0, hi = rv->nsenders;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (rv->senders[mid] == sender)
            return mid;
        if (rv->senders[mid] < sender)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

uint64_t rf_p2p_pair_digest(const rf_p2p_recv_t *rv, int stage)
{
    XXH3_state_t *h = XXH3_createState();
    if (h == NULL)
        return 0;
    XXH3_64bits_reset(h);
    const rf_chunk_plan_t *pl = rv->plan;
    const rf_chunk_stage_range_t *sr = &pl->stages[stage];
    int64_t pair[2] = {rv->senders[stage], rv->rank};
    XXH3_64bits_update(h, pair, sizeof(pair));
    for (uint32_t c = sr->chunk_begin; c < sr->chunk_begin + sr->chunk_count; c++) {
        const rf_chunk_t *ch = &pl->chunks[c];
        uint64_t cw[2] = {ch->seq, ch->payload_bytes};
        XXH3_64bits_update(h, cw, sizeof(cw));
        for (size_t k = ch->piece_begin; k < ch->piece_begin + ch->piece_count; k++) {
            const rf_chunk_piece_t *pc = &pl->pieces[k];
            const rf_p2p_rect_t *q = &rv->rects[pc->item];
            int64_t w[8] = {q->tensor, q->reg.r0, q->reg.r1, q->reg.c0, q->reg.c1,
                            (int64_t)pc->row_begin, (int64_t)pc->row_end, (int64_t)pc->offset};
            XXH3_64bits_update(h, w, sizeof(w));
        }
    }
    uint64_t d = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return d;
}

static size_t plan_bytes(const rf_chunk_plan_t *pl)
{
    if (pl == NULL)
        return 0;
    return sizeof(*pl) + pl->n_chunks * sizeof(rf_chunk_t) + pl->n_pieces * sizeof(rf_chunk_piece_t) +
           (size_t)pl->n_stages * sizeof(rf_chunk_stage_range_t);
}

size_t rf_p2p_schedule_bytes(const rf_p2p_schedule_t *s)
{
    size_t b = s->nrecv * sizeof(rf_p2p_recv_t);
    for (size_t j = 0; j < s->nrecv; j++) {
        const rf_p2p_recv_t *r = &s->recv[j];
        b += r->n * (sizeof(rf_p2p_rect_t) + sizeof(rf_chunk_item_t)) +
             (size_t)r->nsenders * sizeof(int) + plan_bytes(r->plan);
    }
    return b;
}

/* One end's report of one pair. */
typedef struct pair_rec {
    int32_t sender, receiver, side; /* side 0: the sender's report, 1: the receiver's */
    int32_t from;                   /* the reporting rank */
    uint64_t chunks, bytes, digest;
} pair_rec_t;

static int pair_cmp(const void *a, const void *b)
{
    const pair_rec_t *x = a, *y = b;
    if (x->sender != y->sender)
        return x->sender < y->sender ? -1 : 1;
    if (x->receiver != y->receiver)
        return x->receiver < y->receiver ? -1 : 1;
    return x->side < y->side ? -1 : (x->side > y->side);
}

rf_status_t rf_p2p_expect_records(const rf_p2p_schedule_t *s, int rank, uint64_t per_chunk,
                                  void **recs_p, int *bytes_p, rf_err_t *err)
{
    int n = 0;
    size_t cap = 0;
    *recs_p = NULL;
    *bytes_p = 0;
    for (size_t j = 0; j < s->nrecv; j++)
        cap += s->recv[j].rank == rank ? (size_t)s->recv[j].nsenders : 1;
    pair_rec_t *mine = calloc(cap + 1, sizeof(*mine));
    if (mine == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "p2p expectation: out of memory");
    for (size_t j = 0; j < s->nrecv; j++) {
        const rf_p2p_recv_t *rv = &s->recv[j];
        for (int k = 0; k < rv->nsenders; k++) {
            int side = rv->rank == rank ? 1 : rv->senders[k] == rank ? 0 : -1;
            if (side < 0)
                continue; /* another sender's pair of a receiver this rank sends to */
            const rf_chunk_stage_range_t *sr = &rv->plan->stages[k];
            mine[n++] = (pair_rec_t){rv->senders[k], rv->rank, side, rank, sr->chunk_count,
                                     sr->payload_bytes + sr->chunk_count * per_chunk,
                                     rf_p2p_pair_digest(rv, k)};
        }
    }
    *recs_p = mine;
    *bytes_p = n * (int)sizeof(pair_rec_t);
    return RF_OK;
}

rf_status_t rf_p2p_expect_check(void *recs, size_t bytes, rf_gate_expect_t *expect,
                                rf_err_t *err)
{
    rf_status_t st = RF_OK;
    pair_rec_t *all = recs;
    size_t m = bytes / sizeof(pair_rec_t);
    qsort(all, m, sizeof(pair_rec_t), pair_cmp);
    /* records in pairs (sender side 0, receiver side 1): each pass consumes both or stops */
    for (size_t i = 0; i < m && st == RF_OK; i += 2) {
        const pair_rec_t *a = &all[i], *b = i + 1 < m ? &all[i + 1] : NULL;
        bool both = b != NULL && a->side == 0 && b->side == 1 && b->sender == a->sender &&
                    b->receiver == a->receiver;
        if (!both) {
            st = rf_err_set(err, RF_ERR_MISMATCH,
                            "p2p schedule: rank %d plans %" PRIu64 " chunks (%" PRIu64
                            " bytes) from rank %d to rank %d, rank %d plans none (the ranks "
                            "derived different schedules: topology, model, manifest or "
                            "chunk size differ)",
                            a->from, a->chunks, a->bytes, a->sender, a->receiver,
                            a->side == 0 ? a->receiver : a->sender);
            break;
        }
        if (a->chunks != b->chunks || a->bytes != b->bytes || a->digest != b->digest) {
            st = rf_err_set(err, RF_ERR_MISMATCH,
                            "p2p schedule: pair rank %d -> rank %d: the sender plans %" PRIu64
                            " chunks (%" PRIu64 " bytes, digest %016" PRIx64
                            "), the receiver %" PRIu64 " (%" PRIu64 " bytes, digest %016" PRIx64
                            "): the ranks derived different schedules",
                            a->sender, a->receiver, a->chunks, a->bytes, a->digest, b->chunks,
                            b->bytes, b->digest);
            break;
        }
        if (expect != NULL && a->sender < expect->nranks && a->receiver < expect->nranks) {
            size_t idx = (size_t)a->sender * (size_t)expect->nranks + (size_t)a->receiver;
            expect->chunks[idx] += a->chunks;
            expect->bytes[idx] += a->bytes;
        }
    }
    return st;
}

rf_status_t rf_p2p_expect_agree(const rf_p2p_schedule_t *s, int rank, uint64_t per_chunk,
                                MPI_Comm comm, rf_gate_expect_t *expect, rf_err_t *err)
{
    int size, me, nb = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &me);
    void *mine = NULL;
    char *all = NULL;
    int *counts = NULL, *displs = NULL;
    /* a failed count still takes part (0 bytes): the collective completes everywhere */
    rf_status_t st = rf_p2p_expect_records(s, rank, per_chunk, &mine, &nb, err);
    if (me == 0) {
        counts = calloc((size_t)size, sizeof(int));
        displs = calloc((size_t)size + 1, sizeof(int));
    }
    if (MPI_Gather(&nb, 1, MPI_INT, counts, 1, MPI_INT, 0, comm) != MPI_SUCCESS) {
        free(mine);
        free(counts);
        free(displs);
        return rf_err_set(err, RF_ERR_MPI, "rank %d: MPI_Gather of the p2p pairs failed", rank);
    }
    size_t total = 0;
    if (me == 0 && counts != NULL && displs != NULL) {
        for (int r = 0; r < size; r++) {
            displs[r] = (int)total;
            total += (size_t)counts[r];
        }
        all = malloc(total + 1);
    }
    bool root_ok = me != 0 || (counts != NULL && displs != NULL && all != NULL);
    if (MPI_Gatherv(mine, nb, MPI_BYTE, root_ok ? all : NULL, counts, displs, MPI_BYTE, 0,
                    comm) != MPI_SUCCESS && st == RF_OK)
        st = rf_err_set(err, RF_ERR_MPI, "rank %d: MPI_Gatherv of the p2p pairs failed", rank);
    free(mine);
    if (me == 0 && st == RF_OK && !root_ok)
        st = rf_err_set(err, RF_ERR_NOMEM, "p2p expectation: out of memory on rank 0");
    if (me == 0 && st == RF_OK)
        st = rf_p2p_expect_check(all, total, expect, err);
    free(all);
    free(counts);
    free(displs);
    return st;
}
