/*
 * refit: streamed checkpoint reads split over read threads (issue 18 item 3; the streamed
 * production itself is rf_trainer_produce's, include/refit/trainer.h). One pread stream from
 * the page cache runs at 6-8 GB/s on the H200 host, about the rate of MPI into a pinned buffer,
 * so a sender that reads each chunk's pieces as it packs them is bound by its one read
 * thread. Here the chunk's bytes are cut, by rows, into tr->read_threads contiguous ranges of
 * about equal size, and each range is read by one thread: the calling (pack) thread takes the
 * first, a persistent pool of read_threads - 1 helper threads the others (started at the first
 * streamed chunk, joined by rf_trainer_free). The bytes land exactly where the one-thread
 * read puts them; only safetensors checkpoints are split (pread on one descriptor from several
 * threads, atomic counters: include/refit/checkpoint.h); an HDF5 checkpoint (serial HDF5 is
 * not thread safe) is read by the calling thread alone.
 *
 * Errors: every reader stops at its first failed read; the lowest-numbered failed reader's
 * error is returned (it names the tensor and rows), after every reader finished, so the
 * payload is never written behind the caller's back.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "refit/checkpoint.h"
#include "refit/log.h"
#include "refit/trainer.h"
#include "trainer_int.h"

/* One read: rows part.r0..r1 (whole width) of entry ei into piece pc, by reader `who`. */
typedef struct {
    int ei;
    int who;
    const rf_chunk_piece_t *pc;
    rf_region_t part;
} stream_task_t;

typedef struct {
    uint64_t bytes;
    rf_status_t st;
    rf_err_t err;
} stream_result_t;

struct rf_stream_pool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    pthread_t *th;
    int helpers; /* threads started: readers 1..helpers */
    uint64_t gen; /* bumped per chunk; a helper runs once per generation */
    int pending;  /* helpers still reading this generation */
    bool quit;
    /* this generation's job (written under mu before gen moves) */
    rf_trainer_t *tr;
    char *payload;
    const stream_task_t *tasks;
    size_t ntasks;
    stream_result_t *res; /* [helpers + 1] */
};

static void run_reader(rf_trainer_t *tr, char *payload, const stream_task_t *tasks,
                       size_t ntasks, int who, stream_result_t *r)
{
    r->bytes = 0;
    r->st = RF_OK;
    rf_err_clear(&r->err);
    for (size_t i = 0; i < ntasks && r->st == RF_OK; i++)
        if (tasks[i].who == who)
            r->st = trainer_stream_part(tr, tasks[i].ei, tasks[i].pc, &tasks[i].part, payload,
                                        &r->bytes, &r->err);
}

typedef struct {
    struct rf_stream_pool *p;
    int who;
} helper_arg_t;

static void *helper_main(void *arg)
{
    helper_arg_t a = *(helper_arg_t *)arg;
    free(arg);
    struct rf_stream_pool *p = a.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        rf_trainer_t *tr = p->tr;
        char *payload = p->payload;
        const stream_task_t *tasks = p->tasks;
        size_t ntasks = p->ntasks;
        stream_result_t *r = &p->res[a.who];
        pthread_mutex_unlock(&p->mu);
        run_reader(tr, payload, tasks, ntasks, a.who, r);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void trainer_stream_pool_free(rf_trainer_t *tr)
{
    struct rf_stream_pool *p = tr->readers;
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
    free(p->res);
    free(p);
    tr->readers = NULL;
}

/* The pool of n - 1 helpers (n readers in all); fewer helpers when threads cannot start (the
 * reads then go to the readers that exist: the cut adapts to p->helpers + 1). */
static rf_status_t pool_start(rf_trainer_t *tr, int n, rf_err_t *err)
{
    struct rf_stream_pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory",
                          tr->me.world_rank);
    p->th = calloc((size_t)n, sizeof(pthread_t));
    p->res = calloc((size_t)n, sizeof(stream_result_t));
    if (p->th == NULL || p->res == NULL || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->th);
        free(p->res);
        free(p);
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory",
                          tr->me.world_rank);
    }
    if (pthread_cond_init(&p->go, NULL) != 0 || pthread_cond_init(&p->done, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p->th);
        free(p->res);
        free(p);
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: no condition variable",
                          tr->me.world_rank);
    }
    tr->readers = p;
    for (int i = 1; i < n; i++) {
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
    if (p->helpers + 1 < n)
        rf_warn("trainer rank %d: %d of %d checkpoint read threads started", tr->me.world_rank,
                p->helpers + 1, n);
    return RF_OK;
}

/* The chunk's streamed parts cut into n row ranges of about equal bytes, in payload order.
 * Returns the task count (at most piece_count + n - 1), or 0 when nothing is streamed. */
static size_t cut_tasks(const rf_trainer_t *tr, const rf_chunk_t *c, int n, stream_task_t *out)
{
    uint64_t total = 0;
    for (size_t k = 0; k < c->piece_count; k++) {
        const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + k];
        rf_region_t part;
        if (trainer_stream_piece(tr, c->piece_begin + k, &part))
            total += (uint64_t)(part.r1 - part.r0) * (uint64_t)(part.c1 - part.c0) *
                     entry_es(tr, (int)pc->item);
    }
    if (total == 0)
        return 0;
    uint64_t per = (total + (uint64_t)n - 1) / (uint64_t)n, filled = 0;
    int who = 0;
    size_t nt = 0;
    for (size_t k = 0; k < c->piece_count; k++) {
        const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + k];
        rf_region_t part;
        if (!trainer_stream_piece(tr, c->piece_begin + k, &part))
            continue;
        uint64_t rb = (uint64_t)(part.c1 - part.c0) * entry_es(tr, (int)pc->item);
        int64_t r = part.r0;
        while (r < part.r1) {
            int64_t take = part.r1 - r;
            if (who < n - 1) {
                uint64_t room = per > filled ? per - filled : 0;
                uint64_t fit = rb ? (room + rb - 1) / rb : 0; /* reaches the cut */
                if (fit == 0)
                    fit = 1;
                if ((uint64_t)take > fit)
                    take = (int64_t)fit;
            }
            out[nt].ei = (int)pc->item;
            out[nt].who = who;
            out[nt].pc = pc;
            out[nt].part = part;
            out[nt].part.r0 = r;
            out[nt].part.r1 = r + take;
            nt++;
            r += take;
            filled += (uint64_t)take * rb;
            if (filled >= per && who < n - 1) {
                who++;
                filled = 0;
            }
        }
    }
    return nt;
}

rf_status_t trainer_stream_chunk(rf_trainer_t *tr, const rf_chunk_t *c, char *payload,
                                 rf_err_t *err)
{
    int n = tr->read_threads > 1 ? tr->read_threads : 1;
    if (n > 1 && strcmp(rf_ckpt_format(tr->stream_ck), "safetensors") != 0)
        n = 1; /* serial HDF5 is not thread safe */
    if (n > 1 && tr->readers == NULL)
        RF_CHECK(pool_start(tr, n, err));
    struct rf_stream_pool *p = n > 1 ? tr->readers : NULL;
    if (p != NULL && p->helpers + 1 < n)
        n = p->helpers + 1;
    stream_task_t *tasks = malloc((c->piece_count + 2 * (size_t)n) * sizeof(*tasks));
    if (tasks == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory",
                          tr->me.world_rank);
    size_t nt = cut_tasks(tr, c, n, tasks);
    if (n > tr->stats.read_threads)
        tr->stats.read_threads = n;
    stream_result_t mine;
    if (n == 1 || nt == 0) {
        run_reader(tr, payload, tasks, nt, 0, &mine);
    } else {
        pthread_mutex_lock(&p->mu);
        p->tr = tr;
        p->payload = payload;
        p->tasks = tasks;
        p->ntasks = nt;
        p->pending = n - 1;
        p->gen++;
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
        run_reader(tr, payload, tasks, nt, 0, &mine);
        pthread_mutex_lock(&p->mu);
        while (p->pending > 0)
            pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    free(tasks);
    const stream_result_t *bad = mine.st != RF_OK ? &mine : NULL;
    tr->stats.bytes_read += mine.bytes;
    for (int w = 1; w < n && p != NULL; w++) {
        tr->stats.bytes_read += p->res[w].bytes;
        if (bad == NULL && p->res[w].st != RF_OK)
            bad = &p->res[w];
    }
    return bad != NULL ? rf_err_set(err, bad->st, "%s", bad->err.msg) : RF_OK;
}
