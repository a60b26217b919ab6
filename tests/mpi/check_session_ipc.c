/* MPI test: the session API's colocated ipc with trainer tensors carved out of a few
 * allocations, as PyTorch's caching allocator carves parameters out of its segments (label
 * device-emu; REFIT_TEST_DEVICE_ACCEL=host-device). The trainer rank maps 3 POSIX shared memory
 * segments and declares them to the host-device accelerator (rf_accel_host_device_declare), which
 * then reports each as one CUDA allocation (base, size, buffer id); its registered tensors lie
 * interleaved in the 3. The pair must open each allocation once and read every piece in place at
 * (allocation, offset): after each of 2 updates every engine element is what the oracle's
 * locator says (runtime/verify.c), the trainer exported exactly 3 allocations and the rollout
 * opened exactly 3 (sharing one again, or its handle under another index, opens nothing new),
 * no byte staged. Refused at register, naming the tensor and the allocator
 * setting: VMM memory (expandable_segments:True), pool memory (backend:cudaMallocAsync), a
 * pointer in no known allocation; the plan carries the first refusal to every rank, then a
 * clean registration plans. After the plan a trainer tensor may not move. Mode "staged"
 * (tp2 -> 2 x tp1: each engine loads whole tensors its pair holds half of) and mode "f32" (tp1,
 * every other trainer tensor registered as an F32 master, which the engine cannot read in
 * place): the pieces not read in place are staged, gathered and packed on the host from the
 * trainer's "CUDA" tensors through device-to-host copies (rf_trainer_use_device); after each of
 * 2 updates the engine's bytes are the oracle's, some bytes came staged (f32: some in place
 * too), and each trainer rank copied device to host exactly its share of the staged pieces.
 * CK_FORK=no. */
#include <check.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "refit/accel.h"
#include "refit/generator.h"
#include "refit/hashes.h"
#include "refit/model.h"
#include "refit/refit.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/verify.h"
#include "session_int.h" /* runtime/: the xfer's ipc counters */

#define NSEG 3
#define ALIGN 512

static const char *topo_path, *mode;
static bool f32; /* mode f32: the trainer registers even-indexed tensors as F32 masters */
static int rank, size;
static rf_topology_t topo;
static rf_model_config_t cfg;
static rf_inventory_t inv;
static rf_rank_info_t me;

typedef struct seg {
    char name[64];
    unsigned char *base;
    size_t bytes;
} seg_t;

typedef struct sess {
    rf_session_t *s;
    int n;
    void **buf; /* rollout: malloc'd; trainer: inside segs */
    rf_tensor_desc_t *descs;
    seg_t segs[NSEG + 2]; /* trainer: NSEG tensor segments, then a VMM one and a pool one */
} sess_t;

static void seg_map(seg_t *g, int k, size_t bytes, unsigned flags)
{
    snprintf(g->name, sizeof(g->name), "/refit-test-sipc-%d-%d-%d", (int)getpid(), rank, k);
    int fd = shm_open(g->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    ck_assert_msg(fd >= 0, "shm_open %s", g->name);
    ck_assert_int_eq(ftruncate(fd, (off_t)bytes), 0);
    g->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ck_assert(g->base != MAP_FAILED);
    g->bytes = bytes;
    ck_assert_int_eq(rf_accel_host_device_declare(g->base, bytes, g->name, flags), RF_OK);
}

static void seg_unmap(seg_t *g)
{
    if (g->base == NULL)
        return;
    rf_accel_host_device_forget(g->base);
    munmap(g->base, g->bytes);
    shm_unlink(g->name);
    memset(g, 0, sizeof(*g));
}

/* Every expected tensor, device 0; the trainer's tensor i in segment i % NSEG. */
static void sess_open(sess_t *x)
{
    memset(x, 0, sizeof(*x));
    rf_status_t st = rf_session_create(MPI_COMM_WORLD, topo_path, NULL, &x->s);
    ck_assert_msg(st == RF_OK, "rf_session_create: %s", rf_session_last_error(NULL));
    x->n = rf_session_expected_count(x->s);
    ck_assert_int_gt(x->n, NSEG);
    x->buf = calloc((size_t)x->n, sizeof(void *));
    x->descs = calloc((size_t)x->n, sizeof(rf_tensor_desc_t));
    size_t *bytes = calloc((size_t)x->n, sizeof(size_t)), used[NSEG] = {0};
    for (int i = 0; i < x->n; i++) {
        rf_tensor_desc_t *d = &x->descs[i];
        d->name = rf_session_expected(x->s, i, &d->dtype, &d->ndim, d->shape);
        uint64_t numel = 1;
        for (int k = d->ndim - 1; k >= 0; k--) {
            d->strides[k] = (int64_t)numel;
            numel *= (uint64_t)d->shape[k];
        }
        if (f32 && me.role == RF_ROLE_TRAINER && i % 2 == 0)
            d->dtype = "F32";
        bytes[i] = numel * rf_dtype_size(rf_dtype_parse(d->dtype));
        used[i % NSEG] += (bytes[i] + ALIGN - 1) / ALIGN * ALIGN;
        d->device = 0;
    }
    if (me.role == RF_ROLE_TRAINER) {
        for (int k = 0; k < NSEG; k++)
            seg_map(&x->segs[k], k, used[k] + ALIGN, 0);
        seg_map(&x->segs[NSEG], NSEG, 4096, RF_ACCEL_DECL_VMM);
        seg_map(&x->segs[NSEG + 1], NSEG + 1, 4096, RF_ACCEL_DECL_POOL);
        size_t off[NSEG] = {ALIGN, ALIGN, ALIGN}; /* no tensor at a segment's base */
        for (int i = 0; i < x->n; i++) {
            int k = i % NSEG;
            x->buf[i] = x->segs[k].base + off[k];
            off[k] += (bytes[i] + ALIGN - 1) / ALIGN * ALIGN;
        }
    } else {
        for (int i = 0; i < x->n; i++) {
            x->buf[i] = malloc(bytes[i] + 1);
            memset(x->buf[i], 0xa5, bytes[i]);
        }
    }
    for (int i = 0; i < x->n; i++)
        x->descs[i].data = x->buf[i];
    free(bytes);
}

static void sess_close(sess_t *x)
{
    rf_session_destroy(x->s);
    for (int i = 0; i < x->n && me.role == RF_ROLE_ROLLOUT; i++)
        free(x->buf[i]);
    for (int k = 0; k < NSEG + 2; k++)
        seg_unmap(&x->segs[k]);
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
        bool master = strcmp(x->descs[i].dtype, "F32") == 0;
        int64_t w = reg.c1 - reg.c0;
        for (int64_t r = 0; r < reg.r1 - reg.r0; r++)
            for (int64_t c = 0; c < w; c++) {
                uint16_t v = (uint16_t)rf_gen_value_bits(
                    h, (uint64_t)(reg.r0 + r) * cols + (uint64_t)(reg.c0 + c), step,
                    RF_DTYPE_BF16);
                /* an F32 master: low bits below half an ulp, dropped by rounding to nearest */
                if (master)
                    m[r * w + c] = (uint32_t)v << 16 | (uint32_t)((r * w + c) * 40503 & 0x7fff);
                else
                    b[r * w + c] = v;
            }
    }
}

/* Trainer: the bytes its packs of one update copy device to host: of every staged piece, the
 * rows of its shard it packs (the stage sender: its own part of each; a contributor: the
 * parts it is a copy of record of), in the registered dtype. */
static uint64_t expected_d2h(sess_t *x)
{
    const rf_chunk_plan_t *cp = x->s->cplan;
    const rf_trainer_t *tr = &x->s->tr;
    uint64_t want = 0;
    for (size_t gi = 0; gi < cp->n_pieces; gi++) {
        const rf_chunk_piece_t *pc = &cp->pieces[gi];
        int ei = (int)pc->item;
        if (!x->s->ipc_piece_staged[gi] || !tr->has[ei])
            continue;
        const rf_tensor_t *t = &x->s->inv.tensors[x->s->man.entries[ei].tensor];
        rf_owner_t own[RF_MAX_OWNERS];
        int n = rf_trainer_owners(&topo, &x->s->inv, t, own);
        bool mine = tr->sender;
        for (int o = 0; o < n; o++)
            mine |= own[o].rank == rank;
        const rf_region_t *reg = &tr->reg[ei];
        int64_t r0 = reg->r0 > (int64_t)pc->row_begin ? reg->r0 : (int64_t)pc->row_begin;
        int64_t r1 = reg->r1 < (int64_t)pc->row_end ? reg->r1 : (int64_t)pc->row_end;
        if (mine && r1 > r0)
            want += (uint64_t)(r1 - r0) * (uint64_t)(reg->c1 - reg->c0) *
                    rf_dtype_size(tr->src_dtype[ei]);
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

/* A rank-local check agreed by every rank before it asserts, so that a failing rank does not
 * leave the others waiting in the next collective call. */
static void all_ok(int ok, const char *what)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ck_assert_msg(all, "rank %d: %s (%s here)", rank, what, ok ? "ok" : "FAILED");
}

/* A trainer refusal of descriptor d (its pointer moved to p): status and both needles. */
static void refused(sess_t *x, rf_tensor_desc_t d, void *p, const char *needle)
{
    d.data = p;
    ck_assert_int_eq(rf_session_register(x->s, &d, 1), RF_ERR_UNSUPPORTED);
    const char *m = rf_session_last_error(x->s);
    ck_assert_msg(strstr(m, d.name) != NULL, "'%s' does not name %s", m, d.name);
    ck_assert_msg(strstr(m, needle) != NULL, "'%s' does not name '%s'", m, needle);
}

START_TEST(test_colocated_ipc)
{
    sess_t x;
    rf_session_plan_info_t pi;
    rf_session_result_t r;
    uint64_t exports = 0, opens = 0;
    char first[256] = "";
    sess_open(&x);
    void *stray = malloc(4096);
    if (me.role == RF_ROLE_TRAINER) {
        rf_tensor_desc_t d = x.descs[0];
        snprintf(first, sizeof(first), "%s", d.name);
        refused(&x, d, x.segs[NSEG].base, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
        refused(&x, d, x.segs[NSEG + 1].base, "backend:cudaMallocAsync");
        refused(&x, d, stray, "unknown or too short");
        /* runs past its allocation's end */
        refused(&x, d, x.segs[0].base + x.segs[0].bytes - 2, "unknown or too short");
        trainer_fill(&x, 1);
    }
    /* remembered until an accepted register call: the plan carries the trainer's refusal */
    MPI_Bcast(first, (int)sizeof(first), MPI_CHAR, 0, MPI_COMM_WORLD);
    ck_assert_int_ne(rf_session_plan(x.s, &pi), RF_OK);
    same_text_everywhere(rf_session_last_error(x.s), first);
    same_text_everywhere(rf_session_last_error(x.s), "expandable_segments:True");
    if (rank == 0)
        printf("refused: %s\n", rf_session_last_error(x.s));
    ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, &pi) == RF_OK, "%s", rf_session_last_error(x.s));
    /* each allocation exported once by the trainer and opened once by its pair */
    rf_xfer_ipc_counts(x.s->xfer, &exports, &opens);
    all_ok(exports == (me.role == RF_ROLE_TRAINER ? NSEG : 0) &&
               opens == (me.role == RF_ROLE_ROLLOUT ? NSEG : 0) &&
               (me.role != RF_ROLE_TRAINER || x.s->ipc_nalloc == NSEG),
           "the trainer exports 3 allocations, its pair opens 3");
    /* the same allocation shared again keeps its index and handle (no second export); its
     * handle under another index opens nothing new on the pair (the same mapping) */
    rf_ipc_handle_t h;
    memset(&h, 0, sizeof(h));
    if (me.role == RF_ROLE_TRAINER) {
        rf_err_t e;
        uint32_t idx = 99;
        rf_err_clear(&e);
        all_ok(rf_xfer_ipc_share(x.s->xfer, "again", x.segs[0].base, x.segs[0].bytes, &idx,
                                 &h, &e) == RF_OK && idx == 0,
               "sharing allocation 0 again gives index 0");
    } else {
        all_ok(1, "sharing allocation 0 again gives index 0");
    }
    MPI_Bcast(&h, (int)sizeof(h), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (me.role == RF_ROLE_ROLLOUT) {
        rf_err_t e;
        rf_err_clear(&e);
        all_ok(rf_xfer_ipc_import_weights(x.s->xfer, 0, 7, &h, &e) == RF_OK &&
                   rf_xfer_ipc_weights_base(x.s->xfer, 0, 7) != NULL &&
                   rf_xfer_ipc_weights_base(x.s->xfer, 0, 7) ==
                       rf_xfer_ipc_weights_base(x.s->xfer, 0, 0),
               "allocation 0's handle under index 7 is the same mapping");
    } else {
        all_ok(1, "allocation 0's handle under index 7 is the same mapping");
    }
    rf_xfer_ipc_counts(x.s->xfer, &exports, &opens);
    all_ok(exports == (me.role == RF_ROLE_TRAINER ? NSEG : 0) &&
               opens == (me.role == RF_ROLE_ROLLOUT ? NSEG : 0),
           "still 3 exports and 3 opens");
    for (uint64_t v = 1; v <= 2; v++) {
        char bad[256];
        if (me.role == RF_ROLE_TRAINER)
            trainer_fill(&x, v);
        ck_assert_int_eq(rf_session_update(x.s, v, &r), RF_OK);
        ck_assert_msg(r.committed, "rank %d: update FAILED: %s", rank, r.reason);
        uint64_t nbad = me.role == RF_ROLE_ROLLOUT ? rollout_mismatches(&x, v, bad, sizeof(bad))
                                                   : 0;
        if (nbad != 0)
            fprintf(stderr, "rank %d: %llu elements wrong after update %llu; first: %s\n", rank,
                    (unsigned long long)nbad, (unsigned long long)v, bad);
        const rf_xfer_stats_t *xs = rf_xfer_stats(x.s->xfer);
        all_ok(nbad == 0 && (me.role != RF_ROLE_ROLLOUT ||
                             (xs->ipc_bytes_staged == 0 && xs->ipc_bytes_in_place > 0)),
               "the engine's bytes are the oracle's, every piece read in place");
    }
    rf_xfer_ipc_counts(x.s->xfer, &exports, &opens); /* no handle opened again per update */
    all_ok(exports + opens == NSEG, "no allocation exported or opened again by an update");
    if (me.role == RF_ROLE_TRAINER) /* the pair reads it where it was planned */
        refused(&x, x.descs[1], x.segs[1].base + ALIGN / 2, "moved after the plan");
    free(stray);
    sess_close(&x);
}
END_TEST

/* Pieces the engine cannot read in place (tp2 -> 2 x tp1; F32 masters): staged, packed on the
 * host from the trainer's device tensors, the same bytes. */
START_TEST(test_staged)
{
    sess_t x;
    rf_session_plan_info_t pi;
    rf_session_result_t r;
    sess_open(&x);
    if (me.role == RF_ROLE_TRAINER)
        trainer_fill(&x, 1);
    ck_assert_msg(rf_session_register(x.s, x.descs, x.n) == RF_OK, "%s",
                  rf_session_last_error(x.s));
    ck_assert_msg(rf_session_plan(x.s, &pi) == RF_OK, "%s", rf_session_last_error(x.s));
    int masters = me.role == RF_ROLE_TRAINER && f32 ? (x.n + 1) / 2 : 0; /* trainer rank 0's */
    MPI_Bcast(&masters, 1, MPI_INT, 0, MPI_COMM_WORLD);
    all_ok(pi.narrowed == masters, "the plan counts the trainer's F32 masters");
    for (uint64_t v = 1; v <= 2; v++) {
        char bad[256];
        if (me.role == RF_ROLE_TRAINER)
            trainer_fill(&x, v);
        ck_assert_int_eq(rf_session_update(x.s, v, &r), RF_OK);
        ck_assert_msg(r.committed, "rank %d: update FAILED: %s", rank, r.reason);
        uint64_t nbad = me.role == RF_ROLE_ROLLOUT ? rollout_mismatches(&x, v, bad, sizeof(bad))
                                                   : 0;
        if (nbad != 0)
            fprintf(stderr, "rank %d: %llu elements wrong after update %llu; first: %s\n", rank,
                    (unsigned long long)nbad, (unsigned long long)v, bad);
        const rf_xfer_stats_t *xs = rf_xfer_stats(x.s->xfer);
        uint64_t staged = me.role == RF_ROLE_ROLLOUT ? xs->ipc_bytes_staged : 0, all_staged = 0;
        MPI_Allreduce(&staged, &all_staged, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        all_ok(nbad == 0 && all_staged > 0 &&
                   (!f32 || me.role != RF_ROLE_ROLLOUT || xs->ipc_bytes_in_place > 0),
               "the engine's bytes are the oracle's, some staged (f32: some in place)");
        if (me.role == RF_ROLE_TRAINER) {
            uint64_t want = expected_d2h(&x);
            if (x.s->tr.stats.bytes_d2h != want || (x.s->tr.sender && want == 0))
                fprintf(stderr, "rank %d: update %llu: %llu bytes copied device to host, "
                        "expected %llu\n", rank, (unsigned long long)v,
                        (unsigned long long)x.s->tr.stats.bytes_d2h, (unsigned long long)want);
            all_ok(x.s->tr.stats.bytes_d2h == want && (!x.s->tr.sender || want > 0),
                   "each trainer rank copies its share of the staged pieces to the host");
        } else {
            all_ok(1, "each trainer rank copies its share of the staged pieces to the host");
        }
    }
    sess_close(&x);
}
END_TEST

int main(int argc, char **argv)
{
    rf_err_t err;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *emu = getenv("REFIT_TEST_DEVICE_ACCEL");
    if (argc < 3 || emu == NULL || strcmp(emu, "host-device") != 0 ||
        (strcmp(argv[2], "ok") != 0 && strcmp(argv[2], "staged") != 0 &&
         strcmp(argv[2], "f32") != 0)) {
        if (rank == 0)
            fprintf(stderr, "usage: REFIT_TEST_DEVICE_ACCEL=host-device check_session_ipc "
                            "TOPOLOGY.yaml ok|staged|f32\n");
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    topo_path = argv[1];
    mode = argv[2];
    f32 = strcmp(mode, "f32") == 0;
    rf_err_clear(&err);
    if (rf_model_load_topology(topo_path, MPI_COMM_WORLD, &topo, &cfg, &err) != RF_OK ||
        rf_inventory_build(&cfg, topo.quantization, topo.group_size, &inv, &err) != RF_OK ||
        rf_inventory_apply_layout(&inv, topo.r_layout, &err) != RF_OK ||
        rf_topology_rank_info(&topo, rank, &me) != RF_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        MPI_Finalize();
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("session_ipc");
    TCase *tc = tcase_create("session_ipc");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, strcmp(mode, "ok") == 0 ? test_colocated_ipc : test_staged);
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
