#include "runtime/coop_support.h"

#include <array>
#include <cstdlib>
#include <sstream>

#include <meganeura/error.h>

#include "codegen/shader/shader_compiler.h"
#include "support/env_switch.h"
#include "vulkan/cache_dir.h"

namespace mn::runtime {

namespace {

constexpr uint32_t kNvidia = 0x10de;

// Kept short: an entry is for a device where what the driver reports is known to be wrong.
constexpr std::array<CoopTableEntry, 2> kTable{{
    // llvmpipe reports no cooperative matrices today; should a Mesa version start to, its
    // software emulation would be far slower than the scalar kernel.
    {0, "llvmpipe", "", false, "software rasterizer: emulated matrices are slower"},
    // Pre-Turing NVIDIA GPUs (GTX 10xx) expose VK_NV_cooperative_matrix through emulation on
    // some drivers; tensor cores start with Volta/Turing.
    {kNvidia, "GTX 10", "", false, "no tensor cores (Pascal)"},
}};

bool contains(const std::string& hay, std::string_view needle) {
  return needle.empty() || hay.find(needle) != std::string::npos;
}

bool has_f16_16x16x16(const std::vector<vk::CooperativeMatrixConfig>& configs) {
  for (const auto& m : configs) {
    if (m.m == 16 && m.n == 16 && m.k == 16 && m.a_type == "f16" && m.b_type == "f16" &&
        m.c_type == "f32" && m.result_type == "f32" && m.scope == "subgroup") {
      return true;
    }
  }
  return false;
}

}  // namespace

CoopMode coop_mode_from_env() {
  if (support::env_switch("MN_DISABLE_COOP", false)) return CoopMode::off;
  const char* m = std::getenv("MN_COOP");
  if (!m || !*m || std::string(m) == "auto") return CoopMode::automatic;
  const std::string v(m);
  if (v == "off" || v == "0") return CoopMode::off;
  if (v == "nv") return CoopMode::nv;
  if (v == "khr") return CoopMode::khr;
  throw Error("MN_COOP='" + v + "': expected auto, off, nv or khr");
}

std::span<const CoopTableEntry> coop_table() { return kTable; }

CoopCandidate coop_candidate(const vk::DeviceCapabilities& c, CoopMode mode) {
  CoopCandidate r;
  if (mode == CoopMode::off) {
    r.reason = "disabled (MN_DISABLE_COOP / MN_COOP=off)";
    return r;
  }
  for (const CoopTableEntry& e : kTable) {
    if ((e.vendor_id == 0 || e.vendor_id == c.vendor_id) && contains(c.name, e.name_contains) &&
        (contains(c.driver_name, e.driver_contains) ||
         contains(c.driver_info, e.driver_contains))) {
      if (!e.allow) {
        r.reason = "capability table: " + std::string(e.why);
        return r;
      }
      r.usable = true;  // the table vouches for it; the self-test still decides
      r.khr = mode == CoopMode::khr;
      r.reason = "capability table: " + std::string(e.why);
      return r;
    }
  }
  const auto& cm = c.cooperative_matrix;
  if (mode == CoopMode::khr) {
    r.khr = true;
    if (!cm.khr_feature) {
      r.reason = "no VK_KHR_cooperative_matrix";
    } else if (!has_f16_16x16x16(cm.khr_configs)) {
      r.reason = "no 16x16x16 f16*f16+f32 subgroup configuration (KHR)";
    } else {
      r.usable = true;
      r.reason = "KHR";
    }
    return r;
  }
  if (!cm.nv_feature) {
    r.reason = "no VK_NV_cooperative_matrix";
  } else if (!has_f16_16x16x16(cm.nv_configs)) {
    r.reason = "no 16x16x16 f16*f16+f32 subgroup configuration (NV)";
  } else if (!c.types.float16) {
    r.reason = "no shaderFloat16";
  } else if (!c.vulkan_memory_model) {
    r.reason = "no vulkanMemoryModel";
  } else {
    r.usable = true;
    r.reason = "NV";
  }
  return r;
}

std::string coop_selftest_key(const vk::DeviceCapabilities& c, bool khr,
                              const std::string& kernels) {
  std::ostringstream k;
  k << std::hex << c.vendor_id << ':' << c.device_id << ':' << c.driver_version << ':';
  for (uint8_t b : c.pipeline_cache_uuid) k << static_cast<int>(b);
  k << ':' << (khr ? "khr" : "nv") << ':'
    << std::hash<std::string>{}(codegen::compiler_version() + "\n" + kernels);
  std::string s = k.str();
  for (char& ch : s) {
    if (ch == '\t' || ch == '\n' || ch == ' ') ch = '_';
  }
  return s;
}

void CoopSelfTestCache::load() {
  if (loaded_) return;
  loaded_ = true;
  const auto bytes = vk::read_file(file_);
  if (!bytes) return;
  std::istringstream in(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) continue;  // a torn or foreign line: ignored
    try {
      entries_[line.substr(0, tab)] = static_cast<uint32_t>(std::stoul(line.substr(tab + 1)));
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): ignored like a torn line
    }
  }
}

std::optional<uint32_t> CoopSelfTestCache::find(const std::string& key) {
  std::lock_guard lock(mutex_);
  load();
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void CoopSelfTestCache::store(const std::string& key, uint32_t mask) {
  std::lock_guard lock(mutex_);
  load();
  entries_[key] = mask;
  std::string text;
  for (const auto& [k, v] : entries_) text += k + "\t" + std::to_string(v) + "\n";
  try {
    vk::write_file_atomic(file_, std::as_bytes(std::span(text.data(), text.size())));
  } catch (const Error&) {  // NOLINT(bugprone-empty-catch): an unwritable cache costs a re-test
  }
}

CoopSelfTestCache& default_coop_cache() {
  static CoopSelfTestCache cache(vk::default_cache_dir() / "coop_selftest.txt");
  return cache;
}

void configure_coop(const vk::DeviceCapabilities& c, CoopMode mode, CoopSelfTestCache& cache,
                    const std::string& kernels, const CoopSelfTest& self_test,
                    codegen::DeviceTraits& t) {
  t.coop = false;
  t.coop_khr = false;
  t.coop_tiles = 0;
  const CoopCandidate cand = coop_candidate(c, mode);
  if (!cand.usable) return;
  const std::string key = coop_selftest_key(c, cand.khr, kernels);
  std::optional<uint32_t> mask = cache.find(key);
  if (!mask) {
    codegen::DeviceTraits trial = t;
    trial.coop = true;
    trial.coop_khr = cand.khr;
    trial.coop_tiles = ~0u;
    mask = self_test(trial);
    cache.store(key, *mask);
  }
  t.coop = *mask != 0;
  t.coop_khr = t.coop && cand.khr;
  t.coop_tiles = *mask;
}

}  // namespace mn::runtime
