# rollout.layout hf (transformers 5's named_parameters(): q / k / v and gate / up apart, MoE
# experts as the fused 3-D gate_up_proj / down_proj), model/layout_hf.c: every family fixture
# end to end with --reference and --cold-check at rollout TP 1 and 2 (trainer TP 2: every
# fixture's heads divide; qwen3-moe-tiny's experts over EP 2), the kv heads replicated at
# rollout TP 4 > nkv 2, the quantized formats refused, and refit-plan counts on full-size
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

# quantized formats under hf: refused at startup naming the format and the first tensor
refit_run_test(refit_run_hf_fp8_block_refused 2 fail
               "refit: FAILED: .*rollout.layout hf with model.quantization fp8-block is not supported \\(model.layers.0.self_attn.k_proj.weight, in module model.layers.0.self_attn.qkv_proj, is fp8-block"
               --topology ${HF_TTOPO}/qwen3-fp8-tiny-hf-refused.yaml)
refit_run_test(refit_run_hf_wna16_refused 2 fail
               "refit: FAILED: .*rollout.layout hf with model.quantization wna16 is not supported"
               --topology ${HF_TTOPO}/llama-tiny-hf-wna16-refused.yaml)

# refit-plan: DIRECT / RUNTIME_VIEW / LAYERWISE / applications / declined / layers per rank.
# Llama-3.1-8B: 32 x 9 + 3 tensors, each its own module; Qwen3-30B-A3B EP 2: 48 x 10 + 3
# modules (q / k / v apart, experts fused), 64 of 128 experts' 3 x 48 tensors declined per
# rank; Pythia-14M as under vllm (query_key_value stays one tensor in transformers too).
foreach(case "llama-3.1-8b-hf-tp2;291 +0 +0 +291 +0 +291" "qwen3-30b-a3b-hf-tp2ep2;483 +0 +0 +9651 +9216 +483"
             "pythia-14m-hf-tp2;39 +0 +0 +76 +0 +39")
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
# tensor each in both layouts); GraniteMoE's fused 3-D experts are refused naming the tensor
refit_run_test(refit_run_hf_deepseek-v3-tiny-b_tp2-to-tp2 4 ok
               "reassembly \\+ sha256 vs --reference: 91 tensors equal;cold load == load then refit;derived +absorbed MLA;refit: COMMITTED 2 update\\(s\\), verified 91 tensors"
               --topology ${HF_TTOPO}/deepseek-v3-tiny-b-hf-tp2-to-tp2.yaml --checkpoint ${DATA}/deepseek-v3-tiny-b
               --reference ${DATA}/deepseek-v3-tiny-b/tensors.reference.json --cold-check --steps 2)
refit_run_test(refit_run_hf_qwen3-next-tiny_tp2-to-tp2 4 ok
               "reassembly \\+ sha256 vs --reference: 154 tensors equal;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 154 tensors"
               --topology ${HF_TTOPO}/qwen3-next-tiny-hf-tp2-to-tp2.yaml --checkpoint ${DATA}/qwen3-next-tiny
               --reference ${DATA}/qwen3-next-tiny/tensors.reference.json --cold-check --steps 2)
refit_run_test(refit_run_hf_granitemoe_refused 4 fail
               "refit: FAILED: .*granitemoe-tiny-hf-refused.yaml: rollout.layout hf is not supported for granitemoe \\(model.layers.0.block_sparse_moe.input_linear.weight holds every expert fused"
               --topology ${HF_TTOPO}/granitemoe-tiny-hf-refused.yaml --checkpoint ${DATA}/granitemoe-tiny)
