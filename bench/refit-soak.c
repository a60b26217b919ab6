/*
 * refit-soak: runs many consecutive updates of the job and checks that no rank's resident
 * memory grows (DESIGN.md section 16: max over ranks of VmRSS(update N) - VmRSS(update 10)
 * <= 1 MiB).
 *
 *   mpirun -np 4 refit-soak [--steps N] [--topology FILE] [--checkpoint DIR] [--json FILE]
 *
 * Defaults: 1000 updates of jobs/topologies/llama-tiny-tp2-to-2xtp1.yaml with the tiny real
 * checkpoint tests/data/llama-tiny (4 ranks on CPU), run from the source root. rf_job_run
 * calls back after every update; the callback reads VmRSS from /proc/self/status after update
 * 10 (or the last, if fewer) and after the last update. Rank 0 gathers the figures, prints one
 * row per rank (nccl-tests style) and writes them as JSON with --json. Exit status 0 only if
 * every update committed and verified and the largest growth is at most 1 MiB.
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/job.h"
#include "refit/log.h"
#include "refit/model.h"
#include "refit/status.h"
#include "refit/topology.h"

#define RF_SOAK_PROBE_UPDATE 10
#define RF_SOAK_MAX_GROWTH_KB 1024 /* 1 MiB */

/* Per-rank probes, filled by the after-update callback. */
typedef struct rf_soak {
    int probe_update; /* first reading after this update */
    int steps;
    int64_t rss_probe_kb; /* VmRSS after probe_update, -1 until read */
    int64_t rss_last_kb;  /* VmRSS after the last update, -1 until read */
    int64_t failed;       /* updates this rank saw fail */
} rf_soak_t;

/* VmRSS of this process in KiB, or -1. */
static int64_t rf_soak_vmrss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int64_t kb = -1;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtoll(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

static void rf_soak_after_update(void *ctx, int update, bool ok)
{
    rf_soak_t *s = ctx;
    if (!ok)
        s->failed++;
    if (update == s->probe_update)
        s->rss_probe_kb = rf_soak_vmrss_kb();
    if (update == s->steps)
        s->rss_last_kb = rf_soak_vmrss_kb();
}

static void rf_soak_usage(FILE *f)
{
    fprintf(f, "usage: mpirun -np N refit-soak [--steps N] [--topology FILE] [--checkpoint DIR|none]\n"
               "                             [--json FILE]\n"
               "  --steps N         updates (default 1000)\n"
               "  --topology FILE   default jobs/topologies/llama-tiny-tp2-to-2xtp1.yaml\n"
               "  --checkpoint DIR  default tests/data/llama-tiny; 'none': generator weights\n"
               "  --json FILE       per-rank figures as JSON (rank 0 writes it)\n"
               "fails when an update fails or max over ranks of VmRSS(last) - VmRSS(update %d)\n"
               "exceeds 1 MiB\n",
            RF_SOAK_PROBE_UPDATE);
}

/* Rank 0: the table and the JSON file; returns the largest growth in KiB. */
static int64_t rf_soak_report(const int64_t *all, const int *roles, int size, int steps,
                              int probe, const char *json_path, const char *topology,
                              const char *checkpoint)
{
    int64_t max_diff = INT64_MIN;
    json_t *root = json_object(), *ranks = json_array();
    printf("# refit-soak: %d updates, topology %s, %s\n", steps, topology,
           checkpoint ? checkpoint : "generator weights");
    char probe_col[32];
    snprintf(probe_col, sizeof(probe_col), "vmrss@%d_kB", probe);
    printf("# %6s %8s %14s %14s %10s %8s\n", "rank", "role", probe_col, "vmrss@last_kB",
           "diff_kB", "failed");
    for (int r = 0; r < size; r++) {
        const int64_t *v = &all[3 * r];
        int64_t diff = (v[0] < 0 || v[1] < 0) ? INT64_MAX : v[1] - v[0];
        const char *role = roles[r] < 0 ? "?" : roles[r] == RF_ROLE_TRAINER ? "trainer" : "rollout";
        if (diff > max_diff)
            max_diff = diff;
        printf("  %6d %8s %14" PRId64 " %14" PRId64 " %10" PRId64 " %8" PRId64 "\n", r, role,
               v[0], v[1], diff, v[2]);
        json_array_append_new(ranks, json_pack("{s:i, s:s, s:I, s:I, s:I, s:I}", "rank", r,
                                               "role", role, "vmrss_probe_kb", (json_int_t)v[0],
                                               "vmrss_last_kb", (json_int_t)v[1], "diff_kb",
                                               (json_int_t)diff, "failed_updates",
                                               (json_int_t)v[2]));
    }
    printf("# max diff %" PRId64 " kB (limit %d kB)\n", max_diff, RF_SOAK_MAX_GROWTH_KB);
    json_object_set_new(root, "steps", json_integer(steps));
    json_object_set_new(root, "probe_update", json_integer(probe));
    json_object_set_new(root, "topology", json_string(topology));
    json_object_set_new(root, "checkpoint", checkpoint ? json_string(checkpoint) : json_null());
    json_object_set_new(root, "max_diff_kb", json_integer(max_diff));
    json_object_set_new(root, "limit_kb", json_integer(RF_SOAK_MAX_GROWTH_KB));
    json_object_set_new(root, "ranks", ranks);
    if (json_path != NULL && json_dump_file(root, json_path, JSON_INDENT(2)) != 0)
        fprintf(stderr, "refit-soak: cannot write %s\n", json_path);
    json_decref(root);
    return max_diff;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"steps", required_argument, NULL, 's'},   {"topology", required_argument, NULL, 't'},
        {"checkpoint", required_argument, NULL, 'c'}, {"json", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *topology = "jobs/topologies/llama-tiny-tp2-to-2xtp1.yaml";
    const char *checkpoint = "tests/data/llama-tiny";
    const char *json_path = NULL;
    int steps = 1000, rank = 0, size = 1, rc, bad_args = 0;
    rf_soak_t soak;
    rf_job_opts_t opts;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    rf_log_set_rank(rank);
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, "h", longopts, NULL);
        char *end;
        if (c == -1)
            break;
        switch (c) {
        case 's':
            steps = (int)strtol(optarg, &end, 10);
            if (*end != '\0' || steps <= 0)
                bad_args = 1;
            break;
        case 't':
            topology = optarg;
            break;
        case 'c':
            checkpoint = strcmp(optarg, "none") == 0 ? NULL : optarg;
            break;
        case 'j':
            json_path = optarg;
            break;
        case 'h':
            if (rank == 0)
                rf_soak_usage(stdout);
            MPI_Finalize();
            return 0;
        default:
            bad_args = 1;
        }
    }
    if (bad_args || optind < argc) {
        if (rank == 0)
            rf_soak_usage(stderr);
        MPI_Finalize();
        return 2;
    }

    /* this rank's role, for the table (rf_job_run loads the topology again itself) */
    int role = -1;
    {
        rf_topology_t *topo = calloc(1, sizeof(*topo));
        rf_model_config_t cfg;
        rf_rank_info_t info;
        rf_err_t err;
        memset(&cfg, 0, sizeof(cfg));
        rf_err_clear(&err);
        if (topo != NULL && rf_topology_load(topology, MPI_COMM_WORLD, topo, &cfg, &err) == RF_OK) {
            if (rf_topology_rank_info(topo, rank, &info) == RF_OK)
                role = (int)info.role;
            rf_model_config_free(&cfg);
        }
        free(topo);
    }

    memset(&soak, 0, sizeof(soak));
    soak.steps = steps;
    soak.probe_update = steps < RF_SOAK_PROBE_UPDATE ? steps : RF_SOAK_PROBE_UPDATE;
    soak.rss_probe_kb = soak.rss_last_kb = -1;
    memset(&opts, 0, sizeof(opts));
    opts.topology = topology;
    opts.checkpoint = checkpoint;
    opts.format = "none";
    opts.profile_dir = NULL;
    opts.steps = steps;
    opts.policy = RF_POLICY_AUTO;
    opts.quiet = true;
    opts.after_update = rf_soak_after_update;
    opts.after_update_ctx = &soak;
    rc = rf_job_run(&opts);

    int64_t mine[3] = {soak.rss_probe_kb, soak.rss_last_kb, soak.failed};
    int64_t *all = rank == 0 ? calloc((size_t)size * 3, sizeof(int64_t)) : NULL;
    int *roles = rank == 0 ? calloc((size_t)size, sizeof(int)) : NULL;
    MPI_Gather(mine, 3, MPI_INT64_T, all, 3, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Gather(&role, 1, MPI_INT, roles, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int exit_code = 0;
    if (rank == 0) {
        int64_t max_diff = rf_soak_report(all, roles, size, steps, soak.probe_update, json_path,
                                          topology, checkpoint);
        int64_t failed = 0;
        for (int r = 0; r < size; r++)
            failed += all[3 * r + 2];
        if (rc != 0 || failed != 0) {
            printf("refit-soak: FAILED: an update failed (see the refit line above)\n");
            exit_code = 1;
        } else if (max_diff > RF_SOAK_MAX_GROWTH_KB) {
            printf("refit-soak: FAILED: vmrss grew by %" PRId64 " kB (limit %d kB)\n", max_diff,
                   RF_SOAK_MAX_GROWTH_KB);
            exit_code = 1;
        } else {
            printf("refit-soak: ok: %d updates, max vmrss growth %" PRId64 " kB\n", steps,
                   max_diff);
        }
        fflush(stdout);
    }
    free(all);
    free(roles);
    MPI_Bcast(&exit_code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return exit_code;
}
