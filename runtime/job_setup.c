/*
 * refit: the job's setup (collective over MPI_COMM_WORLD, plain MPI), job_setup.
 *
 * Topology and model config broadcast and hash agreement, placement, the transports a topology
 * may ask for in this build, accelerators, inventory, runtime storage and reload plans on
 * rollout ranks, the manifest built by trainer rank 0 and agreed, the chunk plan, the gate's
 * expectation, trainer shards, the resolved fault; then the transport's own setup: nccl
 * communicators and resident trainer weights, the trainer's stage gather on the transport
 * (rf_trainer_attach; the tests' MPI wire), ipc arenas and where every rollout rank reads every piece. Every step ends
 * in agree_status, so every rank fails with the lowest failing rank's message, together. Also the
 * reload plan's broadcast or p2p form, which setup builds and the update loop and the cold
 * check apply chunks through (job_plan_build, job_apply_pieces).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refit/formats.h"
#include "refit/loader.h"
#include "refit/log.h"
#include "refit/transport_nccl.h"
#include "job_int.h"

/* Every rank learns the lowest failing rank's message (plain collective; setup only). */
static rf_status_t agree_status(job_t *j, MPI_Comm comm, rf_status_t st, rf_err_t *err)
{
    int size, rank, mine, first;
    struct {
        int status;
        char msg[RF_ERR_MSG_MAX];
    } rep;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    mine = st == RF_OK ? size : rank;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == size)
        return RF_OK;
    rep.status = (int)(err->status != RF_OK ? err->status : st);
    snprintf(rep.msg, sizeof(rep.msg), "%s", err->msg);
    MPI_Bcast(&rep, (int)sizeof(rep), MPI_BYTE, first, comm);
    (void)j;
    if (rank != first) {
        rf_err_clear(err);
        int wr;
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        rf_err_set(err, (rf_status_t)rep.status, "%s", rep.msg);
    }
    return (rf_status_t)rep.status;
}

/* ---- the reload plan, broadcast or p2p ---------------------------------------------------- */

/* p2p: what each trainer rank sends this rank of a tensor (the schedule's rectangles). */
static int p2p_senders(void *ctx, int tensor, int *snd, int64_t (*rect)[4], int max)
{
    job_t *j = ctx;
    rf_owner_t own[RF_MAX_OWNERS];
    int n = rf_p2p_rects(&j->topo, &j->inv, j->rank, tensor, own);
    n = n < max ? n : max;
    for (int i = 0; i < n; i++) {
        snd[i] = own[i].rank;
        rect[i][0] = own[i].reg.r0;
        rect[i][1] = own[i].reg.r1;
        rect[i][2] = own[i].reg.c0;
        rect[i][3] = own[i].reg.c1;
    }
    return n;
}

/* The reload plan: sender -1 (broadcast) or sender-keyed rectangles (p2p). */
rf_status_t job_plan_build(job_t *j, rf_plan_t *p, rf_storage_t *st, rf_format_t *fmt,
                           rf_err_t *err)
{
    if (j->p2p)
        return rf_plan_build_p2p(p, &j->inv, &j->me.rc, st, fmt, j->o->policy, p2p_senders, j,
                                 err);
    return rf_plan_build(p, &j->inv, &j->me.rc, st, fmt, j->o->policy, err);
}

/* Applies one chunk's pieces to plan p: the global plan's (broadcast, sender -1) or this
 * rank's p2p plan's rectangles (sender-keyed). dev: payload is device memory of the storage's
 * device (nccl's chunk buffer). */
rf_status_t job_apply_pieces(job_t *j, rf_plan_t *p, const rf_chunk_t *chunk,
                             const rf_chunk_piece_t *pieces, const void *payload, bool dev,
                             rf_err_t *err)
{
    const rf_p2p_recv_t *me = j->p2p ? rf_p2p_schedule_find(&j->p2p_s, j->rank) : NULL;
    for (size_t k = 0; k < chunk->piece_count; k++) {
        const rf_chunk_piece_t *pc = &pieces[k];
        rf_piece_src_t ps = {.sender = -1,
                             .row_begin = pc->row_begin,
                             .row_end = pc->row_end,
                             .src = (const char *)payload + pc->offset,
                             .mem = dev ? RF_PIECE_DEVICE : RF_PIECE_HOST,
                             .chunk = chunk->seq};
        if (me != NULL) {
            const rf_p2p_rect_t *q = &me->rects[pc->item];
            ps.tensor = q->tensor;
            ps.sender = q->sender;
            ps.row_begin += (uint64_t)q->reg.r0;
            ps.row_end += (uint64_t)q->reg.r0;
            ps.col_begin = q->reg.c0;
            ps.col_end = q->reg.c1;
            ps.src_pitch = q->reg.c1 - q->reg.c0;
        } else {
            ps.tensor = j->man.entries[pc->item].tensor;
        }
        RF_CHECK(rf_plan_apply(p, &ps, err));
    }
    return RF_OK;
}

static rf_status_t setup_rollout(job_t *j, rf_err_t *err)
{
    RF_CHECK(rf_inventory_check_rollout(&j->inv, &j->me.rc, err));
    /* the format owner: --format-owner, else the one for (quantization, backend) */
    j->fmt.ops = j->o->format ? rf_format_lookup(j->o->format)
                              : rf_format_for(j->topo.quantization, (int)j->topo.r_backend);
    if (j->fmt.ops == NULL)
        return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: no format owner for quantization %s on "
                          "backend %s",
                          j->topo.file, rf_quant_name(j->topo.quantization),
                          rf_backend_name(j->topo.r_backend));
    j->fmt.quant = j->topo.quantization;
    j->fmt.backend = (int)j->topo.r_backend;
    j->fmt.accel = j->accel; /* NULL: runtime storage on the host */
    RF_CHECK(rf_storage_init(&j->st, j->inv.nmodules, err));
    RF_CHECK(rf_plan_alloc_storage(&j->inv, &j->me.rc, &j->fmt, &j->st, false, err));
    RF_CHECK(job_plan_build(j, &j->plan, &j->st, &j->fmt, err));
    j->plan_ready = true;
    memcpy(j->plan_layers, j->plan.stats.layers, sizeof(j->plan_layers));
    rf_info("plan: %" PRIu64 " direct, %" PRIu64 " runtime-view, %" PRIu64 " layerwise layers",
            j->plan_layers[0], j->plan_layers[1], j->plan_layers[2]);
    j->snap = calloc((size_t)j->st.nslots + 1, sizeof(char *));
    j->verified = calloc((size_t)j->inv.ntensors + 1, 1);
    if (j->snap == NULL || j->verified == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    if (j->o->reference)
        RF_CHECK(rf_ref_load(j->o->reference, &j->ref, err));
    return RF_OK;
}

/* ---- ipc transport (colocated; DESIGN.md section 9) ----------------------------------- */

/*
 * Rows [lo, hi) of checkpoint tensor `tensor` that the loaders of a rollout rank with
 * coordinates rc read: the loader's own row window (rf_load_need_rows, runtime/loader.c) for
 * the vocab, QKV and merged modules; every row where this is not worked out (row-parallel
 * columns, experts), for a tensor the loaders do not store (wna16 weight_shape, which the
 * planner reads whole) and for an fp8-tensor scale (one value every rank loads): all rows,
 * which only makes fewer pieces in place.
 */
static void ipc_rows_read(const job_t *j, const rf_rollout_coords_t *rc, int tensor,
                          uint64_t *lo_p, uint64_t *hi_p)
{
    const rf_tensor_t *t = &j->inv.tensors[tensor];
    rf_module_kind_t kind = j->inv.modules[t->module].kind;
    int64_t rows = (int64_t)rf_tensor_rows(t), lo = 0, n = rows, r0, r1;
    /* an fp8-tensor scale: its one value is read on every rank (runtime/loader.c) */
    if ((kind == RF_MOD_VOCAB || kind == RF_MOD_QKV || kind == RF_MOD_MERGED) &&
        t->param != RF_PARAM_TENSOR_SCALE && rf_load_need_rows(&j->inv, rc, tensor, &r0, &r1)) {
        lo = r0;
        n = r1 - r0;
    }
    lo = lo < 0 ? 0 : (lo > rows ? rows : lo);
    n = lo + n > rows ? rows - lo : n;
    *lo_p = (uint64_t)lo;
    *hi_p = (uint64_t)(lo + (n < 0 ? 0 : n));
}

/*
 * Where every rollout rank reads every piece: in place from its pair's weights arena when the
 * pair's shard of the tensor is full-width and holds every row that rank's loaders read of
 * the piece, staged otherwise. A chunk is staged when any rollout rank needs it staged. Pure
 * and the same on every rank; fills j->ipc_staged and, on rollout ranks, j->ipc_pieces.
 */
static rf_status_t ipc_plan(job_t *j, rf_err_t *err)
{
    const rf_chunk_plan_t *cp = j->cplan;
    uint64_t *offs = calloc((size_t)j->man.n + 1, sizeof(uint64_t));
    rf_ipc_piece_t *mine = calloc(cp->n_pieces + 1, sizeof(rf_ipc_piece_t));
    j->ipc_staged = calloc(cp->n_chunks + 1, 1);
    j->ipc_piece_staged = calloc(cp->n_pieces + 1, 1);
    if (offs == NULL || mine == NULL || j->ipc_staged == NULL || j->ipc_piece_staged == NULL) {
        free(offs);
        free(mine);
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    }
    uint64_t inplace = 0, staged = 0;
    for (int r = 0; r < j->R; r++) {
        rf_rank_info_t ri, pi;
        int w = j->receivers[r];
        if (rf_topology_rank_info(&j->topo, w, &ri) != RF_OK ||
            rf_topology_rank_info(&j->topo, j->pair_of[w], &pi) != RF_OK ||
            pi.role != RF_ROLE_TRAINER) {
            free(offs);
            free(mine);
            return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: transport ipc: rollout rank %d pairs "
                              "with rank %d, not a trainer rank",
                              j->topo.file, w, j->pair_of[w]);
        }
        rf_trainer_arena_layout(&j->topo, &j->inv, &j->man, &pi, offs);
        for (size_t c = 0; c < cp->n_chunks; c++) {
            const rf_chunk_t *ch = &cp->chunks[c];
            for (size_t k = 0; k < ch->piece_count; k++) {
                size_t gi = ch->piece_begin + k;
                const rf_chunk_piece_t *pc = &cp->pieces[gi];
                int tensor = j->man.entries[pc->item].tensor;
                const rf_tensor_t *t = &j->inv.tensors[tensor];
                rf_ipc_piece_t ip = {.staged = 1};
                rf_region_t reg;
                uint64_t lo, hi;
                ipc_rows_read(j, &ri.rc, tensor, &lo, &hi);
                lo = lo < pc->row_begin ? pc->row_begin : lo;
                hi = hi > pc->row_end ? pc->row_end : hi;
                if (hi <= lo) {
                    ip = (rf_ipc_piece_t){0, pc->row_begin, pc->row_begin, 0};
                } else if (rf_trainer_shard(&j->topo, &j->inv, t, &pi, &reg) && reg.c0 == 0 &&
                           (uint64_t)reg.c1 * (uint64_t)rf_dtype_size(j->man.entries[pc->item]
                                                                          .dtype) ==
                               j->items[pc->item].row_bytes &&
                           (uint64_t)reg.r0 <= lo && hi <= (uint64_t)reg.r1 &&
                           offs[pc->item] != UINT64_MAX) {
                    ip = (rf_ipc_piece_t){0, lo, hi,
                                          offs[pc->item] + (lo - (uint64_t)reg.r0) *
                                                               j->items[pc->item].row_bytes};
                }
                if (ip.staged)
                    j->ipc_staged[c] = j->ipc_piece_staged[gi] = 1;
                if (w == j->rank) {
                    mine[gi] = ip;
                    inplace += !ip.staged;
                    staged += ip.staged;
                }
            }
        }
    }
    free(offs);
    if (job_is_rollout(j)) {
        j->ipc_pieces = mine;
        rf_info("ipc: rank %d reads %" PRIu64 " pieces in place from rank %d, %" PRIu64
                " staged",
                j->rank, inplace, j->pair_of[j->rank], staged);
    } else {
        free(mine);
    }
    return RF_OK;
}

/*
 * Arenas (collective): every trainer rank moves its shards into a weights arena and sends
 * the handle to its pair; stage senders with chunks to stage export `buffers` staging slots
 * and broadcast the handle; rollout ranks map their pair's weights arena and every staging
 * arena once for the job; after a barrier the exporters unlink the names (no /dev/shm
 * object outlives setup, even if a process dies later).
 */
static rf_status_t setup_ipc(job_t *j, rf_err_t *err)
{
    char id[32] = "", name[RF_IPC_NAME_MAX];
    rf_ipc_handle_t wh, sh;
    rf_status_t st = RF_OK;
    memset(&wh, 0, sizeof(wh));
    if (j->rank == 0) {
        /* unique per job: rank 0's pid and clock; REFIT_IPC_TAG prefixes it (tests) */
        const char *tag = getenv("REFIT_IPC_TAG");
        snprintf(id, sizeof(id), "%.8s%s%d-%lx", tag ? tag : "", tag ? "-" : "", (int)getpid(),
                 (unsigned long)(rf_time_now() * 1e6) & 0xffffffu);
    }
    MPI_Bcast(id, (int)sizeof(id), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!job_is_rollout(j)) {
        uint64_t *offs = calloc((size_t)j->man.n + 1, sizeof(uint64_t));
        void *base = NULL;
        if (offs == NULL)
            st = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
        uint64_t bytes = st == RF_OK ? rf_trainer_arena_layout(&j->topo, &j->inv, &j->man,
                                                               &j->me, offs)
                                     : 0;
        snprintf(name, sizeof(name), "/refit-%s-%d-w", id, j->rank);
        if (st == RF_OK)
            st = rf_xfer_ipc_export(j->xfer, RF_IPC_WEIGHTS, name, bytes ? bytes : 1, &base, &wh,
                                    err);
        if (st == RF_OK && j->ipc_dev) {
            /* device arena: the trainer's weights are resident there. Generator updates are
             * produced on the device (gen_fill, device quantizers); checkpoint updates are read
             * on the host into a pinned mirror with the arena's layout and copied h2d
             * (produce_arena) */
            j->ipc_wdev = base;
            j->ipc_wbytes = bytes ? bytes : 1;
            rf_status_t hs = RF_OK;
            bool staged = false; /* some piece is gathered and packed on the host */
            for (size_t k = 0; k < j->cplan->n_pieces && !staged; k++)
                staged = j->ipc_piece_staged[k] != 0;
            if (j->ck != NULL || staged)
                hs = j->accel->ops->alloc_host(j->accel, (size_t)j->ipc_wbytes, &j->ipc_mirror);
            if (hs != RF_OK)
                st = rf_err_set(err, hs, "rank %d: no %" PRIu64 "-byte pinned host mirror of "
                                "its ipc weights arena", j->rank, j->ipc_wbytes);
            else if (j->ipc_mirror != NULL)
                base = j->ipc_mirror;
        }
        if (st == RF_OK)
            rf_trainer_use_arena(&j->tr, base, offs);
        free(offs);
        j->tr.gathered = j->ipc_piece_staged; /* only staged pieces are gathered and packed */
    }
    memset(&sh, 0, sizeof(sh));
    bool stage_sender = false;
    for (int p = 0; p < j->cplan->n_stages; p++)
        stage_sender |= j->senders[p] == j->rank;
    if (st == RF_OK && stage_sender) {
        bool any = false;
        for (int p = 0; p < j->cplan->n_stages; p++) {
            const rf_chunk_stage_range_t *sr = &j->cplan->stages[p];
            for (uint32_t k = 0; j->senders[p] == j->rank && k < sr->chunk_count; k++)
                any |= j->ipc_staged[sr->chunk_begin + k] != 0;
        }
        uint64_t slot = (j->cplan->chunk_bytes + 4095) & ~(uint64_t)4095;
        int buffers = j->topo.buffers ? j->topo.buffers : 2;
        void *base = NULL;
        snprintf(name, sizeof(name), "/refit-%s-%d-s", id, j->rank);
        if (any)
            st = rf_xfer_ipc_export(j->xfer, RF_IPC_STAGING, name, slot * (uint64_t)buffers,
                                    &base, &sh, err);
    }
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    /* weights handles: trainer -> its pair */
    if (!job_is_rollout(j))
        MPI_Send(&wh, (int)sizeof(wh), MPI_BYTE, j->pair_of[j->rank], 0x1f1, MPI_COMM_WORLD);
    else
        MPI_Recv(&wh, (int)sizeof(wh), MPI_BYTE, j->pair_of[j->rank], 0x1f1, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (job_is_rollout(j))
        st = rf_xfer_ipc_import(j->xfer, j->pair_of[j->rank], RF_IPC_WEIGHTS, &wh, err);
    /* staging handles: each stage sender to everyone */
    for (int p = 0; p < j->cplan->n_stages; p++) {
        rf_ipc_handle_t h = sh;
        MPI_Bcast(&h, (int)sizeof(h), MPI_BYTE, j->senders[p], MPI_COMM_WORLD);
        if (st == RF_OK && job_is_rollout(j))
            st = rf_xfer_ipc_import(j->xfer, j->senders[p], RF_IPC_STAGING, &h, err);
    }
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err)); /* every importer mapped: unlink */
    st = rf_xfer_ipc_unlink(j->xfer, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    return RF_OK;
}

/* ---- accelerators and the nccl transport ---------------------------------------------- */

/* A rollout rank with a device from rf_topology_place opens the "cuda" accelerator on it
 * (cudaSetDevice); its runtime storage, staging and LAYERWISE scratch then live there. On
 * colocated ipc the trainer rank opens its device too (its weights arena, pinned mirror).
 * REFIT_TEST_DEVICE_ACCEL=host-device (tests only) gives a rank without a GPU the host
 * implementation tagged as device memory, so the CPU suite runs the device branches. */
static rf_status_t setup_accel(job_t *j, rf_err_t *err)
{
    const char *emu = getenv("REFIT_TEST_DEVICE_ACCEL");
    if ((job_is_rollout(j) || j->ipc) && !j->nccl && j->place.device < 0 && emu != NULL &&
        strcmp(emu, "host-device") == 0) {
        /* tests only: the device branches on host memory (CPU CI covers the GPU data path) */
        rf_status_t s = rf_accel_open("host-device", 0, &j->accel);
        if (s != RF_OK)
            return rf_err_set(err, s, "rank %d: cannot open the host-device accelerator", j->rank);
        return RF_OK;
    }
    if ((!job_is_rollout(j) && !j->ipc && !j->nccl) || j->place.device < 0)
        return RF_OK;
    int n = 0;
    const rf_accel_ops_t *cu = rf_accel_lookup("cuda");
    if (!rf_accel_cuda_available() || cu->device_count(&n) != RF_OK || j->place.device >= n)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: %s.gpus puts rank %d on GPU %d, but refit was built without "
                          "CUDA or that CUDA device is not present (%d found)",
                          j->topo.file, job_is_rollout(j) ? "rollout" : "trainer", j->rank,
                          j->place.device, n);
    rf_status_t s = rf_accel_open("cuda", j->place.device, &j->accel);
    if (s != RF_OK)
        return rf_err_set(err, s, "%s: rank %d: cannot open CUDA device %d (%s.gpus)", j->topo.file,
                          j->rank, j->place.device, job_is_rollout(j) ? "rollout" : "trainer");
    rf_info("rank %d: %s on GPU %d (%s)", j->rank,
            job_is_rollout(j) ? "rollout storage"
            : j->nccl         ? "nccl chunk buffers"
                              : "ipc weights arena",
            j->place.device, j->place.device_id);
    return RF_OK;
}

/* Broadcast mode with more than one trainer rank per stage: the stage senders gather. */
static bool stages_gather(const job_t *j)
{
    return !j->p2p && j->T / (j->topo.t_pp > 0 ? j->topo.t_pp : 1) > 1;
}

/*
 * nccl trainers whose chunks come from their own shard alone (p2p: every trainer rank; broadcast:
 * a stage sender with no stage gather) keep their weights on their GPU, as a trainer's weights
 * are: generated (and quantized) there by the training step before the update begins, and packed
 * device to device into the chunk buffer (rf_xfer_config_t.pack_device), so no byte crosses
 * PCIe. The host path stays for checkpoint sources (read on the host), integrity trailers
 * (hashed on the host), injected faults (which edit host bytes) and stages with a gather.
 */
static bool nccl_resident_possible(const job_t *j) /* every condition but integrity's */
{
    return j->nccl && !job_is_rollout(j) && j->accel != NULL && j->place.device >= 0 &&
           j->ck == NULL && j->fault.kind == RF_FAULT_NONE &&
           (j->p2p || (j->tr.sender && !rf_xfer_nccl_has_gather(j->xfer, j->me.p)));
}

static bool nccl_resident_eligible(const job_t *j)
{
    return nccl_resident_possible(j) && !j->integrity;
}

static rf_status_t setup_nccl_resident(job_t *j, rf_err_t *err)
{
    if (!nccl_resident_eligible(j))
        return RF_OK;
    uint64_t *offs = malloc(((size_t)j->man.n + 1) * sizeof(uint64_t));
    if (offs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", j->rank);
    uint64_t bytes = rf_trainer_arena_layout(&j->topo, &j->inv, &j->man, &j->me, offs);
    rf_status_t st = j->accel->ops->alloc(j->accel, (size_t)(bytes ? bytes : 1), &j->nccl_wdev);
    if (st == RF_OK) {
        rf_trainer_use_arena(&j->tr, j->nccl_wdev, offs);
        j->nccl_resident = true;
        /* the source packs onto the device chunk buffer: copies launched on this accelerator */
        j->src.mem = RF_PACK_DEVICE;
        j->src.accel = j->accel;
        j->src.device = j->place.device;
    } else {
        rf_err_set(err, st, "trainer rank %d: no %" PRIu64 "-byte weights arena on GPU %d",
                   j->rank, bytes, j->place.device);
    }
    free(offs);
    return st;
}

/* ---- setup ---------------------------------------------------------------------------- */

rf_status_t job_setup(job_t *j, rf_err_t *err)
{
    rf_status_t st;
    RF_CHECK(rf_model_load_topology(j->o->topology, MPI_COMM_WORLD, &j->topo, &j->cfg, err));
    j->T = rf_topology_trainer_size(&j->topo);
    j->R = rf_topology_rollout_size(&j->topo);
    RF_CHECK(rf_topology_rank_info(&j->topo, j->rank, &j->me));
    st = rf_topology_place(&j->topo, MPI_COMM_WORLD, &j->place, err);
    if (st != RF_OK)
        return st;
    /* mpi (rollout storage on GPUs when rollout.gpus lists them), or ipc on colocated
     * topologies: host shared memory on CPU, CUDA IPC when trainer.gpus == rollout.gpus
     * (each pair shares its GPU) */
    j->ipc = j->topo.transport == RF_TRANSPORT_IPC && j->topo.colocated;
    j->nccl = j->topo.transport == RF_TRANSPORT_NCCL;
    if (j->nccl && (!rf_xfer_nccl_built() || j->topo.t_ngpus == 0 || j->topo.r_ngpus == 0)) {
        /* every rank of an NCCL communicator needs its own GPU (two on one GPU were refused
         * by rf_topology_place, naming them) */
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: transfer.transport: nccl %s", j->topo.file,
                        !rf_xfer_nccl_built()
                            ? "is not available in this build (refit built without CUDA and NCCL)"
                            : "needs trainer.gpus and rollout.gpus (every rank of an NCCL "
                              "communicator on its own GPU)");
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    bool same_gpus = j->topo.t_ngpus == j->topo.r_ngpus &&
                     memcmp(j->topo.t_gpus, j->topo.r_gpus,
                            sizeof(int) * (size_t)j->topo.t_ngpus) == 0;
    if ((j->topo.transport != RF_TRANSPORT_MPI && !j->ipc && !j->nccl) ||
        (j->ipc && (j->topo.t_ngpus > 0 || j->topo.r_ngpus > 0) && !same_gpus)) {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: transfer.transport: %s%s%s is not available in this build (mpi, "
                        "or ipc with colocated: true on CPU or with trainer.gpus == "
                        "rollout.gpus)",
                        j->topo.file, rf_transport_name(j->topo.transport),
                        (j->topo.t_ngpus || j->topo.r_ngpus) ? " with gpus" : "",
                        j->topo.transport == RF_TRANSPORT_IPC && !j->topo.colocated
                            ? " without colocated: true"
                            : "");
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    if (j->ipc && j->place.nnodes > 1) {
        /* host backend: rollout ranks map the stage senders' staging arenas too */
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: transfer.transport: ipc on the host backend needs one node (%d "
                        "nodes)",
                        j->topo.file, j->place.nnodes);
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    /* gpus on the mpi transport: rollout storage on the GPU, chunks through host memory;
     * trainers stay on the host there. Trainers on GPUs only on colocated ipc (the CUDA IPC
     * arenas); rf_topology_place refused two ranks on one GPU other than such a pair. */
    if (j->topo.t_ngpus > 0 && !j->ipc && !j->nccl) {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: trainer.gpus: trainers run on the host in this build except on "
                        "colocated ipc with trainer.gpus == rollout.gpus (only rollout.gpus "
                        "places runtime storage on a GPU)",
                        j->topo.file);
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    st = setup_accel(j, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    j->p2p = j->topo.mode == RF_MODE_P2P;
    if (j->p2p && (j->ipc || (j->topo.r_ngpus > 0 && !j->nccl))) {
        st = rf_err_set(err, RF_ERR_UNSUPPORTED,
                        "%s: transfer.mode: p2p runs on the mpi transport with host storage in "
                        "this build (not %s%s)",
                        j->topo.file, rf_transport_name(j->topo.transport),
                        j->topo.r_ngpus > 0 ? " with rollout.gpus" : "");
        return agree_status(j, MPI_COMM_WORLD, st, err);
    }
    MPI_Comm_split(MPI_COMM_WORLD, (int)j->me.role, j->rank, &j->role_comm);
    MPI_Comm_split(MPI_COMM_WORLD, job_is_rollout(j) ? j->me.engine : MPI_UNDEFINED, j->rank,
                   &j->engine_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &j->stats_comm);

    st = rf_inventory_build(&j->cfg, j->topo.quantization, j->topo.group_size, &j->inv, err);
    if (st == RF_OK) /* rollout.layout: the engine tensors' names and shapes */
        st = rf_inventory_apply_layout(&j->inv, j->topo.r_layout, err);
    if (st == RF_OK && j->o->checkpoint)
        st = rf_ckpt_open(j->o->checkpoint, &j->ck, err);
    if (st == RF_OK && j->ck != NULL) { /* OPT's published decoder.* names (DESIGN.md 4) */
        const char *from[4], *to[4];
        int na = rf_family_aliases(j->inv.cfg.family, from, to, 4);
        for (int a = 0; a < na && st == RF_OK; a++) {
            size_t n = 0;
            st = rf_ckpt_rename_prefix(j->ck, from[a], to[a], &n, err);
            if (st == RF_OK && n > 0 && j->rank == 0)
                rf_info("checkpoint %s: %zu tensor(s) named %s* read as %s*", j->o->checkpoint,
                        n, from[a], to[a]);
        }
    }
    if (st == RF_OK && job_is_rollout(j))
        st = setup_rollout(j, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));

    /* manifest: trainer rank 0 builds it from the inventory and the checkpoint headers, once
     * the checkpoint's own config.json (if any) agrees with the topology's; rank 0 also keeps
     * the reference, to count its entries against what the oracle checked */
    st = RF_OK;
    if (j->rank == 0 && j->ck != NULL)
        st = rf_ckpt_check_config(j->ck, j->o->checkpoint, &j->cfg, j->topo.quantization,
                                  j->topo.group_size, err);
    if (j->rank == 0 && st == RF_OK)
        st = rf_manifest_build(&j->inv, &j->topo, j->ck, j->o->checkpoint, &j->man, err);
    if (j->rank == 0 && st == RF_OK && j->ck != NULL && j->o->reference && j->ref == NULL)
        st = rf_ref_load(j->o->reference, &j->ref, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    RF_CHECK(rf_manifest_agree(&j->man, 0, &j->inv, &j->topo, MPI_COMM_WORLD, err));
    st = RF_OK;
    for (int i = 0; i < j->man.n && st == RF_OK && job_is_rollout(j); i++)
        st = rf_plan_set_source_dtype(&j->plan, j->man.entries[i].tensor, j->man.entries[i].dtype,
                                      err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));

    /* chunk plan (every rank computes the same one) */
    j->items = calloc((size_t)j->man.n + 1, sizeof(rf_chunk_item_t));
    j->item_tensor = calloc((size_t)j->man.n + 1, sizeof(int));
    if (j->items == NULL || j->item_tensor == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < j->man.n; i++) {
        const rf_tensor_t *t = &j->inv.tensors[j->man.entries[i].tensor];
        j->item_tensor[i] = j->man.entries[i].tensor;
        j->items[i].stage = j->man.entries[i].stage;
        j->items[i].rows = rf_tensor_rows(t);
        j->items[i].bytes = j->man.entries[i].nbytes; /* the manifest's dtype */
        j->items[i].row_bytes = j->items[i].rows ? j->items[i].bytes / j->items[i].rows : 0;
        j->items[i].name = t->name;
    }
    /* on by default (topology default true): --no-integrity or transfer.integrity: false
     * turns it off, and the table says which */
    j->integrity = j->o->integrity > 0 || (j->o->integrity == 0 && j->topo.integrity);
    j->integrity_off = j->integrity          ? NULL
                       : j->o->integrity < 0 ? "--no-integrity"
                                             : "transfer.integrity: false";
    st = rf_chunk_plan_create(j->items, (size_t)j->man.n,
                              rf_xfer_plan_bytes(j->topo.chunk_bytes, j->integrity), &j->cplan,
                              err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));

    /* schedule: stage senders, receivers, and the gate's expectation */
    j->senders = calloc((size_t)j->topo.t_pp + 1, sizeof(int));
    j->receivers = calloc((size_t)j->R + 1, sizeof(int));
    if (!j->senders || !j->receivers)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    for (int p = 0; p < j->topo.t_pp; p++)
        j->senders[p] = rf_topology_trainer_rank(&j->topo, 0, 0, 0, p);
    for (int r = 0; r < j->R; r++)
        j->receivers[r] = j->T + r;
    RF_CHECK(rf_gate_expect_init(&j->expect, j->size, err));
    if (j->ipc) {
        j->pair_of = calloc((size_t)j->size, sizeof(int));
        if (j->pair_of == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
        MPI_Allgather(&j->place.pair_rank, 1, MPI_INT, j->pair_of, 1, MPI_INT, MPI_COMM_WORLD);
        st = RF_OK;
        for (int r = 0; r < j->size && st == RF_OK; r++)
            if (j->pair_of[r] < 0 || j->pair_of[r] >= j->size)
                st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: transport ipc: rank %d has no pair",
                                j->topo.file, r);
        RF_CHECK(st);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, ipc_plan(j, err), err));
    }
    for (int p = 0; p < j->cplan->n_stages && j->ipc; p++) {
        /* ipc: per chunk SEQ (stage sender -> receiver) and ACK (back); READY per pair */
        const rf_chunk_stage_range_t *sr = &j->cplan->stages[p];
        uint64_t seq_bytes = RF_IPC_SEQ_BYTES + (j->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
        for (int r = 0; r < j->R; r++) {
            size_t s = (size_t)j->senders[p], d = (size_t)j->receivers[r];
            j->expect.chunks[s * j->size + d] += sr->chunk_count;
            j->expect.bytes[s * j->size + d] += sr->chunk_count * seq_bytes;
            j->expect.chunks[d * j->size + s] += sr->chunk_count;
            j->expect.bytes[d * j->size + s] += sr->chunk_count * (uint64_t)RF_IPC_ACK_BYTES;
        }
    }
    for (int q = 0; q < j->T && j->ipc; q++) {
        j->expect.chunks[(size_t)q * j->size + j->pair_of[q]] += 1;
        j->expect.bytes[(size_t)q * j->size + j->pair_of[q]] += RF_IPC_ACK_BYTES;
    }
    if (j->p2p) {
        /* p2p: this rank's part of the schedule (the pairs it sends or receives); rank 0's
         * gate expectation from every rank's part, both ends of each pair agreeing */
        st = rf_p2p_schedule_build_rank(&j->topo, &j->inv, &j->man,
                                        rf_xfer_plan_bytes(j->topo.chunk_bytes, j->integrity),
                                        j->rank, &j->p2p_s, err);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
        uint64_t per = RF_CHUNK_HEADER_BYTES + (j->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
        st = rf_p2p_expect_agree(&j->p2p_s, j->rank, per, MPI_COMM_WORLD, &j->expect, err);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    }
    for (int p = 0; p < j->cplan->n_stages && !j->ipc && !j->p2p; p++) {
        const rf_chunk_stage_range_t *sr = &j->cplan->stages[p];
        uint64_t bytes = sr->payload_bytes +
                         (uint64_t)sr->chunk_count *
                             (RF_CHUNK_HEADER_BYTES + (j->integrity ? RF_CHUNK_TRAILER_BYTES : 0));
        for (int r = 0; r < j->R; r++) {
            j->expect.chunks[(size_t)j->senders[p] * j->size + j->receivers[r]] += sr->chunk_count;
            j->expect.bytes[(size_t)j->senders[p] * j->size + j->receivers[r]] += bytes;
        }
    }

    st = RF_OK;
    if (!job_is_rollout(j)) {
        st = rf_trainer_init(&j->tr, &j->topo, &j->inv, &j->man, j->cplan, &j->me, j->role_comm,
                             err);
        j->tr_ready = st == RF_OK;
    }
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    RF_CHECK(job_fault_resolve(j, err)); /* same options and topology everywhere: same answer */
    RF_CHECK(rf_ctl_create(MPI_COMM_WORLD, &j->ctl, err));
    RF_CHECK(rf_xfer_create(j->ctl, rf_transport_name(j->topo.transport), j->topo.chunk_bytes,
                            j->topo.buffers, &j->xfer, err));
    /* the transport's setup: nccl's communicator layout (DESIGN.md section 9: one communicator
     * per stage, broadcast: its sender + every rollout rank; p2p: its trainer ranks + every
     * rollout rank; created at the first update's begin and re-created after a FAILED one);
     * ipc's arena backend (cuda when this rank has a GPU, a pair shares it; host-device with
     * the tests' host-device accelerator; else host shared memory), pair and piece placement */
    rf_xfer_setup_t xs = {
        .device = j->place.device,
        .accel = j->accel,
        .layout = j->nccl ? &j->nccl_layout : NULL,
        .arena_backend = j->place.device >= 0 ? "cuda"
                         : (j->accel != NULL && j->accel->ops == &rf_accel_host_device_ops)
                             ? "host-device"
                             : "host",
        .pair = j->pair_of != NULL ? j->pair_of[j->rank] : -1,
        .staged = j->ipc_staged,
        .pieces = j->ipc_pieces,
    };
    st = j->nccl ? rf_nccl_layout_build(&j->topo, &j->nccl_layout, err) : RF_OK;
    if (st == RF_OK)
        st = rf_xfer_setup(j->xfer, &xs, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    if (j->nccl) {
        if (stages_gather(j))
            j->wire = "nccl gather communicators";
        st = setup_nccl_resident(j, err);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
        /* [0]: some trainer is resident; [1]: some trainer would be but for integrity (the
         * table names the host pack and why) */
        int mine[2] = {j->nccl_resident, nccl_resident_possible(j) && j->integrity};
        int any[2] = {0, 0};
        MPI_Allreduce(mine, any, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        j->fence = any[0] != 0;
        j->integrity_host_pack = any[1] != 0;
    }
    /* the stage gather is the transport's (nccl: its trainer-only gather communicators where
     * a stage has them, set up above; else the MPI gather on the trainer-only communicator) */
    st = job_is_rollout(j) ? RF_OK : rf_trainer_attach(&j->tr, j->xfer, err);
    RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
    const char *tw = getenv("REFIT_TEST_GATHER_WIRE");
    if (tw != NULL && tw[0] != '\0' && j->nccl && j->rank == 0)
        rf_warn("REFIT_TEST_GATHER_WIRE is ignored on the nccl transport (its stage gathers use "
                "the trainer-only NCCL communicators)");
    if (tw != NULL && tw[0] != '\0' && !j->nccl) {
        st = strcmp(tw, "mpi") == 0
                 ? RF_OK
                 : rf_err_set(err, RF_ERR_INVALID, "REFIT_TEST_GATHER_WIRE=%s: only 'mpi' (tests: "
                              "the stage gather through the gather wire over MPI)", tw);
        RF_CHECK(agree_status(j, MPI_COMM_WORLD, st, err));
        /* tests: the stage gather as a transport's own one runs, over MPI */
        if (!job_is_rollout(j) && !j->p2p)
            rf_xfer_gather_use_test_wire(j->tr.gather);
        if (stages_gather(j))
            j->wire = "test wire (REFIT_TEST_GATHER_WIRE=mpi)";
    }
    if (j->ipc) {
        /* device arenas (rf_xfer_setup chose the backend) on every rank or none */
        int mine = (rf_xfer_caps(j->xfer) & RF_XFER_CAP_DEVICE_PAYLOAD) != 0, all = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        j->ipc_dev = all == j->size; /* the same on every rank (the teardown barrier) */
        if (all != 0 && all != j->size) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: ipc: %d of %d ranks have device arenas "
                            "(every rank of a colocated ipc job or none)",
                            j->topo.file, all, j->size);
            return agree_status(j, MPI_COMM_WORLD, st, err);
        }
        RF_CHECK(setup_ipc(j, err));
    }
    j->paused = true;
    return RF_OK;
}
