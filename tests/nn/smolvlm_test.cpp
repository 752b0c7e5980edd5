// SmolVLM against transformers (tests/fixtures/smolvlm/make_smolvlm_fixture.py: a tiny random
// SmolVLMForConditionalGeneration, its image processor and a chat prompt with an image): the
// frames are the processor's pixels, the prompt its layout and tokens, the image features, the
// prefill logits and the greedy continuation transformers' own; bad files, inputs and prompts
// say what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include <meganeura/data.h>
#include <meganeura/error.h>
#include <meganeura/optimizer.h>
#include <meganeura/session.h>
#include <meganeura/tokenizer.h>
#include <meganeura/vlm.h>

#include "support/expect_error.h"
#include "support/random_fill.h"
#include "support/tensor_cores.h"

namespace mn {
namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(MN_SOURCE_DIR) / "tests/fixtures/smolvlm" / name;
}

const std::map<std::string, Array>& reference() {
  static const auto r = load_safetensors(fixture("reference.safetensors"));
  return r;
}

nlohmann::json reference_json() {
  std::ifstream in(fixture("reference.json"));
  return nlohmann::json::parse(in);
}

std::vector<int32_t> ints(const Array& a, size_t from = 0) {
  return {a.data.begin() + static_cast<std::ptrdiff_t>(from), a.data.end()};
}

double max_abs_diff(const Array& a, const Array& b) {
  EXPECT_EQ(a.shape, b.shape);
  double m = 0;
  for (size_t i = 0; i < std::min(a.data.size(), b.data.size()); ++i)
    m = std::max(m, std::abs(a.data[i] - b.data[i]));
  return m;
}

TEST(SmolVlm, FramesAreTheProcessorsPixels) {
  const SmolVlmModel model = load_smolvlm(fixture("model"));
  EXPECT_EQ(model.processor.longest_edge, 96);
  EXPECT_EQ(model.processor.max_image_size, 32);
  for (const std::string name : {"wide", "tall"}) {
    SCOPED_TRACE(name);
    const SmolVlmImage im = smolvlm_preprocess(read_image(fixture(name + ".png")), model.processor);
    const Array& rows_cols = reference().at("rows_cols_" + name);
    EXPECT_EQ(im.rows, rows_cols.data[0]);
    EXPECT_EQ(im.cols, rows_cols.data[1]);
    // Both resize through PIL's fixed-point LANCZOS: the same bytes, so the same floats.
    EXPECT_LT(max_abs_diff(im.pixel_values, reference().at("pixels_" + name)), 1e-6);
  }
}

TEST(SmolVlm, PromptIsTheProcessorsLayoutAndTokens) {
  const SmolVlmModel model = load_smolvlm(fixture("model"));
  const nlohmann::json ref = reference_json();
  const std::string text = ref["messages"][0]["content"][1]["text"];
  const std::string prompt = smolvlm_chat_prompt(text, true);
  EXPECT_EQ(prompt, ref["prompt"].get<std::string>());
  const SmolVlmImage im = smolvlm_preprocess(read_image(fixture("wide.png")), model.processor);
  EXPECT_EQ(model.config.image_seq_len(), ref["image_seq_len"].get<int64_t>());
  const std::string expanded = expand_image_tokens(prompt, {im}, model.config.image_seq_len());
  EXPECT_EQ(expanded, ref["expanded"].get<std::string>());
  const Tokenizer tok = Tokenizer::from_dir(fixture("model"));
  EXPECT_EQ(tok.encode(expanded), ints(reference().at("input_ids")));
  EXPECT_EQ(model.config.image_token_id, ref["image_token_id"].get<int64_t>());
}

TEST(SmolVlm, ImageFeaturesMatchTransformers) {
  const SmolVlmModel model = load_smolvlm(fixture("model"));
  const Array& pixels = reference().at("pixels_wide");
  Graph g;
  g.output("features", smolvlm_image_features(model.config, g.input("pixels", pixels.shape)));
  auto s = build_session(g);
  HfModel vision = model.files;  // only the tensors this graph has
  for (auto it = vision.tensors.begin(); it != vision.tensors.end();) {
    it = it->first.rfind("model.vision_model.", 0) == 0 || it->first.rfind("model.connector.", 0) == 0
             ? std::next(it)
             : vision.tensors.erase(it);
  }
  load_weights(*s, vision);
  s->set("pixels", pixels);
  s->step();
  EXPECT_LT(testing::scaled_error(s->get("features"), reference().at("features")), 1e-4);
}

// The prompt's last logits and the greedy continuation, with the prompt prefilled in one block
// or in several (the image tokens' features then come over several calls), decoded in chains
// or one step at a time.
TEST(SmolVlm, PrefillLogitsAndGreedyMatchTransformers) {
  const SmolVlmModel model = load_smolvlm(fixture("model"));
  const SmolVlmImage im = smolvlm_preprocess(read_image(fixture("wide.png")), model.processor);
  const std::vector<int32_t> prompt = ints(reference().at("input_ids"));
  const Array& greedy = reference().at("greedy");
  const std::vector<int32_t> want = ints(greedy, prompt.size());
  const Array& logits = reference().at("logits");
  const int64_t vocab = logits.shape[2], p = static_cast<int64_t>(prompt.size());
  Array last({1, vocab}, DType::f32);
  std::copy_n(logits.data.begin() + (p - 1) * vocab, vocab, last.data.begin());
  // Decoding in chains of 2 steps for one block (the 8 tokens of the continuation leave 7
  // decode steps, fewer than the default chain's 8), one step at a time for the other.
  for (const auto& [block, chain] :
       {std::pair{p, int64_t{2}}, std::pair{int64_t{16}, int64_t{1}}}) {
    SCOPED_TRACE("prefill block " + std::to_string(block) + ", decode chain " +
                 std::to_string(chain));
    VlmRunnerOptions o;
    o.lm.max_context = 128;
    o.lm.prefill_block = block;
    o.lm.decode_chain = chain;
    o.frames_per_call = 3;  // 7 frames: two full calls and one with padding frames
    auto runner = VlmRunner::create(model, o);
    runner->set_image(0, im);
    StopOptions stop;
    stop.max_new_tokens = static_cast<int64_t>(want.size());
    const auto out = generate(*runner, {prompt}, SamplingOptions{}, stop);
    EXPECT_EQ(out[0].tokens, want);
    EXPECT_EQ(runner->chain_length(), chain == 1 ? 0 : chain);
    // On tensor cores the prompt's attention multiplies f16 operands (docs/tensor-cores.md):
    // 8.1e-4 measured on an H200.
    const double tol = testing::sessions_use_tensor_cores() ? 2e-3 : 1e-4;
    if (block == p) EXPECT_LT(testing::scaled_error(runner->logits("prefill"), last), tol);
  }
}

// The training step: the loss with the prompt as labels (image tokens ignored) and the
// gradients of parameters in every part (patch embedding, positions, attention, MLP, final
// norm, connector, token embeddings, decoder layers, head) against make_training_fixture.py's
// float64 re-implementation (which reproduces transformers' features and logits within 1e-6).
TEST(SmolVlm, TrainingLossAndGradientsMatchTheReference) {
  const SmolVlmModel model = load_smolvlm(fixture("model"));
  const Array& ids = reference().at("input_ids");
  const Array& pixels = reference().at("pixels_wide");
  SmolVlmTrainingOptions o;
  o.sequence = ids.shape[1];
  o.frames = pixels.shape[0];
  CausalLm m = build_smolvlm_training(model.config, o);
  add_training_step(m.loss, Optimizer::sgd(), {}, true);
  auto s = build_session(*m.graph);
  load_weights(*s, model.files);
  Array labels = ids;
  for (double& v : labels.data) {
    if (v == static_cast<double>(model.config.image_token_id)) v = -100;
  }
  const std::vector<int64_t> frames{o.frames};
  s->set("pixel_values", pixels);
  s->set("input_ids", ids);
  s->set("labels", labels);
  s->set("image_rows", smolvlm_image_rows(ids, model.config, frames));
  s->set_scalar(StepInputs::lr, 0.0);
  s->set_scalar(StepInputs::step, 1.0);
  s->step();
  const auto training = load_safetensors(fixture("training.safetensors"));
  EXPECT_NEAR(s->get("loss").data[0], training.at("loss").data[0], 1e-4);
  int compared = 0;
  for (const auto& [key, want] : training) {
    if (key.rfind("grad.", 0) != 0) continue;
    const std::string name = key.substr(5);
    EXPECT_LT(testing::scaled_error(s->get("grad/" + name), want), 2e-3) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 11);
  // The image tokens must be the frames' tokens.
  expect_error<Error>([&] { smolvlm_image_rows(ids, model.config, std::vector<int64_t>{2}); },
                      {"sequence 0 has 28 <image> tokens", "2 frames make 8"});
}

TEST(SmolVlm, RunnerRefusesWhatDoesNotFit) {
  const SmolVlmModel model = load_smolvlm(fixture("model"));
  const SmolVlmImage im = smolvlm_preprocess(read_image(fixture("wide.png")), model.processor);
  VlmRunnerOptions o;
  o.lm.max_context = 64;
  o.lm.prefill_block = 16;
  o.max_image_tokens = 8;  // two frames
  auto runner = VlmRunner::create(model, o);
  expect_error<Error>([&] { runner->set_image(0, im); },
                               {"7 frames make 28 image tokens", "holds 8", "max_image_tokens"});
  expect_error<Error>([&] { runner->set_image(1, im); }, {"sequence 1", "batch of 1"});
  SmolVlmImage small;
  small.pixel_values = Array({1, 3, 16, 16}, DType::f32);
  expect_error<ShapeError>([&] { runner->set_image(0, small); },
                                    {"[F, 3, 32, 32]", "image_size"});
  // One frame set, a prompt with more <image> tokens than its 4 features.
  SmolVlmImage one;
  one.pixel_values = Array({1, 3, 32, 32}, DType::f32);
  runner->set_image(0, one);
  const auto id = static_cast<int32_t>(model.config.image_token_id);
  StopOptions stop;
  stop.max_new_tokens = 1;
  expect_error<Error>(
      [&] { generate(*runner, {{5, id, id, id, id, id, 7}}, SamplingOptions{}, stop); },
      {"more <image> tokens than the 4 image features"});
  expect_error<Error>([&] { VlmRunner::create(model, {.frames_per_call = 0}); },
                               {"frames_per_call must be at least 1"});
}

std::string config_text() {
  std::ifstream in(fixture("model/config.json"));
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(SmolVlm, BadConfigsNameTheField) {
  auto with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(config_text());
    edit(j);
    return j.dump();
  };
  auto refused = [](const std::string& text, std::initializer_list<const char*> fragments) {
    expect_error<FormatError>([&] { parse_smolvlm_config(text, "m/config.json"); }, fragments);
  };
  refused(with([](auto& j) { j["architectures"] = {"LlavaForConditionalGeneration"}; }),
          {"m/config.json", "architectures", "LlavaForConditionalGeneration",
           "SmolVLMForConditionalGeneration"});
  refused(with([](auto& j) { j.erase("text_config"); }), {"text_config", "missing"});
  refused(with([](auto& j) { j["text_config"]["model_type"] = "mistral"; }),
          {"text_config.model_type", "mistral"});
  refused(with([](auto& j) { j["text_config"].erase("hidden_size"); }),
          {"text_config.hidden_size", "missing"});
  refused(with([](auto& j) { j["scale_factor"] = 3; }), {"scale_factor", "4 patches per side"});
  refused(with([](auto& j) { j["image_token_id"] = 1 << 20; }), {"image_token_id", "vocabulary"});
  refused(with([](auto& j) { j["vision_config"]["patch_size"] = 7; }),
          {"vision_config.patch_size", "image_size"});
  refused(with([](auto& j) { j["vision_config"]["hidden_act"] = "relu"; }),
          {"vision_config.hidden_act", "relu"});
  expect_error<FormatError>(
      [] { parse_smolvlm_image_processor(R"({"resample": 3})", "p.json"); },
      {"p.json", "resample", "LANCZOS"});
  expect_error<FormatError>(
      [] { parse_smolvlm_image_processor(R"({"size": {"height": 5, "width": 5}})", "p.json"); },
      {"size.longest_edge", "missing"});
  expect_error<Error>(
      [] { expand_image_tokens("<image> and <image>", {SmolVlmImage{}}, 4); },
      {"more <image> placeholders than the 1 images"});
}

TEST(SmolVlm, MissingAndMisshapenWeightsAreErrors) {
  const auto dir = std::filesystem::temp_directory_path() / "mn_smolvlm_bad";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "preprocessor_config.json"})
    std::filesystem::copy_file(fixture("model") / f, dir / f);
  auto weights = load_safetensors(fixture("model/model.safetensors"));
  weights.erase("model.connector.modality_projection.proj.weight");
  save_safetensors(dir / "model.safetensors", weights);
  expect_error<FormatError>([&] { load_smolvlm(dir); },
                                     {"missing tensor 'model.connector.modality_projection.proj.weight'"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mn
