/*
 * Decode visibility on a real GPU: does a decode kernel queued behind
 * pdx_room_stream_wait() see every byte of its room the moment the room is
 * SUCCESS? Prefill (this process) writes each room's pages with a kernel and
 * sends them behind a pdx_gate_arm() gate; decode (a second process, on
 * another GPU when there is one) expects each room, enqueues the wait and
 * then a kernel that compares every word of the room's pages with what the
 * producer wrote, before any host round trip. Rooms go in rounds whose
 * pages do not overlap on either side, so no later room can touch pages
 * still being checked.
 *
 *   visibility [--rooms R] [--gpu P] [--decode-gpu D]
 *
 * The transport and the flush are the engine's (PDX_TRANSPORT, PDX_FLUSH:
 * with PDX_FLUSH=off over rdma on a GPU that needs a flush, stale words show
 * the hazard the flush closes). Prints "visibility: N/N rooms SUCCESS, W
 * stale words (PDX_FLUSH=...)". Exit status: 0 every room SUCCESS and no
 * stale word, 3 every room SUCCESS with stale words, 1 otherwise.
 */
#include "gpu_rt.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pdx/pdx.h"

#include "cu_check.h"
#include "spawn_self.h"

enum { LAYERS = 8, NPAGES = 1024, PER_ROUND = 16, PAGES = NPAGES / PER_ROUND };
#define BPP 32768u

__host__ __device__ static uint64_t word(uint64_t room, uint32_t layer, uint32_t pos, uint64_t w)
{
    uint64_t z = room * 0x9e3779b97f4a7c15ull ^ ((uint64_t)layer << 48) ^ ((uint64_t)pos << 32) ^ w;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    return z ^ (z >> 27);
}

/* Block (layer, position): that page of the room gets its words. */
__global__ void produce(uint64_t *pool, const uint32_t *pages, uint64_t room)
{
    const uint32_t layer = blockIdx.x / PAGES, i = blockIdx.x % PAGES;
    uint64_t *p = pool + ((uint64_t)layer * NPAGES + pages[i]) * (BPP / 8);

    for (uint32_t w = threadIdx.x; w < BPP / 8; w += blockDim.x)
        p[w] = word(room, layer, i, w);
}

/* Decode's reader behind the wait: the words of the room that are not the
 * producer's, into *bad. */
__global__ void check(const uint64_t *pool, const uint32_t *pages, uint64_t room,
                      unsigned long long *bad)
{
    const uint32_t layer = blockIdx.x / PAGES, i = blockIdx.x % PAGES;
    const volatile uint64_t *p = pool + ((uint64_t)layer * NPAGES + pages[i]) * (BPP / 8);
    unsigned long long b = 0;

    for (uint32_t w = threadIdx.x; w < BPP / 8; w += blockDim.x)
        b += p[w] != word(room, layer, i, w);
    if (b)
        atomicAdd(bad, b);
}

typedef struct side {
    pdx_engine_t *e;
    uint64_t     *pool;
    uint32_t      layout;
} side_t;

static void side_open(side_t *s, int gpu)
{
    static pdx_buffer_desc_t bufs[LAYERS];
    const uint64_t len = (uint64_t)NPAGES * BPP;
    char dev[16];
    pdx_config_t cfg;
    pdx_group_desc_t group = {};
    pdx_layout_desc_t desc = {};

    snprintf(dev, sizeof(dev), "%d", gpu);
    CUDA_OK(cudaSetDevice(gpu));
    pdx_config_init(&cfg); /* PDX_* from the environment */
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_GPU", dev);
    if (pdx_engine_create(&cfg, &s->e) != PDX_OK) {
        printf("FATAL: pdx_engine_create\n");
        exit(2);
    }
    CUDA_OK(cudaMalloc((void **)&s->pool, len * LAYERS));
    CUDA_OK(cudaMemset(s->pool, 0xee, len * LAYERS));
    for (uint32_t l = 0; l < LAYERS; l++) {
        uint32_t mem;

        if (pdx_mem_register(s->e, (uint8_t *)s->pool + l * len, len, &mem) != PDX_OK) {
            printf("FATAL: pdx_mem_register of GPU memory (layer %u)\n", l);
            exit(2);
        }
        bufs[l] = (pdx_buffer_desc_t){.mem = mem, .reserved0 = 0, .offset = 0,
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

/* A round's pages: a permutation of the pool cut in PER_ROUND rooms. */
static void round_pages(uint32_t round, unsigned salt, uint32_t *pages)
{
    unsigned seed = round * 7919u + salt;

    for (uint32_t i = 0; i < NPAGES; i++)
        pages[i] = i;
    for (uint32_t i = NPAGES - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rand_r(&seed) % (i + 1), t = pages[i];

        pages[i] = pages[j];
        pages[j] = t;
    }
}

/* Poll until every room of ids [first, first + n) ended; SUCCESS count. */
static uint32_t wait_all(pdx_engine_t *e, uint64_t first, uint32_t n, uint32_t *ok_p)
{
    uint32_t done = 0, ok = 0;
    const uint64_t end = now_ns() + 60000000000ull;

    for (uint32_t i = 0; i < n; i++) {
        const uint64_t now = now_ns();
        pdx_room_state_t st = wait_done(e, first + i, now < end ? (int)((end - now) / 1000000) : 0);

        done += st == PDX_ROOM_SUCCESS || st == PDX_ROOM_FAILED;
        ok += st == PDX_ROOM_SUCCESS;
    }
    *ok_p = ok;
    return done;
}

static int decode_child(const char *addr, uint32_t rounds, int gpu)
{
    side_t dc;
    uint32_t peer, ok_all = 0, pages[NPAGES], *dpages;
    unsigned long long *dbad, bad[PER_ROUND], stale = 0;
    cudaStream_t s;
    const char *flush = getenv("PDX_FLUSH");

    side_open(&dc, gpu);
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void **)&dpages, sizeof(pages)));
    CUDA_OK(cudaMalloc((void **)&dbad, sizeof(bad)));
    CHECK(pdx_peer_connect(dc.e, addr, 10000, &peer) == PDX_OK, "connect to %s", addr);
    for (uint32_t k = 0; k < rounds; k++) {
        uint32_t ok;

        progress("decode round", k);
        round_pages(k, 2, pages);
        CUDA_OK(cudaMemcpy(dpages, pages, sizeof(pages), cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemset(dbad, 0, sizeof(bad)));
        for (uint32_t r = 0; r < PER_ROUND; r++) {
            const uint64_t room = 1 + (uint64_t)k * PER_ROUND + r;
            pdx_pages_t dp = {pages + r * PAGES, PAGES};

            CHECK(pdx_expect(dc.e, peer, room, dc.layout, &dp, NULL, 1, 60000) == PDX_OK,
                  "expect %llu", (unsigned long long)room);
            CHECK(pdx_room_stream_wait(dc.e, room, s) == PDX_OK, "stream wait");
            check<<<LAYERS * PAGES, 256, 0, s>>>(dc.pool, dpages + r * PAGES, room, dbad + r);
        }
        wait_all(dc.e, 1 + (uint64_t)k * PER_ROUND, PER_ROUND, &ok);
        CUDA_OK(cudaStreamSynchronize(s));
        CUDA_OK(cudaMemcpy(bad, dbad, sizeof(bad), cudaMemcpyDeviceToHost));
        for (uint32_t r = 0; r < PER_ROUND; r++) {
            const uint64_t room = 1 + (uint64_t)k * PER_ROUND + r;

            if (pdx_poll(dc.e, room) == PDX_ROOM_SUCCESS)
                stale += bad[r];
            release_room(dc.e, room);
        }
        ok_all += ok;
    }
    printf("visibility: %u/%u rooms SUCCESS, %llu stale words in them (PDX_FLUSH=%s, "
           "decode on GPU %d)\n", ok_all, rounds * PER_ROUND, stale, flush ? flush : "auto", gpu);
    pdx_engine_destroy(dc.e);
    return ok_all != rounds * PER_ROUND || failed ? 1 : stale ? 3 : 0;
}

int main(int argc, char **argv)
{
    uint32_t rounds = 4, pages[NPAGES], *dpages, ok_all = 0;
    int gpu = 0, dgpu = 0, status = 0;
    char addr[64], rounds_s[16], dgpu_s[16];
    side_t pf;
    cudaStream_t g;
    pid_t pid;

    /* Decode's check kernel is launched behind a stream wait that the
     * engine's own staging copies (tcp into GPU memory) must get past: a
     * kernel loaded lazily at that launch holds them up until the room's
     * deadline (pdx_room_stream_wait_layer in pdx.h). */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    cu_check_init();
    if (argc == 5 && strcmp(argv[1], "--decode") == 0)
        return decode_child(argv[2], (uint32_t)strtoul(argv[3], NULL, 10), atoi(argv[4]));
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rooms") == 0)
            rounds = ((uint32_t)strtoul(argv[i + 1], NULL, 10) + PER_ROUND - 1) / PER_ROUND;
        else if (strcmp(argv[i], "--gpu") == 0)
            gpu = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--decode-gpu") == 0)
            dgpu = atoi(argv[i + 1]);
    }
    side_open(&pf, gpu);
    CUDA_OK(cudaStreamCreateWithFlags(&g, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc((void **)&dpages, sizeof(pages)));
    snprintf(addr, sizeof(addr), "%s", pdx_engine_address(pf.e));
    snprintf(rounds_s, sizeof(rounds_s), "%u", rounds);
    snprintf(dgpu_s, sizeof(dgpu_s), "%d", dgpu);
    {
        char *child[] = {argv[0], (char *)"--decode", addr, rounds_s, dgpu_s, NULL};

        CHECK(spawn_self(child, "", 0, &pid) == 0, "spawn decode");
    }
    for (uint32_t k = 0; k < rounds; k++) {
        uint32_t ok;

        progress("prefill round", k);
        round_pages(k, 1, pages);
        CUDA_OK(cudaMemcpy(dpages, pages, sizeof(pages), cudaMemcpyHostToDevice));
        for (uint32_t r = 0; r < PER_ROUND; r++) {
            const uint64_t room = 1 + (uint64_t)k * PER_ROUND + r;
            pdx_pages_t sp = {pages + r * PAGES, PAGES};
            pdx_gate_t gate;

            produce<<<LAYERS * PAGES, 256, 0, g>>>(pf.pool, dpages + r * PAGES, room);
            CHECK(pdx_gate_arm(pf.e, g, &gate) == PDX_OK, "gate_arm");
            CHECK(pdx_send(pf.e, room, pf.layout, &sp, &gate, NULL, PDX_SEND_LAST) == PDX_OK,
                  "send %llu", (unsigned long long)room);
        }
        wait_all(pf.e, 1 + (uint64_t)k * PER_ROUND, PER_ROUND, &ok);
        ok_all += ok;
        CUDA_OK(cudaStreamSynchronize(g));
        for (uint32_t r = 0; r < PER_ROUND; r++)
            release_room(pf.e, 1 + (uint64_t)k * PER_ROUND + r);
    }
    if (waitpid(pid, &status, 0) != pid)
        status = -1;
    CHECK(ok_all == rounds * PER_ROUND, "prefill: %u/%u rooms SUCCESS", ok_all,
          rounds * PER_ROUND);
    pdx_engine_destroy(pf.e);
    if (!WIFEXITED(status))
        return 1;
    return failed ? 1 : WEXITSTATUS(status);
}
