/* Helpers shared by rooms.c (the room API) and rooms_ctl.c (control messages). */
#ifndef PDX_ROOMS_H
#define PDX_ROOMS_H

#include <stdarg.h>

#include "engine.h"

/*
 * A room object found by id may be released and reused by another id at any
 * moment. Under ext->lock, pdx_room_read(obj, id) == true pins it to `id`:
 * release unlinks the id first (then no read succeeds) and takes ext->lock
 * to clear the object before it can be reused.
 */
static inline bool pdx_rooms_live(pdx_room_obj_t *obj, uint64_t id)
{
    int32_t state;

    return pdx_room_read(obj, id, &state);
}

/* pdx_rooms_fail() for a room that still holds `id` (checked under ext->lock). */
bool pdx_rooms_fail_id(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, pdx_status_t status,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Under ext->lock, of a decode room: `peer` confirmed, or can no longer
 * write; once every peer has, nothing more can land and the room is fenced. */
void pdx_rooms_ack_locked(pdx_room_ext_t *ext, const pdx_peer_t *peer);

/* pdx_rooms_ack_locked() for a room that still holds `id`. */
void pdx_rooms_ack(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, const pdx_peer_t *peer);

/* Nothing of the room can still be written, here or into here. */
bool pdx_rooms_fenced(pdx_room_obj_t *obj, pdx_room_ext_t *ext);

/*
 * Take a fenced room out of the table: unlink (PDX_ERR_NOT_FOUND when another
 * thread removed it first), send the ABORT_ACKs it owes, unpin its aux
 * region, clear its engine data, free the object.
 */
pdx_status_t pdx_rooms_remove(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id);

/* Send an ABORT_ACK for `room`. */
pdx_status_t pdx_rooms_send_abort_ack(pdx_peer_t *peer, uint64_t room);

/* Send the ABORT_ACKs in `mask` (bits: peer ids); the bits that could not be
 * sent for lack of room in the control buffer (PDX_ERR_AGAIN) are returned. */
uint64_t pdx_rooms_send_acks(pdx_engine_t *e, uint64_t room, uint64_t mask);

/* Apply the notifies held for the room before its pdx_expect. */
void pdx_rooms_apply_held(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id);

#endif
