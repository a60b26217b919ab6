/* Unit tests: runtime storage and the reload planner (DESIGN.md section 8): DIRECT /
 * RUNTIME_VIEW / LAYERWISE decisions, expected applications and their errors, the deferred
 * stage, signature changes, bookkeeping probes and MoE declines. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/format.h"
#include "refit/loader.h"
#include "refit/log.h"
#include "refit/model.h"
#include "refit/plan.h"
#include "refit/storage.h"

/* H 8, nh 4, nkv 2, d 2, I 8, V 10 */
#define DENSE_JSON(type, arch, layers, extra)                                                 \
    "{\"architectures\":[\"" arch "\"],\"model_type\":\"" type "\",\"hidden_size\":8,"        \
    "\"num_hidden_layers\":" #layers ",\"vocab_size\":10,\"num_attention_heads\":4,"          \
    "\"num_key_value_heads\":2,\"head_dim\":2,\"intermediate_size\":8,"                       \
    "\"torch_dtype\":\"bfloat16\"" extra "}"

static const char *LLAMA2 = DENSE_JSON("llama", "LlamaForCausalLM", 2, ",\"tie_word_embeddings\":false");
static const char *LLAMA1 = DENSE_JSON("llama", "LlamaForCausalLM", 1, ",\"tie_word_embeddings\":false");
static const char *LLAMA3 = DENSE_JSON("llama", "LlamaForCausalLM", 3, ",\"tie_word_embeddings\":false");
static const char *QWEN2 = DENSE_JSON("qwen2", "Qwen2ForCausalLM", 1, ",\"tie_word_embeddings\":true");
static const char *MOE5 = DENSE_JSON("qwen3_moe", "Qwen3MoeForCausalLM", 1,
                                     ",\"num_experts\":5,\"moe_intermediate_size\":4,"
                                     "\"num_experts_per_tok\":2,\"tie_word_embeddings\":false");

#define QKV_W "model.layers.0.self_attn.qkv_proj.weight"

static void build_inv(const char *json, rf_inventory_t *inv)
{
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_model_config_parse(json, strlen(json), "test.json", &cfg, &err) == RF_OK,
                  "%s", err.msg);
    ck_assert_msg(rf_inventory_build(&cfg, RF_QUANT_NONE, 0, inv, &err) == RF_OK, "%s", err.msg);
    rf_model_config_free(&cfg);
}

static rf_rollout_coords_t tp(int T, int r)
{
    rf_rollout_coords_t rc = {.tp = T, .tp_rank = r, .dp = 1, .dp_rank = 0, .ep = 1, .ep_rank = 0};
    return rc;
}

typedef struct {
    rf_inventory_t inv;
    rf_storage_t st;
    rf_format_t own; /* used when no custom format is given */
    rf_format_t *f;
    rf_plan_t p;
    rf_rollout_coords_t rc;
} h_t;

static void h_storage(h_t *h, const char *json, const char *fmt, rf_format_t *custom,
                      rf_rollout_coords_t rc)
{
    rf_err_t err;
    rf_err_clear(&err);
    memset(h, 0, sizeof(*h));
    build_inv(json, &h->inv);
    h->rc = rc;
    if (custom != NULL) {
        h->f = custom;
    } else {
        h->own.ops = rf_format_lookup(fmt);
        ck_assert_ptr_nonnull(h->own.ops);
        h->f = &h->own;
    }
    ck_assert_int_eq(rf_storage_init(&h->st, h->inv.nmodules, &err), RF_OK);
    ck_assert_msg(rf_plan_alloc_storage(&h->inv, &h->rc, h->f, &h->st, false, &err) == RF_OK,
                  "%s", err.msg);
}

static void h_plan(h_t *h, rf_reload_policy_t policy)
{
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_plan_build(&h->p, &h->inv, &h->rc, &h->st, h->f, policy, &err) == RF_OK,
                  "%s", err.msg);
}

static void h_init(h_t *h, const char *json, const char *fmt, rf_format_t *custom,
                   rf_rollout_coords_t rc, rf_reload_policy_t policy)
{
    h_storage(h, json, fmt, custom, rc);
    h_plan(h, policy);
}

static void h_free(h_t *h)
{
    rf_plan_free(&h->p);
    rf_storage_free(&h->st);
    rf_inventory_free(&h->inv);
}

/* Source values of tensor t in update u. bf16: small integers, exact in bf16 and fp32 sums. */
static uint16_t val(int t, uint64_t i, uint32_t u, bool bf16)
{
    if (bf16)
        return rf_f32_to_bf16((float)((t * 7 + i + u * 3) % 17 + 1));
    return (uint16_t)(t * 131 + i * 3 + u * 1009 + 1);
}

static uint16_t *src_of(const rf_inventory_t *inv, int t, uint32_t u, bool bf16)
{
    uint64_t n = inv->tensors[t].numel;
    uint16_t *s = malloc(n * 2 + 2);
    for (uint64_t i = 0; i < n; i++)
        s[i] = val(t, i, u, bf16);
    return s;
}

/* One host piece of full-width rows through the planner's one entry. */
static rf_status_t apply_rows(rf_plan_t *p, int t, int sender, uint64_t rb, uint64_t re,
                              const void *src, uint32_t chunk, rf_err_t *err)
{
    rf_piece_src_t ps = {.tensor = t,
                         .sender = sender,
                         .row_begin = rb,
                         .row_end = re,
                         .src = src,
                         .mem = RF_PIECE_HOST,
                         .chunk = chunk};
    return rf_plan_apply(p, &ps, err);
}

/* Applies every tensor (except `skip`) in pieces of `piece` rows (0: whole). Returns the
 * number of pieces; asserts RF_OK on each. */
static uint64_t apply_all(h_t *h, uint32_t u, uint64_t piece, bool bf16, int skip)
{
    rf_err_t err;
    uint64_t pieces = 0;
    uint32_t chunk = 0;
    for (int t = 0; t < h->inv.ntensors; t++) {
        if (t == skip)
            continue;
        const rf_tensor_t *tn = &h->inv.tensors[t];
        uint64_t rows = rf_tensor_rows(tn), w = tn->numel / rows;
        uint16_t *s = src_of(&h->inv, t, u, bf16);
        uint64_t step = piece == 0 ? rows : piece;
        for (uint64_t rb = 0; rb < rows; rb += step) {
            uint64_t re = rb + step < rows ? rb + step : rows;
            rf_err_clear(&err);
            rf_status_t st = apply_rows(&h->p, t, -1, rb, re, s + rb * w, chunk++, &err);
            ck_assert_msg(st == RF_OK, "apply %s [%llu, %llu): %s", tn->name,
                          (unsigned long long)rb, (unsigned long long)re, err.msg);
            pieces++;
        }
        free(s);
    }
    return pieces;
}

static void begin(h_t *h, uint32_t u)
{
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_plan_begin(&h->p, u, &err) == RF_OK, "%s", err.msg);
}

static void finalize_ok(h_t *h)
{
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_plan_finalize(&h->p, &err) == RF_OK, "%s", err.msg);
}

/* One full update: begin, all tensors, finalize. */
static void update(h_t *h, uint32_t u, uint64_t piece, bool bf16)
{
    begin(h, u);
    uint64_t pieces = apply_all(h, u, piece, bf16, -1);
    finalize_ok(h);
    ck_assert_uint_eq(h->p.stats.applications + h->p.stats.declined, (uint64_t)h->inv.ntensors);
    if (h->p.stats.declined == 0)
        ck_assert_uint_eq(h->p.stats.loader_calls, pieces);
    else
        ck_assert_uint_lt(h->p.stats.loader_calls, pieces);
}

/* model-layout bytes of a layer (rf_plan_read_model), concatenated */
static void *read_layer(h_t *h, int m, size_t *bytes_p)
{
    rf_layer_t *L = &h->p.layers[m];
    size_t total = 0, off[RF_MODULE_MAX_SLOTS];
    for (int i = 0; i < L->nmodel; i++) {
        off[i] = total;
        total += rf_slot_shape_bytes(&L->model[i]);
    }
    char *buf = calloc(1, total + 1);
    void *bufs[RF_MODULE_MAX_SLOTS];
    for (int i = 0; i < L->nmodel; i++)
        bufs[i] = buf + off[i];
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_plan_read_model(&h->p, m, bufs, &err) == RF_OK, "%s", err.msg);
    *bytes_p = total;
    return buf;
}

static int module_of(const rf_inventory_t *inv, const char *tensor)
{
    int t = rf_inventory_find(inv, tensor);
    ck_assert_msg(t >= 0, "%s", tensor);
    return inv->tensors[t].module;
}

/* expected qkv weight (and bias) at TP 1: [q; k; v] of the sources */
static uint16_t *qkv_tp1(const rf_inventory_t *inv, const char *param, uint32_t u, bool bf16,
                         size_t *n_p)
{
    static const char *parts[] = {"q_proj", "k_proj", "v_proj"};
    size_t n = 0;
    uint16_t *out = NULL;
    for (int s = 0; s < 3; s++) {
        char name[96];
        snprintf(name, sizeof(name), "model.layers.0.self_attn.%s.%s", parts[s], param);
        int t = rf_inventory_find(inv, name);
        ck_assert_int_ge(t, 0);
        out = realloc(out, (n + inv->tensors[t].numel) * 2);
        for (uint64_t i = 0; i < inv->tensors[t].numel; i++)
            out[n + i] = val(t, i, u, bf16);
        n += inv->tensors[t].numel;
    }
    *n_p = n;
    return out;
}

/* ---- DIRECT / LAYERWISE / test-transpose ----------------------------------------------- */

START_TEST(test_direct_none)
{
    h_t h;
    h_init(&h, LLAMA2, "none", NULL, tp(2, 1), RF_POLICY_AUTO);
    /* 1 embed + 2 x (2 norms, qkv, o, gate_up, down) + norm + lm_head */
    ck_assert_int_eq(h.inv.nmodules, 15);
    ck_assert_uint_eq(h.p.stats.layers[RF_PLAN_DIRECT], 15);
    ck_assert_uint_eq(h.p.stats.layers[RF_PLAN_RUNTIME_VIEW], 0);
    ck_assert_uint_eq(h.p.stats.layers[RF_PLAN_LAYERWISE], 0);
    for (int m = 0; m < h.p.nlayers; m++)
        ck_assert_int_eq(h.p.layers[m].mode, RF_PLAN_DIRECT);
    /* rank 1 of V 10 at TP 2 receives no vocab rows: its whole slot is padding, zeroed at
     * layer completion */
    rf_slot_t *emb = rf_storage_find(&h.st, "model.embed_tokens.weight");
    ck_assert_ptr_nonnull(emb);
    memset(emb->sig.data, 0xFF, rf_signature_bytes(&emb->sig));
    begin(&h, 1);
    uint64_t pieces = apply_all(&h, 1, 3, false, -1);
    finalize_ok(&h);
    ck_assert_uint_eq(h.p.stats.applications, (uint64_t)h.inv.ntensors);
    ck_assert_uint_eq(h.p.stats.loader_calls, pieces);
    ck_assert_uint_eq(h.p.stats.layerwise_runs, 0);
    ck_assert_uint_gt(pieces, (uint64_t)h.inv.ntensors);
    const unsigned char *eb = emb->sig.data;
    for (uint64_t i = 0; i < rf_signature_bytes(&emb->sig); i++)
        ck_assert_uint_eq(eb[i], 0);
    /* DIRECT: the loaders wrote straight into runtime storage: the qkv slot equals the loader's
     * own output into a contiguous buffer */
    rf_slot_t *q = rf_storage_find(&h.st, QKV_W);
    uint64_t qb = rf_signature_bytes(&q->sig);
    ck_assert_uint_eq(qb, 8 * 8 * 2);
    uint16_t *want = calloc(1, qb);
    rf_dst_t d = rf_dst_contiguous(want, &h.p.layers[q->module].model[0]);
    for (int i = 0; i < h.inv.modules[q->module].ntensors; i++) {
        int t = h.inv.modules[q->module].tensors[i];
        uint16_t *s = src_of(&h.inv, t, 1, false);
        rf_load_piece(&h.inv, &h.rc, t, 0, &d, s, h.inv.tensors[t].dtype, 0, rf_tensor_rows(&h.inv.tensors[t]));
        free(s);
    }
    ck_assert_int_eq(memcmp(want, q->sig.data, qb), 0);
    /* q rows 4..7 of tensor q_proj land first: element 0 = source element 32 */
    int tq = rf_inventory_find(&h.inv, "model.layers.0.self_attn.q_proj.weight");
    ck_assert_uint_eq(((uint16_t *)q->sig.data)[0], val(tq, 32, 1, false));
    free(want);
    h_free(&h);
}
END_TEST

static void compare_storage(h_t *a, h_t *b)
{
    ck_assert_int_eq(a->st.nslots, b->st.nslots);
    for (int i = 0; i < a->st.nslots; i++) {
        const rf_slot_t *x = &a->st.slots[i], *y = &b->st.slots[i];
        ck_assert_str_eq(x->name, y->name);
        ck_assert_uint_eq(rf_signature_bytes(&x->sig), rf_signature_bytes(&y->sig));
        ck_assert_msg(memcmp(x->sig.data, y->sig.data, rf_signature_bytes(&x->sig)) == 0,
                      "slot %s differs", x->name);
    }
}

START_TEST(test_layerwise_policy_equals_direct)
{
    h_t d, l;
    h_init(&d, LLAMA2, "none", NULL, tp(2, 0), RF_POLICY_AUTO);
    h_init(&l, LLAMA2, "none", NULL, tp(2, 0), RF_POLICY_LAYERWISE);
    ck_assert_uint_eq(l.p.stats.layers[RF_PLAN_LAYERWISE], 15);
    ck_assert_uint_eq(l.p.stats.layers[RF_PLAN_DIRECT], 0);
    for (int m = 0; m < l.p.nlayers; m++)
        ck_assert_int_eq(l.p.layers[m].mode, RF_PLAN_LAYERWISE);
    for (uint32_t u = 1; u <= 2; u++) {
        update(&d, u, 0, false);
        update(&l, u, 3, false);
        ck_assert_uint_eq(l.p.stats.layerwise_runs, 15);
        ck_assert_uint_eq(l.p.stats.applications, (uint64_t)l.inv.ntensors);
        compare_storage(&d, &l);
    }
    /* and the bytes are real: the final norm is a full copy of its source */
    int t = rf_inventory_find(&l.inv, "model.norm.weight");
    rf_slot_t *n = rf_storage_find(&l.st, "model.norm.weight");
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(((uint16_t *)n->sig.data)[i], val(t, (uint64_t)i, 2, false));
    h_free(&d);
    h_free(&l);
}
END_TEST

START_TEST(test_transpose_layerwise)
{
    h_t d, x;
    h_init(&d, LLAMA2, "none", NULL, tp(1, 0), RF_POLICY_AUTO);
    h_init(&x, LLAMA2, "test-transpose", NULL, tp(1, 0), RF_POLICY_AUTO);
    /* 2 layers x (qkv, o, gate_up, down) LAYERWISE; embed, 4 norms, final norm, lm_head */
    ck_assert_uint_eq(x.p.stats.layers[RF_PLAN_LAYERWISE], 8);
    ck_assert_uint_eq(x.p.stats.layers[RF_PLAN_DIRECT], 7);
    for (int m = 0; m < x.p.nlayers; m++) {
        rf_module_kind_t k = x.inv.modules[m].kind;
        bool lin = k == RF_MOD_QKV || k == RF_MOD_MERGED || k == RF_MOD_ROW;
        ck_assert_msg(x.p.layers[m].mode == (lin ? RF_PLAN_LAYERWISE : RF_PLAN_DIRECT), "%s",
                      x.inv.modules[m].name);
    }
    update(&d, 1, 0, false);
    update(&x, 1, 2, false);
    ck_assert_uint_eq(x.p.stats.layerwise_runs, 8);
    /* runtime storage holds the transposes: runtime (K, N)[c][r] = model (N, K)[r][c] */
    const char *lin[] = {QKV_W, "model.layers.1.self_attn.o_proj.weight",
                         "model.layers.0.mlp.gate_up_proj.weight",
                         "model.layers.1.mlp.down_proj.weight"};
    for (size_t i = 0; i < 4; i++) {
        rf_slot_t *a = rf_storage_find(&d.st, lin[i]), *b = rf_storage_find(&x.st, lin[i]);
        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        int64_t N = a->sig.shape[0], K = a->sig.shape[1];
        ck_assert_int_eq(b->sig.shape[0], K);
        ck_assert_int_eq(b->sig.shape[1], N);
        const uint16_t *ma = a->sig.data, *rb = b->sig.data;
        for (int64_t r = 0; r < N; r++)
            for (int64_t c = 0; c < K; c++)
                ck_assert_uint_eq(rb[c * N + r], ma[r * K + c]);
        ck_assert_int_ne(memcmp(a->sig.data, b->sig.data, rf_signature_bytes(&a->sig)), 0);
    }
    /* qkv runtime row 1 starts with model element (0, 1) = q_proj element 1 */
    int tq = rf_inventory_find(&x.inv, "model.layers.0.self_attn.q_proj.weight");
    ck_assert_uint_eq(((uint16_t *)rf_storage_find(&x.st, QKV_W)->sig.data)[16],
                      val(tq, 1, 1, false));
    /* rf_plan_read_model gives back the model layout of the DIRECT run, every layer */
    for (int m = 0; m < x.p.nlayers; m++) {
        size_t na, nb;
        void *a = read_layer(&d, m, &na), *b = read_layer(&x, m, &nb);
        ck_assert_uint_eq(na, nb);
        ck_assert_msg(memcmp(a, b, na) == 0, "%s", x.inv.modules[m].name);
        free(a);
        free(b);
    }
    h_free(&d);
    h_free(&x);
}
END_TEST

START_TEST(test_storage_offsets)
{
    h_t h;
    h_init(&h, QWEN2, "test-derived", NULL, tp(2, 1), RF_POLICY_AUTO);
    ck_assert_int_gt(h.st.nslots, 0);
    int nonzero = 0;
    for (int i = 0; i < h.st.nslots; i++) {
        const rf_signature_t *s = &h.st.slots[i].sig;
        size_t es = rf_dtype_size(s->dtype);
        ck_assert_ptr_nonnull(s->data);
        ck_assert_int_eq((uintptr_t)s->data % RF_SLOT_ALIGN, 0);
        ck_assert_int_eq((char *)s->data - (char *)s->storage_base,
                         (ptrdiff_t)(s->storage_offset * (int64_t)es));
        ck_assert_uint_le((uint64_t)s->storage_offset * es + rf_signature_bytes(s),
                          s->storage_bytes);
        ck_assert(rf_signature_contiguous(s));
        nonzero += s->storage_offset > 0;
        /* slots of one module share one arena */
        const rf_slot_t *first = rf_storage_module_slot(&h.st, h.st.slots[i].module, 0);
        ck_assert_ptr_eq(first->sig.storage_base, s->storage_base);
    }
    ck_assert_int_eq(nonzero, h.st.nslots);
    /* the qkv module: weight, bias, derived, at increasing 256-aligned offsets */
    int m = module_of(&h.inv, "model.layers.0.self_attn.q_proj.weight");
    ck_assert_int_eq(rf_storage_module_nslots(&h.st, m), 3);
    rf_slot_t *w = rf_storage_module_slot(&h.st, m, 0), *b = rf_storage_module_slot(&h.st, m, 1),
              *dv = rf_storage_module_slot(&h.st, m, 2);
    ck_assert(!w->derived && !b->derived && dv->derived);
    ck_assert_int_eq(w->sig.storage_offset, 256 / 2);
    ck_assert_int_eq(b->sig.storage_offset, 512 / 2); /* 8 x 8 bf16 = 128 B rounds to 256 */
    ck_assert_int_eq(dv->sig.storage_offset, 768 / 4);
    /* planned DIRECT despite the non-zero offsets (the loader writes at the slot's data) */
    ck_assert_int_eq(h.p.layers[m].mode, RF_PLAN_DIRECT);
    ck_assert_ptr_eq(h.p.layers[m].dst[0].data, w->sig.data);
    ck_assert_ptr_eq(h.p.layers[m].dst[1].data, b->sig.data);
    update(&h, 1, 0, false);
    /* bias at TP 2 rank 1 = [q_b 4..7; k_b 2..3; v_b 2..3] */
    int tqb = rf_inventory_find(&h.inv, "model.layers.0.self_attn.q_proj.bias");
    int tkb = rf_inventory_find(&h.inv, "model.layers.0.self_attn.k_proj.bias");
    int tvb = rf_inventory_find(&h.inv, "model.layers.0.self_attn.v_proj.bias");
    const uint16_t *bb = b->sig.data;
    uint16_t want[8] = {val(tqb, 4, 1, false), val(tqb, 5, 1, false), val(tqb, 6, 1, false),
                        val(tqb, 7, 1, false), val(tkb, 2, 1, false), val(tkb, 3, 1, false),
                        val(tvb, 2, 1, false), val(tvb, 3, 1, false)};
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(bb[i], want[i]);
    h_free(&h);
}
END_TEST

/* ---- applications and their errors ------------------------------------------------------ */

START_TEST(test_all_applications)
{
    const char *cfgs[] = {LLAMA2, QWEN2, MOE5};
    for (int c = 0; c < 3; c++) {
        h_t h;
        h_init(&h, cfgs[c], "none", NULL, tp(2, 1), RF_POLICY_AUTO);
        begin(&h, 7);
        uint64_t pieces = apply_all(&h, 7, 0, false, -1);
        ck_assert_uint_eq(pieces, (uint64_t)h.inv.ntensors);
        finalize_ok(&h);
        ck_assert_uint_eq(h.p.stats.applications, (uint64_t)h.inv.ntensors);
        ck_assert_uint_eq(h.p.stats.loader_calls, (uint64_t)h.inv.ntensors);
        ck_assert_uint_eq(h.p.stats.declined, 0);
        ck_assert_uint_eq(h.p.napps, (uint64_t)h.inv.ntensors);
        h_free(&h);
    }
}
END_TEST

static rf_status_t piece(h_t *h, const char *name, int sender, uint64_t rb, uint64_t re,
                         uint32_t chunk, rf_err_t *err)
{
    int t = name ? rf_inventory_find(&h->inv, name) : -1;
    uint16_t buf[1024];
    memset(buf, 0, sizeof(buf));
    rf_err_clear(err);
    return apply_rows(&h->p, t, sender, rb, re, buf, chunk, err);
}

START_TEST(test_errors)
{
    h_t h;
    rf_err_t err;
    const char *q = "model.layers.0.self_attn.q_proj.weight";
    h_init(&h, LLAMA1, "none", NULL, tp(1, 0), RF_POLICY_AUTO);

    /* repeated piece (same row_begin twice) */
    begin(&h, 1);
    ck_assert_int_eq(piece(&h, q, -1, 0, 3, 6, &err), RF_OK);
    ck_assert_int_eq(piece(&h, q, -1, 0, 3, 7, &err), RF_ERR_SEQUENCE);
    ck_assert_ptr_nonnull(strstr(err.msg, q));
    ck_assert_ptr_nonnull(strstr(err.msg, "chunk 7"));
    ck_assert_ptr_nonnull(strstr(err.msg, "repeat"));
    /* an overlapping re-send below the cursor is a repeat too */
    ck_assert_int_eq(piece(&h, q, -1, 2, 5, 8, &err), RF_ERR_SEQUENCE);
    /* gap: rows [3, 4) never came */
    ck_assert_int_eq(piece(&h, q, -1, 4, 8, 9, &err), RF_ERR_SEQUENCE);
    ck_assert_ptr_nonnull(strstr(err.msg, q));
    ck_assert_ptr_nonnull(strstr(err.msg, "chunk 9"));
    ck_assert_ptr_nonnull(strstr(err.msg, "gap"));
    /* the cursor did not move: [3, 8) still fits */
    ck_assert_int_eq(piece(&h, q, -1, 3, 8, 10, &err), RF_OK);
    /* past the tensor's end */
    ck_assert_int_eq(piece(&h, "model.layers.0.self_attn.k_proj.weight", -1, 0, 5, 11, &err),
                     RF_ERR_SEQUENCE);
    /* unknown tensor index, unknown sender */
    rf_err_clear(&err);
    uint16_t buf[64] = {0};
    ck_assert_int_eq(apply_rows(&h.p, h.inv.ntensors + 3, -1, 0, 1, buf, 12, &err),
                     RF_ERR_EXTRA);
    ck_assert_ptr_nonnull(strstr(err.msg, "chunk 12"));
    rf_err_clear(&err);
    ck_assert_int_eq(apply_rows(&h.p, -1, -1, 0, 1, buf, 13, &err), RF_ERR_EXTRA);
    /* a device-memory source needs device storage; an unknown memory kind is refused */
    rf_piece_src_t dps = {.tensor = rf_inventory_find(&h.inv, q), .sender = -1, .row_begin = 3,
                          .row_end = 4, .src = buf, .mem = RF_PIECE_DEVICE, .chunk = 19};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_plan_apply(&h.p, &dps, &err), RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "chunk 19"));
    dps.mem = (rf_piece_mem_t)7;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_plan_apply(&h.p, &dps, &err), RF_ERR_INVALID);
    ck_assert_int_eq(piece(&h, "model.norm.weight", 3, 0, 8, 14, &err), RF_ERR_EXTRA);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.norm.weight"));
    ck_assert_int_eq(piece(&h, "model.norm.weight", 0, 0, 8, 15, &err), RF_ERR_EXTRA);
    /* a piece for a layer already complete */
    ck_assert_int_eq(piece(&h, "model.norm.weight", -1, 0, 8, 16, &err), RF_OK);
    ck_assert(h.p.layers[module_of(&h.inv, "model.norm.weight")].complete);
    ck_assert_int_eq(piece(&h, "model.norm.weight", -1, 0, 8, 17, &err), RF_ERR_EXTRA);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.norm.weight"));
    ck_assert_int_eq(piece(&h, "model.norm.weight", -1, 8, 8, 18, &err), RF_ERR_EXTRA);
    rf_plan_abort(&h.p);

    /* a missing tensor fails at finalize, naming it */
    int miss = rf_inventory_find(&h.inv, "model.layers.0.mlp.up_proj.weight");
    begin(&h, 2);
    apply_all(&h, 2, 3, false, miss);
    ck_assert_uint_eq(h.p.stats.applications, (uint64_t)h.inv.ntensors - 1);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_plan_finalize(&h.p, &err), RF_ERR_MISSING);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.layers.0.mlp.up_proj.weight"));
    /* a partial tensor too */
    begin(&h, 3);
    int tk = rf_inventory_find(&h.inv, "model.layers.0.self_attn.k_proj.weight");
    for (int t = 0; t < h.inv.ntensors; t++) {
        uint64_t rows = rf_tensor_rows(&h.inv.tensors[t]);
        uint16_t *s = src_of(&h.inv, t, 3, false);
        rf_err_clear(&err);
        ck_assert_int_eq(apply_rows(&h.p, t, -1, 0, t == tk ? rows - 1 : rows, s, 0, &err),
                         RF_OK);
        free(s);
    }
    rf_err_clear(&err);
    ck_assert_int_eq(rf_plan_finalize(&h.p, &err), RF_ERR_MISSING);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.layers.0.self_attn.k_proj.weight"));
    /* and the next update commits */
    update(&h, 4, 0, false);
    h_free(&h);
}
END_TEST

/* ---- deferred stage ------------------------------------------------------------------- */

START_TEST(test_deferred_derived)
{
    for (int pol = 0; pol < 2; pol++) {
        h_t h;
        h_init(&h, LLAMA3, "test-derived", NULL, tp(1, 0), (rf_reload_policy_t)pol);
        int nqkv = 0;
        for (int m = 0; m < h.inv.nmodules; m++)
            if (h.inv.modules[m].kind == RF_MOD_QKV) {
                ck_assert(h.p.layers[m].has_derived);
                nqkv++;
            } else {
                ck_assert(!h.p.layers[m].has_derived);
            }
        ck_assert_int_eq(nqkv, 3);
        ck_assert_uint_eq(h.own.derived_runs, 0);
        for (uint32_t u = 1; u <= 3; u++) {
            update(&h, u, pol ? 3 : 0, true);
            ck_assert_uint_eq(h.own.derived_runs, 3 * u);
            ck_assert_uint_eq(h.p.stats.derived_runs, 3);
            for (int layer = 0; layer < 3; layer++) {
                /* expected: sum of the q, k, v source values of this layer, this update */
                float want = 0.0f;
                static const char *parts[] = {"q_proj", "k_proj", "v_proj"};
                for (int s = 0; s < 3; s++) {
                    char name[96];
                    snprintf(name, sizeof(name), "model.layers.%d.self_attn.%s.weight", layer,
                             parts[s]);
                    int t = rf_inventory_find(&h.inv, name);
                    for (uint64_t i = 0; i < h.inv.tensors[t].numel; i++)
                        want += rf_bf16_to_f32(val(t, i, u, true));
                }
                char dn[96];
                snprintf(dn, sizeof(dn), "model.layers.%d.self_attn.qkv_proj.derived_sum",
                         layer);
                rf_slot_t *d = rf_storage_find(&h.st, dn);
                ck_assert_ptr_nonnull(d);
                ck_assert(d->derived);
                ck_assert_msg(*(float *)d->sig.data == want, "%s = %g, expected %g", dn,
                              (double)*(float *)d->sig.data, (double)want);
                ck_assert(want > 0.0f);
            }
        }
        /* a failed update runs no deferred stage */
        rf_err_t err;
        begin(&h, 4);
        apply_all(&h, 4, 0, true, 0);
        rf_err_clear(&err);
        ck_assert_int_eq(rf_plan_finalize(&h.p, &err), RF_ERR_MISSING);
        ck_assert_uint_eq(h.own.derived_runs, 9);
        h_free(&h);
    }
}
END_TEST

/* ---- signatures --------------------------------------------------------------------------- */

START_TEST(test_move_before_update)
{
    h_t h;
    rf_err_t err;
    h_init(&h, LLAMA1, "none", NULL, tp(1, 0), RF_POLICY_AUTO);
    update(&h, 1, 0, false);
    size_t n;
    uint16_t *want1 = qkv_tp1(&h.inv, "weight", 1, false, &n);
    uint16_t *want2 = qkv_tp1(&h.inv, "weight", 2, false, &n);
    ck_assert_int_ne(memcmp(want1, want2, n * 2), 0);
    rf_slot_t *s = rf_storage_find(&h.st, QKV_W);
    void *old = s->sig.data;
    ck_assert_int_eq(memcmp(old, want1, n * 2), 0);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_storage_move_slot(&h.st, QKV_W, &err), RF_OK);
    s = rf_storage_find(&h.st, QKV_W);
    ck_assert_ptr_ne(s->sig.data, old);
    ck_assert_uint_eq(h.p.stats.rebuilds, 0);
    begin(&h, 2);
    ck_assert_uint_eq(h.p.stats.rebuilds, 1);
    int m = s->module;
    ck_assert_int_eq(h.p.layers[m].mode, RF_PLAN_DIRECT);
    ck_assert_ptr_eq(h.p.layers[m].dst[0].data, s->sig.data);
    apply_all(&h, 2, 3, false, -1);
    finalize_ok(&h);
    /* the loaders wrote the NEW storage; the old arena still holds update 1 */
    ck_assert_int_eq(memcmp(s->sig.data, want2, n * 2), 0);
    ck_assert_int_eq(memcmp(old, want1, n * 2), 0);
    /* no further change: no further rebuild */
    update(&h, 3, 0, false);
    ck_assert_uint_eq(h.p.stats.rebuilds, 1);
    free(want1);
    free(want2);
    h_free(&h);
}
END_TEST

START_TEST(test_move_during_update)
{
    h_t h;
    rf_err_t err;
    h_init(&h, LLAMA1, "none", NULL, tp(1, 0), RF_POLICY_AUTO);
    begin(&h, 1);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_storage_move_slot(&h.st, "model.layers.0.mlp.down_proj.weight", &err),
                     RF_OK);
    apply_all(&h, 1, 0, false, -1);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_plan_finalize(&h.p, &err), RF_ERR_MOVED);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.layers.0.mlp.down_proj.weight"));
    ck_assert_uint_eq(h.p.stats.rebuilds, 0);
    /* the next update rebuilds against the moved slot and commits */
    update(&h, 2, 0, false);
    ck_assert_uint_eq(h.p.stats.rebuilds, 1);
    h_free(&h);

    /* the failed update runs no deferred stage: the loaders wrote the old storage, so derived
     * state computed from the moved slot would come from stale bytes */
    h_init(&h, LLAMA1, "test-derived", NULL, tp(1, 0), RF_POLICY_AUTO);
    begin(&h, 1);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_storage_move_slot(&h.st, QKV_W, &err), RF_OK);
    apply_all(&h, 1, 0, true, -1);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_plan_finalize(&h.p, &err), RF_ERR_MOVED);
    ck_assert_ptr_nonnull(strstr(err.msg, QKV_W));
    ck_assert_uint_eq(h.own.derived_runs, 0);
    update(&h, 2, 0, true);
    ck_assert_uint_eq(h.own.derived_runs, 1);
    ck_assert_uint_eq(h.p.stats.rebuilds, 1);
    h_free(&h);
}
END_TEST

/* ---- bookkeeping and MoE declines ----------------------------------------------------- */

static double probes_per_piece(int layers, int experts, int *ntensors_p)
{
    char json[1024];
    snprintf(json, sizeof(json),
             "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\","
             "\"hidden_size\":8,\"num_hidden_layers\":%d,\"vocab_size\":10,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":2,"
             "\"intermediate_size\":8,\"num_experts\":%d,\"moe_intermediate_size\":4,"
             "\"num_experts_per_tok\":2,\"torch_dtype\":\"bfloat16\"}",
             layers, experts);
    h_t h;
    rf_err_t err;
    h_init(&h, json, "none", NULL, tp(1, 0), RF_POLICY_AUTO);
    static uint16_t zeros[1 << 17];
    begin(&h, 1);
    for (int t = 0; t < h.inv.ntensors; t++) {
        ck_assert_uint_le(h.inv.tensors[t].numel, sizeof(zeros) / 2);
        rf_err_clear(&err);
        ck_assert_int_eq(apply_rows(&h.p, t, -1, 0, rf_tensor_rows(&h.inv.tensors[t]), zeros,
                                    (uint32_t)t, &err),
                         RF_OK);
    }
    finalize_ok(&h);
    ck_assert_uint_eq(h.p.stats.applications, (uint64_t)h.inv.ntensors);
    ck_assert_uint_ge(h.p.stats.bookkeeping_probes, (uint64_t)h.inv.ntensors);
    double r = (double)h.p.stats.bookkeeping_probes / (double)h.p.stats.loader_calls;
    *ntensors_p = h.inv.ntensors;
    h_free(&h);
    return r;
}

START_TEST(test_bookkeeping_flat)
{
    /* per MoE layer 3 E + 9 tensors, plus embed, final norm, lm_head */
    int n1, n2, n3;
    double a = probes_per_piece(4, 80, &n1);
    double b = probes_per_piece(4, 830, &n2);
    double c = probes_per_piece(4, 8330, &n3);
    ck_assert_int_eq(n1, 999);
    ck_assert_int_eq(n2, 9999);
    ck_assert_int_eq(n3, 99999);
    ck_assert_msg(a < 4.0 && b < 4.0 && c < 4.0, "probes per piece %g %g %g", a, b, c);
    double lo = a < b ? (a < c ? a : c) : (b < c ? b : c);
    double hi = a > b ? (a > c ? a : c) : (b > c ? b : c);
    ck_assert_msg(hi < 1.5 * lo, "probes per piece not flat: %g %g %g", a, b, c);
}
END_TEST

START_TEST(test_moe_declined)
{
    struct {
        rf_expert_placement_t pl;
        int q;
        int locals[3], nl;
    } cases[] = {
        {RF_PLACE_LINEAR, 0, {0, 1, 2}, 3},
        {RF_PLACE_LINEAR, 1, {3, 4}, 2},
        {RF_PLACE_ROUND_ROBIN, 0, {0, 2, 4}, 3},
        {RF_PLACE_ROUND_ROBIN, 1, {1, 3}, 2},
    };
    for (int c = 0; c < 4; c++) {
        rf_rollout_coords_t rc = {.tp = 2, .tp_rank = cases[c].q, .dp = 1, .ep = 2,
                                  .ep_rank = cases[c].q, .placement = cases[c].pl};
        h_t h;
        rf_err_t err;
        h_init(&h, MOE5, "none", NULL, rc, RF_POLICY_AUTO);
        rf_slot_t *w13 = rf_storage_find(&h.st, "model.layers.0.mlp.experts.w13_weight");
        ck_assert_ptr_nonnull(w13);
        ck_assert_int_eq(w13->sig.shape[0], cases[c].nl);
        ck_assert_int_eq(w13->sig.shape[1], 8); /* EP on: I_p = I = 4, gate + up */
        begin(&h, 1);
        /* declined experts' sources are poison: none of it may land anywhere */
        for (int t = 0; t < h.inv.ntensors; t++) {
            const rf_tensor_t *tn = &h.inv.tensors[t];
            uint16_t *s = src_of(&h.inv, t, 1, false);
            bool local = tn->expert < 0;
            for (int i = 0; i < cases[c].nl; i++)
                local |= tn->expert == cases[c].locals[i];
            if (!local)
                for (uint64_t i = 0; i < tn->numel; i++)
                    s[i] = 0xDEAD;
            uint64_t rows = rf_tensor_rows(tn), w = tn->numel / rows;
            for (uint64_t rb = 0; rb < rows; rb += 3) {
                rf_err_clear(&err);
                ck_assert_int_eq(apply_rows(&h.p, t, -1, rb, rb + 3 < rows ? rb + 3 : rows,
                                            s + rb * w, 0, &err),
                                 RF_OK);
            }
            free(s);
        }
        finalize_ok(&h);
        uint64_t ndecl = 3 * (uint64_t)(5 - cases[c].nl);
        ck_assert_uint_eq(h.p.stats.declined, ndecl);
        ck_assert_uint_eq(h.p.stats.applications, (uint64_t)h.inv.ntensors - ndecl);
        for (int i = 0; i < h.st.nslots; i++) {
            const uint16_t *x = h.st.slots[i].sig.data;
            for (uint64_t k = 0; k < rf_signature_bytes(&h.st.slots[i].sig) / 2; k++)
                ck_assert_msg(x[k] != 0xDEAD, "declined bytes in %s", h.st.slots[i].name);
        }
        /* local expert i holds its global expert's gate rows then up rows */
        for (int i = 0; i < cases[c].nl; i++) {
            char g[96], u[96];
            snprintf(g, sizeof(g), "model.layers.0.mlp.experts.%d.gate_proj.weight",
                     cases[c].locals[i]);
            snprintf(u, sizeof(u), "model.layers.0.mlp.experts.%d.up_proj.weight",
                     cases[c].locals[i]);
            int tg = rf_inventory_find(&h.inv, g), tu = rf_inventory_find(&h.inv, u);
            const uint16_t *x = (const uint16_t *)w13->sig.data + i * 64;
            for (int k = 0; k < 32; k++) {
                ck_assert_uint_eq(x[k], val(tg, (uint64_t)k, 1, false));
                ck_assert_uint_eq(x[32 + k], val(tu, (uint64_t)k, 1, false));
            }
        }
        h_free(&h);
    }
}
END_TEST

/* ---- RUNTIME_VIEW: a test-only format owner with a configurable mapping ---------------- */

enum {
    MV_DETACHED, /* (a) view over a detached copy */
    MV_PARTIAL,  /* (b) one param missing */
    MV_STRIDE0,  /* (c) internal overlap: a stride 0 */
    MV_REPEAT,   /* (c) internal overlap: repeated strides */
    MV_ALLZERO,  /* (c) internal overlap: every stride 0 (the stride chain alone holds) */
    MV_GAPPED,   /* not dense: strides doubled, the view would run past its slot */
    MV_OFFSET,   /* (d) data + 256 */
    MV_SHRUNK,   /* (e) shape shrunk */
    MV_BIGSLOT,  /* (e) runtime slot larger than the view covers */
    MV_DERIVED,  /* (f) a derived buffer routed through the mapping */
    MV_VALID,    /* (g) valid transposed dense view */
    MV_NCASES
};

typedef struct {
    rf_format_t base; /* first: the planner sees an rf_format_t */
    int mode;
    uint16_t *detached;
    int mapping_calls;
} mv_format_t;

static bool mv_linear(const rf_inventory_t *inv, int m)
{
    rf_module_kind_t k = inv->modules[m].kind;
    return k == RF_MOD_QKV || k == RF_MOD_MERGED || k == RF_MOD_ROW;
}

static rf_status_t mv_runtime_slots(const rf_format_t *f, const rf_inventory_t *inv, int m,
                                    const rf_slot_shape_t *model, int nmodel,
                                    rf_slot_shape_t *rt, bool *derived, int *nrt_p,
                                    rf_err_t *err)
{
    const mv_format_t *mf = (const mv_format_t *)f;
    (void)err;
    for (int i = 0; i < nmodel; i++) {
        rt[i] = model[i];
        derived[i] = false;
        if (mv_linear(inv, m) && model[i].ndim == 2) {
            rt[i].shape[0] = model[i].shape[1];
            rt[i].shape[1] = model[i].shape[0];
            if (mf->mode == MV_BIGSLOT && inv->modules[m].kind == RF_MOD_QKV)
                rt[i].shape[0] += 1;
        }
    }
    *nrt_p = nmodel;
    if (inv->modules[m].kind == RF_MOD_QKV) { /* a derived buffer shaped like the weight */
        rt[nmodel] = model[0];
        snprintf(rt[nmodel].name, sizeof(rt[nmodel].name), "derived_copy");
        derived[nmodel] = true;
        *nrt_p = nmodel + 1;
    }
    return RF_OK;
}

static bool mv_identity(const rf_format_t *f, const rf_inventory_t *inv, int m)
{
    (void)f;
    return !mv_linear(inv, m);
}

static bool mv_mapping(const rf_format_t *f, const rf_inventory_t *inv, int m,
                       const rf_slot_shape_t *model, int nmodel, rf_slot_t *const *rt, int nrt,
                       rf_view_t *views)
{
    mv_format_t *mf = (mv_format_t *)f;
    mf->mapping_calls++;
    if (inv->modules[m].kind != RF_MOD_QKV)
        return false;
    ck_assert_int_eq(nmodel, 2); /* Qwen2: weight, bias */
    ck_assert_int_eq(nrt, 3);
    int64_t R = model[0].shape[0], K = model[0].shape[1];
    rf_view_t *w = &views[0], *b = &views[1];
    *w = (rf_view_t){.data = rt[0]->sig.data, .dtype = model[0].dtype, .ndim = 2,
                     .shape = {R, K}, .stride = {1, R}, .runtime_slot = 0};
    *b = (rf_view_t){.data = rt[1]->sig.data, .dtype = model[1].dtype, .ndim = 1,
                     .shape = {R}, .stride = {1}, .runtime_slot = 1};
    switch (mf->mode) {
    case MV_DETACHED:
        w->data = mf->detached;
        break;
    case MV_PARTIAL:
        b->data = NULL;
        break;
    case MV_STRIDE0:
        w->stride[0] = 0;
        break;
    case MV_REPEAT:
        w->stride[0] = 1;
        w->stride[1] = 1;
        break;
    case MV_ALLZERO:
        w->stride[0] = 0;
        w->stride[1] = 0;
        break;
    case MV_GAPPED:
        w->stride[0] = 2;
        w->stride[1] = 2 * R;
        break;
    case MV_OFFSET:
        w->data = (char *)w->data + 256;
        break;
    case MV_SHRUNK:
        w->shape[0] = R - 2;
        break;
    case MV_DERIVED:
        w->data = rt[2]->sig.data;
        w->stride[0] = K;
        w->stride[1] = 1;
        w->runtime_slot = 2;
        break;
    default:
        break;
    }
    return true;
}

/* LAYERWISE fallback: transpose 2-D linear weights into the runtime slots' leading bytes */
static rf_status_t mv_move(const rf_inventory_t *inv, int m, const rf_slot_shape_t *model,
                           void *const *bufs, int nmodel, rf_slot_t *const *rt, bool to_rt)
{
    for (int i = 0; i < nmodel; i++) {
        ck_assert_uint_ge(rf_signature_bytes(&rt[i]->sig), rf_slot_shape_bytes(&model[i]));
        uint16_t *x = rt[i]->sig.data, *y = bufs[i];
        if (mv_linear(inv, m) && model[i].ndim == 2) {
            int64_t R = model[i].shape[0], K = model[i].shape[1];
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < K; c++) {
                    if (to_rt)
                        x[c * R + r] = y[r * K + c];
                    else
                        y[r * K + c] = x[c * R + r];
                }
        } else if (to_rt) {
            memcpy(x, y, rf_slot_shape_bytes(&model[i]));
        } else {
            memcpy(y, x, rf_slot_shape_bytes(&model[i]));
        }
    }
    return RF_OK;
}

static rf_status_t mv_process(const rf_format_t *f, const rf_inventory_t *inv, int m,
                              const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                              rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)f, (void)nrt, (void)err;
    return mv_move(inv, m, model, bufs, nmodel, rt, true);
}

static rf_status_t mv_to_model(const rf_format_t *f, const rf_inventory_t *inv, int m,
                               const rf_slot_shape_t *model, void *const *bufs, int nmodel,
                               rf_slot_t *const *rt, int nrt, rf_err_t *err)
{
    (void)f, (void)nrt, (void)err;
    return mv_move(inv, m, model, bufs, nmodel, rt, false);
}

static const rf_format_ops_t mv_ops = {
    .name = "test-mapping",
    .runtime_slots = mv_runtime_slots,
    .identity = mv_identity,
    .runtime_mapping = mv_mapping,
    .process_after_loading = mv_process,
    .runtime_to_model = mv_to_model,
    .compute_derived = NULL,
};

/* why each case is refused (substrings of the planner's reasons) */
static const char *mv_why[MV_NCASES] = {
    [MV_DETACHED] = "byte offset", [MV_PARTIAL] = "misses",
    [MV_STRIDE0] = "injective",    [MV_REPEAT] = "injective",
    [MV_ALLZERO] = "injective",    [MV_GAPPED] = "injective",
    [MV_OFFSET] = "byte offset",   [MV_SHRUNK] = "shape",
    [MV_BIGSLOT] = "bytes",        [MV_DERIVED] = "buffer",
};

START_TEST(test_runtime_view_validation)
{
    for (int mode = 0; mode < MV_NCASES; mode++) {
        mv_format_t mf;
        memset(&mf, 0, sizeof(mf));
        mf.base.ops = &mv_ops;
        mf.mode = mode;
        mf.detached = malloc(16 * 8 * 2);
        for (int i = 0; i < 16 * 8; i++)
            mf.detached[i] = 0xBEEF;
        h_t h;
        h_storage(&h, QWEN2, NULL, &mf.base, tp(1, 0));
        int m = module_of(&h.inv, "model.layers.0.self_attn.q_proj.weight");
        rf_slot_t *w = rf_storage_module_slot(&h.st, m, 0), *b = rf_storage_module_slot(&h.st, m, 1);
        /* snapshot of the whole slot table before planning */
        int nslots = h.st.nslots;
        size_t sb = (size_t)nslots * sizeof(rf_slot_t);
        rf_slot_t *snap = malloc(sb);
        memcpy(snap, h.st.slots, sb);
        h_plan(&h, RF_POLICY_AUTO);
        ck_assert_int_gt(mf.mapping_calls, 0);
        ck_assert_int_eq(h.st.nslots, nslots);
        ck_assert_msg(memcmp(snap, h.st.slots, sb) == 0, "mode %d: slot table changed", mode);
        rf_layer_t *L = &h.p.layers[m];
        if (mode == MV_VALID) {
            ck_assert_int_eq(L->mode, RF_PLAN_RUNTIME_VIEW);
            ck_assert_uint_eq(h.p.stats.layers[RF_PLAN_RUNTIME_VIEW], 1);
            ck_assert_ptr_eq(L->dst[0].data, w->sig.data);
            ck_assert_int_eq(L->dst[0].row_stride, 1);
            ck_assert_int_eq(L->dst[0].col_stride, 16);
            ck_assert_ptr_eq(L->dst[1].data, b->sig.data);
        } else {
            ck_assert_msg(L->mode == RF_PLAN_LAYERWISE, "mode %d planned %s", mode,
                          rf_plan_mode_name(L->mode));
            ck_assert_uint_eq(h.p.stats.layers[RF_PLAN_RUNTIME_VIEW], 0);
            for (int i = 0; i < L->nmodel; i++)
                ck_assert_msg(L->dst[i].data == NULL, "mode %d: param %d bound", mode, i);
            ck_assert_ptr_nonnull(L->why);
            ck_assert_msg(strstr(L->why, mv_why[mode]) != NULL, "mode %d refused for '%s'",
                          mode, L->why);
        }
        /* o_proj, gate_up, down: owner declines, LAYERWISE; norms, embedding: DIRECT */
        ck_assert_uint_eq(h.p.stats.layers[RF_PLAN_DIRECT], 4);
        /* an update lands the right bytes either way */
        update(&h, 1, 3, false);
        ck_assert_uint_eq(h.p.stats.layerwise_runs, mode == MV_VALID ? 3 : 4);
        ck_assert_msg(memcmp(snap, h.st.slots, sb) == 0, "mode %d: slot table changed", mode);
        size_t nw, nb, nread;
        uint16_t *ww = qkv_tp1(&h.inv, "weight", 1, false, &nw);
        uint16_t *wb = qkv_tp1(&h.inv, "bias", 1, false, &nb);
        ck_assert_uint_eq(nw, 16 * 8);
        const uint16_t *rw = w->sig.data;
        for (int64_t r = 0; r < 16; r++)
            for (int64_t c = 0; c < 8; c++)
                ck_assert_uint_eq(rw[c * 16 + r], ww[r * 8 + c]);
        ck_assert_int_eq(memcmp(b->sig.data, wb, nb * 2), 0);
        uint16_t *back = read_layer(&h, m, &nread);
        ck_assert_uint_eq(nread, (nw + nb) * 2);
        ck_assert_int_eq(memcmp(back, ww, nw * 2), 0);
        ck_assert_int_eq(memcmp(back + nw, wb, nb * 2), 0);
        for (int i = 0; i < 16 * 8; i++) /* nothing went through the detached copy */
            ck_assert_uint_eq(mf.detached[i], 0xBEEF);
        free(back);
        free(ww);
        free(wb);
        free(snap);
        free(mf.detached);
        h_free(&h);
    }
}
END_TEST

START_TEST(test_runtime_view_reconfirmed)
{
    /* DESIGN.md 8.7: RUNTIME_VIEW re-confirms the owner's mapping every update: an owner that
     * now maps over a detached copy gets the layer replanned (LAYERWISE) before update 2 */
    mv_format_t mf;
    memset(&mf, 0, sizeof(mf));
    mf.base.ops = &mv_ops;
    mf.mode = MV_VALID;
    mf.detached = malloc(16 * 8 * 2);
    for (int i = 0; i < 16 * 8; i++)
        mf.detached[i] = 0xBEEF;
    h_t h;
    h_init(&h, QWEN2, NULL, &mf.base, tp(1, 0), RF_POLICY_AUTO);
    int m = module_of(&h.inv, "model.layers.0.self_attn.q_proj.weight");
    ck_assert_int_eq(h.p.layers[m].mode, RF_PLAN_RUNTIME_VIEW);
    update(&h, 1, 0, false);
    int calls = mf.mapping_calls;
    update(&h, 2, 0, false); /* unchanged mapping: confirmed, no rebuild */
    ck_assert_int_gt(mf.mapping_calls, calls);
    ck_assert_uint_eq(h.p.stats.rebuilds, 0);
    ck_assert_int_eq(h.p.layers[m].mode, RF_PLAN_RUNTIME_VIEW);
    mf.mode = MV_DETACHED;
    update(&h, 3, 0, false);
    ck_assert_uint_eq(h.p.stats.rebuilds, 1);
    ck_assert_int_eq(h.p.layers[m].mode, RF_PLAN_LAYERWISE);
    for (int i = 0; i < 16 * 8; i++)
        ck_assert_uint_eq(mf.detached[i], 0xBEEF);
    size_t nw;
    uint16_t *ww = qkv_tp1(&h.inv, "weight", 3, false, &nw);
    const uint16_t *rw = rf_storage_module_slot(&h.st, m, 0)->sig.data;
    for (int64_t r = 0; r < 16; r++)
        for (int64_t c = 0; c < 8; c++)
            ck_assert_uint_eq(rw[c * 16 + r], ww[r * 8 + c]);
    free(ww);
    free(mf.detached);
    h_free(&h);
}
END_TEST

int main(void)
{
    rf_log_set_level(RF_LOG_WARN);
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_direct_none);
    tcase_add_test(tc, test_layerwise_policy_equals_direct);
    tcase_add_test(tc, test_transpose_layerwise);
    tcase_add_test(tc, test_storage_offsets);
    tcase_add_test(tc, test_all_applications);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_deferred_derived);
    tcase_add_test(tc, test_move_before_update);
    tcase_add_test(tc, test_move_during_update);
    tcase_add_test(tc, test_moe_declined);
    tcase_add_test(tc, test_runtime_view_validation);
    tcase_add_test(tc, test_runtime_view_reconfirmed);
    suite_add_tcase(s, tc);
    TCase *big = tcase_create("bookkeeping");
    tcase_set_timeout(big, 120);
    tcase_add_test(big, test_bookkeeping_flat);
    suite_add_tcase(s, big);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
