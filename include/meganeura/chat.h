#pragma once
// A conversation with a chat model that keeps its KV cache across turns: each turn runs only
// the tokens that are new since the last reply.
#include <cstdint>
#include <string>
#include <vector>

#include <meganeura/generate.h>
#include <meganeura/tokenizer.h>

namespace mn {

// The text of generated ids: special tokens skipped, and ids past the tokenizer's vocabulary
// (models pad their embedding beyond it) decoding to nothing, as Hugging Face's decode does.
std::string generated_text(const Tokenizer& tokenizer, std::span<const int32_t> ids);

class Conversation {
 public:
  // `model` must have batch 1 and outlive the conversation.
  Conversation(TokenModel& model, Tokenizer tokenizer, std::string system = {});

  // Adds the user's message, generates the reply (its text streamed to callbacks.on_text, when
  // given) and adds it to the conversation. When the context cannot hold the whole
  // conversation plus max_new_tokens, throws mn::Error and leaves the conversation unchanged.
  GeneratedSequence reply(const std::string& user, const SamplingOptions& sampling,
                          const StopOptions& stop, const GenerateCallbacks& callbacks = {});
  // Forgets the turns (the system message stays).
  void reset();

  const std::vector<ChatMessage>& messages() const { return messages_; }
  // Tokens in the cache, and how many of the last turn were new (the rest were reused).
  int64_t cached_tokens() const { return cached_; }
  int64_t last_turn_new_tokens() const { return last_new_; }

 private:
  struct Turn {
    std::vector<int32_t> tokens;  // to run through the model
    int64_t start = 0;            // the cache position of the first
  };
  Turn new_turn(const std::vector<ChatMessage>& next) const;

  TokenModel& model_;
  Tokenizer tokenizer_;
  std::vector<ChatMessage> messages_;
  int64_t cached_ = 0;  // tokens whose keys and values are in the cache
  // The text those tokens (plus pending_) spell, as the chat template wrote it.
  std::string cached_text_;
  std::vector<int32_t> pending_;  // sampled but not yet run through the model
  int64_t last_new_ = 0;
};

}  // namespace mn
