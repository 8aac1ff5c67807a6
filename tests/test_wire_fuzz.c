/*
 * wire, thousands of randomly mutated frames and notify records from a
 * fixed seed: each decodes to a clean status, never past its bytes, and
 * whatever decodes encodes back to the bytes it came from.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"
#include "wire_reencode.h"
#include "wire_samples.h"

#define FUZZ_SEED   0x70647877u   /* fixed: a failure names its seed and iteration */
#define FUZZ_FRAMES 20000
#define FUZZ_NOTIFY 5000

static uint64_t rng(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Apply 1-4 mutations to p[0..*len) (capacity cap); the length may change. */
static void mutate(uint64_t *s, uint8_t *p, size_t *len, size_t cap)
{
    static const uint32_t edits[] = {0, 1, 2, 3, 4, 12, 16, 255, 4096, 4097, 65535, 65536,
                                     0x7fffffffu, 0x80000000u, 0xffffffffu, PDX_WIRE_MAX_FRAME};
    int n = 1 + (int)(rng(s) % 4);

    for (int m = 0; m < n && *len; m++) {
        size_t at = rng(s) % *len;

        switch (rng(s) % 6) {
        case 0: p[at] ^= (uint8_t)(1u << (rng(s) % 8)); break;
        case 1: p[at] = (uint8_t)rng(s); break;
        case 2: /* a length or count field: the header's, or any 4 bytes */
            if (rng(s) % 2 && *len >= PDX_WIRE_HEADER_SIZE)
                at = 8;
            if (at + 4 <= *len)
                put_le32(p + at, edits[rng(s) % PDX_ARRAY_SIZE(edits)] +
                                     (uint32_t)(rng(s) % 3) - 1);   /* the edit, +-1 */
            break;
        case 3: *len = rng(s) % *len; break;
        case 4: {
            size_t k = 1 + rng(s) % 16;

            for (size_t i = 0; i < k && *len < cap; i++)
                p[(*len)++] = (uint8_t)rng(s);
            break;
        }
        case 5: p[at] = 0; break;
        }
    }
}

/* Re-encode a decoded message; the bytes must be those decoded. */
static void assert_reencodes(const pdx_wire_msg_t *msg, const uint8_t *frame, size_t len,
                             int it)
{
    uint8_t *buf = malloc(len + 1);
    size_t out = 0;
    pdx_status_t st = wire_reencode(msg, buf, len + 1, &out);

    if (st != PDX_ERR_UNSUPPORTED) { /* another version may carry appended fields */
        cr_assert_eq(st, PDX_OK, "seed 0x%x iteration %d: decoded %s does not re-encode",
                     FUZZ_SEED, it, pdx_wire_type_str(msg->type));
        cr_assert_eq(out, len, "seed 0x%x iteration %d: re-encoded size", FUZZ_SEED, it);
        cr_assert_arr_eq(buf, frame, len, "seed 0x%x iteration %d: re-encoded bytes", FUZZ_SEED,
                         it);
    }
    free(buf);
}

Test(wire_fuzz, mutated_frames)
{
    uint64_t s = FUZZ_SEED;
    uint64_t errors_before = pdx_log_error_count();
    uint8_t *samples[NFRAMES];
    size_t sizes[NFRAMES], max = 0;
    int ok = 0, proto = 0;

    for (int i = 0; i < NFRAMES; i++) {
        samples[i] = encode_sample(i, &sizes[i]);
        max = PDX_MAX(max, sizes[i]);
    }
    for (int it = 0; it < FUZZ_FRAMES; it++) {
        int which = (int)(rng(&s) % NFRAMES);
        size_t len = sizes[which], cap = max + 64, need = 0;
        uint8_t *work = malloc(cap), *p;
        pdx_wire_header_t hdr;
        pdx_wire_msg_t msg;
        const char *why = NULL;
        pdx_status_t st, peek;

        memcpy(work, samples[which], len);
        mutate(&s, work, &len, cap);
        p = exact_copy(work, len);
        st = pdx_wire_decode(p, len, &msg, &why);
        peek = pdx_wire_peek(p, len, &hdr, &need, NULL);
        cr_assert(st == PDX_OK || st == PDX_ERR_PROTO,
                  "seed 0x%x iteration %d: decode returned %d", FUZZ_SEED, it, st);
        cr_assert(peek == PDX_OK || peek == PDX_INPROGRESS || peek == PDX_ERR_PROTO,
                  "seed 0x%x iteration %d: peek returned %d", FUZZ_SEED, it, peek);
        if (st == PDX_OK) {
            cr_assert(peek == PDX_OK && need == len, "seed 0x%x iteration %d", FUZZ_SEED, it);
            assert_reencodes(&msg, p, len, it);
            pdx_wire_msg_free(&msg);
            ok++;
        } else {
            cr_assert(why, "seed 0x%x iteration %d: no reason", FUZZ_SEED, it);
            proto++;
        }
        free(p);
        free(work);
    }
    for (int i = 0; i < NFRAMES; i++)
        free(samples[i]);
    cr_log_info("seed 0x%x: %d mutated frames decoded, %d refused", FUZZ_SEED, ok, proto);
    /* Both outcomes were reached: the mutations hit values and structure. */
    cr_assert(ok > 100 && proto > 100, "seed 0x%x: %d decoded, %d refused", FUZZ_SEED, ok, proto);
    cr_assert_eq(pdx_log_error_count(), errors_before, "wire must not log");
}

Test(wire_fuzz, mutated_notify_records)
{
    uint64_t s = FUZZ_SEED;
    pdx_wire_notify_t n = sample_notify(), got;
    uint8_t rec[PDX_WIRE_NOTIFY_SIZE + 16];
    size_t size;
    int ok = 0;

    cr_assert_eq(pdx_wire_notify_encode(&n, rec, sizeof(rec), &size), PDX_OK);
    for (int it = 0; it < FUZZ_NOTIFY; it++) {
        uint8_t work[sizeof(rec)], *p;
        size_t len = size;
        pdx_status_t st;

        memcpy(work, rec, size);
        mutate(&s, work, &len, sizeof(work));
        p = exact_copy(work, len);
        st = pdx_wire_notify_decode(p, len, &got, NULL);
        cr_assert(st == PDX_OK || st == PDX_ERR_PROTO, "seed 0x%x iteration %d: %d", FUZZ_SEED,
                  it, st);
        if (st == PDX_OK) {
            uint8_t again[PDX_WIRE_NOTIFY_SIZE];
            size_t n2;

            cr_assert_eq(pdx_wire_notify_encode(&got, again, sizeof(again), &n2), PDX_OK,
                         "seed 0x%x iteration %d", FUZZ_SEED, it);
            cr_assert_arr_eq(again, p, PDX_WIRE_NOTIFY_SIZE, "seed 0x%x iteration %d", FUZZ_SEED,
                             it);
            ok++;
        }
        free(p);
    }
    cr_assert(ok > 0 && ok < FUZZ_NOTIFY, "seed 0x%x: %d of %d decoded", FUZZ_SEED, ok,
              FUZZ_NOTIFY);
}
