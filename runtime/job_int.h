/*
 * refit: the job's private header (runtime/job*.c only): job_t, job_stats_t and the functions
 * the job's files call across. One job_t per rank, on rf_job_run's stack; every function here
 * borrows it. Collective calls say so; the rest are local.
 *
 * The job is a client of the session (runtime/session_int.h): the session sets up topology,
 * placement, inventory, storage, plans, manifest, chunk plan, trainer, accelerators, nccl and
 * ipc, and runs each update (rf_session_run); the job brings the producer, the fault hooks,
 * the oracle and the report.
 *
 *   job.c         rf_job_run, the update loop (run_update: production, the session's update
 *                 with the job's hooks, counters, oracle, table), teardown
 *   job_setup.c   job_setup: the session with refit's own storage and buffers, the job's
 *                 communicators, oracle buffers and reference
 *   job_faults.c  --inject-fault: the parser, the resolution at setup, the hooks
 *   job_oracle.c  the oracle: snapshot, diff rule, scalar verification, reassembly against
 *                 --reference and its accounting, cold check, storage digest
 *   job_report.c  lines through rf_job_opts_t.print (the update table, the digest line), the
 *                 profile files, --bench-json
 */
#ifndef REFIT_JOB_INT_H
#define REFIT_JOB_INT_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/checkpoint.h"
#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/format.h"
#include "refit/job.h"
#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/p2p.h"
#include "refit/plan.h"
#include "refit/reference.h"
#include "refit/sink.h"
#include "refit/storage.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/transport.h"
#include "session_int.h"

/* Per-rank figures of one update, gathered to rank 0 for the table. */
typedef struct job_stats {
    int role;
    int status;
    uint64_t applications, declined, loader_calls, bookkeeping_probes;
    uint64_t layers[RF_PLAN_MODES];
    uint64_t chunks_recv, bytes_recv, chunks_sent, bytes_sent;
    uint64_t bytes_produced, bytes_read, header_bytes_read, bytes_gathered;
    int max_inflight;
    double update_s, begin_s, receive_s, wire_s, unpack_s, loader_s, finalize_s, layerwise_s,
        deferred_s, gate_s, produce_s, send_s, verify_s;
    double plan_begin_s; /* rollout: rf_plan_begin alone, within begin_s */
    uint64_t verify_elems, verify_mismatch, diff_elems, diff_changed, cold_slots, dequant_checked, fnuz_tensors;
    uint64_t qdiff_elems, qdiff_changed;
    /* rollout: deferred-stage runs this update, layers with derived state, and DeepSeek's
     * absorbed MLA slots found equal to the oracle's recomputation (job_oracle.c) */
    uint64_t derived_runs, derived_layers, derived_checked;
    uint64_t requant_tensors; /* --reference: fp8-tensor tensors compared requantized to s_max */
    double verdict_s;       /* update begin to the verdict on this rank */
    int storage_unchanged;  /* rollout, fault updates: 1 yes, 0 no; -1 not measured */
    int paused;             /* rollout: still PAUSED after the gate */
    uint64_t rebuilds;      /* rollout: plan rebuilds before this update */
    uint64_t storage_digest; /* rollout, --storage-digest: XXH3 over its slots after the update */
    uint64_t stage_h2d, stage_h2d_bytes; /* rollout on a GPU: chunk payloads staged h2d */
    int verify_status;
    char verify_msg[RF_ERR_MSG_MAX];
    int verify_skipped; /* committed, not verified (--verify last) */
    uint64_t ipc_in_place, ipc_staged; /* rollout on ipc: bytes read in place / from staging */
    double ipc_h2d_s;       /* trainer on a device ipc arena: host mirror -> arena copy */
    double resident_s;      /* trainer on an ipc arena (device or host): writing its weights
                               before the update began (not part of the update's time) */
    uint64_t batch_launches, batch_rows; /* rollout, device sources: copy launches, row copies */
    rf_plan_dev_stats_t dev;             /* rollout: REFIT_DEVICE_TIMELINE=1 */
    uint64_t ipc_h2d_bytes;
} job_stats_t;

/* One chunk's payload as received, kept for the cold-load check. */
typedef struct cold_chunk {
    const rf_chunk_t *chunk;
    char *payload; /* owned */
} cold_chunk_t;

typedef struct job {
    const rf_job_opts_t *o;
    /* the session that sets up and runs every update (runtime/session_int.h): the job is its
     * client, with storage and shard buffers refit allocates, and the hooks below */
    rf_session_t *s;
    rf_session_times_t tm;  /* the current update's, from rf_session_run */
    cold_chunk_t *cold;
    size_t ncold, capcold;
    int rank, size, T, R;   /* the session's, copied */
    MPI_Comm engine_comm, stats_comm;
    rf_ref_t *ref;          /* rollout ranks; rank 0 too, for job_ref_account() */
    uint64_t ref_total;     /* rank 0: reference entries, when the last update was checked
                               against them (0 otherwise) */
    int ref_skipped;        /* ... of which skipped on purpose */
    char ref_note[320];     /* ... and why ("1 cut by model.overrides, first ...") */
    char **snap;            /* per storage slot: bytes before the update (diff rule) */
    uint8_t *verified;      /* per inventory tensor: verified this update */
    /* per update */
    job_stats_t js;
    const char *source;     /* "checkpoint" | "generator" */
    bool from_ckpt;         /* this update's source is the checkpoint */
    rf_status_t pre;        /* a production before the update began (ipc, resident nccl) */
    rf_err_t pre_err;
    bool paused;
    const char *integrity_off; /* NULL when on; else what turned it off, for the table */
    rf_job_fault_t fault;   /* resolved: rank set; kind NONE when off */
    uint32_t update;        /* current update (fault hooks) */
    uint32_t last_committed; /* the last update that COMMITTED (0: none yet) */
    double *hist_verdict_s;      /* rank 0, --bench-json: per update, slowest rank */
    int *hist_committed;
    /* --profile-dir (docs/design.md#profile): one line per update appended to the .jsonl with
     * one write(), so a long run costs the same per update and a killed one leaves whole lines */
    int prof_fd;                 /* profile-rank<R>.jsonl, O_APPEND; -1: no profile */
    char *prof_line;             /* the line, reused across updates (grown once if too small) */
    size_t prof_cap;
    uint64_t prof_lines, prof_committed, prof_oracle_failed;
    int prof_rc;                 /* the outcome job_profile_write was called with */
    double prof_tsum[16], prof_tmin[16], prof_tmax[16]; /* per prof_timers[] entry */
    uint64_t prof_csum[16];                             /* per prof_counters[] entry */
    int prof_inflight_max;
} job_t;

/* What rf_job_run keeps for --bench-json past teardown. */
typedef struct job_bench_info {
    char topology[128], model[64]; /* copies: teardown frees the topology and config */
    const char *quant, *transport; /* static names */
    uint64_t payload;
    int tensors;
    size_t chunks;
    uint64_t chunk_bytes;
    int device; /* rank 0's GPU, -1: host */
    bool ipc_dev;
} job_bench_info_t;

static inline bool job_is_rollout(const job_t *j) { return rf_session_is_rollout(j->s); }

/* ---- job_setup.c ---------------------------------------------------------------------- */

/* Everything before the first update (collective over MPI_COMM_WORLD; every rank returns the
 * lowest failing rank's error): the session (rf_session_open, rf_session_build with refit's
 * own storage and buffers, the fault resolved at its `configured` point), then the job's own
 * communicators, oracle buffers and reference. j holds o. */
rf_status_t job_setup(job_t *j, rf_err_t *err);
/* Tears down what job_setup made (the session last). */
void job_teardown_setup(job_t *j);

/* ---- job_faults.c --------------------------------------------------------------------- */

/* This rank injects fault kind k in update v. */
bool job_fault_here(const job_t *j, uint32_t v, rf_fault_kind_t k);
/* Setup: j->fault from the options, default rank and chunk filled in, or an error naming why
 * the rank cannot inject the kind. Same options and topology everywhere: same answer. */
rf_status_t job_fault_resolve(job_t *j, rf_err_t *err);
/* The exit fault (_exit, after its last lines on stderr) or the stall fault (sleeps past
 * deadline) when this rank injects one in update v; where names the spot. */
void job_fault_exit_stall(job_t *j, uint32_t v, double deadline, const char *where);
/* Before update v begins: move-storage-between. */
void job_fault_before_update(job_t *j, uint32_t v);
/* The delay-send fault, before a p2p sender's first send of update v. */
void job_fault_delay_send(job_t *j, uint32_t v, double deadline);
/* Rollout, after applying a chunk (j->update, j->deadline): exit, stall, move-storage. */
rf_status_t job_fault_after_chunk(job_t *j, const rf_chunk_t *chunk, rf_err_t *err);
/* Trainer, after producing update v: bad-weight-shape. */
rf_status_t job_fault_bad_weight_shape(job_t *j, uint32_t v, rf_err_t *err);

/* ---- job_oracle.c --------------------------------------------------------------------- */

/* Rollout: XXH3 over every slot's bytes (host copies of device slots); 0 when out of memory. */
uint64_t job_storage_hash(const job_t *j);
/* Rollout: every slot's bytes before the update, for the diff rule. */
void job_snapshot(job_t *j);
/* Rollout, committed update v: the oracle; fills j->js.verify_* (collective over the engine
 * when it reassembles against --reference). */
void job_verify_update(job_t *j, uint32_t v, bool from_ckpt, bool diff);
/* --cold-check: keeps a chunk's payload (copy: owned, passed on) / frees the kept ones. */
rf_status_t job_cold_keep(job_t *j, const rf_chunk_t *chunk, char *copy, rf_err_t *err);
void job_cold_free(job_t *j);
/* Rank 0 at setup, --reference with a checkpoint on a quantized topology: every tensor the
 * trainer quantizes from the checkpoint (rf_manifest_trainer_quantizes) has a reference entry
 * of its quantized dtype, as the first update's reassembly will require; else RF_ERR_MISMATCH
 * naming the reference file, the topology's quantization, how many and the first tensor (a
 * reference of an unquantized checkpoint), before anything moves. Local. */
rf_status_t job_ref_check_quantized(job_t *j, rf_err_t *err);
/* Rank 0, committed update v checked against --reference: every reference entry verified or
 * skipped on purpose (vsum: per inventory tensor, some rank verified it). Returns 1 with the
 * reason in fail when one was not checked, else 0; sets *verified_p and j->ref_*. */
int job_ref_account(job_t *j, uint32_t v, const uint8_t *vsum, uint64_t *verified_p, char *fail,
                    size_t cap);

/* ---- job_report.c --------------------------------------------------------------------- */

/* Hands text (whole lines) to o->print, one call a line; nothing when o->print is NULL. */
void job_print(const rf_job_opts_t *o, rf_job_stream_t stream, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "1.23 MB" into buf; returns buf. */
const char *job_human_bytes(double b, char *buf, size_t cap);
/* Rank 0: update v's table from every rank's figures (all: [size]). */
void job_print_table(job_t *j, uint32_t update, const job_stats_t *all,
                     const rf_gate_verdict_t *v, uint64_t verified);
/* Rank 0, --storage-digest, committed update v: the digest line. */
void job_print_digest(const job_t *j, uint32_t v, const job_stats_t *all);
/* --profile-dir: opened after setup, one line per update, the summary at teardown. */
void job_profile_open(job_t *j);
/* rc: the update's outcome as rank 0 decided and broadcast it (0: committed and verified, or
 * committed with its oracle skipped; non-zero: FAILED by the gate or, after a COMMITTED gate,
 * by the oracle), so that every rank's line says the same. */
void job_profile_write(job_t *j, uint32_t update, int rc);
void job_profile_close(job_t *j);
/* Rank 0, after teardown: --bench-json (vs, committed: [o->steps]). Returns 0 on success. */
int job_bench_write(const rf_job_opts_t *o, const job_bench_info_t *bi, const double *vs,
                    const int *committed);

#endif /* REFIT_JOB_INT_H */
