/* bench_options.c - the manual of `kvblock bench` (--help) and its option parsing and size checks. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_manager.h"
#include "util.h"

void bench_help(FILE* f) {
  fputs(
      "NAME\n"
      "    kvblock bench - time the block manager's hot paths against a bare XXH64, and the kernels\n"
      "\n"
      "SYNOPSIS\n"
      "    kvblock bench [--quick] [--only CASE] [--device cpu|auto|cuda] [--reps N] [--iters N]\n"
      "                  [--block-size N] [--prompt-tokens N] [--decode-seqs N] [--decode-tokens N]\n"
      "                  [--num-blocks N] [--json]\n"
      "\n"
      "DESCRIPTION\n"
      "    Eleven manager cases, each run once as a warm-up and then --reps times, interleaved; the median,\n"
      "    the minimum, the maximum and the spread ((max - min) / median) of the repetitions are printed.\n"
      "      hash    bare XXH64 of one block's bytes (block_size * 8 token bytes + 8 parent-hash bytes),\n"
      "              chained over the prompt's blocks: the floor any prefix cache pays per block. The tool\n"
      "              calls the system xxHash's XXH64 (inlined) on each block's bytes, laid out in advance\n"
      "              (parent, then tokens), and checks it equals kvb_hash_tokens.\n"
      "      kvb_hash_tokens   the same hash through the library call (informative).\n"
      "      miss    kvb_seq_allocate + kvb_seq_commit + kvb_seq_free of a fresh prompt (every block is\n"
      "              a cache miss, hashed and indexed at commit; once the pool has wrapped, every block\n"
      "              taken also evicts a cached one), per prompt block.\n"
      "      hit     kvb_seq_allocate + kvb_seq_free of a fully cached prompt (all blocks but the last\n"
      "              are hits: hash, index lookup, token comparison), per prompt block.\n"
      "      hosthit kvb_seq_allocate + kvb_drain_host_transfers + kvb_seq_free of a prompt whose blocks\n"
      "              are on the host level (KVB_CONFIG_HOST_CACHE; pushed off the device untimed before\n"
      "              each prompt): device miss, host hit, a device block and a load pair, per block.\n"
      "      decode  kvb_seq_append + kvb_seq_commit of one token, round-robin over --decode-seqs\n"
      "              sequences (one block in block_size is filled, hashed and indexed), per token.\n"
      "      fork    kvb_seq_fork of a committed prompt-long sequence + kvb_seq_free of the child, per\n"
      "              shared block.\n"
      "      cow     copy-on-write: kvb_seq_fork_at half a block before the end of the prompt's last full\n"
      "              block, kvb_seq_append of 1 token to the child (its partly shared block gets one\n"
      "              pending copy), kvb_drain_copies, kvb_seq_free; per operation (all four calls; the fork\n"
      "              shares the whole prompt, so this grows with its length). Not run at block size 1.\n"
      "      swap    kvb_seq_swap_out + kvb_seq_swap_in of a committed prompt-long sequence, enough host\n"
      "              blocks: the planning only (no data is copied), per block moved (2 per prompt block).\n"
      "      batch   kvb_batch_export of one decode step of --decode-seqs sequences of prompt/2 committed\n"
      "              tokens plus one new token each, into preallocated buffers (block tables, lengths,\n"
      "              query starts, slot mapping), per sequence; the time per call is printed too.\n"
      "      tree    one speculative step per sequence, round-robin over --decode-seqs sequences: a 16-node\n"
      "              draft tree (4 roots, 4 levels) by kvb_seq_append_tree, kvb_seq_commit_tree of a 4-node\n"
      "              path that moves every node, kvb_drain_slot_copies; per node.\n"
      "      spec    the same step drafted as a 16-token chain: kvb_seq_append, kvb_seq_commit of 4,\n"
      "              kvb_seq_rollback of 12; per token (for comparison).\n"
      "    The ratios of the first five cases to the bare hash (\"vs hash\") and to kvb_hash_tokens (\"vs\n"
      "    lib\") are printed, then the design goals of PERFORMANCE.md with what each means: a cached\n"
      "    prompt block costs at most 3x its bare hash, a new one (hashed, indexed, evicting) at most 4x,\n"
      "    a decode token at most 100 ns, a draft-tree node at most 2x a decode token. They are marked met\n"
      "    or missed on a full run only (not with --quick); a missed goal is a finding to look into, not\n"
      "    an error.\n"
      "\n"
      ,
      f);
  fputs(
      "KERNELS\n"
      "    Then the kernels, fp16, Hq=32, Hkv=8, D=128, block 16, every buffer holding random data, one\n"
      "    warm-up call and --reps timed samples, each printed as time per call (median, min, max, spread),\n"
      "    GB/s and the fraction of a copy ceiling measured in the same run:\n"
      "      kvb_paged_attention  decode attention, block tables randomly permuted, every sequence at the\n"
      "                     full context; GB/s = K+V bytes read / time. CPU: (1 seq, 4096 tokens),\n"
      "                     (8, 4096), bf16 (8, 4096), fp8 e4m3 (8, 4096) with fp16 queries,\n"
      "                     (32, 1024) and fp32 (8, 4096), the fp16, bf16 and fp32 (8, 4096) also on\n"
      "                     a head-major (HND) cache, against the streaming-read ceiling, after a line\n"
      "                     naming the CPU code path (KVB_CPU_ISA); GPU: (1, 4096), (32, 4096),\n"
      "                     (128, 2048), (64, 8192), fp8 e4m3 (64, 8192) and (16, 32768); --quick:\n"
      "                     smaller.\n"
      "      kvb_prefill_attention  prefill / extend attention, fp16, bf16 and fp8 e4m3 (fp16 queries)\n"
      "                     caches, random block tables, in TFLOP/s of the causal work (4 x attended keys\n"
      "                     x D per query row and head). GPU: (1 prompt x 4096 new), (8 x 1024 new over\n"
      "                     3072 cached), 4 x 512 new + 60 decodes over 2048, (8 x 4096 new); CPU: the\n"
      "                     first three with a quarter of the sequences and tokens (--quick: a\n"
      "                     sixteenth), after a line naming the CPU code path, against the peaks of that\n"
      "                     path measured in the same run on every online CPU: fp32 multiply-add chains\n"
      "                     of its vector width (AVX-512 FMA, AVX2 FMA or portable 8-wide), and where\n"
      "                     AMX tiles are on (the path ends in +amx) AMX-BF16 tile products (TDPBF16PS).\n"
      "      kvb_write_kv   new K/V of 32768 tokens (GPU 65536) to random distinct slots; input bytes read\n"
      "                     + cache bytes written.\n"
      "      kvb_copy_blocks    8 layers x 512 random pairs of 32 KiB blocks (K and V); read + write;\n"
      "                     again with adjacent ids (blocks 0..511 onto 512..1023).\n"
      "      kvb_swap_blocks    the random pairs to (out) and from (in) a second, host cache (page-locked\n"
      "                     when a CUDA device is usable). CPU: read + write, against memcpy; GPU: the\n"
      "                     bytes once, against the one-way transfer ceiling, with KVB_SWAP_AUTO and\n"
      "                     then each method it chooses between forced (memcpy, kernel).\n"
      "    Ceilings. CPU: memcpy of a 512 MiB buffer of random data into a touched destination that is\n"
      "    read after every copy and compared with the source at the end, counted as read + write\n"
      "    (2 x bytes / time); and a streaming read of that buffer by one thread per online CPU (each\n"
      "    sums its contiguous share; started per call, as the CPU attention's threads are), the ceiling\n"
      "    of CPU attention. GPU: a 1 GiB device-to-device cudaMemcpy, read + write, and for prefill an\n"
      "    fp16 GEMM 8192^3 through cuBLAS (TFLOP/s), both through the CUDA Toolkit's libcudart and\n"
      "    libcublas loaded with dlopen (KVB_CUDART / KVB_CUBLAS name them; \"n/a\" with the reason where\n"
      "    they cannot be loaded); and kvb_swap_blocks of 64 dense 2 MiB blocks with KVB_SWAP_USE_MEMCPY\n"
      "    to and from page-locked host blocks, one direction at a time (the PCIe ceiling for swap).\n"
      "    GPU timing: the C API has no stream synchronisation, so the calls go to the legacy default\n"
      "    stream and each sample of 10 calls ends with a fence: a one-block kvb_swap_blocks device ->\n"
      "    page-locked host that the tool waits for by polling host memory (stream order: it lands after\n"
      "    every call before it). The fence's cost (microseconds) is spread over the 10 calls.\n"
      "    `make bench-kernels` runs this section alone (kvblock bench --only kernels --device auto).\n"
      "    With --quick the working sets fit in the CPU caches: the fractions can exceed 100%.\n"
      "\n"
      ,
      f);
  fputs(
      "OPTIONS\n"
      "    --quick              small run for tests: 3 repetitions, 16 prompts, 64 decode tokens, small\n"
      "                         kernel shapes (under 3 s)\n"
      "    --only CASE          run one case (hash, kvb_hash_tokens, miss, hit, decode, fork, cow, swap,\n"
      "                         batch, hosthit, tree, spec) or only the kernels (kernels), e.g. under a profiler; the warm-up\n"
      "                         still runs the first five manager cases; a manager case skips the kernels;\n"
      "                         cascade: only the kernels' shared-prefix rows (after the read ceiling): plain\n"
      "                         against grouped, a sweep of shared / own splits (plain, grouped as the cost\n"
      "                         model decides, every group), and decode rows as an extend call of q_len 1;\n"
      "                         tree-kernels: only the token-tree kernel rows (tree-masked extend, copy_slots);\n"
      "                         attention: only the decode-attention rows (after the ceilings);\n"
      "                         prefill: only the prefill rows (after the ceilings)\n"
      "    --device DEV         where the kernels run: cpu (default), auto (the CPU, then the GPU when a\n"
      "                         CUDA device is usable, else a note that it was skipped) or cuda (the GPU\n"
      "                         only; exit status 1 if no CUDA device is usable or the library was built\n"
      "                         without CUDA)\n"
      "    --reps N             timed repetitions (default 9, at most 1000)\n"
      "    --iters N            prompts (operations, export calls) per repetition of the hash, miss, hit,\n"
      "                         fork, cow, swap and batch cases (default 200)\n"
      "    --block-size N       tokens per block of the manager cases (default 16)\n"
      "    --prompt-tokens N    prompt length (default 4096; the batch case uses half of it)\n"
      "    --decode-seqs N      sequences decoding together, and of the batch case (default 64)\n"
      "    --decode-tokens N    tokens per sequence per repetition (default 1024)\n"
      "    --num-blocks N       pool of the miss and hit cases (default 16 prompts' worth of blocks)\n"
      "    --json               one JSON object: {\"config\": {...}, \"hash\": {...}, \"kvb_hash_tokens\": {...},\n"
      "                         \"miss\", \"hit\", \"decode\", \"fork\", \"cow\", \"swap\", \"batch\" (each {\"unit\",\n"
      "                         \"median\", \"min\", \"max\", \"spread\", ...; batch adds \"median_per_call\"},\n"
      "                         \"targets\": {...}, \"kernels\": {\"cpu\": {...}, \"cuda\": {...} or\n"
      "                         \"cuda_skipped\": why}}; a kernel figure is {\"median_us\", \"min_us\", \"max_us\",\n"
      "                         \"spread\", \"bytes\", \"gbps\", \"of_ceiling\", \"ceiling\"}; manager times in ns,\n"
      "                         spread and ratios as fractions\n"
      "    -h, --help           this text\n"
      "\n"
      "EXIT STATUS\n"
      "    0 done (goals missed are reported, not an error), 1 library failure or no GPU for --device\n"
      "    cuda, 2 usage error.\n"
      "\n"
      "EXAMPLES\n"
      "    kvblock bench\n"
      "    kvblock bench --quick --json\n"
      "    kvblock bench --only kernels --device auto\n"
      "    perf record kvblock bench --only miss\n",
      f);
}

/* An --only value that runs the kernel section reduced to some of its rows. */
static int is_kernel_rows(const char* name) {
  return !strcmp(name, "cascade") || !strcmp(name, "tree-kernels") || !strcmp(name, "attention") ||
         !strcmp(name, "prefill");
}

static int known_case(const char* name) {
  int k;
  for (k = 0; k < NUM_CASES; k++)
    if (!strcmp(name, bench_case_keys[k])) return 1;
  return !strcmp(name, "kernels") || is_kernel_rows(name);
}

int bench_parse_args(int argc, char** argv, bench_opts* o) {
  int k;
  for (k = 1; k < argc; k++) {
    const char* val = NULL;
    const char* a = argv[k];
    int got;
#define OPT(name) ((got = opt_value(argc, argv, &k, name, &val)) != 0)
#define NUM(name, lo, hi, dst) \
  (got < 0 || !parse_u64(name, val, lo, hi, dst)) return EXIT_USAGE
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      bench_help(stdout);
      return EXIT_OK;
    } else if (!strcmp(a, "--json")) {
      o->json = 1;
    } else if (!strcmp(a, "--quick")) {
      o->quick = 1;
    } else if (OPT("--only")) {
      if (got < 0) return EXIT_USAGE;
      if (!known_case(val)) {
        tool_error("bench: --only takes hash, kvb_hash_tokens, miss, hit, decode, fork, cow, swap, batch, hosthit, "
                   "tree, spec, kernels, cascade, tree-kernels, attention or prefill");
        return EXIT_USAGE;
      }
      o->only = val;
      if (is_kernel_rows(val)) {
        o->only = "kernels";
        o->kernel_rows = val;
      }
    } else if (OPT("--device")) {
      if (got < 0) return EXIT_USAGE;
      if (strcmp(val, "cpu") && strcmp(val, "auto") && strcmp(val, "cuda")) {
        tool_error("bench: --device takes cpu, auto or cuda");
        return EXIT_USAGE;
      }
      o->device = val;
    } else if (OPT("--reps")) {
      if NUM("--reps", 1, MAX_REPS, &o->reps);
    } else if (OPT("--iters")) {
      if NUM("--iters", 1, 1000000, &o->iters);
    } else if (OPT("--block-size")) {
      uint64_t v;
      if NUM("--block-size", 1, 65536, &v);
      o->block_size = (uint32_t)v;
    } else if (OPT("--prompt-tokens")) {
      if NUM("--prompt-tokens", 2, 1u << 24, &o->prompt_tokens);
    } else if (OPT("--decode-seqs")) {
      if NUM("--decode-seqs", 1, 100000, &o->decode_seqs);
    } else if (OPT("--decode-tokens")) {
      if NUM("--decode-tokens", 1, 1u << 20, &o->decode_tokens);
    } else if (OPT("--num-blocks")) {
      if NUM("--num-blocks", 1, 1u << 30, &o->num_blocks);
    } else {
      tool_error("bench: unknown argument '%s' (kvblock bench --help)", a);
      return EXIT_USAGE;
    }
#undef NUM
#undef OPT
  }
  return -1;
}

int bench_check_sizes(bench_opts* o, uint64_t* decode_blocks) {
  if (o->quick) {
    o->reps = 3;
    o->iters = 16;
    o->decode_tokens = 64;
  }
  if (o->prompt_tokens < o->block_size) {
    tool_error("bench: --prompt-tokens must be at least one block (%u)", o->block_size);
    return 0;
  }
  if (o->only && !strcmp(o->only, "cow") && o->block_size < 2) {
    tool_error("bench: the cow case needs a block size of at least 2");
    return 0;
  }
  if (!o->num_blocks) o->num_blocks = 16 * prompt_blocks(o);
  if (o->num_blocks < 2 * prompt_blocks(o)) {
    tool_error("bench: --num-blocks must hold two prompts");
    return 0;
  }
  if (o->num_blocks > (1u << 30)) o->num_blocks = 1u << 30;
  *decode_blocks = o->decode_seqs * ((64 + o->decode_tokens) / o->block_size + 2);
  o->batch_seqs = o->decode_seqs;
  o->batch_tokens = o->prompt_tokens / 2 ? o->prompt_tokens / 2 : 1;
  if (*decode_blocks > (1u << 30) || o->batch_seqs * (o->batch_tokens / o->block_size + 2) > (1u << 30)) {
    tool_error("bench: the decode and batch cases need too many blocks");
    return 0;
  }
  return 1;
}
