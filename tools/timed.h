/* timed.h - the timed replay: a continuous-batching scheduler model on a simulated clock (timed.c). */
#ifndef KVBLOCK_TOOL_TIMED_H
#define KVBLOCK_TOOL_TIMED_H

#include "replay_common.h"

int replay_timed(const replay_opts* o, const trace* t, uint64_t num_blocks, double load_s);

#endif
