# Fail closed under faults (DESIGN.md sections 9-11; docs/faults.md): refit-run --inject-fault
# on the llama-tiny fixture, 4 ranks (trainer TP2 -> 2 engines TP1; 64 KiB chunks, 3 s
# deadline) and 6 ranks (TP2 PP2 -> TP2, integrity on). Every recoverable fault hits update 2
# of 3: the verdict names the reason, rollout ranks stay paused, update 3 commits and
# verifies, refit-run exits non-zero naming update 2. Included from tests/mpi/CMakeLists.txt
# after refit_run.cmake (uses its REFIT_RUN, EXPECT, TTOPO, DATA).
set(FTOPO4 ${CMAKE_CURRENT_SOURCE_DIR}/topologies/llama-tiny-tp2-to-2xtp1-faults.yaml)
set(FTOPO6 ${CMAKE_CURRENT_SOURCE_DIR}/topologies/llama-tiny-tp2pp2-to-tp2-faults.yaml)
set(RECOVERED "refit update 3/3: COMMITTED"
              "2 of 3 update\\(s\\) committed and verified \\(failed: 2\\)"
              "refit: FAILED: update 2: ")

# fault_test(NAME NP TOPOLOGY REGEX... ARGS refit-run-args...): expects a non-zero exit and
# every REGEX on some line of the output
function(fault_test name np topo)
  cmake_parse_arguments(F "" "" "ARGS" ${ARGN})
  add_test(NAME faults_${name}
           COMMAND ${EXPECT} fail ${F_UNPARSED_ARGUMENTS} -- ${REFIT_RUN} -np ${np}
                   $<TARGET_FILE:refit-run>
                   --profile-dir ${CMAKE_BINARY_DIR}/profiles/faults_${name} --topology ${topo}
                   --checkpoint ${DATA}/llama-tiny --steps 3 ${F_ARGS}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(faults_${name} PROPERTIES LABELS mpi TIMEOUT 120)
endfunction()

# transfer faults: the receiver names the chunk; integrity (on by default) catches a flipped
# byte before unpacking (so the storage is untouched)
fault_test(duplicate_chunk 4 ${FTOPO4}
           "verdict +rank [23]: RF_ERR_SEQUENCE: update 2: chunk seq 1 .*repeated chunk: header carries seq 0"
           "rollout paused: yes" ${RECOVERED} ARGS --integrity --inject-fault duplicate-chunk)
fault_test(drop_chunk 4 ${FTOPO4}
           "verdict +rank [23]: RF_ERR_SEQUENCE: update 2: chunk seq 0 .*gap in the sequence: header carries seq 1, expected 0"
           "rollout paused: yes" ${RECOVERED} ARGS --inject-fault drop-chunk)
fault_test(corrupt_chunk 4 ${FTOPO4}
           "integrity +on: XXH3-64 trailer on every chunk" "refit update 2/3: FAILED"
           "verdict +rank [23]: RF_ERR_INTEGRITY: update 2: chunk seq 0 .*checksum mismatch.*before unpacking; chunk carries model.embed_tokens.weight"
           "rollout paused: yes; storage unchanged: yes" ${RECOVERED}
           ARGS --inject-fault corrupt-chunk)

# source faults: the trainer's check fails at update begin, before any chunk: storage untouched
fault_test(wrong_dtype 4 ${FTOPO4}
           "verdict +rank 1: RF_ERR_MISMATCH: trainer rank 1: source tensor model.embed_tokens.weight has dtype F32, the manifest BF16"
           "rollout paused: yes; storage unchanged: yes" ${RECOVERED} ARGS --inject-fault wrong-dtype)
fault_test(wrong_shape 4 ${FTOPO4}
           "verdict +rank 1: RF_ERR_MISMATCH: trainer rank 1: source tensor model.embed_tokens.weight has shape .1004, ...., the manifest .1003"
           "rollout paused: yes; storage unchanged: yes" ${RECOVERED} ARGS --inject-fault wrong-shape)
fault_test(missing_tensor 4 ${FTOPO4}
           "verdict +rank 1: RF_ERR_MISSING: trainer rank 1: source lacks tensor model.embed_tokens.weight"
           "rollout paused: yes; storage unchanged: yes" ${RECOVERED} ARGS --inject-fault missing-tensor)
fault_test(extra_tensor 4 ${FTOPO4}
           "verdict +rank 0: RF_ERR_EXTRA: trainer rank 0: source has tensor .*injected_extra.weight, which the manifest lacks"
           "rollout paused: yes; storage unchanged: yes" ${RECOVERED} ARGS --inject-fault extra-tensor:0)

# storage moved during the update fails at finalize naming the slot; moved before the update
# replans and commits
fault_test(move_storage 4 ${FTOPO4}
           "verdict +rank 3: RF_ERR_MOVED: update 2: slot model.embed_tokens.weight changed its signature"
           "rollout paused: yes" "refit: rank 3: plan rebuilt before update 3" ${RECOVERED}
           ARGS --inject-fault move-storage)
add_test(NAME faults_move_storage_between
         COMMAND ${EXPECT} ok "refit: rank 2: plan rebuilt before update 2 \\(model.embed_tokens.weight changed"
                 "refit update 2/3: COMMITTED" "refit: COMMITTED 3 update\\(s\\), verified 30 tensors"
                 -- ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run> --topology ${FTOPO4}
                 --checkpoint ${DATA}/llama-tiny --steps 3 --inject-fault move-storage-between:2
                 --profile-dir ${CMAKE_BINARY_DIR}/profiles/faults_move_storage_between
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(faults_move_storage_between PROPERTIES LABELS mpi TIMEOUT 120)

# deadlines: a stalled rank (rollout, stage sender, gather contributor) times out everywhere
# at the 3 s deadline and the job moves on
fault_test(stall_rollout 4 ${FTOPO4}
           "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "verdict after [34]\\.[0-9]+ s"
           "rollout paused: yes" ${RECOVERED} ARGS --inject-fault stall)
fault_test(stall_sender 4 ${FTOPO4}
           "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "rollout paused: yes"
           ${RECOVERED} ARGS --inject-fault stall:0)
fault_test(stall_gather 4 ${FTOPO4}
           "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "rollout paused: yes"
           ${RECOVERED} ARGS --inject-fault stall:1)
# the stage gather: a contributor's part never comes; the sender times out, and its stale gather
# messages are drained (update 10 reuses update 2's tags: a leftover would be received there)
fault_test(gather_drop 4 ${FTOPO4}
           "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "rollout paused: yes"
           ${RECOVERED} ARGS --inject-fault gather-drop)
add_test(NAME faults_gather_drop_tag_reuse
         COMMAND ${EXPECT} fail "refit update 10/10: COMMITTED"
                 "9 of 10 update\\(s\\) committed and verified \\(failed: 2\\)"
                 -- ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run> --topology ${FTOPO4}
                 --steps 10 --inject-fault gather-drop@2
                 --profile-dir ${CMAKE_BINARY_DIR}/profiles/faults_gather_drop_tag_reuse
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(faults_gather_drop_tag_reuse PROPERTIES LABELS mpi TIMEOUT 120)
# PP2, integrity on: stage 1's gather and stage 1's sender
fault_test(pp2_gather_drop 6 ${FTOPO6}
           "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "rollout paused: yes"
           ${RECOVERED} ARGS --inject-fault gather-drop:3)
# either rollout rank may see the gap first (the other then reports PEER), as in drop_chunk
fault_test(pp2_drop_chunk_stage1 6 ${FTOPO6}
           "verdict +rank [45]: RF_ERR_SEQUENCE: update 2: chunk seq [0-9]+ \\(stage 1\\) from rank 2: gap in the sequence"
           "rollout paused: yes" ${RECOVERED} ARGS --inject-fault drop-chunk:2)
fault_test(pp2_stall_stage1_sender 6 ${FTOPO6}
           "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "rollout paused: yes"
           ${RECOVERED} ARGS --inject-fault stall:2)

# a process that dies ends the job non-zero within seconds (Open MPI 4.1 kills the rest); the
# dying rank prints the last line itself (rank 0 is killed before it could learn of the death)
foreach(case "exit_rollout;exit" "exit_sender;exit:0" "exit_gather;exit:1")
  list(GET case 0 name)
  list(GET case 1 spec)
  add_test(NAME faults_${name}
           COMMAND ${EXPECT} fail "refit: fault: rank [0-9] exits during update 2"
                   "refit: FAILED: update 2: rank [0-9]: process exited \\(--inject-fault exit, "
                   -- ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run> --topology ${FTOPO4}
                   --checkpoint ${DATA}/llama-tiny --steps 3 --inject-fault ${spec}
                   --profile-dir ${CMAKE_BINARY_DIR}/profiles/faults_${name}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(faults_${name} PROPERTIES LABELS mpi TIMEOUT 30)
endforeach()

# a killed job leaves whole profile lines and no summary: a committed run leaves summaries in
# the folder, then rollout rank 2 exits during update 5 of 8 in the same folder; every rank's
# .jsonl then holds updates 1-4 (or 1-5, if a rank wrote update 5's line before Open MPI killed
# it), and the old summaries are gone rather than describing another run
set(EXIT_PROFILE ${CMAKE_BINARY_DIR}/profiles/faults_exit_profile)
add_test(NAME faults_exit_profile_previous
         COMMAND ${EXPECT} ok "refit: COMMITTED 2 update" -- ${REFIT_RUN} -np 4
                 $<TARGET_FILE:refit-run> --topology ${FTOPO4} --steps 2 --verify none
                 --profile-dir ${EXIT_PROFILE}
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME faults_exit_profile
         COMMAND ${EXPECT} fail "refit: fault: rank 2 exits during update 5"
                 "refit update 4/8: COMMITTED"
                 -- ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run> --topology ${FTOPO4}
                 --checkpoint ${DATA}/llama-tiny --steps 8 --inject-fault exit:2@5
                 --profile-dir ${EXIT_PROFILE}
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME check_profile_after_exit
         COMMAND ${EXPECT} ok "check_profile: ok: 4 rank" -- $<TARGET_FILE:check_profile>
                 ${EXIT_PROFILE} 4 4 5 no-summary)
set_tests_properties(faults_exit_profile_previous faults_exit_profile PROPERTIES
                     FIXTURES_SETUP exit_profile)
set_tests_properties(faults_exit_profile PROPERTIES DEPENDS faults_exit_profile_previous)
set_tests_properties(check_profile_after_exit PROPERTIES FIXTURES_REQUIRED exit_profile)
set_tests_properties(faults_exit_profile_previous faults_exit_profile check_profile_after_exit
                     PROPERTIES LABELS mpi TIMEOUT 60)

# bad fault specs are refused at startup
refit_run_test(faults_bad_kind 2 fail "refit: FAILED: --inject-fault: unknown kind 'melt'"
               --topology ${CMAKE_SOURCE_DIR}/jobs/topologies/llama-tiny-tp1-to-tp1.yaml
               --inject-fault melt)
refit_run_test(faults_bad_rank 4 fail "refit: FAILED: --inject-fault move-storage: rank 0 is not a rollout rank"
               --topology ${FTOPO4} --inject-fault move-storage:0)

# bad-weight-shape: the trainer's first wna16 weight_shape carries N + 1. Over mpi the rollout
# ranks check it on arrival; over ipc from device memory (device-emu, tests/gpu) after the
# chunk's copies completed. Either way the verdict names the tensor and both values, the
# rollout ranks stay paused, and update 3 commits. Refused on a model without weight_shape.
set(WSHAPE "weight_shape carries \\[33, 64\\], the model says \\[32, 64\\]" "rollout paused: yes"
           ${RECOVERED})
add_test(NAME faults_bad_weight_shape_mpi
         COMMAND ${EXPECT} fail ${WSHAPE} -- ${REFIT_RUN} -np 3 $<TARGET_FILE:refit-run>
                 --profile-dir ${CMAKE_BINARY_DIR}/profiles/faults_bad_weight_shape_mpi
                 --topology ${TTOPO}/qwen3-moe-tiny-wna16-triton-tp2ep2.yaml --steps 3
                 --inject-fault bad-weight-shape
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME faults_bad_weight_shape_ipc
         COMMAND ${EXPECT} fail ${WSHAPE} -- ${REFIT_RUN} -np 2 $<TARGET_FILE:refit-run>
                 --profile-dir ${CMAKE_BINARY_DIR}/profiles/faults_bad_weight_shape_ipc
                 --topology ${CMAKE_SOURCE_DIR}/jobs/topologies/qwen3-moe-tiny-wna16-tp1-to-tp1-colocated-ipc.yaml
                 --steps 3 --inject-fault bad-weight-shape
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME faults_bad_weight_shape_refused
         COMMAND ${EXPECT} fail "--inject-fault bad-weight-shape: the model's quantization is none; only wna16 models have weight_shape tensors"
                 -- ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run>
                 --profile-dir ${CMAKE_BINARY_DIR}/profiles/faults_bad_weight_shape_refused
                 --topology ${FTOPO4} --steps 3 --inject-fault bad-weight-shape
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(faults_bad_weight_shape_mpi faults_bad_weight_shape_ipc
                     faults_bad_weight_shape_refused PROPERTIES LABELS mpi TIMEOUT 120)

# a fault scheduled past the last update would never fire: refused at startup
add_test(NAME faults_past_last_update_refused
         COMMAND ${EXPECT} fail "--inject-fault drop-chunk@4: the job runs 3 update\\(s\\) \\(--steps\\), so the fault would never fire"
                 -- ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run>
                 --profile-dir ${CMAKE_BINARY_DIR}/profiles/faults_past_last_update_refused
                 --topology ${FTOPO4} --steps 3 --inject-fault drop-chunk@4
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(faults_past_last_update_refused PROPERTIES LABELS mpi TIMEOUT 120)
