/*
 * refit: the end-to-end job that refit-run (and the soak program) drive (DESIGN.md section 2).
 */
#ifndef REFIT_JOB_H
#define REFIT_JOB_H

#include <stdbool.h>

#include "refit/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_job_opts {
    const char *topology;     /* NULL: the compiled-in default */
    const char *checkpoint;   /* NULL: generator weights on every update */
    const char *reference;    /* tensors.reference.json or NULL */
    const char *format;       /* format owner name ("none") */
    const char *profile_dir;  /* NULL or "": no profile files */
    int steps;                /* updates */
    rf_reload_policy_t policy;
    bool quiet;
    bool help;
    /* NULL, or called on every rank after each update (1-based), with whether this rank saw
     * it commit and verify; for the soak program's per-update probes. ctx is borrowed. */
    void (*after_update)(void *ctx, int update, bool ok);
    void *after_update_ctx;
} rf_job_opts_t;

/*
 * Runs the whole job on MPI_COMM_WORLD. Collective: every rank calls it with the same options.
 * Returns the process exit code: 0 only if every update COMMITTED and verified (rank 0 prints
 * the per-update table and the final "refit: ..." line).
 */
int rf_job_run(const rf_job_opts_t *opts);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_JOB_H */
