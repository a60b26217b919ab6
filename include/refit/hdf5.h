/*
 * refit: HDF5 checkpoints (docs/formats.md, "The HDF5 container").
 *
 * One HDF5 file holds a checkpoint: root attributes format = "refit-checkpoint" and
 * format_version = 1 (optionally config, the model's config.json as a string), a group
 * /tensors with one dataset per tensor named by its checkpoint name. A dataset's type is the
 * native HDF5 one where it exists (IEEE little-endian f16 / f32 / f64, signed and unsigned
 * little-endian integers, BOOL as u8 or h5py's 1-byte enum); BF16, F8_E4M3 and F8_E5M2 are
 * unsigned integers of the same width. Each dataset carries a string attribute dtype (the
 * safetensors name, "BF16"); its dataspace is the tensor's shape (scalar for 0-d). Strings
 * may be fixed- or variable-length, integers any width: h5py's files read as refit's do.
 *
 * The reader checks every rule of DESIGN.md section 11 before a dataset is trusted and
 * refuses a bad file with RF_ERR_PARSE (or RF_ERR_IO) and a message naming the file, the
 * dataset and the rule; HDF5's own error stack becomes part of that message and is never
 * printed (refit turns HDF5's automatic error printing off for the process). Data are read
 * as stored (memory type = file type: no conversion, bit-exact), one hyperslab per read.
 *
 * Checkpoints open through rf_ckpt_open (refit/checkpoint.h), which detects an HDF5 file
 * or a directory holding model.h5; the calls here are the container itself, for the tools
 * (refit-convert, refit-info), the tests and the fuzz target. Nothing here is thread safe
 * (HDF5 is not, in the parallel build): calls are serialized by one process-wide lock.
 */
#ifndef REFIT_HDF5_H
#define REFIT_HDF5_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/safetensors.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_H5_FORMAT "refit-checkpoint"
#define RF_H5_FORMAT_VERSION 1
#define RF_H5_SINGLE_NAME "model.h5"
#define RF_H5_GROUP "/tensors"
/* At most this many datasets in /tensors, and this many bytes of config attribute. */
#define RF_H5_MAX_TENSORS (1u << 20)
#define RF_H5_MAX_CONFIG_BYTES (16u << 20)

typedef struct rf_h5_file rf_h5_file_t;

/* "1.10.8 (parallel)" or "1.10.7 (serial)": the libhdf5 this process runs. Static. */
const char *rf_h5_version(void);
/* Whether libhdf5 was built with MPI-IO (H5_HAVE_PARALLEL). */
bool rf_h5_is_parallel(void);

/* Whether path is a file that starts with the HDF5 signature (at 0, 512, 1024, ...). Never
 * fails: a missing or unreadable path is false. */
bool rf_h5_is_hdf5(const char *path);

/*
 * Opens path (borrowed) read-only and checks the container: signature, root format and
 * format_version, /tensors, then for each dataset (name order): a dataset (not a group or
 * other object), dtype attribute present and a safetensors name, the HDF5 type of that
 * dtype's class, sign and element size, little-endian, a simple (rank <= 8) or scalar
 * dataspace, numel x size without overflow, no filter, data stored and inside the file.
 * hdr (caller-owned, zeroed by the call) gets one entry per dataset, name order: name,
 * dtype, ndim, shape, nbytes; offset is the dataset's file address where contiguous (else 0),
 * file NULL (rf_ckpt_open points it at its file). The config attribute, if any, is
 * rf_h5_config. *f_p is caller-owned (rf_h5_close) and set only on success; on error hdr is
 * left empty. Errors: RF_ERR_IO (open, stat), RF_ERR_PARSE (every rule: names file, dataset
 * and rule), RF_ERR_NOMEM.
 */
rf_status_t rf_h5_open(const char *path, rf_h5_file_t **f_p, rf_st_header_t *hdr,
                       rf_err_t *err);
/* The same checks on an in-memory file image buf[0..len) (borrowed, copied; HDF5's core
 * driver); name_for_errors names it in messages. For the fuzz target and tests. */
rf_status_t rf_h5_open_image(const void *buf, size_t len, const char *name_for_errors,
                             rf_h5_file_t **f_p, rf_st_header_t *hdr, rf_err_t *err);
void rf_h5_close(rf_h5_file_t *f);
/* The root config attribute (NUL-terminated, owned by f), or NULL when absent. */
const char *rf_h5_config(const rf_h5_file_t *f);
/* File size in bytes (image length for an image). */
uint64_t rf_h5_size(const rf_h5_file_t *f);

/*
 * Reads rows [row_begin, row_end) x row bytes [col_byte_begin, col_byte_end) of entry i of
 * the header open filled (same meaning as rf_ckpt_read: row r to dst + (r - row_begin) x
 * dst_pitch) with one hyperslab selection: only those bytes are read from the file. The
 * column bytes must be whole elements; a tensor of rank > 2 reads whole rows or a range of
 * whole dim-1 slices. Ranges are checked by the caller (rf_ckpt_read) and again here.
 * Errors: RF_ERR_INVALID (ranges, pitch, a cut HDF5 cannot select), RF_ERR_IO (HDF5's read
 * failed: names file, dataset and HDF5's message).
 */
rf_status_t rf_h5_read(rf_h5_file_t *f, size_t i, uint64_t row_begin, uint64_t row_end,
                       uint64_t col_byte_begin, uint64_t col_byte_end, void *dst,
                       size_t dst_pitch, rf_err_t *err);

/*
 * Collective reads (parallel libhdf5 only, H5_HAVE_PARALLEL): rf_h5_open_mpio opens path as
 * rf_h5_open does (same checks, same header) with the MPI-IO driver over comm. It is
 * collective over comm: every rank of comm calls it with the same path, and later closes the
 * file with rf_h5_close, also together. On such a file rf_h5_read_all is one collective
 * transfer (H5FD_MPIO_COLLECTIVE): every rank of comm calls it for the same entry i, in the
 * same order, each with its own range; an empty range (row_begin == row_end or col_byte_begin
 * == col_byte_end) takes part reading nothing (dst may be NULL). A rank whose range is refused
 * (RF_ERR_INVALID) still takes part, with an empty selection, so its peers never wait on it;
 * a dataset of zero bytes is skipped by every rank alike. On a file rf_h5_open opened,
 * rf_h5_read_all is rf_h5_read (independent; an empty range reads nothing). rf_h5_open_mpio
 * where libhdf5 is serial: RF_ERR_UNSUPPORTED.
 */
rf_status_t rf_h5_open_mpio(const char *path, MPI_Comm comm, rf_h5_file_t **f_p,
                            rf_st_header_t *hdr, rf_err_t *err);
rf_status_t rf_h5_read_all(rf_h5_file_t *f, size_t i, uint64_t row_begin, uint64_t row_end,
                           uint64_t col_byte_begin, uint64_t col_byte_end, void *dst,
                           size_t dst_pitch, rf_err_t *err);
/* Whether f was opened with the MPI-IO driver (rf_h5_open_mpio). */
bool rf_h5_is_mpio(const rf_h5_file_t *f);
/* rf_h5_read_all calls on f that HDF5 did as collective MPI-IO (H5Pget_mpio_actual_io_mode
 * not H5D_MPIO_NO_COLLECTIVE), and those it broke down to independent I/O. */
void rf_h5_collective_counts(const rf_h5_file_t *f, uint64_t *collective,
                             uint64_t *independent);

/*
 * The writer: creates path (mode 0644; an existing file is refused unless overwrite) with
 * the root attributes (config_json may be NULL) and /tensors; tensors then follow one at a
 * time: rf_h5_writer_begin creates the dataset (contiguous, no fill), rf_h5_writer_rows
 * writes rows [row_begin, row_end) from data (row bytes apart), in any order, so a tensor of
 * any size streams through a small buffer; rf_h5_writer_finish closes the file (a tensor
 * not fully written is refused: RF_ERR_STATE). rf_h5_writer_abort closes and removes the
 * file; on any writer error the caller aborts. Names may not hold '/' or be "." / "".
 * Errors: RF_ERR_INVALID (bad name, dtype, rank, shape overflow, rows), RF_ERR_IO (names the
 * file and HDF5's message), RF_ERR_NOMEM.
 */
typedef struct rf_h5_writer rf_h5_writer_t;
rf_status_t rf_h5_writer_create(const char *path, const char *config_json, bool overwrite,
                                rf_h5_writer_t **w_p, rf_err_t *err);
rf_status_t rf_h5_writer_begin(rf_h5_writer_t *w, const char *name, rf_dtype_t dtype, int ndim,
                               const uint64_t shape[RF_ST_MAX_RANK], rf_err_t *err);
rf_status_t rf_h5_writer_rows(rf_h5_writer_t *w, uint64_t row_begin, uint64_t row_end,
                              const void *data, rf_err_t *err);
rf_status_t rf_h5_writer_finish(rf_h5_writer_t *w, rf_err_t *err);
void rf_h5_writer_abort(rf_h5_writer_t *w);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_HDF5_H */
