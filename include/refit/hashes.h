/*
 * refit: hashes.
 *
 * Two hashes, each for one job. sha256 (OpenSSL EVP) checks tensor bytes against a
 * reference file (DESIGN.md section 12, `--reference`); it is slow and collision resistant.
 * hash64 is XXH3_64bits with seed 0: fast, not cryptographic; it keys name tables and feeds
 * the generator (v = f(hash64(name), index, step)), so its value is part of the data format
 * and must never change. None of these functions is collective; all are thread safe on
 * distinct contexts.
 */
#ifndef REFIT_HASHES_H
#define REFIT_HASHES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_SHA256_BYTES 32
#define RF_SHA256_HEX_CHARS 64 /* plus a NUL: char hex[RF_SHA256_HEX_CHARS + 1] */

/* An incremental sha256. The context owns an OpenSSL EVP_MD_CTX from init until final or
 * rf_sha256_ctx_free; the struct itself is caller-owned (stack is fine). */
typedef struct rf_sha256_ctx {
    void *md; /* EVP_MD_CTX *, owned */
} rf_sha256_ctx_t;

/* Starts a digest. Errors: RF_ERR_NOMEM, RF_ERR_INTERNAL (OpenSSL refused). */
rf_status_t rf_sha256_init(rf_sha256_ctx_t *ctx, rf_err_t *err);
/* Adds len bytes at data (borrowed). data may be NULL when len is 0. */
rf_status_t rf_sha256_update(rf_sha256_ctx_t *ctx, const void *data, size_t len, rf_err_t *err);
/* Writes the 32-byte digest to out and releases the OpenSSL context (also on error). */
rf_status_t rf_sha256_final(rf_sha256_ctx_t *ctx, uint8_t out[RF_SHA256_BYTES], rf_err_t *err);
/* Releases a context that was not finalised (after an error). Safe on a finalised or
 * zeroed context, and on NULL. */
void rf_sha256_ctx_free(rf_sha256_ctx_t *ctx);

/* One-shot sha256 of len bytes at data (borrowed) into out. RF_OK, or RF_ERR_NOMEM /
 * RF_ERR_INTERNAL if OpenSSL fails. */
rf_status_t rf_sha256(const void *data, size_t len, uint8_t out[RF_SHA256_BYTES]);

/* Lower-case hex of a digest: 64 characters and a NUL into out. */
void rf_sha256_hex(const uint8_t digest[RF_SHA256_BYTES], char out[RF_SHA256_HEX_CHARS + 1]);
/* Parses exactly 64 hex digits (either case, nothing after) into out; false if malformed. */
bool rf_sha256_parse_hex(const char *hex, uint8_t out[RF_SHA256_BYTES]);

/* XXH3_64bits(data, len), seed 0. data may be NULL when len is 0. */
uint64_t rf_hash64(const void *data, size_t len);
/* XXH3_64bits of the string's bytes without the NUL. */
uint64_t rf_hash64_str(const char *s);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_HASHES_H */
