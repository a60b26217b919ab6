/*
 * refit: a fork-join thread pool (the ground floor, core/pool.c).
 *
 * n threads run one function together and are joined before rf_pool_run returns: the caller
 * is worker 0, n - 1 persistent helpers (started by rf_pool_create, parked on a condition
 * variable between runs) the others. For the host work of one chunk that one thread does too
 * slowly beside the wire: the streamed checkpoint reads of a chunk (runtime/trainer_stream.c)
 * and the refit-sum64 seal of a chunk (rf_chunk_seal_pool). One rf_pool_run at a time per
 * pool (the pool belongs to one caller thread); fn must not call rf_pool_run on the same
 * pool. Nothing here is collective; no MPI call is made.
 */
#ifndef REFIT_POOL_H
#define REFIT_POOL_H

#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_pool rf_pool_t;

/* Worker `who` of `n` (who in [0, n); the caller is 0). */
typedef void (*rf_pool_fn)(void *ctx, int who, int n);

/*
 * A pool of `threads` workers (1..RF_POOL_MAX; 1: no helper, rf_pool_run calls fn on the
 * caller alone). Where a helper cannot start the pool keeps those that did (rf_pool_threads
 * says how many; a warning names the shortfall). Errors: RF_ERR_INVALID (threads out of range,
 * pool_p NULL), RF_ERR_NOMEM (no memory, mutex or condition variable).
 */
#define RF_POOL_MAX 64
rf_status_t rf_pool_create(int threads, rf_pool_t **pool_p, rf_err_t *err);

/* The workers of a run: the helpers that started + 1; 1 for a NULL pool. */
int rf_pool_threads(const rf_pool_t *pool);

/* fn(ctx, who, n) on every worker, n = rf_pool_threads(pool); returns when all returned.
 * A NULL pool runs fn(ctx, 0, 1) on the caller. */
void rf_pool_run(rf_pool_t *pool, rf_pool_fn fn, void *ctx);

/* Stops and joins the helpers; NULL is a no-op. Not during a run. */
void rf_pool_destroy(rf_pool_t *pool);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_POOL_H */
