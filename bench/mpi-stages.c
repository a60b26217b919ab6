/*
 * mpi-stages: the own rate of each stage of a checkpoint update into GPU storage over the mpi
 * transport (issue #18 item 3; bench/mpi-pinned.sh, docs/benchmarks.md "Checkpoint into GPU
 * storage over mpi"), measured the way refit's path runs them, in the same run as the update
 * it is held against:
 *
 *   read      rank 0: the checkpoint file, already in the page cache, read with one thread
 *             by pread in chunk-size pieces into one host buffer;
 *   read_mt   the same with THREADS threads (default 4), each chunk cut into THREADS equal
 *             ranges read at once and joined before the next chunk, as the trainer's pack
 *             reads a streamed chunk with REFIT_CKPT_READ_THREADS (runtime/trainer_stream.c);
 *   mpi       rank 0 -> rank 1: chunk-size messages, two in flight on each side (the
 *             transport's default buffers), into rank 1's pinned (alloc_host) buffers and,
 *             separately, into pageable ones;
 *   h2d       rank 1: chunk-size copies from a pinned buffer into device memory, enqueued back
 *             to back on the accelerator's stream (cudaMemcpyAsync from pinned memory), and
 *             the same from a pageable buffer (the path before issue 18).
 *
 *   mpirun -np 2 mpi-stages FILE CHUNK_BYTES [DEVICE] [JSON] [THREADS]
 *
 * Each rate is the best of 3 passes over the file's size in bytes. Rank 0 prints a table and
 * writes JSON (stdout when JSON is absent). Needs a CUDA build and a GPU on rank 1 (DEVICE,
 * default 0); with the host accelerator (no CUDA) the h2d rows are memcpy.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "refit/accel.h"
#include "refit/time.h"

#define PASSES 3

static int rank;

static void die(const char *what)
{
    fprintf(stderr, "mpi-stages: rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* One pass reading the whole file in chunk pieces: seconds. */
static double read_pass(int fd, uint64_t size, void *buf, size_t chunk)
{
    double t0 = rf_time_now();
    for (uint64_t off = 0; off < size;) {
        size_t n = size - off < chunk ? (size_t)(size - off) : chunk;
        ssize_t got = pread(fd, buf, n, (off_t)off);
        if (got <= 0)
            die("pread failed");
        off += (uint64_t)got;
    }
    return rf_time_now() - t0;
}

/* read_mt: reader `who` of n reads its 1/n of every chunk, the readers joined per chunk. */
typedef struct {
    int fd, who, n;
    uint64_t size;
    char *buf;
    size_t chunk;
    pthread_barrier_t *bar;
    int failed;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    for (uint64_t off = 0; off < r->size; off += r->chunk) {
        size_t n = r->size - off < r->chunk ? (size_t)(r->size - off) : r->chunk;
        size_t per = (n + (size_t)r->n - 1) / (size_t)r->n, b = per * (size_t)r->who;
        size_t len = b >= n ? 0 : n - b < per ? n - b : per;
        for (size_t done = 0; done < len;) {
            ssize_t got = pread(r->fd, r->buf + b + done, len - done, (off_t)(off + b + done));
            if (got <= 0) {
                r->failed = 1;
                break;
            }
            done += (size_t)got;
        }
        pthread_barrier_wait(r->bar);
    }
    return NULL;
}

/* One pass reading the whole file in chunk pieces with n threads per chunk: seconds. */
static double read_mt_pass(int fd, uint64_t size, void *buf, size_t chunk, int n)
{
    pthread_barrier_t bar;
    pthread_t th[64];
    reader_t r[64];
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    double t0 = rf_time_now();
    for (int i = 0; i < n; i++) {
        r[i] = (reader_t){fd, i, n, size, buf, chunk, &bar, 0};
        if (i > 0 && pthread_create(&th[i], NULL, reader_main, &r[i]) != 0)
            die("pthread_create failed");
    }
    reader_main(&r[0]);
    for (int i = 1; i < n; i++)
        pthread_join(th[i], NULL);
    double t = rf_time_now() - t0;
    pthread_barrier_destroy(&bar);
    for (int i = 0; i < n; i++)
        if (r[i].failed)
            die("pread failed");
    return t;
}

/* One pass of nmsg messages of chunk bytes, two in flight: seconds (rank 0 sends). */
static double mpi_pass(void *bufs[2], size_t chunk, uint64_t nmsg)
{
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = rf_time_now();
    for (uint64_t i = 0; i < nmsg; i++) {
        int b = (int)(i % 2);
        MPI_Wait(&req[b], MPI_STATUS_IGNORE);
        if (rank == 0)
            MPI_Isend(bufs[b], (int)chunk, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &req[b]);
        else
            MPI_Irecv(bufs[b], (int)chunk, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &req[b]);
    }
    MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    double t = rf_time_now() - t0;
    MPI_Bcast(&t, 1, MPI_DOUBLE, 1, MPI_COMM_WORLD); /* the receiver's time: all bytes landed */
    return t;
}

/* One pass of nmsg copies of chunk bytes h2d from src into two alternating device buffers. */
static double h2d_pass(rf_accel_t *a, void *dev[2], const void *src, size_t chunk, uint64_t nmsg)
{
    double t0 = rf_time_now();
    for (uint64_t i = 0; i < nmsg; i++)
        if (a->ops->copy(a, dev[i % 2], src, chunk, RF_COPY_H2D, NULL) != RF_OK)
            die("h2d copy failed");
    if (rf_accel_sync(a) != RF_OK)
        die("synchronize failed");
    return rf_time_now() - t0;
}

static double best_of(double *t)
{
    double b = t[0];
    for (int i = 1; i < PASSES; i++)
        b = t[i] < b ? t[i] : b;
    return b;
}

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2 || argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 mpi-stages FILE CHUNK_BYTES [DEVICE] [JSON] "
                            "[THREADS]\n");
        MPI_Finalize();
        return 2;
    }
    const char *file = argv[1];
    size_t chunk = (size_t)strtoull(argv[2], NULL, 10);
    int device = argc > 3 ? atoi(argv[3]) : 0;
    const char *json = argc > 4 && argv[4][0] != '\0' ? argv[4] : NULL;
    char *end = NULL;
    long threads = argc > 5 ? strtol(argv[5], &end, 10) : 4;
    if (threads < 1 || threads > 64 || (argc > 5 && (end == argv[5] || *end != '\0')))
        die("THREADS must be a count in [1, 64]");
    if (chunk < 4096 || chunk > INT32_MAX)
        die("CHUNK_BYTES must be in [4096, 2^31)");
    uint64_t fsize = 0;
    int fd = -1;
    if (rank == 0) {
        struct stat sb;
        fd = open(file, O_RDONLY);
        if (fd < 0 || fstat(fd, &sb) != 0) {
            fprintf(stderr, "mpi-stages: %s: %s\n", file, strerror(errno));
            die("cannot open FILE");
        }
        fsize = (uint64_t)sb.st_size;
    }
    MPI_Bcast(&fsize, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    const uint64_t nmsg = (fsize + chunk - 1) / chunk;
    const double bytes = (double)nmsg * (double)chunk;
    double t_read[PASSES] = {0}, t_read_mt[PASSES] = {0}, t_mpi_pin[PASSES] = {0};
    double t_mpi_page[PASSES] = {0};
    double t_h2d_pin[PASSES] = {0}, t_h2d_page[PASSES] = {0};

    rf_accel_t *a = NULL;
    void *pin[2] = {NULL, NULL}, *page[2] = {NULL, NULL}, *dev[2] = {NULL, NULL};
    if (rank == 1) {
        const char *name = rf_accel_cuda_available() ? "cuda" : "host";
        if (rf_accel_open(name, device, &a) != RF_OK)
            die("cannot open the accelerator");
        for (int b = 0; b < 2; b++)
            if (a->ops->alloc_host(a, chunk, &pin[b]) != RF_OK ||
                a->ops->alloc(a, chunk, &dev[b]) != RF_OK)
                die("no pinned or device buffers");
    }
    for (int b = 0; b < 2; b++) {
        page[b] = aligned_alloc(4096, (chunk + 4095) / 4096 * 4096);
        if (page[b] == NULL)
            die("out of memory");
        memset(page[b], 0x5a, chunk); /* touched: no page faults inside the timed passes */
        if (pin[b] != NULL)
            memset(pin[b], 0x5a, chunk);
    }
    for (int p = 0; p < PASSES; p++) {
        if (rank == 0) {
            t_read[p] = read_pass(fd, fsize, page[0], chunk);
            t_read_mt[p] = read_mt_pass(fd, fsize, page[0], chunk, (int)threads);
        }
        /* rank 0 sends from pageable memory (the trainer's slots); rank 1 receives into each */
        t_mpi_pin[p] = mpi_pass(rank == 1 ? pin : page, chunk, nmsg);
        t_mpi_page[p] = mpi_pass(page, chunk, nmsg);
        if (rank == 1) {
            t_h2d_pin[p] = h2d_pass(a, dev, pin[0], chunk, nmsg);
            t_h2d_page[p] = h2d_pass(a, dev, page[0], chunk, nmsg);
        }
    }
    double h2d[2] = {best_of(t_h2d_pin), best_of(t_h2d_page)};
    MPI_Bcast(h2d, 2, MPI_DOUBLE, 1, MPI_COMM_WORLD);
    char accel[32] = "";
    if (rank == 1)
        snprintf(accel, sizeof(accel), "%s", a->ops->name);
    MPI_Bcast(accel, (int)sizeof(accel), MPI_CHAR, 1, MPI_COMM_WORLD);
    if (rank == 0) {
        char mt_what[64];
        snprintf(mt_what, sizeof(mt_what), "page-cache pread, %ld threads per chunk", threads);
        struct {
            const char *name, *what;
            double s;
        } rows[] = {
            {"read", "page-cache pread, 1 thread, chunk pieces", best_of(t_read)},
            {"read_mt", mt_what, best_of(t_read_mt)},
            {"mpi_pinned", "MPI p2p, 2 in flight, into pinned buffers", best_of(t_mpi_pin)},
            {"mpi_pageable", "MPI p2p, 2 in flight, into pageable buffers", best_of(t_mpi_page)},
            {"h2d_pinned", "h2d from pinned memory, async", h2d[0]},
            {"h2d_pageable", "h2d from pageable memory", h2d[1]},
        };
        json_t *root = json_object(), *st = json_object();
        json_object_set_new(root, "file_bytes", json_integer((json_int_t)fsize));
        json_object_set_new(root, "chunk_bytes", json_integer((json_int_t)chunk));
        json_object_set_new(root, "accelerator", json_string(accel));
        json_object_set_new(root, "passes", json_integer(PASSES));
        json_object_set_new(root, "read_threads", json_integer((json_int_t)threads));
        printf("%-14s %-46s %10s %8s\n", "stage", "what", "best ms", "GB/s");
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
            double gbps = (i <= 1 ? (double)fsize : bytes) / rows[i].s / 1e9;
            printf("%-14s %-46s %10.1f %8.2f\n", rows[i].name, rows[i].what, rows[i].s * 1e3,
                   gbps);
            json_object_set_new(st, rows[i].name,
                                json_pack("{s:f, s:f}", "best_s", rows[i].s, "GBps", gbps));
        }
        json_object_set_new(root, "stages", st);
        if (json != NULL ? json_dump_file(root, json, JSON_INDENT(2)) != 0
                         : json_dumpf(root, stdout, JSON_INDENT(2)) != 0)
            die("cannot write the JSON");
        json_decref(root);
        close(fd);
    }
    for (int b = 0; b < 2; b++) {
        free(page[b]);
        if (a != NULL) {
            a->ops->free_host(a, pin[b]);
            a->ops->free(a, dev[b]);
        }
    }
    rf_accel_close(a);
    MPI_Finalize();
    return 0;
}
