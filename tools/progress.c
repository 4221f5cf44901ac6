/* progress.c - progress line on stderr for runs longer than a second. */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "util.h"

void progress_init(progress* p, const char* what, uint64_t total, int enabled) {
  p->enabled = enabled < 0 ? isatty(fileno(stderr)) : enabled;
  p->shown = 0;
  p->total = total;
  p->what = what;
  p->start = p->last = now_s();
}

void progress_update(progress* p, uint64_t done, const char* extra) {
  double t;
  if (!p->enabled) return;
  t = now_s();
  if (p->enabled != 2 && t - p->start < 1.0) return; /* forced (--progress): from the start */
  if (p->shown && t - p->last < 0.2) return;
  p->last = t;
  p->shown = 1;
  fprintf(stderr, "\r%s: %llu/%llu (%.0f%%), %.1f s%s%s\033[K", p->what, (unsigned long long)done,
          (unsigned long long)p->total, p->total ? 100.0 * (double)done / (double)p->total : 100.0,
          t - p->start, extra ? ", " : "", extra ? extra : "");
  fflush(stderr);
}

void progress_finish(progress* p) {
  if (p->shown) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
  }
  p->shown = 0;
}
