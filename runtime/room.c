/* The room table; see room.h for the concurrency rules. */
#include "room.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_OBJ UINT32_MAX

static inline uint32_t slot_obj(uint64_t v)  { return (uint32_t)(v >> 32) - 1; }
static inline uint32_t slot_hash(uint64_t v) { return (uint32_t)v; }
static inline uint64_t slot_make(uint32_t obj, uint32_t hash)
{
    return ((uint64_t)obj + 1) << 32 | hash;
}

static size_t index_bytes(const pdx_room_table_t *t) { return (size_t)(t->mask + 1) * 8; }
static size_t objs_bytes(const pdx_room_table_t *t)
{
    return (size_t)t->capacity * sizeof(*t->objs);
}

pdx_status_t pdx_room_table_init(pdx_room_table_t *table, uint32_t capacity,
                                 pdx_room_first_use_fn *first_use, void *arg)
{
    if (capacity == 0 || capacity > (1u << 30))
        return PDX_ERR_INVALID;
    memset(table, 0, sizeof(*table));
    table->mask = pdx_pow2_ceil(capacity * 2) - 1; /* load factor <= 1/2 */
    table->capacity = capacity;
    table->first_use = first_use;
    table->first_use_arg = arg;
    table->nbusy = (capacity + 63) / 64;
    table->nfull = (table->nbusy + 63) / 64;
    table->index = pdx_map_zeroed(index_bytes(table));
    table->objs = pdx_map_zeroed(objs_bytes(table));
    table->busy = calloc(table->nbusy, sizeof(*table->busy));
    table->full = calloc(table->nfull, sizeof(*table->full));
    if (!table->index || !table->objs || !table->busy || !table->full ||
        pthread_mutex_init(&table->lock, NULL) != 0) {
        pdx_unmap(table->index, index_bytes(table));
        pdx_unmap(table->objs, objs_bytes(table));
        free(table->busy);
        free(table->full);
        return PDX_ERR_NOMEM;
    }
    /* Slots past the capacity, and words past the last, are never free. */
    if (capacity % 64)
        table->busy[table->nbusy - 1] = ~0ull << (capacity % 64);
    if (table->nbusy % 64)
        table->full[table->nfull - 1] = ~0ull << (table->nbusy % 64);
    return PDX_OK;
}

void pdx_room_table_prefer_node(pdx_room_table_t *table, int node)
{
    pdx_map_prefer_node(table->index, index_bytes(table), node);
    pdx_map_prefer_node(table->objs, objs_bytes(table), node);
}

void pdx_room_table_fini(pdx_room_table_t *table)
{
    pthread_mutex_destroy(&table->lock);
    pdx_unmap(table->objs, objs_bytes(table));
    pdx_unmap(table->index, index_bytes(table));
    free(table->busy);
    free(table->full);
}

/* Under the lock: the lowest free slot, taken; NO_OBJ when none is. */
static uint32_t slot_take(pdx_room_table_t *t)
{
    for (uint32_t s = 0; s < t->nfull; s++) {
        uint32_t w, i;

        if (t->full[s] == ~0ull)
            continue;
        w = s * 64 + (uint32_t)__builtin_ctzll(~t->full[s]);
        i = w * 64 + (uint32_t)__builtin_ctzll(~t->busy[w]);
        t->busy[w] |= 1ull << (i % 64);
        if (t->busy[w] == ~0ull)
            t->full[s] |= 1ull << (w % 64);
        if (i == t->touched) { /* lowest first: a new slot comes right after the used ones */
            atomic_init(&t->objs[i].gen, 1); /* odd: free */
            if (t->first_use)
                t->first_use(t->first_use_arg, i);
            t->touched++;
        }
        if (i >= atomic_load_explicit(&t->span, memory_order_relaxed))
            atomic_store_explicit(&t->span, i + 1, memory_order_release);
        return i;
    }
    return NO_OBJ;
}

/* Under the lock: slot i is free again; the span shrinks past free slots. */
static void slot_give(pdx_room_table_t *t, uint32_t i)
{
    uint32_t span = atomic_load_explicit(&t->span, memory_order_relaxed);

    t->busy[i / 64] &= ~(1ull << (i % 64));
    t->full[i / 64 / 64] &= ~(1ull << (i / 64 % 64));
    while (span > 0 && !(t->busy[(span - 1) / 64] >> ((span - 1) % 64) & 1))
        span--;
    atomic_store_explicit(&t->span, span, memory_order_release);
}

bool pdx_room_read(pdx_room_obj_t *obj, uint64_t id, int32_t *state_p)
{
    uint32_t gen = atomic_load_explicit(&obj->gen, memory_order_acquire);
    int32_t state;

    if (gen & 1 || gen == 0) /* free, being filled, or never used */
        return false;
    if (atomic_load_explicit(&obj->id, memory_order_acquire) != id)
        return false;
    /* The acquire loads above keep this re-read of gen after them. */
    state = atomic_load_explicit(&obj->state, memory_order_acquire);
    if (atomic_load_explicit(&obj->gen, memory_order_acquire) != gen)
        return false;
    *state_p = state;
    return true;
}

static pdx_room_obj_t *find(pdx_room_table_t *table, uint64_t id, int32_t *state_p)
{
    uint32_t hash = (uint32_t)pdx_hash64(id);

    for (;;) {
        uint32_t seq = atomic_load_explicit(&table->seq, memory_order_acquire);

        if (!(seq & 1)) {
            for (uint32_t i = hash & table->mask;; i = (i + 1) & table->mask) {
                uint64_t v = atomic_load_explicit(&table->index[i], memory_order_acquire);
                pdx_room_obj_t *obj;

                if (v == 0)
                    break;
                if (slot_hash(v) != hash)
                    continue;
                obj = &table->objs[slot_obj(v)];
                if (pdx_room_read(obj, id, state_p))
                    return obj;
            }
            /* A miss counts only if no removal shifted the index meanwhile
             * (the slot loads above are acquire, so this load stays last). */
            if (atomic_load_explicit(&table->seq, memory_order_acquire) == seq)
                return NULL;
        }
        pdx_cpu_relax();
    }
}

pdx_room_obj_t *pdx_room_lookup(pdx_room_table_t *table, uint64_t id)
{
    int32_t state;

    return find(table, id, &state);
}

pdx_room_state_t pdx_room_poll(pdx_room_table_t *table, uint64_t id)
{
    int32_t state;

    return find(table, id, &state) ? (pdx_room_state_t)state : PDX_ROOM_NONE;
}

pdx_status_t pdx_room_insert(pdx_room_table_t *table, uint64_t id, pdx_room_state_t state,
                             pdx_room_obj_t **obj_p)
{
    uint32_t hash = (uint32_t)pdx_hash64(id);
    pdx_room_obj_t *obj;
    uint32_t i, o;

    pthread_mutex_lock(&table->lock);
    for (i = hash & table->mask;; i = (i + 1) & table->mask) {
        uint64_t v = atomic_load_explicit(&table->index[i], memory_order_relaxed);

        if (v == 0)
            break;
        obj = &table->objs[slot_obj(v)];
        if (atomic_load_explicit(&obj->id, memory_order_relaxed) == id) {
            pthread_mutex_unlock(&table->lock);
            if (obj_p)
                *obj_p = obj;
            return PDX_ERR_EXISTS;
        }
    }
    o = slot_take(table);
    if (o == NO_OBJ) {
        pthread_mutex_unlock(&table->lock);
        return PDX_ERR_FULL;
    }
    obj = &table->objs[o];
    table->used++;

    /* gen is odd (free) here: readers ignore the object while it fills. */
    atomic_store_explicit(&obj->id, id, memory_order_relaxed);
    atomic_store_explicit(&obj->state, state, memory_order_relaxed);
    atomic_store_explicit(&obj->fail_claim, 0, memory_order_relaxed);
    obj->fail_status = PDX_OK;
    obj->fail_msg[0] = '\0';
    atomic_fetch_add_explicit(&obj->gen, 1, memory_order_release);   /* -> even: live */
    atomic_store_explicit(&table->index[i], slot_make(o, hash), memory_order_release);
    pthread_mutex_unlock(&table->lock);
    if (obj_p)
        *obj_p = obj;
    return PDX_OK;
}

pdx_status_t pdx_room_unlink(pdx_room_table_t *table, uint64_t id, pdx_room_obj_t **obj_p)
{
    uint32_t hash = (uint32_t)pdx_hash64(id);
    pdx_room_obj_t *want = *obj_p, *obj = NULL;
    uint32_t i;

    pthread_mutex_lock(&table->lock);
    for (i = hash & table->mask;; i = (i + 1) & table->mask) {
        uint64_t v = atomic_load_explicit(&table->index[i], memory_order_relaxed);

        if (v == 0)
            break;
        if (atomic_load_explicit(&table->objs[slot_obj(v)].id, memory_order_relaxed) == id) {
            obj = &table->objs[slot_obj(v)];
            break;
        }
    }
    if (!obj || (want && obj != want)) {
        pthread_mutex_unlock(&table->lock);
        return PDX_ERR_NOT_FOUND;
    }

    /* Retire the object first: from here no reader reports it. */
    atomic_fetch_add_explicit(&obj->gen, 1, memory_order_release);   /* -> odd */

    /* Backward-shift deletion, bracketed by the index sequence. */
    atomic_fetch_add_explicit(&table->seq, 1, memory_order_acq_rel);
    for (uint32_t j = (i + 1) & table->mask;; j = (j + 1) & table->mask) {
        uint64_t v = atomic_load_explicit(&table->index[j], memory_order_relaxed);
        uint32_t home;

        if (v == 0)
            break;
        home = slot_hash(v) & table->mask;
        /* Move v into the hole at i unless its home lies cyclically in (i, j]. */
        if (((j - home) & table->mask) >= ((j - i) & table->mask)) {
            atomic_store_explicit(&table->index[i], v, memory_order_relaxed);
            i = j;
        }
    }
    atomic_store_explicit(&table->index[i], 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&table->seq, 1, memory_order_release);
    pthread_mutex_unlock(&table->lock);
    *obj_p = obj;
    return PDX_OK;
}

void pdx_room_free(pdx_room_table_t *table, pdx_room_obj_t *obj)
{
    pthread_mutex_lock(&table->lock);
    slot_give(table, (uint32_t)(obj - table->objs));
    table->used--;
    pthread_mutex_unlock(&table->lock);
}

pdx_status_t pdx_room_remove(pdx_room_table_t *table, uint64_t id)
{
    pdx_room_obj_t *obj = NULL;
    pdx_status_t st = pdx_room_unlink(table, id, &obj);

    if (st == PDX_OK)
        pdx_room_free(table, obj);
    return st;
}

static bool is_terminal(int32_t state)
{
    return state == PDX_ROOM_SUCCESS || state == PDX_ROOM_FAILED;
}

bool pdx_room_advance(pdx_room_obj_t *room, pdx_room_state_t to)
{
    int32_t cur = atomic_load_explicit(&room->state, memory_order_acquire);

    do {
        if (is_terminal(cur) || (to != PDX_ROOM_FAILED && (int32_t)to <= cur))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&room->state, &cur, (int32_t)to,
                                                    memory_order_acq_rel, memory_order_acquire));
    return true;
}

bool pdx_room_fail(pdx_room_obj_t *room, pdx_status_t status, const char *fmt, ...)
{
    uint32_t expected = 0;
    va_list ap;

    if (is_terminal(atomic_load_explicit(&room->state, memory_order_acquire)))
        return false;
    if (!atomic_compare_exchange_strong_explicit(&room->fail_claim, &expected, 1,
                                                 memory_order_acq_rel, memory_order_acquire))
        return false; /* another thread is failing it; its message wins */
    room->fail_status = status;
    va_start(ap, fmt);
    vsnprintf(room->fail_msg, sizeof(room->fail_msg), fmt, ap);
    va_end(ap);
    /* The release in advance() publishes the message with the state. */
    return pdx_room_advance(room, PDX_ROOM_FAILED);
}
