/*
 * refit: the transports by name (include/refit/transport.h, transport/xfer_int.h).
 *
 * Two kinds. A message transport (rf_transport_ops_t: "mpi") moves one chunk message at a time
 * for the scheduler's message path (transport/xfer.c). A chunk transport (rf_xfer_ops_t: "ipc",
 * "nccl") carries an update's chunks its own way and runs its small messages over a message
 * transport. rf_xfer_create asks here for the name it was given, so the scheduler names no
 * transport; this is the one file that names them all.
 *
 * The nccl table is an adapter over include/refit/transport_nccl.h (rf_xfer_nccl_run, the
 * state teardown, the stage gather on its trainer-only communicators), valid for the real
 * transport and for the stub built without CUDA / NCCL.
 */
#include <stddef.h>
#include <string.h>

#include "refit/transport.h"
#include "refit/transport_nccl.h"
#include "xfer_int.h"

/* ---- message transports ------------------------------------------------------------------ */

rf_status_t rf_transport_create(const char *name, MPI_Comm world, rf_transport_t **t_p,
                                rf_err_t *err)
{
    if (t_p == NULL)
        return rf_err_set(err, RF_ERR_INVALID, "transport: null argument");
    if (name == NULL || strcmp(name, "mpi") == 0)
        return rf_transport_mpi_ops()->create(world, t_p, err);
    return rf_err_set(err, RF_ERR_UNSUPPORTED, "transport %s: not built (only mpi)", name);
}

void rf_transport_destroy(rf_transport_t *t)
{
    if (t != NULL)
        t->ops->destroy(t);
}

/* ---- nccl: chunks through NCCL on device buffers; the mpi transport stays for scratch and
 * drains only ------------------------------------------------------------------------------ */

static uint64_t nccl_buf_bytes(uint64_t chunk_bytes)
{
    (void)chunk_bytes;
    return RF_CHUNK_HEADER_BYTES + RF_CHUNK_TRAILER_BYTES;
}

/* The communicators come later (rf_xfer_nccl_setup, which checks this flag). */
static rf_status_t nccl_open(rf_xfer_t *x, rf_err_t *err)
{
    (void)err;
    x->on_nccl = 1;
    return RF_OK;
}

static void nccl_close(rf_xfer_t *x)
{
    if (x->nccl != NULL)
        rf_nccl_state_destroy(x);
}

static rf_status_t nccl_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                             void *ctx, rf_err_t *err)
{
    return rf_xfer_nccl_run(x, cfg, pack, ctx, NULL, NULL, err);
}

static rf_status_t nccl_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_unpack_fn unpack,
                             void *ctx, rf_err_t *err)
{
    return rf_xfer_nccl_run(x, cfg, NULL, NULL, unpack, ctx, err);
}

/* No chunk message travels over MPI: the communicators are aborted and re-created instead
 * (rf_xfer_nccl_fail, rf_xfer_nccl_begin). */
static rf_status_t nccl_drain(rf_xfer_t *x, const uint64_t *posted_from, double deadline,
                              rf_err_t *err)
{
    (void)x;
    (void)posted_from;
    (void)deadline;
    (void)err;
    return RF_OK;
}

/* The stage gather on the stage's trainer-only gather communicator, where this rank has one. */
static int nccl_gather_has(const rf_xfer_t *x, int stage)
{
    return rf_xfer_nccl_has_gather(x, stage);
}

static const rf_xfer_ops_t nccl_xfer_ops = {
    .name = "nccl",
    .wire = "mpi",
    .buf_bytes = nccl_buf_bytes,
    .open = nccl_open,
    .close = nccl_close,
    .send = nccl_send,
    .recv = nccl_recv,
    .drain = nccl_drain,
    .gather_has = nccl_gather_has,
    .gather_recv = rf_xfer_nccl_gather_recv,
    .gather_send = rf_xfer_nccl_gather_send,
};

/* ---- chunk transports -------------------------------------------------------------------- */

const rf_xfer_ops_t *rf_xfer_ops_lookup(const char *name)
{
    if (name == NULL)
        return NULL;
    if (strcmp(name, "ipc") == 0)
        return rf_xfer_ipc_ops();
    if (strcmp(name, "nccl") == 0)
        return &nccl_xfer_ops;
    return NULL;
}
