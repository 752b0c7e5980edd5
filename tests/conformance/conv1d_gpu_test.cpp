// conv1d: conv2d over [..., C, 1, L] views of the input and the weight. Its values against a
// direct 1-D convolution in float64 written here (independent of conv2d), values and gradients
// on the GPU against the reference, the plan (the views alias: the same kernels and arena as the
// 4-D convolution), and bad calls named in 1-D terms.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "conv_fixture.h"

namespace mn {
namespace {

struct Case {
  std::string tag;
  Shape x;  // [..., C, L]
  int64_t out, kernel;
  Conv1dOptions opt;
  bool bias;
};

std::vector<Case> cases() {
  return {
      {"plain", {2, 3, 20}, 4, 3, {}, true},
      {"stride_padding_dilation", {2, 4, 33}, 6, 3, {.stride = 2, .padding = 2, .dilation = 2}, true},
      {"groups", {1, 6, 17}, 9, 5, {.padding = 2, .groups = 3}, false},
      // Whisper's encoder: a kernel of 3 with padding 1, then the same with stride 2.
      {"whisper_stem", {1, 16, 40}, 8, 3, {.stride = 2, .padding = 1}, true},
      {"unbatched", {5, 12}, 2, 4, {}, true},
      {"leading_axes", {2, 2, 3, 16}, 4, 3, {.padding = 1}, false},
  };
}

// y[..., o, t] = bias[o] + sum over the group's channels c and taps j of
// x[..., c, t·stride - padding + j·dilation] · w[o, c - group·C/groups, j].
Array direct_conv1d(const Array& x, const Array& w, const Array* bias, const Conv1dOptions& o) {
  const int64_t c_in = x.shape[x.shape.size() - 2], length = x.shape.back();
  const int64_t c_out = w.shape[0], cg = w.shape[1], k = w.shape[2];
  const int64_t lout = (length + 2 * o.padding - o.dilation * (k - 1) - 1) / o.stride + 1;
  const int64_t batch = x.numel() / (c_in * length), og = c_out / o.groups;
  Shape shape(x.shape.begin(), x.shape.end() - 2);
  shape.insert(shape.end(), {c_out, lout});
  Array y(shape, DType::f32);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t oc = 0; oc < c_out; ++oc) {
      const int64_t group = oc / og;
      for (int64_t t = 0; t < lout; ++t) {
        double acc = bias ? bias->data[static_cast<size_t>(oc)] : 0.0;
        for (int64_t ci = 0; ci < cg; ++ci) {
          const int64_t c = group * cg + ci;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t at = t * o.stride - o.padding + j * o.dilation;
            if (at < 0 || at >= length) continue;
            acc += x.data[static_cast<size_t>((n * c_in + c) * length + at)] *
                   w.data[static_cast<size_t>((oc * cg + ci) * k + j)];
          }
        }
        y.data[static_cast<size_t>((n * c_out + oc) * lout + t)] = acc;
      }
    }
  }
  return y;
}

TEST(Conv1dGpu, MatchesADirectConvolutionWithGradients) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.tag);
    testing::ConvFixture f("conv1d-gpu/" + c.tag);
    const int64_t channels = c.x[c.x.size() - 2];
    Tensor x = f.input("x", c.x);
    Tensor w = f.input("w", {c.out, channels / c.opt.groups, c.kernel});
    Tensor b = c.bias ? f.input("b", {c.out}) : Tensor{};
    Tensor y = conv1d(x, w, b, c.opt);
    f.finish(y);
    const Array want = direct_conv1d(f.feeds["x"], f.feeds["w"], c.bias ? &f.feeds["b"] : nullptr,
                                     c.opt);
    EXPECT_TRUE(testing::elementwise_near(reference::evaluate(f.g, f.feeds).at("y"), want, 1e-12));
    f.run_and_compare();
  }
}

// The views alias their operands: the plan of conv1d is the 4-D convolution's, kernel for
// kernel and byte for byte.
TEST(Conv1dGpu, PlansAsTheFourDimensionalConvolution) {
  auto plan_of = [](bool one_d) {
    Graph g;
    Tensor x = g.input("x", one_d ? Shape{2, 16, 40} : Shape{2, 16, 1, 40});
    Tensor w = g.input("w", one_d ? Shape{8, 16, 3} : Shape{8, 16, 1, 3});
    Tensor b = g.input("b", {8});
    g.output("y", one_d ? conv1d(x, w, b, {.stride = 2, .padding = 1})
                        : conv2d(x, w, b, {.stride = {1, 2}, .padding = {0, 1}}));
    SessionOptions so;
    so.profile = true;
    auto s = build_session(g, so);
    for (const Tensor& t : {x, w, b}) s->set(g.node(t.id()).name, Array(t.shape(), DType::f32));
    s->step();
    std::vector<std::string> names;
    for (const auto& k : s->profile()) names.push_back(k.name);
    return std::pair{s->memory().arena_bytes, names};
  };
  const auto [arena1, kernels1] = plan_of(true);
  const auto [arena2, kernels2] = plan_of(false);
  EXPECT_EQ(arena1, arena2);
  EXPECT_EQ(kernels1, kernels2);
}

void expect_conv1d_error(const Shape& x, const Shape& w, const Conv1dOptions& o,
                         const std::string& says) {
  Graph g;
  try {
    conv1d(g.input("x", x), g.input("w", w), {}, o);
    ADD_FAILURE() << "no error for " << says;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("conv1d"), std::string::npos) << what;
    EXPECT_NE(what.find(says), std::string::npos) << what;
  }
}

TEST(Conv1dGpu, BadCallsNameTheOneDimensionalShapes) {
  expect_conv1d_error({2, 3, 20}, {4, 3, 1, 3}, {}, "[O, C/groups, k]");
  expect_conv1d_error({20}, {4, 1, 3}, {}, "[..., C, L]");
  expect_conv1d_error({2, 3, 20}, {4, 2, 3}, {}, "C/groups = 3");
  expect_conv1d_error({2, 3, 4}, {4, 3, 9}, {}, "fit the padded input");
  expect_conv1d_error({2, 4, 20}, {6, 2, 3}, {.groups = 3}, "divisible by groups");
  expect_conv1d_error({2, 3, 20}, {4, 3, 3}, {.stride = 0}, "stride, dilation, groups >= 1");
}

}  // namespace
}  // namespace mn
