/* The score loop of CPU decode (one kv head, 4 query heads, head_dim 128, 512 tokens in L2), timed
   five ways, with each way's largest score error against float64 (docs/perf/kernels_cpu.md, "fp16 and
   fp8 caches on AVX512-BF16 / AVX512-FP16"). Not part of the build:
     gcc -O2 -o /tmp/cpu_dot docs/perf/cpu_dot_driver.c -lm && /tmp/cpu_dot
   fp16 K, fp16 q (pre-scaled, as the kernel's q rows):
     fma     the kernel's way: vcvtph2ps, fp32 FMAs
     split   K and q split into bf16 high (truncated) + low parts, q_hi.k_hi + q_hi.k_lo + q_lo.k_hi by
             vdpbf16ps (the low x low product, 2^-16 of the terms, dropped)
     ph      AVX512-FP16 vfmadd231ph: fp16 products and fp16 sums along the row, then fp32
   e4m3 K (no NaN codes), bf16 q:
     fma8    the kernel's fp8 way: codes -> fp16 bits -> vcvtph2ps, fp32 FMAs
     dp8     the same fp32 values packed to bf16 (exact) by vcvtne2ps2bf16, vdpbf16ps */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define D 128
#define G 4
#define T 512
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static uint16_t K[T * D], qhi[G * D], qlo[G * D], qb[G * D];
static uint8_t K8[T * D];
static float qf[G * D], qf8[G * D], out[5][G * T];
/* GCC's half type (an extension in ISO C: __extension__ keeps -Wpedantic quiet). */
__extension__ typedef _Float16 half_t;
static half_t qh[G * D];
static double ref16[G * T], ref8[G * T];

/* Scores of every token into o[h * T + t]: fp32 accumulators acc[h], the code after STEP run for each STEP
   elements of head_dim (column c of token t). */
#define SCORE_LOOP(STEP, ...)                                                         \
  for (int t = 0; t < T; t++) {                                                       \
    __m512 acc[G];                                                                    \
    for (int h = 0; h < G; h++) acc[h] = _mm512_setzero_ps();                         \
    for (int c = 0; c < D; c += STEP) { __VA_ARGS__ }                                 \
    for (int h = 0; h < G; h++) o[h * T + t] = _mm512_reduce_add_ps(acc[h]);          \
  }

__attribute__((target("avx512f,f16c,fma"), noinline)) static void fma_path(float* o) {
  SCORE_LOOP(16, {
    __m512 k = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(K + t * D + c)));
    for (int h = 0; h < G; h++) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(qf + h * D + c), k, acc[h]);
  })
}
__attribute__((target("avx512f,avx512bw,avx512bf16,f16c"), noinline)) static void split_path(float* o) {
  const __m512i m = _mm512_set1_epi32((int)0xffff0000u);
  SCORE_LOOP(32, {
    __m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(K + t * D + c)));
    __m512 k1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(K + t * D + c + 16)));
    __m512 h0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(k0), m));
    __m512 h1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(k1), m));
    __m512bh khi = _mm512_cvtne2ps_pbh(h1, h0);                                        /* exact */
    __m512bh klo = _mm512_cvtne2ps_pbh(_mm512_sub_ps(k1, h1), _mm512_sub_ps(k0, h0));  /* exact: 3 bits */
    for (int h = 0; h < G; h++) {
      __m512bh a, b;
      memcpy(&a, qhi + h * D + c, 64);
      memcpy(&b, qlo + h * D + c, 64);
      acc[h] = _mm512_dpbf16_ps(acc[h], khi, a);
      acc[h] = _mm512_dpbf16_ps(acc[h], klo, a);
      acc[h] = _mm512_dpbf16_ps(acc[h], khi, b);
    }
  })
}
__attribute__((target("avx512f,avx512fp16,avx512bw,avx512vl"), noinline)) static void ph_path(float* o) {
  for (int t = 0; t < T; t++) {
    __m512h acc[G];
    for (int h = 0; h < G; h++) acc[h] = _mm512_setzero_ph();
    for (int c = 0; c < D; c += 32) {
      __m512h k;
      memcpy(&k, K + t * D + c, 64);
      for (int h = 0; h < G; h++) {
        __m512h q;
        memcpy(&q, qh + h * D + c, 64);
        acc[h] = _mm512_fmadd_ph(q, k, acc[h]);
      }
    }
    for (int h = 0; h < G; h++) {
      __m512 lo = _mm512_cvtxph_ps(_mm512_castph512_ph256(acc[h]));
      __m512 hi = _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_extracti64x4_epi64(_mm512_castph_si512(acc[h]), 1)));
      o[h * T + t] = _mm512_reduce_add_ps(_mm512_add_ps(lo, hi));
    }
  }
}
/* 16 e4m3 codes (no NaN) -> fp32 of their value times 2^-8, as the kernel's load_e4m3_x256_finite */
__attribute__((target("avx512f,avx2,f16c,fma"))) static inline __m512 ld8(const uint8_t* p) {
  __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)p));
  return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16((short)0xbfff)));
}
__attribute__((target("avx512f,avx2,f16c,fma"), noinline)) static void fma8_path(float* o) {
  SCORE_LOOP(16, {
    __m512 k = ld8(K8 + t * D + c);
    for (int h = 0; h < G; h++) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(qf8 + h * D + c), k, acc[h]);
  })
}
__attribute__((target("avx512f,avx512bw,avx512bf16,avx2,f16c,fma"), noinline)) static void dp8_path(float* o) {
  SCORE_LOOP(32, {
    __m512bh k = _mm512_cvtne2ps_pbh(ld8(K8 + t * D + c + 16), ld8(K8 + t * D + c));
    for (int h = 0; h < G; h++) {
      __m512bh q;
      memcpy(&q, qb + h * D + c, 64);
      acc[h] = _mm512_dpbf16_ps(acc[h], k, q);
    }
  })
}
static uint16_t trunc_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
static float bf16_f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static float e4m3_x256(uint8_t b) { /* the kernel's value: the code's value times 2^-8 */
  int e = (b >> 3) & 15, m = b & 7;
  float v = e ? ldexpf(1.f + m / 8.f, e - 7) : ldexpf(m / 8.f, -6);
  return ldexpf(b & 0x80 ? -v : v, -8);
}
static double urand(void) { return rand() / (double)RAND_MAX * 2 - 1; }

int main(void) {
  srand(1);
  for (int i = 0; i < T * D; i++) {
    half_t x = (half_t)(urand() * 2);
    memcpy(&K[i], &x, 2);
    uint8_t b = (uint8_t)(rand() & 0xff);
    if ((b & 0x7f) == 0x7f) b ^= 1;
    K8[i] = b;
  }
  for (int i = 0; i < G * D; i++) {
    half_t x = (half_t)(urand() * 2 * 0.0884 * 1.4427);  /* q pre-scaled by scale * log2(e) */
    qh[i] = x;
    qf[i] = (float)x;
    qhi[i] = trunc_bf16(qf[i]);
    qlo[i] = trunc_bf16(qf[i] - bf16_f(qhi[i]));
    qb[i] = trunc_bf16((float)urand());
    qf8[i] = bf16_f(qb[i]);
  }
  for (int h = 0; h < G; h++)
    for (int t = 0; t < T; t++) {
      double s = 0, s8 = 0;
      for (int d = 0; d < D; d++) {
        half_t k;
        memcpy(&k, &K[t * D + d], 2);
        s += (double)qf[h * D + d] * (double)(float)k;
        s8 += (double)qf8[h * D + d] * (double)e4m3_x256(K8[t * D + d]);
      }
      ref16[h * T + t] = s;
      ref8[h * T + t] = s8;
    }
  void (*f[5])(float*) = {fma_path, split_path, ph_path, fma8_path, dp8_path};
  const char* name[5] = {"fp16 K: vcvtph2ps + FMA (the kernel)", "fp16 K: bf16 split, 3 vdpbf16ps",
                         "fp16 K: AVX512-FP16 vfmadd231ph", "e4m3 K: fp32 FMA (the kernel)",
                         "e4m3 K, bf16 q: vdpbf16ps"};
  double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
  for (int r = 0; r < 200; r++)
    for (int i = 0; i < 5; i++) {
      double t = now();
      for (int k = 0; k < 20; k++) f[i](out[i]);
      t = now() - t;
      if (t < best[i]) best[i] = t;
    }
  for (int i = 0; i < 5; i++) {
    const double* ref = i < 3 ? ref16 : ref8;
    double e = 0, mag = 0;
    for (int j = 0; j < G * T; j++) {
      e = fmax(e, fabs(out[i][j] - ref[j]));
      mag = fmax(mag, fabs(ref[j]));
    }
    printf("%-38s %7.2f ns per token (4 heads x 128)  max |score - float64| %.3g (max |score| %.3g)\n", name[i],
           best[i] / 20 / T * 1e9, e, mag);
  }
  return 0;
}
