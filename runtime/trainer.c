/*
 * refit: trainer shards and production (see include/refit/trainer.h and DESIGN.md section 6):
 * the shard arithmetic (megatron and fsdp layouts), owners and replicas, init and arenas,
 * the source check, production from the generator or a checkpoint (the lock-step reads of a
 * parallel HDF5 checkpoint included) on the host or a device, the trainer-side quantizers.
 * The pack, the stage gather's sides and the source are in runtime/trainer_pack.c; what both
 * share in runtime/trainer_int.h.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/accel.h"
#include "refit/generator.h"
#include "refit/log.h"
#include "refit/quant.h"
#include "refit/quant_ops.h"
#include "refit/pool.h"
#include "refit/trainer.h"
#include "trainer_int.h"

/* trainer.layout fsdp: every dp rank of a stage is a copy of record (topology.c's limit) */
_Static_assert(RF_MAX_OWNERS >= RF_FSDP_MAX_DP, "RF_MAX_OWNERS below trainer.dp's fsdp limit");

static rf_region_t region_all(const rf_tensor_t *t)
{
    rf_region_t r = {0, (int64_t)rf_tensor_rows(t), 0, (int64_t)tensor_cols(t)};
    return r;
}

/* Region of TP rank `t` of `tp` for a tensor split `split`. */
static rf_region_t region_split(const rf_tensor_t *t, rf_split_t split, int tr, int tp)
{
    rf_region_t r = region_all(t);
    int64_t rows = r.r1, cols = r.c1;
    switch (split) {
    case RF_SPLIT_REPLICATED:
        break;
    case RF_SPLIT_ROWS:
        r.r0 = tr * (rows / tp);
        r.r1 = (tr + 1) * (rows / tp);
        break;
    case RF_SPLIT_COLS:
        r.c0 = tr * (cols / tp);
        r.c1 = (tr + 1) * (cols / tp);
        break;
    case RF_SPLIT_VOCAB: {
        int64_t per = (rows + tp - 1) / tp;
        r.r0 = tr * per < rows ? tr * per : rows;
        r.r1 = (tr + 1) * per < rows ? (tr + 1) * per : rows;
        break;
    }
    }
    return r;
}

/* trainer.layout fsdp: torch FSDP2's Shard(0), which splits with torch.chunk along dim 0:
 * rank d of the stage's dp holds rows [min(d ceil(N/dp), N), min((d+1) ceil(N/dp), N)),
 * whole rows, so the last ranks' shards are short or empty (a 0-D tensor is one row: d = 0).
 * The same clipped ceil split as a vocabulary's. */
static rf_region_t region_fsdp(const rf_tensor_t *t, int d, int dp)
{
    return region_split(t, RF_SPLIT_VOCAB, d, dp);
}

bool rf_trainer_source_dtype_ok(rf_dtype_t src, rf_dtype_t dst)
{
    /* every bf16 / f16 value is an f32 value, so rounding back is exact on what was widened */
    return src == dst || (src == RF_DTYPE_F32 && (dst == RF_DTYPE_BF16 || dst == RF_DTYPE_F16));
}

rf_status_t rf_trainer_set_source_dtype(rf_trainer_t *tr, int entry, rf_dtype_t src, rf_err_t *err)
{
    if (entry < 0 || entry >= tr->man->n || !tr->has[entry])
        return rf_err_set(err, RF_ERR_INVALID, "trainer rank %d: entry %d: no shard here",
                          tr->me.world_rank, entry);
    const rf_manifest_entry_t *e = &tr->man->entries[entry];
    if (!rf_trainer_source_dtype_ok(src, e->dtype))
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "trainer rank %d: %s: a %s source for a %s checkpoint tensor (only "
                          "the checkpoint dtype, or an F32 master of a BF16 / F16 tensor)",
                          tr->me.world_rank, e->name, rf_dtype_name(src), rf_dtype_name(e->dtype));
    tr->src_dtype[entry] = src;
    return RF_OK;
}

bool rf_trainer_shard(const rf_topology_t *topo, const rf_inventory_t *inv, const rf_tensor_t *t,
                      const rf_rank_info_t *me, rf_region_t *reg_p)
{
    int stage = rf_topology_layer_stage(topo, t->layer, inv->cfg.num_hidden_layers);
    if (me->role != RF_ROLE_TRAINER || me->p != stage)
        return false;
    if (topo->t_layout == RF_TRAINER_LAYOUT_FSDP) {
        *reg_p = region_fsdp(t, me->d, topo->t_dp);
        return !region_empty(reg_p);
    }
    if (t->expert >= 0) {
        int64_t per = inv->cfg.num_experts / topo->t_ep;
        if (per <= 0 || t->expert / per != me->q)
            return false;
        *reg_p = region_split(t, t->split, me->u, topo->t_etp);
    } else {
        *reg_p = region_split(t, t->split, me->t, topo->t_tp);
    }
    return !region_empty(reg_p);
}

int rf_trainer_owners(const rf_topology_t *topo, const rf_inventory_t *inv, const rf_tensor_t *t,
                      rf_owner_t out[RF_MAX_OWNERS])
{
    return rf_trainer_owners_replica(topo, inv, t, 0, out);
}

int rf_trainer_owners_replica(const rf_topology_t *topo, const rf_inventory_t *inv,
                              const rf_tensor_t *t, int replica, rf_owner_t out[RF_MAX_OWNERS])
{
    int n = 0;
    int p = rf_topology_layer_stage(topo, t->layer, inv->cfg.num_hidden_layers);
    if (topo->t_layout == RF_TRAINER_LAYOUT_FSDP) {
        /* one copy: every dp rank of the stage holds its rows, no replica has them again */
        for (int d = 0; d < topo->t_dp && n < RF_MAX_OWNERS; d++) {
            rf_owner_t o = {rf_topology_trainer_rank(topo, 0, 0, d, p),
                            region_fsdp(t, d, topo->t_dp)};
            if (!region_empty(&o.reg))
                out[n++] = o;
        }
        return n;
    }
    if (t->expert >= 0) {
        int T = rf_topology_trainer_size(topo);
        int etp = topo->t_etp, ep = topo->t_ep, edp = T / (etp * ep * topo->t_pp);
        int64_t per = inv->cfg.num_experts / ep;
        int q = (int)(t->expert / per);
        for (int u = 0; u < etp && n < RF_MAX_OWNERS; u++) {
            if (u > 0 && t->split == RF_SPLIT_REPLICATED)
                break;
            int x = edp > 0 ? replica % edp : 0;
            rf_owner_t o = {u + etp * (q + ep * (x + edp * p)), region_split(t, t->split, u, etp)};
            if (!region_empty(&o.reg))
                out[n++] = o;
        }
        return n;
    }
    for (int tr = 0; tr < topo->t_tp && n < RF_MAX_OWNERS; tr++) {
        if (tr > 0 && t->split == RF_SPLIT_REPLICATED)
            break;
        rf_owner_t o = {rf_topology_trainer_rank(topo, tr, 0, replica % topo->t_dp, p),
                        region_split(t, t->split, tr, topo->t_tp)};
        if (!region_empty(&o.reg))
            out[n++] = o;
    }
    return n;
}

rf_status_t rf_trainer_check_slice(const rf_topology_t *topo, const rf_inventory_t *inv,
                                   const rf_tensor_t *t, const rf_rank_info_t *me,
                                   const rf_region_t *r, rf_err_t *err)
{
    /* a quantized slice must start on a block (FP8) / group (WNA16) boundary */
    const rf_module_t *mod = &inv->modules[t->module];
    const char *dim = t->expert >= 0 ? "etp" : "tp";
    int tp = t->expert >= 0 ? topo->t_etp : topo->t_tp;
    if (mod->quant == RF_QUANT_FP8_BLOCK && t->param == RF_PARAM_WEIGHT &&
        (r->r0 % 128 != 0 || r->c0 % 128 != 0))
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "trainer rank %d: its slice of %s starts at row %lld, column %lld, "
                          "inside a 128 x 128 fp8 block (trainer.%s %d); gathering "
                          "unquantized slices to quantize them is not implemented",
                          me->world_rank, t->name, (long long)r->r0, (long long)r->c0, dim, tp);
    if (mod->quant == RF_QUANT_WNA16 && t->param == RF_PARAM_WEIGHT_PACKED &&
        (r->c0 * 8) % inv->group_size != 0)
        return rf_err_set(err, RF_ERR_TOPOLOGY,
                          "trainer rank %d: its slice of %s starts at column %lld, inside a "
                          "wna16 group of %lld (trainer.%s %d); gathering unquantized slices "
                          "is not implemented",
                          me->world_rank, t->name, (long long)r->c0 * 8,
                          (long long)inv->group_size, dim, tp);
    return RF_OK;
}

rf_status_t rf_trainer_init(rf_trainer_t *tr, const rf_topology_t *topo,
                            const rf_inventory_t *inv, const rf_manifest_t *man,
                            const rf_chunk_plan_t *plan, const rf_rank_info_t *me, MPI_Comm comm,
                            MPI_Comm stage_comm, rf_err_t *err)
{
    memset(tr, 0, sizeof(*tr));
    tr->topo = topo;
    tr->inv = inv;
    tr->man = man;
    tr->plan = plan;
    tr->me = *me;
    tr->comm = comm;
    tr->stage = me->p;
    tr->sender = me->t == 0 && me->c == 0 && me->d == 0;
    tr->fault_skip_seq = -1;
    /* the stage's trainer ranks read an HDF5 checkpoint in lock step (rf_trainer_produce) */
    tr->stage_comm = stage_comm;
    tr->reg = calloc((size_t)man->n + 1, sizeof(rf_region_t));
    tr->has = calloc((size_t)man->n + 1, sizeof(bool));
    tr->buf = calloc((size_t)man->n + 1, sizeof(char *));
    tr->src_dtype = calloc((size_t)man->n + 1, sizeof(rf_dtype_t));
    if (!tr->reg || !tr->has || !tr->buf || !tr->src_dtype) {
        rf_trainer_free(tr);
        return rf_err_set(err, RF_ERR_NOMEM, "trainer: out of memory");
    }
    for (int i = 0; i < man->n; i++) {
        const rf_tensor_t *t = &inv->tensors[man->entries[i].tensor];
        tr->src_dtype[i] = man->entries[i].dtype;
        tr->has[i] = rf_trainer_shard(topo, inv, t, me, &tr->reg[i]);
        if (!tr->has[i])
            continue;
        const rf_region_t *r = &tr->reg[i];
        size_t bytes = (size_t)(r->r1 - r->r0) * (size_t)(r->c1 - r->c0) * entry_es(tr, i);
        rf_status_t cs = rf_trainer_check_slice(topo, inv, t, me, r, err);
        if (cs != RF_OK) {
            rf_trainer_free(tr);
            return cs;
        }
        tr->buf[i] = malloc(bytes + 1);
        if (tr->buf[i] == NULL) {
            rf_trainer_free(tr);
            return rf_err_set(err, RF_ERR_NOMEM, "trainer: no memory for the shard of %s",
                              t->name);
        }
    }
    if (tr->sender) {
        tr->gather_cap = plan->chunk_bytes;
        tr->gather_buf = malloc(tr->gather_cap);
        if (tr->gather_buf == NULL) {
            rf_trainer_free(tr);
            return rf_err_set(err, RF_ERR_NOMEM, "trainer: out of memory");
        }
    }
    return RF_OK;
}

uint64_t rf_trainer_arena_layout(const rf_topology_t *topo, const rf_inventory_t *inv,
                                 const rf_manifest_t *man, const rf_rank_info_t *me,
                                 uint64_t *offs)
{
    uint64_t total = 0;
    for (int i = 0; i < man->n; i++) {
        rf_region_t r;
        offs[i] = UINT64_MAX;
        if (!rf_trainer_shard(topo, inv, &inv->tensors[man->entries[i].tensor], me, &r))
            continue;
        total = (total + RF_CHUNK_ALIGN - 1) & ~(uint64_t)(RF_CHUNK_ALIGN - 1);
        offs[i] = total;
        total += (uint64_t)(r.r1 - r.r0) * (uint64_t)(r.c1 - r.c0) *
                 rf_dtype_size(man->entries[i].dtype);
    }
    return total;
}

void rf_trainer_use_arena(rf_trainer_t *tr, char *base, const uint64_t *offs)
{
    for (int i = 0; i < tr->man->n; i++) {
        if (!tr->buf_borrowed)
            free(tr->buf[i]);
        tr->buf[i] = tr->has[i] && offs[i] != UINT64_MAX ? base + offs[i] : NULL;
    }
    tr->buf_borrowed = true;
}

void rf_trainer_use_device(rf_trainer_t *tr, struct rf_accel *ax) { tr->dev = ax; }

void rf_trainer_free(rf_trainer_t *tr)
{
    if (tr == NULL)
        return;
    if (tr->buf && !tr->buf_borrowed)
        for (int i = 0; i < tr->man->n; i++)
            free(tr->buf[i]);
    free(tr->buf);
    free(tr->src_dtype);
    free(tr->has);
    free(tr->reg);
    free(tr->gather_buf);
    free(tr->d2h_buf);
    rf_xfer_gather_destroy(tr->gather);
    rf_pool_destroy(tr->readers); /* the streamed reads' helpers (runtime/trainer_stream.c) */
    memset(tr, 0, sizeof(*tr));
}

rf_status_t rf_trainer_attach(rf_trainer_t *tr, rf_xfer_t *x, rf_err_t *err)
{
    if (tr->gather != NULL)
        return rf_err_set(err, RF_ERR_STATE, "trainer rank %d: attached twice",
                          tr->me.world_rank);
    return rf_xfer_gather_create(x, tr->comm, tr->me.world_rank, tr->stage,
                                 rf_topology_trainer_size(tr->topo), &tr->gather, err);
}

/* Index of the manifest entry of inventory tensor `name`, or -1. */
static int entry_of(const rf_trainer_t *tr, const char *prefix, const char *suffix)
{
    char name[RF_NAME_MAX + 32];
    snprintf(name, sizeof(name), "%s.%s", prefix, suffix);
    int ti = rf_inventory_find(tr->inv, name);
    if (ti < 0)
        return -1;
    /* rf_manifest_build keeps the inventory's order, so a binary search finds the entry (a
     * production asks once per quantized linear: a linear scan made it quadratic, issue 18);
     * the scan stays as the fallback should that order ever change */
    const rf_manifest_entry_t *e = tr->man->entries;
    for (int lo = 0, hi = tr->man->n - 1; lo <= hi;) {
        int mid = lo + (hi - lo) / 2;
        if (e[mid].tensor == ti)
            return mid;
        if (e[mid].tensor < ti)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    for (int i = 0; i < tr->man->n; i++)
        if (e[i].tensor == ti)
            return i;
    return -1;
}

/* Row and column in the whole tensor of element k of this rank's slice of entry i (the
 * slice is stored contiguously, its own width per row). */
static void slice_elem(const rf_trainer_t *tr, int i, int64_t k, int64_t *row, int64_t *col)
{
    const rf_region_t *r = &tr->reg[i];
    int64_t w = r->c1 - r->c0;
    *row = r->r0 + (w > 0 ? k / w : 0);
    *col = r->c0 + (w > 0 ? k % w : 0);
}

/* Refuses scale values no dequantizer can use (NaN, +-inf, zero, negative) in this rank's
 * slice of entry i (bytes at buf in dt, stored or just produced: `what`), naming the rank,
 * the tensor and its first bad element (DESIGN.md section 7). Runs before any chunk moves. */
static rf_status_t check_scales(const rf_trainer_t *tr, int i, const void *buf, rf_dtype_t dt,
                                const char *what, rf_err_t *err)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[i].tensor];
    const rf_region_t *r = &tr->reg[i];
    uint64_t n = (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0);
    int64_t row, col;
    float v;
    int64_t k = rf_scale_first_bad(buf, dt, n, &v);
    if (k < 0)
        return RF_OK;
    slice_elem(tr, i, k, &row, &col);
    return rf_err_set(err, RF_ERR_INVALID,
                      "trainer rank %d: %s %s element %lld (row %lld, column %lld) is %g: "
                      "quantization scales must be finite and positive",
                      tr->me.world_rank, what, t->name,
                      (long long)(row * (int64_t)tensor_cols(t) + col), (long long)row,
                      (long long)col, (double)v);
}

/*
 * The checkpoint reads of one production. Collective (an HDF5 checkpoint on parallel
 * libhdf5): every rank of the stage walks the manifest in the same order and takes part in
 * the read of each dataset the stage reads (ckpt_source), with its own shard or with
 * nothing, so each makes the same collective calls in the same order whatever it holds or
 * whichever error it met. Independent (safetensors, serial libhdf5): plain rf_ckpt_read.
 */
typedef struct ck_reads {
    rf_ckpt_t *ck;
    bool coll;
    const rf_st_entry_t *expect; /* collective: the dataset of the entry being produced */
    bool done;                   /* collective: its read took place */
} ck_reads_t;

/*
 * A 3-D dataset [E, N, K] (GraniteMoE's fused experts): the trainer counts rf_tensor_rows'
 * E N rows of K, the checkpoint readers E rows of N K. Rows [r0, r1) x row bytes [c0, c1) of
 * the former as whole dim-0 slices, full width and contiguous, are one read of slices
 * [r0 / N, r1 / N); anything else (independent reads only) is one read per row, each a byte
 * range of its slice. A collective read takes part with nothing and refuses such a range.
 */
static rf_status_t ck_read_3d(ck_reads_t *cr, const rf_st_entry_t *se, uint64_t r0, uint64_t r1,
                              uint64_t c0, uint64_t c1, void *dst, size_t pitch, rf_err_t *err)
{
    uint64_t N = se->shape[1], sb = se->shape[0] ? se->nbytes / se->shape[0] : 0;
    uint64_t kb = N ? sb / N : 0;
    bool whole = N > 0 && r0 % N == 0 && r1 % N == 0 && c0 == 0 && c1 == kb &&
                 (r1 - r0 <= 1 || pitch == kb);
    if (whole || r1 == r0 || c1 == c0) {
        uint64_t q0 = whole ? r0 / N : 0, q1 = whole ? r1 / N : 0;
        if (!cr->coll)
            return whole ? rf_ckpt_read(cr->ck, se, q0, q1, 0, sb, dst, sb, err) : RF_OK;
        cr->done = true;
        return rf_ckpt_read_all(cr->ck, se, q0, q1, 0, whole ? sb : 0, dst, sb, err);
    }
    if (cr->coll) {
        cr->done = true;
        rf_status_t st = rf_ckpt_read_all(cr->ck, se, 0, 0, 0, 0, NULL, 0, err);
        if (st != RF_OK)
            return st;
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "trainer: %s: rows [%llu, %llu) x bytes [%llu, %llu) of a 3-D "
                          "dataset are not whole dim-0 slices of %llu rows (collective HDF5 "
                          "reads take those)",
                          se->name, (unsigned long long)r0, (unsigned long long)r1,
                          (unsigned long long)c0, (unsigned long long)c1, (unsigned long long)N);
    }
    for (uint64_t r = r0; r < r1; r++) {
        uint64_t q = r / N, p = r % N;
        RF_CHECK(rf_ckpt_read(cr->ck, se, q, q + 1, p * kb + c0, p * kb + c1,
                              (char *)dst + (r - r0) * pitch, pitch, err));
    }
    return RF_OK;
}

static rf_status_t ck_read(ck_reads_t *cr, const rf_st_entry_t *se, uint64_t r0, uint64_t r1,
                           uint64_t c0, uint64_t c1, void *dst, size_t pitch, rf_err_t *err)
{
    if (se->ndim == 3 && (!cr->coll || (se == cr->expect && !cr->done)))
        return ck_read_3d(cr, se, r0, r1, c0, c1, dst, pitch, err);
    if (!cr->coll)
        return rf_ckpt_read(cr->ck, se, r0, r1, c0, c1, dst, pitch, err);
    if (se != cr->expect || cr->done) /* the walk's read is made by the caller */
        return rf_err_set(err, RF_ERR_INTERNAL, "trainer: read of %s out of the lock step",
                          se->name);
    cr->done = true;
    return rf_ckpt_read_all(cr->ck, se, r0, r1, c0, c1, dst, pitch, err);
}

/* The checkpoint dataset entry i's shards are read from, or NULL (none: a scale the trainer
 * quantizes, or a tensor the checkpoint lacks). From the manifest, the inventory and the
 * checkpoint's header only, so the same on every rank. */
static const rf_st_entry_t *ckpt_source(const rf_trainer_t *tr, int i, rf_ckpt_t *ck)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[i].tensor];
    if (!rf_manifest_trainer_quantizes(tr->inv, t, ck))
        return rf_ckpt_find(ck, t->name);
    if (t->param != RF_PARAM_WEIGHT && t->param != RF_PARAM_WEIGHT_PACKED)
        return NULL;
    char name[RF_NAME_MAX + 8];
    const char *dot = strrchr(t->name, '.');
    snprintf(name, sizeof(name), "%.*s.weight", (int)(dot - t->name), t->name);
    return rf_ckpt_find(ck, name);
}

/* A caller's unquantized shard of a quantized linear (rf_trainer_produce_given): rows x cols
 * contiguous in src's dtype, the model dtype or an F32 master of it. */
typedef struct rf_given {
    const void *data;
    rf_dtype_t dtype;
} rf_given_t;

/* n elements of g into dst in the model dtype dt: a copy, or each F32 master value rounded to
 * nearest even first (rf_f32_to_bf16 / rf_f32_to_f16, torch's casts), so the quantizer sees
 * exactly the checkpoint tensor the master rounds to. */
static void given_narrow(void *dst, rf_dtype_t dt, const rf_given_t *g, uint64_t n)
{
    if (g->dtype == dt) {
        memcpy(dst, g->data, (size_t)n * rf_dtype_size(dt));
        return;
    }
    const float *f = g->data;
    uint16_t *h = dst;
    for (uint64_t k = 0; k < n; k++)
        h[k] = dt == RF_DTYPE_BF16 ? rf_f32_to_bf16(f[k]) : rf_f32_to_f16(f[k]);
}

/* wna16 weight_shape entry i: the logical (N, K) of its linear, in the entry's integer dtype,
 * written at out (16 bytes of room); returns the bytes written (8: an i32 pair, 16: i64). */
static size_t weight_shape_bytes(const rf_trainer_t *tr, int i, void *out)
{
    const rf_manifest_entry_t *e = &tr->man->entries[i];
    const rf_tensor_t *t = &tr->inv->tensors[e->tensor];
    char prefix[RF_NAME_MAX - 16];
    const char *dot = strrchr(t->name, '.');
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(dot - t->name), t->name);
    int pi = entry_of(tr, prefix, "weight_packed");
    const rf_tensor_t *pt = pi >= 0 ? &tr->inv->tensors[tr->man->entries[pi].tensor] : t;
    int64_t nk[2] = {pt->shape[0], pt->shape[1] * 8};
    if (e->dtype == RF_DTYPE_I32) {
        int32_t v[2] = {(int32_t)nk[0], (int32_t)nk[1]};
        memcpy(out, v, sizeof(v));
        return sizeof(v);
    }
    memcpy(out, nk, sizeof(nk));
    return sizeof(nk);
}

static void put_weight_shape(rf_trainer_t *tr, int i)
{
    (void)weight_shape_bytes(tr, i, tr->buf[i]);
}

/*
 * The rows of the logical (unquantized) weight `prefix`.weight that decide the fp8-tensor /
 * fp8-channel scales of this rank's slice r of it: the whole tensor (per tensor), or the
 * slice's rows across all K columns (per channel: a row-parallel slice holds part of each
 * row). rf_fp8_scales over them, then only the slice is quantized, so a slice gives the bytes
 * of the whole tensor quantized at once without any exchange between trainer ranks (each rank
 * produces the rows it needs: generator rows, or checkpoint bytes beyond its shard).
 */
static void fp8_rows_extent(const rf_tensor_t *t, const rf_region_t *r, bool per_row,
                            int64_t *er0, int64_t *er1)
{
    *er0 = per_row ? r->r0 : 0;
    *er1 = per_row ? r->r1 : t->shape[0];
}

/* fp8-tensor / fp8-channel: this rank's slice of weight entry ei and its weight_scale entry. */
static rf_status_t produce_fp8_rows(rf_trainer_t *tr, int ei, uint64_t step, ck_reads_t *cr,
                                    const rf_given_t *given, rf_err_t *err)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
    const rf_region_t *r = &tr->reg[ei];
    bool per_row = tr->inv->modules[t->module].quant == RF_QUANT_FP8_CHANNEL;
    rf_dtype_t dt = tr->inv->cfg.dtype;
    int64_t K = t->shape[1], er0, er1;
    fp8_rows_extent(t, r, per_row, &er0, &er1);
    size_t es = rf_dtype_size(dt);
    uint64_t n = (uint64_t)(er1 - er0) * (uint64_t)K;
    char *ext = malloc((size_t)n * es + 1);
    rf_status_t st = RF_OK;
    if (ext == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer: out of memory");
    if (given != NULL) {
        /* a caller's shard: only one that holds every row and column its scales read */
        if (r->r0 != er0 || r->r1 != er1 || r->c0 != 0 || r->c1 != K)
            st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                            "trainer rank %d: %s: its %s scales need rows [%lld, %lld) of all "
                            "%lld columns, beyond this rank's shard",
                            tr->me.world_rank, t->name, per_row ? "per-channel" : "per-tensor",
                            (long long)er0, (long long)er1, (long long)K);
        else
            given_narrow(ext, dt, given, n);
    } else if (cr == NULL) {
        rf_tensor_t lt = *t;
        lt.dtype = dt;
        lt.nbytes = lt.numel * es;
        st = rf_gen_fill(&lt, step, (uint64_t)er0, (uint64_t)er1, 0, (uint64_t)K, ext,
                         (size_t)K * es);
    } else {
        /* the rows beyond this rank's shard that its scales need, as the lock step's one
         * read of the dataset (ckpt_source names the same one) */
        const rf_st_entry_t *se = rf_ckpt_find(cr->ck, t->name);
        if (se == NULL)
            st = rf_err_set(err, RF_ERR_MISSING, "trainer rank %d: checkpoint lacks %s",
                            tr->me.world_rank, t->name);
        else
            st = ck_read(cr, se, (uint64_t)er0, (uint64_t)er1, 0, (uint64_t)K * es, ext,
                         (size_t)K * es, err);
    }
    char prefix[RF_NAME_MAX - 16];
    const char *dot = strrchr(t->name, '.');
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(dot - t->name), t->name);
    int si = entry_of(tr, prefix, "weight_scale");
    if (st == RF_OK && (si < 0 || !tr->has[si] || tr->reg[si].r1 - tr->reg[si].r0 !=
                                                       (per_row ? er1 - er0 : 1)))
        st = rf_err_set(err, RF_ERR_INTERNAL, "trainer: %s has no scale slice for its rows here",
                        t->name);
    if (st == RF_OK) {
        float v;
        int64_t k = rf_first_nonfinite(ext, dt, n, &v);
        if (k >= 0)
            st = rf_err_set(err, RF_ERR_INVALID,
                            "trainer rank %d: %s element %lld (row %lld, column %lld) is %g: a "
                            "weight the trainer quantizes must be finite",
                            tr->me.world_rank, t->name, (long long)((er0 + k / K) * K + k % K),
                            (long long)(er0 + k / K), (long long)(k % K), (double)v);
    }
    if (st == RF_OK) {
        float *sc = (float *)(void *)tr->buf[si];
        st = rf_fp8_scales(ext, dt, er1 - er0, K, K, per_row, sc);
        if (st == RF_OK)
            st = rf_fp8_quantize_scaled(ext + (size_t)((r->r0 - er0) * K + r->c0) * es, dt,
                                        r->r1 - r->r0, r->c1 - r->c0, K, sc, per_row,
                                        (uint8_t *)tr->buf[ei], r->c1 - r->c0);
        if (st != RF_OK)
            rf_err_set(err, st, "trainer rank %d: quantizing %s failed", tr->me.world_rank,
                       t->name);
        else
            st = check_scales(tr, si, tr->buf[si], RF_DTYPE_F32, "the quantizer produced", err);
    }
    free(ext);
    return st;
}

/*
 * Produces the logical (unquantized) region of linear `prefix` (N x K, model dtype) from the
 * generator or a bf16 checkpoint, and quantizes it into this rank's slices of the quantized
 * checkpoint tensors (DESIGN.md section 7: fp8-block weight + weight_scale_inv; wna16
 * weight_packed + weight_scale). ei is the primary entry (fp8 weight / wna16 weight_packed).
 */
static rf_status_t produce_quantized(rf_trainer_t *tr, int ei, uint64_t step, ck_reads_t *cr,
                                     const rf_given_t *given, rf_err_t *err)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
    const rf_module_t *mod = &tr->inv->modules[t->module];
    const rf_region_t *r = &tr->reg[ei];
    bool wna16 = mod->quant == RF_QUANT_WNA16;
    if (mod->quant == RF_QUANT_FP8_TENSOR || mod->quant == RF_QUANT_FP8_CHANNEL)
        return produce_fp8_rows(tr, ei, step, cr, given, err);
    rf_dtype_t dt = tr->inv->cfg.dtype;
    char prefix[RF_NAME_MAX - 16];
    const char *dot = strrchr(t->name, '.');
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(dot - t->name), t->name);
    int64_t N = t->shape[0], K = t->shape[1] * (wna16 ? 8 : 1);
    int64_t c0 = r->c0 * (wna16 ? 8 : 1), c1 = r->c1 * (wna16 ? 8 : 1);
    int64_t rows = r->r1 - r->r0, cols = c1 - c0;
    size_t es = rf_dtype_size(dt);
    char *logical = malloc((size_t)rows * (size_t)cols * es + 1);
    rf_status_t st = RF_OK;
    if (logical == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer: out of memory");
    if (given != NULL) {
        given_narrow(logical, dt, given, (uint64_t)rows * (uint64_t)cols);
    } else if (cr == NULL) {
        rf_tensor_t lt = *t;
        snprintf(lt.name, sizeof(lt.name), "%s.weight", prefix);
        lt.dtype = dt;
        lt.shape[0] = N;
        lt.shape[1] = K;
        lt.numel = (uint64_t)N * (uint64_t)K;
        lt.nbytes = lt.numel * es;
        st = rf_gen_fill(&lt, step, (uint64_t)r->r0, (uint64_t)r->r1, (uint64_t)c0, (uint64_t)c1,
                         logical, (size_t)cols * es);
    } else {
        char name[RF_NAME_MAX + 8];
        snprintf(name, sizeof(name), "%s.weight", prefix);
        const rf_st_entry_t *se = rf_ckpt_find(cr->ck, name);
        if (se == NULL)
            st = rf_err_set(err, RF_ERR_MISSING, "trainer rank %d: checkpoint lacks %s",
                            tr->me.world_rank, name);
        else
            st = ck_read(cr, se, (uint64_t)r->r0, (uint64_t)r->r1, (uint64_t)c0 * es,
                         (uint64_t)c1 * es, logical, (size_t)cols * es, err);
    }
    int si = entry_of(tr, prefix, wna16 ? "weight_scale" : "weight_scale_inv");
    if (st == RF_OK && (si < 0 || !tr->has[si]))
        st = rf_err_set(err, RF_ERR_INTERNAL, "trainer: %s has no scale slice here", t->name);
    if (st == RF_OK) {
        /* a non-finite weight has no scale: name it rather than a failed quantizer */
        float v;
        int64_t k = rf_first_nonfinite(logical, dt, (uint64_t)rows * (uint64_t)cols, &v);
        if (k >= 0)
            st = rf_err_set(err, RF_ERR_INVALID,
                            "trainer rank %d: %s.weight element %lld (row %lld, column %lld) is "
                            "%g: a weight the trainer quantizes must be finite",
                            tr->me.world_rank, prefix,
                            (long long)((r->r0 + k / cols) * K + c0 + k % cols),
                            (long long)(r->r0 + k / cols), (long long)(c0 + k % cols),
                            (double)v);
    }
    if (st == RF_OK) {
        int64_t spitch = tr->reg[si].c1 - tr->reg[si].c0;
        /* the runtime dtype (fp32 fp8 scales): a produced scale is never narrowed */
        rf_dtype_t sdt = tr->man->entries[si].dtype;
        if (wna16)
            st = rf_wna16_quantize(logical, dt, rows, cols, cols, tr->inv->group_size,
                                   (uint32_t *)tr->buf[ei], cols / 8, tr->buf[si], sdt, spitch);
        else
            st = rf_fp8_quantize(logical, dt, rows, cols, cols, (uint8_t *)tr->buf[ei], cols,
                                 tr->buf[si], sdt, spitch, RF_FP8_PLAIN);
        if (st != RF_OK)
            rf_err_set(err, st, "trainer rank %d: quantizing %s failed", tr->me.world_rank,
                       t->name);
        else
            st = check_scales(tr, si, tr->buf[si], sdt, "the quantizer produced", err);
    }
    free(logical);
    return st;
}

/* The per-update counters a production leaves: nothing gathered or packed yet, its time. */
static void produce_done(rf_trainer_t *tr, double t0)
{
    tr->stats.bytes_gathered = 0;
    tr->stats.gather_msgs = 0;
    tr->stats.gather_s = tr->stats.pack_s = 0;
    tr->stats.produce_s = rf_time_now() - t0;
}

/* This rank's slice of entry i from checkpoint tensor se stored in a narrower float dtype
 * (bf16 / f16 fp8 block scales), widened exactly into the entry's fp32 buffer. */
static rf_status_t read_widened(rf_trainer_t *tr, int i, ck_reads_t *cr, const rf_st_entry_t *se,
                                rf_err_t *err)
{
    const rf_manifest_entry_t *e = &tr->man->entries[i];
    const rf_region_t *r = &tr->reg[i];
    size_t ses = rf_dtype_size(se->dtype);
    uint64_t n = (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0);
    if (!rf_manifest_scale_widens(&tr->inv->tensors[e->tensor], se->dtype))
        return rf_err_set(err, RF_ERR_MISMATCH, "trainer rank %d: source tensor %s is %s, the "
                          "manifest says %s", tr->me.world_rank, e->name,
                          rf_dtype_name(se->dtype), rf_dtype_name(e->dtype));
    char *tmp = malloc((size_t)n * ses + 1);
    if (tmp == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer: out of memory");
    rf_status_t st = ck_read(cr, se, (uint64_t)r->r0, (uint64_t)r->r1, (uint64_t)r->c0 * ses,
                             (uint64_t)r->c1 * ses, tmp, (size_t)(r->c1 - r->c0) * ses, err);
    for (uint64_t k = 0; st == RF_OK && k < n; k++)
        ((float *)(void *)tr->buf[i])[k] = rf_load_f32(tmp, se->dtype, (int64_t)k);
    free(tmp);
    return st;
}

rf_status_t rf_trainer_check_source(rf_trainer_t *tr, rf_ckpt_t *ck, rf_err_t *err)
{
    if (ck == NULL)
        return RF_OK; /* the generator produces exactly the inventory's tensors */
    for (int i = 0; i < tr->man->n; i++) {
        const rf_manifest_entry_t *e = &tr->man->entries[i];
        const rf_tensor_t *t = &tr->inv->tensors[e->tensor];
        if (!tr->has[i] || rf_manifest_trainer_quantizes(tr->inv, t, ck))
            continue;
        const rf_st_entry_t *se = rf_ckpt_find(ck, e->name);
        if (se == NULL)
            return rf_err_set(err, RF_ERR_MISSING, "trainer rank %d: source lacks %s",
                              tr->me.world_rank, e->name);
        bool same = (se->dtype == e->dtype || rf_manifest_scale_widens(t, se->dtype)) &&
                    rf_manifest_shape_matches(t, se->ndim, se->shape);
        if (!same)
            return rf_err_set(err, RF_ERR_MISMATCH,
                              "trainer rank %d: source tensor %s is %s %s, the manifest says %s",
                              tr->me.world_rank, e->name, rf_dtype_name(se->dtype),
                              se->ndim == e->ndim ? "of another shape" : "of another rank",
                              rf_dtype_name(e->dtype));
    }
    return RF_OK;
}

/* This rank's shard of entry i (which it holds): the generator's (cr NULL) or the
 * checkpoint's, read through cr. */
static rf_status_t produce_entry(rf_trainer_t *tr, int i, uint64_t step, ck_reads_t *cr,
                                 rf_err_t *err)
{
    rf_ckpt_t *ck = cr != NULL ? cr->ck : NULL;
    const rf_manifest_entry_t *e = &tr->man->entries[i];
    const rf_tensor_t *t = &tr->inv->tensors[e->tensor];
    const rf_region_t *r = &tr->reg[i];
    size_t es = entry_es(tr, i);
    size_t pitch = (size_t)(r->c1 - r->c0) * es;
    if (rf_manifest_trainer_quantizes(tr->inv, t, ck)) {
        if (t->param == RF_PARAM_WEIGHT || t->param == RF_PARAM_WEIGHT_PACKED)
            RF_CHECK(produce_quantized(tr, i, step, cr, NULL, err));
        else if (t->param == RF_PARAM_WEIGHT_SHAPE)
            put_weight_shape(tr, i);
        /* scales are written by their weight's quantization */
        return RF_OK;
    }
    if (ck == NULL) {
        RF_CHECK(rf_gen_fill(t, step, (uint64_t)r->r0, (uint64_t)r->r1, (uint64_t)r->c0,
                             (uint64_t)r->c1, tr->buf[i], pitch));
    } else {
        const rf_st_entry_t *se = rf_ckpt_find(ck, t->name);
        if (se == NULL)
            return rf_err_set(err, RF_ERR_MISSING, "trainer rank %d: checkpoint lacks %s",
                              tr->me.world_rank, t->name);
        if (se->dtype != e->dtype) {
            /* a bf16 / f16 fp8 block scale: widened exactly to the fp32 the manifest and
             * the runtime hold (rf_manifest_scale_widens), checked on the way */
            RF_CHECK(read_widened(tr, i, cr, se, err));
        } else {
            RF_CHECK(ck_read(cr, se, (uint64_t)r->r0, (uint64_t)r->r1, (uint64_t)r->c0 * es,
                             (uint64_t)r->c1 * es, tr->buf[i], pitch, err));
        }
        if (rf_param_is_f32_scale(t->param) || t->param == RF_PARAM_WEIGHT_SCALE)
            RF_CHECK(check_scales(tr, i, tr->buf[i], e->dtype, "stored", err));
        /* an FP8 source with NaN bytes (0x7F, 0xFF) is refused: e4m3fnuz would turn them
         * into finite values (DESIGN.md section 7) */
        if (e->dtype == RF_DTYPE_F8_E4M3) {
            const uint8_t *b = (const uint8_t *)tr->buf[i];
            uint64_t nb = (uint64_t)(r->r1 - r->r0) * pitch;
            for (uint64_t k = 0; k < nb; k++)
                if ((b[k] & 0x7fu) == 0x7fu)
                    return rf_err_set(err, RF_ERR_MISMATCH,
                                      "trainer rank %d: %s holds a NaN byte (0x%02x) at "
                                      "element %llu of its slice: fp8 sources must be finite",
                                      tr->me.world_rank, t->name, b[k],
                                      (unsigned long long)k);
        }
    }
    return RF_OK;
}

/* Entry i's tensor lives on this rank's stage (its ranks read it in lock step). */
static bool entry_on_stage(const rf_trainer_t *tr, int i)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[i].tensor];
    return rf_topology_layer_stage(tr->topo, t->layer, tr->inv->cfg.num_hidden_layers) ==
           tr->stage;
}

bool rf_trainer_pack_local(const rf_trainer_t *tr)
{
    int n = 1;
    if (!tr->sender || tr->dev != NULL || tr->gathered != NULL)
        return false;
    if (tr->stage_comm != MPI_COMM_NULL && tr->stage_comm != 0 &&
        MPI_Comm_size(tr->stage_comm, &n) != MPI_SUCCESS)
        return false;
    if (n != 1)
        return false;
    for (int i = 0; i < tr->man->n; i++) {
        if (!entry_on_stage(tr, i))
            continue;
        const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[i].tensor];
        const rf_region_t *r = &tr->reg[i], all = region_all(t);
        if (!tr->has[i] || r->r0 != all.r0 || r->r1 != all.r1 || r->c0 != all.c0 || r->c1 != all.c1)
            return false;
    }
    return true;
}

/* Whether this update's checkpoint reads can move into the pack (rf_trainer_produce's
 * streamed production): entries whose bytes production checks or writes itself stay there. */
static bool stream_ok(const rf_trainer_t *tr, rf_ckpt_t *ck)
{
    if (!tr->stream_reads || ck == NULL || !rf_trainer_pack_local(tr))
        return false;
    for (int i = 0; i < tr->man->n; i++) {
        if (!tr->has[i])
            continue;
        const rf_manifest_entry_t *e = &tr->man->entries[i];
        const rf_tensor_t *t = &tr->inv->tensors[e->tensor];
        const rf_st_entry_t *se = rf_ckpt_find(ck, t->name);
        if (tr->src_dtype[i] != e->dtype || rf_manifest_trainer_quantizes(tr->inv, t, ck) ||
            rf_param_is_f32_scale(t->param) || t->param == RF_PARAM_WEIGHT_SCALE ||
            t->param == RF_PARAM_WEIGHT_SHAPE || e->dtype == RF_DTYPE_F8_E4M3 || se == NULL ||
            se->dtype != e->dtype)
            return false;
    }
    return true;
}

rf_status_t trainer_stream_part(rf_trainer_t *tr, int ei, const rf_chunk_piece_t *pc,
                                const rf_region_t *part, char *payload, uint64_t *bytes,
                                rf_err_t *err)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
    const rf_st_entry_t *se = rf_ckpt_find(tr->stream_ck, t->name);
    size_t es = entry_es(tr, ei);
    uint64_t rb = entry_row_bytes(tr, ei);
    ck_reads_t cr = {tr->stream_ck, false, NULL, false};
    rf_err_t e2;
    rf_err_clear(&e2);
    if (se == NULL)
        return rf_err_set(err, RF_ERR_MISSING, "trainer rank %d: checkpoint lacks %s",
                          tr->me.world_rank, t->name);
    char *dst = payload + pc->offset + (uint64_t)(part->r0 - (int64_t)pc->row_begin) * rb +
                (uint64_t)part->c0 * es;
    /* the ranges production reads (produce_entry), straight into the payload */
    rf_status_t st =
        ck_read(&cr, se, (uint64_t)part->r0, (uint64_t)part->r1, (uint64_t)part->c0 * es,
                (uint64_t)part->c1 * es, dst, (size_t)rb, &e2);
    if (st != RF_OK)
        return rf_err_set(err, st,
                          "trainer rank %d: reading rows [%lld, %lld) of %s from the "
                          "checkpoint as its chunk is packed: %s",
                          tr->me.world_rank, (long long)part->r0, (long long)part->r1, t->name,
                          e2.msg);
    *bytes += (uint64_t)(part->r1 - part->r0) * (uint64_t)(part->c1 - part->c0) * es;
    return RF_OK;
}

rf_status_t rf_trainer_produce(rf_trainer_t *tr, uint64_t step, rf_ckpt_t *ck, rf_err_t *err)
{
    double t0 = rf_time_now();
    tr->stream_ck = NULL;
    tr->stats.read_threads = 0;
    if (stream_ok(tr, ck)) {
        /* streamed: the pack reads (the shard buffers keep what they hold) */
        tr->stats.bytes_produced = 0;
        for (int i = 0; i < tr->man->n; i++)
            if (tr->has[i])
                tr->stats.bytes_produced += (uint64_t)(tr->reg[i].r1 - tr->reg[i].r0) *
                                            (uint64_t)(tr->reg[i].c1 - tr->reg[i].c0) *
                                            entry_es(tr, i);
        tr->stats.bytes_read = 0;
        tr->stats.header_bytes_read = 0;
        tr->stream_ck = ck;
        produce_done(tr, t0);
        return RF_OK;
    }
    uint64_t read0 = ck ? rf_ckpt_bytes_read(ck) : 0, hdr0 = ck ? rf_ckpt_header_bytes_read(ck) : 0;
    uint64_t coll0 = 0, indep0 = 0;
    ck_reads_t cr = {ck, false, NULL, false};
    rf_status_t st = RF_OK;
    tr->stats.bytes_produced = 0;
    if (ck != NULL) {
        rf_ckpt_collective_counts(ck, &coll0, &indep0);
        RF_CHECK(rf_ckpt_collective_begin(ck, tr->stage_comm, &cr.coll, err));
    }
    for (int i = 0; i < tr->man->n; i++) {
        if (cr.coll) {
            if (!entry_on_stage(tr, i))
                continue;
            cr.expect = ckpt_source(tr, i, ck);
            cr.done = false;
        }
        if (tr->has[i] && tr->src_dtype[i] != tr->man->entries[i].dtype && st == RF_OK) {
            /* a caller's master: produced by its trainer (collective: keeps taking part) */
            st = rf_err_set(err, RF_ERR_STATE, "trainer rank %d: %s is a %s master, not "
                            "produced here", tr->me.world_rank, tr->man->entries[i].name,
                            rf_dtype_name(tr->src_dtype[i]));
            if (!cr.coll)
                return st;
        }
        if (tr->has[i]) {
            const rf_region_t *r = &tr->reg[i];
            tr->stats.bytes_produced +=
                (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0) * entry_es(tr, i);
            /* collective: after a failure this rank keeps taking part, with nothing */
            if (st == RF_OK)
                st = produce_entry(tr, i, step, ck != NULL ? &cr : NULL, err);
            if (st != RF_OK && !cr.coll)
                return st;
        }
        if (cr.coll && cr.expect != NULL && !cr.done) {
            rf_err_t e2;
            rf_err_clear(&e2);
            rf_status_t s2 = rf_ckpt_read_all(ck, cr.expect, 0, 0, 0, 0, NULL, 0, &e2);
            if (st == RF_OK && s2 != RF_OK)
                st = rf_err_set(err, s2, "trainer rank %d: %s", tr->me.world_rank, e2.msg);
        }
    }
    if (cr.coll) {
        uint64_t coll = 0, indep = 0;
        int n = 0;
        rf_ckpt_collective_counts(ck, &coll, &indep);
        MPI_Comm_size(tr->stage_comm, &n);
        rf_info("trainer rank %d: %" PRIu64 " collective reads (MPI-IO) over the %d trainer "
                "rank(s) of stage %d, %" PRIu64 " of them done as independent I/O by HDF5",
                tr->me.world_rank, coll - coll0 + indep - indep0, n, tr->stage, indep - indep0);
        rf_err_t e2;
        rf_err_clear(&e2);
        rf_status_t s2 = rf_ckpt_collective_end(ck, &e2);
        if (st == RF_OK && s2 != RF_OK)
            st = rf_err_set(err, s2, "trainer rank %d: %s", tr->me.world_rank, e2.msg);
    }
    if (st != RF_OK)
        return st;
    if (ck != NULL) {
        tr->stats.bytes_read = rf_ckpt_bytes_read(ck) - read0;
        tr->stats.header_bytes_read = rf_ckpt_header_bytes_read(ck) - hdr0;
    } else {
        tr->stats.bytes_read = 0;
    }
    produce_done(tr, t0);
    return RF_OK;
}

rf_status_t rf_trainer_produce_given(rf_trainer_t *tr, const void *const *logical,
                                     const rf_dtype_t *dtypes, rf_err_t *err)
{
    double t0 = rf_time_now();
    tr->stats.bytes_produced = 0;
    tr->stats.bytes_read = 0;
    for (int i = 0; i < tr->man->n; i++) {
        const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[i].tensor];
        if (!tr->has[i] || !rf_manifest_trainer_quantizes(tr->inv, t, NULL))
            continue; /* the caller's own bytes, read in place by the pack */
        const rf_region_t *r = &tr->reg[i];
        tr->stats.bytes_produced +=
            (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0) * entry_es(tr, i);
        if (t->param == RF_PARAM_WEIGHT || t->param == RF_PARAM_WEIGHT_PACKED) {
            if (logical[i] == NULL)
                return rf_err_set(err, RF_ERR_INTERNAL, "trainer rank %d: %s: no unquantized "
                                  "shard given to quantize", tr->me.world_rank, t->name);
            rf_given_t g = {logical[i], dtypes[i]};
            RF_CHECK(produce_quantized(tr, i, 0, NULL, &g, err));
        } else if (t->param == RF_PARAM_WEIGHT_SHAPE) {
            put_weight_shape(tr, i);
        }
        /* scales are written by their weight's quantization */
    }
    produce_done(tr, t0);
    return RF_OK;
}

/* One device production's bookkeeping: the device quantizers are enqueued without a
 * synchronization per call (rf_quant_ops_t check), so the calls are remembered in order to
 * name the tensor of the first bad one; the scale entries they wrote; and the weight_shape
 * values, which must outlive their asynchronous host-to-device copies. */
typedef struct dev_batch {
    int *call_entry;     /* [n]: manifest entry of each quantize call, in enqueue order */
    int ncalls;
    bool *quant_scale;   /* [n]: entry i is a scale a device quantizer wrote */
    int64_t (*shape)[2]; /* [n]: entry i's weight_shape values (wna16) */
} dev_batch_t;

/* put_weight_shape on the device: the values staged in db->shape[i] (they live until the
 * production's synchronization), copied h2d to d on ax's default stream. */
static rf_status_t put_weight_shape_device(rf_trainer_t *tr, int i, rf_accel_t *ax, void *d,
                                           dev_batch_t *db, rf_err_t *err)
{
    size_t nb = weight_shape_bytes(tr, i, db->shape[i]);
    rf_status_t st = ax->ops->copy(ax, d, db->shape[i], nb, RF_COPY_H2D, NULL);
    if (st != RF_OK)
        rf_err_set(err, st, "trainer rank %d: writing %s on %s device %d failed",
                   tr->me.world_rank, tr->inv->tensors[tr->man->entries[i].tensor].name,
                   ax->ops->name, ax->device);
    return st;
}

/* The generator's logical (unquantized) region of the linear holding quantized entry ei into
 * device scratch, quantized on the device into the entry's and its scale's device slices. */
static rf_status_t produce_quantized_device(rf_trainer_t *tr, int ei, uint64_t step,
                                           rf_accel_t *ax, char *dev, const char *host,
                                           void **scratch, size_t *scratch_cap, dev_batch_t *db,
                                           rf_err_t *err)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
    const rf_region_t *r = &tr->reg[ei];
    rf_quant_t mq = tr->inv->modules[t->module].quant;
    bool wna16 = mq == RF_QUANT_WNA16;
    bool rowq = mq == RF_QUANT_FP8_TENSOR || mq == RF_QUANT_FP8_CHANNEL;
    rf_dtype_t dt = tr->inv->cfg.dtype;
    char prefix[RF_NAME_MAX - 16], lname[RF_NAME_MAX + 8];
    const char *dot = strrchr(t->name, '.');
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(dot - t->name), t->name);
    snprintf(lname, sizeof(lname), "%s.weight", prefix);
    int64_t K = t->shape[1] * (wna16 ? 8 : 1);
    int64_t c0 = r->c0 * (wna16 ? 8 : 1), c1 = r->c1 * (wna16 ? 8 : 1);
    int64_t rows = r->r1 - r->r0, cols = c1 - c0;
    /* fp8-tensor / fp8-channel: the generator's rows that decide the scales (fp8_rows_extent),
     * all K columns */
    int64_t er0 = r->r0, er1 = r->r1, ec0 = c0, ec1 = c1;
    if (rowq) {
        fp8_rows_extent(t, r, mq == RF_QUANT_FP8_CHANNEL, &er0, &er1);
        ec0 = 0;
        ec1 = K;
    }
    size_t es = rf_dtype_size(dt), need = (size_t)(er1 - er0) * (size_t)(ec1 - ec0) * es;
    int si = entry_of(tr, prefix,
                      wna16 ? "weight_scale" : rowq ? "weight_scale" : "weight_scale_inv");
    if (si < 0 || !tr->has[si])
        return rf_err_set(err, RF_ERR_INTERNAL, "trainer: %s has no scale slice here", t->name);
    if (need > *scratch_cap) {
        if (*scratch != NULL) {
            (void)rf_accel_sync(ax);
            ax->ops->free(ax, *scratch);
        }
        *scratch = NULL;
        *scratch_cap = 0;
        rf_status_t as = ax->ops->alloc(ax, need, scratch);
        if (as != RF_OK)
            return rf_err_set(err, as, "trainer rank %d: no %zu bytes of device scratch to "
                              "quantize %s", tr->me.world_rank, need, t->name);
        *scratch_cap = need;
    }
    rf_accel_gen_t g = {rf_gen_name_hash(lname), step, dt, (uint64_t)K, (uint64_t)er0,
                        (uint64_t)er1, (uint64_t)ec0, (uint64_t)ec1, *scratch,
                        (size_t)(ec1 - ec0) * es};
    const rf_gen_ops_t *go = rf_gen_ops_for(ax);
    const rf_quant_ops_t *qo = rf_quant_ops_for(ax);
    rf_status_t st = go && qo ? go->fill(ax, &g, NULL) : RF_ERR_UNSUPPORTED;
    char *q = dev + ((const char *)tr->buf[ei] - host);
    char *sc = dev + ((const char *)tr->buf[si] - host);
    int64_t spitch = tr->reg[si].c1 - tr->reg[si].c0;
    rf_dtype_t sdt = tr->man->entries[si].dtype;
    if (st == RF_OK && rowq)
        st = qo->fp8_quantize_rows(ax, *scratch, dt, er1 - er0, K, K,
                                   mq == RF_QUANT_FP8_CHANNEL, (float *)(void *)sc, r->r0 - er0,
                                   rows, c0, cols, (uint8_t *)q, cols, NULL);
    else if (st == RF_OK && wna16)
        st = qo->wna16_quantize(ax, *scratch, dt, rows, cols, cols, tr->inv->group_size,
                                (uint32_t *)(void *)q, cols / 8, sc, sdt, spitch, NULL);
    else if (st == RF_OK)
        st = qo->fp8_quantize(ax, *scratch, dt, rows, cols, cols, (uint8_t *)q, cols, sc, sdt,
                              spitch, NULL);
    if (st != RF_OK)
        return rf_err_set(err, st, "trainer rank %d: producing and quantizing %s on %s device %d "
                          "failed", tr->me.world_rank, t->name, ax->ops->name, ax->device);
    db->call_entry[db->ncalls++] = ei;
    db->quant_scale[si] = true;
    return RF_OK;
}

/* The device quantizers' scales, checked as the host path checks its own (check_scales):
 * each scale slice is copied back (scales are a small fraction of the weights: 1/16384 of an
 * fp8 weight's elements, 1/G of a wna16 weight's). */
static rf_status_t check_device_scales(rf_trainer_t *tr, rf_accel_t *ax, char *dev,
                                       const char *host, const bool *skip, rf_err_t *err)
{
    void *tmp = NULL;
    size_t cap = 0;
    rf_status_t st = RF_OK;
    for (int i = 0; i < tr->man->n && st == RF_OK; i++) {
        const rf_manifest_entry_t *e = &tr->man->entries[i];
        const rf_tensor_t *t = &tr->inv->tensors[e->tensor];
        if (!tr->has[i] || (skip && skip[i]) ||
            (!rf_param_is_f32_scale(t->param) && t->param != RF_PARAM_WEIGHT_SCALE))
            continue;
        const rf_region_t *r = &tr->reg[i];
        size_t nb = (size_t)(r->r1 - r->r0) * (size_t)(r->c1 - r->c0) * entry_es(tr, i);
        if (nb > cap) {
            free(tmp);
            tmp = malloc(nb);
            cap = tmp != NULL ? nb : 0;
            if (tmp == NULL) {
                st = rf_err_set(err, RF_ERR_NOMEM, "trainer: out of memory");
                break;
            }
        }
        /* host NULL: tr->buf[] are the device pointers themselves */
        const char *src = host != NULL ? dev + ((const char *)tr->buf[i] - host) : tr->buf[i];
        st = ax->ops->copy(ax, tmp, src, nb, RF_COPY_D2H, NULL);
        if (st == RF_OK)
            st = rf_accel_sync(ax);
        if (st != RF_OK)
            rf_err_set(err, st, "trainer rank %d: reading %s back from %s device %d failed",
                       tr->me.world_rank, t->name, ax->ops->name, ax->device);
        else
            st = check_scales(tr, i, tmp, e->dtype, "the device quantizer produced", err);
    }
    free(tmp);
    return st;
}

rf_status_t rf_trainer_produce_device(rf_trainer_t *tr, uint64_t step, rf_accel_t *ax,
                                      void *dev_base, const void *host_base, rf_err_t *err)
{
    double t0 = rf_time_now();
    char *dev = dev_base;
    const char *host = host_base;
    void *scratch = NULL;
    size_t scratch_cap = 0;
    rf_status_t st = RF_OK;
    size_t n = (size_t)(tr->man->n > 0 ? tr->man->n : 1);
    dev_batch_t db = {malloc(n * sizeof(int)), 0, calloc(n, sizeof(bool)),
                      malloc(n * sizeof(int64_t[2]))};
    if (!db.call_entry || !db.quant_scale || !db.shape)
        st = rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory", tr->me.world_rank);
    tr->stats.bytes_produced = 0;
    for (int i = 0; i < tr->man->n && st == RF_OK; i++) {
        if (!tr->has[i])
            continue;
        const rf_manifest_entry_t *e = &tr->man->entries[i];
        const rf_tensor_t *t = &tr->inv->tensors[e->tensor];
        const rf_region_t *r = &tr->reg[i];
        size_t pitch = (size_t)(r->c1 - r->c0) * entry_es(tr, i);
        char *d = dev + ((const char *)tr->buf[i] - host);
        tr->stats.bytes_produced += (uint64_t)(r->r1 - r->r0) * pitch;
        if (rf_manifest_trainer_quantizes(tr->inv, t, NULL)) {
            if (t->param == RF_PARAM_WEIGHT || t->param == RF_PARAM_WEIGHT_PACKED) {
                st = produce_quantized_device(tr, i, step, ax, dev, host, &scratch, &scratch_cap,
                                              &db, err);
            } else if (t->param == RF_PARAM_WEIGHT_SHAPE) {
                st = put_weight_shape_device(tr, i, ax, d, &db, err);
            }
            continue; /* scales are written by their weight's quantization */
        }
        int64_t nrows = (int64_t)rf_tensor_rows(t);
        rf_accel_gen_t g = {rf_gen_name_hash(t->name), step, t->dtype,
                            nrows ? t->numel / (uint64_t)nrows : 0, (uint64_t)r->r0,
                            (uint64_t)r->r1, (uint64_t)r->c0, (uint64_t)r->c1, d, pitch};
        const rf_gen_ops_t *go = rf_gen_ops_for(ax);
        st = go ? go->fill(ax, &g, NULL) : RF_ERR_UNSUPPORTED;
        if (st != RF_OK)
            rf_err_set(err, st, "trainer rank %d: generating %s on %s device %d failed",
                       tr->me.world_rank, t->name, ax->ops->name, ax->device);
    }
    rf_status_t ss = rf_accel_sync(ax);
    if (st == RF_OK && ss != RF_OK)
        st = rf_err_set(err, ss, "trainer rank %d: device production of update %llu failed",
                        tr->me.world_rank, (unsigned long long)step);
    /* the quantizers' verdict, once for the whole production: a bad input names its tensor; a
     * bad stored scale is located by the element-wise scale check below */
    const rf_quant_ops_t *qo = rf_quant_ops_for(ax);
    int64_t bad = -1;
    unsigned why = 0;
    if (st == RF_OK && db.ncalls > 0) {
        ss = qo ? qo->check(ax, NULL, &bad, &why) : RF_ERR_UNSUPPORTED;
        if (ss != RF_OK)
            st = rf_err_set(err, ss, "trainer rank %d: the device quantizers of update %llu "
                            "failed on %s device %d", tr->me.world_rank,
                            (unsigned long long)step, ax->ops->name, ax->device);
        else if (bad >= 0 && (bad >= db.ncalls || (why & RF_QUANT_BAD_INPUT)))
            st = rf_err_set(err, RF_ERR_INVALID, "trainer rank %d: producing and quantizing %s "
                            "on %s device %d failed: its unquantized values are not all finite",
                            tr->me.world_rank,
                            bad < db.ncalls ? tr->man->entries[db.call_entry[bad]].name : "?",
                            ax->ops->name, ax->device);
    }
    if (st == RF_OK) /* the scales the quantizers wrote are checked only when one was bad */
        st = check_device_scales(tr, ax, dev, host, bad >= 0 ? NULL : db.quant_scale, err);
    if (scratch != NULL)
        ax->ops->free(ax, scratch);
    free(db.call_entry);
    free(db.quant_scale);
    free(db.shape);
    tr->stats.bytes_read = 0;
    tr->stats.header_bytes_read = 0;
    produce_done(tr, t0);
    return st;
}

/* ---- a caller's device shards of quantized linears (rf_trainer_produce_given_device) ---- */

/* The geometry of primary entry ei's given shard: rows x cols of the logical (N, K) weight
 * from row r0, column c0 (wna16 columns x 8), contiguous. */
typedef struct given_geom {
    int64_t r0, c0, rows, cols, K;
} given_geom_t;

static given_geom_t given_geom(const rf_trainer_t *tr, int ei)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
    const rf_region_t *r = &tr->reg[ei];
    int64_t f = tr->inv->modules[t->module].quant == RF_QUANT_WNA16 ? 8 : 1;
    return (given_geom_t){r->r0, r->c0 * f, r->r1 - r->r0, (r->c1 - r->c0) * f, t->shape[1] * f};
}

/* The given device shard src (sdt: the model dtype or an F32 master) of entry ei read back and
 * narrowed into the model dtype on the host: *host_p (malloc'd, rows x cols). */
static rf_status_t given_to_host(rf_trainer_t *tr, int ei, const void *src, rf_dtype_t sdt,
                                 rf_accel_t *ax, void **host_p, rf_err_t *err)
{
    given_geom_t g = given_geom(tr, ei);
    rf_dtype_t dt = tr->inv->cfg.dtype;
    uint64_t n = (uint64_t)g.rows * (uint64_t)g.cols;
    void *raw = malloc((size_t)n * rf_dtype_size(sdt) + 1);
    void *out = malloc((size_t)n * rf_dtype_size(dt) + 1);
    rf_status_t st = raw != NULL && out != NULL ? RF_OK : RF_ERR_NOMEM;
    if (st == RF_OK && n > 0)
        st = ax->ops->copy(ax, raw, src, (size_t)n * rf_dtype_size(sdt), RF_COPY_D2H, NULL);
    if (st == RF_OK)
        st = rf_accel_sync(ax);
    if (st == RF_OK) {
        rf_given_t gv = {raw, sdt};
        given_narrow(out, dt, &gv, n);
    }
    free(raw);
    if (st != RF_OK) {
        free(out);
        return rf_err_set(err, st, "trainer rank %d: reading %s's unquantized shard back from %s "
                          "device %d failed", tr->me.world_rank, tr->man->entries[ei].name,
                          ax->ops->name, ax->device);
    }
    *host_p = out;
    return RF_OK;
}

/* A quantizer met bad input on entry ei: its first non-finite element named as the host path
 * names it (RF_ERR_INVALID), found in the given shard read back; else `st` with `what`. */
static rf_status_t given_bad_input(rf_trainer_t *tr, int ei, const void *src, rf_dtype_t sdt,
                                   rf_accel_t *ax, rf_status_t st, const char *what,
                                   rf_err_t *err)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
    given_geom_t g = given_geom(tr, ei);
    void *h = NULL;
    RF_CHECK(given_to_host(tr, ei, src, sdt, ax, &h, err));
    float v = 0.0f;
    int64_t k = rf_first_nonfinite(h, tr->inv->cfg.dtype, (uint64_t)g.rows * (uint64_t)g.cols, &v);
    free(h);
    const char *dot = strrchr(t->name, '.');
    int plen = dot != NULL ? (int)(dot - t->name) : (int)strlen(t->name);
    if (k < 0)
        return rf_err_set(err, st, "trainer rank %d: quantizing %s on %s device %d failed (%s)",
                          tr->me.world_rank, t->name, ax->ops->name, ax->device, what);
    int64_t row = g.r0 + k / g.cols, col = g.c0 + k % g.cols;
    return rf_err_set(err, RF_ERR_INVALID,
                      "trainer rank %d: %.*s.weight element %lld (row %lld, column %lld) is %g: "
                      "a weight the trainer quantizes must be finite",
                      tr->me.world_rank, plen, t->name, (long long)(row * g.K + col),
                      (long long)row, (long long)col, (double)v);
}

/* Enqueues the quantization of primary entry ei from the caller's device shard src into the
 * entry's and its scale's device buffers (tr->buf: device memory). An F32 master is rounded
 * on the host into the model dtype first (given_to_host) and copied into device scratch, so
 * the quantizer sees the checkpoint tensor the master stands for. */
static rf_status_t quantize_given_device(rf_trainer_t *tr, int ei, const void *src,
                                         rf_dtype_t sdt, rf_accel_t *ax,
                                         const rf_quant_ops_t *qo, void **scratch,
                                         size_t *scratch_cap, dev_batch_t *db, rf_err_t *err)
{
    const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
    rf_quant_t mq = tr->inv->modules[t->module].quant;
    bool wna16 = mq == RF_QUANT_WNA16;
    bool rowq = mq == RF_QUANT_FP8_TENSOR || mq == RF_QUANT_FP8_CHANNEL;
    rf_dtype_t dt = tr->inv->cfg.dtype;
    given_geom_t g = given_geom(tr, ei);
    char prefix[RF_NAME_MAX - 16];
    const char *dot = strrchr(t->name, '.');
    snprintf(prefix, sizeof(prefix), "%.*s", (int)(dot - t->name), t->name);
    int si = entry_of(tr, prefix, wna16 || rowq ? "weight_scale" : "weight_scale_inv");
    if (si < 0 || !tr->has[si])
        return rf_err_set(err, RF_ERR_INTERNAL, "trainer: %s has no scale slice here", t->name);
    if (rowq) { /* the scales read whole rows (per channel) or the whole tensor */
        int64_t er0, er1;
        fp8_rows_extent(t, &tr->reg[ei], mq == RF_QUANT_FP8_CHANNEL, &er0, &er1);
        if (g.r0 != er0 || g.r0 + g.rows != er1 || g.c0 != 0 || g.cols != g.K)
            return rf_err_set(err, RF_ERR_UNSUPPORTED,
                              "trainer rank %d: %s: its %s scales need rows [%lld, %lld) of all "
                              "%lld columns, beyond this rank's shard", tr->me.world_rank,
                              t->name, mq == RF_QUANT_FP8_CHANNEL ? "per-channel" : "per-tensor",
                              (long long)er0, (long long)er1, (long long)g.K);
    }
    const void *w = src;
    if (sdt != dt) { /* an F32 master: rounded on the host, then in device scratch */
        size_t need = (size_t)g.rows * (size_t)g.cols * rf_dtype_size(dt);
        void *h = NULL;
        RF_CHECK(given_to_host(tr, ei, src, sdt, ax, &h, err));
        rf_status_t as = RF_OK;
        if (need > *scratch_cap) {
            if (*scratch != NULL) {
                (void)rf_accel_sync(ax);
                ax->ops->free(ax, *scratch);
            }
            *scratch = NULL;
            *scratch_cap = 0;
            as = ax->ops->alloc(ax, need ? need : 1, scratch);
            *scratch_cap = as == RF_OK ? need : 0;
        }
        if (as == RF_OK && need > 0)
            as = ax->ops->copy(ax, *scratch, h, need, RF_COPY_H2D, NULL);
        if (as == RF_OK) /* h is freed next: the copy must be done */
            as = rf_accel_sync(ax);
        free(h);
        if (as != RF_OK)
            return rf_err_set(err, as, "trainer rank %d: no device copy of %s's rounded F32 "
                              "master on %s device %d", tr->me.world_rank, t->name,
                              ax->ops->name, ax->device);
        w = *scratch;
    }
    void *q = tr->buf[ei], *sc = tr->buf[si];
    int64_t spitch = tr->reg[si].c1 - tr->reg[si].c0;
    rf_dtype_t sdt_scale = tr->man->entries[si].dtype;
    rf_status_t st;
    if (rowq)
        st = qo->fp8_quantize_rows(ax, w, dt, g.rows, g.K, g.K, mq == RF_QUANT_FP8_CHANNEL,
                                   (float *)sc, 0, g.rows, 0, g.K, (uint8_t *)q, g.K, NULL);
    else if (wna16)
        st = qo->wna16_quantize(ax, w, dt, g.rows, g.cols, g.cols, tr->inv->group_size,
                                (uint32_t *)q, g.cols / 8, sc, sdt_scale, spitch, NULL);
    else
        st = qo->fp8_quantize(ax, w, dt, g.rows, g.cols, g.cols, (uint8_t *)q, g.cols, sc,
                              sdt_scale, spitch, NULL);
    if (st != RF_OK) /* the host table refuses non-finite input at once */
        return given_bad_input(tr, ei, src, sdt, ax, st, "the quantizer refused it", err);
    db->call_entry[db->ncalls++] = ei;
    db->quant_scale[si] = true;
    return RF_OK;
}

rf_status_t rf_trainer_produce_given_device(rf_trainer_t *tr, const void *const *logical,
                                            const rf_dtype_t *dtypes, struct rf_accel *ax,
                                            rf_err_t *err)
{
    double t0 = rf_time_now();
    const rf_quant_ops_t *qo = rf_quant_ops_for(ax);
    if (qo == NULL)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "trainer rank %d: no format kernels for the "
                          "%s accelerator", tr->me.world_rank, ax->ops->name);
    void *scratch = NULL;
    size_t scratch_cap = 0;
    size_t n = (size_t)(tr->man->n > 0 ? tr->man->n : 1);
    dev_batch_t db = {malloc(n * sizeof(int)), 0, calloc(n, sizeof(bool)),
                      malloc(n * sizeof(int64_t[2]))};
    rf_status_t st = RF_OK;
    if (!db.call_entry || !db.quant_scale || !db.shape)
        st = rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory", tr->me.world_rank);
    tr->stats.bytes_produced = 0;
    tr->stats.bytes_read = 0;
    for (int i = 0; i < tr->man->n && st == RF_OK; i++) {
        const rf_manifest_entry_t *e = &tr->man->entries[i];
        const rf_tensor_t *t = &tr->inv->tensors[e->tensor];
        if (!tr->has[i] || !rf_manifest_trainer_quantizes(tr->inv, t, NULL))
            continue; /* the caller's own bytes, read in place by the pack */
        const rf_region_t *r = &tr->reg[i];
        tr->stats.bytes_produced +=
            (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0) * entry_es(tr, i);
        if (t->param == RF_PARAM_WEIGHT || t->param == RF_PARAM_WEIGHT_PACKED) {
            if (logical[i] == NULL)
                st = rf_err_set(err, RF_ERR_INTERNAL, "trainer rank %d: %s: no unquantized "
                                "shard given to quantize", tr->me.world_rank, t->name);
            else
                st = quantize_given_device(tr, i, logical[i], dtypes[i], ax, qo, &scratch,
                                           &scratch_cap, &db, err);
        } else if (t->param == RF_PARAM_WEIGHT_SHAPE) {
            st = put_weight_shape_device(tr, i, ax, tr->buf[i], &db, err);
        }
        /* scales are written by their weight's quantization */
    }
    rf_status_t ss = rf_accel_sync(ax);
    if (st == RF_OK && ss != RF_OK)
        st = rf_err_set(err, ss, "trainer rank %d: the device quantizers failed on %s device %d",
                        tr->me.world_rank, ax->ops->name, ax->device);
    /* the quantizers' verdict, once for the whole production (no synchronization per call) */
    int64_t bad = -1;
    unsigned why = 0;
    if (st == RF_OK && db.ncalls > 0) {
        ss = qo->check(ax, NULL, &bad, &why);
        if (ss != RF_OK) {
            st = rf_err_set(err, ss, "trainer rank %d: the device quantizers failed on %s "
                            "device %d", tr->me.world_rank, ax->ops->name, ax->device);
        } else if (bad >= 0 && (bad >= db.ncalls || (why & RF_QUANT_BAD_INPUT))) {
            int ei = bad < db.ncalls ? db.call_entry[bad] : -1;
            st = ei >= 0 ? given_bad_input(tr, ei, logical[ei], dtypes[ei], ax, RF_ERR_INVALID,
                                           "its unquantized values are not all finite", err)
                         : rf_err_set(err, RF_ERR_INVALID, "trainer rank %d: a device quantizer "
                                      "met non-finite input", tr->me.world_rank);
        }
    }
    if (st == RF_OK) /* the scales the quantizers wrote are checked only when one was bad */
        st = check_device_scales(tr, ax, NULL, NULL, bad >= 0 ? NULL : db.quant_scale, err);
    if (scratch != NULL)
        ax->ops->free(ax, scratch);
    free(db.call_entry);
    free(db.quant_scale);
    free(db.shape);
    produce_done(tr, t0);
    return st;
}
