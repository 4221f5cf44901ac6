/* report.h - one result printed either as aligned "label  value" lines or as one JSON object. */
#ifndef KVBLOCK_TOOL_REPORT_H
#define KVBLOCK_TOOL_REPORT_H

#include <stdint.h>
#include <stdio.h>

typedef struct report {
  FILE* f;
  int json;
  int depth;
  int first[8]; /* per nesting level: no member written yet */
} report;

/* Human mode prints the title line; JSON mode opens the object. */
void report_begin(report* r, FILE* f, int json, const char* title);
/* Ends the object (JSON: closing brace and newline). */
void report_end(report* r);
/* Nested object: JSON "key": {...}; human mode prints label as a sub-heading. */
void report_group_begin(report* r, const char* key, const char* label);
void report_group_end(report* r);

void report_u64(report* r, const char* key, const char* label, uint64_t v, const char* unit);
void report_i64(report* r, const char* key, const char* label, int64_t v, const char* unit);
/* decimals: digits after the point in both modes (JSON keeps at least that precision). */
void report_f64(report* r, const char* key, const char* label, double v, int decimals, const char* unit);
/* A ratio: JSON the fraction (6 digits), human a percentage with 2 decimals. */
void report_ratio(report* r, const char* key, const char* label, double v);
/* JSON true/false; human "yes"/"no". */
void report_bool(report* r, const char* key, const char* label, int v);
void report_str(report* r, const char* key, const char* label, const char* v);
/* Human mode only: free text appended in parentheses to the previous line is not supported; use this
   for an extra note line. Ignored in JSON mode. */
void report_note(report* r, const char* text);

/* 1234567 -> "1,234,567" into buf (at least 32 bytes). */
const char* fmt_thousands(uint64_t v, char* buf);

#endif
