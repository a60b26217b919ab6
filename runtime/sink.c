/*
 * refit: the rollout's sink (see include/refit/sink.h): a received chunk's segments through
 * the reload plan's one entry.
 */
#include "refit/sink.h"

rf_status_t rf_sink_receive(void *ctx, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                            size_t nsegs, const void *payload, rf_err_t *err)
{
    rf_sink_t *s = ctx;
    const bool dev = nsegs > 0 && segs[0].mem == RF_XFER_MEM_DEVICE;
    if (payload != NULL && !dev)
        RF_CHECK(rf_plan_stage(s->plan, payload, chunk->payload_bytes, err)); /* GPU: one h2d */
    for (size_t k = 0; k < nsegs; k++) {
        const rf_xfer_segment_t *sg = &segs[k];
        rf_piece_src_t ps = {.sender = -1,
                             .row_begin = sg->row_begin,
                             .row_end = sg->row_end,
                             .src = sg->src,
                             .mem = dev ? RF_PIECE_DEVICE : RF_PIECE_HOST,
                             .chunk = chunk->seq};
        if (s->rects != NULL) { /* p2p: this rank's rectangle of the piece */
            const rf_p2p_rect_t *q = &s->rects[sg->piece->item];
            ps.tensor = q->tensor;
            ps.sender = q->sender;
            ps.row_begin = (uint64_t)q->reg.r0 + sg->row_begin;
            ps.row_end = (uint64_t)q->reg.r0 + sg->row_end;
            ps.col_begin = q->reg.c0;
            ps.col_end = q->reg.c1;
            ps.src_pitch = q->reg.c1 - q->reg.c0;
        } else {
            ps.tensor = s->item_tensor[sg->piece->item];
        }
        RF_CHECK(rf_plan_apply(s->plan, &ps, err));
    }
    if (dev) /* device pieces' row copies are only collected: launch them now */
        RF_CHECK(rf_plan_flush(s->plan, err));
    if (s->after != NULL)
        return s->after(s->after_ctx, chunk, segs, nsegs, payload, dev, err);
    return RF_OK;
}

rf_status_t rf_sink_complete(void *ctx, const rf_chunk_t *chunk, rf_err_t *err)
{
    rf_sink_t *s = ctx;
    return rf_plan_check(s->plan, chunk->seq, err);
}
