/* bench_read.h - the CPU streaming-read ceiling of `kvblock bench`: every byte of a buffer read once by
   several threads, each summing its contiguous share with wide loads (what a memory-bound decode
   kernel on those threads can at best do). */
#ifndef KVBLOCK_TOOL_BENCH_READ_H
#define KVBLOCK_TOOL_BENCH_READ_H

#include <stddef.h>
#include <stdint.h>

/* Threads the ceiling uses: the online CPUs, at most 64 (the kernels' own thread limit). */
int read_threads(void);
/* Reads buf[0..n) with `threads` threads (started per call, as the CPU attention kernel does); returns
   a sum of its 64-bit words (so the reads cannot be dropped), or 0 with *ok = 0 if no thread started. */
uint64_t read_all(const unsigned char* buf, size_t n, int threads, int* ok);

#endif
