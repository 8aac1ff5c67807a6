/*
 * netguard: preloaded into the test run (tools/test.sh), it records every
 * connect() or sendto() of a test process to an address outside loopback
 * (127.0.0.0/8, ::1, IPv4-mapped loopback) made from the network namespace
 * the run started in; tests reach other addresses only inside namespaces
 * they create. One line per call in $NETGUARD_LOG: pid, program,
 * address. $NETGUARD_NS is the starting namespace's inode.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* The address as text when it leaves loopback, else false. */
static int outside(const struct sockaddr *a, char *buf, size_t len)
{
    if (!a)
        return 0;
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)a;

        if (ntohl(s->sin_addr.s_addr) >> 24 == 127)
            return 0;
        return inet_ntop(AF_INET, &s->sin_addr, buf, (socklen_t)len) != NULL;
    }
    if (a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)a;

        if (IN6_IS_ADDR_LOOPBACK(&s->sin6_addr) ||
            (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr) && s->sin6_addr.s6_addr[12] == 127))
            return 0;
        return inet_ntop(AF_INET6, &s->sin6_addr, buf, (socklen_t)len) != NULL;
    }
    return 0;
}

static void check(const struct sockaddr *a)
{
    const char *log = getenv("NETGUARD_LOG"), *ns = getenv("NETGUARD_NS");
    char addr[INET6_ADDRSTRLEN], exe[256] = "?", line[512];
    struct stat st;
    ssize_t n;
    int fd, len, saved = errno;

    if (!log || !outside(a, addr, sizeof(addr)))
        return;
    if (ns && stat("/proc/self/ns/net", &st) == 0 &&
        (unsigned long long)st.st_ino != strtoull(ns, NULL, 10))
        return; /* a namespace the test made */
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 1] = '\0';
    len = snprintf(line, sizeof(line), "%d %s -> %s\n", (int)getpid(), exe, addr);
    fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, line, (size_t)len) < 0) {
            /* nothing to do: the run goes on */
        }
        close(fd);
    }
    errno = saved;
}

int connect(int fd, const struct sockaddr *a, socklen_t alen)
{
    static int (*real)(int, const struct sockaddr *, socklen_t);

    if (!real)
        real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    check(a);
    return real(fd, a, alen);
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *a,
               socklen_t alen)
{
    static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);

    if (!real)
        real = (ssize_t(*)(int, const void *, size_t, int, const struct sockaddr *,
                           socklen_t))dlsym(RTLD_NEXT, "sendto");
    check(a);
    return real(fd, buf, len, flags, a, alen);
}
