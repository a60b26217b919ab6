/*
 * refit: the reload planner (DESIGN.md section 8; after vLLM PR "Reload layout-preserving
 * weights directly").
 *
 * Once per layer (engine module), and again whenever a slot's signature changed before an
 * update begins, the planner decides DIRECT (loaders write straight into runtime storage),
 * RUNTIME_VIEW (through the format owner's validated view) or LAYERWISE (stage the model
 * layout in scratch, process_after_loading once the layer is complete, copy into the
 * original storage), fail-closed. Every layer holds its expected applications, keyed by
 * (source tensor, sender, destination slot, shard id, expert id); each arriving piece is one
 * O(1) hash lookup plus a cursor check (repeats, gaps, unknown keys and late pieces fail the
 * update), and missing applications fail at finalize. Probes are counted in
 * `bookkeeping_probes`.
 */
#ifndef REFIT_PLAN_H
#define REFIT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/format.h"
#include "refit/loader.h"
#include "refit/model.h"
#include "refit/status.h"
#include "refit/storage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RF_PLAN_DIRECT = 0,
    RF_PLAN_RUNTIME_VIEW = 1,
    RF_PLAN_LAYERWISE = 2,
} rf_plan_mode_t;
#define RF_PLAN_MODES 3

const char *rf_plan_mode_name(rf_plan_mode_t m);

typedef enum {
    RF_POLICY_AUTO = 0,     /* the planner's decision */
    RF_POLICY_LAYERWISE = 1 /* every layer LAYERWISE, for comparison */
} rf_reload_policy_t;

/* Device timeline of one update (device storage with REFIT_DEVICE_TIMELINE=1; see
 * rf_plan_timeline_t): GPU milliseconds of the row-copy launches, the LAYERWISE processing and
 * the other writes (scratch zeroing, vocab padding), the span from the first to the last, the
 * device idle time between them (the host did not keep the stream fed); lead: host
 * milliseconds from rf_plan_begin to the first write's launch; tail: device idle time after the
 * last write until rf_plan_finalize was called (0 when the device was still busy then). */
typedef struct rf_plan_dev_stats {
    bool timeline; /* false: not recorded */
    uint64_t spans, copy_bytes;
    double copy_ms, layerwise_ms, other_ms, span_ms, idle_ms, lead_ms, tail_ms;
} rf_plan_dev_stats_t;

typedef struct rf_plan_stats {
    uint64_t layers[RF_PLAN_MODES]; /* layers per mode (plan time) */
    uint64_t applications;          /* completed keys this update */
    uint64_t declined;              /* completed keys declined (non-local experts) */
    uint64_t loader_calls;          /* pieces applied */
    uint64_t bookkeeping_probes;    /* hash probes of application lookups this update */
    uint64_t elements_written;      /* elements the loaders wrote */
    uint64_t layerwise_runs;        /* process_after_loading calls */
    uint64_t shapes_checked;        /* wna16 weight_shape applications checked (not stored) */
    uint64_t derived_runs;          /* deferred-stage calls */
    uint64_t rebuilds;              /* plan rebuilds (signature changed before an update) */
    int moved_slot;                 /* the last rf_plan_begin: the first storage slot whose
                                     * signature changed, or -1 */
    double begin_s;                 /* the last rf_plan_begin (CLOCK_MONOTONIC seconds) */
    double loader_s;                /* seconds in loader calls (CLOCK_MONOTONIC, not CPU time) */
    double layerwise_s, deferred_s, verify_s;
    rf_plan_dev_stats_t dev;
} rf_plan_stats_t;

/* Device timeline: an event pair around every device write the plan enqueues, summed by
 * rf_plan_finalize once the stream drained. Off unless REFIT_DEVICE_TIMELINE=1 (events with
 * timing cost a few microseconds each). */
typedef struct rf_plan_span {
    rf_accel_event_t *ev[2]; /* start, end (created once, kept across updates) */
    int kind;                /* 0 row copies, 1 LAYERWISE processing, 2 other */
    uint64_t bytes;          /* row copies: bytes they move */
} rf_plan_span_t;

typedef struct rf_plan_timeline {
    bool on;
    double t_begin, t_first;  /* host seconds at rf_plan_begin and at the first span's launch */
    rf_accel_event_t *mark;   /* recorded at rf_plan_finalize's entry */
    bool marked;              /* this update */
    rf_plan_span_t *span;
    size_t n, cap; /* spans this update, allocated */
} rf_plan_timeline_t;

typedef struct rf_scratch_buf {
    void *ptr;
    size_t bytes;
    bool busy;
} rf_scratch_buf_t;

typedef struct shape_pending {
    uint64_t app;   /* index in apps */
    uint32_t chunk; /* chunk seq whose copies carry it */
} shape_pending_t;

typedef struct rf_app {
    int tensor;
    int sender;          /* trainer world rank in p2p, -1 in broadcast */
    int layer;
    int slot;            /* model-layout slot within the layer */
    int shard;
    int expert;          /* global expert id or -1 */
    int64_t local_expert;
    uint64_t rows;       /* rows the key expects (rf_tensor_rows) */
    uint64_t cursor;     /* next expected row (relative to row0) */
    int64_t row0;        /* p2p: first tensor row of the sender's rectangle (broadcast: 0) */
    int64_t col0, col1;  /* p2p: the rectangle's columns (broadcast: the full width) */
    bool declined;
    rf_dtype_t src_dtype; /* dtype the source sends (the manifest's; FP8 scales may be bf16) */
    int64_t shape_nk[2];  /* wna16 weight_shape: the [N, K] it must carry */
    /* device sources (RF_PIECE_DEVICE): the loader's row copy of the last piece, reused
     * while the piece's rows, the destination and the plan epoch are unchanged (every update
     * of a job brings the same pieces: the loader arithmetic runs once per piece per job) */
    uint32_t tmpl_epoch;  /* p->epoch when made; 0: none */
    bool tmpl_any;        /* the loader wrote rows (false: none of the piece is this rank's) */
    uint64_t tmpl_rb, tmpl_re;
    const void *tmpl_dst; /* L->dst[slot].data it was made against */
    ptrdiff_t tmpl_src_off;
    rf_accel_rows_t tmpl; /* src = piece src + tmpl_src_off */
} rf_app_t;

typedef struct rf_layer {
    int module;
    rf_plan_mode_t mode;
    int nmodel;
    rf_slot_shape_t model[RF_MODULE_MAX_SLOTS];
    rf_dst_t dst[RF_MODULE_MAX_SLOTS];    /* where loaders write (runtime, view or scratch) */
    rf_view_t views[RF_MODULE_MAX_SLOTS]; /* RUNTIME_VIEW: the validated views */
    void *scratch[RF_MODULE_MAX_SLOTS];   /* LAYERWISE model-layout staging (owned) */
    int nrt;
    bool has_derived;
    int app_first, napps;
    int pending;                          /* applications still expected this update */
    bool complete;
    const char *why;                      /* why not DIRECT (for logs) */
} rf_layer_t;

typedef struct rf_plan {
    const rf_inventory_t *inv;  /* borrowed */
    rf_rollout_coords_t rc;
    rf_storage_t *st;           /* borrowed */
    rf_format_t *fmt;           /* borrowed */
    rf_reload_policy_t policy;
    rf_layer_t *layers;         /* one per inventory module */
    int nlayers;
    rf_app_t *apps;
    int napps;
    void *app_index;            /* key -> app */
    int32_t *app_of_tensor;     /* [ntensors]: the broadcast (sender -1) app, or -1 */
    int32_t *tensor_apps;       /* [ntensors]: the tensor's first app (its apps are
                                 * contiguous, one per sender), or -1 */
    uint32_t epoch;             /* bumped at every (re)build of the layers: invalidates tmpl */
    rf_signature_t *sigs;       /* recorded signatures, per storage slot */
    int nsigs;
    bool in_update;
    uint32_t update;
    uint64_t probes_base;
    uint64_t direct_probes;     /* this update: lookups through app_of_tensor */
    rf_plan_stats_t stats;
    /* every write goes through an accelerator: the storage's device accelerator, or host_ax
     * (the host ops: memcpy runs) for host storage */
    rf_accel_t host_ax;
    bool dev; /* storage is device memory */
    /* device: chunk payload staging (double-buffered; rf_plan_stage) */
    void *stage_buf[2];
    size_t stage_cap[2];
    rf_accel_event_t *stage_ev[2];
    bool stage_used[2]; /* an event was recorded after the buffer's readers */
    int stage_cur;
    const char *stage_host; /* host payload staged into stage_buf[stage_cur] */
    size_t stage_bytes;
    uint64_t stage_h2d, stage_h2d_bytes; /* h2d copies / bytes this update */
    /* device sources (RF_PIECE_DEVICE): row copies collected and launched together by
     * rf_plan_flush (copy_rows_batch) */
    rf_accel_rows_t *batch;
    size_t nbatch, batch_cap;
    uint64_t batch_launches, batch_rows; /* this update: launches, row copies in them */
    /* device-resident wna16 weight_shape: 16 bytes each stored by the batch kernel straight
     * into pinned host memory (one thread each: copy_rows_batch's tiny copies), checked by
     * rf_plan_check once their chunk's copies completed (FIFO). A device buffer plus one d2h
     * per launch measured slower on the H200 (7.55-9.0 ms against 7.36 ms per update). */
    unsigned char *shape_host;
    struct shape_pending *shape_q;
    size_t shape_head, shape_n, shape_cap;
    /* device LAYERWISE scratch pool (kept for the plan's life; see plan_apply.c scratch_get) */
    rf_scratch_buf_t *pool;
    size_t npool, pool_cap;
    rf_plan_timeline_t tl;
    /* device sources: LAYERWISE layers completed while their row copies wait in the batch;
     * processed right after rf_plan_flush launches it (one launch per chunk, not per layer) */
    int *lw_q;
    size_t nlw;
} rf_plan_t;

/*
 * Allocates this rank's runtime storage: per module, the format owner's runtime slots in one
 * arena. noreserve: reserve only (refit-plan). Not collective.
 */
rf_status_t rf_plan_alloc_storage(const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                                  const rf_format_t *fmt, rf_storage_t *st, bool noreserve,
                                  rf_err_t *err);

/* Builds the plan against the registered storage. Does not touch slot memory. Device storage
 * (st->accel a device accelerator) needs fmt->accel == st->accel and an owner that is not
 * host_only. REFIT_DEVICE_TIMELINE other than unset, empty, 0 or 1: RF_ERR_INVALID naming it
 * (rf_env_flag), on every rank. */
rf_status_t rf_plan_build(rf_plan_t *p, const rf_inventory_t *inv, const rf_rollout_coords_t *rc,
                          rf_storage_t *st, rf_format_t *fmt, rf_reload_policy_t policy,
                          rf_err_t *err);
void rf_plan_free(rf_plan_t *p);
/*
 * p2p: what rank `sender` sends this rank of `tensor`: rows [r0, r1) x columns [c0, c1).
 * Fills up to `max` entries and returns the count (0: nothing arrives for the tensor).
 */
typedef int (*rf_plan_senders_fn)(void *ctx, int tensor, int *senders, int64_t (*rects)[4],
                                  int max);
/* rf_plan_build with sender-keyed applications (p2p): one per (tensor, sender) that `senders`
 * lists, expecting exactly that rectangle's rows. Tensors nobody sends are not expected. */
rf_status_t rf_plan_build_p2p(rf_plan_t *p, const rf_inventory_t *inv,
                              const rf_rollout_coords_t *rc, rf_storage_t *st, rf_format_t *fmt,
                              rf_reload_policy_t policy, rf_plan_senders_fn senders, void *ctx,
                              rf_err_t *err);


/* Sets the dtype the source sends for `tensor` (from the agreed manifest). Errors when the
 * format does not allow it (only FP8 block scales may arrive as bf16 / f16 for fp32 slots, and
 * wna16 weight_shape as int32 or int64). */
rf_status_t rf_plan_set_source_dtype(rf_plan_t *p, int tensor, rf_dtype_t dtype, rf_err_t *err);

/* Starts update `update`: rebuilds the plan if a signature changed (one log line; the slot in
 * stats.moved_slot), resets cursors and per-update counters. */
rf_status_t rf_plan_begin(rf_plan_t *p, uint32_t update, rf_err_t *err);

/* Where a piece's source bytes live, seen from the plan's storage. */
typedef enum {
    RF_PIECE_HOST = 0,  /* host memory (a received chunk payload, a shared-memory segment) */
    RF_PIECE_DEVICE = 1 /* device memory of the storage's device, or mapped into it (a CUDA IPC
                         * arena of the colocated pair, a staging slot, nccl's chunk buffer) */
} rf_piece_mem_t;

/* One arriving piece, as the receiving side knows it (the sink's one input). */
typedef struct rf_piece_src {
    int tensor;                  /* inventory tensor */
    int sender;                  /* -1: broadcast; else the p2p sender's world rank */
    uint64_t row_begin, row_end; /* tensor rows [row_begin, row_end) */
    int64_t col_begin, col_end;  /* column window (a p2p rectangle's columns, which must equal
                                  * the application's); col_end 0: full-width rows */
    int64_t src_pitch;           /* window only: elements between src rows */
    const void *src;             /* the rows in checkpoint layout, in the source dtype */
    rf_piece_mem_t mem;          /* where src lives */
    uint32_t chunk;              /* names the chunk in errors */
} rf_piece_src_t;

/*
 * Applies one arriving piece: the one entry of the rollout side. Not collective; the per-piece
 * path is one O(1) lookup of the (tensor, sender) application, a cursor check and a loader
 * call, with no log line.
 *
 * Rows: full-width rows (col_end 0) run the application's cursor over the tensor's rows; a
 * column window (p2p) runs it over the rectangle's rows (row_begin, row_end still count tensor
 * rows) and reads src with src_pitch elements between rows.
 *
 * Memory: RF_PIECE_HOST works on any storage; its row copy is issued at once (device storage:
 * from the device copy of the chunk payload rf_plan_stage staged when src lies inside it, else
 * of the piece staged alone, enqueued on the storage accelerator's stream) and a weight_shape
 * is checked at once. RF_PIECE_DEVICE needs device storage and goes device to device with no
 * staging, but deferred: the bookkeeping (cursors, layer completion) happens at once, the row
 * copy and a weight_shape's check are only collected. The caller then calls rf_plan_flush at
 * the end of each chunk (one copy_rows_batch for the collected copies, then the LAYERWISE
 * layers they completed), synchronizes the stream (rf_accel_sync, or an event) before src may
 * change (the ipc ACK, the next nccl receive) and calls rf_plan_check for that chunk.
 *
 * Errors (the message names the chunk, and the tensor where known): RF_ERR_STATE (outside an
 * update), RF_ERR_EXTRA (unknown (tensor, sender), or the layer already completed),
 * RF_ERR_MISMATCH (a window other than the application's; a weight_shape not arriving as rows
 * [0, 2) or not carrying the model's [N, K]), RF_ERR_SEQUENCE (repeated rows, a gap, rows
 * before the rectangle or past the tensor's end, an empty range), RF_ERR_UNSUPPORTED
 * (RF_PIECE_DEVICE on host storage), RF_ERR_INVALID (an unknown mem), or the write's status.
 */
rf_status_t rf_plan_apply(rf_plan_t *p, const rf_piece_src_t *src, rf_err_t *err);

/*
 * Device storage: copies one received chunk payload (host memory, `bytes` bytes) to the device
 * once, into the next of two device staging buffers (an event per buffer guards its reuse);
 * RF_PIECE_HOST pieces whose src lies inside that payload then copy device to device from the
 * staged bytes. A src outside the staged payload is staged piece by piece. No-op on host
 * storage. Not collective.
 */
rf_status_t rf_plan_stage(rf_plan_t *p, const void *payload, size_t bytes, rf_err_t *err);

/* Checks what rf_plan_apply deferred for chunk `chunk` (RF_PIECE_DEVICE wna16 weight_shape
 * values), after the caller saw that chunk's copies complete. RF_ERR_MISMATCH naming the
 * tensor. */
rf_status_t rf_plan_check(rf_plan_t *p, uint32_t chunk, rf_err_t *err);

/* Launches the row copies rf_plan_apply collected (RF_PIECE_DEVICE; one copy_rows_batch on the
 * storage accelerator's stream), then the LAYERWISE processing of the layers those copies
 * completed (behind them on the stream); enqueued, not waited for. No-op when none are
 * pending. Errors: the launch's, or process_after_loading's naming the layer. */
rf_status_t rf_plan_flush(rf_plan_t *p, rf_err_t *err);

/* Finalize: missing applications (RF_ERR_MISSING), the deferred stage, signature
 * re-verification (RF_ERR_MOVED naming the slot). */
rf_status_t rf_plan_finalize(rf_plan_t *p, rf_err_t *err);

/* Abandons an update (frees scratch); the rank stays PAUSED. */
void rf_plan_abort(rf_plan_t *p);

/* Copies a layer's runtime slots back into model layout (verification). bufs[i] must hold
 * rf_slot_shape_bytes(&layer->model[i]) bytes of HOST memory (device slots are copied to the
 * host first). */
rf_status_t rf_plan_read_model(rf_plan_t *p, int layer, void *const *bufs, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_PLAN_H */
