/*
 * pdx-info: what this pdx build is and what it finds on this machine, as
 * ibv_devinfo and rocm-smi tell theirs: the build, the GPUs, the RDMA
 * devices, which NIC sits nearest each GPU, the CPUs the shards would run
 * on, the transport PDX_TRANSPORT=auto would choose, and every PDX_*
 * variable. No flag prints every section (a heading each); flags pick
 * sections and combine (-gn); --json prints one JSON object of them.
 *
 * A section that cannot be produced says why and the others still print:
 * the exit status is 0 but for bad flags (2, usage on stderr) and
 * --transport when no engine opens (1).
 *
 * It links the engine's internals (the topology, hip/, rdma/info.c), not
 * libpdx.so: pdx_tool() in tools/CMakeLists.txt; the tests build a second
 * copy on softnic. Hidden: --topology FILE (or PDX_TEST_TOPOLOGY_XML) reads
 * a hwloc XML file in place of the machine's topology, and its GPUs stand
 * in when the GPU runtime has none.
 */
#include "info.h"
#include "log.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PDX_HAVE_SODIUM
#define PDX_HAVE_SODIUM 0
#endif
#ifndef PDX_HAVE_HWLOC
#define PDX_HAVE_HWLOC 0
#endif

static void usage(FILE *out)
{
    fprintf(out,
        "usage: pdx-info [-VgnmctC] [--json] [--markdown]\n"
        "What this pdx build is and what it finds on this machine. Without flags: every\n"
        "section; flags pick sections and combine (-gn is --gpus --nics).\n"
        "  -V, --version    pdx and protocol version, GPU platform, what the build has\n"
        "  -g, --gpus       GPUs: PCI bus id, name, NUMA node, XGMI hive, where known from\n"
        "  -n, --nics       RDMA devices: GUID, firmware, ports, speed, GIDs and RoCE versions\n"
        "  -m, --map        each GPU's NICs, nearest first, and why; its NUMA node and CPUs\n"
        "  -c, --cpus       the CPUs the shards run on under PDX_CPU_AFFINITY and PDX_GPU\n"
        "  -t, --transport  what PDX_TRANSPORT=auto chooses here and why; then open an\n"
        "                   engine as PDX_* says and print its transport and NICs (exit 1\n"
        "                   when none opens)\n"
        "  -C, --config     every PDX_* variable: current value, default, meaning\n"
        "      --markdown   with --config (alone): docs/configuration.md's table\n"
        "  -j, --json       one JSON object of the sections\n"
        "  -h, --help       this text\n"
        "Exit status: 0; 1 when --transport opens no engine; 2 for bad flags.\n");
}

/* ---------------------------------------------------------------- version */

void info_show_version(info_t *in)
{
    const char *platform = pdx_hip_platform_name();
    bool rdma = false, amd = strcmp(platform, "amd") == 0;

#ifdef PDX_HAVE_RDMA
    rdma = true;
#endif
    if (in->json) {
        jw_obj("version");
        jw_str("pdx", pdx_version());
        jw_int("protocol", PDX_PROTOCOL_VERSION);
        jw_str("gpu_platform", platform);
        jw_obj("capabilities");
        jw_bool("tcp", true);
        jw_bool("rdma", rdma);
        jw_bool("libsodium", PDX_HAVE_SODIUM);
        jw_bool("hwloc", PDX_HAVE_HWLOC);
        jw_bool("rocm_smi", amd);
        jw_obj_end();
        jw_obj_end();
        return;
    }
    info_heading(in, INFO_VERSION);
    printf("pdx %s, protocol %d\n", pdx_version(), PDX_PROTOCOL_VERSION);
    info_line(2, "GPU platform : %s%s", platform,
              amd ? " (HIP)" : strcmp(platform, "nvidia") == 0 ? " (CUDA runtime)"
                                                                : " (no GPU runtime: host memory only)");
    info_line(2, "transports   : tcp%s", rdma ? ", rdma (libibverbs)"
                                              : "; no rdma (libibverbs was not found at build time)");
    info_line(2, "auth         : %s", PDX_HAVE_SODIUM
                                          ? "libsodium (PDX_AUTH_KEY: proof and sealing)"
                                          : "none (libsodium was not found: PDX_AUTH_KEY is refused)");
    info_line(2, "topology     : %s", PDX_HAVE_HWLOC
                                          ? "hwloc (GPU, NIC and CPU placement)"
                                          : "none (hwloc was not found: NICs in the device "
                                            "list's order, nothing bound by GPU)");
    info_line(2, "GPU facts    : %s", amd ? "rocm-smi (librocm_smi64, opened at run time), else sysfs"
                                          : strcmp(platform, "nvidia") == 0 ? "the CUDA runtime and sysfs"
                                                                            : "none");
}

/* ----------------------------------------------------------------- config */

static void config_choices_md(const char *choices)
{
    printf(": ");
    for (const char *c = choices; *c; c++)
        fputs(*c == '|' ? ", " : (char[]){*c, '\0'}, stdout);
}

/* docs/configuration.md's table: `pdx-info --config --markdown`, byte for byte. */
void info_config_markdown(void)
{
    pdx_config_var_t v;

    printf("| variable | default | meaning |\n|---|---|---|\n");
    for (uint32_t i = 0; pdx_config_describe(NULL, i, &v) == PDX_OK; i++) {
        printf("| `%s` | `%s` | %s", v.name, v.default_value, v.help);
        if (v.choices)
            config_choices_md(v.choices);
        printf(" |\n");
    }
}

void info_show_config(info_t *in)
{
    pdx_config_var_t v;

    if (in->json) {
        jw_obj("config");
        jw_bool("valid", in->cfg_valid);
        jw_arr("variables");
        for (uint32_t i = 0; pdx_config_describe(&in->cfg, i, &v) == PDX_OK; i++) {
            jw_obj(NULL);
            jw_str("name", v.name);
            jw_str("value", v.value);
            jw_str("default", v.default_value);
            jw_str("help", v.help);
            jw_str("choices", v.choices);
            jw_bool("set", getenv(v.name) != NULL);
            jw_obj_end();
        }
        jw_arr_end();
        jw_obj_end();
        return;
    }
    info_heading(in, INFO_CONFIG);
    printf("%-26s %-12s %-12s %s\n", "variable", "value", "default", "meaning");
    for (uint32_t i = 0; pdx_config_describe(&in->cfg, i, &v) == PDX_OK; i++)
        printf("%-26s %-12s %-12s %s\n", v.name, v.value, v.default_value, v.help);
}

/* ------------------------------------------------------------------ flags */

enum { OPT_MARKDOWN = 256, OPT_TOPOLOGY };

static const struct option options[] = {
    {"version", no_argument, NULL, 'V'},
    {"gpus", no_argument, NULL, 'g'},
    {"nics", no_argument, NULL, 'n'},
    {"map", no_argument, NULL, 'm'},
    {"cpus", no_argument, NULL, 'c'},
    {"transport", no_argument, NULL, 't'},
    {"config", no_argument, NULL, 'C'},
    {"markdown", no_argument, NULL, OPT_MARKDOWN},
    {"json", no_argument, NULL, 'j'},
    {"help", no_argument, NULL, 'h'},
    {"topology", required_argument, NULL, OPT_TOPOLOGY}, /* hidden: tests */
    {NULL, 0, NULL, 0},
};

/* 0, or INFO_EXIT_USAGE after a message; *help: --help was printed. */
static int parse_args(int argc, char **argv, info_t *in, bool *markdown, bool *help)
{
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":VgnmctCjh", options, NULL)) != -1) {
        switch (c) {
        case 'V': in->sections |= 1u << INFO_VERSION; break;
        case 'g': in->sections |= 1u << INFO_GPUS; break;
        case 'n': in->sections |= 1u << INFO_NICS; break;
        case 'm': in->sections |= 1u << INFO_MAP; break;
        case 'c': in->sections |= 1u << INFO_CPUS; break;
        case 't':
            in->sections |= 1u << INFO_TRANSPORT;
            in->open_engine = true;
            break;
        case 'C': in->sections |= 1u << INFO_CONFIG; break;
        case OPT_MARKDOWN: *markdown = true; break;
        case 'j': in->json = true; break;
        case OPT_TOPOLOGY: in->topo_file = optarg; break;
        case 'h':
            usage(stdout);
            *help = true;
            return 0;
        case ':':
            fprintf(stderr, "pdx-info: %s needs an argument\n", argv[optind - 1]);
            usage(stderr);
            return INFO_EXIT_USAGE;
        default:
            if (optopt)
                fprintf(stderr, "pdx-info: unknown flag -%c\n", optopt);
            else
                fprintf(stderr, "pdx-info: unknown flag %s\n", argv[optind - 1]);
            usage(stderr);
            return INFO_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pdx-info: unexpected argument %s\n", argv[optind]);
        usage(stderr);
        return INFO_EXIT_USAGE;
    }
    if (*markdown && (in->json || (in->sections & ~(1u << INFO_CONFIG)))) {
        fprintf(stderr, "pdx-info: --markdown goes with --config alone\n");
        usage(stderr);
        return INFO_EXIT_USAGE;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static info_t in; /* large: the GPUs' identities */
    bool markdown = false, help = false;
    int rc = parse_args(argc, argv, &in, &markdown, &help);

    if (rc || help)
        return rc;
    if (markdown) {
        info_config_markdown();
        return INFO_EXIT_OK;
    }
    if (!in.topo_file) {
        const char *xml = getenv("PDX_TEST_TOPOLOGY_XML");

        if (xml && *xml)
            in.topo_file = xml;
    }
    in.cfg_valid = pdx_config_init(&in.cfg) == PDX_OK;
    if (!in.cfg_valid)
        fprintf(stderr, "pdx-info: some PDX_* variables are invalid (see above); showing the "
                        "rest with their defaults\n");
    pdx_log_set_level(in.cfg.log_level); /* PDX_LOG, as an engine sets it */
    if (!in.sections)
        in.sections = (1u << INFO_NSECTIONS) - 1;
    if (in.json)
        jw_obj(NULL);
    rc = INFO_EXIT_OK;
    for (int s = 0; s < INFO_NSECTIONS; s++) {
        if (!(in.sections & (1u << s)))
            continue;
        if (s == INFO_GPUS && (in.sections & (1u << INFO_NICS)))
            info_show_summary(&in);
        switch ((info_section_t)s) {
        case INFO_VERSION: info_show_version(&in); break;
        case INFO_GPUS: info_show_gpus(&in); break;
        case INFO_NICS: info_show_nics(&in); break;
        case INFO_MAP: info_show_map(&in); break;
        case INFO_CPUS: info_show_cpus(&in); break;
        case INFO_TRANSPORT: rc = info_show_transport(&in); break;
        case INFO_CONFIG: info_show_config(&in); break;
        case INFO_NSECTIONS: break;
        }
        fflush(stdout);
    }
    if (in.json)
        jw_obj_end();
    info_nics_free(&in);
    pdx_topo_free(in.topo);
    return rc;
}
