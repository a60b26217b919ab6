/*
 * refit: topology files (DESIGN.md section 3).
 *
 * Parses a topology YAML text with libyaml into rf_topology_t. A first pass over libyaml's
 * events refuses anchors, aliases, explicit tags and multi-document streams; a second pass
 * loads the document tree, which is walked section by section. Every key is known here:
 * unknown and duplicate keys (at every level), wrong types (a quoted "2" or "true", 1.5 where
 * an integer belongs, a list where a map belongs) and out-of-range values are errors of the
 * form "<file>: <key>: <value> ...". After the walk the rules that need only the file are
 * checked (rollout.ep, T mod (etp ep pp), pp_layers length, colocation, the mpi chunk limit,
 * the (quantization, backend) pair); the rules that need the model config are model/'s
 * (rf_model_check_topology() in model/model_topology.c, DESIGN.md sections 3 and 5). Also
 * here: the quantization names, the canonical form and its XXH3 hash, and the rank placement
 * arithmetic.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <yaml.h>

#include "refit/log.h"
#include "refit/topology.h"

#define RF_TOPO_MAX_DIM 65536                         /* any one parallel size */
#define RF_TOPO_MAX_RANKS 1048576                     /* T or R */
#define RF_MPI_CHUNK_MAX ((uint64_t)2147483647 - 255) /* 2^31 - 256: Open MPI int counts */
#define RF_CHUNK_MAX ((uint64_t)1 << 40)

const char *rf_quant_name(rf_quant_t q)
{
    switch (q) {
    case RF_QUANT_NONE:
        return "none";
    case RF_QUANT_FP8_BLOCK:
        return "fp8-block";
    case RF_QUANT_WNA16:
        return "wna16";
    case RF_QUANT_FP8_TENSOR:
        return "fp8-tensor";
    case RF_QUANT_FP8_CHANNEL:
        return "fp8-channel";
    }
    return "?";
}

int rf_quant_parse(const char *s, rf_quant_t *out)
{
    if (strcmp(s, "none") == 0)
        *out = RF_QUANT_NONE;
    else if (strcmp(s, "fp8-block") == 0)
        *out = RF_QUANT_FP8_BLOCK;
    else if (strcmp(s, "wna16") == 0)
        *out = RF_QUANT_WNA16;
    else if (strcmp(s, "fp8-tensor") == 0)
        *out = RF_QUANT_FP8_TENSOR;
    else if (strcmp(s, "fp8-channel") == 0)
        *out = RF_QUANT_FP8_CHANNEL;
    else
        return -1;
    return 0;
}

const char *rf_transport_name(rf_transport_kind_t t)
{
    switch (t) {
    case RF_TRANSPORT_MPI:
        return "mpi";
    case RF_TRANSPORT_NCCL:
        return "nccl";
    case RF_TRANSPORT_IPC:
        return "ipc";
    }
    return "?";
}

const char *rf_mode_name(rf_mode_t m)
{
    return m == RF_MODE_P2P ? "p2p" : m == RF_MODE_BROADCAST ? "broadcast" : "?";
}

const char *rf_backend_name(rf_backend_t b)
{
    switch (b) {
    case RF_BACKEND_TRITON:
        return "triton";
    case RF_BACKEND_CUTLASS:
        return "cutlass";
    case RF_BACKEND_ROCM_FNUZ:
        return "rocm-fnuz";
    case RF_BACKEND_MARLIN:
        return "marlin";
    }
    return "?";
}

const char *rf_trainer_layout_name(rf_trainer_layout_t l)
{
    return l == RF_TRAINER_LAYOUT_FSDP       ? "fsdp"
           : l == RF_TRAINER_LAYOUT_MEGATRON ? "megatron"
                                             : "?";
}

const char *rf_rollout_layout_name(rf_rollout_layout_t l)
{
    return l == RF_ROLLOUT_LAYOUT_HF ? "hf" : l == RF_ROLLOUT_LAYOUT_VLLM ? "vllm" : "?";
}

static const char *placement_name(rf_expert_placement_t p)
{
    return p == RF_PLACE_ROUND_ROBIN ? "round_robin" : "linear";
}

/* ---- sizes and rates ------------------------------------------------------------------ */

static int unit_factor(const char *u, double *f)
{
    static const struct {
        const char *s;
        double f;
    } units[] = {
        {"", 1.0},
        {"B", 1.0},
        {"KiB", 1024.0},
        {"MiB", 1048576.0},
        {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0},
        {"KB", 1e3},
        {"MB", 1e6},
        {"GB", 1e9},
        {"TB", 1e12},
    };
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(u, units[i].s) == 0) {
            *f = units[i].f;
            return 0;
        }
    return -1;
}

rf_status_t rf_topology_parse_size(const char *text, uint64_t *bytes_p)
{
    const char *s = text;
    uint64_t v = 0, mul;
    double f;
    if (!isdigit((unsigned char)*s))
        return RF_ERR_PARSE;
    while (isdigit((unsigned char)*s)) {
        if (v > (UINT64_MAX - 9) / 10)
            return RF_ERR_PARSE;
        v = v * 10 + (uint64_t)(*s++ - '0');
    }
    if (*s == ' ' && *++s == '\0')
        return RF_ERR_PARSE;
    if (unit_factor(s, &f) != 0)
        return RF_ERR_PARSE;
    mul = (uint64_t)f;
    if (mul != 0 && v > UINT64_MAX / mul)
        return RF_ERR_PARSE;
    *bytes_p = v * mul;
    return RF_OK;
}

rf_status_t rf_topology_parse_rate(const char *text, double *bytes_per_s_p)
{
    char num[64], unit[16];
    size_t n = strlen(text), i = 0, j = 0;
    double f, v;
    char *end;
    if (n < 3 || strcmp(text + n - 2, "/s") != 0)
        return RF_ERR_PARSE;
    n -= 2;
    while (i < n && (isdigit((unsigned char)text[i]) || text[i] == '.') && i < sizeof(num) - 1) {
        num[i] = text[i];
        i++;
    }
    num[i] = '\0';
    if (i == 0 || !isdigit((unsigned char)num[0]))
        return RF_ERR_PARSE;
    if (i < n && text[i] == ' ')
        i++;
    while (i < n && j < sizeof(unit) - 1)
        unit[j++] = text[i++];
    unit[j] = '\0';
    if (i != n || unit_factor(unit, &f) != 0)
        return RF_ERR_PARSE;
    errno = 0;
    v = strtod(num, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v * f))
        return RF_ERR_PARSE;
    *bytes_per_s_p = v * f;
    return RF_OK;
}

/* ---- the YAML walk --------------------------------------------------------------------- */

typedef struct parse_ctx {
    yaml_document_t *doc;
    const char *file;
    rf_err_t *err;
} parse_ctx_t;

static rf_status_t perr(parse_ctx_t *cx, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rf_status_t perr(parse_ctx_t *cx, const char *key, const char *fmt, ...)
{
    char msg[RF_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return rf_err_set(cx->err, RF_ERR_TOPOLOGY, "%s: %s: %s", cx->file, key, msg);
}

static const char *node_kind(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE    ? "a map"
           : n->type == YAML_SEQUENCE_NODE ? "a list"
                                           : "a scalar";
}

static const char *scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static bool is_plain(const yaml_node_t *n)
{
    return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static bool is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || !is_plain(n))
        return false;
    const char *s = scalar(n);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* A scalar shown in messages: quoted when the file quoted it. */
static void show(const yaml_node_t *n, char *buf, size_t cap)
{
    if (n->type != YAML_SCALAR_NODE)
        snprintf(buf, cap, "%s", node_kind(n));
    else if (is_plain(n))
        snprintf(buf, cap, "%.100s", scalar(n));
    else
        snprintf(buf, cap, "\"%.100s\"", scalar(n));
}

static rf_status_t get_int(parse_ctx_t *cx, const yaml_node_t *n, const char *key, int64_t lo,
                           int64_t hi, int64_t *out)
{
    char shown[128];
    const char *s;
    char *end;
    long long v;
    show(n, shown, sizeof(shown));
    if (n->type != YAML_SCALAR_NODE || !is_plain(n))
        return perr(cx, key, "%s is not an integer", shown);
    s = scalar(n);
    for (const char *c = (*s == '-' || *s == '+') ? s + 1 : s; *c; c++)
        if (!isdigit((unsigned char)*c))
            return perr(cx, key, "%s is not an integer", shown);
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0)
        return perr(cx, key, "%s is not an integer in range", shown);
    if (v < lo || v > hi)
        return perr(cx, key, "%lld is out of range (%lld to %lld)", v, (long long)lo,
                    (long long)hi);
    *out = v;
    return RF_OK;
}

static rf_status_t get_dim(parse_ctx_t *cx, const yaml_node_t *n, const char *key, int *out)
{
    int64_t v;
    RF_CHECK(get_int(cx, n, key, 1, RF_TOPO_MAX_DIM, &v));
    *out = (int)v;
    return RF_OK;
}

static rf_status_t get_bool(parse_ctx_t *cx, const yaml_node_t *n, const char *key, bool *out)
{
    char shown[128];
    show(n, shown, sizeof(shown));
    if (n->type == YAML_SCALAR_NODE && is_plain(n)) {
        if (strcmp(scalar(n), "true") == 0) {
            *out = true;
            return RF_OK;
        }
        if (strcmp(scalar(n), "false") == 0) {
            *out = false;
            return RF_OK;
        }
    }
    return perr(cx, key, "%s is not a boolean (true or false, unquoted)", shown);
}

/* A finite number, any value (the callers check its range). */
static rf_status_t get_number(parse_ctx_t *cx, const yaml_node_t *n, const char *key, double *out)
{
    char shown[128];
    const char *s;
    char *end;
    double v;
    show(n, shown, sizeof(shown));
    if (n->type != YAML_SCALAR_NODE || !is_plain(n))
        return perr(cx, key, "%s is not a number", shown);
    s = scalar(n);
    for (const char *c = s; *c; c++)
        if (!isdigit((unsigned char)*c) && strchr(".eE+-", *c) == NULL)
            return perr(cx, key, "%s is not a number", shown);
    errno = 0;
    v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno != 0 || !isfinite(v))
        return perr(cx, key, "%s is not a number", shown);
    *out = v;
    return RF_OK;
}

static rf_status_t get_double(parse_ctx_t *cx, const yaml_node_t *n, const char *key, double lo,
                              double *out)
{
    char shown[128];
    double v;
    show(n, shown, sizeof(shown));
    RF_CHECK(get_number(cx, n, key, &v));
    if (v < lo || v > 1e9)
        return perr(cx, key, "%s is out of range (%g to 1e9)", shown, lo);
    *out = v;
    return RF_OK;
}

/* A duration in seconds that must be positive: (0, 1e9], one message for both ends. */
static rf_status_t get_seconds(parse_ctx_t *cx, const yaml_node_t *n, const char *key, double *out)
{
    char shown[128];
    double v;
    show(n, shown, sizeof(shown));
    RF_CHECK(get_number(cx, n, key, &v));
    if (!(v > 0.0) || v > 1e9)
        return perr(cx, key, "%s is out of range (seconds, more than 0 and at most 1e9)", shown);
    *out = v;
    return RF_OK;
}

static rf_status_t get_str(parse_ctx_t *cx, const yaml_node_t *n, const char *key, char *buf,
                           size_t cap)
{
    char shown[128];
    show(n, shown, sizeof(shown));
    if (n->type != YAML_SCALAR_NODE || is_null(n))
        return perr(cx, key, "%s is not a string", shown);
    if (n->data.scalar.length >= cap)
        return perr(cx, key, "%s is too long (at most %zu characters)", shown, cap - 1);
    if (strlen(scalar(n)) != n->data.scalar.length)
        return perr(cx, key, "%s contains a nul byte", shown);
    snprintf(buf, cap, "%s", scalar(n));
    return RF_OK;
}

/* One of `names` (n of them); the index into *out. */
static rf_status_t get_enum(parse_ctx_t *cx, const yaml_node_t *n, const char *key,
                            const char *const *names, int count, int *out)
{
    char shown[128], list[256] = "";
    show(n, shown, sizeof(shown));
    if (n->type == YAML_SCALAR_NODE)
        for (int i = 0; i < count; i++)
            if (strcmp(scalar(n), names[i]) == 0) {
                *out = i;
                return RF_OK;
            }
    for (int i = 0; i < count; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? " | " : "",
                 names[i]);
    return perr(cx, key, "%s is not one of %s", shown, list);
}

static rf_status_t get_int_list(parse_ctx_t *cx, const yaml_node_t *n, const char *key, int64_t lo,
                                int64_t hi, int64_t *out, int cap, int *count)
{
    char shown[128], ikey[96];
    int k = 0;
    /* defined on every path: gcc -O3 cannot see that perr() never returns RF_OK, and warns
     * (maybe-uninitialized) at the callers that read *count after RF_CHECK */
    *count = 0;
    show(n, shown, sizeof(shown));
    if (n->type != YAML_SEQUENCE_NODE)
        return perr(cx, key, "%s where a list of integers is expected", shown);
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        if (k >= cap)
            return perr(cx, key, "more than %d entries", cap);
        snprintf(ikey, sizeof(ikey), "%s[%d]", key, k);
        RF_CHECK(get_int(cx, yaml_document_get_node(cx->doc, *it), ikey, lo, hi, &out[k]));
        k++;
    }
    if (k == 0)
        return perr(cx, key, "[] is empty (omit the key instead)");
    *count = k;
    return RF_OK;
}

static rf_status_t get_gpus(parse_ctx_t *cx, const yaml_node_t *n, const char *key, int *gpus,
                            int *ngpus)
{
    int64_t v[RF_MAX_GPUS];
    int k;
    RF_CHECK(get_int_list(cx, n, key, 0, 1023, v, RF_MAX_GPUS, &k));
    for (int i = 0; i < k; i++) {
        for (int j = 0; j < i; j++)
            if (v[j] == v[i])
                return perr(cx, key, "gpu %lld is listed twice", (long long)v[i]);
        gpus[i] = (int)v[i];
    }
    *ngpus = k;
    return RF_OK;
}

/*
 * Iterates a map node, refusing non-scalar and duplicate keys. Calls fn(cx, section, keyname,
 * value, user) for every pair; `section` is the dotted prefix for messages ("" at the top).
 */
typedef rf_status_t (*pair_fn_t)(parse_ctx_t *cx, const char *key, const char *name,
                                 const yaml_node_t *val, void *user);

static rf_status_t walk_map(parse_ctx_t *cx, const yaml_node_t *n, const char *section,
                            pair_fn_t fn, void *user)
{
    char key[160], shown[128];
    if (n->type != YAML_MAPPING_NODE) {
        if (is_null(n))
            return RF_OK; /* "trainer:" with nothing: all defaults */
        show(n, shown, sizeof(shown));
        return perr(cx, section[0] ? section : "(top level)", "%s where a map is expected", shown);
    }
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(cx->doc, p->key);
        const yaml_node_t *v = yaml_document_get_node(cx->doc, p->value);
        if (k->type != YAML_SCALAR_NODE) {
            show(k, shown, sizeof(shown));
            return perr(cx, section[0] ? section : "(top level)", "%s used as a key", shown);
        }
        snprintf(key, sizeof(key), "%s%s%s", section, section[0] ? "." : "", scalar(k));
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
            const yaml_node_t *k2 = yaml_document_get_node(cx->doc, q->key);
            if (k2->type == YAML_SCALAR_NODE && strcmp(scalar(k2), scalar(k)) == 0)
                return perr(cx, key, "duplicate key (line %zu, first on line %zu)",
                            k->start_mark.line + 1, k2->start_mark.line + 1);
        }
        RF_CHECK(fn(cx, key, scalar(k), v, user));
    }
    return RF_OK;
}

static rf_status_t unknown(parse_ctx_t *cx, const char *key, const yaml_node_t *v)
{
    char shown[128];
    show(v, shown, sizeof(shown));
    return perr(cx, key, "unknown key (value %s)", shown);
}

typedef struct parse_state {
    rf_topology_t *t;
    bool have_model, have_config, etp_set, bw_set;
} parse_state_t;

static rf_status_t on_override(parse_ctx_t *cx, const char *key, const char *name,
                               const yaml_node_t *v, void *user)
{
    rf_topology_t *t = ((parse_state_t *)user)->t;
    int64_t *dst = strcmp(name, "num_hidden_layers") == 0 ? &t->ov_num_hidden_layers
                   : strcmp(name, "num_experts") == 0     ? &t->ov_num_experts
                   : strcmp(name, "vocab_size") == 0      ? &t->ov_vocab_size
                                                          : NULL;
    if (dst == NULL)
        return perr(cx, key,
                    "unknown override (only num_hidden_layers, num_experts, "
                    "vocab_size)");
    return get_int(cx, v, key, 1, INT32_MAX, dst);
}

static rf_status_t on_model(parse_ctx_t *cx, const char *key, const char *name,
                            const yaml_node_t *v, void *user)
{
    parse_state_t *ps = user;
    rf_topology_t *t = ps->t;
    if (strcmp(name, "config") == 0) {
        ps->have_config = true;
        return get_str(cx, v, key, t->model_config, sizeof(t->model_config));
    }
    if (strcmp(name, "quantization") == 0) {
        static const char *const q[] = {"none", "fp8-block", "wna16", "fp8-tensor",
                                        "fp8-channel"};
        static const rf_quant_t qv[] = {RF_QUANT_NONE, RF_QUANT_FP8_BLOCK, RF_QUANT_WNA16,
                                        RF_QUANT_FP8_TENSOR, RF_QUANT_FP8_CHANNEL};
        int i;
        RF_CHECK(get_enum(cx, v, key, q, 5, &i));
        t->quantization = qv[i];
        t->quantization_set = true;
        return RF_OK;
    }
    if (strcmp(name, "group_size") == 0) {
        t->group_size_set = true;
        return get_int(cx, v, key, 1, 1 << 20, &t->group_size);
    }
    if (strcmp(name, "overrides") == 0)
        return walk_map(cx, v, key, on_override, user);
    if (strcmp(name, "mtp") == 0) /* the family rules are model/'s (rf_model_check_topology) */
        return get_bool(cx, v, key, &t->mtp);
    return unknown(cx, key, v);
}

static rf_status_t on_trainer(parse_ctx_t *cx, const char *key, const char *name,
                              const yaml_node_t *v, void *user)
{
    parse_state_t *ps = user;
    rf_topology_t *t = ps->t;
    if (strcmp(name, "tp") == 0)
        return get_dim(cx, v, key, &t->t_tp);
    if (strcmp(name, "cp") == 0)
        return get_dim(cx, v, key, &t->t_cp);
    if (strcmp(name, "pp") == 0)
        return get_dim(cx, v, key, &t->t_pp);
    if (strcmp(name, "dp") == 0)
        return get_dim(cx, v, key, &t->t_dp);
    if (strcmp(name, "etp") == 0) {
        ps->etp_set = true;
        return get_dim(cx, v, key, &t->t_etp);
    }
    if (strcmp(name, "ep") == 0)
        return get_dim(cx, v, key, &t->t_ep);
    if (strcmp(name, "order") == 0) {
        static const char *const o[] = {"tp-cp-ep-dp-pp"};
        int i;
        return get_enum(cx, v, key, o, 1, &i);
    }
    if (strcmp(name, "layout") == 0) {
        static const char *const l[] = {"megatron", "fsdp"};
        int i;
        RF_CHECK(get_enum(cx, v, key, l, 2, &i));
        t->t_layout = i == 1 ? RF_TRAINER_LAYOUT_FSDP : RF_TRAINER_LAYOUT_MEGATRON;
        return RF_OK;
    }
    if (strcmp(name, "pp_layers") == 0) {
        int k;
        RF_CHECK(get_int_list(cx, v, key, 1, INT32_MAX, t->pp_layers, RF_MAX_STAGES, &k));
        t->pp_layers_set = true;
        /* length checked against pp after the walk; remember it in slot k as a sentinel */
        for (int i = k; i < RF_MAX_STAGES; i++)
            t->pp_layers[i] = 0;
        return RF_OK;
    }
    if (strcmp(name, "gpus") == 0)
        return get_gpus(cx, v, key, t->t_gpus, &t->t_ngpus);
    return unknown(cx, key, v);
}

static rf_status_t on_rollout(parse_ctx_t *cx, const char *key, const char *name,
                              const yaml_node_t *v, void *user)
{
    rf_topology_t *t = ((parse_state_t *)user)->t;
    int i;
    if (strcmp(name, "engines") == 0)
        return get_dim(cx, v, key, &t->r_engines);
    if (strcmp(name, "tp") == 0)
        return get_dim(cx, v, key, &t->r_tp);
    if (strcmp(name, "dp") == 0)
        return get_dim(cx, v, key, &t->r_dp);
    if (strcmp(name, "ep") == 0)
        return get_dim(cx, v, key, &t->r_ep);
    if (strcmp(name, "expert_placement") == 0) {
        static const char *const p[] = {"linear", "round_robin"};
        RF_CHECK(get_enum(cx, v, key, p, 2, &i));
        t->r_placement = i == 1 ? RF_PLACE_ROUND_ROBIN : RF_PLACE_LINEAR;
        return RF_OK;
    }
    if (strcmp(name, "backend") == 0) {
        static const char *const b[] = {"triton", "cutlass", "rocm-fnuz", "marlin"};
        static const rf_backend_t bv[] = {RF_BACKEND_TRITON, RF_BACKEND_CUTLASS,
                                          RF_BACKEND_ROCM_FNUZ, RF_BACKEND_MARLIN};
        RF_CHECK(get_enum(cx, v, key, b, 4, &i));
        t->r_backend = bv[i];
        return RF_OK;
    }
    if (strcmp(name, "layout") == 0) {
        static const char *const l[] = {"vllm", "hf"};
        RF_CHECK(get_enum(cx, v, key, l, 2, &i));
        t->r_layout = i == 1 ? RF_ROLLOUT_LAYOUT_HF : RF_ROLLOUT_LAYOUT_VLLM;
        return RF_OK;
    }
    if (strcmp(name, "gpus") == 0)
        return get_gpus(cx, v, key, t->r_gpus, &t->r_ngpus);
    return unknown(cx, key, v);
}

static rf_status_t on_transfer(parse_ctx_t *cx, const char *key, const char *name,
                               const yaml_node_t *v, void *user)
{
    parse_state_t *ps = user;
    rf_topology_t *t = ps->t;
    char shown[128];
    int i;
    int64_t b;
    show(v, shown, sizeof(shown));
    if (strcmp(name, "transport") == 0) {
        static const char *const tr[] = {"mpi", "nccl", "ipc"};
        static const rf_transport_kind_t tv[] = {RF_TRANSPORT_MPI, RF_TRANSPORT_NCCL,
                                                 RF_TRANSPORT_IPC};
        RF_CHECK(get_enum(cx, v, key, tr, 3, &i));
        t->transport = tv[i];
        return RF_OK;
    }
    if (strcmp(name, "mode") == 0) {
        static const char *const m[] = {"broadcast", "p2p"};
        RF_CHECK(get_enum(cx, v, key, m, 2, &i));
        t->mode = i == 1 ? RF_MODE_P2P : RF_MODE_BROADCAST;
        return RF_OK;
    }
    if (strcmp(name, "chunk_bytes") == 0) {
        if (v->type != YAML_SCALAR_NODE || is_null(v) ||
            rf_topology_parse_size(scalar(v), &t->chunk_bytes) != RF_OK)
            return perr(cx, key,
                        "%s is not a size (an integer, or with KiB/MiB/GiB or "
                        "KB/MB/GB)",
                        shown);
        if (t->chunk_bytes < 1 || t->chunk_bytes > RF_CHUNK_MAX)
            return perr(cx, key, "%s is out of range (1 to 1TiB)", shown);
        return RF_OK;
    }
    if (strcmp(name, "buffers") == 0) {
        RF_CHECK(get_int(cx, v, key, 1, 64, &b));
        t->buffers = (int)b;
        return RF_OK;
    }
    if (strcmp(name, "p2p_inflight") == 0) {
        RF_CHECK(get_int(cx, v, key, 1, 64, &b));
        t->p2p_inflight = (int)b;
        return RF_OK;
    }
    if (strcmp(name, "timeout_s") == 0)
        return get_seconds(cx, v, key, &t->timeout_s);
    if (strcmp(name, "integrity") == 0)
        return get_bool(cx, v, key, &t->integrity);
    if (strcmp(name, "min_bandwidth") == 0) {
        if (v->type != YAML_SCALAR_NODE || is_null(v) ||
            rf_topology_parse_rate(scalar(v), &t->min_bandwidth) != RF_OK)
            return perr(cx, key, "%s is not a rate (for example 100MB/s or 10GB/s)", shown);
        if (!(t->min_bandwidth > 0.0))
            return perr(cx, key, "%s must be positive", shown);
        ps->bw_set = true;
        return RF_OK;
    }
    if (strcmp(name, "slack_s") == 0)
        return get_double(cx, v, key, 0.0, &t->slack_s);
    if (strcmp(name, "join_timeout_s") == 0)
        return get_seconds(cx, v, key, &t->join_timeout_s);
    return unknown(cx, key, v);
}

static rf_status_t on_top(parse_ctx_t *cx, const char *key, const char *name, const yaml_node_t *v,
                          void *user)
{
    parse_state_t *ps = user;
    if (strcmp(name, "name") == 0) {
        RF_CHECK(get_str(cx, v, key, ps->t->name, sizeof(ps->t->name)));
        for (const char *c = ps->t->name; *c; c++)
            if (!isalnum((unsigned char)*c) && strchr("._+-", *c) == NULL)
                return perr(cx, key, "\"%s\": use letters, digits and . _ + - only", ps->t->name);
        return RF_OK;
    }
    if (strcmp(name, "model") == 0) {
        ps->have_model = true;
        return walk_map(cx, v, key, on_model, user);
    }
    if (strcmp(name, "trainer") == 0)
        return walk_map(cx, v, key, on_trainer, user);
    if (strcmp(name, "rollout") == 0)
        return walk_map(cx, v, key, on_rollout, user);
    if (strcmp(name, "colocated") == 0)
        return get_bool(cx, v, key, &ps->t->colocated);
    if (strcmp(name, "transfer") == 0)
        return walk_map(cx, v, key, on_transfer, user);
    return unknown(cx, key, v);
}

/* First pass: anchors, aliases, explicit tags and extra documents are refused. */
static rf_status_t scan_events(parse_ctx_t *cx, const char *yaml, size_t len)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    rf_status_t st = RF_OK;
    int docs = 0;
    bool done = false;
    if (!yaml_parser_initialize(&parser))
        return rf_err_set(cx->err, RF_ERR_NOMEM, "%s: cannot initialize the yaml parser", cx->file);
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    while (!done && st == RF_OK) {
        if (!yaml_parser_parse(&parser, &ev)) {
            st = rf_err_set(cx->err, RF_ERR_TOPOLOGY, "%s: line %zu: yaml: %s", cx->file,
                            parser.problem_mark.line + 1,
                            parser.problem ? parser.problem : "syntax error");
            break;
        }
        const yaml_char_t *anchor = NULL, *tag = NULL;
        switch (ev.type) {
        case YAML_ALIAS_EVENT:
            st = rf_err_set(cx->err, RF_ERR_TOPOLOGY,
                            "%s: line %zu: yaml alias *%s: aliases are not allowed", cx->file,
                            ev.start_mark.line + 1, (const char *)ev.data.alias.anchor);
            break;
        case YAML_SCALAR_EVENT:
            anchor = ev.data.scalar.anchor;
            tag = ev.data.scalar.tag;
            break;
        case YAML_SEQUENCE_START_EVENT:
            anchor = ev.data.sequence_start.anchor;
            tag = ev.data.sequence_start.tag;
            break;
        case YAML_MAPPING_START_EVENT:
            anchor = ev.data.mapping_start.anchor;
            tag = ev.data.mapping_start.tag;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1)
                st = rf_err_set(cx->err, RF_ERR_TOPOLOGY,
                                "%s: line %zu: a second yaml document (one only)", cx->file,
                                ev.start_mark.line + 1);
            break;
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        default:
            break;
        }
        if (st == RF_OK && anchor != NULL)
            st = rf_err_set(cx->err, RF_ERR_TOPOLOGY,
                            "%s: line %zu: yaml anchor &%s: anchors and aliases are not allowed",
                            cx->file, ev.start_mark.line + 1, (const char *)anchor);
        if (st == RF_OK && tag != NULL)
            st = rf_err_set(cx->err, RF_ERR_TOPOLOGY,
                            "%s: line %zu: yaml tag %s: explicit tags are not allowed", cx->file,
                            ev.start_mark.line + 1, (const char *)tag);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (st == RF_OK && docs == 0)
        st = rf_err_set(cx->err, RF_ERR_TOPOLOGY, "%s: empty topology file", cx->file);
    return st;
}

static void set_defaults(rf_topology_t *t)
{
    memset(t, 0, sizeof(*t));
    t->quantization = RF_QUANT_NONE;
    t->group_size = 128;
    t->ov_num_hidden_layers = t->ov_num_experts = t->ov_vocab_size = -1;
    t->t_tp = t->t_cp = t->t_pp = t->t_dp = t->t_etp = t->t_ep = 1;
    snprintf(t->t_order, sizeof(t->t_order), "tp-cp-ep-dp-pp");
    t->r_engines = t->r_tp = t->r_dp = t->r_ep = 1;
    t->r_placement = RF_PLACE_LINEAR;
    t->r_backend = RF_BACKEND_TRITON;
    t->t_layout = RF_TRAINER_LAYOUT_MEGATRON;
    t->r_layout = RF_ROLLOUT_LAYOUT_VLLM;
    t->transport = RF_TRANSPORT_MPI;
    t->mode = RF_MODE_BROADCAST;
    t->chunk_bytes = 64ull << 20;
    t->buffers = 2;
    t->timeout_s = 300.0;
    /* on by default (issue 13): every chunk that crosses a wire or a staging buffer carries a
     * checksum, so a corrupted byte fails the update instead of committing */
    t->integrity = true;
    t->slack_s = 10.0;
    /* a session call's wait for the other ranks to arrive spans the callers' own work between
     * calls (a training step, a stretch of generation): long, but not forever */
    t->join_timeout_s = 1800.0;
}

/* The (quantization, backend) table of DESIGN.md section 3. */
static bool quant_backend_ok(rf_quant_t q, rf_backend_t b)
{
    switch (q) {
    case RF_QUANT_NONE:
        return true;
    case RF_QUANT_FP8_BLOCK:
        return b == RF_BACKEND_TRITON || b == RF_BACKEND_CUTLASS || b == RF_BACKEND_ROCM_FNUZ;
    case RF_QUANT_WNA16:
        return b == RF_BACKEND_TRITON || b == RF_BACKEND_MARLIN;
    case RF_QUANT_FP8_TENSOR:
    case RF_QUANT_FP8_CHANNEL:
        /* vLLM's Fp8LinearMethod / CompressedTensorsW8A8Fp8 on CUTLASS or torch._scaled_mm;
         * its fnuz and marlin variants have no owner here */
        return b == RF_BACKEND_TRITON || b == RF_BACKEND_CUTLASS;
    }
    return false;
}

rf_status_t rf_topology_check_quant_backend(const char *file, rf_quant_t q, rf_backend_t b,
                                            rf_err_t *err)
{
    if (quant_backend_ok(q, b))
        return RF_OK;
    return rf_err_set(err, RF_ERR_TOPOLOGY,
                      "%s: model.quantization: %s with rollout.backend: %s is not supported "
                      "(fp8-block: triton, cutlass, rocm-fnuz; wna16: triton, marlin; "
                      "fp8-tensor, fp8-channel: triton, cutlass)",
                      file, rf_quant_name(q), rf_backend_name(b));
}

/* Rules that need the file only (DESIGN.md section 3). */
static rf_status_t check_file_rules(parse_ctx_t *cx, rf_topology_t *t)
{
    int64_t T = (int64_t)t->t_tp * t->t_cp * t->t_pp * t->t_dp;
    int64_t R = (int64_t)t->r_engines * t->r_tp * t->r_dp;
    int64_t g = (int64_t)t->t_etp * t->t_ep * t->t_pp;
    int npp = 0;
    if (T > RF_TOPO_MAX_RANKS)
        return perr(cx, "trainer", "tp x cp x pp x dp = %lld ranks is too many (at most %d)",
                    (long long)T, RF_TOPO_MAX_RANKS);
    if (R > RF_TOPO_MAX_RANKS)
        return perr(cx, "rollout", "engines x tp x dp = %lld ranks is too many (at most %d)",
                    (long long)R, RF_TOPO_MAX_RANKS);
    if (t->t_pp > RF_MAX_STAGES)
        return perr(cx, "trainer.pp", "%d is out of range (at most %d stages)", t->t_pp,
                    RF_MAX_STAGES);
    if (T % g != 0)
        return perr(cx, "trainer.ep",
                    "%d trainer ranks (tp x cp x pp x dp) are not divisible by etp %d x ep %d x "
                    "pp %d = %lld",
                    (int)T, t->t_etp, t->t_ep, t->t_pp, (long long)g);
    if (t->pp_layers_set) {
        while (npp < RF_MAX_STAGES && t->pp_layers[npp] > 0)
            npp++;
        if (npp != t->t_pp)
            return perr(cx, "trainer.pp_layers", "%d entries but trainer.pp is %d", npp, t->t_pp);
    }
    if (t->t_layout == RF_TRAINER_LAYOUT_FSDP) {
        /* FSDP2's Shard(0) mesh is the data-parallel ranks (all of them, or each pipeline
         * stage's); FSDP2 + TP / CP / EP shards a TP or EP shard again (_StridedShard) */
        static const char *const keys[] = {"trainer.tp", "trainer.cp", "trainer.etp", "trainer.ep"};
        const int vals[] = {t->t_tp, t->t_cp, t->t_etp, t->t_ep};
        for (int k = 0; k < 4; k++)
            if (vals[k] != 1)
                return perr(cx, keys[k],
                            "%d with trainer.layout: fsdp is not supported (fsdp shards every "
                            "tensor along dim 0 over the trainer.dp ranks of each stage; tp, "
                            "cp, etp and ep must be 1)",
                            vals[k]);
        if (t->t_dp > RF_FSDP_MAX_DP)
            return perr(cx, "trainer.dp",
                        "%d with trainer.layout: fsdp: at most %d ranks per stage (each one "
                        "holds a part of every tensor of its stage)",
                        t->t_dp, RF_FSDP_MAX_DP);
    }
    if (t->r_ep != 1 && t->r_ep != t->r_tp * t->r_dp)
        return perr(cx, "rollout.ep",
                    "%d must be 1 (experts TP-sharded) or rollout.tp x rollout.dp = %d", t->r_ep,
                    t->r_tp * t->r_dp);
    if (t->transport == RF_TRANSPORT_MPI && t->chunk_bytes > RF_MPI_CHUNK_MAX)
        return perr(cx, "transfer.chunk_bytes",
                    "%" PRIu64 " exceeds %" PRIu64 " (2^31 - 256) for transport mpi "
                    "(mpi counts are int)",
                    t->chunk_bytes, RF_MPI_CHUNK_MAX);
    if (t->colocated) {
        bool cpu = t->t_ngpus == 0 && t->r_ngpus == 0;
        /* nccl with gpus passes here so that the placement check refuses it naming the ranks
         * and the GPU they would share (topology/topology_mpi.c) */
        if (!(t->transport == RF_TRANSPORT_IPC || (t->transport == RF_TRANSPORT_MPI && cpu) ||
              (t->transport == RF_TRANSPORT_NCCL && !cpu)))
            return perr(cx, "colocated",
                        "true requires transfer.transport ipc, or mpi on CPU (no gpus); got "
                        "transport %s%s",
                        rf_transport_name(t->transport),
                        t->transport == RF_TRANSPORT_MPI ? " with gpus"
                        : t->transport == RF_TRANSPORT_NCCL ? " without gpus"
                                                             : "");
        if (T != R)
            return perr(cx, "colocated",
                        "true requires as many trainer ranks (%lld) as rollout "
                        "ranks (%lld)",
                        (long long)T, (long long)R);
        bool same = t->t_ngpus == t->r_ngpus;
        for (int i = 0; same && i < t->t_ngpus; i++)
            same = t->t_gpus[i] == t->r_gpus[i];
        if (!same)
            return perr(cx, "colocated", "true requires trainer.gpus == rollout.gpus");
    }
    if (t->quantization_set)
        RF_CHECK(rf_topology_check_quant_backend(cx->file, t->quantization, t->r_backend, cx->err));
    if (t->group_size_set && t->quantization_set && t->quantization != RF_QUANT_WNA16)
        return perr(cx, "model.group_size", "%lld applies to quantization wna16 only (got %s)",
                    (long long)t->group_size, rf_quant_name(t->quantization));
    return RF_OK;
}

static void file_stem(const char *path, char *buf, size_t cap)
{
    const char *base = strrchr(path, '/');
    const char *dot;
    size_t n;
    base = base ? base + 1 : path;
    dot = strrchr(base, '.');
    n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, base, n);
    buf[n] = '\0';
}

rf_status_t rf_topology_parse(const char *yaml, size_t len, const char *path, rf_topology_t *topo_p,
                              rf_err_t *err)
{
    rf_topology_t *t;
    parse_ctx_t cx;
    parse_state_t ps;
    yaml_parser_t parser;
    yaml_document_t doc;
    rf_status_t st;
    const char *file = path ? path : "default.yaml";

    if (yaml == NULL || topo_p == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "topology: null argument");
    if (path != NULL && strlen(path) >= RF_PATH_MAX)
        return rf_err_set(err, RF_ERR_INVALID, "topology: path too long");
    t = malloc(sizeof(*t));
    if (t == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", file);
    set_defaults(t);
    snprintf(t->file, sizeof(t->file), "%s", file);
    cx.doc = &doc;
    cx.file = t->file;
    cx.err = err;
    memset(&ps, 0, sizeof(ps));
    ps.t = t;

    st = scan_events(&cx, yaml, len);
    if (st != RF_OK)
        goto out_free;
    if (!yaml_parser_initialize(&parser)) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: cannot initialize the yaml parser", file);
        goto out_free;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: line %zu: yaml: %s", file,
                        parser.problem_mark.line + 1,
                        parser.problem ? parser.problem : "syntax error");
        yaml_parser_delete(&parser);
        goto out_free;
    }
    yaml_parser_delete(&parser);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root == NULL || is_null(root))
        st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: empty topology file", file);
    else if (root->type != YAML_MAPPING_NODE)
        st = perr(&cx, "(top level)", "%s where a map is expected", node_kind(root));
    else
        st = walk_map(&cx, root, "", on_top, &ps);
    yaml_document_delete(&doc);
    if (st != RF_OK)
        goto out_free;

    if (!ps.have_model || !ps.have_config) {
        st = perr(&cx, "model.config", "missing (the path of the model's config.json)");
        goto out_free;
    }
    if (!ps.etp_set)
        t->t_etp = t->t_tp;
    if (!ps.bw_set)
        t->min_bandwidth = t->transport == RF_TRANSPORT_MPI ? 100e6 : 10e9;
    if (t->name[0] == '\0') {
        if (path != NULL)
            file_stem(path, t->name, sizeof(t->name));
        else
            snprintf(t->name, sizeof(t->name), "default");
    }
    RF_CHECK_GOTO(check_file_rules(&cx, t), st, out_free);

    /* model.config: relative paths against the file's folder; the compiled-in default stands
     * for jobs/topologies/default.yaml under the current folder (a checkout's root) */
    if (path == NULL && t->model_config[0] != '/')
        path = "jobs/topologies/default.yaml";
    if (t->model_config[0] == '/' || strchr(path, '/') == NULL) {
        snprintf(t->model_config_path, sizeof(t->model_config_path), "%s", t->model_config);
    } else {
        int dirlen = (int)(strrchr(path, '/') - path);
        int n = snprintf(t->model_config_path, sizeof(t->model_config_path), "%.*s/%s", dirlen,
                         path, t->model_config);
        if (n < 0 || (size_t)n >= sizeof(t->model_config_path)) {
            st = perr(&cx, "model.config", "\"%s\": resolved path too long", t->model_config);
            goto out_free;
        }
    }
    *topo_p = *t;
    free(t);
    return RF_OK;
out_free:
    free(t);
    return st;
}

int rf_topology_trainer_size(const rf_topology_t *topo)
{
    return topo->t_tp * topo->t_cp * topo->t_pp * topo->t_dp;
}

int rf_topology_rollout_size(const rf_topology_t *topo)
{
    return topo->r_engines * topo->r_tp * topo->r_dp;
}

/* ---- canonical form and hash ----------------------------------------------------------- */

#define CANON(...)                                                                                 \
    do {                                                                                           \
        int n_ = snprintf(buf ? buf + (len < cap ? len : cap) : NULL,                              \
                          buf && len < cap ? cap - len : 0, __VA_ARGS__);                          \
        if (n_ > 0)                                                                                \
            len += (size_t)n_;                                                                     \
    } while (0)

static void canon_list(char *out, size_t cap, const int64_t *v, int n)
{
    size_t o = 0;
    o += (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%lld", i ? ", " : "", (long long)v[i]);
    if (o < cap)
        snprintf(out + o, cap - o, "]");
}

static void canon_gpus(char *out, size_t cap, const int *g, int n)
{
    int64_t v[RF_MAX_GPUS];
    if (n == 0) {
        snprintf(out, cap, "none");
        return;
    }
    for (int i = 0; i < n; i++)
        v[i] = g[i];
    canon_list(out, cap, v, n);
}

size_t rf_topology_canonical(const rf_topology_t *t, char *buf, size_t cap)
{
    size_t len = 0;
    char list[RF_MAX_STAGES * 12 + 8];
    if (buf && cap)
        buf[0] = '\0';
    CANON("refit-topology: 1\n");
    CANON("name: %s\n", t->name);
    CANON("model.config: %s\n", t->model_config);
    CANON("model.quantization: %s%s\n", rf_quant_name(t->quantization),
          t->quantization_set ? "" : " (from config)");
    CANON("model.group_size: %lld%s\n", (long long)t->group_size,
          t->group_size_set ? "" : " (from config)");
    CANON("model.overrides.num_hidden_layers: %lld\n", (long long)t->ov_num_hidden_layers);
    CANON("model.overrides.num_experts: %lld\n", (long long)t->ov_num_experts);
    CANON("model.overrides.vocab_size: %lld\n", (long long)t->ov_vocab_size);
    if (t->mtp) /* only when asked: the hash of every topology without the key stays */
        CANON("model.mtp: true\n");
    CANON("trainer.tp: %d\ntrainer.cp: %d\ntrainer.pp: %d\ntrainer.dp: %d\n", t->t_tp, t->t_cp,
          t->t_pp, t->t_dp);
    CANON("trainer.etp: %d\ntrainer.ep: %d\ntrainer.order: %s\n", t->t_etp, t->t_ep, t->t_order);
    CANON("trainer.layout: %s\n", rf_trainer_layout_name(t->t_layout));
    if (t->pp_layers_set)
        canon_list(list, sizeof(list), t->pp_layers, t->t_pp);
    else
        snprintf(list, sizeof(list), "even");
    CANON("trainer.pp_layers: %s\n", list);
    canon_gpus(list, sizeof(list), t->t_gpus, t->t_ngpus);
    CANON("trainer.gpus: %s\n", list);
    CANON("rollout.engines: %d\nrollout.tp: %d\nrollout.dp: %d\nrollout.ep: %d\n", t->r_engines,
          t->r_tp, t->r_dp, t->r_ep);
    CANON("rollout.expert_placement: %s\nrollout.backend: %s\n", placement_name(t->r_placement),
          rf_backend_name(t->r_backend));
    CANON("rollout.layout: %s\n", rf_rollout_layout_name(t->r_layout));
    canon_gpus(list, sizeof(list), t->r_gpus, t->r_ngpus);
    CANON("rollout.gpus: %s\n", list);
    CANON("colocated: %s\n", t->colocated ? "true" : "false");
    CANON("transfer.transport: %s\ntransfer.mode: %s\n", rf_transport_name(t->transport),
          rf_mode_name(t->mode));
    CANON("transfer.chunk_bytes: %" PRIu64 "\ntransfer.buffers: %d\n", t->chunk_bytes, t->buffers);
    /* only when set: the hash of every topology that leaves it at the default stays what it
     * was (a sender-side window; the bytes and the plans do not depend on it), and only under
     * p2p: broadcast has no window, so setting it there leaves the hash alone too */
    if (t->p2p_inflight != 0 && t->mode == RF_MODE_P2P)
        CANON("transfer.p2p_inflight: %d\n", t->p2p_inflight);
    /* %a: exact, locale-free */
    CANON("transfer.timeout_s: %a\ntransfer.integrity: %s\n", t->timeout_s,
          t->integrity ? "true" : "false");
    CANON("transfer.min_bandwidth: %a\ntransfer.slack_s: %a\n", t->min_bandwidth, t->slack_s);
    return len;
}

uint64_t rf_topology_hash(const rf_topology_t *topo)
{
    char stack[8192];
    size_t n = rf_topology_canonical(topo, stack, sizeof(stack));
    uint64_t h;
    if (n < sizeof(stack))
        return XXH3_64bits(stack, n);
    char *heap = malloc(n + 1);
    if (heap == NULL)
        return 0;
    rf_topology_canonical(topo, heap, n + 1);
    h = XXH3_64bits(heap, n);
    free(heap);
    return h;
}

/* ---- rank placement -------------------------------------------------------------------- */

rf_status_t rf_topology_rank_info(const rf_topology_t *topo, int w, rf_rank_info_t *info_p)
{
    const rf_topology_t *t = topo;
    int T = rf_topology_trainer_size(t), R = rf_topology_rollout_size(t);
    rf_rank_info_t in;
    if (w < 0 || w >= T + R)
        return RF_ERR_INVALID;
    memset(&in, 0, sizeof(in));
    in.world_rank = w;
    if (w < T) {
        int edp = T / (t->t_etp * t->t_ep * t->t_pp);
        in.role = RF_ROLE_TRAINER;
        in.t = w % t->t_tp;
        in.c = (w / t->t_tp) % t->t_cp;
        in.d = (w / (t->t_tp * t->t_cp)) % t->t_dp;
        in.p = w / (t->t_tp * t->t_cp * t->t_dp);
        in.u = w % t->t_etp;
        in.q = (w / t->t_etp) % t->t_ep;
        in.x = (w / (t->t_etp * t->t_ep)) % edp;
        in.engine = -1;
        in.rc.tp_rank = in.rc.dp_rank = in.rc.ep_rank = -1;
    } else {
        int j = w - T, per = t->r_tp * t->r_dp, l = j % per;
        in.role = RF_ROLE_ROLLOUT;
        in.t = in.c = in.d = in.p = in.u = in.q = in.x = -1;
        in.engine = j / per;
        in.rc.tp = t->r_tp;
        in.rc.tp_rank = l % t->r_tp;
        in.rc.dp = t->r_dp;
        in.rc.dp_rank = l / t->r_tp;
        in.rc.ep = t->r_ep;
        in.rc.ep_rank = t->r_ep > 1 ? in.rc.dp_rank * t->r_tp + in.rc.tp_rank : 0;
        in.rc.placement = t->r_placement;
    }
    *info_p = in;
    return RF_OK;
}

int rf_topology_trainer_rank(const rf_topology_t *topo, int t, int c, int d, int p)
{
    return t + topo->t_tp * (c + topo->t_cp * (d + topo->t_dp * p));
}

int rf_topology_rollout_rank(const rf_topology_t *topo, int engine, int tp_rank, int dp_rank)
{
    return rf_topology_trainer_size(topo) + engine * topo->r_tp * topo->r_dp +
           dp_rank * topo->r_tp + tp_rank;
}

void rf_topology_stage_layers(const rf_topology_t *topo, int p, int64_t *first_p, int64_t *count_p)
{
    int64_t first = 0, count = 0;
    if (p >= 0 && p < topo->t_pp) {
        if (topo->pp_layers_set || topo->model_layers > 0) {
            for (int i = 0; i < p; i++)
                first += topo->pp_layers[i];
            count = topo->pp_layers[p];
        }
    }
    *first_p = first;
    *count_p = count;
}

int rf_topology_layer_stage(const rf_topology_t *topo, int layer, int64_t num_layers)
{
    int pp = topo->t_pp;
    if (layer < 0)
        return 0;
    if (layer >= num_layers)
        return pp - 1;
    if (topo->pp_layers_set) {
        int64_t end = 0;
        for (int p = 0; p < pp; p++) {
            end += topo->pp_layers[p];
            if (layer < end)
                return p;
        }
        return pp - 1;
    }
    int64_t per = num_layers / pp;
    if (per <= 0)
        return 0;
    int s = (int)(layer / per);
    return s < pp ? s : pp - 1;
}
