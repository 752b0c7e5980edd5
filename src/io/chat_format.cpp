// The layouts of the two chat template families (see chat_template.h).
#include <ctime>

#include "io/chat_template.h"
#include "io/tokenizer_impl.h"
#include "io/unicode.h"
#include "io/utf8.h"

namespace mn::io {
namespace {

// Jinja's trim (Python's str.strip): white space at both ends.
std::string trim(const std::string& s) {
  const CodePoints c = decode_utf8(s, "chat message");
  auto space = [&](size_t i) {
    return is_white_space(c.cps[i]) || (c.cps[i] >= 0x1C && c.cps[i] <= 0x1F);
  };
  size_t b = 0, e = c.cps.size();
  while (b < e && space(b)) ++b;
  while (e > b && space(e - 1)) --e;
  return s.substr(c.offsets[b], c.offsets[e] - c.offsets[b]);
}

// strftime_now("%d %b %Y") as transformers provides it: the local date.
std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", &local);
  return buf;
}

std::string chatml(const ChatTemplate& t, std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  if (t.default_system && !messages.empty() && messages.front().role != "system") {
    out += "<|im_start|>system\n" + *t.default_system + "<|im_end|>\n";
  }
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string llama3(const ChatTemplate& t, const std::string& bos,
                   std::span<const ChatMessage> messages, bool gen) {
  auto header = [](const std::string& role) {
    return "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
  };
  std::string out = t.writes_bos ? bos : "";
  if (t.knowledge_cutoff) {
    // Llama 3.1+: the system header comes first, always, with the conversation's system
    // message (trimmed) after the dates.
    std::string system;
    if (!messages.empty() && messages.front().role == "system") {
      system = trim(messages.front().content);
      messages = messages.subspan(1);
    }
    out += header("system") + "Cutting Knowledge Date: " + *t.knowledge_cutoff +
           "\nToday Date: " + (t.date_from_clock ? today() : t.date_default) + "\n\n" + system +
           "<|eot_id|>";
  }
  for (const auto& m : messages) {
    out += header(m.role) + (t.trim_content ? trim(m.content) : m.content) + "<|eot_id|>";
  }
  if (gen) out += header("assistant");
  return out;
}

}  // namespace

std::string render_chat(const ChatTemplate& t, const std::string& bos,
                        std::span<const ChatMessage> messages, bool add_generation_prompt) {
  switch (t.style) {
    case ChatStyle::chatml:
      return chatml(t, messages, add_generation_prompt);
    case ChatStyle::llama3:
      return llama3(t, bos, messages, add_generation_prompt);
    case ChatStyle::none:
      break;
  }
  return {};
}

}  // namespace mn::io

namespace mn {

std::string Tokenizer::format_chat(std::span<const ChatMessage> messages,
                                   bool add_generation_prompt) const {
  const io::TokenizerConfig& c = impl_->config;
  if (c.chat.style != io::ChatStyle::none) {
    return io::render_chat(c.chat, c.bos_text, messages, add_generation_prompt);
  }
  const std::string where =
      c.source.empty() ? impl_->source + " (no tokenizer_config.json)" : c.source;
  if (c.chat.text.empty()) {
    throw UnsupportedTokenizerError(where + ": chat_template is missing; format_chat needs one");
  }
  throw UnsupportedTokenizerError(where +
                                  ": chat_template is neither ChatML (<|im_start|>) nor Llama 3 "
                                  "(<|start_header_id|>); other templates are not supported");
}

std::vector<int32_t> Tokenizer::encode_chat(std::span<const ChatMessage> messages,
                                            bool add_generation_prompt) const {
  return encode(format_chat(messages, add_generation_prompt), false);
}

}  // namespace mn
