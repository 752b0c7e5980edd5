#pragma once
// Wall-clock milliseconds, as the commands report their phases (build, run, encode).
#include <chrono>

namespace mn::cli {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace mn::cli
