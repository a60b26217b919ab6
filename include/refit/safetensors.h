/*
 * refit: safetensors files and checkpoint directories.
 *
 * A safetensors file is an 8-byte little-endian header length n, n bytes of JSON (an object:
 * tensor name -> {"dtype", "shape", "data_offsets": [begin, end)} plus an optional
 * "__metadata__" map of strings), then the tensor data; offsets are relative to the first
 * byte after the header. Everything in a header is untrusted: the parser enforces every
 * limit of DESIGN.md section 11 and refuses a bad file with RF_ERR_PARSE and a message naming
 * the file and the tensor or field, never crashing and never reading outside the buffer.
 *
 * A checkpoint directory (DESIGN.md section 14) is either sharded (model.safetensors.index.json
 * whose "weight_map" maps each tensor to a file in the directory) or one model.safetensors.
 * Reads preads only the bytes asked for (a trainer rank reads only its shard's rows) and
 * count them: bytes_read (tensor data) apart from header_bytes_read (8-byte prefixes and
 * headers), DESIGN.md section 16.
 *
 * rf_ckpt_open also opens an HDF5 checkpoint (refit/hdf5.h): a .h5 / .hdf5 file, a file
 * with the HDF5 signature, or a directory holding model.h5 (after the two safetensors
 * names); it is then one "file" whose entries are its datasets (offset: the dataset's file
 * address) and reads are hyperslabs of them.
 *
 * Nothing here is collective. Parsing and opening are not thread safe on one object; reads
 * on one open checkpoint may run from several threads (pread, atomic counters).
 */
#ifndef REFIT_SAFETENSORS_H
#define REFIT_SAFETENSORS_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/model.h"
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
typedef struct rf_ckpt rf_ckpt_t;

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

/*
 * Opens checkpoint directory dir (borrowed), or an HDF5 checkpoint (above): the file itself,
 * or dir/model.h5 when dir holds neither safetensors name; the HDF5 rules are rf_h5_open's,
 * and header_bytes_read starts (and stays) at 0, HDF5's own metadata reads not counted. With model.safetensors.index.json: its
 * "weight_map" (tensor -> file name in dir, no absolute path or ".." component) is read,
 * every file named opened once, and the index and the headers must agree exactly: a tensor
 * of the index absent from its file's header, or a header tensor absent from the index (or
 * mapped to another file) is RF_ERR_PARSE naming tensor, file and index; a file the index
 * names that does not exist is RF_ERR_PARSE naming the index, tensor and file. Without an
 * index: model.safetensors. Neither: RF_ERR_IO naming dir. Other errors as rf_st_file_open.
 * *ck_p is caller-owned (rf_ckpt_close) and set only on success. The counters start with
 * header_bytes_read = the header bytes open read (index JSON not counted), bytes_read = 0.
 */
rf_status_t rf_ckpt_open(const char *dir, rf_ckpt_t **ck_p, rf_err_t *err);
void rf_ckpt_close(rf_ckpt_t *ck);

/* Tensors across all files; entries are ordered by name (strcmp). */
size_t rf_ckpt_count(const rf_ckpt_t *ck);
/* The i-th entry (i < count), or NULL. Owned by ck. */
const rf_st_entry_t *rf_ckpt_entry(const rf_ckpt_t *ck, size_t i);
/* The entry called name, or NULL. O(1) expected. Its ->file says which shard holds it. */
const rf_st_entry_t *rf_ckpt_find(const rf_ckpt_t *ck, const char *name);
/* Number of safetensors files, and the i-th (owned by ck) in file-name order. */
size_t rf_ckpt_file_count(const rf_ckpt_t *ck);
const rf_st_file_t *rf_ckpt_file(const rf_ckpt_t *ck, size_t i);

/*
 * Reads rows [row_begin, row_end) of entry e (which must come from ck) and, inside each row,
 * bytes [col_byte_begin, col_byte_end) of the row (rf_st_entry_row_bytes), into dst
 * (borrowed): row r goes to dst + (r - row_begin) x dst_pitch. dst_pitch is in bytes and
 * must be >= col_byte_end - col_byte_begin when more than one row is read. Only the bytes
 * asked for are read: full rows with dst_pitch == row bytes take one pread, otherwise one
 * pread per row. Short reads and EINTR are retried. Adds the data bytes read to bytes_read.
 * Errors: RF_ERR_INVALID (ranges outside the tensor, begin > end, pitch too small, NULL),
 * RF_ERR_IO (read failed or file shrank: names file and tensor).
 */
rf_status_t rf_ckpt_read(rf_ckpt_t *ck, const rf_st_entry_t *e, uint64_t row_begin,
                         uint64_t row_end, uint64_t col_byte_begin, uint64_t col_byte_end,
                         void *dst, size_t dst_pitch, rf_err_t *err);

/*
 * Lock-step reads by the ranks of comm (the trainer ranks of one stage), between
 * rf_ckpt_collective_begin and rf_ckpt_collective_end, both collective over comm. For an
 * HDF5 checkpoint where libhdf5 is parallel, begin opens a second handle on the file with
 * the MPI-IO driver over comm (its datasets must be those ck opened, else RF_ERR_MISMATCH)
 * and sets *on: rf_ckpt_read_all is then one collective transfer per call, and every rank of
 * comm calls it for the same entry in the same order, each with its own range (an empty
 * range takes part reading nothing; a refused range still takes part, then fails on its
 * rank). Otherwise (safetensors, serial libhdf5, comm MPI_COMM_NULL or of one rank, or the
 * environment's REFIT_HDF5_COLLECTIVE=0, read on every rank alike) *on is false, begin and
 * end do nothing, and rf_ckpt_read_all is rf_ckpt_read (an empty range reads nothing).
 * bytes_read counts each rank's own bytes. end closes the handle (collective; nothing to do
 * when begin failed or turned nothing on). rf_ckpt_collective_counts: the collective reads
 * since open, those HDF5 did as collective MPI-IO and those it broke down to independent.
 */
rf_status_t rf_ckpt_collective_begin(rf_ckpt_t *ck, MPI_Comm comm, bool *on, rf_err_t *err);
rf_status_t rf_ckpt_read_all(rf_ckpt_t *ck, const rf_st_entry_t *e, uint64_t row_begin,
                             uint64_t row_end, uint64_t col_byte_begin, uint64_t col_byte_end,
                             void *dst, size_t dst_pitch, rf_err_t *err);
rf_status_t rf_ckpt_collective_end(rf_ckpt_t *ck, rf_err_t *err);
void rf_ckpt_collective_counts(const rf_ckpt_t *ck, uint64_t *collective,
                               uint64_t *independent);

/*
 * Compares the bytes of entries a and b of ck (same rows and row bytes, else RF_ERR_INVALID):
 * *first_row = -1 when equal, else the first row (dim 0) that differs. Reads block by block
 * (at most block_bytes of each at a time; 0: 4 MiB), so a tensor of any size is compared in
 * bounded memory; the bytes read count in bytes_read. Errors as rf_ckpt_read, RF_ERR_NOMEM.
 */
rf_status_t rf_ckpt_compare(rf_ckpt_t *ck, const rf_st_entry_t *a, const rf_st_entry_t *b,
                            size_t block_bytes, int64_t *first_row, rf_err_t *err);

/* "hdf5" for an HDF5 checkpoint, else "safetensors". Static. */
const char *rf_ckpt_format(const rf_ckpt_t *ck);
/* An HDF5 checkpoint's root config attribute (the model's config.json; owned by ck), or NULL
 * (safetensors, or none stored). */
const char *rf_ckpt_config(const rf_ckpt_t *ck);
/*
 * The checkpoint's own model config against the topology's (rf_model_config_compare): an
 * HDF5 config attribute when ck has one (messages name "PATH (root attribute config)"), else
 * PATH/config.json when it exists (rf_model_config_check_checkpoint; RF_OK when absent).
 * ck may be NULL. Errors as rf_model_config_parse / rf_model_config_compare.
 */
rf_status_t rf_ckpt_check_config(const rf_ckpt_t *ck, const char *path,
                                 const rf_model_config_t *topo, rf_quant_t quant, int64_t group,
                                 rf_err_t *err);

/* Tensor data bytes read since open or the last reset. */
uint64_t rf_ckpt_bytes_read(const rf_ckpt_t *ck);
/* 8-byte prefixes + header bytes read since open or the last reset. */
uint64_t rf_ckpt_header_bytes_read(const rf_ckpt_t *ck);
/* Sets both counters to 0. */
void rf_ckpt_reset_counters(rf_ckpt_t *ck);

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
