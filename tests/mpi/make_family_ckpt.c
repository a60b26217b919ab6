/*
 * Writes a modified copy of a GPT-NeoX / OPT / Qwen3-Next checkpoint directory into OUT-DIR, for the tests
 * of the names those families' checkpoints come with (DESIGN.md section 4):
 * OUT-DIR/model.safetensors and OUT-DIR/config.json (SRC's, copied byte for byte).
 *   make_family_ckpt SRC-DIR OUT-DIR [OPTION...]
 *     --rename FROM TO   store every tensor whose name begins with FROM as TO + the rest
 *                        (OPT: model.decoder. -> decoder., the published checkpoints' names)
 *     --neox-buffers     add what older GPT-NeoX checkpoints (Pythia) store besides weights,
 *                        per layer: attention.bias (BOOL [1, 1, 8, 8] causal mask),
 *                        attention.masked_bias (F32 scalar) and attention.rotary_emb.inv_freq
 *                        (F32 [4])
 *     --keep NAME        with --rename: also keep NAME under its original name (a tensor then
 *                        stored under both spellings)
 *     --drop NAME        leave tensor NAME out
 *     --mtp              add what Qwen3-Next checkpoints store for multi-token prediction
 *                        (no engine module takes it): mtp.fc.weight (BF16 [H, 2H]),
 *                        mtp.norm.weight (BF16 [H]) and mtp.layers.0.self_attn.q_proj.weight
 *                        (BF16 [2 H, H]), H = 64 (qwen3-next-tiny), zeros
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/checkpoint.h"
#include "refit/safetensors.h"

#define MAXT 4096

static int fail(const char *what, const char *msg)
{
    fprintf(stderr, "make_family_ckpt: %s: %s\n", what, msg);
    return 1;
}

static int copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b;
    char buf[4096];
    size_t n;
    if (a == NULL)
        return 0; /* optional */
    if ((b = fopen(to, "wb")) == NULL) {
        fclose(a);
        return -1;
    }
    while ((n = fread(buf, 1, sizeof(buf), a)) > 0)
        fwrite(buf, 1, n, b);
    fclose(a);
    return fclose(b) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *from = NULL, *to = NULL, *keep = NULL, *drop = NULL;
    int buffers = 0, mtp = 0;
    char path[4096], path2[4096];
    rf_ckpt_t *ck;
    rf_err_t err;
    rf_err_clear(&err);
    if (argc < 3)
        return fail("usage",
                    "SRC-DIR OUT-DIR [--rename FROM TO] [--neox-buffers] [--keep NAME] [--drop NAME] "
                    "[--mtp]");
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--rename") == 0 && i + 2 < argc) {
            from = argv[++i];
            to = argv[++i];
        } else if (strcmp(argv[i], "--neox-buffers") == 0) {
            buffers = 1;
        } else if (strcmp(argv[i], "--drop") == 0 && i + 1 < argc) {
            drop = argv[++i];
        } else if (strcmp(argv[i], "--mtp") == 0) {
            mtp = 1;
        } else if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc) {
            keep = argv[++i];
        } else {
            return fail("bad option", argv[i]);
        }
    }
    if (rf_ckpt_open(argv[1], &ck, &err) != RF_OK)
        return fail(argv[1], err.msg);
    static const char *names[MAXT];
    static rf_dtype_t dts[MAXT];
    static int ndims[MAXT];
    static uint64_t shapes[MAXT][RF_ST_MAX_RANK];
    static const void *data[MAXT];
    static unsigned char mask[64];
    static float masked_bias = -1e9f, inv_freq[4] = {1.0f, 0.1f, 0.01f, 0.001f};
    size_t m = 0, nl = 0;
    for (int k = 0; k < 64; k++)
        mask[k] = (k % 8) <= (k / 8); /* lower triangle */
    for (size_t i = 0; i < rf_ckpt_count(ck) && m + 4 < MAXT; i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        if (drop != NULL && strcmp(e->name, drop) == 0)
            continue;
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        void *b = malloc(e->nbytes + 1);
        if (b == NULL || rf_ckpt_read(ck, e, 0, rows, 0, rb, b, rb, &err) != RF_OK)
            return fail(e->name, b ? err.msg : "out of memory");
        int twice = keep != NULL && strcmp(e->name, keep) == 0;
        for (int copy = 0; copy <= twice; copy++) {
            char *nm = strdup(e->name);
            if (copy == 0 && from != NULL && strncmp(e->name, from, strlen(from)) == 0) {
                free(nm);
                nm = malloc(strlen(to) + strlen(e->name) + 1);
                sprintf(nm, "%s%s", to, e->name + strlen(from));
            }
            names[m] = nm;
            dts[m] = e->dtype;
            ndims[m] = e->ndim;
            memcpy(shapes[m], e->shape, sizeof(shapes[m]));
            data[m++] = b;
        }
        int layer = -1, used = 0;
        if (sscanf(e->name, "gpt_neox.layers.%d.%n", &layer, &used) == 1 && used > 0 &&
            strcmp(e->name + used, "attention.dense.weight") == 0)
            nl = (size_t)layer + 1 > nl ? (size_t)layer + 1 : nl;
    }
    for (size_t l = 0; buffers && l < nl && m + 3 < MAXT; l++) {
        static const char *sfx[3] = {"attention.bias", "attention.masked_bias",
                                     "attention.rotary_emb.inv_freq"};
        for (int k = 0; k < 3; k++) {
            char *nm = malloc(64);
            snprintf(nm, 64, "gpt_neox.layers.%zu.%s", l, sfx[k]);
            names[m] = nm;
            memset(shapes[m], 0, sizeof(shapes[m]));
            if (k == 0) {
                dts[m] = RF_DTYPE_BOOL;
                ndims[m] = 4;
                shapes[m][0] = shapes[m][1] = 1;
                shapes[m][2] = shapes[m][3] = 8;
                data[m] = mask;
            } else if (k == 1) {
                dts[m] = RF_DTYPE_F32;
                ndims[m] = 0;
                data[m] = &masked_bias;
            } else {
                dts[m] = RF_DTYPE_F32;
                ndims[m] = 1;
                shapes[m][0] = 4;
                data[m] = inv_freq;
            }
            m++;
        }
    }
    static const unsigned char zeros[2 * 64 * 128 * 2];
    static const char *mtp_names[3] = {"mtp.fc.weight", "mtp.norm.weight",
                                       "mtp.layers.0.self_attn.q_proj.weight"};
    static const uint64_t mtp_shapes[3][2] = {{64, 128}, {64, 0}, {128, 64}};
    for (int k = 0; mtp && k < 3 && m + 1 < MAXT; k++) {
        names[m] = mtp_names[k];
        dts[m] = RF_DTYPE_BF16;
        ndims[m] = k == 1 ? 1 : 2;
        memset(shapes[m], 0, sizeof(shapes[m]));
        shapes[m][0] = mtp_shapes[k][0];
        shapes[m][1] = mtp_shapes[k][1];
        data[m++] = zeros;
    }
    snprintf(path, sizeof(path), "%s", argv[2]); /* mkdir -p */
    for (char *q = path + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            mkdir(path, 0755);
            *q = '/';
        }
    mkdir(argv[2], 0755);
    snprintf(path, sizeof(path), "%s/model.safetensors", argv[2]);
    if (rf_st_write_file(path, m, names, dts, ndims, (const uint64_t(*)[RF_ST_MAX_RANK])shapes,
                         data, NULL, &err) != RF_OK)
        return fail(path, err.msg);
    snprintf(path, sizeof(path), "%s/config.json", argv[1]);
    snprintf(path2, sizeof(path2), "%s/config.json", argv[2]);
    if (copy_file(path, path2) != 0)
        return fail(path2, "cannot write");
    printf("make_family_ckpt: wrote %s (%zu tensors)\n", argv[2], m);
    rf_ckpt_close(ck);
    return 0;
}
