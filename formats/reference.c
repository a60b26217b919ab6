/*
 * refit formats: tensors.reference.json (name -> dtype, shape, sha256), parsed with jansson
 * and indexed by name for the verifier.
 */
#include "refit/reference.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats_names_int.h"

struct rf_ref {
    size_t count;
    rf_ref_entry_t *entries; /* sorted by name; names owned */
    rf_name_table_t names;
};

#define NAME_FMT "\"%.200s\""

static const char *pfe(const char *p)
{
    return p != NULL ? p : "<buffer>";
}

static int cmp_ref_name(const void *a, const void *b)
{
    return strcmp(((const rf_ref_entry_t *)a)->name, ((const rf_ref_entry_t *)b)->name);
}

static rf_status_t parse_one(const char *path, const char *name, json_t *obj, rf_ref_entry_t *e,
                             rf_err_t *err)
{
    if (!json_is_object(obj))
        return rf_err_set(err, RF_ERR_PARSE, "%s: tensor " NAME_FMT " is not a json object",
                          pfe(path), name);
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0 && strcmp(key, "sha256") != 0)
            return rf_err_set(err, RF_ERR_PARSE,
                              "%s: tensor " NAME_FMT " has unknown field " NAME_FMT, pfe(path),
                              name, key);
    }
    json_t *jd = json_object_get(obj, "dtype"), *js = json_object_get(obj, "shape");
    json_t *jh = json_object_get(obj, "sha256");
    if (!json_is_string(jd) || (e->dtype = rf_dtype_parse(json_string_value(jd))) ==
                                   RF_DTYPE_INVALID)
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: tensor " NAME_FMT " dtype is missing or not a known dtype",
                          pfe(path), name);
    if (!json_is_array(js) || json_array_size(js) > RF_REF_MAX_RANK)
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: tensor " NAME_FMT " shape is missing, not an array or of rank "
                          "more than %d",
                          pfe(path), name, RF_REF_MAX_RANK);
    e->ndim = (int)json_array_size(js);
    for (int d = 0; d < e->ndim; d++) {
        json_t *v = json_array_get(js, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return rf_err_set(err, RF_ERR_PARSE,
                              "%s: tensor " NAME_FMT " shape dim %d is not a non-negative "
                              "integer",
                              pfe(path), name, d);
        e->shape[d] = (uint64_t)json_integer_value(v);
    }
    if (!json_is_string(jh) || !rf_sha256_parse_hex(json_string_value(jh), e->sha256))
        return rf_err_set(err, RF_ERR_PARSE,
                          "%s: tensor " NAME_FMT " sha256 is missing or not 64 hex digits",
                          pfe(path), name);
    rf_sha256_hex(e->sha256, e->sha256_hex);
    return RF_OK;
}

rf_status_t rf_ref_parse(const char *json, size_t len, const char *path, rf_ref_t **ref_p,
                         rf_err_t *err)
{
    rf_status_t st = RF_OK;
    json_error_t jerr;
    const char **names = NULL;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return rf_err_set(err, RF_ERR_PARSE, "%s: not valid json (line %d column %d: %s)",
                          pfe(path), jerr.line, jerr.column, jerr.text);
    rf_ref_t *ref = calloc(1, sizeof(*ref));
    if (ref == NULL) {
        json_decref(root);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", pfe(path));
    }
    if (!json_is_object(root)) {
        st = rf_err_set(err, RF_ERR_PARSE, "%s: not a json object", pfe(path));
        goto fail;
    }
    size_t n = json_object_size(root);
    ref->entries = calloc(n ? n : 1, sizeof(*ref->entries));
    names = malloc((n ? n : 1) * sizeof(*names));
    if (ref->entries == NULL || names == NULL) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", pfe(path));
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        rf_ref_entry_t *e = &ref->entries[ref->count];
        if ((e->name = strdup(key)) == NULL) {
            st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", pfe(path));
            goto fail;
        }
        ref->count++;
        RF_CHECK_GOTO(parse_one(path, key, val, e, err), st, fail);
    }
    qsort(ref->entries, ref->count, sizeof(*ref->entries), cmp_ref_name);
    for (size_t i = 0; i < ref->count; i++)
        names[i] = ref->entries[i].name;
    if (rf_name_table_build(&ref->names, names, ref->count, NULL) != RF_OK) {
        st = rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", pfe(path));
        goto fail;
    }
    free(names);
    json_decref(root);
    *ref_p = ref;
    return RF_OK;
fail:
    free(names);
    json_decref(root);
    rf_ref_free(ref);
    return st;
}

rf_status_t rf_ref_load(const char *path, rf_ref_t **ref_p, rf_err_t *err)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return rf_err_set(err, RF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, ncap);
            if (nb == NULL) {
                free(buf);
                fclose(fp);
                return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap = ncap;
        }
        size_t r = fread(buf + len, 1, cap - len, fp);
        len += r;
        if (r == 0)
            break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        return rf_err_set(err, RF_ERR_IO, "%s: read failed", path);
    }
    rf_status_t st = rf_ref_parse(buf, len, path, ref_p, err);
    free(buf);
    return st;
}

void rf_ref_free(rf_ref_t *ref)
{
    if (ref == NULL)
        return;
    for (size_t i = 0; i < ref->count; i++)
        free((char *)ref->entries[i].name);
    free(ref->entries);
    rf_name_table_free(&ref->names);
    free(ref);
}

size_t rf_ref_count(const rf_ref_t *ref)
{
    return ref->count;
}

const rf_ref_entry_t *rf_ref_entry(const rf_ref_t *ref, size_t i)
{
    return i < ref->count ? &ref->entries[i] : NULL;
}

const rf_ref_entry_t *rf_ref_find(const rf_ref_t *ref, const char *name)
{
    size_t i = rf_name_table_find(&ref->names, name);
    return i == SIZE_MAX ? NULL : &ref->entries[i];
}
