/* trace.h - request traces in JSON Lines: the Mooncake format
 *   {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [id, ...]}
 * and the token-id format
 *   {"timestamp": ms, "prompt": [token, ...], "output_length": m}
 * read with a small, bounds-checked JSON parser (no third-party code).
 *
 * Token expansion (shared by every tool of the project so that results compare):
 *   Mooncake prompt token i     = hash_ids[i / 512] * 512 + i % 512
 *   generated token k, line r   = 2^40 + r * 2^20 + k      (r = 0-based line number in the file)
 */
#ifndef KVBLOCK_TOOL_TRACE_H
#define KVBLOCK_TOOL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define TRACE_HASH_BLOCK 512                    /* prompt tokens per Mooncake hash id */
#define TRACE_GEN_BASE ((int64_t)1 << 40)       /* first generated token id */
#define TRACE_GEN_STRIDE ((int64_t)1 << 20)     /* generated ids per line; also the output_length limit */
#define TRACE_MAX_HASH_ID (((int64_t)1 << 31) - 1) /* so that prompt tokens stay below TRACE_GEN_BASE */
#define TRACE_MAX_PROMPT ((uint64_t)1 << 26)    /* prompt tokens per request */

typedef enum trace_format { TRACE_AUTO = 0, TRACE_MOONCAKE = 1, TRACE_TOKENS = 2 } trace_format;

typedef struct trace_request {
  double timestamp_ms;    /* arrival, ms from the start of the trace (0 when absent) */
  uint64_t line;          /* 1-based line number in the file */
  uint64_t input_length;  /* prompt tokens */
  uint64_t output_length; /* generated tokens */
  size_t ids_offset;      /* first of this request's hash_ids / prompt tokens in trace.ids */
  size_t num_ids;
  int format;             /* TRACE_MOONCAKE or TRACE_TOKENS */
} trace_request;

typedef struct trace {
  trace_request* reqs;
  size_t num_reqs, cap_reqs;
  i64vec ids;
  uint64_t num_lines;          /* lines read, blank and truncated ones included */
  uint64_t truncated_line;     /* 1-based line of an ignored truncated last line, 0 = none */
  uint64_t prompt_tokens;      /* totals over the requests */
  uint64_t output_tokens;
  uint64_t max_request_tokens; /* longest prompt + output */
  int mixed_formats;           /* both formats occur in the file */
} trace;

/* Read a whole trace. fmt TRACE_AUTO detects the format per line (hash_ids -> Mooncake, prompt ->
   tokens). A malformed line is an error ("FILE:LINE:COL: message" on stderr, returns 0); a last line
   without a newline that does not parse is reported on stderr as truncated and skipped (returns 1).
   path "-" reads standard input. */
int trace_load(const char* path, trace_format fmt, trace* t);
void trace_free(trace* t);

/* Parse one line (len bytes, no newline). 1 = a request, 0 = blank line, -1 = error with the message
   in err (and the 1-based column in *col). Appends ids to t->ids only on success. Exposed for tests. */
int trace_parse_line(const char* s, size_t len, trace_format fmt, trace* t, trace_request* out, char* err,
                     size_t err_size, size_t* col);

/* Prompt token ids of request r into out[input_length]. */
void trace_prompt_tokens(const trace* t, size_t r, int64_t* out);
/* Generated token k of request r. */
int64_t trace_output_token(const trace* t, size_t r, uint64_t k);

const char* trace_format_name(int fmt);
/* "auto", "mooncake", "tokens" -> format; -1 if unknown. */
int trace_format_parse(const char* name);

#endif
