# Mode p2p on the mpi transport (DESIGN.md section 9): each trainer rank sends each rollout
# rank only the rectangles of its own shard that rank needs. End to end with --reference and
# --cold-check, the same storage bytes as broadcast on the same shapes, and faults failing
# closed and recovering. Included from tests/mpi/CMakeLists.txt after refit_run.cmake and
# faults.cmake (uses REFIT_RUN, EXPECT, TOPO, TTOPO, DATA, RECOVERED, fault_test).
set(P2P_SAME ${CMAKE_CURRENT_SOURCE_DIR}/ipc_same_bytes.sh)

# "topology;np;checkpoint;verified tensors;broadcast twin"
foreach(case "llama-tiny-tp2-to-2xtp1-p2p;4;llama-tiny;30;${TOPO}/llama-tiny-tp2-to-2xtp1.yaml"
             "llama-tiny-tp2pp2-to-tp2-p2p;6;llama-tiny;30;${TOPO}/llama-tiny-tp2pp2-to-tp2.yaml"
             "llama-tiny-dp2-to-2xtp1-p2p;4;llama-tiny;30;${TTOPO}/llama-tiny-dp2-to-2xtp1-broadcast.yaml"
             "qwen3-moe-tiny-tp1-to-tp2ep2-p2p;3;qwen3-moe-tiny;69;${TOPO}/qwen3-moe-tiny-tp1-to-tp2ep2-linear.yaml"
             "qwen3-moe-tiny-dp2ep2-to-2xtp1-p2p;4;qwen3-moe-tiny;69;${TTOPO}/qwen3-moe-tiny-dp2ep2-to-2xtp1-broadcast.yaml")
  list(GET case 0 topo)
  list(GET case 1 np)
  list(GET case 2 ck)
  list(GET case 3 nver)
  list(GET case 4 twin)
  refit_run_test(p2p_${topo} ${np} ok "refit: COMMITTED 3 update\\(s\\), verified ${nver} tensors"
                 --topology ${TTOPO}/${topo}.yaml --checkpoint ${DATA}/${ck}
                 --reference ${DATA}/${ck}/tensors.reference.json --cold-check --steps 3)
  # p2p lands exactly the bytes broadcast lands (checkpoint and generator updates)
  add_test(NAME p2p_same_bytes_${topo}
           COMMAND ${P2P_SAME} ${TTOPO}/${topo}.yaml ${twin} --
                   ${REFIT_RUN} -np ${np} $<TARGET_FILE:refit-run> --checkpoint ${DATA}/${ck}
                   --steps 3 --profile-dir ${CMAKE_BINARY_DIR}/profiles/p2p_same_bytes_${topo}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(p2p_same_bytes_${topo} PROPERTIES LABELS mpi TIMEOUT 300)
endforeach()

# small chunks: rectangles split into row pieces over many chunks per pair, generator weights
refit_run_test(p2p_small_chunks 4 ok "refit: COMMITTED 3 update\\(s\\)"
               --topology ${TTOPO}/llama-tiny-tp2-to-2xtp1-p2p-faults.yaml --cold-check --steps 3)

# faults: fail closed naming the pair's chunk, recover on the next update (both receivers see
# the fault; the verdict names whichever reported it first, the other reports PEER)
set(P2P_FTOPO ${CMAKE_CURRENT_SOURCE_DIR}/topologies/llama-tiny-tp2-to-2xtp1-p2p-faults.yaml)
fault_test(p2p_drop_chunk 4 ${P2P_FTOPO}
           "verdict +rank [23]: RF_ERR_SEQUENCE: update 2: chunk seq 0 \\(stage 0\\) from rank 0: gap in the sequence: header carries seq 1, expected 0"
           "rollout paused: yes" ${RECOVERED} ARGS --inject-fault drop-chunk)
fault_test(p2p_corrupt_chunk 4 ${P2P_FTOPO}
           "verdict +rank [23]: RF_ERR_INTEGRITY: update 2: chunk seq 0 .*checksum mismatch.*before unpacking"
           "rollout paused: yes; storage unchanged: yes" ${RECOVERED}
           ARGS --integrity --inject-fault corrupt-chunk)

# refused with a clear message: quantized models (rectangles of block scales / packed words
# are not scheduled) and the ipc transport
refit_run_test(p2p_quantized_refused 2 fail "refit: FAILED: .*transfer.mode: p2p supports unquantized models only"
               --topology ${TTOPO}/qwen3-fp8-tiny-tp1-to-tp1-p2p.yaml --checkpoint ${DATA}/qwen3-fp8-tiny)
