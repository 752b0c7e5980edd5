// What `mn finetune --save` writes is read by Hugging Face as we read it: transformers (and peft
// for the adapter) computed these logits from the committed outputs of two short fine-tuning
// runs (tests/fixtures/lm/finetuned/, made with the commands in tests/fixtures/lm/README.md;
// logits by tests/fixtures/lm/check_saved.py), and our sessions give the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <meganeura/data.h>
#include <meganeura/hf.h>

#include "finetune/finetune_support.h"

#include "support/random_fill.h"

namespace mn {
namespace {

const std::filesystem::path kLm = std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/lm";

Array reference_logits(const std::string& name, const std::vector<int32_t>& ids) {
  SafetensorsReader r(kLm / "reference" / ("finetuned_" + name + ".safetensors"));
  const Array input = r.array("input_ids");
  EXPECT_EQ(std::vector<double>(ids.begin(), ids.end()), input.data);
  return r.array("logits");
}

Array our_logits(const HfModel& model, const LoraOptions& lora,
                 const std::filesystem::path& adapter = {}) {
  CausalLmOptions o;
  o.sequence = 16;
  o.lora = lora;
  CausalLm lm = build_causal_lm(model.config, o);
  auto s = build_session(*lm.graph);
  load_weights(*s, model);
  if (!adapter.empty()) load_lora_adapter(*s, adapter);
  s->set("input_ids", testing::probe_ids());
  s->step();
  return s->get("logits");
}

TEST(FinetunedByTransformers, FullModelDirectory) {
  const HfModel model = load_hf_model(kLm / "finetuned" / "llama_full");
  const Array ours = our_logits(model, {});
  EXPECT_LE(testing::scaled_error(ours, reference_logits("llama_full", testing::probe_ids())), 1e-4);
  // The fine-tuning changed the model: the base model's logits differ.
  const Array base = our_logits(load_hf_model(kLm / "models" / "llama_tied"), {});
  EXPECT_GT(testing::scaled_error(base, ours), 1e-3);
}

TEST(FinetunedByTransformers, PeftAdapterDirectory) {
  const std::filesystem::path adapter = kLm / "finetuned" / "qwen3_lora";
  const HfModel base = load_hf_model(kLm / "models" / "qwen3_tiny");
  const Array ours = our_logits(base, load_lora_config(adapter), adapter);
  EXPECT_LE(testing::scaled_error(ours, reference_logits("qwen3_lora", testing::probe_ids())), 1e-4);
  EXPECT_GT(testing::scaled_error(our_logits(base, {}), ours), 1e-3);
}

}  // namespace
}  // namespace mn
