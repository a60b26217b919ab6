/*
 * Unit tests: topology files (DESIGN.md sections 3 and 5). Every file in jobs/topologies and
 * the compiled-in default parse and pass the model rules; defaults; sizes and rates; a table
 * of bad files, each refused with RF_ERR_TOPOLOGY and a message naming the key and value;
 * rules against the tiny fixtures' configs; the canonical hash; the placement arithmetic
 * against hand-computed coordinates; the placement check on synthetic all-gather records.
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refit/model.h"
#include "refit/topology.h"

#define TOPO_DIR REFIT_JOBS_DIR "/topologies"
#define MODELS_DIR REFIT_JOBS_DIR "/models"

static char *slurp(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len_p)
        *len_p = (size_t)n;
    return buf;
}

static rf_status_t parse_str(const char *yaml, const char *path, rf_topology_t *t, rf_err_t *err)
{
    rf_err_clear(err);
    return rf_topology_parse(yaml, strlen(yaml), path, t, err);
}

static rf_topology_t parse_ok(const char *yaml, const char *path)
{
    rf_topology_t t;
    rf_err_t err;
    rf_status_t st = parse_str(yaml, path, &t, &err);
    ck_assert_msg(st == RF_OK, "parse failed: %s\n%s", err.msg, yaml);
    return t;
}

static rf_model_config_t load_cfg(const char *path)
{
    rf_model_config_t cfg;
    rf_err_t err;
    rf_err_clear(&err);
    ck_assert_msg(rf_model_config_load(path, &cfg, &err) == RF_OK, "%s: %s", path, err.msg);
    return cfg;
}

/* ---- every shipped topology ---------------------------------------------------------- */

typedef struct expect_file {
    const char *file;
    const char *name;
    int T, R, t_tp, t_pp, r_engines, r_tp;
    int64_t pp0; /* layers of stage 0 after binding */
} expect_file_t;

static const expect_file_t k_files[] = {
    {"default.yaml", "default", 2, 2, 1, 2, 1, 2, 14},
    {"qwen3-0.6b-tp2-to-2xtp1.yaml", "qwen3-0.6b-tp2-to-2xtp1", 2, 2, 2, 1, 2, 1, 28},
    {"qwen3-0.6b-tp2pp2-to-tp4.yaml", "qwen3-0.6b-tp2pp2-to-tp4", 4, 4, 2, 2, 1, 4, 14},
    {"llama-tiny-tp1-to-tp1.yaml", "llama-tiny-tp1-to-tp1", 1, 1, 1, 1, 1, 1, 3},
    {"llama-tiny-hf-tp1-to-tp1.yaml", "llama-tiny-hf-tp1-to-tp1", 1, 1, 1, 1, 1, 1, 3},
    {"llama-tiny-tp1pp3-to-tp2.yaml", "llama-tiny-tp1pp3-to-tp2", 3, 2, 1, 3, 1, 2, 1},
    {"llama-tiny-tp2-to-2xtp1.yaml", "llama-tiny-tp2-to-2xtp1", 2, 2, 2, 1, 2, 1, 3},
    {"llama-tiny-tp2pp2-to-tp2.yaml", "llama-tiny-tp2pp2-to-tp2", 4, 2, 2, 2, 1, 2, 2},
    {"qwen3-tiny-tied-tp1-to-tp4.yaml", "qwen3-tiny-tied-tp1-to-tp4", 1, 4, 1, 1, 1, 4, 2},
    {"qwen3-tiny-tied-tp2-to-tp2.yaml", "qwen3-tiny-tied-tp2-to-tp2", 2, 2, 2, 1, 1, 2, 2},
    {"qwen3-30b-a3b-1l-fp8-block-rocm-fnuz-tp2.yaml", "qwen3-30b-a3b-1l-fp8-block-rocm-fnuz-tp2", 1, 2, 1, 1, 1, 2, 1},
    {"qwen3-30b-a3b-1l-fp8-block-rocm-fnuz-tp2ep2.yaml", "qwen3-30b-a3b-1l-fp8-block-rocm-fnuz-tp2ep2", 1, 2, 1, 1, 1, 2, 1},
    {"qwen3-30b-a3b-1l-fp8-block-triton-tp2.yaml", "qwen3-30b-a3b-1l-fp8-block-triton-tp2", 1, 2, 1, 1, 1, 2, 1},
    {"qwen3-30b-a3b-1l-fp8-block-triton-tp2ep2.yaml", "qwen3-30b-a3b-1l-fp8-block-triton-tp2ep2", 1, 2, 1, 1, 1, 2, 1},
    {"qwen3-30b-a3b-1l-wna16-marlin-tp2.yaml", "qwen3-30b-a3b-1l-wna16-marlin-tp2", 1, 2, 1, 1, 1, 2, 1},
    {"qwen3-30b-a3b-1l-wna16-marlin-tp2ep2.yaml", "qwen3-30b-a3b-1l-wna16-marlin-tp2ep2", 1, 2, 1, 1, 1, 2, 1},
    {"qwen3-30b-a3b-1l-wna16-triton-tp2.yaml", "qwen3-30b-a3b-1l-wna16-triton-tp2", 1, 2, 1, 1, 1, 2, 1},
    {"qwen3-30b-a3b-1l-wna16-triton-tp2ep2.yaml", "qwen3-30b-a3b-1l-wna16-triton-tp2ep2", 1, 2, 1, 1, 1, 2, 1},
    {"qwen3-fp8-tiny-tp1-to-tp1.yaml", "qwen3-fp8-tiny-tp1-to-tp1", 1, 1, 1, 1, 1, 1, 2},
    {"qwen3-moe-tiny-tp1-to-tp2ep1-linear.yaml", "qwen3-moe-tiny-tp1-to-tp2ep1-linear", 1, 2, 1, 1, 1, 2, 2},
    {"qwen3-moe-tiny-tp1-to-tp2ep1-round_robin.yaml", "qwen3-moe-tiny-tp1-to-tp2ep1-round_robin", 1, 2, 1, 1, 1, 2, 2},
    {"qwen3-moe-tiny-tp1-to-tp2ep2-linear.yaml", "qwen3-moe-tiny-tp1-to-tp2ep2-linear", 1, 2, 1, 1, 1, 2, 2},
    {"qwen3-moe-tiny-tp1-to-tp2ep2-round_robin.yaml", "qwen3-moe-tiny-tp1-to-tp2ep2-round_robin", 1, 2, 1, 1, 1, 2, 2},
    {"llama-tiny-tp2-to-tp2-colocated-ipc.yaml", "llama-tiny-tp2-to-tp2-colocated-ipc", 2, 2, 2, 1, 1, 2, 3},
    {"llama-tiny-tp2-to-2xtp1-colocated-ipc.yaml", "llama-tiny-tp2-to-2xtp1-colocated-ipc", 2, 2, 2, 1, 2, 1, 3},
    {"qwen3-tiny-tied-tp1-to-tp1-colocated-ipc.yaml", "qwen3-tiny-tied-tp1-to-tp1-colocated-ipc", 1, 1, 1, 1, 1, 1, 2},
    {"qwen3-moe-tiny-wna16-tp1-to-tp1-colocated-ipc.yaml", "qwen3-moe-tiny-wna16-tp1-to-tp1-colocated-ipc", 1, 1, 1, 1, 1, 1, 2},
};
#define N_FILES (sizeof(k_files) / sizeof(k_files[0]))

static void check_one_file(const expect_file_t *e)
{
    char path[2 * RF_PATH_MAX];
    rf_topology_t t;
    rf_err_t err;
    rf_model_config_t raw, cfg;
    size_t len;
    /* default.yaml is the compiled-in copy: parsed as such (path NULL), its model.config
     * is relative to the current folder, i.e. the repository root */
    bool builtin = strcmp(e->file, "default.yaml") == 0;
    snprintf(path, sizeof(path), "%s/%s", TOPO_DIR, e->file);
    char *yaml = slurp(path, &len);
    rf_err_clear(&err);
    ck_assert_msg(rf_topology_parse(yaml, len, builtin ? NULL : path, &t, &err) == RF_OK, "%s",
                  err.msg);
    free(yaml);
    ck_assert_str_eq(t.name, e->name);
    ck_assert_int_eq(rf_topology_trainer_size(&t), e->T);
    ck_assert_int_eq(rf_topology_rollout_size(&t), e->R);
    ck_assert_int_eq(t.t_tp, e->t_tp);
    ck_assert_int_eq(t.t_etp, e->t_tp);
    ck_assert_int_eq(t.t_pp, e->t_pp);
    ck_assert_int_eq(t.r_engines, e->r_engines);
    ck_assert_int_eq(t.r_tp, e->r_tp);
    /* *-colocated-ipc.yaml: colocated over the ipc transport; everything else mpi */
    bool ipc = strstr(e->file, "-colocated-ipc.yaml") != NULL;
    ck_assert_int_eq(t.transport, ipc ? RF_TRANSPORT_IPC : RF_TRANSPORT_MPI);
    ck_assert(t.colocated == ipc);
    ck_assert(t.chunk_bytes <= 2147483392ull);
    /* model.config is relative to the file's folder */
    if (builtin) {
        snprintf(path, sizeof(path), "%s/../%s", REFIT_JOBS_DIR, t.model_config_path);
        raw = load_cfg(path);
    } else {
        ck_assert_msg(strncmp(t.model_config_path, TOPO_DIR "/", strlen(TOPO_DIR) + 1) == 0, "%s",
                      t.model_config_path);
        raw = load_cfg(t.model_config_path);
    }
    rf_err_clear(&err);
    ck_assert_msg(rf_model_check_topology(&t, &raw, e->T + e->R, &cfg, &err) == RF_OK, "%s: %s",
                  e->file, err.msg);
    ck_assert_int_eq(rf_model_bind_topology(&t, &cfg, &err), RF_OK);
    int64_t first, count, total = 0;
    rf_topology_stage_layers(&t, 0, &first, &count);
    ck_assert_int_eq(first, 0);
    ck_assert_int_eq(count, e->pp0);
    for (int p = 0; p < t.t_pp; p++) {
        rf_topology_stage_layers(&t, p, &first, &count);
        ck_assert_int_eq(first, total);
        total += count;
    }
    ck_assert_int_eq(total, cfg.num_hidden_layers);
    rf_model_config_free(&raw);
    rf_model_config_free(&cfg);
}

START_TEST(test_shipped_files)
{
    check_one_file(&k_files[_i]);
}
END_TEST

/* Every yaml in jobs/topologies is in the table above (a new file must be tested). */
START_TEST(test_all_files_listed)
{
    DIR *d = opendir(TOPO_DIR);
    struct dirent *de;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".yaml") != 0)
            continue;
        bool found = false;
        for (size_t i = 0; i < N_FILES; i++)
            found = found || strcmp(k_files[i].file, de->d_name) == 0;
        ck_assert_msg(found, "%s is not in the test table", de->d_name);
        n++;
    }
    closedir(d);
    ck_assert_int_eq(n, (int)N_FILES);
}
END_TEST

START_TEST(test_compiled_default)
{
    rf_topology_t t, f;
    rf_err_t err;
    size_t len;
    char *file = slurp(TOPO_DIR "/default.yaml", &len);
    ck_assert_str_eq(rf_default_topology_yaml, file);
    free(file);
    ck_assert_int_eq(parse_str(rf_default_topology_yaml, NULL, &t, &err), RF_OK);
    ck_assert_str_eq(t.name, "default");
    ck_assert_str_eq(t.file, "default.yaml");
    /* compiled-in: as jobs/topologies/default.yaml under the current folder */
    ck_assert_str_eq(t.model_config_path, "jobs/topologies/../models/qwen3-0.6b.config.json");
    ck_assert_str_eq(t.model_config, "../models/qwen3-0.6b.config.json");
    ck_assert_int_eq(t.t_pp, 2);
    ck_assert_int_eq(t.r_tp, 2);
    /* the file version: same content, different path, same name -> same hash */
    t = parse_ok(rf_default_topology_yaml, NULL);
    f = parse_ok(rf_default_topology_yaml, "/somewhere/else/default.yaml");
    ck_assert_str_ne(t.model_config_path, f.model_config_path);
    ck_assert_uint_eq(rf_topology_hash(&t), rf_topology_hash(&f));
}
END_TEST

START_TEST(test_defaults)
{
    rf_topology_t t = parse_ok("model: { config: x.json }\n", "/tmp/dir/my-topo.yaml");
    ck_assert_str_eq(t.name, "my-topo");
    ck_assert_str_eq(t.model_config, "x.json");
    ck_assert_str_eq(t.model_config_path, "/tmp/dir/x.json");
    ck_assert_int_eq(t.quantization, RF_QUANT_NONE);
    ck_assert(!t.quantization_set);
    ck_assert_int_eq(t.group_size, 128);
    ck_assert(!t.group_size_set);
    ck_assert_int_eq(t.ov_num_hidden_layers, -1);
    ck_assert_int_eq(t.ov_num_experts, -1);
    ck_assert_int_eq(t.ov_vocab_size, -1);
    ck_assert_int_eq(t.t_tp, 1);
    ck_assert_int_eq(t.t_cp, 1);
    ck_assert_int_eq(t.t_pp, 1);
    ck_assert_int_eq(t.t_dp, 1);
    ck_assert_int_eq(t.t_etp, 1);
    ck_assert_int_eq(t.t_ep, 1);
    ck_assert_str_eq(t.t_order, "tp-cp-ep-dp-pp");
    ck_assert_int_eq(t.t_layout, RF_TRAINER_LAYOUT_MEGATRON);
    ck_assert_int_eq(t.r_layout, RF_ROLLOUT_LAYOUT_VLLM);
    ck_assert(!t.pp_layers_set);
    ck_assert_int_eq(t.t_ngpus, 0);
    ck_assert_int_eq(t.r_engines, 1);
    ck_assert_int_eq(t.r_tp, 1);
    ck_assert_int_eq(t.r_dp, 1);
    ck_assert_int_eq(t.r_ep, 1);
    ck_assert_int_eq(t.r_placement, RF_PLACE_LINEAR);
    ck_assert_int_eq(t.r_backend, RF_BACKEND_TRITON);
    ck_assert_int_eq(t.r_ngpus, 0);
    ck_assert(!t.colocated);
    ck_assert_int_eq(t.transport, RF_TRANSPORT_MPI);
    ck_assert_int_eq(t.mode, RF_MODE_BROADCAST);
    ck_assert_uint_eq(t.chunk_bytes, 67108864ull);
    ck_assert_int_eq(t.buffers, 2);
    ck_assert_double_eq(t.timeout_s, 300.0);
    ck_assert(t.integrity); /* on by default (issue 13) */
    ck_assert_double_eq(t.min_bandwidth, 1e8);
    ck_assert_double_eq(t.slack_s, 10.0);
    ck_assert_double_eq(t.join_timeout_s, 1800.0);

    /* etp follows tp; min_bandwidth follows the transport; a file without a folder */
    t = parse_ok("model: { config: x.json }\ntrainer: { tp: 4 }\ntransfer: { transport: nccl }\n",
                 "plain.yaml");
    ck_assert_int_eq(t.t_etp, 4);
    ck_assert_double_eq(t.min_bandwidth, 1e10);
    ck_assert_str_eq(t.model_config_path, "x.json");
    t = parse_ok("model: { config: x.json }\ntransfer: { transport: ipc }\n", NULL);
    ck_assert_double_eq(t.min_bandwidth, 1e10);
    ck_assert_str_eq(t.name, "default");
    t = parse_ok("model: { config: /abs/x.json }\n", "a/b.yml");
    ck_assert_str_eq(t.model_config_path, "/abs/x.json");
    ck_assert_str_eq(t.name, "b");

    /* every key given, block style */
    t = parse_ok("name: full\n"
                 "model:\n  config: c.json\n  quantization: wna16\n  group_size: 64\n"
                 "  overrides: { num_hidden_layers: 4, num_experts: 16, vocab_size: 1000 }\n"
                 "trainer:\n  tp: 2\n  cp: 2\n  pp: 2\n  dp: 1\n  etp: 1\n  ep: 4\n"
                 "  order: tp-cp-ep-dp-pp\n  pp_layers: [3, 1]\n  gpus: [0, 1, 2, 3]\n"
                 "rollout:\n  engines: 2\n  tp: 2\n  dp: 2\n  ep: 4\n"
                 "  expert_placement: round_robin\n  backend: marlin\n  gpus: [4, 5, 6, 7]\n"
                 "colocated: false\n"
                 "transfer:\n  transport: nccl\n  mode: p2p\n  chunk_bytes: 512MiB\n"
                 "  buffers: 3\n  timeout_s: 12.5\n  integrity: true\n"
                 "  min_bandwidth: 2.5GB/s\n  slack_s: 0\n  join_timeout_s: 90\n",
                 "d/full.yaml");
    ck_assert_str_eq(t.name, "full");
    ck_assert_int_eq(t.quantization, RF_QUANT_WNA16);
    ck_assert(t.quantization_set && t.group_size_set);
    ck_assert_int_eq(t.group_size, 64);
    ck_assert_int_eq(t.ov_num_hidden_layers, 4);
    ck_assert_int_eq(t.ov_num_experts, 16);
    ck_assert_int_eq(t.ov_vocab_size, 1000);
    ck_assert_int_eq(rf_topology_trainer_size(&t), 8);
    ck_assert_int_eq(rf_topology_rollout_size(&t), 8);
    ck_assert_int_eq(t.t_etp, 1);
    ck_assert_int_eq(t.t_ep, 4);
    ck_assert(t.pp_layers_set);
    ck_assert_int_eq(t.pp_layers[0], 3);
    ck_assert_int_eq(t.pp_layers[1], 1);
    ck_assert_int_eq(t.t_ngpus, 4);
    ck_assert_int_eq(t.t_gpus[3], 3);
    ck_assert_int_eq(t.r_ngpus, 4);
    ck_assert_int_eq(t.r_gpus[0], 4);
    ck_assert_int_eq(t.r_ep, 4);
    ck_assert_int_eq(t.r_placement, RF_PLACE_ROUND_ROBIN);
    ck_assert_int_eq(t.r_backend, RF_BACKEND_MARLIN);
    ck_assert_int_eq(t.transport, RF_TRANSPORT_NCCL);
    ck_assert_int_eq(t.mode, RF_MODE_P2P);
    ck_assert_uint_eq(t.chunk_bytes, 536870912ull);
    ck_assert_int_eq(t.buffers, 3);
    ck_assert_double_eq(t.timeout_s, 12.5);
    ck_assert(t.integrity);
    ck_assert_double_eq(t.min_bandwidth, 2.5e9);
    ck_assert_double_eq(t.slack_s, 0.0);
    ck_assert_double_eq(t.join_timeout_s, 90.0);
    int64_t first, count;
    rf_topology_stage_layers(&t, 1, &first, &count);
    ck_assert_int_eq(first, 3);
    ck_assert_int_eq(count, 1);
    ck_assert_int_eq(rf_topology_layer_stage(&t, 2, 4), 0);
    ck_assert_int_eq(rf_topology_layer_stage(&t, 3, 4), 1);
    ck_assert_int_eq(rf_topology_layer_stage(&t, -1, 4), 0);
    ck_assert_int_eq(rf_topology_layer_stage(&t, 4, 4), 1);
    ck_assert_str_eq(rf_transport_name(t.transport), "nccl");
    ck_assert_str_eq(rf_mode_name(t.mode), "p2p");
    ck_assert_str_eq(rf_backend_name(RF_BACKEND_ROCM_FNUZ), "rocm-fnuz");
}
END_TEST

START_TEST(test_sizes)
{
    uint64_t b;
    double r;
    ck_assert_int_eq(rf_topology_parse_size("64MiB", &b), RF_OK);
    ck_assert_uint_eq(b, 67108864ull);
    ck_assert_int_eq(rf_topology_parse_size("512MiB", &b), RF_OK);
    ck_assert_uint_eq(b, 536870912ull);
    ck_assert_int_eq(rf_topology_parse_size("4GiB", &b), RF_OK);
    ck_assert_uint_eq(b, 4294967296ull);
    ck_assert_int_eq(rf_topology_parse_size("1KiB", &b), RF_OK);
    ck_assert_uint_eq(b, 1024);
    ck_assert_int_eq(rf_topology_parse_size("3KB", &b), RF_OK);
    ck_assert_uint_eq(b, 3000);
    ck_assert_int_eq(rf_topology_parse_size("2MB", &b), RF_OK);
    ck_assert_uint_eq(b, 2000000);
    ck_assert_int_eq(rf_topology_parse_size("1GB", &b), RF_OK);
    ck_assert_uint_eq(b, 1000000000ull);
    ck_assert_int_eq(rf_topology_parse_size("12345", &b), RF_OK);
    ck_assert_uint_eq(b, 12345);
    ck_assert_int_eq(rf_topology_parse_size("8 MiB", &b), RF_OK);
    ck_assert_uint_eq(b, 8388608);
    const char *bad[] = {"",
                         "MiB",
                         "-1",
                         "1.5GiB",
                         "64mib",
                         "64MiBs",
                         "0x10",
                         "64 ",
                         "99999999999999999999",
                         "20000000000TiB",
                         "64MB/s"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(rf_topology_parse_size(bad[i], &b) == RF_ERR_PARSE, "'%s' accepted", bad[i]);

    ck_assert_int_eq(rf_topology_parse_rate("100MB/s", &r), RF_OK);
    ck_assert_double_eq(r, 1e8);
    ck_assert_int_eq(rf_topology_parse_rate("10GB/s", &r), RF_OK);
    ck_assert_double_eq(r, 1e10);
    ck_assert_int_eq(rf_topology_parse_rate("1.5GB/s", &r), RF_OK);
    ck_assert_double_eq(r, 1.5e9);
    ck_assert_int_eq(rf_topology_parse_rate("1GiB/s", &r), RF_OK);
    ck_assert_double_eq(r, 1073741824.0);
    ck_assert_int_eq(rf_topology_parse_rate("500/s", &r), RF_OK);
    ck_assert_double_eq(r, 500.0);
    const char *badr[] = {"100MB", "/s", "MB/s", "fastMB/s", "100Mb/s", "-1GB/s", "1..2GB/s"};
    for (size_t i = 0; i < sizeof(badr) / sizeof(badr[0]); i++)
        ck_assert_msg(rf_topology_parse_rate(badr[i], &r) == RF_ERR_PARSE, "'%s' accepted",
                      badr[i]);
}
END_TEST

/* ---- bad files ------------------------------------------------------------------------- */

typedef struct bad_case {
    const char *yaml;
    const char *want[3]; /* substrings of the message */
} bad_case_t;

#define M "model: { config: c.json }\n"
static const bad_case_t k_bad[] = {
    {M "foo: 1\n", {"bad.yaml: foo: unknown key", "1"}},
    {M "trainer: { tp: 1, tpp: 2 }\n", {"trainer.tpp", "unknown key", "2"}},
    {"model: { config: c.json, quant: none }\n", {"model.quant:", "unknown"}},
    {"model: { config: c.json, overrides: { hidden_size: 8 } }\n",
     {"model.overrides.hidden_size", "unknown override"}},
    {M "transfer: { chunk: 1 }\n", {"transfer.chunk:", "unknown"}},
    {M "trainer: { tp: 1 }\ntrainer: { tp: 2 }\n", {"bad.yaml: trainer: duplicate key"}},
    {M "trainer: { tp: 1, tp: 2 }\n", {"trainer.tp: duplicate key"}},
    {"model: { config: c.json, overrides: { vocab_size: 8, vocab_size: 9 } }\n",
     {"model.overrides.vocab_size: duplicate"}},
    {M "name: a\nname: a\n", {"name: duplicate"}},
    {M "trainer: &t { tp: 1 }\nrollout: *t\n", {"anchor &t", "not allowed"}},
    {M "trainer: { tp: &two 2 }\n", {"anchor &two"}},
    {M "trainer: { tp: two }\n", {"trainer.tp: two is not an integer"}},
    {M "trainer: { tp: 1.5 }\n", {"trainer.tp: 1.5 is not an integer"}},
    {M "trainer: { tp: \"2\" }\n", {"trainer.tp: \"2\" is not an integer"}},
    {M "trainer: { tp: true }\n", {"trainer.tp: true is not an integer"}},
    {M "trainer: { tp: [1] }\n", {"trainer.tp: a list is not an integer"}},
    {M "trainer: [1, 2]\n", {"trainer: a list where a map is expected"}},
    {M "rollout: 2\n", {"rollout: 2 where a map is expected"}},
    {"model: [c.json]\n", {"model: a list where a map"}},
    {M "colocated: \"false\"\n", {"colocated: \"false\" is not a boolean"}},
    {M "colocated: yes\n", {"colocated: yes is not a boolean"}},
    {M "transfer: { integrity: 1 }\n", {"transfer.integrity: 1 is not a boolean"}},
    {M "trainer: { tp: 0 }\n", {"trainer.tp: 0 is out of range"}},
    {M "trainer: { pp: -2 }\n", {"trainer.pp: -2 is out of range"}},
    {M "rollout: { engines: 0 }\n", {"rollout.engines: 0 is out of range"}},
    {M "trainer: { dp: 99999999999999999999 }\n", {"trainer.dp", "99999999999999999999"}},
    {M "trainer: { order: tp-dp-pp }\n", {"trainer.order: tp-dp-pp is not one of tp-cp-ep-dp-pp"}},
    {"model: { config: c.json, quantization: int4 }\n", {"model.quantization: int4"}},
    {M "rollout: { backend: cuda }\n", {"rollout.backend: cuda is not one of"}},
    {M "rollout: { expert_placement: random }\n", {"rollout.expert_placement: random"}},
    {M "transfer: { transport: tcp }\n", {"transfer.transport: tcp"}},
    {M "transfer: { mode: scatter }\n", {"transfer.mode: scatter"}},
    {"model: { config: c.json, quantization: wna16 }\nrollout: { backend: cutlass }\n",
     {"model.quantization: wna16", "rollout.backend: cutlass"}},
    {"model: { config: c.json, quantization: fp8-block }\nrollout: { backend: marlin }\n",
     {"model.quantization: fp8-block", "rollout.backend: marlin"}},
    {M "rollout: { tp: 2, ep: 3 }\n", {"rollout.ep: 3 must be 1", "2"}},
    {M "transfer: { chunk_bytes: 4GiB }\n", {"transfer.chunk_bytes: 4294967296 exceeds"}},
    {M "transfer: { chunk_bytes: 2147483393 }\n", {"transfer.chunk_bytes: 2147483393"}},
    {M "transfer: { chunk_bytes: 64mb }\n", {"transfer.chunk_bytes: 64mb is not a size"}},
    {M "transfer: { chunk_bytes: 0 }\n", {"transfer.chunk_bytes: 0 is out of range"}},
    {M "transfer: { min_bandwidth: 100MB }\n", {"transfer.min_bandwidth: 100MB is not a rate"}},
    {M "transfer: { timeout_s: 0 }\n", {"transfer.timeout_s: 0 is out of range (seconds, more than 0 and at most 1e9)"}},
    {M "transfer: { slack_s: -1 }\n", {"transfer.slack_s: -1 is out of range"}},
    {M "transfer: { join_timeout_s: -1 }\n",
     {"transfer.join_timeout_s: -1 is out of range (seconds, more than 0 and at most 1e9)"}},
    {M "transfer: { timeout_s: 2e9 }\n",
     {"transfer.timeout_s: 2e9 is out of range (seconds, more than 0 and at most 1e9)"}},
    {M "transfer: { join_timeout_s: 0 }\n", {"transfer.join_timeout_s: 0 is out of range (seconds, more than 0 and at most 1e9)"}},
    {M "transfer: { buffers: 0 }\n", {"transfer.buffers: 0 is out of range"}},
    {M "transfer: { p2p_inflight: 0 }\n", {"transfer.p2p_inflight: 0 is out of range"}},
    {M "transfer: { p2p_inflight: 65 }\n", {"transfer.p2p_inflight: 65 is out of range"}},
    {M "colocated: true\ntransfer: { transport: nccl }\n",
     {"colocated: true requires transfer.transport ipc", "got transport nccl without gpus"}},
    {M "colocated: true\ntrainer: { gpus: [0] }\nrollout: { gpus: [0] }\n",
     {"colocated: true requires", "mpi with gpus"}},
    {M "colocated: true\ntrainer: { tp: 2 }\ntransfer: { transport: mpi }\n",
     {"colocated: true requires as many trainer ranks (2)", "(1)"}},
    {M "colocated: true\ntrainer: { gpus: [0] }\nrollout: { gpus: [1] }\n"
       "transfer: { transport: ipc }\n",
     {"colocated: true requires trainer.gpus == rollout.gpus"}},
    {M "trainer: { pp: 2, pp_layers: [1, 1, 1] }\n", {"trainer.pp_layers: 3 entries", "pp is 2"}},
    {M "trainer: { pp: 2, pp_layers: [1, 0] }\n", {"trainer.pp_layers[1]: 0 is out of range"}},
    {M "trainer: { pp_layers: 3 }\n", {"trainer.pp_layers: 3 where a list"}},
    {M "trainer: { tp: 2, ep: 4 }\n", {"trainer.ep", "not divisible by etp 2 x ep 4 x pp 1"}},
    {M "trainer: { gpus: [0, 0] }\n", {"trainer.gpus: gpu 0 is listed twice"}},
    {M "rollout: { gpus: [] }\n", {"rollout.gpus: [] is empty"}},
    {M "rollout: { gpus: [-1] }\n", {"rollout.gpus[0]: -1 is out of range"}},
    {"model: { config: c.json, quantization: fp8-block, group_size: 64 }\n",
     {"model.group_size: 64 applies to quantization wna16 only"}},
    {"trainer: { tp: 1 }\n", {"model.config: missing"}},
    {"model: { quantization: none }\n", {"model.config: missing"}},
    {"model: { config: ~ }\n", {"model.config", "is not a string"}},
    {M "name: \"a b\"\n", {"name: \"a b\": use letters"}},
    {"", {"empty topology file"}},
    {"# only a comment\n", {"empty topology file"}},
    {"- 1\n- 2\n", {"(top level): a list where a map"}},
    {M "trainer: { tp: 1\n", {"bad.yaml: line", "yaml:"}},
    {M "trainer: { tp: !!int 2 }\n", {"tag", "not allowed"}},
    {M "---\n" M, {"second yaml document"}},
    {M "? [a, b]\n: 1\n", {"a list used as a key"}},
    /* layouts: fsdp shards over dp alone */
    {M "trainer: { layout: zero }\n", {"trainer.layout: zero is not one of megatron | fsdp"}},
    {M "trainer: { tp: 2, layout: fsdp }\n",
     {"trainer.tp: 2 with trainer.layout: fsdp is not supported", "over the trainer.dp ranks"}},
    {M "trainer: { cp: 2, layout: fsdp }\n", {"trainer.cp: 2 with trainer.layout: fsdp"}},
    {M "trainer: { dp: 2, etp: 2, layout: fsdp }\n", {"trainer.etp: 2 with trainer.layout"}},
    {M "trainer: { dp: 2, ep: 2, layout: fsdp }\n", {"trainer.ep: 2 with trainer.layout"}},
    {M "trainer: { dp: 65, layout: fsdp }\n",
     {"trainer.dp: 65 with trainer.layout: fsdp", "at most 64 ranks per stage"}},
    {M "rollout: { layout: sglang }\n", {"rollout.layout: sglang is not one of vllm | hf"}},
};
#undef M
#define N_BAD (sizeof(k_bad) / sizeof(k_bad[0]))

START_TEST(test_bad_inputs)
{
    const bad_case_t *c = &k_bad[_i];
    rf_topology_t t;
    rf_err_t err;
    rf_status_t st = parse_str(c->yaml, "bad.yaml", &t, &err);
    ck_assert_msg(st == RF_ERR_TOPOLOGY, "case %d accepted (%d): %s", _i, st, c->yaml);
    ck_assert_msg(strncmp(err.msg, "bad.yaml: ", 10) == 0, "case %d: no file: %s", _i, err.msg);
    for (int k = 0; k < 3 && c->want[k]; k++)
        ck_assert_msg(strstr(err.msg, c->want[k]) != NULL, "case %d: '%s' not in '%s'", _i,
                      c->want[k], err.msg);
}
END_TEST

/* ---- rules against the model ----------------------------------------------------------- */

typedef struct model_case {
    const char *config; /* under tests/data */
    const char *body;   /* yaml after the model.config line; "%s" -> nothing */
    int world;
    const char *want[3];
} model_case_t;

static const model_case_t k_model_bad[] = {
    {"llama-tiny", "rollout: { tp: 4 }\n", 5, {"rollout.tp: 4", "num_attention_heads 6"}},
    {"llama-tiny",
     "trainer: { tp: 4 }\n",
     5,
     {"m.yaml: trainer.tp: 4 does not divide num_attention_heads 6"}},
    {"llama-tiny",
     "trainer: { tp: 3 }\n",
     4,
     {"trainer.tp: 3 does not divide num_key_value_heads 2"}},
    {"qwen3-tiny-tied", "rollout: { tp: 8 }\n", 9, {"rollout.tp: 8", "num_attention_heads 4"}},
    {"qwen3-tiny-tied", "rollout: { tp: 3 }\n", 4, {"rollout.tp: 3"}},
    {"llama-tiny",
     "trainer: { tp: 2 }\nrollout: { engines: 2 }\n",
     3,
     {"m.yaml: world size 3 != trainer 2 + rollout 2 ranks (mpirun -np 4)"}},
    {"llama-tiny",
     "  overrides: { num_hidden_layers: 4 }\n",
     2,
     {"model.overrides.num_hidden_layers: 4 is larger", "num_hidden_layers 3"}},
    {"llama-tiny",
     "  overrides: { vocab_size: 2000 }\n",
     2,
     {"model.overrides.vocab_size: 2000 is larger", "1003"}},
    {"llama-tiny",
     "  overrides: { num_experts: 2 }\n",
     2,
     {"model.overrides.num_experts: 2", "dense"}},
    {"qwen3-moe-tiny",
     "  overrides: { num_experts: 16 }\n",
     2,
     {"model.overrides.num_experts: 16 is larger", "num_experts 8"}},
    {"llama-tiny",
     "trainer: { pp: 2 }\n",
     3,
     {"trainer.pp: 2 does not divide num_hidden_layers 3"}},
    {"llama-tiny",
     "trainer: { pp: 2, pp_layers: [1, 1] }\n",
     3,
     {"trainer.pp_layers", "sum to 2", "num_hidden_layers 3"}},
    {"llama-tiny",
     "trainer: { ep: 1 }\nrollout: { tp: 2, ep: 2 }\n",
     3,
     {"rollout.ep: 2 requires a MoE model"}},
    {"qwen3-moe-tiny",
     "trainer: { dp: 3, ep: 3 }\n",
     4,
     {"trainer.ep: 3 does not divide num_experts 8"}},
    {"qwen3-moe-tiny",
     "trainer: { tp: 2, etp: 2, dp: 2, ep: 1 }\n"
     "  # moe_intermediate_size 32 is fine for etp 2\n",
     5,
     {NULL}},
    {"qwen3-fp8-tiny",
     "  quantization: wna16\n",
     2,
     {"model.quantization: wna16 disagrees", "fp8-block"}},
    {"qwen3-fp8-tiny", "rollout: { tp: 2 }\n", 3, {"rollout.tp: 2", "128-row fp8 block"}},
    {"llama-tiny", "  quantization: wna16\n", 2, {"wna16", "hidden_size 96", "group size 128"}},
    /* fsdp: any pp, dense and MoE; quantized models (from the config too) refused */
    {"llama-tiny", "trainer: { dp: 3, pp: 3, layout: fsdp }\n", 10, {NULL}},
    {"qwen3-moe-tiny", "trainer: { dp: 3, layout: fsdp }\nrollout: { tp: 2 }\n", 5, {NULL}},
    {"qwen3-fp8-tiny",
     "trainer: { dp: 2, layout: fsdp }\n",
     3,
     {"m.yaml: trainer.layout: fsdp with model.quantization fp8-block is not supported yet"}},
    {"qwen3-moe-tiny",
     "  quantization: wna16\n  group_size: 32\ntrainer: { dp: 2, layout: fsdp }\n",
     3,
     {"trainer.layout: fsdp with model.quantization wna16"}},
    /* rollout.layout hf: dense and MoE, kv heads replicated past nkv; quantized linears as
     * transformers' quantizers keep them (fp8 scales in whole 128-row blocks per rank, named by
     * module and sizes), wna16 experts and the marlin backend refused naming the format, module
     * or backend; vocab rows need not divide (ceil(V / T)) */
    {"llama-tiny", "trainer: { tp: 2 }\nrollout: { tp: 2, layout: hf }\n", 4, {NULL}},
    {"qwen3-tiny-tied", "rollout: { tp: 4, layout: hf }\n", 5, {NULL}},
    {"qwen3-moe-tiny", "rollout: { tp: 2, ep: 2, layout: hf }\n", 3, {NULL}},
    {"qwen3-fp8-tiny", "rollout: { layout: hf }\n", 2, {NULL}},
    {"qwen3-fp8-tiny",
     "rollout: { tp: 2, layout: hf }\n",
     3,
     {"m.yaml: rollout.tp: 2 (tp_rank 0): model.layers.0.self_attn.k_proj: output rows per rank "
      "64 is not a multiple of the 128-row fp8 block"}},
    {"llama-tiny", "  quantization: wna16\n  group_size: 32\nrollout: { layout: hf }\n", 2, {NULL}},
    {"llama-tiny",
     "  quantization: wna16\n  group_size: 32\nrollout: { layout: hf, backend: marlin }\n",
     2,
     {"rollout.backend marlin with rollout.layout hf is not supported (wna16"}},
    {"qwen3-moe-tiny",
     "  quantization: wna16\n  group_size: 32\nrollout: { layout: hf }\n",
     2,
     {"rollout.layout hf with model.quantization wna16 is not supported for MoE experts",
      "in module model.layers.0.mlp.experts"}},
    {"llama-tiny", "rollout: { tp: 4, layout: hf }\n", 5,
     {"rollout.tp: 4", "model.layers.0.self_attn.q_proj: heads 6 is not divisible by 4"}},
};
#define N_MODEL_BAD (sizeof(k_model_bad) / sizeof(k_model_bad[0]))

static rf_status_t run_model_case(const char *config, const char *body, int world, rf_topology_t *t,
                                  rf_model_config_t *cfg_p, rf_err_t *err)
{
    char yaml[2048], cpath[512];
    snprintf(cpath, sizeof(cpath), "%s/%s/config.json", REFIT_TEST_DATA, config);
    /* body lines starting with two spaces continue the model map */
    snprintf(yaml, sizeof(yaml), "model:\n  config: %s\n%s", cpath, body);
    rf_err_clear(err);
    rf_status_t st = rf_topology_parse(yaml, strlen(yaml), "m.yaml", t, err);
    ck_assert_msg(st == RF_OK, "%s", err->msg);
    rf_model_config_t raw = load_cfg(t->model_config_path);
    st = rf_model_check_topology(t, &raw, world, cfg_p, err);
    rf_model_config_free(&raw);
    return st;
}

START_TEST(test_model_rules)
{
    const model_case_t *c = &k_model_bad[_i];
    rf_topology_t t;
    rf_model_config_t cfg;
    rf_err_t err;
    rf_status_t st = run_model_case(c->config, c->body, c->world, &t, &cfg, &err);
    if (c->want[0] == NULL) {
        ck_assert_msg(st == RF_OK, "case %d: %s", _i, err.msg);
        rf_model_config_free(&cfg);
        return;
    }
    ck_assert_msg(st == RF_ERR_TOPOLOGY, "case %d accepted (%d): %s", _i, st, c->body);
    for (int k = 0; k < 3 && c->want[k]; k++)
        ck_assert_msg(strstr(err.msg, c->want[k]) != NULL, "case %d: '%s' not in '%s'", _i,
                      c->want[k], err.msg);
}
END_TEST

START_TEST(test_overrides_applied)
{
    rf_topology_t t;
    rf_model_config_t cfg;
    rf_err_t err;
    ck_assert_int_eq(run_model_case("qwen3-moe-tiny",
                                    "  overrides: { num_hidden_layers: 1, num_experts: 4, "
                                    "vocab_size: 500 }\ntrainer: { ep: 2, dp: 2 }\n"
                                    "rollout: { tp: 2, ep: 2 }\n",
                                    4, &t, &cfg, &err),
                     RF_OK);
    ck_assert_int_eq(cfg.num_hidden_layers, 1);
    ck_assert_int_eq(cfg.orig_num_hidden_layers, 2);
    ck_assert_int_eq(cfg.num_experts, 4);
    ck_assert_int_eq(cfg.orig_num_experts, 8);
    ck_assert_int_eq(cfg.vocab_size, 500);
    ck_assert_int_eq(cfg.orig_vocab_size, 512);
    ck_assert_int_eq(rf_model_bind_topology(&t, &cfg, &err), RF_OK);
    ck_assert_int_eq(t.model_layers, 1);
    rf_model_config_free(&cfg);

    /* quantization taken from quantization_config when the file omits it */
    ck_assert_int_eq(run_model_case("qwen3-fp8-tiny", "", 2, &t, &cfg, &err), RF_OK);
    ck_assert(!t.quantization_set);
    uint64_t before = rf_topology_hash(&t);
    ck_assert_int_eq(rf_model_bind_topology(&t, &cfg, &err), RF_OK);
    ck_assert_int_eq(t.quantization, RF_QUANT_FP8_BLOCK);
    ck_assert_uint_ne(before, rf_topology_hash(&t));
    rf_model_config_free(&cfg);
    /* and agreeing with it when both are given */
    ck_assert_int_eq(
        run_model_case("qwen3-fp8-tiny", "  quantization: fp8-block\n", 2, &t, &cfg, &err), RF_OK);
    rf_model_config_free(&cfg);
    /* KV heads replicated on the rollout: tp 4 > nkv 2, 4 mod 2 == 0 */
    ck_assert_int_eq(run_model_case("qwen3-tiny-tied", "rollout: { tp: 4 }\n", 5, &t, &cfg, &err),
                     RF_OK);
    rf_model_config_free(&cfg);
    /* world size 0 skips the count */
    ck_assert_int_eq(run_model_case("llama-tiny", "", 0, &t, &cfg, &err), RF_OK);
    rf_model_config_free(&cfg);
}
END_TEST

/* ---- hash ------------------------------------------------------------------------------- */

static uint64_t hash_of(const char *yaml)
{
    rf_topology_t t = parse_ok(yaml, "dir/h.yaml");
    return rf_topology_hash(&t);
}

START_TEST(test_hash)
{
    const char *block = "model:\n  config: a.json\n  overrides:\n    num_hidden_layers: 2\n"
                        "trainer:\n  tp: 2\n  pp: 2\nrollout:\n  engines: 2\n"
                        "transfer:\n  chunk_bytes: 1MiB\n";
    const char *flow = "# a comment\nrollout: { engines: 2 }   # engines\n"
                       "trainer: {pp: 2, tp: 2, cp: 1}\n"
                       "transfer: { chunk_bytes: 1048576, min_bandwidth: 100MB/s }\n"
                       "model: { overrides: { num_hidden_layers: 2 }, config: \"a.json\" }\n"
                       "name: h\n";
    uint64_t h = hash_of(block);
    ck_assert_uint_eq(h, hash_of(flow));
    ck_assert_uint_ne(h, 0);
    /* the resolved path is not hashed, the file name as written is */
    rf_topology_t a = parse_ok(block, "x/h.yaml"), b = parse_ok(block, "/y/z/h.yaml");
    ck_assert_str_ne(a.model_config_path, b.model_config_path);
    ck_assert_uint_eq(rf_topology_hash(&a), rf_topology_hash(&b));

    const char *changed[] = {
        "model:\n  config: b.json\n  overrides:\n    num_hidden_layers: 2\ntrainer:\n  tp: 2\n"
        "  pp: 2\nrollout:\n  engines: 2\ntransfer:\n  chunk_bytes: 1MiB\n",
        "model:\n  config: a.json\n  overrides:\n    num_hidden_layers: 1\ntrainer:\n  tp: 2\n"
        "  pp: 2\nrollout:\n  engines: 2\ntransfer:\n  chunk_bytes: 1MiB\n",
        "model:\n  config: a.json\ntrainer:\n  tp: 2\n"
        "  pp: 2\nrollout:\n  engines: 2\ntransfer:\n  chunk_bytes: 1MiB\n",
        "name: other\n"
        "model:\n  config: a.json\n  overrides:\n    num_hidden_layers: 2\ntrainer:\n  tp: 2\n"
        "  pp: 2\nrollout:\n  engines: 2\ntransfer:\n  chunk_bytes: 1MiB\n",
    };
    for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++)
        ck_assert_msg(hash_of(changed[i]) != h, "change %zu not hashed", i);

    /* one value at a time, from the flow form */
    const char *tweaks[] = {
        "trainer: { tp: 1 }\n",
        "trainer: { cp: 2 }\n",
        "trainer: { dp: 2 }\n",
        "trainer: { etp: 1 }\n",
        "trainer: { pp_layers: [1, 1] }\n",
        "trainer: { gpus: [0] }\n",
        "rollout: { tp: 2 }\n",
        "rollout: { dp: 2 }\n",
        "rollout: { engines: 3 }\n",
        "rollout: { expert_placement: round_robin }\n",
        "rollout: { backend: marlin }\n",
        "rollout: { gpus: [1] }\n",
        "colocated: true\n",
        "transfer: { transport: nccl }\n",
        "transfer: { mode: p2p }\n",
        "transfer: { chunk_bytes: 2MiB }\n",
        "transfer: { buffers: 3 }\n",
        "transfer: { timeout_s: 301 }\n",
        "transfer: { integrity: false }\n",
        "transfer: { min_bandwidth: 1GB/s }\n",
        "transfer: { slack_s: 11 }\n",
        "model: { quantization: none }\n",
        "model: { quantization: wna16, group_size: 128 }\n",
    };
    rf_topology_t base = parse_ok(block, "dir/h.yaml");
    for (size_t i = 0; i < sizeof(tweaks) / sizeof(tweaks[0]); i++) {
        /* the base file with the tweaked section merged in (a key given twice is an error,
         * so tp, engines and chunk_bytes replace the base value instead) */
        rf_topology_t t;
        char yaml[1024];
        /* merge: the base flow text with the tweaked section replaced */
        const char *sect = tweaks[i];
        if (strncmp(sect, "trainer:", 8) == 0) {
            const char *v = strchr(sect, '{') + 1;
            snprintf(yaml, sizeof(yaml),
                     "model: { config: a.json, overrides: { num_hidden_layers: 2 } }\n"
                     "trainer: { tp: 2, pp: 2, %s\nrollout: { engines: 2 }\n"
                     "transfer: { chunk_bytes: 1MiB }\n",
                     v);
            /* a duplicate tp/pp is an error: replace instead */
            if (strstr(v, "tp:") == v + 1 || strncmp(v, " tp:", 4) == 0)
                snprintf(yaml, sizeof(yaml),
                         "model: { config: a.json, overrides: { num_hidden_layers: 2 } }\n"
                         "trainer: { pp: 2, %s\nrollout: { engines: 2 }\n"
                         "transfer: { chunk_bytes: 1MiB }\n",
                         v);
        } else if (strncmp(sect, "rollout:", 8) == 0) {
            const char *v = strchr(sect, '{') + 1;
            if (strstr(v, "engines"))
                snprintf(yaml, sizeof(yaml),
                         "model: { config: a.json, overrides: { num_hidden_layers: 2 } }\n"
                         "trainer: { tp: 2, pp: 2 }\nrollout: {%s"
                         "transfer: { chunk_bytes: 1MiB }\n",
                         v);
            else
                snprintf(yaml, sizeof(yaml),
                         "model: { config: a.json, overrides: { num_hidden_layers: 2 } }\n"
                         "trainer: { tp: 2, pp: 2 }\nrollout: { engines: 2, %s"
                         "transfer: { chunk_bytes: 1MiB }\n",
                         v);
        } else if (strncmp(sect, "transfer:", 9) == 0) {
            const char *v = strchr(sect, '{') + 1;
            if (strstr(v, "chunk_bytes"))
                snprintf(yaml, sizeof(yaml),
                         "model: { config: a.json, overrides: { num_hidden_layers: 2 } }\n"
                         "trainer: { tp: 2, pp: 2 }\nrollout: { engines: 2 }\ntransfer: {%s",
                         v);
            else
                snprintf(yaml, sizeof(yaml),
                         "model: { config: a.json, overrides: { num_hidden_layers: 2 } }\n"
                         "trainer: { tp: 2, pp: 2 }\nrollout: { engines: 2 }\n"
                         "transfer: { chunk_bytes: 1MiB, %s",
                         v);
        } else if (strncmp(sect, "model:", 6) == 0) {
            const char *v = strchr(sect, '{') + 1;
            snprintf(yaml, sizeof(yaml),
                     "model: { config: a.json, overrides: { num_hidden_layers: 2 }, %s"
                     "trainer: { tp: 2, pp: 2 }\nrollout: { engines: 2 }\n"
                     "transfer: { chunk_bytes: 1MiB }\n",
                     v);
        } else { /* colocated: needs T == R and an mpi cpu topology: 4 == 2 x 2 */
            snprintf(yaml, sizeof(yaml),
                     "model: { config: a.json, overrides: { num_hidden_layers: 2 } }\n"
                     "trainer: { tp: 2, pp: 2 }\nrollout: { engines: 2, tp: 2 }\n"
                     "transfer: { chunk_bytes: 1MiB }\n%s",
                     sect);
            rf_topology_t c1 = parse_ok(yaml, "dir/h.yaml");
            *strstr(yaml, "colocated") = '\0';
            rf_topology_t c0 = parse_ok(yaml, "dir/h.yaml");
            ck_assert_uint_ne(rf_topology_hash(&c1), rf_topology_hash(&c0));
            continue;
        }
        t = parse_ok(yaml, "dir/h.yaml");
        ck_assert_msg(rf_topology_hash(&t) != h, "tweak '%s' not hashed:\n%s", tweaks[i], yaml);
    }

    /* the canonical text: every key, snprintf-like length */
    char small[8];
    size_t need = rf_topology_canonical(&base, small, sizeof(small));
    ck_assert_uint_gt(need, 200);
    char *full = malloc(need + 1);
    ck_assert_uint_eq(rf_topology_canonical(&base, full, need + 1), need);
    ck_assert_uint_eq(strlen(full), need);
    ck_assert_ptr_nonnull(strstr(full, "model.config: a.json\n"));
    ck_assert_ptr_nonnull(strstr(full, "transfer.chunk_bytes: 1048576\n"));
    ck_assert_ptr_nonnull(strstr(full, "model.overrides.num_hidden_layers: 2\n"));
    ck_assert_ptr_null(strstr(full, "dir/"));
    ck_assert_ptr_nonnull(strstr(full, "trainer.layout: megatron\n"));
    ck_assert_ptr_nonnull(strstr(full, "rollout.layout: vllm\n"));
    /* transfer.p2p_inflight only when set: the hashes of topologies without it stay */
    ck_assert_ptr_null(strstr(full, "p2p_inflight"));
    free(full);
    /* and only under p2p: broadcast has no window, so setting it there is no new topology */
    const char *m0 = "model: { config: a.json }\ntrainer: { dp: 2 }\n";
    const char *bw = "model: { config: a.json }\ntrainer: { dp: 2 }\ntransfer: { p2p_inflight: 2 }\n";
    const char *p0 = "model: { config: a.json }\ntrainer: { dp: 2 }\ntransfer: { mode: p2p }\n";
    const char *pw = "model: { config: a.json }\ntrainer: { dp: 2 }\n"
                     "transfer: { mode: p2p, p2p_inflight: 2 }\n";
    ck_assert_uint_eq(hash_of(m0), hash_of(bw));
    ck_assert_uint_ne(hash_of(p0), hash_of(pw));
    ck_assert_uint_ne(hash_of(m0), hash_of(p0));

    /* the layouts: hashed, spelled out (the defaults and their explicit form agree) */
    const char *dp2 = "model: { config: a.json }\ntrainer: { dp: 2 }\n";
    uint64_t mg = hash_of(dp2);
    ck_assert_uint_eq(mg, hash_of("model: { config: a.json }\ntrainer: { dp: 2, layout: "
                                  "megatron }\nrollout: { layout: vllm }\n"));
    ck_assert_uint_ne(mg, hash_of("model: { config: a.json }\ntrainer: { dp: 2, layout: fsdp }\n"));
    rf_topology_t fs = parse_ok("model: { config: a.json }\ntrainer: { dp: 2, pp: 2, layout: "
                                "fsdp }\n",
                                "dir/h.yaml");
    ck_assert_int_eq(fs.t_layout, RF_TRAINER_LAYOUT_FSDP);
    full = malloc(rf_topology_canonical(&fs, NULL, 0) + 1);
    rf_topology_canonical(&fs, full, rf_topology_canonical(&fs, NULL, 0) + 1);
    ck_assert_ptr_nonnull(strstr(full, "trainer.layout: fsdp\n"));
    free(full);
    /* rollout.layout hf parses, is spelled out and hashed */
    rf_topology_t hf = parse_ok("model: { config: a.json }\nrollout: { layout: hf }\n", "dir/h.yaml");
    ck_assert_int_eq(hf.r_layout, RF_ROLLOUT_LAYOUT_HF);
    full = malloc(rf_topology_canonical(&hf, NULL, 0) + 1);
    rf_topology_canonical(&hf, full, rf_topology_canonical(&hf, NULL, 0) + 1);
    ck_assert_ptr_nonnull(strstr(full, "rollout.layout: hf\n"));
    free(full);
    ck_assert_uint_ne(hash_of("model: { config: a.json }\n"),
                      hash_of("model: { config: a.json }\nrollout: { layout: hf }\n"));
    /* model.mtp: spelled out and hashed only when true (every other topology's hash stays) */
    rf_topology_t mt = parse_ok("model: { config: a.json, mtp: true }\n", "dir/m.yaml");
    ck_assert(mt.mtp);
    full = malloc(rf_topology_canonical(&mt, NULL, 0) + 1);
    rf_topology_canonical(&mt, full, rf_topology_canonical(&mt, NULL, 0) + 1);
    ck_assert_ptr_nonnull(strstr(full, "model.mtp: true\n"));
    free(full);
    full = malloc(rf_topology_canonical(&hf, NULL, 0) + 1);
    rf_topology_canonical(&hf, full, rf_topology_canonical(&hf, NULL, 0) + 1);
    ck_assert_ptr_null(strstr(full, "model.mtp"));
    free(full);
    ck_assert_uint_eq(hash_of("model: { config: a.json }\n"),
                      hash_of("model: { config: a.json, mtp: false }\n"));
    ck_assert_uint_ne(hash_of("model: { config: a.json }\n"),
                      hash_of("model: { config: a.json, mtp: true }\n"));
}
END_TEST

/* ---- placement -------------------------------------------------------------------------- */

START_TEST(test_placement_dense)
{
    /* TP2 CP1 PP2 DP2 -> 2 engines x TP2 x DP1 */
    rf_topology_t t = parse_ok("model: { config: c.json }\n"
                               "trainer: { tp: 2, cp: 1, pp: 2, dp: 2 }\n"
                               "rollout: { engines: 2, tp: 2 }\n",
                               "p.yaml");
    rf_rank_info_t in;
    /* w = t + TP (c + CP (d + DP p)), hand-computed */
    static const int want[8][4] = {/* t c d p */
                                   {0, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 1, 0}, {1, 0, 1, 0},
                                   {0, 0, 0, 1}, {1, 0, 0, 1}, {0, 0, 1, 1}, {1, 0, 1, 1}};
    ck_assert_int_eq(rf_topology_trainer_size(&t), 8);
    for (int w = 0; w < 8; w++) {
        ck_assert_int_eq(rf_topology_rank_info(&t, w, &in), RF_OK);
        ck_assert_int_eq(in.role, RF_ROLE_TRAINER);
        ck_assert_int_eq(in.world_rank, w);
        ck_assert_int_eq(in.t, want[w][0]);
        ck_assert_int_eq(in.c, want[w][1]);
        ck_assert_int_eq(in.d, want[w][2]);
        ck_assert_int_eq(in.p, want[w][3]);
        /* etp = tp 2, ep 1, EDP = 8 / (2 1 2) = 2: u = t, q = 0, x = d */
        ck_assert_int_eq(in.u, want[w][0]);
        ck_assert_int_eq(in.q, 0);
        ck_assert_int_eq(in.x, want[w][2]);
        ck_assert_int_eq(
            rf_topology_trainer_rank(&t, want[w][0], want[w][1], want[w][2], want[w][3]), w);
    }
    /* rollout: ranks 8..11 */
    static const int rwant[4][3] = {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}};
    for (int j = 0; j < 4; j++) {
        ck_assert_int_eq(rf_topology_rank_info(&t, 8 + j, &in), RF_OK);
        ck_assert_int_eq(in.role, RF_ROLE_ROLLOUT);
        ck_assert_int_eq(in.engine, rwant[j][0]);
        ck_assert_int_eq(in.rc.tp, 2);
        ck_assert_int_eq(in.rc.tp_rank, rwant[j][1]);
        ck_assert_int_eq(in.rc.dp_rank, rwant[j][2]);
        ck_assert_int_eq(in.rc.ep, 1);
        ck_assert_int_eq(in.rc.ep_rank, 0);
        ck_assert_int_eq(rf_topology_rollout_rank(&t, rwant[j][0], rwant[j][1], rwant[j][2]),
                         8 + j);
    }
    ck_assert_int_eq(rf_topology_rank_info(&t, 12, &in), RF_ERR_INVALID);
    ck_assert_int_eq(rf_topology_rank_info(&t, -1, &in), RF_ERR_INVALID);
    /* even split of 6 layers over 2 stages without binding */
    ck_assert_int_eq(rf_topology_layer_stage(&t, 2, 6), 0);
    ck_assert_int_eq(rf_topology_layer_stage(&t, 3, 6), 1);
    ck_assert_int_eq(rf_topology_layer_stage(&t, 6, 6), 1);
}
END_TEST

START_TEST(test_placement_experts)
{
    /* trainer TP2 DP2 with etp 1, ep 2 (T 4, EDP = 4 / (1 2 1) = 2);
     * rollout 2 engines x TP2 x DP2 with ep = 4, round robin */
    rf_topology_t t = parse_ok("model: { config: c.json }\n"
                               "trainer: { tp: 2, dp: 2, etp: 1, ep: 2 }\n"
                               "rollout: { engines: 2, tp: 2, dp: 2, ep: 4, "
                               "expert_placement: round_robin }\n",
                               "e.yaml");
    rf_rank_info_t in;
    /* w = u + ETP (q + EP (x + EDP p)) with ETP 1: q = w mod 2, x = w / 2 */
    static const int want[4][3] = {/* u q x */ {0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}};
    for (int w = 0; w < 4; w++) {
        ck_assert_int_eq(rf_topology_rank_info(&t, w, &in), RF_OK);
        ck_assert_int_eq(in.u, want[w][0]);
        ck_assert_int_eq(in.q, want[w][1]);
        ck_assert_int_eq(in.x, want[w][2]);
        ck_assert_int_eq(in.p, 0);
        ck_assert_int_eq(in.t, w % 2);
        ck_assert_int_eq(in.d, w / 2);
    }
    ck_assert_int_eq(rf_topology_rollout_size(&t), 8);
    /* j = w - 4; e = j / 4; l = j mod 4; tp_rank = l mod 2; dp_rank = l / 2;
     * ep_rank = dp_rank 2 + tp_rank */
    static const int rw[8][4] = {/* e tp dp ep */
                                 {0, 0, 0, 0}, {0, 1, 0, 1}, {0, 0, 1, 2}, {0, 1, 1, 3},
                                 {1, 0, 0, 0}, {1, 1, 0, 1}, {1, 0, 1, 2}, {1, 1, 1, 3}};
    for (int j = 0; j < 8; j++) {
        ck_assert_int_eq(rf_topology_rank_info(&t, 4 + j, &in), RF_OK);
        ck_assert_int_eq(in.role, RF_ROLE_ROLLOUT);
        ck_assert_int_eq(in.engine, rw[j][0]);
        ck_assert_int_eq(in.rc.tp_rank, rw[j][1]);
        ck_assert_int_eq(in.rc.dp_rank, rw[j][2]);
        ck_assert_int_eq(in.rc.ep_rank, rw[j][3]);
        ck_assert_int_eq(in.rc.ep, 4);
        ck_assert_int_eq(in.rc.dp, 2);
        ck_assert_int_eq(in.rc.placement, RF_PLACE_ROUND_ROBIN);
        ck_assert_int_eq(rf_topology_rollout_rank(&t, rw[j][0], rw[j][1], rw[j][2]), 4 + j);
    }
    /* EP grid with pp: T = 2 x 2 (tp 2, pp 2), etp 1, ep 2 -> EDP 1; w = u + 1 (q + 2 (x + p)) */
    t = parse_ok("model: { config: c.json }\ntrainer: { tp: 2, pp: 2, etp: 1, ep: 2 }\n", "e.yaml");
    ck_assert_int_eq(rf_topology_rank_info(&t, 3, &in), RF_OK);
    ck_assert_int_eq(in.q, 1);
    ck_assert_int_eq(in.x, 0);
    ck_assert_int_eq(in.p, 1);
    ck_assert_int_eq(in.t, 1);
}
END_TEST

static rf_rank_record_t rec(const rf_topology_t *t, int w, const char *host, int leader, int li,
                            int dev)
{
    rf_rank_record_t r;
    memset(&r, 0, sizeof(r));
    rf_topology_rank_info(t, w, &r.info);
    snprintf(r.host, sizeof(r.host), "%s", host);
    r.node_leader = leader;
    r.local_index = li;
    r.device = dev;
    if (dev >= 0)
        snprintf(r.device_id, sizeof(r.device_id), "gpu%d", dev);
    else
        snprintf(r.device_id, sizeof(r.device_id), "host");
    return r;
}

START_TEST(test_placement_resolve)
{
    rf_placement_t pl;
    rf_err_t err;
    /* 2 trainers on node a (gpus 0, 1), 2 rollout on node b (gpus 0, 1): fine */
    rf_topology_t t = parse_ok("model: { config: c.json }\ntrainer: { tp: 2, gpus: [0, 1] }\n"
                               "rollout: { engines: 2, gpus: [0, 1] }\n",
                               "g.yaml");
    rf_rank_record_t r[4] = {rec(&t, 0, "a", 0, 0, 0), rec(&t, 1, "a", 0, 1, 1),
                             rec(&t, 2, "b", 2, 0, 0), rec(&t, 3, "b", 2, 1, 1)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&t, r, 4, 3, &pl, &err), RF_OK);
    ck_assert_int_eq(pl.node, 1);
    ck_assert_int_eq(pl.nnodes, 2);
    ck_assert_int_eq(pl.local_index, 1);
    ck_assert_int_eq(pl.device, 1);
    ck_assert_str_eq(pl.device_id, "gpu1");
    ck_assert_int_eq(pl.pair_rank, -1);
    ck_assert_int_eq(pl.info.engine, 1);

    /* all on one node: rollout ranks get trainer's gpus 0, 1 -> shared, not colocated */
    rf_rank_record_t s[4] = {rec(&t, 0, "a", 0, 0, 0), rec(&t, 1, "a", 0, 1, 1),
                             rec(&t, 2, "a", 0, 0, 0), rec(&t, 3, "a", 0, 1, 1)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&t, s, 4, 0, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(
        strstr(err.msg, "ranks 0 (trainer) and 2 (rollout) share gpu0 on host a"));
    ck_assert_ptr_nonnull(strstr(err.msg, "not colocated"));

    /* three trainers on a node whose trainer.gpus lists two */
    rf_topology_t t3 = parse_ok("model: { config: c.json }\ntrainer: { dp: 3, gpus: [0, 1] }\n"
                                "rollout: { gpus: [2] }\n",
                                "g.yaml");
    rf_rank_record_t u[4] = {rec(&t3, 0, "n1", 0, 0, 0), rec(&t3, 1, "n1", 0, 1, 1),
                             rec(&t3, 2, "n1", 0, 2, -1), rec(&t3, 3, "n1", 0, 0, 2)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&t3, u, 4, 1, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(strstr(err.msg, "rank 2 on host n1"));
    ck_assert_ptr_nonnull(strstr(err.msg, "trainer.gpus lists 2"));

    /* wrong count */
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&t3, u, 3, 0, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(strstr(err.msg, "world size 3 != trainer 3 + rollout 1 ranks"));

    /* coordinates that disagree (another topology on that rank) */
    u[2] = rec(&t3, 2, "n1", 0, 2, -1);
    u[2].info.d = 0;
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&t3, u, 4, 0, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(strstr(err.msg, "rank 2 on host n1: coordinates disagree"));

    /* colocated on gpus via ipc: trainer i and rollout i share gpu i */
    rf_topology_t c = parse_ok("model: { config: c.json }\ncolocated: true\n"
                               "trainer: { tp: 2, gpus: [0, 1] }\n"
                               "rollout: { tp: 2, gpus: [0, 1] }\ntransfer: { transport: ipc }\n",
                               "c.yaml");
    rf_rank_record_t v[4] = {rec(&c, 0, "a", 0, 0, 0), rec(&c, 1, "a", 0, 1, 1),
                             rec(&c, 2, "a", 0, 0, 0), rec(&c, 3, "a", 0, 1, 1)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&c, v, 4, 1, &pl, &err), RF_OK);
    ck_assert_int_eq(pl.pair_rank, 3);
    ck_assert_int_eq(rf_placement_resolve(&c, v, 4, 2, &pl, &err), RF_OK);
    ck_assert_int_eq(pl.pair_rank, 0);
    /* colocated, but the rollout ranks landed on another node: no pair */
    v[2] = rec(&c, 2, "b", 2, 0, 0);
    v[3] = rec(&c, 3, "b", 2, 1, 1);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&c, v, 4, 0, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(
        strstr(err.msg, "colocated: rank 0 (trainer 0 on host a) has no rollout"));

    /* CPU colocated over mpi: pairs by (node, index) with devices "host" */
    rf_topology_t h = parse_ok("model: { config: c.json }\ncolocated: true\n", "h.yaml");
    rf_rank_record_t x[2] = {rec(&h, 0, "a", 0, 0, -1), rec(&h, 1, "a", 0, 0, -1)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&h, x, 2, 0, &pl, &err), RF_OK);
    ck_assert_int_eq(pl.pair_rank, 1);
    ck_assert_int_eq(pl.device, -1);
    ck_assert_str_eq(pl.device_id, "host");
}
END_TEST

/* transport nccl: the communicators of DESIGN.md section 9, and the placement refusal of two
 * ranks of one communicator on one GPU (CPU-testable: no CUDA, no NCCL) */
START_TEST(test_nccl_layout)
{
    rf_err_t err;
    rf_nccl_layout_t l;
    char what[160];
    /* broadcast, tp2 pp2 -> 1 engine tp2: stage p = its sender (t0 c0 d0 p) + rollout 4, 5 */
    rf_topology_t b = parse_ok("model: { config: c.json }\ntrainer: { tp: 2, pp: 2 }\n"
                               "rollout: { tp: 2 }\ntransfer: { transport: nccl }\n",
                               "b.yaml");
    rf_err_clear(&err);
    ck_assert_int_eq(rf_nccl_layout_build(&b, &l, &err), RF_OK);
    ck_assert_int_eq(l.p2p, 0);
    ck_assert_int_eq(l.n, 4); /* 2 broadcast + 2 trainer-only gather communicators */
    for (int p = 0; p < 2; p++) {
        ck_assert_int_eq(l.comms[p].stage, p);
        ck_assert_int_eq(l.comms[p].gather, 0);
        /* gather p: the stage sender as rank 0, then the stage's other trainer rank */
        ck_assert_int_eq(l.comms[2 + p].stage, p);
        ck_assert_int_eq(l.comms[2 + p].gather, 1);
        ck_assert_int_eq(l.comms[2 + p].n, 2);
        ck_assert_int_eq(l.comms[2 + p].ranks[0], rf_topology_trainer_rank(&b, 0, 0, 0, p));
        ck_assert_int_eq(l.comms[2 + p].ranks[1], rf_topology_trainer_rank(&b, 1, 0, 0, p));
        ck_assert_int_eq(l.comms[p].n, 3);
        ck_assert_int_eq(l.comms[p].ranks[0], rf_topology_trainer_rank(&b, 0, 0, 0, p));
        ck_assert_int_eq(l.comms[p].ranks[1], 4);
        ck_assert_int_eq(l.comms[p].ranks[2], 5);
    }
    ck_assert_int_eq(rf_nccl_comm_rank(&l.comms[1], 2), 0);
    ck_assert_int_eq(rf_nccl_comm_rank(&l.comms[1], 5), 2);
    ck_assert_int_eq(rf_nccl_comm_rank(&l.comms[1], 0), -1);
    ck_assert_int_eq(rf_nccl_layout_find(&l, 0, 5), 0);
    ck_assert_int_eq(rf_nccl_layout_find(&l, 2, 4), 1);
    ck_assert_int_eq(rf_nccl_layout_find(&l, 4, 5), 0);
    ck_assert_int_eq(rf_nccl_layout_find(&l, 1, 4), -1); /* not a stage sender */
    ck_assert_int_eq(rf_nccl_layout_find(&l, 0, 2), -1); /* two stages' senders */
    ck_assert_int_eq(rf_nccl_layout_find(&l, 0, 1), 2);  /* stage 0's gather */
    ck_assert_int_eq(rf_nccl_layout_find(&l, 3, 2), 3);
    ck_assert_int_eq(rf_nccl_layout_find(&l, 1, 3), -1); /* contributors of two stages */
    rf_nccl_layout_describe(&l, 1, what, sizeof(what));
    ck_assert_str_eq(what, "stage 1 broadcast communicator (world ranks 2, 4, 5)");
    rf_nccl_layout_describe(&l, 3, what, sizeof(what));
    ck_assert_str_eq(what, "stage 1 gather communicator (world ranks 2, 3)");
    rf_nccl_layout_free(&l);
    ck_assert_int_eq(l.n, 0);

    /* one trainer rank per stage: nothing to gather, no gather communicator */
    rf_topology_t o = parse_ok("model: { config: c.json }\ntrainer: { pp: 2 }\n"
                               "rollout: { tp: 2 }\ntransfer: { transport: nccl }\n",
                               "o.yaml");
    ck_assert_int_eq(rf_nccl_layout_build(&o, &l, &err), RF_OK);
    ck_assert_int_eq(l.n, 2);
    rf_nccl_layout_free(&l);

    /* p2p: stage p = every trainer rank of stage p + every rollout rank */
    rf_topology_t q = parse_ok("model: { config: c.json }\ntrainer: { tp: 2, pp: 2 }\n"
                               "rollout: { tp: 2 }\ntransfer: { transport: nccl, mode: p2p }\n",
                               "q.yaml");
    ck_assert_int_eq(rf_nccl_layout_build(&q, &l, &err), RF_OK);
    ck_assert_int_eq(l.p2p, 1);
    ck_assert_int_eq(l.n, 2);
    ck_assert_int_eq(l.comms[0].n, 4);
    ck_assert_int_eq(l.comms[0].ranks[0], 0);
    ck_assert_int_eq(l.comms[0].ranks[1], 1);
    ck_assert_int_eq(l.comms[0].ranks[2], 4);
    ck_assert_int_eq(l.comms[1].ranks[0], 2);
    ck_assert_int_eq(l.comms[1].ranks[1], 3);
    ck_assert_int_eq(rf_nccl_layout_find(&l, 0, 1), 0);
    ck_assert_int_eq(rf_nccl_layout_find(&l, 3, 5), 1);
    ck_assert_int_eq(rf_nccl_layout_find(&l, 1, 2), -1);
    rf_nccl_layout_describe(&l, 0, what, sizeof(what));
    ck_assert_str_eq(what, "stage 0 p2p communicator (world ranks 0, 1, 4, 5)");
    rf_nccl_layout_free(&l);
}
END_TEST

START_TEST(test_nccl_placement)
{
    rf_placement_t pl;
    rf_err_t err;
    /* one node, each rank its own GPU: fine */
    rf_topology_t t = parse_ok("model: { config: c.json }\ntrainer: { tp: 1, gpus: [0] }\n"
                               "rollout: { gpus: [1] }\ntransfer: { transport: nccl }\n",
                               "n.yaml");
    rf_rank_record_t r[2] = {rec(&t, 0, "a", 0, 0, 0), rec(&t, 1, "a", 0, 0, 1)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&t, r, 2, 1, &pl, &err), RF_OK);
    ck_assert_int_eq(pl.device, 1);
    /* colocated nccl parses (so that placement can name the ranks) and is refused there */
    rf_topology_t c = parse_ok("model: { config: c.json }\ncolocated: true\n"
                               "trainer: { gpus: [0] }\nrollout: { gpus: [0] }\n"
                               "transfer: { transport: nccl }\n",
                               "c.yaml");
    rf_rank_record_t v[2] = {rec(&c, 0, "a", 0, 0, 0), rec(&c, 1, "a", 0, 0, 0)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&c, v, 2, 0, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_msg(strstr(err.msg, "c.yaml: transport nccl: ranks 0 (trainer) and 1 (rollout) "
                                  "would both use GPU 0 on host a in the stage 0 broadcast "
                                  "communicator (world ranks 0, 1); NCCL refuses two ranks of "
                                  "one communicator on one GPU") != NULL,
                  "%s", err.msg);
    /* the same GPU number on two nodes is two GPUs */
    v[1] = rec(&c, 1, "b", 1, 0, 0);
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&c, v, 2, 1, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(strstr(err.msg, "with the same index on its node"));
    /* broadcast: a non-sender trainer is in no communicator with the rollout ranks, so
     * sharing with one is the general "not colocated" refusal, not the NCCL one */
    rf_topology_t d = parse_ok("model: { config: c.json }\ntrainer: { tp: 2, gpus: [0, 1] }\n"
                               "rollout: { gpus: [1] }\ntransfer: { transport: nccl }\n",
                               "d.yaml");
    rf_rank_record_t u[3] = {rec(&d, 0, "a", 0, 0, 0), rec(&d, 1, "a", 0, 1, 1),
                             rec(&d, 2, "a", 0, 0, 1)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&d, u, 3, 0, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(strstr(err.msg, "ranks 1 (trainer) and 2 (rollout) share gpu1"));
    ck_assert_ptr_null(strstr(err.msg, "transport nccl"));
    /* ... but in p2p every trainer rank of the stage is in the communicator */
    rf_topology_t e = parse_ok("model: { config: c.json }\ntrainer: { tp: 2, gpus: [0, 1] }\n"
                               "rollout: { gpus: [1] }\n"
                               "transfer: { transport: nccl, mode: p2p }\n",
                               "e.yaml");
    rf_rank_record_t w[3] = {rec(&e, 0, "a", 0, 0, 0), rec(&e, 1, "a", 0, 1, 1),
                             rec(&e, 2, "a", 0, 0, 1)};
    rf_err_clear(&err);
    ck_assert_int_eq(rf_placement_resolve(&e, w, 3, 0, &pl, &err), RF_ERR_TOPOLOGY);
    ck_assert_ptr_nonnull(strstr(err.msg, "transport nccl: ranks 1 (trainer) and 2 (rollout) "
                                          "would both use GPU 1 on host a in the stage 0 p2p "
                                          "communicator (world ranks 0, 1, 2)"));
}
END_TEST

static Suite *topology_suite(void)
{
    Suite *s = suite_create("topology");
    TCase *tc;
#define ADD(name, fn)                                                                              \
    tc = tcase_create(name);                                                                       \
    tcase_set_timeout(tc, 30);                                                                     \
    tcase_add_test(tc, fn);                                                                        \
    suite_add_tcase(s, tc)
#define ADD_LOOP(name, fn, n)                                                                      \
    tc = tcase_create(name);                                                                       \
    tcase_set_timeout(tc, 30);                                                                     \
    tcase_add_loop_test(tc, fn, 0, (int)(n));                                                      \
    suite_add_tcase(s, tc)
    ADD_LOOP("shipped_files", test_shipped_files, N_FILES);
    ADD("all_files_listed", test_all_files_listed);
    ADD("compiled_default", test_compiled_default);
    ADD("defaults", test_defaults);
    ADD("sizes", test_sizes);
    ADD_LOOP("bad_inputs", test_bad_inputs, N_BAD);
    ADD_LOOP("model_rules", test_model_rules, N_MODEL_BAD);
    ADD("overrides_applied", test_overrides_applied);
    ADD("hash", test_hash);
    ADD("placement_dense", test_placement_dense);
    ADD("placement_experts", test_placement_experts);
    ADD("placement_resolve", test_placement_resolve);
    ADD("nccl_layout", test_nccl_layout);
    ADD("nccl_placement", test_nccl_placement);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(topology_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
