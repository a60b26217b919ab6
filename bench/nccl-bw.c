/*
 * nccl-bw: refit's chunked NCCL broadcast against a plain ncclBroadcast of the same bytes, in
 * the same run, nccl-tests style (size, time, algbw, busbw; broadcast busbw = algbw). Two or
 * more ranks, rank r on CUDA device r, root = rank 0.
 *
 *   plain            one ncclBroadcast of S bytes on a blocking communicator
 *   refit device     rf_xfer_nccl_run over a one-item chunk plan of S bytes: the pack writes
 *                    each chunk's payload on the device (a d2d copy from a resident source, as a
 *                    trainer with weights on the GPU would), header h2d, ncclBroadcast per chunk,
 *                    double-buffered; receivers' unpack is a no-op (the bytes stay in the chunk
 *                    buffer)
 *   refit host       the same with the transport's host pack (pinned slot + h2d per chunk), the
 *                    path refit-run's trainers take today (they produce on the host)
 *
 * Times are the slowest rank's, best and median of --iters after one warm-up.
 *
 *   mpirun -np 2 --bind-to none build-gpu/nccl-bw [--chunk 256MiB] [--sizes 64MiB,1GiB,4GiB]
 *          [--iters 5] [--json FILE]          (build-gpu: tools/gpu-run.sh's CUDA build)
 */
#include <cuda_runtime.h>
#include <jansson.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/topology.h"
#include "refit/transport.h"
#include "refit/transport_nccl.h"

#define MAX_SIZES 16
#define ROW_BYTES 4096u

static int rank, nranks;

static void die(const char *what)
{
    fprintf(stderr, "nccl-bw: rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            die(cudaGetErrorString(e_));                                                       \
    } while (0)
#define NCCL_OK(call)                                                                          \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        if (r_ != ncclSuccess)                                                                 \
            die(ncclGetErrorString(r_));                                                       \
    } while (0)

static uint64_t parse_size(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    uint64_t m = 1;
    if (end && (strncmp(end, "KiB", 3) == 0))
        m = 1ull << 10;
    else if (end && strncmp(end, "MiB", 3) == 0)
        m = 1ull << 20;
    else if (end && strncmp(end, "GiB", 3) == 0)
        m = 1ull << 30;
    else if (end && *end && *end != ',')
        die("sizes take B, KiB, MiB or GiB");
    return (uint64_t)(v * (double)m);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* best and median of n samples */
static void stats(double *t, int n, double *best, double *med)
{
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    *best = t[0];
    *med = t[n / 2];
}

/* the slowest rank's wall time of fn around a barrier */
static double timed_max(double t_local)
{
    double t = 0;
    MPI_Allreduce(&t_local, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

typedef struct pack_ctx {
    const char *src; /* device source of S bytes */
    cudaStream_t stream;
} pack_ctx_t;

static rf_status_t pack_device(void *vctx, const rf_chunk_t *c, const rf_chunk_piece_t *pieces,
                               void *payload, rf_chunk_sum_t *sum, rf_err_t *err)
{
    (void)sum; /* nccl asks for no payload sum */
    pack_ctx_t *p = vctx;
    for (size_t k = 0; k < c->piece_count; k++) {
        const rf_chunk_piece_t *pc = &pieces[k];
        cudaError_t e = cudaMemcpyAsync((char *)payload + pc->offset,
                                        p->src + pc->row_begin * ROW_BYTES, (size_t)pc->bytes,
                                        cudaMemcpyDeviceToDevice, p->stream);
        if (e != cudaSuccess)
            return rf_err_set(err, RF_ERR_CUDA, "pack: %s", cudaGetErrorString(e));
    }
    return cudaStreamSynchronize(p->stream) == cudaSuccess
               ? RF_OK
               : rf_err_set(err, RF_ERR_CUDA, "pack: stream sync failed");
}

static rf_status_t pack_host(void *vctx, const rf_chunk_t *c, const rf_chunk_piece_t *pieces,
                             void *payload, rf_chunk_sum_t *sum, rf_err_t *err)
{
    (void)sum; /* nccl asks for no payload sum */
    (void)vctx;
    (void)c;
    (void)pieces;
    (void)payload; /* the pinned slot is sent as it is: the h2d and the wire are measured */
    (void)err;
    return RF_OK;
}

static rf_status_t unpack_none(void *vctx, const rf_chunk_t *c, const rf_xfer_segment_t *segs,
                               size_t nsegs, const void *payload, rf_err_t *err)
{
    (void)vctx;
    (void)c;
    (void)segs;
    (void)nsegs;
    (void)payload;
    (void)err;
    return RF_OK;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    uint64_t chunk = 256ull << 20, sizes[MAX_SIZES];
    int nsizes = 0, iters = 5;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
            chunk = parse_size(argv[++i]);
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json_path = argv[++i];
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            char *list = strdup(argv[++i]);
            for (char *t = strtok(list, ","); t && nsizes < MAX_SIZES; t = strtok(NULL, ","))
                sizes[nsizes++] = parse_size(t);
            free(list);
        } else {
            if (rank == 0)
                fprintf(stderr,
                        "usage: mpirun -np N nccl-bw [--chunk SIZE] [--sizes S1,S2,...] "
                        "[--iters K] [--json FILE]\n\n"
                        "refit's chunked NCCL broadcast (rf_xfer_nccl_run, 2 buffers) against one\n"
                        "plain ncclBroadcast of the same bytes, root rank 0, rank r on GPU r.\n"
                        "Prints size, chunks, time (ms), algbw and busbw (GB/s, = algbw for a\n"
                        "broadcast) and refit's %% of plain, for the device pack (payload written\n"
                        "on the GPU) and the host pack (pinned slot + h2d); best of K after a\n"
                        "warm-up, slowest rank.\n"
                        "  --chunk SIZE   refit's chunk_bytes (default 256MiB)\n"
                        "  --sizes LIST   payload sizes, B / KiB / MiB / GiB (default "
                        "64MiB,1GiB,4GiB)\n"
                        "  --iters K      timed repetitions (default 5)\n"
                        "  --json FILE    rank 0 writes the rows there\n");
            MPI_Finalize();
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (nsizes == 0) {
        sizes[nsizes++] = 64ull << 20;
        sizes[nsizes++] = 1ull << 30;
        sizes[nsizes++] = 4ull << 30;
    }
    if (iters < 1)
        iters = 1;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < nranks || nranks < 2) {
        if (rank == 0)
            fprintf(stderr, "nccl-bw: needs 2+ ranks and one GPU per rank (%d ranks, %d GPUs)\n",
                    nranks, ndev);
        MPI_Finalize();
        return 1;
    }
    CUDA_OK(cudaSetDevice(rank));
    rf_accel_t *ax = NULL;
    if (rf_accel_open("cuda", rank, &ax) != RF_OK)
        die("cannot open the cuda accelerator");

    /* plain: a blocking communicator of every rank */
    ncclUniqueId id;
    ncclComm_t comm;
    if (rank == 0)
        NCCL_OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
    cudaStream_t stream, pstream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&pstream, cudaStreamNonBlocking));

    /* refit: one broadcast communicator {0, 1, ..} (stage 0, sender 0) */
    rf_err_t err;
    rf_err_clear(&err);
    rf_ctl_t *ctl = NULL;
    rf_xfer_t *x = NULL;
    rf_nccl_layout_t layout;
    memset(&layout, 0, sizeof(layout));
    layout.n = 1;
    layout.comms = calloc(1, sizeof(rf_nccl_comm_layout_t));
    layout.comms[0].n = nranks;
    layout.comms[0].ranks = calloc((size_t)nranks, sizeof(int));
    for (int r = 0; r < nranks; r++)
        layout.comms[0].ranks[r] = r;
    if (rf_ctl_create(MPI_COMM_WORLD, &ctl, &err) != RF_OK ||
        rf_xfer_create(ctl, "nccl", chunk, 2, &x, &err) != RF_OK ||
        rf_xfer_nccl_setup(x, &layout, rank, ax, &err) != RF_OK)
        die(err.msg);
    int *receivers = calloc((size_t)nranks, sizeof(int));
    for (int r = 1; r < nranks; r++)
        receivers[r - 1] = r;
    static const int sender0 = 0;

    uint64_t maxs = 0;
    for (int i = 0; i < nsizes; i++)
        maxs = sizes[i] > maxs ? sizes[i] : maxs;
    char *buf = NULL;
    CUDA_OK(cudaMalloc((void **)&buf, (size_t)maxs));
    CUDA_OK(cudaMemset(buf, rank == 0 ? 0x5A : 0, (size_t)maxs));
    double *t = calloc((size_t)iters, sizeof(double));
    json_t *rows = json_array();
    uint32_t update = 1;
    if (rank == 0) {
        printf("nccl-bw: %d ranks, one GPU each, root 0; refit chunk %.0f MiB, 2 buffers; best / "
               "median of %d (slowest rank)\n",
               nranks, (double)chunk / (1 << 20), iters);
        printf("%12s %10s | %10s %8s %8s | %-6s %10s %8s %8s %7s\n", "size (B)", "chunks",
               "plain ms", "algbw", "busbw", "refit", "ms", "algbw", "busbw", "of plain");
    }
    for (int si = 0; si < nsizes; si++) {
        uint64_t S = sizes[si] / ROW_BYTES * ROW_BYTES;
        double pb, pm;
        for (int it = -1; it < iters; it++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            NCCL_OK(ncclBroadcast(buf, buf, (size_t)S, ncclUint8, 0, comm, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            double tt = timed_max(MPI_Wtime() - t0);
            if (it >= 0)
                t[it] = tt;
        }
        stats(t, iters, &pb, &pm);
        rf_chunk_item_t item = {0, S / ROW_BYTES, ROW_BYTES, S, "payload"};
        rf_chunk_plan_t *plan = NULL;
        if (rf_chunk_plan_create(&item, 1, chunk, &plan, &err) != RF_OK)
            die(err.msg);
        json_t *row = json_pack("{s:I, s:I, s:f, s:f, s:f}", "bytes", (json_int_t)S, "chunks",
                                (json_int_t)plan->n_chunks, "plain_best_s", pb, "plain_median_s",
                                pm, "plain_busbw_GBps", (double)S / pb / 1e9);
        for (int mode = 0; mode < 2; mode++) {
            pack_ctx_t pc = {buf, pstream};
            double rb, rm;
            for (int it = -1; it < iters; it++) {
                uint32_t v = update++;
                if (rf_ctl_begin(ctl, v, &err) != RF_OK)
                    die(err.msg);
                double dl = rf_time_now() + 300.0;
                if (rf_xfer_begin(x, v, dl, &err) != RF_OK)
                    die(err.msg);
                rf_xfer_config_t cfg = {v,    plan, &sender0, receivers, nranks - 1, dl,
                                        RF_XFER_FAULT_NONE, 0, &item, mode == 0, NULL, 0, 0};
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                rf_status_t st =
                    rank == 0 ? rf_xfer_nccl_run(x, &cfg, mode == 0 ? pack_device : pack_host,
                                                 &pc, NULL, NULL, &err)
                              : rf_xfer_nccl_run(x, &cfg, NULL, NULL, unpack_none, NULL, &err);
                if (st != RF_OK)
                    die(err.msg);
                double tt = timed_max(MPI_Wtime() - t0);
                if (it >= 0)
                    t[it] = tt;
            }
            stats(t, iters, &rb, &rm);
            const char *name = mode == 0 ? "device" : "host";
            if (rank == 0)
                printf("%12llu %10zu | %10.3f %8.1f %8.1f | %-6s %10.3f %8.1f %8.1f %6.1f%%\n",
                       (unsigned long long)S, plan->n_chunks, pb * 1e3, (double)S / pb / 1e9,
                       (double)S / pb / 1e9, name, rb * 1e3, (double)S / rb / 1e9,
                       (double)S / rb / 1e9, 100.0 * pb / rb);
            char k1[64], k2[64], k3[64];
            snprintf(k1, sizeof(k1), "refit_%s_best_s", name);
            snprintf(k2, sizeof(k2), "refit_%s_median_s", name);
            snprintf(k3, sizeof(k3), "refit_%s_of_plain", name);
            json_object_set_new(row, k1, json_real(rb));
            json_object_set_new(row, k2, json_real(rm));
            json_object_set_new(row, k3, json_real(pb / rb));
        }
        json_array_append_new(rows, row);
        rf_chunk_plan_destroy(plan);
    }
    if (rank == 0 && json_path != NULL) {
        json_t *doc = json_pack("{s:i, s:I, s:i, s:o}", "ranks", nranks, "chunk_bytes",
                                (json_int_t)chunk, "iters", iters, "rows", rows);
        if (json_dump_file(doc, json_path, JSON_INDENT(2)) != 0)
            fprintf(stderr, "nccl-bw: cannot write %s\n", json_path);
        json_decref(doc);
    } else {
        json_decref(rows);
    }
    free(t);
    free(receivers);
    cudaFree(buf);
    rf_xfer_destroy(x);
    rf_ctl_destroy(ctl);
    rf_nccl_layout_free(&layout);
    ncclCommDestroy(comm);
    rf_accel_close(ax);
    MPI_Finalize();
    return 0;
}
