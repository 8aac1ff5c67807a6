#include "layout.h"

#include <stdio.h>
#include <stdlib.h>

pdx_layout_t *pdx_layout_alloc(uint32_t ngroups, const uint32_t *nbuffers)
{
    size_t size = sizeof(pdx_layout_t) + (size_t)ngroups * sizeof(pdx_group_t);
    pdx_layout_t *layout;
    pdx_buffer_t *buf;

    for (uint32_t g = 0; g < ngroups; g++)
        size += (size_t)nbuffers[g] * sizeof(pdx_buffer_t);
    layout = calloc(1, size);
    if (!layout)
        return NULL;
    layout->ngroups = ngroups;
    layout->groups = (pdx_group_t *)(layout + 1);
    buf = (pdx_buffer_t *)(layout->groups + ngroups);
    for (uint32_t g = 0; g < ngroups; g++) {
        layout->groups[g].nbuffers = nbuffers[g];
        layout->groups[g].buffers = buf;
        buf += nbuffers[g];
    }
    return layout;
}

void pdx_layout_free(pdx_layout_t *layout)
{
    free(layout);
}

uint64_t pdx_layout_page_bytes(const pdx_layout_t *layout)
{
    uint64_t bytes = 0;

    for (uint32_t g = 0; g < layout->ngroups; g++)
        for (uint32_t b = 0; b < layout->groups[g].nbuffers; b++)
            bytes += layout->groups[g].buffers[b].bytes_per_page;
    return bytes;
}

pdx_status_t pdx_layout_from_desc(const pdx_layout_desc_t *desc, pdx_layout_t **layout_p,
                                  char *err, size_t errlen)
{
    uint32_t nbuffers[PDX_LAYOUT_MAX_GROUPS];
    uint32_t layer_begin = 0, layer_end = 1;
    pdx_layout_t *layout;

    if (!desc || !(desc->field_mask & PDX_LAYOUT_FIELD_GROUPS) || !desc->groups ||
        desc->ngroups == 0 || desc->ngroups > PDX_LAYOUT_MAX_GROUPS) {
        snprintf(err, errlen, "layout needs 1..%d buffer groups", PDX_LAYOUT_MAX_GROUPS);
        return PDX_ERR_INVALID;
    }
    if (desc->field_mask & PDX_LAYOUT_FIELD_LAYERS) {
        layer_begin = desc->layer_begin;
        layer_end = desc->layer_end;
        if (layer_end <= layer_begin || layer_end - layer_begin > PDX_LAYOUT_MAX_LAYERS) {
            snprintf(err, errlen, "layer range [%u, %u) is empty or above %d layers",
                     layer_begin, layer_end, PDX_LAYOUT_MAX_LAYERS);
            return PDX_ERR_INVALID;
        }
    }
    for (uint32_t g = 0; g < desc->ngroups; g++) {
        const pdx_group_desc_t *gd = &desc->groups[g];
        uint64_t want = (uint64_t)(layer_end - layer_begin) * gd->buffers_per_layer;

        if (gd->nbuffers == 0 || gd->nbuffers > PDX_LAYOUT_MAX_BUFFERS || !gd->buffers ||
            gd->npages == 0 || gd->npages > UINT32_MAX) {
            snprintf(err, errlen, "group %u: needs 1..%d buffers and 1..2^32-1 pages", g,
                     PDX_LAYOUT_MAX_BUFFERS);
            return PDX_ERR_INVALID;
        }
        if (gd->flags & ~(uint32_t)(PDX_GROUP_NO_LAYERS | PDX_GROUP_STATE)) {
            snprintf(err, errlen, "group %u: unknown flags 0x%x", g, gd->flags);
            return PDX_ERR_INVALID;
        }
        if (!(gd->flags & PDX_GROUP_NO_LAYERS) && want != gd->nbuffers) {
            snprintf(err, errlen, "group %u: %u buffers, but %u layers x %u per layer", g,
                     gd->nbuffers, layer_end - layer_begin, gd->buffers_per_layer);
            return PDX_ERR_INVALID;
        }
        for (uint32_t b = 0; b < gd->nbuffers; b++) {
            const pdx_buffer_desc_t *bd = &gd->buffers[b];

            if (bd->bytes_per_page == 0 || bd->bytes_per_page > (UINT64_MAX - bd->offset) / gd->npages) {
                snprintf(err, errlen, "group %u buffer %u: page size 0 or size overflows", g, b);
                return PDX_ERR_INVALID;
            }
        }
        nbuffers[g] = gd->nbuffers;
    }

    layout = pdx_layout_alloc(desc->ngroups, nbuffers);
    if (!layout) {
        snprintf(err, errlen, "out of memory copying the layout");
        return PDX_ERR_NOMEM;
    }
    layout->layer_begin = layer_begin;
    layout->layer_end = layer_end;
    for (uint32_t g = 0; g < desc->ngroups; g++) {
        const pdx_group_desc_t *gd = &desc->groups[g];
        pdx_group_t *grp = &layout->groups[g];

        grp->flags = gd->flags;
        grp->buffers_per_layer = (gd->flags & PDX_GROUP_NO_LAYERS) ? gd->nbuffers
                                                                   : gd->buffers_per_layer;
        grp->npages = gd->npages;
        for (uint32_t b = 0; b < gd->nbuffers; b++) {
            grp->buffers[b].mem = gd->buffers[b].mem;
            grp->buffers[b].offset = gd->buffers[b].offset;
            grp->buffers[b].bytes_per_page = gd->buffers[b].bytes_per_page;
        }
    }
    *layout_p = layout;
    return PDX_OK;
}
