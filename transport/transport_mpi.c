/*
 * refit: the MPI transport (DESIGN.md section 9, "mpi"): host buffers, tagged point-to-point
 * on a duplicate of world with MPI_ERRORS_RETURN. The transports by name are in
 * transport_registry.c.
 */
#include <mpi.h>
#include <stdlib.h>

#include "refit/checks.h"
#include "refit/transport.h"

typedef struct rf_transport_mpi {
    rf_transport_t base; /* first: ops table */
    MPI_Comm comm;
} rf_transport_mpi_t;

static rf_status_t mpi_create(MPI_Comm world, rf_transport_t **t_p, rf_err_t *err);

static void mpi_destroy(rf_transport_t *t)
{
    rf_transport_mpi_t *m = (rf_transport_mpi_t *)t;
    MPI_Comm_free(&m->comm);
    free(m);
}

static rf_status_t mpi_isend(rf_transport_t *t, const void *buf, size_t bytes, int dest,
                             int tag, MPI_Request *req_p, rf_err_t *err)
{
    rf_transport_mpi_t *m = (rf_transport_mpi_t *)t;
    if (bytes > INT32_MAX)
        return rf_err_set(err, RF_ERR_INVALID, "mpi transport: message of %zu bytes to rank %d",
                          bytes, dest);
    RF_MPI_CHECK(MPI_Isend(buf, (int)bytes, MPI_BYTE, dest, tag, m->comm, req_p), err);
    return RF_OK;
}

static rf_status_t mpi_irecv(rf_transport_t *t, void *buf, size_t bytes, int src, int tag,
                             MPI_Request *req_p, rf_err_t *err)
{
    rf_transport_mpi_t *m = (rf_transport_mpi_t *)t;
    if (bytes > INT32_MAX)
        return rf_err_set(err, RF_ERR_INVALID,
                          "mpi transport: receive of %zu bytes from rank %d", bytes, src);
    RF_MPI_CHECK(MPI_Irecv(buf, (int)bytes, MPI_BYTE, src, tag, m->comm, req_p), err);
    return RF_OK;
}

static rf_status_t mpi_recv_bytes(rf_transport_t *t, const MPI_Status *status, size_t *bytes_p,
                                  rf_err_t *err)
{
    (void)t;
    int count = 0;
    RF_MPI_CHECK(MPI_Get_count(status, MPI_BYTE, &count), err);
    *bytes_p = count < 0 ? 0 : (size_t)count;
    return RF_OK;
}

static rf_status_t mpi_probe(rf_transport_t *t, int src, int *found_p, int *tag_p, rf_err_t *err)
{
    rf_transport_mpi_t *m = (rf_transport_mpi_t *)t;
    MPI_Status st;
    *found_p = 0;
    RF_MPI_CHECK(MPI_Iprobe(src, MPI_ANY_TAG, m->comm, found_p, &st), err);
    if (*found_p && tag_p)
        *tag_p = st.MPI_TAG;
    return RF_OK;
}

static rf_status_t mpi_drain_one(rf_transport_t *t, int src, void *scratch, size_t bytes,
                                 int *found_p, rf_err_t *err)
{
    rf_transport_mpi_t *m = (rf_transport_mpi_t *)t;
    MPI_Message msg;
    MPI_Status st;
    *found_p = 0;
    RF_MPI_CHECK(MPI_Improbe(src, MPI_ANY_TAG, m->comm, found_p, &msg, &st), err);
    if (!*found_p)
        return RF_OK;
    int count = 0;
    RF_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count), err);
    if (count < 0 || (size_t)count > bytes)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "mpi transport: drained message of %d bytes from rank %d exceeds the "
                          "%zu-byte chunk",
                          count, src, bytes);
    /* matched by Improbe, so Mrecv completes at once */
    RF_MPI_CHECK(MPI_Mrecv(scratch, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE), err);
    return RF_OK;
}

static const rf_transport_ops_t rf_transport_mpi_ops_table = {
    .name = "mpi",
    .create = mpi_create,
    .destroy = mpi_destroy,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .recv_bytes = mpi_recv_bytes,
    .probe = mpi_probe,
    .drain_one = mpi_drain_one,
};

static rf_status_t mpi_create(MPI_Comm world, rf_transport_t **t_p, rf_err_t *err)
{
    rf_transport_mpi_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "mpi transport: out of memory");
    m->base.ops = &rf_transport_mpi_ops_table;
    int rc = MPI_Comm_dup(world, &m->comm);
    if (rc != MPI_SUCCESS) {
        free(m);
        return rf_mpi_error(rc, "MPI_Comm_dup", __FILE__, __LINE__, err);
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    *t_p = &m->base;
    return RF_OK;
}

const rf_transport_ops_t *rf_transport_mpi_ops(void)
{
    return &rf_transport_mpi_ops_table;
}
