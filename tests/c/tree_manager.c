/* Token trees through the public API (kvblock.h, "Token trees"): the header's worked example, a chain
 * that equals append + rollback + commit, the batch export's tree mask next to chains and prefills, KV
 * cache groups and windows, copy-on-write before a tree, and the bad-input / refusal matrix, each
 * refused call checked for its status AND an unchanged manager. */
#include "kvbt_common.h"
#include "../kvbt_state.h"

static const int64_t kSeq = 7;

/* Slot of position pos in a block table. */
static int64_t slot_of(const int32_t* table, uint32_t bs, uint64_t pos) {
  return (int64_t)table[pos / bs] * bs + (int64_t)(pos % bs);
}

static void check_invariants(kvb_manager* m) { CHECK_OK(kvb_check_invariants(m)); }

/* kvblock.h's worked example, block ids read from the table. */
static void worked_example(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t prompt[6] = {100, 101, 102, 103, 104, 105};
  const int64_t A = 1, B = 2, C = 3, D = 4, E = 5;
  int64_t tokens[5] = {A, B, C, D, E};
  int32_t parents[5] = {-1, -1, 0, 0, 2}, depths[5] = {9, 9, 9, 9, 9}, path[3] = {0, 2, 4};
  int32_t table[8], qs[2];
  int64_t slots[8], pairs[8];
  uint64_t mask[8];
  size_t cached = 0, np = 0, i;
  kvb_batch bt;
  const uint64_t want_mask[5] = {0x1, 0x2, 0x5, 0x9, 0x15};
  CHECK_OK(kvb_seq_allocate(m, kSeq, prompt, 6, &cached));
  CHECK_OK(kvb_seq_commit(m, kSeq, 6));
  CHECK_OK(kvb_seq_append_tree(m, kSeq, tokens, parents, 5, depths));
  CHECK(depths[0] == 0 && depths[1] == 0 && depths[2] == 1 && depths[3] == 1 && depths[4] == 2);
  CHECK(kvbt_table(m, kSeq, table) == 3);
  kvb_batch_init(&bt);
  bt.query_start = qs;
  bt.slot_mapping = slots;
  bt.tree_mask = mask;
  bt.slot_capacity = 8;
  CHECK_OK(kvb_batch_export(m, &kSeq, 1, &bt));
  CHECK(bt.num_slots == 5 && qs[1] == 5);
  for (i = 0; i < 5; ++i) {
    CHECK(slots[i] == slot_of(table, 4, 6 + i));
    CHECK(mask[i] == want_mask[i]);
  }
  CHECK(mask[5] == 0 && mask[7] == 0 && slots[5] == -1);
  check_invariants(m);
  CHECK_OK(kvb_seq_commit_tree(m, kSeq, path, 3));
  CHECK_OK(kvb_drain_slot_copies(m, pairs, 4, &np));
  CHECK(np == 2);
  CHECK(pairs[0] == slot_of(table, 4, 8) && pairs[1] == slot_of(table, 4, 7));
  CHECK(pairs[2] == slot_of(table, 4, 10) && pairs[3] == slot_of(table, 4, 8));
  {
    kvb_seq_info info = kvbt_info(m, kSeq);
    int32_t after[8];
    uint64_t h0, h1, want0, want1;
    int64_t b0[4] = {100, 101, 102, 103}, b1[4] = {104, 105, A, C};
    CHECK(info.num_tokens == 9 && info.num_computed == 9);
    CHECK(kvbt_table(m, kSeq, after) == 3 && after[0] == table[0] && after[1] == table[1] && after[2] == table[2]);
    want0 = kvb_hash_tokens(NULL, b0, 4);
    want1 = kvb_hash_tokens(&want0, b1, 4);
    CHECK(kvbt_has_hash(m, table[0], &h0) && h0 == want0);
    CHECK(kvbt_has_hash(m, table[1], &h1) && h1 == want1);
    CHECK(!kvbt_has_hash(m, table[2], &h1)); /* partial: E alone at position 8 */
  }
  check_invariants(m);
  { /* the accepted tokens are a prefix hit; the rejected B is not */
    int64_t p1[9] = {100, 101, 102, 103, 104, 105, A, C, E}, p2[9] = {100, 101, 102, 103, 104, 105, A, B, 7};
    CHECK_OK(kvb_seq_allocate(m, 8, p1, 9, &cached));
    CHECK(cached == 8);
    CHECK_OK(kvb_seq_allocate(m, 9, p2, 9, &cached));
    CHECK(cached == 4);
  }
  check_invariants(m);
  kvb_manager_destroy(m);
}

/* Accepting only B: one pair, the tree's second block released at once (it holds no source). */
static void accept_second_root(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t prompt[6] = {100, 101, 102, 103, 104, 105}, tokens[5] = {1, 2, 3, 4, 5}, pairs[4];
  int32_t parents[5] = {-1, -1, 0, 0, 2}, path[1] = {1}, table[8];
  size_t cached, np = 0, free0;
  CHECK_OK(kvb_seq_allocate(m, kSeq, prompt, 6, &cached));
  CHECK_OK(kvb_seq_commit(m, kSeq, 6));
  free0 = kvbt_free(m);
  CHECK_OK(kvb_seq_append_tree(m, kSeq, tokens, parents, 5, NULL));
  CHECK(kvbt_free(m) == free0 - 1);
  CHECK(kvbt_table(m, kSeq, table) == 3);
  CHECK_OK(kvb_seq_commit_tree(m, kSeq, path, 1));
  CHECK(kvbt_free(m) == free0);
  CHECK_OK(kvb_drain_slot_copies(m, pairs, 2, &np));
  CHECK(np == 1 && pairs[0] == slot_of(table, 4, 7) && pairs[1] == slot_of(table, 4, 6));
  check_invariants(m);
  kvb_manager_destroy(m);
}

/* A source past the accepted path's end keeps its block until the pairs are drained. */
static void source_block_held_until_drained(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t prompt[4] = {100, 101, 102, 103}, tokens[6] = {1, 2, 3, 4, 5, 6}, pairs[4];
  int32_t parents[6] = {-1, -1, -1, -1, -1, -1}, path[1] = {5}, table[4];
  size_t cached, np = 0, free0;
  CHECK_OK(kvb_seq_allocate(m, kSeq, prompt, 4, &cached));
  CHECK_OK(kvb_seq_commit(m, kSeq, 4));
  free0 = kvbt_free(m);
  CHECK_OK(kvb_seq_append_tree(m, kSeq, tokens, parents, 6, NULL));
  CHECK(kvbt_table(m, kSeq, table) == 3 && kvbt_free(m) == free0 - 2);
  CHECK_OK(kvb_seq_commit_tree(m, kSeq, path, 1)); /* node 5 (position 9, block 2) to position 4 */
  CHECK(kvbt_free(m) == free0 - 2);               /* block 2 left the table but is held */
  check_invariants(m);
  CHECK_STATUS(kvb_drain_slot_copies(m, pairs, 0, &np), KVB_ERR_BUFFER_TOO_SMALL);
  CHECK(np == 1 && kvbt_free(m) == free0 - 2);
  CHECK_OK(kvb_drain_slot_copies(m, pairs, 2, &np));
  CHECK(np == 1 && pairs[0] == slot_of(table, 4, 9) && pairs[1] == slot_of(table, 4, 4));
  CHECK(kvbt_free(m) == free0 - 1);
  CHECK_OK(kvb_drain_slot_copies(m, pairs, 2, &np));
  CHECK(np == 0);
  check_invariants(m);
  kvb_manager_destroy(m);
}

/* A chain tree accepting a prefix is append + rollback + commit, down to the free queue and events. */
static void chain_equals_append_rollback_commit(void) {
  uint32_t flags = KVB_CONFIG_EVENTS;
  kvb_manager* a = kvbt_make_ex(4, 16, 0, 0.0f, flags, 0);
  kvb_manager* b = kvbt_make_ex(4, 16, 0, 0.0f, flags, 0);
  int64_t prompt[5] = {100, 101, 102, 103, 104}, tokens[7] = {1, 2, 3, 4, 5, 6, 7};
  int32_t parents[7] = {-1, 0, 1, 2, 3, 4, 5}, path[4] = {0, 1, 2, 3}, depths[7];
  size_t cached, np = 9, k;
  kvbt_state sa = {0}, sb = {0};
  int64_t ids[1] = {kSeq}, pairs[2];
  CHECK_OK(kvb_seq_allocate(a, kSeq, prompt, 5, &cached));
  CHECK_OK(kvb_seq_allocate(b, kSeq, prompt, 5, &cached));
  CHECK_OK(kvb_seq_commit(a, kSeq, 5));
  CHECK_OK(kvb_seq_commit(b, kSeq, 5));
  CHECK_OK(kvb_seq_append_tree(a, kSeq, tokens, parents, 7, depths));
  for (k = 0; k < 7; ++k) CHECK(depths[k] == (int32_t)k);
  CHECK_OK(kvb_seq_append(b, kSeq, tokens, 7));
  kvbt_state_take(a, ids, 1, 0, &sa);
  kvbt_state_take(b, ids, 1, 0, &sb);
  CHECK(kvbt_state_diff(&sa, &sb) == -1); /* a chain's mask rows are the causal rows */
  CHECK_OK(kvb_seq_commit_tree(a, kSeq, path, 4));
  CHECK_OK(kvb_drain_slot_copies(a, pairs, 1, &np));
  CHECK(np == 0);
  CHECK_OK(kvb_seq_rollback(b, kSeq, 3));
  CHECK_OK(kvb_seq_commit(b, kSeq, 4));
  kvbt_state_take(a, ids, 1, 1, &sa);
  kvbt_state_take(b, ids, 1, 1, &sb);
  CHECK(kvbt_state_diff(&sa, &sb) == -1);
  check_invariants(a);
  kvbt_state_free(&sa);
  kvbt_state_free(&sb);
  kvb_manager_destroy(a);
  kvb_manager_destroy(b);
}

/* One export mixing a tree, a decode row, a 3-token chunk and a 70-token prefill. */
static void export_mixes_rows(void) {
  kvb_manager* m = kvbt_make(16, 64);
  int64_t p[80], ids[4] = {1, 2, 3, 4}, tokens[3] = {5, 6, 7}, slots[128];
  int32_t parents[3] = {-1, 0, 0}, qs[5];
  uint64_t mask[128];
  size_t cached, i;
  kvb_batch bt;
  kvbt_iota(p, 80, 1000);
  CHECK_OK(kvb_seq_allocate(m, 1, p, 10, &cached));
  CHECK_OK(kvb_seq_commit(m, 1, 10));
  CHECK_OK(kvb_seq_append_tree(m, 1, tokens, parents, 3, NULL));
  CHECK_OK(kvb_seq_allocate(m, 2, p + 20, 5, &cached));
  CHECK_OK(kvb_seq_commit(m, 2, 4));
  CHECK_OK(kvb_seq_allocate(m, 3, p + 30, 3, &cached));
  CHECK_OK(kvb_seq_allocate(m, 4, p, 70, &cached));
  kvb_batch_init(&bt);
  bt.query_start = qs;
  bt.tree_mask = mask; /* without slot_mapping: sized by slot_capacity all the same */
  bt.slot_capacity = 10;
  CHECK_STATUS(kvb_batch_export(m, ids, 4, &bt), KVB_ERR_BUFFER_TOO_SMALL);
  CHECK(bt.num_slots == 3 + 1 + 3 + 70);
  bt.slot_capacity = 128;
  bt.slot_mapping = slots;
  CHECK_OK(kvb_batch_export(m, ids, 4, &bt));
  CHECK(qs[0] == 0 && qs[1] == 3 && qs[2] == 4 && qs[3] == 7 && qs[4] == 77);
  CHECK(mask[0] == 1 && mask[1] == 3 && mask[2] == 5);
  CHECK(mask[3] == 1);
  CHECK(mask[4] == 1 && mask[5] == 3 && mask[6] == 7);
  for (i = 7; i < 128; ++i) CHECK(mask[i] == 0);
  kvb_manager_destroy(m);
}

/* KV cache groups: every group gets the move; pairs group 0 first, each in its own blocks. With a window
 * of 5 tokens, the commit releases window blocks as kvb_seq_commit would. */
static void groups_and_window(void) {
  kvb_manager* m = kvbt_make_full_window(4, 32, 0, 0, 5, 0);
  int64_t prompt[9], tokens[4] = {1, 2, 3, 4}, pairs[12];
  int32_t parents[4] = {-1, -1, 1, 2}, path[3] = {1, 2, 3}, t0[8], t1[8];
  size_t cached, np = 0, len;
  kvbt_iota(prompt, 9, 500);
  CHECK_OK(kvb_seq_allocate(m, kSeq, prompt, 9, &cached));
  CHECK_OK(kvb_seq_commit(m, kSeq, 9));
  CHECK_OK(kvb_seq_append_tree(m, kSeq, tokens, parents, 4, NULL));
  CHECK_OK(kvb_seq_block_table_group(m, kSeq, 0, t0, 8, &len));
  CHECK_OK(kvb_seq_block_table_group(m, kSeq, 1, t1, 8, &len));
  CHECK(len == 4);
  CHECK_OK(kvb_seq_commit_tree(m, kSeq, path, 3));
  CHECK_OK(kvb_drain_slot_copies(m, pairs, 6, &np));
  CHECK(np == 6);
  /* path {1, 2, 3} shifts every node down by one: 10 -> 9, 11 -> 10, 12 -> 11, in list order */
  CHECK(pairs[0] == slot_of(t0, 4, 10) && pairs[1] == slot_of(t0, 4, 9));
  CHECK(pairs[2] == slot_of(t0, 4, 11) && pairs[3] == slot_of(t0, 4, 10));
  CHECK(pairs[4] == slot_of(t0, 4, 12) && pairs[5] == slot_of(t0, 4, 11));
  CHECK(pairs[6] == slot_of(t1, 4, 10) && pairs[11] == slot_of(t1, 4, 11));
  {
    kvb_seq_info info = kvbt_info(m, kSeq);
    CHECK(info.num_tokens == 12 && info.num_computed == 12);
  }
  CHECK_OK(kvb_seq_block_table_group(m, kSeq, 1, t1, 8, &len));
  CHECK(len == 3 && t1[0] == -1 && t1[1] == -1 && t1[2] >= 0); /* the window (5) released blocks 0, 1 */
  check_invariants(m);
  kvb_manager_destroy(m);
}

/* A tree on a forked sequence's shared partial block copies that block first, as an append does. */
static void copy_on_write_first(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t prompt[6] = {1, 2, 3, 4, 5, 6}, tokens[2] = {7, 8};
  int32_t parents[2] = {-1, -1}, cow[4], path[1] = {1};
  size_t cached, np = 0;
  CHECK_OK(kvb_seq_allocate(m, 1, prompt, 6, &cached));
  CHECK_OK(kvb_seq_commit(m, 1, 6));
  CHECK_OK(kvb_seq_fork(m, 1, 2));
  CHECK_OK(kvb_seq_append_tree(m, 2, tokens, parents, 2, NULL));
  CHECK_OK(kvb_drain_copies(m, cow, 2, &np));
  CHECK(np == 1);
  CHECK_OK(kvb_seq_commit_tree(m, 2, path, 1));
  check_invariants(m);
  kvb_manager_destroy(m);
}

/* Freeing a sequence with a pending tree, or with undrained slot copies, gives every block back. */
static void free_with_pending_tree(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t prompt[4] = {1, 2, 3, 4}, tokens[6] = {1, 2, 3, 4, 5, 6}, pairs[4];
  int32_t parents[6] = {-1, -1, -1, -1, -1, -1}, path[1] = {5};
  size_t cached, np;
  CHECK_OK(kvb_seq_allocate(m, 1, prompt, 4, &cached));
  CHECK_OK(kvb_seq_commit(m, 1, 4));
  CHECK_OK(kvb_seq_append_tree(m, 1, tokens, parents, 6, NULL));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK(kvbt_free(m) == 16);
  check_invariants(m);
  CHECK_OK(kvb_seq_allocate(m, 1, prompt, 4, &cached)); /* the id comes back without a tree */
  CHECK_OK(kvb_seq_commit(m, 1, 4));
  CHECK_STATUS(kvb_seq_commit_tree(m, 1, path, 0), KVB_ERR_BAD_STATE);
  CHECK_OK(kvb_seq_append_tree(m, 1, tokens, parents, 6, NULL));
  CHECK_OK(kvb_seq_commit_tree(m, 1, path, 1));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK(kvbt_free(m) == 15); /* the held source block waits for the drain */
  check_invariants(m);
  CHECK_OK(kvb_drain_slot_copies(m, pairs, 2, &np));
  CHECK(np == 1 && kvbt_free(m) == 16);
  check_invariants(m);
  kvb_manager_destroy(m);
}

/* ---- the bad-input and refusal matrix: status, a message, and nothing changed ----------------------- */

static kvb_manager* g_m;
static const int64_t g_ids[4] = {1, 2, 3, 99};


#define REFUSED(call, want)                                     \
  do {                                                          \
    kvbt_state b_ = {0}, a_ = {0};                              \
    kvbt_state_take(g_m, g_ids, 4, 0, &b_);                     \
    CHECK_STATUS(call, want);                                   \
    kvbt_state_take(g_m, g_ids, 4, 0, &a_);                     \
    if (kvbt_state_diff(&b_, &a_) != -1) {                      \
      fprintf(stderr, "%s:%d: %s changed the manager\n", __FILE__, __LINE__, #call); \
      kvbt_case_failures++;                                     \
    }                                                           \
    kvbt_state_free(&b_);                                       \
    kvbt_state_free(&a_);                                       \
  } while (0)

static void bad_inputs(void) {
  int64_t prompt[6] = {1, 2, 3, 4, 5, 6}, tokens[65], one = 9, pairs[4];
  int32_t parents[65], path[4], depths[65], sw[8];
  size_t cached, np, i;
  kvb_availability av;
  g_m = kvbt_make_ex(4, 12, 8, 0.0f, 0, 0);
  for (i = 0; i < 65; ++i) {
    tokens[i] = (int64_t)i;
    parents[i] = -1;
  }
  CHECK_OK(kvb_seq_allocate(g_m, 1, prompt, 6, &cached));
  CHECK_OK(kvb_seq_commit(g_m, 1, 6));
  CHECK_OK(kvb_seq_allocate(g_m, 2, tokens + 20, 5, &cached)); /* one uncomputed token */
  CHECK_OK(kvb_seq_commit(g_m, 2, 4));
  CHECK_OK(kvb_seq_allocate(g_m, 3, prompt, 3, &cached));
  CHECK_OK(kvb_seq_commit(g_m, 3, 3));
  CHECK_OK(kvb_seq_swap_out(g_m, 3, sw, 4, &np));

  /* append_tree: arguments */
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, parents, 65, depths), KVB_ERR_INVALID_ARGUMENT);
  parents[2] = 2; /* itself */
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, parents, 4, depths), KVB_ERR_INVALID_ARGUMENT);
  parents[2] = 3; /* a later node: a cycle could follow */
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, parents, 4, depths), KVB_ERR_INVALID_ARGUMENT);
  parents[2] = -2;
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, parents, 4, depths), KVB_ERR_INVALID_ARGUMENT);
  parents[2] = -1;
  parents[0] = 0;
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, parents, 1, depths), KVB_ERR_INVALID_ARGUMENT);
  parents[0] = -1;
  REFUSED(kvb_seq_append_tree(g_m, 1, NULL, parents, 2, depths), KVB_ERR_INVALID_ARGUMENT);
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, NULL, 2, depths), KVB_ERR_INVALID_ARGUMENT);
  REFUSED(kvb_seq_append_tree(NULL, 1, tokens, parents, 2, depths), KVB_ERR_INVALID_ARGUMENT);
  /* append_tree: states */
  REFUSED(kvb_seq_append_tree(g_m, 42, tokens, parents, 2, depths), KVB_ERR_NO_SUCH_SEQUENCE);
  REFUSED(kvb_seq_append_tree(g_m, 2, tokens, parents, 2, depths), KVB_ERR_BAD_STATE);  /* uncomputed */
  REFUSED(kvb_seq_append_tree(g_m, 3, tokens, parents, 2, depths), KVB_ERR_BAD_STATE);  /* swapped */
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, parents, 40, depths), KVB_ERR_OUT_OF_BLOCKS);
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 0), KVB_ERR_BAD_STATE); /* no tree */
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, parents, 0, depths), KVB_OK);

  /* a pending tree: nodes 0 1 roots, 2 child of 0, 3 child of 2 */
  parents[2] = 0;
  parents[3] = 2;
  CHECK_OK(kvb_seq_append_tree(g_m, 1, tokens, parents, 4, depths));
  REFUSED(kvb_seq_append_tree(g_m, 1, tokens, parents, 1, depths), KVB_ERR_BAD_STATE);
  REFUSED(kvb_seq_append(g_m, 1, &one, 1), KVB_ERR_BAD_STATE);
  REFUSED(kvb_seq_commit(g_m, 1, 1), KVB_ERR_BAD_STATE);
  REFUSED(kvb_seq_rollback(g_m, 1, 1), KVB_ERR_BAD_STATE);
  REFUSED(kvb_batch_append(g_m, g_ids, &one, 1), KVB_ERR_BAD_STATE);
  REFUSED(kvb_batch_commit(g_m, g_ids, NULL, 1), KVB_ERR_BAD_STATE);
  REFUSED(kvb_seq_fork(g_m, 1, 50), KVB_ERR_BAD_STATE);
  REFUSED(kvb_seq_fork_at(g_m, 1, 50, 2), KVB_ERR_BAD_STATE);
  REFUSED(kvb_seq_can_swap_out(g_m, 1, &av), KVB_ERR_BAD_STATE);
  REFUSED(kvb_seq_swap_out(g_m, 1, sw, 8, &np), KVB_ERR_BAD_STATE);
  /* commit_tree: bad paths */
  path[0] = 2; /* not a root */
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 1), KVB_ERR_INVALID_ARGUMENT);
  path[0] = 0;
  path[1] = 1; /* a sibling, not a child */
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 2), KVB_ERR_INVALID_ARGUMENT);
  path[1] = 3; /* a grandchild: skips node 2 */
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 2), KVB_ERR_INVALID_ARGUMENT);
  path[1] = 0; /* repeats */
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 2), KVB_ERR_INVALID_ARGUMENT);
  path[1] = 4; /* not a node */
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 2), KVB_ERR_INVALID_ARGUMENT);
  path[1] = -1;
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 2), KVB_ERR_INVALID_ARGUMENT);
  path[1] = 2;
  path[2] = 3;
  path[3] = 3;
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 5), KVB_ERR_INVALID_ARGUMENT); /* k > n */
  REFUSED(kvb_seq_commit_tree(g_m, 1, NULL, 1), KVB_ERR_INVALID_ARGUMENT);
  REFUSED(kvb_seq_commit_tree(g_m, 3, path, 0), KVB_ERR_BAD_STATE); /* swapped */
  REFUSED(kvb_seq_commit_tree(g_m, 42, path, 0), KVB_ERR_NO_SUCH_SEQUENCE);
  REFUSED(kvb_drain_slot_copies(g_m, pairs, 1, NULL), KVB_ERR_INVALID_ARGUMENT);
  check_invariants(g_m);
  /* the valid path 0 2 3 */
  path[1] = 2;
  path[2] = 3;
  CHECK_OK(kvb_seq_commit_tree(g_m, 1, path, 3));
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 3), KVB_ERR_BAD_STATE); /* committed already */
  REFUSED(kvb_drain_slot_copies(g_m, NULL, 2, &np), KVB_ERR_INVALID_ARGUMENT);
  REFUSED(kvb_drain_slot_copies(g_m, pairs, 1, &np), KVB_ERR_BUFFER_TOO_SMALL);
  CHECK(np == 2);
  CHECK_OK(kvb_drain_slot_copies(g_m, pairs, 2, &np));
  CHECK(np == 2);
  CHECK_OK(kvb_seq_free(g_m, 1));
  REFUSED(kvb_seq_commit_tree(g_m, 1, path, 0), KVB_ERR_NO_SUCH_SEQUENCE);
  check_invariants(g_m);
  kvb_manager_destroy(g_m);
}

int main(void) {
  RUN_TEST(worked_example);
  RUN_TEST(accept_second_root);
  RUN_TEST(source_block_held_until_drained);
  RUN_TEST(chain_equals_append_rollback_commit);
  RUN_TEST(export_mixes_rows);
  RUN_TEST(groups_and_window);
  RUN_TEST(copy_on_write_first);
  RUN_TEST(free_with_pending_tree);
  RUN_TEST(bad_inputs);
  TEST_SUMMARY();
}
