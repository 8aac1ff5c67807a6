/*
 * The room table: caller-chosen 64-bit ids -> room objects, fixed capacity.
 *
 * Room objects live in a preallocated array and never move; an open-
 * addressing index (linear probing, backward-shift deletion) maps ids to
 * them. Inserting and removing take the table's mutex; lookups, polls and
 * state changes take no lock:
 *
 * - an index slot packs (object index + 1, 32 bits of the id's hash); a
 *   lookup that misses while a removal shifted the index retries (the index
 *   has a sequence counter, odd while it is being shifted);
 * - an object carries a generation, odd while it is free or being filled;
 *   a reader checks the id and an unchanged, even generation around its
 *   loads, so a poll racing a release never reports a recycled room;
 * - state changes are compare-and-swap; SUCCESS and FAILED are terminal.
 *
 * Costs follow the rooms, not the capacity: the arrays are mapped, not
 * committed, a slot is set up the first time it is used (first_use), an
 * insert takes the lowest free slot (a two-level bitmap), so the slots in
 * use stay packed below pdx_room_span(), which is what a walk over the
 * rooms visits.
 */
#ifndef PDX_ROOM_H
#define PDX_ROOM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "pdx/pdx.h"
#include "util.h"

#define PDX_ROOM_ERR_MAX 160

typedef struct pdx_room_obj {
    _Atomic uint32_t gen;            /* odd while free or being filled */
    _Atomic int32_t  state;          /* pdx_room_state_t */
    _Atomic uint64_t id;
    _Atomic uint32_t fail_claim;     /* 1 once a thread started failing the room */
    pdx_status_t     fail_status;    /* written before state becomes FAILED */
    char             fail_msg[PDX_ROOM_ERR_MAX];
} pdx_room_obj_t;

/* Called under the table's lock the first time slot i is handed out. */
typedef void pdx_room_first_use_fn(void *arg, uint32_t i);

typedef struct pdx_room_table {
    pthread_mutex_t   lock;          /* insert, remove, the bitmaps */
    _Atomic uint32_t  seq;           /* odd while the index is being shifted */
    uint32_t          mask;          /* index slots - 1 */
    uint32_t          capacity;      /* room objects */
    uint32_t          used;
    uint32_t          touched;       /* slots set up so far: [0, touched) */
    _Atomic uint32_t  span;          /* 1 + the highest slot in use; 0: none */
    uint64_t         *busy;          /* bit i: slot i in use (bits past capacity set) */
    uint64_t         *full;          /* bit w: busy[w] is all ones */
    uint32_t          nbusy, nfull;  /* words */
    _Atomic uint64_t *index;         /* 0: empty; else (obj + 1) << 32 | hash32 */
    pdx_room_obj_t   *objs;
    pdx_room_first_use_fn *first_use;
    void             *first_use_arg;
} pdx_room_table_t;

/* first_use (may be NULL) sets up what the caller keeps per slot. */
pdx_status_t pdx_room_table_init(pdx_room_table_t *table, uint32_t capacity,
                                 pdx_room_first_use_fn *first_use, void *arg);
/* The index and objects go on NUMA node `node` when first touched (-1: anywhere). */
void pdx_room_table_prefer_node(pdx_room_table_t *table, int node);
void pdx_room_table_fini(pdx_room_table_t *table);

/* Every slot a room may be in lies below this (a walk's bound; acquire). */
static inline uint32_t pdx_room_span(pdx_room_table_t *table)
{
    return atomic_load_explicit(&table->span, memory_order_acquire);
}

/*
 * Insert `id` in `state`. PDX_ERR_EXISTS (and *obj_p set to the present
 * room) when the id is in the table; PDX_ERR_FULL at capacity.
 */
pdx_status_t pdx_room_insert(pdx_room_table_t *table, uint64_t id, pdx_room_state_t state,
                             pdx_room_obj_t **obj_p);

/* The room object of `id`, or NULL. Lock-free. The object may be unlinked
 * and reused meanwhile: check it with pdx_room_read() before acting on it. */
pdx_room_obj_t *pdx_room_lookup(pdx_room_table_t *table, uint64_t id);

/*
 * A consistent read of a room object that may have been released or
 * recycled since the caller found it: true and its state only if it is live
 * and still holds `id`.
 */
bool pdx_room_read(pdx_room_obj_t *obj, uint64_t id, int32_t *state_p);

/* State of `id`, or PDX_ROOM_NONE: a lookup plus atomic loads. */
pdx_room_state_t pdx_room_poll(pdx_room_table_t *table, uint64_t id);

/*
 * Take `id` out of the index and retire its object (generation odd: no
 * reader reports it), without freeing the object: no insert can reuse it
 * until pdx_room_free(). If *obj_p is not NULL, only that object is taken
 * (PDX_ERR_NOT_FOUND if the id now names another); *obj_p is set on success.
 * PDX_ERR_NOT_FOUND when absent, e.g. another thread unlinked it first.
 */
pdx_status_t pdx_room_unlink(pdx_room_table_t *table, uint64_t id, pdx_room_obj_t **obj_p);

/* Give an unlinked object back to the free list. */
void pdx_room_free(pdx_room_table_t *table, pdx_room_obj_t *obj);

/* Remove `id` (unlink, then free); PDX_ERR_NOT_FOUND when absent. */
pdx_status_t pdx_room_remove(pdx_room_table_t *table, uint64_t id);

/*
 * Move a room forward: to a state above the current one, or to FAILED.
 * Returns false (and changes nothing) once the room is terminal or when `to`
 * is not forward.
 */
bool pdx_room_advance(pdx_room_obj_t *room, pdx_room_state_t to);

/*
 * Fail the room with a status and message; only the first caller's message
 * is kept. Returns false when the room was already terminal (a late failure
 * never turns SUCCESS into FAILED).
 */
bool pdx_room_fail(pdx_room_obj_t *room, pdx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline pdx_room_state_t pdx_room_state(const pdx_room_obj_t *room)
{
    return (pdx_room_state_t)atomic_load_explicit(&room->state, memory_order_acquire);
}

/* Home index slot of an id (tests build colliding ids with it). */
static inline uint32_t pdx_room_home(const pdx_room_table_t *table, uint64_t id)
{
    return (uint32_t)pdx_hash64(id) & table->mask;
}

#endif
