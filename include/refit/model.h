/*
 * refit: model config and inventory (DESIGN.md section 4).
 *
 * From a Hugging Face config.json the runtime derives every checkpoint tensor (name, dtype,
 * shape, layer, expert, how the trainer splits it, which engine module and slot receives it)
 * and every engine module (vLLM's module set: qkv_proj, o_proj, gate_up_proj, down_proj,
 * embed_tokens, lm_head, norms, experts). Per-rank slot shapes follow the loader arithmetic
 * of DESIGN.md section 5 and are computed by rf_module_slots().
 *
 * Families: Llama, Qwen2 (q/k/v bias), Qwen3 (q_norm/k_norm) dense; Qwen3-MoE; GPT-NeoX
 * (Pythia: fused query_key_value interleaved per head, LayerNorm with biases) and OPT (learned
 * positions, fc1 / fc2, project_in / project_out); Qwen3-Next (Gated DeltaNet layers with
 * sectioned in_proj_qkvz / in_proj_ba / conv1d / A_log / dt_bias, gated full attention, MoE
 * with a shared expert); DeepSeek-V3 / Moonlight (MLA: q_proj or q_a_proj + q_a_layernorm +
 * q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; dense layers up to
 * first_k_dense_replace, routed plus shared experts), in vLLM's engine layout.
 *
 * model/ stands above topology/: the rules of a parsed topology against the model config
 * (rf_model_check_topology, rf_model_bind_topology) and the collective loading of both files
 * (rf_model_load_topology) are here; topology.h knows no model config.
 */
#ifndef REFIT_MODEL_H
#define REFIT_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/status.h"
#include "refit/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_MAX_DIMS 8
#define RF_NAME_MAX 160
#define RF_MODULE_MAX_SLOTS 8

typedef enum {
    RF_FAMILY_LLAMA = 0,
    RF_FAMILY_QWEN2,
    RF_FAMILY_QWEN3,
    RF_FAMILY_QWEN3_MOE,
    RF_FAMILY_GPT_NEOX,
    RF_FAMILY_OPT,
    RF_FAMILY_QWEN3_NEXT,
    RF_FAMILY_DEEPSEEK_V3, /* DeepSeek-V3 / Moonlight: MLA attention, shared experts */
    RF_FAMILY_GRANITEMOE, /* GraniteMoE (PowerMoE): experts fused into 3-D tensors */
} rf_family_t;

/* config.json, after the key alias table of DESIGN.md section 4. Owned strings freed by
 * rf_model_config_free(). */
typedef struct rf_model_config {
    rf_family_t family;
    char model_type[32];     /* "llama", "qwen2", "qwen3", "qwen3_moe", "gpt_neox", "opt",
                                "qwen3_next", "deepseek_v3", "granitemoe" */
    char architecture[64];   /* architectures[0] */
    rf_dtype_t dtype;        /* torch_dtype or dtype */
    int64_t hidden_size;     /* H */
    int64_t num_hidden_layers; /* L */
    int64_t vocab_size;      /* V */
    int64_t num_attention_heads; /* nh */
    int64_t num_key_value_heads; /* nkv (defaults to nh) */
    int64_t head_dim;        /* d: head_dim if present and not null, else H / nh */
    int64_t intermediate_size; /* I (dense MLP; OPT: ffn_dim) */
    int64_t num_experts;     /* E: num_experts | num_local_experts | n_routed_experts; 0 dense */
    int64_t moe_intermediate_size; /* Im */
    int64_t decoder_sparse_step;   /* qwen3_moe; 1 if absent */
    int64_t num_experts_per_tok;
    int64_t *mlp_only_layers;      /* owned; layers with a dense MLP in a MoE model */
    int n_mlp_only_layers;
    bool tie_word_embeddings;
    bool qkv_bias;           /* Qwen2 always; Llama/Qwen3 when attention_bias */
    bool o_bias;             /* Llama/Qwen3 attention_bias */
    bool mlp_bias;           /* Llama mlp_bias */
    double rope_theta;       /* rope_theta | rope_parameters.rope_theta */
    double rms_norm_eps;
    /* GPT-NeoX and OPT (LayerNorm families; the other families keep the defaults) */
    double layer_norm_eps;       /* layer_norm_eps (1e-5) */
    double rotary_pct;           /* gpt_neox: rotary_pct | rope_parameters.partial_rotary_factor */
    bool use_parallel_residual;  /* gpt_neox (true) */
    int64_t word_embed_proj_dim; /* opt: embedding width Wd (default H; project_in / project_out
                                    when it differs); H for the other families */
    bool do_layer_norm_before;   /* opt (true): false has no final_layer_norm (OPT-350m) */
    bool final_layer_norm;       /* opt: do_layer_norm_before and not _remove_final_layer_norm */
    int64_t max_position_embeddings; /* opt: learned positions have this + 2 rows */
    /* Qwen3-Next (hybrid attention; 0 / NULL for the other families): Gated DeltaNet sizes
     * (linear_num_key_heads nk, linear_num_value_heads nv, linear_key_head_dim dk,
     * linear_value_head_dim dv, linear_conv_kernel_dim), the shared expert's width, and which
     * layers are gated full attention: layer_types (transformers 5) or
     * full_attention_interval (default 4: layer i when (i + 1) % 4 == 0) */
    int64_t linear_num_key_heads, linear_num_value_heads;
    int64_t linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim;
    int64_t shared_expert_intermediate_size;
    int64_t full_attention_interval;
    unsigned char *full_attention; /* owned: num_hidden_layers entries, 1 = full attention */
    int n_full_attention;          /* entries in full_attention (orig_num_hidden_layers) */
    /* DeepSeek-V3 / Moonlight (MLA, transformers DeepseekV3Config; 0 for other families) */
    int64_t q_lora_rank;       /* 0 when null: a plain q_proj instead of q_a / q_b */
    int64_t kv_lora_rank;      /* latent width Lkv of kv_a_proj_with_mqa / kv_b_proj */
    int64_t qk_nope_head_dim;  /* P */
    int64_t qk_rope_head_dim;  /* R */
    int64_t v_head_dim;        /* Dv */
    int64_t first_k_dense_replace; /* layers [0, k) have a dense MLP */
    int64_t moe_layer_freq;    /* a MoE layer is i >= k with i % freq == 0 (1) */
    int64_t n_shared_experts;  /* shared_experts width Im x n_shared (0: none) */
    int64_t num_nextn_predict_layers; /* MTP layers: deepseek_v3 stores them as
                                         model.layers.{L + i}.* (default 1), qwen3_next as
                                         mtp.layers.{i}.* (default 1, vLLM's getattr) */
    bool score_correction;     /* topk_method "noaux_tc": mlp.gate.e_score_correction_bias */
    /* quantization_config (absent: has_quant_config false, quant NONE) */
    bool has_quant_config;
    rf_quant_t quant;
    int64_t group_size;      /* wna16 group G; 0 if not given */
    int64_t weight_block[2]; /* fp8-block [128, 128] */
    char scale_fmt[16];      /* "" (absent) or "float" accepted; "ue8m0" refused later */
    char activation_scheme[16]; /* "dynamic" | "static" | "" */
    bool act_order;          /* g_idx / actorder present and true */
    char **not_convert;      /* owned: modules_to_not_convert + ignore */
    int n_not_convert;
    bool mtp; /* model.mtp of the topology (rf_model_check_topology): the MTP layers are
                 engine modules of the inventory (vLLM's draft model: DeepSeekMTP,
                 Qwen3NextMTP), each with layer L + 1 + k; false: on the skip list */
    /* topology overrides applied (DESIGN.md section 3), for logs and the hash */
    int64_t orig_num_hidden_layers, orig_num_experts, orig_vocab_size;
} rf_model_config_t;

/*
 * Parses config.json text (len bytes, not necessarily NUL-terminated). `path` names the file
 * in errors. Errors: RF_ERR_CONFIG naming the key (missing H/L/V/nh, unknown family,
 * conflicting torch_dtype/dtype, non-integer sizes, ...). Not collective.
 */
rf_status_t rf_model_config_parse(const char *text, size_t len, const char *path,
                                  rf_model_config_t *cfg_p, rf_err_t *err);
/* Reads and parses a file. */
rf_status_t rf_model_config_load(const char *path, rf_model_config_t *cfg_p, rf_err_t *err);
void rf_model_config_free(rf_model_config_t *cfg);
/* Deep copy (dst is overwritten; free it with rf_model_config_free). */
rf_status_t rf_model_config_copy(rf_model_config_t *dst, const rf_model_config_t *src);
/*
 * A checkpoint directory's own config.json (`ck`) against the topology's model config `topo`
 * as written (the orig_* sizes, before model.overrides) and the topology's effective
 * quantization q / wna16 group size `group`: model_type, hidden_size, intermediate_size,
 * moe_intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
 * head_dim, vocab_size, num_experts, word_embed_proj_dim and max_position_embeddings (OPT),
 * q_lora_rank, kv_lora_rank, qk_nope / qk_rope / v_head_dim, first_k_dense_replace and
 * n_shared_experts (deepseek_v3),
 * tie_word_embeddings, and when ck has a
 * quantization_config its method, fp8 weight_block_size and wna16 group_size (a checkpoint
 * without one is a bf16 source the trainer may quantize, DESIGN.md section 7). Both were
 * parsed by rf_model_config_parse, so every key spelling is already normalized. Errors:
 * RF_ERR_MISMATCH naming ck_dir, the first differing key and both values. Not collective.
 */
rf_status_t rf_model_config_compare(const rf_model_config_t *ck, const rf_model_config_t *topo,
                                    rf_quant_t q, int64_t group, const char *ck_dir,
                                    rf_err_t *err);
/* rf_model_config_compare against `<ck_dir>/config.json` when that file exists (RF_OK when it
 * does not); its parse errors name the file. Not collective. */
rf_status_t rf_model_config_check_checkpoint(const char *ck_dir, const rf_model_config_t *topo,
                                             rf_quant_t q, int64_t group, rf_err_t *err);
/* True for a MoE layer (qwen3_moe: E > 0, not in mlp_only_layers, (i+1) % step == 0;
 * deepseek_v3: E > 0, i >= first_k_dense_replace, i % moe_layer_freq == 0). */
bool rf_model_layer_is_moe(const rf_model_config_t *cfg, int64_t layer);
/* True for a gated full-attention layer of a qwen3_next model (its self_attn); false for a
 * Gated DeltaNet layer (linear_attn) and for every other family. */
bool rf_model_layer_is_full_attention(const rf_model_config_t *cfg, int64_t layer);

/* ---- a topology against the model (model/model_topology.c, model/model_load.c) -------- */

/*
 * Applies model.overrides to a copy of the config (and checks the topology's quantization
 * against the config's quantization_config), then checks every size rule of DESIGN.md
 * sections 3 and 5 against the model: heads, KV heads, layers / pp_layers, vocab,
 * intermediate sizes, experts, (quantization, backend) pairs, world size == T + R
 * (world_size <= 0 skips that check). cfg_p receives the overridden config.
 * Errors: RF_ERR_TOPOLOGY naming the key and the sizes. Not collective.
 */
rf_status_t rf_model_check_topology(const rf_topology_t *topo, const rf_model_config_t *cfg,
                                    int world_size, rf_model_config_t *cfg_p, rf_err_t *err);

/*
 * Binds a parsed topology to its (overridden) model config, as returned by
 * rf_model_check_topology(): quantization and group_size not given in the file are taken from
 * the config's quantization_config (none / 128 without one), model_layers = L, and without
 * pp_layers the even split L / pp is stored in pp_layers[] (pp_layers_set stays false).
 * Call after rf_model_check_topology() succeeded; the hash changes only where the file left
 * quantization or group_size to the config. Errors: RF_ERR_TOPOLOGY. Not collective.
 */
rf_status_t rf_model_bind_topology(rf_topology_t *topo, const rf_model_config_t *cfg,
                                   rf_err_t *err);

/*
 * Collective over comm. Rank 0 of comm reads the topology file (path_or_NULL; NULL: the
 * compiled-in rf_default_topology_yaml, model.config relative to the current folder) and the
 * config.json it names, and broadcasts a status with its error message first, then the file
 * path and both texts, so other nodes need no shared filesystem and an unreadable file on
 * rank 0 makes every rank return the same error. Every rank then parses both texts, runs
 * rf_model_check_topology() with the communicator size as world size and
 * rf_model_bind_topology(), and all ranks agree on rf_topology_hash() (MPI_Allreduce MIN and
 * MAX). Any rank's failure is returned on every rank with the lowest failing rank's message.
 * path_or_NULL: borrowed (only rank 0's is used). topo_p, cfg_p: caller-owned outputs, set
 * only on success; cfg_p receives the overridden config (free with rf_model_config_free).
 * Errors: RF_ERR_IO (unreadable file), RF_ERR_TOPOLOGY, RF_ERR_CONFIG, RF_ERR_MISMATCH (hash
 * disagreement), RF_ERR_MPI.
 */
rf_status_t rf_model_load_topology(const char *path_or_NULL, MPI_Comm comm,
                                   rf_topology_t *topo_p, rf_model_config_t *cfg_p,
                                   rf_err_t *err);

/*
 * Local, no MPI: the files read and parsed as rf_model_load_topology does on every rank
 * (the same topology hash), without the world-size check (rf_model_check_topology with
 * world_size 0): the offline plan (rf_session_offline_open, refit/session.h). Outputs and
 * errors as rf_model_load_topology's, RF_ERR_MPI aside.
 */
rf_status_t rf_model_load_topology_local(const char *path_or_NULL, rf_topology_t *topo_p,
                                         rf_model_config_t *cfg_p, rf_err_t *err);

/* ---- inventory ---------------------------------------------------------------------- */

/* Engine module kinds (vLLM's parallel linear classes). */
typedef enum {
    RF_MOD_VOCAB = 0,  /* VocabParallelEmbedding / ParallelLMHead: (Vp/T_r, H) */
    RF_MOD_QKV,        /* QKVParallelLinear: [q_r; k_r; v_r] */
    RF_MOD_MERGED,     /* MergedColumnParallelLinear gate_up_proj: [gate_r; up_r] */
    RF_MOD_ROW,        /* RowParallelLinear: o_proj, down_proj */
    RF_MOD_REPLICATED, /* norms, q_norm/k_norm, router mlp.gate: full copy everywhere */
    RF_MOD_MOE,        /* FusedMoE experts: w13 (E_l, 2 I_p, H), w2 (E_l, H, I_p) */
    RF_MOD_COLUMN,     /* ColumnParallelLinear, one linear: (N/T_r, K) (OPT fc1, NeoX h_to_4h) */
    RF_MOD_QKV_HEADS,  /* QKVParallelLinear fed by ONE fused checkpoint tensor stored
                          interleaved per head, rows [q_h; k_h; v_h] for h = 0..nh-1 (GPT-NeoX
                          query_key_value, nkv = nh): rank r reads the contiguous rows of heads
                          [r nh_p, (r+1) nh_p) and writes them as [q_r; k_r; v_r] */
    RF_MOD_REPLICATED_LINEAR, /* ReplicatedLinear, or MergedColumnParallelLinear with
                                 disable_tp (DeepSeek's fused_qkv_a_proj = [q_a_proj;
                                 kv_a_proj_with_mqa], vLLM deepseek_v2.py): a full copy of
                                 every linear on every rank, quantized like any linear; shard s
                                 at the rows of the shards before it */
    RF_MOD_SECTIONS,   /* ONE checkpoint tensor of any rank whose dim 0 is nsec sections
                          (sec_rows[i] rows = sec_heads[i] heads each), every section split by
                          TP on its own in whole heads; rank r's slot is the tensor's shape
                          with dim 0 = sum sec_rows[i] / T, rows [sec_0,r; sec_1,r; ...].
                          One section: vLLM's ColumnParallelLinear / sharded_weight_loader(0)
                          on a tensor whose heads a rank must take whole (Qwen3-Next
                          in_proj_qkvz / in_proj_ba per key-head group, A_log, dt_bias); three:
                          mamba_v2_sharded_weight_loader (Qwen3-Next conv1d: q, k, v) */
} rf_module_kind_t;

const char *rf_module_kind_name(rf_module_kind_t k);

/* How the trainer splits a tensor across its TP group (DESIGN.md section 6). */
typedef enum {
    RF_SPLIT_REPLICATED = 0, /* full copy; copy of record on t = 0 */
    RF_SPLIT_ROWS,           /* column-type: rows [t N/TP, (t+1) N/TP) */
    RF_SPLIT_COLS,           /* row-type: columns [t K/TP, (t+1) K/TP) */
    RF_SPLIT_VOCAB,          /* rows [min(t ceil(V/TP), V), min((t+1) ceil(V/TP), V)) */
} rf_split_t;

/* What a checkpoint tensor is, within its module. */
typedef enum {
    RF_PARAM_WEIGHT = 0,
    RF_PARAM_BIAS,
    RF_PARAM_WEIGHT_SCALE_INV, /* fp8-block */
    RF_PARAM_WEIGHT_PACKED,    /* wna16 */
    RF_PARAM_WEIGHT_SCALE,     /* wna16 */
    RF_PARAM_WEIGHT_SHAPE,     /* wna16 (checked, not stored) */
    RF_PARAM_TENSOR_SCALE,     /* fp8-tensor weight_scale: one fp32 per linear, shape [1] */
    RF_PARAM_CHANNEL_SCALE,    /* fp8-channel weight_scale: fp32 per output row, [N, 1] */
    RF_PARAM_F32_BUFFER,       /* a replicated fp32 buffer, not a scale: DeepSeek's
                                  mlp.gate.e_score_correction_bias (vLLM holds it fp32) */
} rf_param_t;

/* A scale the runtime holds in fp32 whatever the file stores (bf16 / f16 are widened
 * exactly on the trainer, docs/formats.md "Scale dtypes and values"): fp8-block
 * weight_scale_inv, fp8-tensor / fp8-channel weight_scale. */
static inline bool rf_param_is_f32_scale(rf_param_t p)
{
    return p == RF_PARAM_WEIGHT_SCALE_INV || p == RF_PARAM_TENSOR_SCALE ||
           p == RF_PARAM_CHANNEL_SCALE;
}

/* A tensor the runtime holds in fp32 whatever the file stores: the scales above and fp32
 * buffers (a bf16 / f16 source is widened exactly on the trainer, rf_manifest_scale_widens;
 * --reference narrows it back exactly, runtime/reassemble.c). */
static inline bool rf_param_widens(rf_param_t p)
{
    return rf_param_is_f32_scale(p) || p == RF_PARAM_F32_BUFFER;
}

/* One checkpoint tensor, in checkpoint layout (Hugging Face names). */
typedef struct rf_tensor {
    char name[RF_NAME_MAX];
    rf_dtype_t dtype;
    int ndim;
    int64_t shape[RF_MAX_DIMS];
    uint64_t numel;
    uint64_t nbytes;
    int layer;        /* -1 embedding; [0, L) decoder layers; L final norm / lm_head */
    int expert;       /* expert id or -1 */
    rf_param_t param;
    rf_split_t split; /* trainer-side split (experts: inside the expert, by expert TP) */
    int module;       /* receiving engine module (index into inventory.modules) */
    int slot;         /* model-layout slot within the module (0 weight, 1 bias, ...);
                         -1 for wna16 weight_shape (checked on arrival, counted, not stored) */
    int shard;        /* fused shard: q 0 / k 1 / v 2; gate 0 / up 1; otherwise 0 */
    bool all_experts; /* [E, N, K] holding every expert of its FusedMoE module at once
                         (GraniteMoE's input_linear / output_linear; rf_tensor_all_experts) */
} rf_tensor_t;

/* One engine module = one plannable layer (DESIGN.md section 8). */
typedef struct rf_module {
    char name[RF_NAME_MAX]; /* "model.layers.3.self_attn.qkv_proj" */
    rf_module_kind_t kind;
    int layer;              /* as rf_tensor_t.layer */
    int nslots;
    char slot_names[RF_MODULE_MAX_SLOTS][32]; /* "weight", "bias", "w13_weight", ... */
    int *tensors;           /* owned: indices of the checkpoint tensors it receives */
    int ntensors;
    bool tied;              /* embedding module also serving lm_head (tie_word_embeddings) */
    rf_quant_t quant;       /* quantization of its weights (RF_QUANT_NONE when unquantized) */
    int nlinears;           /* linears fused into it (inventory builder bookkeeping) */
    /* logical sizes used by the loader arithmetic */
    int64_t n;              /* output rows: N (V for vocab, nh*d + 2 nkv*d for qkv, 2I merged;
                               qwen3_next's gated qkv: 2 nh*d + 2 nkv*d, each q head followed by
                               its output gate) */
    int64_t k;              /* input columns K (H for most) */
    int64_t heads;          /* > 0: the rows (column parallel) or columns (row parallel) are
                               this many whole attention heads, and T_r must divide it (vLLM
                               splits DeepSeek's MLA projections by heads; Qwen3-Next's
                               fp8-block in_proj_qkvz by key-head groups, sec_key[0] then names
                               the config key in errors) */
    /* RF_MOD_SECTIONS: the sections of dim 0 and the config key naming each one's heads */
    int nsec;
    int64_t sec_rows[3], sec_heads[3];
    const char *sec_key[3]; /* static */
    int64_t col_heads;      /* RF_MOD_COLUMN only, 0 for a plain one: the rows are col_heads
                               whole heads of n / col_heads rows; rank r holds heads
                               [(r / rep) h_p, +h_p), h_p = max(col_heads / T, 1), rep =
                               max(T / col_heads, 1): a head is replicated over rep ranks when
                               T > col_heads (vLLM QKVParallelLinear's k / v rule, kept for the
                               separate k_proj / v_proj of rollout.layout hf) */
} rf_module_t;

/* Where the decoder layers' tensors live: "model.layers." (Llama, Qwen), "gpt_neox.layers.",
 * "model.decoder.layers." (OPT). Static. */
const char *rf_family_layer_prefix(rf_family_t f);

/* A checkpoint-name alias transformers or the published files write: a stored name beginning
 * with `stored` is the inventory's name beginning with `canonical` (OPT: "decoder." ->
 * "model.decoder."). Fills up to max pairs; returns how many the family has. Static strings. */
int rf_family_aliases(rf_family_t f, const char *stored[], const char *canonical[], int max);

typedef struct rf_inventory {
    rf_model_config_t cfg;  /* owned copy, overrides applied */
    rf_tensor_t *tensors;   /* owned, in manifest order within each layer */
    int ntensors;
    rf_module_t *modules;   /* owned */
    int nmodules;
    uint64_t nparams;       /* sum of numel over tensors */
    rf_quant_t quant;       /* model quantization (per module: rf_module_t.quant) */
    int64_t group_size;     /* wna16 group G */
    void *index;            /* owned name -> tensor hash index */
    const char *embed_name; /* the embedding tensor ("model.embed_tokens.weight", ...; static) */
    const char *head_name;  /* the untied head's tensor ("lm_head.weight", GPT-NeoX
                               "embed_out.weight"; static): skipped when tied and equal */
    rf_rollout_layout_t layout; /* the engine modules' layout (rf_inventory_apply_layout);
                                   vllm as built */
} rf_inventory_t;

/* Most tensors an inventory may hold: about 15x the largest MoE checkpoints (~7e4 tensors),
 * so a config.json with absurd layer or expert counts fails instead of exhausting memory. */
#define RF_INVENTORY_MAX_TENSORS (1 << 20)

/*
 * Builds the inventory of a (possibly overridden) config, for the given quantization
 * (RF_QUANT_NONE in the dense bf16 case). Errors: RF_ERR_CONFIG / RF_ERR_UNSUPPORTED naming
 * the key (RF_ERR_CONFIG when num_hidden_layers and num_experts could give more than
 * RF_INVENTORY_MAX_TENSORS tensors). Not collective.
 */
rf_status_t rf_inventory_build(const rf_model_config_t *cfg, rf_quant_t quant,
                               int64_t group_size, rf_inventory_t *inv_p, rf_err_t *err);
void rf_inventory_free(rf_inventory_t *inv);

/*
 * Rewrites the engine modules of a built inventory for rollout.layout (model/layout_hf.c;
 * RF_ROLLOUT_LAYOUT_VLLM: nothing changes). hf is the live module set of a transformers 5
 * model as named_parameters() gives it, derived from each module's checkpoint tensors and
 * their shard rule, not per family:
 *   - a fused dense module (RF_MOD_QKV, RF_MOD_MERGED) becomes one RF_MOD_COLUMN module per
 *     linear it fuses, named by the linear's checkpoint prefix ("...self_attn.q_proj"), its
 *     tensors in slots named by their checkpoint param ("weight", then a quantized linear's
 *     "weight_scale_inv" / "weight_scale" or "weight_packed" + "weight_scale", then "bias"):
 *     q in whole heads (col_heads nh), k / v in whole heads replicated when T > nkv
 *     (col_heads nkv), gate / up plain column slices; DeepSeek's replicated fused_qkv_a_proj
 *     becomes q_a_proj and kv_a_proj_with_mqa (RF_MOD_REPLICATED_LINEAR, one linear each);
 *   - GPT-NeoX's query_key_value (RF_MOD_QKV_HEADS) stays one tensor as stored, interleaved
 *     per head: RF_MOD_COLUMN in col_heads nh heads of 3 d rows;
 *   - MoE experts keep the fused 3-D tensors transformers 5 keeps (Qwen3MoeExperts, its
 *     conversion mapping fuses the per-expert checkpoint tensors): slots "gate_up_proj"
 *     (E_l, 2 I_p, H), gate rows before up, and "down_proj" (E_l, H, I_p), (out, in) like
 *     nn.Linear, not transposed; fp8-block adds "gate_up_proj_scale_inv" (E_l, 2 I_p / 128,
 *     ceil(H / 128)) and "down_proj_scale_inv" (E_l, ceil(H / 128), I_p / 128) (transformers
 *     5's FP8Experts); GraniteMoE's checkpoint experts are fused already and keep their
 *     names (GraniteMoeParallelExperts): module "...block_sparse_moe", slots
 *     "input_linear.weight" (E_l, 2 I_p, H) and "output_linear.weight" (E_l, H, I_p), the
 *     same rank slices as vLLM's w13 / w2; its router module is "...router.layer";
 *   - vocab-parallel modules hold ceil(V / T) rows per rank (no padding to 64: V rows at TP 1,
 *     as nn.Embedding), rows past V zero-filled; row-parallel and replicated modules as vllm.
 * A slot's full name (module name + "." + slot name) is then the checkpoint tensor's name
 * (MoE: the fused parameter's); wna16's weight_shape is checked on arrival and never stored.
 * Quantized slices follow the checkpoint shard arithmetic (rf_module_slots refuses an fp8
 * block split by a rank boundary, naming the module and the sizes). Errors:
 * RF_ERR_UNSUPPORTED for wna16 MoE experts ("rollout.layout hf with model.quantization wna16
 * is not supported for MoE experts", naming the first tensor and the module) and for a
 * quantized GPT-NeoX / Qwen3-Next sectioned module, RF_ERR_NOMEM. Not collective; call once,
 * right after rf_inventory_build, on every rank.
 */
rf_status_t rf_inventory_apply_layout(rf_inventory_t *inv, rf_rollout_layout_t layout,
                                      rf_err_t *err);
/* Tensor index by exact name, or -1. O(1). */
int rf_inventory_find(const rf_inventory_t *inv, const char *name);

/* What to do with a checkpoint tensor the inventory does not know (DESIGN.md section 4). */
typedef enum {
    RF_UNKNOWN_ERROR = 0, /* not on the skip list */
    RF_UNKNOWN_SKIP,      /* *.rotary_emb.inv_freq, mtp.* (Qwen3-Next's multi-token
                             prediction head: no engine module takes it); deepseek_v3: the MTP
                             layers model.layers.{L + i}.* for i < num_nextn_predict_layers (L
                             as written, before overrides); gpt_neox: *.attention.bias and
                             *.attention.masked_bias (old causal-mask buffers). Under
                             model.mtp (cfg.mtp) the MTP names the inventory lacks are
                             RF_UNKNOWN_ERROR instead */
    RF_UNKNOWN_CUT,       /* layer >= L or expert >= E after overrides */
    RF_UNKNOWN_TIED,      /* lm_head.weight when tied: skipped only if it equals the embedding */
} rf_unknown_t;
rf_unknown_t rf_inventory_classify_unknown(const rf_inventory_t *inv, const char *name);

/* ---- per-rank slot shapes (DESIGN.md section 5) -------------------------------------- */

/* Shape and dtype of one slot on one rank, in model layout (row-major, contiguous). */
typedef struct rf_slot_shape {
    char name[32];
    rf_dtype_t dtype;
    int ndim;
    int64_t shape[RF_MAX_DIMS];
    bool kfirst; /* model layout is K-first: the last two dims are (K, N), transposed against
                    the checkpoint's (N, K) (vLLM's wna16 FusedMoE loader layout) */
} rf_slot_shape_t;

/*
 * Slot shapes of module `m` on a rollout rank. Errors: RF_ERR_TOPOLOGY naming module and
 * sizes when the rank's arithmetic does not divide (DESIGN.md section 5).
 */
rf_status_t rf_module_slots(const rf_inventory_t *inv, int m, const rf_rollout_coords_t *rc,
                            rf_slot_shape_t out[RF_MODULE_MAX_SLOTS], int *nslots_p,
                            rf_err_t *err);

/* Checks every rollout divisibility rule of DESIGN.md section 5 for tp / ep. */
rf_status_t rf_inventory_check_rollout(const rf_inventory_t *inv,
                                       const rf_rollout_coords_t *rc, rf_err_t *err);

/* Rows of a tensor as chunks and loaders count them: every dim but the last of a 2-D or
 * wider tensor (a 3-D fused expert tensor [E, N, K], GraniteMoE's input_linear, counts E N
 * rows of K: a row-major view, so the bytes are the same), dim 0 of a 1-D tensor (its
 * elements), one row for a 0-D tensor. The checkpoint readers count dim 0 (rf_st_entry_rows):
 * the trainer's reads translate (runtime/trainer.c ck_read_3d). */
static inline uint64_t rf_tensor_rows(const rf_tensor_t *t)
{
    uint64_t r = t->ndim == 0 ? 1 : (uint64_t)t->shape[0];
    for (int d = 1; d + 1 < t->ndim; d++)
        r *= (uint64_t)t->shape[d];
    return r;
}
/* A tensor holding every expert of a FusedMoE module at once, [E, N, K] with dim 0 the
 * expert (GraniteMoE's block_sparse_moe.input_linear / output_linear): expert -1, 3 dims,
 * marked by its family's builder (other 3-D tensors, e.g. Qwen3-Next's conv1d [C, 1, K], are
 * not). */
static inline bool rf_tensor_all_experts(const rf_tensor_t *t)
{
    return t->all_experts && t->ndim == 3 && t->expert < 0;
}
static inline uint64_t rf_tensor_row_bytes(const rf_tensor_t *t)
{
    uint64_t r = rf_tensor_rows(t);
    return r == 0 ? 0 : t->nbytes / r;
}

/* Rows of the logical weight one row of this tensor stands for: 128 for FP8 block scales
 * (weight_scale_inv), 1 otherwise. */
static inline int64_t rf_tensor_row_unit(const rf_tensor_t *t)
{
    return t->param == RF_PARAM_WEIGHT_SCALE_INV ? 128 : 1;
}

/* Vp = round_up(V, 64) */
static inline int64_t rf_vocab_padded(int64_t v) { return (v + 63) / 64 * 64; }
/* rollout.layout hf: vocab rows per rank, ceil(V / T) (rank r holds rows [r c, min((r+1) c,
 * V)), the rest of its c rows zero) */
static inline int64_t rf_vocab_rows_hf(int64_t v, int64_t t) { return t > 0 ? (v + t - 1) / t : v; }

/* Local experts of an EP rank: count, and the i-th local expert's global id. */
int64_t rf_moe_local_count(int64_t e, const rf_rollout_coords_t *rc);
int64_t rf_moe_local_expert(int64_t e, const rf_rollout_coords_t *rc, int64_t i);
/* Local index of global expert id on this rank, or -1 when declined (non-local). */
int64_t rf_moe_local_index(int64_t e, const rf_rollout_coords_t *rc, int64_t expert);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_MODEL_H */
