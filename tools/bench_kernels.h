/* bench_kernels.h - the kernel section of `kvblock bench`: paged attention, write_kv, copy_blocks and
   swap_blocks on the CPU and (--device cuda / auto) the GPU, in GB/s and as a fraction of copy ceilings
   measured in the same run. */
#ifndef KVBLOCK_TOOL_BENCH_KERNELS_H
#define KVBLOCK_TOOL_BENCH_KERNELS_H

#include <stdint.h>

#include "report.h"

typedef struct kbench_opts {
  const char* device; /* "cpu", "auto" (CPU, then the GPU when one is usable) or "cuda" (GPU only) */
  uint64_t reps;      /* timed repetitions after one warm-up */
  int quick;          /* smaller shapes */
  const char* rows;   /* only these rows, after the ceilings: "cascade" (shared-prefix), "tree-kernels"
                         (token-tree), "attention" (decode) or "prefill"; NULL: every row */
} kbench_opts;

/* 0 (with a message) when device is "cuda" and no CUDA device is usable; else 1. */
int kbench_device_ok(const char* device);
/* Runs and reports the kernel section into r (human: a table after the manager's; JSON: "kernels").
   Returns the tool's exit status. */
int bench_kernels(const kbench_opts* o, report* r);

#endif
