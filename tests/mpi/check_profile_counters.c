/*
 * Checks the per-rank profile counters (profile-rank<R>.jsonl, one line per update) and the
 * run summaries (profile-rank<R>.json) that refit-run wrote for llama-tiny on trainer TP2 ->
 * 2 engines x TP1 (jobs/topologies/llama-tiny-tp2-to-2xtp1.yaml, --checkpoint, 2 updates:
 * update 1 carries the checkpoint, update 2 generator weights), against values computed by
 * hand from the model's sizes (DESIGN.md section 6):
 *
 *   llama-tiny: H 96, nh 6, nkv 2, d 16, I 160, V 1003, L 3, untied, bf16.
 *   split tensors per layer: q 96x96, k 32x96, v 32x96, o 96x96, gate/up 160x96, down 96x160
 *     = 70,656 elements; 3 layers = 211,968, halved by TP2 = 105,984 per rank.
 *   vocab (embed, lm_head): ceil(1003 / 2) = 502 rows on t = 0, 501 rows on t = 1, x 96.
 *   replicated norms: 3 x 2 x 96 + 96 = 672 elements, produced by both ranks.
 *   t = 0: (105,984 + 2 x 502 x 96 + 672) x 2 B = 406,080 B
 *   t = 1: (105,984 + 2 x 501 x 96 + 672) x 2 B = 405,696 B
 *   gathered by the stage sender (t = 0): t = 1's split parts = (105,984 + 96,192) x 2 = 404,352 B
 *
 * With a second argument tp2pp2: the trainer counters of llama-tiny on trainer TP2 x PP2 ->
 * TP2 (jobs/topologies/llama-tiny-tp2pp2-to-tp2.yaml, ranks t + 2p): stage 0 holds the
 * embedding and layers 0-1, stage 1 layer 2, the final norm and lm_head; each rank reads its
 * own shard's bytes only (HDF5: collective reads where libhdf5 is parallel):
 *   p = 0, t = 0: (2 x 35,328 + 502 x 96 + 2 x 192) x 2 B = 238,464 B; t = 1: 238,272 B
 *   p = 1, t = 0: (35,328 + 502 x 96 + 192 + 96) x 2 B = 167,616 B;    t = 1: 167,424 B
 */
#include <check.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile_lines.h"

static const char *g_dir;

static json_t *counters(int rank, int update)
{
    char path[1024], msg[2048];
    profile_lines_t p;
    snprintf(path, sizeof(path), "%s/profile-rank%d.jsonl", g_dir, rank);
    ck_assert_msg(profile_lines_read(path, &p, msg, sizeof(msg)) == 0, "%s", msg);
    ck_assert_msg(!p.torn, "%s: torn last line after a committed run", path);
    json_t *u = profile_lines_update(&p, update);
    ck_assert_msg(u != NULL, "%s: no update %d", path, update);
    ck_assert_int_eq(json_integer_value(json_object_get(u, "v")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(u, "rank")), rank);
    ck_assert_str_eq(json_string_value(json_object_get(u, "status")), "RF_OK");
    json_t *c = json_incref(json_object_get(u, "counters"));
    profile_lines_free(&p);
    return c;
}

static long long get(json_t *c, const char *key)
{
    json_t *v = json_object_get(c, key);
    ck_assert_msg(json_is_integer(v), "counter %s missing", key);
    return (long long)json_integer_value(v);
}

START_TEST(test_trainer_counters)
{
    for (int u = 1; u <= 2; u++) {
        json_t *t0 = counters(0, u), *t1 = counters(1, u);
        ck_assert_int_eq(get(t0, "bytes_produced"), 406080);
        ck_assert_int_eq(get(t1, "bytes_produced"), 405696);
        ck_assert_int_eq(get(t0, "bytes_read"), u == 1 ? 406080 : 0);
        ck_assert_int_eq(get(t1, "bytes_read"), u == 1 ? 405696 : 0);
        ck_assert_int_eq(get(t0, "bytes_gathered"), 404352);
        ck_assert_int_eq(get(t1, "bytes_gathered"), 0);
        json_decref(t0);
        json_decref(t1);
    }
}
END_TEST

START_TEST(test_rollout_counters)
{
    for (int u = 1; u <= 2; u++)
        for (int r = 2; r <= 3; r++) {
            json_t *c = counters(r, u);
            /* 30 tensors, one application each; whole payload received once (one chunk) */
            ck_assert_int_eq(get(c, "applications"), 30);
            ck_assert_int_eq(get(c, "declined"), 0);
            ck_assert_int_eq(get(c, "loader_calls"), 30);
            ck_assert_int_eq(get(c, "layers_direct"), 21);
            ck_assert_int_eq(get(c, "chunks_received"), 1);
            ck_assert_int_ge(get(c, "bytes_received"), 810432 + 16);
            ck_assert_int_le(get(c, "bookkeeping_probes"), 2 * 30);
            json_decref(c);
        }
}
END_TEST

START_TEST(test_trainer_counters_pp2)
{
    static const long long shard[4] = {238464, 238272, 167616, 167424};
    for (int u = 1; u <= 2; u++)
        for (int r = 0; r < 4; r++) {
            json_t *c = counters(r, u);
            ck_assert_int_eq(get(c, "bytes_produced"), shard[r]);
            ck_assert_int_eq(get(c, "bytes_read"), u == 1 ? shard[r] : 0);
            json_decref(c);
        }
}
END_TEST

/* the run's summary, written at the end: both updates, and totals equal to the lines' sums */
START_TEST(test_summary)
{
    for (int r = 0; r <= 3; r++) {
        char path[1024];
        json_error_t je;
        snprintf(path, sizeof(path), "%s/profile-rank%d.json", g_dir, r);
        json_t *s = json_load_file(path, 0, &je);
        ck_assert_msg(s != NULL, "%s: %s", path, je.text);
        ck_assert_str_eq(json_string_value(json_object_get(s, "format")), "refit-profile");
        ck_assert_int_eq(json_integer_value(json_object_get(s, "version")), 2);
        ck_assert_int_eq(json_integer_value(json_object_get(s, "rank")), r);
        ck_assert_str_eq(json_string_value(json_object_get(s, "role")), r < 2 ? "trainer" : "rollout");
        ck_assert_int_eq(json_integer_value(json_object_get(s, "updates")), 2);
        ck_assert_int_eq(json_integer_value(json_object_get(s, "committed")), 2);
        json_t *c = json_object_get(s, "counters");
        long long want = 0;
        for (int u = 1; u <= 2; u++) {
            json_t *lc = counters(r, u);
            want += get(lc, r < 2 ? "bytes_produced" : "bytes_received");
            json_decref(lc);
        }
        ck_assert_int_eq(get(c, r < 2 ? "bytes_produced" : "bytes_received"), want);
        json_t *t = json_object_get(json_object_get(s, "timers"), "update_s");
        ck_assert(json_real_value(json_object_get(t, "min")) > 0);
        ck_assert(json_real_value(json_object_get(t, "min")) <= json_real_value(json_object_get(t, "max")));
        json_decref(s);
    }
}
END_TEST

int main(int argc, char **argv)
{
    bool pp2 = argc == 3 && strcmp(argv[2], "tp2pp2") == 0;
    if (argc != 2 && !pp2) {
        fprintf(stderr, "usage: %s PROFILE-DIR [tp2pp2]\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    Suite *s = suite_create("profile_counters");
    TCase *tc = tcase_create("counters");
    tcase_set_timeout(tc, 30);
    if (pp2) {
        tcase_add_test(tc, test_trainer_counters_pp2);
    } else {
        tcase_add_test(tc, test_trainer_counters);
        tcase_add_test(tc, test_rollout_counters);
        tcase_add_test(tc, test_summary);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
