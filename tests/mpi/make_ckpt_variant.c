/*
 * Writes a modified copy of a checkpoint directory into OUT-DIR, for the tests that refit
 * checks a checkpoint against its config instead of assuming (docs/faults.md, "Checkpoint vs
 * config"): OUT-DIR/model.safetensors (every tensor of SRC-DIR), OUT-DIR/config.json (SRC's)
 * and OUT-DIR/tensors.reference.json (SRC's, when it has one).
 *   make_ckpt_variant SRC-DIR OUT-DIR [OPTION...]
 *     --head equal|differs  add lm_head.weight = model.embed_tokens.weight (differs: one byte
 *                           of row 7 flipped), and its reference entry
 *     --set KEY=JSON        set a top-level key of config.json (repeatable)
 *     --no-config           write no config.json
 *     --config-only         write only config.json (a model config for a topology)
 *     --ref-extra NAME      add a reference entry NAME that no checkpoint tensor backs
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/checkpoint.h"
#include "refit/hashes.h"
#include "refit/safetensors.h"

static int fail(const char *what, const char *msg)
{
    fprintf(stderr, "make_ckpt_variant: %s: %s\n", what, msg);
    return 1;
}

int main(int argc, char **argv)
{
    const char *head = NULL, *ref_extra = NULL, *sets[16];
    int nsets = 0, no_config = 0, config_only = 0;
    char path[4096];
    rf_err_t err;
    rf_err_clear(&err);
    if (argc < 3)
        return fail("usage", "SRC-DIR OUT-DIR [--head equal|differs] [--set KEY=JSON] "
                             "[--no-config] [--config-only] [--ref-extra NAME]");
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--head") == 0 && i + 1 < argc)
            head = argv[++i];
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && nsets < 16)
            sets[nsets++] = argv[++i];
        else if (strcmp(argv[i], "--no-config") == 0)
            no_config = 1;
        else if (strcmp(argv[i], "--config-only") == 0)
            config_only = 1;
        else if (strcmp(argv[i], "--ref-extra") == 0 && i + 1 < argc)
            ref_extra = argv[++i];
        else
            return fail("bad option", argv[i]);
    }
    if (head != NULL && strcmp(head, "equal") != 0 && strcmp(head, "differs") != 0)
        return fail("--head", head);
    mkdir(argv[2], 0755);

    if (!no_config) {
        json_error_t je;
        snprintf(path, sizeof(path), "%s/config.json", argv[1]);
        json_t *cfg = json_load_file(path, 0, &je);
        if (cfg == NULL)
            return fail(path, je.text);
        for (int i = 0; i < nsets; i++) {
            const char *eq = strchr(sets[i], '=');
            if (eq == NULL)
                return fail("--set", sets[i]);
            json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, &je);
            if (v == NULL)
                return fail(sets[i], je.text);
            char key[256];
            snprintf(key, sizeof(key), "%.*s", (int)(eq - sets[i]), sets[i]);
            json_object_set_new(cfg, key, v);
        }
        snprintf(path, sizeof(path), "%s/config.json", argv[2]);
        if (json_dump_file(cfg, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
            return fail(path, "cannot write");
        json_decref(cfg);
    }
    if (config_only)
        return 0;

    rf_ckpt_t *ck;
    if (rf_ckpt_open(argv[1], &ck, &err) != RF_OK)
        return fail(argv[1], err.msg);
    size_t n = rf_ckpt_count(ck), m = n + (head != NULL);
    const char **names = calloc(m, sizeof(char *));
    rf_dtype_t *dts = calloc(m, sizeof(rf_dtype_t));
    int *ndims = calloc(m, sizeof(int));
    uint64_t(*shapes)[RF_ST_MAX_RANK] = calloc(m, sizeof(*shapes));
    void **data = calloc(m, sizeof(void *));
    uint64_t *nbytes = calloc(m, sizeof(uint64_t));
    int emb = -1;
    for (size_t i = 0; i < n; i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        names[i] = e->name;
        dts[i] = e->dtype;
        ndims[i] = e->ndim;
        nbytes[i] = e->nbytes;
        memcpy(shapes[i], e->shape, sizeof(shapes[i]));
        data[i] = malloc(e->nbytes + 1);
        if (rf_ckpt_read(ck, e, 0, rows, 0, rb, data[i], rb, &err) != RF_OK)
            return fail(e->name, err.msg);
        if (strcmp(e->name, "model.embed_tokens.weight") == 0)
            emb = (int)i;
        if (head != NULL && strcmp(e->name, "lm_head.weight") == 0)
            return fail(argv[1], "already has an lm_head.weight");
    }
    if (head != NULL) {
        if (emb < 0 || shapes[emb][0] < 8)
            return fail(argv[1], "no model.embed_tokens.weight of 8 rows or more");
        names[n] = "lm_head.weight";
        dts[n] = dts[emb];
        ndims[n] = ndims[emb];
        nbytes[n] = nbytes[emb];
        memcpy(shapes[n], shapes[emb], sizeof(shapes[n]));
        data[n] = malloc(nbytes[emb] + 1);
        memcpy(data[n], data[emb], nbytes[emb]);
        if (strcmp(head, "differs") == 0)
            ((unsigned char *)data[n])[7 * (nbytes[emb] / shapes[emb][0]) + 1] ^= 0x01;
    }
    snprintf(path, sizeof(path), "%s/model.safetensors", argv[2]);
    if (rf_st_write_file(path, m, names, dts, ndims, (const uint64_t(*)[RF_ST_MAX_RANK])shapes,
                         (const void *const *)data, NULL, &err) != RF_OK)
        return fail(path, err.msg);
    printf("wrote %s (%zu tensors%s%s)\n", path, m, head ? ", lm_head.weight " : "",
           head ? head : "");

    json_error_t je;
    snprintf(path, sizeof(path), "%s/tensors.reference.json", argv[1]);
    json_t *ref = json_load_file(path, 0, &je);
    if (ref != NULL) {
        json_t *ee = json_object_get(ref, "model.embed_tokens.weight");
        if (!json_is_object(ee))
            return fail(path, "no model.embed_tokens.weight entry");
        if (head != NULL) {
            /* the head's own bytes: what a reference written from this file would say */
            uint8_t d[RF_SHA256_BYTES];
            char hex[RF_SHA256_HEX_CHARS + 1];
            json_t *he = json_deep_copy(ee);
            (void)rf_sha256(data[n], nbytes[n], d);
            rf_sha256_hex(d, hex);
            json_object_set_new(he, "sha256", json_string(hex));
            json_object_set_new(ref, "lm_head.weight", he);
        }
        if (ref_extra != NULL)
            json_object_set_new(ref, ref_extra, json_deep_copy(ee));
        snprintf(path, sizeof(path), "%s/tensors.reference.json", argv[2]);
        if (json_dump_file(ref, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
            return fail(path, "cannot write");
        json_decref(ref);
    } else if (ref_extra != NULL) {
        return fail(path, je.text);
    }
    for (size_t i = 0; i < m; i++)
        free(data[i]);
    free(data);
    free(nbytes);
    free(shapes);
    free(ndims);
    free(dts);
    free(names);
    rf_ckpt_close(ck);
    return 0;
}
