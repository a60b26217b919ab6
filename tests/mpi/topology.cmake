# MPI test of the topology module (collective load and device placement), 4 ranks.
# Include from tests/mpi/CMakeLists.txt:  include(${CMAKE_CURRENT_LIST_DIR}/topology.cmake)
# Needs PkgConfig::CHECK (tests/CMakeLists.txt) and MPI::MPI_C (top level). Runs in the source
# root so that the compiled-in default topology finds jobs/models/ (DESIGN.md section 3).
add_executable(check_topology_mpi ${CMAKE_CURRENT_LIST_DIR}/check_topology_mpi.c)
target_link_libraries(check_topology_mpi PRIVATE refit PkgConfig::CHECK)
target_compile_definitions(check_topology_mpi PRIVATE REFIT_JOBS_DIR="${CMAKE_SOURCE_DIR}/jobs")
add_test(NAME mpi_topology
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 --oversubscribe --bind-to none
                 --mca btl_vader_single_copy_mechanism none ${MPIEXEC_PREFLAGS}
                 $<TARGET_FILE:check_topology_mpi> ${MPIEXEC_POSTFLAGS}
         WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
set_tests_properties(mpi_topology PROPERTIES LABELS mpi TIMEOUT 120
                     ENVIRONMENT "CK_FORK=no;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
