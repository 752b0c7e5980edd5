#include <meganeura/autodiff.h>

#include "ir/op_def.h"

namespace mn {

std::vector<Tensor> gradients(Tensor loss, const std::vector<Tensor>& wrt, Tensor cotangent) {
  Graph& g = loss.graph();
  if (!cotangent.valid()) {
    if (loss.numel() != 1) {
      throw ShapeError("gradients: loss must have one element, got " + loss.type().str() +
                       " (pass a cotangent for a non-scalar output)");
    }
    cotangent = broadcast_to(g.scalar(1.0, loss.dtype()), loss.shape());
  } else if (cotangent.type() != loss.type()) {
    throw ShapeError("gradients: cotangent " + cotangent.type().str() + " does not match loss " +
                     loss.type().str());
  }
  const auto last = static_cast<size_t>(loss.id());

  // depends[i]: node i depends on some wrt tensor through differentiable ops.
  std::vector<char> depends(last + 1, 0);
  for (const Tensor& w : wrt) {
    if (&w.graph() != &g) throw Error("gradients: a wrt tensor belongs to another graph");
    if (static_cast<size_t>(w.id()) <= last) depends[w.id()] = 1;
  }
  for (size_t i = 0; i <= last; ++i) {
    const Node& node = g.node(static_cast<NodeId>(i));
    if (depends[i] || !node.op->differentiable) continue;
    for (NodeId in : node.inputs) {
      if (depends[in]) {
        depends[i] = 1;
        break;
      }
    }
  }

  std::vector<Tensor> grad(last + 1);
  grad[last] = cotangent;
  std::vector<Tensor> inputs;
  for (size_t i = last + 1; i-- > 0;) {
    if (!grad[i].valid() || !depends[i]) continue;
    // Nodes appended below have larger ids, so g.node() references stay valid only until the
    // next append: copy what the vjp needs.
    const Node node = g.node(static_cast<NodeId>(i));
    if (!node.op->differentiable || node.inputs.empty()) continue;
    inputs.clear();
    for (NodeId in : node.inputs) inputs.push_back(g.tensor(in));
    std::vector<Tensor> in_grads =
        node.op->vjp(node, inputs, g.tensor(static_cast<NodeId>(i)), grad[i]);
    if (in_grads.size() != node.inputs.size()) {
      throw Error("gradients: vjp of '" + node.op->name + "' returned " +
                  std::to_string(in_grads.size()) + " gradients for " +
                  std::to_string(node.inputs.size()) + " inputs");
    }
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      NodeId in = node.inputs[k];
      if (!in_grads[k].valid() || !depends[in]) continue;
      if (in_grads[k].shape() != g.node(in).type.shape) {
        throw Error("gradients: vjp of '" + node.op->name + "' gave input " + std::to_string(k) +
                    " a gradient of shape " + shape_str(in_grads[k].shape()) + ", expected " +
                    shape_str(g.node(in).type.shape));
      }
      grad[in] = grad[in].valid() ? add(grad[in], in_grads[k]) : in_grads[k];
    }
  }

  std::vector<Tensor> out;
  out.reserve(wrt.size());
  for (const Tensor& w : wrt) {
    Tensor gw = static_cast<size_t>(w.id()) <= last ? grad[w.id()] : Tensor{};
    if (!gw.valid()) gw = broadcast_to(g.scalar(0.0, w.dtype()), w.shape());
    out.push_back(gw);
  }
  return out;
}

}  // namespace mn
