/*
 * tests/dpt_test.h — the tiny test harness used by every dpt test program.
 *
 * CHECK(cond) records a failure with file:line and goes on; REQUIRE(cond)
 * records and returns from the current function (tests are split into
 * `static void test_x(void)` functions). dpt_test_main() runs the tests
 * listed by the program, prints "N passed, N failed" and returns the exit
 * code: 0 if everything passed, 1 otherwise, 77 (CTest's skip code, set by
 * SKIP_RETURN_CODE in tests/CMakeLists.txt) when the program called
 * DPT_TEST_SKIP() because a feature is missing.
 */
#ifndef DPT_TEST_H
#define DPT_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/status.h"

static int dpt_test_failures;
static int dpt_test_checks;
static const char *dpt_test_current = "";

#define CHECK(cond)                                                               \
    do {                                                                          \
        dpt_test_checks++;                                                        \
        if (!(cond)) {                                                            \
            dpt_test_failures++;                                                  \
            fprintf(stderr, "%s:%d: [%s] CHECK failed: %s\n", __FILE__, __LINE__, \
                    dpt_test_current, #cond);                                     \
        }                                                                         \
    } while (0)

#define REQUIRE(cond)                                                               \
    do {                                                                            \
        dpt_test_checks++;                                                          \
        if (!(cond)) {                                                              \
            dpt_test_failures++;                                                    \
            fprintf(stderr, "%s:%d: [%s] REQUIRE failed: %s\n", __FILE__, __LINE__, \
                    dpt_test_current, #cond);                                       \
            return;                                                                 \
        }                                                                           \
    } while (0)

/* A dpt call that must succeed; prints the status and the error message. */
#define CHECK_OK(expr)                                                                         \
    do {                                                                                       \
        int dpt_test_rc_ = (expr);                                                             \
        dpt_test_checks++;                                                                     \
        if (dpt_test_rc_ != 0) {                                                               \
            dpt_test_failures++;                                                               \
            fprintf(stderr, "%s:%d: [%s] %s returned %s: %s\n", __FILE__, __LINE__,            \
                    dpt_test_current, #expr, dpt_status_name(dpt_test_rc_), dpt_last_error()); \
        }                                                                                      \
    } while (0)

#define REQUIRE_OK(expr)                                                                       \
    do {                                                                                       \
        int dpt_test_rc_ = (expr);                                                             \
        dpt_test_checks++;                                                                     \
        if (dpt_test_rc_ != 0) {                                                               \
            dpt_test_failures++;                                                               \
            fprintf(stderr, "%s:%d: [%s] %s returned %s: %s\n", __FILE__, __LINE__,            \
                    dpt_test_current, #expr, dpt_status_name(dpt_test_rc_), dpt_last_error()); \
            return;                                                                            \
        }                                                                                      \
    } while (0)

/* A dpt call that must fail with `code` and leave a non-empty message that
 * contains `needle` (pass "" to only require a message). */
#define CHECK_ERR(expr, code, needle)                                                              \
    do {                                                                                           \
        dpt_error_clear();                                                                         \
        int dpt_test_rc_ = (expr);                                                                 \
        dpt_test_checks++;                                                                         \
        if (dpt_test_rc_ != (code) || dpt_last_error()[0] == '\0' ||                               \
            strstr(dpt_last_error(), (needle)) == NULL) {                                          \
            dpt_test_failures++;                                                                   \
            fprintf(stderr, "%s:%d: [%s] %s: expected %s with \"%s\", got %s: \"%s\"\n", __FILE__, \
                    __LINE__, dpt_test_current, #expr, #code, (needle),                            \
                    dpt_status_name(dpt_test_rc_), dpt_last_error());                              \
        }                                                                                          \
    } while (0)

/* |a - b| <= tol * max(1, |a|, |b|) */
#define CHECK_CLOSE(a, b, tol)                                                                  \
    do {                                                                                        \
        double dpt_test_a_ = (double)(a), dpt_test_b_ = (double)(b);                            \
        double dpt_test_s_ = fmax(1.0, fmax(fabs(dpt_test_a_), fabs(dpt_test_b_)));             \
        dpt_test_checks++;                                                                      \
        if (!(fabs(dpt_test_a_ - dpt_test_b_) <= (tol)*dpt_test_s_)) {                          \
            dpt_test_failures++;                                                                \
            fprintf(stderr, "%s:%d: [%s] CHECK_CLOSE failed: %s = %.9g, %s = %.9g\n", __FILE__, \
                    __LINE__, dpt_test_current, #a, dpt_test_a_, #b, dpt_test_b_);              \
        }                                                                                       \
    } while (0)

/* The largest |a[i] - b[i]| / max(scale, |b[i]|) over n values. */
static inline double dpt_test_max_rel_diff(const float *a, const float *b, size_t n, double scale)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(scale, fabs((double)b[i]));
        if (d > m)
            m = d;
    }
    return m;
}

#define DPT_TEST_SKIP(why)              \
    do {                                \
        printf("skipped: %s\n", (why)); \
        return 77;                      \
    } while (0)

typedef struct dpt_test_case {
    const char *name;
    void (*fn)(void);
} dpt_test_case_t;

#define DPT_TEST(fn) \
    {                \
#fn, fn      \
    }

static inline int dpt_test_main(const dpt_test_case_t *cases, size_t n)
{
    int passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        int before = dpt_test_failures;
        dpt_test_current = cases[i].name;
        cases[i].fn();
        if (dpt_test_failures == before) {
            passed++;
            printf("ok   %s\n", cases[i].name);
        } else {
            failed++;
            printf("FAIL %s\n", cases[i].name);
        }
    }
    printf("%d checks\n%d passed, %d failed\n", dpt_test_checks, passed, failed);
    return failed ? 1 : 0;
}

#define DPT_TEST_RUN(cases) dpt_test_main((cases), sizeof(cases) / sizeof((cases)[0]))

#endif /* DPT_TEST_H */
