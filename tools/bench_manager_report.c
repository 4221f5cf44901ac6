/* bench_manager_report.c - the report of the manager cases of `kvblock bench`: the config, one row (or
   JSON group) per case with its ratios to the bare hash and to kvb_hash_tokens, and the design goals
   of PERFORMANCE.md. */
#include "bench_manager.h"

#include <string.h>

/* A ratio column: "-" where its baseline case did not run (--only), never a ratio to nothing. */
static void print_ratio(report* r, const bench_case* c, const bench_case* base) {
  if (base->n && base->median > 0) fprintf(r->f, " %7.2fx", c->median / base->median);
  else fprintf(r->f, " %8s", "-");
}

/* Whether a case with a design goal met it: 1 met, 0 missed, -1 not judged (no goal, its baseline did
   not run, or a --quick run, too short to judge). */
static int target_met(const bench_case* c, const bench_case* hash, int quick) {
  if (c->target <= 0 || !hash->n || hash->median <= 0 || quick) return -1;
  return c->median / hash->median <= c->target;
}

static void print_case(report* r, const bench_case* c, const bench_case* hash, const bench_case* libhash,
                       int quick) {
  const int met = target_met(c, hash, quick);
  if (r->json) {
    report_group_begin(r, c->key, c->label);
    report_str(r, "unit", "unit", c->unit);
    report_f64(r, "median", "median", c->median, 2, NULL);
    report_f64(r, "min", "min", c->min, 2, NULL);
    report_f64(r, "max", "max", c->max, 2, NULL);
    report_f64(r, "spread", "spread", c->spread, 4, NULL);
    if (c->per_call > 0) report_f64(r, "median_per_call", "per call", c->median * c->per_call, 1, NULL);
    if (c->vs_hash && hash->n && hash->median > 0)
      report_f64(r, "ratio_to_hash", "ratio", c->median / hash->median, 3, NULL);
    if (c->vs_hash && libhash->n && libhash->median > 0)
      report_f64(r, "ratio_to_kvb_hash_tokens", "ratio", c->median / libhash->median, 3, NULL);
    if (met >= 0) {
      report_f64(r, "target_ratio_to_hash", "target", c->target, 1, NULL);
      report_bool(r, "target_met", "target met", met);
    }
    report_group_end(r);
  } else if (c->vs_hash) {
    fprintf(r->f, "  %-32s %8.1f %8.1f %8.1f %7.1f%%", c->label, c->median, c->min, c->max, 100.0 * c->spread);
    print_ratio(r, c, hash);
    print_ratio(r, c, libhash);
    fprintf(r->f, "  %s", c->unit);
    /* The goal beside the ratio it judges, only where that ratio was measured. */
    if (c->target > 0 && hash->n && hash->median > 0)
      fprintf(r->f, "  target <= %.1fx: %s", c->target, met < 0 ? "not judged (--quick)" : met ? "met" : "missed");
    fputc('\n', r->f);
  } else {
    fprintf(r->f, "  %-32s %8.1f %8.1f %8.1f %7.1f%% %8s %8s  %s", c->label, c->median, c->min, c->max,
            100.0 * c->spread, "", "", c->unit);
    if (c->per_call > 0) fprintf(r->f, " (%.0f ns/call)", c->median * c->per_call);
    fputc('\n', r->f);
  }
}

static void print_config(report* r, const bench_opts* o) {
  report_group_begin(r, "config", "config");
  report_u64(r, "block_size", "block size", o->block_size, NULL);
  report_u64(r, "prompt_tokens", "prompt tokens", o->prompt_tokens, NULL);
  report_u64(r, "iters", "iters", o->iters, NULL);
  report_u64(r, "reps", "reps", o->reps, NULL);
  report_u64(r, "decode_seqs", "decode seqs", o->decode_seqs, NULL);
  report_u64(r, "decode_tokens", "decode tokens", o->decode_tokens, NULL);
  report_u64(r, "num_blocks", "num blocks", o->num_blocks, NULL);
  report_u64(r, "hash_bytes_per_block", "hash bytes", (uint64_t)o->block_size * 8 + 8, NULL);
  report_u64(r, "cow_fork_position", "cow position", cow_position(o), NULL);
  report_u64(r, "batch_seqs", "batch seqs", o->batch_seqs, NULL);
  report_u64(r, "batch_tokens", "batch tokens", o->batch_tokens, NULL);
  report_str(r, "device", "device", o->device);
  report_group_end(r);
}

/* The design goals of PERFORMANCE.md, as ratios to the bare hash so that they carry across machines.
   Printed with what each means; judged only on a full run (a --quick run is too short to judge). */
static void print_targets(report* r, const bench_opts* o, const bench_case* cases) {
  const bench_case *hash = &cases[C_HASH], *libhash = &cases[C_LIBHASH], *miss = &cases[C_MISS];
  const bench_case *hit = &cases[C_HIT], *dec = &cases[C_DECODE], *hh = &cases[C_HOSTHIT];
  double hhr = hh->median / hit->median, tr = cases[C_TREE].median / dec->median;
  double hr = hit->median / hash->median, mr = miss->median / hash->median;
  double hl = hit->median / libhash->median, ml = miss->median / libhash->median;
  int hit_ok = hr <= 3.0, miss_ok = mr <= 4.0, dec_ok = dec->median <= 100.0;
  if (r->json) {
    report_group_begin(r, "targets", "targets");
    report_bool(r, "hit_le_3x_hash", "hit", hit_ok);
    report_bool(r, "miss_le_4x_hash", "miss", miss_ok);
    report_bool(r, "decode_le_100ns", "decode", dec_ok);
    report_bool(r, "hit_le_3x_kvb_hash_tokens", "hit (lib hash)", hl <= 3.0);
    report_bool(r, "miss_le_4x_kvb_hash_tokens", "miss (lib hash)", ml <= 4.0);
    report_bool(r, "hosthit_le_1_5x_hit", "host hit", hhr <= 1.5);
    report_bool(r, "tree_node_le_2x_decode", "tree", tr <= 2.0);
    report_group_end(r);
  } else {
    const char* met = o->quick ? "not judged" : NULL;
    fprintf(r->f,
            "  design goals (PERFORMANCE.md; the manager's cost as a multiple of hashing the block, which any\n"
            "  prefix cache must do, so the ratios carry across machines):\n"
            "    hit:    a prompt block found in the cache costs <= 3x its hash     %5.2fx  %s\n"
            "    miss:   a new prompt block (hash, index, evict) costs <= 4x        %5.2fx  %s\n"
            "    decode: one generated token (append + commit) costs <= 100 ns   %6.1f ns  %s\n"
            "    (against kvb_hash_tokens instead of the bare hash: hit %.2fx, miss %.2fx)\n",
            hr, met ? met : hit_ok ? "met" : "missed", mr, met ? met : miss_ok ? "met" : "missed", dec->median,
            met ? met : dec_ok ? "met" : "missed", hl, ml);
    fprintf(r->f, "    host hit: a block loaded from the host level costs <= 1.5x a hit    %5.2fx  %s\n", hhr,
            met ? met : hhr <= 1.5 ? "met" : "missed");
    fprintf(r->f, "    tree:   a draft-tree node (append + commit) costs <= 2x a decode token %5.2fx  %s\n", tr,
            met ? met : tr <= 2.0 ? "met" : "missed");
    if (o->quick) fputs("    (--quick: too few, too short repetitions to judge the goals; run kvblock bench)\n", r->f);
  }
}

void bench_print_manager(report* r, const bench_opts* o, const bench_case* cases) {
  int k;
  if (o->json) print_config(r, o);
  else if (!(o->only && !strcmp(o->only, "kernels")))
    fprintf(r->f,
            "kvblock bench: block size %u, prompt %llu tokens, %llu prompts x %llu repetitions (after a warm-up), "
            "decode %llu seqs x %llu tokens, batch export %llu seqs x %llu tokens\n"
            "  %-32s %8s %8s %8s %8s %8s %8s\n",
            o->block_size, (unsigned long long)o->prompt_tokens, (unsigned long long)o->iters,
            (unsigned long long)o->reps, (unsigned long long)o->decode_seqs, (unsigned long long)o->decode_tokens,
            (unsigned long long)o->batch_seqs, (unsigned long long)o->batch_tokens, "case", "median", "min", "max",
            "spread", "vs hash", "vs lib");
  for (k = 0; k < NUM_CASES; k++)
    if (cases[k].n) print_case(r, &cases[k], &cases[C_HASH], &cases[C_LIBHASH], o->quick);
  if (!o->json && o->only && !cases[C_HASH].n)
    for (k = 0; k < NUM_CASES; k++)
      if (cases[k].n && cases[k].vs_hash) {
        fputs("  (vs hash / vs lib: - where the baseline case did not run (--only); kvblock bench runs all)\n", r->f);
        break;
      }
  if (!o->json && !o->only && cow_position(o) == 0) fputs("  cow: not run (block size 1: no block is shared in part)\n", r->f);
  if (!o->only) print_targets(r, o, cases);
}
