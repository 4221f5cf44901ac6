/* trace.c - JSON Lines trace reader: a small strict JSON parser for one line at a time. */
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define JSON_MAX_DEPTH 64

typedef struct jparser {
  const char* s;
  size_t len, pos;
  char* err;
  size_t err_size;
  int failed;
} jparser;

static int jfail(jparser* p, const char* fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int jfail(jparser* p, const char* fmt, ...) {
  va_list ap;
  if (p->failed) return 0;
  p->failed = 1;
  va_start(ap, fmt);
  vsnprintf(p->err, p->err_size, fmt, ap);
  va_end(ap);
  return 0;
}

static void jws(jparser* p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') p->pos++;
    else break;
  }
}

static int jpeek(jparser* p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static const char* describe(jparser* p) {
  int c = jpeek(p);
  static char buf[32];
  if (c < 0) return "end of line";
  if (c >= 0x20 && c < 0x7f) snprintf(buf, sizeof buf, "'%c'", c);
  else snprintf(buf, sizeof buf, "byte 0x%02x", (unsigned)c);
  return buf;
}

static int jexpect(jparser* p, char c, const char* what) {
  jws(p);
  if (jpeek(p) != (unsigned char)c) return jfail(p, "expected %s, found %s", what, describe(p));
  p->pos++;
  return 1;
}

/* A string: copies up to cap-1 bytes of the raw (still escaped) content into out when out != NULL and
   reports whether it fitted in *fits. Validates escapes and control characters. */
static int jstring(jparser* p, char* out, size_t cap, int* fits) {
  size_t n = 0;
  jws(p);
  if (jpeek(p) != '"') return jfail(p, "expected a string, found %s", describe(p));
  p->pos++;
  if (fits) *fits = 1;
  for (;;) {
    int c = jpeek(p);
    if (c < 0) return jfail(p, "unterminated string");
    if (c < 0x20) return jfail(p, "control character 0x%02x in a string", (unsigned)c);
    p->pos++;
    if (c == '"') break;
    if (c == '\\') {
      int e = jpeek(p);
      if (e < 0) return jfail(p, "unterminated string");
      if (!strchr("\"\\/bfnrtu", e)) return jfail(p, "bad escape '\\%c' in a string", e);
      p->pos++;
      if (e == 'u') {
        int k;
        for (k = 0; k < 4; k++) {
          int h = jpeek(p);
          if (h < 0 || !strchr("0123456789abcdefABCDEF", h))
            return jfail(p, "bad \\u escape in a string");
          p->pos++;
        }
      }
      if (out) {
        if (n + 2 < cap) {
          out[n++] = '\\';
          out[n++] = (char)e;
        } else if (fits) *fits = 0;
      }
      continue;
    }
    if (out) {
      if (n + 1 < cap) out[n++] = (char)c;
      else if (fits) *fits = 0;
    }
  }
  if (out && cap) out[n] = '\0';
  return 1;
}

/* A JSON number. *is_int = integer literal (no fraction or exponent) that fits int64 (then *iv).
   *dv is the value as a double. */
static int jnumber(jparser* p, int* is_int, int64_t* iv, double* dv) {
  size_t start;
  int neg = 0, fits = 1, frac = 0;
  uint64_t acc = 0;
  char buf[64];
  jws(p);
  start = p->pos;
  if (jpeek(p) == '-') {
    neg = 1;
    p->pos++;
  }
  if (jpeek(p) == '0') {
    p->pos++;
  } else if (jpeek(p) >= '1' && jpeek(p) <= '9') {
    while (jpeek(p) >= '0' && jpeek(p) <= '9') {
      unsigned d = (unsigned)(jpeek(p) - '0');
      if (acc > (UINT64_MAX - d) / 10) fits = 0;
      else acc = acc * 10 + d;
      p->pos++;
    }
  } else {
    return jfail(p, "expected a number, found %s", describe(p));
  }
  if (jpeek(p) == '.') {
    frac = 1;
    p->pos++;
    if (!(jpeek(p) >= '0' && jpeek(p) <= '9')) return jfail(p, "expected a digit after '.'");
    while (jpeek(p) >= '0' && jpeek(p) <= '9') p->pos++;
  }
  if (jpeek(p) == 'e' || jpeek(p) == 'E') {
    frac = 1;
    p->pos++;
    if (jpeek(p) == '+' || jpeek(p) == '-') p->pos++;
    if (!(jpeek(p) >= '0' && jpeek(p) <= '9')) return jfail(p, "expected a digit in the exponent");
    while (jpeek(p) >= '0' && jpeek(p) <= '9') p->pos++;
  }
  if (p->pos - start >= sizeof buf) {
    *dv = 0; /* absurdly long literal: only integers need the exact value */
    if (!frac && fits) {
      /* fall through to the integer check below */
    } else {
      return jfail(p, "number literal too long");
    }
  } else {
    memcpy(buf, p->s + start, p->pos - start);
    buf[p->pos - start] = '\0';
    *dv = strtod(buf, NULL);
  }
  *is_int = 0;
  if (!frac && fits) {
    if (!neg && acc <= (uint64_t)INT64_MAX) {
      *is_int = 1;
      *iv = (int64_t)acc;
    } else if (neg && acc <= (uint64_t)INT64_MAX + 1u) {
      *is_int = 1;
      *iv = acc == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)acc;
    }
  }
  return 1;
}

static int jliteral(jparser* p, const char* word) {
  size_t n = strlen(word);
  if (p->len - p->pos >= n && memcmp(p->s + p->pos, word, n) == 0) {
    p->pos += n;
    return 1;
  }
  return jfail(p, "unexpected %s", describe(p));
}

/* Skip any JSON value (validating it). */
static int jskip(jparser* p, int depth) {
  int c;
  if (depth > JSON_MAX_DEPTH) return jfail(p, "nesting deeper than %d", JSON_MAX_DEPTH);
  jws(p);
  c = jpeek(p);
  if (c == '"') return jstring(p, NULL, 0, NULL);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    p->pos++;
    jws(p);
    if (jpeek(p) == close) {
      p->pos++;
      return 1;
    }
    for (;;) {
      if (c == '{') {
        if (!jstring(p, NULL, 0, NULL) || !jexpect(p, ':', "':'")) return 0;
      }
      if (!jskip(p, depth + 1)) return 0;
      jws(p);
      if (jpeek(p) == ',') {
        p->pos++;
        continue;
      }
      if (jpeek(p) == close) {
        p->pos++;
        return 1;
      }
      return jfail(p, "expected ',' or '%c', found %s", close, describe(p));
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    int is_int;
    int64_t iv;
    double dv;
    return jnumber(p, &is_int, &iv, &dv);
  }
  if (c == 't') return jliteral(p, "true");
  if (c == 'f') return jliteral(p, "false");
  if (c == 'n') return jliteral(p, "null");
  return jfail(p, "expected a value, found %s", describe(p));
}

/* An integer in [lo, hi]: 1, or 0 after a parse error, or -1 (position back at the number) when the
   number is not an integer in range, for the caller's message. */
static int jint_in(jparser* p, int64_t lo, int64_t hi, int64_t* out) {
  int is_int;
  double dv;
  size_t at;
  jws(p);
  at = p->pos;
  if (!jnumber(p, &is_int, out, &dv)) return 0;
  if (!is_int || *out < lo || *out > hi) {
    p->pos = at;
    return -1;
  }
  return 1;
}

/* A non-negative integer field (max below 2^63). */
static int jcount(jparser* p, const char* key, uint64_t max, uint64_t* out) {
  int64_t iv;
  const int ok = jint_in(p, 0, (int64_t)max, &iv);
  if (ok < 0) return jfail(p, "\"%s\" must be an integer in [0, %llu]", key, (unsigned long long)max);
  if (ok) *out = (uint64_t)iv;
  return ok;
}

/* An array of integers in [lo, hi] appended to v. */
static int jint_array(jparser* p, const char* key, int64_t lo, int64_t hi, i64vec* v, size_t* count) {
  *count = 0;
  if (!jexpect(p, '[', "'[' (an array of integers)")) return 0;
  jws(p);
  if (jpeek(p) == ']') {
    p->pos++;
    return 1;
  }
  for (;;) {
    int64_t iv;
    const int ok = jint_in(p, lo, hi, &iv);
    if (!ok) return 0;
    if (ok < 0) {
      return jfail(p, "\"%s\"[%zu] must be an integer in [%lld, %lld]", key, *count, (long long)lo,
                   (long long)hi);
    }
    if (!i64vec_push(v, iv)) return jfail(p, "out of memory");
    ++*count;
    jws(p);
    if (jpeek(p) == ',') {
      p->pos++;
      continue;
    }
    if (jpeek(p) == ']') {
      p->pos++;
      return 1;
    }
    return jfail(p, "expected ',' or ']' in \"%s\", found %s", key, describe(p));
  }
}

enum { K_TIMESTAMP = 1, K_INPUT = 2, K_OUTPUT = 4, K_HASH_IDS = 8, K_PROMPT = 16 };

int trace_parse_line(const char* s, size_t len, trace_format fmt, trace* t, trace_request* out, char* err,
                     size_t err_size, size_t* col) {
  jparser p;
  unsigned seen = 0;
  size_t ids_start = t->ids.len, hash_count = 0, prompt_count = 0, hash_off = 0, prompt_off = 0;
  trace_request r;
  memset(&r, 0, sizeof r);
  p.s = s;
  p.len = len;
  p.pos = 0;
  p.err = err;
  p.err_size = err_size;
  p.failed = 0;
  err[0] = '\0';
  jws(&p);
  if (p.pos == len) return 0;
  if (!jexpect(&p, '{', "'{' (one JSON object per line)")) goto fail;
  jws(&p);
  if (jpeek(&p) == '}') {
    p.pos++;
  } else {
    for (;;) {
      char key[64];
      int fits;
      unsigned k = 0;
      size_t key_at;
      jws(&p);
      key_at = p.pos;
      if (!jstring(&p, key, sizeof key, &fits)) goto fail;
      if (!fits) key[0] = '\0'; /* a long key is never one of ours */
      if (!jexpect(&p, ':', "':' after a key")) goto fail;
      if (!strcmp(key, "timestamp")) k = K_TIMESTAMP;
      else if (!strcmp(key, "input_length")) k = K_INPUT;
      else if (!strcmp(key, "output_length")) k = K_OUTPUT;
      else if (!strcmp(key, "hash_ids")) k = K_HASH_IDS;
      else if (!strcmp(key, "prompt")) k = K_PROMPT;
      if (k & seen) {
        p.pos = key_at;
        jfail(&p, "duplicate key \"%s\"", key);
        goto fail;
      }
      seen |= k;
      switch (k) {
        case K_TIMESTAMP: {
          int is_int;
          int64_t iv;
          double dv;
          size_t at;
          jws(&p);
          at = p.pos;
          if (!jnumber(&p, &is_int, &iv, &dv)) goto fail;
          if (!(dv >= 0 && dv < 1e15)) {
            p.pos = at;
            jfail(&p, "\"timestamp\" must be a number of milliseconds in [0, 1e15)");
            goto fail;
          }
          r.timestamp_ms = dv;
          break;
        }
        case K_INPUT:
          if (!jcount(&p, "input_length", TRACE_MAX_PROMPT, &r.input_length)) goto fail;
          break;
        case K_OUTPUT:
          if (!jcount(&p, "output_length", (uint64_t)TRACE_GEN_STRIDE, &r.output_length)) goto fail;
          break;
        case K_HASH_IDS:
          hash_off = t->ids.len;
          if (!jint_array(&p, "hash_ids", 0, TRACE_MAX_HASH_ID, &t->ids, &hash_count)) goto fail;
          break;
        case K_PROMPT:
          prompt_off = t->ids.len;
          if (!jint_array(&p, "prompt", 0, TRACE_GEN_BASE - 1, &t->ids, &prompt_count)) goto fail;
          if (prompt_count > TRACE_MAX_PROMPT) {
            jfail(&p, "\"prompt\" has more than %llu tokens", (unsigned long long)TRACE_MAX_PROMPT);
            goto fail;
          }
          break;
        default:
          if (!jskip(&p, 1)) goto fail;
      }
      jws(&p);
      if (jpeek(&p) == ',') {
        p.pos++;
        continue;
      }
      if (jpeek(&p) == '}') {
        p.pos++;
        break;
      }
      jfail(&p, "expected ',' or '}' in the object, found %s", describe(&p));
      goto fail;
    }
  }
  jws(&p);
  if (p.pos != len) {
    jfail(&p, "unexpected %s after the object", describe(&p));
    goto fail;
  }
  /* Which format is this line? */
  if (fmt == TRACE_AUTO) {
    if ((seen & K_HASH_IDS) && (seen & K_PROMPT)) {
      jfail(&p, "both \"hash_ids\" and \"prompt\": use --format to choose");
      goto fail;
    }
    fmt = (seen & K_HASH_IDS) ? TRACE_MOONCAKE : (seen & K_PROMPT) ? TRACE_TOKENS : TRACE_AUTO;
    if (fmt == TRACE_AUTO) {
      jfail(&p, "neither \"hash_ids\" (Mooncake format) nor \"prompt\" (token-id format)");
      goto fail;
    }
  }
  if (!(seen & K_OUTPUT)) {
    jfail(&p, "missing \"output_length\"");
    goto fail;
  }
  r.format = fmt;
  if (fmt == TRACE_MOONCAKE) {
    uint64_t need;
    if (!(seen & K_HASH_IDS)) {
      jfail(&p, "missing \"hash_ids\" (Mooncake format)");
      goto fail;
    }
    if (!(seen & K_INPUT)) {
      jfail(&p, "missing \"input_length\" (Mooncake format)");
      goto fail;
    }
    need = (r.input_length + TRACE_HASH_BLOCK - 1) / TRACE_HASH_BLOCK;
    if (hash_count < need) {
      jfail(&p, "input_length %llu needs %llu hash_ids, the line has %zu", (unsigned long long)r.input_length,
            (unsigned long long)need, hash_count);
      goto fail;
    }
    r.ids_offset = hash_off;
    r.num_ids = hash_count;
  } else {
    if (!(seen & K_PROMPT)) {
      jfail(&p, "missing \"prompt\" (token-id format)");
      goto fail;
    }
    if ((seen & K_INPUT) && r.input_length != prompt_count) {
      jfail(&p, "input_length %llu differs from the %zu tokens of \"prompt\"", (unsigned long long)r.input_length,
            prompt_count);
      goto fail;
    }
    r.input_length = prompt_count;
    r.ids_offset = prompt_off;
    r.num_ids = prompt_count;
  }
  if (r.input_length == 0) {
    jfail(&p, "empty prompt (input_length 0)");
    goto fail;
  }
  *out = r;
  return 1;
fail:
  t->ids.len = ids_start;
  *col = p.pos + 1;
  return -1;
}

int trace_load(const char* path, trace_format fmt, trace* t) {
  FILE* f;
  char* line = NULL;
  size_t line_cap = 0;
  ssize_t got;
  int ok = 1, is_stdin = !strcmp(path, "-");
  char err[256];
  memset(t, 0, sizeof *t);
  f = is_stdin ? stdin : fopen(path, "rb");
  if (!f) {
    tool_error("%s: cannot open: %s", path, strerror(errno));
    return 0;
  }
  while ((got = getline(&line, &line_cap, f)) >= 0) {
    size_t len = (size_t)got, col = 0;
    int has_newline = len > 0 && line[len - 1] == '\n';
    trace_request r;
    int rc;
    t->num_lines++;
    if (has_newline) len--;
    if (len > 0 && line[len - 1] == '\r') len--;
    rc = trace_parse_line(line, len, fmt, t, &r, err, sizeof err, &col);
    if (rc == 0) continue;
    if (rc < 0) {
      /* A last line without its newline that does not parse was cut short (a trace still being
         written, or a partial copy): report it and go on with the requests before it. */
      int c = has_newline ? EOF : fgetc(f);
      if (!has_newline && c == EOF) {
        fprintf(stderr, "kvblock: %s:%llu: warning: truncated last line ignored (%s at column %zu)\n", path,
                (unsigned long long)t->num_lines, err, col);
        t->truncated_line = t->num_lines;
        break;
      }
      fprintf(stderr, "kvblock: %s:%llu:%zu: error: %s\n", path, (unsigned long long)t->num_lines, col, err);
      ok = 0;
      break;
    }
    r.line = t->num_lines;
    if (t->num_reqs == t->cap_reqs) {
      size_t cap = t->cap_reqs ? t->cap_reqs * 2 : 1024;
      t->reqs = (trace_request*)xrealloc(t->reqs, cap * sizeof *t->reqs);
      t->cap_reqs = cap;
    }
    if (t->num_reqs && t->reqs[0].format != r.format) t->mixed_formats = 1;
    t->reqs[t->num_reqs++] = r;
    t->prompt_tokens += r.input_length;
    t->output_tokens += r.output_length;
    if (r.input_length + r.output_length > t->max_request_tokens)
      t->max_request_tokens = r.input_length + r.output_length;
  }
  if (ok && ferror(f)) {
    tool_error("%s: read error: %s", path, strerror(errno));
    ok = 0;
  }
  free(line);
  if (!is_stdin) fclose(f);
  if (!ok) trace_free(t);
  return ok;
}

void trace_free(trace* t) {
  free(t->reqs);
  i64vec_free(&t->ids);
  memset(t, 0, sizeof *t);
}

void trace_prompt_tokens(const trace* t, size_t r, int64_t* out) {
  const trace_request* q = &t->reqs[r];
  const int64_t* ids = t->ids.data + q->ids_offset;
  uint64_t i;
  if (q->format == TRACE_TOKENS) {
    memcpy(out, ids, q->input_length * sizeof *out);
    return;
  }
  for (i = 0; i < q->input_length; i++)
    out[i] = ids[i / TRACE_HASH_BLOCK] * TRACE_HASH_BLOCK + (int64_t)(i % TRACE_HASH_BLOCK);
}

int64_t trace_output_token(const trace* t, size_t r, uint64_t k) {
  return TRACE_GEN_BASE + (int64_t)(t->reqs[r].line - 1) * TRACE_GEN_STRIDE + (int64_t)k;
}

const char* trace_format_name(int fmt) {
  return fmt == TRACE_MOONCAKE ? "mooncake" : fmt == TRACE_TOKENS ? "tokens" : "auto";
}

int trace_format_parse(const char* name) {
  if (!strcmp(name, "auto")) return TRACE_AUTO;
  if (!strcmp(name, "mooncake")) return TRACE_MOONCAKE;
  if (!strcmp(name, "tokens")) return TRACE_TOKENS;
  return -1;
}
