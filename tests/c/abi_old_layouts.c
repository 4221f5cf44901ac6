/* Callers built against an older header (abi/ABI.md, "Growing a struct"): kvb_config, kvb_batch and
 * kvb_stats grew at their ends, and a caller that knows only the earlier layout passes the struct_size of
 * that layout. The library must then read only the fields that size covers (the later ones take their
 * defaults, whatever bytes lie there) and write nothing beyond it. Each struct sits at the start of a
 * buffer poisoned with 0xcd beyond the old size: poison that is read would change the behaviour (a
 * garbage group count or group index is refused), poison that is written would show. */
#define _GNU_SOURCE /* dlvsym */
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "kvbt_common.h"

#define POISON 0xcd

/* A buffer for one struct of the current layout and some slack, aligned for any of them. */
typedef union {
  kvb_config cfg;
  kvb_batch batch;
  kvb_stats stats;
  unsigned char bytes[sizeof(kvb_stats) + sizeof(kvb_config) + sizeof(kvb_batch) + 32];
} buffer;

static int untouched_from(const buffer* b, size_t from) {
  size_t i;
  for (i = from; i < sizeof b->bytes; ++i)
    if (b->bytes[i] != POISON) return 0;
  return 1;
}

/* The old layout as the old kvb_xxx_init left it: zeroed up to the old size, struct_size = old size. */
static void old_init(buffer* b, size_t old_size) {
  memset(b->bytes, POISON, sizeof b->bytes);
  memset(b->bytes, 0, old_size);
  b->cfg.struct_size = (uint32_t)old_size; /* the first member of each, at offset 0 */
}

/* kvb_config before KV cache groups: groups / num_groups (poison: a huge count) are not read, the manager
   has the one implicit group, and the flags of that layout are read. */
static void test_config_before_groups(void) {
  const size_t old = offsetof(kvb_config, groups);
  buffer b;
  kvb_manager* m = NULL;
  int64_t t[5] = {1, 2, 3, 4, 5};
  int32_t table[4];
  size_t n = 0;
  kvb_stats st;
  old_init(&b, old);
  b.cfg.block_size = 4;
  b.cfg.num_blocks = 8;
  b.cfg.flags = KVB_CONFIG_EVENTS; /* a field of the old layout: read */
  b.cfg.event_capacity = 16;
  CHECK_OK(kvb_manager_create(&b.cfg, &m));
  CHECK(untouched_from(&b, old));
  CHECK_OK(kvb_seq_allocate(m, 1, t, 5, NULL));
  CHECK_OK(kvb_seq_block_table_group(m, 1, 0, table, 4, &n));
  CHECK(n == 2);
  CHECK_STATUS(kvb_seq_block_table_group(m, 1, 1, table, 4, &n), KVB_ERR_INVALID_ARGUMENT); /* one group */
  CHECK_OK(kvb_seq_commit(m, 1, 5));
  {
    kvb_event ev[4];
    int64_t tk[16];
    CHECK_OK(kvb_drain_events(m, ev, 4, tk, 16, &n, NULL)); /* events are on (flags was read) */
    CHECK(n == 1 && ev[0].type == KVB_EVENT_BLOCK_STORED);
  }
  kvb_stats_init(&st);
  CHECK_OK(kvb_get_stats(m, &st));
  CHECK(st.num_blocks == 8 && st.block_size == 4);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

static kvb_manager* two_sequences(void) {
  kvb_manager* m = kvbt_make(4, 16);
  int64_t t[10];
  kvbt_iota(t, 10, 100);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 10, NULL));
  CHECK_OK(kvb_seq_allocate(m, 2, t, 3, NULL));
  return m;
}

/* kvb_batch before KV cache groups, as a caller that ends the struct at its last field passes it: the
   group (poison: an index far out of range) is not read, so group 0 is exported, and nothing is written
   past max_blocks_needed. (The old sizeof is the current one, the group sitting in the old tail padding:
   a caller whose old kvb_batch_init zeroed that padding exports group 0 as well; see ABI.md.) */
static void test_batch_before_group(void) {
  const size_t old = offsetof(kvb_batch, group);
  kvb_manager* m = two_sequences();
  const int64_t ids[2] = {1, 2};
  int32_t tables[2 * 4], lens[2], qs[3], want[2 * 4];
  int64_t slots[16];
  buffer b;
  kvb_batch cur;
  old_init(&b, old);
  b.batch.max_blocks_per_seq = 4;
  b.batch.block_tables = tables;
  b.batch.seq_lens = lens;
  b.batch.query_start = qs;
  b.batch.slot_mapping = slots;
  b.batch.slot_capacity = 16;
  CHECK_OK(kvb_batch_export(m, ids, 2, &b.batch));
  CHECK(untouched_from(&b, old));
  CHECK(b.batch.struct_size == old && b.batch.num_slots == 13 && b.batch.max_blocks_needed == 3);
  CHECK(lens[0] == 10 && lens[1] == 3 && qs[2] == 13);
  /* the same export through the current layout, group 0 */
  kvb_batch_init(&cur);
  cur.max_blocks_per_seq = 4;
  cur.block_tables = want;
  CHECK_OK(kvb_batch_export(m, ids, 2, &cur));
  CHECK(memcmp(tables, want, sizeof want) == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* The kvb_batch before prefix groups (64 bytes, its struct_size) ends where prefix_groups begins; the
   poisoned pointer past it is not read (no groups), and nothing is written past the old size. */
static void test_batch_before_prefix_groups(void) {
  const size_t old = offsetof(kvb_batch, prefix_groups);
  kvb_manager* m = two_sequences();
  const int64_t ids[2] = {1, 2};
  int32_t lens[2];
  buffer b;
  old_init(&b, old);
  b.batch.seq_lens = lens;
  CHECK_OK(kvb_batch_export(m, ids, 2, &b.batch));
  CHECK(untouched_from(&b, old));
  CHECK(lens[0] == 10 && lens[1] == 3);
  kvb_manager_destroy(m);
}

/* kvb_batch grew tree_mask with token trees (KVB_0.3): kvb_batch_init@KVB_0.1 writes the layout up to
   prefix_groups, and a struct of that size exports without a mask; the default version writes it all. */
static void test_batch_grown_init_versions(void) {
  typedef void (*init_fn)(kvb_batch*);
  const size_t old = offsetof(kvb_batch, tree_mask);
  kvb_manager* m = two_sequences();
  const int64_t ids[2] = {1, 2};
  int32_t lens[2];
  init_fn b01, b03;
  void* sym[2];
  buffer b;
  size_t i;
  sym[0] = dlvsym(RTLD_DEFAULT, "kvb_batch_init", "KVB_0.1");
  sym[1] = dlvsym(RTLD_DEFAULT, "kvb_batch_init", "KVB_0.3");
  memcpy(&b01, &sym[0], sizeof b01);
  memcpy(&b03, &sym[1], sizeof b03);
  CHECK(b01 && b03 && b01 != b03);
  if (b01 && b03) {
    memset(b.bytes, POISON, sizeof b.bytes);
    b01(&b.batch);
    CHECK(b.batch.struct_size == old && b.batch.prefix_groups == NULL);
    for (i = old; i < sizeof b.bytes; ++i) CHECK(b.bytes[i] == POISON);
    b.batch.seq_lens = lens;
    CHECK_OK(kvb_batch_export(m, ids, 2, &b.batch));
    CHECK(untouched_from(&b, old) && lens[0] == 10 && lens[1] == 3);
    memset(b.bytes, POISON, sizeof b.bytes);
    b03(&b.batch);
    CHECK(b.batch.struct_size == sizeof(kvb_batch) && b.batch.tree_mask == NULL && untouched_from(&b, sizeof(kvb_batch)));
  }
  kvb_manager_destroy(m);
}

/* The earlier kvb_batch was 64 bytes too (group sits in its tail padding), so an old caller's struct_size
   covers group: its old kvb_batch_init zeroed the padding (group 0, the default); garbage there, from a
   caller that did not zero the struct, is refused on a manager without groups (ABI.md). */
static void test_batch_old_padding(void) {
  kvb_manager* m = two_sequences();
  const int64_t ids[2] = {1, 2};
  int32_t lens[2];
  buffer b;
  CHECK(offsetof(kvb_batch, group) + sizeof(uint32_t) == offsetof(kvb_batch, prefix_groups)); /* the case */
  old_init(&b, offsetof(kvb_batch, prefix_groups));
  b.batch.seq_lens = lens;
  CHECK_OK(kvb_batch_export(m, ids, 2, &b.batch)); /* zeroed padding: group 0 */
  CHECK(lens[0] == 10 && lens[1] == 3);
  memset(&b.batch.group, POISON, sizeof b.batch.group);
  CHECK_STATUS(kvb_batch_export(m, ids, 2, &b.batch), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "group") != NULL);
  kvb_manager_destroy(m);
}

/* kvb_stats before the host cache's counters: the first-version fields are written, nothing after. */
static void test_stats_before_host_cache(void) {
  const size_t old = offsetof(kvb_stats, device_hit_tokens);
  kvb_manager* m = two_sequences();
  buffer b;
  old_init(&b, old);
  CHECK_OK(kvb_get_stats(m, &b.stats));
  CHECK(untouched_from(&b, old));
  CHECK(b.stats.struct_size == old && b.stats.block_size == 4 && b.stats.num_blocks == 16 &&
        b.stats.num_seqs == 2 && b.stats.used_blocks == 4 && b.stats.free_blocks == 12 &&
        b.stats.query_tokens == 13 && b.stats.events_dropped == 0);
  kvb_manager_destroy(m);
}

/* The _init functions are what cannot serve an old caller by struct_size: they write the library's own
   sizeof (which is why they carry symbol versions, ABI.md). They write exactly that much. */
static void test_init_writes_its_own_sizeof(void) {
  buffer b;
  memset(b.bytes, POISON, sizeof b.bytes);
  kvb_config_init(&b.cfg);
  CHECK(b.cfg.struct_size == sizeof(kvb_config) && untouched_from(&b, sizeof(kvb_config)));
  memset(b.bytes, POISON, sizeof b.bytes);
  kvb_batch_init(&b.batch);
  CHECK(b.batch.struct_size == sizeof(kvb_batch) && b.batch.group == 0 && untouched_from(&b, sizeof(kvb_batch)));
  memset(b.bytes, POISON, sizeof b.bytes);
  kvb_stats_init(&b.stats);
  CHECK(b.stats.struct_size == sizeof(kvb_stats) && untouched_from(&b, sizeof(kvb_stats)));
}

/* kvb_cache_desc and kvb_attention_args grew with FP8 caches (KVB_0.2): a binary linked before binds
   kvb_xxx_init@KVB_0.1, which writes only the 0.1 size (80 / 112 bytes), and the default version writes
   the whole new struct with scales 1.0. (Looked up with dlvsym, as the loader would bind them.) */
static void test_fp8_grown_init_versions(void) {
  typedef void (*desc_init_fn)(kvb_cache_desc*);
  typedef void (*args_init_fn)(kvb_attention_args*);
  union {
    kvb_cache_desc d;
    kvb_attention_args a;
    unsigned char bytes[sizeof(kvb_cache_desc) + sizeof(kvb_attention_args) + 32];
  } b;
  size_t i;
  desc_init_fn d01, d02;
  args_init_fn a01, a02;
  void* sym[4];
  sym[0] = dlvsym(RTLD_DEFAULT, "kvb_cache_desc_init", "KVB_0.1");
  sym[1] = dlvsym(RTLD_DEFAULT, "kvb_cache_desc_init", "KVB_0.2");
  sym[2] = dlvsym(RTLD_DEFAULT, "kvb_attention_args_init", "KVB_0.1");
  sym[3] = dlvsym(RTLD_DEFAULT, "kvb_attention_args_init", "KVB_0.2");
  memcpy(&d01, &sym[0], sizeof d01); /* (POSIX: a data pointer that holds a function's address) */
  memcpy(&d02, &sym[1], sizeof d02);
  memcpy(&a01, &sym[2], sizeof a01);
  memcpy(&a02, &sym[3], sizeof a02);
  CHECK(d01 && d02 && a01 && a02 && d01 != d02 && a01 != a02);
  if (!(d01 && d02 && a01 && a02)) return;
  CHECK(offsetof(kvb_cache_desc, k_scale) == 80 && offsetof(kvb_attention_args, q_dtype) == 112);
  memset(b.bytes, POISON, sizeof b.bytes);
  d01(&b.d);
  CHECK(b.d.struct_size == 80 && b.d.dtype == KVB_DTYPE_FP16);
  for (i = 80; i < sizeof b.bytes; ++i) CHECK(b.bytes[i] == POISON);
  memset(b.bytes, POISON, sizeof b.bytes);
  d02(&b.d);
  CHECK(b.d.struct_size == sizeof(kvb_cache_desc) && b.d.k_scale == 1.0f && b.d.v_scale == 1.0f &&
        b.d.k_head_scales == NULL && b.d.v_head_scales == NULL);
  memset(b.bytes, POISON, sizeof b.bytes);
  a01(&b.a);
  CHECK(b.a.struct_size == 112);
  for (i = 112; i < sizeof b.bytes; ++i) CHECK(b.bytes[i] == POISON);
  memset(b.bytes, POISON, sizeof b.bytes);
  a02(&b.a);
  CHECK(b.a.struct_size == sizeof(kvb_attention_args) && b.a.q_dtype == KVB_DTYPE_FP16);
}

/* kvb_prefill_args grew allow_tf32 / reserved2 after KVB_0.1: kvb_prefill_args_init@KVB_0.1 writes only
   the 128-byte 0.1 layout (q_dtype, in the former reserved slot, inside it), the default version the whole
   struct with allow_tf32 0 (exact fp32). */
static void test_prefill_grown_init_versions(void) {
  typedef void (*init_fn)(kvb_prefill_args*);
  union {
    kvb_prefill_args a;
    unsigned char bytes[sizeof(kvb_prefill_args) + 32];
  } b;
  size_t i;
  init_fn p01, p02;
  void* sym[2];
  sym[0] = dlvsym(RTLD_DEFAULT, "kvb_prefill_args_init", "KVB_0.1");
  sym[1] = dlvsym(RTLD_DEFAULT, "kvb_prefill_args_init", "KVB_0.2");
  memcpy(&p01, &sym[0], sizeof p01);
  memcpy(&p02, &sym[1], sizeof p02);
  CHECK(p01 && p02 && p01 != p02);
  if (!(p01 && p02)) return;
  CHECK(offsetof(kvb_prefill_args, allow_tf32) == 128 && offsetof(kvb_prefill_args, q_dtype) < 128);
  memset(b.bytes, POISON, sizeof b.bytes);
  p01(&b.a);
  CHECK(b.a.struct_size == 128 && b.a.q_dtype == 0 && b.a.workspace_size == 0);
  for (i = 128; i < sizeof b.bytes; ++i) CHECK(b.bytes[i] == POISON);
  memset(b.bytes, POISON, sizeof b.bytes);
  p02(&b.a);
  CHECK(b.a.struct_size == sizeof(kvb_prefill_args) && b.a.allow_tf32 == 0 && b.a.reserved2 == 0);
  for (i = sizeof(kvb_prefill_args); i < sizeof b.bytes; ++i) CHECK(b.bytes[i] == POISON);
}

/* kvb_stats grew the store-tier counters after KVB_0.1: kvb_stats_init@KVB_0.1 writes only the 0.1
   layout (up to cached_host_blocks), the default version the whole struct; kvb_get_stats fills each
   caller's size and nothing beyond. */
static void test_stats_grown_init_versions(void) {
  typedef void (*init_fn)(kvb_stats*);
  union {
    kvb_stats a;
    unsigned char bytes[sizeof(kvb_stats) + 32];
  } b;
  const size_t old = offsetof(kvb_stats, store_hit_tokens);
  size_t i;
  init_fn s01, s02;
  void* sym[2];
  kvb_manager* m = kvbt_make(4, 8);
  sym[0] = dlvsym(RTLD_DEFAULT, "kvb_stats_init", "KVB_0.1");
  sym[1] = dlvsym(RTLD_DEFAULT, "kvb_stats_init", "KVB_0.2");
  memcpy(&s01, &sym[0], sizeof s01);
  memcpy(&s02, &sym[1], sizeof s02);
  CHECK(s01 && s02 && s01 != s02);
  if (s01 && s02) {
    memset(b.bytes, POISON, sizeof b.bytes);
    s01(&b.a);
    CHECK(b.a.struct_size == old && b.a.cached_host_blocks == 0);
    for (i = old; i < sizeof b.bytes; ++i) CHECK(b.bytes[i] == POISON);
    CHECK_OK(kvb_get_stats(m, &b.a));
    CHECK(b.a.struct_size == old && b.a.num_blocks == 8);
    for (i = old; i < sizeof b.bytes; ++i) CHECK(b.bytes[i] == POISON);
    memset(b.bytes, POISON, sizeof b.bytes);
    s02(&b.a);
    CHECK(b.a.struct_size == sizeof(kvb_stats) && b.a.store_filling_blocks == 0);
    for (i = sizeof(kvb_stats); i < sizeof b.bytes; ++i) CHECK(b.bytes[i] == POISON);
  }
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_fp8_grown_init_versions);
  RUN_TEST(test_stats_grown_init_versions);
  RUN_TEST(test_prefill_grown_init_versions);
  RUN_TEST(test_config_before_groups);
  RUN_TEST(test_batch_before_group);
  RUN_TEST(test_batch_old_padding);
  RUN_TEST(test_batch_before_prefix_groups);
  RUN_TEST(test_batch_grown_init_versions);
  RUN_TEST(test_stats_before_host_cache);
  RUN_TEST(test_init_writes_its_own_sizeof);
  TEST_SUMMARY();
}
