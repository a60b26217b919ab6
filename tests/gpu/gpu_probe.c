/* gpu_probe: exit 0 when refit was built with CUDA and a CUDA device is usable, 77 (ctest's
 * skip code) otherwise. The GPU refit-run tests run it first (tests/gpu/probe_then.sh).
 * gpu_probe --absent: the other way round (tests of the no-device error). */
#include <stdio.h>
#include <string.h>

#include "refit/accel.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--absent") == 0)
        return rf_accel_cuda_available() ? 77 : 0;
    if (rf_accel_cuda_available())
        return 0;
    fprintf(stderr, "gpu_probe: no CUDA device (or refit built without CUDA): skipped\n");
    return 77;
}
