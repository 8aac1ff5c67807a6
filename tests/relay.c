/* The man in the middle of relay.h. */
#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire.h"

#ifdef RELAY_NO_CRITERION
#define RELAY_CHECK(c)                                   \
    do {                                                 \
        if (!(c)) {                                      \
            fprintf(stderr, "relay: %s failed\n", #c);   \
            abort();                                     \
        }                                                \
    } while (0)
#else
#include <criterion/criterion.h>
#define RELAY_CHECK(c) cr_assert(c)
#endif

static void record(relay_t *r, int dir, const uint8_t *p, size_t n)
{
    pthread_mutex_lock(&r->lock);
    if (r->rec_len[dir] + n > r->rec_cap[dir]) {
        size_t cap = r->rec_cap[dir] ? r->rec_cap[dir] : 4096;

        while (cap < r->rec_len[dir] + n)
            cap *= 2;
        r->rec[dir] = realloc(r->rec[dir], cap);
        RELAY_CHECK(r->rec[dir] != NULL);
        r->rec_cap[dir] = cap;
    }
    memcpy(r->rec[dir] + r->rec_len[dir], p, n);
    r->rec_len[dir] += n;
    pthread_mutex_unlock(&r->lock);
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int dial(uint32_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Connector -> target: forward the whole frames of buf[0..*len), tampered
 * as the mode says; what is left of a frame stays. -1: a send failed. */
static int forward_frames(relay_t *r, int to, uint8_t *buf, size_t *len)
{
    size_t off = 0;

    while (*len - off >= PDX_WIRE_HEADER_SIZE) {
        uint16_t type = (uint16_t)(buf[off + 4] | buf[off + 5] << 8);
        uint32_t body = (uint32_t)buf[off + 8] | (uint32_t)buf[off + 9] << 8 |
                        (uint32_t)buf[off + 10] << 16 | (uint32_t)buf[off + 11] << 24;
        size_t n = PDX_WIRE_HEADER_SIZE + (size_t)body;
        bool armed = atomic_load(&r->armed) && !atomic_load(&r->tampered);
        uint8_t *f = buf + off;

        if (body > PDX_WIRE_MAX_SEALED || *len - off < n)
            break;
        if (r->mode == RELAY_FLIP_SEALED && type == PDX_WIRE_SEALED && !atomic_load(&r->tampered)) {
            f[PDX_WIRE_HEADER_SIZE + body / 2] ^= 0x10;
            atomic_store(&r->tampered, 1);
        }
        if (r->mode == RELAY_INJECT_PLAIN && armed) {
            uint8_t beat[64];
            size_t blen;

            RELAY_CHECK(pdx_wire_encode_heartbeat(&(pdx_wire_heartbeat_t){1, 2}, beat,
                                                  sizeof(beat), &blen) == PDX_OK);
            if (send_all(to, beat, blen) < 0)
                return -1;
            atomic_store(&r->tampered, 1);
        }
        if (send_all(to, f, n) < 0)
            return -1;
        if (r->mode == RELAY_REPEAT_SEALED && armed && type == PDX_WIRE_SEALED) {
            if (send_all(to, f, n) < 0)
                return -1;
            atomic_store(&r->tampered, 1);
        }
        off += n;
    }
    memmove(buf, buf + off, *len - off);
    *len -= off;
    return 0;
}

static void *relay_main(void *arg)
{
    relay_t *r = arg;
    size_t cap = PDX_WIRE_MAX_SEALED + 4096, have = 0;
    uint8_t *buf = malloc(cap), chunk[65536];
    int c = -1, t = -1;

    RELAY_CHECK(buf != NULL);
    while (!atomic_load(&r->stop) && c < 0) {
        struct pollfd p = {.fd = r->lfd, .events = POLLIN};

        if (poll(&p, 1, 50) > 0)
            c = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
    }
    if (c >= 0)
        t = dial(r->target);
    while (c >= 0 && t >= 0 && !atomic_load(&r->stop)) {
        struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = t, .events = POLLIN}};
        ssize_t n;

        if (poll(p, 2, 50) <= 0)
            continue;
        if (p[0].revents) {
            n = recv(c, buf + have, cap - have, 0);
            if (n <= 0)
                break;
            record(r, 0, buf + have, (size_t)n);
            have += (size_t)n;
            if (forward_frames(r, t, buf, &have) < 0)
                break;
        }
        if (p[1].revents) {
            n = recv(t, chunk, sizeof(chunk), 0);
            if (n <= 0)
                break;
            record(r, 1, chunk, (size_t)n);
            if (send_all(c, chunk, (size_t)n) < 0)
                break;
        }
    }
    if (c >= 0)
        close(c);
    if (t >= 0)
        close(t);
    free(buf);
    return NULL;
}

void relay_start(relay_t *r, relay_mode_t mode, const char *target_addr)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof(a);
    const char *colon = strrchr(target_addr, ':');

    memset(r, 0, sizeof(*r));
    r->mode = mode;
    RELAY_CHECK(colon != NULL);
    r->target = (uint32_t)atoi(colon + 1);
    pthread_mutex_init(&r->lock, NULL);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    RELAY_CHECK(r->lfd >= 0);
    RELAY_CHECK(bind(r->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
    RELAY_CHECK(listen(r->lfd, 4) == 0);
    RELAY_CHECK(getsockname(r->lfd, (struct sockaddr *)&a, &alen) == 0);
    r->port = ntohs(a.sin_port);
    RELAY_CHECK(pthread_create(&r->thread, NULL, relay_main, r) == 0);
}

const char *relay_addr(relay_t *r, char *buf, size_t len)
{
    snprintf(buf, len, "127.0.0.1:%u", r->port);
    return buf;
}

void relay_stop(relay_t *r)
{
    if (r->lfd <= 0)
        return;
    atomic_store(&r->stop, 1);
    pthread_join(r->thread, NULL);
    close(r->lfd);
    r->lfd = 0;
}

void relay_free(relay_t *r)
{
    relay_stop(r);
    free(r->rec[0]);
    free(r->rec[1]);
    pthread_mutex_destroy(&r->lock);
    memset(r, 0, sizeof(*r));
}

int relay_saw(relay_t *r, int dir, const void *needle, size_t n)
{
    int found;

    pthread_mutex_lock(&r->lock);
    found = r->rec_len[dir] >= n && memmem(r->rec[dir], r->rec_len[dir], needle, n) != NULL;
    pthread_mutex_unlock(&r->lock);
    return found;
}
