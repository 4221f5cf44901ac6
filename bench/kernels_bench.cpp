// Kernel benchmark: decode attention, copy_blocks and swap_blocks against measured copy ceilings.
//   kernels_bench [--device auto|cpu|cuda] [--reps N] [--ctx-scale X]
// auto = cuda when a device is usable, else cpu. The CPU run scales contexts by 1/8 unless --ctx-scale.
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
#include <vector>

#include "kvblock.h"
#include "../libkvblock/error.h"
#if KVB_WITH_CUDA
#include "../kernels/devutil.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

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
    memset(p, 0, n);
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
  }
};

// Runs fn reps times; returns seconds per call. CUDA: the calls are captured in a graph and replayed.
template <class Fn>
double time_calls(bool cuda, int reps, Fn fn) {
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
    du::event_record(e0, s);
    du::graph_launch(g, s);
    du::event_record(e1, s);
    const double ms = du::event_elapsed_ms(e0, e1);
    du::event_destroy(e0);
    du::event_destroy(e1);
    du::graph_destroy(g);
    du::stream_destroy(s);
    return ms / 1e3 / reps;
  }
#endif
  fn(nullptr);
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) fn(nullptr);
  return secs(t0, Clock::now()) / reps;
}

// Copy ceiling on this device: 2 * bytes / t for a large copy.
double copy_ceiling(Mem& m, int reps) {
  const size_t n = size_t(512) << 20;
  void* a = m.alloc(n);
  void* b = m.alloc(n);
  const double t = time_calls(m.cuda, reps, [&](void* s) {
#if KVB_WITH_CUDA
    if (m.cuda) return kvb::kern::devutil::copy_async(b, a, n, s);
#endif
    (void)s;
    memcpy(b, a, n);
  });
  m.release(a);
  m.release(b);
  return 2.0 * double(n) / t / 1e9;
}

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

void bench_attention(Mem& m, int reps, double ceiling, double scale_ctx) {
  printf("\n| decode attention fp16 Hq=%d Hkv=%d D=%d block=%d | batch | context | us | K+V GB/s | of copy |\n", Hq, Hkv, D, BS);
  printf("|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  for (const Shape& sh : kShapes) {
    const int ctx = std::max(BS, int(sh.ctx * scale_ctx));
    const int max_blocks = ctx / BS;
    const uint32_t nblocks = uint32_t(sh.batch * max_blocks);
    kvb_cache_desc c = make_cache(m, nblocks);
    std::vector<int32_t> table(nblocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<int32_t> lens(size_t(sh.batch), ctx);
    std::vector<uint16_t> q(size_t(sh.batch) * Hq * D, 0x3c00);
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
    const double t = time_calls(m.cuda, m.cuda ? reps : 1, [&](void* s) { need(kvb_paged_attention(&c, &a, s), "attention"); });
    const double bytes = double(sh.batch) * ctx * Hkv * D * 2 * 2;
    const double gbs = bytes / t / 1e9;
    printf("| | %d | %d | %.1f | %.1f | %.0f%% |\n", sh.batch, ctx, t * 1e6, gbs, 100.0 * gbs / ceiling);
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

void bench_copy_swap(Mem& m, int reps, double ceiling) {
  const int layers = 8, n = 512;
  const uint32_t nblocks = 2 * n + 16;
  std::mt19937 rng(2);
  std::vector<kvb_cache_desc> dev(layers), host(layers);
  for (auto& c : dev) c = make_cache(m, nblocks);
  Mem h{false};
  for (auto& c : host) c = make_cache(h, nblocks);  // page-locked when a CUDA device is usable
  const double moved = double(layers) * n * 2 * kBlockBytes;
  printf("\n| blocks: %d layers x %d pairs x %.0f KiB (K+V) | method | us | GB/s | of ceiling |\n", layers, n,
         2 * kBlockBytes / 1024.0);
  printf("|---|---|---|---|---|\n");
  for (bool contiguous : {false, true}) {
    auto pairs = random_pairs(nblocks, n, contiguous, rng);
    const double t = time_calls(m.cuda, m.cuda ? reps : 2, [&](void* s) {
      need(kvb_copy_blocks(dev.data(), layers, pairs.data(), size_t(n), s), "copy_blocks");
    });
    printf("| copy_blocks (%s) | %s | %.1f | %.1f | %.0f%% of copy |\n", contiguous ? "runs" : "random", m.cuda ? "kernel" : "memcpy", t * 1e6,
           2 * moved / t / 1e9, 100.0 * 2 * moved / t / 1e9 / ceiling);
  }
  double pcie = ceiling / 2;
#if KVB_WITH_CUDA
  if (m.cuda) {  // one-way pinned transfer ceiling
    const size_t bytes = size_t(256) << 20;
    void* d = m.alloc(bytes);
    void* p = kvb::kern::devutil::pinned_malloc(bytes);
    const double t1 = time_calls(true, reps, [&](void* s) { kvb::kern::devutil::copy_async(p, d, bytes, s); });
    const double t2 = time_calls(true, reps, [&](void* s) { kvb::kern::devutil::copy_async(d, p, bytes, s); });
    printf("| pinned cudaMemcpyAsync 256 MiB | D2H %.1f GB/s, H2D %.1f GB/s | | | |\n", bytes / t1 / 1e9, bytes / t2 / 1e9);
    pcie = std::min(bytes / t1, bytes / t2) / 1e9;
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
        const double t = time_calls(m.cuda, m.cuda ? reps : 2, [&](void* s) {
          need(kvb_swap_blocks(src, dst, layers, pairs.data(), size_t(n), flags, s), "swap_blocks");
        });
        const double gbs = (m.cuda ? moved : 2 * moved) / t / 1e9;
        const char* method = flags == KVB_SWAP_USE_MEMCPY ? "memcpy" : flags == KVB_SWAP_USE_KERNEL ? "kernel" : "auto";
        printf("| swap %s (%s) | %s | %.1f | %.1f | %.0f%% of %s |\n", dir == 0 ? "out" : "in", contiguous ? "runs" : "random",
               method, t * 1e6, gbs, 100.0 * gbs / (m.cuda ? pcie : ceiling), m.cuda ? "pinned" : "memcpy");
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
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
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
      printf("device: CPU (1 thread), libkvblock %s, %s\n", kvb_version_string(), date);
    }
    const double ceiling = copy_ceiling(m, cuda ? reps : 3);
    printf("copy ceiling (%s, 512 MiB, read+write): %.1f GB/s\n", cuda ? "cudaMemcpyAsync D2D" : "memcpy", ceiling);
    bench_attention(m, reps, ceiling, scale_ctx);
    bench_copy_swap(m, reps, ceiling);
  } catch (const kvb::Error& e) {
    fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
