// Kernels a launch reaches through a handle, not a <<<>>> of its own TU's symbol.
//
// A build may compile a variant's kernel device-only, in a TU of its own (<variant>_kernel.cu, nvcc
// -fatbin): that TU has no host side (no cudafe++, no host compiler), and the TU that launches it,
// which no longer compiles the kernel, builds beside it instead of after it. The extension carries
// that fatbin as data (the kernel TU's object embeds it, flashbuild/pipeline/graph.py), and the launching
// TU loads it here through the runtime's library API: cudaLibraryLoadData, once per process, is
// context-independent (every device gets the code as it first uses it). The fatbin holds the
// variant's one kernel, which is found by count, not by name (a template kernel's name is its
// mangled signature); a fatbin with any other count is an error, never a guess.
//
// A KernelHandle is either kind: the runtime takes a cudaKernel_t wherever it takes a __global__
// function's address (cudaFuncSetAttribute, cudaLaunchKernel: "assumed to be a cudaKernel_t and used
// as is", cuda_runtime_api.h), so one launch path serves both. A handle lives as long as the process
// (a function-local static of its launch), and raises a device's dynamic shared memory limit for its
// kernel once, not at every launch.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <stdexcept>
#include <string>

namespace flashbuild {

class KernelHandle {
 public:
  // The kernel this TU compiled (its own symbol).
  template <class... Args>
  static KernelHandle of(void (*kernel)(Args...)) {
    return KernelHandle(reinterpret_cast<const void*>(kernel));
  }

  // The one kernel of a fatbin linked into the extension; `unit` names its TU in errors.
  static KernelHandle from_fatbin(const void* fatbin, const char* unit) {
    cudaLibrary_t library = nullptr;
    check(cudaLibraryLoadData(&library, fatbin, nullptr, nullptr, 0, nullptr, nullptr, 0), unit,
          "cudaLibraryLoadData");
    unsigned int count = 0;
    check(cudaLibraryGetKernelCount(&count, library), unit, "cudaLibraryGetKernelCount");
    if (count != 1) {
      throw std::runtime_error(std::string("flashbuild: ") + unit + "'s fatbin holds " + std::to_string(count) +
                               " kernels, not the one its launch expects; rebuild the extension");
    }
    cudaKernel_t kernel = nullptr;
    check(cudaLibraryEnumerateKernels(&kernel, 1, library), unit, "cudaLibraryEnumerateKernels");
    return KernelHandle(reinterpret_cast<const void*>(kernel));
  }

  KernelHandle(const KernelHandle&) = delete;
  KernelHandle& operator=(const KernelHandle&) = delete;

  // One launch of a kernel whose single parameter is `params` (passed by value, as <<<>>> would). programmatic:
  // a programmatic dependent launch (the kernel waits for the stream's previous kernel itself before reading
  // memory: hopper/splitkv_dependent_launch.h). cluster: CTAs a thread block cluster along x (1: no cluster; grid.x
  // a multiple of it).
  template <class Params>
  void launch(dim3 grid, dim3 block, int smem_bytes, cudaStream_t stream, const Params& params,
              bool programmatic = false, int cluster = 1) const {
    raise_smem_limit(smem_bytes);
    void* args[] = {const_cast<Params*>(&params)};
    if (!programmatic && cluster <= 1) {
      check(cudaLaunchKernel(func_, grid, block, args, size_t(smem_bytes), stream), nullptr, "cudaLaunchKernel");
      return;
    }
    cudaLaunchAttribute attributes[2] = {};
    unsigned count = 0;
    if (programmatic) {
      attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attributes[count++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
      attributes[count].id = cudaLaunchAttributeClusterDimension;
      attributes[count++].val.clusterDim = {unsigned(cluster), 1, 1};
    }
    cudaLaunchConfig_t config{};
    config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = size_t(smem_bytes);
    config.stream = stream, config.attrs = attributes, config.numAttrs = count;
    check(cudaLaunchKernelExC(&config, func_, args), nullptr, "cudaLaunchKernelExC");
  }

  // How many clusters of `cluster` CTAs along x, each of `block` threads and `smem_bytes` of dynamic shared memory,
  // the current device holds at once (cudaOccupancyMaxActiveClusters): a persistent grid of clusters must not exceed
  // it. Asked once a device (a handle's launches all ask with the same sizes). 0 where the runtime cannot tell: the
  // caller then launches without clusters (the same results, hopper/fwd_launch.h).
  int max_active_clusters(dim3 block, int smem_bytes, int cluster) const {
    int device = 0;
    check(cudaGetDevice(&device), nullptr, "cudaGetDevice");
    if (device < kMaxDevices) {
      const int known = clusters_[device].load(std::memory_order_acquire);
      if (known != 0) { return known > 0 ? known : 0; }
    }
    raise_smem_limit(smem_bytes);
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim = {unsigned(cluster), 1, 1};
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(unsigned(cluster)), config.blockDim = block, config.dynamicSmemBytes = size_t(smem_bytes);
    config.attrs = &attribute, config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, func_, &config) != cudaSuccess) {
      (void)cudaGetLastError();  // not a launch error: the call runs without clusters
      clusters = 0;
    }
    if (device < kMaxDevices) { clusters_[device].store(clusters > 0 ? clusters : -1, std::memory_order_release); }
    return clusters;
  }

 private:
  static constexpr int kMaxDevices = 64;  // beyond: the attribute is set at every launch

  // The limit holds per device: raised on a device's first launch. Every launch of a handle asks for
  // the same size (its kernel's traits'), so two threads racing here both set that one value.
  void raise_smem_limit(int smem_bytes) const {
    int device = 0;
    check(cudaGetDevice(&device), nullptr, "cudaGetDevice");
    if (device >= kMaxDevices || smem_limit_[device].load(std::memory_order_acquire) < smem_bytes) {
      check(cudaFuncSetAttribute(func_, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes), nullptr,
            "cudaFuncSetAttribute");
      if (device < kMaxDevices) { smem_limit_[device].store(smem_bytes, std::memory_order_release); }
    }
  }

  explicit KernelHandle(const void* func) : func_(func) {}

  static void check(cudaError_t status, const char* unit, const char* call) {
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // reported here: a later launch check must not report it again under its name
      throw std::runtime_error(std::string("flashbuild: CUDA error in ") + call +
                               (unit ? std::string(" (") + unit + ")" : std::string()) + ": " +
                               cudaGetErrorString(status));
    }
  }

  const void* func_;
  mutable std::atomic<int> smem_limit_[kMaxDevices] = {};
  mutable std::atomic<int> clusters_[kMaxDevices] = {};  // max_active_clusters: 0 not asked yet, -1 none
};

}  // namespace flashbuild
