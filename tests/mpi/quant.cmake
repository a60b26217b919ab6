# Quantized formats and MoE end to end (label mpi; the Qwen3-30B-A3B shapes also slow):
# every update COMMITTED and verified by the scalar oracle (reference quantizer, dequant check)
# or by reassembly + sha256, and cold load == load then refit (--cold-check).

# qwen3-fp8-tiny (written by transformers' FP8 quantizer): as stored with --reference at TP 1,
# on triton (DIRECT) and rocm-fnuz (LAYERWISE); its bf16 source quantized on the trainer
refit_run_test(refit_run_fp8_tiny_stored_triton 2 ok "refit: COMMITTED 3 update\\(s\\), verified 39 tensors;LAYERWISE 0"
               --topology ${TOPO}/qwen3-fp8-tiny-tp1-to-tp1.yaml --checkpoint ${DATA}/qwen3-fp8-tiny
               --reference ${DATA}/qwen3-fp8-tiny/tensors.reference.json --steps 3 --cold-check)
refit_run_test(refit_run_fp8_tiny_stored_fnuz 2 ok "refit: COMMITTED 3 update\\(s\\);LAYERWISE 8;14 fp8 under 0x80->0x00"
               --topology ${TTOPO}/qwen3-fp8-tiny-fnuz.yaml --checkpoint ${DATA}/qwen3-fp8-tiny
               --reference ${DATA}/qwen3-fp8-tiny/tensors.reference.json --steps 3 --cold-check)
refit_run_test(refit_run_fp8_tiny_bf16_source 2 ok "refit: COMMITTED 2 update\\(s\\), verified 39 tensors;dequant 8 modules"
               --topology ${TOPO}/qwen3-fp8-tiny-tp1-to-tp1.yaml --checkpoint ${DATA}/qwen3-fp8-tiny/bf16-source
               --steps 2 --cold-check)
refit_run_test(refit_run_fp8_tiny_tp2_refused 3 fail "refit: FAILED: .*puts a tp boundary inside a 128-row fp8 block"
               --topology ${TTOPO}/qwen3-fp8-tiny-tp1-to-tp2.yaml --checkpoint ${DATA}/qwen3-fp8-tiny)

# qwen3-moe-tiny (bf16 MoE, sharded): bf16 with EP off / on, linear / round_robin placement
foreach(t tp1-to-tp2ep1-linear tp1-to-tp2ep1-round_robin tp1-to-tp2ep2-linear tp1-to-tp2ep2-round_robin)
  refit_run_test(refit_run_moe_tiny_${t} 3 ok "refit: COMMITTED 3 update\\(s\\), verified 69 tensors"
                 --topology ${TOPO}/qwen3-moe-tiny-${t}.yaml --checkpoint ${DATA}/qwen3-moe-tiny
                 --reference ${DATA}/qwen3-moe-tiny/tensors.reference.json --steps 3 --cold-check)
endforeach()
# ... quantized to wna16 (group 32) on the trainer, triton (experts RUNTIME_VIEW) and marlin
foreach(case "triton-tp1ep1;2;RUNTIME_VIEW 2" "triton-tp2ep2;3;RUNTIME_VIEW 2" "marlin-tp1ep1;2;LAYERWISE 6"
             "marlin-tp2ep2;3;LAYERWISE 6")
  list(GET case 0 t)
  list(GET case 1 np)
  list(GET case 2 modes)
  refit_run_test(refit_run_moe_tiny_wna16_${t} ${np} ok "refit: COMMITTED 2 update\\(s\\), verified 181 tensors;${modes}"
                 --topology ${TTOPO}/qwen3-moe-tiny-wna16-${t}.yaml --checkpoint ${DATA}/qwen3-moe-tiny
                 --steps 2 --cold-check)
endforeach()
# ... and refused under fp8-block (I_p 32 is not divisible by 128)
refit_run_test(refit_run_moe_tiny_fp8_refused 2 fail "refit: FAILED: .*I_p 32 .*not a multiple of 128"
               --topology ${TTOPO}/qwen3-moe-tiny-fp8.yaml --checkpoint ${DATA}/qwen3-moe-tiny)

# the Qwen3-30B-A3B shape, one layer (alignment rules bind), generator weights quantized on
# the trainer, rollout TP2 and TP2/EP2 for wna16 (triton, marlin) and fp8-block (triton, rocm-fnuz)
foreach(q wna16-triton wna16-marlin fp8-block-triton fp8-block-rocm-fnuz)
  foreach(ep tp2 tp2ep2)
    refit_run_test(refit_run_qwen3_30b_a3b_1l_${q}_${ep} 3 ok "refit: COMMITTED 2 update\\(s\\)"
                   --topology ${TOPO}/qwen3-30b-a3b-1l-${q}-${ep}.yaml --steps 2 --cold-check)
    set_tests_properties(refit_run_qwen3_30b_a3b_1l_${q}_${ep} PROPERTIES LABELS "mpi;slow")
  endforeach()
endforeach()

# refit-plan: full-size Qwen3-30B-A3B plans without touching memory (counts asserted)
foreach(case "wna16-triton-tp2;243 +48 +96 +56115 +0" "wna16-triton-tp2ep2;243 +48 +96 +28467 +27648"
             "wna16-marlin-tp2;243 +0 +144 +56115" "fp8-block-triton-tp2;387 +0 +0 +37491"
             "fp8-block-triton-tp2ep2;387 +0 +0 +19059 +18432" "fp8-block-rocm-fnuz-tp2;243 +0 +144 +37491")
  list(GET case 0 t)
  list(GET case 1 counts)
  add_test(NAME refit_plan_qwen3_30b_a3b_${t}
           COMMAND ${EXPECT} ok " 1 +0 +0 +0 +0 +${counts}" -- $<TARGET_FILE:refit-plan>
                   --topology ${TOPO}/plan/qwen3-30b-a3b-${t}.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_qwen3_30b_a3b_${t} PROPERTIES LABELS plan TIMEOUT 120)
endforeach()

# an FP8 source holding a NaN byte (0x7F) is refused (e4m3fnuz would make it finite)
add_executable(make_nan_fp8 ${CMAKE_CURRENT_SOURCE_DIR}/make_nan_fp8.c)
target_link_libraries(make_nan_fp8 PRIVATE refit)
add_test(NAME make_nan_fp8_checkpoint
         COMMAND make_nan_fp8 ${DATA}/qwen3-fp8-tiny ${CMAKE_BINARY_DIR}/nan-fp8-tiny)
set_tests_properties(make_nan_fp8_checkpoint PROPERTIES LABELS mpi FIXTURES_SETUP nan_fp8)
refit_run_test(refit_run_fp8_nan_refused 2 fail "NaN byte \\(0x7f\\).*fp8 sources must be finite"
               --topology ${TOPO}/qwen3-fp8-tiny-tp1-to-tp1.yaml
               --checkpoint ${CMAKE_BINARY_DIR}/nan-fp8-tiny --steps 1)
set_tests_properties(refit_run_fp8_nan_refused PROPERTIES FIXTURES_REQUIRED nan_fp8)
