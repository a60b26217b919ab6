/*
 * refit fuzz target: refit's HDF5 container rules (formats/hdf5.c), the layer above libhdf5.
 *
 * The input is a recipe, not raw HDF5 bytes: libhdf5 builds a well-formed file from it in
 * memory (core driver), with fuzzed root attributes (format string, format_version of any
 * integer width or a string, config), and datasets of fuzzed names, HDF5 types (class, size,
 * sign, byte order), dtype attributes (a name, garbage, an integer or none), ranks and
 * dimensions (absurd ones included), layouts (contiguous, chunked, compact), a deflate
 * filter, data written or not. rf_h5_open_image then checks it and every dataset it accepts
 * is read whole (up to 1 MiB), rows and columns. So the fuzzer explores refit's rules and
 * reads, not libhdf5's parser of hostile bytes: a crash inside libhdf5 on a crafted file is
 * libhdf5's (LLVMFuzzerInitialize prints its version for the report). Seeds in
 * tests/fuzz/corpus/fuzz_hdf5/ (recipes of the fixtures' shapes and dtypes).
 *
 * Recipe bytes (missing bytes read as 0): [0] root flags (bit 0 format present, bit 1 wrong
 * format, bit 2 version present, bit 3 version as a string, bit 4 config), [1] version value,
 * [2] version width selector, [3] dataset count (mod 9); per dataset 12 bytes: name byte, type
 * selector, dtype-attribute selector, rank, 4 dim bytes (each: value, or 2^(v-200) when >= 200),
 * layout, flags (bit 0 deflate, bit 1 write data), 2 spare.
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/hdf5.h"
#include "refit/safetensors.h"
#include "refit/status.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fuzz_hdf5: libhdf5 %s\n", rf_h5_version());
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return 0;
}

static uint8_t at(const uint8_t *d, size_t n, size_t i)
{
    return i < n ? d[i] : 0;
}

static hid_t pick_type(uint8_t s)
{
    static const hid_t *const base[] = {
        &H5T_STD_U8LE_g,  &H5T_STD_I8LE_g,   &H5T_STD_U16LE_g,  &H5T_STD_I16LE_g,
        &H5T_STD_U32LE_g, &H5T_STD_I32LE_g,  &H5T_STD_U64LE_g,  &H5T_STD_I64LE_g,
        &H5T_IEEE_F32LE_g, &H5T_IEEE_F64LE_g, &H5T_STD_U16BE_g, &H5T_IEEE_F32BE_g,
        &H5T_C_S1_g,      &H5T_STD_B8LE_g};
    size_t k = s % (sizeof(base) / sizeof(base[0]) + 2);
    hid_t t;
    if (k == sizeof(base) / sizeof(base[0])) { /* the f16 h5py writes */
        t = H5Tcopy(H5T_IEEE_F32LE);
        H5Tset_fields(t, 15, 10, 5, 0, 10);
        H5Tset_size(t, 2);
        H5Tset_ebias(t, 15);
        return t;
    }
    if (k == sizeof(base) / sizeof(base[0]) + 1) { /* h5py's bool */
        signed char f = 0, tr = 1;
        t = H5Tenum_create(H5T_NATIVE_SCHAR);
        H5Tenum_insert(t, "FALSE", &f);
        H5Tenum_insert(t, "TRUE", &tr);
        return t;
    }
    t = H5Tcopy(*base[k]);
    if (k == 12)
        H5Tset_size(t, 1 + (s >> 5));
    return t;
}

static void str_attr(hid_t obj, const char *name, const char *v, int vlen)
{
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
    H5Tset_size(t, vlen ? H5T_VARIABLE : (strlen(v) ? strlen(v) : 1));
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0)
        H5Awrite(a, t, vlen ? (const void *)&v : (const void *)v);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static const char *const dtypes[] = {"BOOL", "U8",  "I8",  "I16", "U16",     "F16",
                                         "BF16", "I32", "U32", "F32", "F64",     "I64",
                                         "U64",  "F8_E4M3", "F8_E5M2", "bf16", ""};
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, 1 << 16, 0);
    hid_t f = H5Fcreate("fuzz.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0)
        return 0;
    uint8_t rf = at(d, n, 0);
    if (rf & 1)
        str_attr(f, "format", rf & 2 ? "refit-checkpoinT" : RF_H5_FORMAT, rf & 32);
    if (rf & 4) {
        if (rf & 8) {
            str_attr(f, "format_version", "1", 0);
        } else {
            static const hid_t *const w[] = {&H5T_STD_I8LE_g, &H5T_STD_U16BE_g, &H5T_STD_I32LE_g,
                                             &H5T_STD_I64LE_g, &H5T_IEEE_F64LE_g};
            long long v = at(d, n, 1) % 4;
            hid_t s = H5Screate(H5S_SCALAR);
            hid_t a = H5Acreate2(f, "format_version", *w[at(d, n, 2) % 5], s, H5P_DEFAULT,
                                 H5P_DEFAULT);
            if (a >= 0)
                H5Awrite(a, H5T_NATIVE_LLONG, &v);
            H5Aclose(a);
            H5Sclose(s);
        }
    }
    if (rf & 16)
        str_attr(f, "config", "{\"model_type\": \"llama\"}", rf & 64);
    hid_t g = rf & 128 ? -1 : H5Gcreate2(f, RF_H5_GROUP, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int nds = at(d, n, 3) % 9;
    for (int i = 0; i < nds && g >= 0; i++) {
        size_t o = 4 + (size_t)i * 12;
        char name[16];
        snprintf(name, sizeof(name), "t%c%d", 'a' + at(d, n, o) % 26, i);
        hid_t t = pick_type(at(d, n, o + 1));
        int rank = at(d, n, o + 3) % 6;
        hsize_t dims[4] = {1, 1, 1, 1};
        uint64_t total = 1;
        for (int k = 0; k < rank && k < 4; k++) {
            uint8_t v = at(d, n, o + 4 + k);
            dims[k] = v >= 200 ? (hsize_t)1 << ((v - 200) % 64) : v;
            total = __builtin_mul_overflow(total, dims[k], &total) ? UINT64_MAX : total;
        }
        if (rank > 4)
            rank = 0; /* scalar */
        uint8_t lay = at(d, n, o + 8) % 3, fl = at(d, n, o + 9);
        hid_t s = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (lay == 1 && rank > 0) {
            hsize_t ch[4];
            for (int k = 0; k < rank; k++)
                ch[k] = dims[k] == 0 ? 1 : (dims[k] > 16 ? 16 : dims[k]);
            H5Pset_chunk(dcpl, rank, ch);
            if (fl & 1)
                H5Pset_deflate(dcpl, 1);
        } else if (lay == 2 && total * H5Tget_size(t) < 4096) {
            H5Pset_layout(dcpl, H5D_COMPACT);
        }
        hid_t ds = H5Dcreate2(g, name, t, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (ds >= 0) {
            uint8_t sel = at(d, n, o + 2);
            if (sel < 200)
                str_attr(ds, "dtype", dtypes[sel % (sizeof(dtypes) / sizeof(dtypes[0]))],
                         sel & 128);
            else if (sel < 230) {
                int v = 9;
                hid_t as = H5Screate(H5S_SCALAR);
                hid_t a = H5Acreate2(ds, "dtype", H5T_STD_I32LE, as, H5P_DEFAULT, H5P_DEFAULT);
                H5Awrite(a, H5T_NATIVE_INT, &v);
                H5Aclose(a);
                H5Sclose(as);
            }
            size_t nb = total < (1u << 20) ? (size_t)total * H5Tget_size(t) : 0;
            if ((fl & 2) && nb > 0 && total < (1u << 20) && H5Tget_class(t) != H5T_STRING) {
                unsigned char *buf = malloc(nb);
                if (buf != NULL) {
                    for (size_t k = 0; k < nb; k++)
                        buf[k] = (unsigned char)(k * 131 + (size_t)i);
                    H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
                    free(buf);
                }
            }
            H5Dclose(ds);
        }
        H5Pclose(dcpl);
        H5Sclose(s);
        H5Tclose(t);
    }
    if (g >= 0)
        H5Gclose(g);
    H5Fflush(f, H5F_SCOPE_GLOBAL);
    ssize_t len = H5Fget_file_image(f, NULL, 0);
    void *img = len > 0 ? malloc((size_t)len) : NULL;
    if (img != NULL && H5Fget_file_image(f, img, (size_t)len) != len) {
        free(img);
        img = NULL;
    }
    H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    if (img == NULL)
        return 0;

    rf_h5_file_t *h = NULL;
    rf_st_header_t hdr;
    rf_err_t err;
    rf_err_clear(&err);
    if (rf_h5_open_image(img, (size_t)len, "fuzz.h5", &h, &hdr, &err) == RF_OK) {
        for (size_t i = 0; i < hdr.count; i++) {
            const rf_st_entry_t *e = &hdr.entries[i];
            if (rf_st_header_find(&hdr, e->name) != e)
                __builtin_trap();
            uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
            if (e->nbytes == 0 || e->nbytes > (1u << 20))
                continue;
            char *buf = malloc((size_t)e->nbytes);
            if (buf == NULL)
                continue;
            if (rf_h5_read(h, i, 0, rows, 0, rb, buf, (size_t)rb, &err) != RF_OK)
                __builtin_trap(); /* an accepted dataset must read */
            size_t es = rf_dtype_size(e->dtype);
            if (rows > 1 && rb >= 2 * es)
                (void)rf_h5_read(h, i, 1, rows, es, rb, buf, (size_t)rb, &err);
            free(buf);
        }
        rf_h5_close(h);
    }
    rf_st_header_free(&hdr);
    free(img);
    return 0;
}
