/*
 * refit-plan: the reload plan of every rollout rank of a topology, without moving data or
 * committing memory (DESIGN.md section 8).
 *
 *   refit-plan --topology FILE [--reload-policy auto|layerwise] [--json FILE]
 *   refit-plan --topology FILE --simulate [--machine FILE] [machine flags] [--mode M]
 *              [--json FILE]
 *
 * Runs as one process (no mpirun, no MPI): a client of the session API's offline plan
 * (include/refit/session.h, rf_session_offline_*), which reads the topology and the model
 * config as rf_session_create does, builds the inventory and the manifest, and for each
 * rollout rank reserves that rank's runtime storage with mmap(MAP_NORESERVE, PROT_NONE) and
 * plans every layer as that rank of a session would, with the format owner of the topology's
 * (quantization, backend). It prints the layers per plan mode and the expected applications
 * per rank, then what rf_session_plan of that topology agrees: the totals and the plan hash
 * (tests/mpi/check_session_offline.c holds the two equal). Full-size models (Qwen3-30B-A3B:
 * ~19k tensors, 30 B parameters) plan in seconds on a laptop.
 *
 * --simulate prints the scale model instead (include/refit/simulate.h, docs/simulate.md): per
 * mode the bytes each sender sends each receiver, the load on every link class of the machine,
 * the busiest link, the wire floor and the predicted update time; --json writes all of it,
 * every pair included.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "refit/format.h"
#include "refit/formats.h"
#include "refit/model.h"
#include "refit/refit.h"
#include "refit/simulate.h"
#include "refit/topology.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: refit-plan --topology FILE [--reload-policy auto|layerwise] [--format-owner NAME]\n"
               "                  [--json FILE]\n"
               "\n"
               "Prints, per rollout rank of the topology, the layers per plan mode (DIRECT,\n"
               "RUNTIME_VIEW, LAYERWISE) and the expected applications, without moving data or\n"
               "committing memory (arenas are reserved with MAP_NORESERVE). --format-owner NAME\n"
               "overrides the owner chosen from the topology's quantization and backend.\n"
               "\n"
               "       refit-plan --topology FILE --simulate [--machine FILE] [--gpus-per-node N]\n"
               "                  [--nodes N] [--nvlink-bw RATE] [--nic-bw RATE] [--node-bw RATE]\n"
               "                  [--chunk-latency-us US] [--mode broadcast|p2p|both] [--json FILE]\n"
               "\n"
               "--simulate: no data moves, one process, any topology size. Per mode (both by\n"
               "default): bytes each sender sends each receiver (the real manifest, chunk plan and\n"
               "p2p schedule), the load on each link class (nvlink-out/in inside a node, nic-out/in\n"
               "between nodes, node: one shared fabric per node when --node-bw is set), the busiest\n"
               "link, predicted time = busiest link bytes / bandwidth + its chunks x latency + one\n"
               "chunk of fill, and the wire floor (busiest NIC / NIC bandwidth); ordered_s: the\n"
               "same bytes in refit's send order (p2p: transfer.p2p_inflight receivers in\n"
               "flight per sender, each sender from its own first receiver, receivers taking any\n"
               "ready sender; --json's ordered_one_s: one receiver at a time;\n"
               "broadcast: stage after stage); ordered_rank_s: p2p's earlier order (senders in\n"
               "order per receiver). Machine: a YAML\n"
               "file (gpus_per_node, nodes, nvlink_bandwidth, nic_bandwidth, node_bandwidth,\n"
               "chunk_latency_us) and/or flags over it; default 8 GPUs a node, NVLink 450GB/s,\n"
               "NIC 50GB/s (400 Gb/s), 10 us a chunk, nodes as needed (docs/simulate.md).\n");
}

static int fail(const char *msg)
{
    fprintf(stderr, "refit-plan: %s\n", msg);
    return 1;
}

/* A bad option value, quoted as given (the style of refit-convert's and refit-info's). */
static int bad_value(const char *flag, const char *v, const char *why)
{
    fprintf(stderr, "refit-plan: %s '%s': %s\n", flag, v, why);
    return 1;
}


static double gb(uint64_t b)
{
    return (double)b / 1e9;
}

static json_t *sim_json(const rf_sim_t *s)
{
    json_t *links = json_object(), *pairs = json_array(), *gather = json_array();
    for (int c = 0; c < RF_LINK_NCLASSES; c++) {
        const rf_sim_link_t *l = &s->link[c];
        json_object_set_new(links, rf_link_class_name((rf_link_class_t)c),
                            json_pack("{s:I, s:I, s:i, s:I, s:f}", "busiest_bytes",
                                      (json_int_t)l->bytes, "busiest_chunks",
                                      (json_int_t)l->chunks, "where", l->where, "total_bytes",
                                      (json_int_t)l->total, "seconds", l->seconds));
    }
    for (size_t i = 0; i < s->npairs; i++)
        json_array_append_new(pairs, json_pack("{s:i, s:i, s:I, s:I, s:I, s:i}", "src",
                                               s->pairs[i].src, "dst", s->pairs[i].dst, "bytes",
                                               (json_int_t)s->pairs[i].bytes, "payload",
                                               (json_int_t)s->pairs[i].payload, "chunks",
                                               (json_int_t)s->pairs[i].chunks, "order",
                                               s->pairs[i].order));
    for (size_t i = 0; i < s->ngather; i++)
        json_array_append_new(gather, json_pack("{s:i, s:i, s:I}", "src", s->gather[i].src,
                                                "dst", s->gather[i].dst, "bytes",
                                                (json_int_t)s->gather[i].bytes));
    return json_pack("{s:s, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:i, s:I, s:i, s:I, s:i, s:s, "
                     "s:f, s:f, s:f, s:f, s:f, s:s, s:f, s:f, s:f, s:f, s:f, s:i, s:o, s:o, s:o}",
                     "mode", rf_mode_name(s->mode), "trainer_ranks", s->T, "rollout_ranks",
                     s->R, "nodes", s->nodes, "payload_bytes", (json_int_t)s->payload_bytes,
                     "wire_bytes", (json_int_t)s->wire_bytes, "gather_bytes",
                     (json_int_t)s->gather_bytes, "quant_in_bytes",
                     (json_int_t)s->quant_in_bytes, "quant_rank", s->quant_rank,
                     "max_send_bytes", (json_int_t)s->max_send, "max_send_rank",
                     s->max_send_rank, "max_recv_bytes", (json_int_t)s->max_recv,
                     "max_recv_rank", s->max_recv_rank, "busiest_link",
                     rf_link_class_name(s->busiest), "wire_s", s->wire_s, "latency_s",
                     s->latency_s, "fill_s", s->fill_s, "predicted_s", s->predicted_s,
                     "floor_s", s->floor_s, "floor_link", rf_link_class_name(s->floor_class),
                     "bound_s", s->bound_s, "ordered_s", s->ordered_s,
                     "ordered_rank_s", s->ordered_rank_s, "ordered_asc_s", s->ordered_asc_s,
                     "ordered_one_s", s->ordered_one_s, "p2p_inflight", s->p2p_inflight,
                     "links", links, "pairs", pairs, "gather", gather);
}

/* --simulate: one row per mode, then each mode's link classes; 0 or 1 (message printed). */
static int simulate(const rf_topology_t *topo, const rf_inventory_t *inv,
                    const rf_machine_t *m, int modes, const char *json_path)
{
    rf_err_t err;
    rf_err_clear(&err);
    rf_sim_t sims[2];
    int have[2] = {0, 0};
    printf("refit-plan: simulate: %s: %s, %d layers, %d tensors, %" PRIu64
           " checkpoint elements, quantization %s; %d trainer + %d rollout ranks%s\n",
           topo->name, inv->cfg.model_type, (int)inv->cfg.num_hidden_layers, inv->ntensors,
           inv->nparams, rf_quant_name(topo->quantization), rf_topology_trainer_size(topo),
           rf_topology_rollout_size(topo), topo->colocated ? " (colocated)" : "");
    char nodes[32];
    snprintf(nodes, sizeof(nodes), m->nodes ? "%d nodes" : "nodes as needed", m->nodes);
    printf("refit-plan: simulate: machine %s: %d GPUs a node, %s, NVLink %.1f GB/s, "
           "NIC %.1f GB/s, node %s%.1f GB/s, %.1f us a chunk; chunk_bytes %" PRIu64
           ", integrity %s\n",
           m->name, m->gpus_per_node, nodes,
           m->nvlink_Bps / 1e9, m->nic_Bps / 1e9, m->node_Bps > 0 ? "" : "unlimited, ",
           m->node_Bps / 1e9, m->chunk_latency_s * 1e6, topo->chunk_bytes,
           topo->integrity ? "on" : "off");
    for (int k = 0; k < 2; k++) {
        if (!(modes & (1 << k)))
            continue;
        if (rf_sim_run(topo, inv, m, k == 0 ? RF_MODE_BROADCAST : RF_MODE_P2P, &sims[k], &err) !=
            RF_OK) {
            for (int i = 0; i < k; i++)
                if (have[i])
                    rf_sim_free(&sims[i]);
            return fail(err.msg);
        }
        have[k] = 1;
    }
    printf("%-9s %5s %6s %6s %10s %10s %12s %9s %12s %8s %11s %14s %11s %9s %9s %9s %11s %9s %10s %9s %10s %14s\n",
           "mode", "T", "R", "nodes", "pairs", "payload_GB", "wire_GB", "gather_GB",
           "max_send_GB", "send_at", "max_recv_GB", "busiest_link", "link_GB", "wire_s",
           "latency_s", "fill_s", "predicted_s", "floor_s", "pred/floor", "bound_s", "ordered_s",
           "ordered_rank_s");
    for (int k = 0; k < 2; k++) {
        if (!have[k])
            continue;
        const rf_sim_t *s = &sims[k];
        const rf_sim_link_t *b = &s->link[s->busiest];
        char where[48];
        snprintf(where, sizeof(where), "%s:%d", rf_link_class_name(s->busiest), b->where);
        printf("%-9s %5d %6d %6d %10zu %10.4g %12.4g %9.4g %12.4g %8d %11.4g %14s %11.4g %9.4g "
               "%9.4g %9.4g %11.4g %9.4g %10.3f %9.4g %10.4g %14.4g\n",
               rf_mode_name(s->mode), s->T, s->R, s->nodes, s->npairs, gb(s->payload_bytes),
               gb(s->wire_bytes), gb(s->gather_bytes), gb(s->max_send), s->max_send_rank,
               gb(s->max_recv), where, gb(b->bytes), s->wire_s, s->latency_s, s->fill_s,
               s->predicted_s, s->floor_s, s->floor_s > 0 ? s->predicted_s / s->floor_s : 0.0,
               s->bound_s, s->ordered_s, s->ordered_rank_s);
    }
    printf("%-9s %-11s %12s %12s %10s %10s %9s\n", "mode", "link", "total_GB", "busiest_GB",
           "where", "chunks", "seconds");
    for (int k = 0; k < 2; k++) {
        for (int c = 0; have[k] && c < RF_LINK_NCLASSES; c++) {
            const rf_sim_link_t *l = &sims[k].link[c];
            printf("%-9s %-11s %12.4g %12.4g %10d %10" PRIu64 " %9.4g\n",
                   rf_mode_name(sims[k].mode), rf_link_class_name((rf_link_class_t)c),
                   gb(l->total), gb(l->bytes), l->where, l->chunks, l->seconds);
        }
        if (have[k] && sims[k].quant_in_bytes > 0)
            printf("%-9s trainer-side quantization: busiest trainer rank %d quantizes %.3f GB of "
                   "bf16 input\n",
                   rf_mode_name(sims[k].mode), sims[k].quant_rank, gb(sims[k].quant_in_bytes));
    }
    int rc = 0;
    if (json_path != NULL) {
        json_t *modes_j = json_array();
        for (int k = 0; k < 2; k++)
            if (have[k])
                json_array_append_new(modes_j, sim_json(&sims[k]));
        json_t *root = json_pack(
            "{s:s, s:s, s:s, s:s, s:i, s:I, s:b, s:{s:s, s:i, s:i, s:f, s:f, s:f, s:f}, s:o}",
            "format", "refit-simulate", "topology", topo->name, "transfer_mode",
            rf_mode_name(topo->mode), "quantization",
            rf_quant_name(topo->quantization), "tensors", inv->ntensors, "chunk_bytes",
            (json_int_t)topo->chunk_bytes, "integrity", topo->integrity, "machine", "name",
            m->name, "gpus_per_node", m->gpus_per_node, "nodes", m->nodes, "nvlink_Bps",
            m->nvlink_Bps, "nic_Bps", m->nic_Bps, "node_Bps", m->node_Bps, "chunk_latency_s",
            m->chunk_latency_s, "modes", modes_j);
        errno = 0;
        if (root == NULL || json_dump_file(root, json_path, JSON_INDENT(1)) != 0) {
            fprintf(stderr, "refit-plan: --json %s: cannot write: %s\n", json_path,
                    errno ? strerror(errno) : "no JSON");
            rc = 1;
        }
        json_decref(root);
    }
    for (int k = 0; k < 2; k++)
        if (have[k])
            rf_sim_free(&sims[k]);
    return rc;
}

static int parse_rate_flag(const char *flag, const char *v, double *out)
{
    if (strcmp(v, "0") == 0 && strcmp(flag, "--node-bw") == 0) {
        *out = 0;
        return 0;
    }
    if (rf_topology_parse_rate(v, out) != RF_OK || !(*out > 0)) {
        bad_value(flag, v, "not a rate (for example 50GB/s)");
        return -1;
    }
    return 0;
}

static char *hex64(uint64_t v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%016" PRIx64, v);
    return buf;
}

/* The reload plan of every rollout rank through rf_session_offline_* (the numbers a session
 * of the topology agrees in rf_session_plan), a row per rank, then the session's totals and
 * plan hash; 0 or 1 (message printed). */
static int plan_offline(const char *topo_path, int layerwise, const char *owner,
                        const char *json_path)
{
    rf_session_options_t opt = {.layerwise = layerwise};
    rf_session_offline_t *o = NULL;
    if (rf_session_offline_open(topo_path, &opt, owner, &o) != RF_OK)
        return fail(rf_session_offline_last_error(NULL));
    const rf_session_offline_desc_t *d = rf_session_offline_describe(o);
    int T = d->trainer_ranks, R = d->rollout_ranks;
    printf("refit-plan: %s: %s %s, %d layers, %d tensors, %" PRIu64
           " checkpoint elements; quantization %s on %s (owner %s); %d trainer + %d rollout ranks\n",
           d->name, d->model_type, d->architecture, d->model_layers, d->tensors, d->elements,
           d->quantization, d->backend, d->format_owner, T, R);
    printf("%6s %6s %4s %4s %4s %8s %13s %10s %14s %10s %9s %16s\n", "rank", "engine", "tp",
           "dp", "ep", "DIRECT", "RUNTIME_VIEW", "LAYERWISE", "applications", "declined",
           "layers", "reserved bytes");
    json_t *jrows = json_array();
    int rc = 0;
    for (int j = 0; j < R && rc == 0; j++) {
        rf_session_rank_plan_t p;
        if (rf_session_offline_plan_rank(o, T + j, &p) != RF_OK) {
            rc = fail(rf_session_offline_last_error(o));
            break;
        }
        char h[24];
        printf("%6d %6d %4d %4d %4d %8" PRIu64 " %13" PRIu64 " %10" PRIu64 " %14" PRIu64
               " %10" PRIu64 " %9d %16" PRIu64 "\n",
               p.rank, p.engine, p.tp_rank, p.dp_rank, p.ep_rank, p.layers[0], p.layers[1],
               p.layers[2], p.applications, p.declined, p.nlayers, p.storage_bytes);
        json_array_append_new(
            jrows, json_pack("{s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:s}",
                             "rank", p.rank, "engine", p.engine, "tp_rank", p.tp_rank,
                             "dp_rank", p.dp_rank, "ep_rank", p.ep_rank, "direct",
                             (json_int_t)p.layers[0], "runtime_view", (json_int_t)p.layers[1],
                             "layerwise", (json_int_t)p.layers[2], "applications",
                             (json_int_t)p.applications, "declined", (json_int_t)p.declined,
                             "reserved_bytes", (json_int_t)p.storage_bytes, "decisions_hash",
                             hex64(p.hash, h, sizeof(h))));
    }
    rf_session_plan_info_t info;
    if (rc == 0 && rf_session_offline_plan(o, &info) != RF_OK)
        rc = fail(rf_session_offline_last_error(o));
    char hh[24], hd[24];
    if (rc == 0)
        printf("refit-plan: %s: plan hash %s (what rf_session_plan agrees; trainers without F32 "
               "masters): %" PRIu64 " DIRECT, %" PRIu64 " RUNTIME_VIEW, %" PRIu64
               " LAYERWISE layers over %d rollout ranks (%s); manifest %s: %d tensors, %" PRIu64
               " payload bytes\n",
               d->name, hex64(info.hash, hh, sizeof(hh)), info.layers[0], info.layers[1],
               info.layers[2], R, d->mode, hex64(info.manifest_digest, hd, sizeof(hd)),
               info.tensors, info.payload_bytes);
    if (json_path != NULL && rc == 0) {
        json_t *root = json_pack(
            "{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:{s:I, s:I, s:I}, s:i, s:I, s:o}", "topology",
            d->name, "quantization", d->quantization, "backend", d->backend, "mode", d->mode,
            "tensors", d->tensors, "hash", hh, "manifest_digest", hd, "layers", "direct",
            (json_int_t)info.layers[0], "runtime_view", (json_int_t)info.layers[1], "layerwise",
            (json_int_t)info.layers[2], "manifest_tensors", info.tensors, "payload_bytes",
            (json_int_t)info.payload_bytes, "ranks", jrows);
        errno = 0;
        if (root == NULL || json_dump_file(root, json_path, JSON_INDENT(1)) != 0) {
            fprintf(stderr, "refit-plan: --json %s: cannot write: %s\n", json_path,
                    errno ? strerror(errno) : "no JSON");
            rc = 1;
        }
        json_decref(root);
    } else {
        json_decref(jrows);
    }
    rf_session_offline_close(o);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"topology", required_argument, NULL, 't'}, {"reload-policy", required_argument, NULL, 'p'},
        {"json", required_argument, NULL, 'j'},     {"format-owner", required_argument, NULL, 'f'},
        {"simulate", no_argument, NULL, 'S'},       {"machine", required_argument, NULL, 'M'},
        {"gpus-per-node", required_argument, NULL, 'g'}, {"nodes", required_argument, NULL, 'n'},
        {"nvlink-bw", required_argument, NULL, 'v'}, {"nic-bw", required_argument, NULL, 'i'},
        {"node-bw", required_argument, NULL, 'o'},   {"chunk-latency-us", required_argument, NULL, 'l'},
        {"mode", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    /* machine flags apply over the machine file, in any order: kept until both are known */
    const char *machine_path = NULL, *mf[7] = {NULL};
    int sim = 0, modes = 3;
    const char *topo_path = NULL, *json_path = NULL, *owner = NULL;
    int layerwise = 0;
    rf_topology_t topo;
    rf_model_config_t cfg0, cfg;
    rf_inventory_t inv;
    rf_err_t err;
    char *yaml;
    size_t len;
    int c;
    rf_err_clear(&err);
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 't':
            topo_path = optarg;
            break;
        case 'j':
            json_path = optarg;
            break;
        case 'f':
            owner = optarg;
            break;
        case 'p':
            if (strcmp(optarg, "auto") == 0)
                layerwise = 0;
            else if (strcmp(optarg, "layerwise") == 0)
                layerwise = 1;
            else
                return bad_value("--reload-policy", optarg, "must be auto or layerwise");
            break;
        case 'S':
            sim = 1;
            break;
        case 'M':
            machine_path = optarg;
            break;
        case 'g':
            mf[0] = optarg;
            break;
        case 'n':
            mf[1] = optarg;
            break;
        case 'v':
            mf[2] = optarg;
            break;
        case 'i':
            mf[3] = optarg;
            break;
        case 'o':
            mf[4] = optarg;
            break;
        case 'l':
            mf[5] = optarg;
            break;
        case 'm':
            if (strcmp(optarg, "broadcast") == 0)
                modes = 1;
            else if (strcmp(optarg, "p2p") == 0)
                modes = 2;
            else if (strcmp(optarg, "both") == 0)
                modes = 3;
            else
                return bad_value("--mode", optarg, "must be broadcast, p2p or both");
            break;
        case 'h':
            usage(stdout);
            return 0;
        case '?':
        case ':': /* opterr = 0 and ":h": getopt_long left the message to us */
            cli_bad_option("refit-plan", c, argv);
            return 2;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) { /* refit-plan takes options only: a stray word is a typo, not a file */
        fprintf(stderr, "refit-plan: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (topo_path == NULL) {
        usage(stderr);
        return 2;
    }
    rf_machine_t mach;
    rf_machine_default(&mach);
    if (machine_path != NULL) {
        char *mt = cli_file_read(machine_path, 0, &len);
        if (mt == NULL) {
            fprintf(stderr, "refit-plan: %s: cannot read: %s\n", machine_path, cli_file_error());
            return 1;
        }
        rf_status_t mst = rf_machine_parse(mt, len, machine_path, &mach, &err);
        free(mt);
        if (mst != RF_OK)
            return fail(err.msg);
    }
    {
        char *end;
        if (mf[0] != NULL &&
            ((mach.gpus_per_node = (int)strtol(mf[0], &end, 10)) < 1 || *end || end == mf[0]))
            return bad_value("--gpus-per-node", mf[0], "must be an integer >= 1");
        if (mf[1] != NULL && ((mach.nodes = (int)strtol(mf[1], &end, 10)) < 0 || *end ||
                              end == mf[1]))
            return bad_value("--nodes", mf[1], "must be an integer >= 0");
        if ((mf[2] && parse_rate_flag("--nvlink-bw", mf[2], &mach.nvlink_Bps)) ||
            (mf[3] && parse_rate_flag("--nic-bw", mf[3], &mach.nic_Bps)) ||
            (mf[4] && parse_rate_flag("--node-bw", mf[4], &mach.node_Bps)))
            return 1;
        if (mf[5] != NULL) {
            double us = strtod(mf[5], &end);
            if (*end || end == mf[5] || !(us >= 0))
                return bad_value("--chunk-latency-us", mf[5], "must be a number >= 0");
            mach.chunk_latency_s = us * 1e-6;
        }
    }
    if ((yaml = cli_file_read(topo_path, 0, &len)) == NULL) {
        fprintf(stderr, "refit-plan: %s: cannot read: %s\n", topo_path, cli_file_error());
        return 1;
    }
    if (!sim) { /* the reload plans: the session API's offline plan (refit/session.h) */
        free(yaml);
        return plan_offline(topo_path, layerwise, owner, json_path);
    }
    /* --simulate: the scale model over the topology and inventory (refit/simulate.h); MPI only
     * so that the library's MPI-typed pieces are initialized; one process */
    MPI_Init(&argc, &argv);
    if (rf_topology_parse(yaml, len, topo_path, &topo, &err) != RF_OK ||
        rf_model_config_load(topo.model_config_path, &cfg0, &err) != RF_OK ||
        rf_model_check_topology(&topo, &cfg0, 0, &cfg, &err) != RF_OK ||
        rf_model_bind_topology(&topo, &cfg, &err) != RF_OK ||
        rf_inventory_build(&cfg, topo.quantization, topo.group_size, &inv, &err) != RF_OK ||
        rf_inventory_apply_layout(&inv, topo.r_layout, &err) != RF_OK) {
        free(yaml);
        MPI_Finalize();
        return fail(err.msg);
    }
    free(yaml);
    const rf_format_ops_t *ops = owner ? rf_format_lookup(owner)
                                       : rf_format_for(topo.quantization, (int)topo.r_backend);
    if (ops == NULL) {
        MPI_Finalize();
        return fail("no format owner for this (quantization, backend)");
    }
    int src = simulate(&topo, &inv, &mach, modes, json_path);
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    rf_model_config_free(&cfg0);
    MPI_Finalize();
    return src;
}
