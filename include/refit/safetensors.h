/*
 * refit: safetensors files.
 *
 * A safetensors file is an 8-byte little-endian header length n, n bytes of JSON (an object:
 * tensor name -> {"dtype", "shape", "data_offsets": [begin, end)} plus an optional
 * "__metadata__" map of strings), then the tensor data; offsets are relative to the first
 * byte after the header. Everything in a header is untrusted: the parser enforces every
 * limit of DESIGN.md section 11 and refuses a bad file with RF_ERR_PARSE and a message naming
 * the file and the tensor or field, never crashing and never reading outside the buffer.
 *
 * Checkpoint directories of these files (and HDF5 checkpoints) are refit/checkpoint.h.
 *
 * Nothing here is collective. Parsing and opening are not thread safe on one object.
 */
#ifndef REFIT_SAFETENSORS_H
#define REFIT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_ST_MAX_RANK 8
/* The safetensors reference implementation's MAX_HEADER_SIZE (100 MB, decimal). */
#define RF_ST_MAX_HEADER_BYTES 100000000ull
#define RF_ST_INDEX_NAME "model.safetensors.index.json"
#define RF_ST_SINGLE_NAME "model.safetensors"

typedef struct rf_st_file rf_st_file_t;

/* One tensor of a header. Owned by its header; valid until the header (file, checkpoint)
 * is freed. */
typedef struct rf_st_entry {
    const char *name;              /* NUL-terminated, owned by the header */
    rf_dtype_t dtype;
    int ndim;                      /* 0..RF_ST_MAX_RANK; 0 = scalar */
    uint64_t shape[RF_ST_MAX_RANK]; /* elements per dim; entries >= ndim are 0 */
    uint64_t offset;               /* absolute file offset of the data: 8 + n + begin */
    uint64_t nbytes;               /* end - begin == numel x dtype size */
    const rf_st_file_t *file;      /* the file holding it (borrowed); NULL for a header
                                      parsed from a buffer */
} rf_st_entry_t;

/* A parsed header. Caller-owned struct; its arrays are owned and freed by
 * rf_st_header_free. entries are in data order (ascending offset). */
typedef struct rf_st_header {
    size_t count;
    rf_st_entry_t *entries;
    size_t n_meta;        /* "__metadata__" pairs, in file order */
    char **meta_keys;
    char **meta_values;
    uint64_t header_len;  /* n: JSON bytes (with padding) */
    uint64_t data_bytes;  /* bytes after the header */
    void *names_;         /* private: name -> index table */
} rf_st_header_t;

/*
 * Parses the JSON header json[0..json_len) (borrowed; need not be NUL-terminated) of a file
 * whose data section holds data_bytes bytes. path_for_errors (borrowed, may be NULL) names
 * the file in messages. Entry offsets are absolute file offsets, 8 + json_len + begin.
 * Checks: json_len <= RF_ST_MAX_HEADER_BYTES; valid UTF-8 JSON object with no duplicate keys;
 * each tensor an object of exactly dtype (a safetensors spelling from DESIGN.md section 11),
 * shape (array of at most 8 non-negative integers), data_offsets (two non-negative integers,
 * begin <= end); numel x dtype size computed in uint64 without overflow and == end - begin;
 * offsets sorted, contiguous, starting at 0 and ending at data_bytes; __metadata__ an object
 * of strings. Errors: RF_ERR_PARSE (message names file and tensor / field), RF_ERR_NOMEM.
 * On error *out is left empty (rf_st_header_free still safe). Usable on fuzz input.
 */
rf_status_t rf_st_parse_header(const char *json, size_t json_len, uint64_t data_bytes,
                               const char *path_for_errors, rf_st_header_t *out, rf_err_t *err);
/* Frees what a header owns and zeroes it; h may be NULL or zeroed. */
void rf_st_header_free(rf_st_header_t *h);
/* The entry called name, or NULL. O(1) expected. */
const rf_st_entry_t *rf_st_header_find(const rf_st_header_t *h, const char *name);
/* Value of a __metadata__ key, or NULL. Linear in n_meta. */
const char *rf_st_header_meta(const rf_st_header_t *h, const char *key);

/* Elements of an entry (product of its shape; 1 for a scalar). */
uint64_t rf_st_entry_numel(const rf_st_entry_t *e);
/* Rows along dim 0: shape[0], or 1 for a scalar. */
uint64_t rf_st_entry_rows(const rf_st_entry_t *e);
/* Bytes per row: product of shape[1..] x dtype size (dtype size for 1-D and scalars);
 * UINT64_MAX if shape[0] is 0 and the product overflows. */
uint64_t rf_st_entry_row_bytes(const rf_st_entry_t *e);

/*
 * Opens path (borrowed), preads the 8-byte length and the header and parses it (all the
 * checks of rf_st_parse_header, plus n <= file size - 8). *f_p is owned by the caller
 * (rf_st_file_close) and set only on success. Errors: RF_ERR_IO (open, stat, not a regular
 * file, read), RF_ERR_PARSE (file shorter than 8 bytes, bad length, bad header), RF_ERR_NOMEM.
 */
rf_status_t rf_st_file_open(const char *path, rf_st_file_t **f_p, rf_err_t *err);
void rf_st_file_close(rf_st_file_t *f);
/* The path given to open (owned by f). */
const char *rf_st_file_path(const rf_st_file_t *f);
/* The parsed header (owned by f). */
const rf_st_header_t *rf_st_file_header(const rf_st_file_t *f);
/* File size in bytes, and the bytes open read (8 + header length). */
uint64_t rf_st_file_size(const rf_st_file_t *f);
uint64_t rf_st_file_header_bytes_read(const rf_st_file_t *f);
/* The open descriptor, for preads of tensor data (rf_st_pread_full); -1 for an adopted file. */
int rf_st_file_fd(const rf_st_file_t *f);
/*
 * A file object over a header parsed elsewhere (an HDF5 checkpoint's datasets, refit/hdf5.h),
 * for refit/checkpoint.h: path (borrowed, copied), size in bytes, no descriptor and no header
 * bytes read; what hdr owns moves into the file (hdr is zeroed) and every entry's file points
 * at it. *f_p is caller-owned (rf_st_file_close) and set only on success. Errors: RF_ERR_NOMEM
 * (hdr is then freed).
 */
rf_status_t rf_st_file_adopt(const char *path, uint64_t size, rf_st_header_t *hdr,
                             rf_st_file_t **f_p, rf_err_t *err);
/* preads exactly len bytes of fd at off into buf, retrying short reads and EINTR. Errors:
 * RF_ERR_IO on error or end of file, the message naming path and what (the thing read). */
rf_status_t rf_st_pread_full(int fd, void *buf, uint64_t len, uint64_t off, const char *path,
                             const char *what, rf_err_t *err);

/*
 * Writes a safetensors file at path (created or truncated, mode 0644) holding n tensors, in
 * the given order, data packed back to back: names[i] (unique), dtypes[i], ndims[i] (0..8),
 * shapes[i][0..ndims[i]), data[i] (numel x dtype size bytes, borrowed; may be NULL when that
 * is 0). meta_json (borrowed, may be NULL) is a JSON object of strings stored as
 * "__metadata__". The header is compact JSON padded with spaces so that the data starts at a
 * multiple of 8, as the Python writer does. Errors: RF_ERR_INVALID (bad dtype, rank, shape
 * overflow, duplicate name, bad meta_json), RF_ERR_IO (names path), RF_ERR_NOMEM. On error
 * the partial file is removed.
 */
rf_status_t rf_st_write_file(const char *path, size_t n, const char *const names[],
                             const rf_dtype_t dtypes[], const int ndims[],
                             const uint64_t shapes[][RF_ST_MAX_RANK], const void *const data[],
                             const char *meta_json, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_SAFETENSORS_H */
