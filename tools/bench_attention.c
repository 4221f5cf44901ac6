/* bench_attention.c - the decode-attention cases of `kvblock bench`: kvb_paged_attention over random
   block tables, every sequence at the full context, in GB/s of the K+V bytes read (fp16; also fp8 e4m3
   with fp16 queries, and on the CPU fp32: the same shape as an fp16 row, so tokens/s compare), against
   the copy ceiling on the GPU and the streaming-read ceiling on the CPU. */
#include <string.h>

#include "bench_kernels_env.h"
#include "util.h"

typedef struct attn_ctx {
  kcache cache, q, out, tables, lens, ws;
  kvb_attention_args a;
} attn_ctx;

static int call_attention(void* p) {
  attn_ctx* c = (attn_ctx*)p;
  return lib_ok("kvb_paged_attention", kvb_paged_attention(&c->cache.dev, &c->a, NULL));
}

static void attn_free(attn_ctx* c) {
  kc_free_all(&c->cache, &c->q, &c->out, &c->tables, &c->lens, &c->ws, (kcache*)NULL);
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

/* Random bf16 values of magnitude 1/8..1, as fill16's. */
static void fill_bf16(uint16_t* p, size_t n, uint64_t* state) {
  size_t i;
  for (i = 0; i < n; i++) {
    uint64_t x = next_rand(state);
    p[i] = (uint16_t)((x & 0x8000u) | ((124u + (x >> 16) % 3u) << 7) | ((x >> 32) & 0x7fu));
  }
}

/* A bf16 cache: the fp16 allocation relabelled (same element size), filled with random bf16 values. */
static int kc_alloc_bf16(kenv* e, kcache* c, uint32_t nblocks) {
  if (!kc_alloc(e, c, nblocks, BS, HKV, HD, 2048)) return 0;
  c->dev.dtype = c->host.dtype = KVB_DTYPE_BF16;
  fill_bf16((uint16_t*)c->host.k, desc_bytes(&c->host) / 2, &e->seed);
  fill_bf16((uint16_t*)c->host.v, desc_bytes(&c->host) / 2, &e->seed);
  return kc_upload(e, c);
}

/* An fp8 e4m3 cache: the fp16 allocation relabelled (strides are in elements, so the bytes used are the
   first half), filled with e4m3 codes of magnitude 1/8..1.875 (no NaN codes) on the host side, then
   uploaded (a GPU cache: its blocks move as fp8 bytes); scales 1. */
static int kc_alloc_fp8(kenv* e, kcache* c, uint32_t nblocks) {
  size_t i, n;
  if (!kc_alloc(e, c, nblocks, BS, HKV, HD, 2048)) return 0;
  c->dev.dtype = c->host.dtype = KVB_DTYPE_FP8_E4M3;
  n = (size_t)c->host.num_blocks * (size_t)c->host.block_stride;
  for (i = 0; i < n; i++) {
    uint64_t x = next_rand(&e->seed);
    ((unsigned char*)c->host.k)[i] = (unsigned char)((x & 0x80u) | ((4u + (x >> 8) % 4u) << 3) | ((x >> 16) & 7u));
    ((unsigned char*)c->host.v)[i] = (unsigned char)(((x >> 24) & 0x80u) | ((4u + (x >> 32) % 4u) << 3) | ((x >> 40) & 7u));
  }
  return kc_upload(e, c);
}

/* The same allocation (same bytes, same blocks) seen head-major (HND): each kv head's block_size x
   head_dim rows contiguous, heads one after the other within a block. The data is random either way. */
static void relabel_hnd(kvb_cache_desc* d) {
  d->head_stride = (int64_t)d->block_size * d->head_dim;
  d->token_stride = d->head_dim;
}

static int attn_setup(kenv* e, attn_ctx* c, uint32_t dtype, uint32_t batch, uint32_t ctx, int hnd) {
  uint32_t i, maxb = ctx / BS, nblocks = batch * maxb;
  size_t es = dtype == KVB_DTYPE_FP32 ? 4 : 2, qbytes = (size_t)batch * HQ * HD * es;
  kvb_status st;
  memset(c, 0, sizeof *c);
  if (!(dtype == KVB_DTYPE_FP32         ? kc_alloc_fp32(e, &c->cache, nblocks)
        : dtype == KVB_DTYPE_FP8_E4M3 ? kc_alloc_fp8(e, &c->cache, nblocks)
        : dtype == KVB_DTYPE_BF16     ? kc_alloc_bf16(e, &c->cache, nblocks)
                                        : kc_alloc(e, &c->cache, nblocks, BS, HKV, HD, 2048) && kc_fill_random(e, &c->cache)) ||
      !kc_buffer(e, &c->q, qbytes) || !kc_buffer(e, &c->out, qbytes) ||
      !kc_buffer(e, &c->tables, (size_t)nblocks * 4) || !kc_buffer(e, &c->lens, (size_t)batch * 4))
    return 0;
  if (dtype == KVB_DTYPE_FP32)
    fill32((float*)c->q.host.k, qbytes / 4, &e->seed);
  else if (dtype == KVB_DTYPE_BF16)
    fill_bf16((uint16_t*)c->q.host.k, qbytes / 2, &e->seed);
  else
    fill16((uint16_t*)c->q.host.k, qbytes / 2, &e->seed);
  if (hnd) {
    relabel_hnd(&c->cache.dev);
    relabel_hnd(&c->cache.host);
  }
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
  KC_POINT_CALL(c->a, c->q, c->out, c->tables, c->lens, c->ws);
  return 1;
}

int bench_attention(kenv* e) {
  /* (batch, context, cache dtype: 0 fp16, 1 fp32, 2 fp8 e4m3 with fp16 queries, 3 bf16, HND?), ended by
     {0, 0}.
     GPU: one sequence (latency), then the throughput shapes of the PERFORMANCE.md goal ((64, 8192) and
     (16, 32768): long contexts, split-K), (64, 8192) on fp8 too (the goal: <= 0.55x the fp16 time); CPU: the goal's shapes (fp16, fp8 and fp32 at 4096 tokens) and
     smaller, against the streaming-read ceiling (attention reads K and V once, with every thread), the
     fp16 and fp32 goal shapes also on a head-major (HND) cache of the same bytes: a head's rows of a block
     contiguous instead of head_dim slices num_kv_heads x head_dim apart (NHD); bf16 at the goal shape
     (its own code on CPUs with AVX512-BF16). */
  static const uint32_t gpu[][4] = {{1, 4096, 0, 0}, {32, 4096, 0, 0}, {128, 2048, 0, 0}, {64, 8192, 0, 0},
                                    {64, 8192, 2, 0}, {16, 32768, 0, 0}, {0, 0, 0, 0}};
  static const uint32_t gpu_quick[][4] = {{8, 1024, 0, 0}, {8, 1024, 2, 0}, {32, 512, 0, 0}, {0, 0, 0, 0}};
  static const uint32_t cpu[][4] = {{1, 4096, 0, 0}, {8, 4096, 0, 0}, {8, 4096, 0, 1}, {8, 4096, 3, 0},
                                    {8, 4096, 3, 1}, {8, 4096, 2, 0}, {32, 1024, 0, 0}, {8, 4096, 1, 0},
                                    {8, 4096, 1, 1}, {0, 0, 0, 0}};
  static const uint32_t cpu_quick[][4] = {{4, 256, 0, 0}, {8, 256, 0, 0}, {8, 256, 0, 1}, {8, 256, 3, 0},
                                          {8, 256, 2, 0}, {4, 256, 1, 0}, {4, 256, 1, 1}, {0, 0, 0, 0}};
  static const char* const prefix[] = {"", "fp32_", "fp8_", "bf16_"};
  static const char* const name[] = {"", "fp32 ", "fp8_e4m3 ", "bf16 "};
  static const uint32_t dtypes[] = {KVB_DTYPE_FP16, KVB_DTYPE_FP32, KVB_DTYPE_FP8_E4M3, KVB_DTYPE_BF16};
  static const double elem_bytes[] = {2, 4, 1, 2};
  const uint32_t(*shapes)[4] = e->cuda ? (e->quick ? gpu_quick : gpu) : (e->quick ? cpu_quick : cpu);
  int s, ok = 1;
  print_cpu_path(e, "decode attention", "decode_cpu_path");
  for (s = 0; shapes[s][0] && ok; s++) {
    attn_ctx c;
    char key[48], label[64];
    uint32_t batch = shapes[s][0], ctx = shapes[s][1], dt = shapes[s][2], hnd = shapes[s][3];
    snprintf(key, sizeof key, "attention_%s%ux%u%s", prefix[dt], batch, ctx, hnd ? "_hnd" : "");
    if (dt)
      snprintf(label, sizeof label, "paged_attention %s%u seqs x %u%s", name[dt], batch, ctx, hnd ? " HND" : "");
    else
      snprintf(label, sizeof label, "paged_attention %u seqs x %u tokens%s", batch, ctx, hnd ? " HND" : "");
    ok = attn_setup(e, &c, dtypes[dt], batch, ctx, (int)hnd) &&
         bench_one(e, call_attention, &c, key, label, (double)batch * ctx * HKV * HD * elem_bytes[dt] * 2,
                   e->cuda ? CEIL_COPY : CEIL_READ, 0);
    attn_free(&c);
  }
  return ok;
}
