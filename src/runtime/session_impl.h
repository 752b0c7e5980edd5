#pragma once
// What a Session holds: its programs (plan, recorded step, staging buffers, chain) and the
// device, arena and pipelines they share. Shared by the files that build and run sessions
// (session.cpp, record_step.cpp, program_chain.cpp).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/session.h>

#include "plan/program_layout.h"
#include "plan/step_plan.h"
#include "runtime/index_check.h"
#include "runtime/numerics_check.h"
#include "vulkan/arena.h"
#include "vulkan/buffer.h"
#include "vulkan/device.h"
#include "vulkan/pipeline.h"
#include "vulkan/recording.h"

namespace mn {

// One compiled graph of the session: its plan (offsets in the shared arena), its recorded
// step, and its staging buffers when the host does not map the arena.
struct Program {
  std::string name;
  plan::StepPlan plan;
  std::unique_ptr<vk::StagingBuffer> upload, readback;
  std::map<std::string, uint64_t, std::less<>> upload_offset, readback_offset;  // by name
  std::unique_ptr<vk::Recording> recording;
  std::map<std::string, bool, std::less<>> input_set;
  bool stepped = false;  // outputs hold nothing before the first submission
  std::optional<runtime::NumericsCheck> numerics;  // SessionOptions::check_numerics
  std::optional<runtime::IndexSlots> index_slots;  // when its kernels read indices
  // KernelTime::operands of each operation of a profiled recording (by its index; empty for
  // copies).
  std::vector<std::string> op_operands;
  // SessionProgram::chain: its own recording, the per-run values it uploads before each run and
  // the outputs it collects after each (host-visible buffers, a block of `runs` values each).
  struct Chain {
    ProgramChain spec;
    std::unique_ptr<vk::Recording> recording;
    std::unique_ptr<vk::Buffer> per_run, collected;
    std::map<std::string, uint64_t, std::less<>> per_run_offset, collect_offset;  // run 0's
    std::map<std::string, bool, std::less<>> per_run_set;
    bool ran = false;
    bool ran_last = false;  // the program's last submission was the chain's
  };
  std::optional<Chain> chain;

  // The inputs never set, comma-separated, leaving out those `given` another way (a chain's
  // per-run inputs).
  std::string unset_inputs(const std::map<std::string, uint64_t, std::less<>>& given = {}) {
    std::string missing;
    for (const auto& [name, id] : plan.inputs) {
      if (!input_set[name] && !given.count(name)) missing += (missing.empty() ? "" : ", ") + name;
    }
    return missing;
  }
  const plan::PlannedBuffer& buffer_of(NodeId id) const {
    return plan.buffers[static_cast<size_t>(plan.node_buffer[id])];
  }
  const Node* find(std::string_view name) const {
    for (const auto* m : {&plan.inputs, &plan.persistents, &plan.outputs}) {
      auto it = m->find(name);
      if (it != m->end()) return &plan.graph.node(it->second);
    }
    return nullptr;
  }
  NodeId id_of(std::string_view name) const {
    for (const auto* m : {&plan.outputs, &plan.persistents, &plan.inputs}) {
      auto it = m->find(name);
      if (it != m->end()) return it->second;
    }
    throw Error("Session: program '" + this->name + "' has no tensor '" + std::string(name) + "'");
  }
};

struct Session::Impl {
  std::shared_ptr<vk::Device> device;
  std::unique_ptr<vk::Arena> arena;
  std::map<std::string, std::unique_ptr<vk::Pipeline>> pipelines;  // by GLSL source
  std::vector<Program> programs;
  plan::ProgramsLayout layout;
  int pending = -1;            // the program whose submission may still run
  bool pending_chain = false;  // ... through its chain's recording

  Program& program(std::string_view name, const char* what);
  // The program owning `name`: any one that has it for a shared parameter or state, the only
  // one that has it otherwise.
  Program& owner(std::string_view name, const char* what);
  const Node& node_named(std::string_view name, const char* what) {
    return *owner(name, what).find(name);
  }
  void write_tensor(Program& p, std::string_view name, std::span<const std::byte> bytes);
  std::vector<std::byte> read_bytes(const Program& p, std::string_view name);
  Array read_tensor(const Program& p, std::string_view name);
  void finish_pending() {
    if (pending >= 0) {
      const int p = pending;
      pending = -1;
      Program& prog = programs[static_cast<size_t>(p)];
      (pending_chain ? prog.chain->recording : prog.recording)->wait();
      // A bad index comes first: with the check off, it may be what made a NaN.
      if (prog.index_slots) prog.index_slots->check(prog.plan, prog.name);
      if (prog.numerics) runtime::check_numerics(*prog.numerics, prog.plan, prog.name);
    }
  }
};

// A host value encoded in a tensor's dtype.
std::vector<std::byte> host_bytes(const Array& a, DType dtype);

}  // namespace mn
