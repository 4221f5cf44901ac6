/* progress.h - a one-line progress indicator on stderr for long runs (only when stderr is a tty). */
#ifndef KVBLOCK_TOOL_PROGRESS_H
#define KVBLOCK_TOOL_PROGRESS_H

#include <stdint.h>

typedef struct progress {
  int enabled;     /* stderr is a tty and not --quiet (or forced) */
  int shown;       /* a line is on screen */
  uint64_t total;
  double start, last;
  const char* what;
} progress;

/* enabled: -1 = auto (stderr is a tty), 0 = never, 2 = always and at once (--progress, tests). Otherwise
   nothing appears before the run has taken 1 s; the line is redrawn at most 5 times a second. */
void progress_init(progress* p, const char* what, uint64_t total, int enabled);
/* done items of total; extra: short free text (may be NULL). Cheap to call often. */
void progress_update(progress* p, uint64_t done, const char* extra);
/* Clear the line. */
void progress_finish(progress* p);

#endif
