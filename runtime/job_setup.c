/*
 * refit: the job's setup (collective over MPI_COMM_WORLD), job_setup: the job as a client of
 * the session (runtime/session_int.h, runtime/session_setup.c). The session sets up
 * everything a transfer needs, for every transport, format and device refit-run supports,
 * with the rollout's storage and the trainer's shard buffers allocated by refit (owned); the
 * job resolves its --inject-fault at the session's `configured` point (the schedule and the
 * trainer's shards exist, the transport is not set up yet) and then makes what is its own:
 * the engine and stats communicators, the oracle's buffers, the reference.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/log.h"
#include "job_int.h"

/* The session's `configured` hook: the fault resolved against the schedule (same options
 * and topology everywhere: same answer). */
static rf_status_t job_configured(void *ctx, rf_session_t *s, rf_err_t *err)
{
    job_t *j = ctx;
    j->s = s;
    return job_fault_resolve(j, err);
}

rf_status_t job_setup(job_t *j, rf_err_t *err)
{
    const rf_job_opts_t *o = j->o;
    rf_session_setup_t so = {
        .opt = {.integrity = o->integrity},
        .owned = true,
        .policy = o->policy,
        .format = o->format,
        .checkpoint = o->checkpoint,
        .faults = o->fault.kind != RF_FAULT_NONE,
        .configured = job_configured,
        .ctx = j,
    };
    RF_CHECK(rf_session_open(MPI_COMM_WORLD, o->topology, &so, &j->s, err));
    j->rank = j->s->rank;
    j->size = j->s->size;
    j->T = j->s->T;
    j->R = j->s->R;
    /* on by default (topology default true): --no-integrity or transfer.integrity: false
     * turns it off, and the table (and the fault resolution) says which */
    j->integrity_off = j->s->integrity ? NULL
                       : o->integrity < 0 ? "--no-integrity"
                                          : "transfer.integrity: false";
    RF_CHECK(rf_session_build(j->s, err));
    MPI_Comm_split(MPI_COMM_WORLD, job_is_rollout(j) ? j->s->me.engine : MPI_UNDEFINED, j->rank,
                   &j->engine_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &j->stats_comm);
    /* the oracle's: the slots' bytes before an update, what it verified; the reference on
     * rollout ranks, and on rank 0 to count its entries against what the oracle checked */
    rf_status_t st = RF_OK;
    if (job_is_rollout(j)) {
        j->snap = calloc((size_t)j->s->st.nslots + 1, sizeof(char *));
        j->verified = calloc((size_t)j->s->inv.ntensors + 1, 1);
        if (j->snap == NULL || j->verified == NULL)
            st = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    }
    if (st == RF_OK && o->reference && (job_is_rollout(j) || (j->rank == 0 && j->s->ck != NULL)))
        st = rf_ref_load(o->reference, &j->ref, err);
    /* a reference that cannot describe what the trainer quantizes: refused now, not at the
     * first update's verification */
    if (st == RF_OK && j->rank == 0)
        st = job_ref_check_quantized(j, err);
    RF_CHECK(rf_session_agree_comm(MPI_COMM_WORLD, st, err));
    j->paused = true;
    return RF_OK;
}

void job_teardown_setup(job_t *j)
{
    if (j->snap) {
        for (int s = 0; s < j->s->st.nslots; s++)
            free(j->snap[s]);
        free(j->snap);
    }
    free(j->verified);
    if (j->ref)
        rf_ref_free(j->ref);
    if (j->engine_comm != MPI_COMM_NULL && j->engine_comm != 0)
        MPI_Comm_free(&j->engine_comm);
    if (j->stats_comm != MPI_COMM_NULL && j->stats_comm != 0)
        MPI_Comm_free(&j->stats_comm);
    rf_session_release(j->s, true);
    j->s = NULL;
}
