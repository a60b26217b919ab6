/*
 * refit: checkpoints (DESIGN.md section 14): one rf_ckpt_t over a directory of safetensors
 * files (refit/safetensors.h) or an HDF5 file (refit/hdf5.h).
 *
 * A checkpoint directory is either sharded (model.safetensors.index.json whose "weight_map"
 * maps each tensor to a file in the directory) or one model.safetensors.
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
#ifndef REFIT_CHECKPOINT_H
#define REFIT_CHECKPOINT_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/model.h"
#include "refit/safetensors.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_ckpt rf_ckpt_t;

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
 * REFIT_HDF5_COLLECTIVE (rf_ckpt_collective_begin) is read here: a value other than unset,
 * empty, 0 or 1 is RF_ERR_INVALID naming it, whatever the checkpoint's format.
 * *ck_p is caller-owned (rf_ckpt_close) and set only on success. The counters start with
 * header_bytes_read = the header bytes open read (index JSON not counted), bytes_read = 0.
 */
rf_status_t rf_ckpt_open(const char *dir, rf_ckpt_t **ck_p, rf_err_t *err);
void rf_ckpt_close(rf_ckpt_t *ck);

/*
 * A family's checkpoint-name alias (rf_family_aliases): every entry whose name begins with
 * `stored` is renamed to `canonical` + the rest, and rf_ckpt_find / rf_ckpt_entry then know
 * only the new name. *renamed_p (may be NULL): entries renamed. Errors: RF_ERR_PARSE when a
 * tensor is stored under both names, RF_ERR_NOMEM (ck is then unusable: close it). Not
 * collective; not thread safe against readers of ck.
 */
rf_status_t rf_ckpt_rename_prefix(rf_ckpt_t *ck, const char *stored, const char *canonical,
                                  size_t *renamed_p, rf_err_t *err);

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
 * environment's REFIT_HDF5_COLLECTIVE=0 as rf_ckpt_open read it, alike on every rank: another
 * value than 0 or 1 makes rf_ckpt_open fail, RF_ERR_INVALID naming it) *on is false, begin and
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

#ifdef __cplusplus
}
#endif
#endif /* REFIT_CHECKPOINT_H */
