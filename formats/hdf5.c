/*
 * refit formats: the HDF5 checkpoint container, reader and streaming writer.
 *
 * Every object of the file is untrusted: attributes, types, dataspaces and layouts are
 * checked against the container's rules (refit/hdf5.h, docs/formats.md) before a dataset is
 * read, and sizes are computed in uint64 with overflow checks. HDF5 reports errors on its
 * own stack and, by default, prints them; refit turns the printing off once and folds the
 * most specific entry of the stack into its own message instead, so a caller sees one line
 * naming the file, the dataset and the rule. Data are read and written with the memory type
 * equal to the file type, so HDF5 converts nothing: bytes go through as stored.
 *
 * libhdf5 is not thread safe in its parallel build (and need not be in a serial one): one
 * process-wide mutex serializes every call into it from this file.
 *
 * Where libhdf5 is parallel (H5_HAVE_PARALLEL), rf_h5_open_mpio opens the file with the
 * MPI-IO driver and rf_h5_read_all reads with collective transfers: each call is one
 * H5Dread on every rank of the communicator, whatever its own range (empty, or refused), so
 * no rank can leave its peers waiting inside MPI-IO. Everything MPI-IO is inside
 * H5_HAVE_PARALLEL: a serial libhdf5 (the GPU host's 1.10) builds the same file.
 */
#include "refit/hdf5.h"

#include <errno.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats_names_int.h"

#define NAME_FMT "\"%.200s\""
/* Longest dataset name refit accepts (a checkpoint name is far shorter). */
#define MAX_NAME 1024

struct rf_h5_file {
    char *path;      /* or the image's name */
    hid_t file;
    size_t n;
    hid_t *dsets;    /* per header entry, name order */
    hid_t *types;    /* the dataset's file type, also the memory type of reads */
    rf_st_entry_t *ents; /* checked copies of the header's entries (names owned) */
    char *config;
    uint64_t size;
    bool mpio;                      /* opened with the MPI-IO driver (rf_h5_open_mpio) */
    uint64_t coll_reads, indep_reads; /* rf_h5_read_all: how HDF5 did each transfer */
};

struct rf_h5_writer {
    char *path;
    hid_t file, group;
    hid_t dset, type;  /* the tensor being written, or -1 */
    char name[MAX_NAME + 1];
    int ndim;
    uint64_t shape[RF_ST_MAX_RANK];
    uint64_t rows, row_bytes, next_row;
};

static pthread_mutex_t h5_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t h5_once = PTHREAD_ONCE_INIT;

static void h5_init(void)
{
    H5open();
    /* refit reports HDF5's errors in its own messages: never printed raw */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void lock(void)
{
    pthread_once(&h5_once, h5_init);
    pthread_mutex_lock(&h5_lock);
}

static void unlock(void)
{
    pthread_mutex_unlock(&h5_lock);
}

const char *rf_h5_version(void)
{
    static char buf[64];
    unsigned maj = 0, min = 0, rel = 0;
    lock();
    H5get_libversion(&maj, &min, &rel);
    snprintf(buf, sizeof(buf), "%u.%u.%u (%s)", maj, min, rel,
             rf_h5_is_parallel() ? "parallel" : "serial");
    unlock();
    return buf;
}

bool rf_h5_is_parallel(void)
{
#ifdef H5_HAVE_PARALLEL
    return true;
#else
    return false;
#endif
}

/* ---- HDF5's error stack into refit's message ------------------------------------------ */

typedef struct h5_walk {
    char desc[160];
    char func[64];
    unsigned n;
} h5_walk_t;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    h5_walk_t *w = data;
    if (n == 0) { /* upward: the first entry is where HDF5 found the problem */
        snprintf(w->desc, sizeof(w->desc), "%s", e->desc ? e->desc : "");
        if (w->desc[0] == '\0')
            H5Eget_msg(e->min_num, NULL, w->desc, sizeof(w->desc));
        snprintf(w->func, sizeof(w->func), "%s", e->func_name ? e->func_name : "?");
    }
    w->n = n + 1;
    return 0;
}

/* Sets err to "<fmt...>: HDF5 <version>: <most specific message> (<function>)" and clears
 * HDF5's stack. */
static rf_status_t h5_err(rf_err_t *err, rf_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rf_status_t h5_err(rf_err_t *err, rf_status_t st, const char *fmt, ...)
{
    char what[RF_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    h5_walk_t w;
    memset(&w, 0, sizeof(w));
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &w);
    H5Eclear2(H5E_DEFAULT);
    if (w.n == 0)
        return rf_err_set(err, st, "%s", what);
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    return rf_err_set(err, st, "%s: HDF5 %u.%u.%u says: %s (%s)", what, maj, min, rel, w.desc,
                      w.func);
}

/* ---- attributes ------------------------------------------------------------------------ */

static void close_id(hid_t *id, herr_t (*fn)(hid_t))
{
    if (*id >= 0)
        fn(*id);
    *id = -1;
}

/*
 * Reads string attribute name of obj into *out (malloc'd, NUL-terminated): fixed- or
 * variable-length, scalar or one element. *out NULL and RF_OK when absent. where names the
 * object in messages.
 */
static rf_status_t attr_string(hid_t obj, const char *name, const char *path, const char *where,
                               size_t max, char **out, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    hid_t a = -1, t = -1, s = -1, mt = -1;
    *out = NULL;
    htri_t ex = H5Aexists(obj, name);
    if (ex < 0)
        return h5_err(err, RF_ERR_PARSE, "%s: %s: cannot look up attribute %s", path, where,
                      name);
    if (ex == 0)
        return RF_OK;
    if ((a = H5Aopen(obj, name, H5P_DEFAULT)) < 0 || (t = H5Aget_type(a)) < 0 ||
        (s = H5Aget_space(a)) < 0) {
        st = h5_err(err, RF_ERR_PARSE, "%s: %s: cannot open attribute %s", path, where, name);
        goto out;
    }
    if (H5Tget_class(t) != H5T_STRING) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: %s: attribute %s is not a string", path, where,
                        name);
        goto out;
    }
    if (H5Sget_simple_extent_npoints(s) != 1) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: %s: attribute %s holds %lld strings, not one",
                        path, where, name, (long long)H5Sget_simple_extent_npoints(s));
        goto out;
    }
    htri_t vl = H5Tis_variable_str(t);
    if (vl > 0) {
        char *v = NULL;
        mt = H5Tcopy(H5T_C_S1);
        if (mt < 0 || H5Tset_size(mt, H5T_VARIABLE) < 0 ||
            H5Tset_cset(mt, H5Tget_cset(t)) < 0 || H5Aread(a, mt, &v) < 0) {
            st = h5_err(err, RF_ERR_PARSE, "%s: %s: cannot read attribute %s", path, where,
                        name);
            goto out;
        }
        size_t len = v ? strnlen(v, max + 1) : 0;
        if (len > max) {
            st = rf_err_set(err, RF_ERR_PARSE, "%s: %s: attribute %s is longer than %zu bytes",
                            path, where, name, max);
        } else if ((*out = malloc(len + 1)) == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
        } else {
            memcpy(*out, v ? v : "", len);
            (*out)[len] = '\0';
        }
        if (v != NULL)
            H5free_memory(v);
    } else if (vl == 0) {
        size_t sz = H5Tget_size(t);
        if (sz == 0 || sz > max) {
            st = rf_err_set(err, RF_ERR_PARSE, "%s: %s: attribute %s is %zu bytes (at most %zu)",
                            path, where, name, sz, max);
            goto out;
        }
        char *buf = calloc(1, sz + 1);
        if (buf == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        mt = H5Tcopy(t);
        if (mt < 0 || H5Aread(a, mt, buf) < 0) {
            free(buf);
            st = h5_err(err, RF_ERR_PARSE, "%s: %s: cannot read attribute %s", path, where,
                        name);
            goto out;
        }
        if (H5Tget_strpad(t) == H5T_STR_SPACEPAD)
            for (size_t k = sz; k > 0 && buf[k - 1] == ' '; k--)
                buf[k - 1] = '\0';
        *out = buf;
    } else {
        st = h5_err(err, RF_ERR_PARSE, "%s: %s: attribute %s has a bad string type", path,
                    where, name);
    }
out:
    close_id(&mt, H5Tclose);
    close_id(&s, H5Sclose);
    close_id(&t, H5Tclose);
    close_id(&a, H5Aclose);
    return st;
}

/* Integer attribute of any width into *v; *found false when absent. */
static rf_status_t attr_int(hid_t obj, const char *name, const char *path, bool *found,
                            int64_t *v, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    hid_t a = -1, t = -1, s = -1;
    *found = false;
    htri_t ex = H5Aexists(obj, name);
    if (ex < 0)
        return h5_err(err, RF_ERR_PARSE, "%s: cannot look up root attribute %s", path, name);
    if (ex == 0)
        return RF_OK;
    if ((a = H5Aopen(obj, name, H5P_DEFAULT)) < 0 || (t = H5Aget_type(a)) < 0 ||
        (s = H5Aget_space(a)) < 0) {
        st = h5_err(err, RF_ERR_PARSE, "%s: cannot open root attribute %s", path, name);
        goto out;
    }
    if (H5Tget_class(t) != H5T_INTEGER || H5Sget_simple_extent_npoints(s) != 1) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: root attribute %s is not one integer", path,
                        name);
        goto out;
    }
    if (H5Aread(a, H5T_NATIVE_INT64, v) < 0) {
        st = h5_err(err, RF_ERR_PARSE, "%s: cannot read root attribute %s", path, name);
        goto out;
    }
    *found = true;
out:
    close_id(&s, H5Sclose);
    close_id(&t, H5Tclose);
    close_id(&a, H5Aclose);
    return st;
}

/* ---- types ----------------------------------------------------------------------------- */

typedef enum { K_FLOAT, K_SIGNED, K_UNSIGNED, K_BOOL } kind_t;

static kind_t dtype_kind(rf_dtype_t dt)
{
    switch (dt) {
    case RF_DTYPE_F16:
    case RF_DTYPE_F32:
    case RF_DTYPE_F64:
        return K_FLOAT;
    case RF_DTYPE_I8:
    case RF_DTYPE_I16:
    case RF_DTYPE_I32:
    case RF_DTYPE_I64:
        return K_SIGNED;
    case RF_DTYPE_BOOL:
        return K_BOOL;
    default: /* U8..U64, and BF16 / F8_E4M3 / F8_E5M2 stored as unsigned integers */
        return K_UNSIGNED;
    }
}

static const char *kind_name(kind_t k)
{
    return k == K_FLOAT ? "IEEE float" : k == K_SIGNED ? "signed integer"
                                       : k == K_BOOL    ? "unsigned integer or enum"
                                                        : "unsigned integer";
}

/* The HDF5 type refit writes for dt (caller closes). F16: the half h5py writes. */
static hid_t h5_type_of(rf_dtype_t dt)
{
    hid_t t;
    switch (dt) {
    case RF_DTYPE_F16:
        /* HDF5 1.10 predefines no half; this is the type h5py builds for float16 */
        t = H5Tcopy(H5T_IEEE_F32LE);
        if (t >= 0 && (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 ||
                       H5Tset_ebias(t, 15) < 0)) {
            H5Tclose(t);
            return -1;
        }
        return t;
    case RF_DTYPE_F32: return H5Tcopy(H5T_IEEE_F32LE);
    case RF_DTYPE_F64: return H5Tcopy(H5T_IEEE_F64LE);
    case RF_DTYPE_I8: return H5Tcopy(H5T_STD_I8LE);
    case RF_DTYPE_I16: return H5Tcopy(H5T_STD_I16LE);
    case RF_DTYPE_I32: return H5Tcopy(H5T_STD_I32LE);
    case RF_DTYPE_I64: return H5Tcopy(H5T_STD_I64LE);
    case RF_DTYPE_BOOL:
    case RF_DTYPE_U8:
    case RF_DTYPE_F8_E4M3:
    case RF_DTYPE_F8_E5M2: return H5Tcopy(H5T_STD_U8LE);
    case RF_DTYPE_U16:
    case RF_DTYPE_BF16: return H5Tcopy(H5T_STD_U16LE);
    case RF_DTYPE_U32: return H5Tcopy(H5T_STD_U32LE);
    case RF_DTYPE_U64: return H5Tcopy(H5T_STD_U64LE);
    default: return -1;
    }
}

/* Whether file type t can hold dt's bytes as the container says; *why names the rule. */
static bool type_fits(hid_t t, rf_dtype_t dt, const char **why)
{
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    kind_t k = dtype_kind(dt);
    if (sz != rf_dtype_size(dt)) {
        *why = "element size";
        return false;
    }
    if (k == K_BOOL && c == H5T_ENUM) { /* h5py's bool: enum {FALSE, TRUE} over int8 */
        *why = "class";
        return true;
    }
    bool cls = k == K_FLOAT ? c == H5T_FLOAT : c == H5T_INTEGER;
    if (!cls) {
        *why = "class";
        return false;
    }
    if (k != K_FLOAT) {
        H5T_sign_t s = H5Tget_sign(t);
        if ((k == K_SIGNED) != (s == H5T_SGN_2)) {
            *why = "signedness";
            return false;
        }
    }
    if (sz > 1 && H5Tget_order(t) != H5T_ORDER_LE) {
        *why = "byte order (refit reads little-endian data)";
        return false;
    }
    return true;
}

static const char *class_name(hid_t t)
{
    switch (H5Tget_class(t)) {
    case H5T_INTEGER: return H5Tget_sign(t) == H5T_SGN_2 ? "signed integer" : "unsigned integer";
    case H5T_FLOAT: return "float";
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    default: return "unknown";
    }
}

/* ---- reader ---------------------------------------------------------------------------- */

static void file_free(rf_h5_file_t *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->n; i++) {
        close_id(&f->types[i], H5Tclose);
        close_id(&f->dsets[i], H5Dclose);
    }
    for (size_t i = 0; i < f->n && f->ents != NULL; i++)
        free((char *)f->ents[i].name);
    free(f->ents);
    free(f->dsets);
    free(f->types);
    close_id(&f->file, H5Fclose);
    free(f->config);
    free(f->path);
    free(f);
}

/* Checks dataset d (open, name nm) and fills e; t takes its type (kept open by the caller). */
static rf_status_t check_dataset(rf_h5_file_t *f, hid_t d, const char *nm, rf_st_entry_t *e,
                                 hid_t *t_p, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    const char *path = f->path;
    hid_t t = -1, s = -1, dcpl = -1;
    char *dts = NULL;
    char where[MAX_NAME + 32];
    snprintf(where, sizeof(where), "dataset " RF_H5_GROUP "/%.200s", nm);
    RF_CHECK_GOTO(attr_string(d, "dtype", path, where, 64, &dts, err), st, out);
    if (dts == NULL) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: %s has no dtype attribute (the safetensors dtype name, e.g. BF16)",
                        path, where);
        goto out;
    }
    e->dtype = rf_dtype_parse(dts);
    if (e->dtype == RF_DTYPE_INVALID || strcmp(rf_dtype_name(e->dtype), dts) != 0) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: %s has unknown dtype attribute \"%.40s\"", path,
                        where, dts);
        goto out;
    }
    if ((t = H5Dget_type(d)) < 0 || (s = H5Dget_space(d)) < 0 ||
        (dcpl = H5Dget_create_plist(d)) < 0) {
        st = h5_err(err, RF_ERR_PARSE, "%s: %s: cannot read its type, space or layout", path,
                    where);
        goto out;
    }
    const char *why = NULL;
    if (!type_fits(t, e->dtype, &why)) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: %s: dtype attribute says %s (stored as a %zu-byte %s) but the HDF5 type is a "
                        "%zu-byte %s (%s disagrees)",
                        path, where, dts, rf_dtype_size(e->dtype), kind_name(dtype_kind(e->dtype)),
                        H5Tget_size(t), class_name(t), why);
        goto out;
    }
    H5S_class_t sc = H5Sget_simple_extent_type(s);
    if (sc != H5S_SCALAR && sc != H5S_SIMPLE) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: %s has a null dataspace (no shape)", path,
                        where);
        goto out;
    }
    int rank = sc == H5S_SCALAR ? 0 : H5Sget_simple_extent_ndims(s);
    if (rank < 0 || rank > RF_ST_MAX_RANK) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: %s has rank %d, more than %d", path, where, rank,
                        RF_ST_MAX_RANK);
        goto out;
    }
    hsize_t dims[RF_ST_MAX_RANK] = {0};
    if (rank > 0 && H5Sget_simple_extent_dims(s, dims, NULL) != rank) {
        st = h5_err(err, RF_ERR_PARSE, "%s: %s: cannot read its shape", path, where);
        goto out;
    }
    e->ndim = rank;
    uint64_t numel = 1, nbytes;
    for (int k = 0; k < rank; k++) {
        e->shape[k] = (uint64_t)dims[k];
        if (__builtin_mul_overflow(numel, e->shape[k], &numel)) {
            st = rf_err_set(err, RF_ERR_PARSE, "%s: %s: shape numel overflows 64 bits", path,
                            where);
            goto out;
        }
    }
    if (__builtin_mul_overflow(numel, (uint64_t)rf_dtype_size(e->dtype), &nbytes) ||
        nbytes > (uint64_t)INT64_MAX) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: %s: size (numel x dtype size) overflows 63 bits", path, where);
        goto out;
    }
    e->nbytes = nbytes;
    int nf = H5Pget_nfilters(dcpl);
    if (nf != 0) {
        char fname[64] = "?";
        unsigned flags = 0, cd[8];
        size_t ncd = 8;
        if (nf > 0)
            H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, sizeof(fname), fname, NULL);
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: %s uses filter \"%.40s\" (%d filter(s)): refit reads unfiltered "
                        "datasets only (rewrite it without compression)",
                        path, where, fname, nf);
        goto out;
    }
    H5D_layout_t lay = H5Pget_layout(dcpl);
    if (lay != H5D_CONTIGUOUS && lay != H5D_CHUNKED && lay != H5D_COMPACT) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: %s has a layout refit does not read (virtual or unknown)", path,
                        where);
        goto out;
    }
    uint64_t stored = (uint64_t)H5Dget_storage_size(d);
    if (nbytes > 0 && stored < nbytes) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: %s stores %llu bytes but its shape needs %llu (data never written)",
                        path, where, (unsigned long long)stored, (unsigned long long)nbytes);
        goto out;
    }
    e->offset = 0;
    if (lay == H5D_CONTIGUOUS && nbytes > 0) {
        haddr_t a = H5Dget_offset(d);
        if (a == HADDR_UNDEF || a > f->size || nbytes > f->size - a) {
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: %s: data at offset %llu + %llu bytes lies outside the %llu-byte "
                            "file (truncated file?)",
                            path, where, (unsigned long long)a, (unsigned long long)nbytes,
                            (unsigned long long)f->size);
            goto out;
        }
        e->offset = (uint64_t)a;
    } else if (lay == H5D_CHUNKED && stored > f->size) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: %s: %llu stored bytes do not fit the %llu-byte file (truncated?)",
                        path, where, (unsigned long long)stored, (unsigned long long)f->size);
        goto out;
    }
    *t_p = t;
    t = -1;
out:
    free(dts);
    close_id(&dcpl, H5Pclose);
    close_id(&s, H5Sclose);
    close_id(&t, H5Tclose);
    return st;
}

/* The checks after H5Fopen: root attributes, /tensors, each dataset. */
static rf_status_t open_checks(rf_h5_file_t *f, rf_st_header_t *hdr, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    const char *path = f->path;
    char *fmt = NULL;
    hid_t g = -1;
    const char **names = NULL;
    RF_CHECK_GOTO(attr_string(f->file, "format", path, "root group", 256, &fmt, err), st, out);
    if (fmt == NULL) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: no root attribute format: not a refit checkpoint (format = \"%s\")",
                        path, RF_H5_FORMAT);
        goto out;
    }
    if (strcmp(fmt, RF_H5_FORMAT) != 0) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: root attribute format is \"%.60s\", not \"%s\"", path, fmt,
                        RF_H5_FORMAT);
        goto out;
    }
    bool found = false;
    int64_t ver = 0;
    RF_CHECK_GOTO(attr_int(f->file, "format_version", path, &found, &ver, err), st, out);
    if (!found) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: no root attribute format_version (this refit "
                        "reads version %d)", path, RF_H5_FORMAT_VERSION);
        goto out;
    }
    if (ver != RF_H5_FORMAT_VERSION) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: format_version is %lld, this refit reads version %d", path,
                        (long long)ver, RF_H5_FORMAT_VERSION);
        goto out;
    }
    RF_CHECK_GOTO(attr_string(f->file, "config", path, "root group", RF_H5_MAX_CONFIG_BYTES,
                              &f->config, err),
                  st, out);
    htri_t has = H5Lexists(f->file, RF_H5_GROUP, H5P_DEFAULT);
    if (has <= 0 || (g = H5Gopen2(f->file, RF_H5_GROUP, H5P_DEFAULT)) < 0) {
        st = h5_err(err, RF_ERR_PARSE, "%s: no group %s (one dataset per tensor)", path,
                    RF_H5_GROUP);
        goto out;
    }
    H5G_info_t gi;
    if (H5Gget_info(g, &gi) < 0) {
        st = h5_err(err, RF_ERR_PARSE, "%s: cannot list %s", path, RF_H5_GROUP);
        goto out;
    }
    if (gi.nlinks > RF_H5_MAX_TENSORS) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: %s holds %llu objects, more than %u", path,
                        RF_H5_GROUP, (unsigned long long)gi.nlinks, RF_H5_MAX_TENSORS);
        goto out;
    }
    size_t n = (size_t)gi.nlinks;
    hdr->entries = calloc(n ? n : 1, sizeof(*hdr->entries));
    f->dsets = malloc((n ? n : 1) * sizeof(hid_t));
    f->types = malloc((n ? n : 1) * sizeof(hid_t));
    f->ents = calloc(n ? n : 1, sizeof(*f->ents));
    names = malloc((n ? n : 1) * sizeof(*names));
    if (hdr->entries == NULL || f->ents == NULL || f->dsets == NULL || f->types == NULL || names == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory for %zu tensors", path, n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char nm[MAX_NAME + 1];
        ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)i, nm,
                                         sizeof(nm), H5P_DEFAULT);
        if (len < 0) {
            st = h5_err(err, RF_ERR_PARSE, "%s: cannot read the name of object %zu of %s", path,
                        i, RF_H5_GROUP);
            goto out;
        }
        if ((size_t)len > MAX_NAME) {
            st = rf_err_set(err, RF_ERR_PARSE, "%s: object %zu of %s has a %zd-byte name, "
                            "more than %d", path, i, RF_H5_GROUP, len, MAX_NAME);
            goto out;
        }
        H5L_info_t li;
        if (H5Lget_info(g, nm, &li, H5P_DEFAULT) < 0) {
            st = h5_err(err, RF_ERR_PARSE, "%s: " RF_H5_GROUP "/" NAME_FMT ": cannot read link",
                        path, nm);
            goto out;
        }
        if (li.type != H5L_TYPE_HARD) {
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: " RF_H5_GROUP "/" NAME_FMT " is a soft or external link: "
                            "refit reads datasets stored in the file only",
                            path, nm);
            goto out;
        }
        hid_t o = H5Oopen(g, nm, H5P_DEFAULT);
        if (o < 0) {
            st = h5_err(err, RF_ERR_PARSE, "%s: cannot open " RF_H5_GROUP "/" NAME_FMT, path, nm);
            goto out;
        }
        if (H5Iget_type(o) != H5I_DATASET) {
            H5Oclose(o);
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: " RF_H5_GROUP "/" NAME_FMT " is not a dataset (%s holds one "
                            "dataset per tensor, no groups)",
                            path, nm, RF_H5_GROUP);
            goto out;
        }
        rf_st_entry_t *e = &hdr->entries[i];
        f->dsets[i] = o;
        f->types[i] = -1;
        f->n = i + 1;
        if ((e->name = strdup(nm)) == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        hdr->count = i + 1;
        RF_CHECK_GOTO(check_dataset(f, o, nm, e, &f->types[i], err), st, out);
        names[i] = e->name;
        hdr->data_bytes += e->nbytes;
        f->ents[i] = *e;
        if ((f->ents[i].name = strdup(nm)) == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
    }
    hdr->names_ = calloc(1, sizeof(rf_name_table_t));
    size_t dup = 0;
    if (hdr->names_ == NULL || rf_name_table_build(hdr->names_, names, n, &dup) != RF_OK) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: cannot index %zu tensor names", path, n);
        goto out;
    }
out:
    free(names);
    free(fmt);
    close_id(&g, H5Gclose);
    return st;
}

/* comm: MPI_COMM_NULL for the sec2 driver (or the core driver of an image), else the MPI-IO
 * driver over comm (parallel libhdf5 only; the caller checked). */
static rf_status_t open_any(const char *path, const void *img, size_t len, MPI_Comm comm,
                            rf_h5_file_t **f_p, rf_st_header_t *hdr, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    hid_t fapl = -1;
    memset(hdr, 0, sizeof(*hdr));
    rf_h5_file_t *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->path = strdup(path)) == NULL) {
        free(f);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    }
    f->file = -1;
    if (img == NULL) {
        struct stat sb;
        if (stat(path, &sb) != 0) {
            st = rf_err_set(err, RF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
            goto fail;
        }
        if (!S_ISREG(sb.st_mode)) {
            st = rf_err_set(err, RF_ERR_IO, "%s: not a regular file", path);
            goto fail;
        }
        f->size = (uint64_t)sb.st_size;
        htri_t is = H5Fis_hdf5(path);
        if (is <= 0) {
            H5Eclear2(H5E_DEFAULT);
            st = rf_err_set(err, RF_ERR_PARSE, "%s: not an HDF5 file (no HDF5 signature)", path);
            goto fail;
        }
        fapl = H5Pcreate(H5P_FILE_ACCESS);
#ifdef H5_HAVE_PARALLEL
        if (fapl >= 0 && comm != MPI_COMM_NULL) {
            if (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0) {
                st = h5_err(err, RF_ERR_IO, "%s: cannot set up the MPI-IO driver", path);
                goto fail;
            }
            f->mpio = true;
        }
#else
        (void)comm;
#endif
    } else {
        f->size = len;
        fapl = H5Pcreate(H5P_FILE_ACCESS);
        if (fapl < 0 || H5Pset_fapl_core(fapl, 1 << 20, 0) < 0 ||
            H5Pset_file_image(fapl, (void *)img, len) < 0) {
            st = h5_err(err, RF_ERR_PARSE, "%s: cannot set up the file image", path);
            goto fail;
        }
    }
    /* close the file as soon as refit closes it, whatever was left open */
    if (fapl < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
        st = h5_err(err, RF_ERR_NOMEM, "%s: cannot create a file access list", path);
        goto fail;
    }
    f->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (f->file < 0) {
        st = h5_err(err, RF_ERR_PARSE, "%s: not a readable HDF5 file (truncated or damaged?)",
                    path);
        goto fail;
    }
    RF_CHECK_GOTO(open_checks(f, hdr, err), st, fail);
    close_id(&fapl, H5Pclose);
    *f_p = f;
    return RF_OK;
fail:
    close_id(&fapl, H5Pclose);
    rf_st_header_free(hdr);
    file_free(f);
    H5Eclear2(H5E_DEFAULT);
    return st;
}

rf_status_t rf_h5_open(const char *path, rf_h5_file_t **f_p, rf_st_header_t *hdr,
                       rf_err_t *err)
{
    lock();
    rf_status_t st = open_any(path, NULL, 0, MPI_COMM_NULL, f_p, hdr, err);
    unlock();
    return st;
}

rf_status_t rf_h5_open_image(const void *buf, size_t len, const char *name, rf_h5_file_t **f_p,
                             rf_st_header_t *hdr, rf_err_t *err)
{
    if (buf == NULL || len < 8) {
        memset(hdr, 0, sizeof(*hdr));
        return rf_err_set(err, RF_ERR_PARSE, "%s: not an HDF5 file (%zu bytes)",
                          name ? name : "<image>", len);
    }
    lock();
    rf_status_t st = open_any(name ? name : "<image>", buf, len, MPI_COMM_NULL, f_p, hdr, err);
    unlock();
    return st;
}

void rf_h5_close(rf_h5_file_t *f)
{
    if (f == NULL)
        return;
    lock();
    file_free(f);
    unlock();
}

const char *rf_h5_config(const rf_h5_file_t *f)
{
    return f->config;
}

uint64_t rf_h5_size(const rf_h5_file_t *f)
{
    return f->size;
}

bool rf_h5_is_hdf5(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return false;
    unsigned char b[8];
    bool yes = false;
    /* the superblock sits at 0 or at 512 x 2^k when a user block precedes it */
    for (long off = 0; off <= (1L << 20) && !yes; off = off ? off * 2 : 512) {
        if (fseek(fp, off, SEEK_SET) != 0 || fread(b, 1, 8, fp) != 8)
            break;
        yes = memcmp(b, sig, 8) == 0;
    }
    fclose(fp);
    return yes;
}

/* A shard of one dataset as HDF5 selects it: n rows of w bytes (we elements) from row r0;
 * start / count the file hyperslab (rank >= 1). */
typedef struct shard {
    uint64_t n, w, we;
    hsize_t start[RF_ST_MAX_RANK], count[RF_ST_MAX_RANK];
} shard_t;

/* Checks rows [r0, r1) x row bytes [c0, c1) of e against its shape and the pitch, and fills
 * s; s->n or s->w 0 for an empty range. */
static rf_status_t shard_of(const rf_h5_file_t *f, const rf_st_entry_t *e, uint64_t r0,
                            uint64_t r1, uint64_t c0, uint64_t c1, size_t pitch, shard_t *s,
                            rf_err_t *err)
{
    uint64_t es = rf_dtype_size(e->dtype);
    uint64_t rows = e->ndim == 0 ? 1 : e->shape[0];
    uint64_t row_bytes = rows ? e->nbytes / rows : 0;
    memset(s, 0, sizeof(*s));
    if (r0 > r1 || r1 > rows || c0 > c1 || c1 > row_bytes)
        return rf_err_set(err, RF_ERR_INVALID, "%s: tensor " NAME_FMT " read outside its shape",
                          f->path, e->name);
    uint64_t n = r1 - r0, w = c1 - c0;
    if (n == 0 || w == 0)
        return RF_OK;
    if (c0 % es != 0 || c1 % es != 0 || (n > 1 && pitch < w))
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s: tensor " NAME_FMT " row bytes [%llu, %llu) are not whole %llu-byte "
                          "elements, or the pitch %zu is too small",
                          f->path, e->name, (unsigned long long)c0, (unsigned long long)c1,
                          (unsigned long long)es, pitch);
    s->start[0] = r0;
    s->count[0] = n;
    for (int k = 1; k < e->ndim; k++)
        s->count[k] = e->shape[k];
    if (e->ndim >= 2 && w != row_bytes) {
        /* a cut inside the row: along dim 1, in whole dim-1 slices */
        uint64_t slice = row_bytes / e->shape[1];
        if (c0 % slice != 0 || c1 % slice != 0)
            return rf_err_set(err, RF_ERR_INVALID,
                              "%s: tensor " NAME_FMT " of rank %d: row bytes [%llu, %llu) do not "
                              "cut whole dim-1 slices of %llu bytes",
                              f->path, e->name, e->ndim, (unsigned long long)c0,
                              (unsigned long long)c1, (unsigned long long)slice);
        s->start[1] = c0 / slice;
        s->count[1] = w / slice;
    }
    s->n = n;
    s->w = w;
    s->we = w / es;
    return RF_OK;
}

static rf_status_t read_impl(rf_h5_file_t *f, size_t i, const rf_st_entry_t *e, uint64_t r0,
                             uint64_t r1, uint64_t c0, uint64_t c1, void *dst, size_t pitch,
                             rf_err_t *err)
{
    rf_status_t st = RF_OK;
    hid_t d = f->dsets[i], t = f->types[i], fs = -1, ms = -1;
    uint64_t es = rf_dtype_size(e->dtype);
    shard_t s;
    RF_CHECK(shard_of(f, e, r0, r1, c0, c1, pitch, &s, err));
    uint64_t n = s.n, w = s.w, we = s.we;
    if (n == 0 || w == 0)
        return RF_OK;
    if (e->ndim == 0) {
        if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
            return h5_err(err, RF_ERR_IO, "%s: reading tensor " NAME_FMT, f->path, e->name);
        return RF_OK;
    }
    fs = H5Dget_space(d);
    if (fs < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, s.start, NULL, s.count, NULL) < 0) {
        st = h5_err(err, RF_ERR_IO, "%s: tensor " NAME_FMT ": cannot select its shard", f->path,
                    e->name);
        goto out;
    }
    if (n == 1 || pitch == w) {
        hsize_t m = (hsize_t)(n * we);
        ms = H5Screate_simple(1, &m, NULL);
        if (ms < 0 || H5Dread(d, t, ms, fs, H5P_DEFAULT, dst) < 0)
            st = h5_err(err, RF_ERR_IO, "%s: reading rows [%llu, %llu) of tensor " NAME_FMT,
                        f->path, (unsigned long long)r0, (unsigned long long)r1, e->name);
    } else if (pitch % es == 0) {
        /* the destination's pitch as a 2-D memory space: still one read */
        hsize_t md[2] = {(hsize_t)n, (hsize_t)(pitch / es)}, ms0[2] = {0, 0},
                mc[2] = {(hsize_t)n, (hsize_t)we};
        ms = H5Screate_simple(2, md, NULL);
        if (ms < 0 || H5Sselect_hyperslab(ms, H5S_SELECT_SET, ms0, NULL, mc, NULL) < 0 ||
            H5Dread(d, t, ms, fs, H5P_DEFAULT, dst) < 0)
            st = h5_err(err, RF_ERR_IO, "%s: reading rows [%llu, %llu) of tensor " NAME_FMT,
                        f->path, (unsigned long long)r0, (unsigned long long)r1, e->name);
    } else {
        /* a pitch of no whole elements: row by row */
        hsize_t m = (hsize_t)we;
        ms = H5Screate_simple(1, &m, NULL);
        for (uint64_t r = 0; r < n && st == RF_OK; r++) {
            s.start[0] = r0 + r;
            s.count[0] = 1;
            if (ms < 0 ||
                H5Sselect_hyperslab(fs, H5S_SELECT_SET, s.start, NULL, s.count, NULL) < 0 ||
                H5Dread(d, t, ms, fs, H5P_DEFAULT, (char *)dst + r * pitch) < 0)
                st = h5_err(err, RF_ERR_IO, "%s: reading row %llu of tensor " NAME_FMT, f->path,
                            (unsigned long long)(r0 + r), e->name);
        }
    }
out:
    close_id(&ms, H5Sclose);
    close_id(&fs, H5Sclose);
    return st;
}

rf_status_t rf_h5_read(rf_h5_file_t *f, size_t i, uint64_t row_begin, uint64_t row_end,
                       uint64_t col_byte_begin, uint64_t col_byte_end, void *dst,
                       size_t dst_pitch, rf_err_t *err)
{
    if (f == NULL || i >= f->n || dst == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "rf_h5_read: NULL file or destination, or index");
    lock();
    rf_status_t st = read_impl(f, i, &f->ents[i], row_begin, row_end, col_byte_begin,
                               col_byte_end, dst, dst_pitch, err);
    unlock();
    return st;
}

/* ---- collective reads (MPI-IO) --------------------------------------------------------- */

bool rf_h5_is_mpio(const rf_h5_file_t *f)
{
    return f != NULL && f->mpio;
}

void rf_h5_collective_counts(const rf_h5_file_t *f, uint64_t *collective, uint64_t *independent)
{
    *collective = f != NULL ? f->coll_reads : 0;
    *independent = f != NULL ? f->indep_reads : 0;
}

rf_status_t rf_h5_open_mpio(const char *path, MPI_Comm comm, rf_h5_file_t **f_p,
                            rf_st_header_t *hdr, rf_err_t *err)
{
#ifdef H5_HAVE_PARALLEL
    if (comm == MPI_COMM_NULL)
        return rf_err_set(err, RF_ERR_INVALID, "%s: MPI-IO open without a communicator", path);
    lock();
    rf_status_t st = open_any(path, NULL, 0, comm, f_p, hdr, err);
    unlock();
    return st;
#else
    (void)comm;
    (void)f_p;
    memset(hdr, 0, sizeof(*hdr));
    return rf_err_set(err, RF_ERR_UNSUPPORTED,
                      "%s: libhdf5 %s has no MPI-IO driver (serial build): reads are "
                      "independent", path, rf_h5_version());
#endif
}

#ifdef H5_HAVE_PARALLEL
/*
 * One collective H5Dread of entry i: this rank's shard, or nothing when its range is empty
 * or refused (the refusal is returned after the read, so the peers are never left inside
 * MPI-IO). The memory space is contiguous (or the pitch as a 2-D space); a pitch of no whole
 * elements reads through a packed buffer, never row by row: every rank makes one call.
 */
static rf_status_t read_all_impl(rf_h5_file_t *f, size_t i, const rf_st_entry_t *e, uint64_t r0,
                                 uint64_t r1, uint64_t c0, uint64_t c1, void *dst, size_t pitch,
                                 rf_err_t *err)
{
    hid_t d = f->dsets[i], t = f->types[i], fs = -1, ms = -1, dxpl = -1;
    uint64_t es = rf_dtype_size(e->dtype);
    char *tmp = NULL, *buf = dst, dummy[16];
    shard_t s;
    rf_status_t st = shard_of(f, e, r0, r1, c0, c1, pitch, &s, err);
    bool mine = st == RF_OK && s.n > 0 && s.w > 0;
    if (mine && dst == NULL) {
        st = rf_err_set(err, RF_ERR_INVALID, "%s: tensor " NAME_FMT ": NULL destination",
                        f->path, e->name);
        mine = false;
    }
    bool packed = mine && s.n > 1 && pitch != s.w && pitch % es != 0;
    if (packed && (tmp = malloc((size_t)(s.n * s.w))) == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", f->path);
        mine = packed = false;
    }
    fs = H5Dget_space(d);
    dxpl = H5Pcreate(H5P_DATASET_XFER);
    bool ok = fs >= 0 && dxpl >= 0 && H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) >= 0;
    if (ok && mine && e->ndim == 0) {
        ms = H5Screate(H5S_SCALAR); /* the file space selects its one element already */
    } else if (ok && mine) {
        bool sel = H5Sselect_hyperslab(fs, H5S_SELECT_SET, s.start, NULL, s.count, NULL) >= 0;
        if (s.n == 1 || pitch == s.w || packed) {
            hsize_t m = (hsize_t)(s.n * s.we);
            ms = H5Screate_simple(1, &m, NULL);
        } else {
            hsize_t md[2] = {(hsize_t)s.n, (hsize_t)(pitch / es)}, m0[2] = {0, 0},
                    mc[2] = {(hsize_t)s.n, (hsize_t)s.we};
            ms = H5Screate_simple(2, md, NULL);
            sel = sel && ms >= 0 &&
                  H5Sselect_hyperslab(ms, H5S_SELECT_SET, m0, NULL, mc, NULL) >= 0;
        }
        if (!sel || ms < 0) {
            st = h5_err(err, RF_ERR_IO, "%s: tensor " NAME_FMT ": cannot select its shard",
                        f->path, e->name);
            close_id(&ms, H5Sclose);
            mine = packed = false;
        }
    }
    if (ok && !mine) {
        /* nothing of this dataset here (or a refused range): a read of no elements */
        hsize_t one = 1;
        ms = H5Screate_simple(1, &one, NULL);
        ok = ms >= 0 && H5Sselect_none(fs) >= 0 && H5Sselect_none(ms) >= 0;
        buf = dummy; /* HDF5 wants a buffer even for no elements */
    }
    if (packed)
        buf = tmp;
    if (!ok) {
        /* HDF5 could not build even an empty selection (out of resources): the peers' read
         * of this dataset may then wait on this rank; nothing else is safe */
        if (st == RF_OK)
            st = h5_err(err, RF_ERR_IO, "%s: tensor " NAME_FMT ": cannot set up a collective "
                        "read", f->path, e->name);
    } else {
        herr_t rc = H5Dread(d, t, ms, fs, dxpl, buf);
        H5D_mpio_actual_io_mode_t mode = H5D_MPIO_NO_COLLECTIVE;
        if (rc < 0 && st == RF_OK)
            st = h5_err(err, RF_ERR_IO,
                        "%s: collective read of rows [%llu, %llu) of tensor " NAME_FMT, f->path,
                        (unsigned long long)r0, (unsigned long long)r1, e->name);
        else if (rc >= 0 && H5Pget_mpio_actual_io_mode(dxpl, &mode) >= 0)
            *(mode == H5D_MPIO_NO_COLLECTIVE ? &f->indep_reads : &f->coll_reads) += 1;
        if (rc >= 0 && st == RF_OK && packed)
            for (uint64_t r = 0; r < s.n; r++)
                memcpy((char *)dst + r * pitch, tmp + r * s.w, (size_t)s.w);
    }
    H5Eclear2(H5E_DEFAULT);
    free(tmp);
    close_id(&dxpl, H5Pclose);
    close_id(&ms, H5Sclose);
    close_id(&fs, H5Sclose);
    return st;
}
#endif

rf_status_t rf_h5_read_all(rf_h5_file_t *f, size_t i, uint64_t row_begin, uint64_t row_end,
                           uint64_t col_byte_begin, uint64_t col_byte_end, void *dst,
                           size_t dst_pitch, rf_err_t *err)
{
    if (f == NULL || i >= f->n)
        return rf_err_set(err, RF_ERR_INVALID, "rf_h5_read_all: NULL file or bad index");
    if (!f->mpio) {
        if (row_begin == row_end || col_byte_begin == col_byte_end)
            return RF_OK;
        return rf_h5_read(f, i, row_begin, row_end, col_byte_begin, col_byte_end, dst,
                          dst_pitch, err);
    }
#ifdef H5_HAVE_PARALLEL
    if (f->ents[i].nbytes == 0)
        return RF_OK; /* every rank alike: the header is the same everywhere */
    lock();
    rf_status_t st = read_all_impl(f, i, &f->ents[i], row_begin, row_end, col_byte_begin,
                                   col_byte_end, dst, dst_pitch, err);
    unlock();
    return st;
#else
    return rf_err_set(err, RF_ERR_INTERNAL, "%s: MPI-IO file in a serial build", f->path);
#endif
}

/* ---- writer ---------------------------------------------------------------------------- */

static rf_status_t write_str_attr(hid_t obj, const char *name, const char *val,
                                  const char *path, rf_err_t *err)
{
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR), a = -1;
    size_t len = strlen(val);
    rf_status_t st = RF_OK;
    if (t < 0 || s < 0 || H5Tset_size(t, len ? len : 1) < 0 ||
        H5Tset_strpad(t, len ? H5T_STR_NULLPAD : H5T_STR_NULLTERM) < 0 ||
        (a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
        H5Awrite(a, t, len ? val : "") < 0)
        st = h5_err(err, RF_ERR_IO, "%s: cannot write attribute %s", path, name);
    close_id(&a, H5Aclose);
    close_id(&s, H5Sclose);
    close_id(&t, H5Tclose);
    return st;
}

static void writer_free(rf_h5_writer_t *w)
{
    close_id(&w->type, H5Tclose);
    close_id(&w->dset, H5Dclose);
    close_id(&w->group, H5Gclose);
    close_id(&w->file, H5Fclose);
    H5Eclear2(H5E_DEFAULT);
    free(w->path);
    free(w);
}

rf_status_t rf_h5_writer_create(const char *path, const char *config_json, bool overwrite,
                                rf_h5_writer_t **w_p, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    hid_t fapl = -1, s = -1, a = -1;
    rf_h5_writer_t *w = calloc(1, sizeof(*w));
    if (w == NULL || (w->path = strdup(path)) == NULL) {
        free(w);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    }
    w->file = w->group = w->dset = w->type = -1;
    lock();
    struct stat sb;
    if (!overwrite && stat(path, &sb) == 0) {
        st = rf_err_set(err, RF_ERR_IO, "%s: exists (not overwritten)", path);
        goto fail;
    }
    /* 1.8 object headers and up: dense attribute storage, so a config of any size fits */
    fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0 ||
        (w->file = H5Fcreate(path, overwrite ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT,
                             fapl)) < 0) {
        st = h5_err(err, RF_ERR_IO, "%s: cannot create", path);
        goto fail;
    }
    RF_CHECK_GOTO(write_str_attr(w->file, "format", RF_H5_FORMAT, path, err), st, fail);
    int64_t ver = RF_H5_FORMAT_VERSION;
    s = H5Screate(H5S_SCALAR);
    if (s < 0 ||
        (a = H5Acreate2(w->file, "format_version", H5T_STD_I64LE, s, H5P_DEFAULT,
                        H5P_DEFAULT)) < 0 ||
        H5Awrite(a, H5T_NATIVE_INT64, &ver) < 0) {
        st = h5_err(err, RF_ERR_IO, "%s: cannot write attribute format_version", path);
        goto fail;
    }
    if (config_json != NULL)
        RF_CHECK_GOTO(write_str_attr(w->file, "config", config_json, path, err), st, fail);
    w->group = H5Gcreate2(w->file, RF_H5_GROUP, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (w->group < 0) {
        st = h5_err(err, RF_ERR_IO, "%s: cannot create group %s", path, RF_H5_GROUP);
        goto fail;
    }
    close_id(&a, H5Aclose);
    close_id(&s, H5Sclose);
    close_id(&fapl, H5Pclose);
    unlock();
    *w_p = w;
    return RF_OK;
fail:
    close_id(&a, H5Aclose);
    close_id(&s, H5Sclose);
    close_id(&fapl, H5Pclose);
    bool created = w->file >= 0;
    writer_free(w);
    if (created)
        unlink(path);
    unlock();
    return st;
}

/* Whether the tensor being written has all its rows. */
static bool writer_complete(const rf_h5_writer_t *w)
{
    return w->dset < 0 || w->next_row == w->rows || w->row_bytes == 0;
}

static rf_status_t end_tensor(rf_h5_writer_t *w, rf_err_t *err)
{
    if (!writer_complete(w))
        return rf_err_set(err, RF_ERR_STATE, "%s: tensor " NAME_FMT " has %llu of %llu rows "
                          "written", w->path, w->name, (unsigned long long)w->next_row,
                          (unsigned long long)w->rows);
    close_id(&w->type, H5Tclose);
    close_id(&w->dset, H5Dclose);
    return RF_OK;
}

rf_status_t rf_h5_writer_begin(rf_h5_writer_t *w, const char *name, rf_dtype_t dtype, int ndim,
                               const uint64_t shape[RF_ST_MAX_RANK], rf_err_t *err)
{
    rf_status_t st = RF_OK;
    hid_t s = -1, dcpl = -1;
    lock();
    RF_CHECK_GOTO(end_tensor(w, err), st, out);
    if (name == NULL || name[0] == '\0' || strchr(name, '/') != NULL || strcmp(name, ".") == 0 ||
        strlen(name) > MAX_NAME) {
        st = rf_err_set(err, RF_ERR_INVALID, "%s: tensor name " NAME_FMT " cannot be a dataset "
                        "name (empty, \".\", a '/' or too long)", w->path, name ? name : "");
        goto out;
    }
    if (dtype < 0 || dtype >= RF_DTYPE_COUNT || ndim < 0 || ndim > RF_ST_MAX_RANK) {
        st = rf_err_set(err, RF_ERR_INVALID, "%s: tensor " NAME_FMT " bad dtype or rank %d",
                        w->path, name, ndim);
        goto out;
    }
    uint64_t nb = rf_dtype_size(dtype);
    hsize_t dims[RF_ST_MAX_RANK];
    for (int k = 0; k < ndim; k++) {
        dims[k] = shape[k];
        if (__builtin_mul_overflow(nb, shape[k], &nb) || nb > (uint64_t)INT64_MAX) {
            st = rf_err_set(err, RF_ERR_INVALID, "%s: tensor " NAME_FMT " size overflows",
                            w->path, name);
            goto out;
        }
    }
    snprintf(w->name, sizeof(w->name), "%s", name);
    w->ndim = ndim;
    memset(w->shape, 0, sizeof(w->shape));
    memcpy(w->shape, shape, (size_t)ndim * sizeof(uint64_t));
    w->rows = ndim == 0 ? 1 : shape[0];
    w->row_bytes = w->rows ? nb / w->rows : 0;
    w->next_row = 0;
    w->type = h5_type_of(dtype);
    s = ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(ndim, dims, NULL);
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (w->type < 0 || s < 0 || dcpl < 0 || H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0 ||
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0 ||
        (w->dset = H5Dcreate2(w->group, name, w->type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) {
        st = h5_err(err, RF_ERR_IO, "%s: cannot create dataset " RF_H5_GROUP "/" NAME_FMT,
                    w->path, name);
        goto out;
    }
    RF_CHECK_GOTO(write_str_attr(w->dset, "dtype", rf_dtype_name(dtype), w->path, err), st,
                  out);
out:
    close_id(&dcpl, H5Pclose);
    close_id(&s, H5Sclose);
    unlock();
    return st;
}

rf_status_t rf_h5_writer_rows(rf_h5_writer_t *w, uint64_t r0, uint64_t r1, const void *data,
                              rf_err_t *err)
{
    rf_status_t st = RF_OK;
    hid_t fs = -1, ms = -1;
    if (w->dset < 0)
        return rf_err_set(err, RF_ERR_STATE, "%s: rows written before any tensor", w->path);
    if (r0 != w->next_row || r1 < r0 || r1 > w->rows)
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s: tensor " NAME_FMT ": rows [%llu, %llu) written, next is %llu of "
                          "%llu",
                          w->path, w->name, (unsigned long long)r0, (unsigned long long)r1,
                          (unsigned long long)w->next_row, (unsigned long long)w->rows);
    if (r1 == r0 || w->row_bytes == 0) {
        w->next_row = r1;
        return RF_OK;
    }
    if (data == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "%s: tensor " NAME_FMT ": NULL data", w->path,
                          w->name);
    lock();
    if (w->ndim == 0) {
        if (H5Dwrite(w->dset, w->type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
            st = h5_err(err, RF_ERR_IO, "%s: writing tensor " NAME_FMT, w->path, w->name);
    } else {
        hsize_t start[RF_ST_MAX_RANK] = {0}, count[RF_ST_MAX_RANK];
        hsize_t m = (hsize_t)((r1 - r0) * (w->row_bytes / H5Tget_size(w->type)));
        start[0] = r0;
        count[0] = r1 - r0;
        for (int k = 1; k < w->ndim; k++)
            count[k] = w->shape[k];
        fs = H5Dget_space(w->dset);
        ms = H5Screate_simple(1, &m, NULL);
        if (fs < 0 || ms < 0 ||
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dwrite(w->dset, w->type, ms, fs, H5P_DEFAULT, data) < 0)
            st = h5_err(err, RF_ERR_IO, "%s: writing rows [%llu, %llu) of tensor " NAME_FMT,
                        w->path, (unsigned long long)r0, (unsigned long long)r1, w->name);
    }
    close_id(&ms, H5Sclose);
    close_id(&fs, H5Sclose);
    unlock();
    if (st == RF_OK)
        w->next_row = r1;
    return st;
}

rf_status_t rf_h5_writer_finish(rf_h5_writer_t *w, rf_err_t *err)
{
    lock();
    rf_status_t st = end_tensor(w, err);
    if (st == RF_OK) {
        close_id(&w->group, H5Gclose);
        herr_t rc = H5Fclose(w->file);
        w->file = -1;
        if (rc < 0)
            st = h5_err(err, RF_ERR_IO, "%s: closing the file failed", w->path);
    }
    if (st != RF_OK) {
        char *p = w->path;
        w->path = NULL;
        writer_free(w);
        unlink(p); /* never leave a half-written file that looks valid */
        free(p);
    } else {
        writer_free(w);
    }
    unlock();
    return st;
}

void rf_h5_writer_abort(rf_h5_writer_t *w)
{
    if (w == NULL)
        return;
    lock();
    char *p = w->path;
    w->path = NULL;
    writer_free(w);
    if (p != NULL)
        unlink(p);
    free(p);
    unlock();
}
