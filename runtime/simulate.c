/*
 * refit: the scale model of one update (include/refit/simulate.h, docs/simulate.md).
 *
 * Every byte count here comes from the planners the job runs: rf_manifest_build (no
 * checkpoint: the generator's manifest, every quantized linear quantized on the trainer),
 * rf_chunk_plan_create over the manifest's items (broadcast: one stage-major plan, each stage
 * sent by its stage sender to every rollout rank) and rf_p2p_schedule_build (p2p: one plan per
 * rollout rank whose stages are the senders). The p2p schedule is read only through
 * sim_p2p_pairs(), the one adapter, so a reorganised schedule changes one function here.
 * The per-pair wire bytes are the gate's expectation (payload + chunk headers + trailers),
 * which every committed update checks against the transport's counters; the mpi tests compare
 * them with refit-run's profile (tests/mpi/simulate.cmake).
 *
 * The link model is deliberately plain (docs/simulate.md says what it leaves out): each pair's
 * bytes load the sender's and the receiver's NVLink (same node) or NIC (different nodes),
 * optionally one fabric per node for intra-node bytes; the update takes as long as the most
 * loaded link, plus a per-chunk cost on it and one chunk of pipeline fill.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "refit/chunk.h"
#include "refit/manifest.h"
#include "refit/p2p.h"
#include "refit/simulate.h"
#include "refit/trainer.h"
#include "refit/transport.h"

/* ---- the machine ------------------------------------------------------------------------ */

void rf_machine_default(rf_machine_t *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "machine");
    m->gpus_per_node = 8;
    m->nodes = 0;
    m->nvlink_Bps = 450e9;  /* NVLink 4 (H100 / H200): 900 GB/s both directions per GPU */
    m->nic_Bps = 50e9;      /* 400 Gb/s per GPU (one ConnectX-7 per GPU) */
    m->node_Bps = 0;
    m->chunk_latency_s = 10e-6;
}

const char *rf_link_class_name(rf_link_class_t c)
{
    static const char *const names[RF_LINK_NCLASSES] = {"nvlink-out", "nvlink-in", "nic-out",
                                                        "nic-in", "node"};
    return c >= 0 && c < RF_LINK_NCLASSES ? names[c] : "?";
}

static rf_status_t mfail(rf_err_t *err, const char *file, const char *key, const char *what,
                         const char *val)
{
    return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: machine.%s: %s%s%s%s", file, key, what,
                      val ? " (value " : "", val ? val : "", val ? ")" : "");
}

/* "0" or a rate ("450GB/s") */
static rf_status_t machine_rate(const char *file, const char *key, const char *v, double *out,
                                bool zero_ok, rf_err_t *err)
{
    if (zero_ok && strcmp(v, "0") == 0) {
        *out = 0;
        return RF_OK;
    }
    if (rf_topology_parse_rate(v, out) != RF_OK || !(*out > 0))
        return mfail(err, file, key, "not a rate (for example 50GB/s)", v);
    return RF_OK;
}

static rf_status_t machine_int(const char *file, const char *key, const char *v, long lo,
                               long hi, int *out, rf_err_t *err)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
        char why[96];
        snprintf(why, sizeof(why), "must be an integer in [%ld, %ld]", lo, hi);
        return mfail(err, file, key, why, v);
    }
    *out = (int)x;
    return RF_OK;
}

static rf_status_t machine_key(rf_machine_t *m, const char *file, const char *k, const char *v,
                               rf_err_t *err)
{
    if (strcmp(k, "name") == 0) {
        snprintf(m->name, sizeof(m->name), "%s", v);
        return RF_OK;
    }
    if (strcmp(k, "gpus_per_node") == 0)
        return machine_int(file, k, v, 1, 1 << 16, &m->gpus_per_node, err);
    if (strcmp(k, "nodes") == 0)
        return machine_int(file, k, v, 0, 1 << 20, &m->nodes, err);
    if (strcmp(k, "nvlink_bandwidth") == 0)
        return machine_rate(file, k, v, &m->nvlink_Bps, false, err);
    if (strcmp(k, "nic_bandwidth") == 0)
        return machine_rate(file, k, v, &m->nic_Bps, false, err);
    if (strcmp(k, "node_bandwidth") == 0)
        return machine_rate(file, k, v, &m->node_Bps, true, err);
    if (strcmp(k, "chunk_latency_us") == 0) {
        char *end;
        double us = strtod(v, &end);
        if (end == v || *end != '\0' || !(us >= 0) || us > 1e9)
            return mfail(err, file, k, "must be a number of microseconds >= 0", v);
        m->chunk_latency_s = us * 1e-6;
        return RF_OK;
    }
    return mfail(err, file, k, "unknown key (gpus_per_node, nodes, nvlink_bandwidth, "
                 "nic_bandwidth, node_bandwidth, chunk_latency_us, name)", v);
}

rf_status_t rf_machine_parse(const char *yaml, size_t len, const char *file, rf_machine_t *m,
                             rf_err_t *err)
{
    yaml_parser_t p;
    yaml_document_t doc;
    rf_status_t st = RF_OK;
    rf_machine_default(m);
    snprintf(m->file, sizeof(m->file), "%s", file);
    if (!yaml_parser_initialize(&p))
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", file);
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&p, &doc)) {
        st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: line %zu: %s", file, p.problem_mark.line + 1,
                        p.problem ? p.problem : "yaml error");
        yaml_parser_delete(&p);
        return st;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    /* the keys may sit at the top or under one "machine:" map */
    if (root != NULL && root->type == YAML_MAPPING_NODE &&
        root->data.mapping.pairs.top - root->data.mapping.pairs.start == 1) {
        yaml_node_t *k = yaml_document_get_node(&doc, root->data.mapping.pairs.start->key);
        yaml_node_t *v = yaml_document_get_node(&doc, root->data.mapping.pairs.start->value);
        if (k->type == YAML_SCALAR_NODE && strcmp((char *)k->data.scalar.value, "machine") == 0)
            root = v;
    }
    if (root == NULL || root->type != YAML_MAPPING_NODE) {
        st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: machine: a map of keys is expected", file);
        goto out;
    }
    for (yaml_node_pair_t *q = root->data.mapping.pairs.start;
         q < root->data.mapping.pairs.top && st == RF_OK; q++) {
        yaml_node_t *k = yaml_document_get_node(&doc, q->key);
        yaml_node_t *v = yaml_document_get_node(&doc, q->value);
        if (k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: machine: line %zu: keys and values must "
                            "be scalars", file, k->start_mark.line + 1);
            break;
        }
        for (yaml_node_pair_t *o = root->data.mapping.pairs.start; o < q; o++) {
            yaml_node_t *k2 = yaml_document_get_node(&doc, o->key);
            if (k2->type == YAML_SCALAR_NODE &&
                strcmp((char *)k2->data.scalar.value, (char *)k->data.scalar.value) == 0) {
                st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: machine.%s: duplicate key (line %zu, "
                                "first on line %zu)", file, (char *)k->data.scalar.value,
                                k->start_mark.line + 1, k2->start_mark.line + 1);
                break;
            }
        }
        if (st == RF_OK)
            st = machine_key(m, file, (char *)k->data.scalar.value,
                             (char *)v->data.scalar.value, err);
    }
out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&p);
    return st;
}

/* ---- the traffic -------------------------------------------------------------------------- */

typedef struct sim_ctx {
    const rf_topology_t *topo;
    const rf_machine_t *m;
    rf_sim_t *s;
    int ngpus;               /* GPUs placed */
    uint64_t *load[RF_LINK_NCLASSES];   /* per GPU (node class: per node) */
    uint64_t *chunks[RF_LINK_NCLASSES];
    uint64_t *sent, *recvd;  /* per world rank */
    size_t cap_pairs, cap_gather;
} sim_ctx_t;

/* GPU of world rank w: trainers first, then rollout ranks; colocated pairs share one */
static int sim_gpu(const sim_ctx_t *cx, int w)
{
    return cx->topo->colocated && w >= cx->s->T ? w - cx->s->T : w;
}

static void sim_load(sim_ctx_t *cx, int src, int dst, uint64_t bytes, uint64_t chunks)
{
    int gs = sim_gpu(cx, src), gd = sim_gpu(cx, dst);
    if (gs == gd)
        return; /* one GPU: a local copy, no link */
    int ns = gs / cx->m->gpus_per_node, nd = gd / cx->m->gpus_per_node;
    rf_link_class_t out = ns == nd ? RF_LINK_NVLINK_OUT : RF_LINK_NIC_OUT;
    rf_link_class_t in = ns == nd ? RF_LINK_NVLINK_IN : RF_LINK_NIC_IN;
    cx->load[out][gs] += bytes;
    cx->chunks[out][gs] += chunks;
    cx->load[in][gd] += bytes;
    cx->chunks[in][gd] += chunks;
    if (ns == nd) {
        cx->load[RF_LINK_NODE][ns] += bytes;
        cx->chunks[RF_LINK_NODE][ns] += chunks;
    }
}

static rf_status_t sim_push(rf_sim_pair_t **v, size_t *n, size_t *cap, rf_sim_pair_t x,
                            rf_err_t *err)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        rf_sim_pair_t *g = realloc(*v, c * sizeof(*g));
        if (g == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "simulate: out of memory");
        *v = g;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return RF_OK;
}

static rf_status_t sim_pair(sim_ctx_t *cx, int src, int dst, uint64_t payload, uint64_t chunks,
                            rf_err_t *err)
{
    uint64_t per = RF_CHUNK_HEADER_BYTES + (cx->topo->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
    rf_sim_pair_t x = {src, dst, payload + chunks * per, payload, chunks, -1};
    if (chunks == 0)
        return RF_OK;
    RF_CHECK(sim_push(&cx->s->pairs, &cx->s->npairs, &cx->cap_pairs, x, err));
    cx->s->wire_bytes += x.bytes;
    cx->sent[src] += x.bytes;
    cx->recvd[dst] += x.bytes;
    sim_load(cx, src, dst, x.bytes, chunks);
    return RF_OK;
}

/* The manifest's chunk items, as job_setup.c and session.c build them for the chunk plan. */
static rf_chunk_item_t *sim_items(const rf_inventory_t *inv, const rf_manifest_t *man)
{
    return rf_chunk_items_of_manifest(inv, man);
}

/* Broadcast: each stage's chunks from its stage sender to every rollout rank; the stage
 * gather: per chunk piece, each other copy of record's part of the piece's rows (what
 * rf_trainer_contribute sends and bytes_gathered counts). */
static rf_status_t sim_broadcast(sim_ctx_t *cx, const rf_inventory_t *inv,
                                 const rf_manifest_t *man, const rf_chunk_plan_t *pl,
                                 rf_err_t *err)
{
    const rf_topology_t *topo = cx->topo;
    rf_sim_t *s = cx->s;
    uint64_t *g = calloc((size_t)s->T + 1, sizeof(uint64_t));
    if (g == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "simulate: out of memory");
    rf_status_t st = RF_OK;
    for (int p = 0; p < pl->n_stages && st == RF_OK; p++) {
        const rf_chunk_stage_range_t *sr = &pl->stages[p];
        int sender = rf_topology_trainer_rank(topo, 0, 0, 0, p);
        for (int r = 0; r < s->R && st == RF_OK; r++)
            st = sim_pair(cx, sender, s->T + r, sr->payload_bytes, sr->chunk_count, err);
        memset(g, 0, (size_t)s->T * sizeof(uint64_t));
        for (uint32_t c = sr->chunk_begin; c < sr->chunk_begin + sr->chunk_count; c++) {
            const rf_chunk_t *ch = &pl->chunks[c];
            for (size_t k = 0; k < ch->piece_count; k++) {
                const rf_chunk_piece_t *pc = &pl->pieces[ch->piece_begin + k];
                const rf_manifest_entry_t *e = &man->entries[pc->item];
                const rf_tensor_t *t = &inv->tensors[e->tensor];
                rf_owner_t own[RF_MAX_OWNERS];
                int n = rf_trainer_owners(topo, inv, t, own);
                for (int o = 0; o < n; o++) {
                    rf_region_t q = own[o].reg;
                    q.r0 = q.r0 > (int64_t)pc->row_begin ? q.r0 : (int64_t)pc->row_begin;
                    q.r1 = q.r1 < (int64_t)pc->row_end ? q.r1 : (int64_t)pc->row_end;
                    if (own[o].rank == sender || q.r1 <= q.r0 || q.c1 <= q.c0)
                        continue;
                    g[own[o].rank] += (uint64_t)(q.r1 - q.r0) * (uint64_t)(q.c1 - q.c0) *
                                      rf_dtype_size(e->dtype);
                }
            }
        }
        for (int w = 0; w < s->T && st == RF_OK; w++) {
            if (g[w] == 0)
                continue;
            rf_sim_pair_t x = {w, sender, g[w], g[w], 0, -1};
            st = sim_push(&s->gather, &s->ngather, &cx->cap_gather, x, err);
            s->gather_bytes += g[w];
            /* the gather shares the trainers' links with the broadcast */
            sim_load(cx, w, sender, g[w], sr->chunk_count);
        }
    }
    free(g);
    return st;
}

/* The one adapter onto the p2p schedule: every (sender, receiver) pair's payload and chunks,
 * read from rf_p2p_schedule_build's per-receiver chunk plans (stage k is sent by
 * recv.senders[k]). */
static rf_status_t sim_p2p_pairs(sim_ctx_t *cx, const rf_inventory_t *inv,
                                 const rf_manifest_t *man, uint64_t plan_bytes, rf_err_t *err)
{
    rf_p2p_schedule_t ps;
    RF_CHECK(rf_p2p_schedule_build(cx->topo, inv, man, plan_bytes, &ps, err));
    rf_status_t st = RF_OK;
    for (size_t j = 0; j < ps.nrecv && st == RF_OK; j++) {
        const rf_p2p_recv_t *rv = &ps.recv[j];
        for (int p = 0; p < rv->plan->n_stages && p < rv->nsenders && st == RF_OK; p++)
            st = sim_pair(cx, rv->senders[p], rv->rank, rv->plan->stages[p].payload_bytes,
                          rv->plan->stages[p].chunk_count, err);
    }
    rf_p2p_schedule_free(&ps);
    return st;
}

/* Trainer-side quantization: each trainer rank quantizes its own slice of every quantized
 * linear it holds (rf_trainer_shard), reading the model dtype (bf16, 2 bytes) per logical
 * element (wna16 weight_packed holds 8 per int32). */
static void sim_quant(sim_ctx_t *cx, const rf_inventory_t *inv)
{
    rf_sim_t *s = cx->s;
    if (cx->topo->quantization == RF_QUANT_NONE)
        return;
    for (int w = 0; w < s->T; w++) {
        rf_rank_info_t me;
        uint64_t b = 0;
        if (rf_topology_rank_info(cx->topo, w, &me) != RF_OK)
            continue;
        for (int i = 0; i < inv->ntensors; i++) {
            const rf_tensor_t *t = &inv->tensors[i];
            rf_region_t reg;
            if (inv->modules[t->module].quant == RF_QUANT_NONE ||
                (t->param != RF_PARAM_WEIGHT && t->param != RF_PARAM_WEIGHT_PACKED) ||
                !rf_trainer_shard(cx->topo, inv, t, &me, &reg))
                continue;
            b += (uint64_t)(reg.r1 - reg.r0) * (uint64_t)(reg.c1 - reg.c0) *
                 (t->param == RF_PARAM_WEIGHT_PACKED ? 8u : 1u) * 2u;
        }
        if (b > s->quant_in_bytes) {
            s->quant_in_bytes = b;
            s->quant_rank = w;
        }
    }
}

static double class_bw(const rf_machine_t *m, rf_link_class_t c)
{
    switch (c) {
    case RF_LINK_NVLINK_OUT:
    case RF_LINK_NVLINK_IN:
        return m->nvlink_Bps;
    case RF_LINK_NIC_OUT:
    case RF_LINK_NIC_IN:
        return m->nic_Bps;
    default:
        return m->node_Bps;
    }
}

static void sim_links(sim_ctx_t *cx)
{
    rf_sim_t *s = cx->s;
    const rf_machine_t *m = cx->m;
    double best = -1;
    for (int c = 0; c < RF_LINK_NCLASSES; c++) {
        int n = c == RF_LINK_NODE ? s->nodes : cx->ngpus;
        rf_sim_link_t *l = &s->link[c];
        double bw = class_bw(m, (rf_link_class_t)c);
        l->where = -1;
        for (int i = 0; i < n; i++) {
            l->total += cx->load[c][i];
            if (cx->load[c][i] > l->bytes) {
                l->bytes = cx->load[c][i];
                l->chunks = cx->chunks[c][i];
                l->where = i;
            }
        }
        /* GPU classes name the world rank of the GPU (the trainer's where colocated) */
        l->seconds = bw > 0 ? (double)l->bytes / bw : 0;
        if (l->bytes > 0 && (l->seconds > best || (best < 0))) {
            best = l->seconds;
            s->busiest = (rf_link_class_t)c;
        }
    }
    const rf_sim_link_t *b = &s->link[s->busiest];
    double bw = class_bw(m, s->busiest);
    s->wire_s = b->seconds;
    s->latency_s = (double)b->chunks * m->chunk_latency_s;
    uint64_t first = s->chunk_bytes < b->bytes ? s->chunk_bytes : b->bytes;
    s->fill_s = bw > 0 ? (double)first / bw : 0;
    s->predicted_s = s->wire_s + s->latency_s + s->fill_s;
    /* the wire floor: the busiest NIC, or where nothing leaves a node the busiest NVLink */
    rf_link_class_t fc = s->link[RF_LINK_NIC_OUT].seconds >= s->link[RF_LINK_NIC_IN].seconds
                             ? RF_LINK_NIC_OUT
                             : RF_LINK_NIC_IN;
    if (s->link[fc].bytes == 0)
        fc = s->link[RF_LINK_NVLINK_OUT].seconds >= s->link[RF_LINK_NVLINK_IN].seconds
                 ? RF_LINK_NVLINK_OUT
                 : RF_LINK_NVLINK_IN;
    s->floor_class = fc;
    s->floor_s = s->link[fc].seconds;
    double fbw = class_bw(m, fc), mean_send = s->T > 0 ? (double)s->wire_bytes / s->T : 0;
    double need = (double)s->max_recv > mean_send ? (double)s->max_recv : mean_send;
    s->bound_s = fbw > 0 ? need / fbw : 0;
}

/* A pair's link bandwidth: NVLink inside a node, NIC between nodes; 0 on one GPU. */
static double pair_bw(const sim_ctx_t *cx, int src, int dst)
{
    int gs = sim_gpu(cx, src), gd = sim_gpu(cx, dst);
    if (gs == gd)
        return 0;
    return gs / cx->m->gpus_per_node == gd / cx->m->gpus_per_node ? cx->m->nvlink_Bps
                                                                    : cx->m->nic_Bps;
}

static double pair_s(const sim_ctx_t *cx, const rf_sim_pair_t *p)
{
    double bw = pair_bw(cx, p->src, p->dst);
    return (bw > 0 ? (double)p->bytes / bw : 0) + (double)p->chunks * cx->m->chunk_latency_s;
}

static int pair_cmp_src(const void *a, const void *b)
{
    const rf_sim_pair_t *x = a, *y = b;
    if (x->src != y->src)
        return x->src < y->src ? -1 : 1;
    return x->dst < y->dst ? -1 : (x->dst > y->dst);
}

/*
 * The fluid rates of the active pairs: max-min fair shares of their links (progressive
 * filling). Pair f uses links lk[f * 3 + 0..2] (-1: none): its sender's outgoing and its
 * receiver's incoming link of its class, and inside a node with node_bandwidth set the node's
 * fabric; a link's capacity is 1 (its class's bandwidth, a pair's full rate) except the node
 * fabric's, node_Bps / nvlink_Bps. Each round, the links whose remaining capacity per unfixed
 * pair is the smallest fix their pairs at that share; a pair never exceeds 1. A pair on no
 * link (one GPU) moves at 1. This is what a fair fabric gives messages that are all posted
 * at once: a sender's other pairs take what a pair limited at its receiver leaves.
 */
static void sim_rates(const int *lk, size_t nf, double *cap, int *cnt, size_t nlinks,
                      double node_cap, int nodes_from, double *rate, unsigned char *fixed)
{
    for (size_t l = 0; l < nlinks; l++) {
        cap[l] = (int)l >= nodes_from ? node_cap : 1.0;
        cnt[l] = 0;
    }
    size_t left = 0;
    for (size_t f = 0; f < nf; f++) {
        fixed[f] = 0;
        rate[f] = 1.0;
        for (int q = 0; q < 3; q++)
            if (lk[f * 3 + q] >= 0)
                cnt[lk[f * 3 + q]]++;
        if (lk[f * 3] < 0)
            fixed[f] = 1;
        else
            left++;
    }
    while (left > 0) {
        double best = 1.0;
        for (size_t l = 0; l < nlinks; l++)
            if (cnt[l] > 0 && cap[l] / cnt[l] < best)
                best = cap[l] / cnt[l];
        const double lim = best * (1 + 1e-12);
        for (size_t f = 0; f < nf; f++) {
            if (fixed[f])
                continue;
            int hit = best >= 1.0;
            for (int q = 0; q < 3 && !hit; q++) {
                int l = lk[f * 3 + q];
                hit = l >= 0 && cap[l] / cnt[l] <= lim;
            }
            if (!hit)
                continue;
            fixed[f] = 1;
            left--;
            rate[f] = best;
        }
        /* charge the newly fixed pairs to their links after the round, so that every link
         * at the round's share is found in it */
        for (size_t f = 0; f < nf; f++) {
            if (fixed[f] != 1 || lk[f * 3] < 0)
                continue;
            fixed[f] = 2;
            for (int q = 0; q < 3; q++) {
                int l = lk[f * 3 + q];
                if (l >= 0) {
                    cap[l] -= rate[f];
                    cnt[l]--;
                }
            }
        }
    }
}

/*
 * p2p in refit's send order (ordered_s; rf_xfer_send_p2p, the mpi path): every sender takes
 * its pairs in the order rf_xfer_p2p_start gives (rotate: from its own first receiver,
 * rf_xfer_p2p_first_receiver, as runtime/session.c; 0: from the lowest) and keeps up to K of
 * them in flight at once, the next joining when one ends; every receiver takes chunks from
 * whichever of its senders is sending (the mpi receiver's any-order receives). A fluid model,
 * one event per finished pair: the active pairs move at their max-min fair shares of their
 * links (sim_rates); a pair's work is its bytes at full rate plus its chunks' latency.
 * Returns the time the last pair ends (*t_p), or RF_ERR_NOMEM.
 */
static rf_status_t sim_fanout(sim_ctx_t *cx, int rotate, int K, double *t_p, rf_err_t *err)
{
    rf_sim_t *s = cx->s;
    const int W = s->T + s->R, gpn = cx->m->gpus_per_node, G = cx->ngpus;
    const int nodes = s->nodes > 0 ? s->nodes : 1;
    const size_t np = s->npairs, nlinks = (size_t)G * 4 + (size_t)nodes;
    rf_sim_pair_t *v = malloc((np + 1) * sizeof(*v));
    size_t *first = calloc((size_t)W + 2, sizeof(size_t)); /* sender w: v[first[w]..] */
    size_t *start = calloc((size_t)W + 1, sizeof(size_t)); /* its first pair's position */
    size_t *joined = calloc((size_t)W + 1, sizeof(size_t)); /* pairs that joined its window */
    int *dst = calloc(np + 1, sizeof(int));
    double *left = calloc(np + 1, sizeof(double));           /* work left, s at full rate */
    unsigned char *done = calloc(np + 1, 1);
    size_t *act = calloc(np + 1, sizeof(size_t));            /* active pairs (v index) */
    int *lk = malloc((np + 1) * 3 * sizeof(int));
    double *rate = calloc(np + 1, sizeof(double)), *cap = calloc(nlinks, sizeof(double));
    int *cnt = calloc(nlinks, sizeof(int));
    unsigned char *fixed = calloc(np + 1, 1);
    rf_status_t st = RF_OK;
    if (v == NULL || first == NULL || start == NULL || joined == NULL || dst == NULL ||
        left == NULL || done == NULL || act == NULL || lk == NULL || rate == NULL ||
        cap == NULL || cnt == NULL || fixed == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "simulate: out of memory");
        goto out;
    }
    memcpy(v, s->pairs, np * sizeof(*v));
    qsort(v, np, sizeof(*v), pair_cmp_src);
    for (size_t i = 0; i < np; i++) {
        first[v[i].src + 1] = i + 1;
        left[i] = pair_s(cx, &v[i]);
        dst[i] = v[i].dst;
    }
    for (int w = 1; w <= W; w++)
        if (first[w] < first[w - 1])
            first[w] = first[w - 1];
    /* first[w] .. first[w + 1]: sender w's pairs, receivers ascending; start[w]: where its
     * sends start (rf_xfer_p2p_start, the rule runtime/session.c applies) */
    for (int w = 0; w < W; w++) {
        int r0 = rotate ? rf_xfer_p2p_first_receiver(w, s->T, s->R) : 0;
        start[w] = rf_xfer_p2p_start(&dst[first[w]], first[w + 1] - first[w], s->T + r0);
    }
    /* refit's order (rotate): each pair's place in it, for the tests (s->pairs[].order) */
    for (size_t i = 0; rotate && i < np; i++) {
        const int w = s->pairs[i].src;
        const size_t n = first[w + 1] - first[w];
        size_t k = first[w];
        while (k < first[w + 1] && v[k].dst != s->pairs[i].dst)
            k++;
        s->pairs[i].order = (int)((k - first[w] + n - start[w]) % n);
    }
    double t = 0;
    size_t finished = 0;
    const double node_cap = cx->m->node_Bps > 0 ? cx->m->node_Bps / cx->m->nvlink_Bps : 0;
    while (finished < np) {
        /* the windows: each sender's first K unfinished pairs of those that joined */
        size_t na = 0;
        for (int w = 0; w < W; w++) {
            const size_t n = first[w + 1] - first[w];
            if (joined[w] < (size_t)K && joined[w] < n)
                joined[w] = (size_t)K < n ? (size_t)K : n;
            for (size_t j = 0; j < joined[w]; j++) {
                size_t i = first[w] + (start[w] + j) % n;
                if (!done[i])
                    act[na++] = i;
            }
        }
        for (size_t f = 0; f < na; f++) {
            const rf_sim_pair_t *p = &v[act[f]];
            int gs = sim_gpu(cx, p->src), gd = sim_gpu(cx, p->dst);
            int *l = &lk[f * 3];
            l[0] = l[1] = l[2] = -1;
            if (gs == gd)
                continue;
            int intra = gs / gpn == gd / gpn;
            l[0] = gs * 2 + intra;
            l[1] = G * 2 + gd * 2 + intra;
            if (intra && node_cap > 0)
                l[2] = G * 4 + gs / gpn;
        }
        sim_rates(lk, na, cap, cnt, nlinks, node_cap, G * 4, rate, fixed);
        double dt = -1;
        for (size_t f = 0; f < na; f++) {
            double d = left[act[f]] / rate[f];
            if (dt < 0 || d < dt)
                dt = d;
        }
        if (dt < 0)
            break;
        t += dt;
        for (size_t f = 0; f < na; f++) {
            size_t i = act[f];
            left[i] -= rate[f] * dt;
            if (left[i] <= 1e-12 * (1 + t)) {
                done[i] = 1;
                finished++;
                /* the sender's next pair joins its window */
                const int w = v[i].src;
                if (joined[w] < first[w + 1] - first[w])
                    joined[w]++;
            }
        }
    }
    *t_p = t;
out:
    free(v);
    free(first);
    free(start);
    free(joined);
    free(dst);
    free(left);
    free(done);
    free(act);
    free(lk);
    free(rate);
    free(cap);
    free(cnt);
    free(fixed);
    return st;
}

/* refit's send order (ordered_s in simulate.h). */
static rf_status_t sim_ordered(sim_ctx_t *cx, rf_err_t *err)
{
    rf_sim_t *s = cx->s;
    double dag = 0, any = 0, any_rot = 0, one = 0;
    if (s->mode == RF_MODE_P2P) {
        RF_CHECK(sim_fanout(cx, 0, 1, &any, err));
        RF_CHECK(sim_fanout(cx, 1, 1, &one, err));
        RF_CHECK(sim_fanout(cx, 1, s->p2p_inflight, &any_rot, err));
        rf_sim_pair_t *v = malloc((s->npairs + 1) * sizeof(*v));
        double *fin = calloc((size_t)(s->T + s->R) + 1, sizeof(double));
        if (v == NULL || fin == NULL) {
            free(v);
            free(fin);
            return rf_err_set(err, RF_ERR_NOMEM, "simulate: out of memory");
        }
        memcpy(v, s->pairs, s->npairs * sizeof(*v));
        /* (src, dst) order: a sender's earlier receivers and a receiver's earlier senders
         * both come first, so one pass is the longest path */
        qsort(v, s->npairs, sizeof(*v), pair_cmp_src);
        for (size_t i = 0; i < s->npairs; i++) {
            double t0 = fin[v[i].src] > fin[v[i].dst] ? fin[v[i].src] : fin[v[i].dst];
            fin[v[i].src] = fin[v[i].dst] = t0 + pair_s(cx, &v[i]);
            dag = fin[v[i].dst] > dag ? fin[v[i].dst] : dag;
        }
        free(v);
        free(fin);
    } else {
        /* pairs are stage-major (one sender per stage, receivers in order) */
        for (size_t i = 0; i < s->npairs;) {
            int src = s->pairs[i].src;
            double out = 0, in = 0;
            for (; i < s->npairs && s->pairs[i].src == src; i++) {
                double bw = pair_bw(cx, src, s->pairs[i].dst);
                double t = bw > 0 ? (double)s->pairs[i].bytes / bw : 0;
                out += t;
                in = t > in ? t : in;
            }
            /* the stage's chunks, each posted once per receiver by the sender */
            dag += (out > in ? out : in) + (double)s->pairs[i - 1].chunks * cx->m->chunk_latency_s;
        }
    }
    double lo = s->wire_s + s->latency_s;
    if (s->mode == RF_MODE_P2P) {
        /* the old order: receivers also take their senders in world order */
        s->ordered_rank_s = (dag > lo ? dag : lo) + s->fill_s;
        s->ordered_asc_s = (any > lo ? any : lo) + s->fill_s;
        s->ordered_one_s = (one > lo ? one : lo) + s->fill_s;
        dag = any_rot;
    } else {
        s->ordered_rank_s = s->ordered_asc_s = s->ordered_one_s = (dag > lo ? dag : lo) + s->fill_s;
    }
    s->ordered_s = (dag > lo ? dag : lo) + s->fill_s;
    return RF_OK;
}

void rf_sim_free(rf_sim_t *s)
{
    free(s->pairs);
    free(s->gather);
    memset(s, 0, sizeof(*s));
}

rf_status_t rf_sim_run(const rf_topology_t *topo, const rf_inventory_t *inv,
                       const rf_machine_t *m, rf_mode_t mode, rf_sim_t *s, rf_err_t *err)
{
    memset(s, 0, sizeof(*s));
    s->mode = mode;
    s->T = rf_topology_trainer_size(topo);
    s->R = rf_topology_rollout_size(topo);
    s->chunk_bytes = topo->chunk_bytes;
    s->quant_rank = -1;
    /* the window the p2p senders keep (runtime/session.c send_p2p, on mpi) */
    s->p2p_inflight = topo->p2p_inflight ? topo->p2p_inflight : RF_XFER_P2P_INFLIGHT_DEFAULT;
    sim_ctx_t cx = {.topo = topo, .m = m, .s = s};
    cx.ngpus = topo->colocated ? (s->T > s->R ? s->T : s->R) : s->T + s->R;
    s->nodes = (cx.ngpus + m->gpus_per_node - 1) / m->gpus_per_node;
    if (m->nodes > 0 && s->nodes > m->nodes)
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "%s: machine.nodes: %d nodes x %d gpus_per_node = %d GPUs cannot "
                          "place %s (%d trainer + %d rollout ranks%s: %d GPUs, %d nodes)",
                          m->file[0] ? m->file : "(flags)", m->nodes, m->gpus_per_node,
                          m->nodes * m->gpus_per_node, topo->file, s->T, s->R,
                          topo->colocated ? ", colocated" : "", cx.ngpus, s->nodes);
    rf_manifest_t man;
    rf_chunk_item_t *items = NULL;
    rf_chunk_plan_t *pl = NULL;
    rf_status_t st = rf_manifest_build(inv, topo, NULL, NULL, &man, err);
    if (st != RF_OK)
        return st;
    s->payload_bytes = man.payload_bytes;
    for (int c = 0; c < RF_LINK_NCLASSES; c++) {
        size_t n = c == RF_LINK_NODE ? (size_t)s->nodes : (size_t)cx.ngpus;
        cx.load[c] = calloc(n + 1, sizeof(uint64_t));
        cx.chunks[c] = calloc(n + 1, sizeof(uint64_t));
        if (cx.load[c] == NULL || cx.chunks[c] == NULL)
            st = rf_err_set(err, RF_ERR_NOMEM, "simulate: out of memory");
    }
    cx.sent = calloc((size_t)(s->T + s->R) + 1, sizeof(uint64_t));
    cx.recvd = calloc((size_t)(s->T + s->R) + 1, sizeof(uint64_t));
    if (st == RF_OK && (cx.sent == NULL || cx.recvd == NULL))
        st = rf_err_set(err, RF_ERR_NOMEM, "simulate: out of memory");
    uint64_t plan_bytes = rf_xfer_plan_bytes(topo->chunk_bytes, topo->integrity);
    if (st == RF_OK && mode == RF_MODE_BROADCAST) {
        items = sim_items(inv, &man);
        st = items == NULL ? rf_err_set(err, RF_ERR_NOMEM, "simulate: out of memory")
                           : rf_chunk_plan_create(items, (size_t)man.n, plan_bytes, &pl, err);
        if (st == RF_OK)
            st = sim_broadcast(&cx, inv, &man, pl, err);
    } else if (st == RF_OK) {
        st = sim_p2p_pairs(&cx, inv, &man, plan_bytes, err);
    }
    if (st == RF_OK) {
        sim_quant(&cx, inv);
        for (int w = 0; w < s->T + s->R; w++) {
            if (cx.sent[w] > s->max_send) {
                s->max_send = cx.sent[w];
                s->max_send_rank = w;
            }
            if (cx.recvd[w] > s->max_recv) {
                s->max_recv = cx.recvd[w];
                s->max_recv_rank = w;
            }
        }
        sim_links(&cx);
        st = sim_ordered(&cx, err);
    }
    for (int c = 0; c < RF_LINK_NCLASSES; c++) {
        free(cx.load[c]);
        free(cx.chunks[c]);
    }
    free(cx.sent);
    free(cx.recvd);
    rf_chunk_plan_destroy(pl);
    free(items);
    rf_manifest_free(&man);
    if (st != RF_OK)
        rf_sim_free(s);
    return st;
}
