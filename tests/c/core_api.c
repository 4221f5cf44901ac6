/* The core flow (docs/ARCHITECTURE.md, "Sequences"; the core contract of kvblock.h) through the C API:
 * allocate / commit / append / free, block tables, prefix hits, the free-queue order, eviction,
 * non-cacheable tokens, cache salt, extra keys, the keyed index and the watermark. */
#include "kvbt_common.h"

static void expect_table(kvb_manager* m, int64_t id, const int32_t* want, size_t n, int line) {
  int32_t got[KVBT_MAX_BLOCKS];
  long len = kvbt_table(m, id, got);
  size_t i;
  if (len != (long)n) {
    fprintf(stderr, "line %d: seq %lld has %ld blocks, want %zu\n", line, (long long)id, len, n);
    kvbt_case_failures++;
    return;
  }
  for (i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      fprintf(stderr, "line %d: seq %lld block %zu is %d, want %d\n", line, (long long)id, i, got[i], want[i]);
      kvbt_case_failures++;
    }
}
#define EXPECT_TABLE(m, id, ...)                                                  \
  do {                                                                            \
    const int32_t want_[] = {__VA_ARGS__};                                        \
    expect_table((m), (id), want_, sizeof want_ / sizeof want_[0], __LINE__);     \
  } while (0)

static void test_version(void) {
  char buf[32];
  CHECK(kvb_version() == KVB_VERSION_MAJOR * 10000 + KVB_VERSION_MINOR * 100 + KVB_VERSION_PATCH);
  snprintf(buf, sizeof buf, "%d.%d.%d", KVB_VERSION_MAJOR, KVB_VERSION_MINOR, KVB_VERSION_PATCH);
  CHECK(strcmp(kvb_version_string(), buf) == 0);
}

static void test_init_defaults(void) {
  kvb_config cfg;
  kvb_seq_options o;
  kvb_seq_info info;
  kvb_stats st;
  kvb_batch b;
  memset(&cfg, 0xab, sizeof cfg);
  kvb_config_init(&cfg);
  CHECK(cfg.struct_size == sizeof cfg);
  CHECK(cfg.block_size == 16);
  CHECK(cfg.num_blocks == 0 && cfg.num_host_blocks == 0 && cfg.watermark == 0.0f);
  CHECK(cfg.non_cacheable_tokens == NULL && cfg.num_non_cacheable_tokens == 0);
  CHECK(cfg.flags == 0 && cfg.index_seed == 0);
  memset(&o, 0xab, sizeof o);
  kvb_seq_options_init(&o);
  CHECK(o.struct_size == sizeof o && o.has_cache_salt == 0 && o.num_extra_keys == 0 && o.window_tokens == 0 &&
        o.sink_tokens == 0 && o.extra_keys == NULL && o.extra_key_blocks == NULL);
  kvb_seq_info_init(&info);
  CHECK(info.struct_size == sizeof info);
  kvb_stats_init(&st);
  CHECK(st.struct_size == sizeof st);
  kvb_batch_init(&b);
  CHECK(b.struct_size == sizeof b && b.block_tables == NULL && b.slot_mapping == NULL && b.max_blocks_per_seq == 0);
  /* NULL is tolerated by the init functions */
  kvb_config_init(NULL);
  kvb_seq_options_init(NULL);
  kvb_seq_info_init(NULL);
  kvb_stats_init(NULL);
  kvb_batch_init(NULL);
}

static void test_basic_flow(void) {
  kvb_manager* m = kvbt_make(4, 8);
  int64_t t[32];
  size_t cached = 99, len = 0;
  int32_t tab[8];
  kvb_seq_info info;
  uint64_t h;
  kvbt_iota(t, 32, 1);
  CHECK(kvbt_free(m) == 8);
  CHECK_OK(kvb_seq_can_allocate(m, t, 10, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 10, &cached));
  CHECK(cached == 0);
  CHECK(kvbt_free(m) == 5);
  EXPECT_TABLE(m, 1, 0, 1, 2);
  CHECK_OK(kvb_seq_block_table(m, 1, tab, 3, &len)); /* exact capacity */
  CHECK(len == 3 && tab[2] == 2);
  info = kvbt_info(m, 1);
  CHECK(info.location == KVB_SEQ_ON_DEVICE && info.num_tokens == 10 && info.num_computed == 0 && info.num_cached == 0 &&
        info.num_blocks == 3 && info.num_held_blocks == 3);
  /* nothing is hashed before commit */
  CHECK(!kvbt_has_hash(m, 0, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 3));
  CHECK(!kvbt_has_hash(m, 0, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 1));
  CHECK(kvbt_has_hash(m, 0, &h));
  CHECK(h == kvb_hash_tokens(NULL, t, 4));
  CHECK(!kvbt_has_hash(m, 1, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 6));
  CHECK(kvbt_has_hash(m, 1, &h));
  {
    uint64_t h0 = kvb_hash_tokens(NULL, t, 4);
    CHECK(h == kvb_hash_tokens(&h0, t + 4, 4));
  }
  CHECK(!kvbt_has_hash(m, 2, NULL)); /* partial */
  info = kvbt_info(m, 1);
  CHECK(info.num_computed == 10);
  /* decode: append one token at a time */
  CHECK_OK(kvb_seq_can_append(m, 1, 2));
  CHECK_OK(kvb_seq_append(m, 1, t + 10, 2)); /* 12 tokens: still 3 blocks */
  CHECK(kvbt_free(m) == 5);
  CHECK_OK(kvb_seq_commit(m, 1, 2));
  CHECK(kvbt_has_hash(m, 2, NULL));
  CHECK_OK(kvb_seq_append(m, 1, t + 12, 1)); /* 13 tokens: a 4th block */
  EXPECT_TABLE(m, 1, 0, 1, 2, 3);
  CHECK(kvbt_free(m) == 4);
  CHECK_OK(kvb_seq_can_append(m, 1, 0));
  CHECK_OK(kvb_seq_append(m, 1, t, 0));
  /* can_append counts what is in the last block */
  CHECK_OK(kvb_seq_can_append(m, 1, 3 + 16));
  CHECK_STATUS(kvb_seq_can_append(m, 1, 3 + 17), KVB_ERR_OUT_OF_BLOCKS);
  CHECK_INV(m);
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK(kvbt_free(m) == 8);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Prefix hits: full blocks only, never the last block, stop at the first miss. */
static void test_prefix_hits(void) {
  kvb_manager* m = kvbt_make(4, 32);
  int64_t a[16], b[16];
  size_t cached = 99;
  kvb_seq_info info;
  kvbt_iota(a, 16, 100);
  CHECK_OK(kvb_seq_allocate(m, 1, a, 14, &cached));
  /* not committed yet: no hit possible */
  CHECK_OK(kvb_seq_can_allocate(m, a, 14, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_commit(m, 1, 14)); /* blocks 0..2 full, block 3 partial (2 tokens) */
  /* same prompt: 3 full blocks cached */
  CHECK_OK(kvb_seq_can_allocate(m, a, 14, &cached));
  CHECK(cached == 12);
  CHECK_OK(kvb_seq_allocate(m, 2, a, 14, &cached));
  CHECK(cached == 12);
  EXPECT_TABLE(m, 2, 0, 1, 2, 4);
  info = kvbt_info(m, 2);
  CHECK(info.num_cached == 12 && info.num_computed == 12 && info.num_tokens == 14);
  /* a prompt of exactly 12 tokens: the last block is never matched -> 8 cached */
  CHECK_OK(kvb_seq_allocate(m, 3, a, 12, &cached));
  CHECK(cached == 8);
  EXPECT_TABLE(m, 3, 0, 1, 5);
  /* a prompt of exactly one block: never a hit */
  CHECK_OK(kvb_seq_allocate(m, 4, a, 4, &cached));
  CHECK(cached == 0);
  /* a prompt of 13 tokens (3 full + 1): 12 cached */
  CHECK_OK(kvb_seq_can_allocate(m, a, 13, &cached));
  CHECK(cached == 12);
  /* a diverging token in block 1 stops the match after block 0 */
  memcpy(b, a, sizeof b);
  b[5] = -7;
  CHECK_OK(kvb_seq_allocate(m, 5, b, 14, &cached));
  CHECK(cached == 4);
  /* a diverging token in block 0 only: blocks 1, 2 are not matched either (chain) */
  memcpy(b, a, sizeof b);
  b[0] = -7;
  CHECK_OK(kvb_seq_can_allocate(m, b, 14, &cached));
  CHECK(cached == 0);
  /* a partial match inside a block is no hit: 3 equal tokens of block 0 */
  CHECK_OK(kvb_seq_can_allocate(m, a, 3, &cached));
  CHECK(cached == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Token comparison at every matched block: a crafted xxh64 collision must not hit. The collision was
   computed offline by inverting xxh64 over 16 bytes (Python, xxhash 4.1.0 to verify): with block size 2,
   xxh64(i64le(3000) + i64le(-5220798395211391274)) == xxh64(i64le(1000) + i64le(2000)) == 0x9abf8d4de43786ce. */
static void test_token_compare_on_collision(void) {
  static const int64_t first[2] = {1000, 2000};
  static const int64_t forged[2] = {3000, -5220798395211391274LL};
  const uint32_t flags[2] = {0, KVB_CONFIG_KEYED_INDEX};
  int k;
  CHECK(kvb_hash_tokens(NULL, first, 2) == 0x9abf8d4de43786ceULL);
  CHECK(kvb_hash_tokens(NULL, forged, 2) == 0x9abf8d4de43786ceULL);
  for (k = 0; k < 2; ++k) {
    kvb_manager* m = kvbt_make_ex(2, 16, 0, 0.0f, flags[k], 0);
    int64_t a[5] = {1000, 2000, 7, 8, 9};
    int64_t b[5] = {3000, -5220798395211391274LL, 7, 8, 9};
    size_t cached = 99;
    kvb_stats st;
    uint64_t h;
    CHECK_OK(kvb_seq_allocate(m, 1, a, 5, NULL));
    CHECK_OK(kvb_seq_commit(m, 1, 5));
    CHECK(kvbt_has_hash(m, 0, &h) && h == 0x9abf8d4de43786ceULL);
    CHECK_OK(kvb_seq_can_allocate(m, b, 5, &cached));
    CHECK(cached == 0);
    CHECK_OK(kvb_seq_allocate(m, 2, b, 5, &cached));
    CHECK(cached == 0);
    EXPECT_TABLE(m, 2, 3, 4, 5);
    CHECK_OK(kvb_seq_commit(m, 2, 5));
    /* both blocks carry the same public hash */
    CHECK(kvbt_has_hash(m, 3, &h) && h == 0x9abf8d4de43786ceULL);
    st = kvbt_stats(m);
    CHECK(st.hit_tokens == 0);
    /* the genuine prompt still hits whichever block the index holds, if its tokens match */
    CHECK_OK(kvb_seq_can_allocate(m, a, 5, &cached));
    CHECK(cached == 4u); /* both modes: the index key covers the tokens, so each block has its own entry */
    CHECK_INV(m);
    kvb_manager_destroy(m);
  }
}

/* Free queue: FIFO, initially 0..N-1; a sequence's blocks are freed last block first. */
static void test_free_queue_order(void) {
  kvb_manager* m = kvbt_make(4, 8);
  int64_t t[40];
  kvbt_iota(t, 40, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 12, NULL)); /* 0 1 2 */
  CHECK_OK(kvb_seq_allocate(m, 2, t + 12, 8, NULL)); /* 3 4 */
  EXPECT_TABLE(m, 1, 0, 1, 2);
  EXPECT_TABLE(m, 2, 3, 4);
  CHECK_OK(kvb_seq_free(m, 1)); /* queue: 5 6 7 2 1 0 */
  CHECK_OK(kvb_seq_allocate(m, 3, t + 20, 20, NULL)); /* 5 blocks from the head */
  EXPECT_TABLE(m, 3, 5, 6, 7, 2, 1);
  CHECK_OK(kvb_seq_free(m, 2)); /* queue: 0 4 3 */
  CHECK_OK(kvb_seq_allocate(m, 4, t, 9, NULL));
  EXPECT_TABLE(m, 4, 0, 4, 3);
  CHECK(kvbt_free(m) == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* A cached block stays findable after free until it reaches the queue head and is reused. */
static void test_eviction(void) {
  kvb_manager* m = kvbt_make(4, 6);
  int64_t a[12], other[24];
  size_t cached = 0;
  kvb_stats st;
  uint64_t h0, h1, h;
  kvbt_iota(a, 12, 100);
  kvbt_iota(other, 24, 5000);
  CHECK_OK(kvb_seq_allocate(m, 1, a, 9, NULL)); /* 0 1 2 */
  CHECK_OK(kvb_seq_commit(m, 1, 9));
  CHECK(kvbt_has_hash(m, 0, &h0) && kvbt_has_hash(m, 1, &h1));
  CHECK_OK(kvb_seq_free(m, 1)); /* queue: 3 4 5 2 1 0 */
  st = kvbt_stats(m);
  CHECK(st.cached_free_blocks == 2 && st.free_blocks == 6 && st.used_blocks == 0);
  /* free but not reused: hashes still there */
  CHECK(kvbt_has_hash(m, 0, &h) && h == h0);
  CHECK(kvbt_has_hash(m, 1, &h) && h == h1);
  /* take 4 blocks: 3 4 5 2 (block 2 was partial: no eviction) */
  CHECK_OK(kvb_seq_allocate(m, 2, other, 16, NULL));
  EXPECT_TABLE(m, 2, 3, 4, 5, 2);
  st = kvbt_stats(m);
  CHECK(st.evictions == 0 && st.cached_free_blocks == 2);
  /* 2 free blocks, both cached hits: 3 needed, so OUT_OF_BLOCKS, but the cached count is reported */
  CHECK_STATUS(kvb_seq_can_allocate(m, a, 9, &cached), KVB_ERR_OUT_OF_BLOCKS);
  CHECK(cached == 8);
  /* one more block: block 1 (the head) is evicted, block 0 stays cached */
  CHECK_OK(kvb_seq_append(m, 2, other + 16, 1));
  EXPECT_TABLE(m, 2, 3, 4, 5, 2, 1);
  st = kvbt_stats(m);
  CHECK(st.evictions == 1 && st.cached_free_blocks == 1);
  CHECK_STATUS(kvb_block_hash(m, 1, &h), KVB_ERR_BAD_STATE);
  CHECK(kvbt_has_hash(m, 0, &h) && h == h0);
  CHECK_STATUS(kvb_seq_can_allocate(m, a, 9, &cached), KVB_ERR_OUT_OF_BLOCKS);
  CHECK(cached == 4);
  /* give block 1 back (rollback empties it): queue 0 1. A hit on the cached block 0 takes it, the
     rest comes from the head. */
  CHECK_OK(kvb_seq_rollback(m, 2, 1));
  CHECK(kvbt_free(m) == 2);
  CHECK_OK(kvb_seq_allocate(m, 3, a, 5, &cached));
  CHECK(cached == 4);
  EXPECT_TABLE(m, 3, 0, 1);
  CHECK(kvbt_free(m) == 0);
  st = kvbt_stats(m);
  CHECK(st.evictions == 1 && st.hit_tokens == 4 && st.query_tokens == 9 + 16 + 5);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Non-cacheable tokens: the block holding one and every later block of the sequence are not indexed,
   unless that block has an extra key. */
static void test_non_cacheable(void) {
  int64_t nc[2] = {-100, -200};
  kvb_config cfg;
  kvb_manager* m = NULL;
  int64_t p[20];
  size_t cached = 0;
  kvb_stats st;
  kvb_seq_options o;
  uint32_t kb[1] = {1};
  uint64_t kk[1] = {0xfeedULL};
  kvb_config_init(&cfg);
  cfg.block_size = 4;
  cfg.num_blocks = 32;
  cfg.non_cacheable_tokens = nc;
  cfg.num_non_cacheable_tokens = 2;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  nc[0] = 0; /* copied at create: later changes do not matter */
  kvbt_iota(p, 20, 1);
  p[5] = -100; /* block 1 holds an image placeholder */
  CHECK_OK(kvb_seq_allocate(m, 1, p, 17, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 17)); /* blocks 0..3 full */
  CHECK(kvbt_has_hash(m, 0, NULL));
  CHECK(!kvbt_has_hash(m, 1, NULL));
  CHECK(!kvbt_has_hash(m, 2, NULL));
  CHECK(!kvbt_has_hash(m, 3, NULL));
  CHECK_OK(kvb_seq_can_allocate(m, p, 17, &cached));
  CHECK(cached == 4);
  st = kvbt_stats(m);
  CHECK(st.used_blocks == 5);
  /* later decode blocks are not indexed either */
  CHECK_OK(kvb_seq_append(m, 1, p, 3));
  CHECK_OK(kvb_seq_commit(m, 1, 3));
  CHECK(!kvbt_has_hash(m, 4, NULL));
  /* the same prompt with an extra key (the image's content hash) for block 1: everything is cached */
  kvb_seq_options_init(&o);
  o.extra_key_blocks = kb;
  o.extra_keys = kk;
  o.num_extra_keys = 1;
  CHECK_OK(kvb_seq_allocate_ex(m, 2, p, 17, &o, &cached));
  CHECK(cached == 4);
  CHECK_OK(kvb_seq_commit(m, 2, 13));
  {
    int32_t tab[8];
    uint64_t h0, h1, h;
    CHECK(kvbt_table(m, 2, tab) == 5);
    CHECK(tab[0] == 0);
    CHECK(kvbt_has_hash(m, tab[1], &h1));
    CHECK(kvbt_has_hash(m, tab[2], NULL));
    CHECK(kvbt_has_hash(m, tab[3], NULL));
    /* the extra key goes after the tokens: not equal to the plain chain hash */
    CHECK(kvbt_has_hash(m, 0, &h0));
    h = kvb_hash_tokens(&h0, p + 4, 4);
    CHECK(h1 != h);
  }
  CHECK_OK(kvb_seq_can_allocate_ex(m, p, 17, &o, &cached));
  CHECK(cached == 16);
  /* without the key, still only block 0 */
  CHECK_OK(kvb_seq_can_allocate(m, p, 17, &cached));
  CHECK(cached == 4);
  /* a different key: no match past block 0 */
  kk[0] = 0xbeefULL;
  CHECK_OK(kvb_seq_can_allocate_ex(m, p, 17, &o, &cached));
  CHECK(cached == 4);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* kvb_seq_set_extra_key for a decode-time image: before the block is hashed. */
static void test_set_extra_key(void) {
  int64_t nc[1] = {-1};
  kvb_config cfg;
  kvb_manager* m = NULL;
  int64_t p[12];
  size_t cached = 0;
  kvb_seq_options o;
  uint32_t kb[1] = {1};
  uint64_t kk[1] = {77};
  kvb_config_init(&cfg);
  cfg.block_size = 4;
  cfg.num_blocks = 16;
  cfg.non_cacheable_tokens = nc;
  cfg.num_non_cacheable_tokens = 1;
  CHECK_OK(kvb_manager_create(&cfg, &m));
  kvbt_iota(p, 12, 10);
  p[6] = -1;
  CHECK_OK(kvb_seq_allocate(m, 1, p, 6, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 6));
  CHECK_OK(kvb_seq_set_extra_key(m, 1, 1, 99)); /* replaced below */
  CHECK_OK(kvb_seq_set_extra_key(m, 1, 1, 77));
  CHECK_OK(kvb_seq_set_extra_key(m, 1, 5, 1)); /* a future block */
  CHECK_OK(kvb_seq_append(m, 1, p + 6, 6));
  CHECK_OK(kvb_seq_commit(m, 1, 6)); /* blocks 1, 2 full */
  CHECK_STATUS(kvb_seq_set_extra_key(m, 1, 2, 1), KVB_ERR_BAD_STATE);
  kvb_seq_options_init(&o);
  o.extra_key_blocks = kb;
  o.extra_keys = kk;
  o.num_extra_keys = 1;
  CHECK_OK(kvb_seq_can_allocate_ex(m, p, 12, &o, &cached));
  CHECK(cached == 8);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Cache salt: different salts never share blocks, the same salt does; salted hashes chain from the salt. */
static void test_cache_salt(void) {
  kvb_manager* m = kvbt_make(4, 32);
  int64_t p[10];
  size_t cached = 0;
  kvb_seq_options sa, sb;
  uint64_t salt_a = 0x1111, h;
  int32_t tab[8];
  kvbt_iota(p, 10, 1);
  kvb_seq_options_init(&sa);
  sa.has_cache_salt = 1;
  sa.cache_salt = salt_a;
  kvb_seq_options_init(&sb);
  sb.has_cache_salt = 1;
  sb.cache_salt = 0x2222;
  CHECK_OK(kvb_seq_allocate_ex(m, 1, p, 10, &sa, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 10));
  CHECK(kvbt_table(m, 1, tab) == 3);
  CHECK(kvbt_has_hash(m, tab[0], &h) && h == kvb_hash_tokens(&salt_a, p, 4));
  /* unsalted and differently salted prompts miss */
  CHECK_OK(kvb_seq_can_allocate(m, p, 10, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_can_allocate_ex(m, p, 10, &sb, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_allocate_ex(m, 2, p, 10, &sb, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_commit(m, 2, 10));
  CHECK_OK(kvb_seq_allocate(m, 3, p, 10, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_commit(m, 3, 10));
  CHECK(kvbt_has_hash(m, 6, &h) && h == kvb_hash_tokens(NULL, p, 4));
  /* the same salt hits; a salt of 0 is still a salt, not "no salt" */
  CHECK_OK(kvb_seq_allocate_ex(m, 4, p, 10, &sa, &cached));
  CHECK(cached == 8);
  EXPECT_TABLE(m, 4, 0, 1, 9);
  sb.cache_salt = 0;
  CHECK_OK(kvb_seq_can_allocate_ex(m, p, 10, &sb, &cached));
  CHECK(cached == 0);
  /* opts NULL means no salt */
  CHECK_OK(kvb_seq_can_allocate_ex(m, p, 10, NULL, &cached));
  CHECK(cached == 8);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

/* Keyed index: identical prompts still hit, public hashes are the plain xxh64 chain. */
static void test_keyed_index(void) {
  kvb_manager* k = kvbt_make_ex(4, 16, 0, 0.0f, KVB_CONFIG_KEYED_INDEX, 0);
  kvb_manager* plain = kvbt_make(4, 16);
  kvb_config cfg;
  kvb_manager* rnd = NULL;
  int64_t p[10];
  size_t cached = 0;
  int b;
  kvb_seq_options s;
  kvbt_iota(p, 10, 40);
  CHECK_OK(kvb_seq_allocate(k, 1, p, 10, NULL));
  CHECK_OK(kvb_seq_commit(k, 1, 10));
  CHECK_OK(kvb_seq_allocate(plain, 1, p, 10, NULL));
  CHECK_OK(kvb_seq_commit(plain, 1, 10));
  for (b = 0; b < 3; ++b) {
    uint64_t hk = 1, hp = 2;
    int ok1 = kvbt_has_hash(k, b, &hk), ok2 = kvbt_has_hash(plain, b, &hp);
    CHECK(ok1 == ok2);
    CHECK(hk == hp);
  }
  CHECK_OK(kvb_seq_allocate(k, 2, p, 10, &cached));
  CHECK(cached == 8);
  EXPECT_TABLE(k, 2, 0, 1, 3);
  /* salts still separate */
  kvb_seq_options_init(&s);
  s.has_cache_salt = 1;
  s.cache_salt = 5;
  CHECK_OK(kvb_seq_can_allocate_ex(k, p, 10, &s, &cached));
  CHECK(cached == 0);
  CHECK_INV(k);
  /* a random seed (index_seed 0) works the same way */
  kvb_config_init(&cfg);
  cfg.block_size = 4;
  cfg.num_blocks = 16;
  cfg.flags = KVB_CONFIG_KEYED_INDEX;
  CHECK_OK(kvb_manager_create(&cfg, &rnd));
  CHECK_OK(kvb_seq_allocate(rnd, 1, p, 10, NULL));
  CHECK_OK(kvb_seq_commit(rnd, 1, 10));
  CHECK_OK(kvb_seq_can_allocate(rnd, p, 10, &cached));
  CHECK(cached == 8);
  {
    uint64_t h = 0, hp = 1;
    CHECK(kvbt_has_hash(rnd, 1, &h) && kvbt_has_hash(plain, 1, &hp) && h == hp);
  }
  CHECK_INV(rnd);
  kvb_manager_destroy(rnd);
  kvb_manager_destroy(k);
  kvb_manager_destroy(plain);
}

/* Watermark: allocate refuses when free - needed < floor(watermark * num_blocks); append ignores it. */
static void test_watermark(void) {
  kvb_manager* m = kvbt_make_ex(4, 10, 0, 0.25f, 0, 0); /* floor(2.5) = 2 blocks kept */
  int64_t t[64];
  size_t cached = 0;
  kvbt_iota(t, 64, 1);
  /* 10 free: 8 blocks OK (10 - 8 = 2), 9 blocks refused */
  CHECK_STATUS(kvb_seq_can_allocate(m, t, 33, &cached), KVB_ERR_OUT_OF_BLOCKS);
  CHECK_STATUS(kvb_seq_allocate(m, 1, t, 33, NULL), KVB_ERR_OUT_OF_BLOCKS);
  CHECK_MSG("+2 watermark");
  CHECK_OK(kvb_seq_can_allocate(m, t, 32, &cached));
  CHECK_OK(kvb_seq_allocate(m, 1, t, 32, NULL)); /* 2 free */
  CHECK(kvbt_free(m) == 2);
  CHECK_STATUS(kvb_seq_allocate(m, 2, t + 40, 1, NULL), KVB_ERR_OUT_OF_BLOCKS);
  /* append goes below the watermark */
  CHECK_OK(kvb_seq_can_append(m, 1, 8));
  CHECK_OK(kvb_seq_append(m, 1, t + 32, 8));
  CHECK(kvbt_free(m) == 0);
  CHECK_STATUS(kvb_seq_can_append(m, 1, 1), KVB_ERR_OUT_OF_BLOCKS);
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_INV(m);
  kvb_manager_destroy(m);
  /* a hit on a free cached block counts as needed */
  m = kvbt_make_ex(4, 4, 0, 0.5f, 0, 0); /* 2 kept */
  CHECK_OK(kvb_seq_allocate(m, 1, t, 5, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 5));
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_seq_can_allocate(m, t, 5, &cached));
  CHECK(cached == 4);
  CHECK_STATUS(kvb_seq_can_allocate(m, t, 9, &cached), KVB_ERR_OUT_OF_BLOCKS); /* 3 needed, 4 - 3 < 2 */
  CHECK(cached == 4);
  kvb_manager_destroy(m);
}

/* A failed allocate takes nothing (all-or-nothing), and so does a failed append. */
static void test_all_or_nothing(void) {
  kvb_manager* m = kvbt_make(4, 4);
  int64_t t[32];
  kvbt_iota(t, 32, 1);
  CHECK_OK(kvb_seq_allocate(m, 1, t, 6, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 6));
  CHECK_STATUS(kvb_seq_allocate(m, 2, t, 13, NULL), KVB_ERR_OUT_OF_BLOCKS);
  CHECK(kvbt_free(m) == 2);
  CHECK_STATUS(kvb_seq_append(m, 1, t, 11), KVB_ERR_OUT_OF_BLOCKS);
  CHECK(kvbt_info(m, 1).num_tokens == 6);
  CHECK_OK(kvb_seq_append(m, 1, t, 10));
  CHECK(kvbt_free(m) == 0);
  CHECK_INV(m);
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_version);
  RUN_TEST(test_init_defaults);
  RUN_TEST(test_basic_flow);
  RUN_TEST(test_prefix_hits);
  RUN_TEST(test_token_compare_on_collision);
  RUN_TEST(test_free_queue_order);
  RUN_TEST(test_eviction);
  RUN_TEST(test_non_cacheable);
  RUN_TEST(test_set_extra_key);
  RUN_TEST(test_cache_salt);
  RUN_TEST(test_keyed_index);
  RUN_TEST(test_watermark);
  RUN_TEST(test_all_or_nothing);
  TEST_SUMMARY();
}
