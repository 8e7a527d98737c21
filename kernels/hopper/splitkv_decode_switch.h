// FLASHBUILD_SPLITKV_TILE, which tile a Hopper split-KV call runs (splitkv_decode_launch.h, use_decode_tile), read
// by the launcher at every call so one process can time both in turns (benchmarks/decode/decode_table.py --paths
// tile=rows64). Host code alone, no CUDA or CuTe: tests/fuzz compiles it with the host compiler and feeds it
// arbitrary values.
#pragma once

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/env_value.h"

namespace flashbuild::hopper {

enum class SplitKVTile { kAuto, kDecode, kRows64 };

// `decode` (the decode tile wherever it serves the call), `rows64` (the 64-row tile always), `auto`, unset or empty
// (the default rule). Another value is an error naming the variable and its values (never a silent default).
inline SplitKVTile splitkv_tile_choice() {
  const char* v = std::getenv("FLASHBUILD_SPLITKV_TILE");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) { return SplitKVTile::kAuto; }
  if (std::strcmp(v, "decode") == 0) { return SplitKVTile::kDecode; }
  if (std::strcmp(v, "rows64") == 0) { return SplitKVTile::kRows64; }
  throw std::runtime_error("flashbuild: FLASHBUILD_SPLITKV_TILE='" + shown_env_value(v) +
                           "' is not a split-KV tile: set decode (the decode tile where it serves the call), rows64 "
                           "(the 64-row tile) or auto, or unset it (unset FLASHBUILD_SPLITKV_TILE) for the default");
}

}  // namespace flashbuild::hopper
