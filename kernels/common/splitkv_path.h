// FLASHBUILD_SPLITKV_PATH, how a decoding call runs on the Hopper split-KV, read by the binding at every call so one
// process can time the paths in turns (benchmarks/decode/decode_table.py --paths). Host code alone, no CUDA or torch:
// params.h includes it for its two enums, the binding for the parser, and tests/fuzz compiles it with the host
// compiler and feeds it arbitrary values.
#pragma once

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/env_value.h"

namespace flashbuild {

// The tail that merges the Hopper split-KV's splits in the kernel (hopper/fwd_epilogue.h, combine_if_last):
// kSerial, the first (fences around the arrival count; each lane walks the splits), or kLanes (one acquire-release
// count; the splits' LSEs one per lane, the partials loaded in groups). Both give the same bits. kCluster: the decode
// tile's splits as the CTAs of one thread block cluster, split 0's merging the others' through distributed shared
// memory (hopper/splitkv_cluster_merge.h), where the launch can cluster the call (hopper/splitkv_decode_launch.h);
// elsewhere kLanes. The same bits again.
enum class SplitMerge : int { kSerial = 0, kLanes = 1, kCluster = 2 };

// Whether the Hopper split-KV is a programmatic dependent launch (hopper/splitkv_dependent_launch.h), and when its
// CTAs let the stream's next kernel launch: kEarly once past their wait at the start, kLate once a CTA's last tile
// is computed (before its partials are stored and merged). kNone: an ordinary launch.
enum class DependentLaunch : int { kNone = 0, kEarly = 1, kLate = 2 };

// The paths. Unset or empty, the default: one launch; the decode tile's splits merged inside a thread block cluster
// (kCluster) where the launch can cluster them, else the kLanes tail through L2 (graph-replayed at batch 8, where a
// call has two splits, 0.94-1.00x kLanes' time, bit-identical, benchmarks/decode_cluster_merge/README.md; kLanes ran
// 0.85-1.00x the kSerial tail's time, benchmarks/decode/README.md run 5); a programmatic dependent launch that releases
// the next launch at its start (kEarly: 0.5-0.7 us off a graph-replayed call at batch 1 with 4k keys in two runs,
// within noise elsewhere, "Small calls" there); TMA descriptors kept from call to call; two K/V heads a CTA at head
// dim 64 where that pays (FwdParams::pair_heads, hopper/splitkv_decode_launch.h).
// - "previous": as before the one-launch path (the check kernel, the attention kernel, the combine kernel, ordinary
//   launches);
// - "serial-merge", "lane-merge": one launch with the first or the second merge tail through L2 instead of the cluster;
// - "no-pdl", "pdl-late": the default launched plainly, or releasing the next launch once its tiles are computed;
// - "cluster-merge", "pdl-early": the default spelled out;
// - "fresh-descriptors": the default with its TMA descriptors built for the call (hopper/splitkv_descriptors.h: an
//   A/B of the host time);
// - "no-pairs": the default with one K/V head a CTA at head dim 64 where it would run two.
// Another value is refused by name (never a silent default).
struct SplitKVPath {
  bool previous = false;
  SplitMerge merge = SplitMerge::kCluster;
  DependentLaunch dependent_launch = DependentLaunch::kEarly;
  bool keep_descriptors = true;
  bool pairs = true;
};

inline SplitKVPath splitkv_path() {
  const char* v = std::getenv("FLASHBUILD_SPLITKV_PATH");
  SplitKVPath path;
  if (v == nullptr || *v == '\0' || std::strcmp(v, "cluster-merge") == 0 || std::strcmp(v, "pdl-early") == 0) {
    return path;
  }
  if (std::strcmp(v, "previous") == 0) {
    path.previous = true;
    path.merge = SplitMerge::kSerial;
    path.dependent_launch = DependentLaunch::kNone;
  } else if (std::strcmp(v, "serial-merge") == 0) {
    path.merge = SplitMerge::kSerial;
  } else if (std::strcmp(v, "lane-merge") == 0) {
    path.merge = SplitMerge::kLanes;
  } else if (std::strcmp(v, "no-pdl") == 0) {
    path.dependent_launch = DependentLaunch::kNone;
  } else if (std::strcmp(v, "pdl-late") == 0) {
    path.dependent_launch = DependentLaunch::kLate;
  } else if (std::strcmp(v, "fresh-descriptors") == 0) {
    path.keep_descriptors = false;
  } else if (std::strcmp(v, "no-pairs") == 0) {
    path.pairs = false;
  } else {
    throw std::runtime_error("flashbuild: FLASHBUILD_SPLITKV_PATH='" + shown_env_value(v) +
                             "' is not a split-KV path; it takes previous, serial-merge, lane-merge, cluster-merge, "
                             "no-pdl, pdl-early, pdl-late, fresh-descriptors or no-pairs (or unset it for the default)");
  }
  return path;
}

}  // namespace flashbuild
