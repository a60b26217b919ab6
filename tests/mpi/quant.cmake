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
# --reference of a bf16 checkpoint on a quantized topology: the engine will hold what the
# trainer quantizes, which such a reference cannot describe: refused at setup (not at update
# 1's verification), naming the file, the quantization and the first tensor
refit_run_test(refit_run_fp8_tiny_bf16_reference_refused 2 fail
               "refit: FAILED: ${DATA}/qwen3-fp8-tiny/bf16-source/tensors.reference.json: under the topology's quantization fp8-block the trainer quantizes 28 tensor\\(s\\) from the checkpoint's BF16 weights, .*\\(first: model.layers.0.mlp.down_proj.weight, BF16 in the reference, F8_E4M3 on the engine\\)"
               --topology ${TOPO}/qwen3-fp8-tiny-tp1-to-tp1.yaml --checkpoint ${DATA}/qwen3-fp8-tiny/bf16-source
               --reference ${DATA}/qwen3-fp8-tiny/bf16-source/tensors.reference.json --steps 2)
refit_run_test(refit_run_moe_tiny_wna16_bf16_reference_refused 2 fail
               "refit: FAILED: ${DATA}/qwen3-moe-tiny/tensors.reference.json: under the topology's quantization wna16 the trainer quantizes 168 tensor\\(s\\) .*\\(first: model.layers.0.self_attn.k_proj.weight_packed, not in the reference, I32 on the engine\\)"
               --topology ${TTOPO}/qwen3-moe-tiny-wna16-triton-tp1ep1.yaml --checkpoint ${DATA}/qwen3-moe-tiny
               --reference ${DATA}/qwen3-moe-tiny/tensors.reference.json --steps 1)
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

# Quantized modules and scales (docs/faults.md): checkpoints written at test time by
# make_quant_ckpt from the fixtures; the linear changed is model.layers.0.self_attn.q_proj.
add_executable(make_quant_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/make_quant_ckpt.c)
target_link_libraries(make_quant_ckpt PRIVATE refit)
set(QCK ${CMAKE_BINARY_DIR}/quant-ckpt)
foreach(case "mixed;${DATA}/qwen3-fp8-tiny;${DATA}/qwen3-fp8-tiny/bf16-source;${QCK}/mixed"
             "no-scale;${DATA}/qwen3-fp8-tiny;${QCK}/no-scale"
             "bf16-scales;${DATA}/qwen3-fp8-tiny;${QCK}/bf16-scales"
             "bad-scale;nan;${DATA}/qwen3-fp8-tiny;${QCK}/scale-nan"
             "bad-scale;inf;${DATA}/qwen3-fp8-tiny;${QCK}/scale-inf"
             "bad-scale;zero;${DATA}/qwen3-fp8-tiny;${QCK}/scale-zero"
             "bad-scale;neg;${DATA}/qwen3-fp8-tiny;${QCK}/scale-neg"
             "inf-weight;${DATA}/qwen3-fp8-tiny/bf16-source;${QCK}/inf-weight"
             "stale-packed;${DATA}/qwen3-moe-tiny;${QCK}/stale-packed"
             "stale-scale;${DATA}/qwen3-moe-tiny;${QCK}/stale-scale")
  list(GET case -1 out)
  get_filename_component(fx ${out} NAME)
  add_test(NAME make_quant_ckpt_${fx} COMMAND make_quant_ckpt ${case})
  set_tests_properties(make_quant_ckpt_${fx} PROPERTIES LABELS mpi FIXTURES_SETUP qck_${fx})
endforeach()
# qck_test(NAME FIXTURE NP ok|fail "REGEX..." refit-run-args...): INFO lines shown
function(qck_test name fx np want regex)
  refit_run_test(${name} ${np} ${want} "${regex}" ${ARGN})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED qck_${fx} ENVIRONMENT REFIT_LOG_LEVEL=info)
endfunction()
set(FP8_TOPO --topology ${TOPO}/qwen3-fp8-tiny-tp1-to-tp1.yaml)
# one linear stored as the bf16 weight next to its stale F32 scale: quantized whole on the
# trainer (the oracle checks the rollout's scale is the quantizer's), the stale scale ignored
qck_test(refit_run_fp8_mixed_linear_trainer_quantized mixed 2 ok
         "stored unquantized are quantized on the trainer, their stored scales ignored \\(first: model.layers.0.self_attn.q_proj\\);refit: COMMITTED 2 update\\(s\\), verified 39 tensors"
         ${FP8_TOPO} --checkpoint ${QCK}/mixed --steps 2 --cold-check)
# an fp8 weight stored without its scale: refused at manifest build, naming the linear
qck_test(refit_run_fp8_weight_without_scale_refused no-scale 2 fail
         "refit: FAILED: .*quantized linear model.layers.0.self_attn.q_proj stores its weight quantized but tensor model.layers.0.self_attn.q_proj.weight_scale_inv is missing"
         ${FP8_TOPO} --checkpoint ${QCK}/no-scale --steps 1)
# bf16 scales: stored updates widen them exactly (--reference narrows them back), trainer-
# quantized (generator) updates carry exact fp32 scales; and the scalar oracle on them
qck_test(refit_run_fp8_bf16_scales_reference bf16-scales 2 ok
         "refit: COMMITTED 3 update\\(s\\), verified 39 tensors"
         ${FP8_TOPO} --checkpoint ${QCK}/bf16-scales --reference ${QCK}/bf16-scales/tensors.reference.json
         --steps 3 --cold-check)
qck_test(refit_run_fp8_bf16_scales_oracle bf16-scales 2 ok "refit: COMMITTED 2 update\\(s\\), verified 39 tensors"
         ${FP8_TOPO} --checkpoint ${QCK}/bf16-scales --steps 2)
# a stored scale that is NaN / inf / 0 / negative: refused by the trainer before any chunk
foreach(k "nan;-?nan" "inf;inf" "zero;0" "neg;-0.001")
  list(GET k 0 kind)
  list(GET k 1 shown)
  qck_test(refit_run_fp8_scale_${kind}_refused scale-${kind} 2 fail
           "applications 0,;refit: FAILED: update 1: .*stored model.layers.0.self_attn.q_proj.weight_scale_inv element 1 \\(row 0, column 1\\) is ${shown}: quantization scales must be finite and positive"
           ${FP8_TOPO} --checkpoint ${QCK}/scale-${kind} --steps 1)
endforeach()
# a bf16 source weight holding +inf: the trainer refuses to quantize it, naming the element
qck_test(refit_run_fp8_bf16_source_inf_refused inf-weight 2 fail
         "applications 0,;refit: FAILED: update 1: .*model.layers.0.self_attn.q_proj.weight element 5 \\(row 0, column 5\\) is inf: a weight the trainer quantizes must be finite"
         ${FP8_TOPO} --checkpoint ${QCK}/inf-weight --steps 1)
# wna16: a bf16 weight next to a stale weight_packed is refused; next to a stale weight_scale
# it is quantized on the trainer and the scale ignored
set(WNA16_TOPO --topology ${TTOPO}/qwen3-moe-tiny-wna16-triton-tp1ep1.yaml)
qck_test(refit_run_wna16_stale_packed_refused stale-packed 2 fail
         "refit: FAILED: .*quantized linear model.layers.0.self_attn.q_proj stores both model.layers.0.self_attn.q_proj.weight_packed \\(I32\\) and model.layers.0.self_attn.q_proj.weight \\(BF16\\)"
         ${WNA16_TOPO} --checkpoint ${QCK}/stale-packed --steps 1)
qck_test(refit_run_wna16_stale_scale_trainer_quantized stale-scale 2 ok
         "their stored scales ignored \\(first: model.layers.0.self_attn.q_proj\\);refit: COMMITTED 2 update\\(s\\), verified 181 tensors"
         ${WNA16_TOPO} --checkpoint ${QCK}/stale-scale --steps 2)
# --reference on that checkpoint: the trainer-quantized linear is named as such, not as a
# missing F8_E4M3 -> BF16 conversion
qck_test(refit_run_fp8_mixed_linear_reference_names_it mixed 2 fail
         "refit: FAILED: update 1: verification: .*reassembled model.layers.0.self_attn.q_proj.weight \\(F8_E4M3 quantized by the trainer from the checkpoint's BF16 model.layers.0.self_attn.q_proj.weight\\) has sha256"
         ${FP8_TOPO} --checkpoint ${QCK}/mixed --reference ${DATA}/qwen3-fp8-tiny/tensors.reference.json --steps 1)

# fp8-tensor / fp8-channel ("FP8 dynamic", docs/formats.md): llama-tiny quantized at test time by
# make_fp8_ckpt into build/fp8-ckpt/<strategy>-<scale dtype>/, per-tensor and per-channel scales
# in F32 and BF16 (per-tensor BF16 ones stored as 0-d scalars), trainer TP 2 -> rollout TP 1 and
# 2: odd updates carry the checkpoint (--reference: reassembly + sha256; fused per-tensor modules
# compared requantized to their max shard scale), even ones generator weights the trainer
# quantizes (scalar oracle + dequantization oracle), --cold-check on every update.
add_executable(make_fp8_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/make_fp8_ckpt.c)
target_link_libraries(make_fp8_ckpt PRIVATE refit)
set(F8CK ${CMAKE_BINARY_DIR}/fp8-ckpt)
foreach(q tensor channel)
  foreach(sdt f32 bf16)
    add_test(NAME make_fp8_ckpt_${q}_${sdt}
             COMMAND make_fp8_ckpt ${q} ${sdt} ${DATA}/llama-tiny ${F8CK}/${q}-${sdt})
    set_tests_properties(make_fp8_ckpt_${q}_${sdt} PROPERTIES LABELS mpi FIXTURES_SETUP f8ck_${q}_${sdt})
  endforeach()
endforeach()
foreach(q tensor channel)
  if(q STREQUAL tensor)
    set(modes "LAYERWISE 6;30 fp8 requantized to the max shard scale") # qkv_proj, gate_up_proj x 3
  else()
    set(modes "DIRECT 21  RUNTIME_VIEW 0  LAYERWISE 0")
  endif()
  foreach(sdt f32 bf16)
    foreach(r 1 2)
      math(EXPR np "2 + ${r}")
      set(n refit_run_fp8_${q}_${sdt}_tp2_to_tp${r})
      refit_run_test(${n} ${np} ok "refit: COMMITTED 3 update\\(s\\), verified 51 tensors;${modes};dequant"
                     --topology ${TTOPO}/llama-tiny-fp8-${q}-tp2-to-tp${r}.yaml --checkpoint ${F8CK}/${q}-${sdt}
                     --reference ${F8CK}/${q}-${sdt}/tensors.reference.json --steps 3 --cold-check)
      set_tests_properties(${n} PROPERTIES FIXTURES_REQUIRED f8ck_${q}_${sdt})
    endforeach()
  endforeach()
  # colocated ipc, host arenas and (device-emu) device arenas: the pieces a rollout rank reads in
  # place from its pair (the per-tensor scales every rank holds), the trainers' device quantizer
  # path (fp8_quantize_rows) and the owner's device branch (fp8_requant)
  foreach(emu "" _emu)
    set(n refit_run_fp8_${q}_colocated_ipc${emu})
    refit_run_test(${n} 4 ok "refit: COMMITTED 3 update\\(s\\), verified 51 tensors;ipc"
                   --topology ${TTOPO}/llama-tiny-fp8-${q}-tp2-to-tp2-colocated-ipc.yaml
                   --checkpoint ${F8CK}/${q}-bf16 --reference ${F8CK}/${q}-bf16/tensors.reference.json
                   --steps 3 --cold-check)
    set_tests_properties(${n} PROPERTIES FIXTURES_REQUIRED f8ck_${q}_bf16)
    if(emu)
      set_tests_properties(${n} PROPERTIES LABELS "mpi;device-emu"
                           ENVIRONMENT "REFIT_TEST_DEVICE_ACCEL=host-device")
    endif()
  endforeach()
endforeach()
refit_run_test(refit_run_fp8_tensor_p2p 4 ok "refit: COMMITTED 3 update\\(s\\), verified 51 tensors;LAYERWISE 6"
               --topology ${TTOPO}/llama-tiny-fp8-tensor-tp2-to-tp2-p2p.yaml --checkpoint ${F8CK}/tensor-f32
               --reference ${F8CK}/tensor-f32/tensors.reference.json --steps 3 --cold-check)
set_tests_properties(refit_run_fp8_tensor_p2p PROPERTIES FIXTURES_REQUIRED f8ck_tensor_f32)
# bad weight_scale of model.layers.0.self_attn.q_proj: NaN / 0 refused by the trainer before any
# chunk moves, a wrong shape ([2] per tensor, [N] per channel) at manifest build, naming it
foreach(case "nan;tensor;f32;stored model.layers.0.self_attn.q_proj.weight_scale element 0 \\(row 0, column 0\\) is -?nan: quantization scales must be finite and positive"
             "zero;channel;bf16;stored model.layers.0.self_attn.q_proj.weight_scale element 0 \\(row 0, column 0\\) is 0: quantization scales must be finite and positive"
             "shape;tensor;bf16;tensor model.layers.0.self_attn.q_proj.weight_scale has a different shape than the model config implies"
             "shape;channel;f32;tensor model.layers.0.self_attn.q_proj.weight_scale has a different shape than the model config implies")
  list(GET case 0 bad)
  list(GET case 1 q)
  list(GET case 2 sdt)
  list(GET case 3 msg)
  add_test(NAME make_fp8_ckpt_${q}_${sdt}_bad_${bad}
           COMMAND make_fp8_ckpt ${q} ${sdt} ${DATA}/llama-tiny ${F8CK}/${q}-${sdt}-bad-${bad} bad ${bad})
  set_tests_properties(make_fp8_ckpt_${q}_${sdt}_bad_${bad} PROPERTIES LABELS mpi
                       FIXTURES_SETUP f8ck_${q}_${sdt}_bad_${bad})
  set(pre "")
  if(NOT bad STREQUAL shape)
    set(pre "applications 0,;") # refused before any chunk is posted
  endif()
  refit_run_test(refit_run_fp8_${q}_scale_${bad}_refused 3 fail "${pre}refit: FAILED: .*${msg}"
                 --topology ${TTOPO}/llama-tiny-fp8-${q}-tp2-to-tp1.yaml
                 --checkpoint ${F8CK}/${q}-${sdt}-bad-${bad} --steps 1)
  set_tests_properties(refit_run_fp8_${q}_scale_${bad}_refused PROPERTIES
                       FIXTURES_REQUIRED f8ck_${q}_${sdt}_bad_${bad})
endforeach()

# refit-plan, Llama-3.1-8B full size at rollout TP 2 (counts by hand, docs/formats.md):
# 195 layers = 32 x (2 norms, qkv, o, gate_up, down) + embedding, final norm, lm_head;
# 515 applications = 291 tensors + 7 x 32 weight_scale; fp8-tensor: qkv + gate_up = 64
# LAYERWISE, fp8-channel: none. Reserved bytes per rank: every slot rounded up to 256 bytes
# plus 256 per layer's arena: embedding and lm_head 64128 x 4096 x 2 each, norms 8192, per
# layer e4m3 qkv 3072 x 4096 + o 4096 x 2048 + gate_up 14336 x 4096 + down 4096 x 7168 and the
# scales: fp8-tensor 4 x 256 -> 4540949248; fp8-channel (3072 + 4096 + 14336 + 4096) x 4 ->
# 4544193280.
foreach(case "tensor;131 +0 +64;4540949248" "channel;195 +0 +0;4544193280")
  list(GET case 0 q)
  list(GET case 1 modes)
  list(GET case 2 bytes)
  add_test(NAME refit_plan_llama_3_1_8b_fp8_${q}_tp2
           COMMAND ${EXPECT} ok " 1 +0 +0 +0 +0 +${modes} +515 +0 +195 +${bytes}"
                   " 2 +0 +1 +0 +0 +${modes} +515 +0 +195 +${bytes}"
                   -- $<TARGET_FILE:refit-plan> --topology ${TOPO}/plan/llama-3.1-8b-fp8-${q}-tp2.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_llama_3_1_8b_fp8_${q}_tp2 PROPERTIES LABELS plan TIMEOUT 120)
endforeach()
# ... and from llama-tiny's bf16 weights, quantized on the trainer at TP 2 (real weights: the
# generator's amax is the same in every slice, these are not): every trainer rank takes the
# scale of the whole tensor / row, whatever its slice, or the scalar oracle finds the bytes
foreach(case "tensor;2" "channel;1")
  list(GET case 0 q)
  list(GET case 1 r)
  math(EXPR np "2 + ${r}")
  refit_run_test(refit_run_fp8_${q}_bf16_source_tp2_to_tp${r} ${np} ok
                 "refit: COMMITTED 2 update\\(s\\), verified 51 tensors;dequant"
                 --topology ${TTOPO}/llama-tiny-fp8-${q}-tp2-to-tp${r}.yaml --checkpoint ${DATA}/llama-tiny
                 --steps 2 --cold-check)
endforeach()
