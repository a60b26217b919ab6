/*
 * refit: the accelerator registry. Picks an ops table by name ("host", "cuda") or by
 * capability. This is the only file that knows whether CUDA was compiled in
 * (REFIT_HAVE_CUDA, set by CMake when nvcc and the toolkit are found); without it "cuda"
 * resolves to a stub whose every entry point says "cuda unavailable".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/log.h"
#include "refit/time.h"

#ifdef REFIT_HAVE_CUDA
extern const rf_accel_ops_t rf_accel_cuda_ops; /* core/accel_cuda.cu */
int rf_accel_cuda_device_count_raw(void);      /* 0 when the driver or a device is missing */
rf_status_t rf_accel_cuda_pointer_info_raw(const void *ptr, rf_accel_ptr_info_t *info);
#define RF_ACCEL_CUDA_OPS (&rf_accel_cuda_ops)
static int cuda_devices(void) { return rf_accel_cuda_device_count_raw(); }
#else
static rf_status_t stub_device_count(int *count_p)
{
    if (count_p)
        *count_p = 0;
    return RF_ERR_UNSUPPORTED;
}

static rf_status_t stub_create(int device, rf_accel_t **accel_p)
{
    (void)device;
    (void)accel_p;
    rf_error("cuda unavailable: refit was built without CUDA");
    return RF_ERR_UNSUPPORTED;
}

/* Every other entry stays NULL: no object of this table can exist. */
static const rf_accel_ops_t rf_accel_cuda_stub_ops = {
    .name = "cuda",
    .mem_type = RF_MEM_CUDA,
    .device_count = stub_device_count,
    .create = stub_create,
};
#define RF_ACCEL_CUDA_OPS (&rf_accel_cuda_stub_ops)
static int cuda_devices(void) { return 0; }
#endif

bool rf_accel_cuda_available(void) { return cuda_devices() > 0; }

const rf_accel_ops_t *rf_accel_lookup(const char *name)
{
    if (!name)
        return NULL;
    if (strcmp(name, "host") == 0)
        return &rf_accel_host_ops;
    if (strcmp(name, "cuda") == 0)
        return RF_ACCEL_CUDA_OPS;
    if (strcmp(name, "host-device") == 0)
        return &rf_accel_host_device_ops;
    return NULL;
}

rf_status_t rf_accel_open(const char *name, int device, rf_accel_t **accel_p)
{
    const rf_accel_ops_t *ops;
    if (!accel_p)
        return RF_ERR_INVALID;
    if (!name || strcmp(name, "auto") == 0)
        ops = rf_accel_cuda_available() ? RF_ACCEL_CUDA_OPS : &rf_accel_host_ops;
    else if (!(ops = rf_accel_lookup(name))) {
        rf_error("accelerator %s unknown (host, cuda, auto)", name);
        return RF_ERR_INVALID;
    }
    return ops->create(device, accel_p);
}

void rf_accel_close(rf_accel_t *accel)
{
    if (accel)
        accel->ops->destroy(accel);
}

rf_status_t rf_accel_sync(rf_accel_t *accel)
{
    rf_accel_event_t *ev = NULL;
    if (!accel)
        return RF_ERR_INVALID;
    if (accel->ops->mem_type == RF_MEM_HOST)
        return RF_OK;
    rf_status_t s = accel->ops->event_create(accel, &ev);
    if (s == RF_OK)
        s = accel->ops->event_record(ev, NULL);
    if (s == RF_OK)
        s = accel->ops->event_sync(ev);
    if (ev)
        accel->ops->event_destroy(ev);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One copy of the ceiling: the accelerator's copy (rows NULL) or its batch kernel. */
static rf_status_t ceiling_copy(rf_accel_t *accel, void *dst, const void *src, size_t bytes,
                                bool kernel)
{
    if (!kernel)
        return accel->ops->copy(accel, dst, src, bytes, RF_COPY_D2D, NULL);
    rf_accel_rows_t r = {
        .dst = {.data = dst, .esize = 1, .dtype = RF_DTYPE_U8, .row_stride = (int64_t)bytes,
                .col_stride = 1, .expert_stride = 0},
        .src = src, .src_dtype = RF_DTYPE_U8, .src_pitch = (int64_t)bytes, .rows = 1,
        .cols = (int64_t)bytes,
    };
    return accel->ops->copy_rows_batch(accel, &r, 1, NULL);
}

static rf_status_t ceiling_run(rf_accel_t *accel, size_t bytes, int reps, bool kernel,
                               double *best_s, double *median_s)
{
    if (!accel || bytes == 0 || bytes > (size_t)INT64_MAX || reps < 1 || reps > 1000)
        return RF_ERR_INVALID;
    const rf_accel_ops_t *o = accel->ops;
    void *a = NULL, *b = NULL;
    rf_accel_event_t *e0 = NULL, *e1 = NULL;
    double *t = calloc((size_t)reps, sizeof(double));
    rf_status_t st = t ? RF_OK : RF_ERR_NOMEM;
    if (st == RF_OK)
        st = o->alloc(accel, bytes, &a);
    if (st == RF_OK)
        st = o->alloc(accel, bytes, &b);
    if (st == RF_OK) /* touch both once (first-use page mapping is not the copy's cost) */
        st = o->memset(accel, a, 0x5a, bytes, NULL);
    if (st == RF_OK)
        st = o->memset(accel, b, 0, bytes, NULL);
    /* the kernel: untimed copies first, one per descriptor buffer of the CUDA batch ring (8,
     * core/accel_cuda.cu), each pinned and allocated on its first use; an update's first
     * (warm-up) update does the same */
    for (int w = 0; kernel && w < 8 && st == RF_OK; w++)
        st = ceiling_copy(accel, b, a, bytes, true);
    if (st == RF_OK)
        st = o->event_create(accel, &e0);
    if (st == RF_OK)
        st = o->event_create(accel, &e1);
    for (int r = 0; r < reps && st == RF_OK; r++) {
        double w0 = rf_time_now();
        float ms = 0;
        st = o->event_record(e0, NULL);
        if (st == RF_OK)
            st = ceiling_copy(accel, b, a, bytes, kernel);
        if (st == RF_OK)
            st = o->event_record(e1, NULL);
        if (st == RF_OK)
            st = o->event_sync(e1);
        if (st == RF_OK)
            st = o->event_elapsed_ms(e0, e1, &ms);
        t[r] = o->mem_type == RF_MEM_HOST ? rf_time_now() - w0 : (double)ms / 1e3;
    }
    if (st == RF_OK) {
        qsort(t, (size_t)reps, sizeof(double), cmp_double);
        *best_s = t[0];
        if (median_s)
            *median_s = t[reps / 2];
    }
    if (e0)
        o->event_destroy(e0);
    if (e1)
        o->event_destroy(e1);
    if (a)
        o->free(accel, a);
    if (b)
        o->free(accel, b);
    free(t);
    return st;
}

rf_status_t rf_accel_copy_ceiling(rf_accel_t *accel, size_t bytes, int reps, double *best_s,
                                  double *median_s)
{
    return ceiling_run(accel, bytes, reps, false, best_s, median_s);
}

rf_status_t rf_accel_rows_ceiling(rf_accel_t *accel, size_t bytes, int reps, double *best_s,
                                  double *median_s)
{
    if (!accel || !accel->ops->set_engine_min)
        return RF_ERR_INVALID;
    RF_CHECK(accel->ops->set_engine_min(accel, SIZE_MAX)); /* the kernel for every byte */
    rf_status_t st = ceiling_run(accel, bytes, reps, true, best_s, median_s);
    rf_status_t rs = accel->ops->set_engine_min(accel, 0);
    return st != RF_OK ? st : rs;
}

/* ---- tests: declared host-device segments (include/refit/accel.h) ------------------------ */

#define DECL_MAX 16

typedef struct decl_seg {
    char *base;
    uint64_t bytes;
    uint64_t id;
    unsigned flags;
    char name[64];
} decl_seg_t;

static decl_seg_t decl[DECL_MAX];
static uint64_t decl_next_id = 1;
static pthread_mutex_t decl_lock = PTHREAD_MUTEX_INITIALIZER;

rf_status_t rf_accel_host_device_declare(void *base, uint64_t bytes, const char *shm_name,
                                         unsigned flags)
{
    if (base == NULL || bytes == 0 || shm_name == NULL || strlen(shm_name) >= sizeof(decl[0].name))
        return RF_ERR_INVALID;
    rf_status_t st = RF_ERR_NOMEM;
    pthread_mutex_lock(&decl_lock);
    for (int i = 0; i < DECL_MAX; i++)
        if (decl[i].base == NULL) {
            decl[i] = (decl_seg_t){.base = base, .bytes = bytes, .id = decl_next_id++,
                                   .flags = flags};
            snprintf(decl[i].name, sizeof(decl[i].name), "%s", shm_name);
            st = RF_OK;
            break;
        }
    pthread_mutex_unlock(&decl_lock);
    return st;
}

void rf_accel_host_device_forget(void *base)
{
    pthread_mutex_lock(&decl_lock);
    for (int i = 0; i < DECL_MAX; i++)
        if (decl[i].base != NULL && decl[i].base == (char *)base)
            memset(&decl[i], 0, sizeof(decl[i]));
    pthread_mutex_unlock(&decl_lock);
}

int rf_accel_host_device_segment(const void *base, uint64_t *bytes_p, char *name, size_t cap)
{
    int found = 0;
    pthread_mutex_lock(&decl_lock);
    for (int i = 0; i < DECL_MAX && !found; i++)
        if (decl[i].base != NULL && decl[i].base == (const char *)base) {
            found = 1;
            if (bytes_p != NULL)
                *bytes_p = decl[i].bytes;
            if (name != NULL && cap > 0)
                snprintf(name, cap, "%s", decl[i].name);
        }
    pthread_mutex_unlock(&decl_lock);
    return found;
}

/* A pointer inside a declared segment: that segment's allocation attributes. */
static void decl_find(const void *ptr, rf_accel_ptr_info_t *info)
{
    const char *p = ptr;
    pthread_mutex_lock(&decl_lock);
    for (int i = 0; i < DECL_MAX; i++)
        if (decl[i].base != NULL && p >= decl[i].base && p < decl[i].base + decl[i].bytes) {
            info->base = decl[i].base;
            info->bytes = decl[i].bytes;
            info->buffer_id = decl[i].id;
            info->legacy_ipc = (decl[i].flags & RF_ACCEL_DECL_VMM) == 0;
            info->mempool = (decl[i].flags & RF_ACCEL_DECL_POOL) != 0;
            break;
        }
    pthread_mutex_unlock(&decl_lock);
}

rf_status_t rf_accel_pointer_info(const rf_accel_t *accel, const void *ptr,
                                  rf_accel_ptr_info_t *info)
{
    if (accel == NULL || info == NULL)
        return RF_ERR_INVALID;
    memset(info, 0, sizeof(*info));
    info->kind = RF_PTR_HOST;
    info->device = -1;
    if (accel->ops == &rf_accel_host_device_ops && ptr != NULL) {
        /* tests: the host implementation's memory stands for device memory of its device */
        info->kind = RF_PTR_DEVICE;
        info->device = accel->device;
        info->base = (void *)ptr;
        info->legacy_ipc = true;
        decl_find(ptr, info);
        return RF_OK;
    }
    if (strcmp(accel->ops->name, "cuda") != 0)
        return RF_OK;
#ifdef REFIT_HAVE_CUDA
    return rf_accel_cuda_pointer_info_raw(ptr, info);
#else
    return RF_ERR_UNSUPPORTED;
#endif
}
