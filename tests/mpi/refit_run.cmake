# refit-run end to end under mpiexec on the CPU topologies (label mpi; full-size ones also slow).
# tests/mpi/expect.sh checks the exit status and a line of the output.
set(REFIT_RUN ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none)
set(EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/expect.sh)
set(TOPO ${CMAKE_SOURCE_DIR}/jobs/topologies)
set(TTOPO ${CMAKE_CURRENT_SOURCE_DIR}/topologies)
set(DATA ${REFIT_TEST_DATA})

# refit_run_test(NAME NP ok|fail "REGEX[;REGEX...]" refit-run-args...)
function(refit_run_test name np want regex)
  add_test(NAME ${name}
           COMMAND ${EXPECT} ${want} ${regex} -- ${REFIT_RUN} -np ${np} $<TARGET_FILE:refit-run>
                   --profile-dir ${CMAKE_BINARY_DIR}/profiles/${name} ${ARGN}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 600)
endfunction()

# the dense fixtures with --reference at every rollout TP the validator accepts
foreach(case "llama-tiny-tp1-to-tp1;2" "llama-tiny-tp1pp3-to-tp2;5" "llama-tiny-tp2-to-2xtp1;4"
             "llama-tiny-tp2pp2-to-tp2;6")
  list(GET case 0 topo)
  list(GET case 1 np)
  refit_run_test(refit_run_${topo} ${np} ok "refit: COMMITTED 3 update\\(s\\), verified 30 tensors"
                 --topology ${TOPO}/${topo}.yaml --checkpoint ${DATA}/llama-tiny
                 --reference ${DATA}/llama-tiny/tensors.reference.json --steps 3)
endforeach()
foreach(case "qwen3-tiny-tied-tp2-to-tp2;${TOPO};4" "qwen3-tiny-tied-tp1-to-tp4;${TOPO};5"
             "qwen3-tiny-tied-tp1-to-tp1;${TTOPO};2")
  list(GET case 0 topo)
  list(GET case 1 dir)
  list(GET case 2 np)
  refit_run_test(refit_run_${topo} ${np} ok "refit: COMMITTED 3 update\\(s\\), verified 24 tensors"
                 --topology ${dir}/${topo}.yaml --checkpoint ${DATA}/qwen3-tiny-tied
                 --reference ${DATA}/qwen3-tiny-tied/tensors.reference.json --steps 3)
endforeach()
# refused at startup, naming the cause: 6 heads do not split over rollout TP 4
refit_run_test(refit_run_llama_tiny_tp4_refused 5 fail "refit: FAILED: .*num_attention_heads 6 is not divisible by 4"
               --topology ${TTOPO}/llama-tiny-tp1-to-tp4.yaml --checkpoint ${DATA}/llama-tiny)

# environment switches with a value they do not know: refused at setup naming the variable,
# the value and the accepted ones (include/refit/env.h), never ignored. Read by the trainer's
# setup (REFIT_CKPT_STREAM), the checkpoint's open (REFIT_HDF5_COLLECTIVE, whatever the
# format), the mpi transport's setup (REFIT_MPI_SEND_SPIN on a sender, REFIT_MPI_RECV_PAGEABLE
# on every rank, REFIT_MPI_SEAL_FUSED on every rank; REFIT_CUDA_TRANSPOSE, read by the cuda
# accelerator's create, by rf_env_check at every rank's setup, GPU or not);
# REFIT_DEVICE_TIMELINE: tests/gpu (emu_ipc_device_timeline_bad_value)
foreach(case "REFIT_CKPT_STREAM;maybe" "REFIT_HDF5_COLLECTIVE;on" "REFIT_MPI_SEND_SPIN;2"
             "REFIT_MPI_RECV_PAGEABLE;yes" "REFIT_MPI_SEAL_FUSED;true" "REFIT_CUDA_TRANSPOSE;2")
  list(GET case 0 var)
  list(GET case 1 val)
  string(TOLOWER ${var} n)
  refit_run_test(refit_run_env_${n}_refused 2 fail
                 "refit: FAILED: .*${var}=${val}: expected 0 \\(off\\) or 1 \\(on\\)$"
                 --topology ${TTOPO}/llama-tiny-tp1-to-tp1-small-chunks.yaml
                 --checkpoint ${DATA}/llama-tiny --steps 1)
  set_tests_properties(refit_run_env_${n}_refused PROPERTIES ENVIRONMENT "${var}=${val}")
endforeach()
# the checkpoint read threads (runtime/trainer_stream.c) and the mpi sender's seal threads
# (rf_chunk_seal_pool): a positive count, at most 64
foreach(case "CKPT_READ;0;expected a decimal count from 1 to 64 \\(threads\\)"
             "CKPT_READ;65;at most 64 threads" "MPI_SEAL;65;at most 64 threads")
  list(GET case 0 what)
  list(GET case 1 val)
  list(GET case 2 msg)
  string(TOLOWER ${what} n)
  refit_run_test(refit_run_env_${n}_threads_${val}_refused 2 fail
                 "refit: FAILED: .*REFIT_${what}_THREADS=${val}: ${msg}$"
                 --topology ${TTOPO}/llama-tiny-tp1-to-tp1-small-chunks.yaml
                 --checkpoint ${DATA}/llama-tiny --steps 1)
  set_tests_properties(refit_run_env_${n}_threads_${val}_refused PROPERTIES
                       ENVIRONMENT "REFIT_${what}_THREADS=${val}")
endforeach()

# reload policies and format owners: LAYERWISE and the deferred stage, same bytes
# a directory given as the topology or as model.config: named as such (fopen opens a
# directory; reading it gave "Cannot allocate memory" / a bogus size before)
refit_run_test(refit_run_topology_directory_refused 2 fail
               "refit: FAILED: .*tests/mpi/topologies: cannot read topology file: is a directory"
               --topology ${CMAKE_CURRENT_SOURCE_DIR}/topologies)
refit_run_test(refit_run_policy_layerwise 4 ok "DIRECT 0  RUNTIME_VIEW 0  LAYERWISE 21;refit: COMMITTED 2"
               --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --checkpoint ${DATA}/llama-tiny
               --reference ${DATA}/llama-tiny/tensors.reference.json --reload-policy layerwise)
refit_run_test(refit_run_owner_test_transpose 4 ok "DIRECT 9  RUNTIME_VIEW 0  LAYERWISE 12;refit: COMMITTED 2"
               --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --checkpoint ${DATA}/llama-tiny
               --reference ${DATA}/llama-tiny/tensors.reference.json --format-owner test-transpose)
refit_run_test(refit_run_owner_test_derived 4 ok "refit: COMMITTED 3 update\\(s\\)"
               --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --format-owner test-derived --steps 3)
# small chunks: row pieces, many chunks, generator weights
refit_run_test(refit_run_small_chunks 4 ok "max 2 chunks in flight;refit: COMMITTED 2"
               --topology ${TTOPO}/llama-tiny-tp2-to-2xtp1-small-chunks.yaml)

# bad input: clear errors, no hang
refit_run_test(refit_run_missing_topology 2 fail "refit: FAILED: .*no-such.yaml"
               --topology ${TTOPO}/no-such.yaml)
refit_run_test(refit_run_wrong_world_size 3 fail "refit: FAILED: .*world size 3"
               --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml)
refit_run_test(refit_run_wrong_checkpoint 2 fail "refit: FAILED: .*qwen3-tiny-tied: config.json says model_type qwen3, the topology's model config says llama"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint ${DATA}/qwen3-tiny-tied)
refit_run_test(refit_run_bad_steps 2 fail "--steps: 'zero' is not a positive integer"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --steps zero)
refit_run_test(refit_run_bad_verify 2 fail "--verify: 'bogus' is not all, last or none"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --verify bogus)
refit_run_test(refit_run_bad_checkpoint_updates 2 fail "--checkpoint-updates bogus: odd or all"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --checkpoint-updates bogus)
refit_run_test(refit_run_missing_value 2 fail "option '--bench-json' needs a value"
               --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --bench-json)
refit_run_test(refit_run_help 1 ok "usage: mpirun -np N refit-run" --help)

# counters: bytes_produced / bytes_read / bytes_gathered against hand-computed values
refit_run_test(refit_run_counters_llama_tiny_tp2 4 ok "refit: COMMITTED 2"
               --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --checkpoint ${DATA}/llama-tiny)
set_tests_properties(refit_run_counters_llama_tiny_tp2 PROPERTIES FIXTURES_SETUP counters_profile)
add_executable(check_profile_counters ${CMAKE_CURRENT_SOURCE_DIR}/check_profile_counters.c)
target_link_libraries(check_profile_counters PRIVATE PkgConfig::CHECK PkgConfig::JANSSON)
add_test(NAME check_profile_counters
         COMMAND check_profile_counters ${CMAKE_BINARY_DIR}/profiles/refit_run_counters_llama_tiny_tp2)
set_tests_properties(check_profile_counters PROPERTIES LABELS mpi FIXTURES_REQUIRED counters_profile)
# check_profile DIR NRANKS MIN MAX summary|no-summary: the .jsonl lines and the summary's
# presence (tests/mpi/check_profile.c; faults.cmake runs it after a killed job). Readers ignore
# a torn last line and refuse a torn line followed by others: tests/data/profiles/torn-last has
# 3 complete lines per rank and a torn last one (rank 0: no trailing newline; rank 1: a
# newline after a cut object); torn-middle a cut line 2 followed by two complete lines.
add_executable(check_profile ${CMAKE_CURRENT_SOURCE_DIR}/check_profile.c)
target_link_libraries(check_profile PRIVATE PkgConfig::JANSSON)
add_test(NAME check_profile_torn_last_ignored
         COMMAND ${EXPECT} ok "check_profile: rank 0: 3 complete lines \\(a torn last line ignored\\)"
                 "check_profile: rank 1: 3 complete lines \\(a torn last line ignored\\)"
                 "check_profile: ok: 2 rank" -- $<TARGET_FILE:check_profile>
                 ${DATA}/profiles/torn-last 2 3 3 no-summary)
add_test(NAME check_profile_torn_middle_refused
         COMMAND ${EXPECT} fail "check_profile: FAILED: .*profile-rank0.jsonl: line 2 of 4 is not a JSON object .*not the last line"
                 -- $<TARGET_FILE:check_profile> ${DATA}/profiles/torn-middle 1 0 100 no-summary)
set_tests_properties(check_profile_torn_last_ignored check_profile_torn_middle_refused PROPERTIES
                     LABELS mpi TIMEOUT 30)

# a folder an earlier 4-rank run wrote into: a 2-rank run removes profile-rank2/3.* (they would
# read as its own) and leaves only its own ranks' files
set(STALE_PROFILE ${CMAKE_BINARY_DIR}/profiles/refit_run_profile_stale_ranks)
string(REPLACE ";" " " REFIT_RUN_SH "${REFIT_RUN}")
add_test(NAME refit_run_profile_stale_ranks
         COMMAND ${EXPECT} ok "refit: COMMITTED 1 update" "^files: profile-rank0.json profile-rank0.jsonl profile-rank1.json profile-rank1.jsonl keep.txt$"
                 -- sh -c "rm -rf ${STALE_PROFILE} && mkdir -p ${STALE_PROFILE} && for f in profile-rank2.json profile-rank3.jsonl profile-rank3.json.tmp keep.txt; do echo x > ${STALE_PROFILE}/$f; done && ${REFIT_RUN_SH} -np 2 $<TARGET_FILE:refit-run> --profile-dir ${STALE_PROFILE} --topology ${TOPO}/llama-tiny-tp1-to-tp1.yaml --steps 1 && echo files: $(cd ${STALE_PROFILE} && ls | sort | grep -v keep.txt) keep.txt"
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(refit_run_profile_stale_ranks PROPERTIES LABELS mpi TIMEOUT 120)

# the main job on real input: full-size Qwen3-0.6B shape, generator weights
refit_run_test(refit_run_default_qwen3_0_6b 4 ok "refit: COMMITTED 2 update\\(s\\), verified 310 tensors" --steps 2)
refit_run_test(refit_run_qwen3_0_6b_tp2_to_2xtp1 4 ok "refit: COMMITTED 2 update\\(s\\), verified 310 tensors"
               --topology ${TOPO}/qwen3-0.6b-tp2-to-2xtp1.yaml --steps 2)
refit_run_test(refit_run_qwen3_0_6b_tp2pp2_to_tp4 8 ok "refit: COMMITTED 2 update\\(s\\), verified 310 tensors"
               --topology ${TOPO}/qwen3-0.6b-tp2pp2-to-tp4.yaml --steps 2)
set_tests_properties(refit_run_default_qwen3_0_6b refit_run_qwen3_0_6b_tp2_to_2xtp1
                     refit_run_qwen3_0_6b_tp2pp2_to_tp4 PROPERTIES LABELS "mpi;slow")
