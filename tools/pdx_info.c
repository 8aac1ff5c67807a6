/* pdx-info: what this pdx build is and how it is configured (public API only). */
#include <pdx/pdx.h>
#include <stdio.h>
#include <string.h>

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

/* Every variable: as a table with values, or as the README's markdown. */
static void show_config(const pdx_config_t *cfg, int markdown)
{
    pdx_config_var_t v;

    if (markdown)
        printf("| variable | default | meaning |\n|---|---|---|\n");
    else
        printf("%-26s %-12s %-12s %s\n", "variable", "value", "default", "meaning");
    for (uint32_t i = 0; pdx_config_describe(cfg, i, &v) == PDX_OK; i++) {
        if (!markdown) {
            printf("%-26s %-12s %-12s %s\n", v.name, v.value, v.default_value, v.help);
            continue;
        }
        printf("| `%s` | `%s` | %s", v.name, v.default_value, v.help);
        if (v.choices) {
            printf(": ");
            for (const char *c = v.choices; *c; c++)
                fputs(*c == '|' ? ", " : (char[]){*c, '\0'}, stdout);
        }
        printf(" |\n");
    }
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
        show_config(NULL, 1);
        return 0;
    }
    if (!config) {
        printf("pdx %s, protocol %d\n", pdx_version(), PDX_PROTOCOL_VERSION);
        return 0;
    }
    if (pdx_config_init(&cfg) != PDX_OK)
        fprintf(stderr, "pdx-info: some PDX_* variables are invalid (see above); showing the rest\n");
    show_config(&cfg, 0);
    return 0;
}
