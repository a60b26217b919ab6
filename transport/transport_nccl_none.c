/*
 * refit: the nccl transport compiled out (refit built without CUDA or without NCCL). Every
 * entry point says so; rf_xfer_nccl_built() is false, so refit-run refuses transport nccl at
 * startup with a message naming the build (runtime/job.c). NCCL's stub-file shape.
 */
#include <stddef.h>
#include <string.h>

#include "refit/transport_nccl.h"
#include "xfer_int.h"

bool rf_xfer_nccl_built(void)
{
    return false;
}

static rf_status_t not_built(rf_err_t *err)
{
    return rf_err_set(err, RF_ERR_UNSUPPORTED,
                      "transport nccl: refit was built without CUDA and NCCL");
}

rf_status_t rf_xfer_nccl_setup(rf_xfer_t *x, const rf_nccl_layout_t *layout, int device,
                               rf_accel_t *accel, rf_err_t *err)
{
    (void)x;
    (void)layout;
    (void)device;
    (void)accel;
    return not_built(err);
}

rf_status_t rf_xfer_nccl_begin(rf_xfer_t *x, double deadline, rf_err_t *err)
{
    (void)x;
    (void)deadline;
    return not_built(err);
}

void rf_xfer_nccl_fail(rf_xfer_t *x)
{
    (void)x;
}

rf_status_t rf_xfer_nccl_run(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                             void *pack_ctx, rf_xfer_recv_fn recv, void *recv_ctx,
                             rf_err_t *err)
{
    (void)x;
    (void)cfg;
    (void)pack;
    (void)pack_ctx;
    (void)recv;
    (void)recv_ctx;
    return not_built(err);
}

void rf_xfer_nccl_counters(const rf_xfer_t *x, rf_xfer_nccl_counters_t *c)
{
    (void)x;
    memset(c, 0, sizeof(*c));
}

bool rf_xfer_nccl_has_gather(const rf_xfer_t *x, int stage)
{
    (void)x;
    (void)stage;
    return false;
}

rf_status_t rf_xfer_nccl_gather_recv(rf_xfer_t *x, int stage, const int *peers,
                                     const uint64_t *bytes, int n, void *dst, double deadline,
                                     rf_err_t *err)
{
    (void)x;
    (void)stage;
    (void)peers;
    (void)bytes;
    (void)n;
    (void)dst;
    (void)deadline;
    return not_built(err);
}

rf_status_t rf_xfer_nccl_gather_send(rf_xfer_t *x, int stage, int sender, const void *src,
                                     uint64_t bytes, double deadline, rf_err_t *err)
{
    (void)x;
    (void)stage;
    (void)sender;
    (void)src;
    (void)bytes;
    (void)deadline;
    return not_built(err);
}

/* ---- the chunk transport table: every entry that can fail says it is not built ----------- */

static rf_status_t none_setup(rf_xfer_t *x, const rf_xfer_setup_t *setup, rf_err_t *err)
{
    (void)x;
    (void)setup;
    return not_built(err);
}

static rf_status_t none_begin(rf_xfer_t *x, uint32_t update, double deadline, rf_err_t *err)
{
    (void)update;
    return rf_xfer_nccl_begin(x, deadline, err);
}

static rf_status_t none_send(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_pack_fn pack,
                             void *ctx, rf_err_t *err)
{
    return rf_xfer_nccl_run(x, cfg, pack, ctx, NULL, NULL, err);
}

static rf_status_t none_recv(rf_xfer_t *x, const rf_xfer_config_t *cfg, rf_xfer_recv_fn recv,
                             void *ctx, rf_err_t *err)
{
    return rf_xfer_nccl_run(x, cfg, NULL, NULL, recv, ctx, err);
}

/* The stage gather on the stage's trainer-only gather communicator, where this rank has one. */
static int nccl_gather_has(const rf_xfer_t *x, int stage)
{
    return rf_xfer_nccl_has_gather(x, stage);
}

static const rf_xfer_ops_t none_xfer_ops = {
    .name = "nccl",
    .caps = RF_XFER_CAP_DEVICE_PAYLOAD | RF_XFER_CAP_GATHER,
    .wire = "mpi",
    .setup = none_setup,
    .begin = none_begin,
    .send = none_send,
    .recv = none_recv,
    .gather_has = nccl_gather_has,
    .gather_recv = rf_xfer_nccl_gather_recv,
    .gather_send = rf_xfer_nccl_gather_send,
};

const rf_xfer_ops_t *rf_xfer_nccl_ops(void)
{
    return &none_xfer_ops;
}
