# HDF5 checkpoints (issue 16; docs/formats.md, "The HDF5 container"): refit-convert round trips
# of every fixture checked against its tensors.reference.json, h5py reading refit's files and
# refit reading h5py's (tests/mpi/h5py_check.py, /usr/bin/python3 with Debian's python3-h5py),
# refit-run reading hyperslabs at trainer TP2 and PP2, and the bad-input rules, each refused
# naming file, dataset and rule (make_h5_variant writes the broken files into the build tree).
add_executable(make_h5_variant ${CMAKE_CURRENT_SOURCE_DIR}/make_h5_variant.c)
target_link_libraries(make_h5_variant PRIVATE refit)
set(H5D ${CMAKE_BINARY_DIR}/h5)
set(H5PY /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/h5py_check.py)
string(REPLACE ";" " " H5PY_SH "${H5PY}") # inside sh -c strings
file(MAKE_DIRECTORY ${H5D})

# h5_test(NAME ok|fail "REGEX" CMD...): a plain (non-MPI) command checked by expect.sh
function(h5_test name want regex)
  add_test(NAME ${name} COMMAND ${EXPECT} ${want} ${regex} -- ${ARGN}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS "unit;hdf5" TIMEOUT 120)
endfunction()

# round trips: safetensors -> HDF5 (h5py reads it: same sha256) -> safetensors (same sha256)
foreach(fx llama-tiny qwen3-tiny-tied qwen3-moe-tiny qwen3-fp8-tiny)
  h5_test(h5_convert_${fx} ok "refit-convert: .* -> .*/${fx}.h5 \\(hdf5\\)"
          $<TARGET_FILE:refit-convert> --force ${DATA}/${fx} ${H5D}/${fx}.h5)
  set_tests_properties(h5_convert_${fx} PROPERTIES FIXTURES_SETUP h5_${fx})
  h5_test(h5_h5py_reads_${fx} ok "h5py_check: .*sha256 equal"
          ${H5PY} sha ${H5D}/${fx}.h5 ${DATA}/${fx}/tensors.reference.json)
  h5_test(h5_back_${fx} ok "h5py_check: .*sha256 equal" sh -c
          "$<TARGET_FILE:refit-convert> --force --shard-bytes 200000 ${H5D}/${fx}.h5 ${H5D}/${fx}-back && ${H5PY_SH} sha ${H5D}/${fx}-back ${DATA}/${fx}/tensors.reference.json")
  set_tests_properties(h5_h5py_reads_${fx} h5_back_${fx} PROPERTIES FIXTURES_REQUIRED h5_${fx})
endforeach()
# h5py's files: every dtype (native f16, bool as h5py's enum, variable-length strings, int64
# version), a scalar, a 3-d and an empty tensor; and llama-tiny written by h5py
h5_test(h5_h5py_alltypes ok "h5py_check: .*18 tensors, sha256 equal" sh -c
        "${H5PY_SH} alltypes ${H5D}/alltypes.h5 ${H5D}/alltypes.json && $<TARGET_FILE:refit-convert> --force ${H5D}/alltypes.h5 ${H5D}/alltypes-st && ${H5PY_SH} sha ${H5D}/alltypes-st ${H5D}/alltypes.json && $<TARGET_FILE:refit-convert> --force ${H5D}/alltypes-st ${H5D}/alltypes-refit.h5 && ${H5PY_SH} sha ${H5D}/alltypes-refit.h5 ${H5D}/alltypes.json")
h5_test(h5_h5py_written ok "refit-info: .*/llama-tiny-h5py.h5: hdf5 .* 30 tensors, 810432 bytes" sh -c
        "${H5PY_SH} write ${DATA}/llama-tiny ${H5D}/llama-tiny-h5py.h5 && $<TARGET_FILE:refit-info> ${H5D}/llama-tiny-h5py.h5")
set_tests_properties(h5_h5py_written PROPERTIES FIXTURES_SETUP h5_h5py)

# refit-run from HDF5: trainer TP2 (each rank reads its rows / columns) and PP2, --reference
refit_run_test(refit_run_h5_llama_tiny_tp2 4 ok "source checkpoint;refit: COMMITTED 3 update\\(s\\), verified 30 tensors"
               --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --checkpoint ${H5D}/llama-tiny.h5
               --reference ${DATA}/llama-tiny/tensors.reference.json --steps 3)
refit_run_test(refit_run_h5_llama_tiny_tp2pp2 6 ok "refit: COMMITTED 3 update\\(s\\), verified 30 tensors"
               --topology ${TOPO}/llama-tiny-tp2pp2-to-tp2.yaml --checkpoint ${H5D}/llama-tiny.h5
               --reference ${DATA}/llama-tiny/tensors.reference.json --steps 3)
refit_run_test(refit_run_h5_h5py_written 2 ok "refit: COMMITTED 2 update\\(s\\), verified 30 tensors"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${H5D}/llama-tiny-h5py.h5
               --reference ${DATA}/llama-tiny/tensors.reference.json)
refit_run_test(refit_run_h5_qwen3_tied_tp2 4 ok "refit: COMMITTED 2 update\\(s\\), verified 24 tensors"
               --topology ${TOPO}/qwen3-tiny-tied-tp2-to-tp2.yaml --checkpoint ${H5D}/qwen3-tiny-tied.h5
               --reference ${DATA}/qwen3-tiny-tied/tensors.reference.json)
set_tests_properties(refit_run_h5_llama_tiny_tp2 refit_run_h5_llama_tiny_tp2pp2 PROPERTIES
                     FIXTURES_REQUIRED h5_llama-tiny)
set_tests_properties(refit_run_h5_h5py_written PROPERTIES FIXTURES_REQUIRED h5_h5py)
set_tests_properties(refit_run_h5_qwen3_tied_tp2 PROPERTIES FIXTURES_REQUIRED h5_qwen3-tiny-tied)
# bytes_read: each trainer rank read exactly its shard's tensor bytes (check_profile_counters
# holds the hand-computed values of llama-tiny at trainer TP2)
refit_run_test(refit_run_h5_counters_tp2 4 ok "refit: COMMITTED 2"
               --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --checkpoint ${H5D}/llama-tiny.h5)
set_tests_properties(refit_run_h5_counters_tp2 PROPERTIES FIXTURES_REQUIRED h5_llama-tiny
                     FIXTURES_SETUP h5_counters_profile)
add_test(NAME check_profile_counters_h5
         COMMAND check_profile_counters ${CMAKE_BINARY_DIR}/profiles/refit_run_h5_counters_tp2)
set_tests_properties(check_profile_counters_h5 PROPERTIES LABELS mpi FIXTURES_REQUIRED h5_counters_profile)
# and at trainer TP2 x PP2: each stage's ranks read their own shards only
refit_run_test(refit_run_h5_counters_tp2pp2 6 ok "refit: COMMITTED 2"
               --topology ${TOPO}/llama-tiny-tp2pp2-to-tp2.yaml --checkpoint ${H5D}/llama-tiny.h5)
set_tests_properties(refit_run_h5_counters_tp2pp2 PROPERTIES FIXTURES_REQUIRED h5_llama-tiny
                     FIXTURES_SETUP h5_counters_pp2_profile)
add_test(NAME check_profile_counters_h5_tp2pp2
         COMMAND check_profile_counters ${CMAKE_BINARY_DIR}/profiles/refit_run_h5_counters_tp2pp2 tp2pp2)
set_tests_properties(check_profile_counters_h5_tp2pp2 PROPERTIES LABELS mpi
                     FIXTURES_REQUIRED h5_counters_pp2_profile)

# collective reads (parallel libhdf5): the lock step of rf_ckpt_read_all on 2 and 3 ranks
# (tests/mpi/check_h5_collective.c; on a serial libhdf5 the same calls read independently),
# and refit-run's trainer ranks reading every dataset of their stage collectively
refit_mpi_test(check_h5_collective 2 3)
if(HDF5_IS_PARALLEL)
  refit_run_test(refit_run_h5_collective_tp2 4 ok
                 "trainer rank 0: 30 collective reads \\(MPI-IO\\) over the 2 trainer rank\\(s\\) of stage 0, 0 of them done as independent;trainer rank 1: 30 collective reads;refit: COMMITTED 2 update\\(s\\), verified 30 tensors"
                 --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --checkpoint ${H5D}/llama-tiny.h5
                 --reference ${DATA}/llama-tiny/tensors.reference.json)
  refit_run_test(refit_run_h5_collective_tp2pp2 6 ok
                 "trainer rank 1: 19 collective reads \\(MPI-IO\\) over the 2 trainer rank\\(s\\) of stage 0, 0 of them;trainer rank 3: 11 collective reads \\(MPI-IO\\) over the 2 trainer rank\\(s\\) of stage 1, 0 of them;refit: COMMITTED 2 update\\(s\\), verified 30 tensors"
                 --topology ${TOPO}/llama-tiny-tp2pp2-to-tp2.yaml --checkpoint ${H5D}/llama-tiny.h5
                 --reference ${DATA}/llama-tiny/tensors.reference.json)
  set_tests_properties(refit_run_h5_collective_tp2 refit_run_h5_collective_tp2pp2 PROPERTIES
                       FIXTURES_REQUIRED h5_llama-tiny ENVIRONMENT REFIT_LOG_LEVEL=info)
  # trainer dp 2 x ep 2: each rank holds half the experts and takes part in the other
  # half's reads with nothing, so both make all 69 collective calls
  refit_run_test(refit_run_h5_collective_ep2 4 ok
                 "trainer rank 0: 69 collective reads \\(MPI-IO\\);trainer rank 1: 69 collective reads \\(MPI-IO\\) over the 2 trainer rank\\(s\\) of stage 0, 0 of them;refit: COMMITTED 2 update\\(s\\), verified 69 tensors"
                 --topology ${TTOPO}/qwen3-moe-tiny-dp2ep2-to-2xtp1-broadcast.yaml
                 --checkpoint ${H5D}/qwen3-moe-tiny.h5
                 --reference ${DATA}/qwen3-moe-tiny/tensors.reference.json)
  set_tests_properties(refit_run_h5_collective_ep2 PROPERTIES FIXTURES_REQUIRED h5_qwen3-moe-tiny
                       ENVIRONMENT REFIT_LOG_LEVEL=info)
endif()

# bad input (DESIGN.md section 11): refused naming the file, the dataset and the rule
set(LT ${DATA}/llama-tiny)
set(EMB model.embed_tokens.weight)
foreach(case
    "not_hdf5|--format refit-checkpoint|not an HDF5 file \\(no HDF5 signature\\)"
    "format|--format safetensors|root attribute format is \"safetensors\", not \"refit-checkpoint\""
    "no_format|--no-format|no root attribute format: not a refit checkpoint"
    "version|--version 2|format_version is 2, this refit reads version 1"
    "no_version|--no-version|no root attribute format_version"
    "no_dtype|--no-dtype ${EMB}|dataset /tensors/${EMB} has no dtype attribute"
    "unknown_dtype|--dtype ${EMB} BF17|dataset /tensors/${EMB} has unknown dtype attribute \"BF17\""
    "dtype_size|--dtype ${EMB} F32|dataset /tensors/${EMB}: dtype attribute says F32 \\(stored as a 4-byte IEEE float\\) but the HDF5 type is a 2-byte unsigned integer \\(element size disagrees\\)"
    "dtype_class|--dtype ${EMB} F16|dataset /tensors/${EMB}: dtype attribute says F16 .* but the HDF5 type is a 2-byte unsigned integer \\(class disagrees\\)"
    "filter|--gzip ${EMB}|dataset /tensors/${EMB} uses filter \"deflate\""
    "huge|--huge ${EMB}|dataset /tensors/${EMB}: shape numel overflows 64 bits"
    "group|--group sub|/tensors/\"sub\" is not a dataset"
    "truncated|--truncate 300000|not a readable HDF5 file \\(truncated or damaged\\?\\): HDF5 .* says: truncated file")
  string(REPLACE "|" ";" case "${case}")
  list(GET case 0 name)
  list(GET case 1 mode)
  list(GET case 2 regex)
  separate_arguments(mode)
  set(out ${H5D}/bad-${name}.h5)
  if(name STREQUAL "not_hdf5")
    add_test(NAME make_h5_bad_${name} COMMAND ${CMAKE_COMMAND} -E copy ${LT}/config.json ${out})
  else()
    add_test(NAME make_h5_bad_${name} COMMAND make_h5_variant ${LT} ${out} ${mode})
  endif()
  set_tests_properties(make_h5_bad_${name} PROPERTIES LABELS "unit;hdf5" FIXTURES_SETUP h5_bad_${name})
  h5_test(h5_bad_${name} fail "refit-info: .*bad-${name}.h5: .*${regex}" $<TARGET_FILE:refit-info> ${out})
  set_tests_properties(h5_bad_${name} PROPERTIES FIXTURES_REQUIRED h5_bad_${name})
endforeach()
# the same rules through refit-run: refused at startup on every rank, no hang
refit_run_test(refit_run_h5_no_dtype_refused 2 fail "refit: FAILED: .*bad-no_dtype.h5: dataset /tensors/${EMB} has no dtype attribute"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${H5D}/bad-no_dtype.h5)
set_tests_properties(refit_run_h5_no_dtype_refused PROPERTIES FIXTURES_REQUIRED h5_bad_no_dtype)
# a shape the inventory refuses (the manifest's rule, as for safetensors)
add_test(NAME make_h5_bad_shape COMMAND make_h5_variant ${LT} ${H5D}/bad-shape.h5 --shape ${EMB})
set_tests_properties(make_h5_bad_shape PROPERTIES LABELS mpi FIXTURES_SETUP h5_bad_shape)
refit_run_test(refit_run_h5_shape_refused 2 fail "refit: FAILED: checkpoint .*/bad-shape.h5: tensor ${EMB} has a different shape than the model config implies"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${H5D}/bad-shape.h5)
set_tests_properties(refit_run_h5_shape_refused PROPERTIES FIXTURES_REQUIRED h5_bad_shape)
# the config attribute is compared as a directory's config.json is (ckpt_config.cmake's
# llama-tiny-4-layers variant, converted: its config travels into the attribute)
add_test(NAME make_h5_config_layers COMMAND refit-convert --force ${CKV}/llama-tiny-4-layers ${H5D}/llama-tiny-4-layers.h5)
set_tests_properties(make_h5_config_layers PROPERTIES LABELS mpi FIXTURES_REQUIRED ckv_layers
                     FIXTURES_SETUP h5_config_layers)
refit_run_test(refit_run_h5_config_layers_refused 2 fail
               "refit: FAILED: checkpoint .*/llama-tiny-4-layers.h5 \\(root attribute config\\): config.json says num_hidden_layers 4, the topology's model config says 3"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${H5D}/llama-tiny-4-layers.h5)
set_tests_properties(refit_run_h5_config_layers_refused PROPERTIES FIXTURES_REQUIRED h5_config_layers)
# refit-info: format, counts, dtypes, the stored config, and with --topology the plan counts
h5_test(h5_info_topology ok "refit-info: .*/llama-tiny.h5: hdf5 .* 30 tensors, 810432 bytes;dtypes +BF16 30;config +\\(root attribute config\\) llama LlamaForCausalLM: 3 layers;^ +3 +1 +0 +0 +0 +21 +0 +0 +30"
        $<TARGET_FILE:refit-info> --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml ${H5D}/llama-tiny.h5)
set_tests_properties(h5_info_topology PROPERTIES FIXTURES_REQUIRED h5_llama-tiny)
# the programs' own argument errors name the option and quote the value
h5_test(cli_info_unknown_option fail "^refit-info: unknown option '--bogus' \\(see --help\\)$"
        $<TARGET_FILE:refit-info> --bogus ${H5D}/llama-tiny.h5)
h5_test(cli_info_option_needs_value fail "^refit-info: option '--topology' needs a value"
        $<TARGET_FILE:refit-info> --topology)
h5_test(cli_convert_bad_shard_bytes fail "^refit-convert: --shard-bytes '12x': not a positive byte count"
        $<TARGET_FILE:refit-convert> --shard-bytes 12x ${DATA}/llama-tiny ${H5D}/never.h5)
h5_test(cli_convert_unreadable_topology fail "^refit-convert: .*no-such-topology.yaml: cannot read: No such file or directory"
        $<TARGET_FILE:refit-convert> --generate ${H5D}/no-such-topology.yaml ${H5D}/never-gen.h5)
