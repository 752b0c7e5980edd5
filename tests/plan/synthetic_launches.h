#pragma once
// Planned launches written by hand for the plan passes' tests: buffer 0 is an input, 1 a node's
// value, and each launch reads given buffers and writes one.
#include <string>
#include <vector>

#include "plan/step_plan.h"

namespace mn::testing {

struct Program {
  std::vector<plan::PlannedBuffer> buffers;
  std::vector<plan::PlannedLaunch> launches;
  int scratch() {
    buffers.push_back({256, 0, false, -1});
    return static_cast<int>(buffers.size() - 1);
  }
  int value() {  // a node's value
    buffers.push_back({256, 0, false, static_cast<NodeId>(buffers.size())});
    return static_cast<int>(buffers.size() - 1);
  }
  Program() {
    buffers.push_back({256, 0, true, 0});
    buffers.push_back({256, 0, false, 1});
  }
  // A launch of `glsl` reading `reads` and writing a new scratch (or `writes`); returns the
  // written buffer.
  int add(const std::string& glsl, std::vector<int> reads, int writes = -1,
          codegen::ArgRef::Kind kind = codegen::ArgRef::Kind::scratch) {
    plan::PlannedLaunch l;
    for (int r : reads) {
      l.kernel.bindings.push_back({codegen::ArgRef::input(0), false});
      l.buffers.push_back(r);
    }
    const int w = writes >= 0 ? writes : scratch();
    l.kernel.bindings.push_back({{kind, 0}, true});
    l.buffers.push_back(w);
    l.kernel.name = l.kernel.glsl = glsl;
    launches.push_back(std::move(l));
    return w;
  }
};

}  // namespace mn::testing
