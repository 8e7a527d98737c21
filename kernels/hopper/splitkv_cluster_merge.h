// The decode tile's splits merged inside a thread block cluster (SplitMerge::kCluster, common/params.h): the
// instructions its hand-over is made of. splitkv_decode_kernel.h (DecodeTile::store) holds the protocol, this
// header the PTX.
//
// Why: with the fused merge through L2 (FwdEpilogue::combine_if_last), a split's CTA stores its fp32 partial,
// counts its arrival with an acquire-release atomic, and the last one reads the others' partials back: three
// round trips through L2 after the last P V. At batch 8 (two splits, one CTA each on 128 SMs) that tail took
// 2.7-3.0 us of a 22 us call (benchmarks/decode_timeline/README.md). When a tile's splits are the CTAs of one
// cluster (the launch sets the cluster's size to the call's split count: splitkv_decode_launch.h), each CTA but
// split 0's hands its O^T values and LSEs straight into split 0's shared memory with st.async, whose bytes complete
// the transaction of split 0's `merge_full` barrier; split 0 waits on that barrier, merges in registers in the L2
// merge's arithmetic and order (common/splitkv_combine.h, combine_row: the same bits), stores O and the LSE, and
// tells each sender through its `merge_empty` barrier (a remote release-arrive) that its slot may be rewritten.
#pragma once

#include <cute/arch/cluster_sm90.hpp>  // set_block_rank (mapa)
#include <cute/config.hpp>

#include "hopper/utils.h"  // cluster_arrive_release, cluster_wait_acquire

#include <cstdint>

namespace flashbuild::hopper {

// Four bytes into CTA `rank`'s shared memory at the offset `local` has in this CTA's, counted against the
// transaction of the barrier at `barrier`'s offset in that CTA.
CUTE_DEVICE void cluster_send(float const* local, float value, uint64_t const* barrier, int rank) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t to = cute::set_block_rank(cute::cast_smem_ptr_to_uint(local), uint32_t(rank));
  const uint32_t bar = cute::set_block_rank(cute::cast_smem_ptr_to_uint(barrier), uint32_t(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(to),
               "r"(__float_as_uint(value)), "r"(bar)
               : "memory");
#endif
}


}  // namespace flashbuild::hopper
