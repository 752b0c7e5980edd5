// The nn and attention references against PyTorch: tests/ir/fixtures/nn_fixtures.json holds
// inputs, outputs and gradients computed in float64 by make_nn_fixtures.py (see its docstring for
// how each op is written in torch). Values and gradients must agree to 1e-9 relative.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "support/random_fill.h"

namespace mn {
namespace {

using nlohmann::json;

constexpr double kTolerance = 1e-9;

const json& fixtures() {
  static const json j = [] {
    const std::string path = std::string(MN_SOURCE_DIR) + "/tests/ir/fixtures/nn_fixtures.json";
    std::ifstream f(path);
    if (!f) throw Error("cannot open " + path);
    return json::parse(f);
  }();
  return j;
}

Array to_array(const json& t) {
  return Array(t.at("shape").get<Shape>(), DType::f32, t.at("data").get<std::vector<double>>());
}

// The op applied through its public function; outputs by fixture name.
std::map<std::string, Tensor> build(const json& c, const std::map<std::string, Tensor>& in) {
  const std::string op = c.at("op");
  const json& a = c.at("attrs");
  auto get = [&](const char* name) {
    auto it = in.find(name);
    return it == in.end() ? Tensor{} : it->second;
  };
  if (op == "softmax") return {{"y", softmax(get("x"), a.at("axis"))}};
  if (op == "log_softmax") return {{"y", log_softmax(get("x"), a.at("axis"))}};
  if (op == "layer_norm") {
    return {{"y", layer_norm(get("x"), get("gamma"), get("beta"), a.at("normalized_dims"),
                             a.at("eps"))}};
  }
  if (op == "rms_norm") {
    return {{"y", rms_norm(get("x"), get("gamma"), a.at("eps"), a.at("normalized_dims"))}};
  }
  if (op == "group_norm") {
    return {{"y", group_norm(get("x"), a.at("groups"), get("gamma"), get("beta"), a.at("eps"))}};
  }
  if (op == "batch_norm") {
    auto r = batch_norm(get("x"), get("gamma"), get("beta"), get("running_mean"),
                        get("running_var"), a.at("training"), a.at("momentum"), a.at("eps"));
    return {{"y", r.y}, {"running_mean", r.running_mean}, {"running_var", r.running_var}};
  }
  if (op == "scaled_dot_product_attention") {
    return {{"y", scaled_dot_product_attention(get("q"), get("k"), get("v"), get("mask"),
                                               a.at("causal"), a.at("scale"))}};
  }
  if (op == "rope") return {{"y", rope(get("x"), a.at("theta"), a.at("position_offset"))}};
  throw Error("nn fixtures: unknown op " + op);
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  try {
    for (const json& c : fixtures().at("cases")) names.push_back(c.at("name"));
  } catch (const std::exception& e) {
    names.push_back("fixtures_unreadable");
  }
  return names;
}

class NnTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(NnTorch, MatchesPyTorch) {
  const json* found = nullptr;
  for (const json& c : fixtures().at("cases")) {
    if (c.at("name") == GetParam()) found = &c;
  }
  ASSERT_NE(found, nullptr) << "no case " << GetParam();
  const json& c = *found;

  Graph g;
  reference::Feeds feeds;
  std::map<std::string, Tensor> inputs;
  for (const auto& [name, t] : c.at("inputs").items()) {
    Array value = to_array(t);
    inputs[name] = g.input(name, value.shape);
    feeds[name] = std::move(value);
  }
  auto outputs = build(c, inputs);

  std::vector<NodeId> ids;
  std::vector<std::string> what;
  for (const auto& [name, expected] : c.at("outputs").items()) {
    ASSERT_TRUE(outputs.count(name)) << "op gave no output " << name;
    ids.push_back(outputs[name].id());
    what.push_back("output " + name);
  }
  // Gradients of sum(y * cotangent), as the fixture computed them with torch.autograd.
  Tensor y = outputs.at("y");
  // An input, not a constant: constants are rounded to their dtype (f32), fed inputs are not.
  Array cotangent = to_array(c.at("cotangent"));
  Tensor loss = sum(y * g.input("cotangent", cotangent.shape));
  feeds["cotangent"] = std::move(cotangent);
  std::vector<Tensor> wrt;
  for (const auto& [name, expected] : c.at("grads").items()) {
    wrt.push_back(inputs.at(name));
    what.push_back("gradient of " + name);
  }
  for (const Tensor& t : gradients(loss, wrt)) ids.push_back(t.id());

  auto values = reference::evaluate_nodes(g, feeds, ids);
  std::vector<const json*> expected;
  for (const auto& [name, e] : c.at("outputs").items()) expected.push_back(&e);
  for (const auto& [name, e] : c.at("grads").items()) expected.push_back(&e);
  for (size_t i = 0; i < ids.size(); ++i) {
    Array want = to_array(*expected[i]);
    ASSERT_EQ(values[i].shape, want.shape) << what[i];
    EXPECT_LE(testing::relative_error(values[i], want), kTolerance) << what[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, NnTorch, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

TEST(NnTorchFixtures, CoverEveryOp) {
  std::map<std::string, int> count;
  for (const json& c : fixtures().at("cases")) ++count[c.at("op").get<std::string>()];
  for (const char* op : {"softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm",
                         "batch_norm", "scaled_dot_product_attention", "rope"}) {
    EXPECT_GT(count[op], 0) << op;
  }
}

}  // namespace
}  // namespace mn
