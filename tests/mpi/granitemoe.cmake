# GraniteMoE (PowerMoE) in vLLM's engine layout: experts stored fused as 3-D tensors
# (block_sparse_moe.input_linear [E, 2I, H], output_linear [E, H, I]) sliced per expert (EP)
# and per TP rank into FusedMoE w13 / w2, the router renamed to block_sparse_moe.gate. The
# transformers-written fixture end to end with --reference and --cold-check at rollout TP 1
# and 2, EP 2, trainer TP 2 (its 4 heads, 2 kv heads and 8 experts divide), broadcast and p2p;
# the device branches on the CPU; refusals; refit-plan on full-size PowerMoE-3B (counts:
# tests/data/SOURCES.md).
set(GRANITE_TTOPO ${CMAKE_CURRENT_SOURCE_DIR}/topologies)
set(GRANITE_DATA ${DATA}/granitemoe-tiny)
foreach(t "tp1-to-tp1;2" "tp2-to-tp2;4" "tp2-to-2xtp1;4" "tp2-to-tp2ep2;4" "tp1-to-tp2ep2-p2p;3"
          "tp2-to-tp2-p2p;4")
  list(GET t 0 topo)
  list(GET t 1 np)
  refit_run_test(refit_run_granitemoe-tiny_${topo} ${np} ok
                 "reassembly \\+ sha256 vs --reference: 21 tensors equal;refit: COMMITTED 2 update\\(s\\), verified 21 tensors"
                 --topology ${GRANITE_TTOPO}/granitemoe-tiny-${topo}.yaml --checkpoint ${GRANITE_DATA}
                 --reference ${GRANITE_DATA}/tensors.reference.json --cold-check --steps 2)
endforeach()

# the device branches on the CPU (REFIT_TEST_DEVICE_ACCEL=host-device: staged payloads, batched
# row copies), 5 KiB chunks: input_linear's pieces as one strided copy of whole gate / up
# blocks plus partial blocks at both ends, through them, DIRECT and LAYERWISE
foreach(case "auto;DIRECT 15" "layerwise;LAYERWISE 15")
  list(GET case 0 pol)
  list(GET case 1 re)
  refit_run_test(emu_refit_granitemoe_tiny_tp2_${pol} 4 ok
                 "${re};refit: COMMITTED 2 update\\(s\\), verified 21 tensors"
                 --topology ${GRANITE_TTOPO}/granitemoe-tiny-tp2-to-tp2-5k.yaml --checkpoint ${GRANITE_DATA}
                 --reference ${GRANITE_DATA}/tensors.reference.json --steps 2 --cold-check
                 --reload-policy ${pol})
  set_tests_properties(emu_refit_granitemoe_tiny_tp2_${pol} PROPERTIES LABELS "mpi;device-emu"
                       ENVIRONMENT "REFIT_TEST_DEVICE_ACCEL=host-device")
endforeach()

# topologies that cannot work: refused before anything moves, naming the module (or key) and
# sizes (refit-plan runs the same checks as refit-run's startup, without MPI)
foreach(case
    "tp1-to-tp2ep2-rr;model.layers.0.block_sparse_moe.experts: rollout.expert_placement round_robin is not supported for experts stored fused in model.layers.0.block_sparse_moe.input_linear.weight \\(8 experts in one tensor; use linear\\)"
    "tp1-to-dp3;model.layers.0.block_sparse_moe.experts: moe_intermediate_size 32 is not divisible by 3"
    "tp1-to-tp8;model.layers.0.self_attn.qkv_proj: num_attention_heads 4 is not divisible by 8"
    "ep2-to-tp1;trainer.ep: 2: granitemoe stores its experts fused \\(block_sparse_moe.input_linear / output_linear, 8 experts in one tensor\\)"
    "fp8-block;model.quantization: granitemoe is reloaded unquantized only \\(quantization fp8-block asked\\)")
  list(GET case 0 topo)
  list(GET case 1 re)
  add_test(NAME refit_plan_granitemoe_${topo}_refused
           COMMAND ${EXPECT} fail "${re}" -- $<TARGET_FILE:refit-plan>
                   --topology ${GRANITE_TTOPO}/granitemoe-tiny-${topo}.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_granitemoe_${topo}_refused PROPERTIES LABELS plan TIMEOUT 60)
endforeach()

# refit-plan on full-size PowerMoE-3B (tied head, 40 experts): tensors, elements and modules
# (DIRECT / RUNTIME_VIEW / LAYERWISE / applications / declined / layers per rollout rank) as
# tests/data/SOURCES.md works them out; fused expert tensors are never declined, EP or not
foreach(case "tp2;0" "tp2ep2;1")
  list(GET case 0 n)
  list(GET case 1 ep1)
  add_test(NAME refit_plan_powermoe-3b-${n}
           COMMAND ${EXPECT} ok
                   "refit-plan: powermoe-3b-${n}: granitemoe GraniteMoeForCausalLM, 32 layers, 290 tensors, 3298788864 checkpoint elements"
                   "^ +3 +0 +1 +0 +${ep1} +194 +0 +0 +290 +0 +194 "
                   -- $<TARGET_FILE:refit-plan> --topology ${TOPO}/plan/powermoe-3b-${n}.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_powermoe-3b-${n} PROPERTIES LABELS plan TIMEOUT 120)
endforeach()
