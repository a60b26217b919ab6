/* MPI test: quantized models through the session API (include/refit/session.h,
 * runtime/session_quant.c) under the topology given as argv[1] (tests/data/llama-q128, fp8-block /
 * wna16 / fp8-tensor / fp8-channel; tests/data/qwen3-moe-q128, fp8-block / wna16 experts w13 /
 * w2, rollout EP 2 included; rollout.layout vllm and hf, rollout TP 1 and 2, broadcast and p2p;
 * with REFIT_TEST_DEVICE_ACCEL=host-device the rollout tensors are device tensors; with
 * host-device-trainer / host-device-all, or over colocated ipc under host-device, the trainer's
 * too, quantized on its "device" (label device-emu); with trainer.gpus / rollout.gpus in the
 * topology (tests/gpu, label gpu) real CUDA tensors of GPU 0, the checks reading host copies
 * of them). Trainer
 * ranks register their shards of the UNQUANTIZED checkpoint (bf16 from the generator at update
 * v's step, or F32 masters that round to those values); rollout ranks register the format
 * owner's runtime tensors (F8_E4M3 weights + F32 scales, I32 weight_packed + BF16 scales). After
 * every COMMITTED update each registered engine tensor must pass refit-run's oracle: the scalar
 * locator against the reference quantizer applied to the whole logical weight
 * (rf_verify_slot_ex, as runtime/job_oracle.c runs it), and the dequantization check of every
 * quantized module (rf_verify_dequant_module). Wrong quantized registrations are refused naming
 * the tensor; a non-finite trainer weight fails the update on every rank naming it, with the
 * engine's bytes unchanged. With argv[2] "--refused TEXT": rf_session_create must fail on
 * every rank with TEXT in its message. With "--checkpoint DIR": the trainers register DIR
 * (rf_session_register_checkpoint: a quantized model's checkpoint, its linears stored quantized
 * or unquantized), and the oracle reads the same file (as stored, or the reference quantizer
 * over its unquantized weight, runtime/job_oracle.c's rule). CK_FORK=no. */
#include <check.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "refit/accel.h"
#include "refit/checkpoint.h"
#include "refit/safetensors.h"

#include "refit/format.h"
#include "refit/formats.h"
#include "refit/generator.h"
#include "refit/hashes.h"
#include "refit/model.h"
#include "refit/quant.h"
#include "refit/refit.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/verify.h"
#include "session_int.h" /* runtime/: where the trainer quantized, what ipc staged */

#define SENTINEL 0xa5

static const char *topo_path, *refused;
static const char *ck_dir; /* --checkpoint DIR: the trainers register it, the oracle reads it */
static rf_ckpt_t *ck;      /* ... open on every rank for the oracle */
static rf_status_t load_status; /* the loader's own answer to the topology (main) */
static bool device_emu; /* REFIT_TEST_DEVICE_ACCEL=host-device / -all: rollout tensors on
                           device 0 */
static bool trainer_emu; /* host-device-trainer / -all (mpi), colocated ipc under host-device,
                            or trainer.gpus (tests/gpu): the trainer's tensors are CUDA tensors
                            of device 0 */
static bool ipc_emu;     /* colocated ipc: the trainer's tensors in one declared shm segment */
static rf_accel_t *gpu;  /* trainer.gpus / rollout.gpus (tests/gpu, label gpu): this rank's
                            tensors are real CUDA tensors of GPU 0, x->buf their host copies */
static int rank, size;
static rf_topology_t topo;
static rf_model_config_t cfg;
static rf_inventory_t inv;
static rf_rank_info_t me;

typedef struct sess {
    rf_session_t *s;
    int n;
    void **buf;
    size_t *bytes;
    rf_tensor_desc_t *descs;
    char *dev;         /* gpu rank: one cudaMalloc holding its tensors (descs' data) */
    char seg_name[64]; /* ipc_emu trainer: the shared memory segment holding its tensors */
    unsigned char *seg;
    size_t seg_bytes;
} sess_t;

#define SEG_ALIGN 512

/* ipc_emu trainer: one shared memory segment for all its tensors, declared to the host-device
 * accelerator as a CUDA allocation (so its pair opens it by name, as CUDA IPC would). */
static void seg_map(sess_t *x)
{
    size_t total = SEG_ALIGN;
    for (int i = 0; i < x->n; i++)
        total += (x->bytes[i] + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
    snprintf(x->seg_name, sizeof(x->seg_name), "/refit-test-squant-%d-%d", (int)getpid(), rank);
    int fd = shm_open(x->seg_name, O_CREAT | O_EXCL | O_RDWR, 0600);
    ck_assert_msg(fd >= 0, "shm_open %s", x->seg_name);
    ck_assert_int_eq(ftruncate(fd, (off_t)total), 0);
    x->seg = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ck_assert(x->seg != MAP_FAILED);
    x->seg_bytes = total;
    ck_assert_int_eq(rf_accel_host_device_declare(x->seg, total, x->seg_name, 0), RF_OK);
    size_t off = SEG_ALIGN; /* no tensor at the segment's base */
    for (int i = 0; i < x->n; i++) {
        x->buf[i] = x->seg + off;
        memset(x->buf[i], SENTINEL, x->bytes[i]);
        x->descs[i].data = x->buf[i];
        off += (x->bytes[i] + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
    }
}

/* This rank's tensors are real CUDA tensors (tests/gpu): its role's gpus key is set. */
static bool on_gpu(void)
{
    return gpu != NULL && (me.role == RF_ROLE_TRAINER ? topo.t_ngpus > 0 : topo.r_ngpus > 0);
}

/* gpu rank: one device allocation carved into its tensors, the host copies pushed there. */
static void dev_map(sess_t *x)
{
    size_t total = SEG_ALIGN, off = 0;
    for (int i = 0; i < x->n; i++)
        total += (x->bytes[i] + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
    void *p = NULL;
    ck_assert_int_eq(gpu->ops->alloc(gpu, total, &p), RF_OK);
    x->dev = p;
    for (int i = 0; i < x->n; i++) {
        x->descs[i].data = x->dev + off;
        off += (x->bytes[i] + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN;
    }
}

/* gpu rank: host copies -> its CUDA tensors (push) or back (pull). */
static void dev_sync(const sess_t *x, bool push)
{
    for (int i = 0; x->dev != NULL && i < x->n; i++)
        ck_assert_int_eq(gpu->ops->copy(gpu, push ? (void *)x->descs[i].data : x->buf[i],
                                        push ? x->buf[i] : x->descs[i].data, x->bytes[i],
                                        push ? RF_COPY_H2D : RF_COPY_D2H, NULL),
                         RF_OK);
    if (x->dev != NULL)
        ck_assert_int_eq(rf_accel_sync(gpu), RF_OK);
}

static void sess_open_as(sess_t *x, bool masters)
{
    memset(x, 0, sizeof(*x));
    rf_status_t st = rf_session_create(MPI_COMM_WORLD, topo_path, NULL, &x->s);
    ck_assert_msg(st == RF_OK, "rf_session_create: %s", rf_session_last_error(NULL));
    x->n = rf_session_expected_count(x->s);
    ck_assert_int_gt(x->n, 0);
    x->buf = calloc((size_t)x->n, sizeof(void *));
    x->bytes = calloc((size_t)x->n, sizeof(size_t));
    x->descs = calloc((size_t)x->n, sizeof(rf_tensor_desc_t));
    for (int i = 0; i < x->n; i++) {
        rf_tensor_desc_t *d = &x->descs[i];
        d->name = rf_session_expected(x->s, i, &d->dtype, &d->ndim, d->shape);
        ck_assert_ptr_nonnull(d->name);
        uint64_t numel = 1;
        for (int k = d->ndim - 1; k >= 0; k--) {
            d->strides[k] = (int64_t)numel;
            numel *= (uint64_t)d->shape[k];
        }
        if (masters && me.role == RF_ROLE_TRAINER)
            d->dtype = "F32";
        x->bytes[i] = numel * rf_dtype_size(rf_dtype_parse(d->dtype));
        bool in_seg = ipc_emu && me.role == RF_ROLE_TRAINER;
        x->buf[i] = in_seg ? NULL : malloc(x->bytes[i] + 1);
        if (!in_seg)
            memset(x->buf[i], SENTINEL, x->bytes[i]);
        d->data = x->buf[i];
        /* REFIT_TEST_DEVICE_ACCEL=host-device (label device-emu): the rollout ranks' storage is
         * the host-device accelerator's device 0, as rollout.gpus makes it a GPU's; a host
         * tensor would be refused there, so registering these proves the device storage. The
         * same for the trainer's tensors (trainer.gpus, colocated ipc): quantized on the
         * "device" by the format kernels' table (rf_trainer_produce_given_device) */
        d->device = (me.role == RF_ROLE_ROLLOUT ? device_emu : trainer_emu) ? 0 : -1;
    }
    if (ipc_emu && me.role == RF_ROLE_TRAINER)
        seg_map(x);
    if (on_gpu()) {
        for (int i = 0; i < x->n; i++)
            x->descs[i].device = 0;
        dev_map(x);
        dev_sync(x, true);
    }
}

static void sess_close(sess_t *x)
{
    rf_session_destroy(x->s);
    if (x->dev != NULL)
        gpu->ops->free(gpu, x->dev);
    for (int i = 0; i < x->n && x->seg == NULL; i++)
        free(x->buf[i]);
    if (x->seg != NULL) {
        rf_accel_host_device_forget(x->seg);
        munmap(x->seg, x->seg_bytes);
        shm_unlink(x->seg_name);
    }
    free(x->buf);
    free(x->bytes);
    free(x->descs);
}

/* The quantized linear `prefix` (fp8 weight or wna16 weight_packed) holding the name, or -1. */
static int primary_of(const char *name, char *prefix, size_t cap)
{
    const char *dot = strrchr(name, '.');
    snprintf(prefix, cap, "%.*s", (int)(dot - name), name);
    char q[RF_NAME_MAX + 16];
    snprintf(q, sizeof(q), "%s.weight_packed", prefix);
    int qi = rf_inventory_find(&inv, q);
    int ti = rf_inventory_find(&inv, name);
    if (ti >= 0 && inv.tensors[ti].param == RF_PARAM_BIAS)
        return -1; /* a quantized linear's bias stays in the model dtype */
    if (qi < 0) { /* fp8: the e4m3 `<prefix>.weight` (a scale may be asked for first) */
        snprintf(q, sizeof(q), "%s.weight", prefix);
        qi = rf_inventory_find(&inv, q);
    }
    return qi >= 0 && inv.modules[inv.tensors[qi].module].quant != RF_QUANT_NONE &&
                   inv.tensors[qi].dtype != inv.cfg.dtype
               ? qi
               : -1;
}

/* The logical (unquantized, checkpoint) tensor named like registered tensor `name`: the
 * inventory's own, or the (N, K) model-dtype weight of a quantized linear. On a trainer (reg
 * not NULL), its shard here in *reg (columns in logical elements). */
static rf_tensor_t logical_of(const char *name, rf_region_t *reg)
{
    char prefix[RF_NAME_MAX];
    int qi = primary_of(name, prefix, sizeof(prefix));
    if (qi < 0) {
        int ti = rf_inventory_find(&inv, name);
        ck_assert_msg(ti >= 0, "%s", name);
        ck_assert(reg == NULL || rf_trainer_shard(&topo, &inv, &inv.tensors[ti], &me, reg));
        return inv.tensors[ti];
    }
    const rf_tensor_t *qt = &inv.tensors[qi];
    bool wna16 = inv.modules[qt->module].quant == RF_QUANT_WNA16;
    ck_assert(reg == NULL || rf_trainer_shard(&topo, &inv, qt, &me, reg));
    rf_tensor_t lt = *qt;
    snprintf(lt.name, sizeof(lt.name), "%.150s.weight", prefix);
    lt.dtype = inv.cfg.dtype;
    lt.shape[1] = qt->shape[1] * (wna16 ? 8 : 1);
    lt.numel = (uint64_t)lt.shape[0] * (uint64_t)lt.shape[1];
    lt.nbytes = lt.numel * rf_dtype_size(lt.dtype);
    if (wna16 && reg != NULL) {
        reg->c0 *= 8;
        reg->c1 *= 8;
    }
    return lt;
}

/* An F32 whose nearest-even BF16 is b (k picks exact, below half, a tie from above, above half
 * from b - 1: truncation or ties-away would give another bf16, so another quantization). */
static uint32_t master_of(uint16_t b, uint64_t k)
{
    uint32_t u = (uint32_t)b << 16;
    bool zero = (b & 0x7fffu) == 0;
    switch (k % 4) {
    case 1:
        return u | 0x7fffu;
    case 2:
        return u | ((b & 1u) ? 0x4000u : 0x8000u);
    case 3:
        return zero ? u : (((uint32_t)b - 1u) << 16) | 0x8001u;
    }
    return u;
}

/* Element k of quantized linear weight h (its name's hash) at `step`: the generator's bf16. Under
 * fp8-tensor, times the linear's own factor (3 .. 7) / 8, rounded to bf16: the generator's
 * tensors share one amax, so every shard of a fused module would get the same scale and the
 * engine's requantization to the max scale (vLLM's requantize_with_max_scale) would never change
 * a byte. */
static uint16_t logical_bits(uint64_t h, uint64_t k, uint64_t step)
{
    uint16_t v = (uint16_t)rf_gen_value_bits(h, k, step, RF_DTYPE_BF16);
    if (topo.quantization != RF_QUANT_FP8_TENSOR)
        return v;
    return rf_f32_to_bf16(rf_bf16_to_f32(v) * (float)(h % 5 + 3) / 8.0f);
}

/* Trainer: every registered shard from the generator at `step` (the logical tensor's values). */
static void trainer_fill(sess_t *x, uint64_t step)
{
    for (int i = 0; i < x->n && me.role == RF_ROLE_TRAINER; i++) {
        rf_region_t reg;
        rf_tensor_t t = logical_of(x->descs[i].name, &reg);
        uint64_t cols = t.numel / rf_tensor_rows(&t), h = rf_gen_name_hash(t.name);
        bool master = rf_dtype_parse(x->descs[i].dtype) == RF_DTYPE_F32;
        bool quantized = primary_of(x->descs[i].name, (char[RF_NAME_MAX]){0}, RF_NAME_MAX) >= 0;
        uint16_t *b = x->buf[i];
        uint32_t *f = x->buf[i];
        int64_t w = reg.c1 - reg.c0;
        ck_assert_int_eq(x->descs[i].shape[0], reg.r1 - reg.r0);
        for (int64_t r = 0; r < reg.r1 - reg.r0; r++)
            for (int64_t c = 0; c < w; c++) {
                uint64_t k = (uint64_t)(reg.r0 + r) * cols + (uint64_t)(reg.c0 + c);
                uint16_t v = quantized ? logical_bits(h, k, step)
                                       : (uint16_t)rf_gen_value_bits(h, k, step, RF_DTYPE_BF16);
                if (master)
                    f[r * w + c] = master_of(v, k);
                else
                    b[r * w + c] = v;
            }
    }
    if (me.role == RF_ROLE_TRAINER)
        dev_sync(x, true);
}

/* ---- the oracle's expected checkpoint tensors (runtime/job_oracle.c's, generator case) ---- */

typedef struct expect {
    uint64_t step;
    char **buf;      /* per inventory tensor */
    rf_dtype_t *dt;  /* per inventory tensor: the dtype of buf (a stored scale may be bf16) */
    void **slots;    /* the module's registered engine tensors */
} expect_t;

/* The reference quantizer over the whole logical weight of the linear holding tensor t. */
static void expect_quantized(expect_t *c, const rf_tensor_t *t)
{
    char prefix[RF_NAME_MAX], name[RF_NAME_MAX + 32];
    int qi = primary_of(t->name, prefix, sizeof(prefix));
    ck_assert_int_ge(qi, 0);
    rf_quant_t q = inv.modules[t->module].quant;
    bool wna16 = q == RF_QUANT_WNA16, rowq = q == RF_QUANT_FP8_CHANNEL;
    bool tensorq = q == RF_QUANT_FP8_TENSOR;
    snprintf(name, sizeof(name), "%s.%s", prefix,
             wna16 || rowq || tensorq ? "weight_scale" : "weight_scale_inv");
    int si = rf_inventory_find(&inv, name);
    ck_assert_int_ge(si, 0);
    const rf_tensor_t *qt = &inv.tensors[qi], *sc = &inv.tensors[si];
    rf_tensor_t lt = logical_of(qt->name, NULL);
    int64_t N = lt.shape[0], K = lt.shape[1];
    size_t es = rf_dtype_size(lt.dtype);
    char *logical = malloc((size_t)N * (size_t)K * es);
    char *qb = malloc(qt->nbytes + 1), *sb = malloc(sc->nbytes + 1);
    ck_assert(logical && qb && sb);
    ck_assert_int_eq(lt.dtype, RF_DTYPE_BF16);
    uint64_t h = rf_gen_name_hash(lt.name);
    rf_status_t st;
    if (ck != NULL) { /* the checkpoint's unquantized weight, which the trainer quantizes */
        const rf_st_entry_t *e = rf_ckpt_find(ck, lt.name);
        ck_assert_msg(e != NULL, "%s", lt.name);
        rf_err_t err;
        rf_err_clear(&err);
        ck_assert_msg(rf_ckpt_read(ck, e, 0, (uint64_t)N, 0, (uint64_t)K * es, logical,
                                   (size_t)K * es, &err) == RF_OK, "%s", err.msg);
    } else {
        for (uint64_t k = 0; k < (uint64_t)N * (uint64_t)K; k++)
            ((uint16_t *)(void *)logical)[k] = logical_bits(h, k, c->step);
    }
    if (rowq || tensorq) /* the whole tensor at once: one scale per row / per tensor */
        st = rf_fp8_quantize_rows(logical, lt.dtype, N, K, K, rowq, (uint8_t *)qb, K,
                                  (float *)(void *)sb);
    else if (wna16)
        st = rf_wna16_quantize(logical, lt.dtype, N, K, K, inv.group_size, (uint32_t *)qb, K / 8,
                               sb, sc->dtype, K / inv.group_size);
    else
        st = rf_fp8_quantize(logical, lt.dtype, N, K, K, (uint8_t *)qb, K, sb, sc->dtype,
                             sc->shape[1], RF_FP8_PLAIN);
    ck_assert_int_eq(st, RF_OK);
    free(logical);
    c->buf[qi] = qb;
    c->buf[si] = sb;
}

static const void *expect_bytes(void *ctx, int tensor)
{
    expect_t *c = ctx;
    const rf_tensor_t *t = &inv.tensors[tensor];
    if (c->buf[tensor] != NULL)
        return c->buf[tensor];
    if (t->param == RF_PARAM_WEIGHT_SHAPE)
        return NULL;
    if (inv.modules[t->module].quant != RF_QUANT_NONE && t->param != RF_PARAM_BIAS &&
        (ck == NULL || rf_manifest_trainer_quantizes(&inv, t, ck))) {
        expect_quantized(c, t);
        return c->buf[tensor];
    }
    if (ck != NULL) { /* as stored (a quantized linear stored quantized included) */
        const rf_st_entry_t *e = rf_ckpt_find(ck, t->name);
        ck_assert_msg(e != NULL, "%s", t->name);
        char *b = malloc(e->nbytes + 1);
        uint64_t rows = rf_st_entry_rows(e), rb = rf_st_entry_row_bytes(e);
        rf_err_t err;
        rf_err_clear(&err);
        ck_assert_msg(rf_ckpt_read(ck, e, 0, rows, 0, rb, b, rb, &err) == RF_OK, "%s", err.msg);
        c->buf[tensor] = b;
        c->dt[tensor] = e->dtype;
        return b;
    }
    char *b = malloc(t->nbytes + 1);
    uint64_t rows = rf_tensor_rows(t);
    ck_assert_int_eq(rf_gen_fill(t, c->step, 0, rows, 0, t->numel / rows, b,
                                 rf_tensor_row_bytes(t)),
                     RF_OK);
    c->buf[tensor] = b;
    return b;
}

/* The dtype expect_bytes hands tensor out in (runtime/job_oracle.c's rule): the header's for a
 * tensor compared as stored, else the inventory's (RF_DTYPE_INVALID). */
static rf_dtype_t expect_dtype(void *ctx, int tensor)
{
    expect_t *c = ctx;
    const rf_tensor_t *t = &inv.tensors[tensor];
    if (c->buf[tensor] != NULL && c->dt[tensor] != RF_DTYPE_INVALID)
        return c->dt[tensor];
    if (ck == NULL || t->param == RF_PARAM_WEIGHT_SHAPE ||
        rf_manifest_trainer_quantizes(&inv, t, ck))
        return RF_DTYPE_INVALID;
    const rf_st_entry_t *e = rf_ckpt_find(ck, t->name);
    return e != NULL ? e->dtype : RF_DTYPE_INVALID;
}

static const void *expect_slot(void *ctx, int module, int slot)
{
    (void)module;
    return ((expect_t *)ctx)->slots[slot];
}

/* Rollout: module m's model-layout params from its registered runtime tensors descs[i0 ..]
 * (ns of them), through the format owner's inverse as the oracle reads them (rf_plan_read_model:
 * a copy where the owner's post-processing is the identity, runtime_to_model otherwise, e.g.
 * wna16's tile repack of dense linears). out[k] allocated. */
static void runtime_to_model(sess_t *x, int i0, int m, const rf_slot_shape_t *sh, int ns,
                             void **out)
{
    rf_format_t f = {.ops = rf_format_for(topo.quantization, (int)topo.r_backend),
                     .quant = topo.quantization,
                     .backend = (int)topo.r_backend};
    rf_slot_t rt[RF_MODULE_MAX_SLOTS];
    rf_slot_t *rtp[RF_MODULE_MAX_SLOTS];
    ck_assert_ptr_nonnull(f.ops);
    for (int k = 0; k < ns; k++) {
        const rf_tensor_desc_t *d = &x->descs[i0 + k];
        out[k] = malloc(rf_slot_shape_bytes(&sh[k]) + 1);
        memset(&rt[k], 0, sizeof(rt[k]));
        snprintf(rt[k].name, sizeof(rt[k].name), "%s", d->name);
        rt[k].module = m;
        rt[k].index = k;
        rt[k].sig.ndim = d->ndim;
        rt[k].sig.dtype = rf_dtype_parse(d->dtype);
        rt[k].sig.device = -1;
        for (int a = 0; a < d->ndim; a++) {
            rt[k].sig.shape[a] = d->shape[a];
            rt[k].sig.stride[a] = d->strides[a];
        }
        rt[k].sig.data = x->buf[i0 + k]; /* the host copy (gpu: pulled) */
        rt[k].sig.storage_base = x->buf[i0 + k];
        rt[k].sig.storage_bytes = x->bytes[i0 + k];
        rtp[k] = &rt[k];
    }
    if (f.ops->identity != NULL && f.ops->identity(&f, &inv, m)) {
        for (int k = 0; k < ns; k++)
            memcpy(out[k], x->buf[i0 + k], x->bytes[i0 + k]);
        return;
    }
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_ptr_nonnull(f.ops->runtime_to_model);
    ck_assert_msg(f.ops->runtime_to_model(&f, &inv, m, sh, out, ns, rtp, ns, &err) == RF_OK, "%s",
                  err.msg);
}

/* fp8-tensor: the expected per-tensor scales of module m's linears (fetched by the oracle)
 * are not all equal. */
static bool scales_differ(expect_t *c, int m)
{
    float first = -1.0f;
    for (int k = 0; k < inv.modules[m].ntensors; k++) {
        int t = inv.modules[m].tensors[k];
        if (inv.tensors[t].param != RF_PARAM_TENSOR_SCALE)
            continue;
        const float *sc = expect_bytes(c, t);
        if (first >= 0.0f && sc[0] != first)
            return true;
        first = sc[0];
    }
    return false;
}

/* Rollout: the oracle over every registered engine tensor read back in model layout; the
 * mismatches' count, the first error's text in bad. */
static uint64_t rollout_mismatches(sess_t *x, uint64_t step, char *bad, size_t cap)
{
    dev_sync(x, false);
    expect_t c = {.step = step};
    uint64_t nbad = 0;
    int i = 0, dequant = 0, moe = 0, fused_requant = 0;
    rf_format_t f = {.ops = rf_format_for(topo.quantization, (int)topo.r_backend),
                     .quant = topo.quantization,
                     .backend = (int)topo.r_backend};
    /* fp8-tensor's fused modules: the checkpoint requantized to the max shard scale, as vLLM's
     * requantize_with_max_scale does (runtime/job_oracle.c sets the same flag) */
    rf_verify_opts_t vo = {topo.quantization == RF_QUANT_FP8_TENSOR ? RF_VERIFY_FP8_REQUANT_MAX
                                                                     : 0u,
                           expect_dtype};
    bad[0] = '\0';
    c.buf = calloc((size_t)inv.ntensors + 1, sizeof(char *));
    c.dt = malloc(((size_t)inv.ntensors + 1) * sizeof(rf_dtype_t));
    for (int t = 0; t < inv.ntensors; t++)
        c.dt[t] = RF_DTYPE_INVALID;
    for (int m = 0; m < inv.nmodules; m++) {
        rf_slot_shape_t sh[RF_MODULE_MAX_SLOTS], rt[RF_MODULE_MAX_SLOTS];
        bool derived[RF_MODULE_MAX_SLOTS];
        void *slots[RF_MODULE_MAX_SLOTS];
        int ns, nrt;
        rf_err_t err;
        rf_err_clear(&err);
        ck_assert_msg(rf_module_slots(&inv, m, &me.rc, sh, &ns, &err) == RF_OK, "%s", err.msg);
        ck_assert_msg(f.ops->runtime_slots(&f, &inv, m, sh, ns, rt, derived, &nrt, &err) == RF_OK,
                      "%s", err.msg);
        ck_assert_int_eq(nrt, ns); /* one runtime tensor per param here */
        for (int k = 0; k < ns; k++, i++) {
            char name[RF_NAME_MAX + 40];
            snprintf(name, sizeof(name), "%.159s.%.31s", inv.modules[m].name, rt[k].name);
            ck_assert_int_lt(i, x->n);
            ck_assert_str_eq(name, x->descs[i].name);
            ck_assert_uint_eq(x->bytes[i], rf_slot_shape_bytes(&rt[k]));
        }
        runtime_to_model(x, i - ns, m, sh, ns, slots);
        for (int k = 0; k < ns; k++) {
            uint64_t mism = 0;
            rf_err_clear(&err);
            rf_status_t st = rf_verify_slot_ex(&inv, m, k, &me.rc, slots[k],
                                               rf_slot_shape_bytes(&sh[k]), expect_bytes, &c,
                                               &vo, &mism, &err);
            if (st != RF_OK && nbad == 0)
                snprintf(bad, cap, "%s", err.msg);
            nbad += st != RF_OK ? (mism ? mism : 1) : 0;
        }
        if (inv.modules[m].quant != RF_QUANT_NONE) {
            uint64_t mism = 0;
            rf_err_t err2;
            rf_err_clear(&err2);
            c.slots = slots;
            rf_status_t st = rf_verify_dequant_module(&inv, m, &me.rc, expect_slot, expect_bytes,
                                                      &c, &vo, &mism, &err2);
            if (st != RF_OK && nbad == 0)
                snprintf(bad, cap, "%s", err2.msg);
            nbad += st != RF_OK ? (mism ? mism : 1) : 0;
            dequant++;
            moe += inv.modules[m].kind == RF_MOD_MOE;
            fused_requant += topo.quantization == RF_QUANT_FP8_TENSOR &&
                             inv.modules[m].nlinears > 1 && scales_differ(&c, m);
        }
        for (int t = 0; t < inv.ntensors; t++) {
            free(c.buf[t]);
            c.buf[t] = NULL;
            c.dt[t] = RF_DTYPE_INVALID;
        }
        for (int k = 0; k < ns; k++)
            free(slots[k]);
    }
    free(c.buf);
    free(c.dt);
    ck_assert_int_eq(i, x->n);
    ck_assert_int_gt(dequant, 0);
    /* a mixture-of-experts model: its quantized experts (w13 / w2) were checked here too */
    ck_assert(cfg.num_experts == 0 || moe == inv.cfg.num_hidden_layers);
    /* fp8-tensor: fused modules whose shards' scales differ, which the engine requantized */
    ck_assert(topo.quantization != RF_QUANT_FP8_TENSOR || topo.r_layout == RF_ROLLOUT_LAYOUT_HF ||
              fused_requant > 0);
    return nbad;
}

static uint64_t rollout_hash(const sess_t *x)
{
    uint64_t h = 0;
    if (me.role == RF_ROLE_ROLLOUT)
        dev_sync(x, false);
    for (int i = 0; me.role == RF_ROLE_ROLLOUT && i < x->n; i++)
        h ^= rf_hash64(x->buf[i], x->bytes[i]) + (uint64_t)i * 0x9e3779b97f4a7c15ull;
    return h;
}

static void same_text_everywhere(const char *text, const char *needle)
{
    uint64_t h = rf_hash64_str(text), lo, hi;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(lo == hi, "rank %d: the ranks' texts differ; mine: %s", rank, text);
    ck_assert_msg(strstr(text, needle) != NULL, "'%s' does not name '%s'", text, needle);
}

/* ok asserted on every rank (collective): a failed ck_assert on one rank alone would leave
 * the others waiting in its next collective. The text names the lowest failing rank and is
 * that rank's own (mine). */
static void check_everywhere(bool ok, const char *mine)
{
    int me_bad = ok ? size : rank, first = size;
    char text[512];
    MPI_Allreduce(&me_bad, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == size)
        return;
    snprintf(text, sizeof(text), "%s", rank == first && mine != NULL ? mine : "");
    MPI_Bcast(text, (int)sizeof(text), MPI_CHAR, first, MPI_COMM_WORLD);
    if (rank == first) /* now: check's own report waits for the suite's end */
        fprintf(stderr, "rank %d: %s\n", first, text);
    ck_abort_msg("rank %d: %s", first, text);
}

static void check_committed(sess_t *x, const rf_session_result_t *r, uint64_t version)
{
    char bad[512];
    if (!r->committed) /* now: check's own report waits for the suite's end */
        fprintf(stderr, "rank %d: update %llu FAILED: %s\n", rank, (unsigned long long)version,
                r->reason);
    char msg[1024];
    snprintf(msg, sizeof(msg), "update %llu FAILED: %s", (unsigned long long)version, r->reason);
    check_everywhere(r->committed, msg);
    snprintf(msg, sizeof(msg), "update %llu committed as version %llu",
             (unsigned long long)version, (unsigned long long)r->version);
    check_everywhere(r->version == version, msg);
    bad[0] = '\0';
    uint64_t nbad = me.role == RF_ROLE_ROLLOUT ? rollout_mismatches(x, version, bad, sizeof(bad))
                                               : 0;
    if (nbad != 0)
        fprintf(stderr, "rank %d: %llu elements wrong after update %llu; first: %s\n", rank,
                (unsigned long long)nbad, (unsigned long long)version, bad);
    snprintf(msg, sizeof(msg), "%llu elements wrong after update %llu; first: %s",
             (unsigned long long)nbad, (unsigned long long)version, bad);
    check_everywhere(nbad == 0, msg);
}

/* What each rank is asked for: trainers the unquantized weights (no scale), rollout ranks the
 * quantized runtime tensors. */
static void check_expected(const sess_t *x)
{
    int quantized = 0;
    for (int i = 0; i < x->n; i++) {
        const rf_tensor_desc_t *d = &x->descs[i];
        rf_dtype_t dt = rf_dtype_parse(d->dtype);
        if (me.role == RF_ROLE_TRAINER) {
            ck_assert_msg(dt == inv.cfg.dtype, "%s: %s", d->name, d->dtype);
            ck_assert_ptr_null(strstr(d->name, "scale"));
            ck_assert_ptr_null(strstr(d->name, "weight_packed"));
            quantized += primary_of(d->name, (char[RF_NAME_MAX]){0}, RF_NAME_MAX) >= 0;
        } else {
            quantized += dt == RF_DTYPE_F8_E4M3 || dt == RF_DTYPE_I32;
        }
    }
    ck_assert_int_gt(quantized, 0);
}

/* A trainer with CUDA tensors (trainer_emu) quantized into device buffers, and its packs read
 * them (and the registered tensors) through device-to-host copies; on colocated ipc some pieces
 * were staged (the quantized ones) and some read in place. Collective. */
static void check_device_path(const sess_t *x)
{
    const rf_session_t *s = x->s;
    int ok = 1;
    if (me.role == RF_ROLE_TRAINER && trainer_emu) {
        ok &= s->accel != NULL && s->accel->ops->mem_type != RF_MEM_HOST;
        ok &= s->q_arena == NULL || s->q_dev; /* a rank with quantized shards: on the device */
        ok &= s->tr.dev == s->accel;
    }
    int any_q = me.role == RF_ROLE_TRAINER && s->q_arena != NULL, all_q = 0;
    MPI_Allreduce(&any_q, &all_q, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ok &= all_q > 0;
    if (topo.transport == RF_TRANSPORT_IPC && me.role == RF_ROLE_ROLLOUT) {
        uint64_t staged = 0, inplace = 0;
        for (size_t k = 0; k < s->cplan->n_pieces; k++) {
            const rf_chunk_piece_t *pc = &s->cplan->pieces[k];
            const rf_tensor_t *t = &inv.tensors[s->man.entries[pc->item].tensor];
            bool q = rf_session_quant_refit_owns(s, t);
            if (!s->ipc_pieces[k].staged && s->ipc_pieces[k].row_hi == s->ipc_pieces[k].row_lo)
                continue; /* nothing of it read here */
            staged += s->ipc_pieces[k].staged;
            inplace += !s->ipc_pieces[k].staged;
            ok &= !q || s->ipc_pieces[k].staged; /* refit's buffers are not shared */
        }
        ok &= staged > 0 && inplace > 0;
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ck_assert_msg(all == 1, "rank %d: the device trainer's path is not the one expected", rank);
}

/* Updates at two steps: the engine's bytes are the oracle's every time. */
START_TEST(test_quant_updates)
{
    sess_t x;
    rf_session_result_t r;
    rf_session_plan_info_t pi;
    sess_open_as(&x, false);
    check_expected(&x);
    trainer_fill(&x, 1);
    ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, &pi) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(pi.tensors, inv.ntensors);
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    check_committed(&x, &r, 1);
    check_device_path(&x);
    trainer_fill(&x, 7);
    ck_assert_int_eq(rf_session_update(x.s, 7, &r), RF_OK);
    check_committed(&x, &r, 7);
    /* a non-finite weight: FAILED on every rank naming it, the engine's bytes unchanged */
    uint64_t h7 = rollout_hash(&x);
    const char *nan_name = NULL;
    for (int i = 0; i < x.n && nan_name == NULL; i++)
        if (primary_of(x.descs[i].name, (char[RF_NAME_MAX]){0}, RF_NAME_MAX) >= 0)
            nan_name = x.descs[i].name;
    check_everywhere(me.role != RF_ROLE_TRAINER || nan_name != NULL, "no quantized weight");
    trainer_fill(&x, 8);
    if (me.role == RF_ROLE_TRAINER && rank == 0) {
        for (int i = 0; i < x.n; i++)
            if (x.descs[i].name == nan_name)
                ((uint16_t *)x.buf[i])[3] = 0x7fc0; /* bf16 NaN */
        dev_sync(&x, true);
        /* its production held back (runtime/session.c run_finish): without the production
         * agreement the other trainer's chunks would reach the engine first, every time */
        setenv("REFIT_TEST_SESSION_BEFORE_PRODUCE", "stall:0.3", 1);
    }
    rf_status_t ust = rf_session_update(x.s, 8, &r);
    unsetenv("REFIT_TEST_SESSION_BEFORE_PRODUCE");
    char msg[1024];
    snprintf(msg, sizeof(msg), "rf_session_update: %s", rf_session_last_error(x.s));
    check_everywhere(ust == RF_OK, msg);
    check_everywhere(!r.committed, "the update with a NaN weight committed");
    same_text_everywhere(r.reason, "must be finite");
    snprintf(msg, sizeof(msg), "the verdict names rank %d, not trainer rank 0", r.failed_rank);
    check_everywhere(r.failed_rank == 0, msg);
    /* agreed before the first chunk: nothing sent, nothing received, nothing applied */
    snprintf(msg, sizeof(msg), "%llu chunk(s) sent, %llu received by a FAILED production",
             (unsigned long long)r.chunks_sent, (unsigned long long)r.chunks_received);
    check_everywhere(r.chunks_sent == 0 && r.chunks_received == 0, msg);
    check_everywhere(rollout_hash(&x) == h7, "the engine's bytes changed by a FAILED update");
    /* and the next one commits */
    trainer_fill(&x, 9);
    ck_assert_int_eq(rf_session_update(x.s, 9, &r), RF_OK);
    check_committed(&x, &r, 9);
    sess_close(&x);
}
END_TEST

/* --checkpoint DIR: the trainers register a quantized model's checkpoint (its quantized
 * linears stored quantized, or unquantized in the model dtype: quantized on the trainer); the
 * engine's bytes are the oracle's from the same file after each update. */
START_TEST(test_quant_checkpoint)
{
    sess_t x;
    rf_session_result_t r;
    sess_open_as(&x, false);
    if (me.role == RF_ROLE_TRAINER)
        ck_assert_msg(rf_session_register_checkpoint(x.s, ck_dir) == RF_OK, "%s",
                      rf_session_last_error(x.s));
    else
        ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                      rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, NULL) == RF_OK, "%s", rf_session_last_error(x.s));
    for (uint64_t v = 1; v <= 2; v++) {
        ck_assert_int_eq(rf_session_update(x.s, v, &r), RF_OK);
        check_committed(&x, &r, v);
    }
    sess_close(&x);
}
END_TEST

/* F32 masters: rounded to nearest even to the bf16 checkpoint tensor, then quantized. */
START_TEST(test_quant_masters)
{
    sess_t x;
    rf_session_result_t r;
    sess_open_as(&x, true);
    trainer_fill(&x, 3);
    ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, NULL) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(rf_session_update(x.s, 3, &r), RF_OK);
    check_committed(&x, &r, 3);
    sess_close(&x);
}
END_TEST

/* Wrong quantized registrations are refused at register, naming the tensor; the plan then
 * carries rank 0's refusal everywhere; nothing reaches the engine's tensors. */
START_TEST(test_quant_bad)
{
    sess_t x;
    rf_tensor_desc_t d;
    sess_open_as(&x, false);
    uint64_t h0 = rollout_hash(&x);
    for (int i = 0; i < x.n; i++) {
        rf_dtype_t dt = rf_dtype_parse(x.descs[i].dtype);
        const char *nm = x.descs[i].name;
        if (me.role == RF_ROLE_ROLLOUT && (dt == RF_DTYPE_F8_E4M3 || dt == RF_DTYPE_I32)) {
            /* the engine's quantized weight in the model dtype: refused naming it */
            d = x.descs[i];
            d.dtype = "BF16";
            ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), nm));
            d = x.descs[i];
            d.dtype = dt == RF_DTYPE_I32 ? "U8" : "I32";
            ck_assert_int_ne(rf_session_register(x.s, &d, 1), RF_OK);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), nm));
        }
        if (me.role == RF_ROLE_ROLLOUT && strstr(nm, "scale") != NULL) {
            d = x.descs[i];
            d.shape[d.ndim - 1] += 1; /* a scale of another shape */
            ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), nm));
        }
        char prefix[RF_NAME_MAX];
        int qi = me.role == RF_ROLE_TRAINER ? primary_of(nm, prefix, sizeof(prefix)) : -1;
        if (qi >= 0) {
            /* the quantized tensor itself, where the unquantized weight is expected */
            const rf_tensor_t *qt = &inv.tensors[qi];
            d = x.descs[i];
            d.name = qt->name;
            d.dtype = rf_dtype_name(qt->dtype);
            if (inv.modules[qt->module].quant == RF_QUANT_WNA16)
                d.shape[1] /= 8; /* packed int32 words of 8 int4 */
            ck_assert_int_ne(rf_session_register(x.s, &d, 1), RF_OK);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), qt->name));
            /* a scale: refit makes it */
            char sname[RF_NAME_MAX + 32];
            snprintf(sname, sizeof(sname), "%s.weight_scale%s", prefix,
                     inv.modules[qt->module].quant == RF_QUANT_FP8_BLOCK ? "_inv" : "");
            d = x.descs[i];
            d.name = sname;
            ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_EXTRA);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), sname));
            /* an F16 master of a BF16 weight */
            d = x.descs[i];
            d.dtype = "F16";
            ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), nm));
        }
    }
    /* a checkpoint directory without tensors: refused, naming it (nothing registered) */
    if (me.role == RF_ROLE_TRAINER) {
        ck_assert_int_ne(rf_session_register_checkpoint(x.s, "tests/data/llama-q128"), RF_OK);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "tests/data/llama-q128"));
    }
    /* the plan fails everywhere with rank 0's first refusal (remembered: nothing accepted
     * since); then everything right registers (forgetting it) and plans */
    ck_assert_int_ne(rf_session_plan(x.s, NULL), RF_OK);
    same_text_everywhere(rf_session_last_error(x.s), "rank 0 (trainer)");
    ck_assert_uint_eq(rollout_hash(&x), h0);
    ck_assert_int_eq(rf_session_register(x.s, x.descs, x.n), RF_OK);
    ck_assert_msg(rf_session_plan(x.s, NULL) == RF_OK, "%s", rf_session_last_error(x.s));
    sess_close(&x);
}
END_TEST

/* A topology the session API refuses: the same text on every rank, naming why (a session API
 * limit: RF_ERR_UNSUPPORTED; one the loader refuses for refit-run too: the loader's status). */
START_TEST(test_quant_refused)
{
    rf_session_t *s = NULL;
    ck_assert_int_eq(rf_session_create(MPI_COMM_WORLD, topo_path, NULL, &s),
                     load_status != RF_OK ? load_status : RF_ERR_UNSUPPORTED);
    ck_assert_ptr_null(s);
    same_text_everywhere(rf_session_last_error(NULL), refused);
}
END_TEST

int main(int argc, char **argv)
{
    rf_err_t err;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2 || (argc > 2 && (argc != 4 || (strcmp(argv[2], "--refused") != 0 &&
                                                strcmp(argv[2], "--checkpoint") != 0)))) {
        if (rank == 0)
            fprintf(stderr, "usage: check_session_quant TOPOLOGY.yaml [--refused TEXT | "
                            "--checkpoint DIR]\n");
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    topo_path = argv[1];
    const char *emu = getenv("REFIT_TEST_DEVICE_ACCEL");
    device_emu = emu != NULL && (strcmp(emu, "host-device") == 0 ||
                                 strcmp(emu, "host-device-all") == 0);
    trainer_emu = emu != NULL && (strcmp(emu, "host-device-trainer") == 0 ||
                                  strcmp(emu, "host-device-all") == 0);
    refused = argc == 4 && strcmp(argv[2], "--refused") == 0 ? argv[3] : NULL;
    ck_dir = argc == 4 && strcmp(argv[2], "--checkpoint") == 0 ? argv[3] : NULL;
    rf_err_clear(&err);
    rf_status_t ls = rf_model_load_topology(topo_path, MPI_COMM_WORLD, &topo, &cfg, &err);
    if (ls == RF_OK)
        ls = rf_inventory_build(&cfg, topo.quantization, topo.group_size, &inv, &err);
    if (ls == RF_OK)
        ls = rf_inventory_apply_layout(&inv, topo.r_layout, &err);
    if (ls == RF_OK)
        ls = rf_topology_rank_info(&topo, rank, &me);
    /* --refused: a topology the loader refuses (rollout.layout hf with wna16 experts) needs no
     * inventory here; rf_session_create must refuse it, on every rank, naming why */
    load_status = ls;
    /* tests/gpu: trainer.gpus / rollout.gpus name GPU 0, the ranks' tensors live there */
    if (ls == RF_OK && (topo.t_ngpus > 0 || topo.r_ngpus > 0) &&
        rf_accel_open("cuda", 0, &gpu) != RF_OK) {
        fprintf(stderr, "rank %d: %s names GPUs, but CUDA device 0 cannot be opened\n", rank,
                topo_path);
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    /* colocated ipc under host-device: every rank's tensors are CUDA tensors of device 0 */
    ipc_emu = ls == RF_OK && topo.transport == RF_TRANSPORT_IPC && device_emu;
    trainer_emu = trainer_emu || ipc_emu || (ls == RF_OK && topo.t_ngpus > 0);
    if (ls != RF_OK && refused == NULL) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("session_quant");
    TCase *tc = tcase_create("session_quant");
    tcase_set_timeout(tc, 120);
    if (ck_dir != NULL && rf_ckpt_open(ck_dir, &ck, &err) != RF_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    if (refused != NULL) {
        tcase_add_test(tc, test_quant_refused);
    } else if (ck_dir != NULL) {
        tcase_add_test(tc, test_quant_checkpoint);
    } else {
        tcase_add_test(tc, test_quant_updates);
        tcase_add_test(tc, test_quant_masters);
        tcase_add_test(tc, test_quant_bad);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    rf_accel_close(gpu);
    if (ck != NULL)
        rf_ckpt_close(ck);
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
