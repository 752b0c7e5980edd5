// The loss family on the GPU. Forward losses: per-item losses, then their reduction in a fixed
// order (one workgroup when small, a per-item kernel and a summing workgroup otherwise). The
// elementwise losses' backward ops: one thread per element. Class losses: lower_loss_class.cpp.
// Formulas follow the reference (src/ir/ops/loss.cpp) operation for operation, in f32.
#include "codegen/lower_loss.h"

#include <limits>

#include "codegen/glsl.h"
#include "codegen/index_check.h"
#include "codegen/lower_families.h"
#include "ir/ops/loss.h"

namespace mn::codegen {

namespace loss_lowering {

uint32_t reduce_local(const DeviceTraits& d) {
  uint32_t local = 256;
  while (local > 32 && local > d.max_workgroup_invocations) local /= 2;
  return local;
}

std::string workgroup_functions(uint32_t local) {
  const std::string size = std::to_string(local);
  const std::string half = std::to_string(local / 2) + "u";
  auto tree = [&](const std::string& type, const std::string& fn, const std::string& array,
                  const std::string& combine) {
    std::string s = type + " " + fn + "(" + type + " v) {\n";
    s += "  uint lid = gl_LocalInvocationID.x;\n  " + array + "[lid] = v;\n  barrier();\n";
    s += "  for (uint s = " + half + "; s > 0u; s >>= 1) {\n";
    s += "    if (lid < s) { " + type + " a = " + array + "[lid], b = " + array + "[lid + s]; " +
         array + "[lid] = " + combine + "; }\n    barrier();\n  }\n";
    // The closing barrier lets the caller reuse the array right away.
    s += "  " + type + " r = " + array + "[0];\n  barrier();\n  return r;\n}\n";
    return s;
  };
  std::string s = "shared float mn_red_f[" + size + "];\nshared uint mn_red_u[" + size + "];\n";
  s += tree("float", "wg_sum", "mn_red_f", "a + b");
  // NaN never wins a comparison, as in the reference's running max.
  s += tree("float", "wg_max", "mn_red_f", "b > a ? b : a");
  s += tree("uint", "wg_count", "mn_red_u", "a + b");
  return s;
}

std::string math_functions() {
  return R"(float mn_nan() { return uintBitsToFloat(0x7fc00000u); }
float mn_inf() { return uintBitsToFloat(0x7f800000u); }
float mn_log(float x) { return x > 0.0 ? log(x) : (x == 0.0 ? -mn_inf() : mn_nan()); }
// log(1 + x) without the rounding of 1 + x (Goldberg): exact where 1 + x rounds to 1.
float mn_log1p(float x) {
  float u = 1.0 + x;
  if (u == 1.0 || isinf(u)) return u == 1.0 ? x : u;
  return mn_log(u) * (x / (u - 1.0));
}
)";
}

std::string ignored_function(int64_t ignore_index) {
  // i32 targets can only equal an ignore_index inside the i32 range.
  if (ignore_index < std::numeric_limits<int32_t>::min() ||
      ignore_index > std::numeric_limits<int32_t>::max()) {
    return "bool ignored(int t) { return false; }\n";
  }
  const auto bits = static_cast<uint32_t>(static_cast<int32_t>(ignore_index));
  return "bool ignored(int t) { return t == int(" + std::to_string(bits) + "u); }\n";
}

std::string target_functions(int64_t ignore_index, int64_t classes, bool checked) {
  const std::string c = std::to_string(classes);
  return ignored_function(ignore_index) +
         "bool bad_target(int t) { return !ignored(t) && (t < 0 || t >= " + c + "); }\n" +
         "bool counted(int t) { return !ignored(t)" + (checked ? " && !bad_target(t)" : "") +
         "; }\n";
}

std::vector<KernelBinding> ItemLosses::leading_bindings() const {
  std::vector<KernelBinding> b;
  for (int i : inputs) b.push_back({ArgRef::input(i), false});
  if (index_slot) b.push_back(index_slot_binding());
  return b;
}

std::string dest_buffer(uint32_t binding, DType dtype) {
  return glsl::buffer(binding, dtype, "dst", false);
}

namespace {

// One workgroup summing `value` (an expression of item index i) over every item, counting the
// counted ones for the mean, and storing the reduced loss into `out`.
std::string sum_main(const ItemLosses& items, Reduction reduction, uint32_t local,
                     const std::string& value) {
  const std::string n = std::to_string(items.items) + "u";
  const bool count = reduction == Reduction::mean && items.counted;
  std::string s = "void main() {\n  uint lid = gl_LocalInvocationID.x;\n";
  s += "  float acc = 0.0;\n  uint cnt = 0u;\n";
  s += "  for (uint i = lid; i < " + n + "; i += " + std::to_string(local) + "u) {\n";
  s += "    acc += " + value + ";\n";
  if (count) s += "    if (item_counted(i)) ++cnt;\n";
  s += "  }\n  float total = wg_sum(acc);\n";
  if (count) s += "  uint count = wg_count(cnt);\n";
  std::string result = "total";
  if (count) {
    result = "count == 0u ? mn_nan() : total / float(count)";
  } else if (reduction == Reduction::mean) {
    result = items.items == 0 ? "mn_nan()"
                              : "total / " + glsl::float_literal(static_cast<double>(items.items));
  }
  s += "  if (lid == 0u) out_st(0u, " + result + ");\n}\n";
  return s;
}

}  // namespace

KernelLaunch per_item_kernel(const LowerContext& ctx, const ItemLosses& items, ArgRef dest,
                             DType dest_dtype) {
  std::vector<KernelBinding> bindings = items.leading_bindings();
  const std::string decl =
      items.declarations + dest_buffer(static_cast<uint32_t>(bindings.size()), dest_dtype);
  KernelLaunch l =
      glsl::elementwise_launch(std::string(ctx.node.op_name()) + "_items", decl,
                               "  dst_st(i, item_loss(i));\n", items.items, ctx.device);
  l.bindings = std::move(bindings);
  l.bindings.push_back({dest, true});
  return l;
}

Lowering lower_item_losses(const LowerContext& ctx, const ItemLosses& items, Reduction reduction) {
  const DType out_dtype = ctx.node.type.dtype;
  auto items_into = [&](ArgRef dest, DType dtype) {
    return items.item_kernel ? items.item_kernel(dest, dtype)
                             : per_item_kernel(ctx, items, dest, dtype);
  };
  Lowering l;
  if (reduction == Reduction::none) {
    l.launches.push_back(items_into(ArgRef::output(), out_dtype));
    return l;
  }
  const uint32_t local = reduce_local(ctx.device);
  const auto k = static_cast<uint32_t>(items.leading_bindings().size());
  // One workgroup computes everything while that is little work; past it, the items run in
  // parallel and the workgroup only sums their losses.
  const bool fused = !items.item_kernel && items.items * items.cost_per_item <= (1u << 16);
  KernelLaunch sum;
  sum.name = std::string(ctx.node.op_name()) + "_sum";
  sum.workgroup = {local, 1, 1};
  sum.bindings = items.leading_bindings();
  std::string src = glsl::header() + items.declarations + workgroup_functions(local);
  if (fused) {
    src += glsl::buffer(k, out_dtype, "out", false);
    src += sum_main(items, reduction, local, "item_loss(i)");
  } else {
    l.scratch_bytes.push_back(std::max<uint64_t>(1, items.items) * sizeof(float));
    l.launches.push_back(items_into(ArgRef::scratch(0), DType::f32));
    src += glsl::buffer(k, DType::f32, "scr", true);
    src += glsl::buffer(k + 1, out_dtype, "out", false);
    src += sum_main(items, reduction, local, "scr_ld(i)");
    sum.bindings.push_back({ArgRef::scratch(0), false});
  }
  sum.bindings.push_back({ArgRef::output(), true});
  sum.glsl = std::move(src);
  l.launches.push_back(std::move(sum));
  return l;
}

KernelLaunch count_kernel(const LowerContext& ctx, int target, uint64_t n,
                          const std::string& targets, ArgRef dest) {
  const uint32_t local = reduce_local(ctx.device);
  KernelLaunch l;
  l.name = std::string(ctx.node.op_name()) + "_count";
  l.workgroup = {local, 1, 1};
  l.bindings = {{ArgRef::input(target), false}, {dest, true}};
  l.glsl = glsl::header() + glsl::buffer(0, DType::i32, "tgt", true) +
           glsl::buffer(1, DType::f32, "dst", false) + targets + workgroup_functions(local) +
           "void main() {\n  uint lid = gl_LocalInvocationID.x;\n  uint cnt = 0u;\n"
           "  for (uint i = lid; i < " +
           std::to_string(n) + "u; i += " + std::to_string(local) +
           "u) if (counted(tgt_ldi(i))) ++cnt;\n"
           "  uint count = wg_count(cnt);\n  if (lid == 0u) dst_st(0u, float(count));\n}\n";
  return l;
}

}  // namespace loss_lowering

namespace {

using loss_lowering::ItemLosses;

// An elementwise loss l(x, y) in GLSL: its value and its derivative w.r.t. operand `wrt`, as
// expressions of floats x and y, with helper functions they call.
struct PairLoss {
  std::string helpers;
  std::string value;
  std::string grad[2];
};

std::string lit(double v) { return glsl::float_literal(v); }

PairLoss mse(const LossAttrs&) {
  return {"", "(x - y) * (x - y)", {"2.0 * (x - y)", "-2.0 * (x - y)"}};
}

PairLoss l1(const LossAttrs&) { return {"", "abs(x - y)", {"sign(x - y)", "-sign(x - y)"}}; }

// beta = 0 is l1_loss, gradient 0 at x == y included.
PairLoss smooth_l1(const SmoothL1Attrs& a) {
  if (a.beta == 0.0) return {"", "abs(x - y)", {"sign(x - y)", "-sign(x - y)"}};
  const std::string beta = lit(a.beta);
  std::string h = "float mn_smooth_l1(float d) {\n  float z = abs(d);\n  return z < " + beta +
                  " ? 0.5 * z * z / " + beta + " : z - " + lit(0.5 * a.beta) + ";\n}\n";
  h += "float mn_smooth_l1_grad(float d) { return d <= -" + beta + " ? -1.0 : (d >= " + beta +
       " ? 1.0 : d / " + beta + "); }\n";
  return {h, "mn_smooth_l1(x - y)", {"mn_smooth_l1_grad(x - y)", "-mn_smooth_l1_grad(x - y)"}};
}

// Logs clamped at -100, log(1 - p) as log1p(-p); the gradient's denominator is clamped at ATen's
// float EPSILON 1e-12. A probability outside [0, 1] (an error on the CPU) gives NaN.
PairLoss bce(const LossAttrs&) {
  std::string h =
      "float mn_bce(float p, float y) {\n"
      "  if (!(p >= 0.0 && p <= 1.0)) return mn_nan();\n"
      "  return (y - 1.0) * max(mn_log1p(-p), -100.0) - y * max(mn_log(p), -100.0);\n"
      "}\n";
  return {h,
          "mn_bce(x, y)",
          {"(x - y) / max((1.0 - x) * x, " + lit(static_cast<double>(1e-12F)) + ")",
           "-mn_log(x / (1.0 - x))"}};
}

// The stable form (1 - y) x + m + log(exp(-m) + exp(-x - m)), m = max(-x, 0).
PairLoss bce_logits(const LossAttrs&) {
  std::string h =
      "float mn_bce_logits(float x, float y) {\n"
      "  float m = max(-x, 0.0);\n"
      "  return (1.0 - y) * x + m + log(exp(-m) + exp(-x - m));\n}\n";
  return {h, "mn_bce_logits(x, y)", {"1.0 / (1.0 + exp(-x)) - y", "-x"}};
}

template <class A>
Lowering lower_forward(const LowerContext& ctx, PairLoss (*make)(const A&)) {
  const A& a = ctx.node.attrs.as<A>();
  const PairLoss p = make(a);
  ItemLosses items;
  items.inputs = {0, 1};
  items.items = static_cast<uint64_t>(ctx.inputs[0].numel());
  items.cost_per_item = 2;
  items.declarations = glsl::buffer(0, ctx.inputs[0].dtype, "xs", true) +
                       glsl::buffer(1, ctx.inputs[1].dtype, "ys", true) +
                       loss_lowering::math_functions() + p.helpers +
                       "float item_loss(uint i) {\n  float x = xs_ld(i), y = ys_ld(i);\n  return " +
                       p.value + ";\n}\n";
  return loss_lowering::lower_item_losses(ctx, items, a.reduction);
}

// out[i] = l'(x_i, y_i) times the cotangent (the scalar for mean/sum), over N for the mean.
template <class A>
Lowering lower_backward(const LowerContext& ctx, PairLoss (*make)(const A&)) {
  const auto& ba = ctx.node.attrs.as<LossBackwardAttrs<A>>();
  const PairLoss p = make(ba.forward);
  const auto n = static_cast<uint64_t>(ctx.node.type.numel());
  const Reduction r = ba.forward.reduction;
  std::string decl = glsl::buffer(0, ctx.inputs[0].dtype, "xs", true) +
                     glsl::buffer(1, ctx.inputs[1].dtype, "ys", true) +
                     glsl::buffer(2, ctx.inputs[2].dtype, "ct", true) +
                     glsl::buffer(3, ctx.node.type.dtype, "out", false) +
                     loss_lowering::math_functions() + p.helpers;
  std::string body = "  float x = xs_ld(i), y = ys_ld(i);\n";
  body += "  float g = (" + p.grad[ba.wrt == 0 ? 0 : 1] + ") * ct_ld(" +
          (r == Reduction::none ? "i" : "0u") + ");\n";
  if (r == Reduction::mean) body += "  g = g / " + lit(static_cast<double>(n)) + ";\n";
  body += "  out_st(i, g);\n";
  KernelLaunch k =
      glsl::elementwise_launch(std::string(ctx.node.op_name()), decl, body, n, ctx.device);
  k.bindings = {{ArgRef::input(0), false},
                {ArgRef::input(1), false},
                {ArgRef::input(2), false},
                {ArgRef::output(), true}};
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

template <class A>
void add_pair_loss(LoweringRegistry& r, const std::string& name, PairLoss (*make)(const A&)) {
  r.add(name, [make](const LowerContext& ctx) { return lower_forward(ctx, make); });
  r.add(name + "_backward", [make](const LowerContext& ctx) { return lower_backward(ctx, make); });
}

}  // namespace

void register_loss_lowerings(LoweringRegistry& r) {
  add_pair_loss<LossAttrs>(r, "mse_loss", mse);
  add_pair_loss<LossAttrs>(r, "l1_loss", l1);
  add_pair_loss<SmoothL1Attrs>(r, "smooth_l1_loss", smooth_l1);
  add_pair_loss<LossAttrs>(r, "binary_cross_entropy", bce);
  add_pair_loss<LossAttrs>(r, "binary_cross_entropy_with_logits", bce_logits);
  loss_lowering::register_class_loss_lowerings(r);
}

}  // namespace mn::codegen
