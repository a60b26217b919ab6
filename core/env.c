/* refit: environment switches read at setup and refused when their value is not known
 * (include/refit/env.h). */
#include "refit/env.h"

#include <errno.h>
#include <sched.h> /* sched_getaffinity, CPU_COUNT: _GNU_SOURCE from CMake */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

rf_status_t rf_env_flag(const char *name, bool dflt, bool *on_p, rf_err_t *err)
{
    if (name == NULL || on_p == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "rf_env_flag: NULL name or output");
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') {
        *on_p = dflt;
        return RF_OK;
    }
    if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return rf_err_set(err, RF_ERR_INVALID, "%s=%s: expected 0 (off) or 1 (on)", name, v);
    *on_p = v[0] == '1';
    return RF_OK;
}

rf_status_t rf_env_count(const char *name, const char *unit, size_t dflt, size_t *out_p,
                         rf_err_t *err)
{
    if (name == NULL || out_p == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "rf_env_count: NULL name or output");
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0') {
        *out_p = dflt;
        return RF_OK;
    }
    const char *u = unit != NULL ? unit : "a count";
    /* digits only: strtoull alone would take " 12", "+12", "-1" (as a huge value) and "0x10" */
    for (const char *c = v; *c != '\0'; c++)
        if (*c < '0' || *c > '9')
            return rf_err_set(err, RF_ERR_INVALID,
                              "%s=%s: expected a positive decimal integer (%s)", name, v, u);
    errno = 0;
    unsigned long long x = strtoull(v, NULL, 10);
    if (errno == ERANGE || x > SIZE_MAX)
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s=%s: expected a positive decimal integer (%s) of at most %zu", name,
                          v, u, (size_t)SIZE_MAX);
    if (x == 0)
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s=%s: expected a positive decimal integer (%s), not 0", name, v, u);
    *out_p = (size_t)x;
    return RF_OK;
}

void rf_env_node_share(int world_size, long *cores_p, long *local_p)
{
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (ls == NULL)
        ls = getenv("MPI_LOCALNRANKS");
    long local = ls != NULL ? strtol(ls, NULL, 10) : 0;
    if (local <= 0)
        local = world_size > 0 ? world_size : 1;
    cpu_set_t set;
    CPU_ZERO(&set);
    long cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    *cores_p = cores > 0 ? cores : 1;
    *local_p = local;
}

int rf_env_spare_threads(int world_size)
{
    long cores, local;
    rf_env_node_share(world_size, &cores, &local);
    long spare = cores / local - 2;
    return spare < 1 ? 1 : spare > 4 ? 4 : (int)spare;
}

/* every switch read through the parsers above (include/refit/env.h, rf_env_check) */
static const char *const env_flags[] = {"REFIT_CKPT_STREAM", "REFIT_HDF5_COLLECTIVE",
                                        "REFIT_MPI_SEND_SPIN", "REFIT_MPI_RECV_PAGEABLE",
                                        "REFIT_DEVICE_TIMELINE", "REFIT_MPI_SEAL_FUSED",
                                        "REFIT_CUDA_TRANSPOSE"};
static const struct {
    const char *name, *unit;
    size_t max; /* 0: SIZE_MAX */
} env_counts[] = {{"REFIT_CUDA_ENGINE_MIN", "bytes", 0},
                  {"REFIT_CKPT_READ_THREADS", "threads", RF_ENV_THREADS_MAX},
                  {"REFIT_MPI_SEAL_THREADS", "threads", RF_ENV_THREADS_MAX}};

rf_status_t rf_env_check(rf_err_t *err)
{
    for (size_t i = 0; i < sizeof(env_flags) / sizeof(env_flags[0]); i++) {
        bool on;
        RF_CHECK(rf_env_flag(env_flags[i], false, &on, err));
    }
    for (size_t i = 0; i < sizeof(env_counts) / sizeof(env_counts[0]); i++) {
        size_t n;
        rf_status_t st = rf_env_count(env_counts[i].name, env_counts[i].unit, 1, &n, err);
        if (st != RF_OK && env_counts[i].max != 0) /* a bounded count: say the range */
            return rf_err_reset(err, st, "%s=%s: expected a decimal count from 1 to %zu (%s)",
                                env_counts[i].name, getenv(env_counts[i].name),
                                env_counts[i].max, env_counts[i].unit);
        if (st != RF_OK)
            return st;
        if (env_counts[i].max != 0 && n > env_counts[i].max)
            return rf_err_set(err, RF_ERR_INVALID, "%s=%zu: at most %zu %s", env_counts[i].name,
                              n, env_counts[i].max, env_counts[i].unit);
    }
    return RF_OK;
}
