#include "codegen/store_rewrites.h"

#include <cctype>
#include <string>
#include <string_view>

#include "codegen/glsl.h"
#include "codegen/widened_operands.h"

namespace mn::codegen {

namespace {

// The helper lines glsl::buffer writes for the output binding `name`: the only places its data
// may be named.
bool output_helper_line(std::string_view line, const std::string& name) {
  for (const std::string& head :
       {std::string("layout("), "float " + name + "_ld(", "int " + name + "_ldi(",
        "uint " + name + "_ldb(", "void " + name + "_st(", "void " + name + "_sti(",
        "void " + name + "_stb("}) {
    if (line.starts_with(head)) return true;
  }
  return false;
}

// Whether the text names <name>_data outside the output's helpers (a direct store or atomic).
bool writes_output_directly(const std::string& text, const std::string& name) {
  const std::string data = name + "_data";
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, end - at);
    if (line.find(data) != std::string_view::npos && !output_helper_line(line, name)) return true;
    at = end + 1;
  }
  return false;
}

// Renames the helper `void NAME(` defined once in `text` to `void mn_own_NAME(` and puts
// `wrapper` after its line; false when the text defines no such helper.
bool wrap_helper(std::string& text, const std::string& name, const std::string& wrapper,
                 const std::string& launch) {
  const std::string def = "void " + name + "(uint i, ";
  const size_t at = text.find(def);
  if (at == std::string::npos) return false;
  if (text.find(def, at + 1) != std::string::npos) {
    throw Error("codegen: kernel '" + launch + "' defines " + name +
                " twice; cannot add a twin store");
  }
  text.replace(at, def.size(), "void mn_own_" + name + "(uint i, ");
  const size_t eol = text.find('\n', at);
  text.insert(eol == std::string::npos ? text.size() : eol + 1, wrapper);
  return true;
}

// Whether the text calls `name` (not only defines it).
bool called(const std::string& text, const std::string& name) {
  const std::string call = name + "(";
  for (size_t at = text.find(call); at != std::string::npos; at = text.find(call, at + 1)) {
    const bool part_of_name =
        at > 0 && (std::isalnum(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '_');
    bool defined = false;
    for (std::string_view type : {"void ", "float ", "uint ", "int "}) {
      defined =
          defined || (at >= type.size() && text.compare(at - type.size(), type.size(), type) == 0);
    }
    if (!part_of_name && !defined) return true;
  }
  return false;
}

// The launches that write output `of`, each checked to store it only through <name>_st.
std::vector<KernelLaunch*> output_writers(Lowering& l, const char* rewrite,
                                          const KernelOutput& of = {}) {
  std::vector<KernelLaunch*> writers;
  for (KernelLaunch& k : l.launches) {
    bool writes_output = false;
    for (const KernelBinding& b : k.bindings) {
      writes_output = writes_output || (b.arg == ArgRef::output(of.index) && b.written);
    }
    if (!writes_output) continue;
    if (writes_output_directly(k.glsl, of.name)) {
      throw Error("codegen: kernel '" + k.name + "' writes its output other than through " +
                  of.name + "_st; cannot add a " + rewrite);
    }
    if (k.glsl.find("void " + of.name + "_st(uint i, ") == std::string::npos) {
      throw Error("codegen: kernel '" + k.name + "' has no " + of.name + "_st; cannot add a " +
                  rewrite);
    }
    writers.push_back(&k);
  }
  if (writers.empty()) {
    throw Error(std::string("codegen: no launch stores the output; cannot add a ") + rewrite);
  }
  return writers;
}

}  // namespace

bool stores_only_through_out_st(const Node& node) {
  const std::string_view op = node.op_name();
  return stores_narrowed_result(node) || op == "softmax" || op == "log_softmax" ||
         op == "scaled_dot_product_attention" || op == "cached_attention";
}

void add_twin_store(Lowering& l, DType own, DType twin, int twin_output, const KernelOutput& of) {
  if (!is_float(own) || !is_float(twin) || own == twin) {
    throw Error(std::string("codegen: a twin store converts between two float dtypes, got ") +
                dtype_name(own) + " to " + dtype_name(twin));
  }
  const std::string st = of.name + "_st";
  const std::string twin_name = of.index ? "twin" + std::to_string(of.index) : "twin";
  for (KernelLaunch* k : output_writers(l, "twin store", of)) {
    const auto binding = static_cast<uint32_t>(k->bindings.size());
    // Declared before the first wrapper that calls the twin's store.
    const size_t first = k->glsl.find("void " + st + "(uint i, ");
    k->glsl.insert(k->glsl.rfind('\n', first) + 1, glsl::buffer(binding, twin, twin_name, false));
    wrap_helper(k->glsl, st,
                "void " + st + "(uint i, float v) { mn_own_" + st + "(i, v); " + twin_name +
                    "_st(i, v); }\n",
                k->name);
    // The raw 16-bit store of a copy: the twin widens the bits it stores.
    if (own == DType::f16 || own == DType::bf16) {
      const std::string widen = own == DType::f16 ? "mn_f16_to_f32" : "mn_bf16_to_f32";
      wrap_helper(k->glsl, of.name + "_stb",
                  "void " + of.name + "_stb(uint i, uint v) { mn_own_" + of.name + "_stb(i, v); " +
                      twin_name + "_st(i, " + widen + "(v)); }\n",
                  k->name);
    }
    k->bindings.push_back({ArgRef::output(twin_output), true});
    k->name += "+twin[" + std::string(dtype_name(twin)) + "]";
  }
}

std::vector<int64_t> permuted_axis_strides(const Shape& shape, const std::vector<int64_t>& perm) {
  if (perm.size() != shape.size()) {
    throw Error("codegen: a permuted store takes a permutation of the result's " +
                std::to_string(shape.size()) + " axes, got " + std::to_string(perm.size()));
  }
  std::vector<char> seen(shape.size(), 0);
  for (int64_t a : perm) {
    if (a < 0 || a >= static_cast<int64_t>(shape.size()) || seen[static_cast<size_t>(a)]++) {
      throw Error("codegen: a permuted store takes a permutation of the result's " +
                  std::to_string(shape.size()) + " axes; axis " + std::to_string(a) +
                  " is out of range or repeated");
    }
  }
  // Stored coordinate j is the result's axis perm[j], with the stored layout's stride j.
  Shape stored(shape.size());
  for (size_t j = 0; j < perm.size(); ++j) stored[j] = shape[static_cast<size_t>(perm[j])];
  const Shape stored_strides = contiguous_strides(stored);
  std::vector<int64_t> strides(shape.size());
  for (size_t j = 0; j < perm.size(); ++j)
    strides[static_cast<size_t>(perm[j])] = stored_strides[j];
  return strides;
}

std::string permute_label(const std::vector<int64_t>& perm) {
  std::string names;
  for (int64_t a : perm) names += (names.empty() ? "" : ",") + std::to_string(a);
  return "permute(" + names + ")";
}

std::string permuted_offset_function(const Shape& shape, const std::vector<int64_t>& perm,
                                     const std::string& name) {
  const std::vector<int64_t> strides = permuted_axis_strides(shape, perm);
  // Offset: sum over the result's axes (in the stored order) of coordinate times stride.
  std::string offset;
  for (int64_t a : perm) {
    const auto axis = static_cast<size_t>(a);
    if (shape[axis] == 1) continue;
    if (!offset.empty()) offset += " + ";
    offset += "mn_c" + std::to_string(a) + " * " + std::to_string(strides[axis]) + "u";
  }
  if (offset.empty()) offset = "0u";
  return "uint " + name + "(uint i) {\n" + glsl::unravel(shape, "i", "mn_c") + "  return " +
         offset + ";\n}\n";
}

void add_permuted_twin_store(Lowering& l, DType twin, const Shape& shape,
                             const std::vector<int64_t>& perm, int twin_output) {
  if (!is_float(twin)) {
    throw Error(std::string("codegen: a permuted twin store writes a float dtype, got ") +
                dtype_name(twin));
  }
  const std::string fn = permuted_offset_function(shape, perm, "mn_twin_permuted");
  for (KernelLaunch* k : output_writers(l, "permuted twin store")) {
    if (called(k->glsl, "out_stb") || called(k->glsl, "out_sti")) {
      throw Error("codegen: kernel '" + k->name +
                  "' stores raw or integer values; cannot add a permuted twin store");
    }
    const auto binding = static_cast<uint32_t>(k->bindings.size());
    const size_t first = k->glsl.find("void out_st(uint i, ");
    k->glsl.insert(k->glsl.rfind('\n', first) + 1,
                   glsl::buffer(binding, twin, "ptwin", false) + fn);
    wrap_helper(k->glsl, "out_st",
                "void out_st(uint i, float v) { mn_own_out_st(i, v); "
                "ptwin_st(mn_twin_permuted(i), v); }\n",
                k->name);
    k->bindings.push_back({ArgRef::output(twin_output), true});
    k->name += "+twin[" + std::string(dtype_name(twin)) + "," + permute_label(perm) + "]";
  }
}

void add_permuted_store(Lowering& l, const Shape& shape, const std::vector<int64_t>& perm,
                        const KernelOutput& of) {
  const std::string fn = permuted_offset_function(shape, perm, "mn_permuted");
  const std::string& o = of.name;
  for (KernelLaunch* k : output_writers(l, "permuted store", of)) {
    if (called(k->glsl, o + "_stb") || called(k->glsl, o + "_sti") || called(k->glsl, o + "_ld") ||
        called(k->glsl, o + "_ldb")) {
      throw Error("codegen: kernel '" + k->name +
                  "' stores raw or integer values or reads its output back; cannot add a "
                  "permuted store");
    }
    wrap_helper(
        k->glsl, o + "_st",
        fn + "void " + o + "_st(uint i, float v) { mn_own_" + o + "_st(mn_permuted(i), v); }\n",
        k->name);
    k->name += "+store[" + permute_label(perm) + "]";
  }
}

}  // namespace mn::codegen
