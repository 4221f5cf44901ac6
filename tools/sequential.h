/* sequential.h - the sequential replay (see sequential.c). */
#ifndef KVBLOCK_TOOL_SEQUENTIAL_H
#define KVBLOCK_TOOL_SEQUENTIAL_H

#include "replay_common.h"

int replay_sequential(const replay_opts* o, const trace* t, uint64_t num_blocks, double load_s);

#endif
