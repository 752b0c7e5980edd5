// Fine-tuning on the GPU: the loss falls on a repeated text, a full step equals the float64
// reference, LoRA trains only its adapters (saved in PEFT's layout, merged to the same logits),
// resume continues bit for bit, and saved directories load back to the trained model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>

#include <meganeura/data.h>
#include <meganeura/error.h>
#include <meganeura/finetune.h>
#include <meganeura/reference.h>
#include <meganeura/session.h>

#include "finetune_support.h"
#include "io/json_fields.h"
#include "support/elementwise_error.h"
#include "support/random_fill.h"

namespace mn {
namespace {

using testing::lm_fixture;
using testing::ScratchDir;
using testing::error_of;

TEST(Finetune, LossFallsOnRepeatedText) {
  ScratchDir dir("falls");
  FinetuneOptions o = testing::small_options(lm_fixture("llama_tied"),
                                             dir.write("t.txt", testing::training_text()));
  o.steps = 12;
  Finetuner t(o);
  const FinetuneResult r = t.run();
  ASSERT_EQ(r.losses.size(), 12u);
  EXPECT_EQ(r.steps, 12);
  EXPECT_LT(r.losses.back(), r.losses.front() - 1.0)
      << r.losses.front() << " -> " << r.losses.back();
}

// One update with clipping and weight decay equals the reference's on the same batch (the
// first batch of the shuffled order).
void expect_full_step_matches_reference(Optimizer opt, double tolerance) {
  ScratchDir dir("reference");
  const auto model = lm_fixture("llama_tied");
  FinetuneOptions o = testing::small_options(model, dir.write("t.txt", testing::training_text()));
  opt.lr = o.optimizer.lr;
  o.optimizer = opt;
  o.optimizer.clip_grad_norm = 0.5;
  Finetuner t(o);
  const LmExamples& ex = t.examples();
  const auto order = epoch_order(ex.count(), o.seed, 0);
  Array ids({o.batch, o.sequence}, DType::i32), labels({o.batch, o.sequence}, DType::i32);
  for (int64_t b = 0; b < o.batch; ++b) {
    for (int64_t i = 0; i < o.sequence; ++i) {
      const auto src = static_cast<size_t>(order[static_cast<size_t>(b)] * o.sequence + i);
      ids.data[static_cast<size_t>(b * o.sequence + i)] = ex.input_ids[src];
      labels.data[static_cast<size_t>(b * o.sequence + i)] = ex.labels[src];
    }
  }
  reference::Feeds persistent;
  for (auto& [name, value] : load_safetensors(model / "model.safetensors"))
    persistent[name] = value;
  const double loss = t.step();

  CausalLmOptions lo;
  lo.batch = o.batch;
  lo.sequence = o.sequence;
  lo.with_loss = true;
  CausalLm lm = build_causal_lm(t.config(), lo);
  add_training_step(lm.loss, o.optimizer);
  reference::Feeds inputs{{"input_ids", ids}, {"labels", labels}};
  for (const auto& [name, value] : step_scalars(o.optimizer, o.optimizer.lr, 1)) {
    inputs[name] = Array::scalar(value);
  }
  const auto want = reference::run_step(*lm.graph, inputs, persistent);
  EXPECT_NEAR(loss, want.at("loss").data[0], 1e-5 * std::abs(loss));
  for (const ParameterSpec& p : lm_parameters(t.config())) {
    EXPECT_TRUE(
        testing::elementwise_near(t.session().get(p.name), persistent.at(p.name), tolerance))
        << p.name;
  }
}

TEST(Finetune, FullSgdStepMatchesReference) {
  expect_full_step_matches_reference(Optimizer::sgd({.momentum = 0.9, .weight_decay = 0.1}), 1e-6);
}

// Adam's first update is about lr·g/|g|: float32 rounding of gradients near eps moves a few
// elements by a fraction of lr, hence a looser bound than SGD's (measured: 2.7e-4 of an
// element).
TEST(Finetune, FullAdamwStepMatchesReference) {
  expect_full_step_matches_reference(Optimizer::adamw({.weight_decay = 0.1}), 1e-3);
}

FinetuneOptions lora_options(const ScratchDir& dir, const std::string& model) {
  FinetuneOptions o =
      testing::small_options(lm_fixture(model), dir.write("t.txt", testing::training_text()));
  o.lora.rank = 4;
  o.lora.alpha = 8;
  o.optimizer.lr = 1e-2;
  o.steps = 3;
  o.seed = 3;
  return o;
}

TEST(Finetune, LoraTrainsOnlyAdapters) {
  ScratchDir dir("lora");
  const FinetuneOptions o = lora_options(dir, "qwen3_tiny");
  Finetuner t(o);
  t.run();
  Session& s = t.session();
  const auto base = load_safetensors(lm_fixture("qwen3_tiny") / "model.safetensors");
  for (const auto& [name, value] : base)
    EXPECT_EQ(s.get(name).data, value.data) << name << " changed";
  const auto trained = t.trained_parameters();
  EXPECT_EQ(trained.size(), 2u * 7u * 2u);  // 2 layers, 7 projections, A and B
  for (const std::string& n : trained) EXPECT_TRUE(is_lora_parameter(n)) << n;
  for (const std::string& st : s.state_names()) {
    EXPECT_TRUE(is_lora_parameter(st.substr(0, st.find('/')))) << "optimizer state " << st;
  }
  EXPECT_EQ(s.state_names().size(), trained.size() * 2);  // exp_avg and exp_avg_sq
  const Array b = s.get("model.layers.1.mlp.down_proj.lora_B.weight");
  EXPECT_TRUE(std::any_of(b.data.begin(), b.data.end(), [](double v) { return v != 0.0; }))
      << "B did not move from zero";
}

TEST(Finetune, LoraAdapterSavedInPeftLayout) {
  ScratchDir dir("peft");
  FinetuneOptions o = lora_options(dir, "qwen3_tiny");
  o.lora.targets = {"q_proj", "down_proj"};
  o.save = dir.path() / "adapter";
  Finetuner t(o);
  t.run();
  const io::JsonFields cfg(io::read_text_file(o.save / "adapter_config.json"),
                           "adapter_config.json");
  EXPECT_EQ(cfg.object().at("peft_type"), "LORA");
  EXPECT_EQ(cfg.object().at("task_type"), "CAUSAL_LM");
  EXPECT_EQ(cfg.object().at("r"), 4);
  EXPECT_EQ(cfg.object().at("lora_alpha"), 8.0);
  EXPECT_EQ(cfg.object().at("bias"), "none");
  EXPECT_EQ(cfg.object().at("lora_dropout"), 0.0);
  EXPECT_EQ(cfg.object().at("target_modules"), nlohmann::json({"q_proj", "down_proj"}));
  const auto tensors = load_safetensors(o.save / "adapter_model.safetensors");
  EXPECT_EQ(tensors.size(), 2u * 2u * 2u);
  const LmConfig& c = t.config();
  const std::string p = "base_model.model.model.layers.1.";
  EXPECT_EQ(tensors.at(p + "self_attn.q_proj.lora_A.weight").shape, (Shape{4, c.hidden_size}));
  EXPECT_EQ(tensors.at(p + "self_attn.q_proj.lora_B.weight").shape,
            (Shape{c.num_attention_heads * c.head_dim, 4}));
  EXPECT_EQ(tensors.at(p + "mlp.down_proj.lora_A.weight").shape, (Shape{4, c.intermediate_size}));
  EXPECT_EQ(tensors.at(p + "mlp.down_proj.lora_B.weight").shape, (Shape{c.hidden_size, 4}));
  EXPECT_EQ(tensors.at(p + "mlp.down_proj.lora_B.weight").data,
            t.session().get("model.layers.1.mlp.down_proj.lora_B.weight").data);

  // Loaded back over the base model: the trained model's logits.
  const LoraOptions loaded = load_lora_config(o.save);
  EXPECT_EQ(loaded.rank, 4);
  EXPECT_EQ(loaded.alpha, 8.0);
  EXPECT_EQ(loaded.targets, o.lora.targets);
  CausalLmOptions lo;
  lo.sequence = 16;
  lo.lora = loaded;
  CausalLm lm = build_causal_lm(c, lo);
  auto s = build_session(*lm.graph);
  load_weights(*s, load_hf_model(o.model_dir));
  load_lora_adapter(*s, o.save);
  s->set("input_ids", testing::probe_ids());
  s->step();
  EXPECT_EQ(s->get("logits").data,
            testing::logits_with(c, testing::parameters_of(t.session()), o.lora).data);
  // An adapter of another rank does not fit: the tensor and both shapes are named.
  lo.lora.rank = 2;
  CausalLm other = build_causal_lm(c, lo);
  auto s2 = build_session(*other.graph);
  EXPECT_NE(error_of([&] { load_lora_adapter(*s2, o.save); }).find("has shape [4, 64], but"),
            std::string::npos);
}

// The merged directory, loaded as a plain model, gives the adapted model's logits.
TEST(Finetune, MergedLoraLogitsEqualAdapterLogits) {
  ScratchDir dir("merge");
  FinetuneOptions o = lora_options(dir, "llama_tied");
  o.merge_lora = true;
  o.save = dir.path() / "merged";
  Finetuner t(o);
  t.run();
  const Array adapted =
      testing::logits_with(t.config(), testing::parameters_of(t.session()), o.lora);
  const HfModel merged = load_hf_model(o.save);
  CausalLmOptions lo;
  lo.sequence = 16;
  CausalLm plain = build_causal_lm(merged.config, lo);
  auto s = build_session(*plain.graph);
  load_weights(*s, merged);
  s->set("input_ids", testing::probe_ids());
  s->step();
  // W + (alpha/r)·B·A is rounded to f32 once more in the merged weights (measured: 1.3e-5).
  EXPECT_TRUE(testing::elementwise_near(s->get("logits"), adapted, 5e-5));
  // And the adapters changed the model: the base model's logits differ.
  const HfModel base = load_hf_model(lm_fixture("llama_tied"));
  load_weights(*s, base);
  s->step();
  EXPECT_FALSE(testing::elementwise_near(s->get("logits"), adapted, 1e-4));
}

TEST(Finetune, SavedModelLoadsToTheTrainedLogits) {
  ScratchDir dir("save");
  FinetuneOptions o = testing::small_options(lm_fixture("qwen2_tiny"),
                                             dir.write("t.txt", testing::training_text()));
  o.save = dir.path() / "out";
  Finetuner t(o);
  t.run();
  const Array trained = testing::logits_with(t.config(), testing::parameters_of(t.session()));
  const HfModel saved = load_hf_model(o.save);
  EXPECT_TRUE(std::filesystem::exists(o.save / "tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(o.save / "generation_config.json"));
  CausalLmOptions lo;
  lo.sequence = 16;
  CausalLm plain = build_causal_lm(saved.config, lo);
  auto s = build_session(*plain.graph);
  load_weights(*s, saved);
  s->set("input_ids", testing::probe_ids());
  s->step();
  EXPECT_EQ(s->get("logits").data, trained.data);
}

// 2N updates in one run equal N, a checkpoint, and N more in a new run: across an epoch
// boundary, with accumulation and a cosine schedule.
void expect_resume_exact(FinetuneOptions o, const ScratchDir& dir) {
  o.steps = 6;
  o.optimizer.accumulate = 2;
  o.optimizer.schedule.kind = LrSchedule::Kind::cosine;
  o.optimizer.schedule.warmup = 2;
  const FinetuneResult whole = Finetuner(o).run();
  FinetuneOptions first = o;
  first.checkpoint = dir.path() / "ck.safetensors";
  first.checkpoint_every = 3;
  Finetuner a(first);
  std::vector<double> losses;
  for (int i = 0; i < 3; ++i) losses.push_back(a.step());
  a.save_checkpoint(first.checkpoint);
  FinetuneOptions second = o;
  second.resume = first.checkpoint;
  const FinetuneResult rest = Finetuner(second).run();
  losses.insert(losses.end(), rest.losses.begin(), rest.losses.end());
  EXPECT_EQ(rest.steps, 6);
  EXPECT_EQ(losses, whole.losses);
}

TEST(Finetune, ResumeIsExactFull) {
  ScratchDir dir("resume_full");
  expect_resume_exact(testing::small_options(lm_fixture("llama_tied"),
                                             dir.write("t.txt", testing::training_text())),
                      dir);
}

TEST(Finetune, ResumeIsExactFullBf16) {
  ScratchDir dir("resume_bf16");
  FinetuneOptions o = testing::small_options(lm_fixture("qwen2_tiny"),
                                             dir.write("t.txt", testing::training_text()));
  o.dtype = DType::bf16;
  expect_resume_exact(o, dir);
}

// Two micro-batches of one example accumulated make the update one batch of both makes (every
// example full, so each micro-batch's mean is over as many tokens).
TEST(Finetune, AccumulationEqualsTheLargerBatch) {
  ScratchDir dir("accumulate");
  std::string lines;
  for (int i = 0; i < 4; ++i)
    lines +=
        "{\"text\": \"line " + std::to_string(i) + " of text long enough to fill a window\"}\n";
  FinetuneOptions o = testing::small_options(lm_fixture("llama_tied"), {});
  o.text.clear();
  o.jsonl = dir.write("d.jsonl", lines);
  o.sequence = 8;
  o.optimizer = Optimizer::sgd({.lr = 0.1, .momentum = 0.9});
  Finetuner big(o);
  o.batch = 1;
  o.optimizer.accumulate = 2;
  Finetuner acc(o);
  for (int64_t i = 0; i < big.examples().count() * o.sequence; ++i)
    ASSERT_NE(big.examples().labels[static_cast<size_t>(i)], kIgnoreLabel);
  EXPECT_NEAR(big.step(), acc.step(), 1e-6);
  for (const std::string& n : big.trained_parameters()) {
    EXPECT_TRUE(testing::elementwise_near(acc.session().get(n), big.session().get(n), 1e-6)) << n;
  }
}

TEST(Finetune, ResumeIsExactLoraBf16) {
  ScratchDir dir("resume_lora");
  FinetuneOptions o = lora_options(dir, "qwen3_tiny");
  o.dtype = DType::bf16;
  expect_resume_exact(o, dir);
}

// --checkpoint-every: by the third update the file holds the second's state.
TEST(Finetune, CheckpointEveryWritesOnTheWay) {
  ScratchDir dir("every");
  FinetuneOptions o = testing::small_options(lm_fixture("llama_tied"),
                                             dir.write("t.txt", testing::training_text()));
  o.steps = 4;
  o.checkpoint = dir.path() / "ck.safetensors";
  o.checkpoint_every = 2;
  std::vector<std::string> seen;
  o.on_progress = [&](const FinetuneOptions::Progress& p) {
    if (std::filesystem::exists(o.checkpoint))
      seen.push_back(std::to_string(p.step) + ":" +
                     SafetensorsReader(o.checkpoint).metadata().at("global_step"));
  };
  Finetuner(o).run();
  EXPECT_EQ(seen, (std::vector<std::string>{"3:2", "4:2"}));
  EXPECT_EQ(SafetensorsReader(o.checkpoint).metadata().at("global_step"), "4");
}

TEST(Finetune, ResumeMismatchNamesTheField) {
  ScratchDir dir("mismatch");
  FinetuneOptions o = lora_options(dir, "llama_tied");
  o.steps = 1;
  o.checkpoint = dir.path() / "ck.safetensors";
  Finetuner(o).run();
  struct Case {
    std::function<void(FinetuneOptions&)> change;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](FinetuneOptions& x) { x.lora.rank = 2; }, "'lora_rank' is '4' in the checkpoint but '2'"},
      {[](FinetuneOptions& x) { x.sequence = 12; }, "'seq' is '16' in the checkpoint but '12'"},
      {[](FinetuneOptions& x) { x.batch = 1; }, "'batch' is '2' in the checkpoint but '1'"},
      {[](FinetuneOptions& x) { x.dtype = DType::bf16; },
       "'dtype' is 'f32' in the checkpoint but 'bf16'"},
      {[](FinetuneOptions& x) { x.optimizer.kind = Optimizer::Kind::adam; },
       "'optimizer' is 'adamw' in the checkpoint but 'adam'"},
      {[](FinetuneOptions& x) { x.model_dir = lm_fixture("qwen3_tiny"); },
       "'model' is 'LlamaForCausalLM"},
  };
  for (const Case& c : cases) {
    FinetuneOptions r = o;
    r.checkpoint.clear();
    r.resume = o.checkpoint;
    c.change(r);
    const std::string msg = error_of([&] { Finetuner t(r); });
    EXPECT_NE(msg.find(o.checkpoint.string() + ": cannot resume: " + c.expect), std::string::npos)
        << msg;
  }
  // Other data (the same number of examples): the position would mean other examples.
  FinetuneOptions other = o;
  other.checkpoint.clear();
  other.resume = o.checkpoint;
  std::string changed = testing::training_text();
  changed[4] = 'Q';
  other.text = dir.write("other.txt", changed);
  const std::string msg = error_of([&] { Finetuner t(other); });
  EXPECT_NE(msg.find("cannot resume: 'data' is '"), std::string::npos) << msg;
  // Not a fine-tuning checkpoint at all: the format is named.
  FinetuneOptions r = o;
  r.resume = lm_fixture("llama_tied") / "model.safetensors";
  EXPECT_NE(error_of([&] { Finetuner t(r); }).find("not a meganeura fine-tuning checkpoint"),
            std::string::npos);
}

// A tokenizer whose ids reach past the embedding table is refused before any step.
TEST(Finetune, TokenIdsOutsideTheVocabulary) {
  ScratchDir dir("vocab");
  const auto model = dir.path() / "model";
  std::filesystem::copy(lm_fixture("llama_tied"), model);
  std::filesystem::remove(model / "tokenizer_config.json");
  std::filesystem::copy_file(
      std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/lm/tokenizers/features/tokenizer.json",
      model / "tokenizer.json", std::filesystem::copy_options::overwrite_existing);
  const auto text = dir.write("t.txt", "a cat is not a dog, but a [MASK] is a mask\n");
  const std::string msg = error_of([&] { Finetuner t(testing::small_options(model, text)); });
  EXPECT_NE(msg.find(text.string() + ": token id 70"), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the model's vocabulary of 700"), std::string::npos) << msg;
}

TEST(Finetune, BadOptionsNamed) {
  ScratchDir dir("options");
  const FinetuneOptions base = testing::small_options(lm_fixture("llama_tied"),
                                                      dir.write("t.txt", testing::training_text()));
  const auto blocker = dir.write("file", "x");
  struct Case {
    std::function<void(FinetuneOptions&)> change;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](FinetuneOptions& x) { x.sequence = 1; }, "--seq must be at least 2"},
      {[](FinetuneOptions& x) { x.lora.rank = -2; }, "--lora-rank must be positive, got -2"},
      {[](FinetuneOptions& x) {
         x.lora.rank = 2;
         x.lora.targets = {"q_proj", "qkv_proj"};
       },
       "unknown LoRA target 'qkv_proj'"},
      {[](FinetuneOptions& x) { x.merge_lora = true; }, "--merge-lora needs --lora-rank"},
      {[&](FinetuneOptions& x) { x.save = blocker / "out"; },
       "--save " + (blocker / "out").string() + " cannot be written: " + blocker.string() +
           " is not a directory"},
      {[&](FinetuneOptions& x) { x.save = blocker; }, "exists and is not a directory"},
      {[&](FinetuneOptions& x) { x.checkpoint = dir.path(); },
       "--checkpoint " + dir.path().string() + " exists and is a directory"},
      {[&](FinetuneOptions& x) { x.text = dir.path() / "missing.txt"; },
       (dir.path() / "missing.txt").string() + ": cannot open"},
      {[&](FinetuneOptions& x) { x.jsonl = dir.path() / "d.jsonl"; }, "exactly one data file"},
      {[&](FinetuneOptions& x) { x.model_dir = dir.path(); }, "config.json"},
      {[](FinetuneOptions& x) { x.optimizer.accumulate = 0; },
       "--accumulate must be positive, got 0"},
      {[](FinetuneOptions& x) { x.optimizer.lr = 0; }, "--lr must be positive"},
  };
  for (const Case& c : cases) {
    FinetuneOptions o = base;
    c.change(o);
    const std::string msg = error_of([&] { Finetuner t(o); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.expect << " -> " << msg;
  }
}

}  // namespace
}  // namespace mn
