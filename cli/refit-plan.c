/*
 * refit-plan: the reload plan of every rollout rank of a topology, without moving data or
 * committing memory (DESIGN.md section 8).
 *
 *   refit-plan --topology FILE [--reload-policy auto|layerwise] [--json FILE]
 *
 * Runs as one process (no mpirun needed): it parses the topology and the model config, builds
 * the inventory, and for each rollout rank reserves that rank's runtime arenas with
 * mmap(MAP_NORESERVE, PROT_NONE), plans every layer with the format owner of the topology's
 * (quantization, backend), and prints the layers per plan mode and the expected applications.
 * Full-size models (Qwen3-30B-A3B: ~19k tensors, 30 B parameters) plan in seconds on a laptop.
 */
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
#include "refit/log.h"
#include "refit/model.h"
#include "refit/plan.h"
#include "refit/storage.h"
#include "refit/topology.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: refit-plan --topology FILE [--reload-policy auto|layerwise] [--format-owner NAME]\n"
               "                  [--json FILE]\n"
               "\n"
               "Prints, per rollout rank of the topology, the layers per plan mode (DIRECT,\n"
               "RUNTIME_VIEW, LAYERWISE) and the expected applications, without moving data or\n"
               "committing memory (arenas are reserved with MAP_NORESERVE). --format-owner NAME\n"
               "overrides the owner chosen from the topology's quantization and backend.\n");
}

static int fail(const char *msg)
{
    fprintf(stderr, "refit-plan: %s\n", msg);
    return 1;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"topology", required_argument, NULL, 't'}, {"reload-policy", required_argument, NULL, 'p'},
        {"json", required_argument, NULL, 'j'},     {"format-owner", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    const char *topo_path = NULL, *json_path = NULL, *owner = NULL;
    rf_reload_policy_t policy = RF_POLICY_AUTO;
    rf_topology_t topo;
    rf_model_config_t cfg0, cfg;
    rf_inventory_t inv;
    rf_err_t err;
    char *yaml;
    size_t len;
    int c;
    rf_err_clear(&err);
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
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
                policy = RF_POLICY_AUTO;
            else if (strcmp(optarg, "layerwise") == 0)
                policy = RF_POLICY_LAYERWISE;
            else
                return fail("--reload-policy must be auto or layerwise");
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (topo_path == NULL) {
        usage(stderr);
        return 2;
    }
    /* MPI only so that the library's MPI-typed pieces are initialized; one process */
    MPI_Init(&argc, &argv);
    if ((yaml = cli_file_read(topo_path, 0, &len)) == NULL) {
        fprintf(stderr, "refit-plan: %s: cannot read\n", topo_path);
        MPI_Finalize();
        return 1;
    }
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
    rf_format_t fmt = {.ops = owner ? rf_format_lookup(owner)
                                    : rf_format_for(topo.quantization, (int)topo.r_backend),
                       .quant = topo.quantization,
                       .backend = (int)topo.r_backend};
    if (fmt.ops == NULL) {
        MPI_Finalize();
        return fail("no format owner for this (quantization, backend)");
    }
    int T = rf_topology_trainer_size(&topo), R = rf_topology_rollout_size(&topo);
    printf("refit-plan: %s: %s %s, %d layers, %d tensors, %" PRIu64
           " checkpoint elements; quantization %s on %s (owner %s); %d trainer + %d rollout ranks\n",
           topo.name, cfg.model_type, cfg.architecture, (int)cfg.num_hidden_layers, inv.ntensors,
           inv.nparams, rf_quant_name(topo.quantization), rf_backend_name(topo.r_backend),
           fmt.ops->name, T, R);
    printf("%6s %6s %4s %4s %4s %8s %13s %10s %14s %10s %9s %16s\n", "rank", "engine", "tp",
           "dp", "ep", "DIRECT", "RUNTIME_VIEW", "LAYERWISE", "applications", "declined",
           "layers", "reserved bytes");
    json_t *jrows = json_array();
    int rc = 0;
    for (int j = 0; j < R; j++) {
        rf_rank_info_t info;
        rf_storage_t st;
        rf_plan_t plan;
        rf_topology_rank_info(&topo, T + j, &info);
        if (rf_inventory_check_rollout(&inv, &info.rc, &err) != RF_OK ||
            rf_storage_init(&st, inv.nmodules, &err) != RF_OK) {
            rc = fail(err.msg);
            break;
        }
        if (rf_plan_alloc_storage(&inv, &info.rc, &fmt, &st, true, &err) != RF_OK ||
            rf_plan_build(&plan, &inv, &info.rc, &st, &fmt, policy, &err) != RF_OK) {
            rf_storage_free(&st);
            rc = fail(err.msg);
            break;
        }
        uint64_t declined = 0;
        for (int a = 0; a < plan.napps; a++)
            declined += plan.apps[a].declined;
        printf("%6d %6d %4d %4d %4d %8" PRIu64 " %13" PRIu64 " %10" PRIu64 " %14" PRIu64
               " %10" PRIu64 " %9d %16" PRIu64 "\n",
               T + j, info.engine, info.rc.tp_rank, info.rc.dp_rank, info.rc.ep_rank,
               plan.stats.layers[0], plan.stats.layers[1], plan.stats.layers[2],
               (uint64_t)plan.napps - declined, declined, plan.nlayers, st.bytes);
        json_array_append_new(
            jrows, json_pack("{s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I}", "rank",
                             T + j, "engine", info.engine, "tp_rank", info.rc.tp_rank, "dp_rank",
                             info.rc.dp_rank, "ep_rank", info.rc.ep_rank, "direct",
                             (json_int_t)plan.stats.layers[0], "runtime_view",
                             (json_int_t)plan.stats.layers[1], "layerwise",
                             (json_int_t)plan.stats.layers[2], "applications",
                             (json_int_t)(plan.napps - declined), "declined",
                             (json_int_t)declined, "reserved_bytes", (json_int_t)st.bytes));
        rf_plan_free(&plan);
        rf_storage_free(&st);
    }
    if (json_path != NULL && rc == 0) {
        json_t *root = json_pack("{s:s, s:s, s:s, s:i, s:o}", "topology", topo.name,
                                 "quantization", rf_quant_name(topo.quantization), "backend",
                                 rf_backend_name(topo.r_backend), "tensors", inv.ntensors,
                                 "ranks", jrows);
        json_dump_file(root, json_path, JSON_INDENT(1));
        json_decref(root);
    } else {
        json_decref(jrows);
    }
    rf_inventory_free(&inv);
    rf_model_config_free(&cfg);
    rf_model_config_free(&cfg0);
    MPI_Finalize();
    return rc;
}
