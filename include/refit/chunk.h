/*
 * refit: the chunk plan (DESIGN.md section 9, "Chunks").
 *
 * An update's manifest (tensors in stage-major order) is cut into chunks, the unit of
 * transfer. The plan is pure and deterministic: the same items and chunk_bytes give the same
 * chunks on every rank, so senders and receivers agree on it without talking.
 *
 * Rules (the spec):
 *   - every chunk begins with a 16-byte in-band header {u32 update, u32 seq, u56 payload
 *     bytes, u8 trailer algorithm} (little endian; the algorithm is byte 15, the top byte of
 *     the 8-byte size field: 0 without a trailer, else rf_chunk_trailer_t, written by the
 *     codec's seal); the payload follows it and holds at most capacity = chunk_bytes - 16
 *     bytes;
 *   - pieces sit in the payload at offsets that are multiples of 256 (RF_CHUNK_ALIGN);
 *   - a tensor that does not fit in the rest of the current chunk starts a new chunk;
 *   - a tensor larger than the capacity is split into pieces of floor(capacity / row_bytes)
 *     rows (the last piece may be shorter), each piece in its own chunk (the next tensor
 *     starts a new chunk);
 *   - a single row wider than the capacity is an error naming the tensor (RF_ERR_INVALID);
 *   - chunks never span stages; seq numbers form one global stage-major sequence 0..n-1;
 *   - integrity mode appends an 8-byte checksum trailer after the payload (the chunk codec
 *     below: XXH3-64 or refit-sum64 v1, named in the header; when it is used:
 *     include/refit/transport.h): such plans are built for chunk_bytes - 8.
 *
 * Rows: a tensor of shape [d0, d1, ...] is d0 rows of prod(d1...) x elem bytes. A 1-D tensor
 * is numel rows of one element, so it splits at element boundaries. A 0-byte tensor gets a
 * 0-byte piece like any other.
 *
 * A chunk buffer is laid out so that the payload (buf + 16) is 256-byte aligned:
 * rf_chunk_buffer_alloc() returns such a buffer.
 */
#ifndef REFIT_CHUNK_H
#define REFIT_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RF_CHUNK_HEADER_BYTES 16
#define RF_CHUNK_ALIGN 256

/* One manifest tensor as the planner sees it. bytes must equal rows * row_bytes. */
typedef struct rf_chunk_item {
    int stage;         /* >= 0, non-decreasing over the item array */
    uint64_t rows;     /* rows (dim 0; numel for a 1-D tensor) */
    uint64_t row_bytes; /* bytes of one row */
    uint64_t bytes;    /* total bytes = rows * row_bytes */
    const char *name;  /* borrowed, for error messages; may be NULL */
} rf_chunk_item_t;

/* The in-band header at the start of every chunk. */
typedef struct rf_chunk_header {
    uint32_t update;
    uint32_t seq;
    uint64_t payload_bytes; /* bytes 8..14 (56 bits) */
    uint8_t trailer;        /* byte 15: the trailer algorithm (rf_chunk_trailer_t), 0: none */
} rf_chunk_header_t;

/* Largest payload a header can carry (56 bits). */
#define RF_CHUNK_PAYLOAD_MAX ((UINT64_C(1) << 56) - 1)

/* A row range of one item placed in one chunk's payload. */
typedef struct rf_chunk_piece {
    size_t item;        /* index into the item array */
    uint64_t row_begin; /* first row */
    uint64_t row_end;   /* one past the last row */
    uint64_t offset;    /* payload offset (multiple of RF_CHUNK_ALIGN) */
    uint64_t bytes;     /* (row_end - row_begin) * row_bytes */
} rf_chunk_piece_t;

typedef struct rf_chunk {
    int stage;
    uint32_t seq;           /* global, stage-major; equals the chunk's index in the plan */
    uint64_t payload_bytes; /* end of the last piece (no trailing padding) */
    size_t piece_begin;     /* index of its first piece in plan->pieces */
    size_t piece_count;
} rf_chunk_t;

/* Chunks of one stage: seq chunk_begin .. chunk_begin + chunk_count - 1. */
typedef struct rf_chunk_stage_range {
    uint32_t chunk_begin;
    uint32_t chunk_count;
    uint64_t payload_bytes; /* sum of the stage's chunks' payload bytes */
} rf_chunk_stage_range_t;

typedef struct rf_chunk_plan {
    uint64_t chunk_bytes;     /* header + payload capacity */
    size_t n_chunks;
    rf_chunk_t *chunks;       /* [n_chunks], owned by the plan */
    size_t n_pieces;
    rf_chunk_piece_t *pieces; /* [n_pieces], owned by the plan */
    int n_stages;             /* max stage + 1 (0 when there are no items) */
    rf_chunk_stage_range_t *stages; /* [n_stages], indexed by stage; owned by the plan */
    uint64_t payload_bytes;   /* sum over all chunks */
} rf_chunk_plan_t;

/*
 * Builds the chunk plan of items[0..n_items) (borrowed; names must outlive nothing: they are
 * used only for messages during the call). Local, not collective. Returns RF_OK and a new
 * plan in *plan_p (free with rf_chunk_plan_destroy); RF_ERR_INVALID for chunk_bytes <= 16,
 * stages out of order or negative, bytes != rows * row_bytes, or a row wider than the
 * payload capacity (the message names the tensor); RF_ERR_NOMEM.
 */
rf_status_t rf_chunk_plan_create(const rf_chunk_item_t *items, size_t n_items,
                                 uint64_t chunk_bytes, rf_chunk_plan_t **plan_p, rf_err_t *err);
/* Frees a plan (NULL is fine). */
void rf_chunk_plan_destroy(rf_chunk_plan_t *plan);

/* Writes / reads the 16-byte header at buf (little endian). Write: trailer byte 0 (the codec's
 * seal sets it), payload_bytes <= RF_CHUNK_PAYLOAD_MAX (higher bits are dropped: a plan's
 * chunk_bytes never comes near). Read: payload_bytes without the trailer byte, which goes to
 * hdr_p->trailer. Local; cannot fail. */
void rf_chunk_header_write(void *buf, uint32_t update, uint32_t seq, uint64_t payload_bytes);
void rf_chunk_header_read(const void *buf, rf_chunk_header_t *hdr_p);

/*
 * Allocates a chunk buffer of chunk_bytes whose payload start (returned pointer + 16) is
 * RF_CHUNK_ALIGN-aligned. Local. Returns the buffer (owned by the caller, free with
 * rf_chunk_buffer_free) or NULL when out of memory or chunk_bytes <= 16.
 */
void *rf_chunk_buffer_alloc(uint64_t chunk_bytes);
/* Frees a buffer from rf_chunk_buffer_alloc (NULL is fine). */
void rf_chunk_buffer_free(void *buf);

/* ---- the chunk codec: the integrity trailer (transport/chunk_codec.c) --------------------
 *
 * Every transport seals and checks its chunks with these, so the trailer is computed in one
 * place. The trailer is the digest of the bytes it covers under the algorithm the header's
 * byte 15 names, written little endian right after them:
 *
 *     [16-byte header, byte 15 = algorithm][payload, payload_bytes][u64 digest of header + payload]
 *
 * Algorithms (version 1 of each; the number is the header byte):
 *   RF_CHUNK_TRAILER_XXH3  (1) XXH3-64, seed 0: the host's fastest; receivers check on the host;
 *   RF_CHUNK_TRAILER_SUM64 (2) "refit-sum64 v1" (include/refit/accel.h rf_accel_checksum):
 *                              computable on a device, the same value on host and GPU, so a
 *                              receiver with device storage checks its device chunk buffer.
 * The session picks one per job, the same on every rank (docs/design.md, transfer.integrity);
 * a checker refuses a chunk whose header names another algorithm (RF_ERR_INTEGRITY) instead of
 * reading its trailer the wrong way.
 *
 * mpi and nccl cover one part (the message: header + payload); ipc covers two (its sequence
 * message, then the staged payload when the chunk is staged), digested as if concatenated
 * (refit-sum64: the first part's length must be a multiple of 8, as the 32-byte SEQ message
 * is). All local and thread safe; none is collective.
 */
#define RF_CHUNK_TRAILER_BYTES 8

typedef enum {
    RF_CHUNK_TRAILER_NONE = 0,
    RF_CHUNK_TRAILER_XXH3 = 1,
    RF_CHUNK_TRAILER_SUM64 = 2,
} rf_chunk_trailer_t;

/* "xxh3-64", "refit-sum64 v1"; "none" for 0, "unknown" otherwise. */
const char *rf_chunk_trailer_name(int alg);
/* Parses "xxh3" / "xxh3-64" or "sum64" / "refit-sum64" into *alg_p: RF_OK, else RF_ERR_INVALID
 * naming the text (REFIT_INTEGRITY_TRAILER, the benchmarks' A/B). */
rf_status_t rf_chunk_trailer_parse(const char *text, int *alg_p, rf_err_t *err);

/* Little-endian u64 at p (trailers and other in-band fields). */
void rf_chunk_u64le_write(void *p, uint64_t v);
uint64_t rf_chunk_u64le_read(const void *p);

/* The digest of a[0..na) followed by b[0..nb) (b may be NULL when nb is 0) under alg.
 * RF_ERR_INVALID for an unknown alg or (refit-sum64, two parts) na not a multiple of 8;
 * RF_ERR_NOMEM only for a two-part XXH3 (the streaming state). */
rf_status_t rf_chunk_digest(int alg, const void *a, size_t na, const void *b, size_t nb,
                            uint64_t *h_p, rf_err_t *err);

/* Seals: a starts with a chunk header (na >= 16): writes alg into its byte 15, then the trailer
 * of a + b at `trailer` (RF_CHUNK_TRAILER_BYTES bytes). The one-part form of a message msg of
 * `covered` bytes: rf_chunk_seal(alg, msg + covered, msg, covered, NULL, 0, err). RF_OK, or
 * rf_chunk_digest's errors. */
rf_status_t rf_chunk_seal(int alg, void *trailer, void *a, size_t na, const void *b, size_t nb,
                          rf_err_t *err);

/*
 * rf_chunk_seal's one-part form (msg of `covered` bytes, its trailer written at msg + covered)
 * with a refit-sum64 message of at least RF_CHUNK_SEAL_POOL_MIN bytes summed by the workers of
 * pool (include/refit/pool.h): each sums one slice of whole 8-byte words numbered from the
 * slice's first, the slice sums added mod 2^64 (the sum is associative: the trailer is
 * rf_chunk_seal's, bit for bit). XXH3, a NULL or one-thread pool, or a shorter message:
 * rf_chunk_seal on the caller. The mpi sender seals with it on its pack thread (issue 18 item
 * 1: one thread's seal beside the wire took more than the wire). Errors as rf_chunk_seal's.
 */
#define RF_CHUNK_SEAL_POOL_MIN (1u << 20)
struct rf_pool;
rf_status_t rf_chunk_seal_pool(int alg, void *msg, size_t covered, struct rf_pool *pool,
                               rf_err_t *err);

/*
 * A payload's refit-sum64 v1 word sum made by whoever wrote the payload, so the seal need not
 * read it again (issue 18 item 1: the trainer's streamed checkpoint reads sum each block while
 * it is in cache, runtime/trainer_stream.c). S = rf_accel_sum_words(payload, payload_bytes, 2):
 * the payload's words numbered from 2 (after the 16-byte header), the last one zero-padded, no
 * final step. have: 1 when S is set; a writer that cannot sum what it wrote leaves it 0 and the
 * transport seals by reading the message (rf_chunk_seal_pool).
 */
typedef struct rf_chunk_sum {
    int have;
    uint64_t S;
} rf_chunk_sum_t;

/*
 * rf_chunk_seal's one-part refit-sum64 form from the payload's word sum (rf_chunk_sum_t.S):
 * writes the algorithm byte, sums the 16 header bytes and completes the digest of msg[0,
 * covered), covered = 16 + payload bytes; the trailer at msg + covered. The sender's twin of
 * rf_chunk_check_sum: the trailer equals rf_chunk_seal's when payload_sum is the payload's sum.
 * RF_ERR_INVALID for covered < 16.
 */
rf_status_t rf_chunk_seal_sum(void *msg, size_t covered, uint64_t payload_sum, rf_err_t *err);

/*
 * Checks: a starts with the chunk header. A header naming an algorithm other than alg is
 * refused unchecked: RF_ERR_INTEGRITY "trailer algorithm <header's> in the header, this job
 * checks <alg's>". Else recomputes the digest of a + b and compares it with the trailer.
 * RF_OK when equal; RF_ERR_INTEGRITY otherwise, err "checksum mismatch (<alg> <have>, trailer
 * <want>) before unpacking; chunk carries <tensors>" (rf_chunk_describe of chunk c of plan;
 * items optional, for the names); rf_chunk_digest's errors. The caller prefixes where
 * (update, chunk seq, stage, sender).
 */
rf_status_t rf_chunk_check(int alg, const void *trailer, const void *a, size_t na, const void *b,
                           size_t nb, const rf_chunk_plan_t *plan, const rf_chunk_item_t *items,
                           const rf_chunk_t *c, rf_err_t *err);

/*
 * The same check of a one-part refit-sum64 v1 message whose payload was summed elsewhere (a
 * device chunk buffer: rf_accel_ops_t.checksum_async with word0 = 2): header = the message's
 * 16 header bytes (host), payload_sum = the payload's word sum S (words numbered from 2, no
 * final step), payload_bytes, trailer = the message's trailer value. Completes the digest
 * (rf_accel_sum_final of the header's words plus payload_sum) and compares; the header's
 * algorithm byte must say refit-sum64. Errors as rf_chunk_check, "(refit-sum64 v1 on the
 * device ...)".
 */
rf_status_t rf_chunk_check_sum(const void *header, uint64_t payload_sum, uint64_t payload_bytes,
                               uint64_t trailer, const rf_chunk_plan_t *plan,
                               const rf_chunk_item_t *items, const rf_chunk_t *c, rf_err_t *err);

/* "a rows 0-63, b rows 0-1, ..." (or "item 3 rows 0-63" without items): the tensors chunk c
 * of plan carries, for error messages; cut with "..." at cap. */
void rf_chunk_describe(const rf_chunk_plan_t *plan, const rf_chunk_item_t *items,
                       const rf_chunk_t *c, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_CHUNK_H */
