// The CUDA back end of a build without nvcc (or make CUDA=0): every entry reports KVB_ERR_UNSUPPORTED.
#if !defined(KVB_WITH_CUDA) || !KVB_WITH_CUDA
#include "../../libkvblock/error.h"
#include "../decode/decode.h"
#include "cache.h"
#include "../cascade/cascade.h"
#include "../copy/copy.h"
#include "../prefill/prefill.h"
#include "../tree/copy_slots.h"
#include "../write_kv/write_kv.h"

namespace kvb {
namespace kern {
namespace cuda {

namespace {
[[noreturn]] void no_cuda() { fail(Code::unsupported, "libkvblock was built without CUDA"); }
}  // namespace

bool built() { return false; }
int device_count() { return 0; }
void check_device(int) { no_cuda(); }
void check_pointer(const void*, int, const char*) { no_cuda(); }
void write_kv(const Cache&, const WriteKv&, void*) { no_cuda(); }
void paged_attention(const Cache&, const Attention&, void*) { no_cuda(); }
void prefill_attention(const Cache&, const Prefill&, void*) { no_cuda(); }
void copy_blocks(const BlockCopy&, void*) { no_cuda(); }
void copy_slots(const SlotCopy&, void*) { no_cuda(); }
Fault take_fault(int, void*) { no_cuda(); }
void* alloc_device(int, size_t) { no_cuda(); }
void free_device(int, void*) { no_cuda(); }
void* alloc_pinned(size_t) { no_cuda(); }
void free_pinned(void*) { no_cuda(); }
// No CUDA cache reaches these in such a build (require_backend refuses it); the plain path's error stands.
size_t cascade_workspace(const Cache&, const Attention&, const kvb_prefix_groups&) { return 0; }
bool cascade_decode(const Cache&, const Attention&, const kvb_prefix_groups&, void*, size_t, void*) { return false; }
size_t cascade_prefill_workspace(const Cache&, const Prefill&, const kvb_prefix_groups&) { return 0; }
bool cascade_prefill(const Cache&, const Prefill&, const kvb_prefix_groups&, void*, size_t, void*) { return false; }

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
#endif
