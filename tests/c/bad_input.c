/* Manager-side bad input that must be refused (not accepted, wrapped or crashed on), and messages that
 * say what is wrong: huge num_non_cacheable_tokens, duplicate ids in a batch export, NULL tokens to
 * kvb_hash_tokens, extra-key block indices no sequence can reach, swap out without a host tier, and
 * counts that agree with their nouns ("1 block"). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvbt_common.h"

static void test_huge_non_cacheable_count(void) {
  static const int64_t nc[2] = {7, 8};
  const size_t counts[3] = {(size_t)1 << 61, SIZE_MAX, ((size_t)1 << 24) + 1};
  int i;
  for (i = 0; i < 3; ++i) {
    kvb_config cfg;
    kvb_manager* m = (kvb_manager*)&cfg; /* must be cleared on failure */
    kvb_config_init(&cfg);
    cfg.num_blocks = 8;
    cfg.non_cacheable_tokens = nc;
    cfg.num_non_cacheable_tokens = counts[i];
    EXPECT_FAIL(NULL, NULL, 0, kvb_manager_create(&cfg, &m), KVB_ERR_INVALID_ARGUMENT, "num_non_cacheable_tokens");
    CHECK(m == NULL);
  }
}

static void test_batch_export_duplicate_ids(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t t[8];
  int64_t ids[3] = {1, 2, 1};
  int32_t tables[3 * 4], lens[3], qs[4];
  int64_t slots[32];
  kvb_batch b;
  size_t i;
  kvbt_iota(t, 8, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 5, NULL));
  CHECK_OK(kvb_seq_allocate(m, 2, t, 6, NULL));
  memset(tables, 0x5a, sizeof tables);
  memset(lens, 0x5a, sizeof lens);
  memset(qs, 0x5a, sizeof qs);
  memset(slots, 0x5a, sizeof slots);
  b = kvbt_batch(4, tables, lens, qs, slots, 32);
  EXPECT_FAIL(m, ids, 2, kvb_batch_export(m, ids, 3, &b), KVB_ERR_INVALID_ARGUMENT, "seq_ids[2] = 1 repeats seq_ids[0]");
  for (i = 0; i < 3 * 4; ++i) CHECK(tables[i] == 0x5a5a5a5a);
  for (i = 0; i < 3; ++i) CHECK(lens[i] == 0x5a5a5a5a);
  for (i = 0; i < 32; ++i) CHECK(slots[i] == 0x5a5a5a5a5a5a5a5aLL);
  /* without the repeat it works, and the same ids may be exported again in the next call */
  CHECK_OK(kvb_batch_export(m, ids, 2, &b));
  CHECK(b.num_slots == 11);
  CHECK_OK(kvb_batch_export(m, ids, 2, &b));
  kvb_manager_destroy(m);
}

static void test_hash_tokens_null(void) {
  uint64_t p = 0x0123456789abcdefULL;
  kvbt_prime_last_error();
  CHECK(kvb_hash_tokens(&p, NULL, 5) == 0);
  CHECK_MSG("tokens is NULL");
  CHECK(kvb_hash_tokens(NULL, NULL, 5) == 0);
  CHECK(kvb_hash_tokens(NULL, NULL, 0) == 0xef46db3751d8e999ULL); /* zero tokens: the empty input's hash */
  CHECK(p == 0x0123456789abcdefULL);
}

static void test_extra_key_index_bounds(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t t[8];
  int64_t ids[1] = {1};
  uint32_t blocks[2] = {0, UINT32_MAX};
  uint64_t keys[2] = {5, 6};
  kvb_seq_options o;
  size_t cached = 0;
  kvbt_iota(t, 8, 1);
  kvb_seq_options_init(&o);
  o.extra_key_blocks = blocks;
  o.extra_keys = keys;
  o.num_extra_keys = 2;
  EXPECT_FAIL(m, ids, 1, kvb_seq_allocate_ex(m, 1, t, 8, &o, NULL), KVB_ERR_INVALID_ARGUMENT,
              "extra_key_blocks[1] = 4294967295");
  EXPECT_FAIL(m, ids, 1, kvb_seq_can_allocate_ex(m, t, 8, &o, &cached), KVB_ERR_INVALID_ARGUMENT, "no sequence has");
  blocks[1] = 1u << 30;
  EXPECT_FAIL(m, ids, 1, kvb_seq_allocate_ex(m, 1, t, 8, &o, NULL), KVB_ERR_INVALID_ARGUMENT, "1073741824");
  blocks[1] = (1u << 30) - 1; /* a future block of a very long sequence: allowed */
  CHECK_OK(kvb_seq_allocate_ex(m, 1, t, 8, &o, NULL));
  EXPECT_FAIL(m, ids, 1, kvb_seq_set_extra_key(m, 1, UINT32_MAX, 3), KVB_ERR_INVALID_ARGUMENT, "block index 4294967295");
  CHECK_OK(kvb_seq_set_extra_key(m, 1, 7, 3));
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_swap_out_without_host_tier(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t t[8];
  int64_t ids[1] = {1};
  int32_t pairs[8];
  size_t n = 0;
  kvbt_iota(t, 8, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 8, NULL));
  EXPECT_FAIL(m, ids, 1, kvb_seq_swap_out(m, 1, pairs, 4, &n), KVB_ERR_OUT_OF_BLOCKS, "there is no host tier");
  kvb_manager_destroy(m);
}

/* "1 block", "1 token", "1 is free": never "1 blocks". */
static void test_singular_counts(void) {
  kvb_manager* m = kvbt_make(4, 2);
  int64_t t[8];
  int64_t ids[2] = {1, 2};
  kvbt_iota(t, 8, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 4, NULL)); /* 1 block; 1 is free */
  EXPECT_FAIL(m, ids, 2, kvb_seq_allocate(m, 2, t + 4, 8, NULL), KVB_ERR_OUT_OF_BLOCKS,
              "needs 2 free blocks (+0 watermark), 1 is free");
  CHECK_OK(kvb_seq_allocate(m, 2, t + 4, 4, NULL)); /* 0 free */
  EXPECT_FAIL(m, ids, 2, kvb_seq_append(m, 1, t, 1), KVB_ERR_OUT_OF_BLOCKS, "append of 1 token needs 1 free block, 0 are free");
  EXPECT_FAIL(m, ids, 2, kvb_seq_commit(m, 1, 5), KVB_ERR_INVALID_ARGUMENT, "commit of 5 tokens exceeds 4 uncomputed tokens");
  CHECK_OK(kvb_seq_commit(m, 1, 3));
  EXPECT_FAIL(m, ids, 2, kvb_seq_commit(m, 1, 2), KVB_ERR_INVALID_ARGUMENT, "exceeds 1 uncomputed token");
  EXPECT_FAIL(m, ids, 2, kvb_seq_fork_at(m, 1, 3, 4), KVB_ERR_BAD_STATE, "fork of 4 tokens but only 3 are committed");
  CHECK_OK(kvb_seq_free(m, 2));
  EXPECT_FAIL(m, ids, 2, kvb_reset_prefix_cache(m), KVB_ERR_BAD_STATE, "1 block is in use");
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_huge_non_cacheable_count);
  RUN_TEST(test_batch_export_duplicate_ids);
  RUN_TEST(test_hash_tokens_null);
  RUN_TEST(test_extra_key_index_bounds);
  RUN_TEST(test_swap_out_without_host_tier);
  RUN_TEST(test_singular_counts);
  TEST_SUMMARY();
}
