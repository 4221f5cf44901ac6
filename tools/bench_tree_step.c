/* bench_tree_step.c - the token-tree manager cases of `kvblock bench`: one speculative verification step per sequence,
   round-robin over --decode-seqs sequences of a 64-token committed prompt, as a 16-node draft tree
   (kvb_seq_append_tree + kvb_seq_commit_tree of a 4-node path + kvb_drain_slot_copies, per node) and,
   for comparison, as the same 16 tokens drafted as a chain (kvb_seq_append + kvb_seq_commit of 4 +
   kvb_seq_rollback of 12, per token). The design goal (kvblock.h "Token trees"): a node costs at most
   2x a decode token (kvb_seq_append + kvb_seq_commit of one token, the decode case). */
#include "bench_manager.h"

#include <string.h>

#include "util.h"

#define TREE_NODES 16
#define TREE_PATH 4
#define TREE_SEQ0 5000

/* Four roots, each the head of a chain of depth 4, the chains interleaved level by level (EAGLE's top-k
   layout): node 4 + i is the child of node i. The accepted path, root 1's chain, moves every node. */
static const int32_t kParents[TREE_NODES] = {-1, -1, -1, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
static const int32_t kPath[TREE_PATH] = {1, 5, 9, 13};

/* Steps per sequence per repetition: the decode case's tokens, 4 accepted per step. */
static uint64_t tree_steps(const bench_opts* o) { return o->decode_tokens / TREE_PATH + 1; }

uint64_t bench_tree_blocks(const bench_opts* o) {
  return o->decode_seqs * ((64 + TREE_PATH * tree_steps(o) + TREE_NODES) / o->block_size + 3);
}

double bench_run_tree(const bench_opts* o, kvb_manager* m, int64_t* next_token, int chain) {
  const uint64_t n = o->decode_seqs, steps = tree_steps(o);
  int64_t prompt[64], draft[TREE_NODES], pairs[2 * TREE_NODES];
  int32_t depths[TREE_NODES];
  uint64_t s, k;
  size_t i, np;
  double t0, elapsed;
  for (s = 0; s < n; s++) { /* short distinct prompts, committed (not timed) */
    for (i = 0; i < 64; i++) prompt[i] = ++*next_token;
    CHECK(kvb_seq_allocate(m, (int64_t)(TREE_SEQ0 + s), prompt, 64, NULL));
    CHECK(kvb_seq_commit(m, (int64_t)(TREE_SEQ0 + s), 64));
  }
  t0 = now_s();
  for (k = 0; k < steps; k++)
    for (s = 0; s < n; s++) {
      const int64_t id = (int64_t)(TREE_SEQ0 + s);
      for (i = 0; i < TREE_NODES; i++) draft[i] = ++*next_token;
      if (chain) {
        CHECK(kvb_seq_append(m, id, draft, TREE_NODES));
        CHECK(kvb_seq_commit(m, id, TREE_PATH));
        CHECK(kvb_seq_rollback(m, id, TREE_NODES - TREE_PATH));
      } else {
        CHECK(kvb_seq_append_tree(m, id, draft, kParents, TREE_NODES, depths));
        CHECK(kvb_seq_commit_tree(m, id, kPath, TREE_PATH));
        CHECK(kvb_drain_slot_copies(m, pairs, TREE_NODES, &np));
      }
    }
  elapsed = now_s() - t0;
  for (s = 0; s < n; s++) CHECK(kvb_seq_free(m, (int64_t)(TREE_SEQ0 + s)));
  return elapsed * 1e9 / (double)(steps * n * TREE_NODES);
}
