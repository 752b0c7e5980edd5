// The convolution, pooling and resampling ops against PyTorch (CPU, float64): forward values
// and autodiff gradients of sum(out * R) for a random R. The values come from
// tests/ir/fixtures/make_conv_fixtures.py (conv_fixtures.json, committed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/reference.h>

#include "support/random_fill.h"

namespace mn {
namespace {

using nlohmann::json;

const json& fixtures() {
  static const json j = [] {
    const std::string path = std::string(MN_SOURCE_DIR) + "/tests/ir/fixtures/conv_fixtures.json";
    std::ifstream f(path);
    if (!f) throw Error("cannot open " + path);
    return json::parse(f);
  }();
  return j;
}

Array to_array(const json& t) {
  return Array(t.at("shape").get<Shape>(), DType::f32, t.at("data").get<std::vector<double>>());
}

std::array<int64_t, 2> pair_of(const json& attrs, const char* key) {
  return attrs.at(key).get<std::array<int64_t, 2>>();
}

// The op of `c` applied to `in` through the public API.
Tensor apply_case(const json& c, const std::vector<Tensor>& in) {
  const std::string op = c.at("op");
  const json& a = c.at("attrs");
  Tensor bias = in.size() > 2 ? in[2] : Tensor{};
  if (op == "conv2d") {
    Conv2dOptions o{pair_of(a, "stride"), pair_of(a, "padding"), pair_of(a, "dilation"),
                    a.at("groups").get<int64_t>()};
    return conv2d(in[0], in[1], bias, o);
  }
  if (op == "conv_transpose2d") {
    ConvTranspose2dOptions o{pair_of(a, "stride"), pair_of(a, "padding"),
                             pair_of(a, "output_padding"), pair_of(a, "dilation"),
                             a.at("groups").get<int64_t>()};
    return conv_transpose2d(in[0], in[1], bias, o);
  }
  if (op == "max_pool2d") {
    Pool2dOptions o{.kernel = pair_of(a, "kernel"),
                    .stride = pair_of(a, "stride"),
                    .padding = pair_of(a, "padding"),
                    .dilation = pair_of(a, "dilation"),
                    .ceil_mode = a.at("ceil_mode").get<bool>()};
    return max_pool2d(in[0], o);
  }
  if (op == "avg_pool2d") {
    Pool2dOptions o{.kernel = pair_of(a, "kernel"),
                    .stride = pair_of(a, "stride"),
                    .padding = pair_of(a, "padding"),
                    .ceil_mode = a.at("ceil_mode").get<bool>(),
                    .count_include_pad = a.at("count_include_pad").get<bool>()};
    return avg_pool2d(in[0], o);
  }
  const auto out = pair_of(a, "out");
  if (op == "adaptive_avg_pool2d") return adaptive_avg_pool2d(in[0], out[0], out[1]);
  if (op == "upsample_nearest2d") return upsample_nearest2d(in[0], out[0], out[1]);
  if (op == "upsample_bilinear2d") {
    return upsample_bilinear2d(in[0], out[0], out[1], a.at("align_corners").get<bool>());
  }
  throw Error("conv_fixtures.json: unknown op " + op);
}

TEST(ConvTorch, FixturesCoverEveryOp) {
  std::set<std::string> ops;
  for (const json& c : fixtures().at("cases")) ops.insert(c.at("op").get<std::string>());
  const std::set<std::string> want{"conv2d",
                                   "conv_transpose2d",
                                   "max_pool2d",
                                   "avg_pool2d",
                                   "adaptive_avg_pool2d",
                                   "upsample_nearest2d",
                                   "upsample_bilinear2d"};
  EXPECT_EQ(ops, want);
}

class ConvTorchCase : public ::testing::TestWithParam<size_t> {};

TEST_P(ConvTorchCase, ForwardAndGradientsMatchPyTorch) {
  const json& c = fixtures().at("cases").at(GetParam());
  SCOPED_TRACE(c.at("op").get<std::string>() + "/" + c.at("label").get<std::string>());
  Graph g;
  reference::Feeds feeds;
  std::vector<Tensor> params;
  for (size_t i = 0; i < c.at("inputs").size(); ++i) {
    Array v = to_array(c.at("inputs")[i]);
    const std::string name = "p" + std::to_string(i);
    params.push_back(g.parameter(name, v.shape));
    feeds[name] = std::move(v);
  }
  Tensor out = apply_case(c, params);
  const Array want_out = to_array(c.at("output"));
  ASSERT_EQ(out.shape(), want_out.shape);

  Tensor r = g.input("r", out.shape());
  feeds["r"] = to_array(c.at("upstream"));
  Tensor loss = sum(out * r);
  std::vector<Tensor> grads = gradients(loss, params);

  std::vector<NodeId> ids{out.id()};
  for (const Tensor& t : grads) ids.push_back(t.id());
  auto values = reference::evaluate_nodes(g, feeds, ids);
  EXPECT_LE(testing::scaled_error(values[0], want_out), 1e-9) << "forward";
  for (size_t i = 0; i < grads.size(); ++i) {
    const Array want = to_array(c.at("grads")[i]);
    ASSERT_EQ(values[i + 1].shape, want.shape);
    EXPECT_LE(testing::scaled_error(values[i + 1], want), 1e-9) << "gradient of input " << i;
  }
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v(fixtures().at("cases").size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConvTorchCase, ::testing::ValuesIn(case_indices()),
                         [](const auto& info) {
                           const json& c = fixtures().at("cases").at(info.param);
                           return c.at("op").get<std::string>() + "_" +
                                  c.at("label").get<std::string>();
                         });

}  // namespace
}  // namespace mn
