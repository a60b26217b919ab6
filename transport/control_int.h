/*
 * refit: control channel internals shared by runtime/control.c and runtime/gate.c (and the
 * transfer scheduler, which cancels its receives through rf_ctl_cancel_recvs).
 */
#ifndef REFIT_CONTROL_INT_H
#define REFIT_CONTROL_INT_H

#include <mpi.h>
#include <stddef.h>

#include "refit/control.h"

/* A send nobody waits for: buffer (owned) alive until all its requests complete. */
typedef struct rf_ctl_out {
    void *buf;
    MPI_Request *reqs; /* owned */
    int n;
} rf_ctl_out_t;

struct rf_ctl {
    MPI_Comm comm; /* duplicate of the caller's world, MPI_ERRORS_RETURN */
    int rank;
    int size;
    uint32_t update;
    int abort_sent;
    int abort_origin; /* first ABORT received this update, -1 when none */
    rf_status_t abort_code;
    char abort_reason[RF_ERR_MSG_MAX];
    rf_ctl_out_t *out;
    size_t n_out;
    size_t cap_out;
};

/* Hands buf (owned) and reqs[0..n) (owned, malloc'd) to the outbox. Local. */
rf_status_t rf_ctl_outbox_add(rf_ctl_t *ctl, void *buf, MPI_Request *reqs, int n, rf_err_t *err);
/* Cancels and completes the receives still active in reqs[0..n). Local. */
void rf_ctl_cancel_recvs(MPI_Request *reqs, int n);
/* The control communicator. */
MPI_Comm rf_ctl_comm(const rf_ctl_t *ctl);

#endif /* REFIT_CONTROL_INT_H */
