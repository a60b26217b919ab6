/*
 * refit: the CUDA accelerator ("cuda"). Compiled only when CMake finds nvcc and the toolkit;
 * core/accel_registry.c is the only file that refers to its table. The format kernels
 * (formats/quant_cuda.cu) and the generator's device fill (runtime/generator_cuda.cu) enqueue
 * on its streams through rf_accel_cuda_stream (refit/accel_cuda.h).
 *
 * Memory is plain cudaMalloc (never managed memory), pinned host memory is cudaMallocHost.
 * Every CUDA call goes through RF_CUDA_CHECK (refit/checks.h): it logs the call and CUDA's own
 * error string once and returns RF_ERR_CUDA. Kernels reproduce core/accel_host.c bit for bit:
 * the bf16 / f16 conversions are the same integer code as the host's (never build this file
 * with --use_fast_math).
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/accel_cuda.h"
#include "refit/checks.h"
#include "refit/env.h"
#include "refit/log.h"

/* Per accelerator: the default stream. Per stream: 16 bytes of device scratch (checksum
 * accumulator, quantizer non-finite flag) and a pinned host mirror (refit/accel_cuda.h). */
typedef rf_accel_cuda_stream_t cuda_stream_t;

/* copy_rows_batch: a ring of descriptor buffers (pinned host -> device), each reusable once the
 * event recorded after the kernel that read it has completed. rf_accel_rows_ceiling's warm-up
 * (core/accel_registry.c) runs one copy per buffer: change both together. */
#define BATCH_RING 8

typedef struct batch_seg batch_seg_t;

typedef struct batch_buf {
    char *h;        /* pinned: the descriptors, then the tile map */
    char *d;
    size_t cap;     /* bytes */
    cudaEvent_t done;
    bool used;
} batch_buf_t;

typedef struct cuda_accel {
    rf_accel_stream_t *dflt;
    batch_buf_t ring[BATCH_RING];
    unsigned next;
    size_t engine_min;     /* copy_rows_batch: contiguous pieces from this size: cudaMemcpyAsync */
    size_t engine_default; /* what set_engine_min(0) restores */
    bool transpose;        /* copy_rows_batch: K-first copies through k_copy_trans
                            * (REFIT_CUDA_TRANSPOSE=1; off by default: no
                            * faster on an H100, docs/gpu.md) */
} cuda_accel_t;

extern "C" const rf_accel_ops_t rf_accel_cuda_ops;

extern "C" int rf_accel_cuda_device_count_raw(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: not sticky, clear it */
        return 0;
    }
    return n;
}

static rf_status_t cu_device_count(int *count_p)
{
    if (!count_p)
        return RF_ERR_INVALID;
    *count_p = rf_accel_cuda_device_count_raw();
    return RF_OK;
}

static rf_status_t cu_select(rf_accel_t *a)
{
    if (!a)
        return RF_ERR_INVALID;
    RF_CUDA_CHECK(cudaSetDevice(a->device));
    return RF_OK;
}

static cuda_stream_t *stream_impl(rf_accel_t *a, rf_accel_stream_t *s)
{
    if (!s)
        s = ((cuda_accel_t *)a->impl)->dflt;
    return (cuda_stream_t *)s->impl;
}

static cudaStream_t cs(rf_accel_t *a, rf_accel_stream_t *s)
{
    return stream_impl(a, s)->s;
}

extern "C" rf_accel_cuda_stream_t *rf_accel_cuda_stream(rf_accel_t *a, rf_accel_stream_t *s)
{
    return stream_impl(a, s);
}

static rf_status_t cu_stream_create(rf_accel_t *a, rf_accel_stream_t **stream_p)
{
    if (!a || !stream_p)
        return RF_ERR_INVALID;
    rf_accel_stream_t *s = (rf_accel_stream_t *)calloc(1, sizeof(*s));
    cuda_stream_t *c = (cuda_stream_t *)calloc(1, sizeof(*c));
    if (!s || !c) {
        free(s);
        free(c);
        return RF_ERR_NOMEM;
    }
    s->ops = &rf_accel_cuda_ops;
    s->accel = a;
    s->impl = c;
    cudaError_t e = cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->d_scratch, 3 * sizeof(unsigned long long));
    if (e == cudaSuccess) /* [2]: no bad quantize call yet */
        e = cudaMemsetAsync(c->d_scratch + 2, 0xff, sizeof(unsigned long long), c->s);
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&c->h_scratch, 3 * sizeof(unsigned long long));
    if (e != cudaSuccess) {
        rf_error("cuda: stream create failed: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        if (c->h_scratch)
            cudaFreeHost(c->h_scratch);
        if (c->d_scratch)
            cudaFree(c->d_scratch);
        if (c->s)
            cudaStreamDestroy(c->s);
        free(c);
        free(s);
        return RF_ERR_CUDA;
    }
    *stream_p = s;
    return RF_OK;
}

static void cu_stream_destroy(rf_accel_stream_t *s)
{
    if (!s)
        return;
    cuda_stream_t *c = (cuda_stream_t *)s->impl;
    cudaStreamSynchronize(c->s);
    cudaFreeHost(c->h_scratch);
    cudaFree(c->d_scratch);
    cudaStreamDestroy(c->s);
    free(c);
    free(s);
}

static rf_status_t cu_stream_sync(rf_accel_stream_t *s)
{
    if (!s)
        return RF_ERR_INVALID;
    RF_CUDA_CHECK(cudaStreamSynchronize(((cuda_stream_t *)s->impl)->s));
    return RF_OK;
}

/* REFIT_CUDA_ENGINE_MIN (bytes, a positive decimal integer) overrides
 * RF_ACCEL_ENGINE_MIN_DEFAULT for A/B runs (docs/gpu.md); another value is refused, naming it
 * (rf_env_count; create has no rf_err_t: logged here and RF_ERR_INVALID returned; the session
 * reads the variable through the same parser before it opens a device, so its error says it). */
static rf_status_t engine_min_env(size_t *bytes_p)
{
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = rf_env_count("REFIT_CUDA_ENGINE_MIN", "bytes", RF_ACCEL_ENGINE_MIN_DEFAULT,
                                  bytes_p, &e);
    if (st != RF_OK)
        rf_error("cuda: %s", e.msg);
    return st;
}

static rf_status_t cu_set_engine_min(rf_accel_t *a, size_t bytes)
{
    if (!a || !a->impl)
        return RF_ERR_INVALID;
    cuda_accel_t *c = (cuda_accel_t *)a->impl;
    c->engine_min = bytes ? bytes : c->engine_default;
    return RF_OK;
}

static rf_status_t cu_create(int device, rf_accel_t **accel_p)
{
    int n = rf_accel_cuda_device_count_raw();
    if (!accel_p || device < 0)
        return RF_ERR_INVALID;
    if (device >= n) {
        rf_error("cuda: device %d unavailable (%d devices)", device, n);
        return RF_ERR_UNSUPPORTED;
    }
    size_t engine_min = 0;
    RF_CHECK(engine_min_env(&engine_min));
    bool transpose = false;
    {
        rf_err_t e;
        rf_err_clear(&e);
        if (rf_env_flag("REFIT_CUDA_TRANSPOSE", false, &transpose, &e) != RF_OK) {
            rf_error("cuda: %s", e.msg);
            return RF_ERR_INVALID;
        }
    }
    RF_CUDA_CHECK(cudaSetDevice(device));
    rf_accel_t *a = (rf_accel_t *)calloc(1, sizeof(*a));
    cuda_accel_t *c = (cuda_accel_t *)calloc(1, sizeof(*c));
    if (!a || !c) {
        free(a);
        free(c);
        return RF_ERR_NOMEM;
    }
    a->ops = &rf_accel_cuda_ops;
    a->device = device;
    a->impl = c;
    c->engine_default = engine_min;
    c->engine_min = c->engine_default;
    c->transpose = transpose;
    rf_status_t st = cu_stream_create(a, &c->dflt);
    if (st != RF_OK) {
        free(c);
        free(a);
        return st;
    }
    *accel_p = a;
    return RF_OK;
}

static void cu_destroy(rf_accel_t *a)
{
    if (!a)
        return;
    cuda_accel_t *c = (cuda_accel_t *)a->impl;
    cudaSetDevice(a->device);
    for (int i = 0; i < BATCH_RING; i++) {
        batch_buf_t *b = &c->ring[i];
        if (b->used)
            cudaEventSynchronize(b->done);
        if (b->done)
            cudaEventDestroy(b->done);
        if (b->h)
            cudaFreeHost(b->h);
        if (b->d)
            cudaFree(b->d);
    }
    cu_stream_destroy(c->dflt);
    free(c);
    free(a);
}

static rf_status_t cu_alloc(rf_accel_t *a, size_t bytes, void **ptr_p)
{
    if (!a || !ptr_p)
        return RF_ERR_INVALID;
    void *p = NULL;
    if (bytes) {
        RF_CUDA_CHECK(cudaSetDevice(a->device));
        cudaError_t e = cudaMalloc(&p, (size_t)rf_accel_alloc_round(bytes)); /* accel.h */
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError(); /* not sticky: clear it for the next call */
            return RF_ERR_NOMEM;
        }
        RF_CUDA_CHECK(e);
    }
    *ptr_p = p;
    return RF_OK;
}

static void cu_free(rf_accel_t *a, void *p)
{
    (void)a;
    if (p)
        cudaFree(p);
}

static rf_status_t cu_alloc_host(rf_accel_t *a, size_t bytes, void **ptr_p)
{
    if (!a || !ptr_p)
        return RF_ERR_INVALID;
    void *p = NULL;
    if (bytes)
        RF_CUDA_CHECK(cudaMallocHost(&p, bytes));
    *ptr_p = p;
    return RF_OK;
}

static void cu_free_host(rf_accel_t *a, void *p)
{
    (void)a;
    if (p)
        cudaFreeHost(p);
}

static rf_status_t cu_event_create(rf_accel_t *a, rf_accel_event_t **event_p)
{
    if (!a || !event_p)
        return RF_ERR_INVALID;
    cudaEvent_t ev;
    RF_CUDA_CHECK(cudaEventCreate(&ev));
    rf_accel_event_t *e = (rf_accel_event_t *)calloc(1, sizeof(*e));
    if (!e) {
        cudaEventDestroy(ev);
        return RF_ERR_NOMEM;
    }
    e->ops = &rf_accel_cuda_ops;
    e->accel = a;
    e->impl = (void *)ev;
    *event_p = e;
    return RF_OK;
}

static void cu_event_destroy(rf_accel_event_t *e)
{
    if (!e)
        return;
    cudaEventDestroy((cudaEvent_t)e->impl);
    free(e);
}

static rf_status_t cu_event_record(rf_accel_event_t *e, rf_accel_stream_t *s)
{
    if (!e)
        return RF_ERR_INVALID;
    RF_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e->impl, cs(e->accel, s)));
    return RF_OK;
}

static rf_status_t cu_event_sync(rf_accel_event_t *e)
{
    if (!e)
        return RF_ERR_INVALID;
    RF_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e->impl));
    return RF_OK;
}

static rf_status_t cu_event_query(rf_accel_event_t *e, bool *done_p)
{
    if (!e || !done_p)
        return RF_ERR_INVALID;
    cudaError_t r = cudaEventQuery((cudaEvent_t)e->impl);
    if (r == cudaErrorNotReady) {
        *done_p = false;
        return RF_OK;
    }
    RF_CUDA_CHECK(r);
    *done_p = true;
    return RF_OK;
}

static rf_status_t cu_event_elapsed_ms(rf_accel_event_t *a, rf_accel_event_t *b, float *ms_p)
{
    if (!a || !b || !ms_p)
        return RF_ERR_INVALID;
    float ms;
    RF_CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)a->impl, (cudaEvent_t)b->impl));
    *ms_p = ms;
    return RF_OK;
}

static cudaMemcpyKind kind_of(rf_copy_kind_t k)
{
    switch (k) {
    case RF_COPY_H2D:
        return cudaMemcpyHostToDevice;
    case RF_COPY_D2H:
        return cudaMemcpyDeviceToHost;
    case RF_COPY_D2D:
        return cudaMemcpyDeviceToDevice;
    default:
        return cudaMemcpyHostToHost;
    }
}

static rf_status_t cu_copy(rf_accel_t *a, void *dst, const void *src, size_t bytes,
                           rf_copy_kind_t kind, rf_accel_stream_t *s)
{
    if (!a || (unsigned)kind > RF_COPY_H2H || (bytes && (!dst || !src)))
        return RF_ERR_INVALID;
    if (bytes)
        RF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind_of(kind), cs(a, s)));
    return RF_OK;
}

static rf_status_t cu_copy_2d(rf_accel_t *a, void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height, rf_copy_kind_t kind,
                              rf_accel_stream_t *s)
{
    if (!a || (unsigned)kind > RF_COPY_H2H || dpitch < width || spitch < width)
        return RF_ERR_INVALID;
    if (!width || !height)
        return RF_OK;
    if (!dst || !src)
        return RF_ERR_INVALID;
    RF_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind_of(kind),
                                    cs(a, s)));
    return RF_OK;
}

static rf_status_t cu_memset(rf_accel_t *a, void *dst, int value, size_t bytes,
                             rf_accel_stream_t *s)
{
    if (!a || (bytes && !dst))
        return RF_ERR_INVALID;
    if (bytes)
        RF_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, cs(a, s)));
    return RF_OK;
}

/* ---- the strided row copy ------------------------------------------------------------------ */

template <typename T>
__global__ void k_copy_rows(char *dbase, int64_t rs, int64_t cstr, const char *src, int64_t sp,
                            int64_t rows, int64_t cols, bool row_major)
{
    uint64_t n = (uint64_t)rows * (uint64_t)cols;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n;
         t += (uint64_t)gridDim.x * blockDim.x) {
        /* consecutive threads walk the destination's unit-stride direction */
        int64_t i = row_major ? (int64_t)(t / cols) : (int64_t)(t % rows);
        int64_t c = row_major ? (int64_t)(t % cols) : (int64_t)(t / rows);
        /* elements are esize-aligned (arrays of T from cudaMalloc) */
        reinterpret_cast<T *>(dbase)[i * rs + c * cstr] =
            reinterpret_cast<const T *>(src)[i * sp + c];
    }
}

__global__ void k_copy_rows_conv(float *dbase, int64_t rs, int64_t cstr, const uint16_t *src,
                                 int64_t sp, int64_t rows, int64_t cols, bool row_major, int sdt)
{
    uint64_t n = (uint64_t)rows * (uint64_t)cols;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n;
         t += (uint64_t)gridDim.x * blockDim.x) {
        int64_t i = row_major ? (int64_t)(t / cols) : (int64_t)(t % rows);
        int64_t c = row_major ? (int64_t)(t % cols) : (int64_t)(t / rows);
        uint16_t h = src[i * sp + c];
        dbase[i * rs + c * cstr] =
            sdt == RF_DTYPE_BF16 ? rf_cuda_bf16_to_f32(h) : rf_cuda_f16_to_f32(h);
    }
}

template <typename T>
__global__ void k_zero(char *dbase, int64_t rs, int64_t cstr, int64_t rows, int64_t cols,
                       bool row_major)
{
    uint64_t n = (uint64_t)rows * (uint64_t)cols;
    for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < n;
         t += (uint64_t)gridDim.x * blockDim.x) {
        int64_t i = row_major ? (int64_t)(t / cols) : (int64_t)(t % rows);
        int64_t c = row_major ? (int64_t)(t % cols) : (int64_t)(t / rows);
        reinterpret_cast<T *>(dbase)[i * rs + c * cstr] = T(0);
    }
}

/* Which index varies fastest: rows when the destination's rows are the unit stride. */
static bool row_major_walk(int64_t rs, int64_t cstr)
{
    return !(rs == 1 && cstr != 1);
}

static rf_status_t cu_copy_rows(rf_accel_t *a, const rf_accel_rows_t *r, rf_accel_stream_t *s)
{
    if (!a)
        return RF_ERR_INVALID;
    RF_CHECK(rf_accel_rows_check(r));
    if (r->rows == 0 || r->cols == 0)
        return RF_OK;
    const rf_accel_dst_t *d = &r->dst;
    bool conv = rf_accel_rows_convert(r);
    size_t es = d->esize;
    char *base = (char *)d->data +
                 (size_t)(r->expert * d->expert_stride + r->dst_row * d->row_stride +
                          r->dst_col * d->col_stride) * es;
    cudaStream_t st = cs(a, s);
    /* cudaMemcpy2DAsync refuses pitches above the device's max pitch (2^31 on current parts) */
    if (!conv && d->col_stride == 1 && d->row_stride >= r->cols &&
        (size_t)d->row_stride * es < ((size_t)1 << 31) &&
        (size_t)r->src_pitch * es < ((size_t)1 << 31)) {
        RF_CUDA_CHECK(cudaMemcpy2DAsync(base, (size_t)d->row_stride * es, r->src,
                                        (size_t)r->src_pitch * es, (size_t)r->cols * es,
                                        (size_t)r->rows, cudaMemcpyDeviceToDevice, st));
        return RF_OK;
    }
    bool rm = row_major_walk(d->row_stride, d->col_stride);
    unsigned g = rf_cuda_grid_for((uint64_t)r->rows * (uint64_t)r->cols);
    const char *src = (const char *)r->src;
    if (conv)
        k_copy_rows_conv<<<g, RF_CUDA_THREADS, 0, st>>>((float *)base, d->row_stride, d->col_stride,
                                                        (const uint16_t *)src, r->src_pitch,
                                                        r->rows, r->cols, rm, (int)r->src_dtype);
    else if (es == 1)
        k_copy_rows<uint8_t><<<g, RF_CUDA_THREADS, 0, st>>>(base, d->row_stride, d->col_stride, src,
                                                            r->src_pitch, r->rows, r->cols, rm);
    else if (es == 2)
        k_copy_rows<uint16_t><<<g, RF_CUDA_THREADS, 0, st>>>(
            base, d->row_stride, d->col_stride, src, r->src_pitch, r->rows, r->cols, rm);
    else if (es == 4)
        k_copy_rows<uint32_t><<<g, RF_CUDA_THREADS, 0, st>>>(
            base, d->row_stride, d->col_stride, src, r->src_pitch, r->rows, r->cols, rm);
    else
        k_copy_rows<uint64_t><<<g, RF_CUDA_THREADS, 0, st>>>(
            base, d->row_stride, d->col_stride, src, r->src_pitch, r->rows, r->cols, rm);
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}

/* ---- batched row copies (copy_rows_batch) ------------------------------------------------ */

/*
 * One descriptor per row copy. BYTES: a 2-D byte copy (no conversion, unit column stride):
 * `height` rows of `width` bytes, pitches in bytes, cut into tiles of BATCH_TILE bytes per
 * row. ELEM: the strided element copy of k_copy_rows (with the bf16 / f16 -> f32 conversion
 * when conv), cut into tiles of BATCH_ETILE elements. tile0 is the descriptor's first tile in
 * the launch; a tile finds its descriptor in the tile map (uint32 per tile, built by the host;
 * a batch of more than BATCH_MAP_MAX tiles is launched in parts). Copies of at most 16 bytes
 * (wna16 weight_shape) take no tile: they follow the other descriptors and are done one per
 * thread by the last blocks. TRANS: an ELEM copy whose destination is contiguous along the
 * source's rows (row stride 1: the K-first wna16 expert slots, checkpoint (N, K/8) rows into
 * (K/8, N)), cut into square tiles of TRANS_SIDE(esize) elements, each read along the source
 * rows and written along the destination's through shared memory by its own kernel
 * (k_copy_trans), so both sides are coalesced; an ELEM walk reads or writes with the stride.
 */
enum { SEG_BYTES = 0, SEG_ELEM = 1, SEG_TRANS = 2 };
#define BATCH_TILE (32u * 1024u)
#define BATCH_ETILE 4096u
/* 64 x 64 elements of up to 4 bytes, 32 x 32 of 8: at most 64 x 65 x 4 = 16,640 bytes of
 * shared memory a block (one padding column: the column reads hit distinct banks), so 8
 * blocks of 256 threads still fit on a multiprocessor */
#define TRANS_SIDE(es) ((es) == 8 ? 32u : 64u)
#define TRANS_SMEM (64u * 65u * 4u)

struct batch_seg {
    char *dst;
    const char *src;
    uint64_t width;  /* BYTES: bytes per row; ELEM: cols */
    uint64_t height; /* rows */
    int64_t dpitch;  /* BYTES: bytes; ELEM: destination row stride (elements) */
    int64_t spitch;  /* BYTES: bytes; ELEM: source pitch (elements) */
    int64_t dcol;    /* ELEM: destination column stride (elements) */
    uint64_t tile0;
    uint64_t tpr;    /* BYTES: tiles per row */
    uint32_t kind;
    uint32_t esize;  /* ELEM: destination element bytes */
    uint32_t conv;   /* ELEM: 0 none, else the source dtype (BF16 / F16) into F32 */
    uint32_t row_major;
};

__device__ static void tile_bytes(char *d, const char *s, uint64_t len)
{
    if ((((uintptr_t)d | (uintptr_t)s | len) & 15u) == 0) {
        uint4 *dv = reinterpret_cast<uint4 *>(d);
        const uint4 *sv = reinterpret_cast<const uint4 *>(s);
        uint64_t n = len / 16;
        const unsigned T = blockDim.x;
        uint64_t k = threadIdx.x;
        /* eight 16-byte loads in flight per thread, then the stores */
        for (; k + 7 * T < n; k += 8 * T) {
            uint4 r[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                r[u] = __ldg(&sv[k + u * T]);
#pragma unroll
            for (int u = 0; u < 8; u++)
                dv[k + u * T] = r[u];
        }
        if (k < n) { /* a partial tile (a 24 KiB scale): the same, predicated, one round trip */
            uint4 r[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (k + u * T < n)
                    r[u] = __ldg(&sv[k + u * T]);
#pragma unroll
            for (int u = 0; u < 8; u++)
                if (k + u * T < n)
                    dv[k + u * T] = r[u];
        }
        return;
    }
    if ((((uintptr_t)d | (uintptr_t)s | len) & 3u) == 0) {
        for (uint64_t k = threadIdx.x; k < len / 4; k += blockDim.x)
            reinterpret_cast<uint32_t *>(d)[k] = reinterpret_cast<const uint32_t *>(s)[k];
        return;
    }
    for (uint64_t k = threadIdx.x; k < len; k += blockDim.x)
        d[k] = s[k];
}

template <typename T>
__device__ static void tile_elem(const batch_seg_t &g, uint64_t t0, uint64_t t1)
{
    for (uint64_t t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
        int64_t i = g.row_major ? (int64_t)(t / g.width) : (int64_t)(t % g.height);
        int64_t c = g.row_major ? (int64_t)(t % g.width) : (int64_t)(t / g.height);
        reinterpret_cast<T *>(g.dst)[i * g.dpitch + c * g.dcol] =
            reinterpret_cast<const T *>(g.src)[i * g.spitch + c];
    }
}

__device__ static void tile_conv(const batch_seg_t &g, uint64_t t0, uint64_t t1)
{
    for (uint64_t t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
        int64_t i = g.row_major ? (int64_t)(t / g.width) : (int64_t)(t % g.height);
        int64_t c = g.row_major ? (int64_t)(t % g.width) : (int64_t)(t / g.height);
        uint16_t h = reinterpret_cast<const uint16_t *>(g.src)[i * g.spitch + c];
        reinterpret_cast<float *>(g.dst)[i * g.dpitch + c * g.dcol] =
            g.conv == RF_DTYPE_BF16 ? rf_cuda_bf16_to_f32(h) : rf_cuda_f16_to_f32(h);
    }
}

/* One TRANS tile: rows [i0, i0 + S) x columns [c0, c0 + S) of the source (contiguous along
 * columns) into the destination, contiguous along rows (dpitch 1): loads with the column
 * fastest, stores with the row fastest, through sm (S x (S + 1) elements). Full tiles take an
 * unrolled path (S * S / blockDim loads in flight a thread); edge tiles are predicated. */
template <typename T, unsigned S>
__device__ static void tile_trans(const batch_seg_t &g, uint64_t local, unsigned char *raw)
{
    T(*sm)[S + 1] = reinterpret_cast<T(*)[S + 1]>(raw);
    const uint64_t i0 = local / g.tpr * S, c0 = local % g.tpr * S;
    const unsigned h = g.height - i0 < S ? (unsigned)(g.height - i0) : S;
    const unsigned w = g.width - c0 < S ? (unsigned)(g.width - c0) : S;
    const T *src = reinterpret_cast<const T *>(g.src) + (int64_t)i0 * g.spitch + (int64_t)c0;
    T *dst = reinterpret_cast<T *>(g.dst) + (int64_t)i0 + (int64_t)c0 * g.dcol;
    const unsigned x = threadIdx.x % S, y0 = threadIdx.x / S;
    constexpr unsigned STEP = RF_CUDA_THREADS / S;
    if (h == S && w == S) {
#pragma unroll
        for (unsigned y = y0; y < S; y += STEP)
            sm[y][x] = __ldg(&src[(int64_t)y * g.spitch + x]);
        __syncthreads();
#pragma unroll
        for (unsigned y = y0; y < S; y += STEP)
            dst[x + (int64_t)y * g.dcol] = sm[x][y];
    } else {
        if (x < w)
            for (unsigned y = y0; y < h; y += STEP)
                sm[y][x] = __ldg(&src[(int64_t)y * g.spitch + x]);
        __syncthreads();
        if (x < h)
            for (unsigned y = y0; y < w; y += STEP)
                dst[x + (int64_t)y * g.dcol] = sm[x][y];
    }
    __syncthreads(); /* sm is the next tile's */
}

/* The TRANS descriptors of a batch (segs[0, ...), tiles in tmap): one block per tile, launched
 * with RF_CUDA_THREADS threads (the tile's row step). */
__global__ void k_copy_trans(const batch_seg_t *segs, const uint32_t *tmap, uint64_t ntiles)
{
    __shared__ __align__(16) unsigned char raw[TRANS_SMEM];
    __shared__ unsigned sidx;
    for (uint64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        if (threadIdx.x == 0)
            sidx = tmap[tile];
        __syncthreads();
        const batch_seg_t g = segs[sidx];
        __syncthreads();
        uint64_t local = tile - g.tile0;
        if (g.esize == 1)
            tile_trans<uint8_t, 64>(g, local, raw);
        else if (g.esize == 2)
            tile_trans<uint16_t, 64>(g, local, raw);
        else if (g.esize == 4)
            tile_trans<uint32_t, 64>(g, local, raw);
        else
            tile_trans<uint64_t, 32>(g, local, raw);
    }
}

__global__ void k_copy_batch(const batch_seg_t *segs, unsigned nmain, const uint32_t *tmap,
                             uint64_t ntiles, unsigned ntiny)
{
    __shared__ unsigned sidx;
    uint64_t all = ntiles + (ntiny + blockDim.x - 1) / blockDim.x;
    for (uint64_t tile = blockIdx.x; tile < all; tile += gridDim.x) {
        if (tile >= ntiles) { /* copies of at most 16 bytes, one per thread */
            uint64_t i = (tile - ntiles) * blockDim.x + threadIdx.x;
            if (i < ntiny) { /* widest aligned accesses: one store for a weight_shape */
                const batch_seg_t &g = segs[nmain + i];
                uintptr_t al = (uintptr_t)g.dst | (uintptr_t)g.src;
                if (g.width == 16 && (al & 15u) == 0)
                    *reinterpret_cast<uint4 *>(g.dst) = *reinterpret_cast<const uint4 *>(g.src);
                else if ((g.width & 7u) == 0 && (al & 7u) == 0)
                    for (uint64_t b = 0; b < g.width; b += 8)
                        *reinterpret_cast<uint64_t *>(g.dst + b) =
                            *reinterpret_cast<const uint64_t *>(g.src + b);
                else if ((g.width & 3u) == 0 && (al & 3u) == 0)
                    for (uint64_t b = 0; b < g.width; b += 4)
                        *reinterpret_cast<uint32_t *>(g.dst + b) =
                            *reinterpret_cast<const uint32_t *>(g.src + b);
                else
                    for (uint64_t b = 0; b < g.width; b++)
                        g.dst[b] = g.src[b];
            }
            continue;
        }
        if (threadIdx.x == 0)
            sidx = tmap[tile];
        __syncthreads();
        const batch_seg_t g = segs[sidx];
        __syncthreads();
        uint64_t local = tile - g.tile0;
        if (g.kind == SEG_BYTES) {
            uint64_t row = local / g.tpr, off = (local % g.tpr) * BATCH_TILE;
            uint64_t len = g.width - off < BATCH_TILE ? g.width - off : BATCH_TILE;
            tile_bytes(g.dst + row * g.dpitch + off, g.src + row * g.spitch + off, len);
        } else {
            uint64_t n = g.width * g.height, t0 = local * BATCH_ETILE;
            uint64_t t1 = n - t0 < BATCH_ETILE ? n : t0 + BATCH_ETILE;
            if (g.conv)
                tile_conv(g, t0, t1);
            else if (g.esize == 1)
                tile_elem<uint8_t>(g, t0, t1);
            else if (g.esize == 2)
                tile_elem<uint16_t>(g, t0, t1);
            else if (g.esize == 4)
                tile_elem<uint32_t>(g, t0, t1);
            else
                tile_elem<uint64_t>(g, t0, t1);
        }
    }
}

/* The descriptor of one row copy; returns its tile count. */
/* A byte copy (no conversion, unit column stride): height rows of width bytes, one long row
 * when contiguous on both sides. False: an element copy. */
static bool bytes_rows(const rf_accel_rows_t *r, uint64_t *width, uint64_t *height)
{
    const rf_accel_dst_t *d = &r->dst;
    if (rf_accel_rows_convert(r) || d->col_stride != 1)
        return false;
    *width = (uint64_t)r->cols * d->esize;
    *height = (uint64_t)r->rows;
    if (*height > 1 && d->row_stride == r->cols && r->src_pitch == r->cols) {
        *width *= *height;
        *height = 1;
    }
    return true;
}

/* A TRANS copy (k_copy_trans), with the accelerator's switch on: no conversion, the
 * destination contiguous along the source's rows (row stride 1) and its columns at least the
 * copy's rows apart (no two columns overlap); 16 rows and 2 columns at least (a thinner copy
 * is an ELEM walk). */
static bool batch_trans(const cuda_accel_t *c, const rf_accel_rows_t *r)
{
    const rf_accel_dst_t *d = &r->dst;
    return c->transpose && !rf_accel_rows_convert(r) && d->row_stride == 1 &&
           d->col_stride >= r->rows && r->rows >= 16 && r->cols >= 2 &&
           (d->esize == 1 || d->esize == 2 || d->esize == 4 || d->esize == 8);
}

/* A TRANS copy's tile count (S x S tiles, tiles per row into *tpr_p when not NULL). */
static uint64_t trans_tiles(const rf_accel_rows_t *r, uint64_t *tpr_p)
{
    uint64_t S = TRANS_SIDE(r->dst.esize);
    uint64_t tpr = ((uint64_t)r->cols + S - 1) / S;
    if (tpr_p)
        *tpr_p = tpr;
    return ((uint64_t)r->rows + S - 1) / S * tpr;
}

/* trans: a TRANS copy (batch_trans, and the accelerator's transpose switch on) */
static uint64_t batch_describe(const rf_accel_rows_t *r, batch_seg_t *g, uint64_t tile0,
                               bool trans)
{
    const rf_accel_dst_t *d = &r->dst;
    size_t es = d->esize;
    bool conv = rf_accel_rows_convert(r);
    memset(g, 0, sizeof(*g));
    g->dst = (char *)d->data + (size_t)(r->expert * d->expert_stride + r->dst_row * d->row_stride +
                                        r->dst_col * d->col_stride) * es;
    g->src = (const char *)r->src;
    g->tile0 = tile0;
    if (bytes_rows(r, &g->width, &g->height)) {
        g->kind = SEG_BYTES;
        g->dpitch = d->row_stride * (int64_t)es;
        g->spitch = r->src_pitch * (int64_t)es;
        g->tpr = (g->width + BATCH_TILE - 1) / BATCH_TILE;
        return g->tpr * g->height;
    }
    if (trans) {
        g->kind = SEG_TRANS;
        g->width = (uint64_t)r->cols;
        g->height = (uint64_t)r->rows;
        g->dpitch = 1;
        g->spitch = r->src_pitch;
        g->dcol = d->col_stride;
        g->esize = (uint32_t)es;
        return trans_tiles(r, &g->tpr);
    }
    g->kind = SEG_ELEM;
    g->width = (uint64_t)r->cols;
    g->height = (uint64_t)r->rows;
    g->dpitch = d->row_stride;
    g->spitch = r->src_pitch;
    g->dcol = d->col_stride;
    g->esize = (uint32_t)es;
    g->conv = conv ? (uint32_t)r->src_dtype : 0u;
    g->row_major = row_major_walk(d->row_stride, d->col_stride) ? 1u : 0u;
    return (g->width * g->height + BATCH_ETILE - 1) / BATCH_ETILE;
}

/* A copy of at most 16 contiguous bytes, no conversion (done one per thread, no tile). */
static bool batch_tiny(const rf_accel_rows_t *r)
{
    uint64_t w, h;
    return r->rows > 0 && r->cols > 0 && bytes_rows(r, &w, &h) && h == 1 && w <= 16;
}

/* batch_describe's tile count, without the descriptor. */
static uint64_t batch_tiles(const rf_accel_rows_t *r, bool trans)
{
    uint64_t w, h;
    if (trans)
        return trans_tiles(r, NULL);
    if (bytes_rows(r, &w, &h))
        return (w + BATCH_TILE - 1) / BATCH_TILE * h;
    return ((uint64_t)r->cols * (uint64_t)r->rows + BATCH_ETILE - 1) / BATCH_ETILE;
}

/* Tiles of one launch at most (its map: 4 bytes a tile); a larger batch goes in parts. */
#define BATCH_MAP_MAX (1ull << 24)

/* A piece for the copy engines: one contiguous run of at least engine_min bytes (its
 * destination and length into *dst_p, *len_p). */
static bool batch_engine(const cuda_accel_t *c, const rf_accel_rows_t *r, char **dst_p,
                         uint64_t *len_p)
{
    uint64_t w, h;
    if (r->rows <= 0 || r->cols <= 0 || !bytes_rows(r, &w, &h) || h != 1 ||
        w < (uint64_t)c->engine_min)
        return false;
    const rf_accel_dst_t *d = &r->dst;
    *dst_p = (char *)d->data + (size_t)(r->expert * d->expert_stride + r->dst_row * d->row_stride +
                                        r->dst_col * d->col_stride) * d->esize;
    *len_p = w;
    return true;
}

static rf_status_t cu_copy_rows_batch(rf_accel_t *a, const rf_accel_rows_t *rows, size_t n,
                                      rf_accel_stream_t *s)
{
    if (!a || (n && !rows) || n > UINT32_MAX)
        return RF_ERR_INVALID;
    cuda_accel_t *c = (cuda_accel_t *)a->impl;
    /* descriptors: tiled ones first (tile0 in order), tiny ones (<= 16 contiguous bytes) after;
     * contiguous pieces of engine_min bytes or more take none (the copy engines, below) */
    size_t m = 0, ntiny = 0, neng = 0, ntrans = 0;
    uint64_t tiles = 0, ttiles = 0;
    for (size_t i = 0; i < n; i++) {
        RF_CHECK(rf_accel_rows_check(&rows[i]));
        char *ed;
        uint64_t el;
        if (rows[i].rows <= 0 || rows[i].cols <= 0)
            continue;
        if (batch_engine(c, &rows[i], &ed, &el)) {
            neng++;
            continue;
        }
        m++;
        if (batch_tiny(&rows[i]))
            ntiny++;
        else if (batch_trans(c, &rows[i])) {
            ntrans++;
            ttiles += batch_tiles(&rows[i], true);
        } else
            tiles += batch_tiles(&rows[i], false);
    }
    if (tiles + ttiles > BATCH_MAP_MAX) { /* 512 GiB of byte tiles: halves, each with its own map */
        if (n == 1)
            return RF_ERR_INVALID;
        RF_CHECK(cu_copy_rows_batch(a, rows, n / 2, s));
        return cu_copy_rows_batch(a, rows + n / 2, n - n / 2, s);
    }
    cudaStream_t st = cs(a, s);
    /* the copy engines first, in order, on the same stream (the destinations do not overlap, so
     * the order against the kernel below does not matter) */
    for (size_t i = 0; i < n && neng > 0; i++) {
        char *ed;
        uint64_t el;
        if (batch_engine(c, &rows[i], &ed, &el))
            RF_CUDA_CHECK(cudaMemcpyAsync(ed, rows[i].src, (size_t)el, cudaMemcpyDeviceToDevice,
                                          st));
    }
    if (m == 0)
        return RF_OK;
    size_t nmain = m - ntiny - ntrans; /* descriptors: [nmain tiled][ntiny][ntrans] */
    batch_buf_t *b = &c->ring[c->next++ % BATCH_RING];
    if (b->used)
        RF_CUDA_CHECK(cudaEventSynchronize(b->done)); /* the kernel that read it is done */
    b->used = false;
    if (!b->done)
        RF_CUDA_CHECK(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming));
    size_t segb = m * sizeof(batch_seg_t), need = segb + (tiles + ttiles) * sizeof(uint32_t);
    if (b->cap < need) {
        size_t cap = need < 65536 ? 65536 : need * 2;
        if (b->h)
            cudaFreeHost(b->h);
        if (b->d)
            cudaFree(b->d);
        b->h = NULL;
        b->d = NULL;
        b->cap = 0;
        RF_CUDA_CHECK(cudaMallocHost((void **)&b->h, cap));
        RF_CUDA_CHECK(cudaMalloc((void **)&b->d, cap));
        b->cap = cap;
    }
    batch_seg_t *hs = (batch_seg_t *)b->h;
    uint32_t *map = (uint32_t *)(b->h + segb);
    uint32_t *tmap = map + tiles; /* the TRANS tiles' map (tile0 counts from its start) */
    uint64_t t = 0, tt = 0;
    size_t k = 0, q = nmain, p = nmain + ntiny;
    for (size_t i = 0; i < n; i++) {
        char *ed;
        uint64_t el;
        if (rows[i].rows <= 0 || rows[i].cols <= 0 || batch_engine(c, &rows[i], &ed, &el))
            continue;
        if (batch_tiny(&rows[i])) {
            batch_describe(&rows[i], &hs[q++], 0, false);
            continue;
        }
        if (batch_trans(c, &rows[i])) {
            uint64_t nt = batch_describe(&rows[i], &hs[p], tt, true);
            for (uint64_t u = 0; u < nt; u++)
                tmap[tt + u] = (uint32_t)p;
            tt += nt;
            p++;
            continue;
        }
        uint64_t nt = batch_describe(&rows[i], &hs[k], t, false);
        for (uint64_t u = 0; u < nt; u++)
            map[t + u] = (uint32_t)k;
        t += nt;
        k++;
    }
    if (t != tiles || k != nmain || q != nmain + ntiny || tt != ttiles || p != m)
        return RF_ERR_INTERNAL;
    RF_CUDA_CHECK(cudaMemcpyAsync(b->d, b->h, need, cudaMemcpyHostToDevice, st));
    /* one block per tile: bench/copy-variants.cu measured this against persistent grids (4-16
     * blocks per multiprocessor walking the tiles) and streaming cache hints, all 1-10% slower
     * on the H200 (docs/benchmarks.md) */
    uint64_t all = tiles + (ntiny + RF_CUDA_THREADS - 1) / RF_CUDA_THREADS;
    if (all > 0) {
        unsigned grid = all > (1u << 30) ? (1u << 30) : (unsigned)all;
        k_copy_batch<<<grid, RF_CUDA_THREADS, 0, st>>>((const batch_seg_t *)b->d,
                                                       (unsigned)nmain,
                                                       (const uint32_t *)(b->d + segb), tiles,
                                                       (unsigned)ntiny);
        RF_CUDA_LAUNCH_CHECK();
    }
    if (ttiles > 0) { /* its own kernel: the byte tiles keep their occupancy */
        unsigned grid = ttiles > (1u << 30) ? (1u << 30) : (unsigned)ttiles;
        k_copy_trans<<<grid, RF_CUDA_THREADS, 0, st>>>(
            (const batch_seg_t *)b->d, (const uint32_t *)(b->d + segb) + tiles, ttiles);
        RF_CUDA_LAUNCH_CHECK();
    }
    RF_CUDA_CHECK(cudaEventRecord(b->done, st));
    b->used = true;
    return RF_OK;
}

static rf_status_t cu_zero_rows(rf_accel_t *a, const rf_accel_dst_t *d, int64_t row_begin,
                                int64_t nrows, int64_t cols, rf_accel_stream_t *s)
{
    if (!a || !d || row_begin < 0 || nrows < 0 || cols < 0 ||
        (d->esize != 1 && d->esize != 2 && d->esize != 4 && d->esize != 8))
        return RF_ERR_INVALID;
    if (nrows == 0 || cols == 0)
        return RF_OK;
    size_t es = d->esize;
    char *base = (char *)d->data + (size_t)(row_begin * d->row_stride) * es;
    cudaStream_t st = cs(a, s);
    if (d->col_stride == 1 && d->row_stride >= cols &&
        (size_t)d->row_stride * es < ((size_t)1 << 31)) {
        RF_CUDA_CHECK(cudaMemset2DAsync(base, (size_t)d->row_stride * es, 0, (size_t)cols * es,
                                        (size_t)nrows, st));
        return RF_OK;
    }
    bool rm = row_major_walk(d->row_stride, d->col_stride);
    unsigned g = rf_cuda_grid_for((uint64_t)nrows * (uint64_t)cols);
    if (es == 1)
        k_zero<uint8_t>
            <<<g, RF_CUDA_THREADS, 0, st>>>(base, d->row_stride, d->col_stride, nrows, cols, rm);
    else if (es == 2)
        k_zero<uint16_t>
            <<<g, RF_CUDA_THREADS, 0, st>>>(base, d->row_stride, d->col_stride, nrows, cols, rm);
    else if (es == 4)
        k_zero<uint32_t>
            <<<g, RF_CUDA_THREADS, 0, st>>>(base, d->row_stride, d->col_stride, nrows, cols, rm);
    else
        k_zero<uint64_t>
            <<<g, RF_CUDA_THREADS, 0, st>>>(base, d->row_stride, d->col_stride, nrows, cols, rm);
    RF_CUDA_LAUNCH_CHECK();
    return RF_OK;
}

/* ---- checksum: per-thread sums, per-block tree, one 64-bit atomicAdd per block ------------- */

__device__ static inline uint64_t d_fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

__global__ void k_checksum(const unsigned char *p, uint64_t bytes, bool aligned, uint64_t word0,
                           unsigned long long *acc)
{
    __shared__ unsigned long long red[RF_CUDA_THREADS];
    uint64_t nw = (bytes + 7) / 8, S = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < nw;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t w = 0;
        if (aligned && 8 * i + 8 <= bytes) {
            w = ((const uint64_t *)p)[i];
        } else {
            for (uint64_t b = 0; b < 8 && 8 * i + b < bytes; b++)
                w |= (uint64_t)p[8 * i + b] << (8 * b);
        }
        S += d_fmix64(w ^ ((word0 + i + 1) * 0x9E3779B97F4A7C15ull));
    }
    red[threadIdx.x] = S;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h)
            red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(acc, red[0]);
}

static rf_status_t cu_checksum(rf_accel_t *a, const void *buf, size_t bytes, uint64_t *sum_p,
                               rf_accel_stream_t *s)
{
    if (!a || (bytes && !buf) || !sum_p)
        return RF_ERR_INVALID;
    cuda_stream_t *c = stream_impl(a, s);
    RF_CUDA_CHECK(cudaMemsetAsync(c->d_scratch, 0, 2 * sizeof(unsigned long long), c->s));
    if (bytes) {
        k_checksum<<<rf_cuda_grid_for((bytes + 7) / 8), RF_CUDA_THREADS, 0, c->s>>>(
            (const unsigned char *)buf, bytes, ((uintptr_t)buf & 7) == 0, 0, c->d_scratch);
        RF_CUDA_LAUNCH_CHECK();
    }
    RF_CUDA_CHECK(cudaMemcpyAsync(c->h_scratch, c->d_scratch, sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, c->s));
    RF_CUDA_CHECK(cudaStreamSynchronize(c->s));
    *sum_p = rf_accel_sum_final(c->h_scratch[0], bytes);
    return RF_OK;
}

/* The same sum into the caller's accumulator, copied to its pinned word; nothing waits. */
static rf_status_t cu_checksum_async(rf_accel_t *a, const void *buf, size_t bytes, uint64_t word0,
                                     void *acc, uint64_t *out, rf_accel_stream_t *s)
{
    if (!a || (bytes && !buf) || !acc || !out)
        return RF_ERR_INVALID;
    cuda_stream_t *c = stream_impl(a, s);
    RF_CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(unsigned long long), c->s));
    if (bytes) {
        k_checksum<<<rf_cuda_grid_for((bytes + 7) / 8), RF_CUDA_THREADS, 0, c->s>>>(
            (const unsigned char *)buf, bytes, ((uintptr_t)buf & 7) == 0, word0,
            (unsigned long long *)acc);
        RF_CUDA_LAUNCH_CHECK();
    }
    RF_CUDA_CHECK(
        cudaMemcpyAsync(out, acc, sizeof(unsigned long long), cudaMemcpyDeviceToHost, c->s));
    return RF_OK;
}

extern "C" const rf_accel_ops_t rf_accel_cuda_ops = {
    /* .name = */ "cuda",
    /* .mem_type = */ RF_MEM_CUDA,
    /* .device_count = */ cu_device_count,
    /* .create = */ cu_create,
    /* .destroy = */ cu_destroy,
    /* .select = */ cu_select,
    /* .alloc = */ cu_alloc,
    /* .free = */ cu_free,
    /* .alloc_host = */ cu_alloc_host,
    /* .free_host = */ cu_free_host,
    /* .stream_create = */ cu_stream_create,
    /* .stream_destroy = */ cu_stream_destroy,
    /* .stream_sync = */ cu_stream_sync,
    /* .event_create = */ cu_event_create,
    /* .event_destroy = */ cu_event_destroy,
    /* .event_record = */ cu_event_record,
    /* .event_sync = */ cu_event_sync,
    /* .event_query = */ cu_event_query,
    /* .event_elapsed_ms = */ cu_event_elapsed_ms,
    /* .copy = */ cu_copy,
    /* .copy_2d = */ cu_copy_2d,
    /* .memset = */ cu_memset,
    /* .copy_rows = */ cu_copy_rows,
    /* .copy_rows_batch = */ cu_copy_rows_batch,
    /* .zero_rows = */ cu_zero_rows,
    /* .checksum = */ cu_checksum,
    /* .set_engine_min = */ cu_set_engine_min,
    /* .checksum_async = */ cu_checksum_async,
};
