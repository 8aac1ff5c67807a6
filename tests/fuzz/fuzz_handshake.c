/*
 * The handshake state machine of a live engine fed arbitrary byte streams:
 * each input is what one connection to the control listener sends before
 * it closes its side. The engine must answer or refuse, close, and be back
 * to no handshake and no peer within a deadline; a crash, a leak or a hang
 * in any of its threads is a finding. With FUZZ_AUTH_KEY set the engine has
 * a key (what a stranger meets).
 *
 * Endpoint addresses in the input are dialled by the engine: run this only
 * in a network namespace of its own (tools/fuzz.sh does, with unshare), where
 * nothing but loopback exists.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"

#define DEADLINE_MS 3000

static pdx_engine_t *eng;
static uint16_t port;
static uint8_t pool[64 * 1024];

static uint64_t now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    pdx_buffer_desc_t buf = {.bytes_per_page = 1024};
    pdx_group_desc_t g = {.buffers_per_layer = 1, .nbuffers = 1, .npages = 64, .buffers = &buf};
    pdx_layout_desc_t l = {.field_mask = PDX_LAYOUT_FIELD_GROUPS, .ngroups = 1, .groups = &g};
    const char *key = getenv("FUZZ_AUTH_KEY");
    pdx_config_t cfg;
    uint32_t layout;

    (void)argc, (void)argv;
    pdx_log_set_handler(fuzz_quiet, NULL);
    FUZZ_CHECK(pdx_config_init(&cfg) == PDX_OK, "config");
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp");
    pdx_config_set(&cfg, "PDX_SHARDS", "2");
    pdx_config_set(&cfg, "PDX_HANDSHAKE_TIMEOUT_MS", "1000");
    pdx_config_set(&cfg, "PDX_TRANSFER_TIMEOUT_MS", "1000");
    if (key)
        FUZZ_CHECK(pdx_config_set(&cfg, "PDX_AUTH_KEY", key) == PDX_OK, "key");
    FUZZ_CHECK(pdx_engine_create(&cfg, &eng) == PDX_OK, "engine");
    FUZZ_CHECK(pdx_mem_register(eng, pool, sizeof(pool), &buf.mem) == PDX_OK, "memory");
    FUZZ_CHECK(pdx_layout_create(eng, &l, &layout) == PDX_OK, "layout");
    port = (uint16_t)atoi(strrchr(pdx_engine_address(eng), ':') + 1);
    return 0;
}

/* Read what the engine says until it closes; false at the deadline. */
static bool drain_until_closed(int fd, uint64_t until)
{
    uint8_t sink[65536];

    while (now_ms() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&p, 1, 20) <= 0)
            continue;
        n = recv(fd, sink, sizeof(sink), 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    uint64_t until = now_ms() + DEADLINE_MS;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    pdx_stats_t st;
    size_t off = 0;

    FUZZ_CHECK(fd >= 0, "socket");
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s",
               strerror(errno));
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);

        if (n <= 0)
            break; /* the engine closed already: it refused */
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    FUZZ_CHECK(drain_until_closed(fd, until), "the engine kept a connection past %d ms",
               DEADLINE_MS);
    close(fd);
    /* back to no handshake and no peer before the next input */
    do {
        FUZZ_CHECK(pdx_engine_stats(eng, &st) == PDX_OK, "stats");
        if (st.handshakes == 0 && st.peers == 0)
            return 0;
        usleep(200);
    } while (now_ms() < until);
    FUZZ_CHECK(0, "%llu handshakes and %llu peers left after %d ms",
               (unsigned long long)st.handshakes, (unsigned long long)st.peers, DEADLINE_MS);
    return 0;
}
