/* bench_kernels.c - the kernel section of `kvblock bench`: kvb_paged_attention, kvb_write_kv,
   kvb_copy_blocks and kvb_swap_blocks on the CPU or the GPU, through the public C API only.

   Shapes: fp16, Hq=32, Hkv=8, D=128, block 16. Every buffer the kernels read holds random data (no
   zero-page reads). Bandwidth conventions (as PERFORMANCE.md): attention counts the K+V bytes it reads;
   write_kv the K/V input bytes read plus the cache bytes written; copy_blocks read + write of the block
   bytes; swap_blocks read + write on the CPU, the bytes once across PCIe on the GPU.

   Ceilings, measured in the same run: CPU, a memcpy of a large buffer, read + write (2 x bytes / time);
   GPU, kvb_copy_blocks of large dense 2 MiB blocks (read + write) for the on-device figures and
   kvb_swap_blocks of the same blocks with KVB_SWAP_USE_MEMCPY between device and page-locked host
   memory, one direction at a time (bytes / time), for the swaps.

   GPU memory comes from kvb_cache_alloc (a raw buffer is the K array of a cache of 512-byte blocks);
   it is filled from a page-locked host cache with kvb_swap_blocks. The C API has no stream
   synchronisation, so every GPU call here runs on the legacy default stream (stream NULL) and a fence
   ends each timed sample: a one-block kvb_swap_blocks of a device block holding 0xff bytes into a
   zeroed page-locked host block, then a spin on the host until the bytes land. Stream order puts that
   copy after every call before it, so its arrival means they are done; the fence's own cost (a few
   microseconds) is spread over the calls of one sample. */
#include "bench_kernels.h"
#include "bench_kernels_env.h"

#include <stdlib.h>
#include <string.h>

#include "bench_read.h"
#include "util.h"

static volatile uint64_t g_ksink;

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

static size_t desc_bytes(const kvb_cache_desc* d) { return (size_t)d->num_blocks * (size_t)d->block_stride * 2; }

static int cache_alloc(kvb_cache_desc* d, int cuda, uint32_t nblocks, uint32_t bs, uint32_t heads, uint32_t hd) {
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

static void cache_free(kvb_cache_desc* d) {
  if (d->k) kvb_cache_free(d);
}

void kc_free(kcache* c) {
  if (c->staged) cache_free(&c->host);
  cache_free(&c->dev);
  memset(c, 0, sizeof *c);
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
static int fence_setup(kenv* e) {
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

static void print_result(const kenv* e, const kresult* res) {
  report* r = e->r;
  double g = gbps(res), c = e->ceil[res->ceil], of = c > 0 ? g / c : 0.0;
  double spread = res->med > 0 ? (res->max - res->min) / res->med : 0.0;
  if (r->json) {
    report_group_begin(r, res->key, res->label);
    report_f64(r, "median_us", "median", res->med * 1e6, 2, NULL);
    report_f64(r, "min_us", "min", res->min * 1e6, 2, NULL);
    report_f64(r, "max_us", "max", res->max * 1e6, 2, NULL);
    report_f64(r, "spread", "spread", spread, 4, NULL);
    report_f64(r, "bytes", "bytes", res->bytes, 0, NULL);
    report_f64(r, "gbps", "GB/s", g, 3, NULL);
    report_f64(r, "of_ceiling", "of ceiling", of, 4, NULL);
    report_str(r, "ceiling", "ceiling", e->ceil_name[res->ceil]);
    report_group_end(r);
  } else {
    fprintf(r->f, "  %-38s %10.1f %10.1f %10.1f %7.1f%% %8.2f %6.1f%% of %s\n", res->label, res->med * 1e6,
            res->min * 1e6, res->max * 1e6, 100.0 * spread, g, 100.0 * of, e->ceil_name[res->ceil]);
    fflush(r->f);
  }
}

/* Times fn and prints it; a ceiling result also sets e->ceil[ceil]. */
static int bench_one(kenv* e, kcall fn, void* ctx, const char* key, const char* label, double bytes, int ceil,
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

/* ---------------------------------------------------------------------------------------------- */
/* Ceilings                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef struct memcpy_ctx {
  unsigned char *a, *b;
  size_t n, k;
} memcpy_ctx;

static int call_memcpy(void* p) {
  memcpy_ctx* c = (memcpy_ctx*)p;
  memcpy(c->b, c->a, c->n);
  c->k = (c->k * 2654435761u + 4099) % c->n;
  g_ksink += c->b[c->k]; /* the destination is read: the copy cannot be dropped */
  return 1;
}

typedef struct read_ctx {
  const unsigned char* buf;
  size_t n;
  int threads;
} read_ctx;

static int call_read(void* p) {
  read_ctx* c = (read_ctx*)p;
  int ok = 0;
  g_ksink += read_all(c->buf, c->n, c->threads, &ok);
  return ok;
}

/* CPU: memcpy of a large buffer of random data, read + write counted; checked equal afterwards. Then a
   streaming read of the same buffer by one thread per online CPU (bench_read.c), bytes read counted:
   the ceiling of CPU attention, which reads K and V once with as many threads. */
static int ceiling_cpu(kenv* e) {
  memcpy_ctx c;
  int ok;
  c.n = (size_t)(e->quick ? 32 : 512) << 20;
  c.k = 0;
  c.a = (unsigned char*)xmalloc(c.n);
  c.b = (unsigned char*)xmalloc(c.n);
  fill16((uint16_t*)c.a, c.n / 2, &e->seed);
  memset(c.b, 0, c.n);
  e->ceil_name[CEIL_COPY] = e->ceil_name[CEIL_D2H] = e->ceil_name[CEIL_H2D] = "memcpy";
  ok = bench_one(e, call_memcpy, &c, "ceiling_memcpy", e->quick ? "ceiling: memcpy 32 MiB" : "ceiling: memcpy 512 MiB",
                 2.0 * (double)c.n, CEIL_COPY, 1);
  if (ok && memcmp(c.a, c.b, c.n) != 0) {
    tool_error("bench: memcpy ceiling: the destination differs from the source");
    ok = 0;
  }
  e->ceil[CEIL_D2H] = e->ceil[CEIL_H2D] = e->ceil[CEIL_COPY];
  free(c.b);
  if (ok) {
    read_ctx rc;
    char label[64];
    rc.buf = c.a;
    rc.n = c.n;
    rc.threads = read_threads();
    snprintf(label, sizeof label, "ceiling: read %u MiB, %d thread%s", (unsigned)(c.n >> 20), rc.threads,
             rc.threads > 1 ? "s" : "");
    e->ceil_name[CEIL_READ] = "read";
    ok = bench_one(e, call_read, &rc, "ceiling_read", label, (double)c.n, CEIL_READ, 1);
  }
  free(c.a);
  return ok;
}

typedef struct big_ctx {
  kvb_cache_desc dev, host;
  int32_t* pairs;
  uint32_t n;
  int dir; /* 0 device copy, 1 device -> host, 2 host -> device */
} big_ctx;

static int call_big(void* p) {
  big_ctx* c = (big_ctx*)p;
  kvb_status st;
  if (c->dir == 0) st = kvb_copy_blocks(&c->dev, 1, c->pairs, c->n, NULL);
  else if (c->dir == 1) st = kvb_swap_blocks(&c->dev, &c->host, 1, c->pairs + 2 * c->n, c->n, KVB_SWAP_USE_MEMCPY, NULL);
  else st = kvb_swap_blocks(&c->host, &c->dev, 1, c->pairs + 2 * c->n, c->n, KVB_SWAP_USE_MEMCPY, NULL);
  if (st != KVB_OK) lib_error(c->dir ? "kvb_swap_blocks" : "kvb_copy_blocks", st);
  return st == KVB_OK;
}

/* GPU: kvb_copy_blocks of n 2 MiB blocks (K and V: 1024 tokens x 8 heads x 128) to n others, read +
   write; then kvb_swap_blocks of the first n blocks to and from page-locked host blocks, one way. */
static int ceiling_gpu(kenv* e) {
  big_ctx c;
  uint32_t i;
  double moved;
  int ok;
  memset(&c, 0, sizeof c);
  c.n = e->quick ? 16 : 64;
  moved = (double)c.n * 2 * (2u << 20);
  c.pairs = (int32_t*)xmalloc(4 * (size_t)c.n * sizeof *c.pairs);
  for (i = 0; i < c.n; i++) {
    c.pairs[2 * i] = (int32_t)i, c.pairs[2 * i + 1] = (int32_t)(c.n + i);            /* copy: i -> n + i */
    c.pairs[2 * c.n + 2 * i] = (int32_t)i, c.pairs[2 * c.n + 2 * i + 1] = (int32_t)i; /* swap: i -> i */
  }
  e->ceil_name[CEIL_COPY] = "copy_blocks 2 MiB";
  e->ceil_name[CEIL_D2H] = "D2H 2 MiB";
  e->ceil_name[CEIL_H2D] = "H2D 2 MiB";
  ok = cache_alloc(&c.dev, 1, 2 * c.n, 1024, HKV, HD) && cache_alloc(&c.host, 0, c.n, 1024, HKV, HD);
  if (ok) {
    memset(c.host.k, 1, desc_bytes(&c.host));
    memset(c.host.v, 1, desc_bytes(&c.host));
    c.dir = 2;
    ok = call_big(&c) && fence(e); /* device blocks hold data */
  }
  ok = ok && bench_one(e, call_big, &c, "ceiling_copy", "ceiling: copy_blocks 2 MiB blocks", 2 * moved, CEIL_COPY, 1);
  c.dir = 1;
  ok = ok && bench_one(e, call_big, &c, "ceiling_d2h", "ceiling: swap D2H 2 MiB (memcpy)", moved, CEIL_D2H, 1);
  c.dir = 2;
  ok = ok && bench_one(e, call_big, &c, "ceiling_h2d", "ceiling: swap H2D 2 MiB (memcpy)", moved, CEIL_H2D, 1);
  cache_free(&c.dev);
  cache_free(&c.host);
  free(c.pairs);
  return ok;
}

/* ---------------------------------------------------------------------------------------------- */
/* Paged attention                                                                                 */
/* ---------------------------------------------------------------------------------------------- */

typedef struct attn_ctx {
  kcache cache, q, out, tables, lens, ws;
  kvb_attention_args a;
} attn_ctx;

static int call_attention(void* p) {
  attn_ctx* c = (attn_ctx*)p;
  kvb_status st = kvb_paged_attention(&c->cache.dev, &c->a, NULL);
  if (st != KVB_OK) lib_error("kvb_paged_attention", st);
  return st == KVB_OK;
}

static void attn_free(attn_ctx* c) {
  kc_free(&c->cache);
  kc_free(&c->q);
  kc_free(&c->out);
  kc_free(&c->tables);
  kc_free(&c->lens);
  kc_free(&c->ws);
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

/* Random fp32 values of magnitude 1/8..1, as fill16's. */
static void fill32(float* p, size_t n, uint64_t* state) {
  size_t i;
  for (i = 0; i < n; i++) {
    uint64_t x = next_rand(state);
    p[i] = (float)(0.125 + 0.875 * (double)(x >> 40) / (double)(1u << 24)) * ((x & 1u) ? -1.f : 1.f);
  }
}

/* An fp32 cache of nblocks blocks: the fp16 allocation of twice the blocks, relabelled (strides are in
   elements, so they stay), filled with random fp32 values. */
static int kc_alloc_fp32(kenv* e, kcache* c, uint32_t nblocks) {
  if (!kc_alloc(e, c, 2 * nblocks, BS, HKV, HD, 4096)) return 0;
  c->dev.dtype = c->host.dtype = KVB_DTYPE_FP32;
  c->dev.num_blocks = nblocks;
  c->host.num_blocks = c->host.num_blocks / 2;
  fill32((float*)c->host.k, (size_t)c->host.num_blocks * (size_t)c->host.block_stride, &e->seed);
  fill32((float*)c->host.v, (size_t)c->host.num_blocks * (size_t)c->host.block_stride, &e->seed);
  return kc_upload(e, c);
}

static int attn_setup(kenv* e, attn_ctx* c, uint32_t dtype, uint32_t batch, uint32_t ctx) {
  uint32_t i, maxb = ctx / BS, nblocks = batch * maxb;
  size_t es = dtype == KVB_DTYPE_FP32 ? 4 : 2, qbytes = (size_t)batch * HQ * HD * es;
  kvb_status st;
  memset(c, 0, sizeof *c);
  if (!(dtype == KVB_DTYPE_FP32 ? kc_alloc_fp32(e, &c->cache, nblocks)
                                : kc_alloc(e, &c->cache, nblocks, BS, HKV, HD, 2048) && kc_fill_random(e, &c->cache)) ||
      !kc_buffer(e, &c->q, qbytes) || !kc_buffer(e, &c->out, qbytes) ||
      !kc_buffer(e, &c->tables, (size_t)nblocks * 4) || !kc_buffer(e, &c->lens, (size_t)batch * 4))
    return 0;
  if (dtype == KVB_DTYPE_FP32)
    fill32((float*)c->q.host.k, qbytes / 4, &e->seed);
  else
    fill16((uint16_t*)c->q.host.k, qbytes / 2, &e->seed);
  random_tables((int32_t*)c->tables.host.k, nblocks, &e->seed);
  for (i = 0; i < batch; i++) ((int32_t*)c->lens.host.k)[i] = (int32_t)ctx;
  kvb_attention_args_init(&c->a);
  c->a.num_seqs = batch;
  c->a.num_q_heads = HQ;
  c->a.max_blocks_per_seq = maxb;
  if ((st = kvb_paged_attention_workspace_size(&c->cache.dev, &c->a, &c->a.workspace_size)) != KVB_OK) {
    lib_error("kvb_paged_attention_workspace_size", st);
    return 0;
  }
  if (c->a.workspace_size && !kc_buffer(e, &c->ws, c->a.workspace_size)) return 0;
  if (!kc_upload(e, &c->q) || !kc_upload(e, &c->tables) || !kc_upload(e, &c->lens)) return 0;
  c->a.q = c->q.dev.k;
  c->a.out = c->out.dev.k;
  c->a.block_tables = (const int32_t*)c->tables.dev.k;
  c->a.seq_lens = (const int32_t*)c->lens.dev.k;
  c->a.workspace = c->a.workspace_size ? c->ws.dev.k : NULL;
  return 1;
}

static int bench_attention(kenv* e) {
  /* (batch, context, fp32?), ended by {0, 0}. GPU: one sequence (latency), then the throughput shapes of
     the PERFORMANCE.md goal ((64, 8192) and (16, 32768): long contexts, split-K); CPU: the goal's shapes
     (fp16 and fp32 at 4096 tokens) and smaller, against the streaming-read ceiling (attention reads K
     and V once, with every thread). */
  static const uint32_t gpu[][3] = {{1, 4096, 0}, {32, 4096, 0}, {128, 2048, 0}, {64, 8192, 0}, {16, 32768, 0}, {0, 0, 0}};
  static const uint32_t gpu_quick[][3] = {{8, 1024, 0}, {32, 512, 0}, {0, 0, 0}};
  static const uint32_t cpu[][3] = {{1, 4096, 0}, {8, 4096, 0}, {32, 1024, 0}, {8, 4096, 1}, {0, 0, 0}};
  static const uint32_t cpu_quick[][3] = {{4, 256, 0}, {8, 256, 0}, {4, 256, 1}, {0, 0, 0}};
  const uint32_t(*shapes)[3] = e->cuda ? (e->quick ? gpu_quick : gpu) : (e->quick ? cpu_quick : cpu);
  int s, ok = 1;
  for (s = 0; shapes[s][0] && ok; s++) {
    attn_ctx c;
    char key[48], label[64];
    uint32_t batch = shapes[s][0], ctx = shapes[s][1], fp32 = shapes[s][2];
    snprintf(key, sizeof key, "attention_%s%ux%u", fp32 ? "fp32_" : "", batch, ctx);
    if (fp32)
      snprintf(label, sizeof label, "paged_attention fp32 %u seqs x %u", batch, ctx);
    else
      snprintf(label, sizeof label, "paged_attention %u seqs x %u tokens", batch, ctx);
    ok = attn_setup(e, &c, fp32 ? KVB_DTYPE_FP32 : KVB_DTYPE_FP16, batch, ctx) &&
         bench_one(e, call_attention, &c, key, label, (double)batch * ctx * HKV * HD * (fp32 ? 4 : 2) * 2,
                   e->cuda ? CEIL_COPY : CEIL_READ, 0);
    attn_free(&c);
  }
  return ok;
}

/* ---------------------------------------------------------------------------------------------- */
/* write_kv                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef struct write_ctx {
  kcache cache, key, value, slots;
  kvb_write_kv_args a;
} write_ctx;

static int call_write(void* p) {
  write_ctx* c = (write_ctx*)p;
  kvb_status st = kvb_write_kv(&c->cache.dev, &c->a, NULL);
  if (st != KVB_OK) lib_error("kvb_write_kv", st);
  return st == KVB_OK;
}

/* T new tokens scattered to random distinct slots of a cache of 2T slots. */
static int bench_write_kv(kenv* e) {
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
  kc_free(&c.cache);
  kc_free(&c.key);
  kc_free(&c.value);
  kc_free(&c.slots);
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
  if (st != KVB_OK) lib_error(c->dir ? "kvb_swap_blocks" : "kvb_copy_blocks", st);
  return st == KVB_OK;
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

static int bench_blocks(kenv* e) {
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

/* ---------------------------------------------------------------------------------------------- */
/* Sections                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* Why no CUDA device is usable, or NULL when one is. */
static const char* cuda_unusable(void) {
  int32_t n = 0;
  kvb_status st = kvb_cuda_device_count(&n);
  if (st == KVB_ERR_UNSUPPORTED) return "libkvblock was built without CUDA";
  if (st != KVB_OK) return "kvb_cuda_device_count failed";
  return n > 0 ? NULL : "no CUDA device or driver";
}

int kbench_device_ok(const char* device) {
  const char* why;
  if (strcmp(device, "cuda") || !(why = cuda_unusable())) return 1;
  tool_error("bench: --device cuda: no usable GPU (%s)", why);
  return 0;
}

static int run_section(const kbench_opts* o, report* r, int cuda) {
  kenv e;
  int ok;
  memset(&e, 0, sizeof e);
  e.cuda = cuda;
  e.quick = o->quick;
  e.reps = o->reps;
  e.inner = cuda ? 10 : 1;
  e.seed = 0x9E3779B97F4A7C15ull;
  e.r = r;
  if (r->json) {
    report_group_begin(r, cuda ? "cuda" : "cpu", cuda ? "cuda" : "cpu");
    report_u64(r, "reps", "reps", e.reps, NULL);
    report_u64(r, "calls_per_sample", "calls per sample", (uint64_t)e.inner, NULL);
  } else {
    fprintf(r->f,
            "kernels on the %s: fp16, Hq=%d Hkv=%d D=%d, block %d, random data; 1 warm-up, %llu samples of %d "
            "call%s\n  %-38s %10s %10s %10s %8s %8s  %s\n",
            cuda ? "GPU (legacy default stream, fenced)" : "CPU", HQ, HKV, HD, BS, (unsigned long long)e.reps,
            e.inner, e.inner > 1 ? "s" : "", "case", "median us", "min us", "max us", "spread", "GB/s", "of ceiling");
  }
  if (!r->json && e.quick) fputs("  (--quick: the working sets fit in the CPU caches; fractions above 100% are expected)\n", r->f);
  ok = fence_setup(&e) && (cuda ? ceiling_gpu(&e) : ceiling_cpu(&e)) && bench_attention(&e) && bench_prefill(&e) &&
       bench_write_kv(&e) && bench_blocks(&e);
  cache_free(&e.fence_dev);
  cache_free(&e.fence_host);
  if (r->json) report_group_end(r);
  return ok;
}

int bench_kernels(const kbench_opts* o, report* r) {
  const char* why = strcmp(o->device, "cpu") ? cuda_unusable() : NULL; /* cpu: leave the CUDA runtime alone */
  int want_cpu = strcmp(o->device, "cuda") != 0, ok = 1;
  int want_gpu = !strcmp(o->device, "cuda") || (!strcmp(o->device, "auto") && !why);
  if (r->json) report_group_begin(r, "kernels", "kernels");
  if (want_cpu) ok = run_section(o, r, 0);
  if (ok && want_gpu) ok = run_section(o, r, 1);
  if (!strcmp(o->device, "auto") && why) {
    if (r->json) report_str(r, "cuda_skipped", "GPU", why);
    else fprintf(r->f, "  GPU part skipped: %s\n", why);
  }
  if (r->json) report_group_end(r);
  return ok ? EXIT_OK : EXIT_FAIL;
}
