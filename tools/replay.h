/* replay.h - `kvblock replay`: feed a request trace through the block manager. */
#ifndef KVBLOCK_TOOL_REPLAY_H
#define KVBLOCK_TOOL_REPLAY_H

#include <stdio.h>

int replay_main(int argc, char** argv);
void replay_help(FILE* f);

#endif
