/* MPI test: the session API's CUDA tensors on the CPU (label device-emu). Run with
 * REFIT_TEST_DEVICE_ACCEL=host-device: rollout ranks get the host-device accelerator (host memory
 * tagged as device memory of device 0, core/accel_host.c), so their registered tensors are
 * "CUDA tensors of device 0" and the runtime storage goes through the device branches of
 * storage and plan (staged payloads, batched row copies) as a rollout rank with rollout.gpus
 * does on a GPU (tests/gpu: the same on CUDA). Trainer ranks register host shards filled from
 * the generator; after each COMMITTED update every engine element must be what the oracle's
 * locator says (runtime/verify.c). Refused: a host tensor (device -1) or another ordinal on a
 * device rollout rank, a device tensor on a host trainer, each naming the tensor; the plan then
 * carries the first refusal to every rank and a clean registration plans.
 * REFIT_TEST_DEVICE_ACCEL=host-device-trainer (rollout ranks host) or host-device-all: the
 * trainer ranks too register "CUDA tensors of device 0" over the mpi transport (trainer.gpus:
 * rf_trainer_use_device, every part packed through a device-to-host copy; the test checks the
 * bytes copied against this rank's share of the plan), and a host tensor or another ordinal on
 * a trainer is refused naming it. Second argument "f32": trainers register F32 masters whose
 * low mantissa bits the pack's rounding to nearest even must drop. CK_FORK=no. */
#include <check.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/generator.h"
#include "refit/hashes.h"
#include "refit/model.h"
#include "refit/refit.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/verify.h"
#include "session_int.h" /* runtime/: whether the storage really is the device kind */
#include "xfer_int.h"    /* transport/: whether the receive buffers are the pinned ones */

#define SENTINEL 0xa5

static const char *topo_path;
static int rank, size;
static rf_topology_t topo;
static rf_model_config_t cfg;
static rf_inventory_t inv;
static rf_rank_info_t me;
static bool trainer_dev, rollout_dev, f32;

typedef struct sess {
    rf_session_t *s;
    int n;
    void **buf;
    rf_tensor_desc_t *descs;
} sess_t;

/* Every expected tensor: host buffers; rollout descriptors say CUDA device 0. */
static void sess_open(sess_t *x)
{
    memset(x, 0, sizeof(*x));
    rf_status_t st = rf_session_create(MPI_COMM_WORLD, topo_path, NULL, &x->s);
    ck_assert_msg(st == RF_OK, "rf_session_create: %s", rf_session_last_error(NULL));
    x->n = rf_session_expected_count(x->s);
    ck_assert_int_gt(x->n, 0);
    x->buf = calloc((size_t)x->n, sizeof(void *));
    x->descs = calloc((size_t)x->n, sizeof(rf_tensor_desc_t));
    for (int i = 0; i < x->n; i++) {
        rf_tensor_desc_t *d = &x->descs[i];
        d->name = rf_session_expected(x->s, i, &d->dtype, &d->ndim, d->shape);
        uint64_t numel = 1;
        for (int k = d->ndim - 1; k >= 0; k--) {
            d->strides[k] = (int64_t)numel;
            numel *= (uint64_t)d->shape[k];
        }
        if (f32 && me.role == RF_ROLE_TRAINER)
            d->dtype = "F32"; /* masters of the model's bf16 tensors */
        size_t bytes = numel * rf_dtype_size(rf_dtype_parse(d->dtype));
        x->buf[i] = malloc(bytes + 1);
        memset(x->buf[i], SENTINEL, bytes);
        d->data = x->buf[i];
        d->device = (me.role == RF_ROLE_ROLLOUT ? rollout_dev : trainer_dev) ? 0 : -1;
    }
}

static void sess_close(sess_t *x)
{
    rf_session_destroy(x->s);
    for (int i = 0; i < x->n; i++)
        free(x->buf[i]);
    free(x->buf);
    free(x->descs);
}

static void trainer_fill(sess_t *x, uint64_t step)
{
    for (int i = 0; i < x->n; i++) {
        const rf_tensor_t *t = &inv.tensors[rf_inventory_find(&inv, x->descs[i].name)];
        rf_region_t reg;
        ck_assert(rf_trainer_shard(&topo, &inv, t, &me, &reg));
        uint64_t cols = t->numel / rf_tensor_rows(t), h = rf_gen_name_hash(t->name);
        uint16_t *b = x->buf[i];
        uint32_t *m = x->buf[i];
        int64_t w = reg.c1 - reg.c0;
        for (int64_t r = 0; r < reg.r1 - reg.r0; r++)
            for (int64_t c = 0; c < w; c++) {
                uint16_t v = (uint16_t)rf_gen_value_bits(
                    h, (uint64_t)(reg.r0 + r) * cols + (uint64_t)(reg.c0 + c), step,
                    RF_DTYPE_BF16);
                /* an F32 master: low bits below half an ulp, which rounding to nearest even
                 * drops (a pack that copied or truncated the wrong half would not) */
                if (f32)
                    m[r * w + c] = (uint32_t)v << 16 | (uint32_t)((r * w + c) * 40503 & 0x7fff);
                else
                    b[r * w + c] = v;
            }
    }
}

/* Trainer with device tensors: the bytes its packs of one update copy to the host. Broadcast:
 * the stage sender reads its whole shard, a contributor the shards it is a copy of record of
 * (what it gathers to the sender); p2p: every rectangle it sends to each of its receivers. */
static uint64_t expected_d2h(sess_t *x)
{
    uint64_t want = 0;
    size_t es = f32 ? 4 : 2;
    if (x->s->p2p) {
        for (size_t r = 0; r < x->s->p2p_s.nrecv; r++) {
            const rf_p2p_recv_t *rv = &x->s->p2p_s.recv[r];
            for (size_t k = 0; k < rv->n; k++)
                if (rv->rects[k].sender == rank)
                    want += (uint64_t)(rv->rects[k].reg.r1 - rv->rects[k].reg.r0) *
                            (uint64_t)(rv->rects[k].reg.c1 - rv->rects[k].reg.c0) * es;
        }
        return want;
    }
    for (int i = 0; i < x->n; i++) {
        const rf_tensor_t *t = &inv.tensors[rf_inventory_find(&inv, x->descs[i].name)];
        rf_region_t reg;
        rf_owner_t own[RF_MAX_OWNERS];
        ck_assert(rf_trainer_shard(&topo, &inv, t, &me, &reg));
        int n = rf_trainer_owners(&topo, &inv, t, own);
        bool mine = x->s->tr.sender;
        for (int o = 0; o < n; o++)
            mine |= own[o].rank == rank;
        if (mine)
            want += (uint64_t)(reg.r1 - reg.r0) * (uint64_t)(reg.c1 - reg.c0) * es;
    }
    return want;
}

/* Rollout: elements that differ from the loaders' result for the generator at `step`. */
static uint64_t rollout_mismatches(sess_t *x, uint64_t step, char *bad, size_t cap)
{
    rf_err_t err;
    uint64_t nbad = 0;
    int i = 0;
    bad[0] = '\0';
    for (int m = 0; m < inv.nmodules; m++) {
        rf_slot_shape_t sh[RF_MODULE_MAX_SLOTS];
        int ns;
        rf_err_clear(&err);
        ck_assert_msg(rf_module_slots(&inv, m, &me.rc, sh, &ns, &err) == RF_OK, "%s", err.msg);
        for (int k = 0; k < ns; k++, i++) {
            rf_ref_locator_t *l;
            ck_assert_msg(rf_ref_locator_create(&inv, m, k, &me.rc, &l, &err) == RF_OK, "%s",
                          err.msg);
            const uint16_t *b = x->buf[i];
            for (uint64_t e = 0; e < rf_ref_locator_numel(l); e++) {
                rf_ref_elem_t r;
                rf_ref_locator_at(l, e, &r);
                uint16_t want = r.kind == RF_REF_TENSOR
                                    ? (uint16_t)rf_gen_value_bits(
                                          rf_gen_name_hash(inv.tensors[r.tensor].name), r.index,
                                          step, RF_DTYPE_BF16)
                                    : 0;
                if (b[e] != want && nbad++ == 0)
                    snprintf(bad, cap, "%s element %llu: %04x, expected %04x", x->descs[i].name,
                             (unsigned long long)e, b[e], want);
            }
            rf_ref_locator_destroy(l);
        }
    }
    ck_assert_int_eq(i, x->n);
    return nbad;
}

static void same_text_everywhere(const char *text, const char *needle)
{
    uint64_t h = rf_hash64_str(text), lo, hi;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(lo == hi, "rank %d: the ranks' texts differ; mine: %s", rank, text);
    ck_assert_msg(strstr(text, needle) != NULL, "'%s' does not name '%s'", text, needle);
}

/* Refusals name the tensor; the plan carries rank 0's (a trainer's) to every rank; a clean
 * registration then plans; two updates write exactly the trainer's bytes through the device
 * storage. */
START_TEST(test_device_storage)
{
    sess_t x;
    rf_session_plan_info_t pi;
    rf_session_result_t r;
    sess_open(&x);
    rf_tensor_desc_t d = x.descs[0];
    char first[256];
    snprintf(first, sizeof(first), "%s", d.name);
    if (me.role == RF_ROLE_ROLLOUT ? rollout_dev : trainer_dev) {
        d.device = -1; /* a host tensor where the runtime storage / trainer.gpus is the GPU */
        ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "expected CUDA device 0"));
        d.device = 1; /* another GPU */
        ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "device 1"));
    } else {
        d.device = 0; /* trainers read host memory on the mpi transport */
        ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
    }
    /* remembered until an accepted register call: the plan carries rank 0's refusal */
    char first0[256];
    snprintf(first0, sizeof(first0), "%s", first);
    MPI_Bcast(first0, (int)sizeof(first0), MPI_CHAR, 0, MPI_COMM_WORLD);
    ck_assert_int_ne(rf_session_plan(x.s, &pi), RF_OK);
    same_text_everywhere(rf_session_last_error(x.s), first0);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, &pi) == RF_OK, "%s", rf_session_last_error(x.s));
    /* the device kind of storage, not the host's (the plan's device branches) */
    ck_assert(rf_storage_on_device(&x.s->st) == (me.role == RF_ROLE_ROLLOUT && rollout_dev));
    /* ... and the device trainer's packs copy from the device (rf_trainer_use_device) */
    ck_assert(rf_session_mpi_device_trainer(x.s) == (me.role == RF_ROLE_TRAINER && trainer_dev));
    if (me.role == RF_ROLE_TRAINER)
        ck_assert((x.s->tr.dev != NULL) == trainer_dev);
    for (uint64_t v = 1; v <= 2; v++) {
        char bad[256];
        if (me.role == RF_ROLE_TRAINER)
            trainer_fill(&x, v);
        ck_assert_int_eq(rf_session_update(x.s, v, &r), RF_OK);
        ck_assert_msg(r.committed, "rank %d: update FAILED: %s", rank, r.reason);
        uint64_t nbad = me.role == RF_ROLE_ROLLOUT ? rollout_mismatches(&x, v, bad, sizeof(bad))
                                                   : 0;
        ck_assert_msg(nbad == 0, "rank %d: %llu elements wrong after update %llu; first: %s",
                      rank, (unsigned long long)nbad, (unsigned long long)v, bad);
        if (me.role == RF_ROLE_TRAINER) {
            uint64_t want = trainer_dev ? expected_d2h(&x) : 0;
            ck_assert_msg(x.s->tr.stats.bytes_d2h == want && (!trainer_dev || want > 0),
                          "rank %d: update %llu: %llu bytes copied device to host in %llu "
                          "copies, expected %llu", rank, (unsigned long long)v,
                          (unsigned long long)x.s->tr.stats.bytes_d2h,
                          (unsigned long long)x.s->tr.stats.d2h_copies,
                          (unsigned long long)want);
        }
    }
    sess_close(&x);
}
END_TEST

/* Issue 18: the rollout rank receives into pinned buffers (the host-device accelerator's
 * alloc_host, whose h2d copies complete only at an event: core/accel_host.c) and re-posts a
 * buffer only after its copies completed. Three updates of many chunks through two buffers:
 * each COMMITTED with exactly the trainer's bytes, every staged copy read a pinned source and
 * none found it changed at completion (a receive posted into a buffer still being copied
 * from would change it: the update fails). REFIT_MPI_RECV_PAGEABLE=1 (pageable) then
 * receives the same bytes with no pinned copy. */
static void pinned_updates(bool pageable)
{
    sess_t x;
    rf_session_plan_info_t pi;
    rf_session_result_t r;
    if (pageable)
        setenv("REFIT_MPI_RECV_PAGEABLE", "1", 1);
    sess_open(&x);
    ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, &pi) == RF_OK, "%s", rf_session_last_error(x.s));
    const bool rollout = me.role == RF_ROLE_ROLLOUT;
    if (rollout) {
        ck_assert(x.s->xfer->buffers == 2);
        ck_assert(pageable ? x.s->xfer->pin_ax == NULL : x.s->xfer->pin_ax == x.s->accel);
    }
    uint64_t chunks = 0;
    for (uint64_t v = 1; v <= 3; v++) {
        char bad[256];
        if (!rollout)
            trainer_fill(&x, v);
        ck_assert_int_eq(rf_session_update(x.s, v, &r), RF_OK);
        ck_assert_msg(r.committed, "rank %d: update %llu FAILED: %s", rank,
                      (unsigned long long)v, r.reason);
        uint64_t nbad = rollout ? rollout_mismatches(&x, v, bad, sizeof(bad)) : 0;
        ck_assert_msg(nbad == 0, "rank %d: %llu elements wrong after update %llu; first: %s",
                      rank, (unsigned long long)nbad, (unsigned long long)v, bad);
        if (rollout)
            chunks += rf_xfer_stats(x.s->xfer)->chunks_received;
    }
    if (rollout) {
        uint64_t tracked = 0;
        uint64_t changed = rf_accel_host_device_changed(x.s->accel, &tracked);
        /* every buffer is reused many times in each update */
        ck_assert_msg(chunks >= 3 * 8, "only %llu chunks", (unsigned long long)chunks);
        ck_assert_uint_eq(changed, 0);
        if (pageable)
            ck_assert_uint_eq(tracked, 0);
        else /* at least one staged h2d copy per chunk, all from the pinned buffers */
            ck_assert_msg(tracked >= chunks, "%llu pinned copies for %llu chunks",
                          (unsigned long long)tracked, (unsigned long long)chunks);
    }
    sess_close(&x);
    unsetenv("REFIT_MPI_RECV_PAGEABLE");
}

START_TEST(test_pinned_receive_gate)
{
    pinned_updates(false);
}
END_TEST

START_TEST(test_pageable_receive_switch)
{
    pinned_updates(true);
}
END_TEST

int main(int argc, char **argv)
{
    rf_err_t err;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *emu = getenv("REFIT_TEST_DEVICE_ACCEL");
    if (emu != NULL) {
        rollout_dev = strcmp(emu, "host-device") == 0 || strcmp(emu, "host-device-all") == 0;
        trainer_dev = strcmp(emu, "host-device-trainer") == 0 ||
                      strcmp(emu, "host-device-all") == 0;
    }
    f32 = argc > 2 && strcmp(argv[2], "f32") == 0;
    if (argc < 2 || (!rollout_dev && !trainer_dev) || (argc > 2 && !f32)) {
        if (rank == 0)
            fprintf(stderr, "usage: REFIT_TEST_DEVICE_ACCEL=host-device|host-device-trainer|"
                            "host-device-all check_session_device TOPOLOGY.yaml [f32]\n");
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    topo_path = argv[1];
    rf_err_clear(&err);
    if (rf_model_load_topology(topo_path, MPI_COMM_WORLD, &topo, &cfg, &err) != RF_OK ||
        rf_inventory_build(&cfg, topo.quantization, topo.group_size, &inv, &err) != RF_OK ||
        rf_inventory_apply_layout(&inv, topo.r_layout, &err) != RF_OK ||
        rf_topology_rank_info(&topo, rank, &me) != RF_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("session_device");
    TCase *tc = tcase_create("session_device");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_device_storage);
    if (rollout_dev) { /* the rollout's pinned receive buffers: only with device storage */
        tcase_add_test(tc, test_pinned_receive_gate);
        tcase_add_test(tc, test_pageable_receive_switch);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
