/*
 * refit: status codes and error reports.
 *
 * Every library function returns an rf_status_t (RF_OK = 0, errors negative) and, where it
 * takes an rf_err_t *, fills it with a one-line message naming the file, key, tensor, chunk
 * or rank at fault. The codes and their strings come from one list (RF_STATUS_LIST), libuv
 * style, so they cannot drift apart.
 */
#ifndef REFIT_STATUS_H
#define REFIT_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, string) */
#define RF_STATUS_LIST(X)                                                                  \
    X(RF_OK, 0, "ok")                                                                      \
    X(RF_ERR_INVALID, -1, "invalid argument")                                              \
    X(RF_ERR_NOMEM, -2, "out of memory")                                                   \
    X(RF_ERR_IO, -3, "i/o error")                                                          \
    X(RF_ERR_PARSE, -4, "malformed input")                                                 \
    X(RF_ERR_TOPOLOGY, -5, "bad topology")                                                 \
    X(RF_ERR_CONFIG, -6, "bad model config")                                               \
    X(RF_ERR_UNSUPPORTED, -7, "unsupported")                                               \
    X(RF_ERR_MISMATCH, -8, "mismatch")                                                     \
    X(RF_ERR_MISSING, -9, "missing tensor")                                                \
    X(RF_ERR_EXTRA, -10, "unexpected tensor")                                              \
    X(RF_ERR_SEQUENCE, -11, "chunk out of sequence")                                       \
    X(RF_ERR_INTEGRITY, -12, "checksum mismatch")                                          \
    X(RF_ERR_MOVED, -13, "storage moved")                                                  \
    X(RF_ERR_TIMEOUT, -14, "deadline expired")                                             \
    X(RF_ERR_PEER, -15, "peer failed")                                                     \
    X(RF_ERR_MPI, -16, "mpi error")                                                        \
    X(RF_ERR_CUDA, -17, "cuda error")                                                      \
    X(RF_ERR_NCCL, -18, "nccl error")                                                      \
    X(RF_ERR_VERIFY, -19, "verification failed")                                           \
    X(RF_ERR_STATE, -20, "wrong state")                                                    \
    X(RF_ERR_INTERNAL, -21, "internal error")

typedef enum {
#define RF_STATUS_ENUM_(name, value, str) name = value,
    RF_STATUS_LIST(RF_STATUS_ENUM_)
#undef RF_STATUS_ENUM_
} rf_status_t;

/* "RF_ERR_TIMEOUT" */
const char *rf_status_name(rf_status_t status);
/* "deadline expired" */
const char *rf_status_string(rf_status_t status);

#define RF_ERR_MSG_MAX 512

/* An error report: the status and one line saying what and where. Caller-owned. */
typedef struct rf_err {
    rf_status_t status;
    char msg[RF_ERR_MSG_MAX];
} rf_err_t;

/* Clears *err (status RF_OK, empty message). err may be NULL. */
void rf_err_clear(rf_err_t *err);

/*
 * Sets err (if not NULL and not already holding an error: the first error is kept) and
 * returns status, so callers write `return rf_err_set(err, RF_ERR_PARSE, "...", ...)`.
 */
rf_status_t rf_err_set(rf_err_t *err, rf_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
rf_status_t rf_err_vset(rf_err_t *err, rf_status_t status, const char *fmt, va_list ap);

/* Replaces whatever err holds (used when a later, more precise error must win). */
rf_status_t rf_err_reset(rf_err_t *err, rf_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Propagate a failing status (NCCL's NCCLCHECK shape). */
#define RF_CHECK(call)                                                                     \
    do {                                                                                   \
        rf_status_t rf_check_st_ = (call);                                                 \
        if (rf_check_st_ != RF_OK)                                                         \
            return rf_check_st_;                                                           \
    } while (0)

/* Propagate to a cleanup label, keeping the status in `st`. */
#define RF_CHECK_GOTO(call, st, label)                                                     \
    do {                                                                                   \
        (st) = (call);                                                                     \
        if ((st) != RF_OK)                                                                 \
            goto label;                                                                    \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif /* REFIT_STATUS_H */
