/*
 * refit: the transports by name (include/refit/transport.h, transport/xfer_int.h); the one
 * file that names them all.
 *
 * Two layers. A message transport (rf_transport_ops_t: "mpi") moves one message at a time; a
 * chunk transport (rf_xfer_ops_t: "mpi", "ipc", "nccl") carries an update's chunks and runs its
 * messages, if any, over the message transport it names as its wire. rf_xfer_create asks here
 * for the name it was given, so the core (transport/xfer.c) names no transport. Each table
 * lives in its transport's file (nccl's in transport_nccl.c, or the stub transport_nccl_none.c
 * built without CUDA / NCCL, whose entries say so).
 */
#include <stddef.h>
#include <string.h>

#include "refit/transport.h"
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

/* ---- chunk transports -------------------------------------------------------------------- */

const rf_xfer_ops_t *rf_xfer_ops_lookup(const char *name)
{
    if (name == NULL || strcmp(name, "mpi") == 0)
        return rf_xfer_mpi_ops();
    if (strcmp(name, "ipc") == 0)
        return rf_xfer_ipc_ops();
    if (strcmp(name, "nccl") == 0)
        return rf_xfer_nccl_ops();
    return NULL;
}
