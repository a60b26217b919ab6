/*
 * bench/digest-rate.c: the host's rate of the two chunk trailer algorithms (docs/benchmarks.md,
 * "Integrity on the device"; issue #18 item 1): XXH3-64 and refit-sum64 v1 over one chunk-sized
 * buffer (argv[1] bytes, default 32 MiB, in the page cache of nothing: a heap buffer touched
 * once), best of 5 after a warm-up, one thread. Over mpi into GPU storage the sender seals
 * refit-sum64 on the host, so this is its cost per chunk. Prints a table and writes JSON to
 * argv[2] (default digest-rate.json). Run by bench/integrity.sh, never by ctest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "refit/accel.h"
#include "refit/chunk.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 0) : (size_t)32 << 20;
    const char *json = argc > 2 ? argv[2] : "digest-rate.json";
    unsigned char *buf = malloc(n);
    if (buf == NULL || n < RF_CHUNK_HEADER_BYTES) {
        fprintf(stderr, "digest-rate: no buffer of %zu bytes\n", n);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 131u + 7u);
    const int algs[2] = {RF_CHUNK_TRAILER_XXH3, RF_CHUNK_TRAILER_SUM64};
    double best[2] = {1e30, 1e30};
    volatile uint64_t sink = 0;
    for (int r = 0; r <= 5; r++)
        for (int a = 0; a < 2; a++) {
            uint64_t h = 0;
            double t0 = now();
            if (rf_chunk_digest(algs[a], buf, n, NULL, 0, &h, NULL) != RF_OK)
                return 1;
            double dt = now() - t0;
            sink += h;
            if (r > 0 && dt < best[a])
                best[a] = dt;
        }
    FILE *f = fopen(json, "w");
    printf("host digest rates, one thread, %zu bytes, best of 5\n", n);
    printf("%-16s %10s %9s\n", "algorithm", "ms", "GB/s");
    if (f != NULL)
        fprintf(f, "{\"bytes\": %zu, \"algorithms\": {", n);
    for (int a = 0; a < 2; a++) {
        printf("%-16s %10.3f %9.2f\n", rf_chunk_trailer_name(algs[a]), best[a] * 1e3,
               (double)n / best[a] / 1e9);
        if (f != NULL)
            fprintf(f, "%s\"%s\": {\"ms\": %.4f, \"GBps\": %.3f}", a ? ", " : "",
                    rf_chunk_trailer_name(algs[a]), best[a] * 1e3, (double)n / best[a] / 1e9);
    }
    if (f != NULL) {
        fprintf(f, "}}\n");
        fclose(f);
    }
    free(buf);
    return sink == 42 ? 2 : 0; /* keeps the digests */
}
