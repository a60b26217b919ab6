# A checkpoint is checked against its config, not assumed (docs/faults.md, "Checkpoint vs
# config"): a tied model's stored lm_head.weight is compared with the embedding, the
# checkpoint's own config.json with the topology's, and every --reference entry is verified or
# skipped on purpose. make_ckpt_variant writes the modified checkpoints into the build tree.
add_executable(make_ckpt_variant ${CMAKE_CURRENT_SOURCE_DIR}/make_ckpt_variant.c)
target_link_libraries(make_ckpt_variant PRIVATE refit PkgConfig::JANSSON)
set(CKV ${CMAKE_BINARY_DIR}/ckpt-variants)

# make_ckpt_variant_test(NAME SRC-DIR OUT-NAME options...): a fixture NAME writing ${CKV}/OUT-NAME
function(make_ckpt_variant_test name src out)
  add_test(NAME make_ckpt_${name} COMMAND make_ckpt_variant ${src} ${CKV}/${out} ${ARGN})
  set_tests_properties(make_ckpt_${name} PROPERTIES LABELS mpi FIXTURES_SETUP ckv_${name})
endfunction()

# (a) tied + lm_head.weight equal to the embedding: checked, skipped, listed by the oracle
make_ckpt_variant_test(tied_head_equal ${DATA}/qwen3-tiny-tied tied-head-equal --head equal)
refit_run_test(refit_run_tied_head_equal 2 ok
               "lm_head.weight equals model.embed_tokens.weight byte for byte \\(tie_word_embeddings\\): checked and skipped;refit: COMMITTED 3 update\\(s\\), verified 24 of 25 tensors \\(1 skipped: lm_head.weight, the tied copy checked equal to model.embed_tokens.weight at startup\\)"
               --topology ${TTOPO}/qwen3-tiny-tied-tp1-to-tp1.yaml --checkpoint ${CKV}/tied-head-equal
               --reference ${CKV}/tied-head-equal/tensors.reference.json --steps 3)
set_tests_properties(refit_run_tied_head_equal PROPERTIES FIXTURES_REQUIRED ckv_tied_head_equal
                     ENVIRONMENT "REFIT_LOG_LEVEL=info")

# (b) tied + a different lm_head.weight: refused at startup naming both and the key
make_ckpt_variant_test(tied_head_differs ${DATA}/qwen3-tiny-tied tied-head-differs --head differs)
refit_run_test(refit_run_tied_head_differs_refused 2 fail
               "refit: FAILED: checkpoint .*/tied-head-differs: lm_head.weight differs from model.embed_tokens.weight \\(first at row 7\\), but the model config says tie_word_embeddings true"
               --topology ${TTOPO}/qwen3-tiny-tied-tp1-to-tp1.yaml --checkpoint ${CKV}/tied-head-differs
               --reference ${CKV}/tied-head-differs/tensors.reference.json --steps 3)
set_tests_properties(refit_run_tied_head_differs_refused PROPERTIES FIXTURES_REQUIRED ckv_tied_head_differs)

# (c) a topology whose model config says tied over llama-tiny (untied): its config.json says
# false; without a config.json the head itself is found to differ
make_ckpt_variant_test(says_tied ${DATA}/llama-tiny llama-tiny-says-tied --config-only
                       --set tie_word_embeddings=true)
file(WRITE ${CKV}/llama-tiny-says-tied-tp1-to-tp1.yaml
     "# written by tests/mpi/ckpt_config.cmake: llama-tiny's config with tie_word_embeddings true\n"
     "name: llama-tiny-says-tied-tp1-to-tp1\n"
     "model: { config: llama-tiny-says-tied/config.json }\n"
     "trainer: { tp: 1 }\nrollout: { engines: 1, tp: 1 }\ntransfer: { chunk_bytes: 64KiB }\n")
refit_run_test(refit_run_config_says_tied_refused 2 fail
               "refit: FAILED: checkpoint .*/llama-tiny: config.json says tie_word_embeddings false, the topology's model config says true"
               --topology ${CKV}/llama-tiny-says-tied-tp1-to-tp1.yaml --checkpoint ${DATA}/llama-tiny
               --reference ${DATA}/llama-tiny/tensors.reference.json)
set_tests_properties(refit_run_config_says_tied_refused PROPERTIES FIXTURES_REQUIRED ckv_says_tied)
make_ckpt_variant_test(no_config ${DATA}/llama-tiny llama-tiny-no-config --no-config)
refit_run_test(refit_run_says_tied_no_config_refused 2 fail
               "refit: FAILED: checkpoint .*/llama-tiny-no-config: lm_head.weight differs from model.embed_tokens.weight \\(first at row 0\\), but the model config says tie_word_embeddings true"
               --topology ${CKV}/llama-tiny-says-tied-tp1-to-tp1.yaml --checkpoint ${CKV}/llama-tiny-no-config)
set_tests_properties(refit_run_says_tied_no_config_refused PROPERTIES FIXTURES_REQUIRED
                     "ckv_says_tied;ckv_no_config")

# (d) a key that decides the inventory differs; other spellings of the same keys do not
make_ckpt_variant_test(layers ${DATA}/llama-tiny llama-tiny-4-layers --set num_hidden_layers=4)
refit_run_test(refit_run_config_layers_refused 2 fail
               "refit: FAILED: checkpoint .*/llama-tiny-4-layers: config.json says num_hidden_layers 4, the topology's model config says 3"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${CKV}/llama-tiny-4-layers)
set_tests_properties(refit_run_config_layers_refused PROPERTIES FIXTURES_REQUIRED ckv_layers)
make_ckpt_variant_test(spellings ${DATA}/llama-tiny llama-tiny-spellings
                       --set torch_dtype=\"bfloat16\" --set head_dim=null)
refit_run_test(refit_run_config_spellings_ok 2 ok "refit: COMMITTED 1 update\\(s\\), verified 30 tensors"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${CKV}/llama-tiny-spellings
               --reference ${CKV}/llama-tiny-spellings/tensors.reference.json --steps 1)
set_tests_properties(refit_run_config_spellings_ok PROPERTIES FIXTURES_REQUIRED ckv_spellings)
# the checkpoint's config.json is compared as written: model.overrides cuts layer 2 on
# purpose, and the oracle lists its 9 reference entries as skipped
refit_run_test(refit_run_overrides_cut_reference 2 ok
               "refit: COMMITTED 3 update\\(s\\), verified 21 of 30 tensors \\(9 skipped: cut by model.overrides \\(first model.layers.2.input_layernorm.weight\\)\\)"
               --topology ${TTOPO}/llama-tiny-2l-tp1-to-tp1.yaml --checkpoint ${DATA}/llama-tiny
               --reference ${DATA}/llama-tiny/tensors.reference.json --steps 3)

# (e) a reference entry nothing checks fails the run naming it
make_ckpt_variant_test(ref_extra ${DATA}/llama-tiny llama-tiny-ref-extra
                       --ref-extra model.layers.0.self_attn.extra_proj.weight)
refit_run_test(refit_run_reference_unchecked_refused 2 fail
               "refit: FAILED: update 1: verification: .*/llama-tiny-ref-extra/tensors.reference.json: verified 30 of 31 tensors: model.layers.0.self_attn.extra_proj.weight was not checked"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${DATA}/llama-tiny
               --reference ${CKV}/llama-tiny-ref-extra/tensors.reference.json --steps 1)
set_tests_properties(refit_run_reference_unchecked_refused PROPERTIES FIXTURES_REQUIRED ckv_ref_extra)

# a reference entry on the documented skip list (*.rotary_emb.inv_freq) is skipped on purpose
# and listed, not failed
make_ckpt_variant_test(ref_listed ${DATA}/llama-tiny llama-tiny-ref-listed
                       --ref-extra model.layers.0.self_attn.rotary_emb.inv_freq)
refit_run_test(refit_run_reference_skip_list_listed 2 ok
               "refit: COMMITTED 1 update\\(s\\), verified 30 of 31 tensors \\(1 skipped: on the skip list \\(first model.layers.0.self_attn.rotary_emb.inv_freq\\)\\)"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${DATA}/llama-tiny
               --reference ${CKV}/llama-tiny-ref-listed/tensors.reference.json --steps 1)
set_tests_properties(refit_run_reference_skip_list_listed PROPERTIES FIXTURES_REQUIRED ckv_ref_listed)

# the shape check behind the config check: a checkpoint without config.json for another model
make_ckpt_variant_test(tied_no_config ${DATA}/qwen3-tiny-tied qwen3-tiny-tied-no-config --no-config)
refit_run_test(refit_run_wrong_checkpoint_no_config 2 fail
               "refit: FAILED: .*tensor model.embed_tokens.weight has a different shape"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${CKV}/qwen3-tiny-tied-no-config)
set_tests_properties(refit_run_wrong_checkpoint_no_config PROPERTIES FIXTURES_REQUIRED ckv_tied_no_config)
