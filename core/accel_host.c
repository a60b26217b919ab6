/*
 * refit: the host accelerator ("host"), the reference implementation (STYLE.md: the null
 * accelerator component). Memory is 256-byte aligned host memory, streams and events are
 * placeholders and every operation completes before it returns. The CUDA implementation
 * (accel_cuda.cu) is compared with these functions byte for byte on the GPU host.
 *
 * The format kernels (quantizers, fnuz, tile repack) are not here: they are the formats' table
 * (include/refit/quant_ops.h, formats/quant_host.c), and the generator's device fill is the
 * generator's (rf_gen_ops_t, runtime/generator.c).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "refit/accel.h"
#include "refit/dtype.h"

#define HOST_ALIGN 256

static rf_status_t host_device_count(int *count_p)
{
    if (!count_p)
        return RF_ERR_INVALID;
    *count_p = 1;
    return RF_OK;
}

static rf_status_t host_create(int device, rf_accel_t **accel_p)
{
    if (device != 0 || !accel_p)
        return RF_ERR_INVALID;
    rf_accel_t *a = calloc(1, sizeof(*a));
    if (!a)
        return RF_ERR_NOMEM;
    a->ops = &rf_accel_host_ops;
    a->device = 0;
    *accel_p = a;
    return RF_OK;
}

/*
 * "host-device" keeps what a GPU would still be doing: an h2d copy from its pinned host memory
 * (alloc_host) is asynchronous on a GPU, so the source must stay as it is until an event
 * recorded after the copy (or a stream synchronize) says it completed. The emulation copies at
 * once but remembers each such copy's source and its checksum; a completion (event_sync,
 * event_query reporting done, stream_sync, free_host of the source) checks that the source
 * still holds those bytes. One that changed is a read a GPU could have made of the new bytes:
 * RF_ERR_CUDA from the completing call, so a buffer reused before its copy completed (the mpi
 * receive buffers' event gate, transport/transport_mpi_chunks.c) fails the update in the CPU
 * suite instead of passing by the emulation's synchronous copy. Pageable sources are not
 * tracked: cudaMemcpyAsync consumes them before it returns.
 */
typedef struct host_pin {
    const char *base;
    size_t bytes;
} host_pin_t;

typedef struct host_pending {
    const void *src;
    size_t bytes;
    uint64_t sum; /* rf_accel_checksum of src when the copy was enqueued */
    uint64_t seq; /* the accelerator's copy counter at the enqueue */
} host_pending_t;

typedef struct host_dev {
    host_pin_t *pins;
    size_t npins, pincap;
    host_pending_t *pend;
    size_t npend, pendcap;
    uint64_t seq;     /* tracked copies enqueued so far */
    uint64_t changed; /* sources found changed at completion */
} host_dev_t;

static host_dev_t *host_dev_of(const rf_accel_t *accel)
{
    return accel != NULL && accel->ops == &rf_accel_host_device_ops ? accel->impl : NULL;
}

/* Completes the tracked copies enqueued before `mark` (UINT64_MAX: all of them; src non-NULL:
 * only those reading [src, src + bytes)): RF_ERR_CUDA when one's source changed. */
static rf_status_t host_dev_complete(host_dev_t *d, uint64_t mark, const char *src, size_t bytes)
{
    if (d == NULL)
        return RF_OK;
    rf_status_t st = RF_OK;
    size_t q = 0;
    for (size_t i = 0; i < d->npend; i++) {
        host_pending_t *p = &d->pend[i];
        const char *ps = p->src;
        bool hit = p->seq < mark && (src == NULL || (ps >= src && ps < src + bytes));
        if (!hit) {
            d->pend[q++] = *p;
            continue;
        }
        if (rf_accel_checksum(p->src, p->bytes) != p->sum) {
            d->changed++;
            st = RF_ERR_CUDA;
        }
    }
    d->npend = q;
    return st;
}

static rf_status_t host_dev_track(host_dev_t *d, const void *src, size_t bytes)
{
    const char *s = src;
    bool pinned = false;
    for (size_t i = 0; i < d->npins && !pinned; i++)
        pinned = s >= d->pins[i].base && s < d->pins[i].base + d->pins[i].bytes;
    if (!pinned || bytes == 0)
        return RF_OK;
    if (d->npend == d->pendcap) {
        size_t cap = d->pendcap ? 2 * d->pendcap : 16;
        host_pending_t *p = realloc(d->pend, cap * sizeof(*p));
        if (p == NULL)
            return RF_ERR_NOMEM;
        d->pend = p;
        d->pendcap = cap;
    }
    d->pend[d->npend++] = (host_pending_t){src, bytes, rf_accel_checksum(src, bytes), d->seq++};
    return RF_OK;
}

uint64_t rf_accel_host_device_changed(const rf_accel_t *accel, uint64_t *tracked_p)
{
    const host_dev_t *d = host_dev_of(accel);
    if (tracked_p != NULL)
        *tracked_p = d != NULL ? d->seq : 0;
    return d != NULL ? d->changed : 0;
}

static void host_destroy(rf_accel_t *accel)
{
    host_dev_t *d = host_dev_of(accel);
    if (d != NULL) {
        free(d->pins);
        free(d->pend);
        free(d);
    }
    free(accel);
}

static rf_status_t host_select(rf_accel_t *accel) { return accel ? RF_OK : RF_ERR_INVALID; }

static rf_status_t host_alloc(rf_accel_t *accel, size_t bytes, void **ptr_p)
{
    (void)accel;
    if (!ptr_p)
        return RF_ERR_INVALID;
    if (bytes == 0) {
        *ptr_p = NULL;
        return RF_OK;
    }
    size_t rounded = (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
    if (rounded < bytes)
        return RF_ERR_NOMEM;
    void *p = aligned_alloc(HOST_ALIGN, rounded);
    if (!p)
        return RF_ERR_NOMEM;
    *ptr_p = p;
    return RF_OK;
}

static void host_free(rf_accel_t *accel, void *ptr)
{
    (void)accel;
    free(ptr);
}

/* host-device's pinned memory: host_alloc, remembered so the h2d copies from it are tracked */
static rf_status_t host_dev_alloc_host(rf_accel_t *accel, size_t bytes, void **ptr_p)
{
    host_dev_t *d = host_dev_of(accel);
    if (d == NULL) /* an object not made by create: plain memory, untracked */
        return host_alloc(accel, bytes, ptr_p);
    if (d->npins == d->pincap) {
        size_t cap = d->pincap ? 2 * d->pincap : 8;
        host_pin_t *p = realloc(d->pins, cap * sizeof(*p));
        if (p == NULL)
            return RF_ERR_NOMEM;
        d->pins = p;
        d->pincap = cap;
    }
    RF_CHECK(host_alloc(accel, bytes, ptr_p));
    if (*ptr_p != NULL)
        d->pins[d->npins++] = (host_pin_t){*ptr_p, bytes};
    return RF_OK;
}

static void host_dev_free_host(rf_accel_t *accel, void *ptr)
{
    host_dev_t *d = host_dev_of(accel);
    for (size_t i = 0; d != NULL && ptr != NULL && i < d->npins; i++) {
        if (d->pins[i].base != ptr)
            continue;
        /* its copies complete first (checked as at an event) */
        (void)host_dev_complete(d, UINT64_MAX, d->pins[i].base, d->pins[i].bytes);
        d->pins[i] = d->pins[--d->npins];
        break;
    }
    free(ptr);
}

static rf_status_t host_stream_create(rf_accel_t *accel, rf_accel_stream_t **stream_p)
{
    if (!accel || !stream_p)
        return RF_ERR_INVALID;
    rf_accel_stream_t *s = calloc(1, sizeof(*s));
    if (!s)
        return RF_ERR_NOMEM;
    s->ops = &rf_accel_host_ops;
    s->accel = accel;
    *stream_p = s;
    return RF_OK;
}

static void host_stream_destroy(rf_accel_stream_t *stream) { free(stream); }

static rf_status_t host_stream_sync(rf_accel_stream_t *stream)
{
    return stream != NULL ? host_dev_complete(host_dev_of(stream->accel), UINT64_MAX, NULL, 0)
                          : RF_OK;
}

/* A host event: every host op has completed when it returns, so recording an event stamps
 * the monotonic clock and elapsed times are wall times between records. */
typedef struct host_event {
    rf_accel_event_t e; /* first: the rf_accel_event_t * is the host_event_t * */
    double t;           /* seconds, CLOCK_MONOTONIC, at the last record (0: never recorded) */
    uint64_t mark;      /* host-device: tracked copies enqueued before the last record */
} host_event_t;

static double host_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static rf_status_t host_event_create(rf_accel_t *accel, rf_accel_event_t **event_p)
{
    if (!accel || !event_p)
        return RF_ERR_INVALID;
    host_event_t *h = calloc(1, sizeof(*h));
    if (!h)
        return RF_ERR_NOMEM;
    h->e.ops = &rf_accel_host_ops;
    h->e.accel = accel;
    h->e.impl = h;
    *event_p = &h->e;
    return RF_OK;
}

static void host_event_destroy(rf_accel_event_t *event) { free(event); }

static rf_status_t host_event_record(rf_accel_event_t *event, rf_accel_stream_t *stream)
{
    (void)stream;
    if (!event)
        return RF_ERR_INVALID;
    host_event_t *h = event->impl;
    const host_dev_t *d = host_dev_of(event->accel);
    h->t = host_now();
    h->mark = d != NULL ? d->seq : 0;
    return RF_OK;
}

static rf_status_t host_event_sync(rf_accel_event_t *event)
{
    if (!event)
        return RF_ERR_INVALID;
    return host_dev_complete(host_dev_of(event->accel), ((host_event_t *)event->impl)->mark,
                             NULL, 0);
}

static rf_status_t host_event_query(rf_accel_event_t *event, bool *done_p)
{
    if (!event || !done_p)
        return RF_ERR_INVALID;
    /* done at once: the copies before the record complete now */
    RF_CHECK(host_event_sync(event));
    *done_p = true;
    return RF_OK;
}

static rf_status_t host_event_elapsed_ms(rf_accel_event_t *start, rf_accel_event_t *end,
                                         float *ms_p)
{
    if (!start || !end || !ms_p)
        return RF_ERR_INVALID;
    const host_event_t *a = start->impl, *b = end->impl;
    if (a->t == 0 || b->t == 0) /* as cudaEventElapsedTime: both must have been recorded */
        return RF_ERR_INVALID;
    *ms_p = (float)((b->t - a->t) * 1e3);
    return RF_OK;
}

static rf_status_t host_copy(rf_accel_t *accel, void *dst, const void *src, size_t bytes,
                             rf_copy_kind_t kind, rf_accel_stream_t *stream)
{
    (void)stream;
    if ((unsigned)kind > RF_COPY_H2H || (bytes && (!dst || !src)))
        return RF_ERR_INVALID;
    host_dev_t *d = host_dev_of(accel);
    if (d != NULL && kind == RF_COPY_H2D)
        RF_CHECK(host_dev_track(d, src, bytes));
    if (bytes)
        memmove(dst, src, bytes);
    return RF_OK;
}

static rf_status_t host_copy_2d(rf_accel_t *accel, void *dst, size_t dst_pitch, const void *src,
                                size_t src_pitch, size_t width, size_t height,
                                rf_copy_kind_t kind, rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if ((unsigned)kind > RF_COPY_H2H || dst_pitch < width || src_pitch < width)
        return RF_ERR_INVALID;
    if (!width || !height)
        return RF_OK;
    if (!dst || !src)
        return RF_ERR_INVALID;
    for (size_t i = 0; i < height; i++)
        memcpy((char *)dst + i * dst_pitch, (const char *)src + i * src_pitch, width);
    return RF_OK;
}

static rf_status_t host_memset(rf_accel_t *accel, void *dst, int value, size_t bytes,
                               rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if (bytes && !dst)
        return RF_ERR_INVALID;
    if (bytes)
        memset(dst, value, bytes);
    return RF_OK;
}

static float half_bits_to_f32(uint16_t h, rf_dtype_t dt)
{
    return dt == RF_DTYPE_BF16 ? rf_bf16_to_f32(h) : rf_f16_to_f32(h);
}

static rf_status_t host_copy_rows(rf_accel_t *accel, const rf_accel_rows_t *r,
                                  rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    RF_CHECK(rf_accel_rows_check(r));
    if (r->rows == 0 || r->cols == 0)
        return RF_OK;
    const rf_accel_dst_t *d = &r->dst;
    bool conv = rf_accel_rows_convert(r);
    size_t es = d->esize, ses = conv ? 2 : es;
    char *base = (char *)d->data + (size_t)(r->expert * d->expert_stride +
                                            r->dst_row * d->row_stride +
                                            r->dst_col * d->col_stride) * es;
    const char *src = r->src;
    for (int64_t i = 0; i < r->rows; i++) {
        char *drow = base + (size_t)(i * d->row_stride) * es;
        const char *srow = src + (size_t)(i * r->src_pitch) * ses;
        if (!conv && d->col_stride == 1) {
            memcpy(drow, srow, (size_t)r->cols * es);
            continue;
        }
        for (int64_t c = 0; c < r->cols; c++) {
            char *de = drow + (size_t)(c * d->col_stride) * es;
            if (conv) {
                uint16_t h;
                memcpy(&h, srow + (size_t)c * 2, 2);
                float f = half_bits_to_f32(h, r->src_dtype);
                memcpy(de, &f, 4);
            } else {
                memcpy(de, srow + (size_t)c * es, es);
            }
        }
    }
    return RF_OK;
}

static rf_status_t host_zero_rows(rf_accel_t *accel, const rf_accel_dst_t *d, int64_t row_begin,
                                  int64_t nrows, int64_t cols, rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if (!d || row_begin < 0 || nrows < 0 || cols < 0 ||
        (d->esize != 1 && d->esize != 2 && d->esize != 4 && d->esize != 8))
        return RF_ERR_INVALID;
    size_t es = d->esize;
    for (int64_t i = 0; i < nrows; i++) {
        char *row = (char *)d->data + (size_t)((row_begin + i) * d->row_stride) * es;
        if (d->col_stride == 1) {
            memset(row, 0, (size_t)cols * es);
            continue;
        }
        for (int64_t c = 0; c < cols; c++)
            memset(row + (size_t)(c * d->col_stride) * es, 0, es);
    }
    return RF_OK;
}

static rf_status_t host_copy_rows_batch(rf_accel_t *accel, const rf_accel_rows_t *rows, size_t n,
                                        rf_accel_stream_t *stream)
{
    if (n && !rows)
        return RF_ERR_INVALID;
    for (size_t i = 0; i < n; i++)
        RF_CHECK(host_copy_rows(accel, &rows[i], stream));
    return RF_OK;
}

static rf_status_t host_checksum(rf_accel_t *accel, const void *buf, size_t bytes,
                                 uint64_t *sum_p, rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if ((bytes && !buf) || !sum_p)
        return RF_ERR_INVALID;
    *sum_p = rf_accel_checksum(buf, bytes);
    return RF_OK;
}

static rf_status_t host_checksum_async(rf_accel_t *accel, const void *buf, size_t bytes,
                                       uint64_t word0, void *acc, uint64_t *out,
                                       rf_accel_stream_t *stream)
{
    (void)accel;
    (void)stream;
    if ((bytes && !buf) || !acc || !out)
        return RF_ERR_INVALID;
    *out = rf_accel_sum_words(buf, bytes, word0);
    memcpy(acc, out, sizeof(*out)); /* as the device's accumulator would hold it */
    return RF_OK;
}

/* No copy engines and no kernel on the host: every piece is already a memcpy. */
static rf_status_t host_set_engine_min(rf_accel_t *accel, size_t bytes)
{
    (void)bytes;
    return accel ? RF_OK : RF_ERR_INVALID;
}

/* The entries the host table and the host-device table below share: all but the name, the
 * memory type and create. */
#define HOST_OPS_SHARED                                                                            \
    .device_count = host_device_count, .destroy = host_destroy, .select = host_select,             \
    .alloc = host_alloc, .free = host_free, .stream_create = host_stream_create,                   \
    .stream_destroy = host_stream_destroy, .stream_sync = host_stream_sync,                        \
    .event_create = host_event_create, .event_destroy = host_event_destroy,                        \
    .event_record = host_event_record, .event_sync = host_event_sync,                              \
    .event_query = host_event_query, .event_elapsed_ms = host_event_elapsed_ms, .copy = host_copy, \
    .copy_2d = host_copy_2d, .memset = host_memset, .copy_rows = host_copy_rows,                   \
    .copy_rows_batch = host_copy_rows_batch, .zero_rows = host_zero_rows,                          \
    .checksum = host_checksum, .set_engine_min = host_set_engine_min,                              \
    .checksum_async = host_checksum_async

const rf_accel_ops_t rf_accel_host_ops = {
    .name = "host",
    .mem_type = RF_MEM_HOST,
    .create = host_create,
    .alloc_host = host_alloc,
    .free_host = host_free,
    HOST_OPS_SHARED,
};

/*
 * "host-device" (tests only): the host implementation tagged as device memory, so code that
 * takes the device branches (staging, d2h reads, owners on the accel ops) runs on a machine
 * without a GPU. Memory is still host memory; every copy kind is a memmove, and an h2d copy from
 * its alloc_host memory is tracked until it completes (host_dev_complete, above).
 */
static rf_status_t host_dev_create(int device, rf_accel_t **accel_p)
{
    RF_CHECK(host_create(device, accel_p));
    host_dev_t *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        free(*accel_p);
        *accel_p = NULL;
        return RF_ERR_NOMEM;
    }
    (*accel_p)->ops = &rf_accel_host_device_ops;
    (*accel_p)->impl = d;
    return RF_OK;
}

const rf_accel_ops_t rf_accel_host_device_ops = {
    .name = "host-device",
    .mem_type = RF_MEM_CUDA,
    .create = host_dev_create,
    .alloc_host = host_dev_alloc_host,
    .free_host = host_dev_free_host,
    HOST_OPS_SHARED,
};

/* ---- shared by every implementation ---------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
/* The whole words of rf_accel_sum_words, eight lanes at a time with AVX-512 (the sender's seal
 * over mpi into GPU storage: about 3x the scalar loop, which is bound by its 64-bit
 * multiplies). The same sum mod 2^64: addition is associative, so lanes may add in any order.
 * Returns the sum of words [0, *done) and sets *done (a multiple of 8, <= nw). */
__attribute__((target("avx512f,avx512dq"))) static uint64_t
sum_words_avx512(const unsigned char *p, size_t nw, uint64_t word0, size_t *done)
{
    const __m512i m1 = _mm512_set1_epi64((long long)0xFF51AFD7ED558CCDull);
    const __m512i m2 = _mm512_set1_epi64((long long)0xC4CEB9FE1A85EC53ull);
    const __m512i step = _mm512_set1_epi64((long long)(8 * 0x9E3779B97F4A7C15ull));
    /* lane k's key: (word0 + i + k + 1) * K, advanced by 8K per iteration */
    __m512i key = _mm512_mullo_epi64(_mm512_add_epi64(_mm512_set1_epi64((long long)(word0 + 1)),
                                                      _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7)),
                                     _mm512_set1_epi64((long long)0x9E3779B97F4A7C15ull));
    __m512i acc = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 8 <= nw; i += 8) {
        __m512i x = _mm512_xor_si512(_mm512_loadu_si512((const void *)(p + 8 * i)), key);
        x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 33));
        x = _mm512_mullo_epi64(x, m1);
        x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 33));
        x = _mm512_mullo_epi64(x, m2);
        x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 33));
        acc = _mm512_add_epi64(acc, x);
        key = _mm512_add_epi64(key, step);
    }
    *done = i;
    /* the lanes summed unsigned (gcc 12's _mm512_reduce_add_epi64 adds them as signed long
     * long, which UBSan reports as overflow) */
    uint64_t lanes[8], S = 0;
    _mm512_storeu_si512((void *)lanes, acc);
    for (int k = 0; k < 8; k++)
        S += lanes[k];
    return S;
}
#endif

uint64_t rf_accel_sum_words(const void *buf, size_t bytes, uint64_t word0)
{
    const unsigned char *p = buf;
    uint64_t S = 0;
    size_t nw = bytes / 8, i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (nw >= 64 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
        S = sum_words_avx512(p, nw, word0, &i);
#endif
    for (; i < nw; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8); /* little-endian (the build refuses big-endian) */
        S += rf_accel_sum_mix(w, word0 + i);
    }
    if (bytes % 8) {
        uint64_t w = 0;
        memcpy(&w, p + 8 * nw, bytes % 8);
        S += rf_accel_sum_mix(w, word0 + nw);
    }
    return S;
}

uint64_t rf_accel_checksum(const void *buf, size_t bytes)
{
    return rf_accel_sum_final(rf_accel_sum_words(buf, bytes, 0), bytes);
}

bool rf_accel_rows_convert(const rf_accel_rows_t *r)
{
    return r->dst.dtype == RF_DTYPE_F32 &&
           (r->src_dtype == RF_DTYPE_BF16 || r->src_dtype == RF_DTYPE_F16);
}

rf_status_t rf_accel_rows_check(const rf_accel_rows_t *r)
{
    if (!r)
        return RF_ERR_INVALID;
    size_t es = r->dst.esize;
    if (es != 1 && es != 2 && es != 4 && es != 8)
        return RF_ERR_INVALID;
    if (r->rows < 0 || r->cols < 0 || r->src_pitch < r->cols || r->expert < 0 ||
        r->dst_row < 0 || r->dst_col < 0)
        return RF_ERR_INVALID;
    if (!rf_accel_rows_convert(r) && rf_dtype_size(r->src_dtype) != es)
        return RF_ERR_INVALID;
    if (r->rows && r->cols && (!r->dst.data || !r->src))
        return RF_ERR_INVALID;
    return RF_OK;
}
