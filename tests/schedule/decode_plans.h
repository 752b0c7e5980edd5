#pragma once
// What the decode-step schedule tests plan with: a device with subgroup arithmetic, votes and
// shuffles and 16-bit storage (the decode attention's stream kernel and the GEMVs take it), and
// the names of a plan's launches.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/graph.h>

#include "codegen/kernel.h"
#include "plan/step_plan.h"

namespace mn::testing {

inline codegen::DeviceTraits decode_device() {
  codegen::DeviceTraits d;
  d.subgroup_add = true;
  d.subgroup_vote = true;
  d.subgroup_shuffle = true;
  d.storage_16bit = true;
  return d;
}

// The kernel names of g's plan on `device`, in dispatch order.
inline std::vector<std::string> launch_names(const Graph& g, const codegen::DeviceTraits& device) {
  plan::PlanOptions po;
  po.device = device;
  std::vector<std::string> names;
  for (const auto& l : plan::make_step_plan(g, po).launches) names.push_back(l.kernel.name);
  return names;
}

inline size_t count_containing(const std::vector<std::string>& names, std::string_view part) {
  return static_cast<size_t>(std::count_if(names.begin(), names.end(), [&](const std::string& n) {
    return n.find(part) != std::string::npos;
  }));
}

}  // namespace mn::testing
