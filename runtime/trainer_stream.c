/*
 * refit: streamed checkpoint reads split over read threads (issue 18 item 3; the streamed
 * production itself is rf_trainer_produce's, include/refit/trainer.h). One pread stream from
 * the page cache runs at 6-8 GB/s on the H200 host, about the rate of MPI into a pinned buffer,
 * so a sender that reads each chunk's pieces as it packs them is bound by its one read
 * thread. Here the chunk's bytes are cut, by rows, into tr->read_threads contiguous ranges of
 * about equal size, and each range is read by one thread: the calling (pack) thread takes the
 * first, a persistent pool of read_threads - 1 helper threads the others (rf_pool, started at
 * the first streamed chunk, joined by rf_trainer_free). The bytes land exactly where the one-thread
 * read puts them; only safetensors checkpoints are split (pread on one descriptor from several
 * threads, atomic counters: include/refit/checkpoint.h); an HDF5 checkpoint (serial HDF5 is
 * not thread safe) is read by the calling thread alone.
 *
 * Errors: every reader stops at its first failed read; the lowest-numbered failed reader's
 * error is returned (it names the tensor and rows), after every reader finished, so the
 * payload is never written behind the caller's back.
 */
#include <stdlib.h>
#include <string.h>

#include "refit/checkpoint.h"
#include "refit/pool.h"
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

/* One chunk's reads, shared by the workers of tr->readers (include/refit/pool.h). */
typedef struct {
    rf_trainer_t *tr;
    char *payload;
    const stream_task_t *tasks;
    size_t ntasks;
    stream_result_t *res; /* [the run's workers] */
} stream_job_t;

static void reader_main(void *ctx, int who, int n)
{
    (void)n;
    stream_job_t *j = ctx;
    stream_result_t *r = &j->res[who];
    r->bytes = 0;
    r->st = RF_OK;
    rf_err_clear(&r->err);
    for (size_t i = 0; i < j->ntasks && r->st == RF_OK; i++)
        if (j->tasks[i].who == who)
            r->st = trainer_stream_part(j->tr, j->tasks[i].ei, j->tasks[i].pc, &j->tasks[i].part,
                                        j->payload, &r->bytes, &r->err);
}

/* Whether plan piece gi is read from the streamed checkpoint by the pack: packed (tr->gathered)
 * and intersecting this rank's shard; its rows in *part. */
static bool stream_piece(const rf_trainer_t *tr, size_t gi, rf_region_t *part)
{
    int ei = (int)tr->plan->pieces[gi].item;
    return piece_on(tr, gi) && tr->has[ei] && piece_part(&tr->reg[ei], &tr->plan->pieces[gi], part);
}

/* The chunk's streamed parts cut into n row ranges of about equal bytes, in payload order.
 * Returns the task count (at most piece_count + n - 1), or 0 when nothing is streamed. */
static size_t cut_tasks(const rf_trainer_t *tr, const rf_chunk_t *c, int n, stream_task_t *out)
{
    uint64_t total = 0;
    for (size_t k = 0; k < c->piece_count; k++) {
        const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + k];
        rf_region_t part;
        if (stream_piece(tr, c->piece_begin + k, &part))
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
        if (!stream_piece(tr, c->piece_begin + k, &part))
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
    if (n > RF_POOL_MAX)
        n = RF_POOL_MAX;
    if (n > 1 && strcmp(rf_ckpt_format(tr->stream_ck), "safetensors") != 0)
        n = 1; /* serial HDF5 is not thread safe */
    if (n > 1 && tr->readers == NULL)
        RF_CHECK(rf_pool_create(n, &tr->readers, err));
    rf_pool_t *pool = n > 1 ? tr->readers : NULL;
    n = rf_pool_threads(pool); /* the helpers that started */
    stream_result_t *res = malloc((size_t)n * sizeof(*res));
    stream_task_t *tasks = malloc((c->piece_count + 2 * (size_t)n) * sizeof(*tasks));
    if (res == NULL || tasks == NULL) {
        free(res);
        free(tasks);
        return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory", tr->me.world_rank);
    }
    stream_job_t job = {.tr = tr, .payload = payload, .tasks = tasks, .res = res}, *j = &job;
    j->ntasks = cut_tasks(tr, c, n, tasks);
    if (n > tr->stats.read_threads)
        tr->stats.read_threads = n;
    rf_pool_run(pool, reader_main, j);
    const stream_result_t *bad = NULL;
    for (int w = 0; w < n; w++) {
        tr->stats.bytes_read += j->res[w].bytes;
        if (bad == NULL && j->res[w].st != RF_OK)
            bad = &j->res[w];
    }
    rf_status_t st = bad != NULL ? rf_err_set(err, bad->st, "%s", bad->err.msg) : RF_OK;
    free(tasks);
    free(res);
    return st;
}
