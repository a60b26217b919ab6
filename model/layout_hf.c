/*
 * refit: rollout.layout hf (include/refit/model.h, rf_inventory_apply_layout).
 *
 * The inventory's builders describe vLLM's fused engine modules. A transformers 5 model keeps
 * a different module set: every dense checkpoint tensor is its own parameter under its own
 * name (q, k and v apart, gate and up apart), while MoE experts are fused 3-D tensors
 * (Qwen3MoeExperts.gate_up_proj / down_proj, which the conversion mapping builds from the
 * per-expert checkpoint tensors). This pass rewrites the module list from what every module
 * already says about its tensors (their fused shard, param and shape), so a family gets hf
 * without code of its own: a builder that fuses linears through the shared QKV / MERGED kinds
 * gets them split back here, and any other kind keeps its module and slots.
 *
 * GraniteMoE's experts are fused 3-D tensors in the checkpoint already, and transformers 5's
 * GraniteMoeParallelExperts keeps them as parameters under their checkpoint names
 * (block_sparse_moe.input_linear.weight (E, 2I, H), each expert's gate rows before its up
 * rows, GraniteMoeMoE chunking the output in two; output_linear.weight (E, H, I)); its router
 * is block_sparse_moe.router.layer.weight. The FusedMoE module keeps vLLM's slot shapes (they
 * are the same rank slices) under those names.
 *
 * Quantized linears keep what transformers' quantizers keep: every checkpoint tensor of a
 * linear is one parameter under its own name (FP8Linear weight + weight_scale_inv,
 * compressed-tensors weight + weight_scale, or weight_packed + weight_scale), sliced per rank
 * like the weight; transformers 5's FP8Experts keeps fp8-block experts as gate_up_proj /
 * gate_up_proj_scale_inv / down_proj / down_proj_scale_inv. wna16 experts are refused:
 * compressed-tensors quantizes nn.Linear modules and the fused 3-D experts are none, so no
 * transformers model holds them.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/model.h"

/* The checkpoint prefix of a tensor named "<prefix>.weight" / ".bias". */
static void tensor_prefix(const rf_tensor_t *t, char *out, size_t cap)
{
    const char *dot = strrchr(t->name, '.');
    size_t n = dot ? (size_t)(dot - t->name) : strlen(t->name);
    snprintf(out, cap, "%.*s", (int)n, t->name);
}

static int add_slot(rf_module_t *m, const char *name)
{
    for (int i = 0; i < m->nslots; i++)
        if (strcmp(m->slot_names[i], name) == 0)
            return i;
    snprintf(m->slot_names[m->nslots], sizeof(m->slot_names[0]), "%s", name);
    return m->nslots++;
}

/* A fused module this pass splits into one module per linear: vLLM's QKVParallelLinear and
 * MergedColumnParallelLinear, and DeepSeek's replicated fused_qkv_a_proj ([q_a_proj;
 * kv_a_proj_with_mqa]; transformers keeps the two linears apart). Returns the shard count. */
static int split_shards(const rf_module_t *m)
{
    if (m->kind == RF_MOD_QKV)
        return 3;
    if (m->kind == RF_MOD_MERGED)
        return 2;
    if (m->kind == RF_MOD_REPLICATED_LINEAR && m->nlinears > 1)
        return m->nlinears;
    return 0;
}

/* Experts held fused in one [E, N, K] checkpoint tensor per projection (GraniteMoE). */
static bool moe_fused_3d(const rf_inventory_t *inv, const rf_module_t *m)
{
    return m->kind == RF_MOD_MOE && m->ntensors > 0 &&
           rf_tensor_all_experts(&inv->tensors[m->tensors[0]]);
}

/* A FusedMoE slot name under hf: "w13_weight" -> "gate_up_proj", "w13_weight_scale_inv" ->
 * "gate_up_proj_scale_inv" (transformers 5's Qwen3MoeExperts / FP8Experts); GraniteMoE's
 * "input_linear.weight" / "output_linear.weight" (GraniteMoeParallelExperts). */
static void moe_slot_name_hf(const char *vllm, bool fused3d, char *out, size_t cap)
{
    bool w13 = strncmp(vllm, "w13_", 4) == 0;
    const char *p = vllm + (w13 ? 4 : 3); /* "weight", "weight_scale_inv" */
    if ((!w13 && strncmp(vllm, "w2_", 3) != 0) || strncmp(p, "weight", 6) != 0) {
        snprintf(out, cap, "%s", vllm);
        return;
    }
    if (fused3d)
        snprintf(out, cap, "%s.%s", w13 ? "input_linear" : "output_linear", p);
    else
        snprintf(out, cap, "%s%s", w13 ? "gate_up_proj" : "down_proj", p + strlen("weight"));
}

static rf_status_t refuse_quant(const rf_inventory_t *inv, rf_err_t *err)
{
    for (int i = 0; i < inv->nmodules; i++) {
        const rf_module_t *m = &inv->modules[i];
        if (m->quant == RF_QUANT_NONE)
            continue;
        if (m->kind == RF_MOD_MOE && m->quant != RF_QUANT_FP8_BLOCK)
            /* named by its first checkpoint tensor */
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "rollout.layout hf with model.quantization %s is not supported for "
                              "MoE experts (%s, in module %s: compressed-tensors quantizes "
                              "nn.Linear modules and transformers 5's fused 3-D experts are "
                              "none; use rollout.layout vllm)",
                              rf_quant_name(m->quant),
                              m->ntensors > 0 ? inv->tensors[m->tensors[0]].name : m->name,
                              m->name);
        if (m->kind == RF_MOD_QKV_HEADS || m->kind == RF_MOD_SECTIONS)
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "rollout.layout hf with model.quantization %s is not supported for "
                              "%s (module kind %s)",
                              rf_quant_name(m->quant), m->name, rf_module_kind_name(m->kind));
    }
    return RF_OK;
}

rf_status_t rf_inventory_apply_layout(rf_inventory_t *inv, rf_rollout_layout_t layout,
                                      rf_err_t *err)
{
    if (layout == RF_ROLLOUT_LAYOUT_VLLM) {
        inv->layout = layout;
        return RF_OK;
    }
    if (layout != RF_ROLLOUT_LAYOUT_HF)
        return rf_err_set(err, RF_ERR_INVALID, "inventory: unknown rollout layout %d", (int)layout);
    if (inv->layout == RF_ROLLOUT_LAYOUT_HF)
        return RF_OK;
    RF_CHECK(refuse_quant(inv, err));
    /* at most three linears fused into one module: the new list is at most 3x as long */
    rf_module_t *nm = calloc((size_t)inv->nmodules * 3 + 1, sizeof(*nm));
    int *first = calloc((size_t)inv->nmodules + 1, sizeof(int));
    if (nm == NULL || first == NULL) {
        free(nm);
        free(first);
        return rf_err_set(err, RF_ERR_NOMEM, "inventory: out of memory");
    }
    const rf_model_config_t *c = &inv->cfg;
    int n = 0;
    for (int i = 0; i < inv->nmodules; i++) {
        const rf_module_t *m = &inv->modules[i];
        int nsh = split_shards(m);
        first[i] = n;
        if (nsh > 0) {
            /* one module per fused shard, in shard order (q, k, v; gate, up; q_a, kv_a), with
             * the weight-side slots of the fused module in its order (weight, then its scale
             * or packed words and group scales), a bias when a tensor brings one */
            for (int s = 0; s < nsh; s++) {
                rf_module_t *o = &nm[n + s];
                memset(o, 0, sizeof(*o));
                o->kind = m->kind == RF_MOD_REPLICATED_LINEAR ? RF_MOD_REPLICATED_LINEAR
                                                              : RF_MOD_COLUMN;
                o->layer = m->layer;
                o->quant = m->quant;
                o->nlinears = 1;
                o->k = m->k;
                if (m->kind == RF_MOD_QKV)
                    o->col_heads = s == 0 ? c->num_attention_heads : c->num_key_value_heads;
                for (int k = 0; k < m->nslots; k++)
                    if (strcmp(m->slot_names[k], "bias") != 0)
                        add_slot(o, m->slot_names[k]);
            }
            for (int j = 0; j < m->ntensors; j++) {
                const rf_tensor_t *t = &inv->tensors[m->tensors[j]];
                /* wna16's weight is weight_packed (N, K/8): K stays the module's */
                bool packed = t->param == RF_PARAM_WEIGHT_PACKED;
                if (t->shard < 0 || t->shard >= nsh || (t->param != RF_PARAM_WEIGHT && !packed))
                    continue;
                rf_module_t *o = &nm[n + t->shard];
                tensor_prefix(t, o->name, sizeof(o->name));
                o->n = t->shape[0];
                o->k = t->ndim >= 2 && !packed ? t->shape[1] : m->k;
            }
            for (int s = 0; s < nsh; s++)
                if (nm[n + s].name[0] == '\0') {
                    free(nm);
                    free(first);
                    return rf_err_set(err, RF_ERR_INTERNAL,
                                      "inventory: %s: fused shard %d has no weight tensor",
                                      m->name, s);
                }
            n += nsh;
            continue;
        }
        nm[n] = *m;
        nm[n].tensors = NULL;
        nm[n].ntensors = 0;
        if (m->kind == RF_MOD_QKV_HEADS) {
            /* one tensor as stored, [q_h; k_h; v_h] per head: a column slice in whole heads */
            nm[n].kind = RF_MOD_COLUMN;
            nm[n].col_heads = c->num_attention_heads;
        } else if (m->kind == RF_MOD_MOE) {
            bool f3 = moe_fused_3d(inv, m);
            for (int s = 0; s < m->nslots; s++)
                moe_slot_name_hf(m->slot_names[s], f3, nm[n].slot_names[s],
                                 sizeof(nm[n].slot_names[s]));
            /* GraniteMoE: the parameters live on block_sparse_moe itself */
            size_t ml = strlen(m->name), sl = strlen(".experts");
            if (f3 && ml > sl && strcmp(m->name + ml - sl, ".experts") == 0)
                nm[n].name[ml - sl] = '\0';
        } else if (m->kind == RF_MOD_REPLICATED && m->ntensors == 1) {
            /* a module vLLM renames (GraniteMoE's router block_sparse_moe.router.layer is
             * vLLM's block_sparse_moe.gate) takes its tensor's checkpoint prefix back */
            const rf_tensor_t *t = &inv->tensors[m->tensors[0]];
            const char *dot = strrchr(t->name, '.');
            if (t->slot == 0 && dot != NULL && strcmp(dot + 1, m->slot_names[0]) == 0)
                tensor_prefix(t, nm[n].name, sizeof(nm[n].name));
        }
        n++;
    }
    /* tensors into the new modules; split ones get the fused module's slot names */
    for (int i = 0; i < inv->ntensors; i++) {
        rf_tensor_t *t = &inv->tensors[i];
        const rf_module_t *m = &inv->modules[t->module];
        if (split_shards(m) > 0) {
            int nt = first[t->module] + t->shard;
            t->module = nt;
            if (t->slot >= 0) /* wna16 weight_shape: checked on arrival, never stored */
                t->slot = add_slot(&nm[nt], m->slot_names[t->slot]);
            t->shard = 0;
        } else {
            t->module = first[t->module];
        }
    }
    for (int i = 0; i < inv->nmodules; i++)
        free(inv->modules[i].tensors);
    free(inv->modules);
    free(first);
    inv->modules = nm;
    inv->nmodules = n;
    for (int i = 0; i < n; i++) {
        nm[i].tensors = calloc(1, sizeof(int));
        if (nm[i].tensors == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "inventory: out of memory");
    }
    for (int i = 0; i < inv->ntensors; i++) {
        rf_module_t *o = &nm[inv->tensors[i].module];
        int *g = realloc(o->tensors, (size_t)(o->ntensors + 1) * sizeof(int));
        if (g == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "inventory: out of memory");
        o->tensors = g;
        o->tensors[o->ntensors++] = i;
    }
    inv->layout = RF_ROLLOUT_LAYOUT_HF;
    return RF_OK;
}
