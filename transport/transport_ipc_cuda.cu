/*
 * refit: the CUDA arena backend of the ipc transport (DESIGN.md section 9; the ops table and
 * the protocol are in include/refit/transport.h). Compiled only with CUDA; reached through
 * rf_ipc_cuda_ops() (transport/transport_ipc.c, which knows whether CUDA is in).
 *
 *   export  = cudaMalloc on the calling thread's current device (the job selected the rank's
 *             GPU before: cudaSetDevice through its accelerator) + cudaIpcGetMemHandle; the
 *             handle carries the device's UUID (cudaGetDeviceProperties().uuid, printed
 *             "GPU-xxxxxxxx-xxxx-..." as nvidia-smi does) and the cudaIpcMemHandle_t.
 *   import  = the UUID is the importer's current device's (a colocated pair shares one GPU)
 *             or, for the stage sender's staging slots read by rollout ranks on other GPUs of
 *             the host, a GPU the current device can access as a peer (check_peer);
 *             cudaIpcOpenMemHandle(cudaIpcMemLazyEnablePeerAccess) once; the xfer caches
 *             the mapping for the job. The mapping is writable in CUDA's eyes: read-only is the
 *             protocol's promise (the rollout only reads), not enforced by the hardware.
 *   share   = the session API's trainer tensors (PyTorch's caching allocator: many tensors in
 *             few cudaMalloc segments): cudaIpcGetMemHandle of the allocation's base, once per
 *             allocation (the xfer dedups by base), as torch's reduce_tensor exports a storage's
 *             segment with the storage's offset in it. The caller owns the memory (borrowed:
 *             never freed here); VMM memory (expandable_segments) and pool memory
 *             (cudaMallocAsync) were refused at registration, naming the tensor.
 *   unlink  = no-op (a CUDA IPC handle has no name; it dies with the allocation).
 *   protect = no-op on device: there is no mprotect for device memory. The trainer's weights
 *             are not written from READY to the verdict because the trainer produces on the
 *             host and copies into its arena only during production (job.c), never later.
 *   release = importer: cudaIpcCloseMemHandle; exporter: cudaFree (a shared allocation:
 *             nothing, the caller frees it after rf_session_destroy). The job orders teardown:
 *             every importer closes (rf_xfer_ipc_close_imports), a barrier, then exporters free.
 *   to_host / from_host = synchronous cudaMemcpy (integrity hashing, packed staging chunks);
 *             from_host then waits for the device (a pageable h2d may return before its DMA).
 */
#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/log.h"
#include "refit/transport.h"

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(((rf_ipc_handle_t *)0)->opaque),
              "cudaIpcMemHandle_t does not fit the handle");

static rf_status_t cuda_fail(rf_err_t *err, const char *what, const char *arena, cudaError_t e)
{
    return rf_err_set(err, RF_ERR_CUDA, "ipc(cuda): %s %s: %s (%s)", what, arena ? arena : "",
                      cudaGetErrorString(e), cudaGetErrorName(e));
}

/* The UUID of device dev, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
static rf_status_t device_uuid(int dev, char *out, size_t cap, rf_err_t *err)
{
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess)
        return cuda_fail(err, "cudaGetDeviceProperties", "", e);
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(out, cap,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
    return RF_OK;
}

/* The UUID of the current device. */
static rf_status_t current_uuid(char *out, size_t cap, int *dev_p, rf_err_t *err)
{
    int dev = -1;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return cuda_fail(err, "cudaGetDevice", "", e);
    *dev_p = dev;
    return device_uuid(dev, out, cap, err);
}

/*
 * An arena on another GPU of this host (the stage sender's staging slots, read by every
 * rollout rank of a multi-GPU colocated topology): allowed when the current device can access
 * that GPU's memory as a peer (NVLink or PCIe P2P); cudaIpcMemLazyEnablePeerAccess then maps
 * it. RF_ERR_TOPOLOGY naming both GPUs when the GPU is not visible or not a peer.
 */
static rf_status_t check_peer(const rf_ipc_handle_t *h, int dev, const char *mine, rf_err_t *err)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    for (int d = 0; d < n; d++) {
        char uuid[64];
        if (d == dev || device_uuid(d, uuid, sizeof(uuid), err) != RF_OK ||
            strcmp(uuid, h->device) != 0)
            continue;
        int ok = 0;
        if (cudaDeviceCanAccessPeer(&ok, dev, d) != cudaSuccess || !ok)
            return rf_err_set(err, RF_ERR_TOPOLOGY,
                              "ipc(cuda): arena %s lives on device %d (%s), which this rank's "
                              "device %d (%s) cannot access as a peer",
                              h->name, d, h->device, dev, mine);
        rf_debug("ipc(cuda): %s on peer device %d, read from device %d", h->name, d, dev);
        return RF_OK;
    }
    return rf_err_set(err, RF_ERR_TOPOLOGY,
                      "ipc(cuda): arena %s lives on %s, which is not visible to this rank "
                      "(device %d is %s; a colocated pair must share its GPU, and other arenas "
                      "must be on a peer GPU of this host)",
                      h->name, h->device, dev, mine);
}

static rf_status_t cuda_export(const char *name, uint64_t bytes, rf_ipc_arena_t *a,
                               rf_err_t *err)
{
    memset(a, 0, sizeof(*a));
    if (name == NULL || strlen(name) >= RF_IPC_NAME_MAX || bytes == 0)
        return rf_err_set(err, RF_ERR_INVALID, "ipc(cuda): bad arena name or size");
    int dev = -1;
    RF_CHECK(current_uuid(a->handle.device, sizeof(a->handle.device), &dev, err));
    void *p = NULL;
    /* a whole number of 2 MiB (rf_accel_alloc_round, include/refit/accel.h: an unrounded
     * 16.06 GB arena was read at 80% of the rounded one's rate) */
    cudaError_t e = cudaMalloc(&p, (size_t)rf_accel_alloc_round(bytes));
    if (e != cudaSuccess)
        return cuda_fail(err, "cudaMalloc for", name, e);
    cudaIpcMemHandle_t h;
    e = cudaIpcGetMemHandle(&h, p);
    if (e != cudaSuccess) {
        cudaFree(p);
        return cuda_fail(err, "cudaIpcGetMemHandle of", name, e);
    }
    a->base = p;
    a->bytes = bytes;
    a->exported = 1;
    a->linked = 0;
    snprintf(a->handle.backend, sizeof(a->handle.backend), "cuda");
    snprintf(a->handle.name, sizeof(a->handle.name), "%s", name);
    a->handle.bytes = bytes;
    memcpy(a->handle.opaque, &h, sizeof(h));
    rf_debug("ipc(cuda): exported %s, %llu bytes on device %d (%s)", name,
             (unsigned long long)bytes, dev, a->handle.device);
    return RF_OK;
}

static rf_status_t cuda_share(const char *name, void *base, uint64_t bytes, rf_ipc_arena_t *a,
                              rf_err_t *err)
{
    memset(a, 0, sizeof(*a));
    if (name == NULL || base == NULL || bytes == 0)
        return rf_err_set(err, RF_ERR_INVALID, "ipc(cuda): bad allocation to share");
    int dev = -1;
    RF_CHECK(current_uuid(a->handle.device, sizeof(a->handle.device), &dev, err));
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, base);
    if (e != cudaSuccess)
        return cuda_fail(err, "cudaIpcGetMemHandle of", name, e);
    a->base = base;
    a->bytes = bytes;
    a->exported = 1;
    a->borrowed = 1;
    snprintf(a->handle.backend, sizeof(a->handle.backend), "cuda");
    snprintf(a->handle.name, sizeof(a->handle.name), "%s", name);
    a->handle.bytes = bytes;
    memcpy(a->handle.opaque, &h, sizeof(h));
    rf_debug("ipc(cuda): shared %s, %llu bytes at %p on device %d (%s)", name,
             (unsigned long long)bytes, base, dev, a->handle.device);
    return RF_OK;
}

static rf_status_t cuda_import(const rf_ipc_handle_t *h, rf_ipc_arena_t *a, rf_err_t *err)
{
    memset(a, 0, sizeof(*a));
    if (strcmp(h->backend, "cuda") != 0)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "ipc: arena %s is a %s arena on %s; this rank has the cuda backend",
                          h->name, h->backend, h->device);
    char mine[64];
    int dev = -1;
    RF_CHECK(current_uuid(mine, sizeof(mine), &dev, err));
    if (strcmp(mine, h->device) != 0)
        RF_CHECK(check_peer(h, dev, mine, err));
    cudaIpcMemHandle_t ch;
    memcpy(&ch, h->opaque, sizeof(ch));
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, ch, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess)
        return cuda_fail(err, "cudaIpcOpenMemHandle of", h->name, e);
    a->base = p;
    a->bytes = h->bytes;
    a->handle = *h;
    return RF_OK;
}

static rf_status_t cuda_unlink(rf_ipc_arena_t *a, rf_err_t *err)
{
    (void)err;
    a->linked = 0;
    return RF_OK;
}

static rf_status_t cuda_protect(rf_ipc_arena_t *a, int readonly, rf_err_t *err)
{
    (void)err;
    a->readonly = readonly; /* device memory has no mprotect: see the file comment */
    return RF_OK;
}

static void cuda_release(rf_ipc_arena_t *a)
{
    if (a->base != NULL && !a->borrowed) {
        cudaError_t e = a->exported ? cudaFree(a->base) : cudaIpcCloseMemHandle(a->base);
        if (e != cudaSuccess)
            rf_warn("ipc(cuda): %s of %s: %s", a->exported ? "cudaFree" : "cudaIpcCloseMemHandle",
                    a->handle.name, cudaGetErrorString(e));
    }
    memset(a, 0, sizeof(*a));
}

static rf_status_t cuda_to_host(void *dst, const void *src, uint64_t bytes, rf_err_t *err)
{
    cudaError_t e = bytes ? cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost)
                          : cudaSuccess;
    return e == cudaSuccess ? RF_OK : cuda_fail(err, "cudaMemcpy d2h from an arena", "", e);
}

/* The stage sender fills a staging slot from its (pageable) bounce buffer, then tells the
 * rollout ranks over MPI that the chunk is there. cudaMemcpy from pageable memory may return
 * before the DMA reached device memory (CUDA's "API synchronization behavior"), so another
 * process could read the slot's old bytes: wait for the device before returning. */
static rf_status_t cuda_from_host(void *dst, const void *src, uint64_t bytes, rf_err_t *err)
{
    cudaError_t e = bytes ? cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyHostToDevice)
                          : cudaSuccess;
    if (e == cudaSuccess && bytes)
        e = cudaDeviceSynchronize();
    return e == cudaSuccess ? RF_OK : cuda_fail(err, "cudaMemcpy h2d into an arena", "", e);
}

static const rf_ipc_arena_ops_t cuda_ops = {
    "cuda", cuda_export, cuda_import,  cuda_unlink,    cuda_protect, cuda_release,
    1,      cuda_to_host, cuda_from_host, cuda_share,
};

extern "C" const rf_ipc_arena_ops_t *rf_ipc_cuda_ops_impl(void)
{
    return &cuda_ops;
}
