/* KV cache groups with the host tier (issue 17 item 4): swapping moves every group's held blocks at once
 * (one host table per group; pairs are plain (device, host) ids of the shared pools, group 0's first),
 * window slots released before the swap stay released, a failed swap changes nothing in any group, and
 * swap-in makes each group's committed blocks findable again under that group's key. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvbt_common.h"

#define BS 4
#define MAXB 32

static kvb_manager* make(uint32_t device, uint32_t host, uint32_t flags, uint32_t window, uint32_t sink) {
  kvb_config cfg;
  kvb_group_spec spec[2];
  kvb_manager* m = NULL;
  kvb_status st;
  kvb_config_init(&cfg);
  kvb_group_spec_init(&spec[0]);
  kvb_group_spec_init(&spec[1]);
  spec[1].kind = KVB_GROUP_WINDOW;
  spec[1].window_tokens = window;
  spec[1].sink_tokens = sink;
  cfg.block_size = BS;
  cfg.num_blocks = device;
  cfg.num_host_blocks = host;
  cfg.flags = flags;
  cfg.groups = spec;
  cfg.num_groups = 2;
  st = kvb_manager_create(&cfg, &m);
  if (st != KVB_OK) {
    fprintf(stderr, "create: %s (%s)\n", kvb_status_string(st), kvb_last_error());
    exit(2);
  }
  return m;
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

int main(void) {
  RUN_TEST(test_swap_full_and_window);
  RUN_TEST(test_swap_in_reindexes_each_group);
  TEST_SUMMARY();
}
