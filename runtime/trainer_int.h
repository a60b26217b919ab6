/*
 * refit: what runtime/trainer.c (shards, production) and runtime/trainer_pack.c (the pack,
 * the stage gather's sides, the source) share: element sizes and the copy of elements in a
 * source dtype (a caller's fp32 master) into the entry's.
 */
#ifndef REFIT_TRAINER_INT_H
#define REFIT_TRAINER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/quant.h" /* rf_f32_to_f16 */
#include "refit/trainer.h"

static inline uint64_t tensor_cols(const rf_tensor_t *t)
{
    uint64_t rows = rf_tensor_rows(t);
    return rows == 0 ? 0 : t->numel / rows;
}

static inline bool region_empty(const rf_region_t *r) { return r->r1 <= r->r0 || r->c1 <= r->c0; }

/* Intersection of an owner's region with piece rows; false when empty. */
static inline bool piece_part(const rf_region_t *reg, const rf_chunk_piece_t *pc,
                              rf_region_t *out)
{
    *out = *reg;
    if ((int64_t)pc->row_begin > out->r0)
        out->r0 = (int64_t)pc->row_begin;
    if ((int64_t)pc->row_end < out->r1)
        out->r1 = (int64_t)pc->row_end;
    return !region_empty(out);
}

/* Whether plan piece gi is gathered and packed (all, unless tr->gathered says otherwise). */
static inline bool piece_on(const rf_trainer_t *tr, size_t gi)
{
    return tr->gathered == NULL || tr->gathered[gi] != 0;
}

/* Element size of manifest entry i (the manifest's dtype: FP8 scales may travel as bf16). */
static inline size_t entry_es(const rf_trainer_t *tr, int i)
{
    return rf_dtype_size(tr->man->entries[i].dtype);
}

static inline uint64_t entry_row_bytes(const rf_trainer_t *tr, int i)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[i].tensor];
    uint64_t rows = rf_tensor_rows(t);
    return rows ? tr->man->entries[i].nbytes / rows : 0;
}

/* Element size of entry i's shard buffer: the entry's dtype, or its wider master's. */
static inline size_t buf_es(const rf_trainer_t *tr, int i)
{
    return rf_dtype_size(tr->src_dtype[i]);
}

/* n elements of entry i from src, held in sdt (the entry's dtype or an F32 master), to dst in
 * the entry's dtype: a copy, or each value rounded to nearest even (rf_f32_to_bf16,
 * rf_f32_to_f16: torch's float -> bfloat16 / half casts; NaN stays a quiet NaN). */
static inline void put_elems(const rf_trainer_t *tr, int i, void *dst, const char *src, rf_dtype_t sdt,
                      size_t n)
{
    rf_dtype_t dt = tr->man->entries[i].dtype;
    if (sdt == dt) {
        memcpy(dst, src, n * rf_dtype_size(dt));
        return;
    }
    char *d = dst;
    for (size_t k = 0; k < n; k++) {
        float f;
        memcpy(&f, src + k * sizeof(float), sizeof(f)); /* the payload is only 2-aligned */
        uint16_t h = dt == RF_DTYPE_BF16 ? rf_f32_to_bf16(f) : rf_f32_to_f16(f);
        memcpy(d + k * sizeof(h), &h, sizeof(h));
    }
}

/* Streamed production (rf_trainer_produce, tr->stream_ck): rows part->r0..r1 of entry ei,
 * whole width, from the checkpoint into piece pc of the payload at their offsets; adds the
 * bytes read to *bytes. Safe from several threads on distinct rows (runtime/trainer_stream.c). */
rf_status_t trainer_stream_part(rf_trainer_t *tr, int ei, const rf_chunk_piece_t *pc,
                                const rf_region_t *part, char *payload, uint64_t *bytes,
                                rf_err_t *err);

/* Every streamed part of chunk c read into payload, by tr->read_threads threads (the calling
 * one and a pool started at the first call); adds to stats.bytes_read. sum: NULL, or the
 * payload's refit-sum64 word sum (rf_chunk_sum_t) made as the parts are read, the bytes no
 * reader summed read after: the caller writes nothing into the payload afterwards
 * (trainer_stream.c). */
rf_status_t trainer_stream_chunk(rf_trainer_t *tr, const rf_chunk_t *c, char *payload,
                                 rf_chunk_sum_t *sum, rf_err_t *err);


#endif /* REFIT_TRAINER_INT_H */
