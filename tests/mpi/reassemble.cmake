# MPI test: reassembly for --reference (DESIGN.md section 12) on 2 and 4 ranks, label "mpi".
# Included from tests/mpi/CMakeLists.txt (not a directory of its own); needs MPI and Check
# (PkgConfig::CHECK) found by the including file.
if(NOT TARGET check_reassemble)
  add_executable(check_reassemble ${CMAKE_CURRENT_LIST_DIR}/check_reassemble.c)
  target_link_libraries(check_reassemble PRIVATE refit PkgConfig::CHECK)
  foreach(np 2 4)
    add_test(NAME mpi_reassemble_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${np}
                     $<TARGET_FILE:check_reassemble>)
    set_tests_properties(mpi_reassemble_np${np} PROPERTIES LABELS mpi
                         ENVIRONMENT "CK_FORK=no;CK_DEFAULT_TIMEOUT=120" TIMEOUT 300)
  endforeach()
endif()
