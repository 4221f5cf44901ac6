/* The store tier: a directory store below the host cache, with real bytes in simulated device
 * and host buffers. Every block's bytes are a function of its whole prefix (what its K/V would be), so the
 * "attend" check before each step finds any wrong byte a hit brought in. A wrapper store around the
 * directory store injects every failure the store can have: a slow get, a get whose file vanished, was
 * truncated or corrupted after the lookup, refused puts, and a store whose callbacks all start failing.
 * After each, the manager is consistent (kvb_check_invariants) and the bytes attended are right. */
#include <dirent.h>
#include <unistd.h>

#include "store_rig.h"

/* Files in the store directory: whole block files (32 hex digits + ".kvb", header + payload bytes) and
   anything else (a leftover temporary file would be a failed atomic write). */
static void count_files(size_t* blocks, size_t* others) {
  DIR* d = opendir(dir_path);
  struct dirent* e;
  char path[600];
  *blocks = *others = 0;
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    FILE* f;
    long size = -1;
    if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || (e->d_name[1] == '.' && e->d_name[2] == '\0'))) continue;
    snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
    if ((f = fopen(path, "rb")) != NULL) {
      fseek(f, 0, SEEK_END);
      size = ftell(f);
      fclose(f);
    }
    if (strlen(e->d_name) == 36 && strcmp(e->d_name + 32, ".kvb") == 0 && size == 64 + BB) ++*blocks;
    else ++*others;
  }
  closedir(d);
}

static void test_restart_finds_prefix(void) {
  kvb_manager* a;
  kvb_manager* b;
  size_t cached = 0, computed;
  kvb_stats st;
  kvb_event ev[256];
  int64_t toks[256 * BS];
  size_t nev = 0, i;
  int store_events = 0;
  store_open();
  a = make(7, KVB_CONFIG_EVENTS);
  populate(a);
  st = kvbt_stats(a);
  CHECK(st.store_put_blocks > 0 && st.store_put_failures == 0);
  CHECK(st.store_put_bytes == st.store_put_blocks * BB);
  CHECK_OK(kvb_drain_events(a, ev, 256, toks, sizeof toks / sizeof toks[0], &nev, NULL));
  for (i = 0; i < nev; ++i) store_events += ev[i].medium == KVB_MEDIUM_STORE && ev[i].type == KVB_EVENT_BLOCK_STORED;
  CHECK(store_events == (int)st.store_put_blocks);
  {
    size_t files, others;
    count_files(&files, &others);
    CHECK(files == st.store_put_blocks && others == 0); /* one whole file per block, no temporaries */
  }
  kvb_manager_destroy(a);

  b = make(7, 0); /* a restarted engine: empty device and host */
  computed = run_prompt(b, 1, P, 22, &cached, 1);
  CHECK(cached == 20 && computed == 20);
  st = kvbt_stats(b);
  CHECK(st.store_hit_tokens == 20 && st.store_get_blocks == 5 && st.store_get_failures == 0);
  CHECK(st.store_get_bytes == 5 * BB && st.hit_tokens == 20 && st.device_hit_tokens == 0);
  /* The blocks are on the device now, indexed: a second request hits them there. */
  computed = run_prompt(b, 2, P, 22, &cached, 1);
  CHECK(cached == 20 && computed == 20 && kvbt_stats(b).device_hit_tokens == 20);
  kvb_manager_destroy(b);

  b = make(8, 0); /* another model id: the same directory, no match */
  computed = run_prompt(b, 1, P, 22, &cached, 1);
  CHECK(cached == 0 && computed == 0);
  kvb_manager_destroy(b);
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

static void test_slow_get(void) {
  kvb_manager* b;
  size_t cached = 0, computed, filling = 9;
  b = reopen_populated();
  ts.delay = 3;
  CHECK_OK(kvb_seq_allocate(b, 5, P, 22, &cached));
  CHECK(cached == 20);
  CHECK_OK(kvb_store_poll(b, &filling));
  CHECK(filling == 5 && kvbt_stats(b).store_filling_blocks == 5);
  CHECK_STATUS(kvb_seq_append(b, 5, P, 1), KVB_ERR_BAD_STATE);
  {
    int64_t ids[1] = {5};
    int32_t tables[8];
    int32_t lens[1];
    kvb_batch batch;
    kvb_batch_init(&batch);
    batch.block_tables = tables;
    batch.max_blocks_per_seq = 8;
    batch.seq_lens = lens;
    CHECK_STATUS(kvb_batch_export(b, ids, 1, &batch), KVB_ERR_BAD_STATE); /* never attended while filling */
    CHECK_STATUS(kvb_seq_fork(b, 5, 6), KVB_ERR_BAD_STATE);
    CHECK_STATUS(kvb_seq_set_extra_key(b, 5, 3, 42), KVB_ERR_BAD_STATE);
  }
  CHECK_OK(kvb_seq_free(b, 5));
  CHECK_OK(kvb_check_invariants(b));
  /* The same id again, while the old gets are in flight: they hold 5 of the 8 host blocks, so only 3
     store hits can be staged now. */
  computed = run_prompt(b, 5, P, 22, &cached, 1);
  CHECK(cached == 3 * BS && computed == 3 * BS);
  CHECK_OK(kvb_store_poll(b, &filling));
  CHECK(filling == 0);
  CHECK_OK(kvb_check_invariants(b));
  CHECK(kvbt_stats(b).free_host_blocks == HOST);
  kvb_manager_destroy(b);
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

/* The file of the second-started get (block 1) is damaged between lookup and get. */
typedef enum damage { DELETE, TRUNCATE, CORRUPT } damage;

static void damage_block(size_t j, damage how) {
  char path[400];
  kvb_store_key k = ts.started[j];
  FILE* f;
  snprintf(path, sizeof path, "%s/%016llx%016llx.kvb", dir_path, (unsigned long long)k.hi, (unsigned long long)k.lo);
  if (how == DELETE) {
    CHECK(unlink(path) == 0);
    return;
  }
  if (how == TRUNCATE) {
    CHECK(truncate(path, 64 + BB / 2) == 0);
    return;
  }
  f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (!f) return;
  {
    int c;
    fseek(f, 64 + 5, SEEK_SET);
    c = fgetc(f);
    fseek(f, 64 + 5, SEEK_SET);
    fputc(c ^ 0xFF, f); /* one byte flipped: the checksum must catch it */
  }
  fclose(f);
}

static void one_damage(damage how) {
  kvb_manager* b;
  size_t cached = 0, computed = 0, filling = 0;
  int32_t tab[KVBT_MAX_BLOCKS];
  unsigned char want[BB];
  size_t i;
  b = reopen_populated();
  ts.delay = 1;
  CHECK_OK(kvb_seq_allocate(b, 3, P, 22, &cached));
  CHECK(cached == 20 && ts.nstarted == 5);
  damage_block(2, how);
  for (i = 0; i < 5; ++i) {
    CHECK_OK(kvb_store_poll(b, &filling));
    CHECK_OK(kvb_check_invariants(b));
  }
  CHECK(filling == 0);
  CHECK_OK(kvb_seq_store_state(b, 3, &computed, &filling));
  CHECK(computed == 2 * BS && filling == 0);
  CHECK(kvbt_stats(b).store_get_failures == 1 && kvbt_stats(b).store_recomputed_tokens == 3 * BS);
  run_transfers(b);
  CHECK(kvbt_table(b, 3, tab) == 6);
  for (i = 0; i < 2; ++i) {
    block_bytes(P, i, want);
    if (memcmp(dev_mem[tab[i]], want, BB) != 0) attended_wrong++;
  }
  for (i = 2; i < 5; ++i) block_bytes(P, i, dev_mem[tab[i]]);
  CHECK_OK(kvb_seq_commit(b, 3, 22 - computed));
  CHECK_OK(kvb_seq_free(b, 3));
  CHECK_OK(kvb_check_invariants(b));
  /* Recomputed blocks enter the index: the next request hits them on the device with the right bytes. */
  computed = run_prompt(b, 4, P, 22, &cached, 1);
  CHECK(computed == 20);
  kvb_manager_destroy(b);
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

static void test_get_missing_after_lookup(void) { one_damage(DELETE); }
static void test_get_partial_file(void) { one_damage(TRUNCATE); }
static void test_get_corrupted_bytes(void) { one_damage(CORRUPT); }

static void test_lookup_lies(void) {
  /* A store that says every key exists: the gets fail and the whole prompt is recomputed. */
  kvb_manager* b;
  size_t cached = 0, computed;
  int64_t q[22];
  store_open();
  b = make(1, 0);
  ts.lie = 1;
  prompt(q, 22, 77);
  computed = run_prompt(b, 1, q, 22, &cached, 1);
  CHECK(cached == 20 && computed == 0);
  CHECK(kvbt_stats(b).store_get_failures == 5);
  kvb_manager_destroy(b);
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

static void test_refused_puts(void) {
  kvb_manager* b;
  size_t cached = 0;
  store_open();
  b = make(1, 0);
  ts.fail_puts = 1;
  populate(b);
  CHECK(kvbt_stats(b).store_put_failures > 0 && kvbt_stats(b).store_put_blocks == 0);
  kvb_manager_destroy(b);
  b = make(1, 0);
  CHECK(run_prompt(b, 1, P, 22, &cached, 1) == 0 && cached == 0);
  kvb_manager_destroy(b);
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

static void test_store_vanishes(void) {
  kvb_manager* b;
  size_t cached = 0, computed = 0, filling = 0;
  int64_t other[22];
  b = reopen_populated();
  ts.delay = 2;
  CHECK_OK(kvb_seq_allocate(b, 1, P, 22, &cached));
  CHECK(cached == 20);
  ts.vanished = 1; /* from now on every callback fails */
  CHECK_OK(kvb_store_poll(b, &filling));
  CHECK(filling == 0); /* a failing poll ends every get in flight */
  CHECK_OK(kvb_seq_store_state(b, 1, &computed, &filling));
  CHECK(computed == 0 && filling == 0);
  CHECK_OK(kvb_check_invariants(b));
  {
    int32_t tab[KVBT_MAX_BLOCKS];
    size_t i;
    run_transfers(b);
    CHECK(kvbt_table(b, 1, tab) == 6);
    for (i = 0; i < 5; ++i) block_bytes(P, i, dev_mem[tab[i]]);
  }
  CHECK_OK(kvb_seq_commit(b, 1, 22));
  CHECK_OK(kvb_seq_free(b, 1));
  prompt(other, 22, 9000);
  CHECK(run_prompt(b, 2, P, 22, &cached, 1) == 20 && cached == 20); /* device hits still work */
  CHECK(run_prompt(b, 3, other, 22, &cached, 1) == 0);
  kvb_manager_destroy(b);
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

/* P reaches the host tier (two other prompts push it off the device) but the host tier never drops it:
   only write-through puts it in the store, at the poll after its offloads were drained. */
static void write_through_case(uint32_t flags, uint64_t want_puts, size_t want_cached) {
  kvb_manager* b;
  int64_t other[22];
  size_t cached = 0;
  kvb_stats st;
  store_open();
  store_flags = flags;
  b = make(1, 0);
  prompt(P, 22, 1000);
  run_prompt(b, 1, P, 22, NULL, 1);
  prompt(other, 22, 5000);
  run_prompt(b, 2, other, 22, NULL, 1);
  prompt(other, 22, 6000);
  run_prompt(b, 3, other, 22, NULL, 1);
  CHECK_OK(kvb_store_poll(b, NULL));
  CHECK_OK(kvb_check_invariants(b));
  st = kvbt_stats(b);
  CHECK(st.host_evictions == 0 && st.offloaded_blocks >= 5);
  CHECK(st.store_put_blocks == want_puts && st.store_put_failures == 0);
  if (flags & KVB_STORE_WRITE_THROUGH) { /* evictions from the host put nothing already put */
    int k;
    for (k = 0; k < 5; ++k) {
      prompt(other, 22, 7000 + 100 * k);
      run_prompt(b, 4 + k, other, 22, NULL, 1);
    }
    CHECK_OK(kvb_store_poll(b, NULL));
    st = kvbt_stats(b);
    CHECK(st.host_evictions > 0 && st.store_put_blocks <= st.offloaded_blocks);
  }
  kvb_manager_destroy(b);
  b = make(1, 0);
  CHECK(run_prompt(b, 1, P, 22, &cached, 1) == want_cached && cached == want_cached);
  kvb_manager_destroy(b);
  store_flags = 0;
  kvb_store_dir_destroy(dir);
  CHECK(attended_wrong == 0);
}

static void test_write_through(void) {
  write_through_case(0, 0, 0);                      /* write-back only: nothing evicted from the host */
  FRESH_DIR();
  write_through_case(KVB_STORE_WRITE_THROUGH, 5, 20); /* P's five full blocks, put once each */
}

static void test_refusals(void) {
  kvb_manager* m = kvbt_make_ex(BS, DEV, 0, 0.0f, 0, 0);
  kvb_store st;
  kvb_store_namespace ns;
  kvb_store_key k1, k2;
  kvb_store_init(&st);
  kvb_store_namespace_init(&ns);
  ns.block_size = BS;
  ns.num_layers = ns.num_kv_heads = ns.head_dim = 1;
  st.lookup = ts_lookup;
  st.put = ts_put;
  st.get = ts_get;
  CHECK_STATUS(kvb_manager_set_store(m, &st, &ns), KVB_ERR_INVALID_ARGUMENT); /* poll missing */
  CHECK(strstr(kvb_last_error(), "poll") != NULL);
  st.poll = ts_poll;
  st.flags = 8;
  CHECK_STATUS(kvb_manager_set_store(m, &st, &ns), KVB_ERR_INVALID_ARGUMENT);
  CHECK(strstr(kvb_last_error(), "flags") != NULL);
  st.flags = 0;
  CHECK_STATUS(kvb_manager_set_store(m, &st, &ns), KVB_ERR_BAD_STATE); /* no host cache */
  ns.block_size = 8;
  CHECK_STATUS(kvb_manager_set_store(m, &st, &ns), KVB_ERR_INVALID_ARGUMENT);
  CHECK_OK(kvb_manager_set_store(m, NULL, NULL));
  kvb_manager_destroy(m);
  ns.block_size = BS;
  CHECK_OK(kvb_store_key_fold(&ns, 1, 2, &k1));
  ns.model_id = 1;
  CHECK_OK(kvb_store_key_fold(&ns, 1, 2, &k2));
  CHECK(k1.lo != k2.lo || k1.hi != k2.hi);
  {
    /* fp8 caches (one byte per element) have namespaces of their own, one per format */
    kvb_store_key k3;
    ns.model_id = 0;
    ns.dtype = KVB_DTYPE_FP8_E4M3;
    CHECK_OK(kvb_store_key_fold(&ns, 1, 2, &k2));
    ns.dtype = KVB_DTYPE_FP8_E5M2;
    CHECK_OK(kvb_store_key_fold(&ns, 1, 2, &k3));
    CHECK((k1.lo != k2.lo || k1.hi != k2.hi) && (k2.lo != k3.lo || k2.hi != k3.hi));
  }
  ns.dtype = 9;
  CHECK_STATUS(kvb_store_key_fold(&ns, 1, 2, &k2), KVB_ERR_INVALID_ARGUMENT);
  {
    kvb_store_dir_config dc;
    kvb_store_dir* d = NULL;
    kvb_store t;
    void* regions[1];
    regions[0] = host_mem;
    kvb_store_dir_config_init(&dc);
    kvb_store_init(&t);
    dc.regions = regions;
    dc.num_regions = 1;
    dc.region_block_bytes = BB;
    dc.num_host_blocks = HOST;
    CHECK_STATUS(kvb_store_dir_create(&dc, &d, &t), KVB_ERR_INVALID_ARGUMENT); /* no path */
    CHECK(strstr(kvb_last_error(), "path") != NULL);
    dc.path = "/proc/version/not_a_dir";
    CHECK_STATUS(kvb_store_dir_create(&dc, &d, &t), KVB_ERR_INVALID_ARGUMENT);
    dc.path = "/tmp";
    dc.region_block_stride = BB / 2;
    CHECK_STATUS(kvb_store_dir_create(&dc, &d, &t), KVB_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kvb_last_error(), "region_block_stride") != NULL);
    CHECK(d == NULL && t.lookup == NULL);
  }
}

int main(void) {
  RUN_TEST(test_refusals);
  if (!tmp_make()) return 2;
  FRESH_DIR();
  RUN_TEST(test_restart_finds_prefix);
  FRESH_DIR();
  RUN_TEST(test_slow_get);
  FRESH_DIR();
  RUN_TEST(test_get_missing_after_lookup);
  FRESH_DIR();
  RUN_TEST(test_get_partial_file);
  FRESH_DIR();
  RUN_TEST(test_get_corrupted_bytes);
  FRESH_DIR();
  RUN_TEST(test_lookup_lies);
  FRESH_DIR();
  RUN_TEST(test_refused_puts);
  FRESH_DIR();
  RUN_TEST(test_store_vanishes);
  FRESH_DIR();
  RUN_TEST(test_write_through);
  tmp_remove();
  TEST_SUMMARY();
}
