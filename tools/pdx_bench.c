/*
 * pdx-bench: KV-cache pages from a prefill engine to a decode engine through
 * the public pdx API, every byte verified.
 *
 *   pdx-bench --role decode --listen HOST:PORT [flags]    serve --requests rooms
 *   pdx-bench --role prefill --connect HOST:PORT [flags]  send them (same flags)
 *   pdx-bench --loopback [flags]                          both, two processes
 *
 * --loopback forks before any engine (or thread) exists: the parent is the
 * decode side, listening on 127.0.0.1 port 0, and passes its address to the
 * prefill child through a pipe; the child passes its result back through a
 * second pipe; the parent waits for the child with a deadline and reports
 * both exit statuses. This file holds the options, the loopback and the
 * report; bench_run.c runs one side.
 *
 * --gpu N puts both sides' KV pools in memory of GPU N (PDX_GPU=N). Whether
 * the GPU is there is asked before anything starts; --loopback asks in a
 * short-lived child, so that no GPU runtime is started before the fork.
 */
#include "bench.h"
#include "bench_gpu.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_POOL_MIB 1024ull
#define POOL_ROUND       (64ull << 20)
#define DASHES \
    "-------------------------------------------------------------------------------------------"

typedef struct cli {
    bench_opts_t o;
    int          role;          /* -1: none given */
    int          loopback;
    const char  *listen, *connect;
    const char  *shards, *transport, *max_msg;
    uint64_t     pool_mib;      /* 0: default */
    int          timeout_set;
} cli_t;

enum {
    OPT_ROLE = 256, OPT_LISTEN, OPT_CONNECT, OPT_LOOPBACK, OPT_SHARDS, OPT_TRANSPORT, OPT_SEED,
    OPT_JSON, OPT_KEEP_GOING, OPT_UNCHECKED, OPT_TIMEOUT, OPT_GPU, OPT_PEERS, OPT_LAYER_RANGES,
};

static const struct option long_opts[] = {
    {"role", required_argument, NULL, OPT_ROLE},
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"connect", required_argument, NULL, OPT_CONNECT},
    {"loopback", no_argument, NULL, OPT_LOOPBACK},
    {"layers", required_argument, NULL, 'L'},
    {"bytes-per-token", required_argument, NULL, 'b'},
    {"page-size", required_argument, NULL, 'P'},
    {"pages", required_argument, NULL, 'p'},
    {"requests", required_argument, NULL, 'n'},
    {"concurrency", required_argument, NULL, 't'},
    {"chunks", required_argument, NULL, 'k'},
    {"layer-ranges", required_argument, NULL, OPT_LAYER_RANGES},
    {"shards", required_argument, NULL, OPT_SHARDS},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"pool-mib", required_argument, NULL, 'm'},
    {"max-msg", required_argument, NULL, 's'},
    {"seed", required_argument, NULL, OPT_SEED},
    {"json", no_argument, NULL, OPT_JSON},
    {"keep-going", no_argument, NULL, OPT_KEEP_GOING},
    {"unchecked", no_argument, NULL, OPT_UNCHECKED},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"gpu", required_argument, NULL, OPT_GPU},
    {"peers", required_argument, NULL, OPT_PEERS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
    fprintf(out,
        "usage: pdx-bench --role decode --listen HOST:PORT [flags]\n"
        "       pdx-bench --role prefill --connect HOST:PORT [flags]\n"
        "       pdx-bench --loopback [flags]\n"
        "Both sides take the same flags. Rooms 1..R go prefill -> decode; decode checks\n"
        "every byte of every page of every layer and prints the result.\n"
        "  -L, --layers L            KV buffers, one per layer (MLA)          [61]\n"
        "  -b, --bytes-per-token B   bytes of one token in one layer          [576]\n"
        "  -P, --page-size P         tokens per page                          [64]\n"
        "  -p, --pages N             pages per request                        [64]\n"
        "  -n, --requests R          requests (rooms 1..R)                    [64]\n"
        "  -t, --concurrency C       rooms in flight per side                 [8]\n"
        "  -k, --chunks K            pdx_send calls per request               [1]\n"
        "      --layer-ranges R      prefill: each chunk as R layer ranges\n"
        "                            (pdx_send_layers), host memory only      [1]\n"
        "      --shards S            PDX_SHARDS                               [engine default]\n"
        "      --transport NAME      PDX_TRANSPORT: auto, tcp, rdma, ipc      [engine default]\n"
        "  -m, --pool-mib M          KV pool per side, MiB   [1024, more if C requests need it]\n"
        "  -s, --max-msg BYTES       PDX_MAX_MSG_SIZE (K/M/G suffixes)        [engine default]\n"
        "      --seed N              page choice                              [1]\n"
        "      --timeout-ms T        connect/accept, one room, one release;\n"
        "                            also the engine's bootstrap and transfer timeouts [30000]\n"
        "      --gpu N               KV pool and aux slots in memory of GPU N (PDX_GPU=N)\n"
        "                            [host memory]. Prefill writes each chunk with a kernel\n"
        "                            on a stream (host-to-device copies where no kernel is\n"
        "                            built: amd) and sends it behind a pdx_gate_arm() gate\n"
        "                            on that stream; decode copies every page back to the\n"
        "                            host to check it\n"
        "      --peers N             decode: serve N prefill peers one after another, each\n"
        "                            its R requests (0: until SIGINT or SIGTERM; the\n"
        "                            latencies are then the last peer's)      [1]\n"
        "      --keep-going          count failures instead of stopping at the first\n"
        "      --unchecked           prefill writes no pages (no kernels, no gates: --gpu)\n"
        "                            and decode checks none: what the engine and its\n"
        "                            transport move, without the bench's own work\n"
        "      --json                one JSON object instead of the table\n"
        "Exit status: 0 all verified, 1 a mismatch or failure (--gpu: also no GPU, or GPU\n"
        "memory the transport refuses), 2 bad usage (--gpu: also an ordinal past the GPUs).\n");
}

static int parse_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                     uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(text, &end, 10);
    if (!isdigit((unsigned char)*text) || *end || errno || v < min || v > max) {
        fprintf(stderr, "pdx-bench: %s %s: expected an integer in [%" PRIu64 ", %" PRIu64 "]\n",
                flag, text, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_u32(const char *flag, const char *text, uint64_t min, uint64_t max,
                     uint32_t *out)
{
    uint64_t v;

    if (parse_u64(flag, text, min, max, &v) != 0)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_args(int argc, char **argv, cli_t *c)
{
    bench_opts_t *o = &c->o;
    uint64_t v;
    int opt, rc = 0;

    while ((opt = getopt_long(argc, argv, "L:b:P:p:n:t:k:m:s:h", long_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_ROLE:
            if (strcmp(optarg, "decode") == 0)
                c->role = BENCH_DECODE;
            else if (strcmp(optarg, "prefill") == 0)
                c->role = BENCH_PREFILL;
            else {
                fprintf(stderr, "pdx-bench: --role %s: expected decode or prefill\n", optarg);
                rc = -1;
            }
            break;
        case OPT_LISTEN: c->listen = optarg; break;
        case OPT_CONNECT: c->connect = optarg; break;
        case OPT_LOOPBACK: c->loopback = 1; break;
        case 'L': rc |= parse_u32("--layers", optarg, 1, 4096, &o->layers); break;
        case 'b':
            rc |= parse_u32("--bytes-per-token", optarg, 1, 1u << 20, &o->bytes_per_token);
            break;
        case 'P': rc |= parse_u32("--page-size", optarg, 1, 1u << 16, &o->page_size); break;
        case 'p': rc |= parse_u32("--pages", optarg, 1, PDX_MAX_ROOM_PAGES, &o->pages); break;
        case 'n': rc |= parse_u32("--requests", optarg, 1, 1u << 26, &o->requests); break;
        case 't': rc |= parse_u32("--concurrency", optarg, 1, 4096, &o->concurrency); break;
        case 'k': rc |= parse_u32("--chunks", optarg, 1, PDX_MAX_ROOM_PAGES, &o->chunks); break;
        case OPT_SHARDS: c->shards = optarg; break;
        case OPT_TRANSPORT: c->transport = optarg; break;
        case 'm': rc |= parse_u64("--pool-mib", optarg, 1, 1ull << 30, &c->pool_mib); break;
        case 's': c->max_msg = optarg; break;
        case OPT_SEED: rc |= parse_u64("--seed", optarg, 0, UINT64_MAX, &o->seed); break;
        case OPT_JSON: o->json = 1; break;
        case OPT_KEEP_GOING: o->keep_going = 1; break;
        case OPT_UNCHECKED: o->unchecked = 1; break;
        case OPT_TIMEOUT:
            rc |= parse_u64("--timeout-ms", optarg, 1, INT_MAX / 4, &v);
            o->timeout_ms = (int)v;
            c->timeout_set = 1;
            break;
        case OPT_GPU:
            rc |= parse_u64("--gpu", optarg, 0, 1023, &v);
            o->gpu = (int)v;
            break;
        case OPT_PEERS: rc |= parse_u32("--peers", optarg, 0, 1u << 20, &o->peers); break;
        case OPT_LAYER_RANGES:
            rc |= parse_u32("--layer-ranges", optarg, 1, 1u << 20, &o->layer_ranges);
            break;
        case 'h': usage(stdout); exit(BENCH_EXIT_OK);
        default: rc = -1; break;
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "pdx-bench: unexpected argument '%s'\n", argv[optind]);
        rc = -1;
    }
    if (rc == 0 && c->loopback == (c->role >= 0)) {
        fprintf(stderr, "pdx-bench: give one of --role decode, --role prefill, --loopback\n");
        rc = -1;
    }
    if (rc == 0 && (c->loopback ? c->listen || c->connect
                    : c->role == BENCH_DECODE ? !c->listen || c->connect
                                              : !c->connect || c->listen)) {
        fprintf(stderr, "pdx-bench: --role decode takes --listen HOST:PORT, --role prefill takes "
                        "--connect HOST:PORT, --loopback takes neither\n");
        rc = -1;
    }
    if (rc == 0 && o->peers != 1 && c->role != BENCH_DECODE) {
        fprintf(stderr, "pdx-bench: --peers is for --role decode\n");
        rc = -1;
    }
    if (rc == 0 && (o->layer_ranges > o->layers || (o->layer_ranges > 1 && o->gpu >= 0))) {
        fprintf(stderr, "pdx-bench: --layer-ranges %u: at most --layers (%u), host memory "
                        "only\n", o->layer_ranges, o->layers);
        rc = -1;
    }
    if (rc == 0 && o->chunks > o->pages) {
        fprintf(stderr, "pdx-bench: --chunks %u: more chunks than the %u pages of a request\n",
                o->chunks, o->pages);
        rc = -1;
    }
    return rc;
}

/* Pool size and page count: --pool-mib, or 1 GiB grown to hold C requests. */
static int derive_geometry(cli_t *c)
{
    bench_opts_t *o = &c->o;
    uint64_t layer_bytes, need_pages, pool;

    if (o->concurrency > o->requests)
        o->concurrency = o->requests;
    o->bytes_per_page = (uint64_t)o->bytes_per_token * o->page_size;
    layer_bytes = o->bytes_per_page * o->layers;      /* < 2^48 by the flag ranges */
    need_pages = (uint64_t)o->concurrency * o->pages; /* < 2^32 */
    if (layer_bytes > (1ull << 50) / need_pages) {
        fprintf(stderr, "pdx-bench: %u rooms of %u pages of %" PRIu64 " B in %u layers do not fit "
                "in memory\n", o->concurrency, o->pages, o->bytes_per_page, o->layers);
        return -1;
    }
    o->bytes_per_request = layer_bytes * o->pages;
    pool = (c->pool_mib ? c->pool_mib : DEFAULT_POOL_MIB) << 20;
    if (!c->pool_mib && pool / layer_bytes < need_pages)
        pool = (need_pages * layer_bytes + POOL_ROUND - 1) / POOL_ROUND * POOL_ROUND;
    o->npages = pool / layer_bytes;
    if (o->npages > UINT32_MAX)
        o->npages = UINT32_MAX;
    if (o->npages < need_pages) {
        fprintf(stderr, "pdx-bench: a pool of %" PRIu64 " MiB holds %" PRIu64 " pages of %u "
                "layers x %" PRIu64 " B; %u rooms in flight of %u pages need %" PRIu64 ": raise "
                "--pool-mib or lower --concurrency or --pages\n", pool >> 20, o->npages,
                o->layers, o->bytes_per_page, o->concurrency, o->pages, need_pages);
        return -1;
    }
    o->pool_bytes = o->npages * layer_bytes;
    return 0;
}

static int cfg_set(pdx_config_t *cfg, const char *flag, const char *name, const char *value)
{
    pdx_status_t st = pdx_config_set(cfg, name, value);

    if (st != PDX_OK) {
        fprintf(stderr, "pdx-bench: %s %s: %s refuses it (%s)\n", flag, value, name,
                pdx_status_str(st));
        return -1;
    }
    return 0;
}

/* The engine configuration both sides share; decode's listener is set later. */
static int build_config(const cli_t *c, pdx_config_t *cfg)
{
    char ms[32];
    int rc = 0;

    if (pdx_config_init(cfg) != PDX_OK) {
        fprintf(stderr, "pdx-bench: a PDX_* environment variable is invalid (see above)\n");
        return -1;
    }
    if (c->shards)
        rc |= cfg_set(cfg, "--shards", "PDX_SHARDS", c->shards);
    if (c->transport)
        rc |= cfg_set(cfg, "--transport", "PDX_TRANSPORT", c->transport);
    if (c->max_msg)
        rc |= cfg_set(cfg, "--max-msg", "PDX_MAX_MSG_SIZE", c->max_msg);
    if (c->timeout_set) {
        snprintf(ms, sizeof(ms), "%d", c->o.timeout_ms);
        rc |= cfg_set(cfg, "--timeout-ms", "PDX_BOOTSTRAP_TIMEOUT_MS", ms);
        rc |= cfg_set(cfg, "--timeout-ms", "PDX_TRANSFER_TIMEOUT_MS", ms);
    }
    if (c->o.gpu >= 0) {
        snprintf(ms, sizeof(ms), "%d", c->o.gpu);
        rc |= cfg_set(cfg, "--gpu", "PDX_GPU", ms);
    }
    if (c->loopback)
        rc |= cfg_set(cfg, "--loopback", "PDX_LISTEN", "127.0.0.1:0");
    else if (c->role == BENCH_DECODE)
        rc |= cfg_set(cfg, "--listen", "PDX_LISTEN", c->listen);
    return rc ? -1 : 0;
}

/* ----------------------------------------------------------------- report */

static void print_banner(const cli_t *c, const pdx_config_t *cfg)
{
    const bench_opts_t *o = &c->o;
    int decode = c->loopback || c->role == BENCH_DECODE;

    printf("%s\n", DASHES);
    printf("                    pdx-bench: KV-cache pages, prefill -> decode\n");
    if (c->loopback)
        printf(" Role           : loopback (decode here, prefill in a child process, 127.0.0.1)\n");
    else if (decode)
        printf(" Role           : decode, listening on %s\n", c->listen);
    else
        printf(" Role           : prefill, connecting to %s\n", c->connect);
    printf(" pdx            : %s, protocol %d\n", pdx_version(), PDX_PROTOCOL_VERSION);
    printf(" Transport      : %-10s Shards : %-6u Max msg : %" PRIu64 " B\n", cfg->transport,
           cfg->shards, cfg->max_msg_size);
    printf(" Geometry       : %u layers (one buffer each) x %u B/token x %u tokens/page = %" PRIu64
           " B per page per layer\n", o->layers, o->bytes_per_token, o->page_size,
           o->bytes_per_page);
    printf(" Request        : %u pages (%" PRIu64 " tokens) = %" PRIu64 " B in %u chunk(s)%s\n",
           o->pages, (uint64_t)o->pages * o->page_size, o->bytes_per_request, o->chunks,
           o->layer_ranges > 1 ? ", each as layer ranges" : "");
    if (o->layer_ranges > 1)
        printf(" Layer ranges   : %u per chunk (pdx_send_layers)\n", o->layer_ranges);
    printf(" Requests       : %u, %u in flight, seed %" PRIu64 "%s\n", o->requests,
           o->concurrency, o->seed, o->keep_going ? ", keep going" : "");
    if (o->gpu < 0)
        printf(" KV pool        : %" PRIu64 " MiB per side = %" PRIu64 " pages\n",
               o->pool_bytes >> 20, o->npages);
    else
        printf(" KV pool        : %" PRIu64 " MiB per side = %" PRIu64 " pages, on GPU %d (%s); "
               "aux slots too\n", o->pool_bytes >> 20, o->npages, o->gpu, bench_gpu_platform());
    if (o->gpu >= 0 && !o->unchecked)
        printf(" GPU writes     : prefill: a kernel on a stream (copies where none is built), "
               "each chunk sent behind\n"
               "                  a pdx_gate_arm() gate; decode: pages copied back to the host "
               "and checked\n");
    printf(" Timeout        : %d ms\n", o->timeout_ms);
    if (o->unchecked) {
        printf(" Unchecked      : pages are neither written nor checked (--unchecked)\n");
        printf(" Latency        : %s\n", decode ? "pdx_expect - decode SUCCESS"
                                                 : "first pdx_send - prefill SUCCESS");
        printf(" BW             : bytes / first room to last release\n");
    } else if (decode && o->gpu >= 0) {
        printf(" Latency        : decode SUCCESS - prefill's first GPU write of the room "
               "(CLOCK_MONOTONIC: one host only)\n");
        printf(" BW             : verified bytes / first pdx_expect to last release (copies back "
               "and checks included)\n");
    } else if (decode) {
        printf(" Latency        : decode SUCCESS - prefill send time (CLOCK_MONOTONIC: valid only "
               "with both sides on one host)\n");
        printf(" BW             : verified bytes / first pdx_expect to last release (verification "
               "included)\n");
    } else if (o->gpu >= 0) {
        printf(" Latency        : first GPU write of the room - prefill SUCCESS\n");
        printf(" BW             : bytes / first write to last release (GPU writes included)\n");
    } else {
        printf(" Latency        : first pdx_send - prefill SUCCESS\n");
        printf(" BW             : bytes / first pdx_send to last release (filling included)\n");
    }
    printf("%s\n", DASHES);
    fflush(stdout);
}

static double rate(uint64_t n, uint64_t ns)
{
    return ns ? (double)n * 1e9 / (double)ns : 0.0;
}

/* Decode: the rooms it should have verified (--requests for each peer served, at least one). */
static uint64_t expected(const bench_opts_t *o, const bench_result_t *r)
{
    return (uint64_t)o->requests * (r->peers ? r->peers : 1);
}

static int all_verified(const bench_opts_t *o, const bench_result_t *r)
{
    return !r->failed && r->done == expected(o, r);
}

static void print_table(const bench_opts_t *o, bench_role_t role, const bench_result_t *r)
{
    printf(" %-12s %-10s %-10s %-12s %-12s %-12s %s\n", "#bytes", "#requests", "BW[GB/s]",
           "requests/s", "lat p50[us]", "lat p99[us]",
           role == BENCH_DECODE ? "verified" : "failed");
    printf(" %-12" PRIu64 " %-10" PRIu64 " %-10.2f %-12.2f %-12.1f %-12.1f ", o->bytes_per_request,
           r->done, rate(r->bytes, r->wall_ns) / 1e9, rate(r->done, r->wall_ns),
           (double)r->lat_p50_ns / 1e3, (double)r->lat_p99_ns / 1e3);
    if (role == BENCH_PREFILL)
        printf("%" PRIu64 "\n", r->failed);
    else if (all_verified(o, r))
        printf(o->unchecked ? "unchecked\n" : "yes\n");
    else
        printf("NO (%" PRIu64 " of %" PRIu64 ")\n",
               r->done < expected(o, r) ? expected(o, r) - r->done : 0, expected(o, r));
    if (r->stats.rooms_verified || r->stats.checksum_mismatches)
        printf(" PDX_VERIFY: %" PRIu64 " rooms matched their checksums, %" PRIu64 " did not\n",
               r->stats.rooms_verified, r->stats.checksum_mismatches);
    printf(" transport used : %s\n", r->transport[0] ? r->transport : "none (no engine)");
    if (r->stats.bytes_direct)
        printf(" GPU copies     : %" PRIu64 " of %" PRIu64 " bytes sent (ipc: a peer of this "
               "host)\n", r->stats.bytes_direct, r->stats.bytes_sent);
    if (r->error[0])
        printf(" first failure  : %s\n", r->error);
    printf("%s\n", DASHES);
}

/* s as a JSON string. */
static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

/* s as a JSON string, or null when empty. */
static void json_str_or_null(const char *s)
{
    if (s[0])
        json_str(s);
    else
        fputs("null", stdout);
}

static void json_result(const bench_result_t *r, int exit_status)
{
    printf("{\"transport\": ");
    json_str_or_null(r->transport);
    printf(", \"error\": ");
    json_str_or_null(r->error);
    printf(", \"done\": %" PRIu64 ", \"failed\": %" PRIu64 ", \"bytes\": %" PRIu64
           ", \"seconds\": %.6f, \"bw_gbps\": %.4f, \"requests_per_s\": %.3f"
           ", \"latency_samples\": %" PRIu64 ", \"lat_p50_us\": %.1f, \"lat_p99_us\": %.1f"
           ", \"exit\": %d, \"shard_cpu_us\": %.1f, \"stats\": "
           "{\"bytes_sent\": %" PRIu64 ", \"writes_posted\": %" PRIu64 ", \"chunks_sent\": %" PRIu64
           ", \"notifies_sent\": %" PRIu64 ", \"notifies_received\": %" PRIu64
           ", \"rooms_success\": %" PRIu64 ", \"rooms_failed\": %" PRIu64 ", \"send_again\": %"
           PRIu64 ", \"ring_high_water\": %" PRIu64 ", \"rooms_verified\": %" PRIu64
           ", \"checksum_mismatches\": %" PRIu64 ", \"bytes_direct\": %" PRIu64 "}}",
           r->done, r->failed, r->bytes, (double)r->wall_ns / 1e9, rate(r->bytes, r->wall_ns) / 1e9,
           rate(r->done, r->wall_ns), r->nlat, (double)r->lat_p50_ns / 1e3,
           (double)r->lat_p99_ns / 1e3, exit_status, (double)r->shard_cpu_ns / 1e3,
           r->stats.bytes_sent, r->stats.writes_posted,
           r->stats.chunks_sent, r->stats.notifies_sent, r->stats.notifies_received,
           r->stats.rooms_success, r->stats.rooms_failed, r->stats.send_again,
           r->stats.ring_high_water, r->stats.rooms_verified, r->stats.checksum_mismatches,
           r->stats.bytes_direct);
}

/* pf is the loopback child's result, NULL otherwise. */
static void print_json(const cli_t *c, const pdx_config_t *cfg, bench_role_t role,
                       const bench_result_t *r, int rc, const bench_result_t *pf, int pf_rc)
{
    const bench_opts_t *o = &c->o;

    printf("{\"role\": \"%s\", \"pdx_version\": ", c->loopback ? "loopback"
                                                   : role == BENCH_DECODE ? "decode" : "prefill");
    json_str(pdx_version());
    /* the transport the engine used ("auto" is a setting, not a transport);
     * null when no engine was made */
    printf(", \"transport\": ");
    json_str_or_null(r->transport);
    printf(", \"transport_setting\": ");
    json_str(cfg->transport);
    printf(", \"error\": ");
    json_str_or_null(r->error[0] || !pf ? r->error : pf->error);
    printf(", \"address\": ");
    json_str(role == BENCH_DECODE ? r->address : c->connect);
    printf(", \"shards\": %u, \"max_msg\": %" PRIu64 ", \"layers\": %u, \"bytes_per_token\": %u, "
           "\"page_size\": %u, \"bytes_per_page\": %" PRIu64 ", \"pages\": %u, \"chunks\": %u, "
           "\"layer_ranges\": %u, "
           "\"requests\": %u, \"concurrency\": %u, \"seed\": %" PRIu64 ", \"pool_bytes\": %" PRIu64
           ", \"pool_pages\": %" PRIu64 ", \"pool_memory\": \"%s\", \"gpu\": %d"
           ", \"timeout_ms\": %d, \"bytes_per_request\": %" PRIu64
           ", \"latency\": \"%s\", \"verified\": %s, \"%s\": ",
           cfg->shards, cfg->max_msg_size, o->layers, o->bytes_per_token, o->page_size,
           o->bytes_per_page, o->pages, o->chunks, o->layer_ranges, o->requests, o->concurrency,
           o->seed,
           o->pool_bytes, o->npages, o->gpu < 0 ? "host" : "gpu", o->gpu, o->timeout_ms,
           o->bytes_per_request,
           o->unchecked ? (role == BENCH_DECODE ? "pdx_expect - decode SUCCESS"
                                                : "first pdx_send - prefill SUCCESS")
           : role == BENCH_DECODE
               ? (o->gpu < 0 ? "decode SUCCESS - prefill send, CLOCK_MONOTONIC, one host only"
                             : "decode SUCCESS - prefill first GPU write, CLOCK_MONOTONIC, one "
                               "host only")
               : (o->gpu < 0 ? "first pdx_send - prefill SUCCESS"
                             : "first GPU write - prefill SUCCESS"),
           role == BENCH_DECODE && all_verified(o, r) && !o->unchecked ? "true" : "false",
           role == BENCH_DECODE ? "decode" : "prefill");
    json_result(r, rc);
    if (pf) {
        printf(", \"prefill\": ");
        json_result(pf, pf_rc);
    }
    printf("}\n");
}

/* --------------------------------------------------------------- loopback */

/* Read "host:port\n" from fd, waiting at most timeout_ms. */
static int read_address(int fd, char *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    size_t have = 0;

    while (have + 1 < len) {
        uint64_t now = bench_now_ns();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;
        int r;

        if (now >= deadline) {
            bench_err(BENCH_PREFILL, "no address from the decode process within %d ms", timeout_ms);
            return -1;
        }
        r = poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (r < 0 && errno != EINTR)
            return -1;
        if (r <= 0)
            continue;
        n = read(fd, buf + have, len - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            bench_err(BENCH_PREFILL, "the decode process failed before it listened");
            return -1;
        }
        have += (size_t)n;
        buf[have] = '\0';
        if (strchr(buf, '\n')) {
            *strchr(buf, '\n') = '\0';
            return 0;
        }
    }
    bench_err(BENCH_PREFILL, "the decode process sent an address that is too long");
    return -1;
}

static int loopback_child(const cli_t *c, const pdx_config_t *cfg, int addr_fd, int res_fd)
{
    bench_opts_t o = c->o;
    bench_result_t res;
    char addr[PDX_NAME_MAX + 2];
    int rc;

    o.progress = 0;
    if (read_address(addr_fd, addr, sizeof(addr), o.timeout_ms) != 0)
        return BENCH_EXIT_FAIL;
    close(addr_fd);
    rc = bench_run(&o, BENCH_PREFILL, cfg, addr, -1, &res);
    if (write(res_fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
        bench_err(BENCH_PREFILL, "cannot pass the result to the decode process: %s",
                  strerror(errno));
    return rc;
}

/* Wait for child `what` at most timeout_ms, then kill it; its exit status, or -signal. */
static int wait_child(pid_t pid, int timeout_ms, const char *what)
{
    uint64_t deadline = bench_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int status;
    pid_t r;

    while ((r = waitpid(pid, &status, WNOHANG)) == 0 && bench_now_ns() < deadline)
        usleep(10000);
    if (r == 0) {
        bench_err(BENCH_DECODE, "the %s process did not exit within %d ms; killing it", what,
                  timeout_ms);
        kill(pid, SIGKILL);
        r = waitpid(pid, &status, 0);
    }
    if (r < 0) {
        bench_err(BENCH_DECODE, "waitpid: %s", strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

static int run_loopback(cli_t *c, const pdx_config_t *cfg)
{
    int addr_pipe[2], res_pipe[2], rc, pf_rc;
    bench_result_t res, pf;
    ssize_t n;
    pid_t pid;

    if (pipe2(addr_pipe, O_CLOEXEC) != 0 || pipe2(res_pipe, O_CLOEXEC) != 0) {
        bench_err(BENCH_DECODE, "pipe: %s", strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        bench_err(BENCH_DECODE, "fork: %s", strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    if (pid == 0) {
        close(addr_pipe[1]);
        close(res_pipe[0]);
        rc = loopback_child(c, cfg, addr_pipe[0], res_pipe[1]);
        fflush(NULL);
        _exit(rc);
    }
    close(addr_pipe[0]);
    close(res_pipe[1]);
    if (!c->o.json)
        print_banner(c, cfg);
    rc = bench_run(&c->o, BENCH_DECODE, cfg, NULL, addr_pipe[1], &res);
    pf_rc = wait_child(pid, c->o.timeout_ms + 5000, "prefill");
    do
        n = read(res_pipe[0], &pf, sizeof(pf));
    while (n < 0 && errno == EINTR);
    close(res_pipe[0]);
    if (n != (ssize_t)sizeof(pf))
        memset(&pf, 0, sizeof(pf));
    if (c->o.json) {
        print_json(c, cfg, BENCH_DECODE, &res, rc, &pf, pf_rc);
    } else {
        print_table(&c->o, BENCH_DECODE, &res);
        printf(" prefill        : %" PRIu64 " SUCCESS, %" PRIu64 " failed; %s -> "
               "prefill SUCCESS p50 %.1f us, p99 %.1f us\n", pf.done, pf.failed,
               c->o.gpu < 0 ? "first pdx_send" : "first GPU write", (double)pf.lat_p50_ns / 1e3,
               (double)pf.lat_p99_ns / 1e3);
        if (pf.done)
            printf(" prefill cost   : %.1f writes, %.1f notifies and %.1f us of shard CPU "
                   "(polling included) per request\n",
                   (double)pf.stats.writes_posted / (double)pf.done,
                   (double)pf.stats.notifies_sent / (double)pf.done,
                   (double)pf.shard_cpu_ns / 1e3 / (double)pf.done);
        if (pf.stats.bytes_direct)
            printf(" prefill copies : %" PRIu64 " of %" PRIu64 " bytes sent by GPU copies (ipc: a "
                   "peer of this host)\n", pf.stats.bytes_direct, pf.stats.bytes_sent);
        if (pf_rc >= 0)
            printf(" exit status    : decode %d, prefill %d\n", rc, pf_rc);
        else
            printf(" exit status    : decode %d, prefill killed by signal %d\n", rc, -pf_rc);
    }
    return rc == BENCH_EXIT_OK && pf_rc == BENCH_EXIT_OK ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}

/*
 * --gpu: BENCH_EXIT_OK when GPU N is there, else the probe's status after
 * its message. --loopback forks once the engines are to start, and a GPU
 * runtime started before a fork is unusable in the child: ask in a child.
 */
static int check_gpu(const cli_t *c)
{
    pid_t pid;
    int rc;

    if (c->o.gpu < 0)
        return BENCH_EXIT_OK;
    if (!c->loopback)
        return bench_gpu_probe(c->o.gpu);
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        bench_err(BENCH_DECODE, "fork: %s", strerror(errno));
        return BENCH_EXIT_FAIL;
    }
    if (pid == 0) {
        rc = bench_gpu_probe(c->o.gpu);
        fflush(NULL);
        _exit(rc);
    }
    rc = wait_child(pid, c->o.timeout_ms, "GPU probe");
    return rc < 0 ? BENCH_EXIT_FAIL : rc;
}

static void on_stop_signal(int sig)
{
    (void)sig;
    bench_stopping = 1;
}

int main(int argc, char **argv)
{
    cli_t c = {.o = {.layers = 61, .bytes_per_token = 576, .page_size = 64, .pages = 64,
                     .requests = 64, .concurrency = 8, .chunks = 1, .layer_ranges = 1, .seed = 1,
                     .timeout_ms = 30000, .gpu = -1, .peers = 1},
               .role = -1};
    pdx_config_t cfg;
    bench_result_t res;
    int rc;

    if (parse_args(argc, argv, &c) != 0) {
        fprintf(stderr, "pdx-bench --help lists the flags\n");
        return BENCH_EXIT_USAGE;
    }
    if (derive_geometry(&c) != 0 || build_config(&c, &cfg) != 0)
        return BENCH_EXIT_USAGE;
    rc = check_gpu(&c);
    if (rc != BENCH_EXIT_OK)
        return rc;
    c.o.progress = !c.o.json && isatty(STDOUT_FILENO);
    /* A closed pipe or socket is an error to report, not a signal that ends us. */
    signal(SIGPIPE, SIG_IGN);
    if (c.o.peers == 0) {
        signal(SIGINT, on_stop_signal);
        signal(SIGTERM, on_stop_signal);
    }
    if (c.loopback)
        return run_loopback(&c, &cfg);
    if (!c.o.json)
        print_banner(&c, &cfg);
    rc = bench_run(&c.o, (bench_role_t)c.role, &cfg, c.connect, -1, &res);
    if (c.o.json)
        print_json(&c, &cfg, (bench_role_t)c.role, &res, rc, NULL, 0);
    else
        print_table(&c.o, (bench_role_t)c.role, &res);
    return rc;
}
