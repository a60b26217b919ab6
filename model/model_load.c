/*
 * refit: collective loading of a topology file with its model config (DESIGN.md section 3).
 *
 * rf_model_load_topology(): rank 0 reads the topology file and the config.json it names and
 * broadcasts first a status with its error message, then the path and both texts; every rank
 * parses them, checks them against the model and the communicator size, and all ranks agree
 * on the hash. Failures on any rank are agreed too (the lowest failing rank's message goes to
 * all), so a bad file makes every rank return the same error instead of hanging.
 * rf_model_load_topology_local(): the same reads and parses in one process, no MPI (the
 * offline plan of include/refit/session.h).
 */
#include <errno.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/checks.h"
#include "refit/log.h"
#include "refit/model.h"
#include "refit/topology.h"

#define RF_TOPO_FILE_MAX (1u << 20)    /* 1 MiB of YAML */
#define RF_CONFIG_FILE_MAX (16u << 20) /* as rf_model_config_load */

/* Reads a whole file (NUL-terminated, *len_p bytes). buf_p: owned by the caller. */
static rf_status_t read_text(const char *path, size_t max, const char *what, char **buf_p,
                             size_t *len_p, rf_err_t *err)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (f == NULL)
        return rf_err_set(err, RF_ERR_IO, "%s: cannot open %s: %s", path, what, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode)) { /* fopen opens a directory too */
        fclose(f);
        return rf_err_set(err, RF_ERR_IO, "%s: cannot read %s: %s", path, what,
                          S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
    }
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return rf_err_set(err, RF_ERR_IO, "%s: cannot read %s", path, what);
    }
    if ((size_t)n > max) {
        fclose(f);
        return rf_err_set(err, RF_ERR_IO, "%s: %ld bytes is too large for a %s (at most %zu)", path,
                          n, what, max);
    }
    buf = malloc((size_t)n + 1);
    if (buf == NULL) {
        fclose(f);
        return rf_err_set(err, RF_ERR_NOMEM, "%s: out of memory", path);
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return rf_err_set(err, RF_ERR_IO, "%s: cannot read %s", path, what);
    }
    fclose(f);
    buf[n] = '\0';
    *buf_p = buf;
    *len_p = (size_t)n;
    return RF_OK;
}

/* Rank 0's part: the path used for messages, the topology text and the config text. */
static rf_status_t root_read(const char *path, char **path_p, char **yaml_p, size_t *ylen_p,
                             char **cfg_p, size_t *clen_p, rf_err_t *err)
{
    rf_topology_t topo;
    rf_status_t st;
    char *yaml = NULL;
    size_t ylen;
    if (path != NULL) {
        RF_CHECK(read_text(path, RF_TOPO_FILE_MAX, "topology file", &yaml, &ylen, err));
    } else {
        ylen = strlen(rf_default_topology_yaml);
        yaml = malloc(ylen + 1);
        if (yaml == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "default.yaml: out of memory");
        memcpy(yaml, rf_default_topology_yaml, ylen + 1);
    }
    st = rf_topology_parse(yaml, ylen, path, &topo, err);
    if (st == RF_OK)
        st = read_text(topo.model_config_path, RF_CONFIG_FILE_MAX, "model config", cfg_p, clen_p,
                       err);
    if (st == RF_OK) {
        *path_p = strdup(path ? path : "");
        if (*path_p == NULL) {
            free(*cfg_p);
            st = rf_err_set(err, RF_ERR_NOMEM, "topology: out of memory");
        }
    }
    if (st != RF_OK) {
        free(yaml);
        return st;
    }
    *yaml_p = yaml;
    *ylen_p = ylen;
    return RF_OK;
}

/* Broadcasts a text of len bytes from rank 0 (len already known everywhere). */
static rf_status_t bcast_text(char **buf_p, uint64_t len, int rank, MPI_Comm comm, rf_err_t *err)
{
    if (rank != 0) {
        *buf_p = malloc(len + 1);
        if (*buf_p == NULL)
            return rf_err_set(err, RF_ERR_NOMEM, "topology: out of memory");
        (*buf_p)[len] = '\0';
    }
    for (uint64_t off = 0; off < len; off += 1u << 30) {
        uint64_t n = len - off < (1u << 30) ? len - off : (1u << 30);
        RF_MPI_CHECK(MPI_Bcast(*buf_p + off, (int)n, MPI_CHAR, 0, comm), err);
    }
    return RF_OK;
}

/*
 * Agrees on failure: every rank contributes its status; when any failed, the lowest failing
 * rank's message is broadcast and every rank returns it. Returns RF_OK when all succeeded.
 */
static rf_status_t agree(rf_status_t mine, int rank, int size, MPI_Comm comm, rf_err_t *err)
{
    int first = mine != RF_OK ? rank : size;
    int first_all;
    struct {
        int status;
        char msg[RF_ERR_MSG_MAX];
    } rep;
    RF_MPI_CHECK(MPI_Allreduce(&first, &first_all, 1, MPI_INT, MPI_MIN, comm), err);
    if (first_all == size)
        return RF_OK;
    memset(&rep, 0, sizeof(rep));
    if (rank == first_all) {
        rep.status = mine;
        snprintf(rep.msg, sizeof(rep.msg), "%s", err ? err->msg : "failed");
    }
    RF_MPI_CHECK(MPI_Bcast(&rep, (int)sizeof(rep), MPI_BYTE, first_all, comm), err);
    if (rank != first_all) {
        if (err != NULL)
            rf_err_clear(err);
        rf_err_set(err, (rf_status_t)rep.status, "%s%s", rep.msg,
                   first_all != 0 ? " (on another rank)" : "");
    }
    return (rf_status_t)rep.status;
}

rf_status_t rf_model_load_topology_local(const char *path_or_NULL, rf_topology_t *topo_p,
                                         rf_model_config_t *cfg_p, rf_err_t *err)
{
    char *path = NULL, *yaml = NULL, *cfgtext = NULL;
    size_t ylen = 0, clen = 0;
    rf_topology_t topo;
    rf_model_config_t raw, cfg;
    bool have_raw = false, have_cfg = false;
    rf_status_t st = root_read(path_or_NULL, &path, &yaml, &ylen, &cfgtext, &clen, err);
    if (st != RF_OK)
        return st;
    /* the texts parsed as every rank of rf_model_load_topology parses them (no world size) */
    st = rf_topology_parse(yaml, ylen, path[0] ? path : NULL, &topo, err);
    if (st == RF_OK) {
        st = rf_model_config_parse(cfgtext, clen, topo.model_config_path, &raw, err);
        have_raw = st == RF_OK;
    }
    if (st == RF_OK) {
        st = rf_model_check_topology(&topo, &raw, 0, &cfg, err);
        have_cfg = st == RF_OK;
    }
    if (st == RF_OK)
        st = rf_model_bind_topology(&topo, &cfg, err);
    if (st == RF_OK) {
        *topo_p = topo;
        *cfg_p = cfg;
        have_cfg = false;
    }
    if (have_cfg)
        rf_model_config_free(&cfg);
    if (have_raw)
        rf_model_config_free(&raw);
    free(path);
    free(yaml);
    free(cfgtext);
    return st;
}

rf_status_t rf_model_load_topology(const char *path_or_NULL, MPI_Comm comm,
                                   rf_topology_t *topo_p, rf_model_config_t *cfg_p,
                                   rf_err_t *err)
{
    int rank, size;
    rf_status_t st = RF_OK;
    char *path = NULL, *yaml = NULL, *cfgtext = NULL;
    size_t ylen = 0, clen = 0;
    struct {
        int status;
        uint64_t plen, ylen, clen;
        char msg[RF_ERR_MSG_MAX];
    } head;
    rf_topology_t *topo = NULL;
    rf_model_config_t raw, cfg;
    bool have_raw = false, have_cfg = false;

    RF_MPI_CHECK(MPI_Comm_rank(comm, &rank), err);
    RF_MPI_CHECK(MPI_Comm_size(comm, &size), err);
    memset(&head, 0, sizeof(head));
    if (rank == 0) {
        rf_err_t rerr;
        rf_err_clear(&rerr);
        head.status = root_read(path_or_NULL, &path, &yaml, &ylen, &cfgtext, &clen, &rerr);
        if (head.status == RF_OK) {
            head.plen = strlen(path);
            head.ylen = ylen;
            head.clen = clen;
        } else {
            snprintf(head.msg, sizeof(head.msg), "%s", rerr.msg);
        }
    }
    RF_MPI_CHECK(MPI_Bcast(&head, (int)sizeof(head), MPI_BYTE, 0, comm), err);
    if (head.status != RF_OK)
        return rf_err_set(err, (rf_status_t)head.status, "%s", head.msg);

    /* the lengths are known everywhere: a failing malloc must not desynchronize the bcasts */
    rf_err_t lerr;
    rf_err_clear(&lerr);
    rf_status_t s1 = bcast_text(&path, head.plen, rank, comm, &lerr);
    rf_status_t s2 = s1 == RF_OK ? bcast_text(&yaml, head.ylen, rank, comm, &lerr) : s1;
    rf_status_t s3 = s2 == RF_OK ? bcast_text(&cfgtext, head.clen, rank, comm, &lerr) : s2;
    if (s3 == RF_ERR_MPI) {
        st = rf_err_set(err, s3, "%s", lerr.msg);
        goto out;
    }
    st = s3;

    topo = malloc(sizeof(*topo));
    if (st == RF_OK && topo == NULL)
        st = rf_err_set(&lerr, RF_ERR_NOMEM, "topology: out of memory");
    if (st == RF_OK)
        st = rf_topology_parse(yaml, head.ylen, path[0] ? path : NULL, topo, &lerr);
    if (st == RF_OK) {
        st = rf_model_config_parse(cfgtext, head.clen, topo->model_config_path, &raw, &lerr);
        have_raw = st == RF_OK;
    }
    if (st == RF_OK) {
        st = rf_model_check_topology(topo, &raw, size, &cfg, &lerr);
        have_cfg = st == RF_OK;
    }
    if (st == RF_OK)
        st = rf_model_bind_topology(topo, &cfg, &lerr);
    st = agree(st, rank, size, comm, &lerr);
    if (st != RF_OK) {
        rf_err_set(err, st, "%s", lerr.msg);
        goto out;
    }

    uint64_t h = rf_topology_hash(topo), hmin, hmax;
    RF_MPI_CHECK(MPI_Allreduce(&h, &hmin, 1, MPI_UINT64_T, MPI_MIN, comm), err);
    RF_MPI_CHECK(MPI_Allreduce(&h, &hmax, 1, MPI_UINT64_T, MPI_MAX, comm), err);
    if (hmin != hmax) {
        st = rf_err_set(err, RF_ERR_MISMATCH,
                        "%s: topology hash differs between ranks (min %016llx, max %016llx; "
                        "this rank %016llx)",
                        topo->file, (unsigned long long)hmin, (unsigned long long)hmax,
                        (unsigned long long)h);
        goto out;
    }
    if (rank == 0)
        rf_info("%s: topology %s, hash %016llx, trainer %d + rollout %d ranks", topo->file,
                topo->name, (unsigned long long)h, rf_topology_trainer_size(topo),
                rf_topology_rollout_size(topo));
    *topo_p = *topo;
    *cfg_p = cfg;
    have_cfg = false;
out:
    if (have_cfg)
        rf_model_config_free(&cfg);
    if (have_raw)
        rf_model_config_free(&raw);
    free(topo);
    free(path);
    free(yaml);
    free(cfgtext);
    return st;
}

