/*
 * The cost pdx_send adds to the caller's thread: one push of a 256-page
 * chunk into a shard's submission ring while the shard drains it. Each
 * push is timed on its own; memcpy of the same page list is the baseline
 * measured in the same run.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bench_stats.h"
#include "ring.h"
#include "util.h"

enum { SAMPLES = 200000 };

static pdx_ring_t ring;
static _Atomic int stop;

static void *consumer(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        pdx_ring_cell_t *cell = pdx_ring_pop(&ring);

        if (cell)
            pdx_ring_done(&ring, cell);
        else
            pdx_cpu_relax();
    }
    return NULL;
}

int main(int argc, char **argv)
{
    static uint64_t push_ns[SAMPLES], copy_ns[SAMPLES];
    static uint32_t pages[256], sink[256];
    int json = argc > 1 && strcmp(argv[1], "--json") == 0;
    pdx_chunk_t chunk = {.room = 1, .ngroups = 1};
    pdx_pages_t list = {pages, 256};
    uint64_t again = 0;
    pthread_t th;

    for (uint32_t i = 0; i < 256; i++)
        pages[i] = i * 3;
    if (pdx_ring_init(&ring, 1024, 262144) != PDX_OK)
        return 1;
    pthread_create(&th, NULL, consumer, NULL);
    for (int s = 0; s < SAMPLES; s++) {
        uint64_t t0 = pdx_now_ns();
        pdx_status_t st = pdx_ring_push(&ring, &chunk, &list);

        push_ns[s] = pdx_now_ns() - t0;
        if (st == PDX_ERR_AGAIN) {
            again++;
            s--;
        }
        chunk.room++;
    }
    for (int s = 0; s < SAMPLES; s++) {
        uint64_t t0 = pdx_now_ns();

        memcpy(sink, pages, sizeof(pages));
        __asm__ __volatile__("" ::"r"(sink) : "memory");
        copy_ns[s] = pdx_now_ns() - t0;
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);

    double p50 = bench_percentile(push_ns, SAMPLES, 50);
    double p99 = bench_percentile(push_ns, SAMPLES, 99);
    double c50 = bench_percentile(copy_ns, SAMPLES, 50);
    if (json) {
        printf("{\"pages\":256,\"push_ns_p50\":%.0f,\"push_ns_p99\":%.0f,\"ns_per_page\":%.2f,"
               "\"memcpy_ns_p50\":%.0f,\"again\":%llu,\"target_ns\":1000}\n",
               p50, p99, p50 / 256, c50, (unsigned long long)again);
    } else {
        printf("ring push of a 256-page chunk, consumer draining (%d pushes)\n", SAMPLES);
        printf("%-10s %10s %10s %12s %14s %8s\n", "pages", "p50[ns]", "p99[ns]", "ns/page",
               "memcpy p50", "<=1us");
        printf("----------------------------------------------------------------------\n");
        printf("%-10d %10.0f %10.0f %12.2f %14.0f %8s\n", 256, p50, p99, p50 / 256, c50,
               p50 <= 1000 ? "yes" : "NO");
        printf("(timer resolution included; AGAIN answers while full: %llu)\n",
               (unsigned long long)again);
    }
    pdx_ring_fini(&ring);
    return 0;
}
