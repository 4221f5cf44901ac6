/* bench_ceilings.c - the ceilings the kernel cases of `kvblock bench` are compared with, measured in the
   same run. CPU: a memcpy of a large buffer, read + write (2 x bytes / time), and a streaming read of it
   by one thread per online CPU. GPU: a large device-to-device cudaMemcpy and an fp16 GEMM through the
   CUDA Toolkit (bench_gpu_peaks.c) for the on-device figures, and kvb_swap_blocks of 2 MiB blocks with
   KVB_SWAP_USE_MEMCPY between device and page-locked host memory, one direction at a time (bytes /
   time), for the swaps. */
#include <stdlib.h>
#include <string.h>

#include "bench_kernels_env.h"
#include "bench_read.h"
#include "util.h"

static volatile uint64_t g_ksink;

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
int ceiling_cpu(kenv* e) {
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
    snprintf(e->read_name, sizeof e->read_name, "%d-thread read", rc.threads);
    e->ceil_name[CEIL_READ] = e->read_name;
    ok = bench_one(e, call_read, &rc, "ceiling_read", label, (double)c.n, CEIL_READ, 1);
  }
  free(c.a);
  return ok;
}

typedef struct swap_ctx {
  kvb_cache_desc dev, host;
  int32_t* pairs; /* i -> i */
  uint32_t n;
  int to_host;
} swap_ctx;

static int call_swap(void* p) {
  swap_ctx* c = (swap_ctx*)p;
  kvb_status st = c->to_host ? kvb_swap_blocks(&c->dev, &c->host, 1, c->pairs, c->n, KVB_SWAP_USE_MEMCPY, NULL)
                             : kvb_swap_blocks(&c->host, &c->dev, 1, c->pairs, c->n, KVB_SWAP_USE_MEMCPY, NULL);
  return lib_ok("kvb_swap_blocks", st);
}

/* GPU: the D2D copy and tensor-core peaks (bench_gpu_peaks.c), then kvb_swap_blocks of n 2 MiB blocks
   (K and V: 1024 tokens x 8 heads x 128) to and from page-locked host blocks, one way. */
int ceiling_gpu(kenv* e) {
  swap_ctx c;
  uint32_t i;
  double moved;
  int ok;
  gpu_peaks(e);
  memset(&c, 0, sizeof c);
  c.n = e->quick ? 16 : 64;
  moved = (double)c.n * 2 * (2u << 20);
  c.pairs = (int32_t*)xmalloc(2 * (size_t)c.n * sizeof *c.pairs);
  for (i = 0; i < c.n; i++) c.pairs[2 * i] = c.pairs[2 * i + 1] = (int32_t)i;
  e->ceil_name[CEIL_D2H] = "D2H 2 MiB";
  e->ceil_name[CEIL_H2D] = "H2D 2 MiB";
  ok = cache_alloc(&c.dev, 1, c.n, 1024, HKV, HD) && cache_alloc(&c.host, 0, c.n, 1024, HKV, HD);
  if (ok) {
    memset(c.host.k, 1, desc_bytes(&c.host));
    memset(c.host.v, 1, desc_bytes(&c.host));
    ok = call_swap(&c) && fence(e); /* device blocks hold data */
  }
  c.to_host = 1;
  ok = ok && bench_one(e, call_swap, &c, "ceiling_d2h", "ceiling: swap D2H 2 MiB (memcpy)", moved, CEIL_D2H, 1);
  c.to_host = 0;
  ok = ok && bench_one(e, call_swap, &c, "ceiling_h2d", "ceiling: swap H2D 2 MiB (memcpy)", moved, CEIL_H2D, 1);
  cache_free(&c.dev);
  cache_free(&c.host);
  free(c.pairs);
  return ok;
}
