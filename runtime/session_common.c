/*
 * refit: what every part of a session uses (runtime/session_int.h): the waits on the session's
 * communicator (rf_session_wait: bounded once the session joined a public call, the leave
 * notice polled), the collectives built on it, the status agreement that ends every
 * collective step (the lowest failing rank's status and message on every rank) and the rank's
 * role. Below session.c (the public calls), session_setup.c (setup and teardown) and
 * session_ckpt.c (checkpoint sources), so that those three call down into one file instead of
 * into each other.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "refit/hashes.h"
#include "refit/time.h"
#include "session_int.h"

/* ---- leaving and waiting ------------------------------------------------------------------ */

/* The notice a rank that leaves (rf_session_destroy_local, a failed wait) leaves for every
 * other rank, on s->comm (no other message of refit's uses this tag there: setup's are
 * 0x1f1..0x1f3, the control channel and the transports have communicators of their own). */
#define SESS_TAG_GONE 0x7e5

typedef struct sess_gone_msg {
    int rank;
    char reason[RF_ERR_MSG_MAX];
} sess_gone_msg_t;

void rf_session_notify_gone(rf_session_t *s, const char *what)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin || s->comm == MPI_COMM_NULL || s->gone_sent)
        return;
    s->gone_sent = true;
    sess_gone_msg_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return;
    m->rank = s->rank;
    snprintf(m->reason, sizeof(m->reason), "%s", what);
    for (int r = 0; r < s->size; r++) {
        MPI_Request req;
        if (r != s->rank && MPI_Isend(m, (int)sizeof(*m), MPI_BYTE, r, SESS_TAG_GONE, s->comm,
                                      &req) == MPI_SUCCESS)
            MPI_Request_free(&req);
    }
    rf_session_park(m); /* MPI may still read it */
}

rf_status_t rf_session_lose(rf_session_t *s, rf_status_t st, rf_err_t *err)
{
    s->lost = true;
    rf_err_set(&s->lost_err, st, "%s", err->msg);
    char why[RF_ERR_MSG_MAX + 16];
    snprintf(why, sizeof(why), "it gave up: %s", err->msg);
    rf_session_notify_gone(s, why);
    return st;
}

rf_status_t rf_session_wait(rf_session_t *s, MPI_Request *req, const char *what, rf_err_t *err)
{
    if (!s->bounded) { /* create, the owned job's setup: every rank calls them at once */
        if (MPI_Wait(req, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return rf_err_set(err, RF_ERR_MPI, "rank %d: %s: MPI_Wait failed", s->rank, what);
        return RF_OK;
    }
    double deadline = rf_time_now() + s->topo.join_timeout_s;
    long sleep_ns = 1000;
    for (;;) {
        int done = 0, gone = 0;
        MPI_Status mst;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return rf_session_lose(s, rf_err_set(err, RF_ERR_MPI, "rank %d: %s: MPI_Test failed",
                                                 s->rank, what), err);
        /* a notice first, even when the operation completed: a rank that gave up on it left
         * its part posted, so the others' completes, and it is gone all the same */
        if (MPI_Iprobe(MPI_ANY_SOURCE, SESS_TAG_GONE, s->comm, &gone, &mst) == MPI_SUCCESS &&
            gone) {
            sess_gone_msg_t m;
            memset(&m, 0, sizeof(m));
            MPI_Recv(&m, (int)sizeof(m), MPI_BYTE, mst.MPI_SOURCE, SESS_TAG_GONE, s->comm,
                     MPI_STATUS_IGNORE);
            m.reason[sizeof(m.reason) - 1] = '\0';
            s->gone_sent = true; /* every rank heard from the leaver itself */
            return rf_session_lose(s, rf_err_set(err, RF_ERR_PEER, "rank %d: %s: rank %d left "
                                                 "the session (%s)", s->rank, what,
                                                 mst.MPI_SOURCE, m.reason), err);
        }
        if (done)
            return RF_OK;
        if (rf_time_now() >= deadline)
            return rf_session_lose(s, rf_err_set(err, RF_ERR_TIMEOUT, "rank %d: %s: not every "
                                                 "rank came within transfer.join_timeout_s %g s "
                                                 "(a rank stopped calling the session: it "
                                                 "raised, exited or hangs)", s->rank, what,
                                                 s->topo.join_timeout_s), err);
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        sleep_ns = sleep_ns * 2 > 1000000 ? 1000000 : sleep_ns * 2;
    }
}

/* ---- collectives on s->comm, each waited for by rf_session_wait --------------------------- */

/* "rf_session_plan: <step>": the call a wait belongs to, for its error. */
static const char *step_name(const rf_session_t *s, const char *step, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s: %s", s->call != NULL ? s->call : "rf_session", step);
    return buf;
}

/* The session is lost already (an earlier wait of this call failed): post nothing more. */
static rf_status_t check_not_lost(const rf_session_t *s, rf_err_t *err)
{
    if (!s->lost)
        return RF_OK;
    return rf_err_reset(err, s->lost_err.status, "%s", s->lost_err.msg);
}

/* The opening of every bounded operation below: refused on a lost session, the step named
 * into what, one heap block of bytes (MPI may still use it after a failed wait: finish_op
 * parks it) holding the in_bytes of in at its start. Out of memory loses the session. */
static rf_status_t op_block(rf_session_t *s, const char *step, size_t bytes, const void *in,
                            size_t in_bytes, char *what, size_t cap, char **blk_p, rf_err_t *err)
{
    *blk_p = NULL;
    RF_CHECK(check_not_lost(s, err));
    step_name(s, step, what, cap);
    char *blk = malloc(bytes + 1);
    if (blk == NULL)
        return rf_session_lose(s, rf_err_reset(err, RF_ERR_NOMEM, "rank %d: %s: out of memory",
                                               s->rank, what), err);
    if (in_bytes > 0)
        memcpy(blk, in, in_bytes);
    *blk_p = blk;
    return RF_OK;
}

/* Posts nothing (post failed: freed) or waits for req over blk: copied out and freed on
 * success, parked when the wait fails (the operation stays posted: it cannot be cancelled,
 * and MPI uses blk when a late rank completes it). */
static rf_status_t finish_op(rf_session_t *s, int rc, MPI_Request *req, void *blk,
                             const char *what, rf_err_t *err)
{
    if (rc != MPI_SUCCESS) {
        free(blk);
        return rf_session_lose(s, rf_err_reset(err, RF_ERR_MPI, "rank %d: %s: posting it "
                                               "failed", s->rank, what), err);
    }
    rf_err_t werr;
    rf_err_clear(&werr);
    if (rf_session_wait(s, req, what, &werr) != RF_OK) {
        if (s->lost)
            rf_session_park(blk);
        else
            free(blk); /* unbounded wait: the operation failed, MPI is done with it */
        return rf_err_reset(err, werr.status, "%s", werr.msg);
    }
    return RF_OK;
}

rf_status_t rf_session_allreduce(rf_session_t *s, const void *in, void *out, int count,
                                 MPI_Datatype dt, MPI_Op op, const char *step, rf_err_t *err)
{
    char what[160], *blk;
    int tsize = 0;
    MPI_Type_size(dt, &tsize);
    size_t n = (size_t)count * (size_t)tsize;
    RF_CHECK(op_block(s, step, 2 * n, in, n, what, sizeof(what), &blk, err));
    MPI_Request req;
    int rc = MPI_Iallreduce(blk, blk + n, count, dt, op, s->comm, &req);
    RF_CHECK(finish_op(s, rc, &req, blk, what, err));
    memcpy(out, blk + n, n);
    free(blk);
    return RF_OK;
}

rf_status_t rf_session_allgather(rf_session_t *s, const void *in, int count, MPI_Datatype dt,
                                 void *out, const char *step, rf_err_t *err)
{
    char what[160], *blk;
    int tsize = 0;
    MPI_Type_size(dt, &tsize);
    size_t n = (size_t)count * (size_t)tsize;
    RF_CHECK(op_block(s, step, n * (size_t)(s->size + 1), in, n, what, sizeof(what), &blk, err));
    MPI_Request req;
    int rc = MPI_Iallgather(blk, count, dt, blk + n, count, dt, s->comm, &req);
    RF_CHECK(finish_op(s, rc, &req, blk, what, err));
    memcpy(out, blk + n, n * (size_t)s->size);
    free(blk);
    return RF_OK;
}

rf_status_t rf_session_bcast(rf_session_t *s, void *buf, int bytes, int root, const char *step,
                             rf_err_t *err)
{
    char what[160], *blk;
    RF_CHECK(op_block(s, step, (size_t)bytes, buf, (size_t)bytes, what, sizeof(what), &blk, err));
    MPI_Request req;
    int rc = MPI_Ibcast(blk, bytes, MPI_BYTE, root, s->comm, &req);
    RF_CHECK(finish_op(s, rc, &req, blk, what, err));
    memcpy(buf, blk, (size_t)bytes);
    free(blk);
    return RF_OK;
}

rf_status_t rf_session_gatherv(rf_session_t *s, const void *in, int bytes, int root,
                              void **out_p, size_t *total_p, const char *step, rf_err_t *err)
{
    char what[160];
    *out_p = NULL;
    *total_p = 0;
    int *counts = calloc((size_t)s->size + 1, sizeof(int));
    if (counts == NULL)
        return rf_session_lose(s, rf_err_reset(err, RF_ERR_NOMEM, "rank %d: %s: out of memory",
                                               s->rank, step_name(s, step, what, sizeof(what))),
                               err);
    rf_status_t st = rf_session_allgather(s, &bytes, 1, MPI_INT, counts, step, err);
    size_t total = 0;
    for (int r = 0; r < s->size && st == RF_OK; r++)
        total += (size_t)counts[r];
    if (st != RF_OK) {
        free(counts);
        return st;
    }
    step_name(s, step, what, sizeof(what));
    /* one block MPI may use until the gather completes: counts, displacements, this rank's
     * bytes and (root) everyone's */
    size_t head = 2 * (size_t)s->size * sizeof(int);
    size_t recv = s->rank == root ? total : 0;
    char *blk = malloc(head + (size_t)bytes + recv + 1);
    if (blk == NULL) {
        free(counts);
        return rf_session_lose(s, rf_err_reset(err, RF_ERR_NOMEM, "rank %d: %s: out of memory",
                                               s->rank, what), err);
    }
    int *c = (int *)blk, *d = c + s->size;
    for (int r = 0, off = 0; r < s->size; off += counts[r], r++) {
        c[r] = counts[r];
        d[r] = off;
    }
    free(counts);
    char *mine = blk + head, *all = mine + bytes;
    if (bytes > 0)
        memcpy(mine, in, (size_t)bytes);
    MPI_Request req;
    int rc = MPI_Igatherv(mine, bytes, MPI_BYTE, all, c, d, MPI_BYTE, root, s->comm, &req);
    RF_CHECK(finish_op(s, rc, &req, blk, what, err));
    if (s->rank == root) {
        char *out = malloc(total + 1);
        if (out == NULL) {
            free(blk);
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: %s: out of memory", s->rank, what);
        }
        memcpy(out, all, total);
        *out_p = out;
        *total_p = total;
    }
    free(blk);
    return RF_OK;
}

rf_status_t rf_session_barrier(rf_session_t *s, const char *step, rf_err_t *err)
{
    char what[160];
    RF_CHECK(check_not_lost(s, err));
    step_name(s, step, what, sizeof(what));
    MPI_Request req;
    int rc = MPI_Ibarrier(s->comm, &req);
    return finish_op(s, rc, &req, NULL, what, err);
}

rf_status_t rf_session_send(rf_session_t *s, const void *buf, int bytes, int dst, int tag,
                            const char *step, rf_err_t *err)
{
    char what[160], *blk;
    RF_CHECK(op_block(s, step, (size_t)bytes, buf, (size_t)bytes, what, sizeof(what), &blk, err));
    MPI_Request req;
    int rc = MPI_Isend(blk, bytes, MPI_BYTE, dst, tag, s->comm, &req);
    RF_CHECK(finish_op(s, rc, &req, blk, what, err));
    free(blk);
    return RF_OK;
}

rf_status_t rf_session_recv(rf_session_t *s, void *buf, int bytes, int src, int tag,
                            const char *step, rf_err_t *err)
{
    char what[160], *blk;
    RF_CHECK(op_block(s, step, (size_t)bytes, NULL, 0, what, sizeof(what), &blk, err));
    MPI_Request req;
    int rc = MPI_Irecv(blk, bytes, MPI_BYTE, src, tag, s->comm, &req);
    RF_CHECK(finish_op(s, rc, &req, blk, what, err));
    memcpy(buf, blk, (size_t)bytes);
    free(blk);
    return RF_OK;
}

/* ---- the tests' stops -------------------------------------------------------------------- */

rf_status_t rf_session_test_stop(rf_session_t *s, const char *env, const char *where,
                                 rf_err_t *err)
{
#ifdef REFIT_TEST_HOOKS
    const char *h = getenv(env);
    if (h == NULL || *h == '\0')
        return RF_OK;
    if (strcmp(h, "leave") == 0)
        return rf_session_lose(s, rf_err_set(err, RF_ERR_STATE, "rank %d: rf_session_plan: left "
                                             "%s (%s=leave)", s->rank, where, env), err);
    if (strncmp(h, "stall:", 6) == 0) {
        double sec = atof(h + 6);
        struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
        nanosleep(&ts, NULL);
    }
#else
    (void)s;
    (void)env;
    (void)where;
    (void)err;
#endif
    return RF_OK;
}

/* ---- the plan hash (rf_session_plan_info_t.hash) ------------------------------------------ */

rf_status_t rf_session_decisions_hash(const rf_plan_t *p, uint64_t *h_p)
{
    uint64_t *dec = calloc((size_t)p->nlayers * 2 + 1, sizeof(uint64_t));
    if (dec == NULL)
        return RF_ERR_NOMEM;
    for (int l = 0; l < p->nlayers; l++) {
        dec[2 * l] = (uint64_t)p->layers[l].module;
        dec[2 * l + 1] = (uint64_t)p->layers[l].mode;
    }
    *h_p = rf_hash64(dec, (size_t)p->nlayers * 2 * sizeof(uint64_t));
    free(dec);
    return RF_OK;
}

rf_status_t rf_session_plan_hash(uint64_t topo_hash, uint64_t digest, const uint8_t *narrowed,
                                 int n, const uint64_t *rank_hashes, int size, uint64_t *h_p)
{
    uint64_t *all = calloc((size_t)size + 3, sizeof(uint64_t));
    if (all == NULL)
        return RF_ERR_NOMEM;
    all[0] = topo_hash;
    all[1] = digest;
    all[2] = rf_hash64(narrowed, (size_t)n);
    memcpy(all + 3, rank_hashes, (size_t)size * sizeof(uint64_t));
    *h_p = rf_hash64(all, ((size_t)size + 3) * sizeof(uint64_t));
    free(all);
    return RF_OK;
}

/* ---- the status agreement ----------------------------------------------------------------- */

rf_status_t rf_session_agree_comm(MPI_Comm comm, rf_status_t st, rf_err_t *err)
{
    int size, rank, mine, first;
    struct {
        int status;
        char msg[RF_ERR_MSG_MAX];
    } rep;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    mine = st == RF_OK ? size : rank;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return rf_err_reset(err, RF_ERR_MPI, "rank %d: MPI_Allreduce failed agreeing a status",
                            rank);
    if (first == size)
        return RF_OK;
    rep.status = (int)(err->status != RF_OK ? err->status : st);
    snprintf(rep.msg, sizeof(rep.msg), "%s", err->msg);
    if (MPI_Bcast(&rep, (int)sizeof(rep), MPI_BYTE, first, comm) != MPI_SUCCESS)
        return rf_err_reset(err, RF_ERR_MPI, "rank %d: MPI_Bcast failed agreeing a status", rank);
    if (rank != first)
        rf_err_reset(err, (rf_status_t)rep.status, "%s", rep.msg);
    return (rf_status_t)rep.status;
}

rf_status_t rf_session_agree(rf_session_t *s, rf_status_t st, rf_err_t *err)
{
    int mine = st == RF_OK ? s->size : s->rank, first = s->size;
    struct {
        int status;
        char msg[RF_ERR_MSG_MAX];
    } rep;
    RF_CHECK(rf_session_allreduce(s, &mine, &first, 1, MPI_INT, MPI_MIN, "agreeing a step's "
                                  "status", err));
    if (first == s->size)
        return RF_OK;
    memset(&rep, 0, sizeof(rep));
    rep.status = (int)(err->status != RF_OK ? err->status : st);
    snprintf(rep.msg, sizeof(rep.msg), "%s", err->msg);
    RF_CHECK(rf_session_bcast(s, &rep, (int)sizeof(rep), first, "agreeing a step's status",
                              err));
    if (s->rank != first)
        rf_err_reset(err, (rf_status_t)rep.status, "%s", rep.msg);
    return (rf_status_t)rep.status;
}

rf_session_role_t rf_session_role(const rf_session_t *s)
{
    return s != NULL && rf_session_is_rollout(s) ? RF_SESSION_ROLLOUT : RF_SESSION_TRAINER;
}

const char *rf_session_role_name(const rf_session_t *s)
{
    return rf_session_role(s) == RF_SESSION_ROLLOUT ? "rollout" : "trainer";
}

/* Memory MPI may still use after a local teardown (a lost or locally destroyed session: a
 * posted collective's buffers, the transfer engine and control channel whose requests and
 * communicators stay with MPI until MPI_Finalize). Kept reachable here, never freed: the
 * process owns it until it ends. A block that cannot be recorded stays where it was. */
static void **parked;
static size_t nparked, parked_cap;

void rf_session_park(void *p)
{
    if (p == NULL)
        return;
    if (nparked == parked_cap) {
        size_t cap = parked_cap ? 2 * parked_cap : 64;
        void **n = realloc(parked, cap * sizeof(*n));
        if (n == NULL)
            return;
        parked = n;
        parked_cap = cap;
    }
    parked[nparked++] = p;
}
