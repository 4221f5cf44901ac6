/* Minimal test harness shared by the C and C++ tests. Each binary runs its TEST functions with RUN_TEST
 * and ends with TEST_SUMMARY(), whose last line "N passed, N failed" tests/run_tests.sh adds up. */
#ifndef KVB_TEST_HARNESS_H
#define KVB_TEST_HARNESS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kvblock.h"

static int kvbt_passed, kvbt_failed, kvbt_case_failures;

/* KVB_TEST_QUICK=1 (set by the sanitizer and valgrind variants, whose runs are 5-50x slower): long
 * randomized tests run fewer cases, still reaching every code path; the plain `make check` runs them all. */
static inline int kvbt_quick(void) {
  const char* q = getenv("KVB_TEST_QUICK");
  return q != NULL && q[0] != '\0' && q[0] != '0';
}

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
      kvbt_case_failures++;                                                         \
    }                                                                               \
  } while (0)

/* Asserts a kvb_status, and that every error leaves a message behind. */
#define CHECK_STATUS(expr, want)                                                    \
  do {                                                                              \
    kvb_status kvbt_s_ = (expr);                                                    \
    if (kvbt_s_ != (want)) {                                                        \
      fprintf(stderr, "%s:%d: %s gave %s, want %s (%s)\n", __FILE__, __LINE__,      \
              #expr, kvb_status_string(kvbt_s_), kvb_status_string(want),           \
              kvb_last_error());                                                    \
      kvbt_case_failures++;                                                         \
    } else if (kvbt_s_ != KVB_OK && kvb_last_error()[0] == '\0') {                  \
      fprintf(stderr, "%s:%d: %s: empty kvb_last_error()\n", __FILE__, __LINE__,    \
              #expr);                                                               \
      kvbt_case_failures++;                                                         \
    }                                                                               \
  } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, KVB_OK)

#define RUN_TEST(fn)                                                                \
  do {                                                                              \
    kvbt_case_failures = 0;                                                         \
    fn();                                                                           \
    if (kvbt_case_failures) {                                                       \
      kvbt_failed++;                                                                \
      printf("FAIL %s\n", #fn);                                                     \
    } else {                                                                        \
      kvbt_passed++;                                                                \
      printf("ok   %s\n", #fn);                                                     \
    }                                                                               \
    fflush(stdout);                                                                 \
  } while (0)

/* A test that cannot run here (no GPU, no tool) says so visibly and counts as neither. */
#define SKIP_TEST(fn, why) printf("SKIP %s: %s\n", #fn, why)

#define TEST_SUMMARY()                                                              \
  do {                                                                              \
    printf("%d passed, %d failed\n", kvbt_passed, kvbt_failed);                     \
    return kvbt_failed != 0;                                                        \
  } while (0)

#endif
