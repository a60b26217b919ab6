# Checkpoint updates read in the pack (issue 18 item 3; rf_trainer_produce's streamed
# production, the mpi sender's pack thread): on a trainer TP1 stage sender with 64 KiB chunks,
# safetensors and HDF5 (hdf5.cmake's converted fixture) and GraniteMoE's 3-D expert datasets,
# the same storage digests as reading the whole checkpoint first, every update committed and
# verified (--reference / the oracle, --cold-check; GraniteMoE with every update a checkpoint
# update, --checkpoint-updates all). Included after hdf5.cmake (H5D, fixtures).
set(STREAM_SAME ${CMAKE_CURRENT_SOURCE_DIR}/stream_same_bytes.sh)
foreach(case "llama_st;llama-tiny-tp1-to-tp1-small-chunks;${DATA}/llama-tiny;--reference;${DATA}/llama-tiny/tensors.reference.json"
             "llama_h5;llama-tiny-tp1-to-tp1-small-chunks;${H5D}/llama-tiny.h5;--reference;${DATA}/llama-tiny/tensors.reference.json"
             "granitemoe_st;granitemoe-tiny-tp1-to-tp1-small-chunks;${DATA}/granitemoe-tiny;--cold-check;--checkpoint-updates;all")
  list(GET case 0 n)
  list(GET case 1 topo)
  list(GET case 2 ck)
  list(SUBLIST case 3 -1 extra)
  add_test(NAME ckpt_stream_same_bytes_${n}
           COMMAND ${STREAM_SAME} ${CMAKE_BINARY_DIR}/profiles/ckpt_stream_${n} --
                   ${REFIT_RUN} -np 2 $<TARGET_FILE:refit-run>
                   --topology ${TTOPO}/${topo}.yaml --checkpoint ${ck} ${extra} --steps 3
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(ckpt_stream_same_bytes_${n} PROPERTIES LABELS mpi TIMEOUT 120)
endforeach()
set_tests_properties(ckpt_stream_same_bytes_llama_h5 PROPERTIES FIXTURES_REQUIRED h5_llama-tiny)
