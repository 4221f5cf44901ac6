/* util.h - small helpers shared by the kvblock tool: clock, option parsing, errors. */
#ifndef KVBLOCK_TOOL_UTIL_H
#define KVBLOCK_TOOL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvblock.h"

/* Exit codes of the tool. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* Monotonic wall clock and this process's CPU time, in seconds. */
double now_s(void);
double cpu_s(void);

/* Print "kvblock: <message>\n" to stderr. */
void tool_error(const char* fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Parse an unsigned integer option value in [min, max]; on error print a message naming opt and
   return 0 (success is 1). */
int parse_u64(const char* opt, const char* text, uint64_t min, uint64_t max, uint64_t* out);
/* Parse a finite double in [min, max]. */
int parse_double(const char* opt, const char* text, double min, double max, double* out);

/* Option helper: if argv[*i] is `name` and a value follows, set *value, advance *i, return 1.
   If argv[*i] is `name=value`, set *value, return 1. If `name` has no value, print an error and
   return -1. Otherwise return 0. */
int opt_value(int argc, char** argv, int* i, const char* name, const char** value);

/* Report a failed library call: "kvblock: what: KVB_ERR_X: detail". */
void lib_error(const char* what, kvb_status s);
/* 1 when s is KVB_OK, else lib_error(what, s) and 0. */
int lib_ok(const char* what, kvb_status s);

/* Growable buffer of int64 values. */
typedef struct i64vec {
  int64_t* data;
  size_t len, cap;
} i64vec;
int i64vec_reserve(i64vec* v, size_t cap);  /* 1 ok, 0 out of memory */
int i64vec_push(i64vec* v, int64_t x);
void i64vec_free(i64vec* v);

/* malloc/calloc/realloc that exit with a message on failure. */
void* xmalloc(size_t n);
void* xcalloc(size_t n, size_t size);
void* xrealloc(void* p, size_t n);

/* Comparison of doubles for qsort, ascending. */
int cmp_double(const void* a, const void* b);
/* Quantile q in [0,1] of a sorted array (linear interpolation); 0 for n == 0. */
double quantile_sorted(const double* v, size_t n, double q);

/* JSON string output (quotes and escapes). */
void json_string(FILE* f, const char* s);

#endif
