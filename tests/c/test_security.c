/* Tenant isolation and the keyed index (docs/ARCHITECTURE.md, "Collisions"; SECURITY.md):
 *  - two tenants with different cache salts never share a block, even with identical prompts, in the plain
 *    and in the keyed index, while both run and after one of them has finished;
 *  - a salted tenant never matches unsalted blocks and vice versa;
 *  - the keyed index (KVB_CONFIG_KEYED_INDEX) still matches identical prompts within a tenant, and still
 *    reports the public nano-vllm-compatible xxh64 chain hash;
 *  - events report the salt as the first block's parent, so a router can keep tenants apart too. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define BS 4
#define NB 64

static kvb_manager* make(uint32_t flags, uint64_t seed) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  kvb_config_init(&cfg);
  cfg.block_size = BS;
  cfg.num_blocks = NB;
  cfg.flags = flags;
  cfg.index_seed = seed;
  if (kvb_manager_create(&cfg, &m) != KVB_OK) return NULL;
  return m;
}

static kvb_status alloc_salted(kvb_manager* m, int64_t id, const int64_t* t, size_t n, int salted, uint64_t salt,
                               size_t* cached) {
  kvb_seq_options o;
  kvb_seq_options_init(&o);
  o.has_cache_salt = (uint32_t)salted;
  o.cache_salt = salt;
  return kvb_seq_allocate_ex(m, id, t, n, &o, cached);
}

static size_t table(kvb_manager* m, int64_t id, int32_t* out) {
  size_t len = 0;
  if (kvb_seq_block_table(m, id, out, 64, &len) != KVB_OK) return 0;
  return len;
}

static int share_a_block(const int32_t* a, size_t na, const int32_t* b, size_t nb) {
  size_t i, j;
  for (i = 0; i < na; ++i)
    for (j = 0; j < nb; ++j)
      if (a[i] >= 0 && a[i] == b[j]) return 1;
  return 0;
}

static int64_t prompt[40];

static void tenants_in(uint32_t flags) {
  kvb_manager* m = make(flags, 0); /* keyed: random secret seed */
  int32_t ta[64], tb[64], tc[64];
  size_t na, nb, nc, cached = 99;
  uint64_t ha, hb;
  kvb_stats st;
  int i;
  CHECK(m != NULL);
  if (!m) return;
  for (i = 0; i < 40; ++i) prompt[i] = 1000 + i;
  /* Tenant A (salt 1) computes the prompt. */
  CHECK_OK(alloc_salted(m, 1, prompt, 40, 1, 1, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_commit(m, 1, 40));
  /* Tenant B (salt 2), identical prompt: no hit, no shared block. */
  CHECK_OK(alloc_salted(m, 2, prompt, 40, 1, 2, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_seq_commit(m, 2, 40));
  na = table(m, 1, ta);
  nb = table(m, 2, tb);
  CHECK(na == 10 && nb == 10);
  CHECK(!share_a_block(ta, na, tb, nb));
  /* Their public hashes differ from the first block on (the salt is hashed in place of the parent). */
  CHECK_OK(kvb_block_hash(m, ta[0], &ha));
  CHECK_OK(kvb_block_hash(m, tb[0], &hb));
  CHECK(ha != hb);
  CHECK(ha != kvb_hash_tokens(NULL, prompt, BS));
  /* Unsalted tenant: no hit on either. */
  CHECK_OK(kvb_seq_can_allocate(m, prompt, 40, &cached));
  CHECK(cached == 0);
  /* A second request of tenant A hits all but the last block: the keyed index still matches. */
  CHECK_OK(alloc_salted(m, 3, prompt, 40, 1, 1, &cached));
  CHECK(cached == 36);
  nc = table(m, 3, tc);
  CHECK(nc == 10 && memcmp(ta, tc, 9 * sizeof(int32_t)) == 0);
  CHECK(!share_a_block(tb, nb, tc, nc));
  /* After A is gone (its blocks cached-free), B still cannot reach them; A still can. */
  CHECK_OK(kvb_seq_free(m, 1));
  CHECK_OK(kvb_seq_free(m, 3));
  kvb_stats_init(&st);
  CHECK_OK(kvb_get_stats(m, &st));
  CHECK(st.cached_free_blocks >= 9);
  {
    kvb_seq_options o;
    kvb_seq_options_init(&o);
    o.has_cache_salt = 1;
    o.cache_salt = 2;
    CHECK_OK(kvb_seq_free(m, 2));
    CHECK_OK(kvb_seq_can_allocate_ex(m, prompt, 40, &o, &cached)); /* B's own blocks: cached */
    CHECK(cached == 36);
    o.cache_salt = 3; /* a third tenant matches nothing */
    CHECK_OK(kvb_seq_can_allocate_ex(m, prompt, 40, &o, &cached));
    CHECK(cached == 0);
  }
  CHECK_OK(alloc_salted(m, 4, prompt, 40, 1, 2, &cached));
  CHECK(cached == 36);
  nb = table(m, 4, tb);
  CHECK(!share_a_block(ta, 9, tb, 9)); /* B got B's blocks back, never A's */
  /* Salt 0 is a salt too: it is not "no salt". */
  CHECK_OK(alloc_salted(m, 5, prompt, 40, 1, 0, &cached));
  CHECK(cached == 0);
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

static void test_salts_isolate_tenants_plain_index(void) { tenants_in(0); }
static void test_salts_isolate_tenants_keyed_index(void) { tenants_in(KVB_CONFIG_KEYED_INDEX); }

/* The keyed index matches identical prompts without a salt and keeps the public hash chain. */
static void test_keyed_index_matches_and_keeps_public_hash(void) {
  kvb_manager* k1 = make(KVB_CONFIG_KEYED_INDEX, 0);
  kvb_manager* k2 = make(KVB_CONFIG_KEYED_INDEX, 0x1234567);
  kvb_manager* plain = make(0, 0);
  kvb_manager* ms[3];
  int32_t t[3][64];
  size_t cached, i, k;
  uint64_t h[3][10], chain = 0;
  ms[0] = k1;
  ms[1] = k2;
  ms[2] = plain;
  CHECK(k1 && k2 && plain);
  if (!k1 || !k2 || !plain) return;
  for (i = 0; i < 40; ++i) prompt[i] = 7 * (int64_t)i;
  for (k = 0; k < 3; ++k) {
    CHECK_OK(kvb_seq_allocate(ms[k], 1, prompt, 40, &cached));
    CHECK(cached == 0);
    CHECK_OK(kvb_seq_commit(ms[k], 1, 40));
    CHECK_OK(kvb_seq_allocate(ms[k], 2, prompt, 40, &cached));
    CHECK(cached == 36); /* identical prompt within a tenant: matched */
    CHECK_OK(kvb_seq_allocate(ms[k], 3, prompt, 21, &cached));
    CHECK(cached == 20);
    CHECK(table(ms[k], 1, t[k]) == 10);
    for (i = 0; i < 10; ++i) CHECK_OK(kvb_block_hash(ms[k], t[k][i], &h[k][i]));
    CHECK_OK(kvb_check_invariants(ms[k]));
  }
  /* Same public hashes in all three managers, equal to the nano-vllm chain. */
  for (i = 0; i < 10; ++i) {
    chain = kvb_hash_tokens(i ? &chain : NULL, prompt + i * BS, BS);
    CHECK(h[0][i] == chain && h[1][i] == chain && h[2][i] == chain);
  }
  kvb_manager_destroy(k1);
  kvb_manager_destroy(k2);
  kvb_manager_destroy(plain);
}

/* A prompt that differs only after the first block still shares exactly the common prefix. */
static void test_keyed_index_partial_prefix(void) {
  kvb_manager* m = make(KVB_CONFIG_KEYED_INDEX, 0);
  int64_t other[40];
  size_t cached;
  int i;
  CHECK(m != NULL);
  if (!m) return;
  for (i = 0; i < 40; ++i) prompt[i] = other[i] = 3 * i;
  other[9] = -5; /* block 2 differs */
  CHECK_OK(kvb_seq_allocate(m, 1, prompt, 40, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 40));
  CHECK_OK(kvb_seq_allocate(m, 2, other, 40, &cached));
  CHECK(cached == 8);
  CHECK_OK(kvb_check_invariants(m));
  kvb_manager_destroy(m);
}

/* Events name the salt as the first block's parent (a router keeps tenants apart by it). */
static void test_events_carry_salt(void) {
  kvb_manager* m = make(KVB_CONFIG_KEYED_INDEX | KVB_CONFIG_EVENTS, 0);
  kvb_event ev[16];
  int64_t et[16 * BS];
  size_t n = 0;
  CHECK(m != NULL);
  if (!m) return;
  CHECK_OK(alloc_salted(m, 1, prompt, 8, 1, 0xfeed, NULL));
  CHECK_OK(kvb_seq_commit(m, 1, 8));
  CHECK_OK(kvb_drain_events(m, ev, 16, et, 16 * BS, &n, NULL));
  CHECK(n == 2);
  if (n == 2) {
    CHECK(ev[0].type == KVB_EVENT_BLOCK_STORED && ev[0].parent_kind == KVB_PARENT_SALT && ev[0].parent_hash == 0xfeed);
    CHECK(ev[1].parent_kind == KVB_PARENT_BLOCK && ev[1].parent_hash == ev[0].block_hash);
  }
  kvb_manager_destroy(m);
}

int main(void) {
  RUN_TEST(test_salts_isolate_tenants_plain_index);
  RUN_TEST(test_salts_isolate_tenants_keyed_index);
  RUN_TEST(test_keyed_index_matches_and_keeps_public_hash);
  RUN_TEST(test_keyed_index_partial_prefix);
  RUN_TEST(test_events_carry_salt);
  TEST_SUMMARY();
}
