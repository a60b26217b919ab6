/* refit: a fork-join thread pool (include/refit/pool.h). A run bumps a generation counter
 * under the mutex and broadcasts; each helper runs once per generation, then counts itself
 * out; the caller works as worker 0 and waits for the count to reach zero. */
#include "refit/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "refit/log.h"

struct rf_pool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    pthread_t *th;
    int helpers;  /* started */
    uint64_t gen; /* bumped per run */
    int pending;  /* helpers still in this run */
    bool quit;
    rf_pool_fn fn; /* this run's (written under mu before gen moves) */
    void *ctx;
};

typedef struct {
    rf_pool_t *p;
    int who;
} helper_arg_t;

static void *helper_main(void *arg)
{
    helper_arg_t a = *(helper_arg_t *)arg;
    free(arg);
    rf_pool_t *p = a.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        rf_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        int n = p->helpers + 1;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, a.who, n);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

rf_status_t rf_pool_create(int threads, rf_pool_t **pool_p, rf_err_t *err)
{
    if (pool_p == NULL || threads < 1 || threads > RF_POOL_MAX)
        return rf_err_set(err, RF_ERR_INVALID, "rf_pool_create: %d threads (1..%d)", threads,
                          RF_POOL_MAX);
    *pool_p = NULL;
    rf_pool_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rf_pool_create: out of memory");
    p->th = calloc((size_t)threads, sizeof(pthread_t));
    if (p->th == NULL || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->th);
        free(p);
        return rf_err_set(err, RF_ERR_NOMEM, "rf_pool_create: out of memory");
    }
    if (pthread_cond_init(&p->go, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p->th);
        free(p);
        return rf_err_set(err, RF_ERR_NOMEM, "rf_pool_create: no condition variable");
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->go);
        pthread_mutex_destroy(&p->mu);
        free(p->th);
        free(p);
        return rf_err_set(err, RF_ERR_NOMEM, "rf_pool_create: no condition variable");
    }
    for (int i = 1; i < threads; i++) {
        helper_arg_t *a = malloc(sizeof(*a));
        if (a == NULL)
            break;
        a->p = p;
        a->who = i;
        if (pthread_create(&p->th[p->helpers], NULL, helper_main, a) != 0) {
            free(a);
            break;
        }
        p->helpers++;
    }
    if (p->helpers + 1 < threads)
        rf_warn("thread pool: %d of %d threads started", p->helpers + 1, threads);
    *pool_p = p;
    return RF_OK;
}

int rf_pool_threads(const rf_pool_t *pool)
{
    return pool != NULL ? pool->helpers + 1 : 1;
}

void rf_pool_run(rf_pool_t *p, rf_pool_fn fn, void *ctx)
{
    if (p == NULL || p->helpers == 0) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->helpers;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->helpers + 1);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void rf_pool_destroy(rf_pool_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->helpers; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p);
}
