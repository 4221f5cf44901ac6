/* bench_kernels_env.c - what every kernel case of `kvblock bench` stands on: random fills, caches and
   raw buffers on the run's device, the GPU fence, and the timing loop that prints a case against its
   ceiling (bench_kernels_env.h).

   GPU memory comes from kvb_cache_alloc (a raw buffer is the K array of a cache of 512-byte blocks);
   it is filled from a page-locked host cache with kvb_swap_blocks. The C API has no stream
   synchronisation, so every GPU call here runs on the legacy default stream (stream NULL) and a fence
   ends each timed sample: a one-block kvb_swap_blocks of a device block holding 0xff bytes into a
   zeroed page-locked host block, then a spin on the host until the bytes land. Stream order puts that
   copy after every call before it, so its arrival means they are done; the fence's own cost (a few
   microseconds) is spread over the calls of one sample. */
#include "bench_kernels_env.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---------------------------------------------------------------------------------------------- */
/* Memory                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/* Random fp16 values of magnitude 1/8..1 (no zeros, denormals, infinities or NaNs). */
void fill16(uint16_t* p, size_t n, uint64_t* state) {
  uint64_t x = *state;
  size_t i, j;
  for (i = 0; i < n; i += 4) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (j = 0; j < 4 && i + j < n; j++) {
      uint16_t r = (uint16_t)(x >> (16 * j));
      uint16_t e = (uint16_t)(12 + (r >> 10) % 3);
      p[i + j] = (uint16_t)((r & 0x8000u) | (e << 10) | (r & 0x3ffu));
    }
  }
  *state = x;
}

uint64_t next_rand(uint64_t* state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

size_t desc_bytes(const kvb_cache_desc* d) { return (size_t)d->num_blocks * (size_t)d->block_stride * 2; }

int cache_alloc(kvb_cache_desc* d, int cuda, uint32_t nblocks, uint32_t bs, uint32_t heads, uint32_t hd) {
  kvb_status st;
  kvb_cache_desc_init(d);
  d->device_type = cuda ? KVB_DEVICE_CUDA : KVB_DEVICE_CPU;
  d->dtype = KVB_DTYPE_FP16;
  d->num_blocks = nblocks;
  d->block_size = bs;
  d->num_kv_heads = heads;
  d->head_dim = hd;
  if ((st = kvb_cache_alloc(d)) != KVB_OK) {
    lib_error("kvb_cache_alloc", st);
    return 0;
  }
  return 1;
}

void cache_free(kvb_cache_desc* d) {
  if (d->k) kvb_cache_free(d);
}

void kc_free(kcache* c) {
  if (c->staged) cache_free(&c->host);
  cache_free(&c->dev);
  memset(c, 0, sizeof *c);
}

void kc_free_all(kcache* first, ...) {
  va_list ap;
  kcache* c;
  va_start(ap, first);
  for (c = first; c; c = va_arg(ap, kcache*)) kc_free(c);
  va_end(ap);
}

/* A cache of the shape on e's device, with host_blocks blocks of staging on the GPU. */
int kc_alloc(const kenv* e, kcache* c, uint32_t nblocks, uint32_t bs, uint32_t heads, uint32_t hd,
             uint32_t host_blocks) {
  memset(c, 0, sizeof *c);
  if (!cache_alloc(&c->dev, e->cuda, nblocks, bs, heads, hd)) return 0;
  if (!e->cuda) {
    c->host = c->dev;
    return 1;
  }
  c->staged = 1;
  if (!cache_alloc(&c->host, 0, host_blocks < nblocks ? host_blocks : nblocks, bs, heads, hd)) {
    kc_free(c);
    return 0;
  }
  return 1;
}

/* A raw buffer of at least bytes bytes: c->host.k on the host side, c->dev.k on the device. */
int kc_buffer(const kenv* e, kcache* c, size_t bytes) {
  size_t blocks = (bytes + BUF_BLOCK - 1) / BUF_BLOCK;
  return kc_alloc(e, c, (uint32_t)(blocks ? blocks : 1), 1, 1, BUF_BLOCK / 2, (uint32_t)(blocks ? blocks : 1));
}

/* Waits until every GPU call issued so far has finished (see the top of the file); 1 on the CPU. */
int fence(kenv* e) {
  volatile const unsigned char* landed;
  int32_t pair[2] = {0, 1};
  kvb_status st;
  double t0;
  unsigned long spins = 0;
  if (!e->cuda) return 1;
  landed = (volatile const unsigned char*)e->fence_host.k + BUF_BLOCK;
  memset((char*)e->fence_host.k + BUF_BLOCK, 0, 8);
  if ((st = kvb_swap_blocks(&e->fence_dev, &e->fence_host, 1, pair, 1, KVB_SWAP_USE_MEMCPY, NULL)) != KVB_OK) {
    lib_error("kvb_swap_blocks (fence)", st);
    return 0;
  }
  t0 = now_s();
  while (landed[0] == 0 || landed[7] == 0)
    if (++spins % 4096 == 0 && now_s() - t0 > FENCE_TIMEOUT_S) {
      tool_error("bench: the GPU fence did not complete in %.0f s", FENCE_TIMEOUT_S);
      return 0;
    }
  return 1;
}

/* Copies the staging cache into the device cache (GPU) and waits for it; nothing on the CPU. */
int kc_upload(kenv* e, kcache* c) {
  int32_t* pairs;
  uint32_t i, n = c->dev.num_blocks;
  kvb_status st;
  if (!c->staged) return 1;
  pairs = (int32_t*)xmalloc(2 * (size_t)n * sizeof *pairs);
  for (i = 0; i < n; i++) {
    pairs[2 * i] = (int32_t)(i % c->host.num_blocks);
    pairs[2 * i + 1] = (int32_t)i;
  }
  st = kvb_swap_blocks(&c->host, &c->dev, 1, pairs, n, KVB_SWAP_USE_MEMCPY, NULL);
  free(pairs);
  if (st != KVB_OK) {
    lib_error("kvb_swap_blocks (upload)", st);
    return 0;
  }
  return fence(e);
}

/* Random K and V on the host side, then uploaded. */
int kc_fill_random(kenv* e, kcache* c) {
  fill16((uint16_t*)c->host.k, desc_bytes(&c->host) / 2, &e->seed);
  fill16((uint16_t*)c->host.v, desc_bytes(&c->host) / 2, &e->seed);
  return kc_upload(e, c);
}

/* The fence's device block 0 holds 0xff bytes; host block 1 is where it lands. */
int fence_setup(kenv* e) {
  int32_t pair[2] = {0, 0};
  kvb_status st;
  if (!e->cuda) return 1;
  if (!cache_alloc(&e->fence_dev, 1, 1, 1, 1, BUF_BLOCK / 2)) return 0;
  if (!cache_alloc(&e->fence_host, 0, 2, 1, 1, BUF_BLOCK / 2)) return 0;
  memset(e->fence_host.k, 0xff, BUF_BLOCK);
  if ((st = kvb_swap_blocks(&e->fence_host, &e->fence_dev, 1, pair, 1, KVB_SWAP_USE_MEMCPY, NULL)) != KVB_OK) {
    lib_error("kvb_swap_blocks (fence setup)", st);
    return 0;
  }
  return fence(e);
}

/* ---------------------------------------------------------------------------------------------- */
/* Timing and output                                                                               */
/* ---------------------------------------------------------------------------------------------- */

/* One warm-up call, then reps samples of e->inner calls each (fenced); seconds per call. */
int time_calls(kenv* e, kcall fn, void* ctx, kresult* res) {
  double sorted[KMAX_REPS];
  uint64_t rep;
  int i;
  if (!fn(ctx) || !fence(e)) return 0;
  for (rep = 0; rep < e->reps; rep++) {
    double t0 = now_s();
    for (i = 0; i < e->inner; i++)
      if (!fn(ctx)) return 0;
    if (!fence(e)) return 0;
    res->samples[res->n++] = (now_s() - t0) / e->inner;
  }
  memcpy(sorted, res->samples, res->n * sizeof(double));
  qsort(sorted, res->n, sizeof(double), cmp_double);
  res->med = quantile_sorted(sorted, res->n, 0.5);
  res->min = sorted[0];
  res->max = sorted[res->n - 1];
  return 1;
}

static double gbps(const kresult* res) { return res->med > 0 ? res->bytes / res->med / 1e9 : 0.0; }

void report_times(report* r, const kresult* res) {
  if (r->json) {
    report_group_begin(r, res->key, res->label);
    report_f64(r, "median_us", "median", res->med * 1e6, 2, NULL);
    report_f64(r, "min_us", "min", res->min * 1e6, 2, NULL);
    report_f64(r, "max_us", "max", res->max * 1e6, 2, NULL);
  } else {
    fprintf(r->f, "  %-38s %10.1f %10.1f %10.1f", res->label, res->med * 1e6, res->min * 1e6, res->max * 1e6);
  }
}

static void print_result(const kenv* e, const kresult* res) {
  report* r = e->r;
  double g = gbps(res), c = e->ceil[res->ceil], of = c > 0 ? g / c : 0.0;
  double spread = res->med > 0 ? (res->max - res->min) / res->med : 0.0;
  report_times(r, res);
  if (r->json) {
    report_f64(r, "spread", "spread", spread, 4, NULL);
    report_f64(r, "bytes", "bytes", res->bytes, 0, NULL);
    report_f64(r, "gbps", "GB/s", g, 3, NULL);
    if (c > 0) report_f64(r, "of_ceiling", "of ceiling", of, 4, NULL);
    report_str(r, "ceiling", "ceiling", e->ceil_name[res->ceil]);
    report_group_end(r);
  } else if (c > 0) {
    fprintf(r->f, " %7.1f%% %8.2f %6.1f%% of %s\n", 100.0 * spread, g, 100.0 * of, e->ceil_name[res->ceil]);
    fflush(r->f);
  } else { /* the ceiling could not be measured (said where it was): no fraction rather than a wrong one */
    fprintf(r->f, " %7.1f%% %8.2f    n/a  (%s not measured)\n", 100.0 * spread, g, e->ceil_name[res->ceil]);
    fflush(r->f);
  }
}

/* Times fn and prints it; a ceiling result also sets e->ceil[ceil]. */
int bench_one(kenv* e, kcall fn, void* ctx, const char* key, const char* label, double bytes, int ceil,
              int is_ceiling) {
  kresult* res = (kresult*)xcalloc(1, sizeof *res);
  int ok;
  snprintf(res->key, sizeof res->key, "%s", key);
  snprintf(res->label, sizeof res->label, "%s", label);
  res->bytes = bytes;
  res->ceil = ceil;
  if ((ok = time_calls(e, fn, ctx, res))) {
    if (is_ceiling) e->ceil[ceil] = gbps(res);
    print_result(e, res);
  }
  free(res);
  return ok;
}

void print_cpu_path(kenv* e, const char* section, const char* key) {
  const char* isa = kvb_cpu_isa();
  if (e->cuda) return;
  if (e->r->json) report_str(e->r, key, "CPU code path", isa);
  else fprintf(e->r->f, "  %s: CPU path %s, AMX-BF16 tiles %s\n", section, isa, strstr(isa, "+amx") ? "on" : "off");
}

/* Block tables: a random permutation of every block, batch rows of ctx / BS. */
void random_tables(int32_t* t, uint32_t n, uint64_t* seed) {
  uint32_t i;
  for (i = 0; i < n; i++) t[i] = (int32_t)i;
  for (i = n; i > 1; i--) {
    uint32_t j = (uint32_t)(next_rand(seed) % i);
    int32_t x = t[i - 1];
    t[i - 1] = t[j], t[j] = x;
  }
}

