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
 *     --copy-layer FROM TO  also store every tensor whose name begins with FROM as TO + the
 *                        rest, BF16 ones with new deterministic values (a whole MTP layer
 *                        made from a decoder layer: model.layers.3. -> mtp.layers.0.)
 *     --add NAME ROWS [COLS]  add a BF16 tensor [ROWS] or [ROWS, COLS] of deterministic values
 *     --reference        also write OUT-DIR/tensors.reference.json (dtype, shape and sha256
 *                        of every tensor written), for --reference runs
 * Options that take a name may repeat up to 16 times (--copy-layer, --add).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/checkpoint.h"
#include "refit/dtype.h"
#include "refit/hashes.h"
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

/* Deterministic bf16 values, small and mostly distinct (seed picks the sequence). */
static void *pattern(uint64_t n, unsigned seed)
{
    uint16_t *p = malloc(n * 2 + 2);
    for (uint64_t i = 0; p && i < n; i++)
        p[i] = rf_f32_to_bf16((float)((int)((i * 2654435761u + seed * 40503u) % 253u) - 126) /
                              256.0f);
    return p;
}

static uint64_t numel_of(int nd, const uint64_t *shape)
{
    uint64_t n = 1;
    for (int k = 0; k < nd; k++)
        n *= shape[k];
    return n;
}

static int write_reference(const char *dir, size_t n, const char *const *names,
                           const rf_dtype_t *dts, const int *ndims,
                           uint64_t (*shapes)[RF_ST_MAX_RANK], const void *const *data)
{
    char path[4096], hex[RF_SHA256_HEX_CHARS + 1];
    uint8_t d[RF_SHA256_BYTES];
    snprintf(path, sizeof(path), "%s/tensors.reference.json", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return fail(path, "cannot write");
    fprintf(f, "{\n");
    for (size_t i = 0; i < n; i++) {
        if (rf_sha256(data[i], numel_of(ndims[i], shapes[i]) * rf_dtype_size(dts[i]), d) != RF_OK)
            return fail(names[i], "sha256 failed");
        rf_sha256_hex(d, hex);
        fprintf(f, "  \"%s\": {\"dtype\": \"%s\", \"shape\": [", names[i],
                rf_dtype_torch_name(dts[i]));
        for (int k = 0; k < ndims[i]; k++)
            fprintf(f, "%s%llu", k ? ", " : "", (unsigned long long)shapes[i][k]);
        fprintf(f, "], \"sha256\": \"%s\"}%s\n", hex, i + 1 < n ? "," : "");
    }
    fprintf(f, "}\n");
    return fclose(f) == 0 ? 0 : fail(path, "write failed");
}

int main(int argc, char **argv)
{
    const char *from = NULL, *to = NULL, *keep = NULL, *drop = NULL;
    const char *cfrom[16], *cto[16], *aname[16];
    uint64_t arows[16], acols[16];
    int ncopy = 0, nadd = 0, reference = 0;
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
        } else if (strcmp(argv[i], "--copy-layer") == 0 && i + 2 < argc && ncopy < 16) {
            cfrom[ncopy] = argv[++i];
            cto[ncopy++] = argv[++i];
        } else if (strcmp(argv[i], "--add") == 0 && i + 2 < argc && nadd < 16) {
            aname[nadd] = argv[++i];
            arows[nadd] = strtoull(argv[++i], NULL, 10);
            acols[nadd] = 0;
            if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9')
                acols[nadd] = strtoull(argv[++i], NULL, 10);
            nadd++;
        } else if (strcmp(argv[i], "--reference") == 0) {
            reference = 1;
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
        for (int c = 0; c < ncopy && m + 4 < MAXT; c++) {
            if (strncmp(e->name, cfrom[c], strlen(cfrom[c])) != 0)
                continue;
            char *nm = malloc(strlen(cto[c]) + strlen(e->name) + 1);
            sprintf(nm, "%s%s", cto[c], e->name + strlen(cfrom[c]));
            names[m] = nm;
            dts[m] = e->dtype;
            ndims[m] = e->ndim;
            memcpy(shapes[m], e->shape, sizeof(shapes[m]));
            /* new values: a copy mixed up with its source would still pass --reference */
            data[m] = e->dtype == RF_DTYPE_BF16 ? pattern(e->nbytes / 2, 101u + (unsigned)m) : b;
            m++;
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
    for (int a = 0; a < nadd && m + 1 < MAXT; a++) {
        names[m] = aname[a];
        dts[m] = RF_DTYPE_BF16;
        ndims[m] = acols[a] > 0 ? 2 : 1;
        memset(shapes[m], 0, sizeof(shapes[m]));
        shapes[m][0] = arows[a];
        shapes[m][1] = acols[a];
        data[m++] = pattern(arows[a] * (acols[a] > 0 ? acols[a] : 1), 7u + (unsigned)a);
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
    if (reference && write_reference(argv[2], m, names, dts, ndims, shapes, data) != 0)
        return 1;
    printf("make_family_ckpt: wrote %s (%zu tensors)\n", argv[2], m);
    rf_ckpt_close(ck);
    return 0;
}
