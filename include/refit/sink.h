/*
 * refit: the rollout's sink, the one place a received chunk enters the rollout side
 * (DESIGN.md section 8, "apply"). rf_sink_receive is an rf_xfer_recv_fn and rf_sink_complete
 * an rf_xfer_complete_fn (ctx: an rf_sink_t), handed straight to rf_xfer_recv by whoever
 * drives the update (refit-run's job, a session), so a chunk goes from the transport to the
 * reload plan without passing through the caller.
 *
 * Per chunk: host memory in one payload (mpi) is staged to GPU storage in one h2d
 * (rf_plan_stage; a no-op on host storage); every segment becomes one rf_piece_src_t
 * (broadcast: the chunk item's inventory tensor, sender -1, full-width rows; p2p: this rank's
 * rectangle of the piece, the sender's rows and column window) and goes through rf_plan_apply;
 * device pieces' row copies, only collected by the plan, are launched at the end of the chunk
 * (rf_plan_flush) on the stream the transport records its event on, before the memory may be
 * reused. rf_sink_complete runs once the transport saw a device chunk's copies complete and
 * checks what they brought back (rf_plan_check). The optional `after` hook (tests: fault
 * hooks, the cold check's copy) runs after each chunk was applied.
 *
 * Not collective. Errors: rf_plan_apply's (RF_ERR_EXTRA, RF_ERR_SEQUENCE, RF_ERR_MISMATCH,
 * ...), naming the chunk and tensor; the hook's.
 */
#ifndef REFIT_SINK_H
#define REFIT_SINK_H

#include <stdbool.h>
#include <stddef.h>

#include "refit/plan.h"
#include "refit/trainer.h"
#include "refit/transport.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_sink {
    rf_plan_t *plan;             /* borrowed */
    const int *item_tensor;      /* broadcast: [chunk plan items] inventory tensor of each */
    const rf_p2p_rect_t *rects;  /* p2p: [items of this rank's chunk plan]; NULL: broadcast */
    /* optional, after each applied chunk; dev: the segments were device memory */
    rf_status_t (*after)(void *ctx, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                         size_t nsegs, const void *payload, bool dev, rf_err_t *err);
    void *after_ctx;
} rf_sink_t;

rf_status_t rf_sink_receive(void *sink, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                            size_t nsegs, const void *payload, rf_err_t *err);
rf_status_t rf_sink_complete(void *sink, const rf_chunk_t *chunk, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_SINK_H */
