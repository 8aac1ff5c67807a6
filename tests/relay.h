/*
 * A man in the middle for control connections: a thread that listens on
 * 127.0.0.1, takes one connection, dials the target port and relays bytes
 * both ways, recording each direction. From the connector to the target it
 * relays whole frames and can tamper with them (relay_mode_t); the other
 * way it relays bytes as they come.
 */
#ifndef PDX_TEST_RELAY_H
#define PDX_TEST_RELAY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef enum relay_mode {
    RELAY_PLAIN,        /* relay and record */
    RELAY_FLIP_SEALED,  /* flip a bit in the first SEALED frame's body */
    RELAY_INJECT_PLAIN, /* once armed: put a plaintext HEARTBEAT before the next frame */
    RELAY_REPEAT_SEALED /* once armed: send the next SEALED frame twice */
} relay_mode_t;

typedef struct relay {
    relay_mode_t   mode;
    _Atomic int    armed;
    _Atomic int    stop;
    int            lfd;
    uint32_t       port;        /* where it listens */
    uint32_t       target;      /* the port it dials on 127.0.0.1 */
    pthread_t      thread;
    pthread_mutex_t lock;
    uint8_t       *rec[2];      /* [0] connector -> target, [1] target -> connector */
    size_t         rec_len[2], rec_cap[2];
    _Atomic int    tampered;    /* the tampering happened */
} relay_t;

/* Listen and start the thread; relay_addr() is what to connect to. */
void relay_start(relay_t *r, relay_mode_t mode, const char *target_addr);
const char *relay_addr(relay_t *r, char *buf, size_t len);
/* Stop the thread, close everything (records stay until relay_free). */
void relay_stop(relay_t *r);
void relay_free(relay_t *r);

/* Whether needle (n bytes) occurs in direction dir's record. */
int relay_saw(relay_t *r, int dir, const void *needle, size_t n);

#endif
