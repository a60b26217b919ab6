/*
 * refit: environment switches (the ground floor, core/env.c).
 *
 * The REFIT_* variables that change what a job does (A/B switches for the benchmarks, the
 * CUDA copy split) are read at setup or create through these parsers, never at update time:
 * a value the switch does not know is refused with RF_ERR_INVALID naming the variable, the
 * value and the accepted values, instead of being ignored. Unset or empty: the default.
 * The variables and what they do: docs/design.md, "Environment switches". Local.
 */
#ifndef REFIT_ENV_H
#define REFIT_ENV_H

#include <stdbool.h>
#include <stddef.h>

#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A 0/1 switch: "1" on, "0" off, unset or empty dflt. *on_p is set only on success. Errors:
 * RF_ERR_INVALID for any other value ("NAME=VALUE: expected 0 (off) or 1 (on)"); name and on_p
 * must not be NULL (RF_ERR_INVALID).
 */
rf_status_t rf_env_flag(const char *name, bool dflt, bool *on_p, rf_err_t *err);

/*
 * A positive count (what it counts: unit, for the message, e.g. "bytes"): a decimal integer of
 * digits only, at least 1, at most SIZE_MAX; unset or empty dflt. *out_p is set only on
 * success. Errors: RF_ERR_INVALID for anything else ("NAME=VALUE: expected a positive decimal
 * integer (bytes)"), naming overflow too.
 */
rf_status_t rf_env_count(const char *name, const char *unit, size_t dflt, size_t *out_p,
                         rf_err_t *err);

/* REFIT_CKPT_READ_THREADS / REFIT_MPI_SEAL_THREADS: at most this many threads read one
 * streamed chunk / seal one chunk (RF_POOL_MAX, include/refit/pool.h) */
#define RF_ENV_THREADS_MAX 64

/*
 * This process's share of its node: *cores_p = the CPUs it may run on (sched_getaffinity, at
 * least 1), *local_p = the ranks of its job on this node (OMPI_COMM_WORLD_LOCAL_SIZE, else
 * MPI_LOCALNRANKS, else world_size, at least 1). The defaults that spend spare cores (the mpi
 * sender's spin, the checkpoint read threads) start here. Local, no MPI call.
 */
void rf_env_node_share(int world_size, long *cores_p, long *local_p);

/*
 * The threads one rank may spend on a chunk's host work beside its main and pack threads
 * (the streamed checkpoint reads' default, the mpi sender's seal): cores / local ranks - 2
 * (rf_env_node_share), clamped to [1, 4]: 1 on CI's 2 cores, 4 on the H200 host's 16 cores
 * with 2 ranks. Local.
 */
int rf_env_spare_threads(int world_size);

/*
 * Every REFIT_* switch read through rf_env_flag / rf_env_count anywhere in the library
 * (REFIT_CKPT_STREAM, REFIT_HDF5_COLLECTIVE, REFIT_MPI_SEND_SPIN, REFIT_MPI_RECV_PAGEABLE,
 * REFIT_DEVICE_TIMELINE, REFIT_MPI_SEAL_FUSED, REFIT_CUDA_TRANSPOSE, REFIT_CUDA_ENGINE_MIN,
 * REFIT_CKPT_READ_THREADS, REFIT_MPI_SEAL_THREADS), checked at once: the first bad one's
 * error as its parser gives it (a bounded count: "NAME=V: expected a decimal count from 1 to
 * MAX (unit)" for a value that is no count, "NAME=N: at most MAX unit" above the bound).
 * rf_session_create (and refit-run's setup) calls it before anything else, so the later
 * readers cannot fail; a new switch is added to core/env.c's list. Local.
 */
rf_status_t rf_env_check(rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_ENV_H */
