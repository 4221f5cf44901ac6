/* Error-path table: every public manager function with every class of bad argument (NULL manager, NULL
 * required pointer, NULL array with a non-zero length, unknown id, existing id, wrong state, out-of-range
 * value, struct_size too small, buffer too small, resource exhausted). Each case asserts the status, a
 * message of the call's own in kvb_last_error(), passing invariants, and that the manager's observable
 * state is byte-identical to an untouched twin built the same way: stats, free count, the block tables and
 * infos of every id, every block hash, the pending copy-on-write pairs and the queued events. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvbt_common.h"
#include "kvbt_state.h"

static const int64_t kIds[] = {1, 2, 3, 4, 5, 6, 7, 9, -1};
#define NUM_IDS (sizeof kIds / sizeof kIds[0])

static int64_t toks[256];
static int32_t pairs[2 * 64];
static size_t out_n;

static kvb_manager* fixture(int events) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  kvb_seq_options o;
  size_t n;
  int i;
  int64_t t = 500;
  for (i = 0; i < 256; ++i) toks[i] = i + 1;
  kvb_config_init(&cfg);
  cfg.block_size = 4;
  cfg.num_blocks = 16;
  cfg.num_host_blocks = 8;
  cfg.flags = KVB_CONFIG_KEYED_INDEX | (events ? KVB_CONFIG_EVENTS : 0);
  cfg.event_capacity = 64;
  cfg.index_seed = 42;
  if (kvb_manager_create(&cfg, &m) != KVB_OK) return NULL;
  /* 1: 10 committed tokens. 2: swapped out. 3: fork of 1 with a pending copy. 4: 3 uncomputed tokens.
     6: sliding window of 4 tokens with released blocks. */
  if (kvb_seq_allocate(m, 1, toks, 10, NULL) || kvb_seq_commit(m, 1, 10) ||
      kvb_seq_allocate(m, 2, toks + 50, 6, NULL) || kvb_seq_commit(m, 2, 6) ||
      kvb_seq_swap_out(m, 2, pairs, 64, &n) || kvb_seq_fork(m, 1, 3) || kvb_seq_append(m, 3, &t, 1) ||
      kvb_seq_allocate(m, 4, toks + 70, 5, NULL) || kvb_seq_commit(m, 4, 2)) {
    fprintf(stderr, "fixture: %s\n", kvb_last_error());
    kvb_manager_destroy(m);
    return NULL;
  }
  kvb_seq_options_init(&o);
  o.window_tokens = 4;
  if (kvb_seq_allocate_ex(m, 6, toks + 80, 16, &o, NULL) || kvb_seq_commit(m, 6, 16)) {
    fprintf(stderr, "fixture: %s\n", kvb_last_error());
    kvb_manager_destroy(m);
    return NULL;
  }
  return m;
}

/* ---- preparations (run on both the manager and its twin) ---- */
static void prep_none(kvb_manager* m) { (void)m; }
static void prep_big5(kvb_manager* m) { (void)kvb_seq_allocate(m, 5, toks, 28, NULL); }     /* 7 blocks */
static void prep_fill(kvb_manager* m) { (void)kvb_seq_allocate(m, 5, toks + 100, 36, NULL); } /* 9 blocks: 0 free */
static void prep_drained(kvb_manager* m) { size_t n; (void)kvb_drain_copies(m, pairs, 64, &n); }

/* ---- the calls ---- */
#define CASE(name, body) static kvb_status name(kvb_manager* m) { body }
static kvb_config cfg_with(uint32_t bs, uint32_t nb, float wm, uint32_t flags) { return kvbt_config(bs, nb, 0, wm, flags); }
static kvb_status create_cfg(kvb_config c) {
  kvb_manager* x = (kvb_manager*)&c;
  kvb_status s = kvb_manager_create(&c, &x);
  if (x != NULL) {
    kvb_manager_destroy(x);
    return KVB_ERR_INTERNAL; /* a failed create must leave *out NULL */
  }
  return s;
}
CASE(create_null_out, (void)m; kvb_config c = cfg_with(16, 4, 0, 0); return kvb_manager_create(&c, NULL);)
CASE(create_null_cfg, (void)m; kvb_manager* x = NULL; return kvb_manager_create(NULL, &x);)
CASE(create_small_struct, (void)m; kvb_config c = cfg_with(16, 4, 0, 0); c.struct_size = 8; return create_cfg(c);)
CASE(create_block_size_0, (void)m; return create_cfg(cfg_with(0, 4, 0, 0));)
CASE(create_block_size_huge, (void)m; return create_cfg(cfg_with(1u << 20, 4, 0, 0));)
CASE(create_num_blocks_0, (void)m; return create_cfg(cfg_with(16, 0, 0, 0));)
CASE(create_num_blocks_huge, (void)m; return create_cfg(cfg_with(16, 0x80000000u, 0, 0));)
CASE(create_watermark_1, (void)m; return create_cfg(cfg_with(16, 4, 1.0f, 0));)
CASE(create_watermark_neg, (void)m; return create_cfg(cfg_with(16, 4, -0.1f, 0));)
CASE(create_watermark_nan, (void)m; volatile float z = 0.0f; return create_cfg(cfg_with(16, 4, z / z, 0));)
CASE(create_bad_flags, (void)m; return create_cfg(cfg_with(16, 4, 0, 0x100));)
CASE(create_noncache_null, (void)m; kvb_config c = cfg_with(16, 4, 0, 0); c.num_non_cacheable_tokens = 2; return create_cfg(c);)
CASE(create_events_cap_0, (void)m; kvb_config c = cfg_with(16, 4, 0, KVB_CONFIG_EVENTS); c.event_capacity = 0; return create_cfg(c);)

CASE(hash_null_m, (void)m; uint64_t h; return kvb_block_hash(NULL, 0, &h);)
CASE(hash_null_out, return kvb_block_hash(m, 0, NULL);)
CASE(hash_neg, uint64_t h; return kvb_block_hash(m, -1, &h);)
CASE(hash_too_big, uint64_t h; return kvb_block_hash(m, 16, &h);)
CASE(hash_int_max, uint64_t h; return kvb_block_hash(m, INT32_MAX, &h);)
CASE(hash_uncommitted, uint64_t h; return kvb_block_hash(m, 15, &h);)

CASE(canalloc_null_m, (void)m; return kvb_seq_can_allocate(NULL, toks, 4, &out_n);)
CASE(canalloc_null_tokens, return kvb_seq_can_allocate(m, NULL, 4, &out_n);)
CASE(canalloc_zero, return kvb_seq_can_allocate(m, toks, 0, &out_n);)
CASE(canalloc_null_out, return kvb_seq_can_allocate(m, toks, 4, NULL);)
CASE(canalloc_too_big, return kvb_seq_can_allocate(m, toks, 200, &out_n);)
static kvb_seq_options opts(void) { kvb_seq_options o; kvb_seq_options_init(&o); return o; }
CASE(canalloc_ex_small_struct, kvb_seq_options o = opts(); o.struct_size = 4; return kvb_seq_can_allocate_ex(m, toks, 4, &o, &out_n);)
CASE(canalloc_ex_salt_2, kvb_seq_options o = opts(); o.has_cache_salt = 2; return kvb_seq_can_allocate_ex(m, toks, 4, &o, &out_n);)

CASE(alloc_null_m, (void)m; return kvb_seq_allocate(NULL, 9, toks, 4, NULL);)
CASE(alloc_null_tokens, return kvb_seq_allocate(m, 9, NULL, 4, NULL);)
CASE(alloc_zero, return kvb_seq_allocate(m, 9, toks, 0, NULL);)
CASE(alloc_existing, return kvb_seq_allocate(m, 1, toks, 4, NULL);)
CASE(alloc_existing_swapped, return kvb_seq_allocate(m, 2, toks, 4, NULL);)
CASE(alloc_out_of_blocks, return kvb_seq_allocate(m, 9, toks + 200, 40, NULL);)
CASE(alloc_ex_small_struct, kvb_seq_options o = opts(); o.struct_size = 0; return kvb_seq_allocate_ex(m, 9, toks, 4, &o, NULL);)
CASE(alloc_ex_salt_2, kvb_seq_options o = opts(); o.has_cache_salt = 7; return kvb_seq_allocate_ex(m, 9, toks, 4, &o, NULL);)
CASE(alloc_ex_extra_null, kvb_seq_options o = opts(); o.num_extra_keys = 1; return kvb_seq_allocate_ex(m, 9, toks, 8, &o, NULL);)
static const uint32_t bad_blocks[2] = {1, 1};
static const uint64_t bad_keys[2] = {5, 6};
CASE(alloc_ex_extra_order, kvb_seq_options o = opts(); o.num_extra_keys = 2; o.extra_key_blocks = bad_blocks;
     o.extra_keys = bad_keys; return kvb_seq_allocate_ex(m, 9, toks, 8, &o, NULL);)
CASE(alloc_ex_sink_no_window, kvb_seq_options o = opts(); o.sink_tokens = 4; return kvb_seq_allocate_ex(m, 9, toks, 8, &o, NULL);)

CASE(commit_null_m, (void)m; return kvb_seq_commit(NULL, 1, 1);)
CASE(commit_unknown, return kvb_seq_commit(m, 9, 1);)
CASE(commit_too_many, return kvb_seq_commit(m, 4, 4);)
CASE(commit_huge, return kvb_seq_commit(m, 4, SIZE_MAX);)
CASE(commit_swapped, return kvb_seq_commit(m, 2, 0);)

CASE(canappend_null_m, (void)m; return kvb_seq_can_append(NULL, 1, 1);)
CASE(canappend_unknown, return kvb_seq_can_append(m, 9, 1);)
CASE(canappend_swapped, return kvb_seq_can_append(m, 2, 1);)
CASE(canappend_too_many, return kvb_seq_can_append(m, 1, 100);)
CASE(canappend_huge, return kvb_seq_can_append(m, 1, SIZE_MAX);)

CASE(append_null_m, (void)m; return kvb_seq_append(NULL, 1, toks, 1);)
CASE(append_unknown, return kvb_seq_append(m, 9, toks, 1);)
CASE(append_null_tokens, return kvb_seq_append(m, 1, NULL, 1);)
CASE(append_swapped, return kvb_seq_append(m, 2, toks, 1);)
CASE(append_out_of_blocks, return kvb_seq_append(m, 1, toks, 100);)

CASE(free_null_m, (void)m; return kvb_seq_free(NULL, 1);)
CASE(free_unknown, return kvb_seq_free(m, 9);)
CASE(free_min, return kvb_seq_free(m, INT64_MIN);)

static int32_t table_buf[64];
CASE(table_null_m, (void)m; return kvb_seq_block_table(NULL, 1, table_buf, 64, &out_n);)
CASE(table_unknown, return kvb_seq_block_table(m, 9, table_buf, 64, &out_n);)
CASE(table_null_len, return kvb_seq_block_table(m, 1, table_buf, 64, NULL);)
CASE(table_small, return kvb_seq_block_table(m, 1, table_buf, 2, &out_n);)
CASE(table_null_out, return kvb_seq_block_table(m, 1, NULL, 64, &out_n);)
CASE(table_swapped, return kvb_seq_block_table(m, 2, table_buf, 64, &out_n);)

CASE(numfree_null_m, (void)m; return kvb_num_free_blocks(NULL, &out_n);)
CASE(numfree_null_out, return kvb_num_free_blocks(m, NULL);)
CASE(invariants_null_m, (void)m; return kvb_check_invariants(NULL);)

CASE(extra_null_m, (void)m; return kvb_seq_set_extra_key(NULL, 1, 3, 1);)
CASE(extra_unknown, return kvb_seq_set_extra_key(m, 9, 3, 1);)
CASE(extra_hashed, return kvb_seq_set_extra_key(m, 1, 0, 1);)

static kvb_seq_info info_buf;
CASE(info_null_m, (void)m; kvb_seq_info_init(&info_buf); return kvb_seq_get_info(NULL, 1, &info_buf);)
CASE(info_unknown, kvb_seq_info_init(&info_buf); return kvb_seq_get_info(m, 9, &info_buf);)
CASE(info_null_out, return kvb_seq_get_info(m, 1, NULL);)
CASE(info_small_struct, kvb_seq_info_init(&info_buf); info_buf.struct_size = 8; return kvb_seq_get_info(m, 1, &info_buf);)

CASE(fork_null_m, (void)m; return kvb_seq_fork(NULL, 1, 9);)
CASE(fork_unknown_parent, return kvb_seq_fork(m, 9, 8);)
CASE(fork_existing_child, return kvb_seq_fork(m, 1, 4);)
CASE(fork_self, return kvb_seq_fork(m, 1, 1);)
CASE(fork_swapped_parent, return kvb_seq_fork(m, 2, 9);)
CASE(fork_uncommitted, return kvb_seq_fork(m, 4, 9);)
CASE(forkat_zero, return kvb_seq_fork_at(m, 1, 9, 0);)
CASE(forkat_beyond, return kvb_seq_fork_at(m, 1, 9, 11);)
CASE(forkat_uncommitted, return kvb_seq_fork_at(m, 4, 9, 3);)
CASE(forkat_window_released, return kvb_seq_fork_at(m, 6, 9, 5);)

CASE(drain_null_m, (void)m; return kvb_drain_copies(NULL, pairs, 64, &out_n);)
CASE(drain_null_num, return kvb_drain_copies(m, pairs, 64, NULL);)
CASE(drain_small, return kvb_drain_copies(m, pairs, 0, &out_n);)
CASE(drain_null_pairs, return kvb_drain_copies(m, NULL, 64, &out_n);)

CASE(rollback_null_m, (void)m; return kvb_seq_rollback(NULL, 1, 1);)
CASE(rollback_unknown, return kvb_seq_rollback(m, 9, 1);)
CASE(rollback_all, return kvb_seq_rollback(m, 1, 10);)
CASE(rollback_more, return kvb_seq_rollback(m, 1, SIZE_MAX);)
CASE(rollback_swapped, return kvb_seq_rollback(m, 2, 1);)
CASE(rollback_window_released, return kvb_seq_rollback(m, 6, 9);)

CASE(window_null_m, (void)m; return kvb_seq_set_window(NULL, 1, 4, 0);)
CASE(window_unknown, return kvb_seq_set_window(m, 9, 4, 0);)
CASE(window_sink_no_window, return kvb_seq_set_window(m, 1, 0, 4);)
CASE(window_swapped, return kvb_seq_set_window(m, 2, 4, 0);)

static kvb_availability avail;
CASE(canswapout_null_m, (void)m; return kvb_seq_can_swap_out(NULL, 1, &avail);)
CASE(canswapout_unknown, return kvb_seq_can_swap_out(m, 9, &avail);)
CASE(canswapout_null_out, return kvb_seq_can_swap_out(m, 1, NULL);)
CASE(canswapout_swapped, return kvb_seq_can_swap_out(m, 2, &avail);)
CASE(swapout_null_m, (void)m; return kvb_seq_swap_out(NULL, 1, pairs, 64, &out_n);)
CASE(swapout_unknown, return kvb_seq_swap_out(m, 9, pairs, 64, &out_n);)
CASE(swapout_null_num, return kvb_seq_swap_out(m, 1, pairs, 64, NULL);)
CASE(swapout_small, return kvb_seq_swap_out(m, 1, pairs, 1, &out_n);)
CASE(swapout_null_pairs, return kvb_seq_swap_out(m, 1, NULL, 64, &out_n);)
CASE(swapout_swapped, return kvb_seq_swap_out(m, 2, pairs, 64, &out_n);)
CASE(swapout_pending_copy, return kvb_seq_swap_out(m, 3, pairs, 64, &out_n);)
CASE(swapout_no_host_blocks, return kvb_seq_swap_out(m, 5, pairs, 64, &out_n);)
CASE(canswapin_null_m, (void)m; return kvb_seq_can_swap_in(NULL, 2, &avail);)
CASE(canswapin_unknown, return kvb_seq_can_swap_in(m, 9, &avail);)
CASE(canswapin_null_out, return kvb_seq_can_swap_in(m, 2, NULL);)
CASE(canswapin_on_device, return kvb_seq_can_swap_in(m, 1, &avail);)
CASE(swapin_null_m, (void)m; return kvb_seq_swap_in(NULL, 2, pairs, 64, &out_n);)
CASE(swapin_unknown, return kvb_seq_swap_in(m, 9, pairs, 64, &out_n);)
CASE(swapin_on_device, return kvb_seq_swap_in(m, 1, pairs, 64, &out_n);)
CASE(swapin_null_num, return kvb_seq_swap_in(m, 2, pairs, 64, NULL);)
CASE(swapin_small, return kvb_seq_swap_in(m, 2, pairs, 1, &out_n);)
CASE(swapin_null_pairs, return kvb_seq_swap_in(m, 2, NULL, 64, &out_n);)
CASE(swapin_out_of_blocks, return kvb_seq_swap_in(m, 2, pairs, 64, &out_n);)

static int32_t bt[8 * 16], lens[8], qs[9];
static int64_t slots[64];
static kvb_batch batch_of(uint32_t cols, size_t slot_cap) { return kvbt_batch(cols, bt, lens, qs, slots, slot_cap); }
static const int64_t batch_ids[3] = {1, 3, 4};
static const int64_t batch_bad[3] = {1, 9, 4};
static const int64_t batch_ids_swapped[3] = {1, 2, 4};
CASE(batch_null_m, (void)m; kvb_batch b = batch_of(16, 64); return kvb_batch_export(NULL, batch_ids, 3, &b);)
CASE(batch_null_batch, return kvb_batch_export(m, batch_ids, 3, NULL);)
CASE(batch_small_struct, kvb_batch b = batch_of(16, 64); b.struct_size = 8; return kvb_batch_export(m, batch_ids, 3, &b);)
CASE(batch_null_ids, kvb_batch b = batch_of(16, 64); return kvb_batch_export(m, NULL, 3, &b);)
CASE(batch_unknown, kvb_batch b = batch_of(16, 64); return kvb_batch_export(m, batch_bad, 3, &b);)
CASE(batch_swapped, kvb_batch b = batch_of(16, 64); return kvb_batch_export(m, batch_ids_swapped, 3, &b);)
CASE(batch_small_tables, kvb_batch b = batch_of(2, 64); return kvb_batch_export(m, batch_ids, 3, &b);)
CASE(batch_small_slots, kvb_batch b = batch_of(16, 1); return kvb_batch_export(m, batch_ids, 3, &b);)

static kvb_stats stats_buf;
CASE(stats_null_m, (void)m; kvb_stats_init(&stats_buf); return kvb_get_stats(NULL, &stats_buf);)
CASE(stats_null_out, return kvb_get_stats(m, NULL);)
CASE(stats_small_struct, kvb_stats_init(&stats_buf); stats_buf.struct_size = 16; return kvb_get_stats(m, &stats_buf);)

static kvb_event ev_buf[4];
static int64_t ev_toks[64];
CASE(events_null_m, (void)m; return kvb_drain_events(NULL, ev_buf, 4, ev_toks, 64, &out_n, NULL);)
CASE(events_null_num, return kvb_drain_events(m, ev_buf, 4, ev_toks, 64, NULL, NULL);)
CASE(events_null_events, return kvb_drain_events(m, NULL, 4, ev_toks, 64, &out_n, NULL);)
CASE(events_null_tokens, return kvb_drain_events(m, ev_buf, 4, NULL, 64, &out_n, NULL);)
CASE(events_zero_capacity, return kvb_drain_events(m, ev_buf, 0, ev_toks, 64, &out_n, NULL);)
CASE(events_small_tokens, return kvb_drain_events(m, ev_buf, 4, ev_toks, 3, &out_n, NULL);)
CASE(events_off, return kvb_drain_events(m, ev_buf, 4, ev_toks, 64, &out_n, NULL);)

CASE(reset_null_m, (void)m; return kvb_reset_prefix_cache(NULL);)
CASE(reset_in_use, return kvb_reset_prefix_cache(m);)

typedef struct {
  const char* name;
  kvb_status (*fn)(kvb_manager*);
  kvb_status want;
  void (*prep)(kvb_manager*);
  int events;
} error_case;

#define E(fn, want) {#fn, fn, want, prep_none, 1}
#define EP(fn, want, prep) {#fn, fn, want, prep, 1}
static const error_case cases[] = {
  E(create_null_out, KVB_ERR_INVALID_ARGUMENT), E(create_null_cfg, KVB_ERR_INVALID_ARGUMENT),
  E(create_small_struct, KVB_ERR_INVALID_ARGUMENT), E(create_block_size_0, KVB_ERR_INVALID_ARGUMENT),
  E(create_block_size_huge, KVB_ERR_INVALID_ARGUMENT), E(create_num_blocks_0, KVB_ERR_INVALID_ARGUMENT),
  E(create_num_blocks_huge, KVB_ERR_INVALID_ARGUMENT), E(create_watermark_1, KVB_ERR_INVALID_ARGUMENT),
  E(create_watermark_neg, KVB_ERR_INVALID_ARGUMENT), E(create_watermark_nan, KVB_ERR_INVALID_ARGUMENT),
  E(create_bad_flags, KVB_ERR_INVALID_ARGUMENT), E(create_noncache_null, KVB_ERR_INVALID_ARGUMENT),
  E(create_events_cap_0, KVB_ERR_INVALID_ARGUMENT),
  E(hash_null_m, KVB_ERR_INVALID_ARGUMENT), E(hash_null_out, KVB_ERR_INVALID_ARGUMENT),
  E(hash_neg, KVB_ERR_INVALID_ARGUMENT), E(hash_too_big, KVB_ERR_INVALID_ARGUMENT),
  E(hash_int_max, KVB_ERR_INVALID_ARGUMENT), E(hash_uncommitted, KVB_ERR_BAD_STATE),
  E(canalloc_null_m, KVB_ERR_INVALID_ARGUMENT), E(canalloc_null_tokens, KVB_ERR_INVALID_ARGUMENT),
  E(canalloc_zero, KVB_ERR_INVALID_ARGUMENT), E(canalloc_null_out, KVB_ERR_INVALID_ARGUMENT),
  E(canalloc_too_big, KVB_ERR_OUT_OF_BLOCKS), E(canalloc_ex_small_struct, KVB_ERR_INVALID_ARGUMENT),
  E(canalloc_ex_salt_2, KVB_ERR_INVALID_ARGUMENT),
  E(alloc_null_m, KVB_ERR_INVALID_ARGUMENT), E(alloc_null_tokens, KVB_ERR_INVALID_ARGUMENT),
  E(alloc_zero, KVB_ERR_INVALID_ARGUMENT), E(alloc_existing, KVB_ERR_SEQUENCE_EXISTS),
  E(alloc_existing_swapped, KVB_ERR_SEQUENCE_EXISTS), E(alloc_out_of_blocks, KVB_ERR_OUT_OF_BLOCKS),
  E(alloc_ex_small_struct, KVB_ERR_INVALID_ARGUMENT), E(alloc_ex_salt_2, KVB_ERR_INVALID_ARGUMENT),
  E(alloc_ex_extra_null, KVB_ERR_INVALID_ARGUMENT), E(alloc_ex_extra_order, KVB_ERR_INVALID_ARGUMENT),
  E(alloc_ex_sink_no_window, KVB_ERR_INVALID_ARGUMENT),
  E(commit_null_m, KVB_ERR_INVALID_ARGUMENT), E(commit_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(commit_too_many, KVB_ERR_INVALID_ARGUMENT), E(commit_huge, KVB_ERR_INVALID_ARGUMENT),
  E(commit_swapped, KVB_ERR_BAD_STATE),
  E(canappend_null_m, KVB_ERR_INVALID_ARGUMENT), E(canappend_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(canappend_swapped, KVB_ERR_BAD_STATE), E(canappend_too_many, KVB_ERR_OUT_OF_BLOCKS),
  E(canappend_huge, KVB_ERR_OUT_OF_BLOCKS),
  E(append_null_m, KVB_ERR_INVALID_ARGUMENT), E(append_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(append_null_tokens, KVB_ERR_INVALID_ARGUMENT), E(append_swapped, KVB_ERR_BAD_STATE),
  E(append_out_of_blocks, KVB_ERR_OUT_OF_BLOCKS),
  E(free_null_m, KVB_ERR_INVALID_ARGUMENT), E(free_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(free_min, KVB_ERR_NO_SUCH_SEQUENCE),
  E(table_null_m, KVB_ERR_INVALID_ARGUMENT), E(table_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(table_null_len, KVB_ERR_INVALID_ARGUMENT), E(table_small, KVB_ERR_BUFFER_TOO_SMALL),
  E(table_null_out, KVB_ERR_INVALID_ARGUMENT), E(table_swapped, KVB_ERR_BAD_STATE),
  E(numfree_null_m, KVB_ERR_INVALID_ARGUMENT), E(numfree_null_out, KVB_ERR_INVALID_ARGUMENT),
  E(invariants_null_m, KVB_ERR_INVALID_ARGUMENT),
  E(extra_null_m, KVB_ERR_INVALID_ARGUMENT), E(extra_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(extra_hashed, KVB_ERR_BAD_STATE),
  E(info_null_m, KVB_ERR_INVALID_ARGUMENT), E(info_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(info_null_out, KVB_ERR_INVALID_ARGUMENT), E(info_small_struct, KVB_ERR_INVALID_ARGUMENT),
  E(fork_null_m, KVB_ERR_INVALID_ARGUMENT), E(fork_unknown_parent, KVB_ERR_NO_SUCH_SEQUENCE),
  E(fork_existing_child, KVB_ERR_SEQUENCE_EXISTS), E(fork_self, KVB_ERR_SEQUENCE_EXISTS),
  E(fork_swapped_parent, KVB_ERR_BAD_STATE), E(fork_uncommitted, KVB_ERR_BAD_STATE),
  E(forkat_zero, KVB_ERR_INVALID_ARGUMENT), E(forkat_beyond, KVB_ERR_INVALID_ARGUMENT),
  E(forkat_uncommitted, KVB_ERR_BAD_STATE), E(forkat_window_released, KVB_ERR_BAD_STATE),
  E(drain_null_m, KVB_ERR_INVALID_ARGUMENT), E(drain_null_num, KVB_ERR_INVALID_ARGUMENT),
  E(drain_small, KVB_ERR_BUFFER_TOO_SMALL), E(drain_null_pairs, KVB_ERR_INVALID_ARGUMENT),
  E(rollback_null_m, KVB_ERR_INVALID_ARGUMENT), E(rollback_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(rollback_all, KVB_ERR_INVALID_ARGUMENT), E(rollback_more, KVB_ERR_INVALID_ARGUMENT),
  E(rollback_swapped, KVB_ERR_BAD_STATE), E(rollback_window_released, KVB_ERR_BAD_STATE),
  E(window_null_m, KVB_ERR_INVALID_ARGUMENT), E(window_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(window_sink_no_window, KVB_ERR_INVALID_ARGUMENT), E(window_swapped, KVB_ERR_BAD_STATE),
  E(canswapout_null_m, KVB_ERR_INVALID_ARGUMENT), E(canswapout_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(canswapout_null_out, KVB_ERR_INVALID_ARGUMENT), E(canswapout_swapped, KVB_ERR_BAD_STATE),
  E(swapout_null_m, KVB_ERR_INVALID_ARGUMENT), E(swapout_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(swapout_null_num, KVB_ERR_INVALID_ARGUMENT), E(swapout_small, KVB_ERR_BUFFER_TOO_SMALL),
  E(swapout_null_pairs, KVB_ERR_INVALID_ARGUMENT), E(swapout_swapped, KVB_ERR_BAD_STATE),
  E(swapout_pending_copy, KVB_ERR_BAD_STATE), EP(swapout_no_host_blocks, KVB_ERR_OUT_OF_BLOCKS, prep_big5),
  E(canswapin_null_m, KVB_ERR_INVALID_ARGUMENT), E(canswapin_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(canswapin_null_out, KVB_ERR_INVALID_ARGUMENT), E(canswapin_on_device, KVB_ERR_BAD_STATE),
  E(swapin_null_m, KVB_ERR_INVALID_ARGUMENT), E(swapin_unknown, KVB_ERR_NO_SUCH_SEQUENCE),
  E(swapin_on_device, KVB_ERR_BAD_STATE), E(swapin_null_num, KVB_ERR_INVALID_ARGUMENT),
  E(swapin_small, KVB_ERR_BUFFER_TOO_SMALL), E(swapin_null_pairs, KVB_ERR_INVALID_ARGUMENT),
  EP(swapin_out_of_blocks, KVB_ERR_OUT_OF_BLOCKS, prep_fill),
  E(batch_null_m, KVB_ERR_INVALID_ARGUMENT), E(batch_null_batch, KVB_ERR_INVALID_ARGUMENT),
  E(batch_small_struct, KVB_ERR_INVALID_ARGUMENT), E(batch_null_ids, KVB_ERR_INVALID_ARGUMENT),
  E(batch_unknown, KVB_ERR_NO_SUCH_SEQUENCE), E(batch_swapped, KVB_ERR_BAD_STATE),
  E(batch_small_tables, KVB_ERR_BUFFER_TOO_SMALL), E(batch_small_slots, KVB_ERR_BUFFER_TOO_SMALL),
  E(stats_null_m, KVB_ERR_INVALID_ARGUMENT), E(stats_null_out, KVB_ERR_INVALID_ARGUMENT),
  E(stats_small_struct, KVB_ERR_INVALID_ARGUMENT),
  E(events_null_m, KVB_ERR_INVALID_ARGUMENT), E(events_null_num, KVB_ERR_INVALID_ARGUMENT),
  E(events_null_events, KVB_ERR_INVALID_ARGUMENT), E(events_null_tokens, KVB_ERR_INVALID_ARGUMENT),
  E(events_zero_capacity, KVB_ERR_BUFFER_TOO_SMALL), E(events_small_tokens, KVB_ERR_BUFFER_TOO_SMALL),
  {"events_off", events_off, KVB_ERR_BAD_STATE, prep_none, 0},
  E(reset_null_m, KVB_ERR_INVALID_ARGUMENT), E(reset_in_use, KVB_ERR_BAD_STATE),
  EP(drain_small, KVB_OK, prep_drained), /* nothing pending: capacity 0 is enough */
};

static char primed[512];
static void prime_last_error(void) {
  kvb_config c = cfg_with(16, 4, 7.25f, 0);
  kvb_manager* x = NULL;
  (void)kvb_manager_create(&c, &x); /* "watermark 7.25 is not in [0, 1)" */
  snprintf(primed, sizeof primed, "%s", kvb_last_error());
}

static void test_error_table(void) {
  size_t i;
  kvbt_state a = {0}, b = {0};
  int checked = 0;
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const error_case* c = &cases[i];
    kvb_manager* m = fixture(c->events);
    kvb_manager* twin = fixture(c->events);
    kvb_status s;
    long d;
    CHECK(m != NULL && twin != NULL);
    if (!m || !twin) return;
    c->prep(m);
    c->prep(twin);
    CHECK_OK(kvb_check_invariants(m));
    prime_last_error();
    s = c->fn(m);
    if (s != c->want) {
      fprintf(stderr, "%s: gave %s, want %s (%s)\n", c->name, kvb_status_string(s), kvb_status_string(c->want),
              kvb_last_error());
      kvbt_case_failures++;
    }
    if (s != KVB_OK && (kvb_last_error()[0] == '\0' || strcmp(kvb_last_error(), primed) == 0)) {
      fprintf(stderr, "%s: no message of its own in kvb_last_error() (\"%s\")\n", c->name, kvb_last_error());
      kvbt_case_failures++;
    }
    if (kvb_check_invariants(m) != KVB_OK) {
      fprintf(stderr, "%s: invariants broken: %s\n", c->name, kvb_last_error());
      kvbt_case_failures++;
    }
    kvbt_state_take(twin, kIds, NUM_IDS, 1, &a);
    kvbt_state_take(m, kIds, NUM_IDS, 1, &b);
    d = kvbt_state_diff(&a, &b);
    if (d >= 0 && c->want != KVB_OK) {
      fprintf(stderr, "%s: the failed call changed the manager (state byte %ld differs)\n", c->name, d);
      kvbt_case_failures++;
    }
    kvb_manager_destroy(m);
    kvb_manager_destroy(twin);
    ++checked;
  }
  printf("%d error cases checked\n", checked);
  kvbt_state_free(&a);
  kvbt_state_free(&b);
}

/* The fixture's snapshot must see what it is meant to see, or the comparison above proves little. */
static void test_snapshot_sees_changes(void) {
  kvb_manager* m = fixture(1);
  kvb_manager* twin = fixture(1);
  kvbt_state a = {0}, b = {0};
  int64_t t = 1;
  CHECK(m && twin);
  if (!m || !twin) return;
  kvbt_state_take(twin, kIds, NUM_IDS, 1, &a);
  kvbt_state_take(m, kIds, NUM_IDS, 1, &b);
  CHECK(kvbt_state_diff(&a, &b) < 0); /* twins are identical, pending copies and events included */
  kvb_manager_destroy(m);
  m = fixture(1);
  CHECK_OK(kvb_seq_commit(m, 4, 1)); /* one more computed token: info and stats change */
  kvbt_state_take(m, kIds, NUM_IDS, 1, &b);
  CHECK(kvbt_state_diff(&a, &b) >= 0);
  kvb_manager_destroy(m);
  m = fixture(1);
  CHECK_OK(kvb_seq_append(m, 1, &t, 1)); /* a copy-on-write pair and a new block */
  kvbt_state_take(m, kIds, NUM_IDS, 1, &b);
  CHECK(kvbt_state_diff(&a, &b) >= 0);
  kvb_manager_destroy(m);
  kvb_manager_destroy(twin);
  kvbt_state_free(&a);
  kvbt_state_free(&b);
}

int main(void) {
  RUN_TEST(test_snapshot_sees_changes);
  RUN_TEST(test_error_table);
  TEST_SUMMARY();
}
