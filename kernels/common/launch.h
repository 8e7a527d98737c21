// Host helpers every family's launches share: a CUDA error as an exception, a <<<>>> launch with
// dynamic shared memory, the device's SM count, and a launcher's head-dim check. Torch-free; nvcc
// compiles it (launch holds a <<<>>>), so the binding, which a host compiler builds, does not include it.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace flashbuild {

#define FLASHBUILD_CUDA_CHECK(expr)                                                         \
  do {                                                                                      \
    cudaError_t status_ = (expr);                                                           \
    if (status_ != cudaSuccess) {                                                           \
      throw std::runtime_error(std::string("flashbuild: CUDA error in ") + #expr + ": " +  \
                               cudaGetErrorString(status_));                                \
    }                                                                                       \
  } while (0)

// Launches with smem_bytes of dynamic shared memory (raising the kernel's limit past the default
// 48 KB first) and turns a launch error into an exception.
template <class Kernel, class Params>
void launch(Kernel kernel, dim3 grid, int threads, int smem_bytes, cudaStream_t stream, const Params& params) {
  if (smem_bytes > 48 * 1024) {
    FLASHBUILD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  }
  kernel<<<grid, threads, smem_bytes, stream>>>(params);
  FLASHBUILD_CUDA_CHECK(cudaGetLastError());
}

// The SM count of the current device.
inline int sm_count() {
  int device = 0;
  int count = 0;
  FLASHBUILD_CUDA_CHECK(cudaGetDevice(&device));
  FLASHBUILD_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

// A launcher is instantiated for one kernel head dim; the binding pads calls to it.
inline void check_head_dim(const char* entry, int kernel_head_dim, int head_dim) {
  if (head_dim != kernel_head_dim) {
    throw std::runtime_error(std::string("flashbuild: ") + entry + " for head dim " + std::to_string(kernel_head_dim) +
                             " was called with head_dim " + std::to_string(head_dim));
  }
}

}  // namespace flashbuild
