#include "plan/barrier_windows.h"

#include <algorithm>
#include <map>
#include <set>

namespace mn::plan {

namespace {

// Binding k of launch l: its own slot of the index region, which no other launch touches.
bool own_index_slot(const PlannedLaunch& l, size_t k) {
  return l.kernel.bindings[k].arg.kind == codegen::ArgRef::Kind::index_errors;
}

}  // namespace

std::vector<int> barrier_run_ends(const std::vector<PlannedLaunch>& launches,
                                  bool separate_index_slots) {
  std::vector<int> ends(launches.size());
  std::set<int> written, read;
  size_t start = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    const PlannedLaunch& l = launches[i];
    bool conflict = false;
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (separate_index_slots && own_index_slot(l, k)) continue;
      const int b = l.buffers[k];
      conflict = conflict || written.count(b) || (l.kernel.bindings[k].written && read.count(b));
    }
    if (conflict) {
      for (size_t j = start; j < i; ++j) ends[j] = static_cast<int>(i) - 1;
      start = i;
      written.clear();
      read.clear();
    }
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (separate_index_slots && own_index_slot(l, k)) continue;
      (l.kernel.bindings[k].written ? written : read).insert(l.buffers[k]);
    }
  }
  for (size_t j = start; j < launches.size(); ++j) ends[j] = static_cast<int>(launches.size()) - 1;
  return ends;
}

size_t barrier_windows(const std::vector<PlannedLaunch>& launches) {
  const std::vector<int> ends = barrier_run_ends(launches, true);
  size_t windows = 0;
  for (size_t i = 0; i < ends.size(); ++i) windows += ends[i] == static_cast<int>(i);
  return windows;
}

size_t dependency_depth(const std::vector<PlannedLaunch>& launches) {
  // Per buffer: the depth of its last writer and the deepest reader since.
  std::map<int, size_t> writer, readers;
  size_t deepest = 0;
  for (const PlannedLaunch& l : launches) {
    size_t depth = 1;
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (own_index_slot(l, k)) continue;
      const int b = l.buffers[k];
      if (const auto w = writer.find(b); w != writer.end()) depth = std::max(depth, w->second + 1);
      if (l.kernel.bindings[k].written) {
        if (const auto r = readers.find(b); r != readers.end()) {
          depth = std::max(depth, r->second + 1);
        }
      }
    }
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      if (own_index_slot(l, k)) continue;
      const int b = l.buffers[k];
      if (l.kernel.bindings[k].written) {
        writer[b] = depth;
        readers.erase(b);
      } else {
        readers[b] = std::max(readers[b], depth);
      }
    }
    deepest = std::max(deepest, depth);
  }
  return deepest;
}

}  // namespace mn::plan
