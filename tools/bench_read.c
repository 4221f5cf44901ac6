/* bench_read.c - see bench_read.h. */
#include "bench_read.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define MAX_THREADS 64

typedef struct share {
  const uint64_t* p;
  size_t words;
  uint64_t sum;
} share;

/* Eight independent sums: enough loads in flight to stream, and vectorisable by the compiler. */
static void* sum_share(void* arg) {
  share* s = (share*)arg;
  uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i, j;
  for (i = 0; i + 8 <= s->words; i += 8)
    for (j = 0; j < 8; j++) acc[j] += s->p[i + j];
  for (; i < s->words; i++) acc[0] += s->p[i];
  s->sum = 0;
  for (j = 0; j < 8; j++) s->sum += acc[j];
  return NULL;
}

int read_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (n > MAX_THREADS ? MAX_THREADS : (int)n);
}

uint64_t read_all(const unsigned char* buf, size_t n, int threads, int* ok) {
  share shares[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  int started[MAX_THREADS];
  size_t words = n / 8, per;
  uint64_t sum = 0;
  int t;
  if (threads < 1) threads = 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  per = (words + (size_t)threads - 1) / (size_t)threads;
  for (t = 0; t < threads; t++) {
    size_t first = per * (size_t)t;
    shares[t].p = (const uint64_t*)(const void*)buf + (first < words ? first : words);
    shares[t].words = first >= words ? 0 : (words - first < per ? words - first : per);
    started[t] = t > 0 && pthread_create(&tid[t], NULL, sum_share, &shares[t]) == 0;
  }
  /* The caller reads share 0, and any share whose thread did not start. */
  for (t = 0; t < threads; t++)
    if (!started[t]) sum_share(&shares[t]);
  for (t = 0; t < threads; t++) {
    if (started[t]) pthread_join(tid[t], NULL);
    sum += shares[t].sum;
  }
  *ok = 1;
  return sum;
}
