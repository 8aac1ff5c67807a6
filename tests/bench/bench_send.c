/*
 * What pdx_send costs the caller's thread, next to the synchronous
 * alternative measured in the same run: plan the chunk, post its writes and
 * wait for their completions on the caller's thread (what a transfer engine
 * without a worker pool does).
 *
 * Geometry: DeepSeek-R1 MLA KV, 61 layers, 576 B per token per layer, page
 * size 1 token; chunks of 16, 64 and 256 random pages; tcp on 127.0.0.1.
 *
 * Each PDX_SHARD_SPIN_US given (default 20 and 200) runs with its own pair
 * of engines, and prints what the spin costs and saves: the wake-ups
 * written to prefill's sleeping shards while the calls ran, per pdx_send (a
 * call that finds its shard asleep writes its eventfd: a system call), and
 * the CPU the shard threads of both engines used over the run, in cores.
 *
 *     bench_send [--json] [SPIN_US ...]
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_stats.h"
#include "plan.h"
#include "transport.h"
#include "util.h"

enum { LAYERS = 61, BPP = 576, NPAGES = 4096, ROOMS_PER_BATCH = 16, BATCHES = 24 };

typedef struct side {
    pdx_engine_t *e;
    uint8_t      *pool;
    uint32_t      mem, layout;
} side_t;

/* The geometry as a layout of one MLA buffer per layer in memory `mem`. */
typedef struct geometry {
    pdx_buffer_desc_t bufs[LAYERS];
    pdx_group_desc_t  group;
    pdx_layout_desc_t desc;
} geometry_t;

static void geometry_init(geometry_t *g, uint32_t mem)
{
    for (uint32_t l = 0; l < LAYERS; l++)
        g->bufs[l] = (pdx_buffer_desc_t){.mem = mem, .offset = (uint64_t)l * NPAGES * BPP,
                                         .bytes_per_page = BPP};
    g->group = (pdx_group_desc_t){.buffers_per_layer = 1, .nbuffers = LAYERS, .npages = NPAGES,
                                  .buffers = g->bufs};
    g->desc = (pdx_layout_desc_t){.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
                                  .ngroups = 1, .layer_begin = 0, .layer_end = LAYERS,
                                  .groups = &g->group};
}

static int open_side(side_t *s, const char *spin_us)
{
    geometry_t geo;
    pdx_config_t cfg;
    size_t len = (size_t)LAYERS * NPAGES * BPP;

    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    if (pdx_config_set(&cfg, "PDX_SHARD_SPIN_US", spin_us) != PDX_OK)
        return -1;
    s->pool = calloc(1, len);
    if (!s->pool || pdx_engine_create(&cfg, &s->e) != PDX_OK ||
        pdx_mem_register(s->e, s->pool, len, &s->mem) != PDX_OK)
        return -1;
    geometry_init(&geo, s->mem);
    return pdx_layout_create(s->e, &geo.desc, &s->layout) == PDX_OK ? 0 : -1;
}

/* CPU time of this process's shard threads so far, ns (schedstat). */
static uint64_t shard_cpu_ns(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *t;
    uint64_t sum = 0;

    while (d && (t = readdir(d))) {
        char path[300], comm[32] = "";
        unsigned long long ns = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", t->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        if (!fgets(comm, sizeof(comm), f))
            comm[0] = 0;
        fclose(f);
        if (strncmp(comm, "pdx-shard", 9) != 0)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", t->d_name);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%llu", &ns) == 1)
                sum += ns;
            fclose(f);
        }
    }
    if (d)
        closedir(d);
    return sum;
}

static uint64_t kicks(pdx_engine_t *e)
{
    pdx_stats_t st;

    return pdx_engine_stats(e, &st) == PDX_OK ? st.send_kicks : 0;
}

static void shuffle(uint32_t *v, uint32_t n, unsigned *seed)
{
    for (uint32_t i = 0; i < n; i++)
        v[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rand_r(seed) % (i + 1), t = v[i];

        v[i] = v[j];
        v[j] = t;
    }
}

static int wait_room(pdx_engine_t *e, uint64_t room)
{
    uint64_t deadline = pdx_deadline_ns(30000);
    pdx_room_state_t st;

    while ((st = pdx_poll(e, room)) != PDX_ROOM_SUCCESS && st != PDX_ROOM_FAILED &&
           pdx_now_ns() < deadline)
        usleep(50);
    while (pdx_release(e, room) == PDX_INPROGRESS && pdx_now_ns() < deadline)
        usleep(50);
    return st == PDX_ROOM_SUCCESS ? 0 : -1;
}

/* pdx_send of `pages`-page chunks: per-call times in ns into out, and the
 * wake-ups written to prefill's shards while the calls ran into *kicks_p. */
static int measure_send(side_t *pf, side_t *dc, uint32_t peer, uint32_t pages, uint64_t *out,
                        uint32_t *n_p, uint64_t *kicks_p)
{
    static uint64_t room = 1;
    uint32_t src[NPAGES], dst[NPAGES], n = 0;
    unsigned seed = 11;

    for (uint32_t b = 0; b < BATCHES; b++) {
        uint64_t first = room;

        shuffle(src, NPAGES, &seed);
        shuffle(dst, NPAGES, &seed);
        for (uint32_t r = 0; r < ROOMS_PER_BATCH; r++) {
            pdx_pages_t d = {dst + r * pages, pages};

            if (pdx_expect(dc->e, peer, first + r, dc->layout, &d, NULL, 1, 30000) != PDX_OK)
                return -1;
        }
        /* The usual order: decode's metadata is there before the chunk. */
        for (uint32_t r = 0; r < ROOMS_PER_BATCH; r++) {
            uint64_t deadline = pdx_deadline_ns(10000);

            while (pdx_poll(pf->e, first + r) != PDX_ROOM_WAITING && pdx_now_ns() < deadline)
                usleep(20);
        }
        *kicks_p -= kicks(pf->e);
        for (uint32_t r = 0; r < ROOMS_PER_BATCH; r++) {
            pdx_pages_t s = {src + r * pages, pages};
            uint64_t t0 = pdx_now_ns();
            pdx_status_t st = pdx_send(pf->e, first + r, pf->layout, &s, NULL, NULL,
                                       PDX_SEND_LAST);

            out[n++] = pdx_now_ns() - t0;
            if (st != PDX_OK)
                return -1;
        }
        *kicks_p += kicks(pf->e);
        for (uint32_t r = 0; r < ROOMS_PER_BATCH; r++)
            if (wait_room(dc->e, first + r) != 0 || wait_room(pf->e, first + r) != 0)
                return -1;
        room += ROOMS_PER_BATCH;
    }
    *n_p = n;
    return 0;
}

/* ------------------------------------------- the synchronous alternative */

typedef struct tside {
    pdx_tp_t    *tp;
    pdx_tp_cq_t *cq;
    pdx_tp_ep_t *ep;
    pdx_tp_mr_t *mr;
} tside_t;

static const pdx_transport_ops_t *ops = &pdx_tcp_ops;

static int topen(tside_t *t, uint8_t *pool, size_t len)
{
    pdx_tp_params_t params = {.host = "127.0.0.1", .progress_timeout_ms = 30000,
                              .max_msg_size = 1 << 20};
    pdx_tp_ep_attr_t attr = {.sq_depth = 256, .rq_depth = 4};

    return ops->open(&params, &t->tp) != PDX_OK || ops->cq_create(t->tp, 260, &t->cq) != PDX_OK ||
           ops->ep_create(t->tp, t->cq, &attr, &t->ep) != PDX_OK ||
           ops->mr_reg(t->tp, pool, len, PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE,
                       &t->mr) != PDX_OK ? -1 : 0;
}

static void tclose(tside_t *t)
{
    ops->ep_destroy(t->ep);
    ops->mr_dereg(t->mr);
    ops->cq_destroy(t->cq);
    ops->close(t->tp);
}

/* Plan, post with send-queue credits and wait for every completion. */
static int sync_send(tside_t *t, pdx_plan_t *plan, const pdx_tp_rkey_t *rkey)
{
    pdx_tp_write_t wr[32];
    pdx_run_t runs[32];
    uint64_t posted = 0, completed = 0, deadline = pdx_deadline_ns(30000);
    pdx_tp_wc_t wc;
    uint32_t n;

    for (;;) {
        n = pdx_plan_next(plan, runs, 32);
        while (posted + n - completed > 255 || (n == 0 && completed < posted)) {
            if (pdx_now_ns() > deadline)
                return -1;
            if (ops->cq_poll(t->cq, &wc, 1) == 1) {
                if (wc.status != PDX_OK)
                    return -1;
                completed = wc.wr_id + 1;
            }
        }
        if (n == 0)
            return 0;
        for (uint32_t i = 0; i < n; i++)
            wr[i] = (pdx_tp_write_t){.wr_id = posted + i, .mr = t->mr,
                                     .offset = runs[i].src_offset, .length = runs[i].len,
                                     .remote_addr = rkey->addr + runs[i].dst_offset,
                                     .rkey = rkey->rkey,
                                     .flags = (posted + i + 1) % 16 == 0 || i + 1 == n
                                                  ? PDX_TP_SIGNALED : 0};
        if (ops->post_write(t->ep, wr, n) != PDX_OK)
            return -1;
        posted += n;
    }
}

static int measure_sync(side_t *pf, side_t *dc, uint32_t pages, uint64_t *out, uint32_t *n_p)
{
    size_t len = (size_t)LAYERS * NPAGES * BPP;
    const pdx_layout_t *layout = NULL;
    pdx_layout_t *copy;
    geometry_t geo;
    uint32_t src[NPAGES], dst[NPAGES], n = 0;
    tside_t a, b;
    pdx_tp_addr_t aa, ba;
    pdx_tp_rkey_t rkey;
    unsigned seed = 11;
    char err[128];
    int rc = -1;

    geometry_init(&geo, 0);
    if (pdx_layout_from_desc(&geo.desc, &copy, err, sizeof(err)) != PDX_OK)
        return -1;
    layout = copy;
    if (topen(&a, pf->pool, len) != 0 || topen(&b, dc->pool, len) != 0)
        goto out;
    ops->ep_address(a.ep, &aa);
    ops->ep_address(b.ep, &ba);
    ops->ep_connect(a.ep, &ba);
    ops->ep_connect(b.ep, &aa);
    ops->mr_remote(b.mr, &rkey);
    for (uint32_t i = 0; i < BATCHES * ROOMS_PER_BATCH; i++) {
        pdx_pages_t s = {src, pages}, d = {dst, pages};
        pdx_plan_t plan;
        uint64_t t0;

        if (i % ROOMS_PER_BATCH == 0) {
            shuffle(src, NPAGES, &seed);
            shuffle(dst, NPAGES, &seed);
        }
        s.pages = src + (i % ROOMS_PER_BATCH) * pages;
        d.pages = dst + (i % ROOMS_PER_BATCH) * pages;
        t0 = pdx_now_ns();
        if (pdx_plan_init(&plan, layout, layout, &s, &d, 1 << 20, 0, err, sizeof(err)) != PDX_OK ||
            sync_send(&a, &plan, &rkey) != 0)
            goto out;
        out[n++] = pdx_now_ns() - t0;
    }
    *n_p = n;
    rc = 0;
out:
    tclose(&a);
    tclose(&b);
    pdx_layout_free(copy);
    return rc;
}

/* One pair of engines at PDX_SHARD_SPIN_US=spin_us: every chunk size. */
static int run_spin(const char *spin_us, int json)
{
    static uint64_t send_ns[BATCHES * ROOMS_PER_BATCH], sync_ns[BATCHES * ROOMS_PER_BATCH];
    static const uint32_t sizes[] = {16, 64, 256};
    side_t pf = {0}, dc = {0};
    uint32_t peer, n, m;
    int rc = -1;

    if (open_side(&pf, spin_us) != 0 || open_side(&dc, spin_us) != 0 ||
        pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) != PDX_OK) {
        fprintf(stderr, "bench_send: setup failed (PDX_SHARD_SPIN_US=%s)\n", spin_us);
        goto out;
    }
    for (size_t i = 0; i < PDX_ARRAY_SIZE(sizes); i++) {
        uint32_t pages = sizes[i];
        uint64_t c0 = shard_cpu_ns(), t0 = pdx_now_ns(), wall, cpu, woke = 0;

        if (measure_send(&pf, &dc, peer, pages, send_ns, &n, &woke) != 0) {
            fprintf(stderr, "bench_send: a transfer failed at %u pages\n", pages);
            goto out;
        }
        wall = pdx_now_ns() - t0;
        cpu = shard_cpu_ns() - c0;
        if (measure_sync(&pf, &dc, pages, sync_ns, &m) != 0) {
            fprintf(stderr, "bench_send: a synchronous transfer failed at %u pages\n", pages);
            goto out;
        }
        /* the first call of each batch: its caller comes back from a sleep */
        uint64_t firsts[BATCHES], rest[BATCHES * ROOMS_PER_BATCH];
        uint32_t nf = 0, nr = 0;

        for (uint32_t k = 0; k < n; k++) {
            if (k % ROOMS_PER_BATCH == 0)
                firsts[nf++] = send_ns[k];
            else
                rest[nr++] = send_ns[k];
        }
        double f50 = bench_percentile(firsts, nf, 50), r99 = bench_percentile(rest, nr, 99);
        double p50 = bench_percentile(send_ns, n, 50), p99 = bench_percentile(send_ns, n, 99);
        double s50 = bench_percentile(sync_ns, m, 50);
        double wake = (double)woke / n, cores = (double)cpu / (double)wall;
        if (json)
            printf("{\"spin_us\":%s,\"pages\":%u,\"send_ns_p50\":%.0f,\"send_ns_p99\":%.0f,"
                   "\"ns_per_page\":%.2f,\"sync_ns_p50\":%.0f,\"ratio\":%.1f,"
                   "\"kicks_per_send\":%.3f,\"shard_cores\":%.3f,\"first_ns_p50\":%.0f,"
                   "\"rest_ns_p99\":%.0f}\n", spin_us, pages, p50, p99, p50 / pages, s50, s50 / p50,
                   wake, cores, f50, r99);
        else
            printf("%-5s %-6u %8.0f %8.0f %8.0f %8.0f %7.2f %6s %9.1f %7.0fx %9.3f %6.3f\n",
                   spin_us, pages, p50, p99, f50, r99, p50 / pages,
                   p50 <= 1000 && p99 <= 5000 ? "yes" : "NO", s50 / 1000, s50 / p50, wake, cores);
    }
    rc = 0;
out:
    pdx_engine_destroy(pf.e);
    pdx_engine_destroy(dc.e);
    free(pf.pool);
    free(dc.pool);
    return rc;
}

int main(int argc, char **argv)
{
    static const char *const spins[] = {"20", "200"};
    int json = argc > 1 && strcmp(argv[1], "--json") == 0, first = 1 + json;

    if (!json) {
        printf("pdx_send on the caller's thread vs synchronous post + wait (tcp, 127.0.0.1)\n");
        printf("DeepSeek-R1 MLA: %d layers x %d B per page (page size 1), random page maps\n",
               LAYERS, BPP);
        printf("spin: PDX_SHARD_SPIN_US; kick/send: wake-ups written to a sleeping shard per "
               "pdx_send; cores: the shard threads' CPU over the run\n");
        printf("first: the first call of each batch (its caller just woke from a sleep), p50; "
               "rest: the others, p99\n");
        printf("%-5s %-6s %8s %8s %8s %8s %7s %6s %9s %8s %9s %6s\n", "spin", "pages", "p50[ns]",
               "p99[ns]", "first", "rest p99", "ns/page", "target", "sync[us]", "ratio",
               "kick/send", "cores");
        printf("------------------------------------------------------------------------------"
               "-------------\n");
    }
    if (argc > first) {
        for (int i = first; i < argc; i++)
            if (run_spin(argv[i], json) != 0)
                return 1;
        return 0;
    }
    for (size_t i = 0; i < PDX_ARRAY_SIZE(spins); i++)
        if (run_spin(spins[i], json) != 0)
            return 1;
    return 0;
}
