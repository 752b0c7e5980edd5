#pragma once
// How long Recording::wait polls its fence before blocking on it. A blocking wait costs the
// thread's wake-up after the fence signals (0.1 ms on the H200's driver), which a decoding step
// of 1 ms or a prompt of 5 ms notices; polling costs a core for as long. So wait() polls for
// `base` (a short submission is then seen complete at once) and, for a recording whose last
// run was longer than that but short enough, until a quarter past that run's duration after the
// submission; anything longer blocks (a training step of tens of ms: the wake-up is noise there,
// and a core spinning through it is not).
#include <algorithm>
#include <chrono>

namespace mn::vk {

struct FenceSpin {
  std::chrono::microseconds base{2000};
  std::chrono::microseconds longest{16000};  // runs expected to take longer block after base
};

// How much longer to poll, `since_submit` after the submission, given the last run's duration
// (0: none yet). Zero base: never poll.
inline std::chrono::microseconds poll_budget(const FenceSpin& spin,
                                             std::chrono::microseconds last_run,
                                             std::chrono::microseconds since_submit) {
  using std::chrono::microseconds;
  if (spin.base <= microseconds{0}) return microseconds{0};
  microseconds budget = spin.base;
  if (last_run > spin.base && last_run <= spin.longest) {
    budget = std::max(budget, last_run * 5 / 4 - since_submit);
  }
  return budget;
}

}  // namespace mn::vk
