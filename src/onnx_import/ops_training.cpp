// The optimizer ops of domain ai.onnx.preview.training (version 1): Adagrad, Adam and Momentum
// (standard and Nesterov) updating any number of tensors in one node, as the ONNX reference
// applies them. The learning rate R and the step count T are tensors, so a model that feeds them
// as inputs runs every step with its own values.
#include <onnx/onnx_pb.h>

#include "onnx_import/import_context.h"
#include "onnx_import/tensor_proto.h"

namespace mn::onnx {

namespace {

// R and T (as f32), and the number of tensors the node updates with `groups` inputs each.
struct Update {
  Tensor r, t;
  size_t count = 0;
};

Update update_operands(NodeContext& c, size_t groups) {
  const size_t in = c.input_count();
  if (in < 2 + groups || (in - 2) % groups != 0) {
    c.fail("expects R, T and " + std::to_string(groups) + " inputs per updated tensor");
  }
  if (c.output_count() != (in - 2) / groups * (groups - 1)) c.fail("has the wrong number of outputs");
  for (size_t i = 0; i < 2; ++i) {
    if (numel(c.shape(i)) != 1) c.fail(std::string(i == 0 ? "R" : "T") + " must be a scalar");
  }
  if (!is_float_type(c.type(0)) || !is_integer(c.type(1))) c.fail("R must be a float and T an integer");
  for (size_t i = 2; i < in; ++i) {
    if (!is_float_type(c.type(i))) c.fail("updated tensors and their states must be floats");
  }
  return {reshape(c.in_float(0), {}), reshape(c.in_float(1), {}), (in - 2) / groups};
}

Tensor regularized(NodeContext& c, Tensor x, Tensor g) {
  const double norm = c.attr_float("norm_coefficient", 0.0);
  return norm == 0.0 ? g : x * norm + g;
}

void convert_adagrad(NodeContext& c) {
  const Update u = update_operands(c, 3);
  const double decay = c.attr_float("decay_factor", 0.0), eps = c.attr_float("epsilon", 1e-6);
  Tensor rate = u.r / (u.t * decay + 1.0);
  for (size_t i = 0; i < u.count; ++i) {
    Tensor x = c.in(2 + i), h = c.in(2 + 2 * u.count + i);
    Tensor g = regularized(c, x, c.in(2 + u.count + i));
    Tensor h_new = h + g * g;
    c.out(i, x - rate * g / (sqrt(h_new) + eps), c.type(2 + i));
    c.out(u.count + i, h_new, c.type(2 + 2 * u.count + i));
  }
}

void convert_adam(NodeContext& c) {
  const Update u = update_operands(c, 4);
  const double alpha = c.attr_float("alpha", 0.9), beta = c.attr_float("beta", 0.999);
  const double eps = c.attr_float("epsilon", 1e-6);
  const double post = c.attr_float("norm_coefficient_post", 0.0);
  // Bias-corrected from the first step on (T > 0); T = 0 takes R as it is.
  Tensor corrected = u.r * sqrt(1.0 - pow(c.scalar(beta, u.t), u.t)) /
                     (1.0 - pow(c.scalar(alpha, u.t), u.t));
  Tensor rate = where(gt(u.t, c.scalar(0.0, u.t)), corrected, u.r);
  const size_t n = u.count;
  for (size_t i = 0; i < n; ++i) {
    Tensor x = c.in(2 + i), v = c.in(2 + 2 * n + i), h = c.in(2 + 3 * n + i);
    Tensor g = regularized(c, x, c.in(2 + n + i));
    Tensor v_new = v * alpha + g * (1.0 - alpha);
    Tensor h_new = h * beta + g * g * (1.0 - beta);
    Tensor x_new = x - rate * (v_new / (sqrt(h_new) + eps));
    c.out(i, post == 0.0 ? x_new : x_new * (1.0 - post), c.type(2 + i));
    c.out(n + i, v_new, c.type(2 + 2 * n + i));
    c.out(2 * n + i, h_new, c.type(2 + 3 * n + i));
  }
}

void convert_momentum(NodeContext& c) {
  const Update u = update_operands(c, 3);
  const double alpha = c.attr_float("alpha", 0.0), beta = c.attr_float("beta", 0.0);
  const std::string mode = c.attr_string("mode", "");
  if (mode != "standard" && mode != "nesterov") c.fail("mode must be 'standard' or 'nesterov'");
  // The gradient's coefficient is 1 at the first step (T = 0).
  Tensor b = where(gt(u.t, c.scalar(0.0, u.t)), c.scalar(beta, u.t), c.scalar(1.0, u.t));
  const size_t n = u.count;
  for (size_t i = 0; i < n; ++i) {
    Tensor x = c.in(2 + i), v = c.in(2 + 2 * n + i);
    Tensor g = regularized(c, x, c.in(2 + n + i));
    Tensor v_new = v * alpha + b * g;
    Tensor step = mode == "standard" ? v_new : g + v_new * alpha;
    c.out(i, x - u.r * step, c.type(2 + i));
    c.out(n + i, v_new, c.type(2 + 2 * n + i));
  }
}

}  // namespace

void add_training_converters(ConverterTable& t) {
  t.add(std::string(kPreviewTrainingDomain) + ".Adagrad", convert_adagrad);
  t.add(std::string(kPreviewTrainingDomain) + ".Adam", convert_adam);
  t.add(std::string(kPreviewTrainingDomain) + ".Momentum", convert_momentum);
}

}  // namespace mn::onnx
