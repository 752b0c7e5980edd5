// Llama, Qwen2 and Qwen3 directories written by transformers: our graphs with their weights
// reproduce transformers' float32 logits and loss, on the CPU reference and on the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <meganeura/causal_lm.h>
#include <meganeura/data.h>
#include <meganeura/hf.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/random_fill.h"

namespace mn {
namespace {

const std::filesystem::path kLm = std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/lm";

struct Reference {
  Array input_ids, logits;
  double loss = 0;
};

Reference reference_of(const std::string& name) {
  SafetensorsReader r(kLm / "reference" / (name + ".safetensors"));
  return {r.array("input_ids"), r.array("logits"), r.array("loss").data.at(0)};
}

CausalLm model_for(const HfModel& m, const Reference& ref) {
  CausalLmOptions o;
  o.batch = ref.input_ids.shape[0];
  o.sequence = ref.input_ids.shape[1];
  o.with_loss = true;
  return build_causal_lm(m.config, o);
}

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, GpuMatchesTransformers) {
  const HfModel model = load_hf_model(kLm / "models" / GetParam());
  const Reference ref = reference_of(GetParam());
  CausalLm lm = model_for(model, ref);
  auto session = build_session(*lm.graph);
  load_weights(*session, model);
  session->set("input_ids", ref.input_ids);
  session->set("labels", ref.input_ids);
  session->step();
  EXPECT_LE(testing::scaled_error(session->get("logits"), ref.logits), 1e-4);
  EXPECT_NEAR(session->get("loss").data.at(0), ref.loss, 1e-5);
}

TEST_P(HfFixture, ReferenceMatchesTransformers) {
  const HfModel model = load_hf_model(kLm / "models" / GetParam());
  const Reference ref = reference_of(GetParam());
  CausalLm lm = model_for(model, ref);
  reference::Feeds feeds{{"input_ids", ref.input_ids}, {"labels", ref.input_ids}};
  for (const auto& [name, t] : model.tensors) {
    Array a = t.reader->array(name);
    a.dtype = DType::f32;  // the graph's storage dtype; bf16/f16 values are exact in f32
    feeds[name] = a;
  }
  auto out = reference::evaluate(*lm.graph, feeds);
  EXPECT_LE(testing::scaled_error(out.at("logits"), ref.logits), 1e-5);
  EXPECT_NEAR(out.at("loss").data.at(0), ref.loss, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Models, HfFixture,
                         ::testing::Values("llama_tied", "llama_bf16_sharded", "qwen2_tiny",
                                           "qwen3_tiny"));

}  // namespace
}  // namespace mn
