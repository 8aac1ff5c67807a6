#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "room.h"

static pdx_room_table_t table;

static void setup(void)   { cr_assert_eq(pdx_room_table_init(&table, 64, NULL, NULL), PDX_OK); }
static void teardown(void) { pdx_room_table_fini(&table); }

TestSuite(room, .init = setup, .fini = teardown);

Test(room, insert_poll_remove)
{
    pdx_room_obj_t *obj = NULL, *again = NULL;

    cr_expect_eq(pdx_room_poll(&table, 42), PDX_ROOM_NONE);
    cr_assert_eq(pdx_room_insert(&table, 42, PDX_ROOM_WAITING, &obj), PDX_OK);
    cr_expect_eq(pdx_room_poll(&table, 42), PDX_ROOM_WAITING);
    cr_expect_eq(pdx_room_lookup(&table, 42), obj);
    cr_expect_eq(pdx_room_insert(&table, 42, PDX_ROOM_BOOTSTRAPPING, &again), PDX_ERR_EXISTS);
    cr_expect_eq(again, obj);
    cr_expect_eq(pdx_room_poll(&table, 42), PDX_ROOM_WAITING);
    cr_expect_eq(pdx_room_remove(&table, 42), PDX_OK);
    cr_expect_eq(pdx_room_poll(&table, 42), PDX_ROOM_NONE);
    cr_expect_null(pdx_room_lookup(&table, 42));
    cr_expect_eq(pdx_room_remove(&table, 42), PDX_ERR_NOT_FOUND);
}

Test(room, id_zero_and_max_are_ordinary)
{
    cr_assert_eq(pdx_room_insert(&table, 0, PDX_ROOM_WAITING, NULL), PDX_OK);
    cr_assert_eq(pdx_room_insert(&table, UINT64_MAX, PDX_ROOM_TRANSFERRING, NULL), PDX_OK);
    cr_expect_eq(pdx_room_poll(&table, 0), PDX_ROOM_WAITING);
    cr_expect_eq(pdx_room_poll(&table, UINT64_MAX), PDX_ROOM_TRANSFERRING);
}

Test(room, full_table)
{
    for (uint64_t i = 0; i < 64; i++)
        cr_assert_eq(pdx_room_insert(&table, i * 7919, PDX_ROOM_WAITING, NULL), PDX_OK);
    cr_expect_eq(pdx_room_insert(&table, 1, PDX_ROOM_WAITING, NULL), PDX_ERR_FULL);
    cr_expect_eq(pdx_room_remove(&table, 7919), PDX_OK);
    cr_expect_eq(pdx_room_insert(&table, 1, PDX_ROOM_WAITING, NULL), PDX_OK);
    for (uint64_t i = 0; i < 64; i++)
        cr_expect_eq(pdx_room_poll(&table, i * 7919), i == 1 ? PDX_ROOM_NONE : PDX_ROOM_WAITING);
}

/* Ids whose hash lands on the same slot: all work, also after removals. */
Test(room, colliding_ids)
{
    uint64_t ids[6];
    int n = 0;
    uint32_t home = pdx_room_home(&table, 1000);

    for (uint64_t id = 1000; n < 6; id++) {
        if (pdx_room_home(&table, id) == home)
            ids[n++] = id;
    }
    for (int i = 0; i < n; i++)
        cr_assert_eq(pdx_room_insert(&table, ids[i], PDX_ROOM_WAITING, NULL), PDX_OK);
    for (int i = 0; i < n; i++) {
        pdx_room_obj_t *obj = pdx_room_lookup(&table, ids[i]);

        cr_assert_not_null(obj, "id %d not found", i);
        cr_expect(pdx_room_advance(obj, PDX_ROOM_TRANSFERRING));
    }
    cr_expect_eq(pdx_room_remove(&table, ids[2]), PDX_OK);
    cr_expect_eq(pdx_room_remove(&table, ids[0]), PDX_OK);
    for (int i = 0; i < n; i++)
        cr_expect_eq(pdx_room_poll(&table, ids[i]),
                     (i == 0 || i == 2) ? PDX_ROOM_NONE : PDX_ROOM_TRANSFERRING, "id %d", i);
}

/* Random churn against a reference model, with a table small enough to wrap. */
Test(room, churn_matches_model)
{
    enum { IDS = 200 };
    int present[IDS] = {0};
    unsigned seed = 12345;
    int count = 0;

    for (int step = 0; step < 20000; step++) {
        int k = rand_r(&seed) % IDS;
        uint64_t id = (uint64_t)k * 0x9e3779b97f4a7c15ull;

        if (present[k]) {
            cr_assert_eq(pdx_room_remove(&table, id), PDX_OK, "step %d", step);
            present[k] = 0;
            count--;
        } else {
            pdx_status_t st = pdx_room_insert(&table, id, PDX_ROOM_WAITING, NULL);

            if (count == 64) {
                cr_assert_eq(st, PDX_ERR_FULL, "step %d", step);
                continue;
            }
            cr_assert_eq(st, PDX_OK, "step %d", step);
            present[k] = 1;
            count++;
        }
        if (step % 97 == 0) {
            for (int j = 0; j < IDS; j++)
                cr_assert_eq(pdx_room_poll(&table, (uint64_t)j * 0x9e3779b97f4a7c15ull),
                             present[j] ? PDX_ROOM_WAITING : PDX_ROOM_NONE, "step %d id %d",
                             step, j);
        }
    }
}

/* A reader holding a stale object pointer never sees a recycled room. */
Test(room, stale_object_is_not_reported)
{
    pdx_room_obj_t *a, *b;
    int32_t state = -7;

    cr_assert_eq(pdx_room_insert(&table, 11, PDX_ROOM_TRANSFERRING, &a), PDX_OK);
    cr_expect(pdx_room_read(a, 11, &state));
    cr_expect_eq(state, PDX_ROOM_TRANSFERRING);
    cr_expect_not(pdx_room_read(a, 12, &state), "another id matched");
    cr_assert_eq(pdx_room_remove(&table, 11), PDX_OK);
    cr_expect_not(pdx_room_read(a, 11, &state), "a released room was reported");
    cr_assert_eq(pdx_room_insert(&table, 12, PDX_ROOM_WAITING, &b), PDX_OK);
    cr_assert_eq(a, b, "the free list should hand the object out again");
    cr_expect_not(pdx_room_read(a, 11, &state), "a recycled room was reported under its old id");
    cr_expect(pdx_room_read(b, 12, &state));
    cr_expect_eq(state, PDX_ROOM_WAITING);
}

/* An unlinked object is out of the index but not reusable until it is freed. */
Test(room, unlinked_object_is_not_reused_until_freed)
{
    pdx_room_obj_t *a = NULL, *b = NULL, *other = NULL, *got = NULL;
    int32_t state;

    for (uint64_t id = 100; id < 100 + 63; id++)
        cr_assert_eq(pdx_room_insert(&table, id, PDX_ROOM_WAITING, NULL), PDX_OK);
    cr_assert_eq(pdx_room_insert(&table, 7, PDX_ROOM_WAITING, &a), PDX_OK);
    cr_assert_eq(pdx_room_insert(&table, 8, PDX_ROOM_WAITING, NULL), PDX_ERR_FULL);
    other = pdx_room_lookup(&table, 100);
    got = other;
    cr_expect_eq(pdx_room_unlink(&table, 7, &got), PDX_ERR_NOT_FOUND, "another object's id");
    got = NULL;
    cr_assert_eq(pdx_room_unlink(&table, 7, &got), PDX_OK);
    cr_expect_eq(got, a);
    cr_expect_not(pdx_room_read(a, 7, &state), "an unlinked room was reported");
    cr_expect_eq(pdx_room_poll(&table, 7), PDX_ROOM_NONE);
    got = NULL;
    cr_expect_eq(pdx_room_unlink(&table, 7, &got), PDX_ERR_NOT_FOUND, "unlinked twice");
    cr_expect_eq(pdx_room_insert(&table, 8, PDX_ROOM_WAITING, NULL), PDX_ERR_FULL,
                 "the unlinked object was handed out before it was freed");
    pdx_room_free(&table, a);
    cr_assert_eq(pdx_room_insert(&table, 8, PDX_ROOM_WAITING, &b), PDX_OK);
    cr_expect_eq(a, b);
    cr_expect(pdx_room_read(b, 8, &state));
}

Test(room, states_move_forward_and_terminal_states_stay)
{
    pdx_room_obj_t *obj;

    cr_assert_eq(pdx_room_insert(&table, 5, PDX_ROOM_BOOTSTRAPPING, &obj), PDX_OK);
    cr_expect(pdx_room_advance(obj, PDX_ROOM_WAITING));
    cr_expect_not(pdx_room_advance(obj, PDX_ROOM_BOOTSTRAPPING));
    cr_expect_not(pdx_room_advance(obj, PDX_ROOM_WAITING));
    cr_expect(pdx_room_advance(obj, PDX_ROOM_SUCCESS));
    cr_expect_not(pdx_room_advance(obj, PDX_ROOM_FAILED));
    cr_expect_not(pdx_room_fail(obj, PDX_ERR_PEER, "late"));
    cr_expect_eq(pdx_room_state(obj), PDX_ROOM_SUCCESS);
    cr_expect_str_eq(obj->fail_msg, "");
}

Test(room, first_failure_message_wins)
{
    pdx_room_obj_t *obj;

    cr_assert_eq(pdx_room_insert(&table, 6, PDX_ROOM_TRANSFERRING, &obj), PDX_OK);
    cr_expect(pdx_room_fail(obj, PDX_ERR_TIMEOUT, "deadline %d ms", 50));
    cr_expect_not(pdx_room_fail(obj, PDX_ERR_PEER, "peer gone"));
    cr_expect_not(pdx_room_advance(obj, PDX_ROOM_SUCCESS));
    cr_expect_eq(pdx_room_state(obj), PDX_ROOM_FAILED);
    cr_expect_eq(obj->fail_status, PDX_ERR_TIMEOUT);
    cr_expect_str_eq(obj->fail_msg, "deadline 50 ms");

    /* A new incarnation of the id starts clean. */
    cr_assert_eq(pdx_room_remove(&table, 6), PDX_OK);
    cr_assert_eq(pdx_room_insert(&table, 6, PDX_ROOM_WAITING, &obj), PDX_OK);
    cr_expect_str_eq(obj->fail_msg, "");
    cr_expect(pdx_room_fail(obj, PDX_ERR_ABORTED, "aborted"));
}

/*
 * Concurrency: updaters insert fresh ids (never reused), walk each through
 * WAITING -> TRANSFERRING -> SUCCESS or FAILED and remove it; pollers poll
 * the ids and check what each one shows only moves forward: NONE, then
 * non-decreasing states, then NONE for good once removed. Run under tsan.
 */
enum { UPDATERS = 2, POLLERS = 2, ROUNDS = 20000, WINDOW = 8 };

static _Atomic uint64_t latest[UPDATERS];
static _Atomic int stop;
static _Atomic int violations;

static uint64_t make_id(int t, uint64_t n) { return (uint64_t)t << 48 | n; }

static void *updater(void *arg)
{
    int t = (int)(intptr_t)arg;

    for (uint64_t n = 1; n <= ROUNDS; n++) {
        uint64_t id = make_id(t, n);
        pdx_room_obj_t *obj;

        while (pdx_room_insert(&table, id, PDX_ROOM_WAITING, &obj) == PDX_ERR_FULL)
            sched_yield();
        atomic_store(&latest[t], n);
        pdx_room_advance(obj, PDX_ROOM_TRANSFERRING);
        if (n % 3 == 0)
            pdx_room_fail(obj, PDX_ERR_TIMEOUT, "room %lu", (unsigned long)n);
        else
            pdx_room_advance(obj, PDX_ROOM_SUCCESS);
        pdx_room_remove(&table, id);
    }
    return NULL;
}

static void *poller(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;

    while (!atomic_load(&stop)) {
        int t = rand_r(&seed) % UPDATERS;
        uint64_t base = atomic_load(&latest[t]);
        uint64_t id = make_id(t, base + (uint64_t)(rand_r(&seed) % WINDOW));
        int last = PDX_ROOM_NONE, seen_room = 0;

        for (int i = 0; i < 64; i++) {
            int s = pdx_room_poll(&table, id);

            if (s == PDX_ROOM_NONE) {
                if (seen_room)
                    last = 100; /* removed: nothing may show up again */
                continue;
            }
            if (last == 100 || (seen_room && s < last && s != PDX_ROOM_FAILED) ||
                (last == PDX_ROOM_FAILED && s != PDX_ROOM_FAILED) ||
                (last == PDX_ROOM_SUCCESS && s != PDX_ROOM_SUCCESS))
                atomic_fetch_add(&violations, 1);
            seen_room = 1;
            last = s;
        }
    }
    return NULL;
}

Test(room, concurrent_pollers_and_updaters, .timeout = 120)
{
    pthread_t up[UPDATERS], pl[POLLERS];

    for (int i = 0; i < POLLERS; i++)
        pthread_create(&pl[i], NULL, poller, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < UPDATERS; i++)
        pthread_create(&up[i], NULL, updater, (void *)(intptr_t)i);
    for (int i = 0; i < UPDATERS; i++)
        pthread_join(up[i], NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < POLLERS; i++)
        pthread_join(pl[i], NULL);
    cr_expect_eq(atomic_load(&violations), 0, "%d polls went backwards or saw a recycled room",
                 atomic_load(&violations));
    cr_expect_eq(table.used, 0);
}
