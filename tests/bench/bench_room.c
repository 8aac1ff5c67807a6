/*
 * pdx_poll's cost: a room-table lookup plus atomic loads, on a present room,
 * alone and while another thread keeps writing the same room's state.
 * Each sample times a batch of polls; the table prints the median and p99
 * of the per-poll time over all batches.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bench_stats.h"
#include "room.h"
#include "util.h"

enum { BATCH = 1000, SAMPLES = 2000, ROOMS = 16384 };

static pdx_room_table_t table;
static _Atomic int stop;
static pdx_room_obj_t *hot;

static void *writer(void *arg)
{
    (void)arg;
    /* A shard's updates of the room's cache line: flip its state between
     * two non-terminal values as fast as it can. */
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        atomic_store_explicit(&hot->state, PDX_ROOM_TRANSFERRING, memory_order_release);
        atomic_store_explicit(&hot->state, PDX_ROOM_WAITING, memory_order_release);
    }
    return NULL;
}

static void measure(const char *label, uint64_t id, int json)
{
    static uint64_t ns[SAMPLES];
    volatile int sink = 0;

    for (int s = 0; s < SAMPLES; s++) {
        uint64_t t0 = pdx_now_ns();

        for (int i = 0; i < BATCH; i++)
            sink += pdx_room_poll(&table, id);
        ns[s] = pdx_now_ns() - t0;
    }
    (void)sink;
    double p50 = bench_percentile(ns, SAMPLES, 50) / BATCH;
    double p99 = bench_percentile(ns, SAMPLES, 99) / BATCH;
    if (json)
        printf("{\"case\":\"%s\",\"poll_ns_p50\":%.1f,\"poll_ns_p99\":%.1f,\"target_ns\":100}\n",
               label, p50, p99);
    else
        printf("%-34s %10.1f %10.1f %10s\n", label, p50, p99, p50 <= 100 ? "yes" : "NO");
}

int main(int argc, char **argv)
{
    int json = argc > 1 && strcmp(argv[1], "--json") == 0;
    pthread_t th;

    if (pdx_room_table_init(&table, ROOMS, NULL, NULL) != PDX_OK)
        return 1;
    /* A table filled to 3/4 of its capacity, as under load. */
    for (uint64_t i = 0; i < ROOMS * 3 / 4; i++)
        pdx_room_insert(&table, i * 0x9e3779b97f4a7c15ull, PDX_ROOM_TRANSFERRING, NULL);
    pdx_room_insert(&table, 424242, PDX_ROOM_WAITING, &hot);

    if (!json) {
        printf("pdx_poll on a present room (room table of %d, %d rooms in it)\n", ROOMS,
               ROOMS * 3 / 4 + 1);
        printf("%-34s %10s %10s %10s\n", "case", "p50[ns]", "p99[ns]", "<=100ns");
        printf("----------------------------------------------------------------------\n");
    }
    measure("present room", 424242, json);
    measure("absent room", 777, json);
    pthread_create(&th, NULL, writer, NULL);
    measure("present room, writer on its line", 424242, json);
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    pdx_room_table_fini(&table);
    return 0;
}
