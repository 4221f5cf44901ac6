// Kernel benchmark: decode attention, copy_blocks and swap_blocks against measured copy ceilings.
//   kernels_bench [--device auto|cpu|cuda] [--reps N] [--ctx-scale X]
// auto = cuda when a device is usable, else cpu. The CPU run scales contexts by 1/8 unless --ctx-scale.
// Every timed buffer (K, V, q, copy sources) is filled with random data first, so reads hit real memory.
// Timing: one warm-up, then --reps calls; figures are per call. CPU: each call timed on its own, median
// with [min-max] over the reps. CUDA: the reps calls are captured in one graph, replayed once to warm
// up, then kReplays times, each replay timed with events; median with [min-max] over the replays.
// Bandwidth convention: a copy of N bytes moves 2N bytes (read + write), so "copy GB/s" is 2N / t;
// attention moves the K+V bytes it reads; copy_blocks / swap_blocks count 2x the block bytes on one
// device (read + write) and 1x across PCIe (the ceiling there is the one-way pinned transfer rate).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvblock.h"
#include "../libkvblock/error.h"
#if KVB_WITH_CUDA
#include "../kernels/devutil.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Makes the compiler assume the memory behind p is read and written here, so stores into a buffer that
// is never read again (a memcpy destination freed afterwards) are not optimised away.
inline void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

constexpr int kReplays = 5;  // CUDA: timed graph replays

void need(kvb_status s, const char* what) {
  if (s != KVB_OK) {
    fprintf(stderr, "%s: %s (%s)\n", what, kvb_status_string(s), kvb_last_error());
    exit(1);
  }
}

struct Shape {
  int batch, ctx;
};
const Shape kShapes[] = {{1, 4096}, {32, 4096}, {64, 8192}, {128, 2048}, {16, 32768}};
constexpr int Hq = 32, Hkv = 8, D = 128, BS = 16;
constexpr size_t kBlockBytes = size_t(BS) * Hkv * D * 2;  // fp16, one of K or V

// Device-agnostic buffers: host memory for CPU, cudaMalloc for CUDA.
struct Mem {
  bool cuda;
  void* alloc(size_t n) {
#if KVB_WITH_CUDA
    if (cuda) return kvb::kern::devutil::device_malloc(n);
#endif
    void* p = std::aligned_alloc(256, (n + 255) / 256 * 256);
    if (!p) {
      fprintf(stderr, "out of host memory (%zu bytes)\n", n);
      exit(1);
    }
    memset(p, 0, n);
    escape(p);  // the pages are touched (faulted in) now, not inside a timed call
    return p;
  }
  void release(void* p) {
#if KVB_WITH_CUDA
    if (cuda) return kvb::kern::devutil::device_free(p);
#endif
    std::free(p);
  }
  void upload(void* dst, const void* src, size_t n) {
#if KVB_WITH_CUDA
    if (cuda) return kvb::kern::devutil::copy(dst, src, n);
#endif
    memcpy(dst, src, n);
    escape(dst);
  }
};

// Random fp16 values of magnitude 1/8..1 (no zeros, denormals, infinities or NaNs), 4 per step.
struct Rand16 {
  uint64_t x;
  explicit Rand16(uint64_t seed) : x(seed * 0x9E3779B97F4A7C15ull + 1) {}
  void fill(uint16_t* p, size_t n) {
    for (size_t i = 0; i < n; i += 4) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      for (size_t j = 0; j < 4 && i + j < n; ++j) {
        const uint16_t r = uint16_t(x >> (16 * j));
        const uint16_t exp = uint16_t(12 + (r >> 10) % 3);  // 2^-3 .. 2^-1
        p[i + j] = uint16_t((r & 0x8000u) | (exp << 10) | (r & 0x3ffu));
      }
    }
  }
};

// Fills n bytes (a whole number of fp16 values) at dst, which lives on m's device, with random data.
// Host memory is written in place; device memory from a 64 MiB host chunk uploaded repeatedly.
void fill_random(Mem& m, void* dst, size_t n, uint64_t seed) {
  Rand16 r(seed);
  if (!m.cuda) {
    r.fill(static_cast<uint16_t*>(dst), n / 2);
    escape(dst);
    return;
  }
  const size_t chunk = std::min(n, size_t(64) << 20);
  std::vector<uint16_t> h(chunk / 2 + 1);
  r.fill(h.data(), h.size());
  for (size_t off = 0; off < n; off += chunk) m.upload(static_cast<char*>(dst) + off, h.data(), std::min(chunk, n - off));
}

void fill_cache(Mem& m, const kvb_cache_desc& c, uint64_t seed) {
  const size_t bytes = size_t(c.num_blocks) * size_t(c.block_stride) * 2;  // fp16, dense
  fill_random(m, c.k, bytes, seed);
  fill_random(m, c.v, bytes, seed + 1);
}

// Per-call seconds: median and range over the timed samples.
struct Timing {
  double med, lo, hi;
};

Timing summarise(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  const double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  return {med, t.front(), t.back()};
}

// Runs fn once to warm up, then reps timed calls; returns seconds per call. CPU: every call is timed
// on its own. CUDA: the reps calls are captured in a graph, replayed once to warm up and then kReplays
// times, each replay timed with events (per call = replay time / reps).
template <class Fn>
Timing time_calls(bool cuda, int reps, Fn fn) {
  reps = std::max(reps, 1);
#if KVB_WITH_CUDA
  if (cuda) {
    namespace du = kvb::kern::devutil;
    void* s = du::stream_create();
    fn(s);  // warm up
    du::stream_sync(s);
    du::capture_begin(s);
    for (int i = 0; i < reps; ++i) fn(s);
    void* g = du::capture_end(s);
    du::graph_launch(g, s);
    void* e0 = du::event_create();
    void* e1 = du::event_create();
    std::vector<double> t;
    for (int r = 0; r < kReplays; ++r) {
      du::event_record(e0, s);
      du::graph_launch(g, s);
      du::event_record(e1, s);
      t.push_back(du::event_elapsed_ms(e0, e1) / 1e3 / reps);
    }
    du::event_destroy(e0);
    du::event_destroy(e1);
    du::graph_destroy(g);
    du::stream_destroy(s);
    return summarise(t);
  }
#endif
  fn(nullptr);  // warm up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn(nullptr);
    t.push_back(secs(t0, Clock::now()));
  }
  return summarise(t);
}

// Copy ceiling on this device: 2 * bytes / t for a large copy (read + write). The source holds random
// data and both buffers are touched before timing; on the CPU the destination escapes after every copy
// (so the memcpy cannot be removed) and is checked against the source at the end.
Timing copy_ceiling(Mem& m, int reps) {
  const size_t n = size_t(512) << 20;
  void* a = m.alloc(n);
  void* b = m.alloc(n);
  fill_random(m, a, n, 7);
  const Timing t = time_calls(m.cuda, reps, [&](void* s) {
#if KVB_WITH_CUDA
    if (m.cuda) return kvb::kern::devutil::copy_async(b, a, n, s);
#endif
    (void)s;
    memcpy(b, a, n);
    escape(b);
  });
  if (!m.cuda && memcmp(a, b, n) != 0) {
    fprintf(stderr, "copy ceiling: destination differs from source\n");
    exit(1);
  }
  m.release(a);
  m.release(b);
  return t;
}

// GB/s for bytes moved per call: {median, from the slowest call, from the fastest call}.
struct Rate {
  double med, lo, hi;
};
Rate rate(double bytes, const Timing& t) { return {bytes / t.med / 1e9, bytes / t.hi / 1e9, bytes / t.lo / 1e9}; }

kvb_cache_desc make_cache(Mem& m, uint32_t num_blocks) {
  kvb_cache_desc c;
  kvb_cache_desc_init(&c);
  c.device_type = m.cuda ? KVB_DEVICE_CUDA : KVB_DEVICE_CPU;
  c.dtype = KVB_DTYPE_FP16;
  c.num_blocks = num_blocks;
  c.block_size = BS;
  c.num_kv_heads = Hkv;
  c.head_dim = D;
  need(kvb_cache_alloc(&c), "kvb_cache_alloc");
  return c;
}

void bench_attention(Mem& m, int reps, const Rate& ceiling, double scale_ctx) {
  printf("\n| decode attention fp16 Hq=%d Hkv=%d D=%d block=%d | batch | context | us | us min-max | K+V GB/s | of copy |\n",
         Hq, Hkv, D, BS);
  printf("|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  uint64_t seed = 100;
  for (const Shape& sh : kShapes) {
    const int ctx = std::max(BS, int(sh.ctx * scale_ctx) / BS * BS);  // whole blocks
    const int max_blocks = ctx / BS;
    const uint32_t nblocks = uint32_t(sh.batch * max_blocks);
    kvb_cache_desc c = make_cache(m, nblocks);
    fill_cache(m, c, seed += 2);
    std::vector<int32_t> table(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<int32_t> lens(size_t(sh.batch), ctx);
    std::vector<uint16_t> q(size_t(sh.batch) * Hq * D);
    Rand16(seed += 2).fill(q.data(), q.size());
    void* dq = m.alloc(q.size() * 2);
    void* dout = m.alloc(q.size() * 2);
    void* dt = m.alloc(table.size() * 4);
    void* dl = m.alloc(lens.size() * 4);
    m.upload(dq, q.data(), q.size() * 2);
    m.upload(dt, table.data(), table.size() * 4);
    m.upload(dl, lens.data(), lens.size() * 4);
    kvb_attention_args a;
    kvb_attention_args_init(&a);
    a.num_seqs = uint32_t(sh.batch);
    a.num_q_heads = Hq;
    a.max_blocks_per_seq = uint32_t(max_blocks);
    a.q = dq;
    a.out = dout;
    a.block_tables = static_cast<int32_t*>(dt);
    a.seq_lens = static_cast<int32_t*>(dl);
    need(kvb_paged_attention_workspace_size(&c, &a, &a.workspace_size), "workspace size");
    a.workspace = a.workspace_size ? m.alloc(a.workspace_size) : nullptr;
    const Timing t = time_calls(m.cuda, reps, [&](void* s) {
      need(kvb_paged_attention(&c, &a, s), "attention");
      if (!m.cuda) escape(dout);
    });
    const double bytes = double(sh.batch) * ctx * Hkv * D * 2 /* fp16 */ * 2 /* K and V */;  // read once each
    const Rate r = rate(bytes, t);
    printf("| | %d | %d | %.1f | %.1f-%.1f | %.1f | %.0f%% |\n", sh.batch, ctx, t.med * 1e6, t.lo * 1e6, t.hi * 1e6,
           r.med, 100.0 * r.med / ceiling.med);
    fflush(stdout);
    if (a.workspace) m.release(a.workspace);
    m.release(dq);
    m.release(dout);
    m.release(dt);
    m.release(dl);
    need(kvb_cache_free(&c), "kvb_cache_free");
  }
}

std::vector<int32_t> random_pairs(uint32_t num_blocks, int n, bool contiguous, std::mt19937& rng) {
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  if (!contiguous) std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> pairs;
  for (int i = 0; i < n; ++i) {
    pairs.push_back(ids[size_t(i)]);
    pairs.push_back(ids[size_t(n + i)]);
  }
  return pairs;
}

void print_blocks_row(const char* what, const char* method, const Timing& t, const Rate& r, double ceiling,
                      const char* of) {
  printf("| %s | %s | %.1f | %.1f-%.1f | %.1f | %.0f%% of %s |\n", what, method, t.med * 1e6, t.lo * 1e6, t.hi * 1e6,
         r.med, 100.0 * r.med / ceiling, of);
  fflush(stdout);
}

void bench_copy_swap(Mem& m, int reps, const Rate& ceiling) {
  const int layers = 8, n = 512;
  const uint32_t nblocks = 2 * n + 16;
  std::mt19937 rng(2);
  std::vector<kvb_cache_desc> dev(layers), host(layers);
  Mem h{false};
  uint64_t seed = 1000;
  for (auto& c : dev) {
    c = make_cache(m, nblocks);
    fill_cache(m, c, seed += 2);
  }
  for (auto& c : host) {
    c = make_cache(h, nblocks);  // page-locked when a CUDA device is usable
    fill_cache(h, c, seed += 2);
  }
  const double moved = double(layers) * n * 2 * kBlockBytes;  // block bytes (K+V) per call
  printf("\n| blocks: %d layers x %d pairs x %.0f KiB (K+V) | method | us | us min-max | GB/s | of ceiling |\n", layers, n,
         2 * kBlockBytes / 1024.0);
  printf("|---|---|---|---|---|---|\n");
  for (bool contiguous : {false, true}) {
    auto pairs = random_pairs(nblocks, n, contiguous, rng);
    const Timing t = time_calls(m.cuda, reps, [&](void* s) {
      need(kvb_copy_blocks(dev.data(), layers, pairs.data(), size_t(n), s), "copy_blocks");
      if (!m.cuda) escape(dev[0].k);
    });
    print_blocks_row(contiguous ? "copy_blocks (runs)" : "copy_blocks (random)", m.cuda ? "kernel" : "memcpy", t,
                     rate(2 * moved, t), ceiling.med, "copy");
  }
  double pcie = ceiling.med / 2;
#if KVB_WITH_CUDA
  if (m.cuda) {  // one-way pinned transfer ceiling
    const size_t bytes = size_t(256) << 20;
    void* d = m.alloc(bytes);
    void* p = kvb::kern::devutil::pinned_malloc(bytes);
    fill_random(m, d, bytes, 9);
    fill_random(h, p, bytes, 10);
    const Timing t1 = time_calls(true, reps, [&](void* s) { kvb::kern::devutil::copy_async(p, d, bytes, s); });
    const Timing t2 = time_calls(true, reps, [&](void* s) { kvb::kern::devutil::copy_async(d, p, bytes, s); });
    const Rate r1 = rate(double(bytes), t1), r2 = rate(double(bytes), t2);
    printf("| pinned cudaMemcpyAsync 256 MiB | D2H %.1f GB/s (%.1f-%.1f), H2D %.1f GB/s (%.1f-%.1f) | | | | |\n", r1.med,
           r1.lo, r1.hi, r2.med, r2.lo, r2.hi);
    pcie = std::min(r1.med, r2.med);
    kvb::kern::devutil::pinned_free(p);
    m.release(d);
  }
#endif
  for (bool contiguous : {false, true})
    for (uint32_t flags : {KVB_SWAP_USE_MEMCPY, KVB_SWAP_USE_KERNEL, KVB_SWAP_AUTO}) {
      if (!m.cuda && flags != KVB_SWAP_AUTO) continue;
      auto pairs = random_pairs(nblocks, n, contiguous, rng);
      for (int dir = 0; dir < 2; ++dir) {
        const kvb_cache_desc* src = dir == 0 ? dev.data() : host.data();
        const kvb_cache_desc* dst = dir == 0 ? host.data() : dev.data();
        const Timing t = time_calls(m.cuda, reps, [&](void* s) {
          need(kvb_swap_blocks(src, dst, layers, pairs.data(), size_t(n), flags, s), "swap_blocks");
          if (!m.cuda) escape(dst[0].k);
        });
        // Across PCIe the bytes cross once (vs the one-way pinned rate); on the CPU read + write (vs memcpy).
        const Rate r = rate(m.cuda ? moved : 2 * moved, t);
        const char* method = flags == KVB_SWAP_USE_MEMCPY ? "memcpy" : flags == KVB_SWAP_USE_KERNEL ? "kernel" : "auto";
        char what[64];
        snprintf(what, sizeof what, "swap %s (%s)", dir == 0 ? "out" : "in", contiguous ? "runs" : "random");
        print_blocks_row(what, method, t, r, m.cuda ? pcie : ceiling.med, m.cuda ? "pinned" : "memcpy");
      }
    }
  for (auto& c : dev) need(kvb_cache_free(&c), "free");
  for (auto& c : host) need(kvb_cache_free(&c), "free");
}

}  // namespace

int main(int argc, char** argv) {
  int32_t ndev = 0;
  bool cuda = kvb_cuda_device_count(&ndev) == KVB_OK && ndev > 0;
  int reps = 20;
  double scale_ctx = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      const char* d = argv[++i];
      if (strcmp(d, "auto")) cuda = !strcmp(d, "cuda");
    }
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
      if (reps < 1) {
        fprintf(stderr, "--reps must be >= 1\n");
        return 2;
      }
    }
    else if (!strcmp(argv[i], "--ctx-scale") && i + 1 < argc) scale_ctx = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--device auto|cpu|cuda] [--reps N] [--ctx-scale X]\n", argv[0]);
      return 2;
    }
  }
  if (scale_ctx <= 0) scale_ctx = cuda ? 1.0 : 0.125;
  try {
    Mem m{cuda};
    char date[32];
    const time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    if (cuda) {
      int32_t n = 0;
      if (kvb_cuda_device_count(&n) != KVB_OK || n == 0) {
        fprintf(stderr, "no CUDA device: %s\n", kvb_last_error());
        return 1;
      }
#if KVB_WITH_CUDA
      printf("device: %s, libkvblock %s, %s\n", kvb::kern::devutil::device_name(0), kvb_version_string(), date);
#endif
    } else {
      printf("device: CPU (%u hardware threads: attention calls reading >= 1 MiB use them all, memcpy and "
             "copy/swap one), libkvblock %s, %s\n", std::thread::hardware_concurrency(), kvb_version_string(), date);
    }
    if (cuda)
      printf("timing: %d calls captured in a CUDA graph, 1 warm-up replay + %d timed; per call: median, min-max of "
             "the replays\n", reps, kReplays);
    else
      printf("timing: 1 warm-up call + %d timed; per call: median, min-max of the calls\n", reps);
    const Timing tc = copy_ceiling(m, reps);
    const Rate ceiling = rate(2.0 * double(size_t(512) << 20), tc);
    printf("copy ceiling (%s, 512 MiB, read+write): %.1f GB/s (%.1f-%.1f)\n", cuda ? "cudaMemcpyAsync D2D" : "memcpy",
           ceiling.med, ceiling.lo, ceiling.hi);
    bench_attention(m, reps, ceiling, scale_ctx);
    bench_copy_swap(m, reps, ceiling);
  } catch (const kvb::Error& e) {
    fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
