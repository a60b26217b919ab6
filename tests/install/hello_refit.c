/* Install test: a program built against an installed librefit (pkg-config or the CMake
 * package) creates a session on every rank, prints its role and the library's ABI version. */
#include <mpi.h>
#include <stdio.h>

#include <refit/refit.h>

int main(int argc, char **argv)
{
    rf_session_t *s = NULL;
    int rank, rc = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rf_session_abi_version() != RF_SESSION_ABI_VERSION) {
        fprintf(stderr, "rank %d: ABI %d, header %d\n", rank, rf_session_abi_version(),
                RF_SESSION_ABI_VERSION);
        rc = 1;
    } else if (rf_session_create(MPI_COMM_WORLD, argc > 1 ? argv[1] : NULL, NULL, &s) != RF_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, rf_session_last_error(NULL));
        rc = 1;
    } else {
        printf("hello_refit: rank %d: %s, %d tensors to register, abi %d\n", rank,
               rf_session_role_name(s), rf_session_expected_count(s), rf_session_abi_version());
    }
    rf_session_destroy(s);
    MPI_Finalize();
    return rc;
}
