// Runtime flags -> template arguments for split-KV decoding: the append kernel when the call adds
// new keys (common/append_kv.h), the forward kernel over one slice of the keys per split, then the
// combine kernel. With one split the forward kernel writes O directly.
// The forward kernel (FwdMode::kDecode: one split or several, chosen at run time), the costly part of a TU that
// held it, compiles device-only in a TU of its own (<variant>_kernel.cu), beside this one, and the launch reaches
// it through FwdKernelEntry (ampere/fwd_entry.h), which the variant's TU specializes to its fatbin
// (templates/splitkv_instantiate.cu.j2). This header includes the kernel's
// traits, not its code (ampere/fwd_kernel.h): an edit to the forward kernel recompiles the kernel TUs alone.
#pragma once

#include "ampere/fwd_entry.h"
#include "ampere/fwd_traits.h"  // SplitKVTraits
#include "common/splitkv_steps.h"  // the checks, the append and combine kernels

namespace flashbuild {

template <int kArch, int kHeadDim, DType kDType, bool kIsCausal, int kFeatures>
void run_splitkv(const FwdParams& params, cudaStream_t stream) {
  using Element = typename ampere::ElementOf<kDType>::type;
  using Traits = ampere::SplitKVTraits<kHeadDim, kDType>;
  if (!splitkv_begin<Element>(params, kHeadDim, stream)) { return; }
  check_grid_yz("run_splitkv", params.nheads, int64_t(params.batch) * params.num_splits, "batch row and split");
  const KernelHandle& kernel = ampere::FwdKernelEntry<Traits, kIsCausal, ampere::FwdMode::kDecode, kFeatures>::get();
  const dim3 grid((params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, params.nheads,
                  params.batch * params.num_splits);
  kernel.launch(grid, Traits::kNThreads, Traits::kSmemBytes, stream, params);
  splitkv_end<kHeadDim, Element>(params, stream);
}

}  // namespace flashbuild
