#pragma once
// Whether the test device runs the tensor-core (cooperative-matrix) paths, and what a test of
// one does where it cannot: skip, saying why, or fail where MN_REQUIRE_COOP asks for the path
// (scripts/test_gpu.sh sets MN_REQUIRE_COOP=all on the GPU machine, so a driver or traits
// change that loses a path turns the suite red instead of skipping it).
#include <string>

#include <gtest/gtest.h>

#include "codegen/kernel.h"

namespace mn::testing {

enum class CoopPath {
  nv,           // subgroup-scope matrices through GL_NV_cooperative_matrix
  khr,          // the same kernels through the SPV_KHR_cooperative_matrix rewrite
  workgroup,    // workgroup-scope matrices (VK_NV_cooperative_matrix2), matmul and convolution
  f16_storage,  // f16 operands and outputs in memory (16-bit storage)
  tensor,       // tensor-addressed workgroup-scope matrices with the current glslang
  bf16,         // bf16 subgroup-scope matrices with the current glslang (attention's training)
};

const char* coop_path_name(CoopPath p);

// Empty when the test device offers `path`; otherwise why not ("llvmpipe: capability table:
// software rasterizer ..."), naming the device.
std::string coop_path_missing(CoopPath path);

// Whether MN_REQUIRE_COOP requires `path`: "1" or "all" require every path, a comma list
// ("nv,wg,f16,bf16", names as coop_path_name gives them) those named; unset or "0" none. Any other
// word is an error (mn::Error), so a misspelt list cannot quietly require nothing.
bool coop_path_required(CoopPath path);

// The test device's traits with `path` forced on and every tile allowed, as the self-test
// tries them (sessions would take only tiles that passed it): kernels lowered with these run
// on the device whatever the cached self-test says. The KHR path's traits are a KHR-only
// device's: no NV tensor addressing.
codegen::DeviceTraits coop_trial_traits(CoopPath path);

// Whether sessions on the test device plan large products on tensor cores (f16 operands):
// a test comparing such a product with float64 then needs the f16-operand bound, not f32's.
bool sessions_use_tensor_cores();

}  // namespace mn::testing

// Skips the current test when the device lacks `path`, or fails it when MN_REQUIRE_COOP
// requires the path. Use at the top of a test body.
#define MN_REQUIRE_COOP_PATH(path)                                                       \
  do {                                                                                   \
    const std::string mn_coop_missing_ = ::mn::testing::coop_path_missing(path);         \
    if (!mn_coop_missing_.empty()) {                                                     \
      if (::mn::testing::coop_path_required(path)) {                                     \
        FAIL() << "MN_REQUIRE_COOP requires the " << ::mn::testing::coop_path_name(path) \
               << " tensor-core path: " << mn_coop_missing_;                             \
      }                                                                                  \
      GTEST_SKIP() << "no " << ::mn::testing::coop_path_name(path)                       \
                   << " cooperative matrices on this device: " << mn_coop_missing_;      \
    }                                                                                    \
  } while (0)
