/*
 * refit: the scale model of one update (issue 19; docs/simulate.md).
 *
 * Without moving data and in one process, for a topology of any size: the bytes each sender
 * sends each receiver in broadcast and in p2p mode, computed by the code that plans the real
 * transfer (the manifest of rf_manifest_build, the chunk plan of rf_chunk_plan_create, the
 * p2p schedule of rf_p2p_schedule_build, the copies of record of rf_trainer_owners); the
 * load those bytes put on each link class of a machine (NVLink inside a node, the NIC of each
 * GPU between nodes, optionally one shared fabric per node); the most loaded link; and a
 * predicted update time:
 *
 *     predicted = busiest link's bytes / its bandwidth            (the wire)
 *               + chunks over that link x chunk_latency_s         (per-chunk cost)
 *               + one chunk / that bandwidth                      (pipeline fill)
 *
 * plus the wire floor (the busiest NIC's bytes / NIC bandwidth; the busiest NVLink's where no
 * byte leaves a node). Bytes per pair are wire bytes as the gate counts them: payload plus,
 * per chunk, the 16-byte header and (integrity on) the 8-byte trailer, so they equal the
 * per-pair counters refit-run reports (profile "sent_to"). The broadcast stage gather
 * (copies of record -> stage sender, trainer side) is counted separately and also loads the
 * links; trainer-side quantization input bytes (bf16 in, per trainer rank) are reported for
 * quantized models.
 *
 * Placement: ranks fill nodes in world-rank order, gpus_per_node GPUs each (colocated: trainer
 * i and rollout i share GPU i, so their pair moves no link). A topology needing more GPUs than
 * machine.nodes x machine.gpus_per_node is refused naming machine.nodes.
 */
#ifndef REFIT_SIMULATE_H
#define REFIT_SIMULATE_H

#include <stddef.h>
#include <stdint.h>

#include "refit/model.h"
#include "refit/status.h"
#include "refit/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A machine description: flags of refit-plan --simulate or a small YAML file (keys below,
 * rates as topology files write them: "450GB/s"). */
typedef struct rf_machine {
    char name[64];          /* "name" (default "machine") */
    char file[1024];        /* path parsed, for messages ("" for flags only) */
    int gpus_per_node;      /* "gpus_per_node", >= 1 (default 8) */
    int nodes;              /* "nodes", >= 0; 0: as many as the topology needs */
    double nvlink_Bps;      /* "nvlink_bandwidth": per GPU, per direction, inside a node */
    double nic_Bps;         /* "nic_bandwidth": per GPU, per direction, between nodes */
    double node_Bps;        /* "node_bandwidth": all intra-node bytes of one node share it
                               (a shared-memory host's copy rate); 0: no such limit */
    double chunk_latency_s; /* "chunk_latency_us" in the file: per-chunk cost on a link */
} rf_machine_t;

/* The default machine: 8 GPUs a node, NVLink 450 GB/s, NIC 400 Gb/s = 50 GB/s per GPU, 10 us
 * per chunk, no node limit, nodes as needed. */
void rf_machine_default(rf_machine_t *m);

/*
 * Parses a machine file (YAML mapping of the keys above; unknown keys, duplicates, bad values
 * refused: RF_ERR_TOPOLOGY "<file>: <key>: ..."). Starts from rf_machine_default. Pure.
 */
rf_status_t rf_machine_parse(const char *yaml, size_t len, const char *file, rf_machine_t *m,
                             rf_err_t *err);

/* Link classes, per GPU (NVLink, NIC; out = sending, in = receiving) or per node. */
typedef enum {
    RF_LINK_NVLINK_OUT = 0,
    RF_LINK_NVLINK_IN,
    RF_LINK_NIC_OUT,
    RF_LINK_NIC_IN,
    RF_LINK_NODE,
    RF_LINK_NCLASSES
} rf_link_class_t;

const char *rf_link_class_name(rf_link_class_t c);

/* Bytes from world rank src to world rank dst in one update. */
typedef struct rf_sim_pair {
    int src, dst;
    uint64_t bytes;   /* wire bytes: payload + chunks x (header + trailer) */
    uint64_t payload; /* payload bytes */
    uint64_t chunks;
    int order;        /* p2p: the pair's place in its sender's send order (0: its first; the
                         order rf_xfer_send_p2p takes the pairs in, runtime/session.c); -1 in
                         broadcast and in the gather */
} rf_sim_pair_t;

/* One link class's busiest link. */
typedef struct rf_sim_link {
    uint64_t bytes;   /* busiest link's bytes (0: class unused) */
    uint64_t chunks;  /* chunks over it */
    int where;        /* world rank (GPU classes) or node */
    uint64_t total;   /* bytes over every link of the class */
    double seconds;   /* bytes / bandwidth (0 when the bandwidth is unlimited) */
} rf_sim_link_t;

typedef struct rf_sim {
    rf_mode_t mode;
    int T, R, nodes;            /* nodes used */
    rf_sim_pair_t *pairs;       /* [npairs] data pairs, sender-major (owned) */
    size_t npairs;
    rf_sim_pair_t *gather;      /* [ngather] broadcast stage gather: contributor -> sender */
    size_t ngather;
    uint64_t payload_bytes;     /* manifest payload (one copy) */
    uint64_t wire_bytes;        /* sum of pairs' bytes */
    uint64_t gather_bytes;      /* sum of gather bytes (payload only, as bytes_gathered) */
    uint64_t quant_in_bytes;    /* busiest trainer rank's quantizer input (bf16), 0 unquantized */
    int quant_rank;
    uint64_t max_send, max_recv; /* busiest sender's / receiver's wire bytes */
    int max_send_rank, max_recv_rank;
    uint64_t chunk_bytes;       /* topology transfer.chunk_bytes */
    rf_sim_link_t link[RF_LINK_NCLASSES];
    rf_link_class_t busiest;    /* the class of the most loaded link (by seconds) */
    double wire_s, latency_s, fill_s, predicted_s;
    double floor_s;             /* busiest NIC (or NVLink within one node) / bandwidth */
    rf_link_class_t floor_class;
    double bound_s;             /* what no schedule of these receivers' bytes beats: the busiest
                                   receiver's bytes, or the senders' mean share, over the floor
                                   class's bandwidth (the balance a schedule could reach) */
    double ordered_s;           /* the same bytes in refit's send order (mpi): p2p senders take
                                   their receivers in world-rank order from their own first
                                   receiver (rf_xfer_p2p_first_receiver), p2p_inflight of them
                                   in flight at once (rf_xfer_send_p2p), and receivers take
                                   chunks from whichever sender is sending (mpi any_order), the
                                   active pairs sharing their links max-min fairly (an event
                                   model);
                                   broadcast stages one after another (receivers consume them
                                   stage-major), each stage sender fanning out to all receivers;
                                   never below the busiest link's wire + latency; + fill */
    double ordered_rank_s;      /* p2p: ordered_s before receivers took any ready sender */
    double ordered_asc_s;       /* p2p: ordered_s with every sender starting at receiver 0,
                                   one receiver at a time */
    double ordered_one_s;       /* p2p: ordered_s with one receiver at a time per sender (the
                                   order before rf_xfer_send_p2p's window) */
    int p2p_inflight;           /* p2p: the senders' window (transfer.p2p_inflight, or
                                   RF_XFER_P2P_INFLIGHT_DEFAULT) ordered_s was computed with */
} rf_sim_t;

/*
 * Simulates one update of `topo` (parsed and bound, rf_model_bind_topology) with inventory
 * `inv` in `mode` (either, whatever the topology's transfer.mode) on machine m. Local, one
 * process, no MPI traffic. Errors: RF_ERR_TOPOLOGY "<machine file>: machine.nodes: ..." when
 * the machine cannot place the ranks; the planners' own errors (p2p schedule, chunk plan);
 * RF_ERR_NOMEM. Free with rf_sim_free.
 */
rf_status_t rf_sim_run(const rf_topology_t *topo, const rf_inventory_t *inv,
                       const rf_machine_t *m, rf_mode_t mode, rf_sim_t *s, rf_err_t *err);
void rf_sim_free(rf_sim_t *s);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_SIMULATE_H */
