/*
 * refit: the end-to-end job (DESIGN.md section 2), as driven by refit-run.
 *
 * Setup (collective, plain MPI): topology + config broadcast and hash agreement, placement,
 * inventory, runtime storage and plans on rollout ranks, manifest built by trainer rank 0 and
 * agreed, chunk plan, trainer shards. Then per update: begin agreement (source check, GO or
 * FAILED), shard production, transfer (stage senders pack and gather, rollout ranks apply
 * every piece through their plans), finalize, completion gate, drain on FAILED. After the gate
 * the update is checked by an oracle that shares no code with the fast path: the scalar
 * reference loader, or reassembly + sha256 against --reference; and the "99% of elements
 * changed" rule of DESIGN.md section 2.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/format.h"
#include "refit/formats.h"
#include "refit/generator.h"
#include "refit/hashes.h"
#include "refit/job.h"
#include "refit/log.h"
#include "refit/manifest.h"
#include "refit/p2p.h"
#include "refit/quant.h"
#include "refit/reference.h"
#include "refit/safetensors.h"
#include "refit/storage.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/transport.h"
#include "refit/transport_nccl.h"
#include "refit/verify.h"

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
    uint64_t verify_elems, verify_mismatch, diff_elems, diff_changed, cold_slots, dequant_checked, fnuz_tensors;
    uint64_t qdiff_elems, qdiff_changed;
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
    cold_chunk_t *cold;
    size_t ncold, capcold;
    int rank, size, T, R;
    rf_topology_t topo;
    rf_model_config_t cfg;
    rf_rank_info_t me;
    rf_placement_t place;
    rf_inventory_t inv;
    MPI_Comm role_comm, engine_comm, stats_comm;
    rf_ctl_t *ctl;
    rf_xfer_t *xfer;
    rf_manifest_t man;
    rf_chunk_item_t *items;
    rf_chunk_plan_t *cplan;
    int *senders, *receivers;
    rf_gate_expect_t expect;
    /* trainer */
    rf_trainer_t tr;
    bool tr_ready;
    /* both: checkpoint (trainers read shards, rollout ranks read what they verify) */
    rf_ckpt_t *ck;
    /* rollout */
    rf_storage_t st;
    rf_accel_t *accel; /* rollout with rollout.gpus: the "cuda" accelerator on its device */
    rf_format_t fmt;
    rf_plan_t plan;
    bool plan_ready;
    uint64_t plan_layers[RF_PLAN_MODES];
    rf_ref_t *ref;          /* rollout ranks; rank 0 too, for ref_account() */
    uint64_t ref_total;     /* rank 0: reference entries, when the last update was checked
                               against them (0 otherwise) */
    int ref_skipped;        /* ... of which skipped on purpose */
    char ref_note[320];     /* ... and why ("1 cut by model.overrides, first ...") */
    char **snap;            /* per storage slot: bytes before the update (diff rule) */
    uint8_t *verified;      /* per inventory tensor: verified this update */
    /* per update */
    job_stats_t js;
    const char *source;     /* "checkpoint" | "generator" */
    bool paused;
    bool integrity;         /* per-chunk checksum trailer (option or topology) */
    const char *integrity_off; /* NULL when on; else what turned it off, for the table */
    bool integrity_host_pack;  /* nccl: some trainer packs on the host because of integrity */
    rf_job_fault_t fault;   /* resolved: rank set; kind NONE when off */
    uint32_t update;        /* current update (fault hooks) */
    double deadline;        /* its absolute deadline */
    uint32_t last_committed; /* the last update that COMMITTED (0: none yet) */
    /* ipc transport (colocated) */
    bool ipc;
    int *pair_of;              /* [size] every rank's IPC pair (-1 none) */
    uint8_t *ipc_staged;       /* [n_chunks] the stage sender stages (part of) the chunk */
    uint8_t *ipc_piece_staged; /* [n_pieces] some rollout rank reads the piece staged */
    rf_ipc_piece_t *ipc_pieces; /* rollout: [n_pieces] where this rank reads each piece */
    int *item_tensor;           /* [man.n]: the inventory tensor of each manifest entry (the
                                   per-piece hot path reads this, not the large entries) */
    rf_xfer_ipc_config_t ipc_cfg;
    bool ipc_dev;          /* the arena backend is device memory (cuda, or host-device in tests) */
    void *ipc_wdev;        /* trainer, ipc_dev: its weights arena (device) */
    void *ipc_mirror;      /* trainer, ipc_dev: pinned host mirror the trainer produces into */
    uint64_t ipc_wbytes;   /* trainer, ipc_dev: bytes of both */
    rf_accel_event_t *ipc_ev[2]; /* rollout, ipc_dev: recorded after a chunk's copies */
    double *hist_verdict_s;      /* rank 0, --bench-json: per update, slowest rank */
    int *hist_committed;
    uint32_t ipc_ev_seq[2];      /* the chunk seq each event belongs to */
    int ipc_ev_next;
    /* p2p mode: every trainer rank sends each rollout rank the rectangles it needs */
    bool p2p;
    rf_p2p_schedule_t p2p_s;
    /* nccl transport: device chunk buffers on every rank's GPU (transport/transport_nccl.c) */
    bool nccl;
    rf_nccl_layout_t nccl_layout;
    /* nccl trainer with its weights resident on its GPU (nccl_resident_eligible): produced on
     * the device before the update begins, packed device to device into the chunk buffer */
    bool nccl_resident;
    void *nccl_wdev;             /* its weights arena (device), rf_trainer_arena_layout bytes */
    rf_accel_rows_t *pack_rows;  /* device pack descriptors, grown as needed */
    size_t pack_cap;
    bool fence;                  /* some trainer produces before the update: update_fence */
    const char *wire;            /* the stage gather's wire when not MPI point-to-point: "nccl
                                    gather communicators" or the tests' "test wire" */
    /* --profile-dir (docs/design.md#profile): one line per update appended to the .jsonl with
     * one write(), so a long run costs the same per update and a killed one leaves whole lines */
    int prof_fd;                 /* profile-rank<R>.jsonl, O_APPEND; -1: no profile */
    char *prof_line;             /* the line, reused across updates (grown once if too small) */
    size_t prof_cap;
    uint64_t prof_lines, prof_committed;
    double prof_tsum[16], prof_tmin[16], prof_tmax[16]; /* per prof_timers[] entry */
    uint64_t prof_csum[16];                             /* per prof_counters[] entry */
    int prof_inflight_max;
} job_t;

/* ---- fault injection (refit-run --inject-fault; docs/faults.md) ---------------------- */

static const char *const fault_names[] = {
    [RF_FAULT_NONE] = "none",
    [RF_FAULT_EXIT] = "exit",
    [RF_FAULT_STALL] = "stall",
    [RF_FAULT_CORRUPT_CHUNK] = "corrupt-chunk",
    [RF_FAULT_DROP_CHUNK] = "drop-chunk",
    [RF_FAULT_DUPLICATE_CHUNK] = "duplicate-chunk",
    [RF_FAULT_WRONG_DTYPE] = "wrong-dtype",
    [RF_FAULT_WRONG_SHAPE] = "wrong-shape",
    [RF_FAULT_MISSING_TENSOR] = "missing-tensor",
    [RF_FAULT_EXTRA_TENSOR] = "extra-tensor",
    [RF_FAULT_MOVE_STORAGE] = "move-storage",
    [RF_FAULT_MOVE_STORAGE_BETWEEN] = "move-storage-between",
    [RF_FAULT_GATHER_DROP] = "gather-drop",
    [RF_FAULT_BAD_WEIGHT_SHAPE] = "bad-weight-shape",
};
#define FAULT_KINDS ((int)(sizeof(fault_names) / sizeof(fault_names[0])))

const char *rf_fault_kind_name(rf_fault_kind_t k)
{
    return (int)k >= 0 && (int)k < FAULT_KINDS ? fault_names[k] : "?";
}

const char *rf_fault_kind_names(void)
{
    return "exit, stall, corrupt-chunk, drop-chunk, duplicate-chunk, wrong-dtype, wrong-shape, "
           "missing-tensor, extra-tensor, move-storage, move-storage-between, gather-drop, "
           "bad-weight-shape";
}

int rf_job_fault_parse(const char *spec, rf_job_fault_t *f, char *msg, size_t cap)
{
    char kind[64];
    const char *at = strchr(spec, '@'), *colon = strchr(spec, ':');
    size_t klen = strcspn(spec, ":@");
    memset(f, 0, sizeof(*f));
    f->rank = -1;
    f->update = 2;
    f->seq = 0;
    if (klen == 0 || klen >= sizeof(kind)) {
        snprintf(msg, cap, "--inject-fault: '%s' is not KIND[:RANK][@UPDATE]", spec);
        return -1;
    }
    memcpy(kind, spec, klen);
    kind[klen] = '\0';
    for (int k = 1; k < FAULT_KINDS; k++)
        if (strcmp(kind, fault_names[k]) == 0)
            f->kind = (rf_fault_kind_t)k;
    if (f->kind == RF_FAULT_NONE) {
        snprintf(msg, cap, "--inject-fault: unknown kind '%s' (known: %s)", kind,
                 rf_fault_kind_names());
        return -1;
    }
    if (colon != NULL && (at == NULL || colon < at)) {
        char *end;
        long r = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || r < 0 || r > 1000000 || (*end != '\0' && *end != '@')) {
            snprintf(msg, cap, "--inject-fault: '%s': rank is not a non-negative integer", spec);
            return -1;
        }
        f->rank = (int)r;
    }
    if (at != NULL) {
        char *end;
        long u = strtol(at + 1, &end, 10);
        if (end == at + 1 || *end != '\0' || u < 1 || u > 1000000) {
            snprintf(msg, cap, "--inject-fault: '%s': update is not a positive integer", spec);
            return -1;
        }
        f->update = (int)u;
    }
    return 0;
}

/* This rank injects the configured fault in update v. */
static bool fault_here(const job_t *j, uint32_t v, rf_fault_kind_t k)
{
    return j->fault.kind == k && (uint32_t)j->fault.update == v && j->fault.rank == j->rank;
}

/* Default ranks, and refusal of a rank that cannot inject the kind. Every rank agrees. */
static const char *human_bytes(double b, char *buf, size_t cap);

static rf_status_t fault_resolve(job_t *j, rf_err_t *err)
{
    rf_job_fault_t *f = &j->fault;
    rf_rank_info_t info;
    int stage_sender = j->senders[0];
    *f = j->o->fault;
    if (f->kind == RF_FAULT_NONE)
        return RF_OK;
    if (f->rank < 0) {
        switch (f->kind) {
        case RF_FAULT_CORRUPT_CHUNK:
        case RF_FAULT_DROP_CHUNK:
        case RF_FAULT_DUPLICATE_CHUNK:
            f->rank = stage_sender; /* the sender of stage 0 */
            break;
        case RF_FAULT_GATHER_DROP:
        case RF_FAULT_WRONG_DTYPE:
        case RF_FAULT_WRONG_SHAPE:
        case RF_FAULT_MISSING_TENSOR:
        case RF_FAULT_EXTRA_TENSOR:
        case RF_FAULT_BAD_WEIGHT_SHAPE:
            f->rank = j->T - 1; /* the last trainer rank: not the one that decides GO */
            break;
        default:
            f->rank = j->size - 1; /* the last rollout rank */
            break;
        }
    }
    if (f->rank >= j->size)
        return rf_err_set(err, RF_ERR_INVALID, "--inject-fault %s: rank %d is not in a world of %d",
                          rf_fault_kind_name(f->kind), f->rank, j->size);
    if (f->update > j->o->steps)
        return rf_err_set(err, RF_ERR_INVALID,
                          "--inject-fault %s@%d: the job runs %d update(s) (--steps), so the "
                          "fault would never fire",
                          rf_fault_kind_name(f->kind), f->update, j->o->steps);
    RF_CHECK(rf_topology_rank_info(&j->topo, f->rank, &info));
    bool sender = false;
    for (int p = 0; p < j->topo.t_pp; p++)
        sender |= j->senders[p] == f->rank;
    const char *need = NULL;
    switch (f->kind) {
    case RF_FAULT_CORRUPT_CHUNK:
    case RF_FAULT_DROP_CHUNK:
    case RF_FAULT_DUPLICATE_CHUNK:
        if (!sender)
            need = "a stage sender";
        break;
    case RF_FAULT_GATHER_DROP:
        if (j->p2p)
            need = "a gather contributor, and p2p has no gather (use drop-chunk)";
        else if (info.role != RF_ROLE_TRAINER || sender || info.c != 0 || info.d != 0)
            need = "a trainer rank that contributes to its stage's gather";
        break;
    case RF_FAULT_WRONG_DTYPE:
    case RF_FAULT_WRONG_SHAPE:
    case RF_FAULT_MISSING_TENSOR:
    case RF_FAULT_EXTRA_TENSOR:
        if (info.role != RF_ROLE_TRAINER)
            need = "a trainer rank";
        break;
    case RF_FAULT_MOVE_STORAGE:
    case RF_FAULT_MOVE_STORAGE_BETWEEN:
        if (info.role != RF_ROLE_ROLLOUT)
            need = "a rollout rank";
        break;
    case RF_FAULT_BAD_WEIGHT_SHAPE:
        if (j->inv.quant != RF_QUANT_WNA16)
            return rf_err_set(err, RF_ERR_INVALID,
                              "--inject-fault bad-weight-shape: the model's quantization is %s; "
                              "only wna16 models have weight_shape tensors",
                              rf_quant_name(j->inv.quant));
        if (info.role != RF_ROLE_TRAINER)
            need = "a trainer rank";
        break;
    default:
        break;
    }
    if (need != NULL)
        return rf_err_set(err, RF_ERR_INVALID, "--inject-fault %s: rank %d is not %s",
                          rf_fault_kind_name(f->kind), f->rank, need);
    if (f->kind == RF_FAULT_CORRUPT_CHUNK && !j->integrity)
        rf_warn("--inject-fault corrupt-chunk with integrity off (%s): only the oracle can notice",
                j->integrity_off);
    /* chunk faults, and exit / stall on a stage sender, hit the first chunk of the rank's
     * stage (a rollout rank's hooks fire after chunk 0) */
    int p = info.role == RF_ROLE_TRAINER ? info.p : 0;
    f->seq = p < j->cplan->n_stages ? j->cplan->stages[p].chunk_begin : 0;
    if (j->nccl && f->kind == RF_FAULT_DUPLICATE_CHUNK && p < j->cplan->n_stages &&
        j->cplan->stages[p].chunk_count < 2) {
        /* nccl: a collective cannot carry an extra message; the duplicate is the next
         * message repeating this chunk's header, so the stage needs a next chunk */
        char cb[32];
        return rf_err_set(err, RF_ERR_INVALID,
                          "--inject-fault duplicate-chunk: on the nccl transport the duplicate is "
                          "the next message repeating the header, and stage %d has %u chunk(s) "
                          "at transfer.chunk_bytes %s: use a smaller chunk_bytes",
                          p, j->cplan->stages[p].chunk_count,
                          human_bytes((double)j->cplan->chunk_bytes, cb, sizeof(cb)));
    }
    if (j->ipc && f->kind == RF_FAULT_CORRUPT_CHUNK && p < j->cplan->n_stages) {
        /* ipc: only staged bytes can be corrupted in flight: the stage's first staged chunk */
        const rf_chunk_stage_range_t *sr = &j->cplan->stages[p];
        for (uint32_t k = sr->chunk_count; k-- > 0;)
            if (j->ipc_staged[sr->chunk_begin + k])
                f->seq = sr->chunk_begin + k;
    }
    if (j->rank == 0)
        rf_warn("fault: %s on rank %d at update %d", rf_fault_kind_name(f->kind), f->rank,
                f->update);
    return RF_OK;
}

/* The injected process death. The one place refit calls _exit: on purpose, for tests
 * (--inject-fault exit); Open MPI 4.1 then ends the whole job. mpirun kills the other ranks
 * within a few milliseconds, before rank 0 could learn of the death (no deadline has expired,
 * no MPI call has failed yet), so the dying rank prints the job's last line itself, on stderr
 * like the rest of its output. */
static void fault_exit_now(job_t *j, const char *where)
{
    fprintf(stderr,
            "refit: fault: rank %d exits during update %u (%s)\n"
            "refit: FAILED: update %u: rank %d: process exited (--inject-fault exit, %s); Open "
            "MPI ends the job\n",
            j->rank, j->update, where, j->update, j->rank, where);
    fflush(stderr);
    _exit(1);
}

/* The injected stall: sleeps until deadline + 0.5 s, answering nothing. */
static void fault_stall_now(job_t *j, double deadline, const char *where)
{
    double until = deadline + 0.5;
    rf_warn("fault: rank %d stalls %.1f s during update %u (%s)", j->rank,
            until - rf_time_now(), j->update, where);
    while (rf_time_now() < until) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
}

/* XXH3 over every slot's bytes (rollout): proves a failed update wrote nothing. */
static uint64_t storage_hash(const job_t *j)
{
    XXH3_state_t *h = XXH3_createState();
    bool dev = rf_storage_on_device(&j->st);
    char *buf = NULL;
    size_t cap = 0;
    uint64_t v = 0;
    if (h == NULL)
        return 0;
    XXH3_64bits_reset(h);
    for (int s = 0; s < j->st.nslots; s++) {
        const rf_slot_t *sl = &j->st.slots[s];
        size_t b = (size_t)rf_signature_bytes(&sl->sig);
        const void *bytes = sl->sig.data;
        if (dev) { /* device slots: hash a host copy (d2h) */
            if (b > cap) {
                char *g = realloc(buf, b);
                if (g == NULL)
                    break;
                buf = g;
                cap = b;
            }
            if (rf_storage_read(&j->st, buf, sl->sig.data, b, NULL) != RF_OK)
                break;
            bytes = buf;
        }
        XXH3_64bits_update(h, bytes, b);
    }
    v = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    free(buf);
    return v;
}

static bool is_rollout(const job_t *j) { return j->me.role == RF_ROLE_ROLLOUT; }

/* ---- setup ---------------------------------------------------------------------------- */

/* Every rank learns the lowest failing rank's message (plain collective; setup only). */
static rf_status_t agree_status(job_t *j, MPI_Comm comm, rf_status_t st, rf_err_t *err)
{
    int size, rank, mine, first;
    struct {
        int status;
        char msg[RF_ERR_MSG_MAX];
    } rep;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    mine = st == RF_OK ? size : rank;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == size)
        return RF_OK;
    rep.status = (int)(err->status != RF_OK ? err->status : st);
    snprintf(rep.msg, sizeof(rep.msg), "%s", err->msg);
    MPI_Bcast(&rep, (int)sizeof(rep), MPI_BYTE, first, comm);
    (void)j;
    if (rank != first) {
        rf_err_clear(err);
        int wr;
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        rf_err_set(err, (rf_status_t)rep.status, "%s", rep.msg);
    }
    return (rf_status_t)rep.status;
}

/* p2p: what each trainer rank sends this rank of a tensor (the schedule's rectangles). */
static int p2p_senders(void *ctx, int tensor, int *snd, int64_t (*rect)[4], int max)
{
    job_t *j = ctx;
    rf_owner_t own[RF_MAX_OWNERS];
    int n = rf_p2p_rects(&j->topo, &j->inv, j->rank, tensor, own);
    n = n < max ? n : max;
    for (int i = 0; i < n; i++) {
        snd[i] = own[i].rank;
        rect[i][0] = own[i].reg.r0;
        rect[i][1] = own[i].reg.r1;
        rect[i][2] = own[i].reg.c0;
        rect[i][3] = own[i].reg.c1;
    }
    return n;
}

/* The reload plan: sender -1 (broadcast) or sender-keyed rectangles (p2p). */
static rf_status_t job_plan_build(job_t *j, rf_plan_t *p, rf_storage_t *st, rf_format_t *fmt,
                                  rf_err_t *err)
{
    if (j->p2p)
        return rf_plan_build_p2p(p, &j->inv, &j->me.rc, st, fmt, j->o->policy, p2p_senders, j,
                                 err);
    return rf_plan_build(p, &j->inv, &j->me.rc, st, fmt, j->o->policy, err);
}

static rf_status_t setup_rollout(job_t *j, rf_err_t *err)
{
    RF_CHECK(rf_inventory_check_rollout(&j->inv, &j->me.rc, err));
    /* the format owner: --format-owner, else the one for (quantization, backend) */
    j->fmt.ops = j->o->format ? rf_format_lookup(j->o->format)
                              : rf_format_for(j->topo.quantization, (int)j->topo.r_backend);
    if (j->fmt.ops == NULL)
        return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: no format owner for quantization %s on "
                          "backend %s",
                          j->topo.file, rf_quant_name(j->topo.quantization),
                          rf_backend_name(j->topo.r_backend));
    j->fmt.quant = j->topo.quantization;
    j->fmt.backend = (int)j->topo.r_backend;
    j->fmt.accel = j->accel; /* NULL: runtime storage on the host */
    RF_CHECK(rf_storage_init(&j->st, j->inv.nmodules, err));
    RF_CHECK(rf_plan_alloc_storage(&j->inv, &j->me.rc, &j->fmt, &j->st, false, err));
    RF_CHECK(job_plan_build(j, &j->plan, &j->st, &j->fmt, err));
    j->plan_ready = true;
    memcpy(j->plan_layers, j->plan.stats.layers, sizeof(j->plan_layers));
    rf_info("plan: %" PRIu64 " direct, %" PRIu64 " runtime-view, %" PRIu64 " layerwise layers",
            j->plan_layers[0], j->plan_layers[1], j->plan_layers[2]);
    j->snap = calloc((size_t)j->st.nslots + 1, sizeof(char *));
    j->verified = calloc((size_t)j->inv.ntensors + 1, 1);
    if (j->snap == NULL || j->verified == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    if (j->o->reference)
        RF_CHECK(rf_ref_load(j->o->reference, &j->ref, err));
    return RF_OK;
}

/* ---- ipc transport (colocated; DESIGN.md section 9) ------------------------------------ */

static rf_status_t job_apply(void *ctx, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                             size_t nsegs, rf_err_t *err);
static rf_status_t job_complete(void *ctx, const rf_chunk_t *chunk, rf_err_t *err);

/*
 * Rows [lo, hi) of checkpoint tensor t that the loaders of a rollout rank with coordinates rc
 * read (rf_load_piece's arithmetic, runtime/loader.c); every row where this is not worked
 * out (row-parallel columns, experts): all rows, which only makes fewer pieces in place.
 */
static void ipc_rows_read(const job_t *j, const rf_rollout_coords_t *rc, const rf_tensor_t *t,
                          uint64_t *lo_p, uint64_t *hi_p)
{
    const rf_model_config_t *c = &j->inv.cfg;
    const rf_module_t *m = &j->inv.modules[t->module];
    int64_t T = rc->tp, r = rc->tp_rank, u = rf_tensor_row_unit(t);
    int64_t rows = (int64_t)rf_tensor_rows(t), lo = 0, n = rows;
    switch (m->kind) {
    case RF_MOD_VOCAB: {
        int64_t per = rf_vocab_padded(c->vocab_size) / T;
        lo = r * per < c->vocab_size ? r * per : c->vocab_size;
        int64_t hi = (r + 1) * per < c->vocab_size ? (r + 1) * per : c->vocab_size;
        n = hi - lo;
        break;
    }
    case RF_MOD_QKV: {
        int64_t d = c->head_dim, nh = c->num_attention_heads, nkv = c->num_key_value_heads;
        int64_t nh_p = nh / T, rep = T > nkv ? T / nkv : 1, nkv_p = nkv >= T ? nkv / T : 1;
        lo = t->shard == 0 ? r * nh_p * d : (r / rep) * nkv_p * d;
        n = t->shard == 0 ? nh_p * d : nkv_p * d;
        break;
    }
    case RF_MOD_MERGED:
        lo = r * ((m->n / 2) / T);
        n = (m->n / 2) / T;
        break;
    default:
        break;
    }
    if (u != 1 && (m->kind == RF_MOD_QKV || m->kind == RF_MOD_MERGED)) {
        int64_t end = (lo + n + u - 1) / u;
        lo /= u;
        n = end - lo;
    }
    if (t->slot < 0) { /* wna16 weight_shape: the planner reads both values */
        lo = 0;
        n = rows;
    }
    lo = lo < 0 ? 0 : (lo > rows ? rows : lo);
    n = lo + n > rows ? rows - lo : n;
    *lo_p = (uint64_t)lo;
    *hi_p = (uint64_t)(lo + (n < 0 ? 0 : n));
}

/*
 * Where every rollout rank reads every piece: in place from its pair's weights arena when the
 * pair's shard of the tensor is full-width and holds every row that rank's loaders read of
 * the piece, staged otherwise. A chunk is staged when any rollout rank needs it staged. Pure
 * and the same on every rank; fills j->ipc_staged and, on rollout ranks, j->ipc_pieces.
 */
static rf_status_t ipc_plan(job_t *j, rf_err_t *err)
{
    const rf_chunk_plan_t *cp = j->cplan;
    uint64_t *offs = calloc((size_t)j->man.n + 1, sizeof(uint64_t));
    rf_ipc_piece_t *mine = calloc(cp->n_pieces + 1, sizeof(rf_ipc_piece_t));
    j->ipc_staged = calloc(cp->n_chunks + 1, 1);
    j->ipc_piece_staged = calloc(cp->n_pieces + 1, 1);
    if (offs == NULL || mine == NULL || j->ipc_staged == NULL || j->ipc_piece_staged == NULL) {
        free(offs);
        free(mine);
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    }
    uint64_t inplace = 0, staged = 0;
    for (int r = 0; r < j->R; r++) {
        rf_rank_info_t ri, pi;
        int w = j->receivers[r];
        if (rf_topology_rank_info(&j->topo, w, &ri) != RF_OK ||
            rf_topology_rank_info(&j->topo, j->pair_of[w], &pi) != RF_OK ||
            pi.role != RF_ROLE_TRAINER) {
            free(offs);
            free(mine);
            return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: transport ipc: rollout rank %d pairs "
                              "with rank %d, not a trainer rank",
                              j->topo.file, w, j->pair_of[w]);
        }
        rf_trainer_arena_layout(&j->topo, &j->inv, &j->man, &pi, offs);
        for (size_t c = 0; c < cp->n_chunks; c++) {
            const rf_chunk_t *ch = &cp->chunks[c];
            for (size_t k = 0; k < ch->piece_count; k++) {
                size_t gi = ch->piece_begin + k;
                const rf_chunk_piece_t *pc = &cp->pieces[gi];
                const rf_tensor_t *t = &j->inv.tensors[j->man.entries[pc->item].tensor];
                rf_ipc_piece_t ip = {.staged = 1};
                rf_region_t reg;
                uint64_t lo, hi;
                ipc_rows_read(j, &ri.rc, t, &lo, &hi);
                lo = lo < pc->row_begin ? pc->row_begin : lo;
                hi = hi > pc->row_end ? pc->row_end : hi;
                if (hi <= lo) {
                    ip = (rf_ipc_piece_t){0, pc->row_begin, pc->row_begin, 0};
                } else if (rf_trainer_shard(&j->topo, &j->inv, t, &pi, &reg) && reg.c0 == 0 &&
                           (uint64_t)reg.c1 * (uint64_t)rf_dtype_size(j->man.entries[pc->item]
                                                                          .dtype) ==
                               j->items[pc->item].row_bytes &&
                           (uint64_t)reg.r0 <= lo && hi <= (uint64_t)reg.r1 &&
                           offs[pc->item] != UINT64_MAX) {
                    ip = (rf_ipc_piece_t){0, lo, hi,
                                          offs[pc->item] + (lo - (uint64_t)reg.r0) *
                                                               j->items[pc->item].row_bytes};
                }
                if (ip.staged)
                    j->ipc_staged[c] = j->ipc_piece_staged[gi] = 1;
                if (w == j->rank) {
                    mine[gi] = ip;
                    inplace += !ip.staged;
                    staged += ip.staged;
                }
            }
        }
    }
    free(offs);
    if (is_rollout(j)) {
        j->ipc_pieces = mine;
        rf_info("ipc: rank %d reads %" PRIu64 " pieces in place from rank %d, %" PRIu64
                " staged",
                j->rank, inplace, j->pair_of[j->rank], staged);
    } else {
        free(mine);
    }
    return RF_OK;
}

/*
 * Arenas (collective): every trainer rank moves its shards into a weights arena and sends
 * the handle to its pair; stage senders with chunks to stage export `buffers` staging slots
 * and broadcast the handle; rollout ranks map their pair's weights arena and every staging
 * arena once for the job; after a barrier the exporters unlink the names (no /dev/shm
 * object outlives setup, even if a process dies later).
 */
static rf_status_t setup_ipc(job_t *j, rf_err_t *err)
{
    char id[32] = "", name[RF_IPC_NAME_MAX];
    rf_ipc_handle_t wh, sh;
    rf_status_t st = RF_OK;
    memset(&wh, 0, sizeof(wh));
    if (j->rank == 0) {
        /* unique per job: rank 0's pid and clock; REFIT_IPC_TAG prefixes it (tests) */
        const char *tag = getenv("REFIT_IPC_TAG");
        snprintf(id, sizeof(id), "%.8s%s%d-%lx", tag ? tag : "", tag ? "-" : "", (int)getpid(),
                 (unsigned long)(rf_time_now() * 1e6) & 0xffffffu);
    }
    MPI_Bcast(id, (int)sizeof(id), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!is_rollout(j)) {
        uint64_t *offs = calloc((size_t)j->man.n + 1, sizeof(uint64_t));
        void *base = NULL;
        if (offs == NULL)
            st = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
        uint64_t bytes = st == RF_OK ? rf_trainer_arena_layout(&j->topo, &j->inv, &j->man,
                                                               &j->me, offs)
                                     : 0;
        snprintf(name, sizeof(name), "/refit-%s-%d-w", id, j->rank);
        if (st == RF_OK)
            st = rf_xfer_ipc_export(j->xfer, RF_IPC_WEIGHTS, name, bytes ? bytes : 1, &base, &wh,
                                    err);
        if (st == RF_OK && j->ipc_dev) {
            /* device arena: the trainer's weights are resident there. Generator updates are
             * produced on the device (gen_fill, device quantizers); checkpoint updates are read
             * on the host into a pinned mirror with the arena's layout and copied h2d
             * (produce_arena) */
            j->ipc_wdev = base;
            j->ipc_wbytes = bytes ? bytes : 1;
            rf_status_t hs = RF_OK;
            bool staged = false; /* some piece is gathered and packed on the host */
            for (size_t k = 0; k < j->cplan->n_pieces && !staged; k++)
                staged = j->ipc_piece_staged[k] != 0;
            if (j->ck != NULL || staged)
                hs = j->accel->ops->alloc_host(j->accel, (size_t)j->ipc_wbytes, &j->ipc_mirror);
            if (hs != RF_OK)
                st = rf_err_set(err, hs, "rank %d: no %" PRIu64 "-byte pinned host mirror of "
                                "its ipc weights arena", j->rank, j->ipc_wbytes);
            else if (j->ipc_mirror != NULL)
                base = j->ipc_mirror;
        }
        if (st == RF_OK)
            rf_trainer_use_arena(&j->tr, base, offs);
        free(offs);
        j->tr.gathered = j->ipc_piece_staged; /* only staged pieces are gathered and packed */
    }
    memset(&sh, 0, sizeof(sh));
    bool stage_sender = false;
    for (int p = 0; p < j->cplan->n_stages; p++)
        stage_sender |= j->senders[p] == j->rank;
    if (st == RF_OK && stage_sender) {
        bool any = false;
        for (int p = 0; p < j->cplan->n_stages; p++) {
            const rf_chunk_stage_range_t *sr = &j->cplan->stages[p];
            for (uint32_t k = 0; j->senders[p] == j->rank && k < sr->chunk_count; k++)
                any |= j->ipc_staged[sr->chunk_begin + k] != 0;
        }
        uint64_t slot = (j->cplan->chunk_bytes + 4095) & ~(uint64_t)4095;
        int buffers = j->topo.buffers ? j->topo.buffers : 2;
        void *base = NULL;
        snprintf(name, sizeof(name), "/refit-%s-%d-s", id, j->rank);
        if (any)
            st = rf_xfer_ipc_export(j->xfer, RF_IPC_STAGING, name, slot * (uint64_t)buffers,
                                    &base, &sh, err);
    }
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    /* weights handles: trainer -> its pair */
    if (!is_rollout(j))
        MPI_Send(&wh, (int)sizeof(wh), MPI_BYTE, j->pair_of[j->rank], 0x1f1, MPI_COMM_WORLD);
    else
        MPI_Recv(&wh, (int)sizeof(wh), MPI_BYTE, j->pair_of[j->rank], 0x1f1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (is_rollout(j))
        st = rf_xfer_ipc_import(j->xfer, j->pair_of[j->rank], RF_IPC_WEIGHTS, &wh, err);
    /* staging handles: each stage sender to everyone */
    for (int p = 0; p < j->cplan->n_stages; p++) {
        rf_ipc_handle_t h = sh;
        MPI_Bcast(&h, (int)sizeof(h), MPI_BYTE, j->senders[p], MPI_COMM_WORLD);
        if (st == RF_OK && is_rollout(j))
            st = rf_xfer_ipc_import(j->xfer, j->senders[p], RF_IPC_STAGING, &h, err);
    }
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err)); /* every importer mapped: unlink */
    st = rf_xfer_ipc_unlink(j->xfer, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    j->ipc_cfg = (rf_xfer_ipc_config_t){j->ipc_staged, j->ipc_pieces, j->pair_of[j->rank],
                                        job_apply, j, NULL};
    if (is_rollout(j) && j->ipc_dev) {
        for (int k = 0; k < 2 && st == RF_OK; k++)
            st = j->accel->ops->event_create(j->accel, &j->ipc_ev[k]);
        if (st != RF_OK)
            return rf_err_set(err, st, "rank %d: cannot create the ipc chunk events", j->rank);
        j->ipc_cfg.complete = job_complete;
    }
    return RF_OK;
}

/* A rollout rank with a device from rf_topology_place opens the "cuda" accelerator on it
 * (cudaSetDevice); its runtime storage, staging and LAYERWISE scratch then live there. On
 * colocated ipc the trainer rank opens its device too (its weights arena, pinned mirror).
 * REFIT_TEST_DEVICE_ACCEL=host-device (tests only) gives a rank without a GPU the host
 * implementation tagged as device memory, so the CPU suite runs the device branches. */
static rf_status_t setup_accel(job_t *j, rf_err_t *err)
{
    const char *emu = getenv("REFIT_TEST_DEVICE_ACCEL");
    if ((is_rollout(j) || j->ipc) && !j->nccl && j->place.device < 0 && emu != NULL &&
        strcmp(emu, "host-device") == 0) {
        /* tests only: the device branches on host memory (CPU CI covers the GPU data path) */
        rf_status_t s = rf_accel_open("host-device", 0, &j->accel);
        if (s != RF_OK)
            return rf_err_set(err, s, "rank %d: cannot open the host-device accelerator", j->rank);
        return RF_OK;
    }
    if ((!is_rollout(j) && !j->ipc && !j->nccl) || j->place.device < 0)
        return RF_OK;
    int n = 0;
    const rf_accel_ops_t *cu = rf_accel_lookup("cuda");
    if (!rf_accel_cuda_available() || cu->device_count(&n) != RF_OK || j->place.device >= n)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: %s.gpus puts rank %d on GPU %d, but refit was built without "
                          "CUDA or that CUDA device is not present (%d found)",
                          j->topo.file, is_rollout(j) ? "rollout" : "trainer", j->rank,
                          j->place.device, n);
    rf_status_t s = rf_accel_open("cuda", j->place.device, &j->accel);
    if (s != RF_OK)
        return rf_err_set(err, s, "%s: rank %d: cannot open CUDA device %d (%s.gpus)",
                          j->topo.file, j->rank, j->place.device,
                          is_rollout(j) ? "rollout" : "trainer");
    rf_info("rank %d: %s on GPU %d (%s)", j->rank,
            is_rollout(j) ? "rollout storage" : j->nccl ? "nccl chunk buffers" : "ipc weights arena",
            j->place.device,
            j->place.device_id);
    return RF_OK;
}

/* Broadcast mode with more than one trainer rank per stage: the stage senders gather. */
static bool stages_gather(const job_t *j)
{
    return !j->p2p && j->T / (j->topo.t_pp > 0 ? j->topo.t_pp : 1) > 1;
}

/* The trainer's gather wire on the nccl transport (rf_trainer_t.wire_recv / wire_send). */
static rf_status_t nccl_gather_recv(void *ctx, const int *peers, const uint64_t *bytes, int n,
                                    void *dst, double deadline, rf_err_t *err)
{
    job_t *j = ctx;
    return rf_xfer_nccl_gather_recv(j->xfer, j->me.p, peers, bytes, n, dst, deadline, err);
}

static rf_status_t nccl_gather_send(void *ctx, int sender, const void *src, uint64_t bytes,
                                    double deadline, rf_err_t *err)
{
    job_t *j = ctx;
    return rf_xfer_nccl_gather_send(j->xfer, j->me.p, sender, src, bytes, deadline, err);
}

/*
 * Tests: REFIT_TEST_GATHER_WIRE=mpi runs the stage gather through the trainer's gather wire
 * (rf_trainer_t.wire_recv / wire_send, the hooks the nccl transport fills) with MPI messages on
 * the trainer communicator, so that path's bookkeeping in runtime/trainer.c runs in CI without
 * GPUs. One tag; MPI keeps one sender's messages in order, as NCCL does. Failure handling is
 * the nccl transport's business (it aborts its communicators); here a failed wait cancels the
 * receives and leaves a send to the job's end, which is enough for the tests' clean runs.
 */
#define RF_TEST_WIRE_TAG 0x7e57
static rf_status_t test_wire_recv(void *ctx, const int *peers, const uint64_t *bytes, int n,
                                  void *dst, double deadline, rf_err_t *err)
{
    job_t *j = ctx;
    MPI_Request reqs[RF_MAX_OWNERS * 4];
    uint64_t off = 0;
    if (n > RF_MAX_OWNERS * 4)
        return rf_err_set(err, RF_ERR_INTERNAL, "test wire: %d peers", n);
    for (int q = 0; q < n; q++) {
        MPI_Irecv((char *)dst + off, (int)bytes[q], MPI_BYTE, peers[q], RF_TEST_WIRE_TAG,
                  j->tr.comm, &reqs[q]);
        off += bytes[q];
    }
    rf_status_t st = rf_ctl_wait(j->ctl, reqs, n, deadline, err);
    if (st != RF_OK)
        rf_ctl_cancel_recvs(reqs, n);
    return st;
}

static rf_status_t test_wire_send(void *ctx, int sender, const void *src, uint64_t bytes,
                                  double deadline, rf_err_t *err)
{
    job_t *j = ctx;
    MPI_Request req;
    MPI_Isend(src, (int)bytes, MPI_BYTE, sender, RF_TEST_WIRE_TAG, j->tr.comm, &req);
    return rf_ctl_wait(j->ctl, &req, 1, deadline, err);
}

/*
 * nccl trainers whose chunks come from their own shard alone (p2p: every trainer rank; broadcast:
 * a stage sender with no stage gather) keep their weights on their GPU, as a trainer's weights
 * are: generated (and quantized) there by the training step before the update begins, and packed
 * device to device into the chunk buffer (rf_xfer_config_t.pack_device), so no byte crosses
 * PCIe. The host path stays for checkpoint sources (read on the host), integrity trailers
 * (hashed on the host), injected faults (which edit host bytes) and stages with a gather.
 */
static bool nccl_resident_possible(const job_t *j) /* every condition but integrity's */
{
    return j->nccl && !is_rollout(j) && j->accel != NULL && j->place.device >= 0 &&
           j->ck == NULL && j->fault.kind == RF_FAULT_NONE &&
           (j->p2p || (j->tr.sender && j->tr.wire_recv == NULL));
}

static bool nccl_resident_eligible(const job_t *j)
{
    return nccl_resident_possible(j) && !j->integrity;
}

static rf_status_t setup_nccl_resident(job_t *j, rf_err_t *err)
{
    if (!nccl_resident_eligible(j))
        return RF_OK;
    uint64_t *offs = malloc(((size_t)j->man.n + 1) * sizeof(uint64_t));
    if (offs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    uint64_t bytes = rf_trainer_arena_layout(&j->topo, &j->inv, &j->man, &j->me, offs);
    rf_status_t st = j->accel->ops->alloc(j->accel, (size_t)(bytes ? bytes : 1), &j->nccl_wdev);
    if (st == RF_OK) {
        rf_trainer_use_arena(&j->tr, j->nccl_wdev, offs);
        j->nccl_resident = true;
    } else {
        rf_err_set(err, st, "trainer rank %d: no %" PRIu64 "-byte weights arena on GPU %d",
                   j->rank, bytes, j->place.device);
    }
    free(offs);
    return st;
}

/* The training step of a resident nccl trainer: its shards for update v on its GPU. */
static rf_status_t produce_nccl_resident(job_t *j, uint32_t v, rf_err_t *err)
{
    double t0 = rf_time_now();
    rf_status_t st =
        rf_trainer_produce_device(&j->tr, v, j->accel, j->nccl_wdev, j->nccl_wdev, err);
    j->js.resident_s = rf_time_now() - t0;
    return st;
}

/* Launches n device pack copies (j->pack_rows) and waits for them: the chunk buffer is sent
 * right after the pack callback returns. */
static rf_status_t pack_rows_run(job_t *j, size_t n, uint32_t seq, rf_err_t *err)
{
    rf_status_t st = n ? j->accel->ops->copy_rows_batch(j->accel, j->pack_rows, n, NULL) : RF_OK;
    if (st == RF_OK)
        st = rf_accel_sync(j->accel);
    if (st != RF_OK)
        return rf_err_set(err, st, "trainer rank %d: packing chunk %u on GPU %d failed", j->rank,
                          seq, j->place.device);
    return RF_OK;
}

static rf_status_t pack_rows_reserve(job_t *j, size_t n, rf_err_t *err)
{
    if (n <= j->pack_cap)
        return RF_OK;
    rf_accel_rows_t *r = realloc(j->pack_rows, n * sizeof(*r));
    if (r == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    j->pack_rows = r;
    j->pack_cap = n;
    return RF_OK;
}

static rf_status_t setup(job_t *j, rf_err_t *err)
{
    rf_status_t st;
    RF_CHECK(rf_topology_load(j->o->topology, MPI_COMM_WORLD, &j->topo, &j->cfg, err));
    j->T = rf_topology_trainer_size(&j->topo);
    j->R = rf_topology_rollout_size(&j->topo);
    RF_CHECK(rf_topology_rank_info(&j->topo, j->rank, &j->me));
    st = rf_topology_place(&j->topo, MPI_COMM_WORLD, &j->place, err);
    if (st != RF_OK)
        return st;
    /* mpi (rollout storage on GPUs when rollout.gpus lists them), or ipc on colocated
     * topologies: host shared memory on CPU, CUDA IPC when trainer.gpus == rollout.gpus
     * (each pair shares its GPU) */
    j->ipc = j->topo.transport == RF_TRANSPORT_IPC && j->topo.colocated;
    j->nccl = j->topo.transport == RF_TRANSPORT_NCCL;
    if (j->nccl && (!rf_xfer_nccl_built() || j->topo.t_ngpus == 0 || j->topo.r_ngpus == 0)) {
        /* every rank of an NCCL communicator needs its own GPU (two on one GPU were refused
         * by rf_topology_place, naming them) */
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: transfer.transport: nccl %s", j->topo.file,
                        !rf_xfer_nccl_built()
                            ? "is not available in this build (refit built without CUDA and NCCL)"
                            : "needs trainer.gpus and rollout.gpus (every rank of an NCCL "
                              "communicator on its own GPU)");
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    bool same_gpus = j->topo.t_ngpus == j->topo.r_ngpus &&
                     memcmp(j->topo.t_gpus, j->topo.r_gpus,
                            sizeof(int) * (size_t)j->topo.t_ngpus) == 0;
    if ((j->topo.transport != RF_TRANSPORT_MPI && !j->ipc && !j->nccl) ||
        (j->ipc && (j->topo.t_ngpus > 0 || j->topo.r_ngpus > 0) && !same_gpus)) {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: transfer.transport: %s%s%s is not available in this build (mpi, "
                        "or ipc with colocated: true on CPU or with trainer.gpus == "
                        "rollout.gpus)",
                        j->topo.file, rf_transport_name(j->topo.transport),
                        (j->topo.t_ngpus || j->topo.r_ngpus) ? " with gpus" : "",
                        j->topo.transport == RF_TRANSPORT_IPC && !j->topo.colocated
                            ? " without colocated: true"
                            : "");
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    if (j->ipc && j->place.nnodes > 1) {
        /* host backend: rollout ranks map the stage senders' staging arenas too */
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: transfer.transport: ipc on the host backend needs one node (%d "
                        "nodes)",
                        j->topo.file, j->place.nnodes);
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    /* gpus on the mpi transport: rollout storage on the GPU, chunks through host memory;
     * trainers stay on the host there. Trainers on GPUs only on colocated ipc (the CUDA IPC
     * arenas); rf_topology_place refused two ranks on one GPU other than such a pair. */
    if (j->topo.t_ngpus > 0 && !j->ipc && !j->nccl) {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: trainer.gpus: trainers run on the host in this build except on "
                        "colocated ipc with trainer.gpus == rollout.gpus (only rollout.gpus "
                        "places runtime storage on a GPU)",
                        j->topo.file);
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    st = setup_accel(j, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    j->p2p = j->topo.mode == RF_MODE_P2P;
    if (j->p2p && (j->ipc || (j->topo.r_ngpus > 0 && !j->nccl))) {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: transfer.mode: p2p runs on the mpi transport with host storage in "
                        "this build (not %s%s)",
                        j->topo.file, rf_transport_name(j->topo.transport),
                        j->topo.r_ngpus > 0 ? " with rollout.gpus" : "");
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    MPI_Comm_split(MPI_COMM_WORLD, (int)j->me.role, j->rank, &j->role_comm);
    MPI_Comm_split(MPI_COMM_WORLD, is_rollout(j) ? j->me.engine : MPI_UNDEFINED, j->rank,
                   &j->engine_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &j->stats_comm);

    st = rf_inventory_build(&j->cfg, j->topo.quantization, j->topo.group_size, &j->inv, err);
    if (st == RF_OK && j->o->checkpoint)
        st = rf_ckpt_open(j->o->checkpoint, &j->ck, err);
    if (st == RF_OK && is_rollout(j))
        st = setup_rollout(j, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));

    /* manifest: trainer rank 0 builds it from the inventory and the checkpoint headers, once
     * the checkpoint's own config.json (if any) agrees with the topology's; rank 0 also keeps
     * the reference, to count its entries against what the oracle checked */
    st = RF_OK;
    if (j->rank == 0 && j->ck != NULL)
        st = rf_model_config_check_checkpoint(j->o->checkpoint, &j->cfg, j->topo.quantization,
                                              j->topo.group_size, err);
    if (j->rank == 0 && st == RF_OK)
        st = rf_manifest_build(&j->inv, &j->topo, j->ck, j->o->checkpoint, &j->man, err);
    if (j->rank == 0 && st == RF_OK && j->ck != NULL && j->o->reference && j->ref == NULL)
        st = rf_ref_load(j->o->reference, &j->ref, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    RF_CHECK(rf_manifest_agree(&j->man, 0, &j->inv, &j->topo, MPI_COMM_WORLD, err));
    st = RF_OK;
    for (int i = 0; i < j->man.n && st == RF_OK && is_rollout(j); i++)
        st = rf_plan_set_source_dtype(&j->plan, j->man.entries[i].tensor, j->man.entries[i].dtype,
                                      err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));

    /* chunk plan (every rank computes the same one) */
    j->items = calloc((size_t)j->man.n + 1, sizeof(rf_chunk_item_t));
    j->item_tensor = calloc((size_t)j->man.n + 1, sizeof(int));
    if (j->items == NULL || j->item_tensor == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < j->man.n; i++) {
        const rf_tensor_t *t = &j->inv.tensors[j->man.entries[i].tensor];
        j->item_tensor[i] = j->man.entries[i].tensor;
        j->items[i].stage = j->man.entries[i].stage;
        j->items[i].rows = rf_tensor_rows(t);
        j->items[i].bytes = j->man.entries[i].nbytes; /* the manifest's dtype */
        j->items[i].row_bytes = j->items[i].rows ? j->items[i].bytes / j->items[i].rows : 0;
        j->items[i].name = t->name;
    }
    /* on by default (topology default true): --no-integrity or transfer.integrity: false
     * turns it off, and the table says which */
    j->integrity = j->o->integrity > 0 || (j->o->integrity == 0 && j->topo.integrity);
    j->integrity_off = j->integrity          ? NULL
                       : j->o->integrity < 0 ? "--no-integrity"
                                             : "transfer.integrity: false";
    st = rf_chunk_plan_create(j->items, (size_t)j->man.n,
                              rf_xfer_plan_bytes(j->topo.chunk_bytes, j->integrity), &j->cplan,
                              err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));

    /* schedule: stage senders, receivers, and the gate's expectation */
    j->senders = calloc((size_t)j->topo.t_pp + 1, sizeof(int));
    j->receivers = calloc((size_t)j->R + 1, sizeof(int));
    if (!j->senders || !j->receivers)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    for (int p = 0; p < j->topo.t_pp; p++)
        j->senders[p] = rf_topology_trainer_rank(&j->topo, 0, 0, 0, p);
    for (int r = 0; r < j->R; r++)
        j->receivers[r] = j->T + r;
    RF_CHECK(rf_gate_expect_init(&j->expect, j->size, err));
    if (j->ipc) {
        j->pair_of = calloc((size_t)j->size, sizeof(int));
        if (j->pair_of == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
        MPI_Allgather(&j->place.pair_rank, 1, MPI_INT, j->pair_of, 1, MPI_INT, MPI_COMM_WORLD);
        st = RF_OK;
        for (int r = 0; r < j->size && st == RF_OK; r++)
            if (j->pair_of[r] < 0 || j->pair_of[r] >= j->size)
                st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: transport ipc: rank %d has no pair",
                                j->topo.file, r);
        RF_CHECK(st);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, ipc_plan(j, err), err));
    }
    for (int p = 0; p < j->cplan->n_stages && j->ipc; p++) {
        /* ipc: per chunk SEQ (stage sender -> receiver) and ACK (back); READY per pair */
        const rf_chunk_stage_range_t *sr = &j->cplan->stages[p];
        uint64_t seq_bytes = RF_IPC_SEQ_BYTES + (j->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
        for (int r = 0; r < j->R; r++) {
            size_t s = (size_t)j->senders[p], d = (size_t)j->receivers[r];
            j->expect.chunks[s * j->size + d] += sr->chunk_count;
            j->expect.bytes[s * j->size + d] += sr->chunk_count * seq_bytes;
            j->expect.chunks[d * j->size + s] += sr->chunk_count;
            j->expect.bytes[d * j->size + s] += sr->chunk_count * (uint64_t)RF_IPC_ACK_BYTES;
        }
    }
    for (int q = 0; q < j->T && j->ipc; q++) {
        j->expect.chunks[(size_t)q * j->size + j->pair_of[q]] += 1;
        j->expect.bytes[(size_t)q * j->size + j->pair_of[q]] += RF_IPC_ACK_BYTES;
    }
    if (j->p2p) {
        /* p2p: every (trainer rank, rollout rank) pair's chunks from the schedule */
        st = rf_p2p_schedule_build(&j->topo, &j->inv, &j->man,
                                   rf_xfer_plan_bytes(j->topo.chunk_bytes, j->integrity),
                                   &j->p2p_s, err);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
        for (int r = 0; r < j->R; r++) {
            const rf_chunk_plan_t *pl = j->p2p_s.recv[r].plan;
            size_t d = (size_t)j->p2p_s.recv[r].rank;
            for (int p = 0; p < pl->n_stages; p++) {
                const rf_chunk_stage_range_t *sr = &pl->stages[p];
                uint64_t per = RF_CHUNK_HEADER_BYTES + (j->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
                j->expect.chunks[(size_t)p * j->size + d] += sr->chunk_count;
                j->expect.bytes[(size_t)p * j->size + d] +=
                    sr->payload_bytes + (uint64_t)sr->chunk_count * per;
            }
        }
    }
    for (int p = 0; p < j->cplan->n_stages && !j->ipc && !j->p2p; p++) {
        const rf_chunk_stage_range_t *sr = &j->cplan->stages[p];
        uint64_t bytes = sr->payload_bytes +
                         (uint64_t)sr->chunk_count *
                             (RF_CHUNK_HEADER_BYTES + (j->integrity ? RF_CHUNK_TRAILER_BYTES : 0));
        for (int r = 0; r < j->R; r++) {
            j->expect.chunks[(size_t)j->senders[p] * j->size + j->receivers[r]] += sr->chunk_count;
            j->expect.bytes[(size_t)j->senders[p] * j->size + j->receivers[r]] += bytes;
        }
    }

    st = RF_OK;
    if (!is_rollout(j)) {
        st = rf_trainer_init(&j->tr, &j->topo, &j->inv, &j->man, j->cplan, &j->me, j->role_comm,
                             err);
        j->tr_ready = st == RF_OK;
    }
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    RF_CHECK(fault_resolve(j, err)); /* same options and topology everywhere: same answer */
    RF_CHECK(rf_ctl_create(MPI_COMM_WORLD, &j->ctl, err));
    RF_CHECK(rf_xfer_create(j->ctl, rf_transport_name(j->topo.transport), j->topo.chunk_bytes,
                            j->topo.buffers, &j->xfer, err));
    if (j->nccl) {
        /* DESIGN.md section 9: one communicator per stage (broadcast: its sender + every
         * rollout rank; p2p: its trainer ranks + every rollout rank), created at the first
         * update's begin and re-created after a FAILED one */
        st = rf_nccl_layout_build(&j->topo, &j->nccl_layout, err);
        if (st == RF_OK)
            st = rf_xfer_nccl_setup(j->xfer, &j->nccl_layout, j->place.device, j->accel, err);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
        /* broadcast: the stage gather on the stage's trainer-only communicator */
        if (!is_rollout(j) && !j->p2p && rf_xfer_nccl_has_gather(j->xfer, j->me.p)) {
            j->tr.wire_recv = nccl_gather_recv;
            j->tr.wire_send = nccl_gather_send;
            j->tr.wire_ctx = j;
        }
        if (stages_gather(j))
            j->wire = "nccl gather communicators";
        st = setup_nccl_resident(j, err);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
        /* [0]: some trainer is resident; [1]: some trainer would be but for integrity (the
         * table names the host pack and why) */
        int mine[2] = {j->nccl_resident, nccl_resident_possible(j) && j->integrity};
        int any[2] = {0, 0};
        MPI_Allreduce(mine, any, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        j->fence = any[0] != 0;
        j->integrity_host_pack = any[1] != 0;
    }
    const char *tw = getenv("REFIT_TEST_GATHER_WIRE");
    if (tw != NULL && tw[0] != '\0' && j->nccl && j->rank == 0)
        rf_warn("REFIT_TEST_GATHER_WIRE is ignored on the nccl transport (its stage gathers use "
                "the trainer-only NCCL communicators)");
    if (tw != NULL && tw[0] != '\0' && !j->nccl) {
        st = strcmp(tw, "mpi") == 0
                 ? RF_OK
                 : rf_err_set(err, RF_ERR_INVALID, "REFIT_TEST_GATHER_WIRE=%s: only 'mpi' (tests: "
                              "the stage gather through the gather wire over MPI)", tw);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
        if (!is_rollout(j) && !j->p2p) {
            j->tr.wire_recv = test_wire_recv;
            j->tr.wire_send = test_wire_send;
            j->tr.wire_ctx = j;
        }
        if (stages_gather(j))
            j->wire = "test wire (REFIT_TEST_GATHER_WIRE=mpi)";
    }
    if (j->ipc) {
        /* the arena backend: cuda when this rank has a GPU (a pair shares it), host-device
         * with the tests' host-device accelerator, else host shared memory */
        const char *be = j->place.device >= 0 ? "cuda"
                         : (j->accel != NULL && j->accel->ops == &rf_accel_host_device_ops)
                             ? "host-device"
                             : "host";
        int mine = 0, all = 0;
        st = rf_xfer_ipc_set_backend(j->xfer, be, err);
        if (st == RF_OK) {
            mine = rf_xfer_ipc_backend(j->xfer)->device != 0;
            if (mine && j->accel == NULL)
                st = rf_err_set(err, RF_ERR_INTERNAL, "rank %d: device ipc without a device",
                                j->rank);
        }
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        j->ipc_dev = all == j->size; /* the same on every rank (the teardown barrier) */
        if (all != 0 && all != j->size) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: ipc: %d of %d ranks have device arenas "
                            "(every rank of a colocated ipc job or none)",
                            j->topo.file, all, j->size);
            return agree_status(j, MPI_COMM_WORLD, st, err);
        }
        RF_CHECK(setup_ipc(j, err));
    }
    j->paused = true;
    return RF_OK;
}

/* ---- one update ----------------------------------------------------------------------- */

typedef struct pack_ctx {
    job_t *j;
    uint32_t update;
    double deadline;
} pack_ctx_t;

static rf_status_t job_pack(void *ctx, const rf_chunk_t *chunk, const rf_chunk_piece_t *pieces,
                            void *payload, rf_err_t *err)
{
    pack_ctx_t *c = ctx;
    (void)pieces;
    if ((int64_t)chunk->seq == c->j->fault.seq && fault_here(c->j, c->update, RF_FAULT_EXIT))
        fault_exit_now(c->j, "stage sender, packing");
    if ((int64_t)chunk->seq == c->j->fault.seq && fault_here(c->j, c->update, RF_FAULT_STALL))
        fault_stall_now(c->j, c->deadline, "stage sender, packing");
    if (c->j->nccl_resident) { /* payload is the device chunk buffer */
        RF_CHECK(pack_rows_reserve(c->j, chunk->piece_count, err));
        RF_CHECK(rf_trainer_pack_rows(&c->j->tr, chunk, payload, c->j->pack_rows, err));
        return pack_rows_run(c->j, chunk->piece_count, chunk->seq, err);
    }
    return rf_trainer_pack(&c->j->tr, c->j->ctl, c->update, chunk, payload, c->deadline, err);
}

/* p2p sender: packs the rectangles of one chunk of receiver `recv`'s plan from this rank's
 * own shard buffers. */
typedef struct p2p_pack_ctx {
    job_t *j;
    uint32_t update;
    double deadline;
    const rf_p2p_recv_t *recv;
} p2p_pack_ctx_t;

static rf_status_t p2p_pack(void *ctx, const rf_chunk_t *chunk, const rf_chunk_piece_t *pieces,
                            void *payload, rf_err_t *err)
{
    p2p_pack_ctx_t *c = ctx;
    if ((int64_t)chunk->seq == c->j->fault.seq && fault_here(c->j, c->update, RF_FAULT_EXIT))
        fault_exit_now(c->j, "p2p sender, packing");
    if ((int64_t)chunk->seq == c->j->fault.seq && fault_here(c->j, c->update, RF_FAULT_STALL))
        fault_stall_now(c->j, c->deadline, "p2p sender, packing");
    bool dev = c->j->nccl_resident; /* payload is the device chunk buffer */
    if (dev)
        RF_CHECK(pack_rows_reserve(c->j, chunk->piece_count, err));
    for (size_t k = 0; k < chunk->piece_count; k++) {
        const rf_chunk_piece_t *pc = &pieces[k];
        const rf_p2p_rect_t *q = &c->recv->rects[pc->item];
        rf_region_t part = q->reg;
        part.r0 = q->reg.r0 + (int64_t)pc->row_begin;
        part.r1 = q->reg.r0 + (int64_t)pc->row_end;
        char *dst = (char *)payload + pc->offset;
        RF_CHECK(dev ? rf_trainer_rect_rows(&c->j->tr, q->entry, &part, dst, &c->j->pack_rows[k],
                                            err)
                     : rf_trainer_copy_rect(&c->j->tr, q->entry, &part, dst, err));
    }
    return dev ? pack_rows_run(c->j, chunk->piece_count, chunk->seq, err) : RF_OK;
}

/* Keeps a copy of a chunk's payload for --cold-check (copy: owned, passed on). */
static rf_status_t cold_keep(job_t *j, const rf_chunk_t *chunk, char *copy, rf_err_t *err)
{
    if (j->ncold == j->capcold) {
        size_t cap = j->capcold ? 2 * j->capcold : 16;
        cold_chunk_t *g = realloc(j->cold, cap * sizeof(*g));
        if (g == NULL) {
            free(copy);
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
        }
        j->cold = g;
        j->capcold = cap;
    }
    j->cold[j->ncold++] = (cold_chunk_t){chunk, copy};
    return RF_OK;
}

static rf_status_t chunk_hooks(job_t *j, const rf_chunk_t *chunk, rf_err_t *err);
static rf_status_t apply_pieces_at(job_t *j, rf_plan_t *p, const rf_chunk_t *chunk,
                                   const rf_chunk_piece_t *pieces, const void *payload, bool dev,
                                   rf_err_t *err);

/* Applies one chunk's pieces to plan p: the global plan's (broadcast, sender -1) or this
 * rank's p2p plan's rectangles (sender-keyed). */
static rf_status_t apply_pieces(job_t *j, rf_plan_t *p, const rf_chunk_t *chunk,
                                const rf_chunk_piece_t *pieces, const void *payload,
                                rf_err_t *err)
{
    return apply_pieces_at(j, p, chunk, pieces, payload, false, err);
}

/* dev: payload is device memory of the storage's device (nccl's chunk buffer). */
static rf_status_t apply_pieces_at(job_t *j, rf_plan_t *p, const rf_chunk_t *chunk,
                                   const rf_chunk_piece_t *pieces, const void *payload, bool dev,
                                   rf_err_t *err)
{
    const rf_p2p_recv_t *me = j->p2p ? &j->p2p_s.recv[j->rank - j->T] : NULL;
    for (size_t k = 0; k < chunk->piece_count; k++) {
        const rf_chunk_piece_t *pc = &pieces[k];
        const char *src = (const char *)payload + pc->offset;
        if (me != NULL) {
            const rf_p2p_rect_t *q = &me->rects[pc->item];
            RF_CHECK((dev ? rf_plan_apply_rect_device : rf_plan_apply_rect)(
                p, q->tensor, q->sender, (uint64_t)q->reg.r0 + pc->row_begin,
                (uint64_t)q->reg.r0 + pc->row_end, q->reg.c0, q->reg.c1, q->reg.c1 - q->reg.c0,
                src, chunk->seq, err));
        } else {
            RF_CHECK((dev ? rf_plan_apply_device : rf_plan_apply)(
                p, j->man.entries[pc->item].tensor, -1, pc->row_begin, pc->row_end, src,
                chunk->seq, err));
        }
    }
    return RF_OK;
}

static rf_status_t job_unpack(void *ctx, const rf_chunk_t *chunk, const rf_chunk_piece_t *pieces,
                              const void *payload, rf_err_t *err)
{
    job_t *j = ctx;
    RF_CHECK(rf_plan_stage(&j->plan, payload, chunk->payload_bytes, err)); /* GPU: one h2d */
    RF_CHECK(apply_pieces(j, &j->plan, chunk, pieces, payload, err));
    if (j->o->cold_check) {
        char *copy = malloc(chunk->payload_bytes + 1);
        if (copy == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
        memcpy(copy, payload, chunk->payload_bytes);
        RF_CHECK(cold_keep(j, chunk, copy, err));
    }
    return chunk_hooks(j, chunk, err);
}

/* nccl: the payload is the device chunk buffer on this rank's GPU: pieces go device to
 * device on the accelerator's stream (the transport records an event after them before it
 * receives into the buffer again); the cold-check copy comes back d2h. */
static rf_status_t job_unpack_nccl(void *ctx, const rf_chunk_t *chunk,
                                   const rf_chunk_piece_t *pieces, const void *payload,
                                   rf_err_t *err)
{
    job_t *j = ctx;
    RF_CHECK(apply_pieces_at(j, &j->plan, chunk, pieces, payload, true, err));
    /* rf_plan_apply_device only collects the row copies: launch them now, on the stream the
     * transport records its unpack event on, before the chunk buffer may be received into
     * again (and before any LAYERWISE layer they complete is processed) */
    RF_CHECK(rf_plan_flush(&j->plan, err));
    if (j->o->cold_check) {
        char *copy = malloc(chunk->payload_bytes + 1);
        rf_status_t cs = copy == NULL ? RF_ERR_NOMEM
                                      : j->accel->ops->copy(j->accel, copy, payload,
                                                            (size_t)chunk->payload_bytes,
                                                            RF_COPY_D2H, NULL);
        if (cs == RF_OK)
            cs = rf_accel_sync(j->accel);
        if (cs != RF_OK) {
            free(copy);
            return rf_err_set(err, cs, "rank %d: chunk %u: copying the payload d2h for the cold "
                              "check failed", j->rank, chunk->seq);
        }
        RF_CHECK(cold_keep(j, chunk, copy, err));
    }
    return chunk_hooks(j, chunk, err);
}

/*
 * ipc: applies one chunk as segments read in place from the pair's arena or from a staging
 * slot. The cold-check copy gets the backed rows at their payload offsets (the loaders read
 * no other rows, so the replay lands the same bytes).
 */
static rf_status_t job_apply(void *ctx, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                             size_t nsegs, rf_err_t *err)
{
    job_t *j = ctx;
    for (size_t k = 0; k < nsegs; k++) {
        const rf_xfer_segment_t *sg = &segs[k];
        int tensor = j->item_tensor[sg->piece->item];
        /* device arenas: every segment is device memory on this rank's GPU (the pair's
         * weights arena or a staging slot, both mapped by CUDA IPC): device to device */
        if (j->ipc_dev)
            RF_CHECK(rf_plan_apply_device(&j->plan, tensor, -1, sg->row_begin, sg->row_end,
                                          sg->src, chunk->seq, err));
        else
            RF_CHECK(rf_plan_apply(&j->plan, tensor, -1, sg->row_begin, sg->row_end, sg->src,
                                   chunk->seq, err));
    }
    if (j->o->cold_check) {
        char *copy = calloc(1, chunk->payload_bytes + 1);
        const rf_ipc_arena_ops_t *ao = rf_xfer_ipc_backend(j->xfer);
        if (copy == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
        for (size_t k = 0; k < nsegs; k++) {
            const rf_xfer_segment_t *sg = &segs[k];
            uint64_t rb = j->items[sg->piece->item].row_bytes;
            rf_status_t cs = RF_OK;
            if (sg->backed)
                cs = ao->to_host(copy + sg->piece->offset +
                                     (sg->row_begin - sg->piece->row_begin) * rb,
                                 sg->src, (sg->row_end - sg->row_begin) * rb, err);
            if (cs != RF_OK) {
                free(copy);
                return cs;
            }
        }
        RF_CHECK(cold_keep(j, chunk, copy, err));
    }
    if (j->ipc_dev) {
        /* every row copy of the chunk in one launch, then an event: the ACK waits for it
         * (job_complete) while the next chunk's copies queue behind these */
        RF_CHECK(rf_plan_flush(&j->plan, err));
        int k = j->ipc_ev_next;
        j->ipc_ev_next ^= 1;
        j->ipc_ev_seq[k] = chunk->seq;
        rf_status_t es = j->accel->ops->event_record(j->ipc_ev[k], NULL);
        if (es != RF_OK)
            return rf_err_set(err, es, "rank %d: chunk %u: recording the device event after its "
                              "copies failed", j->rank, chunk->seq);
    }
    return chunk_hooks(j, chunk, err);
}

/* The ACK of chunk may go: its device copies completed (the trainer may write its source). */
static rf_status_t job_complete(void *ctx, const rf_chunk_t *chunk, rf_err_t *err)
{
    job_t *j = ctx;
    int k = j->ipc_ev_seq[0] == chunk->seq ? 0 : 1;
    if (j->ipc_ev_seq[k] != chunk->seq)
        return rf_err_set(err, RF_ERR_INTERNAL, "rank %d: chunk %u has no device event", j->rank,
                          chunk->seq);
    rf_status_t ss = j->accel->ops->event_sync(j->ipc_ev[k]);
    if (ss != RF_OK)
        return rf_err_set(err, ss, "rank %d: chunk %u: waiting for its device copies before the "
                          "ACK failed", j->rank, chunk->seq);
    return rf_plan_check(&j->plan, chunk->seq, err); /* what the copies brought back */
}

/* Fault hooks after the first chunk this rank applied. */
static rf_status_t chunk_hooks(job_t *j, const rf_chunk_t *chunk, rf_err_t *err)
{
    if (chunk->seq == 0 && fault_here(j, j->update, RF_FAULT_EXIT))
        fault_exit_now(j, "rollout, after applying chunk 0");
    if (chunk->seq == 0 && fault_here(j, j->update, RF_FAULT_STALL))
        fault_stall_now(j, j->deadline, "rollout, after applying chunk 0");
    if (chunk->seq == 0 && fault_here(j, j->update, RF_FAULT_MOVE_STORAGE)) {
        const char *name = j->st.slots[0].name;
        RF_CHECK(rf_storage_move_slot(&j->st, name, err));
        rf_warn("fault: rank %d moved slot %s during update %u", j->rank, name, j->update);
    }
    return RF_OK;
}

/* What the trainer's source offers for one manifest entry (its view of the source). */
typedef struct src_view {
    bool present;
    rf_dtype_t dtype;
    int ndim;
    int64_t shape[RF_MAX_DIMS];
} src_view_t;

/* Source check against the manifest (DESIGN.md section 9): names, dtypes, shapes, and no
 * tensor the manifest lacks. The view is the checkpoint's headers, or for generator weights
 * the inventory's tensors (the generator produces exactly those); a source fault (tests)
 * alters the view on one trainer rank, so the check fails there before any chunk is posted. */
static rf_status_t check_source(job_t *j, bool from_ckpt, uint32_t v, rf_err_t *err)
{
    const char *extra = NULL;
    /* the real check, bf16 sources of quantized tensors included */
    RF_CHECK(rf_trainer_check_source(&j->tr, from_ckpt ? j->ck : NULL, err));
    int victim = -1;
    for (int i = 0; i < j->man.n && victim < 0; i++)
        if (j->tr.has[i])
            victim = i;
    for (int i = 0; i < j->man.n; i++) {
        const rf_manifest_entry_t *e = &j->man.entries[i];
        src_view_t sv = {.present = true, .dtype = e->dtype, .ndim = e->ndim};
        if (!j->tr.has[i])
            continue;
        memcpy(sv.shape, e->shape, sizeof(sv.shape));
        if (from_ckpt && !rf_manifest_trainer_quantizes(&j->inv, &j->inv.tensors[e->tensor], j->ck)) {
            const rf_st_entry_t *se = rf_ckpt_find(j->ck, e->name);
            sv.present = se != NULL;
            if (se != NULL) {
                /* a bf16 / f16 fp8 scale is widened to the manifest's fp32 on reading */
                sv.dtype = rf_manifest_scale_widens(&j->inv.tensors[e->tensor], se->dtype)
                               ? e->dtype
                               : se->dtype;
                sv.ndim = se->ndim;
                for (int d = 0; d < se->ndim && d < RF_MAX_DIMS; d++)
                    sv.shape[d] = (int64_t)se->shape[d];
            }
        }
        if (i == victim && fault_here(j, v, RF_FAULT_MISSING_TENSOR))
            sv.present = false;
        if (i == victim && fault_here(j, v, RF_FAULT_WRONG_DTYPE))
            sv.dtype = sv.dtype == RF_DTYPE_F32 ? RF_DTYPE_BF16 : RF_DTYPE_F32;
        if (i == victim && fault_here(j, v, RF_FAULT_WRONG_SHAPE))
            sv.shape[0] += 1;
        if (!sv.present)
            return rf_err_set(err, RF_ERR_MISSING, "trainer rank %d: source lacks tensor %s",
                              j->rank, e->name);
        if (sv.dtype != e->dtype)
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "trainer rank %d: source tensor %s has dtype %s, the manifest %s",
                              j->rank, e->name, rf_dtype_name(sv.dtype), rf_dtype_name(e->dtype));
        bool same = sv.ndim == e->ndim;
        for (int d = 0; same && d < e->ndim; d++)
            same = sv.shape[d] == e->shape[d];
        if (!same)
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "trainer rank %d: source tensor %s has shape [%" PRId64
                              "%s], the manifest [%" PRId64 "%s]",
                              j->rank, e->name, sv.shape[0], sv.ndim > 1 ? ", ..." : "",
                              e->shape[0], e->ndim > 1 ? ", ..." : "");
    }
    if (fault_here(j, v, RF_FAULT_EXTRA_TENSOR))
        extra = "model.layers.0.self_attn.injected_extra.weight";
    if (extra != NULL) {
        bool known = false;
        for (int i = 0; i < j->man.n && !known; i++)
            known = strcmp(j->man.entries[i].name, extra) == 0;
        if (!known)
            return rf_err_set(err, RF_ERR_EXTRA,
                              "trainer rank %d: source has tensor %s, which the manifest lacks",
                              j->rank, extra);
    }
    return RF_OK;
}

static void snapshot(job_t *j)
{
    for (int s = 0; s < j->st.nslots; s++) {
        rf_slot_t *sl = &j->st.slots[s];
        uint64_t b = rf_signature_bytes(&sl->sig);
        if (sl->derived)
            continue;
        if (j->snap[s] == NULL)
            j->snap[s] = malloc(b + 1);
        if (j->snap[s] != NULL &&
            rf_storage_read(&j->st, j->snap[s], sl->sig.data, (size_t)b, NULL) != RF_OK) {
            free(j->snap[s]); /* no snapshot: the diff rule skips the slot */
            j->snap[s] = NULL;
        }
    }
}

/* DESIGN.md section 2: elements written that differ from the previous update (whole values of
 * the slot's dtype; vocab padding rows excluded; padding is zero both times). */
static void diff_rule(job_t *j)
{
    uint64_t total[2] = {0, 0}, changed[2] = {0, 0};
    for (int s = 0; s < j->st.nslots; s++) {
        rf_slot_t *sl = &j->st.slots[s];
        if (sl->derived || j->snap[s] == NULL)
            continue;
        rf_quant_t q = j->inv.modules[sl->module].quant;
        int cls = q != RF_QUANT_NONE; /* quantized tensors: 90% (DESIGN.md section 2) */
        /* packed int4 compares per byte */
        size_t es = q == RF_QUANT_WNA16 && sl->sig.dtype == RF_DTYPE_I32
                        ? 1
                        : rf_dtype_size(sl->sig.dtype);
        uint64_t n = rf_signature_bytes(&sl->sig) / es, pad = 0;
        const char *a = sl->sig.data, *b = j->snap[s];
        char *host = NULL;
        if (rf_storage_on_device(&j->st)) { /* compare a host copy of the device slot */
            size_t nb = (size_t)rf_signature_bytes(&sl->sig);
            host = malloc(nb + 1);
            if (host == NULL || rf_storage_read(&j->st, host, sl->sig.data, nb, NULL) != RF_OK) {
                free(host);
                continue;
            }
            a = host;
        }
        if (j->inv.modules[sl->module].kind == RF_MOD_VOCAB) {
            int64_t per = rf_vocab_padded(j->inv.cfg.vocab_size) / j->me.rc.tp;
            int64_t first = j->inv.cfg.vocab_size - (int64_t)j->me.rc.tp_rank * per;
            first = first < 0 ? 0 : (first > per ? per : first);
            pad = (uint64_t)(per - first) * (uint64_t)j->inv.cfg.hidden_size;
        }
        uint64_t same = 0;
        for (uint64_t i = 0; i < n; i++)
            same += memcmp(a + i * es, b + i * es, es) == 0;
        free(host);
        total[cls] += n - pad;
        changed[cls] += n - same;
    }
    j->js.diff_elems = total[0];
    j->js.diff_changed = changed[0];
    j->js.qdiff_elems = total[1];
    j->js.qdiff_changed = changed[1];
}

/*
 * Expected checkpoint tensors for the oracle, per module, computed without the fast path:
 * the generator's values (unquantized), the reference quantizer applied to the generator's or
 * a bf16 checkpoint's logical weights (DESIGN.md section 12), or the checkpoint's bytes as
 * stored (in the header's dtype).
 */
typedef struct expect_ctx {
    job_t *j;
    uint64_t step;
    bool from_ckpt;
    char **buf;        /* per inventory tensor (owned; cleared per module) */
    rf_dtype_t *dt;    /* the dtype of buf[t] */
    int *used;         /* tensors with a buffer, to clear */
    int nused;
    void **slots;      /* the current module's model-layout slot bytes (borrowed) */
    rf_err_t *err;
} expect_ctx_t;

static void expect_keep(expect_ctx_t *c, int t, char *b, rf_dtype_t dt)
{
    c->buf[t] = b;
    c->dt[t] = dt;
    c->used[c->nused++] = t;
}

static void expect_clear(expect_ctx_t *c)
{
    for (int i = 0; i < c->nused; i++) {
        free(c->buf[c->used[i]]);
        c->buf[c->used[i]] = NULL;
    }
    c->nused = 0;
}

/* The reference quantizer on the logical weight of the linear holding quantized tensor t. */
static bool expect_quantized(expect_ctx_t *c, const rf_tensor_t *t)
{
    job_t *j = c->j;
    const rf_module_t *mod = &j->inv.modules[t->module];
    bool wna16 = mod->quant == RF_QUANT_WNA16;
    char prefix[RF_NAME_MAX - 32], name[RF_NAME_MAX];
    const char *dot = strrchr(t->name, '.');
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(dot - t->name), t->name);
    snprintf(name, sizeof(name), "%s.%s", prefix, wna16 ? "weight_packed" : "weight");
    int qi = rf_inventory_find(&j->inv, name);
    snprintf(name, sizeof(name), "%s.%s", prefix, wna16 ? "weight_scale" : "weight_scale_inv");
    int si = rf_inventory_find(&j->inv, name);
    if (qi < 0 || si < 0)
        return false;
    const rf_tensor_t *qt = &j->inv.tensors[qi], *sc = &j->inv.tensors[si];
    int64_t N = qt->shape[0], K = qt->shape[1] * (wna16 ? 8 : 1);
    rf_dtype_t dt = j->inv.cfg.dtype;
    size_t es = rf_dtype_size(dt);
    char *logical = malloc((size_t)N * (size_t)K * es + 1);
    char *q = malloc(qt->nbytes + 1), *scale = malloc(sc->nbytes + 1);
    rf_status_t st = (logical && q && scale) ? RF_OK : RF_ERR_NOMEM;
    snprintf(name, sizeof(name), "%s.weight", prefix);
    if (st == RF_OK && !c->from_ckpt) {
        rf_tensor_t lt = *qt;
        snprintf(lt.name, sizeof(lt.name), "%s", name);
        lt.dtype = dt;
        lt.shape[1] = K;
        lt.numel = (uint64_t)N * (uint64_t)K;
        lt.nbytes = lt.numel * es;
        st = rf_gen_fill(&lt, c->step, 0, (uint64_t)N, 0, (uint64_t)K, logical, (size_t)K * es);
    } else if (st == RF_OK) {
        const rf_st_entry_t *e = rf_ckpt_find(j->ck, name);
        st = e == NULL ? RF_ERR_MISSING
                       : rf_ckpt_read(j->ck, e, 0, (uint64_t)N, 0, (uint64_t)K * es, logical,
                                      (size_t)K * es, c->err);
    }
    if (st == RF_OK)
        st = wna16 ? rf_wna16_quantize(logical, dt, N, K, K, j->inv.group_size, (uint32_t *)q,
                                       K / 8, scale, sc->dtype, K / j->inv.group_size)
                   : rf_fp8_quantize(logical, dt, N, K, K, (uint8_t *)q, K, scale, sc->dtype,
                                     sc->shape[1], RF_FP8_PLAIN);
    free(logical);
    if (st != RF_OK) {
        free(q);
        free(scale);
        return false;
    }
    expect_keep(c, qi, q, qt->dtype);
    expect_keep(c, si, scale, sc->dtype);
    return true;
}

static const void *expect_bytes(void *ctx, int tensor)
{
    expect_ctx_t *c = ctx;
    job_t *j = c->j;
    const rf_tensor_t *t = &j->inv.tensors[tensor];
    if (c->buf[tensor] != NULL)
        return c->buf[tensor];
    if (t->param == RF_PARAM_WEIGHT_SHAPE)
        return NULL; /* never stored, never verified through a slot */
    if (j->inv.modules[t->module].quant != RF_QUANT_NONE && t->param != RF_PARAM_BIAS &&
        (!c->from_ckpt || rf_manifest_trainer_quantizes(&j->inv, t, j->ck)))
        return expect_quantized(c, t) ? c->buf[tensor] : NULL;
    if (!c->from_ckpt) {
        char *b = malloc(t->nbytes + 1);
        uint64_t rows = rf_tensor_rows(t);
        if (b == NULL || rf_gen_fill(t, c->step, 0, rows, 0, rows ? t->numel / rows : 0, b,
                                     rf_tensor_row_bytes(t)) != RF_OK) {
            free(b);
            return NULL;
        }
        expect_keep(c, tensor, b, t->dtype);
        return b;
    }
    const rf_st_entry_t *e = rf_ckpt_find(j->ck, t->name);
    if (e == NULL)
        return NULL;
    char *b = malloc(e->nbytes + 1);
    uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
    if (b == NULL || rf_ckpt_read(j->ck, e, 0, rows, 0, rb, b, rb, c->err) != RF_OK) {
        free(b);
        return NULL;
    }
    expect_keep(c, tensor, b, e->dtype);
    return b;
}

/* The dtype expect_bytes hands tensor out in, whether or not it has been fetched yet (the
 * oracle may ask first): the header's for tensors compared as stored, else the inventory's. */
static rf_dtype_t expect_dtype(void *ctx, int tensor)
{
    expect_ctx_t *c = ctx;
    job_t *j = c->j;
    const rf_tensor_t *t = &j->inv.tensors[tensor];
    if (c->buf[tensor] != NULL)
        return c->dt[tensor];
    if (!c->from_ckpt || t->param == RF_PARAM_WEIGHT_SHAPE ||
        rf_manifest_trainer_quantizes(&j->inv, t, j->ck))
        return RF_DTYPE_INVALID;
    const rf_st_entry_t *e = rf_ckpt_find(j->ck, t->name);
    return e != NULL ? e->dtype : RF_DTYPE_INVALID;
}

static const void *expect_slot_bytes(void *ctx, int module, int slot)
{
    (void)module;
    return ((expect_ctx_t *)ctx)->slots[slot];
}

/* Scalar reference loader over every slot of this rank, plus the dequantization oracle for
 * every quantized module (dequant(runtime) == dequant(checkpoint), -0.0 == +0.0). */
static rf_status_t verify_scalar(job_t *j, uint64_t step, bool from_ckpt, rf_err_t *err)
{
    expect_ctx_t c = {.j = j, .step = step, .from_ckpt = from_ckpt, .err = err};
    rf_verify_opts_t vo = {0, expect_dtype};
    rf_status_t st = RF_OK;
    c.buf = calloc((size_t)j->inv.ntensors + 1, sizeof(char *));
    c.dt = calloc((size_t)j->inv.ntensors + 1, sizeof(rf_dtype_t));
    c.used = calloc((size_t)j->inv.ntensors + 1, sizeof(int));
    if (!c.buf || !c.dt || !c.used) {
        free(c.buf);
        free(c.dt);
        free(c.used);
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    }
    if (strcmp(j->fmt.ops->name, "fp8-block-fnuz") == 0)
        vo.flags |= RF_VERIFY_FP8_FNUZ_ZERO;
    for (int m = 0; m < j->plan.nlayers && st == RF_OK; m++) {
        rf_layer_t *L = &j->plan.layers[m];
        bool quant = j->inv.modules[m].quant != RF_QUANT_NONE;
        void *bufs[RF_MODULE_MAX_SLOTS] = {0};
        for (int s = 0; s < L->nmodel; s++)
            bufs[s] = malloc(rf_slot_shape_bytes(&L->model[s]) + 1);
        c.slots = bufs;
        st = rf_plan_read_model(&j->plan, m, bufs, err);
        for (int s = 0; s < L->nmodel && st == RF_OK; s++) {
            uint64_t mism = 0;
            size_t nb = rf_slot_shape_bytes(&L->model[s]);
            if (from_ckpt || quant)
                st = rf_verify_slot_ex(&j->inv, m, s, &j->me.rc, bufs[s], nb, expect_bytes, &c,
                                       &vo, &mism, err);
            else
                st = rf_verify_slot_generator(&j->inv, m, s, &j->me.rc, bufs[s], nb, step, &mism,
                                              err);
            j->js.verify_elems += nb / rf_dtype_size(L->model[s].dtype);
            j->js.verify_mismatch += mism;
            if (st == RF_OK && mism > 0)
                st = rf_err_set(err, RF_ERR_VERIFY, "rank %d: %" PRIu64 " mismatches in %s.%s",
                                j->rank, mism, j->inv.modules[m].name, L->model[s].name);
            for (int k = 0; k < j->inv.modules[m].ntensors; k++) {
                const rf_tensor_t *t = &j->inv.tensors[j->inv.modules[m].tensors[k]];
                if ((t->slot == s || t->slot < 0) &&
                    (t->expert < 0 || rf_moe_local_index(j->inv.cfg.num_experts, &j->me.rc,
                                                         t->expert) >= 0))
                    j->verified[j->inv.modules[m].tensors[k]] = 1;
            }
        }
        if (st == RF_OK && quant) {
            uint64_t mism = 0;
            st = rf_verify_dequant_module(&j->inv, m, &j->me.rc, expect_slot_bytes, expect_bytes,
                                          &c, &vo, &mism, err);
            j->js.dequant_checked++;
            j->js.verify_mismatch += mism;
        }
        expect_clear(&c);
        for (int s = 0; s < L->nmodel; s++)
            free(bufs[s]);
    }
    free(c.buf);
    free(c.dt);
    free(c.used);
    return st;
}

typedef struct reasm_ctx {
    job_t *j;
    void **bufs; /* per storage slot: model-layout bytes */
    rf_status_t st;
    rf_err_t *err;
    uint64_t checked;
    uint64_t fnuz; /* tensors compared under the fnuz transform */
} reasm_ctx_t;

static const void *reasm_slot_bytes(void *ctx, int module, int slot)
{
    reasm_ctx_t *c = ctx;
    int first = c->j->st.module_first[module];
    return c->bufs[first + slot];
}

/* The checkpoint header's dtype of tensor t (reassembly gives the file's bytes back: fp32
 * runtime scales narrow exactly to the bf16 / f16 they were widened from). A linear the
 * trainer quantized has no file bytes to give back: its runtime dtype (reasm_done says so). */
static rf_dtype_t reasm_target(void *ctx, int tensor)
{
    reasm_ctx_t *c = ctx;
    const rf_tensor_t *t = &c->j->inv.tensors[tensor];
    if (rf_manifest_trainer_quantizes(&c->j->inv, t, c->j->ck))
        return RF_DTYPE_INVALID;
    const rf_st_entry_t *e = rf_ckpt_find(c->j->ck, t->name);
    return e != NULL ? e->dtype : RF_DTYPE_INVALID;
}

static void reasm_done(void *ctx, int tensor, const void *bytes, size_t nbytes)
{
    reasm_ctx_t *c = ctx;
    job_t *j = c->j;
    const rf_tensor_t *t = &j->inv.tensors[tensor];
    const rf_ref_entry_t *e = rf_ref_find(j->ref, t->name);
    uint8_t d[32];
    char hex[65];
    if (c->st != RF_OK)
        return;
    /* what was reassembled, for the messages: the file's bytes, or a linear the trainer
     * quantized from the checkpoint's unquantized weight (no file bytes to compare) */
    char what[RF_NAME_MAX + 96];
    rf_dtype_t got = reasm_target(c, tensor);
    got = got == RF_DTYPE_INVALID ? t->dtype : got;
    if (rf_manifest_trainer_quantizes(&j->inv, t, j->ck)) {
        const char *dot = strrchr(t->name, '.');
        snprintf(what, sizeof(what),
                 "%s quantized by the trainer from the checkpoint's %s %.*s.weight",
                 rf_dtype_name(got), rf_dtype_name(j->inv.cfg.dtype), (int)(dot - t->name),
                 t->name);
    } else {
        snprintf(what, sizeof(what), "%s as stored", rf_dtype_name(got));
    }
    if (e == NULL) {
        c->st = rf_err_set(c->err, RF_ERR_VERIFY, "%s: no reference entry for %s (reassembled %s)",
                           j->o->reference, t->name, what);
        return;
    }
    if (e->dtype != got) {
        c->st = rf_err_set(c->err, RF_ERR_VERIFY,
                           "%s: %s is %s in the reference, the rollout holds it %s: nothing to "
                           "compare (the reference describes a checkpoint's bytes as stored)",
                           j->o->reference, t->name, rf_dtype_name(e->dtype), what);
        return;
    }
    if (t->dtype == RF_DTYPE_F8_E4M3 && strcmp(j->fmt.ops->name, "fp8-block-fnuz") == 0) {
        /* e4m3fnuz maps 0x80 (-0.0) and 0x00 to 0x00: not injective. Check the file against the
         * reference, then compare with the file's bytes under the same transform. */
        const rf_st_entry_t *se = rf_ckpt_find(j->ck, t->name);
        char *f = se ? malloc(se->nbytes + 1) : NULL;
        uint64_t rows = se ? rf_st_entry_rows(se) : 0, rb = se ? rf_st_entry_row_bytes(se) : 0;
        rf_status_t rs = f ? rf_ckpt_read(j->ck, se, 0, rows, 0, rb, f, rb, c->err) : RF_ERR_IO;
        if (rs == RF_OK) {
            rf_sha256(f, se->nbytes, d);
            if (memcmp(d, e->sha256, 32) != 0)
                rs = RF_ERR_VERIFY;
            for (uint64_t i = 0; i < se->nbytes; i++)
                f[i] = (uint8_t)f[i] == 0x80 ? 0x00 : f[i];
            if (rs == RF_OK && (se->nbytes != nbytes || memcmp(f, bytes, nbytes) != 0))
                rs = RF_ERR_VERIFY;
        }
        free(f);
        if (rs != RF_OK) {
            c->st = rf_err_set(c->err, RF_ERR_VERIFY,
                               "%s: reassembled %s differs from the file's bytes under the fnuz "
                               "transform (0x80 -> 0x00)",
                               j->o->reference, t->name);
            return;
        }
        c->fnuz++;
    } else {
        rf_sha256(bytes, nbytes, d);
        if (memcmp(d, e->sha256, 32) != 0) {
            rf_sha256_hex(d, hex);
            c->st = rf_err_set(c->err, RF_ERR_VERIFY,
                               "%s: reassembled %s (%s) has sha256 %s, the reference says %s",
                               j->o->reference, t->name, what, hex, e->sha256_hex);
            return;
        }
    }
    j->verified[tensor] = 1;
    c->checked++;
}

/* Reassembly from the engine's storage + sha256 against --reference (collective per engine). */
static rf_status_t verify_reference(job_t *j, rf_err_t *err)
{
    reasm_ctx_t c = {.j = j, .err = err};
    rf_status_t st = RF_OK;
    c.bufs = calloc((size_t)j->st.nslots + 1, sizeof(void *));
    if (c.bufs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    for (int m = 0; m < j->plan.nlayers && st == RF_OK; m++) {
        rf_layer_t *L = &j->plan.layers[m];
        int first = j->st.module_first[m];
        for (int s = 0; s < L->nmodel; s++)
            c.bufs[first + s] = malloc(rf_slot_shape_bytes(&L->model[s]) + 1);
        st = rf_plan_read_model(&j->plan, m, &c.bufs[first], err);
    }
    int ok = st == RF_OK, all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, j->engine_comm);
    if (all) {
        rf_reassemble_opts_t ro = {reasm_target};
        st = rf_reassemble_ex(&j->inv, &j->me.rc, j->engine_comm, reasm_slot_bytes, reasm_done,
                              &c, &ro, err);
        j->js.fnuz_tensors = c.fnuz;
        if (st == RF_OK)
            st = c.st;
    } else if (st == RF_OK) {
        st = rf_err_set(err, RF_ERR_VERIFY, "rank %d: an engine peer could not read its storage",
                        j->rank);
    }
    for (int s = 0; s < j->st.nslots; s++)
        free(c.bufs[s]);
    free(c.bufs);
    /* only the engine leader checked hashes; the others verified by contributing */
    if (st == RF_OK && j->me.rc.tp_rank + j->me.rc.dp_rank * j->me.rc.tp != 0)
        memset(j->verified, 0, (size_t)j->inv.ntensors);
    return st;
}

/* The timers and counters the summary keeps O(1) figures of (sum, min, max / total). */
static const struct {
    const char *key;
    size_t off;
} prof_timers[] = {
    {"update_s", offsetof(job_stats_t, update_s)},
    {"verdict_s", offsetof(job_stats_t, verdict_s)},
    {"initialize_s", offsetof(job_stats_t, begin_s)},
    {"receive_s", offsetof(job_stats_t, receive_s)},
    {"wire_s", offsetof(job_stats_t, wire_s)},
    {"unpack_s", offsetof(job_stats_t, unpack_s)},
    {"loader_s", offsetof(job_stats_t, loader_s)},
    {"finalize_s", offsetof(job_stats_t, finalize_s)},
    {"layerwise_s", offsetof(job_stats_t, layerwise_s)},
    {"deferred_s", offsetof(job_stats_t, deferred_s)},
    {"gate_s", offsetof(job_stats_t, gate_s)},
    {"verify_s", offsetof(job_stats_t, verify_s)},
};
static const struct {
    const char *key;
    size_t off;
} prof_counters[] = {
    {"applications", offsetof(job_stats_t, applications)},
    {"declined", offsetof(job_stats_t, declined)},
    {"loader_calls", offsetof(job_stats_t, loader_calls)},
    {"chunks_sent", offsetof(job_stats_t, chunks_sent)},
    {"bytes_sent", offsetof(job_stats_t, bytes_sent)},
    {"chunks_received", offsetof(job_stats_t, chunks_recv)},
    {"bytes_received", offsetof(job_stats_t, bytes_recv)},
    {"bytes_produced", offsetof(job_stats_t, bytes_produced)},
    {"bytes_read", offsetof(job_stats_t, bytes_read)},
    {"bytes_gathered", offsetof(job_stats_t, bytes_gathered)},
};
_Static_assert(sizeof(prof_timers) / sizeof(prof_timers[0]) <= 16, "job_t.prof_t* too small");
_Static_assert(sizeof(prof_counters) / sizeof(prof_counters[0]) <= 16, "job_t.prof_csum too small");
#define PROF_NT (sizeof(prof_timers) / sizeof(prof_timers[0]))
#define PROF_NC (sizeof(prof_counters) / sizeof(prof_counters[0]))

static void profile_path(const job_t *j, char *path, size_t cap, const char *suffix)
{
    snprintf(path, cap, "%s/profile-rank%d.%s", j->o->profile_dir, j->rank, suffix);
}

/* After setup: creates the profile folder and opens this rank's .jsonl for the whole run. A
 * profile that cannot be written warns once and leaves the job alone (it is not its result). */
static void profile_open(job_t *j)
{
    char path[RF_PATH_MAX + 64];
    j->prof_fd = -1;
    if (j->o->profile_dir == NULL || j->o->profile_dir[0] == '\0')
        return;
    /* mkdir -p */
    snprintf(path, sizeof(path), "%s", j->o->profile_dir);
    for (char *q = path + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            mkdir(path, 0755);
            *q = '/';
        }
    mkdir(path, 0755);
    /* a summary left by an earlier run would describe another .jsonl: present only once this
     * run's is complete */
    profile_path(j, path, sizeof(path), "json");
    unlink(path);
    profile_path(j, path, sizeof(path), "jsonl");
    j->prof_cap = 4096; /* one line is about 1.2 KB */
    j->prof_line = malloc(j->prof_cap);
    if (j->prof_line == NULL) {
        rf_warn("rank %d: out of memory for the profile line; no profile", j->rank);
        return;
    }
    j->prof_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (j->prof_fd < 0)
        rf_warn("rank %d: cannot open profile %s: %s; no profile", j->rank, path,
                strerror(errno));
    for (size_t k = 0; k < PROF_NT; k++) {
        j->prof_tmin[k] = INFINITY;
        j->prof_tmax[k] = -INFINITY;
    }
}

/* One line: the object, a newline, one write() on the O_APPEND fd. A failed or short write
 * (disk full) stops the profile, so that a torn line can only be the last one. */
static void profile_append(job_t *j, const json_t *u, uint32_t update)
{
    size_t n = json_dumpb(u, j->prof_line, j->prof_cap - 1, JSON_COMPACT);
    if (n + 1 > j->prof_cap) {
        size_t cap = n + 1 + 1024;
        char *p = realloc(j->prof_line, cap);
        if (p != NULL) {
            j->prof_line = p;
            j->prof_cap = cap;
            n = json_dumpb(u, j->prof_line, j->prof_cap - 1, JSON_COMPACT);
        }
    }
    if (n == 0 || n + 1 > j->prof_cap) {
        rf_warn("rank %d: profile line of update %u not written (%zu bytes); profile stopped",
                j->rank, update, n);
        close(j->prof_fd);
        j->prof_fd = -1;
        return;
    }
    j->prof_line[n++] = '\n';
    ssize_t w;
    do
        w = write(j->prof_fd, j->prof_line, n);
    while (w < 0 && errno == EINTR);
    if (w != (ssize_t)n) {
        rf_warn("rank %d: profile %s/profile-rank%d.jsonl: wrote %zd of %zu bytes of update %u "
                "(%s); profile stopped", j->rank, j->o->profile_dir, j->rank, w, n, update,
                w < 0 ? strerror(errno) : "short write");
        close(j->prof_fd);
        j->prof_fd = -1;
        return;
    }
    const job_stats_t *s = &j->js;
    j->prof_lines++;
    j->prof_committed += s->status == RF_OK;
    for (size_t k = 0; k < PROF_NT; k++) {
        double t = *(const double *)((const char *)s + prof_timers[k].off);
        j->prof_tsum[k] += t;
        j->prof_tmin[k] = t < j->prof_tmin[k] ? t : j->prof_tmin[k];
        j->prof_tmax[k] = t > j->prof_tmax[k] ? t : j->prof_tmax[k];
    }
    for (size_t k = 0; k < PROF_NC; k++)
        j->prof_csum[k] += *(const uint64_t *)((const char *)s + prof_counters[k].off);
    j->prof_inflight_max = s->max_inflight > j->prof_inflight_max ? s->max_inflight
                                                                  : j->prof_inflight_max;
}

/* Teardown: closes the .jsonl and writes the run's summary through a temporary file and a
 * rename(), so that profile-rank<R>.json is either absent or whole. */
static void profile_close(job_t *j)
{
    char path[RF_PATH_MAX + 64], tmp[RF_PATH_MAX + 64];
    free(j->prof_line);
    j->prof_line = NULL;
    if (j->prof_fd < 0)
        return;
    close(j->prof_fd);
    j->prof_fd = -1;
    char hash[24], lines[64];
    snprintf(hash, sizeof(hash), "%016" PRIx64, rf_topology_hash(&j->topo));
    snprintf(lines, sizeof(lines), "profile-rank%d.jsonl", j->rank);
    json_t *timers = json_object(), *counters = json_object();
    for (size_t k = 0; k < PROF_NT && j->prof_lines > 0; k++)
        json_object_set_new(timers, prof_timers[k].key,
                            json_pack("{s:f, s:f, s:f}", "sum", j->prof_tsum[k], "min",
                                      j->prof_tmin[k], "max", j->prof_tmax[k]));
    for (size_t k = 0; k < PROF_NC; k++)
        json_object_set_new(counters, prof_counters[k].key,
                            json_integer((json_int_t)j->prof_csum[k]));
    json_t *root = json_pack(
        "{s:s, s:i, s:i, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:o, s:o, s:i}", "format",
        "refit-profile", "version", 2, "rank", j->rank, "role",
        is_rollout(j) ? "rollout" : "trainer", "topology", j->topo.name, "topology_hash", hash,
        "lines", lines, "updates", (json_int_t)j->prof_lines, "committed",
        (json_int_t)j->prof_committed, "failed", (json_int_t)(j->prof_lines - j->prof_committed),
        "timers", timers, "counters", counters, "max_inflight_chunks", j->prof_inflight_max);
    profile_path(j, path, sizeof(path), "json");
    profile_path(j, tmp, sizeof(tmp), "json.tmp");
    if (root == NULL || json_dump_file(root, tmp, JSON_INDENT(1)) != 0 || rename(tmp, path) != 0) {
        rf_warn("rank %d: cannot write the profile summary %s: %s", j->rank, path,
                strerror(errno));
        unlink(tmp);
    }
    json_decref(root);
}

static void write_profile(job_t *j, uint32_t update)
{
    if (j->prof_fd < 0)
        return;
    const job_stats_t *s = &j->js;
    json_t *u = json_pack(
        "{s:i, s:i, s:i, s:s, s:s, s:f, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}, "
        "s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i}}",
        "v", 2, "rank", j->rank,
        "update", (int)update, "status", rf_status_name((rf_status_t)s->status), "source",
        j->source, "update_s", s->update_s, "receiver", "initialize_s", s->begin_s, "receive_s",
        s->receive_s, "wire_s", s->wire_s, "unpack_s", s->unpack_s, "loader_s", s->loader_s,
        "finalize_s", s->finalize_s, "layerwise_s", s->layerwise_s, "deferred_s", s->deferred_s,
        "gate_s", s->gate_s, "verify_s", s->verify_s, "counters", "layers_direct",
        (json_int_t)s->layers[0], "layers_runtime_view", (json_int_t)s->layers[1],
        "layers_layerwise", (json_int_t)s->layers[2], "applications",
        (json_int_t)s->applications, "declined", (json_int_t)s->declined, "loader_calls",
        (json_int_t)s->loader_calls, "bookkeeping_probes", (json_int_t)s->bookkeeping_probes,
        "chunks_sent", (json_int_t)s->chunks_sent, "bytes_sent", (json_int_t)s->bytes_sent,
        "chunks_received", (json_int_t)s->chunks_recv, "bytes_received",
        (json_int_t)s->bytes_recv, "bytes_produced", (json_int_t)s->bytes_produced,
        "bytes_read", (json_int_t)s->bytes_read, "header_bytes_read",
        (json_int_t)s->header_bytes_read, "bytes_gathered", (json_int_t)s->bytes_gathered,
        "max_inflight_chunks", s->max_inflight);
    if (u != NULL) {
        json_object_set_new(u, "verdict_s", json_real(s->verdict_s));
        if (is_rollout(j))
            json_object_set_new(u, "paused", json_boolean(s->paused));
        if (s->storage_unchanged >= 0)
            json_object_set_new(u, "storage_unchanged", json_boolean(s->storage_unchanged));
        json_object_set_new(u, "integrity", json_boolean(j->integrity));
        if (s->dev.timeline)
            json_object_set_new(u, "device_timeline",
                                json_pack("{s:I, s:I, s:f, s:f, s:f, s:f, s:f}", "spans",
                                          (json_int_t)s->dev.spans, "copy_bytes",
                                          (json_int_t)s->dev.copy_bytes, "copy_ms", s->dev.copy_ms,
                                          "layerwise_ms", s->dev.layerwise_ms, "other_ms",
                                          s->dev.other_ms, "span_ms", s->dev.span_ms, "idle_ms",
                                          s->dev.idle_ms));
        if (j->ipc && is_rollout(j)) {
            json_object_set_new(u, "ipc_bytes_in_place", json_integer((json_int_t)s->ipc_in_place));
            json_object_set_new(u, "ipc_bytes_staged", json_integer((json_int_t)s->ipc_staged));
        }
        if (j->ipc)
            json_object_set_new(u, "ipc_backend",
                                json_string(rf_xfer_ipc_backend(j->xfer)->name));
        if (j->ipc && !is_rollout(j))
            json_object_set_new(u, "resident_s", json_real(s->resident_s));
        if (j->ipc_dev && !is_rollout(j)) {
            /* production stays on the host (the trainer's produce time); this is the
             * copy of the produced shards into the device arena */
            json_object_set_new(u, "ipc_h2d_s", json_real(s->ipc_h2d_s));
            json_object_set_new(u, "ipc_h2d_bytes", json_integer((json_int_t)s->ipc_h2d_bytes));
            json_object_set_new(u, "device_launches", json_integer((json_int_t)s->batch_launches));
            json_object_set_new(u, "device_row_copies", json_integer((json_int_t)s->batch_rows));
        }
    }
    if (u != NULL)
        profile_append(j, u, update);
    json_decref(u);
}

static const char *human_bytes(double b, char *buf, size_t cap)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (b >= 1000.0 && i < 4) {
        b /= 1000.0;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}

/* The table's integrity line: on or off (and what turned it off), what the checksum covers
 * on this transport, and the slower path it takes on GPUs until the checksum runs there. */
static void print_integrity(const job_t *j)
{
    if (!j->integrity) {
        printf("  %-10s off (%s): chunks carry no checksum; a corrupted byte is found only by "
               "the oracle\n", "integrity", j->integrity_off);
        return;
    }
    if (j->ipc) {
        /* in-place reads copy straight from the pair's weights arena: no wire, no staging
         * buffer, nothing in between to corrupt or to check */
        printf("  %-10s on: XXH3-64 over every SEQ message and its staged bytes, checked before "
               "unpacking; bytes read in place from the pair's arena are not checksummed%s\n",
               "integrity", j->ipc_dev ? "; staged chunks copied d2h to be hashed" : "");
        return;
    }
    printf("  %-10s on: XXH3-64 trailer on every chunk, checked before unpacking%s%s\n",
           "integrity",
           j->nccl ? "; receivers copy each whole chunk d2h to check it" : "",
           j->integrity_host_pack ? "; trainers pack on the host to hash it "
                                    "(transfer.integrity: false packs device to device)"
                                  : "");
}

static void print_table(job_t *j, uint32_t update, const job_stats_t *all,
                        const rf_gate_verdict_t *v, uint64_t verified)
{
    char b1[32], b2[32], b3[64], b4[64];
    uint64_t produced = 0, read = 0, gathered = 0, elems = 0, mism = 0, dtot = 0, dchg = 0;
    uint64_t deq = 0, fnuz = 0, qtot = 0, qchg = 0;
    int crit = -1, inflight = 0;
    double crit_s = 0, upd = 0;
    for (int r = 0; r < j->size; r++) {
        const job_stats_t *s = &all[r];
        produced += s->bytes_produced;
        read += s->bytes_read;
        gathered += s->bytes_gathered;
        elems += s->verify_elems;
        mism += s->verify_mismatch;
        dtot += s->diff_elems;
        dchg += s->diff_changed;
        qtot += s->qdiff_elems;
        qchg += s->qdiff_changed;
        deq += s->dequant_checked;
        fnuz = s->fnuz_tensors > fnuz ? s->fnuz_tensors : fnuz;
        if (s->max_inflight > inflight)
            inflight = s->max_inflight;
        if (s->update_s > upd)
            upd = s->update_s;
        double recv_total = s->begin_s + s->receive_s + s->finalize_s;
        if (s->role == RF_ROLE_ROLLOUT && recv_total >= crit_s) {
            crit_s = recv_total;
            crit = r;
        }
    }
    const job_stats_t *c = crit >= 0 ? &all[crit] : &all[0];
    const job_stats_t *r0 = &all[j->T]; /* first rollout rank */
    /* an update the gate committed but the oracle failed is FAILED on its own line too, with
     * why: its bytes are served and wrong (docs/faults.md, "Failure classes") */
    const job_stats_t *bad = NULL;
    for (int r = 0; r < j->size && bad == NULL && v->committed; r++)
        if (all[r].verify_status != RF_OK)
            bad = &all[r];
    printf("refit update %u/%d: %s  source %s  topology %s (%d trainer + %d rollout ranks)%s%s%s\n",
           update, j->o->steps, v->committed && bad == NULL ? "COMMITTED" : "FAILED", j->source,
           j->topo.name, j->T, j->R, bad ? " (committed by the gate; oracle: " : "",
           bad ? bad->verify_msg : "", bad ? ")" : "");
    printf("  %-10s %s in %zu chunks of %s, %d tensors, manifest %016" PRIx64 "\n", "payload",
           human_bytes((double)j->man.payload_bytes, b1, sizeof(b1)), j->cplan->n_chunks,
           human_bytes((double)j->topo.chunk_bytes, b2, sizeof(b2)), j->man.n, j->man.digest);
    printf("  %-10s DIRECT %" PRIu64 "  RUNTIME_VIEW %" PRIu64 "  LAYERWISE %" PRIu64
           "  (per rollout rank; applications %" PRIu64 ", declined %" PRIu64
           ", loader calls %" PRIu64 ", probes %" PRIu64 ")\n",
           "layers", r0->layers[0], r0->layers[1], r0->layers[2], r0->applications, r0->declined,
           r0->loader_calls, r0->bookkeeping_probes);
    printf("  %-10s update %.3f s | receiver critical %.3f s (rank %d: init %.3f + receive %.3f "
           "[wire %.3f, unpack %.3f, loaders %.3f] + finalize %.3f) | %.2f GB/s\n",
           "time", upd, crit_s, crit, c->begin_s, c->receive_s, c->wire_s, c->unpack_s,
           c->loader_s, c->finalize_s,
           crit_s > 0 ? (double)j->man.payload_bytes / crit_s / 1e9 : 0.0);
    printf("  %-10s produced %s, read %s, gathered %s%s%s; max %d chunks in flight\n",
           "trainer", human_bytes((double)produced, b1, sizeof(b1)),
           human_bytes((double)read, b2, sizeof(b2)), human_bytes((double)gathered, b3, sizeof(b3)),
           j->wire ? " over the " : "", j->wire ? j->wire : "", inflight);
    if (j->fence && !j->ipc) { /* nccl trainers with resident weights */
        double res = 0;
        for (int r = 0; r < j->T; r++)
            res = all[r].resident_s > res ? all[r].resident_s : res;
        printf("  %-10s trainer weights resident on the GPU (written %.3f s before the update "
               "began), chunks packed device to device\n", "device", res);
    }
    if (j->ipc) {
        uint64_t inpl = 0, stg = 0;
        for (int r = 0; r < j->size; r++) {
            inpl += all[r].ipc_in_place;
            stg += all[r].ipc_staged;
        }
        printf("  %-10s rollout ranks read %s in place from their pairs' arenas, %s from "
               "staging slots\n",
               "ipc", human_bytes((double)inpl, b1, sizeof(b1)),
               human_bytes((double)stg, b2, sizeof(b2)));
        double res = 0;
        for (int r = 0; r < j->T; r++)
            res = all[r].resident_s > res ? all[r].resident_s : res;
        if (!j->ipc_dev) {
            printf("  %-10s trainer weights written into the shared-memory arenas %.3f s before "
                   "the update began\n", "host", res);
        } else {
            printf("  %-10s trainer weights resident on the GPU (written %.3f s before the "
                   "update began); rank %d: %" PRIu64 " row copies in %" PRIu64
                   " device launches\n",
                   "device", res, j->T, r0->batch_rows, r0->batch_launches);
        }
    }
    print_integrity(j);
    if (r0->dev.timeline) { /* REFIT_DEVICE_TIMELINE=1: the first rollout rank's GPU time */
        double gbs = r0->dev.copy_ms > 0 ? (double)r0->dev.copy_bytes / r0->dev.copy_ms / 1e6 : 0;
        printf("  %-10s rank %d GPU: row copies of %s in %.3f ms (%.1f GB/s), LAYERWISE %.3f ms, "
               "other %.3f ms; first to last %.3f ms, idle between %.3f ms (%" PRIu64 " spans)\n",
               "timeline", j->T, human_bytes((double)r0->dev.copy_bytes, b1, sizeof(b1)),
               r0->dev.copy_ms, gbs, r0->dev.layerwise_ms, r0->dev.other_ms, r0->dev.span_ms,
               r0->dev.idle_ms, r0->dev.spans);
    }
    double verdict_s = 0;
    int unchanged = -1, paused = 0, rollouts = 0, rebuilt = 0;
    for (int r = 0; r < j->size; r++) {
        const job_stats_t *s = &all[r];
        if (s->verdict_s > verdict_s)
            verdict_s = s->verdict_s;
        if (s->role != RF_ROLE_ROLLOUT)
            continue;
        rollouts++;
        paused += s->paused;
        rebuilt += s->rebuilds > 0;
        if (s->storage_unchanged >= 0)
            unchanged = (unchanged < 0 ? 1 : unchanged) && s->storage_unchanged;
    }
    printf("  %-10s verdict after %.3f s (slowest rank, from update begin); rollout paused: %s"
           "%s%s\n",
           "gate", verdict_s, paused == 0 ? "no" : (paused == rollouts ? "yes" : "partly"),
           unchanged < 0 ? "" : "; storage unchanged: ",
           unchanged < 0 ? "" : (unchanged ? "yes" : "no"));
    if (rebuilt)
        printf("  %-10s rebuilt before this update on %d rollout rank(s)\n", "plan", rebuilt);
    if (!v->committed)
        printf("  %-10s rank %d: %s: %s\n", "verdict", v->rank, rf_status_name(v->code),
               v->reason);
    else if (all[j->T].verify_skipped)
        printf("  %-10s not verified (--verify %s)\n", "verify",
               j->o->verify_none ? "none: no oracle in this run"
                                 : "last: the oracle checks the last update");
    else if (j->o->reference && strcmp(j->source, "checkpoint") == 0)
        printf("  %-10s reassembly + sha256 vs --reference: %" PRIu64
               " tensors equal%s%s%s\n",
               "verify", verified,
               fnuz ? (snprintf(b3, sizeof(b3), " (%" PRIu64 " fp8 under 0x80->0x00)", fnuz), b3)
                    : "",
               dtot ? "; changed " : "",
               dtot ? (snprintf(b4, sizeof(b4), "%.2f%% of %" PRIu64 " elements",
                                100.0 * (double)dchg / (double)dtot, dtot),
                       b4)
                    : "");
    else
        printf("  %-10s scalar reference loader: %" PRIu64 " tensors verified, %" PRIu64
               " elements, %" PRIu64 " mismatches%s%s%s\n",
               "verify", verified, elems, mism,
               deq ? (snprintf(b3, sizeof(b3), ", dequant %" PRIu64 " modules", deq), b3) : "",
               dtot ? "; changed " : "",
               dtot ? (snprintf(b4, sizeof(b4), "%.2f%% of %" PRIu64 " elements",
                                100.0 * (double)dchg / (double)dtot, dtot),
                       b4)
                    : "");
    if (v->committed && qtot)
        printf("  %-10s quantized tensors: changed %.2f%% of %" PRIu64 " elements (packed int4 "
               "per byte)\n",
               "", 100.0 * (double)qchg / (double)qtot, qtot);
    if (v->committed && j->o->cold_check) {
        uint64_t cold = 0;
        for (int r = 0; r < j->size; r++)
            cold += all[r].cold_slots;
        printf("  %-10s cold load == load then refit: %" PRIu64 " slots byte-identical\n", "cold",
               cold);
    }
    fflush(stdout);
}

static void cold_free(job_t *j)
{
    for (size_t i = 0; i < j->ncold; i++)
        free(j->cold[i].payload);
    j->ncold = 0;
}

/*
 * The cold-load oracle (DESIGN.md section 12): replays this update's chunks into freshly
 * allocated runtime storage with a fresh plan (same format owner and policy) and requires every
 * slot to be byte-identical to the live storage, which went through the previous updates.
 */
static rf_status_t cold_compare(job_t *j, uint32_t v, rf_err_t *err)
{
    rf_storage_t cst;
    rf_plan_t cp;
    rf_status_t st;
    rf_format_t fmt = j->fmt;
    RF_CHECK(rf_storage_init(&cst, j->inv.nmodules, err));
    st = rf_plan_alloc_storage(&j->inv, &j->me.rc, &fmt, &cst, false, err);
    if (st == RF_OK)
        st = job_plan_build(j, &cp, &cst, &fmt, err);
    if (st != RF_OK) {
        rf_storage_free(&cst);
        return st;
    }
    for (int i = 0; i < j->man.n && st == RF_OK; i++)
        st = rf_plan_set_source_dtype(&cp, j->man.entries[i].tensor, j->man.entries[i].dtype, err);
    if (st == RF_OK)
        st = rf_plan_begin(&cp, v, err);
    for (size_t c = 0; c < j->ncold && st == RF_OK; c++) {
        const rf_chunk_t *ch = j->cold[c].chunk;
        const rf_chunk_plan_t *pl = j->p2p ? j->p2p_s.recv[j->rank - j->T].plan : j->cplan;
        st = rf_plan_stage(&cp, j->cold[c].payload, ch->payload_bytes, err);
        if (st == RF_OK)
            st = apply_pieces(j, &cp, ch, &pl->pieces[ch->piece_begin], j->cold[c].payload, err);
    }
    if (st == RF_OK)
        st = rf_plan_finalize(&cp, err);
    for (int s = 0; s < j->st.nslots && st == RF_OK; s++) {
        uint64_t b = rf_signature_bytes(&j->st.slots[s].sig);
        const void *live = j->st.slots[s].sig.data, *cold = cst.slots[s].sig.data;
        char *hl = NULL, *hc = NULL;
        if (b == rf_signature_bytes(&cst.slots[s].sig) && rf_storage_on_device(&j->st)) {
            /* both storages on the device: compare host copies */
            hl = malloc(b + 1);
            hc = malloc(b + 1);
            if (hl == NULL || hc == NULL)
                st = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
            if (st == RF_OK)
                st = rf_storage_read(&j->st, hl, live, (size_t)b, err);
            if (st == RF_OK)
                st = rf_storage_read(&cst, hc, cold, (size_t)b, err);
            live = hl;
            cold = hc;
        }
        bool differ = st == RF_OK &&
                      (b != rf_signature_bytes(&cst.slots[s].sig) || memcmp(live, cold, b) != 0);
        free(hl);
        free(hc);
        if (differ)
            st = rf_err_set(err, RF_ERR_VERIFY,
                            "rank %d: update %u: slot %s differs between a cold load and the "
                            "refit of the live storage",
                            j->rank, v, j->st.slots[s].name);
    }
    if (st == RF_OK)
        j->js.cold_slots = (uint64_t)j->st.nslots;
    rf_plan_free(&cp);
    rf_storage_free(&cst);
    return st;
}

static rf_status_t fault_bad_weight_shape(job_t *j, uint32_t v, rf_err_t *err);

/* Trainer of a colocated pair: writes update v into its weights arena, writable only
 * meanwhile. A device arena (CUDA IPC): the generator and quantizers on the device; a
 * checkpoint update is read into the pinned mirror and copied h2d. A host arena (POSIX shared
 * memory): produced in place. */
static rf_status_t produce_arena(job_t *j, uint32_t v, bool from_ckpt, rf_err_t *err)
{
    double t0 = rf_time_now();
    rf_status_t st = rf_xfer_ipc_protect(j->xfer, 0, err);
    if (st == RF_OK && !j->ipc_dev) { /* host arenas: POSIX shared memory, written in place */
        st = rf_trainer_produce(&j->tr, v, from_ckpt ? j->ck : NULL, err);
    } else if (st == RF_OK && !from_ckpt) {
        st = rf_trainer_produce_device(&j->tr, v, j->accel, j->ipc_wdev,
                                       j->ipc_mirror ? j->ipc_mirror : j->ipc_wdev, err);
        if (st == RF_OK && j->ipc_mirror != NULL) {
            /* the host gathers and packs staged pieces from the mirror: same bytes there */
            st = j->accel->ops->copy(j->accel, j->ipc_mirror, j->ipc_wdev, (size_t)j->ipc_wbytes,
                                     RF_COPY_D2H, NULL);
            if (st == RF_OK)
                st = rf_accel_sync(j->accel);
            if (st != RF_OK)
                rf_err_set(err, st, "trainer rank %d: copying its ipc arena back into its "
                           "%" PRIu64 "-byte host mirror failed", j->rank, j->ipc_wbytes);
        }
    } else if (st == RF_OK) {
        st = rf_trainer_produce(&j->tr, v, j->ck, err);
        double th = rf_time_now();
        if (st == RF_OK)
            st = j->accel->ops->copy(j->accel, j->ipc_wdev, j->ipc_mirror, (size_t)j->ipc_wbytes,
                                     RF_COPY_H2D, NULL);
        if (st == RF_OK)
            st = rf_accel_sync(j->accel);
        if (st != RF_OK && err->status == RF_OK)
            rf_err_set(err, st, "trainer rank %d: copying its %" PRIu64 "-byte shard mirror "
                       "into its ipc arena failed", j->rank, j->ipc_wbytes);
        j->js.ipc_h2d_s = rf_time_now() - th;
        j->js.ipc_h2d_bytes = j->ipc_wbytes;
    }
    if (st == RF_OK)
        st = fault_bad_weight_shape(j, v, err);
    if (st == RF_OK)
        st = rf_xfer_ipc_protect(j->xfer, 1, err);
    j->js.resident_s = rf_time_now() - t0;
    return st;
}

/* The bad-weight-shape fault: after production, this trainer's first wna16 weight_shape
 * carries N + 1 (in its host buffers, its device arena and its pinned mirror alike), so the
 * rollout ranks that load it must refuse the update naming the tensor. */
static rf_status_t fault_bad_weight_shape(job_t *j, uint32_t v, rf_err_t *err)
{
    if (!fault_here(j, v, RF_FAULT_BAD_WEIGHT_SHAPE))
        return RF_OK;
    for (int i = 0; i < j->man.n; i++) {
        const rf_tensor_t *t = &j->inv.tensors[j->man.entries[i].tensor];
        if (t->param != RF_PARAM_WEIGHT_SHAPE || !j->tr.has[i] || j->tr.buf[i] == NULL)
            continue;
        size_t es = rf_dtype_size(j->man.entries[i].dtype);
        unsigned char b[8];
        rf_status_t st = RF_OK;
        char *dev = NULL;
        if (j->ipc_dev) { /* tr.buf points into the mirror, or into the device arena itself */
            const char *hb = j->ipc_mirror ? (const char *)j->ipc_mirror
                                           : (const char *)j->ipc_wdev;
            dev = (char *)j->ipc_wdev + ((const char *)j->tr.buf[i] - hb);
            st = j->accel->ops->copy(j->accel, b, dev, es, RF_COPY_D2H, NULL);
            if (st == RF_OK)
                st = rf_accel_sync(j->accel);
        } else {
            memcpy(b, j->tr.buf[i], es);
        }
        if (es == 4) {
            int32_t n;
            memcpy(&n, b, 4);
            n++;
            memcpy(b, &n, 4);
        } else {
            int64_t n;
            memcpy(&n, b, 8);
            n++;
            memcpy(b, &n, 8);
        }
        if (st == RF_OK && dev != NULL) {
            st = j->accel->ops->copy(j->accel, dev, b, es, RF_COPY_H2D, NULL);
            if (st == RF_OK)
                st = rf_accel_sync(j->accel);
        }
        if (st != RF_OK)
            return rf_err_set(err, st, "trainer rank %d: fault bad-weight-shape: device copy "
                              "failed", j->rank);
        if (!j->ipc_dev || j->ipc_mirror != NULL)
            memcpy(j->tr.buf[i], b, es);
        rf_warn("fault: trainer rank %d: %s carries N + 1 in update %u", j->rank,
                j->man.entries[i].name, v);
        return RF_OK;
    }
    return rf_err_set(err, RF_ERR_INVALID, "trainer rank %d: fault bad-weight-shape: it holds "
                      "no weight_shape tensor", j->rank);
}

/* Colocated pairs (ipc, device or host arenas): the update begins on every rank once every
 * trainer has written its weights (the end of the training step), so no rank's update time
 * or deadline counts the production. Bounded by timeout_s: a rank that never arrives (it
 * died) stops the job with MPI_Abort rather than hanging it. */
static void update_fence(job_t *j, uint32_t v)
{
    MPI_Request req;
    int done = 0;
    double limit = rf_time_now() + (j->topo.timeout_s > 0 ? j->topo.timeout_s : 300.0);
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done && rf_time_now() > limit) {
            rf_error("rank %d: update %u: not every rank reached the start of the update within "
                     "%.0f s (transfer.timeout_s): aborting the job", j->rank, v,
                     j->topo.timeout_s);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (!done)
            sched_yield();
    }
}

/*
 * Rank 0, after a committed update checked against --reference: every reference entry must
 * have been verified or be skipped on purpose (layers / experts cut by model.overrides, a
 * tied lm_head.weight found equal to the embedding at startup); any other entry fails the
 * update naming it, so a reference is never "verified" with a tensor nobody looked at.
 */
static int ref_account(job_t *j, uint32_t v, const uint8_t *vsum, uint64_t *verified_p,
                       char *fail, size_t cap)
{
    size_t n = rf_ref_count(j->ref);
    uint64_t k = 0;
    int cut = 0, tied = 0, listed = 0, unchecked = 0;
    const char *first_cut = NULL, *first_listed = NULL, *first_bad = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = rf_ref_entry(j->ref, i)->name;
        int ti = rf_inventory_find(&j->inv, name);
        if (ti >= 0 && vsum[ti]) {
            k++;
            continue;
        }
        if (ti < 0) {
            rf_unknown_t u = rf_inventory_classify_unknown(&j->inv, name);
            if (u == RF_UNKNOWN_CUT) {
                if (cut++ == 0)
                    first_cut = name;
                continue;
            }
            if (u == RF_UNKNOWN_TIED && j->man.tied_checked) {
                tied++;
                continue;
            }
            if (u == RF_UNKNOWN_SKIP) { /* the documented skip list (inv_freq, mtp.*) */
                if (listed++ == 0)
                    first_listed = name;
                continue;
            }
        }
        if (unchecked++ == 0)
            first_bad = name;
    }
    *verified_p = k;
    j->ref_total = n;
    j->ref_skipped = cut + tied + listed;
    j->ref_note[0] = '\0';
    /* listed, so a deliberate skip reads as one and nothing is skipped silently */
    if (j->ref_skipped > 0) {
        /* one kind: "9 skipped: cut by ..."; several: each with its own count */
        bool several = (cut > 0) + (tied > 0) + (listed > 0) > 1;
        char part[3][160];
        int np = 0;
        if (cut)
            snprintf(part[np++], sizeof(part[0]), "%.0d%scut by model.overrides (first %.96s)",
                     several ? cut : 0, several ? " " : "", first_cut);
        if (tied)
            snprintf(part[np++], sizeof(part[0]),
                     "lm_head.weight, the tied copy checked equal to model.embed_tokens.weight "
                     "at startup");
        if (listed)
            snprintf(part[np++], sizeof(part[0]), "%.0d%son the skip list (first %.96s)",
                     several ? listed : 0, several ? " " : "", first_listed);
        snprintf(j->ref_note, sizeof(j->ref_note), "%d skipped: ", j->ref_skipped);
        for (int i = 0; i < np; i++) { /* appended, cut at the note's size */
            size_t o = strlen(j->ref_note), room = sizeof(j->ref_note) - 1 - o;
            const char *add[2] = {i > 0 ? "; " : "", part[i]};
            for (int a = 0; a < 2; a++) {
                size_t l = strlen(add[a]) < room ? strlen(add[a]) : room;
                memcpy(j->ref_note + o, add[a], l);
                o += l;
                room -= l;
            }
            j->ref_note[o] = '\0';
        }
    }
    if (unchecked == 0)
        return 0;
    char more[32] = "";
    if (unchecked > 1)
        snprintf(more, sizeof(more), " (and %d more)", unchecked - 1);
    snprintf(fail, cap,
             "update %u: verification: %s: verified %" PRIu64 " of %zu tensors: %s was not "
             "checked%s",
             v, j->o->reference, k, n, first_bad, more);
    return 1;
}

static int run_update(job_t *j, uint32_t v, uint64_t *verified_p, char *fail, size_t cap)
{
    rf_err_t err, e2;
    rf_status_t st = RF_OK;
    rf_gate_record_t rec;
    rf_gate_verdict_t verdict;
    bool from_ckpt = j->ck != NULL && (v % 2 == 1);
    double t_start = rf_time_now(), t;
    rf_err_clear(&err);
    rf_err_clear(&e2);
    memset(&j->js, 0, sizeof(j->js));
    memset(&verdict, 0, sizeof(verdict));
    j->js.role = (int)j->me.role;
    j->source = from_ckpt ? "checkpoint" : "generator";

    bool fault_update = j->fault.kind != RF_FAULT_NONE && (uint32_t)j->fault.update == v;
    uint64_t hash_before = 0;
    j->js.storage_unchanged = -1;
    j->update = v;
    if (fault_here(j, v, RF_FAULT_MOVE_STORAGE_BETWEEN)) {
        /* an engine re-allocated a parameter between updates: the plan must follow */
        const char *name = j->st.slots[0].name;
        if (rf_storage_move_slot(&j->st, name, &e2) == RF_OK)
            rf_warn("fault: rank %d moved slot %s before update %u", j->rank, name, v);
        rf_err_clear(&e2);
    }
    if (is_rollout(j) && fault_update)
        hash_before = storage_hash(j); /* outside the timed path, like the snapshot */
    /* colocated GPU pair: the training step writes the trainer's resident weights before the
     * update begins; a failure is reported at the begin agreement */
    rf_status_t pre = RF_OK;
    rf_err_t pre_err;
    rf_err_clear(&pre_err);
    if (!is_rollout(j) && j->ipc)
        pre = produce_arena(j, v, from_ckpt, &pre_err);
    if (j->nccl_resident)
        pre = produce_nccl_resident(j, v, &pre_err);
    /* the diff rule compares with the previous update only when it committed: after a FAILED
     * one the storage holds whatever the failure left, and the source may repeat */
    bool verify_this =
        !j->o->verify_none && (!j->o->verify_last || v == (uint32_t)j->o->steps);
    bool diff = v > 1 && j->last_committed == v - 1 && verify_this;
    if (is_rollout(j) && diff)
        snapshot(j); /* the oracle's copy for the diff rule, outside the timed path */
    if (j->ipc || j->fence)
        update_fence(j, v); /* every rank starts the update when the training step ended */
    double t_begin = rf_time_now(); /* update begin, for the time to the verdict */
    rf_ctl_begin(j->ctl, v, &e2);
    rf_xfer_begin(j->xfer, v);
    if (!is_rollout(j))
        rf_trainer_begin(&j->tr);
    double deadline = rf_deadline_for_update(j->topo.timeout_s, j->topo.slack_s,
                                             j->man.payload_bytes, j->topo.min_bandwidth);
    j->deadline = deadline;
    /* nccl: (re)create the communicators when missing (first update, after a FAILED one),
     * under this update's deadline and ABORT; a failure fails the begin agreement */
    rf_status_t nst = RF_OK;
    rf_err_t nerr;
    rf_err_clear(&nerr);
    if (j->nccl)
        nst = rf_xfer_nccl_begin(j->xfer, deadline, &nerr);
    t = rf_time_now();
    if (is_rollout(j)) {
        uint64_t rebuilds = j->plan.stats.rebuilds;
        const char *moved = NULL;
        for (int i = 0; i < j->plan.nsigs && i < j->st.nslots && moved == NULL; i++)
            if (!rf_signature_equal(&j->plan.sigs[i], &j->st.slots[i].sig))
                moved = j->st.slots[i].name;
        j->paused = true; /* not served until the gate says COMMITTED */
        st = rf_plan_begin(&j->plan, v, &err);
        j->js.rebuilds = j->plan.stats.rebuilds - rebuilds;
        if (j->js.rebuilds) {
            printf("refit: rank %d: plan rebuilt before update %u (%s%s)\n", j->rank, v,
                   moved ? moved : "format owner changed its mapping",
                   moved ? " changed its signature" : "");
            fflush(stdout);
        }
    } else {
        st = check_source(j, from_ckpt, v, &err);
        if (st == RF_OK && pre != RF_OK) {
            st = pre;
            rf_err_set(&err, pre, "%s", pre_err.msg);
        }
    }
    if (st == RF_OK && nst != RF_OK)
        st = rf_err_set(&err, nst, "%s", nerr.msg);
    rf_err_clear(&e2);
    rf_status_t ag = rf_ctl_agree(j->ctl, v, st, err.msg, deadline, &e2);
    if (st == RF_OK && ag != RF_OK) {
        st = ag;
        rf_err_set(&err, ag, "%s", e2.msg);
    }
    j->js.begin_s = rf_time_now() - t;

    if (st == RF_OK && !is_rollout(j)) {
        /* ipc: the weights arena was written before the update began (produce_arena) and is
         * read-only until the verdict */
        if (!j->ipc && !j->nccl_resident)
            st = rf_trainer_produce(&j->tr, v, from_ckpt ? j->ck : NULL, &err);
        if (st == RF_OK && !j->ipc)
            st = fault_bad_weight_shape(j, v, &err);
        if (st == RF_OK && j->ipc)
            st = rf_xfer_ipc_ready(j->xfer, v, j->pair_of[j->rank], &err);
        if (st != RF_OK)
            rf_ctl_abort(j->ctl, st, err.msg);
    }
    if (st == RF_OK) {
        rf_xfer_config_t cfg = {v,         j->cplan,           j->senders,
                                j->receivers, j->R,          deadline,
                                RF_XFER_FAULT_NONE, j->integrity, j->items,
                                j->ipc ? &j->ipc_cfg : NULL, j->nccl_resident};
        if (fault_here(j, v, RF_FAULT_DROP_CHUNK))
            cfg.fault.drop_seq = j->fault.seq;
        if (fault_here(j, v, RF_FAULT_DUPLICATE_CHUNK))
            cfg.fault.dup_seq = j->fault.seq;
        if (fault_here(j, v, RF_FAULT_CORRUPT_CHUNK))
            cfg.fault.corrupt_seq = j->fault.seq;
        if (!is_rollout(j))
            j->tr.fault_skip_seq = fault_here(j, v, RF_FAULT_GATHER_DROP) ? j->fault.seq : -1;
        t = rf_time_now();
        if (j->p2p) {
            /* p2p: this rank's own plan (rollout) or one plan per receiver (trainer) */
            cfg.stage_senders = j->p2p_s.senders;
            if (is_rollout(j)) {
                const rf_p2p_recv_t *me = &j->p2p_s.recv[j->rank - j->T];
                cfg.plan = me->plan;
                cfg.items = me->items;
                cfg.receivers = &me->rank;
                cfg.n_receivers = 1;
            }
        }
        if (is_rollout(j)) {
            st = rf_xfer_recv(j->xfer, &cfg, j->nccl ? job_unpack_nccl : job_unpack, j, &err);
            j->js.receive_s = rf_time_now() - t;
            if (st == RF_OK) {
                t = rf_time_now();
                st = rf_plan_finalize(&j->plan, &err);
                j->js.finalize_s = rf_time_now() - t;
                if (st != RF_OK)
                    rf_ctl_abort(j->ctl, st, err.msg);
            }
        } else if (j->p2p) {
            /* receivers in world-rank order on every sender, senders in order on every
             * receiver (the plan's stages): no cycle of waits */
            for (int r = 0; r < j->R && st == RF_OK; r++) {
                const rf_p2p_recv_t *rv = &j->p2p_s.recv[r];
                p2p_pack_ctx_t pc = {j, v, deadline, rv};
                if (rv->plan->n_stages <= j->rank ||
                    rv->plan->stages[j->rank].chunk_count == 0)
                    continue;
                cfg.plan = rv->plan;
                cfg.items = rv->items;
                cfg.receivers = &rv->rank;
                cfg.n_receivers = 1;
                st = rf_xfer_send(j->xfer, &cfg, p2p_pack, &pc, &err);
            }
        } else if (j->tr.sender) {
            pack_ctx_t pc = {j, v, deadline};
            /* ipc: chunks read in place are never packed, so the pack hooks may not fire */
            if (j->ipc && fault_here(j, v, RF_FAULT_EXIT))
                fault_exit_now(j, "stage sender, before its first chunk");
            if (j->ipc && fault_here(j, v, RF_FAULT_STALL))
                fault_stall_now(j, deadline, "stage sender, before its first chunk");
            st = rf_xfer_send(j->xfer, &cfg, job_pack, &pc, &err);
        } else {
            if (fault_here(j, v, RF_FAULT_EXIT))
                fault_exit_now(j, "trainer, before contributing to the stage gather");
            if (fault_here(j, v, RF_FAULT_STALL))
                fault_stall_now(j, deadline, "trainer, before contributing to the stage gather");
            st = rf_trainer_contribute(&j->tr, j->ctl, v, j->topo.buffers, deadline, &err);
            if (st != RF_OK && st != RF_ERR_PEER)
                rf_ctl_abort(j->ctl, st, err.msg);
        }
        j->js.send_s = rf_time_now() - t;
    }

    /* completion gate */
    const rf_xfer_stats_t *xs = rf_xfer_stats(j->xfer);
    memset(&rec, 0, sizeof(rec));
    rf_gate_record_set_result(&rec, j->ctl, st, &err);
    rec.nranks = j->size;
    rec.peers = xs->peers;
    if (is_rollout(j)) {
        memcpy(rec.mode_layers, j->plan.stats.layers, sizeof(rec.mode_layers));
        memcpy(rec.plan_mode_layers, j->plan_layers, sizeof(rec.plan_mode_layers));
    }
    rec.manifest_digest = j->man.digest;
    t = rf_time_now();
    rf_err_clear(&e2);
    rf_gate_run(j->ctl, v, &rec, j->rank == 0 ? &j->expect : NULL, deadline, &verdict, &e2);
    j->js.gate_s = rf_time_now() - t;
    j->js.verdict_s = rf_time_now() - t_begin;
    if (!verdict.committed) {
        /* leave both communicators clean for the next update (bounded: after the verdict) */
        rf_err_t de;
        double drain_deadline = rf_time_now() + 30.0;
        rf_err_clear(&de);
        if (verdict.posted_from != NULL &&
            rf_xfer_drain(j->xfer, verdict.posted_from, drain_deadline, &de) != RF_OK)
            rf_warn("rank %d: update %u: %s", j->rank, v, de.msg);
        rf_err_clear(&de);
        if (!is_rollout(j) && rf_trainer_drain(&j->tr, j->ctl, v, drain_deadline, &de) != RF_OK)
            rf_warn("rank %d: update %u: %s", j->rank, v, de.msg);
        if (is_rollout(j) && j->plan.in_update)
            rf_plan_abort(&j->plan);
        if (j->nccl) /* ncclCommAbort on every rank; re-created at the next update's begin */
            rf_xfer_nccl_fail(j->xfer);
    } else if (is_rollout(j)) {
        j->paused = false; /* serve version v */
    }
    j->js.paused = is_rollout(j) && j->paused;
    if (verdict.committed)
        j->last_committed = v;
    if (is_rollout(j) && fault_update)
        j->js.storage_unchanged = storage_hash(j) == hash_before;
    if (is_rollout(j) && j->o->storage_digest)
        j->js.storage_digest = storage_hash(j);
    j->js.update_s = rf_time_now() - t_start;
    j->js.status = verdict.committed ? RF_OK : (int)(verdict.code ? verdict.code : RF_ERR_INTERNAL);

    /* counters */
    j->js.chunks_sent = xs->chunks_sent;
    j->js.chunks_recv = xs->chunks_received;
    for (int r = 0; r < j->size; r++) {
        j->js.bytes_sent += xs->peers[r].bytes_sent;
        j->js.bytes_recv += xs->peers[r].bytes_recv;
    }
    j->js.max_inflight = xs->max_inflight_chunks;
    j->js.ipc_in_place = xs->ipc_bytes_in_place;
    j->js.ipc_staged = xs->ipc_bytes_staged;
    j->js.wire_s = xs->wire_s;
    j->js.unpack_s = xs->unpack_s;
    if (is_rollout(j)) {
        const rf_plan_stats_t *ps = &j->plan.stats;
        memcpy(j->js.layers, ps->layers, sizeof(j->js.layers));
        j->js.applications = ps->applications;
        j->js.declined = ps->declined;
        j->js.loader_calls = ps->loader_calls;
        j->js.bookkeeping_probes = ps->bookkeeping_probes;
        j->js.loader_s = ps->loader_s;
        j->js.layerwise_s = ps->layerwise_s;
        j->js.deferred_s = ps->deferred_s;
        j->js.stage_h2d = j->plan.stage_h2d;
        j->js.batch_launches = j->plan.batch_launches;
        j->js.batch_rows = j->plan.batch_rows;
        j->js.stage_h2d_bytes = j->plan.stage_h2d_bytes;
        j->js.dev = ps->dev;
    } else {
        j->js.bytes_produced = j->tr.stats.bytes_produced;
        j->js.bytes_read = j->tr.stats.bytes_read;
        j->js.header_bytes_read = j->tr.stats.header_bytes_read;
        j->js.bytes_gathered = j->tr.stats.bytes_gathered;
    }

    /* the oracle, after the gate: only a committed update is verified */
    j->js.verify_status = RF_OK;
    j->js.verify_skipped = verdict.committed && !verify_this;
    if (verdict.committed && is_rollout(j) && verify_this) {
        rf_err_t ve;
        rf_status_t vs;
        rf_err_clear(&ve);
        t = rf_time_now();
        memset(j->verified, 0, (size_t)j->inv.ntensors);
        if (j->ref != NULL && from_ckpt)
            vs = verify_reference(j, &ve);
        else
            vs = verify_scalar(j, v, from_ckpt, &ve);
        if (vs == RF_OK && diff) {
            diff_rule(j);
            double frac = j->js.diff_elems ? (double)j->js.diff_changed / j->js.diff_elems : 1.0;
            double qfrac =
                j->js.qdiff_elems ? (double)j->js.qdiff_changed / j->js.qdiff_elems : 1.0;
            if (frac < 0.99)
                vs = rf_err_set(&ve, RF_ERR_VERIFY,
                                "rank %d: only %.2f%% of the elements written changed since the "
                                "previous update (at least 99%% required)",
                                j->rank, 100.0 * frac);
            else if (qfrac < 0.90)
                vs = rf_err_set(&ve, RF_ERR_VERIFY,
                                "rank %d: only %.2f%% of the quantized elements written changed "
                                "since the previous update (at least 90%% required)",
                                j->rank, 100.0 * qfrac);
        }
        if (vs == RF_OK && j->o->cold_check)
            vs = cold_compare(j, v, &ve);
        j->js.verify_s = rf_time_now() - t;
        j->js.verify_status = (int)vs;
        snprintf(j->js.verify_msg, sizeof(j->js.verify_msg), "%s", ve.msg);
    }

    cold_free(j);
    /* rank 0 learns everything for the table */
    job_stats_t *all = j->rank == 0 ? calloc((size_t)j->size, sizeof(job_stats_t)) : NULL;
    MPI_Gather(&j->js, (int)sizeof(job_stats_t), MPI_BYTE, all, (int)sizeof(job_stats_t),
               MPI_BYTE, 0, j->stats_comm);
    uint8_t *vsum = j->rank == 0 ? calloc((size_t)j->inv.ntensors + 1, 1) : NULL;
    uint8_t *mine = calloc((size_t)j->inv.ntensors + 1, 1);
    if (is_rollout(j) && mine)
        memcpy(mine, j->verified, (size_t)j->inv.ntensors);
    MPI_Reduce(mine, vsum, j->inv.ntensors, MPI_UNSIGNED_CHAR, MPI_BOR, 0, j->stats_comm);
    free(mine);
    int rc = 0;
    if (j->rank == 0) {
        uint64_t verified = 0;
        for (int i = 0; i < j->inv.ntensors; i++)
            verified += vsum[i] != 0;
        *verified_p = verified;
        if (!j->o->quiet)
            print_table(j, v, all, &verdict, verified);
        if (j->hist_verdict_s != NULL) {
            double vs = 0;
            for (int r = 0; r < j->size; r++)
                vs = all[r].verdict_s > vs ? all[r].verdict_s : vs;
            j->hist_verdict_s[v - 1] = vs;
            j->hist_committed[v - 1] = verdict.committed;
        }
        if (j->o->storage_digest && verdict.committed) {
            /* XXH3 over the rollout ranks' own digests, in rank order: equal iff every
             * rollout rank's slots are byte-identical (GPU run vs CPU run) */
            uint64_t d[2] = {0, 0};
            XXH3_state_t *h = XXH3_createState();
            if (h != NULL) {
                XXH3_64bits_reset(h);
                for (int r = j->T; r < j->size; r++)
                    XXH3_64bits_update(h, &all[r].storage_digest, sizeof(uint64_t));
                d[0] = XXH3_64bits_digest(h);
                XXH3_freeState(h);
            }
            for (int r = j->T; r < j->size; r++)
                d[1] += all[r].stage_h2d;
            printf("refit: update %u storage digest %016" PRIx64 " (%d rollout ranks, %" PRIu64
                   " chunk payloads staged h2d%s)\n",
                   v, d[0], j->R, d[1],
                   j->ipc_dev ? ", ipc device to device" : "");
            fflush(stdout);
        }
        if (!verdict.committed) {
            snprintf(fail, cap, "update %u: rank %d: %s", v, verdict.rank, verdict.reason);
            rc = 1;
        } else {
            for (int r = 0; r < j->size; r++)
                if (all[r].verify_status != RF_OK) {
                    snprintf(fail, cap, "update %u: verification: %s", v, all[r].verify_msg);
                    rc = 1;
                    break;
                }
        }
        j->ref_total = 0;
        if (rc == 0 && verdict.committed && !all[j->T].verify_skipped && j->ref != NULL &&
            from_ckpt)
            rc = ref_account(j, v, vsum, verified_p, fail, cap);
    }
    free(all);
    free(vsum);
    MPI_Bcast(&rc, 1, MPI_INT, 0, j->stats_comm);
    write_profile(j, v);
    rf_gate_verdict_fini(&verdict);
    return rc;
}

static void teardown(job_t *j)
{
    profile_close(j);
    cold_free(j);
    free(j->cold);
    if (j->xfer && j->ipc_dev) {
        /* CUDA IPC: every importer closes its mappings before any exporter frees */
        rf_xfer_ipc_close_imports(j->xfer);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (j->xfer)
        rf_xfer_destroy(j->xfer);
    if (j->ctl)
        rf_ctl_destroy(j->ctl);
    if (j->tr_ready)
        rf_trainer_free(&j->tr);
    if (j->plan_ready)
        rf_plan_free(&j->plan);
    if (j->snap) {
        for (int s = 0; s < j->st.nslots; s++)
            free(j->snap[s]);
        free(j->snap);
    }
    free(j->verified);
    if (is_rollout(j))
        rf_storage_free(&j->st);
    if (j->ipc_mirror != NULL)
        j->accel->ops->free_host(j->accel, j->ipc_mirror);
    j->ipc_mirror = NULL;
    if (j->nccl_wdev != NULL)
        j->accel->ops->free(j->accel, j->nccl_wdev);
    j->nccl_wdev = NULL;
    free(j->pack_rows);
    for (int k = 0; k < 2; k++)
        if (j->ipc_ev[k] != NULL)
            j->accel->ops->event_destroy(j->ipc_ev[k]);
    rf_accel_close(j->accel); /* after the storage and plan that used it */
    j->accel = NULL;
    if (j->ref)
        rf_ref_free(j->ref);
    if (j->ck)
        rf_ckpt_close(j->ck);
    rf_chunk_plan_destroy(j->cplan);
    rf_p2p_schedule_free(&j->p2p_s);
    rf_nccl_layout_free(&j->nccl_layout);
    free(j->items);
    free(j->item_tensor);
    free(j->senders);
    free(j->receivers);
    free(j->pair_of);
    free(j->ipc_staged);
    free(j->ipc_piece_staged);
    free(j->ipc_pieces);
    rf_gate_expect_fini(&j->expect);
    rf_manifest_free(&j->man);
    rf_inventory_free(&j->inv);
    rf_model_config_free(&j->cfg);
    if (j->role_comm != MPI_COMM_NULL && j->role_comm != 0)
        MPI_Comm_free(&j->role_comm);
    if (j->engine_comm != MPI_COMM_NULL && j->engine_comm != 0)
        MPI_Comm_free(&j->engine_comm);
    if (j->stats_comm != MPI_COMM_NULL && j->stats_comm != 0)
        MPI_Comm_free(&j->stats_comm);
}

/* ---- --bench-json ----------------------------------------------------------------------- */

static int cmp_double_job(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct bench_info {
    char topology[128], model[64]; /* copies: teardown frees the topology and config */
    const char *quant, *transport; /* static names */
    uint64_t payload;
    int tensors;
    size_t chunks;
    uint64_t chunk_bytes;
    int device; /* rank 0's GPU, -1: host */
    bool ipc_dev;
} bench_info_t;

/* Rank 0, after teardown (the arenas are freed, so the copy buffers fit): the copy ceiling on
 * rank 0's device, then the JSON. Updates after the first are the timed ones (the first
 * allocates, maps and warms up). Returns 0 on success. */
static int bench_write(const rf_job_opts_t *o, const bench_info_t *bi, const double *vs,
                       const int *committed)
{
    rf_accel_t *ax = NULL;
    /* at least 4 GiB on a GPU (issue #4's ceiling); the payload, at least 64 MiB, on the host */
    size_t floor_b = bi->device >= 0 ? (size_t)4 << 30 : (size_t)64 << 20;
    size_t bytes = bi->payload > floor_b ? (size_t)bi->payload : floor_b;
    double cbest = 0, cmed = 0;
    rf_status_t st = rf_accel_open(bi->device >= 0 ? "cuda" : "host",
                                   bi->device >= 0 ? bi->device : 0, &ax);
    if (st == RF_OK)
        st = rf_accel_copy_ceiling(ax, bytes, 5, &cbest, &cmed);
    const char *where = ax ? ax->ops->name : "none";
    rf_accel_close(ax);
    if (st != RF_OK)
        fprintf(stderr, "refit-run: --bench-json: measuring the copy ceiling (%zu bytes) failed: "
                "%s\n", bytes, rf_status_name(st));
    int n = o->steps, first = n > 1 ? 1 : 0, m = 0;
    double *t = calloc((size_t)n, sizeof(double));
    json_t *root = json_object(), *ups = json_array();
    for (int i = 0; i < n; i++) {
        json_t *u = json_object();
        json_object_set_new(u, "update", json_integer(i + 1));
        json_object_set_new(u, "committed", json_boolean(committed[i]));
        json_object_set_new(u, "verdict_s", json_real(vs[i]));
        json_object_set_new(u, "timed", json_boolean(i >= first));
        json_array_append_new(ups, u);
        if (i >= first && committed[i] && t)
            t[m++] = vs[i];
    }
    json_object_set_new(root, "topology", json_string(bi->topology));
    json_object_set_new(root, "model_type", json_string(bi->model));
    json_object_set_new(root, "quantization", json_string(bi->quant));
    json_object_set_new(root, "transport", json_string(bi->transport));
    json_object_set_new(root, "ipc_device", json_boolean(bi->ipc_dev));
    json_object_set_new(root, "payload_bytes", json_integer((json_int_t)bi->payload));
    json_object_set_new(root, "tensors", json_integer(bi->tensors));
    json_object_set_new(root, "chunks", json_integer((json_int_t)bi->chunks));
    json_object_set_new(root, "chunk_bytes", json_integer((json_int_t)bi->chunk_bytes));
    json_object_set_new(root, "updates", ups);
    if (m > 0) {
        qsort(t, (size_t)m, sizeof(double), cmp_double_job);
        json_object_set_new(root, "best_s", json_real(t[0]));
        double med = m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
        json_object_set_new(root, "median_s", json_real(med));
        json_object_set_new(root, "payload_GBps_best", json_real((double)bi->payload / t[0] / 1e9));
        json_object_set_new(root, "payload_GBps_median",
                            json_real((double)bi->payload / med / 1e9));
    }
    if (st == RF_OK) {
        json_t *c = json_object();
        json_object_set_new(c, "accelerator", json_string(where));
        json_object_set_new(c, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(c, "reps", json_integer(5));
        json_object_set_new(c, "best_s", json_real(cbest));
        json_object_set_new(c, "median_s", json_real(cmed));
        json_object_set_new(c, "GBps", json_real((double)bytes / cbest / 1e9));
        json_object_set_new(root, "copy_ceiling", c);
        if (m > 0)
            json_object_set_new(root, "fraction_of_ceiling",
                                json_real(((double)bi->payload / t[0]) / ((double)bytes / cbest)));
    }
    int rc = json_dump_file(root, o->bench_json, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (rc != 0)
        fprintf(stderr, "refit-run: --bench-json: cannot write %s\n", o->bench_json);
    else if (m > 0 && st == RF_OK && !o->quiet)
        printf("refit: bench: payload %.2f GB, update best %.3f ms median %.3f ms (%d timed) = "
               "%.1f GB/s; copy ceiling (%s, %.2f GB, best of 5) %.3f ms = %.1f GB/s; %.1f%% of "
               "the ceiling\n",
               (double)bi->payload / 1e9, t[0] * 1e3,
               (m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2])) * 1e3, m,
               (double)bi->payload / t[0] / 1e9, where, (double)bytes / 1e9, cbest * 1e3,
               (double)bytes / cbest / 1e9,
               100.0 * ((double)bi->payload / t[0]) / ((double)bytes / cbest));
    json_decref(root);
    free(t);
    return rc != 0 || st != RF_OK;
}

int rf_job_run(const rf_job_opts_t *opts)
{
    job_t j;
    rf_err_t err;
    char fail[RF_ERR_MSG_MAX + 64] = "";
    uint64_t verified = 0;
    int rc = 0, committed = 0;
    char failed_list[256] = "";
    memset(&j, 0, sizeof(j));
    j.role_comm = j.engine_comm = j.stats_comm = MPI_COMM_NULL;
    j.prof_fd = -1;
    j.o = opts;
    rf_err_clear(&err);
    MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &j.size);
    if (setup(&j, &err) != RF_OK) {
        if (j.rank == 0) {
            fprintf(stderr, "refit-run: %s\n", err.msg);
            printf("refit: FAILED: %s\n", err.msg);
        }
        teardown(&j);
        return 1;
    }
    profile_open(&j);
    if (j.rank == 0 && !opts->quiet) {
        printf("refit: topology %s (hash %016" PRIx64 "), model %s %s, trainer %d rank(s) (tp %d "
               "pp %d dp %d) -> %d engine(s) x tp %d dp %d ep %d, %s, %s transport, %s\n",
               j.topo.name, rf_topology_hash(&j.topo), j.cfg.model_type,
               j.cfg.architecture, j.T, j.topo.t_tp, j.topo.t_pp, j.topo.t_dp,
               j.topo.r_engines, j.topo.r_tp, j.topo.r_dp, j.topo.r_ep,
               rf_quant_name(j.topo.quantization), rf_transport_name(j.topo.transport),
               opts->checkpoint ? opts->checkpoint : "generator weights");
        fflush(stdout);
    }
    if (j.rank == 0 && opts->bench_json) {
        j.hist_verdict_s = calloc((size_t)opts->steps, sizeof(double));
        j.hist_committed = calloc((size_t)opts->steps, sizeof(int));
    }
    for (int v = 1; v <= opts->steps; v++) {
        char f[sizeof(fail)] = "";
        int urc = run_update(&j, (uint32_t)v, &verified, f, sizeof(f));
        if (urc != 0) {
            if (rc == 0)
                snprintf(fail, sizeof(fail), "%s", f);
            size_t len = strlen(failed_list);
            if (len + 16 < sizeof(failed_list))
                snprintf(failed_list + len, sizeof(failed_list) - len, " %d", v);
            rc = 1;
        } else {
            committed++;
        }
        if (opts->after_update)
            opts->after_update(opts->after_update_ctx, v, urc == 0);
    }
    if (j.rank == 0) {
        if (rc == 0 && j.ref_total > 0 && j.ref_skipped > 0)
            printf("refit: COMMITTED %d update(s), verified %" PRIu64 " of %" PRIu64
                   " tensors (%s)\n",
                   committed, verified, j.ref_total, j.ref_note);
        else if (rc == 0)
            printf("refit: COMMITTED %d update(s), verified %" PRIu64 " tensors%s\n", committed,
                   verified, opts->verify_none ? " (--verify none: no oracle ran)" : "");
        else
            printf("refit: %d of %d update(s) committed and verified (failed:%s)\n"
                   "refit: FAILED: %s\n",
                   committed, opts->steps, failed_list, fail);
        fflush(stdout);
    }
    bench_info_t bi = {"", "", rf_quant_name(j.topo.quantization),
                       rf_transport_name(j.topo.transport), j.man.payload_bytes, j.man.n,
                       j.cplan ? j.cplan->n_chunks : 0, j.topo.chunk_bytes, j.place.device,
                       j.ipc_dev};
    snprintf(bi.topology, sizeof(bi.topology), "%s", j.topo.name);
    snprintf(bi.model, sizeof(bi.model), "%s", j.cfg.model_type);
    teardown(&j);
    if (j.rank == 0 && opts->bench_json && j.hist_verdict_s && j.hist_committed &&
        bench_write(opts, &bi, j.hist_verdict_s, j.hist_committed) != 0)
        rc = rc ? rc : 1;
    free(j.hist_verdict_s);
    free(j.hist_committed);
    return rc;
}
