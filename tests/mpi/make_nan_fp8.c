/*
 * Writes a copy of a safetensors checkpoint directory's model.safetensors (and config.json)
 * into OUT-DIR with one byte of the first F8_E4M3 tensor set to 0x7F (an e4m3fn NaN), for the
 * test that refit refuses FP8 sources holding NaN bytes (DESIGN.md section 7).
 *   make_nan_fp8 SRC-DIR OUT-DIR
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
    rf_err_clear(&err);
    if (argc != 3)
        return 2;
    if (rf_ckpt_open(argv[1], &ck, &err) != RF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    size_t n = rf_ckpt_count(ck);
    const char **names = calloc(n, sizeof(char *));
    rf_dtype_t *dts = calloc(n, sizeof(rf_dtype_t));
    int *ndims = calloc(n, sizeof(int));
    uint64_t(*shapes)[RF_ST_MAX_RANK] = calloc(n, sizeof(*shapes));
    void **data = calloc(n, sizeof(void *));
    int poisoned = 0;
    for (size_t i = 0; i < n; i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        names[i] = e->name;
        dts[i] = e->dtype;
        ndims[i] = e->ndim;
        memcpy(shapes[i], e->shape, sizeof(shapes[i]));
        data[i] = malloc(e->nbytes + 1);
        if (rf_ckpt_read(ck, e, 0, rows, 0, rb, data[i], rb, &err) != RF_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        if (!poisoned && e->dtype == RF_DTYPE_F8_E4M3 && e->nbytes > 10) {
            ((unsigned char *)data[i])[7] = 0x7f;
            poisoned = 1;
        }
    }
    mkdir(argv[2], 0755);
    snprintf(path, sizeof(path), "%s/model.safetensors", argv[2]);
    if (rf_st_write_file(path, n, names, dts, ndims, (const uint64_t(*)[RF_ST_MAX_RANK])shapes,
                         (const void *const *)data, NULL, &err) != RF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("wrote %s (%zu tensors, %s)\n", path, n, poisoned ? "one NaN byte" : "no fp8 tensor");
    for (size_t i = 0; i < n; i++)
        free(data[i]);
    free(data);
    free(shapes);
    free(ndims);
    free(dts);
    free(names);
    rf_ckpt_close(ck);
    return poisoned ? 0 : 1;
}
