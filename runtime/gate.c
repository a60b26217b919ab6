/*
 * refit: the completion gate (DESIGN.md section 10; API in include/refit/control.h).
 *
 * Every rank sends its record to world rank 0 on the control channel (tag of this update);
 * rank 0 collects them until deadline + RF_GATE_GRACE_S, decides, and sends each rank the
 * verdict plus, for drain, how many chunk messages each source posted to that rank. The
 * waits do not poll ABORT: by now failures are known and are exactly what the gate collects.
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "refit/checks.h"
#include "refit/control.h"

/* Wire form of a record: this header, then rf_peer_counts_t[nranks]. */
typedef struct rf_gate_wire {
    int32_t status;
    int32_t origin;
    int32_t code;
    int32_t nranks;
    uint64_t mode_layers[RF_GATE_NMODES];
    uint64_t plan_mode_layers[RF_GATE_NMODES];
    uint64_t manifest_digest;
    char reason[RF_ERR_MSG_MAX];
} rf_gate_wire_t;

/* Wire form of a verdict: this header, then uint64_t posted_from[nranks]. */
typedef struct rf_verdict_wire {
    int32_t committed;
    int32_t rank;
    int32_t code;
    int32_t nranks;
    char reason[RF_ERR_MSG_MAX];
} rf_verdict_wire_t;

void rf_gate_record_set_result(rf_gate_record_t *rec, const rf_ctl_t *ctl, rf_status_t status,
                               const rf_err_t *err)
{
    rec->status = status;
    rec->code = status;
    rec->origin = rf_ctl_rank(ctl);
    rec->reason[0] = '\0';
    if (status == RF_OK)
        return;
    snprintf(rec->reason, sizeof(rec->reason), "%s",
             err && err->msg[0] ? err->msg : rf_status_string(status));
    int abort_origin = rf_ctl_abort_origin(ctl, NULL, NULL);
    if (status == RF_ERR_PEER && abort_origin >= 0)
        rec->origin = abort_origin;
}

rf_status_t rf_gate_expect_init(rf_gate_expect_t *expect, int nranks, rf_err_t *err)
{
    if (expect == NULL || nranks <= 0)
        return rf_err_set(err, RF_ERR_INVALID, "gate expectation: bad arguments");
    size_t n = (size_t)nranks * (size_t)nranks;
    expect->nranks = nranks;
    expect->chunks = calloc(n, sizeof(uint64_t));
    expect->bytes = calloc(n, sizeof(uint64_t));
    if (expect->chunks == NULL || expect->bytes == NULL) {
        rf_gate_expect_fini(expect);
        return rf_err_set(err, RF_ERR_NOMEM, "gate expectation: out of memory");
    }
    return RF_OK;
}

void rf_gate_expect_fini(rf_gate_expect_t *expect)
{
    if (expect == NULL)
        return;
    free(expect->chunks);
    free(expect->bytes);
    expect->chunks = NULL;
    expect->bytes = NULL;
}

void rf_gate_verdict_fini(rf_gate_verdict_t *verdict)
{
    if (verdict == NULL)
        return;
    free(verdict->posted_from);
    verdict->posted_from = NULL;
}

static size_t record_bytes(int nranks)
{
    return sizeof(rf_gate_wire_t) + (size_t)nranks * sizeof(rf_peer_counts_t);
}

static size_t verdict_bytes(int nranks)
{
    return sizeof(rf_verdict_wire_t) + (size_t)nranks * sizeof(uint64_t);
}

static void record_pack(const rf_gate_record_t *rec, int nranks, unsigned char *buf)
{
    rf_gate_wire_t w;
    memset(&w, 0, sizeof(w));
    w.status = rec->status;
    w.origin = rec->origin;
    w.code = rec->code;
    w.nranks = rec->nranks;
    memcpy(w.mode_layers, rec->mode_layers, sizeof(w.mode_layers));
    memcpy(w.plan_mode_layers, rec->plan_mode_layers, sizeof(w.plan_mode_layers));
    w.manifest_digest = rec->manifest_digest;
    snprintf(w.reason, sizeof(w.reason), "%s", rec->reason);
    memcpy(buf, &w, sizeof(w));
    rf_peer_counts_t *pc = (rf_peer_counts_t *)(buf + sizeof(w));
    for (int r = 0; r < nranks; r++) {
        if (rec->peers != NULL && r < rec->nranks)
            pc[r] = rec->peers[r];
        else
            memset(&pc[r], 0, sizeof(pc[r]));
    }
}

typedef struct gate_decision {
    int committed;
    int rank;
    rf_status_t code;
    char reason[RF_ERR_MSG_MAX];
} gate_decision_t;

#define WIRE(buf, r, sz) ((const rf_gate_wire_t *)((buf) + (size_t)(r) * (sz)))
#define PEERS(buf, r, sz) ((const rf_peer_counts_t *)((buf) + (size_t)(r) * (sz) + \
                                                      sizeof(rf_gate_wire_t)))

/* Rank 0's decision over the records (have[r] = 0 when rank r's report is missing). */
static void gate_decide(const unsigned char *recs, const int *have, int n, size_t sz,
                        const rf_gate_expect_t *expect, gate_decision_t *d)
{
    d->committed = 0;
    d->rank = -1;
    d->code = RF_OK;
    d->reason[0] = '\0';
    /* 1: the lowest rank that failed on its own (or whose report is missing) */
    for (int r = 0; r < n; r++) {
        if (!have[r]) {
            d->rank = r;
            d->code = RF_ERR_TIMEOUT;
            snprintf(d->reason, sizeof(d->reason), "no gate report from rank %d by the deadline",
                     r);
            return;
        }
        const rf_gate_wire_t *w = WIRE(recs, r, sz);
        if (w->status != RF_OK && w->code != RF_ERR_PEER) {
            d->rank = r;
            d->code = (rf_status_t)w->code;
            snprintf(d->reason, sizeof(d->reason), "%.*s", RF_ERR_MSG_MAX - 1, w->reason);
            return;
        }
    }
    /* 2: only peer failures: name the originator the lowest such rank names */
    for (int r = 0; r < n; r++) {
        const rf_gate_wire_t *w = WIRE(recs, r, sz);
        if (w->status != RF_OK) {
            d->rank = w->origin >= 0 && w->origin < n ? w->origin : r;
            d->code = RF_ERR_PEER;
            snprintf(d->reason, sizeof(d->reason), "rank %d reports: %.*s", r, 400, w->reason);
            return;
        }
    }
    /* 3: every rank OK: rank 0 checks counts, modes and digests */
    const rf_gate_wire_t *w0 = WIRE(recs, 0, sz);
    for (int r = 0; r < n; r++) {
        const rf_gate_wire_t *w = WIRE(recs, r, sz);
        const rf_peer_counts_t *pc = PEERS(recs, r, sz);
        d->rank = r;
        d->code = RF_ERR_MISMATCH;
        if (w->nranks != n) {
            snprintf(d->reason, sizeof(d->reason), "rank %d reports %d ranks, world has %d", r,
                     w->nranks, n);
            return;
        }
        if (w->manifest_digest != w0->manifest_digest) {
            snprintf(d->reason, sizeof(d->reason),
                     "rank %d manifest digest %016" PRIx64 " != rank 0's %016" PRIx64, r,
                     w->manifest_digest, w0->manifest_digest);
            return;
        }
        static const char *const mode_names[RF_GATE_NMODES] = {"direct", "runtime_view",
                                                               "layerwise"};
        for (int m = 0; m < RF_GATE_NMODES; m++) {
            if (w->mode_layers[m] != w->plan_mode_layers[m]) {
                snprintf(d->reason, sizeof(d->reason),
                         "rank %d applied %" PRIu64 " %s layers, its plan has %" PRIu64, r,
                         w->mode_layers[m], mode_names[m], w->plan_mode_layers[m]);
                return;
            }
        }
        if (expect == NULL || expect->nranks != n)
            continue;
        for (int p = 0; p < n; p++) {
            size_t out = (size_t)r * (size_t)n + (size_t)p, in = (size_t)p * (size_t)n + (size_t)r;
            if (pc[p].chunks_sent != expect->chunks[out] || pc[p].bytes_sent != expect->bytes[out]) {
                snprintf(d->reason, sizeof(d->reason),
                         "rank %d sent %" PRIu64 " chunks (%" PRIu64 " bytes) to rank %d, "
                         "expected %" PRIu64 " (%" PRIu64 " bytes)",
                         r, pc[p].chunks_sent, pc[p].bytes_sent, p, expect->chunks[out],
                         expect->bytes[out]);
                return;
            }
            if (pc[p].chunks_recv != expect->chunks[in] || pc[p].bytes_recv != expect->bytes[in]) {
                snprintf(d->reason, sizeof(d->reason),
                         "rank %d received %" PRIu64 " chunks (%" PRIu64 " bytes) from rank %d, "
                         "expected %" PRIu64 " (%" PRIu64 " bytes)",
                         r, pc[p].chunks_recv, pc[p].bytes_recv, p, expect->chunks[in],
                         expect->bytes[in]);
                return;
            }
        }
    }
    d->committed = 1;
    d->rank = -1;
    d->code = RF_OK;
    d->reason[0] = '\0';
}

static rf_status_t verdict_result(const rf_ctl_t *ctl, uint32_t update,
                                  const rf_gate_verdict_t *v, rf_err_t *err)
{
    if (v->committed)
        return RF_OK;
    rf_status_t code = v->code != RF_OK ? v->code : RF_ERR_INTERNAL;
    (void)ctl;
    return rf_err_set(err, code, "update %u failed at rank %d: %s", update, v->rank, v->reason);
}

static rf_status_t gate_root(rf_ctl_t *ctl, uint32_t update, const rf_gate_record_t *mine,
                             const rf_gate_expect_t *expect, double deadline,
                             rf_gate_verdict_t *v, rf_err_t *err)
{
    const int n = rf_ctl_size(ctl);
    const size_t sz = record_bytes(n), vsz = verdict_bytes(n);
    rf_status_t st = RF_OK;
    unsigned char *recs = calloc((size_t)n, sz);
    int *have = calloc((size_t)n, sizeof(int));
    MPI_Request *reqs = malloc((size_t)n * sizeof(*reqs));
    if (recs == NULL || have == NULL || reqs == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "gate: out of memory");
        goto out;
    }
    record_pack(mine, n, recs);
    have[0] = 1;
    reqs[0] = MPI_REQUEST_NULL;
    for (int r = 1; r < n; r++)
        reqs[r] = MPI_REQUEST_NULL;
    for (int r = 1; r < n; r++)
        RF_MPI_CHECK_GOTO(MPI_Irecv(recs + (size_t)r * sz, (int)sz, MPI_BYTE, r,
                                    RF_CTL_TAG(RF_CTL_GATE_REPORT, update), rf_ctl_comm(ctl),
                                    &reqs[r]),
                          err, st, out_cancel);
    for (;;) {
        int active = 0;
        for (int r = 1; r < n; r++)
            active += reqs[r] != MPI_REQUEST_NULL;
        if (!active)
            break;
        rf_err_t werr;
        rf_err_clear(&werr);
        if (rf_ctl_wait_some(ctl, reqs, n, deadline + RF_GATE_GRACE_S, RF_CTL_WAIT_NO_ABORT,
                             NULL, NULL, &werr) != RF_OK)
            break; /* missing reports are named by the decision */
    }
    for (int r = 1; r < n; r++)
        have[r] = reqs[r] == MPI_REQUEST_NULL;
    rf_ctl_cancel_recvs(reqs, n);

    gate_decision_t d;
    gate_decide(recs, have, n, sz, expect, &d);
    v->committed = d.committed;
    v->rank = d.rank;
    v->code = d.code;
    snprintf(v->reason, sizeof(v->reason), "%s", d.reason);

    /* one verdict per rank: the posted counts differ per destination */
    for (int r = n - 1; r >= 0; r--) {
        unsigned char *buf = malloc(vsz);
        if (buf == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "gate: out of memory");
            goto out;
        }
        rf_verdict_wire_t w;
        memset(&w, 0, sizeof(w));
        w.committed = d.committed;
        w.rank = d.rank;
        w.code = d.code;
        w.nranks = n;
        snprintf(w.reason, sizeof(w.reason), "%s", d.reason);
        memcpy(buf, &w, sizeof(w));
        uint64_t *posted = (uint64_t *)(buf + sizeof(w));
        for (int s = 0; s < n; s++)
            posted[s] = have[s] ? PEERS(recs, s, sz)[r].chunks_sent : RF_GATE_UNKNOWN;
        if (r == 0) {
            memcpy(v->posted_from, posted, (size_t)n * sizeof(uint64_t));
            free(buf);
            continue;
        }
        MPI_Request *sreq = malloc(sizeof(*sreq));
        if (sreq == NULL) {
            free(buf);
            st = rf_err_set(err, RF_ERR_NOMEM, "gate: out of memory");
            goto out;
        }
        int rc = MPI_Isend(buf, (int)vsz, MPI_BYTE, r, RF_CTL_TAG(RF_CTL_GATE_VERDICT, update),
                           rf_ctl_comm(ctl), sreq);
        if (rc != MPI_SUCCESS) {
            free(buf);
            free(sreq);
            st = rf_mpi_error(rc, "MPI_Isend(gate verdict)", __FILE__, __LINE__, err);
            goto out;
        }
        rf_ctl_outbox_add(ctl, buf, sreq, 1, NULL);
    }
    goto out;

out_cancel:
    rf_ctl_cancel_recvs(reqs, n);
out:
    free(recs);
    free(have);
    free(reqs);
    return st;
}

rf_status_t rf_gate_run(rf_ctl_t *ctl, uint32_t update, const rf_gate_record_t *mine,
                        const rf_gate_expect_t *expect, double deadline,
                        rf_gate_verdict_t *verdict, rf_err_t *err)
{
    const int n = rf_ctl_size(ctl);
    memset(verdict, 0, sizeof(*verdict));
    verdict->rank = rf_ctl_rank(ctl);
    verdict->code = RF_ERR_INTERNAL;
    verdict->nranks = n;
    verdict->posted_from = malloc((size_t)n * sizeof(uint64_t));
    if (verdict->posted_from == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "gate: out of memory");
    for (int s = 0; s < n; s++)
        verdict->posted_from[s] = RF_GATE_UNKNOWN;
    snprintf(verdict->reason, sizeof(verdict->reason), "gate did not complete");

    if (rf_ctl_rank(ctl) == 0) {
        RF_CHECK(gate_root(ctl, update, mine, expect, deadline, verdict, err));
        return verdict_result(ctl, update, verdict, err);
    }

    const size_t sz = record_bytes(n), vsz = verdict_bytes(n);
    unsigned char *rec = malloc(sz);
    MPI_Request *sreq = malloc(sizeof(*sreq));
    unsigned char *vbuf = calloc(1, vsz);
    if (rec == NULL || sreq == NULL || vbuf == NULL) {
        free(rec);
        free(sreq);
        free(vbuf);
        return rf_err_set(err, RF_ERR_NOMEM, "gate: out of memory");
    }
    record_pack(mine, n, rec);
    int rc = MPI_Isend(rec, (int)sz, MPI_BYTE, 0, RF_CTL_TAG(RF_CTL_GATE_REPORT, update),
                       rf_ctl_comm(ctl), sreq);
    if (rc != MPI_SUCCESS) {
        free(rec);
        free(sreq);
        free(vbuf);
        return rf_mpi_error(rc, "MPI_Isend(gate report)", __FILE__, __LINE__, err);
    }
    rf_ctl_outbox_add(ctl, rec, sreq, 1, NULL);

    MPI_Request rreq = MPI_REQUEST_NULL;
    rf_status_t st = RF_OK;
    RF_MPI_CHECK_GOTO(MPI_Irecv(vbuf, (int)vsz, MPI_BYTE, 0,
                                RF_CTL_TAG(RF_CTL_GATE_VERDICT, update), rf_ctl_comm(ctl), &rreq),
                      err, st, out);
    rf_err_t werr;
    rf_err_clear(&werr);
    st = rf_ctl_wait_some(ctl, &rreq, 1, deadline + RF_GATE_GRACE_S, RF_CTL_WAIT_NO_ABORT, NULL,
                          NULL, &werr);
    if (st != RF_OK) {
        rf_ctl_cancel_recvs(&rreq, 1);
        verdict->rank = 0;
        verdict->code = st;
        if (st == RF_ERR_TIMEOUT)
            snprintf(verdict->reason, sizeof(verdict->reason),
                     "no gate verdict from rank 0 by the deadline");
        else
            snprintf(verdict->reason, sizeof(verdict->reason), "%s", werr.msg);
        st = rf_err_set(err, st, "update %u: %s", update, verdict->reason);
        goto out;
    }
    rf_verdict_wire_t w;
    memcpy(&w, vbuf, sizeof(w));
    w.reason[sizeof(w.reason) - 1] = '\0';
    verdict->committed = w.committed;
    verdict->rank = w.rank;
    verdict->code = (rf_status_t)w.code;
    snprintf(verdict->reason, sizeof(verdict->reason), "%s", w.reason);
    memcpy(verdict->posted_from, vbuf + sizeof(w), (size_t)n * sizeof(uint64_t));
    st = verdict_result(ctl, update, verdict, err);
out:
    free(vbuf);
    return st;
}
