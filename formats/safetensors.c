/*
 * refit formats: safetensors reader and writer, and checkpoint directories.
 *
 * The header is parsed with jansson (UTF-8 checked, duplicate keys refused) and then checked
 * field by field against DESIGN.md section 11; every size is computed in uint64 with
 * overflow checks before it is trusted. Reads go through pread, looping on short reads and
 * EINTR, and count the bytes they move.
 */
#include "refit/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats_names_int.h"
#include "refit/hdf5.h"
#include "refit/model.h"

struct rf_st_file {
    char *path;
    int fd;
    uint64_t size;
    uint64_t header_bytes_read;
    rf_st_header_t header;
    rf_h5_file_t *h5; /* an HDF5 checkpoint: reads go through it (fd is -1) */
};

struct rf_ckpt {
    char *dir;
    size_t nfiles;
    rf_st_file_t **files;          /* owned, sorted by path */
    size_t count;
    const rf_st_entry_t **entries; /* borrowed from files' headers, sorted by name */
    rf_name_table_t names;
    _Atomic uint64_t bytes_read;
    _Atomic uint64_t header_bytes_read;
    rf_h5_file_t *h5_all;  /* the MPI-IO handle between collective begin and end, or NULL */
    uint64_t coll_reads, indep_reads; /* of handles closed by rf_ckpt_collective_end */
};

/* Tensor names in messages: long enough to identify, short enough to leave room. */
#define NAME_FMT "\"%.200s\""

static const char *pfe(const char *path)
{
    return path != NULL ? path : "<buffer>";
}

/* ---- header parsing ------------------------------------------------------------------ */

static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* The dtype in safetensors spelling only (rf_dtype_parse also takes torch spellings). */
static rf_dtype_t st_dtype(const char *s)
{
    rf_dtype_t dt = rf_dtype_parse(s);
    if (dt == RF_DTYPE_INVALID || strcmp(rf_dtype_name(dt), s) != 0)
        return RF_DTYPE_INVALID;
    return dt;
}

/* Reads a JSON non-negative integer into *v; false if not an integer or negative. */
static bool json_u64(const json_t *j, uint64_t *v)
{
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return false;
    *v = (uint64_t)json_integer_value(j);
    return true;
}

/*
 * jansson's duplicate-key error stops just after the second copy of the key; recover the
 * key (printable ASCII only, escapes kept) so the message can name it.
 */
static void dup_key_name(const char *json, size_t len, size_t pos, char *out, size_t outsz)
{
    out[0] = '\0';
    if (pos > len)
        pos = len;
    size_t q = pos;
    while (q > 0 && json[q - 1] != '"')
        q--;
    if (q == 0)
        return;
    size_t close = q - 1, open = close;
    while (open > 0) {
        open--;
        if (json[open] == '"') {
            size_t bs = 0;
            while (open - bs > 0 && json[open - bs - 1] == '\\')
                bs++;
            if (bs % 2 == 0)
                break;
        }
    }
    if (json[open] != '"' || open == close)
        return;
    size_t k = 0;
    for (size_t i = open + 1; i < close && k + 1 < outsz; i++)
        out[k++] = (json[i] >= 0x20 && json[i] < 0x7f) ? json[i] : '?';
    out[k] = '\0';
}

static int cmp_entry_offset(const void *a, const void *b)
{
    const rf_st_entry_t *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

void rf_st_header_free(rf_st_header_t *h)
{
    if (h == NULL)
        return;
    for (size_t i = 0; i < h->count; i++)
        free((char *)h->entries[i].name);
    free(h->entries);
    for (size_t i = 0; i < h->n_meta; i++) {
        free(h->meta_keys[i]);
        free(h->meta_values[i]);
    }
    free(h->meta_keys);
    free(h->meta_values);
    if (h->names_ != NULL) {
        rf_name_table_free(h->names_);
        free(h->names_);
    }
    memset(h, 0, sizeof(*h));
}

static rf_status_t parse_metadata(const json_t *meta, const char *path, rf_st_header_t *h,
                                  rf_err_t *err)
{
    if (!json_is_object(meta))
        return rf_err_set(err, RF_ERR_PARSE, "%s: __metadata__ is not a json object",
                          pfe(path));
    size_t n = json_object_size(meta);
    h->meta_keys = calloc(n ? n : 1, sizeof(char *));
    h->meta_values = calloc(n ? n : 1, sizeof(char *));
    if (h->meta_keys == NULL || h->meta_values == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory for __metadata__", pfe(path));
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)meta, key, val) {
        if (!json_is_string(val))
            return rf_err_set(err, RF_ERR_PARSE,
                              "%s: __metadata__ value of key " NAME_FMT " is not a string",
                              pfe(path), key);
        h->meta_keys[h->n_meta] = strdup(key);
        h->meta_values[h->n_meta] = strdup(json_string_value(val));
        h->n_meta++;
        if (h->meta_keys[h->n_meta - 1] == NULL || h->meta_values[h->n_meta - 1] == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory for __metadata__",
                              pfe(path));
    }
    return RF_OK;
}

/* Parses one tensor object into e (name already set); data offsets relative in e->offset. */
static rf_status_t parse_entry(const char *path, const char *name, const json_t *obj,
                               rf_st_entry_t *e, rf_err_t *err)
{
    if (!json_is_object(obj))
        return rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " is not a json object",
                          pfe(path), name);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 &&
            strcmp(key, "data_offsets") != 0)
            return rf_err_set(err, RF_ERR_PARSE,
                              "%s: tensor " NAME_FMT " has unknown field " NAME_FMT, pfe(path),
                              name, key);
    }
    const json_t *jd = json_object_get(obj, "dtype");
    const json_t *js = json_object_get(obj, "shape");
    const json_t *jo = json_object_get(obj, "data_offsets");
    if (jd == NULL || js == NULL || jo == NULL)
        return rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " has no %s field",
                          pfe(path), name,
                          jd == NULL ? "dtype" : js == NULL ? "shape" : "data_offsets");
    if (!json_is_string(jd))
        return rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " dtype is not a string",
                          pfe(path), name);
    e->dtype = st_dtype(json_string_value(jd));
    if (e->dtype == RF_DTYPE_INVALID)
        return rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " has unknown dtype %.40s",
                          pfe(path), name, json_string_value(jd));
    if (!json_is_array(js))
        return rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " shape is not an array",
                          pfe(path), name);
    size_t rank = json_array_size(js);
    if (rank > RF_ST_MAX_RANK)
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: tensor " NAME_FMT " shape has rank %zu, more than %d", pfe(path),
                          name, rank, RF_ST_MAX_RANK);
    e->ndim = (int)rank;
    uint64_t numel = 1;
    for (size_t d = 0; d < rank; d++) {
        if (!json_u64(json_array_get(js, d), &e->shape[d]))
            return rf_err_set(err, RF_ERR_PARSE,
                              "%s: tensor " NAME_FMT
                              " shape dim %zu is not a non-negative integer",
                              pfe(path), name, d);
        if (!mul_u64(numel, e->shape[d], &numel))
            return rf_err_set(err, RF_ERR_PARSE,
                              "%s: tensor " NAME_FMT " shape numel overflows 64 bits",
                              pfe(path), name);
    }
    uint64_t nbytes;
    if (!mul_u64(numel, rf_dtype_size(e->dtype), &nbytes))
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: tensor " NAME_FMT " size (numel x dtype size) overflows 64 bits",
                          pfe(path), name);
    uint64_t b, en;
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_u64(json_array_get(jo, 0), &b) ||
        !json_u64(json_array_get(jo, 1), &en))
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: tensor " NAME_FMT
                          " data_offsets is not two non-negative integers",
                          pfe(path), name);
    if (b > en)
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: tensor " NAME_FMT " data_offsets begin %llu > end %llu",
                          pfe(path), name, (unsigned long long)b, (unsigned long long)en);
    if (en - b != nbytes)
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: tensor " NAME_FMT " data_offsets span %llu bytes but numel x "
                          "dtype size is %llu",
                          pfe(path), name, (unsigned long long)(en - b),
                          (unsigned long long)nbytes);
    e->offset = b;
    e->nbytes = nbytes;
    return RF_OK;
}

rf_status_t rf_st_parse_header(const char *json, size_t json_len, uint64_t data_bytes,
                               const char *path, rf_st_header_t *out, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    json_error_t jerr;
    json_t *root = NULL;
    rf_st_header_t h;
    memset(&h, 0, sizeof(h));
    memset(out, 0, sizeof(*out));

    if (json_len > RF_ST_MAX_HEADER_BYTES)
        return rf_err_set(err, RF_ERR_PARSE, "%s: header length %zu exceeds %llu bytes",
                          pfe(path), json_len, RF_ST_MAX_HEADER_BYTES);
    if (json == NULL && json_len > 0)
        return rf_err_set(err, RF_ERR_INVALID, "%s: header buffer is NULL", pfe(path));
    /* jansson checks UTF-8 and refuses NUL in strings; top level must be array or object. */
    root = json_loadb(json != NULL ? json : "", json_len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        if (json_error_code(&jerr) == json_error_duplicate_key) {
            char key[128];
            dup_key_name(json, json_len, (size_t)jerr.position, key, sizeof(key));
            return rf_err_set(err, RF_ERR_PARSE,
                              "%s: header has duplicate key \"%s\" (line %d column %d)",
                              pfe(path), key, jerr.line, jerr.column);
        }
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: header is not valid json (line %d column %d: %s)", pfe(path),
                          jerr.line, jerr.column, jerr.text);
    }
    if (!json_is_object(root)) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: header is not a json object", pfe(path));
        goto out;
    }
    h.header_len = json_len;
    h.data_bytes = data_bytes;
    size_t n = json_object_size(root);
    h.entries = calloc(n ? n : 1, sizeof(*h.entries));
    if (h.entries == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory for %zu tensors", pfe(path), n);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            RF_CHECK_GOTO(parse_metadata(val, path, &h, err), st, out);
            continue;
        }
        rf_st_entry_t *e = &h.entries[h.count];
        e->name = strdup(key);
        if (e->name == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", pfe(path));
            goto out;
        }
        h.count++;
        RF_CHECK_GOTO(parse_entry(path, key, val, e, err), st, out);
    }

    /* Data order: sorted, contiguous from 0, ending at the end of the file. */
    qsort(h.entries, h.count, sizeof(*h.entries), cmp_entry_offset);
    uint64_t pos = 0;
    for (size_t i = 0; i < h.count; i++) {
        rf_st_entry_t *e = &h.entries[i];
        if (e->offset < pos) {
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: tensor " NAME_FMT " data_offsets [%llu, %llu) overlap tensor "
                            NAME_FMT " ending at %llu",
                            pfe(path), e->name, (unsigned long long)e->offset,
                            (unsigned long long)(e->offset + e->nbytes), h.entries[i - 1].name,
                            (unsigned long long)pos);
            goto out;
        }
        if (e->offset > pos) {
            if (i == 0)
                st = rf_err_set(err, RF_ERR_PARSE,
                                "%s: tensor " NAME_FMT " data_offsets begin at %llu, not 0 "
                                "(gap before the first tensor)",
                                pfe(path), e->name, (unsigned long long)e->offset);
            else
                st = rf_err_set(err, RF_ERR_PARSE,
                                "%s: gap of %llu bytes between tensor " NAME_FMT
                                " (ends at %llu) and tensor " NAME_FMT " data_offsets",
                                pfe(path), (unsigned long long)(e->offset - pos),
                                h.entries[i - 1].name, (unsigned long long)pos, e->name);
            goto out;
        }
        pos = e->offset + e->nbytes;
    }
    if (pos != data_bytes) {
        if (h.count > 0)
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: data_offsets end at %llu (tensor " NAME_FMT
                            ") but the file holds %llu data bytes after the header",
                            pfe(path), (unsigned long long)pos, h.entries[h.count - 1].name,
                            (unsigned long long)data_bytes);
        else
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: header names no tensors but the file holds %llu data bytes",
                            pfe(path), (unsigned long long)data_bytes);
        goto out;
    }
    for (size_t i = 0; i < h.count; i++)
        h.entries[i].offset += 8 + (uint64_t)json_len;

    /* Name table (duplicates were refused by jansson already). */
    const char **names = malloc((h.count ? h.count : 1) * sizeof(*names));
    h.names_ = calloc(1, sizeof(rf_name_table_t));
    if (names == NULL || h.names_ == NULL) {
        free(names);
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", pfe(path));
        goto out;
    }
    for (size_t i = 0; i < h.count; i++)
        names[i] = h.entries[i].name;
    size_t dup = 0;
    st = rf_name_table_build(h.names_, names, h.count, &dup);
    free(names);
    if (st != RF_OK) {
        st = rf_err_set(err, st, "%s: cannot index tensor names (tensor " NAME_FMT ")",
                        pfe(path), st == RF_ERR_INVALID ? h.entries[dup].name : "");
        goto out;
    }
    *out = h;
    memset(&h, 0, sizeof(h));
out:
    rf_st_header_free(&h);
    json_decref(root);
    return st;
}

const rf_st_entry_t *rf_st_header_find(const rf_st_header_t *h, const char *name)
{
    if (h == NULL || h->names_ == NULL)
        return NULL;
    size_t i = rf_name_table_find(h->names_, name);
    return i == SIZE_MAX ? NULL : &h->entries[i];
}

const char *rf_st_header_meta(const rf_st_header_t *h, const char *key)
{
    for (size_t i = 0; h != NULL && i < h->n_meta; i++)
        if (strcmp(h->meta_keys[i], key) == 0)
            return h->meta_values[i];
    return NULL;
}

uint64_t rf_st_entry_numel(const rf_st_entry_t *e)
{
    uint64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= e->shape[d]; /* cannot overflow: checked at parse */
    return n;
}

uint64_t rf_st_entry_rows(const rf_st_entry_t *e)
{
    return e->ndim == 0 ? 1 : e->shape[0];
}

uint64_t rf_st_entry_row_bytes(const rf_st_entry_t *e)
{
    uint64_t rows = rf_st_entry_rows(e);
    if (rows > 0)
        return e->nbytes / rows; /* exact: nbytes = rows x row bytes, checked at parse */
    /* No rows: the other dims may still multiply past 2^64 (shape [0, 2^40, 2^40]);
     * saturate, there are no bytes to read anyway. */
    uint64_t n = rf_dtype_size(e->dtype);
    for (int d = 1; d < e->ndim; d++)
        if (!mul_u64(n, e->shape[d], &n))
            return UINT64_MAX;
    return n;
}

/* ---- files ---------------------------------------------------------------------------- */

/* preads exactly len bytes at off; RF_ERR_IO on error or end of file. */
static rf_status_t pread_full(int fd, void *buf, uint64_t len, uint64_t off, const char *path,
                              const char *what, rf_err_t *err)
{
    char *p = buf;
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
        if (off > (uint64_t)INT64_MAX)
            return rf_err_set(err, RF_ERR_IO, "%s: offset %llu of %s is too large", path,
                              (unsigned long long)off, what);
        ssize_t r = pread(fd, p, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return rf_err_set(err, RF_ERR_IO, "%s: reading %s at offset %llu: %s", path, what,
                              (unsigned long long)off, strerror(errno));
        }
        if (r == 0)
            return rf_err_set(err, RF_ERR_IO,
                              "%s: unexpected end of file reading %s at offset %llu", path,
                              what, (unsigned long long)off);
        p += r;
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    return RF_OK;
}

rf_status_t rf_st_file_open(const char *path, rf_st_file_t **f_p, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    struct stat sb;
    char *hdr = NULL;
    rf_st_file_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    f->fd = -1;
    f->path = strdup(path);
    if (f->path == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        st = rf_err_set(err, RF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(f->fd, &sb) != 0) {
        st = rf_err_set(err, RF_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = rf_err_set(err, RF_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size < 8) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: file is %llu bytes, too short for the 8-byte header length", path,
                        (unsigned long long)f->size);
        goto fail;
    }
    unsigned char lenb[8];
    RF_CHECK_GOTO(pread_full(f->fd, lenb, 8, 0, path, "header length", err), st, fail);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | lenb[i];
    f->header_bytes_read = 8;
    if (n > RF_ST_MAX_HEADER_BYTES) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: header length %llu exceeds %llu bytes", path,
                        (unsigned long long)n, RF_ST_MAX_HEADER_BYTES);
        goto fail;
    }
    if (n > f->size - 8) {
        st = rf_err_set(err, RF_ERR_PARSE,
                        "%s: header length %llu exceeds file size %llu - 8 (truncated file?)",
                        path, (unsigned long long)n, (unsigned long long)f->size);
        goto fail;
    }
    hdr = malloc(n ? n : 1);
    if (hdr == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path,
                        (unsigned long long)n);
        goto fail;
    }
    RF_CHECK_GOTO(pread_full(f->fd, hdr, n, 8, path, "header", err), st, fail);
    f->header_bytes_read += n;
    RF_CHECK_GOTO(rf_st_parse_header(hdr, (size_t)n, f->size - 8 - n, path, &f->header, err),
                  st, fail);
    for (size_t i = 0; i < f->header.count; i++)
        f->header.entries[i].file = f;
    free(hdr);
    *f_p = f;
    return RF_OK;
fail:
    free(hdr);
    rf_st_file_close(f);
    return st;
}

void rf_st_file_close(rf_st_file_t *f)
{
    if (f == NULL)
        return;
    if (f->fd >= 0)
        close(f->fd);
    rf_h5_close(f->h5);
    rf_st_header_free(&f->header);
    free(f->path);
    free(f);
}

const char *rf_st_file_path(const rf_st_file_t *f)
{
    return f->path;
}

const rf_st_header_t *rf_st_file_header(const rf_st_file_t *f)
{
    return &f->header;
}

uint64_t rf_st_file_size(const rf_st_file_t *f)
{
    return f->size;
}

uint64_t rf_st_file_header_bytes_read(const rf_st_file_t *f)
{
    return f->header_bytes_read;
}

/* ---- checkpoint directories ------------------------------------------------------------ */

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p == NULL)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* A shard name must stay inside the directory. */
static bool shard_name_ok(const char *s)
{
    if (s[0] == '\0' || s[0] == '/')
        return false;
    for (const char *c = s; *c;) {
        const char *slash = strchr(c, '/');
        size_t len = slash ? (size_t)(slash - c) : strlen(c);
        if (len == 2 && c[0] == '.' && c[1] == '.')
            return false;
        if (slash == NULL)
            break;
        c = slash + 1;
    }
    return true;
}

static rf_status_t read_small_file(const char *path, char **buf_p, size_t *len_p, rf_err_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0)
        return rf_err_set(err, RF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return rf_err_set(err, RF_ERR_IO, "%s: not a readable regular file", path);
    }
    if ((uint64_t)sb.st_size > RF_ST_MAX_HEADER_BYTES) {
        close(fd);
        return rf_err_set(err, RF_ERR_PARSE, "%s: %llu bytes, more than %llu", path,
                          (unsigned long long)sb.st_size, RF_ST_MAX_HEADER_BYTES);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    }
    rf_status_t st = pread_full(fd, buf, (uint64_t)sb.st_size, 0, path, "file", err);
    close(fd);
    if (st != RF_OK) {
        free(buf);
        return st;
    }
    buf[sb.st_size] = '\0';
    *buf_p = buf;
    *len_p = (size_t)sb.st_size;
    return RF_OK;
}

static int cmp_str_p(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_entry_name_p(const void *a, const void *b)
{
    const rf_st_entry_t *x = *(const rf_st_entry_t *const *)a;
    const rf_st_entry_t *y = *(const rf_st_entry_t *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_file_p(const void *a, const void *b)
{
    return strcmp((*(rf_st_file_t *const *)a)->path, (*(rf_st_file_t *const *)b)->path);
}

/* Opens the files of the index and checks the index against their headers. */
static rf_status_t open_sharded(rf_ckpt_t *ck, const char *ipath, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    char *buf = NULL, *fpath = NULL;
    size_t len = 0;
    json_error_t jerr;
    json_t *root = NULL;
    const char **fnames = NULL;
    RF_CHECK(read_small_file(ipath, &buf, &len, err));
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    free(buf);
    if (root == NULL)
        return rf_err_set(err, RF_ERR_PARSE, "%s: not valid json (line %d column %d: %s)",
                          ipath, jerr.line, jerr.column, jerr.text);
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: no weight_map object", ipath);
        goto out;
    }
    /* Distinct file names, sorted. */
    size_t nw = json_object_size(wm), nf = 0;
    fnames = malloc((nw ? nw : 1) * sizeof(*fnames));
    if (fnames == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", ipath);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        if (!json_is_string(val) || !shard_name_ok(json_string_value(val))) {
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: weight_map entry of tensor " NAME_FMT
                            " is not a file name inside the directory",
                            ipath, key);
            goto out;
        }
        fnames[nf++] = json_string_value(val);
    }
    qsort(fnames, nf, sizeof(*fnames), cmp_str_p);
    size_t u = 0;
    for (size_t i = 0; i < nf; i++)
        if (u == 0 || strcmp(fnames[u - 1], fnames[i]) != 0)
            fnames[u++] = fnames[i];
    ck->files = calloc(u ? u : 1, sizeof(*ck->files));
    if (ck->files == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", ipath);
        goto out;
    }
    for (size_t i = 0; i < u; i++) {
        struct stat sb;
        fpath = path_join(ck->dir, fnames[i]);
        if (fpath == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", ipath);
            goto out;
        }
        if (stat(fpath, &sb) != 0 && errno == ENOENT) {
            const char *who = "";
            json_object_foreach(wm, key, val) {
                if (strcmp(json_string_value(val), fnames[i]) == 0) {
                    who = key;
                    break;
                }
            }
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: weight_map maps tensor " NAME_FMT " to file %s, which does "
                            "not exist",
                            ipath, who, fpath);
            goto out;
        }
        RF_CHECK_GOTO(rf_st_file_open(fpath, &ck->files[i], err), st, out);
        ck->nfiles++;
        free(fpath);
        fpath = NULL;
    }
    /* Index -> headers. Files are sorted by path and fnames by name: same order. */
    json_object_foreach(wm, key, val) {
        const char **slot = bsearch(&(const char *){json_string_value(val)}, fnames, u,
                                    sizeof(*fnames), cmp_str_p);
        const rf_st_file_t *f = ck->files[slot - fnames];
        if (rf_st_header_find(&f->header, key) == NULL) {
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: weight_map maps tensor " NAME_FMT
                            " to %s, whose header has no such tensor",
                            ipath, key, f->path);
            goto out;
        }
    }
    /* Headers -> index. */
    for (size_t i = 0; i < ck->nfiles; i++) {
        const rf_st_file_t *f = ck->files[i];
        for (size_t k = 0; k < f->header.count; k++) {
            const char *name = f->header.entries[k].name;
            json_t *m = json_object_get(wm, name);
            if (m == NULL) {
                st = rf_err_set(err, RF_ERR_PARSE,
                                "%s: tensor " NAME_FMT " is not in the weight_map of %s",
                                f->path, name, ipath);
                goto out;
            }
            if (strcmp(json_string_value(m), fnames[i]) != 0) {
                st = rf_err_set(err, RF_ERR_PARSE,
                                "%s: tensor " NAME_FMT " is mapped to %s by %s", f->path, name,
                                json_string_value(m), ipath);
                goto out;
            }
        }
    }
out:
    free(fpath);
    free(fnames);
    json_decref(root);
    return st;
}

/* An HDF5 checkpoint as the one file of ck: the header holds its datasets. */
static rf_status_t open_h5(rf_ckpt_t *ck, const char *path, rf_err_t *err)
{
    rf_st_file_t *f = calloc(1, sizeof(*f));
    ck->files = calloc(1, sizeof(*ck->files));
    if (f == NULL || ck->files == NULL || (f->path = strdup(path)) == NULL) {
        free(f);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    }
    f->fd = -1;
    rf_status_t st = rf_h5_open(path, &f->h5, &f->header, err);
    if (st != RF_OK) {
        rf_st_file_close(f);
        return st;
    }
    f->size = rf_h5_size(f->h5);
    for (size_t i = 0; i < f->header.count; i++)
        f->header.entries[i].file = f;
    ck->files[0] = f;
    ck->nfiles = 1;
    return RF_OK;
}

static bool has_h5_suffix(const char *p)
{
    size_t n = strlen(p);
    return (n > 3 && strcmp(p + n - 3, ".h5") == 0) || (n > 5 && strcmp(p + n - 5, ".hdf5") == 0);
}

rf_status_t rf_ckpt_open(const char *dir, rf_ckpt_t **ck_p, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    char *ipath = NULL, *spath = NULL, *hpath = NULL;
    const char **names = NULL;
    struct stat sb;
    rf_ckpt_t *ck = calloc(1, sizeof(*ck));
    if (ck == NULL || (ck->dir = strdup(dir)) == NULL) {
        free(ck);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", dir);
    }
    ipath = path_join(dir, RF_ST_INDEX_NAME);
    spath = path_join(dir, RF_ST_SINGLE_NAME);
    hpath = path_join(dir, RF_H5_SINGLE_NAME);
    if (ipath == NULL || spath == NULL || hpath == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    if (stat(ipath, &sb) == 0) {
        RF_CHECK_GOTO(open_sharded(ck, ipath, err), st, fail);
    } else if (stat(spath, &sb) == 0) {
        ck->files = calloc(1, sizeof(*ck->files));
        if (ck->files == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", dir);
            goto fail;
        }
        RF_CHECK_GOTO(rf_st_file_open(spath, &ck->files[0], err), st, fail);
        ck->nfiles = 1;
    } else if (stat(hpath, &sb) == 0) {
        RF_CHECK_GOTO(open_h5(ck, hpath, err), st, fail);
    } else if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode) &&
               (has_h5_suffix(dir) || rf_h5_is_hdf5(dir))) {
        RF_CHECK_GOTO(open_h5(ck, dir, err), st, fail);
    } else if (dir[0] == '\0') {
        st = rf_err_set(err, RF_ERR_IO, "checkpoint: an empty path is not a directory");
        goto fail;
    } else if (stat(dir, &sb) != 0) {
        st = rf_err_set(err, RF_ERR_IO, "checkpoint %s: %s", dir, strerror(errno));
        goto fail;
    } else if (!S_ISDIR(sb.st_mode)) {
        st = rf_err_set(err, RF_ERR_IO,
                        "checkpoint %s: not a directory or an HDF5 file (--checkpoint names the "
                        "folder holding %s, %s or %s, or a .h5 file)",
                        dir, RF_ST_INDEX_NAME, RF_ST_SINGLE_NAME, RF_H5_SINGLE_NAME);
        goto fail;
    } else {
        st = rf_err_set(err, RF_ERR_IO, "%s: no %s, %s or %s in the directory", dir,
                        RF_ST_INDEX_NAME, RF_ST_SINGLE_NAME, RF_H5_SINGLE_NAME);
        goto fail;
    }
    qsort(ck->files, ck->nfiles, sizeof(*ck->files), cmp_file_p);

    uint64_t hb = 0;
    for (size_t i = 0; i < ck->nfiles; i++) {
        ck->count += ck->files[i]->header.count;
        hb += ck->files[i]->header_bytes_read;
    }
    atomic_store(&ck->header_bytes_read, hb);
    ck->entries = malloc((ck->count ? ck->count : 1) * sizeof(*ck->entries));
    names = malloc((ck->count ? ck->count : 1) * sizeof(*names));
    if (ck->entries == NULL || names == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    size_t k = 0;
    for (size_t i = 0; i < ck->nfiles; i++)
        for (size_t j = 0; j < ck->files[i]->header.count; j++)
            ck->entries[k++] = &ck->files[i]->header.entries[j];
    qsort(ck->entries, ck->count, sizeof(*ck->entries), cmp_entry_name_p);
    for (size_t i = 0; i < ck->count; i++)
        names[i] = ck->entries[i]->name;
    size_t dup = 0;
    st = rf_name_table_build(&ck->names, names, ck->count, &dup);
    if (st == RF_ERR_INVALID) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " is in %s and in another file",
                        dir, names[dup], ck->entries[dup]->file->path);
        goto fail;
    } else if (st != RF_OK) {
        st = rf_err_set(err, st, "%s: out of memory", dir);
        goto fail;
    }
    free(names);
    free(ipath);
    free(spath);
    free(hpath);
    *ck_p = ck;
    return RF_OK;
fail:
    free(names);
    free(ipath);
    free(spath);
    free(hpath);
    rf_ckpt_close(ck);
    return st;
}

void rf_ckpt_close(rf_ckpt_t *ck)
{
    if (ck == NULL)
        return;
    rf_h5_close(ck->h5_all); /* normally closed by rf_ckpt_collective_end already */
    rf_name_table_free(&ck->names);
    free(ck->entries);
    for (size_t i = 0; i < ck->nfiles; i++)
        rf_st_file_close(ck->files[i]);
    free(ck->files);
    free(ck->dir);
    free(ck);
}

size_t rf_ckpt_count(const rf_ckpt_t *ck)
{
    return ck->count;
}

const rf_st_entry_t *rf_ckpt_entry(const rf_ckpt_t *ck, size_t i)
{
    return i < ck->count ? ck->entries[i] : NULL;
}

const rf_st_entry_t *rf_ckpt_find(const rf_ckpt_t *ck, const char *name)
{
    size_t i = rf_name_table_find(&ck->names, name);
    return i == SIZE_MAX ? NULL : ck->entries[i];
}

size_t rf_ckpt_file_count(const rf_ckpt_t *ck)
{
    return ck->nfiles;
}

const rf_st_file_t *rf_ckpt_file(const rf_ckpt_t *ck, size_t i)
{
    return i < ck->nfiles ? ck->files[i] : NULL;
}

rf_status_t rf_ckpt_read(rf_ckpt_t *ck, const rf_st_entry_t *e, uint64_t row_begin,
                         uint64_t row_end, uint64_t col_byte_begin, uint64_t col_byte_end,
                         void *dst, size_t dst_pitch, rf_err_t *err)
{
    if (ck == NULL || e == NULL || e->file == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "rf_ckpt_read: NULL checkpoint or entry");
    uint64_t rows = rf_st_entry_rows(e);
    uint64_t row_bytes = rf_st_entry_row_bytes(e);
    if (row_begin > row_end || row_end > rows)
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s: tensor " NAME_FMT " rows [%llu, %llu) outside [0, %llu)",
                          e->file->path, e->name, (unsigned long long)row_begin,
                          (unsigned long long)row_end, (unsigned long long)rows);
    if (col_byte_begin > col_byte_end || col_byte_end > row_bytes)
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s: tensor " NAME_FMT " row bytes [%llu, %llu) outside [0, %llu)",
                          e->file->path, e->name, (unsigned long long)col_byte_begin,
                          (unsigned long long)col_byte_end, (unsigned long long)row_bytes);
    uint64_t nrows = row_end - row_begin, width = col_byte_end - col_byte_begin;
    if (nrows == 0 || width == 0)
        return RF_OK;
    if (dst == NULL || (nrows > 1 && dst_pitch < width))
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s: tensor " NAME_FMT " destination NULL or pitch %zu < %llu bytes",
                          e->file->path, e->name, dst_pitch, (unsigned long long)width);
    char *d = dst;
    uint64_t off = e->offset + row_begin * row_bytes + col_byte_begin;
    if (e->file->h5 != NULL) {
        /* one hyperslab of the dataset: still only the shard's bytes */
        RF_CHECK(rf_h5_read(e->file->h5, (size_t)(e - e->file->header.entries), row_begin,
                            row_end, col_byte_begin, col_byte_end, dst, dst_pitch, err));
    } else if (width == row_bytes && (nrows == 1 || dst_pitch == row_bytes)) {
        RF_CHECK(pread_full(e->file->fd, d, nrows * width, off, e->file->path, e->name, err));
    } else {
        for (uint64_t r = 0; r < nrows; r++)
            RF_CHECK(pread_full(e->file->fd, d + r * dst_pitch, width, off + r * row_bytes,
                                e->file->path, e->name, err));
    }
    atomic_fetch_add_explicit(&ck->bytes_read, nrows * width, memory_order_relaxed);
    return RF_OK;
}

rf_status_t rf_ckpt_compare(rf_ckpt_t *ck, const rf_st_entry_t *a, const rf_st_entry_t *b,
                            size_t block_bytes, int64_t *first_row, rf_err_t *err)
{
    if (ck == NULL || a == NULL || b == NULL || first_row == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "rf_ckpt_compare: NULL argument");
    uint64_t rows = rf_st_entry_rows(a), rb = rf_st_entry_row_bytes(a);
    if (rows != rf_st_entry_rows(b) || rb != rf_st_entry_row_bytes(b) || rb == UINT64_MAX)
        return rf_err_set(err, RF_ERR_INVALID,
                          "rf_ckpt_compare: tensors " NAME_FMT " and " NAME_FMT
                          " differ in rows or row bytes",
                          a->name, b->name);
    *first_row = -1;
    if (block_bytes == 0)
        block_bytes = (size_t)4 << 20;
    /* whole rows per block where a row fits, else one row in column slices: never more
     * than two blocks in memory, whatever the tensor's size (an embedding may be GBs) */
    uint64_t step_rows = rb == 0 ? rows : (rb <= block_bytes ? block_bytes / rb : 1);
    uint64_t step_cols = rb <= block_bytes ? rb : block_bytes;
    size_t cap = (size_t)(rb <= block_bytes ? step_rows * rb : step_cols);
    char *x = malloc(cap + 1), *y = malloc(cap + 1);
    rf_status_t st = x && y ? RF_OK : rf_err_set(err, RF_ERR_NOMEM, "rf_ckpt_compare: out of "
                                                                    "memory");
    for (uint64_t r = 0; st == RF_OK && *first_row < 0 && r < rows; r += step_rows) {
        uint64_t re = r + step_rows < rows ? r + step_rows : rows;
        for (uint64_t c = 0; st == RF_OK && c < rb; c += step_cols) {
            uint64_t ce = c + step_cols < rb ? c + step_cols : rb, w = ce - c;
            st = rf_ckpt_read(ck, a, r, re, c, ce, x, (size_t)w, err);
            if (st == RF_OK)
                st = rf_ckpt_read(ck, b, r, re, c, ce, y, (size_t)w, err);
            if (st != RF_OK || memcmp(x, y, (size_t)((re - r) * w)) == 0)
                continue;
            for (uint64_t i = 0; i < re - r; i++)
                if (memcmp(x + i * w, y + i * w, (size_t)w) != 0) {
                    *first_row = (int64_t)(r + i);
                    break;
                }
            break;
        }
    }
    free(x);
    free(y);
    return st;
}

const char *rf_ckpt_format(const rf_ckpt_t *ck)
{
    return ck->nfiles == 1 && ck->files[0]->h5 != NULL ? "hdf5" : "safetensors";
}

const char *rf_ckpt_config(const rf_ckpt_t *ck)
{
    return ck->nfiles == 1 && ck->files[0]->h5 != NULL ? rf_h5_config(ck->files[0]->h5) : NULL;
}

rf_status_t rf_ckpt_check_config(const rf_ckpt_t *ck, const char *path,
                                 const rf_model_config_t *topo, rf_quant_t quant, int64_t group,
                                 rf_err_t *err)
{
    const char *cj = ck != NULL ? rf_ckpt_config(ck) : NULL;
    if (cj == NULL)
        return rf_model_config_check_checkpoint(path, topo, quant, group, err);
    /* an HDF5 file's config attribute stands for a directory's config.json */
    char name[512];
    snprintf(name, sizeof(name), "%s (root attribute config)", path);
    rf_model_config_t cfg;
    RF_CHECK(rf_model_config_parse(cj, strlen(cj), name, &cfg, err));
    rf_status_t st = rf_model_config_compare(&cfg, topo, quant, group, name, err);
    rf_model_config_free(&cfg);
    return st;
}

uint64_t rf_ckpt_bytes_read(const rf_ckpt_t *ck)
{
    return atomic_load(&((rf_ckpt_t *)ck)->bytes_read);
}

uint64_t rf_ckpt_header_bytes_read(const rf_ckpt_t *ck)
{
    return atomic_load(&((rf_ckpt_t *)ck)->header_bytes_read);
}

void rf_ckpt_reset_counters(rf_ckpt_t *ck)
{
    atomic_store(&ck->bytes_read, 0);
    atomic_store(&ck->header_bytes_read, 0);
}

/* ---- lock-step collective reads (parallel HDF5) ---------------------------------------- */

rf_status_t rf_ckpt_collective_begin(rf_ckpt_t *ck, MPI_Comm comm, bool *on, rf_err_t *err)
{
    *on = false;
    if (ck == NULL || comm == MPI_COMM_NULL || !rf_h5_is_parallel() || ck->nfiles != 1 ||
        ck->files[0]->h5 == NULL)
        return RF_OK; /* independent reads: safetensors, serial libhdf5, no communicator */
    /* one rank has no peer to read with; REFIT_HDF5_COLLECTIVE=0 keeps independent reads
     * where MPI-IO is slower than the sec2 driver (docs/benchmarks.md) */
    int n = 0;
    const char *env = getenv("REFIT_HDF5_COLLECTIVE");
    MPI_Comm_size(comm, &n);
    if (n < 2 || (env != NULL && strcmp(env, "0") == 0))
        return RF_OK;
    if (ck->h5_all != NULL)
        return rf_err_set(err, RF_ERR_STATE, "%s: collective reads begun twice", ck->dir);
    const rf_st_file_t *f = ck->files[0];
    rf_st_header_t h;
    rf_h5_file_t *hf = NULL;
    RF_CHECK(rf_h5_open_mpio(f->path, comm, &hf, &h, err));
    /* the file as ck first saw it: the same datasets, types, shapes and addresses (same on
     * every rank, so every rank keeps or closes the handle alike) */
    bool changed = h.count != f->header.count;
    const rf_st_entry_t *bad = NULL;
    for (size_t i = 0; !changed && i < h.count; i++) {
        const rf_st_entry_t *a = &f->header.entries[i], *b = &h.entries[i];
        bool same = strcmp(a->name, b->name) == 0 && a->dtype == b->dtype &&
                    a->ndim == b->ndim && a->nbytes == b->nbytes && a->offset == b->offset;
        for (int k = 0; same && k < a->ndim; k++)
            same = a->shape[k] == b->shape[k];
        if (!same) {
            bad = a;
            changed = true;
        }
    }
    rf_st_header_free(&h);
    if (changed) {
        rf_h5_close(hf);
        if (bad == NULL)
            return rf_err_set(err, RF_ERR_MISMATCH, "%s: changed since it was opened (another "
                              "dataset count): reopen the checkpoint", f->path);
        return rf_err_set(err, RF_ERR_MISMATCH, "%s: changed since it was opened (dataset "
                          NAME_FMT " differs): reopen the checkpoint", f->path, bad->name);
    }
    ck->h5_all = hf;
    *on = true;
    return RF_OK;
}

rf_status_t rf_ckpt_read_all(rf_ckpt_t *ck, const rf_st_entry_t *e, uint64_t row_begin,
                             uint64_t row_end, uint64_t col_byte_begin, uint64_t col_byte_end,
                             void *dst, size_t dst_pitch, rf_err_t *err)
{
    if (ck == NULL || ck->h5_all == NULL) {
        if (row_begin == row_end || col_byte_begin == col_byte_end)
            return RF_OK;
        return rf_ckpt_read(ck, e, row_begin, row_end, col_byte_begin, col_byte_end, dst,
                            dst_pitch, err);
    }
    /* e comes from ck's one HDF5 file: its index there is its index in the MPI-IO handle
     * (begin checked they list the same datasets); ranges are checked inside, after the
     * rank has taken part */
    const rf_st_file_t *f = ck->files[0];
    if (e == NULL || e->file != f)
        return rf_err_set(err, RF_ERR_INVALID, "rf_ckpt_read_all: entry not of %s", f->path);
    RF_CHECK(rf_h5_read_all(ck->h5_all, (size_t)(e - f->header.entries), row_begin, row_end,
                            col_byte_begin, col_byte_end, dst, dst_pitch, err));
    atomic_fetch_add_explicit(&ck->bytes_read,
                              (row_end - row_begin) * (col_byte_end - col_byte_begin),
                              memory_order_relaxed);
    return RF_OK;
}

rf_status_t rf_ckpt_collective_end(rf_ckpt_t *ck, rf_err_t *err)
{
    (void)err; /* H5Fclose of a read-only file: nothing of refit's to report */
    if (ck == NULL || ck->h5_all == NULL)
        return RF_OK;
    uint64_t c = 0, i = 0;
    rf_h5_collective_counts(ck->h5_all, &c, &i);
    ck->coll_reads += c;
    ck->indep_reads += i;
    rf_h5_close(ck->h5_all);
    ck->h5_all = NULL;
    return RF_OK;
}

void rf_ckpt_collective_counts(const rf_ckpt_t *ck, uint64_t *collective, uint64_t *independent)
{
    uint64_t c = 0, i = 0;
    if (ck != NULL && ck->h5_all != NULL)
        rf_h5_collective_counts(ck->h5_all, &c, &i);
    *collective = ck != NULL ? ck->coll_reads + c : 0;
    *independent = ck != NULL ? ck->indep_reads + i : 0;
}

/* ---- writer ---------------------------------------------------------------------------- */

static rf_status_t write_full(int fd, const void *buf, size_t len, const char *path,
                              rf_err_t *err)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return rf_err_set(err, RF_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return RF_OK;
}

rf_status_t rf_st_write_file(const char *path, size_t n, const char *const names[],
                             const rf_dtype_t dtypes[], const int ndims[],
                             const uint64_t shapes[][RF_ST_MAX_RANK], const void *const data[],
                             const char *meta_json, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    json_t *root = json_object(), *meta = NULL;
    char *hdr = NULL;
    uint64_t *sizes = calloc(n ? n : 1, sizeof(*sizes));
    int fd = -1;
    bool created = false;
    if (root == NULL || sizes == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    if (meta_json != NULL) {
        json_error_t jerr;
        meta = json_loads(meta_json, JSON_REJECT_DUPLICATES, &jerr);
        const char *k;
        json_t *v;
        if (!json_is_object(meta)) {
            st = rf_err_set(err, RF_ERR_INVALID, "%s: metadata is not a json object", path);
            goto out;
        }
        json_object_foreach(meta, k, v) {
            if (!json_is_string(v)) {
                st = rf_err_set(err, RF_ERR_INVALID,
                                "%s: metadata value of key " NAME_FMT " is not a string", path,
                                k);
                goto out;
            }
        }
        json_object_set(root, "__metadata__", meta);
    }
    uint64_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const char *nm = names[i] != NULL ? names[i] : "";
        if (names[i] == NULL || strcmp(nm, "__metadata__") == 0 ||
            json_object_get(root, nm) != NULL) {
            st = rf_err_set(err, RF_ERR_INVALID, "%s: tensor %zu name " NAME_FMT
                            " is NULL, reserved or repeated", path, i, nm);
            goto out;
        }
        size_t es = rf_dtype_size(dtypes[i]);
        if (es == 0 || (int)dtypes[i] >= RF_DTYPE_COUNT || ndims[i] < 0 ||
            ndims[i] > RF_ST_MAX_RANK) {
            st = rf_err_set(err, RF_ERR_INVALID, "%s: tensor " NAME_FMT " bad dtype or rank",
                            path, nm);
            goto out;
        }
        uint64_t nb = es;
        json_t *shape = json_array(), *offs = json_array(), *t = json_object();
        if (shape == NULL || offs == NULL || t == NULL) {
            json_decref(shape);
            json_decref(offs);
            json_decref(t);
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
            goto out;
        }
        bool ok = true;
        for (int d = 0; d < ndims[i]; d++) {
            ok = ok && shapes[i][d] <= (uint64_t)INT64_MAX && mul_u64(nb, shapes[i][d], &nb);
            json_array_append_new(shape, json_integer((json_int_t)shapes[i][d]));
        }
        ok = ok && pos + nb >= pos && pos + nb <= (uint64_t)INT64_MAX;
        json_array_append_new(offs, json_integer((json_int_t)pos));
        json_array_append_new(offs, json_integer((json_int_t)(pos + nb)));
        json_object_set_new(t, "dtype", json_string(rf_dtype_name(dtypes[i])));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "data_offsets", offs);
        json_object_set_new(root, nm, t);
        if (!ok || (nb > 0 && data[i] == NULL)) {
            st = rf_err_set(err, RF_ERR_INVALID,
                            "%s: tensor " NAME_FMT " size overflows or data is NULL", path, nm);
            goto out;
        }
        sizes[i] = nb;
        pos += nb;
    }
    hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (hdr == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: cannot serialise the header", path);
        goto out;
    }
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    char *ph = realloc(hdr, padded ? padded : 1);
    if (ph == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    hdr = ph;
    memset(hdr + hl, ' ', padded - hl);
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = rf_err_set(err, RF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
        goto out;
    }
    created = true;
    RF_CHECK_GOTO(write_full(fd, lenb, 8, path, err), st, out);
    RF_CHECK_GOTO(write_full(fd, hdr, padded, path, err), st, out);
    for (size_t i = 0; i < n; i++)
        if (sizes[i] > 0)
            RF_CHECK_GOTO(write_full(fd, data[i], (size_t)sizes[i], path, err), st, out);
    if (close(fd) != 0) {
        fd = -1;
        st = rf_err_set(err, RF_ERR_IO, "%s: close failed: %s", path, strerror(errno));
        goto out;
    }
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    if (st != RF_OK && created)
        unlink(path); /* never leave a half-written file that looks valid */
    free(hdr);
    free(sizes);
    json_decref(meta);
    json_decref(root);
    return st;
}
