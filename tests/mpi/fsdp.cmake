# trainer.layout fsdp (docs/topology.md; include/refit/trainer.h): every tensor split along
# dim 0 in ceil(N / dp) rows per trainer rank of its stage, as torch FSDP2's Shard(0). End to
# end on the llama-tiny checkpoint with --reference and --cold-check: 2 and 3 trainer ranks
# (3: uneven rows, 335 / 335 / 333 of the vocabulary) -> rollout TP 1 and 2, broadcast (the
# stage sender gathers every other rank's rows) and p2p (each rank sends its own rows). The
# trainer line proves the layout: the ranks produce the payload once between them (no
# replicas: megatron dp 2 would produce it twice) and, broadcast, the sender gathers the
# other ranks' share. Then pp 3 x dp 2, and qwen3-moe-tiny with 4 experts over 3 ranks, whose
# routers' 4 rows leave rank 2 an empty shard (generator weights: the checkpoint has 8).
# Included from tests/mpi/CMakeLists.txt after refit_run.cmake (REFIT_RUN, EXPECT, DATA).
set(FSDP_TOPO ${CMAKE_CURRENT_BINARY_DIR}/fsdp-topologies)
function(fsdp_topology out name model trainer rollout mode)
  file(WRITE ${FSDP_TOPO}/${name}.yaml
       "# written by tests/mpi/fsdp.cmake\nname: ${name}\n"
       "model: { config: ${CMAKE_SOURCE_DIR}/jobs/models/${model} }\n"
       "trainer: { ${trainer}, layout: fsdp }\nrollout: { engines: 1, ${rollout} }\n"
       "transfer: { mode: ${mode}, chunk_bytes: 64KiB, timeout_s: 120 }\n")
  set(${out} ${FSDP_TOPO}/${name}.yaml PARENT_SCOPE)
endfunction()

# "dp;rollout tp;bytes the broadcast sender gathers per update"
foreach(case "2;1;405.02 KB" "2;2;405.02 KB" "3;1;538.88 KB" "3;2;538.88 KB")
  list(GET case 0 dp)
  list(GET case 1 tp)
  list(GET case 2 gathered)
  math(EXPR np "${dp} + ${tp}")
  foreach(mode broadcast p2p)
    set(name llama-tiny-fsdp${dp}-to-tp${tp}-${mode})
    fsdp_topology(topo ${name} llama-tiny.config.json "dp: ${dp}" "tp: ${tp}" ${mode})
    if(mode STREQUAL "p2p")
      set(gathered "0 B")
    endif()
    set(want "trainer ${dp} rank\\(s\\) \\(tp 1 pp 1 dp ${dp}, layout fsdp\\)")
    list(APPEND want "produced 810.43 KB, read 810.43 KB, gathered ${gathered}")
    list(APPEND want "refit: COMMITTED 3 update\\(s\\), verified 30 tensors")
    refit_run_test(fsdp_${name} ${np} ok "${want}"
                   --topology ${topo} --checkpoint ${DATA}/llama-tiny
                   --reference ${DATA}/llama-tiny/tensors.reference.json --cold-check --steps 3)
  endforeach()
endforeach()

# pipeline stages: each stage's 2 dp ranks shard its tensors, each stage sender gathers its own
fsdp_topology(topo llama-tiny-fsdp2pp3-to-tp2-broadcast llama-tiny.config.json
              "dp: 2, pp: 3" "tp: 2" broadcast)
set(want "\\(tp 1 pp 3 dp 2, layout fsdp\\)" "produced 810.43 KB, read 810.43 KB"
    "refit: COMMITTED 3 update\\(s\\), verified 30 tensors")
refit_run_test(fsdp_llama-tiny-fsdp2pp3-to-tp2-broadcast 8 ok "${want}"
               --topology ${topo} --checkpoint ${DATA}/llama-tiny
               --reference ${DATA}/llama-tiny/tensors.reference.json --cold-check --steps 3)

# an empty last shard (the routers: 4 rows over 3 ranks go 2, 2, 0), experts row-sharded too
foreach(mode broadcast p2p)
  set(name qwen3-moe-tiny-4e-fsdp3-to-tp2-${mode})
  fsdp_topology(topo ${name} "qwen3-moe-tiny.config.json, overrides: { num_experts: 4 }"
                "dp: 3" "tp: 2" ${mode})
  set(want "produced 280.32 KB, read 0 B" "refit: COMMITTED 2 update\\(s\\), verified 45 tensors")
  refit_run_test(fsdp_${name} 5 ok "${want}"
                 --topology ${topo} --cold-check --steps 2)
endforeach()

# refused at startup naming the key: fsdp shards over dp alone
fsdp_topology(topo llama-tiny-fsdp-tp2-refused llama-tiny.config.json "tp: 2" "tp: 1" broadcast)
refit_run_test(fsdp_tp2_refused 3 fail
               "refit: FAILED: .*trainer.tp: 2 with trainer.layout: fsdp is not supported"
               --topology ${topo})
