// Bad index values found on the device. A serving stack calls attention from inside captured CUDA graphs,
// so no call may copy its index tensors to the host to check them (a synchronisation, and no capture).
// Instead each index a kernel would address memory with is checked where it is read: a value outside its
// range is clamped into it (the call then computes on the clamped value and its output means nothing, but
// no kernel touches memory outside a tensor) and recorded here. The record lives in mapped pinned host
// memory, one per device: the device writes it, the host reads it without a synchronisation at the start
// of the next call (the binding raises it there as flashbuild.errors.InvalidIndexError naming the argument,
// the row and the value) or in check_errors(), which synchronizes the stream first.
//
// Torch-free: the binding and the kernels' TUs both include it.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace flashbuild {

// Which argument held the bad value: the low 4 bits of word 0 of the record.
enum class IndexArg : int {
  kNone = 0,
  kCacheSeqlens = 1,
  kCacheBatchIdx = 2,
  kCacheLeftpad = 3,
  kBlockTable = 4,
  kCuSeqlensQ = 5,
  kCuSeqlensK = 6,
};

// The record: four int32 written by one 16-byte store, so the host never sees half of one report.
//   word 0: the argument (IndexArg) | column << 4 (the block table's column, the cu_seqlens entry, else 0)
//   word 1: the batch row (cu_seqlens: the number of entries)
//   word 2: the bad value
//   word 3: the bound it broke: the largest allowed value (cu_seqlens: the packed tensor's rows)
// A later report may overwrite an earlier one before the host reads it: one of them is raised.
constexpr int kIndexRecordWords = 4;
constexpr int kIndexArgBits = 4;

#if defined(__CUDACC__)
__device__ __forceinline__ void report_bad_index(int* record, IndexArg arg, int column, int batch, int value,
                                                 int bound) {
  if (record == nullptr) { return; }
  const int word0 = int(arg) | (column << kIndexArgBits);
  asm volatile("st.volatile.global.v4.s32 [%0], {%1, %2, %3, %4};\n" ::"l"(record), "r"(word0), "r"(batch),
               "r"(value), "r"(bound)
               : "memory");
  __threadfence_system();  // visible to the host once the kernel is done, at the latest
}

// v clamped into [0, hi] (hi >= 0), reporting a v outside it.
__device__ __forceinline__ int checked_index(int v, int hi, int* record, IndexArg arg, int column, int batch) {
  if (v >= 0 && v <= hi) { return v; }
  report_bad_index(record, arg, column, batch, v, hi);
  return v < 0 ? 0 : hi;
}
#endif

}  // namespace flashbuild
