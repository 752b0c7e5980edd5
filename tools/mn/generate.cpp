// `mn generate`: text from a Hugging Face causal LM, printed as it is generated.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include <meganeura/chat.h>
#include <meganeura/image.h>
#include <meganeura/vlm.h>

#include "commands.h"
#include "lm_options.h"

namespace mn::cli {

namespace {

struct GenerateArgs {
  LmArgs lm;
  std::vector<std::string> prompts;
  bool chat = false;
  std::string system;
  bool json = false;
  std::vector<std::string> images;  // one per prompt (SmolVLM)
  // Image frames the vision encoder takes per submission (SmolVLM); unset: 4.
  std::optional<int64_t> frames_per_call;
};

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const GenerateArgs& a,
                                   const std::string& prompt) {
  if (!a.chat) return tok.encode(prompt);
  std::vector<ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  messages.push_back({"user", prompt});
  return tok.encode_chat(messages, true);
}

// Generates after the prompts and prints the texts (one prompt streams its text) and, with
// --json, the timings.
void generate_and_print(const GenerateArgs& a, TokenModel& model, const Tokenizer& tok,
                        const GenerationConfig& generation,
                        const std::vector<std::vector<int32_t>>& prompts, const std::string& device,
                        const LmRunner::BuildTimes& build, const MemorySummary& memory) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const auto batch = static_cast<int64_t>(prompts.size());
  const SamplingOptions sampling = sampling_options(a.lm, generation);
  const StopOptions stop = stop_options(a.lm, generation, tok,
                                        model.max_context() - static_cast<int64_t>(longest) + 1);
  GenerateCallbacks cb;
  cb.decode = [&tok](std::span<const int32_t> ids) { return generated_text(tok, ids); };
  if (batch == 1) {
    cb.on_text = [](int64_t, std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  GenerateStats stats;
  const auto out = generate(model, prompts, sampling, stop, cb, {}, &stats);
  if (batch == 1) {
    std::printf("\n");
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      std::printf("--- %zu: %s\n%s\n", i, a.prompts[i].c_str(), out[i].text.c_str());
    }
  }
  if (!a.json) return;
  const double per_token =
      stats.decode_steps > 0 ? stats.decode_ms / static_cast<double>(stats.decode_steps) : 0.0;
  nlohmann::json finish = nlohmann::json::array();
  for (const auto& s : out) finish.push_back(finish_reason_name(s.finish));
  nlohmann::json j = {{"prompt_tokens", stats.prompt_tokens},
                      {"generated_tokens", stats.generated_tokens},
                      {"prefill_ms", stats.prefill_ms},
                      {"ms_per_token", per_token},
                      {"tokens_per_second", per_token > 0 ? 1e3 / per_token : 0.0},
                      {"batch", batch},
                      {"finish", finish},
                      {"build_seconds", build.total()},
                      {"build_graphs_seconds", build.graphs},
                      {"build_session_seconds", build.session},
                      {"load_weights_seconds", build.weights},
                      {"arena_mib", static_cast<double>(memory.arena_bytes) / (1 << 20)},
                      {"kv_dtype", a.lm.kv_dtype},
                      {"device", device}};
  std::cout << j.dump() << std::endl;
}

void check_prompts(const GenerateArgs& a) {
  if (a.prompts.empty()) throw Error("mn generate: give a --prompt");
  for (const std::string& p : a.prompts) {
    if (p.empty()) throw Error("mn generate: a --prompt is empty");
  }
}

void run_text_model(const GenerateArgs& a) {
  for (const char* option : {"--image", "--frames-per-call"}) {
    if (std::string(option) == "--image" ? !a.images.empty() : a.frames_per_call.has_value()) {
      throw Error(std::string("mn generate: ") + option +
                  " needs a vision-language model (SmolVLM); " + a.lm.model_dir +
                  "/config.json names a text model");
    }
  }
  const HfModel model = load_hf_model(a.lm.model_dir);
  const Tokenizer tok = Tokenizer::from_dir(a.lm.model_dir);
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : a.prompts) prompts.push_back(encode_prompt(tok, a, p));
  auto runner = LmRunner::create(model, runner_options(a.lm, static_cast<int64_t>(prompts.size())));
  generate_and_print(a, *runner, tok, model.generation, prompts, runner->device_name(),
                     runner->build_times(), runner->memory());
}

// SmolVLM: each prompt with its image (--image once per prompt, or none), laid out as the
// processor does: every <image> becomes the frames' tokens.
void run_vision_model(const GenerateArgs& a) {
  if (!a.images.empty() && a.images.size() != a.prompts.size()) {
    throw Error("mn generate: " + std::to_string(a.images.size()) + " --image for " +
                std::to_string(a.prompts.size()) + " --prompt (give one image per prompt)");
  }
  if (!a.lm.adapter.empty()) throw Error("mn generate: --adapter is not supported for SmolVLM");
  const SmolVlmModel model = load_smolvlm(a.lm.model_dir);
  const Tokenizer tok = Tokenizer::from_dir(a.lm.model_dir);
  std::vector<SmolVlmImage> images;
  for (const std::string& path : a.images)
    images.push_back(smolvlm_preprocess(read_image(path), model.processor));
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    const bool with_image = !images.empty();
    std::string text = a.chat ? smolvlm_chat_prompt(a.prompts[i], with_image, a.system) : a.prompts[i];
    // A plain prompt gets its image in front unless it places it with "<image>".
    if (with_image && !a.chat && text.find("<image>") == std::string::npos) text = "<image>" + text;
    std::vector<SmolVlmImage> mine;
    if (with_image) mine.push_back(images[i]);
    prompts.push_back(tok.encode(expand_image_tokens(text, mine, model.config.image_seq_len())));
  }
  VlmRunnerOptions o;
  o.lm = runner_options(a.lm, static_cast<int64_t>(prompts.size()));
  o.frames_per_call = a.frames_per_call.value_or(4);
  auto runner = VlmRunner::create(model, o);
  for (size_t i = 0; i < images.size(); ++i) runner->set_image(static_cast<int64_t>(i), images[i]);
  generate_and_print(a, *runner, tok, model.files.generation, prompts, runner->device_name(),
                     runner->build_times(), runner->memory());
}

void run_generate(const GenerateArgs& a) {
  check_prompts(a);
  if (a.frames_per_call && *a.frames_per_call < 1) {
    throw Error("mn generate: --frames-per-call must be at least 1 (got " +
                std::to_string(*a.frames_per_call) + ")");
  }
  if (is_smolvlm_dir(a.lm.model_dir)) {
    run_vision_model(a);
  } else {
    run_text_model(a);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "generate text with a Hugging Face causal LM or SmolVLM");
  add_lm_options(*cmd, a->lm);
  cmd->add_option("--prompt", a->prompts, "the text to continue (repeat for a batch)")->required();
  cmd->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template as a user turn");
  cmd->add_option("--system", a->system, "system message (with --chat)");
  cmd->add_flag("--json", a->json, "print one JSON object with timings as the last line");
  cmd->add_option("--image", a->images,
                  "a PNG or JPEG for a vision-language model (SmolVLM), one per --prompt; it "
                  "goes where the prompt says <image>, else in front");
  cmd->add_option("--frames-per-call", a->frames_per_call,
                  "image frames the vision encoder takes per submission (SmolVLM)");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace mn::cli
