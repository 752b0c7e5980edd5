// A profile's summary: kernel times summed by name, largest first.
#include <meganeura/session.h>

#include <algorithm>
#include <map>

namespace mn {

std::vector<KernelTotal> kernel_totals(std::span<const KernelTime> profile) {
  std::map<std::string, KernelTotal> by_name;
  for (const KernelTime& k : profile) {
    KernelTotal& t = by_name[k.name];
    t.name = k.name;
    if (t.count == 0) t.statistics = k.statistics;
    t.ms += k.ms;
    ++t.count;
  }
  std::vector<KernelTotal> out;
  out.reserve(by_name.size());
  for (auto& [name, t] : by_name) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace mn
