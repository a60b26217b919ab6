/*
 * refit-soak: runs many consecutive updates of the job and checks that no rank's resident
 * memory grows (DESIGN.md section 16: max over ranks of VmRSS(update N) - VmRSS(update 10)
 * <= 1 MiB), and prints whether the time per update stays flat.
 *
 *   mpirun -np 4 refit-soak [--steps N] [--topology FILE] [--checkpoint DIR] [--json FILE]
 *                           [--profile-dir DIR]
 *
 * Defaults: 1000 updates of jobs/topologies/llama-tiny-tp2-to-2xtp1.yaml with the tiny real
 * checkpoint tests/data/llama-tiny (4 ranks on CPU), run from the source root, with the
 * profile written to refit-profile/ as refit-run does (rf_job_run is refit-run's own update
 * loop; --profile-dir '' turns the profile off). rf_job_run calls back after every update; the
 * callback takes the time and reads VmRSS from /proc/self/status after update 10 (or the last,
 * if fewer) and after the last update. The time per update is the time between two callbacks
 * (the whole loop iteration, profile line included); the soak prints its median (over pairs
 * of updates, see rf_soak_median) over updates 10-109 and over the last 100, and their ratio
 * (flat: about 1; printed, never a pass/fail figure, STYLE.md). Rank 0 gathers the figures, prints one row per rank (nccl-tests style)
 * and writes them as JSON with --json. Exit status 0 only if every update committed and
 * verified, every rank's profile holds one line per update and its summary, and the largest
 * growth is at most 1 MiB.
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/control.h"
#include "refit/job.h"
#include "refit/log.h"
#include "refit/model.h"
#include "refit/status.h"
#include "refit/topology.h"

#define RF_SOAK_PROBE_UPDATE 10
#define RF_SOAK_MAX_GROWTH_KB 1024 /* 1 MiB */
#define RF_SOAK_WINDOW 100         /* updates per time window */

/* Per-rank probes, filled by the after-update callback. */
typedef struct rf_soak {
    int probe_update; /* first reading after this update */
    int steps;
    int64_t rss_probe_kb; /* VmRSS after probe_update, -1 until read */
    int64_t rss_last_kb;  /* VmRSS after the last update, -1 until read */
    int64_t failed;       /* updates this rank saw fail */
    double *t;            /* [steps + 1]: time after update v (allocated and touched before
                             the run, so it does not count as growth) */
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

/* rf_job_opts_t.print: the job's lines as refit-run writes them (its last "refit: ..." line
 * above the soak's table), flushed at once. */
static void rf_soak_print(void *ctx, rf_job_stream_t stream, const char *line)
{
    FILE *f = stream == RF_JOB_ERR ? stderr : stdout;
    (void)ctx;
    fputs(line, f);
    fputc('\n', f);
    fflush(f);
}

static void rf_soak_after_update(void *ctx, int update, bool ok)
{
    rf_soak_t *s = ctx;
    if (!ok)
        s->failed++;
    s->t[update] = rf_time_now();
    if (update == s->probe_update)
        s->rss_probe_kb = rf_soak_vmrss_kb();
    if (update == s->steps)
        s->rss_last_kb = rf_soak_vmrss_kb();
}

static void rf_soak_usage(FILE *f)
{
    fprintf(f, "usage: mpirun -np N refit-soak [--steps N] [--topology FILE] [--checkpoint DIR|none]\n"
               "                             [--json FILE] [--profile-dir DIR]\n"
               "  --steps N         updates (default 1000)\n"
               "  --topology FILE   default jobs/topologies/llama-tiny-tp2-to-2xtp1.yaml\n"
               "  --checkpoint DIR  default tests/data/llama-tiny; 'none': generator weights\n"
               "  --json FILE       per-rank figures as JSON (rank 0 writes it)\n"
               "  --profile-dir DIR the job's profile, as refit-run (default refit-profile;\n"
               "                    '': none)\n"
               "fails when an update fails, a profile lacks a line or its summary, or max over\n"
               "ranks of VmRSS(last) - VmRSS(update %d) exceeds 1 MiB; prints the time per\n"
               "update over updates %d-%d and the last %d (not checked)\n",
            RF_SOAK_PROBE_UPDATE, RF_SOAK_PROBE_UPDATE, RF_SOAK_PROBE_UPDATE + RF_SOAK_WINDOW - 1,
            RF_SOAK_WINDOW);
}

#define RF_SOAK_NI 5 /* per rank: vmrss probe, vmrss last, failed, profile lines, summary */
#define RF_SOAK_ND 2 /* per rank: median time per update, early and last window */

static int rf_soak_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/*
 * Time per update over updates first..last (first >= 2): the median over consecutive pairs
 * (first, first + 1), ... of half the pair's time, or -1. Pairs, because with a checkpoint the
 * job alternates checkpoint and generator updates, whose times differ by about 3x: a median of
 * single updates would pick either mode, or fall between them, depending on the window.
 */
static double rf_soak_median(const double *t, int first, int last)
{
    int n = (last - first + 1) / 2;
    double *d = n > 0 ? malloc((size_t)n * sizeof(double)) : NULL, m;
    if (d == NULL)
        return last == first ? t[last] - t[last - 1] : -1;
    for (int i = 0; i < n; i++)
        d[i] = 0.5 * (t[first + 2 * i + 1] - t[first + 2 * i - 1]);
    qsort(d, (size_t)n, sizeof(double), rf_soak_cmp);
    m = n % 2 ? d[n / 2] : 0.5 * (d[n / 2 - 1] + d[n / 2]);
    free(d);
    return m;
}

/*
 * This rank's profile as the job left it (docs/design.md#profile): *lines the complete lines
 * of profile-rank<R>.jsonl that are updates 1, 2, ... in order (-1: a line that does not parse
 * before the last one), *summary the summary's "updates" (-1: absent or not a summary).
 */
static void rf_soak_profile(const char *dir, int rank, int64_t *lines, int64_t *summary)
{
    char path[4096];
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int bad = 0;
    *lines = 0;
    *summary = -1;
    snprintf(path, sizeof(path), "%s/profile-rank%d.jsonl", dir, rank);
    FILE *f = fopen(path, "r");
    while (f != NULL && (len = getline(&line, &cap, f)) > 0 && line[len - 1] == '\n') {
        json_t *o = json_loadb(line, (size_t)len - 1, 0, NULL);
        if (bad) { /* a torn line followed by another: not a torn last line */
            *lines = -1;
            json_decref(o);
            break;
        }
        if (o != NULL && json_integer_value(json_object_get(o, "update")) == *lines + 1)
            (*lines)++;
        else
            bad = 1;
        json_decref(o);
    }
    free(line);
    if (f != NULL)
        fclose(f);
    snprintf(path, sizeof(path), "%s/profile-rank%d.json", dir, rank);
    json_t *sum = json_load_file(path, 0, NULL);
    json_t *u = json_object_get(sum, "updates");
    if (json_is_integer(u) && json_integer_value(json_object_get(sum, "version")) == 2)
        *summary = (int64_t)json_integer_value(u);
    json_decref(sum);
}

/* Rank 0: the table and the JSON file; returns the largest growth in KiB and the largest
 * late / early time ratio in *ratio (-1: not measured). */
static int64_t rf_soak_report(const int64_t *all, const double *times, const int *roles,
                              int size, int steps, int probe, const int win[4],
                              const char *json_path, const char *topology,
                              const char *checkpoint, const char *profile_dir, double *ratio)
{
    int64_t max_diff = INT64_MIN;
    double max_ratio = -1;
    json_t *root = json_object(), *ranks = json_array();
    printf("# refit-soak: %d updates, topology %s, %s, profile %s\n", steps, topology,
           checkpoint ? checkpoint : "generator weights", profile_dir ? profile_dir : "off");
    char probe_col[32], early_col[32], last_col[32];
    snprintf(probe_col, sizeof(probe_col), "vmrss@%d_kB", probe);
    snprintf(early_col, sizeof(early_col), "ms@%d-%d", win[0], win[1]);
    snprintf(last_col, sizeof(last_col), "ms@%d-%d", win[2], win[3]);
    printf("# %6s %8s %14s %14s %10s %8s %12s %12s %7s %9s\n", "rank", "role", probe_col,
           "vmrss@last_kB", "diff_kB", "failed", early_col, last_col, "ratio", "profile");
    for (int r = 0; r < size; r++) {
        const int64_t *v = &all[RF_SOAK_NI * r];
        const double *t = &times[RF_SOAK_ND * r];
        int64_t diff = (v[0] < 0 || v[1] < 0) ? INT64_MAX : v[1] - v[0];
        double q = t[0] > 0 && t[1] >= 0 ? t[1] / t[0] : -1;
        const char *role = roles[r] < 0 ? "?" : roles[r] == RF_ROLE_TRAINER ? "trainer" : "rollout";
        char prof[32];
        if (profile_dir == NULL)
            snprintf(prof, sizeof(prof), "off");
        else
            snprintf(prof, sizeof(prof), "%" PRId64 "/%" PRId64, v[3], v[4]);
        if (diff > max_diff)
            max_diff = diff;
        if (q > max_ratio)
            max_ratio = q;
        printf("  %6d %8s %14" PRId64 " %14" PRId64 " %10" PRId64 " %8" PRId64
               " %12.3f %12.3f %7.2f %9s\n",
               r, role, v[0], v[1], diff, v[2], t[0] * 1e3, t[1] * 1e3, q, prof);
        json_t *o = json_pack("{s:i, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:f}", "rank", r, "role",
                              role, "vmrss_probe_kb", (json_int_t)v[0], "vmrss_last_kb",
                              (json_int_t)v[1], "diff_kb", (json_int_t)diff, "failed_updates",
                              (json_int_t)v[2], "median_update_s_early", t[0],
                              "median_update_s_last", t[1], "time_ratio", q);
        if (profile_dir != NULL) {
            json_object_set_new(o, "profile_lines", json_integer((json_int_t)v[3]));
            json_object_set_new(o, "profile_summary_updates", json_integer((json_int_t)v[4]));
        }
        json_array_append_new(ranks, o);
    }
    printf("# max diff %" PRId64 " kB (limit %d kB)\n", max_diff, RF_SOAK_MAX_GROWTH_KB);
    printf("# time per update: median of updates %d-%d against the last %d-%d: max ratio %.2f "
           "over ranks (flat: about 1; printed, not checked)\n",
           win[0], win[1], win[2], win[3], max_ratio);
    json_object_set_new(root, "steps", json_integer(steps));
    json_object_set_new(root, "probe_update", json_integer(probe));
    json_object_set_new(root, "topology", json_string(topology));
    json_object_set_new(root, "checkpoint", checkpoint ? json_string(checkpoint) : json_null());
    json_object_set_new(root, "profile_dir", profile_dir ? json_string(profile_dir) : json_null());
    json_object_set_new(root, "max_diff_kb", json_integer(max_diff));
    json_object_set_new(root, "limit_kb", json_integer(RF_SOAK_MAX_GROWTH_KB));
    json_object_set_new(root, "time_windows", json_pack("[[i, i], [i, i]]", win[0], win[1],
                                                        win[2], win[3]));
    json_object_set_new(root, "max_time_ratio", json_real(max_ratio));
    json_object_set_new(root, "ranks", ranks);
    if (json_path != NULL && json_dump_file(root, json_path, JSON_INDENT(2)) != 0)
        fprintf(stderr, "refit-soak: cannot write %s\n", json_path);
    json_decref(root);
    *ratio = max_ratio;
    return max_diff;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"steps", required_argument, NULL, 's'},   {"topology", required_argument, NULL, 't'},
        {"checkpoint", required_argument, NULL, 'c'}, {"json", required_argument, NULL, 'j'},
        {"profile-dir", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *topology = "jobs/topologies/llama-tiny-tp2-to-2xtp1.yaml";
    const char *checkpoint = "tests/data/llama-tiny";
    const char *json_path = NULL;
    const char *profile_dir = "refit-profile"; /* refit-run's default */
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
        case 'd':
            profile_dir = optarg[0] ? optarg : NULL;
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
        if (topo != NULL && rf_model_load_topology(topology, MPI_COMM_WORLD, topo, &cfg, &err) == RF_OK) {
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
    soak.t = malloc((size_t)(steps + 1) * sizeof(double));
    if (soak.t == NULL) {
        fprintf(stderr, "refit-soak: rank %d: out of memory for %d update times\n", rank, steps);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(soak.t, 0, (size_t)(steps + 1) * sizeof(double));
    memset(&opts, 0, sizeof(opts));
    opts.topology = topology;
    opts.checkpoint = checkpoint;
    opts.format = "none";
    opts.profile_dir = profile_dir;
    opts.steps = steps;
    opts.policy = RF_POLICY_AUTO;
    opts.quiet = true;
    opts.after_update = rf_soak_after_update;
    opts.after_update_ctx = &soak;
    opts.print = rf_soak_print;
    rc = rf_job_run(&opts);
    if (rc == RF_JOB_PEER_LOST) /* a rank died: nothing collective can finish (see refit-run) */
        MPI_Abort(MPI_COMM_WORLD, 1);

    /* the windows: updates 10-109 against the last 100 (update 1's time includes setup) */
    int e0 = steps < RF_SOAK_PROBE_UPDATE ? 2 : RF_SOAK_PROBE_UPDATE;
    int e1 = steps < e0 + RF_SOAK_WINDOW - 1 ? steps : e0 + RF_SOAK_WINDOW - 1;
    int l0 = steps - RF_SOAK_WINDOW + 1 < 2 ? 2 : steps - RF_SOAK_WINDOW + 1;
    int win[4] = {e0, e1, l0, steps};
    double tmine[RF_SOAK_ND] = {rf_soak_median(soak.t, win[0], win[1]),
                                rf_soak_median(soak.t, win[2], win[3])};
    int64_t mine[RF_SOAK_NI] = {soak.rss_probe_kb, soak.rss_last_kb, soak.failed, -1, -1};
    if (profile_dir != NULL) /* after the last probe: reading it back is not the job's growth */
        rf_soak_profile(profile_dir, rank, &mine[3], &mine[4]);
    int64_t *all = rank == 0 ? calloc((size_t)size * RF_SOAK_NI, sizeof(int64_t)) : NULL;
    double *times = rank == 0 ? calloc((size_t)size * RF_SOAK_ND, sizeof(double)) : NULL;
    int *roles = rank == 0 ? calloc((size_t)size, sizeof(int)) : NULL;
    MPI_Gather(mine, RF_SOAK_NI, MPI_INT64_T, all, RF_SOAK_NI, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Gather(tmine, RF_SOAK_ND, MPI_DOUBLE, times, RF_SOAK_ND, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(&role, 1, MPI_INT, roles, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int exit_code = 0;
    if (rank == 0) {
        double ratio;
        int64_t max_diff = rf_soak_report(all, times, roles, size, steps, soak.probe_update, win,
                                          json_path, topology, checkpoint, profile_dir, &ratio);
        int bad_profile = -1;
        for (int r = 0; r < size && profile_dir != NULL && bad_profile < 0; r++)
            if (all[RF_SOAK_NI * r + 3] != steps || all[RF_SOAK_NI * r + 4] != steps)
                bad_profile = r;
        int64_t failed = 0;
        for (int r = 0; r < size; r++)
            failed += all[RF_SOAK_NI * r + 2];
        if (rc != 0 || failed != 0) {
            printf("refit-soak: FAILED: an update failed (see the refit line above)\n");
            exit_code = 1;
        } else if (bad_profile >= 0) {
            printf("refit-soak: FAILED: rank %d: %s/profile-rank%d.jsonl holds %" PRId64
                   " update lines and its summary %" PRId64 " updates (-1: none), expected %d\n",
                   bad_profile, profile_dir, bad_profile, all[RF_SOAK_NI * bad_profile + 3],
                   all[RF_SOAK_NI * bad_profile + 4], steps);
            exit_code = 1;
        } else if (max_diff > RF_SOAK_MAX_GROWTH_KB) {
            printf("refit-soak: FAILED: vmrss grew by %" PRId64 " kB (limit %d kB)\n", max_diff,
                   RF_SOAK_MAX_GROWTH_KB);
            exit_code = 1;
        } else {
            printf("refit-soak: ok: %d updates, max vmrss growth %" PRId64 " kB, time per update "
                   "last/early %.2f\n", steps, max_diff, ratio);
        }
        fflush(stdout);
    }
    free(all);
    free(times);
    free(roles);
    free(soak.t);
    MPI_Bcast(&exit_code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return exit_code;
}
