#include "codegen/flow_kernel.h"

#include <regex>

namespace mn::codegen {
namespace {

// `void main()` of the kernel, renamed so that the wrapper below calls it.
constexpr std::string_view kMain = "void main()";
constexpr std::string_view kBody = "void mn_flow_kernel()";

// The wrapper: waits (one invocation; the others at the barrier), the kernel, then the signal
// once every invocation's writes are visible device-wide. Early returns in the kernel return
// here; a kernel whose barriers all invocations reach keeps that property, since the wrapper's
// barriers come after its body.
std::string wrapper(uint32_t bindings) {
  const std::string record = std::to_string(bindings), counters = std::to_string(bindings + 1);
  return "\n// Flow launch (codegen/flow_kernel.h).\n"
         "layout(std430, set = 0, binding = " +
         record +
         ") readonly buffer MnFlowRecord { uint mn_flow_record[]; };\n"
         "layout(std430, set = 0, binding = " +
         counters +
         ") coherent buffer MnFlowCounters { uint mn_flow_counters[]; };\n"
         "void main() {\n"
         "  if (gl_LocalInvocationIndex == 0u) {\n"
         "    const uint waits = mn_flow_record[2];\n"
         "    for (uint w = 0u; w < waits; ++w) {\n"
         "      const uint slot = mn_flow_record[" +
         std::to_string(kFlowRecordHeader) +
         "u + 2u * w];\n"
         "      const uint target = mn_flow_record[" +
         std::to_string(kFlowRecordHeader + 1) +
         "u + 2u * w];\n"
         "      uint spins = 0u;\n"
         "      while (atomicAdd(mn_flow_counters[slot], 0u) < target) {\n"
         "        if (++spins == " +
         std::to_string(kFlowSpinLimit) +
         "u) {\n"
         "          atomicOr(mn_flow_counters[mn_flow_record[1]], 1u);\n"
         "          break;\n"
         "        }\n"
         "      }\n"
         "    }\n"
         "  }\n"
         "  memoryBarrierBuffer();\n"
         "  barrier();\n"
         "  mn_flow_kernel();\n"
         "  memoryBarrierBuffer();\n"
         "  barrier();\n"
         "  if (gl_LocalInvocationIndex == 0u) atomicAdd(mn_flow_counters[mn_flow_record[0]], "
         "1u);\n"
         "}\n";
}

}  // namespace

std::optional<std::string> flow_kernel(std::string_view glsl, uint32_t bindings,
                                       const std::vector<char>& coherent) {
  const size_t main = glsl.find(kMain);
  if (main == std::string_view::npos || glsl.find(kMain, main + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  std::string text(glsl.substr(0, main));
  text += kBody;
  text += glsl.substr(main + kMain.size());
  // Every buffer declaration: its binding must be one of the kernel's, and written ones become
  // coherent.
  static const std::regex declaration(
      R"(layout\(std430, set = 0, binding = (\d+)\)((?:\s*(?:readonly|writeonly|coherent|restrict))*)\s+buffer\b)");
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), declaration), end; it != end; ++it) {
    const std::smatch& m = *it;
    const unsigned long b = std::stoul(m[1].str());
    if (b >= bindings) return std::nullopt;
    out.append(last, m[0].first);
    const std::string qualifiers = m[2].str();
    const bool make_coherent =
        b < coherent.size() && coherent[b] && qualifiers.find("coherent") == std::string::npos;
    out += "layout(std430, set = 0, binding = " + m[1].str() + ")" +
           (make_coherent ? " coherent" : "") + qualifiers + " buffer";
    last = m[0].second;
  }
  out.append(last, text.cend());
  return out + wrapper(bindings);
}

}  // namespace mn::codegen
