#pragma once
// fn(i) for i = 0 .. n - 1 on up to `threads` threads (0: the machine's hardware threads), the
// calling thread one of them, items taken in order as threads free up. Every item runs even
// where others throw; then the exception of the lowest failing item is rethrown, so the error
// does not depend on the threads' timing.
//
// The other threads are a pool made once per process and kept: a session builds its pipelines
// on them, where threads made and ended per call gave every build new thread ids (a thousand
// sessions once grew the host heap by megabytes under load; per-thread state kept by the driver
// or the validation layer is the suspect). Calls may nest: the caller works through the items
// itself, and helpers the pool has not started by the time the items are done are skipped, not
// waited for.
#include <cstddef>
#include <functional>

namespace mn::support {

void parallel_for(size_t n, unsigned threads, const std::function<void(size_t)>& fn);

}  // namespace mn::support
