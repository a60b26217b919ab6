/*
 * refit: the control channel, deadlines, ABORT, begin agreement and the completion gate
 * (DESIGN.md sections 2, 9 "Deadlines", 10).
 *
 * The control channel lives on an MPI_Comm_dup of the caller's world communicator. Every
 * control message carries its update in its tag (RF_CTL_TAG), so a late message of update v
 * never matches a receive of update v + 1; rf_ctl_begin() drains what is left of the
 * previous updates. Every wait of an update goes through rf_ctl_wait_fn() (or its wrappers):
 * test, poll ABORT, sched_yield after an unsuccessful test, sleep with backoff (up to 1 ms)
 * after 1000 idle polls, RF_ERR_TIMEOUT at the absolute deadline. Nothing here waits forever.
 *
 * Deadlines are absolute CLOCK_MONOTONIC seconds (double): rf_time_now and
 * rf_deadline_for_update are in refit/time.h, included here for the callers of both.
 *
 * The gate runs under the update deadline plus RF_GATE_GRACE_S: when the update's deadline
 * has already expired (the transfer timed out), the ranks still exchange their reports and the
 * verdict, so every rank learns the same FAILED verdict with the first failing rank instead of
 * each one timing out alone.
 */
#ifndef REFIT_CONTROL_H
#define REFIT_CONTROL_H

#include <mpi.h>
#include <stdint.h>

#include "refit/status.h"
#include "refit/time.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Control message kinds; tag = 0x4000 | (update & 0xff) << 4 | kind. */
enum {
    RF_CTL_ABORT = 1,
    RF_CTL_AGREE_REPORT = 2,
    RF_CTL_AGREE_ANSWER = 3,
    RF_CTL_GATE_REPORT = 4,
    RF_CTL_GATE_VERDICT = 5,
    RF_CTL_PRODUCED_REPORT = 6, /* the production agreement (rf_ctl_agree_produced) */
    RF_CTL_PRODUCED_ANSWER = 7,
    RF_CTL_KIND_LAST = RF_CTL_PRODUCED_ANSWER,
};
#define RF_CTL_TAG(kind, update) (0x4000 | (int)(((update) & 0xffu) << 4) | (kind))

/* Seconds the gate may run past an update deadline that already expired. */
#define RF_GATE_GRACE_S 2.0

/* rf_ctl_wait_fn flags */
#define RF_CTL_WAIT_NO_ABORT 1u /* do not poll ABORT (gate, drain: failures already known) */
/* spin 0.25 s instead of 5 ms before backing off into sleeps: a message is streaming. The mpi
 * chunk transport's waits once an update's first chunk moved (a receiver with pinned buffers;
 * a sender where its node has cores to spare, rf_xfer_send_spin_default): a large message
 * through shared memory without single-copy (CMA) moves a FIFO's worth per MPI call on each side, so 1 ms sleeps between tests held the mpi
 * path into GPU storage on the H200 host to 0.3 GB/s against 7 GB/s for MPI_Wait (issue 18
 * item 3, docs/benchmarks.md). The wait still yields the core between tests; a peer stalled
 * past 0.25 s gets the sleeping backoff. */
#define RF_CTL_WAIT_SPIN 2u

typedef struct rf_ctl rf_ctl_t;

/*
 * Creates a control channel on a duplicate of world (borrowed; must outlive the channel).
 * Collective over world. Returns RF_OK and *ctl_p (free with rf_ctl_destroy), RF_ERR_MPI or
 * RF_ERR_NOMEM.
 */
rf_status_t rf_ctl_create(MPI_Comm world, rf_ctl_t **ctl_p, rf_err_t *err);
/* Completes or releases pending control sends and frees the duplicate. Collective. */
void rf_ctl_destroy(rf_ctl_t *ctl);

/* Rank and size in world. Local. */
int rf_ctl_rank(const rf_ctl_t *ctl);
int rf_ctl_size(const rf_ctl_t *ctl);

/*
 * Starts update `update` on this rank: makes it current, forgets the previous update's ABORT,
 * progresses pending control sends and drains control messages of the previous 8 updates
 * that arrived late. Local (not collective). Returns RF_OK or RF_ERR_MPI.
 */
rf_status_t rf_ctl_begin(rf_ctl_t *ctl, uint32_t update, rf_err_t *err);
/* The current update (set by rf_ctl_begin). Local. */
uint32_t rf_ctl_update(const rf_ctl_t *ctl);

/*
 * Posts ABORT{this rank, code, reason (borrowed, copied)} for the current update to every
 * other rank, non-blocking; the sends complete in the background (progressed by later calls).
 * Only the first abort of an update is sent. Local. Returns RF_OK or RF_ERR_MPI.
 */
rf_status_t rf_ctl_abort(rf_ctl_t *ctl, rf_status_t code, const char *reason);

/*
 * Polls for an ABORT of the current update. Local. Returns RF_OK when none arrived, or
 * RF_ERR_PEER with "rank R aborted update V: <code>: <reason>" in err (sticky for the rest of
 * the update); RF_ERR_MPI.
 */
rf_status_t rf_ctl_poll(rf_ctl_t *ctl, rf_err_t *err);
/*
 * The first ABORT of the current update that this rank received: its originating rank (or -1
 * when none), and optionally its code and reason (*reason_p borrowed from ctl, valid until
 * the next rf_ctl_begin). Local.
 */
int rf_ctl_abort_origin(const rf_ctl_t *ctl, rf_status_t *code_p, const char **reason_p);

/*
 * A wait condition: returns 1 when done, 0 when not yet, or a negative rf_status_t (with err
 * set) on error.
 */
typedef int (*rf_ctl_test_fn)(void *ctx, rf_err_t *err);

/*
 * The universal wait loop: calls test(ctx) until it returns done or an error; between
 * unsuccessful tests polls ABORT (unless RF_CTL_WAIT_NO_ABORT), checks the absolute
 * deadline, sched_yield()s, and after 5 ms of idle polls (0.25 s with RF_CTL_WAIT_SPIN)
 * sleeps with backoff up to 1 ms.
 * Local. Returns RF_OK, the test's error, RF_ERR_PEER (ABORT) or RF_ERR_TIMEOUT.
 */
rf_status_t rf_ctl_wait_fn(rf_ctl_t *ctl, rf_ctl_test_fn test, void *ctx, double deadline,
                           unsigned flags, rf_err_t *err);

/*
 * Waits until all n requests (borrowed; completed ones become MPI_REQUEST_NULL) complete,
 * polling ABORT. Local. Returns RF_OK, RF_ERR_PEER, RF_ERR_TIMEOUT ("deadline expired with
 * k of n requests pending") or RF_ERR_MPI. On error the pending requests stay active.
 */
rf_status_t rf_ctl_wait(rf_ctl_t *ctl, MPI_Request *reqs, int n, double deadline,
                        rf_err_t *err);
/* rf_ctl_wait with rf_ctl_wait_fn's flags. */
rf_status_t rf_ctl_wait_flags(rf_ctl_t *ctl, MPI_Request *reqs, int n, double deadline,
                              unsigned flags, rf_err_t *err);

/* Called for each request completed by rf_ctl_wait_some: index into reqs and its status. */
typedef rf_status_t (*rf_ctl_done_fn)(void *ctx, int index, const MPI_Status *status,
                                      rf_err_t *err);

/*
 * Test-some with a callback, for pipelined loops: waits until at least one active request of
 * reqs[0..n) completes (returns at once when none is active), calls done(ctx, index, status)
 * for each completed one in index order and returns. flags as for rf_ctl_wait_fn. Local.
 * Returns RF_OK, the callback's error, RF_ERR_PEER, RF_ERR_TIMEOUT or RF_ERR_MPI.
 */
rf_status_t rf_ctl_wait_some(rf_ctl_t *ctl, MPI_Request *reqs, int n, double deadline,
                             unsigned flags, rf_ctl_done_fn done, void *ctx, rf_err_t *err);

/*
 * Cancels and completes the receives still active in reqs[0..n) (borrowed; each becomes
 * MPI_REQUEST_NULL; one that had already matched completes as received). For the cleanup
 * paths of any wait above, on the control communicator or another. Local, never blocks on a
 * peer, never fails.
 */
void rf_ctl_cancel_recvs(MPI_Request *reqs, int n);

/*
 * Protocols that run on the control channel (the completion gate): the control communicator
 * (borrowed from ctl, valid until rf_ctl_destroy; a duplicate of world with
 * MPI_ERRORS_RETURN), on which such a protocol tags every message RF_CTL_TAG(kind, update).
 * Local.
 */
MPI_Comm rf_ctl_comm(const rf_ctl_t *ctl);

/*
 * A send nobody waits for: hands buf and reqs[0..n) (both owned from now on, malloc'd; reqs
 * posted on buf) to the channel's outbox. Later calls on ctl progress them; each entry is
 * freed when all its requests completed; rf_ctl_destroy waits up to 5 s, then releases the
 * requests and keeps the buffers (MPI may still read them). Local. Returns RF_OK, or
 * RF_ERR_NOMEM after waiting for the sends and freeing both.
 */
rf_status_t rf_ctl_outbox_add(rf_ctl_t *ctl, void *buf, MPI_Request *reqs, int n, rf_err_t *err);

/*
 * Begin agreement (DESIGN.md section 9): every rank reports its source check (local_status,
 * local_msg borrowed, may be NULL) to world rank 0, which answers GO or FAILED naming the
 * lowest failing rank and its reason to all before any chunk is posted. Collective. Does not
 * poll ABORT. Returns RF_OK on GO; on FAILED the local status on the failing rank(s) and
 * RF_ERR_PEER elsewhere, err "begin of update V failed at rank R: reason"; RF_ERR_TIMEOUT
 * when reports or the answer miss the deadline; RF_ERR_MPI.
 */
rf_status_t rf_ctl_agree(rf_ctl_t *ctl, uint32_t update, rf_status_t local_status,
                         const char *local_msg, double deadline, rf_err_t *err);

/*
 * Production agreement: rf_ctl_agree again, after GO, on the trainers' production (a
 * quantizer, a checkpoint read that can fail after GO) and before any chunk is posted, so a
 * production failure fails the update on every rank with nothing sent (runtime/session.c
 * run_finish). Its own tags (RF_CTL_PRODUCED_*): a late begin message never matches it. Texts
 * "production of update V failed at rank R: reason". Collective; same returns as rf_ctl_agree.
 */
rf_status_t rf_ctl_agree_produced(rf_ctl_t *ctl, uint32_t update, rf_status_t local_status,
                                  const char *local_msg, double deadline, rf_err_t *err);

/* ---- completion gate -------------------------------------------------------------------- */

/* Layer counts per reload mode (DESIGN.md section 8). */
enum { RF_GATE_DIRECT = 0, RF_GATE_RUNTIME_VIEW = 1, RF_GATE_LAYERWISE = 2, RF_GATE_NMODES = 3 };

/* Chunk messages and bytes (header included) this rank exchanged with one peer. */
typedef struct rf_peer_counts {
    uint64_t chunks_sent; /* chunk messages posted to the peer (a duplicate counts) */
    uint64_t bytes_sent;
    uint64_t chunks_recv; /* chunk messages received (matched) from the peer */
    uint64_t bytes_recv;
} rf_peer_counts_t;

/* One rank's gate record. */
typedef struct rf_gate_record {
    rf_status_t status; /* this rank's result for the update: RF_OK or its error */
    int origin;         /* rank where the failure originated (this rank, or the ABORT's) */
    rf_status_t code;   /* status, except RF_ERR_PEER for a failure caused by another's ABORT */
    char reason[RF_ERR_MSG_MAX];
    int nranks;                    /* world size */
    const rf_peer_counts_t *peers; /* [nranks], borrowed */
    uint64_t mode_layers[RF_GATE_NMODES];      /* layers applied per mode in this update */
    uint64_t plan_mode_layers[RF_GATE_NMODES]; /* what this rank reported at plan time */
    uint64_t manifest_digest;
} rf_gate_record_t;

/*
 * Fills status, origin, code and reason of rec from this rank's result: status and err
 * (borrowed, may be NULL) as returned by the update's calls; when status is RF_ERR_PEER and
 * an ABORT arrived, origin is its originator. Leaves the other fields alone. Local.
 */
void rf_gate_record_set_result(rf_gate_record_t *rec, const rf_ctl_t *ctl, rf_status_t status,
                               const rf_err_t *err);

/* What rank 0 expects: chunk messages and bytes from sender s to receiver r. */
typedef struct rf_gate_expect {
    int nranks;
    uint64_t *chunks; /* [nranks * nranks], index s * nranks + r; owned */
    uint64_t *bytes;  /* [nranks * nranks]; owned */
} rf_gate_expect_t;

/* Allocates a zeroed expectation for nranks. Local. RF_OK or RF_ERR_NOMEM / RF_ERR_INVALID. */
rf_status_t rf_gate_expect_init(rf_gate_expect_t *expect, int nranks, rf_err_t *err);
/* Frees the arrays. */
void rf_gate_expect_fini(rf_gate_expect_t *expect);

#define RF_GATE_UNKNOWN UINT64_MAX

/* The verdict every rank receives. */
typedef struct rf_gate_verdict {
    int committed;      /* 1: COMMITTED, 0: FAILED */
    int rank;           /* failing rank named by the verdict, -1 when committed */
    rf_status_t code;   /* its code (RF_ERR_MISMATCH for a mismatch rank 0 found) */
    char reason[RF_ERR_MSG_MAX];
    int nranks;
    uint64_t *posted_from; /* [nranks]: chunk messages each source posted to this rank
                              (RF_GATE_UNKNOWN when its report is missing); owned, free with
                              rf_gate_verdict_fini */
} rf_gate_verdict_t;

void rf_gate_verdict_fini(rf_gate_verdict_t *verdict);

/*
 * The completion gate of update `update` (DESIGN.md section 10). Collective over the control
 * channel. Every rank sends *mine (borrowed) to world rank 0; rank 0 checks every rank's
 * chunk and byte counts per peer against *expect (borrowed, rank 0 only; NULL elsewhere and
 * on rank 0 to skip the count check), each rank's mode counts against its plan-time counts
 * and every manifest digest against its own; COMMITTED iff every rank is OK and all match;
 * otherwise FAILED naming the lowest-numbered rank whose code is not RF_ERR_PEER (a missing
 * report counts as RF_ERR_TIMEOUT of that rank), else the first mismatch. Waits (without
 * ABORT polling) until deadline + RF_GATE_GRACE_S. Fills *verdict (release with
 * rf_gate_verdict_fini, also on error). Returns RF_OK iff COMMITTED; otherwise the verdict's
 * code with err "update V failed at rank R: reason"; RF_ERR_TIMEOUT when this rank got no
 * verdict; RF_ERR_MPI / RF_ERR_NOMEM.
 */
rf_status_t rf_gate_run(rf_ctl_t *ctl, uint32_t update, const rf_gate_record_t *mine,
                        const rf_gate_expect_t *expect, double deadline,
                        rf_gate_verdict_t *verdict, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_CONTROL_H */
