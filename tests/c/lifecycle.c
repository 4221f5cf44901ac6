/* Beyond the core flow (docs/ARCHITECTURE.md, "Fork, rollback, sliding window" and "Host tier")
 * through the C API: fork and copy-on-write, rollback, sliding window with sinks, swapping
 * to the host tier, and batch export for kernels. */
#include "kvbt_common.h"

static int32_t block_at(kvb_manager* m, int64_t id, size_t i) {
  int32_t tab[KVBT_MAX_BLOCKS];
  long n = kvbt_table(m, id, tab);
  return (long)i < n ? tab[i] : -2;
}

/* A 16-block pool (block size 4) whose seq 1 holds the first n of the tokens 1..16 (into t), computed. */
static kvb_manager* pool_with_computed_seq(int64_t* t, size_t n) {
  kvb_manager* m = kvbt_make(4, 16);
  kvbt_iota(t, 16, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, n, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, n));
  return m;
}

/* Fork shares every block; ref counting keeps shared blocks alive until the last holder frees. */
static void test_fork_shares_blocks(void) {
  int64_t t[16];
  kvb_manager* m = pool_with_computed_seq(t, 8);
  int32_t a[8], b[8], pairs[8];
  size_t n = 0;
  kvb_seq_info info;
  CHECK_OK(kvb_seq_fork(m, 1, 2));
  CHECK(kvbt_free(m) == 14); /* nothing new taken */
  CHECK(kvbt_table(m, 1, a) == 2 && kvbt_table(m, 2, b) == 2);
  CHECK(a[0] == b[0] && a[1] == b[1]);
  info = kvbt_info(m, 2);
  CHECK(info.num_tokens == 8 && info.num_computed == 8);
  /* full shared last block: the next append takes a new block and copies nothing */
  CHECK_OK(kvb_seq_append(m, 2, t + 8, 1));
  CHECK(kvbt_table(m, 2, b) == 3 && b[1] == a[1]);
  CHECK_OK(kvb_drain_copies(m, pairs, 4, &n));
  CHECK(n == 0);
  CHECK(kvbt_stats(m).cow_copies == 0);
  /* free the parent: the child still holds blocks 0 and 1 */
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK(kvbt_free(m) == 13);
  CHECK(kvbt_has_hash(m, a[0], NULL) && kvbt_has_hash(m, a[1], NULL));
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK(kvbt_free(m) == 16);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* CoW: the first append into a shared partial last block records (src, dst). */
static void test_copy_on_write(void) {
  int64_t t[16];
  kvb_manager* m = pool_with_computed_seq(t, 6); /* 0, 1 (2 tokens) */
  int32_t pairs[8];
  size_t n = 0;
  int32_t src;
  CHECK_OK(kvb_seq_fork(m, 1, 2));
  CHECK_OK(kvb_seq_fork(m, 1, 3));
  src = block_at(m, 1, 1);
  CHECK(src == 1);
  /* can_append counts the copy */
  CHECK_OK(kvb_seq_append(m, 2, t + 6, 1));
  CHECK(block_at(m, 2, 0) == 0);
  CHECK(block_at(m, 2, 1) == 2); /* queue head */
  CHECK(block_at(m, 1, 1) == 1 && block_at(m, 3, 1) == 1);
  CHECK_OK(kvb_seq_append(m, 3, t + 6, 3)); /* fills the block: one copy */
  CHECK(block_at(m, 3, 1) == 3);
  /* the parent is now the only holder: no copy for it */
  CHECK_OK(kvb_seq_append(m, 1, t + 6, 1));
  CHECK(block_at(m, 1, 1) == 1);
  CHECK(kvbt_stats(m).cow_copies == 2);
  /* second append into the now private block: no further copy */
  CHECK_OK(kvb_seq_append(m, 2, t + 7, 1));
  CHECK_OK(kvb_drain_copies(m, pairs, 2, &n));
  CHECK(n == 2);
  CHECK(pairs[0] == 1 && pairs[1] == 2 && pairs[2] == 1 && pairs[3] == 3);
  CHECK_OK(kvb_drain_copies(m, pairs, 2, &n));
  CHECK(n == 0);
  CHECK_INV(m);
  /* a copy into a block that is freed before it is drained is dropped */
  CHECK_OK(kvb_seq_commit(m, 1, 1)); /* seq 1: 7 tokens, block 1 partial */
  CHECK_OK(kvb_seq_fork(m, 1, 5));
  CHECK_OK(kvb_seq_append(m, 5, t, 1));
  CHECK_OK(kvb_seq_free(m, 5));
  CHECK_OK(kvb_drain_copies(m, pairs, 4, &n));
  CHECK(n == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* fork_at(pos) shares the first pos tokens only. */
static void test_fork_at(void) {
  int64_t t[16];
  kvb_manager* m = pool_with_computed_seq(t, 14); /* 0 1 2 3 */
  int32_t pairs[8];
  size_t n = 0;
  kvb_seq_info info;
  CHECK_OK(kvb_seq_fork_at(m, 1, 2, 8));
  info = kvbt_info(m, 2);
  CHECK(info.num_tokens == 8 && info.num_blocks == 2 && info.num_computed == 8);
  CHECK(block_at(m, 2, 0) == 0 && block_at(m, 2, 1) == 1);
  CHECK_OK(kvb_seq_fork_at(m, 1, 3, 6)); /* mid-block: block 1 shared, partially */
  info = kvbt_info(m, 3);
  CHECK(info.num_tokens == 6 && info.num_blocks == 2);
  CHECK_OK(kvb_seq_fork_at(m, 1, 4, 14)); /* = fork */
  CHECK(kvbt_info(m, 4).num_blocks == 4);
  CHECK(kvbt_free(m) == 12);
  /* appending to seq 3 copies block 1 (shared, and only its first 2 tokens are seq 3's) */
  CHECK_OK(kvb_seq_append(m, 3, t, 1));
  CHECK_OK(kvb_drain_copies(m, pairs, 4, &n));
  CHECK(n == 1 && pairs[0] == 1 && pairs[1] == 4);
  /* block 1 keeps its hash: seqs 1, 2, 4 still hold it as it was */
  CHECK(kvbt_has_hash(m, 1, NULL));
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* A block that was committed full and is shared mid-block by a fork must not keep its hash once the
   fork child, as its only holder, writes different tokens into it. */
static void test_write_into_formerly_shared_full_block(void) {
  int64_t t[16], d[4] = {900, 901, 902, 903};
  kvb_manager* m = pool_with_computed_seq(t, 9); /* block 1 full and hashed */
  size_t cached = 0;
  uint64_t h;
  int32_t pairs[4];
  size_t n = 0;
  CHECK_OK(kvb_seq_fork_at(m, 1, 2, 6)); /* seq 2 shares block 1 with 2 of its 4 tokens */
  CHECK_OK(kvb_seq_free(m, 1)); /* seq 2 is now block 1's only holder */
  CHECK(kvbt_has_hash(m, 1, NULL));
  CHECK_OK(kvb_seq_append(m, 2, d, 2)); /* overwrites tokens 2, 3 of block 1 in place (no sharer) */
  CHECK_OK(kvb_drain_copies(m, pairs, 2, &n));
  if (block_at(m, 2, 1) == 1) {
    /* written in place: the old content (and so its hash) is gone */
    CHECK_STATUS(kvb_block_hash(m, 1, &h), KVB_ERR_BAD_STATE);
  }
  CHECK_INV(m);
  CHECK_OK(kvb_seq_commit(m, 2, 2));
  CHECK_INV(m);
  /* the original prompt no longer finds block 1; the new one does */
  CHECK_OK(kvb_seq_can_allocate(m, t, 9, &cached));
  CHECK(cached == 4);
  {
    int64_t p[9];
    memcpy(p, t, 6 * sizeof(int64_t));
    p[6] = 900;
    p[7] = 901;
    p[8] = 5;
    CHECK_OK(kvb_seq_can_allocate(m, p, 9, &cached));
    CHECK(cached == 8);
  }
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Rollback: empty blocks are freed; a committed full block that becomes partial loses its hash unless
   shared; at least one token stays. */
static void test_rollback(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t t[16];
  uint64_t h;
  size_t cached = 0;
  kvb_seq_info info;
  kvbt_iota(t, 16, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 14, NULL)); /* 0 1 2 3 */
  CHECK_OK(kvb_seq_commit(m, 1, 12));
  CHECK_OK(kvb_seq_rollback(m, 1, 5)); /* 9 tokens: block 3 freed, block 2 partial */
  info = kvbt_info(m, 1);
  CHECK(info.num_tokens == 9 && info.num_computed == 9 && info.num_blocks == 3);
  CHECK(kvbt_free(m) == 13);
  CHECK_STATUS(kvb_block_hash(m, 2, &h), KVB_ERR_BAD_STATE);
  CHECK(kvbt_has_hash(m, 1, NULL));
  CHECK_OK(kvb_seq_can_allocate(m, t, 14, &cached));
  CHECK(cached == 8);
  /* roll back to a block boundary: the block stays full and hashed */
  CHECK_OK(kvb_seq_rollback(m, 1, 1));
  CHECK(kvbt_has_hash(m, 1, NULL));
  CHECK(kvbt_info(m, 1).num_blocks == 2);
  /* shared: rolling back into block 1 keeps its hash (the other holder needs it) */
  CHECK_OK(kvb_seq_fork(m, 1, 2));
  CHECK_OK(kvb_seq_rollback(m, 1, 2)); /* 6 tokens */
  CHECK(kvbt_has_hash(m, 1, NULL));
  CHECK_OK(kvb_seq_append(m, 1, t + 6, 1)); /* ... and the next append copies it */
  CHECK(block_at(m, 1, 1) != 1);
  CHECK(kvbt_stats(m).cow_copies == 1);
  /* rollback of uncommitted tokens */
  CHECK_OK(kvb_seq_append(m, 1, t, 5));
  info = kvbt_info(m, 1);
  CHECK(info.num_tokens == 12 && info.num_computed == 6);
  CHECK_OK(kvb_seq_rollback(m, 1, 3));
  info = kvbt_info(m, 1);
  CHECK(info.num_tokens == 9 && info.num_computed == 6);
  CHECK_OK(kvb_seq_rollback(m, 1, 8)); /* down to 1 token */
  CHECK(kvbt_info(m, 1).num_tokens == 1);
  CHECK_STATUS(kvb_seq_rollback(m, 1, 1), KVB_ERR_INVALID_ARGUMENT);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Sliding window with sink: released blocks read -1, are freed; only fully committed blocks go. */
static void test_sliding_window(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t t[64];
  int32_t tab[16];
  kvb_seq_options o;
  kvb_seq_info info;
  size_t before;
  kvbt_iota(t, 64, 1);
  kvb_seq_options_init(&o);
  o.window_tokens = 8;
  o.sink_tokens = 4;
  CHECK_OK(kvb_seq_allocate_ex(m, 1, t, 24, &o, NULL)); /* 6 blocks, nothing committed */
  CHECK(kvbt_free(m) == 10);
  info = kvbt_info(m, 1);
  CHECK(info.window_tokens == 8 && info.sink_tokens == 4 && info.num_held_blocks == 6);
  /* The query of token 10 (the first uncomputed) attends tokens 3..10: nothing is released yet. */
  CHECK_OK(kvb_seq_commit(m, 1, 10));
  CHECK(kvbt_table(m, 1, tab) == 6);
  CHECK(tab[0] == 0 && tab[1] == 1 && tab[2] == 2);
  CHECK(kvbt_free(m) == 10);
  CHECK_OK(kvb_seq_commit(m, 1, 14)); /* next query at 24 attends 17..24: blocks 1..3 go (0 is the sink) */
  CHECK(kvbt_table(m, 1, tab) == 6);
  CHECK(tab[0] == 0 && tab[1] == -1 && tab[2] == -1 && tab[3] == -1 && tab[4] == 4 && tab[5] == 5);
  CHECK(kvbt_free(m) == 13);
  info = kvbt_info(m, 1);
  CHECK(info.num_blocks == 6 && info.num_held_blocks == 3);
  /* decode moves the window */
  before = kvbt_free(m);
  CHECK_OK(kvb_seq_append(m, 1, t + 24, 4));
  CHECK_OK(kvb_seq_commit(m, 1, 4)); /* 28 tokens: window [20, 28): block 4 released */
  CHECK(kvbt_table(m, 1, tab) == 7 && tab[4] == -1 && tab[0] == 0);
  CHECK(kvbt_free(m) == before); /* one taken, one released */
  CHECK_INV(m);
  /* batch export shows -1 too */
  {
    kvb_batch b;
    int32_t bt[8];
    int64_t id = 1;
    kvb_batch_init(&b);
    b.block_tables = bt;
    b.max_blocks_per_seq = 8;
    CHECK_OK(kvb_batch_export(m, &id, 1, &b));
    CHECK(bt[1] == -1 && bt[4] == -1 && bt[7] == -1 && bt[5] >= 0);
  }
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK(kvbt_free(m) == 16);
  /* set_window on a running sequence, sink of 0, sink not on a block boundary keeps that block */
  CHECK_OK(kvb_seq_allocate(m, 2, t + 40, 20, NULL));
  CHECK_OK(kvb_seq_commit(m, 2, 20));
  CHECK_OK(kvb_seq_set_window(m, 2, 4, 2));
  CHECK(kvbt_table(m, 2, tab) == 5);
  CHECK(tab[0] >= 0 && tab[1] == -1 && tab[2] == -1 && tab[3] == -1 && tab[4] >= 0);
  CHECK(kvbt_free(m) == 14);
  CHECK_OK(kvb_seq_set_window(m, 2, 0, 0)); /* off: nothing comes back */
  CHECK(kvbt_info(m, 2).num_held_blocks == 2);
  CHECK_INV(m);
  CHECK_OK(kvb_seq_free(m, 2));
  /* shrinking the sink releases former sink blocks too (bs 4: sink 6 covers blocks 0, 1) */
  kvb_seq_options_init(&o);
  o.window_tokens = 4;
  o.sink_tokens = 6;
  CHECK_OK(kvb_seq_allocate_ex(m, 3, t + 3, 20, &o, NULL));
  CHECK_OK(kvb_seq_commit(m, 3, 20));
  CHECK(kvbt_table(m, 3, tab) == 5 && tab[0] >= 0 && tab[1] >= 0 && tab[2] == -1 && tab[3] == -1 && tab[4] >= 0);
  CHECK_OK(kvb_seq_set_window(m, 3, 4, 0));
  CHECK(kvbt_table(m, 3, tab) == 5 && tab[0] == -1 && tab[1] == -1 && tab[2] == -1 && tab[3] == -1 && tab[4] >= 0);
  CHECK(kvbt_free(m) == 15);
  /* ... also when the new sink takes effect only at a later commit */
  kvb_seq_options_init(&o);
  o.window_tokens = 2;
  o.sink_tokens = 3;
  CHECK_OK(kvb_seq_allocate_ex(m, 4, t + 30, 8, &o, NULL));
  CHECK_OK(kvb_seq_set_window(m, 4, 1, 0));
  CHECK_OK(kvb_seq_commit(m, 4, 8));
  CHECK(kvbt_table(m, 4, tab) == 2 && tab[0] == -1 && tab[1] >= 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Swap out / in: pairs, availability, state while swapped, data kept. */
static void test_swap_roundtrip(void) {
  kvb_manager* m = kvbt_make_ex(4, 8, 4, 0.0f, 0, 0);
  int64_t t[16], more[4] = {70, 71, 72, 73};
  int32_t pairs[16], before[8];
  uint64_t hb[8];
  size_t n = 0, i;
  kvb_availability a = KVB_AVAIL_NEVER;
  kvb_stats st;
  kvb_seq_info info;
  kvbt_iota(t, 16, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 10, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 10));
  CHECK(kvbt_table(m, 1, before) == 3);
  for (i = 0; i < 2; ++i) CHECK(kvbt_has_hash(m, before[i], &hb[i]));
  CHECK_OK(kvb_seq_can_swap_out(m, 1, &a));
  CHECK(a == KVB_AVAIL_OK);
  CHECK_OK(kvb_seq_swap_out(m, 1, pairs, 3, &n));
  CHECK(n == 3);
  for (i = 0; i < 3; ++i) {
    CHECK(pairs[2 * i] == before[i]);
    CHECK(pairs[2 * i + 1] >= 0 && pairs[2 * i + 1] < 4);
  }
  CHECK(pairs[1] != pairs[3] && pairs[3] != pairs[5] && pairs[1] != pairs[5]);
  CHECK(kvbt_free(m) == 8);
  st = kvbt_stats(m);
  CHECK(st.swapped_out_blocks == 3 && st.free_host_blocks == 1 && st.num_host_blocks == 4 && st.num_seqs == 1);
  info = kvbt_info(m, 1);
  CHECK(info.location == KVB_SEQ_SWAPPED_OUT && info.num_tokens == 10 && info.num_held_blocks == 3);
  CHECK_STATUS(kvb_seq_block_table(m, 1, before + 4, 4, &n), KVB_ERR_BAD_STATE);
  CHECK_STATUS(kvb_seq_append(m, 1, more, 1), KVB_ERR_BAD_STATE);
  CHECK_STATUS(kvb_seq_commit(m, 1, 0), KVB_ERR_BAD_STATE);
  CHECK_INV(m);
  /* fill the device so the old blocks are reused */
  {
    int64_t other[32];
    kvbt_iota(other, 32, 1000);
    CHECK_OK(kvb_seq_allocate(m, 2, other, 28, NULL)); /* 7 blocks: 1 free */
  }
  CHECK_OK(kvb_seq_can_swap_in(m, 1, &a));
  CHECK(a == KVB_AVAIL_LATER);
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_seq_can_swap_in(m, 1, &a));
  CHECK(a == KVB_AVAIL_OK);
  CHECK_OK(kvb_seq_swap_in(m, 1, pairs, 8, &n));
  CHECK(n == 3);
  info = kvbt_info(m, 1);
  CHECK(info.location == KVB_SEQ_ON_DEVICE && info.num_tokens == 10 && info.num_computed == 10);
  {
    int32_t after[8];
    CHECK(kvbt_table(m, 1, after) == 3);
    for (i = 0; i < 3; ++i) CHECK(pairs[2 * i + 1] == after[i]);
    /* hashes travelled with the data */
    for (i = 0; i < 2; ++i) {
      uint64_t h = 0;
      CHECK(kvbt_has_hash(m, after[i], &h) && h == hb[i]);
    }
    CHECK(!kvbt_has_hash(m, after[2], NULL));
  }
  st = kvbt_stats(m);
  CHECK(st.swapped_in_blocks == 3 && st.free_host_blocks == 4);
  /* tokens travelled too: finishing block 2 hashes the original tokens, and the prompt still hits */
  CHECK_OK(kvb_seq_append(m, 1, t + 10, 2));
  CHECK_OK(kvb_seq_commit(m, 1, 2));
  {
    uint64_t h = 0;
    CHECK(kvbt_has_hash(m, block_at(m, 1, 2), &h));
    CHECK(h == kvb_hash_tokens(&hb[1], t + 8, 4));
  }
  CHECK_OK(kvb_seq_can_allocate(m, t, 13, &n));
  CHECK(n == 12);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_swap_availability_and_free(void) {
  /* watermark 0.25 of 8 = 2 blocks kept for swap-in */
  kvb_manager* m = kvbt_make_ex(4, 8, 8, 0.25f, 0, 0);
  int64_t t[40];
  int32_t pairs[16];
  size_t n = 0;
  kvb_availability a = KVB_AVAIL_NEVER;
  kvbt_iota(t, 40, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 16, NULL)); /* 4 blocks */
  CHECK_OK(kvb_seq_swap_out(m, 1, pairs, 8, &n));
  CHECK_OK(kvb_seq_allocate(m, 2, t + 16, 12, NULL)); /* 3 blocks, 5 free */
  CHECK_OK(kvb_seq_can_swap_in(m, 1, &a));
  CHECK(a == KVB_AVAIL_LATER); /* 5 - 4 < 2 */
  CHECK_OK(kvb_seq_rollback(m, 2, 8)); /* 1 block: 7 free */
  CHECK_OK(kvb_seq_can_swap_in(m, 1, &a));
  CHECK(a == KVB_AVAIL_OK); /* 7 - 4 >= 2 */
  /* free of a swapped sequence returns its host blocks */
  CHECK(kvbt_stats(m).free_host_blocks == 4);
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK(kvbt_stats(m).free_host_blocks == 8);
  CHECK(kvbt_stats(m).num_seqs == 1);
  CHECK_INV(m);
  kvb_manager_destroy(m);
  /* NEVER: more blocks than the device pool (swap in) or the host pool (swap out) */
  m = kvbt_make_ex(4, 4, 8, 0.0f, 0, 0);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 16, NULL));
  CHECK_OK(kvb_seq_swap_out(m, 1, pairs, 8, &n));
  CHECK_OK(kvb_seq_allocate(m, 2, t, 1, NULL));
  CHECK_OK(kvb_seq_swap_out(m, 2, pairs, 8, &n));
  CHECK_OK(kvb_seq_allocate(m, 3, t, 4, NULL));
  CHECK_OK(kvb_seq_can_swap_in(m, 1, &a));
  CHECK(a == KVB_AVAIL_LATER);
  CHECK_OK(kvb_seq_free(m, 3));
  CHECK_OK(kvb_seq_can_swap_in(m, 1, &a));
  CHECK(a == KVB_AVAIL_OK);
  kvb_manager_destroy(m);
  m = kvbt_make_ex(4, 8, 2, 0.0f, 0, 0);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 12, NULL));
  CHECK_OK(kvb_seq_can_swap_out(m, 1, &a));
  CHECK(a == KVB_AVAIL_NEVER);
  kvb_manager_destroy(m);
  /* no host tier at all */
  m = kvbt_make(4, 8);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 1, NULL));
  CHECK_OK(kvb_seq_can_swap_out(m, 1, &a));
  CHECK(a == KVB_AVAIL_NEVER);
  kvb_manager_destroy(m);
}

/* Swapping a windowed sequence moves only the held blocks. */
static void test_swap_window(void) {
  kvb_manager* m = kvbt_make_ex(4, 16, 16, 0.0f, 0, 0);
  int64_t t[24];
  int32_t pairs[32], tab[8];
  size_t n = 0;
  kvb_seq_options o;
  kvbt_iota(t, 24, 1);
  kvb_seq_options_init(&o);
  o.window_tokens = 8;
  CHECK_OK(kvb_seq_allocate_ex(m, 1, t, 20, &o, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 20));
  CHECK(kvbt_info(m, 1).num_held_blocks == 2);
  CHECK_OK(kvb_seq_swap_out(m, 1, pairs, 16, &n));
  CHECK(n == 2);
  CHECK_OK(kvb_seq_swap_in(m, 1, pairs, 16, &n));
  CHECK(n == 2);
  CHECK(kvbt_table(m, 1, tab) == 5 && tab[0] == -1 && tab[2] == -1 && tab[3] >= 0 && tab[4] >= 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Batch export: padded tables, lengths, query starts, slot mapping. */
static void test_batch_export(void) {
  kvb_manager* m = kvbt_make(4, 32);
  int64_t t[32], ids[3] = {1, 2, 3};
  int32_t bt[3 * 5], lens[3], qs[4], tab[8];
  int64_t slots[16];
  kvb_batch b;
  size_t i;
  int64_t k;
  kvbt_iota(t, 32, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 10, NULL)); /* 0 1 2; 10 new */
  CHECK_OK(kvb_seq_allocate(m, 2, t + 10, 5, NULL)); /* 3 4 */
  CHECK_OK(kvb_seq_commit(m, 2, 5));
  CHECK_OK(kvb_seq_append(m, 2, t, 1)); /* 6 tokens, 1 new (slot 4*4+1) */
  CHECK_OK(kvb_seq_allocate(m, 3, t + 20, 3, NULL)); /* 5; 3 new */
  kvb_batch_init(&b);
  b.block_tables = bt;
  b.max_blocks_per_seq = 5;
  b.seq_lens = lens;
  b.query_start = qs;
  b.slot_mapping = slots;
  b.slot_capacity = 16;
  memset(bt, 0x55, sizeof bt);
  CHECK_OK(kvb_batch_export(m, ids, 3, &b));
  CHECK(b.num_slots == 14 && b.max_blocks_needed == 3);
  for (i = 0; i < 3; ++i) {
    long len = kvbt_table(m, ids[i], tab);
    long j;
    for (j = 0; j < 5; ++j) CHECK(bt[i * 5 + (size_t)j] == (j < len ? tab[j] : -1));
  }
  CHECK(lens[0] == 10 && lens[1] == 6 && lens[2] == 3);
  CHECK(qs[0] == 0 && qs[1] == 10 && qs[2] == 11 && qs[3] == 14);
  for (k = 0; k < 10; ++k) CHECK(slots[k] == (int64_t)(k / 4) * 4 + k % 4); /* blocks 0 1 2 */
  CHECK(slots[10] == 4 * 4 + 1);
  CHECK(slots[11] == 5 * 4 + 0 && slots[12] == 5 * 4 + 1 && slots[13] == 5 * 4 + 2);
  CHECK(slots[14] == -1 && slots[15] == -1);
  /* after commits, only what is new is mapped */
  CHECK_OK(kvb_seq_commit(m, 1, 10));
  CHECK_OK(kvb_seq_commit(m, 2, 1));
  CHECK_OK(kvb_seq_commit(m, 3, 3));
  CHECK_OK(kvb_seq_append(m, 1, t, 1)); /* token 10: block 2 offset 2 */
  b.slot_capacity = 2;
  CHECK_OK(kvb_batch_export(m, ids, 3, &b));
  CHECK(b.num_slots == 1 && slots[0] == 2 * 4 + 2 && slots[1] == -1);
  CHECK(qs[0] == 0 && qs[1] == 1 && qs[2] == 1 && qs[3] == 1);
  /* nothing wanted: only the sizes */
  kvb_batch_init(&b);
  CHECK_OK(kvb_batch_export(m, ids, 3, &b));
  CHECK(b.num_slots == 1 && b.max_blocks_needed == 3);
  /* an empty batch */
  kvb_batch_init(&b);
  b.query_start = qs;
  b.slot_mapping = slots;
  b.slot_capacity = 3;
  CHECK_OK(kvb_batch_export(m, NULL, 0, &b));
  CHECK(b.num_slots == 0 && b.max_blocks_needed == 0 && qs[0] == 0 && slots[0] == -1 && slots[2] == -1);
  /* a smaller struct_size (no out fields) from an older caller is refused only below the first version */
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_fork_shares_blocks);
  RUN_TEST(test_copy_on_write);
  RUN_TEST(test_fork_at);
  RUN_TEST(test_write_into_formerly_shared_full_block);
  RUN_TEST(test_rollback);
  RUN_TEST(test_sliding_window);
  RUN_TEST(test_swap_roundtrip);
  RUN_TEST(test_swap_availability_and_free);
  RUN_TEST(test_swap_window);
  RUN_TEST(test_batch_export);
  TEST_SUMMARY();
}
