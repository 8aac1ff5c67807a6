/*
 * One side of pdx-bench: its engine, KV pool and aux region, the free-page
 * list rooms draw from, and the byte pattern both sides agree on.
 *
 * The pool is one buffer group with one buffer per layer (MLA), layer-major
 * in one registered region, mapped and touched up front so that page faults
 * stay out of the measurement; with --gpu it is device memory of that GPU
 * and so are the aux slots (bench_gpu.c). Word k of the page at position `pos` of room
 * `room` in layer `layer` is bench_pattern_base(room, layer, pos) + k * WORD_STEP.
 */
#include "bench.h"
#include "bench_gpu.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define WORD_STEP BENCH_WORD_STEP

const char *bench_role_name(bench_role_t role)
{
    return role == BENCH_DECODE ? "decode" : "prefill";
}

void bench_err(bench_role_t role, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "pdx-bench[%s]: %s\n", bench_role_name(role), msg);
}

uint64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void bench_sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};

    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- pattern */

/* A 64-bit finalizer: every input bit flips about half the output bits. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Word k of a page is base + k * WORD_STEP: a shifted, stale or misplaced page differs. */
uint64_t bench_pattern_base(pdx_room_t room, uint32_t layer, uint32_t pos)
{
    return mix64(mix64(room ^ BENCH_AUX_MAGIC) ^ ((uint64_t)layer << 32 | pos));
}

uint64_t bench_geometry_hash(const bench_opts_t *o)
{
    return mix64(mix64(mix64(o->layers) ^ o->bytes_per_page) ^ o->pages);
}

void bench_fill_page(uint8_t *p, uint64_t len, uint64_t base)
{
    uint64_t n = len / 8, v = base;

    for (uint64_t k = 0; k < n; k++, v += WORD_STEP)
        memcpy(p + 8 * k, &v, 8);
    if (len % 8)
        memcpy(p + 8 * n, &v, len % 8);
}

uint64_t bench_check_page(const uint8_t *p, uint64_t len, uint64_t base, uint64_t *first_p)
{
    uint64_t n = len / 8, v = base, diff = 0, bad = 0;

    for (uint64_t k = 0; k < n; k++, v += WORD_STEP) {
        uint64_t w;

        memcpy(&w, p + 8 * k, 8);
        diff |= w ^ v;
    }
    if (len % 8 && memcmp(p + 8 * n, &v, len % 8) != 0)
        diff = 1;
    if (!diff)
        return 0;
    v = base;
    for (uint64_t off = 0; off < len; off += 8, v += WORD_STEP) {
        uint8_t want[8];
        uint64_t m = len - off < 8 ? len - off : 8;

        memcpy(want, &v, 8);
        for (uint64_t b = 0; b < m; b++)
            if (p[off + b] != want[b] && bad++ == 0)
                *first_p = off + b;
    }
    return bad;
}

void bench_diff_page(bench_diff_t *d, const uint8_t *p, uint64_t len, pdx_room_t room,
                     uint32_t layer, uint32_t pos)
{
    uint64_t off = 0, n = bench_check_page(p, len, bench_pattern_base(room, layer, pos), &off);

    if (n && !d->bad) {
        d->first = off;
        d->layer = layer;
        d->pos = pos;
    }
    d->bad += n;
}

uint8_t *bench_page_at(const bench_side_t *s, uint32_t layer, uint32_t page)
{
    return s->pool + ((uint64_t)layer * s->o->npages + page) * s->o->bytes_per_page;
}

/* ------------------------------------------------------------------ pages */

void bench_pick_pages(bench_side_t *s, uint32_t *out)
{
    for (uint32_t i = 0; i < s->o->pages; i++) {
        uint64_t j;

        s->rng += WORD_STEP;
        j = mix64(s->rng) % s->nfree;
        out[i] = s->free_pages[j];
        s->free_pages[j] = s->free_pages[--s->nfree];
    }
}

void bench_put_pages(bench_side_t *s, const uint32_t *pages)
{
    for (uint32_t i = 0; i < s->o->pages; i++)
        s->free_pages[s->nfree++] = pages[i];
}

/* ------------------------------------------------------------------ setup */

static void *map_zeroed(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

int bench_side_open(bench_side_t *s, const pdx_config_t *cfg)
{
    const bench_opts_t *o = s->o;
    pdx_buffer_desc_t *bufs = NULL;
    pdx_group_desc_t group = {.buffers_per_layer = 1, .nbuffers = o->layers,
                              .npages = o->npages};
    pdx_layout_desc_t desc = {.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
                              .ngroups = 1, .layer_begin = 0, .layer_end = o->layers,
                              .groups = &group};
    pdx_status_t st;

    s->nslots = o->concurrency;
    s->aux_len = ((size_t)s->nslots * BENCH_AUX_SLOT + 4095) & ~(size_t)4095;
    s->free_pages = malloc(o->npages * sizeof(*s->free_pages));
    s->slots = calloc(s->nslots, sizeof(*s->slots));
    s->slot_pages = malloc((size_t)s->nslots * o->pages * sizeof(*s->slot_pages));
    s->lat_cap = o->requests;
    s->lat = malloc(s->lat_cap * sizeof(*s->lat));
    bufs = calloc(o->layers, sizeof(*bufs));
    if (!s->free_pages || !s->slots || !s->slot_pages || !s->lat || !bufs) {
        bench_err(s->role, "out of memory for the page tables");
        goto err;
    }
    for (uint64_t p = 0; p < o->npages; p++)
        s->free_pages[p] = (uint32_t)p;
    s->nfree = o->npages;
    for (uint32_t i = 0; i < s->nslots; i++)
        s->slots[i].pages = s->slot_pages + (size_t)i * o->pages;
    s->rng = mix64(o->seed) ^ (uint64_t)(s->role + 1) * WORD_STEP;

    if (o->gpu >= 0) {
        if (bench_gpu_open(s) != 0)
            goto err;
    } else {
        s->pool = map_zeroed(o->pool_bytes);
        s->aux = map_zeroed(s->aux_len);
        if (!s->pool || !s->aux) {
            bench_err(s->role, "cannot map a KV pool of %" PRIu64 " MiB: %s",
                      o->pool_bytes >> 20, strerror(errno));
            goto err;
        }
    }
    st = pdx_engine_create(cfg, &s->e);
    if (st != PDX_OK) {
        bench_err(s->role, "pdx_engine_create: %s", pdx_status_str(st));
        bench_note_error(s->res, "pdx_engine_create: %s", pdx_status_str(st));
        goto err;
    }
    st = pdx_mem_register(s->e, s->pool, o->pool_bytes, &s->mem);
    if (st == PDX_OK)
        st = pdx_mem_register(s->e, s->gpu ? bench_gpu_aux_device(s) : s->aux, s->aux_len,
                              &s->aux_mem);
    if (st != PDX_OK && s->gpu) {
        bench_err(s->role, "pdx_mem_register of the KV pool in memory of GPU %d (%s transport): "
                  "%s; the engine says why above", o->gpu, pdx_engine_transport(s->e),
                  pdx_status_str(st));
        goto err;
    }
    if (st != PDX_OK) {
        bench_err(s->role, "pdx_mem_register: %s", pdx_status_str(st));
        goto err;
    }
    for (uint32_t l = 0; l < o->layers; l++)
        bufs[l] = (pdx_buffer_desc_t){.mem = s->mem,
                                      .offset = (uint64_t)l * o->npages * o->bytes_per_page,
                                      .bytes_per_page = o->bytes_per_page};
    group.buffers = bufs;
    st = pdx_layout_create(s->e, &desc, &s->layout);
    if (st != PDX_OK) {
        bench_err(s->role, "pdx_layout_create (%u layers, %" PRIu64 " pages of %" PRIu64
                  " B): %s", o->layers, o->npages, o->bytes_per_page, pdx_status_str(st));
        goto err;
    }
    free(bufs);
    return 0;
err:
    free(bufs);
    return -1;
}

void bench_side_close(bench_side_t *s)
{
    if (s->gpu)
        bench_gpu_drain(s); /* nothing of ours still runs on the GPU (gate words included) */
    if (s->e)
        pdx_engine_destroy(s->e);
    if (s->gpu) {
        bench_gpu_close(s);
    } else {
        if (s->pool)
            munmap(s->pool, s->o->pool_bytes);
        if (s->aux)
            munmap(s->aux, s->aux_len);
    }
    free(s->free_pages);
    free(s->slots);
    free(s->slot_pages);
    free(s->lat);
}

int bench_write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = write(fd, buf, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int bench_side_join(bench_side_t *s, const char *connect_addr)
{
    const bench_opts_t *o = s->o;
    uint64_t deadline = bench_now_ns() + (uint64_t)o->timeout_ms * 1000000ull;
    pdx_status_t st;

    if (s->role == BENCH_DECODE) {
        st = pdx_peer_accept(s->e, o->timeout_ms, &s->peer);
        if (st != PDX_OK) {
            bench_err(s->role, "no prefill peer connected to %s within %d ms: %s",
                      pdx_engine_address(s->e), o->timeout_ms, pdx_status_str(st));
            return -1;
        }
        return 0;
    }
    /*
     * A decode side started a moment later refuses the first tries: retry
     * until the deadline, backing off from 100 ms to 1 s between tries.
     */
    for (uint64_t pause = 100000000ull;; pause = pause * 2 < 1000000000ull ? pause * 2
                                                                          : 1000000000ull) {
        uint64_t now = bench_now_ns();
        int left_ms = now < deadline ? (int)((deadline - now) / 1000000ull) : 0;

        st = pdx_peer_connect(s->e, connect_addr, left_ms > 0 ? left_ms : 1, &s->peer);
        if (st == PDX_OK)
            return 0;
        if ((st != PDX_ERR_PEER && st != PDX_ERR_IO) || bench_now_ns() + pause >= deadline)
            break;
        bench_sleep_ns(pause);
    }
    bench_err(s->role, "cannot connect to the decode side at %s within %d ms: %s", connect_addr,
              o->timeout_ms, pdx_status_str(st));
    return -1;
}
