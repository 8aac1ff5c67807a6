/*
 * The ipc transport with real GPU memory: two engines whose KV pools are
 * device memory, in one process and across two processes (the decode side a
 * child of this program, its pool opened with IPC handles). Both on GPU 0,
 * or prefill on GPU P and decode on GPU D with PDX_TEST_GPUS=P,D (peer
 * access between them; the benches' contiguous and per-page baselines are
 * then peer copies).
 *
 *   1. random page maps: page sizes of 1, 16 and 64 tokens of 576 bytes,
 *      8 layers, 96 rooms each (8 in flight, 1-3 chunks), every byte
 *      compared on the GPU; prefill's bytes_direct must equal bytes_sent
 *      (every page went by a GPU copy). PDX_TRANSPORT=auto and ipc.
 *   2. stale pages: producers spin on a flag, then write the room's pages;
 *      the chunk is sent gated (stream gate, event gate) before the flag is
 *      released: decode sees only final bytes; a control run without gates
 *      must see stale ones (the test can fail). With PDX_GPU_GATES=auto
 *      every chunk's copies wait for the gate on the GPU (gates_on_gpu
 *      counts them), with off the shard waits; 8 rooms behind one event
 *      gate share a gate stream.
 *   3. a gate that never opens fails its room at the deadline while an
 *      ungated room completes; once the gate opens after all, decode's
 *      pages of the failed room are untouched (the copy that waited on the
 *      GPU was given up), and gated rooms after it still go. A room aborted
 *      behind a closed gate is released at once, its pages untouched too.
 *   4. two processes: a child decode engine receives 64 rooms and checks
 *      every byte; then a child is killed while rooms are in flight: every
 *      room ends (FAILED naming the peer, or SUCCESS), the region handles
 *      opened for it are closed once the peer is gone, and a third child is
 *      served by the same prefill engine.
 *   5. layer ranges (pdx_send_layers): each layer of a room written by its
 *      own producer behind its own flag and sent as its own range behind a
 *      gate, over ipc (the GPU waits) and tcp (the shard polls): no stale
 *      byte, no room done before its last layer; without gates, stale bytes.
 *
 * --bench: DeepSeek-R1 (61 layers x 576 B per token, page 64) and
 * Llama-3-70B TP8 (80 layers, K and V, 256 B per token each, page 16)
 * rooms of 4096 tokens with random page maps over the ipc transport, 2, 8
 * and 32 rooms kept in flight: GB/s against one contiguous device-to-device
 * copy of the same bytes and one copy per page (measured in the same run),
 * and per-room latency p50/p99.
 *
 * --bench-layers: a simulated forward pass (per layer a kernel that writes
 * the layer's pages, then computes for a set time), DeepSeek-R1-like (61
 * layers) and Llama-like (32 layers, K and V) rooms of 4096 tokens over ipc
 * and tcp, sent whole after the pass or layer by layer: the exposed
 * transfer time (decode SUCCESS - end of the last layer's kernel), at a
 * compute time per layer longer and shorter than a layer's transfer.
 *
 * --gates: tests 2 and 3 only.
 *
 * --bench-gates: rooms sent gated behind a 200 us kernel, one at a time,
 * pdx_send to decode's SUCCESS (p50, p99) with the copies waiting for the
 * gate on the GPU (PDX_GPU_GATES=auto) and with the shard waiting (off).
 *
 * Output ends with "N passed, N failed"; exit status 1 on any failure.
 */
#include "gpu_rt.h"

#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pdx/pdx.h"

#include "cu_check.h"

extern char **environ;

/* hip/: the IPC table's counters */
typedef struct pdx_hip_ipc_stats {
    uint64_t runtime_opens, runtime_closes;
    uint32_t allocations, references;
} pdx_hip_ipc_stats_t;
extern "C" void pdx_hip_ipc_stats(pdx_hip_ipc_stats_t *stats_p);

__host__ __device__ static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------ sides */

#define MAX_BUFFERS 160

typedef struct side {
    pdx_engine_t *e;
    uint8_t      *pool;      /* device memory: nbuf buffers of npages pages */
    uint32_t      nbuf, npages, layout;
    uint32_t      mems[MAX_BUFFERS];
    uint64_t      bpp;
} side_t;

/* PDX_GPU_GATES of the engines opened next (the benches: the environment's) */
static const char *gpu_gates = getenv("PDX_GPU_GATES") ? getenv("PDX_GPU_GATES") : "auto";

/* Prefill's GPU and decode's (PDX_TEST_GPUS=P,D; default 0,0). The test's
 * own kernels and streams run on the process's home GPU (prefill's; the
 * decode child's own), reaching the other one's pool by peer access. */
static int gpu_pf, gpu_dc;

/* One engine on GPU gpu, its pool one cudaMalloc with a region per buffer
 * (they share one registration and one IPC export). */
static void side_open(side_t *s, int gpu, const char *transport, uint32_t layers, uint32_t bpl,
                      uint32_t npages, uint64_t bpp, const char *timeout_ms)
{
    char ordinal[16];
    int home;

    static pdx_buffer_desc_t bufs[MAX_BUFFERS];
    pdx_config_t cfg;
    pdx_group_desc_t group = {};
    pdx_layout_desc_t desc = {};
    uint64_t buf_len = (uint64_t)npages * bpp;

    memset(s, 0, sizeof(*s));
    s->nbuf = layers * bpl;
    s->npages = npages;
    s->bpp = bpp;
    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", transport);
    pdx_config_set(&cfg, "PDX_SHARDS", "2");
    snprintf(ordinal, sizeof(ordinal), "%d", gpu);
    pdx_config_set(&cfg, "PDX_GPU", ordinal);
    pdx_config_set(&cfg, "PDX_TRANSFER_TIMEOUT_MS", timeout_ms);
    pdx_config_set(&cfg, "PDX_GPU_GATES", gpu_gates);
    if (pdx_engine_create(&cfg, &s->e) != PDX_OK) {
        printf("FATAL: pdx_engine_create (PDX_TRANSPORT=%s)\n", transport);
        exit(2);
    }
    CUDA_OK(cudaGetDevice(&home));
    CUDA_OK(cudaSetDevice(gpu));
    CUDA_OK(cudaMalloc((void **)&s->pool, buf_len * s->nbuf));
    CUDA_OK(cudaMemset(s->pool, 0xee, buf_len * s->nbuf));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaSetDevice(home));
    for (uint32_t b = 0; b < s->nbuf; b++) {
        uint32_t mem;

        if (pdx_mem_register(s->e, s->pool + b * buf_len, buf_len, &mem) != PDX_OK) {
            printf("FATAL: register buffer %u\n", b);
            exit(2);
        }
        bufs[b] = (pdx_buffer_desc_t){.mem = mem, .reserved0 = 0, .offset = 0,
                                      .bytes_per_page = bpp};
        s->mems[b] = mem;
    }
    group.buffers_per_layer = bpl;
    group.nbuffers = s->nbuf;
    group.npages = npages;
    group.buffers = bufs;
    desc.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS;
    desc.ngroups = 1;
    desc.layer_end = layers;
    desc.groups = &group;
    if (pdx_layout_create(s->e, &desc, &s->layout) != PDX_OK) {
        printf("FATAL: layout\n");
        exit(2);
    }
}

/* PDX_TEST_GPUS: prefill's and decode's GPUs; with two, the home GPU (the
 * caller's current) gets peer access to the other. */
static void pick_gpus(bool decode_child)
{
    const char *v = getenv("PDX_TEST_GPUS");
    int n = 0, home;

    CUDA_OK(cudaGetDeviceCount(&n));
    if (v && sscanf(v, "%d,%d", &gpu_pf, &gpu_dc) != 2) {
        printf("FATAL: PDX_TEST_GPUS=%s: give prefill's and decode's GPU, as 0,1\n", v);
        exit(2);
    }
    if (gpu_pf < 0 || gpu_dc < 0 || gpu_pf >= n || gpu_dc >= n) {
        printf("FATAL: PDX_TEST_GPUS=%d,%d: this machine has %d GPU%s\n", gpu_pf, gpu_dc, n,
               n == 1 ? "" : "s");
        exit(2);
    }
    home = decode_child ? gpu_dc : gpu_pf;
    CUDA_OK(cudaSetDevice(home));
    if (gpu_pf != gpu_dc) {
        int other = decode_child ? gpu_pf : gpu_dc, can = 0;
        cudaError_t err;

        CUDA_OK(cudaDeviceCanAccessPeer(&can, home, other));
        if (!can) {
            printf("FATAL: GPU %d cannot reach GPU %d's memory (no peer access)\n", home, other);
            exit(2);
        }
        err = cudaDeviceEnablePeerAccess(other, 0);
        if (err != cudaSuccess && err != cudaErrorPeerAccessAlreadyEnabled)
            CUDA_OK(err);
    }
    if (!decode_child)
        printf("prefill on GPU %d, decode on GPU %d%s\n", gpu_pf, gpu_dc,
               gpu_pf != gpu_dc ? " (peer access)" : "");
}

/* n bytes of prefill's pool to decode's, on stream s: a peer copy across GPUs. */
static void copy_pf_to_dc(void *dst, const void *src, size_t n, cudaStream_t s)
{
    if (gpu_pf == gpu_dc)
        CUDA_OK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
    else
        CUDA_OK(cudaMemcpyPeerAsync(dst, gpu_dc, src, gpu_pf, n, s));
}

static void side_close(side_t *s)
{
    pdx_engine_destroy(s->e);
    CUDA_OK(cudaFree(s->pool));
}

/* Word w of page p of buffer b of a pool filled for seed. */
__host__ __device__ static uint64_t pool_word(uint64_t seed, uint32_t b, uint32_t p, uint64_t w)
{
    return mix(seed * 0x9e3779b97f4a7c15ull ^ (uint64_t)b << 48 ^ (uint64_t)p << 24 ^ w);
}

__global__ void fill_pool(uint64_t *pool, uint32_t nbuf, uint32_t npages, uint64_t words,
                          uint64_t seed)
{
    const uint64_t total = (uint64_t)nbuf * npages * words;

    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < total;
         i += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t w = i % words, page = i / words;

        pool[i] = pool_word(seed, (uint32_t)(page / npages), (uint32_t)(page % npages), w);
    }
}

/* Words of decode's dst pages that differ from the seed's src pages: one
 * block per (buffer, page of the room). */
__global__ void count_bad(const uint64_t *dpool, const uint32_t *src, const uint32_t *dst,
                          uint32_t n, uint32_t npages, uint64_t words, uint64_t seed,
                          unsigned long long *bad)
{
    const uint32_t b = blockIdx.x / n, i = blockIdx.x % n;
    const uint64_t *page = dpool + ((uint64_t)b * npages + dst[i]) * words;
    unsigned long long mine = 0;

    for (uint64_t w = threadIdx.x; w < words; w += blockDim.x)
        mine += page[w] != pool_word(seed, b, src[i], w);
    if (mine)
        atomicAdd(bad, mine);
}

static void fill(side_t *s, uint64_t seed)
{
    fill_pool<<<1024, 256>>>((uint64_t *)s->pool, s->nbuf, s->npages, s->bpp / 8, seed);
    CUDA_OK(cudaDeviceSynchronize());
}

/* Bytes of room's dst pages on decode that are not prefill's src pages. */
static uint64_t bad_bytes(const side_t *d, const uint32_t *src, const uint32_t *dst, uint32_t n,
                          uint64_t seed)
{
    static uint32_t *dev;
    static unsigned long long *bad;
    unsigned long long host = 0;

    if (!dev) {
        CUDA_OK(cudaMalloc((void **)&dev, 2 * 4096 * sizeof(uint32_t)));
        CUDA_OK(cudaMalloc((void **)&bad, sizeof(*bad)));
    }
    CUDA_OK(cudaMemcpy(dev, src, n * sizeof(uint32_t), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dev + 4096, dst, n * sizeof(uint32_t), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(bad, 0, sizeof(*bad)));
    count_bad<<<d->nbuf * n, 128>>>((const uint64_t *)d->pool, dev, dev + 4096, n, d->npages,
                                     d->bpp / 8, seed, bad);
    CUDA_OK(cudaMemcpy(&host, bad, sizeof(host), cudaMemcpyDeviceToHost));
    return host * 8;
}

/* n distinct pages from [base, base + range). */
static void pick(uint32_t *out, uint32_t n, uint32_t base, uint32_t range, unsigned *seed)
{
    static uint8_t used[65536];

    memset(used, 0, range);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p;

        do
            p = (uint32_t)rand_r(seed) % range;
        while (used[p]);
        used[p] = 1;
        out[i] = base + p;
    }
}

/* Send src in `chunks` chunks (the last with PDX_SEND_LAST). */
static bool send_room(side_t *pf, uint64_t room, const uint32_t *src, uint32_t n, int chunks,
                      const pdx_gate_t *gate)
{
    uint32_t at = 0;

    for (int c = 0; c < chunks; c++) {
        uint32_t k = c == chunks - 1 ? n - at : n / (uint32_t)chunks;
        pdx_pages_t s = {src + at, k};

        if (pdx_send(pf->e, room, pf->layout, &s, gate, NULL,
                     c == chunks - 1 ? PDX_SEND_LAST : 0) != PDX_OK)
            return false;
        at += k;
    }
    return true;
}

/* ------------------------------------------------------ 1. random page maps */

enum { TOKEN_BYTES = 576, INFLIGHT = 8 };

static void test_page_maps(const char *transport, uint32_t tokens, uint32_t rooms, uint64_t first)
{
    enum { LAYERS = 8, NPAGES = 256 };
    const uint64_t seed = 0x51ed + tokens;
    side_t pf, dc;
    uint32_t peer;
    uint32_t src[INFLIGHT][32], dst[INFLIGHT][32], n[INFLIGHT];
    unsigned rs = (unsigned)tokens;
    uint64_t bad = 0, chunks = 0;
    int ok = 0;
    pdx_stats_t st;

    progress("random page maps", 0);
    side_open(&pf, gpu_pf, transport, LAYERS, 1, NPAGES, (uint64_t)tokens * TOKEN_BYTES, "20000");
    side_open(&dc, gpu_dc, transport, LAYERS, 1, NPAGES, (uint64_t)tokens * TOKEN_BYTES, "20000");
    fill(&pf, seed);
    CHECK(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) == PDX_OK, "connect");
    for (uint32_t r0 = 0; r0 < rooms; r0 += INFLIGHT) {
        for (uint32_t k = 0; k < INFLIGHT; k++) {
            uint64_t room = first + r0 + k;
            pdx_pages_t d;

            n[k] = 1 + (uint32_t)rand_r(&rs) % 32;
            pick(src[k], n[k], 0, NPAGES, &rs);
            /* rooms in flight write disjoint pages */
            pick(dst[k], n[k], k * (NPAGES / INFLIGHT), NPAGES / INFLIGHT, &rs);
            d = (pdx_pages_t){dst[k], n[k]};
            CHECK(pdx_expect(dc.e, peer, room, dc.layout, &d, NULL, 1, 20000) == PDX_OK,
                  "expect %llu", (unsigned long long)room);
        }
        for (uint32_t k = 0; k < INFLIGHT; k++) {
            CHECK(send_room(&pf, first + r0 + k, src[k], n[k], 1 + (int)(k % 3), NULL),
                  "send %llu", (unsigned long long)(first + r0 + k));
            /* chunks of at least one page (send_room's split) */
            chunks += n[k] / (1 + k % 3) ? 1 + k % 3 : 1;
        }
        for (uint32_t k = 0; k < INFLIGHT; k++) {
            uint64_t room = first + r0 + k;

            if (wait_done(dc.e, room, 20000) == PDX_ROOM_SUCCESS) {
                ok++;
                bad += bad_bytes(&dc, src[k], dst[k], n[k], seed);
            }
            wait_done(pf.e, room, 20000);
            release_room(dc.e, room);
            release_room(pf.e, room);
        }
    }
    pdx_engine_stats(pf.e, &st);
    CHECK(ok == (int)rooms && bad == 0, "%s, pages of %u tokens: %d/%u rooms, %llu bad bytes",
          transport, tokens, ok, rooms, (unsigned long long)bad);
    CHECK(st.bytes_sent > 0 && st.bytes_direct == st.bytes_sent,
          "%s: %llu of %llu bytes by GPU copies", transport,
          (unsigned long long)st.bytes_direct, (unsigned long long)st.bytes_sent);
    /* a chunk of one group is one page-copies WR, not a WR per run */
    CHECK(st.writes_posted == chunks, "%s: %llu WRs for %llu chunks", transport,
          (unsigned long long)st.writes_posted, (unsigned long long)chunks);
    printf("PDX_TRANSPORT=%s, pages of %u tokens (%u B x %d layers): %d/%u rooms SUCCESS, "
           "%llu bad bytes, %llu of %llu bytes by GPU copies, %llu WRs for %llu chunks\n",
           transport, tokens, tokens * TOKEN_BYTES, LAYERS, ok, rooms, (unsigned long long)bad,
           (unsigned long long)st.bytes_direct, (unsigned long long)st.bytes_sent,
           (unsigned long long)st.writes_posted, (unsigned long long)chunks);
    side_close(&dc);
    side_close(&pf);
}

/* One-sided transfers by descriptor over ipc: runs, not pages (the gather
 * kernel over batched WRITEs). */
static void test_xfer(void)
{
    enum { XL8 = 8, NP = 256, N = 48 };
    const uint64_t seed = 0x7f3, bpp = 9216;
    static uint8_t descs[XL8][256];
    static pdx_desc_t remotes[XL8];
    static pdx_xfer_entry_t entries[XL8 * N];
    uint32_t src[N], dst[N], peer;
    unsigned rs = 99;
    side_t pf, dc;
    pdx_xfer_t x = 0;
    pdx_status_t st = PDX_ERR_AGAIN;
    pdx_stats_t stats;
    uint64_t bad, end;
    char err[256] = "";

    progress("one-sided transfers", 0);
    side_open(&pf, gpu_pf, "ipc", XL8, 1, NP, bpp, "10000");
    side_open(&dc, gpu_dc, "ipc", XL8, 1, NP, bpp, "10000");
    fill(&pf, seed);
    CHECK(pdx_peer_connect(pf.e, pdx_engine_address(dc.e), 5000, &peer) == PDX_OK, "connect");
    pick(src, N, 0, NP, &rs);
    pick(dst, N, 0, NP, &rs);
    for (uint32_t b = 0; b < XL8; b++) {
        size_t len = 0;

        CHECK(pdx_mem_desc(dc.e, dc.mems[b], descs[b], sizeof(descs[b]), &len) == PDX_OK,
              "descriptor %u", b);
        remotes[b] = (pdx_desc_t){descs[b], len};
        for (uint32_t i = 0; i < N; i++)
            entries[b * N + i] = (pdx_xfer_entry_t){.mem = pf.mems[b], .remote = b,
                                                    .offset = src[i] * bpp,
                                                    .remote_offset = dst[i] * bpp, .len = bpp};
    }
    end = now_ns() + 5000000000ull; /* the peer's regions reach us after connect */
    while ((st = pdx_xfer_post(pf.e, PDX_XFER_WRITE, remotes, XL8, entries, XL8 * N, NULL, 10000,
                               &x)) == PDX_ERR_AGAIN && now_ns() < end)
        usleep(1000);
    CHECK(st == PDX_OK, "pdx_xfer_post: %d", st);
    st = pdx_xfer_wait(pf.e, &x, 1, 10000, NULL);
    pdx_xfer_error(pf.e, x, err, sizeof(err));
    CHECK(st == PDX_OK, "transfer: %d %s", st, err);
    bad = bad_bytes(&dc, src, dst, N, seed);
    pdx_engine_stats(pf.e, &stats);
    CHECK(bad == 0 && stats.bytes_direct == stats.bytes_sent && stats.bytes_sent == XL8 * N * bpp,
          "one-sided: %llu bad bytes, %llu of %llu bytes by GPU copies",
          (unsigned long long)bad, (unsigned long long)stats.bytes_direct,
          (unsigned long long)stats.bytes_sent);
    printf("ipc, one-sided WRITE of %u runs: %s, %llu bad bytes, %llu of %llu bytes by GPU "
           "copies in %llu WRs\n", XL8 * N, st == PDX_OK ? "done" : "FAILED",
           (unsigned long long)bad, (unsigned long long)stats.bytes_direct,
           (unsigned long long)stats.bytes_sent, (unsigned long long)stats.writes_posted);
    pdx_xfer_release(pf.e, x);
    side_close(&dc);
    side_close(&pf);
}

/* ----------------------------------------------- 2, 3. gates on the GPU */

enum { GL = 4, GNP = 256, GBPP = 4096, GPAGES = 16 };

__host__ __device__ static uint64_t room_word(uint64_t room, uint32_t layer, uint32_t i, uint64_t w)
{
    return mix(room * 0x9e3779b97f4a7c15ull ^ (uint64_t)layer << 48 ^ (uint64_t)i << 24 ^ w);
}

/* Wait for the flag (the block's first thread), then write the i-th page of
 * the chunk in layer. */
__device__ static void produce_page(volatile uint64_t *flag, uint64_t *pool,
                                    const uint32_t *pages, uint32_t i, uint64_t room,
                                    uint32_t layer)
{
    uint64_t *page = pool + ((uint64_t)layer * GNP + pages[i]) * (GBPP / 8);

    if (threadIdx.x == 0)
        while (*flag == 0)
            ;
    __syncthreads();
    for (uint32_t w = threadIdx.x; w < GBPP / 8; w += blockDim.x)
        page[w] = room_word(room, layer, i, w);
}

/* One block per (layer, page of the chunk). */
__global__ void produce(volatile uint64_t *flag, uint64_t *pool, const uint32_t *pages,
                        uint32_t n, uint64_t room)
{
    produce_page(flag, pool, pages, blockIdx.x % n, room, blockIdx.x / n);
}

/* One block per page of one layer. */
__global__ void produce_layer(volatile uint64_t *flag, uint64_t *pool, const uint32_t *pages,
                              uint64_t room, uint32_t layer)
{
    produce_page(flag, pool, pages, blockIdx.x, room, layer);
}

__global__ void count_stale(const uint64_t *pool, const uint32_t *dst, uint32_t n, uint64_t room,
                            unsigned long long *bad)
{
    const uint32_t layer = blockIdx.x / n, i = blockIdx.x % n;
    const uint64_t *page = pool + ((uint64_t)layer * GNP + dst[i]) * (GBPP / 8);
    unsigned long long mine = 0;

    for (uint32_t w = threadIdx.x; w < GBPP / 8; w += blockDim.x)
        mine += page[w] != room_word(room, layer, i, w);
    if (mine)
        atomicAdd(bad, mine);
}

enum gating { GATE_STREAM, GATE_EVENT, GATE_OFF };

/* SUCCESS or FAILED. Before its gate opened a decode room may be WAITING or
 * TRANSFERRING: the LAST notifies of endpoints that carried no copy of the
 * chunk may be there already, the one behind the copies is not. */
static bool room_ended(pdx_engine_t *e, uint64_t room)
{
    pdx_room_state_t st = pdx_poll(e, room);

    return st == PDX_ROOM_SUCCESS || st == PDX_ROOM_FAILED;
}

static uint64_t *flag;          /* host-mapped */
static uint32_t *gpages;        /* src pages, then dst pages */
static unsigned long long *gbad;
static cudaStream_t gstream;
static cudaEvent_t gev;

static uint64_t stale_rooms(side_t *pf, side_t *dc, uint32_t peer, uint64_t first, int n,
                            enum gating gating, int *ok_p)
{
    unsigned seed = (unsigned)first;
    uint64_t stale = 0;
    int ok = 0;

    for (int r = 0; r < n; r++) {
        uint64_t room = first + (uint64_t)r;
        uint32_t src[GPAGES], dst[GPAGES];
        pdx_pages_t s = {src, GPAGES}, d = {dst, GPAGES};
        pdx_gate_t gate = {};
        unsigned long long bad = 0;

        pick(src, GPAGES, 0, GNP, &seed);
        pick(dst, GPAGES, 0, GNP, &seed);
        *(volatile uint64_t *)flag = 0;
        CUDA_OK(cudaMemcpyAsync(gpages, src, sizeof(src), cudaMemcpyHostToDevice, gstream));
        CUDA_OK(cudaMemcpyAsync(gpages + GPAGES, dst, sizeof(dst), cudaMemcpyHostToDevice,
                                gstream));
        CUDA_OK(cudaStreamSynchronize(gstream));
        CHECK(pdx_expect(dc->e, peer, room, dc->layout, &d, NULL, 1, 10000) == PDX_OK, "expect");
        produce<<<GL * GPAGES, 128, 0, gstream>>>(flag, (uint64_t *)pf->pool, gpages, GPAGES,
                                                  room);
        if (gating == GATE_STREAM) {
            CHECK(pdx_gate_arm(pf->e, gstream, &gate) == PDX_OK, "gate_arm");
        } else if (gating == GATE_EVENT) {
            CUDA_OK(cudaEventRecord(gev, gstream));
            gate.kind = PDX_GATE_EVENT;
            gate.event = gev;
        }
        CHECK(pdx_send(pf->e, room, pf->layout, &s, gating == GATE_OFF ? NULL : &gate, NULL,
                       PDX_SEND_LAST) == PDX_OK, "send");
        usleep(2000);
        if (gating != GATE_OFF)
            CHECK(!room_ended(dc->e, room), "room %llu ended before its gate opened",
                  (unsigned long long)room);
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        CUDA_OK(cudaStreamSynchronize(gstream));
        if (wait_done(dc->e, room, 10000) == PDX_ROOM_SUCCESS) {
            ok++;
            CUDA_OK(cudaMemset(gbad, 0, sizeof(*gbad)));
            count_stale<<<GL * GPAGES, 128>>>((const uint64_t *)dc->pool, gpages + GPAGES,
                                              GPAGES, room, gbad);
            CUDA_OK(cudaMemcpy(&bad, gbad, sizeof(bad), cudaMemcpyDeviceToHost));
            stale += bad * 8;
        }
        wait_done(pf->e, room, 10000);
        release_room(dc->e, room);
        release_room(pf->e, room);
    }
    *ok_p = ok;
    return stale;
}

/* n rooms (n * GPAGES <= GNP) behind one event gate: disjoint pages, their
 * producers queued on gstream behind the flag, one event after them all. */
static uint64_t shared_gate(side_t *pf, side_t *dc, uint32_t peer, uint64_t first, uint32_t n,
                            int *ok_p)
{
    uint32_t *lists, src[GNP], dst[GNP];
    unsigned long long bad = 0;
    uint64_t stale = 0;
    pdx_gate_t gate = {};
    unsigned seed = (unsigned)first;
    int ok = 0;

    gate.kind = PDX_GATE_EVENT;
    gate.event = gev;
    pick(dst, n * GPAGES, 0, GNP, &seed);
    for (uint32_t i = 0; i < n * GPAGES; i++)
        src[i] = (i * 37 + 11) % GNP; /* a permutation: disjoint per room */
    CUDA_OK(cudaMalloc((void **)&lists, 2 * GNP * sizeof(uint32_t)));
    CUDA_OK(cudaMemcpy(lists, src, sizeof(src), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(lists + GNP, dst, sizeof(dst), cudaMemcpyHostToDevice));
    *(volatile uint64_t *)flag = 0;
    for (uint32_t r = 0; r < n; r++) {
        pdx_pages_t d = {dst + r * GPAGES, GPAGES};

        CHECK(pdx_expect(dc->e, peer, first + r, dc->layout, &d, NULL, 1, 10000) == PDX_OK,
              "expect");
        produce<<<GL * GPAGES, 128, 0, gstream>>>(flag, (uint64_t *)pf->pool, lists + r * GPAGES,
                                                  GPAGES, first + r);
    }
    CUDA_OK(cudaEventRecord(gev, gstream));
    for (uint32_t r = 0; r < n; r++) {
        pdx_pages_t s = {src + r * GPAGES, GPAGES};

        CHECK(pdx_send(pf->e, first + r, pf->layout, &s, &gate, NULL, PDX_SEND_LAST) == PDX_OK,
              "send");
    }
    usleep(2000);
    for (uint32_t r = 0; r < n; r++)
        CHECK(!room_ended(dc->e, first + r), "room %llu ended before its gate opened",
              (unsigned long long)(first + r));
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    CUDA_OK(cudaStreamSynchronize(gstream));
    for (uint32_t r = 0; r < n; r++) {
        if (wait_done(dc->e, first + r, 10000) == PDX_ROOM_SUCCESS) {
            ok++;
            CUDA_OK(cudaMemset(gbad, 0, sizeof(*gbad)));
            count_stale<<<GL * GPAGES, 128>>>((const uint64_t *)dc->pool,
                                              lists + GNP + r * GPAGES, GPAGES, first + r, gbad);
            CUDA_OK(cudaMemcpy(&bad, gbad, sizeof(bad), cudaMemcpyDeviceToHost));
            stale += bad * 8;
        }
    }
    for (uint32_t r = 0; r < n; r++) {
        wait_done(pf->e, first + r, 10000);
        release_room(dc->e, first + r);
        release_room(pf->e, first + r);
    }
    cudaFree(lists);
    *ok_p = ok;
    return stale;
}

/* Open the stuck producer's gate late, wait for everything on the GPU, and
 * count the words of room's 4 pages at decode that are not the room's. */
static unsigned long long open_late(cudaStream_t stuck, side_t *dc, const uint32_t *pages,
                                    uint64_t room)
{
    unsigned long long untouched = 0;

    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    CUDA_OK(cudaStreamSynchronize(stuck));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemset(gbad, 0, sizeof(*gbad)));
    count_stale<<<GL * 4, 128>>>((const uint64_t *)dc->pool, pages, 4, room, gbad);
    CUDA_OK(cudaMemcpy(&untouched, gbad, sizeof(untouched), cudaMemcpyDeviceToHost));
    return untouched;
}

static uint64_t gates_on_gpu(pdx_engine_t *e)
{
    pdx_stats_t st = {};

    pdx_engine_stats(e, &st);
    return st.gates_on_gpu;
}

static void test_gates(const char *mode)
{
    side_t pf, dc;
    uint32_t peer, pages[4] = {1, 2, 3, 4};
    pdx_pages_t l = {pages, 4};
    pdx_gate_t gate = {};
    cudaStream_t stuck;
    const bool on_gpu = strcmp(mode, "auto") == 0;
    unsigned long long untouched = 0;
    uint64_t stale, g0;
    char err[256] = "";
    int ok;

    progress("gates", 0);
    gpu_gates = mode;
    printf("PDX_GPU_GATES=%s\n", mode);
    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof(*flag), cudaHostAllocMapped));
    CUDA_OK(cudaMalloc((void **)&gpages, 2 * GPAGES * sizeof(uint32_t)));
    CUDA_OK(cudaMalloc((void **)&gbad, sizeof(*gbad)));
    CUDA_OK(cudaStreamCreateWithFlags(&gstream, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&stuck, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&gev, cudaEventDisableTiming));
    side_open(&pf, gpu_pf, "ipc", GL, 1, GNP, GBPP, "3000");
    side_open(&dc, gpu_dc, "ipc", GL, 1, GNP, GBPP, "3000");
    CHECK(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) == PDX_OK, "connect");

    stale = stale_rooms(&pf, &dc, peer, 1000, 32, GATE_STREAM, &ok);
    CHECK(ok == 32 && stale == 0, "stream gates: %d/32 rooms, %llu stale bytes", ok,
          (unsigned long long)stale);
    printf("ipc, stale pages, stream gates: %d/32 rooms SUCCESS, %llu stale bytes\n", ok,
           (unsigned long long)stale);
    stale = stale_rooms(&pf, &dc, peer, 2000, 32, GATE_EVENT, &ok);
    CHECK(ok == 32 && stale == 0, "event gates: %d/32 rooms, %llu stale bytes", ok,
          (unsigned long long)stale);
    printf("ipc, stale pages, event gates: %d/32 rooms SUCCESS, %llu stale bytes\n", ok,
           (unsigned long long)stale);
    g0 = gates_on_gpu(pf.e);
    CHECK(g0 == (on_gpu ? 64u : 0u), "%llu chunks' copies waited for their gate on the GPU",
          (unsigned long long)g0);
    stale = shared_gate(&pf, &dc, peer, 2500, 8, &ok);
    CHECK(ok == 8 && stale == 0, "one event gate, 8 rooms: %d/8 rooms, %llu stale bytes", ok,
          (unsigned long long)stale);
    CHECK(gates_on_gpu(pf.e) - g0 == (on_gpu ? 8u : 0u), "%llu of 8 rooms behind one event "
          "gate on the GPU", (unsigned long long)(gates_on_gpu(pf.e) - g0));
    printf("ipc, stale pages, one event gate for 8 rooms: %d/8 rooms SUCCESS, %llu stale bytes; "
           "%llu chunks waited on the GPU\n", ok, (unsigned long long)stale,
           (unsigned long long)gates_on_gpu(pf.e));
    stale = stale_rooms(&pf, &dc, peer, 3000, 16, GATE_OFF, &ok);
    CHECK(stale > 0, "control without gates saw no stale byte: the test could not fail");
    printf("ipc, stale pages, control without gates: %d/16 rooms SUCCESS, %llu stale bytes\n",
           ok, (unsigned long long)stale);

    /* a gate that never opens: its room fails at the deadline, others go on */
    progress("gate that never opens", 0);
    *(volatile uint64_t *)flag = 0;
    CUDA_OK(cudaMemcpy(gpages, pages, sizeof(pages), cudaMemcpyHostToDevice));
    CHECK(pdx_expect(dc.e, peer, 5000, dc.layout, &l, NULL, 1, 10000) == PDX_OK, "expect");
    produce<<<GL * 4, 128, 0, stuck>>>(flag, (uint64_t *)pf.pool, gpages, 4, 5000);
    CHECK(pdx_gate_arm(pf.e, stuck, &gate) == PDX_OK, "gate_arm");
    CHECK(pdx_send(pf.e, 5000, pf.layout, &l, &gate, NULL, PDX_SEND_LAST) == PDX_OK, "send");
    {
        pdx_pages_t s2 = {pages, 4};
        uint32_t d2[4] = {100, 101, 102, 103};
        pdx_pages_t dd = {d2, 4};

        CHECK(pdx_expect(dc.e, peer, 5001, dc.layout, &dd, NULL, 1, 10000) == PDX_OK, "expect");
        uint64_t t0 = now_ns();

        CHECK(pdx_send(pf.e, 5001, pf.layout, &s2, NULL, NULL, PDX_SEND_LAST) == PDX_OK, "send");
        CHECK(wait_done(dc.e, 5001, 5000) == PDX_ROOM_SUCCESS, "an ungated room meanwhile");
        printf("ipc, gate that never opens: an ungated room sent after it SUCCESS in %.2f ms\n",
               (double)(now_ns() - t0) / 1e6);
    }
    CHECK(wait_done(pf.e, 5000, 8000) == PDX_ROOM_FAILED, "the stuck room failed at its deadline");
    pdx_room_error(pf.e, 5000, err, sizeof(err));
    printf("ipc, gate that never opens: \"%s\"\n", err);
    for (int i = 0; i < 10000 && pdx_release(pf.e, 5000) == PDX_INPROGRESS; i++)
        usleep(1000);
    CHECK(pdx_poll(pf.e, 5000) == PDX_ROOM_NONE, "the stuck room is released while its gate "
          "is still closed");
    /* the gate opens after all: the copy given up writes nothing */
    untouched = open_late(stuck, &dc, gpages, 5000);
    CHECK(untouched == GL * 4 * GBPP / 8, "decode's pages of the failed room: %llu of %u words "
          "untouched after its gate opened", untouched, GL * 4 * GBPP / 8);
    printf("ipc, gate that never opens: once it opened, %llu of %u words of decode's pages "
           "untouched\n", untouched, GL * 4 * GBPP / 8);
    for (uint64_t r = 5000; r < 5002; r++) {
        wait_done(dc.e, r, 10000);
        release_room(dc.e, r);
        release_room(pf.e, r);
    }
    /* a room aborted while its copies wait for the gate: released long
     * before the deadline, and nothing written once the gate opens */
    progress("aborted behind a gate", 0);
    *(volatile uint64_t *)flag = 0;
    CHECK(pdx_expect(dc.e, peer, 5100, dc.layout, &l, NULL, 1, 10000) == PDX_OK, "expect");
    produce<<<GL * 4, 128, 0, stuck>>>(flag, (uint64_t *)pf.pool, gpages, 4, 5100);
    CHECK(pdx_gate_arm(pf.e, stuck, &gate) == PDX_OK, "gate_arm");
    CHECK(pdx_send(pf.e, 5100, pf.layout, &l, &gate, NULL, PDX_SEND_LAST) == PDX_OK, "send");
    usleep(20000);
    {
        uint64_t t0 = now_ns();
        pdx_status_t rs = PDX_INPROGRESS;

        CHECK(pdx_abort(pf.e, 5100) == PDX_OK, "abort");
        while ((rs = pdx_release(pf.e, 5100)) == PDX_INPROGRESS && now_ns() - t0 < 2000000000ull)
            usleep(100);
        CHECK(rs == PDX_OK, "the aborted room is released before its gate opened: %s "
              "(prefill %d, decode %d, %llu chunks waited on the GPU)", pdx_status_str(rs),
              (int)pdx_poll(pf.e, 5100), (int)pdx_poll(dc.e, 5100),
              (unsigned long long)gates_on_gpu(pf.e));
        printf("ipc, a room aborted behind a closed gate: released in %.2f ms\n",
               (double)(now_ns() - t0) / 1e6);
    }
    untouched = open_late(stuck, &dc, gpages, 5100);
    CHECK(untouched == GL * 4 * GBPP / 8, "decode's pages of the aborted room: %llu of %u words "
          "untouched after its gate opened", untouched, GL * 4 * GBPP / 8);
    wait_done(dc.e, 5100, 10000);
    release_room(dc.e, 5100);

    stale = stale_rooms(&pf, &dc, peer, 6000, 4, GATE_EVENT, &ok);
    CHECK(ok == 4 && stale == 0, "event gates after the stuck one: %d/4 rooms, %llu stale bytes",
          ok, (unsigned long long)stale);
    side_close(&dc);
    side_close(&pf);
    cudaStreamDestroy(stuck);
    cudaStreamDestroy(gstream);
    cudaEventDestroy(gev);
    cudaFree(gbad);
    cudaFree(gpages);
    cudaFreeHost(flag);
    gpu_gates = "auto";
}

/* ------------------------------------------------------- 5. layer ranges */

/* Rooms sent one layer range at a time (pdx_send_layers), each layer's
 * producer spinning on its own flag and each range behind its own gate;
 * the flags go up one layer at a time. gated: no stale byte and no room
 * done before its last layer; without gates: stale bytes. */
static void layer_rooms(const char *transport, bool gated)
{
    enum { ROOMS = 8 };
    side_t pf, dc;
    uint32_t peer;
    uint64_t *lflags, stale = 0;
    unsigned seed = 21;
    int ok = 0;

    progress("layer ranges", 0);
    CUDA_OK(cudaHostAlloc((void **)&lflags, GL * sizeof(*lflags), cudaHostAllocMapped));
    side_open(&pf, gpu_pf, transport, GL, 1, GNP, GBPP, "5000");
    side_open(&dc, gpu_dc, transport, GL, 1, GNP, GBPP, "5000");
    CHECK(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) == PDX_OK, "connect");
    for (int r = 0; r < ROOMS; r++) {
        const uint64_t room = 8000 + (uint64_t)r + (gated ? 0 : 100);
        uint32_t src[GPAGES], dst[GPAGES];
        pdx_pages_t sp = {src, GPAGES}, dp = {dst, GPAGES};
        unsigned long long bad = 0;

        pick(src, GPAGES, 0, GNP, &seed);
        pick(dst, GPAGES, 0, GNP, &seed);
        CUDA_OK(cudaMemcpy(gpages, src, sizeof(src), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(gpages + GPAGES, dst, sizeof(dst), cudaMemcpyHostToDevice));
        CHECK(pdx_expect(dc.e, peer, room, dc.layout, &dp, NULL, 1, 10000) == PDX_OK, "expect");
        for (uint32_t l = 0; l < GL; l++) {
            pdx_gate_t gate = {};

            lflags[l] = 0;
            produce_layer<<<GPAGES, 128, 0, gstream>>>(&lflags[l], (uint64_t *)pf.pool, gpages,
                                                       room, l);
            if (gated)
                CHECK(pdx_gate_arm(pf.e, gstream, &gate) == PDX_OK, "gate_arm");
            CHECK(pdx_send_layers(pf.e, room, pf.layout, l, l + 1, &sp, gated ? &gate : NULL,
                                  NULL, l + 1 == GL ? PDX_SEND_LAST : 0) == PDX_OK, "send");
        }
        usleep(2000);
        for (uint32_t l = 0; l < GL; l++) {
            if (gated)
                CHECK(!room_ended(dc.e, room), "room %llu ended with %u of %u layers written",
                      (unsigned long long)room, l, GL);
            __atomic_store_n(&lflags[l], 1, __ATOMIC_RELEASE);
            usleep(1000);
        }
        CUDA_OK(cudaStreamSynchronize(gstream));
        if (wait_done(dc.e, room, 10000) == PDX_ROOM_SUCCESS) {
            ok++;
            CUDA_OK(cudaMemset(gbad, 0, sizeof(*gbad)));
            count_stale<<<GL * GPAGES, 128>>>((const uint64_t *)dc.pool, gpages + GPAGES,
                                              GPAGES, room, gbad);
            CUDA_OK(cudaMemcpy(&bad, gbad, sizeof(bad), cudaMemcpyDeviceToHost));
            stale += bad * 8;
        }
        wait_done(pf.e, room, 10000);
        release_room(dc.e, room);
        release_room(pf.e, room);
    }
    if (gated)
        CHECK(ok == ROOMS && stale == 0, "%s, layer by layer behind gates: %d/%d rooms, %llu "
              "stale bytes", transport, ok, ROOMS, (unsigned long long)stale);
    else
        CHECK(stale > 0, "%s, layer by layer without gates saw no stale byte: the test could "
              "not fail", transport);
    printf("%s, layer ranges %s gates: %d/%d rooms SUCCESS, %llu stale bytes; %llu chunks "
           "waited on the GPU\n", transport, gated ? "behind" : "without", ok, ROOMS,
           (unsigned long long)stale, (unsigned long long)gates_on_gpu(pf.e));
    side_close(&dc);
    side_close(&pf);
    cudaFreeHost(lflags);
}

/* Decode's waits for layers of a room that is aborted before anything was
 * sent: the stream goes on, and the failure gate is open. */
static void layer_waits_on_abort(const char *transport)
{
    side_t pf, dc;
    uint32_t peer, dst[GPAGES];
    pdx_pages_t dp = {dst, GPAGES};
    pdx_gate_t gone = {};
    unsigned seed = 31;
    cudaStream_t s;
    uint64_t end;
    cudaError_t q;

    side_open(&pf, gpu_pf, transport, GL, 1, GNP, GBPP, "5000");
    side_open(&dc, gpu_dc, transport, GL, 1, GNP, GBPP, "5000");
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) == PDX_OK, "connect");
    pick(dst, GPAGES, 0, GNP, &seed);
    CHECK(pdx_expect(dc.e, peer, 8500, dc.layout, &dp, NULL, 1, 10000) == PDX_OK, "expect");
    for (uint32_t l = 0; l < GL; l++)
        CHECK(pdx_room_stream_wait_layer(dc.e, 8500, l, s, &gone) == PDX_OK, "wait %u", l);
    CHECK(pdx_room_stream_wait_layer(dc.e, 8500, GL, s, NULL) == PDX_ERR_RANGE, "layer %u", GL);
    usleep(20000);
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "%s: the waits hold before anything landed",
          transport);
    CHECK(*gone.word < gone.value, "the failure gate is closed while the room is fine");
    CHECK(pdx_abort(dc.e, 8500) == PDX_OK, "abort");
    end = now_ns() + 5000000000ull;
    while ((q = cudaStreamQuery(s)) == cudaErrorNotReady && now_ns() < end)
        usleep(100);
    CHECK(q == cudaSuccess, "%s: an aborted room's layer waits go on (%s)", transport,
          cudaGetErrorName(q));
    CHECK(*gone.word >= gone.value, "%s: the failure gate is open after the abort",
          transport);
    printf("%s, decode's waits for %u layers of an aborted room: released, failure gate open\n",
           transport, GL);
    release_room(dc.e, 8500);
    cudaStreamDestroy(s);
    side_close(&dc);
    side_close(&pf);
}

__global__ void set_word(volatile uint64_t *w, uint64_t v)
{
    *w = v;
}

/* A layer wait captured in a graph: the graph's launch waits until the room
 * arrived, then its kernel runs. */
static void layer_wait_in_graph(void)
{
    side_t pf, dc;
    uint32_t peer, src[GPAGES], dst[GPAGES];
    pdx_pages_t sp = {src, GPAGES}, dp = {dst, GPAGES};
    volatile uint64_t *mark;
    unsigned seed = 37;
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t x;
    pdx_status_t st;
    cudaError_t q;
    uint64_t end;

    side_open(&pf, gpu_pf, "ipc", GL, 1, GNP, GBPP, "5000");
    side_open(&dc, gpu_dc, "ipc", GL, 1, GNP, GBPP, "5000");
    CUDA_OK(cudaHostAlloc((void **)&mark, sizeof(*mark), cudaHostAllocMapped));
    *mark = 0;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) == PDX_OK, "connect");
    pick(src, GPAGES, 0, GNP, &seed);
    pick(dst, GPAGES, 0, GNP, &seed);
    CHECK(pdx_expect(dc.e, peer, 8600, dc.layout, &dp, NULL, 1, 10000) == PDX_OK, "expect");
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    st = pdx_room_stream_wait_layer(dc.e, 8600, GL - 1, s, NULL);
    set_word<<<1, 1, 0, s>>>(mark, 1);
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CHECK(st == PDX_OK, "a layer wait in a stream being captured: %s", pdx_status_str(st));
    CUDA_OK(cudaGraphInstantiate(&x, g, 0));
    CUDA_OK(cudaGraphLaunch(x, s));
    usleep(20000);
    CHECK(*mark == 0 && cudaStreamQuery(s) == cudaErrorNotReady,
          "the graph waits while the room has not arrived");
    CHECK(pdx_send(pf.e, 8600, pf.layout, &sp, NULL, NULL, PDX_SEND_LAST) == PDX_OK, "send");
    end = now_ns() + 5000000000ull;
    while ((q = cudaStreamQuery(s)) == cudaErrorNotReady && now_ns() < end)
        usleep(100);
    CHECK(q == cudaSuccess && *mark == 1, "the graph went on once the room arrived (%s)",
          cudaGetErrorName(q));
    CHECK(pdx_poll(dc.e, 8600) == PDX_ROOM_SUCCESS, "the room arrived");
    printf("a layer wait captured in a graph: held, then went on with the room\n");
    wait_done(pf.e, 8600, 5000);
    release_room(dc.e, 8600);
    release_room(pf.e, 8600);
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    cudaFreeHost((void *)mark);
    side_close(&dc);
    side_close(&pf);
}

static void test_layers(void)
{
    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof(*flag), cudaHostAllocMapped));
    CUDA_OK(cudaMalloc((void **)&gpages, 2 * GPAGES * sizeof(uint32_t)));
    CUDA_OK(cudaMalloc((void **)&gbad, sizeof(*gbad)));
    CUDA_OK(cudaStreamCreateWithFlags(&gstream, cudaStreamNonBlocking));
    layer_rooms("ipc", true);
    layer_rooms("tcp", true);
    layer_rooms("ipc", false);
    layer_waits_on_abort("ipc");
    layer_waits_on_abort("tcp");
    layer_wait_in_graph();
    cudaStreamDestroy(gstream);
    cudaFree(gbad);
    cudaFree(gpages);
    cudaFreeHost(flag);
}

/* ------------------------------------------------- bench: gate to SUCCESS */

static int cmp_u64(const void *a, const void *b);

/* Busy on the GPU for ns nanoseconds: the producer's forward pass. */
__global__ void busy(uint64_t ns)
{
    uint64_t t0, t;

    t0 = gpu_ns();
    do
        t = gpu_ns();
    while (t - t0 < ns);
}

/* Rooms of 16 pages x 4 layers (256 KiB) sent gated behind a 200 us kernel,
 * one at a time: pdx_send to decode's SUCCESS, p50 and p99. */
static void bench_gate(const char *mode, enum gating gating, double *p50_p)
{
    enum { WARM = 20, N = 300 };
    const uint64_t busy_ns = 200000;
    side_t pf, dc;
    uint32_t peer;
    uint64_t lat[N];
    unsigned seed = 7;
    int ok = 0;

    gpu_gates = mode;
    side_open(&pf, gpu_pf, "ipc", GL, 1, GNP, GBPP, "10000");
    side_open(&dc, gpu_dc, "ipc", GL, 1, GNP, GBPP, "10000");
    gpu_gates = "auto";
    CHECK(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) == PDX_OK, "connect");
    for (int r = 0; r < WARM + N; r++) {
        const uint64_t room = 70000 + (uint64_t)r;
        uint32_t src[GPAGES], dst[GPAGES];
        pdx_pages_t sp = {src, GPAGES}, dp = {dst, GPAGES};
        pdx_gate_t gate = {};
        uint64_t t0, end;
        pdx_room_state_t st;

        pick(src, GPAGES, 0, GNP, &seed);
        pick(dst, GPAGES, 0, GNP, &seed);
        CHECK(pdx_expect(dc.e, peer, room, dc.layout, &dp, NULL, 1, 10000) == PDX_OK, "expect");
        while (pdx_poll(pf.e, room) != PDX_ROOM_WAITING)
            ; /* decode's metadata is here: the latency is the gate's and the copy's */
        busy<<<1, 1, 0, gstream>>>(busy_ns);
        if (gating == GATE_STREAM) {
            CHECK(pdx_gate_arm(pf.e, gstream, &gate) == PDX_OK, "gate_arm");
        } else {
            CUDA_OK(cudaEventRecord(gev, gstream));
            gate.kind = PDX_GATE_EVENT;
            gate.event = gev;
        }
        t0 = now_ns();
        CHECK(pdx_send(pf.e, room, pf.layout, &sp, &gate, NULL, PDX_SEND_LAST) == PDX_OK, "send");
        end = t0 + 5000000000ull;
        while ((st = pdx_poll(dc.e, room)) != PDX_ROOM_SUCCESS && st != PDX_ROOM_FAILED &&
               now_ns() < end)
            ;
        if (r >= WARM)
            lat[r - WARM] = now_ns() - t0;
        ok += r >= WARM && st == PDX_ROOM_SUCCESS;
        CUDA_OK(cudaStreamSynchronize(gstream));
        wait_done(pf.e, room, 5000);
        release_room(dc.e, room);
        release_room(pf.e, room);
    }
    CHECK(ok == N, "%d/%d gated rooms SUCCESS", ok, N);
    qsort(lat, N, sizeof(lat[0]), cmp_u64);
    *p50_p = lat[N / 2] / 1e3;
    printf("  PDX_GPU_GATES=%-4s %s gates: pdx_send -> SUCCESS p50 %7.1f us, p99 %7.1f us "
           "(the kernel before the gate: %.0f us; %llu chunks waited on the GPU)\n", mode,
           gating == GATE_STREAM ? "stream" : "event ", lat[N / 2] / 1e3, lat[N * 99 / 100] / 1e3,
           busy_ns / 1e3, (unsigned long long)gates_on_gpu(pf.e));
    side_close(&dc);
    side_close(&pf);
}

static void bench_gates(void)
{
    double gpu, host;

    progress("bench gates", 0);
    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof(*flag), cudaHostAllocMapped));
    CUDA_OK(cudaStreamCreateWithFlags(&gstream, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&gev, cudaEventDisableTiming));
    printf("gated rooms of %u KiB, one at a time, behind a 200 us kernel (ipc, one GPU):\n",
           GL * GPAGES * GBPP / 1024);
    for (int g = GATE_STREAM; g <= GATE_EVENT; g++) {
        bench_gate("off", (enum gating)g, &host);
        bench_gate("auto", (enum gating)g, &gpu);
        printf("  %s gates: the GPU's wait saves %.1f us of the host's at p50 (%.2fx)\n",
               g == GATE_STREAM ? "stream" : "event", host - gpu, host / gpu);
    }
    cudaStreamDestroy(gstream);
    cudaEventDestroy(gev);
    cudaFreeHost(flag);
}

/* --------------------------------------------- bench: layer-wise sending */

/* A layer of a forward pass: one block per (page of the room, buffer of the
 * layer) writes it, then block 0 stays busy for ns: the layer's compute. */
__global__ void forward_layer(uint8_t *pool, const uint32_t *pages, uint32_t n, uint32_t bpl,
                              uint64_t buf_len, uint64_t bpp, uint32_t layer, uint64_t room,
                              uint64_t ns, uint64_t *end)
{
    const uint32_t i = blockIdx.x % n, part = blockIdx.x / n;
    uint64_t *p = (uint64_t *)(pool + (uint64_t)(layer * bpl + part) * buf_len + pages[i] * bpp);

    for (uint64_t w = threadIdx.x; w < bpp / 8; w += blockDim.x)
        p[w] = room ^ w;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        uint64_t t0, t;

        t0 = gpu_ns();
        do
            t = gpu_ns();
        while (t - t0 < ns);
        end[layer] = t;
    }
}

/* Decode's kernel for a layer, queued behind pdx_room_stream_wait_layer:
 * when it started, and the words of the layer's pages that are not the
 * forward pass's. */
__global__ void layer_landed(const uint8_t *pool, const uint32_t *pages, uint32_t n, uint32_t bpl,
                             uint64_t buf_len, uint64_t bpp, uint32_t layer, uint64_t room,
                             unsigned long long *bad, uint64_t *start)
{
    const uint32_t i = blockIdx.x % n, part = blockIdx.x / n;
    const uint64_t *p =
        (const uint64_t *)(pool + (uint64_t)(layer * bpl + part) * buf_len + pages[i] * bpp);
    unsigned long long b = 0;

    if (blockIdx.x == 0 && threadIdx.x == 0) {
        uint64_t t;

        t = gpu_ns();
        start[layer] = t;
    }
    for (uint64_t w = threadIdx.x; w < bpp / 8; w += blockDim.x)
        b += p[w] != (room ^ w);
    if (b)
        atomicAdd(bad, b);
}

/* Rooms of `pages` pages through a simulated forward pass of `layers`
 * layers of compute_us each, sent whole after it (one gate after the last
 * layer) or layer by layer (a gate after each): the exposed transfer time,
 * decode's SUCCESS minus the end of the last layer's kernel, p50 and p99. */
static void bench_layers(const char *name, const char *transport, uint32_t layers, uint32_t bpl,
                         uint64_t bpp, uint32_t pages, uint64_t compute_us, bool events,
                         bool waits)
{
    enum { WARM = 2, N = 12 };
    const uint64_t buf_len = 2ull * pages * bpp;
    side_t pf, dc;
    uint32_t peer, *dpages, src[256], dst[256];
    pdx_pages_t sp = {src, pages};
    cudaEvent_t end_ev, ev[64];
    cudaStream_t dstream;
    uint32_t *ddst;
    uint64_t *lend, *lstart, lat[12 * 64], nlat = 0;
    unsigned long long *lbad, bad = 0;
    int order_bad = 0;
    unsigned seed = 5;
    double p50[2] = {0, 0};

    progress("bench layers", 0);
    side_open(&pf, gpu_pf, transport, layers, bpl, 2 * pages, bpp, "60000");
    side_open(&dc, gpu_dc, transport, layers, bpl, 2 * pages, bpp, "60000");
    CHECK(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) == PDX_OK, "connect");
    CUDA_OK(cudaMalloc((void **)&dpages, pages * sizeof(uint32_t)));
    CUDA_OK(cudaEventCreateWithFlags(&end_ev, cudaEventDisableTiming));
    CUDA_OK(cudaStreamCreateWithFlags(&dstream, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void **)&ddst, pages * sizeof(uint32_t)));
    CUDA_OK(cudaMalloc((void **)&lend, 64 * sizeof(uint64_t)));
    CUDA_OK(cudaMalloc((void **)&lstart, 64 * sizeof(uint64_t)));
    CUDA_OK(cudaMalloc((void **)&lbad, sizeof(*lbad)));
    CUDA_OK(cudaMemset(lbad, 0, sizeof(*lbad)));
    for (uint32_t l = 0; l < layers; l++)
        CUDA_OK(cudaEventCreateWithFlags(&ev[l], cudaEventDisableTiming));
    pick(src, pages, 0, 2 * pages, &seed);
    CUDA_OK(cudaMemcpy(dpages, src, pages * sizeof(uint32_t), cudaMemcpyHostToDevice));
    for (int mode = 0; mode < 2; mode++) { /* 0: whole, 1: layer by layer */
        uint64_t exposed[N], forward[N], g0 = 0;
        int ok = 0;

        for (int r = 0; r < WARM + N; r++) {
            const uint64_t room = 90000 + (uint64_t)mode * 1000 + (uint64_t)r;
            pdx_pages_t dp = {dst, pages};
            pdx_gate_t gate = {};
            uint64_t t_start, t_end, end;
            pdx_room_state_t st;

            pick(dst, pages, 0, 2 * pages, &seed);
            CHECK(pdx_expect(dc.e, peer, room, dc.layout, &dp, NULL, 1, 30000) == PDX_OK,
                  "expect");
            if (waits && mode == 1) { /* decode reads each layer as soon as it landed */
                pdx_gate_t gone = {};

                CUDA_OK(cudaMemcpy(ddst, dst, pages * sizeof(uint32_t),
                                   cudaMemcpyHostToDevice));
                for (uint32_t l = 0; l < layers; l++) {
                    CHECK(pdx_room_stream_wait_layer(dc.e, room, l, dstream, &gone) == PDX_OK,
                          "stream_wait_layer %u", l);
                    layer_landed<<<pages * bpl, 256, 0, dstream>>>(dc.pool, ddst, pages, bpl,
                                                                    buf_len, bpp, l, room, lbad,
                                                                    lstart);
                }
            }
            end = now_ns() + 5000000000ull;
            while (pdx_poll(pf.e, room) != PDX_ROOM_WAITING && now_ns() < end)
                usleep(20);
            if (r == WARM)
                g0 = gates_on_gpu(pf.e);
            t_start = now_ns();
            for (uint32_t l = 0; l < layers; l++) {
                forward_layer<<<pages * bpl, 256, 0, gstream>>>(pf.pool, dpages, pages, bpl,
                                                                buf_len, bpp, l, room,
                                                                compute_us * 1000, lend);
                if (mode == 1 && events) {
                    CUDA_OK(cudaEventRecord(ev[l], gstream));
                    gate = (pdx_gate_t){.kind = PDX_GATE_EVENT, .event = ev[l]};
                } else if (mode == 1) {
                    CHECK(pdx_gate_arm(pf.e, gstream, &gate) == PDX_OK, "gate_arm");
                }
                if (mode == 1) {
                    CHECK(pdx_send_layers(pf.e, room, pf.layout, l, l + 1, &sp, &gate, NULL,
                                          l + 1 == layers ? PDX_SEND_LAST : 0) == PDX_OK,
                          "send layer %u", l);
                }
            }
            if (mode == 0 && events) {
                CUDA_OK(cudaEventRecord(ev[0], gstream));
                gate = (pdx_gate_t){.kind = PDX_GATE_EVENT, .event = ev[0]};
            } else if (mode == 0) {
                CHECK(pdx_gate_arm(pf.e, gstream, &gate) == PDX_OK, "gate_arm");
            }
            if (mode == 0) {
                CHECK(pdx_send(pf.e, room, pf.layout, &sp, &gate, NULL, PDX_SEND_LAST) == PDX_OK,
                      "send");
            }
            CUDA_OK(cudaEventRecord(end_ev, gstream));
            CUDA_OK(cudaEventSynchronize(end_ev));
            t_end = now_ns();
            end = t_end + 30000000000ull;
            while ((st = pdx_poll(dc.e, room)) != PDX_ROOM_SUCCESS && st != PDX_ROOM_FAILED &&
                   now_ns() < end)
                ;
            if (waits && mode == 1) {
                uint64_t e_ns[64], s_ns[64];

                CUDA_OK(cudaStreamSynchronize(dstream));
                CUDA_OK(cudaMemcpy(e_ns, lend, layers * sizeof(uint64_t),
                                   cudaMemcpyDeviceToHost));
                CUDA_OK(cudaMemcpy(s_ns, lstart, layers * sizeof(uint64_t),
                                   cudaMemcpyDeviceToHost));
                unsigned long long was = bad;
                int early = 0;

                CUDA_OK(cudaMemcpy(&bad, lbad, sizeof(bad), cudaMemcpyDeviceToHost));
                for (uint32_t l = 0; l < layers; l++) {
                    early += s_ns[l] < e_ns[l] || (l && s_ns[l] < s_ns[l - 1]);
                    if (r >= WARM && s_ns[l] >= e_ns[l])
                        lat[nlat++] = s_ns[l] - e_ns[l];
                }
                if (early || bad != was)
                    printf("  room %llu (%d of %d): %llu stale words, %d layers read early; "
                           "layer 0 read %lld ns after its kernel, layer %u %lld ns\n",
                           (unsigned long long)room, r, WARM + N, bad - was, early,
                           (long long)(s_ns[0] - e_ns[0]), layers - 1,
                           (long long)(s_ns[layers - 1] - e_ns[layers - 1]));
                order_bad += early;
            }
            if (r >= WARM) {
                exposed[r - WARM] = now_ns() - t_end;
                forward[r - WARM] = t_end - t_start;
                ok += st == PDX_ROOM_SUCCESS;
            }
            wait_done(pf.e, room, 10000);
            release_room(dc.e, room);
            release_room(pf.e, room);
        }
        CHECK(ok == N, "%s %s: %d/%d rooms SUCCESS", name, mode ? "layer-wise" : "whole", ok, N);
        qsort(exposed, N, sizeof(exposed[0]), cmp_u64);
        qsort(forward, N, sizeof(forward[0]), cmp_u64);
        p50[mode] = exposed[N / 2] / 1e3;
        printf("  %-5s %-9s %4llu us/layer, %s: exposed p50 %9.1f us, p99 %9.1f us; forward "
               "pass p50 %.1f us; %.1f of %u chunks per room waited on the GPU\n",
               transport, name, (unsigned long long)compute_us,
               mode ? "layer by layer " : "whole, after it", exposed[N / 2] / 1e3,
               exposed[N - 1] / 1e3, forward[N / 2] / 1e3,
               (double)(gates_on_gpu(pf.e) - g0) / N, mode ? layers : 1);
    }
    if (waits) {
        CHECK(bad == 0 && order_bad == 0 && nlat, "%s %s: decode's layer kernels read %llu stale "
              "words; %d started before their layer was computed or before the layer before",
              transport, name, bad, order_bad);
        qsort(lat, nlat, sizeof(lat[0]), cmp_u64);
        printf("  %-5s %-9s %4llu us/layer: decode's kernel per layer behind "
               "pdx_room_stream_wait_layer starts %.1f us (p50), %.1f us (p99) after the layer's "
               "kernel ended; %llu layers read, %llu stale words, %d out of order\n", transport,
               name, (unsigned long long)compute_us, lat[nlat / 2] / 1e3,
               lat[nlat * 99 / 100] / 1e3, (unsigned long long)nlat, bad, order_bad);
    }
    printf("  %-5s %-9s %4llu us/layer: layer-wise exposes %.3f of whole (%.1f us, one layer's "
           "share of the whole transfer %.1f us: %.2fx it)\n", transport, name,
           (unsigned long long)compute_us, p50[1] / p50[0], p50[1], p50[0] / layers,
           p50[1] / (p50[0] / layers));
    cudaEventDestroy(end_ev);
    cudaStreamDestroy(dstream);
    cudaFree(ddst);
    cudaFree(lend);
    cudaFree(lstart);
    cudaFree(lbad);
    for (uint32_t l = 0; l < layers; l++)
        cudaEventDestroy(ev[l]);
    cudaFree(dpages);
    side_close(&dc);
    side_close(&pf);
}

static void bench_layerwise(const char *only, bool events, bool waits)
{
    const char *tps[2] = {"ipc", "tcp"};

    CUDA_OK(cudaStreamCreateWithFlags(&gstream, cudaStreamNonBlocking));
    printf("exposed transfer time: decode SUCCESS - end of the last layer's kernel (rooms of "
           "4096 tokens, one at a time; %s gates):\n", events ? "event" : "stream");
    for (int t = 0; t < 2; t++) {
        const uint64_t slow = t == 0 ? 200 : 2000, fast = t == 0 ? 2 : 100;

        if (only && strcmp(only, tps[t]) != 0)
            continue;
        bench_layers("DeepSeek", tps[t], 61, 1, 64 * 576, 64, slow, events, waits);
        bench_layers("DeepSeek", tps[t], 61, 1, 64 * 576, 64, fast, events, waits);
        bench_layers("Llama-32L", tps[t], 32, 2, 16 * 256, 256, slow, events, waits);
        bench_layers("Llama-32L", tps[t], 32, 2, 16 * 256, 256, fast, events, waits);
    }
    cudaStreamDestroy(gstream);
}

/* ------------------------------------------------------ 4. two processes */

enum { XL = 8, XNP = 512, XBPP = 36864, XPAGES = 64 };

/* Room r's pages: the same on both sides (from r). */
static void room_pages(uint64_t r, uint32_t *src, uint32_t *dst, uint32_t *n)
{
    unsigned seed = (unsigned)(r * 2654435761u);

    *n = 1 + (uint32_t)rand_r(&seed) % XPAGES;
    pick(src, *n, 0, XNP, &seed);
    pick(dst, *n, (uint32_t)(r % 4) * (XNP / 4), XNP / 4, &seed);
}

/* The child: a decode engine that connects to addr and takes rooms
 * [first, first + count), checking each. Exit 0 when every one arrived
 * whole. */
static int decode_child(const char *addr, uint64_t first, uint32_t count, uint64_t seed)
{
    side_t dc;
    uint32_t peer, src[XPAGES], dst[XPAGES], n;
    uint64_t bad = 0;
    uint32_t ok = 0;

    pick_gpus(true);
    side_open(&dc, gpu_dc, "ipc", XL, 1, XNP, XBPP, "10000");
    if (pdx_peer_connect(dc.e, addr, 5000, &peer) != PDX_OK) {
        printf("child: cannot connect to %s\n", addr);
        return 1;
    }
    for (uint64_t r = first; r < first + count; r += 4) {
        for (uint64_t k = r; k < r + 4 && k < first + count; k++) {
            pdx_pages_t d;

            room_pages(k, src, dst, &n);
            d = (pdx_pages_t){dst, n};
            if (pdx_expect(dc.e, peer, k, dc.layout, &d, NULL, 1, 10000) != PDX_OK)
                printf("child: expect %llu failed\n", (unsigned long long)k);
        }
        for (uint64_t k = r; k < r + 4 && k < first + count; k++) {
            room_pages(k, src, dst, &n);
            if (wait_done(dc.e, k, 10000) == PDX_ROOM_SUCCESS) {
                ok++;
                bad += bad_bytes(&dc, src, dst, n, seed);
            }
            release_room(dc.e, k);
        }
    }
    printf("child %d: %u/%u rooms SUCCESS, %llu bad bytes\n", (int)getpid(), ok, count,
           (unsigned long long)bad);
    side_close(&dc);
    return ok == count && bad == 0 ? 0 : 1;
}

static pid_t spawn_child(const char *addr, uint64_t first, uint32_t count, uint64_t seed)
{
    char a[32], b[32], c[32];
    char *argv[] = {(char *)"test_gpu_ipc_engine", (char *)"--decode-child", (char *)addr, a, b,
                    c, NULL};
    pid_t pid;

    snprintf(a, sizeof(a), "%llu", (unsigned long long)first);
    snprintf(b, sizeof(b), "%u", count);
    snprintf(c, sizeof(c), "%llu", (unsigned long long)seed);
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0) {
        printf("FATAL: posix_spawn\n");
        exit(2);
    }
    return pid;
}

/* Send rooms [first, first + count) four at a time; the rooms' end states.
 * With kill_pid, the third group gets its first chunks only, and that child
 * is killed once their copies go (decode's metadata is here): those rooms
 * must fail for the peer's death, not at their deadline. No group after it
 * is sent (nobody would expect it). */
static void send_rooms(side_t *pf, uint64_t first, uint32_t count, int *ok_p, int *failed_p,
                       int *other_p, pid_t kill_pid, uint64_t *kill_ns_p)
{
    uint32_t src[XPAGES], dst[XPAGES], n;
    bool killed = false;

    *ok_p = *failed_p = *other_p = 0;
    for (uint64_t r = first; r < first + count; r += 4) {
        const bool kill_now = kill_pid > 0 && r >= first + 8;

        for (uint64_t k = r; k < r + 4 && k < first + count; k++) {
            room_pages(k, src, dst, &n);
            if (kill_now) { /* the first chunk only: the rooms wait for the rest */
                pdx_pages_t s = {src, (n + 1) / 2};

                pdx_send(pf->e, k, pf->layout, &s, NULL, NULL, 0);
            } else {
                send_room(pf, k, src, n, 2, NULL);
            }
        }
        if (kill_now) {
            /* once decode's metadata of the group is here (its copies go) */
            uint64_t end = now_ns() + 5000000000ull;

            for (uint64_t k = r; k < r + 4 && now_ns() < end; k++)
                while (pdx_poll(pf->e, k) == PDX_ROOM_BOOTSTRAPPING && now_ns() < end)
                    usleep(20);
            kill(kill_pid, SIGKILL);
            *kill_ns_p = now_ns();
            kill_pid = 0;
            killed = true;
        }
        for (uint64_t k = r; k < r + 4 && k < first + count; k++) {
            pdx_room_state_t s = wait_done(pf->e, k, 20000);

            *ok_p += s == PDX_ROOM_SUCCESS;
            *failed_p += s == PDX_ROOM_FAILED;
            *other_p += s != PDX_ROOM_SUCCESS && s != PDX_ROOM_FAILED;
            if (s == PDX_ROOM_FAILED) {
                char err[256] = "";

                pdx_room_error(pf->e, k, err, sizeof(err));
                if (*failed_p == 1)
                    printf("a room of the killed peer, %.1f ms after the kill: \"%s\"\n",
                           (now_ns() - *kill_ns_p) / 1e6, err);
                CHECK(strstr(err, "timed out") == NULL, "room %llu failed by its deadline, "
                      "not by the peer's death: %s", (unsigned long long)k, err);
            }
            release_room(pf->e, k);
        }
        if (killed)
            break;
    }
}

static int wait_child(pid_t pid)
{
    int status = 0;

    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_two_processes(void)
{
    const uint64_t seed = 0xfeed;
    side_t pf;
    pdx_hip_ipc_stats_t is;
    pdx_stats_t st;
    uint64_t kill_ns = 0;
    int ok, bad, other, rc;
    pid_t pid;

    progress("two processes", 0);
    side_open(&pf, gpu_pf, "ipc", XL, 1, XNP, XBPP, "10000");
    fill(&pf, seed);

    /* a child takes 64 rooms and checks every byte */
    pid = spawn_child(pdx_engine_address(pf.e), 1, 64, seed);
    send_rooms(&pf, 1, 64, &ok, &bad, &other, 0, &kill_ns);
    rc = wait_child(pid);
    pdx_engine_stats(pf.e, &st);
    CHECK(ok == 64 && rc == 0, "two processes: %d/64 rooms SUCCESS at prefill, child exit %d",
          ok, rc);
    CHECK(st.bytes_direct == st.bytes_sent && st.bytes_sent > 0,
          "two processes: %llu of %llu bytes by GPU copies", (unsigned long long)st.bytes_direct,
          (unsigned long long)st.bytes_sent);
    printf("two processes: %d/64 rooms SUCCESS, child exit %d, %llu of %llu bytes by GPU "
           "copies\n", ok, rc, (unsigned long long)st.bytes_direct,
           (unsigned long long)st.bytes_sent);

    /* a child killed while copies are in flight */
    progress("killed peer", 0);
    pid = spawn_child(pdx_engine_address(pf.e), 1001, 64, seed);
    send_rooms(&pf, 1001, 64, &ok, &bad, &other, pid, &kill_ns);
    rc = wait_child(pid);
    CHECK(rc == 128 + SIGKILL, "the child was killed (exit %d)", rc);
    CHECK(ok == 8 && bad == 4 && other == 0, "killed peer: %d SUCCESS, %d FAILED, %d neither",
          ok, bad, other);
    printf("killed peer: %d rooms SUCCESS, %d FAILED, %d neither\n", ok, bad, other);
    /* once the peer is gone, what was opened for it is closed */
    for (int i = 0; i < 100; i++) {
        pdx_hip_ipc_stats(&is);
        if (is.references == 0)
            break;
        usleep(50000);
    }
    CHECK(is.references == 0, "IPC opens of the dead peer still held: %u", is.references);
    printf("after the peer died: %u IPC references held, %llu opened, %llu closed\n",
           is.references, (unsigned long long)is.runtime_opens,
           (unsigned long long)is.runtime_closes);

    /* the same prefill engine serves the next one */
    progress("after the kill", 0);
    pid = spawn_child(pdx_engine_address(pf.e), 2001, 32, seed);
    send_rooms(&pf, 2001, 32, &ok, &bad, &other, 0, &kill_ns);
    rc = wait_child(pid);
    CHECK(ok == 32 && rc == 0, "after a killed peer: %d/32 rooms, child exit %d", ok, rc);
    printf("after the killed peer, a new one: %d/32 rooms SUCCESS, child exit %d\n", ok, rc);
    side_close(&pf);
}

/* ------------------------------------------------------------------ bench */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void bench(const char *name, uint32_t layers, uint32_t bpl, uint64_t bpp, uint32_t pages,
                  uint32_t npages, uint32_t flight)
{
    enum { ROOMS = 256, LAT = 40 };
    side_t pf, dc;
    uint32_t peer;
    uint32_t *src = (uint32_t *)malloc(pages * sizeof(uint32_t));
    uint32_t *dst = (uint32_t *)malloc((size_t)flight * pages * sizeof(uint32_t));
    const uint64_t room_bytes = (uint64_t)layers * bpl * pages * bpp;
    uint64_t lat[LAT], t0, ns;
    unsigned rs = 7;
    cudaEvent_t e0, e1;
    cudaStream_t s;
    float ms = 0;
    double contiguous, naive, engine;
    int ok = 0;
    uint8_t *a, *b;

    progress(name, 0);
    side_open(&pf, gpu_pf, "ipc", layers, bpl, npages, bpp, "60000");
    side_open(&dc, gpu_dc, "ipc", layers, bpl, npages, bpp, "60000");
    fill(&pf, 1);
    CHECK(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) == PDX_OK, "connect");
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* baselines: one contiguous copy of the room's bytes; one copy per page */
    a = pf.pool;
    b = dc.pool;
    copy_pf_to_dc(b, a, room_bytes, s);
    CUDA_OK(cudaEventRecord(e0, s));
    for (int i = 0; i < 10; i++)
        copy_pf_to_dc(b, a, room_bytes, s);
    CUDA_OK(cudaEventRecord(e1, s));
    CUDA_OK(cudaEventSynchronize(e1));
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    contiguous = 10.0 * room_bytes / (ms / 1e3) / 1e9;
    pick(src, pages, 0, npages, &rs);
    pick(dst, pages, 0, npages, &rs);
    t0 = now_ns();
    for (uint32_t l = 0; l < layers * bpl; l++)
        for (uint32_t i = 0; i < pages; i++)
            copy_pf_to_dc(b + ((uint64_t)l * npages + dst[i]) * bpp,
                          a + ((uint64_t)l * npages + src[i]) * bpp, bpp, s);
    CUDA_OK(cudaStreamSynchronize(s));
    naive = (double)room_bytes / ((now_ns() - t0) / 1e9) / 1e9;

    /* warm-up, not timed: the first launches and registrations */
    for (uint64_t room = 90; room < 94; room++) {
        pdx_pages_t d = {dst, pages};

        pdx_expect(dc.e, peer, room, dc.layout, &d, NULL, 1, 60000);
        send_room(&pf, room, src, pages, 1, NULL);
        ok += wait_done(dc.e, room, 60000) == PDX_ROOM_SUCCESS;
        wait_done(pf.e, room, 60000);
        release_room(dc.e, room);
        release_room(pf.e, room);
    }

    /* throughput: a window of `flight` rooms, each slot with its own
     * destination pages; a room that ends is released and the slot's next
     * room starts at once (expected, then sent) */
    {
        uint64_t *slot = (uint64_t *)calloc(flight, sizeof(uint64_t));
        uint64_t next = 100;
        uint32_t done = 0;

        t0 = now_ns();
        for (;;) {
            bool idle = true;

            for (uint32_t k = 0; k < flight; k++) {
                pdx_room_state_t d = slot[k] ? pdx_poll(dc.e, slot[k]) : PDX_ROOM_NONE;
                pdx_room_state_t p = slot[k] ? pdx_poll(pf.e, slot[k]) : PDX_ROOM_NONE;

                if (slot[k] && (d == PDX_ROOM_SUCCESS || d == PDX_ROOM_FAILED) &&
                    (p == PDX_ROOM_SUCCESS || p == PDX_ROOM_FAILED)) {
                    ok += d == PDX_ROOM_SUCCESS;
                    release_room(dc.e, slot[k]);
                    release_room(pf.e, slot[k]);
                    slot[k] = 0;
                    done++;
                }
                if (!slot[k] && next < 100 + ROOMS) {
                    pdx_pages_t dd = {dst + k * pages, pages};
                    pdx_pages_t ss = {src, pages};

                    pick(dst + k * pages, pages, k * (npages / flight), npages / flight, &rs);
                    pick(src, pages, 0, npages, &rs);
                    slot[k] = next++;
                    pdx_expect(dc.e, peer, slot[k], dc.layout, &dd, NULL, 1, 60000);
                    while (pdx_send(pf.e, slot[k], pf.layout, &ss, NULL, NULL, PDX_SEND_LAST) ==
                           PDX_ERR_AGAIN)
                        ;
                }
                idle &= !slot[k];
            }
            if (idle || now_ns() - t0 > 60000000000ull)
                break;
        }
        ns = now_ns() - t0;
        CHECK(done == ROOMS, "%s: %u of %d rooms ended", name, done, ROOMS);
        free(slot);
    }
    engine = (double)ROOMS * room_bytes / (ns / 1e9) / 1e9;

    /* latency: one room at a time, pdx_send to decode's SUCCESS */
    for (uint32_t r = 0; r < LAT; r++) {
        pdx_pages_t d = {dst, pages};
        uint64_t room = 1000 + r;

        pick(dst, pages, 0, npages, &rs);
        pick(src, pages, 0, npages, &rs);
        pdx_expect(dc.e, peer, room, dc.layout, &d, NULL, 1, 60000);
        usleep(1000); /* the ROOM reached prefill */
        t0 = now_ns();
        send_room(&pf, room, src, pages, 1, NULL);
        while (pdx_poll(dc.e, room) == PDX_ROOM_WAITING ||
               pdx_poll(dc.e, room) == PDX_ROOM_TRANSFERRING)
            ;
        lat[r] = now_ns() - t0;
        ok += pdx_poll(dc.e, room) == PDX_ROOM_SUCCESS;
        wait_done(pf.e, room, 60000);
        release_room(dc.e, room);
        release_room(pf.e, room);
    }
    qsort(lat, LAT, sizeof(lat[0]), cmp_u64);
    CHECK(ok == 4 + ROOMS + LAT, "%s: %d/%d rooms", name, ok, 4 + ROOMS + LAT);
    printf("%s: %u pages x %u buffers x %llu B = %.1f MB per room (%u runs)\n", name, pages,
           layers * bpl, (unsigned long long)bpp, room_bytes / 1e6, pages * layers * bpl);
    printf("  one contiguous copy %.0f GB/s; one copy per page %.1f GB/s\n", contiguous, naive);
    printf("  ipc engine %.0f GB/s (%d rooms, %u kept in flight): %.2f of contiguous, %.0fx "
           "per-page\n",
           engine, ROOMS, flight, engine / contiguous, engine / naive);
    printf("  latency per room (pdx_send -> decode SUCCESS): p50 %.0f us, p99 %.0f us "
           "(contiguous copy of the room alone: %.0f us)\n", lat[LAT / 2] / 1e3,
           lat[LAT * 99 / 100] / 1e3, room_bytes / contiguous / 1e3);
    cudaStreamDestroy(s);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    side_close(&dc);
    side_close(&pf);
    free(src);
    free(dst);
}

int main(int argc, char **argv)
{
    cu_check_init();
    /* Prefill and decode share this process: decode's stream waiting for a
     * layer must not share a hardware queue with the forward pass that
     * computes it (then it would wait for itself), and the kernel behind
     * the wait must not be loaded lazily at its first launch (the load held
     * up the forward pass until the room's deadline). Deployments run them
     * in processes of their own. */
    if (argc == 4 && strcmp(argv[3], "waits") == 0) {
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
        setenv("CUDA_MODULE_LOADING", "EAGER", 0);
        setenv("GPU_MAX_HW_QUEUES", "16", 0); /* amd's */
    }
    if (argc == 6 && strcmp(argv[1], "--decode-child") == 0)
        return decode_child(argv[2], strtoull(argv[3], NULL, 10),
                            (uint32_t)strtoul(argv[4], NULL, 10), strtoull(argv[5], NULL, 10));
    progress("setup", 0);
    pick_gpus(false);
    CHECK(gpu_clock_ok(), "the device clock of the benches counts nanoseconds");
    if (argc == 2 && strcmp(argv[1], "--gates") == 0) {
        test_gates("auto");
        test_gates("off");
    } else if (argc >= 2 && argc <= 4 && strcmp(argv[1], "--bench-layers") == 0) {
        /* [ipc|tcp|all] [events|waits]: that transport only; event gates
         * instead of stream gates; decode's kernels waiting per layer */
        const char *only = argc >= 3 && strcmp(argv[2], "all") != 0 ? argv[2] : NULL;

        bench_layerwise(only, argc == 4 && strcmp(argv[3], "events") == 0,
                        argc == 4 && strcmp(argv[3], "waits") == 0);
    } else if (argc == 2 && strcmp(argv[1], "--bench-gates") == 0) {
        bench_gates();
    } else if (argc == 2 && strcmp(argv[1], "--bench") == 0) {
        for (uint32_t f = 2; f <= 32; f *= 4) {
            bench("DeepSeek-R1 (61 layers x 576 B/token, page 64)", 61, 1, 64 * 576, 64,
                  64 * 32, f);
            bench("Llama-3-70B TP8 (80 layers, K and V, 256 B/token, page 16)", 80, 2, 16 * 256,
                  256, 256 * 32, f);
        }
    } else {
        test_page_maps("auto", 1, 96, 10000);
        test_page_maps("ipc", 16, 96, 20000);
        test_page_maps("ipc", 64, 96, 30000);
        test_xfer();
        test_gates("auto");
        test_gates("off");
        test_layers();
        test_two_processes();
    }
    alarm(0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
