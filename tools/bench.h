/*
 * pdx-bench internals: pdx_bench.c (options, loopback, report), bench_run.c
 * (the decode and prefill loops of one side), bench_side.c (one side's
 * engine, memory and pages, and the byte pattern both sides agree on) and
 * bench_gpu.c (--gpu: the pool in GPU memory, written and read back through
 * pinned staging; the only tools file that calls hip/).
 */
#ifndef PDX_TOOLS_BENCH_H
#define PDX_TOOLS_BENCH_H

#include <stddef.h>
#include <signal.h>
#include <stdint.h>

#include <pdx/pdx.h>

/* Word k of a page is its base + k * BENCH_WORD_STEP (bench_side.c). */
#define BENCH_WORD_STEP 0x9e3779b97f4a7c15ull

/* Exit statuses. */
enum {
    BENCH_EXIT_OK    = 0, /* every request verified */
    BENCH_EXIT_FAIL  = 1, /* a mismatch, a failed room or a setup error */
    BENCH_EXIT_USAGE = 2, /* bad flags */
};

typedef enum bench_role {
    BENCH_DECODE  = 0,
    BENCH_PREFILL = 1,
} bench_role_t;

typedef struct bench_opts {
    uint32_t layers;           /* buffers, one per layer (MLA) */
    uint32_t bytes_per_token;  /* per layer */
    uint32_t page_size;        /* tokens per page */
    uint32_t pages;            /* pages per request */
    uint32_t requests;         /* rooms 1..requests */
    uint32_t concurrency;      /* rooms in flight per side */
    uint32_t chunks;           /* pdx_send calls per request (prefill) */
    uint32_t layer_ranges;     /* pdx_send_layers calls per chunk (1: pdx_send) */
    uint64_t seed;
    int      timeout_ms;       /* every wait: connect/accept, a room, release */
    int      json;
    int      keep_going;
    int      unchecked;        /* --unchecked: pages neither written nor checked */
    int      progress;         /* a live progress line on stdout is allowed */
    int      gpu;              /* --gpu: the GPU holding the KV pool and aux slots; -1: host */
    uint32_t peers;            /* decode: prefill peers served one after another (1);
                                  0: until SIGINT or SIGTERM */
    /* derived */
    uint64_t bytes_per_page;   /* bytes_per_token * page_size */
    uint64_t npages;           /* pages per buffer in the pool */
    uint64_t pool_bytes;       /* layers * npages * bytes_per_page */
    uint64_t bytes_per_request;
} bench_opts_t;

/* What one side measured. Plain data: the loopback child sends it through a pipe. */
typedef struct bench_result {
    uint64_t done;             /* rooms that reached SUCCESS (decode: and verified) */
    uint64_t failed;           /* rooms that failed, did not verify or did not finish */
    uint64_t bytes;            /* bytes of the rooms in `done` */
    uint64_t wall_ns;          /* first room started .. last room finished (summed over peers) */
    uint32_t peers;            /* peers whose rooms were served */
    uint64_t nlat;             /* latency samples */
    int64_t  lat_p50_ns;
    int64_t  lat_p99_ns;
    pdx_stats_t stats;         /* the engine's counters at the end */
    uint64_t shard_cpu_ns;     /* the engine's shard threads, user + system, at the end */
    char     address[PDX_NAME_MAX]; /* decode: where it listened */
    char     transport[16];    /* what the engine used (pdx_engine_transport); "": no engine */
    char     error[512];       /* the first failure: the room's error text or status, or the
                                  setup's (pdx_engine_create); "": none */
} bench_result_t;

/*
 * Run one side to the end: create the engine from cfg (decode: listening on
 * cfg->listen), register the pool, connect (prefill, to `connect_addr`) or
 * accept (decode), move o->requests rooms, destroy the engine. A decode side
 * with addr_fd >= 0 writes its address and a newline there once it listens,
 * then closes addr_fd (also when setup fails, so the reader sees EOF).
 * Returns a BENCH_EXIT_* status; res is filled in any case.
 */
int bench_run(const bench_opts_t *o, bench_role_t role, const pdx_config_t *cfg,
              const char *connect_addr, int addr_fd, bench_result_t *res);

/* Set by SIGINT or SIGTERM: a decode side serving --peers 0 stops taking peers. */
extern volatile sig_atomic_t bench_stopping;

/* "decode" or "prefill". */
const char *bench_role_name(bench_role_t role);

/* Keep the first failure's reason in res->error (later ones are dropped). */
void bench_note_error(bench_result_t *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "pdx-bench[decode]: message\n" on stderr. */
void bench_err(bench_role_t role, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/* ------------------------------------------------------- one side (bench_side.c) */

#define BENCH_AUX_SLOT  64u                     /* aux bytes per room in flight */
#define BENCH_AUX_MAGIC 0x7064782d62656e63ull   /* "pdx-benc" */

/* Prefill writes this into its aux slot; decode reads it from its own. */
typedef struct bench_aux_rec {
    uint64_t magic;
    uint64_t room;
    uint64_t send_ns;   /* prefill's CLOCK_MONOTONIC right before the first pdx_send */
    uint64_t geometry;  /* bench_geometry_hash() of the sender */
} bench_aux_rec_t;

/* A room in flight. */
typedef struct bench_slot {
    int              active;
    pdx_room_t       room;
    uint32_t        *pages;       /* o->pages entries */
    uint64_t         start_ns;    /* decode: pdx_expect; prefill: send time */
    uint64_t         deadline_ns; /* backstop: SUCCESS or FAILED by then */
    uint64_t         end_ns;      /* a sweep saw SUCCESS or FAILED; 0: not yet */
    pdx_room_state_t state;
} bench_slot_t;

typedef struct bench_gpu bench_gpu_t; /* bench_gpu.h */

typedef struct bench_side {
    const bench_opts_t *o;
    bench_role_t    role;
    uint64_t        room_budget_ms;  /* the engine's deadlines for one room */
    pdx_engine_t   *e;
    uint8_t        *pool;            /* layer-major: layer l, page p at (l * npages + p) * bpp;
                                        with --gpu device memory, never dereferenced here */
    uint8_t        *aux;             /* one BENCH_AUX_SLOT per slot; with --gpu the pinned
                                        host mirror of the registered device slots */
    bench_gpu_t    *gpu;             /* --gpu; NULL: pool and aux are host memory */
    size_t          aux_len;
    uint32_t        mem, aux_mem, layout, peer;
    uint32_t       *free_pages;      /* the pages no room in flight uses */
    uint64_t        nfree;
    bench_slot_t   *slots;
    uint32_t       *slot_pages;
    uint32_t        nslots, nactive;
    uint64_t        rng;
    int64_t        *lat;             /* one sample per verified room (lat_cap) */
    uint64_t        lat_cap;
    uint64_t        finished;        /* rooms done or failed */
    int             stop;            /* a failure without --keep-going */
    int             progress_shown;
    bench_result_t *res;
} bench_side_t;

/* The first word of page (room, layer, position in the room); word k is base + k * step. */
uint64_t bench_pattern_base(pdx_room_t room, uint32_t layer, uint32_t pos);
/* What both sides must agree on to produce and check the same bytes. */
uint64_t bench_geometry_hash(const bench_opts_t *o);
void bench_fill_page(uint8_t *p, uint64_t len, uint64_t base);
/* Bytes of the page that differ from the pattern; the first one's offset in *first_p. */
uint64_t bench_check_page(const uint8_t *p, uint64_t len, uint64_t base, uint64_t *first_p);
uint8_t *bench_page_at(const bench_side_t *s, uint32_t layer, uint32_t page);

/* What checking a room found: bytes that differ and where the first one is. */
typedef struct bench_diff {
    uint64_t bad;      /* bytes that differ */
    uint64_t first;    /* offset of the first one in its page */
    uint32_t layer;    /* of that page */
    uint32_t pos;      /* of that page in the room */
} bench_diff_t;

/* Check page (layer, position pos of room) held at p, adding to d. */
void bench_diff_page(bench_diff_t *d, const uint8_t *p, uint64_t len, pdx_room_t room,
                     uint32_t layer, uint32_t pos);

/* o->pages distinct free pages, at random; back to the free list. */
void bench_pick_pages(bench_side_t *s, uint32_t *out);
void bench_put_pages(bench_side_t *s, const uint32_t *pages);

/* Tables, pool, aux region, engine, registrations, layout; -1 after a message. */
int bench_side_open(bench_side_t *s, const pdx_config_t *cfg);
/* Destroys the engine before it unmaps the memory the engine writes into. */
void bench_side_close(bench_side_t *s);
/* Decode: accept the prefill peer. Prefill: connect, retrying refusals until the deadline. */
int bench_side_join(bench_side_t *s, const char *connect_addr);

int bench_write_all(int fd, const char *buf, size_t len);
void bench_sleep_ns(uint64_t ns);

#endif
