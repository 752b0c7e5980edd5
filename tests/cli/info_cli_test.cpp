// `mn devices`, `mn ops` and `mn inspect` run as a user runs them: their JSON parses, says what
// the library says (the device sessions choose, every op of the op table with what it has, the
// dispatches a session of the same model records), and the text forms show the same.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/models.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>

#include "ir/op_def.h"
#include "schedule/lowering.h"
#include "support/run_command.h"
#include "support/scoped_env.h"

namespace mn {
namespace {

using nlohmann::json;

json parsed(const test::CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  try {
    return json::parse(r.out);
  } catch (const json::exception& e) {
    ADD_FAILURE() << e.what() << "\n" << r.out;
    return {};
  }
}

// The device a session takes (MN_DEVICE unset in the tests' environment, or honoured by both).
std::string session_device() {
  Graph g;
  g.output("y", g.input("x", {1}) * 2.0);
  return build_session(g)->device_name();
}

TEST(InfoCli, DevicesListsTheDeviceSessionsSelect) {
  const json j = parsed(test::run_mn("devices --json"));
  ASSERT_TRUE(j.contains("devices"));
  ASSERT_FALSE(j["devices"].empty());
  int selected = 0;
  for (const json& d : j["devices"]) {
    for (const char* key : {"index", "name", "type", "usable", "compute", "cooperative_matrix"}) {
      EXPECT_TRUE(d.contains(key)) << key << " missing in " << d.dump();
    }
    if (d["selected"].get<bool>()) {
      ++selected;
      EXPECT_EQ(d["name"].get<std::string>(), session_device());
      EXPECT_TRUE(d["usable"].get<bool>());
    }
  }
  EXPECT_EQ(selected, 1);
  // The shader compilers: the linked one's version, and the current one's or why it is absent.
  ASSERT_TRUE(j.contains("shader_compiler"));
  EXPECT_NE(j["shader_compiler"]["linked"].get<std::string>().find("glslang"), std::string::npos);
  const std::string status = j["shader_compiler"]["current_status"].get<std::string>();
  EXPECT_TRUE(status == "loaded" || status.find("no current glslang") == 0) << status;
  EXPECT_EQ(status == "loaded", !j["shader_compiler"]["current"].get<std::string>().empty());
  const test::CommandResult text = test::run_mn("devices");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find(session_device() + " [selected]"), std::string::npos) << text.out;
}

TEST(InfoCli, DevicesWithAnUnmatchedSelectorSaysSo) {
  testing::ScopedEnv env("MN_DEVICE", "no-such-device-anywhere");
  const test::CommandResult r = test::run_mn("devices --json");
  const json j = parsed(r);
  for (const json& d : j["devices"]) EXPECT_FALSE(d["selected"].get<bool>()) << d["name"];
  EXPECT_NE(r.err.find("no-such-device-anywhere"), std::string::npos) << r.err;
}

// Every op of the table once, with the table's answers; the internal (source) ops too.
TEST(InfoCli, OpsIsTheOpTable) {
  const json j = parsed(test::run_mn("ops --json"));
  std::set<std::string> listed;
  for (const json& op : j["ops"]) {
    const std::string name = op["name"].get<std::string>();
    EXPECT_TRUE(listed.insert(name).second) << name << " listed twice";
    const OpDef& d = op_def(name);
    // Source ops (inputs, parameters) have no evaluation of their own but are read as given.
    EXPECT_EQ(op["reference"].get<bool>(),
              static_cast<bool>(d.eval) || d.archetype == Archetype::source)
        << name;
    EXPECT_EQ(op["backward"].get<bool>(), static_cast<bool>(d.vjp)) << name;
    EXPECT_EQ(op["differentiable"].get<bool>(), d.differentiable) << name;
    EXPECT_EQ(op["decomposition"].get<bool>(), static_cast<bool>(d.decompose)) << name;
    EXPECT_EQ(op["gpu"].get<bool>(), schedule::has_gpu_lowering(d.name)) << name;
    EXPECT_EQ(op["internal"].get<bool>(), d.internal) << name;
  }
  std::set<std::string> table;
  for (const OpDef* d : all_op_defs()) table.insert(d->name);
  EXPECT_EQ(listed, table);
  const test::CommandResult text = test::run_mn("ops");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  for (const char* name : {"matmul", "conv2d", "cross_entropy", "sample_tokens"}) {
    EXPECT_NE(text.out.find(name), std::string::npos) << name;
  }
}

// The kernels `mn inspect` lists are the ones a session of the same training step records.
TEST(InfoCli, InspectReportsWhatASessionRuns) {
  const json j = parsed(test::run_mn("inspect mlp --train --batch 32 --json"));
  ClassifierSpec spec;
  spec.batch = 32;
  Classifier c = build_classifier(spec);
  add_training_step(c.loss, Optimizer::adam());
  const auto s = build_session(*c.graph);
  EXPECT_EQ(j["model"], "mlp");
  EXPECT_EQ(j["train"], true);
  EXPECT_EQ(j["device"].get<std::string>(), s->device_name());
  EXPECT_EQ(j["dispatches_after"].get<size_t>(), s->memory().dispatches);
  EXPECT_EQ(j["kernels"].size(), s->memory().dispatches);
  EXPECT_LT(j["dispatches_after"].get<size_t>(), j["dispatches_before"].get<size_t>());
  EXPECT_LE(j["nodes_after"].get<size_t>(), j["nodes_before"].get<size_t>());
  EXPECT_GT(j["egraph"]["enodes"].get<size_t>(), 0u);
  EXPECT_TRUE(j.contains("graph"));
  // What fills the arena, as the session reports it.
  const MemorySummary mem = s->memory();
  EXPECT_EQ(j["memory"]["parameter_bytes"].get<uint64_t>(), mem.parameter_bytes);
  EXPECT_EQ(j["memory"]["state_bytes"].get<uint64_t>(), mem.state_bytes);
  // The session's plan may keep a scalar or two elsewhere (its read-backs).
  EXPECT_NEAR(j["memory"]["activation_bytes"].get<double>(),
              static_cast<double>(mem.programs.at(0).activation_bytes), 64);
  EXPECT_NEAR(j["memory"]["backward_bytes"].get<double>(),
              static_cast<double>(mem.programs.at(0).backward_bytes), 64);
  EXPECT_GT(mem.parameter_bytes, 0u);
  EXPECT_GT(mem.state_bytes, 0u);
  const json bare = parsed(test::run_mn("inspect mlp --train --batch 32 --json --no-graph"));
  EXPECT_FALSE(bare.contains("graph"));
  const test::CommandResult text = test::run_mn("inspect cnn --no-graph");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("# kernels ("), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("dispatches"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("peak of intermediates at dispatch"), std::string::npos) << text.out;
}

TEST(InfoCli, InspectRefusesUnknownModels) {
  const test::CommandResult r = test::run_mn("inspect resnet");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'resnet'"), std::string::npos) << r.err;
  const test::CommandResult layers = test::run_mn("inspect mlp --layers 2");
  EXPECT_EQ(layers.exit_code, 1);
  EXPECT_NE(layers.err.find("--layers"), std::string::npos) << layers.err;
}

}  // namespace
}  // namespace mn
