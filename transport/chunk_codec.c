/*
 * refit: the chunk codec (include/refit/chunk.h, "the chunk codec"): the integrity trailer
 * every transport seals its chunks with and checks them against, and the "tensors a chunk
 * carries" text of the errors that name a chunk.
 *
 * One place computes the trailer: XXH3-64 with seed 0, one-shot over one part, streaming
 * over two (the same digest as over their concatenation), written little endian.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "refit/chunk.h"

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

rf_status_t rf_chunk_digest(const void *a, size_t na, const void *b, size_t nb, uint64_t *h_p,
                            rf_err_t *err)
{
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

rf_status_t rf_chunk_seal(void *trailer, const void *a, size_t na, const void *b, size_t nb,
                          rf_err_t *err)
{
    uint64_t h = 0;
    RF_CHECK(rf_chunk_digest(a, na, b, nb, &h, err));
    rf_chunk_u64le_write(trailer, h);
    return RF_OK;
}

rf_status_t rf_chunk_check(const void *trailer, const void *a, size_t na, const void *b,
                           size_t nb, const rf_chunk_plan_t *plan, const rf_chunk_item_t *items,
                           const rf_chunk_t *c, rf_err_t *err)
{
    uint64_t have = 0, want = rf_chunk_u64le_read(trailer);
    RF_CHECK(rf_chunk_digest(a, na, b, nb, &have, err));
    if (have == want)
        return RF_OK;
    char names[RF_ERR_MSG_MAX / 2];
    rf_chunk_describe(plan, items, c, names, sizeof(names));
    return rf_err_set(err, RF_ERR_INTEGRITY,
                      "checksum mismatch (xxh3 %016" PRIx64 ", trailer %016" PRIx64
                      ") before unpacking; chunk carries %s",
                      have, want, names);
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
