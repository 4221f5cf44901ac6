/* Whole-history matching (docs/ARCHITECTURE.md, "Prefix index and whole-history matching"): a
 * block matches only a block whose entire history is identical (salt or none, every earlier
 * block's tokens and extra key, its own tokens and extra key),
 * in both index modes, whatever values the caller picks. The public xxh64 chain cannot tell
 * `salt ‖ tokens` from `tokens ‖ extra`; the index key must.
 * Events describe the set of public hashes held by the index: one STORED when a hash enters it, one
 * REMOVED when the last block carrying that hash leaves it. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvbt_common.h"

#define BS 2

static kvb_status alloc_opts(kvb_manager* m, int64_t id, const int64_t* t, size_t n, int salted, uint64_t salt,
                             int extra_on_block0, uint64_t extra, size_t* cached) {
  kvb_seq_options o;
  uint32_t blk = 0;
  kvb_seq_options_init(&o);
  o.has_cache_salt = (uint32_t)salted;
  o.cache_salt = salt;
  if (extra_on_block0) {
    o.extra_key_blocks = &blk;
    o.extra_keys = &extra;
    o.num_extra_keys = 1;
  }
  return kvb_seq_allocate_ex(m, id, t, n, &o, cached);
}

/* The original collision case: seq 3 (salt 5) must not reach seq 2's (no salt, extra key 7) second block. */
static void repro_in(uint32_t flags) {
  kvb_manager* m = kvbt_make_ex(BS, 32, 0, 0.0f, flags, 0);
  const int64_t s1[5] = {100, 7, 300, 301, 9};
  const int64_t s2[5] = {5, 100, 200, 201, 9};
  const int64_t s3[5] = {100, 7, 200, 201, 9};
  int32_t t2[KVBT_MAX_BLOCKS], t3[KVBT_MAX_BLOCKS];
  size_t cached = 99;
  CHECK_OK(alloc_opts(m, 1, s1, 5, 1, 5, 0, 0, &cached));
  CHECK_OK(kvb_seq_commit(m, 1, 5));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(alloc_opts(m, 2, s2, 5, 0, 0, 1, 7, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_commit(m, 2, 5));
  CHECK(kvbt_table(m, 2, t2) == 3);
  CHECK_OK(kvb_seq_free(m, 2));
  cached = 99;
  CHECK_OK(kvb_seq_can_allocate_ex(m, s3, 5, NULL, &cached)); /* sanity: no salt, no extra: nothing */
  CHECK(cached == 0);
  CHECK_OK(alloc_opts(m, 3, s3, 5, 1, 5, 0, 0, &cached));
  CHECK(cached == 2); /* seq 1's first block only */
  CHECK(kvbt_table(m, 3, t3) == 3);
  CHECK(t3[1] != t2[1]);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_salt_vs_extra_key_children_plain(void) { repro_in(0); }
static void test_salt_vs_extra_key_children_keyed(void) { repro_in(KVB_CONFIG_KEYED_INDEX); }

/* The same ambiguity one level down: a first block with an extra key vs. a first block without one whose
   tokens are one longer (block size 3: [a b] + extra c vs. [a b c]) cannot happen at a fixed block size,
   but a parent link vs. a salt can: salt S with tokens T against a block whose parent hash is S. */
static void parent_vs_salt_in(uint32_t flags) {
  kvb_manager* m = kvbt_make_ex(BS, 32, 0, 0.0f, flags, 0);
  int64_t p[5] = {11, 12, 13, 14, 15};
  int64_t q[3];
  int32_t tp[KVBT_MAX_BLOCKS];
  uint64_t h0 = 0;
  size_t cached = 99;
  CHECK_OK(kvb_seq_allocate(m, 1, p, 5, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 5));
  CHECK(kvbt_table(m, 1, tp) == 3);
  CHECK_OK(kvb_block_hash(m, tp[0], &h0));
  /* A salted prompt whose salt is block 0's hash and whose first block is p's block 1: the public hash of
     its first block equals that of p's block 1. */
  q[0] = 13;
  q[1] = 14;
  q[2] = 99;
  CHECK_OK(alloc_opts(m, 2, q, 3, 1, h0, 0, 0, &cached));
  CHECK(cached == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_parent_vs_salt_plain(void) { parent_vs_salt_in(0); }
static void test_parent_vs_salt_keyed(void) { parent_vs_salt_in(KVB_CONFIG_KEYED_INDEX); }

/* Two cached blocks with one public hash and different histories: one STORED, and one REMOVED only when
   the second of them leaves the index. */
static void test_events_one_stored_per_public_hash(void) {
  kvb_manager* m = kvbt_make_ex(BS, 6, 0, 0.0f, KVB_CONFIG_EVENTS, 0);
  const int64_t s1[3] = {100, 7, 9};
  const int64_t s2[3] = {5, 100, 9};
  int64_t big[12];
  kvb_event ev[32];
  int64_t et[32 * BS];
  size_t n = 0, i, stored_h0 = 0, removed_h0 = 0;
  uint64_t h0 = 0;
  int32_t t1[KVBT_MAX_BLOCKS];
  CHECK_OK(alloc_opts(m, 1, s1, 3, 1, 5, 0, 0, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 3));
  CHECK(kvbt_table(m, 1, t1) == 2);
  CHECK_OK(kvb_block_hash(m, t1[0], &h0));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(alloc_opts(m, 2, s2, 3, 0, 0, 1, 7, NULL));
  CHECK_OK(kvb_seq_commit(m, 2, 3));
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_drain_events(m, ev, 32, et, 32 * BS, &n, NULL));
  for (i = 0; i < n; ++i) stored_h0 += ev[i].type == KVB_EVENT_BLOCK_STORED && ev[i].block_hash == h0;
  CHECK(stored_h0 == 1);
  /* Both blocks are cached-free; the first to be evicted leaves the hash in the index. */
  kvbt_iota(big, 12, 1000);
  /* Queue: 4 5 1 0 3 2 (frees go last block first): four blocks evict seq 1's block 0, not seq 2's. */
  CHECK_OK(kvb_seq_allocate(m, 3, big, 8, NULL));
  CHECK_OK(kvb_drain_events(m, ev, 32, et, 32 * BS, &n, NULL));
  for (i = 0; i < n; ++i) removed_h0 += ev[i].type == KVB_EVENT_BLOCK_REMOVED && ev[i].block_hash == h0;
  CHECK(removed_h0 == 0);
  CHECK_OK(kvb_seq_free(m, 3));
  CHECK_OK(kvb_seq_allocate(m, 4, big, 12, NULL)); /* takes every block */
  CHECK_OK(kvb_drain_events(m, ev, 32, et, 32 * BS, &n, NULL));
  for (i = 0; i < n; ++i) removed_h0 += ev[i].type == KVB_EVENT_BLOCK_REMOVED && ev[i].block_hash == h0;
  CHECK(removed_h0 == 1);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_salt_vs_extra_key_children_plain);
  RUN_TEST(test_salt_vs_extra_key_children_keyed);
  RUN_TEST(test_parent_vs_salt_plain);
  RUN_TEST(test_parent_vs_salt_keyed);
  RUN_TEST(test_events_one_stored_per_public_hash);
  TEST_SUMMARY();
}
