/* miss2_time_driver.c - thread-CPU minimums (CLOCK_THREAD_CPUTIME_ID) of `kvblock bench`'s miss and hit
   loops through the public API, and of the bare XXH64 of a block ([parent hash][16 tokens], 136 bytes,
   chained as the bench's hash case), on a pool of any size: minimum of REPS repetitions of 100
   prompts of 4096 tokens, after a warm-up that wraps the pool (every measured miss evicts). Used for
   docs/perf/manager.md; `make perf-drivers` (and `make tests`) builds it. Old and new libraries are
   compared by running it alternately with LD_LIBRARY_PATH pointing at each:
     make perf-drivers
     LD_LIBRARY_PATH=build/lib build/perf/miss2_time_driver 1048576 20      (POOL_BLOCKS [REPS]) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
#include "kvblock.h"
enum { BS = 16, PROMPT = 4096, NB = PROMPT / BS, PER = 100 };
#define CHECK(call) do { if ((call) != KVB_OK) { fprintf(stderr, "%s: %s\n", #call, kvb_last_error()); exit(1);} } while (0)
static int64_t tokens[PROMPT], fresh = 1000000;
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static void miss(kvb_manager* m, int n) { size_t c; for (int i = 0; i < n; i++) { tokens[0] = ++fresh;
  CHECK(kvb_seq_allocate(m, 1, tokens, PROMPT, &c)); CHECK(kvb_seq_commit(m, 1, PROMPT - c)); CHECK(kvb_seq_free(m, 1)); } }
static void hit(kvb_manager* m, int n) { size_t c; for (int i = 0; i < n; i++) {
  CHECK(kvb_seq_allocate(m, 2, tokens, PROMPT, &c)); CHECK(kvb_seq_free(m, 2)); } }
int main(int argc, char** argv) {
  uint32_t pool = argc > 1 ? (uint32_t)atol(argv[1]) : 16 * NB; int reps = argc > 2 ? atoi(argv[2]) : 20;
  for (int i = 0; i < PROMPT; i++) tokens[i] = i + 1;
  kvb_config cfg; kvb_config_init(&cfg); cfg.block_size = BS; cfg.num_blocks = pool;
  kvb_manager* m; CHECK(kvb_manager_create(&cfg, &m));
  miss(m, (int)(pool / NB) + 2);
  double best = 1e30;
  for (int r = 0; r < reps; r++) { double t = now(); miss(m, PER); t = now() - t; if (t < best) best = t; }
  double miss_ns = best / (PER * NB);
  /* bare */
  unsigned char buf[8 + 128]; uint64_t h = 0; double bb = 1e30;
  for (int r = 0; r < reps; r++) { double t = now();
    for (int i = 0; i < PER * NB; i++) { memcpy(buf, &h, 8); memcpy(buf + 8, tokens + (i % NB) * BS, 128); h = XXH64(buf, 136, 0); }
    t = now() - t; if (t < bb) bb = t; }
  double bare = bb / (PER * NB);
  /* hit */
  size_t c; CHECK(kvb_seq_allocate(m, 2, tokens, PROMPT, &c)); CHECK(kvb_seq_commit(m, 2, PROMPT - c)); CHECK(kvb_seq_free(m, 2));
  double hb = 1e30;
  for (int r = 0; r < reps; r++) { double t = now(); hit(m, PER); t = now() - t; if (t < hb) hb = t; }
  printf("pool %u: bare %.2f  miss %.2f (%.2fx)  hit %.2f  [%llx]\n", pool, bare, miss_ns, miss_ns / bare, hb / (PER * NB), (unsigned long long)(h & 0xf));
  kvb_manager_destroy(m);
  return 0;
}
