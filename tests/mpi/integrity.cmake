# Integrity on by default (issue 13 items 5 and 7; docs/faults.md "Failure classes"): the
# checksum trailer is on unless --no-integrity or transfer.integrity: false turns it off, the
# update table says which, --integrity forces it on over the topology, and a corrupted chunk
# that integrity-off lets through commits but fails its own table line through the oracle.
# Also: checkpoint tensors skipped on purpose, INFO on the skip list and WARN otherwise.
# Included from tests/mpi/CMakeLists.txt after faults.cmake (uses REFIT_RUN, EXPECT, TTOPO,
# DATA, FTOPO4, RECOVERED, fault_test, refit_run_test).
set(NOINT_TOPO ${TTOPO}/llama-tiny-tp2-to-2xtp1-faults-no-integrity.yaml)
set(ORACLE_FAILED "refit update 2/3: FAILED  source generator  topology [^ ]+ \\(2 trainer \\+ 2 rollout ranks\\) \\(committed by the gate; oracle: verify: model.embed_tokens .* elements wrong\\)$"
                  "rollout paused: no")

# on by default on host-shm ipc too (mpi: faults_corrupt_chunk): every chunk of this topology is
# staged (trainer TP2 -> engines TP1 gathers), so the flipped byte is caught before any byte of
# the update lands
fault_test(ipc_corrupt_chunk_default 4 ${CMAKE_SOURCE_DIR}/jobs/topologies/llama-tiny-tp2-to-2xtp1-colocated-ipc.yaml
           "integrity +on: XXH3-64 over every SEQ message and its staged bytes" "refit update 2/3: FAILED"
           "verdict +rank [23]: RF_ERR_INTEGRITY: update 2: chunk seq 0 .*checksum mismatch.*before unpacking; chunk carries model.embed_tokens.weight"
           "rollout paused: yes; storage unchanged: yes" ${RECOVERED} ARGS --inject-fault corrupt-chunk)

# integrity off (the topology, or --no-integrity over the default): the flipped byte commits and
# is served; only the oracle finds it, and update 2's own line says FAILED with the oracle's
# reason
fault_test(corrupt_chunk_integrity_off_topology 4 ${NOINT_TOPO}
           "integrity +off \\(transfer.integrity: false\\): chunks carry no checksum"
           ${ORACLE_FAILED} ${RECOVERED} ARGS --inject-fault corrupt-chunk)
fault_test(corrupt_chunk_no_integrity 4 ${FTOPO4}
           "integrity +off \\(--no-integrity\\): chunks carry no checksum"
           ${ORACLE_FAILED} ${RECOVERED} ARGS --no-integrity --inject-fault corrupt-chunk)
# --integrity forces it on over a topology that turns it off
fault_test(corrupt_chunk_integrity_forced 4 ${NOINT_TOPO}
           "integrity +on: XXH3-64 trailer on every chunk"
           "verdict +rank [23]: RF_ERR_INTEGRITY: update 2: chunk seq 0 .*checksum mismatch.*before unpacking; chunk carries model.embed_tokens.weight"
           "rollout paused: yes; storage unchanged: yes" ${RECOVERED}
           ARGS --integrity --inject-fault corrupt-chunk)
refit_run_test(integrity_both_options_refused 2 fail
               "refit: FAILED: --integrity and --no-integrity contradict each other"
               --topology ${CMAKE_SOURCE_DIR}/jobs/topologies/llama-tiny-tp1-to-tp1.yaml
               --integrity --no-integrity)

# skipped checkpoint tensors: one on the documented skip list (rotary_emb.inv_freq, added by
# make_skip_ckpt) at INFO; layer 2's 9 tensors cut away by model.overrides at WARN
add_executable(make_skip_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/make_skip_ckpt.c)
target_link_libraries(make_skip_ckpt PRIVATE refit)
add_test(NAME make_skip_ckpt_checkpoint
         COMMAND make_skip_ckpt ${DATA}/llama-tiny ${CMAKE_BINARY_DIR}/skip-llama-tiny)
set_tests_properties(make_skip_ckpt_checkpoint PROPERTIES LABELS mpi FIXTURES_SETUP skip_ckpt)
set(SKIP_INFO "refit INFO checkpoint [^ ]+: skipped 1 tensor\\(s\\) on the skip list \\(first: model.layers.0.self_attn.rotary_emb.inv_freq\\)")
set(CUT_WARN "refit WARN checkpoint [^ ]+: skipped 9 tensor\\(s\\) not on the skip list: cut away by model.overrides \\(first: model.layers.2.")
refit_run_test(refit_run_skipped_tensors_logged 2 ok
               "${SKIP_INFO};${CUT_WARN};refit: COMMITTED 1 update\\(s\\)"
               --topology ${TTOPO}/llama-tiny-2l-tp1-to-tp1.yaml
               --checkpoint ${CMAKE_BINARY_DIR}/skip-llama-tiny --steps 1)
set_tests_properties(refit_run_skipped_tensors_logged PROPERTIES FIXTURES_REQUIRED skip_ckpt
                     ENVIRONMENT "REFIT_LOG_LEVEL=info")
# the profile says what the table says: update 2 committed by the gate, failed by the oracle,
# on every rank's line (rank 0's outcome), and the summary counts it apart
set(NOINT_PROFILE ${CMAKE_BINARY_DIR}/profiles/faults_corrupt_chunk_integrity_off_topology)
add_test(NAME profile_oracle_failed_recorded
         COMMAND ${EXPECT} ok "\"update\": ?2,.*\"status\": ?\"RF_OK\".*\"oracle\": ?\"failed\""
                 "\"update\": ?3,.*\"oracle\": ?\"passed\""
                 "\"committed\": ?3" "\"oracle_failed\": ?1"
                 -- sh -c "cat ${NOINT_PROFILE}/profile-rank3.jsonl ${NOINT_PROFILE}/profile-rank0.json | tr -d '\\n' | sed 's/}{/}\\n{/g'; echo")
set_tests_properties(profile_oracle_failed_recorded PROPERTIES LABELS mpi
                     DEPENDS faults_corrupt_chunk_integrity_off_topology)

# the spinning mpi sender's refit-sum64 seal summed by a thread pool (rf_chunk_seal_pool;
# REFIT_MPI_SEAL_THREADS=3 where CI's 2 cores would give 1): 2 MiB chunks of a widened llama
# (its 26 MB from the generator) above the pool's 1 MiB minimum, checked by the receiver on
# the host: every update commits and the oracle verifies it, so the pooled trailer equals the
# receiver's one-thread sum on every chunk; a flipped byte after the seal is still caught
set(SEAL_POOL_ENV "REFIT_LOG_LEVEL=info;REFIT_MPI_SEND_SPIN=1;REFIT_MPI_SEAL_THREADS=3;REFIT_INTEGRITY_TRAILER=sum64")
set(SEAL_POOL_OK "rank 0: seals refit-sum64 chunks with 3 thread\\(s\\)"
                 "integrity +on: refit-sum64 v1 trailer on every chunk"
                 "payload +[0-9.]+ MB in [0-9]+ chunks of 2.10 MB"
                 "refit: COMMITTED 3 update\\(s\\), verified 30 tensors")
refit_run_test(integrity_seal_pool_sum64 2 ok "${SEAL_POOL_OK}"
               --topology ${TTOPO}/llama-wide-tp1-to-tp1-sum64.yaml --steps 3)
set_tests_properties(integrity_seal_pool_sum64 PROPERTIES ENVIRONMENT "${SEAL_POOL_ENV}")
set(SEAL_POOL_CAUGHT "refit update 2/3: FAILED"
                     "verdict +rank 1: RF_ERR_INTEGRITY: update 2: chunk seq 0 .*checksum mismatch \\(refit-sum64 v1 .*before unpacking; chunk carries model.embed_tokens.weight"
                     "rollout paused: yes; storage unchanged: yes" ${RECOVERED})
refit_run_test(integrity_seal_pool_corrupt_chunk 2 fail "${SEAL_POOL_CAUGHT}"
               --topology ${TTOPO}/llama-wide-tp1-to-tp1-sum64.yaml --steps 3
               --inject-fault corrupt-chunk)
set_tests_properties(integrity_seal_pool_corrupt_chunk PROPERTIES ENVIRONMENT "${SEAL_POOL_ENV}")

# the fused seal (issue 18 item 1): a streamed checkpoint's read threads sum each block they
# read (rf_chunk_sum_t), and the spinning sender seals from that sum (rf_chunk_seal_sum)
# instead of reading the chunk again: llama-tiny's checkpoint in 64 KiB chunks (15 an update),
# 3 read threads, refit-sum64 checked by the receiver on the host: every update commits, the
# oracle verifies every tensor against the reference, and the profile counts the fused seals
# (every chunk of the checkpoint updates 1 and 3; update 2 is the generator's, packed from
# the shard buffers: none); with REFIT_MPI_SEAL_FUSED=0 the same job seals by reading (0
# fused); a byte flipped after the fused seal (update 3, a checkpoint update) is caught before
# unpacking, and update 4 commits
set(FUSED_ENV "REFIT_MPI_SEND_SPIN=1;REFIT_CKPT_READ_THREADS=3;REFIT_INTEGRITY_TRAILER=sum64")
set(FUSED_ARGS --topology ${TTOPO}/llama-tiny-tp1-to-tp1-sum64-64k.yaml
               --checkpoint ${DATA}/llama-tiny
               --reference ${DATA}/llama-tiny/tensors.reference.json)
refit_run_test(integrity_seal_fused_ckpt 2 ok
               "integrity +on: refit-sum64 v1 trailer on every chunk;refit: COMMITTED 3 update\\(s\\), verified 30 tensors"
               ${FUSED_ARGS} --steps 3)
set_tests_properties(integrity_seal_fused_ckpt PROPERTIES ENVIRONMENT "${FUSED_ENV}")
refit_run_test(integrity_seal_fused_off_ckpt 2 ok
               "refit: COMMITTED 3 update\\(s\\), verified 30 tensors" ${FUSED_ARGS} --steps 3)
set_tests_properties(integrity_seal_fused_off_ckpt PROPERTIES
                     ENVIRONMENT "${FUSED_ENV};REFIT_MPI_SEAL_FUSED=0")
# the trainer's profile, one line per update: "update source reads_in_pack chunks_sent seals_fused"
set(FUSED_LINES "import json,sys\nfor l in open(sys.argv[1]):\n    u=json.loads(l); t=u.get('trainer',{})\n    print('update',u['update'],u['source'],t.get('reads_in_pack'),u['counters']['chunks_sent'],t.get('seals_fused'))")
foreach(case "integrity_seal_fused_ckpt;15" "integrity_seal_fused_off_ckpt;0")
  list(GET case 0 run)
  list(GET case 1 n)
  add_test(NAME ${run}_profile
           COMMAND ${EXPECT} ok "^update 1 checkpoint True 15 ${n}$" "^update 2 generator False 15 0$"
                   "^update 3 checkpoint True 15 ${n}$"
                   -- sh -c "printf \"${FUSED_LINES}\" > ${CMAKE_BINARY_DIR}/fused_lines.py && /usr/bin/python3 ${CMAKE_BINARY_DIR}/fused_lines.py ${CMAKE_BINARY_DIR}/profiles/${run}/profile-rank0.jsonl")
  set_tests_properties(${run}_profile PROPERTIES LABELS mpi DEPENDS ${run})
endforeach()
# the readers take the seal's workers (runtime/session_setup.c): with the fused seal on and no
# REFIT_CKPT_READ_THREADS, a checkpoint update is read by twice the threads it is read by with
# REFIT_MPI_SEAL_FUSED=0 (rf_env_spare_threads each, whatever the machine's cores)
foreach(case "on;" "off;REFIT_MPI_SEAL_FUSED=0")
  list(GET case 0 k)
  list(GET case 1 extra)
  refit_run_test(integrity_seal_fused_readers_${k} 2 ok "refit: COMMITTED 1 update\\(s\\), verified 30 tensors"
                 ${FUSED_ARGS} --steps 1)
  set_tests_properties(integrity_seal_fused_readers_${k} PROPERTIES
                       ENVIRONMENT "REFIT_MPI_SEND_SPIN=1;REFIT_INTEGRITY_TRAILER=sum64;${extra}")
endforeach()
add_test(NAME integrity_seal_fused_readers
         COMMAND ${EXPECT} ok "^readers fused [0-9]+ pooled [0-9]+ twice True$"
                 -- /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/profile_readers.py
                 ${CMAKE_BINARY_DIR}/profiles/integrity_seal_fused_readers_on/profile-rank0.jsonl
                 ${CMAKE_BINARY_DIR}/profiles/integrity_seal_fused_readers_off/profile-rank0.jsonl)
set_tests_properties(integrity_seal_fused_readers PROPERTIES LABELS mpi
                     DEPENDS "integrity_seal_fused_readers_on;integrity_seal_fused_readers_off")
refit_run_test(integrity_seal_fused_corrupt_chunk 2 fail
               "refit update 3/4: FAILED;verdict +rank 1: RF_ERR_INTEGRITY: update 3: chunk seq 0 .*checksum mismatch \\(refit-sum64 v1 .*before unpacking;rollout paused: yes; storage unchanged: yes;refit update 4/4: COMMITTED"
               ${FUSED_ARGS} --steps 4 --inject-fault corrupt-chunk@3)
set_tests_properties(integrity_seal_fused_corrupt_chunk PROPERTIES ENVIRONMENT "${FUSED_ENV}")
