/*
 * bench/ipc-env.cu: which ingredient of refit-run's colocated job makes reads of a CUDA-IPC
 * imported buffer slow (docs/benchmarks.md, "Where the copy rate goes"; issue #18 item 2).
 * In refit-run's rollout rank, copies from the trainer's arena (cudaIpcOpenMemHandle) run at
 * ~1700 GB/s while copies between the rank's own buffers run at ~2050 GB/s, and a lone
 * two-process program reads an imported buffer at full rate. A standalone program (nvcc only,
 * no refit library) rebuilding the colocated situation one ingredient at a time.
 *
 * Every variant is a fresh pair of processes on device 0: the driver (this process, which
 * never touches CUDA) spawns an importer (the rollout's role), which spawns the exporter (the
 * trainer's role) before its own first CUDA call; both re-execute /proc/self/exe. Commands,
 * the cudaIpcMemHandle_t (hex) and "ok" answers go over pipes, one line each. The importer
 * copies GIB (IPCENV_GIB, default 4) GiB from offset 0 of the imported arena into a buffer of
 * its own with (a) one cudaMemcpyAsync and (b) a 16-byte grid-stride copy kernel, and right
 * after copies the same bytes from a buffer it allocated and filled the same way itself (the
 * in-variant control). Best of REPS (5) after one warm-up, CUDA events; GB/s of payload.
 *
 *   V0  baseline: exporter cudaMalloc 16 GiB on a clean GPU, cudaMemset
 *   V1  fill: the exporter's arena by cudaMemcpy from pageable host bf16 values
 *   V2  refit-run's order and sizes (Llama-3.1-8B): both ranks' accelerator setup (non-
 *       blocking stream, 24 B scratch, 24 B pinned), the rollout's storage one cudaMalloc +
 *       memset + sync per module (vLLM-style fused qkv / gate_up) BEFORE the trainer allocates
 *       its arena (one cudaMalloc of the tensors laid out 256-aligned), generator-like bf16
 *       kernel fill, the 64 KiB pinned + device ring buffer of the batch kernel; extra rows:
 *       a cudaMemcpyAsync per tensor arena -> storage (one stream) and the kernel over the whole
 *       arena into a fresh buffer (controls: the same from an own copy of the arena)
 *   V3  fragmentation: exporter allocates 4096 x 1 MiB and 4096 x 64 KiB, frees every other
 *       one, then the arena
 *   V4  concurrent allocation: importer allocates 291 per-tensor buffers while the exporter
 *       allocates 4 x 4 GiB, frees them and allocates its arena
 *   V5  exporter idles after export in a busy loop polling its command pipe (an MPI rank)
 *   V5b exporter idles polling cudaStreamQuery on an empty stream (and the pipe)
 *   V6  rewrite: before every timed copy the exporter rewrites the arena with a kernel (the
 *       trainer's gen_fill each update); the control is rewritten by the importer likewise
 *   V7  importer holds 16 GiB of its own (cudaMalloc + memset) before it opens the handle
 *   V8  all of V2 + V5 + V6: closest to refit-run's update
 *   V9-V13 which part of V2 (added after the first H200 run, where V2 alone read the arena at
 *       80% of the control): V9 the storage as one allocation (modules inside it); V10 the
 *       arena allocated before the storage; V11 the arena 16 GiB exactly; V12 each module
 *       rounded up to 2 MiB; V13 V0 with the arena of refit's size and a kernel fill;
 *       V14 / V15: V13 / V2 with the arena's allocation rounded up to a multiple of 2 MiB
 *
 * refit-run sets no cudaDeviceSetLimit, cudaSetDeviceFlags or stream priority (grep of core/
 * and runtime/), so none is a variant. Prints a table and writes JSON (argv[1]).
 *
 *   nvcc -O3 -arch=sm_90 -o ipc-env bench/ipc-env.cu && ./ipc-env ipc-env.json [V0 V2 ...]
 *   OUT=/tmp/ie bash bench/ipc-env.sh        # build, run all, log
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "ipc-env[%s]: %s:%d %s: %s\n", g_role, __FILE__, __LINE__, #x,     \
                    cudaGetErrorString(e_));                                                   \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define REPS 5
#define GiB (1ull << 30)
#define LINE_TIMEOUT_MS 40000 /* a peer silent this long is dead or hung: fail, never hang */
#define VARIANT_TIMEOUT_S 60

static const char *g_role = "driver";

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ipc-env[%s]: ", g_role);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---- variants ---------------------------------------------------------------------------- */

enum {
    F_H2D = 1 << 0,       /* fill by cudaMemcpy from pageable host bf16 */
    F_KFILL = 1 << 1,     /* fill by a bf16 kernel */
    F_REFIT = 1 << 2,     /* refit-run's allocation order and sizes */
    F_FRAG = 1 << 3,      /* exporter fragments the device first */
    F_CONC = 1 << 4,      /* concurrent allocation */
    F_POLLPIPE = 1 << 5,  /* exporter busy-polls its pipe */
    F_POLLQUERY = 1 << 6, /* exporter busy-polls cudaStreamQuery */
    F_REWRITE = 1 << 7,   /* source rewritten by a kernel before every timed copy */
    F_OWNFIRST = 1 << 8,  /* importer holds 16 GiB before opening the handle */
    F_SLAB = 1 << 9,      /* F_REFIT: the importer's storage as one allocation */
    F_ARENAFIRST = 1 << 10, /* F_REFIT: the exporter's arena before the importer's storage */
    F_EXACT16 = 1 << 11,  /* F_REFIT: the arena 16 GiB exactly (not the tensors' 16.06 GB) */
    F_ALIGN2M = 1 << 12,  /* F_REFIT: each module rounded up to 2 MiB */
    F_SIZEONLY = 1 << 13, /* the arena of refit's size (16.06 GB), nothing else of F_REFIT */
    F_ROUND2M = 1 << 14,  /* the arena's allocation rounded up to a multiple of 2 MiB */
};

struct variant_t {
    const char *name;
    unsigned flags;
    const char *desc;
};

static const variant_t VARIANTS[] = {
    {"V0", 0, "baseline: 16 GiB cudaMalloc + cudaMemset on a clean GPU"},
    {"V1", F_H2D, "arena filled by cudaMemcpy from pageable host bf16"},
    {"V2", F_REFIT | F_KFILL, "refit-run's allocation order and sizes (Llama-3.1-8B), kernel fill"},
    {"V3", F_FRAG, "exporter fragments the GPU (4096x1MiB, 4096x64KiB, every other freed)"},
    {"V4", F_CONC, "concurrent: importer 291 tensors while exporter allocates its arena"},
    {"V5", F_POLLPIPE, "exporter busy-polls its pipe after export (an MPI rank waiting)"},
    {"V5b", F_POLLQUERY, "exporter busy-polls cudaStreamQuery on an empty stream"},
    {"V6", F_REWRITE | F_KFILL, "source rewritten by a kernel before every timed copy"},
    {"V7", F_OWNFIRST, "importer holds 16 GiB of its own before opening the handle"},
    {"V8", F_REFIT | F_KFILL | F_REWRITE | F_POLLPIPE, "V2 + V5 + V6 (closest to refit-run)"},
    {"V9", F_REFIT | F_KFILL | F_SLAB, "V2, the importer's storage as one allocation"},
    {"V10", F_REFIT | F_KFILL | F_ARENAFIRST, "V2, the arena allocated before the storage"},
    {"V11", F_REFIT | F_KFILL | F_EXACT16, "V2, the arena 16 GiB exactly"},
    {"V12", F_REFIT | F_KFILL | F_ALIGN2M, "V2, each storage module rounded up to 2 MiB"},
    {"V13", F_SIZEONLY | F_KFILL, "V0 with the arena of refit's size (16.06 GB), kernel fill"},
    {"V14", F_SIZEONLY | F_KFILL | F_ROUND2M, "V13, the allocation rounded up to 2 MiB"},
    {"V15", F_REFIT | F_KFILL | F_ROUND2M, "V2, the arena's allocation rounded up to 2 MiB"},
};
#define NVARIANTS (int)(sizeof(VARIANTS) / sizeof(VARIANTS[0]))

static const variant_t *find_variant(const char *name)
{
    for (int i = 0; i < NVARIANTS; i++)
        if (strcmp(VARIANTS[i].name, name) == 0)
            return &VARIANTS[i];
    return NULL;
}

/* ---- the Llama-3.1-8B tensors (bf16) ------------------------------------------------------ */

struct tensor_t {
    uint64_t bytes, arena_off; /* in the trainer's arena */
    int module;                /* the rollout's storage module */
    uint64_t mod_off;          /* offset in that module */
};

static void llama(std::vector<tensor_t> &ts, std::vector<uint64_t> &mods, uint64_t *arena_bytes)
{
    const uint64_t H = 4096, KV = 1024, I = 14336, V = 128256, E = 2;
    struct m_t {
        int n;
        uint64_t t[3];
    };
    std::vector<m_t> ms;
    ms.push_back({1, {V * H * E}}); /* embed_tokens */
    for (int l = 0; l < 32; l++) {
        ms.push_back({1, {H * E}});                              /* input_layernorm */
        ms.push_back({3, {H * H * E, KV * H * E, KV * H * E}}); /* qkv_proj */
        ms.push_back({1, {H * H * E}});                          /* o_proj */
        ms.push_back({2, {I * H * E, I * H * E}});               /* gate_up_proj */
        ms.push_back({1, {H * I * E}});                          /* down_proj */
        ms.push_back({1, {H * E}});                              /* post_attention_layernorm */
    }
    ms.push_back({1, {H * E}});     /* norm */
    ms.push_back({1, {V * H * E}}); /* lm_head */
    uint64_t aoff = 0;
    for (size_t m = 0; m < ms.size(); m++) {
        uint64_t off = 256; /* storage.c: a 256-byte lead gap, slots 256-aligned */
        for (int k = 0; k < ms[m].n; k++) {
            tensor_t t = {ms[m].t[k], aoff, (int)m, off};
            ts.push_back(t);
            off += (t.bytes + 255) / 256 * 256;
            aoff += (t.bytes + 255) / 256 * 256;
        }
        mods.push_back(off);
    }
    *arena_bytes = aoff;
}

/* ---- pipes: one line per message ---------------------------------------------------------- */

static void send_line(int fd, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(buf) - 1)
        die("message too long");
    buf[n++] = '\n';
    for (int o = 0; o < n;) {
        ssize_t w = write(fd, buf + o, (size_t)(n - o));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write to the peer's pipe: %s", strerror(errno));
        o += (int)w;
    }
}

/* a line (without '\n') within timeout_ms; returns 0 on a line, -1 on EOF, dies on timeout.
 * spin: poll with a zero timeout in a busy loop (the exporter's V5 / V5b); query: a stream
 * cudaStreamQuery'd between the polls */
static int recv_line(int fd, char *out, size_t cap, int timeout_ms, bool spin,
                     cudaStream_t query)
{
    size_t n = 0;
    double t0 = now_s();
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, spin ? 0 : 1000);
        if (r < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        if (r > 0) {
            char c;
            ssize_t k = read(fd, &c, 1);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                die("read from the peer's pipe: %s", strerror(errno));
            if (k == 0)
                return -1;
            if (c == '\n') {
                out[n] = 0;
                return 0;
            }
            if (n + 1 < cap)
                out[n++] = c;
            continue;
        }
        if (query) {
            cudaError_t e = cudaStreamQuery(query);
            if (e != cudaSuccess && e != cudaErrorNotReady)
                CK(e);
        }
        if ((now_s() - t0) * 1e3 > timeout_ms)
            die("no message from the peer in %d s", timeout_ms / 1000);
    }
}

static void expect_line(int fd, char *out, size_t cap, const char *what)
{
    if (recv_line(fd, out, cap, LINE_TIMEOUT_MS, false, 0) < 0)
        die("the peer closed its pipe (it failed: see its message above) waiting for %s", what);
}

/* fork + exec of /proc/self/exe with args; child's fds listed in keep survive (no CLOEXEC) */
static pid_t spawn(std::vector<std::string> args, bool new_group)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        if (new_group)
            setpgid(0, 0);
        std::vector<char *> av;
        for (auto &a : args)
            av.push_back((char *)a.c_str());
        av.push_back(NULL);
        execv("/proc/self/exe", av.data());
        fprintf(stderr, "ipc-env: exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    return pid;
}

static void cloexec(int fd)
{
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
        die("fcntl: %s", strerror(errno));
}

/* ---- device work -------------------------------------------------------------------------- */

__global__ void k_copy(uint4 *__restrict__ dst, const uint4 *__restrict__ src, uint64_t n16)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n16;
         i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

__host__ __device__ inline uint16_t bf16_at(uint64_t i, uint32_t seed)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    /* sign, exponent 2^-8 .. 2^-1, random mantissa: weights-like bf16 */
    return (uint16_t)((x & 0x8000) | (0x3b80 + ((x >> 16) & 0x3ff)));
}

__global__ void k_fill(uint16_t *dst, uint64_t n, uint32_t seed)
{
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = bf16_at(i, seed);
}

static int g_sms = 132;

static void kcopy(void *dst, const void *src, uint64_t bytes, cudaStream_t s)
{
    k_copy<<<g_sms * 8, 512, 0, s>>>((uint4 *)dst, (const uint4 *)src, bytes / 16);
    CK(cudaGetLastError());
}

static void kfill(void *dst, uint64_t bytes, uint32_t seed, cudaStream_t s)
{
    k_fill<<<g_sms * 8, 512, 0, s>>>((uint16_t *)dst, bytes / 2, seed);
    CK(cudaGetLastError());
}

/* fill a device buffer the variant's way; synchronous */
static void fill(unsigned flags, void *dst, uint64_t bytes, cudaStream_t s)
{
    if (flags & F_H2D) {
        const uint64_t chunk = 256ull << 20;
        std::vector<uint16_t> h(chunk / 2);
        for (uint64_t i = 0; i < h.size(); i++)
            h[i] = bf16_at(i, 7);
        for (uint64_t o = 0; o < bytes; o += chunk)
            CK(cudaMemcpy((char *)dst + o, h.data(), bytes - o < chunk ? bytes - o : chunk,
                          cudaMemcpyHostToDevice));
    } else if (flags & F_KFILL) {
        kfill(dst, bytes, 7, s);
    } else {
        CK(cudaMemsetAsync(dst, 0x5a, bytes, s));
    }
    CK(cudaStreamSynchronize(s));
}

static void cuda_init(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        die("no CUDA device (cudaGetDeviceCount: %s, %d devices): this benchmark needs a GPU",
            cudaGetErrorString(e), n);
    CK(cudaSetDevice(0));
    CK(cudaFree(0)); /* the context */
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
}

/* refit's accelerator setup (core/accel_cuda.cu cu_create / cu_stream_create) */
struct accel_t {
    cudaStream_t s;
    unsigned long long *d_scratch, *h_scratch;
};

static void accel_setup(accel_t *a)
{
    CK(cudaStreamCreateWithFlags(&a->s, cudaStreamNonBlocking));
    CK(cudaMalloc((void **)&a->d_scratch, 3 * sizeof(unsigned long long)));
    CK(cudaMemsetAsync(a->d_scratch + 2, 0xff, sizeof(unsigned long long), a->s));
    CK(cudaMallocHost((void **)&a->h_scratch, 3 * sizeof(unsigned long long)));
}

/* ---- the exporter (the trainer's role) ------------------------------------------------------ */

static int exporter_main(const variant_t *v, int rfd, int wfd)
{
    g_role = "exporter";
    cuda_init();
    unsigned f = v->flags;
    char line[256];
    accel_t a = {};
    if (f & F_REFIT)
        accel_setup(&a);
    else
        CK(cudaStreamCreateWithFlags(&a.s, cudaStreamNonBlocking));
    std::vector<tensor_t> ts;
    std::vector<uint64_t> mods;
    uint64_t bytes = 16 * GiB;
    if (f & (F_REFIT | F_SIZEONLY))
        llama(ts, mods, &bytes);
    if (f & F_EXACT16)
        bytes = 16 * GiB;
    if (f & F_ROUND2M) /* 16,060,522,496 B is 7658.25 x 2 MiB */
        bytes = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    expect_line(rfd, line, sizeof(line), "go"); /* the importer's go: when to allocate */
    std::vector<void *> frag;
    if (f & F_FRAG) {
        for (int i = 0; i < 4096; i++) {
            void *p;
            CK(cudaMalloc(&p, 1 << 20));
            frag.push_back(p);
            CK(cudaMalloc(&p, 64 << 10));
            frag.push_back(p);
        }
        for (size_t i = 0; i < frag.size(); i += 2)
            CK(cudaFree(frag[i]));
    }
    if (f & F_CONC) { /* the arena in steps: staging-sized buffers first, then the arena */
        void *p[4];
        for (int i = 0; i < 4; i++)
            CK(cudaMalloc(&p[i], 4 * GiB));
        for (int i = 0; i < 4; i++)
            CK(cudaFree(p[i]));
    }
    void *arena;
    CK(cudaMalloc(&arena, bytes));
    fill(f, arena, bytes, a.s);
    cudaIpcMemHandle_t h;
    CK(cudaIpcGetMemHandle(&h, arena));
    char hex[2 * sizeof(h) + 1];
    for (size_t i = 0; i < sizeof(h); i++)
        snprintf(hex + 2 * i, 3, "%02x", ((unsigned char *)&h)[i]);
    send_line(wfd, "H %s %llu", hex, (unsigned long long)bytes);
    cudaStream_t empty = 0;
    if (f & F_POLLQUERY)
        CK(cudaStreamCreateWithFlags(&empty, cudaStreamNonBlocking));
    bool spin = (f & (F_POLLPIPE | F_POLLQUERY)) != 0;
    for (uint32_t seed = 100;; seed++) {
        /* no timeout while idle beyond the variant's: the importer's exit closes the pipe */
        if (recv_line(rfd, line, sizeof(line), VARIANT_TIMEOUT_S * 1000, spin, empty) < 0)
            break;
        if (strcmp(line, "fill") == 0) { /* the trainer's gen_fill before an update */
            kfill(arena, bytes, seed, a.s);
            CK(cudaStreamSynchronize(a.s));
            send_line(wfd, "ok");
        } else if (strcmp(line, "quit") == 0) {
            break;
        } else {
            die("unknown command '%s'", line);
        }
    }
    CK(cudaFree(arena));
    for (size_t i = 1; i < frag.size(); i += 2)
        CK(cudaFree(frag[i]));
    return 0;
}

/* ---- the importer (the rollout's role) ------------------------------------------------------ */

struct imp_t {
    int rfd, wfd, out; /* from / to the exporter; results to the driver */
    unsigned f;
    cudaStream_t s;
    cudaEvent_t e0, e1;
};

static double g_worst; /* the slowest of best_ms's last REPS runs */

/* best of REPS after a warm-up; before each run, prep (if any) */
template <class Op, class Prep> static double best_ms(imp_t *m, Op op, Prep prep)
{
    float best = 1e30f;
    g_worst = 0;
    for (int r = 0; r <= REPS; r++) {
        prep();
        CK(cudaEventRecord(m->e0, m->s));
        op();
        CK(cudaEventRecord(m->e1, m->s));
        CK(cudaEventSynchronize(m->e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, m->e0, m->e1));
        if (r > 0 && ms < best)
            best = ms;
        if (r > 0 && ms > g_worst)
            g_worst = ms;
    }
    return best;
}

static void result(imp_t *m, const char *key, double ms, uint64_t bytes)
{
    send_line(m->out, "R %s %.4f %llu %.4f", key, ms, (unsigned long long)bytes, g_worst);
    fprintf(stderr, "ipc-env[importer]:   %-18s best %8.3f ms %6.0f GB/s, worst %8.3f ms\n", key,
            ms, bytes / (ms * 1e6), g_worst);
}

static int importer_main(const variant_t *v, int out)
{
    g_role = "importer";
    /* the exporter first: before this process's first CUDA call */
    int to_exp[2], from_exp[2];
    if (pipe(to_exp) != 0 || pipe(from_exp) != 0)
        die("pipe: %s", strerror(errno));
    cloexec(to_exp[1]);
    cloexec(from_exp[0]);
    cloexec(out);
    char a1[16], a2[16];
    snprintf(a1, sizeof(a1), "%d", to_exp[0]);
    snprintf(a2, sizeof(a2), "%d", from_exp[1]);
    pid_t ep = spawn({"ipc-env", "--exporter", v->name, a1, a2}, false);
    close(to_exp[0]);
    close(from_exp[1]);
    imp_t m = {from_exp[0], to_exp[1], out, v->flags, 0, 0, 0};
    unsigned f = v->flags;
    uint64_t gib = 4;
    if (getenv("IPCENV_GIB"))
        gib = strtoull(getenv("IPCENV_GIB"), NULL, 10);
    uint64_t G = gib * GiB;
    cuda_init();
    accel_t a = {};
    if (f & F_REFIT)
        accel_setup(&a);
    else
        CK(cudaStreamCreateWithFlags(&a.s, cudaStreamNonBlocking));
    m.s = a.s;
    CK(cudaEventCreate(&m.e0));
    CK(cudaEventCreate(&m.e1));
    std::vector<tensor_t> ts;
    std::vector<uint64_t> mods;
    uint64_t abytes = 0;
    std::vector<void *> store;
    if (f & F_REFIT) /* build_rollout: the storage, one module at a time, before the arena */
        llama(ts, mods, &abytes);
    auto build_storage = [&]() {
        if (f & F_SLAB) { /* one allocation, the modules inside it */
            uint64_t total = 0;
            for (uint64_t mb : mods)
                total += (mb + 255) / 256 * 256;
            void *p;
            CK(cudaMalloc(&p, total));
            CK(cudaMemsetAsync(p, 0, total, a.s));
            CK(cudaStreamSynchronize(a.s));
            for (uint64_t o = 0, i = 0; i < mods.size(); o += (mods[i] + 255) / 256 * 256, i++)
                store.push_back((char *)p + o);
            return;
        }
        for (uint64_t mb : mods) {
            void *p;
            uint64_t n = (f & F_ALIGN2M) ? (mb + (2u << 20) - 1) / (2u << 20) * (2u << 20) : mb;
            CK(cudaMalloc(&p, n));
            CK(cudaMemsetAsync(p, 0, n, a.s));
            CK(cudaStreamSynchronize(a.s));
            store.push_back(p);
        }
    };
    if ((f & F_REFIT) && !(f & F_ARENAFIRST))
        build_storage();
    void *own16 = NULL;
    if (f & F_OWNFIRST) {
        CK(cudaMalloc(&own16, 16 * GiB));
        CK(cudaMemsetAsync(own16, 0x11, 16 * GiB, a.s));
        CK(cudaStreamSynchronize(a.s));
    }
    send_line(m.wfd, "go");
    if (f & F_CONC) { /* 291 per-tensor buffers (9 x 32 + 3) while the exporter allocates */
        std::vector<tensor_t> t2;
        std::vector<uint64_t> m2;
        uint64_t b2;
        llama(t2, m2, &b2);
        for (const tensor_t &t : t2) {
            void *p;
            CK(cudaMalloc(&p, (t.bytes + 255) / 256 * 256));
            store.push_back(p);
        }
    }
    char line[512];
    expect_line(m.rfd, line, sizeof(line), "the handle");
    cudaIpcMemHandle_t h;
    unsigned long long ebytes = 0;
    {
        char hex[2 * sizeof(h) + 1];
        if (sscanf(line, "H %128s %llu", hex, &ebytes) != 2 || strlen(hex) != 2 * sizeof(h))
            die("bad handle message '%s'", line);
        for (size_t i = 0; i < sizeof(h); i++) {
            unsigned x;
            if (sscanf(hex + 2 * i, "%2x", &x) != 1)
                die("bad handle hex");
            ((unsigned char *)&h)[i] = (unsigned char)x;
        }
    }
    if (G > ebytes)
        die("IPCENV_GIB %llu is more than the exporter's %llu bytes", (unsigned long long)gib,
            ebytes);
    if ((f & F_REFIT) && (f & F_ARENAFIRST)) /* the exporter allocated its arena first */
        build_storage();
    void *ipc;
    CK(cudaIpcOpenMemHandle(&ipc, h, cudaIpcMemLazyEnablePeerAccess));
    if (f & F_REFIT) { /* the batch kernel's first ring buffer (core/accel_cuda.cu) */
        void *hr, *dr;
        CK(cudaMallocHost(&hr, 65536));
        CK(cudaMalloc(&dr, 65536));
    }
    /* the control: the same size, filled the same way, in this process */
    void *src, *dst;
    CK(cudaMalloc(&dst, G));
    CK(cudaMalloc(&src, G));
    fill(f, src, G, a.s);
    uint32_t seed = 1000;
    auto prep_ipc = [&]() {
        if (f & F_REWRITE) {
            send_line(m.wfd, "fill");
            expect_line(m.rfd, line, sizeof(line), "the fill's ok");
        }
    };
    auto prep_own = [&]() {
        if (f & F_REWRITE) {
            kfill(src, G, seed++, a.s);
            CK(cudaStreamSynchronize(a.s));
        }
    };
    cudaStream_t s = a.s;
    double t;
    t = best_ms(&m, [&]() { CK(cudaMemcpyAsync(dst, ipc, G, cudaMemcpyDeviceToDevice, s)); },
                prep_ipc);
    result(&m, "memcpy_ipc", t, G);
    t = best_ms(&m, [&]() { CK(cudaMemcpyAsync(dst, src, G, cudaMemcpyDeviceToDevice, s)); },
                prep_own);
    result(&m, "memcpy_own", t, G);
    t = best_ms(&m, [&]() { kcopy(dst, ipc, G, s); }, prep_ipc);
    result(&m, "kernel_ipc", t, G);
    t = best_ms(&m, [&]() { kcopy(dst, src, G, s); }, prep_own);
    result(&m, "kernel_own", t, G);
    if (f & F_REFIT) {
        /* arena -> storage per tensor; the whole arena into a fresh buffer; then the same
         * from an own copy of the arena (the control) */
        CK(cudaFree(src));
        CK(cudaFree(dst));
        void *fresh, *own;
        CK(cudaMalloc(&fresh, abytes));
        CK(cudaMalloc(&own, abytes));
        fill(f, own, abytes, s);
        uint64_t pay = 0;
        for (const tensor_t &x : ts)
            pay += x.bytes;
        auto per_tensor = [&](const void *base) {
            for (const tensor_t &x : ts)
                CK(cudaMemcpyAsync((char *)store[x.module] + x.mod_off,
                                   (const char *)base + x.arena_off, x.bytes,
                                   cudaMemcpyDeviceToDevice, s));
        };
        auto prep_own_all = [&]() {
            if (f & F_REWRITE) {
                kfill(own, abytes, seed++, s);
                CK(cudaStreamSynchronize(s));
            }
        };
        t = best_ms(&m, [&]() { per_tensor(ipc); }, prep_ipc);
        result(&m, "pertensor_ipc", t, pay);
        t = best_ms(&m, [&]() { per_tensor(own); }, prep_own_all);
        result(&m, "pertensor_own", t, pay);
        uint64_t whole = abytes / 16 * 16;
        t = best_ms(&m, [&]() { kcopy(fresh, ipc, whole, s); }, prep_ipc);
        result(&m, "kernel_whole_ipc", t, whole);
        t = best_ms(&m, [&]() { kcopy(fresh, own, whole, s); }, prep_own_all);
        result(&m, "kernel_whole_own", t, whole);
    }
    CK(cudaIpcCloseMemHandle(ipc));
    send_line(m.wfd, "quit");
    int stt = 0;
    if (waitpid(ep, &stt, 0) != ep || !WIFEXITED(stt) || WEXITSTATUS(stt) != 0)
        die("the exporter failed (status 0x%x)", stt);
    send_line(out, "END");
    (void)own16;
    return 0;
}

/* ---- the driver ------------------------------------------------------------------------------ */

struct res_t {
    std::string key;
    double ms;
    uint64_t bytes;
    double worst_ms;
};

/* one variant: a fresh importer (which spawns its exporter); 0 ok, 1 failed, 2 no GPU */
static int run_variant(const variant_t *v, std::vector<res_t> &rs, std::string &err)
{
    int p[2];
    if (pipe(p) != 0)
        die("pipe: %s", strerror(errno));
    cloexec(p[0]);
    char a1[16];
    snprintf(a1, sizeof(a1), "%d", p[1]);
    pid_t ip = spawn({"ipc-env", "--importer", v->name, a1}, true);
    close(p[1]);
    char line[512];
    bool end = false;
    double t0 = now_s();
    for (;;) {
        /* a line within what is left of the variant's time */
        double left = VARIANT_TIMEOUT_S - (now_s() - t0);
        struct pollfd q = {p[0], POLLIN, 0};
        int r = left > 0 ? poll(&q, 1, (int)(left * 1e3) + 1) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            kill(-ip, SIGKILL);
            err = "timed out after " + std::to_string(VARIANT_TIMEOUT_S) + " s (killed)";
            break;
        }
        if (recv_line(p[0], line, sizeof(line), 1000, false, 0) < 0)
            break;
        if (strcmp(line, "END") == 0) {
            end = true;
            continue;
        }
        char key[64];
        double ms, w;
        unsigned long long b;
        if (sscanf(line, "R %63s %lf %llu %lf", key, &ms, &b, &w) == 4)
            rs.push_back({key, ms, b, w});
    }
    close(p[0]);
    int stt = 0;
    waitpid(ip, &stt, 0);
    kill(-ip, SIGKILL); /* an exporter left over (the importer died): gone */
    if (end && WIFEXITED(stt) && WEXITSTATUS(stt) == 0)
        return 0;
    if (err.empty())
        err = WIFEXITED(stt) ? "importer exit " + std::to_string(WEXITSTATUS(stt))
                             : "importer killed by signal " + std::to_string(WTERMSIG(stt));
    return 1;
}

static const res_t *get(const std::vector<res_t> &rs, const char *key)
{
    for (auto &r : rs)
        if (r.key == key)
            return &r;
    return NULL;
}

static double gbs(const res_t *r)
{
    return r ? r->bytes / (r->ms * 1e6) : 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* a dead peer: write fails with EPIPE, reported */
    if (argc == 5 && strcmp(argv[1], "--exporter") == 0) {
        const variant_t *v = find_variant(argv[2]);
        g_role = "exporter";
        if (!v)
            die("no variant %s", argv[2]);
        return exporter_main(v, atoi(argv[3]), atoi(argv[4]));
    }
    if (argc == 4 && strcmp(argv[1], "--importer") == 0) {
        const variant_t *v = find_variant(argv[2]);
        g_role = "importer";
        if (!v)
            die("no variant %s", argv[2]);
        return importer_main(v, atoi(argv[3]));
    }
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s OUT.json [VARIANT...]   (IPCENV_GIB: GiB copied, default 4)\n"
                        "variants:\n", argv[0]);
        for (int i = 0; i < NVARIANTS; i++)
            fprintf(stderr, "  %-4s %s\n", VARIANTS[i].name, VARIANTS[i].desc);
        return 2;
    }
    const char *json = argv[1];
    std::vector<const variant_t *> vs;
    for (int i = 2; i < argc; i++) {
        const variant_t *v = find_variant(argv[i]);
        if (!v)
            die("no variant %s (run without arguments for the list)", argv[i]);
        vs.push_back(v);
    }
    if (vs.empty())
        for (int i = 0; i < NVARIANTS; i++)
            vs.push_back(&VARIANTS[i]);
    const char *gib = getenv("IPCENV_GIB") ? getenv("IPCENV_GIB") : "4";
    if (strtoull(gib, NULL, 10) == 0 || strtoull(gib, NULL, 10) > 14)
        die("IPCENV_GIB must be 1..14 (V2's arena is 16.06 GB) (it is '%s')", gib);
    FILE *jf = fopen(json, "w");
    if (!jf)
        die("cannot write %s: %s", json, strerror(errno));
    fprintf(jf, "{\n  \"bench\": \"ipc-env\",\n  \"gib\": %s,\n  \"reps\": %d,\n"
                "  \"variants\": [", gib, REPS);
    struct row_t {
        const variant_t *v;
        std::vector<res_t> rs;
        std::string err;
        double el;
    };
    std::vector<row_t> rows;
    double T0 = now_s();
    bool nogpu = false;
    for (size_t i = 0; i < vs.size(); i++) {
        row_t r = {vs[i], {}, "", 0};
        double t0 = now_s();
        fprintf(stderr, "ipc-env: %s: %s\n", vs[i]->name, vs[i]->desc);
        int rc = run_variant(vs[i], r.rs, r.err);
        r.el = now_s() - t0;
        fprintf(stderr, "ipc-env: %s: %s in %.1f s\n", vs[i]->name, rc ? r.err.c_str() : "done",
                r.el);
        fprintf(jf, "%s\n    {\"name\": \"%s\", \"desc\": \"%s\", \"elapsed_s\": %.2f, "
                    "\"ok\": %s%s%s%s, \"results\": {",
                i ? "," : "", r.v->name, r.v->desc, r.el, rc ? "false" : "true",
                rc ? ", \"error\": \"" : "", rc ? r.err.c_str() : "", rc ? "\"" : "");
        for (size_t k = 0; k < r.rs.size(); k++)
            fprintf(jf, "%s\"%s\": {\"ms\": %.4f, \"worst_ms\": %.4f, \"bytes\": %llu, "
                        "\"gbs\": %.1f}", k ? ", " : "", r.rs[k].key.c_str(), r.rs[k].ms,
                    r.rs[k].worst_ms, (unsigned long long)r.rs[k].bytes, gbs(&r.rs[k]));
        fprintf(jf, "}}");
        rows.push_back(r);
        if (rc && i == 0 && r.rs.empty()) { /* the first one failed outright: no GPU? */
            nogpu = true;
            fprintf(stderr, "ipc-env: the first variant failed before any copy (no GPU, or no "
                            "IPC): stopping\n");
            break;
        }
    }
    fprintf(jf, "\n  ],\n  \"elapsed_s\": %.2f\n}\n", now_s() - T0);
    fclose(jf);
    printf("== ipc-env: %s GiB from the IPC-imported arena vs the importer's own buffer (GB/s, "
           "best of %d) ==\n", gib, REPS);
    printf("%-4s %9s %9s %6s %9s %9s %6s %7s  %s\n", "var", "memcpy", "own", "ratio", "kernel",
           "own", "ratio", "time s", "what");
    for (auto &r : rows) {
        double a = gbs(get(r.rs, "memcpy_ipc")), b = gbs(get(r.rs, "memcpy_own"));
        double c = gbs(get(r.rs, "kernel_ipc")), d = gbs(get(r.rs, "kernel_own"));
        if (!r.err.empty() && r.rs.empty()) {
            printf("%-4s %-58s %7.1f  %s\n", r.v->name, ("FAILED: " + r.err).c_str(), r.el,
                   r.v->desc);
            continue;
        }
        printf("%-4s %9.0f %9.0f %5.1f%% %9.0f %9.0f %5.1f%% %7.1f  %s%s\n", r.v->name, a, b,
               b ? 100 * a / b : 0, c, d, d ? 100 * c / d : 0, r.el, r.v->desc,
               r.err.empty() ? "" : "  (FAILED later)");
        const res_t *pt = get(r.rs, "pertensor_ipc");
        if (pt) {
            double e = gbs(pt), g = gbs(get(r.rs, "pertensor_own"));
            double k = gbs(get(r.rs, "kernel_whole_ipc")), l = gbs(get(r.rs, "kernel_whole_own"));
            printf("%-4s %9.0f %9.0f %5.1f%% %9.0f %9.0f %5.1f%% %7s  (per-tensor memcpy into "
                   "storage | kernel, whole arena)\n", "", e, g, g ? 100 * e / g : 0, k, l,
                   l ? 100 * k / l : 0, "");
        }
    }
    printf("total %.1f s; JSON: %s\n", now_s() - T0, json);
    int failed = 0;
    for (auto &r : rows)
        failed += !r.err.empty();
    return nogpu ? 2 : failed ? 1 : 0;
}
