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
 * The fused seal (issue 18 item 1): asked for the payload's refit-sum64 word sum (an mpi sender
 * sealing refit-sum64, rf_xfer_pack_fn's sum), each reader reads its whole-width parts in
 * blocks of STREAM_SUM_BLOCK bytes and sums each block's whole words right after its pread,
 * while they are in its cache; the calling thread then sums what no reader did (the header's
 * padding to the first piece, the gaps between pieces, words a reader boundary cuts, strided
 * parts) and adds the readers' sums (the sum is associative). The seal then reads only the
 * header (rf_chunk_seal_sum) where it read the whole chunk again from memory.
 *
 * Errors: every reader stops at its first failed read; the lowest-numbered failed reader's
 * error is returned (it names the tensor and rows), after every reader finished, so the
 * payload is never written behind the caller's back.
 */
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/checkpoint.h"
#include "refit/pool.h"
#include "refit/trainer.h"
#include "trainer_int.h"

/* The fused seal's read block: summed right after it is read, in the reader's L2 (1-2 MiB a
 * core on the hosts measured). */
#define STREAM_SUM_BLOCK (256u << 10)

/* One read: rows part.r0..r1 of entry ei into piece pc, by reader `who`; with the fused seal
 * its payload words [w0, w1) are summed into S (w1 == w0: none, the caller reads them). */
typedef struct {
    int ei;
    int who;
    const rf_chunk_piece_t *pc;
    rf_region_t part;
    uint64_t w0, w1, S;
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
    stream_task_t *tasks; /* each reader writes its own tasks' w0, w1, S */
    size_t ntasks;
    bool sum;             /* the fused seal: sum what is read */
    uint64_t block;       /* its read block (bytes) */
    stream_result_t *res; /* [the run's workers] */
} stream_job_t;

/* Task t read in blocks, the whole words of each block summed right after its read. A part
 * narrower than its rows (strided in the payload) is read whole and left to the caller. */
static rf_status_t read_summed(const stream_job_t *j, stream_task_t *t, uint64_t *bytes,
                               rf_err_t *err)
{
    rf_trainer_t *tr = j->tr;
    uint64_t rb = entry_row_bytes(tr, t->ei);
    const rf_chunk_piece_t *pc = t->pc;
    t->w0 = t->w1 = t->S = 0;
    if ((uint64_t)(t->part.c1 - t->part.c0) * entry_es(tr, t->ei) != rb || rb == 0)
        return trainer_stream_part(tr, t->ei, pc, &t->part, j->payload, bytes, err);
    uint64_t at = pc->offset + (uint64_t)(t->part.r0 - (int64_t)pc->row_begin) * rb;
    uint64_t cur = (at + 7) / 8; /* the next payload word to sum */
    int64_t step = j->block / rb > 0 ? (int64_t)(j->block / rb) : 1;
    t->w0 = cur;
    for (int64_t r = t->part.r0; r < t->part.r1;) {
        int64_t take = t->part.r1 - r < step ? t->part.r1 - r : step;
        rf_region_t sub = t->part;
        sub.r0 = r;
        sub.r1 = r + take;
        RF_CHECK(trainer_stream_part(tr, t->ei, pc, &sub, j->payload, bytes, err));
        r += take;
        uint64_t end = (pc->offset + (uint64_t)(r - (int64_t)pc->row_begin) * rb) / 8;
        if (end > cur) {
            t->S += rf_accel_sum_words(j->payload + cur * 8, (size_t)(end - cur) * 8, cur + 2);
            cur = end;
        }
    }
    t->w1 = cur;
    return RF_OK;
}

static void reader_main(void *ctx, int who, int n)
{
    (void)n;
    stream_job_t *j = ctx;
    stream_result_t *r = &j->res[who];
    r->bytes = 0;
    r->st = RF_OK;
    rf_err_clear(&r->err);
    for (size_t i = 0; i < j->ntasks && r->st == RF_OK; i++) {
        stream_task_t *t = &j->tasks[i];
        if (t->who != who)
            continue;
        r->st = j->sum ? read_summed(j, t, &r->bytes, &r->err)
                       : trainer_stream_part(j->tr, t->ei, t->pc, &t->part, j->payload, &r->bytes,
                                             &r->err);
    }
}

/* The payload's word sum: the readers' sums, and every word none of them summed read here. */
static uint64_t payload_sum(const stream_job_t *j, uint64_t payload_bytes)
{
    uint64_t S = 0, cur = 0;
    for (size_t i = 0; i < j->ntasks; i++) {
        const stream_task_t *t = &j->tasks[i];
        if (t->w1 <= t->w0)
            continue;
        if (t->w0 > cur) /* tasks run in payload order: w0 >= cur */
            S += rf_accel_sum_words(j->payload + cur * 8, (size_t)(t->w0 - cur) * 8, cur + 2);
        S += t->S;
        cur = t->w1;
    }
    return S + rf_accel_sum_words(j->payload + cur * 8, (size_t)(payload_bytes - cur * 8), cur + 2);
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
            out[nt].w0 = out[nt].w1 = out[nt].S = 0;
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
                                 rf_chunk_sum_t *sum, rf_err_t *err)
{
    int n = tr->read_threads > 1 ? tr->read_threads : 1;
    bool st_fmt = strcmp(rf_ckpt_format(tr->stream_ck), "safetensors") == 0;
    if (n > RF_POOL_MAX)
        n = RF_POOL_MAX;
    if (n > 1 && !st_fmt)
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
    stream_job_t job = {.tr = tr,
                        .payload = payload,
                        .tasks = tasks,
                        .sum = sum != NULL,
                        /* an HDF5 read costs more per call: one read a part */
                        .block = !st_fmt         ? UINT64_MAX
                                 : tr->sum_block ? tr->sum_block
                                                 : STREAM_SUM_BLOCK,
                        .res = res},
                 *j = &job;
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
    if (st == RF_OK && sum != NULL && j->ntasks > 0) { /* nothing read: the seal's pool sums */
        sum->S = payload_sum(j, c->payload_bytes);
        sum->have = 1;
    }
    free(tasks);
    free(res);
    return st;
}
