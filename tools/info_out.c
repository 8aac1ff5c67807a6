/*
 * pdx-info's output: the text layout (a heading per section when several
 * print, then indented "key: value" lines) and a small JSON writer that
 * tracks its nesting, so each section writes members without knowing what
 * came before it.
 */
#include "info.h"

#include <stdarg.h>
#include <stdio.h>

#define JW_DEPTH_MAX 16

static bool jw_first[JW_DEPTH_MAX] = {true};
static int jw_depth;

static const char *const section_title[INFO_NSECTIONS] = {
    [INFO_VERSION] = "Build",
    [INFO_GPUS] = "GPUs",
    [INFO_NICS] = "RDMA devices",
    [INFO_MAP] = "GPU -> NIC",
    [INFO_CPUS] = "CPUs",
    [INFO_TRANSPORT] = "Transport",
    [INFO_CONFIG] = "Configuration",
};

void info_heading(const info_t *in, info_section_t section)
{
    static bool shown;

    if (__builtin_popcount(in->sections) < 2)
        return;
    printf("%s== %s ==\n", shown ? "\n" : "", section_title[section]);
    shown = true;
}

void info_line(int indent, const char *fmt, ...)
{
    va_list ap;

    printf("%*s", indent, "");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

static void jw_escaped(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* The separator and key of the next member or element. */
static void jw_member(const char *key)
{
    if (!jw_first[jw_depth])
        fputs(", ", stdout);
    jw_first[jw_depth] = false;
    if (key) {
        jw_escaped(key);
        fputs(": ", stdout);
    }
}

static void jw_open(const char *key, char bracket)
{
    jw_member(key);
    putchar(bracket);
    if (jw_depth + 1 < JW_DEPTH_MAX)
        jw_depth++;
    jw_first[jw_depth] = true;
}

static void jw_close(char bracket)
{
    putchar(bracket);
    if (jw_depth > 0)
        jw_depth--;
    if (jw_depth == 0 && bracket == '}')
        putchar('\n');
}

void jw_obj(const char *key)
{
    jw_open(key, '{');
}

void jw_obj_end(void)
{
    jw_close('}');
}

void jw_arr(const char *key)
{
    jw_open(key, '[');
}

void jw_arr_end(void)
{
    jw_close(']');
}

void jw_str(const char *key, const char *value)
{
    jw_member(key);
    if (value)
        jw_escaped(value);
    else
        fputs("null", stdout);
}

void jw_strf(const char *key, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    jw_str(key, buf);
}

void jw_int(const char *key, long long value)
{
    jw_member(key);
    printf("%lld", value);
}

void jw_uint(const char *key, unsigned long long value)
{
    jw_member(key);
    printf("%llu", value);
}

void jw_num(const char *key, double value)
{
    jw_member(key);
    printf("%g", value);
}

void jw_bool(const char *key, bool value)
{
    jw_member(key);
    fputs(value ? "true" : "false", stdout);
}

void jw_null(const char *key)
{
    jw_member(key);
    fputs("null", stdout);
}
