// A profile's summary: kernel times summed by name (and operands), largest first.
#include <meganeura/session.h>

#include <algorithm>
#include <map>
#include <utility>

namespace mn {

std::vector<KernelTotal> kernel_totals(std::span<const KernelTime> profile, bool by_operands) {
  std::map<std::pair<std::string, std::string>, KernelTotal> sums;
  for (const KernelTime& k : profile) {
    KernelTotal& t = sums[{k.name, by_operands ? k.operands : std::string()}];
    t.name = k.name;
    if (by_operands) t.operands = k.operands;
    if (t.count == 0) t.statistics = k.statistics;
    t.ms += k.ms;
    ++t.count;
  }
  std::vector<KernelTotal> out;
  out.reserve(sums.size());
  for (auto& [key, t] : sums) out.push_back(std::move(t));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace mn
