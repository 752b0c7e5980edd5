#include "codegen/fused_pointwise.h"

#include <map>

#include "codegen/glsl.h"

namespace mn::codegen {

namespace {

using glsl::replace_all;
using glsl::ulit;

}  // namespace

std::string fused_statements(const FusedSegment& segment, std::span<const TensorType> inputs,
                             std::span<const std::string> input_exprs, const std::string& index,
                             const std::string& prefix) {
  const Shape& domain = segment.domain;
  bool need_coords = false;
  for (const FusedStep& step : segment.steps) {
    for (const FusedOperand& o : step.operands) {
      if (o.input >= 0 && inputs[static_cast<size_t>(o.input)].shape != domain) need_coords = true;
    }
  }
  std::string s;
  if (need_coords) s += glsl::unravel(domain, index, prefix + "p");
  // Each operand is loaded once per thread, however many steps read it.
  std::map<std::pair<int, std::string>, std::string> loaded;
  auto operand = [&](const FusedOperand& o) -> std::string {
    if (o.step >= 0) return prefix + std::to_string(o.step);
    if (o.input < 0) return o.literal;
    const auto k = static_cast<size_t>(o.input);
    const std::string& format = input_exprs[k];
    if (format.find('$') == std::string::npos) return format;
    const std::string offset = inputs[k].shape == domain
                                   ? index
                                   : glsl::broadcast_offset(inputs[k].shape, domain, prefix + "p");
    auto [it, fresh] = loaded.try_emplace({static_cast<int>(k), offset}, "");
    if (fresh) {
      it->second = prefix + "l" + std::to_string(loaded.size() - 1);
      s += "float " + it->second + " = " + replace_all(format, "$", offset) + ";\n";
    }
    return it->second;
  };
  static const char* names[] = {"a", "b", "c"};
  for (size_t i = 0; i < segment.steps.size(); ++i) {
    const FusedStep& step = segment.steps[i];
    const std::optional<std::string> expr = pointwise_expression(*step.node);
    if (!expr || step.operands.size() > 3) {
      throw Error("fused kernel: '" + std::string(step.node->op_name()) +
                  "' is not a pointwise op with an f32 expression");
    }
    std::vector<std::string> args;
    for (const FusedOperand& o : step.operands) args.push_back(operand(o));
    const std::string v = prefix + std::to_string(i);
    s += "float " + v + ";\n{\n";
    for (size_t a = 0; a < args.size(); ++a) {
      s += "  float " + std::string(names[a]) + " = " + args[a] + ";\n";
    }
    s += "  " + v + " = " + *expr + ";\n}\n";
  }
  return s;
}

Lowering lower_fused_pointwise(const FusedPointwise& f, const DeviceTraits& device) {
  if (f.segments.empty()) throw Error("fused kernel '" + f.name + "' has no segments");
  std::string decl;
  KernelLaunch k;
  k.name = f.name;
  // Output j's store: into its own binding, or into the input it updates in place.
  std::vector<std::string> stores(f.outputs.size());
  std::vector<char> written(f.inputs.size(), 0);
  for (size_t j = 0; j < f.outputs.size(); ++j) {
    const int in = j < f.in_place.size() ? f.in_place[j] : -1;
    if (in < 0) {
      stores[j] = "out" + std::to_string(j) + "_st";
      continue;
    }
    if (static_cast<size_t>(in) >= f.inputs.size() || f.inputs[static_cast<size_t>(in)] != f.outputs[j] ||
        written[static_cast<size_t>(in)]) {
      throw Error("fused kernel '" + f.name + "': output " + std::to_string(j) +
                  " cannot be stored in place into input " + std::to_string(in));
    }
    written[static_cast<size_t>(in)] = 1;
    stores[j] = "in" + std::to_string(in) + "_st";
  }
  std::vector<std::string> loads;
  uint32_t binding = 0;
  for (size_t i = 0; i < f.inputs.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    decl += glsl::buffer(binding++, f.inputs[i].dtype, name, !written[i]);
    loads.push_back(name + "_ld($)");
    k.bindings.push_back({ArgRef::input(static_cast<int>(i)), written[i] != 0});
  }
  for (size_t j = 0; j < f.outputs.size(); ++j) {
    if (stores[j].starts_with("in")) continue;
    decl += glsl::buffer(binding++, f.outputs[j].dtype, "out" + std::to_string(j), false);
    k.bindings.push_back({ArgRef::output(static_cast<int>(j)), true});
  }
  if (k.bindings.size() > device.max_storage_buffers) {
    throw Error("fused kernel '" + f.name + "' binds " + std::to_string(k.bindings.size()) +
                " buffers; the device allows " + std::to_string(device.max_storage_buffers));
  }
  decl += pointwise_math_library();

  std::string main = "void main() {\n  uint i = gid();\n";
  uint64_t start = 0;
  for (size_t s = 0; s < f.segments.size(); ++s) {
    const FusedSegment& seg = f.segments[s];
    const auto count = static_cast<uint64_t>(std::max<int64_t>(1, numel(seg.domain)));
    const std::string fn = "mn_segment" + std::to_string(s);
    decl += "void " + fn + "(uint e) {\n" + fused_statements(seg, f.inputs, loads, "e", "v_");
    for (const auto& [out, step] : seg.stores) {
      decl += stores[static_cast<size_t>(out)] + "(e, v_" + std::to_string(step) + ");\n";
    }
    decl += "}\n";
    const uint64_t end = start + count;
    main += "  if (i < " + ulit(end) + ") { " + fn + "(i" +
            (start == 0 ? std::string() : " - " + ulit(start)) + "); return; }\n";
    start = end;
  }
  main += "}\n";
  const glsl::Linear grid = glsl::linear_grid(start, device);
  k.glsl = glsl::header() + decl + glsl::gid_function() + main;
  k.workgroup = {grid.local, 1, 1};
  k.groups = grid.groups;
  Lowering l;
  l.launches.push_back(std::move(k));
  return l;
}

}  // namespace mn::codegen
