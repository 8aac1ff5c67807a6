/*
 * wire, encoders given what they must refuse: a buffer one byte too small
 * (or none) for every sample frame, which leaves the buffer and the length
 * untouched, and fields outside their limits.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "wire_samples.h"

Test(wire_encode, encoders_refuse_small_buffers)
{
    for (int which = 0; which < NFRAMES; which++) {
        size_t size, len = 12345;
        uint8_t *f = encode_sample(which, &size);
        uint8_t *buf = malloc(size);

        memset(buf, 0xab, size);
        cr_assert_eq(encode_sample_into(which, buf, size - 1, &len), PDX_ERR_RANGE);
        cr_assert_eq(encode_sample_into(which, NULL, 0, &len), PDX_ERR_RANGE);
        cr_assert_eq(len, 12345, "size written on failure");
        for (size_t i = 0; i < size; i++)
            cr_assert_eq(buf[i], 0xab, "sample %d: byte %zu written on failure", which, i);
        cr_assert_eq(encode_sample_into(which, buf, size, &len), PDX_OK);
        cr_assert_eq(len, size);
        cr_assert_arr_eq(buf, f, size);
        free(buf);
        free(f);
    }
}

Test(wire_encode, encoders_refuse_bad_fields)
{
    uint8_t buf[1024];
    size_t len;
    pdx_wire_hello_t h;
    pdx_wire_mem_entry_t e = {1, 0, {0x1000, 0, 1, 1, 0, NULL}};
    pdx_wire_ep_t ep = {0, 0, 0, {PDX_TP_ADDR_MAX + 1, {0}}};
    pdx_wire_room_t r;
    pdx_pages_t pages[3];
    pdx_wire_abort_t ab = {1, PDX_OK, "x"};
    pdx_wire_error_t er = {1, PDX_ERR_IO, ""};
    pdx_wire_notify_t n = sample_notify();
    pdx_layout_t *l = sample_layout();
    pdx_wire_layout_t lay = {1, l};

    sample_hello(&h);
    memset(h.host, 'h', PDX_WIRE_HOST_MAX + 1);
    cr_assert_eq(pdx_wire_encode_hello(&h, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    sample_hello(&h);
    h.nshards = 0;
    cr_assert_eq(pdx_wire_encode_hello(&h, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    sample_hello(&h);
    h.nics = 0;
    cr_assert_eq(pdx_wire_encode_hello(&h, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    sample_hello(&h);
    h.nics = PDX_WIRE_MAX_NICS + 1;
    cr_assert_eq(pdx_wire_encode_hello(&h, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    cr_assert_eq(pdx_wire_encode_mem(&(pdx_wire_mem_t){1, &e}, buf, sizeof(buf), &len),
                 PDX_ERR_INVALID);
    cr_assert_eq(pdx_wire_encode_mem(&(pdx_wire_mem_t){1, NULL}, buf, sizeof(buf), &len),
                 PDX_ERR_INVALID);
    cr_assert_eq(pdx_wire_encode_mem(&(pdx_wire_mem_t){1, &(pdx_wire_mem_entry_t){
                                         1, PDX_WIRE_MAX_NICS, {0x1000, 64, 1, 1, 0, NULL}}},
                                     buf, sizeof(buf), &len), PDX_ERR_INVALID);
    cr_assert_eq(pdx_wire_encode_mem(&(pdx_wire_mem_t){PDX_WIRE_MAX_MEMS + 1, &e}, buf,
                                     sizeof(buf), &len), PDX_ERR_INVALID);
    {
        /* pieces: count, size and keys must agree */
        static const uint32_t keys[3] = {5, 6, 7};
        const pdx_tp_rkey_t good = {0x1000, 3u << 12, 5, 3, 1u << 12, keys};
        pdx_tp_rkey_t bad[] = {good, good, good, good, good, good};

        bad[0].npieces = 0;             /* none */
        bad[1].npieces = 2;             /* 3 pieces of 4 KiB needed */
        bad[2].piece = 3u << 11;        /* not a power of two */
        bad[3].rkeys = NULL;            /* no keys */
        bad[4].rkey = 6;                /* piece 0's key differs */
        bad[5].piece = 1u << 14;        /* one piece larger than the region */
        e.rkey = good;
        cr_assert_eq(pdx_wire_encode_mem(&(pdx_wire_mem_t){1, &e}, buf, sizeof(buf), &len),
                     PDX_OK);
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            e.rkey = bad[i];
            cr_assert_eq(pdx_wire_encode_mem(&(pdx_wire_mem_t){1, &e}, buf, sizeof(buf), &len),
                         PDX_ERR_INVALID, "bad pieces %zu", i);
        }
    }
    cr_assert_eq(pdx_wire_encode_ep(&ep, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    l->groups[0].buffers_per_layer = 3;
    cr_assert_eq(pdx_wire_encode_layout(&lay, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    l->groups[0].buffers_per_layer = 2;
    l->groups[1].flags |= 1u << 5;
    cr_assert_eq(pdx_wire_encode_layout(&lay, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    cr_assert_eq(pdx_wire_encode_layout(&(pdx_wire_layout_t){1, NULL}, buf, sizeof(buf), &len),
                 PDX_ERR_INVALID);
    sample_room(&r, pages, 1);
    r.aux.len = 0;
    cr_assert_eq(pdx_wire_encode_room(&r, pages, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    sample_room(&r, pages, 1);
    r.ngroups = PDX_LAYOUT_MAX_GROUPS + 1;
    cr_assert_eq(pdx_wire_encode_room(&r, pages, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    sample_room(&r, pages, 1);
    pages[1].npages = 4;   /* pages NULL */
    cr_assert_eq(pdx_wire_encode_room(&r, pages, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    cr_assert_eq(pdx_wire_encode_room(&r, NULL, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    cr_assert_eq(pdx_wire_encode_abort(&ab, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    memset(er.message, 'e', PDX_WIRE_REASON_MAX + 1);
    cr_assert_eq(pdx_wire_encode_error(&er, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.flags = 1u << 7;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n = sample_notify(), n.flags = PDX_WIRE_NOTIFY_STATUS_ONLY;   /* count is not 0 */
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n = sample_notify(), n.status = PDX_INPROGRESS;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    /* credit records: the flag alone, no room or seq, 1..4096 */
    n = (pdx_wire_notify_t){.sender = 7, .flags = PDX_WIRE_NOTIFY_CREDIT, .count = 16};
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_OK);
    n.flags |= PDX_WIRE_NOTIFY_LAST;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.flags = PDX_WIRE_NOTIFY_CREDIT, n.room = 5;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.room = 0, n.count = 0;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.count = PDX_WIRE_MAX_CREDIT + 1;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.count = 16, n.status = PDX_ERR_PEER;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n = sample_notify();
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, PDX_WIRE_NOTIFY_SIZE - 1, &len), PDX_ERR_RANGE);
    pdx_layout_free(l);
}
