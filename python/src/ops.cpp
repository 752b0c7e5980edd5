// Every public op of <meganeura/ops.h> as a function of the module, with PyTorch's keyword
// names where PyTorch has the op. Numbers mixed with tensors become scalar constants of the
// tensor's dtype.
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "bindings.h"

namespace mn::python {

namespace {

using OptTensor = std::optional<Tensor>;
constexpr auto keep = py::keep_alive<0, 1>();

Tensor or_none(const OptTensor& t) { return t.value_or(Tensor{}); }

Reduction to_reduction(const std::string& name, const char* op) {
  if (name == "mean") return Reduction::mean;
  if (name == "sum") return Reduction::sum;
  if (name == "none") return Reduction::none;
  throw Error(std::string(op) + ": reduction '" + name + "', expected 'mean', 'sum' or 'none'");
}

GeluApprox to_gelu(const std::string& name) {
  if (name == "none") return GeluApprox::none;
  if (name == "tanh") return GeluApprox::tanh;
  throw Error("gelu: approximate='" + name + "', expected 'none' or 'tanh'");
}

double scale_or_default(const std::optional<double>& scale) { return scale.value_or(0.0); }

void bind_elementwise(py::module_& m) {
  using Unary = Tensor (*)(Tensor);
  const std::pair<const char*, Unary> unary[] = {
      {"neg", &neg},   {"abs", &abs},         {"exp", &exp},         {"log", &log},
      {"sqrt", &sqrt}, {"rsqrt", &rsqrt},     {"sin", &sin},         {"cos", &cos},
      {"tanh", &tanh}, {"sigmoid", &sigmoid}, {"relu", &relu},       {"silu", &silu},
      {"stop_gradient", &stop_gradient}};
  for (const auto& [name, f] : unary) m.def(name, f, py::arg("x"), keep);

  using Binary = Tensor (*)(Tensor, Tensor);
  const std::pair<const char*, Binary> binary[] = {
      {"add", &add}, {"sub", &sub},         {"mul", &mul},         {"div", &div},
      {"pow", &pow}, {"maximum", &maximum}, {"minimum", &minimum}, {"eq", &eq},
      {"ne", &ne},   {"lt", &lt},           {"le", &le},           {"gt", &gt},
      {"ge", &ge}};
  for (const auto& [name, f] : binary) {
    m.def(
        name,
        [f = f, name = std::string(name)](const py::object& a, const py::object& b) {
          auto [x, y] = operands(a, b, name);
          return f(x, y);
        },
        py::arg("a"), py::arg("b"), py::keep_alive<0, 1>(), py::keep_alive<0, 2>());
  }
  m.def("leaky_relu", &leaky_relu, py::arg("x"), py::arg("negative_slope") = 0.01, keep);
  m.def(
      "gelu", [](Tensor x, const std::string& approximate) { return gelu(x, to_gelu(approximate)); },
      py::arg("x"), py::arg("approximate") = "none", keep);
  m.def("softplus", &softplus, py::arg("x"), py::arg("beta") = 1.0, py::arg("threshold") = 20.0,
        keep);
  m.def(
      "where",
      [](Tensor cond, const py::object& a, const py::object& b) {
        auto [x, y] = operands(a, b, "where");
        return where(cond, x, y);
      },
      py::arg("condition"), py::arg("a"), py::arg("b"), keep,
      "Elements of `a` where `condition` is nonzero, else of `b`.");
  m.def(
      "cast", [](Tensor x, const py::object& dtype) { return cast(x, to_dtype(dtype, "cast")); },
      py::arg("x"), py::arg("dtype"), keep);
  m.def("clamp", &clamp, py::arg("x"), py::arg("min"), py::arg("max"), keep);
}

void bind_reductions(py::module_& m) {
  using Reduce = Tensor (*)(Tensor, std::vector<int64_t>, bool);
  const std::pair<const char*, Reduce> reductions[] = {
      {"sum", &sum}, {"mean", &mean}, {"max", &max}, {"min", &min}};
  for (const auto& [name, f] : reductions) {
    m.def(
        name,
        [f = f](Tensor x, const py::object& axis, bool keepdims) {
          return f(x, to_axes(axis), keepdims);
        },
        py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false, keep);
  }
  m.def("argmax", &argmax, py::arg("x"), py::arg("axis"), py::arg("keepdims") = false, keep);
  m.def(
      "variance",
      [](Tensor x, const py::object& axis, bool keepdims, int64_t correction) {
        return variance(x, to_axes(axis), keepdims, correction);
      },
      py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false,
      py::arg("correction") = 0, keep);
  m.def("sum_to", &sum_to, py::arg("x"), py::arg("shape"), keep);
  m.def("matmul", &matmul, py::arg("a"), py::arg("b"), py::arg("transpose_a") = false,
        py::arg("transpose_b") = false, keep);
}

void bind_shape_ops(py::module_& m) {
  m.def("reshape", &reshape, py::arg("x"), py::arg("shape"), keep);
  m.def("permute", &permute, py::arg("x"), py::arg("dims"), keep);
  m.def("transpose", &transpose, py::arg("x"), py::arg("dim0") = -2, py::arg("dim1") = -1, keep);
  m.def("broadcast_to", &broadcast_to, py::arg("x"), py::arg("shape"), keep);
  m.def(
      "squeeze", [](Tensor x, const py::object& axis) { return squeeze(x, to_axes(axis)); },
      py::arg("x"), py::arg("axis") = py::none(), keep);
  m.def("unsqueeze", &unsqueeze, py::arg("x"), py::arg("axis"), keep);
  m.def("slice", &slice, py::arg("x"), py::arg("axis"), py::arg("start"), py::arg("stop"),
        py::arg("step") = 1, keep);
  m.def("concat", &concat, py::arg("tensors"), py::arg("axis") = 0, keep);
  m.def(
      "split",
      [](const py::object& x, const std::vector<int64_t>& sizes, int64_t axis) {
        return tensor_list(split(x.cast<Tensor>(), sizes, axis), x);
      },
      py::arg("x"), py::arg("sizes"), py::arg("axis") = 0);
  m.def("pad", &pad, py::arg("x"), py::arg("pads"), py::arg("value") = 0.0, keep,
        "pads[i] = (before, after) for axis i.");
  m.def("take", &take, py::arg("x"), py::arg("indices"), py::arg("axis") = 0, keep);
  m.def("gather", &take, py::arg("x"), py::arg("indices"), py::arg("axis") = 0, keep);
  m.def("scatter_add", &scatter_add, py::arg("x"), py::arg("indices"), py::arg("updates"),
        py::arg("axis") = 0, keep);
  m.def(
      "one_hot",
      [](Tensor indices, int64_t depth, const py::object& dtype) {
        return one_hot(indices, depth, to_dtype(dtype, "one_hot"));
      },
      py::arg("indices"), py::arg("depth"), py::arg("dtype") = DType::f32, keep);
  m.def("cache_write", &cache_write, py::arg("cache"), py::arg("update"), py::arg("positions"),
        keep);
}

void bind_normalization(py::module_& m) {
  m.def("softmax", &softmax, py::arg("x"), py::arg("axis") = -1, keep);
  m.def("log_softmax", &log_softmax, py::arg("x"), py::arg("axis") = -1, keep);
  m.def(
      "layer_norm",
      [](Tensor x, OptTensor weight, OptTensor bias, int64_t normalized_dims, double eps) {
        return layer_norm(x, or_none(weight), or_none(bias), normalized_dims, eps);
      },
      py::arg("x"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
      py::arg("normalized_dims") = 1, py::arg("eps") = 1e-5, keep);
  m.def(
      "rms_norm",
      [](Tensor x, OptTensor weight, double eps, int64_t normalized_dims) {
        return rms_norm(x, or_none(weight), eps, normalized_dims);
      },
      py::arg("x"), py::arg("weight") = py::none(), py::arg("eps") = 1e-6,
      py::arg("normalized_dims") = 1, keep);
  m.def(
      "group_norm",
      [](Tensor x, int64_t groups, OptTensor weight, OptTensor bias, double eps) {
        return group_norm(x, groups, or_none(weight), or_none(bias), eps);
      },
      py::arg("x"), py::arg("groups"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5, keep);
  m.def(
      "batch_norm",
      [](const py::object& x, OptTensor weight, OptTensor bias, Tensor running_mean,
         Tensor running_var, bool training, double momentum, double eps) {
        auto r = batch_norm(x.cast<Tensor>(), or_none(weight), or_none(bias), running_mean,
                            running_var, training, momentum, eps);
        return py::tuple(tensor_list({r.y, r.running_mean, r.running_var}, x));
      },
      py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("running_mean"),
      py::arg("running_var"), py::arg("training"), py::arg("momentum") = 0.1,
      py::arg("eps") = 1e-5,
      "(y, new_running_mean, new_running_var): assign the statistics to their states.");
  m.def("dropout", &dropout, py::arg("x"), py::arg("p"), py::arg("seed"),
        py::arg("training") = true, keep);
}

// Window, stride (None: the window, as PyTorch) and padding of a pooling op.
Pool2dOptions pool_options(const std::string& op, const py::object& kernel_size,
                           const py::object& stride, const py::object& padding, bool ceil_mode) {
  Pool2dOptions o;
  o.kernel = to_pair(kernel_size, op + " kernel_size");
  o.stride = stride.is_none() ? o.kernel : to_pair(stride, op + " stride");
  o.padding = to_pair(padding, op + " padding");
  o.ceil_mode = ceil_mode;
  return o;
}

void bind_convolution(py::module_& m) {
  m.def(
      "conv1d",
      [](Tensor x, Tensor w, OptTensor bias, int64_t stride, int64_t padding, int64_t dilation,
         int64_t groups) {
        return conv1d(x, w, or_none(bias), {stride, padding, dilation, groups});
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, keep);
  m.def(
      "conv2d",
      [](Tensor x, Tensor w, OptTensor bias, const py::object& stride, const py::object& padding,
         const py::object& dilation, int64_t groups) {
        Conv2dOptions o;
        o.stride = to_pair(stride, "conv2d stride");
        o.padding = to_pair(padding, "conv2d padding");
        o.dilation = to_pair(dilation, "conv2d dilation");
        o.groups = groups;
        return conv2d(x, w, or_none(bias), o);
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, keep);
  m.def(
      "conv_transpose2d",
      [](Tensor x, Tensor w, OptTensor bias, const py::object& stride, const py::object& padding,
         const py::object& output_padding, const py::object& dilation, int64_t groups) {
        ConvTranspose2dOptions o;
        o.stride = to_pair(stride, "conv_transpose2d stride");
        o.padding = to_pair(padding, "conv_transpose2d padding");
        o.output_padding = to_pair(output_padding, "conv_transpose2d output_padding");
        o.dilation = to_pair(dilation, "conv_transpose2d dilation");
        o.groups = groups;
        return conv_transpose2d(x, w, or_none(bias), o);
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("dilation") = 1,
      py::arg("groups") = 1, keep);
  m.def(
      "max_pool2d",
      [](Tensor x, const py::object& kernel_size, const py::object& stride,
         const py::object& padding, const py::object& dilation, bool ceil_mode) {
        Pool2dOptions o = pool_options("max_pool2d", kernel_size, stride, padding, ceil_mode);
        o.dilation = to_pair(dilation, "max_pool2d dilation");
        return max_pool2d(x, o);
      },
      py::arg("x"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("ceil_mode") = false, keep);
  m.def(
      "avg_pool2d",
      [](Tensor x, const py::object& kernel_size, const py::object& stride,
         const py::object& padding, bool ceil_mode, bool count_include_pad) {
        Pool2dOptions o = pool_options("avg_pool2d", kernel_size, stride, padding, ceil_mode);
        o.count_include_pad = count_include_pad;
        return avg_pool2d(x, o);
      },
      py::arg("x"), py::arg("kernel_size"), py::arg("stride") = py::none(),
      py::arg("padding") = 0, py::arg("ceil_mode") = false, py::arg("count_include_pad") = true,
      keep);
  m.def(
      "adaptive_avg_pool2d",
      [](Tensor x, const py::object& output_size) {
        auto [h, w] = to_pair(output_size, "adaptive_avg_pool2d output_size");
        return adaptive_avg_pool2d(x, h, w);
      },
      py::arg("x"), py::arg("output_size"), keep);
  m.def("global_avg_pool2d", &global_avg_pool2d, py::arg("x"), keep);
  m.def(
      "upsample_nearest2d",
      [](Tensor x, const py::object& size) {
        auto [h, w] = to_pair(size, "upsample_nearest2d size");
        return upsample_nearest2d(x, h, w);
      },
      py::arg("x"), py::arg("size"), keep);
  m.def(
      "upsample_bilinear2d",
      [](Tensor x, const py::object& size, bool align_corners) {
        auto [h, w] = to_pair(size, "upsample_bilinear2d size");
        return upsample_bilinear2d(x, h, w, align_corners);
      },
      py::arg("x"), py::arg("size"), py::arg("align_corners") = false, keep);
}

void bind_attention(py::module_& m) {
  m.def(
      "scaled_dot_product_attention",
      [](Tensor q, Tensor k, Tensor v, OptTensor mask, bool causal, std::optional<double> scale) {
        return scaled_dot_product_attention(q, k, v, or_none(mask), causal,
                                            scale_or_default(scale));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none(),
      py::arg("causal") = false, py::arg("scale") = py::none(), keep,
      "q [..., Hq, Lq, D], k and v [..., Hkv, Lk, D] (Hq a multiple of Hkv); mask additive.");
  m.def("rope", &rope, py::arg("x"), py::arg("theta") = 10000.0, py::arg("position_offset") = 0,
        keep);
  m.def(
      "rope_positions",
      [](Tensor x, Tensor positions, double theta) { return rope_positions(x, positions, theta); },
      py::arg("x"), py::arg("positions"), py::arg("theta") = 10000.0, keep);
  m.def(
      "cached_attention",
      [](Tensor q, Tensor k, Tensor v, Tensor positions, std::optional<double> scale) {
        return cached_attention(q, k, v, positions, scale_or_default(scale));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("positions"),
      py::arg("scale") = py::none(), keep);
  m.def("sample_tokens", &sample_tokens, py::arg("logits"), py::arg("temperature"),
        py::arg("top_k"), py::arg("top_p"), py::arg("seed"), py::arg("step"), keep);
}

void bind_losses(py::module_& m) {
  m.def(
      "cross_entropy",
      [](Tensor logits, Tensor target, const std::string& reduction, int64_t ignore_index,
         double label_smoothing) {
        CrossEntropyOptions o;
        o.reduction = to_reduction(reduction, "cross_entropy");
        o.ignore_index = ignore_index;
        o.label_smoothing = label_smoothing;
        return cross_entropy(logits, target, o);
      },
      py::arg("logits"), py::arg("target"), py::arg("reduction") = "mean",
      py::arg("ignore_index") = -100, py::arg("label_smoothing") = 0.0, keep);
  m.def(
      "nll_loss",
      [](Tensor log_probs, Tensor target, const std::string& reduction, int64_t ignore_index) {
        return nll_loss(log_probs, target, to_reduction(reduction, "nll_loss"), ignore_index);
      },
      py::arg("log_probs"), py::arg("target"), py::arg("reduction") = "mean",
      py::arg("ignore_index") = -100, keep);
  using Loss = Tensor (*)(Tensor, Tensor, Reduction);
  const std::pair<const char*, Loss> losses[] = {
      {"mse_loss", &mse_loss},
      {"l1_loss", &l1_loss},
      {"binary_cross_entropy", &binary_cross_entropy},
      {"binary_cross_entropy_with_logits", &binary_cross_entropy_with_logits}};
  for (const auto& [name, f] : losses) {
    m.def(
        name,
        [f = f, name = name](Tensor x, Tensor y, const std::string& reduction) {
          return f(x, y, to_reduction(reduction, name));
        },
        py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", keep);
  }
  m.def(
      "smooth_l1_loss",
      [](Tensor x, Tensor y, const std::string& reduction, double beta) {
        return smooth_l1_loss(x, y, to_reduction(reduction, "smooth_l1_loss"), beta);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = "mean", py::arg("beta") = 1.0,
      keep);
}

}  // namespace

std::pair<Tensor, Tensor> operands(const py::object& a, const py::object& b,
                                   const std::string& op) {
  const bool ta = py::isinstance<Tensor>(a), tb = py::isinstance<Tensor>(b);
  if (!ta && !tb) throw Error(op + ": expected at least one Tensor operand");
  const Tensor like = ta ? a.cast<Tensor>() : b.cast<Tensor>();
  auto operand = [&](const py::object& v) {
    if (py::isinstance<Tensor>(v)) return v.cast<Tensor>();
    if (py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v) ||
        py::isinstance<py::bool_>(v)) {
      return like.graph().scalar(v.cast<double>(), like.dtype());
    }
    return like.graph().constant(to_array(v, like.dtype(), op));
  };
  return {operand(a), operand(b)};
}

void bind_ops(py::module_& m) {
  bind_elementwise(m);
  bind_reductions(m);
  bind_shape_ops(m);
  bind_normalization(m);
  bind_convolution(m);
  bind_attention(m);
  bind_losses(m);
}

}  // namespace mn::python
