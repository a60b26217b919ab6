/* MPI test: the session API (include/refit/session.h) on the tests/data llama-tiny fixture, under
 * the topology given as argv[1] (2 ranks TP 1 -> TP 1, 4 ranks TP 2 -> TP 2, broadcast and p2p;
 * trainer.layout fsdp over 2 and 3 ranks, and qwen3-moe-tiny with an empty shard). Trainer ranks
 * register their shards filled from the generator at update v's step; rollout ranks register their
 * engine tensors (filled with a sentinel), and after a COMMITTED update every element must be what
 * the oracle's scalar locator (runtime/verify.c) says the loaders put there: the generator's value
 * of the checkpoint element it maps to, or zero padding. Bad inputs must be refused naming the
 * tensor, a collective failure carry the same text to every rank, and failed updates leave the
 * engine's tensors untouched. Trainers holding F32 masters instead: the engine gets each value
 * rounded to nearest even (the masters are built so that truncation, or rounding ties away from
 * zero, would differ). CK_FORK=no. */
#include <check.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "refit/generator.h"
#include "refit/hashes.h"
#include "refit/model.h"
#include "refit/refit.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/verify.h"

#define SENTINEL 0xa5

static const char *topo_path;
static int rank, size;
/* the test's own view of the job, for the reference values */
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
} sess_t;

static void sess_open_as(sess_t *x, bool masters)
{
    memset(x, 0, sizeof(*x));
    rf_status_t st = rf_session_create(MPI_COMM_WORLD, topo_path, NULL, &x->s);
    ck_assert_msg(st == RF_OK, "rf_session_create: %s", rf_session_last_error(NULL));
    ck_assert_str_eq(rf_session_role_name(x->s), me.role == RF_ROLE_ROLLOUT ? "rollout"
                                                                             : "trainer");
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
            d->dtype = "torch.float32"; /* an fp32 master of the bf16 tensor */
        x->bytes[i] = numel * rf_dtype_size(rf_dtype_parse(d->dtype));
        x->buf[i] = malloc(x->bytes[i] + 1);
        memset(x->buf[i], SENTINEL, x->bytes[i]);
        d->data = x->buf[i];
        d->device = -1;
    }
}

static void sess_open(sess_t *x)
{
    sess_open_as(x, false);
}

static void sess_close(sess_t *x)
{
    rf_session_destroy(x->s);
    for (int i = 0; i < x->n; i++)
        free(x->buf[i]);
    free(x->buf);
    free(x->bytes);
    free(x->descs);
}

/* An F32 whose nearest-even BF16 is b, picked by k: exact, just below half, a tie (b even:
 * from above, so ties away from zero would give b + 1), or just above half from b - 1 (so
 * truncation would give b - 1). */
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

/* Trainer: a descriptor of tensor t with 0 rows and t's other dims (no data). */
static rf_tensor_desc_t empty_desc(const rf_tensor_t *t)
{
    rf_tensor_desc_t d = {.name = t->name, .dtype = "BF16", .ndim = t->ndim, .device = -1};
    for (int k = 0; k < t->ndim; k++)
        d.shape[k] = k ? t->shape[k] : 0;
    for (int k = t->ndim - 1; k >= 0; k--)
        d.strides[k] = k == t->ndim - 1 ? 1 : d.strides[k + 1] * d.shape[k + 1];
    return d;
}

/* Trainer: whether this rank's shard of tensor t of its own stage is empty (fsdp). */
static bool empty_here(const rf_tensor_t *t)
{
    rf_region_t reg;
    return me.role == RF_ROLE_TRAINER && t->ndim >= 2 &&
           rf_topology_layer_stage(&topo, t->layer, inv.cfg.num_hidden_layers) == me.p &&
           !rf_trainer_shard(&topo, &inv, t, &me, &reg);
}

/* Trainer: every registered shard from the generator at `step`, at its global indices. */
static void trainer_fill(sess_t *x, uint64_t step)
{
    for (int i = 0; i < x->n; i++) {
        int ti = rf_inventory_find(&inv, x->descs[i].name);
        ck_assert_int_ge(ti, 0);
        const rf_tensor_t *t = &inv.tensors[ti];
        rf_region_t reg;
        ck_assert(rf_trainer_shard(&topo, &inv, t, &me, &reg));
        uint64_t cols = t->numel / rf_tensor_rows(t), h = rf_gen_name_hash(t->name);
        uint16_t *b = (uint16_t *)x->descs[i].data;
        uint32_t *f = (uint32_t *)x->descs[i].data;
        bool master = rf_dtype_parse(x->descs[i].dtype) == RF_DTYPE_F32;
        int64_t w = reg.c1 - reg.c0;
        for (int64_t r = 0; r < reg.r1 - reg.r0; r++)
            for (int64_t c = 0; c < w; c++) {
                uint64_t k = (uint64_t)(reg.r0 + r) * cols + (uint64_t)(reg.c0 + c);
                uint16_t v = (uint16_t)rf_gen_value_bits(h, k, step, RF_DTYPE_BF16);
                if (master)
                    f[r * w + c] = master_of(v, k);
                else
                    b[r * w + c] = v;
            }
    }
}

/* Rollout: elements of the registered tensors that differ from the loaders' result for the
 * generator at `step` (the oracle's locator); the first one's tensor in bad. */
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
            char name[RF_NAME_MAX + 40];
            snprintf(name, sizeof(name), "%.159s.%.31s", inv.modules[m].name, sh[k].name);
            ck_assert_int_lt(i, x->n);
            ck_assert_str_eq(name, x->descs[i].name);
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
                    snprintf(bad, cap, "%s element %llu: %04x, expected %04x", name,
                             (unsigned long long)e, b[e], want);
            }
            rf_ref_locator_destroy(l);
        }
    }
    ck_assert_int_eq(i, x->n);
    return nbad;
}

/* Rollout: XXH3 over every registered tensor's bytes (0 on trainers). */
static uint64_t rollout_hash(const sess_t *x)
{
    uint64_t h = 0;
    for (int i = 0; me.role == RF_ROLE_ROLLOUT && i < x->n; i++)
        h ^= rf_hash64(x->buf[i], x->bytes[i]) + (uint64_t)i * 0x9e3779b97f4a7c15ull;
    return h;
}

/* Every rank holds the same text (hash compared) and it contains `needle`. */
static void same_text_everywhere(const char *text, const char *needle)
{
    uint64_t h = rf_hash64_str(text), lo, hi;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(lo == hi, "rank %d: the ranks' texts differ; mine: %s", rank, text);
    ck_assert_msg(strstr(text, needle) != NULL, "'%s' does not name '%s'", text, needle);
}

static void same_int_everywhere(int v)
{
    int lo, hi;
    MPI_Allreduce(&v, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    ck_assert_msg(lo == hi, "rank %d: %d differs across ranks (%d .. %d)", rank, v, lo, hi);
}

/* A check every rank makes together (collective: every rank calls it at the same point): a
 * check that fails on one rank fails on all. Under CK_NOFORK a failed ck_assert leaves the test
 * function on that rank only, and the others would run on into the session's next collective
 * and wait for it there (to the ctest timeout, not a failed assert). */
static void all_ok(int ok, const char *what)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ck_assert_msg(all, "rank %d: %s: %s", rank, what, ok ? "failed on another rank" : "failed");
}

static void check_committed(sess_t *x, const rf_session_result_t *r, uint64_t version)
{
    char bad[256], what[RF_ERR_MSG_MAX + 300];
    snprintf(what, sizeof(what), "update %llu FAILED: %s", (unsigned long long)version, r->reason);
    all_ok(r->committed, what);
    all_ok(r->version == version && rf_session_version(x->s) == version, "the version");
    uint64_t nbad = me.role == RF_ROLE_ROLLOUT ? rollout_mismatches(x, version, bad, sizeof(bad))
                                               : 0;
    snprintf(what, sizeof(what), "%llu elements wrong after update %llu; first: %s",
             (unsigned long long)nbad, (unsigned long long)version, nbad ? bad : "");
    all_ok(nbad == 0, what);
}

/* Two updates move exactly the trainer's bytes into the engine's tensors; the plan's counts
 * and hash are the same everywhere. */
START_TEST(test_update_bytes)
{
    sess_t x;
    rf_session_plan_info_t pi;
    rf_session_result_t r;
    sess_open(&x);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    /* a tensor of this stage whose shard is empty here (fsdp's last ranks of a small one, as
     * torch.chunk leaves them): registered with 0 rows it is accepted and ignored */
    int empty = 0, empties;
    for (int ti = 0; ti < inv.ntensors; ti++) {
        if (!empty_here(&inv.tensors[ti]))
            continue;
        rf_tensor_desc_t d = empty_desc(&inv.tensors[ti]);
        ck_assert_msg(rf_session_register(x.s, &d, 1) == RF_OK, "%s", rf_session_last_error(x.s));
        empty++;
    }
    MPI_Allreduce(&empty, &empties, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (topo.t_layout == RF_TRAINER_LAYOUT_FSDP && inv.cfg.num_experts == 4)
        ck_assert_int_eq(empties, 2); /* both layers' routers on trainer rank 2 */
    ck_assert_msg(rf_session_plan(x.s, &pi) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_uint_eq(pi.layers[0] + pi.layers[1] + pi.layers[2],
                      (uint64_t)inv.nmodules * (uint64_t)rf_topology_rollout_size(&topo));
    ck_assert_uint_eq(pi.layers[0], (uint64_t)inv.nmodules * rf_topology_rollout_size(&topo));
    ck_assert_int_eq(pi.tensors, inv.ntensors);
    same_int_everywhere((int)(pi.hash & 0x7fffffff));
    same_int_everywhere((int)(pi.hash >> 33));
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    check_committed(&x, &r, 1);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 7);
    ck_assert_int_eq(rf_session_update(x.s, 7, &r), RF_OK);
    check_committed(&x, &r, 7);
    ck_assert_uint_eq(r.rebuilds, 0);
    if (me.role == RF_ROLE_ROLLOUT)
        ck_assert_uint_gt(r.bytes_received, 0);
    sess_close(&x);
}
END_TEST

/* Register-time errors name the tensor and leave the session usable; the plan carries the
 * lowest rank's first error to every rank; nothing is written into the engine's tensors. */
START_TEST(test_bad_inputs)
{
    sess_t x;
    rf_session_result_t r;
    rf_tensor_desc_t d;
    sess_open(&x);
    uint64_t h0 = rollout_hash(&x);
    const char *first = x.descs[0].name, *last = x.descs[x.n - 1].name;
    ck_assert_int_eq(rf_session_register(NULL, x.descs, 1), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_register(x.s, NULL, 1), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_register(x.s, x.descs, -1), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_plan(NULL, NULL), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_update(x.s, 0, NULL), RF_ERR_INVALID);
    /* wrong shape, dtype, strides, device, name, NULL data */
    d = x.descs[0];
    d.shape[0] += 1;
    ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "shape"));
    d = x.descs[0];
    d.dtype = "torch.float64"; /* wider, but no master: only F32 for BF16 / F16 */
    ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "F64"));
    d = x.descs[0];
    d.dtype = "torch.float16";
    ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
    if (me.role == RF_ROLE_ROLLOUT) { /* the engine's tensors hold the model dtype only */
        d = x.descs[0];
        d.dtype = "torch.float32";
        ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "F32"));
    }
    d = x.descs[0];
    d.dtype = "bfloat17";
    ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
    for (int i = 0; i < x.n; i++) /* a 2-D tensor stored column-major */
        if (x.descs[i].ndim == 2 && x.descs[i].shape[0] > 1 && x.descs[i].shape[1] > 1) {
            d = x.descs[i];
            d.strides[0] = 1;
            d.strides[1] = d.shape[0];
            ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_INVALID);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), d.name));
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "contiguous"));
            break;
        }
    d = x.descs[0];
    d.device = 0;
    ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
    d = x.descs[0];
    d.name = "model.layers.0.self_attn.bogus.weight";
    ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_EXTRA);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), d.name));
    d = x.descs[0];
    d.data = NULL;
    ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), first));
    for (int ti = 0; ti < inv.ntensors; ti++) /* an empty shard with another dim: no tensor */
        if (empty_here(&inv.tensors[ti])) {
            d = empty_desc(&inv.tensors[ti]);
            d.shape[1] += 1;
            ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_EXTRA);
            ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), d.name));
        }
    /* update before plan: refused on every rank, nothing communicated */
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_ERR_STATE);
    /* the refusals, remembered until an accepted call: the plan fails everywhere with rank
     * 0's first */
    rf_status_t st = rf_session_plan(x.s, NULL);
    ck_assert_int_eq(st, RF_ERR_INVALID);
    same_text_everywhere(rf_session_last_error(x.s), "rank 0 (trainer)");
    same_text_everywhere(rf_session_last_error(x.s), "NULL descs");
    /* reported and forgotten; all but the last registered: the missing tensor fails it */
    ck_assert_int_eq(rf_session_register(x.s, x.descs, x.n - 1), RF_OK);
    st = rf_session_plan(x.s, NULL);
    ck_assert_int_eq(st, RF_ERR_MISSING);
    same_text_everywhere(rf_session_last_error(x.s), "not registered");
    char want[300];
    snprintf(want, sizeof(want), "%s not registered", rank == 0 ? last : "");
    if (rank == 0)
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), want));
    /* a duplicate is refused, and fails the next plan */
    ck_assert_int_eq(rf_session_register(x.s, &x.descs[x.n - 1], 1), RF_OK);
    ck_assert_int_eq(rf_session_register(x.s, &x.descs[0], 1), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "registered twice"));
    ck_assert_int_eq(rf_session_plan(x.s, NULL), RF_ERR_INVALID);
    same_text_everywhere(rf_session_last_error(x.s), "registered twice");
    /* the session stayed usable */
    ck_assert_msg(rf_session_plan(x.s, NULL) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(rf_session_plan(x.s, NULL), RF_ERR_STATE);
    ck_assert_uint_eq(rollout_hash(&x), h0); /* every refusal wrote nothing */
    for (int i = 0; i < x.n && me.role == RF_ROLE_ROLLOUT; i++)
        for (size_t b = 0; b < x.bytes[i]; b++)
            ck_assert_int_eq(((unsigned char *)x.buf[i])[b], SENTINEL);
    /* after the plan: an unknown name is still refused, naming it */
    d = x.descs[0];
    d.name = "lm_head.bias";
    ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_EXTRA);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "lm_head.bias"));
    /* ... which fails the next update on every rank, before anything moves */
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    ck_assert(!r.committed);
    same_int_everywhere(r.committed);
    same_text_everywhere(r.reason, "lm_head.bias");
    ck_assert_uint_eq(rollout_hash(&x), h0);
    sess_close(&x);
}
END_TEST

/* A register call is all or nothing: 3 descriptors with the middle one bad register none
 * (the error names it); an accepted call after it forgets the refusal (the plan names what is
 * still missing); the same 3 corrected register, and the plan and an update commit. */
START_TEST(test_register_all_or_nothing)
{
    sess_t x;
    rf_session_result_t r;
    sess_open(&x);
    ck_assert_int_ge(x.n, 4);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    int k0 = x.n - 3;
    rf_tensor_desc_t three[3] = {x.descs[k0], x.descs[k0 + 1], x.descs[k0 + 2]};
    three[1].shape[0] += 1;
    ck_assert_int_eq(rf_session_register(x.s, three, 3), RF_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), three[1].name));
    /* a name twice in one call: refused, none registered */
    rf_tensor_desc_t twice[2] = {x.descs[k0], x.descs[k0]};
    ck_assert_int_eq(rf_session_register(x.s, twice, 2), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "twice in one"));
    ck_assert_msg(rf_session_register(x.s, x.descs, k0) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_int_eq(rf_session_plan(x.s, NULL), RF_ERR_MISSING);
    same_text_everywhere(rf_session_last_error(x.s), "(3 of ");
    char want[300];
    snprintf(want, sizeof(want), "%s not registered (3 of %d", x.descs[k0].name, x.n);
    if (rank == 0)
        ck_assert_msg(strstr(rf_session_last_error(x.s), want) != NULL, "%s",
                      rf_session_last_error(x.s));
    ck_assert_msg(rf_session_register(x.s, &x.descs[k0], 3) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, NULL) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    check_committed(&x, &r, 1);
    sess_close(&x);
}
END_TEST

/* Failed updates (a trainer tensor re-registered with another shape, an abort) leave the
 * engine's tensors unchanged and committed false on every rank; a tensor re-registered at a
 * new address makes the rollout's plan rebuild, and the next update writes the new memory. */
START_TEST(test_failed_updates)
{
    sess_t x;
    rf_session_result_t r;
    char bad[256];
    sess_open(&x);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    ck_assert_int_eq(rf_session_register(x.s, x.descs, x.n), RF_OK);
    ck_assert_msg(rf_session_plan(x.s, NULL) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    check_committed(&x, &r, 1);
    uint64_t h1 = rollout_hash(&x);

    /* the last trainer rank's first tensor changed shape between updates */
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 2);
    int victim = rf_topology_trainer_size(&topo) - 1;
    char vname[RF_NAME_MAX + 32];
    snprintf(vname, sizeof(vname), "%s", x.descs[0].name);
    MPI_Bcast(vname, (int)sizeof(vname), MPI_CHAR, victim, MPI_COMM_WORLD);
    if (rank == victim) {
        rf_tensor_desc_t d = x.descs[0];
        d.shape[0] *= 2;
        ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), d.name));
    }
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    ck_assert(!r.committed);
    same_int_everywhere(r.committed);
    same_int_everywhere(r.failed_rank);
    ck_assert_int_eq(r.failed_rank, victim);
    same_text_everywhere(r.reason, vname);
    ck_assert_uint_eq(rollout_hash(&x), h1);
    ck_assert_uint_eq(rf_session_version(x.s), 1);

    /* a deliberately failed update: the first rollout rank aborts it */
    if (rank == rf_topology_trainer_size(&topo))
        ck_assert_int_eq(rf_session_abort(x.s, "engine busy"), RF_OK);
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    ck_assert(!r.committed);
    same_int_everywhere(r.committed);
    same_text_everywhere(r.reason, "aborted by the caller: engine busy");
    ck_assert_uint_eq(rollout_hash(&x), h1);

    /* the session recovered: the next update commits version 2 (1 + 1) */
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    check_committed(&x, &r, 2);

    /* the engine re-allocates one tensor: registered again at the new address, the plan
     * rebuilds at the next begin and the update fills the new memory */
    if (me.role == RF_ROLE_ROLLOUT) {
        int k = x.n / 2;
        void *nb = malloc(x.bytes[k] + 1);
        memset(nb, SENTINEL, x.bytes[k]);
        free(x.buf[k]);
        x.buf[k] = nb;
        x.descs[k].data = nb;
        ck_assert_int_eq(rf_session_register(x.s, &x.descs[k], 1), RF_OK);
    } else {
        trainer_fill(&x, 3);
    }
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    check_committed(&x, &r, 3);
    if (me.role == RF_ROLE_ROLLOUT)
        ck_assert_uint_eq(r.rebuilds, 1);
    if (me.role == RF_ROLE_ROLLOUT)
        ck_assert_msg(rollout_mismatches(&x, 3, bad, sizeof(bad)) == 0, "%s", bad);
    sess_close(&x);
}
END_TEST

/* The split update: begin then finish commits what update does; a tensor registered again
 * between them (on the first rollout rank, then on the last trainer rank) fails that update on
 * every rank with RF_ERR_MOVED naming it, nothing written into the engine (old or new memory);
 * the next update uses the new memory (the rollout's plan rebuilt) and commits. */
START_TEST(test_begin_finish)
{
    sess_t x;
    rf_session_result_t r;
    char bad[256];
    sess_open(&x);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    ck_assert_int_eq(rf_session_register(x.s, x.descs, x.n), RF_OK);
    ck_assert_int_eq(rf_session_finish(x.s, &r), RF_ERR_STATE); /* before any plan or begin */
    ck_assert_int_eq(rf_session_begin(x.s, 0), RF_ERR_STATE);
    ck_assert_msg(rf_session_plan(x.s, NULL) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(rf_session_finish(x.s, &r), RF_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "without rf_session_begin"));
    ck_assert_int_eq(rf_session_begin(x.s, 0), RF_OK);
    ck_assert_int_eq(rf_session_begin(x.s, 0), RF_ERR_STATE); /* local: nothing sent */
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_ERR_STATE);
    ck_assert_int_eq(rf_session_finish(x.s, &r), RF_OK);
    check_committed(&x, &r, 1);
    uint64_t h1 = rollout_hash(&x);

    int first_rollout = rf_topology_trainer_size(&topo), last_trainer = first_rollout - 1;
    for (int mover = first_rollout; mover >= 0; mover = mover == first_rollout ? last_trainer
                                                                               : -1) {
        if (me.role == RF_ROLE_TRAINER)
            trainer_fill(&x, 2);
        /* every check in here is made on every rank together (all_ok): one rank failing alone
         * would leave the others waiting in rf_session_finish's collectives */
        all_ok(rf_session_begin(x.s, 0) == RF_OK, "rf_session_begin");
        int k = x.n / 2;
        char vname[RF_NAME_MAX + 32];
        snprintf(vname, sizeof(vname), "%s", x.descs[k].name);
        MPI_Bcast(vname, (int)sizeof(vname), MPI_CHAR, mover, MPI_COMM_WORLD);
        void *old = NULL;
        if (rank == mover) { /* re-allocated while paused: the new memory registered */
            void *nb = malloc(x.bytes[k] + 1);
            memcpy(nb, x.buf[k], x.bytes[k]);
            old = x.buf[k];
            x.buf[k] = nb;
            x.descs[k].data = nb;
        }
        all_ok(rank != mover || rf_session_register(x.s, &x.descs[k], 1) == RF_OK,
               "registering the moved tensor");
        all_ok(rf_session_finish(x.s, &r) == RF_OK, "rf_session_finish");
        all_ok(!r.committed, "an update with a tensor moved during it committed");
        same_int_everywhere(r.committed);
        same_int_everywhere(r.status);
        ck_assert_int_eq(r.status, RF_ERR_MOVED);
        same_int_everywhere(r.failed_rank);
        ck_assert_int_eq(r.failed_rank, mover);
        same_text_everywhere(r.reason, vname);
        /* the new memory (a copy) untouched too */
        all_ok(rollout_hash(&x) == h1, "the engine's tensors changed");
        all_ok(rf_session_version(x.s) == 1, "the version");
        /* the engine's move made the begin after it rebuild its plan (the update failed for
         * the trainer's move, after that) */
        all_ok(rank != first_rollout || r.rebuilds == (mover == last_trainer ? 1u : 0u),
               "the rollout's rebuilds");
        free(old);
    }
    /* the next update commits into the new memory */
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 2);
    all_ok(rf_session_begin(x.s, 0) == RF_OK, "rf_session_begin");
    all_ok(rf_session_finish(x.s, &r) == RF_OK, "rf_session_finish");
    check_committed(&x, &r, 2);
    all_ok(me.role != RF_ROLE_ROLLOUT || rollout_mismatches(&x, 2, bad, sizeof(bad)) == 0,
           "the engine's tensors after the update into the new memory");
    sess_close(&x);
}
END_TEST

/* A poster thread: the verdict of one rank's local check, posted after a short sleep (the
 * caller's check running while the update does), as the Python binding's helper thread does. */
typedef struct poster {
    rf_session_t *s;
    uint64_t ticket;
    int status;
    char reason[RF_ERR_MSG_MAX];
    rf_status_t rc;
} poster_t;

static void *post_later(void *arg)
{
    poster_t *p = arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    p->rc = rf_session_check_post(p->s, p->ticket, p->status, p->reason);
    return NULL;
}

/* One update with every rank's check armed and posted by another thread: status st on rank
 * `who` (-1: none; a check posted RF_OK elsewhere), no post at all on rank `silent` (-1:
 * none; that rank's check armed with a 0.2 s timeout). */
static rf_status_t checked_update(sess_t *x, int who, int st, const char *reason, int silent,
                                  rf_session_result_t *r)
{
    uint64_t ticket = 0;
    all_ok(rf_session_check_arm(x->s, rank == silent ? 0.2 : 30.0, &ticket) == RF_OK &&
               ticket > 0, "rf_session_check_arm");
    poster_t p = {.s = x->s, .ticket = ticket, .status = rank == who ? st : RF_OK,
                  .rc = RF_ERR_INTERNAL};
    snprintf(p.reason, sizeof(p.reason), "%s", rank == who ? reason : "");
    pthread_t th;
    if (rank != silent)
        ck_assert_int_eq(pthread_create(&th, NULL, post_later, &p), 0);
    rf_status_t rc = rf_session_update(x->s, 0, r);
    if (rank != silent)
        pthread_join(th, NULL);
    all_ok(rank == silent || p.rc == RF_OK, "the post of the armed ticket");
    /* consumed: a post of the same ticket is refused, with no text */
    all_ok(rf_session_check_post(x->s, ticket, RF_OK, NULL) == RF_ERR_STATE, "a late post");
    return rc;
}

/* The local check (rf_session_check_arm / rf_session_check_post): its bad inputs; a check
 * posted RF_OK by another thread lets the update commit; a check that found a tensor moved
 * during the update (the first rollout rank, then the last trainer rank re-allocated one:
 * refit wrote into or read the old memory, which stays allocated, as the Python binding holds
 * a registered tensor's storage) fails it on every rank with RF_ERR_MOVED naming the tensor
 * and nothing committed, the engine's new memory untouched; registered again, the next update
 * commits into it; a check never posted fails the update on every rank within its 0.2 s
 * timeout (RF_ERR_TIMEOUT), and the session goes on. */
/* A FAILED verdict, the same on every rank: status st, naming rank who. */
static void verdict_is(const rf_session_result_t *r, rf_status_t st, int who)
{
    char what[RF_ERR_MSG_MAX + 100];
    snprintf(what, sizeof(what), "verdict %s rank %d (%s), expected %s rank %d",
             rf_status_name((rf_status_t)r->status), r->failed_rank, r->reason,
             rf_status_name(st), who);
    all_ok(!r->committed && r->status == st && r->failed_rank == who, what);
    same_int_everywhere(r->status);
    same_int_everywhere(r->failed_rank);
}

START_TEST(test_local_check)
{
    sess_t x;
    rf_session_result_t r;
    uint64_t ticket = 0;
    sess_open(&x);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    ck_assert_int_eq(rf_session_register(x.s, x.descs, x.n), RF_OK);
    ck_assert_int_eq(rf_session_check_arm(x.s, 1.0, &ticket), RF_ERR_STATE); /* before plan */
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "before a successful"));
    ck_assert_msg(rf_session_plan(x.s, NULL) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(rf_session_check_arm(NULL, 1.0, &ticket), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_check_arm(x.s, 1.0, NULL), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_check_arm(x.s, 0.0, &ticket), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_check_arm(x.s, 1e9, &ticket), RF_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "timeout_s"));
    ck_assert_int_eq(rf_session_check_post(x.s, 0, RF_OK, NULL), RF_ERR_STATE);
    ck_assert_int_eq(rf_session_check_post(NULL, 1, RF_OK, NULL), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_check_arm(x.s, 1.0, &ticket), RF_OK);
    ck_assert_int_eq(rf_session_check_post(x.s, ticket, 1, NULL), RF_ERR_INVALID);
    ck_assert_int_eq(rf_session_check_post(x.s, ticket + 1, RF_OK, NULL), RF_ERR_STATE);
    uint64_t t2;
    ck_assert_int_eq(rf_session_check_arm(x.s, 1.0, &t2), RF_ERR_STATE); /* armed already */
    ck_assert_int_eq(rf_session_check_post(x.s, ticket, RF_OK, NULL), RF_OK);
    ck_assert_int_eq(rf_session_check_post(x.s, ticket, RF_OK, NULL), RF_ERR_STATE);
    /* that ticket (posted, not yet waited for) is consumed by this update, which commits */
    all_ok(rf_session_update(x.s, 0, &r) == RF_OK, "rf_session_update");
    check_committed(&x, &r, 1);
    /* posted by another thread while the update runs */
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 2);
    all_ok(checked_update(&x, -1, RF_OK, "", -1, &r) == RF_OK, "rf_session_update");
    check_committed(&x, &r, 2);

    int first_rollout = rf_topology_trainer_size(&topo), last_trainer = first_rollout - 1;
    for (int mover = first_rollout; mover >= 0; mover = mover == first_rollout ? last_trainer
                                                                               : -1) {
        uint64_t step = rf_session_version(x.s) + 1;
        int k = x.n / 2;
        char vname[RF_NAME_MAX + 32], why[RF_ERR_MSG_MAX];
        snprintf(vname, sizeof(vname), "%s", x.descs[k].name);
        MPI_Bcast(vname, (int)sizeof(vname), MPI_CHAR, mover, MPI_COMM_WORLD);
        snprintf(why, sizeof(why), "%s moved since it was registered", vname);
        /* the mover re-allocates tensor k (nb, a copy of its bytes) while the update runs; the
         * old memory stays allocated until the update is over */
        void *nb = NULL, *snap = NULL;
        if (rank == mover) {
            nb = malloc(x.bytes[k] + 1);
            snap = malloc(x.bytes[k] + 1);
            memcpy(nb, x.buf[k], x.bytes[k]);
            memcpy(snap, x.buf[k], x.bytes[k]);
        }
        if (me.role == RF_ROLE_TRAINER)
            trainer_fill(&x, step);
        all_ok(checked_update(&x, mover, RF_ERR_MOVED, why, -1, &r) == RF_OK,
               "rf_session_update");
        all_ok(!r.committed, "an update whose check found a tensor moved committed");
        verdict_is(&r, RF_ERR_MOVED, mover);
        same_text_everywhere(r.reason, why);
        ck_assert_ptr_nonnull(strstr(r.reason, "its local check failed"));
        all_ok(rf_session_version(x.s) == step - 1, "the version after the failed update");
        all_ok(rank != mover || memcmp(nb, snap, x.bytes[k]) == 0,
               "the engine's new memory of the moved tensor was written");
        /* registered again between updates: the next update commits into the new memory */
        void *old = x.buf[k];
        if (rank == mover) {
            x.buf[k] = nb;
            x.descs[k].data = nb;
        }
        all_ok(rank != mover || rf_session_register(x.s, &x.descs[k], 1) == RF_OK,
               "registering the moved tensor");
        if (rank == mover) {
            free(old);
            free(snap);
        }
        if (me.role == RF_ROLE_TRAINER)
            trainer_fill(&x, step);
        all_ok(checked_update(&x, -1, RF_OK, "", -1, &r) == RF_OK, "rf_session_update");
        check_committed(&x, &r, step);
        all_ok(rank != first_rollout || r.rebuilds == (mover == first_rollout ? 1u : 0u),
               "the rollout's rebuilds");
    }
    /* a check never posted: the update fails on every rank within the check's timeout */
    int silent = size - 1;
    uint64_t step = rf_session_version(x.s) + 1;
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, step);
    double t0 = MPI_Wtime();
    all_ok(checked_update(&x, -1, RF_OK, "", silent, &r) == RF_OK, "rf_session_update");
    double took = MPI_Wtime() - t0;
    all_ok(!r.committed, "an update without its check committed");
    verdict_is(&r, RF_ERR_TIMEOUT, silent);
    same_text_everywhere(r.reason, "was not posted within");
    all_ok(took < 20.0, "the update without its check returned (bounded by its 0.2 s)");
    all_ok(rf_session_version(x.s) == step - 1, "the version after the missing check");
    /* the session goes on */
    all_ok(checked_update(&x, -1, RF_OK, "", -1, &r) == RF_OK, "rf_session_update");
    check_committed(&x, &r, step);
    sess_close(&x);
}
END_TEST

/* Trainer ranks holding F32 masters: the plan counts every tensor as narrowed and its hash
 * differs from the same topology's BF16 registration; the engine receives every master
 * rounded to nearest even; a master registered again as BF16 after the plan is refused,
 * naming it, and fails the next update on every rank. */
START_TEST(test_fp32_masters)
{
    sess_t x;
    rf_session_plan_info_t p16, p32;
    rf_session_result_t r;
    sess_open(&x);
    ck_assert_int_eq(rf_session_register(x.s, x.descs, x.n), RF_OK);
    ck_assert_msg(rf_session_plan(x.s, &p16) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(p16.narrowed, 0);
    sess_close(&x);

    sess_open_as(&x, true);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, &p32) == RF_OK, "%s", rf_session_last_error(x.s));
    ck_assert_int_eq(p32.narrowed, inv.ntensors);
    ck_assert_uint_eq(p32.manifest_digest, p16.manifest_digest); /* the wire is BF16 */
    ck_assert_uint_ne(p32.hash, p16.hash);
    same_int_everywhere((int)(p32.hash & 0x7fffffff));
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    check_committed(&x, &r, 1);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 5);
    ck_assert_int_eq(rf_session_update(x.s, 5, &r), RF_OK);
    check_committed(&x, &r, 5);
    uint64_t h5 = rollout_hash(&x);
    /* a master stays a master */
    if (me.role == RF_ROLE_TRAINER) {
        rf_tensor_desc_t d = x.descs[0];
        d.dtype = "BF16";
        ck_assert_int_eq(rf_session_register(x.s, &d, 1), RF_ERR_MISMATCH);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), d.name));
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "may not change"));
    }
    ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_OK);
    ck_assert(!r.committed);
    same_text_everywhere(r.reason, "registered as F32");
    ck_assert_uint_eq(rollout_hash(&x), h5);
    sess_close(&x);
}
END_TEST

/* A rank that leaves through rf_session_destroy_local (a failure path: no collective call)
 * fails every other rank's next update at its join, at once, naming it and its reason; their
 * session is lost: later calls are refused saying so, and rf_session_destroy is local. (The
 * topologies' join_timeout_s of 60 s bounds a wait here that should not happen.) */
START_TEST(test_destroy_local)
{
    sess_t x;
    rf_session_result_t r;
    sess_open(&x);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    all_ok(rf_session_register(x.s, x.descs, x.n) == RF_OK, "rf_session_register");
    all_ok(rf_session_plan(x.s, NULL) == RF_OK, "rf_session_plan");
    all_ok(rf_session_update(x.s, 0, &r) == RF_OK && r.committed, "update 1");
    int leaver = size - 1; /* the last rollout rank */
    if (rank == leaver) {
        rf_session_destroy_local(x.s, "the test leaves");
        x.s = NULL;
    } else {
        double t0 = MPI_Wtime();
        rf_status_t st = rf_session_update(x.s, 0, &r);
        double took = MPI_Wtime() - t0;
        char want[128];
        snprintf(want, sizeof(want), "rank %d left the session (rf_session_destroy_local: the "
                 "test leaves)", leaver);
        ck_assert_msg(st == RF_ERR_PEER && strstr(rf_session_last_error(x.s), want) != NULL,
                      "rank %d: %s: %s", rank, rf_session_status_name(st),
                      rf_session_last_error(x.s));
        ck_assert(!r.committed);
        ck_assert_msg(took < 10.0, "rank %d: the update failed after %.1f s", rank, took);
        ck_assert_uint_eq(rf_session_version(x.s), 1);
        ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_ERR_STATE);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s), "the session is lost"));
        ck_assert_int_eq(rf_session_begin(x.s, 0), RF_ERR_STATE);
        ck_assert_ptr_nonnull(strstr(rf_session_last_error(x.s),
                                     "rf_session_begin: the session is lost"));
        /* the binding's update: a check armed first; the update names itself, not the arm */
        uint64_t ticket = 0;
        ck_assert_int_eq(rf_session_check_arm(x.s, 5.0, &ticket), RF_OK);
        ck_assert_int_eq(rf_session_update(x.s, 0, &r), RF_ERR_STATE);
        ck_assert_msg(strstr(rf_session_last_error(x.s), "rank ") != NULL &&
                          strstr(rf_session_last_error(x.s),
                                 "rf_session_update: the session is lost") != NULL,
                      "%s", rf_session_last_error(x.s));
        ck_assert_int_eq(rf_session_check_post(x.s, ticket, RF_OK, NULL), RF_ERR_STATE);
        ck_assert_int_eq(rf_session_check_arm(x.s, 5.0, &ticket), RF_OK); /* again: no "armed" */
    }
    sess_close(&x); /* local on the lost session, a no-op on the leaver */
    rf_session_destroy_local(NULL, NULL);
}
END_TEST

/* Creation errors: the same status and text on every rank, no session. */
START_TEST(test_create_errors)
{
    rf_session_t *s = (rf_session_t *)&s;
    ck_assert_int_eq(rf_session_create(MPI_COMM_WORLD, topo_path, NULL, NULL), RF_ERR_INVALID);
    rf_status_t st = rf_session_create(MPI_COMM_WORLD, "/nonexistent/topology.yaml", NULL, &s);
    ck_assert_int_ne(st, RF_OK);
    ck_assert_ptr_null(s);
    same_text_everywhere(rf_session_last_error(NULL), "/nonexistent/topology.yaml");
    rf_session_destroy(NULL);
    ck_assert_int_eq(rf_session_abi_version(), RF_SESSION_ABI_VERSION);
    ck_assert_str_eq(rf_session_status_name(RF_ERR_MISMATCH), "RF_ERR_MISMATCH");
}
END_TEST

/* A bad REFIT_* switch on one rank only (the environment is per process): create fails on
 * every rank with that rank's text naming the variable and value; unset, create succeeds. */
START_TEST(test_create_bad_env)
{
    static const char *const cases[][2] = {{"REFIT_CKPT_STREAM", "maybe"},
                                           {"REFIT_MPI_SEND_SPIN", "yes"},
                                           {"REFIT_CUDA_ENGINE_MIN", "0x10"}};
    int bad = size - 1;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        rf_session_t *s = (rf_session_t *)&s;
        if (rank == bad)
            setenv(cases[c][0], cases[c][1], 1);
        rf_status_t st = rf_session_create(MPI_COMM_WORLD, topo_path, NULL, &s);
        if (rank == bad)
            unsetenv(cases[c][0]);
        ck_assert_int_eq(st, RF_ERR_INVALID);
        ck_assert_ptr_null(s);
        char want[128];
        snprintf(want, sizeof(want), "rank %d: %s=%s: expected ", bad, cases[c][0], cases[c][1]);
        same_text_everywhere(rf_session_last_error(NULL), want);
    }
    sess_t x;
    sess_open(&x);
    sess_close(&x);
}
END_TEST

int main(int argc, char **argv)
{
    rf_err_t err;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: check_session TOPOLOGY.yaml\n");
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
    Suite *s = suite_create("session");
    TCase *tc = tcase_create("session");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_update_bytes);
    tcase_add_test(tc, test_bad_inputs);
    tcase_add_test(tc, test_failed_updates);
    tcase_add_test(tc, test_begin_finish);
    tcase_add_test(tc, test_local_check);
    tcase_add_test(tc, test_fp32_masters);
    tcase_add_test(tc, test_create_errors);
    tcase_add_test(tc, test_create_bad_env);
    tcase_add_test(tc, test_register_all_or_nothing);
    tcase_add_test(tc, test_destroy_local);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* fork breaks MPI */
    srunner_run_all(sr, rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr), any;
    srunner_free(sr);
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    MPI_Finalize();
    return any == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
