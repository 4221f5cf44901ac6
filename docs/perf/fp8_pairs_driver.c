/* fp8 e4m3 decode on the CPU, one process: a bf16 q against an fp16 q, the two calls alternating (with
   the library of commit 1e26e41 on avx512bf16: vdpbf16ps against fp32 FMAs; since, FMAs for both),
   timed by the process CPU clock (all threads; less disturbed by other tenants than the wall clock) and
   the wall clock, minimum and median of N rounds.
   8 sequences x 4096 tokens (or L2-resident: 1 x 96 with KVB_DRIVER_SMALL=1), Hq 32, Hkv 8, D 128, block
   16, random block order, codes of magnitude 1/8..1.875. Not part of the build:
     cc -O2 -Iabi -o /tmp/fp8_pairs docs/perf/fp8_pairs_driver.c -Lbuild/lib -lkvblock -lm
     LD_LIBRARY_PATH=build/lib KVB_CPU_ISA=avx512bf16 /tmp/fp8_pairs 15 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvblock.h"

static double clk(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
static uint32_t rng = 12345;
static uint32_t next(void) { return rng = rng * 1664525u + 1013904223u; }

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 15, small = getenv("KVB_DRIVER_SMALL") != NULL;
  const uint32_t S = small ? 1 : 8, L = small ? 96 : 4096, HQ = 32, HKV = 8, D = 128, BS = 16, calls = small ? 30 : 1;
  const uint32_t maxb = L / BS, nblocks = S * maxb;
  kvb_cache_desc c;
  kvb_cache_desc_init(&c);
  c.dtype = KVB_DTYPE_FP8_E4M3;
  c.num_blocks = nblocks, c.block_size = BS, c.num_kv_heads = HKV, c.head_dim = D;
  if (kvb_cache_alloc(&c) != KVB_OK) return fprintf(stderr, "alloc: %s\n", kvb_last_error()), 1;
  const size_t bytes = (size_t)nblocks * BS * HKV * D;
  for (size_t i = 0; i < bytes; i++) {
    const uint32_t r = next() >> 8;
    ((uint8_t*)c.k)[i] = (uint8_t)((r & 0x80) | (0x30 + (r >> 8) % 0x20));  /* exponent 6..9: 1/8..1.875 */
    ((uint8_t*)c.v)[i] = (uint8_t)(((r >> 16) & 0x80) | (0x30 + (r >> 20) % 0x20));
  }
  int32_t* tables = malloc(sizeof(int32_t) * nblocks);
  int32_t* lens = malloc(sizeof(int32_t) * S);
  for (uint32_t i = 0; i < nblocks; i++) tables[i] = (int32_t)i;
  for (uint32_t i = nblocks - 1; i > 0; i--) {
    const uint32_t j = next() % (i + 1);
    int32_t t = tables[i];
    tables[i] = tables[j];
    tables[j] = t;
  }
  for (uint32_t s = 0; s < S; s++) lens[s] = (int32_t)L;
  uint16_t* q = malloc(2u * S * HQ * D);
  uint16_t* out = malloc(2u * S * HQ * D);
  for (uint32_t i = 0; i < S * HQ * D; i++) q[i] = (uint16_t)(0x3800 + next() % 0x400);  /* fp16 0.5..1; as bf16 ~2^-15 */
  kvb_attention_args a[2];
  void* ws[2];
  for (int k = 0; k < 2; k++) {
    kvb_attention_args_init(&a[k]);
    a[k].q_dtype = k ? KVB_DTYPE_BF16 : KVB_DTYPE_FP16;
    a[k].num_seqs = S;
    a[k].num_q_heads = HQ;
    a[k].max_blocks_per_seq = maxb;
    a[k].q = q;
    a[k].out = out;
    a[k].block_tables = tables;
    a[k].seq_lens = lens;
    if (kvb_paged_attention_workspace_size(&c, &a[k], &a[k].workspace_size) != KVB_OK) return 1;
    ws[k] = a[k].workspace_size ? malloc(a[k].workspace_size) : NULL;
    a[k].workspace = ws[k];
  }
  double cpu[2][1000], wall[2][1000];
  for (int r = -1; r < rounds && r < 1000; r++)
    for (int i = 0; i < 2; i++) {
      const int k = (r & 1) ? 1 - i : i;
      const double c0 = clk(CLOCK_PROCESS_CPUTIME_ID), w0 = clk(CLOCK_MONOTONIC);
      for (uint32_t n = 0; n < calls; n++)
        if (kvb_paged_attention(&c, &a[k], NULL) != KVB_OK) return fprintf(stderr, "%s\n", kvb_last_error()), 1;
      if (r >= 0) {
        cpu[k][r] = (clk(CLOCK_PROCESS_CPUTIME_ID) - c0) / calls * 1e3;
        wall[k][r] = (clk(CLOCK_MONOTONIC) - w0) / calls * 1e3;
      }
    }
  printf("path %s, %u x %u e4m3, %d rounds: ms per call, CPU time min / median, wall min / median\n", kvb_cpu_isa(), S,
         L, rounds);
  for (int k = 0; k < 2; k++) {
    qsort(cpu[k], (size_t)rounds, sizeof(double), cmp);
    qsort(wall[k], (size_t)rounds, sizeof(double), cmp);
    printf("  q %s: CPU %.3f / %.3f   wall %.3f / %.3f\n", k ? "bf16" : "fp16", cpu[k][0], cpu[k][rounds / 2],
           wall[k][0], wall[k][rounds / 2]);
  }
  return 0;
}
