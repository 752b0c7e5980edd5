#include "plan/launch_levels.h"

#include <algorithm>
#include <numeric>

namespace mn::plan {
namespace {

bool writes(const codegen::KernelBinding& b) {
  return b.written || b.arg.kind == codegen::ArgRef::Kind::output ||
         b.arg.kind == codegen::ArgRef::Kind::counters;
}

bool depends(const codegen::KernelLaunch& later, const codegen::KernelLaunch& earlier) {
  for (const codegen::KernelBinding& a : later.bindings) {
    if (a.arg.kind == codegen::ArgRef::Kind::index_errors) continue;
    for (const codegen::KernelBinding& b : earlier.bindings) {
      if (a.arg == b.arg && (writes(a) || writes(b))) return true;
    }
  }
  return false;
}

}  // namespace

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

}  // namespace mn::plan
