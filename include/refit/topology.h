/*
 * refit: topology files (DESIGN.md section 3).
 *
 * A topology file (YAML, parsed with libyaml) names the model, the trainer's parallel grid
 * (tp, cp, pp, dp, etp, ep, order, pp_layers, gpus), the rollout side (engines x tp x dp,
 * ep, expert placement, backend, gpus), colocation and the transfer settings. Unknown and
 * duplicate keys, YAML aliases, wrong types and sizes that do not divide are errors naming
 * the key and value. Rank 0 reads the file (and the model's config.json) and broadcasts the
 * text; every rank parses it and all agree on rf_topology_hash() of the canonical form.
 */
#ifndef REFIT_TOPOLOGY_H
#define REFIT_TOPOLOGY_H

#include <stdbool.h>
#include <stdint.h>

#include "refit/model.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_PATH_MAX 1024
#define RF_MAX_GPUS 64
#define RF_MAX_STAGES 256

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
    /* trainer */
    int t_tp, t_cp, t_pp, t_dp, t_etp, t_ep; /* etp defaults to tp */
    char t_order[32];            /* "tp-cp-ep-dp-pp" only */
    int64_t pp_layers[RF_MAX_STAGES]; /* layers per stage (even split if not given) */
    bool pp_layers_set;
    int t_gpus[RF_MAX_GPUS];
    int t_ngpus;                 /* 0: CPU */
    /* rollout */
    int r_engines, r_tp, r_dp, r_ep;
    rf_expert_placement_t r_placement;
    rf_backend_t r_backend;
    int r_gpus[RF_MAX_GPUS];
    int r_ngpus;
    bool colocated;
    /* transfer */
    rf_transport_kind_t transport;
    rf_mode_t mode;
    uint64_t chunk_bytes;        /* default 64 MiB; mpi: at most 2^31 - 256 */
    int buffers;                 /* default 2 */
    double timeout_s;            /* default 300 */
    bool integrity;              /* default false */
    double min_bandwidth;        /* bytes/s; default 100 MB/s (mpi), 10 GB/s (nccl, ipc) */
    double slack_s;              /* default 10 */
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

/*
 * Applies model.overrides to a copy of the config (and checks the topology's quantization
 * against the config's quantization_config), then checks every size rule of DESIGN.md
 * sections 3 and 5 against the model: heads, KV heads, layers / pp_layers, vocab,
 * intermediate sizes, experts, (quantization, backend) pairs, world size == T + R
 * (world_size <= 0 skips that check). cfg_p receives the overridden config.
 * Errors: RF_ERR_TOPOLOGY naming the key and the sizes. Not collective.
 */
rf_status_t rf_topology_check_model(const rf_topology_t *topo, const rf_model_config_t *cfg,
                                    int world_size, rf_model_config_t *cfg_p, rf_err_t *err);

/* 64-bit hash (XXH3) of the canonical serialization of the parsed topology. */
uint64_t rf_topology_hash(const rf_topology_t *topo);
/* Canonical text form (one "key: value" per line, every key, fixed order). Returns the length
 * it needs (snprintf-like). */
size_t rf_topology_canonical(const rf_topology_t *topo, char *buf, size_t cap);

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

/* The compiled-in copy of jobs/topologies/default.yaml. */
extern const char rf_default_topology_yaml[];

#ifdef __cplusplus
}
#endif
#endif /* REFIT_TOPOLOGY_H */
