/*
 * Shared by the wire tests: sample messages with non-trivial contents, a
 * byte builder for frames made by hand, and decoding from heap buffers of
 * exactly the frame's size (so AddressSanitizer catches any over-read).
 */
#ifndef PDX_TEST_WIRE_SAMPLES_H
#define PDX_TEST_WIRE_SAMPLES_H

#include "wire.h"

/* The sample frames encode_sample() builds. */
enum { F_HELLO, F_MEM, F_LAYOUT, F_EP, F_ROOM, F_ROOM_NOAUX, F_ABORT, F_ACK, F_BEAT, F_ERROR,
       F_CREDIT, F_READY, F_RESET, F_BYE, F_AUTH, F_EXPORT, NFRAMES };

#define SAMPLE_MEMS 4 /* the last in pieces */
extern const pdx_wire_mem_entry_t sample_mem_entries[SAMPLE_MEMS];

/* A heap copy of exactly len bytes (malloc(0) for 0). */
uint8_t *exact_copy(const void *src, size_t len);

/* A growing little-endian byte builder. */
typedef struct bld {
    uint8_t *p;
    size_t   len, cap;
} bld_t;

void put(bld_t *b, uint64_t v, unsigned n);
void put_str(bld_t *b, const char *s, size_t n);   /* u16 length, then n bytes of s */
/* Wrap body in a frame header (frees body); the frame is exactly *len_p bytes. */
uint8_t *frame_of(uint16_t type, bld_t *body, size_t *len_p);

/* Decode from an exact heap copy; a decoded message is freed. */
pdx_status_t decode_copy(const void *frame, size_t len, const char **why);
/* Frame body as `type`, assert PDX_ERR_PROTO with a reason containing `reason`. */
void expect_proto(uint16_t type, bld_t *body, const char *reason);

pdx_layout_t *sample_layout(void);
void sample_hello(pdx_wire_hello_t *m);
void sample_room(pdx_wire_room_t *m, pdx_pages_t pages[3], int aux);
pdx_wire_notify_t sample_notify(void);
/* Encode sample frame `which` into buf with the encoder's own checks. */
pdx_status_t encode_sample_into(int which, void *buf, size_t cap, size_t *len_p);
/* Sample frame `which` in a heap buffer of exactly its size. */
uint8_t *encode_sample(int which, size_t *len_p);
/* Decode sample `which`; *frame_p keeps the frame (a ROOM points into it). */
void decode_sample(int which, pdx_wire_msg_t *msg, uint8_t **frame_p);

#endif
