/* A pool whose prefix index is larger than 1 MiB (131072 blocks): allocate then takes a prompt's new
 * blocks walking the free queue ahead of the evictions (take_free_blocks' prefetching path, which small
 * pools never take). The blocks taken, the evictions and the hits must be those of the plain path: FIFO
 * eviction keeps exactly the last 512 prompts of 256 blocks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { NUM_BLOCKS = 131072, PROMPT = 4096, BLOCKS = PROMPT / 16, PROMPTS = 600 };

static void fill(int64_t* t, int64_t first) {
  t[0] = first;
  for (int i = 1; i < PROMPT; ++i) t[i] = 1000000 + i;
}

static void test_fifo_eviction_on_a_large_pool(void) {
  kvb_config cfg;
  kvb_config_init(&cfg);
  cfg.num_blocks = NUM_BLOCKS;
  kvb_manager* m = NULL;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  int64_t* t = malloc(PROMPT * sizeof *t);
  // The block tables of the last 512 prompts (a ring): each prompt after the wrap takes the blocks of
  // the prompt 512 before it, in the reverse of that prompt's table order (kvb_seq_free releases a
  // table from its end, and the free queue is FIFO).
  int32_t* tables = malloc((size_t)512 * BLOCKS * sizeof *tables);
  size_t cached = 0, len = 0;
  for (int p = 0; p < PROMPTS; ++p) {
    int32_t* tab = tables + (size_t)(p % 512) * BLOCKS;
    int32_t old[BLOCKS];
    memcpy(old, tab, sizeof old);
    fill(t, p);
    CHECK_OK(kvb_seq_allocate(m, 1, t, PROMPT, &cached));
    CHECK(cached == 0);
    CHECK_OK(kvb_seq_block_table(m, 1, tab, BLOCKS, &len));
    CHECK(len == BLOCKS);
    for (int i = 0; i < BLOCKS; ++i) CHECK(tab[i] == (p < 512 ? p * BLOCKS + i : old[BLOCKS - 1 - i]));
    CHECK_OK(kvb_seq_commit(m, 1, PROMPT));
    CHECK_OK(kvb_seq_free(m, 1));
    if (p % 100 == 0) CHECK_OK(kvb_check_invariants(m));
  }
  CHECK_OK(kvb_check_invariants(m));
  // Prompts 88..599 are cached (the last 512), 0..87 were evicted.
  fill(t, 300);
  CHECK_OK(kvb_seq_allocate(m, 1, t, PROMPT, &cached));
  CHECK(cached == PROMPT - 16);  // all but the last block, which is always computed
  CHECK_OK(kvb_seq_free(m, 1));
  fill(t, 50);
  CHECK_OK(kvb_seq_allocate(m, 1, t, PROMPT, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_check_invariants(m));
  free(tables);
  free(t);
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_fifo_eviction_on_a_large_pool);
  TEST_SUMMARY();
}
