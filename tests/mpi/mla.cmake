# DeepSeek-V3 / Moonlight (MLA) in vLLM's engine layout: the transformers-written fixture
# (q_lora_rank set) end to end with --reference and --cold-check at rollout TP 1 and 2, EP 2
# and trainer TP 2 (its 4 heads divide), both reload modes; the shapes DeepSeek's checkpoints
# come in (q_lora_rank null, F32 e_score_correction_bias, MTP layers, fp8-block) written by
# make_deepseek_ckpt; the absorbed W_UK_T / W_UV checked on every update by the oracle
# ("derived" line: equal to a recomputation from the loaded kv_b_proj, deferred stage once per
# layer); refusals; refit-plan on the full-size configs (counts: tests/data/SOURCES.md).
set(MLA_TTOPO ${CMAKE_CURRENT_SOURCE_DIR}/topologies)
set(MLA_DATA ${DATA}/deepseek-v3-tiny-b)
set(MLA_REF ${MLA_DATA}/tensors.reference.json)
# rank count, topology, derived slots checked per update (2 per kv_b_proj per rollout rank) and
# deferred-stage runs (one per MLA layer per rollout rank), summed over the rollout ranks
foreach(case "tp1-to-tp1;2;6;3" "tp2-to-tp2;4;12;6" "tp1-to-tp2-ep2;3;12;6" "tp2-to-2xtp1;4;12;6"
             "tp2-to-tp2-p2p;4;12;6")
  list(GET case 0 topo)
  list(GET case 1 np)
  list(GET case 2 nd)
  list(GET case 3 nr)
  refit_run_test(refit_run_deepseek_v3_tiny_b_${topo} ${np} ok
                 "reassembly \\+ sha256 vs --reference: 91 tensors equal;derived +absorbed MLA W_UK_T / W_UV: ${nd} slots == a recomputation from the loaded kv_b_proj; deferred stage ${nr} runs for ${nr} layers;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 91 tensors"
                 --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-${topo}.yaml --checkpoint ${MLA_DATA}
                 --reference ${MLA_REF} --cold-check --steps 2)
endforeach()
# the device branches on the CPU (REFIT_TEST_DEVICE_ACCEL=host-device): the deferred stage
# reads kv_b_proj device to host and writes W_UK_T / W_UV host to device, DIRECT and LAYERWISE
foreach(pol auto layerwise)
  refit_run_test(emu_refit_deepseek_v3_tiny_b_tp2_${pol} 4 ok
                 "derived +absorbed MLA W_UK_T / W_UV: 12 slots == a recomputation from the loaded kv_b_proj;refit: COMMITTED 2 update\\(s\\), verified 91 tensors"
                 --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-tp2-to-tp2.yaml --checkpoint ${MLA_DATA}
                 --reference ${MLA_REF} --cold-check --steps 2 --reload-policy ${pol})
  set_tests_properties(emu_refit_deepseek_v3_tiny_b_tp2_${pol} PROPERTIES LABELS "mpi;device-emu"
                       ENVIRONMENT "REFIT_TEST_DEVICE_ACCEL=host-device")
endforeach()

# LAYERWISE: the deferred stage still runs once per MLA layer, after the layer's processing
refit_run_test(refit_run_deepseek_v3_tiny_b_layerwise 4 ok
               "DIRECT 0  RUNTIME_VIEW 0  LAYERWISE 37;deferred stage 6 runs for 6 layers;refit: COMMITTED 3 update\\(s\\), verified 91 tensors"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-tp2-to-tp2.yaml --checkpoint ${MLA_DATA}
               --reference ${MLA_REF} --cold-check --steps 3 --reload-policy layerwise)

add_executable(make_deepseek_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/make_deepseek_ckpt.c)
target_link_libraries(make_deepseek_ckpt PRIVATE refit)
set(DSCK ${CMAKE_BINARY_DIR}/deepseek-ckpt)
# made here: refit-convert --generate (make_deepseek_ckpt_fp8_src) creates its OUT folder, not
# the parents, and may run before the other checkpoint writers on a fresh build tree
file(MAKE_DIRECTORY ${DSCK})
function(make_deepseek_ckpt_test name mode src)
  add_test(NAME make_deepseek_ckpt_${name} COMMAND make_deepseek_ckpt ${mode} ${src} ${DSCK}/${name})
  set_tests_properties(make_deepseek_ckpt_${name} PROPERTIES LABELS mpi FIXTURES_SETUP dsck_${name})
endfunction()

# q_lora_rank null (Moonlight): q_proj column parallel by heads, kv_a_proj_with_mqa replicated
make_deepseek_ckpt_test(noq noq ${MLA_DATA})
refit_run_test(refit_run_deepseek_v3_tiny_noq_tp2_to_tp2 4 ok
               "reassembly \\+ sha256 vs --reference: 85 tensors equal;derived +absorbed MLA W_UK_T / W_UV: 12 slots;refit: COMMITTED 2 update\\(s\\), verified 85 tensors"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-noq-tp2-to-tp2.yaml --checkpoint ${DSCK}/noq
               --reference ${DSCK}/noq/tensors.reference.json --cold-check --steps 2)
set_tests_properties(refit_run_deepseek_v3_tiny_noq_tp2_to_tp2 PROPERTIES FIXTURES_REQUIRED dsck_noq)

# e_score_correction_bias stored F32 (DeepSeek's releases) instead of the fixture's BF16: the
# same fp32 slot either way; the fixture runs above narrow it back to BF16 for --reference
make_deepseek_ckpt_test(f32bias f32-bias ${MLA_DATA})
refit_run_test(refit_run_deepseek_v3_tiny_f32_bias 3 ok
               "reassembly \\+ sha256 vs --reference: 91 tensors equal;refit: COMMITTED 2 update\\(s\\), verified 91 tensors"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-tp1-to-tp2-ep2.yaml --checkpoint ${DSCK}/f32bias
               --reference ${DSCK}/f32bias/tensors.reference.json --steps 2)
set_tests_properties(refit_run_deepseek_v3_tiny_f32_bias PROPERTIES FIXTURES_REQUIRED dsck_f32bias)

# an MTP layer as DeepSeek stores it (model.layers.3.*, num_nextn_predict_layers 1): skipped with
# one log line; the fixture itself has none and is valid too (the runs above)
make_deepseek_ckpt_test(mtp mtp ${MLA_DATA})
refit_run_test(refit_run_deepseek_v3_tiny_mtp_skipped 2 ok
               "skipped 6 tensor\\(s\\) on the skip list \\(first: model.layers.3.;reassembly \\+ sha256 vs --reference: 91 tensors equal;refit: COMMITTED 1 update\\(s\\), verified 91 of 97 tensors \\(6 skipped: on the skip list"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-tp1-to-tp1.yaml --checkpoint ${DSCK}/mtp
               --reference ${DSCK}/mtp/tensors.reference.json --steps 1)
set_tests_properties(refit_run_deepseek_v3_tiny_mtp_skipped PROPERTIES FIXTURES_REQUIRED dsck_mtp
                     ENVIRONMENT "REFIT_LOG_LEVEL=info")

# model.mtp: the MTP layer as vLLM's DeepSeekMTP draft loads it (embed_tokens and
# shared_head.head vocab parallel, enorm / hnorm / shared_head.norm and eh_proj full copies, a
# whole MoE decoder layer sharded like the others, its kv_b_proj absorbed too): layer 2 copied
# to model.layers.3.* with new values and the six MTP tensors added by make_family_ckpt, at
# rollout TP 1 and 2 and EP 2 (derived slots and deferred runs: 4 MLA layers per rollout rank)
make_family_ckpt_test(ds_mtp_full ${MLA_DATA} deepseek-v3-tiny-b-mtp-full
                      --copy-layer model.layers.2. model.layers.3.
                      --add model.layers.3.embed_tokens.weight 512 64 --add model.layers.3.enorm.weight 64
                      --add model.layers.3.hnorm.weight 64 --add model.layers.3.eh_proj.weight 64 128
                      --add model.layers.3.shared_head.norm.weight 64
                      --add model.layers.3.shared_head.head.weight 512 64 --reference)
foreach(case "tp1-to-tp1;2;8;4" "tp2-to-tp2;4;16;8" "tp1-to-tp2-ep2;3;16;8")
  list(GET case 0 topo)
  list(GET case 1 np)
  list(GET case 2 nd)
  list(GET case 3 nr)
  refit_run_test(refit_run_deepseek_v3_tiny_b_mtp_${topo} ${np} ok
                 "reassembly \\+ sha256 vs --reference: 135 tensors equal;derived +absorbed MLA W_UK_T / W_UV: ${nd} slots == a recomputation from the loaded kv_b_proj; deferred stage ${nr} runs for ${nr} layers;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 135 tensors"
                 --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-mtp-${topo}.yaml
                 --checkpoint ${FAMCK}/deepseek-v3-tiny-b-mtp-full
                 --reference ${FAMCK}/deepseek-v3-tiny-b-mtp-full/tensors.reference.json --cold-check --steps 2)
  set_tests_properties(refit_run_deepseek_v3_tiny_b_mtp_${topo} PROPERTIES FIXTURES_REQUIRED famck_ds_mtp_full)
endforeach()
# model.mtp on a checkpoint without the MTP layer, or with only part of it (the six tensors of
# the skip test above): refused naming the first missing tensor
refit_run_test(refit_run_deepseek_v3_tiny_b_mtp_missing_refused 2 fail
               "refit: FAILED: .*tensor model.layers.3.eh_proj.weight is missing \\(an MTP layer's: the topology's model.mtp asks for them\\)"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-mtp-tp1-to-tp1.yaml --checkpoint ${MLA_DATA} --steps 1)
refit_run_test(refit_run_deepseek_v3_tiny_b_mtp_partial_refused 2 fail
               "refit: FAILED: .*tensor model.layers.3.embed_tokens.weight is missing \\(an MTP layer's"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-mtp-tp1-to-tp1.yaml --checkpoint ${DSCK}/mtp --steps 1)
set_tests_properties(refit_run_deepseek_v3_tiny_b_mtp_partial_refused PROPERTIES FIXTURES_REQUIRED dsck_mtp)
# model.mtp where it cannot work: rollout.layout hf (transformers loads no MTP module), a family
# without MTP layers, a config with num_nextn_predict_layers 0 (Moonlight); refit-plan, no ranks
foreach(case "deepseek-v3-tiny-b-mtp-hf;model.mtp: rollout.layout hf has no MTP modules"
             "granitemoe-tiny-mtp;model.mtp: model_type granitemoe has no multi-token-prediction layers"
             "moonlight-16b-a3b-mtp;model.mtp: .*moonlight-16b-a3b-instruct.config.json says num_nextn_predict_layers 0")
  list(GET case 0 t)
  list(GET case 1 re)
  add_test(NAME refit_plan_${t}_refused
           COMMAND ${EXPECT} fail "${re}" -- $<TARGET_FILE:refit-plan>
                   --topology ${MLA_TTOPO}/${t}-refused.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_${t}_refused PROPERTIES LABELS plan TIMEOUT 120)
endforeach()

# fp8-block as DeepSeek-V3 publishes it (e4m3 + F32 weight_scale_inv 128 x 128, F32 correction
# bias): the generator's bf16 weights of the fp8 shape, quantized by make_deepseek_ckpt; the
# absorbed matrices dequantized from kv_b_proj in the deferred stage
add_test(NAME make_deepseek_ckpt_fp8_src
         COMMAND $<TARGET_FILE:refit-convert> --generate ${MLA_TTOPO}/deepseek-v3-tiny-fp8-tp1-to-tp2-ep2.yaml
                 --force ${DSCK}/fp8-src)
set_tests_properties(make_deepseek_ckpt_fp8_src PROPERTIES LABELS mpi FIXTURES_SETUP dsck_fp8_src)
make_deepseek_ckpt_test(fp8 fp8 ${DSCK}/fp8-src)
set_tests_properties(make_deepseek_ckpt_fp8 PROPERTIES FIXTURES_REQUIRED dsck_fp8_src)
refit_run_test(refit_run_deepseek_v3_tiny_fp8_block 3 ok
               "reassembly \\+ sha256 vs --reference: 69 tensors equal;derived +absorbed MLA W_UK_T / W_UV: 8 slots == a recomputation from the loaded kv_b_proj; deferred stage 4 runs for 4 layers;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 69 tensors"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-fp8-tp1-to-tp2-ep2.yaml --checkpoint ${DSCK}/fp8
               --reference ${DSCK}/fp8/tensors.reference.json --cold-check --steps 2)
set_tests_properties(refit_run_deepseek_v3_tiny_fp8_block PROPERTIES FIXTURES_REQUIRED dsck_fp8)
# the device branch of the fp8 deferred stage on the CPU (host-device): kv_b_proj dequantized
# where the slots live (rf_quant_ops_t.fp8_block_dequant), then permuted by row copies there
refit_run_test(emu_refit_deepseek_v3_tiny_fp8_block 3 ok
               "derived +absorbed MLA W_UK_T / W_UV: 8 slots == a recomputation from the loaded kv_b_proj; deferred stage 4 runs for 4 layers;refit: COMMITTED 2 update\\(s\\), verified 69 tensors"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-fp8-tp1-to-tp2-ep2.yaml --checkpoint ${DSCK}/fp8
               --reference ${DSCK}/fp8/tensors.reference.json --cold-check --steps 2)
set_tests_properties(emu_refit_deepseek_v3_tiny_fp8_block PROPERTIES FIXTURES_REQUIRED dsck_fp8
                     LABELS "mpi;device-emu" ENVIRONMENT "REFIT_TEST_DEVICE_ACCEL=host-device")
# the same with model.mtp: the generator's weights of the MTP inventory (refit-convert
# --generate), the MTP layer's decoder linears quantized by make_deepseek_ckpt like the others,
# eh_proj / embed_tokens / shared_head.head left bf16 (vLLM's nn.Linear and ParallelLMHead)
add_test(NAME make_deepseek_ckpt_fp8_mtp_src
         COMMAND $<TARGET_FILE:refit-convert> --generate ${MLA_TTOPO}/deepseek-v3-tiny-fp8-mtp-tp1-to-tp2-ep2.yaml
                 --force ${DSCK}/fp8-mtp-src)
set_tests_properties(make_deepseek_ckpt_fp8_mtp_src PROPERTIES LABELS mpi FIXTURES_SETUP dsck_fp8_mtp_src)
make_deepseek_ckpt_test(fp8_mtp fp8 ${DSCK}/fp8-mtp-src)
set_tests_properties(make_deepseek_ckpt_fp8_mtp PROPERTIES FIXTURES_REQUIRED dsck_fp8_mtp_src)
refit_run_test(refit_run_deepseek_v3_tiny_fp8_block_mtp 3 ok
               "reassembly \\+ sha256 vs --reference: 121 tensors equal;derived +absorbed MLA W_UK_T / W_UV: 12 slots == a recomputation from the loaded kv_b_proj; deferred stage 6 runs for 6 layers;cold load == load then refit;refit: COMMITTED 2 update\\(s\\), verified 121 tensors"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-fp8-mtp-tp1-to-tp2-ep2.yaml --checkpoint ${DSCK}/fp8_mtp
               --reference ${DSCK}/fp8_mtp/tensors.reference.json --cold-check --steps 2)
set_tests_properties(refit_run_deepseek_v3_tiny_fp8_block_mtp PROPERTIES FIXTURES_REQUIRED dsck_fp8_mtp)
# the same shape quantized on the trainer from the generator (no checkpoint): dequantization
# oracle and the derived slots
refit_run_test(refit_run_deepseek_v3_tiny_fp8_block_generator 3 ok
               "dequant 26 modules;derived +absorbed MLA W_UK_T / W_UV: 8 slots;refit: COMMITTED 2 update\\(s\\), verified 69 tensors"
               --topology ${MLA_TTOPO}/deepseek-v3-tiny-fp8-tp1-to-tp2-ep2.yaml --cold-check --steps 2)

# topologies that cannot work: refused naming module and sizes (refit-plan: no ranks needed)
foreach(case "tp1-to-tp8;rollout.tp: 8 .*model.layers.0.self_attn.q_b_proj: num_attention_heads 4 is not divisible by 8"
             "wna16;deepseek_v3 is reloaded unquantized or fp8-block only \\(quantization wna16 asked\\)")
  list(GET case 0 t)
  list(GET case 1 re)
  add_test(NAME refit_plan_deepseek_v3_tiny_${t}_refused
           COMMAND ${EXPECT} fail "${re}" -- $<TARGET_FILE:refit-plan>
                   --topology ${MLA_TTOPO}/deepseek-v3-tiny-b-${t}.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_deepseek_v3_tiny_${t}_refused PROPERTIES LABELS plan TIMEOUT 120)
endforeach()

# refit-plan on the full-size configs: tensors, elements and, per rollout rank, DIRECT /
# RUNTIME_VIEW / LAYERWISE / applications / declined / layers, as tests/data/SOURCES.md works
# them out (DeepSeek-V3: 8 rollout ranks, each row checked by the first one's regex)
foreach(case "moonlight-16b-a3b-tp2;deepseek_v3 DeepseekV3ForCausalLM, 27 layers, 5317 tensors, 15960110208 checkpoint elements;2 +0 +0 +0 +0 +298 +0 +0 +5317 +0 +298"
             "deepseek-v3-fp8-block-tp8ep8;deepseek_v3 DeepseekV3ForCausalLM, 61 layers, 90427 tensors, 671067257432 checkpoint elements;8 +0 +0 +0 +0 +729 +0 +0 +12475 +77952 +729"
             "deepseek-v3-fp8-block-mtp-tp8ep8;deepseek_v3 DeepseekV3ForCausalLM, 61 layers, 91991 tensors, 684531386000 checkpoint elements;8 +0 +0 +0 +0 +747 +0 +0 +12695 +79296 +747")
  list(GET case 0 m)
  list(GET case 1 head)
  list(GET case 2 counts)
  add_test(NAME refit_plan_${m}
           COMMAND ${EXPECT} ok "refit-plan: ${m}: ${head}" "^ +${counts} " -- $<TARGET_FILE:refit-plan>
                   --topology ${TOPO}/plan/${m}.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_${m} PROPERTIES LABELS plan TIMEOUT 120)
endforeach()
