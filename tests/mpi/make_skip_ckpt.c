/*
 * Writes a copy of a safetensors checkpoint directory's tensors into OUT-DIR/model.safetensors
 * with one tensor added that is on the documented skip list (DESIGN.md section 4):
 * model.layers.0.self_attn.rotary_emb.inv_freq (F32 [8]), for the test that such a tensor is
 * skipped at INFO while tensors skipped for another reason (cut away by model.overrides) are
 * logged at WARN.
 *   make_skip_ckpt SRC-DIR OUT-DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/checkpoint.h"
#include "refit/safetensors.h"

int main(int argc, char **argv)
{
    rf_ckpt_t *ck;
    rf_err_t err;
    char path[2048];
    float inv_freq[8];
    rf_err_clear(&err);
    if (argc != 3)
        return 2;
    if (rf_ckpt_open(argv[1], &ck, &err) != RF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    size_t n = rf_ckpt_count(ck), m = n + 1;
    const char **names = calloc(m, sizeof(char *));
    rf_dtype_t *dts = calloc(m, sizeof(rf_dtype_t));
    int *ndims = calloc(m, sizeof(int));
    uint64_t(*shapes)[RF_ST_MAX_RANK] = calloc(m, sizeof(*shapes));
    const void **data = calloc(m, sizeof(void *));
    if (!names || !dts || !ndims || !shapes || !data)
        return 1;
    for (size_t i = 0; i < n; i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        void *b = malloc(e->nbytes + 1);
        names[i] = e->name;
        dts[i] = e->dtype;
        ndims[i] = e->ndim;
        memcpy(shapes[i], e->shape, sizeof(shapes[i]));
        if (b == NULL || rf_ckpt_read(ck, e, 0, rows, 0, rb, b, rb, &err) != RF_OK) {
            fprintf(stderr, "%s\n", b ? err.msg : "out of memory");
            return 1;
        }
        data[i] = b;
    }
    for (int k = 0; k < 8; k++)
        inv_freq[k] = 1.0f / (float)(1 << k);
    names[n] = "model.layers.0.self_attn.rotary_emb.inv_freq";
    dts[n] = RF_DTYPE_F32;
    ndims[n] = 1;
    shapes[n][0] = 8;
    data[n] = inv_freq;
    mkdir(argv[2], 0755);
    snprintf(path, sizeof(path), "%s/model.safetensors", argv[2]);
    if (rf_st_write_file(path, m, names, dts, ndims, (const uint64_t(*)[RF_ST_MAX_RANK])shapes,
                         data, NULL, &err) != RF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("wrote %s (%zu tensors, one on the skip list)\n", path, m);
    for (size_t i = 0; i < n; i++)
        free((void *)data[i]);
    free(data);
    free(shapes);
    free(ndims);
    free(dts);
    free(names);
    rf_ckpt_close(ck);
    return 0;
}
