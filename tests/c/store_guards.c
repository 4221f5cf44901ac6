/* The store tier's guards: a store moves one host cache's bytes for one manager (a store over another
 * cache, another layout, or registered with a second manager is refused, and the refusal changes
 * nothing); the namespace carries fp8 scales (checked against an independent fold of the header's
 * formula); removing or replacing a store that never answers abandons its gets (sequences recompute,
 * host blocks free, counted); the directory store creates missing parents; a manager with KV cache
 * groups refuses a store. */
#include <math.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "store_rig.h"

/* A directory store over host_mem with num_host_blocks blocks of region_bytes that states them. */
static kvb_store_dir* dir_over(uint32_t num_host_blocks, size_t region_bytes, kvb_store* table) {
  kvb_store_dir* d = store_dir_over(num_host_blocks, region_bytes, table);
  CHECK(table->num_host_blocks == num_host_blocks && table->block_bytes == region_bytes);
  return d;
}

/* The wrapper store (over `dir`) is m's store still: P's blocks go to the store and come back. */
static void check_wrapper_store_works(kvb_manager* m) {
  kvb_manager* b;
  size_t cached = 0;
  populate(m);
  CHECK(kvbt_stats(m).store_put_blocks > 0);
  kvb_manager_destroy(m);
  b = make(1, 0);
  CHECK(run_prompt(b, 1, P, 22, &cached, 1) == 20 && cached == 20);
  kvb_manager_destroy(b);
}

static void test_store_over_another_cache_refused(void) {
  kvb_manager* m;
  kvb_store_namespace ns = test_ns(1);
  kvb_store t;
  kvb_store_dir* other;
  store_open();
  m = make(1, 0);
  /* over the device cache (its block count), over a host cache of another size, over another layout */
  other = dir_over(DEV, BB, &t);
  CHECK_STATUS(kvb_manager_set_store(m, &t, &ns), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "num_host_blocks 12 differs from the manager's num_host_blocks 8") != NULL);
  CHECK(strstr(kvb_last_error(), "device cache") != NULL);
  kvb_store_dir_destroy(other);
  other = dir_over(HOST + 1, BB, &t);
  CHECK_STATUS(kvb_manager_set_store(m, &t, &ns), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "num_host_blocks 9") != NULL && strstr(kvb_last_error(), "device") == NULL);
  kvb_store_dir_destroy(other);
  other = dir_over(HOST, BB / 2, &t);
  CHECK_STATUS(kvb_manager_set_store(m, &t, &ns), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "block_bytes 32 differs from the namespace's 64") != NULL);
  kvb_store_dir_destroy(other);
  /* a table of the older layout states nothing: accepted as before */
  t = ts_table();
  t.struct_size = offsetof(kvb_store, num_host_blocks);
  t.num_host_blocks = DEV; /* beyond its struct_size: not read */
  t.user = dev_mem;       /* another store than m's (never called here) */
  {
    kvb_manager* m2 = kvbt_make_ex(BS, DEV, HOST, 0.0f, KVB_CONFIG_HOST_CACHE, 0);
    CHECK_OK(kvb_manager_set_store(m2, &t, &ns));
    CHECK_OK(kvb_manager_set_store(m2, NULL, NULL));
    kvb_manager_destroy(m2);
  }
  CHECK_OK(kvb_check_invariants(m));
  check_wrapper_store_works(m); /* the refusals left m's store in place */
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

static void test_one_store_two_managers_refused(void) {
  kvb_manager* a = kvbt_make_ex(BS, DEV, HOST, 0.0f, KVB_CONFIG_HOST_CACHE, 0);
  kvb_manager* b;
  kvb_store_namespace ns = test_ns(1);
  kvb_store t, w = ts_table();
  kvb_store_dir* d;
  kvb_stats before;
  store_open();
  d = dir_over(HOST, BB, &t);
  CHECK_OK(kvb_manager_set_store(a, &t, &ns));
  b = make(1, 0); /* b has the wrapper store */
  before = kvbt_stats(b);
  CHECK_STATUS(kvb_manager_set_store(b, &t, &ns), KVB_ERR_BAD_STATE);
  CHECK(strstr(kvb_last_error(), "registered with another manager") != NULL);
  CHECK(kvbt_stats(b).store_put_blocks == before.store_put_blocks);
  CHECK_STATUS(kvb_manager_set_store(a, &w, &ns), KVB_ERR_BAD_STATE); /* nor the other way round */
  CHECK_OK(kvb_manager_set_store(a, &t, &ns)); /* the same store again on its own manager: fine */
  CHECK_OK(kvb_manager_set_store(a, NULL, NULL));
  CHECK_OK(kvb_manager_set_store(b, &t, &ns)); /* free again once a let go */
  CHECK_STATUS(kvb_manager_set_store(a, &t, &ns), KVB_ERR_BAD_STATE);
  kvb_manager_destroy(b); /* a destroyed manager lets go too */
  CHECK_OK(kvb_manager_set_store(a, &t, &ns));
  CHECK_OK(kvb_check_invariants(a));
  kvb_manager_destroy(a);
  kvb_store_dir_destroy(d);
  b = make(1, 0);
  check_wrapper_store_works(b); /* the wrapper was refused on a, registered on b, then b went: free */
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

/* The header's fold, computed here independently: ns = XXH3-128 of tag, 5 x u32, u64 model id, then (fp8)
   every (layer, K then V, head) scale's bits; store key = XXH3-128 of [key lo, hi, ns lo, hi]. */
static kvb_store_key reference_key(const kvb_store_namespace* ns, const float* scales, size_t num_scales,
                                   uint64_t lo, uint64_t hi) {
  unsigned char buf[36 + 4 * 64];
  uint32_t u[5];
  uint64_t words[4];
  size_t i, n = 36;
  XXH128_hash_t h;
  kvb_store_key k;
  memcpy(buf, num_scales ? "KVBSTNS2" : "KVBSTNS1", 8);
  u[0] = ns->dtype, u[1] = ns->block_size, u[2] = ns->num_layers, u[3] = ns->num_kv_heads, u[4] = ns->head_dim;
  memcpy(buf + 8, u, sizeof u); /* the library assumes a little-endian host */
  memcpy(buf + 28, &ns->model_id, 8);
  for (i = 0; i < num_scales; ++i, n += 4) memcpy(buf + n, &scales[i], 4);
  h = XXH3_128bits(buf, n);
  words[0] = lo, words[1] = hi, words[2] = h.low64, words[3] = h.high64;
  h = XXH3_128bits(words, sizeof words);
  k.lo = h.low64;
  k.hi = h.high64;
  return k;
}

static int same_key(kvb_store_key a, kvb_store_key b) { return a.lo == b.lo && a.hi == b.hi; }

static kvb_store_key fold(const kvb_store_namespace* ns) {
  kvb_store_key k = {0, 0};
  CHECK_OK(kvb_store_key_fold(ns, 11, 22, &k));
  return k;
}

static void test_fp8_scales_in_namespace(void) {
  kvb_store_namespace ns, old;
  kvb_store_key one, four;
  /* 2 layers, 2 heads; the expanded scales, per layer: K head 0, K head 1, V head 0, V head 1 */
  const float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, k4[8] = {4, 4, 1, 1, 4, 4, 1, 1};
  float per_layer[4] = {4, 1, 4, 1}, per_head[8] = {4, 4, 1, 1, 4, 4, 1, 1};
  kvb_store_namespace_init(&ns);
  CHECK(ns.k_scale == 1.0f && ns.v_scale == 1.0f && ns.layer_scales == NULL);
  ns.dtype = KVB_DTYPE_FP16;
  ns.block_size = BS;
  ns.num_layers = 2;
  ns.num_kv_heads = 2;
  ns.head_dim = 8;
  ns.model_id = 5;
  /* 16-bit namespaces: the formula of the first version, scales not read */
  CHECK(same_key(fold(&ns), reference_key(&ns, NULL, 0, 11, 22)));
  ns.k_scale = 4.0f;
  CHECK(same_key(fold(&ns), reference_key(&ns, NULL, 0, 11, 22)));
  ns.k_scale = 1.0f;
  ns.dtype = KVB_DTYPE_FP8_E4M3;
  one = fold(&ns);
  CHECK(same_key(one, reference_key(&ns, ones, 8, 11, 22)));
  ns.k_scale = 4.0f;
  four = fold(&ns);
  CHECK(same_key(four, reference_key(&ns, k4, 8, 11, 22)) && !same_key(one, four));
  /* the same scales given per layer or per head fold alike; k_scale is then not read */
  ns.k_scale = 2.0f;
  ns.layer_scales = per_layer;
  ns.scales_per_layer = 1;
  CHECK(same_key(fold(&ns), four));
  ns.layer_scales = per_head;
  ns.scales_per_layer = 2;
  CHECK(same_key(fold(&ns), four));
  per_head[5] = 4.5f; /* one head of layer 1's K */
  CHECK(!same_key(fold(&ns), four));
  per_head[5] = 4.0f;
  ns.layer_scales = NULL;
  ns.k_scale = 4.0f;
  ns.v_scale = 4.0f;
  CHECK(!same_key(fold(&ns), four));
  /* an older caller's struct: scales 1.0 */
  old = ns;
  old.struct_size = offsetof(kvb_store_namespace, k_scale);
  CHECK(same_key(fold(&old), one));
  /* bad scales are named */
  {
    kvb_store_key k;
    ns.k_scale = 0.0f;
    CHECK_STATUS(kvb_store_key_fold(&ns, 1, 2, &k), KVB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kvb_last_error(), "k_scale") != NULL);
    ns.k_scale = 1.0f;
    ns.layer_scales = per_layer;
    ns.scales_per_layer = 1;
    per_layer[1] = NAN;
    CHECK_STATUS(kvb_store_key_fold(&ns, 1, 2, &k), KVB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kvb_last_error(), "layer_scales[1]") != NULL);
    per_layer[1] = 1.0f;
    ns.scales_per_layer = 3;
    CHECK_STATUS(kvb_store_key_fold(&ns, 1, 2, &k), KVB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kvb_last_error(), "scales_per_layer 3") != NULL);
  }
}

/* The fp8 namespaces of two managers over one directory: k_scale 1.0 and 4.0 share no block. */
static void test_fp8_scales_share_no_blocks(void) {
  kvb_manager* m;
  size_t cached = 0;
  kvb_store t;
  kvb_store_namespace ns = test_ns(3);
  kvb_store_dir* d;
  int k;
  int64_t other[22];
  ns.dtype = KVB_DTYPE_FP8_E4M3;
  ns.head_dim = BB / (2 * BS); /* one byte per element: the same BB bytes per block */
  d = dir_over(HOST, BB, &t);
  m = kvbt_make_ex(BS, DEV, HOST, 0.0f, KVB_CONFIG_HOST_CACHE, 0);
  CHECK_OK(kvb_manager_set_store(m, &t, &ns));
  prompt(P, 22, 1000);
  run_prompt(m, 1, P, 22, NULL, 1);
  for (k = 0; k < 6; ++k) {
    prompt(other, 22, 5000 + 100 * k);
    run_prompt(m, 10 + k, other, 22, NULL, 1);
  }
  CHECK(kvbt_stats(m).store_put_blocks > 5);
  kvb_manager_destroy(m);
  ns.k_scale = 4.0f;
  m = kvbt_make_ex(BS, DEV, HOST, 0.0f, KVB_CONFIG_HOST_CACHE, 0);
  CHECK_OK(kvb_manager_set_store(m, &t, &ns));
  CHECK(run_prompt(m, 1, P, 22, &cached, 1) == 0 && cached == 0);
  kvb_manager_destroy(m);
  ns.k_scale = 1.0f; /* the first one's calibration again: found */
  m = kvbt_make_ex(BS, DEV, HOST, 0.0f, KVB_CONFIG_HOST_CACHE, 0);
  CHECK_OK(kvb_manager_set_store(m, &t, &ns));
  CHECK(run_prompt(m, 1, P, 22, &cached, 1) == 20 && cached == 20);
  kvb_manager_destroy(m);
  kvb_store_dir_destroy(d);
  CHECK(attended_wrong == 0);
}

/* A manager with KV cache groups (even one full group: the grouped block strategy, whose lookup has no
 * store level) refuses a store, and the refusal changes nothing: its cache works on without one. */
static void test_store_with_groups_refused(void) {
  kvb_config cfg;
  kvb_group_spec full;
  kvb_manager* ms[2];
  kvb_store st = ts_table();
  kvb_store_namespace ns = test_ns(1);
  size_t cached = 9;
  int i;
  prompt(P, 22, 1000);
  cfg = kvbt_config(BS, DEV, HOST, 0.0f, KVB_CONFIG_HOST_CACHE);
  kvb_group_spec_init(&full);
  cfg.index_seed = 0x5eed5eed5eed5eedULL;
  cfg.groups = &full;
  cfg.num_groups = 1;
  CHECK_OK(kvb_manager_create(&cfg, &ms[0]));
  ms[1] = kvbt_make_full_window(BS, DEV, HOST, KVB_CONFIG_HOST_CACHE, 2 * BS, 0);
  for (i = 0; i < 2; ++i) {
    CHECK_STATUS(kvb_manager_set_store(ms[i], &st, &ns), KVB_ERR_UNSUPPORTED);
    CHECK(strstr(kvb_last_error(), "KV cache groups") != NULL);
    CHECK_OK(kvb_seq_allocate(ms[i], 1, P, 22, &cached));
    CHECK(cached == 0 && kvbt_stats(ms[i]).store_filling_blocks == 0);
    CHECK_OK(kvb_seq_commit(ms[i], 1, 22));
    CHECK_OK(kvb_seq_free(ms[i], 1));
    CHECK_OK(kvb_seq_allocate(ms[i], 2, P, 22, &cached));
    CHECK(cached == 20);
    CHECK_OK(kvb_check_invariants(ms[i]));
    kvb_manager_destroy(ms[i]);
  }
}

/* A store that never completes a get: removing it (or replacing it) abandons the gets. */
static void test_detach_stuck_store(void) {
  kvb_manager* b;
  size_t cached = 0, computed = 9, filling = 9, i;
  kvb_stats st;
  int32_t tab[KVBT_MAX_BLOCKS];
  kvb_store w;
  kvb_store_namespace ns = test_ns(1);
  b = reopen_populated();
  ts.delay = 1 << 30; /* never answers */
  CHECK_OK(kvb_seq_allocate(b, 7, P, 22, &cached));
  CHECK(cached == 20);
  CHECK_OK(kvb_store_poll(b, &filling));
  CHECK(filling == 5 && kvbt_stats(b).free_host_blocks == HOST - 5);
  CHECK_OK(kvb_manager_set_store(b, NULL, NULL));
  ts.nq = 0; /* the store is stopped: it fills none of the host blocks it was given */
  CHECK_OK(kvb_check_invariants(b));
  CHECK_OK(kvb_seq_store_state(b, 7, &computed, &filling));
  CHECK(computed == 0 && filling == 0);
  st = kvbt_stats(b);
  CHECK(st.store_abandoned_gets == 5 && st.store_get_failures == 5 && st.store_filling_blocks == 0);
  CHECK(st.free_host_blocks == HOST && st.store_recomputed_tokens == 20);
  /* the sequence runs now, from 0, and its blocks are right */
  run_transfers(b);
  CHECK(kvbt_table(b, 7, tab) == 6);
  for (i = 0; i < 5; ++i) block_bytes(P, i, dev_mem[tab[i]]);
  CHECK_OK(kvb_seq_commit(b, 7, 22));
  CHECK_OK(kvb_seq_free(b, 7));
  CHECK_OK(kvb_check_invariants(b));
  /* replaced while stuck: the same */
  w = ts_table();
  CHECK_OK(kvb_manager_set_store(b, &w, &ns));
  CHECK_OK(kvb_reset_prefix_cache(b)); /* nothing on the device or the host: P only in the store */
  {
    int64_t q[22];
    memcpy(q, P, sizeof q);
    q[21] = 99; /* the same 5 full blocks */
    CHECK_OK(kvb_seq_allocate(b, 8, q, 22, &cached));
  }
  CHECK(cached == 20 && kvbt_stats(b).store_filling_blocks == 5);
  CHECK_OK(kvb_manager_set_store(b, &w, &ns)); /* the same store again: its old gets are abandoned */
  ts.nq = 0;
  ts.delay = 0;
  st = kvbt_stats(b);
  CHECK(st.store_abandoned_gets == 10 && st.store_filling_blocks == 0 && st.free_host_blocks == HOST);
  CHECK_OK(kvb_seq_store_state(b, 8, &computed, &filling));
  CHECK(computed == 0 && filling == 0);
  CHECK_OK(kvb_seq_free(b, 8));
  CHECK_OK(kvb_check_invariants(b));
  /* and the store, answering again, serves the next request */
  CHECK(run_prompt(b, 9, P, 22, &cached, 1) == 20 && cached == 20);
  kvb_manager_destroy(b);
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

static void test_dir_store_creates_parents(void) {
  kvb_store t;
  kvb_store_dir* d;
  struct stat st;
  snprintf(dir_path, sizeof dir_path, "%s/missing/parents/store", tmpl);
  d = dir_over(HOST, BB, &t);
  CHECK(stat(dir_path, &st) == 0 && S_ISDIR(st.st_mode));
  kvb_store_dir_destroy(d);
  d = dir_over(HOST, BB, &t); /* exists now: fine */
  kvb_store_dir_destroy(d);
}

int main(void) {
  RUN_TEST(test_fp8_scales_in_namespace);
  if (!tmp_make()) return 2;
  FRESH_DIR();
  RUN_TEST(test_store_over_another_cache_refused);
  FRESH_DIR();
  RUN_TEST(test_one_store_two_managers_refused);
  FRESH_DIR();
  RUN_TEST(test_fp8_scales_share_no_blocks);
  FRESH_DIR();
  RUN_TEST(test_detach_stuck_store);
  RUN_TEST(test_store_with_groups_refused);
  RUN_TEST(test_dir_store_creates_parents);
  tmp_remove();
  TEST_SUMMARY();
}
