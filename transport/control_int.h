/*
 * refit: the control channel's state (transport/control.c), private to transport/: the nccl
 * transport splits its communicators off ctl->comm. Everything outside transport/ (the gate,
 * the job, the trainer) uses include/refit/control.h only.
 */
#ifndef REFIT_CONTROL_INT_H
#define REFIT_CONTROL_INT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/status.h"

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

#endif /* REFIT_CONTROL_INT_H */
