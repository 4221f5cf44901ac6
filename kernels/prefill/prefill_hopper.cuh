// The sm_90a prefill kernel (prefill_hopper.cu) as prefill.cu's launch sees it: whether this call runs
// it, and its launch. Opt-in (KVB_CUDA_PREFILL=hopper, abi/kvblock.h) until a GPU run shows it right and
// faster; the portable kernel runs everything else.
#pragma once
#include <cuda_runtime.h>

#include "prefill.h"

namespace kvb {
namespace kern {
namespace cuda {

struct PrefillParams;

// True when KVB_CUDA_PREFILL=hopper, the device is compute capability 9.0, and the call is one the
// kernel takes (hopper::takes: head dim 128, fp16 / bf16, one key split). The first call that asks
// for it notes on stderr whether it runs, and why not when it cannot (the device).
bool hopper_prefill_selected(const Cache& c, const Prefill& a);

// Same grid, parameters and outputs as the portable fp16 / bf16 launch (one key split), short queries
// included (launch_short_queries).
void launch_prefill_hopper(const PrefillParams& p, Dtype dtype, dim3 grid, cudaStream_t s);

}  // namespace cuda
}  // namespace kern
}  // namespace kvb
