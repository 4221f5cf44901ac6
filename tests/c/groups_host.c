/* KV cache groups with the host tier. Swapping moves every group's held blocks at once
 * (one host table per group; pairs are plain (device, host) ids of the shared pools, group 0's first),
 * window slots released before the swap stay released, a failed swap changes nothing in any group, and
 * swap-in makes each group's committed blocks findable again under that group's key. The host prefix
 * cache (KVB_CONFIG_HOST_CACHE) offloads each group's evicted blocks under the group's key: a prefix
 * evicted from the device comes back through loads in every group that needs it, events say the group
 * and the medium, a block of one group never satisfies another, and a refused allocation loads nothing. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvbt_common.h"

#define BS 4
#define MAXB 32

static kvb_manager* make(uint32_t device, uint32_t host, uint32_t flags, uint32_t window, uint32_t sink) {
  return kvbt_make_full_window(BS, device, host, flags, window, sink);
}

/* Table of group g; returns its length, -1 on error (swapped out). */
static long gtable(kvb_manager* m, int64_t id, uint32_t g, int32_t* out) {
  size_t len = 0;
  if (kvb_seq_block_table_group(m, id, g, out, MAXB, &len) != KVB_OK) return -1;
  return (long)len;
}

/* What a failed call must leave unchanged with groups: kvbt_snap (group 0) plus group 1's tables. */
typedef struct {
  kvbt_snap base;
  long len1[KVBT_MAX_SEQS];
  int32_t tab1[KVBT_MAX_SEQS][MAXB];
} gsnap;

static void gsnap_take(kvb_manager* m, const int64_t* ids, int n, gsnap* s) {
  int i;
  memset(s, 0, sizeof *s);
  kvbt_snap_take(m, ids, n, &s->base);
  for (i = 0; i < n && i < KVBT_MAX_SEQS; ++i) s->len1[i] = gtable(m, ids[i], 1, s->tab1[i]);
}

static int gsnap_eq(const gsnap* a, const gsnap* b) {
  return kvbt_snap_eq(&a->base, &b->base) && memcmp(a->len1, b->len1, sizeof a->len1) == 0 &&
         memcmp(a->tab1, b->tab1, sizeof a->tab1) == 0;
}

#define EXPECT_FAIL_G(m, ids, nids, expr, want)                                        \
  do {                                                                                 \
    gsnap before_, after_;                                                             \
    gsnap_take((m), (ids), (nids), &before_);                                          \
    CHECK_STATUS(expr, want);                                                          \
    CHECK_INV(m);                                                                      \
    gsnap_take((m), (ids), (nids), &after_);                                           \
    if (!gsnap_eq(&before_, &after_)) {                                                \
      fprintf(stderr, "%s:%d: %s changed the manager\n", __FILE__, __LINE__, #expr);   \
      kvbt_case_failures++;                                                            \
    }                                                                                  \
  } while (0)

/* The public hash of block i of tokens t (the chain is the same in every group). */
static uint64_t chain_hash(const int64_t* t, uint32_t i) {
  uint64_t h = 0;
  uint32_t j;
  for (j = 0; j <= i; ++j) h = kvb_hash_tokens(j ? &h : NULL, t + (size_t)j * BS, BS);
  return h;
}

/* A full and a window group: the window group's released slots (-1) stay released through a swap, the
   pairs list group 0's held blocks then group 1's, a swap that cannot be done (pair buffer, host blocks,
   device blocks) changes nothing, and the content comes back intact. */
static void test_swap_full_and_window(void) {
  kvb_manager* m = make(24, 16, 0, 6, 0);
  int64_t t[64], other[64];
  int32_t t0[MAXB], t1[MAXB], n0[MAXB], n1[MAXB], out[2 * MAXB], in[2 * MAXB];
  int64_t ids[2] = {1, 2};
  size_t np = 0, i, k;
  long l0, l1;
  kvb_availability a;
  kvb_seq_info info;
  kvb_stats st;
  kvbt_iota(t, 64, 100);
  kvbt_iota(other, 64, 5000);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 20, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 20)); /* window 6 at 20 computed: blocks 0..2 released in group 1 */
  CHECK_OK(kvb_seq_append(m, 1, t + 20, 2));
  l0 = gtable(m, 1, 0, t0);
  l1 = gtable(m, 1, 1, t1);
  CHECK(l0 == 6 && l1 == 6);
  CHECK(t1[0] == -1 && t1[1] == -1 && t1[2] == -1 && t1[3] >= 0 && t1[4] >= 0 && t1[5] >= 0);
  CHECK(kvbt_info(m, 1).num_held_blocks == 9);

  /* Counts cover both groups: 9 pairs; a buffer of 8 is refused with the size, and nothing moves. */
  CHECK_OK(kvb_seq_can_swap_out(m, 1, &a));
  CHECK(a == KVB_AVAIL_OK);
  EXPECT_FAIL_G(m, ids, 1, kvb_seq_swap_out(m, 1, out, 8, &np), KVB_ERR_BUFFER_TOO_SMALL);
  CHECK(np == 9);

  /* Host blocks short by one: seq 2 (8 blocks over both groups) is swapped out first. */
  CHECK_OK(kvb_seq_allocate(m, 2, other, 16, NULL));
  CHECK_OK(kvb_seq_swap_out(m, 2, in, MAXB, &np));
  CHECK(np == 8);
  CHECK_OK(kvb_seq_can_swap_out(m, 1, &a));
  CHECK(a == KVB_AVAIL_LATER);
  EXPECT_FAIL_G(m, ids, 2, kvb_seq_swap_out(m, 1, out, MAXB, &np), KVB_ERR_OUT_OF_BLOCKS);
  CHECK_OK(kvb_seq_free(m, 2)); /* a swapped-out sequence gives every group's host blocks back */
  CHECK(kvbt_stats(m).free_host_blocks == 16);

  CHECK_OK(kvb_seq_swap_out(m, 1, out, MAXB, &np));
  CHECK(np == 9);
  k = 0;
  for (i = 0; i < 6; ++i) CHECK(out[2 * k++] == t0[i]);
  for (i = 3; i < 6; ++i) CHECK(out[2 * k++] == t1[i]);
  for (i = 0; i < 9; ++i) {
    size_t j;
    CHECK(out[2 * i + 1] >= 0 && out[2 * i + 1] < 16);
    for (j = 0; j < i; ++j) CHECK(out[2 * j + 1] != out[2 * i + 1]);
  }
  CHECK(gtable(m, 1, 0, n0) == -1 && gtable(m, 1, 1, n1) == -1);
  info = kvbt_info(m, 1);
  CHECK(info.location == KVB_SEQ_SWAPPED_OUT && info.num_held_blocks == 9);
  st = kvbt_stats(m);
  CHECK(st.free_blocks == 24 && st.free_host_blocks == 7 && st.swapped_out_blocks == 17);
  CHECK_INV(m);
  CHECK_STATUS(kvb_seq_commit(m, 1, 1), KVB_ERR_BAD_STATE);

  /* Device short: seq 2 takes 16 of 24 blocks, 8 free < 9 needed. */
  CHECK_OK(kvb_seq_allocate(m, 2, other, 32, NULL));
  CHECK_OK(kvb_seq_can_swap_in(m, 1, &a));
  CHECK(a == KVB_AVAIL_LATER);
  EXPECT_FAIL_G(m, ids, 2, kvb_seq_swap_in(m, 1, in, MAXB, &np), KVB_ERR_OUT_OF_BLOCKS);
  EXPECT_FAIL_G(m, ids, 2, kvb_seq_swap_in(m, 1, in, 8, &np), KVB_ERR_BUFFER_TOO_SMALL);
  CHECK(np == 9);
  CHECK_OK(kvb_seq_free(m, 2));

  CHECK_OK(kvb_seq_swap_in(m, 1, in, MAXB, &np));
  CHECK(np == 9);
  CHECK(gtable(m, 1, 0, n0) == 6 && gtable(m, 1, 1, n1) == 6);
  CHECK(n1[0] == -1 && n1[1] == -1 && n1[2] == -1);
  k = 0;
  for (i = 0; i < 6; ++i, ++k) CHECK(in[2 * k] == out[2 * k + 1] && in[2 * k + 1] == n0[i]);
  for (i = 3; i < 6; ++i, ++k) CHECK(in[2 * k] == out[2 * k + 1] && in[2 * k + 1] == n1[i]);
  for (i = 0; i < 5; ++i) {
    uint64_t h = 0;
    CHECK(kvbt_has_hash(m, n0[i], &h) && h == chain_hash(t, (uint32_t)i));
    if (i >= 3) CHECK(kvbt_has_hash(m, n1[i], &h) && h == chain_hash(t, (uint32_t)i));
  }
  info = kvbt_info(m, 1);
  CHECK(info.location == KVB_SEQ_ON_DEVICE && info.num_held_blocks == 9);
  st = kvbt_stats(m);
  CHECK(st.free_host_blocks == 16 && st.swapped_in_blocks == 9);
  CHECK_STATUS(kvb_seq_can_swap_in(m, 1, &a), KVB_ERR_BAD_STATE);
  CHECK_INV(m);
  /* It runs on: the two uncommitted tokens commit; the window moves on in group 1 only. */
  CHECK_OK(kvb_seq_commit(m, 1, 2));
  CHECK_OK(kvb_seq_append(m, 1, t + 22, 3));
  CHECK_OK(kvb_seq_commit(m, 1, 3));
  CHECK(gtable(m, 1, 1, n1) == 7 && n1[3] == -1 && n1[4] == -1 && n1[5] >= 0 && n1[6] >= 0);
  CHECK(gtable(m, 1, 0, n0) == 7 && n0[3] >= 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Swap-in enters each group's committed blocks again under the group's own key: after the device copies
   were evicted, the same prompt hits in both groups, on the swapped-in sequence's blocks. */
static void test_swap_in_reindexes_each_group(void) {
  kvb_manager* m = make(16, 16, KVB_CONFIG_EVENTS, 64, 0); /* window 64: nothing released */
  int64_t t[16], other[32];
  int32_t pairs[2 * MAXB], a0[MAXB], a1[MAXB], b0[MAXB], b1[MAXB];
  size_t np = 0, cached = 0, i;
  kvbt_iota(t, 16, 10);
  kvbt_iota(other, 32, 7000);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 12, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 12));
  CHECK_OK(kvb_seq_swap_out(m, 1, pairs, MAXB, &np));
  CHECK(np == 6);
  /* 14 of 16 blocks: every cached copy but at most two is evicted, then they all go back to the queue. */
  CHECK_OK(kvb_seq_allocate(m, 2, other, 28, NULL));
  CHECK(kvbt_stats(m).evictions >= 4);
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_seq_swap_in(m, 1, pairs, MAXB, &np));
  CHECK(np == 6);
  CHECK_INV(m);
  CHECK_OK(kvb_seq_allocate(m, 3, t, 13, &cached));
  CHECK(cached == 12);
  CHECK(gtable(m, 1, 0, a0) == 3 && gtable(m, 1, 1, a1) == 3);
  CHECK(gtable(m, 3, 0, b0) == 4 && gtable(m, 3, 1, b1) == 4);
  for (i = 0; i < 3; ++i) CHECK(a0[i] == b0[i] && a1[i] == b1[i] && a0[i] != a1[i]);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

typedef struct {
  int32_t off[2 * MAXB], load[2 * MAXB];
  size_t noff, nload;
} transfers;

static transfers drain_transfers(kvb_manager* m) {
  transfers t;
  memset(&t, 0, sizeof t);
  CHECK_OK(kvb_drain_host_transfers(m, t.off, MAXB, &t.noff, t.load, MAXB, &t.nload));
  return t;
}

/* Allocates seq id for the first n tokens of p, checks the cached tokens, and returns the transfers it asked for. */
static transfers allocate_and_drain(kvb_manager* m, int64_t id, const int64_t* p, size_t n, size_t want_cached) {
  size_t cached = 999;
  CHECK_OK(kvb_seq_allocate(m, id, p, n, &cached));
  CHECK(cached == want_cached);
  return drain_transfers(m);
}

/* Events of one kind: (group, medium, hash) triples. */
typedef struct {
  uint32_t type[256], group[256], medium[256];
  uint64_t hash[256];
  size_t n;
} events;

static events drain_events(kvb_manager* m) {
  events e;
  kvb_event ev[256];
  int64_t toks[256 * BS];
  size_t i;
  memset(&e, 0, sizeof e);
  CHECK_OK(kvb_drain_events_group(m, ev, e.group, 256, toks, 256 * BS, &e.n, NULL));
  for (i = 0; i < e.n; ++i) {
    e.type[i] = ev[i].type;
    e.medium[i] = ev[i].medium;
    e.hash[i] = ev[i].block_hash;
  }
  return e;
}

static size_t count_events(const events* e, uint32_t type, uint32_t group, uint32_t medium, uint64_t hash) {
  size_t i, n = 0;
  for (i = 0; i < e->n; ++i)
    n += e->type[i] == type && e->group[i] == group && e->medium[i] == medium && e->hash[i] == hash;
  return n;
}

/* The host copy that offload pairs say device block d went to; -1 if none. */
static int32_t offloaded_to(const transfers* t, int32_t d) {
  size_t i;
  for (i = 0; i < t->noff; ++i)
    if (t->off[2 * i] == d) return t->off[2 * i + 1];
  return -1;
}

/* A prefix evicted from the device (every group's blocks offloaded, each under its group) comes back
   through loads: group 0 loads all five blocks, the window group only the two its window needs. */
static void test_host_hit_in_every_group(void) {
  kvb_manager* m = make(12, 32, KVB_CONFIG_HOST_CACHE | KVB_CONFIG_EVENTS, 6, 0);
  int64_t p[24], filler[24];
  int32_t a0[MAXB], a1[MAXB], n0[MAXB], n1[MAXB];
  size_t cached = 0, i;
  transfers off, tr;
  events ev;
  kvb_stats st;
  kvbt_iota(p, 24, 100);
  kvbt_iota(filler, 24, 9000);
  CHECK_OK(kvb_seq_allocate(m, 1, p, 20, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 20)); /* the window releases group 1's blocks 0..2 (still cached) */
  CHECK(gtable(m, 1, 0, a0) == 5 && gtable(m, 1, 1, a1) == 5);
  CHECK(a1[0] == -1 && a1[3] >= 0);
  /* group 1's released blocks were not in its table any more: find them through the events */
  ev = drain_events(m);
  for (i = 0; i < 5; ++i) {
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_STORED, 0, KVB_MEDIUM_DEVICE, chain_hash(p, (uint32_t)i)) == 1);
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_STORED, 1, KVB_MEDIUM_DEVICE, chain_hash(p, (uint32_t)i)) == 1);
  }
  CHECK_OK(kvb_seq_free(m, 1));
  /* The filler takes all 12 device blocks: every cached block is evicted and offloaded. */
  CHECK_OK(kvb_seq_allocate(m, 2, filler, 24, NULL));
  off = drain_transfers(m);
  CHECK(off.noff == 10 && off.nload == 0);
  ev = drain_events(m);
  for (i = 0; i < 5; ++i) {
    uint64_t h = chain_hash(p, (uint32_t)i);
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_REMOVED, 0, KVB_MEDIUM_DEVICE, h) == 1);
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_REMOVED, 1, KVB_MEDIUM_DEVICE, h) == 1);
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_STORED, 0, KVB_MEDIUM_HOST, h) == 1);
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_STORED, 1, KVB_MEDIUM_HOST, h) == 1);
  }
  CHECK(kvbt_stats(m).cached_host_blocks == 10);
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_INV(m);

  CHECK_OK(kvb_seq_can_allocate(m, p, 21, &cached));
  CHECK(cached == 20);
  CHECK_OK(kvb_seq_allocate(m, 3, p, 21, &cached));
  CHECK(cached == 20);
  CHECK(gtable(m, 3, 0, n0) == 6 && gtable(m, 3, 1, n1) == 6);
  CHECK(n1[0] == -1 && n1[1] == -1 && n1[2] == -1 && n1[3] >= 0 && n1[4] >= 0 && n1[5] >= 0);
  tr = drain_transfers(m);
  CHECK(tr.noff == 0 && tr.nload == 7);
  /* Loads of group 0's blocks 0..4 then group 1's 3..4, each from the host copy of that group's block. */
  for (i = 0; i < 5 && tr.nload == 7; ++i) {
    CHECK(tr.load[2 * i + 1] == n0[i]);
    CHECK(tr.load[2 * i] == offloaded_to(&off, a0[i]) && tr.load[2 * i] >= 0);
  }
  for (i = 3; i < 5 && tr.nload == 7; ++i) {
    CHECK(tr.load[2 * (i + 2) + 1] == n1[i]);
    CHECK(tr.load[2 * (i + 2)] == offloaded_to(&off, a1[i]) && tr.load[2 * (i + 2)] >= 0);
  }
  for (i = 0; i < 5; ++i) {
    uint64_t h = 0;
    CHECK(kvbt_has_hash(m, n0[i], &h) && h == chain_hash(p, (uint32_t)i));
    if (i >= 3) CHECK(kvbt_has_hash(m, n1[i], &h) && h == chain_hash(p, (uint32_t)i));
  }
  ev = drain_events(m);
  for (i = 0; i < 5; ++i) {
    uint64_t h = chain_hash(p, (uint32_t)i);
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_STORED, 0, KVB_MEDIUM_DEVICE, h) == 1);
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_STORED, 1, KVB_MEDIUM_DEVICE, h) == (i >= 3));
  }
  st = kvbt_stats(m);
  CHECK(st.hit_tokens == 20 && st.host_hit_tokens == 20 && st.device_hit_tokens == 0 && st.loaded_blocks == 7);
  CHECK_INV(m);
  /* The loaded blocks are device-cached again, in their own groups: a second request hits on the device. */
  CHECK_OK(kvb_seq_commit(m, 3, 1));
  CHECK_OK(kvb_seq_allocate(m, 4, p, 21, &cached));
  CHECK(cached == 20);
  CHECK(gtable(m, 4, 0, a0) == 6 && gtable(m, 4, 1, a1) == 6);
  for (i = 0; i < 5; ++i) CHECK(a0[i] == n0[i] && (i < 3 || a1[i] == n1[i]));
  tr = drain_transfers(m);
  CHECK(tr.nload == 0);
  st = kvbt_stats(m);
  CHECK(st.device_hit_tokens == 20 && st.host_hit_tokens == 20);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Group isolation on the host: two full groups each cache block 0 of a prompt; both device copies are
   evicted into a host level of one block, so exactly one group's copy survives there (which one depends
   on the eviction order). The other group has the block nowhere, and the surviving copy (same tokens,
   same public hash) must not satisfy it: no hit, no load. */
static void test_host_groups_never_mix(void) {
  kvb_config cfg;
  kvb_group_spec spec[2];
  kvb_manager* m = NULL;
  int64_t p[8], filler[8];
  size_t cached = 99, i;
  int net[2] = {0, 0};
  events ev;
  transfers tr;
  kvb_config_init(&cfg);
  kvb_group_spec_init(&spec[0]);
  kvb_group_spec_init(&spec[1]);
  cfg.block_size = BS;
  cfg.num_blocks = 4;
  cfg.num_host_blocks = 1;
  cfg.flags = KVB_CONFIG_HOST_CACHE | KVB_CONFIG_EVENTS;
  cfg.groups = spec;
  cfg.num_groups = 2;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  if (!m) return;
  kvbt_iota(p, 8, 40);
  kvbt_iota(filler, 8, 7000);
  CHECK_OK(kvb_seq_allocate(m, 1, p, 5, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 5)); /* block 0 cached in both groups */
  CHECK_OK(kvb_seq_free(m, 1));
  drain_events(m);
  CHECK_OK(kvb_seq_allocate(m, 2, filler, 8, NULL)); /* all four device blocks: both copies evicted */
  tr = drain_transfers(m);
  CHECK(tr.noff == 1); /* the first offload was dropped with its host block */
  ev = drain_events(m);
  for (i = 0; i < ev.n; ++i) {
    CHECK(ev.hash[i] == chain_hash(p, 0) && ev.group[i] < 2);
    if (ev.medium[i] == KVB_MEDIUM_HOST && ev.group[i] < 2)
      net[ev.group[i]] += ev.type[i] == KVB_EVENT_BLOCK_STORED ? 1 : -1;
  }
  CHECK(net[0] + net[1] == 1 && net[0] >= 0 && net[1] >= 0); /* one group's copy is on the host */
  CHECK(kvbt_stats(m).host_evictions == 1 && kvbt_stats(m).cached_host_blocks == 1);
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_seq_can_allocate(m, p, 5, &cached));
  CHECK(cached == 0);
  tr = allocate_and_drain(m, 3, p, 5, 0);
  CHECK(tr.nload == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* A host hit needs a free device block in every group that loads it; short of them, allocate fails and
   pins, loads and takes nothing. */
static void test_host_hit_out_of_blocks(void) {
  kvb_manager* m = make(8, 16, KVB_CONFIG_HOST_CACHE, 64, 0);
  int64_t p[12], filler[16];
  int64_t ids[2] = {2, 3};
  size_t cached = 0;
  transfers tr;
  kvbt_iota(p, 12, 300);
  kvbt_iota(filler, 16, 8000);
  CHECK_OK(kvb_seq_allocate(m, 1, p, 8, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 8));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_seq_allocate(m, 2, filler, 16, NULL)); /* every block: p's 4 cached blocks go to the host */
  tr = drain_transfers(m);
  CHECK(tr.noff == 4);
  CHECK_OK(kvb_seq_rollback(m, 2, 4)); /* gives back one block per group: 2 free, 6 needed */
  CHECK_STATUS(kvb_seq_can_allocate(m, p, 9, &cached), KVB_ERR_OUT_OF_BLOCKS);
  CHECK(cached == 8);
  EXPECT_FAIL_G(m, ids, 2, kvb_seq_allocate(m, 3, p, 9, &cached), KVB_ERR_OUT_OF_BLOCKS);
  tr = drain_transfers(m);
  CHECK(tr.nload == 0 && tr.noff == 0);
  CHECK_OK(kvb_seq_free(m, 2));
  tr = allocate_and_drain(m, 3, p, 9, 8);
  CHECK(tr.nload == 4);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Swapping and the host cache share the host blocks: a swap out evicts cached host blocks of any group,
   and the swapped-out sequence's blocks are never offload targets. */
static void test_swap_with_host_cache(void) {
  kvb_manager* m = make(8, 6, KVB_CONFIG_HOST_CACHE, 64, 0);
  int64_t p[12], q[12], filler[16];
  int32_t pairs[2 * MAXB];
  size_t np = 0, cached = 0;
  transfers tr;
  kvbt_iota(p, 12, 100);
  kvbt_iota(q, 12, 600);
  kvbt_iota(filler, 16, 9000);
  CHECK_OK(kvb_seq_allocate(m, 1, p, 8, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 8));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_seq_allocate(m, 2, filler, 16, NULL));
  tr = drain_transfers(m);
  CHECK(tr.noff == 4 && kvbt_stats(m).cached_host_blocks == 4);
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_seq_allocate(m, 3, q, 12, NULL)); /* 6 blocks over 2 groups */
  CHECK_OK(kvb_seq_commit(m, 3, 12));
  CHECK_OK(kvb_seq_swap_out(m, 3, pairs, MAXB, &np)); /* 6 host blocks: the 4 cached ones are evicted */
  CHECK(np == 6);
  CHECK(kvbt_stats(m).cached_host_blocks == 0 && kvbt_stats(m).free_host_blocks == 0);
  CHECK_OK(kvb_seq_can_allocate(m, p, 9, &cached));
  CHECK(cached == 0);
  CHECK_INV(m);
  /* The device still holds q's blocks (cached, free): evicting them finds no host block to offload to. */
  CHECK_OK(kvb_seq_allocate(m, 4, filler, 16, NULL));
  tr = drain_transfers(m);
  CHECK(tr.noff == 0);
  CHECK_OK(kvb_seq_free(m, 4));
  CHECK_OK(kvb_seq_swap_in(m, 3, pairs, MAXB, &np));
  CHECK(np == 6);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Parked blocks (cached blocks a window group released while its sequence runs, see docs/ARCHITECTURE.md, "Eviction
   order with groups") stay parked for a swapped-out sequence; pressure takes them after the free queue
   proper and offloads them under their group; swap-in, free and a later host hit in the window group
   all work on top. */
static void test_parked_blocks_swap_and_offload(void) {
  kvb_manager* m = make(12, 16, KVB_CONFIG_HOST_CACHE | KVB_CONFIG_EVENTS, 4, 0);
  int64_t p[20], filler[24];
  int32_t pairs[2 * MAXB], t1[MAXB], n1[MAXB];
  size_t np = 0, cached = 0, i;
  transfers tr;
  events ev;
  kvbt_iota(p, 20, 500);
  kvbt_iota(filler, 24, 8000);
  CHECK_OK(kvb_seq_allocate(m, 1, p, 16, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 16)); /* window 4: group 1's blocks 0..2 released and parked */
  CHECK(gtable(m, 1, 1, t1) == 4 && t1[0] == -1 && t1[2] == -1 && t1[3] >= 0);
  drain_events(m);
  CHECK_OK(kvb_seq_swap_out(m, 1, pairs, MAXB, &np));
  CHECK(np == 5);
  CHECK_INV(m);
  CHECK_OK(kvb_seq_allocate(m, 2, filler, 24, NULL)); /* all 12 device blocks, the parked ones last */
  tr = drain_transfers(m);
  CHECK(tr.noff == 8); /* group 0's four, group 1's block 3, and group 1's three parked blocks */
  ev = drain_events(m);
  for (i = 0; i < 4; ++i) {
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_STORED, 0, KVB_MEDIUM_HOST, chain_hash(p, (uint32_t)i)) == 1);
    CHECK(count_events(&ev, KVB_EVENT_BLOCK_STORED, 1, KVB_MEDIUM_HOST, chain_hash(p, (uint32_t)i)) == 1);
  }
  CHECK_INV(m);
  CHECK_OK(kvb_seq_free(m, 2));
  CHECK_OK(kvb_seq_swap_in(m, 1, pairs, MAXB, &np));
  CHECK(np == 5);
  CHECK(gtable(m, 1, 1, n1) == 4 && n1[0] == -1 && n1[1] == -1 && n1[2] == -1 && n1[3] >= 0);
  CHECK_INV(m);
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_INV(m);
  /* The prompt again: group 0 on the device (re-indexed at swap-in), group 1's block 3 (all its window
     needs) on the host. */
  CHECK_OK(kvb_seq_allocate(m, 3, p, 17, &cached));
  CHECK(cached == 16);
  CHECK(gtable(m, 3, 1, n1) == 5 && n1[2] == -1 && n1[3] >= 0);
  tr = drain_transfers(m);
  CHECK(tr.nload == 1 && tr.load[1] == n1[3]);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_swap_full_and_window);
  RUN_TEST(test_swap_in_reindexes_each_group);
  RUN_TEST(test_host_hit_in_every_group);
  RUN_TEST(test_host_groups_never_mix);
  RUN_TEST(test_host_hit_out_of_blocks);
  RUN_TEST(test_swap_with_host_cache);
  RUN_TEST(test_parked_blocks_swap_and_offload);
  TEST_SUMMARY();
}
