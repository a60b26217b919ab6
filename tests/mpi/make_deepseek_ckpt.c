/*
 * Writes a variant of a DeepSeek-V3 checkpoint directory into OUT-DIR (model.safetensors,
 * config.json, tensors.reference.json of every tensor written), for the tests of the shapes
 * DeepSeek's checkpoints come in (DESIGN.md section 4, docs/design.md "DeepSeek-V3"):
 *   make_deepseek_ckpt fp8 SRC-DIR OUT-DIR    every linear of the decoder layers (not the router
 *                       mlp.gate, not embed_tokens / lm_head; also Qwen3-Next's, not its
 *                       in_proj_ba / shared_expert_gate) quantized fp8-block with the
 *                       library's quantizer (e4m3 weight + F32 weight_scale_inv, 128 x 128; each
 *                       block first scaled by a power of two, so the scales differ), and
 *                       e_score_correction_bias stored F32: DeepSeek-V3's published layout.
 *                       SRC's config.json must already carry the fp8 quantization_config.
 *   make_deepseek_ckpt f32-bias SRC-DIR OUT-DIR  only e_score_correction_bias widened to F32
 *                       (exactly), as DeepSeek's releases store it.
 *   make_deepseek_ckpt noq SRC-DIR OUT-DIR    q_lora_rank null: q_a_proj, q_a_layernorm and
 *                       q_b_proj dropped, a q_proj (nh (P + R), H) of deterministic bf16 values
 *                       added per layer, config.json's q_lora_rank set to null (Moonlight's
 *                       attention).
 *   make_deepseek_ckpt mtp SRC-DIR OUT-DIR    a multi-token-prediction layer added as DeepSeek
 *                       stores it, model.layers.{L}.{enorm, hnorm, eh_proj, shared_head.norm,
 *                       shared_head.head, input_layernorm}.weight (L = num_hidden_layers).
 * Sizes are read from SRC's tensors (H from embed_tokens, V from lm_head, L from the layers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/checkpoint.h"
#include "refit/hashes.h"
#include "refit/quant.h"
#include "refit/safetensors.h"

#define MAXT 4096

static const char *names[MAXT];
static rf_dtype_t dts[MAXT];
static int ndims[MAXT];
static uint64_t shapes[MAXT][RF_ST_MAX_RANK];
static const void *data[MAXT];
static uint64_t nbytes[MAXT];
static size_t nt;

static int fail(const char *what, const char *msg)
{
    fprintf(stderr, "make_deepseek_ckpt: %s: %s\n", what, msg);
    return 1;
}

static int ends(const char *s, const char *sfx)
{
    size_t a = strlen(s), b = strlen(sfx);
    return a >= b && strcmp(s + a - b, sfx) == 0;
}

static void add(const char *name, rf_dtype_t dt, int nd, uint64_t s0, uint64_t s1, void *b)
{
    names[nt] = strdup(name);
    dts[nt] = dt;
    ndims[nt] = nd;
    memset(shapes[nt], 0, sizeof(shapes[nt]));
    shapes[nt][0] = s0;
    shapes[nt][1] = s1;
    nbytes[nt] = (nd == 1 ? s0 : s0 * s1) * rf_dtype_size(dt);
    data[nt++] = b;
}

/* A tensor of any rank (Qwen3-Next's conv1d is [C, 1, K]) copied as it is. */
static void add_any(const rf_st_entry_t *e, void *b)
{
    add(e->name, e->dtype, e->ndim, e->shape[0], e->ndim > 1 ? e->shape[1] : 0, b);
    memcpy(shapes[nt - 1], e->shape, sizeof(shapes[0]));
    nbytes[nt - 1] = e->nbytes;
}

/* Deterministic bf16 values, small and mostly distinct (seed picks the sequence). */
static void *pattern(uint64_t n, unsigned seed)
{
    uint16_t *p = malloc(n * 2 + 2);
    for (uint64_t i = 0; p && i < n; i++)
        p[i] = rf_f32_to_bf16((float)((int)((i * 2654435761u + seed) % 257u) - 128) / 256.0f);
    return p;
}

/* A decoder linear that DeepSeek-V3's fp8 release quantizes, or Qwen3-Next-80B-A3B-FP8's
 * (k_proj, v_proj, in_proj_qkvz, out_proj besides; not in_proj_ba, the routers or
 * shared_expert_gate, which its modules_to_not_convert lists). */
static int quantized(const char *name)
{
    static const char *const lin[] = {".q_a_proj.weight",  ".kv_a_proj_with_mqa.weight",
                                      ".q_b_proj.weight",  ".q_proj.weight",
                                      ".kv_b_proj.weight", ".o_proj.weight",
                                      ".gate_proj.weight", ".up_proj.weight",
                                      ".down_proj.weight", ".k_proj.weight",
                                      ".v_proj.weight",    ".in_proj_qkvz.weight",
                                      ".out_proj.weight"};
    if (strncmp(name, "model.layers.", 13) != 0)
        return 0;
    for (size_t i = 0; i < sizeof(lin) / sizeof(lin[0]); i++)
        if (ends(name, lin[i]))
            return 1;
    return 0;
}

static int write_reference(const char *dir)
{
    char path[4096], hex[RF_SHA256_HEX_CHARS + 1];
    uint8_t d[RF_SHA256_BYTES];
    snprintf(path, sizeof(path), "%s/tensors.reference.json", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return fail(path, "cannot write");
    fprintf(f, "{\n");
    for (size_t i = 0; i < nt; i++) {
        if (rf_sha256(data[i], nbytes[i], d) != RF_OK)
            return fail(names[i], "sha256 failed");
        rf_sha256_hex(d, hex);
        fprintf(f, "  \"%s\": {\"dtype\": \"%s\", \"shape\": [", names[i],
                rf_dtype_torch_name(dts[i]));
        for (int k = 0; k < ndims[i]; k++)
            fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)shapes[i][k]);
        fprintf(f, "], \"sha256\": \"%s\"}%s\n", hex, i + 1 < nt ? "," : "");
    }
    fprintf(f, "}\n");
    return fclose(f) == 0 ? 0 : fail(path, "write failed");
}

/* SRC's config.json, with "q_lora_rank": <n> replaced by null when noq. */
static int write_config(const char *src, const char *dir, int noq)
{
    char path[4096];
    static char text[1 << 16];
    snprintf(path, sizeof(path), "%s/config.json", src);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return fail(path, "cannot read");
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    snprintf(path, sizeof(path), "%s/config.json", dir);
    if ((f = fopen(path, "w")) == NULL)
        return fail(path, "cannot write");
    char *q = noq ? strstr(text, "\"q_lora_rank\":") : NULL;
    if (noq && q == NULL)
        return fail(path, "no q_lora_rank key");
    if (q != NULL) {
        char *v = q + strlen("\"q_lora_rank\":");
        while (*v == ' ')
            v++;
        char *e = v;
        while (*e >= '0' && *e <= '9')
            e++;
        fprintf(f, "%.*snull%s", (int)(v - text), text, e);
    } else {
        fputs(text, f);
    }
    return fclose(f) == 0 ? 0 : fail(path, "write failed");
}

int main(int argc, char **argv)
{
    rf_ckpt_t *ck;
    rf_err_t err;
    char path[4096];
    rf_err_clear(&err);
    if (argc != 4)
        return fail("usage", "fp8|f32-bias|noq|mtp SRC-DIR OUT-DIR");
    const char *mode = argv[1];
    int fp8 = strcmp(mode, "fp8") == 0, f32 = fp8 || strcmp(mode, "f32-bias") == 0;
    int noq = strcmp(mode, "noq") == 0, mtp = strcmp(mode, "mtp") == 0;
    if (!fp8 && !f32 && !noq && !mtp)
        return fail("mode", mode);
    if (rf_ckpt_open(argv[2], &ck, &err) != RF_OK)
        return fail(argv[2], err.msg);
    uint64_t H = 0, V = 0, qrows = 0;
    int L = 0;
    for (size_t i = 0; i < rf_ckpt_count(ck) && nt + 8 < MAXT; i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        void *b = malloc(e->nbytes + 1);
        int layer = -1;
        if (b == NULL || rf_ckpt_read(ck, e, 0, rows, 0, rb, b, rb, &err) != RF_OK)
            return fail(e->name, b ? err.msg : "out of memory");
        if (strcmp(e->name, "model.embed_tokens.weight") == 0)
            H = e->shape[1];
        if (strcmp(e->name, "lm_head.weight") == 0)
            V = e->shape[0];
        if (sscanf(e->name, "model.layers.%d.", &layer) == 1 && layer + 1 > L)
            L = layer + 1;
        if (ends(e->name, ".q_b_proj.weight"))
            qrows = e->shape[0];
        if (noq && (ends(e->name, ".q_a_proj.weight") || ends(e->name, ".q_a_layernorm.weight") ||
                    ends(e->name, ".q_b_proj.weight"))) {
            free(b);
            continue;
        }
        if (f32 && ends(e->name, ".e_score_correction_bias") && e->dtype == RF_DTYPE_BF16) {
            float *w = malloc(e->shape[0] * 4 + 4);
            for (uint64_t k = 0; k < e->shape[0]; k++)
                w[k] = rf_bf16_to_f32(((const uint16_t *)b)[k]);
            add(e->name, RF_DTYPE_F32, 1, e->shape[0], 0, w);
            free(b);
            continue;
        }
        if (fp8 && quantized(e->name) && e->ndim == 2) {
            int64_t r = (int64_t)e->shape[0], c = (int64_t)e->shape[1];
            int64_t sr = (r + 127) / 128, sc = (c + 127) / 128;
            uint8_t *q = malloc((size_t)(r * c) + 1);
            float *s = malloc((size_t)(sr * sc) * 4 + 4);
            /* 128 x 128 block (i, j) scaled by 2^-((i + j) mod 4), exactly in bf16, so the
             * block scales differ and a scale read from the wrong block shows */
            for (int64_t y = 0; e->dtype == RF_DTYPE_BF16 && y < r; y++)
                for (int64_t x = 0; x < c; x++) {
                    uint16_t *v = (uint16_t *)b + y * c + x;
                    *v = rf_f32_to_bf16(rf_bf16_to_f32(*v) /
                                        (float)(1 << ((y / 128 + x / 128) % 4)));
                }
            if (rf_fp8_quantize(b, e->dtype, r, c, c, q, c, s, RF_DTYPE_F32, sc, RF_FP8_PLAIN) !=
                RF_OK)
                return fail(e->name, "fp8 quantization failed");
            add(e->name, RF_DTYPE_F8_E4M3, 2, (uint64_t)r, (uint64_t)c, q);
            snprintf(path, sizeof(path), "%.*s.weight_scale_inv",
                     (int)(strlen(e->name) - strlen(".weight")), e->name);
            add(path, RF_DTYPE_F32, 2, (uint64_t)sr, (uint64_t)sc, s);
            free(b);
            continue;
        }
        add_any(e, b);
    }
    if (noq) {
        if (qrows == 0)
            return fail(argv[2], "no q_b_proj to size q_proj by");
        for (int l = 0; l < L; l++) {
            snprintf(path, sizeof(path), "model.layers.%d.self_attn.q_proj.weight", l);
            add(path, RF_DTYPE_BF16, 2, qrows, H, pattern(qrows * H, 11u + (unsigned)l));
        }
    }
    if (mtp) {
        static const char *const one[] = {"enorm", "hnorm", "shared_head.norm", "input_layernorm"};
        for (int k = 0; k < 4; k++) {
            snprintf(path, sizeof(path), "model.layers.%d.%s.weight", L, one[k]);
            add(path, RF_DTYPE_BF16, 1, H, 0, pattern(H, 3u + (unsigned)k));
        }
        snprintf(path, sizeof(path), "model.layers.%d.eh_proj.weight", L);
        add(path, RF_DTYPE_BF16, 2, H, 2 * H, pattern(2 * H * H, 7u));
        snprintf(path, sizeof(path), "model.layers.%d.shared_head.head.weight", L);
        add(path, RF_DTYPE_BF16, 2, V, H, pattern(V * H, 9u));
    }
    snprintf(path, sizeof(path), "%s", argv[3]); /* mkdir -p */
    for (char *q = path + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            mkdir(path, 0755);
            *q = '/';
        }
    mkdir(argv[3], 0755);
    snprintf(path, sizeof(path), "%s/model.safetensors", argv[3]);
    if (rf_st_write_file(path, nt, names, dts, ndims, (const uint64_t(*)[RF_ST_MAX_RANK])shapes,
                         data, NULL, &err) != RF_OK)
        return fail(path, err.msg);
    if (write_config(argv[2], argv[3], noq) != 0 || write_reference(argv[3]) != 0)
        return 1;
    printf("make_deepseek_ckpt: %s: wrote %s (%zu tensors)\n", mode, argv[3], nt);
    rf_ckpt_close(ck);
    return 0;
}
