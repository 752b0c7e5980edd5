#pragma once
// A program's step recorded into a command buffer: the inputs' uploads, its kernels and
// assignment copies (one run), the readbacks. Chains (program_chain.cpp) record the run pieces
// several times.
#include <string>
#include <string_view>

#include "runtime/session_impl.h"

namespace mn::runtime {

vk::RecordingOptions recording_options(const std::string& label, const SessionOptions& options);
// The bytes of a named tensor's value in the arena (its buffer may be longer).
vk::Range tensor_range(const Session::Impl& impl, const Program& prog, std::string_view name);
// Inputs from the staging buffer, where the host does not write the arena itself.
void record_uploads(const Session::Impl& impl, const Program& prog, vk::Recording& rec);
// One run of the program: its kernels (numerics probes and poisoning as the options ask) and
// its assignment copies. `operands`: KernelTime::operands of each operation, for profiles.
void record_run(const Session::Impl& impl, Program& prog, vk::Recording& rec,
                const SessionOptions& options, bool operands);
// Outputs to the readback buffer (where the host does not read the arena itself), and the
// index checks' slots.
void record_downloads(const Session::Impl& impl, const Program& prog, vk::Recording& rec);
// The step: uploads, one run, readbacks (Program::recording).
void record_step(Session::Impl& impl, Program& prog, const SessionOptions& options);

}  // namespace mn::runtime
