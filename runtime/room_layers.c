/*
 * room_layers: decode learns layer by layer what landed (docs/architecture.md
 * §5). A chunk before the last whose writes all went on one endpoint is
 * followed there by a notify of PDX_WIRE_NOTIFY_LAYERS: its sender wrote
 * `pages` pages of the layered groups in those layers (RC order: they are
 * placed). Per sender and layer the pages add up; a layer has landed once
 * every sender of the room has named the layers it holds and each that holds
 * it wrote all of its pdx_expect's pages there. Layers land from the first
 * on; the count of leading layers landed is made visible (the flush of the
 * room's mode) and then published in a pool word the GPU waits on:
 *
 *     base + v          v leading layers visible
 *     base + n + 1      the room succeeded (n: its layers)
 *     base + n + 2      the room failed or was released first
 *
 * A stream waiting for layer i waits for base + i + 1, so every wait goes on
 * once the room ended; the word's values only grow, so a wait enqueued
 * late, or on the word once the pool gave it to another room, never blocks.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "log.h"
#include "peer.h"
#include "shard.h"
#include "rooms.h"

typedef struct pdx_layer_sender {
    uint64_t  id;
    uint32_t  cover_begin, cover_end; /* the layers of decode's layout it holds */
    uint64_t  total;                  /* pages it writes to each of them */
    uint32_t *landed;                 /* [nlayers]: pages landed per layer */
} pdx_layer_sender_t;

struct pdx_layers {
    uint32_t           n;         /* the room's layers when made (0: not counted) */
    bool               uncounted; /* counting stopped: waits go on at the room's end */
    uint32_t           ready;     /* leading layers landed */
    uint32_t           visible;   /* ... and made visible */
    uint32_t           flushing;  /* ready when the queued flush was asked; 0: none */
    uint32_t           end;       /* 0: not ended, 1: succeeded, 2: failed or released */
    volatile uint64_t *word;      /* NULL until a stream waits */
    uint64_t           base;
    uint32_t           nsenders, cap;
    pdx_layer_sender_t *senders;
};

void pdx_layers_expect_locked(pdx_room_ext_t *ext, const pdx_layout_t *layout,
                              const pdx_pages_t *dst, uint32_t hold)
{
    uint64_t pages = 0;

    for (uint32_t g = 0; g < layout->ngroups; g++)
        if (pdx_group_layered(&layout->groups[g]))
            pages += dst[g].npages;
    ext->hold_pages[hold] = pages;
    if (hold == 0) {
        ext->layer0 = layout->layer_begin;
        ext->nlayers = layout->layer_end - layout->layer_begin;
    } else if (layout->layer_begin != ext->layer0 ||
               layout->layer_end - layout->layer_begin != ext->nlayers) {
        ext->nlayers = 0; /* no common numbering: the room's end releases the waits */
    }
}

static pdx_layers_t *layers_of_locked(pdx_room_ext_t *ext)
{
    if (!ext->layers && (ext->layers = calloc(1, sizeof(*ext->layers))) != NULL) {
        ext->layers->n = ext->nlayers;
        ext->layers->uncounted = !ext->nlayers;
    }
    return ext->layers;
}

static void publish_locked(const pdx_layers_t *t)
{
    if (t->word)
        __atomic_store_n(t->word, t->base + (t->end ? t->n + t->end : t->visible),
                         __ATOMIC_RELEASE);
}

/* Whether layer i has landed from every sender (under ext->lock). */
static bool layer_landed(const pdx_room_ext_t *ext, const pdx_layers_t *t, uint32_t i)
{
    const uint32_t layer = ext->layer0 + i;

    if (t->nsenders < ext->nsenders)
        return false; /* a sender not heard of yet may hold it */
    for (uint32_t s = 0; s < t->nsenders; s++) {
        const pdx_layer_sender_t *x = &t->senders[s];

        if (layer >= x->cover_begin && layer < x->cover_end && x->landed[i] < x->total)
            return false;
    }
    return true;
}

/* The sender's record, made at its first notify; NULL: no memory. */
static pdx_layer_sender_t *sender_of(pdx_room_ext_t *ext, pdx_layers_t *t, uint64_t id,
                                     const pdx_peer_t *peer, const pdx_wire_notify_t *n)
{
    pdx_layer_sender_t *x;
    uint32_t hold = 0;

    for (uint32_t s = 0; s < t->nsenders; s++)
        if (t->senders[s].id == id)
            return &t->senders[s];
    if (t->nsenders == t->cap) {
        uint32_t cap = t->cap ? 2 * t->cap : 4;
        pdx_layer_sender_t *more = realloc(t->senders, cap * sizeof(*more));

        if (!more)
            return NULL;
        t->senders = more;
        t->cap = cap;
    }
    while (hold < ext->nholds && ext->holds[hold] != peer)
        hold++;
    x = &t->senders[t->nsenders];
    *x = (pdx_layer_sender_t){.id = id, .cover_begin = n->cover_begin,
                              .cover_end = n->cover_end,
                              .total = hold < ext->nholds ? ext->hold_pages[hold] : 0,
                              .landed = calloc(t->n, sizeof(uint32_t))};
    if (!x->landed)
        return NULL;
    t->nsenders++;
    return x;
}

const char *pdx_layers_on_notify_locked(pdx_engine_t *e, pdx_room_ext_t *ext,
                                        const pdx_peer_t *peer, const pdx_wire_notify_t *n,
                                        uint32_t *flush_p)
{
    const uint32_t end = ext->layer0 + ext->nlayers;
    pdx_layers_t *t = layers_of_locked(ext);
    pdx_layer_sender_t *x;

    (void)e;
    *flush_p = PDX_FLUSH_NONE;
    if (t && (!ext->nlayers || t->n != ext->nlayers))
        t->uncounted = true; /* expects of different layers */
    if (!t || t->uncounted || t->end)
        return NULL;
    if (!(x = sender_of(ext, t, n->sender, peer, n))) {
        t->uncounted = true;
        pdx_warn("room %llu: out of memory for its layers: waits for a layer go on at its end",
                 (unsigned long long)n->room);
        return NULL;
    }
    if (n->cover_begin != x->cover_begin || n->cover_end != x->cover_end)
        return "a sender's notifies name different layers it holds";
    if (n->layer_begin < n->layer_end && (n->layer_begin < ext->layer0 || n->layer_end > end))
        return "a notify names layers outside the room's layout";
    for (uint32_t l = n->layer_begin; l < n->layer_end; l++) {
        uint32_t *landed = &x->landed[l - ext->layer0];

        if (n->pages > x->total - *landed)
            return "a sender wrote more pages to a layer than the room expects";
        *landed += n->pages;
    }
    while (t->ready < t->n && layer_landed(ext, t, t->ready))
        t->ready++;
    if (t->ready == t->visible || t->flushing)
        return NULL; /* nothing new, or the flush under way is asked again when it ends */
    *flush_p = atomic_load_explicit(&ext->flush, memory_order_relaxed);
    if (*flush_p == PDX_FLUSH_NONE) {
        t->visible = t->ready;
        publish_locked(t);
    } else {
        t->flushing = t->ready;
    }
    return NULL;
}

/* The flush of ready layers done (ok) or failed: visible, and another
 * round when more landed meanwhile (under ext->lock); the mode to run. */
static uint32_t flushed_locked(pdx_room_ext_t *ext, bool ok)
{
    pdx_layers_t *t = ext->layers;

    if (!t || !t->flushing)
        return PDX_FLUSH_NONE;
    if (ok) {
        t->visible = PDX_MAX(t->visible, t->flushing);
        publish_locked(t);
    }
    t->flushing = 0;
    if (!ok || t->ready == t->visible || t->end)
        return PDX_FLUSH_NONE;
    t->flushing = t->ready;
    return atomic_load_explicit(&ext->flush, memory_order_relaxed);
}

void pdx_layers_flush(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room, uint32_t mode)
{
    pdx_room_ext_t *ext = pdx_room_ext(e, obj);

    while (mode == PDX_FLUSH_HOST) {
        /* the GPU runtime's call, not under the room's lock */
        const bool ok = pdx_gpu_flush_host(e) == PDX_OK;

        pthread_mutex_lock(&ext->lock);
        mode = pdx_rooms_live(obj, room) ? flushed_locked(ext, ok) : PDX_FLUSH_NONE;
        pthread_mutex_unlock(&ext->lock);
        if (!ok)
            pdx_rooms_fail_id(e, obj, room, PDX_ERR_IO,
                              "the GPU runtime's flush of RDMA writes failed");
    }
    if (mode == PDX_FLUSH_READ)
        pdx_flush_defer(e, obj, room);
}

void pdx_layers_flushed(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room)
{
    pdx_room_ext_t *ext = pdx_room_ext(e, obj);
    uint32_t mode = PDX_FLUSH_NONE;

    pthread_mutex_lock(&ext->lock);
    if (pdx_rooms_live(obj, room))
        mode = flushed_locked(ext, true);
    pthread_mutex_unlock(&ext->lock);
    pdx_layers_flush(e, obj, room, mode);
}

void pdx_layers_end_locked(pdx_room_ext_t *ext, bool failed)
{
    pdx_layers_t *t = ext->layers;

    if (!t || t->end)
        return;
    if (!failed)
        t->visible = t->ready = t->n;
    t->end = failed ? 2 : 1;
    publish_locked(t);
}

void pdx_layers_free(pdx_engine_t *e, pdx_layers_t *t)
{
    if (!t)
        return;
    if (t->word) /* ended: it reached its last value */
        pdx_gpu_word_done(e, t->word, __atomic_load_n(t->word, __ATOMIC_ACQUIRE));
    for (uint32_t s = 0; s < t->nsenders; s++)
        free(t->senders[s].landed);
    free(t->senders);
    free(t);
}

/* ------------------------------------------------------------------ API */

/* The decode room's ext, locked; NULL (logged) when it is none. */
static pdx_room_ext_t *decode_locked(pdx_engine_t *e, pdx_room_t room, const char *api,
                                     pdx_room_obj_t **obj_p, pdx_status_t *st_p)
{
    pdx_room_obj_t *obj = pdx_room_lookup(&e->rooms, room);
    pdx_room_ext_t *ext;

    *st_p = PDX_ERR_NOT_FOUND;
    if (!obj)
        return NULL;
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    if (pdx_rooms_live(obj, room) && atomic_load(&ext->decode)) {
        *obj_p = obj;
        *st_p = PDX_OK;
        return ext;
    }
    pthread_mutex_unlock(&ext->lock);
    *st_p = PDX_ERR_STATE;
    pdx_error("%s: room %llu is not expected here", api, (unsigned long long)room);
    return NULL;
}

pdx_status_t pdx_room_layers(pdx_engine_t *e, pdx_room_t room, uint32_t *landed_p)
{
    pdx_room_obj_t *obj;
    pdx_room_ext_t *ext;
    pdx_status_t st;

    if (!e || !landed_p)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    if (!(ext = decode_locked(e, room, "pdx_room_layers", &obj, &st)))
        return st;
    *landed_p = pdx_room_state(obj) == PDX_ROOM_SUCCESS ? ext->nlayers
                : ext->layers && !ext->layers->uncounted ? ext->layers->visible
                                                         : 0;
    pthread_mutex_unlock(&ext->lock);
    return PDX_OK;
}

pdx_status_t pdx_room_stream_wait_layer(pdx_engine_t *e, pdx_room_t room, uint32_t layer,
                                        void *hip_stream, pdx_gate_t *failed_p)
{
    pdx_room_obj_t *obj;
    pdx_room_ext_t *ext;
    pdx_layers_t *t;
    pdx_status_t st;
    uint32_t n;

    if (!e)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    if (!(ext = decode_locked(e, room, "pdx_room_stream_wait_layer", &obj, &st)))
        return st;
    n = PDX_MAX(ext->nlayers, 1u); /* expects of different layers: numbered from the first */
    if (layer < ext->layer0 || layer - ext->layer0 >= n) {
        pdx_error("pdx_room_stream_wait_layer: room %llu: layer %u is not one of its layout's "
                  "[%u, %u)", (unsigned long long)room, layer, ext->layer0, ext->layer0 + n);
        st = PDX_ERR_RANGE;
    } else if (!(t = layers_of_locked(ext))) {
        st = PDX_ERR_NOMEM;
    } else {
        if (!t->word) {
            st = pdx_gpu_word_take(e, "pdx_room_stream_wait_layer", (uint64_t)t->n + 2,
                                   &t->word, &t->base);
            if (st == PDX_OK && pdx_rooms_terminal(pdx_room_state(obj)))
                pdx_layers_end_locked(ext, pdx_room_state(obj) != PDX_ROOM_SUCCESS);
            if (st == PDX_OK)
                publish_locked(t);
        }
        /* layer i waits for base + i + 1; a room whose layers are not
         * counted, for its end */
        if (st == PDX_OK)
            st = pdx_hip_stream_wait_word(hip_stream, t->word,
                                          t->base + (t->uncounted || layer - ext->layer0 >= t->n
                                                         ? t->n + 1
                                                         : layer - ext->layer0 + 1));
        if (st == PDX_OK && failed_p)
            *failed_p = (pdx_gate_t){.kind = PDX_GATE_WORD, .word = t->word,
                                     .value = t->base + t->n + 2};
    }
    pthread_mutex_unlock(&ext->lock);
    return st;
}
