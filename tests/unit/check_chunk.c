/*
 * refit: unit tests of the chunk plan (include/refit/chunk.h): alignment, splitting of a big
 * tensor into row pieces, the too-wide-row error, stage boundaries, a tensor that exactly
 * fills a chunk, determinism, 1-D tensors, the header codec and the buffer allocator.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "refit/chunk.h"

#define CB 4096u /* chunk_bytes used by most cases: capacity 4080 */

static rf_chunk_item_t item(int stage, uint64_t rows, uint64_t row_bytes, const char *name)
{
    rf_chunk_item_t it = {stage, rows, row_bytes, rows * row_bytes, name};
    return it;
}

static rf_chunk_plan_t *plan_ok(const rf_chunk_item_t *items, size_t n, uint64_t cb)
{
    rf_chunk_plan_t *p = NULL;
    rf_err_t err;
    rf_err_clear(&err);
    rf_status_t st = rf_chunk_plan_create(items, n, cb, &p, &err);
    ck_assert_msg(st == RF_OK, "plan failed: %s", err.msg);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Every piece aligned, inside the capacity, every row of every item covered exactly once. */
static void check_invariants(const rf_chunk_plan_t *p, const rf_chunk_item_t *items, size_t n)
{
    uint64_t cap = p->chunk_bytes - RF_CHUNK_HEADER_BYTES;
    uint64_t *next_row = calloc(n, sizeof(*next_row));
    size_t pieces = 0;
    for (size_t k = 0; k < p->n_chunks; k++) {
        const rf_chunk_t *c = &p->chunks[k];
        ck_assert_uint_eq(c->seq, k);
        ck_assert_uint_eq(c->piece_begin, pieces);
        ck_assert_uint_ge(c->piece_count, 1);
        ck_assert_uint_le(c->payload_bytes, cap);
        uint64_t prev_end = 0;
        for (size_t j = 0; j < c->piece_count; j++) {
            const rf_chunk_piece_t *pc = &p->pieces[c->piece_begin + j];
            ck_assert_uint_eq(pc->offset % RF_CHUNK_ALIGN, 0);
            ck_assert_uint_ge(pc->offset, prev_end);
            ck_assert_int_eq(items[pc->item].stage, c->stage);
            ck_assert_uint_eq(pc->row_begin, next_row[pc->item]);
            ck_assert_uint_eq(pc->bytes, (pc->row_end - pc->row_begin) * items[pc->item].row_bytes);
            next_row[pc->item] = pc->row_end;
            prev_end = pc->offset + pc->bytes;
        }
        ck_assert_uint_eq(c->payload_bytes, prev_end);
        pieces += c->piece_count;
        if (k > 0)
            ck_assert_int_ge(c->stage, p->chunks[k - 1].stage);
    }
    ck_assert_uint_eq(pieces, p->n_pieces);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(next_row[i], items[i].rows);
    free(next_row);
}

START_TEST(test_alignment_and_packing)
{
    rf_chunk_item_t items[] = {item(0, 1, 10, "a"), item(0, 3, 100, "b"), item(0, 1, 257, "c"),
                               item(0, 2, 1000, "d")};
    rf_chunk_plan_t *p = plan_ok(items, 4, CB);
    check_invariants(p, items, 4);
    /* a@0, b@256 (ends 556), c@768 (ends 1025), d@1280 (1280 + 2000 = 3280 <= 4080) */
    ck_assert_uint_eq(p->n_chunks, 1);
    ck_assert_uint_eq(p->pieces[0].offset, 0);
    ck_assert_uint_eq(p->pieces[1].offset, 256);
    ck_assert_uint_eq(p->pieces[2].offset, 768);
    ck_assert_uint_eq(p->pieces[3].offset, 1280);
    ck_assert_uint_eq(p->chunks[0].payload_bytes, 3280);
    rf_chunk_plan_destroy(p);

    /* a tensor that does not fit in the rest starts a new chunk */
    rf_chunk_item_t items2[] = {item(0, 1, 3000, "x"), item(0, 1, 1100, "y"), item(0, 1, 50, "z")};
    p = plan_ok(items2, 3, CB);
    check_invariants(p, items2, 3);
    ck_assert_uint_eq(p->n_chunks, 2);
    ck_assert_uint_eq(p->chunks[1].piece_count, 2);
    ck_assert_uint_eq(p->pieces[1].offset, 0);
    ck_assert_uint_eq(p->pieces[2].offset, 1280);
    rf_chunk_plan_destroy(p);
}
END_TEST

START_TEST(test_split_big_tensor)
{
    /* 100 rows of 96 bytes = 9600 > 4080: floor(4080 / 96) = 42 rows per piece -> 42, 42, 16 */
    rf_chunk_item_t items[] = {item(0, 1, 64, "small"), item(0, 100, 96, "big"),
                               item(0, 1, 64, "after")};
    rf_chunk_plan_t *p = plan_ok(items, 3, CB);
    check_invariants(p, items, 3);
    ck_assert_uint_eq(p->n_chunks, 5);
    ck_assert_uint_eq(p->chunks[1].piece_count, 1);
    ck_assert_uint_eq(p->pieces[1].row_begin, 0);
    ck_assert_uint_eq(p->pieces[1].row_end, 42);
    ck_assert_uint_eq(p->pieces[1].offset, 0);
    ck_assert_uint_eq(p->pieces[2].row_end, 84);
    ck_assert_uint_eq(p->pieces[3].row_begin, 84);
    ck_assert_uint_eq(p->pieces[3].row_end, 100);
    ck_assert_uint_eq(p->chunks[3].payload_bytes, 16 * 96);
    /* the next tensor starts a new chunk */
    ck_assert_uint_eq(p->chunks[4].piece_count, 1);
    ck_assert_uint_eq(p->pieces[4].item, 2);
    rf_chunk_plan_destroy(p);
}
END_TEST

START_TEST(test_row_too_wide)
{
    rf_chunk_item_t items[] = {item(0, 1, 64, "ok"), item(0, 2, 4081, "model.embed_tokens.weight")};
    rf_chunk_plan_t *p = NULL;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_plan_create(items, 2, CB, &p, &err), RF_ERR_INVALID);
    ck_assert_ptr_null(p);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.embed_tokens.weight"));
    ck_assert_ptr_nonnull(strstr(err.msg, "4081"));
    /* one row of exactly the capacity is fine (single row tensor bigger than cap is not
     * possible then; two rows of cap -> two chunks) */
    rf_chunk_item_t items2[] = {item(0, 2, 4080, "w")};
    p = plan_ok(items2, 1, CB);
    ck_assert_uint_eq(p->n_chunks, 2);
    rf_chunk_plan_destroy(p);
    /* bad arguments */
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_plan_create(items2, 1, 16, &p, &err), RF_ERR_INVALID);
    rf_chunk_item_t bad = {0, 3, 10, 31, "bad"};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_plan_create(&bad, 1, CB, &p, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad"));
}
END_TEST

START_TEST(test_stage_boundaries)
{
    rf_chunk_item_t items[] = {item(0, 1, 100, "a"), item(0, 1, 100, "b"), item(1, 1, 100, "c"),
                               item(3, 1, 100, "d"), item(3, 1, 100, "e")};
    rf_chunk_plan_t *p = plan_ok(items, 5, CB);
    check_invariants(p, items, 5);
    ck_assert_uint_eq(p->n_chunks, 3);
    ck_assert_int_eq(p->n_stages, 4);
    ck_assert_uint_eq(p->stages[0].chunk_begin, 0);
    ck_assert_uint_eq(p->stages[0].chunk_count, 1);
    ck_assert_uint_eq(p->stages[1].chunk_begin, 1);
    ck_assert_uint_eq(p->stages[1].chunk_count, 1);
    ck_assert_uint_eq(p->stages[2].chunk_count, 0);
    ck_assert_uint_eq(p->stages[2].chunk_begin, 2);
    ck_assert_uint_eq(p->stages[3].chunk_begin, 2);
    ck_assert_uint_eq(p->stages[3].chunk_count, 1);
    ck_assert_uint_eq(p->stages[3].payload_bytes, 356);
    ck_assert_uint_eq(p->payload_bytes, 356 + 100 + 356);
    rf_chunk_plan_destroy(p);

    rf_chunk_item_t backwards[] = {item(1, 1, 10, "a"), item(0, 1, 10, "b")};
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_plan_create(backwards, 2, CB, &p, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "tensor b"));
}
END_TEST

START_TEST(test_exact_fill)
{
    /* a tensor of exactly the capacity fills one chunk; the next starts a new one */
    rf_chunk_item_t items[] = {item(0, 4080, 1, "full"), item(0, 1, 1, "next")};
    rf_chunk_plan_t *p = plan_ok(items, 2, CB);
    check_invariants(p, items, 2);
    ck_assert_uint_eq(p->n_chunks, 2);
    ck_assert_uint_eq(p->chunks[0].payload_bytes, 4080);
    ck_assert_uint_eq(p->chunks[0].piece_count, 1);
    ck_assert_uint_eq(p->pieces[0].row_end, 4080);
    rf_chunk_plan_destroy(p);
    /* a tensor exactly filling the rest after an aligned offset shares the chunk */
    rf_chunk_item_t items2[] = {item(0, 1, 256, "a"), item(0, 1, 4080 - 256, "b")};
    p = plan_ok(items2, 2, CB);
    ck_assert_uint_eq(p->n_chunks, 1);
    ck_assert_uint_eq(p->chunks[0].payload_bytes, 4080);
    rf_chunk_plan_destroy(p);
}
END_TEST

START_TEST(test_determinism)
{
    enum { N = 200 };
    rf_chunk_item_t items[N];
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t rb = 1 + (x >> 33) % 700;
        uint64_t rows = 1 + (x >> 20) % 40;
        items[i] = item(i / 50, rows, rb, "t");
    }
    rf_chunk_plan_t *a = plan_ok(items, N, CB);
    rf_chunk_plan_t *b = plan_ok(items, N, CB);
    check_invariants(a, items, N);
    ck_assert_uint_eq(a->n_chunks, b->n_chunks);
    ck_assert_uint_eq(a->n_pieces, b->n_pieces);
    ck_assert_int_eq(memcmp(a->chunks, b->chunks, a->n_chunks * sizeof(rf_chunk_t)), 0);
    ck_assert_int_eq(memcmp(a->pieces, b->pieces, a->n_pieces * sizeof(rf_chunk_piece_t)), 0);
    ck_assert_int_eq(a->n_stages, 4);
    rf_chunk_plan_destroy(a);
    rf_chunk_plan_destroy(b);
}
END_TEST

START_TEST(test_one_d)
{
    /* 1-D bf16 tensor of 5000 elements = 10000 bytes: rows of 2 bytes, 2040 per piece */
    rf_chunk_item_t items[] = {item(0, 5000, 2, "model.norm.weight"), item(0, 0, 2, "empty")};
    rf_chunk_plan_t *p = plan_ok(items, 2, CB);
    check_invariants(p, items, 2);
    ck_assert_uint_eq(p->n_chunks, 4); /* 2040 + 2040 + 920, then "empty" */
    ck_assert_uint_eq(p->pieces[2].row_begin, 4080);
    ck_assert_uint_eq(p->pieces[2].row_end, 5000);
    ck_assert_uint_eq(p->pieces[3].bytes, 0);
    rf_chunk_plan_destroy(p);
    /* a 1-D tensor given as one row wider than the capacity is the too-wide error */
    rf_chunk_item_t one[] = {item(0, 1, 10000, "bias")};
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_plan_create(one, 1, CB, &p, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "bias"));
}
END_TEST

START_TEST(test_header_and_buffer)
{
    unsigned char *buf = rf_chunk_buffer_alloc(CB);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(((uintptr_t)(buf + RF_CHUNK_HEADER_BYTES)) % RF_CHUNK_ALIGN, 0);
    memset(buf, 0xab, CB); /* the whole chunk is usable */
    rf_chunk_header_write(buf, 7, 123456, 0x1122334455ull);
    rf_chunk_header_t h;
    rf_chunk_header_read(buf, &h);
    ck_assert_uint_eq(h.update, 7);
    ck_assert_uint_eq(h.seq, 123456);
    ck_assert_uint_eq(h.payload_bytes, 0x1122334455ull);
    ck_assert_uint_eq(buf[0], 7);
    rf_chunk_buffer_free(buf);
    ck_assert_ptr_null(rf_chunk_buffer_alloc(16));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chunk");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_alignment_and_packing);
    tcase_add_test(tc, test_split_big_tensor);
    tcase_add_test(tc, test_row_too_wide);
    tcase_add_test(tc, test_stage_boundaries);
    tcase_add_test(tc, test_exact_fill);
    tcase_add_test(tc, test_determinism);
    tcase_add_test(tc, test_one_d);
    tcase_add_test(tc, test_header_and_buffer);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
