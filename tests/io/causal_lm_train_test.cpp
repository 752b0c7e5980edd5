// The causal LM as a training graph: one SGD step on the GPU gives every parameter the gradient
// and the update the float64 reference gives it, for each architecture's extra parameters
// (biases, q/k norms) and for narrow storage.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/causal_lm.h>
#include <meganeura/hf.h>
#include <meganeura/optimizer.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

LmConfig tiny(const std::string& architecture) {
  nlohmann::json j = {{"architectures", {architecture}},
                      {"vocab_size", 37},
                      {"hidden_size", 16},
                      {"intermediate_size", 24},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2},
                      {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0},
                      {"tie_word_embeddings", architecture == "LlamaForCausalLM"}};
  return parse_lm_config(j.dump());
}

void expect_step_matches_reference(const LmConfig& config, DType dtype, const std::string& tag,
                                   bool logits_output = true) {
  CausalLmOptions o;
  o.logits_output = logits_output;
  o.batch = 2;
  o.sequence = 6;
  o.dtype = dtype;
  o.with_loss = true;
  o.seed = 5;
  CausalLm lm = build_causal_lm(config, o);
  add_training_step(lm.loss, Optimizer::sgd(), {}, /*output_gradients=*/true);
  auto rng = testing::rng_for(tag);
  Array ids = testing::random_array(rng, lm.input_ids.type(), 0, 37);
  Array labels = ids;
  labels.data[3] = -100;  // an ignored position
  reference::Feeds inputs{{"input_ids", ids}, {"labels", labels}};
  inputs[StepInputs::lr] = Array::scalar(0.01);
  inputs[StepInputs::step] = Array::scalar(1.0);

  auto session = build_session(*lm.graph);
  const auto outputs = session->output_names();
  EXPECT_EQ(std::count(outputs.begin(), outputs.end(), "logits"), logits_output ? 1 : 0);
  for (const auto& [name, value] : inputs) {
    const auto names = session->input_names();
    if (std::find(names.begin(), names.end(), name) != names.end()) session->set(name, value);
  }
  session->step();
  reference::Feeds persistent;
  const auto want = reference::run_step(*lm.graph, inputs, persistent);
  EXPECT_TRUE(testing::elementwise_near(session->get("loss"), want.at("loss"), 1e-5)) << tag;
  // bf16 parameters: the same update, rounded to bf16 on both sides; a rounding-boundary
  // tie broken differently moves one element by one bf16 step (2^-8 relative). Their
  // gradients pass through bf16 values too (measured: 2.9e-3 of an element).
  const double tolerance = dtype == DType::f32 ? 1e-5 : 1e-2;
  for (const ParameterSpec& p : lm_parameters(config)) {
    EXPECT_TRUE(testing::elementwise_near(session->get("grad/" + p.name),
                                          want.at("grad/" + p.name), tolerance))
        << tag << " " << p.name;
    EXPECT_TRUE(testing::elementwise_near(session->get(p.name), persistent.at(p.name), tolerance))
        << tag << " " << p.name;
  }
}

TEST(CausalLmTraining, LlamaStep) {
  expect_step_matches_reference(tiny("LlamaForCausalLM"), DType::f32, "llama");
}
TEST(CausalLmTraining, Qwen2Step) {
  expect_step_matches_reference(tiny("Qwen2ForCausalLM"), DType::f32, "qwen2");
}
TEST(CausalLmTraining, Qwen3Step) {
  expect_step_matches_reference(tiny("Qwen3ForCausalLM"), DType::f32, "qwen3");
}
TEST(CausalLmTraining, Bf16StorageStep) {
  expect_step_matches_reference(tiny("Qwen3ForCausalLM"), DType::bf16, "qwen3-bf16");
}
// A step that reads only its loss: the logits are scratch, not an output, and the step is the
// same.
TEST(CausalLmTraining, StepWithoutTheLogitsOutput) {
  expect_step_matches_reference(tiny("LlamaForCausalLM"), DType::f32, "llama-no-logits",
                                /*logits_output=*/false);
}
TEST(CausalLmTraining, AGraphWithoutLogitsNorLossIsRefused) {
  CausalLmOptions o;
  o.logits_output = false;
  try {
    build_causal_lm(tiny("LlamaForCausalLM"), o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logits_output is off and with_loss too"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mn
