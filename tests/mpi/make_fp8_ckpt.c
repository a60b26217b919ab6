/*
 * Writes an "FP8 dynamic" copy of a bf16 checkpoint (tests/data/llama-tiny) into OUT-DIR, as
 * llm-compressor's FP8_DYNAMIC scheme would: every q/k/v/o/gate/up/down weight quantized to
 * e4m3 with a weight_scale per tensor or per output row (compressed-tensors float-quantized,
 * docs/formats.md "fp8-tensor and fp8-channel"), everything else copied:
 *
 *   make_fp8_ckpt tensor|channel f32|bf16 BF16-DIR OUT [bad nan|zero|shape]
 *
 * Scales: s = f32(max(amax, 1e-12) / 448) over the tensor / the row (rf_fp8_scales), rounded to
 * bf16 for `bf16` (the weight is then quantized with the rounded scale, so the file is
 * self-consistent). Per-tensor scales are stored with shape [1] in f32 and as 0-d scalars in
 * bf16 (AutoFP8 wrote scalars; both spellings must load). OUT gets model.safetensors, the
 * input's config.json with a quantization_config added, and tensors.reference.json of what
 * was written. `bad` spoils model.layers.0.self_attn.q_proj.weight_scale: element 0 NaN or 0,
 * or the wrong shape ([2] per tensor, [N] per channel); no reference file then.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/hashes.h"
#include "refit/quant.h"
#include "refit/checkpoint.h"
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

static table_t in, out;

static int die(const char *what, const char *msg)
{
    fprintf(stderr, "make_fp8_ckpt: %s: %s\n", what, msg);
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

static void put(table_t *t, const char *name, rf_dtype_t dt, int ndim, const uint64_t *shape,
                void *data, uint64_t nbytes)
{
    size_t i = t->n++;
    t->names[i] = strdup(name);
    t->dts[i] = dt;
    t->ndims[i] = ndim;
    memset(t->shapes[i], 0, sizeof(t->shapes[i]));
    for (int k = 0; k < ndim; k++)
        t->shapes[i][k] = shape[k];
    t->data[i] = data;
    t->nbytes[i] = nbytes;
}

/* One of the seven projections of a decoder layer (the linears the scheme targets). */
static int is_linear_weight(const char *name)
{
    static const char *const p[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                    "gate_proj", "up_proj", "down_proj"};
    if (strncmp(name, "model.layers.", 13) != 0)
        return 0;
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
        char sfx[32];
        size_t n = strlen(name), l = (size_t)snprintf(sfx, sizeof(sfx), ".%s.weight", p[i]);
        if (n > l && strcmp(name + n - l, sfx) == 0)
            return 1;
    }
    return 0;
}

static int quantize(size_t i, int per_row, int bf16)
{
    char name[512];
    int64_t N = (int64_t)in.shapes[i][0], K = (int64_t)in.shapes[i][1];
    uint8_t *q = malloc((size_t)(N * K) + 1);
    float *s = malloc((size_t)N * sizeof(float) + 4);
    int64_t ns = per_row ? N : 1;
    if (rf_fp8_scales(in.data[i], in.dts[i], N, K, K, per_row, s) != RF_OK)
        return die(in.names[i], "rf_fp8_scales failed");
    uint16_t *h = malloc((size_t)ns * 2 + 2);
    for (int64_t r = 0; bf16 && r < ns; r++) {
        h[r] = rf_f32_to_bf16(s[r]);
        s[r] = rf_bf16_to_f32(h[r]); /* quantized with the scale as stored */
    }
    if (rf_fp8_quantize_scaled(in.data[i], in.dts[i], N, K, K, s, per_row, q, K) != RF_OK)
        return die(in.names[i], "rf_fp8_quantize_scaled failed");
    uint64_t wshape[2] = {(uint64_t)N, (uint64_t)K};
    put(&out, in.names[i], RF_DTYPE_F8_E4M3, 2, wshape, q, (uint64_t)(N * K));
    snprintf(name, sizeof(name), "%s_scale", in.names[i]); /* "<P>.weight" -> "<P>.weight_scale" */
    uint64_t sshape[2] = {(uint64_t)ns, 1};
    int ndim = per_row ? 2 : (bf16 ? 0 : 1);
    if (bf16) {
        put(&out, name, RF_DTYPE_BF16, ndim, sshape, h, (uint64_t)ns * 2);
        free(s);
    } else {
        put(&out, name, RF_DTYPE_F32, ndim, sshape, s, (uint64_t)ns * 4);
        free(h);
    }
    return 0;
}

static int write_reference(const table_t *t, const char *dir)
{
    char path[2048], hex[RF_SHA256_HEX_CHARS + 1];
    uint8_t d[RF_SHA256_BYTES];
    snprintf(path, sizeof(path), "%s/tensors.reference.json", dir);
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

/* The input's config.json with compressed-tensors' FP8_DYNAMIC quantization_config added. */
static int write_config(const char *src_dir, const char *dir, const char *strategy)
{
    char path[2048];
    snprintf(path, sizeof(path), "%s/config.json", src_dir);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return die(path, "cannot read");
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    char *end = strrchr(text, '}');
    if (end == NULL)
        return die(path, "not a JSON object");
    *end = '\0';
    while (end > text && (end[-1] == '\n' || end[-1] == ' '))
        *--end = '\0';
    snprintf(path, sizeof(path), "%s/config.json", dir);
    f = fopen(path, "w");
    if (f == NULL)
        return die(path, "cannot write");
    fprintf(f,
            "%s,\n  \"quantization_config\": {\n    \"quant_method\": \"compressed-tensors\",\n"
            "    \"format\": \"float-quantized\",\n    \"ignore\": [\"lm_head\"],\n"
            "    \"config_groups\": {\n      \"group_0\": {\n        \"targets\": [\"Linear\"],\n"
            "        \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"%s\", "
            "\"symmetric\": true, \"dynamic\": false},\n"
            "        \"input_activations\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": "
            "\"token\", \"symmetric\": true, \"dynamic\": true}\n      }\n    }\n  }\n}\n",
            text, strategy);
    return fclose(f) == 0 ? 0 : die(path, "write failed");
}

static int usage(void)
{
    fprintf(stderr,
            "usage: make_fp8_ckpt tensor|channel f32|bf16 BF16-DIR OUT [bad nan|zero|shape]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if ((argc != 5 && argc != 7) || (argc == 7 && strcmp(argv[5], "bad") != 0))
        return usage();
    int per_row = strcmp(argv[1], "channel") == 0, bf16 = strcmp(argv[2], "bf16") == 0;
    const char *bad = argc == 7 ? argv[6] : NULL;
    if ((!per_row && strcmp(argv[1], "tensor") != 0) || (!bf16 && strcmp(argv[2], "f32") != 0))
        return usage();
    if (load(argv[3], &in))
        return 1;
    for (size_t i = 0; i < in.n; i++) {
        if (in.dts[i] == RF_DTYPE_BF16 && in.ndims[i] == 2 && is_linear_weight(in.names[i])) {
            if (quantize(i, per_row, bf16))
                return 1;
        } else {
            put(&out, in.names[i], in.dts[i], in.ndims[i], in.shapes[i], in.data[i], in.nbytes[i]);
        }
    }
    if (bad != NULL) {
        size_t i = 0;
        while (i < out.n && strcmp(out.names[i], LIN ".weight_scale") != 0)
            i++;
        if (i == out.n)
            return die(LIN, "has no weight_scale");
        float v = strcmp(bad, "nan") == 0 ? __builtin_nanf("") : 0.0f;
        if (strcmp(bad, "shape") == 0 && per_row) {
            out.ndims[i] = 1; /* [N] instead of [N, 1] */
        } else if (strcmp(bad, "shape") == 0) {
            uint64_t b = out.nbytes[i]; /* [2]: one value too many */
            char *d = realloc(out.data[i], 2 * b);
            memcpy(d + b, d, b);
            out.data[i] = d;
            out.nbytes[i] = 2 * b;
            out.ndims[i] = 1;
            out.shapes[i][0] = 2;
        } else if (strcmp(bad, "nan") == 0 || strcmp(bad, "zero") == 0) {
            if (out.dts[i] == RF_DTYPE_F32)
                ((float *)out.data[i])[0] = v;
            else
                ((uint16_t *)out.data[i])[0] = rf_f32_to_bf16(v);
        } else {
            return usage();
        }
    }
    char path[2048];
    rf_err_t err;
    rf_err_clear(&err);
    snprintf(path, sizeof(path), "%s", argv[4]);
    char *slash = strrchr(path, '/');
    if (slash != NULL && slash != path) {
        *slash = '\0';
        mkdir(path, 0755);
    }
    mkdir(argv[4], 0755);
    snprintf(path, sizeof(path), "%s/model.safetensors", argv[4]);
    if (rf_st_write_file(path, out.n, (const char *const *)out.names, out.dts, out.ndims,
                         (const uint64_t(*)[RF_ST_MAX_RANK])out.shapes,
                         (const void *const *)out.data, NULL, &err) != RF_OK)
        return die(path, err.msg);
    if (write_config(argv[3], argv[4], per_row ? "channel" : "tensor"))
        return 1;
    if (bad == NULL && write_reference(&out, argv[4]))
        return 1;
    printf("wrote %s (%zu tensors, %s scales in %s)\n", path, out.n, argv[1], argv[2]);
    return 0;
}
