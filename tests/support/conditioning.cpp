#include "support/conditioning.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string_view>
#include <vector>

#include <meganeura/ops.h>

#include "ir/graph_rewrite.h"

namespace mn::testing {

namespace {

// Small enough for the linear regime, large enough to stand far above float64's rounding.
constexpr double kRho = 0x1p-20;

// `g` with the result of every float op that computes from rounded values multiplied by its own
// random factor 1 + ρ·s. Values computed from integers and constants alone (a cast of
// positions, an index, a mask) are exact in a kernel too, and perturbing them would flip the
// comparisons they feed.
Graph with_perturbed_results(const Graph& g, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> s(-1.0, 1.0);
  std::set<NodeId> rounded;  // values of the new graph that carry rounding
  auto carries = [&](const Graph& out, const Tensor& t) {
    if (rounded.count(t.id())) return true;
    const Node& n = out.node(t.id());
    const std::string_view op = n.op_name();
    return (op == "input" || op == "parameter" || op == "state") && is_float(n.type.dtype);
  };
  return rewrite_graph(g, [&](Graph& out, const Node& n, std::span<const Tensor> operands) {
    const bool from_rounded = std::any_of(operands.begin(), operands.end(),
                                          [&](const Tensor& t) { return carries(out, t); });
    if (!from_rounded || !is_float(n.type.dtype)) return Tensor{};  // copied as it is
    Tensor y =
        out.apply(n.op_name(), n.attrs, std::vector<Tensor>(operands.begin(), operands.end()));
    Array factor(n.type.shape, n.type.dtype);
    for (double& v : factor.data) v = 1 + kRho * s(rng);
    Tensor perturbed = y * out.constant(std::move(factor));
    rounded.insert(perturbed.id());
    return perturbed;
  });
}

}  // namespace

std::map<std::string, Array> conditioning(const Graph& g, const reference::Feeds& feeds,
                                          int trials) {
  const std::map<std::string, Array> base = reference::evaluate(g, feeds);
  std::map<std::string, Array> terms;
  for (const auto& [name, value] : base) terms[name] = Array(value.shape, value.dtype);
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> s(-1.0, 1.0);
  for (int t = 0; t < trials; ++t) {
    reference::Feeds perturbed = feeds;
    for (auto& [name, value] : perturbed) {
      if (!is_float(value.dtype)) continue;
      for (double& v : value.data) v *= 1 + kRho * s(rng);
    }
    const std::map<std::string, Array> moved =
        reference::evaluate(with_perturbed_results(g, rng), perturbed);
    for (auto& [name, value] : terms) {
      const Array &a = base.at(name), &b = moved.at(name);
      for (size_t i = 0; i < value.data.size(); ++i) {
        const double d = std::abs(b.data[i] - a.data[i]) / kRho;
        if (std::isfinite(d)) value.data[i] = std::max(value.data[i], d);
      }
    }
  }
  return terms;
}

}  // namespace mn::testing
