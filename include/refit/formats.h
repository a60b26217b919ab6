/*
 * refit: the format owner registry by (quantization, backend) (DESIGN.md section 7,
 * docs/formats.md).
 *
 *   none        any backend                   -> "none"            DIRECT
 *   fp8-block   triton, cutlass               -> "fp8-block"       DIRECT (explicit opt-in)
 *   fp8-block   rocm-fnuz                     -> "fp8-block-fnuz"  LAYERWISE (quantized modules)
 *   wna16       triton                        -> "wna16"           experts RUNTIME_VIEW,
 *                                                                   dense linears LAYERWISE
 *   wna16       marlin                        -> "wna16-marlin"    LAYERWISE (quantized modules)
 *   fp8-tensor  triton, cutlass               -> "fp8-tensor"      fused qkv / gate_up LAYERWISE
 *                                                                   (requantized to the max
 *                                                                   shard scale), others DIRECT
 *   fp8-channel triton, cutlass               -> "fp8-channel"     DIRECT (explicit opt-in)
 *
 * Other pairs (fp8-block on marlin, wna16 on cutlass / rocm-fnuz) have no owner: NULL, as
 * rf_model_check_topology refuses them. Unquantized modules of a quantized model plan DIRECT
 * under every owner. Not collective; thread safe.
 */
#ifndef REFIT_FORMATS_H
#define REFIT_FORMATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/format.h"
#include "refit/model.h"
#include "refit/topology.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The owners' ops tables (also reachable by name through rf_format_lookup). */
extern const rf_format_ops_t rf_format_fp8_block_ops;      /* "fp8-block" */
extern const rf_format_ops_t rf_format_fp8_block_fnuz_ops; /* "fp8-block-fnuz" */
extern const rf_format_ops_t rf_format_wna16_ops;          /* "wna16" (triton) */
extern const rf_format_ops_t rf_format_wna16_marlin_ops;   /* "wna16-marlin" */
extern const rf_format_ops_t rf_format_fp8_tensor_ops;     /* "fp8-tensor" */
extern const rf_format_ops_t rf_format_fp8_channel_ops;    /* "fp8-channel" */

/* Ops for (quantization, backend: an rf_backend_t), or NULL for a pair without an owner. */
const rf_format_ops_t *rf_format_for(rf_quant_t quant, int backend);

/*
 * refit's marlin-style tile repack (docs/formats.md): flat runtime index of model element
 * (r, c) of an R x C matrix. Tiles of 16 rows x 64 columns in row-major tile order; tile
 * (ti, tj): r0 = 16 ti, c0 = 64 tj, th = min(16, R - r0); element (r0 + i, c0 + j) goes to
 * r0 C + c0 th + j th + ((i + j) mod th). A bijection on [0, R C).
 */
int64_t rf_wna16_repack_index(int64_t R, int64_t C, int64_t r, int64_t c);
/* Applies it (inverse: its inverse) to `batch` consecutive R x C matrices of esize-byte
 * elements; dst and src must not overlap. */
void rf_wna16_repack(void *dst, const void *src, int64_t batch, int64_t R, int64_t C,
                     size_t esize, bool inverse);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_FORMATS_H */
