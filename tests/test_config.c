#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "config.h"

Test(config, every_default_parses)
{
    size_t n;
    const pdx_config_row_t *rows = pdx_config_table(&n);
    pdx_config_t cfg;
    char err[256];

    cr_assert_gt(n, 20);
    for (size_t i = 0; i < n; i++) {
        pdx_status_t st = rows[i].parse(&rows[i], rows[i].defval, (char *)&cfg + rows[i].offset,
                                        err, sizeof(err));
        cr_expect_eq(st, PDX_OK, "%s default \"%s\": %s", rows[i].name, rows[i].defval, err);
        cr_expect_neq(rows[i].bit, 0, "%s has no field bit", rows[i].name);
        for (size_t j = 0; j < i; j++)
            cr_expect_neq(rows[i].bit, rows[j].bit, "%s and %s share a bit", rows[i].name,
                          rows[j].name);
    }
}

Test(config, defaults_are_valid)
{
    pdx_config_t cfg;
    char err[256] = "";

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    cr_expect_eq(pdx_config_check(&cfg, err, sizeof(err)), PDX_OK, "%s", err);
    cr_expect_eq(cfg.shards, 4);
    cr_expect_eq(cfg.max_msg_size, 1u << 20);
    cr_expect_eq(cfg.ib_gid_index, -1);
    cr_expect_eq(cfg.ib_hop_limit, 64);
    cr_expect_eq(cfg.flush, PDX_MODE_AUTO);
    cr_expect_eq(cfg.log_level, PDX_LOG_WARN);
    cr_expect_str_eq(cfg.transport, "auto");
}

Test(config, environment_overrides_defaults)
{
    pdx_config_t cfg;

    setenv("PDX_SHARDS", "8", 1);
    setenv("PDX_MAX_MSG_SIZE", "256K", 1);
    setenv("PDX_FLUSH", "off", 1);
    setenv("PDX_LOG", "debug", 1);
    setenv("PDX_TRANSPORT", "tcp", 1);
    setenv("PDX_IB_GID_INDEX", "3", 1);
    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    cr_expect_eq(cfg.shards, 8);
    cr_expect_eq(cfg.max_msg_size, 256u << 10);
    cr_expect_eq(cfg.flush, PDX_MODE_OFF);
    cr_expect_eq(cfg.log_level, PDX_LOG_DEBUG);
    cr_expect_str_eq(cfg.transport, "tcp");
    cr_expect_eq(cfg.ib_gid_index, 3);
}

/* Parse one bad value through its row and check the message names the variable. */
static void expect_rejected(const char *name, const char *value)
{
    size_t n;
    const pdx_config_row_t *rows = pdx_config_table(&n);
    pdx_config_t cfg;
    char err[256] = "";

    for (size_t i = 0; i < n; i++) {
        if (strcmp(rows[i].name, name) != 0)
            continue;
        cr_expect_eq(rows[i].parse(&rows[i], value, (char *)&cfg + rows[i].offset, err,
                                   sizeof(err)), PDX_ERR_INVALID, "%s=%s accepted", name, value);
        cr_expect(strstr(err, name) != NULL, "message \"%s\" does not name %s", err, name);
        return;
    }
    cr_assert_fail("no row %s", name);
}

Test(config, bad_values_are_rejected_with_the_variable_named)
{
    expect_rejected("PDX_SHARDS", "abc");
    expect_rejected("PDX_SHARDS", "0");
    expect_rejected("PDX_SHARDS", "8x");
    expect_rejected("PDX_SHARDS", "");
    expect_rejected("PDX_SHARDS", "99999999999999999999999");
    expect_rejected("PDX_FLUSH", "maybe");
    expect_rejected("PDX_DMABUF", "on");
    expect_rejected("PDX_TRANSPORT", "ucx");
    expect_rejected("PDX_LOG", "loud");
    expect_rejected("PDX_MAX_MSG_SIZE", "1T");
    expect_rejected("PDX_MAX_MSG_SIZE", "-1");
    expect_rejected("PDX_IB_RNR_RETRY", "7");
    expect_rejected("PDX_IB_GID_INDEX", "-2");
}

Test(config, bad_environment_fails_init_but_keeps_the_rest)
{
    pdx_config_t cfg;

    setenv("PDX_SHARDS", "many", 1);
    setenv("PDX_SQ_DEPTH", "512", 1);
    cr_expect_eq(pdx_config_init(&cfg), PDX_ERR_INVALID);
    cr_expect_eq(cfg.shards, 4);
    cr_expect_eq(cfg.sq_depth, 512);
}

Test(config, set_by_name)
{
    pdx_config_t cfg;

    pdx_config_init(&cfg);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_ROOMS", "256"), PDX_OK);
    cr_expect_eq(cfg.rooms, 256);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_NOPE", "1"), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_ROOMS", "1"), PDX_ERR_INVALID);
    cr_expect_eq(cfg.rooms, 256);
    cr_expect_eq(pdx_config_set(NULL, "PDX_ROOMS", "1"), PDX_ERR_INVALID);
}

/* Numbers are decimal: leading zeros are not octal, no 0x, no plus sign. */
Test(config, numbers_are_decimal)
{
    pdx_config_t cfg;

    pdx_config_init(&cfg);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_SHARDS", "010"), PDX_OK);
    cr_expect_eq(cfg.shards, 10);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_TRANSFER_TIMEOUT_MS", "030000"), PDX_OK);
    cr_expect_eq(cfg.transfer_timeout_ms, 30000);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_MAX_MSG_SIZE", "0064K"), PDX_OK);
    cr_expect_eq(cfg.max_msg_size, 64 << 10);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_IB_GID_INDEX", "-01"), PDX_OK);
    cr_expect_eq(cfg.ib_gid_index, -1);
    expect_rejected("PDX_SHARDS", "0x3");
    expect_rejected("PDX_SHARDS", "+3");
    expect_rejected("PDX_SHARDS", " 3");
    expect_rejected("PDX_SHARDS", "3 ");
    expect_rejected("PDX_SHARDS", "-");
    expect_rejected("PDX_SHARDS", "");
    expect_rejected("PDX_MAX_MSG_SIZE", "0x10M");
}

static char warned[1024];

static void keep_warnings(void *arg, pdx_log_level_t level, const char *engine, const char *msg)
{
    (void)arg, (void)engine;
    if (level == PDX_LOG_WARN)
        snprintf(warned + strlen(warned), sizeof(warned) - strlen(warned), "%s\n", msg);
}

/* A misspelled variable is named with the one it likely meant, once. */
Test(config, misspelled_variables_are_warned_about)
{
    pdx_config_t cfg;
    const char *first;

    setenv("PDX_SHRADS", "3", 1);
    setenv("PDX_WHATEVER_THIS_IS", "1", 1);
    setenv("PDX_TEST_ANYTHING", "1", 1);
    setenv("PDX_LIBRARY", "/x/libpdx.so", 1);
    pdx_log_set_handler(keep_warnings, NULL);
    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    pdx_log_set_handler(NULL, NULL);
    cr_expect_eq(cfg.shards, 4, "a misspelled name sets nothing");
    cr_expect_not_null(strstr(warned, "PDX_SHRADS is not a pdx variable (did you mean "
                                      "PDX_SHARDS?)"), "%s", warned);
    cr_expect_not_null(strstr(warned, "PDX_WHATEVER_THIS_IS is not a pdx variable"));
    cr_expect_null(strstr(warned, "PDX_TEST_ANYTHING"));
    cr_expect_null(strstr(warned, "PDX_LIBRARY"));
    first = strstr(warned, "PDX_SHRADS");
    cr_expect(first && !strstr(first + 1, "PDX_SHRADS"), "warned once: %s", warned);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* Sizes that cannot be allocated (under an address-space limit) fail the
 * engine with a message that names the variable. Sanitizers reserve more
 * address space than such a limit allows: built without them only. */
static void keep_errors(void *arg, pdx_log_level_t level, const char *engine, const char *msg)
{
    (void)arg, (void)engine;
    if (level == PDX_LOG_ERROR)
        snprintf(warned + strlen(warned), sizeof(warned) - strlen(warned), "%s\n", msg);
}

static void expect_no_memory(const char *name, const char *value)
{
    struct rlimit lim = {.rlim_cur = 1ull << 30, .rlim_max = RLIM_INFINITY};
    pdx_engine_t *e = NULL;
    pdx_config_t cfg;

    warned[0] = '\0';
    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp");
    pdx_config_set(&cfg, "PDX_SHARDS", "1");
    cr_assert_eq(pdx_config_set(&cfg, name, value), PDX_OK);
    getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = 1ull << 30;
    cr_assert_eq(setrlimit(RLIMIT_AS, &lim), 0);
    pdx_log_set_handler(keep_errors, NULL);
    cr_expect_neq(pdx_engine_create(&cfg, &e), PDX_OK, "%s=%s", name, value);
    pdx_log_set_handler(NULL, NULL);
    cr_expect_null(e);
    cr_expect_not_null(strstr(warned, name), "%s=%s: %s", name, value, warned);
}

Test(config, sizes_that_cannot_be_allocated_name_their_variable)
{
    expect_no_memory("PDX_ROOMS", "16777216");
}

Test(config, rings_that_cannot_be_allocated_name_their_variable)
{
    expect_no_memory("PDX_RING_PAGES", "1073741824");
}
#endif

/* The key is taken but never shown. */
Test(config, auth_key_is_not_shown)
{
    pdx_config_t cfg;
    pdx_config_var_t v;
    bool seen = false;

    pdx_config_init(&cfg);
    cr_assert_eq(pdx_config_set(&cfg, "PDX_AUTH_KEY", "sixteen bytes ok"), PDX_OK);
    cr_expect_str_eq(cfg.auth_key, "sixteen bytes ok");
    for (uint32_t i = 0; pdx_config_describe(&cfg, i, &v) == PDX_OK; i++) {
        if (strcmp(v.name, "PDX_AUTH_KEY") == 0) {
            cr_expect_str_eq(v.value, "(set)");
            seen = true;
        }
        cr_expect_null(strstr(v.value, "sixteen"), "%s shows the key", v.name);
    }
    cr_expect(seen);
}

Test(config, program_overrides_environment_by_field_mask)
{
    pdx_config_t user, cfg;

    setenv("PDX_SHARDS", "9", 1);
    setenv("PDX_SQ_DEPTH", "1024", 1);
    memset(&user, 0, sizeof(user));
    user.field_mask = PDX_CONFIG_FIELD_SHARDS;
    user.shards = 3;
    user.sq_depth = 7; /* no bit: ignored */
    cr_assert_eq(pdx_config_resolve(&user, &cfg), PDX_OK);
    cr_expect_eq(cfg.shards, 3);
    cr_expect_eq(cfg.sq_depth, 1024);
}

Test(config, rules_between_fields)
{
    pdx_config_t cfg;
    char err[256] = "";

    pdx_config_init(&cfg);
    cfg.sq_depth = 16;
    cfg.signal_every = 9;
    cr_expect_eq(pdx_config_check(&cfg, err, sizeof(err)), PDX_ERR_INVALID);
    cr_expect(strstr(err, "PDX_SIGNAL_EVERY") != NULL, "%s", err);
    cfg.signal_every = 8;
    cr_expect_eq(pdx_config_check(&cfg, err, sizeof(err)), PDX_OK, "%s", err);
}

/* What pdx-info prints, run with extra environment `env` ("A=1 B=2 "). */
static char *pdx_info(const char *env, const char *args)
{
    char cmd[1024], *buf = calloc(1, 1 << 16);
    size_t n;
    FILE *p;

    snprintf(cmd, sizeof(cmd), "%s '%s' %s", env, PDX_INFO, args);
    p = popen(cmd, "r");
    cr_assert_not_null(p);
    cr_assert_not_null(buf);
    n = fread(buf, 1, (1 << 16) - 1, p);
    buf[n] = '\0';
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    return buf;
}

Test(config, describe_tells_every_variable_and_its_value)
{
    pdx_config_t cfg;
    pdx_config_var_t v;
    uint32_t n = 0;
    char *out;

    pdx_config_init(&cfg);
    cfg.shards = 12;
    for (; pdx_config_describe(&cfg, n, &v) == PDX_OK; n++) {
        cr_assert(v.name && strncmp(v.name, "PDX_", 4) == 0);
        cr_assert(v.default_value && v.help && v.help[0]);
        if (strcmp(v.name, "PDX_SHARDS") == 0)
            cr_expect_str_eq(v.value, "12");
        if (strcmp(v.name, "PDX_IB_GID_INDEX") == 0)
            cr_expect_str_eq(v.value, "-1");
        if (strcmp(v.name, "PDX_TRANSPORT") == 0)
            cr_expect_str_eq(v.choices, "auto|tcp|rdma|ipc");
    }
    cr_expect_geq(n, 30);
    /* Every field of a default configuration reads back as its default text
     * (a field shown through the wrong type would not). */
    pdx_config_defaults(&cfg);
    for (uint32_t i = 0; pdx_config_describe(&cfg, i, &v) == PDX_OK; i++) {
        size_t len = strlen(v.default_value);

        if (len && strchr("KMG", v.default_value[len - 1]))
            continue; /* a size: its value is shown in bytes */
        cr_expect_str_eq(v.value, v.default_value, "%s", v.name);
    }
    cr_assert_eq(pdx_config_set(&cfg, "PDX_CPU_AFFINITY", "0-3,8"), PDX_OK);
    for (uint32_t i = 0; pdx_config_describe(&cfg, i, &v) == PDX_OK; i++)
        if (strcmp(v.name, "PDX_CPU_AFFINITY") == 0)
            cr_expect_str_eq(v.value, "0-3,8");
    cr_expect_eq(pdx_config_describe(NULL, 0, &v), PDX_OK);
    cr_expect_str_eq(v.value, "", "no value without a configuration");
    cr_expect_eq(pdx_config_describe(&cfg, n, &v), PDX_ERR_NOT_FOUND);
    out = pdx_info("PDX_SHARDS=12", "--config");
    cr_expect(strstr(out, "PDX_SHARDS                 12") != NULL, "%s", out);
    cr_expect(strstr(out, "PDX_IB_GID_INDEX           -1") != NULL, "%s", out);
    free(out);
}

/* docs/configuration.md's table is generated from the table; they must not drift. */
Test(config, docs_table_matches)
{
    static const char begin[] = "<!-- config:begin -->\n", end[] = "<!-- config:end -->";
    char *want = pdx_info("", "--config --markdown"), *readme;
    FILE *in = fopen(PDX_SOURCE_DIR "/docs/configuration.md", "r");
    char *from, *to;
    size_t n;

    cr_assert_not_null(in, "docs/configuration.md not found");
    readme = calloc(1, 1 << 20);
    n = fread(readme, 1, (1 << 20) - 1, in);
    fclose(in);
    readme[n] = '\0';
    from = strstr(readme, begin);
    cr_assert_not_null(from, "docs/configuration.md lacks %s", begin);
    from += strlen(begin);
    to = strstr(from, end);
    cr_assert_not_null(to, "docs/configuration.md lacks %s", end);
    *to = '\0';
    cr_expect_str_eq(from, want, "docs/configuration.md's table differs: regenerate it with "
                     "`pdx-info --config --markdown`");
    free(readme);
    free(want);
}
