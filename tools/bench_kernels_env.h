/* bench_kernels_env.h - what the kernel benchmark files share (internal to the tool): one device's run
   (timing, fence, ceilings), caches and buffers on that device, and the timing loop (all defined in
   bench_kernels_env.c); then the ceilings and the case groups, one file each, that bench_kernels.c
   runs in order. */
#ifndef KVBLOCK_TOOL_BENCH_KERNELS_ENV_H
#define KVBLOCK_TOOL_BENCH_KERNELS_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "kvblock.h"
#include "report.h"

#define KMAX_REPS 1000
#define KMAX_LAYERS 8
#define HQ 32
#define HKV 8
#define HD 128
#define BS 16
#define BUF_BLOCK 512                               /* bytes per block of a raw buffer */
#define KV_BLOCK_BYTES ((size_t)BS * HKV * HD * 2)  /* one block of K (or of V), fp16 */
#define FENCE_TIMEOUT_S 60.0

enum { CEIL_COPY, CEIL_D2H, CEIL_H2D, CEIL_READ, NUM_CEILS }; /* CEIL_READ: CPU streaming read */

typedef struct kcache kcache;

/* One device's run: its timing and fence, and the ceilings measured so far (GB/s). */
typedef struct kenv {
  int cuda;
  int quick;
  uint64_t reps;
  int inner;           /* calls per timed sample (GPU: spreads the fence) */
  uint64_t seed;
  kvb_cache_desc fence_dev, fence_host;
  double ceil[NUM_CEILS]; /* 0: not measured (GPU copy: why in copy_why) */
  const char* ceil_name[NUM_CEILS];
  char read_name[24]; /* CEIL_READ's name, with its thread count */
  double tc_tflops;       /* GPU tensor-core ceiling (fp16 GEMM), 0 when n/a: why in tc_why */
  char tc_name[32];
  char copy_why[192], tc_why[192];
  report* r;
} kenv;

/* A cache (or a raw buffer) on the run's device; on the GPU with a separate page-locked host staging
   cache that fills it (host block i % host.num_blocks -> device block i). On the CPU host == dev. */
struct kcache {
  kvb_cache_desc dev, host;
  int staged;
};

/* A timed kernel call: 1 on success, 0 on a failure (message printed). */
typedef int (*kcall)(void* ctx);

typedef struct kresult {
  char key[48], label[64];
  double bytes;  /* counted per call */
  int ceil;      /* CEIL_* it is compared with */
  double samples[KMAX_REPS];
  size_t n;
  double med, min, max;
} kresult;

/* Random fp16 values of magnitude 1/8..1 (no zeros, denormals, infinities or NaNs). */
void fill16(uint16_t* p, size_t n, uint64_t* state);
uint64_t next_rand(uint64_t* state);
/* Bytes of one of d's K or V arrays (fp16). */
size_t desc_bytes(const kvb_cache_desc* d);
/* A bare fp16 cache from kvb_cache_alloc on the GPU (cuda) or the host; 0 on a failure (message printed). */
int cache_alloc(kvb_cache_desc* d, int cuda, uint32_t nblocks, uint32_t bs, uint32_t heads, uint32_t hd);
void cache_free(kvb_cache_desc* d);
/* A cache of the shape on e's device, with host_blocks blocks of staging on the GPU. */
int kc_alloc(const kenv* e, kcache* c, uint32_t nblocks, uint32_t bs, uint32_t heads, uint32_t hd, uint32_t host_blocks);
void kc_free(kcache* c);
/* kc_free on each buffer of a NULL-terminated list. */
void kc_free_all(kcache* first, ...);
/* A raw buffer of at least bytes bytes: c->host.k on the host side, c->dev.k on the device. */
int kc_buffer(const kenv* e, kcache* c, size_t bytes);
/* Waits until every GPU call issued so far has finished; 1 on the CPU. */
int fence(kenv* e);
/* The fence's device and host blocks (GPU); 1 on the CPU. */
int fence_setup(kenv* e);
/* Copies the staging cache into the device cache (GPU) and waits for it; nothing on the CPU. */
int kc_upload(kenv* e, kcache* c);
/* Random K and V on the host side, then uploaded. */
int kc_fill_random(kenv* e, kcache* c);
/* One warm-up call, then e->reps samples of e->inner calls each (fenced); seconds per call in res. */
int time_calls(kenv* e, kcall fn, void* ctx, kresult* res);
/* A result's times: as JSON its group opened with median, min and max (the caller adds its figures and closes
   the group), as text its label and the three times in microseconds (the caller adds its figures and the
   newline). */
void report_times(report* r, const kresult* res);
/* Times fn and prints it (bytes per call, against ceiling ceil); a ceiling result (is_ceiling) also sets
   e->ceil[ceil]. */
int bench_one(kenv* e, kcall fn, void* ctx, const char* key, const char* label, double bytes, int ceil,
              int is_ceiling);
/* Points a decode or prefill call (kvb_attention_args or kvb_prefill_args `a`) at the device side of its
   buffers: queries, output, block tables, sequence lengths and, when it has a size, the workspace. */
#define KC_POINT_CALL(a, qbuf, outbuf, tabbuf, lenbuf, wsbuf)       \
  do {                                                             \
    (a).q = (qbuf).dev.k;                                          \
    (a).out = (outbuf).dev.k;                                      \
    (a).block_tables = (const int32_t*)(tabbuf).dev.k;             \
    (a).seq_lens = (const int32_t*)(lenbuf).dev.k;                 \
    (a).workspace = (a).workspace_size ? (wsbuf).dev.k : NULL;     \
  } while (0)

/* CPU: the line (JSON: the string `key`) that opens a section of attention rows, naming the kernels' code
   path (kvb_cpu_isa) and whether AMX-BF16 tiles are on; nothing on the GPU. */
void print_cpu_path(kenv* e, const char* section, const char* key);
/* A random permutation of 0..n-1. */
void random_tables(int32_t* t, uint32_t n, uint64_t* seed);

/* bench_ceilings.c: the copy and read ceilings of the CPU, the copy and transfer ceilings of the GPU. */
int ceiling_cpu(kenv* e);
int ceiling_gpu(kenv* e);
/* bench_gpu_peaks.c: the GPU's D2D copy (CEIL_COPY) and fp16 GEMM ceilings through the CUDA Toolkit's
   libraries (dlopen); each left 0 with the reason when they cannot be loaded or fail. */
void gpu_peaks(kenv* e);
/* bench_attention.c: kvb_paged_attention (decode) cases in GB/s. */
int bench_attention(kenv* e);
/* bench_cascade.c: kvb_paged_attention without and with prefix groups, interleaved (CPU). */
int bench_cascade(kenv* e);
/* bench_cpu_peaks.c: a CPU compute ceiling in GFLOP/s, measured on one thread per online CPU (0: not
   measured, why says why). */
typedef struct cpu_peak {
  double gflops;
  int threads;
  char name[32], why[128];
} cpu_peak;
/* The fp32 multiply-add peak with the vector instructions of the path isa (kvb_cpu_isa()). */
void cpu_fma_peak(const char* isa, int quick, cpu_peak* p);
/* The AMX-BF16 tile-product peak where isa ends in "+amx" and Linux grants the tile data. */
void cpu_amx_peak(const char* isa, int quick, cpu_peak* p);
/* bench_prefill.c: kvb_prefill_attention cases in TFLOP/s (CPU: and of the measured peaks of its path). */
int bench_prefill(kenv* e);
/* A prefill batch: prompts of new_tokens over cached tokens, then decodes rows over decode_ctx. */
typedef struct pshape {
  const char* key;
  uint32_t prompts, new_tokens, cached, decodes, decode_ctx;
} pshape;
typedef struct prefill_ctx {
  kcache cache, q, out, qs, lens, tables, ws;
  kvb_prefill_args a;
  double flops;
} prefill_ctx;
/* The batch of s on e's device in dtype (random data and block tables), ready for call_prefill. */
int prefill_setup(kenv* e, prefill_ctx* c, const pshape* s, uint32_t dtype);
int call_prefill(void* ctx);
void prefill_free(prefill_ctx* c);
/* bench_tree.c: tree-masked extend against the plain extend of the same tokens; kvb_copy_slots in GB/s. */
int bench_tree(kenv* e);
/* bench_write_copy_swap.c: kvb_write_kv, then kvb_copy_blocks and kvb_swap_blocks. */
int bench_write_kv(kenv* e);
int bench_blocks(kenv* e);

#endif
