/*
 * make_h5_variant IN OUT [MODE ARGS...]: writes checkpoint IN (any rf_ckpt_open input) as
 * the HDF5 file OUT with refit's writer, then breaks one rule of the container on purpose
 * (tests/mpi/hdf5.cmake). Modes:
 *   --shape NAME          NAME stored with one row fewer (a shape the inventory refuses)
 *   --no-dtype NAME       NAME's dtype attribute removed
 *   --dtype NAME VALUE    NAME's dtype attribute set to VALUE
 *   --gzip NAME           NAME stored with the deflate filter
 *   --huge NAME           NAME replaced by an unwritten 2^40 x 2^30 dataset
 *   --group NAME          a group NAME added inside /tensors
 *   --format VALUE | --no-format | --version N | --no-version   the root attributes
 *   --truncate BYTES      the file cut to BYTES
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refit/checkpoint.h"
#include "refit/hdf5.h"
#include "refit/safetensors.h"

static int die(const char *what, const char *msg)
{
    fprintf(stderr, "make_h5_variant: %s: %s\n", what, msg);
    return 1;
}

static void set_str(hid_t obj, const char *name, const char *v)
{
    if (H5Aexists(obj, name) > 0)
        H5Adelete(obj, name);
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
    H5Tset_size(t, strlen(v) ? strlen(v) : 1);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, v);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return die("usage", "make_h5_variant IN OUT [MODE ARGS...]");
    const char *in = argv[1], *out = argv[2], *mode = argc > 3 ? argv[3] : "";
    const char *arg = argc > 4 ? argv[4] : "", *arg2 = argc > 5 ? argv[5] : "";
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    rf_h5_writer_t *w = NULL;
    if (rf_ckpt_open(in, &ck, &err) != RF_OK)
        return die(in, err.msg);
    const char *cfg = rf_ckpt_config(ck);
    char cpath[4096], *ctext = NULL;
    snprintf(cpath, sizeof(cpath), "%s/config.json", in);
    FILE *cf = cfg ? NULL : fopen(cpath, "rb");
    if (cf != NULL) {
        ctext = calloc(1, 1 << 20);
        if (fread(ctext, 1, (1 << 20) - 1, cf) == 0) {
            free(ctext);
            ctext = NULL;
        }
        fclose(cf);
    }
    if (rf_h5_writer_create(out, cfg ? cfg : ctext, true, &w, &err) != RF_OK)
        return die(out, err.msg);
    free(ctext);
    for (size_t i = 0; i < rf_ckpt_count(ck); i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t shape[RF_ST_MAX_RANK], rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        memcpy(shape, e->shape, sizeof(shape));
        if (strcmp(mode, "--shape") == 0 && strcmp(arg, e->name) == 0 && e->ndim > 0)
            shape[0] = --rows;
        char *buf = malloc(rows * rb + 1);
        if (buf == NULL || rf_ckpt_read(ck, e, 0, rows, 0, rb, buf, (size_t)rb, &err) != RF_OK ||
            rf_h5_writer_begin(w, e->name, e->dtype, e->ndim, shape, &err) != RF_OK ||
            rf_h5_writer_rows(w, 0, rows, buf, &err) != RF_OK)
            return die(e->name, err.msg);
        free(buf);
    }
    if (rf_h5_writer_finish(w, &err) != RF_OK)
        return die(out, err.msg);

    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(out, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, RF_H5_GROUP, H5P_DEFAULT);
    if (f < 0 || g < 0)
        return die(out, "cannot reopen");
    if (strcmp(mode, "--no-dtype") == 0 || strcmp(mode, "--dtype") == 0) {
        hid_t d = H5Dopen2(g, arg, H5P_DEFAULT);
        if (d < 0)
            return die(arg, "no such dataset");
        if (mode[2] == 'n')
            H5Adelete(d, "dtype");
        else
            set_str(d, "dtype", arg2);
        H5Dclose(d);
    } else if (strcmp(mode, "--gzip") == 0 || strcmp(mode, "--huge") == 0) {
        const rf_st_entry_t *e = rf_ckpt_find(ck, arg);
        if (e == NULL || e->ndim == 0)
            return die(arg, "no such tensor (or a scalar)");
        H5Ldelete(g, arg, H5P_DEFAULT);
        hsize_t dims[RF_ST_MAX_RANK];
        for (int k = 0; k < e->ndim; k++)
            dims[k] = e->shape[k];
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), t = H5Tcopy(H5T_STD_U16LE), s;
        H5Tset_size(t, rf_dtype_size(e->dtype));
        if (mode[2] == 'g') {
            hsize_t chunk[RF_ST_MAX_RANK];
            for (int k = 0; k < e->ndim; k++)
                chunk[k] = dims[k];
            H5Pset_chunk(dcpl, e->ndim, chunk);
            H5Pset_deflate(dcpl, 6);
            s = H5Screate_simple(e->ndim, dims, NULL);
        } else {
            hsize_t huge[2] = {(hsize_t)1 << 40, (hsize_t)1 << 30};
            s = H5Screate_simple(2, huge, NULL);
        }
        hid_t d = H5Dcreate2(g, arg, t, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (d < 0)
            return die(arg, "cannot create the replacement dataset");
        if (mode[2] == 'g') {
            char *buf = malloc(e->nbytes + 1);
            rf_ckpt_read(ck, e, 0, rf_st_entry_rows(e), 0, rf_st_entry_row_bytes(e), buf,
                         (size_t)rf_st_entry_row_bytes(e), &err);
            H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
            free(buf);
        }
        set_str(d, "dtype", rf_dtype_name(e->dtype));
        H5Dclose(d);
        H5Sclose(s);
        H5Tclose(t);
        H5Pclose(dcpl);
    } else if (strcmp(mode, "--group") == 0) {
        H5Gclose(H5Gcreate2(g, arg, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    } else if (strcmp(mode, "--format") == 0) {
        set_str(f, "format", arg);
    } else if (strcmp(mode, "--no-format") == 0) {
        H5Adelete(f, "format");
    } else if (strcmp(mode, "--no-version") == 0) {
        H5Adelete(f, "format_version");
    } else if (strcmp(mode, "--version") == 0) {
        long long v = atoll(arg);
        hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
        H5Awrite(a, H5T_NATIVE_LLONG, &v);
        H5Aclose(a);
    }
    H5Gclose(g);
    if (H5Fclose(f) < 0)
        return die(out, "close failed");
    if (strcmp(mode, "--truncate") == 0 && truncate(out, atoll(arg)) != 0)
        return die(out, "truncate failed");
    rf_ckpt_close(ck);
    return 0;
}
