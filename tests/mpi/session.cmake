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
