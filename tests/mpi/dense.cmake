# The dense LayerNorm families GPT-NeoX (Pythia) and OPT in vLLM's engine layout: the
# transformers-written fixtures end to end with --reference and --cold-check at rollout TP 1
# and 2 (trainer TP 2: both fixtures' heads divide), the names their checkpoints come with
# (GPT-NeoX's old buffers on the skip list, OPT's published decoder.* names), refusals, and
# refit-plan on the full-size configs (counts: tests/data/SOURCES.md).
set(DENSE_TTOPO ${CMAKE_CURRENT_SOURCE_DIR}/topologies)
foreach(case "gpt-neox-tiny-b;28" "opt-tiny;36")
  list(GET case 0 m)
  list(GET case 1 nt)
  foreach(t "tp1-to-tp1;2" "tp2-to-tp2;4" "tp2-to-2xtp1;4")
    list(GET t 0 topo)
    list(GET t 1 np)
    refit_run_test(refit_run_${m}_${topo} ${np} ok
                   "reassembly \\+ sha256 vs --reference: ${nt} tensors equal;refit: COMMITTED 2 update\\(s\\), verified ${nt} tensors"
                   --topology ${DENSE_TTOPO}/${m}-${topo}.yaml --checkpoint ${DATA}/${m}
                   --reference ${DATA}/${m}/tensors.reference.json --cold-check --steps 2)
  endforeach()
endforeach()

# modified checkpoints, written into the build tree at test time
add_executable(make_family_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/make_family_ckpt.c)
target_link_libraries(make_family_ckpt PRIVATE refit)
set(FAMCK ${CMAKE_BINARY_DIR}/family-ckpt)
function(make_family_ckpt_test name src out)
  add_test(NAME make_family_ckpt_${name} COMMAND make_family_ckpt ${src} ${FAMCK}/${out} ${ARGN})
  set_tests_properties(make_family_ckpt_${name} PROPERTIES LABELS mpi FIXTURES_SETUP famck_${name})
endfunction()

# older GPT-NeoX checkpoints' attention.bias / attention.masked_bias / rotary_emb.inv_freq:
# skipped, one log line for all six
make_family_ckpt_test(neox_buffers ${DATA}/gpt-neox-tiny-b gpt-neox-tiny-b-buffers --neox-buffers)
refit_run_test(refit_run_gpt_neox_old_buffers_skipped 2 ok
               "skipped 6 tensor\\(s\\) on the skip list \\(first: gpt_neox.layers.0.attention.bias\\);refit: COMMITTED 1 update\\(s\\), verified 28 tensors"
               --topology ${DENSE_TTOPO}/gpt-neox-tiny-b-tp1-to-tp1.yaml
               --checkpoint ${FAMCK}/gpt-neox-tiny-b-buffers
               --reference ${DATA}/gpt-neox-tiny-b/tensors.reference.json --steps 1)
set_tests_properties(refit_run_gpt_neox_old_buffers_skipped PROPERTIES FIXTURES_REQUIRED famck_neox_buffers
                     ENVIRONMENT "REFIT_LOG_LEVEL=info")

# OPT as the published checkpoints name it (decoder.*): read as model.decoder.*, same bytes
make_family_ckpt_test(opt_decoder ${DATA}/opt-tiny opt-tiny-decoder --rename model.decoder. decoder.)
refit_run_test(refit_run_opt_decoder_names 4 ok
               "36 tensor\\(s\\) named decoder.\\* read as model.decoder.\\*;reassembly \\+ sha256 vs --reference: 36 tensors equal;refit: COMMITTED 2 update\\(s\\), verified 36 tensors"
               --topology ${DENSE_TTOPO}/opt-tiny-tp2-to-tp2.yaml --checkpoint ${FAMCK}/opt-tiny-decoder
               --reference ${DATA}/opt-tiny/tensors.reference.json --cold-check --steps 2)
set_tests_properties(refit_run_opt_decoder_names PROPERTIES FIXTURES_REQUIRED famck_opt_decoder
                     ENVIRONMENT "REFIT_LOG_LEVEL=info")
# one tensor under both spellings: refused, naming both
make_family_ckpt_test(opt_both ${DATA}/opt-tiny opt-tiny-both --rename model.decoder. decoder.
                      --keep model.decoder.layers.1.fc2.bias)
refit_run_test(refit_run_opt_both_names_refused 2 fail
               "refit: FAILED: .*tensor \"model.decoder.layers.1.fc2.bias\" is stored as \"decoder.layers.1.fc2.bias\" too"
               --topology ${DENSE_TTOPO}/opt-tiny-tp1-to-tp1.yaml --checkpoint ${FAMCK}/opt-tiny-both --steps 1)
set_tests_properties(refit_run_opt_both_names_refused PROPERTIES FIXTURES_REQUIRED famck_opt_both)

# topologies that cannot work: refused at startup naming module and sizes
refit_run_test(refit_run_gpt_neox_rollout_tp4_refused 5 fail
               "refit: FAILED: .*rollout.tp: 4 .*gpt_neox.layers.0.attention.query_key_value: num_attention_heads 6 is not divisible by 4"
               --topology ${DENSE_TTOPO}/gpt-neox-tiny-b-tp1-to-tp4.yaml --checkpoint ${DATA}/gpt-neox-tiny-b)
refit_run_test(refit_run_opt_rollout_tp3_refused 4 fail
               "refit: FAILED: .*rollout.tp: 3 .*model.decoder.embed_tokens: padded vocab 512 is not divisible by 3"
               --topology ${DENSE_TTOPO}/opt-tiny-tp1-to-tp3.yaml --checkpoint ${DATA}/opt-tiny)
refit_run_test(refit_run_gpt_neox_fp8_refused 2 fail
               "refit: FAILED: .*gpt_neox is reloaded unquantized only \\(quantization fp8-block asked\\)"
               --topology ${DENSE_TTOPO}/gpt-neox-tiny-b-fp8-block.yaml)

# refit-plan on the full-size configs: tensors, elements and modules (DIRECT / RUNTIME_VIEW /
# LAYERWISE / applications / declined / layers per rollout rank) as tests/data/SOURCES.md works
# them out
foreach(case "opt-125m;opt OPTForCausalLM, 12 layers, 196 tensors, 125239296 checkpoint elements;75 +0 +0 +196 +0 +75"
             "pythia-14m;gpt_neox GPTNeoXForCausalLM, 6 layers, 76 tensors, 14067712 checkpoint elements;39 +0 +0 +76 +0 +39")
  list(GET case 0 m)
  list(GET case 1 head)
  list(GET case 2 counts)
  add_test(NAME refit_plan_${m}
           COMMAND ${EXPECT} ok "refit-plan: ${m}-tp2: ${head}" "^ +3 +0 +1 +0 +0 +${counts} " -- $<TARGET_FILE:refit-plan>
                   --topology ${TOPO}/plan/${m}-tp2.yaml
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(refit_plan_${m} PROPERTIES LABELS plan TIMEOUT 120)
endforeach()

# the device branches on the CPU (REFIT_TEST_DEVICE_ACCEL=host-device: staged payloads, batched
# row copies): GPT-NeoX's several copies per piece through them, DIRECT and LAYERWISE
foreach(case "auto;DIRECT 15" "layerwise;LAYERWISE 15")
  list(GET case 0 pol)
  list(GET case 1 re)
  refit_run_test(emu_refit_gpt_neox_tiny_b_tp2_${pol} 4 ok
                 "${re};refit: COMMITTED 2 update\\(s\\), verified 28 tensors"
                 --topology ${DENSE_TTOPO}/gpt-neox-tiny-b-tp2-to-tp2.yaml
                 --checkpoint ${DATA}/gpt-neox-tiny-b
                 --reference ${DATA}/gpt-neox-tiny-b/tensors.reference.json --steps 2 --cold-check
                 --reload-policy ${pol})
  set_tests_properties(emu_refit_gpt_neox_tiny_b_tp2_${pol} PROPERTIES LABELS "mpi;device-emu"
                       ENVIRONMENT "REFIT_TEST_DEVICE_ACCEL=host-device")
endforeach()
