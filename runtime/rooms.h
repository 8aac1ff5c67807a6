/* Helpers shared by rooms.c (the room API) and rooms_ctl.c (control messages). */
#ifndef PDX_ROOMS_H
#define PDX_ROOMS_H

#include "engine.h"

/* A decode room's sender `peer` confirmed, or can no longer write: once every
 * peer has, nothing more can land and the room is fenced. */
void pdx_rooms_ack(pdx_engine_t *e, pdx_room_obj_t *obj, pdx_peer_t *peer);

/* Apply the notifies held for the room before its pdx_expect. */
void pdx_rooms_apply_held(pdx_engine_t *e, pdx_room_obj_t *obj);

#endif
