/*
 * refit: the session's private header (runtime/ only): struct rf_session, and what refit's own
 * programs ask of a session beyond the public API (include/refit/session.h).
 *
 * One implementation of setup and of the update, libuv style: the loop is the library's, the
 * program is a client. The public API (runtime/session.c: rf_session_create / register / plan /
 * update) and refit-run's job (runtime/job*.c, which refit-run and refit-soak drive) both go
 * through the functions below:
 *
 *   rf_session_open     collective  topology, placement, what the topology's transport needs
 *                                   in this build, accelerator, inventory, format owner,
 *                                   control channel and transfer engine (session_setup.c)
 *   rf_session_build    collective  rollout storage (registered or allocated) and reload plan,
 *                                   manifest, chunk plan, schedule and the gate's expectation,
 *                                   trainer shards (registered or owned), the transport's setup
 *                                   (nccl communicators and resident weights, the stage
 *                                   gather, ipc arenas) (session_setup.c)
 *   rf_session_run      collective  one update: begin agreement, production (hook), transfer,
 *                                   finalize, completion gate, drain (session.c)
 *   rf_session_release  collective  teardown (session_setup.c)
 *
 * What the job brings beyond a caller's registration are options and hooks here: a producer
 * that fills the trainer's buffers (generator or checkpoint, host or device), storage
 * allocated by refit, the tests' fault hooks, the oracle and the report (after the gate, the
 * job's own).
 */
#ifndef REFIT_SESSION_INT_H
#define REFIT_SESSION_INT_H

#include <mpi.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "refit/accel.h"
#include "refit/checkpoint.h"
#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/format.h"
#include "refit/hashmap.h"
#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/p2p.h"
#include "refit/plan.h"
#include "refit/session.h"
#include "refit/sink.h"
#include "refit/storage.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/transport.h"
#include "refit/transport_nccl.h"

/* One tensor a public-API caller must register on this rank. */
typedef struct sess_tensor {
    char name[RF_NAME_MAX + 32];
    rf_slot_shape_t want; /* dtype, ndim, shape */
    int index;            /* trainer: inventory tensor; rollout: inventory module */
    bool derived;         /* rollout: a weight-derived slot (format owners with one) */
    bool logical;         /* trainer, quantized model: the unquantized weight of a quantized
                             linear, which refit quantizes (runtime/session_quant.c); entry
                             is the linear's primary (fp8 weight / wna16 weight_packed) */
    int entry;            /* trainer, once planned: its manifest entry */
    bool registered;
    rf_signature_t sig;   /* the registered tensor (borrowed memory) */
} sess_tensor_t;

/* What refit's own programs ask of rf_session_open beyond the public options. Zeroed: the
 * public API's session (registered tensors, its supported subset, MPI errors returned). */
typedef struct rf_session_setup {
    rf_session_options_t opt;  /* integrity; layerwise unless policy says otherwise */
    bool owned;                /* refit-run: refit allocates the rollout's runtime storage
                                  (rf_plan_alloc_storage) and the trainer's shard buffers, for
                                  every transport, format and device refit-run supports; no
                                  registration. false: the public API (its checks) */
    rf_reload_policy_t policy; /* owned: the reload policy */
    const char *format;        /* owned: the format owner by name; NULL: the topology's */
    const char *checkpoint;    /* owned: NULL, or the manifest comes from its headers (rank 0,
                                  after checking its config.json) and s->ck is open on every
                                  rank for the job's producer and oracle */
    bool faults;               /* owned: a test fault is armed (no device-resident trainer:
                                  faults edit host bytes) */
    /* owned, optional: called on every rank once the schedule and the trainer's shards exist,
     * before the transport's setup (the job resolves its fault there); an error fails setup on
     * every rank with the lowest failing rank's text */
    rf_status_t (*configured)(void *ctx, rf_session_t *s, rf_err_t *err);
    void *ctx;
} rf_session_setup_t;

/* What a client hooks into one update (rf_session_run); every member optional. */
typedef struct rf_session_hooks {
    void *ctx;
    /* local, after the transport's begin and the rollout's plan begin, before the begin
     * agreement: this rank's reasons to refuse the update (refit-run: the trainer's source
     * check, a production that failed before the update) */
    rf_status_t (*begin)(void *ctx, rf_err_t *err);
    /* trainer, after GO: writes this update's weights into the trainer's buffers */
    rf_status_t (*produce)(void *ctx, rf_err_t *err);
    /* a named point of the transfer reached (a stage sender reading in place before its
     * first chunk, a contributor before the stage gather): the tests' exit and stall faults */
    void (*point)(void *ctx, const char *where);
    /* the tests' chunk faults and hooks (rf_xfer_config_t.fault, the trainer's
     * fault_skip_seq, the sink's after, the source's before) */
    rf_xfer_fault_t fault;
    int64_t gather_skip_seq;
    rf_status_t (*after_chunk)(void *ctx, const rf_chunk_t *chunk, const rf_xfer_segment_t *segs,
                               size_t nsegs, const void *payload, bool dev, rf_err_t *err);
    rf_status_t (*before_pack)(void *ctx, const rf_chunk_t *chunk, rf_err_t *err);
} rf_session_hooks_t;


/* What one rf_session_run measured on this rank. */
typedef struct rf_session_times {
    double begin_s, receive_s, finalize_s, send_s, gate_s;
    double verdict_s;       /* the update's begin to its verdict */
    uint64_t rebuilds;      /* rollout: plan rebuilds at this update's begin */
    const char *moved;      /* ... the first slot whose signature changed (NULL: the format
                               owner changed its mapping) */
} rf_session_times_t;

/* The public API's local check (rf_session_check_arm / rf_session_check_post,
 * runtime/session_check.c): a verdict another thread of this process computes during the
 * update, waited for before the completion gate. The only state of a session another thread
 * touches, under mu. */
typedef struct rf_session_check {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled by a post; CLOCK_MONOTONIC, as rf_time_now */
    bool ok;           /* mu and cv initialized */
    uint64_t last;     /* the last ticket given (tickets start at 1) */
    uint64_t armed;    /* the armed ticket, 0: none */
    bool posted;       /* armed's verdict is in st / msg */
    double timeout_s;  /* the wait's bound, from rf_session_check_arm */
    rf_status_t st;
    char msg[RF_ERR_MSG_MAX];
} rf_session_check_t;

/* Initializes / frees c (rf_session_open, rf_session_release). Local. */
rf_status_t rf_session_check_init(rf_session_check_t *c, rf_err_t *err);
void rf_session_check_fini(rf_session_check_t *c);
/* Before the completion gate of an update on this rank: when a check is armed and st is RF_OK,
 * waits for its post (at most its timeout_s, never past the update's deadline) and returns its
 * verdict (RF_ERR_TIMEOUT when none came), the text in err; the check is consumed either way.
 * Local; no MPI. */
rf_status_t rf_session_check_wait(rf_session_t *s, rf_status_t st, rf_err_t *err);
/* Disarms a check armed on s (the public update ended without reaching its gate). Local. */
void rf_session_check_drop(rf_session_t *s);


struct rf_session {
    MPI_Comm comm; /* refit's duplicate of the caller's */
    int rank, size, T, R;
    rf_session_setup_t so;
    rf_session_options_t opt;
    rf_topology_t topo;
    rf_model_config_t cfg;
    bool cfg_ok;
    rf_rank_info_t me;
    rf_placement_t place;
    rf_inventory_t inv;
    bool inv_ok;
    MPI_Comm role_comm;
    /* trainer: the trainer ranks of its stage (rf_trainer_t.stage_comm's, borrowed by it),
     * split from role_comm in rf_session_create with role_comm, so that no communicator is
     * made past a call's join (a plain MPI_Comm_split cannot be bounded); rollout: NULL */
    MPI_Comm stage_comm;
    rf_ctl_t *ctl;
    rf_xfer_t *xfer;
    bool p2p, integrity;
    int trailer; /* integrity's trailer algorithm (rf_chunk_trailer_t), the same on every rank:
                    choose_trailer in session_setup.c */
    rf_accel_t *accel; /* rollout with rollout.gpus (its storage), nccl and colocated ipc ranks
                          with a GPU, public-API trainers with trainer.gpus on mpi (their
                          registered tensors), the tests' host-device accelerator; NULL: host */
    rf_ckpt_t *ck;     /* owned sessions with a checkpoint */
    /* what this rank registers (public API) */
    sess_tensor_t *ex;
    int nex, nreg;
    rf_map_t exmap;     /* name -> ex index */
    bool exmap_ok;
    int *ex_of_tensor;  /* trainer: [inv.ntensors] ex index or -1 */
    rf_err_t reg_err;   /* the first refused registration not yet reported */
    bool reg_err_call;  /* reg_err is a refused rf_session_register call before the plan
                           (forgotten by the next accepted one) */
    rf_err_t abort_err; /* rf_session_abort, for the next update */
    rf_err_t last;      /* the last failing call's text */
    /* plan */
    bool planned, broken;
    /* a call's join (runtime/session.c, sess_join) failed: a rank left the session or did not
     * come by transfer.join_timeout_s; s->comm is out of step (a nonblocking collective that
     * cannot be cancelled), so every later call is refused with lost.msg and destroy is local */
    bool lost;
    rf_err_t lost_err;
    bool gone_sent; /* this rank's leave notice went out (once) */
    /* s->comm's waits are bounded (rf_session_wait) from the first public call's join on:
     * create's and the owned job's setup wait plainly (every rank calls them at once) */
    bool bounded;
    const char *call; /* the public call running, for the waits' errors ("rf_session_plan") */
    rf_manifest_t man;
    rf_chunk_item_t *items;
    rf_chunk_plan_t *cplan;
    int *senders, *receivers;
    rf_gate_expect_t expect;
    rf_p2p_schedule_t p2p_s;
    rf_trainer_t tr;
    bool tr_ready;
    rf_trainer_source_t src; /* the trainer as the transfer's source (its row list owned) */
    int *item_tensor;        /* [man.n]: the inventory tensor of each manifest entry (the
                                per-piece hot path reads this, not the large entries) */
    rf_format_t fmt;
    rf_storage_t st;
    bool st_ok;
    rf_plan_t plan;
    bool plan_ok;
    uint64_t plan_layers[RF_PLAN_MODES];
    /* ipc transport (colocated) */
    bool ipc;
    int *pair_of;              /* [size] every rank's IPC pair (-1 none) */
    uint8_t *ipc_staged;       /* [n_chunks] the stage sender stages (part of) the chunk */
    uint8_t *ipc_piece_staged; /* [n_pieces] some rollout rank reads the piece staged */
    rf_ipc_piece_t *ipc_pieces; /* rollout: [n_pieces] where this rank reads each piece */
    bool ipc_dev;          /* the arena backend is device memory (cuda, or host-device in tests) */
    void *ipc_wdev;        /* trainer, ipc_dev: its weights arena (device) */
    void *ipc_mirror;      /* trainer, ipc_dev: pinned host mirror the trainer produces into */
    uint64_t ipc_wbytes;   /* trainer, ipc_dev: bytes of both */
    /* ipc, the public API (session_setup.c ipc_share_table): the trainer's registered tensors
     * grouped by the allocation holding each (rf_accel_pointer_info: a caching allocator's
     * segments), each allocation shared once */
    void **ipc_abase;      /* trainer: [ipc_nalloc] allocation bases, in first-use order */
    uint64_t *ipc_abytes;  /* trainer: [ipc_nalloc] their sizes */
    uint32_t ipc_nalloc;
    uint64_t *ipc_table;   /* every rank: [size][man.n][2] per trainer rank and manifest entry:
                              offset in its allocation, allocation | RF_SESSION_IPC_* flags */
    /* nccl transport: device chunk buffers on every rank's GPU (transport/transport_nccl.c) */
    bool nccl;
    rf_nccl_layout_t nccl_layout;
    /* nccl trainer with its weights resident on its GPU (nccl_resident_eligible): produced on
     * the device before the update begins, packed device to device into the chunk buffer */
    bool nccl_resident;
    void *nccl_wdev;           /* its weights arena (device), rf_trainer_arena_layout bytes */
    bool fence;                /* some trainer produces before the update: the job's fence */
    bool integrity_host_pack;  /* nccl: some trainer packs on the host because of integrity */
    const char *wire;          /* the stage gather's wire when not MPI point-to-point: "nccl
                                  gather communicators" or the tests' "test wire" */
    /* trainer, rf_session_register_checkpoint (runtime/session_ckpt.c): the shards come from
     * a checkpoint read at every update, into buffers refit allocated */
    char *ck_path;    /* owned copy of the caller's path; NULL: registered tensors */
    rf_ckpt_t *src_ck; /* opened at the registration, again at each update's begin */
    char *ck_arena;   /* the shard buffers (owned) */
    bool ck_trainers; /* every rank: the trainers registered a checkpoint (rf_session_ckpt_agree) */
    /* every rank, from rf_session_build (the topology and the trainers' sources, the same
     * everywhere): the trainers' production after GO can fail (a quantizer's non-finite weight
     * or bad scale, a checkpoint read), so every update agrees on it before the first chunk
     * moves (rf_ctl_agree_produced, run_finish in runtime/session.c) */
    bool agree_produce;
    /* trainer, quantized model (runtime/session_quant.c): the buffers of every entry of a
     * quantized linear on this rank (fp8 weight and scales, wna16 weight_packed, weight_scale,
     * weight_shape), written by the trainer-side quantizer at each update */
    char *q_arena;
    bool q_dev; /* q_arena is device memory of s->accel (a trainer with CUDA tensors) */
    /* updates */
    uint32_t seq;     /* the update counter of the control channel and the chunks */
    uint64_t version; /* of the last COMMITTED update */
    double deadline;  /* the current update's absolute deadline */
    double run_t0;    /* the current update's begin (rf_session_run's halves) */
    /* the public API's split update (rf_session_begin ... rf_session_finish) */
    bool in_update;            /* between a begin and its finish */
    rf_status_t pub_st;        /* this rank's status after the begin agreement */
    rf_err_t pub_err;          /* ... its text */
    rf_err_t moved_err;        /* a tensor registered again between begin and finish */
    uint64_t pub_agreed;       /* the update's version */
    double pub_t0;             /* rf_session_begin's start (the result's seconds) */
    rf_session_hooks_t pub_hooks; /* the update's hooks (a registered checkpoint) */
    bool pub_hooked;
    rf_session_times_t pub_tm;
    rf_session_check_t check; /* rf_session_check_arm / rf_session_check_post */
};

static inline bool rf_session_is_rollout(const rf_session_t *s)
{
    return s->me.role == RF_ROLE_ROLLOUT;
}

/* A rollout rank of the public API whose registered runtime storage is device memory: it has
 * a device accelerator (rollout.gpus; the tests' host-device). */
static inline bool rf_session_device_storage(const rf_session_t *s)
{
    return !s->so.owned && rf_session_is_rollout(s) && s->accel != NULL &&
           s->accel->ops->mem_type != RF_MEM_HOST;
}

/* A trainer rank of the public API on colocated ipc with a device accelerator
 * (trainer.gpus == rollout.gpus; the tests' host-device): it registers CUDA tensors, whose
 * allocations its pair opens through CUDA IPC. */
static inline bool rf_session_ipc_trainer(const rf_session_t *s)
{
    return !s->so.owned && !rf_session_is_rollout(s) && s->ipc && s->accel != NULL &&
           s->accel->ops->mem_type != RF_MEM_HOST;
}

/* A trainer rank of the public API on the mpi transport with a device accelerator
 * (trainer.gpus; the tests' REFIT_TEST_DEVICE_ACCEL=host-device-trainer / -all): it registers
 * CUDA tensors of its GPU, which its packs read through device-to-host copies
 * (rf_trainer_use_device) into the host chunk buffers MPI sends. */
static inline bool rf_session_mpi_device_trainer(const rf_session_t *s)
{
    return !s->so.owned && !rf_session_is_rollout(s) && !s->ipc && !s->nccl &&
           s->accel != NULL && s->accel->ops->mem_type != RF_MEM_HOST;
}

/* ipc_table flags (high bits of an entry's second word; the low 32 bits: its allocation) */
#define RF_SESSION_IPC_HELD (1ull << 32)    /* the trainer rank registered this entry */
#define RF_SESSION_IPC_SAME_DT (1ull << 33) /* registered in the manifest's dtype (no master) */

/* ---- session_common.c: waits and collectives on s->comm ------------------------------- */

/*
 * Waits for req, a nonblocking operation a session call posted on s->comm. Once s->bounded
 * (the first public call's join: every later call, the plan's setup and the teardown too):
 * until it completes; or a rank left the session (its notice, rf_session_notify_gone:
 * RF_ERR_PEER naming it, within milliseconds); or transfer.join_timeout_s passed since the
 * wait began (RF_ERR_TIMEOUT naming what and the key). Either failure loses the session
 * (rf_session_lose): the operation cannot be cancelled, so s->comm is out of step for good.
 * Not bounded (create, the owned job): MPI_Wait. what: "<call>: <step>". Local.
 */
rf_status_t rf_session_wait(rf_session_t *s, MPI_Request *req, const char *what, rf_err_t *err);
/* The session is lost on this rank (st, err's text): later calls refused (RF_ERR_STATE),
 * destroy local, and the other ranks told (once), so that one arriving late fails its next
 * wait at once. Returns st. Local. */
rf_status_t rf_session_lose(rf_session_t *s, rf_status_t st, rf_err_t *err);
/* Tells every other rank of s->comm that this one left the session (what: why), once; the
 * requests freed, the buffer parked (nothing here waits). Local. */
void rf_session_notify_gone(rf_session_t *s, const char *what);

/*
 * The session's collectives on s->comm (and the point-to-point pair of ipc's setup), each the
 * nonblocking form over a heap copy of the buffers waited for by rf_session_wait: bounded, a
 * failure loses the session and parks the copy (MPI writes it when a late rank completes the
 * operation); the caller's buffers are only written on success. step names the step in the
 * error ("rf_session_plan: <step>: ..."). On a lost session nothing is posted: the lost
 * session's error. Collective over s->comm (send / recv: the pair), same order everywhere.
 */
rf_status_t rf_session_allreduce(rf_session_t *s, const void *in, void *out, int count,
                                 MPI_Datatype dt, MPI_Op op, const char *step, rf_err_t *err);
/* out: [s->size][count] of dt */
rf_status_t rf_session_allgather(rf_session_t *s, const void *in, int count, MPI_Datatype dt,
                                 void *out, const char *step, rf_err_t *err);
rf_status_t rf_session_bcast(rf_session_t *s, void *buf, int bytes, int root, const char *step,
                             rf_err_t *err);
/* Every rank's bytes of in, concatenated in rank order, on root: *out_p (owned by the
 * caller, *total_p bytes); NULL and 0 elsewhere. */
rf_status_t rf_session_gatherv(rf_session_t *s, const void *in, int bytes, int root,
                              void **out_p, size_t *total_p, const char *step, rf_err_t *err);
rf_status_t rf_session_barrier(rf_session_t *s, const char *step, rf_err_t *err);
rf_status_t rf_session_send(rf_session_t *s, const void *buf, int bytes, int dst, int tag,
                            const char *step, rf_err_t *err);
rf_status_t rf_session_recv(rf_session_t *s, void *buf, int bytes, int src, int tag,
                            const char *step, rf_err_t *err);

/* Every rank of s->comm learns the lowest failing rank's status and message (err); steps
 * waited for by rf_session_wait (bounded once the session joined a call). Collective. */
rf_status_t rf_session_agree(rf_session_t *s, rf_status_t st, rf_err_t *err);
/* The same as a plain collective over comm (the job's own setup on MPI_COMM_WORLD). */
rf_status_t rf_session_agree_comm(MPI_Comm comm, rf_status_t st, rf_err_t *err);
/* Keeps p reachable until the process ends (memory MPI may still use after a local teardown:
 * runtime/session_common.c). Local, never fails. */
void rf_session_park(void *p);

/*
 * Tests only (built with REFIT_TEST_HOOKS, the test builds; else RF_OK): the environment
 * variable env of this rank's process stops a call of the plan at a named point (where: "after
 * the join"), while the other ranks go on into its next collective: "leave" leaves the
 * session there (lost, the others told, as a caller's rf_session_destroy_local would:
 * RF_ERR_STATE "left <where> (<env>=leave)"), "stall:S" sleeps S seconds first (a rank that
 * only stopped). Local.
 */
rf_status_t rf_session_test_stop(rf_session_t *s, const char *env, const char *where,
                                 rf_err_t *err);

/*
 * The plan hash (rf_session_plan_info_t.hash) in one implementation, for rf_session_plan and
 * the offline plan (runtime/session_offline.c), which must give the same value:
 * rf_session_decisions_hash: a rollout rank's per-layer decisions, hash64 over (module, mode)
 * of every layer of plan p as uint64 pairs, in layer order (a trainer rank's is 0);
 * rf_session_plan_hash: hash64 over [topology hash, manifest digest, hash64 of narrowed[n]
 * (1 per manifest entry some trainer rank registered as a wider master), rank_hashes[size]
 * (every world rank's decisions hash, in rank order)]. RF_ERR_NOMEM only. Local.
 */
rf_status_t rf_session_decisions_hash(const rf_plan_t *p, uint64_t *h_p);
rf_status_t rf_session_plan_hash(uint64_t topo_hash, uint64_t digest, const uint8_t *narrowed,
                                 int n, const uint64_t *rank_hashes, int size, uint64_t *h_p);

/* Collective over comm: *s_p on every rank, or NULL and the same error everywhere (setup's
 * partial state freed). */
rf_status_t rf_session_open(MPI_Comm comm, const char *topology, const rf_session_setup_t *so,
                            rf_session_t **s_p, rf_err_t *err);
/* Collective: everything past the registration (public API: called by rf_session_plan once
 * every rank registered its set; owned: right after rf_session_open). */
rf_status_t rf_session_build(rf_session_t *s, rf_err_t *err);
/* Collective teardown (mpi false once MPI is finalized: memory only). */
void rf_session_release(rf_session_t *s, bool mpi);

/* The reload plan over storage st (the live plan or the cold check's): broadcast (sender -1)
 * or p2p (sender-keyed rectangles). Local. */
rf_status_t rf_session_plan_build(rf_session_t *s, rf_plan_t *p, rf_storage_t *st,
                                  rf_format_t *fmt, rf_err_t *err);
/* Applies one chunk's pieces to plan p in the plan's form: broadcast (sender -1) or this
 * rank's p2p rectangles; dev: payload is device memory of the storage's device. Local. */
rf_status_t rf_session_apply_pieces(rf_session_t *s, rf_plan_t *p, const rf_chunk_t *chunk,
                                    const rf_chunk_piece_t *pieces, const void *payload,
                                    bool dev, rf_err_t *err);

/* ---- session_ckpt.c: trainer shards read from a checkpoint --------------------------- */

/* Collective over s->comm, at the plan: every trainer rank registered a checkpoint, or none
 * did (a stage's ranks read it in lock step); the same answer on every rank. */
rf_status_t rf_session_ckpt_agree(rf_session_t *s, rf_err_t *err);
/* The hooks of an update of a session whose trainers registered a checkpoint (h filled and
 * returned), or NULL. */
const rf_session_hooks_t *rf_session_ckpt_hooks(rf_session_t *s, rf_session_hooks_t *h);
/* Frees what the registration allocated (rf_session_release). */
void rf_session_ckpt_free(rf_session_t *s);

/* ---- session_quant.c: quantized models ----------------------------------------------- */

/* Inventory tensor t belongs to a quantized linear (its quantized weight, scales or wna16
 * weight_shape): refit owns its trainer buffer and the trainer-side quantizer fills it. */
bool rf_session_quant_refit_owns(const rf_session_t *s, const rf_tensor_t *t);
/* Trainer: what this rank registers for the primary t (fp8 weight / wna16 weight_packed) of a
 * quantized linear, its shard reg: the unquantized `<prefix>.weight` slice in the model
 * dtype, name in name[cap]. RF_ERR_UNSUPPORTED naming it when its scales need more (fp8-tensor
 * / fp8-channel beyond the shard). Local. */
rf_status_t rf_session_quant_expect(const rf_session_t *s, const rf_tensor_t *t,
                                    const rf_region_t *reg, char *name, size_t cap,
                                    rf_slot_shape_t *w, rf_err_t *err);
/* Trainer, at the plan: q_arena allocated and tr.buf[] of every entry refit owns set. */
rf_status_t rf_session_quant_borrow(rf_session_t *s, rf_err_t *err);
/* The hooks of an update of a quantized session whose trainers registered tensors (h filled
 * and returned), or NULL. */
const rf_session_hooks_t *rf_session_quant_hooks(rf_session_t *s, rf_session_hooks_t *h);
void rf_session_quant_free(rf_session_t *s);

/*
 * Collective: one update, numbered ++s->seq (the control channel's and the chunks' number):
 * the begin agreement, production (h->produce), the transfer, finalize, the completion gate;
 * on FAILED the transport and the trainer drained, the plan aborted, the transport's failure
 * step. version, agreed: the public API's version check (a trainer's non-zero version must be
 * agreed, trainer rank 0's; refit-run passes 0, 0). h: NULL or the client's hooks. *verdict:
 * the gate's, the same on every rank (rf_gate_verdict_fini after); *times: this rank's;
 * *err: this rank's own error, when it had one (the gate's when it gave no verdict). Returns
 * this rank's status going into the gate.
 */
rf_status_t rf_session_run(rf_session_t *s, uint64_t version, uint64_t agreed,
                           const rf_session_hooks_t *h, rf_gate_verdict_t *verdict,
                           rf_session_times_t *times, rf_err_t *err);

#endif /* REFIT_SESSION_INT_H */
