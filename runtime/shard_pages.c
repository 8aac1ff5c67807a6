/*
 * The shard's send path to a direct peer (the ipc transport): a chunk as
 * one page-copies WR per buffer group, the addresses made on the GPU from
 * the page lists (shard_send.c calls it before the runs).
 */
#include "shard_send.h"
#include "peer.h"

/*
 * A chunk to a direct peer (ipc) as one page-copies WR per group: the GPU
 * makes the addresses from the page lists, so the chunk costs the host a
 * few tables instead of a WR per run. Taken only for a chunk not started
 * whose every planned group has GPU regions here and opened regions there,
 * one page size per group and each page inside its regions; else its runs
 * go as WRITEs, which say what is wrong. The first pass checks, the second
 * posts, a group per WR on one dep; a WR the transport refuses for now
 * (its tables do not fit) is posted again from that group on. A chunk
 * whose gate is still closed (ext->gpu_gate) passes it with each WR, so
 * the copies wait for it on the GPU; where the transport has no room for
 * one more gate, the host waits for it instead.
 */
step_t pdx_send_pages(send_ctx_t *c, const pdx_dest_t *dest, pdx_dep_t **deps, uint32_t n)
{
    pdx_shard_loop_t *L = c->L;
    pdx_engine_t *e = L->e;
    pdx_room_ext_t *ext = c->ext;
    pdx_plan_t *plan = &ext->plan;
    const pdx_peer_t *peer = dest->peer;
    pdx_dep_t *dep = NULL;
    uint32_t groups = 0, first;
    pdx_tp_gate_t tgate;

    if (ext->gpu_gate) { /* the gate its copies wait for on the GPU */
        const pdx_gate_t *gate = &c->chunk->gate;

        tgate = (pdx_tp_gate_t){
            .kind = gate->kind == PDX_GATE_EVENT ? PDX_TP_GATE_EVENT : PDX_TP_GATE_WORD,
            .event = gate->event, .word = (volatile uint64_t *)(uintptr_t)gate->word,
            .value = gate->value,
            .deadline_ns = atomic_load_explicit(&ext->xfer_deadline_ns, memory_order_relaxed),
            .abandon = &c->obj->state, .abandon_if = PDX_ROOM_FAILED};
        if (!tgate.deadline_ns)
            tgate.deadline_ns = pdx_deadline_ns(e->cfg.transfer_timeout_ms);
    }
    if (ext->paged && plan->group >= plan->ngroups)
        return STEP_DONE; /* every group went */
    if (!ext->paged && (!peer->direct || ext->xfer || ext->wrs || plan->group || plan->layer ||
                        plan->part || plan->page || plan->page_done || !plan->ngroups))
        return STEP_DONE; /* runs */
    first = ext->paged ? plan->group : 0; /* the groups before it went */
    for (uint32_t g = first; g < plan->ngroups; g++)
        groups += (plan->planned >> g & 1) && plan->src_pages[g].npages;
    /* Completions leave an endpoint in order: a chunk whose gate is open
     * prefers an endpoint with no copy waiting for a gate before it, a gated
     * chunk one that has such copies already. */
    for (int pass = 0; pass < 2 && !dep; pass++)
        for (uint32_t i = 0; i < n && !dep; i++) {
            pdx_dep_t *d = deps[(ext->rr + i) % n];

            if ((pass == 1 || (d->completed < d->gated_to) == ext->gpu_gate) &&
                pdx_dep_room(d, pdx_dep_reserve(d)) >= groups)
                dep = d;
        }
    /* every page of every pair inside both regions, before anything goes */
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t g = first; g < plan->ngroups; g++) {
            const pdx_pages_t *sp = &plan->src_pages[g], *dp = &plan->dst_pages[g];
            const pdx_group_t *sg = &plan->src->groups[g], *dg = &plan->dst->groups[g];
            uint32_t pairs = pdx_plan_pairs(plan, g, L->pair_src, L->pair_dst);
            uint64_t smax = 0, dmax = 0, bytes = 0;
            pdx_tp_pages_t p;
            pdx_status_t status;

            if (pass == 1)
                plan->group = g; /* resumed here after a refusal */
            if (!pairs || !sp->npages)
                continue;
            for (uint32_t i = 0; i < sp->npages; i++) {
                smax = PDX_MAX(smax, (uint64_t)sp->pages[i]);
                dmax = PDX_MAX(dmax, (uint64_t)dp->pages[i]);
            }
            if ((uint64_t)pairs * 16 + (uint64_t)sp->npages * 8 > PDX_TP_PAGES_BYTES) {
                ext->paged = false; /* runs from the plan's cursor: group `first` */
                return STEP_DONE;
            }
            for (uint32_t k = 0; k < pairs; k++) {
                const pdx_buffer_t *sb = &sg->buffers[L->pair_src[k]];
                const pdx_buffer_t *db = &dg->buffers[L->pair_dst[k]];
                const uint64_t bpp = sb->bytes_per_page;
                const pdx_mem_t *m = sb->mem < PDX_MAX_MEMS ? &e->mems[sb->mem] : NULL;
                const pdx_remote_mem_t *rm = db->mem < PDX_MAX_MEMS ? &peer->mems[db->mem]
                                                                     : NULL;
                const uint32_t nic = dep ? dep->nic : 0, rnic = dep ? dep->rnic : 0;
                const pdx_tp_rmr_t *rmr;

                if (bpp != sg->buffers[L->pair_src[0]].bytes_per_page || !m || !m->used ||
                    !m->reg || !m->reg->gpu || !m->mr[nic] || !rm ||
                    !(rmr = atomic_load_explicit(&rm->rmr, memory_order_acquire)) ||
                    !(atomic_load_explicit(&rm->valid, memory_order_acquire) >> rnic & 1) ||
                    sb->offset > m->len || (smax + 1) > (m->len - sb->offset) / bpp ||
                    db->offset > rm->rkey[rnic].len ||
                    (dmax + 1) > (rm->rkey[rnic].len - db->offset) / bpp) {
                    /* runs from the plan's cursor (group `first`), which check
                     * each one and say why */
                    ext->paged = false;
                    return STEP_DONE;
                }
                if (pass == 0)
                    continue;
                L->s->page_bufs[k] = (pdx_tp_page_buf_t){
                    .mr = m->mr[nic], .offset = m->mr_off + sb->offset, .rmr = rmr,
                    .remote_addr = rm->rkey[rnic].addr + db->offset};
                bytes += (uint64_t)sp->npages * bpp;
            }
            if (pass == 0)
                continue;
            p = (pdx_tp_pages_t){.wr_id = pdx_wr_id_send(dep, wr_room(c), dep->posted),
                                 .flags = PDX_TP_SIGNALED, .nbufs = pairs,
                                 .bufs = L->s->page_bufs,
                                 .bytes_per_page = sg->buffers[L->pair_src[0]].bytes_per_page,
                                 .npages = sp->npages, .src = sp->pages, .dst = dp->pages,
                                 .gate = ext->gpu_gate ? &tgate : NULL};
            PDX_MARKER_PUSH_ROOM("pdx post", c->chunk->room);
            status = e->ops->post_pages(dep->ep, &p);
            PDX_MARKER_POP();
            if (status == PDX_ERR_FULL) {
                /* no gate stream free: the host waits for this gate */
                step_t r = pdx_send_gate_host(c);

                if (r != STEP_DONE)
                    return r;
                p.gate = NULL;
                status = e->ops->post_pages(dep->ep, &p);
            }
            if (status == PDX_ERR_AGAIN) /* its tables do not fit yet: copies free them */
                return STEP_WAIT;
            if (status != PDX_OK)
                return pdx_send_refused(c, dep, status, "copying the chunk's pages");
            pdx_send_count(c, dep, 1, bytes, bytes);
            if (p.gate) {
                dep->gated_to = dep->posted;
                atomic_store_explicit(&L->s->stats.gates_on_gpu,
                                      atomic_load_explicit(&L->s->stats.gates_on_gpu,
                                                           memory_order_relaxed) + 1,
                                      memory_order_relaxed);
            }
        }
        if (pass == 0 && !dep)
            return STEP_WAIT; /* it goes as pages: completions free a dep */
        ext->paged = true; /* from here on, pages or nothing */
    }
    plan->group = plan->ngroups; /* the plan is done: no run left */
    ext->rr++;
    return STEP_DONE;
}
