// A decoding attention's key ranges combined by the output projection that reads it
// (schedule/attention_partials.h): the attention stores its partials, the GEMV combines them as
// it loads its vector. The plan names both; the values stay the reference's at positions that
// leave ranges idle, fill every range or see no key, with the caches read as they are and with
// a decoding step's rotations and cache writes.
#include <gtest/gtest.h>

#include <algorithm>

#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "plan/step_plan.h"
#include "schedule/decode_plans.h"
#include "support/random_fill.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

// Caches of 200 slots unless a test asks for more: a query's keys split over workgroups.
constexpr int64_t kHeads = 4, kKvHeads = 2, kOut = 40;

// One query a head attends over caches of kSlots slots up to its position, its heads' outputs
// projected by W with a residual: y = reshape(attention) · Wᵀ + r. With `append`, the step
// rotates q and k by the position and writes k and v into the caches first, as a decoding layer
// does; otherwise the caches are inputs read as they are.
// Heads of `dim`, caches of `cache` (read widened, as a decoding step with 16-bit caches does).
struct DecodeProjection {
  Graph g;
  explicit DecodeProjection(bool append, int64_t dim = 16, DType cache = DType::f32,
                            int64_t slots = 200) {
    Tensor positions = g.input("positions", {1, 1}, DType::i32);
    Tensor rows = unsqueeze(positions, 1);
    Tensor q = g.input("q", {1, kHeads, 1, dim});
    Tensor keys, values;
    if (append) {
      q = rope_positions(q, rows);
      auto write = [&](const char* name, Tensor x) {
        Tensor state = g.state(name, {1, kKvHeads, slots, dim}, Init::zeros(), cache);
        Tensor updated = cache_write(state, cache == DType::f32 ? x : cast(x, cache), positions);
        g.assign(state, updated);
        return updated;
      };
      keys = write("k_cache", rope_positions(g.input("k", {1, kKvHeads, 1, dim}), rows));
      values = write("v_cache", g.input("v", {1, kKvHeads, 1, dim}));
    } else {
      keys = g.input("keys", {1, kKvHeads, slots, dim}, cache);
      values = g.input("values", {1, kKvHeads, slots, dim}, cache);
    }
    if (cache != DType::f32) {
      keys = cast(keys, DType::f32);
      values = cast(values, DType::f32);
    }
    Tensor o = reshape(cached_attention(q, keys, values, rows), {1, 1, kHeads * dim});
    Tensor w = g.parameter("w", {kOut, kHeads * dim}, Init::zeros());
    g.output("y", matmul(o, w, false, true) + g.input("r", {1, 1, kOut}));
  }
};

using testing::count_containing;

std::vector<std::string> launch_names(const Graph& g, bool partials) {
  codegen::DeviceTraits d = testing::decode_device();
  d.attention_partials_in_products = partials;
  return testing::launch_names(g, d);
}

TEST(AttentionPartials, TheProjectionCombinesThem) {
  for (bool append : {false, true}) {
    DecodeProjection step(append);
    const std::vector<std::string> names = launch_names(step.g, true);
    const std::string all = ::testing::PrintToString(names);
    EXPECT_EQ(count_containing(names, "attention_split"), 1u) << all;
    EXPECT_EQ(count_containing(names, "+partials"), 1u) << all;
    EXPECT_EQ(count_containing(names, "matmul_gemv+prologue[attention_combine]+epilogue[add]"), 1u)
        << all;
    // Without the switch the attention combines its own ranges.
    const std::vector<std::string> off = launch_names(step.g, false);
    EXPECT_EQ(count_containing(off, "attention_split"), 1u) << ::testing::PrintToString(off);
    EXPECT_EQ(count_containing(off, "+partials"), 0u) << ::testing::PrintToString(off);
    EXPECT_EQ(count_containing(off, "attention_combine"), 0u) << ::testing::PrintToString(off);
  }
}

// The attention's output read by another kernel too, or kept as an output: it stays whole.
TEST(AttentionPartials, OnlyWhereTheProjectionIsTheOneReader) {
  DecodeProjection kept(false);
  const NodeId y = *kept.g.find_output("y");
  // The attention: the reshape's operand, the matmul's input 0.
  const NodeId mm = kept.g.node(kept.g.node(y).inputs.at(0)).op_name() == "matmul"
                        ? kept.g.node(y).inputs.at(0)
                        : kept.g.node(y).inputs.at(1);
  const NodeId attention = kept.g.node(kept.g.node(mm).inputs.at(0)).inputs.at(0);
  ASSERT_EQ(kept.g.node(attention).op_name(), "cached_attention");
  kept.g.output("attention", Tensor(&kept.g, attention));
  std::vector<std::string> names = launch_names(kept.g, true);
  EXPECT_EQ(count_containing(names, "+partials"), 0u) << ::testing::PrintToString(names);

  DecodeProjection twice(false);
  const NodeId o = twice.g.node(*twice.g.find_output("y")).inputs.at(0);
  twice.g.output("sum", sum(Tensor(&twice.g, twice.g.node(o).inputs.at(0))));
  names = launch_names(twice.g, true);
  EXPECT_EQ(count_containing(names, "+partials"), 0u) << ::testing::PrintToString(names);
}

// Steps on the device (lavapipe in CI) against reference::run_step, with the switch on (the
// default) and off: positions leaving three of four ranges idle, two, none, and (caches read as
// they are) a query seeing no key, whose output is zeros.
void expect_reference_steps(bool append, const std::vector<int32_t>& positions, int64_t dim = 16,
                            DType cache = DType::f32, double tolerance = 2e-5,
                            int64_t slots = 200) {
  const std::string what = std::string(append ? "append" : "caches") + "_d" + std::to_string(dim) +
                           "_" + std::string(dtype_name(cache)) + "_" + std::to_string(slots);
  for (const char* partials : {"1", "0"}) {
    testing::ScopedEnv env("MN_ATTENTION_PARTIALS_IN_PRODUCTS", partials);
    DecodeProjection step(append, dim, cache, slots);
    std::mt19937_64 rng = testing::rng_for("attention_partials_" + what);
    reference::Feeds persistent;
    for (NodeId id : step.g.states()) {
      persistent[step.g.node(id).name] = testing::random_array(rng, step.g.node(id).type);
    }
    for (NodeId id : step.g.parameters()) {
      persistent[step.g.node(id).name] = testing::random_array(rng, step.g.node(id).type);
    }
    SessionOptions so;
    so.profile = true;
    auto session = build_session(step.g, so);
    for (const auto& [name, value] : persistent) session->set(name, value);
    for (int32_t position : positions) {
      reference::Feeds inputs;
      for (NodeId id : step.g.inputs()) {
        const Node& n = step.g.node(id);
        if (n.name != "positions") inputs[n.name] = testing::random_array(rng, n.type);
      }
      inputs["positions"] = Array({1, 1}, DType::i32, {static_cast<double>(position)});
      const Array expected = reference::run_step(step.g, inputs, persistent).at("y");
      for (const auto& [name, value] : inputs) session->set(name, value);
      session->step();
      EXPECT_LE(testing::scaled_error(session->get("y"), expected), tolerance)
          << what << ", position " << position << ", switch " << partials;
    }
    // The device's kernels are the ones the switch asks for.
    std::vector<std::string> names;
    for (const KernelTime& k : session->profile()) names.push_back(k.name);
    EXPECT_EQ(count_containing(names, "prologue[attention_combine]"),
              std::string_view(partials) == "1" ? 1u : 0u)
        << ::testing::PrintToString(names);
  }
}

TEST(AttentionPartials, ValuesMatchTheReference) {
  expect_reference_steps(false, {3, 150, 199, -1});
  expect_reference_steps(true, {3, 4, 150, 199});
}

// Heads of 128 (a lane's two quads of keys and values), 16-bit caches, a long cache (past eight
// ranges the projection combines the further ones eight at a time), and a key/value head's
// group of query heads in one workgroup (MN_ATTENTION_DECODE_GROUPS=1: each workgroup stores
// two rows' partials, idle ones two empty partials).
TEST(AttentionPartials, WideHeadsSixteenBitAndLongCachesAndGroupsOfHeads) {
  expect_reference_steps(false, {5, 199, -1}, 128);
  expect_reference_steps(true, {3, 150}, 16, DType::bf16, 1e-2);
  expect_reference_steps(false, {3, 150}, 16, DType::f16, 2e-3);
  expect_reference_steps(false, {5, 1100, 2099, -1}, 16, DType::f32, 2e-5, 2100);
  expect_reference_steps(true, {2, 1500}, 16, DType::f32, 2e-5, 2100);
  testing::ScopedEnv groups("MN_ATTENTION_DECODE_GROUPS", "1");
  expect_reference_steps(false, {3, 150, 199, -1});
  expect_reference_steps(true, {3, 4, 199});
}

}  // namespace
}  // namespace mn
