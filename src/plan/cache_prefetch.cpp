#include "plan/cache_prefetch.h"

#include <algorithm>
#include <set>

#include "codegen/lower_cache_prefetch.h"
#include "plan/barrier_windows.h"

namespace mn::plan {

namespace {

// Per buffer: whether any launch's binding writes it (or `written` says another step does).
std::vector<char> written_buffers(const std::vector<PlannedLaunch>& launches, size_t count,
                                  const std::vector<char>& written) {
  std::vector<char> w(count, 0);
  for (size_t b = 0; b < std::min(count, written.size()); ++b) w[b] = written[b];
  for (const PlannedLaunch& l : launches) {
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (l.kernel.bindings[k].written && l.buffers[k] >= 0) {
        w[static_cast<size_t>(l.buffers[k])] = 1;
      }
    }
  }
  return w;
}

// The buffers launches [first, last] read, in order of their first read.
std::vector<int> reads_of(const std::vector<PlannedLaunch>& launches, int first, int last) {
  std::vector<int> order;
  std::set<int> seen;
  for (int i = first; i <= last; ++i) {
    const PlannedLaunch& l = launches[static_cast<size_t>(i)];
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      const int b = l.buffers[k];
      if (b >= 0 && !l.kernel.bindings[k].written && seen.insert(b).second) order.push_back(b);
    }
  }
  return order;
}

}  // namespace

std::vector<CachePrefetch> plan_cache_prefetches(const std::vector<PlannedLaunch>& launches,
                                                 const std::vector<PlannedBuffer>& buffers,
                                                 const std::vector<char>& written,
                                                 const CachePrefetchOptions& options) {
  const std::vector<char> ever_written = written_buffers(launches, buffers.size(), written);
  const std::vector<int> ends = barrier_run_ends(launches, true);
  // Windows as [first, last] launch ranges.
  std::vector<std::pair<int, int>> windows;
  for (int i = 0; i < static_cast<int>(launches.size()); i = ends[static_cast<size_t>(i)] + 1) {
    windows.emplace_back(i, ends[static_cast<size_t>(i)]);
  }
  std::vector<CachePrefetch> prefetches;
  if (windows.empty()) return prefetches;
  std::vector<int> reads_before = reads_of(launches, windows[0].first, windows[0].second);
  for (size_t w = 1; w < windows.size(); ++w) {
    const std::set<int> read_before(reads_before.begin(), reads_before.end());
    std::vector<int> reads = reads_of(launches, windows[w].first, windows[w].second);
    CachePrefetch p{windows[w - 1].second, {}};
    uint64_t bytes = 0;
    for (int b : reads) {
      const PlannedBuffer& buf = buffers[static_cast<size_t>(b)];
      if (!buf.persistent || ever_written[static_cast<size_t>(b)] || read_before.count(b) ||
          buf.bytes < options.min_buffer_bytes) {
        continue;
      }
      if (p.buffers.size() + 1 >= options.max_bindings) break;
      if (bytes + buf.bytes > options.max_window_bytes) continue;
      bytes += buf.bytes;
      p.buffers.push_back(b);
    }
    if (!p.buffers.empty()) prefetches.push_back(std::move(p));
    reads_before = std::move(reads);
  }
  return prefetches;
}

std::vector<int> insert_cache_prefetches(std::vector<PlannedLaunch>& launches,
                                         const std::vector<PlannedBuffer>& buffers,
                                         const std::vector<CachePrefetch>& prefetches, int sink,
                                         const codegen::DeviceTraits& device) {
  std::vector<PlannedLaunch> out;
  out.reserve(launches.size() + prefetches.size());
  std::vector<int> moved(launches.size());
  size_t next = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    moved[i] = static_cast<int>(out.size());
    out.push_back(std::move(launches[i]));
    for (; next < prefetches.size() && prefetches[next].after == static_cast<int>(i); ++next) {
      std::vector<uint64_t> bytes;
      for (int b : prefetches[next].buffers) bytes.push_back(buffers[static_cast<size_t>(b)].bytes);
      PlannedLaunch p;
      p.kernel = codegen::cache_prefetch_kernel(bytes, device);
      p.buffers = prefetches[next].buffers;
      p.buffers.push_back(sink);
      out.push_back(std::move(p));
    }
  }
  launches = std::move(out);
  return moved;
}

}  // namespace mn::plan
