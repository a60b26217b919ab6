/*
 * refit: what every part of a session uses (runtime/session_int.h): the status agreement that
 * ends every collective step (the lowest failing rank's status and message on every rank) and
 * the rank's role. Below session.c (the public calls), session_setup.c (setup and teardown)
 * and session_ckpt.c (checkpoint sources), so that those three call down into one file
 * instead of into each other.
 */
#include <stdio.h>
#include <stdlib.h>

#include "session_int.h"

rf_status_t rf_session_agree(MPI_Comm comm, rf_status_t st, rf_err_t *err)
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
