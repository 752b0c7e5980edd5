// `mn smolvla` as a user runs it: the small expert of tests/fixtures/smolvla saved as a
// SmolVLA policy saves it (keys prefixed "model.", beside a tensor of the VLM's), its prefix and
// noise: the actions it writes are lerobot's sampling loop's; bad calls name what is wrong.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include <meganeura/data.h>
#include <meganeura/tensor_data.h>

#include "support/random_fill.h"
#include "support/run_command.h"
#include "support/scratch_dir.h"

namespace mn {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/smolvla" / name;
}

struct PolicyFiles {
  test::ScratchDir dir{"smolvla-cli"};
  std::filesystem::path weights = dir.path() / "model.safetensors";
  std::filesystem::path noise = dir.path() / "noise.npy";
  PolicyFiles() {
    const SafetensorsReader r(fixture("expert.safetensors"));
    std::map<std::string, Array> policy;
    for (const SafetensorsEntry& e : r.entries()) policy["model." + e.name] = r.array(e.name);
    policy["model.state_proj.weight"] = Array({4, 6}, DType::f32);  // the prefix's, not read
    save_safetensors(weights, policy);
    write_npy(noise, from_array(SafetensorsReader(fixture("io.safetensors")).array("noise")));
  }
};

TEST(SmolVlaCli, SamplesAsLerobot) {
  PolicyFiles f;
  const auto out = f.dir.path() / "actions.npy";
  const test::CommandResult r =
      test::run_mn({"smolvla", "--weights", f.weights.string(), "--head-dim", "8", "--chunk", "5",
                    "--prefix", fixture("io.safetensors").string(), "--noise", f.noise.string(),
                    "--output", out.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["actions"], nlohmann::json::parse("[2, 5, 6]"));
  EXPECT_EQ(j["prefix"], nlohmann::json::parse("[2, 7]"));
  EXPECT_EQ(j["layers"], 4);
  const Array want = SafetensorsReader(fixture("io.safetensors")).array("sample");
  EXPECT_LT(testing::scaled_error(to_array(read_npy(out), "actions.npy"), want), 1e-4);
}

TEST(SmolVlaCli, BadCallsSayWhatIsWrong) {
  PolicyFiles f;
  auto fails_with = [](const test::CommandResult& r, const std::string& says) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  };
  const std::string weights = f.weights.string(), prefix = fixture("io.safetensors").string();
  fails_with(test::run_mn({"smolvla", "--weights", weights, "--head-dim", "7"}),
             "not a multiple of --head-dim 7");
  fails_with(test::run_mn({"smolvla", "--weights", prefix}),
             "no tensor 'model.action_in_proj.weight'");
  fails_with(test::run_mn({"smolvla", "--weights", weights, "--head-dim", "8", "--prefix", prefix,
                           "--noise", f.noise.string()}),
             "the noise is f32[2, 5, 6]");
  fails_with(test::run_mn({"smolvla", "--weights", weights, "--head-dim", "8", "--chunk", "5",
                           "--self-attn-every", "3", "--prefix", prefix}),
             "k_proj");
  std::map<std::string, Array> half;
  const SafetensorsReader io(fixture("io.safetensors"));
  for (const SafetensorsEntry& e : io.entries()) {
    if (e.name.starts_with("prefix_")) half[e.name] = io.array(e.name);
  }
  half["prefix_mask"].data[3] = 0.5;
  const auto bad_prefix = f.dir.path() / "half.safetensors";
  save_safetensors(bad_prefix, half);
  fails_with(test::run_mn({"smolvla", "--weights", weights, "--head-dim", "8", "--chunk", "5",
                           "--prefix", bad_prefix.string()}),
             "prefix_mask holds 0.500000 at element 3");
}

}  // namespace
}  // namespace mn
