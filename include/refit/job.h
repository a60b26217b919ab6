/*
 * refit: the end-to-end job that refit-run (and the soak program) drive (DESIGN.md section 2).
 */
#ifndef REFIT_JOB_H
#define REFIT_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Faults refit-run can inject (--inject-fault KIND[:RANK][@UPDATE]; docs/faults.md). */
typedef enum {
    RF_FAULT_NONE = 0,
    RF_FAULT_EXIT,           /* the rank calls _exit(1) mid-transfer: the job dies non-zero */
    RF_FAULT_STALL,          /* the rank sleeps past the update deadline mid-transfer */
    RF_FAULT_CORRUPT_CHUNK,  /* sender flips a payload byte after the checksum */
    RF_FAULT_DROP_CHUNK,     /* sender skips a chunk */
    RF_FAULT_DUPLICATE_CHUNK,/* sender sends a chunk twice */
    RF_FAULT_WRONG_DTYPE,    /* trainer source: one tensor with another dtype */
    RF_FAULT_WRONG_SHAPE,    /* trainer source: one tensor with another shape */
    RF_FAULT_MISSING_TENSOR, /* trainer source: one tensor missing */
    RF_FAULT_EXTRA_TENSOR,   /* trainer source: one tensor the manifest lacks */
    RF_FAULT_MOVE_STORAGE,   /* rollout moves a slot mid-transfer: RF_ERR_MOVED */
    RF_FAULT_MOVE_STORAGE_BETWEEN, /* rollout moves a slot before update begin: replan */
    RF_FAULT_GATHER_DROP,    /* stage-gather contributor skips its part of a chunk */
    RF_FAULT_BAD_WEIGHT_SHAPE, /* trainer: its first wna16 weight_shape carries N + 1 */
    RF_FAULT_DELAY_SEND,     /* p2p trainer: starts sending 1 s late (well inside the
                                deadline): its receivers take the other senders' chunks first
                                and the update still commits */
} rf_fault_kind_t;

typedef struct rf_job_fault {
    rf_fault_kind_t kind;
    int rank;    /* world rank, -1: the kind's default */
    int update;  /* 1-based update it fires on (default 2) */
    int64_t seq; /* chunk seq for chunk faults (default 0) */
} rf_job_fault_t;

/*
 * Parses "KIND[:RANK][@UPDATE]" (KIND one of rf_fault_kind_names()). Local. Returns 0 and
 * *f, or -1 with a lower-case message in msg.
 */
int rf_job_fault_parse(const char *spec, rf_job_fault_t *f, char *msg, size_t cap);
/* "exit, stall, ..." */
const char *rf_fault_kind_names(void);
const char *rf_fault_kind_name(rf_fault_kind_t k);

/* Which of the caller's streams a line the job prints belongs on (rf_job_opts_t.print). */
typedef enum {
    RF_JOB_OUT = 0, /* the report: the per-update table and the "refit: ..." lines (stdout) */
    RF_JOB_ERR = 1, /* a message for the person running the job (stderr) */
} rf_job_stream_t;

typedef struct rf_job_opts {
    const char *topology;     /* NULL: the compiled-in default */
    const char *checkpoint;   /* NULL: generator weights on every update */
    const char *reference;    /* tensors.reference.json or NULL */
    const char *format;       /* format owner name ("none") */
    const char *profile_dir;  /* NULL or "": no profile files */
    int steps;                /* updates */
    rf_reload_policy_t policy;
    bool quiet;
    bool cold_check;          /* after each committed update, replay its chunks into freshly
                                 allocated storage and require byte-identical slots (cold load
                                 of B == load A then refit B) */
    bool storage_digest;      /* rank 0 prints "storage digest <hex>" per committed update: XXH3
                                 over every rollout rank's slots (host copies of GPU slots) */
    bool help;
    int integrity;            /* per-chunk checksums: 0 = the topology's transfer.integrity
                                 (default true), 1 = on (--integrity), -1 = off
                                 (--no-integrity) */
    rf_job_fault_t fault;     /* kind RF_FAULT_NONE normally */
    bool verify_last;         /* only the last update goes through the oracle (benchmarks of
                                 large models: the host oracle is slower than the updates) */
    bool checkpoint_all;      /* every update carries the checkpoint (--checkpoint-updates
                                 all), not only the odd ones; the diff rule is skipped after
                                 an update of the same checkpoint */
    bool verify_none;         /* no oracle at all (benchmarks whose bytes the GPU tests check
                                 against the host reference); the last line says so */
    const char *bench_json;   /* NULL, or rank 0 writes the update times (update begin to
                                 verdict, slowest rank), the payload and the device copy
                                 ceiling measured after the updates there (docs/benchmarks.md) */
    /* NULL, or called on every rank after each update (1-based), with whether this rank saw
     * it commit and verify; for the soak program's per-update probes. ctx is borrowed. */
    void (*after_update)(void *ctx, int update, bool ok);
    void *after_update_ctx;
    /* NULL: the job prints nothing. Else called with every line the job prints, one call a
     * line, without its newline, on the rank that prints it: rank 0's startup line, per-update
     * table, storage digest, bench and final "refit: ..." lines (and on RF_JOB_ERR why setup or
     * --bench-json failed); a rollout rank's "plan rebuilt" line. The library never writes to
     * stdout itself; refit-run and refit-soak write each line with a newline and flush it.
     * Diagnostics go to the log (log.h), and the exit fault's dying rank writes its last lines
     * to stderr itself (it _exits at once). ctx is borrowed; called from the calling thread. */
    void (*print)(void *ctx, rf_job_stream_t stream, const char *line);
    void *print_ctx;
} rf_job_opts_t;

/*
 * rf_job_run's return when this rank stopped waiting for a peer that never arrived at the start
 * of an update (it died and the MPI runtime has not ended the job yet): the job cannot end
 * collectively, so rf_job_run returns at once, without teardown, and the caller ends the whole
 * job (refit-run and refit-soak: MPI_Abort).
 */
#define RF_JOB_PEER_LOST 3

/*
 * Runs the whole job on MPI_COMM_WORLD. Collective: every rank calls it with the same options.
 * Returns the process exit code: 0 only if every update COMMITTED and verified, 1 otherwise
 * (rank 0 prints the per-update table and the final "refit: ..." line through opts->print), or
 * RF_JOB_PEER_LOST.
 */
int rf_job_run(const rf_job_opts_t *opts);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_JOB_H */
