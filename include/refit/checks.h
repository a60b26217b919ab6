/*
 * refit: check macros for the MPI, CUDA and NCCL calls (the ground floor; llm.c's mpiCheck /
 * cudaCheck / ncclCheck shape, NCCL's CHECK).
 *
 * One place for every check of a foreign library's return code. Each part is compiled only
 * where that library's own header came first, so a C file without CUDA never sees CUDA and
 * nvcc never sees mpi.h:
 *   #include <mpi.h>               RF_MPI_CHECK, RF_MPI_CHECK_GOTO, rf_mpi_error
 *   #include <cuda_runtime_api.h>  RF_CUDA_CHECK, RF_CUDA_LAUNCH_CHECK (accelerator ops: log
 *                                  and return RF_ERR_CUDA), RF_CUDA_CHECK_ERR,
 *                                  RF_CUDA_CHECK_ERR_GOTO, rf_cuda_error (message in err)
 *   #include <nccl.h>              RF_NCCL_CHECK_GOTO, rf_nccl_error
 * (a translation unit that includes this header before the library's header and again after
 * it gets the part; each part has its own guard.)
 *
 * MPI: returns RF_ERR_MPI with "CALL failed: <MPI's error string>" in err and logs the call
 * site once at debug level (the caller that decides the update's fate reports it).
 * Communicators used with it must have MPI_ERRORS_RETURN set.
 * CUDA, with err: returns RF_ERR_CUDA with "FILE:LINE: CALL: <CUDA's error string>".
 * CUDA, accelerator ops (no err): logs "cuda: CALL failed: <string> (<name>)" at error level
 * and returns RF_ERR_CUDA.
 * NCCL: RF_ERR_NCCL with "FILE:LINE: CALL: <NCCL's string>[: <ncclGetLastError>]";
 * ncclInProgress counts as success (non-blocking communicators: the caller polls afterwards).
 */
#include <stdio.h>

#include "refit/log.h"
#include "refit/status.h"

/* ---- MPI --------------------------------------------------------------------------------- */
#if defined(MPI_VERSION) && !defined(REFIT_CHECKS_MPI_H)
#define REFIT_CHECKS_MPI_H

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

#endif /* MPI */

/* ---- CUDA -------------------------------------------------------------------------------- */
#if defined(CUDART_VERSION) && !defined(REFIT_CHECKS_CUDA_H)
#define REFIT_CHECKS_CUDA_H

static inline rf_status_t rf_cuda_error(cudaError_t rc, const char *call, const char *file,
                                        int line, rf_err_t *err)
{
    return rf_err_set(err, RF_ERR_CUDA, "%s:%d: %s: %s", file, line, call,
                      cudaGetErrorString(rc));
}

/* Accelerator ops, which take no err: the failure is logged here, once. */
#define RF_CUDA_CHECK(call)                                                                \
    do {                                                                                   \
        cudaError_t rf_cuda_e_ = (call);                                                   \
        if (rf_cuda_e_ != cudaSuccess) {                                                   \
            rf_error("cuda: %s failed: %s (%s)", #call, cudaGetErrorString(rf_cuda_e_),    \
                     cudaGetErrorName(rf_cuda_e_));                                        \
            return RF_ERR_CUDA;                                                            \
        }                                                                                  \
    } while (0)

#define RF_CUDA_LAUNCH_CHECK() RF_CUDA_CHECK(cudaGetLastError())

#define RF_CUDA_CHECK_ERR(call, err)                                                       \
    do {                                                                                   \
        cudaError_t rf_cuda_e_ = (call);                                                   \
        if (rf_cuda_e_ != cudaSuccess)                                                     \
            return rf_cuda_error(rf_cuda_e_, #call, __FILE__, __LINE__, (err));            \
    } while (0)

#define RF_CUDA_CHECK_ERR_GOTO(call, err, st, label)                                       \
    do {                                                                                   \
        cudaError_t rf_cuda_e_ = (call);                                                   \
        if (rf_cuda_e_ != cudaSuccess) {                                                   \
            (st) = rf_cuda_error(rf_cuda_e_, #call, __FILE__, __LINE__, (err));            \
            goto label;                                                                    \
        }                                                                                  \
    } while (0)

#endif /* CUDA */

/* ---- NCCL -------------------------------------------------------------------------------- */
#if defined(NCCL_MAJOR) && !defined(REFIT_CHECKS_NCCL_H)
#define REFIT_CHECKS_NCCL_H

static inline rf_status_t rf_nccl_error(ncclResult_t rc, ncclComm_t comm, const char *call,
                                        const char *file, int line, rf_err_t *err)
{
    const char *last = ncclGetLastError(comm);
    return rf_err_set(err, RF_ERR_NCCL, "%s:%d: %s: %s%s%s", file, line, call,
                      ncclGetErrorString(rc), last && last[0] ? ": " : "", last ? last : "");
}

#define RF_NCCL_CHECK_GOTO(call, comm, err, st, label)                                     \
    do {                                                                                   \
        ncclResult_t rf_nccl_rc_ = (call);                                                 \
        if (rf_nccl_rc_ != ncclSuccess && rf_nccl_rc_ != ncclInProgress) {                 \
            (st) = rf_nccl_error(rf_nccl_rc_, (comm), #call, __FILE__, __LINE__, (err));   \
            goto label;                                                                    \
        }                                                                                  \
    } while (0)

#endif /* NCCL */
