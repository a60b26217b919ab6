/*
 * refit: the chunk codec (include/refit/chunk.h, "the chunk codec"): the integrity trailer
 * every transport seals its chunks with and checks them against, and the "tensors a chunk
 * carries" text of the errors that name a chunk.
 *
 * One place computes the trailer, under the algorithm the header's byte 15 names: XXH3-64
 * with seed 0 (one-shot over one part, streaming over two) or refit-sum64 v1 (the
 * accelerator's definition, include/refit/accel.h; two parts are two word sums, the second
 * numbered on from the first), each the same digest as over the parts' concatenation, written
 * little endian.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "refit/accel.h"
#include "refit/chunk.h"
#include "refit/pool.h"

void rf_chunk_u64le_write(void *p, uint64_t v)
{
    unsigned char *b = p;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

uint64_t rf_chunk_u64le_read(const void *p)
{
    const unsigned char *b = p;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

const char *rf_chunk_trailer_name(int alg)
{
    switch (alg) {
    case RF_CHUNK_TRAILER_NONE:
        return "none";
    case RF_CHUNK_TRAILER_XXH3:
        return "xxh3-64";
    case RF_CHUNK_TRAILER_SUM64:
        return "refit-sum64 v1";
    default:
        return "unknown";
    }
}

rf_status_t rf_chunk_trailer_parse(const char *text, int *alg_p, rf_err_t *err)
{
    if (text != NULL && (strcmp(text, "xxh3") == 0 || strcmp(text, "xxh3-64") == 0)) {
        *alg_p = RF_CHUNK_TRAILER_XXH3;
        return RF_OK;
    }
    if (text != NULL && (strcmp(text, "sum64") == 0 || strcmp(text, "refit-sum64") == 0)) {
        *alg_p = RF_CHUNK_TRAILER_SUM64;
        return RF_OK;
    }
    return rf_err_set(err, RF_ERR_INVALID,
                      "trailer algorithm '%s' unknown (xxh3-64 or refit-sum64)",
                      text ? text : "(null)");
}

rf_status_t rf_chunk_digest(int alg, const void *a, size_t na, const void *b, size_t nb,
                            uint64_t *h_p, rf_err_t *err)
{
    if (alg == RF_CHUNK_TRAILER_SUM64) {
        if (b == NULL || nb == 0) {
            *h_p = rf_accel_checksum(a, na);
            return RF_OK;
        }
        if (na % 8 != 0)
            return rf_err_set(err, RF_ERR_INVALID,
                              "refit-sum64 over two parts: the first is %zu bytes, not a "
                              "multiple of 8",
                              na);
        uint64_t S = rf_accel_sum_words(a, na, 0) + rf_accel_sum_words(b, nb, na / 8);
        *h_p = rf_accel_sum_final(S, (uint64_t)na + nb);
        return RF_OK;
    }
    if (alg != RF_CHUNK_TRAILER_XXH3)
        return rf_err_set(err, RF_ERR_INVALID, "trailer algorithm %d unknown", alg);
    if (b == NULL || nb == 0) {
        *h_p = XXH3_64bits(a, na);
        return RF_OK;
    }
    XXH3_state_t *hs = XXH3_createState();
    if (hs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    XXH3_64bits_reset(hs);
    XXH3_64bits_update(hs, a, na);
    XXH3_64bits_update(hs, b, nb);
    *h_p = XXH3_64bits_digest(hs);
    XXH3_freeState(hs);
    return RF_OK;
}

rf_status_t rf_chunk_seal(int alg, void *trailer, void *a, size_t na, const void *b, size_t nb,
                          rf_err_t *err)
{
    if (na < RF_CHUNK_HEADER_BYTES)
        return rf_err_set(err, RF_ERR_INVALID, "sealing %zu bytes: no chunk header", na);
    if (alg != RF_CHUNK_TRAILER_XXH3 && alg != RF_CHUNK_TRAILER_SUM64)
        return rf_err_set(err, RF_ERR_INVALID, "trailer algorithm %d unknown", alg);
    ((unsigned char *)a)[15] = (unsigned char)alg; /* the header names the algorithm */
    uint64_t h = 0;
    RF_CHECK(rf_chunk_digest(alg, a, na, b, nb, &h, err));
    rf_chunk_u64le_write(trailer, h);
    return RF_OK;
}

/* rf_chunk_seal_pool: worker `who` of n sums its slice of whole words. */
typedef struct {
    const unsigned char *msg;
    size_t bytes, slice; /* slice: a multiple of 8 */
    uint64_t S[RF_POOL_MAX];
} seal_job_t;

static void seal_slice(void *ctx, int who, int n)
{
    (void)n;
    seal_job_t *j = ctx;
    size_t b = (size_t)who * j->slice;
    size_t len = b >= j->bytes ? 0 : j->bytes - b < j->slice ? j->bytes - b : j->slice;
    j->S[who] = len ? rf_accel_sum_words(j->msg + b, len, b / 8) : 0;
}

rf_status_t rf_chunk_seal_pool(int alg, void *msg, size_t covered, rf_pool_t *pool,
                               rf_err_t *err)
{
    int n = rf_pool_threads(pool);
    if (alg != RF_CHUNK_TRAILER_SUM64 || n < 2 || covered < RF_CHUNK_SEAL_POOL_MIN)
        return rf_chunk_seal(alg, (unsigned char *)msg + covered, msg, covered, NULL, 0, err);
    if (covered < RF_CHUNK_HEADER_BYTES)
        return rf_err_set(err, RF_ERR_INVALID, "sealing %zu bytes: no chunk header", covered);
    ((unsigned char *)msg)[15] = (unsigned char)alg; /* the header names the algorithm */
    seal_job_t j = {.msg = msg, .bytes = covered};
    size_t words = (covered + 7) / 8;
    j.slice = (words + (size_t)n - 1) / (size_t)n * 8;
    rf_pool_run(pool, seal_slice, &j);
    uint64_t S = 0;
    for (int w = 0; w < n; w++)
        S += j.S[w];
    rf_chunk_u64le_write((unsigned char *)msg + covered, rf_accel_sum_final(S, covered));
    return RF_OK;
}

rf_status_t rf_chunk_seal_sum(void *msg, size_t covered, uint64_t payload_sum, rf_err_t *err)
{
    if (covered < RF_CHUNK_HEADER_BYTES)
        return rf_err_set(err, RF_ERR_INVALID, "sealing %zu bytes: no chunk header", covered);
    unsigned char *m = msg;
    m[15] = (unsigned char)RF_CHUNK_TRAILER_SUM64; /* the header names the algorithm */
    uint64_t S = rf_accel_sum_words(m, RF_CHUNK_HEADER_BYTES, 0) + payload_sum;
    rf_chunk_u64le_write(m + covered, rf_accel_sum_final(S, covered));
    return RF_OK;
}

/* The header's algorithm byte against the job's: refused unchecked when they differ. */
static rf_status_t alg_check(int alg, const void *header, rf_err_t *err)
{
    const unsigned char have = ((const unsigned char *)header)[15];
    if (have == alg)
        return RF_OK;
    return rf_err_set(err, RF_ERR_INTEGRITY,
                      "trailer algorithm %u (%s) in the header, this job checks %d (%s): chunk "
                      "refused unchecked",
                      (unsigned)have, rf_chunk_trailer_name(have), alg, rf_chunk_trailer_name(alg));
}

static rf_status_t mismatch(const char *what, uint64_t have, uint64_t want,
                            const rf_chunk_plan_t *plan, const rf_chunk_item_t *items,
                            const rf_chunk_t *c, rf_err_t *err)
{
    char names[RF_ERR_MSG_MAX / 2];
    rf_chunk_describe(plan, items, c, names, sizeof(names));
    return rf_err_set(err, RF_ERR_INTEGRITY,
                      "checksum mismatch (%s %016" PRIx64 ", trailer %016" PRIx64
                      ") before unpacking; chunk carries %s",
                      what, have, want, names);
}

rf_status_t rf_chunk_check(int alg, const void *trailer, const void *a, size_t na, const void *b,
                           size_t nb, const rf_chunk_plan_t *plan, const rf_chunk_item_t *items,
                           const rf_chunk_t *c, rf_err_t *err)
{
    if (na < RF_CHUNK_HEADER_BYTES)
        return rf_err_set(err, RF_ERR_INVALID, "checking %zu bytes: no chunk header", na);
    RF_CHECK(alg_check(alg, a, err));
    uint64_t have = 0, want = rf_chunk_u64le_read(trailer);
    RF_CHECK(rf_chunk_digest(alg, a, na, b, nb, &have, err));
    if (have == want)
        return RF_OK;
    return mismatch(alg == RF_CHUNK_TRAILER_XXH3 ? "xxh3" : "refit-sum64 v1", have, want, plan,
                    items, c, err);
}

rf_status_t rf_chunk_check_sum(const void *header, uint64_t payload_sum, uint64_t payload_bytes,
                               uint64_t trailer, const rf_chunk_plan_t *plan,
                               const rf_chunk_item_t *items, const rf_chunk_t *c, rf_err_t *err)
{
    RF_CHECK(alg_check(RF_CHUNK_TRAILER_SUM64, header, err));
    uint64_t S = rf_accel_sum_words(header, RF_CHUNK_HEADER_BYTES, 0) + payload_sum;
    uint64_t have = rf_accel_sum_final(S, RF_CHUNK_HEADER_BYTES + payload_bytes);
    if (have == trailer)
        return RF_OK;
    return mismatch("refit-sum64 v1 on the device chunk buffer", have, trailer, plan, items, c,
                    err);
}

void rf_chunk_describe(const rf_chunk_plan_t *plan, const rf_chunk_item_t *items,
                       const rf_chunk_t *c, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t k = 0; k < c->piece_count && len + 1 < cap; k++) {
        const rf_chunk_piece_t *pc = &plan->pieces[c->piece_begin + k];
        const char *name = items && items[pc->item].name ? items[pc->item].name : NULL;
        int w;
        if (name)
            w = snprintf(out + len, cap - len, "%s%s rows %" PRIu64 "-%" PRIu64, k ? ", " : "",
                         name, pc->row_begin, pc->row_end);
        else
            w = snprintf(out + len, cap - len, "%sitem %zu rows %" PRIu64 "-%" PRIu64,
                         k ? ", " : "", pc->item, pc->row_begin, pc->row_end);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (len + 1 >= cap && cap > 4)
        memcpy(out + cap - 4, "...", 4);
}
