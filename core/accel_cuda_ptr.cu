/*
 * refit: what a caller's pointer points at, on CUDA (rf_accel_pointer_info, include/refit/
 * accel.h; core/accel_registry.c dispatches here). The session API checks every registered
 * CUDA tensor with it: device memory, on the ordinal its descriptor names, and, where the
 * colocated ipc transport exports it, which allocation holds it and whether legacy CUDA IPC
 * can export that allocation at all (torch's reduce_tensor exports the caching allocator's
 * segment, not the tensor, for the same reason).
 *
 * The allocation's range, buffer id, IPC capability and memory pool come from the driver's
 * cuPointerGetAttributes. librefit links no libcuda (a build host without a driver must still
 * load it): the entry point is resolved once through the runtime's
 * cudaGetDriverEntryPointByVersion, and a driver without it (or a query it refuses) leaves
 * those fields unknown (base NULL, buffer id 0, not IPC-capable).
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/log.h"

typedef CUresult (*pointer_get_attributes_fn)(unsigned int, CUpointer_attribute *, void **,
                                              CUdeviceptr);

static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;
static pointer_get_attributes_fn get_attributes;

static void resolve(void)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    /* the 12.0 ABI of the call: unchanged since CUDA 11 */
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        get_attributes = (pointer_get_attributes_fn)fn;
    else
        (void)cudaGetLastError();
}

extern "C" rf_status_t rf_accel_cuda_pointer_info_raw(const void *ptr, rf_accel_ptr_info_t *info)
{
    cudaPointerAttributes a;
    memset(&a, 0, sizeof(a));
    if (ptr == NULL)
        return RF_OK; /* host, unknown: the caller refuses a NULL tensor with bytes */
    cudaError_t ce = cudaPointerGetAttributes(&a, ptr);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky */
        rf_error("cudaPointerGetAttributes(%p): %s", ptr, cudaGetErrorString(ce));
        return RF_ERR_CUDA;
    }
    if (a.type == cudaMemoryTypeDevice)
        info->kind = RF_PTR_DEVICE;
    else if (a.type == cudaMemoryTypeManaged)
        info->kind = RF_PTR_MANAGED;
    else
        return RF_OK; /* host, pinned host or unregistered */
    info->device = a.device;
    pthread_once(&resolve_once, resolve);
    if (get_attributes == NULL)
        return RF_OK;
    CUdeviceptr start = 0;
    size_t size = 0;
    unsigned long long id = 0;
    int legacy = 0;
    CUmemoryPool pool = NULL;
    CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
    void *out[] = {&start, &size, &id, &legacy, &pool};
    CUresult r = get_attributes((unsigned)(sizeof(at) / sizeof(at[0])), at, out,
                                (CUdeviceptr)(uintptr_t)ptr);
    if (r != CUDA_SUCCESS) /* the kind and ordinal stand; the allocation stays unknown */
        return RF_OK;
    info->base = (void *)(uintptr_t)start;
    info->bytes = (uint64_t)size;
    info->buffer_id = (uint64_t)id;
    info->legacy_ipc = legacy != 0;
    info->mempool = pool != NULL;
    return RF_OK;
}
