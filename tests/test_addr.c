/*
 * Addresses (runtime/addr.c): PDX_LISTEN's ports and brackets,
 * PDX_ADVERTISE_ADDR, the advertised host chosen from route tables and
 * interfaces the tests make up, pdx_peer_connect's address, and engines
 * over tcp on IPv6 loopback and on wildcard listeners, with every byte of
 * their rooms checked. Between two hosts: tests/two_hosts.sh.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "config.h"
#include "engine_fixture.h"
#include "log.h"
#include "engine.h"
#include "peer.h"

static const geom_t g = {.layers = 2, .bytes_per_page = 1024, .npages = 16};
static side_t pf, dc;

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
}

/* ------------------------------------------------------------ log lines */

static pthread_mutex_t logged_lock = PTHREAD_MUTEX_INITIALIZER;
static char logged[8192];

static void keep_lines(void *arg, pdx_log_level_t level, const char *engine, const char *msg)
{
    (void)engine;
    if (level > *(const pdx_log_level_t *)arg)
        return;
    pthread_mutex_lock(&logged_lock);
    snprintf(logged + strlen(logged), sizeof(logged) - strlen(logged), "%s\n", msg);
    pthread_mutex_unlock(&logged_lock);
}

/* Keep the lines at level and above from now on, and none kept before. */
static void keep_from(pdx_log_level_t level)
{
    static pdx_log_level_t at;

    at = level;
    logged[0] = '\0';
    pdx_log_set_handler(keep_lines, &at);
}

static bool was_logged(const char *text)
{
    bool found;

    pthread_mutex_lock(&logged_lock);
    found = strstr(logged, text) != NULL;
    pthread_mutex_unlock(&logged_lock);
    return found;
}

/* ------------------------------------------------------------ PDX_LISTEN */

/* A bad PDX_LISTEN is refused, the field kept, and the message names the
 * variable and the value. */
static void expect_listen_refused(const char *value, const char *why)
{
    pdx_config_t cfg;
    char want[256];

    pdx_config_defaults(&cfg);
    keep_from(PDX_LOG_ERROR);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_LISTEN", value), PDX_ERR_INVALID, "%s accepted",
                 value);
    pdx_log_set_handler(NULL, NULL);
    cr_expect_str_eq(cfg.listen, "0.0.0.0:0", "%s changed the field", value);
    snprintf(want, sizeof(want), "PDX_LISTEN=\"%s\": %s", value, why);
    cr_expect(was_logged(want), "want \"%s\", logged: %s", want, logged);
}

static void expect_listen_taken(const char *value)
{
    pdx_config_t cfg;

    pdx_config_defaults(&cfg);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_LISTEN", value), PDX_OK, "%s refused", value);
    cr_expect_str_eq(cfg.listen, value);
}

Test(addr, listen_ports_outside_0_to_65535_name_pdx_listen)
{
    expect_listen_refused("127.0.0.1:70000", "port 70000 is outside 0-65535");
    expect_listen_refused("0.0.0.0:99999", "port 99999 is outside 0-65535");
    expect_listen_refused("127.0.0.1:65536", "port 65536 is outside 0-65535");
    expect_listen_refused(":4294967297", "port 4294967297 is outside 0-65535");
    expect_listen_refused("127.0.0.1:123456789012345678901234567890",
                          "port 123456789012345678901234567890 is outside 0-65535");
    expect_listen_refused("127.0.0.1:-1", "port \"-1\" is not a decimal number");
    expect_listen_refused("127.0.0.1:5x", "port \"5x\" is not a decimal number");
    expect_listen_refused("127.0.0.1:+80", "port \"+80\" is not a decimal number");
    expect_listen_refused("127.0.0.1:0x50", "port \"0x50\" is not a decimal number");
    expect_listen_refused("127.0.0.1: 80", "port \" 80\" is not a decimal number");
    expect_listen_refused("127.0.0.1:", "no port after the colon");
    expect_listen_refused("127.0.0.1", "not host:port (no port)");
    expect_listen_refused("", "not host:port (no port)");
    expect_listen_refused("bad host:80", "\"bad host\" is not a host name or IP address");
    expect_listen_taken("127.0.0.1:0");
    expect_listen_taken("127.0.0.1:1");
    expect_listen_taken("127.0.0.1:65535");
    expect_listen_taken(":0");
    expect_listen_taken("0.0.0.0:00080");
    expect_listen_taken("decode-7.example.com:5555");
}

Test(addr, listen_from_the_environment_is_checked_at_init)
{
    pdx_config_t cfg;

    setenv("PDX_LISTEN", "0.0.0.0:99999", 1);
    keep_from(PDX_LOG_ERROR);
    cr_expect_eq(pdx_config_init(&cfg), PDX_ERR_INVALID);
    pdx_log_set_handler(NULL, NULL);
    cr_expect_str_eq(cfg.listen, "0.0.0.0:0", "the default is kept");
    cr_expect(was_logged("PDX_LISTEN=\"0.0.0.0:99999\": port 99999 is outside 0-65535"), "%s",
              logged);
}

/* A program's own struct skips the parsers: pdx_engine_create checks it. */
Test(addr, engine_create_checks_a_programs_own_addresses)
{
    pdx_engine_t *e = NULL;
    pdx_config_t cfg = {.field_mask = PDX_CONFIG_FIELD_LISTEN};

    strcpy(cfg.listen, "127.0.0.1:99999");
    keep_from(PDX_LOG_ERROR);
    cr_expect_eq(pdx_engine_create(&cfg, &e), PDX_ERR_INVALID);
    cr_expect_null(e);
    cr_expect(was_logged("PDX_LISTEN=\"127.0.0.1:99999\": port 99999 is outside 0-65535"), "%s",
              logged);
    cfg = (pdx_config_t){.field_mask = PDX_CONFIG_FIELD_ADVERTISE_ADDR};
    strcpy(cfg.advertise_addr, "0.0.0.0");
    keep_from(PDX_LOG_ERROR);
    cr_expect_eq(pdx_engine_create(&cfg, &e), PDX_ERR_INVALID);
    pdx_log_set_handler(NULL, NULL);
    cr_expect(was_logged("PDX_ADVERTISE_ADDR=\"0.0.0.0\": a wildcard"), "%s", logged);
}

Test(addr, ipv6_in_brackets_and_only_there)
{
    char host[128], why[160];
    uint32_t port = 1;

    expect_listen_taken("[::1]:0");
    expect_listen_taken("[::]:5555");
    expect_listen_taken("[2001:2::1]:65535");
    expect_listen_taken("[fe80::1%lo]:0");
    expect_listen_refused("::1:0", "an IPv6 address must be in brackets, as [::1]:0");
    expect_listen_refused("2001:2::1:5555",
                          "an IPv6 address must be in brackets, as [2001:2::1]:5555");
    expect_listen_refused("::", "an IPv6 address must be in brackets, as [ADDRESS]:PORT");
    expect_listen_refused("[::1]:99999", "port 99999 is outside 0-65535");
    expect_listen_refused("[::1:0", "a \"[\" without its \"]\"");
    expect_listen_refused("[::1]0", "no \":port\" after \"]\"");
    expect_listen_refused("[::1]", "no \":port\" after \"]\"");
    expect_listen_refused("[198.18.0.1]:0", "brackets hold an IPv6 address, not \"198.18.0.1\"");
    expect_listen_refused("[]:0", "brackets hold an IPv6 address, not \"\"");
    cr_assert_eq(pdx_addr_split("[::1]:8080", 1, host, sizeof(host), &port, why, sizeof(why)),
                 PDX_OK, "%s", why);
    cr_expect_str_eq(host, "::1", "brackets removed");
    cr_expect_eq(port, 8080);
    cr_assert_eq(pdx_addr_split(":0", 0, host, sizeof(host), &port, why, sizeof(why)), PDX_OK);
    cr_expect_str_eq(host, "");
    cr_expect_eq(port, 0);
}

/* A peer's address needs a port of 1-65535; a host too long for HELLO is refused. */
Test(addr, split_bounds)
{
    char host[128], why[160], longname[80];
    uint32_t port;

    cr_expect_eq(pdx_addr_split("h:0", 1, host, sizeof(host), &port, why, sizeof(why)),
                 PDX_ERR_INVALID);
    cr_expect_str_eq(why, "port 0 is outside 1-65535");
    memset(longname, 'a', 65);
    strcpy(longname + 65, ":80");
    cr_expect_eq(pdx_addr_split(longname, 0, host, sizeof(host), &port, why, sizeof(why)),
                 PDX_ERR_INVALID);
    cr_expect_str_eq(why, "a host of 65 bytes (at most 64)");
    strcpy(longname + 64, ":80");
    cr_expect_eq(pdx_addr_split(longname, 0, host, sizeof(host), &port, why, sizeof(why)),
                 PDX_OK, "64 bytes fit: %s", why);
    cr_expect_eq(pdx_addr_split("h:80", 0, host, 1, &port, why, sizeof(why)), PDX_ERR_INVALID,
                 "the caller's buffer bounds it too");
}

/* ---------------------------------------------------- PDX_ADVERTISE_ADDR */

static void expect_advertise(const char *value, pdx_status_t want, const char *why)
{
    pdx_config_t cfg;
    char line[256];

    pdx_config_defaults(&cfg);
    keep_from(PDX_LOG_ERROR);
    cr_expect_eq(pdx_config_set(&cfg, "PDX_ADVERTISE_ADDR", value), want, "%s", value);
    pdx_log_set_handler(NULL, NULL);
    if (want == PDX_OK) {
        cr_expect_str_eq(cfg.advertise_addr, value);
        return;
    }
    snprintf(line, sizeof(line), "PDX_ADVERTISE_ADDR=\"%s\": %s", value, why);
    cr_expect(was_logged(line), "want \"%s\", logged: %s", line, logged);
}

Test(addr, advertise_addr_is_an_address_or_a_name)
{
    char longname[80];

    expect_advertise("", PDX_OK, NULL);
    expect_advertise("198.18.0.1", PDX_OK, NULL);
    expect_advertise("127.0.0.1", PDX_OK, NULL);
    expect_advertise("2001:2::1", PDX_OK, NULL);
    expect_advertise("[2001:2::1]", PDX_OK, NULL);
    expect_advertise("decode-7.example.com", PDX_OK, NULL);
    expect_advertise("0.0.0.0", PDX_ERR_INVALID, "a wildcard is no address peers can dial");
    expect_advertise("::", PDX_ERR_INVALID, "a wildcard is no address peers can dial");
    expect_advertise("[::]", PDX_ERR_INVALID, "a wildcard is no address peers can dial");
    expect_advertise("198.18.0.1:5555", PDX_ERR_INVALID,
                     "a host without a port (PDX_LISTEN's port is advertised)");
    expect_advertise("[2001:2::1]:80", PDX_ERR_INVALID,
                     "brackets hold an IPv6 address and nothing after them");
    expect_advertise("[198.18.0.1]", PDX_ERR_INVALID,
                     "brackets hold an IPv6 address and nothing after them");
    expect_advertise("bad host", PDX_ERR_INVALID, "not a host name or IP address");
    memset(longname, 'a', 65);
    longname[65] = '\0';
    expect_advertise(longname, PDX_ERR_INVALID, "a host of 65 bytes (at most 64)");
}

Test(addr, wildcards_and_loopback)
{
    cr_expect(pdx_addr_is_wildcard(""));
    cr_expect(pdx_addr_is_wildcard("0.0.0.0"));
    cr_expect(pdx_addr_is_wildcard("::"));
    cr_expect(pdx_addr_is_wildcard("[::]"));
    cr_expect(pdx_addr_is_wildcard("0:0::0"));
    cr_expect_not(pdx_addr_is_wildcard("127.0.0.1"));
    cr_expect_not(pdx_addr_is_wildcard("::1"));
    cr_expect_not(pdx_addr_is_wildcard("zero"));
    cr_expect(pdx_addr_is_loopback("127.0.0.1"));
    cr_expect(pdx_addr_is_loopback("127.1.2.3"));
    cr_expect(pdx_addr_is_loopback("::1"));
    cr_expect(pdx_addr_is_loopback("[::1]"));
    cr_expect(pdx_addr_is_loopback("::ffff:127.0.0.1"));
    cr_expect(pdx_addr_is_loopback("localhost"));
    cr_expect(pdx_addr_is_loopback("LocalHost."));
    cr_expect(pdx_addr_is_loopback("decode.localhost"));
    cr_expect_not(pdx_addr_is_loopback("198.18.0.1"));
    cr_expect_not(pdx_addr_is_loopback("128.0.0.1"));
    cr_expect_not(pdx_addr_is_loopback("::2"));
    cr_expect_not(pdx_addr_is_loopback("::ffff:198.18.0.1"));
    cr_expect_not(pdx_addr_is_loopback("notlocalhost"));
    cr_expect_not(pdx_addr_is_loopback("0.0.0.0"));
}

/* --------------------------------------------- the advertised host's choice */

/* Interfaces made up for the tests: eth0 with 192.0.2.2 and fe80::2,
 * eth1 with 198.18.0.1, fe80::1 and 2001:2::1, eth2 with 203.0.113.9,
 * lo with 127.0.0.1 and ::1. */
#define NIFS 8
static struct ifaddrs ifs[NIFS];
static struct sockaddr_storage if_sa[NIFS];

static void add_if(int i, const char *name, const char *ip)
{
    if (strchr(ip, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&if_sa[i];

        s6->sin6_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&if_sa[i];

        s4->sin_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
    }
    ifs[i].ifa_name = (char *)name;
    ifs[i].ifa_addr = (struct sockaddr *)&if_sa[i];
    ifs[i].ifa_next = i + 1 < NIFS ? &ifs[i + 1] : NULL;
}

static const struct ifaddrs *fake_ifs(void)
{
    add_if(0, "lo", "127.0.0.1");
    add_if(1, "lo", "::1");
    add_if(2, "eth0", "192.0.2.2");
    add_if(3, "eth0", "fe80::2");
    add_if(4, "eth1", "fe80::1");
    add_if(5, "eth1", "198.18.0.1");
    add_if(6, "eth1", "2001:2::1");
    add_if(7, "eth2", "203.0.113.9");
    return ifs;
}

static char route4[64], route6[64];

static void write_text(char *path, size_t len, const char *text)
{
    FILE *f;
    int fd;

    snprintf(path, len, "/tmp/pdx-route-XXXXXX");
    fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    f = fdopen(fd, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_routes(void)
{
    if (route4[0])
        unlink(route4);
    if (route6[0])
        unlink(route6);
}

#define ROUTE4_HEADER "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"

/* pdx_addr_advertise with these route tables (NULL: a file that is not
 * there) and the made-up interfaces. */
static void advertise(const char *listen_host, const char *adv, const char *r4, const char *r6,
                      char *host, char *why)
{
    pdx_addr_sources_t src = {.route4 = "/nonexistent/route", .route6 = "/nonexistent/ipv6_route",
                              .ifaddrs = fake_ifs()};

    remove_routes();
    route4[0] = route6[0] = '\0';
    if (r4) {
        write_text(route4, sizeof(route4), r4);
        src.route4 = route4;
    }
    if (r6) {
        write_text(route6, sizeof(route6), r6);
        src.route6 = route6;
    }
    pdx_addr_advertise(listen_host, adv, &src, host, 128, why, 320);
}

/* Of the default routes that are up, the lowest metric's interface. */
Test(advertise, the_default_routes_interface, .fini = remove_routes)
{
    static const char table[] =
        ROUTE4_HEADER
        "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"   /* a subnet */
        "eth0\t00000000\t010200C0\t0002\t0\t0\t0\t00000000\t0\t0\t0\n"   /* down */
        "eth2\t00000000\t010071CB\t0003\t0\t0\t200\t00000000\t0\t0\t0\n"
        "eth1\t00000000\t020012C6\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        "eth0\t00000000\t010200C0\t0203\t0\t0\t1\t00000000\t0\t0\t0\n";  /* reject */
    char host[128], why[320];

    advertise("0.0.0.0", "", table, NULL, host, why);
    cr_expect_str_eq(host, "198.18.0.1");
    cr_expect_str_eq(why, "the address of eth1, the default route's interface");
    advertise("", "", table, NULL, host, why);
    cr_expect_str_eq(host, "198.18.0.1", "an empty host is a wildcard too");
}

Test(advertise, without_a_default_route_loopback_and_why, .fini = remove_routes)
{
    static const char subnet_only[] =
        ROUTE4_HEADER "eth1\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
    static const char via_eth9[] =
        ROUTE4_HEADER "eth9\t00000000\t010012C6\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
    char host[128], why[320];

    advertise("0.0.0.0", "", subnet_only, NULL, host, why);
    cr_expect_str_eq(host, "127.0.0.1");
    cr_expect(strstr(why, "no default route in /tmp/pdx-route-") == why, "%s", why);
    cr_expect(strstr(why, ": only peers on this host can reach it; set PDX_ADVERTISE_ADDR or "
                          "PDX_LISTEN for others"), "%s", why);
    advertise("0.0.0.0", "", NULL, NULL, host, why);
    cr_expect_str_eq(host, "127.0.0.1");
    cr_expect(strstr(why, "no default route in /nonexistent/route"), "%s", why);
    advertise("0.0.0.0", "", via_eth9, NULL, host, why);
    cr_expect_str_eq(host, "127.0.0.1");
    cr_expect(strstr(why, "eth9, the default route's interface, has no address"), "%s", why);
}

Test(advertise, an_address_set_wins, .fini = remove_routes)
{
    static const char table[] =
        ROUTE4_HEADER "eth1\t00000000\t020012C6\t0003\t0\t0\t100\t00000000\t0\t0\t0\n";
    char host[128], why[320];

    advertise("0.0.0.0", "203.0.113.50", table, NULL, host, why);
    cr_expect_str_eq(host, "203.0.113.50");
    cr_expect_str_eq(why, "PDX_ADVERTISE_ADDR");
    advertise("198.18.0.7", "[2001:2::9]", table, NULL, host, why);
    cr_expect_str_eq(host, "2001:2::9", "without its brackets");
    advertise("198.18.0.7", "decode-7.example.com", table, NULL, host, why);
    cr_expect_str_eq(host, "decode-7.example.com");
    advertise("198.18.0.7", "", table, NULL, host, why);
    cr_expect_str_eq(host, "198.18.0.7");
    cr_expect_str_eq(why, "the host of PDX_LISTEN");
    advertise("::1", "", table, NULL, host, why);
    cr_expect_str_eq(host, "::1");
    advertise("127.0.0.1", "", table, NULL, host, why);
    cr_expect_str_eq(host, "127.0.0.1", "a loopback listener advertises itself");
}

/* A [::] listener: the IPv6 default route's interface (its address that
 * is not link-local), else the IPv4 one's (the listener is dual-stack),
 * else ::1. */
Test(advertise, ipv6_wildcard, .fini = remove_routes)
{
    static const char table6[] =
        "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 "
        "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
        "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
        "00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
        "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
        "20010002000000000000000000000002 00000400 00000002 00000000 00000003     eth1\n";
    static const char no_default6[] =
        "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 "
        "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n";
    static const char table4[] =
        ROUTE4_HEADER "eth2\t00000000\t010071CB\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
    char host[128], why[320];

    advertise("::", "", table4, table6, host, why);
    cr_expect_str_eq(host, "2001:2::1");
    cr_expect_str_eq(why, "the address of eth1, the IPv6 default route's interface");
    advertise("::", "", table4, no_default6, host, why);
    cr_expect_str_eq(host, "203.0.113.9");
    cr_expect_str_eq(why, "the address of eth2, the default route's interface");
    advertise("::", "", NULL, no_default6, host, why);
    cr_expect_str_eq(host, "::1");
    cr_expect(strstr(why, "no IPv6 default route in /tmp/pdx-route-"), "%s", why);
    cr_expect(strstr(why, ", no default route in /nonexistent/route: only peers on this host"),
              "%s", why);
    advertise("0.0.0.0", "", NULL, table6, host, why);
    cr_expect_str_eq(host, "127.0.0.1", "an IPv4 listener takes no IPv6 route");
}

/* ------------------------------------------------------------- engines */

static bool can_bind_ipv6_loopback(void)
{
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;

    if (fd >= 0)
        close(fd);
    return ok;
}

/* This process's listening TCP sockets bound to ip (numeric, no brackets). */
static int listeners_on(const char *ip)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *ent;
    int n = 0;

    cr_assert_not_null(d);
    while ((ent = readdir(d))) {
        int fd = atoi(ent->d_name), on = 0, type = 0;
        socklen_t ol = sizeof(on), tl = sizeof(type), sl;
        struct sockaddr_storage ss;
        char host[64];

        sl = sizeof(ss);
        if (ent->d_name[0] == '.' || fd == dirfd(d) ||
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM ||
            getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &ol) < 0 || !on ||
            getsockname(fd, (struct sockaddr *)&ss, &sl) < 0 ||
            (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
            continue;
        inet_ntop(ss.ss_family,
                  ss.ss_family == AF_INET ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
                                          : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr,
                  host, sizeof(host));
        n += strcmp(host, ip) == 0;
    }
    closedir(d);
    return n;
}

static void move_rooms(uint32_t peer, uint64_t first)
{
    static const uint32_t pages[3][4] = {{0, 5, 9, 15}, {1, 2, 3, 4}, {14, 7, 11, 6}};

    for (uint64_t r = 0; r < 3; r++)
        side_move(&pf, &dc, peer, first + r, pages[r], 4);
}

/* Two engines on [::1]: the control and the data connections over IPv6. */
Test(engine, pair_over_ipv6_loopback, .fini = fini, .timeout = 60)
{
    static const char *const cfg[] = {"PDX_LISTEN=[::1]:0", NULL};

    if (!can_bind_ipv6_loopback())
        cr_skip_test("no IPv6 loopback (::1) on this host");
    side_open(&pf, &g, cfg);
    side_open(&dc, &g, cfg);
    cr_expect(strncmp(pdx_engine_address(pf.e), "[::1]:", 6) == 0, "%s",
              pdx_engine_address(pf.e));
    cr_expect_eq(listeners_on("::1"), 4, "control and data listeners of both on ::1");
    move_rooms(side_connect(&dc, &pf), 1);
}

/* [::] binds every address, control and data alike; PDX_ADVERTISE_ADDR
 * (brackets allowed) names the one peers dial. */
Test(engine, ipv6_wildcard_advertises_the_address_set, .fini = fini, .timeout = 60)
{
    static const char *const wild[] = {"PDX_LISTEN=[::]:0", "PDX_ADVERTISE_ADDR=[::1]", NULL};
    static const char *const lo[] = {"PDX_LISTEN=[::1]:0", NULL};

    if (!can_bind_ipv6_loopback())
        cr_skip_test("no IPv6 loopback (::1) on this host");
    side_open(&pf, &g, wild);
    cr_expect(strncmp(pdx_engine_address(pf.e), "[::1]:", 6) == 0, "%s",
              pdx_engine_address(pf.e));
    cr_expect_eq(listeners_on("::"), 2, "the control and the data listener bind [::]");
    side_open(&dc, &g, lo);
    move_rooms(side_connect(&dc, &pf), 10);
}

/* A wildcard listener's data listener is a wildcard too (it was bound to
 * 127.0.0.1), and an engine on 127.0.0.1 binds its data listener there. */
Test(engine, data_listener_binds_what_the_control_listener_binds, .fini = fini, .timeout = 60)
{
    static const char *const wild[] = {"PDX_LISTEN=0.0.0.0:0", "PDX_ADVERTISE_ADDR=127.0.0.1",
                                       "PDX_LOG=info", NULL};
    static const char *const lo[] = {"PDX_LOG=info", NULL};
    int lo0 = listeners_on("127.0.0.1");

    keep_from(PDX_LOG_INFO);
    side_open(&pf, &g, wild);
    cr_expect_eq(listeners_on("0.0.0.0"), 2, "control and data listeners on 0.0.0.0");
    cr_expect_eq(listeners_on("127.0.0.1"), lo0, "nothing bound to 127.0.0.1");
    cr_expect(strncmp(pdx_engine_address(pf.e), "127.0.0.1:", 10) == 0, "%s",
              pdx_engine_address(pf.e));
    side_open(&dc, &g, lo);
    pdx_log_set_handler(NULL, NULL);
    cr_expect_eq(listeners_on("127.0.0.1"), lo0 + 2);
    cr_expect(was_logged("advertised as 127.0.0.1: PDX_ADVERTISE_ADDR\n"), "%s", logged);
    cr_expect(was_logged("advertised as 127.0.0.1: the host of PDX_LISTEN\n"), "%s", logged);
    pdx_log_set_level(PDX_LOG_WARN); /* the engines' teardown is not this test's */
    move_rooms(side_connect(&dc, &pf), 20);
}

/* pdx_peer_connect needs host:port with a port of 1-65535: anything else
 * is PDX_ERR_INVALID, before any connection, with a message naming it. */
Test(engine, peer_connect_with_a_bad_address, .fini = fini, .timeout = 30)
{
    static const struct { const char *addr, *why; } bad[] = {
        {"127.0.0.1:0", "port 0 is outside 1-65535"},
        {"127.0.0.1:70000", "port 70000 is outside 1-65535"},
        {"127.0.0.1:99999", "port 99999 is outside 1-65535"},
        {"127.0.0.1:65536", "port 65536 is outside 1-65535"},
        {"127.0.0.1:-1", "port \"-1\" is not a decimal number"},
        {"127.0.0.1:5x", "port \"5x\" is not a decimal number"},
        {"127.0.0.1:", "no port after the colon"},
        {"127.0.0.1", "not host:port (no port)"},
        {"::1:5555", "an IPv6 address must be in brackets, as [::1]:5555"},
        {":5555", "no host before the port"},
    };
    uint32_t x;

    side_open(&dc, &g, NULL);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char want[160];

        keep_from(PDX_LOG_ERROR);
        cr_expect_eq(pdx_peer_connect(dc.e, bad[i].addr, 2000, &x), PDX_ERR_INVALID, "%s",
                     bad[i].addr);
        pdx_log_set_handler(NULL, NULL);
        snprintf(want, sizeof(want), "pdx_peer_connect: \"%s\": %s", bad[i].addr, bad[i].why);
        cr_expect(was_logged(want), "want \"%s\", logged: %s", want, logged);
    }
    side_open(&pf, &g, NULL);
    move_rooms(side_connect(&dc, &pf), 30);
}

/* The host's identity: the kernel's boot id as 16 bytes; anything else is
 * unknown (zero), and an unknown id matches nothing, itself included. */
Test(addr, host_id_from_the_boot_id)
{
    static const uint8_t want[PDX_WIRE_HOST_ID_SIZE] = {
        0x0f, 0x3e, 0x55, 0x2a, 0x9c, 0x41, 0x4d, 0x8b,
        0xa1, 0x7e, 0x00, 0xff, 0x12, 0x34, 0xab, 0xcd};
    static const char *const bad[] = {"", "0f3e552a-9c41-4d8b-a17e-00ff1234abc\n",
                                      "0f3e552a-9c41-4d8b-a17e-00ff1234abcz\n", "not a uuid\n"};
    char path[] = "/tmp/pdx-bootid-XXXXXX";
    uint8_t id[PDX_WIRE_HOST_ID_SIZE], other[PDX_WIRE_HOST_ID_SIZE];
    int fd = mkstemp(path);
    FILE *f;

    cr_assert_geq(fd, 0);
    close(fd);
    f = fopen(path, "w");
    fputs("0f3e552a-9c41-4d8b-a17e-00FF1234abcd\n", f);
    fclose(f);
    pdx_host_id(path, id);
    cr_expect_arr_eq(id, want, sizeof(want));
    memcpy(other, id, sizeof(id));
    cr_expect(pdx_host_ids_match(id, other));
    other[15] ^= 1;
    cr_expect_not(pdx_host_ids_match(id, other));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        pdx_host_id(path, id);
        memset(other, 0, sizeof(other));
        cr_expect_arr_eq(id, other, sizeof(id), "\"%s\" is no boot id", bad[i]);
        cr_expect_not(pdx_host_ids_match(id, other), "unknown is no host");
    }
    unlink(path);
    pdx_host_id("/nonexistent/boot_id", id);
    cr_expect_arr_eq(id, other, sizeof(id));
    pdx_host_id(NULL, id); /* this kernel's */
    cr_expect(pdx_host_ids_match(id, id), "this kernel has a boot id");
}

/* Engines of one process are on one host, and each knows it of the other. */
Test(engine, peers_on_this_host_know_it, .fini = fini, .timeout = 60)
{
    uint32_t peer;
    pdx_peer_t *p;

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
    peer = side_connect(&dc, &pf);
    p = pdx_peer_hold(dc.e, peer, NULL);
    cr_assert_not_null(p);
    cr_expect(p->same_host, "the decode engine's peer");
    pdx_peer_put(p);
    move_rooms(peer, 1);
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        p = atomic_load(&pf.e->conns[i]);
        if (p && atomic_load(&p->state) == PDX_PEER_READY)
            cr_expect(p->same_host, "the prefill engine's peer");
    }
}
