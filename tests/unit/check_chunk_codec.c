/*
 * refit: unit tests of the chunk codec (include/refit/chunk.h, "the chunk codec"; issue #18
 * item 1): the header's trailer byte, sealing and checking under both algorithms (XXH3-64 and
 * refit-sum64 v1) against their definitions computed here, a flipped payload, header or trailer
 * byte caught, a header naming another or an unknown algorithm refused unchecked, the two-part
 * digests, the device form of the check (header on the host, payload word sum elsewhere), and
 * the seal summed by a thread pool (rf_chunk_seal_pool) equal to the one-thread seal.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "refit/accel.h"
#include "refit/chunk.h"
#include "refit/pool.h"

#define CB 8192u
static const int ALGS[2] = {RF_CHUNK_TRAILER_XXH3, RF_CHUNK_TRAILER_SUM64};

/* A plan of two named tensors in one chunk, for the messages. */
static rf_chunk_item_t g_items[2];
static rf_chunk_plan_t *g_plan;

static void setup(void)
{
    g_items[0] = (rf_chunk_item_t){0, 10, 64, 640, "model.w1"};
    g_items[1] = (rf_chunk_item_t){0, 3, 101, 303, "model.w2"};
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_plan_create(g_items, 2, CB - RF_CHUNK_TRAILER_BYTES, &g_plan, &err),
                     RF_OK);
    ck_assert_uint_eq(g_plan->n_chunks, 1);
}

static void teardown(void)
{
    rf_chunk_plan_destroy(g_plan);
    g_plan = NULL;
}

/* A message of the plan's chunk: header, a payload of a fixed pattern, room for the trailer. */
static unsigned char *message(size_t *covered_p)
{
    const rf_chunk_t *c = &g_plan->chunks[0];
    unsigned char *m = calloc(1, CB);
    rf_chunk_header_write(m, 3, c->seq, c->payload_bytes);
    for (uint64_t i = 0; i < c->payload_bytes; i++)
        m[RF_CHUNK_HEADER_BYTES + i] = (unsigned char)(i * 37u + 11u);
    *covered_p = RF_CHUNK_HEADER_BYTES + (size_t)c->payload_bytes;
    return m;
}

static rf_status_t check(int alg, const unsigned char *m, size_t covered, rf_err_t *err)
{
    rf_err_clear(err);
    return rf_chunk_check(alg, m + covered, m, covered, NULL, 0, g_plan, g_items,
                          &g_plan->chunks[0], err);
}

START_TEST(test_header_trailer_byte)
{
    unsigned char h[16];
    rf_chunk_header_write(h, 9, 4, 123456789);
    ck_assert_uint_eq(h[15], 0);
    rf_chunk_header_t r;
    rf_chunk_header_read(h, &r);
    ck_assert_uint_eq(r.trailer, RF_CHUNK_TRAILER_NONE);
    ck_assert_uint_eq(r.payload_bytes, 123456789);
    h[15] = RF_CHUNK_TRAILER_SUM64; /* the algorithm byte is not part of the size */
    rf_chunk_header_read(h, &r);
    ck_assert_uint_eq(r.trailer, RF_CHUNK_TRAILER_SUM64);
    ck_assert_uint_eq(r.payload_bytes, 123456789);
    ck_assert_uint_eq(r.update, 9);
    ck_assert_uint_eq(r.seq, 4);
    rf_chunk_header_write(h, 0, 0, RF_CHUNK_PAYLOAD_MAX);
    rf_chunk_header_read(h, &r);
    ck_assert_uint_eq(r.payload_bytes, RF_CHUNK_PAYLOAD_MAX);
    ck_assert_uint_eq(r.trailer, 0);
}
END_TEST

START_TEST(test_seal_matches_definitions)
{
    size_t covered;
    unsigned char *m = message(&covered);
    rf_err_t err;
    uint64_t tr[2];
    for (int a = 0; a < 2; a++) {
        rf_err_clear(&err);
        ck_assert_int_eq(rf_chunk_seal(ALGS[a], m + covered, m, covered, NULL, 0, &err), RF_OK);
        ck_assert_uint_eq(m[15], ALGS[a]); /* the header names it */
        tr[a] = rf_chunk_u64le_read(m + covered);
        /* the definitions, over the sealed header + payload */
        uint64_t want = ALGS[a] == RF_CHUNK_TRAILER_XXH3 ? XXH3_64bits(m, covered)
                                                         : rf_accel_checksum(m, covered);
        ck_assert_uint_eq(tr[a], want);
        ck_assert_int_eq(check(ALGS[a], m, covered, &err), RF_OK);
    }
    ck_assert_uint_ne(tr[0], tr[1]);
    /* little endian on the wire */
    ck_assert_uint_eq(m[covered], (unsigned char)(tr[1] & 0xff));
    free(m);
}
END_TEST

START_TEST(test_flipped_byte_caught)
{
    rf_err_t err;
    for (int a = 0; a < 2; a++) {
        /* a payload byte, a header byte (seq), the trailer: each caught */
        for (int where = 0; where < 3; where++) {
            size_t covered;
            unsigned char *m = message(&covered);
            rf_err_clear(&err);
            ck_assert_int_eq(rf_chunk_seal(ALGS[a], m + covered, m, covered, NULL, 0, &err), RF_OK);
            size_t at = where == 0 ? RF_CHUNK_HEADER_BYTES + 700 : where == 1 ? 4 : covered + 3;
            m[at] ^= 0x10;
            ck_assert_int_eq(check(ALGS[a], m, covered, &err), RF_ERR_INTEGRITY);
            ck_assert_msg(strstr(err.msg, "checksum mismatch") != NULL, "%s", err.msg);
            ck_assert_msg(
                strstr(err.msg, ALGS[a] == RF_CHUNK_TRAILER_XXH3 ? "(xxh3 " : "(refit-sum64 v1 ") !=
                    NULL,
                "%s", err.msg);
            ck_assert_msg(strstr(err.msg, "model.w1 rows 0-10, model.w2 rows 0-3") != NULL, "%s",
                          err.msg);
            free(m);
        }
    }
    /* refit-sum64's position key: two swapped payload words are caught */
    size_t covered;
    unsigned char *m = message(&covered);
    ck_assert_int_eq(rf_chunk_seal(RF_CHUNK_TRAILER_SUM64, m + covered, m, covered, NULL, 0, &err),
                     RF_OK);
    unsigned char w[8];
    memcpy(w, m + 16, 8);
    memcpy(m + 16, m + 24, 8);
    memcpy(m + 24, w, 8);
    ck_assert_int_eq(check(RF_CHUNK_TRAILER_SUM64, m, covered, &err), RF_ERR_INTEGRITY);
    free(m);
}
END_TEST

START_TEST(test_wrong_version_refused)
{
    size_t covered;
    unsigned char *m = message(&covered);
    rf_err_t err;
    rf_err_clear(&err);
    /* sealed with one algorithm, checked by a job expecting the other: refused, not misread */
    ck_assert_int_eq(rf_chunk_seal(RF_CHUNK_TRAILER_XXH3, m + covered, m, covered, NULL, 0, &err),
                     RF_OK);
    ck_assert_int_eq(check(RF_CHUNK_TRAILER_SUM64, m, covered, &err), RF_ERR_INTEGRITY);
    ck_assert_msg(strstr(err.msg, "trailer algorithm 1 (xxh3-64) in the header, this job checks 2 "
                                  "(refit-sum64 v1): chunk refused unchecked") != NULL,
                  "%s", err.msg);
    ck_assert_int_eq(rf_chunk_seal(RF_CHUNK_TRAILER_SUM64, m + covered, m, covered, NULL, 0, &err),
                     RF_OK);
    ck_assert_int_eq(check(RF_CHUNK_TRAILER_XXH3, m, covered, &err), RF_ERR_INTEGRITY);
    ck_assert_ptr_nonnull(strstr(err.msg, "trailer algorithm 2 (refit-sum64 v1) in the header"));
    /* an unknown version in the header, and no algorithm at all */
    m[15] = 7;
    ck_assert_int_eq(check(RF_CHUNK_TRAILER_SUM64, m, covered, &err), RF_ERR_INTEGRITY);
    ck_assert_ptr_nonnull(strstr(err.msg, "trailer algorithm 7 (unknown)"));
    m[15] = 0;
    ck_assert_int_eq(check(RF_CHUNK_TRAILER_XXH3, m, covered, &err), RF_ERR_INTEGRITY);
    ck_assert_ptr_nonnull(strstr(err.msg, "trailer algorithm 0 (none)"));
    /* the device form refuses an XXH3 header the same way */
    m[15] = RF_CHUNK_TRAILER_XXH3;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_check_sum(m, 0, g_plan->chunks[0].payload_bytes, 0, g_plan, g_items,
                                        &g_plan->chunks[0], &err),
                     RF_ERR_INTEGRITY);
    ck_assert_ptr_nonnull(strstr(err.msg, "refused unchecked"));
    /* sealing with an unknown algorithm, or without a header */
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_seal(5, m + covered, m, covered, NULL, 0, &err), RF_ERR_INVALID);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_seal(RF_CHUNK_TRAILER_XXH3, m + 8, m, 8, NULL, 0, &err),
                     RF_ERR_INVALID);
    free(m);
}
END_TEST

START_TEST(test_two_parts)
{
    unsigned char buf[32 + 1000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 13u + 5u);
    rf_err_t err;
    rf_err_clear(&err);
    uint64_t h1 = 0, h2 = 0;
    for (int a = 0; a < 2; a++) {
        ck_assert_int_eq(rf_chunk_digest(ALGS[a], buf, 32, buf + 32, 1000, &h1, &err), RF_OK);
        ck_assert_int_eq(rf_chunk_digest(ALGS[a], buf, sizeof(buf), NULL, 0, &h2, &err), RF_OK);
        ck_assert_uint_eq(h1, h2); /* as if concatenated */
    }
    ck_assert_uint_eq(h1, rf_accel_checksum(buf, sizeof(buf)));
    /* refit-sum64's second part is numbered on from the first: a first part of whole words */
    ck_assert_int_eq(rf_chunk_digest(RF_CHUNK_TRAILER_SUM64, buf, 20, buf + 20, 10, &h1, &err),
                     RF_ERR_INVALID);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_digest(9, buf, 20, NULL, 0, &h1, &err), RF_ERR_INVALID);
}
END_TEST

START_TEST(test_device_form)
{
    size_t covered;
    unsigned char *m = message(&covered);
    const rf_chunk_t *c = &g_plan->chunks[0];
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_seal(RF_CHUNK_TRAILER_SUM64, m + covered, m, covered, NULL, 0, &err),
                     RF_OK);
    const uint64_t trailer = rf_chunk_u64le_read(m + covered);
    /* the payload summed apart, its words numbered from 2, as a device's chunk buffer is */
    uint64_t S = rf_accel_sum_words(m + 16, c->payload_bytes, 2);
    ck_assert_uint_eq(rf_accel_sum_final(rf_accel_sum_words(m, 16, 0) + S, covered),
                      rf_accel_checksum(m, covered));
    ck_assert_int_eq(rf_chunk_check_sum(m, S, c->payload_bytes, trailer, g_plan, g_items, c, &err),
                     RF_OK);
    /* the same sum from an accelerator's checksum_async (host: computed at once) */
    rf_accel_t *ax = NULL;
    ck_assert_int_eq(rf_accel_open("host", 0, &ax), RF_OK);
    uint64_t acc = 0, out = 0;
    ck_assert_int_eq(ax->ops->checksum_async(ax, m + 16, c->payload_bytes, 2, &acc, &out, NULL),
                     RF_OK);
    ck_assert_uint_eq(out, S);
    rf_accel_close(ax);
    /* a flipped payload byte on the device side */
    m[16 + 500] ^= 0x01;
    S = rf_accel_sum_words(m + 16, c->payload_bytes, 2);
    ck_assert_int_eq(rf_chunk_check_sum(m, S, c->payload_bytes, trailer, g_plan, g_items, c, &err),
                     RF_ERR_INTEGRITY);
    ck_assert_msg(
        strstr(err.msg, "checksum mismatch (refit-sum64 v1 on the device chunk buffer ") != NULL,
        "%s", err.msg);
    ck_assert_ptr_nonnull(strstr(err.msg, "before unpacking; chunk carries model.w1 rows 0-10"));
    free(m);
}
END_TEST

START_TEST(test_names)
{
    int alg = 0;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_trailer_parse("sum64", &alg, &err), RF_OK);
    ck_assert_int_eq(alg, RF_CHUNK_TRAILER_SUM64);
    ck_assert_int_eq(rf_chunk_trailer_parse("xxh3-64", &alg, &err), RF_OK);
    ck_assert_int_eq(alg, RF_CHUNK_TRAILER_XXH3);
    ck_assert_int_eq(rf_chunk_trailer_parse("md5", &alg, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "'md5' unknown"));
    ck_assert_str_eq(rf_chunk_trailer_name(RF_CHUNK_TRAILER_SUM64), "refit-sum64 v1");
    ck_assert_str_eq(rf_chunk_trailer_name(RF_CHUNK_TRAILER_XXH3), "xxh3-64");
    ck_assert_str_eq(rf_chunk_trailer_name(3), "unknown");
}
END_TEST

/* rf_chunk_seal_pool: the trailer (and the header's algorithm byte) of rf_chunk_seal, bit for
 * bit, at 1..5 workers and sizes around the pool's minimum, odd lengths (a last partial word)
 * included; XXH3 through the pool is the plain seal; a flipped byte still fails the check */
START_TEST(test_seal_pool)
{
    const size_t sizes[] = {RF_CHUNK_SEAL_POOL_MIN - 8, RF_CHUNK_SEAL_POOL_MIN,
                            RF_CHUNK_SEAL_POOL_MIN + 5, 3 * RF_CHUNK_SEAL_POOL_MIN + 4099};
    size_t cap = sizes[3] + RF_CHUNK_TRAILER_BYTES;
    unsigned char *a = malloc(cap), *b = malloc(cap);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    uint64_t x = 0x243F6A8885A308D3ull;
    for (size_t i = 0; i < cap; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (unsigned char)(x >> 56);
    }
    rf_chunk_header_write(a, 7, 3, sizes[3] - RF_CHUNK_HEADER_BYTES);
    rf_err_t err;
    rf_err_clear(&err);
    for (int threads = 1; threads <= 5; threads++) {
        rf_pool_t *pool = NULL;
        ck_assert_int_eq(rf_pool_create(threads, &pool, &err), RF_OK);
        ck_assert_int_eq(rf_pool_threads(pool), threads);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            for (int g = 0; g < 2; g++) {
                size_t n = sizes[k];
                memcpy(b, a, cap);
                ck_assert_int_eq(rf_chunk_seal(ALGS[g], a + n, a, n, NULL, 0, &err), RF_OK);
                ck_assert_int_eq(rf_chunk_seal_pool(ALGS[g], b, n, pool, &err), RF_OK);
                ck_assert_msg(memcmp(a, b, n + RF_CHUNK_TRAILER_BYTES) == 0,
                              "%s, %zu bytes, %d threads: the pool's seal differs",
                              rf_chunk_trailer_name(ALGS[g]), n, threads);
                b[n / 2] ^= 0x04;
                ck_assert_int_eq(rf_chunk_check(ALGS[g], b + n, b, n, NULL, 0, g_plan, g_items,
                                                &g_plan->chunks[0], &err),
                                 RF_ERR_INTEGRITY);
            }
        rf_pool_destroy(pool);
    }
    /* a NULL pool seals on the caller */
    size_t n = sizes[1];
    memcpy(b, a, cap);
    ck_assert_int_eq(rf_chunk_seal(RF_CHUNK_TRAILER_SUM64, a + n, a, n, NULL, 0, &err), RF_OK);
    ck_assert_int_eq(rf_chunk_seal_pool(RF_CHUNK_TRAILER_SUM64, b, n, NULL, &err), RF_OK);
    ck_assert_mem_eq(a + n, b + n, RF_CHUNK_TRAILER_BYTES);
    free(a);
    free(b);
}
END_TEST

/* rf_chunk_seal_sum: from the payload's word sum (words numbered from 2) the trailer and
 * algorithm byte of rf_chunk_seal, for payloads of 0..40 bytes (partial last words) and one of
 * 1 MiB + 3; a sum off by one word's mix fails the check; no header refused */
START_TEST(test_seal_sum)
{
    const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 40, (1u << 20) + 3};
    size_t cap = RF_CHUNK_HEADER_BYTES + lens[10] + RF_CHUNK_TRAILER_BYTES;
    unsigned char *a = malloc(cap), *b = malloc(cap);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    uint64_t x = 0x13198A2E03707344ull;
    for (size_t i = 0; i < cap; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (unsigned char)(x >> 56);
    }
    rf_err_t err;
    rf_err_clear(&err);
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        size_t n = RF_CHUNK_HEADER_BYTES + lens[k];
        rf_chunk_header_write(a, 9, (uint32_t)k, lens[k]);
        memcpy(b, a, cap);
        ck_assert_int_eq(rf_chunk_seal(RF_CHUNK_TRAILER_SUM64, a + n, a, n, NULL, 0, &err), RF_OK);
        uint64_t S = rf_accel_sum_words(b + RF_CHUNK_HEADER_BYTES, lens[k], 2);
        ck_assert_int_eq(rf_chunk_seal_sum(b, n, S, &err), RF_OK);
        ck_assert_msg(memcmp(a, b, n + RF_CHUNK_TRAILER_BYTES) == 0,
                      "payload of %zu bytes: the seal from the sum differs", lens[k]);
        ck_assert_int_eq(b[15], RF_CHUNK_TRAILER_SUM64);
        ck_assert_int_eq(rf_chunk_check(RF_CHUNK_TRAILER_SUM64, b + n, b, n, NULL, 0, g_plan,
                                        g_items, &g_plan->chunks[0], &err),
                         RF_OK);
        /* the sum of a payload whose first word differs */
        ck_assert_int_eq(rf_chunk_seal_sum(b, n, S + 1, &err), RF_OK);
        ck_assert_int_eq(rf_chunk_check(RF_CHUNK_TRAILER_SUM64, b + n, b, n, NULL, 0, g_plan,
                                        g_items, &g_plan->chunks[0], &err),
                         RF_ERR_INTEGRITY);
    }
    rf_err_clear(&err);
    ck_assert_int_eq(rf_chunk_seal_sum(b, 15, 0, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "no chunk header"));
    free(a);
    free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chunk_codec");
    TCase *tc = tcase_create("codec");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_header_trailer_byte);
    tcase_add_test(tc, test_seal_matches_definitions);
    tcase_add_test(tc, test_seal_sum);
    tcase_add_test(tc, test_flipped_byte_caught);
    tcase_add_test(tc, test_wrong_version_refused);
    tcase_add_test(tc, test_two_parts);
    tcase_add_test(tc, test_device_form);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_seal_pool);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
