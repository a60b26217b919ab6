/*
 * h5-read: checkpoint read throughput, HDF5 against safetensors and a raw sequential read of
 * the same bytes (issue 16; docs/benchmarks.md). An MPI program; run with 1 and 2 ranks:
 *
 *   tools/mpirun.sh -np 2 build/h5-read --h5 FILE.h5 --safetensors DIR [--reps 3] [--json F]
 *
 * Each rank reads its 1/N of every tensor's rows through rf_ckpt_read (the trainer's path: one
 * hyperslab / one pread per tensor) into one buffer of the largest shard; "raw" preads the
 * same number of bytes of the .h5 file sequentially in 4 MiB blocks (rank r its r-th 1/N).
 * One warm-up pass of each first (page cache warm), then --reps passes; the table gives the
 * best pass (bytes of all ranks / slowest rank's time). HDF5 reads are independent transfers
 * on every build (collective MPI-IO is not wired: docs/formats.md).
 */
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refit/checkpoint.h"
#include "refit/hdf5.h"
#include "refit/safetensors.h"
#include "refit/time.h"

static int die(int rank, const char *msg)
{
    if (rank == 0)
        fprintf(stderr, "h5-read: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

/* One pass over ck: this rank's rows of every tensor; returns bytes read, -1 on error. */
static int64_t pass_ckpt(rf_ckpt_t *ck, int rank, int size, char *buf, rf_err_t *err)
{
    int64_t total = 0;
    for (size_t i = 0; i < rf_ckpt_count(ck); i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        uint64_t r0 = rows * (uint64_t)rank / (uint64_t)size;
        uint64_t r1 = rows * (uint64_t)(rank + 1) / (uint64_t)size;
        if (r1 == r0 || rb == 0)
            continue;
        if (rf_ckpt_read(ck, e, r0, r1, 0, rb, buf, (size_t)rb, err) != RF_OK)
            return -1;
        total += (int64_t)((r1 - r0) * rb);
    }
    return total;
}

static int64_t pass_raw(int fd, uint64_t off, uint64_t len, char *buf, size_t blk)
{
    uint64_t done = 0;
    while (done < len) {
        size_t n = len - done < blk ? (size_t)(len - done) : blk;
        ssize_t r = pread(fd, buf, n, (off_t)(off + done));
        if (r <= 0)
            return -1;
        done += (uint64_t)r;
    }
    return (int64_t)done;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    static const struct option longopts[] = {{"h5", required_argument, NULL, 'h'},
                                             {"safetensors", required_argument, NULL, 's'},
                                             {"reps", required_argument, NULL, 'r'},
                                             {"json", required_argument, NULL, 'j'},
                                             {NULL, 0, NULL, 0}};
    const char *h5 = NULL, *st = NULL, *json_path = NULL;
    int reps = 3, c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c == 'h')
            h5 = optarg;
        else if (c == 's')
            st = optarg;
        else if (c == 'r')
            reps = atoi(optarg);
        else if (c == 'j')
            json_path = optarg;
        else
            return die(rank, "usage: h5-read --h5 FILE --safetensors DIR [--reps N] [--json F]");
    }
    if (h5 == NULL || st == NULL || reps < 1)
        return die(rank, "usage: h5-read --h5 FILE --safetensors DIR [--reps N] [--json F]");
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck[2] = {NULL, NULL};
    if (rf_ckpt_open(h5, &ck[0], &err) != RF_OK || rf_ckpt_open(st, &ck[1], &err) != RF_OK)
        return die(rank, err.msg);
    uint64_t maxb = 4u << 20;
    for (size_t i = 0; i < rf_ckpt_count(ck[0]); i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck[0], i);
        uint64_t shard = (rf_st_entry_rows(e) / (uint64_t)size + 1) * rf_st_entry_row_bytes(e);
        if (shard > maxb)
            maxb = shard;
    }
    char *buf = malloc((size_t)maxb);
    int fd = open(h5, O_RDONLY);
    if (buf == NULL || fd < 0)
        return die(rank, "out of memory or cannot open the .h5 file");
    const char *names[3] = {"hdf5", "safetensors", "raw"};
    double best[3] = {1e30, 1e30, 1e30};
    int64_t bytes[3] = {0, 0, 0};
    int64_t mine = 0;
    for (int rep = -1; rep < reps; rep++) { /* rep -1: the warm-up pass */
        for (int m = 0; m < 3; m++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = rf_time_now();
            int64_t b;
            if (m < 2) {
                b = pass_ckpt(ck[m], rank, size, buf, &err);
                if (m == 0)
                    mine = b;
            } else {
                /* the same byte count as this rank's HDF5 pass, sequential from its share */
                uint64_t fsz = rf_ckpt_count(ck[0]) ? (uint64_t)lseek(fd, 0, SEEK_END) : 0;
                uint64_t off = fsz * (uint64_t)rank / (uint64_t)size;
                uint64_t len = (uint64_t)mine;
                if (off + len > fsz)
                    len = fsz - off;
                b = pass_raw(fd, off, len, buf, 4u << 20);
            }
            double dt = rf_time_now() - t0, slow = 0;
            if (b < 0)
                return die(rank, m < 2 ? err.msg : "raw read failed");
            int64_t sum = 0;
            MPI_Allreduce(&dt, &slow, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(&b, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
            if (rep >= 0 && slow < best[m]) {
                best[m] = slow;
                bytes[m] = sum;
            }
        }
    }
    if (rank == 0) {
        double raw = (double)bytes[2] / best[2] / 1e9;
        printf("h5-read: %s vs %s, %d rank(s), %zu tensors, HDF5 %s, best of %d (page cache "
               "warm)\n",
               h5, st, size, rf_ckpt_count(ck[0]), rf_h5_version(), reps);
        printf("%-12s %14s %10s %10s %8s\n", "reader", "bytes", "seconds", "GB/s", "vs raw");
        json_t *rows = json_array();
        for (int m = 0; m < 3; m++) {
            double gbs = (double)bytes[m] / best[m] / 1e9;
            printf("%-12s %14" PRId64 " %10.4f %10.2f %7.1f%%\n", names[m], bytes[m], best[m],
                   gbs, 100.0 * gbs / raw);
            json_array_append_new(rows, json_pack("{s:s, s:I, s:f, s:f, s:f}", "reader",
                                                  names[m], "bytes", (json_int_t)bytes[m],
                                                  "seconds", best[m], "gb_per_s", gbs,
                                                  "fraction_of_raw", gbs / raw));
        }
        if (json_path != NULL) {
            json_t *root = json_pack("{s:s, s:s, s:i, s:s, s:o}", "h5", h5, "safetensors", st,
                                     "ranks", size, "hdf5", rf_h5_version(), "readers", rows);
            json_dump_file(root, json_path, JSON_INDENT(1));
            json_decref(root);
        } else {
            json_decref(rows);
        }
    }
    close(fd);
    free(buf);
    rf_ckpt_close(ck[0]);
    rf_ckpt_close(ck[1]);
    MPI_Finalize();
    return 0;
}
