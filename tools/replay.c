/* replay.c - `kvblock replay`: options, the trace, the manager and the sequential mode. The timed
   (scheduler) mode lives in timed.c. */
#include "replay.h"

#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "report.h"
#include "util.h"

#define MAX_SKIPPED_SHOWN 5

void replay_help(FILE* f) {
  fputs(
      "NAME\n"
      "    kvblock replay - replay a request trace through the KV-cache block manager\n"
      "\n"
      "SYNOPSIS\n"
      "    kvblock replay TRACE [--block-size N] [--num-blocks N] [--format auto|mooncake|tokens]\n"
      "                   [--json] [--quiet] [--check]\n"
      "    kvblock replay TRACE --mode timed [--speed X] [--max-seqs N] [--max-batch-tokens N]\n"
      "                   [--preempt recompute|swap] [--num-host-blocks N] [--watermark F]\n"
      "                   [--step-base-us US] [--step-prefill-us US] [--step-decode-us US]\n"
      "                   [--step-kv-us US] [--svg FILE] [--svg-points N] [--json] [--quiet]\n"
      "\n"
      "DESCRIPTION\n"
      "    Reads TRACE (JSON Lines, one request per line; \"-\" = standard input) and drives libkvblock with\n"
      "    it. Two line formats are read, detected per line unless --format is given:\n"
      "      Mooncake   {\"timestamp\": ms, \"input_length\": n, \"output_length\": m, \"hash_ids\": [...]}\n"
      "      token ids  {\"timestamp\": ms, \"prompt\": [token, ...], \"output_length\": m}\n"
      "    Mooncake prompt token i is hash_ids[i/512]*512 + i%512; generated token k of the request on\n"
      "    line r (0-based) is 2^40 + r*2^20 + k, unique per request. Unknown keys are ignored.\n"
      "\n"
      "    Sequential mode (default): each request in file order is allocated (prefix-cache lookup), its\n"
      "    uncached prompt part committed, each generated token appended and committed, then freed.\n"
      "    This is the reference replay whose results the traces README lists.\n"
      "\n"
      "    Timed mode (--mode timed): requests arrive at their timestamps divided by --speed and go through\n"
      "    a continuous-batching scheduler model on a simulated clock; see TIMED MODE below.\n"
      "\n"
      "    A malformed line is an error naming the line and column (exit status 1). A last line without a\n"
      "    newline that does not parse (a truncated file) is reported on stderr and ignored. A request that\n"
      "    cannot fit in the pool (KVB_ERR_OUT_OF_BLOCKS) is counted as skipped, the first few are listed on\n"
      "    stderr, and the replay goes on.\n"
      "\n",
      f);
  fputs(
      "OPTIONS\n"
      "    --block-size N     tokens per KV block (default 16)\n"
      "    --num-blocks N     device blocks in the pool. Default: every block the trace could fill\n"
      "                       (sum over requests of ceil((prompt + output) / block size)), so nothing is\n"
      "                       ever evicted, capped at 4194304 (64M tokens at block size 16)\n"
      "    --format F         auto (default), mooncake or tokens\n"
      "    --mode M           sequential (default) or timed\n"
      "    --json             print one JSON object instead of the human-readable report\n"
      "    --quiet            no progress line and no per-request notes on stderr\n"
      "    --progress         show the progress line even when stderr is not a terminal\n"
      "    --check            run kvb_check_invariants at the end (timed mode: after every step)\n"
      "    -h, --help         this text\n"
      "\n",
      f);
  fputs(
      "OUTPUT (sequential)\n"
      "    requests replayed and skipped, prompt tokens, cached prompt tokens (prefix-cache hits) and the hit\n"
      "    ratio cached/prompt, generated tokens, evictions (cached blocks reused for new data, from\n"
      "    kvb_get_stats), elapsed wall time of the replay loop, and blocks/s: block-table entries handled\n"
      "    (ceil((prompt + generated) / block size) per request) per second. JSON keys: trace, format, mode,\n"
      "    block_size, num_blocks, requests, skipped_requests, decode_cut_requests, prompt_tokens,\n"
      "    cached_tokens, hit_ratio, generated_tokens, evictions, blocks, load_s, elapsed_s, blocks_per_s,\n"
      "    tokens_per_s, ns_per_block.\n"
      "\n",
      f);
  fputs(
      "TIMED MODE\n"
      "    Each step of the simulated engine: waiting requests that have arrived are admitted in arrival\n"
      "    order while fewer than --max-seqs run and blocks can be allocated (admission never preempts);\n"
      "    every running sequence still in prefill gets a chunk of its prompt (chunked prefill) and every\n"
      "    decoding sequence one token, within --max-batch-tokens tokens per step (decode tokens first).\n"
      "    When a decode token cannot get a block, the most recently admitted sequence is preempted:\n"
      "    recompute frees it and requeues it at the front of the waiting queue; swap moves its blocks to\n"
      "    the host tier (--num-host-blocks) and it comes back (kvb_seq_can_swap_in) before new admissions,\n"
      "    falling back to recompute when the host tier is full.\n"
      "    Step time (simulated) = step-base-us + step-prefill-us * prefill tokens + step-decode-us *\n"
      "    decode tokens + step-kv-us * KV blocks read by the step's sequences. Defaults 2000, 25, 60,\n"
      "    0.5 us: roughly an 8B model on one H100. When nothing runs the clock jumps to the next arrival.\n"
      "    Timed options:\n"
      "      --speed X              divide trace timestamps by X (default 1; 2 = twice the load)\n"
      "      --max-seqs N           running sequences at most (default 128)\n"
      "      --max-batch-tokens N   tokens per step, prefill chunks and decode tokens (default 8192)\n"
      "      --preempt P            recompute (default) or swap\n"
      "      --num-host-blocks N    host-tier blocks for --preempt swap (default: num-blocks)\n"
      "      --watermark F          fraction of blocks kept free at admission (default 0.01)\n"
      "      --step-base-us, --step-prefill-us, --step-decode-us, --step-kv-us   the step-time model\n"
      "      --svg FILE             write a plain SVG chart: blocks in use, cached-free blocks and the\n"
      "                             running hit ratio over simulated time\n"
      "      --svg-points N         samples kept for the chart (default 2000)\n"
      "    It reports the hit ratio, simulated time and tokens/s, preemptions, swaps, peak and mean blocks\n"
      "    in use, TTFT percentiles (p50, p90, p99, max) on the simulated clock, and the manager's CPU time\n"
      "    per request (wall time of the libkvblock calls).\n"
      "\n",
      f);
  fputs(
      "EXIT STATUS\n"
      "    0 done, 1 error (unreadable or malformed trace, library failure), 2 usage error.\n"
      "\n"
      "EXAMPLES\n"
      "    kvblock replay traces/sample_mooncake.jsonl\n"
      "    kvblock replay mooncake_synthetic_trace.jsonl --num-blocks 187500 --json\n"
      "    kvblock replay mooncake_synthetic_trace.jsonl --mode timed --num-blocks 65536 --svg run.svg\n",
      f);
}

uint64_t replay_default_blocks(const trace* t, uint32_t block_size) {
  uint64_t sum = 0, biggest = 0;
  size_t r;
  for (r = 0; r < t->num_reqs; r++) {
    uint64_t b = (t->reqs[r].input_length + t->reqs[r].output_length + block_size - 1) / block_size;
    sum += b;
    if (b > biggest) biggest = b;
  }
  if (sum > REPLAY_MAX_DEFAULT_BLOCKS) sum = REPLAY_MAX_DEFAULT_BLOCKS;
  if (sum < biggest) sum = biggest;
  if (sum > (1u << 30)) sum = 1u << 30;
  return sum ? sum : 1;
}

kvb_manager* replay_create_manager(const replay_opts* o, uint64_t num_blocks) {
  kvb_config cfg;
  kvb_manager* m = NULL;
  kvb_status s;
  kvb_config_init(&cfg);
  cfg.block_size = o->block_size;
  cfg.num_blocks = (uint32_t)num_blocks;
  if (o->timed) {
    cfg.num_host_blocks = o->preempt_swap ? (uint32_t)o->num_host_blocks : 0;
    cfg.watermark = (float)o->watermark;
  }
  s = kvb_manager_create(&cfg, &m);
  if (s != KVB_OK) {
    lib_error("kvb_manager_create", s);
    return NULL;
  }
  return m;
}

void replay_note_skipped(const replay_opts* o, const trace* t, size_t r, const char* why, uint64_t* shown) {
  const trace_request* q = &t->reqs[r];
  if (o->quiet) return;
  if (*shown < MAX_SKIPPED_SHOWN) {
    fprintf(stderr, "kvblock: %s:%llu: request of %llu prompt + %llu output tokens %s\n", o->path,
            (unsigned long long)q->line, (unsigned long long)q->input_length,
            (unsigned long long)q->output_length, why);
  } else if (*shown == MAX_SKIPPED_SHOWN) {
    fprintf(stderr, "kvblock: (further requests that do not fit are counted, not listed)\n");
  }
  ++*shown;
}

static int fail_call(const char* what, kvb_status s, const trace* t, size_t r) {
  char buf[96];
  snprintf(buf, sizeof buf, "%s (request on line %llu)", what, (unsigned long long)t->reqs[r].line);
  lib_error(buf, s);
  return EXIT_FAIL;
}

int replay_sequential(const replay_opts* o, const trace* t, uint64_t num_blocks, double load_s) {
  kvb_manager* m = replay_create_manager(o, num_blocks);
  int64_t* tokens;
  uint64_t prompt = 0, cached = 0, generated = 0, blocks = 0, skipped = 0, cut = 0, shown = 0, replayed = 0;
  uint64_t max_prompt = 0;
  size_t r;
  double t0, elapsed;
  kvb_stats st;
  kvb_status s;
  progress pr;
  report rep;
  char title[512];
  int rc = EXIT_OK;
  if (!m) return EXIT_FAIL;
  for (r = 0; r < t->num_reqs; r++)
    if (t->reqs[r].input_length > max_prompt) max_prompt = t->reqs[r].input_length;
  tokens = (int64_t*)xmalloc((size_t)(max_prompt ? max_prompt : 1) * sizeof *tokens);
  progress_init(&pr, "replay", t->num_reqs, o->quiet ? 0 : o->progress);
  t0 = now_s();
  for (r = 0; r < t->num_reqs; r++) {
    const trace_request* q = &t->reqs[r];
    int64_t id = (int64_t)r;
    size_t hit = 0;
    uint64_t k, n = q->input_length;
    trace_prompt_tokens(t, r, tokens);
    s = kvb_seq_allocate(m, id, tokens, (size_t)n, &hit);
    if (s == KVB_ERR_OUT_OF_BLOCKS) {
      skipped++;
      replay_note_skipped(o, t, r, "does not fit in the pool: skipped", &shown);
      continue;
    }
    if (s != KVB_OK) {
      rc = fail_call("kvb_seq_allocate", s, t, r);
      break;
    }
    replayed++;
    prompt += n;
    cached += hit;
    if (n > hit && (s = kvb_seq_commit(m, id, (size_t)(n - hit))) != KVB_OK) {
      rc = fail_call("kvb_seq_commit", s, t, r);
      break;
    }
    for (k = 0; k < q->output_length; k++) {
      int64_t tok = trace_output_token(t, r, k);
      s = kvb_seq_append(m, id, &tok, 1);
      if (s == KVB_ERR_OUT_OF_BLOCKS) {
        cut++;
        replay_note_skipped(o, t, r, "ran out of blocks while decoding: generation cut short", &shown);
        break;
      }
      if (s != KVB_OK || (s = kvb_seq_commit(m, id, 1)) != KVB_OK) {
        rc = fail_call(s == KVB_OK ? "kvb_seq_commit" : "kvb_seq_append", s, t, r);
        break;
      }
      generated++;
    }
    if (rc != EXIT_OK) break;
    blocks += (n + k + o->block_size - 1) / o->block_size;
    if ((s = kvb_seq_free(m, id)) != KVB_OK) {
      rc = fail_call("kvb_seq_free", s, t, r);
      break;
    }
    if ((r & 63) == 0) progress_update(&pr, r, NULL);
  }
  elapsed = now_s() - t0;
  progress_finish(&pr);
  free(tokens);
  if (rc == EXIT_OK && o->check && (s = kvb_check_invariants(m)) != KVB_OK) {
    lib_error("kvb_check_invariants", s);
    rc = EXIT_FAIL;
  }
  kvb_stats_init(&st);
  if (rc == EXIT_OK && (s = kvb_get_stats(m, &st)) != KVB_OK) {
    lib_error("kvb_get_stats", s);
    rc = EXIT_FAIL;
  }
  kvb_manager_destroy(m);
  if (rc != EXIT_OK) return rc;
  if (st.hit_tokens != cached)
    tool_error("warning: kvb_get_stats reports %llu hit tokens, the replay counted %llu",
               (unsigned long long)st.hit_tokens, (unsigned long long)cached);

  snprintf(title, sizeof title, "kvblock replay: %s", o->path);
  report_begin(&rep, stdout, o->json, title);
  report_str(&rep, "trace", "trace", o->path);
  report_str(&rep, "format", "format",
             t->mixed_formats ? "mixed" : t->num_reqs ? trace_format_name(t->reqs[0].format) : "none");
  report_str(&rep, "mode", "mode", "sequential");
  report_u64(&rep, "block_size", "block size", o->block_size, "tokens");
  report_u64(&rep, "num_blocks", "blocks", num_blocks, o->num_blocks ? NULL : "(default)");
  report_u64(&rep, "requests", "requests", replayed, NULL);
  report_u64(&rep, "skipped_requests", "skipped (out of blocks)", skipped, NULL);
  report_u64(&rep, "decode_cut_requests", "cut short in decode", cut, NULL);
  report_u64(&rep, "prompt_tokens", "prompt tokens", prompt, NULL);
  report_u64(&rep, "cached_tokens", "cached prompt tokens", cached, NULL);
  report_ratio(&rep, "hit_ratio", "hit ratio", prompt ? (double)cached / (double)prompt : 0.0);
  report_u64(&rep, "generated_tokens", "generated tokens", generated, NULL);
  report_u64(&rep, "evictions", "evictions", st.evictions, "blocks");
  report_u64(&rep, "blocks", "blocks handled", blocks, NULL);
  report_f64(&rep, "load_s", "trace load", load_s, 3, "s");
  report_f64(&rep, "elapsed_s", "elapsed", elapsed, 3, "s");
  report_f64(&rep, "blocks_per_s", "blocks/s", elapsed > 0 ? (double)blocks / elapsed : 0.0, 0, NULL);
  report_f64(&rep, "tokens_per_s", "tokens/s", elapsed > 0 ? (double)(prompt + generated) / elapsed : 0.0, 0,
             NULL);
  report_f64(&rep, "ns_per_block", "ns/block", blocks ? elapsed * 1e9 / (double)blocks : 0.0, 1, NULL);
  report_end(&rep);
  return EXIT_OK;
}

static int usage(const char* msg) {
  if (msg) tool_error("replay: %s", msg);
  fputs("usage: kvblock replay TRACE [options]   (kvblock replay --help for the options)\n", stderr);
  return EXIT_USAGE;
}

int replay_main(int argc, char** argv) {
  replay_opts o;
  trace t;
  int i, rc;
  uint64_t v, num_blocks;
  double d, t0, load_s;
  memset(&o, 0, sizeof o);
  o.block_size = 16;
  o.progress = -1;
  o.speed = 1.0;
  o.max_seqs = 128;
  o.max_batch_tokens = 8192;
  o.watermark = 0.01;
  o.step_base_us = 2000;
  o.step_prefill_us = 25;
  o.step_decode_us = 60;
  o.step_kv_us = 0.5;
  o.svg_points = 2000;
  o.num_host_blocks = UINT64_MAX; /* = num_blocks unless given */
  for (i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* val = NULL;
    int got;
#define OPT(name) ((got = opt_value(argc, argv, &i, name, &val)) != 0)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      replay_help(stdout);
      return EXIT_OK;
    } else if (!strcmp(a, "--json")) {
      o.json = 1;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      o.quiet = 1;
    } else if (!strcmp(a, "--progress")) {
      o.progress = 2;
    } else if (!strcmp(a, "--check")) {
      o.check = 1;
    } else if (OPT("--block-size")) {
      if (got < 0 || !parse_u64(a, val, 1, 65536, &v)) return EXIT_USAGE;
      o.block_size = (uint32_t)v;
    } else if (OPT("--num-blocks")) {
      if (got < 0 || !parse_u64("--num-blocks", val, 1, 1u << 30, &o.num_blocks)) return EXIT_USAGE;
    } else if (OPT("--format")) {
      if (got < 0) return EXIT_USAGE;
      if ((o.format = trace_format_parse(val)) < 0) return usage("--format must be auto, mooncake or tokens");
    } else if (OPT("--mode")) {
      if (got < 0) return EXIT_USAGE;
      if (!strcmp(val, "timed")) o.timed = 1;
      else if (!strcmp(val, "sequential")) o.timed = 0;
      else return usage("--mode must be sequential or timed");
    } else if (OPT("--speed")) {
      if (got < 0 || !parse_double("--speed", val, 1e-6, 1e9, &o.speed)) return EXIT_USAGE;
    } else if (OPT("--max-seqs")) {
      if (got < 0 || !parse_u64("--max-seqs", val, 1, 1u << 20, &v)) return EXIT_USAGE;
      o.max_seqs = (uint32_t)v;
    } else if (OPT("--max-batch-tokens")) {
      if (got < 0 || !parse_u64("--max-batch-tokens", val, 1, 1u << 30, &o.max_batch_tokens)) return EXIT_USAGE;
    } else if (OPT("--preempt")) {
      if (got < 0) return EXIT_USAGE;
      if (!strcmp(val, "swap")) o.preempt_swap = 1;
      else if (!strcmp(val, "recompute")) o.preempt_swap = 0;
      else return usage("--preempt must be recompute or swap");
    } else if (OPT("--num-host-blocks")) {
      if (got < 0 || !parse_u64("--num-host-blocks", val, 0, 1u << 30, &o.num_host_blocks)) return EXIT_USAGE;
    } else if (OPT("--watermark")) {
      if (got < 0 || !parse_double("--watermark", val, 0, 0.99, &o.watermark)) return EXIT_USAGE;
    } else if (OPT("--step-base-us")) {
      if (got < 0 || !parse_double(a, val, 0, 1e9, &o.step_base_us)) return EXIT_USAGE;
    } else if (OPT("--step-prefill-us")) {
      if (got < 0 || !parse_double(a, val, 0, 1e9, &o.step_prefill_us)) return EXIT_USAGE;
    } else if (OPT("--step-decode-us")) {
      if (got < 0 || !parse_double(a, val, 0, 1e9, &o.step_decode_us)) return EXIT_USAGE;
    } else if (OPT("--step-kv-us")) {
      if (got < 0 || !parse_double(a, val, 0, 1e9, &o.step_kv_us)) return EXIT_USAGE;
    } else if (OPT("--svg")) {
      if (got < 0) return EXIT_USAGE;
      o.svg = val;
    } else if (OPT("--svg-points")) {
      if (got < 0 || !parse_u64("--svg-points", val, 2, 1000000, &o.svg_points)) return EXIT_USAGE;
    } else if (a[0] == '-' && a[1] != '\0') {
      char msg[128];
      snprintf(msg, sizeof msg, "unknown option '%.80s'", a);
      return usage(msg);
    } else if (!o.path) {
      o.path = a;
    } else {
      return usage("more than one TRACE given");
    }
#undef OPT
  }
  (void)d;
  if (!o.path) return usage("no TRACE given");
  if (!o.timed && (o.svg || o.preempt_swap))
    return usage("--svg and --preempt need --mode timed");
  t0 = now_s();
  if (!trace_load(o.path, (trace_format)o.format, &t)) return EXIT_FAIL;
  load_s = now_s() - t0;
  num_blocks = o.num_blocks ? o.num_blocks : replay_default_blocks(&t, o.block_size);
  if (o.num_host_blocks == UINT64_MAX) o.num_host_blocks = num_blocks;
  rc = o.timed ? replay_timed(&o, &t, num_blocks, load_s) : replay_sequential(&o, &t, num_blocks, load_s);
  trace_free(&t);
  return rc;
}
