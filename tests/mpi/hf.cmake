# rollout.layout hf (transformers 5's named_parameters(): q / k / v and gate / up apart, MoE
# experts as the fused 3-D gate_up_proj / down_proj), model/layout_hf.c: every family fixture
# end to end with --reference and --cold-check at rollout TP 1 and 2 (trainer TP 2: every
# fixture's heads divide; qwen3-moe-tiny's experts over EP 2), the kv heads replicated at
# rollout TP 4 > nkv 2, GraniteMoE, the quantized formats, and refit-plan counts on full-size
# configs (one module and one DIRECT layer per checkpoint tensor; MoE: per fused tensor).
set(HF_TTOPO ${CMAKE_CURRENT_SOURCE_DIR}/topologies)
foreach(case "llama-tiny;30" "qwen3-tiny-tied;24" "gpt-neox-tiny-b;28" "opt-tiny;36"
             "qwen3-moe-tiny;69")
  list(GET case 0 m)
  list(GET case 1 nt)
  set(tp2 tp2-to-tp2)
  if(m STREQUAL "qwen3-moe-tiny")
    set(tp2 tp2-to-tp2ep2)
  endif()
  foreach(t "tp1-to-tp1;2" "${tp2};4")
    list(GET t 0 topo)
    list(GET t 1 np)
    refit_run_test(refit_run_hf_${m}_${topo} ${np} ok
                   "reassembly \\+ sha256 vs --reference: ${nt} tensors equal;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified ${nt} tensors"
                   --topology ${HF_TTOPO}/${m}-hf-${topo}.yaml --checkpoint ${DATA}/${m}
                   --reference ${DATA}/${m}/tensors.reference.json --cold-check --steps 2)
  endforeach()
endforeach()
# k_proj / v_proj: one whole kv head per rank, each on two ranks (vLLM's rule when T > nkv)
refit_run_test(refit_run_hf_qwen3-tiny-tied_tp1-to-tp4 5 ok
               "reassembly \\+ sha256 vs --reference: 24 tensors equal;cold load == load then refit: 96 slots byte-identical;refit: COMMITTED 2 update\\(s\\), verified 24 tensors"
               --topology ${HF_TTOPO}/qwen3-tiny-tied-hf-tp1-to-tp4.yaml --checkpoint ${DATA}/qwen3-tiny-tied
               --reference ${DATA}/qwen3-tiny-tied/tensors.reference.json --cold-check --steps 2)

# quantized formats under hf (what transformers' quantizers keep: every checkpoint tensor of a
# linear its own parameter, sliced like the weight; fp8-block experts as FP8Experts' fused 3-D
# tensors), end to end with --cold-check, every plan DIRECT: fp8-block on qwen3-fp8-tiny (TP 1)
# and the DeepSeek-V3 fp8 shape (TP 2 / EP 2, absorbed MLA still derived) with --reference;
# fp8-tensor / fp8-channel "FP8 dynamic" llama-tiny at TP 1 and 2 with --reference (no fused
# per-tensor scale to requantize under hf: DIRECT where vllm has 6 LAYERWISE); wna16 quantized
# by the trainer from llama-tiny at TP 1 and 2 (scalar and dequantization oracles: no wna16
# checkpoint fixture)
refit_run_test(refit_run_hf_fp8_block_qwen3-fp8-tiny_tp1-to-tp1 2 ok
               "DIRECT 25  RUNTIME_VIEW 0  LAYERWISE 0;reassembly \\+ sha256 vs --reference: 39 tensors equal;cold load == load then refit: 39 slots byte-identical;refit: COMMITTED 2 update\\(s\\), verified 39 tensors"
               --topology ${HF_TTOPO}/qwen3-fp8-tiny-hf-tp1-to-tp1.yaml --checkpoint ${DATA}/qwen3-fp8-tiny
               --reference ${DATA}/qwen3-fp8-tiny/tensors.reference.json --cold-check --steps 2)
refit_run_test(refit_run_hf_fp8_block_deepseek-v3-tiny-fp8_tp1-to-tp2-ep2 3 ok
               "DIRECT 29  RUNTIME_VIEW 0  LAYERWISE 0;reassembly \\+ sha256 vs --reference: 69 tensors equal;derived +absorbed MLA W_UK_T / W_UV: 8 slots == a recomputation;cold load == load then refit: 106 slots byte-identical;refit: COMMITTED 2 update\\(s\\), verified 69 tensors"
               --topology ${HF_TTOPO}/deepseek-v3-tiny-fp8-hf-tp1-to-tp2-ep2.yaml --checkpoint ${DSCK}/fp8
               --reference ${DSCK}/fp8/tensors.reference.json --cold-check --steps 2)
set_tests_properties(refit_run_hf_fp8_block_deepseek-v3-tiny-fp8_tp1-to-tp2-ep2 PROPERTIES FIXTURES_REQUIRED dsck_fp8)
foreach(q tensor channel)
  foreach(r 1 2)
    math(EXPR np "2 + ${r}")
    set(n refit_run_hf_fp8_${q}_llama-tiny_tp2-to-tp${r})
    refit_run_test(${n} ${np} ok
                   "DIRECT 30  RUNTIME_VIEW 0  LAYERWISE 0;reassembly \\+ sha256 vs --reference: 51 tensors equal;cold load == load then refit;refit: COMMITTED 3 update\\(s\\), verified 51 tensors"
                   --topology ${HF_TTOPO}/llama-tiny-fp8-${q}-hf-tp2-to-tp${r}.yaml --checkpoint ${F8CK}/${q}-bf16
                   --reference ${F8CK}/${q}-bf16/tensors.reference.json --cold-check --steps 3)
    set_tests_properties(${n} PROPERTIES FIXTURES_REQUIRED f8ck_${q}_bf16)
  endforeach()
endforeach()
foreach(r 1 2)
  math(EXPR np "1 + ${r}")
  refit_run_test(refit_run_hf_wna16_llama-tiny_tp1-to-tp${r} ${np} ok
                 "DIRECT 30  RUNTIME_VIEW 0  LAYERWISE 0;scalar reference loader: 72 tensors verified, [0-9]+ elements, 0 mismatches, dequant;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 72 tensors"
                 --topology ${HF_TTOPO}/llama-tiny-wna16-hf-tp1-to-tp${r}.yaml --checkpoint ${DATA}/llama-tiny
                 --cold-check --steps 2)
endforeach()
# the Qwen3-30B-A3B fp8 shape cut to 1 layer and 8 experts at TP 2 and TP 2 / EP 2 (~1 min each
# on 2 cores: slow)
foreach(ep tp2 tp2ep2)
  refit_run_test(refit_run_hf_fp8_block_qwen3-30b-a3b-1l8e_${ep} 3 ok
                 "DIRECT 13  RUNTIME_VIEW 0  LAYERWISE 0;0 mismatches, dequant 10 modules;cold load == load then refit: 40 slots byte-identical;refit: COMMITTED 2 update\\(s\\), verified 64 tensors"
                 --topology ${HF_TTOPO}/qwen3-30b-a3b-1l8e-fp8-block-hf-${ep}.yaml --cold-check --steps 2)
  set_tests_properties(refit_run_hf_fp8_block_qwen3-30b-a3b-1l8e_${ep} PROPERTIES LABELS "mpi;slow")
endforeach()
# what cannot work under hf, refused at startup naming the module and the sizes (an fp8 block
# split by the rank boundary), the format and module (wna16 experts: compressed-tensors has no
# fused 3-D experts), or the backend (marlin / rocm-fnuz rewrite the bytes for vLLM's kernels)
refit_run_test(refit_run_hf_fp8_block_split_refused 3 fail
               "refit: FAILED: .*qwen3-fp8-tiny-hf-tp1-to-tp2.yaml: rollout.tp: 2 \\(tp_rank 0\\): model.layers.0.self_attn.k_proj: output rows per rank 64 is not a multiple of the 128-row fp8 block"
               --topology ${HF_TTOPO}/qwen3-fp8-tiny-hf-tp1-to-tp2.yaml --checkpoint ${DATA}/qwen3-fp8-tiny)
foreach(case
    "qwen3-moe-tiny-wna16-hf;rollout.layout hf with model.quantization wna16 is not supported for MoE experts \\(model.layers.0.mlp.experts.0.down_proj.weight_packed, in module model.layers.0.mlp.experts"
    "llama-tiny-wna16-hf-marlin;rollout.backend marlin with rollout.layout hf is not supported \\(wna16"
    "qwen3-fp8-tiny-hf-fnuz;rollout.backend rocm-fnuz with rollout.layout hf is not supported \\(fp8-block")
  list(GET case 0 t)
  list(GET case 1 re)
  add_test(NAME refit_plan_${t}_refused
           COMMAND ${EXPECT} fail "${re}" -- $<TARGET_FILE:refit-plan> --topology ${HF_TTOPO}/${t}-refused.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_${t}_refused PROPERTIES LABELS plan TIMEOUT 60)
endforeach()

# refit-plan: DIRECT / RUNTIME_VIEW / LAYERWISE / applications / declined / layers per rank.
# Llama-3.1-8B: 32 x 9 + 3 tensors, each its own module; Qwen3-30B-A3B EP 2: 48 x 10 + 3
# modules (q / k / v apart, experts fused), 64 of 128 experts' 3 x 48 tensors declined per
# rank; Pythia-14M as under vllm (query_key_value stays one tensor in transformers too).
# PowerMoE-3B: 32 x 8 + 2 modules (q / k / v apart; the router and the fused 3-D experts one each,
# all DIRECT: tests/data/SOURCES.md).
foreach(case "llama-3.1-8b-hf-tp2;291 +0 +0 +291 +0 +291" "qwen3-30b-a3b-hf-tp2ep2;483 +0 +0 +9651 +9216 +483"
             "pythia-14m-hf-tp2;39 +0 +0 +76 +0 +39" "powermoe-3b-hf-tp2;258 +0 +0 +290 +0 +258")
  list(GET case 0 t)
  list(GET case 1 counts)
  add_test(NAME refit_plan_${t}
           COMMAND ${EXPECT} ok "refit-plan: ${t}:" "^ +3 +0 +1 +0 +[01] +${counts} " -- $<TARGET_FILE:refit-plan>
                   --topology ${TOPO}/plan/${t}.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_${t} PROPERTIES LABELS plan TIMEOUT 120)
endforeach()

# the device branches on the CPU (REFIT_TEST_DEVICE_ACCEL=host-device: staged payloads, batched
# row copies) under hf: llama-tiny DIRECT and LAYERWISE, qwen3-moe-tiny's fused experts over EP 2
foreach(case "llama-tiny;tp2-to-tp2;auto;DIRECT 30;30" "llama-tiny;tp2-to-tp2;layerwise;LAYERWISE 30;30"
             "qwen3-moe-tiny;tp2-to-tp2ep2;auto;DIRECT 23;69")
  list(GET case 0 m)
  list(GET case 1 topo)
  list(GET case 2 pol)
  list(GET case 3 re)
  list(GET case 4 nt)
  refit_run_test(emu_refit_hf_${m}_${topo}_${pol} 4 ok
                 "${re};refit: COMMITTED 2 update\\(s\\), verified ${nt} tensors"
                 --topology ${HF_TTOPO}/${m}-hf-${topo}.yaml --checkpoint ${DATA}/${m}
                 --reference ${DATA}/${m}/tensors.reference.json --steps 2 --cold-check
                 --reload-policy ${pol})
  set_tests_properties(emu_refit_hf_${m}_${topo}_${pol} PROPERTIES LABELS "mpi;device-emu"
                       ENVIRONMENT "REFIT_TEST_DEVICE_ACCEL=host-device")
endforeach()

# the families whose modules the generic rewrite covers as they are: DeepSeek-V3 (MLA: the
# replicated fused_qkv_a_proj split back into q_a_proj / kv_a_proj_with_mqa, the derived
# W_UK_T / W_UV still computed once per update) and Qwen3-Next (sectioned GDN tensors are one
# tensor each in both layouts)
refit_run_test(refit_run_hf_deepseek-v3-tiny-b_tp2-to-tp2 4 ok
               "reassembly \\+ sha256 vs --reference: 91 tensors equal;cold load == load then refit;derived +absorbed MLA;refit: COMMITTED 2 update\\(s\\), verified 91 tensors"
               --topology ${HF_TTOPO}/deepseek-v3-tiny-b-hf-tp2-to-tp2.yaml --checkpoint ${DATA}/deepseek-v3-tiny-b
               --reference ${DATA}/deepseek-v3-tiny-b/tensors.reference.json --cold-check --steps 2)
refit_run_test(refit_run_hf_qwen3-next-tiny_tp2-to-tp2 4 ok
               "reassembly \\+ sha256 vs --reference: 154 tensors equal;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 154 tensors"
               --topology ${HF_TTOPO}/qwen3-next-tiny-hf-tp2-to-tp2.yaml --checkpoint ${DATA}/qwen3-next-tiny
               --reference ${DATA}/qwen3-next-tiny/tensors.reference.json --cold-check --steps 2)
# GraniteMoE: transformers 5's GraniteMoeParallelExperts keeps the checkpoint's fused 3-D
# tensors (block_sparse_moe.input_linear.weight / output_linear.weight) and the router under its
# checkpoint name; sliced per EP rank's experts and per TP rank's I_p as vLLM's w13 / w2
foreach(t "tp1-to-tp1;2;21" "tp2-to-tp2;4;42" "tp2-to-tp2ep2;4;42")
  list(GET t 0 topo)
  list(GET t 1 np)
  list(GET t 2 ns)
  refit_run_test(refit_run_hf_granitemoe-tiny_${topo} ${np} ok
                 "DIRECT 19  RUNTIME_VIEW 0  LAYERWISE 0;reassembly \\+ sha256 vs --reference: 21 tensors equal;cold load == load then refit: ${ns} slots byte-identical;refit: COMMITTED 2 update\\(s\\), verified 21 tensors"
                 --topology ${HF_TTOPO}/granitemoe-tiny-hf-${topo}.yaml --checkpoint ${DATA}/granitemoe-tiny
                 --reference ${DATA}/granitemoe-tiny/tensors.reference.json --cold-check --steps 2)
endforeach()
