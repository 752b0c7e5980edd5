// The tensor-core self-test on the device: every tile configuration the device offers passes
// through NV and through the KHR rewrite, its products are exact (operands on a 1/64 grid, so
// any error at all is a wrong kernel; the pass threshold of 1e-5 is a margin, not a tolerance
// of rounding), and sessions on the device get the tensor-core traits it grants.
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "codegen/lower_matmul_coop.h"
#include "codegen/lower_matmul_coop_wg.h"
#include "runtime/coop_selftest.h"
#include "runtime/device_pool.h"
#include "runtime/plan_options.h"
#include "support/tensor_cores.h"

namespace mn::testing {
namespace {

// The mask of every tile the device could run: all subgroup tiles, and the workgroup tiles
// whose granularities it offers.
uint32_t every_tile(const codegen::DeviceTraits& t) {
  uint32_t mask = 0;
  for (size_t i = 0; i < codegen::coop_tiles().size(); ++i) mask |= 1u << i;
  const auto wg = codegen::coop_wg_tiles();
  for (size_t i = 0; i < wg.size(); ++i) {
    if (codegen::coop_wg_tile_supported(wg[i], t)) mask |= 1u << (codegen::kCoopWgTileBit + i);
  }
  return mask;
}

void check_selftest(CoopPath path) {
  const codegen::DeviceTraits t = coop_trial_traits(path);
  auto dev = runtime::shared_device("", std::nullopt);
  std::string report;
  const uint32_t mask = runtime::run_coop_selftest(*dev, t, &report);
  EXPECT_EQ(mask, every_tile(t)) << report;
  // One line per tile and case: "<tile> <case>: relative error <e>".
  const std::regex line(R"((\S+) (\S+): relative error (\S+)( FAILED)?)");
  std::istringstream in(report);
  std::string s;
  int lines = 0;
  while (std::getline(in, s)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(s, m, line)) << s;
    ++lines;
    EXPECT_FALSE(m[4].matched) << s;
    const double err = std::stod(m[3]);
    // f32 outputs of exact products summed in f32 are exact (|sums| < 2^9 on a 2^-12 grid);
    // an f16 output rounds each element once.
    EXPECT_LE(err, m[2] == "nt_f16" ? 0x1p-11 : 0.0) << s;
  }
  EXPECT_GE(lines, 3 * static_cast<int>(codegen::coop_tiles().size())) << report;
}

TEST(CoopSelfTestGpu, EveryTilePassesThroughNv) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  check_selftest(CoopPath::nv);
}

TEST(CoopSelfTestGpu, EveryTilePassesThroughKhr) {
  MN_REQUIRE_COOP_PATH(CoopPath::khr);
  check_selftest(CoopPath::khr);
}

// What sessions plan with: the cached (or fresh) self-test's grant of every tile.
TEST(CoopSelfTestGpu, SessionsGetEveryTile) {
  MN_REQUIRE_COOP_PATH(CoopPath::nv);
  const codegen::DeviceTraits t = runtime::plan_options(std::string()).device;
  if (const char* off = std::getenv("MN_DISABLE_COOP"); off && std::string(off) != "0") {
    GTEST_SKIP() << "MN_DISABLE_COOP is set";
  }
  EXPECT_TRUE(t.coop);
  EXPECT_EQ(t.coop_tiles, every_tile(t));
}

}  // namespace
}  // namespace mn::testing
