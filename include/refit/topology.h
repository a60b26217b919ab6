/*
 * refit: topology files (DESIGN.md section 3).
 *
 * A topology file (YAML, parsed with libyaml) names the model, the trainer's parallel grid (tp, cp,
 * pp, dp, etp, ep, order, pp_layers, layout, gpus), the rollout side (engines x tp x dp, ep, expert
 * placement, backend, layout, gpus), colocation and the transfer settings. Unknown and duplicate
 * keys, YAML aliases, wrong types and sizes that do not divide are errors naming the key and value.
 * Rank 0 reads the file (and the model's config.json) and broadcasts the text; every rank parses it
 * and all agree on rf_topology_hash() of the canonical form (that collective loading, and the rules
 * against the model config, are model.h's: rf_model_load_topology(), rf_model_check_topology()).
 * Nothing here needs the model config.
 */
#ifndef REFIT_TOPOLOGY_H
#define REFIT_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_PATH_MAX 1024
#define RF_MAX_GPUS 64
#define RF_MAX_STAGES 256

/* The weight quantization a topology names (model.quantization). */
typedef enum {
    RF_QUANT_NONE = 0,
    RF_QUANT_FP8_BLOCK,
    RF_QUANT_WNA16,
    RF_QUANT_FP8_TENSOR,  /* e4m3 weight, one fp32 scale per linear (compressed-tensors
                             float-quantized, strategy tensor; fp8 without weight_block_size) */
    RF_QUANT_FP8_CHANNEL, /* e4m3 weight, one fp32 scale per output row (strategy channel) */
} rf_quant_t;

/* "none", "fp8-block", "wna16", "fp8-tensor", "fp8-channel" */
const char *rf_quant_name(rf_quant_t q);
/* 0 and *out set on success; -1 if unknown. */
int rf_quant_parse(const char *s, rf_quant_t *out);

typedef enum { RF_TRANSPORT_MPI = 0, RF_TRANSPORT_NCCL, RF_TRANSPORT_IPC } rf_transport_kind_t;
typedef enum { RF_MODE_BROADCAST = 0, RF_MODE_P2P } rf_mode_t;
typedef enum {
    RF_BACKEND_TRITON = 0,
    RF_BACKEND_CUTLASS,
    RF_BACKEND_ROCM_FNUZ,
    RF_BACKEND_MARLIN,
} rf_backend_t;

const char *rf_transport_name(rf_transport_kind_t t);
const char *rf_mode_name(rf_mode_t m);
const char *rf_backend_name(rf_backend_t b);

/*
 * trainer.layout: how trainer ranks hold the checkpoint tensors (include/refit/trainer.h).
 *   megatron (default): DESIGN.md section 6, TP / EP shards replicated over DP and CP;
 *   fsdp: torch FSDP2's Shard(0) over the data-parallel ranks of each pipeline stage: every
 *     tensor split along dim 0 in ceil(N / dp) rows per rank (tp, cp, etp, ep 1).
 */
typedef enum { RF_TRAINER_LAYOUT_MEGATRON = 0, RF_TRAINER_LAYOUT_FSDP } rf_trainer_layout_t;
/* trainer.dp at most this under fsdp: every rank of a stage is a copy of record of each of
 * its tensors (the owner tables of include/refit/trainer.h hold RF_MAX_OWNERS) */
#define RF_FSDP_MAX_DP 64
/* rollout.layout: the engine's tensors. vllm (default): the fused engine modules (qkv_proj,
 * gate_up_proj, experts w13 / w2); hf: a transformers 5 model's named_parameters(), per rank
 * (rf_inventory_apply_layout in include/refit/model.h; docs/topology.md lists the formats). */
typedef enum { RF_ROLLOUT_LAYOUT_VLLM = 0, RF_ROLLOUT_LAYOUT_HF } rf_rollout_layout_t;

const char *rf_trainer_layout_name(rf_trainer_layout_t l);
const char *rf_rollout_layout_name(rf_rollout_layout_t l);

/* rollout.expert_placement */
typedef enum {
    RF_PLACE_LINEAR = 0,
    RF_PLACE_ROUND_ROBIN,
} rf_expert_placement_t;

/* A rollout rank's shard coordinates, as rf_topology_rank_info() computes them and the
 * loader arithmetic of model.h takes them. */
typedef struct rf_rollout_coords {
    int tp, tp_rank; /* T_r, r */
    int dp, dp_rank;
    int ep, ep_rank; /* ep is 1 (experts TP-sharded) or tp * dp */
    rf_expert_placement_t placement;
} rf_rollout_coords_t;

typedef struct rf_topology {
    char name[128];              /* default: the file's stem */
    /* model */
    char model_config[RF_PATH_MAX]; /* as written in the file */
    char model_config_path[RF_PATH_MAX]; /* resolved against the file's folder */
    rf_quant_t quantization;     /* default none (or from quantization_config) */
    bool quantization_set;       /* given in the file */
    int64_t group_size;          /* default 128 */
    bool group_size_set;
    int64_t ov_num_hidden_layers; /* overrides; -1 = not set */
    int64_t ov_num_experts;
    int64_t ov_vocab_size;
    bool mtp;                    /* model.mtp (default false): the multi-token-prediction
                                    layers are engine modules too (vLLM's draft model:
                                    DeepSeekMTP, Qwen3NextMTP); false skips them */
    /* trainer */
    int t_tp, t_cp, t_pp, t_dp, t_etp, t_ep; /* etp defaults to tp */
    char t_order[32];            /* "tp-cp-ep-dp-pp" only */
    rf_trainer_layout_t t_layout;     /* default megatron */
    int64_t pp_layers[RF_MAX_STAGES]; /* layers per stage (even split if not given) */
    bool pp_layers_set;
    int t_gpus[RF_MAX_GPUS];
    int t_ngpus;                 /* 0: CPU */
    /* rollout */
    int r_engines, r_tp, r_dp, r_ep;
    rf_expert_placement_t r_placement;
    rf_backend_t r_backend;
    rf_rollout_layout_t r_layout; /* default vllm */
    int r_gpus[RF_MAX_GPUS];
    int r_ngpus;
    bool colocated;
    /* transfer */
    rf_transport_kind_t transport;
    rf_mode_t mode;
    uint64_t chunk_bytes;        /* default 64 MiB; mpi: at most 2^31 - 256 */
    int buffers;                 /* default 2 */
    int p2p_inflight;            /* p2p senders on mpi: receivers with chunks in flight at once
                                    (transport.h rf_xfer_send_p2p); 0: the default,
                                    RF_XFER_P2P_INFLIGHT_DEFAULT */
    double timeout_s;            /* default 300 */
    bool integrity;              /* default true (checksum trailer per chunk) */
    double min_bandwidth;        /* bytes/s; default 100 MB/s (mpi), 10 GB/s (nccl, ipc) */
    double slack_s;              /* default 10 */
    double join_timeout_s;       /* default 1800: how long a session call waits for every
                                    rank to reach it (include/refit/session.h); not hashed:
                                    it changes no plan */
    /* added by the topology module */
    char file[RF_PATH_MAX];      /* path given to rf_topology_parse, for messages (not hashed);
                                    "default.yaml" for the compiled-in copy */
    int64_t model_layers;        /* L after overrides; 0 until rf_model_bind_topology() */
} rf_topology_t;

/*
 * Parses YAML text (len bytes). `path` is the file's path (for errors, the default name and
 * resolving model.config); NULL for the compiled-in default, which resolves against the
 * current folder and is named "default". Errors: RF_ERR_TOPOLOGY with "<path>: <key>: ..."
 * messages. Does not read config.json. Not collective.
 */
rf_status_t rf_topology_parse(const char *yaml, size_t len, const char *path,
                              rf_topology_t *topo_p, rf_err_t *err);

/* T = tp * cp * pp * dp; R = engines * tp * dp. */
int rf_topology_trainer_size(const rf_topology_t *topo);
int rf_topology_rollout_size(const rf_topology_t *topo);

/* 64-bit hash (XXH3) of the canonical serialization of the parsed topology. */
uint64_t rf_topology_hash(const rf_topology_t *topo);
/* Canonical text form (one "key: value" per line, every key, fixed order). Returns the length
 * it needs (snprintf-like). */
size_t rf_topology_canonical(const rf_topology_t *topo, char *buf, size_t cap);

/*
 * Size and rate values of topology files: an integer with an optional suffix KiB / MiB /
 * GiB / TiB (binary) or KB / MB / GB / TB (decimal) or B; rates end in "/s" ("100MB/s",
 * "10GB/s", "1.5GB/s"). RF_ERR_PARSE on anything else or on overflow. Not collective.
 */
rf_status_t rf_topology_parse_size(const char *text, uint64_t *bytes_p);
rf_status_t rf_topology_parse_rate(const char *text, double *bytes_per_s_p);

/*
 * The (quantization, backend) pair rule of DESIGN.md section 3: fp8-block with triton,
 * cutlass or rocm-fnuz, wna16 with triton or marlin. `file` names the topology file in the
 * message. Errors: RF_ERR_TOPOLOGY. Pure.
 */
rf_status_t rf_topology_check_quant_backend(const char *file, rf_quant_t q, rf_backend_t b,
                                            rf_err_t *err);

/* ---- rank placement ----------------------------------------------------------------- */

typedef enum { RF_ROLE_TRAINER = 0, RF_ROLE_ROLLOUT = 1 } rf_role_t;

typedef struct rf_rank_info {
    rf_role_t role;
    int world_rank;
    /* trainer: dense grid w = t + TP (c + CP (d + DP p)); expert grid
     * w = u + ETP (q + EP (x + EDP p)), EDP = T / (ETP EP PP) */
    int t, c, d, p;
    int u, q, x;
    /* rollout: j = w - T, e = j / (tp dp), l = j mod (tp dp), tp_rank = l mod tp,
     * dp_rank = l / tp, ep_rank = dp_rank tp + tp_rank */
    int engine;
    rf_rollout_coords_t rc;
} rf_rank_info_t;

/* Coordinates of world rank w. RF_ERR_INVALID if w is outside [0, T + R). */
rf_status_t rf_topology_rank_info(const rf_topology_t *topo, int world_rank,
                                  rf_rank_info_t *info_p);
/* World rank of trainer coordinates (dense grid). */
int rf_topology_trainer_rank(const rf_topology_t *topo, int t, int c, int d, int p);
/* World rank of rollout (engine, tp_rank, dp_rank). */
int rf_topology_rollout_rank(const rf_topology_t *topo, int engine, int tp_rank, int dp_rank);
/* First layer of stage p and its layer count (pp_layers or the even split). */
void rf_topology_stage_layers(const rf_topology_t *topo, int p, int64_t *first_p,
                              int64_t *count_p);
/* Stage holding a tensor's layer (embed -1 -> 0, final L -> pp - 1). */
int rf_topology_layer_stage(const rf_topology_t *topo, int layer, int64_t num_layers);

/* ---- device placement (topology/topology_mpi.c) ------------------------------------- */

#define RF_HOST_MAX 256

/* What every rank contributes to the placement all-gather (DESIGN.md section 3). */
typedef struct rf_rank_record {
    char host[RF_HOST_MAX];  /* MPI_Get_processor_name() */
    int node_leader;         /* lowest rank of comm on the same shared-memory node */
    int local_index;         /* index among the ranks of its role on its node */
    int device;              /* role.gpus[local_index], or -1 on CPU ("host") */
    char device_id[64];      /* "host" or "gpu<N>" (GPU UUIDs once CUDA is in) */
    rf_rank_info_t info;     /* role and coordinates, as this rank computed them */
} rf_rank_record_t;

/* Where this rank runs and whom it pairs with. */
typedef struct rf_placement {
    rf_rank_info_t info;     /* role and coordinates */
    int rank;                /* rank in the communicator (== world rank of the topology) */
    int node;                /* node index: nodes numbered by their lowest rank */
    int nnodes;
    int local_index;         /* index among the ranks of its role on its node */
    int device;              /* GPU ordinal from <role>.gpus, -1 for host */
    char device_id[64];      /* "host" or "gpu<N>" */
    char host[RF_HOST_MAX];
    int pair_rank;           /* colocated: the other role's rank on (node, local_index); -1 */
} rf_placement_t;

/*
 * Checks all ranks' records against the topology and fills rank `rank`'s placement. Pure and
 * deterministic, so every rank reaches the same verdict and message: wrong rank count, a
 * record whose coordinates disagree with the file, more ranks of a role on a node than that
 * role's gpus list, two ranks on one GPU where the file does not say colocated (or that are
 * not a trainer / rollout pair with the same local index), a colocated rank without its
 * pair. recs: borrowed, n entries indexed by rank. Errors: RF_ERR_TOPOLOGY naming rank and
 * host. Not collective.
 */
rf_status_t rf_placement_resolve(const rf_topology_t *topo, const rf_rank_record_t *recs, int n,
                                 int rank, rf_placement_t *out_p, rf_err_t *err);

/*
 * Collective over comm: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), then a split by role
 * ordered by rank gives each rank its local index i and device <role>.gpus[i] (-1, "host",
 * without gpus); every rank all-gathers rf_rank_record_t and runs rf_placement_resolve().
 * topo: borrowed. out_p: set on success. Errors: RF_ERR_TOPOLOGY (the same on every rank),
 * RF_ERR_MPI, RF_ERR_NOMEM.
 */
rf_status_t rf_topology_place(const rf_topology_t *topo, MPI_Comm comm, rf_placement_t *out_p,
                              rf_err_t *err);

/* The compiled-in copy of jobs/topologies/default.yaml. */
extern const char rf_default_topology_yaml[];

/* ---- NCCL communicators (topology/topology_nccl.c; DESIGN.md section 9, "nccl") ---------- */

/*
 * One NCCL communicator of the nccl transport: communicator rank i is world rank ranks[i].
 * Broadcast mode: one per trainer pipeline stage p = the stage sender (t=0, c=0, d=0, p) as
 * rank 0 (the ncclBroadcast root) + every rollout rank in world order. p2p mode: one per stage
 * p = every trainer rank of stage p in world order + every rollout rank. Broadcast mode also
 * has, after those, one trainer-only gather communicator per stage with more than one trainer
 * rank: the stage sender as rank 0 + the stage's other trainer ranks in world order (the stage
 * gather of include/refit/trainer.h; p2p has no gather).
 */
typedef struct rf_nccl_comm_layout {
    int stage;  /* trainer pipeline stage it serves */
    int gather; /* 1: the stage's trainer-only gather communicator; 0: a data communicator */
    int n;      /* ranks */
    int *ranks; /* [n] world ranks, owned by the layout */
} rf_nccl_comm_layout_t;

typedef struct rf_nccl_layout {
    int p2p;                      /* 0: broadcast (ncclBroadcast from rank 0); 1: p2p */
    int n;                        /* communicators: [0, pp) data, one per stage; then gathers */
    rf_nccl_comm_layout_t *comms; /* [n], owned */
} rf_nccl_layout_t;

/* The communicators of DESIGN.md section 9 for topo (borrowed; its transfer.mode picks
 * broadcast or p2p). Pure, the same on every rank. *l: free with rf_nccl_layout_free.
 * RF_OK or RF_ERR_NOMEM. */
rf_status_t rf_nccl_layout_build(const rf_topology_t *topo, rf_nccl_layout_t *l, rf_err_t *err);
/* NULL and a zeroed layout are fine. */
void rf_nccl_layout_free(rf_nccl_layout_t *l);
/* Communicator rank of world rank w in c, -1 when w is not a member. Pure. */
int rf_nccl_comm_rank(const rf_nccl_comm_layout_t *c, int w);
/* Index of the first communicator holding both world ranks a and b, -1 when none. Pure. */
int rf_nccl_layout_find(const rf_nccl_layout_t *l, int a, int b);
/* "stage 0 broadcast communicator (world ranks 0, 2, 3)" (or "stage 0 gather communicator
 * (...)") for messages. Pure. */
void rf_nccl_layout_describe(const rf_nccl_layout_t *l, int k, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_TOPOLOGY_H */
