# The nccl transport's startup refusals on the CPU (DESIGN.md section 9): a topology that
# would put two ranks of one NCCL communicator on one GPU is refused by the placement check
# (topology/topology_mpi.c) before any CUDA or NCCL call, naming both ranks, the GPU, the host
# and the communicator; nccl without gpus is refused by the job's setup. These run in every
# build (with or without CUDA / NCCL, with or without a device). Included from
# tests/mpi/CMakeLists.txt after refit_run.cmake (uses refit_run_test, TOPO, TTOPO).
set(GTOPO ${CMAKE_SOURCE_DIR}/jobs/topologies/gpu)

# colocated nccl on one GPU: trainer 0 and rollout 1 in the stage 0 broadcast communicator
refit_run_test(nccl_colocated_one_gpu_refused 2 fail
               "refit: FAILED: .*transport nccl: ranks 0 \\(trainer\\) and 1 \\(rollout\\) would both use GPU 0 on host [^ ]+ in the stage 0 broadcast communicator \\(world ranks 0, 1\\); NCCL refuses two ranks of one communicator on one GPU"
               --topology ${GTOPO}/nccl-colocated-llama-tiny.yaml)
# not colocated, same GPU listed for both roles, mode p2p
refit_run_test(nccl_shared_gpu_p2p_refused 2 fail
               "refit: FAILED: .*transport nccl: ranks 0 \\(trainer\\) and 1 \\(rollout\\) would both use GPU 0 on host [^ ]+ in the stage 0 p2p communicator \\(world ranks 0, 1\\)"
               --topology ${TTOPO}/nccl-llama-tiny-shared-gpu-p2p.yaml)
# two stages: the stage 0 sender and a rollout rank share GPU 0
refit_run_test(nccl_shared_gpu_pp2_refused 6 fail
               "refit: FAILED: .*transport nccl: ranks 0 \\(trainer\\) and 4 \\(rollout\\) would both use GPU 0 on host [^ ]+ in the stage 0 broadcast communicator \\(world ranks 0, 4, 5\\)"
               --topology ${TTOPO}/nccl-llama-tiny-tp2pp2-to-tp2-shared-gpu.yaml)
# nccl needs gpus (or, built without NCCL, is not available at all)
refit_run_test(nccl_no_gpus_refused 2 fail
               "refit: FAILED: .*transfer.transport: nccl (needs trainer.gpus and rollout.gpus|is not available in this build)"
               --topology ${TTOPO}/nccl-llama-tiny-no-gpus.yaml)

# the multi-GPU topologies (tools/gpu-multi-run.sh; run only on 2- and 8-GPU hosts) parse and
# plan on the CPU, so a broken one shows up in CI and not first on a multi-GPU host
file(GLOB MULTI_TOPOLOGIES CONFIGURE_DEPENDS ${GTOPO}/multi/*.yaml)
foreach(topo ${MULTI_TOPOLOGIES})
  get_filename_component(n ${topo} NAME_WE)
  add_test(NAME plan_multi_${n}
           COMMAND ${EXPECT} ok "refit-plan: ${n}: .* rollout ranks" -- $<TARGET_FILE:refit-plan>
                   --topology ${topo})
  set_tests_properties(plan_multi_${n} PROPERTIES LABELS plan TIMEOUT 120)
endforeach()

# the stage gather through the trainer's gather wire (the code path the nccl transport's
# trainer-only communicators use, runtime/trainer.c), driven over MPI by the tests' wire
# (REFIT_TEST_GATHER_WIRE=mpi): the same storage bytes as the MPI point-to-point gather, on a
# TP2 trainer (checkpoint and generator updates), two stages with a gather each, colocated ipc
# on host arenas (only staged pieces gathered), and MoE experts with 3 peers per gather
set(WIRE_SAME ${CMAKE_CURRENT_SOURCE_DIR}/wire_same_bytes.sh)
foreach(case "llama-tiny-tp2-to-2xtp1;${TOPO}/llama-tiny-tp2-to-2xtp1.yaml;4"
             "llama-tiny-tp2pp2-to-tp2;${TOPO}/llama-tiny-tp2pp2-to-tp2.yaml;6"
             "llama-tiny-tp2-to-tp2-colocated-ipc;${TOPO}/llama-tiny-tp2-to-tp2-colocated-ipc.yaml;4"
             "qwen3-moe-tiny-tp2dp2ep2-to-tp2;${TTOPO}/qwen3-moe-tiny-tp2dp2ep2-to-tp2.yaml;6")
  list(GET case 0 n)
  list(GET case 1 topo)
  list(GET case 2 np)
  set(data llama-tiny)
  if(n MATCHES "^qwen3-moe-tiny")
    set(data qwen3-moe-tiny)
  endif()
  add_test(NAME gather_wire_same_bytes_${n}
           COMMAND ${WIRE_SAME} -- ${REFIT_RUN} -np ${np} $<TARGET_FILE:refit-run>
                   --topology ${topo} --checkpoint ${DATA}/${data}
                   --reference ${DATA}/${data}/tensors.reference.json --steps 3 --cold-check
                   --profile-dir ${CMAKE_BINARY_DIR}/profiles/gather_wire_${n}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(gather_wire_same_bytes_${n} PROPERTIES LABELS mpi TIMEOUT 300)
endforeach()
# a bad value of the tests' gather wire is refused at startup by every rank, naming it
refit_run_test(gather_wire_bad_value_refused 4 fail
               "refit: FAILED: REFIT_TEST_GATHER_WIRE=bogus: only 'mpi'"
               --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --steps 1)
set_tests_properties(gather_wire_bad_value_refused PROPERTIES ENVIRONMENT
                     "REFIT_TEST_GATHER_WIRE=bogus" TIMEOUT 120)
