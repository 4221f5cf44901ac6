/* The store tier tests' rig (tests/c/store_tier.c, tests/c/store_guards.c): simulated device and host
 * buffers whose blocks' bytes are a function of their whole prefix (what their K/V would be), a wrapper
 * store around the directory store that injects failures (slow gets, refused puts, lies, a store that
 * vanishes), and one engine step per prompt that counts every block attended with wrong bytes. */
#ifndef KVB_TESTS_STORE_RIG_H
#define KVB_TESTS_STORE_RIG_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "kvbt_common.h"

#define BS 4
#define DEV 12
#define HOST 8
#define BB 64 /* bytes of one block in the single region */

static unsigned char dev_mem[DEV][BB], host_mem[HOST][BB];
static char dir_path[256];

/* The bytes block b of prompt t holds once computed: a function of tokens [0, (b + 1) * BS). */
static inline void block_bytes(const int64_t* t, size_t b, unsigned char* out) {
  uint64_t h = 1469598103934665603ULL;
  size_t i;
  for (i = 0; i < (b + 1) * BS; ++i) h = (h ^ (uint64_t)t[i]) * 1099511628211ULL;
  for (i = 0; i < BB; ++i) out[i] = (unsigned char)((h >> ((i % 8) * 8)) + i);
}

/* ---- a wrapper store: the directory store plus injected failures ---------------------------------- */

typedef struct queued_get {
  kvb_store_key key;
  int32_t host;
  uint64_t ticket;
  int polls_left;
} queued_get;

typedef struct test_store {
  kvb_store inner;
  int delay;      /* polls a get waits before it reads its file */
  int fail_puts;  /* puts refused */
  int vanished;   /* every callback fails */
  int lie;        /* lookup reports every key present */
  queued_get q[64];
  size_t nq;
  kvb_store_key started[64]; /* keys of the gets started, in order */
  size_t nstarted;
} test_store;

static inline int ts_lookup(void* u, const kvb_store_key* keys, size_t n, size_t* found) {
  test_store* s = (test_store*)u;
  if (s->vanished) return -1;
  if (s->lie) {
    *found = n;
    return 0;
  }
  return s->inner.lookup(s->inner.user, keys, n, found);
}

static inline int ts_put(void* u, const kvb_store_key* key, int32_t host) {
  test_store* s = (test_store*)u;
  if (s->vanished || s->fail_puts) return -1;
  return s->inner.put(s->inner.user, key, host);
}

static inline int ts_get(void* u, const kvb_store_key* key, int32_t host, uint64_t ticket) {
  test_store* s = (test_store*)u;
  if (s->vanished || s->nq == 64) return -1;
  s->q[s->nq].key = *key;
  s->q[s->nq].host = host;
  s->q[s->nq].ticket = ticket;
  s->q[s->nq].polls_left = s->delay;
  s->nq++;
  s->started[s->nstarted++ % 64] = *key;
  return 0;
}

static inline int ts_poll(void* u, kvb_store_completion* done, size_t cap, size_t* num) {
  test_store* s = (test_store*)u;
  size_t i = 0;
  if (s->vanished) return -1;
  while (i < s->nq) { /* due gets read their files now */
    if (s->q[i].polls_left-- > 0) {
      ++i;
      continue;
    }
    if (s->inner.get(s->inner.user, &s->q[i].key, s->q[i].host, s->q[i].ticket) != 0) return -1;
    s->q[i] = s->q[--s->nq];
  }
  return s->inner.poll(s->inner.user, done, cap, num);
}

static kvb_store_dir* dir;
static test_store ts;

/* A directory store over host_mem with num_host_blocks blocks of region_bytes; its table in *table. */
static inline kvb_store_dir* store_dir_over(uint32_t num_host_blocks, size_t region_bytes, kvb_store* table) {
  kvb_store_dir_config dc;
  kvb_store_dir* d = NULL;
  void* regions[1];
  regions[0] = host_mem;
  kvb_store_dir_config_init(&dc);
  dc.path = dir_path;
  dc.regions = regions;
  dc.num_regions = 1;
  dc.region_block_bytes = region_bytes;
  dc.num_host_blocks = num_host_blocks;
  kvb_store_init(table);
  CHECK_OK(kvb_store_dir_create(&dc, &d, table));
  return d;
}

static inline void store_open(void) {
  memset(&ts, 0, sizeof ts);
  dir = store_dir_over(HOST, BB, &ts.inner);
}

static uint32_t store_flags; /* kvb_store.flags of the next make() */

/* The namespace of the test's blocks: fp16, one layer, one head, BB bytes of K and V. */
static inline kvb_store_namespace test_ns(uint64_t model_id) {
  kvb_store_namespace ns;
  kvb_store_namespace_init(&ns);
  ns.dtype = KVB_DTYPE_FP16;
  ns.block_size = BS;
  ns.num_layers = 1;
  ns.num_kv_heads = 1;
  ns.head_dim = BB / (2 * 2 * BS);
  ns.model_id = model_id;
  return ns;
}

/* The wrapper store's table (ts). */
static inline kvb_store ts_table(void) {
  kvb_store st;
  kvb_store_init(&st);
  st.user = &ts;
  st.lookup = ts_lookup;
  st.put = ts_put;
  st.get = ts_get;
  st.poll = ts_poll;
  st.flags = store_flags;
  return st;
}

static inline kvb_manager* make(uint64_t model_id, uint32_t flags) {
  kvb_manager* m = kvbt_make_ex(BS, DEV, HOST, 0.0f, KVB_CONFIG_HOST_CACHE | flags, 0);
  kvb_store st = ts_table();
  kvb_store_namespace ns = test_ns(model_id);
  CHECK_OK(kvb_manager_set_store(m, &st, &ns));
  memset(dev_mem, 0xEE, sizeof dev_mem); /* a fresh process: nothing on the device or host */
  memset(host_mem, 0xDD, sizeof host_mem);
  return m;
}

static inline void run_transfers(kvb_manager* m) {
  int32_t off[2 * HOST], load[2 * DEV];
  size_t noff = 0, nload = 0, i;
  CHECK_OK(kvb_drain_host_transfers(m, off, HOST, &noff, load, DEV, &nload));
  for (i = 0; i < noff; ++i) memcpy(host_mem[off[2 * i + 1]], dev_mem[off[2 * i]], BB);
  for (i = 0; i < nload; ++i) memcpy(dev_mem[load[2 * i + 1]], host_mem[load[2 * i]], BB);
}

static char tmpl[] = "/tmp/kvb_store_test_XXXXXX";
static int dir_serial;
#define FRESH_DIR() snprintf(dir_path, sizeof dir_path, "%s/d%d", tmpl, ++dir_serial)

/* The tests' temporary folder (tmpl): made (0 and a message on a failure), then removed with its stores. */
static inline int tmp_make(void) {
  if (mkdtemp(tmpl)) return 1;
  perror("mkdtemp");
  return 0;
}
static inline void tmp_remove(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpl);
}

static int attended_wrong; /* blocks attended with wrong bytes, over the whole test */

/* One prompt through an engine's steps: allocate; poll until it may run; transfers; check that every
 * computed block holds its bytes (what attention would read); compute the rest; commit; free.
 * Returns the tokens the step took as computed. */
static inline size_t run_prompt(kvb_manager* m, int64_t id, const int64_t* t, size_t n, size_t* cached_at_alloc,
                         int free_it) {
  size_t cached = 0, computed = 0, filling = 0, b;
  int32_t tab[KVBT_MAX_BLOCKS];
  unsigned char want[BB];
  int polls = 0;
  CHECK_OK(kvb_seq_allocate(m, id, t, n, &cached));
  if (cached_at_alloc) *cached_at_alloc = cached;
  for (;;) {
    CHECK_OK(kvb_store_poll(m, NULL));
    CHECK_OK(kvb_seq_store_state(m, id, &computed, &filling));
    CHECK_OK(kvb_check_invariants(m));
    if (!filling) break;
    CHECK_STATUS(kvb_seq_commit(m, id, 1), KVB_ERR_BAD_STATE); /* a filling sequence never runs */
    if (++polls > 100) {
      CHECK(0);
      return 0;
    }
  }
  run_transfers(m);
  CHECK(kvbt_table(m, id, tab) == (long)((n + BS - 1) / BS));
  for (b = 0; b < computed / BS; ++b) {
    block_bytes(t, b, want);
    if (memcmp(dev_mem[tab[b]], want, BB) != 0) attended_wrong++;
  }
  for (b = computed / BS; b < n / BS; ++b) block_bytes(t, b, dev_mem[tab[b]]); /* write_kv of the step */
  CHECK_OK(kvb_seq_commit(m, id, n - computed));
  CHECK_OK(kvb_check_invariants(m));
  if (free_it) CHECK_OK(kvb_seq_free(m, id));
  return computed;
}

static inline void prompt(int64_t* t, size_t n, int64_t base) { kvbt_iota(t, n, base); }

/* P (22 tokens: 5 full blocks + 2) computed, then pushed out of the device and the host into the store
 * by unrelated prompts. */
static int64_t P[22];
static inline void populate(kvb_manager* m) {
  int64_t other[22];
  int k;
  prompt(P, 22, 1000);
  run_prompt(m, 1, P, 22, NULL, 1);
  for (k = 0; k < 6; ++k) {
    prompt(other, 22, 5000 + 100 * k);
    run_prompt(m, 10 + k, other, 22, NULL, 1);
  }
}

/* A store opened here and filled with P's blocks by a first manager; returns a second manager over it. */
static inline kvb_manager* reopen_populated(void) {
  kvb_manager* m;
  store_open();
  m = make(1, 0);
  populate(m);
  kvb_manager_destroy(m);
  return make(1, 0);
}

#endif
