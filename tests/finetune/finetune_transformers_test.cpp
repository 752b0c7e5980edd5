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

#include "support/expect_error.h"
#include "support/random_fill.h"
#include "support/scratch_dir.h"

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

// The adapter merged into a plain model's weights (mn generate --adapter) gives what PEFT gives.
TEST(FinetunedByTransformers, AdapterMergedIntoThePlainModel) {
  const std::filesystem::path adapter = kLm / "finetuned" / "qwen3_lora";
  const HfModel base = load_hf_model(kLm / "models" / "qwen3_tiny");
  CausalLmOptions o;
  o.sequence = 16;
  CausalLm lm = build_causal_lm(base.config, o);
  auto s = build_session(*lm.graph);
  load_weights(*s, base);
  merge_lora_adapter(*s, base.config, adapter);
  s->set("input_ids", testing::probe_ids());
  s->step();
  const Array merged = s->get("logits");
  EXPECT_LE(testing::scaled_error(merged, reference_logits("qwen3_lora", testing::probe_ids())),
            1e-4);
  EXPECT_GT(testing::scaled_error(our_logits(base, {}), merged), 1e-3);
}

// An adapter file that lacks a matrix, has one of another shape, or holds a tensor that adapts
// nothing the configuration targets is refused by name.
TEST(FinetunedByTransformers, AdapterFilesThatDoNotFitAreRefused) {
  const std::filesystem::path adapter = kLm / "finetuned" / "qwen3_lora";
  const HfModel base = load_hf_model(kLm / "models" / "qwen3_tiny");
  const std::map<std::string, Array> tensors =
      load_safetensors(adapter / "adapter_model.safetensors");
  const std::string a0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  ASSERT_TRUE(tensors.count(a0));
  CausalLmOptions o;
  o.sequence = 4;
  CausalLm lm = build_causal_lm(base.config, o);
  auto s = build_session(*lm.graph);
  load_weights(*s, base);
  auto refused = [&](std::map<std::string, Array> changed, const std::string& says) {
    test::ScratchDir dir("adapter");
    std::filesystem::copy_file(adapter / "adapter_config.json", dir.path() / "adapter_config.json");
    save_safetensors(dir.path() / "adapter_model.safetensors", changed);
    try {
      merge_lora_adapter(*s, base.config, dir.path());
      ADD_FAILURE() << "accepted an adapter that " << says;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  auto missing = tensors;
  missing.erase(a0);
  refused(missing, "lacks tensor '" + a0 + "'");
  auto reshaped = tensors;
  const Array& a = tensors.at(a0);
  reshaped[a0] = Array({a.shape[0] + 1, a.shape[1]}, a.dtype);
  refused(reshaped, "tensor '" + a0 + "' has shape");
  auto extra = tensors;
  extra["base_model.model.lm_head.lora_A.weight"] = a;
  refused(extra, "tensor 'base_model.model.lm_head.lora_A.weight' adapts no projection");
}

}  // namespace
}  // namespace mn
