/*
 * refit: the chunk plan (see include/refit/chunk.h for the rules).
 *
 * One pass over the items: an open chunk grows while the next tensor fits at the next
 * 256-aligned offset; a stage change, a tensor that does not fit or a tensor that must be
 * split closes it. Splitting puts each row piece in a chunk of its own.
 */
#include "refit/chunk.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct rf_chunk_builder {
    rf_chunk_plan_t *plan;
    size_t cap_chunks;
    size_t cap_pieces;
    int open; /* a chunk is open and can take more pieces */
} rf_chunk_builder_t;

static uint64_t align_up(uint64_t x)
{
    return (x + RF_CHUNK_ALIGN - 1) & ~(uint64_t)(RF_CHUNK_ALIGN - 1);
}

static rf_status_t builder_new_chunk(rf_chunk_builder_t *b, int stage, rf_err_t *err)
{
    rf_chunk_plan_t *p = b->plan;
    if (p->n_chunks == b->cap_chunks) {
        size_t cap = b->cap_chunks ? 2 * b->cap_chunks : 64;
        rf_chunk_t *c = realloc(p->chunks, cap * sizeof(*c));
        if (c == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "chunk plan: out of memory at chunk %zu",
                              p->n_chunks);
        p->chunks = c;
        b->cap_chunks = cap;
    }
    if (p->n_chunks >= UINT32_MAX)
        return rf_err_set(err, RF_ERR_INVALID, "chunk plan: more than 2^32 chunks");
    rf_chunk_t *c = &p->chunks[p->n_chunks];
    c->stage = stage;
    c->seq = (uint32_t)p->n_chunks;
    c->payload_bytes = 0;
    c->piece_begin = p->n_pieces;
    c->piece_count = 0;
    p->n_chunks++;
    b->open = 1;
    return RF_OK;
}

static rf_status_t builder_add_piece(rf_chunk_builder_t *b, size_t item, uint64_t row_begin,
                                     uint64_t row_end, uint64_t offset, uint64_t bytes,
                                     rf_err_t *err)
{
    rf_chunk_plan_t *p = b->plan;
    if (p->n_pieces == b->cap_pieces) {
        size_t cap = b->cap_pieces ? 2 * b->cap_pieces : 64;
        rf_chunk_piece_t *q = realloc(p->pieces, cap * sizeof(*q));
        if (q == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "chunk plan: out of memory at piece %zu",
                              p->n_pieces);
        p->pieces = q;
        b->cap_pieces = cap;
    }
    rf_chunk_piece_t *pc = &p->pieces[p->n_pieces++];
    pc->item = item;
    pc->row_begin = row_begin;
    pc->row_end = row_end;
    pc->offset = offset;
    pc->bytes = bytes;
    rf_chunk_t *c = &p->chunks[p->n_chunks - 1];
    c->piece_count++;
    c->payload_bytes = offset + bytes;
    return RF_OK;
}

rf_status_t rf_chunk_plan_create(const rf_chunk_item_t *items, size_t n_items,
                                 uint64_t chunk_bytes, rf_chunk_plan_t **plan_p, rf_err_t *err)
{
    if (plan_p == NULL || (items == NULL && n_items > 0))
        return rf_err_set(err, RF_ERR_INVALID, "chunk plan: null argument");
    if (chunk_bytes <= RF_CHUNK_HEADER_BYTES)
        return rf_err_set(err, RF_ERR_INVALID,
                          "chunk plan: chunk_bytes %" PRIu64 " leaves no room after the "
                          "16-byte header",
                          chunk_bytes);
    const uint64_t cap = chunk_bytes - RF_CHUNK_HEADER_BYTES;
    rf_chunk_plan_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "chunk plan: out of memory");
    p->chunk_bytes = chunk_bytes;
    rf_chunk_builder_t b = {.plan = p};
    rf_status_t st = RF_OK;
    int stage = -1;
    uint64_t off = 0; /* end of the open chunk's payload */

    for (size_t i = 0; i < n_items; i++) {
        const rf_chunk_item_t *it = &items[i];
        const char *name = it->name ? it->name : "(unnamed)";
        if (it->stage < 0 || it->stage < stage) {
            st = rf_err_set(err, RF_ERR_INVALID,
                            "chunk plan: tensor %s: stage %d out of order (previous %d)", name,
                            it->stage, stage);
            goto err_out;
        }
        if (it->stage >= 4096) {
            st = rf_err_set(err, RF_ERR_INVALID, "chunk plan: tensor %s: stage %d >= 4096",
                            name, it->stage);
            goto err_out;
        }
        if ((it->row_bytes != 0 && it->rows > UINT64_MAX / it->row_bytes) ||
            it->rows * it->row_bytes != it->bytes) {
            st = rf_err_set(err, RF_ERR_INVALID,
                            "chunk plan: tensor %s: %" PRIu64 " rows x %" PRIu64
                            " bytes != %" PRIu64 " bytes",
                            name, it->rows, it->row_bytes, it->bytes);
            goto err_out;
        }
        if (it->stage != stage) {
            b.open = 0; /* chunks never span stages */
            stage = it->stage;
        }
        if (it->bytes <= cap) {
            uint64_t start = b.open ? align_up(off) : 0;
            if (!b.open || start > cap || it->bytes > cap - start) {
                RF_CHECK_GOTO(builder_new_chunk(&b, stage, err), st, err_out);
                start = 0;
            }
            RF_CHECK_GOTO(builder_add_piece(&b, i, 0, it->rows, start, it->bytes, err), st,
                          err_out);
            off = start + it->bytes;
            continue;
        }
        if (it->row_bytes > cap) {
            st = rf_err_set(err, RF_ERR_INVALID,
                            "chunk plan: tensor %s: one row of %" PRIu64
                            " bytes exceeds the chunk payload capacity %" PRIu64
                            " (chunk_bytes %" PRIu64 ")",
                            name, it->row_bytes, cap, chunk_bytes);
            goto err_out;
        }
        const uint64_t rows_per = cap / it->row_bytes;
        for (uint64_t r = 0; r < it->rows; r += rows_per) {
            uint64_t re = it->rows - r < rows_per ? it->rows : r + rows_per;
            RF_CHECK_GOTO(builder_new_chunk(&b, stage, err), st, err_out);
            RF_CHECK_GOTO(builder_add_piece(&b, i, r, re, 0, (re - r) * it->row_bytes, err),
                          st, err_out);
        }
        b.open = 0; /* each piece in its own chunk */
    }

    p->n_stages = stage + 1;
    if (p->n_stages > 0) {
        p->stages = calloc((size_t)p->n_stages, sizeof(*p->stages));
        if (p->stages == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "chunk plan: out of memory");
            goto err_out;
        }
    }
    /* stage ranges: empty stages begin where the next non-empty one would */
    for (int s = 0; s < p->n_stages; s++)
        p->stages[s].chunk_begin = (uint32_t)p->n_chunks;
    for (size_t k = p->n_chunks; k-- > 0;) {
        rf_chunk_stage_range_t *r = &p->stages[p->chunks[k].stage];
        r->chunk_begin = (uint32_t)k;
        r->chunk_count++;
        r->payload_bytes += p->chunks[k].payload_bytes;
        p->payload_bytes += p->chunks[k].payload_bytes;
    }
    for (int s = p->n_stages - 1; s > 0; s--)
        if (p->stages[s - 1].chunk_count == 0)
            p->stages[s - 1].chunk_begin = p->stages[s].chunk_begin;
    *plan_p = p;
    return RF_OK;

err_out:
    rf_chunk_plan_destroy(p);
    return st;
}

void rf_chunk_plan_destroy(rf_chunk_plan_t *plan)
{
    if (plan == NULL)
        return;
    free(plan->chunks);
    free(plan->pieces);
    free(plan->stages);
    free(plan);
}

void rf_chunk_header_write(void *buf, uint32_t update, uint32_t seq, uint64_t payload_bytes)
{
    unsigned char *p = buf;
    memcpy(p, &update, 4); /* little-endian targets only (CMakeLists.txt refuses others) */
    memcpy(p + 4, &seq, 4);
    uint64_t v = payload_bytes & RF_CHUNK_PAYLOAD_MAX; /* byte 15, the trailer algorithm: 0 */
    memcpy(p + 8, &v, 8);
}

void rf_chunk_header_read(const void *buf, rf_chunk_header_t *hdr_p)
{
    const unsigned char *p = buf;
    memcpy(&hdr_p->update, p, 4);
    memcpy(&hdr_p->seq, p + 4, 4);
    uint64_t v;
    memcpy(&v, p + 8, 8);
    hdr_p->payload_bytes = v & RF_CHUNK_PAYLOAD_MAX;
    hdr_p->trailer = p[15];
}

/*
 * Layout: base is 256-aligned; the buffer handed out starts at base + 256 - 16 so that its
 * payload lands at base + 256. Free recovers base by the same fixed offset.
 */
void *rf_chunk_buffer_alloc(uint64_t chunk_bytes)
{
    if (chunk_bytes <= RF_CHUNK_HEADER_BYTES || chunk_bytes > SIZE_MAX - 2 * RF_CHUNK_ALIGN)
        return NULL;
    size_t total = (size_t)align_up(chunk_bytes - RF_CHUNK_HEADER_BYTES) + RF_CHUNK_ALIGN;
    unsigned char *base = aligned_alloc(RF_CHUNK_ALIGN, total);
    if (base == NULL)
        return NULL;
    return base + RF_CHUNK_ALIGN - RF_CHUNK_HEADER_BYTES;
}

void rf_chunk_buffer_free(void *buf)
{
    if (buf == NULL)
        return;
    free((unsigned char *)buf - (RF_CHUNK_ALIGN - RF_CHUNK_HEADER_BYTES));
}
