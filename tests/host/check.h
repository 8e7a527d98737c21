// The host walks' check (tests/host/*.cu): a failed condition counts in `fails` and prints its first 20 with the
// case, so a walk goes on and reports how many cases failed at the end.
#pragma once

#include <cstdio>

static int fails = 0;
#define CHECK(cond, ...)                         \
  do {                                           \
    if (!(cond)) {                               \
      if (++fails <= 20) {                       \
        std::printf("FAIL %s: ", #cond);         \
        std::printf(__VA_ARGS__);                \
        std::printf("\n");                       \
      }                                          \
    }                                            \
  } while (0)
