/*
 * pdx-info's GPUs: what the GPU runtime counts (hip/: bus id, name, NUMA
 * node, XGMI hive and where those came from), the topology they are placed
 * in, the GPU an engine would use, and the one-line summary of the
 * machine.
 *
 * A hwloc XML file given for the topology stands in for a whole machine:
 * when the runtime has no GPU, the file's GPUs are the ones the mapping
 * ranks and the engine would use.
 */
#include "info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void info_gpus_read(info_t *in)
{
    int count = 0;

    if (in->gpus_read)
        return;
    in->gpus_read = true;
    if (pdx_hip_device_count(&count) != PDX_OK) {
        const char *why = pdx_hip_no_device_reason();

        if (strncmp(why, "no GPU: ", 8) == 0)
            why += 8;
        snprintf(in->gpu_why, sizeof(in->gpu_why), "%s",
                 why[0] ? why : "the GPU runtime counts none");
        return;
    }
    if (count > INFO_GPUS_MAX)
        count = INFO_GPUS_MAX;
    for (int i = 0; i < count; i++) {
        pdx_hip_identity_t *id = &in->gpu[in->ngpus];

        if (pdx_hip_device_identity(i, id) != PDX_OK) {
            memset(id, 0, sizeof(*id));
            id->device = i;
            id->numa_node = -1;
        }
        in->ngpus++;
    }
}

const pdx_topo_t *info_topo(info_t *in)
{
    pdx_status_t st;

    if (in->topo_read)
        return in->topo;
    in->topo_read = true;
    if (in->topo_file) {
        st = pdx_topo_load(in->topo_file, &in->topo);
        if (st == PDX_ERR_UNSUPPORTED)
            snprintf(in->topo_why, sizeof(in->topo_why),
                     "no topology of %s: pdx was built without hwloc", in->topo_file);
        else if (st != PDX_OK)
            snprintf(in->topo_why, sizeof(in->topo_why), "cannot read the topology %s: %s",
                     in->topo_file, pdx_status_str(st));
    } else {
        st = pdx_topo_load(NULL, &in->topo);
        if (st == PDX_ERR_UNSUPPORTED)
            snprintf(in->topo_why, sizeof(in->topo_why),
                     "no topology: pdx was built without hwloc (NICs in the device list's "
                     "order, nothing bound by GPU)");
        else
            snprintf(in->topo_why, sizeof(in->topo_why),
                     "cannot read this machine's topology (hwloc): %s", pdx_status_str(st));
    }
    if (st != PDX_OK)
        in->topo = NULL;
    return in->topo;
}

void info_ranked_gpus(info_t *in)
{
    const pdx_topo_t *topo;

    if (in->ranked_from)
        return;
    info_gpus_read(in);
    if (in->ngpus > 0) {
        for (int i = 0; i < in->ngpus; i++)
            snprintf(in->ranked[i], sizeof(in->ranked[i]), "%s", in->gpu[i].pci_bus_id);
        in->nranked = (uint32_t)in->ngpus;
        in->ranked_from = "runtime";
        return;
    }
    in->ranked_from = "topology";
    topo = info_topo(in);
    if (topo)
        in->nranked = pdx_topo_gpus(topo, in->ranked, INFO_GPUS_MAX);
}

bool info_engine_gpu(info_t *in, int *ordinal_p, char *bus_id, size_t bus_len, char *why,
                     size_t whylen)
{
    int want = in->cfg.gpu;

    info_gpus_read(in);
    if (in->ngpus > 0) {
        if (want < 0 && pdx_hip_current_device(&want) != PDX_OK)
            want = 0;
        if (want >= in->ngpus) {
            snprintf(why, whylen, "PDX_GPU=%d: the GPU runtime has %d GPU%s", want, in->ngpus,
                     in->ngpus == 1 ? "" : "s");
            return false;
        }
        snprintf(bus_id, bus_len, "%s", in->gpu[want].pci_bus_id);
        *ordinal_p = want;
        return true;
    }
    if (in->topo_file) {
        info_ranked_gpus(in);
        if (want < 0)
            want = 0;
        if ((uint32_t)want < in->nranked) {
            snprintf(bus_id, bus_len, "%s", in->ranked[want]);
            *ordinal_p = want;
            return true;
        }
        snprintf(why, whylen, "no GPU %d: the GPU runtime has none and %s has %u", want,
                 in->topo_file, in->nranked);
        return false;
    }
    snprintf(why, whylen, "no GPU: %s", in->gpu_why);
    return false;
}

void info_nic_order(info_t *in, char *buf, size_t len)
{
    const pdx_topo_t *topo = info_topo(in);
    char bus[PDX_TOPO_BUS_ID_MAX], why[256];
    pdx_topo_gpu_t *g;
    size_t used = 0;
    int ordinal;

    buf[0] = '\0';
    if (!topo || !info_engine_gpu(in, &ordinal, bus, sizeof(bus), why, sizeof(why)))
        return;
    g = malloc(sizeof(*g));
    if (!g)
        return;
    pdx_topo_gpu(topo, bus, g);
    for (uint32_t i = 0; g->found && i < g->nnics && used + 1 < len; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i ? "," : "", g->nics[i].name);

        if (n < 0 || (size_t)n >= len - used) {
            buf[used] = '\0'; /* whole names only */
            break;
        }
        used += (size_t)n;
    }
    free(g);
}

/* "0x0123456789abcdef" or "none". */
static void hive_text(uint64_t hive, char *buf, size_t len)
{
    if (hive)
        snprintf(buf, len, "0x%016llx", (unsigned long long)hive);
    else
        snprintf(buf, len, "none");
}

void info_show_gpus(info_t *in)
{
    bool amd = strcmp(pdx_hip_platform_name(), "amd") == 0;

    info_gpus_read(in);
    if (in->json) {
        jw_obj("gpus");
        jw_int("count", in->ngpus);
        jw_str("platform", pdx_hip_platform_name());
        if (in->ngpus == 0)
            jw_strf("reason", "no GPU: %s", in->gpu_why);
        jw_arr("devices");
        for (int i = 0; i < in->ngpus; i++) {
            const pdx_hip_identity_t *id = &in->gpu[i];

            jw_obj(NULL);
            jw_int("ordinal", id->device);
            jw_str("pci_bus_id", id->pci_bus_id);
            jw_str("name", id->name[0] ? id->name : NULL);
            if (id->numa_node >= 0)
                jw_int("numa_node", id->numa_node);
            else
                jw_null("numa_node");
            if (id->hive_id)
                jw_strf("xgmi_hive", "0x%016llx", (unsigned long long)id->hive_id);
            else
                jw_null("xgmi_hive");
            jw_str("source", id->source ? id->source : "none");
            jw_obj_end();
        }
        jw_arr_end();
        jw_obj_end();
        return;
    }
    info_heading(in, INFO_GPUS);
    if (in->ngpus == 0) {
        info_line(0, "no GPU: %s", in->gpu_why);
        return;
    }
    info_line(0, "%d GPU%s (%s platform)", in->ngpus, in->ngpus == 1 ? "" : "s",
              pdx_hip_platform_name());
    for (int i = 0; i < in->ngpus; i++) {
        const pdx_hip_identity_t *id = &in->gpu[i];
        char numa[16] = "unknown", hive[24];

        if (id->numa_node >= 0)
            snprintf(numa, sizeof(numa), "%d", id->numa_node);
        hive_text(id->hive_id, hive, sizeof(hive));
        info_line(2, "GPU %d: %s  %s", id->device, id->pci_bus_id,
                  id->name[0] ? id->name : "(name unknown)");
        if (amd) /* XGMI hives are AMD's */
            info_line(4, "NUMA node %s, XGMI hive %s (from %s)", numa, hive,
                      id->source ? id->source : "none");
        else
            info_line(4, "NUMA node %s (from %s)", numa, id->source ? id->source : "none");
    }
}

void info_show_summary(info_t *in)
{
    char text[256];

    info_gpus_read(in);
    info_nics_read(in);
    if (in->ngpus == 0 && in->nnics == 0)
        snprintf(text, sizeof(text), "no GPU and no RDMA device: pdx serves host memory over tcp");
    else if (in->ngpus == 0)
        snprintf(text, sizeof(text), "no GPU, %u RDMA device%s: pdx serves host memory", in->nnics,
                 in->nnics == 1 ? "" : "s");
    else if (in->nnics == 0)
        snprintf(text, sizeof(text), "%d GPU%s, no RDMA device: pdx serves over tcp", in->ngpus,
                 in->ngpus == 1 ? "" : "s");
    else
        snprintf(text, sizeof(text), "%d GPU%s, %u RDMA device%s", in->ngpus,
                 in->ngpus == 1 ? "" : "s", in->nnics, in->nnics == 1 ? "" : "s");
    if (in->json) {
        jw_obj("machine");
        jw_int("gpus", in->ngpus);
        jw_uint("rdma_devices", in->nnics);
        jw_str("summary", text);
        jw_obj_end();
        return;
    }
    if (__builtin_popcount(in->sections) >= 2 && (in->sections & 1u))
        putchar('\n');
    info_line(0, "This machine: %s.", text);
}
