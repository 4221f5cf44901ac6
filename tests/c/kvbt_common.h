/* Helpers shared by the C API tests in tests/c/. Public header only: these tests see libkvblock
 * exactly as an installed C consumer does. Everything here is static inline so that a test file that
 * uses only part of it compiles warning-free. */
#ifndef KVBT_COMMON_H
#define KVBT_COMMON_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define KVBT_MAX_SEQS 8
#define KVBT_MAX_BLOCKS 64

/* A configuration of the given shape, the rest at kvb_config_init's defaults. */
static inline kvb_config kvbt_config(uint32_t block_size, uint32_t num_blocks, uint32_t num_host_blocks, float watermark,
                                     uint32_t flags) {
  kvb_config cfg;
  kvb_config_init(&cfg);
  cfg.block_size = block_size;
  cfg.num_blocks = num_blocks;
  cfg.num_host_blocks = num_host_blocks;
  cfg.watermark = watermark;
  cfg.flags = flags;
  return cfg;
}

/* A manager with the given shape; flags/event capacity/seed filled in too. Fails the test on error. */
static inline kvb_manager* kvbt_make_ex(uint32_t block_size, uint32_t num_blocks, uint32_t num_host_blocks,
                                        float watermark, uint32_t flags, uint32_t event_capacity) {
  kvb_config cfg = kvbt_config(block_size, num_blocks, num_host_blocks, watermark, flags);
  kvb_manager* m = NULL;
  kvb_status s;
  if (event_capacity) cfg.event_capacity = event_capacity;
  cfg.index_seed = 0x5eed5eed5eed5eedULL;
  s = kvb_manager_create(&cfg, &m);
  if (s != KVB_OK || !m) {
    fprintf(stderr, "kvbt_make: kvb_manager_create gave %s (%s)\n", kvb_status_string(s), kvb_last_error());
    exit(2); /* no summary line: run_tests.sh counts the binary as failed */
  }
  return m;
}

static inline kvb_manager* kvbt_make(uint32_t block_size, uint32_t num_blocks) {
  return kvbt_make_ex(block_size, num_blocks, 0, 0.0f, 0, 0);
}

/* A batch export over the caller's buffers: tables of `cols` columns, `slot_cap` slots. */
static inline kvb_batch kvbt_batch(uint32_t cols, int32_t* tables, int32_t* seq_lens, int32_t* query_start,
                                   int64_t* slots, size_t slot_cap) {
  kvb_batch b;
  kvb_batch_init(&b);
  b.max_blocks_per_seq = cols;
  b.block_tables = tables;
  b.seq_lens = seq_lens;
  b.query_start = query_start;
  b.slot_mapping = slots;
  b.slot_capacity = slot_cap;
  return b;
}

/* A CPU cache over contiguous K and V arrays (default strides). */
static inline kvb_cache_desc kvbt_cache(uint32_t dtype, void* k, void* v, uint32_t num_blocks, uint32_t block_size,
                                        uint32_t num_kv_heads, uint32_t head_dim) {
  kvb_cache_desc c;
  kvb_cache_desc_init(&c);
  c.dtype = dtype;
  c.k = k;
  c.v = v;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.num_kv_heads = num_kv_heads;
  c.head_dim = head_dim;
  return c;
}

/* The fields kvb_attention_args and kvb_prefill_args share, set on an initialized `args`. */
#define KVBT_PAGED_ARGS(args, nseqs, nqheads, cols, qp, outp, tables, lens) \
  do {                                                                      \
    (args).num_seqs = (nseqs);                                              \
    (args).num_q_heads = (nqheads);                                         \
    (args).max_blocks_per_seq = (cols);                                     \
    (args).q = (qp);                                                        \
    (args).out = (outp);                                                    \
    (args).block_tables = (tables);                                         \
    (args).seq_lens = (lens);                                               \
  } while (0)

/* Two KV cache groups, full attention and a sliding window (window, sink tokens), on one pool. */
static inline kvb_manager* kvbt_make_full_window(uint32_t block_size, uint32_t num_blocks, uint32_t num_host_blocks,
                                                 uint32_t flags, uint32_t window, uint32_t sink) {
  kvb_config cfg;
  kvb_group_spec spec[2];
  kvb_manager* m = NULL;
  kvb_status s;
  kvb_config_init(&cfg);
  kvb_group_spec_init(&spec[0]);
  kvb_group_spec_init(&spec[1]);
  spec[1].kind = KVB_GROUP_WINDOW;
  spec[1].window_tokens = window;
  spec[1].sink_tokens = sink;
  cfg.block_size = block_size;
  cfg.num_blocks = num_blocks;
  cfg.num_host_blocks = num_host_blocks;
  cfg.flags = flags;
  cfg.groups = spec;
  cfg.num_groups = 2;
  s = kvb_manager_create(&cfg, &m);
  if (s != KVB_OK) {
    fprintf(stderr, "kvbt_make_full_window: kvb_manager_create gave %s (%s)\n", kvb_status_string(s), kvb_last_error());
    exit(2);
  }
  return m;
}

/* tokens[i] = base + i */
static inline void kvbt_iota(int64_t* tokens, size_t n, int64_t base) {
  size_t i;
  for (i = 0; i < n; ++i) tokens[i] = base + (int64_t)i;
}

static inline size_t kvbt_free(kvb_manager* m) {
  size_t n = (size_t)-1;
  if (kvb_num_free_blocks(m, &n) != KVB_OK) return (size_t)-1;
  return n;
}

static inline kvb_stats kvbt_stats(kvb_manager* m) {
  kvb_stats st;
  kvb_stats_init(&st);
  if (kvb_get_stats(m, &st) != KVB_OK) memset(&st, 0xff, sizeof st);
  return st;
}

static inline kvb_seq_info kvbt_info(kvb_manager* m, int64_t id) {
  kvb_seq_info info;
  kvb_seq_info_init(&info);
  if (kvb_seq_get_info(m, id, &info) != KVB_OK) memset(&info, 0xff, sizeof info);
  return info;
}

/* Block table of seq into out[KVBT_MAX_BLOCKS]; returns its length, or -1 on error. */
static inline long kvbt_table(kvb_manager* m, int64_t id, int32_t* out) {
  size_t len = 0;
  if (kvb_seq_block_table(m, id, out, KVBT_MAX_BLOCKS, &len) != KVB_OK) return -1;
  return (long)len;
}

/* Is block b's committed hash available (and what is it)? */
static inline int kvbt_has_hash(kvb_manager* m, int32_t b, uint64_t* h) {
  uint64_t tmp = 0;
  kvb_status s = kvb_block_hash(m, b, &tmp);
  if (h) *h = tmp;
  return s == KVB_OK;
}

/* Everything a failed call must leave unchanged, as far as the public API can observe it. */
typedef struct kvbt_snap {
  size_t free_blocks;
  kvb_stats stats;
  int num_seqs;
  kvb_status table_status[KVBT_MAX_SEQS];
  size_t table_len[KVBT_MAX_SEQS];
  int32_t table[KVBT_MAX_SEQS][KVBT_MAX_BLOCKS];
  kvb_status info_status[KVBT_MAX_SEQS];
  kvb_seq_info info[KVBT_MAX_SEQS];
  kvb_status hash_status[KVBT_MAX_BLOCKS];
  uint64_t hash[KVBT_MAX_BLOCKS];
} kvbt_snap;

static inline void kvbt_snap_take(kvb_manager* m, const int64_t* ids, int num_ids, kvbt_snap* s) {
  int i;
  int32_t b;
  memset(s, 0, sizeof *s);
  if (!m) return;
  s->free_blocks = kvbt_free(m);
  s->stats = kvbt_stats(m);
  s->num_seqs = num_ids;
  for (i = 0; i < num_ids && i < KVBT_MAX_SEQS; ++i) {
    memset(s->table[i], 0x7f, sizeof s->table[i]);
    s->table_status[i] = kvb_seq_block_table(m, ids[i], s->table[i], KVBT_MAX_BLOCKS, &s->table_len[i]);
    kvb_seq_info_init(&s->info[i]);
    s->info_status[i] = kvb_seq_get_info(m, ids[i], &s->info[i]);
  }
  for (b = 0; b < KVBT_MAX_BLOCKS && (uint64_t)b < s->stats.num_blocks; ++b)
    s->hash_status[b] = kvb_block_hash(m, b, &s->hash[b]);
}

static inline int kvbt_snap_eq(const kvbt_snap* a, const kvbt_snap* b) {
  int ok = 1;
  if (a->free_blocks != b->free_blocks) { fprintf(stderr, "  free blocks %zu -> %zu\n", a->free_blocks, b->free_blocks); ok = 0; }
  if (memcmp(&a->stats, &b->stats, sizeof a->stats) != 0) { fprintf(stderr, "  stats changed\n"); ok = 0; }
  if (memcmp(a->table_status, b->table_status, sizeof a->table_status) || memcmp(a->table_len, b->table_len, sizeof a->table_len) ||
      memcmp(a->table, b->table, sizeof a->table)) { fprintf(stderr, "  block tables changed\n"); ok = 0; }
  if (memcmp(a->info_status, b->info_status, sizeof a->info_status) || memcmp(a->info, b->info, sizeof a->info)) {
    fprintf(stderr, "  sequence info changed\n");
    ok = 0;
  }
  if (memcmp(a->hash_status, b->hash_status, sizeof a->hash_status) || memcmp(a->hash, b->hash, sizeof a->hash)) {
    fprintf(stderr, "  block hashes changed\n");
    ok = 0;
  }
  return ok;
}

/* Leaves a known message in kvb_last_error() so that a stale message from an earlier failure cannot
   satisfy the next message check. */
static inline void kvbt_prime_last_error(void) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  kvb_config_init(&cfg);
  cfg.num_blocks = 1;
  cfg.watermark = 7.5f;
  (void)kvb_manager_create(&cfg, &m); /* "watermark 7.5 is not in [0, 1)" */
}

#define CHECK_MSG(needle)                                                               \
  do {                                                                                  \
    if (!strstr(kvb_last_error(), (needle))) {                                          \
      fprintf(stderr, "%s:%d: kvb_last_error() \"%s\" does not name \"%s\"\n", __FILE__, \
              __LINE__, kvb_last_error(), (needle));                                    \
      kvbt_case_failures++;                                                             \
    }                                                                                   \
  } while (0)

/* The message of the last failure checked by EXPECT_FAIL (the snapshot after it may overwrite
   kvb_last_error()). */
static char kvbt_saved_msg[600];
static inline const char* kvbt_saved(void) { return kvbt_saved_msg; }

#define CHECK_SAVED_MSG(needle)                                                         \
  do {                                                                                  \
    if (!strstr(kvbt_saved_msg, (needle))) {                                            \
      fprintf(stderr, "%s:%d: kvb_last_error() \"%s\" does not name \"%s\"\n", __FILE__, \
              __LINE__, kvbt_saved_msg, (needle));                                      \
      kvbt_case_failures++;                                                             \
    }                                                                                   \
  } while (0)

/* expr must fail with want, leave a message that contains needle, and change nothing observable on
   manager m (invariants, free count, stats, the block tables and infos of ids[0..n), every block hash). */
#define EXPECT_FAIL(m, ids, nids, expr, want, needle)                                   \
  do {                                                                                  \
    kvbt_snap kvbt_a_, kvbt_b_;                                                         \
    kvbt_snap_take((m), (ids), (nids), &kvbt_a_);                                       \
    kvbt_prime_last_error();                                                            \
    CHECK_STATUS(expr, want);                                                           \
    snprintf(kvbt_saved_msg, sizeof kvbt_saved_msg, "%s", kvb_last_error());           \
    CHECK_MSG(needle);                                                                  \
    if ((m) != NULL) {                                                                  \
      CHECK_OK(kvb_check_invariants(m));                                                \
      kvbt_snap_take((m), (ids), (nids), &kvbt_b_);                                     \
      if (!kvbt_snap_eq(&kvbt_a_, &kvbt_b_)) {                                          \
        fprintf(stderr, "%s:%d: %s changed the manager\n", __FILE__, __LINE__, #expr);  \
        kvbt_case_failures++;                                                           \
      }                                                                                 \
    }                                                                                   \
  } while (0)

#define CHECK_INV(m) CHECK_OK(kvb_check_invariants(m))

#endif
