/* house_ir_driver.c - the miss, hit and decode loops of `kvblock bench` (tools/bench_manager.c), alone
   and in functions of their own, so that callgrind can count the instructions of exactly the measured
   loop (--toggle-collect=measured_*), per block or per token, against any build of the library (same
   ABI). Used for docs/perf/manager.md; `make perf-drivers` (and `make tests`) builds it:
     make perf-drivers
     valgrind --tool=callgrind --toggle-collect='measured_*' build/perf/house_ir_driver miss 0
   (LD_LIBRARY_PATH=OTHER_BUILD/lib measures another build of the library with the same driver.)
   Second argument: 0 = no KV cache groups, 1 = one full-attention group (kvb_config.groups). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvblock.h"

enum { BS = 16, PROMPT = 4096, NB = PROMPT / BS, ITERS = 16, DECODE_SEQS = 64, DECODE_TOKENS = 64 };

#define CHECK(call)                                                        \
  do {                                                                     \
    if ((call) != KVB_OK) {                                                \
      fprintf(stderr, "%s failed: %s\n", #call, kvb_last_error());         \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static int64_t tokens[PROMPT], fresh = 1000000;

static kvb_manager* make(uint32_t num_blocks, int one_group) {
  kvb_config cfg;
  kvb_group_spec full;
  kvb_manager* m = NULL;
  kvb_config_init(&cfg);
  cfg.block_size = BS;
  cfg.num_blocks = num_blocks;
  if (one_group) {
    kvb_group_spec_init(&full);
    cfg.groups = &full;
    cfg.num_groups = 1;
  }
  CHECK(kvb_manager_create(&cfg, &m));
  return m;
}

static void miss_loop(kvb_manager* m, int iters) {
  size_t cached;
  for (int it = 0; it < iters; it++) {
    tokens[0] = ++fresh; /* a new first token: the whole chain is new */
    CHECK(kvb_seq_allocate(m, 1, tokens, PROMPT, &cached));
    CHECK(kvb_seq_commit(m, 1, PROMPT - cached));
    CHECK(kvb_seq_free(m, 1));
  }
}
__attribute__((noinline)) void measured_miss(kvb_manager* m) { miss_loop(m, ITERS); }

static void hit_loop(kvb_manager* m, int iters) {
  size_t cached;
  for (int it = 0; it < iters; it++) {
    CHECK(kvb_seq_allocate(m, 2, tokens, PROMPT, &cached));
    CHECK(kvb_seq_free(m, 2));
  }
  if (cached + BS < PROMPT) exit(1);
}
__attribute__((noinline)) void measured_hit(kvb_manager* m) { hit_loop(m, ITERS); }

static void decode_loop(kvb_manager* m, int tokens_per_seq) {
  for (int k = 0; k < tokens_per_seq; k++)
    for (int s = 0; s < DECODE_SEQS; s++) {
      int64_t tok = ++fresh;
      CHECK(kvb_seq_append(m, 100 + s, &tok, 1));
      CHECK(kvb_seq_commit(m, 100 + s, 1));
    }
}
__attribute__((noinline)) void measured_decode(kvb_manager* m) { decode_loop(m, DECODE_TOKENS); }

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "miss";
  int one_group = argc > 2 && atoi(argv[2]) != 0;
  for (int i = 0; i < PROMPT; i++) tokens[i] = i + 1;
  if (!strcmp(what, "miss")) {
    kvb_manager* m = make(16 * NB, one_group);
    miss_loop(m, 17); /* the warm-up wraps the pool: the measured prompts evict */
    measured_miss(m);
    printf("miss: %d blocks\n", ITERS * NB);
  } else if (!strcmp(what, "hit")) {
    kvb_manager* m = make(16 * NB, one_group);
    size_t cached;
    CHECK(kvb_seq_allocate(m, 2, tokens, PROMPT, &cached));
    CHECK(kvb_seq_commit(m, 2, PROMPT - cached));
    CHECK(kvb_seq_free(m, 2));
    hit_loop(m, 2);
    measured_hit(m);
    printf("hit: %d blocks\n", ITERS * NB);
  } else {
    kvb_manager* m = make(DECODE_SEQS * (64 + 2 * DECODE_TOKENS) / BS + 64, one_group); /* room for 1.5x */
    int64_t prompt[64];
    for (int s = 0; s < DECODE_SEQS; s++) {
      for (int i = 0; i < 64; i++) prompt[i] = ++fresh;
      CHECK(kvb_seq_allocate(m, 100 + s, prompt, 64, NULL));
      CHECK(kvb_seq_commit(m, 100 + s, 64));
    }
    decode_loop(m, DECODE_TOKENS / 2); /* warm-up */
    measured_decode(m);
    printf("decode: %d tokens\n", DECODE_SEQS * DECODE_TOKENS);
  }
  return 0;
}
