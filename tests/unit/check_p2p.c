/*
 * The p2p schedule (runtime/p2p.c) over many trainer (TP, PP, DP, EP) x rollout (engines, TP,
 * DP, EP) pairs on the llama-tiny and qwen3-moe-tiny inventories: for every rollout rank and
 * every tensor, the rectangles it receives tile exactly what its loaders read (rf_load_need),
 * without overlap; each lies inside its sender's own shard; dense tensors come from DP replica
 * engine mod DP and experts from expert-DP replica engine mod EDP; the per-receiver chunk plans
 * carry exactly the rectangles' bytes. Quantized inventories (fp8-block, wna16) too, each
 * checkpoint tensor in its own element units, on the topologies whose trainer slices are
 * aligned (rf_trainer_check_slice): a sender's scale rectangle covers exactly the blocks
 * (fp8) / groups (wna16) of the weight rectangle it sends the same rank.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/loader.h"
#include "refit/manifest.h"
#include "refit/p2p.h"
#include "refit/topology.h"
#include "refit/trainer.h"

typedef struct tcase {
    const char *model;   /* config under jobs/models */
    const char *trainer; /* YAML flow mapping body */
    const char *rollout;
    const char *quant;   /* model mapping entries after config (NULL: none) */
} tcase_t;

/* fp8-block weight / wna16 weight_packed rectangle q against its scale's rectangle from the
 * same sender to the same rank (rects[0..n) of that rank). */
static void check_scale_rect(const rf_inventory_t *inv, const rf_p2p_recv_t *rv,
                             const rf_p2p_rect_t *q)
{
    const rf_tensor_t *t = &inv->tensors[q->tensor];
    bool fp8 = t->param == RF_PARAM_WEIGHT && inv->modules[t->module].quant == RF_QUANT_FP8_BLOCK;
    if (!fp8 && t->param != RF_PARAM_WEIGHT_PACKED)
        return;
    char sib[RF_NAME_MAX + 32];
    const char *dot = strrchr(t->name, '.');
    snprintf(sib, sizeof(sib), "%.*s.%s", (int)(dot - t->name), t->name,
             fp8 ? "weight_scale_inv" : "weight_scale");
    int si = rf_inventory_find(inv, sib);
    ck_assert_msg(si >= 0, "%s", sib);
    rf_region_t want = q->reg;
    if (fp8) {
        want.r0 = q->reg.r0 / 128;
        want.r1 = (q->reg.r1 + 127) / 128;
        want.c0 = q->reg.c0 / 128;
        want.c1 = (q->reg.c1 + 127) / 128;
    } else {
        want.c0 = q->reg.c0 * 8 / inv->group_size;
        want.c1 = q->reg.c1 * 8 / inv->group_size;
    }
    int found = 0;
    for (size_t k = 0; k < rv->n; k++) {
        const rf_p2p_rect_t *x = &rv->rects[k];
        if (x->tensor != si || x->sender != q->sender)
            continue;
        found++;
        ck_assert_msg(x->reg.r0 == want.r0 && x->reg.r1 == want.r1 && x->reg.c0 == want.c0 &&
                          x->reg.c1 == want.c1,
                      "%s from %d: [%lld, %lld) x [%lld, %lld), its weight's blocks are "
                      "[%lld, %lld) x [%lld, %lld)",
                      sib, q->sender, (long long)x->reg.r0, (long long)x->reg.r1,
                      (long long)x->reg.c0, (long long)x->reg.c1, (long long)want.r0,
                      (long long)want.r1, (long long)want.c0, (long long)want.c1);
    }
    ck_assert_msg(found == 1, "%s: %d rectangles from sender %d", sib, found, q->sender);
    if (fp8)
        return;
    /* wna16: the rank also gets the whole weight_shape [2] of the linear, once */
    snprintf(sib, sizeof(sib), "%.*s.weight_shape", (int)(dot - t->name), t->name);
    si = rf_inventory_find(inv, sib);
    ck_assert_msg(si >= 0, "%s", sib);
    found = 0;
    for (size_t k = 0; k < rv->n; k++)
        if (rv->rects[k].tensor == si) {
            found++;
            ck_assert(rv->rects[k].reg.r0 == 0 && rv->rects[k].reg.r1 == 2 &&
                      rv->rects[k].reg.c0 == 0 && rv->rects[k].reg.c1 == 1);
        }
    ck_assert_msg(found == 1, "%s: %d rectangles to rank %d", sib, found, rv->rank);
}

/* a and b are the same receiver's schedule, rectangle for rectangle and piece for piece */
static void check_same_recv(const rf_p2p_recv_t *a, const rf_p2p_recv_t *b)
{
    ck_assert_int_eq(a->rank, b->rank);
    ck_assert_uint_eq(a->n, b->n);
    ck_assert_int_eq(a->nsenders, b->nsenders);
    ck_assert(memcmp(a->senders, b->senders, (size_t)a->nsenders * sizeof(int)) == 0);
    for (size_t k = 0; k < a->n; k++) {
        const rf_p2p_rect_t *x = &a->rects[k], *y = &b->rects[k];
        ck_assert(x->entry == y->entry && x->tensor == y->tensor && x->sender == y->sender &&
                  x->reg.r0 == y->reg.r0 && x->reg.r1 == y->reg.r1 && x->reg.c0 == y->reg.c0 &&
                  x->reg.c1 == y->reg.c1);
        ck_assert_int_eq(a->items[k].stage, b->items[k].stage);
        ck_assert_uint_eq(a->items[k].bytes, b->items[k].bytes);
    }
    ck_assert_uint_eq(a->plan->n_chunks, b->plan->n_chunks);
    ck_assert_uint_eq(a->plan->n_pieces, b->plan->n_pieces);
    ck_assert(memcmp(a->plan->pieces, b->plan->pieces,
                     a->plan->n_pieces * sizeof(rf_chunk_piece_t)) == 0);
    for (int k = 0; k < a->nsenders; k++)
        ck_assert_uint_eq(rf_p2p_pair_digest(a, k), rf_p2p_pair_digest(b, k));
}

/* Every world rank's own part (rf_p2p_schedule_build_rank) is the full schedule's: a rollout
 * rank exactly its receiver, a trainer exactly the receivers it sends to, each whole. */
static void check_rank_parts(const rf_topology_t *topo, const rf_inventory_t *inv,
                             const rf_manifest_t *man, uint64_t chunk_bytes,
                             const rf_p2p_schedule_t *full)
{
    rf_err_t err;
    rf_err_clear(&err);
    for (int w = 0; w < full->T + full->R; w++) {
        rf_p2p_schedule_t part;
        ck_assert_msg(rf_p2p_schedule_build_rank(topo, inv, man, chunk_bytes, w, &part, &err) ==
                          RF_OK,
                      "rank %d: %s", w, err.msg);
        ck_assert_int_eq(part.rank, w);
        size_t k = 0;
        for (size_t j = 0; j < full->nrecv; j++) {
            const rf_p2p_recv_t *rv = &full->recv[j];
            if (rv->rank != w && rf_p2p_recv_stage(rv, w) < 0)
                continue;
            ck_assert_msg(k < part.nrecv, "rank %d misses receiver %d", w, rv->rank);
            check_same_recv(&part.recv[k], rv);
            ck_assert_ptr_eq(rf_p2p_schedule_find(&part, rv->rank), &part.recv[k]);
            k++;
        }
        ck_assert_uint_eq(part.nrecv, k);
        rf_p2p_schedule_free(&part);
    }
}

/* Returns false when the topology does not fit the model (skipped). */
static bool check_case(const tcase_t *c, uint64_t chunk_bytes, int *rects_p)
{
    char yaml[1024], path[1024];
    rf_topology_t topo;
    rf_model_config_t raw, cfg;
    rf_inventory_t inv;
    rf_manifest_t man;
    rf_p2p_schedule_t s;
    rf_err_t err;
    snprintf(yaml, sizeof(yaml),
             "name: p2p-case\nmodel: { config: ../models/%s.config.json%s%s }\n"
             "trainer: { %s }\nrollout: { %s }\ntransfer: { mode: p2p }\n",
             c->model, c->quant ? ", " : "", c->quant ? c->quant : "", c->trainer, c->rollout);
    snprintf(path, sizeof(path), "%s/topologies/p2p-case.yaml", REFIT_JOBS_DIR);
    rf_err_clear(&err);
    ck_assert_msg(rf_topology_parse(yaml, strlen(yaml), path, &topo, &err) == RF_OK, "%s\n%s",
                  err.msg, yaml);
    ck_assert_msg(rf_model_config_load(topo.model_config_path, &raw, &err) == RF_OK, "%s",
                  err.msg);
    int T = rf_topology_trainer_size(&topo), R = rf_topology_rollout_size(&topo);
    if (rf_model_check_topology(&topo, &raw, T + R, &cfg, &err) != RF_OK) {
        rf_model_config_free(&raw);
        return false;
    }
    ck_assert_int_eq(rf_model_bind_topology(&topo, &cfg, &err), RF_OK);
    ck_assert_msg(rf_inventory_build(&cfg, topo.quantization, topo.group_size, &inv, &err) ==
                      RF_OK,
                  "%s", err.msg);
    /* a trainer refuses an unaligned slice of a quantized linear at startup: skipped */
    bool aligned = true;
    for (int w = 0; w < T && aligned; w++) {
        rf_rank_info_t wi;
        ck_assert_int_eq(rf_topology_rank_info(&topo, w, &wi), RF_OK);
        for (int ti = 0; ti < inv.ntensors && aligned; ti++) {
            rf_region_t sh;
            if (rf_trainer_shard(&topo, &inv, &inv.tensors[ti], &wi, &sh))
                aligned = rf_trainer_check_slice(&topo, &inv, &inv.tensors[ti], &wi, &sh,
                                                 &err) == RF_OK;
        }
    }
    if (!aligned) {
        ck_assert_int_eq(err.status, RF_ERR_TOPOLOGY);
        ck_assert_ptr_nonnull(strstr(err.msg, "gathering unquantized slices"));
        rf_inventory_free(&inv);
        rf_model_config_free(&cfg);
        rf_model_config_free(&raw);
        return false;
    }
    ck_assert_msg(rf_manifest_build(&inv, &topo, NULL, NULL, &man, &err) == RF_OK, "%s", err.msg);
    ck_assert_msg(rf_p2p_schedule_build(&topo, &inv, &man, chunk_bytes, &s, &err) == RF_OK,
                  "%s: %s", yaml, err.msg);
    ck_assert_int_eq(s.T, T);
    ck_assert_int_eq(s.R, R);
    int edp = T / (topo.t_etp * topo.t_ep * topo.t_pp);
    for (int j = 0; j < R; j++) {
        const rf_p2p_recv_t *rv = &s.recv[j];
        rf_rank_info_t ri;
        ck_assert_int_eq(rf_topology_rank_info(&topo, T + j, &ri), RF_OK);
        ck_assert_int_eq(rv->rank, T + j);
        uint64_t bytes = 0;
        for (size_t k = 0; k < rv->n; k++) {
            ck_assert_uint_eq(rv->items[k].bytes, rv->items[k].rows * rv->items[k].row_bytes);
            ck_assert_int_ge(rv->items[k].stage, 0);
            ck_assert_int_lt(rv->items[k].stage, rv->nsenders);
            ck_assert_int_eq(rv->senders[rv->items[k].stage], rv->rects[k].sender);
            if (k > 0)
                ck_assert_int_le(rv->rects[k - 1].sender, rv->rects[k].sender);
            bytes += rv->items[k].bytes;
        }
        ck_assert_uint_eq(rv->plan->payload_bytes >= bytes ? bytes : 0, bytes);
        uint64_t planned = 0;
        for (size_t p = 0; p < rv->plan->n_pieces; p++)
            planned += rv->plan->pieces[p].bytes;
        ck_assert_uint_eq(planned, bytes);
        ck_assert_int_le(rv->plan->n_stages, T);
        for (int ti = 0; ti < inv.ntensors; ti++) {
            const rf_tensor_t *t = &inv.tensors[ti];
            int64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
            bool need = rf_p2p_need(&inv, &ri.rc, ti, &r0, &r1, &c0, &c1);
            int64_t nr = need ? r1 - r0 : 0, nc = need ? c1 - c0 : 0;
            unsigned char *cover = calloc((size_t)(nr * nc) + 1, 1);
            ck_assert_ptr_nonnull(cover);
            int nrect = 0;
            for (size_t k = 0; k < rv->n; k++) {
                const rf_p2p_rect_t *q = &rv->rects[k];
                if (q->tensor != ti)
                    continue;
                nrect++;
                check_scale_rect(&inv, rv, q);
                ck_assert_msg(need, "rank %d gets %s but stores none of it", T + j, t->name);
                ck_assert(q->reg.r0 >= r0 && q->reg.r1 <= r1 && q->reg.c0 >= c0 &&
                          q->reg.c1 <= c1 && q->reg.r0 < q->reg.r1 && q->reg.c0 < q->reg.c1);
                /* inside the sender's own shard, from the engine's replica */
                rf_rank_info_t si;
                rf_region_t sh;
                ck_assert_int_eq(rf_topology_rank_info(&topo, q->sender, &si), RF_OK);
                ck_assert_int_eq(si.role, RF_ROLE_TRAINER);
                ck_assert_msg(rf_trainer_shard(&topo, &inv, t, &si, &sh), "%s", t->name);
                ck_assert(q->reg.r0 >= sh.r0 && q->reg.r1 <= sh.r1 && q->reg.c0 >= sh.c0 &&
                          q->reg.c1 <= sh.c1);
                if (topo.t_layout == RF_TRAINER_LAYOUT_FSDP)
                    ck_assert_int_eq(si.t, 0); /* fsdp: each dp rank sends its own rows */
                else if (t->expert >= 0)
                    ck_assert_int_eq(si.x, ri.engine % edp);
                else
                    ck_assert_int_eq(si.d, ri.engine % topo.t_dp);
                ck_assert_int_eq(si.c, 0);
                /* plain loops: ck_assert marks a point per call */
                int64_t twice = -1;
                for (int64_t r = q->reg.r0; r < q->reg.r1; r++)
                    for (int64_t cc = q->reg.c0; cc < q->reg.c1; cc++) {
                        unsigned char *b = &cover[(r - r0) * nc + (cc - c0)];
                        if (*b && twice < 0)
                            twice = (r - r0) * nc + (cc - c0);
                        *b = 1;
                    }
                ck_assert_msg(twice < 0, "%s: rank %d gets element %lld of its need twice",
                              t->name, T + j, (long long)twice);
            }
            int64_t miss = -1;
            for (int64_t e = 0; e < nr * nc && miss < 0; e++)
                if (!cover[e])
                    miss = e;
            ck_assert_msg(miss < 0, "%s: rank %d misses row %lld col %lld (%s)", t->name, T + j,
                          (long long)(r0 + miss / (nc ? nc : 1)),
                          (long long)(c0 + miss % (nc ? nc : 1)), yaml);
            free(cover);
            *rects_p += nrect;
        }
    }
    check_rank_parts(&topo, &inv, &man, chunk_bytes, &s);
    rf_p2p_schedule_free(&s);
    rf_manifest_free(&man);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    rf_model_config_free(&raw);
    return true;
}

static const char *const llama_trainers[] = {
    "tp: 1", "tp: 2", "tp: 1, pp: 3", "tp: 2, pp: 2, pp_layers: [2, 1]", "tp: 1, dp: 2",
    "tp: 2, dp: 2", "tp: 2, pp: 3, dp: 2", "tp: 1, dp: 3",
};
static const char *const llama_rollouts[] = {
    "engines: 1, tp: 1", "engines: 2, tp: 1", "engines: 1, tp: 2", "engines: 2, tp: 2",
    "engines: 3, tp: 1", "engines: 1, tp: 2, dp: 2",
};
static const char *const moe_trainers[] = {
    "tp: 1", "tp: 2", "tp: 2, ep: 2, etp: 1", "tp: 1, dp: 2", "tp: 1, dp: 2, ep: 2, etp: 1",
    "tp: 2, dp: 2, ep: 2", "tp: 2, dp: 2, ep: 4, etp: 1", "tp: 1, pp: 2, dp: 2, ep: 2, etp: 1",
};
static const char *const moe_rollouts[] = {
    "engines: 1, tp: 1", "engines: 2, tp: 1", "engines: 1, tp: 2",
    "engines: 1, tp: 2, ep: 2", "engines: 2, tp: 2, ep: 2, expert_placement: round_robin",
    "engines: 1, tp: 1, dp: 2, ep: 2", "engines: 1, tp: 2, dp: 2, ep: 4",
    "engines: 1, tp: 4",
};

START_TEST(test_p2p_schedule_llama)
{
    int ran = 0, rects = 0;
    for (size_t a = 0; a < sizeof(llama_trainers) / sizeof(*llama_trainers); a++)
        for (size_t b = 0; b < sizeof(llama_rollouts) / sizeof(*llama_rollouts); b++) {
            tcase_t c = {"llama-tiny", llama_trainers[a], llama_rollouts[b], NULL};
            ran += check_case(&c, 64 << 10, &rects);
            ran += check_case(&c, 1 << 20, &rects);
        }
    ck_assert_int_ge(ran, 60);
    ck_assert_int_gt(rects, 0);
}
END_TEST

START_TEST(test_p2p_schedule_moe)
{
    int ran = 0, rects = 0;
    for (size_t a = 0; a < sizeof(moe_trainers) / sizeof(*moe_trainers); a++)
        for (size_t b = 0; b < sizeof(moe_rollouts) / sizeof(*moe_rollouts); b++) {
            tcase_t c = {"qwen3-moe-tiny", moe_trainers[a], moe_rollouts[b], NULL};
            ran += check_case(&c, 16 << 10, &rects);
        }
    ck_assert_int_ge(ran, 40);
    ck_assert_int_gt(rects, 0);
}
END_TEST

/* trainer.layout fsdp (dense and MoE, pp 1 and > 1, dp dividing N or not): every case the
 * megatron layout with the same dp and pp runs must run too, and tile every receiver's need
 * from the dp ranks' row shards (check_case's asserts: inside the sender's own shard, no
 * element twice, none missed). */
START_TEST(test_p2p_schedule_fsdp)
{
    static const struct {
        const char *model, *trainer, *megatron;
        const char *const *rollouts;
        size_t nrollouts;
    } cases[] = {
#define LLAMA_R llama_rollouts, sizeof(llama_rollouts) / sizeof(*llama_rollouts)
#define MOE_R moe_rollouts, sizeof(moe_rollouts) / sizeof(*moe_rollouts)
        {"llama-tiny", "layout: fsdp, dp: 2", "dp: 2", LLAMA_R},
        {"llama-tiny", "layout: fsdp, dp: 3", "dp: 3", LLAMA_R},
        {"llama-tiny", "layout: fsdp, dp: 4", "dp: 4", LLAMA_R},
        {"llama-tiny", "layout: fsdp, pp: 3, dp: 2", "pp: 3, dp: 2", LLAMA_R},
        {"qwen3-moe-tiny", "layout: fsdp, dp: 3", "dp: 3", MOE_R},
        {"qwen3-moe-tiny", "layout: fsdp, pp: 2, dp: 2", "pp: 2, dp: 2", MOE_R},
#undef LLAMA_R
#undef MOE_R
    };
    int ran = 0, rects = 0, unused = 0;
    for (size_t a = 0; a < sizeof(cases) / sizeof(*cases); a++)
        for (size_t b = 0; b < cases[a].nrollouts; b++) {
            tcase_t f = {cases[a].model, cases[a].trainer, cases[a].rollouts[b], NULL};
            tcase_t m = {cases[a].model, cases[a].megatron, cases[a].rollouts[b], NULL};
            bool want = check_case(&m, 1 << 20, &unused);
            ck_assert_msg(check_case(&f, 16 << 10, &rects) == want,
                          "%s: trainer { %s }, rollout { %s }",
                          cases[a].model, f.trainer, f.rollout);
            ran += want;
        }
    ck_assert_int_ge(ran, 30);
    ck_assert_int_gt(rects, 0);
}
END_TEST

/* Quantized: each (model, quantization) over the MoE trainers x rollouts x backends; the
 * topologies the validator or the trainer's alignment rule refuse are skipped. */
typedef struct qmodel {
    const char *model, *quant;
    const char *const *backends;
    int min_ran;
} qmodel_t;

static const char *const wna16_backends[] = {"triton", "marlin", NULL};
static const char *const fp8_backends[] = {"triton", "rocm-fnuz", NULL};
#define SMALL_30B "overrides: { num_hidden_layers: 1, num_experts: 8, vocab_size: 512 }"

static void run_quant(const qmodel_t *q, int *rects_p)
{
    int ran = 0;
    char rollout[256];
    for (size_t a = 0; a < sizeof(moe_trainers) / sizeof(*moe_trainers); a++)
        for (size_t b = 0; b < sizeof(moe_rollouts) / sizeof(*moe_rollouts); b++)
            for (int k = 0; q->backends[k] != NULL; k++) {
                snprintf(rollout, sizeof(rollout), "%s, backend: %s", moe_rollouts[b],
                         q->backends[k]);
                tcase_t c = {q->model, moe_trainers[a], rollout, q->quant};
                ran += check_case(&c, 16 << 10, rects_p);
            }
    ck_assert_msg(ran >= q->min_ran, "%s (%s): %d topologies ran", q->model, q->quant, ran);
}

START_TEST(test_p2p_schedule_wna16)
{
    int rects = 0;
    const qmodel_t g32 = {"qwen3-moe-tiny", "quantization: wna16, group_size: 32",
                          wna16_backends, 60};
    const qmodel_t g16 = {"qwen3-moe-tiny", "quantization: wna16, group_size: 16",
                          wna16_backends, 100};
    const qmodel_t big = {"qwen3-30b-a3b", "quantization: wna16, group_size: 128, " SMALL_30B,
                          wna16_backends, 90};
    run_quant(&g32, &rects);
    run_quant(&g16, &rects);
    run_quant(&big, &rects);
    ck_assert_int_gt(rects, 0);
}
END_TEST

START_TEST(test_p2p_schedule_fp8)
{
    int rects = 0;
    const qmodel_t big = {"qwen3-30b-a3b", "quantization: fp8-block, " SMALL_30B, fp8_backends,
                          90};
    run_quant(&big, &rects);
    /* qwen3-fp8-tiny (dense): k_proj has 128 rows, so only TP 1 on both sides is aligned */
    const tcase_t tiny = {"qwen3-fp8-tiny", "tp: 1", "engines: 2, tp: 1, backend: triton",
                          "quantization: fp8-block"};
    const tcase_t tiny2 = {"qwen3-fp8-tiny", "tp: 2", "engines: 1, tp: 1, backend: triton",
                           "quantization: fp8-block"};
    ck_assert(check_case(&tiny, 4 << 10, &rects));
    ck_assert(!check_case(&tiny2, 4 << 10, &rects)); /* k_proj rows [64, 128): mid block */
    ck_assert_int_gt(rects, 0);
}
END_TEST

/* DP2 -> 2 engines: each engine is fed only by its own replica; TP2 -> TP1: both ranks send */
START_TEST(test_p2p_replicas_and_spread)
{
    const tcase_t c = {"llama-tiny", "tp: 1, dp: 2", "engines: 2, tp: 1", NULL};
    int rects = 0;
    ck_assert(check_case(&c, 1 << 20, &rects));
    char yaml[512], path[1024];
    rf_topology_t topo;
    rf_model_config_t raw, cfg;
    rf_inventory_t inv;
    rf_manifest_t man;
    rf_p2p_schedule_t s;
    rf_err_t err;
    snprintf(yaml, sizeof(yaml), "name: x\nmodel: { config: ../models/llama-tiny.config.json }\n"
                                 "trainer: { tp: 2, dp: 2 }\nrollout: { engines: 2, tp: 1 }\n");
    snprintf(path, sizeof(path), "%s/topologies/x.yaml", REFIT_JOBS_DIR);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_topology_parse(yaml, strlen(yaml), path, &topo, &err), RF_OK);
    ck_assert_int_eq(rf_model_config_load(topo.model_config_path, &raw, &err), RF_OK);
    ck_assert_int_eq(rf_model_check_topology(&topo, &raw, 6, &cfg, &err), RF_OK);
    ck_assert_int_eq(rf_model_bind_topology(&topo, &cfg, &err), RF_OK);
    ck_assert_int_eq(rf_inventory_build(&cfg, topo.quantization, topo.group_size, &inv, &err),
                     RF_OK);
    ck_assert_int_eq(rf_manifest_build(&inv, &topo, NULL, NULL, &man, &err), RF_OK);
    ck_assert_int_eq(rf_p2p_schedule_build(&topo, &inv, &man, 1 << 20, &s, &err), RF_OK);
    /* trainer ranks: w = t + 2 d; engine 0 (rank 4) from ranks 0, 1; engine 1 from 2, 3 */
    for (int j = 0; j < 2; j++) {
        const rf_chunk_plan_t *pl = s.recv[j].plan;
        for (int w = 0; w < 4; w++) {
            int k = rf_p2p_recv_stage(&s.recv[j], w);
            uint32_t n = k >= 0 ? pl->stages[k].chunk_count : 0;
            if (w / 2 == j)
                ck_assert_uint_gt(n, 0);
            else
                ck_assert_uint_eq(n, 0);
        }
    }
    rf_p2p_schedule_free(&s);
    rf_manifest_free(&man);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    rf_model_config_free(&raw);
}
END_TEST

/* Plan metadata per rank is flat in the world size (issue 19): qwen3-moe-tiny, trainer
 * {tp 2, ep 2, etp 1, dp k} -> k engines of {tp 2, ep 2}, k = 2 .. 128 (8 to 512 ranks). A trainer
 * rank's, the first and the last rollout rank's own part of the schedule holds the same bytes
 * at every k, while the whole world's schedule grows with k (the measure sees growth). */
static size_t part_bytes(const rf_topology_t *topo, const rf_inventory_t *inv,
                         const rf_manifest_t *man, int rank, size_t *nrecv)
{
    rf_p2p_schedule_t s;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_p2p_schedule_build_rank(topo, inv, man, 1 << 16, rank, &s, &err) == RF_OK,
                  "%s", err.msg);
    size_t b = rf_p2p_schedule_bytes(&s);
    *nrecv = s.nrecv;
    rf_p2p_schedule_free(&s);
    return b;
}

START_TEST(test_p2p_metadata_flat)
{
    static const int ks[] = {2, 8, 32, 128};
    size_t first[3] = {0, 0, 0}, full1 = 0;
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
        char yaml[512], path[1024];
        rf_topology_t topo;
        rf_model_config_t raw, cfg;
        rf_inventory_t inv;
        rf_manifest_t man;
        rf_err_t err;
        int k = ks[i];
        snprintf(yaml, sizeof(yaml),
                 "name: flat\nmodel: { config: ../models/qwen3-moe-tiny.config.json }\n"
                 "trainer: { tp: 2, ep: 2, etp: 1, dp: %d }\nrollout: { engines: %d, tp: 2, ep: 2 }\n"
                 "transfer: { mode: p2p }\n",
                 k, k);
        snprintf(path, sizeof(path), "%s/topologies/flat.yaml", REFIT_JOBS_DIR);
        rf_err_clear(&err);
        ck_assert_msg(rf_topology_parse(yaml, strlen(yaml), path, &topo, &err) == RF_OK, "%s",
                      err.msg);
        ck_assert_int_eq(rf_model_config_load(topo.model_config_path, &raw, &err), RF_OK);
        int T = rf_topology_trainer_size(&topo), R = rf_topology_rollout_size(&topo);
        ck_assert_int_eq(T + R, 4 * k);
        ck_assert_msg(rf_model_check_topology(&topo, &raw, T + R, &cfg, &err) == RF_OK, "%s",
                      err.msg);
        ck_assert_int_eq(rf_model_bind_topology(&topo, &cfg, &err), RF_OK);
        ck_assert_int_eq(rf_inventory_build(&cfg, topo.quantization, topo.group_size, &inv, &err),
                         RF_OK);
        ck_assert_int_eq(rf_manifest_build(&inv, &topo, NULL, NULL, &man, &err), RF_OK);
        const int ranks[3] = {1, T, T + R - 1};
        for (int r = 0; r < 3; r++) {
            size_t nrecv = 0, b = part_bytes(&topo, &inv, &man, ranks[r], &nrecv);
            ck_assert_uint_gt(b, 0);
            ck_assert_uint_ge(nrecv, 1);
            if (i == 0)
                first[r] = b;
            ck_assert_msg(b == first[r], "world %d: rank %d holds %zu bytes of schedule "
                          "(%zu receivers), %zu at world 8", T + R, ranks[r], b, nrecv, first[r]);
        }
        if (k <= 32) { /* the whole world's, for contrast: it grows with the receivers */
            rf_p2p_schedule_t s;
            ck_assert_int_eq(rf_p2p_schedule_build(&topo, &inv, &man, 1 << 16, &s, &err), RF_OK);
            size_t fb = rf_p2p_schedule_bytes(&s);
            if (i == 0)
                full1 = fb;
            else
                ck_assert_uint_ge(fb, (size_t)(k / ks[0]) * full1 * 9 / 10);
            rf_p2p_schedule_free(&s);
        }
        rf_manifest_free(&man);
        rf_inventory_free(&inv);
        rf_model_config_free(&cfg);
        rf_model_config_free(&raw);
    }
}
END_TEST

int main(void)
{
    Suite *su = suite_create("p2p");
    TCase *tc = tcase_create("schedule");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_p2p_schedule_llama);
    tcase_add_test(tc, test_p2p_schedule_moe);
    tcase_add_test(tc, test_p2p_schedule_fsdp);
    tcase_add_test(tc, test_p2p_replicas_and_spread);
    tcase_add_test(tc, test_p2p_schedule_wna16);
    tcase_add_test(tc, test_p2p_schedule_fp8);
    tcase_add_test(tc, test_p2p_metadata_flat);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
