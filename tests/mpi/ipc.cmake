# The ipc transport on colocated CPU topologies (host backend: POSIX shared memory), label mpi.
# End to end with --reference and --cold-check; the same storage bytes as the mpi transport on
# the same topology (--storage-digest); faults on the SEQ / ACK protocol with the next update
# committing; no /dev/shm/refit-* object left behind, after a good run and after a dead rank.
# Included from tests/mpi/CMakeLists.txt after faults.cmake (uses REFIT_RUN, EXPECT, TOPO,
# TTOPO, DATA, RECOVERED, refit_run_test, fault_test).
set(IPC_SAME ${CMAKE_CURRENT_SOURCE_DIR}/ipc_same_bytes.sh)
set(IPC_LEFT ${CMAKE_CURRENT_SOURCE_DIR}/ipc_no_leftover.sh)
set(ITOPO4 ${TTOPO}/llama-tiny-tp2-to-tp2-colocated-ipc-faults.yaml)

foreach(case "llama-tiny-tp2-to-tp2;4;llama-tiny;30" "llama-tiny-tp2-to-2xtp1;4;llama-tiny;30"
             "qwen3-tiny-tied-tp1-to-tp1;2;qwen3-tiny-tied;24")
  list(GET case 0 topo)
  list(GET case 1 np)
  list(GET case 2 data)
  list(GET case 3 ntensors)
  refit_run_test(ipc_${topo} ${np} ok
                 "ipc transport;refit: COMMITTED 3 update\\(s\\), verified ${ntensors} tensors"
                 --topology ${TOPO}/${topo}-colocated-ipc.yaml --checkpoint ${DATA}/${data}
                 --reference ${DATA}/${data}/tensors.reference.json --steps 3 --cold-check)
  # same bytes as the mpi transport: checkpoint, generator, checkpoint
  add_test(NAME ipc_same_bytes_${topo}
           COMMAND ${IPC_SAME} ${TOPO}/${topo}-colocated-ipc.yaml
                   ${TTOPO}/${topo}-colocated-mpi.yaml --
                   ${REFIT_RUN} -np ${np} $<TARGET_FILE:refit-run> --checkpoint ${DATA}/${data}
                   --steps 3 --profile-dir ${CMAKE_BINARY_DIR}/profiles/ipc_same_bytes_${topo}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(ipc_same_bytes_${topo} PROPERTIES LABELS mpi TIMEOUT 300)
endforeach()
# PP2 -> TP2: two stage senders, each rollout rank reads one stage of its pair in place
add_test(NAME ipc_same_bytes_llama-tiny-tp1pp2-to-tp2
         COMMAND ${IPC_SAME} ${TTOPO}/llama-tiny-tp1pp2-to-tp2-colocated-ipc.yaml
                 ${TTOPO}/llama-tiny-tp1pp2-to-tp2-colocated-mpi.yaml --
                 ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run> --checkpoint ${DATA}/llama-tiny
                 --reference ${DATA}/llama-tiny/tensors.reference.json --cold-check --steps 3
                 --profile-dir ${CMAKE_BINARY_DIR}/profiles/ipc_same_bytes_llama-tiny-tp1pp2-to-tp2
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(ipc_same_bytes_llama-tiny-tp1pp2-to-tp2 PROPERTIES LABELS mpi TIMEOUT 300)
# MoE: bf16 TP2 -> TP2 (experts staged), WNA16 from trainer DP replicas (all in place)
foreach(t qwen3-moe-tiny-tp2-to-tp2 qwen3-moe-tiny-wna16-dp2-to-tp2ep2)
  add_test(NAME ipc_same_bytes_${t}
           COMMAND ${IPC_SAME} ${TTOPO}/${t}-colocated-ipc.yaml ${TTOPO}/${t}-colocated-mpi.yaml --
                   ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run> --checkpoint ${DATA}/qwen3-moe-tiny
                   --cold-check --steps 3 --profile-dir ${CMAKE_BINARY_DIR}/profiles/ipc_same_bytes_${t}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(ipc_same_bytes_${t} PROPERTIES LABELS mpi TIMEOUT 300)
endforeach()
# small chunks and integrity: chunks read in place only, chunks partly staged, 2 slots
refit_run_test(ipc_small_chunks_integrity 4 ok "max 2 chunks in flight;refit: COMMITTED 3 update\\(s\\), verified 30 tensors"
               --topology ${ITOPO4} --checkpoint ${DATA}/llama-tiny --integrity --steps 3
               --reference ${DATA}/llama-tiny/tensors.reference.json --cold-check)

# faults on the SEQ messages and the deadlines (FTOPO-style: 64 KiB chunks, 3 s deadline)
function(ipc_fault_test name)
  cmake_parse_arguments(F "" "" "ARGS" ${ARGN})
  add_test(NAME ipc_faults_${name}
           COMMAND ${EXPECT} fail ${F_UNPARSED_ARGUMENTS} -- ${REFIT_RUN} -np 4
                   $<TARGET_FILE:refit-run>
                   --profile-dir ${CMAKE_BINARY_DIR}/profiles/ipc_faults_${name}
                   --topology ${ITOPO4} --checkpoint ${DATA}/llama-tiny --steps 3 ${F_ARGS}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(ipc_faults_${name} PROPERTIES LABELS mpi TIMEOUT 120)
endfunction()
ipc_fault_test(drop_chunk
               "verdict +rank [23]: RF_ERR_SEQUENCE: update 2: chunk seq 0 .*gap in the sequence: header carries seq 1, expected 0"
               "rollout paused: yes" ${RECOVERED} ARGS --inject-fault drop-chunk)
ipc_fault_test(duplicate_chunk
               "verdict +rank [23]: RF_ERR_SEQUENCE: update 2: chunk seq 1 .*repeated chunk: header carries seq 0"
               "rollout paused: yes" ${RECOVERED} ARGS --integrity --inject-fault duplicate-chunk)
# integrity on by default: the staged byte flipped after the checksum is caught before unpacking
ipc_fault_test(corrupt_chunk
               "integrity +on: XXH3-64 over every SEQ message and its staged bytes"
               "verdict +rank [23]: RF_ERR_INTEGRITY: update 2: chunk seq [0-9]+ .*checksum mismatch.*before unpacking; chunk carries model\\."
               "rollout paused: yes" ${RECOVERED} ARGS --inject-fault corrupt-chunk)
ipc_fault_test(stall_rollout
               "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "verdict after [34]\\.[0-9]+ s"
               "rollout paused: yes" ${RECOVERED} ARGS --inject-fault stall)
ipc_fault_test(stall_sender
               "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "rollout paused: yes"
               ${RECOVERED} ARGS --inject-fault stall:0)
ipc_fault_test(gather_drop
               "verdict +rank [0-9]: RF_ERR_TIMEOUT: .*deadline expired" "rollout paused: yes"
               ${RECOVERED} ARGS --inject-fault gather-drop)
# update 10 reuses update 2's tags: a SEQ or ACK left over from update 2 would be received there
add_test(NAME ipc_faults_drop_chunk_tag_reuse
         COMMAND ${EXPECT} fail "refit update 10/10: COMMITTED"
                 "9 of 10 update\\(s\\) committed and verified \\(failed: 2\\)"
                 -- ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run> --topology ${ITOPO4}
                 --steps 10 --inject-fault drop-chunk@2
                 --profile-dir ${CMAKE_BINARY_DIR}/profiles/ipc_faults_drop_chunk_tag_reuse
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(ipc_faults_drop_chunk_tag_reuse PROPERTIES LABELS mpi TIMEOUT 120)

# nothing left in /dev/shm: after a good run, a failed update, and a rank that dies
foreach(case "good;ok;ipcok;--steps;2" "failed;fail;ipcfl;--inject-fault;drop-chunk"
             "dead;fail;ipcdd;--inject-fault;exit")
  list(GET case 0 name)
  list(GET case 1 want)
  list(GET case 2 tag)
  list(SUBLIST case 3 -1 args)
  add_test(NAME ipc_no_leftover_${name}
           COMMAND ${IPC_LEFT} ${want} ${tag} -- ${REFIT_RUN} -np 4 $<TARGET_FILE:refit-run>
                   --topology ${ITOPO4} --checkpoint ${DATA}/llama-tiny ${args}
                   --profile-dir ${CMAKE_BINARY_DIR}/profiles/ipc_no_leftover_${name}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(ipc_no_leftover_${name} PROPERTIES LABELS mpi TIMEOUT 60)
endforeach()

# refused at startup: ipc without colocated
refit_run_test(ipc_not_colocated_refused 4 fail "refit: FAILED: .*transport: ipc without colocated: true is not available"
               --topology ${TTOPO}/llama-tiny-tp2-to-tp2-ipc-not-colocated.yaml)
