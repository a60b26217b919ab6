# The session API (include/refit/session.h): check_session under mpiexec on the tests/data
# llama-tiny fixture, one topology per case (tests/mpi/topologies/session-*.yaml).
add_executable(check_session ${CMAKE_CURRENT_SOURCE_DIR}/check_session.c)
target_link_libraries(check_session PRIVATE refit PkgConfig::CHECK)
function(refit_session_test name np topology)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -np ${np} $<TARGET_FILE:check_session>
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topology}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 300
                       ENVIRONMENT "CK_FORK=no;CK_DEFAULT_TIMEOUT=120")
endfunction()
refit_session_test(check_session_tp1_np2 2 session-llama-tiny-tp1-to-tp1.yaml)
refit_session_test(check_session_tp2_np4 4 session-llama-tiny-tp2-to-tp2.yaml)
refit_session_test(check_session_tp2_p2p_np4 4 session-llama-tiny-tp2-to-tp2-p2p.yaml)
# trainer.layout fsdp: 2 ranks p2p, 3 ranks (uneven rows) broadcast, MoE with an empty shard
refit_session_test(check_session_fsdp2_p2p_np3 3 session-llama-tiny-fsdp2-to-tp1-p2p.yaml)
refit_session_test(check_session_fsdp3_np5 5 session-llama-tiny-fsdp3-to-tp2.yaml)
refit_session_test(check_session_moe_fsdp3_p2p_np5 5
                   session-qwen3-moe-tiny-4e-fsdp3-to-tp2-p2p.yaml)
# rollout.layout hf: the engine registers transformers' named_parameters() (q / k / v apart,
# V vocab rows; MoE: the fused gate_up_proj / down_proj over EP 2, p2p)
refit_session_test(check_session_hf_tp1_np2 2 session-llama-tiny-hf-tp1-to-tp1.yaml)
refit_session_test(check_session_hf_tp2_np4 4 session-llama-tiny-hf-tp2-to-tp2.yaml)
refit_session_test(check_session_hf_moe_tp2ep2_p2p_np4 4
                   session-qwen3-moe-tiny-4e-hf-tp2-to-tp2ep2.yaml)

# The Python package (python/refit, ctypes over librefit.so) under mpiexec with Debian's
# /usr/bin/python3, python3-torch and python3-mpi4py (tools/setup.sh installs them): a torch
# trainer and a vLLM-layout engine (python/tests/test_session_llama.py)
add_test(NAME python_session_llama_np2
         COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                 -x REFIT_LIB -np 2 /usr/bin/python3
                 ${CMAKE_SOURCE_DIR}/python/tests/test_session_llama.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/topologies/session-llama-tiny-tp1-to-tp1.yaml
                 ${REFIT_TEST_DATA}/llama-tiny/config.json
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(python_session_llama_np2 PROPERTIES LABELS "mpi;python" TIMEOUT 300
                     ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1")
# the README's quickstart (python/examples/quickstart.py, jobs/topologies/
# llama-tiny-hf-tp1-to-tp1.yaml) as a user runs it: three AdamW steps, each update COMMITTED and
# the engine's 30 tensors equal to the trainer's (PASS needs the last update's line and "ok";
# any FAILED or MISMATCH line fails it)
add_test(NAME python_session_quickstart_np2
         COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                 -x REFIT_LIB -np 2 /usr/bin/python3
                 ${CMAKE_SOURCE_DIR}/python/examples/quickstart.py
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(python_session_quickstart_np2 PROPERTIES LABELS "mpi;python" TIMEOUT 300
                     ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1"
                     PASS_REGULAR_EXPRESSION
                     "update 3: COMMITTED \\(version 3, [0-9]+ bytes\\): 30 of 30 engine tensors equal the trainer's\nquickstart: ok"
                     FAIL_REGULAR_EXPRESSION "FAILED;MISMATCH;Traceback")
# trainer.layout fsdp: 3 trainer ranks register p.chunk(3, 0)[d] (broadcast); 2 ranks train
# float32 masters and register their chunks (p2p): the engine's bf16 is torch's rounding
foreach(case "fsdp3_np4;4;session-llama-tiny-fsdp3-to-tp1.yaml;--fsdp"
             "fsdp2_masters_np3;3;session-llama-tiny-fsdp2-to-tp1-p2p.yaml;--fsdp --masters")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  list(GET case 3 flags)
  separate_arguments(flags)
  add_test(NAME python_session_llama_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -x REFIT_LIB -np ${np} /usr/bin/python3
                   ${CMAKE_SOURCE_DIR}/python/tests/test_session_llama.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo}
                   ${REFIT_TEST_DATA}/llama-tiny/config.json ${flags}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(python_session_llama_${name} PROPERTIES LABELS "mpi;python" TIMEOUT 300
                       ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1")
endforeach()
# rollout.layout hf: the engine is a plain torch model with HF names registering its
# named_parameters() as they are (python/tests/test_session_hf.py): dense llama-tiny (trainer
# TP 1; fsdp over 2 ranks, p2p) and qwen3-moe-tiny (transformers 5's fused experts)
foreach(case "llama_hf_np2;2;session-llama-tiny-hf-tp1-to-tp1.yaml;llama-tiny;"
             "llama_hf_fsdp2_np3;3;session-llama-tiny-hf-fsdp2-to-tp1.yaml;llama-tiny;--fsdp"
             "qwen3_moe_hf_np2;2;session-qwen3-moe-tiny-hf-tp1-to-tp1.yaml;qwen3-moe-tiny;")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  list(GET case 3 data)
  list(GET case 4 flags)
  add_test(NAME python_session_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -x REFIT_LIB -np ${np} /usr/bin/python3
                   ${CMAKE_SOURCE_DIR}/python/tests/test_session_hf.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo}
                   ${REFIT_TEST_DATA}/${data}/config.json ${flags}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(python_session_${name} PROPERTIES LABELS "mpi;python" TIMEOUT 300
                       ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1")
endforeach()
# trainer TP 2, trainer.layout megatron (python/tests/test_session_tp.py: each trainer rank
# registers its Megatron shards, python/tests/megatron.py; AdamW between updates): dense
# llama-tiny and qwen3-moe-tiny (experts over trainer EP 2, or split by etp 2), rollout
# layouts vllm and hf, broadcast and p2p, and float32 masters; 2 trainers + 1 engine
foreach(case "llama_np3;session-llama-tiny-tp2-to-tp1.yaml;llama-tiny;--tp;2"
             "llama_masters_np3;session-llama-tiny-tp2-to-tp1.yaml;llama-tiny;--tp;2;--masters"
             "llama_hf_p2p_np3;session-llama-tiny-hf-tp2-to-tp1-p2p.yaml;llama-tiny;--tp;2"
             "moe_ep2_np3;session-qwen3-moe-tiny-tp2ep2-to-tp1.yaml;qwen3-moe-tiny;--tp;2;--ep;2;--etp;1"
             "moe_hf_p2p_np3;session-qwen3-moe-tiny-hf-tp2-to-tp1-p2p.yaml;qwen3-moe-tiny;--tp;2")
  list(GET case 0 name)
  list(GET case 1 topo)
  list(GET case 2 data)
  list(SUBLIST case 3 -1 flags)
  add_test(NAME python_session_tp2_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -x REFIT_LIB -np 3 /usr/bin/python3
                   ${CMAKE_SOURCE_DIR}/python/tests/test_session_tp.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo}
                   ${REFIT_TEST_DATA}/${data}/config.json ${flags}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(python_session_tp2_${name} PROPERTIES LABELS "mpi;python" TIMEOUT 300
                       ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1")
endforeach()
# no hangs (include/refit/session.h "Waits", python/tests/test_session_leave.py): a rank that
# raises between updates leaves locally at exit (rf_session_destroy_local) and the others'
# next update raises within seconds naming it (the job ends non-zero: the raiser's exit 1); a
# rank asleep past transfer.join_timeout_s (3 s here) fails the others' update by it, and its
# own at once
set(LEAVE_TOPO ${CMAKE_CURRENT_SOURCE_DIR}/topologies/session-llama-tiny-tp2-to-tp1-join3.yaml)
foreach(case "raise_trainer_np3;fail;raise;1;0;2" "raise_engine_np3;fail;raise;2;0;1"
             "sleep_engine_np3;ok;sleep;2;0;1")
  list(GET case 0 name)
  list(GET case 1 want)
  list(GET case 2 mode)
  list(GET case 3 who)
  list(GET case 4 a)
  list(GET case 5 b)
  # no ^ / $ anchors: mpirun may forward two ranks' lines joined (one line's text, then the
  # other's, then both newlines)
  if(mode STREQUAL "raise")
    set(re "rank ${a}: refit.Error RF_ERR_PEER after [0-9.]+ s: rank ${a}: rf_session_begin of update 2: rank ${who} left the session \\(rf_session_destroy_local: python: RuntimeError: injected between updates by rank ${who}\\)")
  else()
    set(re "rank ${who}: refit.Error RF_ERR_PEER after [0-9.]+ s: .*left the session \\(it gave up: .*transfer.join_timeout_s 3 s")
  endif()
  add_test(NAME python_session_leave_${name}
           COMMAND ${EXPECT} ${want} "${re}" "rank ${a}: test_session_leave: ok"
                   "rank ${b}: test_session_leave: ok"
                   -- ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -x REFIT_LIB -x OMP_NUM_THREADS -np 3 /usr/bin/python3
                   ${CMAKE_SOURCE_DIR}/python/tests/test_session_leave.py ${LEAVE_TOPO} ${mode} ${who}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(python_session_leave_${name} PROPERTIES LABELS "mpi;python" TIMEOUT 120
                       ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1")
endforeach()

# rf_session_register_checkpoint: trainer ranks' shards read from the llama-tiny safetensors
# fixture and from its HDF5 copy (refit-convert writes it: the h5_llama-tiny fixture of
# tests/mpi/hdf5.cmake); another model's checkpoint and a bad path refused on every rank
add_executable(check_session_ckpt ${CMAKE_CURRENT_SOURCE_DIR}/check_session_ckpt.c)
target_link_libraries(check_session_ckpt PRIVATE refit PkgConfig::CHECK)
foreach(case "tp1_np2;2;session-llama-tiny-tp1-to-tp1.yaml"
             "tp2_p2p_np4;4;session-llama-tiny-tp2-to-tp2-p2p.yaml"
             "fsdp3_np5;5;session-llama-tiny-fsdp3-to-tp2.yaml")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  add_test(NAME check_session_ckpt_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -np ${np} $<TARGET_FILE:check_session_ckpt>
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo} ${REFIT_TEST_DATA}/llama-tiny
                   ${CMAKE_BINARY_DIR}/h5/llama-tiny.h5 ${REFIT_TEST_DATA}/qwen3-tiny-tied
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(check_session_ckpt_${name} PROPERTIES LABELS "mpi;hdf5" TIMEOUT 300
                       FIXTURES_REQUIRED h5_llama-tiny
                       ENVIRONMENT "CK_FORK=no;CK_DEFAULT_TIMEOUT=120")
endforeach()
# Session.register_checkpoint in Python: the same checkpoints, an HDF5 file replaced between
# updates, the refusals (python/tests/test_session_checkpoint.py; h5py reads the reference)
# (one launch: torch's import dominates; check_session_ckpt covers fsdp's collective reads)
foreach(case "ckpt_np2;2;session-llama-tiny-tp1-to-tp1.yaml")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  add_test(NAME python_session_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -x REFIT_LIB -np ${np} /usr/bin/python3
                   ${CMAKE_SOURCE_DIR}/python/tests/test_session_checkpoint.py
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo} ${REFIT_TEST_DATA}/llama-tiny
                   ${CMAKE_BINARY_DIR}/h5/llama-tiny.h5 ${REFIT_TEST_DATA}/qwen3-tiny-tied
                   ${CMAKE_BINARY_DIR}/session-${name}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(python_session_${name} PROPERTIES LABELS "mpi;python;hdf5" TIMEOUT 300
                       FIXTURES_REQUIRED h5_llama-tiny
                       ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1")
endforeach()
# MPMD: separate trainer and engine programs in one MPI world (issue 15 item 1): 2 trainer
# ranks (fsdp, p2p) reading the HDF5 checkpoint, 1 engine checking its bytes with h5py
add_test(NAME python_session_mpmd_np3
         COMMAND ${EXPECT} ok "mpmd: OK \\(3 rank"
                 -- ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                 -x REFIT_LIB -x OMP_NUM_THREADS
                 -np 2 /usr/bin/python3 ${CMAKE_SOURCE_DIR}/python/tests/mpmd_train.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/topologies/session-llama-tiny-fsdp2-to-tp1-p2p.yaml
                 ${CMAKE_BINARY_DIR}/h5/llama-tiny.h5
                 : -np 1 /usr/bin/python3 ${CMAKE_SOURCE_DIR}/python/tests/mpmd_engine.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/topologies/session-llama-tiny-fsdp2-to-tp1-p2p.yaml
                 ${CMAKE_BINARY_DIR}/h5/llama-tiny.h5
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(python_session_mpmd_np3 PROPERTIES LABELS "mpi;python;hdf5" TIMEOUT 300
                     FIXTURES_REQUIRED h5_llama-tiny
                     ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1")

# CUDA tensors as the rollout's runtime storage, on the CPU (label device-emu: the host-device
# accelerator stands for each rollout rank's GPU; tests/mpi/check_session_device.c)
add_executable(check_session_device ${CMAKE_CURRENT_SOURCE_DIR}/check_session_device.c)
target_link_libraries(check_session_device PRIVATE refit PkgConfig::CHECK)
target_include_directories(check_session_device PRIVATE ${CMAKE_SOURCE_DIR}/runtime)
foreach(case "tp1_np2;2;session-llama-tiny-tp1-to-tp1.yaml"
             "tp2_np4;4;session-llama-tiny-tp2-to-tp2.yaml")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  add_test(NAME emu_check_session_device_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -np ${np} $<TARGET_FILE:check_session_device>
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(emu_check_session_device_${name} PROPERTIES LABELS "mpi;device-emu"
                       TIMEOUT 300 ENVIRONMENT
                       "CK_FORK=no;CK_DEFAULT_TIMEOUT=120;REFIT_TEST_DEVICE_ACCEL=host-device")
endforeach()
# Quantized models (runtime/session_quant.c): trainers register bf16 shards (or F32 masters)
# of the unquantized checkpoint, refit quantizes them; engines register the format owner's
# runtime tensors, checked after every update by refit-run's oracle (check_session_quant.c)
add_executable(check_session_quant ${CMAKE_CURRENT_SOURCE_DIR}/check_session_quant.c)
target_link_libraries(check_session_quant PRIVATE refit PkgConfig::CHECK)
target_include_directories(check_session_quant PRIVATE ${CMAKE_SOURCE_DIR}/runtime)
# session_quant_test(TEST NP TOPO EMU [ARGS...]): check_session_quant at NP ranks on
# topologies/session-TOPO.yaml with ARGS (label mpi); EMU not empty: REFIT_TEST_DEVICE_ACCEL=EMU
# too (label device-emu)
function(session_quant_test tname np topo emu)
  add_test(NAME ${tname}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -np ${np} $<TARGET_FILE:check_session_quant>
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/session-${topo}.yaml ${ARGN}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set(env "CK_FORK=no;CK_DEFAULT_TIMEOUT=120")
  set(labels mpi)
  if(emu)
    set(env "${env};REFIT_TEST_DEVICE_ACCEL=${emu}")
    set(labels "mpi;device-emu")
  endif()
  set_tests_properties(${tname} PROPERTIES LABELS "${labels}" TIMEOUT 300 ENVIRONMENT "${env}")
endfunction()
foreach(case "fp8_block_tp1_np2;2;fp8-block-tp1-to-tp1" "fp8_block_tp2_np4;4;fp8-block-tp2-to-tp2"
             "fp8_block_tp2_p2p_np4;4;fp8-block-tp2-to-tp2-p2p" "wna16_tp1_np2;2;wna16-tp1-to-tp1"
             "wna16_tp2_np4;4;wna16-tp2-to-tp2" "wna16_tp2_p2p_np4;4;wna16-tp2-to-tp2-p2p"
             "fp8_channel_tp1_to_tp2_p2p_np3;3;fp8-channel-tp1-to-tp2-p2p")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  session_quant_test(check_session_quant_${name} ${np} llama-q128-${topo} "")
endforeach()
# ... and what stays refused at create, named: fp8-channel scales beyond a trainer TP 2 shard
session_quant_test(check_session_quant_fp8_channel_tp2_refused_np3 3
                   llama-q128-fp8-channel-tp2-to-tp1 ""
                   --refused "lacks the whole rows its scale is computed over")
# ... and from Python: a bf16 torch trainer and an fp8-block engine registering torch.uint8
# tensors as F8_E4M3 (torch 1.13 has no float8), checked against a pure-torch quantizer
add_test(NAME python_session_quant_fp8_block_np2
         COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                 -x REFIT_LIB -np 2 /usr/bin/python3
                 ${CMAKE_SOURCE_DIR}/python/tests/test_session_quant.py
                 ${CMAKE_CURRENT_SOURCE_DIR}/topologies/session-llama-q128-fp8-block-tp1-to-tp1.yaml
                 ${REFIT_TEST_DATA}/llama-q128/config.json
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(python_session_quant_fp8_block_np2 PROPERTIES LABELS "mpi;python" TIMEOUT 300
                     ENVIRONMENT "REFIT_LIB=$<TARGET_FILE:refit_shared>;OMP_NUM_THREADS=1")

# colocated ipc through the session API, on the CPU (label device-emu): trainer tensors carved
# out of 3 shared memory segments that the host-device accelerator reports as CUDA
# allocations, each exported and opened once; the refusals (tests/mpi/check_session_ipc.c)
add_executable(check_session_ipc ${CMAKE_CURRENT_SOURCE_DIR}/check_session_ipc.c)
target_link_libraries(check_session_ipc PRIVATE refit PkgConfig::CHECK)
target_include_directories(check_session_ipc PRIVATE ${CMAKE_SOURCE_DIR}/runtime)
foreach(case "tp1_np2;2;session-llama-tiny-tp1-to-tp1-colocated-ipc.yaml;ok"
             "staged_np4;4;session-llama-tiny-tp2-to-2xtp1-colocated-ipc.yaml;staged"
             "f32_np2;2;session-llama-tiny-tp1-to-tp1-colocated-ipc.yaml;f32")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  list(GET case 3 mode)
  add_test(NAME emu_check_session_ipc_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -np ${np} $<TARGET_FILE:check_session_ipc>
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo} ${mode}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(emu_check_session_ipc_${name} PROPERTIES LABELS "mpi;device-emu"
                       TIMEOUT 300 ENVIRONMENT
                       "CK_FORK=no;CK_DEFAULT_TIMEOUT=120;REFIT_TEST_DEVICE_ACCEL=host-device")
endforeach()
# CUDA trainer tensors over the mpi transport (trainer.gpus), on the CPU (label device-emu:
# REFIT_TEST_DEVICE_ACCEL=host-device-trainer gives the trainer ranks the host-device
# accelerator, host-device-all the rollout ranks too): every part packed through a
# device-to-host copy, bytes as from host tensors (tests/mpi/check_session_device.c)
foreach(case "tp1_np2;2;session-llama-tiny-tp1-to-tp1.yaml;host-device-trainer;bf16"
             "tp1_f32_np2;2;session-llama-tiny-tp1-to-tp1.yaml;host-device-all;f32"
             "tp2_np4;4;session-llama-tiny-tp2-to-tp2.yaml;host-device-all;bf16"
             "tp2_f32_np4;4;session-llama-tiny-tp2-to-tp2.yaml;host-device-trainer;f32"
             "tp2_p2p_f32_np4;4;session-llama-tiny-tp2-to-tp2-p2p.yaml;host-device-trainer;f32"
             "tp1_to_tp2_p2p_np3;3;session-llama-tiny-tp1-to-tp2-p2p.yaml;host-device-all;bf16"
             "tp2_to_tp1_np3;3;session-llama-tiny-tp2-to-tp1.yaml;host-device-trainer;f32")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  list(GET case 3 emu)
  list(GET case 4 dt)
  set(extra "")
  if(dt STREQUAL "f32")
    set(extra "f32")
  endif()
  add_test(NAME emu_check_session_device_trainer_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -np ${np} $<TARGET_FILE:check_session_device>
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo} ${extra}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(emu_check_session_device_trainer_${name} PROPERTIES
                       LABELS "mpi;device-emu" TIMEOUT 300 ENVIRONMENT
                       "CK_FORK=no;CK_DEFAULT_TIMEOUT=120;REFIT_TEST_DEVICE_ACCEL=${emu}")
endforeach()

# Quantized models, wider (issue 15; check_session_quant.c): quantized Qwen3-MoE experts (w13 /
# w2 in the vllm layout, rollout EP 2 included) on qwen3-moe-q128, and fp8-tensor (its fused
# qkv_proj / gate_up_proj requantized to one max scale in the engine) on llama-q128
foreach(case "moe_fp8_block_tp1_np2;2;qwen3-moe-q128-fp8-block-tp1-to-tp1"
             "moe_fp8_block_tp2_to_tp2ep2_p2p_np4;4;qwen3-moe-q128-fp8-block-tp2-to-tp2ep2-p2p"
             "moe_fp8_block_tp2ep2_to_tp2_np4;4;qwen3-moe-q128-fp8-block-tp2ep2-to-tp2-bcast"
             "moe_wna16_tp1_np2;2;qwen3-moe-q128-wna16-tp1-to-tp1"
             "moe_wna16_tp2_to_tp2ep2_p2p_np4;4;qwen3-moe-q128-wna16-tp2-to-tp2ep2-p2p"
             "fp8_tensor_tp1_np2;2;llama-q128-fp8-tensor-tp1-to-tp1"
             "fp8_tensor_tp1_to_tp2_p2p_np3;3;llama-q128-fp8-tensor-tp1-to-tp2-p2p"
             # ... under rollout.layout hf (every checkpoint tensor of a quantized linear its own
             # parameter; fp8-block experts FP8Experts' gate_up_proj / down_proj and their
             # scales), and wna16 experts under hf refused on every rank as refit-run refuses them
             "fp8_block_hf_tp1_to_tp2_p2p_np3;3;llama-q128-fp8-block-hf-tp1-to-tp2-p2p"
             "wna16_hf_tp2_to_tp2_np4;4;llama-q128-wna16-hf-tp2-to-tp2-broadcast"
             "fp8_tensor_hf_tp1_to_tp2_np3;3;llama-q128-fp8-tensor-hf-tp1-to-tp2-broadcast"
             "fp8_channel_hf_tp1_np2;2;llama-q128-fp8-channel-hf-tp1-to-tp1-broadcast"
             "moe_fp8_block_hf_tp2_to_tp2ep2_p2p_np4;4;qwen3-moe-q128-fp8-block-hf-tp2-to-tp2ep2-p2p")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  session_quant_test(check_session_quant_${name} ${np} ${topo} "")
endforeach()
session_quant_test(check_session_quant_moe_wna16_hf_refused_np2 2
                   qwen3-moe-q128-wna16-hf-refused ""
                   --refused "rollout.layout hf with model.quantization wna16 is not supported for MoE experts")
# ... into the engine's CUDA tensors (rollout.gpus), on the CPU (label device-emu: the
# host-device accelerator stands for each rollout rank's GPU, so the format owners' device
# branches run: fp8-tensor's fp8_requant, wna16's device repack / expert transpose; broadcast
# mode, as rollout.gpus runs)
foreach(case "moe_wna16_tp1_to_tp2ep2_np3;3;qwen3-moe-q128-wna16-tp1-to-tp2ep2"
             "moe_fp8_block_tp2ep2_to_tp2_np4;4;qwen3-moe-q128-fp8-block-tp2ep2-to-tp2-bcast"
             "wna16_tp2_np4;4;llama-q128-wna16-tp2-to-tp2"
             "fp8_tensor_tp1_to_tp2_np3;3;llama-q128-fp8-tensor-tp1-to-tp2"
             "moe_fp8_block_hf_tp1_np2;2;qwen3-moe-q128-fp8-block-hf-tp1-to-tp1")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  session_quant_test(emu_check_session_quant_${name} ${np} ${topo} host-device)
endforeach()
# ... from the trainer's CUDA tensors (trainer.gpus over mpi; colocated ipc), on the CPU (label
# device-emu: host-device-trainer / -all give the trainer ranks the host-device accelerator,
# colocated ipc's ranks have it under host-device): quantized by the format kernels' table on
# the trainer's "GPU" (rf_trainer_produce_given_device), F32 masters and a non-finite weight
# included; over colocated ipc the quantized pieces staged, the rest read in place; trainer TP 2
# in p2p mode too (the production agreement keeps the other trainer's chunks back when one
# trainer's production fails: runtime/session.c run_finish)
foreach(case "fp8_block_tp2_np4;4;llama-q128-fp8-block-tp2-to-tp2;host-device-trainer"
             "fp8_block_tp2_p2p_np4;4;llama-q128-fp8-block-tp2-to-tp2-p2p;host-device-trainer"
             "wna16_tp1_np2;2;llama-q128-wna16-tp1-to-tp1;host-device-all"
             "fp8_tensor_tp1_to_tp2_np3;3;llama-q128-fp8-tensor-tp1-to-tp2;host-device-all"
             "fp8_channel_tp1_to_tp2_p2p_np3;3;llama-q128-fp8-channel-tp1-to-tp2-p2p;host-device-trainer"
             "moe_wna16_tp1_to_tp2ep2_np3;3;qwen3-moe-q128-wna16-tp1-to-tp2ep2;host-device-all"
             "fp8_block_ipc_np2;2;llama-q128-fp8-block-tp1-to-tp1-colocated-ipc;host-device"
             "wna16_tp2_ipc_np4;4;llama-q128-wna16-tp2-to-tp2-colocated-ipc;host-device"
             "moe_wna16_ipc_np2;2;qwen3-moe-q128-wna16-tp1-to-tp1-colocated-ipc;host-device")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  list(GET case 3 emu)
  session_quant_test(emu_check_session_quant_device_trainer_${name} ${np} ${topo} ${emu})
endforeach()
# ... from a registered checkpoint of the quantized model (rf_session_register_checkpoint): its
# fp8 linears as stored (tests/data/qwen3-fp8-tiny; its scales stored as bf16, widened), its
# bf16-source quantized on the trainer, or both in one file (make_quant_ckpt mixed: one linear
# unquantized, its stale scale ignored), broadcast and p2p under rollout.layout hf (trainer TP 2
# splits a 128-row fp8 block here: refused, as refit-run refuses it); the oracle reads the file
set(SQCK ${CMAKE_BINARY_DIR}/quant-ckpt)
foreach(case "ckpt_fp8_stored_np2;qwen3-fp8-tiny-tp1-to-tp1;${REFIT_TEST_DATA}/qwen3-fp8-tiny;"
             "ckpt_fp8_bf16_source_np2;qwen3-fp8-tiny-tp1-to-tp1;${REFIT_TEST_DATA}/qwen3-fp8-tiny/bf16-source;"
             "ckpt_fp8_mixed_hf_p2p_np2;qwen3-fp8-tiny-hf-tp1-to-tp1-p2p;${SQCK}/mixed;qck_mixed"
             "ckpt_fp8_bf16_scales_np2;qwen3-fp8-tiny-tp1-to-tp1;${SQCK}/bf16-scales;qck_bf16-scales")
  list(GET case 0 name)
  list(GET case 1 topo)
  list(GET case 2 dir)
  list(GET case 3 fx)
  session_quant_test(check_session_quant_${name} 2 ${topo} "" --checkpoint ${dir})
  if(fx)
    set_tests_properties(check_session_quant_${name} PROPERTIES FIXTURES_REQUIRED ${fx})
  endif()
endforeach()
# ... on the other rollout backends (marlin: wna16's tile-repacked runtime tensors; rocm-fnuz:
# fp8 bytes 0x80 -> 0x00, scales x 2), host and device storage (device-emu: the format kernels'
# device branches), and layout hf on rocm-fnuz refused as refit-run's loader refuses it
foreach(case "wna16_marlin_tp1_np2;2;llama-q128-wna16-marlin-tp1-to-tp1;"
             "moe_wna16_marlin_tp1_to_tp2ep2_p2p_np3;3;qwen3-moe-q128-wna16-marlin-tp1-to-tp2ep2-p2p;host-device"
             "fp8_block_fnuz_tp2_np4;4;llama-q128-fp8-block-fnuz-tp2-to-tp2;host-device-all"
             "moe_fp8_block_fnuz_tp1_to_tp2ep2_p2p_np3;3;qwen3-moe-q128-fp8-block-fnuz-tp1-to-tp2ep2-p2p;")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  list(GET case 3 emu)
  set(tname check_session_quant_${name})
  if(emu)
    set(tname emu_check_session_quant_${name})
  endif()
  session_quant_test(${tname} ${np} ${topo} "${emu}")
endforeach()
session_quant_test(check_session_quant_hf_fnuz_refused_np2 2 qwen3-fp8-tiny-hf-fnuz-refused ""
                   --refused "rollout.backend rocm-fnuz with rollout.layout hf is not supported")
# Issue 18 (pinned mpi receive buffers on device storage): check_session_device reads the
# xfer's receive-buffer state (transport/xfer_int.h)
target_include_directories(check_session_device PRIVATE ${CMAKE_SOURCE_DIR}/transport)

# No wait past a join is unbounded (issue #15): the join race (a tiny join_timeout_s, plan and
# update at once, 25 runs: the same verdict on every rank), a rank leaving or stalling right
# after the plan's join (REFIT_TEST_SESSION_AFTER_JOIN: a test build's hook)
add_executable(check_session_join ${CMAKE_CURRENT_SOURCE_DIR}/check_session_join.c)
target_link_libraries(check_session_join PRIVATE refit PkgConfig::CHECK)
foreach(np 2 3)
  add_test(NAME check_session_join_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -np ${np} $<TARGET_FILE:check_session_join>
                   ${REFIT_TEST_DATA}/llama-tiny/config.json
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(check_session_join_np${np} PROPERTIES LABELS mpi TIMEOUT 400
                       ENVIRONMENT "CK_FORK=no;CK_DEFAULT_TIMEOUT=240")
endforeach()

# The offline plan (rf_session_offline_*, refit-plan's source; issue #15 item 5) equals what a
# session agrees: every rank plans a real session over registered zeros, then the topology
# offline, and compares the counts, manifest and plan hash (and, through a fixture,
# refit-plan --json's): broadcast and p2p, rollout layout hf with MoE experts, fp8-block, wna16
# MoE (DIRECT, RUNTIME_VIEW and LAYERWISE layers), the layerwise option
add_executable(check_session_offline ${CMAKE_CURRENT_SOURCE_DIR}/check_session_offline.c)
target_link_libraries(check_session_offline PRIVATE refit PkgConfig::CHECK)
foreach(case "tp2_np4;4;session-llama-tiny-tp2-to-tp2.yaml;auto"
             "tp2_layerwise_np4;4;session-llama-tiny-tp2-to-tp2.yaml;layerwise"
             "tp1_to_tp2_p2p_np3;3;session-llama-tiny-tp1-to-tp2-p2p.yaml;auto"
             "moe_hf_p2p_np3;3;session-qwen3-moe-tiny-hf-tp2-to-tp1-p2p.yaml;auto"
             "fp8_block_tp2_np4;4;session-llama-q128-fp8-block-tp2-to-tp2.yaml;auto"
             "moe_wna16_tp1_to_tp2ep2_np3;3;session-qwen3-moe-q128-wna16-tp1-to-tp2ep2.yaml;auto")
  list(GET case 0 name)
  list(GET case 1 np)
  list(GET case 2 topo)
  list(GET case 3 policy)
  set(json ${CMAKE_BINARY_DIR}/check_session_offline_${name}.json)
  add_test(NAME check_session_offline_${name}_refit_plan
           COMMAND $<TARGET_FILE:refit-plan> --topology ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo}
                   --reload-policy ${policy} --json ${json}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(check_session_offline_${name}_refit_plan PROPERTIES LABELS "plan"
                       TIMEOUT 60 FIXTURES_SETUP offline_${name})
  add_test(NAME check_session_offline_${name}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --bind-to none
                   -np ${np} $<TARGET_FILE:check_session_offline>
                   ${CMAKE_CURRENT_SOURCE_DIR}/topologies/${topo} ${policy} ${json}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(check_session_offline_${name} PROPERTIES LABELS "mpi;plan" TIMEOUT 120
                       ENVIRONMENT "CK_FORK=no;CK_DEFAULT_TIMEOUT=100"
                       FIXTURES_REQUIRED offline_${name})
endforeach()
