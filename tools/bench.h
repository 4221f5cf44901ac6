/* bench.h - `kvblock bench`: ns/block of the manager's hot paths against a bare XXH64. */
#ifndef KVBLOCK_TOOL_BENCH_H
#define KVBLOCK_TOOL_BENCH_H

#include <stdio.h>

int bench_main(int argc, char** argv);
void bench_help(FILE* f);

#endif
