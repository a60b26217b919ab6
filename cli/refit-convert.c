/*
 * refit-convert: safetensors <-> HDF5 checkpoints, bit-exact per tensor, streaming.
 *
 *   refit-convert [--force] [--shard-bytes N] [--buffer-bytes N] IN OUT
 *   refit-convert --generate TOPOLOGY [--step S] [--force] [--shard-bytes N] OUT
 *
 * The output format comes from OUT: a name ending in .h5 or .hdf5 is one HDF5 file
 * (refit/hdf5.h); anything else is a safetensors directory (created if absent) holding
 * model.safetensors, or with --shard-bytes shards of at most N bytes of data plus
 * model.safetensors.index.json. IN is anything rf_ckpt_open takes (a safetensors directory,
 * an HDF5 file or a directory holding model.h5). A config.json in IN's directory (or an HDF5
 * config attribute) travels to OUT. --generate writes the generator's weights at step S
 * (default 0) for the topology's model instead, so large test files need no download.
 *
 * Tensors are copied through one buffer of --buffer-bytes (default 4 MiB; at least one row),
 * so peak memory does not grow with the model; the last line reports it (VmHWM). On a
 * terminal a progress line is kept on stderr. An existing OUT is refused without --force.
 * No MPI job: runs as one plain process.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_common.h"
#include "refit/checkpoint.h"
#include "refit/generator.h"
#include "refit/hdf5.h"
#include "refit/model.h"
#include "refit/safetensors.h"
#include "refit/time.h"
#include "refit/topology.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: refit-convert [--force] [--shard-bytes N] [--buffer-bytes N] IN OUT\n"
            "       refit-convert --generate TOPOLOGY [--step S] [--force] [--shard-bytes N] OUT\n"
            "\n"
            "Converts a checkpoint between safetensors and HDF5, bit-exact per tensor. OUT\n"
            "ending in .h5 or .hdf5 is one HDF5 file; anything else is a safetensors directory\n"
            "(model.safetensors, or shards of at most N data bytes and an index with\n"
            "--shard-bytes). IN: a safetensors directory, an HDF5 file, or a directory holding\n"
            "model.h5. --generate writes the generator's weights for TOPOLOGY's model instead.\n"
            "Streams through one buffer (--buffer-bytes, default 4 MiB); refuses an existing\n"
            "OUT without --force.\n");
}

/* One tensor to write, from a checkpoint or the generator. */
typedef struct item {
    const char *name;
    rf_dtype_t dtype;
    int ndim;
    uint64_t shape[RF_ST_MAX_RANK];
    uint64_t nbytes, rows, row_bytes;
    const rf_st_entry_t *se;  /* from the checkpoint, or NULL */
    const rf_tensor_t *gt;    /* from the generator, or NULL */
} item_t;

typedef struct job {
    rf_ckpt_t *ck;
    uint64_t step;
    char *buf;
    size_t cap;
    bool tty;
    size_t done, total;
    uint64_t bytes;
} job_t;

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a > b && strcmp(s + a - b, suf) == 0;
}

static int die(const char *msg)
{
    fprintf(stderr, "refit-convert: %s\n", msg);
    return 1;
}

/* A bad option value, quoted. */
static int die2(const char *opt, const char *value, const char *why)
{
    fprintf(stderr, "refit-convert: %s '%s': %s\n", opt, value, why);
    return 2;
}

/* Peak resident set (VmHWM) in KiB, 0 if unknown. */
static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmHWM: %ld kB", &v) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return v;
}

static void progress(job_t *j, const item_t *it)
{
    j->done++;
    if (j->tty)
        fprintf(stderr, "\rrefit-convert: [%zu/%zu] %.60s%*s", j->done, j->total, it->name, 10,
                "");
}

/* Rows per buffer load; the buffer grows to one row if a row is larger. */
static rf_status_t rows_per_block(job_t *j, const item_t *it, uint64_t *n, rf_err_t *err)
{
    if (it->row_bytes > j->cap) {
        char *b = realloc(j->buf, (size_t)it->row_bytes);
        if (b == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "%s: a %" PRIu64 "-byte row does not fit memory",
                              it->name, it->row_bytes);
        j->buf = b;
        j->cap = (size_t)it->row_bytes;
    }
    *n = it->row_bytes == 0 ? (it->rows ? it->rows : 1) : j->cap / it->row_bytes;
    return RF_OK;
}

static rf_status_t fill(job_t *j, const item_t *it, uint64_t r0, uint64_t r1, rf_err_t *err)
{
    if (r1 == r0 || it->row_bytes == 0)
        return RF_OK;
    if (it->se != NULL)
        return rf_ckpt_read(j->ck, it->se, r0, r1, 0, it->row_bytes, j->buf,
                            (size_t)it->row_bytes, err);
    uint64_t cols = it->row_bytes / rf_dtype_size(it->dtype);
    rf_status_t st = rf_gen_fill(it->gt, j->step, r0, r1, 0, cols, j->buf, (size_t)it->row_bytes);
    return st == RF_OK ? RF_OK
                       : rf_err_set(err, st, "generator: tensor %s (dtype %s)", it->name,
                                    rf_dtype_name(it->dtype));
}

static rf_status_t write_h5(job_t *j, const char *out, bool force, const char *config,
                            const item_t *items, size_t n, rf_err_t *err)
{
    rf_h5_writer_t *w = NULL;
    RF_CHECK(rf_h5_writer_create(out, config, force, &w, err));
    rf_status_t st = RF_OK;
    for (size_t i = 0; i < n && st == RF_OK; i++) {
        const item_t *it = &items[i];
        uint64_t step = 0;
        st = rf_h5_writer_begin(w, it->name, it->dtype, it->ndim, it->shape, err);
        if (st == RF_OK)
            st = rows_per_block(j, it, &step, err);
        for (uint64_t r = 0; st == RF_OK && r < it->rows; r += step) {
            uint64_t re = r + step < it->rows ? r + step : it->rows;
            st = fill(j, it, r, re, err);
            if (st == RF_OK)
                st = rf_h5_writer_rows(w, r, re, j->buf, err);
        }
        j->bytes += it->nbytes;
        progress(j, it);
    }
    if (st != RF_OK) {
        rf_h5_writer_abort(w);
        return st;
    }
    return rf_h5_writer_finish(w, err);
}

static rf_status_t write_all(int fd, const void *p, size_t len, const char *path, rf_err_t *err)
{
    const char *c = p;
    while (len > 0) {
        ssize_t k = write(fd, c, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return rf_err_set(err, RF_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        c += k;
        len -= (size_t)k;
    }
    return RF_OK;
}

/* One safetensors file of items [a, b): header, then the data streamed. */
static rf_status_t write_st_file(job_t *j, const char *path, const item_t *items, size_t a,
                                 size_t b, rf_err_t *err)
{
    json_t *root = json_object();
    uint64_t pos = 0;
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    for (size_t i = a; i < b; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < items[i].ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)items[i].shape[d]));
        json_object_set_new(root, items[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype",
                                      rf_dtype_name(items[i].dtype), "shape", shape,
                                      "data_offsets", (json_int_t)pos,
                                      (json_int_t)(pos + items[i].nbytes)));
        pos += items[i].nbytes;
    }
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (hdr == NULL)
        return rf_err_set(err, RF_ERR_NOMEM, "%s: cannot serialise the header", path);
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    rf_status_t st = RF_OK;
    if (fd < 0) {
        free(hdr);
        return rf_err_set(err, RF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    st = write_all(fd, lenb, 8, path, err);
    if (st == RF_OK)
        st = write_all(fd, hdr, hl, path, err);
    for (size_t k = hl; st == RF_OK && k < padded; k++)
        st = write_all(fd, " ", 1, path, err);
    free(hdr);
    for (size_t i = a; i < b && st == RF_OK; i++) {
        const item_t *it = &items[i];
        uint64_t step = 0;
        st = rows_per_block(j, it, &step, err);
        for (uint64_t r = 0; st == RF_OK && it->row_bytes > 0 && r < it->rows; r += step) {
            uint64_t re = r + step < it->rows ? r + step : it->rows;
            st = fill(j, it, r, re, err);
            if (st == RF_OK)
                st = write_all(fd, j->buf, (size_t)((re - r) * it->row_bytes), path, err);
        }
        j->bytes += it->nbytes;
        progress(j, it);
    }
    if (close(fd) != 0 && st == RF_OK)
        st = rf_err_set(err, RF_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (st != RF_OK)
        unlink(path);
    return st;
}

static rf_status_t write_text(const char *path, const char *text, rf_err_t *err)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(text, 1, strlen(text), f) != strlen(text) || fclose(f) != 0)
        return rf_err_set(err, RF_ERR_IO, "%s: cannot write", path);
    return RF_OK;
}

static rf_status_t write_st_dir(job_t *j, const char *out, bool force, uint64_t shard_bytes,
                                const char *config, const item_t *items, size_t n, rf_err_t *err)
{
    char path[4096];
    struct stat sb;
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        return rf_err_set(err, RF_ERR_IO, "%s: cannot create the directory: %s", out,
                          strerror(errno));
    snprintf(path, sizeof(path), "%s/%s", out, RF_ST_SINGLE_NAME);
    char ipath[4096];
    snprintf(ipath, sizeof(ipath), "%s/%s", out, RF_ST_INDEX_NAME);
    if (!force && (stat(path, &sb) == 0 || stat(ipath, &sb) == 0))
        return rf_err_set(err, RF_ERR_IO, "%s: already holds a checkpoint (not overwritten)",
                          out);
    if (force) {
        unlink(path);
        unlink(ipath);
    }
    if (shard_bytes == 0) {
        RF_CHECK(write_st_file(j, path, items, 0, n, err));
    } else {
        /* shards in name order, each at most shard_bytes of data (a bigger tensor alone) */
        size_t nshards = 0, *first = malloc((n + 1) * sizeof(size_t));
        if (first == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "out of memory");
        uint64_t cur = 0;
        for (size_t i = 0; i < n; i++) {
            if (i == 0 || cur + items[i].nbytes > shard_bytes) {
                first[nshards++] = i;
                cur = 0;
            }
            cur += items[i].nbytes;
        }
        first[nshards] = n;
        json_t *wm = json_object();
        uint64_t total = 0;
        rf_status_t st = RF_OK;
        for (size_t s = 0; s < nshards && st == RF_OK; s++) {
            char name[64];
            snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, nshards);
            snprintf(path, sizeof(path), "%s/%s", out, name);
            st = write_st_file(j, path, items, first[s], first[s + 1], err);
            for (size_t i = first[s]; i < first[s + 1]; i++) {
                json_object_set_new(wm, items[i].name, json_string(name));
                total += items[i].nbytes;
            }
        }
        free(first);
        if (st == RF_OK) {
            json_t *idx = json_pack("{s:{s:I}, s:o}", "metadata", "total_size",
                                    (json_int_t)total, "weight_map", wm);
            if (json_dump_file(idx, ipath, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
                st = rf_err_set(err, RF_ERR_IO, "%s: cannot write", ipath);
            json_decref(idx);
        } else {
            json_decref(wm);
        }
        RF_CHECK(st);
    }
    if (config != NULL) {
        snprintf(path, sizeof(path), "%s/config.json", out);
        RF_CHECK(write_text(path, config, err));
    }
    return RF_OK;
}

static int parse_bytes(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-')
        return -1;
    uint64_t m = 1;
    if (strcmp(end, "KiB") == 0 || strcmp(end, "K") == 0)
        m = 1ull << 10;
    else if (strcmp(end, "MiB") == 0 || strcmp(end, "M") == 0)
        m = 1ull << 20;
    else if (strcmp(end, "GiB") == 0 || strcmp(end, "G") == 0)
        m = 1ull << 30;
    else if (*end != '\0')
        return -1;
    *v = (uint64_t)x * m;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"force", no_argument, NULL, 'f'},          {"shard-bytes", required_argument, NULL, 's'},
        {"buffer-bytes", required_argument, NULL, 'b'},
        {"generate", required_argument, NULL, 'g'}, {"step", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    bool force = false;
    uint64_t shard = 0, bufsz = 4u << 20, step = 0;
    const char *gen = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'f': force = true; break;
        case 's':
            if (parse_bytes(optarg, &shard) != 0 || shard == 0)
                return die2("--shard-bytes", optarg, "not a positive byte count (N, or N followed by K / KiB, M / MiB or G / GiB)");
            break;
        case 'b':
            if (parse_bytes(optarg, &bufsz) != 0 || bufsz == 0)
                return die2("--buffer-bytes", optarg, "not a positive byte count (N, or N followed by K / KiB, M / MiB or G / GiB)");
            break;
        case 'g': gen = optarg; break;
        case 'S':
            if (parse_bytes(optarg, &step) != 0)
                return die2("--step", optarg, "not a non-negative integer");
            break;
        case 'h': usage(stdout); return 0;
        case '?':
        case ':': cli_bad_option("refit-convert", c, argv); return 2;
        default: usage(stderr); return 2;
        }
    }
    int npos = argc - optind;
    if ((gen == NULL && npos != 2) || (gen != NULL && npos != 1)) {
        usage(stderr);
        return 2;
    }
    const char *in = gen ? NULL : argv[optind], *out = argv[argc - 1];
    bool to_h5 = ends_with(out, ".h5") || ends_with(out, ".hdf5");
    rf_err_t err;
    rf_err_clear(&err);
    job_t j;
    memset(&j, 0, sizeof(j));
    j.step = step;
    j.tty = isatty(2);
    j.cap = (size_t)bufsz;
    j.buf = malloc(j.cap);
    if (j.buf == NULL)
        return die("out of memory for the buffer");
    struct stat sb;
    if (to_h5 && !force && stat(out, &sb) == 0) {
        free(j.buf);
        fprintf(stderr, "refit-convert: %s exists (use --force to overwrite)\n", out);
        return 1;
    }
    item_t *items = NULL;
    size_t n = 0;
    char *config = NULL;
    rf_topology_t topo;
    rf_model_config_t cfg0, cfg;
    rf_inventory_t inv;
    bool mpi = false;
    double t0 = rf_time_now();
    rf_status_t st = RF_OK;
    if (gen != NULL) {
        /* MPI only so that the library's MPI-typed pieces are initialized; one process */
        MPI_Init(&argc, &argv);
        mpi = true;
        char *yaml = cli_file_read(gen, CLI_TEXT_MAX, NULL);
        if (yaml == NULL) {
            st = rf_err_set(&err, RF_ERR_IO, "%s: cannot read: %s", gen, cli_file_error());
        } else if ((st = rf_topology_parse(yaml, strlen(yaml), gen, &topo, &err)) == RF_OK &&
                   (st = rf_model_config_load(topo.model_config_path, &cfg0, &err)) == RF_OK &&
                   (st = rf_model_check_topology(&topo, &cfg0, 0, &cfg, &err)) == RF_OK &&
                   (st = rf_inventory_build(&cfg, RF_QUANT_NONE, 0, &inv, &err)) == RF_OK) {
            config = cli_file_read(topo.model_config_path, CLI_TEXT_MAX, NULL);
            items = calloc((size_t)inv.ntensors + 1, sizeof(*items));
            for (int i = 0; items != NULL && i < inv.ntensors; i++) {
                const rf_tensor_t *t = &inv.tensors[i];
                item_t *it = &items[n++];
                it->name = t->name;
                it->dtype = t->dtype;
                it->ndim = t->ndim;
                for (int d = 0; d < t->ndim; d++)
                    it->shape[d] = (uint64_t)t->shape[d];
                it->nbytes = t->nbytes;
                it->rows = rf_tensor_rows(t);
                it->row_bytes = it->rows ? t->nbytes / it->rows : 0;
                it->gt = t;
            }
        }
        free(yaml);
    } else if ((st = rf_ckpt_open(in, &j.ck, &err)) == RF_OK) {
        n = rf_ckpt_count(j.ck);
        items = calloc(n + 1, sizeof(*items));
        for (size_t i = 0; items != NULL && i < n; i++) {
            const rf_st_entry_t *e = rf_ckpt_entry(j.ck, i);
            item_t *it = &items[i];
            it->name = e->name;
            it->dtype = e->dtype;
            it->ndim = e->ndim;
            memcpy(it->shape, e->shape, sizeof(it->shape));
            it->nbytes = e->nbytes;
            it->rows = rf_st_entry_rows(e);
            it->row_bytes = rf_st_entry_row_bytes(e);
            it->se = e;
        }
        if (rf_ckpt_config(j.ck) != NULL) {
            config = strdup(rf_ckpt_config(j.ck));
        } else if (stat(in, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            char p[4096];
            snprintf(p, sizeof(p), "%s/config.json", in);
            config = cli_file_read(p, CLI_TEXT_MAX, NULL); /* optional */
        }
    }
    if (st == RF_OK && items == NULL)
        st = rf_err_set(&err, RF_ERR_NOMEM, "out of memory");
    j.total = n;
    if (st == RF_OK)
        st = to_h5 ? write_h5(&j, out, force, config, items, n, &err)
                   : write_st_dir(&j, out, force, shard, config, items, n, &err);
    if (j.tty && j.done > 0)
        fprintf(stderr, "\n");
    int rc = 0;
    if (st != RF_OK) {
        rc = die(err.msg);
    } else {
        double dt = rf_time_now() - t0;
        printf("refit-convert: %s -> %s (%s): %zu tensors, %" PRIu64 " bytes in %.2f s "
               "(%.1f MB/s), buffer %zu bytes, peak RSS %ld KiB\n",
               gen ? "generator" : in, out, to_h5 ? "hdf5" : "safetensors", n, j.bytes, dt,
               dt > 0 ? (double)j.bytes / dt / 1e6 : 0.0, j.cap, peak_rss_kib());
    }
    free(items);
    free(config);
    free(j.buf);
    rf_ckpt_close(j.ck);
    if (gen != NULL && st == RF_OK) {
        rf_inventory_free(&inv);
        rf_model_config_free(&cfg);
        rf_model_config_free(&cfg0);
    }
    if (mpi)
        MPI_Finalize();
    return rc;
}
