/*
 * Unit tests for formats/safetensors.c, formats/reference.c and core/hashes.c: every
 * fixture's tensors read through rf_ckpt_read hash to tensors.reference.json (written by
 * Python, an independent reference); partial reads equal the matching bytes of a full read
 * and count exactly the bytes asked for; every malformed input of DESIGN.md section 11 is
 * refused with RF_ERR_PARSE naming the offending tensor or field; the writer round-trips.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "refit/checkpoint.h"
#include "refit/hashes.h"
#include "refit/reference.h"
#include "refit/safetensors.h"

static const char *const fixtures[] = {"llama-tiny", "qwen3-tiny-tied", "qwen3-moe-tiny",
                                       "qwen3-fp8-tiny", "qwen3-fp8-tiny/bf16-source"};
#define NFIX (sizeof(fixtures) / sizeof(fixtures[0]))

static char *fix_path(const char *fix, const char *file)
{
    static const char *base = REFIT_TEST_DATA;
    size_t n = strlen(base) + strlen(fix) + (file ? strlen(file) : 0) + 3;
    char *p = malloc(n);
    ck_assert_ptr_nonnull(p);
    snprintf(p, n, "%s/%s%s%s", base, fix, file ? "/" : "", file ? file : "");
    return p;
}

static uint64_t file_size(const char *path)
{
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    return (uint64_t)sb.st_size;
}

/* Full read of e into a fresh buffer (caller frees). */
static uint8_t *read_all(rf_ckpt_t *ck, const rf_st_entry_t *e)
{
    rf_err_t err;
    rf_err_clear(&err);
    uint8_t *buf = malloc(e->nbytes ? e->nbytes : 1);
    ck_assert_ptr_nonnull(buf);
    uint64_t rb = rf_st_entry_row_bytes(e);
    ck_assert_int_eq(rf_ckpt_read(ck, e, 0, rf_st_entry_rows(e), 0, rb, buf, rb, &err), RF_OK);
    return buf;
}

/* ---- hashes --------------------------------------------------------------------------- */

START_TEST(test_hashes)
{
    uint8_t d[32], d2[32];
    char hex[65];
    ck_assert_int_eq(rf_sha256("abc", 3, d), RF_OK);
    rf_sha256_hex(d, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    ck_assert_int_eq(rf_sha256(NULL, 0, d), RF_OK);
    rf_sha256_hex(d, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    /* incremental == one shot */
    rf_sha256_ctx_t ctx;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_sha256_init(&ctx, &err), RF_OK);
    ck_assert_int_eq(rf_sha256_update(&ctx, "a", 1, &err), RF_OK);
    ck_assert_int_eq(rf_sha256_update(&ctx, "bc", 2, &err), RF_OK);
    ck_assert_int_eq(rf_sha256_final(&ctx, d2, &err), RF_OK);
    ck_assert_int_eq(rf_sha256("abc", 3, d), RF_OK);
    ck_assert_mem_eq(d, d2, 32);
    rf_sha256_ctx_free(&ctx); /* safe after final */
    ck_assert(rf_sha256_parse_hex(
        "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", d2));
    ck_assert_mem_eq(d, d2, 32);
    ck_assert(!rf_sha256_parse_hex("ba78", d2));
    ck_assert(!rf_sha256_parse_hex(
        "zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", d2));
    /* XXH3_64bits published value for the empty input, seed 0 */
    ck_assert_uint_eq(rf_hash64(NULL, 0), 0x2D06800538D394C2ull);
    ck_assert_uint_eq(rf_hash64_str("lm_head.weight"), rf_hash64("lm_head.weight", 14));
    ck_assert_uint_ne(rf_hash64_str("a"), rf_hash64_str("b"));
}
END_TEST

/* ---- fixtures against tensors.reference.json ------------------------------------------ */

START_TEST(test_fixture_sha256)
{
    const char *fix = fixtures[_i];
    char *dir = fix_path(fix, NULL);
    char *refp = fix_path(fix, "tensors.reference.json");
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    rf_ref_t *ref = NULL;
    ck_assert_msg(rf_ckpt_open(dir, &ck, &err) == RF_OK, "%s: %s", fix, err.msg);
    ck_assert_msg(rf_ref_load(refp, &ref, &err) == RF_OK, "%s: %s", fix, err.msg);
    ck_assert_uint_gt(rf_ref_count(ref), 0);
    ck_assert_uint_eq(rf_ckpt_count(ck), rf_ref_count(ref));

    /* header bytes = file sizes - data bytes, computed independently of the reader */
    uint64_t fsizes = 0, data = 0;
    for (size_t i = 0; i < rf_ckpt_file_count(ck); i++)
        fsizes += file_size(rf_st_file_path(rf_ckpt_file(ck, i)));
    for (size_t i = 0; i < rf_ckpt_count(ck); i++)
        data += rf_ckpt_entry(ck, i)->nbytes;
    ck_assert_uint_eq(rf_ckpt_header_bytes_read(ck), fsizes - data);
    ck_assert_uint_eq(rf_ckpt_bytes_read(ck), 0);

    for (size_t i = 0; i < rf_ref_count(ref); i++) {
        const rf_ref_entry_t *r = rf_ref_entry(ref, i);
        const rf_st_entry_t *e = rf_ckpt_find(ck, r->name);
        ck_assert_msg(e != NULL, "%s: %s not in checkpoint", fix, r->name);
        ck_assert_str_eq(e->name, r->name);
        ck_assert_ptr_eq(rf_ref_find(ref, r->name), r);
        ck_assert_msg(e->dtype == r->dtype, "%s: %s dtype", fix, r->name);
        ck_assert_int_eq(e->ndim, r->ndim);
        for (int d = 0; d < e->ndim; d++)
            ck_assert_uint_eq(e->shape[d], r->shape[d]);
        ck_assert_uint_eq(e->nbytes, rf_st_entry_numel(e) * rf_dtype_size(e->dtype));
        uint8_t *buf = read_all(ck, e);
        uint8_t dg[32];
        char hex[65];
        ck_assert_int_eq(rf_sha256(buf, e->nbytes, dg), RF_OK);
        rf_sha256_hex(dg, hex);
        ck_assert_msg(strcmp(hex, r->sha256_hex) == 0, "%s: %s sha256 %s != %s", fix, r->name,
                      hex, r->sha256_hex);
        free(buf);
    }
    ck_assert_uint_eq(rf_ckpt_bytes_read(ck), data);
    rf_ckpt_reset_counters(ck);
    ck_assert_uint_eq(rf_ckpt_bytes_read(ck), 0);
    ck_assert_uint_eq(rf_ckpt_header_bytes_read(ck), 0);
    ck_assert_ptr_null(rf_ckpt_find(ck, "no.such.tensor"));
    ck_assert_ptr_null(rf_ckpt_entry(ck, rf_ckpt_count(ck)));
    rf_ref_free(ref);
    rf_ckpt_close(ck);
    free(dir);
    free(refp);
}
END_TEST

START_TEST(test_fixture_layout)
{
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    char *dir = fix_path("llama-tiny", NULL);
    ck_assert_int_eq(rf_ckpt_open(dir, &ck, &err), RF_OK);
    ck_assert_uint_eq(rf_ckpt_file_count(ck), 3);
    const rf_st_entry_t *e = rf_ckpt_find(ck, "model.embed_tokens.weight");
    ck_assert_ptr_nonnull(e);
    ck_assert(strstr(rf_st_file_path(e->file), "model-00001-of-00003.safetensors") != NULL);
    ck_assert_int_eq(e->dtype, RF_DTYPE_BF16);
    ck_assert_uint_eq(e->shape[0], 1003);
    ck_assert_uint_eq(e->shape[1], 96);
    ck_assert_uint_eq(e->offset, 8 + 648); /* first tensor of shard 1, header 648 bytes */
    ck_assert_str_eq(rf_st_header_meta(rf_st_file_header(e->file), "format"), "pt");
    for (size_t i = 1; i < rf_ckpt_count(ck); i++)
        ck_assert_int_lt(strcmp(rf_ckpt_entry(ck, i - 1)->name, rf_ckpt_entry(ck, i)->name), 0);
    rf_ckpt_close(ck);
    free(dir);

    dir = fix_path("qwen3-fp8-tiny", NULL);
    ck_assert_int_eq(rf_ckpt_open(dir, &ck, &err), RF_OK);
    ck_assert_uint_eq(rf_ckpt_file_count(ck), 1);
    e = rf_ckpt_find(ck, "model.layers.0.mlp.down_proj.weight_scale_inv");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->dtype, RF_DTYPE_F32);
    ck_assert_uint_eq(e->nbytes, 32);
    e = rf_ckpt_find(ck, "model.layers.0.mlp.down_proj.weight");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->dtype, RF_DTYPE_F8_E4M3);
    rf_ckpt_close(ck);
    free(dir);
}
END_TEST

/* ---- partial reads -------------------------------------------------------------------- */

static void check_partial(rf_ckpt_t *ck, const rf_st_entry_t *e, const uint8_t *full,
                          uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1, size_t pitch)
{
    rf_err_t err;
    rf_err_clear(&err);
    uint64_t rb = rf_st_entry_row_bytes(e), n = r1 - r0, w = c1 - c0;
    size_t sz = n ? (size_t)((n - 1) * pitch + w) : 1;
    uint8_t *buf = malloc(sz + 16);
    ck_assert_ptr_nonnull(buf);
    memset(buf, 0xA5, sz + 16);
    uint64_t before = rf_ckpt_bytes_read(ck);
    ck_assert_msg(rf_ckpt_read(ck, e, r0, r1, c0, c1, buf, pitch, &err) == RF_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(rf_ckpt_bytes_read(ck) - before, n * w);
    for (uint64_t r = 0; r < n; r++) {
        ck_assert_msg(memcmp(buf + r * pitch, full + (r0 + r) * rb + c0, w) == 0,
                      "%s rows [%llu,%llu) cols [%llu,%llu) row %llu differs", e->name,
                      (unsigned long long)r0, (unsigned long long)r1, (unsigned long long)c0,
                      (unsigned long long)c1, (unsigned long long)r);
        /* bytes between rows untouched */
        if (r + 1 < n)
            for (size_t k = w; k < pitch; k++)
                ck_assert_uint_eq(buf[r * pitch + k], 0xA5);
    }
    for (size_t k = 0; k < 16; k++)
        ck_assert_uint_eq(buf[sz + k], 0xA5);
    free(buf);
}

START_TEST(test_partial_reads)
{
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    char *dir = fix_path(fixtures[_i], NULL);
    ck_assert_int_eq(rf_ckpt_open(dir, &ck, &err), RF_OK);
    size_t tested = 0;
    for (size_t i = 0; i < rf_ckpt_count(ck); i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        size_t es = rf_dtype_size(e->dtype);
        uint8_t *full = read_all(ck, e);
        rf_ckpt_reset_counters(ck);
        uint64_t r0 = rows / 3, r1 = rows - rows / 4;
        uint64_t c0 = (rb / es / 4) * es, c1 = rb - (rb / es / 3) * es;
        check_partial(ck, e, full, r0, r1, 0, rb, (size_t)rb);      /* rows, one pread */
        check_partial(ck, e, full, r0, r1, 0, rb, (size_t)rb + 24); /* rows, padded pitch */
        check_partial(ck, e, full, r0, r1, c0, c1, (size_t)(c1 - c0));
        check_partial(ck, e, full, 0, rows, c0, c1, (size_t)(c1 - c0) + 7);
        check_partial(ck, e, full, rows - 1, rows, rb - 1, rb, 1); /* last byte */
        check_partial(ck, e, full, r0, r0, 0, rb, (size_t)rb);     /* nothing */
        /* out of range: refused, nothing counted */
        uint8_t tmp[8];
        uint64_t before = rf_ckpt_bytes_read(ck);
        rf_err_clear(&err);
        ck_assert_int_eq(rf_ckpt_read(ck, e, 0, rows + 1, 0, 1, tmp, 1, &err), RF_ERR_INVALID);
        ck_assert(strstr(err.msg, e->name) != NULL);
        rf_err_clear(&err);
        ck_assert_int_eq(rf_ckpt_read(ck, e, 0, 1, 0, rb + 1, tmp, 1, &err), RF_ERR_INVALID);
        rf_err_clear(&err);
        ck_assert_int_eq(rf_ckpt_read(ck, e, 1, 0, 0, 1, tmp, 1, &err), RF_ERR_INVALID);
        if (rows > 1 && rb > 1) {
            rf_err_clear(&err);
            ck_assert_int_eq(rf_ckpt_read(ck, e, 0, 2, 0, 2, tmp, 1, &err), RF_ERR_INVALID);
        }
        ck_assert_uint_eq(rf_ckpt_bytes_read(ck), before);
        free(full);
        tested++;
    }
    ck_assert_uint_gt(tested, 0);
    rf_ckpt_close(ck);
    free(dir);
}
END_TEST

/* ---- temp files ----------------------------------------------------------------------- */

static char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/refit-st-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    return strdup(tmpl);
}

static void rm_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Writes a raw file: the 8-byte length (declared, or strlen(hdr) if UINT64_MAX), the
 * header text and data_len bytes of data. If total >= 0 the file is cut to total bytes. */
static void write_raw(const char *path, const char *hdr, uint64_t declared, size_t data_len,
                      long total)
{
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    size_t hl = strlen(hdr);
    uint64_t n = declared == UINT64_MAX ? hl : declared;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)(n >> (8 * i));
    ck_assert_uint_eq(fwrite(lb, 1, 8, fp), 8);
    ck_assert_uint_eq(fwrite(hdr, 1, hl, fp), hl);
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i & 0xff), fp);
    ck_assert_int_eq(fclose(fp), 0);
    if (total >= 0)
        ck_assert_int_eq(truncate(path, total), 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    ck_assert_int_eq(fclose(fp), 0);
}

/* ---- malformed single files ----------------------------------------------------------- */

#define T8 "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"
static const struct bad_case {
    const char *what;
    const char *hdr;
    uint64_t declared; /* UINT64_MAX: strlen(hdr) */
    size_t data_len;
    long total; /* -1: no cut */
    const char *expect1, *expect2;
} bad_cases[] = {
    {"truncated file", "", 0, 0, 5, "too short", NULL},
    {"length > size - 8", "{}", 1000, 0, -1, "exceeds file size", "1000"},
    {"length > 100 MB", "{}", 100000001ull, 0, -1, "exceeds 100000000", NULL},
    {"non-json", "this is not json", UINT64_MAX, 0, -1, "not valid json", NULL},
    {"array", "[1, 2, 3]", UINT64_MAX, 0, -1, "not a json object", NULL},
    {"invalid utf-8", "{\"w\xff\xfe\":{" T8 "}}", UINT64_MAX, 8, -1, "not valid json", NULL},
    {"unknown dtype", "{\"t.dtype\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
     UINT64_MAX, 8, -1, "\"t.dtype\"", "C64"},
    {"torch spelling", "{\"t.torch\":{\"dtype\":\"torch.float32\",\"shape\":[2],"
                       "\"data_offsets\":[0,8]}}",
     UINT64_MAX, 8, -1, "\"t.torch\"", "unknown dtype"},
    {"dtype not string", "{\"t.dt\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}",
     UINT64_MAX, 8, -1, "\"t.dt\"", "dtype"},
    {"rank 9", "{\"t.rank\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
               "\"data_offsets\":[0,1]}}",
     UINT64_MAX, 1, -1, "\"t.rank\"", "rank 9"},
    {"negative dim", "{\"t.neg\":{\"dtype\":\"U8\",\"shape\":[2,-1],\"data_offsets\":[0,0]}}",
     UINT64_MAX, 0, -1, "\"t.neg\"", "dim 1"},
    {"non-integer dim", "{\"t.real\":{\"dtype\":\"U8\",\"shape\":[2.0],\"data_offsets\":[0,2]}}",
     UINT64_MAX, 2, -1, "\"t.real\"", "dim 0"},
    {"numel overflow", "{\"t.huge\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],"
                       "\"data_offsets\":[0,8]}}",
     UINT64_MAX, 8, -1, "\"t.huge\"", "overflow"},
    {"bytes overflow", "{\"t.huge2\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
                       "\"data_offsets\":[0,8]}}",
     UINT64_MAX, 8, -1, "\"t.huge2\"", "overflow"},
    {"size mismatch", "{\"t.size\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}",
     UINT64_MAX, 12, -1, "\"t.size\"", "span 12 bytes"},
    {"begin > end", "{\"t.rev\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,0]}}",
     UINT64_MAX, 8, -1, "\"t.rev\"", "data_offsets"},
    {"overlap", "{\"t.a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
                "\"t.b\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[8,24]}}",
     UINT64_MAX, 24, -1, "overlap", "\"t.b\""},
    {"gap", "{\"t.a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
            "\"t.c\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[16,24]}}",
     UINT64_MAX, 24, -1, "gap", "\"t.c\""},
    {"gap at start", "{\"t.late\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]}}",
     UINT64_MAX, 16, -1, "\"t.late\"", "not 0"},
    {"data not at end", "{\"t.short\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
     UINT64_MAX, 16, -1, "\"t.short\"", "16 data bytes"},
    {"offsets past end", "{\"t.long\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
     UINT64_MAX, 8, -1, "\"t.long\"", "8 data bytes"},
    {"metadata non-string", "{\"__metadata__\":{\"format\":\"pt\",\"step\":7},\"t.m\":{" T8 "}}",
     UINT64_MAX, 8, -1, "__metadata__", "\"step\""},
    {"metadata not object", "{\"__metadata__\":[\"pt\"],\"t.m\":{" T8 "}}", UINT64_MAX, 8, -1,
     "__metadata__", NULL},
    {"missing data_offsets", "{\"t.nooff\":{\"dtype\":\"F32\",\"shape\":[2]}}", UINT64_MAX, 8, -1,
     "\"t.nooff\"", "data_offsets"},
    {"missing shape", "{\"t.noshape\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", UINT64_MAX, 8,
     -1, "\"t.noshape\"", "shape"},
    {"extra field", "{\"t.extra\":{" T8 ",\"strides\":[1]}}", UINT64_MAX, 8, -1, "\"t.extra\"",
     "\"strides\""},
    {"offsets wrong type", "{\"t.offs\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":\"0\"}}",
     UINT64_MAX, 8, -1, "\"t.offs\"", "data_offsets"},
    {"offsets 3 items", "{\"t.off3\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}",
     UINT64_MAX, 8, -1, "\"t.off3\"", "data_offsets"},
    {"tensor not object", "{\"t.str\":\"F32\"}", UINT64_MAX, 0, -1, "\"t.str\"", NULL},
    {"duplicate tensor", "{\"t.dup\":{" T8 "},\"t.dup\":{" T8 "}}", UINT64_MAX, 8, -1,
     "duplicate key", "\"t.dup\""},
    {"duplicate field", "{\"t.dupf\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[0,8]}}",
     UINT64_MAX, 8, -1, "duplicate key", "\"dtype\""},
    {"empty header", "", UINT64_MAX, 0, -1, "not valid json", NULL},
    {"nul in name", "{\"t\\u0000x\":{" T8 "}}", UINT64_MAX, 8, -1, "not valid json", NULL},
};
#define NBAD (sizeof(bad_cases) / sizeof(bad_cases[0]))

START_TEST(test_malformed_file)
{
    const struct bad_case *c = &bad_cases[_i];
    char *dir = make_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    write_raw(path, c->hdr, c->declared, c->data_len, c->total);
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = (rf_ckpt_t *)0x1;
    rf_status_t st = rf_ckpt_open(dir, &ck, &err);
    ck_assert_msg(st == RF_ERR_PARSE, "%s: status %s (%s)", c->what, rf_status_name(st), err.msg);
    ck_assert_int_eq(err.status, RF_ERR_PARSE);
    ck_assert_ptr_eq(ck, (rf_ckpt_t *)0x1); /* not set on error */
    ck_assert_msg(strstr(err.msg, path) != NULL, "%s: no file in \"%s\"", c->what, err.msg);
    ck_assert_msg(strstr(err.msg, c->expect1) != NULL, "%s: no '%s' in \"%s\"", c->what,
                  c->expect1, err.msg);
    if (c->expect2 != NULL)
        ck_assert_msg(strstr(err.msg, c->expect2) != NULL, "%s: no '%s' in \"%s\"", c->what,
                      c->expect2, err.msg);
    /* the same verdict through the file API */
    rf_st_file_t *f = NULL;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_st_file_open(path, &f, &err), RF_ERR_PARSE);
    ck_assert_ptr_null(f);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* The good twin of the table's headers: the harness itself accepts a valid file. */
START_TEST(test_wellformed_raw)
{
    char *dir = make_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    write_raw(path,
              "{\"__metadata__\":{\"format\":\"pt\"},\"t.a\":{\"dtype\":\"U8\",\"shape\":[8],"
              "\"data_offsets\":[0,8]},\"t.b\":{\"dtype\":\"U8\",\"shape\":[16],"
              "\"data_offsets\":[8,24]},\"t.z\":{\"dtype\":\"F32\",\"shape\":[0,3],"
              "\"data_offsets\":[24,24]}}   ",
              UINT64_MAX, 24, -1);
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    ck_assert_msg(rf_ckpt_open(dir, &ck, &err) == RF_OK, "%s", err.msg);
    ck_assert_uint_eq(rf_ckpt_count(ck), 3);
    const rf_st_entry_t *b = rf_ckpt_find(ck, "t.b");
    ck_assert_ptr_nonnull(b);
    uint8_t buf[16];
    ck_assert_int_eq(rf_ckpt_read(ck, b, 2, 5, 0, 1, buf, 1, &err), RF_OK);
    ck_assert_uint_eq(buf[0], 10); /* data byte i holds i & 0xff; t.b begins at 8 */
    ck_assert_uint_eq(buf[2], 12);
    ck_assert_uint_eq(rf_ckpt_bytes_read(ck), 3);
    const rf_st_entry_t *z = rf_ckpt_find(ck, "t.z");
    ck_assert_uint_eq(z->nbytes, 0);
    ck_assert_uint_eq(rf_st_entry_rows(z), 0);
    ck_assert_int_eq(rf_ckpt_read(ck, z, 0, 0, 0, 0, NULL, 0, &err), RF_OK);
    rf_ckpt_close(ck);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ---- in-memory parser: exact-size buffers, mutations never crash ---------------------- */

START_TEST(test_parse_buffer)
{
    const char *txt = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}";
    size_t n = strlen(txt);
    char *buf = malloc(n); /* not NUL-terminated: the parser must not look past n */
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, txt, n);
    rf_st_header_t h;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_st_parse_header(buf, n, 12, NULL, &h, &err), RF_OK);
    ck_assert_uint_eq(h.count, 1);
    const rf_st_entry_t *e = rf_st_header_find(&h, "w");
    ck_assert_ptr_nonnull(e);
    ck_assert_ptr_null(e->file);
    ck_assert_uint_eq(e->offset, 8 + n);
    ck_assert_uint_eq(e->nbytes, 12);
    ck_assert_uint_eq(rf_st_entry_row_bytes(e), 6);
    rf_st_header_free(&h);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_st_parse_header(buf, n, 13, "mem.safetensors", &h, &err), RF_ERR_PARSE);
    ck_assert(strstr(err.msg, "mem.safetensors") != NULL);
    ck_assert_uint_eq(h.count, 0);

    /* deterministic mutations: every outcome is RF_OK or RF_ERR_PARSE, never a crash */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    size_t ok = 0, bad = 0;
    for (int it = 0; it < 4000; it++) {
        memcpy(buf, txt, n);
        for (int k = 0; k < 1 + it % 3; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            buf[s % n] = (char)(s >> 32);
        }
        size_t len = (it % 5 == 0) ? (size_t)(s >> 40) % (n + 1) : n;
        rf_err_clear(&err);
        rf_status_t st = rf_st_parse_header(buf, len, (s >> 20) % 2 ? 12 : 0, NULL, &h, &err);
        ck_assert(st == RF_OK || st == RF_ERR_PARSE);
        if (st == RF_OK)
            ok++, rf_st_header_free(&h);
        else
            bad++, ck_assert(err.msg[0] != '\0');
    }
    ck_assert_uint_gt(bad, 0);
    free(buf);
}
END_TEST

/* ---- sharded directories --------------------------------------------------------------- */

static void write_one(const char *dir, const char *file, const char *tensor, uint8_t fill)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    uint8_t d[6];
    memset(d, fill, sizeof(d));
    const char *names[1] = {tensor};
    rf_dtype_t dts[1] = {RF_DTYPE_BF16};
    int nd[1] = {1};
    uint64_t sh[1][RF_ST_MAX_RANK] = {{3}};
    const void *data[1] = {d};
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_st_write_file(path, 1, names, dts, nd, sh, data, NULL, &err) == RF_OK, "%s",
                  err.msg);
}

static const struct index_case {
    const char *what;
    const char *weight_map; /* JSON object body */
    rf_status_t status;
    const char *expect1, *expect2;
} index_cases[] = {
    {"good", "\"a\":\"m1.safetensors\",\"b\":\"m2.safetensors\"", RF_OK, NULL, NULL},
    {"missing file", "\"a\":\"m1.safetensors\",\"b\":\"m2.safetensors\","
                     "\"c\":\"gone.safetensors\"",
     RF_ERR_PARSE, "gone.safetensors", "\"c\""},
    {"tensor absent from file", "\"a\":\"m1.safetensors\",\"b\":\"m2.safetensors\","
                                "\"ghost\":\"m1.safetensors\"",
     RF_ERR_PARSE, "\"ghost\"", "m1.safetensors"},
    {"tensor absent from index", "\"a\":\"m1.safetensors\",\"b\":\"m1.safetensors\"", RF_ERR_PARSE,
     "\"b\"", "m1.safetensors"},
    {"wrong file", "\"a\":\"m2.safetensors\",\"b\":\"m1.safetensors\"", RF_ERR_PARSE, "\"a\"",
     "m2.safetensors"},
    {"escapes the directory", "\"a\":\"../m1.safetensors\",\"b\":\"m2.safetensors\"",
     RF_ERR_PARSE, "\"a\"", "inside the directory"},
    {"not a string", "\"a\":1,\"b\":\"m2.safetensors\"", RF_ERR_PARSE, "\"a\"", NULL},
};
#define NINDEX (sizeof(index_cases) / sizeof(index_cases[0]))

START_TEST(test_index)
{
    const struct index_case *c = &index_cases[_i];
    char *dir = make_tmpdir();
    char path[512], text[1024];
    write_one(dir, "m1.safetensors", "a", 1);
    write_one(dir, "m2.safetensors", "b", 2);
    snprintf(path, sizeof(path), "%s/%s", dir, RF_ST_INDEX_NAME);
    snprintf(text, sizeof(text), "{\"metadata\":{\"total_size\":12},\"weight_map\":{%s}}",
             c->weight_map);
    write_text(path, text);
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    rf_status_t st = rf_ckpt_open(dir, &ck, &err);
    ck_assert_msg(st == c->status, "%s: status %s (%s)", c->what, rf_status_name(st), err.msg);
    if (st == RF_OK) {
        ck_assert_uint_eq(rf_ckpt_count(ck), 2);
        ck_assert_uint_eq(rf_ckpt_file_count(ck), 2);
        const rf_st_entry_t *b = rf_ckpt_find(ck, "b");
        ck_assert_ptr_nonnull(b);
        ck_assert(strstr(rf_st_file_path(b->file), "m2.safetensors") != NULL);
        uint8_t d[6];
        ck_assert_int_eq(rf_ckpt_read(ck, b, 0, 3, 0, 2, d, 2, &err), RF_OK);
        for (int i = 0; i < 6; i++)
            ck_assert_uint_eq(d[i], 2);
        rf_ckpt_close(ck);
    } else {
        ck_assert_msg(strstr(err.msg, c->expect1) != NULL, "%s: no '%s' in \"%s\"", c->what,
                      c->expect1, err.msg);
        if (c->expect2)
            ck_assert_msg(strstr(err.msg, c->expect2) != NULL, "%s: no '%s' in \"%s\"",
                          c->what, c->expect2, err.msg);
        ck_assert(strstr(err.msg, RF_ST_INDEX_NAME) != NULL);
    }
    rm_tree(dir);
    free(dir);
}
END_TEST

START_TEST(test_empty_dir)
{
    char *dir = make_tmpdir();
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    ck_assert_int_eq(rf_ckpt_open(dir, &ck, &err), RF_ERR_IO);
    ck_assert(strstr(err.msg, dir) != NULL);
    ck_assert(strstr(err.msg, "in the directory") != NULL);
    ck_assert_ptr_null(ck);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* --checkpoint naming something that is not a checkpoint folder says what it is */
START_TEST(test_not_a_dir)
{
    char *dir = make_tmpdir();
    char missing[600], file[600];
    rf_err_t err;
    rf_ckpt_t *ck = NULL;
    snprintf(missing, sizeof(missing), "%s/absent", dir);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_ckpt_open(missing, &ck, &err), RF_ERR_IO);
    ck_assert_msg(strstr(err.msg, "No such file or directory") != NULL, "%s", err.msg);
    ck_assert_ptr_null(ck);
    snprintf(file, sizeof(file), "%s/plain", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_ckpt_open(file, &ck, &err), RF_ERR_IO);
    ck_assert_msg(strstr(err.msg, "not a directory") != NULL, "%s", err.msg);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_ckpt_open("", &ck, &err), RF_ERR_IO);
    ck_assert_msg(strstr(err.msg, "empty path") != NULL, "%s", err.msg);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ---- writer round trip ------------------------------------------------------------------ */

START_TEST(test_write_roundtrip)
{
    char *dir = make_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, RF_ST_SINGLE_NAME);
    uint16_t w[15];
    float sc = 0.5f;
    int64_t idx[8];
    uint8_t fp8[3] = {0x38, 0x80, 0x7e};
    for (int i = 0; i < 15; i++)
        w[i] = (uint16_t)(0x3f80 + i);
    for (int i = 0; i < 8; i++)
        idx[i] = -i * 1000000007LL;
    const char *names[5] = {"layer.w", "layer.scale", "empty \"quoted\"", "idx", "fp8"};
    rf_dtype_t dts[5] = {RF_DTYPE_BF16, RF_DTYPE_F32, RF_DTYPE_U8, RF_DTYPE_I64,
                         RF_DTYPE_F8_E4M3};
    int nd[5] = {2, 0, 2, 3, 1};
    uint64_t sh[5][RF_ST_MAX_RANK] = {{3, 5}, {0}, {0, 4}, {2, 2, 2}, {3}};
    const void *data[5] = {w, &sc, NULL, idx, fp8};
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_st_write_file(path, 5, names, dts, nd, sh, data,
                                   "{\"format\":\"pt\",\"step\":\"42\"}", &err) == RF_OK,
                  "%s", err.msg);

    rf_st_file_t *f = NULL;
    ck_assert_msg(rf_st_file_open(path, &f, &err) == RF_OK, "%s", err.msg);
    const rf_st_header_t *h = rf_st_file_header(f);
    ck_assert_uint_eq(h->header_len % 8, 0);
    ck_assert_uint_eq(rf_st_file_size(f), 8 + h->header_len + 30 + 4 + 0 + 64 + 3);
    ck_assert_uint_eq(rf_st_file_header_bytes_read(f), 8 + h->header_len);
    ck_assert_str_eq(rf_st_header_meta(h, "format"), "pt");
    ck_assert_str_eq(rf_st_header_meta(h, "step"), "42");
    ck_assert_ptr_null(rf_st_header_meta(h, "nope"));
    ck_assert_uint_eq(h->count, 5);
    /* data order = given order, packed from the first aligned byte after the header */
    ck_assert_str_eq(h->entries[0].name, "layer.w");
    ck_assert_uint_eq(h->entries[0].offset, 8 + h->header_len);
    rf_st_file_close(f);

    rf_ckpt_t *ck = NULL;
    ck_assert_msg(rf_ckpt_open(dir, &ck, &err) == RF_OK, "%s", err.msg);
    ck_assert_uint_eq(rf_ckpt_count(ck), 5);
    for (int i = 0; i < 5; i++) {
        const rf_st_entry_t *e = rf_ckpt_find(ck, names[i]);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->dtype, dts[i]);
        ck_assert_int_eq(e->ndim, nd[i]);
        for (int d = 0; d < nd[i]; d++)
            ck_assert_uint_eq(e->shape[d], sh[i][d]);
        uint8_t *buf = read_all(ck, e);
        if (e->nbytes > 0)
            ck_assert_mem_eq(buf, data[i], e->nbytes);
        free(buf);
    }
    const rf_st_entry_t *s = rf_ckpt_find(ck, "layer.scale"); /* 0-D: one row of 4 bytes */
    ck_assert_uint_eq(rf_st_entry_rows(s), 1);
    ck_assert_uint_eq(rf_st_entry_row_bytes(s), 4);
    ck_assert_uint_eq(rf_ckpt_bytes_read(ck), 30 + 4 + 64 + 3);
    rf_ckpt_close(ck);

    /* the writer refuses what the reader would refuse, and leaves no file behind */
    const char *dup[2] = {"x", "x"};
    rf_dtype_t d2[2] = {RF_DTYPE_U8, RF_DTYPE_U8};
    int n2[2] = {1, 1};
    uint64_t s2[2][RF_ST_MAX_RANK] = {{1}, {1}};
    const void *p2[2] = {fp8, fp8};
    char path2[600];
    snprintf(path2, sizeof(path2), "%s/dup.safetensors", dir);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_st_write_file(path2, 2, dup, d2, n2, s2, p2, NULL, &err),
                     RF_ERR_INVALID);
    ck_assert(strstr(err.msg, "\"x\"") != NULL);
    ck_assert_int_ne(access(path2, F_OK), 0);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_st_write_file(path2, 1, dup, d2, n2, s2, p2, "{\"k\":1}", &err),
                     RF_ERR_INVALID);
    rf_err_clear(&err);
    int n9[1] = {9};
    ck_assert_int_eq(rf_st_write_file(path2, 1, dup, d2, n9, s2, p2, NULL, &err),
                     RF_ERR_INVALID);
    rm_tree(dir);
    free(dir);
}
END_TEST

/* ---- reference files -------------------------------------------------------------------- */

START_TEST(test_reference_errors)
{
    static const struct {
        const char *json, *expect1, *expect2;
    } cases[] = {
        {"[]", "not a json object", NULL},
        {"{\"w\":{\"dtype\":\"torch.cfloat\",\"shape\":[1],\"sha256\":\"" 
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"}}",
         "\"w\"", "dtype"},
        {"{\"w\":{\"dtype\":\"torch.bfloat16\",\"shape\":[-1],\"sha256\":\""
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"}}",
         "\"w\"", "shape dim 0"},
        {"{\"w\":{\"dtype\":\"torch.bfloat16\",\"shape\":[1],\"sha256\":\"abc\"}}", "\"w\"",
         "sha256"},
        {"{\"w\":{\"dtype\":\"torch.bfloat16\",\"shape\":[1]}}", "\"w\"", "sha256"},
        {"{\"w\":{\"dtype\":\"torch.bfloat16\",\"shape\":[1],\"sha256\":\""
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\"x\":1}}",
         "\"w\"", "\"x\""},
        {"{\"w\":1,\"w\":2}", "not valid json", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rf_err_t err;
        rf_err_clear(&err);
        rf_ref_t *ref = NULL;
        ck_assert_int_eq(
            rf_ref_parse(cases[i].json, strlen(cases[i].json), "r.json", &ref, &err),
            RF_ERR_PARSE);
        ck_assert_ptr_null(ref);
        ck_assert_msg(strstr(err.msg, "r.json") != NULL, "%s", err.msg);
        ck_assert_msg(strstr(err.msg, cases[i].expect1) != NULL, "case %zu: %s", i, err.msg);
        if (cases[i].expect2)
            ck_assert_msg(strstr(err.msg, cases[i].expect2) != NULL, "case %zu: %s", i,
                          err.msg);
    }
    rf_err_t err;
    rf_err_clear(&err);
    rf_ref_t *ref = NULL;
    ck_assert_int_eq(rf_ref_load("/nonexistent/tensors.reference.json", &ref, &err), RF_ERR_IO);
}
END_TEST

/* bf16-source shares its unquantized tensors with the fp8 checkpoint, byte for byte. */
START_TEST(test_fp8_source_agrees)
{
    rf_err_t err;
    rf_err_clear(&err);
    rf_ref_t *a = NULL, *b = NULL;
    char *pa = fix_path("qwen3-fp8-tiny", "tensors.reference.json");
    char *pb = fix_path("qwen3-fp8-tiny/bf16-source", "tensors.reference.json");
    ck_assert_int_eq(rf_ref_load(pa, &a, &err), RF_OK);
    ck_assert_int_eq(rf_ref_load(pb, &b, &err), RF_OK);
    size_t same = 0, quantized = 0;
    for (size_t i = 0; i < rf_ref_count(b); i++) {
        const rf_ref_entry_t *eb = rf_ref_entry(b, i), *ea = rf_ref_find(a, eb->name);
        ck_assert_ptr_nonnull(ea);
        ck_assert_int_eq(ea->ndim, eb->ndim);
        for (int d = 0; d < ea->ndim; d++)
            ck_assert_uint_eq(ea->shape[d], eb->shape[d]);
        if (ea->dtype == RF_DTYPE_BF16) {
            ck_assert_str_eq(ea->sha256_hex, eb->sha256_hex);
            same++;
        } else {
            ck_assert_int_eq(ea->dtype, RF_DTYPE_F8_E4M3);
            quantized++;
        }
    }
    ck_assert_uint_gt(same, 0);
    ck_assert_uint_gt(quantized, 0);
    rf_ref_free(a);
    rf_ref_free(b);
    free(pa);
    free(pb);
}
END_TEST

/* rf_ckpt_compare: equal tensors, the first differing row, blocks of whole rows and column
 * slices of one row (block smaller than a row), and a shape mismatch refused. */
START_TEST(test_ckpt_compare)
{
    char *dir = make_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, RF_ST_SINGLE_NAME);
    uint16_t a[10][6], c[10][6], d[6][10];
    for (int r = 0; r < 10; r++)
        for (int k = 0; k < 6; k++)
            a[r][k] = c[r][k] = d[k][r] = (uint16_t)(0x3f80 + r * 6 + k);
    c[7][5] ^= 1; /* the last byte pair of row 7 */
    const char *names[4] = {"a", "b", "c", "d"};
    rf_dtype_t dts[4] = {RF_DTYPE_BF16, RF_DTYPE_BF16, RF_DTYPE_BF16, RF_DTYPE_BF16};
    int nd[4] = {2, 2, 2, 2};
    uint64_t sh[4][RF_ST_MAX_RANK] = {{10, 6}, {10, 6}, {10, 6}, {6, 10}};
    const void *data[4] = {a, a, c, d};
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_st_write_file(path, 4, names, dts, nd, sh, data, NULL, &err) == RF_OK, "%s",
                  err.msg);
    rf_ckpt_t *ck = NULL;
    ck_assert_msg(rf_ckpt_open(dir, &ck, &err) == RF_OK, "%s", err.msg);
    const rf_st_entry_t *ea = rf_ckpt_find(ck, "a"), *eb = rf_ckpt_find(ck, "b");
    const rf_st_entry_t *ec = rf_ckpt_find(ck, "c"), *ed = rf_ckpt_find(ck, "d");
    /* 0: the default block; 24: two rows a block; 5: column slices of one 12-byte row */
    size_t blocks[] = {0, 24, 5, 12, 1};
    for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
        int64_t row = 42;
        ck_assert_int_eq(rf_ckpt_compare(ck, ea, eb, blocks[i], &row, &err), RF_OK);
        ck_assert_int_eq(row, -1);
        ck_assert_int_eq(rf_ckpt_compare(ck, ea, ec, blocks[i], &row, &err), RF_OK);
        ck_assert_int_eq(row, 7);
        ck_assert_int_eq(rf_ckpt_compare(ck, ec, ea, blocks[i], &row, &err), RF_OK);
        ck_assert_int_eq(row, 7);
    }
    int64_t row = 0;
    ck_assert_int_eq(rf_ckpt_compare(ck, ea, ed, 0, &row, &err), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(err.msg, "differ in rows or row bytes"));
    rf_ckpt_close(ck);
    rm_tree(dir);
    free(dir);
}
END_TEST

static Suite *safetensors_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc;

    tc = tcase_create("hashes");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_hashes);
    suite_add_tcase(s, tc);

    tc = tcase_create("fixtures");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_fixture_sha256, 0, NFIX);
    tcase_add_test(tc, test_fixture_layout);
    tcase_add_test(tc, test_fp8_source_agrees);
    suite_add_tcase(s, tc);

    tc = tcase_create("partial");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_partial_reads, 0, NFIX);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_malformed_file, 0, NBAD);
    tcase_add_test(tc, test_wellformed_raw);
    tcase_add_test(tc, test_parse_buffer);
    tcase_add_loop_test(tc, test_index, 0, NINDEX);
    tcase_add_test(tc, test_empty_dir);
    tcase_add_test(tc, test_not_a_dir);
    suite_add_tcase(s, tc);

    tc = tcase_create("writer");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_write_roundtrip);
    tcase_add_test(tc, test_ckpt_compare);
    suite_add_tcase(s, tc);

    tc = tcase_create("reference");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_reference_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(safetensors_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
