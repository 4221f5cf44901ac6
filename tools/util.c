/* util.c - clock, option parsing, error printing, small containers for the kvblock tool. */
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tool_error(const char* fmt, ...) {
  va_list ap;
  fputs("kvblock: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int parse_u64(const char* opt, const char* text, uint64_t min, uint64_t max, uint64_t* out) {
  char* end = NULL;
  unsigned long long v;
  if (!text || !*text || *text == '-' || *text == '+') goto bad;
  errno = 0;
  v = strtoull(text, &end, 10);
  if (errno || *end) goto bad;
  if (v < min || v > max) {
    tool_error("%s: %s is out of range [%llu, %llu]", opt, text, (unsigned long long)min,
               (unsigned long long)max);
    return 0;
  }
  *out = (uint64_t)v;
  return 1;
bad:
  tool_error("%s: '%s' is not a non-negative integer", opt, text ? text : "");
  return 0;
}

int parse_double(const char* opt, const char* text, double min, double max, double* out) {
  char* end = NULL;
  double v;
  if (!text || !*text) goto bad;
  errno = 0;
  v = strtod(text, &end);
  if (errno || *end || !isfinite(v)) goto bad;
  if (v < min || v > max) {
    tool_error("%s: %s is out of range [%g, %g]", opt, text, min, max);
    return 0;
  }
  *out = v;
  return 1;
bad:
  tool_error("%s: '%s' is not a number", opt, text ? text : "");
  return 0;
}

int opt_value(int argc, char** argv, int* i, const char* name, const char** value) {
  const char* a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *value = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) {
    tool_error("%s needs a value", name);
    return -1;
  }
  *value = argv[++*i];
  return 1;
}

void lib_error(const char* what, kvb_status s) {
  const char* detail = kvb_last_error();
  tool_error("%s: %s%s%s", what, kvb_status_string(s), detail && *detail ? ": " : "", detail ? detail : "");
}

int lib_ok(const char* what, kvb_status s) {
  if (s != KVB_OK) lib_error(what, s);
  return s == KVB_OK;
}

int i64vec_reserve(i64vec* v, size_t cap) {
  int64_t* p;
  if (cap <= v->cap) return 1;
  if (cap > SIZE_MAX / sizeof(int64_t)) return 0;
  p = (int64_t*)realloc(v->data, cap * sizeof(int64_t));
  if (!p) return 0;
  v->data = p;
  v->cap = cap;
  return 1;
}

int i64vec_push(i64vec* v, int64_t x) {
  if (v->len == v->cap && !i64vec_reserve(v, v->cap ? v->cap * 2 : 64)) return 0;
  v->data[v->len++] = x;
  return 1;
}

void i64vec_free(i64vec* v) {
  free(v->data);
  v->data = NULL;
  v->len = v->cap = 0;
}

static void oom(void) {
  tool_error("out of memory");
  exit(EXIT_FAIL);
}

void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  if (!p) oom();
  return p;
}

void* xcalloc(size_t n, size_t size) {
  void* p = calloc(n ? n : 1, size ? size : 1);
  if (!p) oom();
  return p;
}

void* xrealloc(void* p, size_t n) {
  void* q = realloc(p, n ? n : 1);
  if (!q) oom();
  return q;
}

int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

double quantile_sorted(const double* v, size_t n, double q) {
  double pos, frac;
  size_t lo;
  if (n == 0) return 0.0;
  if (q <= 0) return v[0];
  if (q >= 1) return v[n - 1];
  pos = q * (double)(n - 1);
  lo = (size_t)pos;
  frac = pos - (double)lo;
  if (lo + 1 >= n) return v[n - 1];
  return v[lo] + (v[lo + 1] - v[lo]) * frac;
}

void json_string(FILE* f, const char* s) {
  const unsigned char* p = (const unsigned char*)s;
  fputc('"', f);
  for (; *p; p++) {
    switch (*p) {
      case '"': fputs("\\\"", f); break;
      case '\\': fputs("\\\\", f); break;
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default:
        if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
  }
  fputc('"', f);
}
