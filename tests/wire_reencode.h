/* Encoding a decoded control message again (the wire tests and fuzz_ctrl). */
#ifndef PDX_TEST_WIRE_REENCODE_H
#define PDX_TEST_WIRE_REENCODE_H

#include "wire.h"

/*
 * Encode m again into buf (cap bytes): the encoder's status, PDX_ERR_NOMEM
 * for a ROOM whose pages cannot be copied out, PDX_ERR_PROTO for a type
 * that never decodes (SEALED), PDX_ERR_UNSUPPORTED for a HELLO or AUTH of
 * another version (it may carry fields it did not decode).
 */
pdx_status_t wire_reencode(const pdx_wire_msg_t *m, void *buf, size_t cap, size_t *len_p);

#endif
