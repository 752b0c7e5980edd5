// The loss ops against PyTorch (CPU, float64): loss values from the reference, and autodiff
// gradients (with a random cotangent) for every float input, target gradients included. The
// values come from tests/ir/fixtures/make_loss_fixtures.py (loss_fixtures.json, committed).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

namespace mn {
namespace {

using nlohmann::json;

constexpr double kRelTol = 1e-9;

const json& fixtures() {
  static const json j = [] {
    const std::string path = std::string(MN_SOURCE_DIR) + "/tests/ir/fixtures/loss_fixtures.json";
    std::ifstream f(path);
    if (!f) throw Error("cannot open " + path);
    return json::parse(f);
  }();
  return j;
}

// JSON has no NaN or infinity: the generator writes them as strings.
double value_of(const json& v) {
  if (v.is_number()) return v.get<double>();
  const std::string s = v.get<std::string>();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  throw Error("loss_fixtures.json: bad value " + s);
}

Array to_array(const json& t, DType dtype) {
  std::vector<double> data;
  for (const json& v : t.at("data")) data.push_back(value_of(v));
  return Array(t.at("shape").get<Shape>(), dtype, std::move(data));
}

Reduction reduction_of(const json& c) {
  const std::string r = c.at("reduction");
  if (r == "none") return Reduction::none;
  if (r == "mean") return Reduction::mean;
  if (r == "sum") return Reduction::sum;
  throw Error("loss_fixtures.json: bad reduction " + r);
}

Tensor apply_case(const json& c, Tensor x, Tensor y) {
  const std::string op = c.at("op");
  const Reduction r = reduction_of(c);
  if (op == "cross_entropy") {
    return cross_entropy(
        x, y, {r, c.at("ignore_index").get<int64_t>(), c.at("label_smoothing").get<double>()});
  }
  if (op == "nll_loss") return nll_loss(x, y, r, c.at("ignore_index").get<int64_t>());
  if (op == "mse_loss") return mse_loss(x, y, r);
  if (op == "l1_loss") return l1_loss(x, y, r);
  if (op == "smooth_l1_loss") return smooth_l1_loss(x, y, r, c.at("beta").get<double>());
  if (op == "binary_cross_entropy") return binary_cross_entropy(x, y, r);
  if (op == "binary_cross_entropy_with_logits") return binary_cross_entropy_with_logits(x, y, r);
  throw Error("loss_fixtures.json: unknown op " + op);
}

// Element-wise relative comparison; non-finite expectations (NaN losses of all-ignored means,
// infinite target gradients of binary_cross_entropy at 0 and 1) must be matched exactly.
void expect_close(const Array& got, const Array& want, const std::string& what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  for (size_t i = 0; i < want.data.size(); ++i) {
    const double g = got.data[i], w = want.data[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " element " << i << ": got " << g << ", want NaN";
    } else if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << " element " << i;
    } else {
      EXPECT_LE(std::abs(g - w), kRelTol * std::abs(w))
          << what << " element " << i << ": got " << g << ", want " << w;
    }
  }
}

void check_case(const json& c) {
  const std::string name = c.at("name");
  SCOPED_TRACE(name);
  Graph g;
  reference::Feeds feeds;
  std::vector<Tensor> operands;
  std::vector<Tensor> float_operands;
  const json& inputs = c.at("inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    // The reference computes in double whatever the dtype: f32 operands carry float64 values.
    const bool is_index = inputs[i].at("dtype") == "i32";
    const DType dtype = is_index ? DType::i32 : DType::f32;
    Array value = to_array(inputs[i], dtype);
    const std::string input_name = "in" + std::to_string(i);
    Tensor t = g.input(input_name, value.shape, dtype);
    feeds[input_name] = std::move(value);
    operands.push_back(t);
    if (!is_index) float_operands.push_back(t);
  }
  Tensor loss = apply_case(c, operands.at(0), operands.at(1));
  Array cot = to_array(c.at("cotangent"), DType::f32);
  Tensor cot_in = g.input("cotangent", cot.shape);
  feeds["cotangent"] = std::move(cot);
  std::vector<Tensor> grads = gradients(loss, float_operands, cot_in);

  std::vector<NodeId> ids{loss.id()};
  for (const Tensor& t : grads) ids.push_back(t.id());
  auto values = reference::evaluate_nodes(g, feeds, ids);

  expect_close(values[0], to_array(c.at("loss"), DType::f32), "loss");
  size_t k = 1;
  const json& want_grads = c.at("grads");
  for (size_t i = 0; i < want_grads.size(); ++i) {
    if (want_grads[i].is_null()) continue;  // an index target: PyTorch gives no gradient
    expect_close(values.at(k++), to_array(want_grads[i], DType::f32),
                 "gradient of input " + std::to_string(i));
  }
  EXPECT_EQ(k, values.size()) << "every float input has a PyTorch gradient";
}

class LossTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(LossTorch, MatchesPyTorch) {
  int n = 0;
  for (const json& c : fixtures().at("cases")) {
    if (c.at("op") != GetParam()) continue;
    check_case(c);
    ++n;
  }
  EXPECT_GT(n, 0) << "no fixture cases for " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Losses, LossTorch,
                         ::testing::Values("cross_entropy", "nll_loss", "mse_loss", "l1_loss",
                                           "smooth_l1_loss", "binary_cross_entropy",
                                           "binary_cross_entropy_with_logits"),
                         [](const auto& info) { return info.param; });

// The fixture covers what the brief of each op promises: every reduction, ignore_index, label
// smoothing on both target kinds, 1-D and 4-D scores, and smooth_l1's beta = 0.
TEST(LossTorch, FixturesCoverTheOptions) {
  std::set<std::string> seen;
  for (const json& c : fixtures().at("cases")) {
    const std::string op = c.at("op");
    seen.insert(op + "/" + c.at("reduction").get<std::string>());
    const size_t scores_rank = c.at("inputs")[0].at("shape").size();
    const bool probs = c.at("inputs")[1].at("dtype") == "f64";
    if (op == "cross_entropy" || op == "nll_loss") {
      seen.insert(op + "/rank" + std::to_string(scores_rank));
      if (c.at("ignore_index") != -100) seen.insert(op + "/ignore_index");
    }
    if (op == "cross_entropy" && c.at("label_smoothing").get<double>() > 0) {
      seen.insert(std::string("cross_entropy/smoothing/") + (probs ? "probs" : "index"));
    }
    if (op == "smooth_l1_loss" && c.at("beta").get<double>() == 0) seen.insert("smooth_l1/beta0");
  }
  for (const char* op : {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
                         "binary_cross_entropy", "binary_cross_entropy_with_logits"}) {
    for (const char* r : {"none", "mean", "sum"}) {
      EXPECT_TRUE(seen.count(std::string(op) + "/" + r)) << op << " " << r;
    }
  }
  for (const char* key : {"cross_entropy/rank1", "cross_entropy/rank2", "cross_entropy/rank4",
                          "cross_entropy/ignore_index", "cross_entropy/smoothing/probs",
                          "cross_entropy/smoothing/index", "nll_loss/rank1", "nll_loss/rank4",
                          "nll_loss/rank5", "nll_loss/ignore_index", "smooth_l1/beta0"}) {
    EXPECT_TRUE(seen.count(key)) << key;
  }
}

}  // namespace
}  // namespace mn
