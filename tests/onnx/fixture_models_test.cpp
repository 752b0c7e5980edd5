// Models exported by PyTorch's current exporter (torch.export based, opset 20) with their
// onnxruntime outputs (tests/fixtures/onnx/make_onnx_fixtures.py, run on the GPU machine):
// imported with the inputs' shapes binding their symbolic axes, run on the device, compared.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include <meganeura/onnx.h>
#include <meganeura/session.h>
#include <meganeura/tensor_data.h>

namespace mn {
namespace {

const std::filesystem::path kDir = std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/onnx";

TEST(OnnxFixtureModels, CurrentPyTorchExportsMatchOnnxRuntime) {
  std::ifstream f(kDir / "manifest.json");
  ASSERT_TRUE(f) << "missing " << kDir / "manifest.json";
  const auto manifest = nlohmann::json::parse(f);
  ASSERT_GE(manifest.size(), 3u);
  for (const auto& entry : manifest) {
    const std::string name = entry["name"];
    SCOPED_TRACE(name);
    const RawTensor x = read_npy(kDir / (name + ".input.npy"));
    const RawTensor want = read_npy(kDir / (name + ".output.npy"));
    const std::string input = entry["input"], output = entry["output"];
    onnx::ImportedModel m = onnx::import_model(kDir / (name + ".onnx"), {.input_shapes = {{input, x.shape}}});
    EXPECT_EQ(m.opset, entry["opset"].get<int64_t>());
    auto s = build_session(m.graph);
    m.load_weights(*s);
    s->set(input, onnx::to_graph_value(x, m.inputs.at(0), input));
    s->step();
    const Array got = s->get(output);
    ASSERT_EQ(got.shape, want.shape);
    double scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::abs(want.value(i)));
    for (int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_NEAR(got.data[static_cast<size_t>(i)], want.value(i), 1e-4 * scale + 1e-4 * std::abs(want.value(i)))
          << "element " << i;
    }
  }
}

}  // namespace
}  // namespace mn
