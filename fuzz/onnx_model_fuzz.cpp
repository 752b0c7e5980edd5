// ONNX models: the ModelProto (protobuf), initializers, attributes, shapes and every converter,
// imported without a device (graph building only; host-side tables are bounded by
// NodeContext::host_limit).
#include <meganeura/onnx.h>

#include "harness.h"

namespace mn::fuzz {
namespace {

void fuzz_onnx_model(std::span<const uint8_t> data) {
  const std::string bytes(data.begin(), data.end());
  parse_or_refuse([&] {
    // External data names files beside the model: here nothing is beside it.
    onnx::ImportedModel m = onnx::import_model_bytes(bytes, "/nonexistent-onnx-fuzz-dir", {}, "fuzz");
    require(m.graph.outputs().size() == m.outputs.size(), "onnx: outputs lost");
    for (const auto& info : m.inputs) {
      require(m.graph.find_input(info.name).has_value(), "onnx: an input without a graph input");
    }
    for (const auto& [name, w] : m.weights) {
      require(m.graph.find_parameter(name).has_value(), "onnx: a weight without a parameter");
    }
  });
}

const Registration registered("onnx_model", fuzz_onnx_model);

}  // namespace
}  // namespace mn::fuzz
