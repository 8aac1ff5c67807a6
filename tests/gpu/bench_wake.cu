/*
 * How soon, and at what CPU, a host thread can learn that a kernel ended
 * (nvidia platform, CUDA runtime and driver API; no pdx). The ways a gate
 * could be waited for, measured against each other: a kernel spins on a
 * host-mapped flag, the host releases it, and the time to each signal is
 * taken over ROUNDS rounds:
 *   - the word cuStreamWriteValue64 writes after the kernel, spun on;
 *   - cudaEventQuery of an event recorded after it, spun on;
 *   - a helper thread blocked in cudaEventSynchronize on a blocking-sync
 *     event (an interrupt), and a thread asleep in epoll woken by it;
 *   - cudaLaunchHostFunc after the kernel;
 *   - polls of the word between timed sleeps (epoll_pwait2) of 5-50 us,
 *     with the CPU each costs while the kernel runs;
 * and what a gate costs the producer: kernel launch rate alone and with a
 * word write, or a word and a blocking-sync event, every 64 launches.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define OK(x)                                                                    \
    do {                                                                         \
        cudaError_t e_ = (x);                                                    \
        if (e_ != cudaSuccess) {                                                 \
            printf("FATAL: %s: %s\n", #x, cudaGetErrorString(e_));               \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

enum { ROUNDS = 400 };

static volatile uint64_t *flag, *word;
static CUdeviceptr word_dev;
static cudaStream_t stream;
static cudaEvent_t blocking;
static int efd, epfd;
static volatile uint64_t helper_ns, host_fn_ns;
static volatile int armed, quit;

static uint64_t now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static double cpu_s(void)
{
    struct rusage r;

    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec +
           r.ru_stime.tv_usec / 1e6;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u64);
    printf("%-58s p50 %6.1f us  p90 %6.1f  p99 %6.1f\n", what, v[n / 2] / 1e3, v[n * 9 / 10] / 1e3,
           v[n * 99 / 100] / 1e3);
}

__global__ void spin(volatile uint64_t *f)
{
    if (threadIdx.x == 0)
        while (*f == 0)
            ;
}

__global__ void tiny(uint64_t *x)
{
    if (threadIdx.x == 0)
        *x += 1;
}

/* Waits on the blocking-sync event each round it is armed for, then wakes epfd. */
static void *helper(void *arg)
{
    const uint64_t one = 1;

    (void)arg;
    while (!quit) {
        if (!armed) {
            usleep(50);
            continue;
        }
        cudaEventSynchronize(blocking);
        helper_ns = now_ns();
        if (write(efd, &one, sizeof(one)) != sizeof(one))
            perror("eventfd write");
        armed = 0;
    }
    return NULL;
}

static void drain_efd(void)
{
    uint64_t v;

    if (read(efd, &v, sizeof(v)) < 0)
        v = 0;
}

/* The kernel, the word behind it and (blocking) the event; released after a pause. */
static uint64_t launch_and_release(int with_event, unsigned pause_us)
{
    uint64_t t0;

    *flag = 0;
    *word = 0;
    spin<<<1, 32, 0, stream>>>(flag);
    cuStreamWriteValue64(stream, word_dev, 1, 0);
    if (with_event) {
        OK(cudaEventRecord(blocking, stream));
        armed = 1;
    }
    usleep(pause_us);
    t0 = now_ns();
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    return t0;
}

static void host_fn(void *arg)
{
    (void)arg;
    host_fn_ns = now_ns();
}

int main(void)
{
    static uint64_t a[ROUNDS], b[ROUNDS];
    struct epoll_event ev = {.events = EPOLLIN};
    cudaEvent_t query;
    pthread_t th;

    OK(cudaSetDevice(0));
    OK(cudaHostAlloc((void **)&flag, 8, cudaHostAllocMapped));
    OK(cudaHostAlloc((void **)&word, 8, cudaHostAllocMapped));
    OK(cudaHostGetDevicePointer((void **)&word_dev, (void *)word, 0));
    OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    OK(cudaEventCreateWithFlags(&blocking, cudaEventBlockingSync | cudaEventDisableTiming));
    OK(cudaEventCreateWithFlags(&query, cudaEventDisableTiming));
    efd = eventfd(0, EFD_NONBLOCK);
    epfd = epoll_create1(0);
    epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev);
    prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);
    pthread_create(&th, NULL, helper, NULL);

    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = launch_and_release(1, 300);

        while (*word == 0)
            ;
        a[r] = now_ns() - t0;
        while (armed)
            ;
        b[r] = helper_ns - t0;
        drain_efd();
        OK(cudaStreamSynchronize(stream));
    }
    report("the stream's word, spun on", a, ROUNDS);
    report("blocking-sync event, on a helper thread", b, ROUNDS);

    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = launch_and_release(1, 300);
        struct epoll_event o;

        epoll_wait(epfd, &o, 1, 1000);
        a[r] = now_ns() - t0;
        drain_efd();
        while (armed)
            ;
        OK(cudaStreamSynchronize(stream));
    }
    report("a thread in epoll, woken by that helper", a, ROUNDS);

    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0;

        *flag = 0;
        spin<<<1, 32, 0, stream>>>(flag);
        OK(cudaEventRecord(query, stream));
        usleep(300);
        t0 = now_ns();
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        while (cudaEventQuery(query) == cudaErrorNotReady)
            ;
        a[r] = now_ns() - t0;
    }
    report("cudaEventQuery, spun on", a, ROUNDS);

    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0;

        *flag = 0;
        host_fn_ns = 0;
        spin<<<1, 32, 0, stream>>>(flag);
        OK(cudaLaunchHostFunc(stream, host_fn, NULL));
        usleep(300);
        t0 = now_ns();
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        while (host_fn_ns == 0)
            ;
        a[r] = host_fn_ns - t0;
        OK(cudaStreamSynchronize(stream));
    }
    report("cudaLaunchHostFunc ran", a, ROUNDS);

    {
        double c0, c1;
        uint64_t t0, t1;

        *flag = 0;
        spin<<<1, 32, 0, stream>>>(flag);
        OK(cudaEventRecord(blocking, stream));
        armed = 1;
        usleep(10000);
        c0 = cpu_s();
        t0 = now_ns();
        usleep(300000);
        c1 = cpu_s();
        t1 = now_ns();
        printf("CPU while the helper blocks on a pending event: %.2f%% of a core\n",
               100 * (c1 - c0) / ((t1 - t0) / 1e9));
        *flag = 1;
        while (armed)
            ;
        drain_efd();
        OK(cudaStreamSynchronize(stream));
    }

    for (unsigned p : {5u, 10u, 20u, 50u}) {
        const struct timespec ts = {0, (long)p * 1000};
        struct epoll_event o;
        double c0, c1;
        uint64_t t0, t1;
        int wakes = 0;
        char what[96];

        for (int r = 0; r < ROUNDS / 2; r++) {
            const struct timespec phase = {0, (long)((r * 7919u) % p) * 1000};

            t0 = launch_and_release(0, 200 + (r * 37) % 300);
            epoll_pwait2(epfd, &o, 1, &phase, NULL);
            while (*word == 0)
                epoll_pwait2(epfd, &o, 1, &ts, NULL);
            a[r] = now_ns() - t0;
            OK(cudaStreamSynchronize(stream));
        }
        *flag = 0;
        spin<<<1, 32, 0, stream>>>(flag);
        usleep(1000);
        c0 = cpu_s();
        t0 = now_ns();
        while (now_ns() - t0 < 300000000ull) {
            epoll_pwait2(epfd, &o, 1, &ts, NULL);
            wakes++;
        }
        c1 = cpu_s();
        t1 = now_ns();
        *flag = 1;
        OK(cudaStreamSynchronize(stream));
        snprintf(what, sizeof(what), "word polled every %u us: CPU %.1f%%, %.1f us a wake", p,
                 100 * (c1 - c0) / ((t1 - t0) / 1e9), (c1 - c0) * 1e6 / wakes);
        report(what, a, ROUNDS / 2);
    }

    {
        enum { LAUNCHES = 19200, EVERY = 64, REPS = 3 };
        static const char *const mode[] = {"alone", "a word every 64",
                                           "a word and a blocking-sync event every 64"};
        uint64_t *x;

        OK(cudaMalloc((void **)&x, 8));
        for (int rep = 0; rep < REPS; rep++) {
            double rate[3];

            for (int m = 0; m < 3; m++) {
                uint64_t t0;

                OK(cudaStreamSynchronize(stream));
                t0 = now_ns();
                for (int i = 0; i < LAUNCHES; i++) {
                    tiny<<<1, 32, 0, stream>>>(x);
                    if (m > 0 && i % EVERY == EVERY - 1)
                        cuStreamWriteValue64(stream, word_dev, (cuuint64_t)i, 0);
                    if (m > 1 && i % EVERY == EVERY - 1)
                        OK(cudaEventRecord(blocking, stream));
                }
                OK(cudaStreamSynchronize(stream));
                rate[m] = LAUNCHES / ((now_ns() - t0) / 1e9);
            }
            for (int m = 0; m < 3; m++)
                printf("launch rate, %s: %.0f/s (%.3f of alone)\n", mode[m], rate[m],
                       rate[m] / rate[0]);
        }
        cudaFree(x);
    }
    quit = 1;
    pthread_join(th, NULL);
    printf("bench_wake: done\n");
    return 0;
}
