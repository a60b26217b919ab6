/*
 * bench/ipc-integrity.cu: what integrity would cost colocated CUDA IPC (docs/benchmarks.md,
 * "Integrity on the device"; issue #18 item 1). On colocated ipc a rollout rank copies the
 * pair's weights device to device straight into its storage: no buffer sits before the
 * destination, so a check can only be a source checksum computed while copying plus one more
 * read of the destination afterwards (both refit-sum64 v1, include/refit/accel.h). A standalone
 * program (nvcc only, no refit library) measuring, on the same buffers in one run:
 *
 *   memcpy        one cudaMemcpyAsync d2d of the buffer (the copy ceiling)
 *   copy          a grid-stride 16-byte copy kernel (the kernel the check would be fused into)
 *   copy+sum      the same kernel also summing the source words it moves (refit-sum64 word sum,
 *                 one atomicAdd per block)
 *   dst-sum       one read of the destination, summed the same way
 *   checked       copy+sum then dst-sum (what a checked colocated update would run)
 *
 * and checks that the source sum equals the destination sum. Prints a table and writes JSON
 * (argv[1], default ipc-integrity.json); sizes in GiB from IPC_SIZES (default "1,4"). Times:
 * best of REPS (5) after one warm-up, CUDA events.
 *
 *   nvcc -O3 -arch=sm_90 -o ipc-integrity bench/ipc-integrity.cu && ./ipc-integrity out.json
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define THREADS 256
#define REPS 5

__device__ __forceinline__ uint64_t fmix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

/* word i's term of the refit-sum64 v1 word sum */
__device__ __forceinline__ uint64_t mix(uint64_t w, uint64_t i)
{
    return fmix(w ^ ((i + 1) * 0x9E3779B97F4A7C15ull));
}

__device__ __forceinline__ void block_add(uint64_t S, unsigned long long *acc)
{
    __shared__ unsigned long long red[THREADS];
    red[threadIdx.x] = S;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h)
            red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(acc, red[0]);
}

/* n16: 16-byte units (the buffers are multiples of 16 bytes) */
__global__ void k_copy(uint4 *dst, const uint4 *src, uint64_t n16)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n16;
         i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

__global__ void k_copy_sum(uint4 *dst, const uint4 *src, uint64_t n16, unsigned long long *acc)
{
    uint64_t S = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n16;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint4 v = src[i];
        dst[i] = v;
        S += mix((uint64_t)v.x | ((uint64_t)v.y << 32), 2 * i);
        S += mix((uint64_t)v.z | ((uint64_t)v.w << 32), 2 * i + 1);
    }
    block_add(S, acc);
}

__global__ void k_sum(const uint4 *src, uint64_t n16, unsigned long long *acc)
{
    uint64_t S = 0;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n16;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint4 v = src[i];
        S += mix((uint64_t)v.x | ((uint64_t)v.y << 32), 2 * i);
        S += mix((uint64_t)v.z | ((uint64_t)v.w << 32), 2 * i + 1);
    }
    block_add(S, acc);
}

__global__ void k_fill(uint64_t *p, uint64_t n8)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n8;
         i += (uint64_t)gridDim.x * blockDim.x)
        p[i] = fmix(i * 0x2545F4914F6CDD1Dull + 1);
}

enum { V_MEMCPY, V_COPY, V_COPY_SUM, V_DST_SUM, V_CHECKED, NV };
static const char *NAMES[NV] = {"memcpy", "copy", "copy+sum", "dst-sum", "checked"};

int main(int argc, char **argv)
{
    const char *json = argc > 1 ? argv[1] : "ipc-integrity.json";
    const char *sz = getenv("IPC_SIZES") ? getenv("IPC_SIZES") : "1,4";
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int sms = prop.multiProcessorCount;
    unsigned blocks = (unsigned)sms * 8; /* grid-stride: 8 blocks of 256 per SM */
    FILE *jf = fopen(json, "w");
    if (jf == NULL) {
        fprintf(stderr, "ipc-integrity: cannot write %s\n", json);
        return 1;
    }
    fprintf(jf, "{\"device\": \"%s\", \"reps\": %d, \"sizes\": [", prop.name, REPS);
    printf("ipc-integrity on %s (%d SMs), best of %d; refit-sum64 v1 word sums\n", prop.name, sms,
           REPS);
    printf("%8s %-10s %10s %9s %11s %11s\n", "GiB", "variant", "ms", "GB/s", "vs copy",
           "vs memcpy");
    char buf[256];
    strncpy(buf, sz, sizeof(buf) - 1);
    buf[sizeof(buf) - 1] = '\0';
    int first = 1, ok = 1;
    for (char *tok = strtok(buf, ","); tok != NULL; tok = strtok(NULL, ",")) {
        double gib = atof(tok);
        uint64_t bytes = (uint64_t)(gib * (double)(1ull << 30)) & ~(uint64_t)15;
        uint64_t n16 = bytes / 16;
        char *src, *dst;
        unsigned long long *acc;
        CK(cudaMalloc(&src, bytes));
        CK(cudaMalloc(&dst, bytes));
        CK(cudaMalloc(&acc, 2 * sizeof(unsigned long long)));
        k_fill<<<blocks, THREADS>>>((uint64_t *)src, bytes / 8);
        CK(cudaGetLastError());
        cudaEvent_t e0, e1, e2;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        CK(cudaEventCreate(&e2));
        double best[NV];
        for (int v = 0; v < NV; v++)
            best[v] = 1e30;
        unsigned long long sums[2] = {0, 0};
        for (int r = 0; r <= REPS; r++) {
            for (int v = 0; v < NV; v++) {
                if (v == V_CHECKED || v == V_DST_SUM)
                    continue; /* both timed inside the copy+sum iteration below (events e1, e2) */
                CK(cudaMemset(dst, 0, bytes));
                CK(cudaMemset(acc, 0, 2 * sizeof(unsigned long long)));
                CK(cudaEventRecord(e0));
                if (v == V_MEMCPY)
                    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
                else if (v == V_COPY)
                    k_copy<<<blocks, THREADS>>>((uint4 *)dst, (const uint4 *)src, n16);
                else if (v == V_COPY_SUM)
                    k_copy_sum<<<blocks, THREADS>>>((uint4 *)dst, (const uint4 *)src, n16, acc);
                if (v == V_COPY_SUM) {
                    CK(cudaEventRecord(e1));
                    k_sum<<<blocks, THREADS>>>((const uint4 *)dst, n16, acc + 1);
                    CK(cudaEventRecord(e2));
                } else {
                    CK(cudaEventRecord(e1));
                }
                CK(cudaGetLastError());
                CK(cudaEventSynchronize(v == V_COPY_SUM ? e2 : e1));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (r > 0 && ms < best[v])
                    best[v] = ms;
                if (v == V_COPY_SUM) {
                    float ms2 = 0, ms3 = 0;
                    CK(cudaEventElapsedTime(&ms2, e1, e2));
                    CK(cudaEventElapsedTime(&ms3, e0, e2));
                    if (r > 0 && ms2 < best[V_DST_SUM])
                        best[V_DST_SUM] = ms2;
                    if (r > 0 && ms3 < best[V_CHECKED])
                        best[V_CHECKED] = ms3;
                    CK(cudaMemcpy(sums, acc, sizeof(sums), cudaMemcpyDeviceToHost));
                    if (sums[0] != sums[1])
                        ok = 0;
                }
            }
        }
        fprintf(jf, "%s{\"GiB\": %.3f, \"bytes\": %llu, \"src_sum\": \"%016llx\", "
                    "\"dst_sum\": \"%016llx\", \"variants\": {",
                first ? "" : ", ", gib, (unsigned long long)bytes, sums[0], sums[1]);
        for (int v = 0; v < NV; v++) {
            double gbs = (double)bytes / (best[v] * 1e-3) / 1e9;
            printf("%8.2f %-10s %10.3f %9.1f %10.3fx %10.3fx\n", gib, NAMES[v], best[v], gbs,
                   best[v] / best[V_COPY], best[v] / best[V_MEMCPY]);
            fprintf(jf, "%s\"%s\": {\"ms\": %.4f, \"GBps\": %.2f, \"vs_copy\": %.4f, "
                        "\"vs_memcpy\": %.4f}",
                    v ? ", " : "", NAMES[v], best[v], gbs, best[v] / best[V_COPY],
                    best[v] / best[V_MEMCPY]);
        }
        fprintf(jf, "}}");
        printf("%8.2f source sum %016llx, destination sum %016llx: %s\n", gib, sums[0], sums[1],
               sums[0] == sums[1] ? "equal" : "DIFFER");
        first = 0;
        CK(cudaFree(src));
        CK(cudaFree(dst));
        CK(cudaFree(acc));
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
        CK(cudaEventDestroy(e2));
    }
    fprintf(jf, "], \"sums_equal\": %s}\n", ok ? "true" : "false");
    fclose(jf);
    return ok ? 0 : 1;
}
