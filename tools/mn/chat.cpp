// `mn chat`: an interactive conversation with a chat model; the KV cache is kept across turns.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include <meganeura/chat.h>

#include "commands.h"
#include "lm_options.h"

namespace mn::cli {

namespace {

struct ChatArgs {
  LmArgs lm;
  std::string system;
};

void run_chat(const ChatArgs& a) {
  const HfModel model = load_hf_model(a.lm.model_dir);
  const Tokenizer tok = Tokenizer::from_dir(a.lm.model_dir);
  const SamplingOptions sampling = sampling_options(a.lm, model.generation);
  auto runner = LmRunner::create(model, runner_options(a.lm, 1));
  // A reply may take at most half the context by default, leaving room for the conversation.
  const StopOptions stop = stop_options(a.lm, model.generation, tok, runner->max_context() / 2);
  Conversation chat(*runner, tok, a.system);

  const bool terminal = isatty(fileno(stdin)) != 0;
  if (terminal) {
    std::fprintf(stderr, "chatting with %s on %s; /reset starts over, /exit or Ctrl-D ends\n",
                 a.lm.model_dir.c_str(), runner->device_name().c_str());
  }
  GenerateCallbacks cb;
  cb.on_text = [](int64_t, std::string_view text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  std::string line;
  while (true) {
    if (terminal) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      chat.reset();
      continue;
    }
    if (line.empty()) continue;
    try {
      chat.reply(line, sampling, stop, cb);
      std::printf("\n");
      std::fflush(stdout);
    } catch (const Error& e) {
      // A turn that does not fit leaves the conversation as it was; the user may /reset.
      std::fprintf(stderr, "mn chat: %s\n", e.what());
    }
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand(
      "chat", "talk with a Hugging Face chat model (one message per line on standard input)");
  add_lm_options(*cmd, a->lm);
  cmd->add_option("--system", a->system, "system message");
  cmd->callback([a] { run_chat(*a); });
}

}  // namespace mn::cli
