/*
 * refit formats: safetensors reader and writer.
 *
 * The header is parsed with jansson (UTF-8 checked, duplicate keys refused) and then checked
 * field by field against DESIGN.md section 11; every size is computed in uint64 with
 * overflow checks before it is trusted. Reads go through pread, looping on short reads and
 * EINTR, and count the bytes they move. Checkpoint directories of these files (and HDF5
 * checkpoints) are formats/checkpoint.c, above this file, a client of refit/safetensors.h.
 */
#include "refit/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats_names_int.h"

struct rf_st_file {
    char *path;
    int fd; /* -1: adopted (rf_st_file_adopt), read by whoever parsed its header */
    uint64_t size;
    uint64_t header_bytes_read;
    rf_st_header_t header;
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

rf_status_t rf_st_pread_full(int fd, void *buf, uint64_t len, uint64_t off, const char *path,
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
    RF_CHECK_GOTO(rf_st_pread_full(f->fd, lenb, 8, 0, path, "header length", err), st, fail);
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
    RF_CHECK_GOTO(rf_st_pread_full(f->fd, hdr, n, 8, path, "header", err), st, fail);
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

int rf_st_file_fd(const rf_st_file_t *f)
{
    return f->fd;
}

rf_status_t rf_st_file_adopt(const char *path, uint64_t size, rf_st_header_t *hdr,
                             rf_st_file_t **f_p, rf_err_t *err)
{
    rf_st_file_t *f = calloc(1, sizeof(*f));
    if (f == NULL || (f->path = strdup(path)) == NULL) {
        free(f);
        rf_st_header_free(hdr);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    }
    f->fd = -1;
    f->size = size;
    f->header = *hdr;
    memset(hdr, 0, sizeof(*hdr));
    for (size_t i = 0; i < f->header.count; i++)
        f->header.entries[i].file = f;
    *f_p = f;
    return RF_OK;
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
