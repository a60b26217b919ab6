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
        rf_trainer_produce_device(&j->s->tr, v, j->s->accel, j->s->nccl_wdev, j->s->nccl_wdev, err);
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
        job_fault_exit_stall(j, j->update, j->s->deadline,
                             j->s->p2p ? "p2p sender, packing" : "stage sender, packing");
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
    const rf_chunk_item_t *items =
        j->s->p2p ? rf_p2p_schedule_find(&j->s->p2p_s, j->rank)->items : j->s->items;
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
            cs = j->s->accel->ops->copy(j->s->accel, dst, src, bytes, RF_COPY_D2H, NULL);
        else if (bytes > 0)
            memcpy(dst, src, bytes);
    }
    if (cs == RF_OK && dev)
        cs = rf_accel_sync(j->s->accel);
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
    RF_CHECK(rf_trainer_check_source(&j->s->tr, from_ckpt ? j->s->ck : NULL, err));
    /* generator weights with no source fault this update: the view is the manifest itself, so
     * the walk below cannot fail and is skipped (it ran inside the timed update, before the
     * begin agreement, over every manifest entry: 28k on the wna16 MoE bench shape) */
    const bool walk = from_ckpt || job_fault_here(j, v, RF_FAULT_MISSING_TENSOR) ||
                      job_fault_here(j, v, RF_FAULT_WRONG_DTYPE) ||
                      job_fault_here(j, v, RF_FAULT_WRONG_SHAPE);
    const int n = walk ? j->s->man.n : 0;
    int victim = -1;
    for (int i = 0; i < n && victim < 0; i++)
        if (j->s->tr.has[i])
            victim = i;
    for (int i = 0; i < n; i++) {
        const rf_manifest_entry_t *e = &j->s->man.entries[i];
        src_view_t sv = {.present = true, .dtype = e->dtype, .ndim = e->ndim};
        if (!j->s->tr.has[i])
            continue;
        memcpy(sv.shape, e->shape, sizeof(sv.shape));
        if (from_ckpt &&
            !rf_manifest_trainer_quantizes(&j->s->inv, &j->s->inv.tensors[e->tensor], j->s->ck)) {
            const rf_st_entry_t *se = rf_ckpt_find(j->s->ck, e->name);
            sv.present = se != NULL;
            if (se != NULL) {
                /* a bf16 / f16 fp8 scale is widened to the manifest's fp32 on reading */
                sv.dtype = rf_manifest_scale_widens(&j->s->inv.tensors[e->tensor], se->dtype)
                               ? e->dtype
                               : se->dtype;
                /* an fp8-tensor scale stored as a 0-d scalar stands for its [1] */
                if (!rf_manifest_shape_matches(&j->s->inv.tensors[e->tensor], se->ndim,
                                               se->shape) ||
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
        for (int i = 0; i < j->s->man.n && !known; i++)
            known = strcmp(j->s->man.entries[i].name, extra) == 0;
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
    rf_status_t st = rf_xfer_sources(j->s->xfer, v, RF_XFER_SOURCES_WRITABLE, err);
    if (st == RF_OK && !j->s->ipc_dev) { /* host arenas: POSIX shared memory, written in place */
        st = rf_trainer_produce(&j->s->tr, v, from_ckpt ? j->s->ck : NULL, err);
    } else if (st == RF_OK && !from_ckpt) {
        st = rf_trainer_produce_device(&j->s->tr, v, j->s->accel, j->s->ipc_wdev,
                                       j->s->ipc_mirror ? j->s->ipc_mirror : j->s->ipc_wdev, err);
        if (st == RF_OK && j->s->ipc_mirror != NULL) {
            /* the host gathers and packs staged pieces from the mirror: same bytes there */
            st = j->s->accel->ops->copy(j->s->accel, j->s->ipc_mirror, j->s->ipc_wdev,
                                        (size_t)j->s->ipc_wbytes, RF_COPY_D2H, NULL);
            if (st == RF_OK)
                st = rf_accel_sync(j->s->accel);
            if (st != RF_OK)
                rf_err_set(err, st, "trainer rank %d: copying its ipc arena back into its "
                           "%" PRIu64 "-byte host mirror failed", j->rank, j->s->ipc_wbytes);
        }
    } else if (st == RF_OK) {
        st = rf_trainer_produce(&j->s->tr, v, j->s->ck, err);
        double th = rf_time_now();
        if (st == RF_OK)
            st = j->s->accel->ops->copy(j->s->accel, j->s->ipc_wdev, j->s->ipc_mirror,
                                        (size_t)j->s->ipc_wbytes, RF_COPY_H2D, NULL);
        if (st == RF_OK)
            st = rf_accel_sync(j->s->accel);
        if (st != RF_OK && err->status == RF_OK)
            rf_err_set(err, st, "trainer rank %d: copying its %" PRIu64 "-byte shard mirror "
                       "into its ipc arena failed", j->rank, j->s->ipc_wbytes);
        j->js.ipc_h2d_s = rf_time_now() - th;
        j->js.ipc_h2d_bytes = j->s->ipc_wbytes;
    }
    if (st == RF_OK)
        st = job_fault_bad_weight_shape(j, v, err);
    if (st == RF_OK)
        st = rf_xfer_sources(j->s->xfer, v, RF_XFER_SOURCES_FINAL, err);
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
    double limit = rf_time_now() + (j->s->topo.timeout_s > 0 ? j->s->topo.timeout_s : 300.0);
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done && rf_time_now() > limit) {
            rf_error("rank %d: update %u: not every rank reached the start of the update within "
                     "%.0f s (transfer.timeout_s): aborting the job", j->rank, v,
                     j->s->topo.timeout_s);
            return RF_ERR_PEER;
        }
        if (!done)
            sched_yield();
    }
    return RF_OK;
}

/* The session's begin hook (local, before the begin agreement): the rollout's "plan rebuilt"
 * line; the trainer's source check, and a production before the update that failed. */
static rf_status_t job_begin(void *ctx, rf_err_t *err)
{
    job_t *j = ctx;
    uint32_t v = j->update;
    if (job_is_rollout(j)) {
        if (j->tm.rebuilds)
            job_print(j->o, RF_JOB_OUT, "refit: rank %d: plan rebuilt before update %u (%s%s)\n",
                      j->rank, v, j->tm.moved ? j->tm.moved : "format owner changed its mapping",
                      j->tm.moved ? " changed its signature" : "");
        return RF_OK;
    }
    RF_CHECK(check_source(j, j->from_ckpt, v, err));
    if (j->pre != RF_OK)
        return rf_err_set(err, j->pre, "%s", j->pre_err.msg);
    return RF_OK;
}

/* The session's produce hook (trainer, after GO): the training step's weights into the
 * shard buffers, unless they were written before the update began (ipc: the weights arena,
 * read-only until the verdict; a resident nccl trainer). */
static rf_status_t job_produce(void *ctx, rf_err_t *err)
{
    job_t *j = ctx;
    if (!j->s->ipc && !j->s->nccl_resident)
        RF_CHECK(rf_trainer_produce(&j->s->tr, j->update, j->from_ckpt ? j->s->ck : NULL, err));
    if (!j->s->ipc)
        RF_CHECK(job_fault_bad_weight_shape(j, j->update, err));
    return RF_OK;
}

/* The session's point hook: the exit and stall faults where no chunk hook fires. */
static void job_point(void *ctx, const char *where)
{
    job_t *j = ctx;
    if (strcmp(where, "p2p sender, before its first send") == 0) /* docs/faults.md */
        job_fault_delay_send(j, j->update, j->s->deadline);
    else
        job_fault_exit_stall(j, j->update, j->s->deadline, where);
}

/* Update v on every rank (collective). Returns 0 when it committed and verified, 1 with the
 * reason in fail (rank 0) when not, RF_JOB_PEER_LOST when a peer never reached its start. */
static int run_update(job_t *j, uint32_t v, uint64_t *verified_p, char *fail, size_t cap)
{
    rf_err_t err;
    rf_gate_verdict_t verdict;
    bool from_ckpt = j->s->ck != NULL && (j->o->checkpoint_all || v % 2 == 1);
    double t_start = rf_time_now();
    rf_err_clear(&err);
    memset(&j->js, 0, sizeof(j->js));
    j->js.role = (int)j->s->me.role;
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
    j->pre = RF_OK;
    rf_err_clear(&j->pre_err);
    if (!job_is_rollout(j) && j->s->ipc)
        j->pre = produce_arena(j, v, from_ckpt, &j->pre_err);
    if (j->s->nccl_resident)
        j->pre = produce_nccl_resident(j, v, &j->pre_err);
    /* the diff rule compares with the previous update only when it committed: after a FAILED
     * one the storage holds whatever the failure left, and the source may repeat */
    bool verify_this =
        !j->o->verify_none && (!j->o->verify_last || v == (uint32_t)j->o->steps);
    bool diff = v > 1 && j->last_committed == v - 1 && verify_this &&
                !(from_ckpt && j->o->checkpoint_all); /* the same checkpoint again: same bytes */
    if (job_is_rollout(j) && diff)
        job_snapshot(j); /* the oracle's copy for the diff rule, outside the timed path */
    /* every rank starts the update when the training step ended */
    if ((j->s->ipc || j->s->fence) && update_fence(j, v) != RF_OK)
        return RF_JOB_PEER_LOST;
    /* the session's update with the job's hooks: the source check and a production that
     * failed before the begin; production after GO; the tests' faults; the cold check */
    bool hooks = j->fault.kind != RF_FAULT_NONE;
    rf_session_hooks_t h = {.ctx = j,
                            .begin = job_begin,
                            .produce = job_produce,
                            .point = hooks ? job_point : NULL,
                            .fault = RF_XFER_FAULT_NONE,
                            .gather_skip_seq =
                                job_fault_here(j, v, RF_FAULT_GATHER_DROP) ? j->fault.seq : -1,
                            .after_chunk = hooks || j->o->cold_check ? job_after_chunk : NULL,
                            .before_pack = hooks ? job_before_pack : NULL};
    if (job_fault_here(j, v, RF_FAULT_DROP_CHUNK))
        h.fault.drop_seq = j->fault.seq;
    if (job_fault_here(j, v, RF_FAULT_DUPLICATE_CHUNK))
        h.fault.dup_seq = j->fault.seq;
    if (job_fault_here(j, v, RF_FAULT_CORRUPT_CHUNK))
        h.fault.corrupt_seq = j->fault.seq;
    j->from_ckpt = from_ckpt;
    j->paused = true; /* not served until the gate says COMMITTED */
    rf_session_run(j->s, 0, 0, &h, &verdict, &j->tm, &err);
    j->js.rebuilds = j->tm.rebuilds;
    j->js.begin_s = j->tm.begin_s;
    j->js.receive_s = j->tm.receive_s;
    j->js.finalize_s = j->tm.finalize_s;
    j->js.send_s = j->tm.send_s;
    j->js.gate_s = j->tm.gate_s;
    j->js.verdict_s = j->tm.verdict_s;
    if (verdict.committed && job_is_rollout(j)) {
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
    const rf_xfer_stats_t *xs = rf_xfer_stats(j->s->xfer);
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
        const rf_plan_stats_t *ps = &j->s->plan.stats;
        memcpy(j->js.layers, ps->layers, sizeof(j->js.layers));
        j->js.applications = ps->applications;
        j->js.declined = ps->declined;
        j->js.loader_calls = ps->loader_calls;
        j->js.bookkeeping_probes = ps->bookkeeping_probes;
        j->js.loader_s = ps->loader_s;
        j->js.layerwise_s = ps->layerwise_s;
        j->js.plan_begin_s = ps->begin_s;
        j->js.deferred_s = ps->deferred_s;
        j->js.derived_runs = ps->derived_runs;
        /* staged by the plan, or by the mpi transport's device check (xfer_devck.c) */
        const rf_xfer_stats_t *xst = rf_xfer_stats(j->s->xfer);
        j->js.stage_h2d = j->s->plan.stage_h2d + xst->h2d_chunks;
        j->js.batch_launches = j->s->plan.batch_launches;
        j->js.batch_rows = j->s->plan.batch_rows;
        j->js.stage_h2d_bytes = j->s->plan.stage_h2d_bytes + xst->h2d_bytes;
        j->js.dev = ps->dev;
    } else {
        j->js.bytes_produced = j->s->tr.stats.bytes_produced;
        j->js.produce_s = j->s->tr.stats.produce_s;
        j->js.bytes_read = j->s->tr.stats.bytes_read;
        j->js.header_bytes_read = j->s->tr.stats.header_bytes_read;
        j->js.bytes_gathered = j->s->tr.stats.bytes_gathered;
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
    uint8_t *vsum = j->rank == 0 ? calloc((size_t)j->s->inv.ntensors + 1, 1) : NULL;
    uint8_t *mine = calloc((size_t)j->s->inv.ntensors + 1, 1);
    if (job_is_rollout(j) && mine)
        memcpy(mine, j->verified, (size_t)j->s->inv.ntensors);
    MPI_Reduce(mine, vsum, j->s->inv.ntensors, MPI_UNSIGNED_CHAR, MPI_BOR, 0, j->stats_comm);
    free(mine);
    int rc = 0;
    if (j->rank == 0) {
        uint64_t verified = 0;
        for (int i = 0; i < j->s->inv.ntensors; i++)
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
    job_teardown_setup(j);
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
    j.engine_comm = j.stats_comm = MPI_COMM_NULL;
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
        job_print(opts, RF_JOB_OUT,
                  "refit: topology %s (hash %016" PRIx64 "), model %s %s, trainer %d rank(s) "
                  "(tp %d pp %d dp %d%s) -> %d engine(s) x tp %d dp %d ep %d, %s, %s transport, "
                  "%s\n",
                  j.s->topo.name, rf_topology_hash(&j.s->topo), j.s->cfg.model_type,
                  j.s->cfg.architecture, j.T, j.s->topo.t_tp, j.s->topo.t_pp, j.s->topo.t_dp,
                  j.s->topo.t_layout == RF_TRAINER_LAYOUT_FSDP ? ", layout fsdp" : "",
                  j.s->topo.r_engines, j.s->topo.r_tp, j.s->topo.r_dp, j.s->topo.r_ep,
                  rf_quant_name(j.s->topo.quantization), rf_transport_name(j.s->topo.transport),
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
    job_bench_info_t bi = {"",
                           "",
                           rf_quant_name(j.s->topo.quantization),
                           rf_transport_name(j.s->topo.transport),
                           j.s->man.payload_bytes,
                           j.s->man.n,
                           j.s->cplan ? j.s->cplan->n_chunks : 0,
                           j.s->topo.chunk_bytes,
                           j.s->place.device,
                           j.s->ipc_dev};
    snprintf(bi.topology, sizeof(bi.topology), "%s", j.s->topo.name);
    snprintf(bi.model, sizeof(bi.model), "%s", j.s->cfg.model_type);
    teardown(&j);
    if (j.rank == 0 && opts->bench_json && j.hist_verdict_s && j.hist_committed &&
        job_bench_write(opts, &bi, j.hist_verdict_s, j.hist_committed) != 0)
        rc = rc ? rc : 1;
    free(j.hist_verdict_s);
    free(j.hist_committed);
    return rc;
}
