/*
 * The decode and prefill loops of pdx-bench: one thread drives one side
 * (bench_side.c: its engine, pool, aux slots and free pages).
 *
 * Rooms 1..requests go through `slots`, at most `concurrency` at a time;
 * each room takes its pages at random from `free_pages`, the pages no other
 * room in flight uses, and gives them back once pdx_release() returned
 * PDX_OK (a room that cannot be released keeps its pages for good).
 *
 * Decode: pdx_expect(), poll, check every byte of every page of every layer
 * against pattern(room, layer, position in the room, offset), read the aux
 * slot (prefill's send time), release. Prefill: fill the pages with the same
 * pattern, write the send time into the aux slot, pdx_send() in `chunks`
 * chunks (the last with the aux slot), poll, release. With --gpu the pages
 * and the aux slot are written and read back on the GPU (bench_gpu.c) and
 * every chunk is sent behind a stream gate.
 *
 * A poll sweep stamps the time of every room that turned SUCCESS or FAILED;
 * one runs before and after each room is checked, so checking one room adds
 * at most its own checking time to the latency of the others. Every wait
 * has a deadline.
 */
#include "bench.h"
#include "bench_gpu.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define IDLE_NS     20000ull      /* sleep of a sweep that moved nothing */
#define RETRY_NS    50000ull      /* between pdx_send AGAIN / pdx_release INPROGRESS */
#define SLACK_MS    2000          /* our backstop past the engine's own deadlines */
#define PROGRESS_NS 250000000ull  /* progress line period */
#define AHEAD       2             /* pages prefetched ahead of the one filled or checked */
#define AHEAD_BYTES 4096u         /* of each: the hardware streams the rest */


static const char *state_str(pdx_room_state_t st)
{
    switch (st) {
    case PDX_ROOM_NONE: return "NONE";
    case PDX_ROOM_FAILED: return "FAILED";
    case PDX_ROOM_BOOTSTRAPPING: return "BOOTSTRAPPING";
    case PDX_ROOM_WAITING: return "WAITING";
    case PDX_ROOM_TRANSFERRING: return "TRANSFERRING";
    case PDX_ROOM_SUCCESS: return "SUCCESS";
    }
    return "?";
}

/* ------------------------------------------------------------------ rooms */

void bench_note_error(bench_result_t *res, const char *fmt, ...)
{
    va_list ap;

    if (res->error[0])
        return;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof(res->error), fmt, ap);
    va_end(ap);
}

static void room_failed(bench_side_t *s, pdx_room_t room, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void room_failed(bench_side_t *s, pdx_room_t room, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    bench_err(s->role, "room %" PRIu64 ": %s", (uint64_t)room, msg);
    bench_note_error(s->res, "room %" PRIu64 ": %s", (uint64_t)room, msg);
    s->res->failed++;
    if (!s->o->keep_going)
        s->stop = 1;
}

/* Release with a deadline; the pages go back to the pool only on PDX_OK. */
static int room_release(bench_side_t *s, bench_slot_t *sl, int counted_failure)
{
    uint64_t deadline = bench_now_ns() + (uint64_t)s->o->timeout_ms * 1000000ull;
    pdx_status_t st;

    while ((st = pdx_release(s->e, sl->room)) == PDX_INPROGRESS && bench_now_ns() < deadline)
        bench_sleep_ns(RETRY_NS);
    sl->active = 0;
    s->nactive--;
    s->finished++;
    if (st == PDX_OK || st == PDX_ERR_NOT_FOUND) {
        bench_put_pages(s, sl->pages);
        return 0;
    }
    if (st == PDX_INPROGRESS)
        bench_err(s->role, "room %" PRIu64 ": pdx_release still in progress after %d ms; its "
                  "pages stay out of the pool", (uint64_t)sl->room, s->o->timeout_ms);
    else
        bench_err(s->role, "room %" PRIu64 ": pdx_release: %s", (uint64_t)sl->room,
                  pdx_status_str(st));
    if (!counted_failure) {
        s->res->failed++;
        if (!s->o->keep_going)
            s->stop = 1;
    }
    return -1;
}

static void room_error_text(bench_side_t *s, pdx_room_t room, char *buf, size_t len)
{
    if (pdx_room_error(s->e, room, buf, len) != PDX_OK || !buf[0])
        snprintf(buf, len, "(no reason given)");
}

static void slot_start(bench_side_t *s, bench_slot_t *sl, pdx_room_t room, uint64_t now,
                       uint64_t budget_ms)
{
    sl->active = 1;
    sl->room = room;
    sl->start_ns = now;
    sl->deadline_ns = now + (budget_ms + SLACK_MS) * 1000000ull;
    sl->end_ns = 0;
    sl->state = PDX_ROOM_NONE;
    s->nactive++;
}

/* A room the engine never took: only the slot and the pages to give back. */
static void slot_drop(bench_side_t *s, bench_slot_t *sl)
{
    sl->active = 0;
    s->nactive--;
    s->finished++;
    bench_put_pages(s, sl->pages);
}

static pdx_region_t aux_region(const bench_side_t *s, const bench_slot_t *sl)
{
    return (pdx_region_t){.mem = s->aux_mem, .offset = (uint64_t)(sl - s->slots) * BENCH_AUX_SLOT,
                          .len = BENCH_AUX_SLOT};
}

static void decode_start(bench_side_t *s, bench_slot_t *sl, pdx_room_t room)
{
    pdx_region_t aux = aux_region(s, sl);
    pdx_pages_t dst = {sl->pages, s->o->pages};
    pdx_status_t st;

    bench_pick_pages(s, sl->pages);
    memset(s->aux + aux.offset, 0, BENCH_AUX_SLOT);
    slot_start(s, sl, room, bench_now_ns(), (uint64_t)s->o->timeout_ms);
    st = pdx_expect(s->e, s->peer, room, s->layout, &dst, &aux, 1, s->o->timeout_ms);
    if (st != PDX_OK) {
        room_failed(s, room, "pdx_expect: %s", pdx_status_str(st));
        slot_drop(s, sl);
    }
}

/* A chunk that could not be queued: the room ends there. A first chunk's
 * room may be in the table all the same (made by the call, or by decode's
 * metadata): released like any other. */
static void chunk_failed(bench_side_t *s, bench_slot_t *sl, uint32_t c)
{
    if (c == 0 && pdx_poll(s->e, sl->room) == PDX_ROOM_NONE) {
        slot_drop(s, sl);
    } else {
        pdx_abort(s->e, sl->room);
        room_release(s, sl, 1);
    }
}

/* The page AHEAD positions after (layer l, position i) of the room, on its
 * way to the cache: a room's pages lie anywhere in the pool, and filling or
 * checking them one after another would wait for each one's misses. */
static void prefetch_ahead(const bench_side_t *s, const bench_slot_t *sl, uint32_t l, uint32_t i,
                           bool write)
{
    const bench_opts_t *o = s->o;
    uint64_t j = (uint64_t)l * o->pages + i + AHEAD;
    uint64_t len = o->bytes_per_page < AHEAD_BYTES ? o->bytes_per_page : AHEAD_BYTES;
    const uint8_t *p;

    if (j >= (uint64_t)o->layers * o->pages)
        return;
    p = bench_page_at(s, (uint32_t)(j / o->pages), sl->pages[j % o->pages]);
    for (uint64_t k = 0; k < len; k += 64) {
        if (write)
            __builtin_prefetch(p + k, 1, 0);
        else
            __builtin_prefetch(p + k, 0, 0);
    }
}

/*
 * Host pool: fill every page, then send the chunks ungated. GPU pool
 * (bench_gpu.c): per chunk, enqueue its writes on the GPU and send it behind
 * a stream gate; the room's time starts before its first write.
 */
static void prefill_start(bench_side_t *s, bench_slot_t *sl, pdx_room_t room)
{
    const bench_opts_t *o = s->o;
    pdx_region_t aux = aux_region(s, sl);
    bench_aux_rec_t rec = {.magic = BENCH_AUX_MAGIC, .room = room,
                           .geometry = bench_geometry_hash(o)};
    uint32_t at = 0;
    uint64_t deadline;

    bench_pick_pages(s, sl->pages);
    if (!s->gpu && !o->unchecked)
        for (uint32_t l = 0; l < o->layers; l++)
            for (uint32_t i = 0; i < o->pages; i++) {
                prefetch_ahead(s, sl, l, i, true);
                bench_fill_page(bench_page_at(s, l, sl->pages[i]), o->bytes_per_page,
                                bench_pattern_base(room, l, i));
            }
    rec.send_ns = bench_now_ns();
    memset(s->aux + aux.offset, 0, BENCH_AUX_SLOT);
    memcpy(s->aux + aux.offset, &rec, sizeof(rec));
    slot_start(s, sl, room, rec.send_ns, s->room_budget_ms);
    deadline = rec.send_ns + (uint64_t)o->timeout_ms * 1000000ull;
    for (uint32_t c = 0, r = 0; c < o->chunks; r = (r + 1) % o->layer_ranges, c += r == 0) {
        int last = c + 1 == o->chunks && r + 1 == o->layer_ranges;
        uint32_t n = c + 1 == o->chunks ? o->pages - at : o->pages / o->chunks;
        uint32_t lb = r * o->layers / o->layer_ranges, le = (r + 1) * o->layers / o->layer_ranges;
        pdx_pages_t src = {sl->pages + at, n};
        pdx_gate_t gate, *gated = NULL;
        char why[512];
        pdx_status_t st;

        if (s->gpu && !o->unchecked) {
            if (bench_gpu_write_chunk(s, room, sl->pages + at, at, n,
                                      last ? aux.offset : BENCH_GPU_NO_AUX, deadline, &gate, why,
                                      sizeof(why)) != 0) {
                room_failed(s, room, "chunk %u of %u: %s", c + 1, o->chunks, why);
                chunk_failed(s, sl, c);
                return;
            }
            gated = &gate;
        }
        while ((st = pdx_send_layers(s->e, room, s->layout, lb, le, &src, gated,
                                     last ? &aux : NULL, last ? PDX_SEND_LAST : 0)) ==
                   PDX_ERR_AGAIN &&
               bench_now_ns() < deadline)
            bench_sleep_ns(RETRY_NS);
        if (st != PDX_OK) {
            room_failed(s, room, "chunk %u of %u: pdx_send: %s%s", c + 1, o->chunks,
                        pdx_status_str(st),
                        st == PDX_ERR_AGAIN ? " (the ring stayed full until the deadline)" : "");
            chunk_failed(s, sl, c);
            return;
        }
        if (r + 1 == o->layer_ranges)
            at += n;
    }
}

/* Check every byte of every page of every layer, then the aux record. */
static int decode_verify(bench_side_t *s, bench_slot_t *sl, int64_t *lat_p)
{
    const bench_opts_t *o = s->o;
    uint64_t aux_off = aux_region(s, sl).offset;
    bench_diff_t d = {0};
    bench_aux_rec_t rec;
    char why[512];

    if (s->gpu) {
        if (bench_gpu_verify(s, sl, aux_off, &d, why, sizeof(why)) != 0) {
            room_failed(s, sl->room, "%s", why);
            return -1;
        }
    } else {
        for (uint32_t l = 0; l < o->layers; l++)
            for (uint32_t i = 0; i < o->pages; i++) {
                prefetch_ahead(s, sl, l, i, false);
                bench_diff_page(&d, bench_page_at(s, l, sl->pages[i]), o->bytes_per_page,
                                sl->room, l, i);
            }
    }
    if (d.bad) {
        room_failed(s, sl->room, "%" PRIu64 " byte%s; the first at layer %u, position %u "
                    "(page %u), byte %" PRIu64 " of the page", d.bad,
                    d.bad == 1 ? " differs" : "s differ",
                    d.layer, d.pos, sl->pages[d.pos], d.first);
        return -1;
    }
    memcpy(&rec, s->aux + aux_off, sizeof(rec));
    if (rec.magic != BENCH_AUX_MAGIC || rec.room != sl->room) {
        room_failed(s, sl->room, "the aux slot holds no record of this room (magic %016" PRIx64
                    ", room %" PRIu64 ")", rec.magic, rec.room);
        return -1;
    }
    if (rec.geometry != bench_geometry_hash(o)) {
        room_failed(s, sl->room, "the prefill side runs with other --layers, --bytes-per-token, "
                    "--page-size or --pages");
        return -1;
    }
    *lat_p = (int64_t)(sl->end_ns - rec.send_ns);
    return 0;
}

static void room_finish(bench_side_t *s, bench_slot_t *sl)
{
    char why[512];
    int64_t lat = 0;
    int ok;

    if (sl->state == PDX_ROOM_FAILED) {
        room_error_text(s, sl->room, why, sizeof(why));
        room_failed(s, sl->room, "FAILED: %s", why);
        ok = 0;
    } else if (s->role == BENCH_DECODE && !s->o->unchecked) {
        ok = decode_verify(s, sl, &lat) == 0;
    } else {
        lat = (int64_t)(sl->end_ns - sl->start_ns);
        ok = 1;
    }
    if (room_release(s, sl, !ok) != 0 || !ok)
        return;
    if (s->res->nlat == s->lat_cap) { /* more peers than the first */
        int64_t *more = realloc(s->lat, 2 * s->lat_cap * sizeof(*more));

        if (!more)
            return;
        s->lat = more;
        s->lat_cap *= 2;
    }
    s->lat[s->res->nlat++] = lat;
    s->res->done++;
    s->res->bytes += s->o->bytes_per_request;
}

/* Past the backstop: the engine's own deadline should have failed the room by now. */
static void room_overdue(bench_side_t *s, bench_slot_t *sl)
{
    pdx_room_state_t st = pdx_poll(s->e, sl->room);

    room_failed(s, sl->room, "still %s %" PRIu64 " ms after it started (the engine's deadline "
                "did not fire); aborting it", state_str(st),
                (uint64_t)((bench_now_ns() - sl->start_ns) / 1000000u));
    pdx_abort(s->e, sl->room);
    room_release(s, sl, 1);
}

/* ------------------------------------------------------------------- loop */

static void show_progress(bench_side_t *s, uint64_t now, uint64_t t0)
{
    double sec = (double)(now - t0) / 1e9;

    printf("\r%s: %" PRIu64 "/%u requests, %.2f GB/s, %u in flight, %" PRIu64 " failed   ",
           bench_role_name(s->role), s->finished, s->o->requests,
           sec > 0 ? (double)s->res->bytes / sec / 1e9 : 0.0, s->nactive, s->res->failed);
    fflush(stdout);
    s->progress_shown = 1;
}

static bench_slot_t *free_slot(bench_side_t *s)
{
    for (uint32_t i = 0; i < s->nslots; i++)
        if (!s->slots[i].active)
            return &s->slots[i];
    return NULL;
}

/*
 * Stamp every room that turned SUCCESS or FAILED since the last sweep, and
 * abort the overdue ones; 1 if a room was aborted.
 */
static int sweep(bench_side_t *s)
{
    uint64_t now = bench_now_ns();
    int moved = 0;

    for (uint32_t i = 0; i < s->nslots; i++) {
        bench_slot_t *x = &s->slots[i];
        pdx_room_state_t st;

        if (!x->active || x->end_ns)
            continue;
        st = pdx_poll(s->e, x->room);
        if (st == PDX_ROOM_SUCCESS || st == PDX_ROOM_FAILED) {
            x->state = st;
            x->end_ns = bench_now_ns();
        } else if (now > x->deadline_ns) {
            room_overdue(s, x);
            moved = 1;
        }
    }
    return moved;
}

static void run_loop(bench_side_t *s)
{
    const bench_opts_t *o = s->o;
    uint64_t t0 = bench_now_ns(), next_progress = t0 + 1000000000ull, t_end = t0;
    pdx_room_t next_room = 1;

    while (s->finished < o->requests && !s->stop) {
        bench_slot_t *sl = free_slot(s);
        uint64_t now;
        int moved = 0;

        if (next_room <= o->requests && sl && s->nfree >= o->pages) {
            if (s->role == BENCH_DECODE)
                decode_start(s, sl, next_room++);
            else
                prefill_start(s, sl, next_room++);
            moved = 1;
        } else if (next_room <= o->requests && !s->nactive) {
            bench_err(s->role, "the pool has %" PRIu64 " free pages, fewer than one request's %u: "
                      "rooms that could not be released hold the rest", s->nfree, o->pages);
            s->res->failed++;
            break;
        }
        moved |= sweep(s);
        for (uint32_t i = 0; i < s->nslots && !s->stop; i++) {
            if (s->slots[i].active && s->slots[i].end_ns) {
                room_finish(s, &s->slots[i]);
                sweep(s); /* stamp the rooms that finished while this one was checked */
                moved = 1;
            }
        }
        now = bench_now_ns();
        if (moved)
            t_end = now;
        if (o->progress && now >= next_progress) {
            show_progress(s, now, t0);
            next_progress = now + PROGRESS_NS;
        }
        if (!moved)
            bench_sleep_ns(IDLE_NS);
    }
    if (s->progress_shown) {
        printf("\r%79s\r", "");
        fflush(stdout);
    }
    s->res->wall_ns += t_end - t0;
}

/*
 * A last room with no pages, after every request: prefill sends it once all
 * its rooms ended, decode waits for it. So decode, whose engine going away
 * would fail prefill rooms whose final completions are still on their way,
 * outlives them; the barrier's own outcome on prefill does not count.
 */
static void barrier(bench_side_t *s)
{
    const pdx_room_t room = (pdx_room_t)s->o->requests + 1;
    const int ms = s->o->timeout_ms < 5000 ? s->o->timeout_ms : 5000;
    uint64_t deadline = bench_now_ns() + (uint64_t)ms * 1000000ull;
    pdx_pages_t none = {NULL, 0};
    pdx_room_state_t st;
    pdx_status_t rc;

    if (s->role == BENCH_DECODE)
        rc = pdx_expect(s->e, s->peer, room, s->layout, &none, NULL, 1, ms);
    else
        rc = pdx_send(s->e, room, s->layout, &none, NULL, NULL, PDX_SEND_LAST);
    if (rc != PDX_OK)
        return;
    do {
        st = pdx_poll(s->e, room);
        if (st == PDX_ROOM_SUCCESS || st == PDX_ROOM_FAILED)
            break;
        bench_sleep_ns(IDLE_NS);
    } while (bench_now_ns() < deadline);
    while (pdx_release(s->e, room) == PDX_INPROGRESS && bench_now_ns() < deadline)
        bench_sleep_ns(IDLE_NS);
}

volatile sig_atomic_t bench_stopping;

/* One peer's rooms, a line about them when there are several peers. */
static void serve_one(bench_side_t *s, uint32_t k)
{
    bench_result_t before = *s->res;
    const bench_result_t *r = s->res;

    s->finished = 0;
    if (s->o->peers == 0) /* serving until stopped, memory stays flat: the last peer's */
        s->res->nlat = 0;
    run_loop(s);
    barrier(s);
    s->res->peers++;
    if (s->o->peers != 1 && !s->o->json) {
        uint64_t ns = r->wall_ns - before.wall_ns;

        printf(" peer %-4u      : %" PRIu64 " verified, %" PRIu64 " failed, %.2f GB/s\n", k + 1,
               r->done - before.done, r->failed - before.failed,
               ns ? (double)(r->bytes - before.bytes) / (double)ns : 0.0);
        fflush(stdout);
    }
}

/*
 * Prefill: its rooms to the decode side. Decode: --peers prefill peers one
 * after another (0: until SIGINT or SIGTERM), each accepted within the
 * timeout (0: waiting as long as it takes); a failure ends it unless
 * --keep-going.
 */
static int serve_peers(bench_side_t *s, const char *connect_addr)
{
    const bench_opts_t *o = s->o;

    if (s->role == BENCH_PREFILL || o->peers == 1) {
        if (bench_side_join(s, connect_addr) != 0)
            return -1;
        serve_one(s, 0);
        return 0;
    }
    for (uint32_t k = 0; (o->peers == 0 || k < o->peers) && !bench_stopping; k++) {
        if (o->peers == 0) {
            pdx_status_t st;

            while ((st = pdx_peer_accept(s->e, 500, &s->peer)) == PDX_ERR_TIMEOUT &&
                   !bench_stopping)
                ;
            if (st != PDX_OK)
                return bench_stopping ? 0 : -1;
        } else if (bench_side_join(s, connect_addr) != 0) {
            return -1;
        }
        bench_err(s->role, "peer %u connected", k + 1);
        serve_one(s, k);
        pdx_peer_close(s->e, s->peer);
        if (s->stop && !o->keep_going)
            break;
        s->stop = 0;
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least pct percent at or below it. */
static int64_t percentile(const int64_t *v, uint64_t n, unsigned pct)
{
    uint64_t rank = (n * pct + 99) / 100;

    return v[rank ? rank - 1 : 0];
}

/* CPU time of this process's threads named pdx-shard*: each thread's
 * schedstat (nanoseconds), else its stat's utime + stime (clock ticks). */
static uint64_t shard_cpu_ns(void)
{
    const long hz = sysconf(_SC_CLK_TCK);
    uint64_t total = 0;
    struct dirent *d;
    DIR *dir = opendir("/proc/self/task");

    if (!dir)
        return 0;
    while ((d = readdir(dir)) != NULL) {
        char path[64], buf[512];
        unsigned long long ut = 0, st = 0, run_ns = 0;
        const char *end;
        FILE *f;
        size_t n;

        if (d->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%.20s/stat", d->d_name);
        f = fopen(path, "r");
        if (!f)
            continue;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* pid (comm) state ... utime stime: fields 14 and 15 */
        end = strrchr(buf, ')');
        if (!strstr(buf, "(pdx-shard") || !end ||
            sscanf(end + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) !=
                2)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%.20s/schedstat", d->d_name);
        f = fopen(path, "r");
        if (f && fscanf(f, "%llu", &run_ns) == 1)
            total += run_ns;
        else if (hz > 0)
            total += (ut + st) * 1000000000ull / (uint64_t)hz;
        if (f)
            fclose(f);
    }
    closedir(dir);
    return total;
}

int bench_run(const bench_opts_t *o, bench_role_t role, const pdx_config_t *cfg,
              const char *connect_addr, int addr_fd, bench_result_t *res)
{
    bench_side_t s = {.o = o, .role = role, .res = res};
    int rc;

    memset(res, 0, sizeof(*res));
    s.room_budget_ms = role == BENCH_DECODE
                           ? (uint64_t)o->timeout_ms
                           : (uint64_t)cfg->bootstrap_timeout_ms + cfg->transfer_timeout_ms;
    rc = bench_side_open(&s, cfg);
    if (s.e)
        snprintf(res->transport, sizeof(res->transport), "%s", pdx_engine_transport(s.e));
    if (rc == 0 && role == BENCH_DECODE) {
        char line[PDX_NAME_MAX + 2];

        snprintf(res->address, sizeof(res->address), "%s", pdx_engine_address(s.e));
        if (addr_fd >= 0) {
            snprintf(line, sizeof(line), "%s\n", res->address);
            if (bench_write_all(addr_fd, line, strlen(line)) != 0) {
                bench_err(role, "cannot pass the address to the prefill process: %s",
                          strerror(errno));
                rc = -1;
            }
        } else {
            bench_err(role, "listening on %s; waiting up to %d ms for `pdx-bench --role prefill "
                      "--connect %s` with the same flags", res->address, o->timeout_ms,
                      res->address);
        }
    }
    if (addr_fd >= 0)
        close(addr_fd);
    if (rc == 0)
        rc = serve_peers(&s, connect_addr);
    if (s.e && pdx_engine_stats(s.e, &res->stats) != PDX_OK)
        memset(&res->stats, 0, sizeof(res->stats));
    res->shard_cpu_ns = shard_cpu_ns();
    if (res->nlat) {
        qsort(s.lat, res->nlat, sizeof(*s.lat), cmp_i64);
        res->lat_p50_ns = percentile(s.lat, res->nlat, 50);
        res->lat_p99_ns = percentile(s.lat, res->nlat, 99);
    }
    bench_side_close(&s);
    if (rc != 0) {
        bench_note_error(res, "%s failed before its rooms (pdx-bench says why on stderr)",
                         s.e ? "setup" : "the engine's setup");
        return BENCH_EXIT_FAIL;
    }
    return res->failed || res->done < (uint64_t)o->requests * res->peers ? BENCH_EXIT_FAIL
                                                                        : BENCH_EXIT_OK;
}
