// CUDA copy_blocks / swap_blocks. Two methods:
//  - a copy kernel over every (pair, layer, K|V) block at once; the block pairs and layer pointers travel
//    in the kernel parameters (no device buffer, CUDA-graph capturable), in as few launches as fit;
//    host memory must be page-locked (it is read or written through its mapped device address);
//  - batched cudaMemcpy(2D)Async with runs of consecutive blocks merged (DMA engines; any host memory).
// Copies on one device and swaps of small runs use the kernel; large contiguous runs use memcpy.
#include <algorithm>
#include <climits>
#include <vector>

#include "../../abi/kvblock.h"
#include "../common/cache.h"
#include "copy.h"
#include "../common/cuda.cuh"

namespace kvb {
namespace kern {
namespace cuda {

namespace {

// Block pairs and layer pointers travel in the kernel parameters. Above 4 KB of parameters a kernel needs
// CUDA 12.1+ at build time and a driver of 12.1+ at run time (else the launch fails); the small layout
// stays below 4 KB and works everywhere, at the cost of more launches.
template <int kLayers, int kPairs>
struct CopyParams {
  static constexpr int max_layers = kLayers;  // per launch
  static constexpr int max_pairs = kPairs;    // per launch
  char* src[kLayers][2];  // [layer][K, V]
  char* dst[kLayers][2];
  int32_t pairs[kPairs][2];
  PagedKv src_kv, dst_kv;  // bytes
  int64_t block_bytes;  // dense path: bytes of one block
  int heads, rows_chunks, chunks_per_row;
  int dense;  // both sides dense in the same order: one linear run per block
  int num_pairs, num_layers;  // of this launch: units = num_pairs * num_layers * 2 (K, V)
};
using SmallParams = CopyParams<16, 384>;
static_assert(sizeof(SmallParams) <= 4096, "SmallParams must fit the classic 4 KB kernel parameter limit");
#if CUDART_VERSION >= 12010
#define KVB_LARGE_COPY_PARAMS 1
using LargeParams = CopyParams<128, 2048>;
static_assert(sizeof(LargeParams) <= 32764, "LargeParams must fit the 32 KB kernel parameter limit");
#endif

// One CTA per (pair, layer, K|V) unit, or fewer CTAs striding over the units: a copy over mapped host
// memory runs at PCIe speed, which a few dozen CTAs saturate, so its grid is bounded to leave the SMs to
// the caller's compute kernels.
template <typename W, class P>
__global__ void __launch_bounds__(256) copy_kernel(const P p) {
  const int units = p.num_pairs * p.num_layers * 2;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int pair = u % p.num_pairs, rest = u / p.num_pairs, layer = rest >> 1, kv = rest & 1;
    const char* src = p.src[layer][kv] + p.src_kv.block(p.pairs[pair][0]);
    char* dst = p.dst[layer][kv] + p.dst_kv.block(p.pairs[pair][1]);
    if (p.dense) {
      const int64_t n = p.block_bytes / int64_t(sizeof(W));
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        reinterpret_cast<W*>(dst)[i] = reinterpret_cast<const W*>(src)[i];
      continue;
    }
    for (int i = threadIdx.x; i < p.rows_chunks; i += blockDim.x) {
      const int row = i / p.chunks_per_row, c = i - row * p.chunks_per_row;
      const int t = row / p.heads, h = row - t * p.heads;
      *reinterpret_cast<W*>(dst + t * p.dst_kv.token_stride + p.dst_kv.head(h) + int64_t(c) * sizeof(W)) =
          *reinterpret_cast<const W*>(src + t * p.src_kv.token_stride + p.src_kv.head(h) + int64_t(c) * sizeof(W));
    }
  }
}

// CTAs of a copy that reads or writes mapped host memory (see copy_kernel).
constexpr int kHostCopyCtas = 48;

// Device-usable address of a cache tensor (mapped address for page-locked host memory); nullptr when
// the memory is pageable host memory.
char* device_address(const void* p, int device, const char* what) {
  const cudaPointerAttributes attr = pointer_attributes(p, what);
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      if (attr.device != device)
        fail(Code::invalid_argument, "%s is on CUDA device %d, expected device %d", what, attr.device, device);
      return static_cast<char*>(attr.devicePointer);
    case cudaMemoryTypeManaged:
      return static_cast<char*>(const_cast<void*>(p));
    case cudaMemoryTypeHost:
      if (!attr.devicePointer) return nullptr;
      return static_cast<char*>(attr.devicePointer);
    default:
      return nullptr;
  }
}

bool same_dense_order(const Cache& s, const Cache& d) {
  return s.block_dense() && d.block_dense() && s.token_stride == d.token_stride && s.head_stride == d.head_stride;
}

// Fills the parameters and launches one kernel per (layer chunk, pair chunk).
template <class P>
void launch_copies(const BlockCopy& b, const std::vector<char*>& src, const std::vector<char*>& dst, int max_ctas,
                   cudaStream_t stream) {
  const Cache& s0 = b.src[0];
  const Cache& d0 = b.dst[0];
  const int64_t es = int64_t(s0.elem());
  // Kernel parameters may be large: build them on the heap.
  std::vector<P> holder(1);
  P& p = holder[0];
  p.src_kv = s0.in_bytes(es);
  p.dst_kv = d0.in_bytes(es);
  p.block_bytes = s0.block_elems() * es;
  p.heads = int(s0.num_kv_heads);
  p.dense = same_dense_order(s0, d0) ? 1 : 0;
  const int64_t row = s0.head_dim * es;
  uint64_t align = 0;
  for (char* x : src) align |= uint64_t(uintptr_t(x));
  for (char* x : dst) align |= uint64_t(uintptr_t(x));
  const int w = p.dense ? common_width({align, uint64_t(p.src_kv.block_stride), uint64_t(p.dst_kv.block_stride),
                                        uint64_t(p.block_bytes)})
                        : common_width({align, p.src_kv.stride_bits(), p.dst_kv.stride_bits(), uint64_t(row)});
  if (!p.dense && s0.block_size * s0.num_kv_heads * (row / w) > INT32_MAX) fail(Code::invalid_argument, "blocks too large to copy");
  p.chunks_per_row = int(row / w);
  p.rows_chunks = int(s0.block_size * s0.num_kv_heads * p.chunks_per_row);
  for (int64_t l0 = 0; l0 < b.num_layers; l0 += P::max_layers) {
    const int nl = int(std::min<int64_t>(P::max_layers, b.num_layers - l0));
    for (int l = 0; l < nl; ++l)
      for (int kv = 0; kv < 2; ++kv) {
        p.src[l][kv] = src[size_t((l0 + l) * 2 + kv)];
        p.dst[l][kv] = dst[size_t((l0 + l) * 2 + kv)];
      }
    for (int64_t i0 = 0; i0 < b.num_pairs; i0 += P::max_pairs) {
      const int np = int(std::min<int64_t>(P::max_pairs, b.num_pairs - i0));
      for (int i = 0; i < np; ++i) {
        p.pairs[i][0] = b.pairs[2 * (i0 + i)];
        p.pairs[i][1] = b.pairs[2 * (i0 + i) + 1];
      }
      p.num_pairs = np;
      p.num_layers = nl;
      const dim3 grid(unsigned(std::min(np * nl * 2, max_ctas)));
      const char* what = "copy_blocks launch";
      switch (w) {
        case 16: launch(copy_kernel<uint4, P>, grid, dim3(256), 0, stream, what, p); break;
        case 8: launch(copy_kernel<uint2, P>, grid, dim3(256), 0, stream, what, p); break;
        case 4: launch(copy_kernel<uint32_t, P>, grid, dim3(256), 0, stream, what, p); break;
        case 2: launch(copy_kernel<uint16_t, P>, grid, dim3(256), 0, stream, what, p); break;
        default: launch(copy_kernel<uint8_t, P>, grid, dim3(256), 0, stream, what, p); break;
      }
    }
  }
}

void copy_with_kernel(const BlockCopy& b, int device, bool on_device, cudaStream_t stream) {
  std::vector<char*> src(size_t(b.num_layers) * 2), dst(size_t(b.num_layers) * 2);
  for (int64_t l = 0; l < b.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const void* sp = kv ? b.src[l].v : b.src[l].k;
      const void* dp = kv ? b.dst[l].v : b.dst[l].k;
      char* sa = device_address(sp, device, kv ? "source cache v" : "source cache k");
      char* da = device_address(dp, device, kv ? "destination cache v" : "destination cache k");
      if (!sa || !da)
        fail(Code::invalid_argument, "layer %lld: host cache memory is not page-locked, so the copy kernel cannot "
             "reach it (use kvb_cache_alloc or cudaHostRegister, or KVB_SWAP_USE_MEMCPY)", (long long)l);
      src[size_t(l * 2 + kv)] = sa;
      dst[size_t(l * 2 + kv)] = da;
    }
  }
  const int max_ctas = on_device ? INT_MAX : kHostCopyCtas;
#ifdef KVB_LARGE_COPY_PARAMS
  if (large_kernel_params_ok()) return launch_copies<LargeParams>(b, src, dst, max_ctas, stream);
#endif
  launch_copies<SmallParams>(b, src, dst, max_ctas, stream);
}

// Runs of pairs whose source and destination blocks both advance by one.
struct Run {
  int32_t src, dst, n;
};

std::vector<Run> merge_runs(const BlockCopy& b) {
  std::vector<Run> runs;
  for (int64_t i = 0; i < b.num_pairs; ++i) {
    const int32_t s = b.pairs[2 * i], d = b.pairs[2 * i + 1];
    if (!runs.empty() && runs.back().src + runs.back().n == s && runs.back().dst + runs.back().n == d)
      runs.back().n++;
    else
      runs.push_back({s, d, 1});
  }
  return runs;
}

void copy_with_memcpy(const BlockCopy& b, const std::vector<Run>& runs, cudaStream_t stream) {
  const Cache& s0 = b.src[0];
  const Cache& d0 = b.dst[0];
  const int64_t es = int64_t(s0.elem());
  const bool dense = same_dense_order(s0, d0);
  const PagedKv sk = s0.in_bytes(es), dk = d0.in_bytes(es);
  const size_t sb = size_t(sk.block_stride), db = size_t(dk.block_stride);
  const size_t block_bytes = size_t(s0.block_elems() * es), row = size_t(s0.head_dim * es);
  for (int64_t l = 0; l < b.num_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const char* sbase = static_cast<const char*>(kv ? b.src[l].v : b.src[l].k);
      char* dbase = static_cast<char*>(kv ? b.dst[l].v : b.dst[l].k);
      for (const Run& r : runs) {
        const char* sp = sbase + sk.block(r.src);
        char* dp = dbase + dk.block(r.dst);
        if (dense) {
          // (one block: a single copy, whatever the block strides, which may be below block_bytes when
          // num_blocks is 1 and cudaMemcpy2DAsync would refuse the pitch)
          if ((sb == block_bytes && db == block_bytes) || r.n == 1)
            check(cudaMemcpyAsync(dp, sp, block_bytes * size_t(r.n), cudaMemcpyDefault, stream), "cudaMemcpyAsync");
          else
            check(cudaMemcpy2DAsync(dp, db, sp, sb, block_bytes, size_t(r.n), cudaMemcpyDefault, stream),
                  "cudaMemcpy2DAsync");
          continue;
        }
        // With one token per block the token stride is unconstrained (it may be below row): any pitch
        // >= row then describes the same single row.
        const size_t dpitch = s0.block_size == 1 ? std::max(row, size_t(dk.token_stride)) : size_t(dk.token_stride);
        const size_t spitch = s0.block_size == 1 ? std::max(row, size_t(sk.token_stride)) : size_t(sk.token_stride);
        for (int32_t i = 0; i < r.n; ++i)
          for (int64_t h = 0; h < s0.num_kv_heads; ++h)
            check(cudaMemcpy2DAsync(dp + dk.block(i) + dk.head(h), dpitch, sp + sk.block(i) + sk.head(h), spitch,
                                    row, size_t(s0.block_size), cudaMemcpyDefault, stream),
                  "cudaMemcpy2DAsync");
      }
    }
  }
}

bool reachable(const Cache& c, int device) {
  return device_address(c.k, device, "cache k") != nullptr && device_address(c.v, device, "cache v") != nullptr;
}

}  // namespace

void copy_blocks(const BlockCopy& b, void* stream) {
  const Cache& s0 = b.src[0];
  const Cache& d0 = b.dst[0];
  const int device = s0.cuda ? s0.device_index : d0.device_index;
  DeviceGuard g(device);
  cudaStream_t st = as_stream(stream);
  const bool on_device = s0.cuda && d0.cuda;
  uint32_t method = b.flags;
  if (on_device) method = KVB_SWAP_USE_KERNEL;  // same device: the kernel copies everything in one launch
  std::vector<Run> runs;
  if (method != KVB_SWAP_USE_KERNEL) runs = merge_runs(b);
  if (method == KVB_SWAP_AUTO) {
    // Few large transfers run at DMA speed; many small blocks are faster through one kernel over mapped
    // page-locked memory (per-copy overhead dominates below ~1 MiB).
    const double avg = double(s0.block_elems()) * double(s0.elem()) * double(b.num_pairs) / double(runs.size());
    bool kernel_ok = true;
    for (int64_t l = 0; l < b.num_layers && kernel_ok; ++l)
      kernel_ok = reachable(b.src[l], device) && reachable(b.dst[l], device);
    method = (kernel_ok && avg < double(1 << 20)) ? KVB_SWAP_USE_KERNEL : KVB_SWAP_USE_MEMCPY;
  }
  if (method == KVB_SWAP_USE_KERNEL)
    copy_with_kernel(b, device, on_device, st);
  else
    copy_with_memcpy(b, runs, st);
}

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
