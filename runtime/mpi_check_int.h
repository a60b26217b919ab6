/*
 * refit: private MPI check macro (llm.c's mpiCheck, NCCL's CHECK shape).
 *
 * RF_MPI_CHECK(call, err) returns RF_ERR_MPI from the enclosing function, with the call, the
 * file:line and MPI's own error string in err, and logs it once at debug level (the caller
 * that decides the update's fate reports it). Communicators used with it must have
 * MPI_ERRORS_RETURN set.
 */
#ifndef REFIT_MPI_CHECK_INT_H
#define REFIT_MPI_CHECK_INT_H

#include <mpi.h>
#include <stdio.h>

#include "refit/log.h"
#include "refit/status.h"

static inline rf_status_t rf_mpi_error(int rc, const char *call, const char *file, int line,
                                       rf_err_t *err)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof(s), "mpi error %d", rc);
    rf_debug("%s:%d: %s: %s", file, line, call, s);
    return rf_err_set(err, RF_ERR_MPI, "%s failed: %s", call, s);
}

#define RF_MPI_CHECK(call, err)                                                            \
    do {                                                                                   \
        int rf_mpi_rc_ = (call);                                                           \
        if (rf_mpi_rc_ != MPI_SUCCESS)                                                     \
            return rf_mpi_error(rf_mpi_rc_, #call, __FILE__, __LINE__, (err));             \
    } while (0)

#define RF_MPI_CHECK_GOTO(call, err, st, label)                                            \
    do {                                                                                   \
        int rf_mpi_rc_ = (call);                                                           \
        if (rf_mpi_rc_ != MPI_SUCCESS) {                                                   \
            (st) = rf_mpi_error(rf_mpi_rc_, #call, __FILE__, __LINE__, (err));             \
            goto label;                                                                    \
        }                                                                                  \
    } while (0)

#endif /* REFIT_MPI_CHECK_INT_H */
