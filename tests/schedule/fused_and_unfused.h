#pragma once
// A graph's step on the device (lavapipe in CI) with fusion on and with every node its own
// kernel (MN_FUSION=0): the outputs by name and the launches of each, for the schedule tests
// that compare a fused plan with the unfused one.
#include <map>
#include <string>

#include <meganeura/array.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/scoped_env.h"

namespace mn::testing {

using StepOutputs = std::map<std::string, Array>;

// One step of `g` fed `feeds`: every output, and the step's dispatches.
inline std::pair<StepOutputs, size_t> run_step(const Graph& g, const reference::Feeds& feeds) {
  auto s = build_session(g);
  for (const auto& [name, value] : feeds) s->set(name, value);
  s->step();
  StepOutputs out;
  for (const std::string& name : s->output_names()) out[name] = s->get(name);
  return {out, s->memory().dispatches};
}

struct FusedAndUnfused {
  StepOutputs fused;
  size_t fused_dispatches = 0;
  StepOutputs unfused;
  size_t unfused_dispatches = 0;
};

inline FusedAndUnfused run_fused_and_unfused(const Graph& g, const reference::Feeds& feeds) {
  FusedAndUnfused r;
  std::tie(r.fused, r.fused_dispatches) = run_step(g, feeds);
  ScopedEnv off("MN_FUSION", "0");
  std::tie(r.unfused, r.unfused_dispatches) = run_step(g, feeds);
  return r;
}

}  // namespace mn::testing
