/* replay.c - `kvblock replay`: help, options, loading the trace, then the sequential (sequential.c)
   or the timed (timed.c) replay. */
#include "replay.h"

#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "replay_common.h"
#include "sequential.h"
#include "timed.h"
#include "util.h"

void replay_help(FILE* f) {
  fputs(
      "NAME\n"
      "    kvblock replay - replay a request trace through the KV-cache block manager\n"
      "\n"
      "SYNOPSIS\n"
      "    kvblock replay TRACE [--block-size N] [--num-blocks N] [--format auto|mooncake|tokens]\n"
      "                   [--host-cache --num-host-blocks N [--host-twin-percent N]\n"
      "                    [--kv-bytes-per-block N] [--store-blocks N [--store-exclusive]]]\n"
      "                   [--groups full,window:W[:SINKS],...] [--json] [--quiet] [--check]\n"
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
      "    newline that does not parse (a truncated file) is reported on stderr and ignored.\n"
      "\n"
      "    Requests the pool cannot hold do not stop the replay; they are counted in the report, the first 5\n"
      "    are listed on stderr and the rest summarised in one line (\"... and 41 more\"):\n"
      "      skipped              the prompt alone needs more blocks than the pool can give\n"
      "                           (kvb_seq_allocate fails with KVB_ERR_OUT_OF_BLOCKS); nothing is replayed\n"
      "      cut short in decode  the prompt fitted, but a generated token found no free block\n"
      "                           (kvb_seq_append: KVB_ERR_OUT_OF_BLOCKS) with the request alone in the pool:\n"
      "                           generation stops there, the tokens generated so far are counted, and\n"
      "                           the request is freed. A larger --num-blocks (or a smaller --block-size\n"
      "                           for short requests) avoids both.\n"
      "\n",
      f);
  fputs(
      "OPTIONS\n"
      "    --block-size N     tokens per KV block (default 16)\n"
      "    --num-blocks N     device blocks in the pool. Default: every block the trace could fill\n"
      "                       (sum over requests of ceil((prompt + output) / block size)), so nothing is\n"
      "                       ever evicted, capped at 4194304 (64M tokens at block size 16)\n"
      "    --format F         auto (default), mooncake or tokens\n"
      "    --mode M           sequential (default) or timed; the options under TIMED MODE are refused\n"
      "                       in sequential mode (it has no clock, scheduler, preemption or chart)\n"
      "    --json             print one JSON object instead of the human-readable report\n"
      "    --quiet            no progress line and no per-request notes on stderr\n"
      "    --progress         show the progress line even when stderr is not a terminal\n"
      "    --check            run kvb_check_invariants at the end (timed mode: after every step)\n"
      "    --host-cache       host blocks are a second prefix-cache level (KVB_CONFIG_HOST_CACHE): evicted\n"
      "                       device blocks are offloaded to --num-host-blocks host blocks and prefix hits\n"
      "                       may come from there (loaded back); both modes. The report splits hits by\n"
      "                       tier and gives the blocks and bytes moved each way (offloaded, loaded)\n"
      "    --num-host-blocks N  host blocks: the host cache, or the swap tier of --preempt swap\n"
      "                       (default: num-blocks). Sequential mode: with --host-cache only\n"
      "    --host-twin-percent N  host blocks (percent, default 1) that may keep copies of blocks\n"
      "                       loaded back to the device: 0 = exclusive (most hits), more = fewer moves\n"
      "    --kv-bytes-per-block N  KV bytes per block for the bytes moved (default 131072 * block size:\n"
      "                       a Llama-3-8B-like layout, 32 layers x K,V x 8 heads x 128 dims x fp16)\n"
      "    --store-blocks N   with --host-cache, sequential mode: a third level below the host cache, an\n"
      "                       in-memory model store of N blocks (keys only, least recently used dropped\n"
      "                       first) registered with kvb_manager_set_store: evicted host blocks are put\n"
      "                       there, prefix hits may come from there. The report adds store hit tokens,\n"
      "                       blocks put and got\n"
      "    --store-exclusive  a get takes the block out of the model store (one engine's what-if: no\n"
      "                       store copy of a block in use above); default: it stays (a shared store)\n"
      "    --groups G         KV cache groups of a hybrid model (both modes, with --host-cache and\n"
      "                       --preempt swap too): a comma-separated list of\n"
      "                       full and window:W[:SINKS] (W window tokens, SINKS attention-sink tokens), one\n"
      "                       block table per group over the one pool. The report adds the peak blocks\n"
      "                       each group held (sequential; timed reports the pool's peak). Default\n"
      "                       --num-blocks: one trace's worth per group.\n"
      "                       Compare a hybrid model with --groups full,window:W against the same pool\n"
      "                       served as if every layer were full: --groups full,full\n"
      "    -h, --help         this text\n"
      "\n",
      f);
  fputs(
      "OUTPUT (sequential)\n"
      "    requests in the trace, replayed, skipped and cut short (see above), prompt tokens, cached prompt\n"
      "    tokens (prefix-cache hits) and the hit ratio cached/prompt, generated tokens, evictions (cached\n"
      "    blocks reused for new data, from kvb_get_stats). Times: the trace load (reading and parsing the\n"
      "    file), elapsed (wall time of the replay loop), split into trace expansion (turning hash ids into\n"
      "    prompt token ids, the tool's work) and manager (the rest: the libkvblock calls). blocks/s,\n"
      "    tokens/s and ns/block use the manager time; blocks are block-table entries handled\n"
      "    (ceil((prompt + generated) / block size) per request). JSON keys: trace, format, mode,\n"
      "    block_size, num_blocks, trace_requests, requests (replayed), skipped_requests,\n"
      "    decode_cut_requests, prompt_tokens, cached_tokens, hit_ratio, generated_tokens, evictions, blocks,\n"
      "    load_s, elapsed_s, expand_s, manager_s, blocks_per_s, tokens_per_s, ns_per_block.\n"
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
      "    0.5 us: roughly an 8B model on one H100 (at most 40,000 prefill tokens/s). One such GPU holds\n"
      "    about 28,672 blocks of 16 tokens (128 KiB of KV per token, ~56 GiB after the weights). The\n"
      "    Mooncake synthetic trace asks for ~60,000 prompt tokens/s, more than one GPU prefills: run it at\n"
      "    --speed 0.5 (half its arrival rate) to model one busy GPU; at --speed 1 the queue grows all run\n"
      "    long and TTFT reaches minutes. When nothing runs the clock jumps to the next arrival.\n"
      "    Timed options:\n"
      "      --speed X              divide trace timestamps by X (default 1; 2 = twice the load)\n"
      "      --max-seqs N           running sequences at most (default 128)\n"
      "      --max-batch-tokens N   tokens per step, prefill chunks and decode tokens (default 8192)\n"
      "      --preempt P            recompute (default) or swap\n"
      "      --pcie-gbps F          with --host-cache: each step also takes (offloaded + loaded blocks) *\n"
      "                             kv-bytes-per-block / F GB/s of simulated time (default 25)\n"
      "      --watermark F          fraction of blocks kept free at admission (default 0.01)\n"
      "      --step-base-us, --step-prefill-us, --step-decode-us, --step-kv-us   the step-time model\n"
      "      --svg FILE             write a plain SVG chart: blocks in use, free blocks still holding a\n"
      "                             cached prefix, and the running hit ratio over simulated time, with\n"
      "                             the pool (blocks, block size); FILE's folder must exist\n"
      "                             (checked before the run); the report names the file written\n"
      "      --svg-points N         samples kept for the chart (default 2000)\n"
      "    It reports the requests in the trace, finished, skipped (never fit, even alone) and cut short\n"
      "    (could not finish decoding even alone in the pool), the hit ratio, simulated time and\n"
      "    tokens/s, preemptions, swaps, peak and mean blocks in use, TTFT percentiles (p50, p90, p99,\n"
      "    max) on the simulated clock, and the manager's time per request (wall time of the libkvblock\n"
      "    calls, trace expansion excluded).\n"
      "\n",
      f);
  fputs(
      "EXIT STATUS\n"
      "    0 done, 1 error (unreadable or malformed trace, library failure), 2 usage error.\n"
      "\n"
      "EXAMPLES\n"
      "    kvblock replay traces/sample_mooncake.jsonl\n"
      "    kvblock replay mooncake_synthetic_trace.jsonl --num-blocks 187500 --json\n"
      "    kvblock replay mooncake_synthetic_trace.jsonl --mode timed --num-blocks 28672 --speed 0.5 \\\n"
      "        --svg run.svg\n",
      f);
}

/* A two-way option's value: *out = 0 for `zero`, 1 for `one`; 0 for anything else. */
static int choice(const char* val, const char* zero, const char* one, int* out) {
  if (strcmp(val, zero) && strcmp(val, one)) return 0;
  *out = !strcmp(val, one);
  return 1;
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
  double t0, load_s;
  const char* timed_only = NULL; /* the first timed-mode option given, refused in sequential mode */
  int host_blocks_given = 0;       /* --num-host-blocks: timed mode, or sequential with --host-cache */
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
  o.pcie_gbps = 25.0;
  o.host_twin_percent = 1;
  for (i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* val = NULL;
    int got;
#define OPT(name) ((got = opt_value(argc, argv, &i, name, &val)) != 0)
/* An option of --mode timed: the first one given is remembered, to be refused in sequential mode. */
#define TIMED_OPT(name) (OPT(name) && (timed_only = timed_only ? timed_only : name) != NULL)
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
      if (!choice(val, "sequential", "timed", &o.timed)) return usage("--mode must be sequential or timed");
    } else if (TIMED_OPT("--speed")) {
      if (got < 0 || !parse_double("--speed", val, 1e-6, 1e9, &o.speed)) return EXIT_USAGE;
    } else if (TIMED_OPT("--max-seqs")) {
      if (got < 0 || !parse_u64("--max-seqs", val, 1, 1u << 20, &v)) return EXIT_USAGE;
      o.max_seqs = (uint32_t)v;
    } else if (TIMED_OPT("--max-batch-tokens")) {
      if (got < 0 || !parse_u64("--max-batch-tokens", val, 1, 1u << 30, &o.max_batch_tokens)) return EXIT_USAGE;
    } else if (TIMED_OPT("--preempt")) {
      if (got < 0) return EXIT_USAGE;
      if (!choice(val, "recompute", "swap", &o.preempt_swap)) return usage("--preempt must be recompute or swap");
    } else if (OPT("--groups")) {
      if (got < 0) return EXIT_USAGE;
      if (!replay_parse_groups(val, &o)) return EXIT_USAGE;
    } else if (!strcmp(a, "--host-cache")) {
      o.host_cache = 1;
    } else if (OPT("--store-blocks")) {
      if (got < 0 || !parse_u64(a, val, 1, 1u << 30, &o.store_blocks)) return EXIT_USAGE;
    } else if (!strcmp(a, "--store-exclusive")) {
      o.store_exclusive = 1;
    } else if (OPT("--host-twin-percent")) {
      if (got < 0 || !parse_u64(a, val, 0, 100, &o.host_twin_percent)) return EXIT_USAGE;
    } else if (OPT("--kv-bytes-per-block")) {
      if (got < 0 || !parse_u64(a, val, 1, UINT64_C(1) << 40, &o.kv_bytes_per_block)) return EXIT_USAGE;
    } else if (TIMED_OPT("--pcie-gbps")) {
      if (got < 0 || !parse_double(a, val, 1e-3, 1e6, &o.pcie_gbps)) return EXIT_USAGE;
    } else if (OPT("--num-host-blocks")) {
      host_blocks_given = 1;
      if (got < 0 || !parse_u64("--num-host-blocks", val, 0, 1u << 30, &o.num_host_blocks)) return EXIT_USAGE;
    } else if (TIMED_OPT("--watermark")) {
      if (got < 0 || !parse_double("--watermark", val, 0, 0.99, &o.watermark)) return EXIT_USAGE;
    } else if (TIMED_OPT("--step-base-us")) {
      if (got < 0 || !parse_double(a, val, 0, 1e9, &o.step_base_us)) return EXIT_USAGE;
    } else if (TIMED_OPT("--step-prefill-us")) {
      if (got < 0 || !parse_double(a, val, 0, 1e9, &o.step_prefill_us)) return EXIT_USAGE;
    } else if (TIMED_OPT("--step-decode-us")) {
      if (got < 0 || !parse_double(a, val, 0, 1e9, &o.step_decode_us)) return EXIT_USAGE;
    } else if (TIMED_OPT("--step-kv-us")) {
      if (got < 0 || !parse_double(a, val, 0, 1e9, &o.step_kv_us)) return EXIT_USAGE;
    } else if (TIMED_OPT("--svg")) {
      if (got < 0) return EXIT_USAGE;
      o.svg = val;
    } else if (TIMED_OPT("--svg-points")) {
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
#undef TIMED_OPT
#undef OPT
  }
  if (!o.path) return usage("no TRACE given");
  if (!o.timed && host_blocks_given && !o.host_cache)
    return usage("--num-host-blocks applies to --mode timed or to --host-cache");
  if (o.store_exclusive && !o.store_blocks) return usage("--store-exclusive needs --store-blocks");
  if (o.store_blocks && (!o.host_cache || o.timed || o.num_groups))
    return usage("--store-blocks needs --host-cache, in sequential mode, without --groups");
  if (o.host_cache && host_blocks_given && o.num_host_blocks == 0)
    return usage("--host-cache needs --num-host-blocks > 0");
  /* Llama-3-8B-like: 32 layers x (K, V) x 8 KV heads x 128 dims x 2 bytes = 128 KiB per token. */
  if (o.kv_bytes_per_block == 0) o.kv_bytes_per_block = (uint64_t)131072 * o.block_size;
  if (!o.timed && timed_only) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "%s applies only to --mode timed: the sequential replay runs one request at a time, with no "
             "clock, scheduler, preemption or chart",
             timed_only);
    return usage(msg);
  }
  /* Before the run, not after it: a long replay must not end in "cannot write". */
  if (o.svg && !chart_path_writable(o.svg)) return EXIT_FAIL;
  t0 = now_s();
  if (!trace_load(o.path, (trace_format)o.format, &t)) return EXIT_FAIL;
  load_s = now_s() - t0;
  num_blocks = o.num_blocks ? o.num_blocks : replay_default_blocks(&t, o.block_size);
  /* Every group holds its own blocks: the default pool is one trace's worth per group. */
  if (!o.num_blocks && o.num_groups > 1) {
    num_blocks *= o.num_groups;
    if (num_blocks > (1u << 30)) num_blocks = 1u << 30;
  }
  if (o.num_host_blocks == UINT64_MAX) o.num_host_blocks = num_blocks;
  rc = o.timed ? replay_timed(&o, &t, num_blocks, load_s) : replay_sequential(&o, &t, num_blocks, load_s);
  trace_free(&t);
  return rc;
}
