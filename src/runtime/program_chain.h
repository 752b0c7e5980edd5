#pragma once
// Chains (SessionProgram::chain): a program's runs recorded back to back into one command
// buffer, with per-run inputs uploaded before each run, outputs fed to the next run's inputs and
// collected after each. The Session methods (set_runs, step_chain, get_runs) live beside them.
#include "runtime/session_impl.h"

namespace mn::runtime {

// A chain's names checked against the program, and its buffers (Program::chain): in memory the
// device reads fastest where `device_memory` (the host maps the arena), host memory otherwise;
// nothing for a program without one.
void build_chain(vk::Device& dev, Program& p, const ProgramChain& spec, bool device_memory);
// Program::chain's recording.
void record_chain(Session::Impl& impl, Program& prog, const SessionOptions& options);

}  // namespace mn::runtime
