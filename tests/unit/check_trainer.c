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
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                                  &err) == RF_OK,
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
                                     &err),
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
