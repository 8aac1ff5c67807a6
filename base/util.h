/* Small helpers shared by every pdx source file. */
#ifndef PDX_UTIL_H
#define PDX_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PDX_LIKELY(x)   __builtin_expect(!!(x), 1)
#define PDX_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PDX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PDX_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PDX_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PDX_CACHELINE 64

#define pdx_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

static inline void pdx_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Monotonic clock in nanoseconds. */
static inline uint64_t pdx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t pdx_deadline_ns(uint32_t timeout_ms)
{
    return pdx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

/* `ms` milliseconds from now on `clock`, as pthread's timed waits take it. */
static inline struct timespec pdx_timespec_in(clockid_t clock, uint32_t ms)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Smallest power of two >= v (v >= 1, v <= 2^31). */
static inline uint32_t pdx_pow2_ceil(uint32_t v)
{
    v--;
    v |= v >> 1; v |= v >> 2; v |= v >> 4; v |= v >> 8; v |= v >> 16;
    return v + 1;
}

/* xorshift64: the next number of a pseudo-random sequence (tests and
 * benchmarks; the state must not be 0). */
static inline uint64_t pdx_xorshift64(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

/* 64-bit mix (splitmix64 finalizer): spreads room ids over shards and slots. */
static inline uint64_t pdx_hash64(uint64_t x)
{
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Intrusive doubly linked lists: structs with `prev` and `next` members,
 * headed by a pointer. Push at the head; unlink from anywhere. */
#define PDX_LIST_PUSH(head, node)                 \
    do {                                          \
        (node)->prev = NULL;                      \
        (node)->next = (head);                    \
        if (head)                                 \
            (head)->prev = (node);                \
        (head) = (node);                          \
    } while (0)

#define PDX_LIST_UNLINK(head, node)               \
    do {                                          \
        if ((node)->prev)                         \
            (node)->prev->next = (node)->next;    \
        else                                      \
            (head) = (node)->next;                \
        if ((node)->next)                         \
            (node)->next->prev = (node)->prev;    \
    } while (0)

/* Under LeakSanitizer a mapped table is a root: what only it points to
 * (a room's pages, a peer it holds) is not a leak. */
#if defined(__SANITIZE_ADDRESS__)
#define PDX_LSAN_ROOTS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PDX_LSAN_ROOTS 1
#endif
#endif
#ifdef PDX_LSAN_ROOTS
#include <sanitizer/lsan_interface.h>
#endif

/* Zeroed memory that costs nothing until touched (a table sized by its
 * capacity, used by what it holds), or NULL. Give it back with pdx_unmap. */
static inline void *pdx_map_zeroed(size_t len)
{
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

    if (p == MAP_FAILED)
        return NULL;
#ifdef PDX_LSAN_ROOTS
    __lsan_register_root_region(p, len ? len : 1);
#endif
    return p;
}

/* The pages of a mapping from pdx_map_zeroed() go on NUMA node `node`
 * when first touched, as long as it has memory (mbind, MPOL_PREFERRED),
 * whichever thread touches them. node < 0, or a kernel without NUMA
 * policies: where the toucher runs, as before. */
static inline void pdx_map_prefer_node(void *p, size_t len, int node)
{
    unsigned long mask[4] = {0};

    if (!p || node < 0 || node >= (int)(sizeof(mask) * 8))
        return;
    mask[node / (8 * sizeof(mask[0]))] = 1ul << (node % (8 * sizeof(mask[0])));
    /* MPOL_PREFERRED is 1; maxnode counts bits */
    (void)syscall(SYS_mbind, p, len ? len : 1, 1, mask, (unsigned long)node + 2, 0u);
}

static inline void pdx_unmap(void *p, size_t len)
{
    if (!p)
        return;
#ifdef PDX_LSAN_ROOTS
    __lsan_unregister_root_region(p, len ? len : 1);
#endif
    munmap(p, len ? len : 1);
}

#endif
