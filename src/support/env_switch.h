#pragma once
// On/off switches from the environment (MN_COOP_PREPACK=0, MN_CONV_STAGED=1, ...): 1 on, 0 off,
// unset the caller's default. Any other value is an error naming the variable and the value: a
// mistyped switch must not silently leave the default in place.
#include <cstdlib>
#include <string>

#include <meganeura/error.h>

namespace mn::support {

inline bool env_switch(const char* name, bool fallback) {
  const char* raw = std::getenv(name);
  if (!raw || !*raw) return fallback;
  const std::string v = raw;
  if (v == "1") return true;
  if (v == "0") return false;
  throw Error(std::string(name) + "='" + v + "' is neither 1 (on) nor 0 (off)");
}

}  // namespace mn::support
