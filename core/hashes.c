/*
 * refit: sha256 through OpenSSL's EVP interface (the low-level SHA256_* calls are
 * deprecated in OpenSSL 3) and hash64 = XXH3_64bits from libxxhash.
 */
#include "refit/hashes.h"

#include <openssl/evp.h>
#include <string.h>
#include <xxhash.h>

rf_status_t rf_sha256_init(rf_sha256_ctx_t *ctx, rf_err_t *err)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md == NULL) {
        ctx->md = NULL;
        return rf_err_set(err, RF_ERR_NOMEM, "sha256: cannot allocate an evp context");
    }
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        ctx->md = NULL;
        return rf_err_set(err, RF_ERR_INTERNAL, "sha256: EVP_DigestInit_ex failed");
    }
    ctx->md = md;
    return RF_OK;
}

rf_status_t rf_sha256_update(rf_sha256_ctx_t *ctx, const void *data, size_t len, rf_err_t *err)
{
    if (ctx->md == NULL)
        return rf_err_set(err, RF_ERR_STATE, "sha256: update on a context not initialised");
    if (len == 0)
        return RF_OK;
    if (EVP_DigestUpdate((EVP_MD_CTX *)ctx->md, data, len) != 1)
        return rf_err_set(err, RF_ERR_INTERNAL, "sha256: EVP_DigestUpdate failed");
    return RF_OK;
}

rf_status_t rf_sha256_final(rf_sha256_ctx_t *ctx, uint8_t out[RF_SHA256_BYTES], rf_err_t *err)
{
    rf_status_t st = RF_OK;
    unsigned int n = 0;
    if (ctx->md == NULL)
        return rf_err_set(err, RF_ERR_STATE, "sha256: final on a context not initialised");
    if (EVP_DigestFinal_ex((EVP_MD_CTX *)ctx->md, out, &n) != 1 || n != RF_SHA256_BYTES)
        st = rf_err_set(err, RF_ERR_INTERNAL, "sha256: EVP_DigestFinal_ex failed");
    rf_sha256_ctx_free(ctx);
    return st;
}

void rf_sha256_ctx_free(rf_sha256_ctx_t *ctx)
{
    if (ctx == NULL || ctx->md == NULL)
        return;
    EVP_MD_CTX_free((EVP_MD_CTX *)ctx->md);
    ctx->md = NULL;
}

rf_status_t rf_sha256(const void *data, size_t len, uint8_t out[RF_SHA256_BYTES])
{
    rf_sha256_ctx_t ctx;
    RF_CHECK(rf_sha256_init(&ctx, NULL));
    rf_status_t st = rf_sha256_update(&ctx, data, len, NULL);
    if (st != RF_OK) {
        rf_sha256_ctx_free(&ctx);
        return st;
    }
    return rf_sha256_final(&ctx, out, NULL);
}

void rf_sha256_hex(const uint8_t digest[RF_SHA256_BYTES], char out[RF_SHA256_HEX_CHARS + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < RF_SHA256_BYTES; i++) {
        out[2 * i] = digits[digest[i] >> 4];
        out[2 * i + 1] = digits[digest[i] & 15];
    }
    out[RF_SHA256_HEX_CHARS] = '\0';
}

static int rf_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool rf_sha256_parse_hex(const char *hex, uint8_t out[RF_SHA256_BYTES])
{
    if (hex == NULL || strlen(hex) != RF_SHA256_HEX_CHARS)
        return false;
    for (int i = 0; i < RF_SHA256_BYTES; i++) {
        int hi = rf_hex_digit(hex[2 * i]), lo = rf_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

uint64_t rf_hash64(const void *data, size_t len)
{
    return (uint64_t)XXH3_64bits(data, len);
}

uint64_t rf_hash64_str(const char *s)
{
    return (uint64_t)XXH3_64bits(s, strlen(s));
}
