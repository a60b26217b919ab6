/*
 * refit: the ipc transport for colocated topologies (DESIGN.md section 9; protocol in
 * include/refit/transport.h).
 *
 * Payload bytes never travel over MPI: a rollout rank reads its pair trainer's shard buffers
 * in place from the pair's weights arena wherever its loaders need only rows of that shard,
 * and reads everything else (parts other trainer ranks hold, other stages) from the stage
 * sender's staging slots, which the stage sender packs through the usual gather. Over MPI go
 * READY (trainer -> pair, once per update), SEQ (stage sender -> every rollout rank, per
 * chunk) and ACK (rollout rank -> stage sender, per chunk, after the chunk was applied); a
 * staging slot is repacked only after every receiver acked the chunk it held.
 *
 * A trainer's weights are n allocations: refit-run exports one arena it allocates (allocation
 * 0); the session API's trainer shares the allocations its registered tensors live in (a
 * caching allocator's segments), each once, and every in-place piece names its allocation
 * and offset (rf_ipc_piece_t). The importer opens each distinct allocation once (keyed by the
 * exporter's handle) and closes it only at teardown.
 *
 * Arenas come from a backend ops table; this file holds the host one (POSIX shared memory:
 * shm_open / ftruncate / mmap by name, importers map read-only, exporters mprotect their
 * weights arena between production and the next production). The CUDA backend
 * (transport/transport_ipc_cuda.cu) is another rf_ipc_arena_ops_t (cudaMalloc +
 * cudaIpcGetMemHandle; cudaIpcOpenMemHandle once per arena, matched by GPU UUID); on a device
 * backend the stage sender packs into a host bounce buffer and copies the chunk into its
 * staging slot (from_host), and the receiver's apply callback synchronizes its stream before
 * the ACK goes out.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "refit/accel.h"
#include "refit/control.h"
#include "refit/log.h"
#include "refit/transport.h"
#include "xfer_int.h"

/* ---- the CUDA arena backend: compiled in or not (REFIT_HAVE_CUDA, set by CMake here) ------- */

#ifdef REFIT_HAVE_CUDA
const rf_ipc_arena_ops_t *rf_ipc_cuda_ops_impl(void); /* transport/transport_ipc_cuda.cu */
const rf_ipc_arena_ops_t *rf_ipc_cuda_ops(void) { return rf_ipc_cuda_ops_impl(); }
#else
/* the ipc transport's CUDA arena backend is compiled out with the accelerator */
const rf_ipc_arena_ops_t *rf_ipc_cuda_ops(void) { return NULL; }
#endif

/* ---- host backend: POSIX shared memory ------------------------------------------------ */

static rf_status_t host_export(const char *name, uint64_t bytes, rf_ipc_arena_t *a, rf_err_t *err)
{
    memset(a, 0, sizeof(*a));
    if (name == NULL || name[0] != '/' || strlen(name) >= RF_IPC_NAME_MAX || bytes == 0)
        return rf_err_set(err, RF_ERR_INVALID, "ipc: bad arena name or size");
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return rf_err_set(err, RF_ERR_IO, "ipc: shm_open %s: %s", name, strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return rf_err_set(err, RF_ERR_IO, "ipc: ftruncate %s to %" PRIu64 " bytes: %s", name, bytes,
                          strerror(e));
    }
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(name);
        return rf_err_set(err, RF_ERR_IO, "ipc: mmap %s: %s", name, strerror(e));
    }
    a->base = p;
    a->bytes = bytes;
    a->exported = 1;
    a->linked = 1;
    snprintf(a->handle.backend, sizeof(a->handle.backend), "host");
    snprintf(a->handle.name, sizeof(a->handle.name), "%s", name);
    snprintf(a->handle.device, sizeof(a->handle.device), "host");
    a->handle.bytes = bytes;
    return RF_OK;
}

/* Tests: the caller's shared memory segment declared at base (rf_accel_host_device_declare),
 * exported under its own name; the caller keeps the mapping and the name. */
static rf_status_t host_share(const char *name, void *base, uint64_t bytes, rf_ipc_arena_t *a,
                              rf_err_t *err)
{
    char shm[RF_IPC_NAME_MAX];
    uint64_t have = 0;
    memset(a, 0, sizeof(*a));
    if (!rf_accel_host_device_segment(base, &have, shm, sizeof(shm)) || have < bytes)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "ipc: %s at %p (%" PRIu64 " bytes) is not "
                          "a shared memory segment this process declared "
                          "(rf_accel_host_device_declare): the host backend cannot export it",
                          name ? name : "allocation", base, bytes);
    a->base = base;
    a->bytes = bytes;
    a->exported = 1;
    a->borrowed = 1;
    snprintf(a->handle.backend, sizeof(a->handle.backend), "host");
    snprintf(a->handle.name, sizeof(a->handle.name), "%s", shm);
    snprintf(a->handle.device, sizeof(a->handle.device), "host");
    a->handle.bytes = bytes;
    return RF_OK;
}

static rf_status_t host_import(const rf_ipc_handle_t *h, rf_ipc_arena_t *a, rf_err_t *err)
{
    struct stat sb;
    memset(a, 0, sizeof(*a));
    if (strcmp(h->backend, "host") != 0 || strcmp(h->device, "host") != 0)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "ipc: arena %s is a %s arena on %s; this rank has the host backend",
                          h->name, h->backend, h->device);
    int fd = shm_open(h->name, O_RDONLY, 0);
    if (fd < 0)
        return rf_err_set(err, RF_ERR_IO, "ipc: shm_open %s (import): %s", h->name,
                          strerror(errno));
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < h->bytes) {
        close(fd);
        return rf_err_set(err, RF_ERR_IO,
                          "ipc: arena %s is smaller than its handle's %" PRIu64 " bytes", h->name,
                          h->bytes);
    }
    void *p = mmap(NULL, (size_t)h->bytes, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return rf_err_set(err, RF_ERR_IO, "ipc: mmap %s (import): %s", h->name, strerror(e));
    a->base = p;
    a->bytes = h->bytes;
    a->handle = *h;
    return RF_OK;
}

static rf_status_t host_unlink(rf_ipc_arena_t *a, rf_err_t *err)
{
    if (!a->exported || !a->linked)
        return RF_OK;
    a->linked = 0;
    if (shm_unlink(a->handle.name) != 0 && errno != ENOENT)
        return rf_err_set(err, RF_ERR_IO, "ipc: shm_unlink %s: %s", a->handle.name,
                          strerror(errno));
    return RF_OK;
}

static rf_status_t host_protect(rf_ipc_arena_t *a, int readonly, rf_err_t *err)
{
    if (a->base == NULL || !a->exported || a->borrowed || a->readonly == readonly)
        return RF_OK;
    if (mprotect(a->base, (size_t)a->bytes, readonly ? PROT_READ : PROT_READ | PROT_WRITE) != 0)
        return rf_err_set(err, RF_ERR_IO, "ipc: mprotect %s: %s", a->handle.name, strerror(errno));
    a->readonly = readonly;
    return RF_OK;
}

static void host_release(rf_ipc_arena_t *a)
{
    if (a->borrowed) { /* the caller's mapping and name */
        memset(a, 0, sizeof(*a));
        return;
    }
    if (a->base != NULL)
        munmap(a->base, (size_t)a->bytes);
    if (a->exported && a->linked)
        shm_unlink(a->handle.name);
    memset(a, 0, sizeof(*a));
}

static rf_status_t host_copy(void *dst, const void *src, uint64_t bytes, rf_err_t *err)
{
    (void)err;
    if (bytes > 0)
        memcpy(dst, src, (size_t)bytes);
    return RF_OK;
}

static const rf_ipc_arena_ops_t host_ops = {
    .name = "host",
    .export_arena = host_export,
    .import_arena = host_import,
    .unlink_arena = host_unlink,
    .protect = host_protect,
    .release = host_release,
    .device = 0,
    .to_host = host_copy,
    .from_host = host_copy,
    .share_arena = host_share,
};

/* tests only: shared memory that the scheduler treats as device memory */
static const rf_ipc_arena_ops_t host_device_ops = {
    .name = "host-device",
    .export_arena = host_export,
    .import_arena = host_import,
    .unlink_arena = host_unlink,
    .protect = host_protect,
    .release = host_release,
    .device = 1,
    .to_host = host_copy,
    .from_host = host_copy,
    .share_arena = host_share,
};

const rf_ipc_arena_ops_t *rf_ipc_host_ops(void)
{
    return &host_ops;
}

const rf_ipc_arena_ops_t *rf_ipc_host_device_ops(void)
{
    return &host_device_ops;
}

const rf_ipc_arena_ops_t *rf_ipc_arena_lookup(const char *name)
{
    if (name == NULL)
        return NULL;
    if (strcmp(name, "host") == 0)
        return &host_ops;
    if (strcmp(name, "host-device") == 0)
        return &host_device_ops;
    if (strcmp(name, "cuda") == 0)
        return rf_ipc_cuda_ops();
    return NULL;
}

/* ---- the ipc state of an xfer --------------------------------------------------------- */

typedef struct rf_ipc_state rf_ipc_state_t;

struct rf_ipc_state {
    const rf_ipc_arena_ops_t *ops;
    rf_ipc_arena_t own[RF_IPC_KINDS]; /* [RF_IPC_STAGING]: staging; weights are wown */
    rf_ipc_arena_t *imports; /* [RF_IPC_KINDS * nranks]: staging arenas (weights: wopen) */
    /* weights: this rank's allocations ([0]: refit-run's arena), the owner's allocations
     * opened here (each distinct one once) and, per owner allocation index, its wopen slot */
    rf_ipc_arena_t *wown;
    uint32_t n_wown, cap_wown;
    rf_ipc_arena_t *wopen;
    uint32_t n_wopen, cap_wopen;
    int32_t *wslot;
    uint32_t n_wslot;
    int wowner; /* -1: no weights imported yet */
    uint64_t n_exports, n_opens;
    /* sender */
    MPI_Request *areqs;        /* [buffers * nranks] ACK receives per slot and receiver */
    unsigned char *ack_posted; /* [buffers * nranks] */
    unsigned char *ack_rbuf;   /* [buffers * nranks * 16] */
    uint32_t *slot_seq;        /* [buffers] chunk seq the slot holds */
    /* receiver */
    unsigned char *ack_sbuf; /* [buffers * 16] */
    unsigned char ready_sbuf[RF_IPC_ACK_BYTES];
    unsigned char ready_rbuf[RF_IPC_ACK_BYTES];
    /* rf_xfer_setup: the pair, where chunks and pieces are read, the receiver's accelerator */
    int pair;
    const uint8_t *staged;        /* [n_chunks] borrowed */
    const rf_ipc_piece_t *pieces; /* [n_pieces] borrowed; receiver */
    rf_accel_t *accel;            /* borrowed; NULL: none */
    /* receiver on a device backend: an event recorded after each chunk's copies (the ACK
     * waits for it; two: one chunk of lookahead), and the chunk seq each belongs to */
    rf_accel_event_t *ev[2];
    uint32_t ev_seq[2];
    int ev_next;
    /* device backends: host copy of a staged chunk (sender: packed here, then copied into
     * the slot; receiver: integrity hashes it) */
    unsigned char *bounce;
    uint64_t bounce_cap;
};

/* The host bounce buffer, at least `bytes` long. */
static rf_status_t bounce_get(rf_ipc_state_t *s, uint64_t bytes, unsigned char **p,
                              rf_err_t *err)
{
    if (bytes > s->bounce_cap || s->bounce == NULL) {
        unsigned char *b = realloc(s->bounce, (size_t)bytes + 1);
        if (b == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "ipc: out of memory (bounce buffer)");
        s->bounce = b;
        s->bounce_cap = bytes;
    }
    *p = s->bounce;
    return RF_OK;
}

/* x's ipc state; NULL when x is not on ipc. */
static rf_ipc_state_t *ipc_of(const rf_xfer_t *x)
{
    return x != NULL && x->ops == rf_xfer_ipc_ops() ? x->priv : NULL;
}

/* The ipc state of x (rf_xfer_create); arenas come later (rf_xfer_ipc_export / _import). */
static rf_status_t ipc_open(rf_xfer_t *x, rf_err_t *err)
{
    rf_ipc_state_t *s = calloc(1, sizeof(*s));
    size_t nb = (size_t)x->buffers * (size_t)x->nranks;
    if (s == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "ipc: out of memory");
    s->ops = rf_ipc_host_ops(); /* rf_xfer_ipc_set_backend picks another before setup */
    s->wowner = -1;
    s->imports = calloc((size_t)RF_IPC_KINDS * (size_t)x->nranks, sizeof(rf_ipc_arena_t));
    s->areqs = malloc(nb * sizeof(MPI_Request));
    s->ack_posted = calloc(nb, 1);
    s->ack_rbuf = calloc(nb, RF_IPC_ACK_BYTES);
    s->slot_seq = calloc((size_t)x->buffers, sizeof(uint32_t));
    s->ack_sbuf = calloc((size_t)x->buffers, RF_IPC_ACK_BYTES);
    x->priv = s;
    if (!s->imports || !s->areqs || !s->ack_posted || !s->ack_rbuf || !s->slot_seq || !s->ack_sbuf)
        return rf_err_set(err, RF_ERR_NOMEM, "ipc: out of memory");
    for (size_t i = 0; i < nb; i++)
        s->areqs[i] = MPI_REQUEST_NULL;
    return RF_OK;
}

/* Releases the ipc state, arenas included (rf_xfer_destroy). */
static void ipc_close(rf_xfer_t *x)
{
    rf_ipc_state_t *s = ipc_of(x);
    if (s == NULL)
        return;
    for (int k = 0; k < 2; k++)
        if (s->ev[k] != NULL)
            s->accel->ops->event_destroy(s->ev[k]);
    if (s->areqs != NULL)
        rf_ctl_cancel_recvs(s->areqs, x->buffers * x->nranks);
    /* importers unmap first; an exporter's name goes with its release */
    rf_xfer_ipc_close_imports(x);
    for (int k = 0; k < RF_IPC_KINDS; k++)
        s->ops->release(&s->own[k]);
    for (uint32_t i = 0; i < s->n_wown; i++)
        s->ops->release(&s->wown[i]);
    free(s->wown);
    free(s->wopen);
    free(s->wslot);
    free(s->imports);
    free(s->areqs);
    free(s->ack_posted);
    free(s->ack_rbuf);
    free(s->slot_seq);
    free(s->ack_sbuf);
    free(s->bounce);
    free(s);
    x->priv = NULL;
}

rf_status_t rf_xfer_ipc_set_backend(rf_xfer_t *x, const char *name, rf_err_t *err)
{
    if (ipc_of(x) == NULL)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "ipc: backend choice on a non-ipc transfer");
    const rf_ipc_arena_ops_t *o = rf_ipc_arena_lookup(name);
    if (o == NULL)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "ipc: arena backend %s is unknown or not compiled in (host, cuda)",
                          name ? name : "(null)");
    for (int k = 0; k < RF_IPC_KINDS; k++)
        if (ipc_of(x)->own[k].base != NULL || ipc_of(x)->n_wown > 0)
            return rf_err_set(err, RF_ERR_STATE, "ipc: backend changed after an export");
    for (int i = 0; i < RF_IPC_KINDS * x->nranks; i++)
        if (ipc_of(x)->imports[i].base != NULL || ipc_of(x)->n_wopen > 0)
            return rf_err_set(err, RF_ERR_STATE, "ipc: backend changed after an import");
    ipc_of(x)->ops = o;
    return RF_OK;
}

const rf_ipc_arena_ops_t *rf_xfer_ipc_backend(const rf_xfer_t *x)
{
    return ipc_of(x) ? ipc_of(x)->ops : NULL;
}

void rf_xfer_ipc_close_imports(rf_xfer_t *x)
{
    rf_ipc_state_t *s = ipc_of(x);
    if (x == NULL || s == NULL)
        return;
    for (uint32_t i = 0; i < s->n_wopen; i++)
        s->ops->release(&s->wopen[i]);
    s->n_wopen = 0;
    for (uint32_t i = 0; i < s->n_wslot; i++)
        s->wslot[i] = -1;
    if (s->imports != NULL)
        for (int i = 0; i < RF_IPC_KINDS * x->nranks; i++)
            s->ops->release(&s->imports[i]);
}

/* Room for one more arena in *a (cap *cap); RF_ERR_NOMEM. */
static rf_status_t arena_grow(rf_ipc_arena_t **a, uint32_t n, uint32_t *cap, rf_err_t *err)
{
    if (n < *cap)
        return RF_OK;
    uint32_t c = *cap ? 2 * *cap : 8;
    rf_ipc_arena_t *p = realloc(*a, (size_t)c * sizeof(**a));
    if (p == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "ipc: out of memory (arena table)");
    memset(p + *cap, 0, (size_t)(c - *cap) * sizeof(*p));
    *a = p;
    *cap = c;
    return RF_OK;
}

rf_status_t rf_xfer_ipc_share(rf_xfer_t *x, const char *name, void *base, uint64_t bytes,
                              uint32_t *index_p, rf_ipc_handle_t *h_p, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    if (s == NULL)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "ipc: allocation share on a non-ipc transfer");
    if (base == NULL || bytes == 0)
        return rf_err_set(err, RF_ERR_INVALID, "ipc: %s: no allocation (base %p, %" PRIu64
                          " bytes)", name ? name : "allocation", base, bytes);
    if (s->ops->share_arena == NULL)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "ipc: the %s backend cannot share memory it "
                          "did not allocate", s->ops->name);
    for (uint32_t i = 0; i < s->n_wown; i++)
        if (s->wown[i].base == base) { /* exported already: one handle per allocation */
            if (s->wown[i].bytes != bytes)
                return rf_err_set(err, RF_ERR_INTERNAL, "ipc: %s: allocation %p shared as %" PRIu64
                                  " and %" PRIu64 " bytes", name ? name : "allocation", base,
                                  s->wown[i].bytes, bytes);
            *index_p = i;
            *h_p = s->wown[i].handle;
            return RF_OK;
        }
    RF_CHECK(arena_grow(&s->wown, s->n_wown, &s->cap_wown, err));
    RF_CHECK(s->ops->share_arena(name, base, bytes, &s->wown[s->n_wown], err));
    s->n_exports++;
    *index_p = s->n_wown;
    *h_p = s->wown[s->n_wown].handle;
    s->n_wown++;
    return RF_OK;
}

/* One exporter's allocation: the same backend, device, name, size and handle bytes. */
static bool same_allocation(const rf_ipc_handle_t *a, const rf_ipc_handle_t *b)
{
    return strcmp(a->backend, b->backend) == 0 && strcmp(a->device, b->device) == 0 &&
           strcmp(a->name, b->name) == 0 && a->bytes == b->bytes &&
           memcmp(a->opaque, b->opaque, sizeof(a->opaque)) == 0;
}

rf_status_t rf_xfer_ipc_import_weights(rf_xfer_t *x, int owner, uint32_t index,
                                       const rf_ipc_handle_t *h, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    if (s == NULL || owner < 0 || owner >= x->nranks || h == NULL)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "ipc: bad weights import");
    if (s->wowner >= 0 && s->wowner != owner)
        return rf_err_set(err, RF_ERR_INTERNAL, "ipc: rank %d imports the weights of rank %d and "
                          "rank %d (its pair's only)", x->rank, s->wowner, owner);
    if (h->bytes == 0)
        return RF_OK; /* nothing exported */
    if (index >= s->n_wslot) {
        int32_t *p = realloc(s->wslot, ((size_t)index + 1) * sizeof(int32_t));
        if (p == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "ipc: out of memory (weights table)");
        for (uint32_t i = s->n_wslot; i <= index; i++)
            p[i] = -1;
        s->wslot = p;
        s->n_wslot = index + 1;
    }
    s->wowner = owner;
    if (s->wslot[index] >= 0)
        return RF_OK; /* already mapped (cached for the job) */
    for (uint32_t i = 0; i < s->n_wopen; i++)
        if (same_allocation(&s->wopen[i].handle, h)) { /* opened for another index */
            s->wslot[index] = (int32_t)i;
            return RF_OK;
        }
    RF_CHECK(arena_grow(&s->wopen, s->n_wopen, &s->cap_wopen, err));
    RF_CHECK(s->ops->import_arena(h, &s->wopen[s->n_wopen], err));
    s->n_opens++;
    s->wslot[index] = (int32_t)s->n_wopen++;
    rf_debug("rank %d: mapped weights allocation %u (%s) of rank %d (%" PRIu64 " bytes)", x->rank,
             index, h->name, owner, h->bytes);
    return RF_OK;
}

const void *rf_xfer_ipc_weights_base(const rf_xfer_t *x, int owner, uint32_t index)
{
    const rf_ipc_state_t *s = ipc_of(x);
    if (s == NULL || owner < 0 || owner >= x->nranks)
        return NULL;
    if (owner == x->rank)
        return index < s->n_wown ? s->wown[index].base : NULL;
    if (owner != s->wowner || index >= s->n_wslot || s->wslot[index] < 0)
        return NULL;
    return s->wopen[s->wslot[index]].base;
}

void rf_xfer_ipc_counts(const rf_xfer_t *x, uint64_t *exports_p, uint64_t *opens_p)
{
    const rf_ipc_state_t *s = ipc_of(x);
    *exports_p = s ? s->n_exports : 0;
    *opens_p = s ? s->n_opens : 0;
}

rf_status_t rf_xfer_ipc_export(rf_xfer_t *x, rf_ipc_kind_t kind, const char *name, uint64_t bytes,
                               void **base_p, rf_ipc_handle_t *h_p, rf_err_t *err)
{
    if (ipc_of(x) == NULL || (int)kind < 0 || kind >= RF_IPC_KINDS)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "ipc: arena export on a non-ipc transfer");
    rf_ipc_state_t *s = ipc_of(x);
    if (kind == RF_IPC_WEIGHTS) { /* allocation 0 of this rank's weights */
        if (s->n_wown > 0)
            return rf_err_set(err, RF_ERR_STATE, "ipc: rank %d exported its weights arena after "
                              "%u allocations", x->rank, s->n_wown);
        RF_CHECK(arena_grow(&s->wown, s->n_wown, &s->cap_wown, err));
        RF_CHECK(s->ops->export_arena(name, bytes, &s->wown[0], err));
        s->n_wown = 1;
        s->n_exports++;
        *base_p = s->wown[0].base;
        *h_p = s->wown[0].handle;
        return RF_OK;
    }
    if (s->own[kind].base != NULL)
        return rf_err_set(err, RF_ERR_STATE, "ipc: rank %d exported arena kind %d twice", x->rank,
                          (int)kind);
    RF_CHECK(s->ops->export_arena(name, bytes, &s->own[kind], err));
    s->n_exports++;
    *base_p = s->own[kind].base;
    *h_p = s->own[kind].handle;
    return RF_OK;
}

rf_status_t rf_xfer_ipc_import(rf_xfer_t *x, int owner, rf_ipc_kind_t kind,
                               const rf_ipc_handle_t *h, rf_err_t *err)
{
    if (ipc_of(x) == NULL || (int)kind < 0 || kind >= RF_IPC_KINDS || owner < 0 ||
        owner >= x->nranks)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "ipc: bad arena import");
    if (kind == RF_IPC_WEIGHTS)
        return rf_xfer_ipc_import_weights(x, owner, 0, h, err);
    rf_ipc_arena_t *a = &ipc_of(x)->imports[(size_t)kind * (size_t)x->nranks + (size_t)owner];
    if (h->bytes == 0 || a->base != NULL)
        return RF_OK; /* nothing exported, or already mapped (cached for the job) */
    rf_status_t st = ipc_of(x)->ops->import_arena(h, a, err);
    ipc_of(x)->n_opens += st == RF_OK;
    if (st == RF_OK)
        rf_debug("rank %d: mapped %s of rank %d (%" PRIu64 " bytes)", x->rank, h->name, owner,
                 h->bytes);
    return st;
}

rf_status_t rf_xfer_ipc_unlink(rf_xfer_t *x, rf_err_t *err)
{
    if (ipc_of(x) == NULL)
        return RF_OK;
    for (int k = 0; k < RF_IPC_KINDS; k++)
        RF_CHECK(ipc_of(x)->ops->unlink_arena(&ipc_of(x)->own[k], err));
    for (uint32_t i = 0; i < ipc_of(x)->n_wown; i++)
        if (!ipc_of(x)->wown[i].borrowed) /* a shared allocation's name is the caller's */
            RF_CHECK(ipc_of(x)->ops->unlink_arena(&ipc_of(x)->wown[i], err));
    return RF_OK;
}

rf_status_t rf_xfer_ipc_protect(rf_xfer_t *x, int readonly, rf_err_t *err)
{
    if (ipc_of(x) == NULL)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "ipc: protect on a non-ipc transfer");
    /* refit's own arena; shared allocations are the caller's (borrowed: left alone) */
    for (uint32_t i = 0; i < ipc_of(x)->n_wown; i++)
        if (!ipc_of(x)->wown[i].borrowed)
            RF_CHECK(ipc_of(x)->ops->protect(&ipc_of(x)->wown[i], readonly, err));
    return RF_OK;
}

const void *rf_xfer_ipc_base(const rf_xfer_t *x, int owner, rf_ipc_kind_t kind)
{
    if (ipc_of(x) == NULL || owner < 0 || owner >= x->nranks || (int)kind < 0 ||
        kind >= RF_IPC_KINDS)
        return NULL;
    if (kind == RF_IPC_WEIGHTS)
        return rf_xfer_ipc_weights_base(x, owner, 0);
    if (owner == x->rank)
        return ipc_of(x)->own[kind].base;
    return ipc_of(x)->imports[(size_t)kind * (size_t)x->nranks + (size_t)owner].base;
}

rf_status_t rf_xfer_ipc_ready(rf_xfer_t *x, uint32_t update, int pair, rf_err_t *err)
{
    if (ipc_of(x) == NULL || pair < 0 || pair >= x->nranks)
        return rf_err_set(err, RF_ERR_INVALID, "ipc: READY without an ipc pair");
    MPI_Request *r = &x->sreqs[rf_xfer_sreq_count(x) - 1];
    if (*r != MPI_REQUEST_NULL)
        MPI_Wait(r, MPI_STATUS_IGNORE); /* 16 bytes: eager, long complete */
    rf_chunk_header_write(ipc_of(x)->ready_sbuf, update, RF_IPC_READY_SEQ, 0);
    RF_CHECK(x->tp->ops->isend(x->tp, ipc_of(x)->ready_sbuf, RF_IPC_ACK_BYTES, pair,
                               RF_IPC_TAG_READY(update), r, err));
    x->stats.peers[pair].chunks_sent++;
    x->stats.peers[pair].bytes_sent += RF_IPC_ACK_BYTES;
    x->stats.chunks_sent++;
    return RF_OK;
}

/* Staging slot size for a plan of chunk_bytes (page multiple: slots start page-aligned). */
static uint64_t slot_bytes(uint64_t chunk_bytes)
{
    return (chunk_bytes + 4095) & ~(uint64_t)4095;
}

/* ---- sender ------------------------------------------------------------------------------ */

/* Counts the ACK of slot b from peer as received and checks it; clears the posted flag. */
static rf_status_t ack_check(rf_xfer_t *x, uint32_t update, int b, int peer, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    size_t i = (size_t)b * (size_t)x->nranks + (size_t)peer;
    rf_chunk_header_t h;
    s->ack_posted[i] = 0;
    x->stats.peers[peer].chunks_recv++;
    x->stats.peers[peer].bytes_recv += RF_IPC_ACK_BYTES;
    rf_chunk_header_read(s->ack_rbuf + i * RF_IPC_ACK_BYTES, &h);
    if (h.update != update || h.seq != s->slot_seq[b])
        return rf_err_set(err, RF_ERR_SEQUENCE,
                          "ack from rank %d carries update %u seq %u, expected update %u seq %u",
                          peer, h.update, h.seq, update, s->slot_seq[b]);
    return RF_OK;
}

/* Sender: cancels ACK receives still posted (a matched one counts as received). */
static void ipc_cancel_acks(rf_xfer_t *x)
{
    rf_ipc_state_t *s = ipc_of(x);
    for (int b = 0; b < x->buffers; b++)
        for (int p = 0; p < x->nranks; p++) {
            size_t i = (size_t)b * (size_t)x->nranks + (size_t)p;
            if (!s->ack_posted[i])
                continue;
            s->ack_posted[i] = 0;
            if (s->areqs[i] != MPI_REQUEST_NULL) {
                MPI_Status st;
                int cancelled = 0;
                MPI_Cancel(&s->areqs[i]);
                MPI_Wait(&s->areqs[i], &st);
                MPI_Test_cancelled(&st, &cancelled);
                if (cancelled)
                    continue;
            }
            x->stats.peers[p].chunks_recv++; /* matched: the drain must not wait for it */
            x->stats.peers[p].bytes_recv += RF_IPC_ACK_BYTES;
        }
}

/* Slot b is free again: its sends completed and every receiver acked its chunk. */
static rf_status_t wait_slot(rf_xfer_t *x, uint32_t update, int b, double deadline, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    int per = 2 * x->nranks;
    double t0 = rf_time_now();
    rf_status_t st = rf_ctl_wait(x->ctl, &x->sreqs[b * per], per, deadline, err);
    if (st == RF_OK)
        st =
            rf_ctl_wait(x->ctl, &s->areqs[(size_t)b * (size_t)x->nranks], x->nranks, deadline, err);
    x->stats.wire_s += rf_time_now() - t0;
    for (int p = 0; st == RF_OK && p < x->nranks; p++)
        if (s->ack_posted[(size_t)b * (size_t)x->nranks + (size_t)p])
            st = ack_check(x, update, b, p, err);
    if (st == RF_OK)
        x->slot_busy[b] = 0;
    return st;
}

static rf_status_t ipc_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                            void *ctx, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    const rf_chunk_plan_t *plan = cfg->plan;
    const rf_xfer_fault_t *f = &cfg->fault;
    const int per = 2 * x->nranks;
    const uint64_t sb = slot_bytes(plan->chunk_bytes);
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = RF_OK;
    uint32_t seq = 0;
    int stage = -1, peer = -1, j = 0;

    if (s->staged == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "ipc: send without the ipc setup (rf_xfer_setup)");
    for (int b = 0; b < x->buffers; b++)
        RF_CHECK_GOTO(wait_slot(x, cfg->update, b, cfg->deadline, &e), st, fail);
    for (size_t k = 0; k < plan->n_chunks; k++) {
        const rf_chunk_t *c = &plan->chunks[k];
        if (cfg->stage_senders[c->stage] != x->rank)
            continue;
        seq = c->seq;
        stage = c->stage;
        peer = -1;
        const int b = j++ % x->buffers;
        const int staged = s->staged[c->seq] != 0;
        unsigned char *payload = NULL;
        RF_CHECK_GOTO(rf_ctl_poll(x->ctl, &e), st, fail);
        RF_CHECK_GOTO(wait_slot(x, cfg->update, b, cfg->deadline, &e), st, fail);
        if (staged) {
            if (s->own[RF_IPC_STAGING].base == NULL ||
                (uint64_t)(b + 1) * sb > s->own[RF_IPC_STAGING].bytes) {
                st = rf_err_set(&e, RF_ERR_INTERNAL, "no staging slot %d", b);
                goto fail;
            }
            payload = (unsigned char *)s->own[RF_IPC_STAGING].base + (size_t)b * sb;
            if (s->ops->device) /* pack on the host, copy into the device slot below */
                RF_CHECK_GOTO(bounce_get(s, sb, &payload, &e), st, fail);
            double t0 = rf_time_now();
            st = pack(ctx, c, &plan->pieces[c->piece_begin], payload, NULL, &e);
            x->stats.pack_s += rf_time_now() - t0;
            if (st != RF_OK)
                goto fail;
        }
        unsigned char *msg = x->bufs[b];
        size_t bytes = RF_IPC_SEQ_BYTES;
        rf_chunk_header_write(msg, cfg->update, c->seq, c->payload_bytes);
        uint32_t slot = (uint32_t)b, flags = (uint32_t)staged;
        memcpy(msg + 16, &slot, 4);
        memcpy(msg + 20, &flags, 4);
        rf_chunk_u64le_write(msg + 24, staged ? c->payload_bytes : 0);
        if (cfg->integrity) {
            /* the two-part seal: the message, then the staged payload */
            RF_CHECK_GOTO(rf_chunk_seal(cfg->integrity, msg + bytes, msg, RF_IPC_SEQ_BYTES,
                                        staged ? payload : NULL,
                                        staged ? (size_t)c->payload_bytes : 0, &e),
                          st, fail);
            bytes += RF_CHUNK_TRAILER_BYTES;
        }
        if (f->corrupt_seq == (int64_t)c->seq) {
            if (staged && c->payload_bytes > 0) {
                payload[c->payload_bytes / 2] ^= 0x10; /* after the checksum */
                rf_warn("fault: rank %d flipped a staged byte of chunk %u (update %u)", x->rank,
                        c->seq, cfg->update);
            } else {
                rf_warn("fault: chunk %u is read in place, not staged: nothing to corrupt", c->seq);
            }
        }
        if (staged && s->ops->device && c->payload_bytes > 0) {
            /* one synchronous h2d copy of the packed chunk into its device slot */
            double t0 = rf_time_now();
            st = s->ops->from_host((unsigned char *)s->own[RF_IPC_STAGING].base + (size_t)b * sb,
                                   payload, c->payload_bytes, &e);
            x->stats.pack_s += rf_time_now() - t0;
            if (st != RF_OK)
                goto fail;
        }
        s->slot_seq[b] = c->seq;
        const int tag = RF_XFER_TAG(cfg->update, c->stage);
        int nreq = 0;
        for (int i = 0; i < cfg->n_receivers; i++) {
            peer = cfg->receivers[i];
            if (peer == x->rank)
                continue;
            size_t ai = (size_t)b * (size_t)x->nranks + (size_t)peer;
            /* the ACK receive first: the ack never arrives unexpected */
            RF_CHECK_GOTO(x->tp->ops->irecv(x->tp, s->ack_rbuf + ai * RF_IPC_ACK_BYTES,
                                            RF_IPC_ACK_BYTES, peer, RF_IPC_TAG_ACK(cfg->update),
                                            &s->areqs[ai], &e),
                          st, fail);
            s->ack_posted[ai] = 1;
            RF_CHECK_GOTO(rf_xfer_send_copies(x, f, c->seq, msg, bytes, peer, tag,
                                              &x->sreqs[b * per], &nreq, &e),
                          st, fail);
        }
        rf_xfer_slot_sent(x, b);
    }
    peer = -1;
    for (int b = 0; b < x->buffers; b++)
        RF_CHECK_GOTO(wait_slot(x, cfg->update, b, cfg->deadline, &e), st, fail);
    return RF_OK;

fail:
    ipc_cancel_acks(x);
    {
        char where[160];
        if (peer >= 0)
            snprintf(where, sizeof(where), "update %u: ipc: chunk seq %u (stage %d) to rank %d",
                     cfg->update, seq, stage, peer);
        else if (stage >= 0)
            snprintf(where, sizeof(where), "update %u: ipc: chunk seq %u (stage %d)", cfg->update,
                     seq, stage);
        else
            snprintf(where, sizeof(where), "update %u: ipc: sending", cfg->update);
        rf_xfer_wrap(err, st, &e, where);
    }
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
}

/* ---- receiver ---------------------------------------------------------------------------- */

/* The segments of chunk c for this rank (see rf_ipc_piece_t). */
static rf_status_t build_segments(rf_xfer_t *x, const rf_xfer_config_t *cfg, const rf_chunk_t *c,
                                  const unsigned char *staging, size_t *nseg_p, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    const rf_xfer_mem_t mem = s->ops->device ? RF_XFER_MEM_DEVICE : RF_XFER_MEM_HOST;
    size_t n = 0;
    RF_CHECK(rf_xfer_segments(x, 3 * c->piece_count + 1, err));
    rf_xfer_segment_t *segs = x->segs;
    for (size_t k = 0; k < c->piece_count; k++) {
        size_t gi = c->piece_begin + k;
        const rf_chunk_piece_t *pc = &cfg->plan->pieces[gi];
        const rf_ipc_piece_t *ip = &s->pieces[gi];
        uint64_t rb = cfg->items[pc->item].row_bytes;
        if (ip->staged) {
            if (staging == NULL)
                return rf_err_set(err, RF_ERR_INTERNAL, "piece %zu is staged, the chunk not", gi);
            segs[n++] = (rf_xfer_segment_t){pc, pc->row_begin, pc->row_end, staging + pc->offset,
                                            1, mem};
            continue;
        }
        /* the pair's weights allocation holding the piece (refit-run: its one arena) */
        const unsigned char *pair_base = rf_xfer_ipc_weights_base(x, s->pair, ip->arena);
        uint64_t lo = ip->row_lo, hi = ip->row_hi;
        if (lo >= hi) { /* this rank's loaders read none of the piece's rows (src: unread) */
            const void *unread = pair_base != NULL ? (const void *)pair_base : (const void *)pc;
            segs[n++] = (rf_xfer_segment_t){pc, pc->row_begin, pc->row_end, unread, 0, mem};
            continue;
        }
        if (pair_base == NULL)
            return rf_err_set(err, RF_ERR_INTERNAL, "piece %zu is in place in allocation %u of "
                              "rank %d, which is not mapped here", gi, ip->arena, s->pair);
        const unsigned char *src = pair_base + ip->arena_offset;
        if (lo < pc->row_begin || hi > pc->row_end)
            return rf_err_set(err, RF_ERR_INTERNAL, "piece %zu: in-place rows out of range", gi);
        if (lo > pc->row_begin)
            segs[n++] = (rf_xfer_segment_t){pc, pc->row_begin, lo, src, 0, mem};
        segs[n++] = (rf_xfer_segment_t){pc, lo, hi, src, 1, mem};
        if (hi < pc->row_end)
            segs[n++] = (rf_xfer_segment_t){pc, hi, pc->row_end, src + (hi - lo) * rb, 0, mem};
    }
    *nseg_p = n;
    return RF_OK;
}

/* ACK of chunk seq, message slot b, to its stage sender src. */
static rf_status_t send_ack(rf_xfer_t *x, const rf_xfer_config_t *cfg, int b, uint32_t seq,
                            int src, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    const int per = 2 * x->nranks;
    unsigned char *ab = s->ack_sbuf + (size_t)b * RF_IPC_ACK_BYTES;
    RF_CHECK(rf_ctl_wait(x->ctl, &x->sreqs[b * per], 1, cfg->deadline, err));
    rf_chunk_header_write(ab, cfg->update, seq, 0);
    RF_CHECK(x->tp->ops->isend(x->tp, ab, RF_IPC_ACK_BYTES, src, RF_IPC_TAG_ACK(cfg->update),
                               &x->sreqs[b * per], err));
    x->stats.peers[src].chunks_sent++;
    x->stats.peers[src].bytes_sent += RF_IPC_ACK_BYTES;
    x->stats.chunks_sent++;
    return RF_OK;
}

/* Device backends: records the event after chunk c's copies (enqueued by the receive
 * callback on the accelerator's default stream). */
static rf_status_t copies_record(rf_xfer_t *x, const rf_chunk_t *c, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    for (int k = 0; k < 2; k++) {
        rf_status_t cs = s->ev[k] == NULL ? s->accel->ops->event_create(s->accel, &s->ev[k])
                                          : RF_OK;
        if (cs != RF_OK)
            return rf_err_set(err, cs, "rank %d: cannot create the ipc chunk events", x->rank);
    }
    int k = s->ev_next;
    s->ev_next ^= 1;
    s->ev_seq[k] = c->seq;
    rf_status_t es = s->accel->ops->event_record(s->ev[k], NULL);
    if (es != RF_OK)
        return rf_err_set(err, es, "rank %d: chunk %u: recording the device event after its "
                          "copies failed", x->rank, c->seq);
    return RF_OK;
}

/* Device backends: waits until chunk c's copies completed (the trainer may write its source
 * again), then the consumer's complete callback. */
static rf_status_t copies_wait(rf_xfer_t *x, const rf_xfer_config_t *cfg, const rf_chunk_t *c,
                               void *ctx, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    int k = s->ev_seq[0] == c->seq ? 0 : 1;
    if (s->ev[k] == NULL || s->ev_seq[k] != c->seq)
        return rf_err_set(err, RF_ERR_INTERNAL, "rank %d: chunk %u has no device event", x->rank,
                          c->seq);
    rf_status_t ss = s->accel->ops->event_sync(s->ev[k]);
    if (ss != RF_OK)
        return rf_err_set(err, ss, "rank %d: chunk %u: waiting for its device copies before the "
                          "ACK failed", x->rank, c->seq);
    return cfg->complete != NULL ? cfg->complete(ctx, c, err) : RF_OK;
}

/* Waits for chunk c's copies (copies_wait), then ACKs it. c's index in the plan gives its
 * message slot. */
static rf_status_t ack_pending(rf_xfer_t *x, const rf_xfer_config_t *cfg, const rf_chunk_t *c,
                               void *ctx, rf_err_t *err)
{
    double t0 = rf_time_now();
    rf_status_t st = copies_wait(x, cfg, c, ctx, err);
    x->stats.unpack_s += rf_time_now() - t0;
    if (st != RF_OK)
        return st;
    size_t k = (size_t)(c - cfg->plan->chunks);
    return send_ack(x, cfg, (int)(k % (size_t)x->buffers), c->seq,
                    cfg->stage_senders[c->stage], err);
}

/* The chunks go to recv as segments read in place or from a staging slot. On a device backend
 * recv only enqueues the copies: the event after them gates the ACK, one chunk behind. */
static rf_status_t ipc_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                            void *ctx, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    const bool defer = s->ops->device && s->accel != NULL; /* ACK after the copies' event */
    const rf_chunk_plan_t *plan = cfg->plan;
    const size_t n = plan->n_chunks;
    const int B = x->buffers, per = 2 * x->nranks;
    const uint64_t sb = slot_bytes(plan->chunk_bytes);
    const size_t trailer = cfg->integrity ? RF_CHUNK_TRAILER_BYTES : 0;
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = RF_OK;
    size_t posted = 0, next = 0;
    uint32_t seq = 0;
    int stage = -1, src = -1;
    MPI_Status status;
    const rf_chunk_t *pending = NULL; /* applied, ACK not sent yet (defer) */

    if (s->staged == NULL || s->pieces == NULL || cfg->items == NULL || s->pair < 0 ||
        s->pair >= x->nranks)
        return rf_err_set(err, RF_ERR_INVALID, "ipc: receive without the ipc setup "
                          "(rf_xfer_setup) or the items");

    /* READY: the pair's shards of this update are produced and write-protected */
    src = s->pair;
    RF_CHECK_GOTO(x->tp->ops->irecv(x->tp, s->ready_rbuf, RF_IPC_ACK_BYTES, s->pair,
                                    RF_IPC_TAG_READY(cfg->update), &x->rreqs[B], &e),
                  st, fail);
    RF_CHECK_GOTO(rf_xfer_wait_one(x, &x->rreqs[B], cfg->deadline, &status, &e), st,
                  fail_ready);
    {
        size_t got = 0;
        rf_chunk_header_t h;
        RF_CHECK_GOTO(rf_xfer_recv_counted(x, &status, s->pair, &got, &e), st, fail_ready);
        rf_chunk_header_read(s->ready_rbuf, &h);
        if (got != RF_IPC_ACK_BYTES || h.update != cfg->update || h.seq != RF_IPC_READY_SEQ) {
            st = rf_err_set(&e, RF_ERR_SEQUENCE, "READY carries update %u seq %u (%zu bytes)",
                            h.update, h.seq, got);
            goto fail_ready;
        }
    }

    for (; posted < n && posted < (size_t)B; posted++) {
        const rf_chunk_t *c = &plan->chunks[posted];
        RF_CHECK_GOTO(x->tp->ops->irecv(
                          x->tp, x->bufs[posted % B], x->buf_bytes, cfg->stage_senders[c->stage],
                          RF_XFER_TAG(cfg->update, c->stage), &x->rreqs[posted % B], &e),
                      st, fail);
    }
    for (; next < n; next++) {
        const rf_chunk_t *c = &plan->chunks[next];
        const int b = (int)(next % B);
        seq = c->seq;
        stage = c->stage;
        src = cfg->stage_senders[c->stage];
        rf_xfer_update_inflight(x, (int)(posted - next));
        RF_CHECK_GOTO(rf_xfer_wait_one(x, &x->rreqs[b], cfg->deadline, &status, &e), st, fail);
        size_t got = 0;
        RF_CHECK_GOTO(rf_xfer_recv_counted(x, &status, src, &got, &e), st, fail);
        const unsigned char *msg = x->bufs[b];
        rf_chunk_header_t h;
        uint32_t slot, flags;
        if (got < RF_CHUNK_HEADER_BYTES) {
            st = rf_err_set(&e, RF_ERR_MISMATCH, "message of %zu bytes has no header", got);
            goto fail;
        }
        RF_CHECK_GOTO(rf_xfer_header_check(msg, cfg, c, &h, &e), st, fail);
        memcpy(&slot, msg + 16, 4);
        memcpy(&flags, msg + 20, 4);
        if (h.payload_bytes != c->payload_bytes || got != RF_IPC_SEQ_BYTES + trailer ||
            slot >= (uint32_t)B || (flags & 1u) != (s->staged[c->seq] ? 1u : 0u)) {
            st = rf_err_set(&e, RF_ERR_MISMATCH,
                            "ipc message of %zu bytes: payload %" PRIu64 " (expected %" PRIu64
                            "), slot %u, staged %u (expected %u)",
                            got, h.payload_bytes, c->payload_bytes, slot, flags & 1u,
                            s->staged[c->seq] ? 1u : 0u);
            goto fail;
        }
        const unsigned char *staging = NULL;
        if (flags & 1u) {
            const unsigned char *sbase = rf_xfer_ipc_base(x, src, RF_IPC_STAGING);
            if (sbase == NULL) {
                st = rf_err_set(&e, RF_ERR_INTERNAL, "no staging arena of rank %d mapped", src);
                goto fail;
            }
            staging = sbase + (size_t)slot * sb;
        }
        if (cfg->integrity) {
            /* the two-part check over a host copy of the staged payload (device arenas: d2h
             * into the bounce buffer first) */
            const unsigned char *pb = staging;
            if (staging != NULL && s->ops->device) {
                unsigned char *hb = NULL;
                RF_CHECK_GOTO(bounce_get(s, c->payload_bytes, &hb, &e), st, fail);
                RF_CHECK_GOTO(s->ops->to_host(hb, staging, c->payload_bytes, &e), st, fail);
                pb = hb;
            }
            RF_CHECK_GOTO(
                rf_chunk_check(cfg->integrity, msg + RF_IPC_SEQ_BYTES, msg, RF_IPC_SEQ_BYTES, pb,
                               pb != NULL ? (size_t)c->payload_bytes : 0, plan, cfg->items, c, &e),
                st, fail);
        }
        /* a rank that slept past the deadline (the verdict may be out, the trainer may write
         * again) reads nothing more */
        RF_CHECK_GOTO(rf_ctl_poll(x->ctl, &e), st, fail);
        if (rf_time_now() > cfg->deadline) {
            st = rf_err_set(&e, RF_ERR_TIMEOUT, "deadline expired");
            goto fail;
        }
        size_t nseg = 0;
        RF_CHECK_GOTO(build_segments(x, cfg, c, staging, &nseg, &e), st, fail);
        for (size_t k = 0; k < nseg; k++) {
            const rf_xfer_segment_t *sg = &x->segs[k];
            uint64_t nb = (sg->row_end - sg->row_begin) * cfg->items[sg->piece->item].row_bytes;
            if (!sg->backed)
                continue;
            if (staging != NULL && (const unsigned char *)sg->src >= staging &&
                (const unsigned char *)sg->src < staging + sb)
                x->stats.ipc_bytes_staged += nb;
            else
                x->stats.ipc_bytes_in_place += nb;
        }
        double t0 = rf_time_now();
        st = recv(ctx, c, x->segs, nseg, NULL, &e);
        if (st == RF_OK && defer)
            st = copies_record(x, c, &e);
        x->stats.unpack_s += rf_time_now() - t0;
        if (st != RF_OK)
            goto fail;
        x->stats.chunks_received++;
        /* ACK: the chunk is applied (host: recv returned after the copies completed; device:
         * the previous chunk's ACK goes now that this one is queued) */
        if (!defer) {
            RF_CHECK_GOTO(send_ack(x, cfg, b, c->seq, src, &e), st, fail);
        } else if (B < 2) { /* one slot: the sender needs this ACK before the next chunk */
            RF_CHECK_GOTO(ack_pending(x, cfg, c, ctx, &e), st, fail);
        } else {
            if (pending != NULL)
                RF_CHECK_GOTO(ack_pending(x, cfg, pending, ctx, &e), st, fail);
            pending = c;
        }
        if (posted < n) {
            const rf_chunk_t *pc = &plan->chunks[posted];
            RF_CHECK_GOTO(x->tp->ops->irecv(x->tp, x->bufs[b], x->buf_bytes,
                                            cfg->stage_senders[pc->stage],
                                            RF_XFER_TAG(cfg->update, pc->stage), &x->rreqs[b], &e),
                          st, fail);
            posted++;
        }
    }
    if (pending != NULL)
        RF_CHECK_GOTO(ack_pending(x, cfg, pending, ctx, &e), st, fail);
    for (int b = 0; b < B; b++)
        RF_CHECK_GOTO(rf_ctl_wait(x->ctl, &x->sreqs[b * per], 1, cfg->deadline, &e), st, fail_end);
    int extra = 0;
    st = rf_xfer_probe_extra(x, cfg, n, &extra, &e, err);
    if (extra)
        return st;
    if (st != RF_OK)
        goto fail_end;
    return RF_OK;

fail_end:
    rf_err_set(err, st, "update %u: ipc: finishing: %s", cfg->update, e.msg);
    rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
fail_ready:
    rf_xfer_cancel_posted(x);
    {
        char where[160];
        snprintf(where, sizeof(where), "update %u: ipc: READY from pair rank %d", cfg->update,
                 s->pair);
        rf_xfer_wrap(err, st, &e, where);
    }
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
fail:
    rf_xfer_cancel_posted(x);
    {
        char where[160];
        if (stage >= 0)
            snprintf(where, sizeof(where), "update %u: chunk seq %u (stage %d) from rank %d",
                     cfg->update, seq, stage, src);
        else
            snprintf(where, sizeof(where), "update %u: ipc: receiving", cfg->update);
        rf_xfer_wrap(err, st, &e, where);
    }
    if (st != RF_ERR_PEER)
        rf_ctl_abort(x->ctl, st, err ? err->msg : e.msg);
    return st;
}

/* ---- the chunk transport table (transport/xfer_int.h; found by transport_registry.c) ----- */

/* Payloads live in shared arenas; the messages are small and go over MPI. */
static uint64_t ipc_buf_bytes(uint64_t chunk_bytes)
{
    (void)chunk_bytes;
    return RF_IPC_SEQ_BYTES + RF_CHUNK_TRAILER_BYTES;
}

/* After a FAILED verdict: the ACK receives first, then the messages owed (SEQ, READY, ACK). */
static rf_status_t ipc_drain(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                             rf_err_t *err)
{
    ipc_cancel_acks(x);
    return rf_xfer_drain_messages(x, posted_from, deadline, err);
}

/* The arena backend (before any export or import), the pair and the piece placement. A
 * device backend adds RF_XFER_CAP_DEVICE_PAYLOAD and needs the receiver's accelerator. */
static rf_status_t ipc_setup(rf_xfer_t *x, const rf_xfer_setup_t *setup, rf_err_t *err)
{
    rf_ipc_state_t *s = ipc_of(x);
    RF_CHECK(rf_xfer_ipc_set_backend(x, setup->arena_backend ? setup->arena_backend : "host",
                                     err));
    if (s->ops->device && setup->accel == NULL)
        return rf_err_set(err, RF_ERR_INTERNAL, "rank %d: device ipc without a device", x->rank);
    s->pair = setup->pair;
    s->staged = setup->staged;
    s->pieces = setup->pieces;
    s->accel = setup->accel;
    if (s->ops->device)
        x->caps |= RF_XFER_CAP_DEVICE_PAYLOAD;
    return RF_OK;
}

/* The trainer's weights arena: writable while it produces, read-only from then until the next
 * production; READY tells the pair it may read it. */
static rf_status_t ipc_sources(rf_xfer_t *x, uint32_t update, rf_xfer_sources_t state,
                               rf_err_t *err)
{
    if (state == RF_XFER_SOURCES_READY)
        return rf_xfer_ipc_ready(x, update, ipc_of(x)->pair, err);
    return rf_xfer_ipc_protect(x, state == RF_XFER_SOURCES_FINAL, err);
}

static const rf_xfer_ops_t ipc_xfer_ops = {
    .name = "ipc",
    .caps = RF_XFER_CAP_IN_PLACE,
    .wire = "mpi",
    .buf_bytes = ipc_buf_bytes,
    .open = ipc_open,
    .setup = ipc_setup,
    .sources = ipc_sources,
    .send = ipc_send,
    .recv = ipc_recv,
    .drain = ipc_drain,
    .close = ipc_close,
};

const rf_xfer_ops_t *rf_xfer_ipc_ops(void)
{
    return &ipc_xfer_ops;
}
