/* bench_write_copy_swap.c - the kernel cases of `kvblock bench` that move KV bytes: kvb_write_kv of new
   tokens to random slots (input bytes read + cache bytes written), kvb_copy_blocks (read + write of
   the block bytes) and kvb_swap_blocks to and from a host cache (read + write on the CPU, the bytes
   once across PCIe on the GPU). */
#include <stdlib.h>
#include <string.h>

#include "bench_kernels_env.h"
#include "util.h"

typedef struct write_ctx {
  kcache cache, key, value, slots;
  kvb_write_kv_args a;
} write_ctx;

static int call_write(void* p) {
  write_ctx* c = (write_ctx*)p;
  return lib_ok("kvb_write_kv", kvb_write_kv(&c->cache.dev, &c->a, NULL));
}

/* T new tokens scattered to random distinct slots of a cache of 2T slots. */
int bench_write_kv(kenv* e) {
  write_ctx c;
  uint32_t t = e->cuda ? (e->quick ? 16384 : 65536) : (e->quick ? 1024 : 32768), i;
  size_t bytes = (size_t)t * HKV * HD * 2;
  int32_t* perm = (int32_t*)xmalloc(2 * (size_t)t * sizeof *perm);
  char label[64];
  int ok;
  memset(&c, 0, sizeof c);
  ok = kc_alloc(e, &c.cache, 2 * t / BS, BS, HKV, HD, 1) && kc_buffer(e, &c.key, bytes) &&
       kc_buffer(e, &c.value, bytes) && kc_buffer(e, &c.slots, (size_t)t * 8);
  if (ok) {
    fill16((uint16_t*)c.key.host.k, bytes / 2, &e->seed);
    fill16((uint16_t*)c.value.host.k, bytes / 2, &e->seed);
    random_tables(perm, 2 * t, &e->seed);
    for (i = 0; i < t; i++) ((int64_t*)c.slots.host.k)[i] = perm[i];
    ok = kc_upload(e, &c.key) && kc_upload(e, &c.value) && kc_upload(e, &c.slots);
  }
  kvb_write_kv_args_init(&c.a);
  c.a.num_tokens = t;
  c.a.key = c.key.dev.k;
  c.a.value = c.value.dev.k;
  c.a.slot_mapping = (const int64_t*)c.slots.dev.k;
  snprintf(label, sizeof label, "write_kv %u tokens (random slots)", t);
  ok = ok && bench_one(e, call_write, &c, "write_kv", label, 2.0 * 2 * (double)bytes, CEIL_COPY, 0);
  kc_free_all(&c.cache, &c.key, &c.value, &c.slots, (kcache*)NULL);
  free(perm);
  return ok;
}

/* ---------------------------------------------------------------------------------------------- */
/* copy_blocks and swap_blocks                                                                     */
/* ---------------------------------------------------------------------------------------------- */

typedef struct blocks_ctx {
  kcache dev[KMAX_LAYERS];
  kvb_cache_desc devs[KMAX_LAYERS], hosts[KMAX_LAYERS];
  uint32_t layers, n;
  int32_t *pairs, *runs; /* random block ids; consecutive ids (runs of adjacent blocks) */
  int dir;               /* 0 copy_blocks, 1 swap out (device -> host), 2 swap in */
  int use_runs;
  uint32_t swap_flags;   /* KVB_SWAP_* */
} blocks_ctx;

static int call_blocks(void* p) {
  blocks_ctx* c = (blocks_ctx*)p;
  kvb_status st;
  const int32_t* pairs = c->use_runs ? c->runs : c->pairs;
  if (c->dir == 0) st = kvb_copy_blocks(c->devs, c->layers, pairs, c->n, NULL);
  else if (c->dir == 1) st = kvb_swap_blocks(c->devs, c->hosts, c->layers, pairs, c->n, c->swap_flags, NULL);
  else st = kvb_swap_blocks(c->hosts, c->devs, c->layers, pairs, c->n, c->swap_flags, NULL);
  return lib_ok(c->dir ? "kvb_swap_blocks" : "kvb_copy_blocks", st);
}

static void blocks_free(blocks_ctx* c) {
  uint32_t l;
  for (l = 0; l < c->layers; l++) {
    kc_free(&c->dev[l]);
    cache_free(&c->hosts[l]);
  }
  free(c->pairs);
  free(c->runs);
}

/* layers device caches and as many host caches (page-locked where CUDA is usable) of 2n + 16 blocks,
   random data; n pairs from a random permutation (sources, then distinct destinations), and n pairs of
   consecutive ids (blocks 0..n-1 onto n..2n-1: what a copy that merges adjacent blocks can exploit). */
static int blocks_setup(kenv* e, blocks_ctx* c) {
  uint32_t l, i, nblocks;
  int32_t* perm;
  memset(c, 0, sizeof *c);
  c->layers = e->quick ? 2 : 8;
  c->n = e->quick ? 64 : 512;
  nblocks = 2 * c->n + 16;
  perm = (int32_t*)xmalloc(nblocks * sizeof *perm);
  random_tables(perm, nblocks, &e->seed);
  c->pairs = (int32_t*)xmalloc(2 * (size_t)c->n * sizeof *c->pairs);
  c->runs = (int32_t*)xmalloc(2 * (size_t)c->n * sizeof *c->runs);
  c->swap_flags = KVB_SWAP_AUTO;
  for (i = 0; i < c->n; i++) c->pairs[2 * i] = perm[i], c->pairs[2 * i + 1] = perm[c->n + i];
  for (i = 0; i < c->n; i++) c->runs[2 * i] = (int32_t)i, c->runs[2 * i + 1] = (int32_t)(c->n + i);
  free(perm);
  for (l = 0; l < c->layers; l++) {
    if (!kc_alloc(e, &c->dev[l], nblocks, BS, HKV, HD, 64) || !kc_fill_random(e, &c->dev[l]) ||
        !cache_alloc(&c->hosts[l], 0, nblocks, BS, HKV, HD))
      return 0;
    c->devs[l] = c->dev[l].dev;
    fill16((uint16_t*)c->hosts[l].k, desc_bytes(&c->hosts[l]) / 2, &e->seed);
    fill16((uint16_t*)c->hosts[l].v, desc_bytes(&c->hosts[l]) / 2, &e->seed);
  }
  return 1;
}

int bench_blocks(kenv* e) {
  blocks_ctx c;
  char label[64];
  double moved;
  int ok = blocks_setup(e, &c);
  moved = (double)c.layers * c.n * 2 * KV_BLOCK_BYTES; /* K+V block bytes per call */
  snprintf(label, sizeof label, "copy_blocks %u layers x %u pairs", c.layers, c.n);
  c.dir = 0;
  ok = ok && bench_one(e, call_blocks, &c, "copy_blocks", label, 2 * moved, CEIL_COPY, 0);
  snprintf(label, sizeof label, "copy_blocks %u x %u, adjacent ids", c.layers, c.n);
  c.use_runs = 1;
  ok = ok && bench_one(e, call_blocks, &c, "copy_blocks_runs", label, 2 * moved, CEIL_COPY, 0);
  c.use_runs = 0;
  /* Across PCIe the bytes cross once (vs the one-way rate); on the CPU read + write (vs memcpy). */
  snprintf(label, sizeof label, "swap_blocks out %u x %u", c.layers, c.n);
  c.dir = 1;
  ok = ok && bench_one(e, call_blocks, &c, "swap_out", label, e->cuda ? moved : 2 * moved, CEIL_D2H, 0);
  snprintf(label, sizeof label, "swap_blocks in %u x %u", c.layers, c.n);
  c.dir = 2;
  ok = ok && bench_one(e, call_blocks, &c, "swap_in", label, e->cuda ? moved : 2 * moved, CEIL_H2D, 0);
  if (e->cuda) { /* the two methods KVB_SWAP_AUTO chooses between, each forced */
    static const struct { uint32_t flags; const char* name; } methods[] = {{KVB_SWAP_USE_MEMCPY, "memcpy"},
                                                                            {KVB_SWAP_USE_KERNEL, "kernel"}};
    size_t k;
    for (k = 0; k < 2 && ok; k++) {
      char key[48];
      c.swap_flags = methods[k].flags;
      for (c.dir = 1; c.dir <= 2 && ok; c.dir++) {
        snprintf(key, sizeof key, "swap_%s_%s", c.dir == 1 ? "out" : "in", methods[k].name);
        snprintf(label, sizeof label, "swap_blocks %s %u x %u, %s", c.dir == 1 ? "out" : "in", c.layers, c.n,
                 methods[k].name);
        ok = bench_one(e, call_blocks, &c, key, label, moved, c.dir == 1 ? CEIL_D2H : CEIL_H2D, 0);
      }
    }
  }
  blocks_free(&c);
  return ok;
}
