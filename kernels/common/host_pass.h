// FLASHBUILD_HOST_PASS: 1 in nvcc's host pass of a TU, 0 in its device pass.
//
// nvcc compiles a TU twice: the device pass (cicc, then ptxas; __CUDA_ARCH__ defined) and the host
// pass (cudafe++, then the host compiler; __CUDA_ARCH__ undefined). Of a __global__ kernel the host
// pass needs the signature alone: the launch stub and cudaFuncSetAttribute take its type. Yet
// cudafe++ instantiates the body of every kernel the host launches, with all the CuTe code it
// reaches, and checks it once more. So every kernel body is compiled for the device only:
//
//   template <...>
//   __global__ void __launch_bounds__(...) some_kernel(const __grid_constant__ Params params) {
//   #if !FLASHBUILD_HOST_PASS  // the body: device pass only (common/host_pass.h)
//     ...
//   #endif
//   }
//
// The device pass compiles exactly the code it did before. Anything the host uses stays outside the
// guard: the signature, __launch_bounds__, and the traits, Params and static_asserts that the launch
// code instantiates. The test is written as `!FLASHBUILD_HOST_PASS` so that a kernel header that
// forgets this include compiles its body in both passes (slower, still correct), never in neither.
// The Hopper forward and backward kernels need no such guard: their bodies already sit behind
// __CUDA_ARCH_FEAT_SM90_ALL (sm_90a only), which the host pass does not define either.
#pragma once

#if defined(__CUDA_ARCH__)
#define FLASHBUILD_HOST_PASS 0
#else
#define FLASHBUILD_HOST_PASS 1
#endif
