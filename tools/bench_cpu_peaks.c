/* bench_cpu_peaks.c - the CPU compute ceilings of `kvblock bench`'s prefill rows, measured in the same
   run on every online CPU at once: an fp32 multiply-add peak with the vector instructions of the path
   the kernels run (KVB_CPU_ISA / kvb_cpu_isa: AVX-512 FMA, AVX2 FMA, or the portable 8-wide multiply
   then add), and where AMX tiles serve (kvb_cpu_isa ends in "+amx") an AMX-BF16 tile-product peak.

   FMA: twelve independent chains per thread (enough to cover the FMA latency on two ports), each chain
   a named register (an array would live in memory at -O2 and time store forwarding instead); the same
   chain code for every vector width (one macro). AMX: TDPBF16PS into four 16 x 16 fp32 accumulator
   tiles from two 16 x 32 bf16 tiles and two 16 x (16 pairs) tiles, each product 16 x 16 x 32
   multiply-adds; needs the Linux tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM) and a tile
   configuration (LDTILECFG) per thread. */
#define _DEFAULT_SOURCE 1 /* syscall() */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_kernels_env.h"
#include "util.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#endif
#if defined(HAVE_X86) && defined(__x86_64__) && defined(__linux__) && (defined(__clang__) || __GNUC__ >= 11)
#include <sys/syscall.h>
#define HAVE_AMX_BUILD 1
#endif

static volatile float g_peak_sink; /* the loops' results are used: they cannot be dropped */

/* ---------------------------------------------------------------------------------------------- */
/* fp32 multiply-add chains, one macro over the vector width                                       */
/* ---------------------------------------------------------------------------------------------- */

#define CHAINS 12
#define FOR_CHAINS(X, V) X(0, V) X(1, V) X(2, V) X(3, V) X(4, V) X(5, V) X(6, V) X(7, V) X(8, V) X(9, V) X(10, V) X(11, V)
#define CHAIN_DECL(k, V) V##_t a##k = V##_set1(1.0f + (float)(k));
#define CHAIN_STEP(k, V) a##k = V##_madd(a##k, x, y);
#define CHAIN_SUM(k, V) s = V##_add(s, a##k);

/* fn(iters): CHAINS chains of iters multiply-adds each on vectors of V (V##_t, V##_set1, V##_madd,
   V##_add, V##_first); returns a lane of their sum. */
#define DEFINE_CHAINS(fn, attr, V)                          \
  attr static float fn(uint64_t iters) {                    \
    const V##_t x = V##_set1(0.9999f), y = V##_set1(1e-4f); \
    V##_t s = V##_set1(0.0f);                               \
    uint64_t i;                                             \
    FOR_CHAINS(CHAIN_DECL, V)                               \
    for (i = 0; i < iters; i++) {                           \
      FOR_CHAINS(CHAIN_STEP, V)                             \
    }                                                       \
    FOR_CHAINS(CHAIN_SUM, V)                                \
    return V##_first(s);                                    \
  }

/* Portable: 8 lanes, a multiply then an add (2 flops per lane), as the kernels' portable build does. */
typedef float v8p_t __attribute__((vector_size(32)));
#define v8p_set1(f) ((v8p_t){(f), (f), (f), (f), (f), (f), (f), (f)})
#define v8p_madd(a, b, c) ((a) * (b) + (c))
#define v8p_add(a, b) ((a) + (b))
#define v8p_first(s) ((s)[0])
DEFINE_CHAINS(chains_portable, , v8p)

#ifdef HAVE_X86
typedef __m256 v8f_t;
#define v8f_set1 _mm256_set1_ps
#define v8f_madd _mm256_fmadd_ps
#define v8f_add _mm256_add_ps
#define v8f_first(s) _mm_cvtss_f32(_mm256_castps256_ps128(s))
DEFINE_CHAINS(chains_avx2, __attribute__((target("avx2,fma"))), v8f)

typedef __m512 v16f_t;
#define v16f_set1 _mm512_set1_ps
#define v16f_madd _mm512_fmadd_ps
#define v16f_add _mm512_add_ps
#define v16f_first(s) _mm_cvtss_f32(_mm512_castps512_ps128(s))
DEFINE_CHAINS(chains_avx512, __attribute__((target("avx512f"))), v16f)
#endif

/* ---------------------------------------------------------------------------------------------- */
/* AMX-BF16 tile products                                                                          */
/* ---------------------------------------------------------------------------------------------- */

#ifdef HAVE_AMX_BUILD
#define ARCH_REQ_XCOMP_PERM 0x1023 /* <asm/prctl.h> */
#define XFEATURE_XTILEDATA 18

/* The 64-byte operand of LDTILECFG (palette 1). */
typedef struct tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
} tile_config;

/* Tiles 0-3: C (16 x 16 fp32); 4, 5: A (16 rows x 32 bf16); 6, 7: B (16 rows of 16 bf16 pairs). Each
   iteration: 4 products of 16 x 16 x 32 multiply-adds, every accumulator once (their chains interleave). */
__attribute__((target("amx-tile,amx-bf16"))) static float amx_products(uint64_t iters) {
  tile_config cfg __attribute__((aligned(64)));
  uint16_t a[16 * 32] __attribute__((aligned(64)));
  float c[16 * 16] __attribute__((aligned(64)));
  uint64_t i;
  int t;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (t = 0; t < 8; t++) {
    cfg.rows[t] = 16;
    cfg.bytes_per_row[t] = 64;
  }
  for (t = 0; t < 16 * 32; t++) a[t] = (uint16_t)(0x3a80u + (t & 0x3f)); /* bf16 near 1/1024: sums stay small */
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, a, 64);
  _tile_loadd(7, a, 64);
  for (i = 0; i < iters; i++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}
#endif

/* ---------------------------------------------------------------------------------------------- */
/* Every online CPU at once                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef float (*peak_loop)(uint64_t iters);

typedef struct peak_job {
  peak_loop loop;
  uint64_t iters;
  float sink;
} peak_job;

static void* peak_thread(void* p) {
  peak_job* j = (peak_job*)p;
  j->sink = j->loop(j->iters);
  return NULL;
}

/* GFLOP/s of loop(iters) (flops_per_iter each) on one thread per online CPU; *threads: how many ran. */
static double run_everywhere(peak_loop loop, uint64_t iters, double flops_per_iter, int* threads) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  pthread_t th[256];
  peak_job jobs[256];
  int i, started = 0;
  double t0, secs;
  if (n < 1) n = 1;
  if (n > 256) n = 256;
  for (i = 0; i < n; i++) {
    jobs[i].loop = loop;
    jobs[i].iters = iters;
    jobs[i].sink = 0;
  }
  t0 = now_s();
  for (i = 1; i < n; i++)
    if (pthread_create(&th[i], NULL, peak_thread, &jobs[i]) == 0) started = i;
    else break;
  peak_thread(&jobs[0]);
  for (i = 1; i <= started; i++) pthread_join(th[i], NULL);
  secs = now_s() - t0;
  for (i = 0; i <= started; i++) g_peak_sink += jobs[i].sink;
  *threads = started + 1;
  return secs > 0 ? (double)(started + 1) * (double)iters * flops_per_iter / secs / 1e9 : 0.0;
}

/* The vector width of the path kvb_cpu_isa() names ("avx512bf16+amx" -> AVX-512). */
void cpu_fma_peak(const char* isa, int quick, cpu_peak* p) {
  peak_loop loop = chains_portable;
  int lanes = 8;
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "8-wide mul+add");
#ifdef HAVE_X86
  __builtin_cpu_init();
  if (!strncmp(isa, "avx512", 6) && __builtin_cpu_supports("avx512f")) {
    loop = chains_avx512;
    lanes = 16;
    snprintf(p->name, sizeof p->name, "AVX-512 FMA");
  } else if (!strncmp(isa, "avx2", 4) && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    loop = chains_avx2;
    snprintf(p->name, sizeof p->name, "AVX2 FMA");
  }
#endif
  p->gflops = run_everywhere(loop, quick ? 4000000 : 40000000, (double)CHAINS * lanes * 2, &p->threads);
}

void cpu_amx_peak(const char* isa, int quick, cpu_peak* p) {
  const char* plus = strchr(isa, '+');
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "AMX-BF16");
  if (!plus || strcmp(plus, "+amx") != 0) {
    snprintf(p->why, sizeof p->why, "the CPU path %s does not use AMX tiles", isa);
    return;
  }
#ifdef HAVE_AMX_BUILD
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
    snprintf(p->why, sizeof p->why, "Linux refused the AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM)");
    return;
  }
  p->gflops = run_everywhere(amx_products, quick ? 200000 : 2000000, 4.0 * 16 * 16 * 32 * 2, &p->threads);
#else
  snprintf(p->why, sizeof p->why, "this build of the tool has no AMX code (x86-64 Linux, GCC 11+ or Clang)");
#endif
}
