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
