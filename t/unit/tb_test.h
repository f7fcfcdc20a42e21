/*
 * A very small unit-test harness for src/core: no dependencies, TAP output
 * so that `prove` can run the compiled binaries too.
 *
 *     TB_TEST(name) { TB_CHECK(expr); TB_CHECK_INT(a, b); ... }
 *     int main(void) { TB_RUN(name); ...; return tb_test_done(); }
 */

#ifndef TB_TEST_H
#define TB_TEST_H

#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <inttypes.h>


static int  tb_test_total;
static int  tb_test_failed;
static int  tb_test_current_failed;


#define TB_TEST(name)  static void name(void)


#define TB_RUN(name)                                                          \
    do {                                                                      \
        tb_test_current_failed = 0;                                           \
        name();                                                               \
        tb_test_total++;                                                      \
        if (tb_test_current_failed) {                                         \
            tb_test_failed++;                                                 \
            printf("not ok %d - %s\n", tb_test_total, #name);                 \
        } else {                                                              \
            printf("ok %d - %s\n", tb_test_total, #name);                     \
        }                                                                     \
    } while (0)


#define TB_FAIL_AT(...)                                                       \
    do {                                                                      \
        printf("#   %s:%d: ", __FILE__, __LINE__);                            \
        printf(__VA_ARGS__);                                                  \
        printf("\n");                                                         \
        tb_test_current_failed = 1;                                           \
    } while (0)


#define TB_CHECK(expr)                                                        \
    do {                                                                      \
        if (!(expr)) {                                                        \
            TB_FAIL_AT("check failed: %s", #expr);                            \
        }                                                                     \
    } while (0)


#define TB_CHECK_INT(a, b)                                                    \
    do {                                                                      \
        int64_t  tb_a_ = (int64_t) (a), tb_b_ = (int64_t) (b);                \
        if (tb_a_ != tb_b_) {                                                 \
            TB_FAIL_AT("%s == %s: got %" PRId64 ", want %" PRId64,            \
                       #a, #b, tb_a_, tb_b_);                                 \
        }                                                                     \
    } while (0)


#define TB_CHECK_DBL(a, b, eps)                                               \
    do {                                                                      \
        double  tb_a_ = (double) (a), tb_b_ = (double) (b);                   \
        if (tb_a_ - tb_b_ > (eps) || tb_b_ - tb_a_ > (eps)) {                 \
            TB_FAIL_AT("%s == %s: got %.9g, want %.9g", #a, #b, tb_a_, tb_b_);\
        }                                                                     \
    } while (0)


#define TB_CHECK_STR(a, b)                                                    \
    do {                                                                      \
        const char  *tb_a_ = (a), *tb_b_ = (b);                               \
        if (tb_a_ == NULL || tb_b_ == NULL || strcmp(tb_a_, tb_b_) != 0) {    \
            TB_FAIL_AT("%s == %s: got \"%s\", want \"%s\"", #a, #b,           \
                       tb_a_ ? tb_a_ : "(null)", tb_b_ ? tb_b_ : "(null)");   \
        }                                                                     \
    } while (0)


#define TB_CHECK_CONTAINS(hay, needle)                                        \
    do {                                                                      \
        const char  *tb_h_ = (hay), *tb_n_ = (needle);                        \
        if (tb_h_ == NULL || strstr(tb_h_, tb_n_) == NULL) {                  \
            TB_FAIL_AT("%s contains %s: got \"%s\"", #hay, #needle,           \
                       tb_h_ ? tb_h_ : "(null)");                             \
        }                                                                     \
    } while (0)


static int
tb_test_done(void)
{
    printf("1..%d\n", tb_test_total);

    if (tb_test_failed) {
        printf("# %d of %d failed\n", tb_test_failed, tb_test_total);
        return 1;
    }

    return 0;
}

#endif /* TB_TEST_H */
