/*
 * One-sided transfers by memory descriptor on PDX_TEST_TRANSPORT: WRITEs
 * (and READs where the transport reads) of random runs, every byte of both
 * pools checked, also those no entry names; many transfers at once; bad
 * entries refused before anything moves; a gate that never opens, a
 * release before the end, a peer that goes, a region deregistered at the
 * peer: each ends its transfer with a status and a message.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_fixture.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

static side_t ini, tgt; /* the initiator posts, the target's memory is named */
static side_t lone;     /* connected to nobody */
static uint32_t peer;
static bool tgt_read; /* the target's pool was the source of a READ */

static void fini(void)
{
    side_close(&ini);
    side_close(&tgt);
    side_close(&lone);
}

/* Both engines, the initiator connected to the target by its descriptor. */
static void open_pair(const char *const *cfg)
{
    const geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};
    uint8_t buf[PDX_ENGINE_DESC_MAX];
    size_t len = 0;

    side_open(&ini, &g, cfg);
    side_open(&tgt, &g, cfg);
    tgt_read = false;
    cr_assert_eq(pdx_engine_desc(tgt.e, buf, sizeof(buf), &len), PDX_OK);
    cr_assert_eq(pdx_peer_connect_desc(ini.e, buf, len, 5000, &peer), PDX_OK);
}

static size_t pool_len(const side_t *s)
{
    return (size_t)s->g.layers * s->g.npages * s->g.bytes_per_page;
}

typedef struct mdesc {
    uint8_t bytes[PDX_MEM_DESC_MAX];
    size_t  len;
} mdesc_t;

static pdx_desc_t mem_desc(const side_t *s, uint32_t mem, mdesc_t *d)
{
    cr_assert_eq(pdx_mem_desc(s->e, mem, d->bytes, sizeof(d->bytes), &d->len), PDX_OK);
    return (pdx_desc_t){d->bytes, d->len};
}

static void fill_random(uint8_t *p, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rand_r(seed);
}

/* n random entries over the pool (some adjacent, so they coalesce), none
 * overlapping on the target side; lengths of 1 byte to 3 pages. */
static uint32_t random_entries(pdx_xfer_entry_t *x, uint32_t n, size_t len, unsigned *seed)
{
    const size_t slot = len / n;
    uint32_t k = 0;

    for (uint32_t i = 0; i < n; i++) {
        uint64_t l = 1 + (uint64_t)rand_r(seed) % MIN(slot, 3 * 4096u);
        uint64_t at = (uint64_t)i * slot + (uint64_t)rand_r(seed) % (slot - l + 1);
        uint64_t from = (uint64_t)rand_r(seed) % (len - l + 1);

        if (i % 4 == 1 && k) { /* continues the one before on both sides */
            const pdx_xfer_entry_t *p = &x[k - 1];

            at = p->remote_offset + p->len;
            from = p->offset + p->len;
            l = MIN(l, (uint64_t)(i + 1) * slot - at);
            if (from + l > len || l == 0)
                continue;
        }
        x[k++] = (pdx_xfer_entry_t){.mem = ini.mem, .remote = 0, .offset = from,
                                    .remote_offset = at, .len = l};
    }
    return k;
}

/* The pools' expected bytes after the entries ran. */
static void apply(pdx_xfer_op_t op, const pdx_xfer_entry_t *x, uint32_t n, uint8_t *want_ini,
                  uint8_t *want_tgt)
{
    for (uint32_t i = 0; i < n; i++) {
        if (op == PDX_XFER_WRITE)
            memcpy(want_tgt + x[i].remote_offset, ini.pool + x[i].offset, x[i].len);
        else
            memcpy(want_ini + x[i].offset, tgt.pool + x[i].remote_offset, x[i].len);
    }
}

static void round_trip(pdx_xfer_op_t op, uint32_t nxfers, uint32_t per, unsigned seed)
{
    const size_t len = pool_len(&ini);
    uint8_t *want_ini = malloc(len), *want_tgt = malloc(len);
    pdx_xfer_entry_t *x = calloc((size_t)nxfers * per, sizeof(*x));
    pdx_xfer_t *h = calloc(nxfers, sizeof(*h));
    uint32_t *nx = calloc(nxfers, sizeof(*nx)), at = PDX_MAX_XFER_ENTRIES;
    pdx_desc_t d;
    mdesc_t md;

    cr_assert(want_ini && want_tgt && x && h && nx);
    fill_random(ini.pool, len, &seed);
    /* Once the target's bytes were READ, the test does not write them again:
     * what tells the target they left is the initiator's completion, an edge
     * through the socket that TSan cannot see (its sendmsg() releases before
     * it reads the buffer). */
    if (!tgt_read)
        fill_random(tgt.pool, len, &seed);
    tgt_read = tgt_read || op == PDX_XFER_READ;
    memcpy(want_ini, ini.pool, len);
    memcpy(want_tgt, tgt.pool, len);
    d = mem_desc(&tgt, tgt.mem, &md);
    /* transfer i owns the i-th slice of the target, so none overlaps */
    for (uint32_t i = 0; i < nxfers; i++) {
        pdx_xfer_entry_t *xi = x + (size_t)i * per;

        nx[i] = random_entries(xi, per, len / nxfers, &seed);
        for (uint32_t k = 0; k < nx[i]; k++) {
            xi[k].remote_offset += i * (len / nxfers);
            if (op == PDX_XFER_READ) { /* each its own slice of the initiator too */
                const uint64_t o = xi[k].offset;

                xi[k].offset = xi[k].remote_offset;
                xi[k].remote_offset = o;
            }
        }
        apply(op, xi, nx[i], want_ini, want_tgt);
    }
    for (uint32_t i = 0; i < nxfers; i++) {
        pdx_status_t st;

        while ((st = pdx_xfer_post(ini.e, op, &d, 1, x + (size_t)i * per, nx[i], NULL, 10000,
                                   &h[i])) == PDX_ERR_AGAIN)
            usleep(100);
        cr_assert_eq(st, PDX_OK, "transfer %u: %s", i, pdx_status_str(st));
    }
    cr_assert_eq(pdx_xfer_wait(ini.e, h, nxfers, 20000, &at), PDX_OK);
    cr_assert_eq(at, nxfers);
    for (uint32_t i = 0; i < nxfers; i++) {
        cr_assert_eq(pdx_xfer_poll(ini.e, h[i]), PDX_OK);
        cr_assert_eq(release_wait(ini.e, h[i], 5000), PDX_OK);
        cr_assert_eq(pdx_xfer_poll(ini.e, h[i]), PDX_ERR_NOT_FOUND, "released");
    }
    cr_assert_eq(memcmp(tgt.pool, want_tgt, len), 0, "the target's bytes differ");
    cr_assert_eq(memcmp(ini.pool, want_ini, len), 0, "the initiator's bytes differ");
    free(want_ini);
    free(want_tgt);
    free(x);
    free(h);
    free(nx);
}

Test(engine_xfer, writes_every_byte, .fini = fini, .timeout = 60)
{
    pdx_stats_t before, after;

    open_pair(NULL);
    cr_assert_eq(pdx_engine_stats(ini.e, &before), PDX_OK);
    round_trip(PDX_XFER_WRITE, 1, 64, 1);
    round_trip(PDX_XFER_WRITE, 16, 200, 2);
    cr_assert_eq(pdx_engine_stats(ini.e, &after), PDX_OK);
    cr_expect_eq(after.rooms_success - before.rooms_success, 17u);
    cr_expect(after.writes_posted - before.writes_posted < 1 + 16 * 200u,
              "adjacent entries coalesce");
}

/* Writes cut at a small PDX_MAX_MSG_SIZE, over several endpoints per peer. */
Test(engine_xfer, writes_cut_and_striped, .fini = fini, .timeout = 60)
{
    const char *const cfg[] = {"PDX_MAX_MSG_SIZE=4096", "PDX_QPS_PER_PEER=3",
                               "PDX_SQ_DEPTH=16", "PDX_SIGNAL_EVERY=4", "PDX_SHARDS=2", NULL};

    open_pair(cfg);
    round_trip(PDX_XFER_WRITE, 8, 100, 3);
}

Test(engine_xfer, reads_every_byte, .fini = fini, .timeout = 60)
{
    open_pair(NULL);
    round_trip(PDX_XFER_READ, 1, 64, 4);
    round_trip(PDX_XFER_READ, 8, 100, 5);
}

/* READs cut at a small PDX_MAX_MSG_SIZE over several endpoints, with WRITEs
 * into the same region in flight on the same endpoints. */
Test(engine_xfer, reads_and_writes_at_once, .fini = fini, .timeout = 60)
{
    const char *const cfg[] = {"PDX_MAX_MSG_SIZE=4096", "PDX_QPS_PER_PEER=2",
                               "PDX_SQ_DEPTH=16", "PDX_SIGNAL_EVERY=4", NULL};
    pdx_xfer_entry_t w, r;
    pdx_xfer_t h[2];
    unsigned seed = 9;
    size_t half;
    pdx_desc_t d;
    mdesc_t md;

    open_pair(cfg);
    half = pool_len(&ini) / 2;
    w = (pdx_xfer_entry_t){.mem = ini.mem, .offset = 0, .remote_offset = 0, .len = half};
    r = (pdx_xfer_entry_t){.mem = ini.mem, .offset = half, .remote_offset = half, .len = half};
    fill_random(ini.pool, pool_len(&ini), &seed);
    fill_random(tgt.pool, pool_len(&tgt), &seed);
    d = mem_desc(&tgt, tgt.mem, &md);
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &w, 1, NULL, 10000, &h[0]), PDX_OK);
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_READ, &d, 1, &r, 1, NULL, 10000, &h[1]), PDX_OK);
    cr_assert_eq(pdx_xfer_wait(ini.e, h, 2, 20000, NULL), PDX_OK);
    cr_assert_eq(memcmp(tgt.pool, ini.pool, half), 0, "written");
    cr_assert_eq(memcmp(ini.pool + half, tgt.pool + half, half), 0, "read");
    for (int i = 0; i < 2; i++)
        cr_assert_eq(release_wait(ini.e, h[i], 5000), PDX_OK);
}

/* A READ past the remote region's end: refused before anything moves. */
Test(engine_xfer, read_out_of_range_is_refused, .fini = fini, .timeout = 60)
{
    const pdx_xfer_entry_t x = {.mem = 0, .remote_offset = 1, .len = 64 * 4096 * 2};
    pdx_xfer_t h;
    pdx_desc_t d;
    mdesc_t md;

    open_pair(NULL);
    d = mem_desc(&tgt, tgt.mem, &md);
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_READ, &d, 1, &x, 1, NULL, 0, &h), PDX_ERR_RANGE);
}

Test(engine_xfer, bad_entries_are_refused, .fini = fini, .timeout = 60)
{
    const size_t len = pool_len(&tgt);
    pdx_xfer_entry_t x = {.mem = ini.mem, .len = 8};
    mdesc_t md, mine, bad;
    pdx_desc_t d, two[2];
    pdx_xfer_t h = 0;
    char msg[256];

    open_pair(NULL);
    d = mem_desc(&tgt, tgt.mem, &md);
#define POST(ds, nd, xs, nx) pdx_xfer_post(ini.e, PDX_XFER_WRITE, ds, nd, xs, nx, NULL, 0, &h)
    x.remote_offset = len - 4;
    cr_assert_eq(POST(&d, 1, &x, 1), PDX_ERR_RANGE, "past the remote region");
    x.remote_offset = 0, x.offset = pool_len(&ini) - 7;
    cr_assert_eq(POST(&d, 1, &x, 1), PDX_ERR_RANGE, "past the local region");
    x.offset = 0, x.mem = 777;
    cr_assert_eq(POST(&d, 1, &x, 1), PDX_ERR_NOT_FOUND, "an unregistered local region");
    x.mem = ini.mem, x.remote = 1;
    cr_assert_eq(POST(&d, 1, &x, 1), PDX_ERR_INVALID, "no such descriptor");
    x.remote = 0, x.len = 0;
    cr_assert_eq(POST(&d, 1, &x, 1), PDX_ERR_INVALID, "0 bytes");
    x.len = 8;
    cr_assert_eq(POST(&d, 1, &x, 0), PDX_ERR_INVALID, "no entries");
    cr_assert_eq(pdx_xfer_post(ini.e, (pdx_xfer_op_t)7, &d, 1, &x, 1, NULL, 0, &h),
                 PDX_ERR_INVALID);
    /* bytes that are no descriptor; one of this engine; of two engines */
    bad = md;
    bad.bytes[0] ^= 1;
    two[0] = (pdx_desc_t){bad.bytes, bad.len};
    cr_assert_eq(POST(two, 1, &x, 1), PDX_ERR_PROTO);
    two[0] = mem_desc(&ini, ini.mem, &mine);
    cr_assert_eq(POST(two, 1, &x, 1), PDX_ERR_INVALID, "the engine's own memory");
    two[0] = d;
    two[1] = mem_desc(&ini, ini.mem, &mine);
    cr_assert_eq(POST(two, 2, &x, 1), PDX_ERR_INVALID, "two engines in one transfer");
    /* an engine with no connection to the one named */
    side_open(&lone, &ini.g, NULL);
    x.mem = lone.mem;
    cr_assert_eq(pdx_xfer_post(lone.e, PDX_XFER_WRITE, &d, 1, &x, 1, NULL, 0, &h),
                 PDX_ERR_NOT_FOUND);
    x.mem = ini.mem;
    /* unknown handles, and room ids of the transfers' range */
    cr_assert_eq(pdx_xfer_poll(ini.e, 5), PDX_ERR_NOT_FOUND);
    cr_assert_eq(pdx_xfer_poll(ini.e, 1ull << 63 | 12345), PDX_ERR_NOT_FOUND);
    cr_assert_eq(pdx_xfer_release(ini.e, 1ull << 63 | 12345), PDX_ERR_NOT_FOUND);
    cr_assert_eq(pdx_xfer_error(ini.e, 5, msg, sizeof(msg)), PDX_ERR_NOT_FOUND);
    {
        uint32_t pg = 0;
        const pdx_pages_t p = {&pg, 1};

        cr_assert_eq(pdx_send(ini.e, 1ull << 63, ini.layout, &p, NULL, NULL, 0),
                     PDX_ERR_INVALID);
    }
#undef POST
    /* and after all that, a good one still goes */
    round_trip(PDX_XFER_WRITE, 1, 8, 6);
}

/* A gate that never opens: the deadline ends it, and a wait without a
 * timeout returns then. */
Test(engine_xfer, deadline_ends_a_gated_transfer, .fini = fini, .timeout = 60)
{
    static volatile uint64_t word;
    const pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &word, .value = 1};
    const pdx_xfer_entry_t x = {.mem = ini.mem, .len = 4096};
    pdx_xfer_t h;
    uint32_t at = 99;
    pdx_desc_t d;
    mdesc_t md;
    char msg[256];

    open_pair(NULL);
    d = mem_desc(&tgt, tgt.mem, &md);
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &x, 1, &gate, 300, &h), PDX_OK);
    cr_assert_eq(pdx_xfer_wait(ini.e, &h, 1, 20, &at), PDX_INPROGRESS);
    cr_assert_eq(at, 0u);
    cr_assert_eq(pdx_xfer_wait(ini.e, &h, 1, -1, &at), PDX_ERR_TIMEOUT);
    cr_assert_eq(pdx_xfer_error(ini.e, h, msg, sizeof(msg)), PDX_OK);
    cr_assert(strstr(msg, "deadline"), "%s", msg);
    cr_assert_eq(release_wait(ini.e, h, 5000), PDX_OK);

    /* the same gate opened: it goes */
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &x, 1, &gate, 5000, &h), PDX_OK);
    usleep(20000);
    cr_assert_eq(pdx_xfer_poll(ini.e, h), PDX_INPROGRESS, "held by its gate");
    __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
    cr_assert_eq(pdx_xfer_wait(ini.e, &h, 1, 5000, NULL), PDX_OK);
    cr_assert_eq(memcmp(tgt.pool, ini.pool, 4096), 0);
    cr_assert_eq(release_wait(ini.e, h, 5000), PDX_OK);
    /* one the engine's destroy ends (never released; gate shut) */
    __atomic_store_n(&word, 0, __ATOMIC_RELEASE);
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &x, 1, &gate, 5000, &h), PDX_OK);
}

/* Released before its gate opened: aborted, its region pinned until then. */
Test(engine_xfer, release_aborts_and_unpins, .fini = fini, .timeout = 60)
{
    static volatile uint64_t word;
    const pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &word, .value = 1};
    pdx_xfer_entry_t x = {.len = 64};
    uint32_t extra;
    uint8_t *buf = calloc(1, 4096);
    pdx_status_t st;
    pdx_xfer_t h;
    pdx_desc_t d;
    mdesc_t md;

    open_pair(NULL);
    cr_assert_eq(pdx_mem_register(ini.e, buf, 4096, &extra), PDX_OK);
    x.mem = extra;
    d = mem_desc(&tgt, tgt.mem, &md);
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &x, 1, &gate, 10000, &h), PDX_OK);
    cr_assert_eq(pdx_mem_deregister(ini.e, extra), PDX_ERR_STATE, "pinned by the transfer");
    for (int i = 0; (st = pdx_xfer_release(ini.e, h)) == PDX_INPROGRESS && i < 1000; i++)
        usleep(1000);
    cr_assert_eq(st, PDX_OK);
    cr_assert_eq(pdx_mem_deregister(ini.e, extra), PDX_OK, "unpinned by its release");
    free(buf);
}

/* The target goes while a transfer waits for its gate: it fails for the peer. */
Test(engine_xfer, gone_peer_fails_it, .fini = fini, .timeout = 60)
{
    static volatile uint64_t word;
    const pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &word, .value = 1};
    const pdx_xfer_entry_t x = {.mem = ini.mem, .len = 4096};
    pdx_xfer_t h;
    pdx_desc_t d;
    mdesc_t md;

    open_pair(NULL);
    d = mem_desc(&tgt, tgt.mem, &md);
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &x, 1, &gate, 20000, &h), PDX_OK);
    side_close(&tgt);
    cr_assert_eq(pdx_xfer_wait(ini.e, &h, 1, 10000, NULL), PDX_ERR_PEER);
    cr_assert_eq(release_wait(ini.e, h, 5000), PDX_OK);
    cr_assert_eq(pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &x, 1, NULL, 0, &h),
                 PDX_ERR_NOT_FOUND, "no connection to it any more");
}

/* A region the target deregistered: the transfer fails, nothing crashes,
 * and its other region is unchanged. */
Test(engine_xfer, deregistered_target_region_fails, .fini = fini, .timeout = 60)
{
    uint8_t *buf = calloc(1, 8192), keep[64];
    const pdx_xfer_entry_t x = {.mem = ini.mem, .len = 64};
    uint32_t extra;
    pdx_status_t st;
    pdx_xfer_t h;
    pdx_desc_t d;
    mdesc_t md;

    open_pair(NULL);
    cr_assert_eq(pdx_mem_register(tgt.e, buf, 8192, &extra), PDX_OK);
    d = mem_desc(&tgt, extra, &md);
    /* its description reaches the initiator over the control connection */
    for (int i = 0; (st = pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &x, 1, NULL, 5000, &h)) ==
                         PDX_ERR_AGAIN && i < 1000; i++)
        usleep(1000);
    cr_assert_eq(st, PDX_OK);
    cr_assert_eq(pdx_xfer_wait(ini.e, &h, 1, 5000, NULL), PDX_OK);
    cr_assert_eq(memcmp(buf, ini.pool, 64), 0);
    cr_assert_eq(release_wait(ini.e, h, 5000), PDX_OK);
    memcpy(keep, tgt.pool, sizeof(keep));
    cr_assert_eq(pdx_mem_deregister(tgt.e, extra), PDX_OK);
    st = pdx_xfer_post(ini.e, PDX_XFER_WRITE, &d, 1, &x, 1, NULL, 5000, &h);
    if (st == PDX_OK) {
        st = pdx_xfer_wait(ini.e, &h, 1, 10000, NULL);
        cr_assert(st < 0, "a write into a deregistered region: %s", pdx_status_str(st));
        cr_assert_eq(release_wait(ini.e, h, 5000), PDX_OK);
    } else {
        cr_assert_eq(st, PDX_ERR_STATE, "%s", pdx_status_str(st));
    }
    cr_assert_eq(memcmp(keep, tgt.pool, sizeof(keep)), 0);
    free(buf);
}
