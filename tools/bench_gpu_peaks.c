/* bench_gpu_peaks.c - the GPU's own peaks for `kvblock bench --device cuda`, measured in the same run
   through the CUDA Toolkit's libraries, loaded with dlopen: the library never links them, and the tool
   stays a plain C consumer that runs (with these ceilings "n/a" and the reason printed) where they are
   absent.

   - Copy ceiling: one large device-to-device cudaMemcpy (1 GiB, 256 MiB with --quick), read + write
     counted. kvb_copy_blocks cannot be the ceiling: it is one of the kernels measured against it, and
     with a few large blocks it fills a fraction of the SMs (it printed 110 GB/s on an H100 whose
     D2D copy does 3,011 GB/s).
   - Tensor-core ceiling: a dense fp16 GEMM through cuBLAS (8192^3, 4096^3 with --quick; fp32
     accumulation, the precision of the attention kernels), random inputs, 2*m*n*k flops.

   Both are timed with CUDA events of the loaded runtime on its legacy default stream, median of a few
   runs after a warm-up. Library names: KVB_CUDART / KVB_CUBLAS (a path) if set, else libcudart.so.13
   and libcublas.so.13 (then .12, then unversioned) on the loader's path, then /usr/local/cuda/lib64. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "bench_kernels_env.h"
#include "util.h"

typedef int (*fn_malloc)(void**, size_t);
typedef int (*fn_free)(void*);
typedef int (*fn_memcpy)(void*, const void*, size_t, int);
typedef int (*fn_event_create)(void**);
typedef int (*fn_event_destroy)(void*);
typedef int (*fn_event_record)(void*, void*);
typedef int (*fn_event_sync)(void*);
typedef int (*fn_event_elapsed)(float*, void*, void*);
typedef const char* (*fn_error_string)(int);
typedef int (*fn_blas_create)(void**);
typedef int (*fn_blas_destroy)(void*);
typedef int (*fn_gemm_ex)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                          const void*, void*, int, int, int, int);

typedef struct cudart {
  void* so;
  fn_malloc malloc_;
  fn_free free_;
  fn_memcpy memcpy_;
  fn_event_create ev_create;
  fn_event_destroy ev_destroy;
  fn_event_record ev_record;
  fn_event_sync ev_sync;
  fn_event_elapsed ev_elapsed;
  fn_error_string err_str;
} cudart;

enum { MEMCPY_H2D = 1, MEMCPY_D2D = 3, R_16F = 2, COMPUTE_32F = 68, GEMM_DEFAULT = -1, OP_N = 0 };
#define PEAK_RUNS 5

/* dlopen of env's path, else of each name in turn; the names tried go to why on a failure. */
static void* open_first(const char* env, const char* const* names, int n, char* why, size_t whylen) {
  const char* path = getenv(env);
  void* so;
  int i;
  if (path && *path) {
    if ((so = dlopen(path, RTLD_NOW | RTLD_LOCAL))) return so;
    snprintf(why, whylen, "%s=%s: %s", env, path, dlerror());
    return NULL;
  }
  for (i = 0; i < n; i++)
    if ((so = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) return so;
  snprintf(why, whylen, "none of %s, ..., %s could be loaded (set %s to its path)", names[0], names[n - 1], env);
  return NULL;
}

/* dlsym into a function pointer (POSIX guarantees the sizes match; memcpy keeps ISO C quiet). */
static int sym(void* so, const char* name, void* fn_out) {
  void* p = dlsym(so, name);
  memcpy(fn_out, &p, sizeof p);
  return p != NULL;
}

static int load_cudart(cudart* rt, char* why, size_t whylen) {
  static const char* const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so",
                                      "/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so"};
  memset(rt, 0, sizeof *rt);
  if (!(rt->so = open_first("KVB_CUDART", names, 5, why, whylen))) return 0;
#define SYM(field, name)                                                        \
  if (!sym(rt->so, name, &rt->field)) {                                        \
    snprintf(why, whylen, "the CUDA runtime has no %s", name);                  \
    return 0;                                                                   \
  }
  SYM(malloc_, "cudaMalloc")
  SYM(free_, "cudaFree")
  SYM(memcpy_, "cudaMemcpy")
  SYM(ev_create, "cudaEventCreate")
  SYM(ev_destroy, "cudaEventDestroy")
  SYM(ev_record, "cudaEventRecord")
  SYM(ev_sync, "cudaEventSynchronize")
  SYM(ev_elapsed, "cudaEventElapsedTime")
  SYM(err_str, "cudaGetErrorString")
#undef SYM
  return 1;
}

/* A CUDA call's failure into why; 1 when err is 0. */
static int rt_ok(const cudart* rt, int err, const char* what, char* why, size_t whylen) {
  if (err == 0) return 1;
  snprintf(why, whylen, "%s failed: %s", what, rt->err_str(err));
  return 0;
}

/* One timed operation: 0 on success, else a status that op_fail describes. */
typedef int (*gpu_op)(void* ctx);

/* Did op succeed? If not, its status described in why. blas: a cuBLAS status, else a CUDA error. */
static int op_ok(const cudart* rt, int blas, int st, char* why, size_t whylen) {
  if (st == 0) return 1;
  if (blas) snprintf(why, whylen, "cublasGemmEx returned status %d", st);
  else snprintf(why, whylen, "cudaMemcpy D2D failed: %s", rt->err_str(st));
  return 0;
}

/* Median seconds of PEAK_RUNS runs of op (after one warm-up), CUDA events around each; 0 on a failure. */
static double time_op(const cudart* rt, gpu_op op, int blas, void* ctx, char* why, size_t whylen) {
  void *a = NULL, *b = NULL;
  double s[PEAK_RUNS], med = 0;
  int i, j, ok;
  ok = rt_ok(rt, rt->ev_create(&a), "cudaEventCreate", why, whylen) &&
       rt_ok(rt, rt->ev_create(&b), "cudaEventCreate", why, whylen);
  ok = ok && op_ok(rt, blas, op(ctx), why, whylen);
  for (i = 0; ok && i < PEAK_RUNS; i++) {
    float ms = 0;
    ok = rt_ok(rt, rt->ev_record(a, NULL), "cudaEventRecord", why, whylen) &&
         op_ok(rt, blas, op(ctx), why, whylen) &&
         rt_ok(rt, rt->ev_record(b, NULL), "cudaEventRecord", why, whylen) &&
         rt_ok(rt, rt->ev_sync(b), "cudaEventSynchronize", why, whylen) &&
         rt_ok(rt, rt->ev_elapsed(&ms, a, b), "cudaEventElapsedTime", why, whylen);
    s[i] = ms * 1e-3;
  }
  if (ok) {
    for (i = 1; i < PEAK_RUNS; i++) /* insertion sort of five */
      for (j = i; j > 0 && s[j] < s[j - 1]; j--) {
        double t = s[j];
        s[j] = s[j - 1], s[j - 1] = t;
      }
    med = s[PEAK_RUNS / 2];
  }
  if (a) rt->ev_destroy(a);
  if (b) rt->ev_destroy(b);
  return ok ? med : 0.0;
}

typedef struct copy_op {
  const cudart* rt;
  void *src, *dst;
  size_t n;
} copy_op;

static int run_copy(void* p) {
  copy_op* c = (copy_op*)p;
  return c->rt->memcpy_(c->dst, c->src, c->n, MEMCPY_D2D);
}

typedef struct gemm_op {
  fn_gemm_ex gemm;
  void* handle;
  void *a, *b, *c;
  int n;
} gemm_op;

static int run_gemm(void* p) {
  gemm_op* g = (gemm_op*)p;
  const float one = 1.0f, zero = 0.0f;
  return g->gemm(g->handle, OP_N, OP_N, g->n, g->n, g->n, &one, g->a, R_16F, g->n, g->b, R_16F, g->n, &zero, g->c,
                 R_16F, g->n, COMPUTE_32F, GEMM_DEFAULT);
}

/* Random fp16 data into a device buffer of n bytes (through a host buffer). */
static int upload_random(const cudart* rt, void* dst, size_t n, uint64_t* seed, char* why, size_t whylen) {
  uint16_t* h = (uint16_t*)xmalloc(n);
  int ok;
  fill16(h, n / 2, seed);
  ok = rt_ok(rt, rt->memcpy_(dst, h, n, MEMCPY_H2D), "cudaMemcpy H2D", why, whylen);
  free(h);
  return ok;
}

static void d2d_ceiling(kenv* e, const cudart* rt) {
  copy_op c;
  double secs;
  c.rt = rt;
  c.n = (size_t)(e->quick ? 256 : 1024) << 20;
  c.src = c.dst = NULL;
  if (rt_ok(rt, rt->malloc_(&c.src, c.n), "cudaMalloc", e->copy_why, sizeof e->copy_why) &&
      rt_ok(rt, rt->malloc_(&c.dst, c.n), "cudaMalloc", e->copy_why, sizeof e->copy_why) &&
      upload_random(rt, c.src, c.n, &e->seed, e->copy_why, sizeof e->copy_why) &&
      (secs = time_op(rt, run_copy, 0, &c, e->copy_why, sizeof e->copy_why)) > 0)
    e->ceil[CEIL_COPY] = 2.0 * (double)c.n / secs / 1e9;
  if (c.src) rt->free_(c.src);
  if (c.dst) rt->free_(c.dst);
}

static void gemm_ceiling(kenv* e, const cudart* rt) {
  static const char* const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so",
                                      "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so"};
  fn_blas_create create;
  fn_blas_destroy destroy;
  gemm_op g;
  size_t bytes;
  double secs;
  int st;
  void* so = open_first("KVB_CUBLAS", names, 5, e->tc_why, sizeof e->tc_why);
  if (!so) return;
  memset(&g, 0, sizeof g);
  g.n = e->quick ? 4096 : 8192;
  bytes = (size_t)g.n * g.n * 2;
  if (!sym(so, "cublasCreate_v2", &create) || !sym(so, "cublasDestroy_v2", &destroy) ||
      !sym(so, "cublasGemmEx", &g.gemm)) {
    snprintf(e->tc_why, sizeof e->tc_why, "cuBLAS lacks cublasCreate_v2, cublasDestroy_v2 or cublasGemmEx");
    return; /* the library stays loaded: unloading cuBLAS at exit races its own teardown */
  }
  if ((st = create(&g.handle)) != 0) {
    snprintf(e->tc_why, sizeof e->tc_why, "cublasCreate failed (cuBLAS status %d)", st);
    return;
  }
  if (rt_ok(rt, rt->malloc_(&g.a, bytes), "cudaMalloc", e->tc_why, sizeof e->tc_why) &&
      rt_ok(rt, rt->malloc_(&g.b, bytes), "cudaMalloc", e->tc_why, sizeof e->tc_why) &&
      rt_ok(rt, rt->malloc_(&g.c, bytes), "cudaMalloc", e->tc_why, sizeof e->tc_why) &&
      upload_random(rt, g.a, bytes, &e->seed, e->tc_why, sizeof e->tc_why) &&
      upload_random(rt, g.b, bytes, &e->seed, e->tc_why, sizeof e->tc_why) &&
      (secs = time_op(rt, run_gemm, 1, &g, e->tc_why, sizeof e->tc_why)) > 0) {
    e->tc_tflops = 2.0 * (double)g.n * g.n * g.n / secs / 1e12;
    snprintf(e->tc_name, sizeof e->tc_name, "fp16 GEMM %d^3", g.n);
  }
  if (g.a) rt->free_(g.a);
  if (g.b) rt->free_(g.b);
  if (g.c) rt->free_(g.c);
  destroy(g.handle);
}

/* Sets e->ceil[CEIL_COPY] (GB/s) and e->tc_tflops, or leaves them 0 with the reason in copy_why /
   tc_why; prints both. */
void gpu_peaks(kenv* e) {
  cudart rt;
  report* r = e->r;
  e->ceil[CEIL_COPY] = 0;
  e->tc_tflops = 0;
  e->ceil_name[CEIL_COPY] = "D2D cudaMemcpy";
  if (load_cudart(&rt, e->copy_why, sizeof e->copy_why)) {
    d2d_ceiling(e, &rt);
    gemm_ceiling(e, &rt);
  } else {
    snprintf(e->tc_why, sizeof e->tc_why, "%s", e->copy_why);
  }
  /* rt.so stays loaded: cuBLAS (if loaded) uses it until exit */
  if (r->json) {
    report_f64(r, "d2d_copy_gbps", "D2D copy GB/s (read + write)", e->ceil[CEIL_COPY], 2, NULL);
    if (e->ceil[CEIL_COPY] <= 0) report_str(r, "d2d_copy_na", "D2D copy n/a", e->copy_why);
    report_f64(r, "gemm_fp16_tflops", "fp16 GEMM TFLOP/s", e->tc_tflops, 2, NULL);
    if (e->tc_tflops <= 0) report_str(r, "gemm_fp16_na", "fp16 GEMM n/a", e->tc_why);
  } else {
    if (e->ceil[CEIL_COPY] > 0)
      fprintf(r->f, "  %-38s %.1f GB/s (read + write, %u MiB)\n", "ceiling: D2D cudaMemcpy", e->ceil[CEIL_COPY],
              e->quick ? 256u : 1024u);
    else
      fprintf(r->f, "  %-38s n/a: %s\n", "ceiling: D2D cudaMemcpy", e->copy_why);
    if (e->tc_tflops > 0)
      fprintf(r->f, "  %-38s %.1f TFLOP/s (cuBLAS, fp32 accumulation)\n", "ceiling: tensor cores", e->tc_tflops);
    else
      fprintf(r->f, "  %-38s n/a: %s\n", "ceiling: tensor cores", e->tc_why);
    fflush(r->f);
  }
}
