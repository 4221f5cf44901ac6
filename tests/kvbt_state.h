/* Observable-state snapshot of a manager through the public API only, shared by the reliability tests
 * (error-path table, allocation-failure test). Two snapshots are compared byte for byte: a failed call
 * must leave them identical. C99 and C++ compatible; every function is static. */
#ifndef KVBT_STATE_H
#define KVBT_STATE_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvblock.h"

typedef struct kvbt_state {
  unsigned char* data;
  size_t len, cap;
} kvbt_state;

static void kvbt_state_put(kvbt_state* s, const void* p, size_t n) {
  if (s->len + n > s->cap) {
    size_t cap = s->cap ? s->cap : 4096;
    unsigned char* d;
    while (cap < s->len + n) cap *= 2;
    d = (unsigned char*)realloc(s->data, cap);
    if (!d) {
      fprintf(stderr, "kvbt_state: out of memory\n");
      exit(2);
    }
    s->data = d;
    s->cap = cap;
  }
  memcpy(s->data + s->len, p, n);
  s->len += n;
}

static void kvbt_state_status(kvbt_state* s, kvb_status st) {
  int32_t v = (int32_t)st;
  kvbt_state_put(s, &v, sizeof v);
}

static void kvbt_state_free(kvbt_state* s) {
  free(s->data);
  s->data = NULL;
  s->len = s->cap = 0;
}

/* Set to 0 to leave the block hashes out of snapshots (each unhashed block costs a failing call). */
static int kvbt_state_hashes = 1;
/* KV cache groups whose block tables snapshots cover (kvb_config.num_groups; 1 without groups). */
static unsigned kvbt_state_groups = 1;

/* Everything that can be read without changing the manager: stats, free count, the info and block tables
 * (of every group) of every id in ids[0..num_ids), every block's committed hash. With destructive != 0 the pending
 * copy-on-write pairs, the host cache's transfers and the queued events are drained into the snapshot too (the manager changes). */
static void kvbt_state_take(kvb_manager* m, const int64_t* ids, size_t num_ids, int destructive, kvbt_state* s) {
  kvb_stats st;
  size_t nfree = 0, i;
  uint64_t b, nblocks;
  s->len = 0;
  memset(&st, 0, sizeof st);
  kvb_stats_init(&st);
  kvbt_state_status(s, kvb_get_stats(m, &st));
  kvbt_state_put(s, &st, sizeof st);
  kvbt_state_status(s, kvb_num_free_blocks(m, &nfree));
  kvbt_state_put(s, &nfree, sizeof nfree);
  for (i = 0; i < num_ids; ++i) {
    kvb_seq_info info;
    static int32_t table[1024]; /* static: these helpers are for single-threaded tests */
    size_t len = 0;
    unsigned g;
    kvb_status ts;
    memset(&info, 0, sizeof info);
    kvb_seq_info_init(&info);
    kvbt_state_status(s, kvb_seq_get_info(m, ids[i], &info));
    kvbt_state_put(s, &info, sizeof info);
    for (g = 0; g < kvbt_state_groups; ++g) {
      len = 0;
      ts = kvb_seq_block_table_group(m, ids[i], g, table, sizeof table / sizeof table[0], &len);
      kvbt_state_status(s, ts);
      kvbt_state_put(s, &len, sizeof len);
      if (ts == KVB_OK) kvbt_state_put(s, table, len * sizeof table[0]);
    }
    { /* the sequence's uncomputed rows as the kernels see them: slots and tree-mask words */
      static int64_t slots[256];
      static uint64_t mask[256];
      int32_t qs[2] = {0, 0};
      kvb_batch bt;
      kvb_batch_init(&bt);
      bt.query_start = qs;
      bt.slot_mapping = slots;
      bt.tree_mask = mask;
      bt.slot_capacity = 256;
      ts = kvb_batch_export(m, &ids[i], 1, &bt);
      kvbt_state_status(s, ts);
      if (ts == KVB_OK) {
        kvbt_state_put(s, qs, sizeof qs);
        kvbt_state_put(s, slots, (size_t)qs[1] * sizeof slots[0]);
        kvbt_state_put(s, mask, (size_t)qs[1] * sizeof mask[0]);
      }
    }
  }
  nblocks = st.num_blocks;
  for (b = 0; kvbt_state_hashes && b < nblocks && b < (1u << 20); ++b) {
    uint64_t h = 0;
    kvbt_state_status(s, kvb_block_hash(m, (int32_t)b, &h));
    kvbt_state_put(s, &h, sizeof h);
  }
  if (destructive) {
    static int32_t pairs[2 * 4096];
    size_t np = 0;
    static kvb_event ev[64];
    static int64_t toks[64 * 64];
    size_t ne = 0;
    uint64_t dropped = 0;
    kvb_status es;
    kvbt_state_status(s, kvb_drain_copies(m, pairs, 4096, &np));
    kvbt_state_put(s, &np, sizeof np);
    if (np <= 4096) kvbt_state_put(s, pairs, 2 * np * sizeof pairs[0]);
    {
      static int64_t slot_pairs[2 * 4096];
      np = 0;
      kvbt_state_status(s, kvb_drain_slot_copies(m, slot_pairs, 4096, &np));
      kvbt_state_put(s, &np, sizeof np);
      if (np <= 4096) kvbt_state_put(s, slot_pairs, 2 * np * sizeof slot_pairs[0]);
    }
    {
      static int32_t loads[2 * 4096];
      size_t nl = 0;
      np = 0;
      kvbt_state_status(s, kvb_drain_host_transfers(m, pairs, 4096, &np, loads, 4096, &nl));
      kvbt_state_put(s, &np, sizeof np);
      kvbt_state_put(s, &nl, sizeof nl);
      if (np <= 4096 && nl <= 4096) {
        kvbt_state_put(s, pairs, 2 * np * sizeof pairs[0]);
        kvbt_state_put(s, loads, 2 * nl * sizeof loads[0]);
      }
    }
    do {
      memset(ev, 0, sizeof ev);
      es = kvb_drain_events(m, ev, 64, toks, sizeof toks / sizeof toks[0], &ne, &dropped);
      kvbt_state_status(s, es);
      if (es != KVB_OK) break;
      kvbt_state_put(s, &ne, sizeof ne);
      kvbt_state_put(s, &dropped, sizeof dropped);
      for (i = 0; i < ne; ++i) {
        kvbt_state_put(s, &ev[i], sizeof ev[i]);
        kvbt_state_put(s, toks + ev[i].token_offset, ev[i].num_tokens * sizeof(int64_t));
      }
    } while (ne > 0);
  }
}

/* Index of the first differing byte, or -1 if equal. */
static long kvbt_state_diff(const kvbt_state* a, const kvbt_state* b) {
  size_t i, n = a->len < b->len ? a->len : b->len;
  for (i = 0; i < n; ++i)
    if (a->data[i] != b->data[i]) return (long)i;
  return a->len == b->len ? -1 : (long)n;
}

#endif
