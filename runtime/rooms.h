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

/* pdx_rooms_fail_id() logged at `level` (a routine loss: info). */
bool pdx_rooms_fail_at(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, pdx_log_level_t level,
                       pdx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/*
 * ABORT_ACKs a prefill room owes: bit d of `mask` names dests[d].peer.
 * hold (under ext->lock) puts a reference to each in to[d] and returns
 * mask; send returns the bits that found the control buffer full
 * (PDX_ERR_AGAIN); put drops the references of `mask`, failing those peers
 * first with `why` unless it is NULL.
 */
uint32_t pdx_rooms_hold_acks_locked(pdx_room_ext_t *ext, uint32_t mask,
                                    pdx_peer_t *to[PDX_MAX_DESTS]);
uint32_t pdx_rooms_send_acks(uint64_t room, uint32_t mask, pdx_peer_t *to[PDX_MAX_DESTS]);
void pdx_rooms_put_acks(uint32_t mask, pdx_peer_t *to[PDX_MAX_DESTS], const char *why);

/* Apply the notifies held for the room before its pdx_expect. */
void pdx_rooms_apply_held(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id);

#endif
