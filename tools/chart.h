/* chart.h - samples of a timed replay (blocks in use, free blocks that still hold a cached prefix, running
   hit ratio over the simulated clock), decimated to a bounded number of points, written as a plain SVG line chart. */
#ifndef KVBLOCK_TOOL_CHART_H
#define KVBLOCK_TOOL_CHART_H

#include <stddef.h>
#include <stdint.h>

typedef struct chart {
  double *t, *used, *cached_free, *hit;
  size_t n, cap;      /* points kept; cap = 2 * wanted points */
  uint64_t stride;    /* keep one sample in stride */
  uint64_t seen;      /* samples offered */
} chart;

void chart_init(chart* c, size_t max_points);
void chart_free(chart* c);
/* One sample: simulated time (s), blocks in use, free blocks that still hold a cached prefix (reusable by
   a prompt with that prefix until evicted), running hit ratio (0..1). */
void chart_add(chart* c, double t, double used, double cached_free, double hit);
/* Checks, before a run, that path can be written (an existing writable file, or a new file in an
   existing writable folder); prints why not and returns 0. */
int chart_path_writable(const char* path);
/* Write the SVG; title is plain text (escaped); a line under it says what the pool was (num_blocks of
   block_size tokens). Returns 1 on success (else prints the error). */
int chart_write_svg(const chart* c, const char* path, const char* title, double num_blocks, unsigned block_size);

#endif
