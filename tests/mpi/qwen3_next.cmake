# Qwen3-Next (hybrid attention: Gated DeltaNet and gated full attention, MoE with a shared
# expert) in vLLM's engine layout: the transformers-written fixture end to end with --reference
# and --cold-check at rollout TP 1 and 2, EP 2 (p2p and broadcast), trainer TP 2 (its heads and
# key-head groups divide); its MTP tensors skipped; refusals; refit-plan on the full-size
# Qwen3-Next-80B-A3B config (counts: tests/data/SOURCES.md).
set(NEXT_TTOPO ${CMAKE_CURRENT_SOURCE_DIR}/topologies)
foreach(t "tp1-to-tp1;2" "tp2-to-tp2;4" "tp2-to-2xtp1;4" "tp1-to-tp2ep2-p2p;3" "tp2ep2-to-tp2ep2;4")
  list(GET t 0 topo)
  list(GET t 1 np)
  refit_run_test(refit_run_qwen3_next_tiny_${topo} ${np} ok
                 "reassembly \\+ sha256 vs --reference: 154 tensors equal;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 154 tensors"
                 --topology ${NEXT_TTOPO}/qwen3-next-tiny-${topo}.yaml --checkpoint ${DATA}/qwen3-next-tiny
                 --reference ${DATA}/qwen3-next-tiny/tensors.reference.json --cold-check --steps 2)
endforeach()

# colocated over ipc: the sectioned tensors are read whole by every rank (in place or staged)
refit_run_test(ipc_qwen3_next_tiny_tp2_to_tp2 4 ok
               "ipc transport;reassembly \\+ sha256 vs --reference: 154 tensors equal;refit: COMMITTED 2 update\\(s\\), verified 154 tensors"
               --topology ${NEXT_TTOPO}/qwen3-next-tiny-tp2-to-tp2-colocated-ipc.yaml
               --checkpoint ${DATA}/qwen3-next-tiny
               --reference ${DATA}/qwen3-next-tiny/tensors.reference.json --cold-check --steps 2)

# the device branches on the CPU (REFIT_TEST_DEVICE_ACCEL=host-device: staged payloads, batched
# row copies): conv1d's three copies per piece through them, DIRECT and LAYERWISE
foreach(case "auto;DIRECT 56" "layerwise;LAYERWISE 56")
  list(GET case 0 pol)
  list(GET case 1 re)
  refit_run_test(emu_refit_qwen3_next_tiny_tp2_${pol} 4 ok
                 "${re};refit: COMMITTED 2 update\\(s\\), verified 154 tensors"
                 --topology ${NEXT_TTOPO}/qwen3-next-tiny-tp2-to-tp2.yaml
                 --checkpoint ${DATA}/qwen3-next-tiny
                 --reference ${DATA}/qwen3-next-tiny/tensors.reference.json --steps 2 --cold-check
                 --reload-policy ${pol})
  set_tests_properties(emu_refit_qwen3_next_tiny_tp2_${pol} PROPERTIES LABELS "mpi;device-emu"
                       ENVIRONMENT "REFIT_TEST_DEVICE_ACCEL=host-device")
endforeach()

# mtp.* (multi-token prediction, no engine module): skipped with one log line; the fixture
# itself has none, and is valid without them
make_family_ckpt_test(next_mtp ${DATA}/qwen3-next-tiny qwen3-next-tiny-mtp --mtp)
refit_run_test(refit_run_qwen3_next_mtp_skipped 2 ok
               "skipped 3 tensor\\(s\\) on the skip list \\(first: mtp.fc.weight\\);reassembly \\+ sha256 vs --reference: 154 tensors equal;refit: COMMITTED 1 update\\(s\\), verified 154 tensors"
               --topology ${NEXT_TTOPO}/qwen3-next-tiny-tp1-to-tp1.yaml
               --checkpoint ${FAMCK}/qwen3-next-tiny-mtp
               --reference ${DATA}/qwen3-next-tiny/tensors.reference.json --steps 1)
set_tests_properties(refit_run_qwen3_next_mtp_skipped PROPERTIES FIXTURES_REQUIRED famck_next_mtp
                     ENVIRONMENT "REFIT_LOG_LEVEL=info")

# model.mtp: the MTP layer as vLLM's Qwen3NextMTP draft loads it (mtp.fc column parallel, three
# norms replicated, mtp.layers.0 a gated full-attention MoE layer sharded like the others):
# layer 3 copied to mtp.layers.0.* with new values and mtp.fc / the norms added by
# make_family_ckpt, at rollout TP 1 and 2 and EP 2 (p2p)
set(NEXT_MTP_ADD --add mtp.fc.weight 64 128 --add mtp.pre_fc_norm_hidden.weight 64
                 --add mtp.pre_fc_norm_embedding.weight 64 --add mtp.norm.weight 64)
make_family_ckpt_test(next_mtp_full ${DATA}/qwen3-next-tiny qwen3-next-tiny-mtp-full
                      --copy-layer model.layers.3. mtp.layers.0. ${NEXT_MTP_ADD} --reference)
foreach(t "tp1-to-tp1;2" "tp2-to-tp2;4" "tp1-to-tp2ep2-p2p;3")
  list(GET t 0 topo)
  list(GET t 1 np)
  refit_run_test(refit_run_qwen3_next_tiny_mtp_${topo} ${np} ok
                 "reassembly \\+ sha256 vs --reference: 195 tensors equal;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 195 tensors"
                 --topology ${NEXT_TTOPO}/qwen3-next-tiny-mtp-${topo}.yaml
                 --checkpoint ${FAMCK}/qwen3-next-tiny-mtp-full
                 --reference ${FAMCK}/qwen3-next-tiny-mtp-full/tensors.reference.json --cold-check --steps 2)
  set_tests_properties(refit_run_qwen3_next_tiny_mtp_${topo} PROPERTIES FIXTURES_REQUIRED famck_next_mtp_full)
endforeach()
# model.mtp on the fixture (no mtp.* tensors): refused naming the first missing tensor; an MTP
# layer the config does not have (mtp.layers.1.*) is no longer skipped but refused
refit_run_test(refit_run_qwen3_next_mtp_missing_refused 2 fail
               "refit: FAILED: .*tensor mtp.fc.weight is missing \\(an MTP layer's: the topology's model.mtp asks for them\\)"
               --topology ${NEXT_TTOPO}/qwen3-next-tiny-mtp-tp1-to-tp1.yaml --checkpoint ${DATA}/qwen3-next-tiny --steps 1)
make_family_ckpt_test(next_mtp_extra ${DATA}/qwen3-next-tiny qwen3-next-tiny-mtp-extra
                      --copy-layer model.layers.3. mtp.layers.0. ${NEXT_MTP_ADD}
                      --add mtp.layers.1.input_layernorm.weight 64)
refit_run_test(refit_run_qwen3_next_mtp_extra_refused 2 fail
               "refit: FAILED: .*tensor mtp.layers.1.input_layernorm.weight is not part of the qwen3_next model"
               --topology ${NEXT_TTOPO}/qwen3-next-tiny-mtp-tp1-to-tp1.yaml
               --checkpoint ${FAMCK}/qwen3-next-tiny-mtp-extra --steps 1)
set_tests_properties(refit_run_qwen3_next_mtp_extra_refused PROPERTIES FIXTURES_REQUIRED famck_next_mtp_extra)

# a checkpoint without one of a Gated DeltaNet layer's tensors: refused naming it
make_family_ckpt_test(next_drop ${DATA}/qwen3-next-tiny qwen3-next-tiny-no-conv1d
                      --drop model.layers.1.linear_attn.conv1d.weight)
refit_run_test(refit_run_qwen3_next_missing_conv1d_refused 2 fail
               "refit: FAILED: .*tensor model.layers.1.linear_attn.conv1d.weight is missing"
               --topology ${NEXT_TTOPO}/qwen3-next-tiny-tp1-to-tp1.yaml
               --checkpoint ${FAMCK}/qwen3-next-tiny-no-conv1d --steps 1)
set_tests_properties(refit_run_qwen3_next_missing_conv1d_refused PROPERTIES FIXTURES_REQUIRED famck_next_drop)

# topologies that cannot work, and quantization: refused at startup naming module and sizes
refit_run_test(refit_run_qwen3_next_rollout_tp4_refused 5 fail
               "refit: FAILED: .*rollout.tp: 4 .*model.layers.0.linear_attn.in_proj_qkvz: linear_num_key_heads 2 is not divisible by 4"
               --topology ${NEXT_TTOPO}/qwen3-next-tiny-tp1-to-tp4.yaml --checkpoint ${DATA}/qwen3-next-tiny)
refit_run_test(refit_run_qwen3_next_fp8_refused 2 fail
               "refit: FAILED: .*rollout.tp: fp8-block experts I_p 32 \\(moe_intermediate_size 32 / 1\\) is not a multiple of 128"
               --topology ${NEXT_TTOPO}/qwen3-next-tiny-fp8-block.yaml)
# fp8-block (Qwen3-Next-80B-A3B-Instruct-FP8's quantization_config, jobs/models/qwen3-next-tiny-fp8:
# in_proj_ba, the routers, the shared-expert gates and lm_head in modules_to_not_convert, kept
# bf16; in_proj_qkvz, out_proj, q / k / v / o, experts and the shared expert e4m3 + 128 x 128
# weight_scale_inv): the generator's bf16 weights (refit-convert --generate) quantized by
# make_deepseek_ckpt, at rollout TP 1, 2 and EP 2 with --reference and --cold-check; quantized on the
# trainer from the generator (the dequantization oracle)
set(NEXTCK ${CMAKE_BINARY_DIR}/qwen3-next-ckpt)
file(MAKE_DIRECTORY ${NEXTCK})
add_test(NAME make_qwen3_next_fp8_src
         COMMAND $<TARGET_FILE:refit-convert> --generate ${NEXT_TTOPO}/qwen3-next-tiny-fp8-tp1-to-tp1.yaml
                 --force ${NEXTCK}/fp8-src)
set_tests_properties(make_qwen3_next_fp8_src PROPERTIES LABELS mpi FIXTURES_SETUP nextck_fp8_src)
add_test(NAME make_qwen3_next_fp8 COMMAND make_deepseek_ckpt fp8 ${NEXTCK}/fp8-src ${NEXTCK}/fp8)
set_tests_properties(make_qwen3_next_fp8 PROPERTIES LABELS mpi FIXTURES_SETUP nextck_fp8
                     FIXTURES_REQUIRED nextck_fp8_src)
foreach(t "tp1-to-tp1;2;10" "tp2-to-tp2;4;20" "tp1-to-tp2ep2;3;20")
  list(GET t 0 topo)
  list(GET t 1 np)
  list(GET t 2 nq)
  refit_run_test(refit_run_qwen3_next_tiny_fp8_block_${topo} ${np} ok
                 "reassembly \\+ sha256 vs --reference: 90 tensors equal;dequant ${nq} modules;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 90 tensors"
                 --topology ${NEXT_TTOPO}/qwen3-next-tiny-fp8-${topo}.yaml --checkpoint ${NEXTCK}/fp8
                 --reference ${NEXTCK}/fp8/tensors.reference.json --cold-check --steps 2)
  set_tests_properties(refit_run_qwen3_next_tiny_fp8_block_${topo} PROPERTIES FIXTURES_REQUIRED nextck_fp8)
endforeach()
refit_run_test(refit_run_qwen3_next_tiny_fp8_block_generator 4 ok
               "dequant 20 modules;refit: COMMITTED 2 update\\(s\\), verified 90 tensors"
               --topology ${NEXT_TTOPO}/qwen3-next-tiny-fp8-tp2-to-tp2.yaml --cold-check --steps 2)
# fp8-block where it cannot work: in_proj_ba not in modules_to_not_convert (8 rows, no whole
# block), wna16 (no layout for the sectioned tensors); refit-plan, no ranks
foreach(case "fp8-ba;model.layers.0.linear_attn.in_proj_ba is fp8-block but its 8 rows \\(2 x linear_num_value_heads\\) are not whole 128 x 128 fp8 blocks"
             "wna16;qwen3_next is reloaded unquantized or fp8-block only \\(quantization wna16 asked\\)")
  list(GET case 0 t)
  list(GET case 1 re)
  add_test(NAME refit_plan_qwen3_next_tiny_${t}_refused
           COMMAND ${EXPECT} fail "${re}" -- $<TARGET_FILE:refit-plan>
                   --topology ${NEXT_TTOPO}/qwen3-next-tiny-${t}-refused.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_qwen3_next_tiny_${t}_refused PROPERTIES LABELS plan TIMEOUT 120)
endforeach()

# refit-plan on the full-size config: tensors, elements and modules (DIRECT / RUNTIME_VIEW /
# LAYERWISE / applications / declined / layers per rollout rank) as tests/data/SOURCES.md works
# them out; at EP 2 each rank declines the other's 256 experts x 3 x 48 layers
foreach(case "tp2;2 +0 +0 +0 +0 +639 +0 +0 +74391 +0 +639"
             "tp2ep2;2 +0 +0 +0 +0 +639 +0 +0 +37527 +36864 +639")
  list(GET case 0 t)
  list(GET case 1 counts)
  add_test(NAME refit_plan_qwen3_next_80b_a3b_${t}
           COMMAND ${EXPECT} ok "refit-plan: qwen3-next-80b-a3b-${t}: qwen3_next Qwen3NextForCausalLM, 48 layers, 74391 tensors, 79674391296 checkpoint elements"
                   "^ +${counts} " -- $<TARGET_FILE:refit-plan>
                   --topology ${TOPO}/plan/qwen3-next-80b-a3b-${t}.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_qwen3_next_80b_a3b_${t} PROPERTIES LABELS plan TIMEOUT 120)
endforeach()
# with model.mtp: the real checkpoint's 75,944 tensors and 81,324,862,720 values (its 1,553
# mtp.* tensors in the inventory), 15 more engine modules (mtp.fc, three norms, a full-attention
# layer's 11)
add_test(NAME refit_plan_qwen3_next_80b_a3b_mtp_tp2
         COMMAND ${EXPECT} ok "refit-plan: qwen3-next-80b-a3b-mtp-tp2: qwen3_next Qwen3NextForCausalLM, 48 layers, 75944 tensors, 81324862720 checkpoint elements"
                 "^ +2 +0 +0 +0 +0 +654 +0 +0 +75944 +0 +654 " -- $<TARGET_FILE:refit-plan>
                 --topology ${TOPO}/plan/qwen3-next-80b-a3b-mtp-tp2.yaml
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(refit_plan_qwen3_next_80b_a3b_mtp_tp2 PROPERTIES LABELS plan TIMEOUT 120)
# fp8-block at full size (Qwen3-Next-80B-A3B-Instruct-FP8's modules_to_not_convert): one F32
# weight_scale_inv more per quantized linear, 73,992 of them (4,821,504 values); in_proj_ba and
# the gates stay bf16 (tests/data/SOURCES.md)
add_test(NAME refit_plan_qwen3_next_80b_a3b_fp8_block_tp2
         COMMAND ${EXPECT} ok "refit-plan: qwen3-next-80b-a3b-fp8-block-tp2: qwen3_next Qwen3NextForCausalLM, 48 layers, 148383 tensors, 79679212800 checkpoint elements; quantization fp8-block"
                 "^ +2 +0 +0 +0 +0 +639 +0 +0 +148383 +0 +639 " -- $<TARGET_FILE:refit-plan>
                 --topology ${TOPO}/plan/qwen3-next-80b-a3b-fp8-block-tp2.yaml
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(refit_plan_qwen3_next_80b_a3b_fp8_block_tp2 PROPERTIES LABELS plan TIMEOUT 120)
# both: the MTP layer's 1,553 tensors plus the scales of its 1,543 quantized linears (mtp.fc bf16)
add_test(NAME refit_plan_qwen3_next_80b_a3b_fp8_block_mtp_tp2
         COMMAND ${EXPECT} ok "refit-plan: qwen3-next-80b-a3b-fp8-block-mtp-tp2: qwen3_next Qwen3NextForCausalLM, 48 layers, 151479 tensors, 81329784384 checkpoint elements; quantization fp8-block"
                 "^ +2 +0 +0 +0 +0 +654 +0 +0 +151479 +0 +654 " -- $<TARGET_FILE:refit-plan>
                 --topology ${TOPO}/plan/qwen3-next-80b-a3b-fp8-block-mtp-tp2.yaml
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(refit_plan_qwen3_next_80b_a3b_fp8_block_mtp_tp2 PROPERTIES LABELS plan TIMEOUT 120)
