/*
 * The engine's gates with real kernels (nvidia platform): two engines in
 * one process over tcp on loopback, prefill's KV pool in pinned host memory
 * that kernels write through its device mapping (the tcp transport reads
 * host memory; staging of device memory is not part of this program).
 *
 *   1. stale pages: each room's producer kernel spins on a host-mapped flag,
 *      then writes the final pattern of every page of the chunk; pdx_send is
 *      called before the flag is released, with a stream gate armed after
 *      the kernel (or an event recorded after it); decode must see only
 *      final patterns. A control run without gates must see stale bytes
 *      (the program can fail).
 *   4. gate errors: a gate that never opens fails its room at the deadline
 *      while rooms of other streams complete; a gate on a destroyed event
 *      fails only its room, with the runtime's error name.
 *   5. gate latency: flag release -> first WRITE posted (prefill's
 *      writes_posted moves), median and p99 over many rooms whose gates
 *      open steadily (the shard learns when) and at random; process CPU
 *      while one gate is pending; kernel launch rate with and without
 *      arming a gate per 64 launches. `--latency` runs only this part.
 *
 * Output ends with "N passed, N failed"; exit status 1 on any failure.
 */
#include "gpu_rt.h"

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "pdx/pdx.h"

#include "cu_check.h"

/* hip/: the event-query fault the gate error test injects */
extern "C" void pdx_hip_fault_event_set(void *event);

enum { LAYERS = 4, NPAGES = 256, BPP = 4096, PAGES = 32 };

__host__ __device__ static uint64_t pattern(uint64_t room, uint32_t layer, uint32_t pos, uint64_t w)
{
    uint64_t z = room * 0x9e3779b97f4a7c15ull ^ (uint64_t)layer << 48 ^ (uint64_t)pos << 24 ^ w;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One block per (layer, page of the chunk): wait for the flag, write the page. */
__global__ void produce(volatile uint64_t *flag, uint64_t *pool, const uint32_t *pages,
                        uint32_t n, uint64_t room)
{
    const uint32_t layer = blockIdx.x / n, i = blockIdx.x % n;
    uint64_t *page = pool + ((uint64_t)layer * NPAGES + pages[i]) * (BPP / 8);

    if (threadIdx.x == 0)
        while (*flag == 0)
            ;
    __syncthreads();
    for (uint32_t w = threadIdx.x; w < BPP / 8; w += blockDim.x)
        page[w] = pattern(room, layer, i, w);
    __threadfence_system();
}

__global__ void tiny(uint64_t *x)
{
    if (threadIdx.x == 0)
        x[0]++;
}

typedef struct side {
    pdx_engine_t *e;
    uint64_t     *pool;
    uint32_t      mem, layout;
    bool          pinned;
} side_t;

static void side_open(side_t *s, bool pinned, const char *timeout_ms)
{
    pdx_config_t cfg;
    pdx_buffer_desc_t bufs[LAYERS];
    pdx_group_desc_t group = {};
    pdx_layout_desc_t desc = {};
    size_t len = (size_t)LAYERS * NPAGES * BPP;

    memset(s, 0, sizeof(*s));
    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp");
    pdx_config_set(&cfg, "PDX_SHARDS", "2");
    pdx_config_set(&cfg, "PDX_GPU", "0");
    pdx_config_set(&cfg, "PDX_TRANSFER_TIMEOUT_MS", timeout_ms);
    if (pdx_engine_create(&cfg, &s->e) != PDX_OK) {
        printf("FATAL: pdx_engine_create\n");
        exit(2);
    }
    s->pinned = pinned;
    if (pinned)
        CUDA_OK(cudaHostAlloc((void **)&s->pool, len, cudaHostAllocMapped | cudaHostAllocPortable));
    else
        s->pool = (uint64_t *)malloc(len);
    memset(s->pool, 0xee, len);
    if (pinned) {
        /* One region per layer inside one pinned allocation: they share one
         * registration (by the allocation's identity), and WRs address it at
         * each region's offset. */
        pdx_stats_t st;
        uint32_t mems[LAYERS];

        for (int l = 0; l < LAYERS; l++) {
            CHECK(pdx_mem_register(s->e, (uint8_t *)s->pool + (size_t)l * NPAGES * BPP,
                                   (size_t)NPAGES * BPP, &mems[l]) == PDX_OK, "register layer %d", l);
            bufs[l] = (pdx_buffer_desc_t){.mem = mems[l], .reserved0 = 0, .offset = 0,
                                          .bytes_per_page = BPP};
        }
        pdx_engine_stats(s->e, &st);
        CHECK(st.registrations == 1, "%d layer regions of one pinned allocation: %llu "
              "registrations", LAYERS, (unsigned long long)st.registrations);
        printf("%d layer regions of one pinned allocation: %llu registration(s)\n", LAYERS,
               (unsigned long long)st.registrations);
        s->mem = mems[0];
    } else {
        CHECK(pdx_mem_register(s->e, s->pool, len, &s->mem) == PDX_OK, "register the pool");
        for (int l = 0; l < LAYERS; l++)
            bufs[l] = (pdx_buffer_desc_t){.mem = s->mem, .reserved0 = 0,
                                          .offset = (uint64_t)l * NPAGES * BPP,
                                          .bytes_per_page = BPP};
    }
    group.buffers_per_layer = 1;
    group.nbuffers = LAYERS;
    group.npages = NPAGES;
    group.buffers = bufs;
    desc.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS;
    desc.ngroups = 1;
    desc.layer_end = LAYERS;
    desc.groups = &group;
    CHECK(pdx_layout_create(s->e, &desc, &s->layout) == PDX_OK, "layout");
}

static void side_close(side_t *s)
{
    pdx_engine_destroy(s->e);
    if (s->pinned)
        cudaFreeHost(s->pool);
    else
        free(s->pool);
}

/* Distinct random pages. */
static void pick(uint32_t *out, uint32_t n, unsigned *seed)
{
    uint8_t used[NPAGES] = {0};

    for (uint32_t i = 0; i < n; i++) {
        uint32_t p;

        do
            p = (uint32_t)rand_r(seed) % NPAGES;
        while (used[p]);
        used[p] = 1;
        out[i] = p;
    }
}

static uint64_t bad_bytes(const side_t *d, uint64_t room, const uint32_t *dst, uint32_t n)
{
    uint64_t bad = 0;

    for (uint32_t l = 0; l < LAYERS; l++)
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t *w = d->pool + ((uint64_t)l * NPAGES + dst[i]) * (BPP / 8);

            for (uint32_t k = 0; k < BPP / 8; k++)
                bad += w[k] != pattern(room, l, i, k);
        }
    return bad * 8;
}

enum gating { GATE_STREAM, GATE_EVENT, GATE_OFF };

/*
 * Rooms [first, first + n): each producer kernel waits for its flag; the
 * chunk is sent gated (or not) before the flag is released 2 ms later.
 * Returns the stale bytes decode saw over all rooms.
 */
/* Made once: cudaFree and cudaFreeHost wait for the whole device, which a
 * kernel spinning on a flag never released would hold forever. */
static uint64_t *stale_flag;
static uint32_t *stale_pages;
static cudaStream_t stale_stream;
static cudaEvent_t stale_ev;

static uint64_t stale_rooms(side_t *pf, side_t *dc, uint32_t peer, uint64_t first, int n,
                            enum gating gating, int *ok_p)
{
    uint64_t *flag = stale_flag, stale = 0;
    uint32_t *dpages = stale_pages;
    cudaStream_t stream = stale_stream;
    cudaEvent_t ev = stale_ev;
    unsigned seed = (unsigned)first;
    int ok = 0;

    for (int r = 0; r < n; r++) {
        uint64_t room = first + (uint64_t)r;
        uint32_t src[PAGES], dst[PAGES];

        progress("stale pages", room);
        pdx_pages_t s = {src, PAGES}, d = {dst, PAGES};
        pdx_gate_t gate = {};

        pick(src, PAGES, &seed);
        pick(dst, PAGES, &seed);
        *(volatile uint64_t *)flag = 0;
        CUDA_OK(cudaMemcpyAsync(dpages, src, sizeof(src), cudaMemcpyHostToDevice, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CHECK(pdx_expect(dc->e, peer, room, dc->layout, &d, NULL, 1, 10000) == PDX_OK, "expect");
        produce<<<LAYERS * PAGES, 128, 0, stream>>>(flag, pf->pool, dpages, PAGES, room);
        if (gating == GATE_STREAM) {
            CHECK(pdx_gate_arm(pf->e, stream, &gate) == PDX_OK, "gate_arm");
        } else if (gating == GATE_EVENT) {
            CUDA_OK(cudaEventRecord(ev, stream));
            gate.kind = PDX_GATE_EVENT;
            gate.event = ev;
        }
        CHECK(pdx_send(pf->e, room, pf->layout, &s, gating == GATE_OFF ? NULL : &gate, NULL,
                       PDX_SEND_LAST) == PDX_OK, "send");
        usleep(2000);
        if (gating != GATE_OFF)
            CHECK(pdx_poll(dc->e, room) == PDX_ROOM_WAITING, "room %llu moved before its gate "
                  "opened (state %d)", (unsigned long long)room, pdx_poll(dc->e, room));
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        CUDA_OK(cudaStreamSynchronize(stream));
        if (wait_done(dc->e, room, 10000) == PDX_ROOM_SUCCESS) {
            ok++;
            stale += bad_bytes(dc, room, dst, PAGES);
        }
        wait_done(pf->e, room, 10000);
        release_room(dc->e, room);
        release_room(pf->e, room);
    }
    *ok_p = ok;
    return stale;
}

static void test_stale_pages(side_t *pf, side_t *dc, uint32_t peer)
{
    int ok;
    uint64_t stale;

    stale = stale_rooms(pf, dc, peer, 1000, 64, GATE_STREAM, &ok);
    CHECK(ok == 64 && stale == 0, "stream gates: %d/64 rooms, %llu stale bytes", ok,
          (unsigned long long)stale);
    printf("stale pages, stream gates: %d/64 rooms SUCCESS, %llu stale bytes\n", ok,
           (unsigned long long)stale);
    stale = stale_rooms(pf, dc, peer, 2000, 64, GATE_EVENT, &ok);
    CHECK(ok == 64 && stale == 0, "event gates: %d/64 rooms, %llu stale bytes", ok,
          (unsigned long long)stale);
    printf("stale pages, event gates: %d/64 rooms SUCCESS, %llu stale bytes\n", ok,
           (unsigned long long)stale);
    stale = stale_rooms(pf, dc, peer, 3000, 16, GATE_OFF, &ok);
    CHECK(stale > 0, "control without gates saw no stale byte: the test could not fail");
    printf("stale pages, control without gates: %d/16 rooms SUCCESS, %llu stale bytes\n", ok,
           (unsigned long long)stale);
}

static void test_gate_errors(side_t *pf, side_t *dc, uint32_t peer)
{
    uint64_t *flag;
    uint32_t *dpages, pages[4] = {1, 2, 3, 4};
    pdx_pages_t l = {pages, 4};
    cudaStream_t stuck, other;
    cudaEvent_t dead;
    pdx_gate_t gate = {}, bad = {};
    char err[256] = "";

    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof(*flag), cudaHostAllocMapped));
    *(volatile uint64_t *)flag = 0;
    CUDA_OK(cudaMalloc((void **)&dpages, sizeof(pages)));
    CUDA_OK(cudaMemcpy(dpages, pages, sizeof(pages), cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamCreateWithFlags(&stuck, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));

    progress("gate errors", 5000);
    /* room 5000: its producer never finishes (the flag stays 0) */
    CHECK(pdx_expect(dc->e, peer, 5000, dc->layout, &l, NULL, 1, 10000) == PDX_OK, "expect");
    produce<<<LAYERS * 4, 128, 0, stuck>>>(flag, pf->pool, dpages, 4, 5000);
    CHECK(pdx_gate_arm(pf->e, stuck, &gate) == PDX_OK, "gate_arm");
    CHECK(pdx_send(pf->e, 5000, pf->layout, &l, &gate, NULL, PDX_SEND_LAST) == PDX_OK, "send");

    /* room 5001: a gate whose event query fails (an injected invalid handle) */
    CUDA_OK(cudaEventCreateWithFlags(&dead, cudaEventDisableTiming));
    CUDA_OK(cudaEventRecord(dead, other));
    pdx_hip_fault_event_set(dead);
    bad.kind = PDX_GATE_EVENT;
    bad.event = dead;
    CHECK(pdx_expect(dc->e, peer, 5001, dc->layout, &l, NULL, 1, 10000) == PDX_OK, "expect");
    CHECK(pdx_send(pf->e, 5001, pf->layout, &l, &bad, NULL, PDX_SEND_LAST) == PDX_OK, "send");
    CHECK(wait_done(pf->e, 5001, 5000) == PDX_ROOM_FAILED, "the bad event's room failed");
    pdx_hip_fault_event_set(NULL);
    pdx_room_error(pf->e, 5001, err, sizeof(err));
    printf("injected event gate error: \"%s\"\n", err);
    CHECK(strstr(err, "cudaErrorInvalidResourceHandle") != NULL,
          "the error names the runtime's error: %s", err);
    CUDA_OK(cudaStreamSynchronize(other));
    CUDA_OK(cudaEventDestroy(dead));

    /* rooms 5002..5009 on another stream complete meanwhile */
    {
        int ok;
        uint64_t stale = stale_rooms(pf, dc, peer, 5002, 8, GATE_STREAM, &ok);

        CHECK(ok == 8 && stale == 0, "other rooms: %d/8, %llu stale", ok,
              (unsigned long long)stale);
    }
    progress("gate errors: the stuck room", 5000);
    CHECK(pdx_poll(pf->e, 5000) == PDX_ROOM_TRANSFERRING || pdx_poll(pf->e, 5000) ==
          PDX_ROOM_WAITING, "the stuck room still waits (state %d)", pdx_poll(pf->e, 5000));
    CHECK(wait_done(pf->e, 5000, 8000) == PDX_ROOM_FAILED, "the stuck room failed at its deadline");
    pdx_room_error(pf->e, 5000, err, sizeof(err));
    printf("gate that never opens: \"%s\"\n", err);
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE); /* let the kernel end */
    CUDA_OK(cudaStreamSynchronize(stuck));
    for (uint64_t r = 5000; r < 5002; r++) {
        wait_done(dc->e, r, 10000);
        release_room(dc->e, r);
        release_room(pf->e, r);
    }
    cudaStreamDestroy(stuck);
    cudaStreamDestroy(other);
    cudaFree(dpages);
    cudaFreeHost(flag);
}

/*
 * pdx_room_stream_wait: a decode stream waits for the room; an event
 * recorded after the wait stays pending while prefill's gate holds the
 * chunk, and completes once the room is SUCCESS. A room that fails lets its
 * stream go on too.
 */
static void test_stream_wait(side_t *pf, side_t *dc, uint32_t peer)
{
    uint32_t pages[2] = {11, 12};
    pdx_pages_t l = {pages, 2};
    cudaStream_t ds;
    cudaEvent_t after;
    pdx_gate_t gate = {};
    uint64_t t0;

    progress("stream wait", 40000);
    CUDA_OK(cudaStreamCreateWithFlags(&ds, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
    *(volatile uint64_t *)stale_flag = 0;
    CHECK(pdx_expect(dc->e, peer, 40000, dc->layout, &l, NULL, 1, 10000) == PDX_OK, "expect");
    CHECK(pdx_room_stream_wait(dc->e, 40000, ds) == PDX_OK, "stream wait");
    CHECK(pdx_room_stream_wait(dc->e, 40000, ds) == PDX_ERR_EXISTS, "a second wait");
    CUDA_OK(cudaEventRecord(after, ds));
    CUDA_OK(cudaMemcpyAsync(stale_pages, pages, sizeof(pages), cudaMemcpyHostToDevice,
                            stale_stream));
    produce<<<LAYERS * 2, 128, 0, stale_stream>>>(stale_flag, pf->pool, stale_pages, 2, 40000);
    CHECK(pdx_gate_arm(pf->e, stale_stream, &gate) == PDX_OK, "gate_arm");
    CHECK(pdx_send(pf->e, 40000, pf->layout, &l, &gate, NULL, PDX_SEND_LAST) == PDX_OK, "send");
    usleep(20000);
    CHECK(cudaEventQuery(after) == cudaErrorNotReady, "the decode stream went on before the "
          "room ended (room state %d)", pdx_poll(dc->e, 40000));
    __atomic_store_n(stale_flag, 1, __ATOMIC_RELEASE);
    CHECK(wait_done(dc->e, 40000, 10000) == PDX_ROOM_SUCCESS, "the room");
    t0 = now_ns();
    while (cudaEventQuery(after) == cudaErrorNotReady && now_ns() - t0 < 2000000000ull)
        ;
    CHECK(cudaEventQuery(after) == cudaSuccess, "the decode stream never went on");
    printf("stream wait: the decode stream went on %.1f us after pdx_poll saw SUCCESS\n",
           (now_ns() - t0) / 1e3);
    wait_done(pf->e, 40000, 10000);
    release_room(dc->e, 40000);
    release_room(pf->e, 40000);

    /* a room that fails: its stream goes on as well */
    CHECK(pdx_expect(dc->e, peer, 40001, dc->layout, &l, NULL, 1, 10000) == PDX_OK, "expect");
    CHECK(pdx_room_stream_wait(dc->e, 40001, ds) == PDX_OK, "stream wait");
    CUDA_OK(cudaEventRecord(after, ds));
    CHECK(pdx_abort(dc->e, 40001) == PDX_OK, "abort");
    t0 = now_ns();
    while (cudaEventQuery(after) == cudaErrorNotReady && now_ns() - t0 < 2000000000ull)
        ;
    CHECK(cudaEventQuery(after) == cudaSuccess, "the stream of a failed room never went on");
    CHECK(pdx_poll(dc->e, 40001) == PDX_ROOM_FAILED, "the aborted room");
    release_room(dc->e, 40001);
    CUDA_OK(cudaStreamSynchronize(ds));
    cudaEventDestroy(after);
    cudaStreamDestroy(ds);
}

/* Arm, on `stream`, retrying while every word is armed (released words
 * come back once the stream wrote them and the engine's sweep ran). */
static pdx_status_t arm_retry(side_t *pf, cudaStream_t stream, pdx_gate_t *g)
{
    pdx_status_t st;
    uint64_t t0 = now_ns();

    while ((st = pdx_gate_arm(pf->e, stream, g)) == PDX_ERR_AGAIN && now_ns() - t0 < 2000000000ull)
        usleep(1000);
    return st;
}

/*
 * A gate of pdx_gate_arm() gates one chunk: a second pdx_send() with a copy
 * of it is refused, a released gate cannot be sent, and gates handed to
 * failing pdx_send() calls or released go back to the pool (more than the
 * pool's 4096 words go through without running out). Gating still works
 * afterwards.
 */
static void test_gate_ownership(side_t *pf, side_t *dc, uint32_t peer)
{
    uint32_t pages[1] = {20};
    pdx_pages_t l = {pages, 1};
    pdx_gate_t g = {}, copy;
    int lost = 0, ok;
    uint64_t stale;

    progress("gate ownership", 60000);
    *(volatile uint64_t *)stale_flag = 1;
    CHECK(pdx_expect(dc->e, peer, 60000, dc->layout, &l, NULL, 1, 10000) == PDX_OK, "expect");
    CHECK(pdx_expect(dc->e, peer, 60001, dc->layout, &l, NULL, 1, 10000) == PDX_OK, "expect");
    CHECK(arm_retry(pf, stale_stream, &g) == PDX_OK, "arm");
    copy = g;
    CHECK(pdx_send(pf->e, 60000, pf->layout, &l, &g, NULL, PDX_SEND_LAST) == PDX_OK, "send");
    CHECK(pdx_send(pf->e, 60001, pf->layout, &l, &copy, NULL, PDX_SEND_LAST) == PDX_ERR_INVALID,
          "a second pdx_send of one armed gate");
    CHECK(wait_done(dc->e, 60000, 10000) == PDX_ROOM_SUCCESS, "the gated room");
    CHECK(arm_retry(pf, stale_stream, &g) == PDX_OK, "arm");
    CHECK(pdx_gate_release(pf->e, &g) == PDX_OK, "release");
    CHECK(pdx_gate_release(pf->e, &g) == PDX_ERR_INVALID, "a second release");
    CHECK(pdx_send(pf->e, 60001, pf->layout, &l, &g, NULL, PDX_SEND_LAST) == PDX_ERR_INVALID,
          "a released gate");
    for (int i = 0; i < 6000; i++) {
        progress("gate ownership: words back to the pool", (uint64_t)i);
        if (arm_retry(pf, stale_stream, &g) != PDX_OK) {
            lost++;
            break;
        }
        if (i % 2)
            pdx_gate_release(pf->e, &g);
        else /* a layout that does not exist: the send fails and frees the gate */
            pdx_send(pf->e, 60002, 4242, &l, &g, NULL, PDX_SEND_LAST);
    }
    CHECK(lost == 0, "the word pool ran out: released or refused gates leaked");
    printf("gate ownership: 6000 gates armed and released or refused, no word lost\n");
    pdx_abort(dc->e, 60001);
    release_room(dc->e, 60000);
    release_room(dc->e, 60001);
    release_room(pf->e, 60000);
    release_room(pf->e, 60001);
    stale = stale_rooms(pf, dc, peer, 61000, 8, GATE_STREAM, &ok);
    CHECK(ok == 8 && stale == 0, "gating afterwards: %d/8 rooms, %llu stale bytes", ok,
          (unsigned long long)stale);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static double cpu_seconds(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

/* Gate latency over ROOMS rooms whose gates open `steady`ly (200 us after
 * pdx_send, every tenth 5 ms: a shard's history foresees them) or at random
 * (0.1-3 ms: it cannot). */
static void gate_latency(side_t *pf, side_t *dc, uint32_t peer, bool steady, uint64_t room0)
{
    pdx_config_t cfg;
    enum { ROOMS = 1000 };
    uint64_t *flag, *lat = (uint64_t *)calloc(ROOMS, sizeof(uint64_t));
    uint64_t *gpu = (uint64_t *)calloc(ROOMS, sizeof(uint64_t));
    uint64_t *own = (uint64_t *)calloc(ROOMS, sizeof(uint64_t));
    uint32_t *dpages, pages[1] = {7};
    pdx_pages_t l = {pages, 1};
    cudaStream_t stream;
    pdx_stats_t st, st0;
    unsigned seed = 11;
    int arrived = 0;

    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof(*flag), cudaHostAllocMapped));
    CUDA_OK(cudaMalloc((void **)&dpages, sizeof(pages)));
    CUDA_OK(cudaMemcpy(dpages, pages, sizeof(pages), cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    pdx_config_init(&cfg); /* what the engines run with: the environment's */
    pdx_engine_stats(pf->e, &st0);
    for (int r = 0; r < ROOMS; r++) {
        uint64_t room = room0 + (uint64_t)r, before, t0;
        pdx_gate_t gate = {};

        progress("gate latency", room);
        *(volatile uint64_t *)flag = 0;
        pdx_expect(dc->e, peer, room, dc->layout, &l, NULL, 1, 10000);
        produce<<<LAYERS, 128, 0, stream>>>(flag, pf->pool, dpages, 1, room);
        pdx_gate_arm(pf->e, stream, &gate);
        pdx_engine_stats(pf->e, &st);
        before = st.writes_posted;
        pdx_send(pf->e, room, pf->layout, &l, &gate, NULL, PDX_SEND_LAST);
        if (steady)
            usleep(r % 10 == 0 ? 5000 : 200);
        else
            usleep(100 + rand_r(&seed) % 2900);
        t0 = now_ns();
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        /* the GPU's part: the kernel ends and the stream writes the word */
        while (__atomic_load_n(gate.word, __ATOMIC_ACQUIRE) < gate.value &&
               now_ns() - t0 < 1000000000ull)
            ;
        gpu[r] = now_ns() - t0;
        do
            pdx_engine_stats(pf->e, &st);
        while (st.writes_posted == before && now_ns() - t0 < 1000000000ull);
        lat[r] = now_ns() - t0;
        own[r] = lat[r] - gpu[r];
        arrived += wait_done(dc->e, room, 10000) == PDX_ROOM_SUCCESS;
        wait_done(pf->e, room, 10000);
        release_room(dc->e, room);
        release_room(pf->e, room);
    }
    pdx_engine_stats(pf->e, &st);
    qsort(lat, ROOMS, sizeof(*lat), cmp_u64);
    qsort(gpu, ROOMS, sizeof(*gpu), cmp_u64);
    qsort(own, ROOMS, sizeof(*own), cmp_u64);
    printf("gate latency (flag release -> first write posted), %d rooms opening %s, "
           "PDX_GATE_BACKOFF_US=%u PDX_GATE_SPIN_US=%u: p50 %.1f us, p99 %.1f us, max %.1f us "
           "(targets 12 / 40 us)\n", ROOMS, steady ? "steadily (200 us, every tenth 5 ms)" :
           "at random (0.1-3 ms)", cfg.gate_backoff_us, cfg.gate_spin_us,
           lat[ROOMS / 2] / 1e3, lat[ROOMS * 99 / 100] / 1e3, lat[ROOMS - 1] / 1e3);
    printf("  of which the GPU (release -> kernel done, word written): p50 %.1f us, p99 %.1f us\n",
           gpu[ROOMS / 2] / 1e3, gpu[ROOMS * 99 / 100] / 1e3);
    printf("  of which pdx (word written -> first write posted): p50 %.1f us, p99 %.1f us\n",
           own[ROOMS / 2] / 1e3, own[ROOMS * 99 / 100] / 1e3);
    printf("  gates foreseen (polled without sleeping when they opened): %llu of %llu\n",
           (unsigned long long)(st.gates_foreseen - st0.gates_foreseen),
           (unsigned long long)(st.gates_waited - st0.gates_waited));
    CHECK(lat[ROOMS - 1] < 1000000000ull, "every gate opened");
    CHECK(arrived == ROOMS, "%d of %d latency rooms arrived", arrived, ROOMS);
    CHECK(st.gates_waited - st0.gates_waited >= (uint64_t)ROOMS * 9 / 10,
          "the shard found %llu of %d gates closed", 
          (unsigned long long)(st.gates_waited - st0.gates_waited), ROOMS);
    cudaStreamDestroy(stream);
    cudaFree(dpages);
    cudaFreeHost(flag);
    free(lat);
    free(gpu);
    free(own);
}

static void test_latency(side_t *pf, side_t *dc, uint32_t peer)
{
    pdx_config_t cfg;
    uint64_t *flag;
    uint32_t *dpages, pages[1] = {7};
    pdx_pages_t l = {pages, 1};
    cudaStream_t stream;
    double cpu0, cpu1;
    uint64_t t0, gated_ns = 0;

    pdx_config_init(&cfg);
    gate_latency(pf, dc, peer, true, 10000);
    gate_latency(pf, dc, peer, false, 12000);
    CUDA_OK(cudaHostAlloc((void **)&flag, sizeof(*flag), cudaHostAllocMapped));
    CUDA_OK(cudaMalloc((void **)&dpages, sizeof(pages)));
    CUDA_OK(cudaMemcpy(dpages, pages, sizeof(pages), cudaMemcpyHostToDevice));
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    /* CPU while a gate is pending: one room gated for 500 ms */
    progress("gate CPU", 20000);
    {
        pdx_gate_t gate = {};

        *(volatile uint64_t *)flag = 0;
        pdx_expect(dc->e, peer, 20000, dc->layout, &l, NULL, 1, 10000);
        produce<<<LAYERS, 128, 0, stream>>>(flag, pf->pool, dpages, 1, 20000);
        pdx_gate_arm(pf->e, stream, &gate);
        pdx_send(pf->e, 20000, pf->layout, &l, &gate, NULL, PDX_SEND_LAST);
        usleep(10000);
        cpu0 = cpu_seconds();
        t0 = now_ns();
        usleep(500000);
        cpu1 = cpu_seconds();
        gated_ns = now_ns() - t0;
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        printf("process CPU while one gate was pending for %.0f ms: %.1f%% of one core "
               "(PDX_GATE_BACKOFF_US=%u; includes the GPU runtime's threads)\n", gated_ns / 1e6,
               100.0 * (cpu1 - cpu0) / (gated_ns / 1e9), cfg.gate_backoff_us);
        CHECK(wait_done(dc->e, 20000, 10000) == PDX_ROOM_SUCCESS, "the long-gated room");
        wait_done(pf->e, 20000, 10000);
        release_room(dc->e, 20000);
        release_room(pf->e, 20000);
    }

    /* kernel launch rate without pdx, and with a chunk gated and sent every
     * 64 launches (a layer group of a forward pass); REPS of each in turn,
     * the median of their ratios (the GPU host's launch rate drifts) */
    {
        enum { LAUNCHES = 19200, EVERY = 64, CHUNKS = LAUNCHES / EVERY, REPS = 5 };
        uint64_t *x;
        double rate[2], ratio[REPS];
        int sent = 0, ok = 0;

        progress("launch rate", 30000);
        CUDA_OK(cudaMalloc((void **)&x, sizeof(*x)));
        for (int k = 0; k < CHUNKS * REPS; k++)
            pdx_expect(dc->e, peer, 30000 + (uint64_t)k, dc->layout, &l, NULL, 1, 30000);
        for (int rep = 0; rep < REPS; rep++) {
            for (int with = 0; with < 2; with++) {
                CUDA_OK(cudaStreamSynchronize(stream));
                t0 = now_ns();
                for (int i = 0; i < LAUNCHES; i++) {
                    tiny<<<1, 32, 0, stream>>>(x);
                    if (with && i % EVERY == EVERY - 1) {
                        pdx_gate_t gate = {};
                        uint64_t room = 30000 + (uint64_t)(rep * CHUNKS + i / EVERY);

                        if (pdx_gate_arm(pf->e, stream, &gate) == PDX_OK &&
                            pdx_send(pf->e, room, pf->layout, &l, &gate, NULL, PDX_SEND_LAST) ==
                                PDX_OK)
                            sent++;
                    }
                }
                CUDA_OK(cudaStreamSynchronize(stream));
                rate[with] = LAUNCHES / ((now_ns() - t0) / 1e9);
            }
            ratio[rep] = rate[1] / rate[0];
            printf("kernel launches: %.0f/s alone, %.0f/s with a gated chunk sent every %d "
                   "launches: ratio %.3f\n", rate[0], rate[1], EVERY, ratio[rep]);
        }
        for (int k = 0; k < CHUNKS * REPS; k++) {
            progress("launch rate: rooms", 30000 + (uint64_t)k);
            ok += wait_done(dc->e, 30000 + (uint64_t)k, 10000) == PDX_ROOM_SUCCESS;
            wait_done(pf->e, 30000 + (uint64_t)k, 10000);
            release_room(dc->e, 30000 + (uint64_t)k);
            release_room(pf->e, 30000 + (uint64_t)k);
        }
        CHECK(sent == CHUNKS * REPS && ok == CHUNKS * REPS, "gated chunks between launches: %d "
              "sent, %d arrived of %d", sent, ok, CHUNKS * REPS);
        qsort(ratio, REPS, sizeof(*ratio), cmp_double);
        printf("kernel launch rate with gates: median ratio %.3f of %d (target >= 0.97)\n",
               ratio[REPS / 2], REPS);
        cudaFree(x);
    }
    cudaStreamDestroy(stream);
    cudaFree(dpages);
    cudaFreeHost(flag);
}

int main(int argc, char **argv)
{
    const bool latency_only = argc > 1 && strcmp(argv[1], "--latency") == 0;

    side_t pf, dc;
    uint32_t peer;

    cu_check_init();
    progress("setup", 0);
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaHostAlloc((void **)&stale_flag, sizeof(*stale_flag), cudaHostAllocMapped));
    CUDA_OK(cudaMalloc((void **)&stale_pages, PAGES * sizeof(uint32_t)));
    CUDA_OK(cudaStreamCreateWithFlags(&stale_stream, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&stale_ev, cudaEventDisableTiming));
    side_open(&pf, true, "3000");
    side_open(&dc, false, "3000");
    if (pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) != PDX_OK) {
        printf("FATAL: connect\n");
        return 2;
    }
    if (!latency_only) {
        test_stale_pages(&pf, &dc, peer);
        test_gate_errors(&pf, &dc, peer);
        test_stream_wait(&pf, &dc, peer);
        test_gate_ownership(&pf, &dc, peer);
    }
    test_latency(&pf, &dc, peer);
    progress("close", 0);
    side_close(&dc);
    side_close(&pf);
    cudaEventDestroy(stale_ev);
    cudaStreamDestroy(stale_stream);
    cudaFree(stale_pages);
    cudaFreeHost(stale_flag);
    alarm(0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
