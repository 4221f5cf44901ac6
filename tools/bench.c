/* bench.c - `kvblock bench`: the manager cases (bench_manager.c, reported by bench_manager_report.c),
   then the kernels (bench_kernels.c); the manual and the options are in bench_options.c. */
#include "bench.h"

#include <string.h>

#include "bench_kernels.h"
#include "bench_manager.h"
#include "report.h"
#include "util.h"

static int run_kernels(const bench_opts* o, report* r) {
  kbench_opts ko;
  if (o->only && strcmp(o->only, "kernels")) return EXIT_OK;
  memset(&ko, 0, sizeof ko);
  ko.device = o->device;
  ko.reps = o->reps;
  ko.quick = o->quick;
  ko.rows = o->kernel_rows;
  return bench_kernels(&ko, r);
}

int bench_main(int argc, char** argv) {
  bench_opts o;
  bench_case cases[NUM_CASES];
  uint64_t decode_blocks;
  int rc;
  report r;
  memset(&o, 0, sizeof o);
  memset(cases, 0, sizeof cases);
  o.block_size = 16;
  o.prompt_tokens = 4096;
  o.iters = 200;
  o.reps = 9;
  o.decode_seqs = 64;
  o.decode_tokens = 1024;
  o.device = "cpu";
  if ((rc = bench_parse_args(argc, argv, &o)) >= 0) return rc;
  if (!bench_check_sizes(&o, &decode_blocks)) return EXIT_USAGE;
  /* An explicit --device cuda without a usable GPU fails before anything runs. */
  if ((!o.only || !strcmp(o.only, "kernels")) && !kbench_device_ok(o.device)) return EXIT_FAIL;
  if (!bench_run_manager(&o, decode_blocks, cases)) return EXIT_FAIL;
  report_begin(&r, stdout, o.json, NULL);
  bench_print_manager(&r, &o, cases);
  fflush(stdout);
  rc = run_kernels(&o, &r);
  report_end(&r);
  return rc;
}
