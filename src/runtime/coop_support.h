#pragma once
// Whether matmuls may use cooperative matrices (tensor cores) on a device: what the driver
// reports, corrected by a table of known devices (drivers misreport), the user's overrides
// (MN_DISABLE_COOP=1, MN_COOP=off|nv|khr), and a self-test of every tile configuration
// against exact products, run once per device and driver and cached on disk.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "codegen/kernel.h"
#include "vulkan/capabilities.h"

namespace mn::runtime {

enum class CoopMode : uint8_t {
  automatic,  // NV GLSL where the device offers it
  off,        // never (MN_DISABLE_COOP=1 or MN_COOP=off)
  nv,         // GL_NV_cooperative_matrix (MN_COOP=nv); as automatic, but says so
  khr,        // the same kernels through the SPV_KHR rewrite (MN_COOP=khr)
};

// From MN_DISABLE_COOP and MN_COOP; mn::Error for an unknown MN_COOP value.
CoopMode coop_mode_from_env();

// A known device whose driver reports cooperative matrices wrongly (or not at all).
struct CoopTableEntry {
  uint32_t vendor_id = 0;            // 0: any
  std::string_view name_contains;    // empty: any
  std::string_view driver_contains;  // in driver_name or driver_info; empty: any
  bool allow = false;                // use (true) or never use (false), whatever is reported
  std::string_view why;
};
std::span<const CoopTableEntry> coop_table();

struct CoopCandidate {
  bool usable = false;
  bool khr = false;    // compile through the KHR rewrite
  std::string reason;  // why not, or which path
};

// Whether the kernels may run here, before any self-test: the reported 16×16×16
// f16·f16+f32 subgroup configuration of the path `mode` selects, the table, and the mode.
CoopCandidate coop_candidate(const vk::DeviceCapabilities& c, CoopMode mode);

// Identifies a device + driver + compiler + kernels (`kernels`: a fingerprint of the generated
// sources): a self-test result stays valid while this is unchanged.
std::string coop_selftest_key(const vk::DeviceCapabilities& c, bool khr,
                              const std::string& kernels);

// Self-test results (bit i: tile configuration i passed), kept in memory and in one small
// text file ("<key>\t<mask>" lines) shared by processes.
class CoopSelfTestCache {
 public:
  explicit CoopSelfTestCache(std::filesystem::path file) : file_(std::move(file)) {}
  std::optional<uint32_t> find(const std::string& key);
  void store(const std::string& key, uint32_t mask);

 private:
  void load();
  std::filesystem::path file_;
  std::mutex mutex_;
  bool loaded_ = false;
  std::map<std::string, uint32_t> entries_;
};

// The process's cache, in the cache folder (MN_CACHE_DIR).
CoopSelfTestCache& default_coop_cache();

// Runs the self-test of every tile configuration; returns the mask of those that passed.
using CoopSelfTest = std::function<uint32_t(const codegen::DeviceTraits&)>;

// Sets t.coop, t.coop_khr and t.coop_tiles: a candidate device gets its cached self-test
// result, or runs `self_test` (with those fields set to try every tile) and caches it.
// `t` must already hold the device's other traits.
void configure_coop(const vk::DeviceCapabilities& c, CoopMode mode, CoopSelfTestCache& cache,
                    const std::string& kernels, const CoopSelfTest& self_test,
                    codegen::DeviceTraits& t);

}  // namespace mn::runtime
