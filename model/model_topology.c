/*
 * refit: a topology against its model config (DESIGN.md sections 3 and 5).
 *
 * The rules of a parsed topology that need the model: model.overrides applied to a copy of
 * the config (they may only shrink), the file's quantization / group_size against the
 * config's quantization_config, the trainer's tp / etp / ep / pp against heads, sizes, experts
 * and layers, the rollout loader arithmetic on every rank of one engine (through an
 * unquantized inventory), the quantized sharding sizes and the world size. Then the binding:
 * what the file left to the config (quantization, group_size, the even pp split) is written
 * into the topology. topology/ parses the file alone and knows no model config.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "refit/model.h"
#include "refit/topology.h"

static rf_quant_t effective_quant(const rf_topology_t *t, const rf_model_config_t *cfg)
{
    if (t->quantization_set)
        return t->quantization;
    return cfg->has_quant_config ? cfg->quant : RF_QUANT_NONE;
}

static int64_t effective_group(const rf_topology_t *t, const rf_model_config_t *cfg)
{
    if (t->group_size_set)
        return t->group_size;
    if (cfg->has_quant_config && cfg->quant == RF_QUANT_WNA16 && cfg->group_size > 0)
        return cfg->group_size;
    return 128;
}

static rf_status_t need(const rf_topology_t *t, rf_err_t *err, const char *key, int64_t div,
                        const char *what, int64_t val)
{
    if (val % div == 0)
        return RF_OK;
    return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: %s: %lld does not divide %s %lld", t->file, key,
                      (long long)div, what, (long long)val);
}

/* Quantized sharding rules of DESIGN.md section 5 that the inventory does not cover yet. */
static rf_status_t check_quant_sizes(const rf_topology_t *t, const rf_model_config_t *c,
                                     rf_quant_t q, int64_t G, rf_err_t *err)
{
    int64_t Tr = t->r_tp, H = c->hidden_size, d = c->head_dim;
    int64_t Tm = t->r_ep > 1 ? 1 : (int64_t)t->r_tp * t->r_dp;
    bool moe = c->num_experts > 0;
    bool dense = !moe;
    for (int64_t i = 0; moe && !dense && i < c->num_hidden_layers; i++)
        dense = !rf_model_layer_is_moe(c, i);
    if (q == RF_QUANT_WNA16) {
        int64_t ks[4] = {H, c->num_attention_heads * d / Tr, dense ? c->intermediate_size / Tr : G,
                         moe ? c->moe_intermediate_size / Tm : G};
        const char *names[4] = {"hidden_size", "o_proj input per rank", "down_proj input per rank",
                                "experts I_p"};
        for (int i = 0; i < 4; i++)
            if (ks[i] % G != 0 || ks[i] % 8 != 0)
                return rf_err_set(err, RF_ERR_TOPOLOGY,
                                  "%s: model.group_size: wna16 %s %lld is not a multiple of the "
                                  "group size %lld and of 8 (rollout.tp %d)",
                                  t->file, names[i], (long long)ks[i], (long long)G, t->r_tp);
    } else if (q == RF_QUANT_FP8_BLOCK) {
        if (moe && (c->moe_intermediate_size / Tm) % 128 != 0)
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "%s: rollout.tp: fp8-block experts I_p %lld (moe_intermediate_size "
                              "%lld / %lld) is not a multiple of 128",
                              t->file, (long long)(c->moe_intermediate_size / Tm),
                              (long long)c->moe_intermediate_size, (long long)Tm);
        int64_t ns[3] = {
            c->num_attention_heads * d / Tr, dense ? c->intermediate_size / Tr : 128,
            Tr > 1 ? (c->num_key_value_heads >= Tr ? c->num_key_value_heads / Tr : 1) * d : 128};
        const char *names[3] = {"q rows per rank", "intermediate rows per rank",
                                "kv rows per rank"};
        for (int i = 0; i < 3; i++)
            if (ns[i] % 128 != 0)
                return rf_err_set(err, RF_ERR_TOPOLOGY,
                                  "%s: rollout.tp: %d puts a tp boundary inside a 128-row fp8 "
                                  "block (%s %lld)",
                                  t->file, t->r_tp, names[i], (long long)ns[i]);
    }
    return RF_OK;
}

rf_status_t rf_model_check_topology(const rf_topology_t *topo, const rf_model_config_t *cfg,
                                    int world_size, rf_model_config_t *cfg_p, rf_err_t *err)
{
    const rf_topology_t *t = topo;
    rf_model_config_t c;
    rf_inventory_t inv;
    rf_status_t st;
    rf_quant_t q;
    int64_t G;
    const char *f = t->file;
    int T = rf_topology_trainer_size(t), R = rf_topology_rollout_size(t);

    if (rf_model_config_copy(&c, cfg) != RF_OK) {
        rf_model_config_free(&c);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", f);
    }
    c.orig_num_hidden_layers = cfg->num_hidden_layers;
    c.orig_num_experts = cfg->num_experts;
    c.orig_vocab_size = cfg->vocab_size;

    /* overrides may only shrink */
    if (t->ov_num_hidden_layers > 0) {
        if (t->ov_num_hidden_layers > cfg->num_hidden_layers) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: model.overrides.num_hidden_layers: %lld is larger than the "
                            "config's num_hidden_layers %lld (overrides may only shrink)",
                            f, (long long)t->ov_num_hidden_layers,
                            (long long)cfg->num_hidden_layers);
            goto fail;
        }
        c.num_hidden_layers = t->ov_num_hidden_layers;
    }
    if (t->ov_num_experts > 0) {
        if (cfg->num_experts <= 0) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: model.overrides.num_experts: %lld given for a dense model "
                            "(model_type %s has no experts)",
                            f, (long long)t->ov_num_experts, cfg->model_type);
            goto fail;
        }
        if (t->ov_num_experts > cfg->num_experts) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: model.overrides.num_experts: %lld is larger than the config's "
                            "num_experts %lld (overrides may only shrink)",
                            f, (long long)t->ov_num_experts, (long long)cfg->num_experts);
            goto fail;
        }
        if (t->ov_num_experts < cfg->num_experts_per_tok) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: model.overrides.num_experts: %lld is smaller than "
                            "num_experts_per_tok %lld",
                            f, (long long)t->ov_num_experts, (long long)cfg->num_experts_per_tok);
            goto fail;
        }
        c.num_experts = t->ov_num_experts;
    }
    if (t->ov_vocab_size > 0) {
        if (t->ov_vocab_size > cfg->vocab_size) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: model.overrides.vocab_size: %lld is larger than the config's "
                            "vocab_size %lld (overrides may only shrink)",
                            f, (long long)t->ov_vocab_size, (long long)cfg->vocab_size);
            goto fail;
        }
        c.vocab_size = t->ov_vocab_size;
    }

    /* model.mtp: the MTP layers as engine modules, for the families that store them and
     * the engine layout that loads them */
    if (t->mtp) {
        if (cfg->family != RF_FAMILY_DEEPSEEK_V3 && cfg->family != RF_FAMILY_QWEN3_NEXT) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: model.mtp: model_type %s has no multi-token-prediction layers "
                            "(deepseek_v3 and qwen3_next have)",
                            f, cfg->model_type);
            goto fail;
        }
        if (cfg->num_nextn_predict_layers <= 0) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: model.mtp: %s says num_nextn_predict_layers 0 (no MTP layers "
                            "to reload)",
                            f, t->model_config);
            goto fail;
        }
        if (t->r_layout == RF_ROLLOUT_LAYOUT_HF) {
            /* transformers builds no MTP module: DeepseekV3ForCausalLM and
             * Qwen3NextForCausalLM drop those checkpoint keys on load */
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: model.mtp: rollout.layout hf has no MTP modules (transformers' "
                            "%s ignores them on load; use rollout.layout vllm)",
                            f, cfg->model_type);
            goto fail;
        }
        c.mtp = true;
    }

    /* quantization: the file and quantization_config must agree when both are given */
    if (t->quantization_set && cfg->has_quant_config && t->quantization != cfg->quant) {
        st = rf_err_set(err, RF_ERR_TOPOLOGY,
                        "%s: model.quantization: %s disagrees with the config's "
                        "quantization_config (%s) in %s",
                        f, rf_quant_name(t->quantization), rf_quant_name(cfg->quant),
                        t->model_config);
        goto fail;
    }
    q = effective_quant(t, cfg);
    G = effective_group(t, cfg);
    if (t->group_size_set && q == RF_QUANT_WNA16 && cfg->has_quant_config && cfg->group_size > 0 &&
        cfg->group_size != t->group_size) {
        st = rf_err_set(err, RF_ERR_TOPOLOGY,
                        "%s: model.group_size: %lld disagrees with the config's group_size %lld", f,
                        (long long)t->group_size, (long long)cfg->group_size);
        goto fail;
    }
    if (t->group_size_set && q != RF_QUANT_WNA16) {
        st = rf_err_set(err, RF_ERR_TOPOLOGY,
                        "%s: model.group_size: %lld applies to quantization wna16 only (got %s)", f,
                        (long long)t->group_size, rf_quant_name(q));
        goto fail;
    }
    RF_CHECK_GOTO(rf_topology_check_quant_backend(f, q, t->r_backend, err), st, fail);
    if ((cfg->family == RF_FAMILY_GPT_NEOX || cfg->family == RF_FAMILY_OPT ||
         cfg->family == RF_FAMILY_GRANITEMOE) &&
        q != RF_QUANT_NONE) {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: model.quantization: %s is reloaded unquantized only (quantization %s "
                        "asked)",
                        f, cfg->model_type, rf_quant_name(q));
        goto fail;
    }
    if (cfg->family == RF_FAMILY_QWEN3_NEXT && q != RF_QUANT_NONE && q != RF_QUANT_FP8_BLOCK) {
        /* the sectioned GDN tensors have no wna16 / per-tensor layout here; fp8-block keeps
         * what quantization_config leaves unquantized in bf16 (inv_gdn_in_proj) */
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: model.quantization: qwen3_next is reloaded unquantized or fp8-block "
                        "only (quantization %s asked)",
                        f, rf_quant_name(q));
        goto fail;
    }
    if (cfg->family == RF_FAMILY_DEEPSEEK_V3 && q != RF_QUANT_NONE && q != RF_QUANT_FP8_BLOCK) {
        /* the absorbed MLA matrices are derived from kv_b_proj by dequantizing it: only the
         * fp8 block owner's dequantization is implemented for them */
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: model.quantization: deepseek_v3 is reloaded unquantized or fp8-block "
                        "only (quantization %s asked)",
                        f, rf_quant_name(q));
        goto fail;
    }
    if (t->t_layout == RF_TRAINER_LAYOUT_FSDP && q != RF_QUANT_NONE) {
        /* a trainer quantizes its own slice: ceil(N / dp) rows need not start on a block */
        st = rf_err_set(err, RF_ERR_TOPOLOGY,
                        "%s: trainer.layout: fsdp with model.quantization %s is not supported "
                        "yet (quantized models need trainer.layout megatron)",
                        f, rf_quant_name(q));
        goto fail;
    }

    /* trainer (Megatron: KV heads never replicated; vocab split unevenly is fine) */
    bool moe = c.num_experts > 0, dense = !moe;
    for (int64_t i = 0; moe && !dense && i < c.num_hidden_layers; i++)
        dense = !rf_model_layer_is_moe(&c, i);
    RF_CHECK_GOTO(need(t, err, "trainer.tp", t->t_tp, "num_attention_heads", c.num_attention_heads),
                  st, fail);
    RF_CHECK_GOTO(need(t, err, "trainer.tp", t->t_tp, "num_key_value_heads", c.num_key_value_heads),
                  st, fail);
    if (dense)
        RF_CHECK_GOTO(need(t, err, "trainer.tp", t->t_tp, "intermediate_size", c.intermediate_size),
                      st, fail);
    if (c.family == RF_FAMILY_QWEN3_NEXT) {
        /* the Gated DeltaNet tensors split by rows in whole key-head groups / value heads,
         * the shared expert like a dense MLP */
        RF_CHECK_GOTO(need(t, err, "trainer.tp", t->t_tp, "linear_num_key_heads",
                           c.linear_num_key_heads),
                      st, fail);
        RF_CHECK_GOTO(need(t, err, "trainer.tp", t->t_tp, "linear_num_value_heads",
                           c.linear_num_value_heads),
                      st, fail);
        if (moe && c.shared_expert_intermediate_size > 0)
            RF_CHECK_GOTO(need(t, err, "trainer.tp", t->t_tp, "shared_expert_intermediate_size",
                               c.shared_expert_intermediate_size),
                          st, fail);
    }
    if (moe) {
        RF_CHECK_GOTO(
            need(t, err, "trainer.etp", t->t_etp, "moe_intermediate_size", c.moe_intermediate_size),
            st, fail);
        RF_CHECK_GOTO(need(t, err, "trainer.ep", t->t_ep, "num_experts", c.num_experts), st, fail);
        if (c.family == RF_FAMILY_DEEPSEEK_V3 && c.n_shared_experts > 0)
            RF_CHECK_GOTO(need(t, err, "trainer.tp", t->t_tp,
                               "moe_intermediate_size x n_shared_experts",
                               c.moe_intermediate_size * c.n_shared_experts),
                          st, fail);
    } else if (t->t_ep > 1 || t->r_ep > 1) {
        st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: %s: %d requires a MoE model (%s has no experts)",
                        f, t->t_ep > 1 ? "trainer.ep" : "rollout.ep",
                        t->t_ep > 1 ? t->t_ep : t->r_ep, t->model_config);
        goto fail;
    }
    if (c.family == RF_FAMILY_GRANITEMOE) {
        /* the experts are two [E, N, K] tensors per layer: a trainer tp rank holds whole
         * experts (rows [t E/tp, (t+1) E/tp) of each; trainer.etp does not apply), and there
         * is no per-expert tensor for an ep rank to own */
        if (t->t_ep > 1) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: trainer.ep: %d: granitemoe stores its experts fused "
                            "(block_sparse_moe.input_linear / output_linear, %lld experts in "
                            "one tensor); its trainer tp ranks hold whole experts instead",
                            f, t->t_ep, (long long)c.num_experts);
            goto fail;
        }
        RF_CHECK_GOTO(need(t, err, "trainer.tp", t->t_tp, "num_local_experts (granitemoe's fused "
                           "experts split by whole experts)", c.num_experts),
                      st, fail);
    }
    if (t->pp_layers_set) {
        int64_t sum = 0;
        for (int p = 0; p < t->t_pp; p++)
            sum += t->pp_layers[p];
        if (sum != c.num_hidden_layers) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY,
                            "%s: trainer.pp_layers: the entries sum to %lld, not "
                            "num_hidden_layers %lld",
                            f, (long long)sum, (long long)c.num_hidden_layers);
            goto fail;
        }
    } else {
        RF_CHECK_GOTO(need(t, err, "trainer.pp", t->t_pp, "num_hidden_layers", c.num_hidden_layers),
                      st, fail);
    }

    /* rollout: the loader arithmetic, on every rank of one engine (ranks of all engines
     * are alike); the inventory is built unquantized since the divisibility is the same */
    bool hfq = t->r_layout == RF_ROLLOUT_LAYOUT_HF && q != RF_QUANT_NONE;
    if (hfq && (t->r_backend == RF_BACKEND_ROCM_FNUZ || t->r_backend == RF_BACKEND_MARLIN)) {
        /* both rewrite the checkpoint's bytes for vLLM's kernels; a transformers model keeps
         * them as stored */
        st = rf_err_set(err, RF_ERR_TOPOLOGY,
                        "%s: rollout.backend %s with rollout.layout hf is not supported (%s: "
                        "transformers keeps the checkpoint's quantized tensors as stored; use "
                        "rollout.backend %s)",
                        f, rf_backend_name(t->r_backend), rf_quant_name(q),
                        q == RF_QUANT_WNA16 ? "triton" : "triton or cutlass");
        goto fail;
    }
    /* hf with a quantized model: the quantized inventory, so that its refusals (wna16
     * experts) and the slices of every scale (whole fp8 blocks) are checked per module */
    st = rf_inventory_build(&c, hfq ? q : RF_QUANT_NONE, hfq ? G : 0, &inv, err);
    if (st != RF_OK)
        goto fail;
    {
        rf_err_t sub;
        rf_err_clear(&sub);
        st = rf_inventory_apply_layout(&inv, t->r_layout, &sub);
        if (st != RF_OK) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: %s", f, sub.msg);
            rf_inventory_free(&inv);
            goto fail;
        }
    }
    for (int l = 0; l < t->r_tp * t->r_dp && st == RF_OK; l++) {
        rf_rollout_coords_t rc = {.tp = t->r_tp,
                                  .tp_rank = l % t->r_tp,
                                  .dp = t->r_dp,
                                  .dp_rank = l / t->r_tp,
                                  .ep = t->r_ep,
                                  .ep_rank = 0,
                                  .placement = t->r_placement};
        rf_err_t sub;
        rf_err_clear(&sub);
        if (rc.ep > 1)
            rc.ep_rank = rc.dp_rank * rc.tp + rc.tp_rank;
        st = rf_inventory_check_rollout(&inv, &rc, &sub);
        if (st != RF_OK)
            rf_err_set(err, st, "%s: rollout.tp: %d (tp_rank %d): %s", f, t->r_tp, rc.tp_rank,
                       sub.msg);
    }
    rf_inventory_free(&inv);
    if (st != RF_OK)
        goto fail;
    RF_CHECK_GOTO(check_quant_sizes(t, &c, q, G, err), st, fail);

    if (world_size > 0 && world_size != T + R) {
        st = rf_err_set(err, RF_ERR_TOPOLOGY,
                        "%s: world size %d != trainer %d + rollout %d ranks (mpirun -np %d)", f,
                        world_size, T, R, T + R);
        goto fail;
    }
    if (cfg_p != NULL)
        *cfg_p = c;
    else
        rf_model_config_free(&c);
    return RF_OK;
fail:
    rf_model_config_free(&c);
    return st;
}

rf_status_t rf_model_bind_topology(rf_topology_t *topo, const rf_model_config_t *cfg, rf_err_t *err)
{
    int64_t L = cfg->num_hidden_layers;
    if (topo->quantization_set && cfg->has_quant_config && topo->quantization != cfg->quant)
        return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: model.quantization: %s disagrees with %s",
                          topo->file, rf_quant_name(topo->quantization), rf_quant_name(cfg->quant));
    topo->quantization = effective_quant(topo, cfg);
    topo->group_size = effective_group(topo, cfg);
    topo->model_layers = L;
    if (!topo->pp_layers_set) {
        if (L % topo->t_pp != 0)
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "%s: trainer.pp: %d does not divide num_hidden_layers %lld",
                              topo->file, topo->t_pp, (long long)L);
        for (int p = 0; p < topo->t_pp; p++)
            topo->pp_layers[p] = L / topo->t_pp;
    }
    return RF_OK;
}
