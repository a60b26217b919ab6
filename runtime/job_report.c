/*
 * refit: what the job reports. Every line goes to the caller's rf_job_opts_t.print (job_print;
 * the library never writes to stdout): rank 0's update table and storage digest line, and
 * --bench-json's line. The profile (--profile-dir, docs/design.md#profile): one .jsonl line per
 * update per rank and a summary at teardown. --bench-json: the update times and the device
 * copy ceiling, written by rank 0 after teardown.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "refit/log.h"
#include "job_int.h"

/*
 * Hands text (whole lines, each ending in '\n') to the caller's print callback, one call a
 * line without its newline; nothing without a callback (rf_job_opts_t.print). The library
 * never writes to stdout: what a program shows, and where, is the program's business.
 */
void job_print(const rf_job_opts_t *o, rf_job_stream_t stream, const char *fmt, ...)
{
    char small[1024], *buf = small;
    va_list ap;
    if (o->print == NULL)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(small)) { /* a long reason: format it again, whole */
        buf = malloc((size_t)n + 1);
        if (buf == NULL)
            return;
        va_start(ap, fmt);
        vsnprintf(buf, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    for (char *line = buf; *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        o->print(o->print_ctx, stream, line);
        if (nl == NULL)
            break;
        line = nl + 1;
    }
    if (buf != small)
        free(buf);
}

const char *job_human_bytes(double b, char *buf, size_t cap)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (b >= 1000.0 && i < 4) {
        b /= 1000.0;
        i++;
    }
    snprintf(buf, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
    return buf;
}

/* ---- the update table ----------------------------------------------------------------- */

/* The table's integrity line: on or off (and what turned it off), what the checksum covers
 * on this transport, and the slower path it takes on GPUs until the checksum runs there. */
static void print_integrity(const job_t *j)
{
    if (!j->s->integrity) {
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s off (%s): chunks carry no checksum; a corrupted byte is found only by "
                  "the oracle\n",
                  "integrity", j->integrity_off);
        return;
    }
    /* the trailer algorithm (session_setup.c choose_trailer) */
    const char *alg = j->s->trailer == RF_CHUNK_TRAILER_SUM64 ? "refit-sum64 v1" : "XXH3-64";
    if (j->s->ipc) {
        /* in-place reads copy straight from the pair's weights arena: no wire, no staging
         * buffer, nothing in between to corrupt or to check */
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s on: %s over every SEQ message and its staged bytes, checked before "
                  "unpacking; bytes read in place from the pair's arena are not checksummed%s\n",
                  "integrity", alg, j->s->ipc_dev ? "; staged chunks copied d2h to be hashed" : "");
        return;
    }
    /* mpi with refit-sum64: ranks with device storage check their device chunk buffer */
    const bool on_dev = !j->s->nccl && j->s->trailer == RF_CHUNK_TRAILER_SUM64;
    job_print(
        j->o, RF_JOB_OUT, "  %-10s on: %s trailer on every chunk, checked before unpacking%s%s%s\n",
        "integrity", alg, j->s->nccl ? "; receivers copy each whole chunk d2h to check it" : "",
        on_dev ? "; rollout ranks with device storage check it on their device chunk "
                 "buffer after the h2d copy"
               : "",
        j->s->integrity_host_pack ? "; trainers pack on the host to hash it "
                                    "(transfer.integrity: false packs device to device)"
                                  : "");
}

void job_print_table(job_t *j, uint32_t update, const job_stats_t *all, const rf_gate_verdict_t *v,
                     uint64_t verified)
{
    char b1[32], b2[32], b3[64], b4[64];
    uint64_t produced = 0, read = 0, gathered = 0, elems = 0, mism = 0, dtot = 0, dchg = 0;
    uint64_t deq = 0, fnuz = 0, qtot = 0, qchg = 0, requant = 0;
    int crit = -1, inflight = 0;
    double crit_s = 0, upd = 0, produce_s = 0;
    for (int r = 0; r < j->size; r++) {
        const job_stats_t *s = &all[r];
        produced += s->bytes_produced;
        if (s->role == RF_ROLE_TRAINER && s->produce_s > produce_s)
            produce_s = s->produce_s;
        read += s->bytes_read;
        gathered += s->bytes_gathered;
        elems += s->verify_elems;
        mism += s->verify_mismatch;
        dtot += s->diff_elems;
        dchg += s->diff_changed;
        qtot += s->qdiff_elems;
        qchg += s->qdiff_changed;
        deq += s->dequant_checked;
        fnuz = s->fnuz_tensors > fnuz ? s->fnuz_tensors : fnuz;
        requant = s->requant_tensors > requant ? s->requant_tensors : requant;
        if (s->max_inflight > inflight)
            inflight = s->max_inflight;
        if (s->update_s > upd)
            upd = s->update_s;
        double recv_total = s->begin_s + s->receive_s + s->finalize_s;
        if (s->role == RF_ROLE_ROLLOUT && recv_total >= crit_s) {
            crit_s = recv_total;
            crit = r;
        }
    }
    const job_stats_t *c = crit >= 0 ? &all[crit] : &all[0];
    const job_stats_t *r0 = &all[j->T]; /* first rollout rank */
    /* an update the gate committed but the oracle failed is FAILED on its own line too, with
     * why: its bytes are served and wrong (docs/faults.md, "Failure classes") */
    const job_stats_t *bad = NULL;
    for (int r = 0; r < j->size && bad == NULL && v->committed; r++)
        if (all[r].verify_status != RF_OK)
            bad = &all[r];
    job_print(
        j->o, RF_JOB_OUT,
        "refit update %u/%d: %s  source %s  topology %s (%d trainer + %d rollout ranks)%s%s%s\n",
        update, j->o->steps, v->committed && bad == NULL ? "COMMITTED" : "FAILED", j->source,
        j->s->topo.name, j->T, j->R, bad ? " (committed by the gate; oracle: " : "",
        bad ? bad->verify_msg : "", bad ? ")" : "");
    job_print(
        j->o, RF_JOB_OUT, "  %-10s %s in %zu chunks of %s, %d tensors, manifest %016" PRIx64 "\n",
        "payload", job_human_bytes((double)j->s->man.payload_bytes, b1, sizeof(b1)),
        j->s->cplan->n_chunks, job_human_bytes((double)j->s->topo.chunk_bytes, b2, sizeof(b2)),
        j->s->man.n, j->s->man.digest);
    job_print(j->o, RF_JOB_OUT,
              "  %-10s DIRECT %" PRIu64 "  RUNTIME_VIEW %" PRIu64 "  LAYERWISE %" PRIu64
              "  (per rollout rank; applications %" PRIu64 ", declined %" PRIu64
              ", loader calls %" PRIu64 ", probes %" PRIu64 ")\n",
              "layers", r0->layers[0], r0->layers[1], r0->layers[2], r0->applications, r0->declined,
              r0->loader_calls, r0->bookkeeping_probes);
    job_print(j->o, RF_JOB_OUT,
              "  %-10s update %.3f s | receiver critical %.3f s (rank %d: init %.3f + receive %.3f "
              "[wire %.3f, unpack %.3f, loaders %.3f] + finalize %.3f) | %.2f GB/s\n",
              "time", upd, crit_s, crit, c->begin_s, c->receive_s, c->wire_s, c->unpack_s,
              c->loader_s, c->finalize_s,
              crit_s > 0 ? (double)j->s->man.payload_bytes / crit_s / 1e9 : 0.0);
    job_print(j->o, RF_JOB_OUT,
              "  %-10s produced %s, read %s, gathered %s%s%s; max %d chunks in flight; "
              "production %.3f s (slowest trainer rank)\n", "trainer",
              job_human_bytes((double)produced, b1, sizeof(b1)),
              job_human_bytes((double)read, b2, sizeof(b2)),
              job_human_bytes((double)gathered, b3, sizeof(b3)), j->s->wire ? " over the " : "",
              j->s->wire ? j->s->wire : "", inflight, produce_s);
    if (j->s->fence && !j->s->ipc) { /* nccl trainers with resident weights */
        double res = 0;
        for (int r = 0; r < j->T; r++)
            res = all[r].resident_s > res ? all[r].resident_s : res;
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s trainer weights resident on the GPU (written %.3f s before the update "
                  "began), chunks packed device to device\n",
                  "device", res);
    }
    if (j->s->ipc) {
        uint64_t inpl = 0, stg = 0;
        for (int r = 0; r < j->size; r++) {
            inpl += all[r].ipc_in_place;
            stg += all[r].ipc_staged;
        }
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s rollout ranks read %s in place from their pairs' arenas, %s from "
                  "staging slots\n",
                  "ipc", job_human_bytes((double)inpl, b1, sizeof(b1)),
                  job_human_bytes((double)stg, b2, sizeof(b2)));
        double res = 0;
        for (int r = 0; r < j->T; r++)
            res = all[r].resident_s > res ? all[r].resident_s : res;
        if (!j->s->ipc_dev) {
            job_print(j->o, RF_JOB_OUT,
                      "  %-10s trainer weights written into the shared-memory arenas %.3f s before "
                      "the update began\n",
                      "host", res);
        } else {
            job_print(j->o, RF_JOB_OUT,
                      "  %-10s trainer weights resident on the GPU (written %.3f s before the "
                      "update began); rank %d: %" PRIu64 " row copies in %" PRIu64
                      " device launches\n",
                      "device", res, j->T, r0->batch_rows, r0->batch_launches);
        }
    }
    print_integrity(j);
    if (r0->dev.timeline) { /* REFIT_DEVICE_TIMELINE=1: the first rollout rank's GPU time */
        double gbs = r0->dev.copy_ms > 0 ? (double)r0->dev.copy_bytes / r0->dev.copy_ms / 1e6 : 0;
        job_print(
            j->o, RF_JOB_OUT,
            "  %-10s rank %d GPU: row copies of %s in %.3f ms (%.1f GB/s), LAYERWISE %.3f ms, "
            "other %.3f ms; first to last %.3f ms, idle between %.3f ms (%" PRIu64 " spans), "
            "first launch %.3f ms after the begin, idle after the last %.3f ms\n",
            "timeline", j->T, job_human_bytes((double)r0->dev.copy_bytes, b1, sizeof(b1)),
            r0->dev.copy_ms, gbs, r0->dev.layerwise_ms, r0->dev.other_ms, r0->dev.span_ms,
            r0->dev.idle_ms, r0->dev.spans, r0->dev.lead_ms, r0->dev.tail_ms);
    }
    double verdict_s = 0;
    int unchanged = -1, paused = 0, rollouts = 0, rebuilt = 0;
    for (int r = 0; r < j->size; r++) {
        const job_stats_t *s = &all[r];
        if (s->verdict_s > verdict_s)
            verdict_s = s->verdict_s;
        if (s->role != RF_ROLE_ROLLOUT)
            continue;
        rollouts++;
        paused += s->paused;
        rebuilt += s->rebuilds > 0;
        if (s->storage_unchanged >= 0)
            unchanged = (unchanged < 0 ? 1 : unchanged) && s->storage_unchanged;
    }
    job_print(j->o, RF_JOB_OUT,
              "  %-10s verdict after %.3f s (slowest rank, from update begin); rollout paused: %s"
              "%s%s\n",
              "gate", verdict_s, paused == 0 ? "no" : (paused == rollouts ? "yes" : "partly"),
              unchanged < 0 ? "" : "; storage unchanged: ",
              unchanged < 0 ? "" : (unchanged ? "yes" : "no"));
    if (rebuilt)
        job_print(j->o, RF_JOB_OUT, "  %-10s rebuilt before this update on %d rollout rank(s)\n",
                  "plan", rebuilt);
    if (!v->committed)
        job_print(j->o, RF_JOB_OUT, "  %-10s rank %d: %s: %s\n", "verdict", v->rank,
                  rf_status_name(v->code), v->reason);
    else if (all[j->T].verify_skipped)
        job_print(j->o, RF_JOB_OUT, "  %-10s not verified (--verify %s)\n", "verify",
                  j->o->verify_none ? "none: no oracle in this run"
                                    : "last: the oracle checks the last update");
    else if (j->o->reference && strcmp(j->source, "checkpoint") == 0)
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s reassembly + sha256 vs --reference: %" PRIu64 " tensors equal%s%s%s\n",
                  "verify", verified,
                  fnuz ? (snprintf(b3, sizeof(b3), " (%" PRIu64 " fp8 under 0x80->0x00)", fnuz), b3)
                  : requant ? (snprintf(b3, sizeof(b3),
                                        " (%" PRIu64 " fp8 requantized to the max shard scale)",
                                        requant),
                               b3)
                            : "",
                  dtot ? "; changed " : "",
                  dtot ? (snprintf(b4, sizeof(b4), "%.2f%% of %" PRIu64 " elements",
                                   100.0 * (double)dchg / (double)dtot, dtot),
                          b4)
                       : "");
    else
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s scalar reference loader: %" PRIu64 " tensors verified, %" PRIu64
                  " elements, %" PRIu64 " mismatches%s%s%s\n",
                  "verify", verified, elems, mism,
                  deq ? (snprintf(b3, sizeof(b3), ", dequant %" PRIu64 " modules", deq), b3) : "",
                  dtot ? "; changed " : "",
                  dtot ? (snprintf(b4, sizeof(b4), "%.2f%% of %" PRIu64 " elements",
                                   100.0 * (double)dchg / (double)dtot, dtot),
                          b4)
                       : "");
    if (v->committed && qtot)
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s quantized tensors: changed %.2f%% of %" PRIu64 " elements (packed int4 "
                  "per byte)\n",
                  "", 100.0 * (double)qchg / (double)qtot, qtot);
    uint64_t dchk = 0, druns = 0, dlay = 0;
    for (int r = 0; r < j->size; r++) {
        dchk += all[r].derived_checked;
        druns += all[r].derived_runs;
        dlay += all[r].derived_layers;
    }
    if (v->committed && dchk > 0)
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s absorbed MLA W_UK_T / W_UV: %" PRIu64 " slots == a recomputation from "
                  "the loaded kv_b_proj; deferred stage %" PRIu64 " runs for %" PRIu64
                  " layers (all rollout ranks)\n",
                  "derived", dchk, druns, dlay);
    if (v->committed && j->o->cold_check) {
        uint64_t cold = 0;
        for (int r = 0; r < j->size; r++)
            cold += all[r].cold_slots;
        job_print(j->o, RF_JOB_OUT,
                  "  %-10s cold load == load then refit: %" PRIu64 " slots byte-identical\n",
                  "cold", cold);
    }
}

/* Rank 0, --storage-digest, committed update v: one line from every rollout rank's digest. */
void job_print_digest(const job_t *j, uint32_t v, const job_stats_t *all)
{
    /* XXH3 over the rollout ranks' own digests, in rank order: equal iff every
     * rollout rank's slots are byte-identical (GPU run vs CPU run) */
    uint64_t d[2] = {0, 0};
    XXH3_state_t *h = XXH3_createState();
    if (h != NULL) {
        XXH3_64bits_reset(h);
        for (int r = j->T; r < j->size; r++)
            XXH3_64bits_update(h, &all[r].storage_digest, sizeof(uint64_t));
        d[0] = XXH3_64bits_digest(h);
        XXH3_freeState(h);
    }
    for (int r = j->T; r < j->size; r++)
        d[1] += all[r].stage_h2d;
    job_print(j->o, RF_JOB_OUT,
              "refit: update %u storage digest %016" PRIx64 " (%d rollout ranks, %" PRIu64
              " chunk payloads staged h2d%s)\n",
              v, d[0], j->R, d[1], j->s->ipc_dev ? ", ipc device to device" : "");
}

/* ---- --profile-dir (docs/design.md#profile) ------------------------------------------- */

/* The timers and counters the summary keeps O(1) figures of (sum, min, max / total). */
static const struct {
    const char *key;
    size_t off;
} prof_timers[] = {
    {"update_s", offsetof(job_stats_t, update_s)},
    {"verdict_s", offsetof(job_stats_t, verdict_s)},
    {"initialize_s", offsetof(job_stats_t, begin_s)},
    {"plan_begin_s", offsetof(job_stats_t, plan_begin_s)},
    {"receive_s", offsetof(job_stats_t, receive_s)},
    {"wire_s", offsetof(job_stats_t, wire_s)},
    {"unpack_s", offsetof(job_stats_t, unpack_s)},
    {"loader_s", offsetof(job_stats_t, loader_s)},
    {"finalize_s", offsetof(job_stats_t, finalize_s)},
    {"layerwise_s", offsetof(job_stats_t, layerwise_s)},
    {"deferred_s", offsetof(job_stats_t, deferred_s)},
    {"gate_s", offsetof(job_stats_t, gate_s)},
    {"verify_s", offsetof(job_stats_t, verify_s)},
};
static const struct {
    const char *key;
    size_t off;
} prof_counters[] = {
    {"applications", offsetof(job_stats_t, applications)},
    {"declined", offsetof(job_stats_t, declined)},
    {"loader_calls", offsetof(job_stats_t, loader_calls)},
    {"chunks_sent", offsetof(job_stats_t, chunks_sent)},
    {"bytes_sent", offsetof(job_stats_t, bytes_sent)},
    {"chunks_received", offsetof(job_stats_t, chunks_recv)},
    {"bytes_received", offsetof(job_stats_t, bytes_recv)},
    {"bytes_produced", offsetof(job_stats_t, bytes_produced)},
    {"bytes_read", offsetof(job_stats_t, bytes_read)},
    {"bytes_gathered", offsetof(job_stats_t, bytes_gathered)},
};
_Static_assert(sizeof(prof_timers) / sizeof(prof_timers[0]) <= 16, "job_t.prof_t* too small");
_Static_assert(sizeof(prof_counters) / sizeof(prof_counters[0]) <= 16, "job_t.prof_csum too small");
#define PROF_NT (sizeof(prof_timers) / sizeof(prof_timers[0]))
#define PROF_NC (sizeof(prof_counters) / sizeof(prof_counters[0]))

static void profile_path(const job_t *j, char *path, size_t cap, const char *suffix)
{
    snprintf(path, cap, "%s/profile-rank%d.%s", j->o->profile_dir, j->rank, suffix);
}

/* After setup: creates the profile folder and opens this rank's .jsonl for the whole run. A
 * profile that cannot be written warns once and leaves the job alone (it is not its result). */
void job_profile_open(job_t *j)
{
    char path[RF_PATH_MAX + 64];
    j->prof_fd = -1;
    if (j->o->profile_dir == NULL || j->o->profile_dir[0] == '\0')
        return;
    /* mkdir -p */
    snprintf(path, sizeof(path), "%s", j->o->profile_dir);
    for (char *q = path + 1; *q; q++)
        if (*q == '/') {
            *q = '\0';
            mkdir(path, 0755);
            *q = '/';
        }
    mkdir(path, 0755);
    /* rank 0: files an earlier run with more ranks left (profile-rank<R>.* with R >= this
     * world's size) would read as this run's; no rank of this run touches them */
    DIR *dir = j->rank == 0 ? opendir(path) : NULL;
    for (struct dirent *de; dir != NULL && (de = readdir(dir)) != NULL;) {
        int r = -1, used = 0;
        if (sscanf(de->d_name, "profile-rank%d.%n", &r, &used) == 1 && used > 0 && r >= j->size &&
            (strcmp(de->d_name + used, "json") == 0 || strcmp(de->d_name + used, "jsonl") == 0 ||
             strcmp(de->d_name + used, "json.tmp") == 0)) {
            char old[RF_PATH_MAX + 320];
            int n = snprintf(old, sizeof(old), "%s/%s", path, de->d_name);
            if (n > 0 && (size_t)n < sizeof(old))
                unlink(old);
        }
    }
    if (dir != NULL)
        closedir(dir);
    /* a summary left by an earlier run would describe another .jsonl: present only once this
     * run's is complete */
    profile_path(j, path, sizeof(path), "json");
    unlink(path);
    profile_path(j, path, sizeof(path), "jsonl");
    j->prof_cap = 4096; /* one line is about 1.2 KB */
    j->prof_line = malloc(j->prof_cap);
    if (j->prof_line == NULL) {
        rf_warn("rank %d: out of memory for the profile line; no profile", j->rank);
        return;
    }
    j->prof_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (j->prof_fd < 0)
        rf_warn("rank %d: cannot open profile %s: %s; no profile", j->rank, path,
                strerror(errno));
    for (size_t k = 0; k < PROF_NT; k++) {
        j->prof_tmin[k] = INFINITY;
        j->prof_tmax[k] = -INFINITY;
    }
}

/* One line: the object, a newline, one write() on the O_APPEND fd. A failed or short write
 * (disk full) stops the profile, so that a torn line can only be the last one. */
static void profile_append(job_t *j, const json_t *u, uint32_t update)
{
    size_t n = json_dumpb(u, j->prof_line, j->prof_cap - 1, JSON_COMPACT);
    if (n + 1 > j->prof_cap) {
        size_t cap = n + 1 + 1024;
        char *p = realloc(j->prof_line, cap);
        if (p != NULL) {
            j->prof_line = p;
            j->prof_cap = cap;
            n = json_dumpb(u, j->prof_line, j->prof_cap - 1, JSON_COMPACT);
        }
    }
    if (n == 0 || n + 1 > j->prof_cap) {
        rf_warn("rank %d: profile line of update %u not written (%zu bytes); profile stopped",
                j->rank, update, n);
        close(j->prof_fd);
        j->prof_fd = -1;
        return;
    }
    j->prof_line[n++] = '\n';
    ssize_t w;
    do
        w = write(j->prof_fd, j->prof_line, n);
    while (w < 0 && errno == EINTR);
    if (w != (ssize_t)n) {
        rf_warn("rank %d: profile %s/profile-rank%d.jsonl: wrote %zd of %zu bytes of update %u "
                "(%s); profile stopped", j->rank, j->o->profile_dir, j->rank, w, n, update,
                w < 0 ? strerror(errno) : "short write");
        close(j->prof_fd);
        j->prof_fd = -1;
        return;
    }
    const job_stats_t *s = &j->js;
    j->prof_lines++;
    j->prof_committed += s->status == RF_OK;
    j->prof_oracle_failed += s->status == RF_OK && j->prof_rc != 0;
    for (size_t k = 0; k < PROF_NT; k++) {
        double t = *(const double *)((const char *)s + prof_timers[k].off);
        j->prof_tsum[k] += t;
        j->prof_tmin[k] = t < j->prof_tmin[k] ? t : j->prof_tmin[k];
        j->prof_tmax[k] = t > j->prof_tmax[k] ? t : j->prof_tmax[k];
    }
    for (size_t k = 0; k < PROF_NC; k++)
        j->prof_csum[k] += *(const uint64_t *)((const char *)s + prof_counters[k].off);
    j->prof_inflight_max = s->max_inflight > j->prof_inflight_max ? s->max_inflight
                                                                  : j->prof_inflight_max;
}

/* Teardown: closes the .jsonl and writes the run's summary through a temporary file and a
 * rename(), so that profile-rank<R>.json is either absent or whole. */
void job_profile_close(job_t *j)
{
    char path[RF_PATH_MAX + 64], tmp[RF_PATH_MAX + 64];
    free(j->prof_line);
    j->prof_line = NULL;
    if (j->prof_fd < 0)
        return;
    close(j->prof_fd);
    j->prof_fd = -1;
    char hash[24], lines[64];
    snprintf(hash, sizeof(hash), "%016" PRIx64, rf_topology_hash(&j->s->topo));
    snprintf(lines, sizeof(lines), "profile-rank%d.jsonl", j->rank);
    json_t *timers = json_object(), *counters = json_object();
    for (size_t k = 0; k < PROF_NT && j->prof_lines > 0; k++)
        json_object_set_new(timers, prof_timers[k].key,
                            json_pack("{s:f, s:f, s:f}", "sum", j->prof_tsum[k], "min",
                                      j->prof_tmin[k], "max", j->prof_tmax[k]));
    for (size_t k = 0; k < PROF_NC; k++)
        json_object_set_new(counters, prof_counters[k].key,
                            json_integer((json_int_t)j->prof_csum[k]));
    json_t *root = json_pack(
        "{s:s, s:i, s:i, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:o, s:o, s:i}", "format",
        "refit-profile", "version", 2, "rank", j->rank, "role",
        job_is_rollout(j) ? "rollout" : "trainer", "topology", j->s->topo.name, "topology_hash",
        hash, "lines", lines, "updates", (json_int_t)j->prof_lines, "committed",
        (json_int_t)j->prof_committed, "failed", (json_int_t)(j->prof_lines - j->prof_committed),
        "oracle_failed", (json_int_t)j->prof_oracle_failed, "timers", timers, "counters", counters,
        "max_inflight_chunks", j->prof_inflight_max);
    profile_path(j, path, sizeof(path), "json");
    profile_path(j, tmp, sizeof(tmp), "json.tmp");
    if (root == NULL || json_dump_file(root, tmp, JSON_INDENT(1)) != 0 || rename(tmp, path) != 0) {
        rf_warn("rank %d: cannot write the profile summary %s: %s", j->rank, path,
                strerror(errno));
        unlink(tmp);
    }
    json_decref(root);
}

void job_profile_write(job_t *j, uint32_t update, int rc)
{
    if (j->prof_fd < 0)
        return;
    const job_stats_t *s = &j->js;
    j->prof_rc = rc;
    json_t *u = json_pack(
        "{s:i, s:i, s:i, s:s, s:s, s:f, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}, "
        "s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i}}",
        "v", 2, "rank", j->rank,
        "update", (int)update, "status", rf_status_name((rf_status_t)s->status), "source",
        j->source, "update_s", s->update_s, "receiver", "initialize_s", s->begin_s, "plan_begin_s",
        s->plan_begin_s, "receive_s",
        s->receive_s, "wire_s", s->wire_s, "unpack_s", s->unpack_s, "loader_s", s->loader_s,
        "finalize_s", s->finalize_s, "layerwise_s", s->layerwise_s, "deferred_s", s->deferred_s,
        "gate_s", s->gate_s, "verify_s", s->verify_s, "counters", "layers_direct",
        (json_int_t)s->layers[0], "layers_runtime_view", (json_int_t)s->layers[1],
        "layers_layerwise", (json_int_t)s->layers[2], "applications",
        (json_int_t)s->applications, "declined", (json_int_t)s->declined, "loader_calls",
        (json_int_t)s->loader_calls, "bookkeeping_probes", (json_int_t)s->bookkeeping_probes,
        "chunks_sent", (json_int_t)s->chunks_sent, "bytes_sent", (json_int_t)s->bytes_sent,
        "chunks_received", (json_int_t)s->chunks_recv, "bytes_received",
        (json_int_t)s->bytes_recv, "bytes_produced", (json_int_t)s->bytes_produced,
        "bytes_read", (json_int_t)s->bytes_read, "header_bytes_read",
        (json_int_t)s->header_bytes_read, "bytes_gathered", (json_int_t)s->bytes_gathered,
        "max_inflight_chunks", s->max_inflight);
    if (u != NULL) {
        json_object_set_new(u, "verdict_s", json_real(s->verdict_s));
        /* the transport's bytes to each peer this update (what the gate checked), keyed by
         * world rank, non-zero only: the scale model's pairs (refit-plan --simulate) are
         * compared with these (docs/simulate.md) */
        const rf_xfer_stats_t *xs = j->s->xfer != NULL ? rf_xfer_stats(j->s->xfer) : NULL;
        json_t *to = json_object();
        for (int r = 0; xs != NULL && xs->peers != NULL && to != NULL && r < j->size; r++) {
            char key[16];
            snprintf(key, sizeof(key), "%d", r);
            if (xs->peers[r].bytes_sent > 0)
                json_object_set_new(to, key, json_integer((json_int_t)xs->peers[r].bytes_sent));
        }
        json_object_set_new(u, "sent_to", to);
        /* trainer ranks: production (inside the update on mpi) and the send phase (pack,
         * checksum, wire), so the wire model can be held against the send alone; whether the
         * checkpoint was read in the pack (streamed production, rf_trainer_produce), and the
         * transport's pack and wire-wait time of the send */
        if (!job_is_rollout(j))
            json_object_set_new(u, "trainer",
                                json_pack("{s:f, s:f, s:b, s:i, s:f, s:f, s:I}", "produce_s",
                                          j->s->tr.stats.produce_s, "send_s", s->send_s,
                                          "reads_in_pack", j->s->tr.stream_ck != NULL,
                                          "read_threads", j->s->tr.stats.read_threads, "pack_s",
                                          xs != NULL ? xs->pack_s : 0.0, "send_wire_s",
                                          xs != NULL ? xs->wire_s : 0.0, "seals_fused",
                                          (json_int_t)(xs != NULL ? xs->seals_fused : 0)));
        /* the gate's status alone would call an update whose oracle failed healthy */
        json_object_set_new(u, "oracle",
                            json_string(s->status != RF_OK ? "not_run"
                                        : rc != 0          ? "failed"
                                        : s->verify_skipped ? "skipped"
                                                            : "passed"));
        if (job_is_rollout(j))
            json_object_set_new(u, "paused", json_boolean(s->paused));
        /* rollout ranks: the h2d copies into device chunk buffers (mpi, the device check)
         * and the receives that waited for a pinned buffer's h2d copies to finish */
        json_t *rv = json_object_get(u, "receiver");
        if (job_is_rollout(j) && xs != NULL && rv != NULL) {
            json_object_set_new(rv, "h2d_chunks", json_integer((json_int_t)xs->h2d_chunks));
            json_object_set_new(rv, "h2d_bytes", json_integer((json_int_t)xs->h2d_bytes));
            json_object_set_new(rv, "pin_waits", json_integer((json_int_t)xs->pin_waits));
            json_object_set_new(rv, "pin_wait_s", json_real(xs->pin_wait_s));
        }
        if (s->storage_unchanged >= 0)
            json_object_set_new(u, "storage_unchanged", json_boolean(s->storage_unchanged));
        json_object_set_new(u, "integrity", json_boolean(j->s->integrity));
        if (j->s->integrity)
            json_object_set_new(u, "trailer", json_string(rf_chunk_trailer_name(j->s->trailer)));
        if (s->dev.timeline)
            json_object_set_new(u, "device_timeline",
                                json_pack("{s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
                                          "spans", (json_int_t)s->dev.spans, "copy_bytes",
                                          (json_int_t)s->dev.copy_bytes, "copy_ms", s->dev.copy_ms,
                                          "layerwise_ms", s->dev.layerwise_ms, "other_ms",
                                          s->dev.other_ms, "span_ms", s->dev.span_ms, "idle_ms",
                                          s->dev.idle_ms, "lead_ms", s->dev.lead_ms, "tail_ms",
                                          s->dev.tail_ms));
        if (j->s->ipc && job_is_rollout(j)) {
            json_object_set_new(u, "ipc_bytes_in_place", json_integer((json_int_t)s->ipc_in_place));
            json_object_set_new(u, "ipc_bytes_staged", json_integer((json_int_t)s->ipc_staged));
        }
        if (j->s->ipc)
            json_object_set_new(u, "ipc_backend",
                                json_string(rf_xfer_ipc_backend(j->s->xfer)->name));
        if (j->s->ipc && !job_is_rollout(j))
            json_object_set_new(u, "resident_s", json_real(s->resident_s));
        if (j->s->ipc_dev && !job_is_rollout(j)) {
            /* production stays on the host (the trainer's produce time); this is the
             * copy of the produced shards into the device arena */
            json_object_set_new(u, "ipc_h2d_s", json_real(s->ipc_h2d_s));
            json_object_set_new(u, "ipc_h2d_bytes", json_integer((json_int_t)s->ipc_h2d_bytes));
            json_object_set_new(u, "device_launches", json_integer((json_int_t)s->batch_launches));
            json_object_set_new(u, "device_row_copies", json_integer((json_int_t)s->batch_rows));
        }
    }
    if (u != NULL)
        profile_append(j, u, update);
    json_decref(u);
}

/* ---- --bench-json --------------------------------------------------------------------- */

static int cmp_double_job(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Rank 0, after teardown (the arenas are freed, so the copy buffers fit): the copy ceiling on
 * rank 0's device, then the JSON. Updates after the first are the timed ones (the first
 * allocates, maps and warms up). Returns 0 on success. */
int job_bench_write(const rf_job_opts_t *o, const job_bench_info_t *bi, const double *vs,
                    const int *committed)
{
    rf_accel_t *ax = NULL;
    /* at least 4 GiB on a GPU (issue #4's ceiling); the payload, at least 64 MiB, on the host */
    size_t floor_b = bi->device >= 0 ? (size_t)4 << 30 : (size_t)64 << 20;
    size_t bytes = bi->payload > floor_b ? (size_t)bi->payload : floor_b;
    double cbest = 0, cmed = 0, kbest = 0, kmed = 0;
    rf_status_t st = rf_accel_open(bi->device >= 0 ? "cuda" : "host",
                                   bi->device >= 0 ? bi->device : 0, &ax);
    if (st == RF_OK)
        st = rf_accel_copy_ceiling(ax, bytes, 5, &cbest, &cmed);
    /* two buffers of the payload's size may not fit (Qwen3-30B-A3B-24l bf16, 2 x 31 GB, on an
     * 80 GB H100, beside the other ranks' contexts): halve down to the floor and say so; the
     * rate no longer depends on the size there, and the JSON gives the bytes used */
    while (st == RF_ERR_NOMEM && bytes / 2 >= floor_b) {
        bytes = (bytes / 2 + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
        job_print(o, RF_JOB_OUT,
                  "refit-run: --bench-json: no device memory for two copy buffers of the "
                  "payload's size; the ceilings copy %.2f GB instead\n",
                  (double)bytes / 1e9);
        st = rf_accel_copy_ceiling(ax, bytes, 5, &cbest, &cmed);
    }
    /* the second ceiling: refit's own batch kernel copying the same buffer (issue #18 item 2:
     * the update is measured against the faster of the two, and torch's copy_ in the report) */
    if (st == RF_OK)
        st = rf_accel_rows_ceiling(ax, bytes, 5, &kbest, &kmed);
    const char *where = ax ? ax->ops->name : "none";
    rf_accel_close(ax);
    if (st != RF_OK)
        job_print(o, RF_JOB_ERR,
                  "refit-run: --bench-json: measuring the copy ceilings (%zu bytes) failed: "
                  "%s\n",
                  bytes, rf_status_name(st));
    double fast = kbest > 0 && kbest < cbest ? kbest : cbest; /* the faster ceiling */
    int n = o->steps, first = n > 1 ? 1 : 0, m = 0;
    double *t = calloc((size_t)n, sizeof(double));
    json_t *root = json_object(), *ups = json_array();
    for (int i = 0; i < n; i++) {
        json_t *u = json_object();
        json_object_set_new(u, "update", json_integer(i + 1));
        json_object_set_new(u, "committed", json_boolean(committed[i]));
        json_object_set_new(u, "verdict_s", json_real(vs[i]));
        json_object_set_new(u, "timed", json_boolean(i >= first));
        json_array_append_new(ups, u);
        if (i >= first && committed[i] && t)
            t[m++] = vs[i];
    }
    json_object_set_new(root, "topology", json_string(bi->topology));
    json_object_set_new(root, "model_type", json_string(bi->model));
    json_object_set_new(root, "quantization", json_string(bi->quant));
    json_object_set_new(root, "transport", json_string(bi->transport));
    json_object_set_new(root, "ipc_device", json_boolean(bi->ipc_dev));
    json_object_set_new(root, "payload_bytes", json_integer((json_int_t)bi->payload));
    json_object_set_new(root, "tensors", json_integer(bi->tensors));
    json_object_set_new(root, "chunks", json_integer((json_int_t)bi->chunks));
    json_object_set_new(root, "chunk_bytes", json_integer((json_int_t)bi->chunk_bytes));
    json_object_set_new(root, "updates", ups);
    if (m > 0) {
        qsort(t, (size_t)m, sizeof(double), cmp_double_job);
        json_object_set_new(root, "best_s", json_real(t[0]));
        double med = m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
        json_object_set_new(root, "median_s", json_real(med));
        json_object_set_new(root, "payload_GBps_best", json_real((double)bi->payload / t[0] / 1e9));
        json_object_set_new(root, "payload_GBps_median",
                            json_real((double)bi->payload / med / 1e9));
    }
    if (st == RF_OK) {
        json_t *c = json_object();
        json_object_set_new(c, "accelerator", json_string(where));
        json_object_set_new(c, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(c, "reps", json_integer(5));
        json_object_set_new(c, "best_s", json_real(cbest));
        json_object_set_new(c, "median_s", json_real(cmed));
        json_object_set_new(c, "GBps", json_real((double)bytes / cbest / 1e9));
        json_object_set_new(root, "copy_ceiling", c);
        json_t *k = json_object();
        json_object_set_new(k, "accelerator", json_string(where));
        json_object_set_new(k, "method", json_string("copy_rows_batch, copy engines off"));
        json_object_set_new(k, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(k, "reps", json_integer(5));
        json_object_set_new(k, "best_s", json_real(kbest));
        json_object_set_new(k, "median_s", json_real(kmed));
        json_object_set_new(k, "GBps", json_real((double)bytes / kbest / 1e9));
        json_object_set_new(root, "kernel_ceiling", k);
        if (m > 0) {
            json_object_set_new(root, "fraction_of_ceiling",
                                json_real(((double)bi->payload / t[0]) / ((double)bytes / cbest)));
            json_object_set_new(root, "fraction_of_kernel_ceiling",
                                json_real(((double)bi->payload / t[0]) / ((double)bytes / kbest)));
        }
    }
    int rc = json_dump_file(root, o->bench_json, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (rc != 0)
        job_print(o, RF_JOB_ERR, "refit-run: --bench-json: cannot write %s\n", o->bench_json);
    else if (m > 0 && st == RF_OK && !o->quiet)
        job_print(o, RF_JOB_OUT,
                  "refit: bench: payload %.2f GB, update best %.3f ms median %.3f ms (%d timed) = "
                  "%.1f GB/s; copy ceiling (%s, %.2f GB, best of 5) %.3f ms = %.1f GB/s; kernel "
                  "ceiling %.3f ms = %.1f GB/s; %.1f%% of the ceiling (the faster)\n",
                  (double)bi->payload / 1e9, t[0] * 1e3,
                  (m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2])) * 1e3, m,
                  (double)bi->payload / t[0] / 1e9, where, (double)bytes / 1e9, cbest * 1e3,
                  (double)bytes / cbest / 1e9, kbest * 1e3, (double)bytes / kbest / 1e9,
                  100.0 * ((double)bi->payload / t[0]) / ((double)bytes / fast));
    json_decref(root);
    free(t);
    return rc != 0 || st != RF_OK;
}
