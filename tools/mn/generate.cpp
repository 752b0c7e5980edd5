// `mn generate`: text from a Hugging Face causal LM, printed as it is generated.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include <meganeura/chat.h>

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
};

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const GenerateArgs& a,
                                   const std::string& prompt) {
  if (!a.chat) return tok.encode(prompt);
  std::vector<ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  messages.push_back({"user", prompt});
  return tok.encode_chat(messages, true);
}

void run_generate(const GenerateArgs& a) {
  if (a.prompts.empty()) throw Error("mn generate: give a --prompt");
  const HfModel model = load_hf_model(a.lm.model_dir);
  const Tokenizer tok = Tokenizer::from_dir(a.lm.model_dir);
  const SamplingOptions sampling = sampling_options(a.lm, model.generation);
  std::vector<std::vector<int32_t>> prompts;
  size_t longest = 0;
  for (const std::string& p : a.prompts) {
    if (p.empty()) throw Error("mn generate: a --prompt is empty");
    prompts.push_back(encode_prompt(tok, a, p));
    longest = std::max(longest, prompts.back().size());
  }
  const auto batch = static_cast<int64_t>(prompts.size());
  auto runner = LmRunner::create(model, runner_options(a.lm, batch));
  const StopOptions stop = stop_options(a.lm, model.generation, tok,
                                        runner->max_context() - static_cast<int64_t>(longest) + 1);

  GenerateCallbacks cb;
  cb.decode = [&tok](std::span<const int32_t> ids) { return generated_text(tok, ids); };
  // One prompt streams its text; several print theirs when all are done.
  if (batch == 1) {
    cb.on_text = [](int64_t, std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  GenerateStats stats;
  const auto out = generate(*runner, prompts, sampling, stop, cb, {}, &stats);
  if (batch == 1) {
    std::printf("\n");
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      std::printf("--- %zu: %s\n%s\n", i, a.prompts[i].c_str(), out[i].text.c_str());
    }
  }
  if (a.json) {
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
                        {"build_seconds", runner->build_seconds()},
                        {"build_graphs_seconds", runner->build_times().graphs},
                        {"build_session_seconds", runner->build_times().session},
                        {"load_weights_seconds", runner->build_times().weights},
                        {"device", runner->device_name()}};
    std::cout << j.dump() << std::endl;
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "generate text with a Hugging Face causal LM");
  add_lm_options(*cmd, a->lm);
  cmd->add_option("--prompt", a->prompts, "the text to continue (repeat for a batch)")->required();
  cmd->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template as a user turn");
  cmd->add_option("--system", a->system, "system message (with --chat)");
  cmd->add_flag("--json", a->json, "print one JSON object with timings as the last line");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace mn::cli
