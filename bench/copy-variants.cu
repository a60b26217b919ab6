/*
 * bench/copy-variants.cu: device-to-device copy variants on one GPU (docs/benchmarks.md,
 * issue #18 item 2). A standalone program (nvcc only, no refit library): it measures, on the
 * same buffers in one run, the ways a colocated update's row copies could run:
 *
 *   memcpy-1       one cudaMemcpyAsync of the whole payload (the copy ceiling)
 *   memcpy-each    one cudaMemcpyAsync per piece, one stream
 *   memcpy-2s      one cudaMemcpyAsync per piece, pieces alternating over 2 streams
 *   memcpy-batch   cudaMemcpyBatchAsync per 1 GiB chunk
 *   kN             batch-kernel variants, one launch per 1 GiB chunk (k0 = refit's kernel
 *                  before issue #18 item 2: one block per 32 KiB tile)
 *
 * over three piece layouts: one buffer; Llama-3.1-8B-like (32 layers of 32 / 8 / 8 / 32 /
 * 112 / 112 / 112 MiB linears and two 8 KiB norms, embed and lm_head of 1002 MiB); MoE-like
 * (3 MiB experts). Pieces are cut at 1 GiB chunk boundaries as refit's chunks cut tensors.
 * Prints a table and writes JSON (argv[1], default copy-variants.json). Times: best of REPS
 * (5) after one warm-up, CUDA events.
 *
 *   nvcc -O3 -arch=sm_90 -o copy-variants bench/copy-variants.cu && ./copy-variants out.json
 *   CV_LITE=1 ./copy-variants out.json     # memcpy-1, memcpy-2s, k0 on the first two layouts
 *   ./copy-variants --hold GB SECONDS [poll]   # a second process holding the GPU (see below)
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

struct piece {
    uint64_t off; /* same offset in src and dst */
    uint64_t len;
};

struct seg {
    char *dst;
    const char *src;
    uint64_t width;
    uint64_t tile0;
};

/* ---- kernel variants --------------------------------------------------------------------- */

enum { LD_LDG = 0, LD_CS = 1, LD_NA = 2 };

template <int LD>
__device__ __forceinline__ uint4 ld16(const uint4 *p)
{
    if (LD == LD_CS)
        return __ldcs(p);
    if (LD == LD_NA) {
        uint4 r;
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(p));
        return r;
    }
    return __ldg(p);
}

template <int ST>
__device__ __forceinline__ void st16(uint4 *p, uint4 v)
{
    if (ST == 1)
        __stcs(p, v);
    else
        *p = v;
}

/* One tile of TILE bytes (U 16-byte loads per thread in flight, then the stores). */
template <int U, int LD, int ST>
__device__ __forceinline__ void tile_copy(char *d, const char *s, uint64_t len)
{
    uint4 *dv = reinterpret_cast<uint4 *>(d);
    const uint4 *sv = reinterpret_cast<const uint4 *>(s);
    uint64_t n = len / 16;
    const unsigned T = blockDim.x;
    uint64_t k = threadIdx.x;
    for (; k + (U - 1) * T < n; k += U * T) {
        uint4 r[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            r[u] = ld16<LD>(&sv[k + u * T]);
#pragma unroll
        for (int u = 0; u < U; u++)
            st16<ST>(&dv[k + u * T], r[u]);
    }
    if (k < n) {
        uint4 r[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (k + u * T < n)
                r[u] = ld16<LD>(&sv[k + u * T]);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (k + u * T < n)
                st16<ST>(&dv[k + u * T], r[u]);
    }
}

/* The tile-map kernel: tile t's segment is tmap[t] (refit's layout); grid-stride over tiles. */
template <int U, int LD, int ST>
__global__ void k_map(const seg *segs, const uint32_t *tmap, uint64_t ntiles, uint64_t tile_b)
{
    __shared__ unsigned sidx;
    for (uint64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        if (threadIdx.x == 0)
            sidx = tmap[tile];
        __syncthreads();
        const seg g = segs[sidx];
        __syncthreads();
        uint64_t off = (tile - g.tile0) * tile_b;
        uint64_t len = g.width - off < tile_b ? g.width - off : tile_b;
        tile_copy<U, LD, ST>(g.dst + off, g.src + off, len);
    }
}

/* ---- TMA bulk copies (sm_90: cp.async.bulk through shared memory) ---------------------------
 * One thread per block moves each tile global -> shared (completion on an mbarrier) and
 * shared -> global (a bulk group); S stages of TILE bytes in dynamic shared memory keep S - 1
 * loads in flight while a store drains. Pieces must be 16-byte aligned with 16-byte lengths
 * (all of this program's layouts are); anything else is copied by that thread a byte at a
 * time (correct, slow: not measured). */
__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int TILE, int S>
__global__ void k_tma(const seg *segs, const uint32_t *tmap, uint64_t ntiles, uint64_t tile_b)
{
    extern __shared__ __align__(128) char sm[];
    __shared__ __align__(8) uint64_t bar[S];
    (void)tile_b;
    if (threadIdx.x != 0)
        return;
    for (int s = 0; s < S; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    uint32_t phase = 0; /* bit s: stage s's parity */
    /* the tiles of this block: blockIdx.x + k * gridDim.x */
    auto tile_of = [&](uint64_t k) { return (uint64_t)blockIdx.x + k * gridDim.x; };
    auto geom = [&](uint64_t tile, char **d, const char **src, uint32_t *len) {
        const seg g = segs[tmap[tile]];
        uint64_t off = (tile - g.tile0) * TILE;
        uint64_t l = g.width - off < TILE ? g.width - off : TILE;
        *d = g.dst + off;
        *src = g.src + off;
        *len = (uint32_t)l;
    };
    auto issue = [&](uint64_t k) {
        char *d;
        const char *src;
        uint32_t len;
        geom(tile_of(k), &d, &src, &len);
        int s = (int)(k % S);
        if ((((uintptr_t)d | (uintptr_t)src | len) & 15) != 0)
            return; /* copied in place at its turn */
        uint32_t b = smem_u32(&bar[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(len)
                     : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                     "%2, [%3];" ::"r"(smem_u32(sm + (size_t)s * TILE)),
                     "l"(src), "r"(len), "r"(b)
                     : "memory");
    };
    uint64_t mine = ntiles > blockIdx.x ? (ntiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    for (uint64_t k = 0; k < mine && k < (uint64_t)S; k++)
        issue(k);
    for (uint64_t k = 0; k < mine; k++) {
        int s = (int)(k % S);
        char *d;
        const char *src;
        uint32_t len;
        geom(tile_of(k), &d, &src, &len);
        if ((((uintptr_t)d | (uintptr_t)src | len) & 15) != 0) {
            for (uint32_t i = 0; i < len; i++)
                d[i] = src[i];
        } else {
            uint32_t b = smem_u32(&bar[s]), par = (phase >> s) & 1u, done = 0;
            while (!done)
                asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                             "selp.u32 %0, 1, 0, p; }"
                             : "=r"(done)
                             : "r"(b), "r"(par)
                             : "memory");
            phase ^= 1u << s;
            asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(d),
                         "r"(smem_u32(sm + (size_t)s * TILE)), "r"(len)
                         : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            /* stage s is reloaded next: its store must have read it */
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        }
        if (k + S < mine)
            issue(k + S);
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

typedef void (*kmap_t)(const seg *, const uint32_t *, uint64_t, uint64_t);

struct variant {
    const char *name;
    const char *what;
    kmap_t k;
    int threads;
    int unroll;     /* tile = threads * unroll * 16 */
    int persistent; /* 0: one block per tile; else blocks per SM (0 < x) */
    size_t smem;    /* dynamic shared memory per block (the TMA kernels' stages) */
};

static const variant VARIANTS[] = {
    {"k0", "refit before: 256 thr, 32 KiB tile, block per tile, __ldg", k_map<8, LD_LDG, 0>, 256, 8, 0},
    {"k1", "persistent 8 blk/SM, 256 thr, 32 KiB tile, __ldg", k_map<8, LD_LDG, 0>, 256, 8, 8},
    {"k2", "persistent 8 blk/SM, 32 KiB tile, ld.cs + st.cs", k_map<8, LD_CS, 1>, 256, 8, 8},
    {"k3", "persistent 8 blk/SM, 32 KiB tile, ld.nc.no_allocate + st.cs", k_map<8, LD_NA, 1>, 256, 8, 8},
    {"k4", "persistent 4 blk/SM, 512 thr, 64 KiB tile, ld.nc.no_allocate + st.cs", k_map<8, LD_NA, 1>, 512, 8, 4},
    {"k5", "block per tile, 256 thr, 32 KiB, ld.nc.no_allocate + st.cs", k_map<8, LD_NA, 1>, 256, 8, 0},
    {"k6", "persistent 16 blk/SM, 128 thr, 16 KiB tile, ld.nc.no_allocate + st.cs", k_map<8, LD_NA, 1>, 128, 8, 16},
    {"k7", "persistent 8 blk/SM, 256 thr, 64 KiB tile (16/thread), ld.nc.no_allocate + st.cs", k_map<16, LD_NA, 1>, 256, 16, 8},
    {"k8", "block per tile, 256 thr, 64 KiB tile (16/thread), ldg", k_map<16, LD_LDG, 0>, 256, 16, 0},
    /* TMA: threads * unroll * 16 = the tile; persistent blocks per SM as the stages fit */
    {"kt1", "TMA bulk, 32 KiB tile, 1 stage, block per tile", k_tma<32768, 1>, 32, 64, 0, 32768},
    {"kt2", "TMA bulk, 32 KiB tiles, 3 stages, persistent 2 blk/SM", k_tma<32768, 3>, 32, 64, 2, 3 * 32768},
    {"kt3", "TMA bulk, 16 KiB tiles, 4 stages, persistent 3 blk/SM", k_tma<16384, 4>, 32, 32, 3, 4 * 16384},
    {"kt4", "TMA bulk, 64 KiB tiles, 3 stages, persistent 1 blk/SM", k_tma<65536, 3>, 32, 128, 1, 3 * 65536},
    {"kt5", "TMA bulk, 16 KiB tiles, 2 stages, persistent 6 blk/SM", k_tma<16384, 2>, 32, 32, 6, 2 * 16384},
};
#define NV (sizeof(VARIANTS) / sizeof(VARIANTS[0]))

/* ---- layouts ------------------------------------------------------------------------------- */

static const uint64_t MiB = 1ull << 20, GiB = 1ull << 30;

static void add(std::vector<piece> &v, uint64_t &off, uint64_t len)
{
    v.push_back({off, len});
    off += (len + 255) & ~255ull;
}

static std::vector<piece> lay_one(uint64_t bytes)
{
    std::vector<piece> v;
    uint64_t off = 0;
    add(v, off, bytes);
    return v;
}

static std::vector<piece> lay_llama(void)
{
    std::vector<piece> v;
    uint64_t off = 0;
    add(v, off, 1002 * MiB);
    for (int l = 0; l < 32; l++) {
        add(v, off, 8192);
        add(v, off, 32 * MiB);
        add(v, off, 8 * MiB);
        add(v, off, 8 * MiB);
        add(v, off, 32 * MiB);
        add(v, off, 8192);
        add(v, off, 112 * MiB);
        add(v, off, 112 * MiB);
        add(v, off, 112 * MiB);
    }
    add(v, off, 8192);
    add(v, off, 1002 * MiB);
    return v;
}

static std::vector<piece> lay_moe(uint64_t total)
{
    std::vector<piece> v;
    uint64_t off = 0;
    while (off + 3 * MiB <= total)
        add(v, off, 3 * MiB);
    return v;
}

/* cut at chunk boundaries: chunks[c] = the pieces in [c GiB, (c + 1) GiB) */
static std::vector<std::vector<piece>> chunked(const std::vector<piece> &v, uint64_t cb)
{
    std::vector<std::vector<piece>> out;
    for (const piece &p : v) {
        uint64_t o = p.off, e = p.off + p.len;
        while (o < e) {
            uint64_t c = o / cb, ce = (c + 1) * cb, pe = e < ce ? e : ce;
            if (out.size() <= c)
                out.resize(c + 1);
            out[c].push_back({o, pe - o});
            o = pe;
        }
    }
    return out;
}

/* ---- runs ---------------------------------------------------------------------------------- */

static char *S, *D;
static cudaStream_t st[2];
static cudaEvent_t e0, e1;
static int sms;

struct prepared { /* one chunk's descriptors, on the device, for a tile size */
    seg *d_segs;
    uint32_t *d_map;
    uint64_t tiles;
    unsigned nseg;
};

static std::vector<prepared> prep(const std::vector<std::vector<piece>> &ch, uint64_t tile_b)
{
    std::vector<prepared> out;
    for (const auto &c : ch) {
        std::vector<seg> sg;
        std::vector<uint32_t> map;
        uint64_t t = 0;
        for (const piece &p : c) {
            uint64_t nt = (p.len + tile_b - 1) / tile_b;
            sg.push_back({D + p.off, S + p.off, p.len, t});
            for (uint64_t u = 0; u < nt; u++)
                map.push_back((uint32_t)(sg.size() - 1));
            t += nt;
        }
        prepared q;
        CK(cudaMalloc(&q.d_segs, sg.size() * sizeof(seg)));
        CK(cudaMalloc(&q.d_map, map.size() * sizeof(uint32_t)));
        CK(cudaMemcpy(q.d_segs, sg.data(), sg.size() * sizeof(seg), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(q.d_map, map.data(), map.size() * 4, cudaMemcpyHostToDevice));
        q.tiles = t;
        q.nseg = (unsigned)sg.size();
        out.push_back(q);
    }
    return out;
}

static void unprep(std::vector<prepared> &v)
{
    for (auto &q : v) {
        cudaFree(q.d_segs);
        cudaFree(q.d_map);
    }
}

static const int REPS = 5;

template <typename F> static double best_ms(F f)
{
    f();
    CK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int r = 0; r < REPS; r++) {
        CK(cudaEventRecord(e0, st[0]));
        f();
        CK(cudaEventRecord(e1, st[0]));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best)
            best = ms;
    }
    return best;
}

static cudaEvent_t fork_ev, join_ev;

static double run_memcpy_each(const std::vector<std::vector<piece>> &ch, int nstreams)
{
    return best_ms([&] {
        if (nstreams > 1) {
            CK(cudaEventRecord(fork_ev, st[0]));
            CK(cudaStreamWaitEvent(st[1], fork_ev, 0));
        }
        unsigned i = 0;
        for (const auto &c : ch)
            for (const piece &p : c)
                CK(cudaMemcpyAsync(D + p.off, S + p.off, p.len, cudaMemcpyDeviceToDevice,
                                   st[(i++) % nstreams]));
        if (nstreams > 1) {
            CK(cudaEventRecord(join_ev, st[1]));
            CK(cudaStreamWaitEvent(st[0], join_ev, 0));
        }
    });
}

static double run_memcpy_batch(const std::vector<std::vector<piece>> &ch)
{
    std::vector<std::vector<void *>> ds(ch.size());
    std::vector<std::vector<const void *>> ss(ch.size());
    std::vector<std::vector<size_t>> ls(ch.size());
    for (size_t c = 0; c < ch.size(); c++)
        for (const piece &p : ch[c]) {
            ds[c].push_back(D + p.off);
            ss[c].push_back(S + p.off);
            ls[c].push_back(p.len);
        }
    cudaMemcpyAttributes at;
    memset(&at, 0, sizeof(at));
    at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    at.srcLocHint.type = cudaMemLocationTypeDevice;
    at.dstLocHint.type = cudaMemLocationTypeDevice;
    size_t ai = 0;
    bool ok = true;
    double ms = best_ms([&] {
        for (size_t c = 0; c < ch.size() && ok; c++)
            if (cudaMemcpyBatchAsync(ds[c].data(), ss[c].data(), ls[c].data(), ds[c].size(), &at,
                                     &ai, 1, st[0]) != cudaSuccess) {
                ok = false;
                (void)cudaGetLastError();
            }
    });
    return ok ? ms : -1;
}

static double run_kernel(const variant &v, const std::vector<std::vector<piece>> &ch)
{
    uint64_t tile_b = (uint64_t)v.threads * v.unroll * 16;
    std::vector<prepared> pr = prep(ch, tile_b);
    if (v.smem > 0)
        CK(cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)v.smem));
    double ms = best_ms([&] {
        for (const prepared &q : pr) {
            uint64_t grid = v.persistent ? (uint64_t)sms * v.persistent : q.tiles;
            if (grid > q.tiles)
                grid = q.tiles;
            v.k<<<(unsigned)grid, v.threads, v.smem, st[0]>>>(q.d_segs, q.d_map, q.tiles, tile_b);
        }
        CK(cudaGetLastError());
    });
    unprep(pr);
    return ms;
}

static bool check(const std::vector<std::vector<piece>> &ch)
{
    /* the copied bytes equal: the first and last 64 KiB of every piece, read back */
    std::vector<char> a(64 << 10), b(64 << 10);
    for (const auto &c : ch)
        for (const piece &p : c) {
            uint64_t w = p.len < a.size() ? p.len : a.size();
            for (int end = 0; end < 2; end++) {
                uint64_t o = end ? p.off + p.len - w : p.off;
                CK(cudaMemcpy(a.data(), S + o, w, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(b.data(), D + o, w, cudaMemcpyDeviceToHost));
                if (memcmp(a.data(), b.data(), w) != 0)
                    return false;
            }
        }
    return true;
}

/* --hold GB SECONDS [poll]: a second process on the same GPU for the environment checks of
 * docs/benchmarks.md: holds a context with GB GiB allocated (and touched) for SECONDS, idle or
 * polling an event of an empty stream (as a rank waiting on the host does). */
static int hold(int argc, char **argv)
{
    size_t gb = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    int secs = argc > 3 ? atoi(argv[3]) : 10;
    bool poll = argc > 4 && strcmp(argv[4], "poll") == 0;
    CK(cudaSetDevice(0));
    void *p = NULL;
    if (gb) {
        CK(cudaMalloc(&p, gb << 30));
        CK(cudaMemset(p, 1, gb << 30));
    }
    cudaStream_t s;
    cudaEvent_t e;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaEventRecord(e, s));
    CK(cudaDeviceSynchronize());
    printf("hold: %zu GiB, %d s, %s\n", gb, secs, poll ? "polling" : "idle");
    fflush(stdout);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= secs)
            break;
        if (poll)
            (void)cudaEventQuery(e);
        else
            usleep(10000);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--hold") == 0)
        return hold(argc, argv);
    const char *json = argc > 1 ? argv[1] : "copy-variants.json";
    /* CV_LITE=1: memcpy-1, memcpy-2s, k0 and the TMA kernels on the one-16GB and llama-8b
     * layouts only */
    bool lite = getenv("CV_LITE") && strcmp(getenv("CV_LITE"), "1") == 0;
    uint64_t big = 16ull * 1000 * 1000 * 1000; /* 16 GB: the 8B payload */
    CK(cudaSetDevice(0));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaMalloc(&S, big + GiB));
    CK(cudaMalloc(&D, big + GiB));
    /* a pattern in the source, zeros in the destination: first touch is not measured */
    CK(cudaMemset(S, 0x5a, big + GiB));
    CK(cudaMemset(D, 0, big + GiB));
    for (int i = 0; i < 2; i++)
        CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreateWithFlags(&fork_ev, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join_ev, cudaEventDisableTiming));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));

    struct { const char *name; std::vector<piece> v; } lays[] = {
        {"one-16GB", lay_one(big)},
        {"llama-8b", lay_llama()},
        {"moe-3MiB-8GiB", lay_moe(8 * GiB)},
        {"one-4GiB", lay_one(4 * GiB)},
    };
    FILE *jf = fopen(json, "w");
    fprintf(jf, "{\"device\": \"%s\", \"sms\": %d, \"reps\": %d, \"layouts\": [\n", prop.name, sms,
            REPS);
    printf("device %s, %d SMs; best of %d; GB/s and %% of memcpy-1 of the same bytes\n", prop.name,
           sms, REPS);
    for (size_t L = 0; L < (lite ? 2 : sizeof(lays) / sizeof(lays[0])); L++) {
        auto ch = chunked(lays[L].v, GiB);
        uint64_t bytes = 0, np = 0;
        for (const auto &c : ch)
            for (const piece &p : c) {
                bytes += p.len;
                np++;
            }
        double ceil_ms = best_ms([&] {
            CK(cudaMemcpyAsync(D, S, bytes, cudaMemcpyDeviceToDevice, st[0]));
        });
        printf("\n== %s: %.3f GB, %llu pieces in %zu chunks\n", lays[L].name, bytes / 1e9,
               (unsigned long long)np, ch.size());
        fprintf(jf, "%s {\"layout\": \"%s\", \"bytes\": %llu, \"pieces\": %llu, \"runs\": [\n",
                L ? "," : "", lays[L].name, (unsigned long long)bytes, (unsigned long long)np);
        int first = 1;
        auto row = [&](const char *name, const char *what, double ms, bool ok) {
            if (ms < 0) {
                printf("  %-13s %10s  (failed)            %s\n", name, "-", what);
                return;
            }
            printf("  %-13s %9.3f ms %8.1f GB/s %6.1f%%  %s%s\n", name, ms, bytes / ms / 1e6,
                   100.0 * ceil_ms / ms, what, ok ? "" : "  [MISMATCH]");
            fprintf(jf, "%s  {\"name\": \"%s\", \"what\": \"%s\", \"ms\": %.4f, \"ok\": %s}\n",
                    first ? "" : ",", name, what, ms, ok ? "true" : "false");
            first = 0;
        };
        row("memcpy-1", "one cudaMemcpyAsync of the same bytes", ceil_ms, true);
        double m;
        if (!lite) {
            CK(cudaMemset(D, 0, big + GiB));
            m = run_memcpy_each(ch, 1);
            row("memcpy-each", "cudaMemcpyAsync per piece, 1 stream", m, check(ch));
        }
        CK(cudaMemset(D, 0, big + GiB));
        m = run_memcpy_each(ch, 2);
        row("memcpy-2s", "cudaMemcpyAsync per piece, 2 streams", m, check(ch));
        if (!lite) {
            CK(cudaMemset(D, 0, big + GiB));
            m = run_memcpy_batch(ch);
            row("memcpy-batch", "cudaMemcpyBatchAsync per 1 GiB chunk", m, m < 0 || check(ch));
        }
        for (size_t k = 0; k < NV; k++) {
            if (lite && k > 0 && strncmp(VARIANTS[k].name, "kt", 2) != 0)
                continue;
            CK(cudaMemset(D, 0, big + GiB));
            m = run_kernel(VARIANTS[k], ch);
            row(VARIANTS[k].name, VARIANTS[k].what, m, check(ch));
        }
        fprintf(jf, "]}\n");
        fflush(stdout);
    }
    fprintf(jf, "]}\n");
    fclose(jf);
    return 0;
}
