/*
 * refit: a session's setup and teardown (runtime/session_int.h), for the public API
 * (runtime/session.c) and refit-run's job (runtime/job_setup.c) alike: one implementation.
 *
 * rf_session_open: the topology and model config broadcast and hash agreement, placement, the
 * transports a topology may ask for in this build (the public API: its subset), accelerators,
 * inventory, the format owner, what a public caller registers, the control channel and the
 * transfer engine. rf_session_build: the rollout's runtime storage (registered or allocated)
 * and reload plan, the manifest built by trainer rank 0 and agreed, the chunk plan, the
 * gate's expectation, trainer shards (registered or owned), the client's `configured` hook;
 * then the transport's own setup: nccl communicators and resident trainer weights, the
 * trainer's stage gather on the transport (rf_trainer_attach; the tests' MPI wire), ipc arenas
 * and where every rollout rank reads every piece. Every step ends in rf_session_agree, so
 * every rank fails with the lowest failing rank's message, together. Also the reload plan's
 * broadcast or p2p form, which setup builds and the update and the cold check apply chunks
 * through (rf_session_plan_build, rf_session_apply_pieces).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refit/env.h"
#include "refit/formats.h"
#include "refit/hashes.h"
#include "refit/loader.h"
#include "refit/log.h"
#include "refit/time.h"
#include "session_int.h"

/* ---- the reload plan, broadcast or p2p ---------------------------------------------------- */

/* p2p: what each trainer rank sends this rank of a tensor (the schedule's rectangles). */
static int p2p_senders(void *ctx, int tensor, int *snd, int64_t (*rect)[4], int max)
{
    const rf_session_t *s = ctx;
    return rf_p2p_senders(&s->topo, &s->inv, s->rank, tensor, snd, rect, max);
}

rf_status_t rf_session_plan_build(rf_session_t *s, rf_plan_t *p, rf_storage_t *st,
                                  rf_format_t *fmt, rf_err_t *err)
{
    if (s->p2p)
        return rf_plan_build_p2p(p, &s->inv, &s->me.rc, st, fmt, s->so.policy, p2p_senders, s,
                                 err);
    return rf_plan_build(p, &s->inv, &s->me.rc, st, fmt, s->so.policy, err);
}

rf_status_t rf_session_apply_pieces(rf_session_t *s, rf_plan_t *p, const rf_chunk_t *chunk,
                                    const rf_chunk_piece_t *pieces, const void *payload,
                                    bool dev, rf_err_t *err)
{
    const rf_p2p_recv_t *me = s->p2p ? rf_p2p_schedule_find(&s->p2p_s, s->rank) : NULL;
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
            ps.tensor = s->man.entries[pc->item].tensor;
        }
        RF_CHECK(rf_plan_apply(p, &ps, err));
    }
    return RF_OK;
}

/* Rollout: the rollout coordinates checked, the engine's format owner (the client's by name,
 * else the one for the topology's quantization and backend). */
static rf_status_t open_rollout(rf_session_t *s, rf_err_t *err)
{
    RF_CHECK(rf_inventory_check_rollout(&s->inv, &s->me.rc, err));
    s->fmt.ops = s->so.format ? rf_format_lookup(s->so.format)
                              : rf_format_for(s->topo.quantization, (int)s->topo.r_backend);
    if (s->fmt.ops == NULL)
        return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: no format owner for quantization %s on "
                          "backend %s",
                          s->topo.file, rf_quant_name(s->topo.quantization),
                          rf_backend_name(s->topo.r_backend));
    s->fmt.quant = s->topo.quantization;
    s->fmt.backend = (int)s->topo.r_backend;
    s->fmt.accel = s->accel; /* NULL: runtime storage on the host */
    return RF_OK;
}

/* Rollout: the runtime storage (owned: allocated by refit; else the registered tensors,
 * borrowed slots), then the reload plan over it. */
static rf_status_t build_rollout(rf_session_t *s, rf_err_t *err)
{
    RF_CHECK(rf_storage_init(&s->st, s->inv.nmodules, err));
    s->st_ok = true;
    if (s->so.owned)
        RF_CHECK(rf_plan_alloc_storage(&s->inv, &s->me.rc, &s->fmt, &s->st, false, err));
    if (rf_session_device_storage(s))
        s->st.accel = s->accel; /* the registered CUDA tensors: the plan's device branches */
    for (int i = 0; i < s->nex && !s->so.owned; i++)
        RF_CHECK(rf_storage_register(&s->st, s->ex[i].index, s->ex[i].name, s->ex[i].derived,
                                     &s->ex[i].sig, err));
    RF_CHECK(rf_session_plan_build(s, &s->plan, &s->st, &s->fmt, err));
    s->plan_ok = true;
    memcpy(s->plan_layers, s->plan.stats.layers, sizeof(s->plan_layers));
    rf_info("plan: %" PRIu64 " direct, %" PRIu64 " runtime-view, %" PRIu64 " layerwise layers",
            s->plan_layers[0], s->plan_layers[1], s->plan_layers[2]);
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
static void ipc_rows_read(const rf_session_t *s, const rf_rollout_coords_t *rc, int tensor,
                          uint64_t *lo_p, uint64_t *hi_p)
{
    const rf_tensor_t *t = &s->inv.tensors[tensor];
    rf_module_kind_t kind = s->inv.modules[t->module].kind;
    int64_t rows = (int64_t)rf_tensor_rows(t), lo = 0, n = rows, r0, r1;
    /* an fp8-tensor scale: its one value is read on every rank (runtime/loader.c) */
    if ((kind == RF_MOD_VOCAB || kind == RF_MOD_QKV || kind == RF_MOD_MERGED) &&
        t->param != RF_PARAM_TENSOR_SCALE && rf_load_need_rows(&s->inv, rc, tensor, &r0, &r1)) {
        lo = r0;
        n = r1 - r0;
    }
    lo = lo < 0 ? 0 : (lo > rows ? rows : lo);
    n = lo + n > rows ? rows - lo : n;
    *lo_p = (uint64_t)lo;
    *hi_p = (uint64_t)(lo + (n < 0 ? 0 : n));
}

/*
 * The public API's trainer on ipc: groups this rank's registered tensors by the allocation
 * holding each (rf_accel_pointer_info; PyTorch's caching allocator carves many parameters out
 * of one segment), each distinct allocation once in first-use order, and every rank learns
 * every trainer rank's [entry] -> (allocation, offset, flags) table (collective: the piece
 * placement is the same on every rank). The registration checked each pointer (device
 * memory of this rank's GPU, legacy-IPC capable, not pool memory, inside its allocation).
 */
static rf_status_t ipc_share_table(rf_session_t *s, rf_err_t *err)
{
    const size_t n2 = (size_t)s->man.n * 2;
    uint64_t *mine = calloc(n2 + 1, sizeof(uint64_t));
    s->ipc_table = calloc(n2 * (size_t)s->size + 1, sizeof(uint64_t));
    s->ipc_abase = calloc((size_t)s->man.n + 1, sizeof(void *));
    s->ipc_abytes = calloc((size_t)s->man.n + 1, sizeof(uint64_t));
    rf_status_t st = RF_OK;
    if (mine == NULL || s->ipc_table == NULL || s->ipc_abase == NULL || s->ipc_abytes == NULL)
        st = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    for (int i = 0; i < s->man.n && st == RF_OK && rf_session_ipc_trainer(s); i++) {
        int k = s->ex_of_tensor[s->man.entries[i].tensor];
        if (k < 0 || !s->ex[k].registered || rf_signature_bytes(&s->ex[k].sig) == 0)
            continue;
        /* a quantized linear's entries are refit's device buffers (runtime/session_quant.c),
         * not the registered unquantized weight: staged (not held here) */
        if (rf_session_quant_refit_owns(s, &s->inv.tensors[s->man.entries[i].tensor]))
            continue;
        rf_accel_ptr_info_t pi;
        const char *data = s->ex[k].sig.data;
        rf_status_t ps = rf_accel_pointer_info(s->accel, data, &pi);
        if (ps != RF_OK || pi.base == NULL || pi.bytes == 0) {
            st = rf_err_set(err, ps != RF_OK ? ps : RF_ERR_INTERNAL, "rank %d (trainer): %s: no "
                            "allocation found for its pointer %p", s->rank, s->ex[k].name,
                            (const void *)data);
            break;
        }
        uint32_t a = 0;
        while (a < s->ipc_nalloc && s->ipc_abase[a] != pi.base)
            a++;
        if (a == s->ipc_nalloc) {
            s->ipc_abase[a] = pi.base;
            s->ipc_abytes[a] = pi.bytes;
            s->ipc_nalloc++;
        }
        mine[2 * i] = (uint64_t)(data - (const char *)pi.base);
        mine[2 * i + 1] = a | RF_SESSION_IPC_HELD |
                          (s->ex[k].sig.dtype == s->man.entries[i].dtype ? RF_SESSION_IPC_SAME_DT
                                                                         : 0);
    }
    rf_status_t ag = rf_session_agree(s, st, err);
    if (ag == RF_OK)
        ag = rf_session_allgather(s, mine, (int)n2, MPI_UINT64_T, s->ipc_table,
                                  "the ipc allocation table", err);
    free(mine);
    if (ag == RF_OK && rf_session_ipc_trainer(s))
        rf_info("ipc: trainer rank %d shares %u allocation(s) holding its registered tensors",
                s->rank, s->ipc_nalloc);
    return ag;
}

/*
 * Where every rollout rank reads every piece: in place from its pair's weights arena when the
 * pair's shard of the tensor is full-width and holds every row that rank's loaders read of
 * the piece, staged otherwise. A chunk is staged when any rollout rank needs it staged. Pure
 * and the same on every rank; fills s->ipc_staged and, on rollout ranks, s->ipc_pieces.
 * The public API: a piece is also staged when the pair registered its tensor in another dtype
 * (an F32 master) or does not hold it; its stage sender gathers and packs the staged pieces
 * on the host from the registered CUDA tensors (device-to-host copies, rf_trainer_use_device).
 */
static rf_status_t ipc_plan(rf_session_t *s, rf_err_t *err)
{
    const rf_chunk_plan_t *cp = s->cplan;
    uint64_t *offs = calloc((size_t)s->man.n + 1, sizeof(uint64_t));
    uint32_t *arena = calloc((size_t)s->man.n + 1, sizeof(uint32_t));
    rf_ipc_piece_t *mine = calloc(cp->n_pieces + 1, sizeof(rf_ipc_piece_t));
    s->ipc_staged = calloc(cp->n_chunks + 1, 1);
    s->ipc_piece_staged = calloc(cp->n_pieces + 1, 1);
    if (offs == NULL || arena == NULL || mine == NULL || s->ipc_staged == NULL ||
        s->ipc_piece_staged == NULL) {
        free(offs);
        free(arena);
        free(mine);
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    }
    uint64_t inplace = 0, staged = 0;
    for (int r = 0; r < s->R; r++) {
        rf_rank_info_t ri, pi;
        int w = s->receivers[r];
        if (rf_topology_rank_info(&s->topo, w, &ri) != RF_OK ||
            rf_topology_rank_info(&s->topo, s->pair_of[w], &pi) != RF_OK ||
            pi.role != RF_ROLE_TRAINER) {
            free(offs);
            free(arena);
            free(mine);
            return rf_err_set(err, RF_ERR_TOPOLOGY, "%s: transport ipc: rollout rank %d pairs "
                              "with rank %d, not a trainer rank",
                              s->topo.file, w, s->pair_of[w]);
        }
        if (s->ipc_table == NULL) { /* refit-run: the pair's one arena, by the topology */
            rf_trainer_arena_layout(&s->topo, &s->inv, &s->man, &pi, offs);
        } else { /* the public API: where the pair's registered tensors are (ipc_share_table) */
            const uint64_t *tb = &s->ipc_table[(size_t)s->pair_of[w] * (size_t)s->man.n * 2];
            for (int i = 0; i < s->man.n; i++) {
                uint64_t f = tb[2 * i + 1];
                bool ok = (f & RF_SESSION_IPC_HELD) && (f & RF_SESSION_IPC_SAME_DT);
                offs[i] = ok ? tb[2 * i] : UINT64_MAX;
                arena[i] = (uint32_t)(f & 0xffffffffu);
            }
        }
        for (size_t c = 0; c < cp->n_chunks; c++) {
            const rf_chunk_t *ch = &cp->chunks[c];
            for (size_t k = 0; k < ch->piece_count; k++) {
                size_t gi = ch->piece_begin + k;
                const rf_chunk_piece_t *pc = &cp->pieces[gi];
                int tensor = s->man.entries[pc->item].tensor;
                const rf_tensor_t *t = &s->inv.tensors[tensor];
                rf_ipc_piece_t ip = {.staged = 1};
                rf_region_t reg;
                uint64_t lo, hi;
                ipc_rows_read(s, &ri.rc, tensor, &lo, &hi);
                lo = lo < pc->row_begin ? pc->row_begin : lo;
                hi = hi > pc->row_end ? pc->row_end : hi;
                if (hi <= lo) {
                    ip = (rf_ipc_piece_t){0, pc->row_begin, pc->row_begin, 0, 0};
                } else if (rf_trainer_shard(&s->topo, &s->inv, t, &pi, &reg) && reg.c0 == 0 &&
                           (uint64_t)reg.c1 * (uint64_t)rf_dtype_size(s->man.entries[pc->item]
                                                                          .dtype) ==
                               s->items[pc->item].row_bytes &&
                           (uint64_t)reg.r0 <= lo && hi <= (uint64_t)reg.r1 &&
                           offs[pc->item] != UINT64_MAX) {
                    ip = (rf_ipc_piece_t){0, lo, hi,
                                          offs[pc->item] + (lo - (uint64_t)reg.r0) *
                                                               s->items[pc->item].row_bytes,
                                          arena[pc->item]};
                }
                if (ip.staged)
                    s->ipc_staged[c] = s->ipc_piece_staged[gi] = 1;
                if (w == s->rank) {
                    mine[gi] = ip;
                    inplace += !ip.staged;
                    staged += ip.staged;
                }
            }
        }
    }
    free(offs);
    free(arena);
    if (rf_session_is_rollout(s)) {
        s->ipc_pieces = mine;
        rf_info("ipc: rank %d reads %" PRIu64 " pieces in place from rank %d, %" PRIu64
                " staged",
                s->rank, inplace, s->pair_of[s->rank], staged);
    } else {
        free(mine);
    }
    return RF_OK;
}

/*
 * The public API's trainer: shares each allocation of ipc_share_table (rf_xfer_ipc_share,
 * in that order, so allocation a is handle a) and sends its pair the count and the handles;
 * the pair opens each (rf_xfer_ipc_import_weights: once per distinct allocation). Local to
 * each pair (point to point); the caller agrees.
 */
static rf_status_t share_allocations(rf_session_t *s, const char *id, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    uint32_t n = 0;
    rf_ipc_handle_t *hs = NULL;
    if (!rf_session_is_rollout(s)) {
        n = s->ipc_nalloc;
        hs = calloc((size_t)n + 1, sizeof(*hs));
        if (hs == NULL)
            st = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
        for (uint32_t a = 0; a < n && st == RF_OK; a++) {
            char name[RF_IPC_NAME_MAX];
            uint32_t idx = 0;
            snprintf(name, sizeof(name), "refit-%s-%d-a%u", id, s->rank, a);
            st = rf_xfer_ipc_share(s->xfer, name, s->ipc_abase[a], s->ipc_abytes[a], &idx,
                                   &hs[a], err);
            if (st == RF_OK && idx != a)
                st = rf_err_set(err, RF_ERR_INTERNAL, "rank %d: allocation %u shared as %u",
                                s->rank, a, idx);
        }
        uint32_t sent = st == RF_OK ? n : 0; /* 0: the pair opens nothing, the agree fails */
        rf_status_t ss = rf_session_send(s, &sent, (int)sizeof(sent), s->pair_of[s->rank],
                                         0x1f2, "the ipc handle count", err);
        if (ss == RF_OK && sent > 0)
            ss = rf_session_send(s, hs, (int)(sent * sizeof(*hs)), s->pair_of[s->rank], 0x1f3,
                                 "the ipc handles", err);
        free(hs);
        return ss != RF_OK ? ss : st;
    }
    int pair = s->pair_of[s->rank];
    RF_CHECK(rf_session_recv(s, &n, (int)sizeof(n), pair, 0x1f2, "the ipc handle count", err));
    hs = calloc((size_t)n + 1, sizeof(*hs));
    if (hs == NULL) /* still receive the handles: the trainer's send must complete */
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    if (n > 0)
        st = rf_session_recv(s, hs, (int)(n * sizeof(*hs)), pair, 0x1f3, "the ipc handles",
                             err);
    for (uint32_t a = 0; a < n && st == RF_OK; a++)
        st = rf_xfer_ipc_import_weights(s->xfer, pair, a, &hs[a], err);
    free(hs);
    return st;
}

/*
 * Arenas (collective): every trainer rank moves its shards into a weights arena and sends
 * the handle to its pair; stage senders with chunks to stage export `buffers` staging slots
 * and broadcast the handle; rollout ranks map their pair's weights arena and every staging
 * arena once for the job; after a barrier the exporters unlink the names (no /dev/shm
 * object outlives setup, even if a process dies later).
 */
static rf_status_t setup_ipc(rf_session_t *s, rf_err_t *err)
{
    char id[32] = "", name[RF_IPC_NAME_MAX];
    rf_ipc_handle_t wh, sh;
    rf_status_t st = RF_OK;
    memset(&wh, 0, sizeof(wh));
    if (s->rank == 0) {
        /* unique per job: rank 0's pid and clock; REFIT_IPC_TAG prefixes it (tests) */
        const char *tag = getenv("REFIT_IPC_TAG");
        snprintf(id, sizeof(id), "%.8s%s%d-%lx", tag ? tag : "", tag ? "-" : "", (int)getpid(),
                 (unsigned long)(rf_time_now() * 1e6) & 0xffffffu);
    }
    RF_CHECK(rf_session_bcast(s, id, (int)sizeof(id), 0, "the ipc arena names", err));
    if (!rf_session_is_rollout(s) && !s->so.owned)
        s->tr.gathered = s->ipc_piece_staged; /* staged pieces: gathered, packed on the host */
    if (!rf_session_is_rollout(s) && s->so.owned) {
        uint64_t *offs = calloc((size_t)s->man.n + 1, sizeof(uint64_t));
        void *base = NULL;
        if (offs == NULL)
            st = rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
        uint64_t bytes = st == RF_OK ? rf_trainer_arena_layout(&s->topo, &s->inv, &s->man,
                                                               &s->me, offs)
                                     : 0;
        snprintf(name, sizeof(name), "/refit-%s-%d-w", id, s->rank);
        if (st == RF_OK)
            st = rf_xfer_ipc_export(s->xfer, RF_IPC_WEIGHTS, name, bytes ? bytes : 1, &base, &wh,
                                    err);
        if (st == RF_OK && s->ipc_dev) {
            /* device arena: the trainer's weights are resident there. Generator updates are
             * produced on the device (gen_fill, device quantizers); checkpoint updates are read
             * on the host into a pinned mirror with the arena's layout and copied h2d
             * (produce_arena) */
            s->ipc_wdev = base;
            s->ipc_wbytes = bytes ? bytes : 1;
            rf_status_t hs = RF_OK;
            bool staged = false; /* some piece is gathered and packed on the host */
            for (size_t k = 0; k < s->cplan->n_pieces && !staged; k++)
                staged = s->ipc_piece_staged[k] != 0;
            if (s->ck != NULL || staged)
                hs = s->accel->ops->alloc_host(s->accel, (size_t)s->ipc_wbytes, &s->ipc_mirror);
            if (hs != RF_OK)
                st = rf_err_set(err, hs, "rank %d: no %" PRIu64 "-byte pinned host mirror of "
                                "its ipc weights arena", s->rank, s->ipc_wbytes);
            else if (s->ipc_mirror != NULL)
                base = s->ipc_mirror;
        }
        if (st == RF_OK)
            rf_trainer_use_arena(&s->tr, base, offs);
        free(offs);
        s->tr.gathered = s->ipc_piece_staged; /* only staged pieces are gathered and packed */
    }
    memset(&sh, 0, sizeof(sh));
    bool stage_sender = false;
    for (int p = 0; p < s->cplan->n_stages; p++)
        stage_sender |= s->senders[p] == s->rank;
    if (st == RF_OK && stage_sender) {
        bool any = false;
        for (int p = 0; p < s->cplan->n_stages; p++) {
            const rf_chunk_stage_range_t *sr = &s->cplan->stages[p];
            for (uint32_t k = 0; s->senders[p] == s->rank && k < sr->chunk_count; k++)
                any |= s->ipc_staged[sr->chunk_begin + k] != 0;
        }
        uint64_t slot = (s->cplan->chunk_bytes + 4095) & ~(uint64_t)4095;
        int buffers = s->topo.buffers ? s->topo.buffers : 2;
        void *base = NULL;
        snprintf(name, sizeof(name), "/refit-%s-%d-s", id, s->rank);
        if (any)
            st = rf_xfer_ipc_export(s->xfer, RF_IPC_STAGING, name, slot * (uint64_t)buffers,
                                    &base, &sh, err);
    }
    RF_CHECK(rf_session_agree(s, st, err));
    if (!s->so.owned) {
        /* the public API: the allocations holding the trainer's registered tensors, each
         * shared once, their handles to the pair, which opens each once */
        RF_CHECK(rf_session_agree(s, share_allocations(s, id, err), err));
    } else if (!rf_session_is_rollout(s)) { /* weights handles: trainer -> its pair */
        RF_CHECK(rf_session_send(s, &wh, (int)sizeof(wh), s->pair_of[s->rank], 0x1f1,
                                 "the ipc weights handle", err));
    } else {
        RF_CHECK(rf_session_recv(s, &wh, (int)sizeof(wh), s->pair_of[s->rank], 0x1f1,
                                 "the ipc weights handle", err));
        st = rf_xfer_ipc_import(s->xfer, s->pair_of[s->rank], RF_IPC_WEIGHTS, &wh, err);
    }
    /* staging handles: each stage sender to everyone */
    for (int p = 0; p < s->cplan->n_stages; p++) {
        rf_ipc_handle_t h = sh;
        RF_CHECK(rf_session_bcast(s, &h, (int)sizeof(h), s->senders[p], "the ipc staging "
                                  "handles", err));
        if (st == RF_OK && rf_session_is_rollout(s))
            st = rf_xfer_ipc_import(s->xfer, s->senders[p], RF_IPC_STAGING, &h, err);
    }
    RF_CHECK(rf_session_agree(s, st, err)); /* every importer mapped: unlink */
    st = rf_xfer_ipc_unlink(s->xfer, err);
    RF_CHECK(rf_session_agree(s, st, err));
    return RF_OK;
}

/* ---- accelerators and the nccl transport ---------------------------------------------- */

/* REFIT_TEST_DEVICE_ACCEL (tests only): which ranks without a GPU take the host-device
 * accelerator. "host-device": rollout ranks and colocated ipc's ranks; "host-device-trainer":
 * the public API's trainer ranks on the mpi transport (rollout ranks stay host);
 * "host-device-all": both. */
enum { EMU_ROLLOUT = 1u, EMU_TRAINER = 2u };
static unsigned emu_ranks(void)
{
    const char *emu = getenv("REFIT_TEST_DEVICE_ACCEL");
    if (emu == NULL)
        return 0;
    if (strcmp(emu, "host-device") == 0)
        return EMU_ROLLOUT;
    if (strcmp(emu, "host-device-trainer") == 0)
        return EMU_TRAINER;
    if (strcmp(emu, "host-device-all") == 0)
        return EMU_ROLLOUT | EMU_TRAINER;
    return 0;
}

/* A rollout rank with a device from rf_topology_place opens the "cuda" accelerator on it
 * (cudaSetDevice); its runtime storage, staging and LAYERWISE scratch then live there. On
 * colocated ipc the trainer rank opens its device too (its weights arena, pinned mirror); on
 * the mpi transport a public-API trainer rank with trainer.gpus opens its GPU (its registered
 * CUDA tensors: pointer checks, device-to-host copies when packed).
 * REFIT_TEST_DEVICE_ACCEL (emu_ranks; tests only) gives a rank without a GPU the host
 * implementation tagged as device memory, so the CPU suite runs the device branches. */
static rf_status_t setup_accel(rf_session_t *s, rf_err_t *err)
{
    unsigned emu = emu_ranks();
    bool mpi_trainer = !rf_session_is_rollout(s) && !s->ipc && !s->nccl && !s->so.owned;
    if (!s->nccl && s->place.device < 0 &&
        (((rf_session_is_rollout(s) || s->ipc) && (emu & EMU_ROLLOUT)) ||
         (mpi_trainer && (emu & EMU_TRAINER)))) {
        /* tests only: the device branches on host memory (CPU CI covers the GPU data path) */
        rf_status_t as = rf_accel_open("host-device", 0, &s->accel);
        if (as != RF_OK)
            return rf_err_set(err, as, "rank %d: cannot open the host-device accelerator", s->rank);
        return RF_OK;
    }
    if ((!rf_session_is_rollout(s) && !s->ipc && !s->nccl && !mpi_trainer) ||
        s->place.device < 0)
        return RF_OK;
    int n = 0;
    const rf_accel_ops_t *cu = rf_accel_lookup("cuda");
    if (!rf_accel_cuda_available() || cu->device_count(&n) != RF_OK || s->place.device >= n)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: %s.gpus puts rank %d on GPU %d, but refit was built without "
                          "CUDA or that CUDA device is not present (%d found)",
                          s->topo.file, rf_session_is_rollout(s) ? "rollout" : "trainer", s->rank,
                          s->place.device, n);
    /* what the cuda accelerator reads when created (core/accel_cuda.cu), refused here with
     * its name in err rather than only in the accelerator's log line */
    size_t engine_min = 0;
    RF_CHECK(rf_env_count("REFIT_CUDA_ENGINE_MIN", "bytes", RF_ACCEL_ENGINE_MIN_DEFAULT,
                          &engine_min, err));
    rf_status_t as = rf_accel_open("cuda", s->place.device, &s->accel);
    if (as != RF_OK)
        return rf_err_set(err, as, "%s: rank %d: cannot open CUDA device %d (%s.gpus)",
                          s->topo.file, s->rank, s->place.device,
                          rf_session_is_rollout(s) ? "rollout" : "trainer");
    rf_info("rank %d: %s on GPU %d (%s)", s->rank,
            rf_session_is_rollout(s) ? "rollout storage"
            : s->nccl                ? "nccl chunk buffers"
            : s->ipc                 ? "ipc weights arena"
                                     : "trainer tensors",
            s->place.device, s->place.device_id);
    return RF_OK;
}

/*
 * integrity's trailer algorithm (issue #18 item 1; docs/design.md, transfer.integrity), one for
 * the job: refit-sum64 v1 when some rollout rank on the mpi transport has device storage (it
 * checks each chunk on its device chunk buffer, transport/xfer_devck.c, instead of hashing it
 * on the host; broadcast senders seal one buffer for every receiver, so one such rank decides
 * for all), XXH3-64 (the host's faster digest) otherwise: host storage, nccl (receivers check a
 * d2h copy) and ipc (SEQ plus staged bytes, hashed on the host). REFIT_INTEGRITY_TRAILER=xxh3 or
 * sum64 overrides it on every rank (the benchmarks' A/B: bench/integrity.sh). Collective.
 */
static rf_status_t choose_trailer(rf_session_t *s, rf_err_t *err)
{
    rf_status_t st = RF_OK;
    int mine = rf_session_is_rollout(s) && !s->ipc && !s->nccl && s->accel != NULL &&
               s->accel->ops->mem_type == RF_MEM_CUDA;
    int any = 0;
    RF_CHECK(
        rf_session_allreduce(s, &mine, &any, 1, MPI_INT, MPI_MAX, "the trailer algorithm", err));
    s->trailer = any ? RF_CHUNK_TRAILER_SUM64 : RF_CHUNK_TRAILER_XXH3;
    const char *env = getenv("REFIT_INTEGRITY_TRAILER");
    if (env != NULL && env[0] != '\0' && rf_chunk_trailer_parse(env, &s->trailer, NULL) != RF_OK)
        st = rf_err_set(err, RF_ERR_INVALID, "REFIT_INTEGRITY_TRAILER=%s: not xxh3 or sum64", env);
    return rf_session_agree(s, st, err);
}

/* Broadcast mode with more than one trainer rank per stage: the stage senders gather. */
static bool stages_gather(const rf_session_t *s)
{
    return !s->p2p && s->T / (s->topo.t_pp > 0 ? s->topo.t_pp : 1) > 1;
}

/*
 * nccl trainers whose chunks come from their own shard alone (p2p: every trainer rank; broadcast:
 * a stage sender with no stage gather) keep their weights on their GPU, as a trainer's weights
 * are: generated (and quantized) there by the training step before the update begins, and packed
 * device to device into the chunk buffer (rf_xfer_config_t.pack_device), so no byte crosses
 * PCIe. The host path stays for checkpoint sources (read on the host), integrity trailers
 * (hashed on the host), injected faults (which edit host bytes) and stages with a gather.
 */
static bool nccl_resident_possible(const rf_session_t *s) /* every condition but integrity's */
{
    return s->nccl && !rf_session_is_rollout(s) && s->accel != NULL && s->place.device >= 0 &&
           s->ck == NULL && !s->so.faults &&
           (s->p2p || (s->tr.sender && !rf_xfer_nccl_has_gather(s->xfer, s->me.p)));
}

static bool nccl_resident_eligible(const rf_session_t *s)
{
    return nccl_resident_possible(s) && !s->integrity;
}

static rf_status_t setup_nccl_resident(rf_session_t *s, rf_err_t *err)
{
    if (!nccl_resident_eligible(s))
        return RF_OK;
    uint64_t *offs = malloc(((size_t)s->man.n + 1) * sizeof(uint64_t));
    if (offs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    uint64_t bytes = rf_trainer_arena_layout(&s->topo, &s->inv, &s->man, &s->me, offs);
    rf_status_t st = s->accel->ops->alloc(s->accel, (size_t)(bytes ? bytes : 1), &s->nccl_wdev);
    if (st == RF_OK) {
        rf_trainer_use_arena(&s->tr, s->nccl_wdev, offs);
        s->nccl_resident = true;
        /* the source packs onto the device chunk buffer: copies launched on this accelerator */
        s->src.mem = RF_PACK_DEVICE;
        s->src.accel = s->accel;
        s->src.device = s->place.device;
    } else {
        rf_err_set(err, st, "trainer rank %d: no %" PRIu64 "-byte weights arena on GPU %d",
                   s->rank, bytes, s->place.device);
    }
    free(offs);
    return st;
}

/* ---- the public API's registration ------------------------------------------------- */

/* The shard of inventory tensor t that this trainer rank holds, as a slot shape: dim 0 its
 * rows, the rest its columns (DESIGN.md section 6). */
static rf_status_t trainer_want(const rf_session_t *s, const rf_tensor_t *t,
                                const rf_region_t *reg, rf_slot_shape_t *w, rf_err_t *err)
{
    memset(w, 0, sizeof(*w));
    w->dtype = t->dtype;
    w->ndim = t->ndim;
    if (t->ndim == 0)
        return RF_OK;
    uint64_t cols = rf_tensor_rows(t) ? t->numel / rf_tensor_rows(t) : 0;
    w->shape[0] = reg->r1 - reg->r0;
    for (int d = 1; d < t->ndim; d++)
        w->shape[d] = t->shape[d];
    if (t->ndim == 2)
        w->shape[1] = reg->c1 - reg->c0;
    else if (t->ndim > 2 && (reg->c0 != 0 || (uint64_t)reg->c1 != cols))
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "trainer rank %d: %s: a column split of a "
                          "%d-D tensor", s->rank, t->name, t->ndim);
    return RF_OK;
}

static rf_status_t ex_add(rf_session_t *s, const char *name, const rf_slot_shape_t *w, int index,
                          bool derived, int *cap, rf_err_t *err)
{
    if (s->nex == *cap) {
        int nc = *cap ? *cap * 2 : 256;
        sess_tensor_t *g = realloc(s->ex, (size_t)nc * sizeof(*g));
        if (g == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
        s->ex = g;
        *cap = nc;
    }
    sess_tensor_t *e = &s->ex[s->nex++];
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->want = *w;
    e->index = index;
    e->derived = derived;
    return RF_OK;
}

/* What a public caller registers on this rank: a trainer rank its non-empty shard of every
 * checkpoint tensor of its stage (trainer.layout megatron or fsdp: rf_trainer_shard), a rollout
 * rank every runtime slot of every engine module (rollout.layout vllm), in module order (the
 * storage registers a module's slots together). */
static rf_status_t build_expected(rf_session_t *s, rf_err_t *err)
{
    int cap = 0;
    if (!rf_session_is_rollout(s)) {
        s->ex_of_tensor = malloc(((size_t)s->inv.ntensors + 1) * sizeof(int));
        if (s->ex_of_tensor == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
        for (int i = 0; i < s->inv.ntensors; i++) {
            const rf_tensor_t *t = &s->inv.tensors[i];
            rf_region_t reg;
            rf_slot_shape_t w;
            s->ex_of_tensor[i] = -1;
            if (!rf_trainer_shard(&s->topo, &s->inv, t, &s->me, &reg))
                continue;
            if (rf_session_quant_refit_owns(s, t)) {
                /* a quantized linear: its unquantized weight, once (runtime/session_quant.c);
                 * the scales and weight_shape are refit's */
                if (t->param != RF_PARAM_WEIGHT && t->param != RF_PARAM_WEIGHT_PACKED)
                    continue;
                char name[RF_NAME_MAX + 8];
                RF_CHECK(rf_session_quant_expect(s, t, &reg, name, sizeof(name), &w, err));
                s->ex_of_tensor[i] = s->nex;
                RF_CHECK(ex_add(s, name, &w, i, false, &cap, err));
                s->ex[s->nex - 1].logical = true;
                continue;
            }
            RF_CHECK(trainer_want(s, t, &reg, &w, err));
            s->ex_of_tensor[i] = s->nex;
            RF_CHECK(ex_add(s, t->name, &w, i, false, &cap, err));
        }
    } else {
        /* the format owner: open_rollout */
        for (int m = 0; m < s->inv.nmodules; m++) {
            rf_slot_shape_t model[RF_MODULE_MAX_SLOTS], rt[RF_MODULE_MAX_SLOTS];
            bool derived[RF_MODULE_MAX_SLOTS];
            int nmodel, nrt;
            RF_CHECK(rf_module_slots(&s->inv, m, &s->me.rc, model, &nmodel, err));
            RF_CHECK(s->fmt.ops->runtime_slots(&s->fmt, &s->inv, m, model, nmodel, rt, derived,
                                               &nrt, err));
            for (int i = 0; i < nrt; i++) {
                char name[RF_NAME_MAX + 32];
                snprintf(name, sizeof(name), "%.159s.%.31s", s->inv.modules[m].name, rt[i].name);
                RF_CHECK(ex_add(s, name, &rt[i], m, derived[i], &cap, err));
            }
        }
    }
    if (rf_map_init(&s->exmap, (size_t)s->nex + 1) != RF_OK)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    s->exmap_ok = true;
    for (int i = 0; i < s->nex; i++)
        if (rf_map_put(&s->exmap, rf_map_strkey(s->ex[i].name), (uint64_t)i) != RF_OK)
            return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    return RF_OK;
}

/* What this step runs (the same topology everywhere: the same answer on every rank). */
static rf_status_t check_supported(const rf_session_t *s, rf_err_t *err)
{
    const char *emu = getenv("REFIT_TEST_DEVICE_ACCEL");
    bool same_gpus = s->topo.t_ngpus > 0 && s->topo.t_ngpus == s->topo.r_ngpus &&
                     memcmp(s->topo.t_gpus, s->topo.r_gpus,
                            sizeof(int) * (size_t)s->topo.t_ngpus) == 0;
    /* colocated ipc: each trainer rank's CUDA tensors, opened by its pair on the same GPU
     * through CUDA IPC (on the CPU the tests' host-device accelerator stands for the GPUs) */
    bool emu_ipc = emu != NULL && strcmp(emu, "host-device") == 0 && s->topo.t_ngpus == 0 &&
                   s->topo.r_ngpus == 0;
    if (s->topo.transport == RF_TRANSPORT_IPC && (!s->ipc || !(same_gpus || emu_ipc)))
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "%s: transfer.transport: ipc: the session "
                          "API shares the trainer's CUDA tensors with the engine on the same GPU: "
                          "it needs colocated: true and trainer.gpus == rollout.gpus (%s)",
                          s->topo.file, !s->ipc ? "not colocated" : "the gpus differ or are "
                          "missing; host tensors: use the mpi transport");
    if (s->topo.transport != RF_TRANSPORT_MPI && !s->ipc)
        return rf_err_set(err, RF_ERR_UNSUPPORTED, "%s: transfer.transport: %s: the session API "
                          "runs the mpi transport and colocated ipc only in this version",
                          s->topo.file, rf_transport_name(s->topo.transport));
    /* rollout.gpus: the rollout ranks register CUDA tensors as their runtime storage, chunks
     * through host memory (setup_accel opens each rank's GPU); trainer.gpus: the trainer
     * ranks register CUDA tensors, read through device-to-host copies into the host chunks
     * (rf_trainer_use_device) on mpi, in place on colocated ipc; a quantized model's are
     * quantized on the trainer's GPU (runtime/session_quant.c). Quantized models: every
     * format and rollout.backend refit-run runs (triton, cutlass, marlin, rocm-fnuz: the
     * engine registers the format owner's runtime tensors); the loader refuses what refit-run
     * refuses (rollout.layout hf on marlin / rocm-fnuz) */
    return RF_OK;
}

/* The thread level MPI gives this thread allows it to call MPI (session.h). Local. */
static rf_status_t check_mpi(rf_err_t *err)
{
    int level = MPI_THREAD_SINGLE, main_thread = 0;
    MPI_Query_thread(&level);
    MPI_Is_thread_main(&main_thread);
    if ((level == MPI_THREAD_SINGLE || level == MPI_THREAD_FUNNELED) && !main_thread)
        return rf_err_set(err, RF_ERR_STATE, "rf_session_create: called from a thread other "
                          "than MPI's main thread at thread level %s (refit calls MPI from "
                          "the calling thread: MPI_THREAD_SERIALIZED or MULTIPLE needed)",
                          level == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE"
                                                     : "MPI_THREAD_FUNNELED");
    return RF_OK;
}

/* Trainer: the shard buffers are the registered tensors (borrowed, read in place). */
static rf_status_t borrow_trainer(rf_session_t *s, rf_err_t *err)
{
    uint64_t *offs = malloc(((size_t)s->man.n + 1) * sizeof(uint64_t));
    char none = 0;
    if (offs == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "rank %d: out of memory", s->rank);
    for (int i = 0; i < s->man.n; i++)
        offs[i] = UINT64_MAX;
    rf_trainer_use_arena(&s->tr, &none, offs); /* frees its own buffers; buf[] all NULL */
    free(offs);
    RF_CHECK(rf_session_quant_borrow(s, err)); /* quantized linears: refit's buffers */
    for (int i = 0; i < s->man.n; i++) {
        int t = s->man.entries[i].tensor;
        int k = s->ex_of_tensor[t];
        if (rf_session_quant_refit_owns(s, &s->inv.tensors[t])) {
            if (k >= 0) /* the unquantized weight the quantizer reads for this entry */
                s->ex[k].entry = i;
            continue;
        }
        if (s->tr.has[i] != (k >= 0))
            return rf_err_set(err, RF_ERR_INTERNAL, "trainer rank %d: %s: shard disagreement",
                              s->rank, s->man.entries[i].name);
        if (k < 0)
            continue;
        const rf_region_t *r = &s->tr.reg[i];
        RF_CHECK(rf_trainer_set_source_dtype(&s->tr, i, s->ex[k].sig.dtype, err));
        uint64_t bytes = (uint64_t)(r->r1 - r->r0) * (uint64_t)(r->c1 - r->c0) *
                         rf_dtype_size(s->ex[k].sig.dtype);
        if (bytes != rf_signature_bytes(&s->ex[k].sig))
            return rf_err_set(err, RF_ERR_INTERNAL, "trainer rank %d: %s: %llu registered bytes "
                              "for a %llu-byte shard", s->rank, s->ex[k].name,
                              (unsigned long long)rf_signature_bytes(&s->ex[k].sig),
                              (unsigned long long)bytes);
        s->tr.buf[i] = s->ex[k].sig.data;
        s->ex[k].entry = i;
    }
    /* CUDA tensors: the packs copy them to the host (colocated ipc: the staged pieces only) */
    if (rf_session_mpi_device_trainer(s) || rf_session_ipc_trainer(s))
        rf_trainer_use_device(&s->tr, s->accel);
    return RF_OK;
}

/* ---- setup ---------------------------------------------------------------------------- */

/* The transports a topology may ask for in this build, and where its ranks' memory is
 * (the same topology everywhere: the same answer on every rank). */
static rf_status_t check_transport(const rf_session_t *s, rf_err_t *err)
{
    if (s->nccl && (!rf_xfer_nccl_built() || s->topo.t_ngpus == 0 || s->topo.r_ngpus == 0)) {
        /* every rank of an NCCL communicator needs its own GPU (two on one GPU were refused
         * by rf_topology_place, naming them) */
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: transfer.transport: nccl %s", s->topo.file,
                          !rf_xfer_nccl_built()
                              ? "is not available in this build (refit built without CUDA and "
                                "NCCL)"
                              : "needs trainer.gpus and rollout.gpus (every rank of an NCCL "
                                "communicator on its own GPU)");
    }
    bool same_gpus = s->topo.t_ngpus == s->topo.r_ngpus &&
                     memcmp(s->topo.t_gpus, s->topo.r_gpus,
                            sizeof(int) * (size_t)s->topo.t_ngpus) == 0;
    if ((s->topo.transport != RF_TRANSPORT_MPI && !s->ipc && !s->nccl) ||
        (s->ipc && (s->topo.t_ngpus > 0 || s->topo.r_ngpus > 0) && !same_gpus))
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: transfer.transport: %s%s%s is not available in this build (mpi, "
                          "or ipc with colocated: true on CPU or with trainer.gpus == "
                          "rollout.gpus)",
                          s->topo.file, rf_transport_name(s->topo.transport),
                          (s->topo.t_ngpus || s->topo.r_ngpus) ? " with gpus" : "",
                          s->topo.transport == RF_TRANSPORT_IPC && !s->topo.colocated
                              ? " without colocated: true"
                              : "");
    if (s->ipc && s->place.nnodes > 1) /* host backend: rollout ranks map the staging arenas */
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: transfer.transport: ipc on the host backend needs one node (%d "
                          "nodes)",
                          s->topo.file, s->place.nnodes);
    /* gpus on the mpi transport: rollout storage on the GPU, chunks through host memory;
     * trainers stay on the host there. Trainers on GPUs only on colocated ipc (the CUDA IPC
     * arenas); rf_topology_place refused two ranks on one GPU other than such a pair. */
    if (s->topo.t_ngpus > 0 && !s->ipc && !s->nccl)
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: trainer.gpus: trainers run on the host in this build except on "
                          "colocated ipc with trainer.gpus == rollout.gpus (only rollout.gpus "
                          "places runtime storage on a GPU)",
                          s->topo.file);
    return RF_OK;
}

static rf_status_t check_p2p(const rf_session_t *s, rf_err_t *err)
{
    if (s->p2p && (s->ipc || (s->topo.r_ngpus > 0 && !s->nccl)))
        return rf_err_set(err, RF_ERR_UNSUPPORTED,
                          "%s: transfer.mode: p2p runs on the mpi transport with host storage in "
                          "this build (not %s%s)",
                          s->topo.file, rf_transport_name(s->topo.transport),
                          s->topo.r_ngpus > 0 ? " with rollout.gpus" : "");
    return RF_OK;
}

/* The REFIT_* switches' values (rf_env_check), the error naming this rank. Local. */
static rf_status_t check_env(const rf_session_t *s, rf_err_t *err)
{
    rf_err_t e;
    rf_err_clear(&e);
    rf_status_t st = rf_env_check(&e);
    return st == RF_OK ? RF_OK : rf_err_set(err, st, "rank %d: %s", s->rank, e.msg);
}

static rf_status_t open_session(rf_session_t *s, MPI_Comm comm, const char *topology,
                                rf_err_t *err)
{
    rf_status_t st;
    if (MPI_Comm_dup(comm, &s->comm) != MPI_SUCCESS) {
        s->comm = MPI_COMM_NULL;
        return rf_err_set(err, RF_ERR_MPI, "rf_session_create: MPI_Comm_dup failed");
    }
    if (!s->so.owned) /* a library's errors come back, never abort the caller's job */
        MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    st = s->so.owned ? RF_OK : check_mpi(err);
    RF_CHECK(rf_session_agree(s, st, err));
    /* every REFIT_* switch, before anything is built: a bad value (the environment is per
     * process: maybe on one rank only) fails create on every rank, never a later step */
    RF_CHECK(rf_session_agree(s, check_env(s, err), err));
    RF_CHECK(rf_model_load_topology(topology, s->comm, &s->topo, &s->cfg, err));
    s->cfg_ok = true;
    s->T = rf_topology_trainer_size(&s->topo);
    s->R = rf_topology_rollout_size(&s->topo);
    RF_CHECK(rf_topology_rank_info(&s->topo, s->rank, &s->me));
    RF_CHECK(rf_topology_place(&s->topo, s->comm, &s->place, err));
    /* mpi (rollout storage on GPUs when rollout.gpus lists them), or ipc on colocated
     * topologies: host shared memory on CPU, CUDA IPC when trainer.gpus == rollout.gpus
     * (each pair shares its GPU); the public API: its subset (check_supported) */
    s->ipc = s->topo.transport == RF_TRANSPORT_IPC && s->topo.colocated;
    s->nccl = s->topo.transport == RF_TRANSPORT_NCCL;
    st = s->so.owned ? check_transport(s, err) : check_supported(s, err);
    RF_CHECK(rf_session_agree(s, st, err));
    RF_CHECK(rf_session_agree(s, setup_accel(s, err), err));
    s->p2p = s->topo.mode == RF_MODE_P2P;
    RF_CHECK(rf_session_agree(s, check_p2p(s, err), err));
    /* on by default (topology default true); the option or transfer.integrity: false turns
     * it off */
    s->integrity = s->opt.integrity > 0 || (s->opt.integrity == 0 && s->topo.integrity);
    RF_CHECK(choose_trailer(s, err));
    if (MPI_Comm_split(s->comm, (int)s->me.role, s->rank, &s->role_comm) != MPI_SUCCESS) {
        s->role_comm = MPI_COMM_NULL;
        st = rf_err_set(err, RF_ERR_MPI, "rank %d: MPI_Comm_split failed", s->rank);
    }
    /* the trainers' stage communicators (HDF5 lock-step reads), here with the role split: a
     * communicator cannot be made by a bounded wait (MPI has no nonblocking split), and
     * create's collectives wait plainly by design (every rank calls it at the job's start);
     * the plan, past its join, makes none (tests/mpi/check_session_join.c: a trainer that
     * stops where the plan set up its trainer fails the others by join_timeout_s) */
    if (st == RF_OK && !rf_session_is_rollout(s) &&
        MPI_Comm_split(s->role_comm, s->me.p, s->rank, &s->stage_comm) != MPI_SUCCESS) {
        s->stage_comm = MPI_COMM_NULL;
        st = rf_err_set(err, RF_ERR_MPI, "trainer rank %d: MPI_Comm_split of stage %d failed",
                        s->rank, s->me.p);
    }
    RF_CHECK(rf_session_agree(s, st, err));
    st = rf_inventory_build(&s->cfg, s->topo.quantization, s->topo.group_size, &s->inv, err);
    s->inv_ok = st == RF_OK;
    if (st == RF_OK) /* rollout.layout: the engine tensors' names and shapes */
        st = rf_inventory_apply_layout(&s->inv, s->topo.r_layout, err);
    if (st == RF_OK && s->so.checkpoint)
        st = rf_ckpt_open(s->so.checkpoint, &s->ck, err);
    if (st == RF_OK && s->ck != NULL) { /* OPT's published decoder.* names (DESIGN.md 4) */
        const char *from[4], *to[4];
        int na = rf_family_aliases(s->inv.cfg.family, from, to, 4);
        for (int a = 0; a < na && st == RF_OK; a++) {
            size_t n = 0;
            st = rf_ckpt_rename_prefix(s->ck, from[a], to[a], &n, err);
            if (st == RF_OK && n > 0 && s->rank == 0)
                rf_info("checkpoint %s: %zu tensor(s) named %s* read as %s*", s->so.checkpoint,
                        n, from[a], to[a]);
        }
    }
    if (st == RF_OK && rf_session_is_rollout(s))
        st = open_rollout(s, err);
    if (st == RF_OK && !s->so.owned)
        st = build_expected(s, err);
    RF_CHECK(rf_session_agree(s, st, err));
    st = rf_ctl_create(s->comm, &s->ctl, err);
    RF_CHECK(rf_session_agree(s, st, err));
    st = rf_xfer_create(s->ctl, rf_transport_name(s->topo.transport), s->topo.chunk_bytes,
                        s->topo.buffers, &s->xfer, err);
    return rf_session_agree(s, st, err);
}

rf_status_t rf_session_open(MPI_Comm comm, const char *topology, const rf_session_setup_t *so,
                            rf_session_t **s_p, rf_err_t *err)
{
    *s_p = NULL;
    rf_session_t *s = calloc(1, sizeof(*s));
    if (s == NULL) /* cannot tell the other ranks without a communicator of our own */
        return rf_err_set(err, RF_ERR_NOMEM, "rf_session_create: out of memory");
    s->comm = s->role_comm = s->stage_comm = MPI_COMM_NULL;
    rf_status_t cst = rf_session_check_init(&s->check, err);
    if (cst != RF_OK) {
        free(s);
        return cst;
    }
    s->so = *so;
    s->opt = so->opt;
    if (!s->so.owned)
        s->so.policy = s->opt.layerwise ? RF_POLICY_LAYERWISE : RF_POLICY_AUTO;
    rf_status_t st = open_session(s, comm, topology, err);
    if (st != RF_OK) {
        rf_session_release(s, true);
        return st;
    }
    *s_p = s;
    return RF_OK;
}

/* The chunk plan, the senders and receivers and the gate's expectation of every transport
 * and mode (every rank computes the same). */
static rf_status_t build_transfer(rf_session_t *s, rf_err_t *err)
{
    rf_status_t st;
    s->items = rf_chunk_items_of_manifest(&s->inv, &s->man);
    s->item_tensor = calloc((size_t)s->man.n + 1, sizeof(int));
    if (s->items == NULL || s->item_tensor == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < s->man.n; i++)
        s->item_tensor[i] = s->man.entries[i].tensor;
    st = rf_chunk_plan_create(s->items, (size_t)s->man.n,
                              rf_xfer_plan_bytes(s->topo.chunk_bytes, s->integrity), &s->cplan,
                              err);
    RF_CHECK(rf_session_agree(s, st, err));

    /* schedule: stage senders, receivers, and the gate's expectation */
    s->senders = calloc((size_t)s->topo.t_pp + 1, sizeof(int));
    s->receivers = calloc((size_t)s->R + 1, sizeof(int));
    if (!s->senders || !s->receivers)
        return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
    for (int p = 0; p < s->topo.t_pp; p++)
        s->senders[p] = rf_topology_trainer_rank(&s->topo, 0, 0, 0, p);
    for (int r = 0; r < s->R; r++)
        s->receivers[r] = s->T + r;
    RF_CHECK(rf_gate_expect_init(&s->expect, s->size, err));
    if (s->ipc) {
        s->pair_of = calloc((size_t)s->size, sizeof(int));
        if (s->pair_of == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
        RF_CHECK(rf_session_allgather(s, &s->place.pair_rank, 1, MPI_INT, s->pair_of,
                                      "the ipc pairs", err));
        st = RF_OK;
        for (int r = 0; r < s->size && st == RF_OK; r++)
            if (s->pair_of[r] < 0 || s->pair_of[r] >= s->size)
                st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: transport ipc: rank %d has no pair",
                                s->topo.file, r);
        RF_CHECK(st);
        if (!s->so.owned) /* the public API: the trainer's registered allocations */
            RF_CHECK(ipc_share_table(s, err));
        RF_CHECK(rf_session_agree(s, ipc_plan(s, err), err));
    }
    for (int p = 0; p < s->cplan->n_stages && s->ipc; p++) {
        /* ipc: per chunk SEQ (stage sender -> receiver) and ACK (back); READY per pair */
        const rf_chunk_stage_range_t *sr = &s->cplan->stages[p];
        uint64_t seq_bytes = RF_IPC_SEQ_BYTES + (s->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
        for (int r = 0; r < s->R; r++) {
            size_t a = (size_t)s->senders[p], d = (size_t)s->receivers[r];
            s->expect.chunks[a * s->size + d] += sr->chunk_count;
            s->expect.bytes[a * s->size + d] += sr->chunk_count * seq_bytes;
            s->expect.chunks[d * s->size + a] += sr->chunk_count;
            s->expect.bytes[d * s->size + a] += sr->chunk_count * (uint64_t)RF_IPC_ACK_BYTES;
        }
    }
    for (int q = 0; q < s->T && s->ipc; q++) {
        s->expect.chunks[(size_t)q * s->size + s->pair_of[q]] += 1;
        s->expect.bytes[(size_t)q * s->size + s->pair_of[q]] += RF_IPC_ACK_BYTES;
    }
    uint64_t per = RF_CHUNK_HEADER_BYTES + (s->integrity ? RF_CHUNK_TRAILER_BYTES : 0);
    if (s->p2p) {
        /* p2p: this rank's part of the schedule (the pairs it sends or receives); rank 0's
         * gate expectation from every rank's part, both ends of each pair agreeing */
        st = rf_p2p_schedule_build_rank(&s->topo, &s->inv, &s->man,
                                        rf_xfer_plan_bytes(s->topo.chunk_bytes, s->integrity),
                                        s->rank, &s->p2p_s, err);
        RF_CHECK(rf_session_agree(s, st, err));
        void *mine = NULL, *all = NULL;
        int nb = 0;
        size_t total = 0;
        /* rf_p2p_expect_agree's halves around a gather of the session's (bounded); a failed
         * count still takes part (0 bytes) */
        st = rf_p2p_expect_records(&s->p2p_s, s->rank, per, &mine, &nb, err);
        rf_status_t gs = rf_session_gatherv(s, mine, nb, 0, &all, &total, "the p2p pairs", err);
        free(mine);
        if (gs != RF_OK)
            return gs;
        if (s->rank == 0 && st == RF_OK)
            st = rf_p2p_expect_check(all, total, &s->expect, err);
        free(all);
        RF_CHECK(rf_session_agree(s, st, err));
    }
    for (int p = 0; p < s->cplan->n_stages && !s->ipc && !s->p2p; p++) {
        const rf_chunk_stage_range_t *sr = &s->cplan->stages[p];
        uint64_t bytes = sr->payload_bytes + (uint64_t)sr->chunk_count * per;
        for (int r = 0; r < s->R; r++) {
            s->expect.chunks[(size_t)s->senders[p] * s->size + s->receivers[r]] += sr->chunk_count;
            s->expect.bytes[(size_t)s->senders[p] * s->size + s->receivers[r]] += bytes;
        }
    }
    return RF_OK;
}

/* The transport's setup once the trainer's shards exist: nccl's communicator layout (DESIGN.md
 * section 9: one communicator per stage, broadcast: its sender + every rollout rank; p2p: its
 * trainer ranks + every rollout rank; created at the first update's begin and re-created
 * after a FAILED one) and resident trainer weights; ipc's arena backend (cuda when this rank
 * has a GPU, a pair shares it; host-device with the tests' host-device accelerator; else host
 * shared memory), pair and piece placement; the trainer's stage gather; the ipc arenas. */
static rf_status_t build_transport(rf_session_t *s, rf_err_t *err)
{
    /* REFIT_MPI_RECV_PAGEABLE=1: the pageable receive buffers of before issue 18 (A/B) */
    bool pageable = false;
    rf_status_t st = rf_env_flag("REFIT_MPI_RECV_PAGEABLE", false, &pageable, err);
    rf_xfer_setup_t xs = {
        .device = s->place.device,
        .accel = s->accel,
        .layout = s->nccl ? &s->nccl_layout : NULL,
        .arena_backend = s->place.device >= 0 ? "cuda"
                         : (s->accel != NULL && s->accel->ops == &rf_accel_host_device_ops)
                             ? "host-device"
                             : "host",
        .pair = s->pair_of != NULL ? s->pair_of[s->rank] : -1,
        .staged = s->ipc_staged,
        .pieces = s->ipc_pieces,
        .pageable_recv = pageable,
        .send_spin = -1, /* rf_xfer_send_spin_default: cores to spare, or REFIT_MPI_SEND_SPIN */
    };
    if (st == RF_OK && s->nccl)
        st = rf_nccl_layout_build(&s->topo, &s->nccl_layout, err);
    if (st == RF_OK)
        st = rf_xfer_setup(s->xfer, &xs, err);
    RF_CHECK(rf_session_agree(s, st, err));
    if (s->nccl) {
        if (stages_gather(s))
            s->wire = "nccl gather communicators";
        st = setup_nccl_resident(s, err);
        RF_CHECK(rf_session_agree(s, st, err));
        /* [0]: some trainer is resident; [1]: some trainer would be but for integrity (the
         * table names the host pack and why) */
        int mine[2] = {s->nccl_resident, nccl_resident_possible(s) && s->integrity};
        int any[2] = {0, 0};
        RF_CHECK(rf_session_allreduce(s, mine, any, 2, MPI_INT, MPI_MAX, "the resident "
                                      "trainers", err));
        s->fence = any[0] != 0;
        s->integrity_host_pack = any[1] != 0;
    }
    /* the stage gather is the transport's (nccl: its trainer-only gather communicators where
     * a stage has them, set up above; else the MPI gather on the trainer-only communicator) */
    st = rf_session_is_rollout(s) ? RF_OK : rf_trainer_attach(&s->tr, s->xfer, err);
    RF_CHECK(rf_session_agree(s, st, err));
    const char *tw = getenv("REFIT_TEST_GATHER_WIRE");
    if (tw != NULL && tw[0] != '\0' && s->nccl && s->rank == 0)
        rf_warn("REFIT_TEST_GATHER_WIRE is ignored on the nccl transport (its stage gathers use "
                "the trainer-only NCCL communicators)");
    if (tw != NULL && tw[0] != '\0' && !s->nccl) {
        st = strcmp(tw, "mpi") == 0
                 ? RF_OK
                 : rf_err_set(err, RF_ERR_INVALID, "REFIT_TEST_GATHER_WIRE=%s: only 'mpi' (tests: "
                              "the stage gather through the gather wire over MPI)", tw);
        RF_CHECK(rf_session_agree(s, st, err));
        /* tests: the stage gather as a transport's own one runs, over MPI */
        if (!rf_session_is_rollout(s) && !s->p2p)
            rf_xfer_gather_use_test_wire(s->tr.gather);
        if (stages_gather(s))
            s->wire = "test wire (REFIT_TEST_GATHER_WIRE=mpi)";
    }
    if (s->ipc) {
        /* device arenas (rf_xfer_setup chose the backend) on every rank or none */
        int mine = (rf_xfer_caps(s->xfer) & RF_XFER_CAP_DEVICE_PAYLOAD) != 0, all = 0;
        RF_CHECK(rf_session_allreduce(s, &mine, &all, 1, MPI_INT, MPI_SUM, "the ipc arenas' "
                                      "backend", err));
        s->ipc_dev = all == s->size; /* the same on every rank (the teardown barrier) */
        if (all != 0 && all != s->size) {
            st = rf_err_set(err, RF_ERR_TOPOLOGY, "%s: ipc: %d of %d ranks have device arenas "
                            "(every rank of a colocated ipc job or none)",
                            s->topo.file, all, s->size);
            return rf_session_agree(s, st, err);
        }
        RF_CHECK(setup_ipc(s, err));
    }
    return RF_OK;
}

/*
 * rf_manifest_agree's steps (runtime/manifest.c) as waits of the session (rf_session_wait:
 * bounded once the session joined a call): rank 0 broadcasts its manifest, every rank
 * validates it against its own inventory, and all agree on the digest. The same results and
 * texts as rf_manifest_agree. Collective.
 */
static rf_status_t manifest_agree(rf_session_t *s, rf_err_t *err)
{
    uint64_t len = s->rank == 0 ? rf_manifest_serialize(&s->man, NULL, 0) : 0;
    RF_CHECK(rf_session_bcast(s, &len, (int)sizeof(len), 0, "the manifest's size", err));
    char *buf = malloc(len + 1);
    rf_status_t st = buf == NULL ? rf_err_set(err, RF_ERR_NOMEM, "manifest: out of memory")
                                 : RF_OK;
    if (st != RF_OK) /* the others wait in the broadcast: this rank leaves (lost) */
        return rf_session_lose(s, st, err);
    if (s->rank == 0)
        rf_manifest_serialize(&s->man, buf, len + 1);
    st = rf_session_bcast(s, buf, (int)len, 0, "the manifest", err);
    if (st != RF_OK) {
        free(buf);
        return st;
    }
    rf_err_t local;
    rf_err_clear(&local);
    if (s->rank != 0)
        st = rf_manifest_parse(buf, len, &s->man, &local);
    free(buf);
    if (st == RF_OK)
        st = rf_manifest_validate(&s->man, &s->inv, &s->topo, &local);
    /* every rank learns the first failing rank's message */
    int code = st == RF_OK ? s->size : s->rank, first = s->size;
    RF_CHECK(rf_session_allreduce(s, &code, &first, 1, MPI_INT, MPI_MIN, "the manifest's check",
                                  err));
    if (first < s->size) {
        struct {
            int status;
            char msg[RF_ERR_MSG_MAX];
        } rep;
        memset(&rep, 0, sizeof(rep));
        rep.status = (int)local.status;
        snprintf(rep.msg, sizeof(rep.msg), "%s", local.msg);
        RF_CHECK(rf_session_bcast(s, &rep, (int)sizeof(rep), first, "the manifest's check",
                                  err));
        return rf_err_set(err, (rf_status_t)rep.status, "rank %d: %s", first, rep.msg);
    }
    uint64_t mn = 0, mx = 0;
    RF_CHECK(rf_session_allreduce(s, &s->man.digest, &mn, 1, MPI_UINT64_T, MPI_MIN,
                                  "the manifest digests", err));
    RF_CHECK(rf_session_allreduce(s, &s->man.digest, &mx, 1, MPI_UINT64_T, MPI_MAX,
                                  "the manifest digests", err));
    if (mn != mx)
        return rf_err_set(err, RF_ERR_MISMATCH,
                          "manifest digests disagree across ranks (%016" PRIx64 " vs %016" PRIx64
                          ")",
                          mn, mx);
    return RF_OK;
}

/* Whether an mpi trainer's sender seals refit-sum64 from its readers' sums with a seal pool
 * beside it: it spins (rf_xfer_send_spin_default, the pool's condition) and seals fused
 * (rf_xfer_seal_fused): the transport's own rules, asked before it is built. */
static rf_status_t fused_seal_default(const rf_session_t *s, bool *fused_p, rf_err_t *err)
{
    bool spin = false, fused = true;
    RF_CHECK(rf_xfer_send_spin_default(s->size, &spin, err));
    RF_CHECK(rf_xfer_seal_fused(&fused, err));
    *fused_p = spin && fused;
    return RF_OK;
}

rf_status_t rf_session_build(rf_session_t *s, rf_err_t *err)
{
    rf_status_t st = rf_session_is_rollout(s) ? build_rollout(s, err) : RF_OK;
    RF_CHECK(rf_session_agree(s, st, err));

    /* manifest: trainer rank 0 builds it from the inventory and the checkpoint headers, once
     * the checkpoint's own config.json (if any) agrees with the topology's */
    st = RF_OK;
    if (s->rank == 0 && s->ck != NULL)
        st = rf_ckpt_check_config(s->ck, s->so.checkpoint, &s->cfg, s->topo.quantization,
                                  s->topo.group_size, err);
    /* a quantized model's registered checkpoint (runtime/session_ckpt.c): its headers decide
     * each linear's source and the stored dtypes, as refit-run's manifest (trainer rank 0
     * registered it, checked against its config there) */
    rf_ckpt_t *mck = s->ck;
    const char *mpath = s->so.checkpoint;
    if (mck == NULL && s->src_ck != NULL && s->topo.quantization != RF_QUANT_NONE) {
        mck = s->src_ck;
        mpath = s->ck_path;
    }
    if (s->rank == 0 && st == RF_OK)
        st = rf_manifest_build(&s->inv, &s->topo, mck, mpath, &s->man, err);
    RF_CHECK(rf_session_agree(s, st, err));
    RF_CHECK(manifest_agree(s, err));
    st = RF_OK;
    for (int i = 0; i < s->man.n && st == RF_OK && rf_session_is_rollout(s); i++)
        st = rf_plan_set_source_dtype(&s->plan, s->man.entries[i].tensor, s->man.entries[i].dtype,
                                      err);
    RF_CHECK(rf_session_agree(s, st, err));
    RF_CHECK(rf_session_agree(s, build_transfer(s, err), err));

    /* tests: REFIT_TEST_SESSION_AT_TRAINER stops a trainer rank here, where the trainers made
     * their stage communicator until it moved to rf_session_create (a plain MPI_Comm_split the
     * others would have waited in for good): now the others' next wait fails it, bounded */
    st = rf_session_is_rollout(s) || !s->bounded
             ? RF_OK
             : rf_session_test_stop(s, "REFIT_TEST_SESSION_AT_TRAINER",
                                    "before setting up the trainer", err);
    if (st != RF_OK)
        return st;
    if (!rf_session_is_rollout(s)) {
        st = rf_trainer_init(&s->tr, &s->topo, &s->inv, &s->man, s->cplan, &s->me, s->role_comm,
                             s->stage_comm, err);
        s->tr_ready = st == RF_OK;
        /* a checkpoint update is read as its chunks are packed where the mpi transport packs
         * them on the host (rf_trainer_produce; issue 18 item 3); REFIT_CKPT_STREAM=0: read
         * whole first, as before (benchmarks' A/B); another value is refused */
        bool stream = true;
        if (st == RF_OK)
            st = rf_env_flag("REFIT_CKPT_STREAM", true, &stream, err);
        s->tr.stream_reads = s->topo.transport == RF_TRANSPORT_MPI && !s->p2p && stream;
        /* threads reading each streamed chunk: the cores a rank of this node can spare
         * beyond its main and pack threads (1 on CI's 2 cores, 4 on the H200 host's 16 with
         * 2 ranks), or REFIT_CKPT_READ_THREADS (1..RF_ENV_THREADS_MAX); twice that where the
         * spinning sender seals refit-sum64 from the readers' sums (the fused seal): the
         * readers sum what they read, and the seal's workers (as many) read instead */
        size_t rt = (size_t)rf_env_spare_threads(s->size);
        bool fused = false;
        if (st == RF_OK && s->tr.stream_reads && s->integrity &&
            s->trailer == RF_CHUNK_TRAILER_SUM64)
            st = fused_seal_default(s, &fused, err);
        if (fused)
            rt = 2 * rt > RF_ENV_THREADS_MAX ? RF_ENV_THREADS_MAX : 2 * rt;
        if (st == RF_OK)
            st = rf_env_count("REFIT_CKPT_READ_THREADS", "threads", rt, &rt, err);
        if (st == RF_OK && rt > RF_ENV_THREADS_MAX) /* rf_env_check refused it first */
            st = rf_err_set(err, RF_ERR_INVALID, "REFIT_CKPT_READ_THREADS=%zu: at most %d threads",
                            rt, RF_ENV_THREADS_MAX);
        s->tr.read_threads = (int)rt;
    }
    RF_CHECK(rf_session_agree(s, st, err));
    st = s->so.configured ? s->so.configured(s->so.ctx, s, err) : RF_OK;
    RF_CHECK(rf_session_agree(s, st, err)); /* same options and topology: same answer */
    RF_CHECK(build_transport(s, err));
    /* the public API's trainer reads the registered tensors in place */
    st = !s->so.owned && !rf_session_is_rollout(s) ? borrow_trainer(s, err) : RF_OK;
    /* production after GO that can fail: a quantized model's trainer-side quantizer, a
     * checkpoint's reads (the public API's registered one, refit-run's --checkpoint); not
     * refit-run's colocated ipc, whose training step writes the arena before the update and
     * reports a failure at the begin agreement. From what every rank holds alike, never from a
     * trainer's hooks: the agreement is collective */
    s->agree_produce = s->topo.quantization != RF_QUANT_NONE || s->ck_trainers || s->ck != NULL;
    if (s->so.owned && s->ipc)
        s->agree_produce = false;
    return rf_session_agree(s, st, err);
}

void rf_session_release(rf_session_t *s, bool mpi)
{
    if (s == NULL)
        return;
    if (mpi && s->xfer && s->ipc_dev) {
        /* CUDA IPC: every importer closes its mappings before any exporter frees. Bounded as
         * every wait of a joined session (rf_session_wait): a rank that left without closing
         * (or stopped) fails it, and then no exporter may free what an importer may still map:
         * the rest is torn down as a lost session's (memory only, the transfer engine and the
         * communicators left to MPI_Finalize) */
        rf_xfer_ipc_close_imports(s->xfer);
        rf_err_t be;
        rf_err_clear(&be);
        s->call = "rf_session_destroy";
        if (rf_session_barrier(s, "the ipc teardown barrier", &be) != RF_OK) {
            rf_warn("%s; torn down locally: the ipc arenas, the transfer engine and the "
                    "communicators are left to MPI_Finalize", be.msg);
            mpi = false;
        }
    }
    if (s->tr_ready) /* its stage gather first: it runs on the transfer engine */
        rf_trainer_free(&s->tr);
    if (mpi && s->xfer)
        rf_xfer_destroy(s->xfer);
    if (mpi && s->ctl)
        rf_ctl_destroy(s->ctl);
    if (!mpi) { /* their requests and communicators stay with MPI until MPI_Finalize */
        rf_session_park(s->xfer);
        rf_session_park(s->ctl);
    }
    if (s->plan_ok)
        rf_plan_free(&s->plan);
    if (s->st_ok)
        rf_storage_free(&s->st); /* registered slots: borrowed, not freed */
    if (s->ipc_mirror != NULL)
        s->accel->ops->free_host(s->accel, s->ipc_mirror);
    if (s->nccl_wdev != NULL)
        s->accel->ops->free(s->accel, s->nccl_wdev);
    rf_trainer_source_free(&s->src);
    rf_session_quant_free(s); /* after the trainer; device buffers: before the accelerator */
    rf_accel_close(s->accel); /* after the storage and plan that used it */
    if (s->ck)
        rf_ckpt_close(s->ck);
    rf_session_ckpt_free(s); /* after the trainer, which pointed into its buffers */
    rf_chunk_plan_destroy(s->cplan);
    rf_p2p_schedule_free(&s->p2p_s);
    rf_nccl_layout_free(&s->nccl_layout);
    rf_gate_expect_fini(&s->expect);
    free(s->items);
    free(s->item_tensor);
    free(s->senders);
    free(s->receivers);
    free(s->pair_of);
    free(s->ipc_staged);
    free(s->ipc_piece_staged);
    free(s->ipc_pieces);
    free(s->ipc_abase);
    free(s->ipc_abytes);
    free(s->ipc_table);
    rf_manifest_free(&s->man);
    if (s->exmap_ok)
        rf_map_free(&s->exmap);
    free(s->ex);
    free(s->ex_of_tensor);
    if (s->inv_ok)
        rf_inventory_free(&s->inv);
    if (s->cfg_ok)
        rf_model_config_free(&s->cfg);
    if (mpi && s->stage_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->stage_comm);
    if (mpi && s->role_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->role_comm);
    if (mpi && s->comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->comm);
    rf_session_check_fini(&s->check);
    free(s);
}
