/*
 * refit formats: checkpoints, a directory of safetensors files (sharded by
 * model.safetensors.index.json, or one model.safetensors) or an HDF5 file, behind one
 * rf_ckpt_t (include/refit/checkpoint.h).
 *
 * This file stands above both readers and uses only their public headers: it opens the
 * safetensors files (safetensors.c) or the HDF5 container (hdf5.c, which it owns for an HDF5
 * checkpoint, its one file adopted by rf_st_file_adopt), merges their headers into one
 * name-ordered table and counts the bytes its reads move (atomics: reads may run from several
 * threads).
 */
#include "refit/checkpoint.h"

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
#include "refit/env.h"
#include "refit/hdf5.h"
#include "refit/model.h"

struct rf_ckpt {
    char *dir;
    size_t nfiles;
    rf_st_file_t **files;          /* owned, sorted by path */
    size_t count;
    const rf_st_entry_t **entries; /* borrowed from files' headers, sorted by name */
    rf_name_table_t names;
    _Atomic uint64_t bytes_read;
    _Atomic uint64_t header_bytes_read;
    rf_h5_file_t *h5; /* an HDF5 checkpoint (its one file adopted): reads go through it */
    rf_h5_file_t *h5_all;  /* the MPI-IO handle between collective begin and end, or NULL */
    bool collective;       /* REFIT_HDF5_COLLECTIVE (read at open): 0 keeps independent reads */
    uint64_t coll_reads, indep_reads; /* of handles closed by rf_ckpt_collective_end */
};

/* Tensor names in messages: long enough to identify, short enough to leave room. */
#define NAME_FMT "\"%.200s\""

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
    rf_status_t st = rf_st_pread_full(fd, buf, (uint64_t)sb.st_size, 0, path, "file", err);
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
    return strcmp(rf_st_file_path(*(rf_st_file_t *const *)a),
                  rf_st_file_path(*(rf_st_file_t *const *)b));
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
        if (rf_st_header_find(rf_st_file_header(f), key) == NULL) {
            st = rf_err_set(err, RF_ERR_PARSE,
                            "%s: weight_map maps tensor " NAME_FMT
                            " to %s, whose header has no such tensor",
                            ipath, key, rf_st_file_path(f));
            goto out;
        }
    }
    /* Headers -> index. */
    for (size_t i = 0; i < ck->nfiles; i++) {
        const rf_st_file_t *f = ck->files[i];
        const rf_st_header_t *h = rf_st_file_header(f);
        for (size_t k = 0; k < h->count; k++) {
            const char *name = h->entries[k].name;
            json_t *m = json_object_get(wm, name);
            if (m == NULL) {
                st = rf_err_set(err, RF_ERR_PARSE,
                                "%s: tensor " NAME_FMT " is not in the weight_map of %s",
                                rf_st_file_path(f), name, ipath);
                goto out;
            }
            if (strcmp(json_string_value(m), fnames[i]) != 0) {
                st = rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " is mapped to %s by %s",
                                rf_st_file_path(f), name, json_string_value(m), ipath);
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
    rf_st_header_t hdr = {0};
    ck->files = calloc(1, sizeof(*ck->files));
    if (ck->files == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    RF_CHECK(rf_h5_open(path, &ck->h5, &hdr, err));
    RF_CHECK(rf_st_file_adopt(path, rf_h5_size(ck->h5), &hdr, &ck->files[0], err));
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
    /* read here, not when an update's reads begin: a value other than 0 or 1 is refused at
     * setup */
    bool collective = true;
    RF_CHECK(rf_env_flag("REFIT_HDF5_COLLECTIVE", true, &collective, err));
    rf_ckpt_t *ck = calloc(1, sizeof(*ck));
    if (ck == NULL || (ck->dir = strdup(dir)) == NULL) {
        free(ck);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", dir);
    }
    ck->collective = collective;
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
        ck->count += rf_st_file_header(ck->files[i])->count;
        hb += rf_st_file_header_bytes_read(ck->files[i]);
    }
    atomic_store(&ck->header_bytes_read, hb);
    ck->entries = malloc((ck->count ? ck->count : 1) * sizeof(*ck->entries));
    names = malloc((ck->count ? ck->count : 1) * sizeof(*names));
    if (ck->entries == NULL || names == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    size_t k = 0;
    for (size_t i = 0; i < ck->nfiles; i++) {
        const rf_st_header_t *h = rf_st_file_header(ck->files[i]);
        for (size_t j = 0; j < h->count; j++)
            ck->entries[k++] = &h->entries[j];
    }
    qsort(ck->entries, ck->count, sizeof(*ck->entries), cmp_entry_name_p);
    for (size_t i = 0; i < ck->count; i++)
        names[i] = ck->entries[i]->name;
    size_t dup = 0;
    st = rf_name_table_build(&ck->names, names, ck->count, &dup);
    if (st == RF_ERR_INVALID) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " is in %s and in another file",
                        dir, names[dup], rf_st_file_path(ck->entries[dup]->file));
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
    rf_name_table_free(&ck->names);
    free(ck->entries);
    for (size_t i = 0; i < ck->nfiles; i++)
        rf_st_file_close(ck->files[i]);
    free(ck->files);
    rf_h5_close(ck->h5_all); /* normally closed by rf_ckpt_collective_end already */
    rf_h5_close(ck->h5);
    free(ck->dir);
    free(ck);
}

rf_status_t rf_ckpt_rename_prefix(rf_ckpt_t *ck, const char *stored, const char *canonical,
                                  size_t *renamed_p, rf_err_t *err)
{
    size_t sl = strlen(stored), n = 0;
    const char **names = NULL;
    char **old = NULL;
    rf_status_t st = RF_OK;
    if (renamed_p != NULL)
        *renamed_p = 0;
    for (size_t i = 0; i < ck->count; i++)
        n += strncmp(ck->entries[i]->name, stored, sl) == 0;
    if (n == 0)
        return RF_OK;
    old = calloc(n, sizeof(*old));
    names = malloc(ck->count * sizeof(*names));
    if (old == NULL || names == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", ck->dir);
        goto out;
    }
    /* both spellings of one tensor in one checkpoint: which one is meant is unknowable */
    for (size_t i = 0; i < ck->count; i++) {
        const char *nm = ck->entries[i]->name;
        char *c;
        if (strncmp(nm, stored, sl) != 0)
            continue;
        if ((c = malloc(strlen(canonical) + strlen(nm + sl) + 1)) == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", ck->dir);
            goto out;
        }
        strcpy(c, canonical);
        strcat(c, nm + sl);
        if (rf_ckpt_find(ck, c) != NULL) {
            st = rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " is stored as " NAME_FMT
                            " too (two names of one tensor)", ck->dir, c, nm);
            free(c);
            goto out;
        }
        free(c);
    }
    /* entries are owned by their files' headers: rename them there (reads go by offset; the
     * headers' own name tables are only used while opening, rebuilt below all the same) */
    size_t k = 0;
    for (size_t i = 0; i < ck->count; i++) {
        rf_st_entry_t *e = (rf_st_entry_t *)ck->entries[i];
        if (strncmp(e->name, stored, sl) != 0)
            continue;
        char *c = malloc(strlen(canonical) + strlen(e->name + sl) + 1);
        if (c == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", ck->dir);
            goto out;
        }
        strcpy(c, canonical);
        strcat(c, e->name + sl);
        old[k++] = (char *)e->name;
        e->name = c;
    }
    qsort(ck->entries, ck->count, sizeof(*ck->entries), cmp_entry_name_p);
    for (size_t i = 0; i < ck->count; i++)
        names[i] = ck->entries[i]->name;
    rf_name_table_free(&ck->names);
    if (rf_name_table_build(&ck->names, names, ck->count, NULL) != RF_OK) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", ck->dir);
        goto out;
    }
    for (size_t f = 0; f < ck->nfiles; f++) {
        rf_st_header_t *h = (rf_st_header_t *)rf_st_file_header(ck->files[f]);
        if (h->names_ == NULL)
            continue;
        for (size_t i = 0; i < h->count; i++)
            names[i] = h->entries[i].name;
        rf_name_table_free(h->names_);
        if (rf_name_table_build(h->names_, names, h->count, NULL) != RF_OK) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", ck->dir);
            goto out;
        }
    }
    if (renamed_p != NULL)
        *renamed_p = n;
out:
    if (old != NULL)
        for (size_t i = 0; i < n; i++)
            free(old[i]);
    free(old);
    free(names);
    return st;
}

/* ---- lock-step collective reads (parallel HDF5) ---------------------------------------- */

rf_status_t rf_ckpt_collective_begin(rf_ckpt_t *ck, MPI_Comm comm, bool *on, rf_err_t *err)
{
    *on = false;
    if (ck == NULL || comm == MPI_COMM_NULL || !rf_h5_is_parallel() || ck->nfiles != 1 ||
        ck->h5 == NULL)
        return RF_OK; /* independent reads: safetensors, serial libhdf5, no communicator */
    /* one rank has no peer to read with; REFIT_HDF5_COLLECTIVE=0 keeps independent reads
     * where MPI-IO is slower than the sec2 driver (docs/benchmarks.md) */
    int n = 0;
    MPI_Comm_size(comm, &n);
    if (n < 2 || !ck->collective)
        return RF_OK;
    if (ck->h5_all != NULL)
        return rf_err_set(err, RF_ERR_STATE, "%s: collective reads begun twice", ck->dir);
    const rf_st_file_t *f = ck->files[0];
    rf_st_header_t h;
    rf_h5_file_t *hf = NULL;
    RF_CHECK(rf_h5_open_mpio(rf_st_file_path(f), comm, &hf, &h, err));
    /* the file as ck first saw it: the same datasets, types, shapes and addresses (same on
     * every rank, so every rank keeps or closes the handle alike) */
    const rf_st_header_t *fh = rf_st_file_header(f);
    bool changed = h.count != fh->count;
    const rf_st_entry_t *bad = NULL;
    for (size_t i = 0; !changed && i < h.count; i++) {
        const rf_st_entry_t *a = &fh->entries[i], *b = &h.entries[i];
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
                              "dataset count): reopen the checkpoint", rf_st_file_path(f));
        return rf_err_set(err, RF_ERR_MISMATCH, "%s: changed since it was opened (dataset "
                          NAME_FMT " differs): reopen the checkpoint", rf_st_file_path(f), bad->name);
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
        return rf_err_set(err, RF_ERR_INVALID, "rf_ckpt_read_all: entry not of %s",
                          rf_st_file_path(f));
    RF_CHECK(rf_h5_read_all(ck->h5_all, (size_t)(e - rf_st_file_header(f)->entries), row_begin, row_end,
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
    const char *fpath = rf_st_file_path(e->file);
    int fd = rf_st_file_fd(e->file);
    uint64_t rows = rf_st_entry_rows(e);
    uint64_t row_bytes = rf_st_entry_row_bytes(e);
    if (row_begin > row_end || row_end > rows)
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s: tensor " NAME_FMT " rows [%llu, %llu) outside [0, %llu)",
                          fpath, e->name, (unsigned long long)row_begin,
                          (unsigned long long)row_end, (unsigned long long)rows);
    if (col_byte_begin > col_byte_end || col_byte_end > row_bytes)
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s: tensor " NAME_FMT " row bytes [%llu, %llu) outside [0, %llu)",
                          fpath, e->name, (unsigned long long)col_byte_begin,
                          (unsigned long long)col_byte_end, (unsigned long long)row_bytes);
    uint64_t nrows = row_end - row_begin, width = col_byte_end - col_byte_begin;
    if (nrows == 0 || width == 0)
        return RF_OK;
    if (dst == NULL || (nrows > 1 && dst_pitch < width))
        return rf_err_set(err, RF_ERR_INVALID,
                          "%s: tensor " NAME_FMT " destination NULL or pitch %zu < %llu bytes",
                          fpath, e->name, dst_pitch, (unsigned long long)width);
    char *d = dst;
    uint64_t off = e->offset + row_begin * row_bytes + col_byte_begin;
    if (ck->h5 != NULL) {
        /* one hyperslab of the dataset: still only the shard's bytes */
        RF_CHECK(rf_h5_read(ck->h5, (size_t)(e - rf_st_file_header(e->file)->entries),
                            row_begin, row_end, col_byte_begin, col_byte_end, dst, dst_pitch,
                            err));
    } else if (width == row_bytes && (nrows == 1 || dst_pitch == row_bytes)) {
        RF_CHECK(rf_st_pread_full(fd, d, nrows * width, off, fpath, e->name, err));
    } else {
        for (uint64_t r = 0; r < nrows; r++)
            RF_CHECK(rf_st_pread_full(fd, d + r * dst_pitch, width, off + r * row_bytes, fpath,
                                      e->name, err));
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
    return ck->h5 != NULL ? "hdf5" : "safetensors";
}

const char *rf_ckpt_config(const rf_ckpt_t *ck)
{
    return ck->h5 != NULL ? rf_h5_config(ck->h5) : NULL;
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
