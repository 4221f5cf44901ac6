/* chart.c - bounded sample series and a dependency-free SVG line chart. */
#include "chart.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

void chart_init(chart* c, size_t max_points) {
  memset(c, 0, sizeof *c);
  c->cap = max_points < 2 ? 4 : 2 * max_points;
  c->t = (double*)xmalloc(c->cap * sizeof(double));
  c->used = (double*)xmalloc(c->cap * sizeof(double));
  c->cached_free = (double*)xmalloc(c->cap * sizeof(double));
  c->hit = (double*)xmalloc(c->cap * sizeof(double));
  c->stride = 1;
}

void chart_free(chart* c) {
  free(c->t);
  free(c->used);
  free(c->cached_free);
  free(c->hit);
  memset(c, 0, sizeof *c);
}

void chart_add(chart* c, double t, double used, double cached_free, double hit) {
  if (c->seen++ % c->stride != 0) return;
  if (c->n == c->cap) { /* keep every other point, sample half as often from now on */
    size_t i, k = 0;
    for (i = 0; i < c->n; i += 2, k++) {
      c->t[k] = c->t[i];
      c->used[k] = c->used[i];
      c->cached_free[k] = c->cached_free[i];
      c->hit[k] = c->hit[i];
    }
    c->n = k;
    c->stride *= 2;
  }
  c->t[c->n] = t;
  c->used[c->n] = used;
  c->cached_free[c->n] = cached_free;
  c->hit[c->n] = hit;
  c->n++;
}

int chart_path_writable(const char* path) {
  struct stat sb;
  char dir[4096];
  const char* slash = strrchr(path, '/');
  if (stat(path, &sb) == 0) {
    if (S_ISDIR(sb.st_mode)) {
      tool_error("--svg %s: is a folder, not a file", path);
      return 0;
    }
    if (access(path, W_OK) != 0) {
      tool_error("--svg %s: cannot write: %s", path, strerror(errno));
      return 0;
    }
    return 1;
  }
  if (!slash) {
    strcpy(dir, ".");
  } else if (slash == path) {
    strcpy(dir, "/");
  } else if ((size_t)(slash - path) < sizeof dir) {
    memcpy(dir, path, (size_t)(slash - path));
    dir[slash - path] = '\0';
  } else {
    tool_error("--svg: path too long");
    return 0;
  }
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    tool_error("--svg %s: folder %s does not exist", path, dir);
    return 0;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    tool_error("--svg %s: cannot create a file in %s: %s", path, dir, strerror(errno));
    return 0;
  }
  return 1;
}

/* A round tick step (1, 2 or 5 times a power of ten) giving about `ticks` intervals up to max. */
static double tick_step(double max, int ticks) {
  double raw, mag, f;
  if (!(max > 0)) return 1.0;
  raw = max / ticks;
  mag = pow(10.0, floor(log10(raw)));
  f = raw / mag;
  return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * mag;
}

/* Digits after the point needed to print multiples of step exactly (0.25 -> 2, 20 -> 0). */
static int step_decimals(double step) {
  int d = 0;
  while (d < 6 && fabs(step * pow(10.0, d) - floor(step * pow(10.0, d) + 0.5)) > 1e-9) d++;
  return d;
}

/* v with `decimals` digits after the point and thousands separators in its integer part (28,672). */
static void print_number(FILE* f, double v, int decimals) {
  char num[64];
  int n = snprintf(num, sizeof num, "%.*f", decimals, v), start = num[0] == '-', int_end = start, i;
  while (int_end < n && num[int_end] != '.') int_end++;
  for (i = 0; i < n; i++) {
    if (i > start && i < int_end && (int_end - i) % 3 == 0) fputc(',', f);
    fputc(num[i], f);
  }
}

static void escape(FILE* f, const char* s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

#define W 960.0
#define H 420.0
#define L 80.0  /* plot area margins */
#define R 70.0
#define T 50.0
#define B 60.0

static void polyline(FILE* f, const chart* c, const double* y, double ymax, double tmax, const char* colour,
                     const char* extra) {
  size_t i;
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", colour, extra);
  for (i = 0; i < c->n; i++) {
    double x = L + (W - L - R) * (tmax > 0 ? c->t[i] / tmax : 0.0);
    double v = ymax > 0 ? y[i] / ymax : 0.0;
    if (v > 1) v = 1;
    if (v < 0) v = 0;
    fprintf(f, "%s%.1f,%.1f", i ? " " : "", x, T + (H - T - B) * (1.0 - v));
  }
  fputs("\"/>\n", f);
}

int chart_write_svg(const chart* c, const char* path, const char* title, double num_blocks, unsigned block_size) {
  FILE* f = fopen(path, "w");
  double tmax = c->n ? c->t[c->n - 1] : 0.0, hmax = 0.0, bstep, tstep, hstep, v;
  size_t k;
  int i;
  if (!f) {
    tool_error("%s: cannot write: %s", path, strerror(errno));
    return 0;
  }
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"%.0f\" y=\"24\" font-size=\"15\">", L);
  escape(f, title);
  fputs("</text>\n", f);
  /* What the left axis is out of: the pool the run was given. */
  fprintf(f, "<text x=\"%.0f\" y=\"42\" fill=\"#444\">pool: ", L);
  print_number(f, num_blocks, 0);
  fprintf(f, " blocks of %u tokens (", block_size);
  print_number(f, num_blocks * block_size, 0);
  fputs(" tokens of K/V); the left axis runs from 0 to the whole pool</text>\n", f);
  /* Grid and axes: left = blocks (0 to the pool size), right = hit ratio (0 to a round value just above
     its largest sample, so that a 5% line is not flat), bottom = simulated seconds; ticks at 1-2-5 steps. */
  for (k = 0; k < c->n; k++)
    if (c->hit[k] > hmax) hmax = c->hit[k];
  hstep = tick_step(hmax > 0 ? hmax : 1.0, 4);
  hmax = hmax > 0 ? ceil(hmax / hstep - 1e-9) * hstep : 1.0;
  if (hmax > 1.0) hmax = 1.0;
  bstep = tick_step(num_blocks, 5);
  tstep = tick_step(tmax, 6);
  for (i = 0; (v = i * bstep) <= num_blocks * (1 + 1e-9); i++) {
    double y = T + (H - T - B) * (1.0 - (num_blocks > 0 ? v / num_blocks : 0));
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, W - R, y);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", L - 6, y + 4);
    print_number(f, v, step_decimals(bstep));
    fputs("</text>\n", f);
  }
  if (num_blocks > 0 && floor(num_blocks / bstep + 1e-9) * bstep < 0.93 * num_blocks) /* label the pool's top */
  {
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", L - 6, T + 4);
    print_number(f, num_blocks, 0);
    fputs("</text>\n", f);
  }
  for (i = 0; (v = i * hstep) <= hmax * (1 + 1e-9); i++) {
    double y = T + (H - T - B) * (1.0 - v / hmax);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#2ca02c\"/>\n", W - R, y, W - R + 4,
            y);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">%.*f%%</text>\n", W - R + 6, y + 4, step_decimals(hstep * 100),
            v * 100);
  }
  for (i = 0; tmax > 0 && (v = i * tstep) <= tmax * (1 + 1e-9); i++) {
    double x = L + (W - L - R) * v / tmax;
    fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">", x, H - B + 18);
    print_number(f, v, step_decimals(tstep));
    fputs("</text>\n", f);
  }
  fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#444\"/>\n", L, T,
          W - L - R, H - T - B);
  /* Right-aligned, so that it clears the legend on the left of the same line. */
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">simulated time (s)</text>\n", W - R, H - 16);
  fprintf(f, "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" text-anchor=\"middle\">blocks</text>\n",
          (T + H - B) / 2, (T + H - B) / 2);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" transform=\"rotate(90 %.0f %.0f)\" text-anchor=\"middle\">hit ratio</text>\n",
          W - 20, (T + H - B) / 2, W - 20, (T + H - B) / 2);
  polyline(f, c, c->used, num_blocks, tmax, "#1f77b4", " id=\"used\"");
  polyline(f, c, c->cached_free, num_blocks, tmax, "#ff7f0e", " id=\"cached_free\"");
  polyline(f, c, c->hit, hmax, tmax, "#2ca02c", " id=\"hit_ratio\" stroke-dasharray=\"5,3\"");
  /* Legend. */
  fprintf(f, "<g transform=\"translate(%.0f,%.0f)\">\n", L + 10, H - 16);
  fputs("<line x1=\"0\" y1=\"-4\" x2=\"20\" y2=\"-4\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"25\" y=\"0\">blocks in use</text>\n"
        "<line x1=\"140\" y1=\"-4\" x2=\"160\" y2=\"-4\" stroke=\"#ff7f0e\" stroke-width=\"2\"/><text x=\"165\" y=\"0\">free blocks still holding a cached prefix</text>\n"
        "<line x1=\"440\" y1=\"-4\" x2=\"460\" y2=\"-4\" stroke=\"#2ca02c\" stroke-width=\"2\" stroke-dasharray=\"5,3\"/><text x=\"465\" y=\"0\">running hit ratio (right axis)</text>\n"
        "</g>\n</svg>\n", f);
  if (fclose(f) != 0) {
    tool_error("%s: write error: %s", path, strerror(errno));
    return 0;
  }
  return 1;
}
