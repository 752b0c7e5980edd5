#pragma once
// Random graphs for property tests: elementwise ops with broadcasting, reductions, matmul with
// transposes (of parameters), shape ops, constants and constant-only chains, identities the
// optimizer's rules remove, masks, f16 round trips, and sometimes a state assigned at the end,
// as a training step has. Every value nothing reads is an output, so (almost) the whole graph
// is live. The same seed gives the same graph.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "ir/ops/elementwise.h"
#include "ir/ops/matmul.h"
#include "ir/ops/nn.h"
#include "ir/ops/reduce.h"
#include "ir/ops/shape.h"

namespace mn::testing {

class RandomGraph {
 public:
  struct Options {
    int min_steps = 4, max_steps = 14;
    // Extents drawn from 1-4 and from 31 to 130 (tensors of up to 2^17 elements), so that
    // kernels run over several workgroups and tiles; otherwise 1-4.
    bool wide = false;
    // Also the layers' ops: softmax and log_softmax, rms_norm and layer_norm with parameters,
    // silu, gelu, and sqrt and log of positive values.
    bool nn_ops = false;
  };
  explicit RandomGraph(uint64_t seed) : RandomGraph(seed, Options{}) {}
  RandomGraph(uint64_t seed, const Options& o)
      : rng_(seed),
        min_steps_(o.min_steps),
        max_steps_(o.max_steps),
        wide_(o.wide),
        nn_ops_(o.nn_ops) {}

  // Builds the graph; returns the number of compute nodes.
  void build() {
    Shape a = shape(1, 3);
    Shape b(a.begin() + static_cast<long>(uniform(0, static_cast<int>(a.size()))), a.end());
    add(g_.input("x0", a), false);
    add(g_.input("x1", b.empty() ? Shape{1} : b), false);
    if (coin()) add(g_.input("x2", shape(1, 2)), false);
    const int steps = uniform(min_steps_, max_steps_);
    for (int i = 0; i < steps; ++i) {
      for (int attempt = 0; attempt < 8; ++attempt) {
        try {
          if (step()) break;
        } catch (const Error&) {  // a random combination that does not type-check
        }
      }
    }
    g_.output("out", pool_.back());
    // Every other value nothing reads is an output too, so (almost) the whole graph is live.
    std::vector<char> read(g_.size(), 0);
    for (const Node& n : g_.nodes()) {
      for (NodeId in : n.inputs) read[static_cast<size_t>(in)] = 1;
    }
    int sinks = 0;
    for (size_t i = 0; i + 1 < pool_.size(); ++i) {
      if (!read[static_cast<size_t>(pool_[i].id())] && !constant_only_[i]) {
        g_.output("sink" + std::to_string(sinks++), pool_[i]);
      }
    }
    if (coin()) {  // an assignment, as a training step has
      Tensor v = pick_float();
      if (!v.valid()) v = pool_.back();
      Tensor s = g_.state("s", v.shape(), Init::uniform(-1, 1, 5));
      g_.assign(s, g_.apply("add", {}, {s, v}));
    }
  }
  const Graph& graph() const { return g_; }
  Graph& graph() { return g_; }  // to extend it (a loss and a training step)

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin() { return uniform(0, 1) == 1; }
  Shape shape(int min_rank, int max_rank) {
    Shape s(static_cast<size_t>(uniform(min_rank, max_rank)));
    do {
      for (auto& d : s) d = extent();
    } while (wide_ && numel(s) > (int64_t{1} << 17));
    return s;
  }
  double dyadic() {
    static const double values[] = {0.0, 1.0, -1.0, 2.0, 0.5, 4.0, 0.25, -2.0};
    return values[uniform(0, 7)];
  }
  int64_t extent() {
    static const int64_t wide[] = {1, 2, 3, 4, 31, 64, 97, 130};
    return wide_ ? wide[uniform(0, 7)] : uniform(1, 4);
  }
  void add(Tensor t, bool constant_only) {
    if (wide_ && t.numel() > (int64_t{1} << 17)) throw Error("random graph: tensor too large");
    pool_.push_back(t);
    constant_only_.push_back(constant_only);
  }
  // Recent tensors are likelier, so chains form.
  size_t pick_index() {
    const int n = static_cast<int>(pool_.size());
    return static_cast<size_t>(coin() ? n - 1 : uniform(0, n - 1));
  }
  Tensor pick() { return pool_[pick_index()]; }
  Tensor pick_float() {
    for (int i = 0; i < 8; ++i) {
      size_t k = pick_index();
      if (!constant_only_[k]) return pool_[k];
    }
    return {};
  }
  Tensor apply(std::string_view op, Attrs attrs, std::vector<Tensor> in) {
    return g_.apply(op, std::move(attrs), in);
  }

  bool step() {
    const size_t k = pick_index();
    Tensor x = pool_[k];
    const bool c = constant_only_[k];
    const int r = x.rank();
    switch (uniform(0, nn_ops_ ? 18 : 14)) {
      case 0: {  // bounded unary (transcendental only on input-dependent values: folding rounds)
        static const char* exact[] = {"neg", "abs", "relu"};
        static const char* smooth[] = {"tanh", "sigmoid"};
        if (!c && coin()) {
          Tensor t = apply(smooth[uniform(0, 1)], {}, {x});
          add(coin() ? apply("exp", {}, {t}) : t, false);
        } else {
          add(apply(exact[uniform(0, 2)], {}, {x}), c);
        }
        return true;
      }
      case 1: {  // binary with broadcasting
        static const char* ops[] = {"add", "sub", "mul", "maximum"};
        const size_t j = pick_index();
        add(apply(ops[uniform(0, 3)], {}, {x, pool_[j]}), c && constant_only_[j]);
        return true;
      }
      case 2: {  // scalar on either side
        static const char* ops[] = {"add", "sub", "mul", "div"};
        const char* op = ops[uniform(0, 3)];
        double v = dyadic();
        if (std::string_view(op) == "div" && v == 0) v = 2;
        Tensor s = g_.scalar(v);
        const bool right = std::string_view(op) == "div" || coin();
        add(right ? apply(op, {}, {x, s}) : apply(op, {}, {s, x}), c);
        return true;
      }
      case 3: {  // identities the rules remove
        switch (uniform(0, 3)) {
          case 0:
            add(apply("broadcast_to", BroadcastToAttrs{x.shape()}, {x}), c);
            break;
          case 1:
            add(apply("reshape", ReshapeAttrs{x.shape()}, {x}), c);
            break;
          case 2:
            add(apply("neg", {}, {apply("neg", {}, {x})}), c);
            break;
          default:
            if (r < 2) return false;
            add(apply("transpose", TransposeAttrs{0, r - 1},
                      {apply("transpose", TransposeAttrs{0, r - 1}, {x})}),
                c);
        }
        return true;
      }
      case 4: {  // reductions
        if (r == 0) return false;
        static const char* exact[] = {"sum", "max"};
        const bool use_mean = !c && coin();
        ReduceAttrs a{{uniform(0, r - 1)}, coin()};
        add(apply(use_mean ? "mean" : exact[uniform(0, 1)], a, {x}), c);
        return true;
      }
      case 5: {  // matmul, transposes explicit or as flags
        if (r < 2 || c) return false;
        const int64_t m = x.shape()[static_cast<size_t>(r - 2)];
        const int64_t kk = x.shape()[static_cast<size_t>(r - 1)];
        const int64_t n = extent();
        const bool ta = coin();
        Tensor a = ta ? apply("transpose", TransposeAttrs{-2, -1}, {x}) : x;
        (void)m;
        Tensor w;
        bool tb = false;
        const std::string name = "w" + std::to_string(pool_.size());
        switch (uniform(0, 2)) {
          case 0:
            w = g_.parameter(name, {kk, n}, Init::uniform(-1, 1, pool_.size()));
            break;
          case 1:
            w = g_.parameter(name, {n, kk}, Init::uniform(-1, 1, pool_.size()));
            tb = true;
            break;
          default:
            w = apply("transpose", TransposeAttrs{-2, -1},
                      {g_.parameter(name, {n, kk}, Init::uniform(-1, 1, pool_.size()))});
        }
        add(apply("matmul", MatmulAttrs{ta, tb}, {a, w}), false);
        return true;
      }
      case 6: {  // reshapes and their chains
        if (coin()) {
          add(apply("reshape", ReshapeAttrs{{x.numel()}}, {x}), c);
        } else {
          Tensor u = apply("unsqueeze", UnsqueezeAttrs{uniform(0, r)}, {x});
          add(coin() ? apply("reshape", ReshapeAttrs{{1, x.numel()}}, {u}) : u, c);
        }
        return true;
      }
      case 7: {  // permutations
        if (r < 2) return false;
        std::vector<int64_t> perm(static_cast<size_t>(r));
        for (int i = 0; i < r; ++i) perm[static_cast<size_t>(i)] = i;
        std::shuffle(perm.begin(), perm.end(), rng_);
        Tensor p = apply("permute", PermuteAttrs{perm}, {x});
        add(coin() ? apply("transpose", TransposeAttrs{0, r - 1}, {p}) : p, c);
        return true;
      }
      case 8: {  // broadcast to a wider shape
        Shape s = x.shape();
        s.insert(s.begin(), uniform(2, 3));
        add(apply("broadcast_to", BroadcastToAttrs{s}, {x}), c);
        return true;
      }
      case 9: {  // slice / concat
        if (r == 0) return false;
        const int axis = uniform(0, r - 1);
        const int64_t d = x.shape()[static_cast<size_t>(axis)];
        if (coin()) {
          const int64_t start = uniform(0, static_cast<int>(d - 1));
          add(apply("slice", SliceAttrs{axis, start, d, uniform(1, 2)}, {x}), c);
        } else {
          const size_t j = pick_index();
          add(apply("concat", ConcatAttrs{axis}, {x, pool_[j]}), c && constant_only_[j]);
        }
        return true;
      }
      case 10: {  // a small constant tensor, sometimes combined with another constant
        Array v(x.shape(), DType::f32);
        for (double& e : v.data) e = dyadic();
        Tensor k = g_.constant(v);
        if (coin()) k = apply("mul", {}, {k, g_.scalar(dyadic())});
        add(apply(coin() ? "add" : "mul", {}, {x, k}), c);
        return true;
      }
      case 12: {  // gradient-style reductions: sum_to a suffix shape, squeeze unit axes
        if (r == 0) return false;
        if (coin()) {
          Shape target(x.shape().begin() + uniform(0, r), x.shape().end());
          add(apply("sum_to", SumToAttrs{target}, {x}), c);
        } else {
          add(apply("squeeze", SqueezeAttrs{}, {x}), c);
        }
        return true;
      }
      case 13: {  // masks: where(x > y, x, y) and comparisons against broadcasts
        if (c) return false;
        const size_t j = pick_index();
        Tensor y = pool_[j];
        Tensor mask = apply(coin() ? "gt" : "le", {}, {x, y});
        add(apply("where", {}, {mask, x, y}), false);
        return true;
      }
      case 14: {  // a round trip through f16 (not an identity: it rounds)
        if (c) return false;
        add(apply("cast", CastAttrs{DType::f32}, {apply("cast", CastAttrs{DType::f16}, {x})}),
            false);
        return true;
      }
      case 15: {  // softmax over the last axis
        if (r == 0 || c) return false;
        add(coin() ? softmax(x) : log_softmax(x), false);
        return true;
      }
      case 16: {  // rms_norm over the last axis, its gamma a parameter
        if (r == 0 || c) return false;
        const int64_t d = x.shape().back();
        Tensor gamma = g_.parameter("g" + std::to_string(pool_.size()), {d},
                                    Init::uniform(0.5, 1.5, pool_.size()));
        add(rms_norm(x, gamma, 1e-5), false);
        return true;
      }
      case 17: {  // layer_norm over the last axis, gamma and beta parameters
        if (r == 0 || c) return false;
        const int64_t d = x.shape().back();
        const std::string id = std::to_string(pool_.size());
        Tensor gamma = g_.parameter("g" + id, {d}, Init::uniform(0.5, 1.5, pool_.size()));
        Tensor beta = g_.parameter("b" + id, {d}, Init::uniform(-0.5, 0.5, pool_.size() + 1));
        add(layer_norm(x, gamma, beta), false);
        return true;
      }
      case 18: {  // activations and functions of positive values
        if (c) return false;
        switch (uniform(0, 3)) {
          case 0:
            add(silu(x), false);
            break;
          case 1:
            add(gelu(x, coin() ? GeluApprox::tanh : GeluApprox::none), false);
            break;
          case 2:
            add(sqrt(abs(x) + 1.0), false);
            break;
          default:
            add(log(abs(x) + 1.0), false);
        }
        return true;
      }
      default: {  // a constant-only chain: folding territory
        Tensor k = g_.constant(Array::full(shape(0, 2), dyadic()));
        Tensor k2 = apply("add", {}, {apply("mul", {}, {k, g_.scalar(dyadic())}), g_.scalar(1.0)});
        add(k2, true);
        return true;
      }
    }
  }

  std::mt19937_64 rng_;
  int min_steps_, max_steps_;
  bool wide_ = false, nn_ops_ = false;
  Graph g_;
  std::vector<Tensor> pool_;
  std::vector<bool> constant_only_;
};

}  // namespace mn::testing
