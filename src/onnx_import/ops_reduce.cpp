// ONNX reductions: ReduceSum/Mean/Max/Min/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin.
#include <onnx/onnx_pb.h>

#include <algorithm>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

struct ReduceSpec {
  std::vector<int64_t> axes;  // normalized; empty with `all` false: nothing reduced
  bool all = false;
  bool keepdims = true;
};

// Axes from the attribute (ReduceSum before opset 13, the others before 18) or the input.
ReduceSpec reduce_spec(NodeContext& c, bool axes_as_input) {
  ReduceSpec s;
  s.keepdims = c.attr_int("keepdims", 1) != 0;
  std::optional<std::vector<int64_t>> axes;
  if (axes_as_input) {
    if (c.has(1)) axes = c.known_ints(1, "axes");
  } else {
    axes = c.attr_ints_opt("axes");
  }
  if (!axes || axes->empty()) {
    const bool noop = c.attr_int("noop_with_empty_axes", 0) != 0;
    s.all = !noop;
    return s;
  }
  for (int64_t a : *axes) s.axes.push_back(c.axis(a, c.rank(0)));
  std::sort(s.axes.begin(), s.axes.end());
  s.axes.erase(std::unique(s.axes.begin(), s.axes.end()), s.axes.end());
  return s;
}

using ReduceFn = Tensor (*)(NodeContext&, Tensor x, const std::vector<int64_t>& axes, bool keep);

void add_reduce(ConverterTable& t, const std::string& op, int64_t axes_input_since, ReduceFn f) {
  t.add(op, [f, axes_input_since](NodeContext& c) {
    ReduceSpec s = reduce_spec(c, c.opset() >= axes_input_since);
    Tensor x = c.in(0);
    if (!s.all && s.axes.empty()) {  // noop_with_empty_axes
      c.out(0, x, c.type(0));
      return;
    }
    std::vector<int64_t> axes = s.axes;
    if (s.all) {
      for (int a = 0; a < x.rank(); ++a) axes.push_back(a);
    }
    // A reduction over nothing (a rank-0 input) is the value itself.
    if (axes.empty()) {
      c.out(0, x, c.type(0));
      return;
    }
    c.out(0, f(c, x, axes, s.keepdims), c.type(0));
  });
}

Tensor float_in(Tensor x) { return is_float(x.dtype()) ? x : cast(x, DType::f32); }

Tensor arg_extreme(NodeContext& c, bool is_max) {
  Tensor x = c.in(0);
  const int axis = c.axis(c.attr_int("axis", 0), x.rank());
  const bool keep = c.attr_int("keepdims", 1) != 0;
  const bool last = c.attr_int("select_last_index", 0) != 0;
  Tensor v = is_max ? x : neg(float_in(x));
  if (!last) return argmax(v, axis, keep);
  // The last extreme: the first one of the reversed axis, counted back.
  const int64_t n = x.dim(axis);
  c.host_limit(n, "the reversed positions");
  Array rev({n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) rev.data[static_cast<size_t>(i)] = static_cast<double>(n - 1 - i);
  Tensor flipped = take(v, c.graph().constant(std::move(rev)), axis);
  Tensor i = argmax(flipped, axis, keep);
  return c.graph().scalar(static_cast<double>(n - 1), DType::i32) - i;
}

}  // namespace

void add_reduce_converters(ConverterTable& t) {
  add_reduce(t, "ReduceSum", 13, [](NodeContext&, Tensor x, const auto& a, bool k) { return sum(x, a, k); });
  add_reduce(t, "ReduceMean", 18, [](NodeContext&, Tensor x, const auto& a, bool k) { return mean(x, a, k); });
  add_reduce(t, "ReduceMax", 18, [](NodeContext&, Tensor x, const auto& a, bool k) { return max(x, a, k); });
  add_reduce(t, "ReduceMin", 18, [](NodeContext&, Tensor x, const auto& a, bool k) { return min(x, a, k); });
  add_reduce(t, "ReduceL1", 18, [](NodeContext&, Tensor x, const auto& a, bool k) { return sum(abs(x), a, k); });
  add_reduce(t, "ReduceL2", 18, [](NodeContext&, Tensor x, const auto& a, bool k) {
    Tensor f = float_in(x);
    return sqrt(sum(f * f, a, k));
  });
  add_reduce(t, "ReduceSumSquare", 18, [](NodeContext&, Tensor x, const auto& a, bool k) { return sum(x * x, a, k); });
  add_reduce(t, "ReduceLogSum", 18, [](NodeContext&, Tensor x, const auto& a, bool k) {
    return log(sum(float_in(x), a, k));
  });
  add_reduce(t, "ReduceLogSumExp", 18, [](NodeContext&, Tensor x, const auto& a, bool k) {
    Tensor f = float_in(x);
    Tensor m = stop_gradient(max(f, a, true));
    Tensor r = log(sum(exp(f - m), a, true)) + m;
    return k ? r : squeeze(r, a);
  });
  // The product as sign * exp(sum(log|x|)): the sign from the parity of the negatives, a zero
  // giving log 0 = -inf and so 0.
  add_reduce(t, "ReduceProd", 18, [](NodeContext& c, Tensor x, const auto& a, bool k) {
    Tensor f = float_in(x);
    Tensor negatives = sum(lt(f, c.scalar(0.0, f)), a, k);
    Tensor half = negatives * 0.5;
    Tensor parity = 2.0 * (half - cast(cast(half, DType::i32), half.dtype()));  // 0 or 1
    return (1.0 - 2.0 * parity) * exp(sum(log(abs(f)), a, k));
  });
  t.add("ArgMax", [](NodeContext& c) { c.out(0, arg_extreme(c, true), ElemType::i64); });
  t.add("ArgMin", [](NodeContext& c) { c.out(0, arg_extreme(c, false), ElemType::i64); });
}

}  // namespace mn::onnx
