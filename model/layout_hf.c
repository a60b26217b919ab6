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
 * Quantized modules are refused: transformers' quantizers (compressed-tensors, fbgemm / fp8)
 * keep layouts of their own (packed words, scale parameters per module) that no engine here
 * registers, so there is no agreed hf shape to reload into.
 */
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
    /* experts stored fused in one 3-D checkpoint tensor (GraniteMoE's input_linear
     * [E, 2I, H]): the rewrite below knows per-expert tensors only */
    for (int i = 0; i < inv->ntensors; i++)
        if (rf_tensor_all_experts(&inv->tensors[i]))
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "rollout.layout hf is not supported for %s (%s holds every expert "
                              "fused in one 3-D tensor; use rollout.layout vllm)",
                              inv->cfg.model_type, inv->tensors[i].name);
    for (int i = 0; i < inv->nmodules; i++) {
        const rf_module_t *m = &inv->modules[i];
        if (m->quant == RF_QUANT_NONE)
            continue;
        /* named by its first checkpoint tensor: the hf parameter the engine would hold */
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "rollout.layout hf with model.quantization %s is not supported (%s, "
                          "in module %s, is %s; transformers' quantizers keep layouts of their "
                          "own: use rollout.layout vllm)",
                          rf_quant_name(inv->quant),
                          m->ntensors > 0 ? inv->tensors[m->tensors[0]].name : m->name, m->name,
                          rf_quant_name(m->quant));
    }
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
        first[i] = n;
        if (m->kind == RF_MOD_QKV || m->kind == RF_MOD_MERGED) {
            /* one module per fused shard, in shard order (q, k, v; gate, up) */
            int nsh = m->kind == RF_MOD_QKV ? 3 : 2;
            for (int s = 0; s < nsh; s++) {
                rf_module_t *o = &nm[n + s];
                memset(o, 0, sizeof(*o));
                o->kind = RF_MOD_COLUMN;
                o->layer = m->layer;
                o->quant = RF_QUANT_NONE;
                o->nlinears = 1;
                o->k = m->k;
                if (m->kind == RF_MOD_QKV)
                    o->col_heads = s == 0 ? c->num_attention_heads : c->num_key_value_heads;
            }
            for (int j = 0; j < m->ntensors; j++) {
                const rf_tensor_t *t = &inv->tensors[m->tensors[j]];
                if (t->shard < 0 || t->shard >= nsh || t->param != RF_PARAM_WEIGHT)
                    continue;
                rf_module_t *o = &nm[n + t->shard];
                tensor_prefix(t, o->name, sizeof(o->name));
                o->n = t->shape[0];
                o->k = t->ndim >= 2 ? t->shape[1] : m->k;
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
            for (int s = 0; s < m->nslots; s++) {
                if (strcmp(m->slot_names[s], "w13_weight") == 0)
                    snprintf(nm[n].slot_names[s], sizeof(nm[n].slot_names[s]), "gate_up_proj");
                else if (strcmp(m->slot_names[s], "w2_weight") == 0)
                    snprintf(nm[n].slot_names[s], sizeof(nm[n].slot_names[s]), "down_proj");
            }
        }
        n++;
    }
    /* tensors into the new modules; split ones get slots weight (0) then bias (1) */
    for (int i = 0; i < inv->ntensors; i++) {
        rf_tensor_t *t = &inv->tensors[i];
        const rf_module_t *m = &inv->modules[t->module];
        if (m->kind == RF_MOD_QKV || m->kind == RF_MOD_MERGED) {
            int nt = first[t->module] + t->shard;
            rf_module_t *o = &nm[nt];
            if (o->nslots == 0)
                add_slot(o, "weight");
            t->module = nt;
            t->slot = add_slot(o, t->param == RF_PARAM_BIAS ? "bias" : "weight");
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
