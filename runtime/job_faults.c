/*
 * refit: fault injection for tests (refit-run --inject-fault KIND[:RANK][@UPDATE];
 * docs/faults.md): the kinds' names and the option's parser, the resolution at setup (default
 * ranks, refusal of a rank that cannot inject the kind), and the hooks the update loop calls:
 * exit and stall, storage moved before an update or after the first chunk, a bad wna16
 * weight_shape, a p2p sender's late start. Chunk faults (drop, duplicate, corrupt) are the transport's (rf_xfer_config_t),
 * source faults alter the trainer's view in check_source (job.c). Every hook is a no-op on a
 * rank or update the fault does not name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "refit/log.h"
#include "job_int.h"

static const char *const fault_names[] = {
    [RF_FAULT_NONE] = "none",
    [RF_FAULT_EXIT] = "exit",
    [RF_FAULT_STALL] = "stall",
    [RF_FAULT_CORRUPT_CHUNK] = "corrupt-chunk",
    [RF_FAULT_DROP_CHUNK] = "drop-chunk",
    [RF_FAULT_DUPLICATE_CHUNK] = "duplicate-chunk",
    [RF_FAULT_WRONG_DTYPE] = "wrong-dtype",
    [RF_FAULT_WRONG_SHAPE] = "wrong-shape",
    [RF_FAULT_MISSING_TENSOR] = "missing-tensor",
    [RF_FAULT_EXTRA_TENSOR] = "extra-tensor",
    [RF_FAULT_MOVE_STORAGE] = "move-storage",
    [RF_FAULT_MOVE_STORAGE_BETWEEN] = "move-storage-between",
    [RF_FAULT_GATHER_DROP] = "gather-drop",
    [RF_FAULT_BAD_WEIGHT_SHAPE] = "bad-weight-shape",
    [RF_FAULT_DELAY_SEND] = "delay-send",
};
#define FAULT_KINDS ((int)(sizeof(fault_names) / sizeof(fault_names[0])))

const char *rf_fault_kind_name(rf_fault_kind_t k)
{
    return (int)k >= 0 && (int)k < FAULT_KINDS ? fault_names[k] : "?";
}

const char *rf_fault_kind_names(void)
{
    return "exit, stall, corrupt-chunk, drop-chunk, duplicate-chunk, wrong-dtype, wrong-shape, "
           "missing-tensor, extra-tensor, move-storage, move-storage-between, gather-drop, "
           "bad-weight-shape, delay-send";
}

int rf_job_fault_parse(const char *spec, rf_job_fault_t *f, char *msg, size_t cap)
{
    char kind[64];
    const char *at = strchr(spec, '@'), *colon = strchr(spec, ':');
    size_t klen = strcspn(spec, ":@");
    memset(f, 0, sizeof(*f));
    f->rank = -1;
    f->update = 2;
    f->seq = 0;
    if (klen == 0 || klen >= sizeof(kind)) {
        snprintf(msg, cap, "--inject-fault: '%s' is not KIND[:RANK][@UPDATE]", spec);
        return -1;
    }
    memcpy(kind, spec, klen);
    kind[klen] = '\0';
    for (int k = 1; k < FAULT_KINDS; k++)
        if (strcmp(kind, fault_names[k]) == 0)
            f->kind = (rf_fault_kind_t)k;
    if (f->kind == RF_FAULT_NONE) {
        snprintf(msg, cap, "--inject-fault: unknown kind '%s' (known: %s)", kind,
                 rf_fault_kind_names());
        return -1;
    }
    if (colon != NULL && (at == NULL || colon < at)) {
        char *end;
        long r = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || r < 0 || r > 1000000 || (*end != '\0' && *end != '@')) {
            snprintf(msg, cap, "--inject-fault: '%s': rank is not a non-negative integer", spec);
            return -1;
        }
        f->rank = (int)r;
    }
    if (at != NULL) {
        char *end;
        long u = strtol(at + 1, &end, 10);
        if (end == at + 1 || *end != '\0' || u < 1 || u > 1000000) {
            snprintf(msg, cap, "--inject-fault: '%s': update is not a positive integer", spec);
            return -1;
        }
        f->update = (int)u;
    }
    return 0;
}

/* ---- resolved at setup ---------------------------------------------------------------- */

/* This rank injects the configured fault in update v. */
bool job_fault_here(const job_t *j, uint32_t v, rf_fault_kind_t k)
{
    return j->fault.kind == k && (uint32_t)j->fault.update == v && j->fault.rank == j->rank;
}

/* Default ranks, and refusal of a rank that cannot inject the kind. Every rank agrees. */
rf_status_t job_fault_resolve(job_t *j, rf_err_t *err)
{
    rf_job_fault_t *f = &j->fault;
    rf_rank_info_t info;
    int stage_sender = j->s->senders[0];
    *f = j->o->fault;
    if (f->kind == RF_FAULT_NONE)
        return RF_OK;
    if (f->rank < 0) {
        switch (f->kind) {
        case RF_FAULT_CORRUPT_CHUNK:
        case RF_FAULT_DROP_CHUNK:
        case RF_FAULT_DUPLICATE_CHUNK:
            f->rank = stage_sender; /* the sender of stage 0 */
            break;
        case RF_FAULT_DELAY_SEND:
            f->rank = 0; /* the first sender: every receiver it serves would take it first */
            break;
        case RF_FAULT_GATHER_DROP:
        case RF_FAULT_WRONG_DTYPE:
        case RF_FAULT_WRONG_SHAPE:
        case RF_FAULT_MISSING_TENSOR:
        case RF_FAULT_EXTRA_TENSOR:
        case RF_FAULT_BAD_WEIGHT_SHAPE:
            f->rank = j->T - 1; /* the last trainer rank: not the one that decides GO */
            break;
        default:
            f->rank = j->size - 1; /* the last rollout rank */
            break;
        }
    }
    if (f->rank >= j->size)
        return rf_err_set(err, RF_ERR_INVALID, "--inject-fault %s: rank %d is not in a world of %d",
                          rf_fault_kind_name(f->kind), f->rank, j->size);
    if (f->update > j->o->steps)
        return rf_err_set(err, RF_ERR_INVALID,
                          "--inject-fault %s@%d: the job runs %d update(s) (--steps), so the "
                          "fault would never fire",
                          rf_fault_kind_name(f->kind), f->update, j->o->steps);
    RF_CHECK(rf_topology_rank_info(&j->s->topo, f->rank, &info));
    bool sender = false;
    for (int p = 0; p < j->s->topo.t_pp; p++)
        sender |= j->s->senders[p] == f->rank;
    const char *need = NULL;
    switch (f->kind) {
    case RF_FAULT_CORRUPT_CHUNK:
    case RF_FAULT_DROP_CHUNK:
    case RF_FAULT_DUPLICATE_CHUNK:
        if (!sender)
            need = "a stage sender";
        break;
    case RF_FAULT_GATHER_DROP:
        if (j->s->p2p)
            need = "a gather contributor, and p2p has no gather (use drop-chunk)";
        else if (info.role != RF_ROLE_TRAINER || sender || info.c != 0 || info.d != 0)
            need = "a trainer rank that contributes to its stage's gather";
        break;
    case RF_FAULT_WRONG_DTYPE:
    case RF_FAULT_WRONG_SHAPE:
    case RF_FAULT_MISSING_TENSOR:
    case RF_FAULT_EXTRA_TENSOR:
        if (info.role != RF_ROLE_TRAINER)
            need = "a trainer rank";
        break;
    case RF_FAULT_DELAY_SEND:
        if (!j->s->p2p || info.role != RF_ROLE_TRAINER)
            need = "a p2p sender (a trainer rank with transfer.mode p2p)";
        break;
    case RF_FAULT_MOVE_STORAGE:
    case RF_FAULT_MOVE_STORAGE_BETWEEN:
        if (info.role != RF_ROLE_ROLLOUT)
            need = "a rollout rank";
        break;
    case RF_FAULT_BAD_WEIGHT_SHAPE:
        if (j->s->inv.quant != RF_QUANT_WNA16)
            return rf_err_set(err, RF_ERR_INVALID,
                              "--inject-fault bad-weight-shape: the model's quantization is %s; "
                              "only wna16 models have weight_shape tensors",
                              rf_quant_name(j->s->inv.quant));
        if (info.role != RF_ROLE_TRAINER)
            need = "a trainer rank";
        break;
    default:
        break;
    }
    if (need != NULL)
        return rf_err_set(err, RF_ERR_INVALID, "--inject-fault %s: rank %d is not %s",
                          rf_fault_kind_name(f->kind), f->rank, need);
    if (f->kind == RF_FAULT_CORRUPT_CHUNK && !j->s->integrity)
        rf_warn("--inject-fault corrupt-chunk with integrity off (%s): only the oracle can notice",
                j->integrity_off);
    /* chunk faults, and exit / stall on a stage sender, hit the first chunk of the rank's
     * stage (a rollout rank's hooks fire after chunk 0) */
    int p = info.role == RF_ROLE_TRAINER ? info.p : 0;
    f->seq = p < j->s->cplan->n_stages ? j->s->cplan->stages[p].chunk_begin : 0;
    if (j->s->nccl && f->kind == RF_FAULT_DUPLICATE_CHUNK && p < j->s->cplan->n_stages &&
        j->s->cplan->stages[p].chunk_count < 2) {
        /* nccl: a collective cannot carry an extra message; the duplicate is the next
         * message repeating this chunk's header, so the stage needs a next chunk */
        char cb[32];
        return rf_err_set(err, RF_ERR_INVALID,
                          "--inject-fault duplicate-chunk: on the nccl transport the duplicate is "
                          "the next message repeating the header, and stage %d has %u chunk(s) "
                          "at transfer.chunk_bytes %s: use a smaller chunk_bytes",
                          p, j->s->cplan->stages[p].chunk_count,
                          job_human_bytes((double)j->s->cplan->chunk_bytes, cb, sizeof(cb)));
    }
    if (j->s->ipc && f->kind == RF_FAULT_CORRUPT_CHUNK && p < j->s->cplan->n_stages) {
        /* ipc: only staged bytes can be corrupted in flight: the stage's first staged chunk */
        const rf_chunk_stage_range_t *sr = &j->s->cplan->stages[p];
        for (uint32_t k = sr->chunk_count; k-- > 0;)
            if (j->s->ipc_staged[sr->chunk_begin + k])
                f->seq = sr->chunk_begin + k;
    }
    if (j->rank == 0)
        rf_warn("fault: %s on rank %d at update %d", rf_fault_kind_name(f->kind), f->rank,
                f->update);
    return RF_OK;
}

/* ---- the hooks ------------------------------------------------------------------------ */

/* The injected process death. The one place refit calls _exit: on purpose, for tests
 * (--inject-fault exit); Open MPI 4.1 then ends the whole job. mpirun kills the other ranks
 * within a few milliseconds, before rank 0 could learn of the death (no deadline has expired,
 * no MPI call has failed yet), so the dying rank prints the job's last line itself, on stderr
 * like the rest of its output. It writes them itself, not through rf_job_opts_t.print: the
 * lines must be out of every buffer before _exit, whatever the caller's callback does with
 * them; the library's one write to a standard stream, and only under --inject-fault exit. */
static void fault_exit_now(job_t *j, const char *where)
{
    fprintf(stderr,
            "refit: fault: rank %d exits during update %u (%s)\n"
            "refit: FAILED: update %u: rank %d: process exited (--inject-fault exit, %s); Open "
            "MPI ends the job\n",
            j->rank, j->update, where, j->update, j->rank, where);
    fflush(stderr);
    _exit(1);
}

/* The injected stall: sleeps until deadline + 0.5 s, answering nothing. */
static void fault_stall_now(job_t *j, double deadline, const char *where)
{
    double until = deadline + 0.5;
    rf_warn("fault: rank %d stalls %.1f s during update %u (%s)", j->rank,
            until - rf_time_now(), j->update, where);
    while (rf_time_now() < until) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
}

/* The exit and stall faults, if this rank injects one in update v (where: the spot, for the
 * line it prints; deadline: the one a stall sleeps past). */
void job_fault_exit_stall(job_t *j, uint32_t v, double deadline, const char *where)
{
    if (job_fault_here(j, v, RF_FAULT_EXIT))
        fault_exit_now(j, where);
    if (job_fault_here(j, v, RF_FAULT_STALL))
        fault_stall_now(j, deadline, where);
}

/* The delay-send fault: before its first p2p send of update v this sender sleeps 1 s, or a
 * quarter of the time left to the deadline if that is less, so its receivers can show they
 * take the other senders' chunks meanwhile (the update must still commit). */
void job_fault_delay_send(job_t *j, uint32_t v, double deadline)
{
    if (!job_fault_here(j, v, RF_FAULT_DELAY_SEND))
        return;
    double d = (deadline - rf_time_now()) / 4;
    d = d < 1.0 ? d : 1.0;
    rf_warn("fault: rank %d delays its sends %.2f s during update %u", j->rank, d, v);
    for (double until = rf_time_now() + d; rf_time_now() < until;) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
}

/* Before update v begins: the move-storage-between fault (an engine re-allocated a parameter
 * between updates: the plan must follow). */
void job_fault_before_update(job_t *j, uint32_t v)
{
    rf_err_t err;
    rf_err_clear(&err);
    if (job_fault_here(j, v, RF_FAULT_MOVE_STORAGE_BETWEEN)) {
        const char *name = j->s->st.slots[0].name;
        if (rf_storage_move_slot(&j->s->st, name, &err) == RF_OK)
            rf_warn("fault: rank %d moved slot %s before update %u", j->rank, name, v);
    }
}

/* Fault hooks after the first chunk this rank applied. */
rf_status_t job_fault_after_chunk(job_t *j, const rf_chunk_t *chunk, rf_err_t *err)
{
    if (chunk->seq == 0)
        job_fault_exit_stall(j, j->update, j->s->deadline, "rollout, after applying chunk 0");
    if (chunk->seq == 0 && job_fault_here(j, j->update, RF_FAULT_MOVE_STORAGE)) {
        const char *name = j->s->st.slots[0].name;
        RF_CHECK(rf_storage_move_slot(&j->s->st, name, err));
        rf_warn("fault: rank %d moved slot %s during update %u", j->rank, name, j->update);
    }
    return RF_OK;
}

/* The bad-weight-shape fault: after production, this trainer's first wna16 weight_shape
 * carries N + 1 (in its host buffers, its device arena and its pinned mirror alike), so the
 * rollout ranks that load it must refuse the update naming the tensor. */
rf_status_t job_fault_bad_weight_shape(job_t *j, uint32_t v, rf_err_t *err)
{
    if (!job_fault_here(j, v, RF_FAULT_BAD_WEIGHT_SHAPE))
        return RF_OK;
    for (int i = 0; i < j->s->man.n; i++) {
        const rf_tensor_t *t = &j->s->inv.tensors[j->s->man.entries[i].tensor];
        if (t->param != RF_PARAM_WEIGHT_SHAPE || !j->s->tr.has[i] || j->s->tr.buf[i] == NULL)
            continue;
        size_t es = rf_dtype_size(j->s->man.entries[i].dtype);
        unsigned char b[8];
        rf_status_t st = RF_OK;
        char *dev = NULL;
        if (j->s->ipc_dev) { /* tr.buf points into the mirror, or into the device arena itself */
            const char *hb = j->s->ipc_mirror ? (const char *)j->s->ipc_mirror
                                           : (const char *)j->s->ipc_wdev;
            dev = (char *)j->s->ipc_wdev + ((const char *)j->s->tr.buf[i] - hb);
            st = j->s->accel->ops->copy(j->s->accel, b, dev, es, RF_COPY_D2H, NULL);
            if (st == RF_OK)
                st = rf_accel_sync(j->s->accel);
        } else {
            memcpy(b, j->s->tr.buf[i], es);
        }
        if (es == 4) {
            int32_t n;
            memcpy(&n, b, 4);
            n++;
            memcpy(b, &n, 4);
        } else {
            int64_t n;
            memcpy(&n, b, 8);
            n++;
            memcpy(b, &n, 8);
        }
        if (st == RF_OK && dev != NULL) {
            st = j->s->accel->ops->copy(j->s->accel, dev, b, es, RF_COPY_H2D, NULL);
            if (st == RF_OK)
                st = rf_accel_sync(j->s->accel);
        }
        if (st != RF_OK)
            return rf_err_set(err, st, "trainer rank %d: fault bad-weight-shape: device copy "
                              "failed", j->rank);
        if (!j->s->ipc_dev || j->s->ipc_mirror != NULL)
            memcpy(j->s->tr.buf[i], b, es);
        rf_warn("fault: trainer rank %d: %s carries N + 1 in update %u", j->rank,
                j->s->man.entries[i].name, v);
        return RF_OK;
    }
    return rf_err_set(err, RF_ERR_INVALID, "trainer rank %d: fault bad-weight-shape: it holds "
                      "no weight_shape tensor", j->rank);
}
