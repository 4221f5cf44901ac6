/* KV cache groups: eviction order (docs/ARCHITECTURE.md, "Eviction order with groups"). A hit
 * needs every group, so a window group's cached blocks must not be evicted long before the full
 * group's blocks of the same prompt. Each test builds a pool whose free queue order is known (block
 * size 4, groups {full, window 4}: the window keeps one block), puts pressure on it with unrelated
 * prompts, and checks which prefix still hits and how many cached blocks were evicted. Before the
 * eviction order was defined, the window's released blocks were simply the oldest in the queue: the
 * first two tests then found no hit at all (0 cached tokens for every prefix). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvbt_common.h"

static kvb_manager* make_groups(uint32_t nblocks, uint32_t window, uint32_t sink) {
  return kvbt_make_full_window(4, nblocks, 0, 0, window, sink);
}

/* Seq id computes a 24-token prompt (6 blocks per group) in 6 chunks of 4, like chunked prefill: the
 * window group releases blocks 0..4 (all cached; block 0 is kept if it holds sinks) on the way and
 * keeps block 5. */
static void prefill_in_chunks(kvb_manager* m, int64_t id, const int64_t* prompt) {
  int i;
  int32_t tab[8];
  size_t len = 0;
  CHECK_OK(kvb_seq_allocate(m, id, prompt, 24, NULL));
  for (i = 0; i < 6; ++i) CHECK_OK(kvb_seq_commit(m, id, 4));
  CHECK_OK(kvb_seq_block_table_group(m, id, 1, tab, 8, &len));
  CHECK(len == 6 && tab[1] == -1 && tab[4] == -1 && tab[5] >= 0);
}

/* Cached tokens a prompt sharing the first `shared` tokens of `prompt` (then new tokens) would get. */
static size_t hit_of_prefix(kvb_manager* m, const int64_t* prompt, size_t shared) {
  int64_t q[32];
  size_t cached = 999;
  kvb_status st;
  memcpy(q, prompt, shared * sizeof *q);
  kvbt_iota(q + shared, 5, 90000);
  st = kvb_seq_can_allocate(m, q, shared + 5, &cached); /* the count is written either way */
  CHECK(st == KVB_OK || st == KVB_ERR_OUT_OF_BLOCKS);
  return cached;
}

/* The first two tests' pool (32 blocks, window 4) and prompts: a (seq 1, computed in chunks), b (24
 * tokens) and c (nc tokens of pressure). */
static kvb_manager* running_seq_pool(int64_t* a, int64_t* b, int64_t* c, size_t nc) {
  kvb_manager* m = make_groups(32, 4, 0);
  kvbt_iota(a, 24, 1000);
  kvbt_iota(b, 24, 2000);
  kvbt_iota(c, nc, 3000);
  prefill_in_chunks(m, 1, a);
  return m;
}

/* While seq 1 still runs, its window group's released blocks outlast the cached blocks of sequences
 * that finished since: seq 1's full group still holds the prefix, so its window blocks keep the hit
 * valid for a prompt sharing the first 12 tokens (as with every layer full attention, where those
 * blocks would still be held). */
static void test_running_sequence_keeps_window_blocks(void) {
  int64_t a[24], b[24], c[32];
  kvb_manager* m = running_seq_pool(a, b, c, 32); /* 12 blocks taken, 5 let go of by the window */
  CHECK(kvbt_free(m) == 25);
  /* Seq 2 finishes after them: 2 x 5 blocks, computed and cached, freed. */
  CHECK_OK(kvb_seq_allocate(m, 2, b, 20, NULL));
  CHECK_OK(kvb_seq_commit(m, 2, 20));
  CHECK_OK(kvb_seq_free(m, 2));
  /* 16 blocks for an unrelated prompt: the 10 never used, then 6 of seq 2's (not seq 1's window). */
  CHECK_OK(kvb_seq_allocate(m, 3, c, 32, NULL));
  CHECK(kvbt_stats(m).evictions == 6);
  CHECK(hit_of_prefix(m, a, 12) == 12); /* full blocks 0..2 held, window block 2 still cached */
  CHECK(hit_of_prefix(m, a, 20) == 20);
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

/* When seq 1 ends, every group's blocks of its prompt age as one: last block first, every group at
 * each block. Pressure then cuts the cached prefix from its end in both groups at once. */
static void test_freed_sequence_ages_as_one(void) {
  int64_t a[24], b[24], c[48];
  kvb_manager* m = running_seq_pool(a, b, c, 48);
  CHECK_OK(kvb_seq_allocate(m, 2, b, 20, NULL)); /* 10 blocks, never computed: nothing cached */
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_check_invariants(m));
  /* 24 blocks: 10 never used, seq 2's 10, then seq 1's blocks 5 and 4 of both groups. */
  CHECK_OK(kvb_seq_allocate(m, 3, c, 48, NULL));
  CHECK(kvbt_stats(m).evictions == 4);
  CHECK(hit_of_prefix(m, a, 12) == 12); /* blocks 0..3 of both groups are left */
  CHECK(hit_of_prefix(m, a, 16) == 16);
  CHECK(hit_of_prefix(m, a, 20) == 16); /* block 4 is gone in both groups: the hit stops before it */
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

/* The blocks a window group lets go of stay free blocks: with nothing else free they are taken (the
 * pool serves as many sequences as before), oldest first. */
static void test_window_blocks_stay_free(void) {
  kvb_manager* m = make_groups(16, 4, 0);
  int64_t a[24], c[16];
  kvbt_iota(a, 24, 1000);
  kvbt_iota(c, 16, 3000);
  prefill_in_chunks(m, 1, a); /* 12 taken, 4 never used + 5 let go of = 9 free */
  CHECK(kvbt_free(m) == 9);
  CHECK_OK(kvb_seq_allocate(m, 2, c, 16, NULL)); /* 8 blocks: the 4 never used, then 4 window blocks */
  CHECK(kvbt_free(m) == 1);
  CHECK(kvbt_stats(m).evictions == 4);
  CHECK(hit_of_prefix(m, a, 20) == 20); /* block 4 of the window group, the newest, is left */
  CHECK(hit_of_prefix(m, a, 16) == 0);
  CHECK_OK(kvb_check_invariants(m));
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

/* Rollback below a released block (only past the sinks), fork and free keep the window group's
 * blocks accounted for: kvb_check_invariants fails if a block stays set apart for a sequence that no
 * longer names it. */
static void test_rollback_fork_free(void) {
  kvb_manager* m = make_groups(40, 4, 4); /* window 4 + 4 sink tokens: block 0 is kept */
  int64_t a[24];
  kvbt_iota(a, 24, 1000);
  prefill_in_chunks(m, 1, a); /* releases blocks 1..4 of the window group */
  CHECK_OK(kvb_seq_fork_at(m, 1, 2, 24));
  CHECK_OK(kvb_check_invariants(m));
  CHECK_OK(kvb_seq_rollback(m, 1, 22)); /* 2 tokens left, in sink block 0 */
  CHECK_OK(kvb_check_invariants(m));
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_check_invariants(m));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_check_invariants(m));
  CHECK(kvbt_free(m) == 40);
  CHECK(hit_of_prefix(m, a, 20) == 20);
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_running_sequence_keeps_window_blocks);
  RUN_TEST(test_freed_sequence_ages_as_one);
  RUN_TEST(test_window_blocks_stay_free);
  RUN_TEST(test_rollback_fork_free);
  TEST_SUMMARY();
}
