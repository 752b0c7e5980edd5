#include "codegen/flow_kernel.h"

#include <algorithm>
#include <regex>

namespace mn::codegen {
namespace {

// `void main()` of the kernel, renamed so that the wrapper below calls it.
constexpr std::string_view kMain = "void main()";
constexpr std::string_view kBody = "void mn_flow_kernel()";
constexpr uint64_t kSectorBytes = 32;

std::string u(uint64_t v) { return std::to_string(v) + "u"; }

// The prefetches' declarations (a word view of each binding) and loads; `finish` XORs the
// loaded words for the sink.
struct Prefetches {
  std::string declarations, loads, words;
};

Prefetches prefetches(const FlowOptions& o, const std::vector<uint32_t>& arrays) {
  Prefetches p;
  if (o.invocations == 0) return p;
  for (const FlowPrefetch& f : o.prefetch) {
    if (std::find(arrays.begin(), arrays.end(), f.binding) != arrays.end()) continue;
    const uint64_t words = f.bytes / 4;
    if (words == 0) continue;
    const uint64_t sectors = (f.bytes + kSectorBytes - 1) / kSectorBytes;
    const uint64_t loads =
        std::min<uint64_t>(kFlowPrefetchLoads, (sectors + o.invocations - 1) / o.invocations);
    const std::string b = std::to_string(f.binding), view = "mn_flow_view" + b;
    p.declarations += "layout(std430, set = 0, binding = " + b + ") readonly buffer MnFlowView" +
                      b + " { uint " + view + "[]; };\n";
    for (uint64_t i = 0; i < loads; ++i) {
      const std::string w = "mn_flow_w" + b + "_" + std::to_string(i);
      p.loads += "  const uint " + w + " = " + view + "[min((mn_flow_t + " + u(i * o.invocations) +
                 ") * " + u(kSectorBytes / 4) + ", " + u(words - 1) + ")];\n";
      p.words += " ^ " + w;
    }
  }
  return p;
}

// The wrapper: prefetches, the wait (one invocation; the others at the barrier), the kernel,
// then the signal once every invocation's writes are visible device-wide. Early returns in the
// kernel return here; a kernel whose barriers all invocations reach keeps that property, since
// the wrapper's barriers come after its body.
std::string wrapper(const FlowOptions& o, const Prefetches& p) {
  const std::string record = std::to_string(o.bindings), counters = std::to_string(o.bindings + 1);
  std::string s = "\n// Flow launch (codegen/flow_kernel.h).\n";
  s += "layout(std430, set = 0, binding = " + record +
       ") readonly buffer MnFlowRecord { uint mn_flow_record[]; };\n";
  s += "layout(std430, set = 0, binding = " + counters +
       ") coherent buffer MnFlowCounters { uint mn_flow_counters[]; };\n";
  s += p.declarations;
  s += "void main() {\n";
  if (!p.loads.empty()) {
    s += "  const uint mn_flow_t = gl_LocalInvocationIndex + gl_WorkGroupSize.x * "
         "gl_WorkGroupSize.y * gl_WorkGroupSize.z * (gl_WorkGroupID.x + gl_NumWorkGroups.x * "
         "(gl_WorkGroupID.y + gl_NumWorkGroups.y * gl_WorkGroupID.z));\n";
    s += p.loads;
  }
  s += "  if (gl_LocalInvocationIndex == 0u) {\n"
       "    const uint waits = mn_flow_record[2];\n"
       "    for (uint w = 0u; w < waits; ++w) {\n"
       "      const uint slot = mn_flow_record[" +
       u(kFlowRecordHeader) +
       " + 2u * w];\n"
       "      const uint target = mn_flow_record[" +
       u(kFlowRecordHeader + 1) +
       " + 2u * w];\n"
       "      uint spins = 0u;\n"
       "      while (atomicAdd(mn_flow_counters[slot], 0u) < target) {\n"
       "        if (++spins == " +
       u(kFlowSpinLimit) +
       ") {\n"
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
       "  if (gl_LocalInvocationIndex == 0u) atomicAdd(mn_flow_counters[mn_flow_record[0]], 1u);\n";
  if (!p.words.empty()) {
    s += "  if ((0u" + p.words +
         ") == 0x9e3779b9u && gl_LocalInvocationIndex == 1u) {\n"
         "    mn_flow_counters[mn_flow_record[1] + 1u] = 0u;  // the sink\n"
         "  }\n";
  }
  return s + "}\n";
}

}  // namespace

std::optional<std::string> flow_kernel(std::string_view glsl, const FlowOptions& options) {
  const size_t main = glsl.find(kMain);
  if (main == std::string_view::npos || glsl.find(kMain, main + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  std::string text(glsl.substr(0, main));
  text += kBody;
  text += glsl.substr(main + kMain.size());
  // Every buffer declaration: its binding must be one of the kernel's, and written ones become
  // coherent; bindings declared as arrays of blocks are noted.
  static const std::regex declaration(
      R"(layout\(std430, set = 0, binding = (\d+)\)((?:\s*(?:readonly|writeonly|coherent|restrict))*)\s+buffer\b([^}]*\}\s*\w*\s*\[)?)");
  std::string out;
  std::vector<uint32_t> arrays;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), declaration), end; it != end; ++it) {
    const std::smatch& m = *it;
    const unsigned long b = std::stoul(m[1].str());
    if (b >= options.bindings) return std::nullopt;
    if (m[3].matched) arrays.push_back(static_cast<uint32_t>(b));
    out.append(last, m[0].first);
    const std::string qualifiers = m[2].str();
    const bool make_coherent = b < options.coherent.size() && options.coherent[b] &&
                               qualifiers.find("coherent") == std::string::npos;
    out += "layout(std430, set = 0, binding = " + m[1].str() + ")" +
           (make_coherent ? " coherent" : "") + qualifiers + " buffer" + m[3].str();
    last = m[0].second;
  }
  out.append(last, text.cend());
  return out + wrapper(options, prefetches(options, arrays));
}

}  // namespace mn::codegen
