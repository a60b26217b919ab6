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
