/* Sliding window: blocks are released only when no query of any appended-but-
 * uncomputed token can attend to them (the window is measured from the first query still to come, at
 * position num_computed), so a rollback of uncommitted tokens always works and a decode or chunk step
 * never meets -1 inside its window; window 1 with a released previous block still rolls back and forks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvbt_common.h"

static kvb_status alloc_window(kvb_manager* m, int64_t id, const int64_t* t, size_t n, uint32_t window, uint32_t sink) {
  kvb_seq_options o;
  kvb_seq_options_init(&o);
  o.window_tokens = window;
  o.sink_tokens = sink;
  return kvb_seq_allocate_ex(m, id, t, n, &o, NULL);
}

/* Every position that a query of positions [computed, tokens) attends lies in a held block. */
static int window_held(kvb_manager* m, int64_t id, uint32_t bs, uint32_t window, uint32_t sink) {
  int32_t tab[KVBT_MAX_BLOCKS];
  kvb_seq_info info = kvbt_info(m, id);
  uint64_t p, q;
  if (kvbt_table(m, id, tab) < 0) return 0;
  /* ... and the query of the next appended token, at num_computed, when every token is computed. */
  uint64_t end = info.num_tokens > info.num_computed ? info.num_tokens : info.num_computed + 1;
  for (p = info.num_computed; p < end; ++p)
    for (q = 0; q <= p && q < info.num_tokens; ++q) {
      int attended = q < sink || q + window > p;
      if (attended && tab[q / bs] < 0) {
        fprintf(stderr, "  seq %lld: query %llu attends token %llu, whose block %llu was released\n", (long long)id,
                (unsigned long long)p, (unsigned long long)q, (unsigned long long)(q / bs));
        return 0;
      }
    }
  return 1;
}

/* The scenario of the issue: block size 4, window 8. */
static void test_issue_scenario(void) {
  kvb_manager* m = kvbt_make(4, 32);
  int64_t t[64];
  int32_t tab[KVBT_MAX_BLOCKS];
  int i;
  kvbt_iota(t, 64, 100);
  CHECK_OK(alloc_window(m, 1, t, 40, 8, 0));
  CHECK_OK(kvb_seq_commit(m, 1, 40));
  CHECK(kvbt_table(m, 1, tab) == 10);
  for (i = 0; i < 8; ++i) CHECK(tab[i] == -1);
  CHECK(tab[8] >= 0 && tab[9] >= 0); /* tokens 32..39: the next query (40) attends 33..40 */
  /* A rejected draft of 4 tokens: nothing released at append, so the rollback leaves the table as it was. */
  CHECK_OK(kvb_seq_append(m, 1, t + 40, 4));
  CHECK(kvbt_table(m, 1, tab) == 11 && tab[8] >= 0);
  CHECK(window_held(m, 1, 4, 8, 0));
  CHECK_OK(kvb_seq_rollback(m, 1, 4));
  CHECK(kvbt_table(m, 1, tab) == 10 && tab[8] >= 0 && tab[9] >= 0);
  /* A rejected draft of 8 tokens can be undone too. */
  CHECK_OK(kvb_seq_append(m, 1, t + 40, 8));
  CHECK(window_held(m, 1, 4, 8, 0));
  CHECK_OK(kvb_seq_rollback(m, 1, 8));
  CHECK_INV(m);
  /* An 8-token chunk: its first query (40) needs 33..40, so tokens 32..39 stay until it is committed. */
  CHECK_OK(kvb_seq_append(m, 1, t + 40, 8));
  CHECK(kvbt_table(m, 1, tab) == 12 && tab[8] >= 0 && tab[9] >= 0);
  CHECK(window_held(m, 1, 4, 8, 0));
  CHECK_OK(kvb_seq_commit(m, 1, 8)); /* next query 48 attends 41..48: blocks 8, 9 go */
  CHECK(kvbt_table(m, 1, tab) == 12 && tab[8] == -1 && tab[9] == -1 && tab[10] >= 0 && tab[11] >= 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Window 1, block size 4, 12 tokens committed: table [-1, -1, b]. Rolling back one token and forking at
   11 touch only block 2, which is held; block 2 is hashed again from block 1's link, kept at release. */
static void test_window_one(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t t[16];
  int32_t tab[KVBT_MAX_BLOCKS], ctab[KVBT_MAX_BLOCKS];
  uint64_t h0, h1, h2, got = 0;
  int64_t last[4];
  kvbt_iota(t, 16, 500);
  CHECK_OK(alloc_window(m, 1, t, 12, 1, 0));
  CHECK_OK(kvb_seq_commit(m, 1, 12));
  CHECK(kvbt_table(m, 1, tab) == 3 && tab[0] == -1 && tab[1] == -1 && tab[2] >= 0);
  CHECK_OK(kvb_seq_fork_at(m, 1, 2, 11));
  CHECK(kvbt_table(m, 2, ctab) == 3 && ctab[0] == -1 && ctab[1] == -1 && ctab[2] == tab[2]);
  CHECK(kvbt_info(m, 2).num_tokens == 11);
  CHECK_OK(kvb_seq_rollback(m, 1, 1));
  CHECK(kvbt_info(m, 1).num_tokens == 11);
  CHECK_INV(m);
  /* Both rewrite token 11 and commit it: block 2 is full again and carries the chain hash. */
  CHECK_OK(kvb_seq_append(m, 1, t + 15, 1));
  CHECK_OK(kvb_seq_commit(m, 1, 1));
  CHECK_OK(kvb_seq_append(m, 2, t + 11, 1));
  CHECK_OK(kvb_seq_commit(m, 2, 1));
  h0 = kvb_hash_tokens(NULL, t, 4);
  h1 = kvb_hash_tokens(&h0, t + 4, 4);
  memcpy(last, t + 8, 3 * sizeof(int64_t));
  last[3] = t[15];
  h2 = kvb_hash_tokens(&h1, last, 4);
  CHECK(kvbt_table(m, 1, tab) == 3 && tab[2] >= 0);
  CHECK_OK(kvb_block_hash(m, tab[2], &got));
  CHECK(got == h2);
  CHECK(kvbt_table(m, 2, ctab) == 3 && ctab[2] >= 0 && ctab[2] != tab[2]);
  CHECK_OK(kvb_block_hash(m, ctab[2], &got));
  CHECK(got == kvb_hash_tokens(&h1, t + 8, 4));
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* A rollback into committed tokens, or a fork_at, is refused where the result's next query (at
   min(num_computed, new length)) would attend a block the window released; allowed where it would not. */
static void test_committed_rollback_and_fork(void) {
  kvb_manager* m = kvbt_make(4, 32);
  int64_t t[32];
  int32_t tab[KVBT_MAX_BLOCKS];
  kvbt_iota(t, 32, 900);
  CHECK_OK(alloc_window(m, 1, t, 19, 7, 0));
  CHECK_OK(kvb_seq_commit(m, 1, 19));
  CHECK(kvbt_table(m, 1, tab) == 5 && tab[0] == -1 && tab[1] == -1 && tab[2] == -1 && tab[3] >= 0);
  CHECK_STATUS(kvb_seq_rollback(m, 1, 3), KVB_ERR_BAD_STATE); /* the query at 16 attends [10, 16]: block 2 */
  CHECK_STATUS(kvb_seq_rollback(m, 1, 2), KVB_ERR_BAD_STATE); /* the query at 17 attends [11, 17]: block 2 */
  CHECK_STATUS(kvb_seq_fork_at(m, 1, 2, 16), KVB_ERR_BAD_STATE);
  CHECK_STATUS(kvb_seq_fork_at(m, 1, 2, 17), KVB_ERR_BAD_STATE);
  CHECK(kvbt_info(m, 1).num_tokens == 19);
  CHECK_OK(kvb_seq_fork_at(m, 1, 2, 18)); /* [12, 18]: blocks 3 and 4 */
  CHECK(window_held(m, 2, 4, 7, 0));
  CHECK_OK(kvb_seq_rollback(m, 1, 1));
  CHECK(window_held(m, 1, 4, 7, 0));
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Random appends (drafts and chunks), commits and rollbacks of uncommitted tokens over random windows,
   sinks and block sizes: every rollback of uncommitted tokens succeeds, and every uncomputed token's
   window is held. */
static uint64_t rng_state = 12345;
static uint32_t below(uint32_t n) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)((rng_state >> 33) % n);
}

static void test_random_windows(void) {
  const char* quick = getenv("KVB_TEST_QUICK");
  int rounds = quick ? 40 : 300, r, step;
  int64_t t[256];
  kvbt_iota(t, 256, 7);
  for (r = 0; r < rounds && kvbt_case_failures == 0; ++r) {
    uint32_t bs = 1 + below(4), window = 1 + below(10), sink = below(3) ? 0 : below(6);
    kvb_manager* m = kvbt_make(bs, 256);
    uint64_t ntok = 1 + below(12), computed;
    CHECK_OK(alloc_window(m, 1, t, ntok, window, sink));
    CHECK_OK(kvb_seq_commit(m, 1, ntok));
    for (step = 0; step < 30 && kvbt_case_failures == 0; ++step) {
      kvb_seq_info info = kvbt_info(m, 1);
      uint32_t op = below(3);
      computed = info.num_computed;
      if (op == 0 && info.num_tokens < 50) {
        CHECK_OK(kvb_seq_append(m, 1, t, 1 + below(9)));
      } else if (op == 1 && info.num_tokens > computed) {
        CHECK_OK(kvb_seq_commit(m, 1, 1 + below((uint32_t)(info.num_tokens - computed))));
      } else if (info.num_tokens > computed && below(4)) {
        uint64_t n = 1 + below((uint32_t)(info.num_tokens - computed));
        if (n >= info.num_tokens) n = info.num_tokens - 1;
        if (n > 0) CHECK_OK(kvb_seq_rollback(m, 1, n));
      } else if (info.num_tokens > 1) {
        /* Into committed tokens (or a fork_at): refused exactly where a needed block was released. */
        uint64_t len = 1 + below((uint32_t)(info.num_tokens - 1)), c = len < computed ? len : computed;
        uint64_t first = c + 1 > window ? (c + 1 - window) / bs : 0, nb = (len + bs - 1) / bs, i;
        int32_t tab[KVBT_MAX_BLOCKS];
        int needs_released = 0, fork = below(2) && len <= computed;
        kvbt_table(m, 1, tab);
        for (i = first < nb - 1 ? first : nb - 1; i < nb; ++i) needs_released |= tab[i] < 0;
        if (fork) {
          CHECK_STATUS(kvb_seq_fork_at(m, 1, 2, len), needs_released ? KVB_ERR_BAD_STATE : KVB_OK);
          if (!needs_released) {
            CHECK(window_held(m, 2, bs, window, sink));
            CHECK_OK(kvb_seq_free(m, 2));
          }
        } else {
          CHECK_STATUS(kvb_seq_rollback(m, 1, info.num_tokens - len), needs_released ? KVB_ERR_BAD_STATE : KVB_OK);
        }
      }
      CHECK(window_held(m, 1, bs, window, sink));
      CHECK_INV(m);
    }
    if (kvbt_case_failures) fprintf(stderr, "  round %d: bs %u window %u sink %u\n", r, bs, window, sink);
    kvb_manager_destroy(m);
  }
}

int main(void) {
  RUN_TEST(test_issue_scenario);
  RUN_TEST(test_window_one);
  RUN_TEST(test_committed_rollback_and_fork);
  RUN_TEST(test_random_windows);
  TEST_SUMMARY();
}
