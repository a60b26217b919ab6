/*
 * refit: the session API, librefit as a library (issue 15; docs/api.md).
 *
 * A training job and an inference engine hand refit their live tensors; refit moves the
 * trainer's weights into the engine's tensors in place, with the same verdict (COMMITTED or
 * FAILED) on every rank. One session per job, over a duplicate of the caller's communicator:
 *
 *   rf_session_create    collective  topology, model inventory, placement; this rank's role
 *   rf_session_register  local       trainer ranks: their shards; rollout ranks: the engine's
 *                                    tensors (repeatable until the set is complete)
 *   rf_session_plan      collective  the registered set checked everywhere, the manifest, the
 *                                    reload plans against the registered tensors
 *   rf_session_update    collective  one weight update: begin, transfer, finish, gate
 *   rf_session_begin     collective  ... its first half (the begin agreement), then
 *   rf_session_finish    collective  ... the rest (tensors registered again in between: FAILED)
 *   rf_session_abort     local       this rank's next update fails (every rank's, then)
 *   rf_session_check_arm / _post  local  a verdict another thread computes during the update,
 *                                    waited for before its completion gate
 *   rf_session_destroy   collective
 *   rf_session_destroy_local  local  a failure path's teardown (the others fail, naming it)
 *   rf_session_offline_*      local  what rf_session_plan of a topology agrees, in one process
 *                                    without MPI (refit-plan; below)
 *
 * Collective calls are made by every rank of the communicator, in the same order, from one
 * thread per process. A collective call returns the same status on every rank (an error on
 * one rank is carried to all with its text); a local call's error is this rank's alone.
 * Nothing here prints, exits or aborts MPI: errors come back as rf_status_t with their text in
 * rf_session_last_error.
 *
 * Waits. Every wait of a collective call is bounded. Each call that follows the caller's own
 * work (rf_session_plan, rf_session_begin / rf_session_update, rf_session_finish) first
 * joins: it waits for every rank to reach it for at most the topology's
 * transfer.join_timeout_s (default 1800 s: a training step or a stretch of generation lies
 * in between), and fails at once, naming the rank, when a rank left the session through
 * rf_session_destroy_local. A failed join (RF_ERR_PEER: "rank R left the session",
 * RF_ERR_TIMEOUT: "not every rank came within transfer.join_timeout_s") loses the session on
 * that rank: every later call is refused (RF_ERR_STATE) and rf_session_destroy is local. Past
 * the join an update runs under its update deadline (transfer.timeout_s, docs/topology.md).
 * rf_session_create's collectives have no deadline of their own: every rank calls it at the
 * start of the job. It makes every communicator the session uses (its duplicate, the role
 * split, the trainers' stage split): none is made past a join, where a plain MPI_Comm_split
 * could not be bounded.
 *
 * MPI: MPI_Init(_thread) before rf_session_create, MPI_Finalize after rf_session_destroy.
 * refit makes its MPI calls from the thread that calls rf_session_*, inside those calls
 * only, so the thread level MPI provides must allow that thread to call MPI:
 * MPI_THREAD_SINGLE or MPI_THREAD_FUNNELED when it is the main thread (MPI_Is_thread_main),
 * MPI_THREAD_SERIALIZED (the caller keeps other threads' MPI calls apart from refit's) or
 * MPI_THREAD_MULTIPLE from any thread. rf_session_create refuses anything else with
 * RF_ERR_STATE.
 *
 * What this step covers (docs/api.md, "Not yet"): host memory (device -1) and, on rollout
 * ranks of a topology with rollout.gpus, CUDA tensors of the GPU rf_topology_place gives the
 * rank (the engine's parameters as its runtime storage, written through the cuda
 * accelerator as refit-run's GPU storage is, chunks through host memory); the mpi transport
 * (broadcast and p2p modes; p2p with host storage); colocated ipc (transfer.transport: ipc,
 * colocated: true, trainer.gpus == rollout.gpus): trainer ranks register CUDA tensors of
 * their GPU (PyTorch's caching allocator: many tensors in few cudaMalloc segments), the plan
 * exports each distinct allocation once (cudaIpcGetMemHandle of its base, the tensors as
 * (allocation, offset), as torch's reduce_tensor does), the pair on the same GPU opens each
 * once and reads every piece in place; refused at register naming the tensor and the
 * allocator setting: memory legacy CUDA IPC cannot export (VMM: PyTorch's
 * expandable_segments:True; pools: backend:cudaMallocAsync); at plan: a piece the pair cannot
 * read in place (trainer and rollout sharding differ, F32 masters); after plan: a trainer
 * tensor at a new address. The trainer's device writes are complete before
 * rf_session_update (e.g. torch.cuda.synchronize()) and its tensors live, where they are,
 * until rf_session_destroy (which closes the pair's mappings before it returns).
 * Unquantized models and, into host tensors over mpi, dense fp8-block, fp8-channel and wna16
 * ones on rollout.backend triton (below); the topology's
 * trainer.layout: megatron (docs/design.md, "Trainer shards and the stage gather": every
 * trainer rank registers its shard of each checkpoint tensor it holds, as refit-run's trainer
 * holds it) or fsdp (torch FSDP2's
 * Shard(0): rank d of a stage's trainer.dp registers torch.chunk(tensor, dp, 0)[d] of each
 * tensor of its stage, include/refit/trainer.h), each shard in the checkpoint's dtype or as
 * an F32 master of a BF16 / F16 tensor (rounded to nearest even when packed), and rollout
 * layout vllm (the fused engine modules: qkv_proj, gate_up_proj, ..., per rollout rank, as
 * runtime/storage.c lays them out).
 *
 * Quantized models (model.quantization fp8-block, fp8-channel or wna16; runtime/session_quant.c):
 * trainer ranks register the UNQUANTIZED checkpoint, as refit-run's trainer holds it: of every
 * quantized linear its `<prefix>.weight` shard in the model dtype (or an F32 master), never the
 * quantized tensors or scales, which refit computes at each update with its host quantizers
 * (fp8-block: vLLM / DeepSeek 128 x 128 blocks, scale = max(amax, 1e-12) / 448 in fp32, weight /
 * scale rounded to nearest even to e4m3fn, satfinite; wna16: compressed-tensors int4 symmetric
 * groups; formats/quant.c). An F32 master is first rounded to nearest even into the model
 * dtype, then quantized: the engine's bytes are exactly quantize(checkpoint tensor), what
 * refit-run sends for that checkpoint. Rollout ranks register the format owner's runtime
 * tensors as rf_session_expected lists them (fp8: `...qkv_proj.weight` F8_E4M3 and
 * `...weight_scale_inv` / `...weight_scale` F32; wna16: `...weight_packed` I32 in refit's tile
 * layout and `...weight_scale` in the model dtype). A trainer shard must start on a 128 x 128
 * block / wna16 group (trainer.tp with block-aligned shards, refused at the plan otherwise);
 * fp8-channel needs whole rows on each trainer rank (trainer.tp 1 for row-parallel linears,
 * refused at create naming the tensor). Refused at create, naming the reason: fp8-tensor,
 * other backends, mixture-of-experts models; at register: a checkpoint source
 * (rf_session_register_checkpoint) of a quantized model.
 */
#ifndef REFIT_SESSION_H
#define REFIT_SESSION_H

#include <mpi.h>
#include <stdint.h>

#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a declaration below changes incompatibly (the Python binding checks it). */
#define RF_SESSION_ABI_VERSION 2
/* RF_SESSION_ABI_VERSION of the library actually linked or loaded. */
int rf_session_abi_version(void);

#define RF_SESSION_MAX_DIMS 8

typedef struct rf_session rf_session_t;

/* A session's role on this rank (from the topology: world ranks [0, T) train, the rest serve). */
typedef enum { RF_SESSION_TRAINER = 0, RF_SESSION_ROLLOUT = 1 } rf_session_role_t;

/* Options of rf_session_create; NULL or a zeroed struct gives the defaults. The same on every
 * rank. */
typedef struct rf_session_options {
    int layerwise; /* 1: every engine layer LAYERWISE (comparison runs); 0: the planner decides */
    int integrity; /* per-chunk checksums: 0 the topology's transfer.integrity, 1 on, -1 off */
} rf_session_options_t;

/*
 * One tensor handed to refit; refit keeps the pointer (never copies, frees or reallocates
 * the memory) until the session is destroyed or the name is registered again.
 *   name     checkpoint name on trainer ranks ("model.layers.0.self_attn.q_proj.weight"),
 *            engine parameter name on rollout ranks ("model.layers.0.self_attn.qkv_proj.weight")
 *   dtype    "BF16", "bfloat16" or "torch.bfloat16" (any spelling refit/dtype.h parses)
 *   ndim     0 .. RF_SESSION_MAX_DIMS; shape[ndim] in elements
 *   strides  in elements, strides[ndim]; every tensor must be row-major contiguous (a dim of
 *            size 1 may have any stride)
 *   data     first element (may be NULL only when the tensor has no element)
 *   device   -1: host memory; a CUDA ordinal: device memory of that GPU (rollout ranks with
 *            rollout.gpus only, and there every tensor: the ordinal of this rank's GPU as the
 *            process numbers its devices, the pointer checked with cudaPointerGetAttributes)
 * Borrowed for the call (name and dtype are copied).
 */
typedef struct rf_tensor_desc {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[RF_SESSION_MAX_DIMS];
    int64_t strides[RF_SESSION_MAX_DIMS];
    void *data;
    int device;
} rf_tensor_desc_t;

/* What rf_session_plan agreed: the same on every rank. */
typedef struct rf_session_plan_info {
    uint64_t layers[3];      /* engine layers per reload mode, summed over every rollout rank:
                                [0] DIRECT, [1] RUNTIME_VIEW, [2] LAYERWISE */
    uint64_t hash;           /* hash64 over the topology hash, the manifest digest, which
                                entries are narrowed from masters and every rollout rank's
                                per-layer decisions, in rank order */
    uint64_t manifest_digest;
    int tensors;             /* manifest entries (checkpoint tensors one update carries) */
    uint64_t payload_bytes;  /* their bytes */
    int narrowed;            /* manifest entries some trainer rank registered as an F32 master
                                (rounded to nearest even into the entry's BF16 / F16 when
                                packed); which ones is in hash */
} rf_session_plan_info_t;

/* What one rf_session_update ended with: the same verdict on every rank. */
typedef struct rf_session_result {
    int committed;          /* 1: COMMITTED (the engine's tensors hold version), 0: FAILED */
    uint64_t version;       /* the update's version (trainer rank 0's, agreed) */
    int status;             /* rf_status_t of the verdict: RF_OK or the failing rank's code */
    int failed_rank;        /* rank named by a FAILED verdict, -1 when committed */
    char reason[RF_ERR_MSG_MAX]; /* "" or the failing rank's message */
    double seconds;         /* this rank: the call's wall time */
    uint64_t bytes_sent, bytes_received;   /* this rank: chunk bytes, headers included */
    uint64_t chunks_sent, chunks_received; /* this rank */
    uint64_t rebuilds;      /* rollout: plan rebuilds at this update's begin (tensors
                               registered again with a new pointer) */
} rf_session_result_t;

/*
 * Collective over comm (borrowed; refit works on its own duplicate, so the caller's
 * communicator carries none of refit's messages). comm's size must be the topology's
 * trainer + rollout ranks; comm rank i is the topology's world rank i (rank order is the
 * placement order: trainers first). topology: a YAML file (docs/topology.md), read on comm
 * rank 0 only and broadcast with its model config.json; NULL: the compiled-in default.
 * options: NULL for the defaults. On success *s_p is a session to free with
 * rf_session_destroy; on failure *s_p is NULL on every rank, the same status everywhere, the
 * text in rf_session_last_error(NULL). Errors: RF_ERR_STATE (MPI not initialized, finalized,
 * or a thread level this thread may not call MPI at), RF_ERR_INVALID (NULL s_p, comm
 * MPI_COMM_NULL), RF_ERR_IO / RF_ERR_TOPOLOGY / RF_ERR_CONFIG (the files, the sizes),
 * RF_ERR_UNSUPPORTED (what this step does not run: GPUs, transports other than mpi, the
 * quantized models the header comment lists), RF_ERR_MPI, RF_ERR_NOMEM.
 */
rf_status_t rf_session_create(MPI_Comm comm, const char *topology,
                              const rf_session_options_t *options, rf_session_t **s_p);

/*
 * Collective. Frees everything refit allocated; the registered tensors stay the caller's,
 * untouched. NULL is a no-op (on every rank alike). Call before MPI_Finalize. Local on a
 * session lost by a failed join (see "Waits" above) and after MPI_Finalize (memory only).
 */
void rf_session_destroy(rf_session_t *s);

/*
 * Local: the teardown of a rank that cannot go on with the job (an exception between calls,
 * the Python binding's close() after an uncaught one). Makes no collective call: sends every
 * other rank of the session a notice with reason (NULL: "(no reason given)"; nonblocking,
 * never waited for), then frees refit's memory as rf_session_destroy does; refit's
 * communicators and transport state are left to MPI_Finalize or the process's exit (freeing
 * them is collective). The other ranks' next join (rf_session_plan, rf_session_begin /
 * update, rf_session_finish) fails within milliseconds, RF_ERR_PEER: "rank R left the session
 * (rf_session_destroy_local: reason)", and loses their session (destroy it, then exit non-zero
 * or start a new job). A rank already inside an update with the leaver fails it by the update
 * deadline. NULL is a no-op.
 */
void rf_session_destroy_local(rf_session_t *s, const char *reason);

/* This rank's role. Local. */
rf_session_role_t rf_session_role(const rf_session_t *s);
/* "trainer" / "rollout". Local. */
const char *rf_session_role_name(const rf_session_t *s);
/* The version of the last COMMITTED update (0: none yet). Local. */
uint64_t rf_session_version(const rf_session_t *s);
/* The tensors this rank must register (before rf_session_plan: all of them must be). Local. */
int rf_session_expected_count(const rf_session_t *s);
/* The i-th of them, 0 <= i < rf_session_expected_count: its name, and (may be NULL) its dtype
 * (safetensors spelling), ndim and shape[RF_SESSION_MAX_DIMS]. NULL when i is out of range.
 * Borrowed from s. Local. */
const char *rf_session_expected(const rf_session_t *s, int i, const char **dtype_p, int *ndim_p,
                                int64_t *shape_p);

/*
 * Local: registers n tensors (descs: n entries, borrowed for the call) on this rank.
 * Each is checked against what this rank holds under the topology: the name must be one of
 * rf_session_expected, with its dtype and shape, contiguous, on this rank's device (host
 * memory; rollout.gpus: device memory of this rank's GPU). Trainer ranks may
 * register an F32 master for a BF16 or F16 tensor (the same shape): refit rounds it to nearest
 * even whenever it packs it (rf_session_plan_info_t.narrowed counts them); any other dtype is
 * RF_ERR_MISMATCH. A trainer tensor of this rank's stage whose shard is empty here (fsdp:
 * torch.chunk gives the last ranks of a small tensor no rows) is not expected, but a
 * registration of it with 0 rows and the tensor's other dims is accepted and ignored. All or
 * nothing: every descriptor of the call is checked first, and the first bad one refuses the
 * whole call (none of its tensors registered, or re-bound after the plan): RF_ERR_INVALID (NULL s or descs with n > 0, n < 0, a NULL name or
 * data, an unknown dtype spelling, ndim out of range, non-contiguous strides), RF_ERR_EXTRA (a
 * name this rank does not hold), RF_ERR_MISMATCH (dtype or shape; both named),
 * RF_ERR_UNSUPPORTED (device >= 0 where this rank's tensors are host memory), RF_ERR_MISMATCH
 * (a device other than this rank's GPU, or a pointer that is not device memory of the
 * descriptor's ordinal: host, pinned or managed memory, another GPU), RF_ERR_INVALID too for a
 * name given twice in the call or registered twice before rf_session_plan; the message names
 * the tensor and this rank.
 *
 * A refused registration is remembered: the next collective call that uses the registered
 * set fails on every rank carrying its text (before a plan: rf_session_plan; after: the next
 * rf_session_update, which then moves nothing), then it is forgotten and the session is
 * usable again: register what was wrong, and plan or update again. Before the plan, an
 * accepted rf_session_register call after the refused one forgets it at once (the refused
 * call registered nothing; a tensor still missing fails the plan, named).
 *
 * After a successful rf_session_plan, a registration must name a registered tensor with the
 * same dtype (the one it was registered with: a master stays a master) and shape (the caller
 * re-allocated it): refit reads or writes the new memory
 * from the next update on (rollout ranks rebuild that update's reload plan; its result
 * counts the rebuild). Nothing is written into any tensor by this call.
 */
rf_status_t rf_session_register(rf_session_t *s, const rf_tensor_desc_t *descs, int n);

/*
 * Local, trainer ranks, before rf_session_plan, instead of rf_session_register: this rank's
 * shards come from the checkpoint at path (a safetensors directory: model.safetensors or
 * shards with model.safetensors.index.json; or a refit HDF5 file, .h5 / .hdf5, or a directory
 * holding model.h5: docs/formats.md), read by refit into buffers it allocates, exactly as
 * refit-run --checkpoint reads it: this rank's rows and columns only (docs/design.md,
 * "Trainer shards and the stage gather"; trainer.layout megatron or fsdp), with collective
 * MPI-IO reads by the trainer ranks of each
 * stage where libhdf5 is parallel. Checked here: the checkpoint opens, its own config (an HDF5
 * root attribute config, or config.json beside the safetensors) agrees with the topology's
 * model, and it holds every tensor of this rank's stage with the inventory's dtype and shape.
 * When it is read: every rf_session_update opens path again at its begin (so a trainer that
 * writes a new checkpoint to the same path between updates sends the new one), checks it as
 * above, then reads the shards after every rank agreed to go; a check or read that fails
 * fails that update on every rank (at its begin: nothing written into the engine). Every
 * trainer rank registers a checkpoint or none does (rf_session_plan refuses a mix).
 *
 * Errors (the message names path, and the tensor where one is at fault): RF_ERR_INVALID (NULL
 * s or path; tensors or a checkpoint registered on this rank already), RF_ERR_STATE (a rollout
 * rank; after rf_session_plan), RF_ERR_IO / RF_ERR_PARSE (path does not open as a checkpoint),
 * RF_ERR_CONFIG (its config is another model's), RF_ERR_MISSING (a tensor this rank holds is
 * not in it), RF_ERR_MISMATCH (a tensor's dtype or shape). A refusal is remembered as a
 * refused rf_session_register is: rf_session_plan then fails on every rank with its text, and
 * the session stays usable (register again, plan again).
 */
rf_status_t rf_session_register_checkpoint(rf_session_t *s, const char *path);

/*
 * Collective, once per session (RF_ERR_STATE afterwards, or before any rf_session_create
 * succeeded): every rank checks that it registered every tensor it holds (RF_ERR_MISSING
 * naming the first missing one and the count) and had no refused registration; a failure on
 * any rank fails every rank with the lowest failing rank's text, and the session stays
 * usable (register, plan again). Then the manifest (trainer rank 0 builds it from the
 * inventory, every rank validates it), the chunk plan and the reload plans against the
 * registered tensors' real signatures. *info (may be NULL): what was agreed. Writes nothing
 * into any registered tensor.
 */
rf_status_t rf_session_plan(rf_session_t *s, rf_session_plan_info_t *info);

/*
 * Collective: one weight update. version: the trainer's number for these weights (0: the last
 * version + 1); trainer rank 0's is the update's, and any other trainer rank passing a
 * different non-zero one fails the update; rollout ranks pass 0 (their value is ignored).
 * Versions need not increase: one equal to or below the last is committed as given
 * (rf_session_version then returns it).
 * Begin (every rank agrees to go, or the update FAILED: a refused registration, an
 * rf_session_abort, a rebuilt plan that no longer fits), transfer (trainer ranks read their
 * registered shards in place; rollout ranks write into their registered tensors), finish
 * (every expected piece arrived), then the completion gate: COMMITTED on every rank or FAILED
 * on every rank, in *result (required). A FAILED begin writes nothing into the engine's
 * tensors; a failure during the transfer may have written part of them (the engine must not
 * serve them before the next COMMITTED update).
 *
 * Returns RF_OK when the update ran to a verdict (committed or not: see result->committed);
 * RF_ERR_STATE before a successful rf_session_plan (nothing communicated: every rank is in
 * the same state), RF_ERR_INVALID for NULL arguments; otherwise the verdict's error when this
 * rank got no verdict (RF_ERR_TIMEOUT, RF_ERR_MPI).
 */
rf_status_t rf_session_update(rf_session_t *s, uint64_t version, rf_session_result_t *result);

/*
 * The update in two calls, for engines that pause generation in between (vLLM's start / finish
 * weight update, SGLang's pause -> update -> continue); rf_session_update is rf_session_begin
 * then rf_session_finish.
 *
 * rf_session_begin, collective: version as rf_session_update's; the begin agreement (every
 * rank agrees to go, or the update is FAILED: the reasons rf_session_update lists). Nothing is
 * written into any tensor yet. Returns RF_OK once the begin ran, whatever it agreed (the
 * verdict comes from rf_session_finish, which must follow on every rank); RF_ERR_STATE before a
 * successful rf_session_plan or when an update began already (nothing communicated),
 * RF_ERR_MPI.
 *
 * rf_session_finish, collective: the transfer (trainer ranks read their tensors or checkpoint,
 * rollout ranks' tensors are written), finish and the completion gate, as rf_session_update;
 * *result (required) as rf_session_update's, its seconds from the begin. Its deadline counts
 * from this call, not from the begin. A tensor registered again on any rank between the two
 * calls (the engine re-allocated a parameter while paused) fails the update on every rank
 * before anything moves: status RF_ERR_MOVED, failed_rank that rank, the reason naming the
 * tensor; the engine's tensors are untouched (the old and the new memory), and refit uses the
 * new memory from the next update on (a rollout rank's plan rebuilds at that begin).
 * Errors: RF_ERR_INVALID (NULL), RF_ERR_STATE (no update began), as rf_session_update.
 */
rf_status_t rf_session_begin(rf_session_t *s, uint64_t version);
rf_status_t rf_session_finish(rf_session_t *s, rf_session_result_t *result);

/*
 * Local: this rank's next rf_session_update fails at its begin, with "aborted by the caller:
 * <reason>" (reason may be NULL) as the verdict's reason on every rank; nothing moves.
 */
rf_status_t rf_session_abort(rf_session_t *s, const char *reason);

/* ---- offline planning: a topology's plans without its ranks (refit-plan) ---------------- */

/*
 * What rf_session_plan would agree for a topology, computed in one process: no MPI call (MPI
 * need not be initialized), nothing registered, no memory committed (each rollout rank's
 * runtime storage is reserved with mmap(MAP_NORESERVE, PROT_NONE) while its plan is built,
 * then released), any topology size. refit-plan is this API's client.
 *
 *   rf_session_offline_open       local  the topology and its model config read and checked as
 *                                        rf_session_create reads them, the inventory, the
 *                                        format owner, the manifest trainer rank 0 would build
 *   rf_session_offline_plan_rank  local  one rollout rank's reload plan, as that rank of a
 *                                        session builds it over its registered tensors
 *   rf_session_offline_plan       local  every rollout rank's (those not planned yet): the
 *                                        rf_session_plan_info_t of a session of the topology
 *   rf_session_offline_close      local
 *
 * Equality with a session (tests/mpi/check_session_offline.c): for a topology a session runs,
 * rf_session_offline_plan gives the layers, hash, manifest_digest, tensors and payload_bytes
 * that rf_session_plan returns on every rank of that session with the same layerwise option,
 * when its trainers register every tensor in the checkpoint's dtype (narrowed = 0: F32
 * masters change the hash, which covers which entries are narrowed) and its engines register
 * the rf_session_expected tensors (contiguous, as rf_session_register requires: the plan's
 * decisions read signatures, never addresses or devices). Topologies only refit-run runs
 * (other transports and backends, the quantized formats the session API refuses) are planned
 * as refit-run's job plans them (its storage allocated by refit, the same planner): create's
 * refusals of what this step of the session API does not run are not repeated here.
 */
typedef struct rf_session_offline rf_session_offline_t;

/* The topology rf_session_offline_open read (strings borrowed from the handle). */
typedef struct rf_session_offline_desc {
    const char *name;           /* the topology's name */
    const char *model_type;     /* config.json model_type ("llama") */
    const char *architecture;   /* config.json architectures[0] ("LlamaForCausalLM") */
    int model_layers;           /* num_hidden_layers (after model.overrides) */
    int tensors;                /* checkpoint tensors of the inventory */
    uint64_t elements;          /* their elements */
    const char *quantization;   /* "none", "fp8-block", ... (the topology's, bound to the config) */
    const char *backend;        /* rollout.backend */
    const char *format_owner;   /* the format owner the rollout ranks plan with */
    int trainer_ranks, rollout_ranks; /* world ranks [0, trainer_ranks) train, the rest serve */
    const char *mode;           /* transfer.mode: "broadcast" or "p2p" (the plan's form) */
} rf_session_offline_desc_t;

/* One rollout rank's reload plan. */
typedef struct rf_session_rank_plan {
    int rank;                   /* world rank (trainer_ranks + j) */
    int engine, tp_rank, dp_rank, ep_rank; /* its engine and coordinates (docs/topology.md) */
    int nlayers;                /* engine layers (modules) of the plan */
    uint64_t layers[3];         /* of them per reload mode: [0] DIRECT, [1] RUNTIME_VIEW,
                                   [2] LAYERWISE */
    uint64_t applications;      /* the plan's applications that apply (broadcast: one per
                                   checkpoint tensor the rank loads; p2p: per sender) */
    uint64_t declined;          /* applications the format owner declined (not loaded here) */
    uint64_t storage_bytes;     /* bytes of its runtime storage: what the engine registers */
    uint64_t hash;              /* its per-layer decisions as rf_session_plan hashes them */
} rf_session_rank_plan_t;

/*
 * Local. topology: a YAML file (NULL: the compiled-in default), read with its model
 * config.json as rf_session_create's rank 0 reads them (the same checks, bar the communicator
 * size). options: NULL or as rf_session_create's (layerwise: every layer LAYERWISE; integrity
 * does not change a plan). format_owner: NULL for the topology's (quantization, backend) owner
 * (the one a session uses), or a registered owner's name (refit-run --format-owner; then no
 * session plans the same). On success *o_p is a handle for rf_session_offline_close; on
 * failure NULL, the text in rf_session_offline_last_error(NULL). Errors: RF_ERR_INVALID (NULL
 * o_p; an unknown format_owner), RF_ERR_IO / RF_ERR_PARSE / RF_ERR_TOPOLOGY / RF_ERR_CONFIG
 * (the files, the model against the topology, naming the key), RF_ERR_UNSUPPORTED (what the
 * inventory or the manifest refuses, naming the module), RF_ERR_NOMEM.
 */
rf_status_t rf_session_offline_open(const char *topology, const rf_session_options_t *options,
                                    const char *format_owner, rf_session_offline_t **o_p);
/* What o read. Local; borrowed from o (NULL for a NULL o). */
const rf_session_offline_desc_t *rf_session_offline_describe(const rf_session_offline_t *o);
/*
 * Local: rollout rank `rank` (world rank, trainer_ranks <= rank < trainer_ranks +
 * rollout_ranks) planned as that rank of a session plans it (its coordinates checked, its
 * runtime storage laid out by the format owner and reserved, the plan built in the
 * topology's transfer.mode form) into *out (required); remembered for
 * rf_session_offline_plan. Errors (the text names the rank and the module): RF_ERR_INVALID
 * (NULL, rank out of range), what the planner refuses (RF_ERR_TOPOLOGY, RF_ERR_UNSUPPORTED),
 * RF_ERR_NOMEM (the address space for the reservation).
 */
rf_status_t rf_session_offline_plan_rank(rf_session_offline_t *o, int rank,
                                         rf_session_rank_plan_t *out);
/*
 * Local: every rollout rank not planned yet planned as above, then *info (required): what
 * rf_session_plan of a session of the topology returns (layers summed over the rollout ranks,
 * the plan hash over every rank's decisions, the manifest's digest, tensors and payload
 * bytes; narrowed 0). Errors: as rf_session_offline_plan_rank's, for the first rank that fails.
 */
rf_status_t rf_session_offline_plan(rf_session_offline_t *o, rf_session_plan_info_t *info);
/* The text of the last failing call on o ("" when none); NULL: the last failed
 * rf_session_offline_open of this thread. Borrowed; valid until the next call on o. */
const char *rf_session_offline_last_error(const rf_session_offline_t *o);
/* Local. NULL is a no-op. */
void rf_session_offline_close(rf_session_offline_t *o);

/*
 * A local check for one update, computed by another thread while the update runs (the Python
 * binding's check that no registered tensor moved: milliseconds of Python over thousands of
 * tensors, overlapped with the transfer instead of before it; runtime/session_check.c).
 *
 * rf_session_check_arm, local, on the thread that makes the collective calls, after a
 * successful rf_session_plan: arms this rank's check and gives its ticket (*ticket_p, >= 1).
 * The next rf_session_update or rf_session_finish on this rank consumes it, whatever it
 * returns: when the update reaches its completion gate with this rank's own status RF_OK, it
 * first waits for the ticket's rf_session_check_post, at most timeout_s seconds (counted from
 * the start of that wait, never past the update's deadline, transfer.timeout_s). A post of
 * RF_OK lets the update go on; a post of an error status fails it on every rank (the gate
 * carries it: committed 0, status that status, failed_rank this rank, the reason "rank R
 * (role): update U: its local check failed: <the post's reason>"); no post in time fails it
 * alike with RF_ERR_TIMEOUT ("... its local check ... was not posted within ... s"). Either
 * failure happens after the transfer: the rollout's registered tensors may hold part of the
 * update and the engine must not serve them before the next COMMITTED update (as any failure
 * during a transfer; include/refit/session.h rf_session_update). An update whose own status
 * failed before the gate does not wait. Errors: RF_ERR_INVALID (NULL s or ticket_p, timeout_s
 * not in (0, 3600]), RF_ERR_STATE (before a plan, a ticket armed already). On a lost session
 * it returns RF_OK with a ticket that arms nothing (its post is refused, RF_ERR_STATE): the
 * rf_session_update or rf_session_finish it precedes reports the loss, naming itself.
 *
 * rf_session_check_post, local, from ANY thread of the process (it locks the check's mutex
 * and makes no MPI call; so the MPI thread level rf_session_create requires is all this
 * needs): the armed ticket's verdict, status RF_OK or a negative rf_status_t (RF_ERR_MOVED:
 * a registered tensor moved), reason (may be NULL; copied, at most RF_ERR_MSG_MAX - 1 bytes)
 * naming what failed. Returns RF_OK, RF_ERR_INVALID (NULL s, status > 0) or RF_ERR_STATE
 * (ticket not armed: consumed, timed out, posted already or never given); its errors set no
 * text (rf_session_last_error belongs to the calling thread of the collectives). s must stay
 * alive until the call returns: no post may race rf_session_destroy.
 */
rf_status_t rf_session_check_arm(rf_session_t *s, double timeout_s, uint64_t *ticket_p);
rf_status_t rf_session_check_post(rf_session_t *s, uint64_t ticket, int status,
                                  const char *reason);

/*
 * The text of this rank's last error on s (the last call that failed; "" when none). NULL:
 * the last rf_session_create failure of this thread. Borrowed; valid until the next call on s.
 */
const char *rf_session_last_error(const rf_session_t *s);

/* "RF_ERR_MISMATCH" / "mismatch" for a status (refit/status.h). */
const char *rf_session_status_name(int status);
const char *rf_session_status_string(int status);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_SESSION_H */
