/*
 * plan: one chunk's page lists -> validated, coalesced write runs.
 *
 * pdx_plan_init() checks everything a run depends on, so pdx_plan_next()
 * never fails and never looks at a page index twice for one buffer:
 *   - both layouts have the same groups (count, flags, buffers_per_layer;
 *     PDX_GROUP_NO_LAYERS groups the same number of buffers) and matched
 *     buffers have the same bytes_per_page;
 *   - layered groups need at least one layer both layouts hold;
 *   - for every group that is planned (not a PDX_GROUP_STATE group skipped
 *     for lack of PDX_PLAN_STATE), both lists have the same length and every
 *     index is below its group's npages. The lists of skipped groups are not
 *     read at all.
 *
 * Runs. For one matched buffer pair the chunk is the concatenation of its
 * pages in list order. List positions i, i + 1 whose pages follow each other
 * on both sides (src[i + 1] == src[i] + 1 and dst[i + 1] == dst[i] + 1) form
 * one segment, a single byte range on each side; a segment is cut into
 * pieces of max_msg_size bytes, the last one shorter. So a page larger than
 * max_msg_size spans several runs and a run cut by the cap may end inside a
 * page; the next run resumes there (plan->page, plan->page_done). The count,
 * sum over segments of ceil(segment bytes / max_msg_size), is the fewest
 * writes that can carry the map. With plan->piece set, a run also ends where
 * either side's offset reaches a multiple of it (regions registered in
 * pieces take no WR across a piece boundary).
 *
 * Order: group, then layer of the common range, then part, then list
 * position. pdx_plan_init() notes which groups' lists are one segment on both
 * sides; for those pdx_plan_next() cuts runs without reading the lists.
 *
 * pdx_plan_next() is on the shard's post path: no allocation, no locks, no
 * logging. A plan belongs to one thread at a time.
 */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

_Static_assert(PDX_LAYOUT_MAX_GROUPS <= 32, "plan keeps one bit per group in a uint32_t");

static pdx_status_t plan_fail(char *err, size_t errlen, pdx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static pdx_status_t plan_fail(char *err, size_t errlen, pdx_status_t status, const char *fmt, ...)
{
    va_list ap;

    if (err && errlen) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

static int group_has_layers(const pdx_group_t *grp)
{
    return !(grp->flags & PDX_GROUP_NO_LAYERS);
}

/* Buffer index of (layer index in the common range, part) on one side. */
static inline uint32_t plan_buffer_index(const pdx_group_t *grp, uint32_t layer0, uint32_t layer,
                                         uint32_t part)
{
    if (!group_has_layers(grp))
        return part;
    return (layer0 + layer) * grp->buffers_per_layer + part;
}

static inline uint32_t plan_group_layers(const pdx_plan_t *plan, const pdx_group_t *grp)
{
    return group_has_layers(grp) ? plan->nlayers : 1;
}

/* Same shape on both sides and the same page size for every matched pair. */
static pdx_status_t plan_check_group(const pdx_plan_t *plan, uint32_t g, char *err, size_t errlen)
{
    const pdx_group_t *sg = &plan->src->groups[g];
    const pdx_group_t *dg = &plan->dst->groups[g];
    uint32_t nlayers = plan_group_layers(plan, sg);
    uint32_t src_layer0 = group_has_layers(sg) ? plan->src_layer0 : 0;
    uint32_t dst_layer0 = group_has_layers(sg) ? plan->dst_layer0 : 0;

    if (sg->flags != dg->flags)
        return plan_fail(err, errlen, PDX_ERR_INVALID,
                         "group %u: flags differ (src 0x%x, dst 0x%x)", g, sg->flags, dg->flags);
    if (sg->buffers_per_layer != dg->buffers_per_layer)
        return plan_fail(err, errlen, PDX_ERR_INVALID,
                         "group %u: buffers per layer differ (src %u, dst %u)", g,
                         sg->buffers_per_layer, dg->buffers_per_layer);
    if (!group_has_layers(sg) && sg->nbuffers != dg->nbuffers)
        return plan_fail(err, errlen, PDX_ERR_INVALID,
                         "group %u: %u src buffers but %u dst buffers", g, sg->nbuffers,
                         dg->nbuffers);
    if (group_has_layers(sg) && plan->nlayers == 0)
        return plan_fail(err, errlen, PDX_ERR_INVALID,
                         "group %u: no common layers (src [%u, %u), dst [%u, %u))", g,
                         plan->src->layer_begin, plan->src->layer_end, plan->dst->layer_begin,
                         plan->dst->layer_end);
    /* A layout from the wire gets here too: every matched index must exist. */
    if (sg->buffers_per_layer == 0 ||
        (uint64_t)(src_layer0 + nlayers) * sg->buffers_per_layer > sg->nbuffers ||
        (uint64_t)(dst_layer0 + nlayers) * dg->buffers_per_layer > dg->nbuffers)
        return plan_fail(err, errlen, PDX_ERR_INVALID,
                         "group %u: buffer counts (src %u, dst %u) do not fit %u layers x %u", g,
                         sg->nbuffers, dg->nbuffers, nlayers, sg->buffers_per_layer);

    for (uint32_t layer = 0; layer < nlayers; layer++) {
        for (uint32_t part = 0; part < sg->buffers_per_layer; part++) {
            uint32_t sb = plan_buffer_index(sg, plan->src_layer0, layer, part);
            uint32_t db = plan_buffer_index(dg, plan->dst_layer0, layer, part);
            uint64_t sbytes = sg->buffers[sb].bytes_per_page;
            uint64_t dbytes = dg->buffers[db].bytes_per_page;

            if (sbytes == 0 || sbytes != dbytes)
                return plan_fail(err, errlen, PDX_ERR_INVALID,
                                 "group %u: src buffer %u has %llu bytes per page, dst buffer "
                                 "%u has %llu", g, sb, (unsigned long long)sbytes, db,
                                 (unsigned long long)dbytes);
        }
    }
    return PDX_OK;
}

/* Lengths and every index; notes whether the lists are one segment. */
static pdx_status_t plan_check_pages(pdx_plan_t *plan, uint32_t g, char *err, size_t errlen)
{
    const pdx_pages_t *sl = &plan->src_pages[g];
    const pdx_pages_t *dl = &plan->dst_pages[g];
    uint64_t snpages = plan->src->groups[g].npages;
    uint64_t dnpages = plan->dst->groups[g].npages;
    int contiguous = 1;

    if (sl->npages != dl->npages)
        return plan_fail(err, errlen, PDX_ERR_INVALID,
                         "group %u: %u src pages but %u dst pages", g, sl->npages, dl->npages);
    if (sl->npages == 0)
        return PDX_OK;
    if (!sl->pages || !dl->pages)
        return plan_fail(err, errlen, PDX_ERR_INVALID, "group %u: %u pages but no %s list", g,
                         sl->npages, sl->pages ? "dst" : "src");

    for (uint32_t i = 0; i < sl->npages; i++) {
        uint32_t s = sl->pages[i], d = dl->pages[i];

        if (PDX_UNLIKELY(s >= snpages))
            return plan_fail(err, errlen, PDX_ERR_RANGE,
                             "group %u: src page %u at position %u is out of range (%llu pages)",
                             g, s, i, (unsigned long long)snpages);
        if (PDX_UNLIKELY(d >= dnpages))
            return plan_fail(err, errlen, PDX_ERR_RANGE,
                             "group %u: dst page %u at position %u is out of range (%llu pages)",
                             g, d, i, (unsigned long long)dnpages);
        if (i > 0 && (s != sl->pages[i - 1] + 1 || d != dl->pages[i - 1] + 1))
            contiguous = 0;
    }
    plan->planned |= 1u << g;
    if (contiguous)
        plan->contiguous |= 1u << g;
    return PDX_OK;
}

pdx_status_t pdx_plan_init(pdx_plan_t *plan, const pdx_layout_t *src, const pdx_layout_t *dst,
                           const pdx_pages_t *src_pages, const pdx_pages_t *dst_pages,
                           uint64_t max_msg_size, unsigned flags, char *err, size_t errlen)
{
    uint32_t begin, end;
    pdx_status_t status;

    if (!plan)
        return plan_fail(err, errlen, PDX_ERR_INVALID, "no plan");
    memset(plan, 0, sizeof(*plan)); /* ngroups 0: pdx_plan_next() yields nothing */
    if (!src || !dst || !src_pages || !dst_pages)
        return plan_fail(err, errlen, PDX_ERR_INVALID, "plan needs both layouts and page lists");
    if (max_msg_size == 0)
        return plan_fail(err, errlen, PDX_ERR_INVALID, "max message size is 0");
    if (src->ngroups != dst->ngroups)
        return plan_fail(err, errlen, PDX_ERR_INVALID,
                         "layouts differ in buffer groups (src %u, dst %u)", src->ngroups,
                         dst->ngroups);
    if (src->ngroups > PDX_LAYOUT_MAX_GROUPS)
        return plan_fail(err, errlen, PDX_ERR_INVALID, "%u buffer groups, at most %d",
                         src->ngroups, PDX_LAYOUT_MAX_GROUPS);

    plan->src = src;
    plan->dst = dst;
    plan->src_pages = src_pages;
    plan->dst_pages = dst_pages;
    plan->max_msg_size = max_msg_size;
    plan->piece = 0;
    plan->flags = flags;
    begin = PDX_MAX(src->layer_begin, dst->layer_begin);
    end = PDX_MIN(src->layer_end, dst->layer_end);
    if (end > begin) {
        plan->nlayers = end - begin;
        plan->src_layer0 = begin - src->layer_begin;
        plan->dst_layer0 = begin - dst->layer_begin;
    }

    for (uint32_t g = 0; g < src->ngroups; g++) {
        status = plan_check_group(plan, g, err, errlen);
        if (status != PDX_OK)
            return status; /* ngroups is still 0 */
        if ((src->groups[g].flags & PDX_GROUP_STATE) && !(flags & PDX_PLAN_STATE))
            continue;
        status = plan_check_pages(plan, g, err, errlen);
        if (status != PDX_OK)
            return status;
    }
    plan->ngroups = src->ngroups;
    return PDX_OK;
}

/*
 * Runs of one buffer pair from the cursor (plan->page, plan->page_done) into
 * out[0, max); moves the cursor. The buffer is done when plan->page == count.
 */
static inline uint32_t plan_buffer_runs(pdx_plan_t *plan, const pdx_buffer_t *sb,
                                        const pdx_buffer_t *db, const uint32_t *sp,
                                        const uint32_t *dp, uint32_t count, int contiguous,
                                        pdx_run_t *out, uint32_t max)
{
    /* in locals: the stores to out may alias every pointer argument */
    const uint64_t bpp = sb->bytes_per_page;
    const uint64_t msg_max = plan->max_msg_size, piece = plan->piece;
    const uint64_t soff = sb->offset, doff = db->offset;
    const uint32_t smem = sb->mem, dmem = db->mem;
    uint32_t i = plan->page;
    uint64_t done = plan->page_done;
    uint32_t n = 0;
    pdx_run_t *o = out, *const end = out + max;

    if (contiguous) {
        /* One segment: a single byte range on each side. */
        const uint64_t sbase = soff + (uint64_t)sp[0] * bpp;
        const uint64_t dbase = doff + (uint64_t)dp[0] * bpp;
        const uint64_t total = (uint64_t)count * bpp;
        uint64_t pos = (uint64_t)i * bpp + done;

        while (n < max && pos < total) {
            uint64_t len = PDX_MIN(pdx_plan_run_cap(msg_max, piece, sbase + pos, dbase + pos), total - pos);

            out[n].src_mem = smem;
            out[n].dst_mem = dmem;
            out[n].src_offset = sbase + pos;
            out[n].dst_offset = dbase + pos;
            out[n].len = len;
            n++;
            pos += len;
        }
        plan->page = (uint32_t)(pos / bpp);
        plan->page_done = pos % bpp;
        return n;
    }

    for (; o != end && i < count; o++) {
        const uint32_t s = sp[i], d = dp[i];
        uint64_t len = bpp - done, cap;

        o->src_mem = smem;
        o->dst_mem = dmem;
        o->src_offset = soff + (uint64_t)s * bpp + done;
        o->dst_offset = doff + (uint64_t)d * bpp + done;
        cap = pdx_plan_run_cap(msg_max, piece, o->src_offset, o->dst_offset);
        if (len > cap) {
            /* The rest of this page alone exceeds the cap. */
            len = cap;
            done += cap;
        } else {
            /* Pages following s and d on both sides: s + k, d + k at i + k.
             * No overflow: the page before is a valid index, below npages. */
            i++;
            done = 0;
            if (PDX_UNLIKELY(i < count && sp[i] == s + 1 && dp[i] == d + 1)) {
                uint32_t k = 1;

                do {
                    uint64_t room = cap - len;

                    if (bpp > room) { /* room 0: the next run starts at page i */
                        len += room;
                        done = room;
                        break;
                    }
                    len += bpp;
                    i++;
                    k++;
                } while (i < count && sp[i] == s + k && dp[i] == d + k);
            }
        }
        o->len = len;
    }
    n = (uint32_t)(o - out);
    plan->page = i;
    plan->page_done = done;
    return n;
}

/* pdx_plan_next() of a plan of explicit runs. */
static uint32_t runs_next(pdx_plan_t *plan, pdx_run_t *out, uint32_t max)
{
    uint32_t n = 0;

    while (n < max && plan->page < plan->nruns) {
        const pdx_run_t *r = &plan->runs[plan->page];
        const uint64_t done = plan->page_done;
        uint64_t len;

        if (done >= r->len) {
            plan->page++;
            plan->page_done = 0;
            continue;
        }
        len = pdx_plan_run_cap(PDX_MIN(r->len - done, plan->max_msg_size), plan->piece,
                               r->src_offset + done, r->dst_offset + done);
        out[n++] = (pdx_run_t){.src_mem = r->src_mem, .dst_mem = r->dst_mem,
                               .src_offset = r->src_offset + done,
                               .dst_offset = r->dst_offset + done, .len = len};
        plan->page_done = done + len;
    }
    return n;
}

void pdx_plan_init_runs(pdx_plan_t *plan, const pdx_run_t *runs, uint32_t n,
                        uint64_t max_msg_size)
{
    *plan = (pdx_plan_t){.runs = runs, .nruns = runs ? n : 0,
                         .max_msg_size = max_msg_size ? max_msg_size : UINT64_MAX};
}

uint32_t pdx_plan_coalesce(pdx_run_t *runs, uint32_t n)
{
    uint32_t out = 0;

    for (uint32_t i = 0; i < n; i++) {
        pdx_run_t *last = out ? &runs[out - 1] : NULL;
        const pdx_run_t r = runs[i];

        if (r.len == 0)
            continue;
        if (last && last->src_mem == r.src_mem && last->dst_mem == r.dst_mem &&
            last->src_offset + last->len == r.src_offset &&
            last->dst_offset + last->len == r.dst_offset && last->len + r.len > last->len)
            last->len += r.len;
        else
            runs[out++] = r;
    }
    return out;
}

uint32_t pdx_plan_next(pdx_plan_t *plan, pdx_run_t *out, uint32_t max)
{
    uint32_t n = 0;

    if (plan->runs)
        return runs_next(plan, out, max);
    while (n < max && plan->group < plan->ngroups) {
        const uint32_t g = plan->group;
        const pdx_group_t *sg, *dg;
        uint32_t count, sb, db;

        if (!(plan->planned & (1u << g))) {
            plan->group++;
            continue;
        }
        sg = &plan->src->groups[g];
        dg = &plan->dst->groups[g];
        count = plan->src_pages[g].npages;
        sb = plan_buffer_index(sg, plan->src_layer0, plan->layer, plan->part);
        db = plan_buffer_index(dg, plan->dst_layer0, plan->layer, plan->part);

        n += plan_buffer_runs(plan, &sg->buffers[sb], &dg->buffers[db], plan->src_pages[g].pages,
                              plan->dst_pages[g].pages, count,
                              (plan->contiguous >> g) & 1u, out + n, max - n);
        if (plan->page < count)
            break; /* out is full */

        plan->page = 0;
        plan->page_done = 0;
        if (++plan->part < sg->buffers_per_layer)
            continue;
        plan->part = 0;
        if (++plan->layer < plan_group_layers(plan, sg))
            continue;
        plan->layer = 0;
        plan->group++;
    }
    return n;
}

int pdx_plan_pages(const pdx_plan_t *plan, pdx_plan_page_fn fn, void *ctx)
{
    if (plan->runs)
        return 0;
    for (uint32_t g = 0; g < plan->ngroups; g++) {
        const pdx_group_t *sg = &plan->src->groups[g], *dg = &plan->dst->groups[g];
        const pdx_pages_t *sl = &plan->src_pages[g], *dl = &plan->dst_pages[g];

        if (!(plan->planned & (1u << g)))
            continue;
        for (uint32_t layer = 0; layer < plan_group_layers(plan, sg); layer++) {
            for (uint32_t part = 0; part < sg->buffers_per_layer; part++) {
                uint32_t sb = plan_buffer_index(sg, plan->src_layer0, layer, part);
                uint32_t db = plan_buffer_index(dg, plan->dst_layer0, layer, part);

                for (uint32_t i = 0; i < sl->npages; i++) {
                    int r = fn(ctx, g, sb, sl->pages[i], db, dl->pages[i]);

                    if (r)
                        return r;
                }
            }
        }
    }
    return 0;
}

uint32_t pdx_plan_pairs(const pdx_plan_t *plan, uint32_t g, uint32_t *sb, uint32_t *db)
{
    const pdx_group_t *sg, *dg;
    uint32_t n = 0, nlayers;

    if (g >= plan->ngroups || !(plan->planned & (1u << g)))
        return 0;
    sg = &plan->src->groups[g];
    dg = &plan->dst->groups[g];
    nlayers = plan_group_layers(plan, sg);
    for (uint32_t layer = 0; layer < nlayers; layer++)
        for (uint32_t part = 0; part < sg->buffers_per_layer; part++, n++) {
            sb[n] = plan_buffer_index(sg, plan->src_layer0, layer, part);
            db[n] = plan_buffer_index(dg, plan->dst_layer0, layer, part);
        }
    return n;
}

void pdx_plan_layers(pdx_plan_t *plan, uint32_t begin, uint32_t end, bool unlayered)
{
    const uint32_t first = plan->src->layer_begin + plan->src_layer0;
    uint32_t lo = PDX_MAX(begin, first), hi = PDX_MIN(end, first + plan->nlayers);

    if (lo >= hi) {
        plan->nlayers = 0;
    } else {
        plan->src_layer0 += lo - first;
        plan->dst_layer0 += lo - first;
        plan->nlayers = hi - lo;
    }
    for (uint32_t g = 0; g < plan->ngroups; g++)
        if (!group_has_layers(&plan->src->groups[g]) ? !unlayered : plan->nlayers == 0)
            plan->planned &= ~(1u << g);
}
