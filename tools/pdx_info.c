/* pdx-info: what this pdx build is and how it is configured. */
#include <stdio.h>
#include <string.h>

#include "config.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: pdx-info [--version] [--config [--markdown]] [--transport]\n"
                 "  --version   library and protocol version\n"
                 "  --transport open an engine as PDX_* says and print its transport and NICs\n"
                 "  --config    every PDX_* variable: current value, default, meaning\n"
                 "  --markdown  with --config: the README's table\n");
}

/* What PDX_TRANSPORT picks on this machine, and why (PDX_LOG=info). */
static int show_transport(void)
{
    pdx_engine_t *e;
    pdx_status_t st = pdx_engine_create(NULL, &e);
    pdx_stats_t stats;

    if (st != PDX_OK) {
        fprintf(stderr, "pdx-info: no engine: %s\n", pdx_status_str(st));
        return 1;
    }
    printf("transport: %s\n", pdx_engine_transport(e));
    if (pdx_engine_stats(e, &stats) == PDX_OK)
        printf("nics: %llu\n", (unsigned long long)stats.nics);
    pdx_engine_destroy(e);
    return 0;
}

int main(int argc, char **argv)
{
    int config = 0, markdown = 0;
    pdx_config_t cfg;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            config = 1;
        } else if (strcmp(argv[i], "--markdown") == 0) {
            markdown = 1;
        } else if (strcmp(argv[i], "--transport") == 0) {
            return show_transport();
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("pdx %s, protocol %d\n", pdx_version(), PDX_PROTOCOL_VERSION);
            return 0;
        } else {
            usage(strcmp(argv[i], "--help") == 0 ? stdout : stderr);
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (markdown) {
        pdx_config_print_markdown(stdout);
        return 0;
    }
    if (!config) {
        printf("pdx %s, protocol %d\n", pdx_version(), PDX_PROTOCOL_VERSION);
        return 0;
    }
    if (pdx_config_init(&cfg) != PDX_OK)
        fprintf(stderr, "pdx-info: some PDX_* variables are invalid (see above); showing the rest\n");
    pdx_config_print(stdout, &cfg);
    return 0;
}
