/*
 * plan-cost: what planning costs one rank, computed in one process without launching the
 * world (issue 19 item 1, issue 18 item 4; docs/benchmarks.md, "Planning cost").
 *
 *   build/plan-cost [--ranks 8,64,512,4096] [--tensors 1000,10000,100000,1000000]
 *                   [--updates N] [--json FILE]
 *
 * Run from the source root (it reads jobs/models/deepseek-v3.config.json and
 * jobs/topologies/plan/qwen3-30b-a3b-wna16-triton-tp2.yaml). Three tables:
 *
 *   scale      the same model (DeepSeek-V3, its published config, fp8-block: 90,427 tensors;
 *              bench/deepseek-v3-standin.config.json is the qwen3_moe stand-in used before the
 *              deepseek_v3 family landed) at each world size, p2p, trainer
 *              {tp 4, ep 4, dp k} -> k engines of {tp 4, ep 4}, world 8k: for one trainer rank
 *              (rank 1) and one rollout rank (rank T) the CPU time and the heap bytes of what
 *              job setup plans on that rank (the manifest parsed and validated, the broadcast
 *              chunk plan, this rank's part of the p2p schedule and its pair digests, the
 *              rollout's reload plan with its source dtypes); the whole world's schedule
 *              (rf_p2p_schedule_build) beside it where it is quick enough to build;
 *   qwen3      full-size Qwen3-30B-A3B wna16 (56,115 tensors, two rollout ranks): rank 0's
 *              manifest build, and a rollout rank's manifest parse + validate, chunk plan,
 *              reload plan and source dtypes;
 *   bookkeep   qwen3_moe models of 1e3 .. 1e6 tiny tensors on one host rollout rank: the plan
 *              build, every piece applied in chunk order (rf_plan_apply: the per-piece time,
 *              the loader's share of it and the bookkeeping, the rest) and the stale-plan check
 *              (rf_plan_begin, once per update).
 *
 * Times are CPU seconds of this process (CLOCK_PROCESS_CPUTIME_ID), heap bytes the change in
 * glibc's in-use bytes (mallinfo2: arena + mmapped) while the rank's state is alive. A
 * benchmark, never a timed test: it prints, it does not judge. Its arenas are reserved with
 * MAP_NORESERVE (refit-plan's way), the bookkeeping models' are real (a few hundred MiB at 1e6).
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <malloc.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "refit/chunk.h"
#include "refit/format.h"
#include "refit/loader.h"
#include "refit/formats.h"
#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/p2p.h"
#include "refit/plan.h"
#include "refit/storage.h"
#include "refit/topology.h"

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void die(const char *what, const rf_err_t *err)
{
    fprintf(stderr, "plan-cost: %s: %s\n", what, err != NULL ? err->msg : "");
    exit(1);
}

typedef struct model {
    rf_topology_t topo;
    rf_model_config_t raw, cfg;
    rf_inventory_t inv;
    double inv_s;
} model_t;

static void model_load(const char *yaml, const char *path, model_t *m)
{
    rf_err_t err;
    rf_err_clear(&err);
    memset(m, 0, sizeof(*m));
    if (rf_topology_parse(yaml, strlen(yaml), path, &m->topo, &err) != RF_OK ||
        rf_model_config_load(m->topo.model_config_path, &m->raw, &err) != RF_OK)
        die(path, &err);
    int world = rf_topology_trainer_size(&m->topo) + rf_topology_rollout_size(&m->topo);
    if (rf_model_check_topology(&m->topo, &m->raw, world, &m->cfg, &err) != RF_OK ||
        rf_model_bind_topology(&m->topo, &m->cfg, &err) != RF_OK)
        die(path, &err);
    double t0 = cpu_s();
    if (rf_inventory_build(&m->cfg, m->topo.quantization, m->topo.group_size, &m->inv, &err) !=
        RF_OK)
        die(path, &err);
    m->inv_s = cpu_s() - t0;
}

static void model_free(model_t *m)
{
    rf_inventory_free(&m->inv);
    rf_model_config_free(&m->cfg);
    rf_model_config_free(&m->raw);
}

/* p2p plan: what each sender sends world rank ctx->rank (job_setup.c's p2p_senders). */
typedef struct snd_ctx {
    const model_t *m;
    int rank;
} snd_ctx_t;

static int senders_of(void *ctx, int tensor, int *snd, int64_t (*rect)[4], int max)
{
    const snd_ctx_t *c = ctx;
    return rf_p2p_senders(&c->m->topo, &c->m->inv, c->rank, tensor, snd, rect, max);
}

/* What one rank plans in job setup, its CPU seconds per part and its live heap bytes. */
typedef struct rank_cost {
    double manifest_s, parse_s, cplan_s, sched_s, digest_s, plan_s, dtype_s, total_s;
    size_t heap, sched_bytes;
    size_t receivers, rects, pieces, apps;
} rank_cost_t;

static rf_chunk_plan_t *broadcast_cplan(const rf_inventory_t *inv, const rf_manifest_t *man,
                                        uint64_t chunk_bytes, rf_err_t *err)
{
    rf_chunk_item_t *items = rf_chunk_items_of_manifest(inv, man);
    rf_chunk_plan_t *pl = NULL;
    if (items == NULL)
        return NULL;
    if (rf_chunk_plan_create(items, (size_t)man->n, chunk_bytes, &pl, err) != RF_OK)
        pl = NULL;
    free(items);
    return pl;
}

/* rank's setup planning against the serialized manifest buf (rank 0's, agreed). */
static void rank_plan(const model_t *m, const char *buf, size_t len, int rank, bool p2p,
                      rank_cost_t *c)
{
    rf_err_t err;
    rf_manifest_t man;
    rf_p2p_schedule_t s;
    rf_storage_t st;
    rf_plan_t plan;
    rf_rank_info_t ri;
    bool rollout;
    uint64_t chunk_bytes = m->topo.chunk_bytes - RF_CHUNK_TRAILER_BYTES;
    rf_err_clear(&err);
    memset(c, 0, sizeof(*c));
    memset(&s, 0, sizeof(s));
    rf_topology_rank_info(&m->topo, rank, &ri);
    rollout = ri.role == RF_ROLE_ROLLOUT;
    size_t h0 = heap_bytes();
    double t0 = cpu_s(), t;
    if (rf_manifest_parse(buf, len, &man, &err) != RF_OK)
        die("manifest", &err);
    c->parse_s = cpu_s() - t0;
    if (rf_manifest_validate(&man, &m->inv, &m->topo, &err) != RF_OK)
        die("manifest", &err);
    c->manifest_s = (t = cpu_s()) - t0;
    rf_chunk_plan_t *cplan = broadcast_cplan(&m->inv, &man, chunk_bytes, &err);
    if (cplan == NULL)
        die("chunk plan", &err);
    c->cplan_s = cpu_s() - t;
    t = cpu_s();
    if (p2p) {
        if (rf_p2p_schedule_build_rank(&m->topo, &m->inv, &man, chunk_bytes, rank, &s, &err) !=
            RF_OK)
            die("p2p schedule", &err);
        c->sched_s = cpu_s() - t;
        t = cpu_s();
        uint64_t acc = 0; /* the pair digests rf_p2p_expect_agree reports */
        for (size_t j = 0; j < s.nrecv; j++)
            for (int k = 0; k < s.recv[j].nsenders; k++)
                if (s.recv[j].rank == rank || s.recv[j].senders[k] == rank)
                    acc ^= rf_p2p_pair_digest(&s.recv[j], k);
        c->digest_s = cpu_s() - t;
        c->sched_bytes = rf_p2p_schedule_bytes(&s);
        c->receivers = s.nrecv;
        for (size_t j = 0; j < s.nrecv; j++) {
            c->rects += s.recv[j].n;
            c->pieces += s.recv[j].plan->n_pieces;
        }
        (void)acc;
    }
    if (rollout) {
        rf_format_t fmt = {.ops = rf_format_for(m->topo.quantization, (int)m->topo.r_backend),
                           .quant = m->topo.quantization,
                           .backend = (int)m->topo.r_backend};
        snd_ctx_t sc = {m, rank};
        t = cpu_s();
        if (rf_inventory_check_rollout(&m->inv, &ri.rc, &err) != RF_OK ||
            rf_storage_init(&st, m->inv.nmodules, &err) != RF_OK ||
            rf_plan_alloc_storage(&m->inv, &ri.rc, &fmt, &st, true, &err) != RF_OK ||
            (p2p ? rf_plan_build_p2p(&plan, &m->inv, &ri.rc, &st, &fmt, RF_POLICY_AUTO,
                                     senders_of, &sc, &err)
                 : rf_plan_build(&plan, &m->inv, &ri.rc, &st, &fmt, RF_POLICY_AUTO, &err)) !=
                RF_OK)
            die("reload plan", &err);
        c->plan_s = cpu_s() - t;
        t = cpu_s();
        for (int i = 0; i < man.n; i++)
            if (rf_plan_set_source_dtype(&plan, man.entries[i].tensor, man.entries[i].dtype,
                                         &err) != RF_OK)
                die("source dtype", &err);
        c->dtype_s = cpu_s() - t;
        c->apps = (size_t)plan.napps;
    }
    c->total_s = cpu_s() - t0;
    c->heap = heap_bytes() - h0;
    if (rollout) {
        rf_plan_free(&plan);
        rf_storage_free(&st);
    }
    rf_p2p_schedule_free(&s);
    rf_chunk_plan_destroy(cplan);
    rf_manifest_free(&man);
}

static char *manifest_text(const model_t *m, double *build_s, size_t *len)
{
    rf_err_t err;
    rf_manifest_t man;
    rf_err_clear(&err);
    double t0 = cpu_s();
    if (rf_manifest_build(&m->inv, &m->topo, NULL, NULL, &man, &err) != RF_OK)
        die("manifest build", &err);
    *build_s = cpu_s() - t0;
    *len = rf_manifest_serialize(&man, NULL, 0);
    char *buf = malloc(*len + 1);
    if (buf == NULL)
        die("out of memory", NULL);
    rf_manifest_serialize(&man, buf, *len + 1);
    rf_manifest_free(&man);
    return buf;
}

static json_t *cost_json(const rank_cost_t *c)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I}",
                     "total_cpu_s", c->total_s, "manifest_s", c->manifest_s, "chunk_plan_s",
                     c->cplan_s, "schedule_s", c->sched_s, "pair_digests_s", c->digest_s,
                     "reload_plan_s", c->plan_s, "source_dtypes_s", c->dtype_s, "heap_bytes",
                     (json_int_t)c->heap, "schedule_bytes", (json_int_t)c->sched_bytes,
                     "receivers", (json_int_t)c->receivers, "rects", (json_int_t)c->rects,
                     "pieces", (json_int_t)c->pieces, "applications", (json_int_t)c->apps);
}

static void scale(const int *ranks, int nranks, json_t *out)
{
    char yaml[1024], path[1024];
    snprintf(path, sizeof(path), "%s/bench/plan-cost.yaml", REFIT_SOURCE_DIR);
    printf("== scale: DeepSeek-V3 (deepseek_v3, 61 layers, 256 experts, fp8-block), p2p, "
           "trainer {tp 4, ep 4, dp k} -> k x {tp 4, ep 4}\n");
    printf("%6s %5s %8s %9s | %10s %10s %8s %8s %10s | %10s %10s %8s %8s %10s | %10s\n", "world",
           "k", "tensors", "manifest", "trainer s", "heap MiB", "recvs", "pieces", "sched KiB",
           "rollout s", "heap MiB", "recvs", "pieces", "sched KiB", "full-world");
    json_t *rows = json_array();
    for (int i = 0; i < nranks; i++) {
        model_t m;
        int k = ranks[i] / 8;
        if (k < 1 || ranks[i] % 8 != 0) {
            fprintf(stderr, "plan-cost: --ranks: %d is not a multiple of 8\n", ranks[i]);
            exit(2);
        }
        snprintf(yaml, sizeof(yaml),
                 "name: plan-cost-%d\n"
                 "model: { config: ../jobs/models/deepseek-v3.config.json, quantization: fp8-block }\n"
                 "trainer: { tp: 4, ep: 4, etp: 1, dp: %d }\n"
                 "rollout: { engines: %d, tp: 4, ep: 4, backend: triton }\n"
                 "transfer: { mode: p2p }\n",
                 ranks[i], k, k);
        model_load(yaml, path, &m);
        double mb;
        size_t len;
        char *buf = manifest_text(&m, &mb, &len);
        int T = rf_topology_trainer_size(&m.topo);
        rank_cost_t tc, rc;
        rank_plan(&m, buf, len, 1, true, &tc);
        rank_plan(&m, buf, len, T, true, &rc);
        double full_s = -1;
        if (ranks[i] <= 64) { /* the whole world's schedule: every receiver on one rank */
            rf_err_t err;
            rf_manifest_t man;
            rf_p2p_schedule_t s;
            rf_err_clear(&err);
            if (rf_manifest_parse(buf, len, &man, &err) != RF_OK ||
                rf_manifest_validate(&man, &m.inv, &m.topo, &err) != RF_OK)
                die("manifest", &err);
            double t0 = cpu_s();
            if (rf_p2p_schedule_build(&m.topo, &m.inv, &man,
                                      m.topo.chunk_bytes - RF_CHUNK_TRAILER_BYTES, &s,
                                      &err) != RF_OK)
                die("full schedule", &err);
            full_s = cpu_s() - t0;
            rf_p2p_schedule_free(&s);
            rf_manifest_free(&man);
        }
        char full[32];
        snprintf(full, sizeof(full), full_s < 0 ? "-" : "%.3f s", full_s);
        printf("%6d %5d %8d %7.3f s | %10.3f %10.1f %8zu %8zu %10.1f | %10.3f %10.1f %8zu %8zu "
               "%10.1f | %10s\n",
               ranks[i], k, m.inv.ntensors, mb, tc.total_s, tc.heap / 1048576.0, tc.receivers,
               tc.pieces, tc.sched_bytes / 1024.0, rc.total_s, rc.heap / 1048576.0,
               rc.receivers, rc.pieces, rc.sched_bytes / 1024.0, full);
        json_t *row = json_pack("{s:i, s:i, s:i, s:f, s:f, s:o, s:o}", "world", ranks[i],
                                "k", k, "tensors", m.inv.ntensors, "inventory_s", m.inv_s,
                                "rank0_manifest_build_s", mb, "trainer_rank_1",
                                cost_json(&tc), "rollout_rank_T", cost_json(&rc));
        if (full_s >= 0)
            json_object_set_new(row, "full_world_schedule_s", json_real(full_s));
        json_array_append_new(rows, row);
        printf("  (rank 1: manifest %.3f, chunk plan %.3f, schedule %.3f, digests %.3f s; rank "
               "%d: manifest %.3f, chunk plan %.3f, schedule %.3f, reload plan %.3f, dtypes "
               "%.3f s; inventory %.3f s on every rank)\n",
               tc.manifest_s, tc.cplan_s, tc.sched_s, tc.digest_s, T, rc.manifest_s, rc.cplan_s,
               rc.sched_s, rc.plan_s, rc.dtype_s, m.inv_s);
        fflush(stdout);
        free(buf);
        model_free(&m);
    }
    json_object_set_new(out, "scale", rows);
}

static void qwen3(json_t *out)
{
    char path[1024];
    size_t len;
    snprintf(path, sizeof(path), "%s/jobs/topologies/plan/qwen3-30b-a3b-wna16-triton-tp2.yaml",
             REFIT_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        die(path, NULL);
    char yaml[4096];
    size_t n = fread(yaml, 1, sizeof(yaml) - 1, f);
    fclose(f);
    yaml[n] = '\0';
    model_t m;
    model_load(yaml, path, &m);
    double mb;
    char *buf = manifest_text(&m, &mb, &len);
    rank_cost_t rc;
    int T = rf_topology_trainer_size(&m.topo);
    rank_plan(&m, buf, len, T, false, &rc);
    printf("\n== qwen3: Qwen3-30B-A3B wna16 (triton, 1 trainer -> 1 x tp 2, broadcast), %d "
           "tensors\n",
           m.inv.ntensors);
    printf("  rank 0 manifest build %.1f ms (inventory %.1f ms on every rank)\n", mb * 1e3,
           m.inv_s * 1e3);
    printf("  rollout rank %d: %.1f ms CPU = manifest parse %.1f + validate %.1f, chunk plan "
           "%.1f, reload plan %.1f, source dtypes %.1f ms; %zu applications, heap %.1f MiB\n",
           T, rc.total_s * 1e3, rc.parse_s * 1e3, (rc.manifest_s - rc.parse_s) * 1e3,
           rc.cplan_s * 1e3, rc.plan_s * 1e3,
           rc.dtype_s * 1e3, rc.apps, rc.heap / 1048576.0);
    json_object_set_new(out, "qwen3_30b_a3b_wna16",
                        json_pack("{s:i, s:f, s:f, s:o}", "tensors", m.inv.ntensors,
                                  "inventory_s", m.inv_s, "rank0_manifest_build_s", mb,
                                  "rollout_rank", cost_json(&rc)));
    free(buf);
    model_free(&m);
}

/* One host rollout rank of a qwen3_moe model of about `want` tiny tensors: plan build, every
 * piece in chunk order for `updates` updates, the stale-plan check per update. */
static json_t *bookkeep_one(int want, int updates)
{
    int L = 4, E = (want / L - 17) / 3;
    E = E < 2 ? 2 : E;
    char cfgp[] = "/tmp/plan-cost-XXXXXX";
    int fd = mkstemp(cfgp);
    if (fd < 0)
        die("mkstemp", NULL);
    FILE *f = fdopen(fd, "w");
    fprintf(f,
            "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\","
            "\"hidden_size\":8,\"num_hidden_layers\":%d,\"vocab_size\":16,"
            "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,"
            "\"intermediate_size\":8,\"num_experts\":%d,\"moe_intermediate_size\":4,"
            "\"num_experts_per_tok\":2,\"torch_dtype\":\"bfloat16\"}",
            L, E);
    fclose(f);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "name: plan-cost-bookkeeping\nmodel: { config: %s }\ntrainer: { tp: 1 }\n"
             "rollout: { engines: 1, tp: 1 }\n",
             cfgp);
    model_t m;
    model_load(yaml, "/tmp/plan-cost.yaml", &m);
    unlink(cfgp);
    rf_err_t err;
    rf_manifest_t man;
    rf_storage_t st;
    rf_plan_t plan;
    rf_rank_info_t ri;
    rf_err_clear(&err);
    rf_topology_rank_info(&m.topo, 1, &ri);
    rf_format_t fmt = {.ops = rf_format_for(RF_QUANT_NONE, (int)m.topo.r_backend),
                       .quant = RF_QUANT_NONE,
                       .backend = (int)m.topo.r_backend};
    if (rf_manifest_build(&m.inv, &m.topo, NULL, NULL, &man, &err) != RF_OK ||
        rf_storage_init(&st, m.inv.nmodules, &err) != RF_OK ||
        rf_plan_alloc_storage(&m.inv, &ri.rc, &fmt, &st, false, &err) != RF_OK)
        die("bookkeeping setup", &err);
    double t0 = cpu_s();
    if (rf_plan_build(&plan, &m.inv, &ri.rc, &st, &fmt, RF_POLICY_AUTO, &err) != RF_OK)
        die("plan build", &err);
    double build_s = cpu_s() - t0;
    rf_chunk_plan_t *cp = broadcast_cplan(&m.inv, &man, 64u << 20, &err);
    if (cp == NULL)
        die("chunk plan", &err);
    uint64_t maxp = 0;
    for (size_t k = 0; k < cp->n_pieces; k++)
        maxp = cp->pieces[k].bytes > maxp ? cp->pieces[k].bytes : maxp;
    char *zeros = calloc(1, maxp + 1);
    if (zeros == NULL)
        die("out of memory", NULL);
    /* the loader's work alone (rf_load_piece_runs + the host copy_rows, what rf_plan_apply
     * calls per piece), its inputs gathered in piece order beforehand: apply minus this is the
     * bookkeeping, both in CPU time */
    typedef struct lpiece {
        int tensor;
        int64_t local_expert;
        const rf_dst_t *dst;
        rf_dtype_t dtype;
        uint64_t rb, re;
    } lpiece_t;
    lpiece_t *lp = calloc(cp->n_pieces + 1, sizeof(*lp));
    if (lp == NULL)
        die("out of memory", NULL);
    for (size_t k = 0; k < cp->n_pieces; k++) {
        const rf_chunk_piece_t *pc = &cp->pieces[k];
        int t = man.entries[pc->item].tensor;
        const rf_app_t *a = &plan.apps[plan.app_of_tensor[t]];
        lp[k] = (lpiece_t){t, a->local_expert, &plan.layers[a->layer].dst[a->slot], a->src_dtype,
                           pc->row_begin, pc->row_end};
    }
    double begin_s = 0, apply_s = 0, loader_s = 0;
    uint64_t pieces = 0, probes = 0;
    for (int u = 0; u < updates; u++) {
        t0 = cpu_s();
        for (size_t k = 0; k < cp->n_pieces; k++) {
            rf_accel_rows_t runs[RF_LOAD_MAX_RUNS];
            int nr = rf_load_piece_runs(&m.inv, &ri.rc, lp[k].tensor, lp[k].local_expert,
                                        lp[k].dst, zeros, lp[k].dtype, lp[k].rb, lp[k].re, runs);
            for (int r = 0; r < nr; r++)
                plan.host_ax.ops->copy_rows(&plan.host_ax, &runs[r], NULL);
        }
        loader_s += cpu_s() - t0;
    }
    free(lp);
    for (int u = 1; u <= updates; u++) {
        t0 = cpu_s();
        if (rf_plan_begin(&plan, (uint32_t)u, &err) != RF_OK)
            die("begin", &err);
        begin_s += cpu_s() - t0;
        t0 = cpu_s();
        for (size_t c = 0; c < cp->n_chunks; c++) {
            const rf_chunk_t *ch = &cp->chunks[c];
            for (size_t k = ch->piece_begin; k < ch->piece_begin + ch->piece_count; k++) {
                const rf_chunk_piece_t *pc = &cp->pieces[k];
                rf_piece_src_t ps = {.tensor = man.entries[pc->item].tensor,
                                     .sender = -1,
                                     .row_begin = pc->row_begin,
                                     .row_end = pc->row_end,
                                     .src = zeros,
                                     .mem = RF_PIECE_HOST,
                                     .chunk = ch->seq};
                if (rf_plan_apply(&plan, &ps, &err) != RF_OK)
                    die("apply", &err);
            }
        }
        apply_s += cpu_s() - t0;
        pieces += plan.stats.loader_calls;
        probes += plan.stats.bookkeeping_probes;
        if (rf_plan_finalize(&plan, &err) != RF_OK)
            die("finalize", &err);
    }
    double per = apply_s / (double)pieces * 1e9, ld = loader_s / (double)pieces * 1e9;
    printf("%9d %10.1f %10" PRIu64 " %10.1f %10.1f %10.1f %8.2f %12.1f %10.1f\n",
           m.inv.ntensors, build_s * 1e3, pieces / (uint64_t)updates, per, ld, per - ld,
           (double)probes / (double)pieces, begin_s / updates * 1e6,
           begin_s / updates / (double)m.inv.ntensors * 1e9);
    fflush(stdout);
    json_t *row = json_pack("{s:i, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:i}", "tensors",
                            m.inv.ntensors, "plan_build_s", build_s, "pieces_per_update",
                            (json_int_t)(pieces / (uint64_t)updates), "apply_ns_per_piece", per,
                            "loader_ns_per_piece", ld, "bookkeeping_ns_per_piece", per - ld,
                            "probes_per_piece", (double)probes / (double)pieces,
                            "stale_check_us_per_update", begin_s / updates * 1e6, "slots",
                            st.nslots);
    /* rf_plan_begin: the signature check over the slots, the owner's identity / mapping per
     * layer, and the per-update reset of every application's cursor (linear in tensors) */
    free(zeros);
    rf_chunk_plan_destroy(cp);
    rf_plan_free(&plan);
    rf_storage_free(&st);
    rf_manifest_free(&man);
    model_free(&m);
    return row;
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    char *end;
    while (*s && n < max) {
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0)
            return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return n;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"ranks", required_argument, NULL, 'r'},
                                             {"tensors", required_argument, NULL, 't'},
                                             {"updates", required_argument, NULL, 'u'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int ranks[16] = {8, 64, 512, 4096}, nranks = 4;
    int tensors[16] = {1000, 10000, 100000, 1000000}, ntensors = 4, updates = 5, c;
    const char *json_path = NULL;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            nranks = parse_list(optarg, ranks, 16);
            break;
        case 't':
            ntensors = parse_list(optarg, tensors, 16);
            break;
        case 'u':
            updates = atoi(optarg);
            break;
        case 'j':
            json_path = optarg;
            break;
        case 'h':
            printf("usage: plan-cost [--ranks 8,64,512,4096] [--tensors 1000,...,1000000] "
                   "[--updates N] [--json FILE]\n");
            return 0;
        default:
            fprintf(stderr, "usage: plan-cost [--ranks LIST] [--tensors LIST] [--updates N] "
                            "[--json FILE]\n");
            return 2;
        }
    }
    if (nranks < 0 || ntensors < 0 || updates < 1) {
        fprintf(stderr, "plan-cost: --ranks and --tensors take positive integers separated by "
                        "commas, --updates a positive integer\n");
        return 2;
    }
    MPI_Init(&argc, &argv); /* one process: the library's MPI-typed pieces initialized */
    json_t *out = json_object();
    if (nranks > 0)
        scale(ranks, nranks, out);
    qwen3(out);
    if (ntensors > 0) {
        printf("\n== bookkeeping: qwen3_moe, 4 layers of tiny experts, one host rollout rank, "
               "broadcast pieces in chunk order, %d updates\n",
               updates);
        printf("%9s %10s %10s %10s %10s %10s %8s %12s %10s\n", "tensors", "build ms", "pieces",
               "apply ns", "loader ns", "bookkp ns", "probes", "stale us/upd", "ns/tensor");
        json_t *rows = json_array();
        for (int i = 0; i < ntensors; i++)
            json_array_append_new(rows, bookkeep_one(tensors[i], updates));
        json_object_set_new(out, "bookkeeping", rows);
    }
    if (json_path != NULL && json_dump_file(out, json_path, JSON_INDENT(1)) != 0)
        fprintf(stderr, "plan-cost: cannot write %s\n", json_path);
    json_decref(out);
    MPI_Finalize();
    return 0;
}
