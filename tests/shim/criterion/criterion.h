/*
 * A Criterion-compatible harness for the tsan preset. Criterion cannot start
 * under ThreadSanitizer (its inheritable arena collides with TSan's shadow
 * mapping), so tsan builds compile the same test sources against this
 * header: Test(), TestSuite() and the cr_assert / cr_expect families that
 * pdx's tests use. Each test runs in a forked child with its own timeout,
 * as under Criterion.
 */
#ifndef PDX_CRITERION_SHIM_H
#define PDX_CRITERION_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

typedef struct pdx_shim_test {
    const char *suite;
    const char *name;
    void      (*fn)(void);
    void      (*init)(void);
    void      (*fini)(void);
    double      timeout;
    bool        disabled;
    int         exit_code;
    int         signal;
    const char *description;
    struct pdx_shim_test *next;
} pdx_shim_test_t;

typedef struct pdx_shim_suite {
    const char *name;
    void      (*init)(void);
    void      (*fini)(void);
    double      timeout;
    bool        disabled;
    const char *description;
    struct pdx_shim_suite *next;
} pdx_shim_suite_t;

void pdx_shim_register(pdx_shim_test_t *test);
void pdx_shim_register_suite(pdx_shim_suite_t *suite);
void pdx_shim_check(int ok, int fatal, const char *file, int line, const char *expr,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void pdx_shim_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pdx_shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define Test(suite_, name_, ...)                                                   \
    static void suite_##_##name_##_fn(void);                                       \
    static pdx_shim_test_t suite_##_##name_##_desc = {                             \
        .suite = #suite_, .name = #name_, .fn = suite_##_##name_##_fn, __VA_ARGS__}; \
    __attribute__((constructor)) static void suite_##_##name_##_reg(void)          \
    {                                                                              \
        pdx_shim_register(&suite_##_##name_##_desc);                               \
    }                                                                              \
    static void suite_##_##name_##_fn(void)

#define TestSuite(suite_, ...)                                                     \
    static pdx_shim_suite_t suite_##_suite_desc = {.name = #suite_, __VA_ARGS__};  \
    __attribute__((constructor)) static void suite_##_suite_reg(void)              \
    {                                                                              \
        pdx_shim_register_suite(&suite_##_suite_desc);                             \
    }

#define PDX_SHIM_CHECK(fatal, cond, expr, ...) \
    pdx_shim_check(!!(cond), fatal, __FILE__, __LINE__, expr, "" __VA_ARGS__)

#define cr_assert(c, ...)         PDX_SHIM_CHECK(1, (c), #c, __VA_ARGS__)
#define cr_expect(c, ...)         PDX_SHIM_CHECK(0, (c), #c, __VA_ARGS__)
#define cr_assert_not(c, ...)     PDX_SHIM_CHECK(1, !(c), "!(" #c ")", __VA_ARGS__)
#define cr_expect_not(c, ...)     PDX_SHIM_CHECK(0, !(c), "!(" #c ")", __VA_ARGS__)
#define cr_assert_fail(...)       PDX_SHIM_CHECK(1, 0, "fail", __VA_ARGS__)
#define cr_expect_fail(...)       PDX_SHIM_CHECK(0, 0, "fail", __VA_ARGS__)

#define PDX_SHIM_CMP(fatal, a, op, b, ...) \
    PDX_SHIM_CHECK(fatal, (a) op (b), #a " " #op " " #b, __VA_ARGS__)
#define cr_assert_eq(a, b, ...)   PDX_SHIM_CMP(1, a, ==, b, __VA_ARGS__)
#define cr_expect_eq(a, b, ...)   PDX_SHIM_CMP(0, a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...)  PDX_SHIM_CMP(1, a, !=, b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...)  PDX_SHIM_CMP(0, a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...)   PDX_SHIM_CMP(1, a, <, b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...)   PDX_SHIM_CMP(0, a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...)  PDX_SHIM_CMP(1, a, <=, b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...)  PDX_SHIM_CMP(0, a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...)   PDX_SHIM_CMP(1, a, >, b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...)   PDX_SHIM_CMP(0, a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...)  PDX_SHIM_CMP(1, a, >=, b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...)  PDX_SHIM_CMP(0, a, >=, b, __VA_ARGS__)
#define cr_assert_null(p, ...)    PDX_SHIM_CHECK(1, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_expect_null(p, ...)    PDX_SHIM_CHECK(0, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...) PDX_SHIM_CHECK(1, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_expect_not_null(p, ...) PDX_SHIM_CHECK(0, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) \
    PDX_SHIM_CHECK(1, strcmp((a), (b)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...) \
    PDX_SHIM_CHECK(0, strcmp((a), (b)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) \
    PDX_SHIM_CHECK(1, strcmp((a), (b)) != 0, #a " differs from " #b, __VA_ARGS__)
#define cr_expect_str_neq(a, b, ...) \
    PDX_SHIM_CHECK(0, strcmp((a), (b)) != 0, #a " differs from " #b, __VA_ARGS__)
#define cr_assert_arr_eq(a, b, n, ...) \
    PDX_SHIM_CHECK(1, memcmp((a), (b), (n)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_expect_arr_eq(a, b, n, ...) \
    PDX_SHIM_CHECK(0, memcmp((a), (b), (n)) == 0, #a " equals " #b, __VA_ARGS__)

#define cr_skip_test(...) pdx_shim_skip("" __VA_ARGS__)
#define cr_log_info(...)  pdx_shim_log(__VA_ARGS__)
#define cr_log_warn(...)  pdx_shim_log(__VA_ARGS__)
#define cr_log_error(...) pdx_shim_log(__VA_ARGS__)

#endif
