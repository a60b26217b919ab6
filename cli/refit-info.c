/*
 * refit-info: what a checkpoint holds, without a job.
 *
 *   refit-info [--json FILE] [--topology FILE] PATH
 *
 * PATH is anything rf_ckpt_open takes (safetensors directory, HDF5 file, directory holding
 * model.h5); opening it runs every check of the reader, so a bad file is refused here exactly
 * as refit-run would refuse it. Prints the format, the tensor count and bytes, a dtype
 * histogram, and the model config the checkpoint carries (HDF5 config attribute, or
 * config.json beside the safetensors files). With --topology, the reload plan counts per
 * rollout rank, as refit-plan prints them (refit-plan is run for that, from the same
 * directory as refit-info). One plain process, no MPI job.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_common.h"
#include "refit/checkpoint.h"
#include "refit/hdf5.h"
#include "refit/model.h"
#include "refit/safetensors.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: refit-info [--json FILE] [--topology FILE] PATH\n"
               "\n"
               "Checks and describes a checkpoint (safetensors directory, HDF5 file, or a\n"
               "directory holding model.h5): format, tensors, bytes, dtypes, the model config\n"
               "it carries; with --topology, the plan counts per rollout rank (refit-plan).\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", required_argument, NULL, 'j'},
                                             {"topology", required_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *json_path = NULL, *topo = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j': json_path = optarg; break;
        case 't': topo = optarg; break;
        case 'h': usage(stdout); return 0;
        case '?':
        case ':': cli_bad_option("refit-info", c, argv); return 2;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 1) {
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    rf_err_t err;
    rf_err_clear(&err);
    rf_ckpt_t *ck = NULL;
    if (rf_ckpt_open(path, &ck, &err) != RF_OK) {
        fprintf(stderr, "refit-info: %s\n", err.msg);
        return 1;
    }
    size_t n = rf_ckpt_count(ck), hist[RF_DTYPE_COUNT] = {0};
    uint64_t bytes = 0, hbytes[RF_DTYPE_COUNT] = {0};
    for (size_t i = 0; i < n; i++) {
        const rf_st_entry_t *e = rf_ckpt_entry(ck, i);
        hist[e->dtype]++;
        hbytes[e->dtype] += e->nbytes;
        bytes += e->nbytes;
    }
    bool h5 = strcmp(rf_ckpt_format(ck), "hdf5") == 0;
    printf("refit-info: %s: %s", path, rf_ckpt_format(ck));
    if (h5)
        printf(" (container %s version %d, HDF5 %s)", RF_H5_FORMAT, RF_H5_FORMAT_VERSION,
               rf_h5_version());
    else
        printf(" (%zu file(s))", rf_ckpt_file_count(ck));
    printf(", %zu tensors, %" PRIu64 " bytes\n", n, bytes);
    json_t *jd = json_object();
    printf("  dtypes    ");
    for (int d = 0; d < RF_DTYPE_COUNT; d++)
        if (hist[d] > 0) {
            printf(" %s %zu (%" PRIu64 " bytes)", rf_dtype_name((rf_dtype_t)d), hist[d],
                   hbytes[d]);
            json_object_set_new(jd, rf_dtype_name((rf_dtype_t)d),
                                json_pack("{s:I, s:I}", "tensors", (json_int_t)hist[d], "bytes",
                                          (json_int_t)hbytes[d]));
        }
    printf("\n");
    /* the model config it carries */
    char *text = rf_ckpt_config(ck) ? strdup(rf_ckpt_config(ck)) : NULL;
    const char *where = "root attribute config";
    char cpath[4096];
    struct stat sb;
    if (text == NULL && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(cpath, sizeof(cpath), "%s/config.json", path);
        text = cli_file_read(cpath, CLI_TEXT_MAX, NULL);
        where = "config.json";
    }
    json_t *jc = json_null();
    int rc = 0;
    if (text == NULL) {
        printf("  config     none stored (refit-run compares nothing)\n");
    } else {
        rf_model_config_t cfg;
        if (rf_model_config_parse(text, strlen(text), where, &cfg, &err) != RF_OK) {
            fprintf(stderr, "refit-info: %s: %s\n", path, err.msg);
            rc = 1;
        } else {
            printf("  config     (%s) %s %s: %lld layers, hidden %lld, heads %lld/%lld, vocab "
                   "%lld, intermediate %lld, experts %lld, tied %s, dtype %s, quantization %s\n",
                   where, cfg.model_type, cfg.architecture, (long long)cfg.num_hidden_layers,
                   (long long)cfg.hidden_size, (long long)cfg.num_attention_heads,
                   (long long)cfg.num_key_value_heads, (long long)cfg.vocab_size,
                   (long long)cfg.intermediate_size, (long long)cfg.num_experts,
                   cfg.tie_word_embeddings ? "yes" : "no", rf_dtype_name(cfg.dtype),
                   rf_quant_name(cfg.quant));
            jc = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:b}", "from", where,
                           "model_type", cfg.model_type, "architecture", cfg.architecture,
                           "num_hidden_layers", (json_int_t)cfg.num_hidden_layers,
                           "hidden_size", (json_int_t)cfg.hidden_size, "vocab_size",
                           (json_int_t)cfg.vocab_size, "num_experts",
                           (json_int_t)cfg.num_experts, "tie_word_embeddings",
                           cfg.tie_word_embeddings);
            rf_model_config_free(&cfg);
        }
        free(text);
    }
    if (json_path != NULL) {
        json_t *root = json_pack("{s:s, s:s, s:I, s:I, s:o, s:o}", "path", path, "format",
                                 rf_ckpt_format(ck), "tensors", (json_int_t)n, "bytes",
                                 (json_int_t)bytes, "dtypes", jd, "config", jc);
        if (json_dump_file(root, json_path, JSON_INDENT(1)) != 0) {
            fprintf(stderr, "refit-info: %s: cannot write\n", json_path);
            rc = 1;
        }
        json_decref(root);
    } else {
        json_decref(jd);
        json_decref(jc);
    }
    rf_ckpt_close(ck);
    if (topo != NULL && rc == 0) {
        /* the plan counts are refit-plan's: run it rather than keep a second copy */
        char self[4096], plan[4200];
        ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (k <= 0)
            return 1;
        self[k] = '\0';
        snprintf(plan, sizeof(plan), "%s/refit-plan", dirname(self));
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execl(plan, "refit-plan", "--topology", topo, (char *)NULL);
            fprintf(stderr, "refit-info: cannot run %s: %s\n", plan, strerror(errno));
            _exit(127);
        }
        int ws = 0;
        if (pid < 0 || waitpid(pid, &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
            rc = 1;
    }
    return rc;
}
