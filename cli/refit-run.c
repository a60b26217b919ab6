/*
 * refit-run: the main job (DESIGN.md section 2).
 *
 *   mpirun -np N refit-run [--topology FILE] [--checkpoint DIR] [--steps K] [--reference FILE]
 *
 * Rank 0 reads the topology (or the compiled-in default) and the model config and broadcasts
 * them; rollout ranks build the inventory, allocate runtime storage and plan every layer;
 * trainer rank 0 builds the manifest, which every rank validates and agrees on; then each
 * update checks the source, moves the chunks over MPI through the plans, finalizes, passes the
 * completion gate and is verified by an independent oracle. Rank 0 prints a table per update
 * and its last line is "refit: COMMITTED <n> update(s), verified <k> tensors" or
 * "refit: FAILED: <reason>". Exit 0 only if every update committed and verified.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "refit/chunk.h"
#include "refit/control.h"
#include "refit/format.h"
#include "refit/generator.h"
#include "refit/hashes.h"
#include "refit/log.h"
#include "refit/manifest.h"
#include "refit/model.h"
#include "refit/plan.h"
#include "refit/reference.h"
#include "refit/safetensors.h"
#include "refit/storage.h"
#include "refit/topology.h"
#include "refit/trainer.h"
#include "refit/transport.h"
#include "refit/verify.h"

#include "refit/job.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np N refit-run [options]\n"
            "\n"
            "Moves trainer weights into rollout ranks' runtime storage (transport mpi, nccl or\n"
            "ipc), through per-layer reload plans and a completion gate, and verifies every\n"
            "update.\n"
            "\n"
            "options:\n"
            "  --topology FILE       topology YAML (default: the compiled-in jobs/topologies/default.yaml,\n"
            "                        whose model config resolves against the current folder)\n"
            "  --checkpoint PATH     checkpoint: a safetensors directory (model.safetensors or an index),\n"
            "                        an HDF5 file (.h5 / .hdf5) or a directory holding model.h5;\n"
            "                        odd updates carry it as stored, even updates generator weights\n"
            "  --checkpoint-updates WHICH\n"
            "                        odd (default) or all: every update carries the checkpoint\n"
            "                        (benchmarks: no generator production between timed updates;\n"
            "                        the oracle's diff rule is skipped after an update of the same\n"
            "                        checkpoint, which writes the same bytes)\n"
            "  --steps K             number of updates (default 2)\n"
            "  --reference FILE      tensors.reference.json (name -> dtype, shape, sha256): updates that\n"
            "                        carry the checkpoint are reassembled from rollout storage and hashed\n"
            "                        (otherwise every update is checked by the scalar reference loader)\n"
            "  --reload-policy P     auto (the planner decides) or layerwise (every layer LAYERWISE)\n"
            "  --format-owner NAME   format owner for the runtime layout (%s; default: the owner\n"
            "                        for the topology's quantization and backend; test-* owners\n"
            "                        exist to exercise LAYERWISE and the deferred stage)\n"
            "  --cold-check          after each committed update, replay its chunks into fresh storage\n"
            "                        and require byte-identical slots (cold load == refit)\n"
            "  --storage-digest      rank 0 prints 'storage digest <hex>' after each committed update:\n"
            "                        XXH3 over every rollout rank's runtime slots (GPU slots copied\n"
            "                        to the host), equal for a GPU and a CPU run of the same job\n"
            "  --profile-dir DIR     write profile-rank<R>.jsonl (a line per update) and the\n"
            "                        summary profile-rank<R>.json there (default: refit-profile;\n"
            "                        '': none)\n"
            "  --verify WHICH        all (default): the oracle checks every committed update;\n"
            "                        last: only the last one (benchmarks of large models);\n"
            "                        none: no oracle (benchmarks only; the last line says so)\n"
            "  --bench-json FILE     rank 0 writes update times, payload GB/s and the copy ceiling to\n"
            "                        FILE: best of 5 copies of max(payload, 4 GiB) on rank 0's GPU\n"
            "                        (of the payload, at least 64 MiB, on the host), measured after\n"
            "                        the updates; FILE is checked for writing at startup\n"
            "  --integrity           XXH3-64 checksum trailer per chunk, verified before unpacking:\n"
            "                        the default (transfer.integrity: true); forces it on over a\n"
            "                        topology that sets transfer.integrity: false\n"
            "  --no-integrity        no checksum trailer (as transfer.integrity: false): a corrupted\n"
            "                        chunk is then found only by the oracle; benchmarks only\n"
            "  --inject-fault KIND[:RANK][@UPDATE]\n"
            "                        tests: inject a fault on RANK (default per kind) in UPDATE\n"
            "                        (default 2); KIND: %s (docs/faults.md)\n"
            "  --quiet               print only the last line on rank 0\n"
            "  --help                this text\n"
            "\n"
            "environment: REFIT_LOG_LEVEL=error|warn|info|debug\n"
            "             REFIT_DEVICE_TIMELINE=1 (rollout ranks with GPU storage: per update,\n"
            "             the GPU time of row copies, LAYERWISE processing and idle gaps)\n"
            "example: mpirun --oversubscribe -np 4 refit-run --steps 2\n"
            "         (as root add --allow-run-as-root; tools/mpirun.sh adds both flags)\n",
            rf_format_names(), rf_fault_kind_names());
}

static int parse_args(int argc, char **argv, rf_job_opts_t *o, char *msg, size_t cap)
{
    static const struct option longopts[] = {
        {"topology", required_argument, NULL, 't'},
        {"checkpoint", required_argument, NULL, 'c'},
        {"steps", required_argument, NULL, 's'},
        {"reference", required_argument, NULL, 'r'},
        {"reload-policy", required_argument, NULL, 'p'},
        {"format-owner", required_argument, NULL, 'f'},
        {"profile-dir", required_argument, NULL, 'd'},
        {"quiet", no_argument, NULL, 'q'},
        {"integrity", no_argument, NULL, 'i'},
        {"no-integrity", no_argument, NULL, 'I'},
        {"cold-check", no_argument, NULL, 'C'},
        {"storage-digest", no_argument, NULL, 'D'},
        {"inject-fault", required_argument, NULL, 'x'},
        {"verify", required_argument, NULL, 'V'},
        {"bench-json", required_argument, NULL, 'B'},
        {"checkpoint-updates", required_argument, NULL, 'U'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof(*o));
    o->steps = 2;
    o->format = NULL; /* the owner for the topology's (quantization, backend) */
    o->profile_dir = "refit-profile";
    o->policy = RF_POLICY_AUTO;
    opterr = 0;
    optind = 1;
    for (;;) {
        int c = getopt_long(argc, argv, ":h", longopts, NULL);
        char *end;
        if (c == -1)
            break;
        switch (c) {
        case 't':
            o->topology = optarg;
            break;
        case 'c':
            o->checkpoint = optarg;
            break;
        case 's':
            errno = 0;
            o->steps = (int)strtol(optarg, &end, 10);
            if (errno || *end || o->steps < 1 || o->steps > 1000000) {
                snprintf(msg, cap, "--steps: '%s' is not a positive integer", optarg);
                return -1;
            }
            break;
        case 'r':
            o->reference = optarg;
            break;
        case 'p':
            if (strcmp(optarg, "auto") == 0)
                o->policy = RF_POLICY_AUTO;
            else if (strcmp(optarg, "layerwise") == 0)
                o->policy = RF_POLICY_LAYERWISE;
            else {
                snprintf(msg, cap, "--reload-policy: '%s' is not auto or layerwise", optarg);
                return -1;
            }
            break;
        case 'f':
            if (rf_format_lookup(optarg) == NULL) {
                snprintf(msg, cap, "--format-owner: unknown owner '%s' (known: %s)", optarg,
                         rf_format_names());
                return -1;
            }
            o->format = optarg;
            break;
        case 'd':
            o->profile_dir = optarg;
            break;
        case 'q':
            o->quiet = true;
            break;
        case 'C':
            o->cold_check = true;
            break;
        case 'D':
            o->storage_digest = true;
            break;
        case 'i':
        case 'I':
            if (o->integrity != 0 && o->integrity != (c == 'i' ? 1 : -1)) {
                snprintf(msg, cap, "--integrity and --no-integrity contradict each other");
                return -1;
            }
            o->integrity = c == 'i' ? 1 : -1;
            break;
        case 'x':
            if (rf_job_fault_parse(optarg, &o->fault, msg, cap) != 0)
                return -1;
            break;
        case 'U':
            if (strcmp(optarg, "odd") == 0 || strcmp(optarg, "all") == 0) {
                o->checkpoint_all = optarg[0] == 'a';
                break;
            }
            snprintf(msg, cap, "--checkpoint-updates %s: odd or all", optarg);
            return -1;
        case 'V':
            if (strcmp(optarg, "all") == 0)
                o->verify_last = false;
            else if (strcmp(optarg, "last") == 0)
                o->verify_last = true;
            else if (strcmp(optarg, "none") == 0)
                o->verify_none = true;
            else {
                snprintf(msg, cap, "--verify: '%s' is not all, last or none", optarg);
                return -1;
            }
            break;
        case 'B':
            o->bench_json = optarg;
            break;
        case 'h':
            o->help = true;
            break;
        case ':':
            snprintf(msg, cap, "option '%s' needs a value (see --help)", argv[optind - 1]);
            return -1;
        default:
            snprintf(msg, cap, "unknown option '%s' (see --help)", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        snprintf(msg, cap, "unexpected argument '%s' (see --help)", argv[optind]);
        return -1;
    }
    if (o->reference && !o->checkpoint) {
        snprintf(msg, cap, "--reference needs --checkpoint (it describes the checkpoint's tensors)");
        return -1;
    }
    return 0;
}

/* rf_job_opts_t.print: the job's report on stdout, its messages on stderr, each line flushed
 * at once as refit-run always did (mpirun forwards what a rank wrote; a rank killed later must
 * not take a table still in its buffer with it). */
static void print_line(void *ctx, rf_job_stream_t stream, const char *line)
{
    FILE *f = stream == RF_JOB_ERR ? stderr : stdout;
    (void)ctx;
    fputs(line, f);
    fputc('\n', f);
    fflush(f);
}

int main(int argc, char **argv)
{
    rf_job_opts_t opts;
    char msg[RF_ERR_MSG_MAX] = "";
    int rank = 0, rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rf_log_set_rank(rank);
    if (parse_args(argc, argv, &opts, msg, sizeof(msg)) != 0) {
        if (rank == 0)
            fprintf(stderr, "refit-run: %s\nrefit: FAILED: %s\n", msg, msg);
        MPI_Finalize();
        return 2;
    }
    if (opts.help) {
        if (rank == 0)
            usage(stdout);
        MPI_Finalize();
        return 0;
    }
    if (opts.bench_json) {
        /* fail before the job, not after it: rank 0 creates the file now */
        char bmsg[RF_ERR_MSG_MAX] = "";
        int ok = 1;
        if (rank == 0) {
            FILE *f = fopen(opts.bench_json, "w");
            if (f == NULL) {
                ok = 0;
                snprintf(bmsg, sizeof(bmsg), "--bench-json: cannot write %s: %s", opts.bench_json,
                         strerror(errno));
            } else {
                fclose(f);
            }
        }
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!ok) {
            if (rank == 0)
                fprintf(stderr, "refit-run: %s\nrefit: FAILED: %s\n", bmsg, bmsg);
            MPI_Finalize();
            return 2;
        }
    }
    opts.print = print_line;
    rc = rf_job_run(&opts);
    if (rc == RF_JOB_PEER_LOST) {
        /* a peer never reached the start of an update (it died, and Open MPI has not ended the
         * job): no collective call can finish now, not even MPI_Finalize, so end every rank
         * rather than hang; the job's exit status is 1, as for any failure */
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return rc;
}
