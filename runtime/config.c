/* The PDX_* configuration table and its parsers. */
#include "config.h"
#include "addr.h"
#include "bounds.h"

#include <ctype.h>
#include <stdatomic.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "topo.h"
#include "util.h"

static pdx_status_t parse_int(const pdx_config_row_t *row, const char *text, void *field,
                              char *err, size_t errlen);
static pdx_status_t parse_size(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen);
static pdx_status_t parse_word(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen);
static pdx_status_t parse_text(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen);
static pdx_status_t parse_mode(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen);
static pdx_status_t parse_secret(const pdx_config_row_t *row, const char *text, void *field,
                                 char *err, size_t errlen);
static pdx_status_t parse_verify(const pdx_config_row_t *row, const char *text, void *field,
                                 char *err, size_t errlen);
static pdx_status_t parse_log(const pdx_config_row_t *row, const char *text, void *field,
                              char *err, size_t errlen);
static pdx_status_t parse_affinity(const pdx_config_row_t *row, const char *text, void *field,
                                   char *err, size_t errlen);
static pdx_status_t parse_listen(const pdx_config_row_t *row, const char *text, void *field,
                                 char *err, size_t errlen);
static pdx_status_t parse_host(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen);

#define ROW_INT(name, def, help, bit, f, lo, hi) \
    {name, def, help, PDX_CONFIG_FIELD_##bit, offsetof(pdx_config_t, f), \
     sizeof(((pdx_config_t *)0)->f), parse_int, lo, hi, NULL}
#define ROW_SIZE(name, def, help, bit, f, lo, hi) \
    {name, def, help, PDX_CONFIG_FIELD_##bit, offsetof(pdx_config_t, f), \
     sizeof(((pdx_config_t *)0)->f), parse_size, lo, hi, NULL}
#define ROW_WORD(name, def, help, bit, f, parser, words) \
    {name, def, help, PDX_CONFIG_FIELD_##bit, offsetof(pdx_config_t, f), \
     sizeof(((pdx_config_t *)0)->f), parser, 0, 0, words}

static const pdx_config_row_t config_table[] = {
    ROW_WORD("PDX_LOG", "warn", "Log level", LOG_LEVEL, log_level, parse_log,
             "error|warn|info|debug|trace"),
    ROW_WORD("PDX_TRANSPORT", "auto", "Data transport; auto picks rdma when a device is up, else "
             "tcp, and GPU copies (ipc) to engines of this host whose GPU this one reaches; ipc: "
             "only those peers, over tcp", TRANSPORT, transport, parse_word, "auto|tcp|rdma|ipc"),
    ROW_WORD("PDX_LISTEN", "0.0.0.0:0", "Control listener host:port ([ipv6]:port); port 0 "
             "picks a free one; the tcp data listener binds the same host", LISTEN, listen,
             parse_listen, NULL),
    ROW_INT("PDX_SHARDS", "4", "Worker threads (shards) per engine", SHARDS, shards, 1, 64),
    ROW_INT("PDX_RING_CHUNKS", "1024", "Chunks queued per shard before pdx_send says AGAIN",
            RING_CHUNKS, ring_chunks, 2, 1 << 20),
    ROW_INT("PDX_RING_PAGES", "262144", "Page indices queued per shard before pdx_send says AGAIN",
            RING_PAGES, ring_pages, 256, 1 << 30),
    ROW_INT("PDX_ROOMS", "16384", "Room table capacity", ROOMS, rooms, 16, PDX_ROOMS_MAX),
    ROW_INT("PDX_HELD_NOTIFIES", "1024", "Notifies held for rooms not yet expected",
            HELD_NOTIFIES, held_notifies, 0, 1 << 20),
    ROW_SIZE("PDX_MAX_MSG_SIZE", "1M", "Largest single write (bytes, K/M/G suffixes)",
             MAX_MSG_SIZE, max_msg_size, 4096, 1ll << 30),
    ROW_INT("PDX_BOOTSTRAP_TIMEOUT_MS", "30000", "A room waiting for its peer's metadata fails after this",
            BOOTSTRAP_TIMEOUT, bootstrap_timeout_ms, 1, 86400000),
    ROW_INT("PDX_TRANSFER_TIMEOUT_MS", "60000", "First chunk submitted to SUCCESS, at most",
            TRANSFER_TIMEOUT, transfer_timeout_ms, 1, 86400000),
    ROW_INT("PDX_HEARTBEAT_MS", "1000", "Control-channel heartbeat period; a peer silent for 5 periods is gone",
            HEARTBEAT, heartbeat_ms, 10, 600000),
    ROW_INT("PDX_HANDSHAKE_TIMEOUT_MS", "10000", "A connection in that has not finished its handshake this long after its accept is closed",
            HANDSHAKE_TIMEOUT, handshake_timeout_ms, 10, 600000),
    ROW_INT("PDX_GATE_BACKOFF_US", "20", "A shard with gates pending polls them this often; a gate "
            "closed for longer than 32 backoffs every 32nd of the time it was closed (at most "
            "every 1 ms)",
            GATE_BACKOFF, gate_backoff_us, 0, 100000),
    ROW_INT("PDX_GATE_SPIN_US", "20", "A closed gate is polled without sleeping this close to the "
            "times the shard's last gates took to open; 0: every poll after a sleep",
            GATE_SPIN, gate_spin_us, 0, 100000),
    ROW_INT("PDX_SHARD_SPIN_US", "100", "A shard polls its queue and completions this long after its "
            "last work before it sleeps; a pdx_send that finds it awake makes no system call",
            SHARD_SPIN, shard_spin_us, 0, 100000),
    ROW_INT("PDX_QPS_PER_PEER", "2", "Endpoints (QPs) per shard, peer and NIC lane; a room's runs "
            "are striped over them", QPS_PER_PEER, qps_per_peer, 1, 64),
    ROW_INT("PDX_NICS", "1", "NICs the engine uses: the first usable ones of PDX_IB_DEVICES, else "
            "those nearest its GPU", NICS, nics, 1, 4),
    ROW_INT("PDX_SQ_DEPTH", "256", "Send-queue depth per endpoint", SQ_DEPTH, sq_depth, 4, PDX_SQ_DEPTH_MAX),
    ROW_INT("PDX_SIGNAL_EVERY", "16", "Signal every K-th write (K <= PDX_SQ_DEPTH / 2)",
            SIGNAL_EVERY, signal_every, 1, 16384),
    ROW_INT("PDX_GPU", "-1", "GPU the engine serves; -1: the creating thread's current device",
            GPU, gpu, -1, 1023),
    ROW_WORD("PDX_FLUSH", "auto",
             "Loopback RDMA read before decode SUCCESS: auto for GPU destinations, on for all",
             FLUSH, flush, parse_mode, "auto|on|off"),
    ROW_WORD("PDX_DMABUF", "auto", "Register GPU memory through dmabuf when available",
             DMABUF, dmabuf, parse_mode, "auto|off"),
    ROW_WORD("PDX_MARKERS", "off", "roctx / NVTX ranges around gates, posts and notifies",
             MARKERS, markers, parse_mode, "on|off"),
    ROW_WORD("PDX_IB_DEVICES", "",
             "RDMA devices to try in order, comma-separated; the first PDX_NICS usable ones "
             "serve (empty: all)", IB_DEVICES, ib_devices, parse_text, NULL),
    ROW_INT("PDX_IB_GID_INDEX", "-1", "GID index; -1 picks a RoCEv2 GID", IB_GID_INDEX,
            ib_gid_index, -1, 255),
    ROW_INT("PDX_IB_TRAFFIC_CLASS", "0", "Traffic class (DSCP << 2) of RoCE packets",
            IB_TRAFFIC_CLASS, ib_traffic_class, 0, 255),
    ROW_INT("PDX_IB_HOP_LIMIT", "64", "Hop limit of RoCE packets (1 breaks routed fabrics)",
            IB_HOP_LIMIT, ib_hop_limit, 1, 255),
    ROW_INT("PDX_IB_TIMEOUT", "18", "QP local ACK timeout, 4.096 us * 2^n", IB_TIMEOUT, ib_timeout, 1, 31),
    ROW_INT("PDX_IB_RETRY_COUNT", "7", "QP transport retries", IB_RETRY_COUNT, ib_retry_count, 0, 7),
    ROW_INT("PDX_IB_RNR_RETRY", "6", "QP RNR retries (7, retry forever, is refused)",
            IB_RNR_RETRY, ib_rnr_retry, 0, 6),
    ROW_SIZE("PDX_TCP_STAGING_BYTES", "16M", "Pinned staging per tcp endpoint for GPU memory",
             TCP_STAGING, tcp_staging_bytes, 1 << 16, 1ll << 34),
    ROW_WORD("PDX_AUTH_KEY", "", "Shared key (16 bytes or more) peers must prove they hold; "
             "empty: no authentication", AUTH_KEY, auth_key, parse_secret, NULL),
    ROW_WORD("PDX_AUTH_KEY_FILE", "", "A file (readable by its owner only) holding the shared "
             "key, instead of PDX_AUTH_KEY", AUTH_KEY_FILE, auth_key_file, parse_text, NULL),
    ROW_WORD("PDX_VERIFY", "off", "Decode checks every room's bytes against a CRC-32C its "
             "senders computed (costs CPU on both sides)", VERIFY, verify, parse_verify,
             "off|crc32c"),
    ROW_WORD("PDX_ADVERTISE_ADDR", "", "Host peers dial to reach this engine (an IP address or "
             "a name); empty: the host of PDX_LISTEN, or for a wildcard the address of the "
             "default route's interface, else loopback", ADVERTISE_ADDR, advertise_addr,
             parse_host, NULL),
    ROW_WORD("PDX_CPU_AFFINITY", "auto", "CPUs of the shard workers and tcp's progress threads: "
             "auto (the GPU's local cores), off, or a CPU list such as 0-15,32-47",
             CPU_AFFINITY, cpu_affinity, parse_affinity, NULL),
    ROW_WORD("PDX_GPU_GATES", "auto", "Page copies to engines of this host (ipc) wait for "
             "their chunk's gate on the GPU (auto), or the shard waits for every gate (off)",
             GPU_GATES, gpu_gates, parse_mode, "auto|off"),
};

const pdx_config_row_t *pdx_config_table(size_t *nrows_p)
{
    *nrows_p = PDX_ARRAY_SIZE(config_table);
    return config_table;
}

static void store_uint(void *field, size_t size, int64_t v)
{
    if (size == sizeof(uint64_t))
        *(uint64_t *)field = (uint64_t)v;
    else
        *(uint32_t *)field = (uint32_t)v; /* int32_t fields share the representation */
}

static pdx_status_t parse_number(const pdx_config_row_t *row, const char *text, int64_t *v_p,
                                 int suffixes, char *err, size_t errlen)
{
    char *end;
    long long v;

    /* Decimal only: no sign but a minus, no 0x, and leading zeros are not octal. */
    if (!isdigit((unsigned char)text[text[0] == '-'])) {
        snprintf(err, errlen, "%s=\"%s\": not a decimal number", row->name, text);
        return PDX_ERR_INVALID;
    }
    errno = 0;
    v = strtoll(text, &end, 10);
    if (end == text || errno == ERANGE) {
        snprintf(err, errlen, "%s=\"%s\": not a number", row->name, text);
        return PDX_ERR_INVALID;
    }
    if (suffixes && *end) {
        int shift = 0;

        switch (toupper((unsigned char)*end)) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        default: break;
        }
        if (shift) {
            end++;
            if (v > (INT64_MAX >> shift) || v < 0) {
                snprintf(err, errlen, "%s=\"%s\": too large", row->name, text);
                return PDX_ERR_INVALID;
            }
            v <<= shift;
        }
    }
    if (*end) {
        snprintf(err, errlen, "%s=\"%s\": trailing \"%s\"", row->name, text, end);
        return PDX_ERR_INVALID;
    }
    if (v < row->min || v > row->max) {
        snprintf(err, errlen, "%s=\"%s\": must be in [%" PRId64 ", %" PRId64 "]", row->name, text,
                 row->min, row->max);
        return PDX_ERR_INVALID;
    }
    *v_p = v;
    return PDX_OK;
}

static pdx_status_t parse_store(const pdx_config_row_t *row, const char *text, void *field,
                                int suffixes, char *err, size_t errlen)
{
    int64_t v;
    pdx_status_t st = parse_number(row, text, &v, suffixes, err, errlen);

    if (st == PDX_OK)
        store_uint(field, row->size, v);
    return st;
}

static pdx_status_t parse_int(const pdx_config_row_t *row, const char *text, void *field,
                              char *err, size_t errlen)
{
    return parse_store(row, text, field, 0, err, errlen);
}

static pdx_status_t parse_size(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen)
{
    return parse_store(row, text, field, 1, err, errlen);
}

/* Index of text among row->choices, or -1. */
static int choice_index(const pdx_config_row_t *row, const char *text)
{
    const char *p = row->choices;
    size_t len = strlen(text);

    for (int i = 0; p && *p; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);

        if (n == len && strncmp(p, text, n) == 0)
            return i;
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}

static pdx_status_t bad_choice(const pdx_config_row_t *row, const char *text, char *err,
                               size_t errlen)
{
    snprintf(err, errlen, "%s=\"%s\": must be one of %s", row->name, text, row->choices);
    return PDX_ERR_INVALID;
}

static pdx_status_t parse_text(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen)
{
    size_t len = strlen(text);

    if (len >= row->size) {
        snprintf(err, errlen, "%s: value longer than %zu bytes", row->name, row->size - 1);
        return PDX_ERR_INVALID;
    }
    memcpy(field, text, len + 1);
    return PDX_OK;
}

/* Text that is never shown (pdx_config_describe says "(set)"). */
static pdx_status_t parse_secret(const pdx_config_row_t *row, const char *text, void *field,
                                 char *err, size_t errlen)
{
    return parse_text(row, text, field, err, errlen);
}

static pdx_status_t parse_word(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen)
{
    if (choice_index(row, text) < 0)
        return bad_choice(row, text, err, errlen);
    return parse_text(row, text, field, err, errlen);
}

static pdx_status_t parse_mode(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen)
{
    static const struct { const char *word; pdx_mode_t mode; } modes[] = {
        {"auto", PDX_MODE_AUTO}, {"on", PDX_MODE_ON}, {"off", PDX_MODE_OFF},
    };

    if (choice_index(row, text) < 0)
        return bad_choice(row, text, err, errlen);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(modes); i++) {
        if (strcmp(text, modes[i].word) == 0)
            *(pdx_mode_t *)field = modes[i].mode;
    }
    return PDX_OK;
}

static pdx_status_t parse_verify(const pdx_config_row_t *row, const char *text, void *field,
                                 char *err, size_t errlen)
{
    int i = choice_index(row, text); /* the words in pdx_verify_mode_t order */

    if (i < 0)
        return bad_choice(row, text, err, errlen);
    *(pdx_verify_mode_t *)field = (pdx_verify_mode_t)i;
    return PDX_OK;
}

static pdx_status_t parse_log(const pdx_config_row_t *row, const char *text, void *field,
                              char *err, size_t errlen)
{
    int i = choice_index(row, text);

    if (i < 0 && text[0] >= '0' && text[0] <= '4' && text[1] == '\0')
        i = text[0] - '0';
    if (i < 0)
        return bad_choice(row, text, err, errlen);
    *(pdx_log_level_t *)field = (pdx_log_level_t)i;
    return PDX_OK;
}

/* PDX_LISTEN: host:port, [ipv6]:port or :port; port 0 (any free one) to 65535. */
static pdx_status_t parse_listen(const pdx_config_row_t *row, const char *text, void *field,
                                 char *err, size_t errlen)
{
    char host[PDX_NAME_MAX], why[160];
    uint32_t port;

    if (pdx_addr_split(text, 0, host, sizeof(host), &port, why, sizeof(why)) != PDX_OK) {
        snprintf(err, errlen, "%s=\"%s\": %s", row->name, text, why);
        return PDX_ERR_INVALID;
    }
    return parse_text(row, text, field, err, errlen);
}

/* PDX_ADVERTISE_ADDR: empty, an IP literal or a host name. */
static pdx_status_t parse_host(const pdx_config_row_t *row, const char *text, void *field,
                               char *err, size_t errlen)
{
    char why[160];

    if (pdx_addr_check_host(text, why, sizeof(why)) != PDX_OK) {
        snprintf(err, errlen, "%s=\"%s\": %s", row->name, text, why);
        return PDX_ERR_INVALID;
    }
    return parse_text(row, text, field, err, errlen);
}

/* PDX_CPU_AFFINITY's text: auto, off, or a CPU list (topo.h). */
static bool affinity_valid(const char *text, char *why, size_t whylen)
{
    cpu_set_t cpus;

    return strcmp(text, "auto") == 0 || strcmp(text, "off") == 0 ||
           pdx_cpulist_parse(text, &cpus, why, whylen) == PDX_OK;
}

static pdx_status_t parse_affinity(const pdx_config_row_t *row, const char *text, void *field,
                                   char *err, size_t errlen)
{
    char why[160];

    if (!affinity_valid(text, why, sizeof(why))) {
        snprintf(err, errlen, "%s=\"%s\": auto, off or a CPU list: %s", row->name, text, why);
        return PDX_ERR_INVALID;
    }
    return parse_text(row, text, field, err, errlen);
}

void pdx_config_defaults(pdx_config_t *cfg)
{
    char err[256];

    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < PDX_ARRAY_SIZE(config_table); i++) {
        const pdx_config_row_t *row = &config_table[i];
        pdx_status_t st = row->parse(row, row->defval, (char *)cfg + row->offset, err, sizeof(err));

        (void)st; /* defaults are checked by test_config */
        cfg->field_mask |= row->bit;
    }
}

static const pdx_config_row_t *find_row(const char *name)
{
    for (size_t i = 0; i < PDX_ARRAY_SIZE(config_table); i++) {
        if (strcmp(config_table[i].name, name) == 0)
            return &config_table[i];
    }
    return NULL;
}

pdx_status_t pdx_config_set(pdx_config_t *cfg, const char *name, const char *value)
{
    const pdx_config_row_t *row;
    char err[256];
    pdx_status_t st;

    if (!cfg || !name || !value)
        return PDX_ERR_INVALID;
    row = find_row(name);
    if (!row) {
        pdx_error("unknown configuration variable %s", name);
        return PDX_ERR_NOT_FOUND;
    }
    st = row->parse(row, value, (char *)cfg + row->offset, err, sizeof(err));
    if (st != PDX_OK) {
        pdx_error("%s", err);
        return st;
    }
    cfg->field_mask |= row->bit;
    return PDX_OK;
}

/* Edit distance of two short names, at most 3 (cut off). */
static unsigned name_distance(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    unsigned row[64], prev;

    if (na >= PDX_ARRAY_SIZE(row) || nb >= PDX_ARRAY_SIZE(row))
        return 3;
    for (size_t j = 0; j <= nb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= na; i++) {
        prev = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= nb; j++) {
            unsigned cur = row[j];
            unsigned sub = prev + (a[i - 1] != b[j - 1]);

            row[j] = PDX_MIN(PDX_MIN(row[j] + 1, row[j - 1] + 1), sub);
            prev = cur;
        }
    }
    return PDX_MIN(row[nb], 3u);
}

/*
 * A PDX_* variable of the environment that is none of pdx's is most likely
 * misspelled: warn once per process, naming the nearest one. PDX_LIBRARY
 * (the Python binding) and PDX_TEST_* (the tests) are not configuration.
 */
static void warn_unknown_names(void)
{
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    extern char **environ;

    if (atomic_flag_test_and_set(&warned))
        return;
    for (char **v = environ; v && *v; v++) {
        const char *eq = strchr(*v, '=');
        size_t n = eq ? (size_t)(eq - *v) : strlen(*v);
        const char *best = NULL;
        unsigned dist = 3;

        if (strncmp(*v, "PDX_", 4) != 0 || strncmp(*v, "PDX_TEST_", 9) == 0 ||
            (n == 11 && strncmp(*v, "PDX_LIBRARY", n) == 0))
            continue;
        for (size_t i = 0; i < PDX_ARRAY_SIZE(config_table); i++) {
            unsigned d = name_distance(*v, n, config_table[i].name);

            if (d < dist) {
                dist = d;
                best = config_table[i].name;
            }
        }
        if (dist == 0)
            continue;
        if (best)
            pdx_warn("%.*s is not a pdx variable (did you mean %s?); it is ignored", (int)n, *v,
                     best);
        else
            pdx_warn("%.*s is not a pdx variable (pdx-info --config lists them); it is ignored",
                     (int)n, *v);
    }
}

pdx_status_t pdx_config_init(pdx_config_t *cfg)
{
    pdx_status_t result = PDX_OK;

    if (!cfg)
        return PDX_ERR_INVALID;
    warn_unknown_names();
    pdx_config_defaults(cfg);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(config_table); i++) {
        const char *value = getenv(config_table[i].name);

        if (value && pdx_config_set(cfg, config_table[i].name, value) != PDX_OK)
            result = PDX_ERR_INVALID;
    }
    return result;
}

pdx_status_t pdx_config_resolve(const pdx_config_t *user, pdx_config_t *cfg)
{
    pdx_status_t st = pdx_config_init(cfg);

    if (!user)
        return st;
    for (size_t i = 0; i < PDX_ARRAY_SIZE(config_table); i++) {
        const pdx_config_row_t *row = &config_table[i];

        if (user->field_mask & row->bit)
            memcpy((char *)cfg + row->offset, (const char *)user + row->offset, row->size);
    }
    return st;
}

pdx_status_t pdx_config_check(const pdx_config_t *cfg, char *err, size_t errlen)
{
    char host[PDX_NAME_MAX], why[160];
    uint32_t port;

    /* A program's own struct skipped the parsers: its texts are checked here. */
    if (!memchr(cfg->listen, '\0', sizeof(cfg->listen)) ||
        !memchr(cfg->advertise_addr, '\0', sizeof(cfg->advertise_addr)) ||
        !memchr(cfg->cpu_affinity, '\0', sizeof(cfg->cpu_affinity))) {
        snprintf(err, errlen, "PDX_LISTEN, PDX_ADVERTISE_ADDR or PDX_CPU_AFFINITY is not "
                 "terminated");
        return PDX_ERR_INVALID;
    }
    if (!affinity_valid(cfg->cpu_affinity, why, sizeof(why))) {
        snprintf(err, errlen, "PDX_CPU_AFFINITY=\"%s\": auto, off or a CPU list: %s",
                 cfg->cpu_affinity, why);
        return PDX_ERR_INVALID;
    }
    if (pdx_addr_split(cfg->listen, 0, host, sizeof(host), &port, why, sizeof(why)) != PDX_OK) {
        snprintf(err, errlen, "PDX_LISTEN=\"%s\": %s", cfg->listen, why);
        return PDX_ERR_INVALID;
    }
    if (pdx_addr_check_host(cfg->advertise_addr, why, sizeof(why)) != PDX_OK) {
        snprintf(err, errlen, "PDX_ADVERTISE_ADDR=\"%s\": %s", cfg->advertise_addr, why);
        return PDX_ERR_INVALID;
    }
    if (cfg->signal_every > cfg->sq_depth / 2) {
        snprintf(err, errlen, "PDX_SIGNAL_EVERY=%u must be at most PDX_SQ_DEPTH / 2 = %u",
                 cfg->signal_every, cfg->sq_depth / 2);
        return PDX_ERR_INVALID;
    }
    if (cfg->ib_rnr_retry > 6) {
        snprintf(err, errlen, "PDX_IB_RNR_RETRY=%u: 7 retries forever and is refused",
                 cfg->ib_rnr_retry);
        return PDX_ERR_INVALID;
    }
    if (cfg->log_level > PDX_LOG_TRACE || cfg->verify > PDX_VERIFY_CRC32C || cfg->shards == 0 ||
        cfg->rooms == 0 || cfg->ring_chunks < 2 || cfg->max_msg_size == 0) {
        snprintf(err, errlen, "configuration has a zero or out-of-range field");
        return PDX_ERR_INVALID;
    }
    return PDX_OK;
}

/* The current value of a row's field, as text. */
static void field_text(const pdx_config_row_t *row, const pdx_config_t *cfg, char *buf,
                       size_t len)
{
    const void *field = (const char *)cfg + row->offset;

    if (row->parse == parse_secret) {
        snprintf(buf, len, "%s", *(const char *)field ? "(set)" : "");
    } else if (row->parse == parse_text || row->parse == parse_word ||
               row->parse == parse_listen || row->parse == parse_host ||
               row->parse == parse_affinity) {
        snprintf(buf, len, "%s", (const char *)field);
    } else if (row->parse == parse_mode) {
        static const char *const words[] = {"auto", "on", "off"};
        snprintf(buf, len, "%s", words[*(const pdx_mode_t *)field % 3]);
    } else if (row->parse == parse_verify) {
        snprintf(buf, len, "%s", *(const pdx_verify_mode_t *)field == PDX_VERIFY_CRC32C ? "crc32c"
                                                                                       : "off");
    } else if (row->parse == parse_log) {
        static const char *const levels[] = {"error", "warn", "info", "debug", "trace"};
        snprintf(buf, len, "%s", levels[*(const pdx_log_level_t *)field % 5]);
    } else if (row->size == sizeof(uint64_t)) {
        snprintf(buf, len, "%" PRIu64, *(const uint64_t *)field);
    } else if (row->min < 0) {
        snprintf(buf, len, "%" PRId32, *(const int32_t *)field);
    } else {
        snprintf(buf, len, "%" PRIu32, *(const uint32_t *)field);
    }
}

pdx_status_t pdx_config_describe(const pdx_config_t *cfg, uint32_t index, pdx_config_var_t *var_p)
{
    const pdx_config_row_t *row;

    if (!var_p)
        return PDX_ERR_INVALID;
    if (index >= PDX_ARRAY_SIZE(config_table))
        return PDX_ERR_NOT_FOUND;
    row = &config_table[index];
    var_p->name = row->name;
    var_p->default_value = row->defval;
    var_p->help = row->help;
    var_p->choices = row->choices;
    var_p->value[0] = '\0';
    if (cfg)
        field_text(row, cfg, var_p->value, sizeof(var_p->value));
    return PDX_OK;
}
