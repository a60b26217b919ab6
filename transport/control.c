/*
 * refit: the control channel (include/refit/control.h): the universal wait loop, ABORT,
 * stale-message draining and the begin agreement. The completion gate is in runtime/gate.c;
 * the clock and update deadlines are in core/time.c.
 *
 * Control sends that nobody needs to wait for (ABORTs, gate reports and verdicts) go to an
 * outbox: the buffer stays alive until MPI completes the sends, which later calls progress.
 */
#include "refit/control.h"

#include <errno.h>
#include <mpi.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control_int.h"
#include "refit/checks.h"

typedef struct rf_ctl_abort_msg {
    int32_t rank;
    int32_t code;
    uint32_t update;
    char reason[RF_ERR_MSG_MAX];
} rf_ctl_abort_msg_t;

typedef struct rf_ctl_agree_msg {
    int32_t status;
    int32_t rank;
    char reason[RF_ERR_MSG_MAX];
} rf_ctl_agree_msg_t;

rf_status_t rf_ctl_create(MPI_Comm world, rf_ctl_t **ctl_p, rf_err_t *err)
{
    if (ctl_p == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "control channel: null argument");
    rf_ctl_t *ctl = calloc(1, sizeof(*ctl));
    if (ctl == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "control channel: out of memory");
    ctl->comm = MPI_COMM_NULL;
    ctl->abort_origin = -1;
    rf_status_t st = RF_OK;
    RF_MPI_CHECK_GOTO(MPI_Comm_dup(world, &ctl->comm), err, st, err_free);
    RF_MPI_CHECK_GOTO(MPI_Comm_set_errhandler(ctl->comm, MPI_ERRORS_RETURN), err, st, err_free);
    RF_MPI_CHECK_GOTO(MPI_Comm_rank(ctl->comm, &ctl->rank), err, st, err_free);
    RF_MPI_CHECK_GOTO(MPI_Comm_size(ctl->comm, &ctl->size), err, st, err_free);
    *ctl_p = ctl;
    return RF_OK;

err_free:
    if (ctl->comm != MPI_COMM_NULL)
        MPI_Comm_free(&ctl->comm);
    free(ctl);
    return st;
}

/* Frees outbox entries whose sends completed. With wait_s > 0, waits up to that long. */
static void outbox_progress(rf_ctl_t *ctl, double wait_s)
{
    double until = rf_time_now() + wait_s;
    for (;;) {
        size_t kept = 0;
        for (size_t i = 0; i < ctl->n_out; i++) {
            rf_ctl_out_t *o = &ctl->out[i];
            int flag = 0;
            if (MPI_Testall(o->n, o->reqs, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
                flag = 0;
            if (flag) {
                free(o->reqs);
                free(o->buf);
            } else {
                ctl->out[kept++] = *o;
            }
        }
        ctl->n_out = kept;
        if (kept == 0 || rf_time_now() >= until)
            return;
        sched_yield();
    }
}

rf_status_t rf_ctl_outbox_add(rf_ctl_t *ctl, void *buf, MPI_Request *reqs, int n, rf_err_t *err)
{
    if (ctl->n_out == ctl->cap_out) {
        size_t cap = ctl->cap_out ? 2 * ctl->cap_out : 8;
        rf_ctl_out_t *o = realloc(ctl->out, cap * sizeof(*o));
        if (o == NULL) {
            /* cannot keep it: wait it out rather than free a buffer MPI still reads */
            MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
            free(reqs);
            free(buf);
            return rf_err_set(err, RF_ERR_NOMEM, "control channel: out of memory");
        }
        ctl->out = o;
        ctl->cap_out = cap;
    }
    ctl->out[ctl->n_out].buf = buf;
    ctl->out[ctl->n_out].reqs = reqs;
    ctl->out[ctl->n_out].n = n;
    ctl->n_out++;
    outbox_progress(ctl, 0);
    return RF_OK;
}

void rf_ctl_destroy(rf_ctl_t *ctl)
{
    if (ctl == NULL)
        return;
    outbox_progress(ctl, 5.0);
    /* Sends that never completed (a peer that stopped receiving): release the requests and
     * keep their buffers (Open MPI 4.1 cannot cancel sends; MPI may still read them). */
    for (size_t i = 0; i < ctl->n_out; i++) {
        for (int j = 0; j < ctl->out[i].n; j++)
            if (ctl->out[i].reqs[j] != MPI_REQUEST_NULL)
                MPI_Request_free(&ctl->out[i].reqs[j]);
        free(ctl->out[i].reqs);
    }
    free(ctl->out);
    MPI_Comm_free(&ctl->comm);
    free(ctl);
}

int rf_ctl_rank(const rf_ctl_t *ctl)
{
    return ctl->rank;
}

int rf_ctl_size(const rf_ctl_t *ctl)
{
    return ctl->size;
}

uint32_t rf_ctl_update(const rf_ctl_t *ctl)
{
    return ctl->update;
}

MPI_Comm rf_ctl_comm(const rf_ctl_t *ctl)
{
    return ctl->comm;
}

/* Receives and discards every message already queued on (any source, tag). */
static rf_status_t discard_tag(rf_ctl_t *ctl, int tag, rf_err_t *err)
{
    for (;;) {
        int flag = 0, count = 0;
        MPI_Message msg;
        MPI_Status st;
        RF_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, tag, ctl->comm, &flag, &msg, &st), err);
        if (!flag)
            return RF_OK;
        RF_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count), err);
        void *buf = malloc(count > 0 ? (size_t)count : 1);
        if (buf == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "control channel: out of memory");
        int rc = MPI_Mrecv(buf, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        free(buf);
        RF_MPI_CHECK(rc, err);
        rf_debug("control: discarded a stale message (tag 0x%x) from rank %d", tag,
                 st.MPI_SOURCE);
    }
}

rf_status_t rf_ctl_begin(rf_ctl_t *ctl, uint32_t update, rf_err_t *err)
{
    ctl->update = update;
    ctl->abort_sent = 0;
    ctl->abort_origin = -1;
    ctl->abort_code = RF_OK;
    ctl->abort_reason[0] = '\0';
    outbox_progress(ctl, 0);
    for (uint32_t back = 1; back <= 8; back++) {
        uint32_t u = update - back;
        if ((u & 0xffu) == (update & 0xffu))
            continue;
        for (int kind = RF_CTL_ABORT; kind <= RF_CTL_KIND_LAST; kind++)
            RF_CHECK(discard_tag(ctl, RF_CTL_TAG(kind, u), err));
    }
    return RF_OK;
}

rf_status_t rf_ctl_abort(rf_ctl_t *ctl, rf_status_t code, const char *reason)
{
    if (ctl->abort_sent || ctl->size < 2)
        return RF_OK;
    ctl->abort_sent = 1;
    rf_err_t err;
    rf_err_clear(&err);
    rf_ctl_abort_msg_t *m = calloc(1, sizeof(*m));
    MPI_Request *reqs = malloc((size_t)ctl->size * sizeof(*reqs));
    if (m == NULL || reqs == NULL) {
        free(m);
        free(reqs);
        return RF_ERR_NOMEM;
    }
    m->rank = ctl->rank;
    m->code = code;
    m->update = ctl->update;
    snprintf(m->reason, sizeof(m->reason), "%s", reason ? reason : "");
    int n = 0;
    int tag = RF_CTL_TAG(RF_CTL_ABORT, ctl->update);
    for (int r = 0; r < ctl->size; r++) {
        if (r == ctl->rank)
            continue;
        int rc = MPI_Isend(m, (int)sizeof(*m), MPI_BYTE, r, tag, ctl->comm, &reqs[n]);
        if (rc != MPI_SUCCESS) {
            rf_status_t st = rf_mpi_error(rc, "MPI_Isend(abort)", __FILE__, __LINE__, &err);
            rf_ctl_outbox_add(ctl, m, reqs, n, NULL);
            return st;
        }
        n++;
    }
    rf_debug("rank %d: abort of update %u posted: %s", ctl->rank, ctl->update, m->reason);
    return rf_ctl_outbox_add(ctl, m, reqs, n, &err);
}

static rf_status_t abort_error(const rf_ctl_t *ctl, rf_err_t *err)
{
    return rf_err_set(err, RF_ERR_PEER, "rank %d aborted update %u: %s: %s", ctl->abort_origin,
                      ctl->update, rf_status_string(ctl->abort_code), ctl->abort_reason);
}

rf_status_t rf_ctl_poll(rf_ctl_t *ctl, rf_err_t *err)
{
    int tag = RF_CTL_TAG(RF_CTL_ABORT, ctl->update);
    for (;;) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        RF_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, tag, ctl->comm, &flag, &msg, &st), err);
        if (!flag)
            break;
        rf_ctl_abort_msg_t m;
        memset(&m, 0, sizeof(m));
        RF_MPI_CHECK(MPI_Mrecv(&m, (int)sizeof(m), MPI_BYTE, &msg, MPI_STATUS_IGNORE), err);
        m.reason[sizeof(m.reason) - 1] = '\0';
        if (m.update != ctl->update || ctl->abort_origin >= 0)
            continue; /* a stale tag alias (update v - 256) or a second abort: keep the first */
        ctl->abort_origin = m.rank;
        ctl->abort_code = (rf_status_t)m.code;
        snprintf(ctl->abort_reason, sizeof(ctl->abort_reason), "%s", m.reason);
    }
    if (ctl->abort_origin >= 0)
        return abort_error(ctl, err);
    return RF_OK;
}

int rf_ctl_abort_origin(const rf_ctl_t *ctl, rf_status_t *code_p, const char **reason_p)
{
    if (code_p)
        *code_p = ctl->abort_code;
    if (reason_p)
        *reason_p = ctl->abort_reason;
    return ctl->abort_origin;
}

/* Seconds a wait polls with sched_yield before it backs off with sleeps (1 us doubling to 1 ms):
 * short waits (an ACK behind a device copy, the gate) stay in the microseconds, long ones (a
 * trainer still producing) stop burning a core. */
#define RF_CTL_SPIN_S 0.005
/* The same with RF_CTL_WAIT_SPIN (a message is streaming): long enough for a chunk of hundreds
 * of MiB at the shared-memory rate, short enough that a stalled peer, or ranks oversubscribing
 * a core, get the sleeping backoff after it. */
#define RF_CTL_SPIN_STREAM_S 0.25

rf_status_t rf_ctl_wait_fn(rf_ctl_t *ctl, rf_ctl_test_fn test, void *ctx, double deadline,
                           unsigned flags, rf_err_t *err)
{
    long sleep_ns = 1000;
    double t0 = rf_time_now();
    for (;;) {
        int r = test(ctx, err);
        if (r < 0)
            return (rf_status_t)r;
        if (r > 0)
            return RF_OK;
        if (!(flags & RF_CTL_WAIT_NO_ABORT))
            RF_CHECK(rf_ctl_poll(ctl, err));
        double now = rf_time_now();
        if (now >= deadline)
            return RF_ERR_TIMEOUT; /* the caller names what it waited for */
        if (now - t0 < ((flags & RF_CTL_WAIT_SPIN) ? RF_CTL_SPIN_STREAM_S : RF_CTL_SPIN_S)) {
            sched_yield(); /* a ready peer is seen within microseconds */
        } else {
            struct timespec ts = {0, sleep_ns};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
            sleep_ns = sleep_ns * 2 > 1000000 ? 1000000 : sleep_ns * 2;
        }
    }
}

typedef struct wait_all_ctx {
    MPI_Request *reqs;
    int n;
} wait_all_ctx_t;

static int test_all(void *vctx, rf_err_t *err)
{
    wait_all_ctx_t *c = vctx;
    int flag = 0;
    int rc = MPI_Testall(c->n, c->reqs, &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
        return rf_mpi_error(rc, "MPI_Testall", __FILE__, __LINE__, err);
    return flag ? 1 : 0;
}

rf_status_t rf_ctl_wait(rf_ctl_t *ctl, MPI_Request *reqs, int n, double deadline,
                        rf_err_t *err)
{
    return rf_ctl_wait_flags(ctl, reqs, n, deadline, 0, err);
}

rf_status_t rf_ctl_wait_flags(rf_ctl_t *ctl, MPI_Request *reqs, int n, double deadline,
                              unsigned flags, rf_err_t *err)
{
    wait_all_ctx_t c = {reqs, n};
    rf_status_t st = rf_ctl_wait_fn(ctl, test_all, &c, deadline, flags, err);
    if (st == RF_ERR_TIMEOUT) {
        int pending = 0;
        for (int i = 0; i < n; i++)
            pending += reqs[i] != MPI_REQUEST_NULL;
        return rf_err_set(err, RF_ERR_TIMEOUT,
                          "rank %d: deadline expired with %d of %d requests pending", ctl->rank,
                          pending, n);
    }
    return st;
}

typedef struct wait_some_ctx {
    MPI_Request *reqs;
    int n;
    int *idx;
    MPI_Status *sts;
    int outcount;
} wait_some_ctx_t;

static int test_some(void *vctx, rf_err_t *err)
{
    wait_some_ctx_t *c = vctx;
    int rc = MPI_Testsome(c->n, c->reqs, &c->outcount, c->idx, c->sts);
    if (rc != MPI_SUCCESS)
        return rf_mpi_error(rc, "MPI_Testsome", __FILE__, __LINE__, err);
    return c->outcount != 0; /* MPI_UNDEFINED (none active) counts as done */
}

rf_status_t rf_ctl_wait_some(rf_ctl_t *ctl, MPI_Request *reqs, int n, double deadline,
                             unsigned flags, rf_ctl_done_fn done, void *ctx, rf_err_t *err)
{
    if (n <= 0)
        return RF_OK;
    wait_some_ctx_t c = {reqs, n, malloc((size_t)n * sizeof(int)),
                         malloc((size_t)n * sizeof(MPI_Status)), 0};
    if (c.idx == NULL || c.sts == NULL) {
        free(c.idx);
        free(c.sts);
        return rf_err_set(err, RF_ERR_NOMEM, "control channel: out of memory");
    }
    rf_status_t st = rf_ctl_wait_fn(ctl, test_some, &c, deadline, flags, err);
    if (st == RF_OK && c.outcount != MPI_UNDEFINED) {
        /* index order (insertion sort: outcount is small) */
        for (int i = 1; i < c.outcount; i++) {
            int k = c.idx[i];
            MPI_Status s = c.sts[i];
            int j = i - 1;
            for (; j >= 0 && c.idx[j] > k; j--) {
                c.idx[j + 1] = c.idx[j];
                c.sts[j + 1] = c.sts[j];
            }
            c.idx[j + 1] = k;
            c.sts[j + 1] = s;
        }
        for (int i = 0; i < c.outcount && st == RF_OK; i++)
            st = done ? done(ctx, c.idx[i], &c.sts[i], err) : RF_OK;
    } else if (st == RF_ERR_TIMEOUT) {
        rf_err_set(err, RF_ERR_TIMEOUT, "rank %d: deadline expired waiting for %d request(s)",
                   ctl->rank, n);
    }
    free(c.idx);
    free(c.sts);
    return st;
}

/* Cancels and completes receives still active in reqs[0..n). */
void rf_ctl_cancel_recvs(MPI_Request *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        if (reqs[i] == MPI_REQUEST_NULL)
            continue;
        MPI_Cancel(&reqs[i]);
        MPI_Wait(&reqs[i], MPI_STATUS_IGNORE); /* a cancelled receive completes locally */
    }
}

/* One agreement of an update (rf_ctl_agree, rf_ctl_agree_produced): its own report and answer
 * kinds, so a late message of one never matches a receive of the other; phase names it in the
 * texts ("begin", "production"). */
static rf_status_t agree(rf_ctl_t *ctl, int kind_rep, int kind_ans, const char *phase,
                         uint32_t update, rf_status_t local_status, const char *local_msg,
                         double deadline, rf_err_t *err)
{
    const int n = ctl->size;
    const int tag_rep = RF_CTL_TAG(kind_rep, update);
    const int tag_ans = RF_CTL_TAG(kind_ans, update);
    rf_ctl_agree_msg_t answer;
    memset(&answer, 0, sizeof(answer));
    rf_status_t st = RF_OK;
    rf_err_t werr;
    rf_err_clear(&werr);

    if (ctl->rank == 0) {
        rf_ctl_agree_msg_t *reps = calloc((size_t)n, sizeof(*reps));
        MPI_Request *reqs = malloc((size_t)n * sizeof(*reqs));
        if (reps == NULL || reqs == NULL) {
            free(reps);
            free(reqs);
            return rf_err_set(err, RF_ERR_NOMEM, "%s agreement: out of memory", phase);
        }
        reps[0].status = local_status;
        snprintf(reps[0].reason, sizeof(reps[0].reason), "%s", local_msg ? local_msg : "");
        reqs[0] = MPI_REQUEST_NULL;
        for (int r = 1; r < n; r++)
            RF_MPI_CHECK_GOTO(MPI_Irecv(&reps[r], (int)sizeof(reps[r]), MPI_BYTE, r, tag_rep,
                                        ctl->comm, &reqs[r]),
                              err, st, out_root);
        for (;;) {
            int active = 0;
            for (int r = 1; r < n; r++)
                active += reqs[r] != MPI_REQUEST_NULL;
            if (!active)
                break;
            st = rf_ctl_wait_some(ctl, reqs, n, deadline, RF_CTL_WAIT_NO_ABORT, NULL, NULL,
                                  &werr);
            if (st != RF_OK)
                break;
        }
        answer.status = RF_OK;
        answer.rank = -1;
        for (int r = 0; r < n; r++) {
            if (reqs[r] != MPI_REQUEST_NULL) {
                answer.status = RF_ERR_TIMEOUT;
                answer.rank = r;
                snprintf(answer.reason, sizeof(answer.reason),
                         "no %s report from rank %d by the deadline", phase, r);
                break;
            }
            if (reps[r].status != RF_OK) {
                answer.status = reps[r].status;
                answer.rank = r;
                reps[r].reason[sizeof(reps[r].reason) - 1] = '\0';
                snprintf(answer.reason, sizeof(answer.reason), "%s", reps[r].reason);
                break;
            }
        }
        rf_ctl_cancel_recvs(reqs, n);
        st = RF_OK;
        rf_ctl_agree_msg_t *out = malloc(sizeof(*out));
        MPI_Request *sreqs = malloc((size_t)n * sizeof(*sreqs));
        if (out == NULL || sreqs == NULL) {
            free(out);
            free(sreqs);
            st = rf_err_set(err, RF_ERR_NOMEM, "%s agreement: out of memory", phase);
            goto out_root;
        }
        *out = answer;
        int k = 0;
        for (int r = 1; r < n; r++) {
            int rc = MPI_Isend(out, (int)sizeof(*out), MPI_BYTE, r, tag_ans, ctl->comm,
                               &sreqs[k]);
            if (rc != MPI_SUCCESS) {
                st = rf_mpi_error(rc, "MPI_Isend(agree answer)", __FILE__, __LINE__, err);
                break;
            }
            k++;
        }
        rf_ctl_outbox_add(ctl, out, sreqs, k, err);
    out_root:
        free(reps);
        free(reqs);
        RF_CHECK(st);
    } else {
        rf_ctl_agree_msg_t *rep = calloc(1, sizeof(*rep));
        MPI_Request *sreq = malloc(sizeof(*sreq));
        if (rep == NULL || sreq == NULL) {
            free(rep);
            free(sreq);
            return rf_err_set(err, RF_ERR_NOMEM, "%s agreement: out of memory", phase);
        }
        rep->status = local_status;
        rep->rank = ctl->rank;
        snprintf(rep->reason, sizeof(rep->reason), "%s", local_msg ? local_msg : "");
        MPI_Request rreq = MPI_REQUEST_NULL;
        int rc = MPI_Isend(rep, (int)sizeof(*rep), MPI_BYTE, 0, tag_rep, ctl->comm, sreq);
        if (rc != MPI_SUCCESS) {
            free(rep);
            free(sreq);
            return rf_mpi_error(rc, "MPI_Isend(agree report)", __FILE__, __LINE__, err);
        }
        rf_ctl_outbox_add(ctl, rep, sreq, 1, err);
        RF_MPI_CHECK(MPI_Irecv(&answer, (int)sizeof(answer), MPI_BYTE, 0, tag_ans, ctl->comm,
                               &rreq),
                     err);
        st = rf_ctl_wait_some(ctl, &rreq, 1, deadline, RF_CTL_WAIT_NO_ABORT, NULL, NULL, &werr);
        if (st != RF_OK) {
            rf_ctl_cancel_recvs(&rreq, 1);
            if (st == RF_ERR_TIMEOUT)
                return rf_err_set(err, st,
                                  "%s of update %u: no answer from rank 0 by the deadline",
                                  phase, update);
            return rf_err_set(err, st, "%s of update %u: %s", phase, update, werr.msg);
        }
    }
    if (answer.status == RF_OK)
        return RF_OK;
    answer.reason[sizeof(answer.reason) - 1] = '\0';
    rf_status_t code = answer.rank == ctl->rank ? (rf_status_t)answer.status : RF_ERR_PEER;
    if (answer.rank == ctl->rank && code == RF_OK)
        code = RF_ERR_INTERNAL;
    return rf_err_set(err, code, "%s of update %u failed at rank %d: %s", phase, update,
                      answer.rank, answer.reason);
}

rf_status_t rf_ctl_agree(rf_ctl_t *ctl, uint32_t update, rf_status_t local_status,
                         const char *local_msg, double deadline, rf_err_t *err)
{
    return agree(ctl, RF_CTL_AGREE_REPORT, RF_CTL_AGREE_ANSWER, "begin", update, local_status,
                 local_msg, deadline, err);
}

rf_status_t rf_ctl_agree_produced(rf_ctl_t *ctl, uint32_t update, rf_status_t local_status,
                                  const char *local_msg, double deadline, rf_err_t *err)
{
    return agree(ctl, RF_CTL_PRODUCED_REPORT, RF_CTL_PRODUCED_ANSWER, "production", update,
                 local_status, local_msg, deadline, err);
}
