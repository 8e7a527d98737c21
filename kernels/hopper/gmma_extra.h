// wgmma m64nNk16 with fp32 accumulators, both operands from shared memory, fp16 or bf16 inputs, for the
// N outside CuTe's standard set that kernels here use: 80 (S = Q K^T on 80-key tiles, the hdim-256
// forward: benchmarks/fwd_tile_hdim256), 112 (S on the hdim-192 forward's 112-key tiles:
// benchmarks/fwd_short_hdim256), 176 (S on 176-key tiles, the non-causal hdim-128 forward:
// benchmarks/fwd_tile_hdim128_176) and 48 (each consumer warpgroup's half of dQ, the hdim-96
// backward). CuTe declares them only under CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED, which brings in every
// extended shape at once: that define took one hdim-256 forward TU from 24.7 s to 43.7 s on the 2-core
// machine (cudafe++ 2.7 -> 15.2 s), so this header declares the atoms, and their MMA_Traits, in
// CuTe's own form (CuTe's SM90 mma_unpack calls them), and ss_mma_op picks an atom for any N.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/numeric_types.h>

namespace flashbuild::hopper {

template <int kN, class Element, cute::GMMA::Major kMajorA, cute::GMMA::Major kMajorB>
struct GmmaSS;

// One asm statement per N and input type: only the instruction's shape, type suffix and register list
// differ. scale-d is a predicate (0: the accumulators start from zero, 1: they are added to); the A and
// B scales are 1; the operands' majors are immediates. REGS: the accumulators' "+f" list; D_A: the
// operand number of desc_a (desc_b, scale_d and the majors follow it).
#define FLASHBUILD_GMMA_SS(SHAPE, TYPES, REGS_TEXT, D_A, D_B, D_SCALE, D_MA, D_MB, ...)                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" D_SCALE ", 0;\n"                                    \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPES " {" REGS_TEXT "}, %" D_A ", %" D_B \
               ", p, 1, 1, %" D_MA ", %" D_MB ";\n}\n"                                                   \
               : __VA_ARGS__                                                                             \
               : "l"(desc_a), "l"(desc_b), "r"(int32_t(scale_d)), "n"(int32_t(kMajorA)), "n"(int32_t(kMajorB)))

#define FLASHBUILD_GMMA_SS_TYPES(SHAPE, ...)                                                             \
  if constexpr (std::is_same_v<Element, cutlass::half_t>) {                                             \
    FLASHBUILD_GMMA_SS(SHAPE, "f16.f16", __VA_ARGS__);                                                  \
  } else {                                                                                               \
    FLASHBUILD_GMMA_SS(SHAPE, "bf16.bf16", __VA_ARGS__);                                                \
  }

template <class Element, cute::GMMA::Major kMajorA, cute::GMMA::Major kMajorB>
struct GmmaSS<80, Element, kMajorA, kMajorB> {
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "fp16 or bf16 inputs");
  using DRegisters = void;
  using ARegisters = uint64_t[1];  // shared-memory descriptors
  using BRegisters = uint64_t[1];
  using CRegisters = float[40];    // 64 x 80 fp32 over a warpgroup's 128 threads

  CUTE_HOST_DEVICE static void fma(uint64_t const& desc_a, uint64_t const& desc_b,
      float& d00, float& d01, float& d02, float& d03, float& d04, float& d05, float& d06, float& d07,
      float& d08, float& d09, float& d10, float& d11, float& d12, float& d13, float& d14, float& d15,
      float& d16, float& d17, float& d18, float& d19, float& d20, float& d21, float& d22, float& d23,
      float& d24, float& d25, float& d26, float& d27, float& d28, float& d29, float& d30, float& d31,
      float& d32, float& d33, float& d34, float& d35, float& d36, float& d37, float& d38, float& d39,
      cute::GMMA::ScaleOut const scale_d = cute::GMMA::ScaleOut::One) {
#if defined(CUTE_ARCH_MMA_SM90A_ENABLED)
    FLASHBUILD_GMMA_SS_TYPES("m64n80k16",
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
        "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39",
        "40", "41", "42", "43", "44",
        "+f"(d00), "+f"(d01), "+f"(d02), "+f"(d03), "+f"(d04), "+f"(d05), "+f"(d06), "+f"(d07),
        "+f"(d08), "+f"(d09), "+f"(d10), "+f"(d11), "+f"(d12), "+f"(d13), "+f"(d14), "+f"(d15),
        "+f"(d16), "+f"(d17), "+f"(d18), "+f"(d19), "+f"(d20), "+f"(d21), "+f"(d22), "+f"(d23),
        "+f"(d24), "+f"(d25), "+f"(d26), "+f"(d27), "+f"(d28), "+f"(d29), "+f"(d30), "+f"(d31),
        "+f"(d32), "+f"(d33), "+f"(d34), "+f"(d35), "+f"(d36), "+f"(d37), "+f"(d38), "+f"(d39))
#else
    CUTE_INVALID_CONTROL_PATH("GmmaSS needs sm_90a (CUTE_ARCH_MMA_SM90A_ENABLED)");
#endif
  }
};

template <class Element, cute::GMMA::Major kMajorA, cute::GMMA::Major kMajorB>
struct GmmaSS<48, Element, kMajorA, kMajorB> {
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "fp16 or bf16 inputs");
  using DRegisters = void;
  using ARegisters = uint64_t[1];
  using BRegisters = uint64_t[1];
  using CRegisters = float[24];    // 64 x 48 fp32 over a warpgroup's 128 threads

  CUTE_HOST_DEVICE static void fma(uint64_t const& desc_a, uint64_t const& desc_b,
      float& d00, float& d01, float& d02, float& d03, float& d04, float& d05, float& d06, float& d07,
      float& d08, float& d09, float& d10, float& d11, float& d12, float& d13, float& d14, float& d15,
      float& d16, float& d17, float& d18, float& d19, float& d20, float& d21, float& d22, float& d23,
      cute::GMMA::ScaleOut const scale_d = cute::GMMA::ScaleOut::One) {
#if defined(CUTE_ARCH_MMA_SM90A_ENABLED)
    FLASHBUILD_GMMA_SS_TYPES("m64n48k16",
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
        "%20, %21, %22, %23",
        "24", "25", "26", "27", "28",
        "+f"(d00), "+f"(d01), "+f"(d02), "+f"(d03), "+f"(d04), "+f"(d05), "+f"(d06), "+f"(d07),
        "+f"(d08), "+f"(d09), "+f"(d10), "+f"(d11), "+f"(d12), "+f"(d13), "+f"(d14), "+f"(d15),
        "+f"(d16), "+f"(d17), "+f"(d18), "+f"(d19), "+f"(d20), "+f"(d21), "+f"(d22), "+f"(d23))
#else
    CUTE_INVALID_CONTROL_PATH("GmmaSS needs sm_90a (CUTE_ARCH_MMA_SM90A_ENABLED)");
#endif
  }
};

template <class Element, cute::GMMA::Major kMajorA, cute::GMMA::Major kMajorB>
struct GmmaSS<176, Element, kMajorA, kMajorB> {
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "fp16 or bf16 inputs");
  using DRegisters = void;
  using ARegisters = uint64_t[1];
  using BRegisters = uint64_t[1];
  using CRegisters = float[88];    // 64 x 176 fp32 over a warpgroup's 128 threads

  CUTE_HOST_DEVICE static void fma(uint64_t const& desc_a, uint64_t const& desc_b,
      float& d00, float& d01, float& d02, float& d03, float& d04, float& d05, float& d06, float& d07,
      float& d08, float& d09, float& d10, float& d11, float& d12, float& d13, float& d14, float& d15,
      float& d16, float& d17, float& d18, float& d19, float& d20, float& d21, float& d22, float& d23,
      float& d24, float& d25, float& d26, float& d27, float& d28, float& d29, float& d30, float& d31,
      float& d32, float& d33, float& d34, float& d35, float& d36, float& d37, float& d38, float& d39,
      float& d40, float& d41, float& d42, float& d43, float& d44, float& d45, float& d46, float& d47,
      float& d48, float& d49, float& d50, float& d51, float& d52, float& d53, float& d54, float& d55,
      float& d56, float& d57, float& d58, float& d59, float& d60, float& d61, float& d62, float& d63,
      float& d64, float& d65, float& d66, float& d67, float& d68, float& d69, float& d70, float& d71,
      float& d72, float& d73, float& d74, float& d75, float& d76, float& d77, float& d78, float& d79,
      float& d80, float& d81, float& d82, float& d83, float& d84, float& d85, float& d86, float& d87,
      cute::GMMA::ScaleOut const scale_d = cute::GMMA::ScaleOut::One) {
#if defined(CUTE_ARCH_MMA_SM90A_ENABLED)
    FLASHBUILD_GMMA_SS_TYPES("m64n176k16",
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
        "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
        "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87",
        "88", "89", "90", "91", "92",
        "+f"(d00), "+f"(d01), "+f"(d02), "+f"(d03), "+f"(d04), "+f"(d05), "+f"(d06), "+f"(d07),
        "+f"(d08), "+f"(d09), "+f"(d10), "+f"(d11), "+f"(d12), "+f"(d13), "+f"(d14), "+f"(d15),
        "+f"(d16), "+f"(d17), "+f"(d18), "+f"(d19), "+f"(d20), "+f"(d21), "+f"(d22), "+f"(d23),
        "+f"(d24), "+f"(d25), "+f"(d26), "+f"(d27), "+f"(d28), "+f"(d29), "+f"(d30), "+f"(d31),
        "+f"(d32), "+f"(d33), "+f"(d34), "+f"(d35), "+f"(d36), "+f"(d37), "+f"(d38), "+f"(d39),
        "+f"(d40), "+f"(d41), "+f"(d42), "+f"(d43), "+f"(d44), "+f"(d45), "+f"(d46), "+f"(d47),
        "+f"(d48), "+f"(d49), "+f"(d50), "+f"(d51), "+f"(d52), "+f"(d53), "+f"(d54), "+f"(d55),
        "+f"(d56), "+f"(d57), "+f"(d58), "+f"(d59), "+f"(d60), "+f"(d61), "+f"(d62), "+f"(d63),
        "+f"(d64), "+f"(d65), "+f"(d66), "+f"(d67), "+f"(d68), "+f"(d69), "+f"(d70), "+f"(d71),
        "+f"(d72), "+f"(d73), "+f"(d74), "+f"(d75), "+f"(d76), "+f"(d77), "+f"(d78), "+f"(d79),
        "+f"(d80), "+f"(d81), "+f"(d82), "+f"(d83), "+f"(d84), "+f"(d85), "+f"(d86), "+f"(d87))
#else
    CUTE_INVALID_CONTROL_PATH("GmmaSS needs sm_90a (CUTE_ARCH_MMA_SM90A_ENABLED)");
#endif
  }
};

template <class Element, cute::GMMA::Major kMajorA, cute::GMMA::Major kMajorB>
struct GmmaSS<112, Element, kMajorA, kMajorB> {
  static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>,
                "fp16 or bf16 inputs");
  using DRegisters = void;
  using ARegisters = uint64_t[1];
  using BRegisters = uint64_t[1];
  using CRegisters = float[56];    // 64 x 112 fp32 over a warpgroup's 128 threads

  CUTE_HOST_DEVICE static void fma(uint64_t const& desc_a, uint64_t const& desc_b,
      float& d00, float& d01, float& d02, float& d03, float& d04, float& d05, float& d06, float& d07,
      float& d08, float& d09, float& d10, float& d11, float& d12, float& d13, float& d14, float& d15,
      float& d16, float& d17, float& d18, float& d19, float& d20, float& d21, float& d22, float& d23,
      float& d24, float& d25, float& d26, float& d27, float& d28, float& d29, float& d30, float& d31,
      float& d32, float& d33, float& d34, float& d35, float& d36, float& d37, float& d38, float& d39,
      float& d40, float& d41, float& d42, float& d43, float& d44, float& d45, float& d46, float& d47,
      float& d48, float& d49, float& d50, float& d51, float& d52, float& d53, float& d54, float& d55,
      cute::GMMA::ScaleOut const scale_d = cute::GMMA::ScaleOut::One) {
#if defined(CUTE_ARCH_MMA_SM90A_ENABLED)
    FLASHBUILD_GMMA_SS_TYPES("m64n112k16",
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
        "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55",
        "56", "57", "58", "59", "60",
        "+f"(d00), "+f"(d01), "+f"(d02), "+f"(d03), "+f"(d04), "+f"(d05), "+f"(d06), "+f"(d07),
        "+f"(d08), "+f"(d09), "+f"(d10), "+f"(d11), "+f"(d12), "+f"(d13), "+f"(d14), "+f"(d15),
        "+f"(d16), "+f"(d17), "+f"(d18), "+f"(d19), "+f"(d20), "+f"(d21), "+f"(d22), "+f"(d23),
        "+f"(d24), "+f"(d25), "+f"(d26), "+f"(d27), "+f"(d28), "+f"(d29), "+f"(d30), "+f"(d31),
        "+f"(d32), "+f"(d33), "+f"(d34), "+f"(d35), "+f"(d36), "+f"(d37), "+f"(d38), "+f"(d39),
        "+f"(d40), "+f"(d41), "+f"(d42), "+f"(d43), "+f"(d44), "+f"(d45), "+f"(d46), "+f"(d47),
        "+f"(d48), "+f"(d49), "+f"(d50), "+f"(d51), "+f"(d52), "+f"(d53), "+f"(d54), "+f"(d55))
#else
    CUTE_INVALID_CONTROL_PATH("GmmaSS needs sm_90a (CUTE_ARCH_MMA_SM90A_ENABLED)");
#endif
  }
};

#undef FLASHBUILD_GMMA_SS_TYPES
#undef FLASHBUILD_GMMA_SS

// The SS atom of one warpgroup's m64 x kN x kK product: ours for N = 48, 80, 112 and 176, CuTe's selector (which
// picks N = kN for its standard shapes) otherwise.
template <class Element, int kN, int kK, cute::GMMA::Major kMajorA = cute::GMMA::Major::K,
          cute::GMMA::Major kMajorB = cute::GMMA::Major::K>
CUTE_HOST_DEVICE constexpr auto ss_mma_op() {
  if constexpr (kN == 48 || kN == 80 || kN == 112 || kN == 176) {
    return GmmaSS<kN, Element, kMajorA, kMajorB>{};
  } else {
    return cute::GMMA::ss_op_selector<Element, Element, float, cute::Shape<cute::_64, cute::Int<kN>, cute::Int<kK>>,
                                      kMajorA, kMajorB>();
  }
}

}  // namespace flashbuild::hopper

namespace cute {

template <int kN, class Element, GMMA::Major kMajorA, GMMA::Major kMajorB>
struct MMA_Traits<flashbuild::hopper::GmmaSS<kN, Element, kMajorA, kMajorB>> {
  using ValTypeD = float;
  using ValTypeA = Element;
  using ValTypeB = Element;
  using ValTypeC = float;
  using FrgTypeA = GMMA::smem_desc<kMajorA>;
  using FrgTypeB = GMMA::smem_desc<kMajorB>;
  using Shape_MNK = Shape<_64, Int<kN>, _16>;
  using ThrID = Layout<_128>;
  using ALayout = GMMA::ABLayout<64, 16>;
  using BLayout = GMMA::ABLayout<kN, 16>;
  using CLayout = GMMA::CLayout_64xN<kN>;
  GMMA::ScaleOut accumulate_ = GMMA::ScaleOut::One;
};

}  // namespace cute
