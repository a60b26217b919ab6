/*
 * h5-read: checkpoint read throughput, HDF5 against safetensors and a raw sequential read of
 * the same bytes (issue 16; docs/benchmarks.md). An MPI program; run with 1 and 2 ranks:
 *
 *   tools/mpirun.sh -np 2 build/h5-read --h5 FILE.h5 --safetensors DIR [--reps 5]
 *                   [--buffer all|shard|block] [--json F]
 *
 * Each rank reads its 1/N of every tensor's rows (name order), the trainer's cut, with every
 * reader under the same destination policy, so that the readers differ only in how they
 * read:
 *   shard  each tensor's shard lands whole in one buffer of the largest shard (up to 155 MB
 *          for Qwen3-0.6B's embedding at 1 rank): one rf_ckpt_read per tensor (one hyperslab
 *          / one pread), and raw preads the same sizes one after another from its 1/N of the
 *          .h5 file, into the same buffer;
 *   block  every read lands in one 4 MiB buffer: the readers take each shard in row blocks
 *          of at most 4 MiB, raw preads 4 MiB blocks.
 * Readers: hdf5 (independent reads, sec2 driver), hdf5-mpio (where libhdf5 is parallel, on
 * 2 or more ranks: rf_ckpt_collective_begin over the ranks, one collective transfer per read,
 * end; the open and close are inside the timed pass, as in the trainer's production),
 * safetensors, raw.
 * Every rank reads the same bytes under every reader. One warm-up pass of each first (page
 * cache warm), then --reps passes; the table gives the best pass (bytes of all ranks / the
 * slowest rank's time) and the fraction of raw under the same policy.
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

#define BLOCK ((uint64_t)4 << 20)

enum { R_HDF5, R_MPIO, R_ST, R_RAW, NREADERS };
static const char *READER[NREADERS] = {"hdf5", "hdf5-mpio", "safetensors", "raw"};
enum { P_SHARD, P_BLOCK, NPOLICIES };
static const char *POLICY[NPOLICIES] = {"shard", "block"};

static int g_rank, g_size;

static int die(const char *msg)
{
    fprintf(stderr, "h5-read: rank %d: %s\n", g_rank, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

/* This rank's rows of e, and the most rows any rank has (row blocks in step). */
static void my_rows(const rf_st_entry_t *e, uint64_t *r0, uint64_t *r1, uint64_t *most)
{
    uint64_t rows = rf_st_entry_rows(e), N = (uint64_t)g_size, r = (uint64_t)g_rank;
    *r0 = rows * r / N;
    *r1 = rows * (r + 1) / N;
    *most = (rows + N - 1) / N;
}

/* One pass over ck: this rank's rows of every tensor under policy p; bytes read, -1 on error.
 * coll: collective reads (every rank makes the same calls: row blocks counted from the most
 * rows any rank has, a rank out of rows taking part with nothing). */
static int64_t pass_ckpt(rf_ckpt_t *ck, int p, bool coll, char *buf, rf_err_t *err)
{
    int64_t total = 0;
    bool on = false;
    if (coll && (rf_ckpt_collective_begin(ck, MPI_COMM_WORLD, &on, err) != RF_OK || !on))
        return -1;
    for (size_t i = 0; i < rf_ckpt_count(ck); i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rb = rf_st_entry_row_bytes(e), r0, r1, most;
        my_rows(e, &r0, &r1, &most);
        if (rb == 0 || most == 0)
            continue;
        uint64_t step = p == P_SHARD ? most : (BLOCK / rb ? BLOCK / rb : 1);
        for (uint64_t b = 0; b < most; b += step) {
            uint64_t a = r0 + b < r1 ? r0 + b : r1, z = a + step < r1 ? a + step : r1;
            rf_status_t st = coll ? rf_ckpt_read_all(ck, e, a, z, 0, rb, buf, (size_t)rb, err)
                             : z > a  ? rf_ckpt_read(ck, e, a, z, 0, rb, buf, (size_t)rb, err)
                                      : RF_OK;
            if (st != RF_OK)
                return -1;
            total += (int64_t)((z - a) * rb);
        }
    }
    if (coll && rf_ckpt_collective_end(ck, err) != RF_OK)
        return -1;
    return total;
}

/* The same byte count read sequentially from this rank's 1/N of the .h5 file into buf:
 * policy shard in the sizes of this rank's shards (name order), block in 4 MiB blocks. */
static int64_t pass_raw(int fd, uint64_t fsz, rf_ckpt_t *ck, int p, char *buf)
{
    uint64_t off = fsz * (uint64_t)g_rank / (uint64_t)g_size, done = 0;
    for (size_t i = 0; i < rf_ckpt_count(ck); i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rb = rf_st_entry_row_bytes(e), r0, r1, most;
        my_rows(e, &r0, &r1, &most);
        uint64_t len = (r1 - r0) * rb;
        while (len > 0) {
            size_t n = (size_t)(p == P_BLOCK && len > BLOCK ? BLOCK : len);
            size_t at = p == P_SHARD ? (size_t)((r1 - r0) * rb - len) : 0;
            ssize_t r = pread(fd, buf + at, n, (off_t)(off + done));
            if (r <= 0)
                return -1;
            done += (uint64_t)r;
            len -= (uint64_t)r;
        }
    }
    return (int64_t)done;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    static const struct option longopts[] = {{"h5", required_argument, NULL, 'h'},
                                             {"safetensors", required_argument, NULL, 's'},
                                             {"reps", required_argument, NULL, 'r'},
                                             {"buffer", required_argument, NULL, 'b'},
                                             {"json", required_argument, NULL, 'j'},
                                             {NULL, 0, NULL, 0}};
    static const char *usage = "usage: h5-read --h5 FILE --safetensors DIR [--reps N] "
                               "[--buffer all|shard|block] [--json F]";
    const char *h5 = NULL, *st = NULL, *json_path = NULL, *policy = "all";
    int reps = 5, c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c == 'h')
            h5 = optarg;
        else if (c == 's')
            st = optarg;
        else if (c == 'r')
            reps = atoi(optarg);
        else if (c == 'b')
            policy = optarg;
        else if (c == 'j')
            json_path = optarg;
        else
            return die(usage);
    }
    bool pol_on[NPOLICIES] = {strcmp(policy, "all") == 0 || strcmp(policy, "shard") == 0,
                              strcmp(policy, "all") == 0 || strcmp(policy, "block") == 0};
    if (h5 == NULL || st == NULL || reps < 1 || (!pol_on[P_SHARD] && !pol_on[P_BLOCK]))
        return die(usage);
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck[2] = {NULL, NULL}; /* hdf5, safetensors */
    if (rf_ckpt_open(h5, &ck[0], &err) != RF_OK || rf_ckpt_open(st, &ck[1], &err) != RF_OK)
        return die(err.msg);
    uint64_t maxb = BLOCK;
    for (size_t i = 0; i < rf_ckpt_count(ck[0]); i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck[0], i);
        uint64_t r0, r1, most;
        my_rows(e, &r0, &r1, &most);
        if (most * rf_st_entry_row_bytes(e) > maxb)
            maxb = most * rf_st_entry_row_bytes(e);
    }
    char *shard_buf = malloc((size_t)maxb), *block_buf = malloc((size_t)BLOCK);
    int fd = open(h5, O_RDONLY);
    if (shard_buf == NULL || block_buf == NULL || fd < 0)
        return die("out of memory or cannot open the .h5 file");
    /* every page of both buffers touched before timing: no first-touch faults in a pass */
    memset(shard_buf, 0, (size_t)maxb);
    memset(block_buf, 0, (size_t)BLOCK);
    uint64_t fsz = (uint64_t)lseek(fd, 0, SEEK_END);
    bool mpio = rf_h5_is_parallel() && g_size > 1; /* one rank reads independently */
    double best[NPOLICIES][NREADERS];
    int64_t bytes[NPOLICIES][NREADERS];
    for (int p = 0; p < NPOLICIES; p++)
        for (int m = 0; m < NREADERS; m++) {
            best[p][m] = 1e30;
            bytes[p][m] = 0;
        }
    for (int rep = -1; rep < reps; rep++) { /* rep -1: the warm-up pass */
        for (int p = 0; p < NPOLICIES; p++) {
            if (!pol_on[p])
                continue;
            char *buf = p == P_SHARD ? shard_buf : block_buf;
            for (int m = 0; m < NREADERS; m++) {
                if (m == R_MPIO && !mpio)
                    continue;
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = rf_time_now();
                int64_t b = m == R_RAW ? pass_raw(fd, fsz, ck[0], p, buf)
                                       : pass_ckpt(ck[m == R_ST], p, m == R_MPIO, buf, &err);
                double dt = rf_time_now() - t0, slow = 0;
                if (b < 0)
                    return die(m == R_RAW ? "raw read failed" : err.msg);
                int64_t sum = 0;
                MPI_Allreduce(&dt, &slow, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                MPI_Allreduce(&b, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
                if (rep >= 0 && slow < best[p][m]) {
                    best[p][m] = slow;
                    bytes[p][m] = sum;
                }
            }
        }
    }
    if (g_rank == 0) {
        printf("h5-read: %s vs %s, %d rank(s), %zu tensors, HDF5 %s, best of %d (page cache "
               "warm); shard buffer %" PRIu64 " bytes, block buffer %" PRIu64 " bytes\n",
               h5, st, g_size, rf_ckpt_count(ck[0]), rf_h5_version(), reps, maxb, BLOCK);
        printf("%-7s %-12s %14s %10s %10s %8s\n", "buffer", "reader", "bytes", "seconds", "GB/s",
               "vs raw");
        json_t *rows = json_array();
        for (int p = 0; p < NPOLICIES; p++) {
            if (!pol_on[p])
                continue;
            double raw = (double)bytes[p][R_RAW] / best[p][R_RAW] / 1e9;
            for (int m = 0; m < NREADERS; m++) {
                if (m == R_MPIO && !mpio)
                    continue;
                double gbs = (double)bytes[p][m] / best[p][m] / 1e9;
                printf("%-7s %-12s %14" PRId64 " %10.4f %10.2f %7.1f%%\n", POLICY[p], READER[m],
                       bytes[p][m], best[p][m], gbs, 100.0 * gbs / raw);
                json_array_append_new(
                    rows, json_pack("{s:s, s:s, s:I, s:f, s:f, s:f}", "buffer", POLICY[p],
                                    "reader", READER[m], "bytes", (json_int_t)bytes[p][m],
                                    "seconds", best[p][m], "gb_per_s", gbs, "fraction_of_raw",
                                    gbs / raw));
            }
        }
        if (json_path != NULL) {
            json_t *root = json_pack("{s:s, s:s, s:i, s:s, s:i, s:I, s:o}", "h5", h5,
                                     "safetensors", st, "ranks", g_size, "hdf5",
                                     rf_h5_version(), "reps", reps, "shard_buffer_bytes",
                                     (json_int_t)maxb, "readers", rows);
            json_dump_file(root, json_path, JSON_INDENT(1));
            json_decref(root);
        } else {
            json_decref(rows);
        }
    }
    close(fd);
    free(shard_buf);
    free(block_buf);
    rf_ckpt_close(ck[0]);
    rf_ckpt_close(ck[1]);
    MPI_Finalize();
    return 0;
}
