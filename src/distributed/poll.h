#pragma once
// Waiting for a collective the way both engines do: poll it, spinning briefly (a step's
// collective usually completes within microseconds of the last rank's arrival), then yielding
// the core to the other ranks of an oversubscribed node, until it completes or the timeout
// passes.
#include <chrono>
#include <string>
#include <thread>

#include <fmt/format.h>

#include <meganeura/distributed.h>

namespace mn::dist {

// Polls `done()` until it returns true; after `timeout_seconds` a DistributedError saying that
// rank `rank` of `size` waited in vain for `what`, after `on_timeout()` (which marks the
// engine broken).
template <class Done, class OnTimeout>
void poll_until(Done done, double timeout_seconds, int rank, int size, const std::string& what,
                OnTimeout on_timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  for (int polls = 0;; ++polls) {
    if (done()) return;
    if (Clock::now() > deadline) {
      on_timeout();
      throw DistributedError(fmt::format(
          "rank {} of {}: the {} did not complete within {} s: another rank has died or stopped "
          "taking part (MN_DISTRIBUTED_TIMEOUT sets the limit)",
          rank, size, what, timeout_seconds));
    }
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace mn::dist
