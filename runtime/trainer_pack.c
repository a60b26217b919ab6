/*
 * refit: the trainer's one pack (see include/refit/trainer.h and DESIGN.md section 6):
 * rf_trainer_pack, a chunk of the broadcast plan or of one receiver's p2p plan into a host
 * payload or, as copy descriptors, a device one; the broadcast stage sender's gather per chunk
 * (every other copy of record of the stage sends one message holding, piece by piece, the
 * intersection of its shard with the piece's rows, through the stage gather of the job's
 * transport, rf_xfer_gather_*, while the sender copies its own parts straight from its shard
 * buffers); the contributors' side and the drain after FAILED; the trainer as the transfer's
 * source (rf_trainer_source_pack). Shards and production are in runtime/trainer.c.
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
#include "refit/trainer.h"
#include "trainer_int.h"

/* Bytes owner `rank` contributes to chunk c. */
static uint64_t contribution_bytes(const rf_trainer_t *tr, const rf_chunk_t *c, int rank)
{
    uint64_t total = 0;
    for (size_t k = 0; k < c->piece_count; k++) {
        if (!piece_on(tr, c->piece_begin + k))
            continue;
        const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + k];
        const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[pc->item].tensor];
        rf_owner_t own[RF_MAX_OWNERS];
        int n = rf_trainer_owners(tr->topo, tr->inv, t, own);
        for (int o = 0; o < n; o++) {
            rf_region_t part;
            if (own[o].rank == rank && piece_part(&own[o].reg, pc, &part))
                total += (uint64_t)(part.r1 - part.r0) * (uint64_t)(part.c1 - part.c0) *
                         entry_es(tr, (int)pc->item);
        }
    }
    return total;
}

/* Copy `part` rows of a region-shaped buffer (elements in sdt: a shard buffer's dtype, or
 * the entry's for a peer's part) into a full-width piece in the payload. */
static void place_part(const rf_trainer_t *tr, char *payload, const rf_chunk_piece_t *pc,
                       const rf_region_t *part, const char *src, size_t src_pitch, rf_dtype_t sdt)
{
    size_t es = entry_es(tr, (int)pc->item);
    size_t row_bytes = entry_row_bytes(tr, (int)pc->item);
    size_t run = (size_t)(part->c1 - part->c0);
    for (int64_t r = part->r0; r < part->r1; r++)
        put_elems(tr, (int)pc->item,
                  payload + pc->offset + (size_t)(r - (int64_t)pc->row_begin) * row_bytes +
                      (size_t)part->c0 * es,
                  src + (size_t)(r - part->r0) * src_pitch, sdt, run);
}

/* Rows [r0, r1) x columns [c0, c1) (tensor coordinates, inside this rank's shard) of entry
 * ei's shard buffer, in its dtype: *src_p and its row pitch *pitch_p. Host shards: where they
 * are. Device shards (rf_trainer_use_device): one device-to-host copy into tr->d2h_buf (whole
 * rows: one contiguous copy; a column range: a 2D copy), synchronized before the host reads
 * it; *src_p is valid until the next read. */
static rf_status_t shard_read(rf_trainer_t *tr, int ei, int64_t r0, int64_t r1, int64_t c0,
                              int64_t c1, const char **src_p, size_t *pitch_p, rf_err_t *err)
{
    const rf_region_t *reg = &tr->reg[ei];
    size_t es = buf_es(tr, ei);
    size_t pitch = (size_t)(reg->c1 - reg->c0) * es;
    const char *src = tr->buf[ei] + (size_t)(r0 - reg->r0) * pitch + (size_t)(c0 - reg->c0) * es;
    if (tr->dev == NULL) {
        *src_p = src;
        *pitch_p = pitch;
        return RF_OK;
    }
    size_t width = (size_t)(c1 - c0) * es, rows = (size_t)(r1 - r0);
    uint64_t bytes = (uint64_t)width * rows;
    if (bytes > tr->d2h_cap) {
        char *b = malloc((size_t)bytes);
        if (b == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: no %" PRIu64 "-byte host "
                              "staging buffer for %s", tr->me.world_rank, bytes,
                              tr->man->entries[ei].name);
        free(tr->d2h_buf);
        tr->d2h_buf = b;
        tr->d2h_cap = bytes;
    }
    rf_status_t st = RF_OK;
    if (bytes > 0)
        st = width == pitch
                 ? tr->dev->ops->copy(tr->dev, tr->d2h_buf, src, (size_t)bytes, RF_COPY_D2H, NULL)
                 : tr->dev->ops->copy_2d(tr->dev, tr->d2h_buf, width, src, pitch, width, rows,
                                         RF_COPY_D2H, NULL);
    if (st == RF_OK && bytes > 0)
        st = rf_accel_sync(tr->dev);
    if (st != RF_OK)
        return rf_err_set(err, st, "trainer rank %d: %s: copying rows [%lld, %lld) of its shard "
                          "from CUDA device %d to the host failed", tr->me.world_rank,
                          tr->man->entries[ei].name, (long long)r0, (long long)r1,
                          tr->dev->device);
    tr->stats.bytes_d2h += bytes;
    tr->stats.d2h_copies += bytes > 0;
    *src_p = tr->d2h_buf;
    *pitch_p = width;
    return RF_OK;
}

/* Broadcast, host payload: the stage sender's pack of chunk c, its own parts copied while
 * the peers' parts travel through the stage gather. */
static rf_status_t pack_gather(rf_trainer_t *tr, uint32_t update, const rf_chunk_t *c,
                               void *payload, double deadline, rf_chunk_sum_t *sum,
                               rf_err_t *err)
{
    int T = rf_topology_trainer_size(tr->topo);
    int peers[RF_XFER_GATHER_MAX_PEERS], npeers = 0;
    uint64_t offs[RF_XFER_GATHER_MAX_PEERS], off = 0;
    double t0 = rf_time_now();
    /* peers of this chunk: every other copy of record with a non-empty part */
    for (size_t k = 0; k < c->piece_count; k++) {
        if (!piece_on(tr, c->piece_begin + k))
            continue;
        const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + k];
        const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[pc->item].tensor];
        rf_owner_t own[RF_MAX_OWNERS];
        int n = rf_trainer_owners(tr->topo, tr->inv, t, own);
        for (int o = 0; o < n; o++) {
            rf_region_t part;
            bool seen = own[o].rank == tr->me.world_rank;
            for (int q = 0; q < npeers && !seen; q++)
                seen = peers[q] == own[o].rank;
            if (!seen && piece_part(&own[o].reg, pc, &part) && npeers < RF_XFER_GATHER_MAX_PEERS)
                peers[npeers++] = own[o].rank;
        }
    }
    uint64_t sizes[RF_XFER_GATHER_MAX_PEERS];
    for (int q = 0; q < npeers; q++) {
        uint64_t b = contribution_bytes(tr, c, peers[q]);
        if (off + b > tr->gather_cap || peers[q] < 0 || peers[q] >= T)
            return rf_err_set(err, RF_ERR_INTERNAL,
                              "trainer: gather of chunk %u: bad owner rank %d or overflow",
                              c->seq, peers[q]);
        offs[q] = off;
        sizes[q] = b;
        off += b;
    }
    if (npeers > 0 && tr->gather == NULL)
        return rf_err_set(err, RF_ERR_STATE, "trainer rank %d: chunk %u needs the stage gather "
                          "(rf_trainer_attach)", tr->me.world_rank, c->seq);
    if (npeers > 0)
        RF_CHECK(rf_xfer_gather_recv(tr->gather, update, c->seq, peers, sizes, npeers,
                                     tr->gather_buf, err));
    /* own parts while the peers' parts travel; streamed checkpoint production: their rows
     * from the file, here, by the read threads (a streamed update has no peers) */
    if (tr->stream_ck != NULL)
        RF_CHECK(trainer_stream_chunk(tr, c, payload, npeers == 0 ? sum : NULL, err));
    for (size_t k = 0; k < c->piece_count && tr->stream_ck == NULL; k++) {
        if (!piece_on(tr, c->piece_begin + k))
            continue;
        const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + k];
        int ei = (int)pc->item;
        rf_region_t part;
        if (tr->has[ei] && piece_part(&tr->reg[ei], pc, &part)) {
            const char *src;
            size_t pitch;
            RF_CHECK(shard_read(tr, ei, part.r0, part.r1, part.c0, part.c1, &src, &pitch, err));
            place_part(tr, payload, pc, &part, src, pitch, tr->src_dtype[ei]);
        }
    }
    if (npeers > 0) {
        double tw = rf_time_now();
        rf_err_t e;
        rf_err_clear(&e);
        rf_status_t st = rf_xfer_gather_wait(tr->gather, deadline, &e);
        tr->stats.gather_s += rf_time_now() - tw;
        if (st != RF_OK)
            return rf_err_set(err, st, "trainer rank %d: gathering chunk %u from %d rank(s): %s",
                              tr->me.world_rank, c->seq, npeers, e.msg);
        tr->stats.bytes_gathered += off;
        tr->stats.gather_msgs += (uint64_t)npeers;
    }
    for (int q = 0; q < npeers; q++) {
        const char *src = tr->gather_buf + offs[q];
        for (size_t k = 0; k < c->piece_count; k++) {
            if (!piece_on(tr, c->piece_begin + k))
                continue;
            const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + k];
            const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[pc->item].tensor];
            rf_owner_t own[RF_MAX_OWNERS];
            int n = rf_trainer_owners(tr->topo, tr->inv, t, own);
            for (int o = 0; o < n; o++) {
                rf_region_t part;
                if (own[o].rank != peers[q] || !piece_part(&own[o].reg, pc, &part))
                    continue;
                size_t pitch = (size_t)(part.c1 - part.c0) * entry_es(tr, (int)pc->item);
                place_part(tr, payload, pc, &part, src, pitch, tr->man->entries[pc->item].dtype);
                src += (size_t)(part.r1 - part.r0) * pitch;
            }
        }
    }
    tr->stats.pack_s += rf_time_now() - t0;
    return RF_OK;
}

/* Contributor predicate shared by rf_trainer_contribute and the drain. */
static bool is_contributor(const rf_trainer_t *tr, const rf_rank_info_t *me)
{
    int sender = rf_topology_trainer_rank(tr->topo, 0, 0, 0, me->p);
    /* copies of record contribute (dense: c = 0, d = 0; experts: x = 0, which may be a rank
     * with d != 0); for everyone else contribution_bytes() is 0 and nothing is sent */
    return me->role == RF_ROLE_TRAINER && me->p < tr->plan->n_stages && me->world_rank != sender;
}

void rf_trainer_begin(rf_trainer_t *tr)
{
    tr->stream_ck = NULL;
    tr->stats.bytes_d2h = 0;
    tr->stats.d2h_copies = 0;
    if (tr->gather != NULL)
        rf_xfer_gather_begin(tr->gather);
}

rf_status_t rf_trainer_contribute(rf_trainer_t *tr, uint32_t update, int buffers,
                                  double deadline, rf_err_t *err)
{
    int sender = rf_topology_trainer_rank(tr->topo, 0, 0, 0, tr->stage);
    const rf_chunk_stage_range_t *sr;
    rf_status_t st = RF_OK;
    if (!is_contributor(tr, &tr->me))
        return RF_OK;
    if (tr->gather == NULL)
        return rf_err_set(err, RF_ERR_STATE, "trainer rank %d: no stage gather "
                          "(rf_trainer_attach)", tr->me.world_rank);
    /* sends of an earlier update never drained: complete them first (under this deadline) */
    RF_CHECK(rf_xfer_gather_settle(tr->gather, 0, deadline, err));
    sr = &tr->plan->stages[tr->stage];
    for (uint32_t k = 0; k < sr->chunk_count; k++) {
        const rf_chunk_t *c = &tr->plan->chunks[sr->chunk_begin + k];
        uint64_t b = contribution_bytes(tr, c, tr->me.world_rank);
        if (b == 0)
            continue;
        if (tr->fault_skip_seq >= 0 && (int64_t)c->seq >= tr->fault_skip_seq) {
            /* test hook: the first part at or after the seq is never sent */
            rf_warn("fault: trainer rank %d skips its gather part of chunk %u (update %u)",
                    tr->me.world_rank, c->seq, update);
            tr->fault_skip_seq = -1;
            continue;
        }
        char *msg = malloc(b), *w = msg;
        if (msg == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "trainer: out of memory");
        for (size_t p = 0; p < c->piece_count; p++) {
            if (!piece_on(tr, c->piece_begin + p))
                continue;
            const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + p];
            int ei = (int)pc->item;
            const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
            rf_region_t part;
            rf_owner_t own[RF_MAX_OWNERS];
            int n = rf_trainer_owners(tr->topo, tr->inv, t, own);
            bool mine = false;
            for (int o = 0; o < n; o++)
                mine |= own[o].rank == tr->me.world_rank;
            if (!mine || !tr->has[ei] || !piece_part(&tr->reg[ei], pc, &part))
                continue;
            size_t row = (size_t)(tr->reg[ei].c1 - tr->reg[ei].c0), pitch;
            const char *src;
            st = shard_read(tr, ei, part.r0, part.r1, part.c0, part.c1, &src, &pitch, err);
            if (st != RF_OK) {
                free(msg);
                return st;
            }
            /* one run: the part is whole rows of the shard */
            put_elems(tr, ei, w, src, tr->src_dtype[ei], (size_t)(part.r1 - part.r0) * row);
            w += (size_t)(part.r1 - part.r0) * row * entry_es(tr, ei);
        }
        rf_err_t e;
        rf_err_clear(&e);
        /* the gather takes msg: MPI posts it (at most `buffers` in flight); a transport's own
         * gather returns once it is on its way */
        st = rf_xfer_gather_send(tr->gather, update, c->seq, sender, msg, b, buffers, deadline,
                                 &e);
        if (st != RF_OK)
            return rf_err_set(err, st, "trainer rank %d: %s", tr->me.world_rank, e.msg);
    }
    /* on error the sends stay in flight: rf_trainer_drain completes them */
    rf_err_t e;
    rf_err_clear(&e);
    st = rf_xfer_gather_settle(tr->gather, 0, deadline, &e);
    if (st != RF_OK)
        rf_err_set(err, st, "trainer rank %d: sending gather parts of stage %d to rank %d: %s",
                   tr->me.world_rank, tr->stage, sender, e.msg);
    return st;
}

rf_status_t rf_trainer_drain(rf_trainer_t *tr, uint32_t update, double deadline, rf_err_t *err)
{
    int T = rf_topology_trainer_size(tr->topo);
    int sender = rf_topology_trainer_rank(tr->topo, 0, 0, 0, tr->stage);
    if (tr->gather == NULL)
        return RF_OK; /* never attached: no gather message was ever posted */
    if (is_contributor(tr, &tr->me))
        return rf_xfer_gather_drain(tr->gather, update, sender, NULL, 0, NULL, deadline, err);
    if (!tr->sender)
        return RF_OK;
    int *contributors = malloc(((size_t)T + 1) * sizeof(int)), n = 0;
    uint64_t drained = 0;
    if (contributors == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "trainer drain: out of memory");
    for (int r = 0; r < T; r++) {
        rf_rank_info_t info;
        if (rf_topology_rank_info(tr->topo, r, &info) == RF_OK && info.p == tr->stage &&
            is_contributor(tr, &info))
            contributors[n++] = r;
    }
    rf_status_t st = rf_xfer_gather_drain(tr->gather, update, sender, contributors, n, &drained,
                                          deadline, err);
    free(contributors);
    if (st == RF_OK && drained)
        rf_info("trainer rank %d: drained %" PRIu64 " stale gather message(s) of update %u",
                tr->me.world_rank, drained, update);
    return st;
}

/* rect inside this rank's shard of entry, else RF_ERR_INVALID naming it. */
static rf_status_t rect_check(const rf_trainer_t *tr, int entry, const rf_region_t *rect,
                              rf_err_t *err)
{
    const rf_region_t *reg = entry >= 0 && entry < tr->man->n ? &tr->reg[entry] : NULL;
    if (reg == NULL || !tr->has[entry] || rect->r0 < reg->r0 || rect->r1 > reg->r1 ||
        rect->c0 < reg->c0 || rect->c1 > reg->c1 || rect->r1 < rect->r0 || rect->c1 < rect->c0)
        return rf_err_set(err, RF_ERR_INVALID,
                          "trainer rank %d: rectangle rows [%lld, %lld) x columns [%lld, "
                          "%lld) of %s is not inside its shard",
                          tr->me.world_rank, (long long)rect->r0, (long long)rect->r1,
                          (long long)rect->c0, (long long)rect->c1,
                          reg != NULL ? tr->man->entries[entry].name : "?");
    return RF_OK;
}

/* Rectangle `rect` of entry (inside this rank's shard) to host dst, rows packed contiguously. */
static rf_status_t copy_rect(rf_trainer_t *tr, int entry, const rf_region_t *rect, void *dst,
                             rf_err_t *err)
{
    RF_CHECK(rect_check(tr, entry, rect, err));
    size_t run = (size_t)(rect->c1 - rect->c0);
    size_t out = run * entry_es(tr, entry), pitch;
    const char *src;
    RF_CHECK(shard_read(tr, entry, rect->r0, rect->r1, rect->c0, rect->c1, &src, &pitch, err));
    for (int64_t r = rect->r0; r < rect->r1; r++)
        put_elems(tr, entry, (char *)dst + (size_t)(r - rect->r0) * out,
                  src + (size_t)(r - rect->r0) * pitch, tr->src_dtype[entry], run);
    return RF_OK;
}

/* The same copy on a device, as byte rows for the accelerator's copy_rows_batch. Pure. */
static rf_status_t rect_rows(const rf_trainer_t *tr, int entry, const rf_region_t *rect,
                             void *dst, rf_accel_rows_t *out, rf_err_t *err)
{
    RF_CHECK(rect_check(tr, entry, rect, err));
    if (tr->src_dtype[entry] != tr->man->entries[entry].dtype)
        return rf_err_set(
            err, RF_ERR_UNSUPPORTED, "trainer rank %d: %s: a %s master is rounded on the host only",
            tr->me.world_rank, tr->man->entries[entry].name, rf_dtype_name(tr->src_dtype[entry]));
    const rf_region_t *reg = &tr->reg[entry];
    int64_t es = (int64_t)entry_es(tr, entry);
    int64_t pitch = (reg->c1 - reg->c0) * es, run = (rect->c1 - rect->c0) * es;
    memset(out, 0, sizeof(*out));
    out->dst.data = dst;
    out->dst.esize = 1;
    out->dst.dtype = RF_DTYPE_U8;
    out->dst.row_stride = run;
    out->dst.col_stride = 1;
    out->src = tr->buf[entry] + (rect->r0 - reg->r0) * pitch + (rect->c0 - reg->c0) * es;
    out->src_dtype = RF_DTYPE_U8;
    out->src_pitch = pitch;
    out->rows = rect->r1 - rect->r0;
    out->cols = run;
    return RF_OK;
}

/* Broadcast on a device: every piece of chunk c at its payload offset as byte rows, out[k] for
 * piece k; each piece must be whole rows of this rank's own shard. Pure. */
static rf_status_t pack_rows(const rf_trainer_t *tr, const rf_chunk_t *c, void *payload,
                             rf_accel_rows_t *out, rf_err_t *err)
{
    for (size_t k = 0; k < c->piece_count; k++) {
        const rf_chunk_piece_t *pc = &tr->plan->pieces[c->piece_begin + k];
        int ei = (int)pc->item;
        const rf_tensor_t *t = &tr->inv->tensors[tr->man->entries[ei].tensor];
        rf_region_t rect = {(int64_t)pc->row_begin, (int64_t)pc->row_end, 0,
                            (int64_t)tensor_cols(t)};
        if (!tr->has[ei] || tr->reg[ei].c0 != 0 || tr->reg[ei].c1 != rect.c1 ||
            rect.r0 < tr->reg[ei].r0 || rect.r1 > tr->reg[ei].r1)
            return rf_err_set(err, RF_ERR_INTERNAL,
                              "trainer rank %d: chunk %u: %s is not whole rows in its own shard "
                              "(a stage gather is needed: pack on the host)",
                              tr->me.world_rank, c->seq, tr->man->entries[ei].name);
        RF_CHECK(rect_rows(tr, ei, &rect, (char *)payload + pc->offset, &out[k], err));
    }
    return RF_OK;
}

/* p2p: each piece's rows of its rectangle (req->rects[piece item]), host or device. */
static rf_status_t pack_rects(rf_trainer_t *tr, const rf_pack_req_t *q, rf_err_t *err)
{
    bool dev = q->mem == RF_PACK_DEVICE;
    for (size_t k = 0; k < q->chunk->piece_count; k++) {
        const rf_chunk_piece_t *pc = &q->pieces[k];
        const rf_p2p_rect_t *r = &q->rects[pc->item];
        rf_region_t part = r->reg;
        part.r0 = r->reg.r0 + (int64_t)pc->row_begin;
        part.r1 = r->reg.r0 + (int64_t)pc->row_end;
        char *dst = (char *)q->payload + pc->offset;
        RF_CHECK(dev ? rect_rows(tr, r->entry, &part, dst, &q->rows[k], err)
                     : copy_rect(tr, r->entry, &part, dst, err));
    }
    return RF_OK;
}

rf_status_t rf_trainer_pack(rf_trainer_t *tr, const rf_pack_req_t *req, rf_err_t *err)
{
    if (tr->stream_ck != NULL && (req->rects != NULL || req->mem == RF_PACK_DEVICE))
        return rf_err_set(err, RF_ERR_INTERNAL,
                          "trainer rank %d: chunk %u: a streamed "
                          "checkpoint update is packed on the host for a broadcast only",
                          tr->me.world_rank, req->chunk->seq);
    if (req->rects != NULL)
        return pack_rects(tr, req, err);
    if (req->mem == RF_PACK_DEVICE)
        return pack_rows(tr, req->chunk, req->payload, req->rows, err);
    return pack_gather(tr, req->update, req->chunk, req->payload, req->deadline, req->sum, err);
}

/* ---- the trainer as the transfer's source ------------------------------------------------ */

rf_status_t rf_trainer_source_pack(void *ctx, const rf_chunk_t *chunk,
                                   const rf_chunk_piece_t *pieces, void *payload,
                                   rf_chunk_sum_t *sum, rf_err_t *err)
{
    rf_trainer_source_t *s = ctx;
    bool dev = s->mem == RF_PACK_DEVICE;
    if (s->before != NULL)
        RF_CHECK(s->before(s->before_ctx, chunk, err));
    if (dev && chunk->piece_count > s->rows_cap) {
        rf_accel_rows_t *r = realloc(s->rows, chunk->piece_count * sizeof(*r));
        if (r == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "trainer rank %d: out of memory",
                              s->tr->me.world_rank);
        s->rows = r;
        s->rows_cap = chunk->piece_count;
    }
    rf_pack_req_t req = {.update = s->update,
                         .chunk = chunk,
                         .pieces = pieces,
                         .rects = s->rects,
                         .payload = payload,
                         .mem = s->mem,
                         .rows = dev ? s->rows : NULL,
                         .deadline = s->deadline,
                         .sum = sum};
    RF_CHECK(rf_trainer_pack(s->tr, &req, err));
    if (!dev)
        return RF_OK;
    /* the chunk buffer is sent right after the pack returns: launch and wait */
    rf_status_t st = chunk->piece_count
                         ? s->accel->ops->copy_rows_batch(s->accel, s->rows, chunk->piece_count,
                                                          NULL)
                         : RF_OK;
    if (st == RF_OK)
        st = rf_accel_sync(s->accel);
    if (st != RF_OK)
        return rf_err_set(err, st, "trainer rank %d: packing chunk %u on GPU %d failed",
                          s->tr->me.world_rank, chunk->seq, s->device);
    return RF_OK;
}

void rf_trainer_source_free(rf_trainer_source_t *src)
{
    if (src == NULL)
        return;
    free(src->rows);
    src->rows = NULL;
    src->rows_cap = 0;
}
