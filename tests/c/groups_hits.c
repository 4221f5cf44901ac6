/* KV cache groups: the prefix hit valid for every group, at every boundary. A full group and
 * a window group share one pool; window-group blocks are evicted on purpose (the window releases them,
 * a filler sequence then takes them from the free queue), and the cached set of each group is tracked
 * from the events (kvb_drain_events_group: STORED / REMOVED per group and public hash). The hit the
 * library reports (can_allocate, allocate) and the window group's table (-1 where a block is not
 * needed) are compared with a direct transcription of the rule in kvblock.h, for windows smaller than,
 * equal to and larger than a block, with and without sinks, hits ending inside and outside the window. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvbt_common.h"

#define MAXH 4096

/* Coverage of the boundary sweep: the cases must all occur, or the sweep proves little. */
static unsigned cov_hit, cov_hole, cov_window_cut, cov_full_cut, cov_zero;

/* (group, public hash) pairs the index holds, from the events. */
typedef struct {
  uint32_t group[MAXH];
  uint64_t hash[MAXH];
  size_t n;
} cached_set;

static int cached_has(const cached_set* c, uint32_t g, uint64_t h) {
  size_t i;
  for (i = 0; i < c->n; ++i)
    if (c->group[i] == g && c->hash[i] == h) return 1;
  return 0;
}

static void drain(kvb_manager* m, cached_set* c) {
  kvb_event ev[64];
  uint32_t grp[64];
  int64_t toks[64 * 64];
  size_t n, i, j;
  uint64_t dropped = 0;
  do {
    CHECK_OK(kvb_drain_events_group(m, ev, grp, 64, toks, 64 * 64, &n, &dropped));
    CHECK(dropped == 0);
    for (i = 0; i < n; ++i) {
      if (ev[i].type == KVB_EVENT_BLOCK_STORED) {
        CHECK(!cached_has(c, grp[i], ev[i].block_hash));
        if (c->n < MAXH) {
          c->group[c->n] = grp[i];
          c->hash[c->n++] = ev[i].block_hash;
        }
      } else if (ev[i].type == KVB_EVENT_BLOCK_REMOVED) {
        for (j = 0; j < c->n && !(c->group[j] == grp[i] && c->hash[j] == ev[i].block_hash); ++j) {}
        CHECK(j < c->n);
        if (j < c->n) {
          c->group[j] = c->group[--c->n];
          c->hash[j] = c->hash[c->n];
        }
      } else {
        c->n = 0;
      }
    }
  } while (n > 0);
}

static kvb_manager* make_groups(uint32_t bs, uint32_t nblocks, uint32_t window, uint32_t sink) {
  return kvbt_make_full_window(bs, nblocks, 0, KVB_CONFIG_EVENTS, window, sink);
}

/* The rule of kvblock.h, written out directly: blocks 0..M-1 are candidates; full needs all of 0..k-1,
 * the window group the blocks of positions p+1-window .. p-1, the last computed block and the sinks. */
static int window_needs(uint32_t bs, uint32_t window, uint32_t sink, uint32_t k, uint32_t i) {
  uint64_t p = (uint64_t)k * bs, pos;
  if (i == k - 1) return 1;
  for (pos = (uint64_t)i * bs; pos < (uint64_t)(i + 1) * bs; ++pos)
    if (pos < sink || (pos + window > p && pos < p)) return 1;
  return 0;
}

static uint32_t expected_hit(const cached_set* c, const uint64_t* hashes, uint32_t M, uint32_t bs, uint32_t window,
                             uint32_t sink) {
  uint32_t k, i;
  for (k = M; k > 0; --k) {
    int ok = 1;
    for (i = 0; i < k && ok; ++i) {
      if (!cached_has(c, 0, hashes[i])) ok = 0;
      if (window_needs(bs, window, sink, k, i) && !cached_has(c, 1, hashes[i])) ok = 0;
    }
    if (ok) return k;
  }
  return 0;
}

/* One scenario: seq 1 holds prompt P (n tokens) fully computed; a filler evicts `evict` more blocks
 * than the pool's untouched ones, after seq 1 is freed (every group's blocks of P age as one: the
 * evictions cut P from its end in both groups) or, if `live`, before (the filler can only take the
 * blocks seq 1's window released, oldest first: the window group loses blocks the full group keeps).
 * Then P' = P + extra tokens is looked up. */
static void scenario(uint32_t bs, uint32_t window, uint32_t sink, uint32_t n, uint32_t evict, uint32_t extra,
                     int live) {
  const uint32_t N = 64;
  kvb_manager* m = make_groups(bs, N, window, sink);
  cached_set* c = calloc(1, sizeof *c);
  int64_t p[256], filler[256];
  uint64_t hashes[64];
  int32_t tab0[64], tab1[64];
  size_t len0, len1, cached = 0, cached2 = 0, free_blocks;
  uint32_t nb, M, k, i, f_blocks;
  kvbt_iota(p, n + extra, 1000);
  CHECK_OK(kvb_seq_allocate(m, 1, p, n, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, n));
  CHECK_OK(kvb_check_invariants(m));
  if (!live) CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_num_free_blocks(m, &free_blocks));
  CHECK(live || free_blocks == N);
  /* The free queue now starts with the blocks seq 1 never took; the filler takes those and `evict` more
     (2 groups: each filler block index costs 2 blocks). */
  f_blocks = (N - 2 * ((n + bs - 1) / bs) + evict + 1) / 2;
  if (f_blocks > free_blocks / 2) f_blocks = (uint32_t)(free_blocks / 2);
  if (f_blocks > 0 && f_blocks * bs <= 256) {
    kvbt_iota(filler, f_blocks * bs, 900000);
    CHECK_OK(kvb_seq_allocate(m, 2, filler, f_blocks * bs, NULL));
    CHECK_OK(kvb_seq_free(m, 2)); /* its blocks go to the tail */
  }
  if (live) CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_num_free_blocks(m, &free_blocks));
  CHECK(free_blocks == N); /* the pool is whole again */
  drain(m, c);
  nb = (n + extra + bs - 1) / bs;
  M = nb - 1;
  for (i = 0; i < M; ++i) hashes[i] = kvb_hash_tokens(i ? &hashes[i - 1] : NULL, p + (size_t)i * bs, bs);
  k = expected_hit(c, hashes, M, bs, window, sink);
  {
    uint32_t full = 0;
    while (full < M && cached_has(c, 0, hashes[full])) ++full;
    if (k > 0) ++cov_hit;
    else ++cov_zero;
    if (k < full) ++cov_window_cut; /* the window group ended the hit before the full group did */
    if (k == full && full < M) ++cov_full_cut;
  }
  CHECK_STATUS(kvb_seq_can_allocate(m, p, n + extra, &cached), KVB_OK);
  CHECK(cached == (size_t)k * bs);
  CHECK_OK(kvb_seq_allocate(m, 3, p, n + extra, &cached2));
  CHECK(cached2 == (size_t)k * bs);
  if (cached2 != (size_t)k * bs)
    fprintf(stderr, "  bs %u window %u sink %u n %u evict %u extra %u: cached %zu, want %u\n", bs, window, sink, n, evict,
            extra, cached2, k * bs);
  CHECK_OK(kvb_seq_block_table_group(m, 3, 0, tab0, 64, &len0));
  CHECK_OK(kvb_seq_block_table_group(m, 3, 1, tab1, 64, &len1));
  CHECK(len0 == nb && len1 == nb);
  for (i = 0; i < nb && i < 64; ++i) {
    CHECK(tab0[i] >= 0);
    /* Needed blocks are held; the window group holds nothing else before k. */
    if (i < k) CHECK((tab1[i] >= 0) == window_needs(bs, window, sink, k, i));
    if (i < k && tab1[i] < 0) ++cov_hole;
    else CHECK(tab1[i] >= 0);
    if (tab1[i] >= 0) CHECK(tab1[i] != tab0[i]);
  }
  CHECK_OK(kvb_check_invariants(m));
  drain(m, c);
  CHECK_OK(kvb_seq_commit(m, 3, n + extra - (size_t)k * bs));
  CHECK_OK(kvb_check_invariants(m));
  free(c);
  kvb_manager_destroy(m);
}

static void test_hit_boundaries(void) {
  static const uint32_t bss[] = {1, 4};
  /* KVB_TEST_QUICK (valgrind): every third eviction count only; every boundary of window, sink and
     prompt length is still swept. */
  const uint32_t quick = getenv("KVB_TEST_QUICK") ? 3 : 1;
  uint32_t bi, w, s, n, e, x;
  for (bi = 0; bi < 2; ++bi) {
    uint32_t bs = bss[bi];
    uint32_t windows[] = {1, bs > 1 ? bs - 1 : 2, bs, bs + 1, 2 * bs + 3};
    uint32_t sinks[] = {0, 1, bs, bs + 1};
    for (w = 0; w < 5; ++w)
      for (s = 0; s < 4; ++s)
        for (n = 2 * bs; n <= 6 * bs; n += bs)
          for (e = 0; e <= 12; e += (bs > 1 ? 2 : 3) * quick)
            for (x = 0; x <= bs + 1; x += bs > 1 ? bs + 1 : 2) {
              scenario(bs, windows[w], sinks[s], n, e, x, 0);
              scenario(bs, windows[w], sinks[s], n, e, x, 1);
            }
  }
  printf("  coverage: %u hits, %u without, %u cut by the window, %u cut by the full group, %u window holes\n",
         cov_hit, cov_zero, cov_window_cut, cov_full_cut, cov_hole);
  CHECK(cov_hit > 0 && cov_zero > 0 && cov_window_cut > 0 && cov_full_cut > 0 && cov_hole > 0);
}

/* The worked example of docs/ARCHITECTURE.md ("KV cache groups"): bs 4, {full, window 6}, 21 tokens;
   the window group misses blocks 0..2, then only holds block 4. */
static void test_header_example(void) {
  /* Window group blocks 0..2 released and evicted while seq 1 runs: hit at k = 5 with window table
     {-1,-1,-1,w3,w4,new}. */
  scenario(4, 6, 0, 20, 3 * 1, 1, 1);
  /* With sinks 2, block 0 is needed. */
  scenario(4, 6, 2, 20, 2, 1, 1);
}

static void test_config_errors(void) {
  kvb_config cfg;
  kvb_group_spec spec[2];
  kvb_manager* m = NULL;
  int32_t tab[8];
  size_t len;
  int64_t t[8];
  kvb_config_init(&cfg);
  kvb_group_spec_init(&spec[0]);
  kvb_group_spec_init(&spec[1]);
  cfg.num_blocks = 16;
  cfg.groups = spec;
  cfg.num_groups = 2;
  spec[1].kind = KVB_GROUP_WINDOW; /* window 0 */
  CHECK_STATUS(kvb_manager_create(&cfg, &m), KVB_ERR_INVALID_ARGUMENT);
  spec[1].window_tokens = 8;
  spec[0].sink_tokens = 2; /* sinks on a full group */
  CHECK_STATUS(kvb_manager_create(&cfg, &m), KVB_ERR_INVALID_ARGUMENT);
  spec[0].sink_tokens = 0;
  spec[0].kind = 7;
  CHECK_STATUS(kvb_manager_create(&cfg, &m), KVB_ERR_INVALID_ARGUMENT);
  spec[0].kind = KVB_GROUP_FULL;
  cfg.groups = NULL;
  CHECK_STATUS(kvb_manager_create(&cfg, &m), KVB_ERR_INVALID_ARGUMENT);
  cfg.groups = spec;
  cfg.num_host_blocks = 4; /* swapping with several groups (tests/c/groups_host.c) */
  CHECK_OK(kvb_manager_create(&cfg, &m));
  kvb_manager_destroy(m);
  cfg.flags = KVB_CONFIG_HOST_CACHE; /* and the host cache (tests/c/groups_host.c) */
  CHECK_OK(kvb_manager_create(&cfg, &m));
  kvb_manager_destroy(m);
  cfg.num_groups = 1;
  cfg.flags = 0;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  kvb_manager_destroy(m);
  cfg.num_groups = 2;
  cfg.num_host_blocks = 0;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  kvbt_iota(t, 8, 1);
  {
    kvb_seq_options o;
    kvb_seq_options_init(&o);
    o.window_tokens = 4;
    CHECK_STATUS(kvb_seq_allocate_ex(m, 1, t, 8, &o, NULL), KVB_ERR_INVALID_ARGUMENT);
  }
  CHECK_OK(kvb_seq_allocate(m, 1, t, 8, NULL));
  CHECK_STATUS(kvb_seq_set_window(m, 1, 4, 0), KVB_ERR_BAD_STATE);
  CHECK_STATUS(kvb_seq_block_table_group(m, 1, 2, tab, 8, &len), KVB_ERR_INVALID_ARGUMENT);
  CHECK_OK(kvb_seq_block_table_group(m, 1, 1, tab, 8, &len));
  CHECK(len == 1);
  {
    kvb_event ev[4];
    int64_t toks[64];
    size_t n;
    CHECK_STATUS(kvb_drain_events(m, ev, 4, toks, 64, &n, NULL), KVB_ERR_BAD_STATE); /* events off anyway */
  }
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

/* OUT_OF_BLOCKS counts every group: 2 groups x 2 blocks need 4 free blocks; all-or-nothing. */
static void test_all_or_nothing(void) {
  kvb_manager* m = make_groups(4, 6, 4, 0);
  int64_t t[16];
  size_t f;
  int32_t tab[8];
  size_t len;
  kvbt_iota(t, 16, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 8, NULL)); /* 4 blocks */
  CHECK_STATUS(kvb_seq_allocate(m, 2, t + 8, 8, NULL), KVB_ERR_OUT_OF_BLOCKS);
  CHECK_OK(kvb_num_free_blocks(m, &f));
  CHECK(f == 2);
  CHECK_OK(kvb_seq_append(m, 1, t + 8, 4)); /* one block per group */
  CHECK_STATUS(kvb_seq_append(m, 1, t + 12, 1), KVB_ERR_OUT_OF_BLOCKS);
  CHECK_OK(kvb_seq_block_table_group(m, 1, 1, tab, 8, &len));
  CHECK(len == 3);
  CHECK_OK(kvb_num_free_blocks(m, &f));
  CHECK(f == 0);
  /* Committing lets the window group give back what no query reaches: window 4 at position 12. */
  CHECK_OK(kvb_seq_commit(m, 1, 12));
  CHECK_OK(kvb_seq_block_table_group(m, 1, 1, tab, 8, &len));
  CHECK(tab[0] == -1 && tab[1] == -1 && tab[2] >= 0);
  CHECK_OK(kvb_num_free_blocks(m, &f));
  CHECK(f == 2);
  CHECK_OK(kvb_seq_append(m, 1, t + 12, 1));
  CHECK_STATUS(kvb_seq_rollback(m, 1, 6), KVB_ERR_BAD_STATE); /* ends in a released window block */
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_config_errors);
  RUN_TEST(test_all_or_nothing);
  RUN_TEST(test_header_example);
  RUN_TEST(test_hit_boundaries);
  TEST_SUMMARY();
}
