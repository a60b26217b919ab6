/*
 * refit: the end-to-end job (DESIGN.md section 2), as driven by refit-run and refit-soak:
 * rf_job_run, the update loop and teardown.
 *
 * rf_job_run sets the job up (job_setup.c), then runs every update on every rank: begin
 * agreement (source check, GO or FAILED), shard production, transfer (stage senders pack and
 * gather, rollout ranks apply every piece through their plans: the callbacks below), finalize,
 * completion gate, drain on FAILED; then the oracle (job_oracle.c), the update's table and
 * profile line (job_report.c), and at the end the job's verdict, rank 0's last line
 * "refit: COMMITTED ..." or "refit: FAILED: ...". The fault hooks are in job_faults.c, job_t in
 * job_int.h. Nothing here writes to stdout: lines go through rf_job_opts_t.print.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/log.h"
#include "refit/transport_nccl.h"
#include "job_int.h"

/* ---- one update ----------------------------------------------------------------------- */

/* The training step of a resident nccl trainer: its shards for update v on its GPU. */
static rf_status_t produce_nccl_resident(job_t *j, uint32_t v, rf_err_t *err)
{
    double t0 = rf_time_now();
    rf_status_t st =
        rf_trainer_produce_device(&j->tr, v, j->accel, j->nccl_wdev, j->nccl_wdev, err);
    j->js.resident_s = rf_time_now() - t0;
    return st;
}

/* The tests' fault hooks before a chunk is packed (the source's `before`, set only when a
 * fault is armed): exit or stall at the fault's chunk. */
static rf_status_t job_before_pack(void *ctx, const rf_chunk_t *chunk, rf_err_t *err)
{
    job_t *j = ctx;
    (void)err;
    if ((int64_t)chunk->seq == j->fault.seq)
        job_fault_exit_stall(j, j->update, j->deadline,
                             j->p2p ? "p2p sender, packing" : "stage sender, packing");
    return RF_OK;
}

/* The cold check's copy of one chunk (job_cold_keep): the whole payload when it sits in one
 * buffer, else the backed rows of every segment at their payload offsets (the loaders read no
 * other rows, so the replay lands the same bytes); device memory comes back d2h. */
static rf_status_t cold_copy(job_t *j, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                             size_t nsegs, const void *payload, bool dev, rf_err_t *err)
{
    char *copy = calloc(1, chunk->payload_bytes + 1);
    if (copy == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    rf_status_t cs = RF_OK;
    /* the items of the chunk plan in use: p2p chunks index this rank's own plan's items */
    const rf_chunk_item_t *items = j->p2p ? rf_p2p_schedule_find(&j->p2p_s, j->rank)->items
                                          : j->items;
    for (size_t k = 0; k < (payload != NULL ? 1 : nsegs) && cs == RF_OK; k++) {
        const rf_xfer_segment_t *sg = &segs[k];
        uint64_t rb = payload != NULL ? 0 : items[sg->piece->item].row_bytes;
        char *dst = payload != NULL ? copy
                                    : copy + sg->piece->offset +
                                          (sg->row_begin - sg->piece->row_begin) * rb;
        const void *src = payload != NULL ? payload : sg->src;
        size_t bytes = payload != NULL ? (size_t)chunk->payload_bytes
                                       : (size_t)((sg->row_end - sg->row_begin) * rb);
        if (payload == NULL && !sg->backed)
            continue;
        if (dev)
            cs = j->accel->ops->copy(j->accel, dst, src, bytes, RF_COPY_D2H, NULL);
        else if (bytes > 0)
            memcpy(dst, src, bytes);
    }
    if (cs == RF_OK && dev)
        cs = rf_accel_sync(j->accel);
    if (cs != RF_OK) {
        free(copy);
        return rf_err_set(err, cs, "rank %d: chunk %u: copying the payload d2h for the cold "
                          "check failed", j->rank, chunk->seq);
    }
    return job_cold_keep(j, chunk, copy, err);
}

/* After each applied chunk (the sink's `after`, set only with --cold-check or an armed
 * fault): the cold check's copy, the rollout's fault hooks. */
static rf_status_t job_after_chunk(void *ctx, const rf_chunk_t *chunk,
                                   const rf_xfer_segment_t *segs, size_t nsegs,
                                   const void *payload, bool dev, rf_err_t *err)
{
    job_t *j = ctx;
    if (j->o->cold_check)
        RF_CHECK(cold_copy(j, chunk, segs, nsegs, payload, dev, err));
    return job_fault_after_chunk(j, chunk, err);
}

/* What the trainer's source offers for one manifest entry (its view of the source). */
typedef struct src_view {
    bool present;
    rf_dtype_t dtype;
    int ndim;
    int64_t shape[RF_MAX_DIMS];
} src_view_t;

/* Source check against the manifest (DESIGN.md section 9): names, dtypes, shapes, and no
 * tensor the manifest lacks. The view is the checkpoint's headers, or for generator weights
 * the inventory's tensors (the generator produces exactly those); a source fault (tests)
 * alters the view on one trainer rank, so the check fails there before any chunk is posted. */
static rf_status_t check_source(job_t *j, bool from_ckpt, uint32_t v, rf_err_t *err)
{
    const char *extra = NULL;
    /* the real check, bf16 sources of quantized tensors included */
    RF_CHECK(rf_trainer_check_source(&j->tr, from_ckpt ? j->ck : NULL, err));
    int victim = -1;
    for (int i = 0; i < j->man.n && victim < 0; i++)
        if (j->tr.has[i])
            victim = i;
    for (int i = 0; i < j->man.n; i++) {
        const rf_manifest_entry_t *e = &j->man.entries[i];
        src_view_t sv = {.present = true, .dtype = e->dtype, .ndim = e->ndim};
        if (!j->tr.has[i])
            continue;
        memcpy(sv.shape, e->shape, sizeof(sv.shape));
        if (from_ckpt && !rf_manifest_trainer_quantizes(&j->inv, &j->inv.tensors[e->tensor], j->ck)) {
            const rf_st_entry_t *se = rf_ckpt_find(j->ck, e->name);
            sv.present = se != NULL;
            if (se != NULL) {
                /* a bf16 / f16 fp8 scale is widened to the manifest's fp32 on reading */
                sv.dtype = rf_manifest_scale_widens(&j->inv.tensors[e->tensor], se->dtype)
                               ? e->dtype
                               : se->dtype;
                /* an fp8-tensor scale stored as a 0-d scalar stands for its [1] */
                if (!rf_manifest_shape_matches(&j->inv.tensors[e->tensor], se->ndim, se->shape) ||
                    se->ndim != 0) {
                    sv.ndim = se->ndim;
                    for (int d = 0; d < se->ndim && d < RF_MAX_DIMS; d++)
                        sv.shape[d] = (int64_t)se->shape[d];
                }
            }
        }
        if (i == victim && job_fault_here(j, v, RF_FAULT_MISSING_TENSOR))
            sv.present = false;
        if (i == victim && job_fault_here(j, v, RF_FAULT_WRONG_DTYPE))
            sv.dtype = sv.dtype == RF_DTYPE_F32 ? RF_DTYPE_BF16 : RF_DTYPE_F32;
        if (i == victim && job_fault_here(j, v, RF_FAULT_WRONG_SHAPE))
            sv.shape[0] += 1;
        if (!sv.present)
            return rf_err_set(err, RF_ERR_MISSING, "trainer rank %d: source lacks tensor %s",
                              j->rank, e->name);
        if (sv.dtype != e->dtype)
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "trainer rank %d: source tensor %s has dtype %s, the manifest %s",
                              j->rank, e->name, rf_dtype_name(sv.dtype), rf_dtype_name(e->dtype));
        bool same = sv.ndim == e->ndim;
        for (int d = 0; same && d < e->ndim; d++)
            same = sv.shape[d] == e->shape[d];
        if (!same)
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "trainer rank %d: source tensor %s has shape [%" PRId64
                              "%s], the manifest [%" PRId64 "%s]",
                              j->rank, e->name, sv.shape[0], sv.ndim > 1 ? ", ..." : "",
                              e->shape[0], e->ndim > 1 ? ", ..." : "");
    }
    if (job_fault_here(j, v, RF_FAULT_EXTRA_TENSOR))
        extra = "model.layers.0.self_attn.injected_extra.weight";
    if (extra != NULL) {
        bool known = false;
        for (int i = 0; i < j->man.n && !known; i++)
            known = strcmp(j->man.entries[i].name, extra) == 0;
        if (!known)
            return rf_err_set(err, RF_ERR_EXTRA,
                              "trainer rank %d: source has tensor %s, which the manifest lacks",
                              j->rank, extra);
    }
    return RF_OK;
}

/* Trainer of a colocated pair: writes update v into its weights arena, writable only
 * meanwhile. A device arena (CUDA IPC): the generator and quantizers on the device; a
 * checkpoint update is read into the pinned mirror and copied h2d. A host arena (POSIX shared
 * memory): produced in place. */
static rf_status_t produce_arena(job_t *j, uint32_t v, bool from_ckpt, rf_err_t *err)
{
    double t0 = rf_time_now();
    rf_status_t st = rf_xfer_sources(j->xfer, v, RF_XFER_SOURCES_WRITABLE, err);
    if (st == RF_OK && !j->ipc_dev) { /* host arenas: POSIX shared memory, written in place */
        st = rf_trainer_produce(&j->tr, v, from_ckpt ? j->ck : NULL, err);
    } else if (st == RF_OK && !from_ckpt) {
        st = rf_trainer_produce_device(&j->tr, v, j->accel, j->ipc_wdev,
                                       j->ipc_mirror ? j->ipc_mirror : j->ipc_wdev, err);
        if (st == RF_OK && j->ipc_mirror != NULL) {
            /* the host gathers and packs staged pieces from the mirror: same bytes there */
            st = j->accel->ops->copy(j->accel, j->ipc_mirror, j->ipc_wdev, (size_t)j->ipc_wbytes,
                                     RF_COPY_D2H, NULL);
            if (st == RF_OK)
                st = rf_accel_sync(j->accel);
            if (st != RF_OK)
                rf_err_set(err, st, "trainer rank %d: copying its ipc arena back into its "
                           "%" PRIu64 "-byte host mirror failed", j->rank, j->ipc_wbytes);
        }
    } else if (st == RF_OK) {
        st = rf_trainer_produce(&j->tr, v, j->ck, err);
        double th = rf_time_now();
        if (st == RF_OK)
            st = j->accel->ops->copy(j->accel, j->ipc_wdev, j->ipc_mirror, (size_t)j->ipc_wbytes,
                                     RF_COPY_H2D, NULL);
        if (st == RF_OK)
            st = rf_accel_sync(j->accel);
        if (st != RF_OK && err->status == RF_OK)
            rf_err_set(err, st, "trainer rank %d: copying its %" PRIu64 "-byte shard mirror "
                       "into its ipc arena failed", j->rank, j->ipc_wbytes);
        j->js.ipc_h2d_s = rf_time_now() - th;
        j->js.ipc_h2d_bytes = j->ipc_wbytes;
    }
    if (st == RF_OK)
        st = job_fault_bad_weight_shape(j, v, err);
    if (st == RF_OK)
        st = rf_xfer_sources(j->xfer, v, RF_XFER_SOURCES_FINAL, err);
    j->js.resident_s = rf_time_now() - t0;
    return st;
}

/* Colocated pairs (ipc, device or host arenas): the update begins on every rank once every
 * trainer has written its weights (the end of the training step), so no rank's update time
 * or deadline counts the production. Bounded by timeout_s: a rank that never arrives (it
 * died) returns RF_ERR_PEER rather than hanging, with the barrier left pending; the job then
 * cannot end collectively and rf_job_run returns RF_JOB_PEER_LOST (refit-run aborts the job). */
static rf_status_t update_fence(job_t *j, uint32_t v)
{
    MPI_Request req;
    int done = 0;
    double limit = rf_time_now() + (j->topo.timeout_s > 0 ? j->topo.timeout_s : 300.0);
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done && rf_time_now() > limit) {
            rf_error("rank %d: update %u: not every rank reached the start of the update within "
                     "%.0f s (transfer.timeout_s): aborting the job", j->rank, v,
                     j->topo.timeout_s);
            return RF_ERR_PEER;
        }
        if (!done)
            sched_yield();
    }
    return RF_OK;
}

/* Update v on every rank (collective). Returns 0 when it committed and verified, 1 with the
 * reason in fail (rank 0) when not, RF_JOB_PEER_LOST when a peer never reached its start. */
static int run_update(job_t *j, uint32_t v, uint64_t *verified_p, char *fail, size_t cap)
{
    rf_err_t err, e2;
    rf_status_t st = RF_OK;
    rf_gate_record_t rec;
    rf_gate_verdict_t verdict;
    bool from_ckpt = j->ck != NULL && (v % 2 == 1);
    double t_start = rf_time_now(), t;
    rf_err_clear(&err);
    rf_err_clear(&e2);
    memset(&j->js, 0, sizeof(j->js));
    memset(&verdict, 0, sizeof(verdict));
    j->js.role = (int)j->me.role;
    j->source = from_ckpt ? "checkpoint" : "generator";

    bool fault_update = j->fault.kind != RF_FAULT_NONE && (uint32_t)j->fault.update == v;
    uint64_t hash_before = 0;
    j->js.storage_unchanged = -1;
    j->update = v;
    job_fault_before_update(j, v);
    if (job_is_rollout(j) && fault_update)
        hash_before = job_storage_hash(j); /* outside the timed path, like the snapshot */
    /* colocated GPU pair: the training step writes the trainer's resident weights before the
     * update begins; a failure is reported at the begin agreement */
    rf_status_t pre = RF_OK;
    rf_err_t pre_err;
    rf_err_clear(&pre_err);
    if (!job_is_rollout(j) && j->ipc)
        pre = produce_arena(j, v, from_ckpt, &pre_err);
    if (j->nccl_resident)
        pre = produce_nccl_resident(j, v, &pre_err);
    /* the diff rule compares with the previous update only when it committed: after a FAILED
     * one the storage holds whatever the failure left, and the source may repeat */
    bool verify_this =
        !j->o->verify_none && (!j->o->verify_last || v == (uint32_t)j->o->steps);
    bool diff = v > 1 && j->last_committed == v - 1 && verify_this;
    if (job_is_rollout(j) && diff)
        job_snapshot(j); /* the oracle's copy for the diff rule, outside the timed path */
    /* every rank starts the update when the training step ended */
    if ((j->ipc || j->fence) && update_fence(j, v) != RF_OK)
        return RF_JOB_PEER_LOST;
    double t_begin = rf_time_now(); /* update begin, for the time to the verdict */
    rf_ctl_begin(j->ctl, v, &e2);
    double deadline = rf_deadline_for_update(j->topo.timeout_s, j->topo.slack_s,
                                             j->man.payload_bytes, j->topo.min_bandwidth);
    j->deadline = deadline;
    /* the transport's begin (nccl: (re)create the communicators when missing, the first update
     * or after a FAILED one) under this update's deadline and ABORT; a failure fails the begin
     * agreement */
    rf_status_t nst;
    rf_err_t nerr;
    rf_err_clear(&nerr);
    nst = rf_xfer_begin(j->xfer, v, deadline, &nerr);
    if (!job_is_rollout(j))
        rf_trainer_begin(&j->tr);
    t = rf_time_now();
    if (job_is_rollout(j)) {
        uint64_t rebuilds = j->plan.stats.rebuilds;
        const char *moved = NULL;
        for (int i = 0; i < j->plan.nsigs && i < j->st.nslots && moved == NULL; i++)
            if (!rf_signature_equal(&j->plan.sigs[i], &j->st.slots[i].sig))
                moved = j->st.slots[i].name;
        j->paused = true; /* not served until the gate says COMMITTED */
        st = rf_plan_begin(&j->plan, v, &err);
        j->js.rebuilds = j->plan.stats.rebuilds - rebuilds;
        if (j->js.rebuilds) {
            job_print(j->o, RF_JOB_OUT, "refit: rank %d: plan rebuilt before update %u (%s%s)\n",
                      j->rank, v, moved ? moved : "format owner changed its mapping",
                      moved ? " changed its signature" : "");
        }
    } else {
        st = check_source(j, from_ckpt, v, &err);
        if (st == RF_OK && pre != RF_OK) {
            st = pre;
            rf_err_set(&err, pre, "%s", pre_err.msg);
        }
    }
    if (st == RF_OK && nst != RF_OK)
        st = rf_err_set(&err, nst, "%s", nerr.msg);
    rf_err_clear(&e2);
    rf_status_t ag = rf_ctl_agree(j->ctl, v, st, err.msg, deadline, &e2);
    if (st == RF_OK && ag != RF_OK) {
        st = ag;
        rf_err_set(&err, ag, "%s", e2.msg);
    }
    j->js.begin_s = rf_time_now() - t;

    if (st == RF_OK && !job_is_rollout(j)) {
        /* ipc: the weights arena was written before the update began (produce_arena) and is
         * read-only until the verdict */
        if (!j->ipc && !j->nccl_resident)
            st = rf_trainer_produce(&j->tr, v, from_ckpt ? j->ck : NULL, &err);
        if (st == RF_OK && !j->ipc)
            st = job_fault_bad_weight_shape(j, v, &err);
        if (st == RF_OK)
            st = rf_xfer_sources(j->xfer, v, RF_XFER_SOURCES_READY, &err);
        if (st != RF_OK)
            rf_ctl_abort(j->ctl, st, err.msg);
    }
    if (st == RF_OK) {
        rf_xfer_config_t cfg = {.update = v,
                                .plan = j->cplan,
                                .stage_senders = j->senders,
                                .receivers = j->receivers,
                                .n_receivers = j->R,
                                .deadline = deadline,
                                .fault = RF_XFER_FAULT_NONE,
                                .integrity = j->integrity,
                                .items = j->items,
                                .pack_device = j->nccl_resident,
                                .complete = rf_sink_complete};
        if (job_fault_here(j, v, RF_FAULT_DROP_CHUNK))
            cfg.fault.drop_seq = j->fault.seq;
        if (job_fault_here(j, v, RF_FAULT_DUPLICATE_CHUNK))
            cfg.fault.dup_seq = j->fault.seq;
        if (job_fault_here(j, v, RF_FAULT_CORRUPT_CHUNK))
            cfg.fault.corrupt_seq = j->fault.seq;
        if (!job_is_rollout(j))
            j->tr.fault_skip_seq = job_fault_here(j, v, RF_FAULT_GATHER_DROP) ? j->fault.seq : -1;
        /* the rollout's sink and the trainer's source take each chunk straight from the
         * transport; the job's hooks only where a test asks for them */
        bool hooks = j->fault.kind != RF_FAULT_NONE;
        rf_sink_t sink = {.plan = &j->plan,
                          .item_tensor = j->item_tensor,
                          .after = hooks || j->o->cold_check ? job_after_chunk : NULL,
                          .after_ctx = j};
        j->src.tr = &j->tr;
        j->src.update = v;
        j->src.deadline = deadline;
        j->src.rects = NULL;
        j->src.before = hooks ? job_before_pack : NULL;
        j->src.before_ctx = j;
        t = rf_time_now();
        if (j->p2p) {
            /* p2p: this rank's own plan (rollout) or one plan per receiver (trainer) */
            if (job_is_rollout(j)) {
                const rf_p2p_recv_t *me = rf_p2p_schedule_find(&j->p2p_s, j->rank);
                cfg.stage_senders = me->senders;
                cfg.plan = me->plan;
                cfg.items = me->items;
                cfg.receivers = &me->rank;
                cfg.n_receivers = 1;
                sink.rects = me->rects;
                cfg.any_order = 1; /* whichever sender is ready (docs/simulate.md) */
            }
        }
        if (job_is_rollout(j)) {
            st = rf_xfer_recv(j->xfer, &cfg, rf_sink_receive, &sink, &err);
            j->js.receive_s = rf_time_now() - t;
            if (st == RF_OK) {
                t = rf_time_now();
                st = rf_plan_finalize(&j->plan, &err);
                j->js.finalize_s = rf_time_now() - t;
                if (st != RF_OK)
                    rf_ctl_abort(j->ctl, st, err.msg);
            }
        } else if (j->p2p) {
            /* receivers in world-rank order on every sender, senders in order on every
             * receiver (the plan's stages): no cycle of waits. Where receivers take any ready
             * sender (mpi), each sender starts at its own first receiver instead (the first of
             * its part of the schedule at or after it; docs/simulate.md) */
            job_fault_delay_send(j, v, deadline);
            size_t nr = j->p2p_s.nrecv, q0 = 0;
            if (rf_xfer_caps(j->xfer) & RF_XFER_CAP_ANY_ORDER) {
                int r0 = j->T + rf_xfer_p2p_first_receiver(j->rank, j->T, j->R);
                while (q0 < nr && j->p2p_s.recv[q0].rank < r0)
                    q0++;
                if (q0 == nr)
                    q0 = 0;
            }
            for (size_t q = 0; q < nr && st == RF_OK; q++) {
                const size_t r = (q0 + q) % nr;
                const rf_p2p_recv_t *rv = &j->p2p_s.recv[r];
                int k = rf_p2p_recv_stage(rv, j->rank);
                if (k < 0 || rv->plan->stages[k].chunk_count == 0)
                    continue;
                cfg.stage_senders = rv->senders;
                cfg.plan = rv->plan;
                cfg.items = rv->items;
                cfg.receivers = &rv->rank;
                cfg.n_receivers = 1;
                j->src.rects = rv->rects;
                st = rf_xfer_send(j->xfer, &cfg, rf_trainer_source_pack, &j->src, &err);
            }
        } else if (j->tr.sender) {
            /* chunks read in place are never packed, so the pack hooks may not fire */
            if (rf_xfer_caps(j->xfer) & RF_XFER_CAP_IN_PLACE)
                job_fault_exit_stall(j, v, deadline, "stage sender, before its first chunk");
            st = rf_xfer_send(j->xfer, &cfg, rf_trainer_source_pack, &j->src, &err);
        } else {
            job_fault_exit_stall(j, v, deadline,
                                 "trainer, before contributing to the stage gather");
            st = rf_trainer_contribute(&j->tr, v, j->topo.buffers, deadline, &err);
            if (st != RF_OK && st != RF_ERR_PEER)
                rf_ctl_abort(j->ctl, st, err.msg);
        }
        j->js.send_s = rf_time_now() - t;
    }

    /* completion gate */
    const rf_xfer_stats_t *xs = rf_xfer_stats(j->xfer);
    memset(&rec, 0, sizeof(rec));
    rf_gate_record_set_result(&rec, j->ctl, st, &err);
    rec.nranks = j->size;
    rec.peers = xs->peers;
    if (job_is_rollout(j)) {
        memcpy(rec.mode_layers, j->plan.stats.layers, sizeof(rec.mode_layers));
        memcpy(rec.plan_mode_layers, j->plan_layers, sizeof(rec.plan_mode_layers));
    }
    rec.manifest_digest = j->man.digest;
    t = rf_time_now();
    rf_err_clear(&e2);
    rf_gate_run(j->ctl, v, &rec, j->rank == 0 ? &j->expect : NULL, deadline, &verdict, &e2);
    j->js.gate_s = rf_time_now() - t;
    j->js.verdict_s = rf_time_now() - t_begin;
    if (!verdict.committed) {
        /* leave both communicators clean for the next update (bounded: after the verdict) */
        rf_err_t de;
        double drain_deadline = rf_time_now() + 30.0;
        rf_err_clear(&de);
        if (verdict.posted_from != NULL &&
            rf_xfer_drain(j->xfer, verdict.posted_from, drain_deadline, &de) != RF_OK)
            rf_warn("rank %d: update %u: %s", j->rank, v, de.msg);
        rf_err_clear(&de);
        if (!job_is_rollout(j) && rf_trainer_drain(&j->tr, v, drain_deadline, &de) != RF_OK)
            rf_warn("rank %d: update %u: %s", j->rank, v, de.msg);
        if (job_is_rollout(j) && j->plan.in_update)
            rf_plan_abort(&j->plan);
        /* the transport's failure step (nccl: ncclCommAbort on every rank; re-created at the
         * next update's begin) */
        rf_xfer_fail(j->xfer);
    } else if (job_is_rollout(j)) {
        j->paused = false; /* serve version v */
    }
    j->js.paused = job_is_rollout(j) && j->paused;
    if (verdict.committed)
        j->last_committed = v;
    if (job_is_rollout(j) && fault_update)
        j->js.storage_unchanged = job_storage_hash(j) == hash_before;
    if (job_is_rollout(j) && j->o->storage_digest)
        j->js.storage_digest = job_storage_hash(j);
    j->js.update_s = rf_time_now() - t_start;
    j->js.status = verdict.committed ? RF_OK : (int)(verdict.code ? verdict.code : RF_ERR_INTERNAL);

    /* counters */
    j->js.chunks_sent = xs->chunks_sent;
    j->js.chunks_recv = xs->chunks_received;
    for (int r = 0; r < j->size; r++) {
        j->js.bytes_sent += xs->peers[r].bytes_sent;
        j->js.bytes_recv += xs->peers[r].bytes_recv;
    }
    j->js.max_inflight = xs->max_inflight_chunks;
    j->js.ipc_in_place = xs->ipc_bytes_in_place;
    j->js.ipc_staged = xs->ipc_bytes_staged;
    j->js.wire_s = xs->wire_s;
    j->js.unpack_s = xs->unpack_s;
    if (job_is_rollout(j)) {
        const rf_plan_stats_t *ps = &j->plan.stats;
        memcpy(j->js.layers, ps->layers, sizeof(j->js.layers));
        j->js.applications = ps->applications;
        j->js.declined = ps->declined;
        j->js.loader_calls = ps->loader_calls;
        j->js.bookkeeping_probes = ps->bookkeeping_probes;
        j->js.loader_s = ps->loader_s;
        j->js.layerwise_s = ps->layerwise_s;
        j->js.deferred_s = ps->deferred_s;
        j->js.derived_runs = ps->derived_runs;
        j->js.stage_h2d = j->plan.stage_h2d;
        j->js.batch_launches = j->plan.batch_launches;
        j->js.batch_rows = j->plan.batch_rows;
        j->js.stage_h2d_bytes = j->plan.stage_h2d_bytes;
        j->js.dev = ps->dev;
    } else {
        j->js.bytes_produced = j->tr.stats.bytes_produced;
        j->js.produce_s = j->tr.stats.produce_s;
        j->js.bytes_read = j->tr.stats.bytes_read;
        j->js.header_bytes_read = j->tr.stats.header_bytes_read;
        j->js.bytes_gathered = j->tr.stats.bytes_gathered;
    }

    /* the oracle, after the gate: only a committed update is verified */
    j->js.verify_status = RF_OK;
    j->js.verify_skipped = verdict.committed && !verify_this;
    if (verdict.committed && job_is_rollout(j) && verify_this)
        job_verify_update(j, v, from_ckpt, diff);
    job_cold_free(j);
    /* rank 0 learns everything for the table */
    job_stats_t *all = j->rank == 0 ? calloc((size_t)j->size, sizeof(job_stats_t)) : NULL;
    MPI_Gather(&j->js, (int)sizeof(job_stats_t), MPI_BYTE, all, (int)sizeof(job_stats_t),
               MPI_BYTE, 0, j->stats_comm);
    uint8_t *vsum = j->rank == 0 ? calloc((size_t)j->inv.ntensors + 1, 1) : NULL;
    uint8_t *mine = calloc((size_t)j->inv.ntensors + 1, 1);
    if (job_is_rollout(j) && mine)
        memcpy(mine, j->verified, (size_t)j->inv.ntensors);
    MPI_Reduce(mine, vsum, j->inv.ntensors, MPI_UNSIGNED_CHAR, MPI_BOR, 0, j->stats_comm);
    free(mine);
    int rc = 0;
    if (j->rank == 0) {
        uint64_t verified = 0;
        for (int i = 0; i < j->inv.ntensors; i++)
            verified += vsum[i] != 0;
        *verified_p = verified;
        if (!j->o->quiet)
            job_print_table(j, v, all, &verdict, verified);
        if (j->hist_verdict_s != NULL) {
            double vs = 0;
            for (int r = 0; r < j->size; r++)
                vs = all[r].verdict_s > vs ? all[r].verdict_s : vs;
            j->hist_verdict_s[v - 1] = vs;
            j->hist_committed[v - 1] = verdict.committed;
        }
        if (j->o->storage_digest && verdict.committed)
            job_print_digest(j, v, all);
        if (!verdict.committed) {
            snprintf(fail, cap, "update %u: rank %d: %s", v, verdict.rank, verdict.reason);
            rc = 1;
        } else {
            for (int r = 0; r < j->size; r++)
                if (all[r].verify_status != RF_OK) {
                    snprintf(fail, cap, "update %u: verification: %s", v, all[r].verify_msg);
                    rc = 1;
                    break;
                }
        }
        j->ref_total = 0;
        if (rc == 0 && verdict.committed && !all[j->T].verify_skipped && j->ref != NULL &&
            from_ckpt)
            rc = job_ref_account(j, v, vsum, verified_p, fail, cap);
    }
    free(all);
    free(vsum);
    MPI_Bcast(&rc, 1, MPI_INT, 0, j->stats_comm);
    job_profile_write(j, v, rc);
    rf_gate_verdict_fini(&verdict);
    return rc;
}

static void teardown(job_t *j)
{
    job_profile_close(j);
    job_cold_free(j);
    free(j->cold);
    if (j->xfer && j->ipc_dev) {
        /* CUDA IPC: every importer closes its mappings before any exporter frees */
        rf_xfer_ipc_close_imports(j->xfer);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (j->xfer)
        rf_xfer_destroy(j->xfer);
    if (j->ctl)
        rf_ctl_destroy(j->ctl);
    if (j->tr_ready)
        rf_trainer_free(&j->tr);
    if (j->plan_ready)
        rf_plan_free(&j->plan);
    if (j->snap) {
        for (int s = 0; s < j->st.nslots; s++)
            free(j->snap[s]);
        free(j->snap);
    }
    free(j->verified);
    if (job_is_rollout(j))
        rf_storage_free(&j->st);
    if (j->ipc_mirror != NULL)
        j->accel->ops->free_host(j->accel, j->ipc_mirror);
    j->ipc_mirror = NULL;
    if (j->nccl_wdev != NULL)
        j->accel->ops->free(j->accel, j->nccl_wdev);
    j->nccl_wdev = NULL;
    rf_trainer_source_free(&j->src);
    rf_accel_close(j->accel); /* after the storage and plan that used it */
    j->accel = NULL;
    if (j->ref)
        rf_ref_free(j->ref);
    if (j->ck)
        rf_ckpt_close(j->ck);
    rf_chunk_plan_destroy(j->cplan);
    rf_p2p_schedule_free(&j->p2p_s);
    rf_nccl_layout_free(&j->nccl_layout);
    free(j->items);
    free(j->item_tensor);
    free(j->senders);
    free(j->receivers);
    free(j->pair_of);
    free(j->ipc_staged);
    free(j->ipc_piece_staged);
    free(j->ipc_pieces);
    rf_gate_expect_fini(&j->expect);
    rf_manifest_free(&j->man);
    rf_inventory_free(&j->inv);
    rf_model_config_free(&j->cfg);
    if (j->role_comm != MPI_COMM_NULL && j->role_comm != 0)
        MPI_Comm_free(&j->role_comm);
    if (j->engine_comm != MPI_COMM_NULL && j->engine_comm != 0)
        MPI_Comm_free(&j->engine_comm);
    if (j->stats_comm != MPI_COMM_NULL && j->stats_comm != 0)
        MPI_Comm_free(&j->stats_comm);
}

int rf_job_run(const rf_job_opts_t *opts)
{
    job_t j;
    rf_err_t err;
    char fail[RF_ERR_MSG_MAX + 64] = "";
    uint64_t verified = 0;
    int rc = 0, committed = 0;
    char failed_list[256] = "";
    memset(&j, 0, sizeof(j));
    j.role_comm = j.engine_comm = j.stats_comm = MPI_COMM_NULL;
    j.prof_fd = -1;
    j.o = opts;
    rf_err_clear(&err);
    MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &j.size);
    if (job_setup(&j, &err) != RF_OK) {
        if (j.rank == 0) {
            job_print(opts, RF_JOB_ERR, "refit-run: %s\n", err.msg);
            job_print(opts, RF_JOB_OUT, "refit: FAILED: %s\n", err.msg);
        }
        teardown(&j);
        return 1;
    }
    job_profile_open(&j);
    if (j.rank == 0 && !opts->quiet) {
        job_print(
            opts, RF_JOB_OUT,
            "refit: topology %s (hash %016" PRIx64 "), model %s %s, trainer %d rank(s) (tp %d "
            "pp %d dp %d%s) -> %d engine(s) x tp %d dp %d ep %d, %s, %s transport, %s\n",
            j.topo.name, rf_topology_hash(&j.topo), j.cfg.model_type, j.cfg.architecture, j.T,
            j.topo.t_tp, j.topo.t_pp, j.topo.t_dp,
            j.topo.t_layout == RF_TRAINER_LAYOUT_FSDP ? ", layout fsdp" : "", j.topo.r_engines,
            j.topo.r_tp, j.topo.r_dp,
            j.topo.r_ep, rf_quant_name(j.topo.quantization), rf_transport_name(j.topo.transport),
            opts->checkpoint ? opts->checkpoint : "generator weights");
    }
    if (j.rank == 0 && opts->bench_json) {
        j.hist_verdict_s = calloc((size_t)opts->steps, sizeof(double));
        j.hist_committed = calloc((size_t)opts->steps, sizeof(int));
    }
    for (int v = 1; v <= opts->steps; v++) {
        char f[sizeof(fail)] = "";
        int urc = run_update(&j, (uint32_t)v, &verified, f, sizeof(f));
        if (urc == RF_JOB_PEER_LOST) /* no collective can finish: not even teardown's */
            return RF_JOB_PEER_LOST;
        if (urc != 0) {
            if (rc == 0)
                snprintf(fail, sizeof(fail), "%s", f);
            size_t len = strlen(failed_list);
            if (len + 16 < sizeof(failed_list))
                snprintf(failed_list + len, sizeof(failed_list) - len, " %d", v);
            rc = 1;
        } else {
            committed++;
        }
        if (opts->after_update)
            opts->after_update(opts->after_update_ctx, v, urc == 0);
    }
    if (j.rank == 0) {
        if (rc == 0 && j.ref_total > 0 && j.ref_skipped > 0)
            job_print(opts, RF_JOB_OUT,
                      "refit: COMMITTED %d update(s), verified %" PRIu64 " of %" PRIu64
                      " tensors (%s)\n",
                      committed, verified, j.ref_total, j.ref_note);
        else if (rc == 0)
            job_print(opts, RF_JOB_OUT,
                      "refit: COMMITTED %d update(s), verified %" PRIu64 " tensors%s\n", committed,
                      verified, opts->verify_none ? " (--verify none: no oracle ran)" : "");
        else
            job_print(opts, RF_JOB_OUT,
                      "refit: %d of %d update(s) committed and verified (failed:%s)\n"
                      "refit: FAILED: %s\n",
                      committed, opts->steps, failed_list, fail);
    }
    job_bench_info_t bi = {"", "", rf_quant_name(j.topo.quantization),
                           rf_transport_name(j.topo.transport), j.man.payload_bytes, j.man.n,
                           j.cplan ? j.cplan->n_chunks : 0, j.topo.chunk_bytes, j.place.device,
                           j.ipc_dev};
    snprintf(bi.topology, sizeof(bi.topology), "%s", j.topo.name);
    snprintf(bi.model, sizeof(bi.model), "%s", j.cfg.model_type);
    teardown(&j);
    if (j.rank == 0 && opts->bench_json && j.hist_verdict_s && j.hist_committed &&
        job_bench_write(opts, &bi, j.hist_verdict_s, j.hist_committed) != 0)
        rc = rc ? rc : 1;
    free(j.hist_verdict_s);
    free(j.hist_committed);
    return rc;
}
