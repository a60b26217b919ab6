/*
 * refit: reference files (`tensors.reference.json`, `--reference FILE`, DESIGN.md section 12).
 *
 * A JSON object: tensor name -> {"dtype": PyTorch spelling ("torch.bfloat16"; the
 * safetensors spelling is accepted too), "shape": [non-negative integers, at most 8],
 * "sha256": 64 hex digits of the tensor's bytes as stored}. Other fields are refused.
 * Nothing here is collective; a loaded reference is read-only and may be shared by threads.
 */
#ifndef REFIT_REFERENCE_H
#define REFIT_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/hashes.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_REF_MAX_RANK 8

/* One tensor of a reference file; owned by the rf_ref_t. */
typedef struct rf_ref_entry {
    const char *name;
    rf_dtype_t dtype;
    int ndim;
    uint64_t shape[RF_REF_MAX_RANK]; /* entries >= ndim are 0 */
    uint8_t sha256[RF_SHA256_BYTES];
    char sha256_hex[RF_SHA256_HEX_CHARS + 1]; /* lower case */
} rf_ref_entry_t;

typedef struct rf_ref rf_ref_t;

/*
 * Loads path (borrowed). *ref_p is caller-owned (rf_ref_free), set only on success.
 * Errors: RF_ERR_IO (cannot read), RF_ERR_PARSE (not a JSON object, duplicate key, a
 * tensor whose dtype / shape / sha256 is missing, of the wrong type or malformed, unknown
 * field: the message names the file, tensor and field), RF_ERR_NOMEM.
 */
rf_status_t rf_ref_load(const char *path, rf_ref_t **ref_p, rf_err_t *err);
/* Same, from a buffer json[0..len) (borrowed); path_for_errors may be NULL. */
rf_status_t rf_ref_parse(const char *json, size_t len, const char *path_for_errors,
                         rf_ref_t **ref_p, rf_err_t *err);
void rf_ref_free(rf_ref_t *ref);

/* Number of tensors; entries are ordered by name (strcmp). */
size_t rf_ref_count(const rf_ref_t *ref);
/* The i-th entry, or NULL if i >= count. */
const rf_ref_entry_t *rf_ref_entry(const rf_ref_t *ref, size_t i);
/* The entry called name, or NULL. O(1) expected. */
const rf_ref_entry_t *rf_ref_find(const rf_ref_t *ref, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_REFERENCE_H */
