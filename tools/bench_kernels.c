/* bench_kernels.c - the kernel section of `kvblock bench`: kvb_paged_attention, kvb_prefill_attention,
   kvb_write_kv, kvb_copy_blocks and kvb_swap_blocks on the CPU or the GPU, through the public C API
   only; one section per device, each case against a ceiling measured in the same run.

   Shapes: fp16, Hq=32, Hkv=8, D=128, block 16. Every buffer the kernels read holds random data (no
   zero-page reads). Bandwidth conventions (as PERFORMANCE.md): attention counts the K+V bytes it reads;
   write_kv the K/V input bytes read plus the cache bytes written; copy_blocks read + write of the block
   bytes; swap_blocks read + write on the CPU, the bytes once across PCIe on the GPU.

   The files: bench_kernels_env.c (caches, fence, timing), bench_ceilings.c, bench_attention.c, bench_cascade.c,
   bench_prefill.c, bench_write_copy_swap.c. */
#include "bench_kernels.h"
#include "bench_kernels_env.h"

#include <string.h>

#include "util.h"

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
    if (!cuda) report_str(r, "cpu_path", "CPU code path", kvb_cpu_isa());
  } else {
    fprintf(r->f,
            "kernels on the %s: fp16, Hq=%d Hkv=%d D=%d, block %d, random data; 1 warm-up, %llu samples of %d "
            "call%s\n  %-38s %10s %10s %10s %8s %8s  %s\n",
            cuda ? "GPU (legacy default stream, fenced)" : "CPU", HQ, HKV, HD, BS, (unsigned long long)e.reps,
            e.inner, e.inner > 1 ? "s" : "", "case", "median us", "min us", "max us", "spread", "GB/s", "of ceiling");
  }
  if (!r->json && !cuda)
    fprintf(r->f, "  CPU code path: %s (KVB_CPU_ISA=avx512bf16|avx512|avx2|baseline narrows it)\n", kvb_cpu_isa());
  if (!r->json && e.quick) fputs("  (--quick: the working sets fit in the CPU caches; fractions above 100% are expected)\n", r->f);
  ok = fence_setup(&e) && (cuda ? ceiling_gpu(&e) : ceiling_cpu(&e));
  if (o->rows && !strcmp(o->rows, "cascade")) ok = ok && bench_cascade(&e);
  else if (o->rows && !strcmp(o->rows, "tree-kernels")) ok = ok && bench_tree(&e);
  else if (o->rows && !strcmp(o->rows, "attention")) ok = ok && bench_attention(&e);
  else if (o->rows && !strcmp(o->rows, "prefill")) ok = ok && bench_prefill(&e);
  else ok = ok && bench_attention(&e) && bench_cascade(&e) && bench_prefill(&e) && bench_tree(&e) && bench_write_kv(&e) &&
                bench_blocks(&e);
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
