/*
 * What an idle engine costs, by its room table's capacity: an engine with
 * PDX_ROOMS at the default and at the largest value is created, left idle
 * for a few seconds with one peer connected (so the control thread ticks
 * and heartbeats), and its process CPU time and RSS growth are printed,
 * with the ratio to the default measured in the same run. Each engine runs
 * in a child process of its own, so neither sees the other's memory.
 *
 *     bench_idle [SECONDS]   (default 3)
 */
#include <pdx/pdx.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct result {
    double create_s; /* pdx_engine_create */
    double cpu_pct;  /* process CPU while idle, % of one core */
    long   rss_kib;  /* RSS growth from before create to the end of the idle time */
    int    ok;
} result_t;

static long rss_kib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    if (f)
        fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static double now_s(int clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pdx_engine_t *open_engine(const char *rooms)
{
    pdx_config_t cfg;
    pdx_engine_t *e = NULL;

    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp");
    if (rooms && pdx_config_set(&cfg, "PDX_ROOMS", rooms) != PDX_OK)
        return NULL;
    return pdx_engine_create(&cfg, &e) == PDX_OK ? e : NULL;
}

/* In a child: measure one engine, write the result to fd. */
static void measure(const char *rooms, int seconds, int fd)
{
    result_t r = {0};
    long rss0 = rss_kib();
    double t0 = now_s(CLOCK_MONOTONIC), c0, w0;
    pdx_engine_t *e = open_engine(rooms), *peer = open_engine(NULL);
    uint32_t h;

    r.create_s = now_s(CLOCK_MONOTONIC) - t0;
    if (e && peer && pdx_peer_connect(peer, pdx_engine_address(e), 5000, &h) == PDX_OK) {
        c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
        w0 = now_s(CLOCK_MONOTONIC);
        sleep((unsigned)seconds);
        r.cpu_pct = 100.0 * (now_s(CLOCK_PROCESS_CPUTIME_ID) - c0) / (now_s(CLOCK_MONOTONIC) - w0);
        r.rss_kib = rss_kib() - rss0;
        r.ok = 1;
    }
    if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(1);
    _exit(0); /* the time to destroy the engines is not measured */
}

static result_t run(const char *rooms, int seconds)
{
    result_t r = {0};
    int fds[2], status;
    pid_t pid;

    if (pipe(fds) != 0)
        return r;
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        measure(rooms, seconds, fds[1]);
    }
    close(fds[1]);
    if (read(fds[0], &r, sizeof(r)) != (ssize_t)sizeof(r))
        r.ok = 0;
    close(fds[0]);
    waitpid(pid, &status, 0);
    return r;
}

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 3;
    const char *sizes[] = {NULL, "1048576", "16777216"};
    const char *names[] = {"default (16384)", "1048576", "16777216 (the most)"};
    result_t base = {0};

    printf("%-22s %10s %12s %14s %10s %10s\n", "PDX_ROOMS", "create[s]", "idle CPU[%]",
           "RSS[MiB]", "CPU ratio", "RSS ratio");
    for (int i = 0; i < 3; i++) {
        result_t r = run(sizes[i], seconds);

        if (i == 0)
            base = r;
        if (!r.ok) {
            printf("%-22s engine not created (PDX_ROOMS=%s)\n", names[i], sizes[i]);
            continue;
        }
        printf("%-22s %10.3f %12.2f %14.1f %10.2f %10.2f\n", names[i], r.create_s, r.cpu_pct,
               r.rss_kib / 1024.0, base.cpu_pct > 0 ? r.cpu_pct / base.cpu_pct : 0.0,
               base.rss_kib > 0 ? (double)r.rss_kib / (double)base.rss_kib : 0.0);
    }
    return 0;
}
