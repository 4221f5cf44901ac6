/* A tiny engine loop on libkvblock: prefill, decode, prefix reuse, the out-of-blocks error, stats.
   Built only with `pkg-config --cflags --libs kvblock`; exits non-zero if anything is off. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvblock.h>

/* Every call that can fail goes through CHECK: on error, print the status name and the detail. */
#define CHECK(call)                                                                          \
  do {                                                                                       \
    kvb_status s_ = (call);                                                                  \
    if (s_ != KVB_OK) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, kvb_status_string(s_), \
              kvb_last_error());                                                             \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

int main(void) {
  printf("libkvblock %s\n", kvb_version_string());
  EXPECT(kvb_version() == KVB_VERSION_MAJOR * 10000 + KVB_VERSION_MINOR * 100 + KVB_VERSION_PATCH);

  kvb_config cfg;
  kvb_config_init(&cfg);
  cfg.block_size = 16;
  cfg.num_blocks = 8;
  kvb_manager* m = NULL;
  CHECK(kvb_manager_create(&cfg, &m));

  int64_t prompt[40];
  for (int i = 0; i < 40; i++) prompt[i] = 100 + i;
  size_t cached = 0;
  CHECK(kvb_seq_allocate(m, 1, prompt, 40, &cached));
  CHECK(kvb_seq_commit(m, 1, 40 - cached)); /* prefill */
  for (int64_t tok = 0; tok < 7; tok++) {    /* decode: one token per step */
    CHECK(kvb_seq_append(m, 1, &tok, 1));
    CHECK(kvb_seq_commit(m, 1, 1));
  }
  int32_t table[16];
  size_t len = 0;
  CHECK(kvb_seq_block_table(m, 1, table, 16, &len));
  EXPECT(len == 3);
  printf("seq 1 block table: [%d, %d, %d]\n", table[0], table[1], table[2]);
  CHECK(kvb_seq_free(m, 1));

  /* A second request with the same 32-token prefix reuses the committed blocks. */
  int64_t second[35];
  for (int i = 0; i < 35; i++) second[i] = i < 32 ? prompt[i] : 7;
  CHECK(kvb_seq_allocate(m, 2, second, 35, &cached));
  printf("seq 2 cached tokens: %zu\n", cached);
  EXPECT(cached == 32);
  CHECK(kvb_seq_commit(m, 2, 35 - cached));

  /* The error path: a prompt larger than the pool fails with a status, and nothing changes. */
  static int64_t huge[1000];
  size_t free_before = 0, free_after = 0;
  CHECK(kvb_num_free_blocks(m, &free_before));
  kvb_status s = kvb_seq_allocate(m, 3, huge, 1000, NULL);
  printf("expected error: %s: %s\n", kvb_status_string(s), kvb_last_error());
  EXPECT(s == KVB_ERR_OUT_OF_BLOCKS);
  CHECK(kvb_num_free_blocks(m, &free_after));
  EXPECT(free_before == free_after);
  EXPECT(kvb_seq_commit(m, 42, 1) == KVB_ERR_NO_SUCH_SEQUENCE);

  kvb_stats st;
  kvb_stats_init(&st);
  CHECK(kvb_get_stats(m, &st));
  printf("stats: %" PRIu64 " used, %" PRIu64 " free, %" PRIu64 " of %" PRIu64 " prompt tokens hit\n",
         st.used_blocks, st.free_blocks, st.hit_tokens, st.query_tokens);
  EXPECT(st.hit_tokens == 32 && st.num_seqs == 1);
  CHECK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
  puts("ok");
  return 0;
}
