/* report.c - human or JSON output of one result object. */
#include "report.h"

#include <math.h>
#include <string.h>

#include "util.h"

#define LABEL_WIDTH 24

const char* fmt_thousands(uint64_t v, char* buf) {
  char tmp[32];
  int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), i, o = 0;
  for (i = 0; i < n; i++) {
    if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = tmp[i];
  }
  buf[o] = '\0';
  return buf;
}

void report_begin(report* r, FILE* f, int json, const char* title) {
  memset(r, 0, sizeof *r);
  r->f = f;
  r->json = json;
  r->first[0] = 1;
  if (json) fputc('{', f);
  else if (title) fprintf(f, "%s\n", title);
}

void report_end(report* r) {
  if (r->json) fputs("}\n", r->f);
}

static void key(report* r, const char* k) {
  if (!r->first[r->depth]) fputs(", ", r->f);
  r->first[r->depth] = 0;
  json_string(r->f, k);
  fputs(": ", r->f);
}

static void label(report* r, const char* l) {
  int indent = 2 + 2 * r->depth;
  fprintf(r->f, "%*s%-*s ", indent, "", LABEL_WIDTH - 2 * r->depth, l);
}

void report_group_begin(report* r, const char* k, const char* l) {
  if (r->json) {
    key(r, k);
    fputc('{', r->f);
  } else {
    fprintf(r->f, "%*s%s\n", 2 + 2 * r->depth, "", l);
  }
  if (r->depth + 1 < (int)(sizeof r->first / sizeof r->first[0])) r->depth++;
  r->first[r->depth] = 1;
}

void report_group_end(report* r) {
  if (r->depth > 0) r->depth--;
  if (r->json) fputc('}', r->f);
}

void report_u64(report* r, const char* k, const char* l, uint64_t v, const char* unit) {
  char buf[32];
  if (r->json) {
    key(r, k);
    fprintf(r->f, "%llu", (unsigned long long)v);
  } else {
    label(r, l);
    fprintf(r->f, "%s%s%s\n", fmt_thousands(v, buf), unit ? " " : "", unit ? unit : "");
  }
}

void report_i64(report* r, const char* k, const char* l, int64_t v, const char* unit) {
  if (r->json) {
    key(r, k);
    fprintf(r->f, "%lld", (long long)v);
  } else {
    label(r, l);
    fprintf(r->f, "%lld%s%s\n", (long long)v, unit ? " " : "", unit ? unit : "");
  }
}

void report_f64(report* r, const char* k, const char* l, double v, int decimals, const char* unit) {
  if (r->json) {
    key(r, k);
    if (isfinite(v)) fprintf(r->f, "%.*f", decimals, v);
    else fputs("null", r->f);
  } else {
    label(r, l);
    fprintf(r->f, "%.*f%s%s\n", decimals, v, unit ? " " : "", unit ? unit : "");
  }
}

void report_ratio(report* r, const char* k, const char* l, double v) {
  if (r->json) {
    key(r, k);
    fprintf(r->f, "%.6f", isfinite(v) ? v : 0.0);
  } else {
    label(r, l);
    fprintf(r->f, "%.2f%%\n", 100.0 * (isfinite(v) ? v : 0.0));
  }
}

void report_bool(report* r, const char* k, const char* l, int v) {
  if (r->json) {
    key(r, k);
    fputs(v ? "true" : "false", r->f);
  } else {
    label(r, l);
    fputs(v ? "yes\n" : "no\n", r->f);
  }
}

void report_str(report* r, const char* k, const char* l, const char* v) {
  if (r->json) {
    key(r, k);
    json_string(r->f, v);
  } else {
    label(r, l);
    fprintf(r->f, "%s\n", v);
  }
}

void report_note(report* r, const char* text) {
  if (!r->json) fprintf(r->f, "%*s%s\n", 2 + 2 * r->depth, "", text);
}
