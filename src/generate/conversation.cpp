#include <meganeura/chat.h>

#include <algorithm>

namespace mn {

std::string generated_text(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  const int32_t vocab = tokenizer.vocab_size();
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab) known.push_back(id);
  }
  return tokenizer.decode(known, true);
}

Conversation::Conversation(TokenModel& model, Tokenizer tokenizer, std::string system)
    : model_(model), tokenizer_(std::move(tokenizer)) {
  if (model.batch() != 1) {
    throw Error("Conversation: the model must have batch 1 (has " +
                std::to_string(model.batch()) + ")");
  }
  if (!system.empty()) messages_.push_back({"system", std::move(system)});
  // The template must be one we can format; fail before the first turn.
  tokenizer_.format_chat(messages_, true);
}

void Conversation::reset() {
  if (!messages_.empty() && messages_.front().role == "system") {
    messages_.resize(1);
  } else {
    messages_.clear();
  }
  cached_ = 0;
  cached_text_.clear();
  pending_.clear();
}

// The template's text for the conversation so far begins with the text already in the cache
// (ChatML and Llama 3 templates only ever append), so a turn encodes only what follows it. When
// it does not (a template that rewrites earlier turns), the whole conversation runs again.
Conversation::Turn Conversation::new_turn(const std::vector<ChatMessage>& next) const {
  const std::string full = tokenizer_.format_chat(next, true);
  if (cached_ > 0 && full.starts_with(cached_text_)) {
    Turn t{pending_, cached_};
    const std::vector<int32_t> rest =
        tokenizer_.encode(std::string_view(full).substr(cached_text_.size()), false);
    t.tokens.insert(t.tokens.end(), rest.begin(), rest.end());
    return t;
  }
  return {tokenizer_.encode(full, false), 0};
}

GeneratedSequence Conversation::reply(const std::string& user, const SamplingOptions& sampling,
                                      const StopOptions& stop, const GenerateCallbacks& callbacks) {
  std::vector<ChatMessage> next = messages_;
  next.push_back({"user", user});
  const auto [turn, start] = new_turn(next);
  if (start + static_cast<int64_t>(turn.size()) + stop.max_new_tokens - 1 > model_.max_context()) {
    throw Error("chat: the conversation (" + std::to_string(start + turn.size()) +
                " tokens) plus " + std::to_string(stop.max_new_tokens) +
                " new tokens exceeds the context of " + std::to_string(model_.max_context()) +
                " tokens; start a new conversation");
  }
  GenerateCallbacks cb = callbacks;
  if (!cb.decode) {
    cb.decode = [this](std::span<const int32_t> ids) { return generated_text(tokenizer_, ids); };
  }
  const int64_t starts[1] = {start};
  std::vector<GeneratedSequence> out = generate(model_, {turn}, sampling, stop, cb, starts);
  GeneratedSequence& r = out.front();

  messages_ = std::move(next);
  messages_.push_back({"assistant", r.text});
  last_new_ = static_cast<int64_t>(turn.size());
  cached_ = start + static_cast<int64_t>(turn.size() + r.tokens.size()) - 1;
  pending_ = {r.tokens.back()};
  const bool spellable = std::all_of(r.tokens.begin(), r.tokens.end(), [&](int32_t id) {
    return id >= 0 && id < tokenizer_.vocab_size();
  });
  if (r.finish == FinishReason::stop_string || !spellable) {
    // Tokens past a stop string are in the cache but not in the conversation, and ids past the
    // vocabulary have no text to continue from: the next turn runs the conversation again.
    cached_ = 0;
    pending_.clear();
    cached_text_.clear();
    return r;
  }
  // What the cache holds: the prompt up to the reply, then the reply's tokens as generated
  // (its stop token, still pending, spelled out).
  cached_text_ = tokenizer_.format_chat(std::vector<ChatMessage>(messages_.begin(),
                                                                 messages_.end() - 1),
                                        true) +
                 tokenizer_.decode(r.tokens, false);
  return r;
}

}  // namespace mn
