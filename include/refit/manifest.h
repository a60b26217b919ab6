/*
 * refit: the update manifest (DESIGN.md section 9).
 *
 * The ordered list of tensors an update carries (name, dtype, shape, bytes, stage), built by
 * trainer rank 0 from the inventory and, for checkpoint sources, the files' headers; it is
 * broadcast, validated by every rank against its own inventory and agreed by all-reducing MIN
 * and MAX of a 64-bit hash of its canonical serialization. Order key: (stage, layer with
 * embed = -1 and final norm / lm_head = L, expert id or -1, name by strcmp).
 */
#ifndef REFIT_MANIFEST_H
#define REFIT_MANIFEST_H

#include <mpi.h>
#include <stdint.h>

#include "refit/checkpoint.h"
#include "refit/model.h"
#include "refit/status.h"
#include "refit/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rf_manifest_entry {
    char name[RF_NAME_MAX];
    rf_dtype_t dtype;
    int ndim;
    int64_t shape[RF_MAX_DIMS];
    uint64_t nbytes;
    int stage;
    int layer;
    int expert;
    int tensor; /* index in this rank's inventory (set by validation) */
} rf_manifest_entry_t;

typedef struct rf_manifest {
    rf_manifest_entry_t *entries; /* owned */
    int n;
    uint64_t payload_bytes;       /* sum of nbytes */
    uint64_t digest;              /* XXH3 of the canonical serialization */
    int skipped;                  /* checkpoint tensors skipped (skip list) */
    int cut;                      /* checkpoint tensors cut away by overrides */
    bool tied_checked;            /* the checkpoint's lm_head.weight of a tied model was read,
                                     found equal to the embedding and skipped (root only) */
} rf_manifest_t;

/*
 * Builds the manifest from the inventory and, when ck is not NULL, the checkpoint headers:
 * every inventory tensor must be present with the inventory's shape and dtype, quantized
 * linears under rf_manifest_quant_source (an invalid one refused naming it; trainer-quantized
 * ones need only their unquantized weight, and stale stored scales are ignored with one INFO
 * line: count and first linear); entries keep the inventory's runtime dtypes (fp8 scales fp32
 * even when the file stores bf16 / f16; wna16 weight_shape may be I32); checkpoint tensors the
 * inventory does not know are skipped (skip list, overrides: one log line each kind) or refused
 * (RF_ERR_EXTRA naming the tensor). The lm_head.weight of a tied model is read and compared
 * with model.embed_tokens.weight: equal, it is skipped (one INFO line); different in dtype,
 * shape or bytes, RF_ERR_MISMATCH naming both and tie_word_embeddings. Not collective
 * (trainer rank 0).
 */
rf_status_t rf_manifest_build(const rf_inventory_t *inv, const rf_topology_t *topo,
                              rf_ckpt_t *ck, const char *ck_dir, rf_manifest_t *man_p,
                              rf_err_t *err);
void rf_manifest_free(rf_manifest_t *man);

/*
 * Where the tensors of one quantized linear (a prefix "<P>" such as
 * model.layers.0.self_attn.q_proj, or one expert's projection) come from in one update: all of
 * them from one source, decided by the primary tensor (fp8-block "<P>.weight", wna16
 * "<P>.weight_packed"), never a mix (DESIGN.md section 7):
 *   RF_QSOURCE_STORED: the checkpoint stores the primary quantized (F8_E4M3 / I32): every
 *     tensor of the linear is carried as stored and must be present;
 *   RF_QSOURCE_TRAINER: the generator (ck NULL), or the checkpoint stores "<P>.weight" in the
 *     model dtype with the logical shape (N, K) (and, for wna16, no weight_packed): the
 *     trainer's quantizer produces every tensor; stored scales are ignored;
 *   RF_QSOURCE_INVALID: anything else (the primary missing or of another dtype / shape, a wna16
 *     linear storing both weight_packed and weight); *why (may be NULL) names the linear and
 *     the tensors, without the checkpoint directory;
 *   RF_QSOURCE_NONE: t belongs to no quantized linear (unquantized modules, biases).
 * The one predicate the manifest build, the trainer and the oracle share. Pure; not collective.
 */
typedef enum rf_qsource {
    RF_QSOURCE_NONE = 0,
    RF_QSOURCE_STORED,
    RF_QSOURCE_TRAINER,
    RF_QSOURCE_INVALID,
} rf_qsource_t;
rf_qsource_t rf_manifest_quant_source(const rf_inventory_t *inv, const rf_tensor_t *t,
                                      const rf_ckpt_t *ck, rf_err_t *why);
/* rf_manifest_quant_source(inv, t, ck, NULL) == RF_QSOURCE_TRAINER: the trainer produces t by
 * quantizing a logical weight; false when it is sent as stored / unquantized. */
bool rf_manifest_trainer_quantizes(const rf_inventory_t *inv, const rf_tensor_t *t,
                                   const rf_ckpt_t *ck);
/* True when a checkpoint stores tensor t (an fp8 weight_scale_inv / weight_scale or DeepSeek's
 * e_score_correction_bias, runtime fp32: rf_param_widens) in `stored` (BF16 / F16): the
 * manifest entry stays fp32 and the trainer widens the values exactly. */
bool rf_manifest_scale_widens(const rf_tensor_t *t, rf_dtype_t stored);
/* True when a checkpoint header's shape (ndim dims) stands for inventory tensor t: equal, or
 * the 0-d scalar an fp8-tensor weight_scale [1] may be stored as (AutoFP8 and older
 * compressed-tensors write scalars; vLLM's per-tensor loader takes both). Pure. */
bool rf_manifest_shape_matches(const rf_tensor_t *t, int ndim, const uint64_t *shape);
/* True for "<P>.weight" of a wna16-quantized linear: a bf16 source, not an unknown tensor. */
bool rf_manifest_is_bf16_source(const rf_inventory_t *inv, const char *name);

/* Canonical serialization ("name dtype d0xd1 stage layer expert\n" per entry). Returns its
 * length; writes at most cap bytes. */
size_t rf_manifest_serialize(const rf_manifest_t *man, char *buf, size_t cap);
rf_status_t rf_manifest_parse(const char *buf, size_t len, rf_manifest_t *man_p, rf_err_t *err);

/*
 * Collective over comm: root broadcasts its manifest (the others' man is filled), every rank
 * validates it against its own inventory (names, shapes, bytes, dtypes, order; sets
 * entry.tensor) and all agree on the digest (MPI_Allreduce MIN and MAX). A failure on any rank
 * fails every rank with that rank's message.
 */
rf_status_t rf_manifest_agree(rf_manifest_t *man, int root, const rf_inventory_t *inv,
                              const rf_topology_t *topo, MPI_Comm comm, rf_err_t *err);

/* Validates a manifest against an inventory (used by rf_manifest_agree). */
rf_status_t rf_manifest_validate(rf_manifest_t *man, const rf_inventory_t *inv,
                                 const rf_topology_t *topo, rf_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_MANIFEST_H */
