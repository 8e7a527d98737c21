// A TMA descriptor's L2 promotion set to 256 bytes after CuTe built it (host code alone): the study switch
// FLASHBUILD_SPLITKV_L2=256 (splitkv_decode_switch.h) of the decode tile's K and V loads.
//
// Why: at head dim 64 a K or V box reads 128 B of each token's 1 KB row (8 K/V heads), and the decode tile streams
// hdim 64 2-3 % slower than hdim 128 at batch 64 while cuDNN streams both at one rate
// (benchmarks/decode_l2_promotion/README.md). CuTe's make_tma_copy encodes every descriptor with
// CU_TENSOR_MAP_L2_PROMOTION_L2_128B; with 256 B the L2 fetches each 128 B row as half of a 256 B pair, the other
// half the neighbouring head's, which that head's CTA reads at about the same time. The descriptor is opaque, so
// the field is found, once a process, by encoding one small descriptor twice through the driver
// (cuTensorMapEncodeTiled), 128 B and 256 B promotion, and comparing the two: the bits that differ are the field
// (none, or a result that does not round-trip: the named error).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>  // std::pair

namespace flashbuild::hopper {

struct L2PromotionField {
  uint64_t mask[16];  // the descriptor's bits that the promotion changes
  uint64_t bits[16];  // their value at 256 B
  bool found;
};

inline L2PromotionField find_l2_promotion_field() {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  L2PromotionField f{};
  void* pfn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || pfn == nullptr) {
    (void)cudaGetLastError();
    return f;
  }
  const Encode encode = reinterpret_cast<Encode>(pfn);
  // fp16, (64 columns, 1024 rows, 8 heads) with 1 KB rows: a K view of head dim 64; a (64, 128, 1) box.
  const cuuint64_t dims[3] = {64, 1024, 8};
  const cuuint64_t strides[2] = {1024, 1024 * 1024};
  const cuuint32_t box[3] = {64, 128, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  void* const address = reinterpret_cast<void*>(uintptr_t(1) << 20);  // aligned; an encode does not read it
  CUtensorMap with128{}, with256{};
  for (auto [map, promotion] : {std::pair{&with128, CU_TENSOR_MAP_L2_PROMOTION_L2_128B},
                                std::pair{&with256, CU_TENSOR_MAP_L2_PROMOTION_L2_256B}}) {
    if (encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, address, dims, strides, box, element_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promotion,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
      return f;
    }
  }
  uint64_t a[16], b[16];
  static_assert(sizeof(CUtensorMap) == sizeof(a), "a TMA descriptor is 128 bytes");
  std::memcpy(a, &with128, sizeof(a));
  std::memcpy(b, &with256, sizeof(b));
  bool any = false;
  for (int i = 0; i < 16; ++i) {
    f.mask[i] = a[i] ^ b[i];
    f.bits[i] = b[i] & f.mask[i];
    any |= f.mask[i] != 0;
  }
  f.found = any;
  return f;
}

// The descriptor `desc` (built with 128 B promotion, as CuTe builds every one) with 256 B promotion.
inline void promote_l2_256(void const* desc) {
  static const L2PromotionField field = find_l2_promotion_field();
  if (!field.found) {
    throw std::runtime_error("flashbuild: FLASHBUILD_SPLITKV_L2=256 needs the driver's cuTensorMapEncodeTiled to find "
                             "the descriptor's L2 promotion; it could not (unset FLASHBUILD_SPLITKV_L2)");
  }
  uint64_t words[16];
  std::memcpy(words, desc, sizeof(words));
  for (int i = 0; i < 16; ++i) { words[i] = (words[i] & ~field.mask[i]) | field.bits[i]; }
  std::memcpy(const_cast<void*>(desc), words, sizeof(words));
}

}  // namespace flashbuild::hopper
