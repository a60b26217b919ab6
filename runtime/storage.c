/*
 * refit: runtime storage arenas and the slot registry (see include/refit/storage.h).
 *
 * One mmap'd arena per module; slots carved 256-byte aligned after a 256-byte lead gap, so
 * every slot has a real, non-zero storage offset, as parameters carved from a caching
 * allocator's block do.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "refit/hashmap.h"
#include "refit/storage.h"

rf_status_t rf_storage_init(rf_storage_t *st, int nmodules, rf_err_t *err)
{
    memset(st, 0, sizeof(*st));
    st->nmodules = nmodules;
    st->module_first = calloc(nmodules + 1, sizeof(int));
    st->module_count = calloc(nmodules + 1, sizeof(int));
    st->index = malloc(sizeof(rf_map_t));
    if (!st->module_first || !st->module_count || !st->index ||
        rf_map_init(st->index, (size_t)nmodules * 2) != RF_OK) {
        free(st->index);
        st->index = NULL;
        rf_storage_free(st);
        return rf_err_set(err, RF_ERR_NOMEM, "storage: out of memory");
    }
    for (int i = 0; i < nmodules; i++)
        st->module_first[i] = -1;
    return RF_OK;
}

void rf_storage_free(rf_storage_t *st)
{
    if (st == NULL)
        return;
    bool dev = rf_storage_on_device(st);
    for (int i = 0; i < st->narenas; i++) {
        if (st->arenas[i].base == NULL)
            continue;
        if (st->arenas[i].accel != NULL)
            st->arenas[i].accel->ops->free(st->arenas[i].accel, st->arenas[i].base);
        else
            munmap(st->arenas[i].base, st->arenas[i].bytes);
    }
    for (int i = 0; i < st->nmoved; i++) {
        if (dev)
            st->accel->ops->free(st->accel, st->moved[i]);
        else
            free(st->moved[i]);
    }
    free(st->moved);
    free(st->arenas);
    free(st->slots);
    free(st->module_first);
    free(st->module_count);
    if (st->index) {
        rf_map_free(st->index);
        free(st->index);
    }
    memset(st, 0, sizeof(*st));
}

static rf_status_t storage_add(rf_storage_t *st, int m, const char *name, bool derived,
                               const rf_signature_t *sig, rf_err_t *err)
{
    if (m < 0 || m >= st->nmodules)
        return rf_err_set(err, RF_ERR_INVALID, "storage: module %d out of range", m);
    if (st->module_first[m] >= 0 &&
        st->module_first[m] + st->module_count[m] != st->nslots)
        return rf_err_set(err, RF_ERR_INVALID,
                          "storage: slots of module %d must be registered together (%s)", m,
                          name);
    if (rf_storage_find(st, name) != NULL)
        return rf_err_set(err, RF_ERR_INVALID, "storage: slot %s registered twice", name);
    if (st->nslots == st->cap) {
        int cap = st->cap ? st->cap * 2 : 256;
        rf_slot_t *s = realloc(st->slots, cap * sizeof(*s));
        if (s == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "storage: out of memory");
        st->slots = s;
        st->cap = cap;
    }
    rf_slot_t *s = &st->slots[st->nslots];
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->module = m;
    s->derived = derived;
    s->sig = *sig;
    if (st->module_first[m] < 0)
        st->module_first[m] = st->nslots;
    s->index = st->module_count[m]++;
    if (rf_map_put(st->index, rf_map_strkey(name), (uint64_t)st->nslots) != RF_OK)
        return rf_err_set(err, RF_ERR_NOMEM, "storage: out of memory");
    st->nslots++;
    return RF_OK;
}

rf_status_t rf_storage_alloc_module(rf_storage_t *st, int m, const char *module_name,
                                    const rf_slot_shape_t *shapes, const bool *derived, int n,
                                    bool noreserve, rf_accel_t *accel, rf_err_t *err)
{
    uint64_t off[RF_MODULE_MAX_SLOTS], total = RF_SLOT_ALIGN; /* lead gap */
    if (n > RF_MODULE_MAX_SLOTS)
        return rf_err_set(err, RF_ERR_INVALID, "storage: %s has too many slots", module_name);
    if (accel != NULL && accel->ops->mem_type == RF_MEM_HOST)
        accel = NULL; /* the host accelerator: the host mmap arena, as without one */
    if (st->narenas > 0 && accel != st->accel)
        return rf_err_set(err, RF_ERR_INVALID,
                          "storage: %s: every arena must live on the same accelerator",
                          module_name);
    if (accel != NULL && noreserve)
        return rf_err_set(err, RF_ERR_INVALID,
                          "storage: %s: MAP_NORESERVE arenas are host only (refit-plan)",
                          module_name);
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < shapes[i].ndim; d++)
            numel *= (uint64_t)shapes[i].shape[d];
        off[i] = total;
        total += (numel * rf_dtype_size(shapes[i].dtype) + RF_SLOT_ALIGN - 1) / RF_SLOT_ALIGN *
                 RF_SLOT_ALIGN;
    }
    void *base;
    if (accel != NULL) {
        /* device arena: cudaMalloc'd, zero-filled like the host mmap */
        rf_status_t as = accel->ops->alloc(accel, total, &base);
        if (as == RF_OK && (as = accel->ops->memset(accel, base, 0, total, NULL)) == RF_OK)
            as = rf_accel_sync(accel);
        if (as != RF_OK) {
            if (base != NULL && as != RF_ERR_NOMEM)
                accel->ops->free(accel, base);
            return rf_err_set(err, as == RF_ERR_NOMEM ? RF_ERR_NOMEM : as,
                              "storage: cannot allocate %llu bytes of %s device %d memory for "
                              "%s (%s)",
                              (unsigned long long)total, accel->ops->name, accel->device,
                              module_name, rf_status_name(as));
        }
    } else {
        /* real arenas are populated up front so the first update does not pay page faults */
        int flags = MAP_PRIVATE | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : MAP_POPULATE);
        base = mmap(NULL, total, noreserve ? PROT_NONE : PROT_READ | PROT_WRITE, flags, -1, 0);
        if (base == MAP_FAILED)
            return rf_err_set(err, RF_ERR_NOMEM, "storage: cannot map %llu bytes for %s: %s",
                              (unsigned long long)total, module_name, strerror(errno));
    }
    rf_arena_t *a = realloc(st->arenas, (st->narenas + 1) * sizeof(*a));
    if (a == NULL) {
        if (accel != NULL)
            accel->ops->free(accel, base);
        else
            munmap(base, total);
        return rf_err_set(err, RF_ERR_NOMEM, "storage: out of memory");
    }
    st->arenas = a;
    st->arenas[st->narenas++] = (rf_arena_t){base, total, noreserve, m, accel};
    st->accel = accel;
    st->bytes += total;
    for (int i = 0; i < n; i++) {
        rf_signature_t sig;
        char name[RF_NAME_MAX + 32];
        memset(&sig, 0, sizeof(sig));
        sig.ndim = shapes[i].ndim;
        sig.dtype = shapes[i].dtype;
        sig.device = accel != NULL ? accel->device : RF_DEVICE_HOST;
        int64_t stride = 1;
        for (int d = sig.ndim - 1; d >= 0; d--) {
            sig.shape[d] = shapes[i].shape[d];
            sig.stride[d] = stride;
            stride *= shapes[i].shape[d];
        }
        sig.storage_base = base;
        sig.storage_bytes = total;
        sig.data = (char *)base + off[i];
        sig.storage_offset = (int64_t)(off[i] / rf_dtype_size(sig.dtype));
        snprintf(name, sizeof(name), "%s.%s", module_name, shapes[i].name);
        RF_CHECK(storage_add(st, m, name, derived ? derived[i] : false, &sig, err));
    }
    return RF_OK;
}

rf_status_t rf_storage_register(rf_storage_t *st, int m, const char *name, bool derived,
                                const rf_signature_t *sig, rf_err_t *err)
{
    return storage_add(st, m, name, derived, sig, err);
}

rf_slot_t *rf_storage_find(rf_storage_t *st, const char *name)
{
    uint64_t v;
    if (!rf_map_get(st->index, rf_map_strkey(name), &v))
        return NULL;
    return strcmp(st->slots[v].name, name) == 0 ? &st->slots[v] : NULL;
}

rf_slot_t *rf_storage_module_slot(rf_storage_t *st, int m, int i)
{
    if (m < 0 || m >= st->nmodules || st->module_first[m] < 0 || i < 0 ||
        i >= st->module_count[m])
        return NULL;
    return &st->slots[st->module_first[m] + i];
}

int rf_storage_module_nslots(const rf_storage_t *st, int m)
{
    return (m < 0 || m >= st->nmodules) ? 0 : st->module_count[m];
}

rf_status_t rf_storage_move_slot(rf_storage_t *st, const char *name, rf_err_t *err)
{
    rf_slot_t *s = rf_storage_find(st, name);
    if (s == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "storage: no slot %s", name);
    uint64_t bytes = rf_signature_bytes(&s->sig);
    size_t rounded = (bytes + RF_SLOT_ALIGN - 1) / RF_SLOT_ALIGN * RF_SLOT_ALIGN;
    bool dev = rf_storage_on_device(st);
    void *buf = NULL;
    if (dev) {
        if (st->accel->ops->alloc(st->accel, rounded ? rounded : RF_SLOT_ALIGN, &buf) != RF_OK)
            buf = NULL;
    } else {
        buf = aligned_alloc(RF_SLOT_ALIGN, rounded);
    }
    void **grown = buf ? realloc(st->moved, (st->nmoved + 1) * sizeof(void *)) : NULL;
    if (buf == NULL || grown == NULL) {
        if (dev && buf)
            st->accel->ops->free(st->accel, buf);
        else
            free(buf);
        return rf_err_set(err, RF_ERR_NOMEM, "storage: out of memory");
    }
    st->moved = grown;
    st->moved[st->nmoved++] = buf;
    if (dev) {
        rf_status_t cs =
            st->accel->ops->copy(st->accel, buf, s->sig.data, bytes, RF_COPY_D2D, NULL);
        if (cs != RF_OK)
            return rf_err_set(err, cs, "storage: moving %s on device %d failed", name,
                              st->accel->device);
    } else {
        memcpy(buf, s->sig.data, bytes);
    }
    s->sig.data = buf;
    s->sig.storage_base = buf;
    s->sig.storage_offset = 0;
    s->sig.storage_bytes = bytes;
    return RF_OK;
}

bool rf_storage_on_device(const rf_storage_t *st)
{
    return st != NULL && st->accel != NULL && st->accel->ops->mem_type != RF_MEM_HOST;
}

rf_status_t rf_storage_read(const rf_storage_t *st, void *dst, const void *data, size_t bytes,
                            rf_err_t *err)
{
    if (bytes == 0)
        return RF_OK;
    if (!rf_storage_on_device(st)) {
        memcpy(dst, data, bytes);
        return RF_OK;
    }
    /* the accelerator's own stream: every write to slot memory was enqueued on it */
    rf_status_t s = st->accel->ops->copy(st->accel, dst, data, bytes, RF_COPY_D2H, NULL);
    if (s == RF_OK)
        s = rf_accel_sync(st->accel);
    if (s != RF_OK)
        return rf_err_set(err, s, "storage: reading %zu bytes of device %d memory failed", bytes,
                          st->accel->device);
    return RF_OK;
}

/* "[4, 96]" into buf. */
static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t cap)
{
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && off < cap; d++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld", d ? ", " : "",
                                (long long)shape[d]);
    if (off < cap)
        snprintf(buf + off, cap - off, "]");
    return buf;
}

rf_status_t rf_signature_check(const rf_signature_t *got, const rf_slot_shape_t *want,
                               const char *name, rf_err_t *err)
{
    char a[160], b[160];
    if (got->dtype != want->dtype)
        return rf_err_set(err, RF_ERR_MISMATCH, "%s: dtype %s, expected %s", name,
                          rf_dtype_name(got->dtype), rf_dtype_name(want->dtype));
    bool same = got->ndim == want->ndim;
    for (int d = 0; same && d < got->ndim; d++)
        same = got->shape[d] == want->shape[d];
    if (!same)
        return rf_err_set(err, RF_ERR_MISMATCH, "%s: shape %s, expected %s", name,
                          shape_str(got->ndim, got->shape, a, sizeof(a)),
                          shape_str(want->ndim, want->shape, b, sizeof(b)));
    if (!rf_signature_contiguous(got))
        return rf_err_set(err, RF_ERR_INVALID, "%s: strides %s for shape %s are not row-major "
                          "contiguous", name, shape_str(got->ndim, got->stride, a, sizeof(a)),
                          shape_str(got->ndim, got->shape, b, sizeof(b)));
    if (got->data == NULL && rf_signature_bytes(got) > 0)
        return rf_err_set(err, RF_ERR_INVALID, "%s: NULL data for %llu bytes", name,
                          (unsigned long long)rf_signature_bytes(got));
    return RF_OK;
}

rf_status_t rf_storage_rebind(rf_storage_t *st, const char *name, const rf_signature_t *sig,
                              rf_err_t *err)
{
    rf_slot_t *s = rf_storage_find(st, name);
    if (s == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "storage: no slot %s", name);
    bool same = s->sig.dtype == sig->dtype && s->sig.ndim == sig->ndim;
    for (int d = 0; same && d < sig->ndim; d++)
        same = s->sig.shape[d] == sig->shape[d];
    if (!same)
        return rf_err_set(err, RF_ERR_MISMATCH, "storage: %s rebound with another dtype or "
                          "shape", name);
    s->sig = *sig; /* borrowed like the first registration: never freed here */
    return RF_OK;
}
