/*
 * Writes a modified copy of a tiny quantized (or bf16) checkpoint into OUT-DIR/model.safetensors
 * for the tests of "a quantized linear is carried whole, or refused" and "scale values are
 * checked" (docs/faults.md, Quantized modules and scales). The linear changed is always
 * model.layers.0.self_attn.q_proj.
 *   make_quant_ckpt mixed FP8-DIR BF16-DIR OUT    its fp8 weight replaced by BF16-DIR's bf16
 *                                                 weight; the stale F32 weight_scale_inv kept
 *   make_quant_ckpt no-scale FP8-DIR OUT          its weight_scale_inv dropped (fp8 weight kept)
 *   make_quant_ckpt bf16-scales FP8-DIR OUT       every weight_scale_inv stored as bf16 (RNE),
 *                                                 plus OUT/tensors.reference.json of the result
 *   make_quant_ckpt bad-scale nan|inf|zero|neg FP8-DIR OUT
 *                                                 its weight_scale_inv element 1 made bad
 *   make_quant_ckpt inf-weight BF16-DIR OUT       its bf16 weight element 5 = +inf
 *   make_quant_ckpt stale-packed BF16-DIR OUT     a zero I32 weight_packed (N, K/8) added next
 *                                                 to its bf16 weight (wna16 topologies)
 *   make_quant_ckpt stale-scale BF16-DIR OUT      a bf16 weight_scale (N, K/32) of 1.0 added
 *                                                 next to its bf16 weight (wna16, group 32)
 * Sharded inputs are merged into the one output file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/checkpoint.h"
#include "refit/hashes.h"
#include "refit/safetensors.h"

#define LIN "model.layers.0.self_attn.q_proj"
#define MAXT 1024

typedef struct table {
    size_t n;
    char *names[MAXT];
    rf_dtype_t dts[MAXT];
    int ndims[MAXT];
    uint64_t shapes[MAXT][RF_ST_MAX_RANK];
    void *data[MAXT];
    uint64_t nbytes[MAXT];
} table_t;

static table_t tab;

static int die(const char *what, const char *msg)
{
    fprintf(stderr, "make_quant_ckpt: %s: %s\n", what, msg);
    return 1;
}

static int load(const char *dir, table_t *t)
{
    rf_ckpt_t *ck;
    rf_err_t err;
    rf_err_clear(&err);
    if (rf_ckpt_open(dir, &ck, &err) != RF_OK)
        return die(dir, err.msg);
    t->n = rf_ckpt_count(ck);
    if (t->n > MAXT)
        return die(dir, "too many tensors");
    for (size_t i = 0; i < t->n; i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        t->names[i] = strdup(e->name);
        t->dts[i] = e->dtype;
        t->ndims[i] = e->ndim;
        memcpy(t->shapes[i], e->shape, sizeof(t->shapes[i]));
        t->nbytes[i] = e->nbytes;
        t->data[i] = malloc(e->nbytes + 1);
        if (rf_ckpt_read(ck, e, 0, rows, 0, rb, t->data[i], rb, &err) != RF_OK)
            return die(e->name, err.msg);
    }
    rf_ckpt_close(ck);
    return 0;
}

static int find(const table_t *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0)
            return (int)i;
    return -1;
}

/* Adds a 2-D tensor of zero bytes; returns its index. */
static int add(table_t *t, const char *name, rf_dtype_t dt, uint64_t rows, uint64_t cols)
{
    size_t i = t->n++;
    t->names[i] = strdup(name);
    t->dts[i] = dt;
    t->ndims[i] = 2;
    memset(t->shapes[i], 0, sizeof(t->shapes[i]));
    t->shapes[i][0] = rows;
    t->shapes[i][1] = cols;
    t->nbytes[i] = rows * cols * rf_dtype_size(dt);
    t->data[i] = calloc(t->nbytes[i] + 1, 1);
    return (int)i;
}

static int write_out(const table_t *t, const char *out)
{
    char path[2048];
    rf_err_t err;
    rf_err_clear(&err);
    /* OUT and its parent (the build tree's quant-ckpt/) */
    snprintf(path, sizeof(path), "%s", out);
    char *slash = strrchr(path, '/');
    if (slash != NULL && slash != path) {
        *slash = '\0';
        mkdir(path, 0755);
    }
    mkdir(out, 0755);
    snprintf(path, sizeof(path), "%s/model.safetensors", out);
    if (rf_st_write_file(path, t->n, (const char *const *)t->names, t->dts, t->ndims,
                         (const uint64_t(*)[RF_ST_MAX_RANK])t->shapes,
                         (const void *const *)t->data, NULL, &err) != RF_OK)
        return die(path, err.msg);
    printf("wrote %s (%zu tensors)\n", path, t->n);
    return 0;
}

/* OUT/tensors.reference.json: every tensor's dtype, shape and sha256 as written. */
static int write_reference(const table_t *t, const char *out)
{
    char path[2048], hex[RF_SHA256_HEX_CHARS + 1];
    uint8_t d[RF_SHA256_BYTES];
    snprintf(path, sizeof(path), "%s/tensors.reference.json", out);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return die(path, "cannot write");
    fprintf(f, "{\n");
    for (size_t i = 0; i < t->n; i++) {
        if (rf_sha256(t->data[i], t->nbytes[i], d) != RF_OK)
            return die(t->names[i], "sha256 failed");
        rf_sha256_hex(d, hex);
        fprintf(f, "  \"%s\": {\"dtype\": \"%s\", \"shape\": [", t->names[i],
                rf_dtype_torch_name(t->dts[i]));
        for (int k = 0; k < t->ndims[i]; k++)
            fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)t->shapes[i][k]);
        fprintf(f, "], \"sha256\": \"%s\"}%s\n", hex, i + 1 < t->n ? "," : "");
    }
    fprintf(f, "}\n");
    return fclose(f) == 0 ? 0 : die(path, "write failed");
}

static int usage(void)
{
    fprintf(stderr, "usage: make_quant_ckpt mixed FP8-DIR BF16-DIR OUT | no-scale FP8-DIR OUT | "
                    "bf16-scales FP8-DIR OUT | bad-scale nan|inf|zero|neg FP8-DIR OUT | "
                    "inf-weight BF16-DIR OUT | stale-packed BF16-DIR OUT | "
                    "stale-scale BF16-DIR OUT\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return usage();
    const char *mode = argv[1];
    if (strcmp(mode, "mixed") == 0 && argc == 5) {
        static table_t bf;
        if (load(argv[2], &tab) || load(argv[3], &bf))
            return 1;
        int i = find(&tab, LIN ".weight"), b = find(&bf, LIN ".weight");
        if (i < 0 || b < 0 || find(&tab, LIN ".weight_scale_inv") < 0)
            return die(LIN, "not in both checkpoints");
        free(tab.data[i]);
        tab.data[i] = bf.data[b];
        tab.dts[i] = bf.dts[b];
        tab.nbytes[i] = bf.nbytes[b];
        return write_out(&tab, argv[4]);
    }
    if (strcmp(mode, "no-scale") == 0 && argc == 4) {
        if (load(argv[2], &tab))
            return 1;
        int i = find(&tab, LIN ".weight_scale_inv");
        if (i < 0)
            return die(LIN, "has no weight_scale_inv");
        free(tab.names[i]);
        free(tab.data[i]);
        size_t rest = tab.n - (size_t)i - 1;
        memmove(&tab.names[i], &tab.names[i + 1], rest * sizeof(char *));
        memmove(&tab.dts[i], &tab.dts[i + 1], rest * sizeof(rf_dtype_t));
        memmove(&tab.ndims[i], &tab.ndims[i + 1], rest * sizeof(int));
        memmove(&tab.shapes[i], &tab.shapes[i + 1], rest * sizeof(tab.shapes[0]));
        memmove(&tab.data[i], &tab.data[i + 1], rest * sizeof(void *));
        memmove(&tab.nbytes[i], &tab.nbytes[i + 1], rest * sizeof(uint64_t));
        tab.n--;
        return write_out(&tab, argv[3]);
    }
    if (strcmp(mode, "bf16-scales") == 0 && argc == 4) {
        int changed = 0;
        if (load(argv[2], &tab))
            return 1;
        for (size_t i = 0; i < tab.n; i++) {
            size_t l = strlen(tab.names[i]);
            if (l < 17 || strcmp(tab.names[i] + l - 17, ".weight_scale_inv") != 0 ||
                tab.dts[i] != RF_DTYPE_F32)
                continue;
            uint64_t n = tab.nbytes[i] / 4;
            uint16_t *h = malloc(n * 2 + 1);
            for (uint64_t k = 0; k < n; k++)
                h[k] = rf_f32_to_bf16(((const float *)tab.data[i])[k]);
            free(tab.data[i]);
            tab.data[i] = h;
            tab.dts[i] = RF_DTYPE_BF16;
            tab.nbytes[i] = n * 2;
            changed++;
        }
        if (changed == 0)
            return die(argv[2], "no F32 weight_scale_inv");
        return write_out(&tab, argv[3]) || write_reference(&tab, argv[3]);
    }
    if (strcmp(mode, "bad-scale") == 0 && argc == 5) {
        const char *k = argv[2];
        float v = strcmp(k, "nan") == 0    ? __builtin_nanf("")
                  : strcmp(k, "inf") == 0  ? __builtin_inff()
                  : strcmp(k, "zero") == 0 ? 0.0f
                  : strcmp(k, "neg") == 0  ? -0.001f
                                           : 1.0f;
        if (v == 1.0f)
            return usage();
        if (load(argv[3], &tab))
            return 1;
        int i = find(&tab, LIN ".weight_scale_inv");
        if (i < 0 || tab.dts[i] != RF_DTYPE_F32 || tab.nbytes[i] < 8)
            return die(LIN, "has no F32 weight_scale_inv of 2 elements");
        ((float *)tab.data[i])[1] = v;
        return write_out(&tab, argv[4]);
    }
    if (strcmp(mode, "inf-weight") == 0 && argc == 4) {
        if (load(argv[2], &tab))
            return 1;
        int i = find(&tab, LIN ".weight");
        if (i < 0 || tab.dts[i] != RF_DTYPE_BF16)
            return die(LIN, "has no bf16 weight");
        ((uint16_t *)tab.data[i])[5] = 0x7f80; /* bf16 +inf */
        return write_out(&tab, argv[3]);
    }
    if ((strcmp(mode, "stale-packed") == 0 || strcmp(mode, "stale-scale") == 0) && argc == 4) {
        if (load(argv[2], &tab))
            return 1;
        int i = find(&tab, LIN ".weight");
        if (i < 0 || tab.dts[i] != RF_DTYPE_BF16 || tab.ndims[i] != 2)
            return die(LIN, "has no bf16 weight");
        uint64_t n = tab.shapes[i][0], kk = tab.shapes[i][1];
        if (mode[6] == 'p') {
            add(&tab, LIN ".weight_packed", RF_DTYPE_I32, n, kk / 8);
        } else {
            int s = add(&tab, LIN ".weight_scale", RF_DTYPE_BF16, n, kk / 32);
            for (uint64_t k = 0; k < n * (kk / 32); k++)
                ((uint16_t *)tab.data[s])[k] = 0x3f80; /* 1.0 */
        }
        return write_out(&tab, argv[3]);
    }
    return usage();
}
