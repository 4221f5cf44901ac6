/* main.c - `kvblock`, the command-line tool of libkvblock: subcommand dispatch and help.
   A plain C99 consumer of the public header and the shared library. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "replay.h"
#include "util.h"

static void main_help(FILE* f) {
  fprintf(f,
          "NAME\n"
          "    kvblock - command-line tool of libkvblock, the KV-cache block manager\n"
          "\n"
          "SYNOPSIS\n"
          "    kvblock replay TRACE [options]   replay a request trace (Mooncake or token-id JSON Lines)\n"
          "    kvblock bench [options]          time the manager's hot paths and the kernels\n"
          "    kvblock version                  print the tool's and the library's version\n"
          "    kvblock help [COMMAND]           this text, or a command's manual\n"
          "\n"
          "DESCRIPTION\n"
          "    replay feeds a trace through libkvblock, sequentially (the reference replay: cached prompt\n"
          "    tokens, hit ratio, evictions, blocks/s) or on a simulated clock with a continuous-batching\n"
          "    scheduler (--mode timed: preemption, swapping, TTFT, an SVG chart).\n"
          "    bench measures ns per block of the prefix-cache miss and hit paths and ns per decode token,\n"
          "    and compares them with XXH64 over the same bytes; fork, copy-on-write, swap planning and\n"
          "    batch export; and the kernels (CPU, or GPU with --device cuda) against a copy ceiling.\n"
          "    Every command takes --help and --json.\n"
          "\n"
          "OPTIONS\n"
          "    -h, --help      this text\n"
          "    -V, --version   versions\n"
          "\n"
          "EXIT STATUS\n"
          "    0 success, 1 failure (bad input, library error), 2 usage error.\n"
          "\n"
          "EXAMPLES\n"
          "    kvblock replay traces/sample_mooncake.jsonl\n"
          "    kvblock replay trace.jsonl --num-blocks 187500 --json\n"
          "    kvblock bench --quick\n"
          "\n"
          "    Library %s (header %d.%d.%d).\n",
          kvb_version_string(), KVB_VERSION_MAJOR, KVB_VERSION_MINOR, KVB_VERSION_PATCH);
}

int main(int argc, char** argv) {
  const char* cmd = argc > 1 ? argv[1] : NULL;
  if (!cmd || !strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
    main_help(stdout);
    return cmd ? EXIT_OK : EXIT_USAGE;
  }
  if (!strcmp(cmd, "help")) {
    if (argc > 2 && !strcmp(argv[2], "replay")) replay_help(stdout);
    else if (argc > 2 && !strcmp(argv[2], "bench")) bench_help(stdout);
    else main_help(stdout);
    return EXIT_OK;
  }
  if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("kvblock %d.%d.%d (libkvblock %s)\n", KVB_VERSION_MAJOR, KVB_VERSION_MINOR, KVB_VERSION_PATCH,
           kvb_version_string());
    return EXIT_OK;
  }
  if (!strcmp(cmd, "replay")) return replay_main(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return bench_main(argc - 1, argv + 1);
  tool_error("unknown command '%s' (try kvblock --help)", cmd);
  return EXIT_USAGE;
}
