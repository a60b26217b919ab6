/*
 * refit: accelerators (DESIGN.md sections 9 and 16; STYLE.md: ops tables, CUDA in its own
 * module, a host implementation as the reference).
 *
 * An accelerator is an ops table (rf_accel_ops_t) plus an object that starts with a pointer to
 * it. Two implementations: "host" (core/accel_host.c: plain memory, synchronous "streams";
 * the reference every GPU path is compared with byte for byte) and "cuda"
 * (core/accel_cuda.cu: cudaMalloc arenas, never managed memory; CUDA streams and events).
 * core/accel_registry.c picks one by name or by capability; it is the only file that knows
 * whether CUDA was compiled in for the accelerators. The ops are generic (memory, streams,
 * events, copies, row copies, checksum): the format kernels are the formats' table
 * (include/refit/quant_ops.h) and the generator's device fill the generator's
 * (include/refit/generator.h), each looked up by accelerator.
 *
 * Memory: "device" pointers are what alloc() returns (host memory for "host"); "host"
 * pointers are ordinary or pinned (alloc_host) host memory. Kernels take device pointers.
 * Every operation that takes a stream enqueues on it (NULL: the accelerator's own default
 * stream) and returns without waiting, except the ones documented as synchronizing. On the
 * host implementation every operation completes before it returns.
 *
 * Errors: RF_ERR_INVALID (arguments), RF_ERR_NOMEM, RF_ERR_CUDA (a CUDA call failed: logged once
 * with the call and CUDA's own error string), RF_ERR_UNSUPPORTED (an implementation that is not
 * compiled in, or no device). Outputs are set only on success. Not collective; an accelerator
 * object is used by one thread at a time.
 */
#ifndef REFIT_ACCEL_H
#define REFIT_ACCEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/dtype.h"
#include "refit/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_accel_ops rf_accel_ops_t;

/* Memory-type tag of an accelerator's alloc() memory (UCX style). */
typedef enum { RF_MEM_HOST = 0, RF_MEM_CUDA = 1 } rf_mem_type_t;

typedef enum {
    RF_COPY_H2D = 0, /* host -> device */
    RF_COPY_D2H = 1, /* device -> host */
    RF_COPY_D2D = 2, /* device -> device (same accelerator) */
    RF_COPY_H2H = 3, /* host -> host */
} rf_copy_kind_t;

/* Every object starts with its ops pointer. impl is the implementation's own handle. */
typedef struct rf_accel {
    const rf_accel_ops_t *ops;
    int device; /* the device selected at open (host: 0) */
    void *impl;
} rf_accel_t;

typedef struct rf_accel_stream {
    const rf_accel_ops_t *ops;
    rf_accel_t *accel; /* borrowed: the accelerator it was created on */
    void *impl;
} rf_accel_stream_t;

typedef struct rf_accel_event {
    const rf_accel_ops_t *ops;
    rf_accel_t *accel;
    void *impl;
} rf_accel_event_t;

/*
 * The loader's destination (rf_dst_t in include/refit/loader.h, same meaning): element (i, c)
 * of expert e lives at data + (e expert_stride + i row_stride + c col_stride) esize, strides in
 * elements, in checkpoint orientation (a K-first slot has row_stride 1, col_stride N).
 */
typedef struct rf_accel_dst {
    void *data;            /* element 0 of the slot (device memory) */
    size_t esize;          /* bytes per element: 1, 2, 4 or 8 */
    rf_dtype_t dtype;      /* element type (F32 with a BF16 / F16 source: exact conversion) */
    int64_t row_stride;    /* elements between consecutive rows */
    int64_t col_stride;    /* elements between consecutive columns */
    int64_t expert_stride; /* elements between local experts */
} rf_accel_dst_t;

/*
 * One strided row copy, the building block of every loader write (TP slices, fused shards,
 * K-first wna16 rows, vocab rows): source element (i, c), i < rows, c < cols, at
 * src + (i src_pitch + c) src-element-size bytes, goes to destination element
 * (dst_row + i, dst_col + c) of expert `expert`. The source is in src_dtype: either the
 * destination's element size (bytes copied as they are) or BF16 / F16 into an F32
 * destination (the exact conversion FP8 block scales need). dst and src must not overlap.
 */
typedef struct rf_accel_rows {
    rf_accel_dst_t dst;
    int64_t expert;    /* local expert index (0 for 2-D params) */
    int64_t dst_row;   /* first destination row */
    int64_t dst_col;   /* first destination column */
    const void *src;   /* device memory */
    rf_dtype_t src_dtype;
    int64_t src_pitch; /* source elements between consecutive rows (>= cols) */
    int64_t rows;
    int64_t cols;
} rf_accel_rows_t;

struct rf_accel_ops {
    const char *name;       /* "host", "cuda" */
    rf_mem_type_t mem_type; /* what alloc() returns */

    /* ---- lifetime and device selection ---- */
    /* Number of usable devices (host: 1). */
    rf_status_t (*device_count)(int *count_p);
    /* Opens device `device` (cudaSetDevice on CUDA; host: must be 0). *accel_p is owned by the
     * caller, released with destroy(). */
    rf_status_t (*create)(int device, rf_accel_t **accel_p);
    void (*destroy)(rf_accel_t *accel);
    /* Makes accel's device current on the calling thread. */
    rf_status_t (*select)(rf_accel_t *accel);

    /* ---- memory ---- */
    /* Device arena: cudaMalloc (never managed) of bytes rounded up to RF_ACCEL_ALLOC_GRAIN /
     * 256-byte aligned host memory. bytes 0 gives NULL and RF_OK; RF_ERR_NOMEM when the
     * device (host) has not that much free. */
    rf_status_t (*alloc)(rf_accel_t *accel, size_t bytes, void **ptr_p);
    void (*free)(rf_accel_t *accel, void *ptr);
    /* Host memory for transfers: pinned (cudaMallocHost) / aligned host memory. */
    rf_status_t (*alloc_host)(rf_accel_t *accel, size_t bytes, void **ptr_p);
    void (*free_host)(rf_accel_t *accel, void *ptr);

    /* ---- streams and events ---- */
    rf_status_t (*stream_create)(rf_accel_t *accel, rf_accel_stream_t **stream_p);
    void (*stream_destroy)(rf_accel_stream_t *stream);
    rf_status_t (*stream_sync)(rf_accel_stream_t *stream);
    rf_status_t (*event_create)(rf_accel_t *accel, rf_accel_event_t **event_p);
    void (*event_destroy)(rf_accel_event_t *event);
    rf_status_t (*event_record)(rf_accel_event_t *event, rf_accel_stream_t *stream);
    rf_status_t (*event_sync)(rf_accel_event_t *event);
    /* *done_p: true when all work before the record has completed. */
    rf_status_t (*event_query)(rf_accel_event_t *event, bool *done_p);
    /* Milliseconds between two completed events (host: 0). */
    rf_status_t (*event_elapsed_ms)(rf_accel_event_t *start, rf_accel_event_t *end, float *ms_p);

    /* ---- copies (async on the stream) ---- */
    rf_status_t (*copy)(rf_accel_t *accel, void *dst, const void *src, size_t bytes,
                        rf_copy_kind_t kind, rf_accel_stream_t *stream);
    /* height rows of width bytes, pitches in bytes (cudaMemcpy2DAsync). */
    rf_status_t (*copy_2d)(rf_accel_t *accel, void *dst, size_t dst_pitch, const void *src,
                           size_t src_pitch, size_t width, size_t height, rf_copy_kind_t kind,
                           rf_accel_stream_t *stream);
    /* bytes of device memory set to (uint8_t)value. */
    rf_status_t (*memset)(rf_accel_t *accel, void *dst, int value, size_t bytes,
                          rf_accel_stream_t *stream);

    /* ---- kernels (device memory; identical results on every implementation) ---- */
    /* The strided row copy above (cudaMemcpy2DAsync when columns are contiguous and no
     * conversion is needed). */
    rf_status_t (*copy_rows)(rf_accel_t *accel, const rf_accel_rows_t *rows,
                             rf_accel_stream_t *stream);
    /* n row copies with the result of n copy_rows calls, in as few launches as the
     * implementation can (CUDA: one kernel for all of them; host: a loop). The destinations
     * must not overlap each other or any source. rows[] is consumed before the call returns
     * (the caller may reuse it at once); the copies themselves are enqueued on the stream. */
    rf_status_t (*copy_rows_batch)(rf_accel_t *accel, const rf_accel_rows_t *rows, size_t n,
                                   rf_accel_stream_t *stream);
    /* Vocab padding: zero-fills destination rows [row_begin, row_begin + nrows), columns
     * [0, cols) of expert 0 (rf_load_vocab_pad's rows). */
    rf_status_t (*zero_rows)(rf_accel_t *accel, const rf_accel_dst_t *dst, int64_t row_begin,
                             int64_t nrows, int64_t cols, rf_accel_stream_t *stream);
    /* rf_accel_checksum() of bytes [0, bytes) of device memory. Synchronizes the stream. */
    rf_status_t (*checksum)(rf_accel_t *accel, const void *buf, size_t bytes, uint64_t *sum_p,
                            rf_accel_stream_t *stream);
    /* copy_rows_batch's split between the copy engines and the batch kernel (issue #18 item
     * 2): a piece that is one contiguous run of bytes on both sides (no conversion; rows with
     * src_pitch == row_stride == cols, col_stride 1) of at least `bytes` bytes is one
     * cudaMemcpyAsync on the stream, the other pieces go through the kernel. 0: the default,
     * RF_ACCEL_ENGINE_MIN_DEFAULT, or REFIT_CUDA_ENGINE_MIN read when the accelerator was
     * created; SIZE_MAX: every piece through the kernel (the kernel's own ceiling). Which path
     * a piece takes never changes its bytes. Host implementations: accepted, no effect (every
     * piece is a memcpy). Applies to later calls on this accelerator; not collective. */
    rf_status_t (*set_engine_min)(rf_accel_t *accel, size_t bytes);
    /* The word sum of refit-sum64 v1 (rf_accel_sum_words(buf, bytes, word0): no final step) of
     * bytes [0, bytes) of device memory buf, enqueued on the stream without synchronizing (the
     * integrity check of a device chunk buffer, issue #18 item 1): acc, 8 bytes of this
     * accelerator's alloc memory, accumulates it, then it is copied into *out, 8 bytes of its
     * alloc_host memory, valid once an event recorded behind this call completed; acc and out
     * belong to the call until then. Host implementations compute it before returning. */
    rf_status_t (*checksum_async)(rf_accel_t *accel, const void *buf, size_t bytes, uint64_t word0,
                                  void *acc, uint64_t *out, rf_accel_stream_t *stream);
};

/* copy_rows_batch's default split: every piece through the batch kernel. Measured on one H200
 * (bench/copy-variants.cu, docs/benchmarks.md): the kernel copies a Llama-3.1-8B chunk list at
 * 96.7% of one cudaMemcpyAsync of the same bytes, a cudaMemcpyAsync per piece reaches 88.1% on
 * one stream and 96.2% on two (the gaps between the copies), and 3 MiB experts 24%. */
#define RF_ACCEL_ENGINE_MIN_DEFAULT SIZE_MAX

/* ---- the registry (core/accel_registry.c) ---------------------------------------------- */

extern const rf_accel_ops_t rf_accel_host_ops;
/* Tests only: the host implementation tagged RF_MEM_CUDA ("host-device"), so the device
 * branches of storage, planner, owners and job run on a machine without a GPU. */
extern const rf_accel_ops_t rf_accel_host_device_ops;

/* Tests only: how many h2d copies from the "host-device" accelerator's alloc_host (pinned)
 * memory found their source changed when they completed (core/accel_host.c: on a GPU such a
 * copy could have read the new bytes; the completing call returned RF_ERR_CUDA); *tracked_p
 * (may be NULL): how many such copies were enqueued. 0 for other accelerators. */
uint64_t rf_accel_host_device_changed(const rf_accel_t *accel, uint64_t *tracked_p);

/* True when refit was built with CUDA and at least one CUDA device is usable. */
bool rf_accel_cuda_available(void);
/* The ops table for "host" or "cuda" (the "cuda unavailable" stub when compiled out: its
 * create() returns RF_ERR_UNSUPPORTED); NULL for an unknown name. */
const rf_accel_ops_t *rf_accel_lookup(const char *name);
/* Opens an accelerator by name ("host", "cuda") or, name NULL or "auto", by capability: cuda
 * when rf_accel_cuda_available(), else host. Release with rf_accel_close. */
rf_status_t rf_accel_open(const char *name, int device, rf_accel_t **accel_p);
void rf_accel_close(rf_accel_t *accel);
/* Waits for everything enqueued on the accelerator's own default stream (stream NULL) to
 * complete: an event recorded on it, then synchronized (host: nothing to wait for). */
rf_status_t rf_accel_sync(rf_accel_t *accel);

/* What a pointer a caller hands refit points at (the session API's registration checks,
 * DESIGN.md 9; torch's reduce_tensor reads the same attributes before it exports a tensor). */
typedef enum {
    RF_PTR_HOST = 0,    /* ordinary or pinned host memory, or a pointer CUDA does not know */
    RF_PTR_DEVICE = 1,  /* device memory (cudaMalloc, a caching allocator's block, VMM) */
    RF_PTR_MANAGED = 2, /* managed memory (cudaMallocManaged): refused where device is needed */
} rf_ptr_kind_t;

typedef struct rf_accel_ptr_info {
    rf_ptr_kind_t kind;
    int device;         /* RF_PTR_DEVICE / MANAGED: the ordinal it was allocated on, else -1 */
    void *base;         /* the allocation holding ptr (CU_POINTER_ATTRIBUTE_RANGE_START_ADDR;
                           a caching allocator's segment, not the tensor) */
    uint64_t bytes;     /* its size (CU_POINTER_ATTRIBUTE_RANGE_SIZE) */
    uint64_t buffer_id; /* process-wide unique id of that allocation (BUFFER_ID; 0 unknown) */
    bool legacy_ipc;    /* cudaIpcGetMemHandle can export it (IS_LEGACY_CUDA_IPC_CAPABLE:
                           false for cuMemCreate / VMM memory, PyTorch's expandable_segments) */
    bool mempool;       /* allocated from a memory pool (MEMPOOL_HANDLE set: cudaMallocAsync,
                           PyTorch's backend:cudaMallocAsync) */
} rf_accel_ptr_info_t;

/*
 * What ptr points at, as accel sees it: "cuda" asks cudaPointerGetAttributes and the driver's
 * pointer attributes (resolved at run time through cudaGetDriverEntryPointByVersion: librefit
 * links no libcuda); "host-device" (tests) reports every non-NULL pointer as device memory of
 * accel->device, IPC-capable, its allocation that of the declared segment holding it
 * (rf_accel_host_device_declare, below), else unknown (base = ptr, bytes 0); "host" reports
 * host memory. RF_ERR_INVALID
 * for NULL arguments, RF_ERR_UNSUPPORTED when CUDA is compiled out, RF_ERR_CUDA when a query
 * fails. Local, not collective; makes no device current.
 */
rf_status_t rf_accel_pointer_info(const rf_accel_t *accel, const void *ptr,
                                  rf_accel_ptr_info_t *info);

/*
 * Tests only: POSIX shared memory segments that the "host-device" accelerator reports as
 * device allocations, so the CPU suite runs colocated CUDA IPC with tensors carved out of a
 * few segments, as PyTorch's caching allocator carves parameters out of its segments.
 * Declare: [base, base + bytes) is one allocation, the shm object `shm_name` (the host ipc
 * backend's share_arena exports it under that name); rf_accel_pointer_info then reports for a
 * pointer inside it that base, size and a buffer id of its own, legacy_ipc unless flags has
 * RF_ACCEL_DECL_VMM (stands for expandable_segments' cuMemCreate memory) and mempool when it
 * has RF_ACCEL_DECL_POOL (cudaMallocAsync). A pointer in no declared segment keeps the plain
 * answer (base = the pointer, bytes 0: no allocation known). Forget: removes the segment
 * declared at base. Process-wide, thread-safe; RF_ERR_INVALID for a bad argument,
 * RF_ERR_NOMEM past 16 segments.
 */
#define RF_ACCEL_DECL_VMM 1u
#define RF_ACCEL_DECL_POOL 2u
rf_status_t rf_accel_host_device_declare(void *base, uint64_t bytes, const char *shm_name,
                                         unsigned flags);
void rf_accel_host_device_forget(void *base);
/* The declared segment starting at base: 1 and its name (into name[cap]), else 0. */
int rf_accel_host_device_segment(const void *base, uint64_t *bytes_p, char *name, size_t cap);

/*
 * The chunk checksum ("refit-sum64 v1"), defined on bytes so every implementation agrees:
 *   n = bytes; words w_i, i in [0, ceil(n / 8)): little-endian 8-byte words of the buffer, the
 *   last one zero-padded;
 *   mix(w, i) = fmix64(w ^ ((i + 1) * 0x9E3779B97F4A7C15)), fmix64 = MurmurHash3's finalizer
 *   (x ^= x >> 33; x *= 0xFF51AFD7ED558CCD; x ^= x >> 33; x *= 0xC4CEB9FE1A85EC53; x ^= x >> 33);
 *   S = sum of mix(w_i, i) mod 2^64;  checksum = fmix64(S ^ (n * 0xC2B2AE3D27D4EB4F)).
 * The per-word position key makes swapped words count; the sum is exact and associative mod
 * 2^64, so a device's two-level reduction (per block, then across blocks) gives exactly the
 * sequential value. Not cryptographic: it catches corruption, not an adversary.
 */
uint64_t rf_accel_checksum(const void *buf, size_t bytes);
/* S of the definition over bytes [0, bytes) of buf with its words numbered from word0 (the
 * last one zero-padded), without the final step: rf_accel_checksum(buf, n) ==
 * rf_accel_sum_final(rf_accel_sum_words(buf, n, 0), n), and for a buffer whose first 8k bytes
 * are summed apart, S = rf_accel_sum_words(buf, 8k, 0) + rf_accel_sum_words(buf + 8k, n - 8k, k)
 * (the chunk codec's header on the host, payload on the device). */
uint64_t rf_accel_sum_words(const void *buf, size_t bytes, uint64_t word0);
/*
 * Device allocations are made in whole 2 MiB (the cuda accelerator's alloc, the CUDA ipc arena):
 * on the H200 an allocation of 16,060,522,496 bytes (7658.25 x 2 MiB: refit-run's Llama-3.1-8B
 * arena) was read at 80% of the rate of the same allocation rounded up to 2 MiB, through CUDA
 * IPC and in its own process alike (bench/ipc-env.cu, variants V13 / V14 / V15;
 * docs/benchmarks.md). PyTorch's caching allocator rounds large segments to 2 MiB already.
 */
#define RF_ACCEL_ALLOC_GRAIN ((uint64_t)2 << 20)
static inline uint64_t rf_accel_alloc_round(uint64_t bytes)
{
    return (bytes + RF_ACCEL_ALLOC_GRAIN - 1) / RF_ACCEL_ALLOC_GRAIN * RF_ACCEL_ALLOC_GRAIN;
}

/* The checksum's pieces, for implementations: mix of word i, and the final step. */
static inline uint64_t rf_accel_fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}
static inline uint64_t rf_accel_sum_mix(uint64_t w, uint64_t i)
{
    return rf_accel_fmix64(w ^ ((i + 1) * 0x9E3779B97F4A7C15ull));
}
static inline uint64_t rf_accel_sum_final(uint64_t S, uint64_t bytes)
{
    return rf_accel_fmix64(S ^ (bytes * 0xC2B2AE3D27D4EB4Full));
}

/*
 * The device copy ceiling (benchmarks): best and median of `reps` device-to-device copies of
 * one buffer of `bytes` into another (cudaMemcpyAsync d2d on CUDA, memcpy on the host), each
 * timed with events (wall clock on the host). Allocates and frees both buffers.
 * RF_ERR_NOMEM when they do not fit. Not collective.
 */
rf_status_t rf_accel_copy_ceiling(rf_accel_t *accel, size_t bytes, int reps, double *best_s,
                                  double *median_s);
/* The same for refit's own batch kernel: one copy_rows_batch of one contiguous row of `bytes`
 * bytes with the copy engines off (set_engine_min(SIZE_MAX), restored to the default after), so
 * the descriptors' h2d copy and the tile map are in the time as they are in an update; 8
 * untimed copies first (the batch ring's buffers are allocated on first use). On the host: the
 * host copy_rows (a memcpy). Same errors; not collective. */
rf_status_t rf_accel_rows_ceiling(rf_accel_t *accel, size_t bytes, int reps, double *best_s,
                                  double *median_s);

/* Validates a row-copy descriptor the same way for every implementation: RF_ERR_INVALID for
 * negative sizes, src_pitch < cols, esize not 1 / 2 / 4 / 8, or a source dtype that is neither
 * the destination's element size nor BF16 / F16 into F32. */
rf_status_t rf_accel_rows_check(const rf_accel_rows_t *rows);
/* True when the descriptor converts (BF16 / F16 source into an F32 destination). */
bool rf_accel_rows_convert(const rf_accel_rows_t *rows);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_ACCEL_H */
