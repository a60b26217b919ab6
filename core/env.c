/* refit: environment switches read at setup and refused when their value is not known
 * (include/refit/env.h). */
#include "refit/env.h"

#include <errno.h>
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

/* every switch read through the parsers above (include/refit/env.h, rf_env_check) */
static const char *const env_flags[] = {"REFIT_CKPT_STREAM", "REFIT_HDF5_COLLECTIVE",
                                        "REFIT_MPI_SEND_SPIN", "REFIT_MPI_RECV_PAGEABLE",
                                        "REFIT_DEVICE_TIMELINE"};
static const struct {
    const char *name, *unit;
} env_counts[] = {{"REFIT_CUDA_ENGINE_MIN", "bytes"}};

rf_status_t rf_env_check(rf_err_t *err)
{
    for (size_t i = 0; i < sizeof(env_flags) / sizeof(env_flags[0]); i++) {
        bool on;
        RF_CHECK(rf_env_flag(env_flags[i], false, &on, err));
    }
    for (size_t i = 0; i < sizeof(env_counts) / sizeof(env_counts[0]); i++) {
        size_t n;
        RF_CHECK(rf_env_count(env_counts[i].name, env_counts[i].unit, 1, &n, err));
    }
    return RF_OK;
}
