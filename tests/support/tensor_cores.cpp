#include "support/tensor_cores.h"

#include <cstdlib>
#include <sstream>

#include <meganeura/error.h>

#include "codegen/lower_matmul_coop_wg.h"
#include "codegen/shader/current_glslang.h"
#include "runtime/coop_support.h"
#include "runtime/device_pool.h"
#include "runtime/plan_options.h"

namespace mn::testing {

namespace {

const vk::DeviceCapabilities& capabilities() {
  static const vk::DeviceCapabilities caps =
      runtime::shared_device("", std::nullopt)->capabilities();
  return caps;
}

std::string candidate_missing(runtime::CoopMode mode) {
  const runtime::CoopCandidate c = runtime::coop_candidate(capabilities(), mode);
  return c.usable ? std::string() : capabilities().name + ": " + c.reason;
}

bool any_workgroup_tile(const codegen::DeviceTraits& t) {
  for (const codegen::CoopWgTile& tile : codegen::coop_wg_tiles()) {
    if (codegen::coop_wg_tile_supported(tile, t)) return true;
  }
  return false;
}

}  // namespace

const char* coop_path_name(CoopPath p) {
  switch (p) {
    case CoopPath::nv:
      return "nv";
    case CoopPath::khr:
      return "khr";
    case CoopPath::workgroup:
      return "wg";
    case CoopPath::f16_storage:
      return "f16";
    case CoopPath::tensor:
      return "tensor";
    case CoopPath::bf16:
      return "bf16";
  }
  return "?";
}

std::string coop_path_missing(CoopPath path) {
  switch (path) {
    case CoopPath::nv:
      return candidate_missing(runtime::CoopMode::nv);
    case CoopPath::khr:
      return candidate_missing(runtime::CoopMode::khr);
    case CoopPath::workgroup: {
      // The workgroup-scope kernels are compiled through the KHR rewrite.
      if (std::string why = candidate_missing(runtime::CoopMode::khr); !why.empty()) return why;
      if (!any_workgroup_tile(runtime::device_traits(capabilities()))) {
        return capabilities().name +
               ": no workgroup-scope f16*f16+f32 matrices whose granularities divide a tile";
      }
      return {};
    }
    case CoopPath::tensor: {
      if (std::string why = coop_path_missing(CoopPath::workgroup); !why.empty()) return why;
      if (!runtime::device_traits(capabilities()).coop_tensor) {
        const auto& cm = capabilities().cooperative_matrix;
        if (!cm.tensor_addressing || !cm.per_element_operations) {
          return capabilities().name +
                 ": no cooperativeMatrixTensorAddressing or PerElementOperations";
        }
        if (!codegen::current_glslang().available) return codegen::current_glslang().status;
        return "tensor-addressed kernels turned off (MN_COOP_TENSOR=0)";
      }
      return {};
    }
    case CoopPath::bf16: {
      if (std::string why = coop_path_missing(CoopPath::nv); !why.empty()) return why;
      if (!runtime::device_traits(capabilities()).coop_bf16) {
        if (!codegen::current_glslang().available) return codegen::current_glslang().status;
        return capabilities().name +
               ": no 16x16x16 bf16*bf16+f32 subgroup matrices (VK_KHR_shader_bfloat16)";
      }
      return {};
    }
    case CoopPath::f16_storage: {
      if (!capabilities().types.storage_16bit) return capabilities().name + ": no 16-bit storage";
      const std::string nv = candidate_missing(runtime::CoopMode::nv);
      const std::string khr = candidate_missing(runtime::CoopMode::khr);
      return nv.empty() || khr.empty() ? std::string() : nv;
    }
  }
  return "unknown path";
}

bool coop_path_required(CoopPath path) {
  const char* v = std::getenv("MN_REQUIRE_COOP");
  if (!v || !*v || std::string(v) == "0") return false;
  if (std::string(v) == "1" || std::string(v) == "all") return true;
  bool required = false;
  std::istringstream words(v);
  std::string word;
  while (std::getline(words, word, ',')) {
    bool known = false;
    for (CoopPath p : {CoopPath::nv, CoopPath::khr, CoopPath::workgroup, CoopPath::f16_storage,
                       CoopPath::tensor, CoopPath::bf16}) {
      if (word == coop_path_name(p)) {
        known = true;
        required = required || p == path;
      }
    }
    if (!known) {
      throw Error("MN_REQUIRE_COOP='" + std::string(v) + "': unknown path '" + word +
                  "' (expected 1, all, or a comma list of nv, khr, wg, f16, tensor, bf16)");
    }
  }
  return required;
}

codegen::DeviceTraits coop_trial_traits(CoopPath path) {
  codegen::DeviceTraits t = runtime::device_traits(capabilities());
  t.coop = true;
  t.coop_tiles = ~0u;
  // Through the rewrite where asked, or where the device has no NV path.
  t.coop_khr = path == CoopPath::khr || !candidate_missing(runtime::CoopMode::nv).empty();
  if (path == CoopPath::khr) {
    // As a device with only the KHR matrices (AMD, Intel): no NV tensor addressing, so neither the
    // tensor-addressed products nor attention's tensor-addressed kernels.
    t.coop_tensor = t.coop_tensor_conversions = t.coop_tensor_reductions = false;
    t.tensor_attention = false;
  }
  return t;
}

bool sessions_use_tensor_cores() { return runtime::plan_options(std::string()).device.coop; }

}  // namespace mn::testing
