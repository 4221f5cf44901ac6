/* Tiered prefix cache (KVB_CONFIG_HOST_CACHE): evicted device blocks are offloaded to host
 * blocks and stay findable; hits from the host come back through load pairs; the host copy of a loaded
 * block is kept until room is needed and dropped first; stats and events say which tier. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvbt_common.h"

#define BS 4

static kvb_manager* make_tiered(uint32_t device, uint32_t host, uint32_t flags) {
  return kvbt_make_ex(BS, device, host, 0.0f, KVB_CONFIG_HOST_CACHE | flags, 0);
}

typedef struct transfers {
  int32_t off[64], load[64];
  size_t noff, nload;
} transfers;

static transfers drain(kvb_manager* m) {
  transfers t;
  memset(&t, 0, sizeof t);
  CHECK_OK(kvb_drain_host_transfers(m, t.off, 32, &t.noff, t.load, 32, &t.nload));
  return t;
}

/* Computes a prompt (commit everything) and frees it: its full blocks are cached-free on the device. */
static void compute(kvb_manager* m, int64_t id, const int64_t* t, size_t n) {
  CHECK_OK(kvb_seq_allocate(m, id, t, n, NULL));
  CHECK_OK(kvb_seq_commit(m, id, n));
  CHECK_OK(kvb_seq_free(m, id));
}

static void test_offload_then_host_hit(void) {
  kvb_manager* m = make_tiered(4, 8, 0);
  int64_t a[13], b[16];
  int32_t tab[KVBT_MAX_BLOCKS];
  transfers tr, first;
  size_t cached = 0, i;
  kvb_stats st;
  kvbt_iota(a, 13, 100);
  kvbt_iota(b, 16, 900);
  compute(m, 1, a, 12); /* blocks 0, 1, 2 cached on the device */
  tr = drain(m);
  CHECK(tr.noff == 0 && tr.nload == 0);
  compute(m, 2, b, 16); /* takes all four device blocks: three cached ones are evicted and offloaded */
  tr = drain(m);
  CHECK(tr.noff == 3 && tr.nload == 0);
  /* device src in eviction order: the queue held 3 2 1 0 (frees go last block first) */
  CHECK(tr.off[0] == 2 && tr.off[2] == 1 && tr.off[4] == 0);
  first = tr;
  /* The first prompt again (one more token): its three blocks come back from the host. */
  CHECK_OK(kvb_seq_can_allocate(m, a, 13, &cached));
  CHECK(cached == 12);
  CHECK_OK(kvb_seq_allocate(m, 3, a, 13, &cached));
  CHECK(cached == 12);
  CHECK(kvbt_table(m, 3, tab) == 4);
  tr = drain(m);
  CHECK(tr.nload == 3);
  for (i = 0; i < tr.nload && i < 3; ++i) {
    CHECK(tr.load[2 * i] == first.off[2 * (2 - i) + 1]); /* host src: where block i (device block i) went */
    CHECK(tr.load[2 * i + 1] == tab[i]);               /* device dst: the sequence's block i */
  }
  st = kvbt_stats(m);
  CHECK(st.host_hit_tokens == 12 && st.device_hit_tokens == 0 && st.hit_tokens == 12);
  CHECK(st.loaded_blocks == 3 && st.offloaded_blocks >= 3);
  /* Loaded blocks are device-cached again: a second request hits them on the device. */
  CHECK_OK(kvb_seq_commit(m, 3, 1));
  CHECK_OK(kvb_seq_free(m, 3));
  CHECK_OK(kvb_seq_allocate(m, 4, a, 13, &cached));
  CHECK(cached == 12);
  tr = drain(m);
  CHECK(tr.nload == 0);
  CHECK(kvbt_stats(m).device_hit_tokens == 12);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* A block loaded back keeps its host copy: evicting the device copy again moves nothing. */
static void test_kept_host_copy_moves_nothing(void) {
  kvb_manager* m = make_tiered(4, 8, 0);
  int64_t a[9], b[16], c[16];
  int32_t t3[KVBT_MAX_BLOCKS];
  transfers tr;
  size_t i, cached = 0;
  kvbt_iota(a, 9, 100);
  kvbt_iota(b, 16, 900);
  kvbt_iota(c, 16, 5000);
  compute(m, 1, a, 8);
  compute(m, 2, b, 16); /* offloads a's two blocks */
  drain(m);
  CHECK_OK(kvb_seq_allocate(m, 3, a, 9, &cached)); /* loads them */
  CHECK(cached == 8);
  CHECK(kvbt_table(m, 3, t3) == 3);
  tr = drain(m);
  CHECK(tr.nload == 2);
  CHECK_OK(kvb_seq_commit(m, 3, 1));
  CHECK_OK(kvb_seq_free(m, 3));
  compute(m, 4, c, 16); /* evicts every device block, a's loaded copies among them */
  tr = drain(m);
  for (i = 0; i < tr.noff; ++i) CHECK(tr.off[2 * i] != t3[0] && tr.off[2 * i] != t3[1]);
  CHECK_OK(kvb_seq_can_allocate(m, a, 9, &cached)); /* still on the host */
  CHECK(cached == 8);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* When the host is full, the host copy of a block that is also on the device goes first. */
static void test_twin_dropped_first(void) {
  kvb_manager* m = make_tiered(3, 3, 0);
  int64_t x[5], y[5], z[8], w[5];
  size_t cached = 0;
  kvbt_iota(x, 5, 10);
  kvbt_iota(y, 5, 20);
  kvbt_iota(z, 8, 30);
  kvbt_iota(w, 5, 50);
  compute(m, 1, x, 4); /* device queue afterwards: 1 2 0(X) */
  compute(m, 2, y, 4); /* 2 0(X) 1(Y) */
  compute(m, 3, z, 8); /* takes 2 and 0: X goes to the host */
  drain(m);
  CHECK_OK(kvb_seq_allocate(m, 4, x, 5, &cached)); /* X from the host; Y and Z's block 1 go to the host */
  CHECK(cached == 4);
  drain(m);
  CHECK_OK(kvb_seq_commit(m, 4, 1));
  CHECK_OK(kvb_seq_free(m, 4));
  compute(m, 5, w, 4); /* evicts Z's block 0: the host is full, and X's host copy (X is on the device) goes */
  drain(m);
  CHECK_OK(kvb_seq_can_allocate(m, y, 5, &cached));
  CHECK(cached == 4); /* Y survived on the host */
  CHECK_OK(kvb_seq_can_allocate(m, x, 5, &cached));
  CHECK(cached == 4); /* X is still on the device */
  CHECK(kvbt_stats(m).host_evictions == 1);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* With room for twins (host_cache_twin_percent 100), the twin is kept and the unique LRU block goes. */
static void test_twin_budget_keeps_twin(void) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  int64_t x[5], y[5], z[8], w[5];
  size_t cached = 0;
  kvb_config_init(&cfg);
  CHECK(cfg.host_cache_twin_percent == 1);
  cfg.block_size = BS;
  cfg.num_blocks = 3;
  cfg.num_host_blocks = 3;
  cfg.flags = KVB_CONFIG_HOST_CACHE;
  cfg.host_cache_twin_percent = 101;
  CHECK_STATUS(kvb_manager_create(&cfg, &m), KVB_ERR_INVALID_ARGUMENT);
  CHECK_MSG("host_cache_twin_percent 101");
  cfg.host_cache_twin_percent = 100;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  if (!m) return;
  kvbt_iota(x, 5, 10);
  kvbt_iota(y, 5, 20);
  kvbt_iota(z, 8, 30);
  kvbt_iota(w, 5, 50);
  /* as in test_twin_dropped_first: the host holds X (twin), Y, Z1 when W needs a host block */
  compute(m, 1, x, 4);
  compute(m, 2, y, 4);
  compute(m, 3, z, 8);
  drain(m);
  CHECK_OK(kvb_seq_allocate(m, 4, x, 5, &cached));
  drain(m);
  CHECK_OK(kvb_seq_commit(m, 4, 1));
  CHECK_OK(kvb_seq_free(m, 4));
  compute(m, 5, w, 4);
  drain(m);
  CHECK_OK(kvb_seq_can_allocate(m, y, 5, &cached));
  CHECK(cached == 0); /* Y, the least recently used unique block, went */
  CHECK(kvbt_stats(m).host_evictions == 1 && kvbt_stats(m).cached_host_blocks == 3);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* OUT_OF_BLOCKS stays all-or-nothing with host hits (each needs a free device block). */
static void test_out_of_blocks_with_host_hits(void) {
  kvb_manager* m = make_tiered(3, 4, 0);
  int64_t a[9], b[12];
  int64_t ids[2] = {3, 4};
  size_t cached = 0;
  kvbt_iota(a, 9, 100);
  kvbt_iota(b, 12, 900);
  compute(m, 1, a, 8);
  compute(m, 2, b, 12); /* a's blocks on the host */
  drain(m);
  CHECK_OK(kvb_seq_allocate(m, 3, b, 4, NULL)); /* holds one device block: 2 free */
  EXPECT_FAIL(m, ids, 2, kvb_seq_allocate(m, 4, a, 9, NULL), KVB_ERR_OUT_OF_BLOCKS, "needs 3 free blocks");
  CHECK_STATUS(kvb_seq_can_allocate(m, a, 9, &cached), KVB_ERR_OUT_OF_BLOCKS);
  CHECK(cached == 8);
  {
    transfers tr = drain(m);
    CHECK(tr.nload == 0);
  }
  CHECK_OK(kvb_seq_free(m, 3));
  CHECK_OK(kvb_seq_allocate(m, 4, a, 9, &cached));
  CHECK(cached == 8);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Swapped-out sequences win: a swap out evicts cached host blocks. */
static void test_swap_out_evicts_cache(void) {
  kvb_manager* m = make_tiered(4, 3, 0);
  int64_t a[12], b[16];
  int32_t pairs[16];
  size_t n = 0, cached = 0;
  kvb_availability av;
  kvb_stats st;
  kvbt_iota(a, 12, 100);
  kvbt_iota(b, 16, 900);
  compute(m, 1, a, 12);
  compute(m, 2, b, 16); /* host: a's 3 blocks, full */
  drain(m);
  st = kvbt_stats(m);
  CHECK(st.cached_host_blocks == 3 && st.free_host_blocks == 0);
  CHECK_OK(kvb_seq_allocate(m, 3, b, 8, NULL)); /* one hit, one new block: its eviction offloads b's block */
  drain(m);
  st = kvbt_stats(m);
  CHECK(st.cached_host_blocks == 3 && st.host_evictions == 1); /* a's block 0 made room */
  CHECK_OK(kvb_seq_can_swap_out(m, 3, &av));
  CHECK(av == KVB_AVAIL_OK);
  CHECK_OK(kvb_seq_swap_out(m, 3, pairs, 8, &n));
  CHECK(n == 2);
  st = kvbt_stats(m);
  CHECK(st.cached_host_blocks == 1 && st.host_evictions == 3);
  CHECK_OK(kvb_seq_can_allocate(m, a, 12, &cached)); /* a's first blocks were evicted (oldest first) */
  CHECK(cached == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Events name the medium: the device's and the host's hash sets are reported separately. */
static void test_events_carry_medium(void) {
  kvb_manager* m = make_tiered(2, 4, KVB_CONFIG_EVENTS);
  int64_t a[8], b[8];
  kvb_event ev[32];
  int64_t et[32 * BS];
  size_t n = 0, i, host_stored = 0, dev_removed = 0;
  kvbt_iota(a, 8, 100);
  kvbt_iota(b, 8, 900);
  compute(m, 1, a, 8);
  CHECK_OK(kvb_drain_events(m, ev, 32, et, 32 * BS, &n, NULL));
  CHECK(n == 2);
  for (i = 0; i < n; ++i) CHECK(ev[i].medium == KVB_MEDIUM_DEVICE && ev[i].type == KVB_EVENT_BLOCK_STORED);
  compute(m, 2, b, 8); /* evicts both: REMOVED on the device, STORED on the host (with tokens, parent) */
  CHECK_OK(kvb_drain_events(m, ev, 32, et, 32 * BS, &n, NULL));
  for (i = 0; i < n; ++i) {
    if (ev[i].medium == KVB_MEDIUM_HOST && ev[i].type == KVB_EVENT_BLOCK_STORED) {
      ++host_stored;
      CHECK(ev[i].num_tokens == BS);
      if (et[ev[i].token_offset] == 100) CHECK(ev[i].parent_kind == KVB_PARENT_NONE);
      else CHECK(et[ev[i].token_offset] == 104 && ev[i].parent_kind == KVB_PARENT_BLOCK &&
                 ev[i].parent_hash == kvb_hash_tokens(NULL, a, BS));
    }
    dev_removed += ev[i].medium == KVB_MEDIUM_DEVICE && ev[i].type == KVB_EVENT_BLOCK_REMOVED;
  }
  CHECK(host_stored == 2 && dev_removed == 2);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static void test_drain_buffer_too_small(void) {
  kvb_manager* m = make_tiered(2, 4, 0);
  int64_t a[8], b[8];
  int32_t off[8], load[8];
  size_t no = 99, nl = 99;
  int64_t ids[1] = {1};
  kvbt_iota(a, 8, 100);
  kvbt_iota(b, 8, 900);
  compute(m, 1, a, 8);
  compute(m, 2, b, 8);
  EXPECT_FAIL(m, ids, 1, kvb_drain_host_transfers(m, off, 1, &no, load, 4, &nl), KVB_ERR_BUFFER_TOO_SMALL,
              "2 offloads (capacity 1)");
  CHECK(no == 2 && nl == 0);
  CHECK_OK(kvb_drain_host_transfers(m, off, 2, &no, load, 0, &nl));
  CHECK(no == 2 && nl == 0);
  CHECK_OK(kvb_drain_host_transfers(m, off, 2, &no, NULL, 0, &nl));
  CHECK(no == 0 && nl == 0);
  kvb_manager_destroy(m);
}

/* A host block read by a pending load is still cached content (a second prompt can hit it before the
   drain): cached_host_blocks counts it. It used to count only the evictable ones, so it read 0 here. */
static void test_pinned_host_blocks_stay_cached(void) {
  kvb_manager* m = make_tiered(3, 2, 0);
  int64_t a[9], b[9];
  size_t cached = 0;
  kvbt_iota(a, 9, 100);
  kvbt_iota(b, 9, 900);
  compute(m, 1, a, 9); /* two full blocks cached on the device */
  compute(m, 2, b, 9); /* evicts and offloads both */
  drain(m);
  CHECK(kvbt_stats(m).cached_host_blocks == 2);
  /* Two host hits: loads pending, host sources pinned (b's blocks, evicted now, find no host room). */
  CHECK_OK(kvb_seq_allocate(m, 3, a, 9, &cached));
  CHECK(cached == 8 && kvbt_stats(m).host_hit_tokens == 8);
  CHECK(kvbt_stats(m).cached_host_blocks == 2 && kvbt_stats(m).free_host_blocks == 0);
  CHECK_OK(kvb_check_invariants(m));
  drain(m);
  CHECK(kvbt_stats(m).cached_host_blocks == 2); /* now twins of the loaded device blocks */
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_offload_then_host_hit);
  RUN_TEST(test_kept_host_copy_moves_nothing);
  RUN_TEST(test_twin_dropped_first);
  RUN_TEST(test_twin_budget_keeps_twin);
  RUN_TEST(test_out_of_blocks_with_host_hits);
  RUN_TEST(test_swap_out_evicts_cache);
  RUN_TEST(test_events_carry_medium);
  RUN_TEST(test_drain_buffer_too_small);
  RUN_TEST(test_pinned_host_blocks_stay_cached);
  TEST_SUMMARY();
}
