#include "plan/shared_launches.h"

#include <map>
#include <string>

#include "plan/launch_levels.h"

namespace mn::plan {
namespace {

using codegen::ArgRef;

// The launch's identity: its shader, grid and flags, and per binding the buffer it reads or
// the mark of a write (written scratch differs between repeats by construction).
std::string signature(const PlannedLaunch& l) {
  const codegen::KernelLaunch& k = l.kernel;
  std::string s = k.glsl;
  s += '|';
  for (uint32_t v : k.workgroup) s += std::to_string(v) + ",";
  for (uint32_t v : k.groups) s += std::to_string(v) + ",";
  s += k.coop_khr ? "K" : "-";
  s += k.current_compiler ? "C" : "-";
  for (size_t i = 0; i < l.buffers.size(); ++i) {
    s += k.bindings[i].written ? "|w" : "|r" + std::to_string(l.buffers[i]);
  }
  return s;
}

// The bytes of the scratch buffers `l` writes.
uint64_t written_bytes(const PlannedLaunch& l, const std::vector<PlannedBuffer>& buffers) {
  uint64_t bytes = 0;
  for (size_t k = 0; k < l.buffers.size(); ++k) {
    if (l.kernel.bindings[k].written && l.buffers[k] >= 0) {
      bytes += buffers[static_cast<size_t>(l.buffers[k])].bytes;
    }
  }
  return bytes;
}

}  // namespace

std::vector<int> share_repeated_launches(std::vector<PlannedLaunch>& launches,
                                         const std::vector<PlannedBuffer>& buffers,
                                         const SharedLaunchOptions& options) {
  const std::vector<int> writers = writers_of(launches, buffers.size());
  std::vector<int> redirect(buffers.size());
  for (size_t b = 0; b < buffers.size(); ++b) redirect[b] = static_cast<int>(b);
  std::vector<int> last_write(buffers.size(), -1);  // the last launch so far writing each buffer
  std::map<std::string, int> seen;                  // signature -> the earliest such launch
  std::vector<int> moved(launches.size(), -1);
  int count = 0;
  for (size_t i = 0; i < launches.size(); ++i) {
    PlannedLaunch& l = launches[i];
    for (int& b : l.buffers) {
      if (b >= 0) b = redirect[static_cast<size_t>(b)];
    }
    if (writes_only_own_scratch(l, buffers, writers)) {
      const std::string key = signature(l);
      const auto found = seen.find(key);
      if (found != seen.end()) {
        const int e = found->second;  // index in `launches` of the earlier one
        const PlannedLaunch& earlier = launches[static_cast<size_t>(e)];
        bool unchanged = true;  // nothing it reads was written since
        for (size_t k = 0; k < l.buffers.size(); ++k) {
          if (!l.kernel.bindings[k].written && l.buffers[k] >= 0 &&
              last_write[static_cast<size_t>(l.buffers[k])] > e) {
            unchanged = false;
          }
        }
        const bool near = !options.trains ||
                          static_cast<int>(i) - e <= options.max_training_distance ||
                          written_bytes(l, buffers) <= options.small_scratch_bytes;
        if (unchanged && near) {
          for (size_t k = 0; k < l.buffers.size(); ++k) {
            if (l.kernel.bindings[k].written) {
              redirect[static_cast<size_t>(l.buffers[k])] = earlier.buffers[k];
            }
          }
          continue;
        }
        found->second = static_cast<int>(i);  // changed inputs or too far: match this one next
      } else {
        seen.emplace(key, static_cast<int>(i));
      }
    }
    for (size_t k = 0; k < l.buffers.size(); ++k) {
      const codegen::KernelBinding& b = l.kernel.bindings[k];
      if (l.buffers[k] >= 0 && (b.written || b.arg.kind == ArgRef::Kind::output)) {
        last_write[static_cast<size_t>(l.buffers[k])] = static_cast<int>(i);
      }
    }
    moved[i] = count++;
  }
  std::vector<PlannedLaunch> kept;
  kept.reserve(static_cast<size_t>(count));
  for (size_t i = 0; i < launches.size(); ++i) {
    if (moved[i] >= 0) kept.push_back(std::move(launches[i]));
  }
  launches = std::move(kept);
  return moved;
}

}  // namespace mn::plan
