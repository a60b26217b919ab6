/*
 * refit: the stage gather (include/refit/transport.h, "the stage gather"; DESIGN.md
 * section 6): the MPI gather every transport without its own uses, and the dispatch to a
 * transport's own (rf_xfer_ops_t gather entries, transport/xfer_int.h).
 *
 * MPI gather: point-to-point on the trainer-only communicator. The stage sender posts one
 * receive per contributor of a chunk (tag RF_XFER_GATHER_TAG(update, seq)) and counts each
 * message it matched per peer (recv_from); a contributor posts one send per chunk, at most
 * RF_XFER_GATHER_MAX_SENDS in flight, and counts them (posted). After a FAILED update the
 * drain exchanges those counts (tag RF_XFER_GATHER_COUNT_TAG) and receives into scratch every
 * message posted but never matched, so none matches a later update with the same tags.
 *
 * A transport's own gather (nccl) is called through x->ops for the stage it carries; its
 * messages are not counted. The tests' wire (rf_xfer_gather_use_test_wire) runs that same
 * uncounted path over MPI.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "refit/control.h"
#include "refit/transport.h"
#include "xfer_int.h"

struct rf_xfer_gather {
    rf_xfer_t *x;             /* borrowed: its control channel and transport */
    const rf_xfer_ops_t *own; /* the transport's own gather of this stage, or NULL */
    int test_wire;            /* the tests' wire (uncounted, over MPI) */
    MPI_Comm comm;            /* trainer-only communicator (borrowed) */
    int rank, stage, nranks;
    /* counts of the current update, for the drain */
    uint64_t *recv_from;      /* sender: [nranks] messages matched per trainer rank */
    uint64_t posted;          /* contributor: messages posted to the sender */
    MPI_Request out_reqs[RF_XFER_GATHER_MAX_SENDS]; /* contributor: sends in flight
                                                       (MPI_REQUEST_NULL when done) */
    char *out_bufs[RF_XFER_GATHER_MAX_SENDS];       /* their buffers (owned) */
    int n_out;
    /* sender: one chunk's receives, from rf_xfer_gather_recv to rf_xfer_gather_wait */
    int n_in;
    int in_peers[RF_XFER_GATHER_MAX_PEERS];
    uint64_t in_bytes[RF_XFER_GATHER_MAX_PEERS];
    MPI_Request in_reqs[RF_XFER_GATHER_MAX_PEERS];
    void *in_dst;
};

/* The tests' wire: one tag; MPI keeps one sender's messages in order, as NCCL does. */
#define RF_TEST_WIRE_TAG 0x7e57

rf_status_t rf_xfer_gather_create(rf_xfer_t *x, MPI_Comm comm, int rank, int stage, int nranks,
                                  rf_xfer_gather_t **g_p, rf_err_t *err)
{
    if (x == NULL || g_p == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "gather: null argument");
    rf_xfer_gather_t *g = calloc(1, sizeof(*g));
    if (g == NULL || (g->recv_from = calloc((size_t)nranks + 1, sizeof(uint64_t))) == NULL) {
        free(g);
        return rf_err_set(err, RF_ERR_NOMEM, "trainer: out of memory");
    }
    g->x = x;
    g->comm = comm;
    g->rank = rank;
    g->stage = stage;
    g->nranks = nranks;
    const rf_xfer_ops_t *o = x->ops;
    if (o != NULL && o->gather_recv != NULL && o->gather_send != NULL &&
        (o->gather_has == NULL || o->gather_has(x, stage)))
        g->own = o;
    for (int i = 0; i < RF_XFER_GATHER_MAX_SENDS; i++)
        g->out_reqs[i] = MPI_REQUEST_NULL;
    *g_p = g;
    return RF_OK;
}

void rf_xfer_gather_use_test_wire(rf_xfer_gather_t *g)
{
    if (g != NULL && g->own == NULL)
        g->test_wire = 1;
}

void rf_xfer_gather_destroy(rf_xfer_gather_t *g)
{
    if (g == NULL)
        return;
    /* sends still in flight belong to a peer that never received them: release, then free */
    for (int i = 0; i < g->n_out; i++) {
        if (g->out_reqs[i] != MPI_REQUEST_NULL)
            MPI_Request_free(&g->out_reqs[i]); /* its buffer may still be read: leaked */
        else
            free(g->out_bufs[i]);
    }
    free(g->recv_from);
    free(g);
}

void rf_xfer_gather_begin(rf_xfer_gather_t *g)
{
    g->posted = 0;
    memset(g->recv_from, 0, (size_t)g->nranks * sizeof(uint64_t));
}

/* Counted: the MPI gather's messages (not a transport's own, not the tests' wire). */
static int counted(const rf_xfer_gather_t *g)
{
    return g->own == NULL && !g->test_wire;
}

/* ---- sender ------------------------------------------------------------------------------ */

rf_status_t rf_xfer_gather_recv(rf_xfer_gather_t *g, uint32_t update, uint32_t seq,
                                const int *peers, const uint64_t *bytes, int n, void *dst,
                                rf_err_t *err)
{
    uint64_t off = 0;
    if (n < 0 || n > RF_XFER_GATHER_MAX_PEERS)
        return rf_err_set(err, RF_ERR_INVALID, "gather: %d peers", n);
    g->n_in = n;
    g->in_dst = dst;
    for (int q = 0; q < n; q++) {
        g->in_peers[q] = peers[q];
        g->in_bytes[q] = bytes[q];
        if (counted(g))
            MPI_Irecv((char *)dst + off, (int)bytes[q], MPI_BYTE, peers[q],
                      RF_XFER_GATHER_TAG(update, seq), g->comm, &g->in_reqs[q]);
        off += bytes[q];
    }
    return RF_OK;
}

/* Cancels the gather receives still active (from in_peers[]); completed or matched ones
 * count as received. */
static void recv_cancel(rf_xfer_gather_t *g)
{
    for (int q = 0; q < g->n_in; q++) {
        MPI_Status s;
        int cancelled = 0;
        if (g->in_reqs[q] == MPI_REQUEST_NULL) {
            g->recv_from[g->in_peers[q]]++; /* completed during the failed wait */
            continue;
        }
        MPI_Cancel(&g->in_reqs[q]);
        MPI_Wait(&g->in_reqs[q], &s);
        MPI_Test_cancelled(&s, &cancelled);
        if (!cancelled)
            g->recv_from[g->in_peers[q]]++;
    }
}

/* The tests' wire, receiving side: a failed wait cancels the receives (enough for the tests'
 * clean runs: a transport's own gather resets itself on failure). */
static rf_status_t test_wire_recv(rf_xfer_gather_t *g, double deadline, rf_err_t *err)
{
    uint64_t off = 0;
    for (int q = 0; q < g->n_in; q++) {
        MPI_Irecv((char *)g->in_dst + off, (int)g->in_bytes[q], MPI_BYTE, g->in_peers[q],
                  RF_TEST_WIRE_TAG, g->comm, &g->in_reqs[q]);
        off += g->in_bytes[q];
    }
    rf_status_t st = rf_ctl_wait(g->x->ctl, g->in_reqs, g->n_in, deadline, err);
    if (st != RF_OK)
        rf_ctl_cancel_recvs(g->in_reqs, g->n_in);
    return st;
}

rf_status_t rf_xfer_gather_wait(rf_xfer_gather_t *g, double deadline, rf_err_t *err)
{
    int n = g->n_in;
    rf_status_t st;
    if (n == 0)
        return RF_OK;
    if (g->own != NULL) {
        st = g->own->gather_recv(g->x, g->stage, g->in_peers, g->in_bytes, n, g->in_dst,
                                 deadline, err);
    } else if (g->test_wire) {
        st = test_wire_recv(g, deadline, err);
    } else {
        st = rf_ctl_wait(g->x->ctl, g->in_reqs, n, deadline, err);
        if (st != RF_OK) /* parts still missing: cancel (a matched receive counts) */
            recv_cancel(g);
        else
            for (int q = 0; q < n; q++)
                g->recv_from[g->in_peers[q]]++;
    }
    g->n_in = 0;
    return st;
}

/* ---- contributor ------------------------------------------------------------------------- */

/* Frees the buffers of completed sends, compacting the in-flight list. */
static void out_reap(rf_xfer_gather_t *g)
{
    int k = 0;
    for (int i = 0; i < g->n_out; i++) {
        if (g->out_reqs[i] == MPI_REQUEST_NULL) {
            free(g->out_bufs[i]);
            continue;
        }
        g->out_reqs[k] = g->out_reqs[i];
        g->out_bufs[k++] = g->out_bufs[i];
    }
    for (int i = k; i < g->n_out; i++) {
        g->out_reqs[i] = MPI_REQUEST_NULL;
        g->out_bufs[i] = NULL;
    }
    g->n_out = k;
}

rf_status_t rf_xfer_gather_settle(rf_xfer_gather_t *g, int keep, double deadline,
                                  rf_err_t *err)
{
    if (keep < 0)
        keep = 0;
    if (g->n_out <= keep)
        return RF_OK;
    /* keep 0: every send; else the oldest ones beyond keep */
    RF_CHECK(rf_ctl_wait(g->x->ctl, g->out_reqs, keep == 0 ? g->n_out : g->n_out - keep,
                         deadline, err));
    out_reap(g);
    return RF_OK;
}

rf_status_t rf_xfer_gather_send(rf_xfer_gather_t *g, uint32_t update, uint32_t seq, int sender,
                                void *msg, uint64_t bytes, int window, double deadline,
                                rf_err_t *err)
{
    if (g->own != NULL) {
        /* returns once the message is on its way, msg reusable */
        rf_status_t st = g->own->gather_send(g->x, g->stage, sender, msg, bytes, deadline, err);
        free(msg);
        return st;
    }
    if (g->test_wire) {
        MPI_Request req;
        MPI_Isend(msg, (int)bytes, MPI_BYTE, sender, RF_TEST_WIRE_TAG, g->comm, &req);
        rf_status_t st = rf_ctl_wait(g->x->ctl, &req, 1, deadline, err);
        if (st == RF_OK)
            free(msg); /* else the send is left to the job's end, and its buffer with it */
        return st;
    }
    if (window < 1)
        window = 1;
    if (window > RF_XFER_GATHER_MAX_SENDS)
        window = RF_XFER_GATHER_MAX_SENDS;
    if (g->n_out >= window) { /* the oldest message done before its buffer is reused */
        rf_err_t e;
        rf_err_clear(&e);
        rf_status_t st = rf_xfer_gather_settle(g, window - 1, deadline, &e);
        if (st != RF_OK) {
            free(msg);
            return rf_err_set(err, st, "sending gather parts of stage %d to rank %d: %s",
                              g->stage, sender, e.msg);
        }
    }
    g->out_bufs[g->n_out] = msg;
    MPI_Isend(msg, (int)bytes, MPI_BYTE, sender, RF_XFER_GATHER_TAG(update, seq), g->comm,
              &g->out_reqs[g->n_out]);
    g->n_out++;
    g->posted++;
    return RF_OK;
}

/* ---- the drain after a FAILED update ----------------------------------------------------- */

typedef struct req_ctx {
    MPI_Request *reqs;
    int n;
} req_ctx_t;

static int reqs_test(void *vctx, rf_err_t *err)
{
    req_ctx_t *c = vctx;
    int flag = 0;
    if (c->n == 0)
        return 1;
    if (MPI_Testall(c->n, c->reqs, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        return rf_err_set(err, RF_ERR_MPI, "trainer drain: MPI_Testall failed");
    return flag;
}

typedef struct gdrain_ctx {
    rf_xfer_gather_t *g;
    int src;
} gdrain_ctx_t;

/* One stale gather message from src, if one is waiting: received into scratch. */
static int gdrain_test(void *vctx, rf_err_t *err)
{
    gdrain_ctx_t *d = vctx;
    int found = 0, count = 0;
    MPI_Message m;
    MPI_Status s;
    if (MPI_Improbe(d->src, MPI_ANY_TAG, d->g->comm, &found, &m, &s) != MPI_SUCCESS)
        return rf_err_set(err, RF_ERR_MPI, "trainer drain: MPI_Improbe failed");
    if (!found)
        return 0;
    MPI_Get_count(&s, MPI_BYTE, &count);
    char *scratch = malloc((size_t)count + 1);
    if (scratch == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer drain: out of memory");
    int rc = MPI_Mrecv(scratch, count, MPI_BYTE, &m, MPI_STATUS_IGNORE);
    free(scratch);
    if (rc != MPI_SUCCESS)
        return rf_err_set(err, RF_ERR_MPI, "trainer drain: MPI_Mrecv failed");
    return 1;
}

/* Contributor: the count to the sender, then its sends completed. */
static rf_status_t drain_contributor(rf_xfer_gather_t *g, uint32_t update, int sender,
                                     double deadline, rf_err_t *err)
{
    rf_ctl_t *ctl = g->x->ctl;
    rf_err_t e;
    rf_err_clear(&e);
    uint64_t *posted = malloc(sizeof(uint64_t));
    MPI_Request creq;
    if (posted == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer drain: out of memory");
    *posted = g->posted;
    MPI_Isend(posted, 1, MPI_UINT64_T, sender, RF_XFER_GATHER_COUNT_TAG(update), g->comm, &creq);
    req_ctx_t c = {&creq, 1};
    rf_status_t st = rf_ctl_wait_fn(ctl, reqs_test, &c, deadline, RF_CTL_WAIT_NO_ABORT, &e);
    if (st == RF_OK) {
        c.reqs = g->out_reqs;
        c.n = g->n_out;
        st = rf_ctl_wait_fn(ctl, reqs_test, &c, deadline, RF_CTL_WAIT_NO_ABORT, &e);
    }
    if (st != RF_OK) {
        if (creq != MPI_REQUEST_NULL)
            MPI_Request_free(&creq); /* wait no more; `posted` may still be read: leaked */
        else
            free(posted);
        return rf_err_set(err, st,
                          "trainer drain: rank %d: %d gather send(s) to rank %d still "
                          "outstanding: %s",
                          g->rank, g->n_out, sender,
                          st == RF_ERR_TIMEOUT ? "deadline expired" : e.msg);
    }
    free(posted);
    out_reap(g);
    g->posted = 0;
    return RF_OK;
}

rf_status_t rf_xfer_gather_drain(rf_xfer_gather_t *g, uint32_t update, int sender,
                                 const int *contributors, int n, uint64_t *drained_p,
                                 double deadline, rf_err_t *err)
{
    if (contributors == NULL)
        return drain_contributor(g, update, sender, deadline, err);
    rf_ctl_t *ctl = g->x->ctl;
    rf_err_t e;
    rf_err_clear(&e);
    for (int k = 0; k < n; k++) {
        int r = contributors[k];
        uint64_t posted = 0;
        MPI_Request creq;
        MPI_Irecv(&posted, 1, MPI_UINT64_T, r, RF_XFER_GATHER_COUNT_TAG(update), g->comm, &creq);
        req_ctx_t c = {&creq, 1};
        rf_status_t st = rf_ctl_wait_fn(ctl, reqs_test, &c, deadline, RF_CTL_WAIT_NO_ABORT, &e);
        if (st != RF_OK) {
            rf_ctl_cancel_recvs(&creq, 1);
            return rf_err_set(err, st, "trainer drain: no gather count from rank %d: %s", r,
                              st == RF_ERR_TIMEOUT ? "deadline expired" : e.msg);
        }
        while (g->recv_from[r] < posted) {
            gdrain_ctx_t d = {g, r};
            st = rf_ctl_wait_fn(ctl, gdrain_test, &d, deadline, RF_CTL_WAIT_NO_ABORT, &e);
            if (st != RF_OK)
                return rf_err_set(err, st,
                                  "trainer drain: %" PRIu64 " of %" PRIu64 " gather messages "
                                  "from rank %d still missing: %s",
                                  posted - g->recv_from[r], posted, r,
                                  st == RF_ERR_TIMEOUT ? "deadline expired" : e.msg);
            g->recv_from[r]++;
            (*drained_p)++;
        }
    }
    return RF_OK;
}
