/* Sink tokens near 2^32: the sink-block count ceil(sink / block_size) was computed in
 * 32 bits, so sink 2^32 - 15 with block size 16 wrapped to 0 sink blocks; the window then released
 * blocks that the sinks cover and the attention kernel refused the table (-1 where it reads). Checked
 * for allocate, set_window, rollback and fork_at, with and without KV cache groups, and that the
 * kernel accepts the resulting table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvbt_common.h"

enum { BS = 16, BLOCKS = 48, WINDOW = 16, PROMPT = 200, BACK = 100 };
static const uint32_t kSinks[] = {0xFFFFFFF1u /* + 15 = 2^32 */, 0xFFFFFFFFu, 0xFFFFFFF0u /* no wrap */};

/* Every block of the table is held: a sink this large covers every token. */
static int all_held(const int32_t* tab, long n) {
  long i;
  if (n <= 0) return 0;
  for (i = 0; i < n; ++i)
    if (tab[i] < 0) {
      fprintf(stderr, "  block %ld was released though the sinks cover it\n", i);
      return 0;
    }
  return 1;
}

/* The CPU decode kernel reads the table as it is (window and sink as the manager's): it must accept it. */
static kvb_status attend(const int32_t* tab, long nblocks, uint32_t len, uint32_t window, uint32_t sink) {
  static float k[2 * BLOCKS * BS * 64], v[2 * BLOCKS * BS * 64], q[64], out[64];
  int32_t table[KVBT_MAX_BLOCKS];
  int32_t seq_len = (int32_t)len;
  kvb_cache_desc c;
  kvb_attention_args a;
  kvb_status s;
  long i;
  for (i = 0; i < KVBT_MAX_BLOCKS; ++i) table[i] = i < nblocks ? tab[i] : -1;
  c = kvbt_cache(KVB_DTYPE_FP32, k, v, 2 * BLOCKS, BS, 1, 64);
  kvb_attention_args_init(&a);
  KVBT_PAGED_ARGS(a, 1, 1, KVBT_MAX_BLOCKS, q, out, table, &seq_len);
  a.window_tokens = window;
  a.sink_tokens = sink;
  if (kvb_paged_attention_workspace_size(&c, &a, &a.workspace_size) != KVB_OK) return KVB_ERR_INTERNAL;
  a.workspace = malloc(a.workspace_size ? a.workspace_size : 1);
  s = kvb_paged_attention(&c, &a, NULL);
  free(a.workspace);
  return s;
}

static void test_plain_allocate_set_window_rollback(void) {
  size_t s;
  for (s = 0; s < sizeof kSinks / sizeof kSinks[0]; ++s) {
    const uint32_t sink = kSinks[s];
    kvb_manager* m = kvbt_make(BS, BLOCKS);
    int64_t t[PROMPT + 40 + BACK];
    int32_t tab[KVBT_MAX_BLOCKS];
    kvb_seq_options o;
    long n;
    kvbt_iota(t, PROMPT + 40 + BACK, 1000);
    kvb_seq_options_init(&o);
    o.window_tokens = WINDOW;
    o.sink_tokens = sink;
    CHECK_OK(kvb_seq_allocate_ex(m, 1, t, PROMPT, &o, NULL));
    CHECK_OK(kvb_seq_commit(m, 1, PROMPT));
    n = kvbt_table(m, 1, tab);
    CHECK(all_held(tab, n));
    CHECK_OK(attend(tab, n, PROMPT, WINDOW, sink));
    /* A draft appended, committed, rolled back: the rescan starts from the sink boundary. */
    CHECK_OK(kvb_seq_append(m, 1, t + PROMPT, 40));
    CHECK_OK(kvb_seq_commit(m, 1, 40));
    CHECK_OK(kvb_seq_rollback(m, 1, BACK));
    CHECK_OK(kvb_seq_append(m, 1, t + PROMPT + 40, BACK));
    CHECK_OK(kvb_seq_commit(m, 1, BACK));
    n = kvbt_table(m, 1, tab);
    CHECK(all_held(tab, n));
    CHECK_OK(attend(tab, n, PROMPT + 40, WINDOW, sink));
    /* set_window on a sequence that had no window. */
    CHECK_OK(kvb_seq_allocate(m, 2, t + 1, PROMPT, NULL));
    CHECK_OK(kvb_seq_commit(m, 2, PROMPT));
    CHECK_OK(kvb_seq_set_window(m, 2, WINDOW, sink));
    n = kvbt_table(m, 2, tab);
    CHECK(all_held(tab, n));
    CHECK_OK(attend(tab, n, PROMPT, WINDOW, sink));
    /* fork_at keeps the child's sinks. */
    CHECK_OK(kvb_seq_fork_at(m, 2, 3, PROMPT - BACK));
    CHECK_OK(kvb_seq_append(m, 3, t, BACK));
    CHECK_OK(kvb_seq_commit(m, 3, BACK));
    n = kvbt_table(m, 3, tab);
    CHECK(all_held(tab, n));
    CHECK_OK(attend(tab, n, PROMPT, WINDOW, sink));
    CHECK_INV(m);
    kvb_manager_destroy(m);
  }
}

static void test_groups_allocate_rollback_fork(void) {
  size_t s;
  for (s = 0; s < sizeof kSinks / sizeof kSinks[0]; ++s) {
    const uint32_t sink = kSinks[s];
    kvb_manager* m = kvbt_make_full_window(BS, BLOCKS * 2, 0, 0, WINDOW, sink);
    int64_t t[PROMPT + 40 + BACK];
    int32_t tab[KVBT_MAX_BLOCKS];
    size_t len = 0;
    kvbt_iota(t, PROMPT + 40 + BACK, 5000);
    CHECK_OK(kvb_seq_allocate(m, 1, t, PROMPT, NULL));
    CHECK_OK(kvb_seq_commit(m, 1, PROMPT));
    CHECK_OK(kvb_seq_block_table_group(m, 1, 1, tab, KVBT_MAX_BLOCKS, &len));
    CHECK(all_held(tab, (long)len));
    CHECK_OK(attend(tab, (long)len, PROMPT, WINDOW, sink));
    CHECK_OK(kvb_seq_append(m, 1, t + PROMPT, 40));
    CHECK_OK(kvb_seq_commit(m, 1, 40));
    CHECK_OK(kvb_seq_rollback(m, 1, BACK));
    CHECK_OK(kvb_seq_append(m, 1, t + PROMPT + 40, BACK));
    CHECK_OK(kvb_seq_commit(m, 1, BACK));
    CHECK_OK(kvb_seq_block_table_group(m, 1, 1, tab, KVBT_MAX_BLOCKS, &len));
    CHECK(all_held(tab, (long)len));
    CHECK_OK(attend(tab, (long)len, PROMPT + 40, WINDOW, sink));
    CHECK_OK(kvb_seq_fork_at(m, 1, 2, PROMPT - BACK));
    CHECK_OK(kvb_seq_append(m, 2, t, BACK));
    CHECK_OK(kvb_seq_commit(m, 2, BACK));
    CHECK_OK(kvb_seq_block_table_group(m, 2, 1, tab, KVBT_MAX_BLOCKS, &len));
    CHECK(all_held(tab, (long)len));
    CHECK_OK(attend(tab, (long)len, PROMPT, WINDOW, sink));
    CHECK_INV(m);
    kvb_manager_destroy(m);
  }
}

int main(void) {
  RUN_TEST(test_plain_allocate_set_window_rollback);
  RUN_TEST(test_groups_allocate_rollback_fork);
  TEST_SUMMARY();
}
