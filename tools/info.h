/*
 * pdx-info internals: pdx_info.c (flags, the version and configuration
 * sections), info_gpu.c (GPUs, the machine's summary, the engine's GPU),
 * info_nic.c (RDMA devices, the transport auto would choose), info_topo.c
 * (GPU -> NIC mapping, the shards' CPUs) and info_out.c (text and JSON
 * output).
 *
 * Each section reads what it needs through the info_t it is given, which
 * reads every fact once (the GPUs, the topology) and keeps why a fact
 * could not be read: a section that cannot be produced says why and the
 * others go on. Single-threaded.
 */
#ifndef PDX_TOOLS_INFO_H
#define PDX_TOOLS_INFO_H

#include <pdx/pdx.h>

#include "pdx_hip.h"
#include "topo.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exit statuses. */
enum {
    INFO_EXIT_OK    = 0,
    INFO_EXIT_FAIL  = 1, /* --transport: no engine could be opened */
    INFO_EXIT_USAGE = 2, /* bad flags */
};

/* Sections, in the order they print; a bit each in info_t.sections. */
typedef enum info_section {
    INFO_VERSION   = 0,
    INFO_GPUS      = 1,
    INFO_NICS      = 2,
    INFO_MAP       = 3,
    INFO_CPUS      = 4,
    INFO_TRANSPORT = 5,
    INFO_CONFIG    = 6,
    INFO_NSECTIONS = 7,
} info_section_t;

#define INFO_GPUS_MAX 64

typedef struct info {
    unsigned      sections;       /* 1 << info_section_t */
    bool          json;
    bool          open_engine;    /* --transport: open an engine too */
    pdx_config_t  cfg;            /* the PDX_* environment (invalid ones at defaults) */
    bool          cfg_valid;

    /* The topology: the machine's, or a hwloc XML file standing in for a
     * whole machine (--topology, PDX_TEST_TOPOLOGY_XML). */
    const char   *topo_file;
    bool          topo_read;
    pdx_topo_t   *topo;           /* NULL: could not be loaded (topo_why) */
    char          topo_why[256];

    /* The GPUs of the runtime. */
    bool          gpus_read;
    int           ngpus;
    pdx_hip_identity_t gpu[INFO_GPUS_MAX];
    char          gpu_why[256];   /* ngpus 0: why */

    /* The GPUs the mapping ranks NICs for: the runtime's, else the topology's. */
    uint32_t      nranked;
    char          ranked[INFO_GPUS_MAX][PDX_TOPO_BUS_ID_MAX];
    const char   *ranked_from;    /* "runtime", "topology" */

    /* The RDMA devices (info_nic.c). */
    bool          nics_read;
    struct rdma_info *rdma;       /* NULL: none read (nic_why) */
    uint32_t      nnics;
    char          nic_why[256];   /* nnics 0: why */
} info_t;

/* ------------------------------------------------------------ facts */

/* The runtime's GPUs (read once). */
void info_gpus_read(info_t *in);
/* The RDMA devices (read once): in->nnics, else why in in->nic_why. */
void info_nics_read(info_t *in);
void info_nics_free(info_t *in);
/* The topology (loaded once); NULL with in->topo_why. */
const pdx_topo_t *info_topo(info_t *in);
/* The GPUs to rank NICs for: the runtime's bus ids, else the topology's. */
void info_ranked_gpus(info_t *in);

/*
 * The GPU an engine of in->cfg would use (PDX_GPU, else the current
 * device): its bus id and ordinal. A topology file's GPUs stand in when
 * the runtime has none. false (why says so) when there is none.
 */
bool info_engine_gpu(info_t *in, int *ordinal_p, char *bus_id, size_t bus_len, char *why,
                     size_t whylen);

/* The RDMA devices nearest the engine's GPU, comma-separated, as the engine
 * hands them to the rdma transport; "" without a GPU in the topology. */
void info_nic_order(info_t *in, char *buf, size_t len);

/* ------------------------------------------------------------ sections */

void info_show_version(info_t *in);
void info_show_gpus(info_t *in);
void info_show_nics(info_t *in);
void info_show_map(info_t *in);
void info_show_cpus(info_t *in);
/* INFO_EXIT_FAIL when --transport could not open an engine. */
int info_show_transport(info_t *in);
void info_show_config(info_t *in);
/* gpus and nics both selected: what the machine has, in one line, first. */
void info_show_summary(info_t *in);
/* The README's table of every PDX_* variable. */
void info_config_markdown(void);

/* ------------------------------------------------------------ output (info_out.c) */

/* Text: a section's heading (when several sections print), "  key: value". */
void info_heading(const info_t *in, info_section_t section);
void info_line(int indent, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * JSON on stdout: one object, written as it goes; the writer tracks the
 * nesting so members are separated right. key is NULL for a value inside
 * an array (and for the outermost object).
 */
void jw_obj(const char *key);
void jw_obj_end(void);
void jw_arr(const char *key);
void jw_arr_end(void);
void jw_str(const char *key, const char *value); /* NULL: null */
void jw_strf(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jw_int(const char *key, long long value);
void jw_uint(const char *key, unsigned long long value);
void jw_num(const char *key, double value);
void jw_bool(const char *key, bool value);
void jw_null(const char *key);

#endif
