/*
 * check_trainer: the device packs of runtime/trainer.c (rf_trainer_pack with RF_PACK_DEVICE:
 * broadcast chunks and p2p rectangles as copy descriptors), run through the host accelerator's
 * copy_rows_batch, against the host packs (RF_PACK_HOST) byte for byte: the arithmetic the
 * nccl transport's resident trainers use on the GPU, checked on the CPU.
 *
 *   pack_rows_*   every chunk of a one-rank stage (bf16 llama-tiny; wna16 MoE with int32
 *                 weight_packed, bf16 scales and weight_shape; fp8-block) at small chunks, so
 *                 tensors split over several chunks
 *   rect_rows     rectangles inside a TP2 trainer's shards (column-split row-parallel ones
 *                 included); one outside is refused by both; the pack of a stage that needs
 *                 a gather is refused naming the tensor
 *   produce_device_*  rf_trainer_produce_device on the host accelerator == rf_trainer_produce
 *                 (fp8-block, wna16), with its copied-back scale check
 *   fsdp_shards   trainer.layout fsdp: each rank's rows are torch.chunk(tensor, dp, 0)'s
 *                 (hand-computed sizes for llama-tiny dp 3; an empty last shard on a MoE
 *                 router of 4 experts), the owners tile each tensor once, pp stages apart
 *   master_*      F32 masters: the host packs (broadcast, p2p rectangle) round to nearest
 *                 even into BF16 / F16 bit patterns worked out by hand (ties, subnormals,
 *                 overflow to inf, infinities, NaN), random values against a reference
 *                 rounding; the dtype rule; device packs and production refuse a master
 *   stream_*      streamed checkpoint production (stream_reads): every chunk of llama-tiny's
 *                 checkpoint packed by reads in the pack == packed from the shard buffers
 *                 production read, byte for byte, bytes_read the payload; a TP2 trainer (a
 *                 stage gather) reads whole first; a checkpoint truncated after it was opened
 *                 fails a chunk's pack with RF_ERR_IO naming the tensor; the fused seal's
 *                 payload sum made by the read threads equals the payload's word sum
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refit/accel.h"
#include "refit/chunk.h"
#include "refit/manifest.h"
#include "refit/topology.h"
#include "refit/trainer.h"

typedef struct world {
    rf_topology_t topo;
    rf_model_config_t raw, cfg;
    rf_inventory_t inv;
    rf_manifest_t man;
    rf_chunk_item_t *items;
    rf_chunk_plan_t *plan;
} world_t;

static void world_up(world_t *w, const char *model, const char *quant, const char *trainer,
                     uint64_t chunk_bytes)
{
    char yaml[512], path[512];
    rf_err_t err;
    rf_err_clear(&err);
    memset(w, 0, sizeof(*w));
    snprintf(yaml, sizeof(yaml),
             "name: trainer-case\nmodel: { config: ../models/%s.config.json%s%s }\n"
             "trainer: { %s }\nrollout: { tp: 1 }\n",
             model, quant ? ", " : "", quant ? quant : "", trainer);
    snprintf(path, sizeof(path), "%s/topologies/trainer-case.yaml", REFIT_JOBS_DIR);
    ck_assert_msg(rf_topology_parse(yaml, strlen(yaml), path, &w->topo, &err) == RF_OK, "%s",
                  err.msg);
    ck_assert_msg(rf_model_config_load(w->topo.model_config_path, &w->raw, &err) == RF_OK, "%s",
                  err.msg);
    int n = rf_topology_trainer_size(&w->topo) + rf_topology_rollout_size(&w->topo);
    ck_assert_msg(rf_model_check_topology(&w->topo, &w->raw, n, &w->cfg, &err) == RF_OK, "%s",
                  err.msg);
    ck_assert_int_eq(rf_model_bind_topology(&w->topo, &w->cfg, &err), RF_OK);
    ck_assert_msg(rf_inventory_build(&w->cfg, w->topo.quantization, w->topo.group_size, &w->inv,
                                     &err) == RF_OK,
                  "%s", err.msg);
    ck_assert_msg(rf_manifest_build(&w->inv, &w->topo, NULL, NULL, &w->man, &err) == RF_OK, "%s",
                  err.msg);
    w->items = calloc((size_t)w->man.n + 1, sizeof(rf_chunk_item_t));
    ck_assert_ptr_nonnull(w->items);
    for (int i = 0; i < w->man.n; i++) {
        const rf_tensor_t *t = &w->inv.tensors[w->man.entries[i].tensor];
        w->items[i].stage = w->man.entries[i].stage;
        w->items[i].rows = rf_tensor_rows(t);
        w->items[i].bytes = w->man.entries[i].nbytes;
        w->items[i].row_bytes = w->items[i].rows ? w->items[i].bytes / w->items[i].rows : 0;
        w->items[i].name = t->name;
    }
    ck_assert_msg(rf_chunk_plan_create(w->items, (size_t)w->man.n, chunk_bytes, &w->plan, &err) ==
                      RF_OK,
                  "%s", err.msg);
}

static void world_down(world_t *w)
{
    rf_chunk_plan_destroy(w->plan);
    free(w->items);
    rf_manifest_free(&w->man);
    rf_inventory_free(&w->inv);
    rf_model_config_free(&w->cfg);
    rf_model_config_free(&w->raw);
}

/* Trainer world rank `rank` of w, its shards in one arena (as on the GPU), produced for step. */
static char *trainer_up(world_t *w, int rank, rf_trainer_t *tr)
{
    rf_rank_info_t me;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_topology_rank_info(&w->topo, rank, &me), RF_OK);
    ck_assert_msg(rf_trainer_init(tr, &w->topo, &w->inv, &w->man, w->plan, &me, MPI_COMM_NULL,
                                  MPI_COMM_NULL, &err) == RF_OK,
                  "%s", err.msg);
    uint64_t *offs = calloc((size_t)w->man.n + 1, sizeof(uint64_t));
    uint64_t bytes = rf_trainer_arena_layout(&w->topo, &w->inv, &w->man, &me, offs);
    char *arena = calloc(1, (size_t)bytes + 1);
    ck_assert_ptr_nonnull(arena);
    rf_trainer_use_arena(tr, arena, offs);
    free(offs);
    ck_assert_msg(rf_trainer_produce(tr, 7, NULL, &err) == RF_OK, "%s", err.msg);
    return arena;
}

/* rf_trainer_pack of broadcast chunk ch: into host payload, or (rows) as device copies. */
static rf_status_t pack_chunk(rf_trainer_t *tr, const rf_chunk_t *ch, void *payload,
                              rf_accel_rows_t *rows, rf_err_t *err)
{
    rf_pack_req_t q = {.update = 1,
                       .chunk = ch,
                       .payload = payload,
                       .mem = rows != NULL ? RF_PACK_DEVICE : RF_PACK_HOST,
                       .rows = rows,
                       .deadline = 1e30};
    return rf_trainer_pack(tr, &q, err);
}

/* rf_trainer_pack of one p2p piece: rectangle r of entry e into dst (host), or (row) as its
 * device copy. */
static rf_status_t pack_rect(rf_trainer_t *tr, int e, const rf_region_t *r, void *dst,
                             rf_accel_rows_t *row, rf_err_t *err)
{
    rf_p2p_rect_t rect = {.entry = e, .reg = *r};
    rf_chunk_piece_t pc = {.item = 0, .row_begin = 0, .row_end = (uint64_t)(r->r1 - r->r0)};
    rf_chunk_t ch = {.piece_count = 1};
    rf_pack_req_t q = {.update = 1,
                       .chunk = &ch,
                       .pieces = &pc,
                       .rects = &rect,
                       .payload = dst,
                       .mem = row != NULL ? RF_PACK_DEVICE : RF_PACK_HOST,
                       .rows = row,
                       .deadline = 1e30};
    return rf_trainer_pack(tr, &q, err);
}

/* Every chunk: the host pack == the device pack's copies through copy_rows_batch (accel). */
static void pack_rows_case(const char *model, const char *quant, uint64_t chunk_bytes)
{
    world_t w;
    rf_trainer_t tr;
    rf_accel_t *ax = NULL;
    rf_err_t err;
    rf_err_clear(&err);
    world_up(&w, model, quant, "tp: 1", chunk_bytes);
    ck_assert_int_gt((int)w.plan->n_chunks, 2);
    char *arena = trainer_up(&w, 0, &tr);
    ck_assert(tr.sender);
    ck_assert_int_eq(rf_accel_open("host", 0, &ax), RF_OK);
    char *host = malloc(w.plan->chunk_bytes), *dev = malloc(w.plan->chunk_bytes);
    size_t maxp = 0, split = 0;
    for (size_t c = 0; c < w.plan->n_chunks; c++)
        maxp = w.plan->chunks[c].piece_count > maxp ? w.plan->chunks[c].piece_count : maxp;
    rf_accel_rows_t *rows = calloc(maxp + 1, sizeof(*rows));
    for (size_t c = 0; c < w.plan->n_chunks; c++) {
        const rf_chunk_t *ch = &w.plan->chunks[c];
        memset(host, 0x11, w.plan->chunk_bytes);
        memset(dev, 0x22, w.plan->chunk_bytes);
        ck_assert_msg(pack_chunk(&tr, ch, host, NULL, &err) == RF_OK, "%s", err.msg);
        ck_assert_msg(pack_chunk(&tr, ch, dev, rows, &err) == RF_OK, "%s", err.msg);
        ck_assert_int_eq(ax->ops->copy_rows_batch(ax, rows, ch->piece_count, NULL), RF_OK);
        for (size_t k = 0; k < ch->piece_count; k++) {
            const rf_chunk_piece_t *pc = &w.plan->pieces[ch->piece_begin + k];
            split += pc->row_begin > 0;
            ck_assert_msg(memcmp(host + pc->offset, dev + pc->offset, (size_t)pc->bytes) == 0,
                          "chunk %u: %s rows [%llu, %llu) differ", ch->seq,
                          w.man.entries[pc->item].name, (unsigned long long)pc->row_begin,
                          (unsigned long long)pc->row_end);
        }
    }
    ck_assert_uint_gt(split, 0); /* some tensor was split over chunks */
    free(rows);
    free(host);
    free(dev);
    rf_accel_close(ax);
    rf_trainer_free(&tr);
    free(arena);
    world_down(&w);
}

START_TEST(test_pack_rows_bf16)
{
    pack_rows_case("llama-tiny", NULL, 64 << 10);
}
END_TEST

START_TEST(test_pack_rows_wna16)
{
    pack_rows_case("qwen3-moe-tiny", "quantization: wna16, group_size: 32", 16 << 10);
}
END_TEST

START_TEST(test_pack_rows_fp8)
{
    pack_rows_case("qwen3-fp8-tiny", "quantization: fp8-block", 256 << 10);
}
END_TEST

START_TEST(test_rect_rows)
{
    world_t w;
    rf_trainer_t tr;
    rf_accel_t *ax = NULL;
    rf_err_t err;
    rf_err_clear(&err);
    world_up(&w, "llama-tiny", NULL, "tp: 2", 64 << 10);
    char *arena = trainer_up(&w, 1, &tr); /* t = 1: second halves of every split tensor */
    ck_assert_int_eq(rf_accel_open("host", 0, &ax), RF_OK);
    int checked = 0, colsplit = 0;
    for (int i = 0; i < w.man.n; i++) {
        if (!tr.has[i])
            continue;
        const rf_region_t *g = &tr.reg[i];
        /* an inner rectangle: rows and columns trimmed where the shard allows */
        rf_region_t r = *g;
        if (r.r1 - r.r0 > 2) {
            r.r0 += 1;
            r.r1 -= 1;
        }
        if (r.c1 - r.c0 > 2) {
            r.c0 += 1;
            r.c1 -= 1;
        }
        size_t es = rf_dtype_size(w.man.entries[i].dtype);
        size_t n = (size_t)(r.r1 - r.r0) * (size_t)(r.c1 - r.c0) * es;
        char *a = malloc(n + 1), *b = malloc(n + 1);
        rf_accel_rows_t row;
        ck_assert_int_eq(pack_rect(&tr, i, &r, a, NULL, &err), RF_OK);
        ck_assert_int_eq(pack_rect(&tr, i, &r, b, &row, &err), RF_OK);
        ck_assert_int_eq(ax->ops->copy_rows_batch(ax, &row, 1, NULL), RF_OK);
        ck_assert_msg(memcmp(a, b, n) == 0, "%s: rectangle differs", w.man.entries[i].name);
        colsplit += g->c0 > 0;
        checked++;
        free(a);
        free(b);
    }
    ck_assert_int_gt(checked, 10);
    ck_assert_int_gt(colsplit, 0); /* row-parallel shards: columns from the middle of a row */
    /* outside the shard: refused by both, naming the tensor */
    int e = -1;
    for (int i = 0; i < w.man.n && e < 0; i++)
        if (tr.has[i] && tr.reg[i].c0 > 0)
            e = i;
    rf_region_t out = tr.reg[e];
    out.c0 -= 1;
    rf_accel_rows_t row;
    char buf[8];
    ck_assert_int_eq(pack_rect(&tr, e, &out, buf, &row, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, w.man.entries[e].name));
    rf_err_clear(&err);
    ck_assert_int_eq(pack_rect(&tr, e, &out, buf, NULL, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "is not inside its shard"));
    /* a stage that needs a gather cannot be packed from one shard */
    rf_accel_rows_t *rows = calloc(w.plan->chunks[0].piece_count + 1, sizeof(*rows));
    rf_status_t st = RF_OK;
    rf_err_clear(&err);
    for (size_t c = 0; c < w.plan->n_chunks && st == RF_OK; c++) {
        free(rows);
        rows = calloc(w.plan->chunks[c].piece_count + 1, sizeof(*rows));
        st = pack_chunk(&tr, &w.plan->chunks[c], buf, rows, &err);
    }
    ck_assert_int_eq(st, RF_ERR_INTERNAL);
    ck_assert_msg(strstr(err.msg, "a stage gather is needed") != NULL, "%s", err.msg);
    free(rows);
    rf_accel_close(ax);
    rf_trainer_free(&tr);
    free(arena);
    world_down(&w);
}
END_TEST

/* rf_trainer_produce_device through the host accelerator == rf_trainer_produce, byte for
 * byte, fp32 fp8 scales and model-dtype wna16 scales included; its scale check (the scales
 * copied back after the device sync) runs and passes on the generator's weights. */
static void produce_device_case(const char *model, const char *quant)
{
    world_t w;
    rf_trainer_t th, td;
    rf_rank_info_t me;
    rf_accel_t *ax = NULL;
    rf_err_t err;
    rf_err_clear(&err);
    world_up(&w, model, quant, "tp: 1", 256 << 10);
    char *host = trainer_up(&w, 0, &th);
    ck_assert_int_eq(rf_topology_rank_info(&w.topo, 0, &me), RF_OK);
    ck_assert_int_eq(rf_trainer_init(&td, &w.topo, &w.inv, &w.man, w.plan, &me, MPI_COMM_NULL,
                                     MPI_COMM_NULL, &err),
                     RF_OK);
    uint64_t *offs = calloc((size_t)w.man.n + 1, sizeof(uint64_t));
    uint64_t bytes = rf_trainer_arena_layout(&w.topo, &w.inv, &w.man, &me, offs);
    char *dev = calloc(1, (size_t)bytes + 1);
    rf_trainer_use_arena(&td, dev, offs);
    ck_assert_int_eq(rf_accel_open("host", 0, &ax), RF_OK);
    ck_assert_msg(rf_trainer_produce_device(&td, 7, ax, dev, dev, &err) == RF_OK, "%s", err.msg);
    int scales = 0;
    for (int i = 0; i < w.man.n; i++) {
        const rf_tensor_t *t = &w.inv.tensors[w.man.entries[i].tensor];
        if (offs[i] == UINT64_MAX)
            continue;
        scales += t->param == RF_PARAM_WEIGHT_SCALE_INV || t->param == RF_PARAM_WEIGHT_SCALE;
        if (t->param == RF_PARAM_WEIGHT_SCALE_INV)
            ck_assert_int_eq(w.man.entries[i].dtype, RF_DTYPE_F32);
        ck_assert_msg(memcmp(host + offs[i], dev + offs[i], (size_t)w.man.entries[i].nbytes) == 0,
                      "%s differs", w.man.entries[i].name);
    }
    ck_assert_int_gt(scales, 0);
    free(offs);
    rf_accel_close(ax);
    rf_trainer_free(&td);
    rf_trainer_free(&th);
    free(dev);
    free(host);
    world_down(&w);
}

START_TEST(test_produce_device_fp8)
{
    produce_device_case("qwen3-fp8-tiny", "quantization: fp8-block");
}
END_TEST

START_TEST(test_produce_device_wna16)
{
    produce_device_case("qwen3-moe-tiny", "quantization: wna16, group_size: 32");
}
END_TEST

/* torch.chunk(t, dp, 0)'s rows for chunk d: ceil(N / dp) each, the last ones short or
 * absent (an absent chunk: 0 rows). Written apart from runtime/trainer.c on purpose. */
static void chunk_rows(int64_t n, int dp, int d, int64_t *r0, int64_t *r1)
{
    int64_t c = (n + dp - 1) / dp;
    *r0 = d * c < n ? d * c : n;
    *r1 = (d + 1) * c < n ? (d + 1) * c : n;
}

/* Every tensor of w (fsdp over dp, pp stages) on every trainer rank: the rows torch.chunk
 * gives rank d of the tensor's stage, whole rows, none on other stages; the owners tile the
 * tensor once, in d order. Returns the shards found empty. */
static int fsdp_case(world_t *w, int dp, int pp)
{
    int T = rf_topology_trainer_size(&w->topo), empty = 0;
    ck_assert_int_eq(T, dp * pp);
    for (int ti = 0; ti < w->inv.ntensors; ti++) {
        const rf_tensor_t *t = &w->inv.tensors[ti];
        int64_t n = (int64_t)rf_tensor_rows(t), cols = n ? (int64_t)(t->numel / (uint64_t)n) : 0;
        int p = rf_topology_layer_stage(&w->topo, t->layer, w->inv.cfg.num_hidden_layers);
        int64_t next = 0;
        rf_owner_t own[RF_MAX_OWNERS];
        int no = rf_trainer_owners(&w->topo, &w->inv, t, own), k = 0;
        ck_assert_int_eq(rf_trainer_owners_replica(&w->topo, &w->inv, t, 1, own), no);
        for (int wr = 0; wr < T; wr++) {
            rf_rank_info_t me;
            rf_region_t reg;
            ck_assert_int_eq(rf_topology_rank_info(&w->topo, wr, &me), RF_OK);
            bool has = rf_trainer_shard(&w->topo, &w->inv, t, &me, &reg);
            if (me.p != p) {
                ck_assert_msg(!has, "%s on rank %d of stage %d", t->name, wr, me.p);
                continue;
            }
            int64_t r0, r1;
            chunk_rows(n, dp, me.d, &r0, &r1);
            ck_assert_msg(has == (r1 > r0), "%s rank %d (d %d): held %d, rows [%lld, %lld)",
                          t->name, wr, me.d, has, (long long)r0, (long long)r1);
            empty += r1 == r0;
            if (!has)
                continue;
            ck_assert_msg(reg.r0 == r0 && reg.r1 == r1 && reg.c0 == 0 && reg.c1 == cols,
                          "%s rank %d: [%lld, %lld) x [%lld, %lld), torch.chunk: rows [%lld, "
                          "%lld)",
                          t->name, wr, (long long)reg.r0, (long long)reg.r1, (long long)reg.c0,
                          (long long)reg.c1, (long long)r0, (long long)r1);
            ck_assert_int_lt(k, no);
            ck_assert_int_eq(own[k].rank, wr);
            ck_assert(own[k].reg.r0 == next && own[k].reg.r1 == r1);
            next = r1;
            k++;
        }
        ck_assert_int_eq(k, no);
        ck_assert_msg(next == n, "%s: owners tile %lld of %lld rows", t->name, (long long)next,
                      (long long)n);
    }
    return empty;
}

START_TEST(test_fsdp_shards)
{
    world_t w;
    /* llama-tiny over 3 ranks: uneven rows (hand-computed: ceil(N / 3) then the rest) */
    world_up(&w, "llama-tiny", NULL, "dp: 3, layout: fsdp", 1 << 20);
    ck_assert_int_eq(fsdp_case(&w, 3, 1), 0);
    static const struct {
        const char *name;
        int64_t rows[3];
    } want[] = {
        {"model.embed_tokens.weight", {335, 335, 333}}, /* V 1003 */
        {"model.layers.0.self_attn.q_proj.weight", {32, 32, 32}},
        {"model.layers.1.self_attn.k_proj.weight", {11, 11, 10}}, /* 2 kv heads x 16 */
        {"model.layers.2.mlp.gate_proj.weight", {54, 54, 52}},    /* I 160 */
        {"model.layers.2.mlp.down_proj.weight", {32, 32, 32}},    /* whole rows of K 160 */
        {"model.norm.weight", {32, 32, 32}},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        int ti = rf_inventory_find(&w.inv, want[i].name);
        ck_assert_int_ge(ti, 0);
        for (int d = 0; d < 3; d++) {
            rf_rank_info_t me;
            rf_region_t reg;
            ck_assert_int_eq(rf_topology_rank_info(&w.topo, d, &me), RF_OK);
            ck_assert(rf_trainer_shard(&w.topo, &w.inv, &w.inv.tensors[ti], &me, &reg));
            ck_assert_msg(reg.r1 - reg.r0 == want[i].rows[d], "%s rank %d: %lld rows", want[i].name,
                          d, (long long)(reg.r1 - reg.r0));
            ck_assert_int_eq(reg.c1 - reg.c0, (int64_t)(w.inv.tensors[ti].numel /
                                                        rf_tensor_rows(&w.inv.tensors[ti])));
        }
    }
    world_down(&w);
    /* pp 3 x dp 2: each stage's two ranks split its tensors */
    world_up(&w, "llama-tiny", NULL, "dp: 2, pp: 3, layout: fsdp", 1 << 20);
    ck_assert_int_eq(fsdp_case(&w, 2, 3), 0);
    world_down(&w);
    /* MoE, 4 experts over 3 ranks: the router's 4 rows go 2, 2, 0 (an empty last shard) */
    world_up(&w, "qwen3-moe-tiny", "overrides: { num_experts: 4 }", "dp: 3, layout: fsdp", 1 << 20);
    ck_assert_int_eq(fsdp_case(&w, 3, 1), 2); /* the routers of both layers on rank 2 */
    int ti = rf_inventory_find(&w.inv, "model.layers.0.mlp.gate.weight");
    ck_assert_int_ge(ti, 0);
    rf_owner_t own[RF_MAX_OWNERS];
    ck_assert_int_eq(rf_trainer_owners(&w.topo, &w.inv, &w.inv.tensors[ti], own), 2);
    world_down(&w);
}
END_TEST

/* RNE by hand (the bit arithmetic of the IEEE rule), apart from core/dtype.h's. */
static uint16_t ref_bf16(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0; /* NaN: checked apart */
    uint32_t low = u & 0xffffu, hi = u >> 16;
    if (low > 0x8000u || (low == 0x8000u && (hi & 1u)))
        hi++;
    return (uint16_t)hi;
}

/* RNE to binary16 on the value (double arithmetic, nearbyint in the default rounding
 * mode), inf from the midpoint 65520 on; returned as a double. */
static double ref_f16(float x)
{
    double a = fabs((double)x);
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int ue = e - 1 < -14 ? -14 : e - 1;
    double ulp = ldexp(1.0, ue - 10), r = nearbyint(a / ulp) * ulp;
    return copysign(r >= 65536.0 ? INFINITY : r, (double)x);
}

static bool bf16_nan(uint16_t h)
{
    return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}
static bool f16_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

typedef struct special {
    uint32_t f32;
    uint16_t want; /* 0xffff with nan: a NaN of the f32's sign */
    bool nan;
} special_t;

/* torch's float -> bfloat16 cast gives these (checked against Debian's torch 1.13, one element
 * and 64: c10's scalar and the vectorized path; a NaN only as NaN, their payloads differ) */
static const special_t k_bf16[] = {
    {0x3f800000u, 0x3f80u, false}, /* 1 */
    {0x3f808000u, 0x3f80u, false}, /* tie, even below */
    {0x3f818000u, 0x3f82u, false}, /* tie, odd below: up */
    {0x3f808001u, 0x3f81u, false}, /* above half */
    {0x3f807fffu, 0x3f80u, false}, /* below half */
    {0xbf818000u, 0xbf82u, false}, /* negative tie: away from zero to even */
    {0x7f7fffffu, 0x7f80u, false}, /* FLT_MAX rounds to inf */
    {0x7f7f7fffu, 0x7f7fu, false}, /* largest below: stays finite */
    {0x7f800000u, 0x7f80u, false}, /* inf */
    {0xff800000u, 0xff80u, false}, /* -inf */
    {0x00000001u, 0x0000u, false}, /* smallest subnormal: to +0 */
    {0x80000001u, 0x8000u, false}, /* to -0 */
    {0x00008000u, 0x0000u, false}, /* subnormal tie, even */
    {0x00018000u, 0x0002u, false}, /* subnormal tie, odd: up */
    {0x00010000u, 0x0001u, false}, /* a bf16 subnormal, exact */
    {0x007fffffu, 0x0080u, false}, /* largest subnormal rounds up to the smallest normal */
    {0x00000000u, 0x0000u, false}, {0x80000000u, 0x8000u, false},
    {0x7fc00000u, 0xffffu, true}, /* quiet NaN */
    {0x7f800001u, 0xffffu, true}, /* signalling NaN whose payload is below bf16's bits */
    {0xffc00000u, 0xffffu, true}, /* negative NaN */
};

/* torch's float -> half cast gives these (checked likewise) */
static const special_t k_f16[] = {
    {0x3f800000u, 0x3c00u, false}, /* 1 */
    {0x3f801000u, 0x3c00u, false}, /* 1 + 2^-11: tie, even */
    {0x3f803000u, 0x3c02u, false}, /* 1 + 3 2^-11: tie, odd: up */
    {0x477fe000u, 0x7bffu, false}, /* 65504, the largest half */
    {0x477fefffu, 0x7bffu, false}, /* below the midpoint to 65536 */
    {0x477ff000u, 0x7c00u, false}, /* 65520: the midpoint rounds to inf */
    {0x7f7fffffu, 0x7c00u, false}, /* FLT_MAX */
    {0x7f800000u, 0x7c00u, false}, {0xff800000u, 0xfc00u, false},
    {0x33800000u, 0x0001u, false}, /* 2^-24, the smallest half subnormal */
    {0x33000000u, 0x0000u, false}, /* 2^-25: tie, even (0) */
    {0x33c00000u, 0x0002u, false}, /* 3 2^-25: tie, odd (1): up */
    {0x387fc000u, 0x03ffu, false}, /* largest half subnormal */
    {0x387fe000u, 0x0400u, false}, /* its tie with the smallest normal: up to even */
    {0x00000001u, 0x0000u, false}, /* an f32 subnormal */
    {0x80000001u, 0x8000u, false}, {0x7fc00000u, 0xffffu, true},
    {0xffc00001u, 0xffffu, true},
};

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Entry e of trainer tr as an F32 master: the specials first, then random finite values
 * (the low 16 bits random, so every kind of rounding occurs); master[] owned by the caller. */
static float *master_up(rf_trainer_t *tr, int e, const special_t *sp, size_t nsp, uint64_t *n_p)
{
    const rf_region_t *g = &tr->reg[e];
    uint64_t n = (uint64_t)(g->r1 - g->r0) * (uint64_t)(g->c1 - g->c0);
    float *m = malloc(n * sizeof(float) + 1);
    uint64_t x = 0x243f6a8885a308d3ull;
    ck_assert_uint_gt(n, nsp + 16);
    for (uint64_t k = 0; k < n; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(x >> 32);
        u = (u & 0x807fffffu) | ((uint32_t)(100 + (x >> 20) % 56) << 23); /* finite normal */
        m[k] = k < nsp ? f32_of(sp[k].f32) : f32_of(u);
    }
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_trainer_set_source_dtype(tr, e, RF_DTYPE_F32, &err) == RF_OK, "%s", err.msg);
    tr->buf[e] = (char *)m;
    *n_p = n;
    return m;
}

/* Element k of the master as packed (h) against the rounding it must get. */
static void check_elem(const char *what, uint64_t k, const float *m, uint16_t h,
                       const special_t *sp, size_t nsp, bool f16)
{
    uint32_t u;
    memcpy(&u, &m[k], sizeof(u));
    if (k < nsp && sp[k].nan) {
        ck_assert_msg(f16 ? f16_nan(h) : bf16_nan(h), "%s %llu: %08x -> %04x is no NaN", what,
                      (unsigned long long)k, u, h);
        ck_assert_msg((h >> 15) == (u >> 31), "%s %llu: NaN %08x lost its sign", what,
                      (unsigned long long)k, u);
        return;
    }
    if (k >= nsp && f16) {
        double want = ref_f16(m[k]), got = (double)rf_f16_to_f32(h);
        ck_assert_msg(got == want && signbit(got) == signbit(want),
                      "%s element %llu: %08x -> %04x (%g), expected %g", what,
                      (unsigned long long)k, u, h, got, want);
        return;
    }
    uint16_t want = k < nsp ? sp[k].want : ref_bf16(u);
    ck_assert_msg(h == want, "%s element %llu: %08x -> %04x, expected %04x", what,
                  (unsigned long long)k, u, h, want);
}

/* Broadcast (the sender's own parts) and p2p packs of entry e with an F32 master. */
static void master_case(world_t *w, rf_trainer_t *tr, int e, const special_t *sp, size_t nsp,
                        bool f16)
{
    rf_err_t err;
    uint64_t n;
    rf_err_clear(&err);
    float *m = master_up(tr, e, sp, nsp, &n);
    const rf_region_t *g = &tr->reg[e];
    int64_t cols = g->c1 - g->c0;
    uint64_t seen = 0;
    char *payload = malloc(w->plan->chunk_bytes);
    for (size_t c = 0; c < w->plan->n_chunks; c++) {
        const rf_chunk_t *ch = &w->plan->chunks[c];
        bool mine = false;
        for (size_t k = 0; k < ch->piece_count; k++)
            mine |= (int)w->plan->pieces[ch->piece_begin + k].item == e;
        if (!mine)
            continue;
        ck_assert_msg(pack_chunk(tr, ch, payload, NULL, &err) == RF_OK, "%s", err.msg);
        for (size_t k = 0; k < ch->piece_count; k++) {
            const rf_chunk_piece_t *pc = &w->plan->pieces[ch->piece_begin + k];
            if ((int)pc->item != e)
                continue;
            const uint16_t *h = (const uint16_t *)(void *)(payload + pc->offset);
            uint64_t base = pc->row_begin * (uint64_t)cols;
            for (uint64_t q = 0; q < (pc->row_end - pc->row_begin) * (uint64_t)cols; q++)
                check_elem(f16 ? "f16 broadcast" : "bf16 broadcast", base + q, m, h[q], sp, nsp,
                           f16);
            seen += (pc->row_end - pc->row_begin) * (uint64_t)cols;
        }
    }
    ck_assert_uint_eq(seen, n);
    /* a p2p rectangle from inside the shard: row 0's specials and a middle window */
    rf_region_t r = {g->r0, g->r0 + 2, g->c0, g->c1};
    uint16_t *out = malloc((size_t)(2 * cols) * sizeof(uint16_t));
    ck_assert_msg(pack_rect(tr, e, &r, out, NULL, &err) == RF_OK, "%s", err.msg);
    for (int64_t q = 0; q < 2 * cols; q++)
        check_elem("p2p", (uint64_t)q, m, out[q], sp, nsp, f16);
    r = (rf_region_t){g->r0 + 1, g->r0 + 3, g->c0 + 3, g->c0 + 7};
    ck_assert_msg(pack_rect(tr, e, &r, out, NULL, &err) == RF_OK, "%s", err.msg);
    for (int64_t q = 0; q < 8; q++) {
        uint64_t k = (uint64_t)((1 + q / 4) * cols + 3 + q % 4);
        check_elem("p2p window", k, m, out[q], sp, nsp, f16);
    }
    /* device packs and production refuse a master, naming it */
    rf_accel_rows_t row;
    rf_err_clear(&err);
    ck_assert_int_eq(pack_rect(tr, e, &r, out, &row, &err), RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, w->man.entries[e].name));
    rf_err_clear(&err);
    ck_assert_int_eq(rf_trainer_produce(tr, 3, NULL, &err), RF_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err.msg, "master"));
    free(out);
    free(payload);
    free(m);
}

START_TEST(test_master_bf16)
{
    world_t w;
    rf_trainer_t tr;
    rf_err_t err;
    world_up(&w, "llama-tiny", NULL, "tp: 1", 64 << 10);
    char *arena = trainer_up(&w, 0, &tr);
    int e = -1;
    for (int i = 0; i < w.man.n && e < 0; i++) /* a tensor split over chunks */
        if (strcmp(w.man.entries[i].name, "model.embed_tokens.weight") == 0)
            e = i;
    ck_assert_int_ge(e, 0);
    char *keep = tr.buf[e];
    master_case(&w, &tr, e, k_bf16, sizeof(k_bf16) / sizeof(k_bf16[0]), false);
    tr.buf[e] = keep;
    /* the rule: the dtype, or F32 for BF16 / F16; anything else refused naming the tensor */
    ck_assert(rf_trainer_source_dtype_ok(RF_DTYPE_BF16, RF_DTYPE_BF16));
    ck_assert(rf_trainer_source_dtype_ok(RF_DTYPE_F32, RF_DTYPE_BF16));
    ck_assert(rf_trainer_source_dtype_ok(RF_DTYPE_F32, RF_DTYPE_F16));
    ck_assert(!rf_trainer_source_dtype_ok(RF_DTYPE_F64, RF_DTYPE_BF16));
    ck_assert(!rf_trainer_source_dtype_ok(RF_DTYPE_F16, RF_DTYPE_BF16));
    ck_assert(!rf_trainer_source_dtype_ok(RF_DTYPE_BF16, RF_DTYPE_F32));
    ck_assert(!rf_trainer_source_dtype_ok(RF_DTYPE_F32, RF_DTYPE_F8_E4M3));
    ck_assert(!rf_trainer_source_dtype_ok(RF_DTYPE_F32, RF_DTYPE_I32));
    rf_err_clear(&err);
    ck_assert_int_eq(rf_trainer_set_source_dtype(&tr, e, RF_DTYPE_F64, &err), RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.embed_tokens.weight"));
    ck_assert_ptr_nonnull(strstr(err.msg, "F64"));
    rf_trainer_free(&tr);
    free(arena);
    world_down(&w);
}
END_TEST

START_TEST(test_master_f16)
{
    world_t w;
    rf_trainer_t tr;
    world_up(&w, "llama-tiny", NULL, "tp: 1", 64 << 10);
    int e = -1;
    for (int i = 0; i < w.man.n && e < 0; i++)
        if (strcmp(w.man.entries[i].name, "lm_head.weight") == 0)
            e = i;
    ck_assert_int_ge(e, 0);
    w.man.entries[e].dtype = RF_DTYPE_F16; /* an F16 model's entry: packs read only this */
    char *arena = trainer_up(&w, 0, &tr);
    master_case(&w, &tr, e, k_f16, sizeof(k_f16) / sizeof(k_f16[0]), true);
    rf_trainer_free(&tr);
    free(arena);
    world_down(&w);
}
END_TEST

/* Trainer rank 0 of w (host shards of its own), stream_reads as given, produced from ck. */
static void stream_trainer(world_t *w, rf_trainer_t *tr, bool stream, rf_ckpt_t *ck)
{
    rf_rank_info_t me;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_topology_rank_info(&w->topo, 0, &me), RF_OK);
    ck_assert_msg(
        rf_trainer_init(tr, &w->topo, &w->inv, &w->man, w->plan, &me, MPI_COMM_NULL, MPI_COMM_NULL, &err) == RF_OK,
        "%s", err.msg);
    tr->stream_reads = stream;
    ck_assert_msg(rf_trainer_produce(tr, 1, ck, &err) == RF_OK, "%s", err.msg);
}

START_TEST(test_stream_same_bytes)
{
    world_t w;
    rf_trainer_t a, b;
    rf_ckpt_t *ck = NULL;
    rf_err_t err;
    rf_err_clear(&err);
    world_up(&w, "llama-tiny", NULL, "tp: 1", 64 << 10);
    ck_assert_int_gt((int)w.plan->n_chunks, 8);
    ck_assert_msg(rf_ckpt_open(REFIT_TEST_DATA "/llama-tiny", &ck, &err) == RF_OK, "%s", err.msg);
    stream_trainer(&w, &a, false, ck);
    ck_assert_ptr_null(a.stream_ck);
    ck_assert_uint_eq(a.stats.bytes_read, w.man.payload_bytes);
    stream_trainer(&w, &b, true, ck);
    /* the loop: one read thread, two, five (each chunk's rows cut in that many ranges) */
    static const int threads[] = {1, 2, 5};
    b.read_threads = threads[_i];
    ck_assert_ptr_eq(b.stream_ck, ck); /* nothing read yet */
    ck_assert_uint_eq(b.stats.bytes_read, 0);
    ck_assert(rf_trainer_pack_local(&b));
    char *pa = malloc(w.plan->chunk_bytes), *pb = malloc(w.plan->chunk_bytes);
    uint64_t packed = 0;
    for (size_t c = 0; c < w.plan->n_chunks; c++) {
        const rf_chunk_t *ch = &w.plan->chunks[c];
        memset(pa, 0x11, w.plan->chunk_bytes);
        memset(pb, 0x22, w.plan->chunk_bytes);
        ck_assert_msg(pack_chunk(&a, ch, pa, NULL, &err) == RF_OK, "%s", err.msg);
        ck_assert_msg(pack_chunk(&b, ch, pb, NULL, &err) == RF_OK, "%s", err.msg);
        for (size_t k = 0; k < ch->piece_count; k++) { /* the pieces (not the padding) */
            const rf_chunk_piece_t *pc = &w.plan->pieces[ch->piece_begin + k];
            ck_assert_msg(memcmp(pa + pc->offset, pb + pc->offset, (size_t)pc->bytes) == 0,
                          "chunk %u: %s rows [%llu, %llu) differ", ch->seq,
                          w.man.entries[pc->item].name, (unsigned long long)pc->row_begin,
                          (unsigned long long)pc->row_end);
            packed += pc->bytes;
        }
        /* a device pack or a p2p rectangle of a streamed update is refused */
        if (c == 0) {
            rf_accel_rows_t rows[64];
            ck_assert_uint_le(ch->piece_count, 64);
            ck_assert_int_eq(pack_chunk(&b, ch, pb, rows, &err), RF_ERR_INTERNAL);
        }
    }
    ck_assert_uint_eq(packed, w.man.payload_bytes);
    ck_assert_uint_eq(b.stats.bytes_read, w.man.payload_bytes);
    ck_assert_int_eq(b.stats.read_threads, threads[_i]);
    /* the next update from the generator produces into the shard buffers again */
    ck_assert_msg(rf_trainer_produce(&b, 2, NULL, &err) == RF_OK, "%s", err.msg);
    ck_assert_ptr_null(b.stream_ck);
    free(pa);
    free(pb);
    rf_trainer_free(&a);
    rf_trainer_free(&b);
    rf_ckpt_close(ck);
    world_down(&w);
}
END_TEST

/* The fused seal's payload sum (rf_pack_req_t.sum): every chunk of llama-tiny's checkpoint
 * packed by 1, 2, 3 or 5 read threads with read blocks of 1000 bytes (cut inside rows and
 * words) or the default gives have = 1 and S = the word sum of the whole payload (words
 * numbered from 2) as packed, padding included (prefilled with a per-chunk pattern); the
 * shard-buffer pack (not streamed) gives none */
START_TEST(test_stream_payload_sum)
{
    static const int threads[] = {1, 2, 3, 5};
    static const uint64_t blocks[] = {1000, 0};
    world_t w;
    rf_trainer_t a, b;
    rf_ckpt_t *ck = NULL;
    rf_err_t err;
    rf_err_clear(&err);
    world_up(&w, "llama-tiny", NULL, "tp: 1", (64 << 10) + 40);
    ck_assert_msg(rf_ckpt_open(REFIT_TEST_DATA "/llama-tiny", &ck, &err) == RF_OK, "%s", err.msg);
    stream_trainer(&w, &a, false, ck);
    stream_trainer(&w, &b, true, ck);
    b.read_threads = threads[_i % 4];
    b.sum_block = blocks[_i / 4];
    char *p = malloc(w.plan->chunk_bytes);
    ck_assert_ptr_nonnull(p);
    size_t summed = 0;
    for (size_t c = 0; c < w.plan->n_chunks; c++) {
        const rf_chunk_t *ch = &w.plan->chunks[c];
        for (uint64_t i = 0; i < w.plan->chunk_bytes; i++)
            p[i] = (char)(i * 131 + c * 7 + 1);
        rf_chunk_sum_t sum = {0, 0};
        rf_pack_req_t q = {.update = 1, .chunk = ch, .payload = p, .deadline = 1e30, .sum = &sum};
        ck_assert_msg(rf_trainer_pack(&b, &q, &err) == RF_OK, "%s", err.msg);
        ck_assert_int_eq(sum.have, ch->piece_count > 0);
        if (sum.have)
            ck_assert_msg(sum.S == rf_accel_sum_words(p, (size_t)ch->payload_bytes, 2),
                          "chunk %u (%llu bytes, %d threads): the readers' sum differs", ch->seq,
                          (unsigned long long)ch->payload_bytes, b.read_threads);
        summed += (size_t)sum.have;
        rf_chunk_sum_t none = {0, 0};
        q.sum = &none;
        ck_assert_msg(rf_trainer_pack(&a, &q, &err) == RF_OK, "%s", err.msg);
        ck_assert_int_eq(none.have, 0);
    }
    ck_assert_uint_gt(summed, 8);
    free(p);
    rf_trainer_free(&a);
    rf_trainer_free(&b);
    rf_ckpt_close(ck);
    world_down(&w);
}
END_TEST

START_TEST(test_stream_not_alone)
{
    world_t w;
    rf_trainer_t tr;
    rf_ckpt_t *ck = NULL;
    rf_rank_info_t me;
    rf_err_t err;
    rf_err_clear(&err);
    world_up(&w, "llama-tiny", NULL, "tp: 2", 64 << 10);
    ck_assert_msg(rf_ckpt_open(REFIT_TEST_DATA "/llama-tiny", &ck, &err) == RF_OK, "%s", err.msg);
    ck_assert_int_eq(rf_topology_rank_info(&w.topo, 0, &me), RF_OK);
    ck_assert_int_eq(
        rf_trainer_init(&tr, &w.topo, &w.inv, &w.man, w.plan, &me, MPI_COMM_NULL, MPI_COMM_NULL, &err), RF_OK);
    tr.stream_reads = true;
    ck_assert(!rf_trainer_pack_local(&tr)); /* the stage sender gathers its peer's halves */
    ck_assert_msg(rf_trainer_produce(&tr, 1, ck, &err) == RF_OK, "%s", err.msg);
    ck_assert_ptr_null(tr.stream_ck);
    ck_assert_uint_gt(tr.stats.bytes_read, 0);
    rf_trainer_free(&tr);
    rf_ckpt_close(ck);
    world_down(&w);
}
END_TEST

START_TEST(test_stream_truncated)
{
    world_t w;
    rf_trainer_t tr;
    rf_ckpt_t *ck = NULL;
    rf_err_t err;
    rf_err_clear(&err);
    char dir[] = "/tmp/check-trainer-stream-XXXXXX", cmd[512], path[600];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd), "cp %s/llama-tiny/*.safetensors %s/llama-tiny/*.json %s/",
             REFIT_TEST_DATA, REFIT_TEST_DATA, dir);
    ck_assert_int_eq(system(cmd), 0);
    world_up(&w, "llama-tiny", NULL, "tp: 1", 64 << 10);
    ck_assert_msg(rf_ckpt_open(dir, &ck, &err) == RF_OK, "%s", err.msg);
    stream_trainer(&w, &tr, true, ck);
    tr.read_threads = 1 + 2 * _i; /* the loop: 1, then 3 read threads */
    ck_assert_ptr_eq(tr.stream_ck, ck);
    /* the files shrink after the update's begin checked them */
    for (int f = 1; f <= 3; f++) {
        snprintf(path, sizeof(path), "%s/model-0000%d-of-00003.safetensors", dir, f);
        ck_assert_int_eq(truncate(path, 4096), 0);
    }
    char *p = malloc(w.plan->chunk_bytes);
    rf_status_t st = RF_OK;
    for (size_t c = 0; c < w.plan->n_chunks && st == RF_OK; c++)
        st = pack_chunk(&tr, &w.plan->chunks[c], p, NULL, &err);
    ck_assert_int_eq(st, RF_ERR_IO);
    ck_assert_msg(strstr(err.msg, "from the checkpoint as its chunk is packed") != NULL &&
                      strstr(err.msg, "model.") != NULL,
                  "message: %s", err.msg);
    free(p);
    rf_trainer_free(&tr);
    rf_ckpt_close(ck);
    world_down(&w);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *trainer_suite(void)
{
    Suite *s = suite_create("trainer");
    TCase *tc = tcase_create("device_pack");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pack_rows_bf16);
    tcase_add_test(tc, test_pack_rows_wna16);
    tcase_add_test(tc, test_pack_rows_fp8);
    tcase_add_test(tc, test_rect_rows);
    tcase_add_test(tc, test_produce_device_fp8);
    tcase_add_test(tc, test_produce_device_wna16);
    tcase_add_test(tc, test_fsdp_shards);
    tcase_add_test(tc, test_master_bf16);
    tcase_add_test(tc, test_master_f16);
    tcase_add_loop_test(tc, test_stream_same_bytes, 0, 3);
    tcase_add_loop_test(tc, test_stream_payload_sum, 0, 8);
    tcase_add_test(tc, test_stream_not_alone);
    tcase_add_loop_test(tc, test_stream_truncated, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(trainer_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
