// An environment variable's value as an error message shows it: printable ASCII, other bytes as '?', at most 64
// characters. The settings read from the environment at every call or launch (FLASHBUILD_SPLITKV_PATH / _TILE,
// FLASHBUILD_HOPPER_FWD_PAIRS / _WIDE_FROM, a study build's FLASHBUILD_SPLITKV_TIMELINE) name a refused value with it,
// so an arbitrary value never reaches the message raw. Host code alone: the binding and tests/fuzz's host programs
// include it.
#pragma once

#include <string>

namespace flashbuild {

inline std::string shown_env_value(const char* v) {
  std::string shown;
  for (const char* c = v; *c && shown.size() < 64; ++c) { shown += (*c >= 0x20 && *c < 0x7f) ? *c : '?'; }
  return shown;
}

}  // namespace flashbuild
