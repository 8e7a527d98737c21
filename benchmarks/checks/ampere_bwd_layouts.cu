// Host check of the Ampere-path backward's written-out layouts (kernels/ampere/bwd_traits.h: AccShape,
// sdp_coords, gmem_coords) against what CuTe derives for them, for every backward tile bwd_tile() picks
// (sm80/sm86/sm89/sm90, hdim 32-256, both dtypes): the accumulator fragments must have partition_fragment_C's
// type, and every thread's coordinates must equal partition_C / partition_S of make_identity_tensor. No GPU:
//
//   nvcc -std=c++17 --expt-relaxed-constexpr -Ikernels -I$CUTLASS/include \
//     -o /tmp/ampere_bwd_layouts benchmarks/checks/ampere_bwd_layouts.cu && /tmp/ampere_bwd_layouts
//
// ($CUTLASS: the cutlass_library package's source/, as in a build's build.ninja.) The SASS of the kernels
// built with them is the proof that matters (benchmarks/checks/sass_diff.py); this check says which tile
// and which thread is wrong when that proof fails, and covers the tiles no build in the proof compiled.
#include <cstdio>

#include "ampere/bwd_traits.h"

using namespace cute;
using namespace flashbuild::ampere;

static int failures = 0;

// Two coordinate tensors of one thread hold the same (row, col) at every index.
template <class A, class B>
void expect_same_coords(A const& written, B const& derived, const char* what, int tidx) {
  static_assert(decltype(size(written))::value == decltype(size(derived))::value, "same value count");
  for (int i = 0; i < size(written); ++i) {
    if (get<0>(written(i)) != get<0>(derived(i)) || get<1>(written(i)) != get<1>(derived(i))) {
      if (failures++ < 10) { printf("  %s: thread %d, value %d differs\n", what, tidx, i); }
    }
  }
}

template <int kHeadDim, int kBlockM, int kBlockN, int kStages, class Element>
void check_tile() {
  using T = BwdTraits<kHeadDim, kBlockM, kBlockN, 8, kStages, Element>;
  typename T::TiledMmaSdP mma_sdp;
  typename T::TiledMmadKV mma_dkv;
  typename T::TiledMmadQ mma_dq;
  static_assert(std::is_same_v<decltype(partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{})),
                               decltype(make_tensor<float>(typename T::AccShapeSdP{}))>);
  static_assert(std::is_same_v<decltype(partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{})),
                               decltype(make_tensor<float>(typename T::AccShapedKV{}))>);
  static_assert(std::is_same_v<decltype(partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<T::kDqCols>>{})),
                               decltype(make_tensor<float>(typename T::AccShapedQ{}))>);
  typename T::GmemTiledCopy gmem_copy;
  for (int t = 0; t < T::kNThreads; ++t) {
    expect_same_coords(T::sdp_coords(mma_sdp.get_thr_layout_vmnk().get_flat_coord(t)),
                       mma_sdp.get_thread_slice(t).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{})),
                       "sdp_coords", t);
    expect_same_coords(T::template gmem_coords<kBlockM>(t),
                       gmem_copy.get_thread_slice(t).partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{})),
                       "gmem_coords<kBlockM>", t);
    expect_same_coords(T::template gmem_coords<kBlockN>(t),
                       gmem_copy.get_thread_slice(t).partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{})),
                       "gmem_coords<kBlockN>", t);
  }
  printf("hdim %3d, %3d x %3d, %d stage(s), %s: checked\n", kHeadDim, kBlockM, kBlockN, kStages,
         std::is_same_v<Element, cutlass::half_t> ? "fp16" : "bf16");
}

template <int kArch, int kHeadDim, class Element>
void check_arch() {
  constexpr BwdTile kTile = bwd_tile(kArch, kHeadDim);
  check_tile<kHeadDim, kTile.block_m, kTile.block_n, kTile.stages, Element>();
}

template <int kArch, class Element>
void check_head_dims() {
  check_arch<kArch, 32, Element>();
  check_arch<kArch, 64, Element>();
  check_arch<kArch, 96, Element>();
  check_arch<kArch, 128, Element>();
  check_arch<kArch, 192, Element>();
  check_arch<kArch, 256, Element>();
}

int main() {
  check_head_dims<80, cutlass::half_t>();
  check_head_dims<80, cutlass::bfloat16_t>();
  check_head_dims<86, cutlass::half_t>();  // sm89 has sm86's shared memory, so its tiles
  check_head_dims<86, cutlass::bfloat16_t>();
  check_head_dims<90, cutlass::half_t>();
  check_head_dims<90, cutlass::bfloat16_t>();
  printf(failures ? "FAILED: %d values differ\n" : "all written-out layouts equal CuTe's (%d differences)\n", failures);
  return failures != 0;
}
