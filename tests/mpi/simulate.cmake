# The scale model (refit-plan --simulate, include/refit/simulate.h, docs/simulate.md).
# sim_pairs_*: refit-run (mpi, 4-8 ranks) and the simulation of the same topology and model
# agree on every (sender, receiver) pair's bytes in both updates, and in broadcast on the
# bytes each stage sender gathers (tests/mpi/sim_pairs.py reads the profile's sent_to).
# sim_order_*: the p2p senders' order and window in refit-run are the simulation's.
# simulate_*: refused machines name the key; the table's columns; the small anchors.
# Included from tests/mpi/CMakeLists.txt after fsdp.cmake (REFIT_RUN, EXPECT, TOPO, TTOPO,
# DATA, FSDP_TOPO).
set(SIM_PAIRS /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/sim_pairs.py)
# "name;topology;np;launcher args"
foreach(case "llama-tiny-tp2pp2-to-tp2;${TOPO}/llama-tiny-tp2pp2-to-tp2.yaml;6;--checkpoint;${DATA}/llama-tiny"
             "llama-tiny-tp2pp2-to-tp2-p2p;${TTOPO}/llama-tiny-tp2pp2-to-tp2-p2p.yaml;6;--checkpoint;${DATA}/llama-tiny"
             "qwen3-moe-tiny-dp2ep2-to-2xtp1-p2p;${TTOPO}/qwen3-moe-tiny-dp2ep2-to-2xtp1-p2p.yaml;4;--checkpoint;${DATA}/qwen3-moe-tiny"
             "qwen3-moe-tiny-wna16-tp2ep2-p2p;${TTOPO}/qwen3-moe-tiny-wna16-triton-tp2ep2-to-tp2ep2-p2p.yaml;4;--checkpoint;${DATA}/qwen3-moe-tiny"
             "llama-tiny-fsdp3-to-tp2-broadcast;${FSDP_TOPO}/llama-tiny-fsdp3-to-tp2-broadcast.yaml;5;--checkpoint;${DATA}/llama-tiny"
             "llama-tiny-fsdp2pp3-to-tp2-broadcast;${FSDP_TOPO}/llama-tiny-fsdp2pp3-to-tp2-broadcast.yaml;8")
  list(GET case 0 name)
  list(GET case 1 topo)
  list(GET case 2 np)
  set(args "")
  list(LENGTH case n)
  if(n GREATER 3)
    list(SUBLIST case 3 -1 args)
  endif()
  add_test(NAME sim_pairs_${name}
           COMMAND ${SIM_PAIRS} $<TARGET_FILE:refit-plan> ${topo}
                   ${CMAKE_BINARY_DIR}/profiles/sim_pairs_${name} --
                   ${REFIT_RUN} -np ${np} $<TARGET_FILE:refit-run> ${args}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(sim_pairs_${name} PROPERTIES LABELS "mpi;python" TIMEOUT 300)
endforeach()

# sim_order_*: the p2p senders' order and window in refit-run (their info line,
# rf_xfer_send_p2p) are the simulation's (each pair's "order", "p2p_inflight"): 8 ranks, each
# trainer sending to 4 receivers in several chunks; the default window (several receivers in
# flight, the receiver changing more often than once per pair) and transfer.p2p_inflight 1
# (one receiver after another) (tests/mpi/sim_order.py)
foreach(w fanout one)
  add_test(NAME sim_order_${w}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/sim_order.py
                   $<TARGET_FILE:refit-plan> ${TTOPO}/llama-tiny-tp2pp2-to-2xtp2-p2p-${w}.yaml --
                   ${REFIT_RUN} -np 8 $<TARGET_FILE:refit-run>
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(sim_order_${w} PROPERTIES LABELS "mpi;python" TIMEOUT 300)
endforeach()

set(SIM_PLAN $<TARGET_FILE:refit-plan> --simulate)
set(SIM_MACH ${CMAKE_CURRENT_SOURCE_DIR}/topologies)
# a machine that cannot place the topology, by flags and by file, and a bad key
add_test(NAME simulate_refused_nodes_flags
         COMMAND ${EXPECT} fail "\\(flags\\): machine.nodes: 1 nodes x 2 gpus_per_node = 2 GPUs cannot place .*llama-tiny-tp2-to-2xtp1.yaml \\(2 trainer \\+ 2 rollout ranks: 4 GPUs, 2 nodes\\)"
                 -- ${SIM_PLAN} --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --nodes 1 --gpus-per-node 2
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME simulate_refused_nodes_file
         COMMAND ${EXPECT} fail "machine-one-node-of-2.yaml: machine.nodes: 1 nodes x 2 gpus_per_node = 2 GPUs cannot place"
                 -- ${SIM_PLAN} --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --machine ${SIM_MACH}/machine-one-node-of-2.yaml
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME simulate_refused_key
         COMMAND ${EXPECT} fail "machine-bad-key.yaml: machine.nic_bw: unknown key"
                 -- ${SIM_PLAN} --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --machine ${SIM_MACH}/machine-bad-key.yaml
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
# refit-plan's own argument errors (cli/cli_common.h, as refit-info's and refit-convert's):
# the option named, a bad value quoted, an unreadable file with its strerror
set(PLAN_TOPO ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml)
foreach(case "unknown_option;^refit-plan: unknown option '--bogus' \\(see --help\\)$;--bogus"
             "option_needs_value;^refit-plan: option '--json' needs a value \\(see --help\\)$;--json"
             "bad_policy;^refit-plan: --reload-policy 'fast': must be auto or layerwise$;--reload-policy;fast"
             "bad_mode;^refit-plan: --mode 'all': must be broadcast, p2p or both$;--simulate;--mode;all"
             "bad_gpus;^refit-plan: --gpus-per-node '8x': must be an integer >= 1$;--simulate;--gpus-per-node;8x"
             "bad_rate;^refit-plan: --nic-bw '50GBps': not a rate \\(for example 50GB/s\\)$;--simulate;--nic-bw;50GBps"
             "unreadable_machine;^refit-plan: .*/no-such-machine.yaml: cannot read: No such file or directory$;--simulate;--machine;${SIM_MACH}/no-such-machine.yaml"
             "machine_directory;^refit-plan: .*: cannot read: is a directory$;--simulate;--machine;${SIM_MACH}"
             "unwritable_json;^refit-plan: --json /nonexistent/x.json: cannot write: No such file or directory$;--json;/nonexistent/x.json"
             "stray_argument;^refit-plan: unexpected argument 'extra.yaml' \\(see --help\\)$;extra.yaml"
             "unwritable_simulate_json;^refit-plan: --json /nonexistent/x.json: cannot write: No such file or directory$;--simulate;--json;/nonexistent/x.json")
  list(GET case 0 name)
  list(GET case 1 re)
  list(SUBLIST case 2 -1 args)
  add_test(NAME cli_plan_${name}
           COMMAND ${EXPECT} fail "${re}" -- $<TARGET_FILE:refit-plan> --topology ${PLAN_TOPO} ${args}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(cli_plan_${name} PROPERTIES LABELS "unit;plan" TIMEOUT 60)
endforeach()
add_test(NAME cli_plan_unreadable_topology
         COMMAND ${EXPECT} fail "^refit-plan: .*/no-such-topology.yaml: cannot read: No such file or directory$"
                 -- $<TARGET_FILE:refit-plan> --topology ${TOPO}/no-such-topology.yaml
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_plan_unreadable_topology PROPERTIES LABELS "unit;plan" TIMEOUT 60)
# the columns, and a fit: 2 nodes of 2 GPUs place the 4 ranks, every byte between nodes
add_test(NAME simulate_columns
         COMMAND ${EXPECT} ok
                 "^mode +T +R +nodes +pairs +payload_GB +wire_GB +gather_GB +max_send_GB +send_at +max_recv_GB +busiest_link +link_GB +wire_s +latency_s +fill_s +predicted_s +floor_s +pred/floor +bound_s +ordered_s +ordered_rank_s$"
                 "^broadcast +2 +2 +2 +2 "
                 "^p2p +2 +2 +2 +4 .* nic-out:[01] "
                 "^mode +link +total_GB +busiest_GB +where +chunks +seconds$"
                 "^p2p +nvlink-out +0 +0 +-1 +0 +0$"
                 -- ${SIM_PLAN} --topology ${TOPO}/llama-tiny-tp2-to-2xtp1.yaml --nodes 2 --gpus-per-node 2
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(simulate_refused_nodes_flags simulate_refused_nodes_file simulate_refused_key
                     simulate_columns PROPERTIES LABELS plan TIMEOUT 60)

# the two anchors that simulate in seconds (the 256-GPU ones take 10-20 s: bench/simulate-anchors.sh)
set(SCALE ${CMAKE_SOURCE_DIR}/jobs/topologies/scale)
add_test(NAME simulate_anchor_qwen3_30b_a3b
         COMMAND ${EXPECT} ok "4 trainer \\+ 4 rollout ranks" "^p2p +4 +4 +1 +16 +61.06 +122.2 .* nvlink-out:3 "
                 -- ${SIM_PLAN} --topology ${SCALE}/qwen3-30b-a3b-tp1pp4-to-2xtp2.yaml --machine ${SCALE}/machine-h100-400g.yaml
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
add_test(NAME simulate_anchor_qwen3_235b_a22b
         COMMAND ${EXPECT} ok "32 trainer \\+ 32 rollout ranks" "^p2p +32 +32 +8 +328 +470.2 +1887 .* nic-out:0 "
                 -- ${SIM_PLAN} --topology ${SCALE}/qwen3-235b-a22b-32-to-4xtp8.yaml --machine ${SCALE}/machine-h100-400g.yaml --mode p2p
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(simulate_anchor_qwen3_30b_a3b simulate_anchor_qwen3_235b_a22b
                     PROPERTIES LABELS plan TIMEOUT 120)
