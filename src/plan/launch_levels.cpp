#include "plan/launch_levels.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace mn::plan {
namespace {

bool writes_binding(const codegen::KernelBinding& b) {
  return b.written || b.arg.kind == codegen::ArgRef::Kind::output ||
         b.arg.kind == codegen::ArgRef::Kind::counters;
}

bool depends(const codegen::KernelLaunch& later, const codegen::KernelLaunch& earlier) {
  for (const codegen::KernelBinding& a : later.bindings) {
    if (a.arg.kind == codegen::ArgRef::Kind::index_errors) continue;
    for (const codegen::KernelBinding& b : earlier.bindings) {
      if (a.arg == b.arg && (writes_binding(a) || writes_binding(b))) return true;
    }
  }
  return false;
}

// The buffers a planned launch reads and writes (its own index slot neither: slots are
// separate, see barrier_windows.h).
struct Touches {
  std::set<int> reads, writes;
};

Touches touches_of(const PlannedLaunch& l) {
  Touches t;
  for (size_t k = 0; k < l.buffers.size(); ++k) {
    if (l.buffers[k] < 0) continue;
    (l.kernel.bindings[k].written ? t.writes : t.reads).insert(l.buffers[k]);
  }
  return t;
}

bool conflict(const Touches& a, const Touches& b) {
  for (int x : a.writes) {
    if (b.reads.count(x) || b.writes.count(x)) return true;
  }
  for (int x : a.reads) {
    if (b.writes.count(x)) return true;
  }
  return false;
}

std::vector<Touches> touches_of(const std::vector<PlannedLaunch>& launches) {
  std::vector<Touches> touches;
  touches.reserve(launches.size());
  for (const PlannedLaunch& l : launches) touches.push_back(touches_of(l));
  return touches;
}

// `launches` in `order` (indices into it, each once); returns, per index before, its index after.
std::vector<int> reorder(std::vector<PlannedLaunch>& launches, const std::vector<size_t>& order) {
  std::vector<int> moved(launches.size(), -1);
  std::vector<PlannedLaunch> reordered;
  reordered.reserve(launches.size());
  for (size_t i : order) {
    moved[i] = static_cast<int>(reordered.size());
    reordered.push_back(std::move(launches[i]));
  }
  launches = std::move(reordered);
  return moved;
}

}  // namespace

std::vector<int> writers_of(const std::vector<PlannedLaunch>& launches, size_t buffers) {
  std::vector<int> writers(buffers, 0);
  for (const PlannedLaunch& l : launches) {
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (l.buffers[k] >= 0 && writes_binding(l.kernel.bindings[k])) {
        ++writers[static_cast<size_t>(l.buffers[k])];
      }
    }
  }
  return writers;
}

bool writes_only_own_scratch(const PlannedLaunch& l, const std::vector<PlannedBuffer>& buffers,
                             const std::vector<int>& writers) {
  bool writes = false;
  for (size_t k = 0; k < l.buffers.size(); ++k) {
    const codegen::KernelBinding& b = l.kernel.bindings[k];
    if (b.arg.kind == codegen::ArgRef::Kind::counters ||
        b.arg.kind == codegen::ArgRef::Kind::index_errors) {
      return false;
    }
    if (!writes_binding(b)) continue;
    const PlannedBuffer& pb = buffers[static_cast<size_t>(l.buffers[k])];
    if (b.arg.kind != codegen::ArgRef::Kind::scratch || pb.persistent || pb.node >= 0 ||
        writers[static_cast<size_t>(l.buffers[k])] != 1) {
      return false;
    }
    writes = true;
  }
  return writes;
}

void order_by_dependency_level(codegen::Lowering& l) {
  const size_t n = l.launches.size();
  if (n < 3) return;  // two launches are either dependent or already share a window
  std::vector<int> level(n, 0);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < j; ++i) {
      if (depends(l.launches[j], l.launches[i])) level[j] = std::max(level[j], level[i] + 1);
    }
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return level[a] < level[b]; });
  std::vector<codegen::KernelLaunch> sorted;
  sorted.reserve(n);
  for (size_t i : order) sorted.push_back(std::move(l.launches[i]));
  l.launches = std::move(sorted);
}

std::vector<int> hoist_scratch_launches(std::vector<PlannedLaunch>& launches,
                                        const std::vector<PlannedBuffer>& buffers,
                                        int max_windows) {
  const std::vector<int> writers = writers_of(launches, buffers.size());
  const std::vector<Touches> touches = touches_of(launches);
  std::vector<std::vector<int>> windows;  // launch indices, as barrier_run_ends would cut them
  for (size_t i = 0; i < launches.size(); ++i) {
    const Touches& t = touches[i];
    auto clashes = [&](const std::vector<int>& window) {
      return std::any_of(window.begin(), window.end(),
                         [&](int j) { return conflict(t, touches[static_cast<size_t>(j)]); });
    };
    if (windows.empty() || clashes(windows.back())) windows.emplace_back();
    size_t at = windows.size() - 1;
    if (writes_only_own_scratch(launches[i], buffers, writers)) {
      for (int back = 0; back < max_windows && at > 0 && !clashes(windows[at - 1]); ++back) --at;
    }
    windows[at].push_back(static_cast<int>(i));
  }
  std::vector<size_t> order;
  for (const std::vector<int>& window : windows)
    order.insert(order.end(), window.begin(), window.end());
  return reorder(launches, order);
}

std::vector<int> defer_tail_launches(std::vector<PlannedLaunch>& launches,
                                     const std::vector<schedule::KernelGroup>& groups) {
  const std::vector<Touches> touches = touches_of(launches);
  auto clashes = [&](size_t i, const std::vector<size_t>& with) {
    return std::any_of(with.begin(), with.end(),
                       [&](size_t j) { return conflict(touches[i], touches[j]); });
  };
  std::vector<size_t> order, window, pending;  // window: the launches of the last window
  auto place = [&](size_t i) {                 // as barrier_run_ends cuts the windows
    if (clashes(i, window)) window.clear();
    window.push_back(i);
    order.push_back(i);
  };
  auto place_pending = [&] {
    for (size_t p : pending) place(p);
    pending.clear();
  };
  for (size_t i = 0; i < launches.size(); ++i) {
    const int group = launches[i].group;
    const bool tail = group >= 0 && groups[static_cast<size_t>(group)].tail;
    if (tail) {
      if (clashes(i, window) || clashes(i, pending)) {
        pending.push_back(i);
      } else {
        place(i);  // it joins the open window
      }
      continue;
    }
    // The deferred launches open the window this one opens, or go before it where it touches
    // what they touch.
    if (clashes(i, window) || clashes(i, pending)) place_pending();
    place(i);
  }
  place_pending();
  return reorder(launches, order);
}

}  // namespace mn::plan
