/* Statistics, prefix-cache events (KVB_CONFIG_EVENTS) and kvb_reset_prefix_cache through the C API. */
#include "kvbt_common.h"

static size_t drain(kvb_manager* m, kvb_event* ev, size_t cap, int64_t* tk, size_t tcap, uint64_t* dropped) {
  size_t n = 0;
  kvb_status s = kvb_drain_events(m, ev, cap, tk, tcap, &n, dropped);
  if (s != KVB_OK) {
    fprintf(stderr, "drain: %s (%s)\n", kvb_status_string(s), kvb_last_error());
    kvbt_case_failures++;
    return 0;
  }
  return n;
}

static void test_stats_counters(void) {
  kvb_manager* m = kvbt_make_ex(4, 8, 4, 0.0f, 0, 0);
  int64_t t[16];
  int32_t pairs[8];
  size_t n = 0;
  kvb_stats st = kvbt_stats(m);
  kvbt_iota(t, 16, 1);
  CHECK(st.block_size == 4 && st.num_blocks == 8 && st.free_blocks == 8 && st.used_blocks == 0 &&
        st.cached_free_blocks == 0 && st.num_seqs == 0 && st.query_tokens == 0 && st.hit_tokens == 0 &&
        st.computed_tokens == 0 && st.evictions == 0 && st.cow_copies == 0 && st.swapped_out_blocks == 0 &&
        st.swapped_in_blocks == 0 && st.num_host_blocks == 4 && st.free_host_blocks == 4 && st.events_dropped == 0);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 10, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 7));
  st = kvbt_stats(m);
  CHECK(st.free_blocks == 5 && st.used_blocks == 3 && st.num_seqs == 1 && st.query_tokens == 10 &&
        st.computed_tokens == 7 && st.hit_tokens == 0);
  CHECK_OK(kvb_seq_commit(m, 1, 3));
  /* can_allocate is a query only: no counters move */
  CHECK_OK(kvb_seq_can_allocate(m, t, 10, &n));
  st = kvbt_stats(m);
  CHECK(st.query_tokens == 10 && st.hit_tokens == 0);
  CHECK_OK(kvb_seq_allocate(m, 2, t, 10, &n));
  CHECK(n == 8);
  st = kvbt_stats(m);
  CHECK(st.query_tokens == 20 && st.hit_tokens == 8 && st.used_blocks == 4 && st.num_seqs == 2 &&
        st.computed_tokens == 10);
  /* hit blocks are not "computed" by the caller */
  CHECK_OK(kvb_seq_commit(m, 2, 2));
  CHECK(kvbt_stats(m).computed_tokens == 12);
  CHECK_OK(kvb_seq_free(m, 1));
  st = kvbt_stats(m);
  CHECK(st.used_blocks == 3 && st.cached_free_blocks == 0 && st.free_blocks == 5); /* 0,1 still held by seq 2 */
  CHECK_OK(kvb_seq_free(m, 2));
  st = kvbt_stats(m);
  CHECK(st.used_blocks == 0 && st.free_blocks == 8 && st.cached_free_blocks == 2 && st.num_seqs == 0);
  /* cow */
  CHECK_OK(kvb_seq_allocate(m, 3, t + 4, 2, NULL));
  CHECK_OK(kvb_seq_commit(m, 3, 2));
  CHECK_OK(kvb_seq_fork(m, 3, 4));
  CHECK_OK(kvb_seq_append(m, 4, t, 1));
  CHECK(kvbt_stats(m).cow_copies == 1);
  CHECK_OK(kvb_drain_copies(m, pairs, 4, &n));
  /* swaps */
  CHECK_OK(kvb_seq_swap_out(m, 4, pairs, 4, &n));
  st = kvbt_stats(m);
  CHECK(st.swapped_out_blocks == 1 && st.free_host_blocks == 3 && st.num_seqs == 2);
  CHECK_OK(kvb_seq_swap_in(m, 4, pairs, 4, &n));
  st = kvbt_stats(m);
  CHECK(st.swapped_in_blocks == 1 && st.free_host_blocks == 4);
  /* evictions: fill the pool */
  CHECK_OK(kvb_seq_free(m, 3));
  CHECK_OK(kvb_seq_free(m, 4));
  CHECK_OK(kvb_seq_allocate(m, 5, t + 100 - 100, 1, NULL));
  {
    int64_t other[32];
    kvbt_iota(other, 32, 500);
    CHECK_OK(kvb_seq_allocate(m, 6, other, 28, NULL));
  }
  st = kvbt_stats(m);
  CHECK(st.evictions == 2 && st.cached_free_blocks == 0 && st.free_blocks == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Versioned output: a caller with a larger (newer) struct gets the known fields, the rest untouched. */
static void test_stats_struct_size(void) {
  kvb_manager* m = kvbt_make(4, 8);
  unsigned char buf[sizeof(kvb_stats) + 16];
  kvb_stats* st = (kvb_stats*)(void*)buf;
  size_t i;
  memset(buf, 0xcd, sizeof buf);
  st->struct_size = (uint32_t)sizeof buf;
  CHECK_OK(kvb_get_stats(m, st));
  CHECK(st->struct_size == sizeof buf);
  CHECK(st->num_blocks == 8 && st->free_blocks == 8 && st->block_size == 4);
  for (i = sizeof(kvb_stats); i < sizeof buf; ++i) CHECK(buf[i] == 0xcd);
  {
    kvb_seq_info info;
    int64_t t[3] = {1, 2, 3};
    CHECK_OK(kvb_seq_allocate(m, 1, t, 3, NULL));
    memset(&info, 0xcd, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(kvb_seq_get_info(m, 1, &info));
    CHECK(info.num_tokens == 3 && info.num_blocks == 1 && info.window_tokens == 0);
  }
  kvb_manager_destroy(m);
}

static void test_events_stored(void) {
  kvb_manager* m = kvbt_make_ex(4, 16, 0, 0.0f, KVB_CONFIG_EVENTS, 0);
  int64_t t[16], tk[64];
  kvb_event ev[8];
  uint64_t dropped = 99, h0, h1, salt = 0xabcdef;
  size_t n, i;
  kvb_seq_options o;
  uint32_t kb[1] = {0};
  uint64_t kk[1] = {4242};
  kvbt_iota(t, 16, 1);
  CHECK(drain(m, ev, 8, tk, 64, &dropped) == 0);
  CHECK(dropped == 0);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 10, NULL));
  CHECK(drain(m, ev, 8, tk, 64, NULL) == 0); /* nothing before commit */
  CHECK_OK(kvb_seq_commit(m, 1, 10));
  h0 = kvb_hash_tokens(NULL, t, 4);
  h1 = kvb_hash_tokens(&h0, t + 4, 4);
  n = drain(m, ev, 8, tk, 64, &dropped);
  CHECK(n == 2 && dropped == 0);
  CHECK(ev[0].type == KVB_EVENT_BLOCK_STORED && ev[0].parent_kind == KVB_PARENT_NONE && ev[0].block_hash == h0 &&
        ev[0].num_tokens == 4 && ev[0].token_offset == 0 && ev[0].block_id == 0 && ev[0].has_extra_key == 0);
  CHECK(ev[1].type == KVB_EVENT_BLOCK_STORED && ev[1].parent_kind == KVB_PARENT_BLOCK && ev[1].parent_hash == h0 &&
        ev[1].block_hash == h1 && ev[1].num_tokens == 4 && ev[1].token_offset == 4 && ev[1].block_id == 1);
  for (i = 0; i < 8; ++i) CHECK(tk[i] == t[i]);
  /* the hash in the event is the chain over the event's own tokens */
  CHECK(kvb_hash_tokens(NULL, tk + ev[0].token_offset, ev[0].num_tokens) == ev[0].block_hash);
  CHECK(kvb_hash_tokens(&ev[1].parent_hash, tk + ev[1].token_offset, ev[1].num_tokens) == ev[1].block_hash);
  /* a hit re-commits nothing: no event; a second copy of a known hash is not announced again */
  CHECK_OK(kvb_seq_allocate(m, 2, t, 10, NULL));
  CHECK_OK(kvb_seq_commit(m, 2, 2));
  CHECK(drain(m, ev, 8, tk, 64, NULL) == 0);
  /* salted, with an extra key on block 0 */
  kvb_seq_options_init(&o);
  o.has_cache_salt = 1;
  o.cache_salt = salt;
  o.extra_key_blocks = kb;
  o.extra_keys = kk;
  o.num_extra_keys = 1;
  CHECK_OK(kvb_seq_allocate_ex(m, 3, t, 5, &o, NULL));
  CHECK_OK(kvb_seq_commit(m, 3, 5));
  n = drain(m, ev, 8, tk, 64, NULL);
  CHECK(n == 1);
  CHECK(ev[0].type == KVB_EVENT_BLOCK_STORED && ev[0].parent_kind == KVB_PARENT_SALT && ev[0].parent_hash == salt &&
        ev[0].has_extra_key == 1 && ev[0].extra_key == 4242);
  {
    uint64_t hb = 0;
    CHECK(kvbt_has_hash(m, ev[0].block_id, &hb) && hb == ev[0].block_hash);
    CHECK(hb != kvb_hash_tokens(&salt, t, 4)); /* the extra key is hashed in too */
  }
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_events_removed_and_cleared(void) {
  kvb_manager* m = kvbt_make_ex(4, 4, 0, 0.0f, KVB_CONFIG_EVENTS, 0);
  int64_t t[16], other[16], tk[64];
  kvb_event ev[8];
  size_t n, cached = 0;
  uint64_t h0, h1;
  kvbt_iota(t, 16, 1);
  kvbt_iota(other, 16, 300);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 9, NULL)); /* 0 1 2 */
  CHECK_OK(kvb_seq_commit(m, 1, 9));
  CHECK(drain(m, ev, 8, tk, 64, NULL) == 2);
  h0 = ev[0].block_hash;
  h1 = ev[1].block_hash;
  CHECK_OK(kvb_seq_free(m, 1)); /* queue 3 2 1 0 */
  CHECK(drain(m, ev, 8, tk, 64, NULL) == 0);
  CHECK_OK(kvb_seq_allocate(m, 2, other, 12, NULL)); /* 3 2 1: evicts block 1 */
  n = drain(m, ev, 8, tk, 64, NULL);
  CHECK(n == 1);
  CHECK(ev[0].type == KVB_EVENT_BLOCK_REMOVED && ev[0].block_hash == h1 && ev[0].block_id == 1 && ev[0].num_tokens == 0);
  /* rollback of a committed full block that becomes partial: REMOVED */
  CHECK_OK(kvb_seq_commit(m, 2, 12)); /* blocks 3 2 1 stored */
  CHECK(drain(m, ev, 8, tk, 64, NULL) == 3);
  CHECK_OK(kvb_seq_rollback(m, 2, 2));
  n = drain(m, ev, 8, tk, 64, NULL);
  CHECK(n == 1 && ev[0].type == KVB_EVENT_BLOCK_REMOVED && ev[0].block_id == 1);
  /* reset: refused while in use, then ALL_CLEARED */
  CHECK_STATUS(kvb_reset_prefix_cache(m), KVB_ERR_BAD_STATE);
  CHECK(drain(m, ev, 8, tk, 64, NULL) == 0);
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK(kvbt_stats(m).cached_free_blocks == 3);
  CHECK_OK(kvb_reset_prefix_cache(m));
  n = drain(m, ev, 8, tk, 64, NULL);
  CHECK(n == 1 && ev[0].type == KVB_EVENT_ALL_CLEARED && ev[0].num_tokens == 0);
  CHECK(kvbt_stats(m).cached_free_blocks == 0);
  CHECK(!kvbt_has_hash(m, 0, NULL) && !kvbt_has_hash(m, 3, NULL));
  CHECK_OK(kvb_seq_can_allocate(m, t, 9, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_can_allocate(m, other, 12, &cached));
  CHECK(cached == 0);
  (void)h0;
  CHECK_OK(kvb_reset_prefix_cache(m)); /* on an empty index, fine too */
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_events_overflow_and_partial_drain(void) {
  kvb_manager* m = kvbt_make_ex(2, 32, 0, 0.0f, KVB_CONFIG_EVENTS, 3);
  int64_t t[32], tk[16];
  kvb_event ev[8];
  uint64_t dropped = 0;
  size_t n;
  kvbt_iota(t, 32, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 11, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 11)); /* 5 full blocks: 3 kept, 2 dropped */
  CHECK(kvbt_stats(m).events_dropped == 2);
  /* partial drains: token room for one block at a time, then event room for one */
  n = drain(m, ev, 8, tk, 3, &dropped);
  CHECK(n == 1 && dropped == 2 && ev[0].block_hash == kvb_hash_tokens(NULL, t, 2) && ev[0].token_offset == 0);
  CHECK(tk[0] == 1 && tk[1] == 2);
  n = drain(m, ev, 1, tk, 16, &dropped);
  CHECK(n == 1 && dropped == 0 && ev[0].parent_hash == kvb_hash_tokens(NULL, t, 2));
  CHECK(tk[0] == 3 && tk[1] == 4);
  n = drain(m, ev, 8, tk, 16, &dropped);
  CHECK(n == 1 && dropped == 0 && tk[0] == 5);
  CHECK(drain(m, ev, 8, tk, 16, &dropped) == 0);
  CHECK(kvbt_stats(m).events_dropped == 2); /* cumulative */
  /* an empty queue drains into empty buffers */
  n = 7;
  CHECK_OK(kvb_drain_events(m, NULL, 0, NULL, 0, &n, NULL));
  CHECK(n == 0);
  /* after draining, new events fit again */
  CHECK_OK(kvb_seq_append(m, 1, t + 11, 1));
  CHECK_OK(kvb_seq_commit(m, 1, 1));
  CHECK(drain(m, ev, 8, tk, 16, &dropped) == 1 && dropped == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Swap-in makes a committed block findable again (and announces it) if no other block took its hash. */
static void test_events_swap(void) {
  kvb_manager* m = kvbt_make_ex(4, 4, 4, 0.0f, KVB_CONFIG_EVENTS, 0);
  int64_t t[16], other[16], tk[64];
  kvb_event ev[8];
  int32_t pairs[8];
  size_t n = 0, cached = 0;
  kvbt_iota(t, 16, 1);
  kvbt_iota(other, 16, 800);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 6, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 6));
  CHECK(drain(m, ev, 8, tk, 64, NULL) == 1);
  CHECK_OK(kvb_seq_swap_out(m, 1, pairs, 4, &n));
  CHECK(n == 2);
  /* the device copy is still cached until reused */
  CHECK_OK(kvb_seq_can_allocate(m, t, 6, &cached));
  CHECK(cached == 4);
  CHECK_OK(kvb_seq_allocate(m, 2, other, 16, NULL)); /* every block reused: REMOVED for block 0 */
  n = drain(m, ev, 8, tk, 64, NULL);
  CHECK(n == 1 && ev[0].type == KVB_EVENT_BLOCK_REMOVED);
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_seq_swap_in(m, 1, pairs, 4, &n));
  n = drain(m, ev, 8, tk, 64, NULL);
  CHECK(n == 1 && ev[0].type == KVB_EVENT_BLOCK_STORED && ev[0].block_hash == kvb_hash_tokens(NULL, t, 4) &&
        ev[0].parent_kind == KVB_PARENT_NONE && tk[0] == 1 && tk[3] == 4);
  CHECK_OK(kvb_seq_can_allocate(m, t, 6, &cached));
  CHECK(cached == 4);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_stats_counters);
  RUN_TEST(test_stats_struct_size);
  RUN_TEST(test_events_stored);
  RUN_TEST(test_events_removed_and_cleared);
  RUN_TEST(test_events_overflow_and_partial_drain);
  RUN_TEST(test_events_swap);
  TEST_SUMMARY();
}
